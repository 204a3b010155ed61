//! The mirror controller's cost against the size of what it mirrors (issue 17 item 1): its CPU
//! per remote endpoint change at a small and a large number of mirrored endpoints (the cost
//! should follow the change, not the size: the two must be within 2x), and a restart at the
//! large size, which must converge without a single write (everything is already right).
//!
//! Each size gets a fresh kubesim loaded as the main bench does (3 clusters, flat-exported
//! Services of `MIRROR_SCALE_ENDPOINTS` endpoints each, every fifth a federated member), and a
//! server with a resync period far longer than the run (`SCALE_RESYNC`), so that no full resync
//! pass falls in the measured window: what is measured is the work the changes cause. After
//! converging (and a quiet period), `changes` sequential remote changes run as in the main bench
//! (each waits until its mirror slices hold the new IP); the server's process CPU time
//! (`utime + stime` of `/proc/<pid>/stat`) across them, divided by their number, is the CPU per
//! change. The figure is the whole server's (model, index and watches too, which already cost per
//! change): the part that grows with the size is the mirror's. In-process (the smoke run's second
//! mode) it is this whole process's, kubesim included, and only a smoke figure.
//!
//! Restart: the server is stopped (the child killed: nothing is released), its Lease deleted
//! (as if released, so the new process does not wait out the lease duration), and a new server
//! started. Converged: it leads and its first reconcile pass is done
//! (`clusterset_dns_mirror_objects_owned` is set at the end of a pass, 0 before). The writes to
//! Services and EndpointSlices kubesim counts from the stop until a quiet period after that
//! must be 0.
//!
//! Sizes: `MIRROR_SCALE_SMALL` and `MIRROR_SCALE_LARGE` Services per cluster (bench: 9 and 926,
//! about 1,000 and 100,000 mirrored endpoints with 30 endpoints each; smoke: 3 and 30 with 10),
//! `MIRROR_SCALE_CHANGES` (bench 300, smoke 10); `MIRROR_SCALE=0` skips this part.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams};

use super::common::{self, Kube, Mode, flag, ms, size};
use super::{
    LEASE_NS, Running, SYNC_TIMEOUT, Sizes, check_mirrors, mirror_write_count, run_changes,
    start_server, wait_converged, wait_quiet,
};

/// A resync period no run reaches: no full pass falls in a measurement.
const SCALE_RESYNC: Duration = Duration::from_secs(3600);

/// CPU time (user + system) of the process whose `/proc/<pid>/stat` is `path`.
pub(super) fn cpu_of(path: &str) -> Duration {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the command name (which may hold spaces), from field 3 (state) on:
    // utime is field 14, stime field 15.
    let fields: Vec<&str> = text
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let total = ticks(11) + ticks(12);
    Duration::from_secs_f64(total as f64 / clock_ticks() as f64)
}

/// Clock ticks per second of `/proc`'s times.
fn clock_ticks() -> u64 {
    // SAFETY: sysconf takes an integer and returns one; no memory is shared.
    #[allow(unsafe_code)]
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// What one size measured.
pub(super) struct Scale {
    services: usize,
    endpoints: usize,
    mirrored: usize,
    changes: usize,
    timeouts: usize,
    cpu: Duration,
    complete_p50: Duration,
    problems: Vec<String>,
    restart: Option<Restart>,
}

/// What the restart measured.
struct Restart {
    /// Start → the first pass is done.
    converge: Duration,
    /// Start → ready and leading.
    leading: Duration,
    writes: u64,
    problems: Vec<String>,
}

impl Scale {
    fn per_change(&self) -> Duration {
        self.cpu / u32::try_from(self.changes.max(1)).unwrap_or(u32::MAX)
    }
}

/// Endpoints in our local slices once converged: every remote one in its `<svc>-<cluster>`
/// slice, and every member's again in `<svc>-federated` and in `<svc>-nearest` (one tier: the
/// union).
fn mirrored(sizes: Sizes) -> usize {
    sizes.clusters * sizes.endpoints * (sizes.services + 2 * sizes.federated())
}

/// Runs one size; with `restart`, also the restart.
fn run_size(
    rt: &tokio::runtime::Runtime,
    mode: Mode,
    binary: Option<&std::path::Path>,
    sizes: Sizes,
    restart: bool,
) -> Scale {
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
    rt.block_on(async {
        common::create_namespace(&local_client, common::NS).await;
        common::create_namespace(&local_client, LEASE_NS).await;
        common::load(&clients, &ips, |s| sizes.member(s)).await;
    });
    let started = Instant::now();
    let deadline = started + SYNC_TIMEOUT;
    let running = start_server(rt, mode, binary, &kube, SCALE_RESYNC);
    wait_converged(&running, &local, sizes, started, deadline);
    wait_quiet(&local, sizes.quiet, deadline);

    let cpu_before = running.cpu();
    let mut measured = rt.block_on(run_changes(&clients, &local, &remotes, &mut ips, sizes));
    wait_quiet(&local, sizes.quiet, Instant::now() + SYNC_TIMEOUT);
    let cpu = running.cpu().saturating_sub(cpu_before);
    measured.complete.sort();
    let problems = check_mirrors(&local, &ips, sizes);

    let restart = if restart {
        Some(restart_converge(
            rt,
            (mode, binary),
            &kube,
            &local_client,
            &ips,
            sizes,
            running,
        ))
    } else {
        stop(rt, running);
        None
    };
    Scale {
        services: sizes.services,
        endpoints: sizes.endpoints,
        mirrored: mirrored(sizes),
        changes: sizes.changes,
        timeouts: measured.timeouts,
        cpu,
        complete_p50: common::percentile(&measured.complete, 0.5),
        problems,
        restart,
    }
}

/// Stops `running`, deletes its Lease, starts a new server and measures its convergence over
/// the mirror it left (see the module docs).
fn restart_converge(
    rt: &tokio::runtime::Runtime,
    (mode, binary): (Mode, Option<&std::path::Path>),
    kube: &Kube,
    local_client: &kube::Client,
    ips: &[Vec<Vec<std::net::Ipv4Addr>>],
    sizes: Sizes,
    running: Running,
) -> Restart {
    let local = kube.local();
    let before = mirror_write_count(local);
    stop(rt, running);
    rt.block_on(async {
        let leases: Api<Lease> = Api::namespaced(local_client.clone(), LEASE_NS);
        leases
            .delete("clusterset-dns-mirror", &DeleteParams::default())
            .await
            .map(|_| ())
    })
    .expect("delete the mirror's Lease");
    let started = Instant::now();
    let deadline = started + SYNC_TIMEOUT;
    let running = start_server(rt, mode, binary, kube, SCALE_RESYNC);
    let leading = wait_converged(&running, local, sizes, started, deadline);
    // Objects of ours: a Service and an EndpointSlice per expected mirror.
    let owned = 2 * sizes.expected_objects() as u64;
    while running.objects_owned() < owned {
        assert!(
            Instant::now() < deadline,
            "no reconcile pass after the restart"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let converge = started.elapsed();
    wait_quiet(local, sizes.quiet, deadline);
    let writes = mirror_write_count(local) - before;
    let problems = check_mirrors(local, ips, sizes);
    stop(rt, running);
    Restart {
        converge,
        leading,
        writes,
        problems,
    }
}

fn stop(rt: &tokio::runtime::Runtime, running: Running) {
    match running {
        Running::Process { child, .. } => drop(child),
        Running::InProcess(server) => rt.block_on(server.stop()),
    }
}

/// Runs the small and the large size in `mode`, prints the table and `RESULT` lines, and
/// returns both.
pub(super) fn run(
    rt: &tokio::runtime::Runtime,
    mode: Mode,
    binary: Option<&std::path::Path>,
    bench: bool,
) -> Option<(Scale, Scale)> {
    if std::env::var("MIRROR_SCALE").is_ok_and(|v| v == "0") {
        return None;
    }
    let base = Sizes {
        clusters: 3,
        services: 0,
        endpoints: size("MIRROR_SCALE_ENDPOINTS", 30, 10, bench),
        changes: size("MIRROR_SCALE_CHANGES", 300, 10, bench),
        federated_every: 5,
        resync: SCALE_RESYNC,
        quiet: Duration::from_millis(size("MIRROR_WRITES_QUIET_MS", 1000, 500, bench) as u64),
    };
    assert!(base.clusters * base.endpoints <= 100);
    let small = Sizes {
        services: size("MIRROR_SCALE_SMALL", 9, 3, bench),
        ..base
    };
    let large = Sizes {
        services: size("MIRROR_SCALE_LARGE", 926, 30, bench),
        ..base
    };
    let s = run_size(rt, mode, binary, small, false);
    let l = run_size(rt, mode, binary, large, true);
    print(mode, &s, &l);
    Some((s, l))
}

fn print(mode: Mode, s: &Scale, l: &Scale) {
    let whose = match mode {
        Mode::Process => "server process",
        Mode::InProcess => "whole bench process (in-process server; smoke figure)",
    };
    println!("mirror_scale: CPU per remote endpoint change ({whose}), and a restart");
    println!(
        "  | mirrored endpoints | services x clusters x endpoints | changes | CPU total | CPU per change | change → mirror p50 | timeouts |"
    );
    println!("  |---|---|---|---|---|---|---|");
    for x in [s, l] {
        println!(
            "  | {} | {} x 3 x {} | {} | {} | {} | {} | {} |",
            x.mirrored,
            x.services,
            x.endpoints,
            x.changes,
            ms(x.cpu),
            ms(x.per_change()),
            ms(x.complete_p50),
            x.timeouts
        );
    }
    let ratio = l.per_change().as_secs_f64() / s.per_change().as_secs_f64().max(1e-9);
    println!(
        "RESULT mirror_cpu_per_change_small_us={:.0} endpoints={}",
        s.per_change().as_secs_f64() * 1e6,
        s.mirrored
    );
    println!(
        "RESULT mirror_cpu_per_change_large_us={:.0} endpoints={}",
        l.per_change().as_secs_f64() * 1e6,
        l.mirrored
    );
    println!(
        "RESULT mirror_cpu_ratio_large_to_small={ratio:.2} within_2x={}",
        ratio <= 2.0
    );
    if let Some(r) = &l.restart {
        println!(
            "  restart at {} mirrored endpoints: ready and leading after {}, first pass done after {}; writes {}; content {}",
            l.mirrored,
            ms(r.leading),
            ms(r.converge),
            r.writes,
            super::content(&r.problems)
        );
        println!(
            "RESULT mirror_restart_converge_ms={:.0} writes={} endpoints={}",
            r.converge.as_secs_f64() * 1e3,
            r.writes,
            l.mirrored
        );
    }
}

/// The smoke run's checks: every change arrived, the mirrors are right, the restart wrote
/// nothing.
pub(super) fn check(s: &Scale, l: &Scale) {
    for x in [s, l] {
        assert_eq!(x.timeouts, 0, "every change reached the mirror");
        assert!(x.problems.is_empty(), "mirror wrong: {:?}", x.problems);
    }
    let r = l.restart.as_ref().expect("the large size restarts");
    assert!(
        r.problems.is_empty(),
        "mirror wrong after the restart: {:?}",
        r.problems
    );
    assert_eq!(r.writes, 0, "a restart over a converged mirror wrote");
}
