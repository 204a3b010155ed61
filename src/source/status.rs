//! Per-cluster status of the sources, for `/debug/clusters` and the
//! per-cluster metrics: sync state, staleness, last event, watch restarts,
//! objects held, objects skipped or clamped by reason, the gateway probe,
//! what the cluster's API client layer sees (its last answer, requests in
//! flight against the bound), and problems (missing credentials, a bad
//! Link, invalid files).
//!
//! Written by the live cluster tasks and the file source, read by the admin
//! server. It must not drive
//! any decision: health that changes answers travels as model events.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;

use super::convert::{Adjustment, Reason};
use super::state::{BudgetReport, Counts};
use crate::k8s::layer::ApiStats;

/// Objects skipped or clamped, by what was done and why. Both keys come
/// from fixed sets, so they can be metric labels.
pub type AdjustedCounts = BTreeMap<(Adjustment, Reason), u64>;

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
    /// Watch broken since.
    pub broken_since: Option<Instant>,
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
}

impl ClusterReport {
    /// Since when the data served is stale: the watch broke after a sync.
    /// A cluster that never synced has nothing stale, whatever its errors.
    pub fn stale_since(&self) -> Option<Instant> {
        self.broken_since.filter(|_| self.synced)
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
        }
    }
}

/// Every cluster's status, plus problems that belong to no cluster (a Link
/// that cannot be read, the Link CRD missing).
#[derive(Debug, Default)]
pub struct StatusBoard {
    clusters: Mutex<BTreeMap<Arc<str>, ClusterReport>>,
    problems: Mutex<Vec<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind; keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

impl StatusBoard {
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

    /// `/debug/clusters` as JSON.
    pub fn debug_json(&self) -> serde_json::Value {
        let now = Instant::now();
        let clusters: Vec<serde_json::Value> = self
            .snapshot()
            .into_iter()
            .map(|(name, r)| {
                let stale = r.stale_since();
                let state = if r.problem.is_some() {
                    "no-credentials"
                } else if !r.synced && r.gave_up {
                    "gave-up"
                } else if !r.synced {
                    "syncing"
                } else if stale.is_some() {
                    "broken"
                } else {
                    "synced"
                };
                json!({
                    "name": &*name,
                    "local": r.local,
                    "origin": r.origin,
                    "state": state,
                    "synced": r.synced,
                    "gaveUpWaitingForSync": r.gave_up,
                    "secondsSinceStart": secs(now.saturating_duration_since(r.started)),
                    "staleSeconds": stale.map(|b| secs(now.saturating_duration_since(b))),
                    "lastError": r.last_error,
                    "secondsSinceLastEvent": r.last_event.map(|t| secs(now.saturating_duration_since(t))),
                    "watchRestarts": r.watch_restarts,
                    "skippedObjects": r.skipped_objects,
                    "adjustedObjects": adjusted_json(&r.adjusted),
                    "services": r.counts.services,
                    "mirrorServices": r.counts.mirrors,
                    "endpointSlices": r.counts.slices,
                    "endpoints": r.counts.endpoints,
                    "gatewayAddresses": r.gateway.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "gatewayProbe": r.probe.as_ref().map(|p| json!({
                        "alive": p.alive,
                        "consecutiveFailures": p.consecutive_failures,
                        "successes": p.successes,
                        "failures": p.failures,
                        "lastLatencySeconds": p.last_latency.map(secs),
                        "lastError": p.last_error,
                    })),
                    "secondsSinceApiAnswered": r.api.as_ref().and_then(|a| a.last_answered()).map(|t| secs(now.saturating_duration_since(t))),
                    "apiRequestsInFlight": r.api.as_ref().map(|a| a.in_flight()),
                    "apiMaxInFlight": r.api.as_ref().map(|a| a.max_in_flight()),
                    "problem": r.problem,
                    "fileProblems": r.files,
                    "budget": r.budget.as_ref().map(|b| json!({
                        "maxServices": b.budget.max_services,
                        "maxEndpoints": b.budget.max_endpoints,
                        "refusedServices": b.refused.services,
                        "refusedEndpoints": b.refused.endpoints,
                        "refused": b.refused_services.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    })),
                })
            })
            .collect();
        json!({
            "clusters": clusters,
            "problems": lock(&self.problems).clone(),
        })
    }

    /// Per-cluster Prometheus families, appended to `out`.
    pub fn render_metrics(&self, out: &mut String) {
        let now = Instant::now();
        let reports = self.snapshot();
        if reports.is_empty() {
            return;
        }
        type Getter = fn(&ClusterReport, Instant) -> Option<f64>;
        // `clusterset_dns_cluster_synced` comes from the snapshot (metrics.rs).
        let families: [(&str, &str, &str, Getter); 12] = [
            (
                "clusterset_dns_cluster_sync_given_up",
                "gauge",
                "1 when readiness stopped waiting for this cluster (--sync-timeout).",
                |r, _| Some(f64::from(u8::from(r.gave_up && !r.synced))),
            ),
            (
                "clusterset_dns_cluster_stale_seconds",
                "gauge",
                "How long the cluster's watch has been broken (0 when healthy).",
                |r, now| {
                    Some(
                        r.stale_since()
                            .map_or(0.0, |b| now.saturating_duration_since(b).as_secs_f64()),
                    )
                },
            ),
            (
                "clusterset_dns_cluster_last_event_age_seconds",
                "gauge",
                "Seconds since the last object event from the cluster.",
                |r, now| {
                    r.last_event
                        .map(|t| now.saturating_duration_since(t).as_secs_f64())
                },
            ),
            (
                "clusterset_dns_cluster_watch_restarts_total",
                "counter",
                "Watches that failed and were re-established.",
                |r, _| Some(r.watch_restarts as f64),
            ),
            (
                "clusterset_dns_cluster_skipped_objects_total",
                "counter",
                "Objects that could not be decoded or converted, skipped.",
                |r, _| Some(r.skipped_objects as f64),
            ),
            (
                "clusterset_dns_cluster_services",
                "gauge",
                "Exported or federated Services held.",
                |r, _| Some(r.counts.services as f64),
            ),
            (
                "clusterset_dns_cluster_endpointslices",
                "gauge",
                "EndpointSlices held.",
                |r, _| Some(r.counts.slices as f64),
            ),
            (
                "clusterset_dns_cluster_endpoints",
                "gauge",
                "Endpoint addresses held.",
                |r, _| Some(r.counts.endpoints as f64),
            ),
            (
                "clusterset_dns_cluster_refused_services",
                "gauge",
                "Exported services refused by the cluster's budget (their names answer SERVFAIL).",
                |r, _| r.budget.as_ref().map(|b| b.refused.services as f64),
            ),
            (
                "clusterset_dns_cluster_refused_endpoints",
                "gauge",
                "Endpoints of the refused services, not held.",
                |r, _| r.budget.as_ref().map(|b| b.refused.endpoints as f64),
            ),
            (
                "clusterset_dns_gateway_alive",
                "gauge",
                "Gateway probe: 1 alive, 0 dead, absent while unknown or without a probe.",
                |r, _| {
                    r.probe
                        .as_ref()
                        .and_then(|p| p.alive)
                        .map(|a| f64::from(u8::from(a)))
                },
            ),
            (
                "clusterset_dns_gateway_probe_failures_total",
                "counter",
                "Gateway probes that failed.",
                |r, _| r.probe.as_ref().map(|p| p.failures as f64),
            ),
        ];
        for (name, kind, help, get) in families {
            let rows: Vec<(&Arc<str>, f64)> = reports
                .iter()
                .filter_map(|(c, r)| get(r, now).map(|v| (c, v)))
                .collect();
            if rows.is_empty() {
                continue;
            }
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (c, v) in rows {
                let _ = writeln!(out, "{name}{{cluster=\"{c}\"}} {v}");
            }
        }
        render_adjusted(&reports, out);
    }
}

/// `{"skipped": {"<reason>": n, ...}, "clamped": {...}}`, each action
/// present only when something was counted under it.
fn adjusted_json(counts: &AdjustedCounts) -> serde_json::Value {
    let mut by_action = serde_json::Map::new();
    for ((adjustment, reason), n) in counts {
        let entry = by_action
            .entry(adjustment.label())
            .or_insert_with(|| json!({}));
        entry[reason.label()] = json!(n);
    }
    serde_json::Value::Object(by_action)
}

/// The adjusted objects family: one row per cluster, reason and action
/// that happened (label values from fixed sets only).
fn render_adjusted(reports: &BTreeMap<Arc<str>, ClusterReport>, out: &mut String) {
    const NAME: &str = "clusterset_dns_cluster_objects_adjusted_total";
    let _ = writeln!(
        out,
        "# HELP {NAME} Objects from the cluster skipped (not used) or clamped (used with a part left out), by reason (README, Admin endpoints and metrics). File mode: what the cluster's files hold as last loaded.\n# TYPE {NAME} counter"
    );
    for (c, r) in reports {
        for ((adjustment, reason), n) in &r.adjusted {
            let _ = writeln!(
                out,
                "{NAME}{{cluster=\"{c}\",reason=\"{}\",action=\"{}\"}} {n}",
                reason.label(),
                adjustment.label()
            );
        }
    }
}
