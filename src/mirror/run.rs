//! The mirror controller's loop: keeps the cache of the objects we own in
//! the local cluster up to date from its watches, recomputes the desired
//! objects of the services a model batch touched, and, while this process
//! holds the Lease, writes the difference for those objects. A start, a
//! resync, a leadership change, news from the watches, or a change of which
//! clusters have synced looks at every object instead.
//!
//! Thin: what to write is `mirror::desired` and `mirror::reconcile`, how a
//! request is made is `mirror::api`, what the watches say is
//! `mirror::watch` and `mirror::cache`. This module owns the status-code
//! policy: what a 409, a 404 or a 422 means for each write, and what is
//! counted. Writes stop the moment leadership is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::api::{LocalApi, McsApis, discover_mcs};
use super::cache::{Cache, is_ours};
use super::desired::mcs::{derived_ips, derived_name};
use super::desired::{DesiredState, McsSettings, MirrorSettings};
use super::feed::{Changed, FeedRx, Update};
use super::lease::{self, LeaseConfig};
use super::reconcile::{Hold, Op, contains, plan, plan_some};
use super::stats::MirrorStats;
use super::sweep;
use super::watch::{self as watches, Change, ExportChange};
use super::{Desired, Kind, Object, ObjectRef};
use crate::k8s::crd::ServiceExport;
use crate::k8s::index::{Index, Relist};
use crate::k8s::retry::retry_logged;
use crate::model::objects::ObjectKey;
use crate::model::{ClusterSet, Settings};
use crate::vocab::place::Place;

/// The model's states for the mirror ([`super::feed`]).
pub(crate) type ModelFeed = FeedRx;

/// What the controller needs.
#[derive(Clone)]
pub struct MirrorConfig {
    /// The local cluster's client.
    pub client: Client,
    /// The local cluster's name.
    pub local: Arc<str>,
    /// Remote clusters' DNS domain, for `remote-svc-fq-name`.
    pub cluster_domain: String,
    /// Flat-mode mirrors without endpoints (exactly Linkerd's shape).
    pub linkerd_flat_compat: bool,
    /// Where Linkerd's Leases would be (`None`: no Linkerd Links).
    pub link_namespace: Option<String>,
    /// Leader election.
    pub lease: LeaseConfig,
    /// Full resync period (repairs anything the watches missed, retries
    /// objects that were blocked).
    pub resync: Duration,
    /// Federated grace, as the DNS side uses it.
    pub federated_grace: Duration,
    /// `--mcs`: derived Services, their slices and ServiceImports, and the
    /// conditions of the local ServiceExports.
    pub mcs: bool,
}

impl std::fmt::Debug for MirrorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // kube's Client has no Debug.
        f.debug_struct("MirrorConfig")
            .field("local", &self.local)
            .field("cluster_domain", &self.cluster_domain)
            .field("linkerd_flat_compat", &self.linkerd_flat_compat)
            .field("link_namespace", &self.link_namespace)
            .field("lease", &self.lease)
            .field("resync", &self.resync)
            .field("federated_grace", &self.federated_grace)
            .field("mcs", &self.mcs)
            .finish_non_exhaustive()
    }
}

/// What one write did: the `(op, outcome)` counters it adds (a write that
/// falls back to a repair adds two), and whether it changed the cluster.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Done {
    changed: bool,
    counted: Vec<(&'static str, &'static str)>,
}

impl Done {
    fn counted(op: &'static str, outcome: &'static str) -> Self {
        Self {
            changed: false,
            counted: vec![(op, outcome)],
        }
    }

    fn changed(mut self) -> Self {
        self.changed = true;
        self
    }

    fn then(mut self, next: Self) -> Self {
        self.changed |= next.changed;
        self.counted.extend(next.counted);
        self
    }
}

struct Controller {
    config: MirrorConfig,
    api: LocalApi,
    stats: Arc<MirrorStats>,
    cache: Cache,
    unowned: BTreeSet<ObjectRef>,
    reported: BTreeSet<String>,
    linkerd: BTreeSet<Arc<str>>,
    /// The desired objects, as of `base`.
    state: DesiredState,
    /// The model state `state` was computed from.
    base: Option<ClusterSet>,
    /// The newest model state.
    set: Option<ClusterSet>,
    /// What changed between `base` and `set` (`None`: nothing), and since
    /// when.
    pending: Option<(Changed, Instant)>,
    /// Every object is to be looked at on the next pass, not only those of
    /// the services that changed.
    plan_all: bool,
    /// The clusters held back last pass: when they change, every object is
    /// looked at (objects of a cluster that just synced may be stale).
    last_hold: Option<(BTreeSet<Arc<str>>, bool)>,
    /// The MCS resources the local cluster serves (`--mcs`).
    mcs: McsApis,
    /// The derived Services' ClusterIPs the desired state was computed
    /// with (the ServiceImports' `ips`).
    derived_ips: Arc<BTreeMap<ObjectKey, Vec<IpAddr>>>,
    /// The local ServiceExports as last listed or written, and the
    /// relist bookkeeping of their watch.
    exports: Exports,
    exports_relist: Relist<ObjectKey>,
    /// Without `--mcs`: whether to look for leftover ServiceImports on the
    /// next pass as leader ([`sweep`]); set by every full pass until a look
    /// is done.
    sweep: Sweep,
    /// The local cluster's configured place, from the answer settings (it
    /// reloads): what the desired state was computed with.
    local_place: Place,
}

/// The local ServiceExports by namespace and name (`--mcs`), as their
/// watch and our status writes leave them.
#[derive(Debug, Default)]
struct Exports(BTreeMap<ObjectKey, ServiceExport>);

impl Index<ServiceExport> for Exports {
    type Key = ObjectKey;

    fn key(&self, e: &ServiceExport) -> Option<ObjectKey> {
        let meta = &e.metadata;
        Some(ObjectKey::new(
            meta.namespace.as_deref()?,
            meta.name.as_deref()?,
        ))
    }

    fn apply(&mut self, e: ServiceExport) {
        if let Some(k) = self.key(&e) {
            self.0.insert(k, e);
        }
    }

    fn delete(&mut self, key: &ObjectKey, _: Option<ServiceExport>) {
        self.0.remove(key);
    }

    fn keys(&self) -> Vec<ObjectKey> {
        self.0.keys().cloned().collect()
    }
}

/// Where the look for leftover ServiceImports stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sweep {
    /// Not due before the next full pass.
    Waiting,
    /// Due on the next pass as leader.
    Due,
    /// Done, or not needed (`--mcs` is on).
    Done,
}

/// Before a cluster's first sync its part of the desired state is unknown;
/// a refused service's mirrors are left as they are.
fn hold(set: &ClusterSet, state: &DesiredState) -> Hold {
    Hold {
        unsynced: set
            .iter()
            .filter(|c| !c.health.synced)
            .map(|c| c.name.clone())
            .collect(),
        waiting: set
            .iter()
            .any(|c| !c.health.synced && !c.health.sync_given_up),
        refused: state.held(),
    }
}

impl Controller {
    fn new(config: MirrorConfig, stats: Arc<MirrorStats>) -> Self {
        let sweep = if config.mcs {
            Sweep::Done
        } else {
            Sweep::Waiting
        };
        Self {
            api: LocalApi::new(config.client.clone(), &config.lease.identity),
            config,
            stats,
            cache: Cache::default(),
            unowned: BTreeSet::new(),
            reported: BTreeSet::new(),
            linkerd: BTreeSet::new(),
            state: DesiredState::default(),
            base: None,
            set: None,
            pending: None,
            plan_all: true,
            last_hold: None,
            mcs: McsApis::default(),
            derived_ips: Arc::default(),
            exports: Exports::default(),
            exports_relist: Relist::default(),
            sweep,
            local_place: Place::default(),
        }
    }

    /// Takes the local place of the answer settings in. A new one moves
    /// every `<svc>-nearest` tier and the zone of the local cluster's MCS
    /// endpoints, and the model reports no service for it: everything is
    /// recomputed on the next pass.
    fn set_local_place(&mut self, place: &Place) {
        if *place == self.local_place {
            return;
        }
        self.local_place = place.clone();
        let since = self.pending.take().map_or_else(Instant::now, |(_, t)| t);
        self.pending = Some((Changed::All, since));
    }

    /// Takes a model state in: the newest wins, what changed accumulates.
    fn take(&mut self, u: Update) {
        self.set = Some(u.set);
        match &mut self.pending {
            Some((changed, _)) => changed.merge(u.changed),
            None => self.pending = Some((u.changed, u.since)),
        }
    }

    /// Takes one watch event into the cache. Returns whether it is news.
    fn on_watch(&mut self, (kind, event): Change) -> bool {
        self.cache.on_event(kind, event)
    }

    fn settings(&self) -> MirrorSettings {
        MirrorSettings {
            local: self.config.local.clone(),
            cluster_domain: self.config.cluster_domain.clone(),
            linkerd_flat_compat: self.config.linkerd_flat_compat,
            linkerd_managed: self.linkerd.clone(),
            now: Instant::now(),
            federated_grace: self.config.federated_grace,
            local_place: self.local_place.clone(),
            mcs: McsSettings {
                enabled: self.config.mcs,
                import_version: self.mcs.import.as_ref().map(|ar| Arc::from(&*ar.version)),
                derived_ips: self.derived_ips.clone(),
            },
        }
    }

    /// The MCS services whose derived Service's ClusterIPs differ from
    /// those the desired state was computed with (the API allocated or
    /// changed them); the new ones become the input. Only the Services the
    /// cache saw change since the last pass are looked at.
    fn moved_ips(&mut self) -> BTreeSet<ObjectKey> {
        let touched = self.cache.take_touched_services();
        if !self.config.mcs || touched.is_empty() {
            return BTreeSet::new();
        }
        let actual = self.cache.actual();
        let mut now = (*self.derived_ips).clone();
        now.retain(|svc, _| {
            let derived = ObjectRef {
                kind: Kind::Service,
                namespace: svc.namespace.clone(),
                name: derived_name(&svc.name).into(),
            };
            !touched.contains(&derived)
        });
        now.extend(derived_ips(touched.iter().filter_map(
            |k| match &actual.get(k)?.object {
                Object::Service(s) => Some((k, &**s)),
                Object::EndpointSlice(_) | Object::ServiceImport { .. } => None,
            },
        )));
        let old = &self.derived_ips;
        let moved: BTreeSet<ObjectKey> = now
            .iter()
            .filter(|(k, v)| old.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .chain(old.keys().filter(|k| !now.contains_key(*k)).cloned())
            .collect();
        if !moved.is_empty() {
            self.derived_ips = Arc::new(now);
        }
        moved
    }

    /// Retries what was blocked and looks again for Linkerd's own mirror;
    /// everything is recomputed from scratch on the next pass.
    async fn start_over(&mut self) {
        self.unowned.clear();
        self.linkerd =
            watches::linkerd_managed(&self.config.client, self.config.link_namespace.as_deref())
                .await;
        self.plan_all = true;
        let since = self.pending.take().map_or_else(Instant::now, |(_, t)| t);
        self.pending = Some((Changed::All, since));
        if self.sweep == Sweep::Waiting {
            self.sweep = Sweep::Due;
        }
    }

    /// Without `--mcs`, as leader: the look for leftover ServiceImports,
    /// when one is due (after a full pass, until one is done).
    async fn sweep_if_due(&mut self) {
        if self.sweep == Sweep::Due {
            self.sweep = match sweep::leftover_imports(&self.config.client).await {
                sweep::Swept::Done(_) => Sweep::Done,
                sweep::Swept::Again => Sweep::Waiting,
            };
        }
    }

    /// Takes one ServiceExport watch event in (`--mcs`).
    fn on_export(&mut self, event: ExportChange) {
        self.exports_relist.handle(&mut self.exports, event);
    }

    /// Brings the conditions of every local ServiceExport to what the
    /// model says (`--mcs`); stops at once if leadership is lost.
    async fn write_statuses(&mut self, leading: &watch::Receiver<bool>) {
        let (Some(set), Some(ar)) = (self.set.as_ref(), self.mcs.export.as_ref()) else {
            return;
        };
        let now = k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
            .to_string();
        let due: Vec<(ObjectKey, ServiceExport)> = self
            .exports
            .0
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), super::status::export_status(set, v, &now)?)))
            .collect();
        for (key, body) in due {
            if !*leading.borrow() {
                return;
            }
            let done = self
                .api
                .apply_export_status(ar, &key.namespace, &key.name, &body)
                .await;
            let outcome = match done {
                Ok(v) => {
                    self.exports.0.insert(key, v);
                    "ok"
                }
                Err(e) => {
                    // Retried on the next pass (the export is unchanged).
                    debug!(export = %key, error = %e, "ServiceExport status not written");
                    "error"
                }
            };
            self.stats.write("ServiceExport", "status", outcome);
        }
    }

    /// Brings the desired objects to `set`: from scratch when everything
    /// may have changed, else only the services that did. Returns the
    /// objects to look at (`None`: all). Problems are logged once each.
    fn want(&mut self, set: &ClusterSet, changed: Option<Changed>) -> Option<BTreeSet<ObjectRef>> {
        let moved = self.moved_ips();
        let settings = self.settings();
        let mut touched = match (changed, &self.base) {
            (None, _) => Some(BTreeSet::new()),
            (Some(Changed::Some(dirty)), Some(base)) => {
                let keys = DesiredState::keys_of(&dirty, base, set);
                Some(self.state.update(set, keys, &settings))
            }
            (Some(_), _) => {
                self.state = DesiredState::build(set, &settings);
                None
            }
        };
        // A derived Service's ClusterIP arrived: its import's `ips`.
        if let Some(t) = touched.as_mut()
            && !moved.is_empty()
        {
            t.extend(self.state.update(set, moved, &settings));
        }
        self.base = Some(set.clone());
        self.stats.set_problems(self.state.problem_count());
        for p in self.state.take_fresh() {
            let text = format!("{}: {}", p.object, p.message);
            if self.reported.insert(text.clone()) {
                warn!("mirror: {text}");
            }
        }
        touched
    }

    /// Computes and writes the difference. Stops at once if leadership is
    /// lost.
    async fn reconcile(&mut self, leading: &watch::Receiver<bool>) {
        let Some(set) = self.set.clone() else { return };
        let (changed, since) = self.pending.take().unzip();
        let mut keys = self.want(&set, changed);
        let hold = hold(&set, &self.state);
        let held = (hold.unsynced.clone(), hold.waiting);
        if std::mem::take(&mut self.plan_all) || self.last_hold.as_ref() != Some(&held) {
            keys = None;
        }
        self.last_hold = Some(held);
        if keys.as_ref().is_some_and(BTreeSet::is_empty) {
            return;
        }
        let mut wrote = false;
        // A create that finds someone else's Service changes what is wanted
        // (its slices would feed that Service): plan again from there. Each
        // round settles at least one object, so this ends.
        for _ in 0..=self.state.objects().len() {
            let unowned_before = self.unowned.len();
            let (want, actual) = (self.state.objects(), self.cache.actual());
            let ops = match &keys {
                Some(keys) => plan_some(want, keys, actual, &self.unowned, |o| hold.holds(o)),
                None => plan(want.values(), actual, &self.unowned, |o| hold.holds(o)),
            };
            if ops.is_empty() {
                break;
            }
            for op in ops {
                if !*leading.borrow() {
                    info!("mirror writes stopped: not the leader");
                    return;
                }
                wrote |= self.execute(op).await;
                if self.unowned.len() != unowned_before {
                    break;
                }
            }
            if self.unowned.len() == unowned_before {
                break;
            }
        }
        if wrote && let Some(t) = since {
            self.stats.observe_latency(t.elapsed());
        }
        self.stats
            .set_objects(self.cache.actual().len(), self.unowned.len());
    }

    /// One write, counted. Returns whether it changed the cluster.
    async fn execute(&mut self, op: Op) -> bool {
        let kind = op.key().kind.as_str();
        let done = match op {
            Op::Create(d) => self.create(d).await,
            Op::Apply(d) => self.apply(d).await,
            Op::Delete {
                key,
                uid,
                resource_version,
            } => self.delete(key, uid, resource_version).await,
        };
        for (op, outcome) in done.counted {
            self.stats.write(kind, op, outcome);
        }
        done.changed
    }

    /// POST. 409: a same-named object exists (see [`Self::conflict`]);
    /// 404: the namespace does not exist here (said once per namespace,
    /// retried every pass).
    async fn create(&mut self, d: Desired) -> Done {
        let key = d.key.clone();
        match self.api.create(&d).await {
            Ok(v) => {
                self.cache.wrote(key, v);
                Done::counted("create", "ok").changed()
            }
            Err(e) if e.code() == Some(409) => self.conflict(key).await,
            Err(e) if e.code() == Some(404) => {
                if self.reported.insert(format!("ns:{}", key.namespace)) {
                    warn!(object = %key, error = %e, "namespace missing in the local cluster; not mirrored until it exists");
                }
                Done::counted("create", "missing_namespace")
            }
            Err(e) => {
                warn!(object = %key, error = %e, "create failed");
                Done::counted("create", "error")
            }
        }
    }

    /// After a 409 on create: the object is ours only if it carries our
    /// label (our own create raced the watch). Anyone else's is left alone
    /// for good (until the next resync), with one Warning Event.
    async fn conflict(&mut self, key: ObjectRef) -> Done {
        let found = self.api.get(&key).await;
        if let Ok(v) = &found
            && is_ours(v)
        {
            self.cache.wrote(key, v.clone());
            return Done::default();
        }
        // Said once per object however often it is retried.
        if self.reported.insert(format!("unowned:{key}")) {
            warn!(object = %key, "a same-named object without our managed-by label exists; left alone");
            let uid = found.ok().and_then(|v| v.meta().uid.clone());
            if let Err(e) = self.api.not_owned(&key, uid).await {
                debug!(object = %key, error = %e, "could not record the event");
            }
        }
        self.unowned.insert(key);
        Done::counted("create", "not_owned")
    }

    /// Server-side apply. 422 (apply refused the object, e.g. a duplicate
    /// port name against another manager's entry) and an answer still
    /// without our fields both fall back to a repair; 409 is retried on
    /// the next pass.
    async fn apply(&mut self, d: Desired) -> Done {
        let key = d.key.clone();
        match self.api.apply(&d).await {
            Ok(v) if !contains(&v, &d.object) => {
                Done::counted("apply", "ok").then(self.repair(&key, &d.object).await)
            }
            Ok(v) => {
                self.cache.wrote(key, v);
                Done::counted("apply", "ok").changed()
            }
            Err(e) if e.code() == Some(422) => {
                Done::counted("apply", "invalid").then(self.repair(&key, &d.object).await)
            }
            Err(e) if e.code() == Some(409) => {
                debug!(object = %key, error = %e, "apply conflict; retried on the next pass");
                Done::counted("apply", "conflict")
            }
            Err(e) => {
                warn!(object = %key, error = %e, "apply failed");
                Done::counted("apply", "error")
            }
        }
    }

    /// Puts an object of ours back when apply cannot: another manager owns
    /// entries of a list we set (a port edited by hand), and apply merges
    /// lists by key, keeping theirs (or failing on a duplicate port name).
    /// A merge patch replaces the lists.
    async fn repair(&mut self, key: &ObjectRef, body: &Object) -> Done {
        match self.api.merge(key, body).await {
            Ok(v) => {
                self.cache.wrote(key.clone(), v);
                Done::counted("repair", "ok").changed()
            }
            Err(e) => {
                warn!(object = %key, error = %e, "repair failed");
                Done::counted("repair", "error")
            }
        }
    }

    /// Delete with uid and resourceVersion preconditions. 404: already
    /// gone, which is what we wanted; 409: changed since we listed it (by
    /// someone else, or recreated), so not ours to delete blind.
    async fn delete(
        &mut self,
        key: ObjectRef,
        uid: Option<String>,
        resource_version: Option<String>,
    ) -> Done {
        match self.api.delete(&key, uid.clone(), resource_version).await {
            Ok(()) => {
                self.cache.removed(&key, uid);
                Done::counted("delete", "ok").changed()
            }
            Err(e) if e.code() == Some(404) => {
                self.cache.removed(&key, uid);
                Done::counted("delete", "ok").changed()
            }
            Err(e) if e.code() == Some(409) => {
                debug!(object = %key, error = %e, "changed since listed; not deleted");
                Done::counted("delete", "conflict")
            }
            Err(e) => {
                warn!(object = %key, error = %e, "delete failed");
                Done::counted("delete", "error")
            }
        }
    }
}

/// What woke the loop.
enum Wake {
    /// The model changed.
    Model,
    /// Watch events were taken into the cache; whether any was news.
    Watched(bool),
    /// Leadership changed.
    Leading,
    /// A local ServiceExport changed (`--mcs`).
    Exports,
    /// The answer settings were reloaded.
    Settings,
    /// The resync period passed.
    Resync,
    /// Shutdown, the model feed closed, or the lease task ended.
    Stop,
}

/// The loop's inputs besides the controller.
struct Inputs {
    model: ModelFeed,
    settings: watch::Receiver<Arc<Settings>>,
    changes: mpsc::Receiver<Change>,
    exports: mpsc::Receiver<ExportChange>,
    /// Keeps the export channel open when nothing watches exports.
    _exports_tx: Option<mpsc::Sender<ExportChange>>,
    leading: watch::Receiver<bool>,
    resync: tokio::time::Interval,
    lease_task: JoinHandle<()>,
    shutdown: CancellationToken,
}

impl Inputs {
    async fn next(&mut self, c: &mut Controller) -> Wake {
        tokio::select! {
            open = self.model.changed() => if open { Wake::Model } else { Wake::Stop },
            // A closed channel disables the branch: the settings stay.
            Ok(()) = self.settings.changed() => Wake::Settings,
            m = self.changes.recv() => {
                let Some(change) = m else { return Wake::Stop };
                let mut news = c.on_watch(change);
                // Take whatever else is queued before reconciling once.
                while let Ok(change) = self.changes.try_recv() {
                    news |= c.on_watch(change);
                }
                Wake::Watched(news)
            }
            e = self.exports.recv() => {
                let Some(e) = e else { return Wake::Stop };
                c.on_export(e);
                while let Ok(e) = self.exports.try_recv() {
                    c.on_export(e);
                }
                Wake::Exports
            }
            r = self.leading.changed() => if r.is_ok() { Wake::Leading } else { Wake::Stop },
            _ = self.resync.tick() => Wake::Resync,
            // Without the election nothing may write: end, and the process
            // with it (the server treats a task that ends as fatal).
            r = &mut self.lease_task => {
                if !self.shutdown.is_cancelled() {
                    tracing::error!(result = ?r.err(), "the lease task ended; the mirror controller stops");
                }
                Wake::Stop
            }
            () = self.shutdown.cancelled() => Wake::Stop,
        }
    }
}

/// Runs the controller until `shutdown`, fed by the model's states and the
/// answer settings.
pub(crate) async fn run(
    config: MirrorConfig,
    (model, mut settings): (ModelFeed, watch::Receiver<Arc<Settings>>),
    stats: Arc<MirrorStats>,
    shutdown: CancellationToken,
) {
    stats.enable();
    let (lead_tx, leading) = watch::channel(false);
    let lease_task = tokio::spawn(lease::run(
        config.client.clone(),
        config.lease.clone(),
        lead_tx,
        shutdown.clone(),
    ));
    // The gauge follows the Lease itself, not the controller's loop, which
    // may be waiting on a hung API call when leadership goes.
    tokio::spawn({
        let mut leading = leading.clone();
        let stats = stats.clone();
        async move {
            while leading.changed().await.is_ok() {
                stats.set_leader(*leading.borrow_and_update());
            }
        }
    });
    let mut c = Controller::new(config, stats.clone());
    c.set_local_place(&settings.borrow_and_update().local_place);
    let (exports_tx, exports) = mpsc::channel::<ExportChange>(256);
    let exports_tx = start_mcs(&mut c, exports_tx, &shutdown).await;
    let (tx, changes) = mpsc::channel::<Change>(256);
    watches::spawn(
        &c.config.client,
        c.mcs.import.as_ref(),
        &tx,
        &shutdown,
        &stats,
    );
    let mut resync = tokio::time::interval(c.config.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut inputs = Inputs {
        model,
        settings,
        changes,
        exports,
        _exports_tx: exports_tx,
        leading,
        resync,
        lease_task,
        shutdown,
    };
    loop {
        let full = match inputs.next(&mut c).await {
            Wake::Stop => return,
            // The export conditions are written after any pass.
            Wake::Model | Wake::Exports => false,
            Wake::Settings => {
                let place = inputs.settings.borrow_and_update().local_place.clone();
                c.set_local_place(&place);
                false
            }
            Wake::Watched(news) => {
                // Someone else's write to our objects: every object is
                // compared again (nothing is recomputed for it).
                c.plan_all |= news;
                false
            }
            // A new leadership, or a resync: everything from scratch.
            Wake::Leading | Wake::Resync => true,
        };
        if let Some(update) = inputs.model.take() {
            c.take(update);
        }
        if full {
            c.start_over().await;
        }
        if !*inputs.leading.borrow() || !c.cache.listed() {
            continue;
        }
        // A write waiting on a hung API server must not go on once the
        // Lease is lost: the pass is dropped with its request, and the
        // next leadership starts over from scratch.
        let mut lost = inputs.leading.clone();
        tokio::select! {
            () = c.pass(&inputs.leading) => {}
            () = leadership_lost(&mut lost) => {
                warn!("mirror writes stopped mid-pass: the lease was lost");
            }
        }
    }
}

/// Resolves once `leading` says false (or its sender is gone).
async fn leadership_lost(leading: &mut watch::Receiver<bool>) {
    let _ = leading.wait_for(|l| !*l).await;
}

impl Controller {
    /// One pass as leader: the sweep when due, the writes, the export
    /// conditions.
    async fn pass(&mut self, leading: &watch::Receiver<bool>) {
        self.sweep_if_due().await;
        if self.pending.is_some() || self.plan_all {
            self.reconcile(leading).await;
            // A derived Service we just created came back with its
            // ClusterIP: its ServiceImport's `ips` follow at once.
            if self.config.mcs {
                self.reconcile(leading).await;
            }
        }
        self.write_statuses(leading).await;
    }
}

/// Which MCS resources the local cluster serves, asked until it answers
/// ([`retry_logged`]: the watches' backoff) or the mirror stops (`None`).
/// Until then the mirror writes nothing: a local API that cannot answer
/// discovery cannot take writes either, and writing derived Services
/// without knowing whether their ServiceImports can exist would be undone
/// once it answers.
async fn discover_until_answered(client: &Client, shutdown: &CancellationToken) -> Option<McsApis> {
    retry_logged(
        shutdown,
        "mirror: MCS API discovery (nothing is written until it answers)",
        || discover_mcs(client),
    )
    .await
}

/// With `--mcs`: finds which MCS resources the local cluster serves
/// ([`discover_until_answered`]) and starts the watch of its
/// ServiceExports. Returns `exports_tx` when nothing watches them, to be
/// kept (the loop would take a closed channel for a stop). A cluster that
/// serves no ServiceImport gets derived Services and slices only; whether
/// it serves one is not asked again before a restart.
async fn start_mcs(
    c: &mut Controller,
    exports_tx: mpsc::Sender<ExportChange>,
    shutdown: &CancellationToken,
) -> Option<mpsc::Sender<ExportChange>> {
    if !c.config.mcs {
        return Some(exports_tx);
    }
    let Some(apis) = discover_until_answered(&c.config.client, shutdown).await else {
        return Some(exports_tx);
    };
    match &apis.import {
        Some(ar) => {
            info!(version = %ar.version, "mirror: writing ServiceImports");
            c.cache.expect(Kind::ServiceImport);
        }
        None => warn!(
            "the local cluster serves no ServiceImport (multicluster.x-k8s.io); derived Services and their slices only"
        ),
    }
    c.api.set_imports(apis.import.clone());
    let keep = match &apis.export {
        Some(ar) => {
            watches::spawn_exports(&c.config.client, ar, exports_tx, shutdown.clone());
            None
        }
        None => Some(exports_tx),
    };
    c.mcs = apis;
    keep
}

#[cfg(test)]
mod tests;
