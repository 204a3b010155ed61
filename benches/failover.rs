//! Failover: how long a linked cluster that goes away stays in the federated answer, measured
//! against the setting that bounds it. One kubesim (plain HTTP on loopback, in this process)
//! serves a `local` cluster and three remote clusters `c1`, `c2`, `c3`, each with `svc-0` … of
//! flat-mode Services that are also federated members (`mirror.linkerd.io/federated=member`),
//! one EndpointSlice of ready endpoints each, so `svc-0-federated` answers the union of the
//! three clusters' `svc-0` endpoints. `c3` is declared in the clusters file with a gateway
//! (`127.0.0.1`, port 4143) whose liveness probe is `GET /ready` on a loopback port this bench
//! serves (an HTTP responder it starts and stops), and exports one gateway-mode Service `gw`
//! (`mirror.linkerd.io/exported=true`). The server binary runs with `--federated-grace`
//! (`FAILOVER_GRACE_MS`, 2000).
//!
//! The rule (docs/architecture.md, decision 5, `src/model/entry.rs` `federation_eligible`): a federated name
//! leaves a member cluster out while its gateway probe says dead (after `failureThreshold`
//! consecutive failures, `src/source/probe.rs`) or once its watch has been broken for longer than
//! the grace (judged by the server's 1 s clock tick); per-cluster names are never
//! health-filtered.
//!
//! - **(a) API server lost**: `c1`'s kubesim listener stops (new connections refused, open
//!   watches cut). Measured from just before the stop to the first UDP answer of
//!   `svc-0-federated` without `c1`'s endpoints (and with all of `c2`'s and `c3`'s); also when
//!   `/debug/clusters` first shows `c1` broken. Printed next to the grace; the bound is detection
//!   + grace + one tick (1 s). Then `c1` restarts, and the time until it is back in the answer.
//! - **(b) gateway probe failing**: the responder's listener closes (probes get connection
//!   refused). Measured from just before the close to the first answer without `c3`'s
//!   endpoints; also when `/debug/clusters` first shows `c3`'s probe dead. Printed next to
//!   period × failureThreshold (`FAILOVER_PROBE_PERIOD_MS`, 1000, × `FAILOVER_PROBE_THRESHOLD`,
//!   3; the probe adds up to 10 % jitter to each period). `gw-c3` (a per-cluster gateway-mode
//!   name) must still answer the gateway address. Then the responder listens again on the same
//!   port, and the time until `c3` is back.
//!
//! While waiting, the federated name is queried every millisecond (one query in flight, 200 ms
//! per query at most) and `/debug/clusters` every 20 ms; every answer must be either the full
//! union or the union without the cluster that went away (any other answer is counted as wrong).
//! Each wait is bounded (grace + `FAILOVER_TIMEOUT_MS`, 30,000).
//!
//! Prints a table (measured vs bound) and `RESULT failover …` lines. `cargo bench --bench
//! failover` runs it with the settings above (5 services of 4 endpoints per cluster: the queries
//! carry no EDNS, so the union must fit 512 octets); `cargo
//! test --bench failover` runs a smoke version (grace 500 ms, probe every 100 ms, threshold 2; 2
//! services of 3 endpoints) that asserts no wrong answer, no timeout, that `c1` is left out no
//! sooner than the grace and no later than noticed + grace + tick + 2 s, that `c3` is left out
//! no sooner than (threshold − 1) periods and no later than 1.1 × period × threshold + 2 s, and
//! that `gw-c3` keeps answering the gateway address (about 2 s in all). `FAILOVER_SERVICES` and `FAILOVER_ENDPOINTS` set the sizes, `FAILOVER_TLS=1`
//! serves kubesim over HTTPS, and `FAILOVER_LOG` is the server's `RUST_LOG` (default `warn`: the
//! server's own warnings about the lost watch and the dead gateway show on stderr).

// This bench takes common's kubesim setup and server start, not its latency and RSS reporting
// or its remote changes.
#[allow(dead_code)]
#[path = "common/mod.rs"]
mod common;
#[path = "common/dns.rs"]
mod dns;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use common::{Kube, NS, flag, listening_addr, size};
use dns::{Dns, admin_get, admin_ready};

/// The remote clusters: `c1` loses its API server, `c3` its gateway probe.
const CLUSTERS: usize = 3;
/// Most A records in the federated answer: they must fit a UDP answer without EDNS (512 octets).
const MAX_UNION: usize = 24;
/// The gateway address and port declared for `c3`.
const GATEWAY: Ipv4Addr = Ipv4Addr::LOCALHOST;
const GATEWAY_PORT: u16 = 4143;
/// The server's clock tick, which judges the grace (`src/runtime.rs`).
const TICK: Duration = Duration::from_secs(1);
/// Longest wait for the server to be ready and answer.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between two DNS polls, and between two `/debug/clusters` polls.
const DNS_GAP: Duration = Duration::from_millis(1);
const ADMIN_GAP: Duration = Duration::from_millis(20);
/// Most polls of one wait (with the gaps above, far beyond any timeout used).
const MAX_POLLS: usize = 1 << 20;

/// The settings of a run.
#[derive(Debug, Clone, Copy)]
struct Settings {
    services: usize,
    endpoints: usize,
    grace: Duration,
    period: Duration,
    threshold: u32,
    /// Longest wait for one transition.
    timeout: Duration,
}

impl Settings {
    fn from_env(bench: bool) -> Self {
        let ms = |var, full, smoke| Duration::from_millis(size(var, full, smoke, bench) as u64);
        let grace = ms("FAILOVER_GRACE_MS", 2000, 500);
        let s = Settings {
            services: size("FAILOVER_SERVICES", 5, 2, bench),
            endpoints: size("FAILOVER_ENDPOINTS", 4, 3, bench),
            grace,
            period: ms("FAILOVER_PROBE_PERIOD_MS", 1000, 100),
            threshold: u32::try_from(size("FAILOVER_PROBE_THRESHOLD", 3, 2, bench))
                .expect("threshold"),
            timeout: grace + ms("FAILOVER_TIMEOUT_MS", 30_000, 30_000),
        };
        assert!(s.services >= 1 && s.endpoints >= 1 && s.threshold >= 1);
        // The bench's queries carry no EDNS: the union must fit a 512-octet answer, or it is
        // truncated (TC, no records).
        assert!(
            CLUSTERS * s.endpoints <= MAX_UNION,
            "FAILOVER_ENDPOINTS: at most {} (the union must fit 512 octets)",
            MAX_UNION / CLUSTERS
        );
        s
    }

    /// period × failureThreshold.
    fn probe_bound(&self) -> Duration {
        self.period * self.threshold
    }
}

/// The gateway's probe endpoint: answers every request `200 OK` until stopped, which closes
/// its listener (new probes are refused).
struct Responder {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Responder {
    /// Listens on `addr` (port 0: any free port).
    fn start(rt: &tokio::runtime::Runtime, addr: SocketAddr) -> Self {
        let listener = rt
            .block_on(TcpListener::bind(addr))
            .expect("bind the probe responder");
        let addr = listener.local_addr().expect("responder address");
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = rt.spawn(async move {
            loop {
                let conn = tokio::select! {
                    () = token.cancelled() => break,
                    c = listener.accept() => c,
                };
                let Ok((mut conn, _)) = conn else { continue };
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    // The probe sends one small request; read it (bounded), then answer.
                    let _ = tokio::time::timeout(Duration::from_secs(1), conn.read(&mut buf)).await;
                    let _ = conn
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                        )
                        .await;
                });
            }
            // The listener drops here: connections are refused from now on.
        });
        Responder { addr, stop, task }
    }

    /// Closes the listener, and returns once it is closed.
    fn stop(self, rt: &tokio::runtime::Runtime) {
        self.stop.cancel();
        rt.block_on(self.task).expect("responder task");
    }
}

/// The clusters file: `c1` and `c2` plain, `c3` with a declared gateway probed on `probe_port`.
fn clusters_file(dir: &Path, kube: &Kube, s: &Settings, probe_port: u16) -> PathBuf {
    let path = dir.join("clusters.yaml");
    let mut text = String::new();
    for (c, r) in kube.remotes().iter().enumerate() {
        text.push_str(&format!(
            "- name: {}\n  kubeconfig: {}\n",
            r.name,
            r.kubeconfig_path().display()
        ));
        if c == 2 {
            text.push_str(&format!(
                "  gateway:\n    addresses: [{GATEWAY}]\n    port: {GATEWAY_PORT}\n    probe: {{path: /ready, port: {probe_port}, period: {}ms, timeout: 1s, failureThreshold: {}}}\n",
                s.period.as_millis(),
                s.threshold
            ));
        }
    }
    std::fs::write(&path, text).expect("clusters file");
    path
}

/// The gateway-mode Service `gw` of a remote cluster.
async fn create_gateway_service(client: kube::Client) {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "gw", "namespace": NS, "labels": {"mirror.linkerd.io/exported": "true"}},
        "spec": {"ports": [{"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}]},
    }))
    .expect("service");
    Api::<Service>::namespaced(client, NS)
        .create(&PostParams::default(), &svc)
        .await
        .expect("create gw");
}

fn name(text: &str) -> Name {
    Name::from_ascii(format!("{text}.{NS}.svc.clusterset.local.")).expect("name")
}

/// One cluster's entry in `/debug/clusters`.
fn debug_cluster(admin: SocketAddr, cluster: &str) -> Option<Value> {
    let body = admin_get(admin, "/debug/clusters")?;
    let doc: Value = serde_json::from_str(&body).ok()?;
    doc["clusters"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == cluster)
        .cloned()
}

/// What one wait saw.
#[derive(Debug, Default)]
struct Observed {
    /// From the start to the first answer equal to the target.
    answer: Option<Duration>,
    /// From the start to the first `/debug/clusters` entry meeting the admin condition.
    admin: Option<Duration>,
    /// Answers neither the target nor the answer before.
    wrong: Vec<Vec<Ipv4Addr>>,
    /// DNS queries sent.
    polls: usize,
}

/// A transition to watch for: the federated answer going from `from` to `to`, and the cluster
/// `cluster` meeting `admin_done` in `/debug/clusters`.
struct Transition<'a> {
    from: &'a BTreeSet<Ipv4Addr>,
    to: &'a BTreeSet<Ipv4Addr>,
    cluster: &'a str,
    admin_done: fn(&Value) -> bool,
}

/// Polls `fed` until it answers `t.to` (and the admin condition was seen, or the answer has
/// been stable for a while), from `start`, at most `timeout`.
fn observe(
    dns: &mut Dns,
    admin: SocketAddr,
    fed: &Name,
    t: &Transition<'_>,
    start: Instant,
    timeout: Duration,
) -> Observed {
    let mut o = Observed::default();
    let deadline = start + timeout;
    let mut next_admin = start;
    while o.polls < MAX_POLLS && Instant::now() < deadline {
        if o.admin.is_none() && Instant::now() >= next_admin {
            if debug_cluster(admin, t.cluster).is_some_and(|c| (t.admin_done)(&c)) {
                o.admin = Some(start.elapsed());
            }
            next_admin = Instant::now() + ADMIN_GAP;
        }
        o.polls += 1;
        if let Some(got) = dns.a(fed) {
            let at = start.elapsed();
            let got_set: BTreeSet<Ipv4Addr> = got.iter().copied().collect();
            if got_set == *t.to {
                o.answer.get_or_insert(at);
            } else if got_set != *t.from && o.wrong.len() < 10 {
                o.wrong.push(got);
            }
        }
        // Done once the answer moved and the admin side was seen (or 2 s later without it).
        if let Some(a) = o.answer
            && (o.admin.is_some() || start.elapsed() > a + Duration::from_secs(2))
        {
            break;
        }
        std::thread::sleep(DNS_GAP);
    }
    o
}

fn main() {
    let bench = common::bench_mode();
    let s = Settings::from_env(bench);
    let tls = flag("FAILOVER_TLS");
    let (binary, _, rt) = common::setup("failover", "FAILOVER_IN_PROCESS", bench);
    let binary =
        binary.expect("the failover bench needs the clusterset-dns binary (cargo builds it)");
    let _entered = rt.enter();
    let kube = Kube::start(&rt, CLUSTERS, tls, false);
    let ips = common::initial_ips(CLUSTERS, s.services, s.endpoints);
    let clients = rt.block_on(common::clients(&kube.remotes()));
    rt.block_on(common::load(&clients, &ips, |_| true));
    rt.block_on(create_gateway_service(clients[2].clone()));
    let responder = Responder::start(&rt, SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
    let dir = tempfile::tempdir().expect("tempdir");
    let file = clusters_file(dir.path(), &kube, &s, responder.addr.port());
    let grace = format!("{}ms", s.grace.as_millis());
    let kubeconfig = kube.local().kubeconfig_path().to_owned();
    let started = Instant::now();
    let (child, line) = common::start_process(
        &binary,
        &kubeconfig,
        &file,
        // The gateway and its probe target are on loopback, which no
        // cluster may claim unless exempted.
        &[
            "--federated-grace",
            &grace,
            "--exempt-addresses",
            "127.0.0.0/8",
        ],
        "FAILOVER_LOG",
    );
    let run = Run {
        rt: &rt,
        kube: &kube,
        s,
        admin: listening_addr(&line, "admin="),
        dns: Dns::new(listening_addr(&line, "dns=")),
        ips: &ips,
    };
    let report = run.measure(started, responder);
    drop(child);
    report.print(&s);
    if !bench {
        report.check(&s);
    }
}

/// The running server and what the bench knows of the clusters.
struct Run<'a> {
    rt: &'a tokio::runtime::Runtime,
    kube: &'a Kube,
    s: Settings,
    admin: SocketAddr,
    dns: Dns,
    /// `ips[c][s]`: the endpoint IPs of service `s` in cluster `c`.
    ips: &'a [Vec<Vec<Ipv4Addr>>],
}

/// What the run measured.
struct Report {
    /// Server start → `/ready`.
    ready: Duration,
    /// (a): `c1`'s API server stopped, then started again.
    api_lost: Observed,
    api_back: Observed,
    /// (b): `c3`'s probe target closed, then listening again.
    probe_dead: Observed,
    probe_back: Observed,
    /// `gw-c3` before and after `c3`'s probe failed.
    gateway_name: (Vec<Ipv4Addr>, Vec<Ipv4Addr>),
}

impl Run<'_> {
    /// `svc-0`'s endpoints in every cluster but `without`.
    fn union(&self, without: Option<usize>) -> BTreeSet<Ipv4Addr> {
        (0..CLUSTERS)
            .filter(|&c| Some(c) != without)
            .flat_map(|c| self.ips[c][0].iter().copied())
            .collect()
    }

    /// Waits until the server is ready, `svc-0-federated` answers every cluster and `c3`'s
    /// probe says alive; returns the time from `started` to ready.
    fn wait_ready(&mut self, started: Instant, fed: &Name) -> Duration {
        let deadline = started + SYNC_TIMEOUT;
        while !admin_ready(self.admin) {
            assert!(Instant::now() < deadline, "server not ready in time");
            std::thread::sleep(Duration::from_millis(5));
        }
        let ready = started.elapsed();
        let all = self.union(None);
        loop {
            let answer: Option<BTreeSet<Ipv4Addr>> =
                self.dns.a(fed).map(|v| v.into_iter().collect());
            let alive =
                debug_cluster(self.admin, "c3").is_some_and(|c| c["gatewayProbe"]["alive"] == true);
            if answer.as_ref() == Some(&all) && alive {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "svc-0-federated did not answer {all:?} (got {answer:?}), or c3's probe is not alive"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        ready
    }

    /// Runs (a) and (b); `responder` is `c3`'s probe target.
    fn measure(mut self, started: Instant, responder: Responder) -> Report {
        let fed = name("svc-0-federated");
        let ready = self.wait_ready(started, &fed);
        let (all, no_c1, no_c3) = (self.union(None), self.union(Some(0)), self.union(Some(2)));
        let (rt, timeout, c1) = (self.rt, self.s.timeout, self.kube.remote(0));

        let t = |from, to, cluster, admin_done| Transition {
            from,
            to,
            cluster,
            admin_done,
        };
        let start = Instant::now();
        c1.stop();
        let broken: fn(&Value) -> bool = |c| c["state"] == "broken";
        let api_lost = observe(
            &mut self.dns,
            self.admin,
            &fed,
            &t(&all, &no_c1, "c1", broken),
            start,
            timeout,
        );
        let start = Instant::now();
        rt.block_on(c1.restart()).expect("restart c1");
        let synced: fn(&Value) -> bool = |c| c["state"] == "synced";
        let api_back = observe(
            &mut self.dns,
            self.admin,
            &fed,
            &t(&no_c1, &all, "c1", synced),
            start,
            timeout,
        );

        let gw = name("gw-c3");
        let before = self.dns.a(&gw).unwrap_or_default();
        let addr = responder.addr;
        let start = Instant::now();
        responder.stop(rt);
        let dead: fn(&Value) -> bool = |c| c["gatewayProbe"]["alive"] == false;
        let probe_dead = observe(
            &mut self.dns,
            self.admin,
            &fed,
            &t(&all, &no_c3, "c3", dead),
            start,
            timeout,
        );
        let after = self.dns.a(&gw).unwrap_or_default();
        let start = Instant::now();
        let responder = Responder::start(rt, addr);
        let alive: fn(&Value) -> bool = |c| c["gatewayProbe"]["alive"] == true;
        let probe_back = observe(
            &mut self.dns,
            self.admin,
            &fed,
            &t(&no_c3, &all, "c3", alive),
            start,
            timeout,
        );
        responder.stop(rt);
        Report {
            ready,
            api_lost,
            api_back,
            probe_dead,
            probe_back,
            gateway_name: (before, after),
        }
    }
}

/// A duration in seconds, or `timeout`.
fn secs(d: Option<Duration>) -> String {
    d.map_or_else(
        || "timeout".to_owned(),
        |d| format!("{:.3} s", d.as_secs_f64()),
    )
}

fn millis(d: Option<Duration>) -> String {
    d.map_or_else(
        || "none".to_owned(),
        |d| format!("{:.1}", d.as_secs_f64() * 1e3),
    )
}

impl Report {
    fn print(&self, s: &Settings) {
        println!(
            "failover: {CLUSTERS} clusters x {} services x {} endpoints, every service a federated member; server ready after {:.2} s; --federated-grace {} ms; c3's gateway probe every {} ms, dead after {} failures",
            s.services,
            s.endpoints,
            self.ready.as_secs_f64(),
            s.grace.as_millis(),
            s.period.as_millis(),
            s.threshold
        );
        println!(
            "  | event | cluster out of (back in) svc-0-federated after | server noticed (/debug/clusters) after | bound / setting |"
        );
        println!("  |---|---|---|---|");
        let (a, b) = (&self.api_lost, &self.probe_dead);
        let after_notice = |o: &Observed| match (o.answer, o.admin) {
            (Some(x), Some(n)) => format!("{:.3} s", x.saturating_sub(n).as_secs_f64()),
            _ => "-".to_owned(),
        };
        println!(
            "  | (a) c1's API server stopped | {} | {} (broken); answer changed {} later | grace {:.3} s; bound: noticed + grace + one {} s tick |",
            secs(a.answer),
            secs(a.admin),
            after_notice(a),
            s.grace.as_secs_f64(),
            TICK.as_secs()
        );
        println!(
            "  | (a) c1's API server started again | {} | {} (synced) | kube-rs watcher reconnect backoff |",
            secs(self.api_back.answer),
            secs(self.api_back.admin)
        );
        println!(
            "  | (b) c3's probe target closed | {} | {} (probe dead) | period × failureThreshold = {:.3} s (each period up to +10 % jitter) |",
            secs(b.answer),
            secs(b.admin),
            s.probe_bound().as_secs_f64()
        );
        println!(
            "  | (b) c3's probe target listening again | {} | {} (probe alive) | one period {:.3} s (+10 %) |",
            secs(self.probe_back.answer),
            secs(self.probe_back.admin),
            s.period.as_secs_f64()
        );
        let all = [a, &self.api_back, b, &self.probe_back];
        println!(
            "  gw-c3 (c3's gateway-mode per-cluster name) answered {:?} before c3's probe failed and {:?} after (per-cluster names are not health-filtered); {} DNS queries, {} unexpected answers",
            self.gateway_name.0,
            self.gateway_name.1,
            all.iter().map(|o| o.polls).sum::<usize>(),
            all.iter().map(|o| o.wrong.len()).sum::<usize>(),
        );
        self.print_results(s);
    }

    fn print_results(&self, s: &Settings) {
        let grace = s.grace.as_secs_f64() * 1e3;
        let tick = TICK.as_secs_f64() * 1e3;
        let (a, b) = (&self.api_lost, &self.probe_dead);
        println!(
            "RESULT failover event=api_lost cluster=c1 out_ms={} noticed_ms={} grace_ms={grace:.0} tick_ms={tick:.0} wrong={}",
            millis(a.answer),
            millis(a.admin),
            a.wrong.len()
        );
        println!(
            "RESULT failover event=api_back cluster=c1 in_ms={} synced_ms={} wrong={}",
            millis(self.api_back.answer),
            millis(self.api_back.admin),
            self.api_back.wrong.len()
        );
        println!(
            "RESULT failover event=probe_failed cluster=c3 out_ms={} dead_ms={} period_ms={} failure_threshold={} bound_ms={} wrong={}",
            millis(b.answer),
            millis(b.admin),
            s.period.as_millis(),
            s.threshold,
            s.probe_bound().as_millis(),
            b.wrong.len()
        );
        println!(
            "RESULT failover event=probe_back cluster=c3 in_ms={} alive_ms={} period_ms={} wrong={}",
            millis(self.probe_back.answer),
            millis(self.probe_back.admin),
            s.period.as_millis(),
            self.probe_back.wrong.len()
        );
    }

    /// The smoke run's assertions.
    fn check(&self, s: &Settings) {
        let slack = Duration::from_secs(2);
        for (what, o) in [
            ("c1 left out", &self.api_lost),
            ("c1 back", &self.api_back),
            ("c3 left out", &self.probe_dead),
            ("c3 back", &self.probe_back),
        ] {
            assert!(
                o.answer.is_some(),
                "{what}: no such answer within {:?}",
                s.timeout
            );
            assert!(o.admin.is_some(), "{what}: /debug/clusters never showed it");
            assert!(
                o.wrong.is_empty(),
                "{what}: unexpected answers {:?}",
                o.wrong
            );
        }
        let (a, b) = (&self.api_lost, &self.probe_dead);
        let (out_a, noticed) = (a.answer.unwrap_or_default(), a.admin.unwrap_or_default());
        assert!(
            out_a >= s.grace,
            "c1 left out after {out_a:?}, before the grace {:?}",
            s.grace
        );
        assert!(
            out_a <= noticed + s.grace + TICK + slack,
            "c1 left out after {out_a:?}: later than noticed {noticed:?} + grace + tick + {slack:?}"
        );
        let out_b = b.answer.unwrap_or_default();
        let least = s.period * (s.threshold - 1);
        assert!(
            out_b >= least,
            "c3 left out after {out_b:?}, before (threshold − 1) periods {least:?}"
        );
        assert!(
            out_b <= s.probe_bound() + s.probe_bound() / 10 + slack,
            "c3 left out after {out_b:?}"
        );
        let gw = vec![GATEWAY];
        assert_eq!(
            self.gateway_name,
            (gw.clone(), gw),
            "gw-c3 answers the gateway address throughout"
        );
    }
}
