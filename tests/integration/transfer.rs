//! Zone transfers to real secondaries (issue 30): Knot DNS (`knotd`) and
//! NSD, started on loopback as secondaries of our server (`serve --zones
//! zones/demo --allow-transfer 127.0.0.1`), each load the zone by AXFR and
//! then answer every name and type our `dump` prints exactly as we do. A
//! client `allow-transfer` does not name is refused and counted.
//!
//! Every wait is a bounded poll; everything listens and dials on loopback.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use crate::binary::{Served, bin, http_get, serve};
use crate::conformance::metric;
use crate::support::{Proto, ask, copy_tree, demo, free_port, q};

const ZONE: &str = "clusterset.local";

/// A peer server process, killed when dropped.
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `program args` with its output in `dir/<name>.log`.
fn start(dir: &Path, name: &str, program: &str, args: &[&str]) -> Peer {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log file");
    let child = Command::new(program)
        .args(args)
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{program} must be installed (Debian packages knot and nsd; .ci/run installs them): {e}")
        });
    Peer(child)
}

/// Runs `program` (from /usr/sbin where Debian puts it) with `flags` and
/// `-c <dir>/<conf_name>`, the file holding `conf`.
fn with_conf(dir: &Path, program: &str, (conf_name, conf): (&str, String), flags: &[&str]) -> Peer {
    let path = dir.join(conf_name);
    std::fs::write(&path, conf).expect("write the peer's configuration");
    let sbin = format!("/usr/sbin/{program}");
    let bin = if Path::new(&sbin).exists() {
        sbin.as_str()
    } else {
        program
    };
    let mut args = flags.to_vec();
    let path = path.to_string_lossy();
    args.extend(["-c", &path]);
    start(dir, program, bin, &args)
}

/// knotd as a secondary of `primary` on `port`.
fn knot_secondary(dir: &Path, primary: SocketAddr, port: u16) -> Peer {
    knot_keyed(dir, primary, ([127, 0, 0, 1], port).into(), None)
}

/// A TSIG key as the key files write it: name and base64 secret
/// (hmac-sha256).
type Key<'a> = (&'a str, &'a str);

/// knotd as a secondary of `primary` listening on `listen`, signing its
/// transfers and checking our NOTIFY with `key` if given.
fn knot_keyed(dir: &Path, primary: SocketAddr, listen: SocketAddr, key: Option<Key<'_>>) -> Peer {
    let (ip, port) = (listen.ip(), listen.port());
    let d = dir.display();
    let (keys, use_key) = match key {
        Some((name, secret)) => (
            format!("key:\n  - id: {name}\n    algorithm: hmac-sha256\n    secret: {secret}\n"),
            format!("    key: {name}\n"),
        ),
        None => (String::new(), String::new()),
    };
    let conf = format!(
        "server:\n    listen: {ip}@{port}\n    rundir: \"{d}\"\n    udp-workers: 1\n    tcp-workers: 1\n    background-workers: 1\n\
         database:\n    storage: \"{d}/db\"\n\
         log:\n  - target: stderr\n    any: info\n\
         {keys}\
         remote:\n  - id: primary\n    address: {}@{}\n{use_key}\
         acl:\n  - id: from_primary\n    address: 127.0.0.1\n    action: notify\n{use_key}\
         \x20 - id: transfer_out\n    address: 127.0.0.1\n    action: transfer\n\
         zone:\n  - domain: {ZONE}\n    master: primary\n    acl: [from_primary, transfer_out]\n    storage: \"{d}\"\n    zonefile-sync: -1\n    journal-content: none\n",
        primary.ip(),
        primary.port()
    );
    with_conf(dir, "knotd", ("knot.conf", conf), &[])
}

/// nsd as a secondary of `primary` on `port`.
fn nsd_secondary(dir: &Path, primary: SocketAddr, port: u16) -> Peer {
    nsd_keyed(dir, primary, port, None)
}

/// nsd as a secondary of `primary` on `port`, signing its transfers and
/// checking our NOTIFY with `key` if given.
fn nsd_keyed(dir: &Path, primary: SocketAddr, port: u16, key: Option<Key<'_>>) -> Peer {
    let d = dir.display();
    let (keys, name) = match key {
        Some((name, secret)) => (
            format!("key:\n  name: {name}\n  algorithm: hmac-sha256\n  secret: \"{secret}\"\n"),
            name,
        ),
        None => (String::new(), "NOKEY"),
    };
    let conf = format!(
        "server:\n  ip-address: 127.0.0.1\n  port: {port}\n  zonesdir: \"{d}\"\n  database: \"\"\n  pidfile: \"{d}/nsd.pid\"\n  xfrdfile: \"{d}/xfrd.state\"\n  zonelistfile: \"{d}/zone.list\"\n  username: \"\"\n  chroot: \"\"\n  verbosity: 2\n  server-count: 1\n\
         remote-control:\n  control-enable: no\n\
         {keys}\
         zone:\n  name: {ZONE}\n  zonefile: \"{d}/{ZONE}.zone\"\n  request-xfr: {}@{} {name}\n  allow-notify: 127.0.0.1 {name}\n  provide-xfr: 127.0.0.1 NOKEY\n",
        primary.ip(),
        primary.port()
    );
    with_conf(dir, "nsd", ("nsd.conf", conf), &["-d"])
}

/// BIND's named as a secondary of `primary` on `port`. BIND 9.18.28 and
/// later refuse an RRset of more than 100 records by default
/// (`max-records-per-type`), and the demo's biggest SRV RRset has more:
/// without `max-records-per-type 0` the transfer fails "too many records"
/// (docs/transfer.md says so too).
/// With `key`, its transfers are signed and our NOTIFY must be.
fn bind_secondary(dir: &Path, primary: SocketAddr, port: u16, key: Option<Key<'_>>) -> Peer {
    let d = dir.display();
    let (keys, use_key, notify_from) = match key {
        Some((name, secret)) => (
            format!("key \"{name}\" {{\n  algorithm hmac-sha256;\n  secret \"{secret}\";\n}};\n"),
            format!(" key \"{name}\""),
            format!("key \"{name}\";"),
        ),
        None => (String::new(), String::new(), "127.0.0.1;".to_owned()),
    };
    let conf = format!(
        "options {{\n  directory \"{d}\";\n  managed-keys-directory \"{d}\";\n  pid-file \"{d}/named.pid\";\n  session-keyfile \"{d}/session.key\";\n  listen-on port {port} {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n  max-records-per-type 0;\n  recursion no;\n  dnssec-validation no;\n  notify no;\n}};\n\
         controls {{ }};\n\
         {keys}\
         zone \"{ZONE}\" {{\n  type secondary;\n  primaries {{ {} port {}{use_key}; }};\n  file \"{d}/{ZONE}.db\";\n  allow-notify {{ {notify_from} }};\n  allow-transfer {{ 127.0.0.1; }};\n}};\n",
        primary.ip(),
        primary.port()
    );
    with_conf(dir, "named", ("named.conf", conf), &["-g"])
}

/// Every (name, type) `dump` prints.
fn dumped_questions(zones: &Path) -> BTreeSet<(String, String)> {
    let out = Command::new(bin())
        .args(["dump", "--zones"])
        .arg(zones)
        .args(["--local-cluster", "west"])
        .stderr(Stdio::null())
        .output()
        .expect("dump");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('$'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Some((f.first()?.to_string(), f.get(3)?.to_string()))
        })
        .collect()
}

/// The Answer section of `name` `rtype` from `server` over TCP, sorted,
/// in zone-file text; with the rcode.
async fn answers(
    server: SocketAddr,
    name: impl AsRef<str>,
    rtype: RecordType,
) -> (ResponseCode, Vec<String>) {
    let (msg, _) = ask(server, Proto::Tcp, &q(name.as_ref(), rtype)).await;
    let mut v: Vec<String> = msg
        .answers
        .iter()
        .map(|r| format!("{} {} {} {}", r.name, r.ttl, r.record_type(), r.data))
        .collect();
    v.sort();
    (msg.metadata.response_code, v)
}

/// Waits (20 s at most) until `server` answers the zone's SOA with our
/// serial: it has loaded the zone.
async fn loaded(server: SocketAddr, ours: SocketAddr, who: &str, dir: &Path) {
    let want = answers(ours, &format!("{ZONE}."), RecordType::SOA).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // Not listening yet, or reloading (NSD resets a connection while
        // its new server processes take over): not loaded yet.
        let up = std::net::TcpStream::connect_timeout(&server, Duration::from_secs(1)).is_ok();
        let asked = || tokio::spawn(answers(server, format!("{ZONE}."), RecordType::SOA));
        let got = match up {
            true => tokio::time::timeout(Duration::from_secs(2), asked())
                .await
                .ok()
                .and_then(Result::ok),
            false => None,
        };
        if got.as_ref() == Some(&want) {
            return;
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join(format!("{who}.log"))).unwrap_or_default();
            panic!("{who} did not load the zone by AXFR within 20 s: {got:?}\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `secondary` answers every dumped name and type as `ours` does.
async fn answers_as_we_do(secondary: SocketAddr, ours: SocketAddr, who: &str) {
    let questions = dumped_questions(&demo());
    assert!(questions.len() > 100, "{} questions", questions.len());
    let mut records = 0;
    for (name, rtype) in &questions {
        let rtype: RecordType = rtype.parse().expect("a type");
        let theirs = answers(secondary, name, rtype).await;
        let mine = answers(ours, name, rtype).await;
        assert_eq!(theirs, mine, "{who}: {name} {rtype}");
        assert_eq!(mine.0, ResponseCode::NoError, "{name} {rtype}");
        records += mine.1.len();
    }
    // Every dumped record came back from both (some more than once: a
    // name's own records and glue).
    assert!(records >= questions.len(), "{records} records");
}

/// Our server on a copy of the demo (which a test may change), allowing
/// 127.0.0.1 to transfer, with `extra` flags: the directory, the copy and
/// the server.
fn ours_on_a_copy(extra: &[&str]) -> (tempfile::TempDir, std::path::PathBuf, Served) {
    let dir = tempfile::tempdir().expect("tempdir");
    let zones = dir.path().join("zones");
    copy_tree(&demo(), &zones);
    let mut args = vec!["--local-cluster", "west", "--allow-transfer", "127.0.0.1"];
    args.extend_from_slice(extra);
    let ours = serve(&zones, &args);
    (dir, zones, ours)
}

fn ours_allowing(allow: &str) -> Served {
    serve(
        &demo(),
        &["--local-cluster", "west", "--allow-transfer", allow],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knot_loads_the_zone_by_axfr_and_answers_as_we_do() {
    let ours = ours_allowing("127.0.0.1");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let _knot = knot_secondary(dir.path(), ours.dns, port);
    let knot: SocketAddr = ([127, 0, 0, 1], port).into();
    loaded(knot, ours.dns, "knotd", dir.path()).await;
    answers_as_we_do(knot, ours.dns, "knot").await;
    let (_, body) = http_get(ours.admin, "/metrics");
    // Knot asks for AXFR when it holds no zone.
    assert!(transfers(&body, "axfr", "full") >= 1.0, "counted: {body}");
    let bytes = metric(&body, "clusterset_dns_zone_transfer_bytes_total");
    assert!(bytes.unwrap_or(0.0) > 10_000.0, "{bytes:?}");
    let fetched = metric(
        &body,
        "clusterset_dns_secondary_serial{secondary=\"127.0.0.1\"}",
    );
    assert_eq!(
        fetched,
        Some(f64::from(serial_number(ours.dns).await)),
        "{body}"
    );
}

/// `clusterset_dns_zone_transfers_total` of `kind` and `outcome`.
fn transfers(body: &str, kind: &str, outcome: &str) -> f64 {
    let name =
        format!("clusterset_dns_zone_transfers_total{{kind=\"{kind}\",outcome=\"{outcome}\"}}");
    metric(body, &name).unwrap_or_else(|| panic!("no {name} in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nsd_loads_the_zone_by_axfr_and_answers_as_we_do() {
    let ours = ours_allowing("127.0.0.0/8");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let _nsd = nsd_secondary(dir.path(), ours.dns, port);
    let nsd: SocketAddr = ([127, 0, 0, 1], port).into();
    loaded(nsd, ours.dns, "nsd", dir.path()).await;
    answers_as_we_do(nsd, ours.dns, "nsd").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_allow_transfer_does_not_name_is_refused_and_counted() {
    for allow in [None, Some("10.0.0.0/8")] {
        let extra: Vec<&str> = match allow {
            Some(a) => vec!["--local-cluster", "west", "--allow-transfer", a],
            None => vec!["--local-cluster", "west"],
        };
        let ours = serve(&demo(), &extra);
        let (msg, _) = ask(
            ours.dns,
            Proto::Tcp,
            &q(&format!("{ZONE}."), RecordType::AXFR),
        )
        .await;
        assert_eq!(
            msg.metadata.response_code,
            ResponseCode::Refused,
            "{allow:?}"
        );
        assert!(msg.answers.is_empty(), "{allow:?}");
        let (_, body) = http_get(ours.admin, "/metrics");
        assert_eq!(transfers(&body, "axfr", "refused"), 1.0, "{allow:?}");
        assert_eq!(transfers(&body, "axfr", "full"), 0.0, "{allow:?}");
    }
}

/// The name whose address [`move_db0`] changes.
const DB0: &str = "db-0.db-south.data.svc.clusterset.local.";

/// Moves south's `db-0` to `to` in the zones copy `zones`.
fn move_db0(zones: &Path, to: &str) {
    move_db0_from(zones, "10.40.30.10", to);
}

/// Moves south's `db-0` from `from` to `to` in the zones copy `zones`.
fn move_db0_from(zones: &Path, from: &str, to: &str) {
    let file = zones.join("south/db.yaml");
    let text = std::fs::read_to_string(&file).expect("read");
    let moved = text.replace(&format!("[{from}]"), &format!("[{to}]"));
    assert_ne!(moved, text, "db-0 is at {from}");
    std::fs::write(&file, moved).expect("write");
}

/// Polls (`within` at most) until `server` answers `name` A with `addr`;
/// how long it took.
async fn answers_addr(server: SocketAddr, name: &str, addr: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        // A secondary that reloads the zone may reset a connection (NSD's
        // new server processes take over): that answer is "not yet".
        let asked = tokio::spawn(answers(server, name.to_owned(), RecordType::A));
        let got = asked.await.map(|(_, got)| got).unwrap_or_default();
        if got.iter().any(|r| r.ends_with(&format!(" A {addr}"))) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{server} still answers {got:?} for {name}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knot_and_nsd_follow_a_change_after_our_notify() {
    let (knot_port, nsd_port) = (free_port(), free_port());
    let targets = format!("127.0.0.1:{knot_port},127.0.0.1:{nsd_port}");
    let (dir, zones, ours) = ours_on_a_copy(&["--notify", &targets]);
    let (knot_dir, nsd_dir) = (dir.path().join("knot"), dir.path().join("nsd"));
    std::fs::create_dir_all(&knot_dir).expect("mkdir");
    std::fs::create_dir_all(&nsd_dir).expect("mkdir");
    let _knot = knot_secondary(&knot_dir, ours.dns, knot_port);
    let _nsd = nsd_secondary(&nsd_dir, ours.dns, nsd_port);
    let knot: SocketAddr = ([127, 0, 0, 1], knot_port).into();
    let nsd: SocketAddr = ([127, 0, 0, 1], nsd_port).into();
    loaded(knot, ours.dns, "knotd", &knot_dir).await;
    loaded(nsd, ours.dns, "nsd", &nsd_dir).await;
    // south's db-0 moves to a new address.
    move_db0(&zones, "10.40.31.99");
    let name = DB0;
    let reloaded = answers_addr(ours.dns, name, "10.40.31.99", Duration::from_secs(10)).await;
    // Without NOTIFY they would wait for the SOA refresh (7200 s).
    let knot_took = answers_addr(knot, name, "10.40.31.99", Duration::from_secs(10)).await;
    let nsd_took = answers_addr(nsd, name, "10.40.31.99", Duration::from_secs(10)).await;
    eprintln!("reloaded in {reloaded:?}; knot followed {knot_took:?} later, nsd {nsd_took:?}");
    answers_as_we_do(knot, ours.dns, "knot").await;
    let (_, body) = http_get(ours.admin, "/metrics");
    let acked = metric(&body, "clusterset_dns_notify_acknowledged_total").unwrap_or(0.0);
    assert!(acked >= 2.0, "both targets acknowledged: {body}");
    // Both ask by IXFR once they hold the zone, and get the journal's
    // difference, not the zone.
    assert!(transfers(&body, "ixfr", "incremental") >= 2.0, "{body}");
    assert!(metric(&body, "clusterset_dns_ixfr_journal_versions").unwrap_or(0.0) >= 1.0);
}

/// The SOA serial `server` answers.
async fn serial(server: SocketAddr) -> String {
    let (_, soa) = answers(server, &format!("{ZONE}."), RecordType::SOA).await;
    soa.first().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_allow_transfer_applies_without_a_new_serial() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "allow-transfer: [10.0.0.0/8]\n").expect("write config");
    let path = config.to_str().expect("utf-8");
    let ours = serve(&demo(), &["--local-cluster", "west", "--config", path]);
    let axfr = || async {
        let (msg, _) = ask(
            ours.dns,
            Proto::Tcp,
            &q(&format!("{ZONE}."), RecordType::AXFR),
        )
        .await;
        (msg.metadata.response_code, msg.answers.len())
    };
    assert_eq!(axfr().await, (ResponseCode::Refused, 0));
    let before = serial(ours.dns).await;
    std::fs::write(&config, "allow-transfer: [127.0.0.1]\n").expect("write config");
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let (rcode, records) = axfr().await;
        if rcode == ResponseCode::NoError && records > 100 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reloaded allow-transfer was not applied: {rcode}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        serial(ours.dns).await,
        before,
        "no name changed: the same serial"
    );
}

/// The SOA serial `server` answers, as a number.
async fn serial_number(server: SocketAddr) -> u32 {
    let soa = serial(server).await;
    soa.split_whitespace()
        .nth(5)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no serial in {soa:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_the_serial_moves_forward_and_knot_follows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let zones = dir.path().join("zones");
    copy_tree(&demo(), &zones);
    let (ours_port, knot_port) = (free_port(), free_port());
    let ours_addr = format!("127.0.0.1:{ours_port}");
    let notify = format!("127.0.0.1:{knot_port}");
    let args = [
        "--local-cluster",
        "west",
        "--dns-addr",
        &ours_addr,
        "--allow-transfer",
        "127.0.0.1",
        "--notify",
        &notify,
    ];
    let ours = serve(&zones, &args);
    let knot_dir = dir.path().join("knot");
    std::fs::create_dir_all(&knot_dir).expect("mkdir");
    let _knot = knot_secondary(&knot_dir, ours.dns, knot_port);
    let knot: SocketAddr = ([127, 0, 0, 1], knot_port).into();
    loaded(knot, ours.dns, "knotd", &knot_dir).await;
    let before = serial_number(ours.dns).await;
    drop(ours);
    // The serial counts seconds: a restart within the same second as the
    // first start would give the same one.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    move_db0(&zones, "10.40.31.77");
    let ours = serve(&zones, &args);
    let after = serial_number(ours.dns).await;
    assert!(
        after > before && after.wrapping_sub(before) < 1 << 31,
        "the serial moves forward across a restart: {before} then {after}"
    );
    let name = DB0;
    answers_addr(knot, name, "10.40.31.77", Duration::from_secs(10)).await;
    assert_eq!(
        serial_number(knot).await,
        after,
        "knot holds the new version"
    );
}

/// Our key, and a secret Knot could have been given by mistake.
const KEY: Key<'static> = ("xfr-key", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=");
const WRONG_SECRET: &str = "YW5vdGhlciBzZWNyZXQgb2YgMzIgb2N0ZXRzLi4uLi4=";

/// Our server on a copy of the demo, allowing 127.0.0.1 with `KEY`
/// required, notifying `notify`.
fn ours_keyed(dir: &Path, notify: &str) -> (Served, std::path::PathBuf) {
    let zones = dir.join("zones");
    copy_tree(&demo(), &zones);
    let keys = dir.join("keys.yaml");
    let text = format!(
        "- name: {}\n  algorithm: hmac-sha256\n  secret: {}\n",
        KEY.0, KEY.1
    );
    std::fs::write(&keys, text).expect("keys");
    let keys = keys.to_string_lossy().into_owned();
    let args = [
        "--local-cluster",
        "west",
        "--allow-transfer",
        "127.0.0.1",
        "--transfer-keys",
        &keys,
        "--notify",
        notify,
    ];
    (serve(&zones, &args), zones)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_key_knot_transfers_signed_follows_a_signed_notify_and_a_wrong_key_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, wrong_port) = (free_port(), free_port());
    let (ours, zones) = ours_keyed(dir.path(), &format!("127.0.0.1:{port}"));
    let (good_dir, wrong_dir) = (dir.path().join("knot"), dir.path().join("wrong"));
    std::fs::create_dir_all(&good_dir).expect("mkdir");
    std::fs::create_dir_all(&wrong_dir).expect("mkdir");
    let _knot = knot_keyed(
        &good_dir,
        ours.dns,
        ([127, 0, 0, 1], port).into(),
        Some(KEY),
    );
    let _wrong = knot_keyed(
        &wrong_dir,
        ours.dns,
        ([127, 0, 0, 1], wrong_port).into(),
        Some((KEY.0, WRONG_SECRET)),
    );
    let knot: SocketAddr = ([127, 0, 0, 1], port).into();
    // Knot checks the TSIG of every message we sign.
    loaded(knot, ours.dns, "knotd", &good_dir).await;
    answers_as_we_do(knot, ours.dns, "knot").await;
    // A change reaches it by a signed NOTIFY (its ACL requires the key).
    move_db0(&zones, "10.40.31.55");
    let name = DB0;
    answers_addr(ours.dns, name, "10.40.31.55", Duration::from_secs(10)).await;
    answers_addr(knot, name, "10.40.31.55", Duration::from_secs(10)).await;
    // The Knot with the wrong secret is answered NOTAUTH, counted, and
    // holds nothing.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = http_get(ours.admin, "/metrics");
        let notauth = transfers(&body, "axfr", "notauth") + transfers(&body, "ixfr", "notauth");
        if notauth >= 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "no NOTAUTH counted: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wrong: SocketAddr = ([127, 0, 0, 1], wrong_port).into();
    let (rcode, records) = answers(wrong, &format!("{ZONE}."), RecordType::SOA).await;
    assert!(
        records.is_empty(),
        "the wrong key got the zone: {rcode:?} {records:?}"
    );
}

#[test]
fn kdig_transfers_with_the_key_and_not_without_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ours, _) = ours_keyed(dir.path(), "127.0.0.1:9");
    let kdig_of = |qtype: &str, extra: &[&str]| {
        let out = Command::new("kdig")
            .arg(format!("@{}", ours.dns.ip()))
            .args(["-p", &ours.dns.port().to_string(), "+time=5", "+retry=0"])
            .args(extra)
            .args([qtype, "clusterset.local."])
            .output()
            .expect("kdig (Debian knot-dnsutils) must be installed");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let kdig = |extra: &[&str]| kdig_of("AXFR", extra);
    let good = format!("hmac-sha256:{}:{}", KEY.0, KEY.1);
    let out = kdig(&["-y", &good]);
    let records = out.lines().filter(|l| l.contains("\tSOA\t")).count();
    assert_eq!(
        records, 2,
        "SOA first and last, every message's TSIG checked: {out}"
    );
    let unsigned = kdig(&[]);
    assert!(unsigned.contains("REFUSED"), "{unsigned}");
    let wrong = kdig(&["-y", &format!("hmac-sha256:{}:{WRONG_SECRET}", KEY.0)]);
    assert!(
        wrong.contains("NOTAUTH") || wrong.contains("BADSIG"),
        "{wrong}"
    );
    // A signed query (a secondary's SOA check, over UDP) gets a signed
    // answer, which kdig checks; a wrongly signed one, NOTAUTH.
    let soa = kdig_of("SOA", &["-y", &good]);
    assert!(soa.contains("NOERROR") && soa.contains("\tSOA\t"), "{soa}");
    assert!(
        soa.contains(";; TSIG PSEUDOSECTION:") && !soa.contains("failed"),
        "{soa}"
    );
    let wrong = kdig_of(
        "SOA",
        &["-y", &format!("hmac-sha256:{}:{WRONG_SECRET}", KEY.0)],
    );
    assert!(
        wrong.contains("NOTAUTH") || wrong.contains("BADSIG"),
        "{wrong}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_and_nsd_transfer_signed_answer_as_we_do_and_follow_a_signed_notify_by_ixfr() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bind_port, nsd_port) = (free_port(), free_port());
    let notify = format!("127.0.0.1:{bind_port},127.0.0.1:{nsd_port}");
    let (ours, zones) = ours_keyed(dir.path(), &notify);
    let (bind_dir, nsd_dir) = (dir.path().join("bind"), dir.path().join("nsd"));
    std::fs::create_dir_all(&bind_dir).expect("mkdir");
    std::fs::create_dir_all(&nsd_dir).expect("mkdir");
    let _named = bind_secondary(&bind_dir, ours.dns, bind_port, Some(KEY));
    let _nsd = nsd_keyed(&nsd_dir, ours.dns, nsd_port, Some(KEY));
    let bind: SocketAddr = ([127, 0, 0, 1], bind_port).into();
    let nsd: SocketAddr = ([127, 0, 0, 1], nsd_port).into();
    // Both check the TSIG of every message we sign.
    loaded(bind, ours.dns, "named", &bind_dir).await;
    loaded(nsd, ours.dns, "nsd", &nsd_dir).await;
    answers_as_we_do(bind, ours.dns, "bind").await;
    answers_as_we_do(nsd, ours.dns, "nsd").await;
    // A change reaches both by a signed NOTIFY (they require the key),
    // and they fetch the difference.
    move_db0(&zones, "10.40.31.33");
    let name = DB0;
    answers_addr(ours.dns, name, "10.40.31.33", Duration::from_secs(10)).await;
    answers_addr(bind, name, "10.40.31.33", Duration::from_secs(10)).await;
    answers_addr(nsd, name, "10.40.31.33", Duration::from_secs(10)).await;
    let (_, body) = http_get(ours.admin, "/metrics");
    assert!(transfers(&body, "ixfr", "incremental") >= 2.0, "{body}");
    let notauth = transfers(&body, "axfr", "notauth") + transfers(&body, "ixfr", "notauth");
    assert_eq!(notauth, 0.0, "{body}");
    // /debug/transfers names the key, never its secret, and shows the
    // journal's version and where the secondaries are.
    let (status, debug) = http_get(ours.admin, "/debug/transfers");
    assert_eq!(status, 200);
    assert!(
        debug.contains("\"xfr-key\"") && !debug.contains(KEY.1),
        "{debug}"
    );
    let json: serde_json::Value = serde_json::from_str(&debug).expect("json");
    let serial = u64::from(serial_number(ours.dns).await);
    assert_eq!(json["serial"].as_u64(), Some(serial), "{debug}");
    assert_eq!(json["journal"]["serial"].as_u64(), Some(serial), "{debug}");
    let versions = json["journal"]["versions"].as_array().expect("versions");
    assert_eq!(
        versions.last().and_then(|v| v["to"].as_u64()),
        Some(serial),
        "{debug}"
    );
    assert_eq!(json["secondaries"][0]["current"], true, "{debug}");
}

/// Asks the knotd whose run directory is `dir` to refresh the zone now
/// (an SOA query to the primary, then IXFR when it is behind).
fn knot_refresh(dir: &Path) {
    let sock = dir.join("knot.sock");
    let out = Command::new("knotc")
        .args(["-s", &sock.to_string_lossy(), "zone-refresh", ZONE])
        .output()
        .expect("knotc (Debian package knot)");
    assert!(out.status.success(), "knotc: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knot_gets_the_difference_while_the_journal_holds_its_serial_and_the_zone_once_behind_it() {
    let (dir, zones, ours) = ours_on_a_copy(&["--ixfr-journal-versions", "1"]);
    let knot_dir = dir.path().join("knot");
    std::fs::create_dir_all(&knot_dir).expect("mkdir");
    let port = free_port();
    let _knot = knot_secondary(&knot_dir, ours.dns, port);
    let knot: SocketAddr = ([127, 0, 0, 1], port).into();
    loaded(knot, ours.dns, "knotd", &knot_dir).await;
    let count = |outcome: &str| {
        let (_, body) = http_get(ours.admin, "/metrics");
        transfers(&body, "ixfr", outcome)
    };
    // One change: the journal holds Knot's serial.
    move_db0(&zones, "10.40.31.1");
    answers_addr(ours.dns, DB0, "10.40.31.1", Duration::from_secs(10)).await;
    knot_refresh(&knot_dir);
    answers_addr(knot, DB0, "10.40.31.1", Duration::from_secs(10)).await;
    assert_eq!((count("incremental"), count("full")), (1.0, 0.0));
    // Two more: the journal (one version) no longer holds it.
    for (from, to) in [("10.40.31.1", "10.40.31.2"), ("10.40.31.2", "10.40.31.3")] {
        move_db0_from(&zones, from, to);
        answers_addr(ours.dns, DB0, to, Duration::from_secs(10)).await;
    }
    knot_refresh(&knot_dir);
    answers_addr(knot, DB0, "10.40.31.3", Duration::from_secs(10)).await;
    assert_eq!((count("incremental"), count("full")), (1.0, 1.0));
    answers_as_we_do(knot, ours.dns, "knot").await;
    assert_eq!(serial_number(knot).await, serial_number(ours.dns).await);
}

/// A loopback address of its own (127.83.x.y) whose port 53 is free, for
/// a secondary glibc can be pointed at (resolv.conf has no port).
fn free_loopback_53() -> std::net::IpAddr {
    let pid = std::process::id();
    for i in 0..200u32 {
        let n = pid.wrapping_add(i * 7919) % 65_000 + 1;
        let ip = std::net::Ipv4Addr::new(127, 83, (n >> 8) as u8, (n & 0xFF) as u8);
        let addr = SocketAddr::from((ip, 53));
        if std::net::UdpSocket::bind(addr).is_ok() && std::net::TcpListener::bind(addr).is_ok() {
            return ip.into();
        }
    }
    panic!("no free 127.83.x.y:53");
}

/// unbound as a validating-off recursive resolver on `port` whose only
/// way to the zone is a stub to `secondary`.
fn unbound_stub(dir: &Path, port: u16, secondary: SocketAddr) -> Peer {
    let d = dir.display();
    let conf = format!(
        "server:\n  interface: 127.0.0.1@{port}\n  port: {port}\n  do-daemonize: no\n  username: \"\"\n  chroot: \"\"\n  directory: \"{d}\"\n  pidfile: \"{d}/unbound.pid\"\n  use-syslog: no\n  logfile: \"\"\n  verbosity: 1\n  num-threads: 1\n  do-not-query-localhost: no\n  access-control: 127.0.0.0/8 allow\n  module-config: \"iterator\"\n\
         stub-zone:\n  name: \"{ZONE}\"\n  stub-addr: {}@{}\n",
        secondary.ip(),
        secondary.port()
    );
    let path = dir.join("unbound.conf");
    std::fs::write(&path, conf).expect("write unbound.conf");
    let bin = if Path::new("/usr/sbin/unbound").exists() {
        "/usr/sbin/unbound"
    } else {
        "unbound"
    };
    start(dir, "unbound", bin, &["-d", "-c", &path.to_string_lossy()])
}

/// The Answer section as [`answers`] gives it, without TTLs (a resolver
/// counts them down).
async fn answered(
    server: SocketAddr,
    name: &str,
    rtype: RecordType,
) -> (ResponseCode, Vec<String>) {
    let (rcode, v) = answers(server, name, rtype).await;
    let strip = |r: &String| {
        let f: Vec<&str> = r.splitn(3, ' ').collect();
        format!("{} {}", f[0], f.get(2).copied().unwrap_or(""))
    };
    (rcode, v.iter().map(strip).collect())
}

/// The addresses `getent ahosts name` prints, glibc resolving through
/// `nameserver` alone: a private mount namespace gives the one getent
/// process a resolv.conf of its own (written in `dir`).
fn getent_addresses(dir: &Path, nameserver: std::net::IpAddr, name: &str) -> BTreeSet<String> {
    let conf = dir.join("resolv.conf");
    std::fs::write(
        &conf,
        format!("nameserver {nameserver}\noptions attempts:2 timeout:2\n"),
    )
    .expect("write resolv.conf");
    let script = format!(
        "mount --bind '{}' /etc/resolv.conf && exec getent ahosts '{name}'",
        conf.display()
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("unshare (util-linux) and getent (glibc)");
    assert!(out.status.success(), "getent ahosts {name}: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_and_glibc_through_a_knot_secondary_answer_as_we_do() {
    let ours = ours_allowing("127.0.0.0/8");
    let dir = tempfile::tempdir().expect("tempdir");
    let (knot_dir, unbound_dir) = (dir.path().join("knot"), dir.path().join("unbound"));
    std::fs::create_dir_all(&knot_dir).expect("mkdir");
    std::fs::create_dir_all(&unbound_dir).expect("mkdir");
    let knot: SocketAddr = (free_loopback_53(), 53).into();
    let _knot = knot_keyed(&knot_dir, ours.dns, knot, None);
    loaded(knot, ours.dns, "knotd", &knot_dir).await;
    let unbound_port = free_port();
    let _unbound = unbound_stub(&unbound_dir, unbound_port, knot);
    let unbound: SocketAddr = ([127, 0, 0, 1], unbound_port).into();
    let soa = format!("{ZONE}.");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect_timeout(&unbound, Duration::from_secs(1)).is_err() {
        assert!(Instant::now() < deadline, "unbound did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = answered(unbound, &soa, RecordType::SOA).await;
    // Every dumped name and type, through Unbound and Knot, as from us.
    let questions = dumped_questions(&demo());
    for (name, rtype) in &questions {
        let rtype: RecordType = rtype.parse().expect("a type");
        let theirs = answered(unbound, name, rtype).await;
        let mine = answered(ours.dns, name, rtype).await;
        assert_eq!(theirs, mine, "unbound via knot: {name} {rtype}");
    }
    // glibc: each name's addresses, through Knot, as we answer them.
    let names: BTreeSet<&str> = questions
        .iter()
        .filter(|(_, t)| t == "A" || t == "AAAA")
        .map(|(n, _)| n.as_str())
        .collect();
    let mut checked = 0;
    for name in names {
        let mut mine = BTreeSet::new();
        for rtype in [RecordType::A, RecordType::AAAA] {
            let (_, records) = answers(ours.dns, name, rtype).await;
            mine.extend(
                records
                    .iter()
                    .filter_map(|r| r.rsplit(' ').next().map(str::to_owned)),
            );
        }
        let theirs = getent_addresses(dir.path(), knot.ip(), name.trim_end_matches('.'));
        assert_eq!(theirs, mine, "glibc via knot: {name}");
        checked += 1;
    }
    assert!(checked > 20, "{checked} names");
}

/// `kdig` of `qtype` for the zone from `server`, signed with `key`
/// (`name:base64`, hmac-sha256): its output.
fn kdig_signed(server: SocketAddr, qtype: &str, key: Key<'_>) -> String {
    let out = Command::new("kdig")
        .arg(format!("@{}", server.ip()))
        .args([
            "-p",
            &server.port().to_string(),
            "+time=5",
            "+retry=0",
            "+tcp",
        ])
        .args(["-y", &format!("hmac-sha256:{}:{}", key.0, key.1)])
        .args([qtype, "clusterset.local."])
        .output()
        .expect("kdig (Debian knot-dnsutils) must be installed");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn a_rotated_keys_file_applies_without_a_signal_and_a_broken_one_keeps_the_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ours, _) = ours_keyed(dir.path(), "127.0.0.1:9");
    let keys = dir.path().join("keys.yaml");
    let signed_ok = |key: Key<'_>| {
        let out = kdig_signed(ours.dns, "SOA", key);
        out.contains("NOERROR") && out.contains(";; TSIG PSEUDOSECTION:")
    };
    assert!(signed_ok(KEY));
    // Rotated as a Secret's volume is: a new file swapped in.
    let rotated = (KEY.0, WRONG_SECRET);
    let next = dir.path().join("keys.yaml.new");
    let text = format!(
        "- name: {}\n  algorithm: hmac-sha256\n  secret: {}\n",
        rotated.0, rotated.1
    );
    std::fs::write(&next, text).expect("write");
    std::fs::rename(&next, &keys).expect("rename");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !signed_ok(rotated) {
        assert!(
            Instant::now() < deadline,
            "the rotated key is not in use after 10 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!signed_ok(KEY), "the old key is refused");
    // A broken file is refused (counted) and the keys in use stay.
    let errors = || {
        let (_, body) = http_get(ours.admin, "/metrics");
        metric(&body, "clusterset_dns_config_reload_errors_total").unwrap_or(0.0)
    };
    let refused = errors();
    std::fs::write(
        &next,
        "- name: xfr-key\n  algorithm: hmac-sha256\n  secret: not base64!\n",
    )
    .expect("write");
    std::fs::rename(&next, &keys).expect("rename");
    while errors() <= refused {
        assert!(
            Instant::now() < deadline + Duration::from_secs(10),
            "no refused reload"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(signed_ok(rotated), "the keys in use stay");
}

/// The list and watch requests `cluster` has served.
fn reads(cluster: &kubesim::Cluster) -> Vec<((String, String), u64)> {
    let mut v: Vec<_> = cluster
        .counters()
        .into_iter()
        .filter(|((verb, _), _)| verb == "list" || verb == "watch" || verb == "get")
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_knot_followers_of_one_watcher_follow_a_change_and_cost_the_remote_clusters_nothing()
{
    use crate::live::{SECOND, fqdn, set_endpoints, two_remotes_with};
    use crate::support::Options;
    let ports = [free_port(), free_port(), free_port()];
    let opts = Options {
        local: Some("local"),
        transfers: (
            vec!["127.0.0.1"],
            ports
                .iter()
                .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
                .collect(),
        ),
        ..Options::default()
    };
    let (sim, dir, server) = two_remotes_with(opts, |_| {}, |_| {}).await;
    crate::live::until(
        server.dns,
        &fqdn("api-east"),
        ResponseCode::NoError,
        &["10.1.0.1"],
        10 * SECOND,
    )
    .await;
    let remotes = ["east", "north"].map(|c| sim.cluster(c).expect("cluster").clone());
    let before: Vec<_> = remotes.iter().map(|c| reads(c)).collect();
    let mut followers = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let d = dir.path().join(format!("follower-{i}"));
        std::fs::create_dir_all(&d).expect("mkdir");
        followers.push((knot_secondary(&d, server.dns, *port), d));
    }
    for ((_, d), port) in followers.iter().zip(ports) {
        loaded(([127, 0, 0, 1], port).into(), server.dns, "knotd", d).await;
    }
    // A change in east reaches every follower by NOTIFY and IXFR.
    let east = crate::kubesim_api::client(&remotes[0]).await;
    set_endpoints(&east, "api", &["10.1.0.9"]).await;
    for port in ports {
        let follower = SocketAddr::from(([127, 0, 0, 1], port));
        answers_addr(follower, &fqdn("api-east"), "10.1.0.9", 10 * SECOND).await;
    }
    let (_, body) = http_get(server.admin, "/metrics");
    assert!(transfers(&body, "ixfr", "incremental") >= 3.0, "{body}");
    // The remote API servers served the one watcher and nothing more:
    // followers read from it, never from them.
    let after: Vec<_> = remotes.iter().map(|c| reads(c)).collect();
    assert_eq!(after, before, "requests to east and north");
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notify_target_that_never_answers_delays_no_other() {
    // A UDP socket that reads nothing: NOTIFYs to it are never answered.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = free_port();
    let targets = format!("{},127.0.0.1:{port}", silent.local_addr().expect("addr"));
    let (dir, zones, ours) = ours_on_a_copy(&["--notify", &targets]);
    let knot_dir = dir.path().join("knot");
    std::fs::create_dir_all(&knot_dir).expect("mkdir");
    let _knot = knot_secondary(&knot_dir, ours.dns, port);
    let knot: SocketAddr = ([127, 0, 0, 1], port).into();
    loaded(knot, ours.dns, "knotd", &knot_dir).await;
    // Two changes in a row, while the silent target's first NOTIFY is
    // still being tried again (for 31 s): Knot follows each at once.
    let mut from = "10.40.30.10".to_owned();
    for to in ["10.40.31.5", "10.40.31.6"] {
        move_db0_from(&zones, &from, to);
        answers_addr(ours.dns, DB0, to, Duration::from_secs(10)).await;
        let took = answers_addr(knot, DB0, to, Duration::from_secs(3)).await;
        eprintln!("knot followed {to} {took:?} after us");
        from = to.to_owned();
    }
    let (_, body) = http_get(ours.admin, "/metrics");
    assert!(
        metric(&body, "clusterset_dns_notify_acknowledged_total").unwrap_or(0.0) >= 2.0,
        "{body}"
    );
    drop(silent);
}

/// The zone `server` sends by AXFR, as kdig prints its records, sorted:
/// the same printer for every server, so two zones compare line by line.
fn kdig_axfr(server: SocketAddr) -> Vec<String> {
    let out = Command::new("kdig")
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string(), "+time=10", "+retry=0"])
        .args(["+nocomments", "+nostats", "AXFR", "clusterset.local."])
        .output()
        .expect("kdig (Debian knot-dnsutils) must be installed");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(';'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    lines.sort();
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knot_nsd_and_bind_hold_a_generated_10000_service_zone_record_for_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let zones = dir.path().join("zones");
    // 3 clusters × 3,334 services, every third a federated StatefulSet.
    crate::startup::write_zones(&zones, 3334);
    let ours = serve(
        &zones,
        &["--local-cluster", "west", "--allow-transfer", "127.0.0.1"],
    );
    let ports = [free_port(), free_port(), free_port()];
    let dirs = ["knot", "nsd", "bind"].map(|n| dir.path().join(n));
    for d in &dirs {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let _knot = knot_secondary(&dirs[0], ours.dns, ports[0]);
    let _nsd = nsd_secondary(&dirs[1], ours.dns, ports[1]);
    let _bind = bind_secondary(&dirs[2], ours.dns, ports[2], None);
    let mine = kdig_axfr(ours.dns);
    assert!(mine.len() > 100_000, "{} records", mine.len());
    let questions: Vec<(String, String)> = {
        let out = Command::new(bin())
            .args(["dump", "--zones"])
            .arg(&zones)
            .args(["--local-cluster", "west"])
            .stderr(Stdio::null())
            .output()
            .expect("dump");
        let set: BTreeSet<(String, String)> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('$'))
            .filter_map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                Some((f.first()?.to_string(), f.get(3)?.to_string()))
            })
            .collect();
        set.into_iter().collect()
    };
    for ((who, d), port) in ["knotd", "nsd", "named"].iter().zip(&dirs).zip(ports) {
        let secondary = SocketAddr::from(([127, 0, 0, 1], port));
        loaded(secondary, ours.dns, who, d).await;
        // Every record, as each sends the zone on.
        let theirs = kdig_axfr(secondary);
        assert!(
            theirs == mine,
            "{who}: {} records against our {}",
            theirs.len(),
            mine.len()
        );
        // And the answers to one question in 50, of every kind.
        for (name, rtype) in questions.iter().step_by(50) {
            let rtype: RecordType = rtype.parse().expect("a type");
            let got = answers(secondary, name, rtype).await;
            assert_eq!(
                got,
                answers(ours.dns, name, rtype).await,
                "{who}: {name} {rtype}"
            );
        }
    }
}
