//! Keeps the file source current: it rescans when `filewatch` says the
//! zones directory changed (notify for speed, and a one-second poll of the
//! cluster directories' fingerprints as the fallback, since ConfigMap
//! volumes swap symlinks that watches can miss).
//!
//! Owns the previous objects of each cluster so a reload sends only the
//! difference, and the rule that a cluster whose files fail on reload keeps
//! its previous data. Parsing is in `source::file`.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::SourceMsg;
use super::feed::FeedTx;
use super::file::{
    ClusterDir, ClusterLoad, ClusterObjects, Problem, Severity, cluster_dirs, diff, fingerprint,
    initial_events_of, judge, load_cluster, within_budget,
};
use super::state::{BudgetReport, Counts};
use super::status::StatusBoard;
use crate::filewatch::{Compare, FileWatch};
use crate::model::budget::Budget;
use crate::model::objects::ObjectKey;
use crate::model::{Event, Settings};
use crate::vocab::trust::{Claims, Trust, TrustSettings};

/// How often fingerprints are polled.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Known {
    fingerprint: u64,
    /// Everything its files hold.
    objects: ClusterObjects,
    /// The budget's verdict on them: what the model was sent is
    /// `within_budget(objects, refused)`.
    refused: BTreeSet<ObjectKey>,
    budget: BudgetReport,
}

/// The state of the file source between scans.
#[derive(Debug)]
pub(crate) struct FileSource {
    root: PathBuf,
    local: Option<String>,
    clusters: BTreeMap<Arc<str>, Known>,
    reported: BTreeSet<String>,
    root_error: bool,
    /// [`SourceMsg::ClustersKnown`] was sent.
    announced: bool,
    /// What each cluster but the local one may make us hold.
    budget: Budget,
    /// What every cluster may make us answer.
    trust: TrustSettings,
    board: Arc<StatusBoard>,
}

fn log_problem(p: &Problem) {
    match p.severity {
        Severity::Error => error!("{p}"),
        Severity::Warning => warn!("{p}"),
    }
}

/// Problems listed per cluster in `/debug/clusters`; the rest are counted.
const MAX_LISTED_PROBLEMS: usize = 20;

impl FileSource {
    /// A source for `root`, reporting per cluster and counting to `board`;
    /// nothing is read yet.
    pub(crate) fn new(root: PathBuf, local: Option<String>, board: Arc<StatusBoard>) -> Self {
        Self {
            root,
            local,
            clusters: BTreeMap::new(),
            reported: BTreeSet::new(),
            root_error: false,
            announced: false,
            budget: Budget::default(),
            trust: TrustSettings::default(),
            board,
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
        let counters = self.board.counters();
        counters.invalid_documents(invalid as u64);
        for (kind, n) in &load.skipped {
            counters.skipped(kind, *n);
        }
    }

    /// Shows a loaded cluster in `/debug/clusters`: what it holds, and the
    /// problems of its files (on a failed reload, the data is the previous
    /// files': the report says so until they are fixed).
    fn report(&self, load: &ClusterLoad, objects: &ClusterObjects, kept_old: bool) {
        let counts = Counts {
            services: objects.services.len(),
            mirrors: objects.mirrors.len(),
            slices: objects.slices.len(),
            endpoints: objects.slices.values().map(|s| s.endpoints.len()).sum(),
        };
        let mut problems: Vec<String> = load
            .problems
            .iter()
            .take(MAX_LISTED_PROBLEMS)
            .map(ToString::to_string)
            .collect();
        if load.problems.len() > MAX_LISTED_PROBLEMS {
            problems.push(format!(
                "... and {} more (run `clusterset-dns check`)",
                load.problems.len() - MAX_LISTED_PROBLEMS
            ));
        }
        let invalid = load
            .problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .count() as u64;
        self.board.update(&load.name, |r| {
            r.synced = true;
            r.counts = counts;
            r.property_place = objects.place.clone();
            r.files = Some(problems);
            // Per load, not summed over reloads: the files as they are now
            // (also when a failed reload keeps serving the previous data).
            r.skipped_objects = invalid;
            r.adjusted.clone_from(&load.adjusted);
            r.last_event = Some(Instant::now());
            if kept_old {
                r.broken_since.get_or_insert_with(Instant::now);
                r.last_error = Some(
                    "cluster files have errors; serving the previous data until they are fixed"
                        .to_owned(),
                );
            } else {
                r.broken_since = None;
                r.last_error = None;
            }
        });
    }

    /// Reads what changed since the last scan and hands `emit` the events
    /// that bring the model up to date: first every cluster directory that
    /// appeared or went (so names of a cluster not loaded yet are SERVFAIL,
    /// never NXDOMAIN), then one batch per cluster read, the local cluster
    /// first. Returns false when `emit` does (the receiver is gone).
    pub(crate) fn scan(&mut self, emit: &mut dyn FnMut(SourceMsg) -> bool) -> bool {
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
                return true;
            }
        };
        for p in problems {
            if self.reported.insert(p.to_string()) {
                log_problem(&p);
            }
        }
        if !self.announce(&dirs, emit) {
            return false;
        }
        let local = self.local.clone();
        let mut ordered: Vec<&ClusterDir> = dirs.iter().collect();
        // The local cluster's mirrors decide other clusters' answers.
        ordered.sort_by_key(|d| Some(&*d.name) != local.as_deref());
        for dir in ordered {
            let events = self.read_cluster(dir);
            if !events.is_empty() && !emit(SourceMsg::Events(events)) {
                return false;
            }
        }
        true
    }

    /// Announces directories that appeared (`ClusterUp`, unsynced) and
    /// removes those that went; after the first scan, says every cluster is
    /// known.
    fn announce(&mut self, dirs: &[ClusterDir], emit: &mut dyn FnMut(SourceMsg) -> bool) -> bool {
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
            self.board.remove(&name);
            events.push(Event::ClusterDown { cluster: name });
        }
        for dir in dirs.iter().filter(|d| !self.clusters.contains_key(&d.name)) {
            let local = self.local.as_deref() == Some(&*dir.name);
            self.board
                .register(&dir.name, local, format!("zones {}", dir.path.display()));
            events.push(Event::ClusterUp {
                cluster: dir.name.clone(),
                local,
            });
        }
        if !events.is_empty() && !emit(SourceMsg::Events(events)) {
            return false;
        }
        if !self.announced {
            self.announced = true;
            return emit(SourceMsg::ClustersKnown);
        }
        true
    }

    /// Reads one cluster directory if its files changed; the events that
    /// bring the model's copy up to date.
    fn read_cluster(&mut self, dir: &ClusterDir) -> Vec<Event> {
        // Taken before reading: a file written while it is read changes
        // the next fingerprint, so the cluster is simply read again.
        let fp = fingerprint(&dir.path);
        if self
            .clusters
            .get(&dir.name)
            .is_some_and(|k| k.fingerprint == fp)
        {
            return Vec::new();
        }
        let local = self.local.as_deref() == Some(&*dir.name);
        let load = load_cluster(
            dir,
            local,
            &Trust::new(self.trust.clone(), Claims::default()),
        );
        self.record(&load);
        let Some(mut known) = self.clusters.remove(&dir.name) else {
            info!(
                cluster = %dir.name, local, services = load.objects.services.len(),
                slices = load.objects.slices.len(), "cluster loaded"
            );
            let (refused, budget) = judge(&load.objects, self.budget_of(&dir.name));
            let held = within_budget(&load.objects, &refused);
            self.report(&load, &held, false);
            self.board.budget(&dir.name, None, &budget);
            let events = initial_events_of(&load, &held);
            drop(held);
            self.clusters.insert(
                dir.name.clone(),
                Known {
                    fingerprint: fp,
                    objects: load.objects,
                    refused,
                    budget,
                },
            );
            return events;
        };
        known.fingerprint = fp;
        let events = if load.has_errors() {
            self.board.counters().reload_error(&dir.name);
            error!(cluster = %dir.name, "cluster files have errors; keeping the previous data until they are fixed");
            self.report(&load, &within_budget(&known.objects, &known.refused), true);
            Vec::new()
        } else {
            let (refused, budget) = judge(&load.objects, self.budget_of(&dir.name));
            let changes = self.changes(&dir.name, &known, &load.objects, &refused, &budget);
            info!(cluster = %dir.name, changes = changes.len(), "cluster reloaded");
            self.report(&load, &within_budget(&load.objects, &refused), false);
            known.objects = load.objects;
            known.refused = refused;
            known.budget = budget;
            changes
        };
        self.clusters.insert(dir.name.clone(), known);
        events
    }

    fn budget_of(&self, cluster: &str) -> Budget {
        self.budget
            .for_cluster(self.local.as_deref() == Some(cluster))
    }

    /// The events from what the model holds of a cluster to `objects`
    /// within `refused`, with the budget's report updated.
    fn changes(
        &self,
        name: &Arc<str>,
        known: &Known,
        objects: &ClusterObjects,
        refused: &BTreeSet<ObjectKey>,
        budget: &BudgetReport,
    ) -> Vec<Event> {
        self.board.budget(name, Some(&known.budget), budget);
        diff(
            name,
            &within_budget(&known.objects, &known.refused),
            &within_budget(objects, refused),
        )
    }

    /// Takes reloaded settings: under new trust settings every cluster's
    /// files are read again (conversion applies them, and only the
    /// converted objects are kept), under a new budget only judged again.
    /// Hands `emit` what changed.
    pub(crate) fn reconfigure(
        &mut self,
        settings: &Settings,
        emit: &mut dyn FnMut(SourceMsg) -> bool,
    ) -> bool {
        if settings.trust == self.trust {
            return self.rebudget(settings.budget, emit);
        }
        self.trust = settings.trust.clone();
        self.budget = settings.budget;
        for known in self.clusters.values_mut() {
            // Read again, whatever the fingerprint says.
            known.fingerprint = known.fingerprint.wrapping_add(1);
        }
        self.scan(emit)
    }

    /// Judges every cluster under a new budget (a configuration reload)
    /// and hands `emit` what changed.
    pub(crate) fn rebudget(
        &mut self,
        budget: Budget,
        emit: &mut dyn FnMut(SourceMsg) -> bool,
    ) -> bool {
        if budget == self.budget {
            return true;
        }
        self.budget = budget;
        let names: Vec<Arc<str>> = self.clusters.keys().cloned().collect();
        for name in names {
            let Some(mut known) = self.clusters.remove(&name) else {
                continue;
            };
            let (refused, report) = judge(&known.objects, self.budget_of(&name));
            let events = self.changes(&name, &known, &known.objects, &refused, &report);
            known.refused = refused;
            known.budget = report;
            self.clusters.insert(name, known);
            if !events.is_empty() && !emit(SourceMsg::Events(events)) {
                return false;
            }
        }
        true
    }
}

/// Runs `work` (a scan, a new budget) on a blocking thread, handing every
/// batch to the model as it comes. Returns the source, or `None` when the
/// model is gone (or the work panicked).
async fn blocking(
    mut source: FileSource,
    tx: &FeedTx,
    work: impl FnOnce(&mut FileSource, &mut dyn FnMut(SourceMsg) -> bool) -> bool + Send + 'static,
) -> Option<FileSource> {
    let tx = tx.clone();
    let scanned = tokio::task::spawn_blocking(move || {
        let alive = work(&mut source, &mut |msg| tx.send(msg).is_ok());
        (source, alive)
    })
    .await;
    match scanned {
        Ok((source, true)) => Some(source),
        Ok((_, false)) => None,
        Err(e) => {
            error!(error = %e, "file source scan panicked");
            None
        }
    }
}

/// Runs the file source: an initial scan, then rescans on change until
/// `shutdown`; the budget of `settings` applies to every cluster but the
/// local one, its trust settings to every cluster, and reloaded ones are
/// applied at once.
pub(crate) async fn run(
    mut source: FileSource,
    tx: FeedTx,
    mut settings: watch::Receiver<Arc<Settings>>,
    shutdown: CancellationToken,
) {
    {
        let s = settings.borrow_and_update();
        source.budget = s.budget;
        source.trust = s.trust.clone();
    }
    let root = source.root.clone();
    let mut changes = FileWatch::new(vec![root.clone()], POLL_INTERVAL)
        .comparing(Compare::With(Arc::new(move || tree_fingerprint(&root))))
        .debounce(crate::filewatch::DEBOUNCE);
    if let Some(e) = changes.notify_error() {
        warn!(error = %e, "cannot watch the zones directory; polling every second only");
    }
    // Before the first scan, so a file written during it is a change.
    changes.mark_seen().await;
    let scan = |s: &mut FileSource, emit: &mut dyn FnMut(SourceMsg) -> bool| s.scan(emit);
    let Some(mut source) = blocking(source, &tx, scan).await else {
        return;
    };
    loop {
        tokio::select! {
            () = changes.changed() => {}
            Ok(()) = settings.changed() => {
                let new = settings.borrow_and_update().clone();
                let reconfigure = move |s: &mut FileSource, emit: &mut dyn FnMut(SourceMsg) -> bool| {
                    s.reconfigure(&new, emit)
                };
                source = match blocking(source, &tx, reconfigure).await {
                    Some(s) => s,
                    None => return,
                };
                continue;
            }
            () = shutdown.cancelled() => return,
        }
        source = match blocking(source, &tx, scan).await {
            Some(s) => s,
            None => return,
        };
    }
}

/// Everything a scan compares: the cluster directories, the fingerprint of
/// each, and the problems of the layout. When it is unchanged a scan would
/// read nothing, so none is made.
fn tree_fingerprint(root: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    match cluster_dirs(root) {
        Ok((dirs, problems)) => {
            for dir in &dirs {
                dir.name.hash(&mut h);
                fingerprint(&dir.path).hash(&mut h);
            }
            for p in &problems {
                p.to_string().hash(&mut h);
            }
        }
        Err(e) => e.to_string().hash(&mut h),
    }
    h.finish()
}
