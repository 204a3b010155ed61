//! The README's live-mode walkthrough, step by step with the real binaries:
//! `kubesim` with four clusters, the demo clusterset applied with kubectl,
//! Links and credential Secrets created with kubectl, then
//! `clusterset-dns serve --kubeconfig <west> --local-cluster west` answering
//! the per-cluster, federated, per-pod and SRV names of the demo table, with
//! `--mirror` writing the same clusterset into west (listed by kubectl with
//! our managed-by label), and a StatefulSet scaled in one cluster changing the
//! federated SRV answer and west's federated EndpointSlice within a second.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::kubectl::{Running, kubectl_minor, kubesim_binary, ok, stdout_lines};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn dig(dns: SocketAddr, args: &[&str]) -> Vec<String> {
    let out = Command::new("dig")
        .arg(format!("@{}", dns.ip()))
        .args([
            "-p",
            &dns.port().to_string(),
            "+short",
            "+tries=1",
            "+time=2",
        ])
        .args(args)
        .output()
        .expect("dig runs (tests/run checks it is installed)");
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

fn strs(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

#[test]
fn readme_live_walkthrough() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sim = Command::new(kubesim_binary())
        .args([
            "--clusters",
            "west,east,north,south",
            "--service-cidr",
            "10.0.0.0/8",
            // south's dual-stack api has fd00:140::20:1, as the README says.
            "--service-cidr-v6",
            "fd00:140::20:0/108",
            "--dir",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubesim starts");
    let out = stdout_lines(&mut sim);
    let _sim = Running(sim);
    for _ in 0..10 {
        let line = out
            .recv_timeout(Duration::from_secs(20))
            .expect("kubesim prints its clusters");
        if line.starts_with("control:") {
            break;
        }
    }
    let kc = |c: &str| dir.path().join(format!("{c}.kubeconfig"));
    // kubectl before 1.27 validates against OpenAPI v2, which kubesim does not serve.
    let validate: &[&str] = if kubectl_minor() < 27 {
        &["--validate=false"]
    } else {
        &[]
    };
    let apply = |c: &str, file: &Path| {
        let f = file.display().to_string();
        let mut args = vec!["apply", "-f", f.as_str()];
        args.extend_from_slice(validate);
        ok(&kc(c), &args);
    };
    for c in ["west", "east", "north", "south"] {
        apply(c, &repo("zones/demo-namespaces.yaml"));
        apply(c, &repo(&format!("zones/demo/{c}")));
    }
    for c in ["east", "north", "south"] {
        let from = format!("--from-file=kubeconfig={}", kc(c).display());
        let name = format!("cluster-credentials-{c}");
        let yaml = ok(
            &kc("west"),
            &[
                "create",
                "secret",
                "generic",
                &name,
                "-n",
                "linkerd-multicluster",
                &from,
                "--dry-run=client",
                "-o",
                "yaml",
            ],
        );
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kc("west"))
            .args(["apply", "-f", "-"])
            .args(validate)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("kubectl runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(yaml.as_bytes())
            .expect("write secret");
        assert!(
            child.wait().expect("kubectl ends").success(),
            "secret {name} applied"
        );
    }
    apply("west", &repo("zones/demo-links.yaml"));

    let mut server = Command::new(env!("CARGO_BIN_EXE_clusterset-dns"))
        .args(["serve", "--kubeconfig"])
        .arg(kc("west"))
        .args([
            "--mirror",
            "--local-cluster",
            "west",
            "--dns-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("server starts");
    let out = stdout_lines(&mut server);
    let _server = Running(server);
    let listening = out
        .recv_timeout(Duration::from_secs(20))
        .expect("server prints where it listens");
    let dns: SocketAddr = listening
        .split_whitespace()
        .find_map(|w| w.strip_prefix("dns="))
        .and_then(|a| a.parse().ok())
        .expect("dns=ADDR");
    let admin: SocketAddr = listening
        .split_whitespace()
        .find_map(|w| w.strip_prefix("admin="))
        .and_then(|a| a.parse().ok())
        .expect("admin=ADDR");
    let start = Instant::now();
    while crate::binary::http_get(admin, "/ready").0 != 200 {
        assert!(start.elapsed() < Duration::from_secs(20), "server ready");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The demo table (zones/demo/clusters.md), now from the watches.
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["frontend-east.shop.svc.clusterset.local"],
            &["10.96.20.1"],
        ),
        (
            &["payments-north.shop.svc.clusterset.local"],
            &["10.20.20.1", "10.20.20.2", "10.20.20.3"],
        ),
        (
            &["search-0.search-east.shop.svc.clusterset.local"],
            &["10.10.60.1"],
        ),
        (
            &["db-0.north.db-federated.data.svc.clusterset.local"],
            &["10.20.30.10"],
        ),
        (
            &["cache-federated.shop.svc.clusterset.local"],
            &["10.10.40.1", "10.10.40.2", "10.30.40.1", "10.30.40.2"],
        ),
        (
            &["SRV", "_http._tcp.payments-north.shop.svc.clusterset.local"],
            &["0 33 8080 payments-north.shop.svc.clusterset.local."],
        ),
    ];
    for (args, want) in cases {
        let got = dig(dns, args);
        // SRV weights are 100 / n: compare the shape of the one target.
        if args[0] == "SRV" {
            assert!(
                !got.is_empty()
                    && got
                        .iter()
                        .all(|l| l.ends_with("8080 payments-north.shop.svc.clusterset.local.")),
                "{args:?}: {got:?}"
            );
        } else {
            assert_eq!(got, strs(want), "{args:?}");
        }
    }
    let peers = |dns| {
        dig(
            dns,
            &["SRV", "_peer._tcp.db-federated.data.svc.clusterset.local"],
        )
    };
    assert_eq!(peers(dns).len(), 9, "{:?}", peers(dns));

    // The mirror controller wrote the same clusterset into west's own API.
    let start = Instant::now();
    let listed = loop {
        let out = ok(
            &kc("west"),
            &[
                "get",
                "svc,endpointslices",
                "-A",
                "-l",
                "app.kubernetes.io/managed-by=clusterset-dns",
                "-o",
                "name",
            ],
        );
        if out.contains("service/db-federated") && out.contains("service/payments-north") {
            break out;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "mirrors listed: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        listed.contains("endpointslice.discovery.k8s.io/db-federated-v4-0"),
        "{listed}"
    );
    // The Linkerd mirror of frontend in west is Linkerd's: not in our list.
    assert!(!listed.contains("service/frontend-east"), "{listed}");
    // A gateway-mode name now answers its mirror's ClusterIP (docs/architecture.md,
    // decision 1), as frontend-east answers Linkerd's.
    let vip = ok(
        &kc("west"),
        &[
            "-n",
            "shop",
            "get",
            "svc",
            "reviews-south",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    );
    let start = Instant::now();
    while dig(dns, &["reviews-south.shop.svc.clusterset.local"]) != [vip.trim().to_owned()] {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "reviews-south answers {vip}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Scale north's StatefulSet: db-3 joins the seed list within a second,
    // and the federated EndpointSlice in west.
    let patch = r#"[{"op":"add","path":"/endpoints/-","value":{"addresses":["10.20.30.13"],"hostname":"db-3","conditions":{"ready":true}}}]"#;
    ok(
        &kc("north"),
        &[
            "-n",
            "data",
            "patch",
            "endpointslice",
            "db-rtxzl",
            "--type=json",
            "-p",
            patch,
        ],
    );
    let changed = Instant::now();
    loop {
        let got = peers(dns);
        if got
            .iter()
            .any(|l| l.ends_with("db-3.north.db-federated.data.svc.clusterset.local."))
        {
            assert_eq!(got.len(), 10, "{got:?}");
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(1),
            "db-3 within a second: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    loop {
        let slice = ok(
            &kc("west"),
            &[
                "-n",
                "data",
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=db-federated",
                "-o",
                "json",
            ],
        );
        if slice.contains("db-3-north") {
            break;
        }
        assert!(
            changed.elapsed() < Duration::from_secs(1),
            "db-3-north in west's federated EndpointSlice within a second"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
