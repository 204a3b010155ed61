//! Keeps the file source current: an inotify (notify) watch on the zones
//! directory for speed, and a one-second poll of file fingerprints as the
//! fallback (ConfigMap volumes swap symlinks that watches can miss).
//!
//! Owns the previous objects of each cluster so a reload sends only the
//! difference, and the rule that a cluster whose files fail on reload keeps
//! its previous data. Parsing is in `source::file`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::Watcher;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::SourceMsg;
use super::file::{
    ClusterLoad, ClusterObjects, Problem, Severity, cluster_dirs, diff, fingerprint,
    initial_events, load_cluster,
};
use crate::metrics::Metrics;
use crate::model::Event;

/// How often fingerprints are polled.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How long to wait for a burst of file events to settle.
const DEBOUNCE: Duration = Duration::from_millis(100);

#[derive(Debug)]
struct Known {
    fingerprint: u64,
    objects: ClusterObjects,
}

/// The state of the file source between scans.
#[derive(Debug)]
pub struct FileSource {
    root: PathBuf,
    local: Option<String>,
    clusters: BTreeMap<Arc<str>, Known>,
    reported: BTreeSet<String>,
    root_error: bool,
    metrics: Arc<Metrics>,
}

fn log_problem(p: &Problem) {
    match p.severity {
        Severity::Error => error!("{p}"),
        Severity::Warning => warn!("{p}"),
    }
}

impl FileSource {
    /// A source for `root`; nothing is read yet.
    pub fn new(root: PathBuf, local: Option<String>, metrics: Arc<Metrics>) -> Self {
        Self {
            root,
            local,
            clusters: BTreeMap::new(),
            reported: BTreeSet::new(),
            root_error: false,
            metrics,
        }
    }

    fn record(&self, load: &ClusterLoad) {
        for p in &load.problems {
            log_problem(p);
        }
        let invalid = load
            .problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .count();
        self.metrics.invalid_documents(invalid as u64);
        for (kind, n) in &load.skipped {
            self.metrics.skipped(kind, *n);
        }
    }

    /// Reads what changed since the last scan and returns the events that
    /// bring the model up to date.
    pub fn scan(&mut self) -> Vec<Event> {
        let (dirs, problems) = match cluster_dirs(&self.root) {
            Ok(x) => {
                self.root_error = false;
                x
            }
            Err(e) => {
                // Keep serving what we have; say so once.
                if !self.root_error {
                    error!(error = %e, "zones directory unreadable; keeping the data already loaded");
                    self.root_error = true;
                }
                return Vec::new();
            }
        };
        for p in problems {
            if self.reported.insert(p.to_string()) {
                log_problem(&p);
            }
        }
        let mut events = Vec::new();
        let present: BTreeSet<Arc<str>> = dirs.iter().map(|d| d.name.clone()).collect();
        if let Some(local) = &self.local
            && !present.contains(local.as_str())
            && self.reported.insert(format!("local:{local}"))
        {
            warn!(cluster = %local, "the local cluster has no directory under the zones directory");
        }
        let gone: Vec<Arc<str>> = self
            .clusters
            .keys()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        for name in gone {
            info!(cluster = %name, "cluster directory removed");
            self.clusters.remove(&name);
            events.push(Event::ClusterDown { cluster: name });
        }
        for dir in &dirs {
            // Taken before reading: a file written while it is read changes
            // the next fingerprint, so the cluster is simply read again.
            let fp = fingerprint(&dir.path);
            if self
                .clusters
                .get(&dir.name)
                .is_some_and(|k| k.fingerprint == fp)
            {
                continue;
            }
            let local = self.local.as_deref() == Some(&*dir.name);
            let load = load_cluster(dir, local);
            self.record(&load);
            match self.clusters.get_mut(&dir.name) {
                Some(known) if load.has_errors() => {
                    self.metrics.reload_error(&dir.name);
                    error!(cluster = %dir.name, "cluster files have errors; keeping the previous data until they are fixed");
                    known.fingerprint = fp;
                }
                Some(known) => {
                    let changes = diff(&load.name, &known.objects, &load.objects);
                    info!(cluster = %dir.name, changes = changes.len(), "cluster reloaded");
                    events.extend(changes);
                    known.fingerprint = fp;
                    known.objects = load.objects;
                }
                None => {
                    info!(
                        cluster = %dir.name, local, services = load.objects.services.len(),
                        slices = load.objects.slices.len(), "cluster loaded"
                    );
                    events.extend(initial_events(&load));
                    self.clusters.insert(
                        dir.name.clone(),
                        Known {
                            fingerprint: fp,
                            objects: load.objects,
                        },
                    );
                }
            }
        }
        events
    }
}

/// Runs the file source: an initial scan, then rescans on change until
/// `shutdown`.
pub async fn run(mut source: FileSource, tx: mpsc::Sender<SourceMsg>, shutdown: CancellationToken) {
    let (source_back, events) = match tokio::task::spawn_blocking(move || {
        let events = source.scan();
        (source, events)
    })
    .await
    {
        Ok(x) => x,
        Err(e) => {
            error!(error = %e, "file source scan panicked");
            return;
        }
    };
    source = source_back;
    if tx.send(SourceMsg::Events(events)).await.is_err()
        || tx.send(SourceMsg::InitialSyncDone).await.is_err()
    {
        return;
    }

    let (notify_tx, mut notify_rx) = mpsc::channel::<()>(1);
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if res.is_ok() {
            // A full channel already holds a pending rescan.
            let _ = notify_tx.try_send(());
        }
    })
    .and_then(|mut w| {
        w.watch(&source.root, notify::RecursiveMode::Recursive)
            .map(|()| w)
    });
    let _watcher = match watcher {
        Ok(w) => Some(w),
        Err(e) => {
            warn!(error = %e, "cannot watch the zones directory; polling every second only");
            None
        }
    };
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            Some(()) = notify_rx.recv() => {
                tokio::time::sleep(DEBOUNCE).await;
                while notify_rx.try_recv().is_ok() {}
            }
            _ = poll.tick() => {}
            () = shutdown.cancelled() => return,
        }
        let result = tokio::task::spawn_blocking(move || {
            let events = source.scan();
            (source, events)
        })
        .await;
        let events;
        (source, events) = match result {
            Ok(x) => x,
            Err(e) => {
                error!(error = %e, "file source scan panicked");
                return;
            }
        };
        if !events.is_empty() && tx.send(SourceMsg::Events(events)).await.is_err() {
            return;
        }
    }
}
