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
//! Storm mode (`PROPAGATION_STORM=1`, at least 2 clusters): while one linked cluster rewrites
//! EndpointSlices as fast as kubesim takes them, is a change in another cluster still answered
//! within twice its quiet p99, and under 50 ms? Cluster 0 (`c1`) is the storm cluster; the
//! others are measured. Phase 1 (quiet) measures `PROPAGATION_CHANGES` changes in the measured
//! clusters as above. Phase 2 starts `PROPAGATION_STORM_WRITERS` (default 8) concurrent kube-rs
//! writers on `c1`, each rewriting its share of `c1`'s slices round-robin (the same merge patch
//! of `endpoints`, a new IP each time), the next write as soon as the previous one returns;
//! measures as many changes again in the measured clusters while they run; then stops them.
//! `c1`'s Services are exported like the others, so every storm write is a watch event at the
//! server. `c1` is served by a kubesim of its own on a runtime of its own, and the writers run
//! there too, its threads at `SCHED_IDLE` (they run only when a core is otherwise idle): a
//! linked cluster's API server is another machine, not a task beside the measured clusters' API
//! server. At nice 19 instead, on two shared cores, the storm's kubesim and writers slowed the
//! measured clusters' kubesim and the poller so much that the p99 tripled with `c1` not even
//! linked. `PROPAGATION_STORM_UNLINKED=1` is that control: the same storm with `c1` left out
//! of the server's clusters file, so what remains is the machine's share (bench only; no plain
//! run). A writer stops when told to, at a hard deadline (the change timeout × changes, plus
//! 30 s) or after 2^20 writes, whichever comes first; each of its writes is bounded by the change
//! timeout. Prints the two phases side by side (p50, p99, max, timeouts), the storm's writes and
//! rate, the ratio storm p99 / quiet p99 against the target, how long after the writers stopped
//! the server answered their last writes, the server's RSS before and after the storm, CPU in
//! each phase (the server's, this process's and the whole machine's, from `/proc`: the machine
//! is shared, so other work shows there), each phase's breakdown as above, and a
//! `RESULT storm key=value …` line.
//!
//! `cargo bench --bench propagation` runs the full size; `cargo test --bench propagation` runs a
//! small smoke version (both server modes, zero timeouts asserted), each followed by the storm
//! mode at the same small size (zero timeouts asserted, not the ratio; about 2 s in all). Sizes can be overridden with
//! `PROPAGATION_CLUSTERS`, `PROPAGATION_SERVICES`, `PROPAGATION_ENDPOINTS` and
//! `PROPAGATION_CHANGES`; `PROPAGATION_TLS=1` serves kubesim over HTTPS.

#[path = "common/changes.rs"]
mod changes;
#[path = "common/mod.rs"]
mod common;
#[path = "common/dns.rs"]
mod dns;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clusterset_dns::runtime::Server;
use kube::Client;

use changes::{Measured, print_breakdown, run_changes, wait_answer, wait_answers};
use common::{
    CHANGE_TIMEOUT, ChildGuard, Kube, LOAD_CONCURRENCY, Mode, RemoteChange, Rss, flag,
    listening_addr, mib, ms, percentile, remote_name, rss_of, size,
};
use dns::{Dns, admin_ready};

/// Longest wait for the server to start, sync and answer.
const SYNC_TIMEOUT: Duration = Duration::from_secs(120);

/// A running server.
enum Running {
    Process(ChildGuard),
    InProcess(Server),
}

/// Storm writes per writer, at most (each writer's loop is bounded in count as well as in time).
const STORM_MAX_WRITES: usize = 1 << 20;
/// The storm's change numbers are `services × round + service` from this number on, far above
/// any measured change's number, so no storm IP is ever a measured change's.
const STORM_K0: usize = 1 << 24;
/// Added to the change timeout × changes for the storm's hard deadline.
const STORM_MARGIN: Duration = Duration::from_secs(30);
/// Longest wait for one storm writer to stop once told to (its write in flight is bounded by the
/// change timeout).
const STORM_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What one storm writer did.
struct Written {
    /// Its services' slice IPs when it stopped: `(service, IPs)`.
    slices: Vec<(usize, Vec<Ipv4Addr>)>,
    /// The service it wrote last, if any.
    last: Option<usize>,
    /// Rounds over its services begun.
    rounds: usize,
    /// True when the deadline or the write limit ended it, not the stop.
    cut_short: bool,
}

/// One storm writer: rewrites the slices of `services` (in cluster 0, whose client `client`
/// is, and whose current IPs are `ips`) round-robin, one [`RemoteChange`] each (a merge patch
/// of `endpoints` with one new IP), the next as soon as the previous returns; until `stop`, the
/// deadline or `STORM_MAX_WRITES` writes. Every successful write is counted in `writes`.
async fn storm_writer(
    client: Client,
    mut ips: Vec<Vec<Ipv4Addr>>,
    services: Vec<usize>,
    round0: usize,
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    deadline: Instant,
) -> Result<Written, String> {
    let total = ips.len();
    let mut done = 0;
    let mut last = None;
    while !stop.load(Ordering::Relaxed) {
        if done >= STORM_MAX_WRITES || Instant::now() >= deadline {
            break;
        }
        let s = services[done % services.len()];
        let k = total * (round0 + done / services.len()) + s;
        let change =
            RemoteChange::new(k, std::slice::from_ref(&client), std::slice::from_ref(&ips));
        debug_assert_eq!((change.c, change.s), (0, s));
        match tokio::time::timeout(CHANGE_TIMEOUT, change.write()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(format!("storm patch of svc-{s} in {}: {e}", remote_name(0))),
            Err(_) => {
                return Err(format!(
                    "storm patch of svc-{s} in {}: no answer within {CHANGE_TIMEOUT:?}",
                    remote_name(0)
                ));
            }
        }
        ips[s] = change.next;
        last = Some(s);
        done += 1;
        writes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(Written {
        slices: services.iter().map(|&s| (s, ips[s].clone())).collect(),
        last,
        rounds: done.div_ceil(services.len()),
        cut_short: !stop.load(Ordering::Relaxed),
    })
}

/// The storm writers running against cluster 0.
struct Storm {
    stop: Arc<AtomicBool>,
    writes: Arc<AtomicU64>,
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<Result<Written, String>>>,
}

/// A stopped storm.
struct Stopped {
    written: Vec<Written>,
    /// Successful writes, in all.
    writes: u64,
    /// Writes done when the writers were told to stop, and how long they had run then.
    writes_at_stop: u64,
    elapsed: Duration,
}

impl Storm {
    /// Starts `writers` writers (at most one per service) on cluster 0, whose client is `client`
    /// and whose slices' current IPs are `ips`; writer `w` takes services `w`, `w + writers`, …
    fn start(
        rt: &tokio::runtime::Runtime,
        client: &Client,
        ips: &[Vec<Ipv4Addr>],
        writers: usize,
        round0: usize,
        deadline: Instant,
    ) -> Self {
        let writers = writers.min(ips.len());
        let stop = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicU64::new(0));
        let tasks = (0..writers)
            .map(|w| {
                rt.spawn(storm_writer(
                    client.clone(),
                    ips.to_vec(),
                    (w..ips.len()).step_by(writers).collect(),
                    round0,
                    stop.clone(),
                    writes.clone(),
                    deadline,
                ))
            })
            .collect();
        Storm {
            stop,
            writes,
            started: Instant::now(),
            tasks,
        }
    }

    fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Tells the writers to stop, waits for every one of them (a writer that does not stop in
    /// time is aborted, and so are the others if one failed: then this panics), and records each
    /// slice's last IPs in `ips`.
    fn stop(self, rt: &tokio::runtime::Runtime, ips: &mut [Vec<Ipv4Addr>]) -> Stopped {
        self.stop.store(true, Ordering::Relaxed);
        let (writes_at_stop, elapsed) = (self.writes(), self.started.elapsed());
        let aborts: Vec<_> = self
            .tasks
            .iter()
            .map(tokio::task::JoinHandle::abort_handle)
            .collect();
        let until = Instant::now() + STORM_STOP_TIMEOUT;
        let mut written = Vec::new();
        let mut failed = Vec::new();
        for task in self.tasks {
            let left = until.saturating_duration_since(Instant::now());
            match rt.block_on(tokio::time::timeout(left, task)) {
                Ok(Ok(Ok(w))) => written.push(w),
                Ok(Ok(Err(e))) => failed.push(e),
                Ok(Err(e)) => failed.push(format!("storm writer: {e}")),
                Err(_) => failed.push(format!(
                    "storm writer not stopped in {STORM_STOP_TIMEOUT:?}"
                )),
            }
        }
        for a in aborts {
            a.abort();
        }
        assert!(failed.is_empty(), "storm failed: {failed:?}");
        for w in &written {
            for (s, v) in &w.slices {
                ips[*s].clone_from(v);
            }
        }
        Stopped {
            written,
            writes: self.writes.load(Ordering::Relaxed),
            writes_at_stop,
            elapsed,
        }
    }
}

/// CPU time (user and system) a process has used, from `/proc/<pid>/stat` (`proc_dir` is
/// `/proc/<pid>`); zero if it cannot be read.
fn cpu_time(proc_dir: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("{proc_dir}/stat")).unwrap_or_default();
    // The fields after the command (which may hold spaces and parentheses), from field 3 on.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or_else(Vec::new, |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf only reads a configuration value.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100);
    // utime and stime are fields 14 and 15.
    Duration::from_secs_f64((ticks(11) + ticks(12)) as f64 / hz as f64)
}

/// The machine's CPU time so far, busy and in all (every core), from `/proc/stat`, in ticks.
fn machine_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .find_map(|l| l.strip_prefix("cpu "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    // user nice system idle iowait irq softirq steal …; guest time is in user already.
    let total: u64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// CPU used so far by the server, by this process (kubesim, the writers, the poller; the server
/// too when it runs in-process) and by the whole machine.
#[derive(Clone, Copy)]
struct Cpu {
    at: Instant,
    server: Duration,
    bench: Duration,
    /// Busy and all ticks of the machine.
    machine: (u64, u64),
}

/// CPU used in a phase, in percent of one core.
#[derive(Clone, Copy)]
struct CpuUse {
    server: f64,
    bench: f64,
    /// Every process on the machine (other work included): 100 × cores when saturated.
    machine: f64,
}

impl Cpu {
    fn now(server_proc: &str) -> Self {
        Cpu {
            at: Instant::now(),
            server: cpu_time(server_proc),
            bench: cpu_time("/proc/self"),
            machine: machine_ticks(),
        }
    }

    /// What was used from `start` to `self`.
    fn since(&self, start: &Cpu) -> CpuUse {
        let wall = self
            .at
            .saturating_duration_since(start.at)
            .as_secs_f64()
            .max(1e-9);
        let pct = |a: Duration, b: Duration| a.saturating_sub(b).as_secs_f64() / wall * 100.0;
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as f64;
        let (busy, total) = (
            self.machine.0.saturating_sub(start.machine.0),
            self.machine.1.saturating_sub(start.machine.1),
        );
        CpuUse {
            server: pct(self.server, start.server),
            bench: pct(self.bench, start.bench),
            machine: busy as f64 / total.max(1) as f64 * cores * 100.0,
        }
    }
}

/// p50, p99 and max of a sample (and sorts it).
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

/// The storm target: the storm's p99 is at most this many times the quiet p99 …
const STORM_RATIO_TARGET: f64 = 2.0;
/// … and under this.
const STORM_P99_TARGET: Duration = Duration::from_millis(50);

/// What a storm run needs besides the DNS client and the state it moves on.
struct StormRun<'a> {
    rt: &'a tokio::runtime::Runtime,
    clients: &'a [Client],
    kube: &'a Kube,
    /// The storm's writers run on `c1`'s own low-priority runtime, with
    /// this client of `c1` made there.
    storm_client: Client,
    mode: Mode,
    /// `/proc/<pid>` of the server; `/proc/self` in-process.
    server_proc: String,
    changes: usize,
    writers: usize,
    /// For the report: clusters x services x endpoints.
    sizes: (usize, usize, usize),
    /// The control: `c1` is not linked, so the server never sees the storm.
    unlinked: bool,
}

/// What a storm run measured.
struct StormReport {
    quiet: Measured,
    storm: Measured,
    stopped: Stopped,
    /// Writers told to stop → every writer's last write in a DNS answer.
    caught_up: Duration,
    /// The server's RSS before the storm, after it (writers stopped, server caught up), and
    /// its peak then.
    rss: (u64, u64, u64),
    /// CPU in the quiet and in the storm phase.
    cpu_quiet: CpuUse,
    cpu_storm: CpuUse,
}

impl StormRun<'_> {
    /// Phase 1: `changes` changes in clusters 1.. with nothing else going on; phase 2: as many
    /// while the writers rewrite cluster 0's slices. `first` is the next measured change's
    /// number and `round` the storm's next round; both move on.
    fn run(
        &self,
        dns: &mut Dns,
        ips: &mut [Vec<Vec<Ipv4Addr>>],
        first: &mut usize,
        round: &mut usize,
    ) -> StormReport {
        let (rt, clients, kube) = (self.rt, self.clients, self.kube);
        let storm_rt = kube.apart.as_ref().map_or(rt, |(_, apart)| apart);
        let mut next = |n: usize| {
            let ks = *first..*first + n;
            *first += n;
            assert!(
                *first < STORM_K0,
                "measured change numbers reach the storm's"
            );
            ks
        };

        let cpu0 = Cpu::now(&self.server_proc);
        let quiet = run_changes(rt, clients, kube, dns, ips, 1, next(self.changes));
        let cpu1 = Cpu::now(&self.server_proc);

        let status = format!("{}/status", self.server_proc);
        let rss_before = rss_of(&status).0;
        let deadline = Instant::now()
            + CHANGE_TIMEOUT * u32::try_from(self.changes).unwrap_or(u32::MAX)
            + STORM_MARGIN;
        let cpu2 = Cpu::now(&self.server_proc);
        let storm = Storm::start(
            storm_rt,
            &self.storm_client,
            &ips[0],
            self.writers,
            *round,
            deadline,
        );
        // Measure under load: wait until the writers are writing (about one write each).
        let warm = Instant::now() + CHANGE_TIMEOUT;
        while storm.writes() < storm.tasks.len() as u64 {
            assert!(Instant::now() < warm, "the storm writers are not writing");
            std::thread::sleep(Duration::from_millis(1));
        }
        let measured = run_changes(rt, clients, kube, dns, ips, 1, next(self.changes));
        let stopped = storm.stop(storm_rt, &mut ips[0]);
        let cpu3 = Cpu::now(&self.server_proc);
        *round += stopped.written.iter().map(|w| w.rounds).max().unwrap_or(0);

        // The server has taken in the whole storm once every writer's last write is answered.
        let caught = Instant::now();
        for w in stopped.written.iter().filter(|_| !self.unlinked) {
            if let Some(s) = w.last {
                wait_answer(dns, 0, s, &ips[0][s], caught + SYNC_TIMEOUT);
            }
        }
        let caught_up = caught.elapsed();
        let (rss_after, rss_peak) = rss_of(&status);
        StormReport {
            quiet,
            storm: measured,
            stopped,
            caught_up,
            rss: (rss_before, rss_after, rss_peak),
            cpu_quiet: cpu1.since(&cpu0),
            cpu_storm: cpu3.since(&cpu2),
        }
    }

    /// Prints both phases side by side, the storm, the ratio against the target, RSS and CPU,
    /// the breakdown of each phase, and the `RESULT storm` line; `server_line` (how the server
    /// started) after the first line when given.
    fn print(&self, r: &mut StormReport, server_line: Option<&str>) {
        let (clusters, services, endpoints) = self.sizes;
        let changes = self.changes;
        let measured = match clusters {
            2 => remote_name(1),
            _ => format!("{}..{}", remote_name(1), remote_name(clusters - 1)),
        };
        let rate = r.stopped.writes_at_stop as f64 / r.stopped.elapsed.as_secs_f64().max(1e-9);
        let quiet = quantiles(&mut r.quiet.latency);
        let storm = quantiles(&mut r.storm.latency);
        let ratio = storm[1].as_secs_f64() / quiet[1].as_secs_f64();
        let met = r.quiet.timeouts == 0
            && r.storm.timeouts == 0
            && ratio <= STORM_RATIO_TARGET
            && storm[1] < STORM_P99_TARGET;
        println!(
            "propagation storm: {clusters} clusters x {services} services x {endpoints} endpoints; {changes} changes in {measured} quiet, then {changes} while {} writers rewrite the slices of c1 (cluster 0){}",
            r.stopped.written.len(),
            if self.unlinked {
                "; control: c1 is not linked to the server"
            } else {
                ""
            }
        );
        if let Some(line) = server_line {
            println!("{line}");
        }
        println!(
            "  | write sent → new IP in a DNS answer ({measured}) | p50 | p99 | max | timeouts |"
        );
        println!("  |---|---|---|---|---|");
        let row = |what: &str, q: &[Duration; 3], timeouts: usize| {
            println!(
                "  | {what} | {} | {} | {} | {timeouts} |",
                ms(q[0]),
                ms(q[1]),
                ms(q[2])
            );
        };
        row("quiet", &quiet, r.quiet.timeouts);
        row(
            &format!("storm (cluster 0 rewriting {rate:.0} slices/s)"),
            &storm,
            r.storm.timeouts,
        );
        println!(
            "  storm p99 / quiet p99 = {ratio:.2}; target (at most {STORM_RATIO_TARGET}x and under {} ms): {}",
            STORM_P99_TARGET.as_millis(),
            if met { "met" } else { "missed" }
        );
        let cut_short = r.stopped.written.iter().filter(|w| w.cut_short).count();
        let caught_up = if self.unlinked {
            "not asked for (c1 is not linked)".to_owned()
        } else {
            format!(
                "every writer's last write answered {} after they were told to stop",
                ms(r.caught_up)
            )
        };
        println!(
            "  storm: {} writes in {:.2} s ({rate:.0}/s) by {} writers{}; {caught_up}",
            r.stopped.writes,
            r.stopped.elapsed.as_secs_f64(),
            r.stopped.written.len(),
            if cut_short > 0 {
                format!(", {cut_short} of them ended by the deadline or the write limit")
            } else {
                String::new()
            },
        );
        self.print_resources(r);
        println!("  quiet:");
        print_breakdown(&mut r.quiet, changes);
        println!("  storm:");
        print_breakdown(&mut r.storm, changes);
        self.print_result(r, &quiet, &storm, (ratio, met, rate));
    }
    /// The server's RSS around the storm and the CPU of each phase.
    fn print_resources(&self, r: &StormReport) {
        let (before, after, peak) = r.rss;
        let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
        let (q, st) = (r.cpu_quiet, r.cpu_storm);
        match self.mode {
            Mode::Process => {
                println!(
                    "  server RSS {:.1} MiB before the storm, {:.1} MiB after (peak {:.1} MiB)",
                    mib(before),
                    mib(after),
                    mib(peak)
                );
                println!(
                    "  CPU, % of one core: server quiet {:.0} %, storm {:.0} %; this process (kubesim, storm writers, poller) quiet {:.0} %, storm {:.0} %; the machine ({cores} cores, other work included) quiet {:.0} %, storm {:.0} %",
                    q.server, st.server, q.bench, st.bench, q.machine, st.machine
                );
            }
            Mode::InProcess => {
                println!(
                    "  this process's RSS (in-process server, kubesim, writers) {:.1} MiB before the storm, {:.1} MiB after (peak {:.1} MiB)",
                    mib(before),
                    mib(after),
                    mib(peak)
                );
                println!(
                    "  CPU, % of one core: this process (server, kubesim, storm writers, poller) quiet {:.0} %, storm {:.0} %; the machine ({cores} cores, other work included) quiet {:.0} %, storm {:.0} %",
                    q.bench, st.bench, q.machine, st.machine
                );
            }
        }
    }

    /// The `RESULT storm key=value …` line; `quiet` and `storm` are the latency quantiles and
    /// `(ratio, met, rate)` the storm p99 / quiet p99, whether the target was met and the
    /// storm's writes per second.
    fn print_result(
        &self,
        r: &StormReport,
        quiet: &[Duration; 3],
        storm: &[Duration; 3],
        (ratio, met, rate): (f64, bool, f64),
    ) {
        let (clusters, services, endpoints) = self.sizes;
        let changes = self.changes;
        let (before, after, peak) = r.rss;
        let (q, st) = (r.cpu_quiet, r.cpu_storm);
        // The breakdown sorted every sample; these are its quantiles.
        let p99 = |samples: &[Duration]| us(percentile(samples, 0.99));
        println!(
            "RESULT storm server={} clusters={clusters} services={services} endpoints={endpoints} changes={changes} writers={} \
             quiet_p50_us={:.1} quiet_p99_us={:.1} quiet_max_us={:.1} quiet_timeouts={} \
             storm_p50_us={:.1} storm_p99_us={:.1} storm_max_us={:.1} storm_timeouts={} \
             p99_ratio={ratio:.2} target_met={met} storm_writes={} storm_s={:.2} storm_writes_per_s={rate:.0} \
             catch_up_us={:.1} quiet_to_commit_p99_us={:.1} storm_to_commit_p99_us={:.1} \
             quiet_from_commit_p99_us={:.1} storm_from_commit_p99_us={:.1} \
             server_rss_before_bytes={before} server_rss_after_bytes={after} server_rss_peak_bytes={peak} \
             server_cpu_quiet_pct={:.0} server_cpu_storm_pct={:.0} bench_cpu_quiet_pct={:.0} bench_cpu_storm_pct={:.0} \
             machine_cpu_quiet_pct={:.0} machine_cpu_storm_pct={:.0}",
            match self.mode {
                Mode::Process => "process",
                Mode::InProcess => "in-process",
            },
            r.stopped.written.len(),
            us(quiet[0]),
            us(quiet[1]),
            us(quiet[2]),
            r.quiet.timeouts,
            us(storm[0]),
            us(storm[1]),
            us(storm[2]),
            r.storm.timeouts,
            r.stopped.writes,
            r.stopped.elapsed.as_secs_f64(),
            us(r.caught_up),
            p99(&r.quiet.to_commit),
            p99(&r.storm.to_commit),
            p99(&r.quiet.from_commit),
            p99(&r.storm.from_commit),
            q.server,
            st.server,
            q.bench,
            st.bench,
            q.machine,
            st.machine,
        );
    }
}

/// Creates every cluster's Services and slices (`ips`) through `clients`; checks that each
/// cluster holds `services` more of each; returns how long it took.
fn load(
    rt: &tokio::runtime::Runtime,
    remotes: &[&Arc<kubesim::Cluster>],
    clients: &[Client],
    ips: &[Vec<Vec<Ipv4Addr>>],
    services: usize,
) -> Duration {
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
    rt.block_on(common::load(clients, ips, |_| false));
    let load_time = started.elapsed();
    for (r, (svcs, slices)) in remotes.iter().zip(before) {
        assert_eq!(count(r, kubesim::resources::SERVICES), svcs + services);
        assert_eq!(
            count(r, kubesim::resources::ENDPOINTSLICES),
            slices + services
        );
    }
    load_time
}

/// Starts the server in `mode` linked to `kube`'s clusters file and waits until it is ready
/// (by `deadline`); returns it and its DNS address.
fn start_server(
    mode: Mode,
    binary: Option<&std::path::Path>,
    rt: &tokio::runtime::Runtime,
    kube: &Kube,
    deadline: Instant,
) -> (Running, std::net::SocketAddr) {
    let local_kubeconfig = kube.local().kubeconfig_path().to_owned();
    match mode {
        Mode::Process => {
            let binary = binary.expect("binary");
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
    }
}

/// The smoke run's checks of a storm run: no timeouts, and a storm that wrote until stopped
/// (not the ratio: a loaded CI machine is too noisy for it).
fn check_storm_smoke(r: &StormReport) {
    assert_eq!(
        r.quiet.timeouts, 0,
        "every quiet change reached DNS within 5 s"
    );
    assert_eq!(
        r.storm.timeouts, 0,
        "every change under the storm reached DNS within 5 s"
    );
    assert!(r.stopped.writes > 0, "the storm wrote");
    assert!(
        r.stopped.written.iter().all(|w| !w.cut_short),
        "the storm ran until it was stopped"
    );
}

/// What one run of this bench does, from its environment variables (see the module doc).
struct Plan {
    bench: bool,
    clusters: usize,
    services: usize,
    endpoints: usize,
    changes: usize,
    tls: bool,
    writers: usize,
    /// Measure quiet changes alone.
    plain: bool,
    /// Measure quiet changes, then changes under a storm in `c1`.
    storm: bool,
    /// The storm's control: `c1` not linked.
    unlinked: bool,
}

impl Plan {
    fn from_env() -> Self {
        let bench = common::bench_mode();
        let clusters = size("PROPAGATION_CLUSTERS", 3, 3, bench);
        let services = size("PROPAGATION_SERVICES", 1000, 20, bench);
        let endpoints = size("PROPAGATION_ENDPOINTS", 10, 10, bench);
        assert!(clusters >= 1 && services >= 1 && endpoints >= 1);
        // A bench run is plain or storm; the smoke run does both (storm when there are 2
        // clusters).
        let storm = flag("PROPAGATION_STORM");
        let writers = size("PROPAGATION_STORM_WRITERS", 8, 8, bench);
        assert!(
            !storm || (clusters >= 2 && writers >= 1),
            "PROPAGATION_STORM needs at least 2 clusters and 1 writer"
        );
        let unlinked = storm && bench && flag("PROPAGATION_STORM_UNLINKED");
        Self {
            bench,
            clusters,
            services,
            endpoints,
            changes: size("PROPAGATION_CHANGES", 1000, 30, bench),
            tls: flag("PROPAGATION_TLS"),
            writers,
            plain: (!storm || !bench) && !unlinked,
            storm: storm || (!bench && clusters >= 2),
            unlinked,
        }
    }
}

/// What every server mode of a run shares: the clusters, their clients and the load time.
struct Setup {
    rt: tokio::runtime::Runtime,
    kube: Kube,
    clients: Vec<Client>,
    binary: Option<std::path::PathBuf>,
    load_time: Duration,
}

fn main() {
    let plan = Plan::from_env();
    let (binary, modes, rt) = common::setup("propagation", "PROPAGATION_IN_PROCESS", plan.bench);
    let _entered = rt.enter();
    // The storm cluster's API server and writers run apart, at low CPU priority, as another
    // cluster's API server runs on another machine.
    let kube = Kube::start(&rt, plan.clusters, plan.tls, plan.storm);
    if plan.unlinked {
        common::write_clusters_file(&kube.clusters_file, &kube.remotes()[1..]);
    }
    let remotes = kube.remotes();
    let mut ips = common::initial_ips(plan.clusters, plan.services, plan.endpoints);
    let clients: Vec<Client> = rt.block_on(common::clients(&remotes));
    let load_time = load(&rt, &remotes, &clients, &ips, plan.services);
    println!(
        "propagation: kubesim over {}; loaded {} Services and {} EndpointSlices of {} endpoints in {:.2} s ({LOAD_CONCURRENCY} creates in flight)",
        if plan.tls { "HTTPS" } else { "plain HTTP" },
        plan.clusters * plan.services,
        plan.clusters * plan.services,
        plan.endpoints,
        load_time.as_secs_f64(),
    );
    let setup = Setup {
        rt,
        kube,
        clients,
        binary,
        load_time,
    };
    let mut first = 0;
    let mut storm_round = STORM_K0.div_ceil(plan.services);
    for mode in modes {
        run_mode(&plan, &setup, mode, &mut ips, &mut first, &mut storm_round);
    }
}

/// Starts the server in `mode`, runs the plain and the storm measures the plan asks for, and
/// stops it. `first` and `storm_round` are the next change numbers; both move on.
fn run_mode(
    plan: &Plan,
    setup: &Setup,
    mode: Mode,
    ips: &mut [Vec<Vec<Ipv4Addr>>],
    first: &mut usize,
    storm_round: &mut usize,
) {
    let (rt, kube, clients) = (&setup.rt, &setup.kube, &setup.clients);
    // Start the server and wait until it is ready and answers.
    let mut rss = Rss::start();
    let started = Instant::now();
    let deadline = started + SYNC_TIMEOUT;
    let (running, dns_addr) = start_server(mode, setup.binary.as_deref(), rt, kube, deadline);
    let ready_time = started.elapsed();
    let mut dns = Dns::new(dns_addr);
    wait_answers(&mut dns, ips, usize::from(plan.unlinked), deadline);
    let answering_time = started.elapsed();
    rss.synced(match &running {
        Running::Process(child) => Some(child),
        Running::InProcess(_) => None,
    });
    let how = common::how(mode, setup.binary.as_deref());
    let server_line = format!(
        "  server ({how}): ready after {:.2} s, every cluster answering after {:.2} s",
        ready_time.as_secs_f64(),
        answering_time.as_secs_f64()
    );
    if plan.plain {
        let ks = *first..*first + plan.changes;
        let mut m = run_changes(rt, clients, kube, &mut dns, ips, 0, ks);
        *first += plan.changes;
        rss.after();
        let what = format!(
            "{} clusters x {} services x {} endpoints, {} changes",
            plan.clusters, plan.services, plan.endpoints, plan.changes
        );
        let rss = rss.text(mode, "", " to synced");
        println!(
            "propagation: {what}: {}, timeouts {}; {rss}; load {:.2} s",
            common::p50_p99_max(&m.latency),
            m.timeouts,
            setup.load_time.as_secs_f64()
        );
        println!("{server_line}");
        print_breakdown(&mut m, plan.changes);
        if !plan.bench {
            assert_eq!(m.timeouts, 0, "every change reached DNS within 5 s");
        }
    }
    if plan.storm {
        let run = StormRun {
            rt,
            clients,
            kube,
            storm_client: match &kube.apart {
                Some((_, apart)) => apart.block_on(common::client(kube.remote(0))),
                None => clients[0].clone(),
            },
            mode,
            server_proc: match &running {
                Running::Process(child) => format!("/proc/{}", child.0.id()),
                Running::InProcess(_) => "/proc/self".to_owned(),
            },
            changes: plan.changes,
            writers: plan.writers,
            sizes: (plan.clusters, plan.services, plan.endpoints),
            unlinked: plan.unlinked,
        };
        let mut r = run.run(&mut dns, ips, first, storm_round);
        run.print(&mut r, (!plan.plain).then_some(server_line.as_str()));
        if !plan.bench {
            check_storm_smoke(&r);
        }
    }
    match running {
        Running::Process(child) => drop(child),
        Running::InProcess(server) => rt.block_on(server.stop()),
    }
}
