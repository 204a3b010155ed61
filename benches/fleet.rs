//! A fleet of linked clusters: how start-up, memory, connections and propagation grow from 10
//! to 100 linked clusters. One kubesim (plain HTTP on loopback, in this process) serves a
//! `local` cluster and 100 remote clusters, each of 200 flat-mode (`remote-discovery`) Services
//! with one EndpointSlice of 10 ready endpoints (200,000 endpoints in all), loaded once through
//! the API (64 creates in flight). Then, for each fleet size (10, then 100), the server binary
//! starts linked to the first that many clusters (`serve --clusters FILE`), and the bench
//! measures:
//!
//! - **start → `/ready`**: from just before the process is spawned to the first 200 of
//!   `GET /ready` on its admin endpoint (polled every 5 ms; at most 180 s);
//! - **start → every cluster answering**: until the last Service of every linked cluster
//!   answers its full endpoint set over UDP; then every name of every linked cluster is checked
//!   (not timed) to answer exactly its endpoints;
//! - **resident memory**: `VmRSS` of the server process from `/proc/<pid>/status` once every
//!   cluster answers, after the changes, and its peak (`VmHWM`);
//! - **connections**: the server's sockets, from `/proc/<pid>/fd` (socket inodes) matched
//!   against `/proc/<pid>/net/tcp` and `tcp6`: TCP connections established, and how many of
//!   them go to a linked cluster's API server (by port), in all and per cluster (min / max);
//! - **propagation**: `FLEET_CHANGES` (1,000) sequential changes, round-robin over the linked
//!   clusters, then services, each replacing one endpoint IP of one slice, timed from just
//!   before the write to the first UDP answer for `<svc>-<cluster>` holding the new IP (at most
//!   5 s; a change not seen by then is a timeout), exactly as `benches/propagation.rs` does
//!   (`benches/common/changes.rs`).
//!
//! Prints one table with a column per fleet size and the growth factor between the first and
//! the last, the propagation breakdown of each size, and `RESULT fleet …` lines (one per size,
//! one for the growth).
//!
//! `cargo bench --bench fleet` runs the full size; `cargo test --bench fleet` runs a smoke
//! version (2 and 4 clusters of 5 services × 3 endpoints, 20 changes; a few seconds) that
//! asserts zero timeouts, every name's answer, and at least one established connection to
//! every linked cluster's API server. Sizes can be overridden with `FLEET_CLUSTERS` (a
//! comma-separated list, e.g. `10,50,100`), `FLEET_SERVICES`, `FLEET_ENDPOINTS` and
//! `FLEET_CHANGES`; `FLEET_TLS=1` serves kubesim over HTTPS; `FLEET_LOG` is the server's
//! `RUST_LOG`.

#[path = "common/changes.rs"]
mod changes;
// This bench runs the server as its own process only, so it leaves common's in-process start and
// in-process RSS reporting unused.
#[allow(dead_code)]
#[path = "common/mod.rs"]
mod common;
#[path = "common/dns.rs"]
mod dns;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::Client;

use changes::{Measured, print_breakdown, run_changes, wait_answer};
use common::{ChildGuard, Kube, LOAD_CONCURRENCY, flag, listening_addr, mib, percentile, size};
use dns::{Dns, admin_ready};

/// Longest wait for the server to be ready, and then for every cluster to answer.
const SYNC_TIMEOUT: Duration = Duration::from_secs(180);
/// TCP state `ESTABLISHED` in `/proc/net/tcp`.
const TCP_ESTABLISHED: &str = "01";

/// The server's TCP connections at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct Conns {
    /// File descriptors that are sockets (TCP, UDP, Unix).
    socket_fds: usize,
    /// TCP connections established.
    established: usize,
    /// Of those, to a linked cluster's API server.
    to_linked: usize,
    /// Fewest and most connections to one linked cluster's API server.
    per_cluster: (usize, usize),
}

/// The socket inodes among `/proc/<pid>/fd`.
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|target| {
            let t = target.to_str()?;
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// The port of an address in `/proc/net/tcp` form (`0100007F:1F90`).
fn proc_port(addr: &str) -> Option<u16> {
    u16::from_str_radix(addr.rsplit_once(':')?.1, 16).ok()
}

/// Counts the server's connections: `linked_ports` maps an API server port to its linked
/// cluster (0-based), and there are `linked` linked clusters.
fn conns_of(pid: u32, linked_ports: &HashMap<u16, usize>, linked: usize) -> Conns {
    let inodes = socket_inodes(pid);
    let mut conns = Conns {
        socket_fds: inodes.len(),
        ..Conns::default()
    };
    let mut per_cluster = vec![0usize; linked];
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) = (f.get(2), f.get(3), f.get(9)) else {
                continue;
            };
            let mine = inode.parse::<u64>().is_ok_and(|i| inodes.contains(&i));
            if !mine || *state != TCP_ESTABLISHED {
                continue;
            }
            conns.established += 1;
            if let Some(&c) = proc_port(remote).and_then(|p| linked_ports.get(&p)) {
                conns.to_linked += 1;
                per_cluster[c] += 1;
            }
        }
    }
    conns.per_cluster = (
        per_cluster.iter().copied().min().unwrap_or(0),
        per_cluster.iter().copied().max().unwrap_or(0),
    );
    conns
}

/// The port a kubesim cluster listens on.
fn api_port(cluster: &kubesim::Cluster) -> u16 {
    let url = cluster.server_url();
    url.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

/// Writes a clusters file linking the first `n` remote clusters, in `dir`.
fn clusters_file(dir: &Path, kube: &Kube, n: usize) -> PathBuf {
    let path = dir.join(format!("clusters-{n}.yaml"));
    common::write_clusters_file(&path, &kube.remotes()[..n]);
    path
}

/// What one fleet size measured.
struct FleetRun {
    clusters: usize,
    ready: Duration,
    answering: Duration,
    /// RSS once every cluster answers, after the changes, and the peak.
    rss: (u64, u64, u64),
    /// Connections once every cluster answers, and after the changes.
    conns: (Conns, Conns),
    m: Measured,
}

/// What every fleet size shares.
struct Fleet<'a> {
    rt: &'a tokio::runtime::Runtime,
    kube: &'a Kube,
    clients: &'a [Client],
    binary: &'a Path,
    dir: &'a Path,
    changes: usize,
}

impl Fleet<'_> {
    /// Starts the server linked to the first `n` clusters, waits until it is ready and every
    /// cluster answers, checks every name, and runs the changes numbered from `*first` on.
    fn run(&self, n: usize, ips: &mut [Vec<Vec<Ipv4Addr>>], first: &mut usize) -> FleetRun {
        let file = clusters_file(self.dir, self.kube, n);
        let kubeconfig = self.kube.local().kubeconfig_path().to_owned();
        let started = Instant::now();
        let deadline = started + SYNC_TIMEOUT;
        let (child, line) =
            common::start_process(self.binary, &kubeconfig, &file, &[], "FLEET_LOG");
        let admin = listening_addr(&line, "admin=");
        while !admin_ready(admin) {
            assert!(Instant::now() < deadline, "{n} clusters: not ready in time");
            std::thread::sleep(Duration::from_millis(5));
        }
        let ready = started.elapsed();
        let mut dns = Dns::new(listening_addr(&line, "dns="));
        let deadline = Instant::now() + SYNC_TIMEOUT;
        changes::wait_answers(&mut dns, &ips[..n], 0, deadline);
        let answering = started.elapsed();
        check_every_name(&mut dns, &ips[..n], deadline);

        let pid = child.0.id();
        let status = format!("/proc/{pid}/status");
        let ports: HashMap<u16, usize> =
            (0..n).map(|c| (api_port(self.kube.remote(c)), c)).collect();
        let rss_ready = common::rss_of(&status).0;
        let conns_ready = conns_of(pid, &ports, n);
        let ks = *first..*first + self.changes;
        *first += self.changes;
        let m = run_changes(
            self.rt,
            &self.clients[..n],
            self.kube,
            &mut dns,
            &mut ips[..n],
            0,
            ks,
        );
        let (rss_after, rss_peak) = common::rss_of(&status);
        let conns_after = conns_of(pid, &ports, n);
        drop::<ChildGuard>(child);
        FleetRun {
            clusters: n,
            ready,
            answering,
            rss: (rss_ready, rss_after, rss_peak),
            conns: (conns_ready, conns_after),
            m,
        }
    }
}

/// Checks that every service of every cluster in `ips` answers exactly its endpoints.
fn check_every_name(dns: &mut Dns, ips: &[Vec<Vec<Ipv4Addr>>], deadline: Instant) {
    for (c, services) in ips.iter().enumerate() {
        for (s, eps) in services.iter().enumerate() {
            wait_answer(dns, c, s, eps, deadline);
        }
    }
}

/// p50, p99 and max of a sample (sorted here).
fn quantiles(samples: &mut [Duration]) -> [Duration; 3] {
    samples.sort();
    [
        percentile(samples, 0.5),
        percentile(samples, 0.99),
        samples.last().copied().unwrap_or_default(),
    ]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `last / first`, as text (`-` when `first` is zero).
fn growth(first: f64, last: f64) -> String {
    if first > 0.0 {
        format!("{:.2}x", last / first)
    } else {
        "-".to_owned()
    }
}

/// A table with a row per measure, a column per fleet size, and the growth from the first
/// size to the last.
struct Table<'a> {
    runs: &'a [FleetRun],
}

impl Table<'_> {
    /// A row: `value` of every run, shown by `show`, and its growth.
    fn row(&self, what: &str, value: impl Fn(&FleetRun) -> f64, show: impl Fn(f64) -> String) {
        let cells: Vec<String> = self.runs.iter().map(|r| show(value(r))).collect();
        let (first, last) = (&self.runs[0], &self.runs[self.runs.len() - 1]);
        println!(
            "  | {what} | {} | {} |",
            cells.join(" | "),
            growth(value(first), value(last))
        );
    }

    /// A row of text cells, without growth.
    fn text_row(&self, what: &str, cell: impl Fn(&FleetRun) -> String) {
        let cells: Vec<String> = self.runs.iter().map(cell).collect();
        println!("  | {what} | {} | |", cells.join(" | "));
    }
}

/// Prints the fleet table (the runs' latency samples end up sorted).
fn print_table(runs: &mut [FleetRun], per_cluster: usize) {
    for r in runs.iter_mut() {
        r.m.latency.sort();
    }
    let head: Vec<String> = runs
        .iter()
        .map(|r| format!("{} clusters", r.clusters))
        .collect();
    println!("  | measure | {} | growth |", head.join(" | "));
    println!("  |---|{}---|", "---|".repeat(runs.len()));
    let t = Table { runs };
    let count = |v: f64| format!("{v:.0}");
    let s = |v: f64| format!("{v:.2} s");
    let mb = |v: f64| format!("{v:.1} MiB");
    let msec = |v: f64| format!("{v:.2} ms");
    t.row(
        "linked endpoints",
        |r| (r.clusters * per_cluster) as f64,
        count,
    );
    t.row("server start → /ready", |r| r.ready.as_secs_f64(), s);
    t.row(
        "server start → every cluster answering",
        |r| r.answering.as_secs_f64(),
        s,
    );
    t.row("server RSS, every cluster answering", |r| mib(r.rss.0), mb);
    t.row("server RSS after the changes", |r| mib(r.rss.1), mb);
    t.row("server peak RSS", |r| mib(r.rss.2), mb);
    t.row(
        "server TCP connections established",
        |r| r.conns.0.established as f64,
        count,
    );
    t.row(
        "… of them to linked API servers",
        |r| r.conns.0.to_linked as f64,
        count,
    );
    t.text_row("… per linked cluster, min / max", |r| {
        format!("{} / {}", r.conns.0.per_cluster.0, r.conns.0.per_cluster.1)
    });
    t.row(
        "server socket fds (TCP, UDP, Unix)",
        |r| r.conns.0.socket_fds as f64,
        count,
    );
    t.row(
        "server TCP connections established after the changes",
        |r| r.conns.1.established as f64,
        count,
    );
    let q = |p: f64| move |r: &FleetRun| percentile(&r.m.latency, p).as_secs_f64() * 1e3;
    t.row("propagation p50", q(0.5), msec);
    t.row("propagation p99", q(0.99), msec);
    t.row("propagation max", q(1.0), msec);
    t.text_row("propagation timeouts (> 5 s)", |r| r.m.timeouts.to_string());
}

/// Prints the `RESULT fleet` line of one size.
fn print_result(r: &FleetRun, services: usize, endpoints: usize) {
    let mut lat = r.m.latency.clone();
    let q = quantiles(&mut lat);
    let (c0, c1) = r.conns;
    println!(
        "RESULT fleet clusters={} services={services} endpoints={endpoints} linked_endpoints={} changes={} \
         ready_s={:.3} answering_s={:.3} rss_bytes={} rss_after_bytes={} rss_peak_bytes={} \
         tcp_established={} tcp_to_linked={} tcp_per_cluster_min={} tcp_per_cluster_max={} socket_fds={} \
         tcp_established_after={} p50_us={:.1} p99_us={:.1} max_us={:.1} timeouts={}",
        r.clusters,
        r.clusters * services * endpoints,
        r.m.latency.len() + r.m.timeouts,
        r.ready.as_secs_f64(),
        r.answering.as_secs_f64(),
        r.rss.0,
        r.rss.1,
        r.rss.2,
        c0.established,
        c0.to_linked,
        c0.per_cluster.0,
        c0.per_cluster.1,
        c0.socket_fds,
        c1.established,
        us(q[0]),
        us(q[1]),
        us(q[2]),
        r.m.timeouts,
    );
}

/// Prints the `RESULT fleet_growth` line: last size over first.
fn print_growth(runs: &mut [FleetRun]) {
    let (a, b) = (0, runs.len() - 1);
    let qa = quantiles(&mut runs[a].m.latency);
    let qb = quantiles(&mut runs[b].m.latency);
    let (ra, rb) = (&runs[a], &runs[b]);
    let ratio = |x: f64, y: f64| if x > 0.0 { y / x } else { 0.0 };
    println!(
        "RESULT fleet_growth from_clusters={} to_clusters={} clusters_x={:.2} ready_x={:.2} answering_x={:.2} \
         rss_x={:.2} tcp_established_x={:.2} p50_x={:.2} p99_x={:.2}",
        ra.clusters,
        rb.clusters,
        ratio(ra.clusters as f64, rb.clusters as f64),
        ratio(ra.ready.as_secs_f64(), rb.ready.as_secs_f64()),
        ratio(ra.answering.as_secs_f64(), rb.answering.as_secs_f64()),
        ratio(ra.rss.0 as f64, rb.rss.0 as f64),
        ratio(ra.conns.0.established as f64, rb.conns.0.established as f64),
        ratio(us(qa[0]), us(qb[0])),
        ratio(us(qa[1]), us(qb[1])),
    );
}

/// The fleet sizes: `FLEET_CLUSTERS` (comma-separated), else 10 and 100 (2 and 4 in a smoke run).
fn fleet_sizes(bench: bool) -> Vec<usize> {
    let sizes: Vec<usize> = match std::env::var("FLEET_CLUSTERS") {
        Ok(v) => v
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("FLEET_CLUSTERS: numbers, comma-separated")
            })
            .collect(),
        Err(_) if bench => vec![10, 100],
        Err(_) => vec![2, 4],
    };
    assert!(
        !sizes.is_empty() && sizes.iter().all(|&n| n >= 1),
        "FLEET_CLUSTERS: each at least 1"
    );
    sizes
}

fn main() {
    let bench = common::bench_mode();
    let sizes = fleet_sizes(bench);
    let services = size("FLEET_SERVICES", 200, 5, bench);
    let endpoints = size("FLEET_ENDPOINTS", 10, 3, bench);
    let changes = size("FLEET_CHANGES", 1000, 20, bench);
    assert!(services >= 1 && endpoints >= 1 && changes >= 1);
    let tls = flag("FLEET_TLS");
    let max = sizes.iter().copied().max().expect("sizes");
    let (binary, _, rt) = common::setup("fleet", "FLEET_IN_PROCESS", bench);
    let binary = binary.expect("the fleet bench needs the clusterset-dns binary (cargo builds it)");
    let _entered = rt.enter();

    let kube = Kube::start(&rt, max, tls, false);
    let mut ips = common::initial_ips(max, services, endpoints);
    let clients: Vec<Client> = rt.block_on(common::clients(&kube.remotes()));
    let started = Instant::now();
    rt.block_on(common::load(&clients, &ips, |_| false));
    println!(
        "fleet: kubesim over {}, {max} remote clusters x {services} services x {endpoints} endpoints; loaded {} Services and EndpointSlices in {:.2} s ({LOAD_CONCURRENCY} creates in flight); server {}",
        if tls { "HTTPS" } else { "plain HTTP" },
        max * services,
        started.elapsed().as_secs_f64(),
        binary.display(),
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let fleet = Fleet {
        rt: &rt,
        kube: &kube,
        clients: &clients,
        binary: &binary,
        dir: dir.path(),
        changes,
    };
    let mut first = 0;
    let mut runs: Vec<FleetRun> = sizes
        .iter()
        .map(|&n| fleet.run(n, &mut ips, &mut first))
        .collect();

    println!(
        "fleet: {} clusters x {services} services x {endpoints} endpoints, {changes} changes per size",
        sizes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" / ")
    );
    print_table(&mut runs, services * endpoints);
    for r in &mut runs {
        println!("  {} clusters, propagation breakdown:", r.clusters);
        print_breakdown(&mut r.m, changes);
    }
    for r in &runs {
        print_result(r, services, endpoints);
    }
    print_growth(&mut runs);
    if !bench {
        for r in &runs {
            assert_eq!(
                r.m.timeouts, 0,
                "{} clusters: every change reached DNS within 5 s",
                r.clusters
            );
            let (min, _) = r.conns.0.per_cluster;
            assert!(
                min >= 1,
                "{} clusters: a connection to every linked API server",
                r.clusters
            );
        }
    }
}
