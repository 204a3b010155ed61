//! One way to notice that files changed, and to keep the last good load
//! when the changed files are broken.
//!
//! [`FileWatch`] says when watched files differ from the last time it said
//! so: notify (inotify) events wake it at once, debounced so a burst of
//! writes is one change, and a poll at a fixed interval is the fallback,
//! because a watch misses what Kubernetes does to ConfigMap and Secret
//! volumes (it swaps a `..data` symlink, often above the watched
//! directory). Either way the decision is made by comparing fingerprints
//! ([`Compare`]): a touch, or an event about a file's neighbour, is not a
//! change, and a change is reported once.
//!
//! [`Kept`] is the other half: the data of the last good load, which a
//! failed load leaves in place, and whether the failure is news (the same
//! error again is reported once, not on every change or poll).
//!
//! This module owns no data of its callers and knows nothing of DNS,
//! clusters or configuration; it imports nothing from the crate. Loading is
//! the caller's: it decides what a load is and runs it when told.

use std::collections::BTreeSet;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::Watcher as _;
use notify::event::{AccessKind, AccessMode, EventKind};
use tokio::sync::mpsc;
use tokio::time::{Interval, MissedTickBehavior};
use tracing::debug;

/// How long a burst of notify events is given to settle by default.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(100);

/// Why notify cannot watch a path (the poll still does).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileWatchError {
    /// The watch could not be created or set on the path.
    #[error("cannot watch {}: {source}", path.display())]
    Notify {
        /// The path (a directory: files are watched through their parent).
        path: PathBuf,
        /// The cause.
        source: notify::Error,
    },
}

/// What a poll compares to decide that files changed.
#[derive(Clone)]
pub(crate) enum Compare {
    /// The bytes of each watched file, symlinks followed: for small files,
    /// where a touch or a rewrite with the same bytes is not a change.
    Content,
    /// A fingerprint the caller computes (a directory tree). It runs on a
    /// blocking thread.
    With(Arc<dyn Fn() -> u64 + Send + Sync>),
}

impl fmt::Debug for Compare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Content => "Content",
            Self::With(_) => "With(..)",
        })
    }
}

/// Tells when watched files change; see the module documentation.
///
/// [`FileWatch::changed`] may be used as a `tokio::select!` branch: a wait
/// cut short loses at most a pending notify event, which the next poll
/// makes up for.
pub(crate) struct FileWatch {
    paths: Arc<[PathBuf]>,
    compare: Compare,
    debounce: Duration,
    poll: Interval,
    /// Wakes on any event: the channel holds one pending wake-up at most.
    events: mpsc::Receiver<()>,
    watcher: Option<notify::RecommendedWatcher>,
    /// The directories `watcher` watches (recursively when the path is a
    /// directory itself).
    watched: BTreeSet<(PathBuf, bool)>,
    /// The fingerprint last reported as seen.
    seen: Option<u64>,
    /// Fingerprints taken by [`FileWatch::changed`] (what tests count).
    looks: u64,
    notify_error: Option<FileWatchError>,
}

impl fmt::Debug for FileWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileWatch")
            .field("paths", &self.paths)
            .field("compare", &self.compare)
            .field("notify", &self.watcher.is_some())
            .finish_non_exhaustive()
    }
}

impl FileWatch {
    /// Watches `paths` (files, or directories with everything under them),
    /// polling every `poll` and comparing them by [`Compare::Content`].
    ///
    /// Must be called within a tokio runtime. Nothing is seen yet: the
    /// first [`FileWatch::changed`] returns at once unless
    /// [`FileWatch::mark_seen`] came first.
    pub(crate) fn new(paths: Vec<PathBuf>, poll: Duration) -> Self {
        let (wake, events) = mpsc::channel(1);
        let mut poll = tokio::time::interval(poll);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut watch = Self {
            paths: Arc::from(Vec::new()),
            compare: Compare::Content,
            debounce: DEBOUNCE,
            poll,
            events,
            watcher: None,
            watched: BTreeSet::new(),
            seen: None,
            looks: 0,
            notify_error: None,
        };
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| may_change(&e.kind)) {
                // A full channel already holds a wake-up.
                let _ = wake.try_send(());
            }
        });
        match watcher {
            Ok(w) => watch.watcher = Some(w),
            Err(source) => {
                watch.notify_error = Some(FileWatchError::Notify {
                    path: paths.first().cloned().unwrap_or_default(),
                    source,
                });
            }
        }
        watch.watch_paths(paths);
        watch
    }

    /// Compares by `compare` instead.
    #[must_use]
    pub(crate) fn comparing(mut self, compare: Compare) -> Self {
        self.compare = compare;
        self
    }

    /// Gives a burst of events `debounce` to settle instead of [`DEBOUNCE`].
    #[must_use]
    pub(crate) fn debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// Why notify does not watch every path, if it does not: the poll
    /// alone notices changes there.
    pub(crate) fn notify_error(&self) -> Option<&FileWatchError> {
        self.notify_error.as_ref()
    }

    /// Watches `paths` from now on instead (what a load read, for a file
    /// that names other files). The fingerprint seen stays that of the old
    /// paths, so the next poll is a change: a file that changed between
    /// the load and this call is not missed, at the price of one more load.
    pub(crate) fn watch_paths(&mut self, paths: Vec<PathBuf>) {
        let want: BTreeSet<(PathBuf, bool)> =
            paths.iter().filter_map(|p| watch_target(p)).collect();
        if let Some(watcher) = &mut self.watcher {
            for (dir, _) in self.watched.difference(&want) {
                // Gone already, or never set: either way not watched.
                let _ = watcher.unwatch(dir);
            }
            for (dir, recursive) in want.difference(&self.watched) {
                let mode = if *recursive {
                    notify::RecursiveMode::Recursive
                } else {
                    notify::RecursiveMode::NonRecursive
                };
                if let Err(source) = watcher.watch(dir, mode) {
                    debug!(dir = %dir.display(), error = %source, "not watched; polled only");
                    self.notify_error = Some(FileWatchError::Notify {
                        path: dir.clone(),
                        source,
                    });
                }
            }
        }
        self.watched = want;
        self.paths = Arc::from(paths);
    }

    /// Takes the files as they are now as seen: [`FileWatch::changed`]
    /// waits for them to differ from this. Call it before reading them, so
    /// that a write during the read is a change.
    pub(crate) async fn mark_seen(&mut self) {
        self.seen = Some(self.fingerprint().await);
    }

    /// Waits until the files differ from what was last seen, and takes
    /// them as seen. An event wakes it at once (after the debounce); the
    /// poll every interval otherwise.
    pub(crate) async fn changed(&mut self) {
        loop {
            tokio::select! {
                Some(()) = self.events.recv() => {
                    tokio::time::sleep(self.debounce).await;
                    while self.events.try_recv().is_ok() {}
                }
                _ = self.poll.tick() => {}
            }
            self.looks += 1;
            let now = self.fingerprint().await;
            if self.seen != Some(now) {
                self.seen = Some(now);
                return;
            }
        }
    }

    /// The fingerprint of the watched paths now, read on a blocking thread.
    async fn fingerprint(&self) -> u64 {
        let (paths, compare) = (self.paths.clone(), self.compare.clone());
        let work = move || fingerprint(&paths, &compare);
        // A panic in a caller's fingerprint is a change each time: loads
        // go on, and the loader says what is wrong with the files.
        let unknown = self.seen.map_or(0, |s| s.wrapping_add(1));
        tokio::task::spawn_blocking(work).await.unwrap_or(unknown)
    }
}

/// Whether an event can mean new content. Opening and reading are not:
/// without this, our own reads (the fingerprint, the caller's load) would
/// wake the watch again and again.
fn may_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// What notify should watch for `path`: a directory itself, recursively; a
/// file through its parent, where a replaced file or a swapped link shows.
fn watch_target(path: &Path) -> Option<(PathBuf, bool)> {
    if path.is_dir() {
        return Some((path.to_owned(), true));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty())?;
    parent.is_dir().then(|| (parent.to_owned(), false))
}

/// The fingerprint of `paths` under `compare`. An unreadable path
/// contributes its error kind, so "missing" and "back" are changes too.
fn fingerprint(paths: &[PathBuf], compare: &Compare) -> u64 {
    let mut h = DefaultHasher::new();
    match compare {
        Compare::With(f) => f().hash(&mut h),
        Compare::Content => {
            for p in paths {
                p.hash(&mut h);
                hash_result(std::fs::read(p), &mut h);
            }
        }
    }
    h.finish()
}

fn hash_result<T: Hash>(r: io::Result<T>, h: &mut DefaultHasher) {
    match r {
        Ok(v) => {
            0u8.hash(h);
            v.hash(h);
        }
        Err(e) => {
            1u8.hash(h);
            e.kind().hash(h);
        }
    }
}

/// The data of the last good load, kept when a later load fails.
#[derive(Debug)]
pub(crate) struct Kept<T> {
    data: T,
    /// The error last reported, while loads fail.
    failing: Option<String>,
}

/// What [`Kept::offer`] did with a load.
#[derive(Debug)]
pub(crate) enum Offer<E> {
    /// The load replaced the data. `recovered`: loads were failing before.
    Replaced {
        /// The previous load had failed.
        recovered: bool,
    },
    /// The load failed and the data stays. The error is news: report it.
    Failed(E),
    /// The load failed as the one before it did (the same message): the
    /// data stays, and it was reported already.
    StillFailing(E),
}

impl<T> Kept<T> {
    /// Keeps `data`, loaded at the start.
    pub(crate) fn new(data: T) -> Self {
        Self {
            data,
            failing: None,
        }
    }

    /// The data of the last good load.
    #[cfg(test)]
    pub(crate) fn get(&self) -> &T {
        &self.data
    }

    /// The error of the last load, while loads fail.
    #[cfg(test)]
    pub(crate) fn failing(&self) -> Option<&str> {
        self.failing.as_deref()
    }

    /// Takes the result of a load: good data replaces the data kept; an
    /// error leaves it, and is news unless it is the error last reported.
    pub(crate) fn offer<E: fmt::Display>(&mut self, loaded: Result<T, E>) -> Offer<E> {
        match loaded {
            Ok(data) => {
                self.data = data;
                Offer::Replaced {
                    recovered: self.failing.take().is_some(),
                }
            }
            Err(e) => {
                let message = e.to_string();
                if self.failing.as_deref() == Some(message.as_str()) {
                    Offer::StillFailing(e)
                } else {
                    self.failing = Some(message);
                    Offer::Failed(e)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
