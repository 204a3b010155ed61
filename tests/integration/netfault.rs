//! Live mode across real network faults. The linked cluster `east` is a
//! kubesim process inside its own network namespace (netlab: a veth pair in
//! 198.18.0.0/15, nothing routed elsewhere); faults are nftables rules on
//! its API port (packets dropped both ways, one way, only new connections,
//! or reset) or a paused process (SIGSTOP). `local` and `north` are
//! in-process kubesim clusters on loopback.
//!
//! For each fault: east is unreachable within `--cluster-timeout` plus a
//! second; meanwhile `api-east` answers its last-known address with the TTL
//! capped and `api-federated` answers north alone (never NXDOMAIN, never an
//! address east did not have); a change made in east during the fault is
//! served within a few seconds of the heal. The tests need root (network
//! namespaces) and `ip` and `nft`; without them each says so and passes.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use netlab::{Fault, Host, Lab, Sim};
use serde_json::{Value, json};

use crate::binary::http_get;
use crate::kubesim_api::{client, sim};
use crate::live::{NS, SECOND, a, export, fqdn, until, until_report};
use crate::support::{Links, Live, Options, Proto, TestServer, ask, ede, q, start_live};

/// The cluster timeout of these tests.
const TIMEOUT: Duration = Duration::from_secs(2);

/// What a fault test runs on. Field order is drop order: the server goes
/// before the clusters it watches, the namespace last.
struct Rig {
    server: TestServer,
    remote: Sim,
    host: Host,
    _local: kubesim::Sim,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    _lab: Lab,
}

/// The lab, or `None` (after saying why) where namespaces cannot be made.
fn lab() -> Option<Lab> {
    match Lab::new() {
        Ok(Some(lab)) => Some(lab),
        Ok(None) => None,
        Err(e) => panic!("netlab: {e}"),
    }
}

fn service(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"mirror.linkerd.io/exported": "remote-discovery",
                                "mirror.linkerd.io/federated": "member"}},
        "spec": {"ports": [{"name": "http", "port": 80}]}
    })
}

fn slice(service: &str, addrs: &[&str]) -> Value {
    let endpoints: Vec<Value> = addrs
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-1"), "namespace": NS,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints
    })
}

/// East in its namespace with `api` at 10.1.0.1, exported and federated.
fn remote_east(host: &Host, dir: &Path) -> Sim {
    let remote = host
        .kubesim(&["east"], dir, &[])
        .expect("kubesim in the namespace");
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    for doc in [ns, service("api"), slice("api", &["10.1.0.1"])] {
        remote
            .apply("east", &doc)
            .expect("apply through the control endpoint");
    }
    remote
}

/// The clusters file naming east (in the lab) and north (on loopback).
fn clusters_file(dir: &Path, remote: &Sim, north: &kubesim::Cluster) -> std::path::PathBuf {
    let path = dir.join("clusters.yaml");
    let text = format!(
        "- name: east\n  kubeconfig: {}\n- name: north\n  kubeconfig: {}\n",
        remote.kubeconfig("east").display(),
        north.kubeconfig_path().display()
    );
    std::fs::write(&path, text).expect("clusters file");
    path
}

/// Starts the rig; `before` runs (on the host) before the server starts.
async fn rig(lab: Lab, before: impl FnOnce(&Host, &Sim), tweak: impl FnOnce(&mut Live)) -> Rig {
    let host = lab.host("east").expect("lab host");
    let remote_dir = tempfile::tempdir().expect("tempdir");
    let remote = remote_east(&host, remote_dir.path());
    let (local, local_dir) = sim(&["local", "north"], |_| {}).await;
    let north = local.cluster("north").expect("north").clone();
    export(&client(&north).await, "api", &["10.2.0.1"]).await;
    let file = clusters_file(local_dir.path(), &remote, &north);
    before(&host, &remote);
    let mut live = Live::new(
        local.cluster("local").expect("local").kubeconfig_path(),
        Links::File(file),
    );
    live.cluster_timeout = TIMEOUT;
    live.federated_grace = Duration::from_millis(500);
    tweak(&mut live);
    let server = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        live,
    )
    .await;
    Rig {
        server,
        remote,
        host,
        _local: local,
        _dirs: (remote_dir, local_dir),
        _lab: lab,
    }
}

/// The A answers of `name` obey decision 5 while east is unreachable:
/// NOERROR, one of the sets in `want` (what the server last heard), TTL
/// capped at 5, and say so when `stale` names the cluster they are from
/// (EDE 3).
async fn served_stale(dns: SocketAddr, name: &str, want: &[&[&str]], stale: Option<&str>) {
    let (msg, _) = ask(dns, Proto::Udp, &q(&fqdn(name), RecordType::A)).await;
    assert_eq!(msg.metadata.response_code, ResponseCode::NoError, "{name}");
    match (stale, ede(&msg)) {
        (Some(cluster), Some((3, text))) => assert!(
            text.starts_with(&format!("cluster {cluster} not heard from for ")),
            "{name}: {text}"
        ),
        (None, None) => {}
        (want, got) => panic!("{name}: EDE {got:?}, wanted stale {want:?}"),
    }
    assert!(
        msg.answers.iter().all(|r| r.ttl <= 5),
        "{name}: TTL capped: {:?}",
        msg.answers
    );
    let got = a(dns, &fqdn(name)).await.1;
    let ok = want.iter().any(|w| {
        w.iter()
            .map(|s| (*s).to_owned())
            .collect::<std::collections::BTreeSet<_>>()
            == got
    });
    assert!(ok, "{name}: {got:?}, not one of {want:?}");
}

/// How a fault is made and undone.
enum Cut {
    Rule(Fault),
    Pause,
}

impl Cut {
    fn label(&self) -> &'static str {
        match self {
            Cut::Rule(f) => f.label(),
            Cut::Pause => "pause",
        }
    }

    fn apply(&self, r: &Rig) {
        match self {
            Cut::Rule(f) => r.host.fault(r.remote.api_port("east"), *f).expect("fault"),
            Cut::Pause => r.remote.pause().expect("SIGSTOP"),
        }
    }

    fn heal(&self, r: &Rig) {
        match self {
            Cut::Rule(_) => r.host.heal().expect("heal"),
            Cut::Pause => r.remote.resume().expect("SIGCONT"),
        }
    }
}

/// One silent fault, end to end; prints the detection and recovery times.
async fn silent_fault(cut: Cut) {
    let Some(lab) = lab() else { return };
    let r = rig(lab, |_, _| {}, |_| {}).await;
    let (dns, admin) = (r.server.dns, r.server.admin);
    let both = ["10.1.0.1", "10.2.0.1"];
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &both,
        10 * SECOND,
    )
    .await;
    until_report(admin, "east", "east synced", 10 * SECOND, |v| {
        v["state"] == "synced"
    })
    .await;

    let cut_at = Instant::now();
    cut.apply(&r);
    until_report(
        admin,
        "east",
        "east unreachable",
        TIMEOUT + 3 * SECOND,
        |v| v["state"] == "unreachable",
    )
    .await;
    let detected = cut_at.elapsed();
    assert!(
        detected <= TIMEOUT + SECOND,
        "{}: detected after {detected:?}",
        cut.label()
    );

    // A change in east the server cannot see yet (a paused process cannot
    // take it: its change waits for the heal).
    let paused = matches!(cut, Cut::Pause);
    if !paused {
        r.remote
            .apply("east", &slice("api", &["10.1.0.9"]))
            .expect("change during the fault");
    }
    // With only new connections dropped, the open watch still brings the
    // change: either is what the server last heard.
    let east: &[&[&str]] = match cut {
        Cut::Rule(Fault::DropNew) => &[&["10.1.0.1"], &["10.1.0.9"]],
        _ => &[&["10.1.0.1"]],
    };
    served_stale(dns, "api-east", east, Some("east")).await;
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &["10.2.0.1"],
        2 * SECOND,
    )
    .await;
    served_stale(dns, "api-federated", &[&["10.2.0.1"]], None).await;

    let healed_at = Instant::now();
    cut.heal(&r);
    if paused {
        r.remote
            .apply("east", &slice("api", &["10.1.0.9"]))
            .expect("change after the pause");
    }
    until(
        dns,
        &fqdn("api-east"),
        ResponseCode::NoError,
        &["10.1.0.9"],
        10 * SECOND,
    )
    .await;
    until_report(admin, "east", "east synced again", 10 * SECOND, |v| {
        v["state"] == "synced"
    })
    .await;
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &["10.1.0.9", "10.2.0.1"],
        5 * SECOND,
    )
    .await;
    let recovered = healed_at.elapsed();
    eprintln!(
        "fault {}: unreachable after {detected:?}, served again after {recovered:?}",
        cut.label()
    );
    assert!(
        recovered <= 5 * SECOND,
        "{}: recovered after {recovered:?}",
        cut.label()
    );
    r.server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole() {
    silent_fault(Cut::Rule(Fault::Blackhole)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset() {
    silent_fault(Cut::Rule(Fault::Reset)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_inbound_only() {
    silent_fault(Cut::Rule(Fault::DropInbound)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_outbound_only() {
    silent_fault(Cut::Rule(Fault::DropOutbound)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_api_server() {
    silent_fault(Cut::Pause).await;
}

/// Only new connections are dropped (a firewall or conntrack change):
/// the watches already open still carry changes, but nothing new can
/// connect, the heartbeat included, so east is unreachable all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_new_connections_only() {
    silent_fault(Cut::Rule(Fault::DropNew)).await;
}

/// Black-holed from the start: readiness gives up on it after the sync
/// timeout, north is served, east is unreachable (its names SERVFAIL: it
/// never synced), and it is served once the hole closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_holed_at_start_up() {
    let Some(lab) = lab() else { return };
    let r = rig(
        lab,
        |host, remote| {
            host.fault(remote.api_port("east"), Fault::Blackhole)
                .expect("fault");
        },
        |l| {
            l.sync_timeout = 3 * SECOND;
            l.wait_ready = false;
        },
    )
    .await;
    let (dns, admin) = (r.server.dns, r.server.admin);
    let started = Instant::now();
    until(
        dns,
        &fqdn("api-north"),
        ResponseCode::NoError,
        &["10.2.0.1"],
        5 * SECOND,
    )
    .await;
    crate::support::eventually("/ready", 6 * SECOND, || async {
        let (code, body) = tokio::task::spawn_blocking(move || http_get(admin, "/ready"))
            .await
            .expect("ready");
        if code == 200 {
            Ok(())
        } else {
            Err(format!("{code} {body}"))
        }
    })
    .await;
    assert!(
        started.elapsed() >= 2 * SECOND,
        "ready only after the sync timeout"
    );
    until_report(
        admin,
        "east",
        "east unreachable",
        TIMEOUT + 2 * SECOND,
        |v| v["state"] == "unreachable",
    )
    .await;
    let (msg, _) = ask(dns, Proto::Udp, &q(&fqdn("api-east"), RecordType::A)).await;
    assert_eq!(msg.metadata.response_code, ResponseCode::ServFail);
    assert_eq!(
        ede(&msg),
        Some((14, "cluster east not synced yet".to_owned()))
    );
    r.host.heal().expect("heal");
    until(
        dns,
        &fqdn("api-east"),
        ResponseCode::NoError,
        &["10.1.0.1"],
        10 * SECOND,
    )
    .await;
    r.server.server.stop().await;
}

/// A Link whose credentials Secret names a black-holed API server: east
/// is unreachable within the timeout, readiness still comes, north is
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_to_a_black_holed_api_server() {
    let Some(lab) = lab() else { return };
    let host = lab.host("east").expect("lab host");
    let remote_dir = tempfile::tempdir().expect("tempdir");
    let remote = remote_east(&host, remote_dir.path());
    host.fault(remote.api_port("east"), Fault::Blackhole)
        .expect("fault");
    let (local, _dir) = sim(&["local", "north"], |_| {}).await;
    let local_client = client(local.cluster("local").expect("local")).await;
    let north = local.cluster("north").expect("north").clone();
    export(&client(&north).await, "api", &["10.2.0.1"]).await;
    let text = std::fs::read_to_string(remote.kubeconfig("east")).expect("kubeconfig");
    for (name, kc) in [
        ("east", text),
        (
            "north",
            std::fs::read_to_string(north.kubeconfig_path()).expect("kubeconfig"),
        ),
    ] {
        crate::support::create_object(
            &local_client,
            crate::live::secret_doc(&format!("cluster-credentials-{name}"), &kc),
        )
        .await;
        crate::support::create_object(&local_client, crate::live::link_doc(name)).await;
    }
    let mut live = Live::new(
        local.cluster("local").expect("local").kubeconfig_path(),
        Links::Linkerd {
            namespace: "linkerd-multicluster".to_owned(),
        },
    );
    live.cluster_timeout = TIMEOUT;
    live.sync_timeout = 3 * SECOND;
    let started = Instant::now();
    let server = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        live,
    )
    .await;
    assert_eq!(
        a(server.dns, &fqdn("api-north")).await,
        (ResponseCode::NoError, ["10.2.0.1".to_owned()].into())
    );
    until_report(
        server.admin,
        "east",
        "east unreachable",
        TIMEOUT + 2 * SECOND,
        |v| v["state"] == "unreachable",
    )
    .await;
    assert!(started.elapsed() <= TIMEOUT + 4 * SECOND);
    server.server.stop().await;
}

/// The gateway probe of a black-holed gateway fails within its timeout and
/// takes east out of the federated name, while `api-east` still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_gateway_fails_its_probe_within_the_timeout() {
    let Some(lab) = lab() else { return };
    let host = lab.host("east").expect("lab host");
    let remote_dir = tempfile::tempdir().expect("tempdir");
    let remote = remote_east(&host, remote_dir.path());
    let (local, local_dir) = sim(&["local", "north"], |_| {}).await;
    let north = local.cluster("north").expect("north").clone();
    export(&client(&north).await, "api", &["10.2.0.1"]).await;
    // The gateway is the lab host; its probe asks kubesim's control
    // endpoint there, which answers 200 until its port is black-holed.
    let probe_port = remote.control().port();
    let path = local_dir.path().join("clusters.yaml");
    let text = format!(
        "- name: east\n  kubeconfig: {}\n  gateway:\n    addresses: [{}]\n    port: 4143\n    probe: {{path: /clusters, port: {probe_port}, period: 200ms, timeout: 300ms, failureThreshold: 2}}\n- name: north\n  kubeconfig: {}\n",
        remote.kubeconfig("east").display(),
        host.addr(),
        north.kubeconfig_path().display()
    );
    std::fs::write(&path, text).expect("clusters file");
    let mut live = Live::new(
        local.cluster("local").expect("local").kubeconfig_path(),
        Links::File(path),
    );
    live.cluster_timeout = TIMEOUT;
    let server = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        live,
    )
    .await;
    let dns = server.dns;
    until_report(server.admin, "east", "probe alive", 5 * SECOND, |v| {
        v["gatewayProbe"]["alive"] == true
    })
    .await;
    let cut = Instant::now();
    host.fault(probe_port, Fault::Blackhole).expect("fault");
    let report = until_report(server.admin, "east", "probe dead", 3 * SECOND, |v| {
        v["gatewayProbe"]["alive"] == false
    })
    .await;
    // Two failures in a row, each given up after 300 ms, 200 ms apart
    // (plus the probe's jitter).
    assert!(
        cut.elapsed() <= Duration::from_millis(1500),
        "{:?}",
        cut.elapsed()
    );
    let error = report["gatewayProbe"]["lastError"]
        .as_str()
        .unwrap_or_default();
    assert!(error.contains("within the timeout"), "{report:#}");
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &["10.2.0.1"],
        2 * SECOND,
    )
    .await;
    // The API is not cut: east's own name is served fresh.
    assert_eq!(
        a(dns, &fqdn("api-east")).await,
        (ResponseCode::NoError, ["10.1.0.1".to_owned()].into())
    );
    host.heal().expect("heal");
    server.server.stop().await;
}
