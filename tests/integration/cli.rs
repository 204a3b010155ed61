//! `check`, `dump`, `explain` and configuration, through the built binary.

use std::path::Path;
use std::process::{Command, Output};

use crate::binary::{bin, serve};
use crate::support::{copy_tree, demo, fixture};

fn run(args: &[&str], envs: &[(&str, &str)]) -> Output {
    Command::new(bin())
        .args(args)
        .envs(envs.iter().copied())
        .env("RUST_LOG", "error")
        .output()
        .expect("run clusterset-dns")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn check_reports_what_the_demo_serves() {
    let demo = demo();
    let out = run(
        &[
            "check",
            "--zones",
            demo.to_str().expect("path"),
            "--local-cluster",
            "west",
        ],
        &[],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for want in [
        "4 clusters",
        "cluster east (remote)",
        "cluster west (local)",
        "service shop/frontend gateway ports http/TCP/80 endpoints 3/3 ready",
        "service shop/payments flat ports http/TCP/80,metrics/TCP/9090 endpoints 3/4 ready",
        "mirror shop/frontend-east of cluster east clusterIP 10.96.20.1",
        "name db-federated.data.svc.clusterset.local. 9 A records, 9 pod names, members east,north,south",
        "0 errors, 0 warnings",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
}

#[test]
fn check_names_the_broken_file_and_document_and_exits_1() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_tree(&demo(), tmp.path());
    let broken = tmp.path().join("north/payments.yaml");
    let original = std::fs::read_to_string(&broken).expect("read");
    // Break the second document (the first EndpointSlice): a port that is not a number.
    let mut docs: Vec<String> = original.split("\n---\n").map(str::to_owned).collect();
    assert!(docs.len() >= 2, "payments.yaml has a Service and slices");
    docs[1] = docs[1].replacen("port: 8080", "port: http-alt", 1);
    std::fs::write(&broken, docs.join("\n---\n")).expect("write");
    let out = run(
        &[
            "check",
            "--zones",
            tmp.path().to_str().expect("path"),
            "--local-cluster",
            "west",
        ],
        &[],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let want = format!("error: {}: document 2", broken.display());
    assert!(stdout.contains(&want), "missing {want:?} in:\n{stdout}");
    assert!(
        stdout.contains("invalid type: string \"http-alt\", expected i32"),
        "{stdout}"
    );
    assert!(stdout.contains("1 error"), "{stdout}");
    // Everything else is still served.
    assert!(
        stdout.contains("name frontend-east.shop.svc.clusterset.local."),
        "{stdout}"
    );
}

fn zone_file(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> std::path::PathBuf {
    let mut argv = vec!["dump"];
    argv.extend_from_slice(args);
    let out = run(&argv, envs);
    assert!(out.status.success(), "dump failed: {}", text(&out.stderr));
    let path = dir.join("clusterset.local.zone");
    std::fs::write(&path, &out.stdout).expect("write zone");
    path
}

#[test]
fn dump_loads_into_knot_and_nsd() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (zones, local) in [(demo(), "west"), (fixture("conformance"), "west")] {
        let path = zone_file(
            tmp.path(),
            &[
                "--zones",
                zones.to_str().expect("path"),
                "--local-cluster",
                local,
            ],
            &[],
        );
        let zone = std::fs::read_to_string(&path).expect("zone");
        assert!(
            zone.starts_with("$ORIGIN clusterset.local.\nclusterset.local.\t5\tIN\tSOA\t"),
            "{zone}"
        );
        let knot = Command::new("kzonecheck")
            .args(["-o", "clusterset.local"])
            .arg(&path)
            .output()
            .expect("kzonecheck must be installed (Debian package knot; .ci/run installs it)");
        assert!(
            knot.status.success(),
            "kzonecheck: {}{}",
            text(&knot.stdout),
            text(&knot.stderr)
        );
        let nsd = Command::new("nsd-checkzone")
            .arg("clusterset.local")
            .arg(&path)
            .output()
            .expect("nsd-checkzone must be installed (Debian package nsd; .ci/run installs it)");
        assert!(
            nsd.status.success(),
            "nsd-checkzone: {}{}",
            text(&nsd.stdout),
            text(&nsd.stderr)
        );
    }
}

#[test]
fn dump_is_sorted_and_complete() {
    let demo = demo();
    let out = run(
        &[
            "dump",
            "--zones",
            demo.to_str().expect("path"),
            "--local-cluster",
            "west",
        ],
        &[],
    );
    let zone = text(&out.stdout);
    let lines: Vec<&str> = zone.lines().skip(3).collect();
    let mut sorted = lines.clone();
    sorted.sort_by_key(|l| l.split('\t').next().unwrap_or(""));
    assert_eq!(
        lines
            .iter()
            .map(|l| l.split('\t').next())
            .collect::<Vec<_>>(),
        sorted
            .iter()
            .map(|l| l.split('\t').next())
            .collect::<Vec<_>>()
    );
    for want in [
        "clusterset.local.\t5\tIN\tNS\tns.dns.clusterset.local.",
        "ns.dns.clusterset.local.\t5\tIN\tA\t127.0.0.1",
        "dns-version.clusterset.local.\t28800\tIN\tTXT\t\"1.0.0\"",
        "frontend-east.shop.svc.clusterset.local.\t5\tIN\tA\t10.96.20.1",
        "_peer._tcp.db-federated.data.svc.clusterset.local.\t5\tIN\tSRV\t0 11 7000 db-2.south.db-federated.data.svc.clusterset.local.",
        "db-2-south.db-federated.data.svc.clusterset.local.\t5\tIN\tA\t10.40.30.12",
        "api-south.shop.svc.clusterset.local.\t5\tIN\tAAAA\tfd00:40::20:3",
    ] {
        assert!(zone.contains(want), "missing {want:?}");
    }
}

#[test]
fn environment_and_config_file_set_options() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let demo = demo();
    let path = zone_file(
        tmp.path(),
        &["--local-cluster", "west"],
        &[
            ("CLUSTERSET_DNS_ZONES", demo.to_str().expect("path")),
            ("CLUSTERSET_DNS_TTL", "30"),
            ("CLUSTERSET_DNS_ZONE", "fleet.internal"),
        ],
    );
    let zone = std::fs::read_to_string(path).expect("zone");
    assert!(
        zone.contains("frontend-east.shop.svc.fleet.internal.\t30\tIN\tA\t10.96.20.1"),
        "{zone}"
    );

    let config = tmp.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "zones: {}\nlocal-cluster: west\nttl: 7\nmax-answer-records: 1\n",
            demo.display()
        ),
    )
    .expect("write");
    let out = run(
        &["dump", "--config", config.to_str().expect("path")],
        &[("CLUSTERSET_DNS_TTL", "9")],
    );
    let dumped = text(&out.stdout);
    assert!(
        dumped.contains("frontend-east.shop.svc.clusterset.local.\t9\tIN\tA"),
        "env wins over the file"
    );
    assert_eq!(
        dumped
            .lines()
            .filter(|l| l.starts_with("payments-north.shop.svc.clusterset.local.\t9\tIN\tA\t"))
            .count(),
        3,
        "the dump holds every record, whatever max-answer-records says"
    );

    std::fs::write(&config, "zones: x\nlocal_cluster: west\n").expect("write");
    let out = run(&["dump", "--config", config.to_str().expect("path")], &[]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("unknown field `local_cluster`") && err.contains("config.yaml"),
        "{err}"
    );
}

#[test]
fn serve_refuses_a_missing_zones_directory() {
    let out = run(
        &[
            "serve",
            "--zones",
            "/nonexistent/zones",
            "--dns-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
        ],
        &[],
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("zones directory /nonexistent/zones does not exist"),
        "{err}"
    );
}

/// `out`'s lines with runs of spaces collapsed: the table's alignment is
/// not what is asserted, its cells are.
fn lines(out: &[u8]) -> Vec<String> {
    text(out)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn assert_lines(context: &str, out: &Output, want: &[&str]) {
    let got = lines(&out.stdout);
    for w in want {
        assert!(
            got.iter().any(|l| l == w),
            "{context}: no line {w:?} in:\n{}\nstderr:\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}

#[test]
fn explain_says_why_each_member_is_in_or_out() {
    let served = serve(&demo(), &["--local-cluster", "west"]);
    let (admin, dns) = (served.admin.to_string(), served.dns.to_string());
    let federated = run(&["explain", "cache-federated.shop", "--admin", &admin], &[]);
    assert!(federated.status.success(), "{}", text(&federated.stderr));
    assert_lines(
        "cache-federated",
        &federated,
        &[
            "name cache-federated.shop.svc.clusterset.local.",
            "what <svc>-federated name of service shop/cache: the union of its healthy members' ready endpoints",
            "local west, place eu-west/? (cluster-property)",
            "A NOERROR ttl 5, 4 records: 10.10.40.1, 10.10.40.2, 10.30.40.1, 10.30.40.2",
            "CLUSTER PLACE TIER HEALTH READY ANSWER WHY",
            "west (local) eu-west/? (cluster-property) 0: the local cluster synced 2 in a healthy member",
            "east eu-west/? (cluster-property) 1: same region as the local cluster synced 2 in a healthy member",
        ],
    );
    // Absolute, and asking the DNS server too: what clients get.
    let nearest = run(
        &[
            "explain",
            "cache-nearest.shop.svc.clusterset.local.",
            "--admin",
            &admin,
            "--server",
            &dns,
        ],
        &[],
    );
    assert!(nearest.status.success(), "{}", text(&nearest.stderr));
    assert_lines(
        "cache-nearest",
        &nearest,
        &[
            "nearest tier 0 (west): 2 ready, min-ready 1",
            "A NOERROR ttl 5, 2 records: 10.30.40.1, 10.30.40.2",
            "west (local) eu-west/? (cluster-property) 0: the local cluster synced 2 in tier 0 is answered",
            "east eu-west/? (cluster-property) 1: same region as the local cluster synced 2 out tier 0 is nearer and has enough ready",
            &format!("DNS server {dns} (what clients get)"),
            "A NOERROR 2 records",
            "cache-nearest.shop.svc.clusterset.local. 5 IN A 10.30.40.1",
            "SRV NOERROR 1 record",
            "cache-nearest.shop.svc.clusterset.local. 5 IN SRV 0 100 6379 cache-nearest.shop.svc.clusterset.local.",
        ],
    );
    // West is no member of data/db: its region (east) first.
    let region = run(&["explain", "db-nearest.data", "--admin", &admin], &[]);
    assert!(region.status.success(), "{}", text(&region.stderr));
    assert_lines(
        "db-nearest",
        &region,
        &[
            "nearest tier 1 (east): 3 ready, min-ready 1",
            "A NOERROR ttl 5, 3 records: 10.10.30.10, 10.10.30.11, 10.10.30.12",
            "east eu-west/? (cluster-property) 1: same region as the local cluster synced 3 in tier 1 is answered",
            "north us-east/? (cluster-property) 2: another region synced 3 out tier 1 is nearer and has enough ready",
            "south ap-south/? (cluster-property) 2: another region synced 3 out tier 1 is nearer and has enough ready",
        ],
    );
    // 120 SRV records (60 pods, 2 ports) do not fit UDP: asked again over TCP, as a client would.
    let big = run(
        &[
            "explain",
            "search-east.shop",
            "--admin",
            &admin,
            "--server",
            &dns,
        ],
        &[],
    );
    assert!(big.status.success(), "{}", text(&big.stderr));
    assert_lines(
        "search-east",
        &big,
        &[
            "SRV NOERROR 120 records (truncated over UDP: asked again over TCP)",
            "and 110 more",
        ],
    );
    // A name nobody serves says why; the JSON is there for scripts.
    let missing = run(
        &[
            "explain",
            "payments-federated.shop",
            "--admin",
            &admin,
            "--json",
        ],
        &[],
    );
    assert!(missing.status.success(), "{}", text(&missing.stderr));
    let json: serde_json::Value = serde_json::from_slice(&missing.stdout).expect("json");
    assert_eq!(json["kind"], "missing");
    assert_eq!(
        json["notes"][0],
        "no cluster federates shop/payments; it is exported per cluster by north"
    );
    assert_eq!(json["answers"][0]["rcode"], "NXDOMAIN");
}

#[test]
fn explain_without_a_server_is_a_clear_error() {
    // A port nobody listens on: bound, then closed.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    drop(listener);
    let out = run(&["explain", "web-federated.prod", "--admin", &addr], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("error: no admin server answers at {addr}"))
            && stderr.contains("is `clusterset-dns serve` running?"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    // A DNS server that does not answer either: both said, still exit 1.
    let out = run(
        &[
            "explain",
            "web-federated.prod",
            "--admin",
            &addr,
            "--server",
            &addr,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "error: the DNS server {addr} gave no answer to A web-federated.prod.svc.clusterset.local."
        )),
        "{stderr}"
    );
}

#[test]
fn explain_refuses_a_name_that_is_not_one() {
    let served = serve(&demo(), &["--local-cluster", "west"]);
    let out = run(
        &[
            "explain",
            "web federated",
            "--admin",
            &served.admin.to_string(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("answered 400: \"web federated\" is not a DNS name"),
        "{stderr}"
    );
}
