//! DNS conformance in live mode: fixture F loaded into kubesim (clusters
//! west, east and north) through the Kubernetes API, served by a live-mode
//! server whose local cluster is west and whose clusters file links east and
//! north.
//!
//! - [`table_over_udp_and_tcp_live`] runs the very table of
//!   `conformance.rs` ([`cases`]), every row over UDP and TCP, so the file
//!   source and the live source are held to the same answers.
//! - `case_86_…` to `case_93_…` cover docs/dns.md §3.4 and §6 cases 86–93,
//!   which need live watches, gateway probes and clusters that go away: a
//!   probe target we run ourselves, `Cluster::stop`, a rewritten clusters
//!   file and a patched EndpointSlice.
//!
//! What the API cannot reproduce from the fixture files, and how it is
//! adapted (see [`Fixture::new`] and [`load_fixture`]):
//!
//! - `status` is ignored on create, as kube-apiserver does: the east
//!   `linkerd-gateway` load-balancer ingress (203.0.113.10) is written
//!   afterwards through the `status` subresource.
//! - kube-apiserver requires a name on every port of a multi-port Service;
//!   fixture F's `web` (and its mirrors) leave port 8443 unnamed, so it is
//!   loaded as `unnamed-8443` ([`name_unnamed_ports`]).
//! - `creationTimestamp`, `uid` and `resourceVersion` are server-set. No
//!   row of fixture F depends on which of two objects is older (the collision
//!   fixture F2 of case 110 is not loaded here), and objects are created in
//!   file-name order, cluster by cluster (west, east, north).
//! - Fixture F's ClusterIPs lie in 10.96–10.130 and in three IPv6 ranges
//!   (the west mirror `fd00:96::10`, east's own `v6only` at `fd00:100::10`,
//!   north's dual-stack `api` at `fd00:110::5`), so the kubesim clusters get
//!   the service ranges `10.0.0.0/8`, `fd00:96::/108`, `fd00:100::/108` and
//!   `fd00:110::/108`.
//!
//! Every wait is a bounded poll ([`eventually`]): every 20 ms, at most the
//! stated time.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType::{A, AAAA, SRV};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::conformance::{Case, SOA, a_set, c, cases, metric, nodata, nx, run_all, set, v};
use crate::kubesim_api::{client, sim};
use crate::support::{
    Links, Live, Options, Proto, TestServer, ask, create_object, fixture, loopback_exempt, q,
    start_live,
};
use crate::support::{eventually, yaml_docs};

/// The spec cases (docs/dns.md §6.2) covered here, for `conformance::coverage`.
pub(crate) const CASES: &[u32] = &[86, 87, 88, 89, 90, 91, 92, 93];

const WEB_EAST: &str = "web-east.prod.svc.clusterset.local.";
const PAY_EAST: &str = "pay-east.prod.svc.clusterset.local.";
const BB_EAST: &str = "bb-east.prod.svc.clusterset.local.";
const BB_FED: &str = "bb-federated.prod.svc.clusterset.local.";
const DB_EAST: &str = "db-east.prod.svc.clusterset.local.";
const DB_FED: &str = "db-federated.prod.svc.clusterset.local.";
const API_NORTH: &str = "api-north.prod.svc.clusterset.local.";
const ZZZ_EAST: &str = "zzz-east.prod.svc.clusterset.local.";

/// `owner ttl IN A ip` for each address.
fn a_records(owner: &str, ttl: u32, ips: &[&str]) -> Vec<String> {
    ips.iter()
        .map(|ip| {
            let t = if ip.contains(':') { "AAAA" } else { "A" };
            format!("{owner} {ttl} IN {t} {ip}")
        })
        .collect()
}

/// EDE 3 of an answer from north's last-known data (`*`: its age in
/// seconds).
const STALE_NORTH: (u16, &str) = (3, "cluster north not heard from for *s");
/// EDE 22 of north's names past `max_stale` (1 s in case 90).
const PAST_MAX_STALE: (u16, &str) = (22, "cluster north not heard from for *s (max-stale 1s)");
/// EDE 14 of a name east could hold before it has synced.
const EAST_NOT_READY: (u16, &str) = (14, "cluster east not synced yet");

/// A SERVFAIL row: empty Answer, `SOA(Z)` in Authority, AA=1.
fn servfail(n: u32, name: &'static str, query: crate::support::Q) -> Case {
    Case {
        rcode: ResponseCode::ServFail,
        authority: v(&[SOA]),
        ..c(n, name, query)
    }
}

/// Fixture F's options with TTL 30 (positive and negative), so that the
/// stale cap (`stale_ttl` 5) is visible.
fn ttl_30() -> Options {
    Options {
        ttl: 30,
        negative_ttl: 30,
        ..Options::conformance()
    }
}

// ---------------------------------------------------------------------------
// Waiting
// ---------------------------------------------------------------------------

/// What one UDP query answers: rcode, the A/AAAA set, the lowest TTL of the
/// Answer section.
async fn look(dns: SocketAddr, name: &str, rtype: hickory_proto::rr::RecordType) -> Look {
    let (msg, _) = ask(dns, Proto::Udp, &q(name, rtype)).await;
    Look {
        rcode: msg.metadata.response_code,
        addrs: a_set(&msg),
        ttl: msg.answers.iter().map(|r| r.ttl).min(),
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Look {
    rcode: ResponseCode,
    addrs: BTreeSet<String>,
    ttl: Option<u32>,
}

/// Ok when `name` `A` has exactly `rcode` and the addresses `want`.
async fn expect_a(
    dns: SocketAddr,
    name: &str,
    rcode: ResponseCode,
    want: &[&str],
) -> Result<Look, String> {
    let got = look(dns, name, A).await;
    if got.rcode == rcode && got.addrs == set(want) {
        Ok(got)
    } else {
        Err(format!("{name} A: got {got:?}, want {rcode:?} {want:?}"))
    }
}

// ---------------------------------------------------------------------------
// Admin HTTP
// ---------------------------------------------------------------------------

/// `GET path` on the admin server: status code and body.
async fn admin(addr: SocketAddr, path: &str) -> (u16, String) {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || crate::binary::http_get(addr, &path))
        .await
        .expect("admin request")
}

async fn metrics(server: &TestServer) -> String {
    let (code, body) = admin(server.admin, "/metrics").await;
    assert_eq!(code, 200, "/metrics: {body}");
    body
}

/// One cluster's entry of `/debug/clusters` (`None` when it is not listed).
async fn debug_cluster(server: &TestServer, name: &str) -> Option<serde_json::Value> {
    let (code, body) = admin(server.admin, "/debug/clusters").await;
    assert_eq!(code, 200, "/debug/clusters: {body}");
    let doc: serde_json::Value = serde_json::from_str(&body).expect("/debug/clusters is JSON");
    doc["clusters"]
        .as_array()
        .expect("clusters list")
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
}

// ---------------------------------------------------------------------------
// The gateway probe target
// ---------------------------------------------------------------------------

/// A tiny HTTP server on 127.0.0.1 that answers every request with the
/// current status (a gateway's probe endpoint).
struct ProbeTarget {
    port: u16,
    status: Arc<AtomicU16>,
    task: JoinHandle<()>,
}

impl ProbeTarget {
    async fn start(status: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind probe");
        let port = listener.local_addr().expect("probe addr").port();
        let status = Arc::new(AtomicU16::new(status));
        let current = status.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let current = current.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") && got.len() < 8192 {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let code = current.load(Ordering::Relaxed);
                    let reason = if code == 200 {
                        "OK"
                    } else {
                        "Service Unavailable"
                    };
                    let _ = conn
                        .write_all(
                            format!(
                                "HTTP/1.1 {code} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            )
                            .as_bytes(),
                        )
                        .await;
                });
            }
        });
        Self { port, status, task }
    }

    fn set(&self, status: u16) {
        self.status.store(status, Ordering::Relaxed);
    }
}

impl Drop for ProbeTarget {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------
// Fixture F in kubesim
// ---------------------------------------------------------------------------

/// Fixture F in a kubesim, plus a directory for the clusters file.
struct Fixture {
    sim: kubesim::Sim,
    _kubeconfigs: tempfile::TempDir,
    files: tempfile::TempDir,
}

impl Fixture {
    /// Starts kubesim with west, east and north and creates fixture F in
    /// them through the API.
    async fn new() -> Self {
        let (sim, kubeconfigs) = sim(&["west", "east", "north"], |config| {
            // Fixture F's ClusterIPs: 10.96.10.1 … 10.130.0.1, the west
            // mirror fd00:96::10, east's own v6only fd00:100::10 and north's
            // dual-stack api fd00:110::5.
            config.settings.store.service_cidr = (Ipv4Addr::new(10, 0, 0, 0), 8);
            config.settings.store.service_cidrs_v6 = vec![
                ("fd00:96::".parse().expect("v6 net"), 108),
                ("fd00:100::".parse().expect("v6 net"), 108),
                ("fd00:110::".parse().expect("v6 net"), 108),
            ];
        })
        .await;
        for name in ["west", "east", "north"] {
            let cluster = sim.cluster(name).expect("configured");
            load_fixture(&client(cluster).await, &fixture("conformance").join(name)).await;
        }
        Self {
            sim,
            _kubeconfigs: kubeconfigs,
            files: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn cluster(&self, name: &str) -> &Arc<kubesim::Cluster> {
        self.sim.cluster(name).expect("configured cluster")
    }

    fn clusters_file(&self) -> PathBuf {
        self.files.path().join("clusters.yaml")
    }

    /// A clusters-file entry for `name`; with `probe_port`, a declared
    /// gateway 127.0.0.1:4143 whose probe is `GET /ready` on that port every
    /// 100 ms, dead after 2 failures.
    fn entry(&self, name: &str, probe_port: Option<u16>) -> String {
        let kubeconfig = self.cluster(name).kubeconfig_path();
        let kubeconfig =
            serde_json::to_string(kubeconfig.to_str().expect("UTF-8 path")).expect("quoted path");
        let mut out = format!("- name: {name}\n  kubeconfig: {kubeconfig}\n");
        if let Some(port) = probe_port {
            out.push_str(&format!(
                "  gateway:\n    addresses: [127.0.0.1]\n    port: 4143\n    probe: {{path: /ready, port: {port}, period: 100ms, timeout: 1s, failureThreshold: 2}}\n"
            ));
        }
        out
    }

    /// Replaces the clusters file atomically (the server polls it every
    /// second).
    fn write_links(&self, entries: &[String]) {
        let tmp = self.files.path().join("clusters.yaml.tmp");
        std::fs::write(&tmp, entries.concat()).expect("write clusters file");
        std::fs::rename(&tmp, self.clusters_file()).expect("replace clusters file");
    }

    /// Starts a live server, local cluster west, linked clusters from the
    /// clusters file (write it first).
    async fn serve(&self, opts: Options, tweak: impl FnOnce(&mut Live)) -> TestServer {
        let mut live = Live::new(
            self.cluster("west").kubeconfig_path(),
            Links::File(self.clusters_file()),
        );
        tweak(&mut live);
        start_live(opts, live).await
    }

    /// Links east and north (their `linkerd-gateway` Services as gateways)
    /// and serves.
    async fn serve_all(&self, opts: Options, tweak: impl FnOnce(&mut Live)) -> TestServer {
        self.write_links(&[self.entry("east", None), self.entry("north", None)]);
        self.serve(opts, tweak).await
    }
}

/// Creates every document of every `*.yaml` file under `dir` (in file-name
/// order) through the API, adapted to what kube-apiserver accepts and keeps:
///
/// - A Service with several ports must name each of them (kube-apiserver:
///   `spec.ports[2].name: Required value`); fixture F's `web` and its
///   mirrors leave the 8443 port unnamed, which only the file source
///   accepts. It becomes `unnamed-8443` (in the EndpointSlices too, as the
///   EndpointSlice controller copies Service port names). No row queries
///   that port by name; the bare SRV rows list it either way.
/// - `status` is ignored on create: it is written afterwards through the
///   `status` subresource (the east `linkerd-gateway` ingress).
async fn load_fixture(kube: &kube::Client, dir: &Path) {
    for (f, mut doc) in yaml_docs(dir) {
        {
            name_unnamed_ports(&mut doc);
            let status = doc.get("status").cloned();
            create_object(kube, doc.clone()).await;
            if let Some(status) = status {
                assert_eq!(
                    doc["kind"],
                    "Service",
                    "{}: only Service statuses are written",
                    f.display()
                );
                let ns = doc["metadata"]["namespace"].as_str().expect("namespace");
                let name = doc["metadata"]["name"].as_str().expect("name");
                Api::<Service>::namespaced(kube.clone(), ns)
                    .patch_status(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": status })),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("status of {ns}/{name}: {e}"));
            }
        }
    }
}

/// Names the unnamed ports of a Service or EndpointSlice that has several
/// (`unnamed-<port>`).
fn name_unnamed_ports(doc: &mut serde_json::Value) {
    let ports = match doc["kind"].as_str() {
        Some("Service") => doc.pointer_mut("/spec/ports"),
        Some("EndpointSlice") => doc.get_mut("ports"),
        _ => None,
    };
    let Some(serde_json::Value::Array(ports)) = ports else {
        return;
    };
    if ports.len() < 2 {
        return;
    }
    for p in ports {
        if p.get("name")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .is_empty()
        {
            p["name"] = json!(format!("unnamed-{}", p["port"]));
        }
    }
}

// ---------------------------------------------------------------------------
// The shared table
// ---------------------------------------------------------------------------

/// Fixture F's whole conformance table, over UDP and TCP, against the live
/// source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_over_udp_and_tcp_live() {
    let f = Fixture::new().await;
    let server = f.serve_all(Options::conformance(), |_| {}).await;
    run_all(server.dns, &cases()).await;
    server.server.stop().await;
}

// ---------------------------------------------------------------------------
// 86–93
// ---------------------------------------------------------------------------

/// 86, 87: east's declared gateway stops answering its probe (503, dead
/// after 2 failures): the federated names leave east out; east's own names
/// keep answering. When the probe answers 200 again, east is back.
///
/// With a declared gateway the gateway address is the file's (127.0.0.1:4143),
/// not the `linkerd-gateway` Service's ingress; names with a west mirror
/// (web-east) still answer the mirror's ClusterIP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_86_87_gateway_not_alive_leaves_federated_names_only() {
    let f = Fixture::new().await;
    let probe = ProbeTarget::start(200).await;
    f.write_links(&[f.entry("east", Some(probe.port)), f.entry("north", None)]);
    // The declared gateway and its probe target are on loopback, which no
    // cluster may claim unless the operator exempts it.
    let opts = Options {
        trust: loopback_exempt(),
        ..Options::conformance()
    };
    let server = f.serve(opts, |_| {}).await;
    let dns = server.dns;
    let all3 = ["10.30.3.1", "10.10.3.1", "10.20.3.1"];

    eventually(
        "east's probe reports alive",
        Duration::from_secs(5),
        || async {
            let east = debug_cluster(&server, "east")
                .await
                .ok_or("east not listed")?;
            if east["gatewayProbe"]["alive"] == true {
                Ok(())
            } else {
                Err(format!("gatewayProbe {}", east["gatewayProbe"]))
            }
        },
    )
    .await;
    expect_a(dns, BB_FED, ResponseCode::NoError, &all3)
        .await
        .expect("east is a member while its gateway is alive");

    probe.set(503);
    let took = eventually(
        "bb-federated leaves east out",
        Duration::from_secs(5),
        || {
            expect_a(
                dns,
                BB_FED,
                ResponseCode::NoError,
                &["10.30.3.1", "10.20.3.1"],
            )
        },
    )
    .await;
    eprintln!("east left bb-federated {took:?} after its probe turned 503");

    run_all(
        dns,
        &[
            Case {
                answer: a_records(BB_FED, 5, &["10.30.3.1", "10.20.3.1"]),
                ..c(86, "bb-federated without east", q(BB_FED, A))
            },
            Case {
                answer: v(&[
                    "_http._tcp.bb-federated.prod.svc.clusterset.local. 5 IN SRV 0 100 8080 bb-federated.prod.svc.clusterset.local.",
                ]),
                additional: a_records(BB_FED, 5, &["10.30.3.1", "10.20.3.1"]),
                ..c(
                    86,
                    "_http._tcp.bb-federated SRV without east",
                    q("_http._tcp.bb-federated.prod.svc.clusterset.local.", SRV),
                )
            },
            Case {
                answer: a_records(DB_FED, 5, &["10.20.2.10", "10.20.2.11"]),
                ..c(86, "db-federated without east", q(DB_FED, A))
            },
            Case {
                answer: a_records(WEB_EAST, 5, &["10.96.10.1"]),
                ..c(87, "web-east: the west mirror, not health-filtered", q(WEB_EAST, A))
            },
            Case {
                answer: a_records(BB_EAST, 5, &["10.10.3.1"]),
                ..c(87, "bb-east: east's copy, not health-filtered", q(BB_EAST, A))
            },
            Case {
                answer: a_records(DB_EAST, 5, &["10.10.2.10", "10.10.2.11"]),
                ..c(87, "db-east: east's pods, not health-filtered", q(DB_EAST, A))
            },
            Case {
                answer: a_records(PAY_EAST, 5, &["127.0.0.1"]),
                ..c(0, "pay-east (no mirror): the declared gateway address", q(PAY_EAST, A))
            },
            Case {
                answer: v(&[
                    "pay-east.prod.svc.clusterset.local. 5 IN SRV 0 100 4143 pay-east.prod.svc.clusterset.local.",
                ]),
                additional: a_records(PAY_EAST, 5, &["127.0.0.1"]),
                ..c(0, "pay-east SRV: the declared gateway port", q(PAY_EAST, SRV))
            },
        ],
    )
    .await;

    let body = metrics(&server).await;
    assert_eq!(
        metric(&body, "clusterset_dns_gateway_alive{cluster=\"east\"}"),
        Some(0.0),
        "gateway_alive of east in:\n{body}"
    );
    let east = debug_cluster(&server, "east").await.expect("east listed");
    assert_eq!(east["gatewayProbe"]["alive"], false, "{east}");
    assert_eq!(east["gatewayAddresses"], json!(["127.0.0.1"]), "{east}");

    probe.set(200);
    eventually(
        "east is back in bb-federated",
        Duration::from_secs(5),
        || expect_a(dns, BB_FED, ResponseCode::NoError, &all3),
    )
    .await;
    server.server.stop().await;
}

/// 88: every `bb` member is left out (east and north: gateway probes
/// failing; west, the local cluster: watch broken longer than the federated
/// grace): `bb-federated` fails open with the last-known union, TTL capped
/// at `stale_ttl`, and the fail-open counter grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_88_all_members_unhealthy_fails_open() {
    let f = Fixture::new().await;
    let probe = ProbeTarget::start(503).await;
    f.write_links(&[
        f.entry("east", Some(probe.port)),
        f.entry("north", Some(probe.port)),
    ]);
    let server = f
        .serve(ttl_30(), |l| l.federated_grace = Duration::from_millis(300))
        .await;
    let dns = server.dns;

    // East and north dead: west alone, at the normal TTL.
    eventually(
        "east and north leave bb-federated",
        Duration::from_secs(5),
        || expect_a(dns, BB_FED, ResponseCode::NoError, &["10.30.3.1"]),
    )
    .await;
    assert_eq!(look(dns, BB_FED, A).await.ttl, Some(30));

    let fail_open = |body: &str| metric(body, "clusterset_dns_federated_fail_open_total");
    let before = fail_open(&metrics(&server).await).expect("fail-open counter exported");

    f.cluster("west").stop();
    eventually(
        "bb-federated fails open",
        Duration::from_secs(5),
        || async {
            let got = expect_a(
                dns,
                BB_FED,
                ResponseCode::NoError,
                &["10.30.3.1", "10.10.3.1", "10.20.3.1"],
            )
            .await?;
            if got.ttl.is_some_and(|t| t <= 5) {
                Ok(())
            } else {
                Err(format!("TTL {:?}, want at most stale_ttl 5", got.ttl))
            }
        },
    )
    .await;

    run_all(
        dns,
        &[Case {
            answer: a_records(BB_FED, 5, &["10.30.3.1", "10.10.3.1", "10.20.3.1"]),
            // West's part is last-known data; east's and north's are
            // current (their gateways fail, their watches do not).
            ede: Some((3, "cluster west not heard from for *s")),
            ..c(
                88,
                "bb-federated: fail-open union, TTL capped",
                q(BB_FED, A),
            )
        }],
    )
    .await;
    let after = fail_open(&metrics(&server).await).expect("fail-open counter exported");
    assert!(
        after >= before + 2.0,
        "clusterset_dns_federated_fail_open_total went from {before} to {after}; the UDP and TCP answers must count"
    );
    server.server.stop().await;
}

/// 89: north's watch is lost (its API server stops) for less than the grace:
/// `api-north` still answers its last-known addresses with the TTL capped at
/// `stale_ttl` (5, the server's TTL being 30), the stale gauge of north
/// grows, and north stays in the federated names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_89_watch_lost_within_grace_serves_last_known() {
    let f = Fixture::new().await;
    let server = f.serve_all(ttl_30(), |_| {}).await;
    let dns = server.dns;
    let api = ["10.20.1.1", "10.20.1.2"];
    assert_eq!(
        look(dns, API_NORTH, A).await.ttl,
        Some(30),
        "before the loss: the normal TTL"
    );

    f.cluster("north").stop();
    eventually(
        "api-north is served stale",
        Duration::from_secs(5),
        || async {
            let got = expect_a(dns, API_NORTH, ResponseCode::NoError, &api).await?;
            if got.ttl.is_some_and(|t| t <= 5) {
                Ok(())
            } else {
                Err(format!("TTL {:?}", got.ttl))
            }
        },
    )
    .await;
    eventually(
        "north's stale gauge grows",
        Duration::from_secs(5),
        || async {
            let body = metrics(&server).await;
            match metric(
                &body,
                "clusterset_dns_cluster_stale_seconds{cluster=\"north\"}",
            ) {
                Some(s) if s > 0.0 => Ok(()),
                other => Err(format!("stale_seconds of north: {other:?}")),
            }
        },
    )
    .await;

    run_all(
        dns,
        &[
            Case {
                answer: a_records(API_NORTH, 5, &api),
                ede: Some(STALE_NORTH),
                ..c(89, "api-north A: last-known, TTL ≤ 5", q(API_NORTH, A))
            },
            Case {
                answer: a_records(API_NORTH, 5, &["fd00:20::1"]),
                ede: Some(STALE_NORTH),
                ..c(
                    89,
                    "api-north AAAA: last-known, TTL ≤ 5",
                    q(API_NORTH, AAAA),
                )
            },
            Case {
                answer: a_records(API_NORTH, 5, &api),
                ede: Some(STALE_NORTH),
                ..c(
                    89,
                    "api-north A without EDNS: no OPT, so no EDE",
                    crate::support::Q {
                        edns: None,
                        ..q(API_NORTH, A)
                    },
                )
            },
            Case {
                answer: a_records(DB_EAST, 30, &["10.10.2.10", "10.10.2.11"]),
                ..c(
                    0,
                    "db-east: a healthy cluster keeps the normal TTL",
                    q(DB_EAST, A),
                )
            },
        ],
    )
    .await;
    // North is kept in the federated names within the grace.
    let bb = look(dns, BB_FED, A).await;
    assert_eq!(
        bb.addrs,
        set(&["10.10.3.1", "10.20.3.1", "10.30.3.1"]),
        "north stays in bb-federated within the grace"
    );

    let body = metrics(&server).await;
    assert!(
        metric(&body, "clusterset_dns_stale_answers_total").is_some_and(|n| n >= 2.0),
        "clusterset_dns_stale_answers_total counts the stale answers:\n{body}"
    );
    let north = debug_cluster(&server, "north").await.expect("north listed");
    assert_eq!(north["state"], "broken", "{north}");
    assert!(
        north["staleSeconds"].as_f64().is_some_and(|s| s > 0.0),
        "{north}"
    );
    server.server.stop().await;
}

/// 89, federated side (docs/dns.md §3.4: "`cl` kept, same TTL cap"): while
/// north's watch is broken within the grace, `bb-federated` keeps north and
/// its TTL is capped at `stale_ttl` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_89_federated_ttl_capped_while_a_member_is_stale() {
    let f = Fixture::new().await;
    let server = f.serve_all(ttl_30(), |_| {}).await;
    let dns = server.dns;
    f.cluster("north").stop();
    eventually(
        "api-north is served stale",
        Duration::from_secs(5),
        || async {
            let got = look(dns, API_NORTH, A).await;
            if got.ttl.is_some_and(|t| t <= 5) {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await;
    run_all(
        dns,
        &[Case {
            answer: a_records(BB_FED, 5, &["10.30.3.1", "10.10.3.1", "10.20.3.1"]),
            ede: Some((3, "member north not heard from, within the federated grace")),
            ..c(89, "bb-federated: north kept, TTL capped", q(BB_FED, A))
        }],
    )
    .await;
    server.server.stop().await;
}

/// 90: north's watch lost for longer than `max_stale` (1 s) and the
/// federated grace (500 ms): north's names are SERVFAIL with the SOA (not
/// NXDOMAIN), and the federated names leave north out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_90_watch_lost_past_grace_servfails() {
    let f = Fixture::new().await;
    let server = f
        .serve_all(Options::conformance(), |l| {
            l.max_stale = Some(Duration::from_secs(1));
            l.federated_grace = Duration::from_millis(500);
        })
        .await;
    let dns = server.dns;

    let stopped = Instant::now();
    f.cluster("north").stop();
    eventually("api-north turns SERVFAIL", Duration::from_secs(5), || {
        expect_a(dns, API_NORTH, ResponseCode::ServFail, &[])
    })
    .await;
    assert!(
        stopped.elapsed() >= Duration::from_secs(1),
        "SERVFAIL before max_stale ({:?})",
        stopped.elapsed()
    );
    eventually(
        "bb-federated leaves north out",
        Duration::from_secs(5),
        || {
            expect_a(
                dns,
                BB_FED,
                ResponseCode::NoError,
                &["10.30.3.1", "10.10.3.1"],
            )
        },
    )
    .await;

    run_all(
        dns,
        &[
            Case {
                ede: Some(PAST_MAX_STALE),
                ..servfail(90, "api-north A past max_stale", q(API_NORTH, A))
            },
            Case {
                ede: Some(PAST_MAX_STALE),
                ..servfail(90, "api-north AAAA past max_stale", q(API_NORTH, AAAA))
            },
            Case {
                ede: Some(PAST_MAX_STALE),
                ..servfail(
                    90,
                    "north pod name past max_stale",
                    q("db-0.db-north.prod.svc.clusterset.local.", A),
                )
            },
            Case {
                answer: a_records(BB_FED, 5, &["10.30.3.1", "10.10.3.1"]),
                ..c(90, "bb-federated without north", q(BB_FED, A))
            },
            Case {
                answer: a_records(DB_FED, 5, &["10.10.2.10", "10.10.2.11"]),
                ..c(90, "db-federated without north", q(DB_FED, A))
            },
            Case {
                answer: a_records(WEB_EAST, 5, &["10.96.10.1"]),
                ..c(
                    0,
                    "a healthy cluster's names are unaffected",
                    q(WEB_EAST, A),
                )
            },
        ],
    )
    .await;
    let printed = crate::support::kdig(dns, API_NORTH, "A").await;
    assert!(
        printed.contains("EDE: 22 (No Reachable Authority): 'cluster north not heard from for "),
        "{printed}"
    );
    server.server.stop().await;
}

/// 91: east is linked but its API server is down from the start. Readiness
/// waits `sync_timeout` (1 s) for it, then gives up; a name that would be
/// NXDOMAIN because of east is SERVFAIL (nothing caches a false negative),
/// and the federated names are the union of the synced members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_91_never_synced_cluster_servfails_undecidable_names() {
    let f = Fixture::new().await;
    f.cluster("east").stop();
    let started = Instant::now();
    let server = f
        .serve_all(Options::conformance(), |l| {
            l.sync_timeout = Duration::from_secs(1);
            l.wait_ready = false;
        })
        .await;
    let dns = server.dns;

    let (code, _) = admin(server.admin, "/ready").await;
    if started.elapsed() < Duration::from_millis(900) {
        assert_eq!(code, 503, "ready before east synced or sync_timeout passed");
    }
    let took = eventually(
        "/ready after sync_timeout",
        Duration::from_secs(6),
        || async {
            match admin(server.admin, "/ready").await {
                (200, _) => Ok(()),
                (code, body) => Err(format!("{code} {body}")),
            }
        },
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "ready after {took:?}, before the 1 s sync_timeout"
    );

    let east = debug_cluster(&server, "east").await.expect("east listed");
    assert_eq!(east["synced"], false, "{east}");
    assert_eq!(east["gaveUpWaitingForSync"], true, "{east}");
    // Never synced: it has nothing stale, whatever its errors say.
    assert_eq!(east["state"], "gave-up", "{east}");
    assert_eq!(east["staleSeconds"], serde_json::Value::Null, "{east}");
    assert!(east["lastError"].is_string(), "{east}");
    let body = metrics(&server).await;
    assert_eq!(
        metric(
            &body,
            "clusterset_dns_cluster_sync_given_up{cluster=\"east\"}"
        ),
        Some(1.0),
        "{body}"
    );

    run_all(
        dns,
        &[
            Case {
                ede: Some(EAST_NOT_READY),
                ..servfail(
                    91,
                    "zzz-east: undecidable while east never synced",
                    q(ZZZ_EAST, A),
                )
            },
            Case {
                ede: Some(EAST_NOT_READY),
                ..servfail(
                    91,
                    "web-east: east's services are not known yet",
                    q(WEB_EAST, A),
                )
            },
            Case {
                answer: a_records(BB_FED, 5, &["10.30.3.1", "10.20.3.1"]),
                ..c(91, "bb-federated: the synced members only", q(BB_FED, A))
            },
            Case {
                answer: a_records(API_NORTH, 5, &["10.20.1.1", "10.20.1.2"]),
                ..c(0, "api-north: a synced cluster answers", q(API_NORTH, A))
            },
            nx(
                0,
                "zzz-north: decidable, NXDOMAIN",
                q("zzz-north.prod.svc.clusterset.local.", A),
            ),
        ],
    )
    .await;

    // What a user sees: kdig prints why.
    let printed = crate::support::kdig(dns, ZZZ_EAST, "A").await;
    assert!(
        printed.contains("status: SERVFAIL")
            && printed.contains("EDE: 14 (Not Ready): 'cluster east not synced yet'"),
        "{printed}"
    );

    // East comes up: its names answer, the undecidable one is NXDOMAIN.
    f.cluster("east").restart().await.expect("east restarts");
    eventually(
        "east syncs after its API returns",
        Duration::from_secs(15),
        || expect_a(dns, ZZZ_EAST, ResponseCode::NXDomain, &[]),
    )
    .await;
    expect_a(dns, WEB_EAST, ResponseCode::NoError, &["10.96.10.1"])
        .await
        .expect("web-east once east synced");
    server.server.stop().await;
}

/// 92: north is removed from the clusters file: its names are NXDOMAIN
/// within about 3 s (the file is polled every second) and it leaves the
/// federated names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_92_link_deleted_is_nxdomain() {
    let f = Fixture::new().await;
    let server = f.serve_all(Options::conformance(), |_| {}).await;
    let dns = server.dns;
    expect_a(
        dns,
        API_NORTH,
        ResponseCode::NoError,
        &["10.20.1.1", "10.20.1.2"],
    )
    .await
    .expect("api-north while north is linked");

    f.write_links(&[f.entry("east", None)]);
    let took = eventually("api-north turns NXDOMAIN", Duration::from_secs(3), || {
        expect_a(dns, API_NORTH, ResponseCode::NXDomain, &[])
    })
    .await;
    eprintln!("north unlinked: NXDOMAIN after {took:?}");

    run_all(
        dns,
        &[
            nx(92, "api-north A after unlinking", q(API_NORTH, A)),
            nx(
                92,
                "north pod name after unlinking",
                q("db-0.db-north.prod.svc.clusterset.local.", A),
            ),
            Case {
                answer: a_records(BB_FED, 5, &["10.30.3.1", "10.10.3.1"]),
                ..c(92, "bb-federated without north", q(BB_FED, A))
            },
            Case {
                answer: a_records(DB_FED, 5, &["10.10.2.10", "10.10.2.11"]),
                ..c(92, "db-federated without north", q(DB_FED, A))
            },
            nx(
                92,
                "north under federated is gone",
                q("db-0.north.db-federated.prod.svc.clusterset.local.", A),
            ),
        ],
    )
    .await;
    assert!(
        debug_cluster(&server, "north").await.is_none(),
        "north still in /debug/clusters"
    );
    server.server.stop().await;
}

/// 93: `db-1` in east turns not ready (its EndpointSlice patched through
/// the API): `db-east` answers only `db-0` within 1 s, and every name
/// derived from the slice follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_93_endpoint_not_ready_within_1s() {
    let f = Fixture::new().await;
    let server = f.serve_all(Options::conformance(), |_| {}).await;
    let dns = server.dns;
    expect_a(
        dns,
        DB_EAST,
        ResponseCode::NoError,
        &["10.10.2.10", "10.10.2.11"],
    )
    .await
    .expect("db-east before the change");

    let kube = client(f.cluster("east")).await;
    let slices: Api<EndpointSlice> = Api::namespaced(kube, "prod");
    let patch = json!({"endpoints": [
        {"addresses": ["10.10.2.10"], "hostname": "db-0", "conditions": {"ready": true},
         "targetRef": {"kind": "Pod", "name": "db-0", "namespace": "prod"}},
        {"addresses": ["10.10.2.11"], "hostname": "db-1", "conditions": {"ready": false},
         "targetRef": {"kind": "Pod", "name": "db-1", "namespace": "prod"}},
    ]});
    let patched = Instant::now();
    slices
        .patch("db-s2lmn", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch db's slice");
    let took = eventually("db-east drops db-1", Duration::from_secs(1), || {
        expect_a(dns, DB_EAST, ResponseCode::NoError, &["10.10.2.10"])
    })
    .await;
    eprintln!(
        "db-1 not ready: answered {took:?} after the patch returned ({:?} after it was sent)",
        patched.elapsed()
    );

    run_all(
        dns,
        &[
            Case {
                answer: a_records(DB_EAST, 5, &["10.10.2.10"]),
                ..c(93, "db-east A: db-0 only", q(DB_EAST, A))
            },
            nx(
                93,
                "db-1.db-east: not ready",
                q("db-1.db-east.prod.svc.clusterset.local.", A),
            ),
            Case {
                answer: v(&[
                    "_pg._tcp.db-east.prod.svc.clusterset.local. 5 IN SRV 0 100 5432 db-0.db-east.prod.svc.clusterset.local.",
                ]),
                additional: v(&["db-0.db-east.prod.svc.clusterset.local. 5 IN A 10.10.2.10"]),
                ..c(93, "_pg._tcp.db-east SRV: db-0 only", q("_pg._tcp.db-east.prod.svc.clusterset.local.", SRV))
            },
            Case {
                answer: a_records(DB_FED, 5, &["10.10.2.10", "10.20.2.10", "10.20.2.11"]),
                ..c(93, "db-federated without db-1 of east", q(DB_FED, A))
            },
            nodata(
                0,
                "db-east AAAA still NODATA",
                q(DB_EAST, AAAA),
            ),
        ],
    )
    .await;
    server.server.stop().await;
}
