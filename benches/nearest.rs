//! Nearest failover: how long `<svc>-nearest` takes to move to the next tier once the last
//! local pod goes unready, and back once it is ready again. One kubesim (plain HTTP on loopback,
//! in this process) serves a `local` cluster and remote clusters `c1`, `c2` (`NEAREST_REMOTES`,
//! 2), each with one flat-mode Service `svc-0` that is also a federated member
//! (`mirror.linkerd.io/federated=member`) and one EndpointSlice of `NEAREST_ENDPOINTS` ready
//! endpoints. The server binary runs in live mode, linked to the remotes by a clusters file. No
//! places are configured (the clusters file has no `region` key yet), so the local cluster is
//! tier 0 and every remote is tier 2, "the rest" (docs/locality.md): `svc-0-nearest` answers the
//! local endpoints while any is ready, else the union of the remotes' endpoints.
//!
//! Each round (`NEAREST_ROUNDS`):
//!
//! - **failover**: one JSON merge patch of the local slice's `endpoints`, every endpoint
//!   `ready: false, serving: false` (the pods are still there, unready). Measured from just
//!   before the write is sent to the first UDP answer of `svc-0-nearest` that is exactly the
//!   remotes' endpoints.
//! - **fail-back**: the same patch with every endpoint ready again, measured to the first answer
//!   that is exactly the local endpoints.
//!
//! Both are also split at kubesim's commit (from an in-process subscriber to the local
//! cluster's store), so what is kubesim's and what is the server's shows. The name is queried
//! every `NEAREST_POLL_US` (1,000 µs) with one query in flight (200 ms per query at most),
//! which bounds the figures' resolution; once the new answer is seen it is polled for
//! `NEAREST_HOLD_MS` (10 ms) more, and must not change. Every answer seen must be either the
//! local set or the remote set: anything else (an empty answer, the federated union, a
//! partial set, or a flap during the hold) is counted as wrong. Each wait is bounded by
//! `NEAREST_TIMEOUT_MS` (10,000) and by a poll count; a transition not seen by then is a
//! timeout. At the end `clusterset_dns_nearest_fail_open_total` is read from `/metrics`: no
//! tier ever lacked a ready endpoint, so it must be 0.
//!
//! Prints a latency table (p50 / p99 / max) and `RESULT nearest …` lines. `cargo bench --bench
//! nearest` runs 50 rounds of 3 endpoints per cluster; `cargo test --bench nearest` runs a
//! smoke version (5 rounds of 2 endpoints, about a second) that asserts every transition was
//! seen, no wrong answer, and no fail-open answer. `NEAREST_LOG` is the server's `RUST_LOG`
//! (default `warn`).

// This bench takes common's kubesim setup, load and server start, and its percentiles; not its
// RSS reporting or remote changes.
#[allow(dead_code)]
#[path = "common/mod.rs"]
mod common;
#[path = "common/dns.rs"]
mod dns;

use std::collections::{BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::rr::Name;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use common::{Kube, NS, listening_addr, percentile, size, table_head, table_row};
use dns::{Dns, admin_get, admin_ready};

/// The local slice of `svc-0`, as `common::load` names it.
const SLICE: &str = "svc-0-abcde";
/// Most A records in one answer (the federated union is the largest): the queries carry no
/// EDNS, so an answer must fit 512 octets.
const MAX_ANSWER: usize = 24;
/// Longest wait for the server to be ready and answer the local endpoints.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
/// Most polls of one wait (with a gap of at least one microsecond and a 200 ms query timeout,
/// the time bound ends every wait long before).
const MAX_POLLS: usize = 1 << 20;
/// Wrong answers kept for the report (all are counted).
const KEEP_WRONG: usize = 10;
/// Longest wait for kubesim's commit time of a write to reach the recorder.
const COMMIT_WAIT: Duration = Duration::from_secs(1);

/// The settings of a run.
#[derive(Debug, Clone, Copy)]
struct Settings {
    rounds: usize,
    remotes: usize,
    endpoints: usize,
    /// Pause between two polls.
    gap: Duration,
    /// How long a new answer must then stay.
    hold: Duration,
    /// Longest wait for one transition.
    timeout: Duration,
}

impl Settings {
    fn from_env(bench: bool) -> Self {
        let s = Settings {
            rounds: size("NEAREST_ROUNDS", 50, 5, bench),
            remotes: size("NEAREST_REMOTES", 2, 2, bench),
            endpoints: size("NEAREST_ENDPOINTS", 3, 2, bench),
            gap: Duration::from_micros(size("NEAREST_POLL_US", 1000, 1000, bench) as u64),
            hold: Duration::from_millis(size("NEAREST_HOLD_MS", 10, 10, bench) as u64),
            timeout: Duration::from_millis(size("NEAREST_TIMEOUT_MS", 10_000, 10_000, bench) as u64),
        };
        assert!(s.rounds >= 1 && s.remotes >= 1 && s.endpoints >= 1);
        assert!(
            (1 + s.remotes) * s.endpoints <= MAX_ANSWER,
            "(1 + NEAREST_REMOTES) × NEAREST_ENDPOINTS: at most {MAX_ANSWER} (the federated union must fit 512 octets)"
        );
        s
    }
}

/// The local slice's `endpoints`, every one ready or every one not, as a JSON merge patch (it
/// replaces the whole list, the same endpoints `common::load` created, only their conditions
/// changed).
fn endpoints_patch(ips: &[Ipv4Addr], ready: bool) -> Value {
    let endpoints: Vec<Value> = ips
        .iter()
        .enumerate()
        .map(|(e, ip)| {
            json!({
                "addresses": [ip.to_string()],
                "conditions": {"ready": ready, "serving": ready, "terminating": false},
                "nodeName": format!("node-{}", e % 3),
                "targetRef": {"kind": "Pod", "namespace": NS, "name": format!("svc-0-pod-{e}")},
            })
        })
        .collect();
    json!({ "endpoints": endpoints })
}

fn name(text: &str) -> Name {
    Name::from_ascii(format!("{text}.{NS}.svc.clusterset.local.")).expect("name")
}

/// One direction's samples.
#[derive(Debug, Default)]
struct Samples {
    /// Write sent → first answer equal to the target.
    latency: Vec<Duration>,
    /// Write sent → kubesim committed it.
    to_commit: Vec<Duration>,
    /// Commit → first answer equal to the target.
    from_commit: Vec<Duration>,
    /// Write sent → the patch call returned.
    write: Vec<Duration>,
    /// Transitions not seen in time.
    timeouts: usize,
}

/// What every wait saw, over the run.
#[derive(Debug, Default)]
struct Tally {
    polls: usize,
    /// Queries without a response in time.
    lost: usize,
    /// Answers neither the local nor the remote set (or a flap during the hold), counted.
    wrong: usize,
    /// The first `KEEP_WRONG` of them.
    examples: Vec<Vec<Ipv4Addr>>,
}

impl Tally {
    fn wrong(&mut self, got: Vec<Ipv4Addr>) {
        self.wrong += 1;
        if self.examples.len() < KEEP_WRONG {
            self.examples.push(got);
        }
    }
}

/// The running server and what the bench writes and expects.
struct Run<'a> {
    rt: &'a tokio::runtime::Runtime,
    s: Settings,
    dns: Dns,
    admin: SocketAddr,
    nearest: Name,
    /// The local slice.
    api: Api<EndpointSlice>,
    local_ips: Vec<Ipv4Addr>,
    local: BTreeSet<Ipv4Addr>,
    remote: BTreeSet<Ipv4Addr>,
    /// Commit time of each resourceVersion of the local cluster's store.
    commits: Arc<Mutex<HashMap<u64, Instant>>>,
    tally: Tally,
}

fn main() {
    let bench = common::bench_mode();
    let s = Settings::from_env(bench);
    let (binary, _, rt) = common::setup("nearest", "NEAREST_IN_PROCESS", bench);
    let binary =
        binary.expect("the nearest bench needs the clusterset-dns binary (cargo builds it)");
    let _entered = rt.enter();
    let kube = Kube::start(&rt, s.remotes, false, false);
    // Cluster 0 is the local one here: `load` takes any list of clusters, and `initial_ips`
    // gives each index addresses of its own.
    let ips = common::initial_ips(1 + s.remotes, 1, s.endpoints);
    let mut clusters = vec![kube.local()];
    clusters.extend(kube.remotes());
    let clients = rt.block_on(common::clients(&clusters));
    rt.block_on(common::load(&clients, &ips, |_| true));
    let kubeconfig = kube.local().kubeconfig_path().to_owned();
    let started = Instant::now();
    let (child, line) = common::start_process(
        &binary,
        &kubeconfig,
        &kube.clusters_file,
        &[],
        "NEAREST_LOG",
    );
    let commits = record_commits(&rt, &kube);
    let mut run = Run {
        rt: &rt,
        s,
        dns: Dns::new(listening_addr(&line, "dns=")),
        admin: listening_addr(&line, "admin="),
        nearest: name("svc-0-nearest"),
        api: Api::namespaced(clients[0].clone(), NS),
        local_ips: ips[0][0].clone(),
        local: ips[0][0].iter().copied().collect(),
        remote: ips[1..].iter().flat_map(|c| c[0].iter().copied()).collect(),
        commits,
        tally: Tally::default(),
    };
    let ready = run.wait_ready(started);
    let (mut failover, mut failback) = (Samples::default(), Samples::default());
    for _ in 0..s.rounds {
        run.step(false, &mut failover);
        run.step(true, &mut failback);
    }
    let fail_open = run.fail_open();
    drop(child);
    let mut report = Report {
        ready,
        failover,
        failback,
        tally: run.tally,
        fail_open,
    };
    report.print(&s);
    if !bench {
        report.check(&s);
    }
}

/// Records the commit time of every change to the local cluster's store, by resourceVersion.
/// The task ends with the runtime.
fn record_commits(rt: &tokio::runtime::Runtime, kube: &Kube) -> Arc<Mutex<HashMap<u64, Instant>>> {
    let commits: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let mut rx = kube.local().subscribe();
    let map = commits.clone();
    rt.spawn(async move {
        while let Ok(change) = rx.recv().await {
            let at = Instant::now();
            map.lock().expect("commits").insert(change.rv, at);
        }
    });
    commits
}

impl Run<'_> {
    /// Waits until the server is ready and `svc-0-nearest` answers the local endpoints; returns
    /// the time from `started` to ready.
    fn wait_ready(&mut self, started: Instant) -> Duration {
        let deadline = started + SYNC_TIMEOUT;
        while !admin_ready(self.admin) {
            assert!(Instant::now() < deadline, "server not ready in time");
            std::thread::sleep(Duration::from_millis(5));
        }
        let ready = started.elapsed();
        // Wait for the answers themselves too: the first failover needs the remotes' endpoints
        // in the index, and the first sample must start from the local answer.
        let federated = name("svc-0-federated");
        let union: BTreeSet<Ipv4Addr> = self.local.union(&self.remote).copied().collect();
        loop {
            let fed: Option<BTreeSet<Ipv4Addr>> =
                self.dns.a(&federated).map(|v| v.into_iter().collect());
            let near: Option<BTreeSet<Ipv4Addr>> =
                self.dns.a(&self.nearest).map(|v| v.into_iter().collect());
            if fed.as_ref() == Some(&union) && near.as_ref() == Some(&self.local) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "svc-0-federated did not answer {union:?} (got {fed:?}) or svc-0-nearest {:?} (got {near:?})",
                self.local
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        ready
    }

    /// One transition: the local endpoints made all unready (`ready` false, failover) or all
    /// ready again (fail-back), timed to the answer moving to the other set.
    fn step(&mut self, ready: bool, samples: &mut Samples) {
        let (from, to) = if ready {
            (self.remote.clone(), self.local.clone())
        } else {
            (self.local.clone(), self.remote.clone())
        };
        let patch = endpoints_patch(&self.local_ips, ready);
        let api = self.api.clone();
        let t0 = Instant::now();
        // The write runs on the runtime while this thread polls, so the first answers after
        // the commit are not held behind the API call's return.
        let write = self.rt.spawn(async move {
            let r = api
                .patch(SLICE, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            (r, t0.elapsed())
        });
        let seen = self.poll_until(&from, &to, t0);
        let (result, write_time) = self.rt.block_on(write).expect("write task");
        let patched = result.unwrap_or_else(|e| panic!("patch of the local slice {SLICE}: {e}"));
        samples.write.push(write_time);
        let Some(seen) = seen else {
            samples.timeouts += 1;
            return;
        };
        samples.latency.push(seen - t0);
        self.hold(&to, seen);
        let rv = patched
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(at) = rv.and_then(|rv| self.commit_time(rv)) {
            samples.to_commit.push(at.saturating_duration_since(t0));
            samples.from_commit.push(seen.saturating_duration_since(at));
        }
    }

    /// Polls `svc-0-nearest` until it answers exactly `to`; answers other than `from` are
    /// wrong. Returns when `to` was first seen, `None` after the timeout.
    fn poll_until(
        &mut self,
        from: &BTreeSet<Ipv4Addr>,
        to: &BTreeSet<Ipv4Addr>,
        t0: Instant,
    ) -> Option<Instant> {
        let deadline = t0 + self.s.timeout;
        let mut polls = 0;
        while polls < MAX_POLLS && Instant::now() < deadline {
            polls += 1;
            self.tally.polls += 1;
            match self.dns.a(&self.nearest) {
                None => self.tally.lost += 1,
                Some(got) => {
                    let at = Instant::now();
                    let set: BTreeSet<Ipv4Addr> = got.iter().copied().collect();
                    if set == *to {
                        return Some(at);
                    }
                    if set != *from {
                        self.tally.wrong(got);
                    }
                }
            }
            std::thread::sleep(self.s.gap);
        }
        None
    }

    /// Keeps polling for the hold after `seen`: the new answer must stay.
    fn hold(&mut self, to: &BTreeSet<Ipv4Addr>, seen: Instant) {
        let until = seen + self.s.hold;
        let mut polls = 0;
        while polls < MAX_POLLS && Instant::now() < until {
            polls += 1;
            self.tally.polls += 1;
            match self.dns.a(&self.nearest) {
                None => self.tally.lost += 1,
                Some(got) if got.iter().copied().collect::<BTreeSet<_>>() != *to => {
                    self.tally.wrong(got);
                }
                Some(_) => {}
            }
            std::thread::sleep(self.s.gap);
        }
    }

    /// When kubesim committed resourceVersion `rv`: the recorder runs on the runtime and may
    /// lag the write's return by a moment.
    fn commit_time(&self, rv: u64) -> Option<Instant> {
        let until = Instant::now() + COMMIT_WAIT;
        loop {
            if let Some(at) = self.commits.lock().expect("commits").get(&rv).copied() {
                return Some(at);
            }
            if Instant::now() > until {
                return None;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// `clusterset_dns_nearest_fail_open_total` from `/metrics` (0 when absent).
    fn fail_open(&self) -> u64 {
        let body = admin_get(self.admin, "/metrics").expect("GET /metrics");
        body.lines()
            .filter(|l| l.starts_with("clusterset_dns_nearest_fail_open_total"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }
}

/// What the run measured.
struct Report {
    /// Server start → `/ready`.
    ready: Duration,
    failover: Samples,
    failback: Samples,
    tally: Tally,
    /// Nearest answers that fell back to the federated union.
    fail_open: u64,
}

impl Report {
    fn print(&mut self, s: &Settings) {
        println!(
            "nearest: local + {} remote clusters (no places: the remotes are tier 2), svc-0 a federated member in each, {} endpoints per cluster; {} rounds, svc-0-nearest polled every {} µs; server ready after {:.2} s",
            s.remotes,
            s.endpoints,
            s.rounds,
            s.gap.as_micros(),
            self.ready.as_secs_f64()
        );
        table_head();
        let (f, b) = (&mut self.failover, &mut self.failback);
        table_row(
            "failover: local endpoints all unready (write sent) → remotes answered",
            &mut f.latency,
        );
        table_row("… kubesim commit → remotes answered", &mut f.from_commit);
        table_row("… write sent → kubesim commit", &mut f.to_commit);
        table_row(
            "fail-back: local endpoints ready (write sent) → local answered",
            &mut b.latency,
        );
        table_row("… kubesim commit → local answered", &mut b.from_commit);
        table_row("… write sent → kubesim commit", &mut b.to_commit);
        let mut writes: Vec<Duration> = f.write.iter().chain(&b.write).copied().collect();
        table_row("write sent → patch call returned", &mut writes);
        let t = &self.tally;
        println!(
            "  {} DNS queries, {} without a response in time, {} wrong answers {:?}; {} + {} timeouts; clusterset_dns_nearest_fail_open_total {}",
            t.polls, t.lost, t.wrong, t.examples, f.timeouts, b.timeouts, self.fail_open
        );
        for (event, x) in [("failover", &*f), ("failback", &*b)] {
            println!(
                "RESULT nearest event={event} p50_ms={} p99_ms={} max_ms={} commit_p50_ms={} commit_p99_ms={} samples={} timeouts={} poll_us={} remotes={} endpoints={}",
                msf(percentile(&x.latency, 0.5)),
                msf(percentile(&x.latency, 0.99)),
                msf(x.latency.last().copied().unwrap_or_default()),
                msf(percentile(&x.from_commit, 0.5)),
                msf(percentile(&x.from_commit, 0.99)),
                x.latency.len(),
                x.timeouts,
                s.gap.as_micros(),
                s.remotes,
                s.endpoints
            );
        }
        println!(
            "RESULT nearest event=all queries={} lost={} wrong={} fail_open={}",
            t.polls, t.lost, t.wrong, self.fail_open
        );
    }

    /// The smoke run's assertions.
    fn check(&self, s: &Settings) {
        for (what, x) in [("failover", &self.failover), ("fail-back", &self.failback)] {
            assert_eq!(
                x.timeouts, 0,
                "{what}: transitions not seen within {:?}",
                s.timeout
            );
            assert_eq!(x.latency.len(), s.rounds, "{what}: one sample per round");
        }
        assert_eq!(
            self.tally.wrong, 0,
            "answers neither the local nor the remote set: {:?}",
            self.tally.examples
        );
        assert_eq!(self.fail_open, 0, "a nearest answer fell back to the union");
    }
}

/// A duration in milliseconds, for the `RESULT` lines.
fn msf(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}
