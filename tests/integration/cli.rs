//! `check`, `dump` and configuration, through the built binary.

use std::path::Path;
use std::process::{Command, Output};

use crate::binary::bin;
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
