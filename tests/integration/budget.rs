//! A budget per linked cluster (issue 15, item 3): a cluster over its
//! budget keeps its oldest exported services whose endpoints fit; the
//! others answer SERVFAIL (never NXDOMAIN), are reported in
//! `/debug/clusters` and `/metrics`, and cost no memory for their
//! endpoints, while every other cluster is answered exactly.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clusterset_dns::model::budget::Budget;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::json;

use crate::binary::{http_get, serve_args};
use crate::support::{Options, Proto, ask, ede, eventually, q, start};

/// Writes `count` federated flat services `svc-<i>` with `endpoints` ready
/// endpoints each into `dir/<cluster>/`, created `i` seconds after a fixed
/// time (so `svc-0` is the oldest).
fn write_cluster(dir: &Path, cluster: &str, octet: u8, count: usize, endpoints: usize) {
    let mut out = String::new();
    for i in 0..count {
        let _ = write!(
            out,
            "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\n  namespace: prod\n  creationTimestamp: \"2024-01-01T00:{:02}:{:02}Z\"\n  labels:\n    mirror.linkerd.io/exported: remote-discovery\n    mirror.linkerd.io/federated: member\nspec:\n  clusterIP: 10.96.{octet}.{i}\n  ports:\n  - name: http\n    port: 80\n",
            i / 60,
            i % 60
        );
        let _ = write!(
            out,
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: svc-{i}-1\n  namespace: prod\n  labels:\n    kubernetes.io/service-name: svc-{i}\naddressType: IPv4\nports:\n- name: http\n  port: 8080\nendpoints:\n"
        );
        for e in 0..endpoints {
            let _ = writeln!(out, "- addresses: [10.{octet}.{i}.{}]", e + 1);
        }
    }
    let d = dir.join(cluster);
    std::fs::create_dir_all(&d).expect("cluster dir");
    std::fs::write(d.join("services.yaml"), out).expect("write");
}

async fn a(dns: SocketAddr, name: &str) -> (ResponseCode, usize) {
    let (msg, _) = ask(dns, Proto::Udp, &q(name, RecordType::A)).await;
    (msg.metadata.response_code, msg.answers.len())
}

fn name(label: &str) -> String {
    format!("{label}.prod.svc.clusterset.local.")
}

async fn get(admin: SocketAddr, path: &'static str) -> String {
    let (status, body) = tokio::task::spawn_blocking(move || http_get(admin, path))
        .await
        .expect("join");
    assert_eq!(status, 200, "{path}: {body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_budget_the_newest_services_answer_servfail_and_are_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_cluster(dir.path(), "west", 1, 2, 2);
    write_cluster(dir.path(), "east", 2, 30, 10);
    write_cluster(dir.path(), "north", 3, 30, 2);
    let mut opts = Options {
        local: Some("west"),
        ..Options::default()
    };
    // East's 20 oldest services (10 endpoints each) fit 200 endpoints;
    // north's 30 × 2 fit too.
    opts.budget = Some(Budget {
        max_services: 1000,
        max_endpoints: 200,
    });
    let server = start(dir.path(), opts).await;
    let dns = server.dns;
    for i in 0..20 {
        assert_eq!(
            a(dns, &name(&format!("svc-{i}-east"))).await,
            (ResponseCode::NoError, 10),
            "svc-{i}-east is among the 20 oldest"
        );
    }
    for i in 20..30 {
        assert_eq!(
            a(dns, &name(&format!("svc-{i}-east"))).await.0,
            ResponseCode::ServFail,
            "svc-{i}-east is refused: it exists, so never NXDOMAIN"
        );
        let (msg, _) = ask(
            dns,
            Proto::Tcp,
            &q(
                &format!("_http._tcp.{}", name(&format!("svc-{i}-east"))),
                RecordType::SRV,
            ),
        )
        .await;
        assert_eq!(msg.metadata.response_code, ResponseCode::ServFail);
        assert_eq!(
            ede(&msg),
            Some((18, "refused by the budget of cluster east".to_owned())),
            "svc-{i}-east says why (EDE 18 Prohibited)"
        );
        // The federated union leaves the refused member out.
        assert_eq!(
            a(dns, &name(&format!("svc-{i}-federated"))).await,
            (ResponseCode::NoError, 2)
        );
    }
    assert_eq!(
        a(dns, &name("svc-29-north")).await,
        (ResponseCode::NoError, 2)
    );
    assert_eq!(a(dns, &name("svc-30-east")).await.0, ResponseCode::NXDomain);

    let debug: serde_json::Value =
        serde_json::from_str(&get(server.admin, "/debug/clusters").await).expect("json");
    let east = debug["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["name"] == "east")
        .expect("east");
    assert_eq!(east["budget"]["maxServices"], 1000, "{east:#}");
    assert_eq!(east["budget"]["maxEndpoints"], 200, "{east:#}");
    assert_eq!(east["budget"]["refusedServices"], 10, "{east:#}");
    assert_eq!(east["budget"]["refusedEndpoints"], 100, "{east:#}");
    assert_eq!(east["budget"]["refused"][0], "prod/svc-20", "{east:#}");
    assert_eq!(
        east["endpoints"], 200,
        "only the admitted endpoints are held"
    );
    let metrics = get(server.admin, "/metrics").await;
    for want in [
        "clusterset_dns_cluster_refused_services{cluster=\"east\"} 10",
        "clusterset_dns_cluster_refused_endpoints{cluster=\"east\"} 100",
        "clusterset_dns_cluster_refused_services{cluster=\"north\"} 0",
    ] {
        assert!(metrics.contains(want), "missing {want:?} in:\n{metrics}");
    }

    // The budget reloads: raised, everything is served.
    let handle = server.server.settings_handle();
    let mut settings = (*handle.get()).clone();
    settings.budget = Budget::default();
    handle.set(Arc::new(settings));
    eventually(
        "the raised budget admits svc-29",
        Duration::from_secs(10),
        || async { a(dns, &name("svc-29-east")).await == (ResponseCode::NoError, 10) },
    )
    .await;
    assert_eq!(
        a(dns, &name("svc-29-federated")).await,
        (ResponseCode::NoError, 12)
    );
    let metrics = get(server.admin, "/metrics").await;
    assert!(metrics.contains("clusterset_dns_cluster_refused_services{cluster=\"east\"} 0"));
    server.server.stop().await;
}

/// VmRSS of a process, in bytes.
fn rss(pid: u32) -> u64 {
    crate::soak::rss_kib(pid) * 1024
}

/// Puts `services` flat services of `endpoints` endpoints each straight
/// into a kubesim cluster's store (the API path is not what is measured).
fn flood(cluster: &kubesim::Cluster, octet: u8, services: usize, endpoints: usize) {
    use kubesim::resources::{ENDPOINTSLICES, NAMESPACES, SERVICES};
    let mut store = cluster.store();
    let _ = store.create(
        NAMESPACES,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}),
    );
    for i in 0..services {
        store
            .create(
                SERVICES,
                json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": format!("svc-{i}"), "namespace": "prod",
                                 "labels": {"mirror.linkerd.io/exported": "remote-discovery"}},
                    "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
                }),
            )
            .expect("service");
        let eps: Vec<_> = (0..endpoints)
            .map(|e| {
                json!({"addresses": [format!("10.{octet}.{}.{}", (i * endpoints + e) / 250 % 250, e % 250 + 1)],
                       "conditions": {"ready": true}})
            })
            .collect();
        store
            .create(
                ENDPOINTSLICES,
                json!({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": format!("svc-{i}-1"), "namespace": "prod",
                                 "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
                    "addressType": "IPv4",
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                    "endpoints": eps
                }),
            )
            .expect("slice");
    }
}

/// The server binary in live mode over linked `clusters`; its RSS once
/// ready.
fn serve_live(
    dir: &Path,
    local: &kubesim::Cluster,
    clusters: &[&kubesim::Cluster],
    max_endpoints: usize,
) -> (crate::binary::Served, u64) {
    let file = dir.join(format!("clusters-{max_endpoints}-{}.yaml", clusters.len()));
    crate::live::write_clusters(&file, clusters);
    let max = max_endpoints.to_string();
    let args: Vec<&std::ffi::OsStr> = vec![
        "--kubeconfig".as_ref(),
        local.kubeconfig_path().as_os_str(),
        "--local-cluster".as_ref(),
        "west".as_ref(),
        "--clusters".as_ref(),
        file.as_os_str(),
        "--max-endpoints-per-cluster".as_ref(),
        max.as_ref(),
    ];
    let served = serve_args(
        &args,
        "warn",
        std::process::Stdio::inherit(),
        Duration::from_secs(120),
    );
    // Let the source's last bookkeeping settle before reading.
    std::thread::sleep(Duration::from_millis(500));
    let rss = rss(served.child.id());
    (served, rss)
}

/// Runs [`serve_live`] off the async runtime.
async fn serve_live_blocking(
    dir: &Path,
    local: &Arc<kubesim::Cluster>,
    clusters: &[&Arc<kubesim::Cluster>],
    max_endpoints: usize,
) -> (crate::binary::Served, u64) {
    let dir = dir.to_owned();
    let local = local.clone();
    let clusters: Vec<Arc<kubesim::Cluster>> = clusters.iter().map(|c| (*c).clone()).collect();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&kubesim::Cluster> = clusters.iter().map(|c| &**c).collect();
        serve_live(&dir, &local, &refs, max_endpoints)
    })
    .await
    .expect("join")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_cluster_costs_its_budget_and_the_others_answer_exactly() {
    let (sim, dir) = crate::kubesim_api::sim(&["west", "east", "fits", "flood"], |_| {}).await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster").clone();
    // The budget: 20,000 endpoints. `flood` exports ten times that (4,000
    // services of 50); `fits` as many services, within the budget (4,000
    // of 5): what the budget allows a cluster of that many services to
    // cost. East is small and must be answered exactly.
    let budget = 20_000;
    let per = 50;
    let services = 10 * budget / per;
    flood(&cluster("fits"), 21, services, budget / services);
    flood(&cluster("flood"), 20, services, per);
    flood(&cluster("east"), 30, 10, 3);
    let (local, east) = (cluster("west"), cluster("east"));

    // The reference: a cluster that exports what the budget allows.
    let (at_budget, at_budget_rss) =
        serve_live_blocking(dir.path(), &local, &[&east, &cluster("fits")], budget).await;
    drop(at_budget);

    let (bounded, bounded_rss) =
        serve_live_blocking(dir.path(), &local, &[&east, &cluster("flood")], budget).await;
    for i in 0..10 {
        assert_eq!(
            a(bounded.dns, &name(&format!("svc-{i}-east"))).await,
            (ResponseCode::NoError, 3),
            "east is answered exactly"
        );
    }
    let admitted = budget / per;
    // A sample of the flood's names: each is served in full or refused
    // (SERVFAIL), never NXDOMAIN.
    let (mut served, mut refused) = (0, 0);
    for i in (0..services).step_by(20) {
        let (msg, _) = ask(
            bounded.dns,
            Proto::Tcp,
            &q(&name(&format!("svc-{i}-flood")), RecordType::A),
        )
        .await;
        match msg.metadata.response_code {
            ResponseCode::NoError => {
                assert_eq!(msg.answers.len(), per);
                served += 1;
            }
            ResponseCode::ServFail => refused += 1,
            other => panic!("svc-{i}-flood: {other:?}"),
        }
    }
    assert!(
        served > 0 && refused > 0,
        "{served} served, {refused} refused"
    );
    let debug = get(bounded.admin, "/debug/clusters").await;
    for want in [
        format!("\"refusedServices\": {}", services - admitted),
        format!("\"refusedEndpoints\": {}", (services - admitted) * per),
        format!("\"endpoints\": {budget}"),
    ] {
        assert!(debug.contains(&want), "{want} in {debug}");
    }
    drop(bounded);

    // The same flood with a budget ten times larger: everything is held.
    let (unbounded, unbounded_rss) =
        serve_live_blocking(dir.path(), &local, &[&east, &cluster("flood")], 10 * budget).await;
    let (msg, _) = ask(
        unbounded.dns,
        Proto::Tcp,
        &q(&name(&format!("svc-{}-flood", services - 1)), RecordType::A),
    )
    .await;
    assert_eq!(
        (msg.metadata.response_code, msg.answers.len()),
        (ResponseCode::NoError, per)
    );
    drop(unbounded);
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "RESULT budget endpoints_flooded={} budget_endpoints={budget} rss_at_budget_mib={:.1} rss_flood_bounded_mib={:.1} rss_flood_unbounded_mib={:.1}",
        services * per,
        mib(at_budget_rss),
        mib(bounded_rss),
        mib(unbounded_rss)
    );
    // The refused 180,000 endpoints cost nothing held: the flood costs
    // what the budget allows (and the names of its refused services),
    // while holding them all costs far more.
    let margin = 4 * 1024 * 1024;
    assert!(
        bounded_rss <= at_budget_rss + margin,
        "the flood within its budget: {:.1} MiB, at the budget: {:.1} MiB",
        mib(bounded_rss),
        mib(at_budget_rss)
    );
    assert!(
        unbounded_rss >= bounded_rss + 2 * margin,
        "holding the flood: {:.1} MiB, within the budget: {:.1} MiB",
        mib(unbounded_rss),
        mib(bounded_rss)
    );
}
