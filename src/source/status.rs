//! Per-cluster status of the sources, for `/debug/clusters` and the
//! per-cluster metrics: sync state, staleness, last event, watch restarts,
//! objects held, objects skipped or clamped by reason, the gateway probe,
//! what the cluster's API client layer sees (its last answer, requests in
//! flight against the bound), where the cluster is and who said so, and
//! problems (missing credentials, a bad Link, invalid files); plus the file
//! source's counters that outlive a cluster ([`SourceCounters`]).
//!
//! Written by the live cluster tasks and the file source, read by the admin
//! server and the metrics encoder. It must not drive any decision (health
//! that changes answers travels as model events), and must not name or
//! encode metrics (the top-level `metrics` module does). Every value it
//! hands out that can become a label comes from a fixed set or a validated
//! cluster name, never from a document's text.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::convert::{Adjustment, Reason};
use super::state::{BudgetReport, Counts, McsReport};
use crate::k8s::layer::ApiStats;
use crate::vocab::place::{Place, PlaceFrom};
use crate::vocab::trust::Claims;

/// Objects skipped or clamped, by what was done and why. Both keys come
/// from fixed sets, so they can be metric labels.
pub(crate) type AdjustedCounts = BTreeMap<(Adjustment, Reason), u64>;

/// The gateway probe as last seen.
#[derive(Debug, Clone, Default)]
pub struct ProbeStatus {
    /// `None` until the first result.
    pub alive: Option<bool>,
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// Probes that succeeded.
    pub successes: u64,
    /// Probes that failed.
    pub failures: u64,
    /// Latency of the last successful probe.
    pub last_latency: Option<Duration>,
    /// Error of the last failed probe.
    pub last_error: Option<String>,
}

/// One cluster's status.
#[derive(Debug, Clone)]
pub struct ClusterReport {
    /// The local cluster.
    pub local: bool,
    /// Where it was declared.
    pub origin: String,
    /// When its current watches started.
    pub started: Instant,
    /// Synced at least once.
    pub synced: bool,
    /// Not synced within the sync timeout: readiness no longer waits.
    pub gave_up: bool,
    /// Watch broken (or the API server silent) since.
    pub broken_since: Option<Instant>,
    /// The API server has answered nothing for the cluster timeout: silent
    /// since its last answer.
    pub silent_since: Option<Instant>,
    /// The last watch error.
    pub last_error: Option<String>,
    /// When the last object event arrived.
    pub last_event: Option<Instant>,
    /// Watches that failed and were re-established or relisted.
    pub watch_restarts: u64,
    /// Objects that could not be decoded or converted.
    pub skipped_objects: u64,
    /// Objects skipped or clamped, by reason: in live mode a running count
    /// of deliveries (an object delivered again is counted again); in file
    /// mode what the cluster's files hold as last loaded.
    pub adjusted: AdjustedCounts,
    /// What is held.
    pub counts: Counts,
    /// Gateway addresses in use.
    pub gateway: Vec<IpAddr>,
    /// The gateway probe, when the cluster has one.
    pub probe: Option<ProbeStatus>,
    /// Why the cluster cannot be watched at all (credentials), if so.
    pub problem: Option<String>,
    /// File mode: the problems its files have (`None` in live mode).
    pub files: Option<Vec<String>>,
    /// Its budget and what it refuses (`None` until first judged).
    pub budget: Option<BudgetReport>,
    /// What the cluster's client layer sees (live clusters with a client).
    pub api: Option<Arc<ApiStats>>,
    /// Live mode with `--mcs`: its MCS membership (`None`: MCS is off).
    pub mcs: Option<McsStatus>,
    /// What it may claim (its clusters-file entry or Link annotations;
    /// the defaults elsewhere).
    pub claims: Claims,
    /// Its place as configured (clusters-file `region`/`zone`, Link
    /// annotations); the local cluster's flags are the model's settings,
    /// handed to [`StatusBoard::debug_json`].
    pub place: Place,
    /// Its place as its own ClusterProperty objects state it.
    pub property_place: Place,
    /// Why its ClusterProperty objects give no place, if they cannot.
    pub place_problem: Option<String>,
}

/// A live cluster's MCS membership, as `/debug/clusters` shows it.
#[derive(Debug, Clone, Default)]
pub struct McsStatus {
    /// Discovery has answered (until then the APIs below are unknown).
    pub discovered: bool,
    /// The ServiceExport resource watched (`plural.group/version`); `None`
    /// once discovered: the cluster is not an MCS member.
    pub export_api: Option<String>,
    /// The ServiceImport resource served.
    pub import_api: Option<String>,
    /// The ClusterProperty resource watched.
    pub property_api: Option<String>,
    /// Exports held, the cluster id and why the ClusterProperty is unused.
    pub state: McsReport,
}

impl McsStatus {
    /// One phrase for the membership: `discovering`, `member`, or
    /// `no ServiceExport API`.
    pub fn membership(&self) -> &'static str {
        match (self.discovered, &self.export_api) {
            (false, _) => "discovering",
            (true, Some(_)) => "member",
            (true, None) => "no ServiceExport API",
        }
    }

    fn view(&self) -> McsView<'_> {
        McsView {
            member: self.export_api.is_some(),
            status: self.membership(),
            service_export_api: self.export_api.as_deref(),
            service_import_api: self.import_api.as_deref(),
            cluster_property_api: self.property_api.as_deref(),
            service_exports: self.state.exports,
            cluster_id: self.state.id.as_deref(),
            cluster_id_problem: self.state.id_problem.as_deref(),
        }
    }
}

/// Where a cluster stands, as `/debug/clusters`, the
/// `clusterset_dns_cluster_state` metric and the log (one line per change)
/// name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// It cannot be watched at all (no usable credentials).
    NoCredentials,
    /// Its API server has not answered yet.
    Connecting,
    /// Answering, not synced yet.
    Syncing,
    /// Not synced within the sync timeout: readiness no longer waits.
    GaveUp,
    /// Synced, every watch working.
    Synced,
    /// A watch failed (or is being listed again after one did): its data
    /// is served as last known.
    Broken,
    /// Its API server has answered nothing for the cluster timeout.
    Unreachable,
}

impl Phase {
    /// Every phase, in label order.
    pub const ALL: [Phase; 7] = [
        Phase::NoCredentials,
        Phase::Connecting,
        Phase::Syncing,
        Phase::GaveUp,
        Phase::Synced,
        Phase::Broken,
        Phase::Unreachable,
    ];

    /// Its name.
    pub fn label(self) -> &'static str {
        match self {
            Phase::NoCredentials => "no-credentials",
            Phase::Connecting => "connecting",
            Phase::Syncing => "syncing",
            Phase::GaveUp => "gave-up",
            Phase::Synced => "synced",
            Phase::Broken => "broken",
            Phase::Unreachable => "unreachable",
        }
    }
}

impl ClusterReport {
    /// Since when the data served is stale: the watch broke after a sync.
    /// A cluster that never synced has nothing stale, whatever its errors.
    pub fn stale_since(&self) -> Option<Instant> {
        self.broken_since.filter(|_| self.synced)
    }

    /// Where it stands.
    pub fn phase(&self) -> Phase {
        let never_answered = self
            .api
            .as_ref()
            .is_some_and(|a| a.last_answered().is_none());
        if self.problem.is_some() {
            Phase::NoCredentials
        } else if self.silent_since.is_some() {
            Phase::Unreachable
        } else if !self.synced && self.gave_up {
            Phase::GaveUp
        } else if !self.synced && never_answered {
            Phase::Connecting
        } else if !self.synced {
            Phase::Syncing
        } else if self.broken_since.is_some() {
            Phase::Broken
        } else {
            Phase::Synced
        }
    }

    /// A fresh report.
    pub fn new(local: bool, origin: String) -> Self {
        Self {
            local,
            origin,
            started: Instant::now(),
            synced: false,
            gave_up: false,
            broken_since: None,
            silent_since: None,
            last_error: None,
            last_event: None,
            watch_restarts: 0,
            skipped_objects: 0,
            adjusted: AdjustedCounts::new(),
            counts: Counts::default(),
            gateway: Vec::new(),
            probe: None,
            problem: None,
            files: None,
            budget: None,
            api: None,
            mcs: None,
            claims: Claims::default(),
            place: Place::default(),
            property_place: Place::default(),
            place_problem: None,
        }
    }

    /// Where it is and who said so: the local cluster's `--region` and
    /// `--topology-zone` (`local_place`) first, as the model ranks it
    /// ([`crate::model::locality`]); else the configured place, whole;
    /// else the one its ClusterProperty objects state.
    pub fn place<'a>(&'a self, local_place: &'a Place) -> (&'a Place, PlaceFrom) {
        if self.local && !local_place.is_unknown() {
            return (local_place, PlaceFrom::Configured);
        }
        Place::choose(&self.place, &self.property_place)
    }
}

/// Every cluster's status, plus problems that belong to no cluster (a Link
/// that cannot be read, the Link CRD missing).
#[derive(Debug, Default)]
pub struct StatusBoard {
    clusters: Mutex<BTreeMap<Arc<str>, ClusterReport>>,
    problems: Mutex<Vec<String>>,
    counters: SourceCounters,
}

/// A kind of document the file source does not read, as its metric label:
/// the kinds it knows by name (a Service or EndpointSlice of another
/// apiVersion, a List inside a List), every other kind as `other`. A zones
/// file can hold any text as its `kind`; mapping it here keeps the label
/// set fixed, so a document can neither add series nor forge them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkippedKind {
    /// `kind: Service` of an apiVersion other than `v1`.
    Service,
    /// `kind: EndpointSlice` of an apiVersion other than
    /// `discovery.k8s.io/v1`.
    EndpointSlice,
    /// `kind: List` where a List cannot be (inside a List), or of another
    /// apiVersion.
    List,
    /// Any other kind.
    Other,
}

impl SkippedKind {
    /// Every kind, in label order.
    pub const ALL: [SkippedKind; 4] = [
        SkippedKind::Service,
        SkippedKind::EndpointSlice,
        SkippedKind::List,
        SkippedKind::Other,
    ];

    /// The kind of a skipped document keyed as the file source keys them,
    /// `"<apiVersion> <kind>"`.
    pub fn of(api_version_kind: &str) -> Self {
        let kind = api_version_kind
            .split_once(' ')
            .map_or(api_version_kind, |(_, kind)| kind);
        match kind {
            "Service" => SkippedKind::Service,
            "EndpointSlice" => SkippedKind::EndpointSlice,
            "List" => SkippedKind::List,
            _ => SkippedKind::Other,
        }
    }

    /// The `kind` label value.
    pub fn label(self) -> &'static str {
        match self {
            SkippedKind::Service => "Service",
            SkippedKind::EndpointSlice => "EndpointSlice",
            SkippedKind::List => "List",
            SkippedKind::Other => "other",
        }
    }
}

/// Counters of the file source that belong to no cluster's report: they
/// keep counting across reloads and removed directories.
#[derive(Debug, Default)]
pub struct SourceCounters {
    invalid_documents: AtomicU64,
    skipped: [AtomicU64; SkippedKind::ALL.len()],
    reload_errors: Mutex<BTreeMap<Arc<str>, u64>>,
    credentials_refused: Mutex<BTreeMap<&'static str, u64>>,
}

/// One reading of [`SourceCounters`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceCounts {
    /// Documents that could not be used.
    pub invalid_documents: u64,
    /// Documents of kinds not read, every kind (zero included).
    pub skipped: Vec<(SkippedKind, u64)>,
    /// Failed reloads by cluster (validated cluster names only).
    pub reload_errors: Vec<(Arc<str>, u64)>,
    /// Link credentials (Secret kubeconfigs) refused, by reason label.
    pub credentials_refused: Vec<(&'static str, u64)>,
}

impl SourceCounters {
    /// Counts documents that could not be used.
    pub fn invalid_documents(&self, n: u64) {
        self.invalid_documents.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` documents of a kind not read, keyed `"<apiVersion> <kind>"`.
    pub fn skipped(&self, api_version_kind: &str, n: u64) {
        let kind = SkippedKind::of(api_version_kind);
        self.skipped[kind as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a reload of `cluster` that failed and kept the old data.
    pub fn reload_error(&self, cluster: &Arc<str>) {
        *lock(&self.reload_errors)
            .entry(cluster.clone())
            .or_default() += 1;
    }

    /// Counts a Link Secret's kubeconfig refused for `reason` (a fixed
    /// label, [`crate::k8s::credentials::Refused::label`]).
    pub fn credentials_refused(&self, reason: &'static str) {
        *lock(&self.credentials_refused).entry(reason).or_default() += 1;
    }

    /// Every counter now.
    pub fn read(&self) -> SourceCounts {
        SourceCounts {
            invalid_documents: self.invalid_documents.load(Ordering::Relaxed),
            skipped: SkippedKind::ALL
                .iter()
                .map(|k| (*k, self.skipped[*k as usize].load(Ordering::Relaxed)))
                .collect(),
            reload_errors: lock(&self.reload_errors)
                .iter()
                .map(|(c, n)| (c.clone(), *n))
                .collect(),
            credentials_refused: lock(&self.credentials_refused)
                .iter()
                .map(|(r, n)| (*r, *n))
                .collect(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

impl StatusBoard {
    /// The file source's counters.
    pub fn counters(&self) -> &SourceCounters {
        &self.counters
    }

    /// Updates (or creates) a cluster's report.
    pub fn update(&self, name: &Arc<str>, f: impl FnOnce(&mut ClusterReport)) {
        let mut map = lock(&self.clusters);
        if let Some(r) = map.get_mut(name) {
            f(r);
        }
    }

    /// Registers a cluster (replacing an older report of the same name
    /// keeps its counters).
    pub fn register(&self, name: &Arc<str>, local: bool, origin: String) {
        let mut map = lock(&self.clusters);
        match map.get_mut(name) {
            Some(r) => {
                r.origin = origin;
                r.started = Instant::now();
                r.problem = None;
                // A restarted cluster's task brings its new client's.
                r.api = None;
            }
            None => {
                map.insert(name.clone(), ClusterReport::new(local, origin));
            }
        }
    }

    /// Records a cluster's budget report (`was` is the one before, `None`
    /// for its first), with one log line when the cluster goes over its
    /// budget or comes back within it, never one per object.
    pub fn budget(&self, name: &Arc<str>, was: Option<&BudgetReport>, now: &BudgetReport) {
        if was == Some(now) {
            return;
        }
        let (was, refused) = (was.map(|w| w.refused).unwrap_or_default(), now.refused);
        if was.services == 0 && refused.services > 0 {
            tracing::warn!(
                cluster = %name, refused_services = refused.services,
                refused_endpoints = refused.endpoints,
                max_services = now.budget.max_services, max_endpoints = now.budget.max_endpoints,
                "over its budget: its newest services are refused (SERVFAIL) and not held; the oldest that fit are served"
            );
        } else if was.services > 0 && refused.services == 0 {
            tracing::info!(cluster = %name, "within its budget again: every exported service is served");
        }
        self.update(name, |r| r.budget = Some(now.clone()));
    }

    /// Where cluster `name` stands, if it is known.
    pub fn phase(&self, name: &str) -> Option<Phase> {
        lock(&self.clusters).get(name).map(ClusterReport::phase)
    }

    /// Forgets a cluster (unlinked).
    pub fn remove(&self, name: &str) {
        lock(&self.clusters).remove(name);
    }

    /// Replaces the problems that belong to no cluster.
    pub fn set_problems(&self, problems: Vec<String>) {
        *lock(&self.problems) = problems;
    }

    /// A copy of every report.
    pub fn snapshot(&self) -> BTreeMap<Arc<str>, ClusterReport> {
        lock(&self.clusters).clone()
    }

    /// `/debug/clusters` as JSON; `local_place` is the local cluster's
    /// place from the settings in force (`--region`, `--topology-zone`).
    pub fn debug_json(&self, local_place: &Place) -> serde_json::Value {
        self.debug_json_at(Instant::now(), local_place)
    }

    /// `/debug/clusters` with its ages counted to `now`.
    fn debug_json_at(&self, now: Instant, local_place: &Place) -> serde_json::Value {
        let clusters = self.snapshot();
        let view = DebugView {
            clusters: clusters
                .iter()
                .map(|(name, r)| ClusterView::of(name, r, now, local_place))
                .collect(),
            problems: lock(&self.problems).clone(),
        };
        // Plain structs, strings and numbers with string keys: nothing in
        // them can fail to serialize.
        serde_json::to_value(view).unwrap_or_default()
    }
}

// `/debug/clusters`, as users and tests read it: the field names below are
// an interface, renamed to camelCase; every field is always present, `null`
// when it does not apply.

/// The whole page.
#[derive(Debug, Serialize)]
struct DebugView<'a> {
    clusters: Vec<ClusterView<'a>>,
    problems: Vec<String>,
}

/// One cluster's entry.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterView<'a> {
    name: &'a str,
    local: bool,
    origin: &'a str,
    state: &'static str,
    unreachable_seconds: Option<f64>,
    synced: bool,
    #[serde(rename = "gaveUpWaitingForSync")]
    gave_up: bool,
    seconds_since_start: f64,
    stale_seconds: Option<f64>,
    last_error: Option<&'a str>,
    seconds_since_last_event: Option<f64>,
    watch_restarts: u64,
    skipped_objects: u64,
    adjusted_objects: BTreeMap<&'static str, BTreeMap<&'static str, u64>>,
    services: usize,
    mirror_services: usize,
    endpoint_slices: usize,
    endpoints: usize,
    gateway_addresses: Vec<String>,
    gateway_probe: Option<ProbeView<'a>>,
    seconds_since_api_answered: Option<f64>,
    api_requests_in_flight: Option<usize>,
    api_max_in_flight: Option<usize>,
    problem: Option<&'a str>,
    file_problems: Option<&'a [String]>,
    budget: Option<BudgetView>,
    mcs: Option<McsView<'a>>,
    claims: ClaimsView,
    place: PlaceView<'a>,
    place_from: &'static str,
    place_problem: Option<&'a str>,
}

/// A place: each part `null` when unknown.
#[derive(Debug, Serialize)]
struct PlaceView<'a> {
    region: Option<&'a str>,
    zone: Option<&'a str>,
}

/// The gateway probe.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ProbeView<'a> {
    alive: Option<bool>,
    consecutive_failures: u32,
    successes: u64,
    failures: u64,
    last_latency_seconds: Option<f64>,
    last_error: Option<&'a str>,
}

/// The budget and what it refuses.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct BudgetView {
    max_services: usize,
    max_endpoints: usize,
    refused_services: usize,
    refused_endpoints: usize,
    refused: Vec<String>,
}

/// The MCS membership.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct McsView<'a> {
    member: bool,
    status: &'static str,
    service_export_api: Option<&'a str>,
    service_import_api: Option<&'a str>,
    cluster_property_api: Option<&'a str>,
    service_exports: usize,
    cluster_id: Option<&'a str>,
    cluster_id_problem: Option<&'a str>,
}

/// A cluster's claims: `null` where it is not bounded.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClaimsView {
    allowed_addresses: Option<Vec<String>>,
    allowed_namespaces: Option<Vec<String>>,
    denied_namespaces: Vec<String>,
}

impl<'a> ClusterView<'a> {
    /// Cluster `name`'s entry from its report `r`, ages counted to `now`;
    /// `local_place` is the local cluster's from the settings.
    fn of(name: &'a str, r: &'a ClusterReport, now: Instant, local_place: &'a Place) -> Self {
        let age = |t: Instant| secs(now.saturating_duration_since(t));
        let api = r.api.as_deref();
        let (place, from) = r.place(local_place);
        Self {
            name,
            local: r.local,
            origin: &r.origin,
            state: r.phase().label(),
            unreachable_seconds: r.silent_since.map(age),
            synced: r.synced,
            gave_up: r.gave_up,
            seconds_since_start: age(r.started),
            stale_seconds: r.stale_since().map(age),
            last_error: r.last_error.as_deref(),
            seconds_since_last_event: r.last_event.map(age),
            watch_restarts: r.watch_restarts,
            skipped_objects: r.skipped_objects,
            adjusted_objects: adjusted_view(&r.adjusted),
            services: r.counts.services,
            mirror_services: r.counts.mirrors,
            endpoint_slices: r.counts.slices,
            endpoints: r.counts.endpoints,
            gateway_addresses: r.gateway.iter().map(ToString::to_string).collect(),
            gateway_probe: r.probe.as_ref().map(ProbeView::of),
            seconds_since_api_answered: api.and_then(ApiStats::last_answered).map(age),
            api_requests_in_flight: api.map(ApiStats::in_flight),
            api_max_in_flight: api.map(ApiStats::max_in_flight),
            problem: r.problem.as_deref(),
            file_problems: r.files.as_deref(),
            budget: r.budget.as_ref().map(BudgetView::of),
            mcs: r.mcs.as_ref().map(McsStatus::view),
            claims: ClaimsView::of(&r.claims),
            place: PlaceView {
                region: place.region.as_deref(),
                zone: place.zone.as_deref(),
            },
            place_from: from.as_str(),
            place_problem: r.place_problem.as_deref(),
        }
    }
}

impl<'a> ProbeView<'a> {
    fn of(p: &'a ProbeStatus) -> Self {
        Self {
            alive: p.alive,
            consecutive_failures: p.consecutive_failures,
            successes: p.successes,
            failures: p.failures,
            last_latency_seconds: p.last_latency.map(secs),
            last_error: p.last_error.as_deref(),
        }
    }
}

impl BudgetView {
    fn of(b: &BudgetReport) -> Self {
        Self {
            max_services: b.budget.max_services,
            max_endpoints: b.budget.max_endpoints,
            refused_services: b.refused.services,
            refused_endpoints: b.refused.endpoints,
            refused: b.refused_services.iter().map(ToString::to_string).collect(),
        }
    }
}

impl ClaimsView {
    fn of(c: &Claims) -> Self {
        let names = |set: &std::collections::BTreeSet<Arc<str>>| {
            set.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        Self {
            allowed_addresses: c
                .allowed_addresses
                .as_ref()
                .map(|nets| nets.iter().map(ToString::to_string).collect()),
            allowed_namespaces: c.allowed_namespaces.as_ref().map(names),
            denied_namespaces: names(&c.denied_namespaces),
        }
    }
}

/// `{"skipped": {"<reason>": n, ...}, "clamped": {...}}`, each action
/// present only when something was counted under it.
fn adjusted_view(counts: &AdjustedCounts) -> BTreeMap<&'static str, BTreeMap<&'static str, u64>> {
    let mut by_action: BTreeMap<&'static str, BTreeMap<&'static str, u64>> = BTreeMap::new();
    for ((adjustment, reason), n) in counts {
        by_action
            .entry(adjustment.label())
            .or_default()
            .insert(reason.label(), *n);
    }
    by_action
}

#[cfg(test)]
mod tests;
