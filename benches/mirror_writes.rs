//! Write amplification of the mirror controller (`serve --mirror`): how many writes the local
//! cluster's API gets per endpoint change in a remote cluster, how many a resync with nothing
//! changed costs (it must be none), and how long a remote change takes to reach the local mirror
//! EndpointSlice.
//!
//! Setup: kubesim with a local cluster and three remote clusters; in each remote cluster, in
//! namespace `bench`, N Services (default 300) exported flat (`mirror.linkerd.io/exported:
//! remote-discovery`) with one EndpointSlice of 10 ready endpoints each; every fifth Service is
//! also a federated member (`mirror.linkerd.io/federated: member`) in every cluster. The local
//! cluster has the `bench` namespace (mirrors go only into namespaces that exist) and the Lease
//! namespace. The server runs with `--mirror --mirror-resync 2s`, and the bench waits until the
//! local cluster holds every expected object carrying `app.kubernetes.io/managed-by=clusterset-dns`
//! (`<svc>-<cluster>` per remote Service, `<svc>-federated` and `<svc>-nearest` per federated
//! Service, each a Service and one EndpointSlice; no place is configured and the local cluster is
//! no member, so every member is one tier and `<svc>-nearest` holds the union), the contents
//! match, and no write has come for a quiet period (1 s; 0.5 s in the smoke run).
//!
//! Changes: 1,000, round-robin over clusters and services, each a JSON merge patch of one remote
//! slice's `endpoints` that replaces one endpoint IP with an IP never used before. Latency of one
//! change: from just before the remote write is sent to the local commit (seen by an in-process
//! subscriber to the local cluster's store) of the mirror slice `<svc>-<cluster>-v4-0` holding the
//! new IP, and for a federated member also of `<svc>-federated-v4-0` (its `<svc>-nearest-v4-0` is
//! written too, counted but not timed); at most 5 s per change, else a timeout. Changes are
//! sequential: the next starts when the previous one is complete.
//!
//! Writes are counted with kubesim's request counters on the local cluster (create, update,
//! patch, delete on Services and EndpointSlices, whatever their outcome); Lease writes (the
//! leader's renewals) and any other writes (Events) are reported separately. Counted: the initial
//! convergence, the change phase (until a quiet period after the last change), and a window of
//! 3.5 resync periods with no change, whose writes must be 0. To say where writes come from, the
//! change phase also reports the local commits by object kind (flat slice, federated slice,
//! nearest slice, Service) and the objects written more often than they were committed (writes that changed
//! nothing). The server's own `clusterset_dns_mirror_writes_total` and
//! `clusterset_dns_mirror_reconcile_seconds` are reported next to kubesim's counts.
//!
//! The server runs as the built binary (`serve --mirror ...`, RSS read exactly from
//! `/proc/<pid>/status`); if the binary is missing, or with `MIRROR_WRITES_IN_PROCESS=1`, it runs
//! in this process (as `tests/integration/support.rs` `start_live` with a `MirrorSetup` does) and
//! the RSS reported is this process's growth. Each server mode gets a fresh kubesim.
//!
//! `cargo bench --bench mirror_writes` runs the full size; `cargo test --bench mirror_writes` runs
//! a small smoke version (3 clusters x 10 services, 30 changes, 0.5 s resync, both server modes)
//! asserting no timeout, a converged and correct mirror, and no write in the resync window. Sizes
//! can be overridden with `MIRROR_WRITES_CLUSTERS`, `MIRROR_WRITES_SERVICES`,
//! `MIRROR_WRITES_ENDPOINTS`, `MIRROR_WRITES_CHANGES`, `MIRROR_WRITES_FEDERATED_EVERY` (every
//! n-th Service is a federated member; 0: none), `MIRROR_WRITES_RESYNC_MS` and
//! `MIRROR_WRITES_QUIET_MS`;
//! `MIRROR_WRITES_TLS=1` serves kubesim over HTTPS; `MIRROR_WRITES_LOG` is the child's `RUST_LOG`.
//!
//! Before all that, per server mode, the scale part (`mirror_scale/mod.rs`): the server's CPU per
//! remote change at about 1,000 and 100,000 mirrored endpoints (within 2x of each other: the
//! controller's cost follows the change), and a restart at the large size that must write
//! nothing; `MIRROR_SCALE=0` skips it, `MIRROR_WRITES_SCALE_ONLY=1` runs only it.

#[path = "common/mod.rs"]
mod common;
#[path = "mirror_scale/mod.rs"]
mod scale;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clusterset_dns::mirror::lease::LeaseConfig;
use clusterset_dns::mirror::run::MirrorConfig;
use clusterset_dns::runtime::Server;
use kube::Client;
use kubesim::resources::{ENDPOINTSLICES, RESOURCES, SERVICES};
use kubesim::store::{Change, ReadAt};
use serde_json::Value;
use tokio::sync::broadcast;

use scale::cpu_of;

use common::{
    CHANGE_TIMEOUT, ChildGuard, Kube, Mode, NS, RemoteChange, Rss, flag, ms, remote_name, size,
    table_head, table_row,
};

/// The local namespace of the mirror's Lease (`--mirror-namespace`).
const LEASE_NS: &str = "clusterset-dns";
/// Our ownership label.
const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
const MANAGED_BY: &str = "clusterset-dns";
/// Longest wait for the server to start, lead, and converge.
const SYNC_TIMEOUT: Duration = Duration::from_secs(180);
/// kube verbs that write.
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];
/// The resources the mirror writes, as kubesim's counters name them.
const MIRROR_RESOURCES: [&str; 2] = ["services", "endpointslices.discovery.k8s.io"];
const LEASES: &str = "leases.coordination.k8s.io";

/// The sizes of one run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    clusters: usize,
    services: usize,
    endpoints: usize,
    changes: usize,
    /// Every `federated_every`-th Service (0, n, 2n, …) is a federated member; 0: none.
    federated_every: usize,
    resync: Duration,
    /// No local write for this long: the mirror has settled.
    quiet: Duration,
}

impl Sizes {
    fn member(&self, s: usize) -> bool {
        self.federated_every > 0 && s.is_multiple_of(self.federated_every)
    }

    fn federated(&self) -> usize {
        (0..self.services).filter(|s| self.member(*s)).count()
    }

    /// Our Services (and our EndpointSlices: one each) once converged: a federated Service has
    /// `<svc>-federated` and `<svc>-nearest`.
    fn expected_objects(&self) -> usize {
        self.clusters * self.services + 2 * self.federated()
    }
}

/// The local mirror slice of remote service `s` of cluster `c`.
fn flat_slice(s: usize, c: usize) -> String {
    format!("svc-{s}-{}-v4-0", remote_name(c))
}

/// The local federated slice of service `s`.
fn federated_slice(s: usize) -> String {
    format!("svc-{s}-federated-v4-0")
}

/// The local nearest slice of service `s`.
fn nearest_slice(s: usize) -> String {
    format!("svc-{s}-nearest-v4-0")
}

/// A running server.
enum Running {
    Process {
        child: ChildGuard,
        admin: SocketAddr,
    },
    InProcess(Server),
}

/// `GET path` on the admin server: the status code and the body.
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return (0, String::new());
    }
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// Starts the server with the mirror in this process, as `tests/integration/support.rs`
/// `start_live` does with a `MirrorSetup` (client-go's default lease timings, as the binary).
async fn start_in_process(kubeconfig: &Path, clusters_file: &Path, resync: Duration) -> Server {
    common::start_in_process(kubeconfig, clusters_file, |settings, local_client| {
        Some(MirrorConfig {
            client: local_client.clone(),
            local: "local".into(),
            cluster_domain: "cluster.local".into(),
            linkerd_flat_compat: false,
            link_namespace: None,
            lease: LeaseConfig::new(
                LEASE_NS,
                "clusterset-dns-mirror",
                &format!("bench_{}", std::process::id()),
            ),
            resync,
            federated_grace: settings.federated_grace,
            mcs: false,
        })
    })
    .await
}

impl Running {
    /// The server's `/metrics` text (empty when unreachable).
    fn metrics(&self) -> String {
        match self {
            Running::Process { admin, .. } => http_get(*admin, "/metrics").1,
            Running::InProcess(server) => clusterset_dns::metrics::Metrics::new(&server.shared)
                .encode()
                .unwrap_or_default(),
        }
    }

    fn ready(&self) -> bool {
        match self {
            Running::Process { admin, .. } => http_get(*admin, "/ready").0 == 200,
            Running::InProcess(server) => server.shared.ready.load(Ordering::Acquire),
        }
    }

    fn leader(&self) -> bool {
        match self {
            Running::Process { .. } => self
                .metrics()
                .lines()
                .any(|l| l.trim() == "clusterset_dns_mirror_leader 1"),
            Running::InProcess(server) => server.shared.mirror.is_leader(),
        }
    }

    /// `clusterset_dns_mirror_reconcile_seconds`: (sum, count).
    fn reconcile_seconds(&self) -> (f64, u64) {
        let text = self.metrics();
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (
            value("clusterset_dns_mirror_reconcile_seconds_sum "),
            value("clusterset_dns_mirror_reconcile_seconds_count ") as u64,
        )
    }

    /// `clusterset_dns_mirror_objects_owned`: set at the end of every reconcile pass, so it is
    /// 0 until the first pass after a start is done.
    fn objects_owned(&self) -> u64 {
        match self {
            Running::Process { .. } => self
                .metrics()
                .lines()
                .find_map(|l| l.strip_prefix("clusterset_dns_mirror_objects_owned "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map_or(0, |v| v as u64),
            Running::InProcess(server) => server.shared.mirror.objects().0,
        }
    }

    /// CPU time (user + system) of the server's process so far: the child's, or this whole
    /// process's (kubesim and the bench included) when the server runs in it.
    fn cpu(&self) -> Duration {
        let path = match self {
            Running::Process { child, .. } => format!("/proc/{}/stat", child.0.id()),
            Running::InProcess(_) => "/proc/self/stat".to_owned(),
        };
        cpu_of(&path)
    }

    /// `clusterset_dns_mirror_writes_total` by its label set.
    fn mirror_writes(&self) -> BTreeMap<String, u64> {
        self.metrics()
            .lines()
            .filter_map(|l| l.strip_prefix("clusterset_dns_mirror_writes_total{"))
            .filter_map(|l| {
                let (labels, value) = l.split_once("} ")?;
                Some((labels.replace('"', ""), value.trim().parse().ok()?))
            })
            .collect()
    }
}

/// kubesim's request counters of a cluster.
type Counters = BTreeMap<(String, String), u64>;

fn counters(cluster: &kubesim::Cluster) -> Counters {
    cluster.counters().into_iter().collect()
}

fn diff(after: &Counters, before: &Counters) -> Counters {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// Writes counted in one phase, from a counter difference.
#[derive(Debug, Default)]
struct Writes {
    /// Writes to Services and EndpointSlices, by (verb, resource).
    mirror: Counters,
    /// Lease writes, by verb.
    leases: BTreeMap<String, u64>,
    /// Any other write, by (verb, resource).
    other: Counters,
    /// get and list requests to Services and EndpointSlices, by (verb, resource).
    reads: Counters,
}

impl Writes {
    fn of(d: &Counters) -> Self {
        let mut w = Writes::default();
        for ((verb, resource), n) in d {
            let key = (verb.clone(), resource.clone());
            let mirror = MIRROR_RESOURCES.contains(&resource.as_str());
            if WRITE_VERBS.contains(&verb.as_str()) {
                if mirror {
                    w.mirror.insert(key, *n);
                } else if resource == LEASES {
                    w.leases.insert(verb.clone(), *n);
                } else {
                    w.other.insert(key, *n);
                }
            } else if mirror && (verb == "get" || verb == "list") {
                w.reads.insert(key, *n);
            }
        }
        w
    }

    fn total(&self) -> u64 {
        self.mirror.values().sum()
    }

    fn lease_total(&self) -> u64 {
        self.leases.values().sum()
    }
}

fn kind_of(resource: &str) -> &str {
    match resource {
        "services" => "Service",
        "endpointslices.discovery.k8s.io" => "EndpointSlice",
        other => other,
    }
}

/// `EndpointSlice patch 1200, Service create 3` (or `none`), with per-change rates when `per` is
/// given.
fn breakdown(c: &Counters, per: Option<usize>) -> String {
    if c.is_empty() {
        return "none".into();
    }
    c.iter()
        .map(|((verb, resource), n)| match per {
            Some(p) => format!(
                "{} {verb} {n} ({:.3}/change)",
                kind_of(resource),
                *n as f64 / p.max(1) as f64
            ),
            None => format!("{} {verb} {n}", kind_of(resource)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn map_text(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn metric_diff(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> String {
    let d: BTreeMap<String, u64> = after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0);
            (d > 0).then(|| (k.clone(), d))
        })
        .collect();
    if d.is_empty() {
        return "none".into();
    }
    d.iter()
        .map(|(k, n)| format!("{{{k}}} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Mirror writes in the audit log from entry `from` on: by HTTP status code, and by object
/// (kind, name).
fn audit_writes(
    cluster: &kubesim::Cluster,
    from: usize,
) -> (BTreeMap<u16, u64>, BTreeMap<(String, String), u64>) {
    let mut out = BTreeMap::new();
    let mut objects = BTreeMap::new();
    for e in cluster.audit().iter().skip(from) {
        let resource = if e.group.is_empty() {
            e.resource.clone()
        } else {
            format!("{}.{}", e.resource, e.group)
        };
        if WRITE_VERBS.contains(&e.verb.as_str()) && MIRROR_RESOURCES.contains(&resource.as_str()) {
            *out.entry(e.code).or_default() += 1;
            *objects
                .entry((kind_of(&resource).to_owned(), e.name.clone()))
                .or_default() += 1;
        }
    }
    (out, objects)
}

/// Writes to Services and EndpointSlices so far.
fn mirror_write_count(cluster: &kubesim::Cluster) -> u64 {
    Writes::of(&counters(cluster)).total()
}

/// Our objects of `res` in the local `bench` namespace.
fn ours(local: &kubesim::Cluster, res: usize) -> Vec<Value> {
    let store = local.store();
    let (_, objects) = store.list(res, Some(NS), ReadAt::Latest).expect("list");
    objects
        .iter()
        .filter(|o| {
            o.labels()
                .and_then(|l| l.get(MANAGED_BY_LABEL))
                .and_then(Value::as_str)
                == Some(MANAGED_BY)
        })
        .map(|o| o.value())
        .collect()
}

/// The sorted addresses of a slice's endpoints.
fn slice_ips(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    out.sort();
    out
}

/// Mismatches between the local mirror slices and `ips` (empty: every mirror is right, and there
/// is nothing extra).
fn check_mirrors(
    local: &kubesim::Cluster,
    ips: &[Vec<Vec<Ipv4Addr>>],
    sizes: Sizes,
) -> Vec<String> {
    let slices: BTreeMap<String, Value> = ours(local, ENDPOINTSLICES)
        .into_iter()
        .map(|v| (v["metadata"]["name"].as_str().unwrap_or("").to_owned(), v))
        .collect();
    let sorted = |v: Vec<Ipv4Addr>| {
        let mut v: Vec<String> = v.iter().map(ToString::to_string).collect();
        v.sort();
        v
    };
    let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in 0..sizes.services {
        for (c, cluster) in ips.iter().enumerate() {
            want.insert(flat_slice(s, c), sorted(cluster[s].clone()));
        }
        if sizes.member(s) {
            let union = sorted(ips.iter().flat_map(|c| c[s].clone()).collect());
            // One tier (no places, no local member): the nearest name answers the union.
            want.insert(nearest_slice(s), union.clone());
            want.insert(federated_slice(s), union);
        }
    }
    let mut problems = Vec::new();
    for (name, ips) in &want {
        match slices.get(name) {
            None => problems.push(format!("{name}: missing")),
            Some(v) if slice_ips(v) != *ips => {
                problems.push(format!("{name}: holds {:?}, want {ips:?}", slice_ips(v)));
            }
            Some(_) => {}
        }
    }
    for name in slices.keys().filter(|n| !want.contains_key(*n)) {
        problems.push(format!("{name}: not expected"));
    }
    let services = ours(local, SERVICES).len();
    if services != sizes.expected_objects() {
        problems.push(format!(
            "{services} Services of ours, want {}",
            sizes.expected_objects()
        ));
    }
    problems
}

/// Waits until the local mirror writes have stopped for `quiet`.
fn wait_quiet(local: &kubesim::Cluster, quiet: Duration, deadline: Instant) {
    let mut last = mirror_write_count(local);
    let mut since = Instant::now();
    while since.elapsed() < quiet {
        assert!(Instant::now() < deadline, "the mirror never settled");
        std::thread::sleep(Duration::from_millis(20));
        let now = mirror_write_count(local);
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
}

/// Local commits during the change phase, by what they touched.
#[derive(Debug, Default)]
struct Commits {
    flat_slices: u64,
    federated_slices: u64,
    nearest_slices: u64,
    services: u64,
    leases: u64,
    other: BTreeMap<String, u64>,
    /// Commits of our Services and EndpointSlices by (kind, name).
    objects: BTreeMap<(String, String), u64>,
}

impl Commits {
    fn record(&mut self, ch: &Change) {
        let def = &RESOURCES[ch.res];
        if ch.res == ENDPOINTSLICES || ch.res == SERVICES {
            *self
                .objects
                .entry((def.kind.to_owned(), ch.object.name().to_owned()))
                .or_default() += 1;
        }
        if ch.res == ENDPOINTSLICES {
            if ch.object.name().contains("-federated-") {
                self.federated_slices += 1;
            } else if ch.object.name().contains("-nearest-") {
                self.nearest_slices += 1;
            } else {
                self.flat_slices += 1;
            }
        } else if ch.res == SERVICES {
            self.services += 1;
        } else if def.plural == "leases" {
            self.leases += 1;
        } else {
            *self.other.entry(def.plural.to_owned()).or_default() += 1;
        }
    }
}

/// What the change phase measured.
#[derive(Default)]
struct Measured {
    /// Write sent → the local `<svc>-<cluster>` slice holds the new IP.
    flat: Vec<Duration>,
    /// Write sent → the local `<svc>-federated` slice holds it (members only).
    federated: Vec<Duration>,
    /// Write sent → every local mirror slice of the change holds it.
    complete: Vec<Duration>,
    /// Remote commit → every local mirror slice holds it.
    from_commit: Vec<Duration>,
    /// Write sent → remote commit.
    to_commit: Vec<Duration>,
    /// Changes to federated members.
    member_changes: usize,
    timeouts: usize,
    commits: Commits,
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Receives the next change, skipping lag; `None` once closed.
async fn next(rx: &mut broadcast::Receiver<Arc<Change>>) -> Option<Arc<Change>> {
    loop {
        match rx.recv().await {
            Ok(ch) => return Some(ch),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                eprintln!("mirror_writes: subscriber lagged by {n} changes");
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

/// Runs `changes` changes, round-robin over clusters and services.
async fn run_changes(
    clients: &[Client],
    local: &kubesim::Cluster,
    remotes: &[&Arc<kubesim::Cluster>],
    ips: &mut [Vec<Vec<Ipv4Addr>>],
    sizes: Sizes,
) -> Measured {
    let mut local_rx = local.subscribe();
    let mut remote_rx: Vec<_> = remotes.iter().map(|r| r.subscribe()).collect();
    let mut m = Measured::default();
    for k in 0..sizes.changes {
        let change = RemoteChange::new(k, clients, ips);
        let (c, s) = (change.c, change.s);
        let needle = format!("\"{}\"", change.new_ip).into_bytes();
        let remote_slice = change.slice.as_str();
        let flat = flat_slice(s, c);
        let member = sizes.member(s);
        let fed = federated_slice(s);
        m.member_changes += usize::from(member);

        let write = change.write();

        let t0 = Instant::now();
        let write = tokio::spawn(write);
        let deadline = tokio::time::Instant::from_std(t0 + CHANGE_TIMEOUT);
        let (mut committed, mut flat_at, mut fed_at) = (None, None, None);
        loop {
            let done = flat_at.is_some() && (!member || fed_at.is_some());
            if done && committed.is_some() {
                break;
            }
            tokio::select! {
                ch = next(&mut remote_rx[c]), if committed.is_none() => {
                    let Some(ch) = ch else { break };
                    if ch.res == ENDPOINTSLICES
                        && ch.object.name() == remote_slice
                        && contains(&ch.object.json, &needle)
                    {
                        committed = Some(Instant::now());
                    }
                }
                ch = next(&mut local_rx) => {
                    let Some(ch) = ch else { break };
                    let at = Instant::now();
                    m.commits.record(&ch);
                    if ch.res == ENDPOINTSLICES
                        && ch.object.namespace() == NS
                        && contains(&ch.object.json, &needle)
                    {
                        let name = ch.object.name();
                        if name == flat && flat_at.is_none() {
                            flat_at = Some(at);
                        } else if member && name == fed && fed_at.is_none() {
                            fed_at = Some(at);
                        }
                    }
                }
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        write
            .await
            .expect("write task")
            .unwrap_or_else(|e| panic!("patch of svc-{s} in {}: {e}", remote_name(c)));
        ips[c][s] = change.next;
        if let Some(f) = flat_at {
            m.flat.push(f - t0);
        }
        if let Some(f) = fed_at {
            m.federated.push(f - t0);
        }
        let complete = match (flat_at, fed_at, member) {
            (Some(f), _, false) => Some(f),
            (Some(f), Some(g), true) => Some(f.max(g)),
            _ => None,
        };
        let Some(complete) = complete else {
            m.timeouts += 1;
            continue;
        };
        m.complete.push(complete - t0);
        if let Some(at) = committed {
            m.to_commit.push(at.saturating_duration_since(t0));
            m.from_commit.push(complete.saturating_duration_since(at));
        }
    }
    // Trailing writes of the last changes: count their commits too.
    let quiet = async {
        while let Ok(Some(ch)) = tokio::time::timeout(sizes.quiet, next(&mut local_rx)).await {
            m.commits.record(&ch);
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(30), quiet).await;
    m
}

/// Everything one server mode measured.
struct Report {
    how: String,
    load_time: Duration,
    converge_time: Duration,
    initial: Writes,
    initial_metric: BTreeMap<String, u64>,
    initial_problems: Vec<String>,
    changes: Writes,
    change_codes: BTreeMap<u16, u64>,
    /// Objects written more often than they changed (kind, name, writes, commits).
    no_ops: Vec<(String, String, u64, u64)>,
    change_metric: String,
    /// The server's reconcile histogram over the changes: (sum of seconds, count).
    reconcile: (f64, u64),
    change_time: Duration,
    measured: Measured,
    final_problems: Vec<String>,
    window: Duration,
    resync_writes: Writes,
    resync_metric: String,
    resync_lists: u64,
    rss: String,
}

/// Starts the server in `mode` on `kube`, with `--mirror-resync resync`.
fn start_server(
    rt: &tokio::runtime::Runtime,
    mode: Mode,
    binary: Option<&Path>,
    kube: &Kube,
    resync: Duration,
) -> Running {
    let kubeconfig = kube.local().kubeconfig_path().to_owned();
    match mode {
        Mode::Process => {
            let binary = binary.expect("binary");
            let resync = format!("{}ms", resync.as_millis());
            let (child, line) = common::start_process(
                binary,
                &kubeconfig,
                &kube.clusters_file,
                &[
                    "--mirror",
                    "--mirror-namespace",
                    LEASE_NS,
                    "--mirror-resync",
                    &resync,
                ],
                "MIRROR_WRITES_LOG",
            );
            let admin = common::listening_addr(&line, "admin=");
            Running::Process { child, admin }
        }
        Mode::InProcess => Running::InProcess(rt.block_on(start_in_process(
            &kubeconfig,
            &kube.clusters_file,
            resync,
        ))),
    }
}

/// Waits until the server is ready and leads and the local cluster holds as many objects of
/// ours as expected; returns the time since `started`.
fn wait_converged(
    running: &Running,
    local: &kubesim::Cluster,
    sizes: Sizes,
    started: Instant,
    deadline: Instant,
) -> Duration {
    while !running.ready() || !running.leader() {
        assert!(
            Instant::now() < deadline,
            "server not ready or not leading in time"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let expected = sizes.expected_objects();
    loop {
        let slices = ours(local, ENDPOINTSLICES).len();
        let services = ours(local, SERVICES).len();
        if slices >= expected && services >= expected {
            return started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "the mirror did not converge in time: {services} Services and {slices} EndpointSlices of ours, want {expected} each"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run(rt: &tokio::runtime::Runtime, mode: Mode, binary: Option<&Path>, sizes: Sizes) -> Report {
    let kube = Kube::start(rt, sizes.clusters, flag("MIRROR_WRITES_TLS"), false);
    let local = kube.local().clone();
    let remotes = kube.remotes();

    let mut ips = common::initial_ips(sizes.clusters, sizes.services, sizes.endpoints);
    let (clients, local_client) = rt.block_on(async {
        (
            common::clients(&remotes).await,
            common::client(&local).await,
        )
    });
    let started = Instant::now();
    rt.block_on(async {
        common::create_namespace(&local_client, NS).await;
        common::create_namespace(&local_client, LEASE_NS).await;
        common::load(&clients, &ips, |s| sizes.member(s)).await;
    });
    let load_time = started.elapsed();

    // Start the server; wait until it is ready, leads, and the mirror has converged.
    let mut rss = Rss::start();
    let base = counters(&local);
    let started = Instant::now();
    let deadline = started + SYNC_TIMEOUT;
    let running = start_server(rt, mode, binary, &kube, sizes.resync);
    let converge_time = wait_converged(&running, &local, sizes, started, deadline);
    wait_quiet(&local, sizes.quiet, deadline);
    let initial_problems = check_mirrors(&local, &ips, sizes);
    let settled = counters(&local);
    let initial = Writes::of(&diff(&settled, &base));
    let initial_metric = running.mirror_writes();
    rss.synced(match &running {
        Running::Process { child, .. } => Some(child),
        Running::InProcess(_) => None,
    });

    // The changes.
    let audit_from = local.audit().len();
    let metric_before = initial_metric.clone();
    let reconcile_before = running.reconcile_seconds();
    let started = Instant::now();
    let measured = rt.block_on(run_changes(&clients, &local, &remotes, &mut ips, sizes));
    wait_quiet(&local, sizes.quiet, Instant::now() + SYNC_TIMEOUT);
    let change_time = started.elapsed();
    let after_changes = counters(&local);
    let changes = Writes::of(&diff(&after_changes, &settled));
    let (change_codes, written) = audit_writes(&local, audit_from);
    let no_ops: Vec<(String, String, u64, u64)> = written
        .into_iter()
        .filter_map(|((kind, name), w)| {
            let c = measured
                .commits
                .objects
                .get(&(kind.clone(), name.clone()))
                .copied()
                .unwrap_or(0);
            (w > c).then_some((kind, name, w, c))
        })
        .collect();
    let metric_after = running.mirror_writes();
    let change_metric = metric_diff(&metric_after, &metric_before);
    let reconcile_after = running.reconcile_seconds();
    let reconcile = (
        reconcile_after.0 - reconcile_before.0,
        reconcile_after.1 - reconcile_before.1,
    );
    let final_problems = check_mirrors(&local, &ips, sizes);
    rss.after();

    // Nothing changes for 3.5 resync periods.
    let window = sizes.resync * 7 / 2;
    let before = counters(&local);
    std::thread::sleep(window);
    let after = counters(&local);
    let d = diff(&after, &before);
    let resync_lists = d
        .get(&("list".to_owned(), "services".to_owned()))
        .copied()
        .unwrap_or(0);
    let resync_writes = Writes::of(&d);
    let resync_metric = metric_diff(&running.mirror_writes(), &metric_after);

    let rss = rss.text(mode, " converged", "");
    let how = common::how(mode, binary);
    match running {
        Running::Process { child, .. } => drop(child),
        Running::InProcess(server) => rt.block_on(server.stop()),
    }
    drop(kube);
    Report {
        how,
        load_time,
        converge_time,
        initial,
        initial_metric,
        initial_problems,
        changes,
        change_codes,
        no_ops,
        change_metric,
        reconcile,
        change_time,
        measured,
        final_problems,
        window,
        resync_writes,
        resync_metric,
        resync_lists,
        rss,
    }
}

/// `correct`, or how many mismatches `check_mirrors` found, with the first.
fn content(problems: &[String]) -> String {
    if problems.is_empty() {
        "correct".to_owned()
    } else {
        format!("{} mismatches, e.g. {:?}", problems.len(), problems.first())
    }
}

fn print(r: &mut Report, sizes: Sizes) {
    let m = &mut r.measured;
    let n = sizes.changes;
    let total = r.changes.total();
    println!(
        "mirror_writes: {} clusters x {} services x {} endpoints ({} federated), {n} changes ({} to federated members): {:.3} local writes per change ({total}: {}); change → local slice {}, timeouts {}; resync window {:.1} s: {} writes; {}",
        sizes.clusters,
        sizes.services,
        sizes.endpoints,
        sizes.federated(),
        m.member_changes,
        total as f64 / n.max(1) as f64,
        breakdown(&r.changes.mirror, None),
        common::p50_p99_max(&m.complete),
        m.timeouts,
        r.window.as_secs_f64(),
        r.resync_writes.total(),
        r.rss,
    );
    println!(
        "  server ({}), --mirror-resync {} ms; kubesim over {}; load {:.2} s",
        r.how,
        sizes.resync.as_millis(),
        if flag("MIRROR_WRITES_TLS") {
            "HTTPS"
        } else {
            "plain HTTP"
        },
        r.load_time.as_secs_f64()
    );
    println!(
        "  initial convergence: {} objects of ours each kind after {:.2} s; {} writes ({}); lease writes {} ({}); other writes {}; content {}",
        sizes.expected_objects(),
        r.converge_time.as_secs_f64(),
        r.initial.total(),
        breakdown(&r.initial.mirror, None),
        r.initial.lease_total(),
        map_text(&r.initial.leases),
        breakdown(&r.initial.other, None),
        content(&r.initial_problems),
    );
    println!(
        "  changes ({:.2} s): local writes {total} = {:.3} per change: {}; HTTP codes {:?}",
        r.change_time.as_secs_f64(),
        total as f64 / n.max(1) as f64,
        breakdown(&r.changes.mirror, Some(n)),
        r.change_codes,
    );
    println!(
        "    expected minimum {} (one slice per change + a federated and a nearest slice per member change); local commits: {} flat slices, {} federated slices, {} nearest slices, {} Services, {} Leases, other {:?}",
        n + 2 * m.member_changes,
        m.commits.flat_slices,
        m.commits.federated_slices,
        m.commits.nearest_slices,
        m.commits.services,
        m.commits.leases,
        m.commits.other
    );
    let no_op_writes: u64 = r.no_ops.iter().map(|(_, _, w, c)| w - c).sum();
    println!(
        "    writes that changed nothing (written more often than committed): {no_op_writes} on {} objects{}",
        r.no_ops.len(),
        if r.no_ops.is_empty() {
            String::new()
        } else {
            format!(
                ", e.g. {}",
                r.no_ops
                    .iter()
                    .take(5)
                    .map(|(k, n, w, c)| format!("{k} {n} ({w} writes, {c} commits)"))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        }
    );
    println!(
        "    reads of Services/EndpointSlices: {}; lease writes (excluded above) {} ({}); other writes {}",
        breakdown(&r.changes.reads, None),
        r.changes.lease_total(),
        map_text(&r.changes.leases),
        breakdown(&r.changes.other, None),
    );
    println!(
        "    server metric clusterset_dns_mirror_writes_total during the changes: {}",
        r.change_metric
    );
    println!(
        "    server metric clusterset_dns_mirror_reconcile_seconds (model change → its writes done) during the changes: {} passes that wrote, mean {}",
        r.reconcile.1,
        ms(Duration::from_secs_f64(
            r.reconcile.0 / r.reconcile.1.max(1) as f64
        )),
    );
    println!("    final content {}", content(&r.final_problems));
    println!(
        "  resync window {:.1} s ({:.1} periods, {} cluster-wide Service lists ≈ resync passes): local writes {} ({}); lease writes (excluded) {} ({}); other writes {}; server metric {}",
        r.window.as_secs_f64(),
        r.window.as_secs_f64() / sizes.resync.as_secs_f64(),
        r.resync_lists,
        r.resync_writes.total(),
        breakdown(&r.resync_writes.mirror, None),
        r.resync_writes.lease_total(),
        map_text(&r.resync_writes.leases),
        breakdown(&r.resync_writes.other, None),
        r.resync_metric,
    );
    println!(
        "  server metric clusterset_dns_mirror_writes_total after convergence: {}",
        map_text(&r.initial_metric)
    );
    table_head();
    table_row(
        "remote write sent → every local mirror slice holds the new IP",
        &mut m.complete,
    );
    table_row(
        "remote write sent → local `<svc>-<cluster>` slice",
        &mut m.flat,
    );
    table_row(
        "remote write sent → local `<svc>-federated` slice (members)",
        &mut m.federated,
    );
    table_row("remote write sent → remote commit", &mut m.to_commit);
    table_row(
        "remote commit → every local mirror slice",
        &mut m.from_commit,
    );
}

fn main() {
    let bench = common::bench_mode();
    let sizes = Sizes {
        clusters: size("MIRROR_WRITES_CLUSTERS", 3, 3, bench),
        services: size("MIRROR_WRITES_SERVICES", 300, 10, bench),
        endpoints: size("MIRROR_WRITES_ENDPOINTS", 10, 10, bench),
        changes: size("MIRROR_WRITES_CHANGES", 1000, 30, bench),
        federated_every: size("MIRROR_WRITES_FEDERATED_EVERY", 5, 5, bench),
        resync: Duration::from_millis(size("MIRROR_WRITES_RESYNC_MS", 2000, 500, bench) as u64),
        quiet: Duration::from_millis(size("MIRROR_WRITES_QUIET_MS", 1000, 500, bench) as u64),
    };
    assert!(sizes.clusters >= 1 && sizes.services >= 1 && sizes.endpoints >= 1);
    assert!(
        sizes.endpoints <= 100 && sizes.clusters * sizes.endpoints <= 100,
        "the bench expects one mirror slice per Service (at most 100 endpoints)"
    );
    assert!(sizes.resync >= Duration::from_millis(100));
    let (binary, modes, rt) = common::setup("mirror_writes", "MIRROR_WRITES_IN_PROCESS", bench);
    let _entered = rt.enter();
    for mode in modes {
        if let Some((small, large)) = scale::run(&rt, mode, binary.as_deref(), bench)
            && !bench
        {
            scale::check(&small, &large);
        }
        if flag("MIRROR_WRITES_SCALE_ONLY") {
            continue;
        }
        let mut report = run(&rt, mode, binary.as_deref(), sizes);
        print(&mut report, sizes);
        if !bench {
            assert!(
                report.initial_problems.is_empty(),
                "the converged mirror is wrong: {:?}",
                report.initial_problems
            );
            assert_eq!(
                report.measured.timeouts, 0,
                "every change reached the mirror within 5 s"
            );
            assert!(
                report.final_problems.is_empty(),
                "the mirror is wrong after the changes: {:?}",
                report.final_problems
            );
            assert_eq!(
                report.resync_writes.total(),
                0,
                "resyncs with no change wrote: {:?}",
                report.resync_writes.mirror
            );
            assert!(
                report.changes.total() >= sizes.changes as u64,
                "fewer local writes than changes"
            );
        }
    }
}
