//! What the `propagation` and `fleet` benches share to measure propagation: the per-cluster
//! query names, waiting for an answer, and one run of sequential remote changes, each timed from
//! the write to the first DNS answer holding the new IP, with its breakdown table.
//!
//! Each bench includes it with `#[path = "common/changes.rs"] mod changes;` (after `common` and
//! `dns`).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::rr::Name;
use kube::Client;

use crate::common::{CHANGE_TIMEOUT, Kube, NS, RemoteChange, remote_name, table_head, table_row};
use crate::dns::Dns;

/// Pause between two polls of one change.
pub(crate) const POLL_GAP: Duration = Duration::from_micros(100);

pub(crate) fn qname(s: usize, c: usize) -> Name {
    Name::from_ascii(format!(
        "svc-{s}-{}.{NS}.svc.clusterset.local.",
        remote_name(c)
    ))
    .expect("query name")
}

/// Waits until service `s` of remote cluster `c` answers exactly `ips` (in any order).
pub(crate) fn wait_answer(dns: &mut Dns, c: usize, s: usize, ips: &[Ipv4Addr], deadline: Instant) {
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

/// Waits until the last service of every remote cluster from `from` on answers with its full
/// endpoint set (the clusters before `from` are not linked).
pub(crate) fn wait_answers(
    dns: &mut Dns,
    ips: &[Vec<Vec<Ipv4Addr>>],
    from: usize,
    deadline: Instant,
) {
    for (c, services) in ips.iter().enumerate().skip(from) {
        let s = services.len() - 1;
        wait_answer(dns, c, s, &services[s], deadline);
    }
}

/// What one run of changes measured.
pub(crate) struct Measured {
    /// Write sent → first answer with the new IP.
    pub(crate) latency: Vec<Duration>,
    /// Write sent → the API call returned.
    pub(crate) write: Vec<Duration>,
    /// Write sent → kubesim committed it.
    pub(crate) to_commit: Vec<Duration>,
    /// Commit → first answer with the new IP.
    pub(crate) from_commit: Vec<Duration>,
    /// Queries sent.
    pub(crate) polls: u64,
    pub(crate) timeouts: usize,
}

/// Runs the changes numbered `ks`, round-robin over remote clusters `skip..` and their services
/// (every run takes numbers never used before, so it puts in IPs never used before); the
/// clusters before `skip` are not changed here.
pub(crate) fn run_changes(
    rt: &tokio::runtime::Runtime,
    clients: &[Client],
    kube: &Kube,
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
            let mut rx = kube.remote(c).subscribe();
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
pub(crate) fn print_breakdown(m: &mut Measured, changes: usize) {
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
