//! Start-up truth (issue 15, item 1): from its first answer on, the server
//! never says NXDOMAIN or NODATA for a name that exists once it is ready.
//! Queries go out continuously from the moment the sockets are bound until
//! `/ready`; every answer seen must be SERVFAIL or the answer given once
//! ready. File source with a large set, live mode with several kubesim
//! clusters that sync at different times.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::json;

use crate::kubesim_api::{client, sim};
use crate::live::{link_doc, secret_doc};
use crate::support::{Links, Live, Options, Proto, Q, ask, create_object, q, text};
use crate::zonegen;

/// What a client saw: rcode and the Answer section as sorted text without
/// TTLs (rotation and stale TTL caps are not a different answer).
type Seen = (ResponseCode, BTreeSet<String>);

async fn seen(dns: SocketAddr, query: &Q) -> Seen {
    let (msg, _) = ask(dns, Proto::Udp, query).await;
    let records = msg
        .answers
        .iter()
        .map(|r| {
            let t = text(r);
            let mut f: Vec<&str> = t.split(' ').collect();
            if f.len() > 1 {
                f.remove(1);
            }
            f.join(" ")
        })
        .collect();
    (msg.metadata.response_code, records)
}

/// Asks `queries` round-robin from 4 tasks until `ready` (at most `limit`),
/// then once more each: every answer seen before must be SERVFAIL or that
/// final one. Returns how many answers came before ready and how many of
/// them were SERVFAIL.
async fn every_answer_final_or_servfail(
    dns: SocketAddr,
    ready: impl Fn() -> bool + Send + Sync + 'static,
    queries: Vec<Q>,
    limit: Duration,
) -> (usize, usize) {
    let queries = Arc::new(queries);
    let ready = Arc::new(ready);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..4 {
        let (queries, ready, stop) = (queries.clone(), ready.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let mut i = t;
            // Bounded: at most `limit`, at most 200,000 queries per task.
            for _ in 0..200_000 {
                if stop.load(Ordering::Relaxed) || started.elapsed() > limit {
                    break;
                }
                if ready() {
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
                let query = &queries[i % queries.len()];
                got.push((i % queries.len(), seen(dns, query).await));
                i += 4;
            }
            got
        }));
    }
    let mut before = Vec::new();
    for t in tasks {
        before.extend(t.await.expect("query task"));
    }
    assert!(ready(), "not ready within {limit:?}");
    let mut finals = Vec::new();
    for query in queries.iter() {
        finals.push(seen(dns, query).await);
    }
    let mut servfails = 0;
    for (i, got) in &before {
        if got.0 == ResponseCode::ServFail {
            servfails += 1;
            continue;
        }
        assert_eq!(
            got, &finals[*i],
            "{} {}: answered before ready with something that is not its answer once ready",
            queries[*i].name, queries[*i].rtype
        );
    }
    (before.len(), servfails)
}

/// [`every_answer_final_or_servfail`] until `server` is ready, asserting
/// that start-up was seen (some SERVFAIL before ready).
async fn observe_start_up(server: &crate::support::TestServer, queries: Vec<Q>, limit: Duration) {
    let shared = server.server.shared.clone();
    let (before, servfails) = every_answer_final_or_servfail(
        server.dns,
        move || shared.ready.load(Ordering::Acquire),
        queries,
        limit,
    )
    .await;
    assert!(
        servfails > 0,
        "start-up was observed ({before} answers before ready, {servfails} SERVFAIL)"
    );
}

const NAMESPACES: usize = 4;

/// A clusterset in files: in each cluster, `per_cluster` services, every
/// third one a federated StatefulSet (pod names), the others flat federated
/// ClusterIP services, plus a gateway-mode service of east with a mirror in
/// the local cluster west.
pub(crate) fn write_zones(root: &std::path::Path, per_cluster: usize) {
    use std::fmt::Write as _;
    use zonegen::{FEDERATED, GATEWAY, Ips, service_doc, slice_doc};
    let clusters = ["west", "east", "north"];
    let mut ips = Ips::default();
    for (c, cluster) in clusters.iter().enumerate() {
        for n in 0..NAMESPACES {
            let ns = format!("ns{n}");
            let mut out = String::new();
            for i in (n..per_cluster).step_by(NAMESPACES) {
                let name = format!("svc-{i}");
                if i % 3 == 0 {
                    let ports = [("peer", 7000u16, 7000u16)];
                    let pods: Vec<String> = (0..3).map(|_| ips.pod(c)).collect();
                    service_doc(&mut out, &name, &ns, &FEDERATED, "None", &ports);
                    slice_doc(&mut out, &name, &ns, &FEDERATED, &ports, &pods, true);
                } else {
                    let ports = [("http", 80u16, 8080u16)];
                    let pods: Vec<String> = (0..2).map(|_| ips.pod(c)).collect();
                    let ip = format!("10.200.{}.{}", i / 256, i % 256);
                    service_doc(&mut out, &name, &ns, &FEDERATED, &ip, &ports);
                    slice_doc(&mut out, &name, &ns, &FEDERATED, &ports, &pods, false);
                }
            }
            if n == 0 && *cluster == "east" {
                service_doc(
                    &mut out,
                    "web",
                    &ns,
                    &GATEWAY,
                    "10.200.99.1",
                    &[("http", 80, 8080)],
                );
                zonegen::gateway_doc(&mut out, "127.0.0.10");
            }
            if n == 0 && *cluster == "west" {
                let _ = writeln!(
                    out,
                    "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web-east\n  namespace: {ns}\n  labels:\n    mirror.linkerd.io/mirrored-service: \"true\"\n    mirror.linkerd.io/cluster-name: east\nspec:\n  clusterIP: 10.96.99.1\n  ports:\n  - name: http\n    port: 80"
                );
            }
            let dir = root.join(cluster);
            std::fs::create_dir_all(&dir).expect("cluster dir");
            std::fs::write(dir.join(format!("{ns}.yaml")), out).expect("write zones");
        }
    }
}

fn name(label: &str, ns: usize) -> String {
    format!("{label}.ns{ns}.svc.clusterset.local.")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_source_start_up_answers_are_final_or_servfail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let per_cluster = 3000;
    write_zones(dir.path(), per_cluster);
    // Names of the services read last (the highest numbers), in every
    // shape: per-cluster, federated, federated pod, SRV, the mirror-backed
    // gateway name, an empty non-terminal, and names that never exist.
    let mut queries = Vec::new();
    for i in [per_cluster - 1, per_cluster - 2, per_cluster - 3] {
        let ns = i % NAMESPACES;
        for cluster in ["west", "east", "north"] {
            queries.push(q(&name(&format!("svc-{i}-{cluster}"), ns), RecordType::A));
            queries.push(q(&name(&format!("nope-{i}-{cluster}"), ns), RecordType::A));
        }
        queries.push(q(&name(&format!("svc-{i}-federated"), ns), RecordType::A));
        if i % 3 == 0 {
            queries.push(q(
                &format!(
                    "svc-{i}-0.north.{}",
                    name(&format!("svc-{i}-federated"), ns)
                ),
                RecordType::A,
            ));
            queries.push(q(
                &format!("_peer._tcp.{}", name(&format!("svc-{i}-federated"), ns)),
                RecordType::SRV,
            ));
        }
    }
    queries.push(q(&name("web-east", 0), RecordType::A));
    queries.push(q(&name("svc-1-north", 1), RecordType::AAAA));
    queries.push(q("ns3.svc.clusterset.local.", RecordType::A));

    let server = crate::support::start_unready(
        dir.path(),
        Options {
            local: Some("west"),
            ..Options::default()
        },
    )
    .await;
    observe_start_up(&server, queries, Duration::from_secs(120)).await;
    let (final_web, _) = seen(server.dns, &q(&name("web-east", 0), RecordType::A)).await;
    assert_eq!(final_web, ResponseCode::NoError);
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_start_up_answers_are_final_or_servfail() {
    let names = ["west", "east", "north", "south"];
    let (sim, _dir) = sim(&names, |_| {}).await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster").clone();
    let local = cluster("west");
    let lc = client(&local).await;
    let per_cluster = 60;
    for (c, remote) in ["east", "north", "south"].into_iter().enumerate() {
        let rc = client(&cluster(remote)).await;
        for i in 0..per_cluster {
            let svc = format!("svc-{i}");
            let mut spec = json!({"ports": [{"name": "peer", "port": 7000}]});
            if i % 3 == 0 {
                spec["clusterIP"] = json!("None");
            }
            create_object(
                &rc,
                json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": svc, "namespace": "prod",
                                 "labels": {"mirror.linkerd.io/exported": "remote-discovery",
                                            "mirror.linkerd.io/federated": "member"}},
                    "spec": spec
                }),
            )
            .await;
            let endpoints: Vec<_> = (0..2)
                .map(|p| {
                    json!({"addresses": [format!("10.{}.{}.{}", c + 1, i, p + 1)],
                           "hostname": format!("{svc}-{p}"), "conditions": {"ready": true}})
                })
                .collect();
            create_object(
                &rc,
                json!({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": format!("{svc}-1"), "namespace": "prod",
                                 "labels": {"kubernetes.io/service-name": svc}},
                    "addressType": "IPv4",
                    "ports": [{"name": "peer", "port": 7000, "protocol": "TCP"}],
                    "endpoints": endpoints
                }),
            )
            .await;
        }
        let kubeconfig =
            std::fs::read_to_string(cluster(remote).kubeconfig_path()).expect("kubeconfig");
        create_object(
            &lc,
            secret_doc(&format!("cluster-credentials-{remote}"), &kubeconfig),
        )
        .await;
        create_object(&lc, link_doc(remote)).await;
    }
    // The clusters answer at different speeds, so they sync one by one.
    cluster("west").set_latency(Duration::from_millis(100));
    cluster("north").set_latency(Duration::from_millis(300));
    cluster("south").set_latency(Duration::from_millis(700));

    let mut queries = Vec::new();
    for i in [0, 1, per_cluster - 1] {
        let p = |label: String| format!("{label}.prod.svc.clusterset.local.");
        for c in ["east", "north", "south"] {
            queries.push(q(&p(format!("svc-{i}-{c}")), RecordType::A));
            queries.push(q(&p(format!("svc-{i}-{c}")), RecordType::SRV));
            queries.push(q(&p(format!("gone-{i}-{c}")), RecordType::A));
        }
        queries.push(q(&p(format!("svc-{i}-federated")), RecordType::A));
        queries.push(q(
            &format!("svc-{i}-1.south.{}", p(format!("svc-{i}-federated"))),
            RecordType::A,
        ));
    }
    queries.push(q("prod.svc.clusterset.local.", RecordType::A));

    let mut live = Live::new(
        local.kubeconfig_path(),
        Links::Linkerd {
            namespace: "linkerd-multicluster".into(),
        },
    );
    live.wait_ready = false;
    live.sync_timeout = Duration::from_secs(60);
    let server = crate::support::start_live(
        Options {
            local: Some("west"),
            ..Options::default()
        },
        live,
    )
    .await;
    observe_start_up(&server, queries, Duration::from_secs(60)).await;
    let (rcode, records) = seen(
        server.dns,
        &q("svc-1-federated.prod.svc.clusterset.local.", RecordType::A),
    )
    .await;
    assert_eq!((rcode, records.len()), (ResponseCode::NoError, 6));
    server.server.stop().await;
}
