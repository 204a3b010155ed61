//! kubectl against the kubesim binary with the MCS and About API objects, as on a cluster with
//! the kubernetes-sigs/mcs-api and about-api CRDs installed: `kubectl apply -f` (client-side) of
//! a ServiceExport, a v1beta1 ServiceImport and a ClusterProperty, read back with
//! `kubectl get -o json`, by short name and in the other served version.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::kubectl::{Running, kubectl, kubesim_binary, ok, stdout_lines};

const OBJECTS: &str = "apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata:
  name: web
  namespace: default
spec:
  exportedLabels: {team: payments}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata:
  name: web
  namespace: default
spec:
  type: ClusterSetIP
  ips: [10.42.0.10]
  ipFamilies: [IPv4]
  ports:
  - name: http
    protocol: TCP
    port: 80
  sessionAffinity: None
  trafficDistribution: PreferClose
---
apiVersion: about.k8s.io/v1alpha1
kind: ClusterProperty
metadata:
  name: cluster.clusterset.k8s.io
spec:
  value: east
";

fn json(kubeconfig: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = ok(kubeconfig, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl {args:?}: {e}: {out}"))
}

#[test]
fn kubectl_applies_mcs_and_about_objects() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(kubesim_binary())
        .args(["--clusters", "east", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubesim starts");
    let rx = stdout_lines(&mut child);
    let _running = Running(child);
    // kubesim prints its control address last, once every cluster listens.
    // Bounded: at most 20 lines, and a silent kubesim ends the wait after 20 s.
    let ready = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(20)).ok())
        .take(20)
        .any(|line| line.starts_with("control:"));
    assert!(ready, "kubesim printed its control address");
    let east = dir.path().join("east.kubeconfig");
    let file = dir.path().join("mcs.yaml");
    std::fs::write(&file, OBJECTS).unwrap();

    let out = ok(&east, &["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "serviceexport.multicluster.x-k8s.io/web created",
            "serviceimport.multicluster.x-k8s.io/web created",
            "clusterproperty.about.k8s.io/cluster.clusterset.k8s.io created",
        ]
    );

    // Short names and the preferred version (v1beta1) from discovery.
    let export = json(&east, &["get", "svcex", "web", "-o", "json"]);
    assert_eq!(export["apiVersion"], "multicluster.x-k8s.io/v1beta1");
    assert_eq!(export["spec"]["exportedLabels"]["team"], "payments");
    let import = json(&east, &["get", "svcim", "web", "-o", "json"]);
    assert_eq!(import["apiVersion"], "multicluster.x-k8s.io/v1beta1");
    assert_eq!(import["spec"]["type"], "ClusterSetIP");
    assert_eq!(import["spec"]["ips"], serde_json::json!(["10.42.0.10"]));
    assert_eq!(import["spec"]["trafficDistribution"], "PreferClose");
    assert_eq!(
        import["spec"]["ports"],
        serde_json::json!([{"name": "http", "protocol": "TCP", "port": 80}])
    );
    // The v1beta1 import read as v1alpha1 keeps every field (one schema in both versions).
    let alpha = json(
        &east,
        &[
            "get",
            "serviceimports.v1alpha1.multicluster.x-k8s.io",
            "web",
            "-o",
            "json",
        ],
    );
    assert_eq!(alpha["apiVersion"], "multicluster.x-k8s.io/v1alpha1");
    assert_eq!(alpha["spec"], import["spec"]);
    let property = json(
        &east,
        &[
            "get",
            "clusterproperty",
            "cluster.clusterset.k8s.io",
            "-o",
            "json",
        ],
    );
    assert_eq!(property["apiVersion"], "about.k8s.io/v1beta1");
    assert_eq!(property["spec"]["value"], "east");
    assert!(property["metadata"].get("namespace").is_none());
    // The CRD's category.
    let listed = ok(&east, &["get", "multicluster", "-o", "name"]);
    assert_eq!(
        listed.trim(),
        "clusterproperty.about.k8s.io/cluster.clusterset.k8s.io"
    );

    // Applying again changes nothing; a schema break is the server's 422.
    let again = ok(&east, &["apply", "-f", file.to_str().unwrap()]);
    assert!(again.lines().all(|l| l.ends_with(" unchanged")), "{again}");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        OBJECTS.replace("type: ClusterSetIP", "type: NodePort"),
    )
    .unwrap();
    let (applied, _, stderr) = kubectl(&east, &["apply", "-f", bad.to_str().unwrap()]);
    assert!(!applied);
    assert!(
        stderr.contains(
            "Unsupported value: \"NodePort\": supported values: \"ClusterSetIP\", \"Headless\""
        ),
        "{stderr}"
    );
}
