//! `/metrics`: one `prometheus-client` registry for the whole process,
//! encoded in the Prometheus text format (0.0.4).
//!
//! Owns every metric name, help text and label name: its collectors read,
//! at scrape time, the DNS layer's atomics (`dns::stats`), the snapshot and
//! readiness, the sources' status board (`source::status`) and the mirror's
//! counters (`mirror::stats`) and the propagation histograms
//! (`propagation`). So the query path costs what it did (a
//! relaxed atomic add) and the encoder is the crate's, which escapes every
//! label value. It also defines [`Shared`], the state observers read, with
//! the one counter that belongs to no lower layer ([`ConfigReloads`], which
//! the `serve` command bumps), and the way an observer asks the model task
//! for its cluster state ([`ModelViews`]). It must not decide anything; label values
//! come only from fixed sets and validated cluster names, never from input
//! text.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use arc_swap::ArcSwap;

use crate::dns::stats::{DnsCounts, DnsStats};
use crate::mirror::stats::MirrorStats;
use crate::model::{ClusterSet, Snapshot};
use crate::propagation::Propagation;
use crate::source::status::{ClusterReport, Phase, StatusBoard};

/// What the process publishes for observers: the snapshot, the counters,
/// readiness and per-cluster status. The runtime fills it; the admin
/// endpoints and the encoder read it.
#[derive(Debug)]
pub struct Shared {
    /// The snapshot queries are answered from.
    pub snapshot: Arc<ArcSwap<Snapshot>>,
    /// The DNS layer's counters.
    pub dns: Arc<DnsStats>,
    /// Configuration reloads applied and refused.
    pub config_reloads: Arc<ConfigReloads>,
    /// Every cluster has synced once.
    pub ready: AtomicBool,
    /// The mirror controller's counters (rendered only when it runs).
    pub mirror: Arc<MirrorStats>,
    /// Per-cluster status of the source.
    pub board: Arc<StatusBoard>,
    /// Per-cluster propagation times, observed by the model task.
    pub propagation: Arc<Propagation>,
    /// Asks the model task for its cluster state (`/debug/name`).
    pub views: ModelViews,
    /// The IXFR journal (`/debug/transfers`).
    pub journal: Arc<crate::dns::journal::Journal>,
}

impl Shared {
    /// Answering from `snapshot`, not ready, no cluster status yet,
    /// counting into `dns`, asking the model through `views`.
    pub fn new(snapshot: Arc<Snapshot>, dns: Arc<DnsStats>, views: ModelViews) -> Self {
        Self {
            snapshot: Arc::new(ArcSwap::new(snapshot)),
            dns,
            config_reloads: Arc::default(),
            ready: AtomicBool::new(false),
            board: Arc::new(StatusBoard::default()),
            mirror: Arc::new(MirrorStats::default()),
            propagation: Arc::default(),
            views,
            journal: Arc::default(),
        }
    }
}

/// The model's cluster state at one moment and the snapshot answered from
/// then: what `/debug/name` explains a name from.
#[derive(Debug, Clone)]
pub(crate) struct ModelView {
    /// The snapshot the DNS path answers from.
    pub snapshot: Arc<Snapshot>,
    /// Every cluster's state (an O(1) clone of the model's).
    pub clusters: ClusterSet,
}

/// A request for a [`ModelView`]: where to send it.
type ViewRequest = tokio::sync::oneshot::Sender<ModelView>;

/// How observers ask the model task for a [`ModelView`].
///
/// On request rather than published with every snapshot: the cluster maps
/// are persistent, so a clone held between two batches makes the model's
/// next change copy the nodes on its path; asked for only when an operator
/// explains a name, the model pays nothing the rest of the time.
#[derive(Debug, Default)]
pub struct ModelViews(Option<tokio::sync::mpsc::Sender<ViewRequest>>);

/// The model task's end of [`ModelViews`].
#[derive(Debug)]
pub(crate) struct ViewRequests(tokio::sync::mpsc::Receiver<ViewRequest>);

/// Why no [`ModelView`] came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ViewError {
    /// No model task serves requests (it ended, or never ran here).
    #[error("the model task is not running")]
    NoModel,
    /// The model task did not answer in time (a long batch in hand).
    #[error("the model task did not answer within {0:?}")]
    Busy(std::time::Duration),
}

impl ModelViews {
    /// A connected pair: observers ask with the first, the model task
    /// answers from the second. (`Default` gives one nobody answers.)
    pub(crate) fn channel() -> (Self, ViewRequests) {
        // A few explains at once at most; more wait for room.
        let (tx, rx) = tokio::sync::mpsc::channel(8);
        (Self(Some(tx)), ViewRequests(rx))
    }

    /// The model's state now, if the model task answers within `within`.
    pub(crate) async fn get(&self, within: std::time::Duration) -> Result<ModelView, ViewError> {
        let tx = self.0.as_ref().ok_or(ViewError::NoModel)?;
        let ask = async {
            let (reply, answer) = tokio::sync::oneshot::channel();
            tx.send(reply).await.map_err(|_| ViewError::NoModel)?;
            answer.await.map_err(|_| ViewError::NoModel)
        };
        tokio::time::timeout(within, ask)
            .await
            .map_err(|_| ViewError::Busy(within))?
    }
}

impl ViewRequests {
    /// The next request; `None` once every asker is gone.
    pub(crate) async fn next(&mut self) -> Option<ViewRequest> {
        self.0.recv().await
    }
}

/// Configuration reloads, counted by whoever reloads (the `serve` command).
#[derive(Debug, Default)]
pub struct ConfigReloads {
    applied: AtomicU64,
    refused: AtomicU64,
}

impl ConfigReloads {
    /// Counts a configuration reload that was applied (`ok`) or refused.
    pub fn config_reload(&self, ok: bool) {
        let counter = if ok { &self.applied } else { &self.refused };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reloads applied and refused so far.
    pub fn read(&self) -> (u64, u64) {
        (
            self.applied.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }
}

/// The `Content-Type` of a scrape: the Prometheus text format 0.0.4.
pub(crate) const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The process's registry: DNS, the model, the sources and the mirror.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    /// A registry whose collectors read `shared` at each scrape.
    pub fn new(shared: &Arc<Shared>) -> Self {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Dns(shared.dns.clone())));
        registry.register_collector(Box::new(Server(shared.clone())));
        registry.register_collector(Box::new(Sources(shared.board.clone())));
        registry.register_collector(Box::new(Mirror(shared.mirror.clone())));
        registry.register_collector(Box::new(Propagated(shared.propagation.clone())));
        Self { registry }
    }

    /// Every metric in the Prometheus text format.
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut out = String::with_capacity(8192);
        prometheus_text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// A sample value: counts stay integers in the text (`10`, not `10.0`).
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(u64),
    Real(f64),
}

impl From<u64> for Num {
    fn from(n: u64) -> Self {
        Num::Int(n)
    }
}

impl From<usize> for Num {
    fn from(n: usize) -> Self {
        Num::Int(n as u64)
    }
}

impl Num {
    fn encode(self, m: MetricEncoder, kind: MetricType) -> fmt::Result {
        match (kind, self) {
            (MetricType::Counter, Num::Int(n)) => ConstCounter::new(n).encode(m),
            (MetricType::Counter, Num::Real(x)) => ConstCounter::new(x).encode(m),
            (_, Num::Int(n)) => ConstGauge::new(n).encode(m),
            (_, Num::Real(x)) => ConstGauge::new(x).encode(m),
        }
    }
}

/// The name to give the crate: it appends `_total` to a counter's name
/// itself, and the names here are written as they are scraped.
fn registered(name: &str, kind: MetricType) -> &str {
    match kind {
        MetricType::Counter => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    }
}

/// A family of one sample without labels.
fn single(
    enc: &mut DescriptorEncoder,
    (name, kind, help): (&str, MetricType, &str),
    value: impl Into<Num>,
) -> fmt::Result {
    let m = enc.encode_descriptor(registered(name, kind), help, None, kind)?;
    value.into().encode(m, kind)
}

/// A family of one sample per label set in `rows`.
fn family<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    (name, kind, help): (&str, MetricType, &str),
    rows: impl IntoIterator<Item = (L, Num)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(registered(name, kind), help, None, kind)?;
    for (labels, value) in rows {
        value.encode(m.encode_family(&labels)?, kind)?;
    }
    Ok(())
}

const COUNTER: MetricType = MetricType::Counter;
const GAUGE: MetricType = MetricType::Gauge;

/// Name, help and reading of a family of one sample.
type Plain<T> = (&'static str, &'static str, fn(&T) -> u64);

/// The DNS layer's gauges without labels.
const DNS_GAUGES: [Plain<DnsCounts>; 2] = [
    (
        "clusterset_dns_ixfr_journal_versions",
        "Versions of the zone the IXFR journal holds (differences a secondary that is behind gets instead of the whole zone).",
        |c| c.journal_versions,
    ),
    (
        "clusterset_dns_ixfr_journal_bytes",
        "Octets of the records the IXFR journal holds (uncompressed, as on the wire).",
        |c| c.journal_bytes,
    ),
];

/// The DNS layer's counters without labels.
const DNS_COUNTERS: [Plain<DnsCounts>; 14] = [
    (
        "clusterset_dns_notify_acknowledged_total",
        "NOTIFYs of a new serial that a --notify target acknowledged.",
        |c| c.notifies_acknowledged,
    ),
    (
        "clusterset_dns_notify_failed_total",
        "NOTIFYs a --notify target never answered after every retry (it refreshes on its own timers).",
        |c| c.notifies_failed,
    ),
    (
        "clusterset_dns_zone_transfer_bytes_total",
        "Octets of zone transfers (AXFR, IXFR) produced for the connection (a client that hangs up early is counted up to where it stopped, give or take a few messages).",
        |c| c.transfer_bytes,
    ),
    (
        "clusterset_dns_tls_handshake_failures_total",
        "DNS-over-TLS handshakes that failed or did not finish within message-timeout.",
        |c| c.tls_handshake_failures,
    ),
    (
        "clusterset_dns_tls_cert_reloads_total",
        "DNS-over-TLS certificate reloads applied (the files changed).",
        |c| c.tls_reloads,
    ),
    (
        "clusterset_dns_tls_cert_reload_errors_total",
        "DNS-over-TLS certificate reloads refused (unreadable or mismatched files); the previous certificate stays.",
        |c| c.tls_reload_errors,
    ),
    (
        "clusterset_dns_responses_truncated_total",
        "UDP responses sent with TC=1 because the answer did not fit.",
        |c| c.truncated,
    ),
    (
        "clusterset_dns_additional_trimmed_total",
        "Responses whose Additional section was trimmed to fit (no TC).",
        |c| c.additional_trimmed,
    ),
    (
        "clusterset_dns_packets_dropped_total",
        "Packets answered with nothing: shorter than a header, or responses.",
        |c| c.dropped,
    ),
    (
        "clusterset_dns_answer_cache_hits_total",
        "Plain queries answered from pre-encoded responses.",
        |c| c.cache_hits,
    ),
    (
        "clusterset_dns_answer_cache_misses_total",
        "Plain queries the response cache did not hold (answered by the general path).",
        |c| c.cache_misses,
    ),
    (
        "clusterset_dns_federated_fail_open_total",
        "Federated answers that served the last-known union because every member was unhealthy.",
        |c| c.fail_open,
    ),
    (
        "clusterset_dns_nearest_fail_open_total",
        "Nearest answers that served the federated union because no tier had min-ready ready endpoints.",
        |c| c.nearest_fail_open,
    ),
    (
        "clusterset_dns_stale_answers_total",
        "Answers served from a cluster whose watch is broken.",
        |c| c.stale,
    ),
];

/// The DNS layer's counters.
#[derive(Debug)]
struct Dns(Arc<DnsStats>);

impl Collector for Dns {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let c = self.0.read();
        family(
            &mut enc,
            (
                "clusterset_dns_queries_total",
                COUNTER,
                "DNS queries answered, by query type and response code.",
            ),
            c.queries
                .iter()
                .map(|(qtype, rcode, n)| ([("qtype", *qtype), ("rcode", *rcode)], Num::Int(*n))),
        )?;
        for (name, help, get) in DNS_COUNTERS {
            single(&mut enc, (name, COUNTER, help), get(&c))?;
        }
        for (name, help, get) in DNS_GAUGES {
            single(&mut enc, (name, GAUGE, help), get(&c))?;
        }
        family(
            &mut enc,
            (
                "clusterset_dns_answers_capped_total",
                COUNTER,
                "Answers that carried fewer records of their RRset than it has (too large for one answer, or above max-answer-records); successive queries get the others.",
            ),
            c.capped
                .iter()
                .map(|(t, n)| ([("transport", t.label())], Num::Int(*n))),
        )?;
        family(
            &mut enc,
            (
                "clusterset_dns_limit_hits_total",
                COUNTER,
                "Times a TCP/TLS resource limit was hit (see docs/operations.md, Limits).",
            ),
            c.limit_hits
                .iter()
                .map(|(l, n)| ([("limit", l.label())], Num::Int(*n))),
        )?;
        family(
            &mut enc,
            (
                "clusterset_dns_secondary_serial",
                GAUGE,
                "The zone serial each secondary (by address) last fetched by AXFR or IXFR.",
            ),
            c.secondaries.iter().map(|(ip, serial)| {
                let ip = ip.to_string();
                ([("secondary", ip)], Num::Int(u64::from(*serial)))
            }),
        )?;
        family(
            &mut enc,
            (
                "clusterset_dns_zone_transfers_total",
                COUNTER,
                "Zone transfers by kind (axfr, ixfr) and outcome (full; up_to_date: the SOA alone; refused: not allowed or unsigned; busy: too many at once; notauth: a bad TSIG).",
            ),
            c.transfers.iter().flat_map(|(k, outcomes)| {
                outcomes.iter().map(move |(o, n)| {
                    ([("kind", k.label()), ("outcome", o.label())], Num::Int(*n))
                })
            }),
        )?;
        family(
            &mut enc,
            (
                "clusterset_dns_connections_open",
                GAUGE,
                "TCP and DNS-over-TLS connections open now.",
            ),
            c.connections_open
                .iter()
                .map(|(s, n)| ([("transport", s.label())], Num::Int(*n))),
        )
    }
}

/// What the server as a whole knows: the snapshot served, readiness and
/// configuration reloads.
#[derive(Debug)]
struct Server(Arc<Shared>);

impl Collector for Server {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let shared = &self.0;
        let (applied, refused) = shared.config_reloads.read();
        single(
            &mut enc,
            (
                "clusterset_dns_config_reloads_total",
                COUNTER,
                "Configuration reloads applied (SIGHUP, or a change of the config file or of the transfer keys file).",
            ),
            applied,
        )?;
        single(
            &mut enc,
            (
                "clusterset_dns_config_reload_errors_total",
                COUNTER,
                "Configuration reloads refused because the new config or transfer keys file is invalid; the running configuration stays.",
            ),
            refused,
        )?;
        let snap = shared.snapshot.load();
        let ready = shared.ready.load(Ordering::Acquire);
        let gauges = [
            (
                "clusterset_dns_names",
                "Names served (service names and pod names).",
                snap.stats.names,
            ),
            (
                "clusterset_dns_name_collisions",
                "Services not served because an older service owns the same name.",
                snap.stats.collisions,
            ),
            (
                "clusterset_dns_mcs_conflicts",
                "MCS services whose ServiceExports disagree on the type, the ports or the exported labels and annotations (the defining export decides).",
                snap.stats.mcs_conflicts,
            ),
            (
                "clusterset_dns_mcs_cluster_id_conflicts",
                "Clusters left out of MCS names because a cluster known before them holds the same cluster id.",
                snap.stats.mcs_id_conflicts,
            ),
            (
                "clusterset_dns_names_too_long",
                "Names not served because a label exceeds 63 octets or the name 253.",
                snap.stats.too_long,
            ),
            (
                "clusterset_dns_soa_serial",
                "SOA serial of the zone.",
                u64::from(snap.serial),
            ),
            (
                "clusterset_dns_ready",
                "1 once every cluster has synced once.",
                u64::from(ready),
            ),
        ];
        for (name, help, n) in gauges {
            single(&mut enc, (name, GAUGE, help), n)?;
        }
        family(
            &mut enc,
            (
                "clusterset_dns_cluster_synced",
                GAUGE,
                "1 when the cluster has synced at least once.",
            ),
            snap.clusters
                .iter()
                .flatten()
                .map(|c| ([("cluster", &*c.name)], Num::Int(u64::from(c.synced)))),
        )
    }
}

/// A per-cluster value of a report at `now`; `None` leaves the cluster out.
type Getter = fn(&ClusterReport, Instant) -> Option<Num>;

/// The per-cluster families of the status board, each present only when
/// some cluster has a value (`clusterset_dns_cluster_synced` comes from
/// the snapshot).
const CLUSTER_FAMILIES: [(&str, MetricType, &str, Getter); 13] = [
    (
        "clusterset_dns_cluster_sync_given_up",
        GAUGE,
        "1 when readiness stopped waiting for this cluster (--sync-timeout).",
        |r, _| Some(Num::Int(u64::from(r.gave_up && !r.synced))),
    ),
    (
        "clusterset_dns_cluster_stale_seconds",
        GAUGE,
        "How long the cluster's watch has been broken (0 when healthy).",
        |r, now| {
            let stale = r.stale_since().map(|b| now.saturating_duration_since(b));
            Some(Num::Real(stale.unwrap_or_default().as_secs_f64()))
        },
    ),
    (
        "clusterset_dns_cluster_api_answer_age_seconds",
        GAUGE,
        "Seconds since the cluster's API server last answered a request (absent until it has); past --cluster-timeout the cluster is unreachable.",
        |r, now| {
            let at = r.api.as_ref().and_then(|a| a.last_answered())?;
            Some(Num::Real(now.saturating_duration_since(at).as_secs_f64()))
        },
    ),
    (
        "clusterset_dns_cluster_last_event_age_seconds",
        GAUGE,
        "Seconds since the last object event from the cluster.",
        |r, now| {
            r.last_event
                .map(|t| Num::Real(now.saturating_duration_since(t).as_secs_f64()))
        },
    ),
    (
        "clusterset_dns_cluster_watch_restarts_total",
        COUNTER,
        "Watches that failed and were re-established.",
        |r, _| Some(r.watch_restarts.into()),
    ),
    (
        "clusterset_dns_cluster_skipped_objects_total",
        COUNTER,
        "Objects that could not be decoded or converted, skipped.",
        |r, _| Some(r.skipped_objects.into()),
    ),
    (
        "clusterset_dns_cluster_services",
        GAUGE,
        "Exported or federated Services held.",
        |r, _| Some(r.counts.services.into()),
    ),
    (
        "clusterset_dns_cluster_endpointslices",
        GAUGE,
        "EndpointSlices held.",
        |r, _| Some(r.counts.slices.into()),
    ),
    (
        "clusterset_dns_cluster_endpoints",
        GAUGE,
        "Endpoint addresses held.",
        |r, _| Some(r.counts.endpoints.into()),
    ),
    (
        "clusterset_dns_cluster_refused_services",
        GAUGE,
        "Exported services refused by the cluster's budget (their names answer SERVFAIL).",
        |r, _| r.budget.as_ref().map(|b| b.refused.services.into()),
    ),
    (
        "clusterset_dns_cluster_refused_endpoints",
        GAUGE,
        "Endpoints of the refused services, not held.",
        |r, _| r.budget.as_ref().map(|b| b.refused.endpoints.into()),
    ),
    (
        "clusterset_dns_gateway_alive",
        GAUGE,
        "Gateway probe: 1 alive, 0 dead, absent while unknown or without a probe.",
        |r, _| {
            let alive = r.probe.as_ref().and_then(|p| p.alive);
            alive.map(|a| Num::Int(u64::from(a)))
        },
    ),
    (
        "clusterset_dns_gateway_probe_failures_total",
        COUNTER,
        "Gateway probes that failed.",
        |r, _| r.probe.as_ref().map(|p| p.failures.into()),
    ),
];

/// The sources: the file source's counters and every cluster's report.
#[derive(Debug)]
struct Sources(Arc<StatusBoard>);

impl Collector for Sources {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let c = self.0.counters().read();
        single(
            &mut enc,
            (
                "clusterset_dns_source_invalid_documents_total",
                COUNTER,
                "Source documents that could not be used.",
            ),
            c.invalid_documents,
        )?;
        family(
            &mut enc,
            (
                "clusterset_dns_source_reload_errors_total",
                COUNTER,
                "Reloads of a cluster that failed and kept the previous data.",
            ),
            c.reload_errors
                .iter()
                .map(|(cluster, n)| ([("cluster", &**cluster)], Num::Int(*n))),
        )?;
        family(
            &mut enc,
            (
                "clusterset_dns_link_credentials_refused_total",
                COUNTER,
                "Link credentials Secrets whose kubeconfig was refused (counted once per Secret version), by reason: exec, auth_provider, file_reference, too_large, unparsable (--allow-kubeconfig-exec lifts all but the last two).",
            ),
            c.credentials_refused
                .iter()
                .map(|(reason, n)| ([("reason", *reason)], Num::Int(*n))),
        )?;
        family(
            &mut enc,
            (
                "clusterset_dns_source_skipped_objects_total",
                COUNTER,
                "Source documents of kinds that are not read, by kind: Service, EndpointSlice or List of an apiVersion not read, else other.",
            ),
            c.skipped
                .iter()
                .map(|(kind, n)| ([("kind", kind.label())], Num::Int(*n))),
        )?;
        self.clusters(&mut enc)
    }
}

impl Sources {
    /// The per-cluster families (none before the first cluster).
    fn clusters(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let now = Instant::now();
        let reports = self.0.snapshot();
        if reports.is_empty() {
            return Ok(());
        }
        for (name, kind, help, get) in CLUSTER_FAMILIES {
            let rows: Vec<_> = reports
                .iter()
                .filter_map(|(c, r)| get(r, now).map(|v| ([("cluster", &**c)], v)))
                .collect();
            if !rows.is_empty() {
                family(enc, (name, kind, help), rows)?;
            }
        }
        family(
            enc,
            (
                "clusterset_dns_cluster_state",
                GAUGE,
                "1 for the cluster's current state, 0 for the others: no-credentials, connecting, syncing, gave-up, synced, broken, unreachable.",
            ),
            reports.iter().flat_map(|(c, r)| {
                let current = r.phase();
                Phase::ALL.into_iter().map(move |p| {
                    let labels = [("cluster", &**c), ("state", p.label())];
                    (labels, Num::Int(u64::from(p == current)))
                })
            }),
        )?;
        family(
            enc,
            (
                "clusterset_dns_cluster_objects_adjusted_total",
                COUNTER,
                "Objects from the cluster skipped (not used) or clamped (used with a part left out), by reason (docs/metrics.md). File mode: what the cluster's files hold as last loaded.",
            ),
            reports.iter().flat_map(|(c, r)| {
                r.adjusted.iter().map(|((adjustment, reason), n)| {
                    let labels = [
                        ("cluster", &**c),
                        ("reason", reason.label()),
                        ("action", adjustment.label()),
                    ];
                    (labels, Num::Int(*n))
                })
            }),
        )
    }
}

/// How long a remote EndpointSlice change took to be answered, per known
/// cluster (none before the first cluster).
#[derive(Debug)]
struct Propagated(Arc<Propagation>);

impl Collector for Propagated {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let series = self.0.read();
        if series.is_empty() {
            return Ok(());
        }
        let mut m = enc.encode_descriptor(
            "clusterset_dns_propagation_seconds",
            "Time from an EndpointSlice change on its cluster (its endpoints.kubernetes.io/last-change-trigger-time annotation) to the publication of answers reflecting it; slices without the annotation are not observed.",
            None,
            MetricType::Histogram,
        )?;
        for (cluster, s) in &series {
            s.seconds
                .encode(m.encode_family(&[("cluster", &**cluster)])?)?;
        }
        family(
            &mut enc,
            (
                "clusterset_dns_propagation_clock_skew_total",
                COUNTER,
                "Trigger times later than the publication (the cluster's clock ahead of ours), observed as 0 in clusterset_dns_propagation_seconds.",
            ),
            series
                .iter()
                .map(|(c, s)| ([("cluster", &**c)], Num::Int(s.clock_skew))),
        )
    }
}

/// The mirror controller, when it runs.
#[derive(Debug)]
struct Mirror(Arc<MirrorStats>);

impl Collector for Mirror {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let stats = &self.0;
        if !stats.is_enabled() {
            return Ok(());
        }
        let (owned, unowned) = stats.objects();
        let gauges = [
            (
                "clusterset_dns_mirror_leader",
                "1 while this process holds the mirror lease and writes.",
                u64::from(stats.is_leader()),
            ),
            (
                "clusterset_dns_mirror_objects_owned",
                "Services and EndpointSlices carrying our managed-by label.",
                owned,
            ),
            (
                "clusterset_dns_mirror_objects_not_owned",
                "Wanted objects left alone because a same-named object without our label exists.",
                unowned,
            ),
            (
                "clusterset_dns_mirror_problems",
                "Desired objects reported at the last computation: names shortened to 63 characters (full name kept in an annotation), name collisions.",
                stats.problems(),
            ),
        ];
        for (name, help, n) in gauges {
            single(&mut enc, (name, GAUGE, help), n)?;
        }
        family(
            &mut enc,
            (
                "clusterset_dns_mirror_writes_total",
                COUNTER,
                "Writes to the local cluster by kind, operation and outcome.",
            ),
            stats.writes().into_iter().map(|((kind, op, outcome), n)| {
                let labels = [("kind", kind), ("op", op), ("outcome", outcome)];
                (labels, Num::Int(n))
            }),
        )?;
        single(
            &mut enc,
            (
                "clusterset_dns_mirror_watch_undecodable_total",
                COUNTER,
                "Objects of ours the mirror's watches skipped because they did not decode.",
            ),
            stats.undecodable(),
        )?;
        let latency = stats.latency();
        let m = enc.encode_descriptor(
            "clusterset_dns_mirror_reconcile_seconds",
            "Time from a model change to the local writes it caused.",
            None,
            latency.metric_type(),
        )?;
        latency.encode(m)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use openmetrics_parser::PrometheusValue;
    use openmetrics_parser::prometheus::parse_prometheus;

    use super::*;
    use crate::dns::stats::Limit;
    use crate::dns::wire::{Rcode, rtype};
    use crate::model::{Settings, Snapshot};
    use crate::vocab::name::ZoneName;

    fn shared() -> Arc<Shared> {
        let zone = ZoneName::new("clusterset.local").expect("zone");
        let snap = Snapshot::empty(Arc::new(Settings::new(zone)));
        let shared = Shared::new(Arc::new(snap), Arc::default(), ModelViews::default());
        shared.ready.store(true, Ordering::Release);
        Arc::new(shared)
    }

    #[test]
    fn counters_keep_their_names_and_values_stay_integers() {
        let shared = shared();
        shared.dns.query(Some(rtype::A), Rcode::NoError);
        shared.dns.limit_hit(Limit::InFlight);
        shared.config_reloads.config_reload(false);
        let text = Metrics::new(&shared).encode().expect("encode");
        for line in [
            "# TYPE clusterset_dns_queries_total counter",
            "clusterset_dns_queries_total{qtype=\"A\",rcode=\"NOERROR\"} 1",
            "clusterset_dns_limit_hits_total{limit=\"in_flight\"} 1",
            "clusterset_dns_config_reload_errors_total 1",
            "clusterset_dns_ready 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
        assert!(!text.contains("_total_total"), "{text}");
        assert!(
            !text.contains("mirror"),
            "no mirror families unless it runs"
        );
    }

    #[test]
    fn the_mirror_histogram_has_its_buckets_sum_and_count() {
        let shared = shared();
        shared.mirror.enable();
        shared.mirror.write("Service", "create", "ok");
        shared.mirror.observe_latency(Duration::from_millis(3));
        shared.mirror.observe_latency(Duration::from_secs(9));
        let text = Metrics::new(&shared).encode().expect("encode");
        let name = "clusterset_dns_mirror_reconcile_seconds";
        for line in [
            format!("{name}_bucket{{le=\"0.001\"}} 0"),
            format!("{name}_bucket{{le=\"0.005\"}} 1"),
            format!("{name}_bucket{{le=\"5\"}} 1"),
            format!("{name}_bucket{{le=\"+Inf\"}} 2"),
            format!("{name}_count 2"),
            "clusterset_dns_mirror_writes_total{kind=\"Service\",op=\"create\",outcome=\"ok\"} 1"
                .to_owned(),
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
        let parsed = parse_prometheus(&text).expect("parses");
        let family = parsed.families.get(name).expect("histogram family");
        let sample = family.iter_samples().next().expect("one sample");
        match &sample.value {
            PrometheusValue::Histogram(h) => assert_eq!(h.count, Some(2)),
            other => panic!("not a histogram: {other:?}"),
        }
    }

    #[test]
    fn propagation_is_a_histogram_per_known_cluster() {
        use crate::model::{ClusterSet, Dirty, Event};
        use crate::propagation::Pending;
        use std::time::UNIX_EPOCH;
        let shared = shared();
        assert!(
            !Metrics::new(&shared)
                .encode()
                .expect("encode")
                .contains("propagation"),
            "no family before the first cluster"
        );
        let up = Event::ClusterUp {
            cluster: "east".into(),
            local: false,
        };
        let mut set = ClusterSet::new();
        set.apply(up.clone(), &mut Dirty::default());
        let mut pending = Pending::default();
        pending.note(&[up]);
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        pending.publish(&shared.propagation, &set, now);
        let text = Metrics::new(&shared).encode().expect("encode");
        let name = "clusterset_dns_propagation_seconds";
        for line in [
            format!("# TYPE {name} histogram"),
            format!("{name}_bucket{{cluster=\"east\",le=\"5\"}} 0"),
            format!("{name}_count{{cluster=\"east\"}} 0"),
            "clusterset_dns_propagation_clock_skew_total{cluster=\"east\"} 0".to_owned(),
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
        }
        assert!(parse_prometheus(&text).is_ok(), "{text}");
    }

    #[test]
    fn a_label_value_cannot_break_out_of_its_quotes() {
        let shared = shared();
        let name: Arc<str> = "a\"} 1\nevil{x=\"y\\".into();
        shared.board.register(&name, false, "test".to_owned());
        let text = Metrics::new(&shared).encode().expect("encode");
        let parsed = parse_prometheus(&text).expect("parses");
        assert!(!parsed.families.contains_key("evil"), "{text}");
        assert!(!text.lines().any(|l| l.starts_with("evil")), "{text}");
    }
}
