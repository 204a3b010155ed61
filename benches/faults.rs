//! Network faults and latency between the server and a linked cluster: how long a silent API
//! server takes to be declared unreachable, how long the server takes to serve it again once the
//! fault heals, and what a cross-region round trip adds to propagation.
//!
//! The linked cluster `east` is the kubesim binary inside a network namespace of its own
//! (`tests/netlab`: a veth pair with a /30 of 198.18.0.0/15, nothing routed elsewhere) with one
//! exported, federated Service `api` whose EndpointSlice holds one address; `local` and `north`
//! (`api` too) are an in-process kubesim on loopback (plain HTTP). The server is the built
//! binary (`serve --clusters FILE --cluster-timeout T`), set up as
//! `tests/integration/netfault.rs` sets up its in-process server. Every write to east goes
//! through kubesim's control endpoint (another port in the namespace, which no fault touches),
//! never through the path being measured.
//!
//! 1. **Faults.** For each of `blackhole`, `reset`, `drop-in`, `drop-out`, `drop-new`
//!    (nftables rules on east's API port, [`netlab::Fault`]) and `pause` (SIGSTOP of east's
//!    kubesim), `FAULTS_ROUNDS` times: *detection* runs from just before the fault is applied to
//!    the first `/debug/clusters` (polled every 10 ms) showing east `unreachable` (bounded by
//!    the timeout + 5 s); east's slice then gets a new address (for `pause`, right after
//!    SIGCONT: a stopped process takes no write); *recovery* runs from just before the heal to
//!    the first moment both a UDP answer of `api-east` (polled every 2 ms) holds the new address
//!    and `/debug/clusters` shows east `synced` again (bounded by 30 s). With `drop-new` the
//!    open watch still carries the change, so its answer may be new before the heal. Also
//!    shown: when east's API server last answered before it was declared unreachable
//!    (`secondsSinceApiAnswered`), from the fault. The timeout runs from that answer, not from
//!    the fault: a server quiet before the fault is declared up to one heartbeat period
//!    sooner, and an answer after the fault (with `drop-new`, a heartbeat sent on an idle
//!    keep-alive connection opened before it) makes it later.
//! 2. **Propagation.** `FAULTS_CHANGES` changes of east's slice (each a new address), one at a
//!    time, each timed from just before its write to the first UDP answer of `api-east` holding
//!    the new address (polled every 200 µs, at most 5 s): with the server linked to east's API
//!    directly (the baseline), then through a [`netlab::Relay`] on loopback with one-way
//!    latency 0, 20 and 40 ms (round trips 0, 40 and 80 ms), each chunk ±10 % jitter, a server
//!    started afresh for each. A write reaches the server over its open watch: one one-way leg.
//!    One change before each run is not counted: a server just synced may not have its watch
//!    open at kubesim yet, and its first change then pays the watch request's leg too.
//!
//! Prints a table per part with the machine's core count, and `RESULT faults …` lines.
//! `cargo bench --bench faults` runs `FAULTS_ROUNDS=3` rounds, `FAULTS_CHANGES=200` changes and
//! `FAULTS_TIMEOUT_MS=10000` (the server's default `--cluster-timeout`, so the figures are the
//! default's); it runs the kubesim binary beside the bench binary (`cargo build --release -p
//! kubesim --bin kubesim` first, else netlab falls back to the debug build and the header says
//! so). `cargo test --bench faults` runs a smoke version (1 round, 20 changes, 2 s timeout,
//! about 20 s) that asserts detection within the timeout + 1 s (from east's last answer when
//! that came after the fault), recovery within 5 s and every change answered. Both need root and the `ip` and `nft` commands, and skip (saying so)
//! without them. `FAULTS_LOG` is the server's `RUST_LOG` (default `warn`).

// This bench takes common's server start and percentile, not its kubesim loader or RSS figures.
#[allow(dead_code)]
#[path = "common/mod.rs"]
mod common;
#[path = "common/dns.rs"]
mod dns;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use netlab::{Fault, Host, Lab, Relay, RelaySpec, Sim};
use serde_json::{Value, json};
use tokio::runtime::Runtime;

use common::{ChildGuard, NS, listening_addr, percentile, size};
use dns::{Dns, admin_get, admin_ready};

/// North's one address.
const NORTH_IP: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 1);
/// East's addresses are this plus 1, 2, 3, … in the order they are given.
const EAST_BASE: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 0);
/// Pause between two `/debug/clusters` polls.
const ADMIN_GAP: Duration = Duration::from_millis(10);
/// Pause between two DNS polls while waiting for a recovery.
const DNS_GAP: Duration = Duration::from_millis(2);
/// Pause between two DNS polls while waiting for one change.
const CHANGE_GAP: Duration = Duration::from_micros(200);
/// Longest wait for one change to show up.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// Added to the cluster timeout for the longest wait for `unreachable`.
const DETECT_SLACK: Duration = Duration::from_secs(5);
/// Longest wait for a recovery.
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);
/// Longest wait for the server to be ready, or to be synced and answering between rounds.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// Most polls of one wait (with the gaps above, far beyond any limit used).
const MAX_POLLS: usize = 1 << 20;
/// What the smoke run allows: detection within the timeout plus this …
const DETECT_BOUND_SLACK: Duration = Duration::from_secs(1);
/// … and recovery within this.
const SMOKE_RECOVERY_BOUND: Duration = Duration::from_secs(5);
/// One-way latencies of the relay: round trips of 0, 40 and 80 ms.
const ONE_WAY_MS: [u64; 3] = [0, 20, 40];

/// The settings of a run, from the environment (see the module doc).
#[derive(Debug, Clone, Copy)]
struct Settings {
    /// The server's `--cluster-timeout`.
    timeout: Duration,
    /// Rounds of each fault.
    rounds: usize,
    /// Changes per propagation run.
    changes: usize,
}

impl Settings {
    fn from_env(bench: bool) -> Self {
        let ms = size("FAULTS_TIMEOUT_MS", 10_000, 2_000, bench) as u64;
        let s = Settings {
            timeout: Duration::from_millis(ms),
            rounds: size("FAULTS_ROUNDS", 3, 1, bench),
            changes: size("FAULTS_CHANGES", 200, 20, bench),
        };
        // The server refuses a cluster timeout under a second.
        assert!(
            s.timeout >= Duration::from_secs(1),
            "FAULTS_TIMEOUT_MS: at least 1000"
        );
        assert!(s.rounds >= 1 && s.changes >= 1);
        s
    }
}

/// The query name of east's `api`.
fn api_east() -> Name {
    Name::from_ascii(format!("api-east.{NS}.svc.clusterset.local.")).expect("name")
}

fn namespace_doc() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
}

/// `api`, exported flat and a federated member.
fn service_doc() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "api", "namespace": NS,
                     "labels": {"mirror.linkerd.io/exported": "remote-discovery",
                                "mirror.linkerd.io/federated": "member"}},
        "spec": {"ports": [{"name": "http", "port": 80}]}
    })
}

/// `api`'s one EndpointSlice, holding `ip` alone.
fn slice_doc(ip: Ipv4Addr) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "api-1", "namespace": NS,
                     "labels": {"kubernetes.io/service-name": "api"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": true}}]
    })
}

/// North's namespace, `api` and its slice, through the kube API.
async fn north_objects(north: &kubesim::Cluster) {
    let client = common::client(north).await;
    common::create_namespace(&client, NS).await;
    let svc: Service = serde_json::from_value(service_doc()).expect("service");
    Api::<Service>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create api in north");
    let slice: EndpointSlice = serde_json::from_value(slice_doc(NORTH_IP)).expect("slice");
    Api::<EndpointSlice>::namespaced(client, NS)
        .create(&PostParams::default(), &slice)
        .await
        .expect("create api's slice in north");
}

/// What the bench runs on. Field order is drop order: east's kubesim, its namespace, the
/// in-process clusters, their files, the lab. (A server or relay is a local of `main`'s
/// callees, gone before this.)
struct Rig {
    east: Sim,
    host: Host,
    local: kubesim::Sim,
    dir: tempfile::TempDir,
    _lab: Lab,
    /// Addresses given to east's slice so far; the last is what it holds.
    given: u32,
}

impl Rig {
    /// East in a namespace of `lab` with `api` at its first address, and local and north in
    /// this process (on `rt`) with `api` at [`NORTH_IP`].
    fn start(lab: Lab, rt: &Runtime) -> Rig {
        let host = lab.host("east").expect("lab host");
        let dir = tempfile::tempdir().expect("tempdir");
        let east_dir = dir.path().join("east");
        std::fs::create_dir_all(&east_dir).expect("east's directory");
        let east = host
            .kubesim(&["east"], &east_dir, &[])
            .expect("kubesim in the namespace");
        let mut config = kubesim::SimConfig::new(["local", "north"], dir.path().join("kube"));
        config.tls = false;
        let local = rt.block_on(kubesim::start(config)).expect("kubesim");
        rt.block_on(north_objects(local.cluster("north").expect("north")));
        let mut rig = Rig {
            east,
            host,
            local,
            dir,
            _lab: lab,
            given: 0,
        };
        for doc in [namespace_doc(), service_doc()] {
            rig.east
                .apply("east", &doc)
                .expect("apply through the control endpoint");
        }
        rig.set_next();
        rig
    }

    /// The address east's slice holds.
    fn current(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(EAST_BASE) + self.given)
    }

    /// Takes a new address for east's slice (not written yet).
    fn next_ip(&mut self) -> Ipv4Addr {
        self.given += 1;
        self.current()
    }

    /// Writes a new address to east's slice through the control endpoint; returns it.
    fn set_next(&mut self) -> Ipv4Addr {
        let ip = self.next_ip();
        self.east
            .apply("east", &slice_doc(ip))
            .expect("write east's slice through the control endpoint");
        ip
    }

    /// A clusters file (named `name`) linking east through `east_kubeconfig`, and north.
    fn clusters_file(&self, east_kubeconfig: &Path, name: &str) -> PathBuf {
        let north = self.local.cluster("north").expect("north");
        let path = self.dir.path().join(format!("{name}.clusters.yaml"));
        let text = format!(
            "- name: east\n  kubeconfig: {}\n- name: north\n  kubeconfig: {}\n",
            east_kubeconfig.display(),
            north.kubeconfig_path().display()
        );
        std::fs::write(&path, text).expect("clusters file");
        path
    }
}

/// A running server binary: its DNS client and admin address; killed on drop.
struct Server {
    dns: Dns,
    admin: SocketAddr,
    _child: ChildGuard,
}

impl Server {
    /// Starts `binary` linked as `clusters_file` says with `--cluster-timeout timeout`, and waits
    /// until it is ready, east is synced and `api-east` answers east's current address.
    fn start(binary: &Path, rig: &Rig, clusters_file: &Path, timeout: Duration) -> Server {
        let kubeconfig = rig.local.cluster("local").expect("local").kubeconfig_path();
        let timeout = format!("{}ms", timeout.as_millis());
        let (child, line) = common::start_process(
            binary,
            kubeconfig,
            clusters_file,
            &["--cluster-timeout", &timeout],
            "FAULTS_LOG",
        );
        let mut server = Server {
            dns: Dns::new(listening_addr(&line, "dns=")),
            admin: listening_addr(&line, "admin="),
            _child: child,
        };
        let deadline = Instant::now() + SETTLE_LIMIT;
        let mut ready = false;
        for _ in 0..MAX_POLLS {
            ready = admin_ready(server.admin);
            if ready || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(ready, "server not ready within {SETTLE_LIMIT:?}");
        server.settle(rig.current());
        server
    }

    /// Waits until east is `synced` and `api-east` answers exactly `ip`; panics after
    /// [`SETTLE_LIMIT`].
    fn settle(&mut self, ip: Ipv4Addr) {
        let (name, deadline) = (api_east(), Instant::now() + SETTLE_LIMIT);
        let (mut answer, mut state) = (None, None);
        for _ in 0..MAX_POLLS {
            answer = self.dns.a(&name);
            state = east_state(self.admin).map(|(state, _)| state);
            if answer.as_deref() == Some(&[ip][..]) && state.as_deref() == Some("synced") {
                return;
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!(
            "api-east answers {answer:?}, not [{ip}], or east is {state:?}, not synced, after {SETTLE_LIMIT:?}"
        );
    }
}

/// East's entry in `/debug/clusters`: its `state`, and `secondsSinceApiAnswered` (how long
/// ago its API server last answered a request), if the server answered.
fn east_state(admin: SocketAddr) -> Option<(String, Option<f64>)> {
    let body = admin_get(admin, "/debug/clusters")?;
    let doc: Value = serde_json::from_str(&body).ok()?;
    let east = doc["clusters"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "east")?;
    let state = east["state"].as_str()?.to_owned();
    Some((state, east["secondsSinceApiAnswered"].as_f64()))
}

/// What one wait saw, each from its start.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    /// The first answer of `api-east` holding the address waited for.
    answer: Option<Duration>,
    /// The first `/debug/clusters` showing east in the state waited for.
    state: Option<Duration>,
    /// The first `/debug/clusters` showing east anything but `synced`.
    left_synced: Option<Duration>,
    /// When east's API server last answered, in seconds from the start (negative: before
    /// it), as `/debug/clusters` said when it first showed the state waited for. The
    /// timeout runs from this, not from the fault.
    last_answer: Option<f64>,
}

impl Seen {
    /// When the answer and the state had both been seen (the later of the two).
    fn both(&self) -> Option<Duration> {
        Some(self.answer?.max(self.state?))
    }
}

/// Polls east's state every [`ADMIN_GAP`] until it is `state` and, with `want`, `api-east`
/// every [`DNS_GAP`] until an answer holds `want`; from `start`, for at most `limit`.
fn observe(
    server: &mut Server,
    start: Instant,
    limit: Duration,
    want: Option<Ipv4Addr>,
    state: &str,
) -> Seen {
    let (name, deadline) = (api_east(), start + limit);
    let mut seen = Seen::default();
    let mut next_admin = start;
    for _ in 0..MAX_POLLS {
        if Instant::now() >= deadline {
            break;
        }
        if seen.state.is_none() && Instant::now() >= next_admin {
            next_admin = Instant::now() + ADMIN_GAP;
            if let Some((now, since_answer)) = east_state(server.admin) {
                let at = start.elapsed();
                if now != "synced" {
                    seen.left_synced.get_or_insert(at);
                }
                if now == state {
                    seen.state = Some(at);
                    seen.last_answer = since_answer.map(|ago| at.as_secs_f64() - ago);
                }
            }
        }
        if let Some(ip) = want
            && seen.answer.is_none()
            && server.dns.a(&name).is_some_and(|a| a.contains(&ip))
        {
            seen.answer = Some(start.elapsed());
        }
        if seen.state.is_some() && (want.is_none() || seen.answer.is_some()) {
            break;
        }
        std::thread::sleep(DNS_GAP);
    }
    seen
}

/// How a fault is made and undone.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// An nftables rule on east's API port.
    Rule(Fault),
    /// SIGSTOP / SIGCONT of east's kubesim.
    Pause,
}

impl Cut {
    /// Every fault, in the order they run.
    fn all() -> Vec<Cut> {
        Fault::ALL
            .into_iter()
            .map(Cut::Rule)
            .chain([Cut::Pause])
            .collect()
    }

    fn label(self) -> &'static str {
        match self {
            Cut::Rule(f) => f.label(),
            Cut::Pause => "pause",
        }
    }

    fn apply(self, rig: &Rig) {
        match self {
            Cut::Rule(f) => rig.host.fault(rig.east.api_port("east"), f).expect("fault"),
            Cut::Pause => rig.east.pause().expect("SIGSTOP"),
        }
    }

    fn heal(self, rig: &Rig) {
        match self {
            Cut::Rule(_) => rig.host.heal().expect("heal"),
            Cut::Pause => rig.east.resume().expect("SIGCONT"),
        }
    }
}

/// One round of a fault.
#[derive(Debug, Clone, Copy)]
struct Round {
    /// From the fault: east `unreachable` (and first not `synced`).
    detect: Seen,
    /// From the heal: the change answered and east `synced`.
    recover: Seen,
}

/// One round of `cut`: applies it, waits for `unreachable`, changes east's slice (after the
/// heal for a pause), heals, waits for the change and `synced`; then waits until the server
/// is settled for the next round.
fn fault_round(rig: &mut Rig, server: &mut Server, cut: Cut, timeout: Duration) -> Round {
    let start = Instant::now();
    cut.apply(rig);
    let detect = observe(server, start, timeout + DETECT_SLACK, None, "unreachable");
    let paused = matches!(cut, Cut::Pause);
    // A stopped process takes no write: a pause's change is made right after SIGCONT.
    let ip = if paused {
        rig.next_ip()
    } else {
        rig.set_next()
    };
    let healed = Instant::now();
    cut.heal(rig);
    if paused {
        rig.east
            .apply("east", &slice_doc(ip))
            .expect("write east's slice after SIGCONT");
    }
    let recover = observe(server, healed, RECOVERY_LIMIT, Some(ip), "synced");
    server.settle(ip);
    Round { detect, recover }
}

/// Every fault, `rounds` times each, against the server `server` (linked to east directly).
fn run_faults(rig: &mut Rig, server: &mut Server, s: &Settings) -> Vec<(Cut, Vec<Round>)> {
    Cut::all()
        .into_iter()
        .map(|cut| {
            let rounds = (0..s.rounds)
                .map(|_| fault_round(rig, server, cut, s.timeout))
                .collect();
            (cut, rounds)
        })
        .collect()
}

/// Polls `api-east` every [`CHANGE_GAP`] until an answer holds `ip`; when it did, if before
/// `deadline`.
fn poll_answer(dns: &mut Dns, name: &Name, ip: Ipv4Addr, deadline: Instant) -> Option<Instant> {
    for _ in 0..MAX_POLLS {
        if Instant::now() >= deadline {
            return None;
        }
        if dns.a(name).is_some_and(|a| a.contains(&ip)) {
            return Some(Instant::now());
        }
        std::thread::sleep(CHANGE_GAP);
    }
    None
}

/// `changes` changes of east's slice (after one not counted), one at a time, each timed from
/// just before its write to the first answer of `api-east` holding its address; `None` for one
/// not seen within [`CHANGE_TIMEOUT`].
fn propagate(rig: &mut Rig, server: &mut Server, changes: usize) -> Vec<Option<Duration>> {
    let name = api_east();
    // One change first, not counted: a server just synced may not have its EndpointSlice
    // watch open at kubesim yet, and then the first change pays the watch request's leg too
    // (two legs through the relay instead of one).
    let warm_up = rig.set_next();
    server.settle(warm_up);
    let mut samples = Vec::with_capacity(changes);
    for _ in 0..changes {
        let ip = rig.next_ip();
        let east = &rig.east;
        // The write blocks on its HTTP round trip: it runs beside the poll, as a client
        // elsewhere would write while the answer is being watched for.
        let seen = std::thread::scope(|scope| {
            let t0 = Instant::now();
            let write = scope.spawn(move || east.apply("east", &slice_doc(ip)));
            let seen = poll_answer(&mut server.dns, &name, ip, t0 + CHANGE_TIMEOUT);
            let written = write.join().expect("writer thread");
            written.expect("write east's slice through the control endpoint");
            seen.map(|at| at - t0)
        });
        samples.push(seen);
    }
    server.settle(rig.current());
    samples
}

/// One propagation run: how east's API was reached and what was measured.
struct Propagation {
    /// One-way latency of the relay, or `None` for east's API direct.
    one_way: Option<Duration>,
    samples: Vec<Option<Duration>>,
}

/// A server linked to east through a relay on loopback adding `one_way` (±10 %) each way,
/// and `changes` changes measured through it.
fn relayed(
    binary: &Path,
    rig: &mut Rig,
    rt: &Runtime,
    s: &Settings,
    one_way: Duration,
) -> Propagation {
    let target = SocketAddr::new(rig.host.addr().into(), rig.east.api_port("east"));
    let spec = RelaySpec {
        latency: one_way,
        jitter: one_way / 10,
        bytes_per_sec: None,
    };
    let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let relay = rt
        .block_on(Relay::start(listen, target, spec))
        .expect("relay starts");
    let kubeconfig = rig
        .east
        .kubeconfig_via("east", relay.local_addr())
        .expect("kubeconfig through the relay");
    let file = rig.clusters_file(&kubeconfig, &format!("relay-{}ms", one_way.as_millis()));
    let mut server = Server::start(binary, rig, &file, s.timeout);
    let samples = propagate(rig, &mut server, s.changes);
    // The server goes before the relay it dials.
    drop(server);
    drop(relay);
    Propagation {
        one_way: Some(one_way),
        samples,
    }
}

/// What a run measured.
struct Report {
    faults: Vec<(Cut, Vec<Round>)>,
    paths: Vec<Propagation>,
}

fn main() {
    let bench = common::bench_mode();
    let s = Settings::from_env(bench);
    let lab = match Lab::new() {
        Ok(Some(lab)) => lab,
        Ok(None) => {
            println!(
                "faults: skipped: needs root and the `ip` and `nft` commands (network namespaces and nftables)"
            );
            return;
        }
        Err(e) => panic!("netlab: {e}"),
    };
    let (binary, _, rt) = common::setup("faults", "FAULTS_IN_PROCESS", bench);
    let binary =
        binary.expect("the faults bench needs the clusterset-dns binary (cargo builds it)");
    let _entered = rt.enter();
    let mut rig = Rig::start(lab, &rt);
    print_header(&s, &rig);
    let direct = rig.clusters_file(&rig.east.kubeconfig("east"), "direct");
    let mut server = Server::start(&binary, &rig, &direct, s.timeout);
    // The baseline first, on a quiet server; then the faults on the same one.
    let baseline = Propagation {
        one_way: None,
        samples: propagate(&mut rig, &mut server, s.changes),
    };
    let faults = run_faults(&mut rig, &mut server, &s);
    drop(server);
    let mut paths = vec![baseline];
    for ms in ONE_WAY_MS {
        paths.push(relayed(
            &binary,
            &mut rig,
            &rt,
            &s,
            Duration::from_millis(ms),
        ));
    }
    let report = Report { faults, paths };
    report.print(&s);
    if !bench {
        report.check(&s);
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
}

/// What runs where.
fn print_header(s: &Settings, rig: &Rig) {
    let kubesim =
        netlab::sim::kubesim_binary().map_or_else(|e| e.to_string(), |p| p.display().to_string());
    println!(
        "faults: east's API at {} in its own network namespace (kubesim {kubesim}), local and north in this process; server binary with --cluster-timeout {} ms; {} rounds per fault, {} changes per propagation run; {} cores",
        rig.east.server_url("east"),
        s.timeout.as_millis(),
        s.rounds,
        s.changes,
        cores()
    );
}

/// The sorted samples that were seen, and how many were not.
fn seen_sorted(samples: impl Iterator<Item = Option<Duration>>) -> (Vec<Duration>, usize) {
    let (mut seen, mut missing) = (Vec::new(), 0);
    for sample in samples {
        match sample {
            Some(d) => seen.push(d),
            None => missing += 1,
        }
    }
    seen.sort();
    (seen, missing)
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn millis(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// `min / median / max` of a sorted sample in `unit`, and the count of misses if any.
fn min_med_max(sorted: &[Duration], missing: usize, unit: fn(Duration) -> String) -> String {
    let text = match (sorted.first(), sorted.last()) {
        (Some(&min), Some(&max)) => format!(
            "{} / {} / {}",
            unit(min),
            unit(percentile(sorted, 0.5)),
            unit(max)
        ),
        _ => "-".to_owned(),
    };
    if missing > 0 {
        format!("{text} ({missing} timed out)")
    } else {
        text
    }
}

/// Milliseconds of a quantile of a sorted sample, for `RESULT` lines (`none` when empty).
fn ms_of(sorted: &[Duration], p: f64) -> String {
    if sorted.is_empty() {
        return "none".to_owned();
    }
    format!("{:.1}", percentile(sorted, p).as_secs_f64() * 1e3)
}

/// The earliest and latest last API answer of `rounds` (seconds from the fault, negative
/// before it), as text.
fn last_answers(rounds: &[Round]) -> String {
    match last_answer_range(rounds) {
        (Some(min), Some(max)) => format!("{min:+.2} s / {max:+.2} s"),
        _ => "-".to_owned(),
    }
}

/// The earliest and latest last API answer of `rounds`, in seconds from the fault.
fn last_answer_range(rounds: &[Round]) -> (Option<f64>, Option<f64>) {
    let last = rounds.iter().filter_map(|r| r.detect.last_answer);
    (last.clone().reduce(f64::min), last.reduce(f64::max))
}

/// The `RESULT faults kind=…` line of one fault.
fn print_fault_result(s: &Settings, label: &str, rounds: &[Round]) {
    let (detect, d_miss) = seen_sorted(rounds.iter().map(|r| r.detect.state));
    let (recover, r_miss) = seen_sorted(rounds.iter().map(|r| r.recover.both()));
    let (first, last) = last_answer_range(rounds);
    let ms = |v: Option<f64>| v.map_or_else(|| "none".to_owned(), |v| format!("{:.1}", v * 1e3));
    println!(
        "RESULT faults kind={label} timeout_ms={} rounds={} detect_min_ms={} detect_median_ms={} detect_max_ms={} detect_timeouts={d_miss} bound_ms={} last_answer_min_ms={} last_answer_max_ms={} recover_min_ms={} recover_median_ms={} recover_max_ms={} recover_timeouts={r_miss}",
        s.timeout.as_millis(),
        rounds.len(),
        ms_of(&detect, 0.0),
        ms_of(&detect, 0.5),
        ms_of(&detect, 1.0),
        (s.timeout + DETECT_BOUND_SLACK).as_millis(),
        ms(first),
        ms(last),
        ms_of(&recover, 0.0),
        ms_of(&recover, 0.5),
        ms_of(&recover, 1.0),
    );
}

impl Report {
    fn print(&self, s: &Settings) {
        self.print_faults(s);
        self.print_paths(s);
    }

    fn print_faults(&self, s: &Settings) {
        let bound = s.timeout + DETECT_BOUND_SLACK;
        println!(
            "faults: detection (fault → /debug/clusters shows east unreachable) and recovery (heal → api-east answers the change and east is synced), {} rounds, --cluster-timeout {} ms, {} cores",
            s.rounds,
            s.timeout.as_millis(),
            cores()
        );
        println!(
            "  | fault | detection min / median / max | bound (timeout + 1 s) | east's last API answer, from the fault: min / max | recovery min / median / max | median: left synced / change answered / synced |"
        );
        println!("  |---|---|---|---|---|---|");
        for (cut, rounds) in &self.faults {
            let (detect, d_miss) = seen_sorted(rounds.iter().map(|r| r.detect.state));
            let (recover, r_miss) = seen_sorted(rounds.iter().map(|r| r.recover.both()));
            let median = |f: fn(&Round) -> Option<Duration>| {
                let (v, _) = seen_sorted(rounds.iter().map(f));
                if v.is_empty() {
                    "-".to_owned()
                } else {
                    secs(percentile(&v, 0.5))
                }
            };
            println!(
                "  | {} | {} | {} | {} | {} | {} / {} / {} |",
                cut.label(),
                min_med_max(&detect, d_miss, secs),
                secs(bound),
                last_answers(rounds),
                min_med_max(&recover, r_miss, secs),
                median(|r| r.detect.left_synced),
                median(|r| r.recover.answer),
                median(|r| r.recover.state),
            );
        }
        for (cut, rounds) in &self.faults {
            print_fault_result(s, cut.label(), rounds);
        }
    }

    fn print_paths(&self, s: &Settings) {
        println!(
            "faults: propagation (write of east's slice → first api-east answer with the new address), {} changes each, {} cores",
            s.changes,
            cores()
        );
        println!("  | east's API reached | round trip added | p50 | p99 | max | answered |");
        println!("  |---|---|---|---|---|---|");
        for path in &self.paths {
            let (sorted, missing) = seen_sorted(path.samples.iter().copied());
            let (how, rtt) = match path.one_way {
                None => ("directly (veth)".to_owned(), "none".to_owned()),
                Some(d) => (
                    "through the relay".to_owned(),
                    format!("{} ms (±10 %)", (2 * d).as_millis()),
                ),
            };
            println!(
                "  | {how} | {rtt} | {} | {} | {} | {} of {} |",
                millis(percentile(&sorted, 0.5)),
                millis(percentile(&sorted, 0.99)),
                millis(sorted.last().copied().unwrap_or_default()),
                sorted.len(),
                sorted.len() + missing
            );
        }
        for path in &self.paths {
            let (sorted, missing) = seen_sorted(path.samples.iter().copied());
            let (kind, rtt) = match path.one_way {
                None => ("direct", "0".to_owned()),
                Some(d) => ("relay", (2 * d).as_millis().to_string()),
            };
            println!(
                "RESULT faults propagation path={kind} rtt_ms={rtt} changes={} p50_ms={} p99_ms={} max_ms={} timeouts={missing}",
                path.samples.len(),
                ms_of(&sorted, 0.5),
                ms_of(&sorted, 0.99),
                ms_of(&sorted, 1.0),
            );
        }
    }

    /// The smoke run's assertions.
    fn check(&self, s: &Settings) {
        let bound = s.timeout + DETECT_BOUND_SLACK;
        for (cut, rounds) in &self.faults {
            for r in rounds {
                // The timeout runs from east's last answer: one that came after the fault (an
                // idle keep-alive connection opened before a `drop-new` still carries a
                // request) moves the bound by as much.
                let after = r.detect.last_answer.unwrap_or(0.0).max(0.0);
                let bound = bound + Duration::from_secs_f64(after);
                let detected = r.detect.state;
                assert!(
                    detected.is_some_and(|d| d <= bound),
                    "{}: unreachable after {detected:?}, bound {bound:?} (east last answered {:?} s after the fault)",
                    cut.label(),
                    r.detect.last_answer
                );
                let recovered = r.recover.both();
                assert!(
                    recovered.is_some_and(|d| d <= SMOKE_RECOVERY_BOUND),
                    "{}: recovered after {recovered:?} ({:?}), bound {SMOKE_RECOVERY_BOUND:?}",
                    cut.label(),
                    r.recover
                );
            }
        }
        for path in &self.paths {
            let missing = path.samples.iter().filter(|x| x.is_none()).count();
            assert_eq!(
                missing, 0,
                "changes not answered within {CHANGE_TIMEOUT:?} (relay one-way {:?})",
                path.one_way
            );
        }
    }
}
