//! What the `propagation` and `mirror_writes` benches share: size knobs from the environment,
//! latency and RSS reporting, the kubesim setup with remote clusters of flat-exported Services,
//! the remote endpoint changes, and starting the server as the built binary or in this process.
//!
//! Each bench includes it with `#[path = "common/mod.rs"] mod common;`; Cargo does not take a
//! subdirectory of `benches/` for a bench target of its own.

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use clusterset_dns::config::Config;
use clusterset_dns::k8s::client as k8s_client;
use clusterset_dns::mirror::run::MirrorConfig;
use clusterset_dns::model::Settings;
use clusterset_dns::runtime::{Server, Sockets, SourceSetup};
use clusterset_dns::source::live::{Links, LiveConfig, MCS_REDISCOVER};
use clusterset_dns::vocab::name::ZoneName;
use futures_util::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config as KubeConfig};
use serde_json::{Value, json};

/// The namespace every exported Service lives in (in every cluster).
pub(crate) const NS: &str = "bench";
/// Longest wait for one change to show up.
pub(crate) const CHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// Creates in flight while loading.
pub(crate) const LOAD_CONCURRENCY: usize = 64;
/// This process's `/proc` status file.
const SELF_STATUS: &str = "/proc/self/status";

/// True under `cargo bench` (full size), false under `cargo test` (the smoke run).
pub(crate) fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// A size from `var`, else `full` in a bench run and `smoke` in a smoke run.
pub(crate) fn size(var: &str, full: usize, smoke: usize, bench: bool) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench { full } else { smoke })
}

pub(crate) fn flag(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1" || v == "true")
}

/// `VmRSS` and `VmHWM` (peak) of a process, in bytes, from its `/proc/<pid>/status`.
pub(crate) fn rss_of(status_path: &str) -> (u64, u64) {
    let status = std::fs::read_to_string(status_path).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// The server's RSS, in bytes, read from `/proc`: this process's before the server started, and
/// the server's (the child's, or this process's when in-process) once synced, after the
/// changes, and at peak.
pub(crate) struct Rss {
    status_path: String,
    before: u64,
    synced: u64,
    after: u64,
    peak: u64,
}

impl Rss {
    /// Reads this process's RSS before the server starts.
    pub(crate) fn start() -> Self {
        Rss {
            status_path: SELF_STATUS.to_owned(),
            before: rss_of(SELF_STATUS).0,
            synced: 0,
            after: 0,
            peak: 0,
        }
    }

    /// Reads the server's RSS once synced: the child's, or this process's for `None`.
    pub(crate) fn synced(&mut self, child: Option<&ChildGuard>) {
        if let Some(child) = child {
            self.status_path = format!("/proc/{}/status", child.0.id());
        }
        self.synced = rss_of(&self.status_path).0;
    }

    /// Reads the server's RSS and its peak after the changes.
    pub(crate) fn after(&mut self) {
        (self.after, self.peak) = rss_of(&self.status_path);
    }

    /// `server RSS 12.3 MiB{state} (…)`: the server's own figures for a child process; for an
    /// in-process server, this process's growth from server start`{until}`.
    pub(crate) fn text(&self, mode: Mode, state: &str, until: &str) -> String {
        match mode {
            Mode::Process => format!(
                "server RSS {:.1} MiB{state} (separate process; {:.1} MiB after the changes, peak {:.1} MiB)",
                mib(self.synced),
                mib(self.after),
                mib(self.peak)
            ),
            Mode::InProcess => format!(
                "server RSS {:.1} MiB{state} (in-process delta: this process's growth from server start{until}; {:.1} MiB after the changes)",
                mib(self.synced.saturating_sub(self.before)),
                mib(self.after.saturating_sub(self.before))
            ),
        }
    }
}

/// The `p` quantile (0 to 1) of a sorted sample; zero when it is empty.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// p50 / p99 / max of a sample, as text.
fn summary(samples: &mut [Duration]) -> String {
    samples.sort();
    format!(
        "{} / {} / {}",
        ms(percentile(samples, 0.5)),
        ms(percentile(samples, 0.99)),
        ms(samples.last().copied().unwrap_or_default())
    )
}

/// `p50 …, p99 …, max …` of a sample.
pub(crate) fn p50_p99_max(samples: &[Duration]) -> String {
    let mut sorted = samples.to_vec();
    sorted.sort();
    format!(
        "p50 {}, p99 {}, max {}",
        ms(percentile(&sorted, 0.5)),
        ms(percentile(&sorted, 0.99)),
        ms(sorted.last().copied().unwrap_or_default())
    )
}

/// Prints the head of the latency table.
pub(crate) fn table_head() {
    println!("  | | p50 / p99 / max | samples |");
    println!("  |---|---|---|");
}

/// Prints one row of the latency table (and sorts `samples`).
pub(crate) fn table_row(what: &str, samples: &mut [Duration]) {
    println!("  | {what} | {} | {} |", summary(samples), samples.len());
}

/// The cluster names: `c1`, `c2`, …
pub(crate) fn remote_name(c: usize) -> String {
    format!("c{}", c + 1)
}

/// The initial IP of endpoint `e` of service `s` in remote cluster `c`: 10.0.0.0 plus
/// `(c + 1) << 20` plus `s * endpoints + e`.
fn initial_ip(c: usize, s: usize, e: usize, endpoints: usize) -> Ipv4Addr {
    let n = (s * endpoints + e) as u32;
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)) + (((c as u32) + 1) << 20) + n)
}

/// The initial endpoint IPs: `[c][s]` are those of service `s` in remote cluster `c`.
pub(crate) fn initial_ips(
    clusters: usize,
    services: usize,
    endpoints: usize,
) -> Vec<Vec<Vec<Ipv4Addr>>> {
    (0..clusters)
        .map(|c| {
            (0..services)
                .map(|s| {
                    (0..endpoints)
                        .map(|e| initial_ip(c, s, e, endpoints))
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// The IP change `k` puts in: 172.16.0.0 plus `k`, never an initial IP.
fn changed_ip(k: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(172, 16, 0, 0)) + k as u32)
}

/// The remote EndpointSlice of service `s`.
fn slice_name(s: usize) -> String {
    format!("svc-{s}-abcde")
}

/// Service `s` of a remote cluster, exported flat; a federated member too when `member`.
fn service(s: usize, member: bool) -> Service {
    let mut labels =
        json!({"mirror.linkerd.io/exported": "remote-discovery", "app": format!("svc-{s}")});
    if member {
        labels["mirror.linkerd.io/federated"] = json!("member");
    }
    serde_json::from_value(json!({
        "metadata": {"name": format!("svc-{s}"), "namespace": NS, "labels": labels},
        "spec": {
            "selector": {"app": format!("svc-{s}")},
            "ports": [{"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}],
        },
    }))
    .expect("service")
}

fn endpoints_json(s: usize, ips: &[Ipv4Addr]) -> Value {
    ips.iter()
        .enumerate()
        .map(|(e, ip)| {
            json!({
                "addresses": [ip.to_string()],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": format!("node-{}", e % 3),
                "targetRef": {"kind": "Pod", "namespace": NS, "name": format!("svc-{s}-pod-{e}")},
            })
        })
        .collect()
}

fn slice(s: usize, ips: &[Ipv4Addr]) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {
            "name": slice_name(s),
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": format!("svc-{s}")},
        },
        "addressType": "IPv4",
        "endpoints": endpoints_json(s, ips),
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
    .expect("slice")
}

/// kubesim with a `local` cluster and remote clusters `c1`, `c2`, …, and a `--clusters` file
/// that links the remote ones.
/// Writes a clusters file at `path` linking `remotes`.
pub(crate) fn write_clusters_file(path: &Path, remotes: &[&Arc<kubesim::Cluster>]) {
    let text: String = remotes
        .iter()
        .map(|r| {
            format!(
                "- {{name: {}, kubeconfig: {}}}\n",
                r.name,
                r.kubeconfig_path().display()
            )
        })
        .collect();
    std::fs::write(path, text).expect("clusters file");
}

pub(crate) struct Kube {
    pub sim: kubesim::Sim,
    pub clusters_file: PathBuf,
    clusters: usize,
    /// `c1` in a kubesim of its own, on a runtime of its own whose threads run at the lowest
    /// CPU priority: a storm cluster, whose API server would be another machine, takes only
    /// the CPU the server and the other clusters leave. `None`: every cluster is in `sim`.
    /// Work meant to load `c1` (a storm's writers) belongs on that runtime too.
    pub apart: Option<(kubesim::Sim, tokio::runtime::Runtime)>,
    /// Holds the kubeconfigs and the clusters file; removed after `sim` stops (fields drop in
    /// order).
    _dir: tempfile::TempDir,
}

/// A runtime whose threads run only on CPU time nothing else wants: `SCHED_IDLE`, or nice 19
/// where the kernel refuses that. It stands in for another machine. At nice 19 a busy thread
/// still delays the threads it shares a core with. In the propagation storm it tripled the
/// measured clusters' p99 even with the storm cluster unlinked from the server.
fn low_priority_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(|| {
            let idle = libc::sched_param { sched_priority: 0 };
            // SAFETY: on Linux, pid 0 names the calling thread; `idle` outlives the call.
            #[allow(unsafe_code)]
            let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &raw const idle) };
            if r != 0 {
                // SAFETY: setpriority takes plain integers; PRIO_PROCESS with 0 names the
                // calling thread.
                #[allow(unsafe_code)]
                let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
            }
        })
        .build()
        .expect("runtime")
}

impl Kube {
    /// Starts kubesim (over HTTPS when `tls`) and writes the clusters file; with `first_apart`,
    /// `c1` runs apart (see [`Kube::apart_runtime`]).
    pub(crate) fn start(
        rt: &tokio::runtime::Runtime,
        clusters: usize,
        tls: bool,
        first_apart: bool,
    ) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let first_apart = first_apart && clusters >= 1;
        let names: Vec<String> = std::iter::once("local".to_owned())
            .chain((usize::from(first_apart)..clusters).map(remote_name))
            .collect();
        let mut sim_config = kubesim::SimConfig::new(names, dir.path().join("kube"));
        sim_config.tls = tls;
        let sim = rt.block_on(kubesim::start(sim_config)).expect("kubesim");
        let apart = first_apart.then(|| {
            let apart_rt = low_priority_runtime();
            let mut config =
                kubesim::SimConfig::new([remote_name(0)], dir.path().join("kube-apart"));
            config.tls = tls;
            let sim = apart_rt
                .block_on(kubesim::start(config))
                .expect("kubesim apart");
            (sim, apart_rt)
        });
        let kube = Kube {
            sim,
            clusters_file: dir.path().join("clusters.yaml"),
            clusters,
            apart,
            _dir: dir,
        };
        write_clusters_file(&kube.clusters_file, &kube.remotes());
        kube
    }

    pub(crate) fn local(&self) -> &Arc<kubesim::Cluster> {
        self.sim.cluster("local").expect("local")
    }

    /// Remote cluster `c` (0 is `c1`).
    pub(crate) fn remote(&self, c: usize) -> &Arc<kubesim::Cluster> {
        let sim = match &self.apart {
            Some((sim, _)) if c == 0 => sim,
            _ => &self.sim,
        };
        sim.cluster(&remote_name(c)).expect("remote")
    }

    /// The remote clusters, `c1` first.
    pub(crate) fn remotes(&self) -> Vec<&Arc<kubesim::Cluster>> {
        (0..self.clusters).map(|c| self.remote(c)).collect()
    }
}

pub(crate) async fn client(cluster: &kubesim::Cluster) -> Client {
    let text = std::fs::read_to_string(cluster.kubeconfig_path()).expect("kubeconfig");
    let kc = Kubeconfig::from_yaml(&text).expect("kubeconfig parses");
    let config = KubeConfig::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

/// A client of each cluster, in order.
pub(crate) async fn clients(clusters: &[&Arc<kubesim::Cluster>]) -> Vec<Client> {
    let mut out = Vec::new();
    for c in clusters {
        out.push(client(c).await);
    }
    out
}

pub(crate) async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
}

/// Creates the namespace, the Services and their slices in every remote cluster,
/// `LOAD_CONCURRENCY` creates in flight. `ips[c][s]` are the endpoint IPs of service `s` in
/// cluster `c`; service `s` is a federated member when `member(s)`.
pub(crate) async fn load(
    clients: &[Client],
    ips: &[Vec<Vec<Ipv4Addr>>],
    member: impl Fn(usize) -> bool,
) {
    for client in clients {
        create_namespace(client, NS).await;
    }
    let jobs: Vec<(usize, usize)> = (0..ips[0].len())
        .flat_map(|s| (0..clients.len()).map(move |c| (c, s)))
        .collect();
    let failed: Vec<String> = stream::iter(jobs)
        .map(|(c, s)| {
            let client = clients[c].clone();
            let slice = slice(s, &ips[c][s]);
            let svc = service(s, member(s));
            async move {
                let services: Api<Service> = Api::namespaced(client.clone(), NS);
                let slices: Api<EndpointSlice> = Api::namespaced(client, NS);
                if let Err(e) = services.create(&PostParams::default(), &svc).await {
                    return Some(format!("service svc-{s} in {}: {e}", remote_name(c)));
                }
                if let Err(e) = slices.create(&PostParams::default(), &slice).await {
                    return Some(format!("slice of svc-{s} in {}: {e}", remote_name(c)));
                }
                None
            }
        })
        .buffer_unordered(LOAD_CONCURRENCY)
        .filter_map(|r| async move { r })
        .collect()
        .await;
    assert!(failed.is_empty(), "creates failed: {failed:?}");
}

/// Change `k` of a run, round-robin over clusters, then services, then endpoints: it replaces
/// one endpoint IP of one remote slice with `changed_ip(k)`.
pub(crate) struct RemoteChange {
    /// The remote cluster.
    pub c: usize,
    /// The service.
    pub s: usize,
    pub new_ip: Ipv4Addr,
    /// The slice's endpoint IPs once changed.
    pub next: Vec<Ipv4Addr>,
    /// The remote slice's name.
    pub slice: String,
    api: Api<EndpointSlice>,
    /// A JSON merge patch of the slice's `endpoints`.
    patch: Value,
}

impl RemoteChange {
    /// Change `k`; `clients[c]` is remote cluster `c`'s client and `ips[c][s]` the current
    /// endpoint IPs of service `s` there.
    pub(crate) fn new(k: usize, clients: &[Client], ips: &[Vec<Vec<Ipv4Addr>>]) -> Self {
        let clusters = clients.len();
        let services = ips[0].len();
        let endpoints = ips[0][0].len();
        let c = k % clusters;
        let s = (k / clusters) % services;
        let e = (k / (clusters * services)) % endpoints;
        let new_ip = changed_ip(k);
        let mut next = ips[c][s].clone();
        next[e] = new_ip;
        let patch = json!({"endpoints": endpoints_json(s, &next)});
        RemoteChange {
            c,
            s,
            new_ip,
            next,
            slice: slice_name(s),
            api: Api::namespaced(clients[c].clone(), NS),
            patch,
        }
    }

    /// The remote write (made ready here, sent when first polled).
    pub(crate) fn write(
        &self,
    ) -> impl Future<Output = kube::Result<EndpointSlice>> + Send + 'static {
        let (api, slice, patch) = (self.api.clone(), self.slice.clone(), self.patch.clone());
        async move {
            api.patch(&slice, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        }
    }
}

/// How the server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The built `clusterset-dns` binary, a child process.
    Process,
    /// `Server::start_full` in this process.
    InProcess,
}

/// How the server ran, for the report: the binary's path, or `in-process`.
pub(crate) fn how(mode: Mode, binary: Option<&Path>) -> String {
    match mode {
        Mode::Process => binary.map_or_else(String::new, |b| b.display().to_string()),
        Mode::InProcess => "in-process".to_owned(),
    }
}

/// The server binary (see `server_binary`), the server modes to run, and a multi-threaded
/// runtime. In-process only when the `in_process_var` flag is set or without the binary (`name`
/// names the bench in the note), else the binary in a bench run (`bench`) and both in a smoke
/// run.
pub(crate) fn setup(
    name: &str,
    in_process_var: &str,
    bench: bool,
) -> (Option<PathBuf>, Vec<Mode>, tokio::runtime::Runtime) {
    let binary = server_binary();
    let modes = if flag(in_process_var) || binary.is_none() {
        if binary.is_none() {
            println!("{name}: server binary not found; running the server in-process");
        }
        vec![Mode::InProcess]
    } else if bench {
        vec![Mode::Process]
    } else {
        // The smoke run keeps both paths working.
        vec![Mode::Process, Mode::InProcess]
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    (binary, modes, rt)
}

/// The child server; killed (by its own handle) when dropped, so a panic does not leak it.
pub(crate) struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The server binary: Cargo's path for benches, or next to this executable (`target/<profile>/`,
/// the bench being in `target/<profile>/deps/`).
fn server_binary() -> Option<PathBuf> {
    let from_cargo = PathBuf::from(env!("CARGO_BIN_EXE_clusterset-dns"));
    if from_cargo.is_file() {
        return Some(from_cargo);
    }
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?;
    let candidate = profile_dir.join("clusterset-dns");
    candidate.is_file().then_some(candidate)
}

/// Starts the binary (`serve` linked to the clusters of `clusters_file`, then `extra` arguments;
/// `RUST_LOG` from `log_var`, else `warn`) and reads its `listening dns=ADDR admin=ADDR` line (at
/// most 30 s); returns the child and that line.
pub(crate) fn start_process(
    binary: &Path,
    kubeconfig: &Path,
    clusters_file: &Path,
    extra: &[&str],
    log_var: &str,
) -> (ChildGuard, String) {
    let child = Command::new(binary)
        .args(["serve", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--local-cluster", "local", "--clusters"])
        .arg(clusters_file)
        .args([
            "--dns-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
            "--sync-timeout",
            "60s",
        ])
        .args(extra)
        .env(
            "RUST_LOG",
            std::env::var(log_var).unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the server binary");
    listening_line(child)
}

/// Reads the `listening dns=ADDR admin=ADDR` line of a server started with
/// its stdout piped (at most 30 s), and keeps draining the rest; returns
/// the guarded child and that line.
pub(crate) fn listening_line(child: Child) -> (ChildGuard, String) {
    let mut guard = ChildGuard(child);
    let stdout = guard.0.stdout.take().expect("child stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        // Keep draining so the child never blocks on a full pipe.
        for _ in lines {}
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the server prints its addresses within 30 s");
    (guard, line)
}

/// The address after `key` (`dns=`, `admin=`) in the server's `listening` line.
pub(crate) fn listening_addr(line: &str, key: &str) -> SocketAddr {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no {key}ADDR in {line:?}"))
}

/// Starts the server in this process, as `tests/integration/support.rs` `start_live` does; with
/// the mirror when `mirror` (given the settings and the local client) returns one.
pub(crate) async fn start_in_process(
    kubeconfig: &Path,
    clusters_file: &Path,
    mirror: impl FnOnce(&Settings, &Client) -> Option<MirrorConfig>,
) -> Server {
    let settings = Settings::new(ZoneName::new("clusterset.local").expect("zone"));
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let config = Config {
        mirror: None,
        zones: None,
        live: None,
        local_cluster: Some("local".into()),
        settings: Arc::new(settings),
        dns_addr: loopback,
        admin_addr: loopback,
        answer_cache_bytes: clusterset_dns::config::DEFAULT_ANSWER_CACHE_MB << 20,
        log_format: Default::default(),
        limits: Default::default(),
        tls: None,
        transfer_keys_file: None,
    };
    let local_client = k8s_client::local(Some(kubeconfig), None)
        .await
        .expect("local client");
    let sockets = Sockets::bind(loopback, loopback).expect("bind sockets");
    let mirror = mirror(&config.settings, &local_client);
    Server::start_full(
        &config,
        sockets,
        SourceSetup::Live(Box::new(LiveConfig {
            local: "local".into(),
            local_client,
            local_heartbeat: None,
            links: Links::File(clusters_file.to_owned()),
            sync_timeout: Duration::from_secs(60),
            mcs_rediscover: MCS_REDISCOVER,
            allow_kubeconfig_exec: false,
        })),
        mirror,
    )
    .expect("start server")
}
