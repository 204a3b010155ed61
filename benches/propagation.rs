//! Propagation latency in live mode: change an EndpointSlice in a remote kubesim cluster and
//! measure until a DNS query to the server returns the new answer. Three remote clusters of
//! 1,000 flat-mode (`remote-discovery`) Services with one EndpointSlice of 10 ready endpoints
//! each; 1,000 changes, each replacing one endpoint IP of one slice, round-robin over clusters
//! and services; p50, p99 and max, and the server's RSS.
//!
//! Latency of one change: from just before the write is sent (a JSON merge patch of the slice's
//! `endpoints` through kube-rs, plain HTTP on loopback) to the first UDP answer for
//! `<svc>-<cluster>.<ns>.svc.clusterset.local A` that contains the new IP. The answer is polled
//! from this bench's main thread (a blocking socket, one query in flight, 100 µs between polls),
//! at most 5 s per change; a change not seen by then counts as a timeout. Changes are sequential:
//! the next is written once the previous one is seen and its write has returned.
//!
//! The server runs as the built binary (`serve --clusters FILE`), so its RSS is read exactly from
//! `/proc/<pid>/status`; if the binary is missing, or with `PROPAGATION_IN_PROCESS=1`, it runs in
//! this process (as `tests/integration/support.rs` `start_live` does) and the RSS reported is
//! this process's growth while the server starts and syncs.
//!
//! `cargo bench --bench propagation` runs the full size; `cargo test --bench propagation` runs a
//! small smoke version (both server modes, zero timeouts asserted). Sizes can be overridden with
//! `PROPAGATION_CLUSTERS`, `PROPAGATION_SERVICES`, `PROPAGATION_ENDPOINTS` and
//! `PROPAGATION_CHANGES`; `PROPAGATION_TLS=1` serves kubesim over HTTPS.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clusterset_dns::config::Config;
use clusterset_dns::dns::name::ZoneName;
use clusterset_dns::model::Settings;
use clusterset_dns::runtime::{Server, Sockets, SourceSetup};
use clusterset_dns::source::api;
use clusterset_dns::source::live::{Links, LiveConfig};
use futures_util::{StreamExt, stream};
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config as KubeConfig};
use serde_json::json;

/// The namespace every exported Service lives in.
const NS: &str = "bench";
/// Longest wait for one change to show up in DNS.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between two polls of one change.
const POLL_GAP: Duration = Duration::from_micros(100);
/// Longest wait for one DNS response before the query is sent again.
const QUERY_TIMEOUT: Duration = Duration::from_millis(200);
/// Longest wait for the server to start, sync and answer.
const SYNC_TIMEOUT: Duration = Duration::from_secs(120);
/// Creates in flight while loading.
const LOAD_CONCURRENCY: usize = 64;

fn size(var: &str, full: usize, smoke: usize, bench: bool) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench { full } else { smoke })
}

fn flag(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1" || v == "true")
}

/// `VmRSS` and `VmHWM` (peak) of a process, in bytes.
fn rss_of(status_path: &str) -> (u64, u64) {
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

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
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

/// The cluster names: `c1`, `c2`, …
fn remote_name(c: usize) -> String {
    format!("c{}", c + 1)
}

/// The initial IP of endpoint `e` of service `s` in remote cluster `c`: 10.0.0.0 plus
/// `(c + 1) << 20` plus `s * endpoints + e`.
fn initial_ip(c: usize, s: usize, e: usize, endpoints: usize) -> Ipv4Addr {
    let n = (s * endpoints + e) as u32;
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)) + (((c as u32) + 1) << 20) + n)
}

/// The IP change `k` puts in: 172.16.0.0 plus `k`, never an initial IP.
fn changed_ip(k: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(172, 16, 0, 0)) + k as u32)
}

fn service(s: usize) -> Service {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("svc-{s}"),
            "namespace": NS,
            "labels": {"mirror.linkerd.io/exported": "remote-discovery", "app": format!("svc-{s}")},
        },
        "spec": {
            "selector": {"app": format!("svc-{s}")},
            "ports": [{"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}],
        },
    }))
    .expect("service")
}

fn endpoints_json(s: usize, ips: &[Ipv4Addr]) -> serde_json::Value {
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
            "name": format!("svc-{s}-abcde"),
            "namespace": NS,
            "labels": {"kubernetes.io/service-name": format!("svc-{s}")},
        },
        "addressType": "IPv4",
        "endpoints": endpoints_json(s, ips),
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }))
    .expect("slice")
}

async fn client(cluster: &kubesim::Cluster) -> Client {
    let text = std::fs::read_to_string(cluster.kubeconfig_path()).expect("kubeconfig");
    let kc = Kubeconfig::from_yaml(&text).expect("kubeconfig parses");
    let config = KubeConfig::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

/// Creates the namespace, the Services and their slices in every remote cluster, `LOAD_CONCURRENCY`
/// creates in flight. `ips[c][s]` are the endpoint IPs of service `s` in cluster `c`.
async fn load(clients: &[Client], ips: &[Vec<Vec<Ipv4Addr>>]) {
    for client in clients {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": NS}})).expect("namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
    }
    let jobs: Vec<(usize, usize)> = (0..ips[0].len())
        .flat_map(|s| (0..clients.len()).map(move |c| (c, s)))
        .collect();
    let failed: Vec<String> = stream::iter(jobs)
        .map(|(c, s)| {
            let client = clients[c].clone();
            let slice = slice(s, &ips[c][s]);
            async move {
                let services: Api<Service> = Api::namespaced(client.clone(), NS);
                let slices: Api<EndpointSlice> = Api::namespaced(client, NS);
                if let Err(e) = services.create(&PostParams::default(), &service(s)).await {
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

/// How the server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The built `clusterset-dns` binary, a child process.
    Process,
    /// `Server::start_with` in this process.
    InProcess,
}

/// A running server.
enum Running {
    Process(ChildGuard),
    InProcess(Server),
}

/// The child server; killed (by its own handle) when dropped, so a panic does not leak it.
struct ChildGuard(Child);

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

/// Starts the binary and reads its `listening dns=ADDR admin=ADDR` line (at most 30 s).
fn start_process(
    binary: &Path,
    kubeconfig: &Path,
    clusters_file: &Path,
) -> (ChildGuard, SocketAddr, SocketAddr) {
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
        .env(
            "RUST_LOG",
            std::env::var("PROPAGATION_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the server binary");
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
    let addr = |key: &str| -> SocketAddr {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no {key}ADDR in {line:?}"))
    };
    let (dns, admin) = (addr("dns="), addr("admin="));
    (guard, dns, admin)
}

/// `GET /ready` on the admin server: true on 200.
fn admin_ready(admin: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&admin, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    if s.write_all(b"GET /ready HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// Starts the server in this process, as `tests/integration/support.rs` `start_live` does.
async fn start_in_process(kubeconfig: &Path, clusters_file: &Path) -> Server {
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
    };
    let local_client = api::local_client(Some(kubeconfig), None)
        .await
        .expect("local client");
    let sockets = Sockets::bind(loopback, loopback).expect("bind sockets");
    Server::start_with(
        &config,
        sockets,
        SourceSetup::Live(LiveConfig {
            local: "local".into(),
            local_client,
            links: Links::File(clusters_file.to_owned()),
            sync_timeout: Duration::from_secs(60),
        }),
    )
    .expect("start server")
}

/// A UDP DNS client with one query in flight.
struct Dns {
    sock: UdpSocket,
    id: u16,
    buf: Vec<u8>,
}

impl Dns {
    fn new(server: SocketAddr) -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        sock.connect(server).expect("connect udp");
        sock.set_read_timeout(Some(QUERY_TIMEOUT))
            .expect("read timeout");
        Self {
            sock,
            id: 0,
            buf: vec![0; 65535],
        }
    }

    /// The A records answering `name`, or `None` when no response came in time.
    fn a(&mut self, name: &Name) -> Option<Vec<Ipv4Addr>> {
        self.id = self.id.wrapping_add(1);
        let mut m = Message::new(self.id, MessageType::Query, OpCode::Query);
        m.add_query(Query::query(name.clone(), RecordType::A));
        let bytes = m.to_vec().expect("encode query");
        self.sock.send(&bytes).ok()?;
        let deadline = Instant::now() + QUERY_TIMEOUT;
        while Instant::now() < deadline {
            let n = self.sock.recv(&mut self.buf).ok()?;
            let Ok(resp) = Message::from_vec(&self.buf[..n]) else {
                continue;
            };
            // A late answer to an earlier, timed-out query: skip it.
            if resp.metadata.id != self.id {
                continue;
            }
            return Some(
                resp.answers
                    .iter()
                    .filter_map(|r| match &r.data {
                        RData::A(a) => Some(a.0),
                        _ => None,
                    })
                    .collect(),
            );
        }
        None
    }
}

fn qname(s: usize, c: usize) -> Name {
    Name::from_ascii(format!(
        "svc-{s}-{}.{NS}.svc.clusterset.local.",
        remote_name(c)
    ))
    .expect("query name")
}

/// Waits until every remote cluster's last service answers with its full endpoint set.
fn wait_answers(dns: &mut Dns, ips: &[Vec<Vec<Ipv4Addr>>], deadline: Instant) {
    for (c, services) in ips.iter().enumerate() {
        let s = services.len() - 1;
        let mut want = services[s].clone();
        want.sort();
        let name = qname(s, c);
        loop {
            if let Some(mut got) = dns.a(&name) {
                got.sort();
                if got == want {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not answer {want:?} in time"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// What one run of changes measured.
struct Measured {
    /// Write sent → first answer with the new IP.
    latency: Vec<Duration>,
    /// Write sent → the API call returned.
    write: Vec<Duration>,
    /// Write sent → kubesim committed it.
    to_commit: Vec<Duration>,
    /// Commit → first answer with the new IP.
    from_commit: Vec<Duration>,
    /// Queries sent.
    polls: u64,
    timeouts: usize,
}

/// Runs `changes` changes, round-robin over clusters and services, starting at change number
/// `first` (so every run puts in IPs never used before).
fn run_changes(
    rt: &tokio::runtime::Runtime,
    clients: &[Client],
    sim: &kubesim::Sim,
    dns: &mut Dns,
    ips: &mut [Vec<Vec<Ipv4Addr>>],
    first: usize,
    changes: usize,
) -> Measured {
    let clusters = clients.len();
    let services = ips[0].len();
    let endpoints = ips[0][0].len();
    // Commit times from in-process subscribers to each remote cluster's store.
    let commits: Arc<Mutex<HashMap<(usize, u64), Instant>>> = Arc::default();
    let recorders: Vec<_> = (0..clusters)
        .map(|c| {
            let mut rx = sim
                .cluster(&remote_name(c))
                .expect("remote cluster")
                .subscribe();
            let commits = commits.clone();
            rt.spawn(async move {
                while let Ok(change) = rx.recv().await {
                    let at = Instant::now();
                    commits.lock().expect("commits").insert((c, change.rv), at);
                }
            })
        })
        .collect();
    let mut m = Measured {
        latency: Vec::with_capacity(changes),
        write: Vec::with_capacity(changes),
        to_commit: Vec::with_capacity(changes),
        from_commit: Vec::with_capacity(changes),
        polls: 0,
        timeouts: 0,
    };
    for n in 0..changes {
        let k = first + n;
        let c = k % clusters;
        let s = (k / clusters) % services;
        let e = (k / (clusters * services)) % endpoints;
        let new_ip = changed_ip(k);
        let mut next = ips[c][s].clone();
        next[e] = new_ip;
        let patch = json!({"endpoints": endpoints_json(s, &next)});
        let api: Api<EndpointSlice> = Api::namespaced(clients[c].clone(), NS);
        let name = qname(s, c);

        let t0 = Instant::now();
        let write = rt.spawn(async move {
            let r = api
                .patch(
                    &format!("svc-{s}-abcde"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await;
            (r, t0.elapsed())
        });
        let deadline = t0 + CHANGE_TIMEOUT;
        let mut seen = None;
        while Instant::now() < deadline {
            m.polls += 1;
            if let Some(answer) = dns.a(&name)
                && answer.contains(&new_ip)
            {
                seen = Some(Instant::now());
                break;
            }
            std::thread::sleep(POLL_GAP);
        }
        let (result, write_time) = rt.block_on(write).expect("write task");
        let patched = result.unwrap_or_else(|e| panic!("patch of svc-{s} in c{}: {e}", c + 1));
        ips[c][s] = next;
        m.write.push(write_time);
        let Some(seen) = seen else {
            m.timeouts += 1;
            continue;
        };
        m.latency.push(seen - t0);
        let rv = patched
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok());
        // The recorder may lag the write by a moment; it is in-process and never far behind.
        let commit = rv.and_then(|rv| {
            let until = Instant::now() + Duration::from_secs(1);
            loop {
                if let Some(at) = commits.lock().expect("commits").get(&(c, rv)).copied() {
                    break Some(at);
                }
                if Instant::now() > until {
                    break None;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        });
        if let Some(at) = commit {
            m.to_commit.push(at.saturating_duration_since(t0));
            m.from_commit.push(seen.saturating_duration_since(at));
        }
    }
    for r in recorders {
        r.abort();
    }
    m
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let clusters = size("PROPAGATION_CLUSTERS", 3, 3, bench);
    let services = size("PROPAGATION_SERVICES", 1000, 20, bench);
    let endpoints = size("PROPAGATION_ENDPOINTS", 10, 10, bench);
    let changes = size("PROPAGATION_CHANGES", 1000, 30, bench);
    assert!(clusters >= 1 && services >= 1 && endpoints >= 1);
    let tls = flag("PROPAGATION_TLS");
    let binary = server_binary();
    let modes: Vec<Mode> = if flag("PROPAGATION_IN_PROCESS") || binary.is_none() {
        if binary.is_none() {
            println!("propagation: server binary not found; running the server in-process");
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
    let _entered = rt.enter();
    let dir = tempfile::tempdir().expect("tempdir");
    let names: Vec<String> = std::iter::once("local".to_owned())
        .chain((0..clusters).map(remote_name))
        .collect();
    let mut sim_config = kubesim::SimConfig::new(names, dir.path().join("kube"));
    sim_config.tls = tls;
    let sim = rt.block_on(kubesim::start(sim_config)).expect("kubesim");
    let local_kubeconfig = sim
        .cluster("local")
        .expect("local")
        .kubeconfig_path()
        .to_owned();
    let remotes: Vec<&Arc<kubesim::Cluster>> = (0..clusters)
        .map(|c| sim.cluster(&remote_name(c)).expect("remote"))
        .collect();
    let clusters_file = dir.path().join("clusters.yaml");
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
    std::fs::write(&clusters_file, text).expect("clusters file");

    // Load.
    let mut ips: Vec<Vec<Vec<Ipv4Addr>>> = (0..clusters)
        .map(|c| {
            (0..services)
                .map(|s| {
                    (0..endpoints)
                        .map(|e| initial_ip(c, s, e, endpoints))
                        .collect()
                })
                .collect()
        })
        .collect();
    let clients: Vec<Client> = rt.block_on(async {
        let mut out = Vec::new();
        for r in &remotes {
            out.push(client(r).await);
        }
        out
    });
    // Objects every cluster starts with (the `kubernetes` Service).
    let count = |r: &kubesim::Cluster, res: usize| r.store().count(res);
    let before: Vec<(usize, usize)> = remotes
        .iter()
        .map(|r| {
            (
                count(r, kubesim::resources::SERVICES),
                count(r, kubesim::resources::ENDPOINTSLICES),
            )
        })
        .collect();
    let started = Instant::now();
    rt.block_on(load(&clients, &ips));
    let load_time = started.elapsed();
    for (r, (svcs, slices)) in remotes.iter().zip(before) {
        assert_eq!(count(r, kubesim::resources::SERVICES), svcs + services);
        assert_eq!(
            count(r, kubesim::resources::ENDPOINTSLICES),
            slices + services
        );
    }
    println!(
        "propagation: kubesim over {}; loaded {} Services and {} EndpointSlices of {endpoints} endpoints in {:.2} s ({LOAD_CONCURRENCY} creates in flight)",
        if tls { "HTTPS" } else { "plain HTTP" },
        clusters * services,
        clusters * services,
        load_time.as_secs_f64(),
    );

    let mut first = 0;
    for mode in modes {
        // Start the server and wait until it is ready and answers.
        let self_status = "/proc/self/status";
        let rss_before = rss_of(self_status).0;
        let started = Instant::now();
        let deadline = started + SYNC_TIMEOUT;
        let (running, dns_addr) = match mode {
            Mode::Process => {
                let binary = binary.as_deref().expect("binary");
                let (child, dns, admin) = start_process(binary, &local_kubeconfig, &clusters_file);
                while !admin_ready(admin) {
                    assert!(Instant::now() < deadline, "server not ready in time");
                    std::thread::sleep(Duration::from_millis(5));
                }
                (Running::Process(child), dns)
            }
            Mode::InProcess => {
                let server = rt.block_on(start_in_process(&local_kubeconfig, &clusters_file));
                while !server.shared.ready.load(Ordering::Acquire) {
                    assert!(Instant::now() < deadline, "server not ready in time");
                    std::thread::sleep(Duration::from_millis(5));
                }
                let dns = server.dns_addr;
                (Running::InProcess(server), dns)
            }
        };
        let ready_time = started.elapsed();
        let mut dns = Dns::new(dns_addr);
        wait_answers(&mut dns, &ips, deadline);
        let answering_time = started.elapsed();
        let status_path = match &running {
            Running::Process(child) => format!("/proc/{}/status", child.0.id()),
            Running::InProcess(_) => self_status.to_owned(),
        };
        let (rss_synced, _) = rss_of(&status_path);

        let mut m = run_changes(&rt, &clients, &sim, &mut dns, &mut ips, first, changes);
        first += changes;
        let (rss_after, rss_peak) = rss_of(&status_path);

        let what = format!(
            "{clusters} clusters x {services} services x {endpoints} endpoints, {changes} changes"
        );
        let mut latency = m.latency.clone();
        latency.sort();
        let rss = match mode {
            Mode::Process => format!(
                "server RSS {:.1} MiB (separate process; {:.1} MiB after the changes, peak {:.1} MiB)",
                mib(rss_synced),
                mib(rss_after),
                mib(rss_peak)
            ),
            Mode::InProcess => format!(
                "server RSS {:.1} MiB (in-process delta: this process's growth from server start to synced; {:.1} MiB after the changes)",
                mib(rss_synced.saturating_sub(rss_before)),
                mib(rss_after.saturating_sub(rss_before))
            ),
        };
        println!(
            "propagation: {what}: p50 {}, p99 {}, max {}, timeouts {}; {rss}; load {:.2} s",
            ms(percentile(&latency, 0.5)),
            ms(percentile(&latency, 0.99)),
            ms(latency.last().copied().unwrap_or_default()),
            m.timeouts,
            load_time.as_secs_f64()
        );
        let how = match mode {
            Mode::Process => binary
                .as_deref()
                .map_or_else(String::new, |b| b.display().to_string()),
            Mode::InProcess => "in-process".to_owned(),
        };
        println!(
            "  server ({how}): ready after {:.2} s, every cluster answering after {:.2} s",
            ready_time.as_secs_f64(),
            answering_time.as_secs_f64()
        );
        println!("  | | p50 / p99 / max | samples |");
        println!("  |---|---|---|");
        println!(
            "  | write sent → new IP in a DNS answer | {} | {} |",
            summary(&mut m.latency),
            m.latency.len()
        );
        println!(
            "  | write sent → kubesim commit | {} | {} |",
            summary(&mut m.to_commit),
            m.to_commit.len()
        );
        println!(
            "  | kubesim commit → new IP in a DNS answer | {} | {} |",
            summary(&mut m.from_commit),
            m.from_commit.len()
        );
        println!(
            "  | write sent → patch call returned | {} | {} |",
            summary(&mut m.write),
            m.write.len()
        );
        println!(
            "  ({} DNS queries polled, {:.1} per change)",
            m.polls,
            m.polls as f64 / changes.max(1) as f64
        );

        match running {
            Running::Process(child) => drop(child),
            Running::InProcess(server) => rt.block_on(server.stop()),
        }
        if !bench {
            assert_eq!(m.timeouts, 0, "every change reached DNS within 5 s");
        }
    }
}
