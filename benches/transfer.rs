//! Zone transfers (issue 30): our AXFR and IXFR next to Knot DNS's AXFR-out of the same zone,
//! the UDP query rate while AXFRs run (unlimited and at the default transfer rate), and how
//! long an endpoint change takes to reach a Knot secondary by NOTIFY and IXFR.
//!
//! ```text
//! cargo bench --bench transfer      # 1,000,000 endpoints, 3 rounds, 5 s load phases, 20 changes
//! cargo test --bench transfer       # smoke: 10,000 endpoints, 2 rounds, 1 s phases, 5 changes (debug build)
//! ```
//!
//! Knobs (environment): `TRANSFER_ENDPOINTS`, `TRANSFER_ROUNDS`, `TRANSFER_LOAD_SECS`,
//! `TRANSFER_CHANGES` (20, 5 in the smoke run), `TRANSFER_KNOT_CHANGES` (as many; 0 skips the
//! series with Knot as the primary), `TRANSFER_SETTLE_SECS` (70, 0 in the smoke run: how long
//! after the last transfer our RSS is read again; the server returns freed memory to the system
//! a minute after it is freed), and `TRANSFER_LOG` (the server's `RUST_LOG`, default `warn`).
//! Needs `knotd` and `knotc` (Debian `knot`).
//!
//! 1. **Data**: `zonegen::generate` writes the endpoints in the file-source format (four
//!    clusters, services of 100 endpoints, half StatefulSets); `clusterset-dns dump` of that
//!    directory is Knot's zone file, so both servers hold the same zone.
//! 2. **Servers**: the built binary (`serve --zones … --allow-transfer 127.0.0.1 --config FILE
//!    --notify 127.0.0.1:P`), ready once `/ready` answers on the admin address of its
//!    `listening` line; its config file holds `transfer-rate-mb: 0` (no limit) until step 4.
//!    knotd as a primary of the zone file (an ACL lets 127.0.0.1 transfer, a journal of changes
//!    serves IXFR, NOTIFY to 127.0.0.1:Q), ready once it answers the SOA. P and Q are picked up
//!    front: right after each primary is ready, a Knot secondary of it starts there (Knot's
//!    defaults, NOTIFY allowed from 127.0.0.1) and loads the zone (ours unlimited); both are
//!    kept running, idle until step 5, for step 7. (Started at once, so that the NOTIFY of our
//!    first serial finds it: an unanswered NOTIFY is tried again for 31 s, and the serials that
//!    come meanwhile wait for it.)
//! 3. **AXFR**, alternating ours and Knot's for `rounds` rounds, by a raw TCP client of this file,
//!    both unlimited: the query, length-prefixed, then length-prefixed messages read until the
//!    closing SOA; timed from just before the query is written to the first message and to the
//!    last one, with octets (length prefixes included), messages and answer records counted.
//!    Each server's peak RSS during the transfer: its `VmHWM`, reset just before (`clear_refs`
//!    5), read just after, next to its `VmRSS` before.
//! 4. **UDP rate**: a closed-loop UDP load (one socket, 64 queries in flight, A queries of names
//!    from the zone) against our server for `TRANSFER_LOAD_SECS`, once alone and once while
//!    another thread runs AXFRs back to back (then for at least as long as the first AXFR takes,
//!    and the one still running at the end is read to its end before the next phase), in
//!    alternation, `rounds` times each, with transfers unlimited. Then our config file is
//!    emptied (written aside, renamed in: `transfer-rate-mb` back to its default, 64 MiB/s); the
//!    server reloads it on its own, seen when `clusterset_dns_config_reloads_total` moves (at
//!    most 30 s). One more AXFR of ours, at that rate, timed as in step 3; a Knot secondary
//!    (Knot's default timeouts: at most 5 s for each message of a transfer) of each server,
//!    timed from its start to the zone answered (at most 60 s, 30 s in the smoke run; when it
//!    did not load, its attempts and how the last failed); then the load phases again, at the
//!    default rate.
//! 5. **IXFR after one endpoint change**: one endpoint address of one zone file is changed
//!    (written aside and renamed in); once our server answers the new address (the file source
//!    reloads on its own), an IXFR with the previous serial in its Authority SOA, answered from
//!    our journal with the one difference (RFC 1995 incremental: it must be, and under 64 KiB
//!    whatever the zone's size). The journal records a version after queries answer it, and
//!    an IXFR meanwhile gets the SOA alone (current): the IXFR is asked again every 10 ms until
//!    it gets more, and that time is a figure too. Knot gets the same change (a new `dump` as its zone file,
//!    `knotc zone-reload`, differences computed from the file) and answers the same IXFR from
//!    its journal. Then an IXFR with the current serial (the SOA alone) to each.
//! 6. **Memory kept**: our server's RSS `TRANSFER_SETTLE_SECS` after its last transfer of the
//!    steps above (read after step 7; the secondary's IXFRs of step 7 are a few hundred octets).
//! 7. **Change → a notified secondary answers it**: once the secondary of ours on port P answers
//!    the change of step 5, `TRANSFER_CHANGES` endpoint changes one after the other (the
//!    endpoint of step 5, its address alternating between two outside the generated ranges,
//!    each written aside and renamed in), each timed from the rename to our server answering
//!    the new address and to the secondary answering it (NOTIFY, SOA query, IXFR); the next
//!    change once both answer (at most 600 s each, 60 s in the smoke run). Our `/metrics` says
//!    how many of the secondary's transfers in the series were incremental. Then the same with
//!    Knot as the primary and its secondary on port Q: the A record and the SOA serial
//!    edited in Knot's zone file (written aside, renamed in), `knotc zone-reload`, timed from
//!    the rename; `TRANSFER_KNOT_CHANGES` of them, or fewer when the series takes more than
//!    5 min (60 s in the smoke run).
//!
//! Prints a table and a `RESULT transfer …` line. Every wait and loop is bounded in time and in
//! count; everything runs on loopback; the temporary directory (zones, zone file, config file,
//! Knot's storage) is removed at the end, and every server is killed, also on a panic.

#[allow(dead_code)]
#[path = "common/mod.rs"]
mod common;
#[path = "common/dns.rs"]
mod dns;
mod zonegen;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::rr::Name;

use common::{ChildGuard, bench_mode, listening_addr, listening_line, mib, ms, rss_of, size};
use dns::{Dns, admin_get, admin_ready};

/// The zone both servers serve.
const ZONE: &str = "clusterset.local";
/// Longest wait for a server to be ready (a 1M-endpoint zone loads in well under this).
const READY_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest wait for one message of a transfer.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest one transfer may take.
const XFR_TIMEOUT: Duration = Duration::from_secs(600);
/// Most messages read of one transfer.
const MAX_MESSAGES: u64 = 1 << 22;
/// Most AXFRs run back to back in one load phase.
const MAX_BACK_TO_BACK: u64 = 10_000;
/// UDP queries in flight in the load.
const WINDOW: usize = 64;
/// A UDP wait longer than this counts the queries in flight as lost.
const UDP_TIMEOUT: Duration = Duration::from_millis(100);
/// Most distinct names the load asks.
const LOAD_NAMES: usize = 10_000;
/// The address the changed endpoint gets: outside every generated range.
const NEW_ADDR: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 1);
/// The other address of the changes of step 7 (they alternate): outside every generated range.
const ALT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 250, 0, 2);
/// Most octets our IXFR after one change may take (whatever the zone's size).
const IXFR_MAX_BYTES: u64 = 64 << 10;
/// Longest wait for our server to apply a rewritten config file.
const RELOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// The default `transfer-rate-mb`.
const DEFAULT_RATE_MB: u64 = 64;
/// The changed endpoint: the first of the first service of cluster `north` (service 2, a
/// StatefulSet) in `ns0`, whose pod name answers its address alone (the service name answers
/// 100, more than a UDP answer without EDNS holds).
const CHANGED_FILE: &str = "north/ns0.yaml";
const CHANGED_NAME: &str = "svc2-0.svc2-north.ns0.svc.clusterset.local.";

fn main() {
    let bench = bench_mode();
    let endpoints = size("TRANSFER_ENDPOINTS", 1_000_000, 10_000, bench);
    let rounds = size("TRANSFER_ROUNDS", 3, 2, bench).max(1);
    let load_secs = size("TRANSFER_LOAD_SECS", 5, 1, bench).max(1);
    let load_for = Duration::from_secs(load_secs as u64);
    let changes = size("TRANSFER_CHANGES", 20, 5, bench).max(1);
    let knot_changes = size("TRANSFER_KNOT_CHANGES", changes, changes, bench);

    let dir = tempfile::Builder::new()
        .prefix("transfer-bench")
        .tempdir()
        .expect("temp dir");
    let zones = dir.path().join("zones");
    let t = Instant::now();
    let services = zonegen::generate(&zones, endpoints);
    let zone_file = dir.path().join(format!("{ZONE}.zone"));
    dump(&zones, &zone_file);
    let (file_records, names) = zone_file_facts(&zone_file);
    println!(
        "generated {endpoints} endpoints in {services} services; zone file {file_records} records, {:.1} MiB, in {:.1} s",
        mib(std::fs::metadata(&zone_file).map_or(0, |m| m.len())),
        t.elapsed().as_secs_f64()
    );

    // The ports of the notified secondaries of step 7, told to each primary at its start.
    let mut taken = Vec::new();
    let ours_notified = free_port_not(&mut taken);
    let knot_notified = free_port_not(&mut taken);
    let t = Instant::now();
    let config = dir.path().join("clusterset-dns.yaml");
    std::fs::write(&config, "transfer-rate-mb: 0\n").expect("our config file");
    let ours = Ours::start(&zones, &config, ours_notified);
    println!(
        "clusterset-dns ready in {:.1} s (transfer-rate-mb: 0, NOTIFY to port {ours_notified})",
        t.elapsed().as_secs_f64()
    );
    // How long a stock secondary waits for a message of a transfer is Knot's default.
    let secondary_timeout = Duration::from_secs(if bench { 60 } else { 30 });
    // Started at once, so that the NOTIFY of our first serial finds it (an unanswered NOTIFY
    // is tried again for 31 s, and the serials that come meanwhile wait for it).
    let ours_follower = Follower::start(
        &dir.path().join("notified-ours"),
        ours.dns,
        ours_notified,
        secondary_timeout,
    );
    let t = Instant::now();
    let knot = Knot::start(
        &dir.path().join("knot"),
        &zone_file,
        free_port_not(&mut taken),
        knot_notified,
    );
    println!("knotd ready in {:.1} s", t.elapsed().as_secs_f64());
    let knot_follower = (knot_changes > 0).then(|| {
        Follower::start(
            &dir.path().join("notified-knot"),
            knot.dns,
            knot_notified,
            secondary_timeout,
        )
    });
    // The followers' first loads are over before anything is timed.
    wait_idle(ours.child.0.id());

    let axfr = axfr_rounds(&ours, &knot, rounds);
    let load_unlimited = load_rounds(ours.dns, &names, rounds, load_for, "unlimited");
    let reload = default_rate(&ours, &config);
    let axfr_default = axfr_with_memory(ours.dns, ours.child.0.id(), "clusterset-dns");
    println!(
        "AXFR ours at the default rate {:.3} s (first message {:.3} s), {} records, {:.1} MiB, RSS {:.0} → peak {:.0} MiB",
        axfr_default.x.took.as_secs_f64(),
        axfr_default.x.first.as_secs_f64(),
        axfr_default.x.records,
        mib(axfr_default.x.bytes),
        mib(axfr_default.rss_before),
        mib(axfr_default.peak),
    );
    let secondaries = Secondaries {
        ours: secondary(
            &dir.path().join("secondary-ours"),
            ours.dns,
            free_port_not(&mut taken),
            secondary_timeout,
        )
        .0,
        knot: secondary(
            &dir.path().join("secondary-knot"),
            knot.dns,
            free_port_not(&mut taken),
            secondary_timeout,
        )
        .0,
    };
    // A transfer the secondary asked for before it was stopped may still be in the making.
    wait_idle(ours.child.0.id());
    let load_default = load_rounds(ours.dns, &names, rounds, load_for, "default rate");
    // Longest wait for a server to answer the changed address.
    let change_timeout = Duration::from_secs(if bench { 600 } else { 60 });
    let ixfr = one_change(&ours, &knot, (&zones, &zone_file), change_timeout);
    let notified = Notified {
        ours: our_changes(&ours, &zones, &ours_follower, (changes, change_timeout)),
        knot: knot_series(
            &knot,
            &zone_file,
            knot_follower.as_ref(),
            (knot_changes, change_timeout),
            Duration::from_secs(if bench { 300 } else { 60 }),
        ),
    };
    drop((ours_follower, knot_follower));
    // Freed memory goes back to the system a minute after it is freed, once loaded
    // (`clusterset_dns::memory`): what the server keeps after its transfers.
    let settle_secs = size("TRANSFER_SETTLE_SECS", 70, 0, bench);
    let settled = settled_rss(ours.child.0.id(), settle_secs);

    report(
        &Facts {
            endpoints,
            services,
            file_records,
            rounds,
            load_secs,
            settle_secs,
            settled,
            secondary_secs: secondary_timeout.as_secs(),
            smoke: !bench,
        },
        &Figures {
            axfr,
            axfr_default,
            reload,
            secondaries,
            load_unlimited,
            load_default,
            ixfr,
            notified,
        },
        file_records,
    );
    drop((ours, knot));
    dir.close().expect("remove the temporary directory");
}

// ---------------------------------------------------------------------------------------------
// The servers

/// Our server, the built binary.
struct Ours {
    child: ChildGuard,
    dns: SocketAddr,
    admin: SocketAddr,
}

impl Ours {
    /// Starts `serve` on `zones` with the config file `config` (which names no other option than
    /// `transfer-rate-mb`), transfers allowed from 127.0.0.1, NOTIFY to 127.0.0.1:`notify`, and
    /// waits for `/ready`.
    fn start(zones: &Path, config: &Path, notify: u16) -> Self {
        let started = Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_clusterset-dns"))
            .args(["serve", "--local-cluster", "west", "--zones"])
            .arg(zones)
            .arg("--config")
            .arg(config)
            .args(["--allow-transfer", "127.0.0.1"])
            .arg("--notify")
            .arg(format!("127.0.0.1:{notify}"))
            .args(["--dns-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
            .env(
                "RUST_LOG",
                std::env::var("TRANSFER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start clusterset-dns");
        let (mut child, line) = listening_line(child);
        let dns = listening_addr(&line, "dns=");
        let admin = listening_addr(&line, "admin=");
        while !admin_ready(admin) {
            let exited = child.0.try_wait().ok().flatten();
            assert!(exited.is_none(), "clusterset-dns exited: {exited:?}");
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "clusterset-dns not ready within {READY_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ours { child, dns, admin }
    }

    /// The sum of the samples of metric `name` on `/metrics` whose labels hold every one of
    /// `labels` (`key="value"`); `None` when `/metrics` did not answer.
    fn metric(&self, name: &str, labels: &[&str]) -> Option<u64> {
        let text = admin_get(self.admin, "/metrics")?;
        Some(
            text.lines()
                .filter(|l| {
                    l.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with([' ', '{']))
                        && labels.iter().all(|kv| l.contains(kv))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .map(|v| v as u64)
                .sum(),
        )
    }
}

/// How our server took the rewritten config file.
#[derive(Debug, Clone, Copy)]
struct Reload {
    /// The file renamed in → `clusterset_dns_config_reloads_total` moved.
    took: Duration,
}

/// Empties our config file (written aside, renamed in): `transfer-rate-mb` goes back to its
/// default. Waits (at most [`RELOAD_TIMEOUT`]) until the server says it reloaded it.
fn default_rate(ours: &Ours, config: &Path) -> Reload {
    let reloads = || ours.metric("clusterset_dns_config_reloads_total", &[]);
    let errors = || ours.metric("clusterset_dns_config_reload_errors_total", &[]);
    let before = reloads().expect("our /metrics");
    let aside = config.with_extension("yaml.new");
    std::fs::write(&aside, "").expect("write the config file aside");
    let t = Instant::now();
    std::fs::rename(&aside, config).expect("rename the config file in");
    while reloads().is_none_or(|n| n <= before) {
        assert!(
            t.elapsed() < RELOAD_TIMEOUT,
            "clusterset-dns did not reload its config file within {RELOAD_TIMEOUT:?} \
             ({:?} reload errors)",
            errors()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = t.elapsed();
    println!(
        "config file emptied (transfer-rate-mb: the default, {DEFAULT_RATE_MB}); reloaded after {:.3} s",
        took.as_secs_f64()
    );
    Reload { took }
}

/// knotd as the primary of the zone file.
struct Knot {
    child: ChildGuard,
    dns: SocketAddr,
    conf: PathBuf,
    log: PathBuf,
}

impl Knot {
    /// Writes a configuration under `dir` and starts knotd on `zone_file` on `port`, with
    /// NOTIFY to 127.0.0.1:`notify`; waits until it answers the SOA.
    fn start(dir: &Path, zone_file: &Path, port: u16, notify: u16) -> Self {
        let d = dir.display();
        for sub in ["run", "db"] {
            std::fs::create_dir_all(dir.join(sub)).expect("knot dirs");
        }
        // A primary of the file: 127.0.0.1 may transfer; a changed file (with a higher serial)
        // is loaded as the difference from what Knot holds, and the change kept in the journal
        // for IXFR; each new serial is told to the secondary of step 7 by NOTIFY.
        let conf = format!(
            "server:\n    rundir: \"{d}/run\"\n    listen: 127.0.0.1@{port}\n    background-workers: 1\n\
             control:\n    listen: \"{d}/run/knot.sock\"\n\
             database:\n    storage: \"{d}/db\"\n\
             log:\n  - target: stderr\n    any: warning\n\
             remote:\n  - id: notified\n    address: 127.0.0.1@{notify}\n\
             acl:\n  - id: transfer\n    address: 127.0.0.1\n    action: transfer\n\
             zone:\n  - domain: {ZONE}\n    file: \"{}\"\n    storage: \"{d}/db\"\n    acl: transfer\n    notify: notified\n\
             \x20   zonefile-sync: -1\n    zonefile-load: difference\n    journal-content: changes\n\
             \x20   semantic-checks: off\n",
            zone_file.display()
        );
        let conf_path = dir.join("knot.conf");
        std::fs::write(&conf_path, conf).expect("knot.conf");
        let log = dir.join("knot.log");
        let child = Command::new(program("knotd"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("knot log"))
            .spawn()
            .unwrap_or_else(|e| {
                panic!("knotd must be installed (Debian package knot; .ci/run installs it): {e}")
            });
        let mut knot = Knot {
            child: ChildGuard(child),
            dns: SocketAddr::from(([127, 0, 0, 1], port)),
            conf: conf_path,
            log,
        };
        let started = Instant::now();
        while udp_soa(knot.dns).is_none() {
            let exited = knot.child.0.try_wait().ok().flatten();
            assert!(
                exited.is_none(),
                "knotd exited ({exited:?}): {}",
                knot.log_text()
            );
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "knotd did not answer the SOA within {READY_TIMEOUT:?}: {}",
                knot.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        knot
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `knotc zone-reload` of the zone (Knot loads the file's differences in the background).
    fn reload(&self) {
        let out = Command::new(program("knotc"))
            .arg("-c")
            .arg(&self.conf)
            .args(["-t", "30", "zone-reload", ZONE])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("knotc must be installed (Debian package knot): {e}"));
        assert!(
            out.status.success(),
            "knotc zone-reload: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `name` from `PATH`, else from `/usr/sbin` (where Debian puts knotd and knotc).
fn program(name: &str) -> PathBuf {
    let in_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    in_path.unwrap_or_else(|| Path::new("/usr/sbin").join(name))
}

/// A loopback port free for TCP and UDP just now and not in `taken`, which it joins.
fn free_port_not(taken: &mut Vec<u16>) -> u16 {
    for _ in 0..100 {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = tcp.local_addr().expect("addr").port();
        if !taken.contains(&port) && UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            taken.push(port);
            return port;
        }
    }
    panic!("no free loopback port in 100 tries");
}

/// `clusterset-dns dump` of `zones` into `out` (written aside, then renamed in).
fn dump(zones: &Path, out: &Path) {
    let aside = out.with_extension("new");
    let file = std::fs::File::create(&aside).expect("zone file");
    let status = Command::new(env!("CARGO_BIN_EXE_clusterset-dns"))
        .args(["dump", "--local-cluster", "west", "--zone", ZONE, "--zones"])
        .arg(zones)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(Stdio::inherit())
        .status()
        .expect("run clusterset-dns dump");
    assert!(status.success(), "clusterset-dns dump failed: {status}");
    std::fs::rename(&aside, out).expect("rename the zone file");
}

/// The records of a zone file (lines that are neither blank, comments nor directives), and up
/// to [`LOAD_NAMES`] owner names of A records, spread over the zone.
fn zone_file_facts(path: &Path) -> (u64, Vec<String>) {
    let file = std::fs::File::open(path).expect("zone file");
    let mut records = 0u64;
    let mut a_names = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line.expect("read the zone file");
        let t = line.trim_start();
        if t.is_empty() || t.starts_with(';') || t.starts_with('$') {
            continue;
        }
        records += 1;
        let mut fields = line.split_whitespace();
        let owner = fields.next().unwrap_or_default();
        if fields.nth(2) == Some("A") && a_names.last().is_none_or(|l: &String| l != owner) {
            a_names.push(owner.to_owned());
        }
    }
    let step = a_names.len().div_ceil(LOAD_NAMES).max(1);
    let names = a_names.into_iter().step_by(step).collect();
    (records, names)
}

// ---------------------------------------------------------------------------------------------
// The DNS client: queries, and following a transfer to its end

fn question(out: &mut Vec<u8>, id: u16, qtype: u16, ns: u16, name: &str) {
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 1, 0, 0]);
    out.extend_from_slice(&ns.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&[0, 1]);
}

const T_A: u16 = 1;
const T_SOA: u16 = 6;
const T_IXFR: u16 = 251;
const T_AXFR: u16 = 252;

/// An AXFR query of the zone.
fn axfr_query() -> Vec<u8> {
    let mut q = Vec::new();
    question(&mut q, 0xa5f0, T_AXFR, 0, ZONE);
    q
}

/// An IXFR query of the zone from `serial`: the client's SOA in the Authority section (owner
/// the question name, by a pointer; root names; only the serial matters).
fn ixfr_query(serial: u32) -> Vec<u8> {
    let mut q = Vec::new();
    question(&mut q, 0x1f00, T_IXFR, 1, ZONE);
    q.extend_from_slice(&[0xc0, 12]);
    q.extend_from_slice(&T_SOA.to_be_bytes());
    q.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 22, 0, 0]);
    q.extend_from_slice(&serial.to_be_bytes());
    q.extend_from_slice(&[0; 16]);
    q
}

/// An A query of `name` with EDNS (1232 octets).
fn a_query(name: &str) -> Vec<u8> {
    let mut q = Vec::new();
    question(&mut q, 0, T_A, 0, name);
    q[11] = 1;
    q.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    q
}

fn be16(m: &[u8], at: usize) -> Result<u16, String> {
    m.get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or_else(|| format!("message cut at octet {at}"))
}

fn be32(m: &[u8], at: usize) -> Result<u32, String> {
    m.get(at..at + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| format!("message cut at octet {at}"))
}

/// The offset after the name at `at` (labels, ending at the root or at a pointer).
fn skip_name(m: &[u8], mut at: usize) -> Result<usize, String> {
    for _ in 0..128 {
        let len = *m.get(at).ok_or("name cut")?;
        match len {
            0 => return Ok(at + 1),
            l if l & 0xc0 == 0xc0 => return Ok(at + 2),
            l if l & 0xc0 == 0 => at += 1 + usize::from(l),
            _ => return Err(format!("bad label type {len:#x}")),
        }
    }
    Err("name of more than 128 labels".into())
}

/// Follows the answer records of a transfer to its end: the first record is the SOA of the
/// version sent; an AXFR, or an IXFR answered the AXFR way, ends at the next SOA of that
/// serial; an incremental IXFR (RFC 1995: the second record is a SOA, the first version's)
/// ends at the third; an IXFR answered with the SOA alone, of the client's serial, is done.
#[derive(Debug, Default)]
struct Follow {
    records: u64,
    serial: Option<u32>,
    incremental: bool,
    closing: u32,
    done: bool,
}

impl Follow {
    /// Takes one message; `client` is the serial an IXFR asked from.
    fn message(&mut self, m: &[u8], client: Option<u32>) -> Result<(), String> {
        let flags = be16(m, 2)?;
        if flags & 0x8000 == 0 {
            return Err("not a response".into());
        }
        if flags & 0x000f != 0 {
            return Err(format!("rcode {}", flags & 0x000f));
        }
        let (qd, an) = (be16(m, 4)?, be16(m, 6)?);
        let mut at = 12;
        for _ in 0..qd {
            at = skip_name(m, at)? + 4;
        }
        for _ in 0..an {
            let after = skip_name(m, at)?;
            let (rtype, rdlen) = (be16(m, after)?, usize::from(be16(m, after + 8)?));
            let rdata = after + 10;
            if rdata + rdlen > m.len() {
                return Err("record cut".into());
            }
            let soa = if rtype == T_SOA {
                let serial_at = skip_name(m, skip_name(m, rdata)?)?;
                Some(be32(m, serial_at)?)
            } else {
                None
            };
            self.record(soa)?;
            at = rdata + rdlen;
        }
        if self.records == 1 && client.is_some() && self.serial == client {
            self.done = true;
        }
        Ok(())
    }

    fn record(&mut self, soa: Option<u32>) -> Result<(), String> {
        if self.done {
            return Err("records after the closing SOA".into());
        }
        self.records += 1;
        match (self.records, self.serial, soa) {
            (1, _, Some(s)) => self.serial = Some(s),
            (1, _, None) => return Err("the first record is not a SOA".into()),
            (2, Some(first), Some(s)) if s != first => self.incremental = true,
            _ => {}
        }
        if self.records > 1 && soa.is_some() && soa == self.serial {
            self.closing += 1;
            self.done = self.closing == if self.incremental { 2 } else { 1 };
        }
        Ok(())
    }
}

/// What one transfer read.
#[derive(Debug, Clone, Copy, Default)]
struct Xfr {
    /// Query written → first message read.
    first: Duration,
    /// Query written → last message read.
    took: Duration,
    /// Octets read, the 2-octet length prefixes included.
    bytes: u64,
    messages: u64,
    records: u64,
    /// The serial of the version sent.
    serial: u32,
    incremental: bool,
}

/// Sends `query` over a new TCP connection to `server` and reads the transfer to its end;
/// `client` is the serial an IXFR asks from. Adds the octets read to `progress` as they come.
fn transfer(
    server: SocketAddr,
    query: &[u8],
    client: Option<u32>,
    progress: &AtomicU64,
) -> Result<Xfr, String> {
    let stream = TcpStream::connect_timeout(&server, Duration::from_secs(5))
        .map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(READ_TIMEOUT)).ok();
    stream.set_write_timeout(Some(READ_TIMEOUT)).ok();
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(query);
    let mut rd = BufReader::with_capacity(1 << 17, &stream);
    let t0 = Instant::now();
    (&stream)
        .write_all(&framed)
        .map_err(|e| format!("write: {e}"))?;
    let mut x = Xfr::default();
    let mut follow = Follow::default();
    let mut msg = vec![0u8; 65_535];
    while !follow.done {
        if x.messages >= MAX_MESSAGES || t0.elapsed() > XFR_TIMEOUT {
            return Err(format!(
                "not over after {} messages, {:?}",
                x.messages,
                t0.elapsed()
            ));
        }
        let mut len = [0u8; 2];
        rd.read_exact(&mut len)
            .map_err(|e| format!("read after {} messages: {e}", x.messages))?;
        let len = usize::from(u16::from_be_bytes(len));
        rd.read_exact(&mut msg[..len])
            .map_err(|e| format!("read: {e}"))?;
        if x.messages == 0 {
            x.first = t0.elapsed();
        }
        x.messages += 1;
        x.bytes += 2 + len as u64;
        progress.fetch_add(2 + len as u64, Ordering::Relaxed);
        follow.message(&msg[..len], client)?;
    }
    x.took = t0.elapsed();
    x.records = follow.records;
    x.serial = follow.serial.unwrap_or_default();
    x.incremental = follow.incremental;
    Ok(x)
}

/// One transfer that must succeed.
fn transfer_once(server: SocketAddr, query: &[u8], client: Option<u32>, who: &str) -> Xfr {
    transfer(server, query, client, &AtomicU64::new(0))
        .unwrap_or_else(|e| panic!("transfer from {who}: {e}"))
}

/// The SOA serial `server` answers over UDP, if it answers within half a second.
fn udp_soa(server: SocketAddr) -> Option<u32> {
    let sock = UdpSocket::bind("127.0.0.1:0").ok()?;
    sock.connect(server).ok()?;
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    let mut q = Vec::new();
    question(&mut q, 0x50a0, T_SOA, 0, ZONE);
    sock.send(&q).ok()?;
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).ok()?;
    let mut follow = Follow::default();
    follow.message(&buf[..n], None).ok()?;
    follow.serial
}

// ---------------------------------------------------------------------------------------------
// 3. AXFR, ours and Knot's

/// One server's AXFR of one round, with its memory.
#[derive(Debug, Clone, Copy)]
struct AxfrRun {
    x: Xfr,
    /// VmRSS just before.
    rss_before: u64,
    /// VmHWM just after, reset just before (the peak during the transfer); the process's
    /// lifetime peak when the reset failed.
    peak: u64,
    /// VmRSS just after.
    rss_after: u64,
    peak_reset: bool,
}

struct AxfrRounds {
    ours: Vec<AxfrRun>,
    knot: Vec<AxfrRun>,
}

fn axfr_with_memory(server: SocketAddr, pid: u32, who: &str) -> AxfrRun {
    let status = format!("/proc/{pid}/status");
    // "5" resets the peak resident set size to the current one (proc(5)).
    let peak_reset = std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
    let (rss_before, _) = rss_of(&status);
    let x = transfer_once(server, &axfr_query(), None, who);
    let (rss_after, peak) = rss_of(&status);
    AxfrRun {
        x,
        rss_before,
        peak,
        rss_after,
        peak_reset,
    }
}

fn axfr_rounds(ours: &Ours, knot: &Knot, rounds: usize) -> AxfrRounds {
    let mut r = AxfrRounds {
        ours: Vec::new(),
        knot: Vec::new(),
    };
    for round in 1..=rounds {
        let o = axfr_with_memory(ours.dns, ours.child.0.id(), "clusterset-dns");
        let k = axfr_with_memory(knot.dns, knot.child.0.id(), "knotd");
        println!(
            "[round {round}] AXFR ours {:.3} s (first message {:.3} s), {} records, {:.1} MiB, RSS {:.0} → peak {:.0} MiB; \
             Knot {:.3} s (first message {:.3} s), {} records, {:.1} MiB, RSS {:.0} → peak {:.0} MiB",
            o.x.took.as_secs_f64(),
            o.x.first.as_secs_f64(),
            o.x.records,
            mib(o.x.bytes),
            mib(o.rss_before),
            mib(o.peak),
            k.x.took.as_secs_f64(),
            k.x.first.as_secs_f64(),
            k.x.records,
            mib(k.x.bytes),
            mib(k.rss_before),
            mib(k.peak),
        );
        r.ours.push(o);
        r.knot.push(k);
    }
    r
}

// ---------------------------------------------------------------------------------------------
// 3b. A stock secondary

/// A Knot secondary of one primary, with Knot's default timeouts.
#[derive(Debug)]
struct Secondary {
    /// Start → the zone answered, when it was.
    loaded: Option<Duration>,
    /// The transfers from the primary Knot logged as tried, and how the last failed.
    attempts: usize,
    failure: Option<String>,
}

#[derive(Debug)]
struct Secondaries {
    ours: Secondary,
    knot: Secondary,
}

/// Starts knotd under `dir` on `port` as a secondary of `primary` (default timeouts: it waits
/// 5 s at most for each message of a transfer, `tcp-remote-io-timeout`; NOTIFY taken from
/// 127.0.0.1) and waits up to `timeout` for it to answer the zone's SOA. Returns the secondary
/// still running: the caller drops it when done.
fn secondary(
    dir: &Path,
    primary: SocketAddr,
    port: u16,
    timeout: Duration,
) -> (Secondary, ChildGuard) {
    let d = dir.display();
    std::fs::create_dir_all(dir.join("run")).expect("secondary dirs");
    let conf = format!(
        "server:\n    rundir: \"{d}/run\"\n    listen: 127.0.0.1@{port}\n    background-workers: 1\n\
         database:\n    storage: \"{d}\"\n\
         log:\n  - target: stderr\n    any: info\n\
         remote:\n  - id: primary\n    address: {}@{}\n\
         acl:\n  - id: from_primary\n    address: 127.0.0.1\n    action: notify\n\
         zone:\n  - domain: {ZONE}\n    master: primary\n    acl: from_primary\n    storage: \"{d}\"\n\
         \x20   zonefile-sync: -1\n    journal-content: none\n    semantic-checks: off\n",
        primary.ip(),
        primary.port()
    );
    let conf_path = dir.join("knot.conf");
    std::fs::write(&conf_path, conf).expect("secondary knot.conf");
    let log = dir.join("knot.log");
    let started = Instant::now();
    let mut child = ChildGuard(
        Command::new(program("knotd"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("secondary log"))
            .spawn()
            .expect("start knotd as a secondary"),
    );
    let server = SocketAddr::from(([127, 0, 0, 1], port));
    let mut loaded = None;
    while started.elapsed() < timeout {
        if udp_soa(server).is_some() {
            loaded = Some(started.elapsed());
            break;
        }
        let exited = child.0.try_wait().ok().flatten();
        assert!(
            exited.is_none(),
            "the secondary knotd exited ({exited:?}): {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    // One line per attempt: `[zone] refresh, remote primary, address …, failed (…)`.
    let mut refreshes = text
        .lines()
        .filter(|l| l.contains("refresh, remote") && l.contains(", address "));
    let s = Secondary {
        loaded,
        attempts: refreshes.clone().count(),
        failure: refreshes
            .rfind(|l| l.contains("failed"))
            .and_then(|l| l.split(", failed").nth(1))
            .map(|why| format!("failed{why}")),
    };
    (s, child)
}

/// Waits (a minute at most) until process `pid` takes less than 5 % of a core over half a
/// second.
fn wait_idle(pid: u32) {
    let ticks = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // After the command's closing parenthesis: utime and stime are fields 12 and 13.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
    };
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        let before = ticks();
        std::thread::sleep(Duration::from_millis(500));
        // Clock ticks are 1/100 s: 2 ticks in half a second is 4 % of a core.
        if ticks().saturating_sub(before) <= 2 {
            return;
        }
    }
}

impl Secondary {
    fn text(&self, timeout: &str) -> String {
        match (&self.loaded, &self.failure) {
            (Some(t), _) => format!("loaded in {:.2} s", t.as_secs_f64()),
            (None, Some(why)) => format!(
                "not loaded in {timeout}: {} attempts, the last {why}",
                self.attempts
            ),
            (None, None) => format!("not loaded in {timeout}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. The UDP rate, with and without an AXFR running

/// One phase of UDP load.
#[derive(Debug, Clone, Copy, Default)]
struct Load {
    answered: u64,
    lost: u64,
    secs: f64,
    /// AXFRs completed during the phase, and octets of AXFR read.
    axfrs: u64,
    axfr_bytes: u64,
}

impl Load {
    fn qps(&self) -> f64 {
        self.answered as f64 / self.secs.max(1e-9)
    }
}

struct LoadRounds {
    alone: Vec<Load>,
    during: Vec<Load>,
}

/// A closed loop of `queries` to `server` while `go_on(time since the start)`: [`WINDOW`] in
/// flight on one socket; a wait of more than [`UDP_TIMEOUT`] counts those in flight as lost.
fn udp_load(server: SocketAddr, queries: &[Vec<u8>], go_on: &dyn Fn(Duration) -> bool) -> Load {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
    sock.connect(server).expect("connect udp");
    sock.set_read_timeout(Some(UDP_TIMEOUT))
        .expect("read timeout");
    let mut in_flight = vec![false; 1 << 16];
    let (mut outstanding, mut next, mut k) = (0usize, 0u16, 0usize);
    let mut load = Load::default();
    let mut scratch = Vec::with_capacity(512);
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    while go_on(start.elapsed()) {
        while outstanding < WINDOW {
            scratch.clear();
            scratch.extend_from_slice(&queries[k % queries.len()]);
            scratch[..2].copy_from_slice(&next.to_be_bytes());
            if sock.send(&scratch).is_ok() {
                in_flight[usize::from(next)] = true;
                outstanding += 1;
            } else {
                load.lost += 1;
            }
            (next, k) = (next.wrapping_add(1), k + 1);
        }
        match sock.recv(&mut buf) {
            Ok(n) if n >= 12 => {
                let id = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
                if std::mem::take(&mut in_flight[id]) {
                    outstanding -= 1;
                    load.answered += 1;
                }
            }
            Ok(_) => {}
            Err(_) => {
                load.lost += outstanding as u64;
                in_flight.fill(false);
                outstanding = 0;
            }
        }
    }
    load.secs = start.elapsed().as_secs_f64();
    load
}

/// The load alone for `duration`, then while another thread runs AXFRs back to back: for
/// `duration` and at least until the first AXFR is over, `rounds` times. The AXFR still
/// running when the load ends is read to its end before the next phase, so that no phase
/// alone shares the server with a transfer. `rate` names the transfer rate in the lines printed.
fn load_rounds(
    server: SocketAddr,
    names: &[String],
    rounds: usize,
    duration: Duration,
    rate: &str,
) -> LoadRounds {
    assert!(!names.is_empty(), "the zone has A records to ask");
    let queries: Vec<Vec<u8>> = names.iter().map(|n| a_query(n)).collect();
    // Unmeasured: the first touches of every name.
    udp_load(server, &queries, &|t| t < Duration::from_millis(500));
    let mut r = LoadRounds {
        alone: Vec::new(),
        during: Vec::new(),
    };
    for round in 1..=rounds {
        let alone = udp_load(server, &queries, &|t| t < duration);
        let (stop, progress, done) = (AtomicBool::new(false), AtomicU64::new(0), AtomicU64::new(0));
        let during = std::thread::scope(|s| {
            let axfrs = s.spawn(|| {
                while done.load(Ordering::Relaxed) < MAX_BACK_TO_BACK
                    && !stop.load(Ordering::Relaxed)
                {
                    transfer(server, &axfr_query(), None, &progress)
                        .unwrap_or_else(|e| panic!("AXFR during the load: {e}"));
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
            let mut load = udp_load(server, &queries, &|t| {
                (t < duration || done.load(Ordering::Relaxed) == 0) && t < XFR_TIMEOUT
            });
            load.axfr_bytes = progress.load(Ordering::Relaxed);
            load.axfrs = done.load(Ordering::Relaxed);
            stop.store(true, Ordering::Relaxed);
            axfrs.join().expect("AXFR thread");
            load
        });
        println!(
            "[round {round}, {rate}] UDP alone {:.0} q/s for {:.1} s ({} lost); during AXFRs {:.0} q/s for {:.1} s \
             ({} lost; {} AXFRs completed, {:.1} MiB of AXFR read)",
            alone.qps(),
            alone.secs,
            alone.lost,
            during.qps(),
            during.secs,
            during.lost,
            during.axfrs,
            mib(during.axfr_bytes)
        );
        r.alone.push(alone);
        r.during.push(during);
    }
    r
}

// ---------------------------------------------------------------------------------------------
// 5. IXFR after one endpoint change

struct Ixfr {
    /// The file written → our server answers the new address, and → an IXFR from the serial
    /// before gets more than the SOA alone (the journal recorded the change).
    ours_visible: Duration,
    ours_journaled: Duration,
    /// IXFR from the serial before the change: ours from its journal, Knot's from its.
    ours: Xfr,
    knot: Xfr,
    /// IXFR from the current serial.
    ours_current: Xfr,
    knot_current: Xfr,
    old_addr: String,
}

/// Waits until `server` answers [`CHANGED_NAME`] with `addr`; false when it did not within
/// `timeout`.
fn wait_addr(server: SocketAddr, addr: Ipv4Addr, timeout: Duration) -> bool {
    let name = Name::from_ascii(CHANGED_NAME).expect("name");
    let mut dns = Dns::new(server);
    let started = Instant::now();
    while started.elapsed() < timeout {
        if dns.a(&name).is_some_and(|a| a.contains(&addr)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// The serial of the SOA record in a zone file.
fn file_serial(path: &Path) -> u32 {
    let text = std::fs::read_to_string(path).expect("zone file");
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(3) == Some(&"SOA")).then(|| f.get(6)?.parse().ok())?
        })
        .expect("a SOA in the zone file")
}

/// Gives the changed endpoint (the first of [`CHANGED_FILE`]) the address `to`: the file
/// written aside (hidden names are not read by the file source), then renamed in. Returns the
/// address it had and the instant of the rename.
fn change_endpoint(zones: &Path, to: Ipv4Addr) -> (String, Instant) {
    let path = zones.join(CHANGED_FILE);
    let text = std::fs::read_to_string(&path).expect("the changed file");
    let old_addr = text
        .split("- addresses: [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("an endpoint address")
        .to_owned();
    let changed = text.replacen(
        &format!("- addresses: [{old_addr}]"),
        &format!("- addresses: [{to}]"),
        1,
    );
    let aside = path.with_file_name(".changed.yaml.tmp");
    std::fs::write(&aside, changed).expect("write the change");
    let t = Instant::now();
    std::fs::rename(&aside, &path).expect("rename the change in");
    (old_addr, t)
}

/// `timeout` bounds each server's wait for the change.
fn one_change(
    ours: &Ours,
    knot: &Knot,
    (zones, zone_file): (&Path, &Path),
    timeout: Duration,
) -> Ixfr {
    let ours_before = udp_soa(ours.dns).expect("our SOA");
    let knot_before = udp_soa(knot.dns).expect("Knot's SOA");

    let (old_addr, t) = change_endpoint(zones, NEW_ADDR);
    assert!(
        wait_addr(ours.dns, NEW_ADDR, timeout),
        "clusterset-dns did not answer {NEW_ADDR} for {CHANGED_NAME} within {timeout:?}"
    );
    let ours_visible = t.elapsed();
    let ours_after = udp_soa(ours.dns).expect("our SOA");
    println!(
        "one endpoint change ({old_addr} → {NEW_ADDR}) answered by us after {:.3} s; serial {ours_before} → {ours_after}",
        ours_visible.as_secs_f64()
    );
    // The journal records a new version after the query path answers it; an IXFR meanwhile is
    // told it is current (the SOA alone, of its serial). Asked again until it is not.
    let mut ours_ixfr = Xfr::default();
    for _ in 0..timeout.as_millis() / 10 + 1 {
        ours_ixfr = transfer_once(
            ours.dns,
            &ixfr_query(ours_before),
            Some(ours_before),
            "clusterset-dns (IXFR)",
        );
        if ours_ixfr.records > 1 || ours_ixfr.serial != ours_before || t.elapsed() > timeout {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let ours_journaled = t.elapsed();
    let ours_current = transfer_once(
        ours.dns,
        &ixfr_query(ours_ixfr.serial),
        Some(ours_ixfr.serial),
        "clusterset-dns (IXFR, current)",
    );

    // Knot: the same change as a new dump of its zone file, loaded as a difference (Knot
    // takes a file whose serial moved forward; the dump's is the clock's).
    let old_serial = file_serial(zone_file);
    for _ in 0..5 {
        dump(zones, zone_file);
        if file_serial(zone_file) > old_serial {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    knot.reload();
    assert!(
        wait_addr(knot.dns, NEW_ADDR, timeout),
        "knotd did not answer {NEW_ADDR} for {CHANGED_NAME} within {timeout:?}: {}",
        knot.log_text()
    );
    let knot_ixfr = transfer_once(
        knot.dns,
        &ixfr_query(knot_before),
        Some(knot_before),
        "knotd (IXFR)",
    );
    let knot_current = transfer_once(
        knot.dns,
        &ixfr_query(knot_ixfr.serial),
        Some(knot_ixfr.serial),
        "knotd (IXFR, current)",
    );
    println!(
        "IXFR after the change: ours {} B, {} records ({}); Knot's {} B, {} records ({})",
        ours_ixfr.bytes,
        ours_ixfr.records,
        if ours_ixfr.incremental {
            "incremental"
        } else {
            "whole zone"
        },
        knot_ixfr.bytes,
        knot_ixfr.records,
        if knot_ixfr.incremental {
            "incremental"
        } else {
            "whole zone"
        },
    );
    Ixfr {
        ours_visible,
        ours_journaled,
        ours: ours_ixfr,
        knot: knot_ixfr,
        ours_current,
        knot_current,
        old_addr,
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Change → a notified secondary answers it

/// A series of changes, each timed from its rename to the primary and to its notified
/// secondary answering it.
#[derive(Debug, Default)]
struct Series {
    /// How many changes were asked for, and how many were made.
    asked: usize,
    made: usize,
    /// The secondary's start → its first load of the zone.
    loaded: Option<Duration>,
    /// The rename → the primary answers the new address, and the secondary does (a change
    /// either missed within its wait is left out, and counted in `missed`).
    primary: Vec<Duration>,
    secondary: Vec<Duration>,
    missed: usize,
    /// The transfers the primary served in the series (ours only, from `/metrics`):
    /// incremental IXFRs, and whole zones (AXFR, or IXFR answered with the zone).
    incremental: Option<u64>,
    full: Option<u64>,
    /// Why the series stopped short or was skipped.
    note: Option<String>,
}

#[derive(Debug)]
struct Notified {
    ours: Series,
    knot: Series,
}

/// From `t0`, polls `primary` and `secondary` until each answers [`CHANGED_NAME`] with `addr`,
/// `timeout` at most: the time each took.
fn wait_both(
    (primary, secondary): (SocketAddr, SocketAddr),
    addr: Ipv4Addr,
    t0: Instant,
    timeout: Duration,
) -> (Option<Duration>, Option<Duration>) {
    let name = Name::from_ascii(CHANGED_NAME).expect("name");
    let (mut p, mut s) = (Dns::new(primary), Dns::new(secondary));
    let (mut at_p, mut at_s) = (None, None);
    while (at_p.is_none() || at_s.is_none()) && t0.elapsed() < timeout {
        if at_p.is_none() && p.a(&name).is_some_and(|a| a.contains(&addr)) {
            at_p = Some(t0.elapsed());
        }
        if at_s.is_none() && s.a(&name).is_some_and(|a| a.contains(&addr)) {
            at_s = Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    (at_p, at_s)
}

/// The address change `i` of a series gives: [`ALT_ADDR`], [`NEW_ADDR`], … (step 5 left
/// [`NEW_ADDR`]).
fn series_addr(i: usize) -> Ipv4Addr {
    if i.is_multiple_of(2) {
        ALT_ADDR
    } else {
        NEW_ADDR
    }
}

/// Records one change's times in `series`; prints them.
fn note_change(
    series: &mut Series,
    who: &str,
    i: usize,
    (p, s): (Option<Duration>, Option<Duration>),
) {
    series.made += 1;
    let text = |d: Option<Duration>| d.map_or_else(|| "never".into(), ms);
    println!(
        "[{who} change {}] → {}: primary answers after {}, its secondary after {}",
        i + 1,
        series_addr(i),
        text(p),
        text(s)
    );
    match (p, s) {
        (Some(p), Some(s)) => {
            series.primary.push(p);
            series.secondary.push(s);
        }
        _ => series.missed += 1,
    }
}

/// A Knot secondary kept running, the NOTIFY target of its primary.
struct Follower {
    _child: ChildGuard,
    dns: SocketAddr,
    loaded: Secondary,
    log: PathBuf,
}

impl Follower {
    /// Starts the secondary of `primary` under `dir` on `port` and waits (at most `timeout`)
    /// for it to load the zone.
    fn start(dir: &Path, primary: SocketAddr, port: u16, timeout: Duration) -> Self {
        let (loaded, child) = secondary(dir, primary, port, timeout);
        println!(
            "the notified Knot secondary of {primary}: {}",
            loaded.text(&format!("{timeout:?}"))
        );
        Follower {
            _child: child,
            dns: SocketAddr::from(([127, 0, 0, 1], port)),
            loaded,
            log: dir.join("knot.log"),
        }
    }

    /// Its log's lines that say something failed or was retried (at most 10).
    fn troubles(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter(|l| {
                let l = l.to_ascii_lowercase();
                (l.contains("fail") || l.contains("error") || l.contains("retry"))
                    && !l.contains("(not exists)")
            })
            .take(10)
            .map(str::to_owned)
            .collect()
    }

    /// Whether it loaded; then whether it answers the address step 5 left (at most `timeout`).
    fn ready(&self, series: &mut Series, timeout: Duration) -> bool {
        series.loaded = self.loaded.loaded;
        if self.loaded.loaded.is_none() {
            series.note = Some(format!("the secondary did not load: {:?}", self.loaded));
            return false;
        }
        if !wait_addr(self.dns, NEW_ADDR, timeout) {
            series.note = Some("the secondary never answered the address of step 5".into());
            return false;
        }
        true
    }
}

/// Makes `n` changes of the endpoint of step 5, one after the other, each waited for (at most
/// `timeout`) on our server and on its notified secondary `follower`.
fn our_changes(
    ours: &Ours,
    zones: &Path,
    follower: &Follower,
    (n, timeout): (usize, Duration),
) -> Series {
    let mut series = Series {
        asked: n,
        ..Series::default()
    };
    if !follower.ready(&mut series, timeout) {
        return series;
    }
    let counted = |outcome: &str, kind: &str| {
        ours.metric(
            "clusterset_dns_zone_transfers_total",
            &[
                &format!("kind=\"{kind}\""),
                &format!("outcome=\"{outcome}\""),
            ],
        )
    };
    let whole = || Some(counted("full", "axfr")? + counted("full", "ixfr")?);
    let (incremental, full) = (counted("incremental", "ixfr"), whole());
    for i in 0..n {
        let addr = series_addr(i);
        let (_, t0) = change_endpoint(zones, addr);
        let times = wait_both((ours.dns, follower.dns), addr, t0, timeout);
        note_change(&mut series, "ours", i, times);
    }
    series.incremental =
        Some(counted("incremental", "ixfr").unwrap_or(0) - incremental.unwrap_or(0));
    series.full = Some(whole().unwrap_or(0) - full.unwrap_or(0));
    for l in follower.troubles() {
        println!("  the notified secondary of ours logged: {l}");
    }
    series
}

/// Gives [`CHANGED_NAME`]'s A record in Knot's zone file the address `to` and the SOA the next
/// serial, written aside and renamed in; returns the instant of the rename.
fn change_zone_file(zone_file: &Path, to: Ipv4Addr) -> Instant {
    let text = std::fs::read_to_string(zone_file).expect("Knot's zone file");
    let mut out = String::with_capacity(text.len() + 16);
    let (mut soa, mut a) = (false, false);
    for line in text.split_inclusive('\n') {
        let f: Vec<&str> = line.split_whitespace().collect();
        if !soa && f.get(3) == Some(&"SOA") && f.len() >= 7 {
            let serial: u32 = f[6].parse().expect("the SOA serial");
            let mut g: Vec<String> = f.iter().map(|s| (*s).to_owned()).collect();
            g[6] = serial.wrapping_add(1).to_string();
            out.push_str(&g.join(" "));
            out.push('\n');
            soa = true;
        } else if !a && f.first() == Some(&CHANGED_NAME) && f.get(3) == Some(&"A") {
            out.push_str(&format!("{} {} {} A {to}\n", f[0], f[1], f[2]));
            a = true;
        } else {
            out.push_str(line);
        }
    }
    assert!(
        soa && a,
        "Knot's zone file has its SOA and the A record of {CHANGED_NAME}"
    );
    let aside = zone_file.with_extension("new");
    std::fs::write(&aside, out).expect("write the zone file aside");
    let t = Instant::now();
    std::fs::rename(&aside, zone_file).expect("rename the zone file in");
    t
}

/// The same series with Knot as the primary and `follower` its notified secondary: at most
/// `n` changes of its zone file, each followed by `knotc zone-reload`, while the series has
/// taken less than `budget`.
fn knot_series(
    knot: &Knot,
    zone_file: &Path,
    follower: Option<&Follower>,
    (n, timeout): (usize, Duration),
    budget: Duration,
) -> Series {
    let mut series = Series {
        asked: n,
        ..Series::default()
    };
    let Some(follower) = follower else {
        series.note = Some("skipped (TRANSFER_KNOT_CHANGES=0)".into());
        return series;
    };
    if !follower.ready(&mut series, timeout) {
        return series;
    }
    let started = Instant::now();
    for i in 0..n {
        if started.elapsed() > budget {
            series.note = Some(format!(
                "stopped after {} changes: the series took more than {budget:?}",
                series.made
            ));
            break;
        }
        let addr = series_addr(i);
        let t0 = change_zone_file(zone_file, addr);
        knot.reload();
        let times = wait_both((knot.dns, follower.dns), addr, t0, timeout);
        note_change(&mut series, "Knot", i, times);
    }
    for l in follower.troubles() {
        println!("  the notified secondary of Knot logged: {l}");
    }
    series
}

// ---------------------------------------------------------------------------------------------
// The report

struct Facts {
    endpoints: usize,
    services: usize,
    file_records: u64,
    rounds: usize,
    load_secs: usize,
    /// Our server's RSS `settle_secs` after its last transfer.
    settle_secs: usize,
    settled: u64,
    /// How long each secondary was given to load the zone.
    secondary_secs: u64,
    smoke: bool,
}

/// Process `pid`'s VmRSS after `secs` seconds of nothing asked.
fn settled_rss(pid: u32, secs: usize) -> u64 {
    let status = format!("/proc/{pid}/status");
    for _ in 0..secs {
        std::thread::sleep(Duration::from_secs(1));
    }
    rss_of(&status).0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn knot_version() -> String {
    Command::new(program("knotd"))
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .last()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "?".into())
}

/// An AXFR series: the medians of query → last message and query → first message (s); the
/// RSS (bytes) before the first transfer (the zone loaded, nothing transferred yet), its peak
/// during the first, the highest peak of any, and the RSS after the last.
struct AxfrSummary {
    took: f64,
    first: f64,
    loaded: u64,
    first_peak: u64,
    peak: u64,
    after: u64,
    last: Xfr,
    peak_reset: bool,
}

fn summary(runs: &[AxfrRun]) -> AxfrSummary {
    let m = |f: &dyn Fn(&AxfrRun) -> f64| median(runs.iter().map(f).collect());
    AxfrSummary {
        took: m(&|r| r.x.took.as_secs_f64()),
        first: m(&|r| r.x.first.as_secs_f64()),
        loaded: runs.first().map_or(0, |r| r.rss_before),
        first_peak: runs.first().map_or(0, |r| r.peak),
        peak: runs.iter().map(|r| r.peak).max().unwrap_or_default(),
        after: runs.last().map_or(0, |r| r.rss_after),
        last: runs.last().expect("a round").x,
        peak_reset: runs.iter().all(|r| r.peak_reset),
    }
}

/// Everything measured.
struct Figures {
    /// Both unlimited.
    axfr: AxfrRounds,
    /// Ours at the default rate, once.
    axfr_default: AxfrRun,
    reload: Reload,
    secondaries: Secondaries,
    load_unlimited: LoadRounds,
    load_default: LoadRounds,
    ixfr: Ixfr,
    notified: Notified,
}

/// Nearest-rank quantile `p` of `samples`, in seconds; 0 when there is none.
fn quantile_s(samples: &[Duration], p: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64()
}

/// `p50 / p99 / max` in milliseconds (nearest rank).
fn p50_p99_max_ms(samples: &[Duration]) -> String {
    if samples.is_empty() {
        return "–".into();
    }
    format!(
        "{:.0} / {:.0} / {:.0} ms",
        1e3 * quantile_s(samples, 0.5),
        1e3 * quantile_s(samples, 0.99),
        1e3 * quantile_s(samples, 1.0)
    )
}

impl Series {
    /// How many changes the figures hold, out of how many asked; and why it stopped short.
    fn made_text(&self) -> String {
        let mut t = format!("{} of {} changes", self.primary.len(), self.asked);
        if self.missed > 0 {
            t.push_str(&format!(", {} not answered in time", self.missed));
        }
        if let Some(note) = &self.note {
            t.push_str(&format!("; {note}"));
        }
        t
    }
}

/// Prints the table and the `RESULT` line, then checks what every run must hold.
fn report(f: &Facts, figures: &Figures, file_records: u64) {
    let Figures {
        axfr,
        axfr_default,
        reload,
        secondaries,
        load_unlimited,
        load_default,
        ixfr,
        notified,
    } = figures;
    let (o, k) = (summary(&axfr.ours), summary(&axfr.knot));
    let alone: Vec<f64> = load_unlimited
        .alone
        .iter()
        .chain(&load_default.alone)
        .map(Load::qps)
        .collect();
    let qps_alone = median(alone);
    let qps_unlimited = median(load_unlimited.during.iter().map(Load::qps).collect());
    let qps_default = median(load_default.during.iter().map(Load::qps).collect());
    let axfrs_unlimited: u64 = load_unlimited.during.iter().map(|l| l.axfrs).sum();
    let axfrs_default: u64 = load_default.during.iter().map(|l| l.axfrs).sum();
    let rate = |x: &Xfr| x.records as f64 / x.took.as_secs_f64().max(1e-9);
    let xfr_size = |x: &Xfr| {
        format!(
            "{:.1} MiB, {} msgs, {} records",
            mib(x.bytes),
            x.messages,
            x.records
        )
    };
    let small = |x: &Xfr| format!("{} B, {} msgs, {} records", x.bytes, x.messages, x.records);
    let memory = |s: &AxfrSummary| {
        format!(
            "{:.0} → {:.0} → {:.0} MiB, {:.0} MiB after",
            mib(s.loaded),
            mib(s.first_peak),
            mib(s.peak),
            mib(s.after)
        )
    };
    let incremental = |x: &Xfr| {
        if x.incremental {
            "incremental, from its journal"
        } else {
            "whole zone"
        }
    };
    println!();
    println!(
        "{} endpoints ({} services, 4 clusters); zone file of {} records; Knot DNS {}; {} CPUs; \
         medians of {} alternating rounds",
        f.endpoints,
        f.services,
        f.file_records,
        knot_version(),
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        f.rounds
    );
    println!();
    println!("| measure | clusterset-dns | Knot DNS |");
    println!("|---|---|---|");
    let row = |what: &str, ours: String, knot: String| println!("| {what} | {ours} | {knot} |");
    row(
        "AXFR (both unlimited), query → last message",
        format!("{:.3} s", o.took),
        format!("{:.3} s", k.took),
    );
    row(
        "AXFR (both unlimited), query → first message",
        format!("{:.3} s", o.first),
        format!("{:.3} s", k.first),
    );
    row("AXFR size", xfr_size(&o.last), xfr_size(&k.last));
    row(
        "AXFR records per second",
        format!("{:.0}", rate(&o.last)),
        format!("{:.0}", rate(&k.last)),
    );
    row(
        &if o.peak_reset && k.peak_reset {
            format!(
                "server RSS: loaded → peak during the first AXFR → highest peak of {} AXFRs",
                f.rounds
            )
        } else {
            "server RSS: loaded → lifetime peaks (the peak reset failed)".to_owned()
        },
        memory(&o),
        memory(&k),
    );
    row(
        &format!(
            "AXFR at our default {DEFAULT_RATE_MB} MiB/s (config file reloaded in {:.2} s): last message, first message, size, RSS → peak",
            reload.took.as_secs_f64()
        ),
        format!(
            "{:.3} s, {:.3} s, {:.1} MiB, {:.0} → {:.0} MiB",
            axfr_default.x.took.as_secs_f64(),
            axfr_default.x.first.as_secs_f64(),
            mib(axfr_default.x.bytes),
            mib(axfr_default.rss_before),
            mib(axfr_default.peak)
        ),
        "–".into(),
    );
    let waited = format!("{} s", f.secondary_secs);
    row(
        "a Knot secondary (default timeouts) of each, start → zone loaded (ours at the default rate)",
        secondaries.ours.text(&waited),
        secondaries.knot.text(&waited),
    );
    row(
        &format!("UDP queries/s, {} s, no AXFR", f.load_secs),
        format!("{qps_alone:.0}"),
        "–".into(),
    );
    let during = |l: &LoadRounds, qps: f64, n: u64| {
        format!(
            "{qps:.0} ({:.0} % of alone; {n} AXFRs completed in {} phases of {:.1} s)",
            100.0 * qps / qps_alone.max(1e-9),
            l.during.len(),
            median(l.during.iter().map(|l| l.secs).collect()),
        )
    };
    row(
        "UDP queries/s, AXFRs back to back, unlimited",
        during(load_unlimited, qps_unlimited, axfrs_unlimited),
        "–".into(),
    );
    row(
        &format!("UDP queries/s, AXFRs back to back, at the default {DEFAULT_RATE_MB} MiB/s"),
        during(load_default, qps_default, axfrs_default),
        "–".into(),
    );
    row(
        "IXFR after one endpoint change",
        format!("{} ({})", small(&ixfr.ours), incremental(&ixfr.ours)),
        format!("{} ({})", small(&ixfr.knot), incremental(&ixfr.knot)),
    );
    row(
        "IXFR from the current serial",
        small(&ixfr.ours_current),
        small(&ixfr.knot_current),
    );
    row(
        "endpoint changed in a file → new address answered; → IXFR has it (journal recorded)",
        format!(
            "{:.3} s; {:.3} s",
            ixfr.ours_visible.as_secs_f64(),
            ixfr.ours_journaled.as_secs_f64()
        ),
        "– (reloaded by knotc)".into(),
    );
    let (no, nk) = (&notified.ours, &notified.knot);
    row(
        "a notified Knot secondary, start → zone loaded (ours unlimited)",
        no.loaded.map_or_else(
            || "not loaded".into(),
            |t| format!("{:.2} s", t.as_secs_f64()),
        ),
        nk.loaded.map_or_else(
            || "not loaded".into(),
            |t| format!("{:.2} s", t.as_secs_f64()),
        ),
    );
    row(
        "change written → primary answers it, p50 / p99 / max",
        format!("{} ({})", p50_p99_max_ms(&no.primary), no.made_text()),
        format!(
            "{} ({}; file edited, knotc zone-reload)",
            p50_p99_max_ms(&nk.primary),
            nk.made_text()
        ),
    );
    row(
        "change written → its Knot secondary answers it (NOTIFY, IXFR), p50 / p99 / max",
        format!(
            "{} ({} incremental transfers, {} whole zones)",
            p50_p99_max_ms(&no.secondary),
            no.incremental.map_or("?".into(), |n| n.to_string()),
            no.full.map_or("?".into(), |n| n.to_string()),
        ),
        p50_p99_max_ms(&nk.secondary),
    );
    row(
        &format!("server RSS {} s after the last transfer", f.settle_secs),
        format!("{:.0} MiB", mib(f.settled)),
        "–".into(),
    );
    println!();
    println!(
        "The IXFR row: both answer from a journal, with the one change ({} → {NEW_ADDR}); the change \
         series alternate {ALT_ADDR} and {NEW_ADDR}; p99 is the nearest rank (of {} changes, the {}th).",
        ixfr.old_addr,
        notified.ours.primary.len(),
        ((0.99 * notified.ours.primary.len() as f64).ceil() as usize).max(1)
    );
    let s3 = |d: &[Duration], p: f64| format!("{:.3}", quantile_s(d, p));
    println!(
        "RESULT transfer endpoints={} file_records={} rounds={} ours_axfr_s={:.3} knot_axfr_s={:.3} \
         ours_axfr_first_s={:.3} knot_axfr_first_s={:.3} ours_axfr_bytes={} knot_axfr_bytes={} \
         ours_axfr_messages={} knot_axfr_messages={} ours_axfr_records={} knot_axfr_records={} \
         ours_rss_loaded_bytes={} ours_rss_first_peak_bytes={} ours_rss_peak_bytes={} ours_rss_after_bytes={} \
         knot_rss_loaded_bytes={} knot_rss_peak_bytes={} \
         ours_axfr_default_s={:.3} ours_axfr_default_first_s={:.3} ours_axfr_default_peak_bytes={} config_reload_s={:.3} \
         ours_ixfr_bytes={} ours_ixfr_records={} ours_ixfr_incremental={} knot_ixfr_bytes={} knot_ixfr_records={} \
         ours_ixfr_current_bytes={} knot_ixfr_current_bytes={} change_visible_s={:.3} change_journaled_s={:.3} \
         ours_rss_settled_bytes={} settle_s={} \
         udp_qps_alone={qps_alone:.0} udp_qps_axfr_unlimited={qps_unlimited:.0} udp_qps_axfr_default={qps_default:.0} \
         axfrs_during_load_unlimited={axfrs_unlimited} axfrs_during_load_default={axfrs_default} \
         ours_secondary_loaded_s={} knot_secondary_loaded_s={} \
         changes={} ours_change_p50_s={} ours_change_p99_s={} ours_change_max_s={} \
         ours_secondary_change_p50_s={} ours_secondary_change_p99_s={} ours_secondary_change_max_s={} \
         ours_secondary_incremental={} ours_secondary_full={} \
         knot_changes={} knot_change_p50_s={} knot_change_p99_s={} knot_change_max_s={} \
         knot_secondary_change_p50_s={} knot_secondary_change_p99_s={} knot_secondary_change_max_s={}",
        f.endpoints,
        f.file_records,
        f.rounds,
        o.took,
        k.took,
        o.first,
        k.first,
        o.last.bytes,
        k.last.bytes,
        o.last.messages,
        k.last.messages,
        o.last.records,
        k.last.records,
        o.loaded,
        o.first_peak,
        o.peak,
        o.after,
        k.loaded,
        k.peak,
        axfr_default.x.took.as_secs_f64(),
        axfr_default.x.first.as_secs_f64(),
        axfr_default.peak,
        reload.took.as_secs_f64(),
        ixfr.ours.bytes,
        ixfr.ours.records,
        ixfr.ours.incremental,
        ixfr.knot.bytes,
        ixfr.knot.records,
        ixfr.ours_current.bytes,
        ixfr.knot_current.bytes,
        ixfr.ours_visible.as_secs_f64(),
        ixfr.ours_journaled.as_secs_f64(),
        f.settled,
        f.settle_secs,
        loaded_s(&secondaries.ours),
        loaded_s(&secondaries.knot),
        no.primary.len(),
        s3(&no.primary, 0.5),
        s3(&no.primary, 0.99),
        s3(&no.primary, 1.0),
        s3(&no.secondary, 0.5),
        s3(&no.secondary, 0.99),
        s3(&no.secondary, 1.0),
        no.incremental.unwrap_or(0),
        no.full.unwrap_or(0),
        nk.primary.len(),
        s3(&nk.primary, 0.5),
        s3(&nk.primary, 0.99),
        s3(&nk.primary, 1.0),
        s3(&nk.secondary, 0.5),
        s3(&nk.secondary, 0.99),
        s3(&nk.secondary, 1.0),
    );
    check(figures, file_records, f.smoke);
}

/// Start → loaded in seconds, or `none`.
fn loaded_s(s: &Secondary) -> String {
    s.loaded
        .map_or_else(|| "none".into(), |t| format!("{:.3}", t.as_secs_f64()))
}

/// What every run must hold; in the smoke run, also that both secondaries of step 4 loaded the
/// small zone and that every change of step 7 reached both secondaries.
fn check(figures: &Figures, file_records: u64, smoke: bool) {
    let Figures {
        axfr,
        axfr_default,
        secondaries,
        load_unlimited,
        load_default,
        ixfr,
        notified,
        ..
    } = figures;
    if smoke {
        assert!(
            secondaries.ours.loaded.is_some() && secondaries.knot.loaded.is_some(),
            "both secondaries load the zone: {secondaries:?}"
        );
        for s in [&notified.ours, &notified.knot] {
            assert!(
                s.primary.len() == s.asked && s.missed == 0,
                "every change reaches the primary and its secondary: {s:?}"
            );
        }
    }
    for x in axfr
        .ours
        .iter()
        .chain(&axfr.knot)
        .chain([axfr_default])
        .map(|r| r.x)
    {
        // The file's records, the SOA once more at the end; our server may add the NS glue of
        // its own address, which `dump` without `--ns-addr` lacks.
        assert!(
            x.records > file_records && x.records <= file_records + 3,
            "an AXFR of {} records from a zone file of {file_records}",
            x.records
        );
    }
    assert!(
        load_unlimited
            .alone
            .iter()
            .chain(&load_unlimited.during)
            .chain(&load_default.alone)
            .chain(&load_default.during)
            .all(|l| l.answered > 0),
        "every load phase had answers"
    );
    // Ours comes from the journal: the one difference, whatever the zone's size.
    assert!(
        ixfr.ours.incremental && ixfr.ours.bytes < IXFR_MAX_BYTES,
        "our IXFR after one change is incremental and under {IXFR_MAX_BYTES} octets: {:?}",
        ixfr.ours
    );
    assert!(ixfr.ours.serial > 0 && ixfr.ours_current.records == 1);
    assert!(ixfr.knot_current.records == 1);
    // The secondary followed our changes by IXFR from the journal.
    if !notified.ours.secondary.is_empty() {
        assert!(
            notified.ours.incremental.unwrap_or(0) > 0,
            "the notified secondary fetched our changes by incremental IXFR: {:?}",
            notified.ours
        );
    }
}
