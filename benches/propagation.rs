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

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clusterset_dns::runtime::Server;
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use kube::Client;

use common::{
    CHANGE_TIMEOUT, ChildGuard, Kube, LOAD_CONCURRENCY, Mode, NS, RemoteChange, Rss, flag,
    listening_addr, remote_name, size, table_head, table_row,
};

/// Pause between two polls of one change.
const POLL_GAP: Duration = Duration::from_micros(100);
/// Longest wait for one DNS response before the query is sent again.
const QUERY_TIMEOUT: Duration = Duration::from_millis(200);
/// Longest wait for the server to start, sync and answer.
const SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// A running server.
enum Running {
    Process(ChildGuard),
    InProcess(Server),
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

/// Waits until service `s` of remote cluster `c` answers exactly `ips` (in any order).
fn wait_answer(dns: &mut Dns, c: usize, s: usize, ips: &[Ipv4Addr], deadline: Instant) {
    let mut want = ips.to_vec();
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
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until every remote cluster's last service answers with its full endpoint set.
fn wait_answers(dns: &mut Dns, ips: &[Vec<Vec<Ipv4Addr>>], deadline: Instant) {
    for (c, services) in ips.iter().enumerate() {
        let s = services.len() - 1;
        wait_answer(dns, c, s, &services[s], deadline);
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

/// Runs the changes numbered `ks`, round-robin over remote clusters `skip..` and their services
/// (every run takes numbers never used before, so it puts in IPs never used before); the
/// clusters before `skip` are not changed here.
fn run_changes(
    rt: &tokio::runtime::Runtime,
    clients: &[Client],
    sim: &kubesim::Sim,
    dns: &mut Dns,
    ips: &mut [Vec<Vec<Ipv4Addr>>],
    skip: usize,
    ks: Range<usize>,
) -> Measured {
    let changes = ks.len();
    // Commit times from in-process subscribers to each measured cluster's store.
    let commits: Arc<Mutex<HashMap<(usize, u64), Instant>>> = Arc::default();
    let recorders: Vec<_> = (skip..clients.len())
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
    for k in ks {
        let change = RemoteChange::new(k, &clients[skip..], &ips[skip..]);
        let (c, s, new_ip) = (skip + change.c, change.s, change.new_ip);
        let name = qname(s, c);
        let write = change.write();

        let t0 = Instant::now();
        let write = rt.spawn(async move {
            let r = write.await;
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
        ips[c][s] = change.next;
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

/// Prints the latency table of one run of `changes` changes (and sorts its samples).
fn print_breakdown(m: &mut Measured, changes: usize) {
    table_head();
    table_row("write sent → new IP in a DNS answer", &mut m.latency);
    table_row("write sent → kubesim commit", &mut m.to_commit);
    table_row(
        "kubesim commit → new IP in a DNS answer",
        &mut m.from_commit,
    );
    table_row("write sent → patch call returned", &mut m.write);
    println!(
        "  ({} DNS queries polled, {:.1} per change)",
        m.polls,
        m.polls as f64 / changes.max(1) as f64
    );
}

fn main() {
    let bench = common::bench_mode();
    let clusters = size("PROPAGATION_CLUSTERS", 3, 3, bench);
    let services = size("PROPAGATION_SERVICES", 1000, 20, bench);
    let endpoints = size("PROPAGATION_ENDPOINTS", 10, 10, bench);
    let changes = size("PROPAGATION_CHANGES", 1000, 30, bench);
    assert!(clusters >= 1 && services >= 1 && endpoints >= 1);
    let tls = flag("PROPAGATION_TLS");
    let (binary, modes, rt) = common::setup("propagation", "PROPAGATION_IN_PROCESS", bench);
    let _entered = rt.enter();
    let kube = Kube::start(&rt, clusters, tls);
    let local_kubeconfig = kube.local().kubeconfig_path().to_owned();
    let remotes = kube.remotes();

    // Load.
    let mut ips = common::initial_ips(clusters, services, endpoints);
    let clients: Vec<Client> = rt.block_on(common::clients(&remotes));
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
    rt.block_on(common::load(&clients, &ips, |_| false));
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
        let mut rss = Rss::start();
        let started = Instant::now();
        let deadline = started + SYNC_TIMEOUT;
        let (running, dns_addr) = match mode {
            Mode::Process => {
                let binary = binary.as_deref().expect("binary");
                let (child, line) = common::start_process(
                    binary,
                    &local_kubeconfig,
                    &kube.clusters_file,
                    &[],
                    "PROPAGATION_LOG",
                );
                let (dns, admin) = (
                    listening_addr(&line, "dns="),
                    listening_addr(&line, "admin="),
                );
                while !admin_ready(admin) {
                    assert!(Instant::now() < deadline, "server not ready in time");
                    std::thread::sleep(Duration::from_millis(5));
                }
                (Running::Process(child), dns)
            }
            Mode::InProcess => {
                let server = rt.block_on(common::start_in_process(
                    &local_kubeconfig,
                    &kube.clusters_file,
                    |_, _| None,
                ));
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
        rss.synced(match &running {
            Running::Process(child) => Some(child),
            Running::InProcess(_) => None,
        });

        let ks = first..first + changes;
        let mut m = run_changes(&rt, &clients, &kube.sim, &mut dns, &mut ips, 0, ks);
        first += changes;
        rss.after();

        let what = format!(
            "{clusters} clusters x {services} services x {endpoints} endpoints, {changes} changes"
        );
        let rss = rss.text(mode, "", " to synced");
        println!(
            "propagation: {what}: {}, timeouts {}; {rss}; load {:.2} s",
            common::p50_p99_max(&m.latency),
            m.timeouts,
            load_time.as_secs_f64()
        );
        let how = common::how(mode, binary.as_deref());
        println!(
            "  server ({how}): ready after {:.2} s, every cluster answering after {:.2} s",
            ready_time.as_secs_f64(),
            answering_time.as_secs_f64()
        );
        print_breakdown(&mut m, changes);

        match running {
            Running::Process(child) => drop(child),
            Running::InProcess(server) => rt.block_on(server.stop()),
        }
        if !bench {
            assert_eq!(m.timeouts, 0, "every change reached DNS within 5 s");
        }
    }
}
