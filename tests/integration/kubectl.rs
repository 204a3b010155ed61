//! kubectl against the kubesim binary, as the acceptance runs it: two clusters from
//! `kubesim --clusters east,west --dir D`, then `apply --server-side`, `get -o yaml`,
//! `get -w`, `delete` and `get links.multicluster.linkerd.io` with their output checked.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The kubesim binary next to this test binary (built by `cargo test --workspace --all-targets`).
pub(crate) fn kubesim_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("kubesim");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p kubesim` (tests/run does)",
        bin.display()
    );
    bin
}

/// The lines a child prints on stdout, read on a thread.
pub(crate) fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Kills the child on drop: the test started it, so the test ends it.
pub(crate) struct Running(pub(crate) Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs (tests/run checks it is installed)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// kubectl's minor version: Debian's kubernetes-client (1.20) predates OpenAPI v3 and
/// `--show-managed-fields`, so a few flags depend on it.
pub(crate) fn kubectl_minor() -> u32 {
    let out = Command::new("kubectl")
        .args(["version", "--client", "-o", "json"])
        .output()
        .expect("kubectl runs");
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("kubectl version -o json");
    v["clientVersion"]["minor"]
        .as_str()
        .unwrap_or("0")
        .trim_end_matches('+')
        .parse()
        .unwrap_or(0)
}

pub(crate) fn ok(kubeconfig: &Path, args: &[&str]) -> String {
    let (success, stdout, stderr) = kubectl(kubeconfig, args);
    assert!(success, "kubectl {args:?} failed: {stderr}");
    stdout
}

/// Whether kubesim's control endpoint has counted a watch on east's EndpointSlices.
fn watch_counted(control: &str) -> bool {
    let (_, counters) = crate::kubesim_faults::control(control, "GET", "/clusters/east/counters");
    counters.as_array().into_iter().flatten().any(|c| {
        c["verb"] == "watch"
            && c["resource"] == "endpointslices.discovery.k8s.io"
            && c["count"].as_u64() >= Some(1)
    })
}

const SERVICE: &str = "apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
  labels: {app: web}
spec:
  selector: {app: web}
  ports:
  - name: http
    port: 80
";

const SLICE: &str = "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [10.0.0.1]
ports:
- name: http
  port: 80
";

const LINK: &str = "apiVersion: v1
kind: Namespace
metadata:
  name: linkerd-multicluster
---
apiVersion: multicluster.linkerd.io/v1alpha3
kind: Link
metadata:
  name: east
  namespace: linkerd-multicluster
spec:
  targetClusterName: east
  gatewayAddress: 203.0.113.10
  gatewayPort: \"4143\"
";

#[test]
fn kubectl_against_the_kubesim_binary() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(kubesim_binary())
        .args([
            "--clusters",
            "east,west",
            "--service-account",
            "east=default/reader",
            "--dir",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubesim starts");
    let rx = stdout_lines(&mut child);
    let _running = Running(child);
    let mut printed = Vec::new();
    while !printed.iter().any(|l: &String| l.starts_with("control:")) {
        printed.push(
            rx.recv_timeout(Duration::from_secs(20))
                .expect("kubesim prints its clusters"),
        );
    }
    let east = dir.path().join("east.kubeconfig");
    let west = dir.path().join("west.kubeconfig");
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("cluster east: https://127.0.0.1:")
                && l.ends_with(&east.display().to_string())),
        "{printed:?}"
    );

    std::fs::write(dir.path().join("svc.yaml"), SERVICE).unwrap();
    std::fs::write(dir.path().join("slice.yaml"), SLICE).unwrap();
    std::fs::write(dir.path().join("link.yaml"), LINK).unwrap();
    let minor = kubectl_minor();
    // Before 1.27 kubectl validates client-side against the protobuf OpenAPI v2 document, which
    // kubesim does not serve; from 1.27 it asks the server (fieldValidation), which kubesim does.
    let validate = if minor < 27 {
        "--validate=false"
    } else {
        "--validate=strict"
    };
    let svc_file = dir.path().join("svc.yaml");
    let out = ok(
        &east,
        &[
            "apply",
            "--server-side",
            validate,
            "-f",
            svc_file.to_str().unwrap(),
        ],
    );
    assert_eq!(out.trim(), "service/web serverside-applied");
    let yaml = ok(&east, &["get", "svc", "web", "-o", "yaml"]);
    assert!(yaml.contains("clusterIP: 10.96."), "{yaml}");
    let managed = if minor < 21 {
        yaml.clone()
    } else {
        ok(
            &east,
            &["get", "svc", "web", "-o", "yaml", "--show-managed-fields"],
        )
    };
    assert!(
        managed.contains("manager: kubectl") && managed.contains("operation: Apply"),
        "managedFields name kubectl's field manager: {managed}"
    );
    let ip = yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("clusterIP: "))
        .unwrap()
        .to_owned();
    let jsonpath = ok(
        &east,
        &["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"],
    );
    assert_eq!(jsonpath, ip);

    // Strict field validation happens in the server, with kube's message (kubectl 1.27+ asks for it).
    if minor >= 27 {
        std::fs::write(
            dir.path().join("bogus.yaml"),
            SERVICE.replace("spec:\n", "spec:\n  bogus: 1\n"),
        )
        .unwrap();
        let bogus = dir.path().join("bogus.yaml");
        let (applied, _, stderr) = kubectl(
            &east,
            &[
                "apply",
                "--server-side",
                "--validate=strict",
                "-f",
                bogus.to_str().unwrap(),
            ],
        );
        assert!(!applied, "an unknown field is refused");
        assert!(stderr.contains("unknown field \"spec.bogus\""), "{stderr}");
    }

    // --service-account wrote a kubeconfig whose token is that ServiceAccount's.
    let reader = dir.path().join("east-default-reader.kubeconfig");
    let whoami = ok(
        &reader,
        &[
            "config",
            "view",
            "--minify",
            "-o",
            "jsonpath={.users[0].name}",
        ],
    );
    assert_eq!(whoami, "system:serviceaccount:default:reader");
    assert!(ok(&reader, &["get", "svc", "web", "-o", "name"]).contains("service/web"));
    let control_addr = printed
        .iter()
        .find_map(|l| l.strip_prefix("control: http://"))
        .expect("control address");
    let (_, audit) = crate::kubesim_faults::control(control_addr, "GET", "/clusters/east/audit");
    assert!(
        audit
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["user"] == "system:serviceaccount:default:reader" && a["verb"] == "get"),
        "the reader's request is audited as the ServiceAccount"
    );

    // The clusters are separate.
    let (found, _, stderr) = kubectl(&west, &["get", "svc", "web"]);
    assert!(!found);
    assert!(
        stderr.contains("Error from server (NotFound): services \"web\" not found"),
        "{stderr}"
    );

    // get -w prints an EndpointSlice another kubectl creates.
    let mut watch = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&east)
        .args(["get", "endpointslices", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let wout = watch.stdout.take().unwrap();
    let _watch = Running(watch);
    let (wtx, wrx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(wout).lines().map_while(Result::ok) {
            if wtx.send(line).is_err() {
                break;
            }
        }
    });
    // kubesim's counters tell when kubectl's watch request has arrived.
    let control = printed
        .iter()
        .find_map(|l| l.strip_prefix("control: http://"))
        .expect("control address")
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !watch_counted(&control) {
        assert!(
            Instant::now() < deadline,
            "kubectl get -w never opened a watch"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let slice_file = dir.path().join("slice.yaml");
    let created_at = Instant::now();
    assert_eq!(
        ok(
            &east,
            &["create", validate, "-f", slice_file.to_str().unwrap()]
        )
        .trim(),
        "endpointslice.discovery.k8s.io/web-abc created"
    );
    let mut seen = None;
    while created_at.elapsed() < Duration::from_secs(10) {
        match wrx.recv_timeout(Duration::from_secs(10)) {
            Ok(line) if line.starts_with("web-abc") => {
                seen = Some(created_at.elapsed());
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let delay = seen.expect("kubectl get -w printed web-abc");
    eprintln!(
        "kubectl get -w printed the new EndpointSlice {delay:?} after kubectl create started"
    );

    // Links, deletes.
    let link_file = dir.path().join("link.yaml");
    ok(
        &east,
        &[
            "apply",
            "--server-side",
            validate,
            "-f",
            link_file.to_str().unwrap(),
        ],
    );
    let links = ok(&east, &["get", "links.multicluster.linkerd.io", "-A"]);
    assert!(
        links
            .lines()
            .any(|l| l.starts_with("linkerd-multicluster") && l.contains("east")),
        "{links}"
    );
    let v1 = ok(
        &east,
        &[
            "get",
            "links.v1alpha1.multicluster.linkerd.io",
            "-n",
            "linkerd-multicluster",
            "east",
            "-o",
            "jsonpath={.apiVersion}",
        ],
    );
    assert_eq!(v1, "multicluster.linkerd.io/v1alpha1");
    assert_eq!(
        ok(&east, &["delete", "svc", "web"]).trim(),
        "service \"web\" deleted"
    );
    let (found, _, stderr) = kubectl(&east, &["get", "svc", "web"]);
    assert!(!found && stderr.contains("NotFound"), "{stderr}");
}
