//! Live mode with `--mcs` against kubesim clusters (issue 18): ServiceExports
//! written through the API make `<svc>.<ns>.svc.clusterset.local` answer,
//! endpoints and links move it, the ClusterProperty moves per-pod names,
//! and a cluster without the MCS CRDs syncs and serves its Linkerd names.
//!
//! Every wait is a bounded poll of a DNS answer or of `/debug/clusters`;
//! everything listens and dials on loopback.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use serde_json::json;

use crate::binary::http_get;
use crate::kubesim_api::{client, sim};
use crate::live::{NS, SECOND, a, clusters_file, export, fqdn, until, write_clusters};
use crate::support::{Links, Live, Options, TestServer, create_object, eventually, start_live};

/// The MCS API version kubesim serves first.
const MCS: &str = "multicluster.x-k8s.io/v1beta1";

/// `--mcs` with `local` as the local cluster.
fn mcs_options() -> Options {
    Options {
        local: Some("local"),
        mcs: true,
        ..Options::default()
    }
}

/// The server with `--mcs`, local cluster `local`, linked to `linked`
/// through a clusters file in `dir`.
async fn serve_mcs(
    local: &kubesim::Cluster,
    dir: &std::path::Path,
    linked: &[&kubesim::Cluster],
) -> TestServer {
    let file = clusters_file(dir, linked);
    start_live(
        mcs_options(),
        Live::new(local.kubeconfig_path(), Links::File(file)),
    )
    .await
}

/// Sends `method` to `path` with a JSON `body` (none: empty).
async fn send(c: &kube::Client, method: http::Method, path: &str, body: Option<serde_json::Value>) {
    let mut req = http::Request::builder().method(method.clone()).uri(path);
    if body.is_some() {
        let ct = if method == http::Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        req = req.header("content-type", ct);
    }
    let bytes = body.map_or_else(Vec::new, |b| serde_json::to_vec(&b).expect("json"));
    let req = req.body(bytes).expect("request");
    if let Err(e) = c.request_text(req).await {
        panic!("{method} {path}: {e}");
    }
}

fn exports_path() -> String {
    format!("/apis/{MCS}/namespaces/{NS}/serviceexports")
}

/// Creates the ServiceExport of `name`.
async fn export_mcs(c: &kube::Client, name: &str) {
    let doc = json!({
        "apiVersion": MCS, "kind": "ServiceExport",
        "metadata": {"name": name, "namespace": NS}
    });
    send(c, http::Method::POST, &exports_path(), Some(doc)).await;
}

async fn unexport_mcs(c: &kube::Client, name: &str) {
    let path = format!("{}/{name}", exports_path());
    send(c, http::Method::DELETE, &path, None).await;
}

/// Creates or replaces the ClusterProperty `cluster.clusterset.k8s.io`.
async fn set_cluster_id(c: &kube::Client, value: &str, create: bool) {
    let base = "/apis/about.k8s.io/v1alpha1/clusterproperties";
    if create {
        let doc = json!({
            "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
            "metadata": {"name": "cluster.clusterset.k8s.io"},
            "spec": {"value": value}
        });
        send(c, http::Method::POST, base, Some(doc)).await;
    } else {
        let path = format!("{base}/cluster.clusterset.k8s.io");
        let patch = json!({"spec": {"value": value}});
        send(c, http::Method::PATCH, &path, Some(patch)).await;
    }
}

/// A Service `name` with no Linkerd label (`headless`: clusterIP None) and
/// its slice `<name>-1` of `(address, ready, hostname)`.
async fn plain_service(
    c: &kube::Client,
    name: &str,
    headless: bool,
    endpoints: &[(&str, bool, Option<&str>)],
) {
    let mut spec = json!({"ports": [{"name": "http", "port": 80}]});
    if headless {
        spec["clusterIP"] = json!("None");
    }
    create_object(
        c,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": NS}, "spec": spec}),
    )
    .await;
    create_object(
        c,
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("{name}-1"), "namespace": NS,
                         "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": endpoint_docs(endpoints),
        }),
    )
    .await;
}

fn endpoint_docs(endpoints: &[(&str, bool, Option<&str>)]) -> Vec<serde_json::Value> {
    endpoints
        .iter()
        .map(|(ip, ready, host)| {
            let mut e = json!({"addresses": [ip], "conditions": {"ready": ready}});
            if let Some(h) = host {
                e["hostname"] = json!(h);
            }
            e
        })
        .collect()
}

/// `cluster`'s entry of `/debug/clusters`, once `check` holds (at most
/// `limit`).
async fn until_report(
    admin: SocketAddr,
    cluster: &'static str,
    limit: Duration,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let report = move || async move {
        tokio::task::spawn_blocking(move || {
            let (_, body) = http_get(admin, "/debug/clusters");
            let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            v["clusters"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["name"] == cluster))
                .cloned()
                .ok_or_else(|| format!("{cluster} not listed in {body}"))
        })
        .await
        .map_err(|e| e.to_string())?
    };
    eventually(&format!("{cluster}'s report"), limit, || async {
        let r = report().await?;
        if check(&r) {
            Ok(())
        } else {
            Err(format!("{r:#}"))
        }
    })
    .await;
    report().await.expect("report")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcs_names_follow_exports_endpoints_and_links() {
    let (sim, dir) = sim(&["local", "east", "north"], |_| {}).await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster").clone();
    let (local, east, north) = (cluster("local"), cluster("east"), cluster("north"));
    let (ec, nc) = (client(&east).await, client(&north).await);
    plain_service(
        &ec,
        "web",
        false,
        &[("10.1.0.1", true, None), ("10.1.0.2", false, None)],
    )
    .await;
    plain_service(&nc, "web", false, &[("10.2.0.1", true, None)]).await;
    export_mcs(&nc, "web").await;
    let file = clusters_file(dir.path(), &[&east, &north]);
    let server = start_live(
        mcs_options(),
        Live::new(local.kubeconfig_path(), Links::File(file.clone())),
    )
    .await;
    let (dns, web) = (server.dns, fqdn("web"));
    // Only north exports web; an unexported Service makes no name.
    assert_eq!(
        a(dns, &web).await,
        (ResponseCode::NoError, ["10.2.0.1".to_owned()].into())
    );

    // (a) east exports it: its ready endpoint joins the union.
    export_mcs(&ec, "web").await;
    until(
        dns,
        &web,
        ResponseCode::NoError,
        &["10.1.0.1", "10.2.0.1"],
        5 * SECOND,
    )
    .await;

    // (b) east's second endpoint becomes ready.
    let patch =
        json!({"endpoints": endpoint_docs(&[("10.1.0.1", true, None), ("10.1.0.2", true, None)])});
    let path = format!("/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/web-1");
    send(&ec, http::Method::PATCH, &path, Some(patch)).await;
    until(
        dns,
        &web,
        ResponseCode::NoError,
        &["10.1.0.1", "10.1.0.2", "10.2.0.1"],
        5 * SECOND,
    )
    .await;

    // (d) north is unlinked: its endpoints leave.
    write_clusters(&file, &[&east]);
    until(
        dns,
        &web,
        ResponseCode::NoError,
        &["10.1.0.1", "10.1.0.2"],
        5 * SECOND,
    )
    .await;

    // (c) east's export is deleted: the name goes.
    unexport_mcs(&ec, "web").await;
    until(dns, &web, ResponseCode::NXDomain, &[], 5 * SECOND).await;
    let east_report = until_report(server.admin, "east", 5 * SECOND, |r| {
        r["mcs"]["serviceExports"] == 0
    })
    .await;
    assert_eq!(east_report["mcs"]["member"], true, "{east_report:#}");
    assert_eq!(east_report["services"], 0, "{east_report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_property_moves_per_pod_names() {
    let (sim, dir) = sim(&["local", "east"], |_| {}).await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster").clone();
    let (local, east) = (cluster("local"), cluster("east"));
    let ec = client(&east).await;
    plain_service(&ec, "db", true, &[("10.1.0.5", true, Some("db-0"))]).await;
    export_mcs(&ec, "db").await;
    let server = serve_mcs(&local, dir.path(), &[&east]).await;
    let dns = server.dns;
    let pod = |id: &str| format!("db-0.{id}.db.{NS}.svc.clusterset.local.");
    // Without a ClusterProperty the cluster's name is its id.
    until(
        dns,
        &pod("east"),
        ResponseCode::NoError,
        &["10.1.0.5"],
        5 * SECOND,
    )
    .await;
    until(
        dns,
        &fqdn("db"),
        ResponseCode::NoError,
        &["10.1.0.5"],
        SECOND,
    )
    .await;

    // (e) the id comes from the ClusterProperty, and follows its changes.
    set_cluster_id(&ec, "east-1", true).await;
    until(
        dns,
        &pod("east-1"),
        ResponseCode::NoError,
        &["10.1.0.5"],
        5 * SECOND,
    )
    .await;
    assert_eq!(a(dns, &pod("east")).await.0, ResponseCode::NXDomain);
    set_cluster_id(&ec, "east-2", false).await;
    until(
        dns,
        &pod("east-2"),
        ResponseCode::NoError,
        &["10.1.0.5"],
        5 * SECOND,
    )
    .await;
    assert_eq!(a(dns, &pod("east-1")).await.0, ResponseCode::NXDomain);

    // An id that is no DNS label is counted and reported; the name is the id.
    set_cluster_id(&ec, "East_2", false).await;
    until(
        dns,
        &pod("east"),
        ResponseCode::NoError,
        &["10.1.0.5"],
        5 * SECOND,
    )
    .await;
    assert_eq!(a(dns, &pod("east-2")).await.0, ResponseCode::NXDomain);
    let r = until_report(server.admin, "east", 5 * SECOND, |r| {
        r["mcs"]["clusterIdProblem"].is_string()
    })
    .await;
    assert_eq!(r["mcs"]["clusterId"], serde_json::Value::Null, "{r:#}");
    assert_eq!(
        r["adjustedObjects"]["skipped"]["cluster_id_not_a_label"], 1,
        "{r:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_mcs_crds_syncs_and_serves_its_linkerd_names() {
    let (sim, dir) = sim(&["local", "east"], |_| {}).await;
    let (bare_sim, _bare_dir) = sim_without_crds().await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster").clone();
    let (local, east) = (cluster("local"), cluster("east"));
    let bare = bare_sim.cluster("bare").expect("cluster").clone();
    export(&client(&bare).await, "api", &["10.3.0.1"]).await;
    let ec = client(&east).await;
    plain_service(&ec, "web", false, &[("10.1.0.1", true, None)]).await;
    export_mcs(&ec, "web").await;
    // Ready within start_live's bound: nothing waits for bare's MCS watches.
    let server = serve_mcs(&local, dir.path(), &[&east, &bare]).await;
    let dns = server.dns;
    assert_eq!(
        a(dns, &fqdn("api-bare")).await,
        (ResponseCode::NoError, ["10.3.0.1".to_owned()].into())
    );
    assert_eq!(
        a(dns, &fqdn("web")).await,
        (ResponseCode::NoError, ["10.1.0.1".to_owned()].into())
    );
    let r = until_report(server.admin, "bare", 5 * SECOND, |r| {
        r["mcs"]["status"] != "discovering"
    })
    .await;
    assert_eq!(r["synced"], true, "{r:#}");
    assert_eq!(r["mcs"]["member"], false, "{r:#}");
    assert_eq!(r["mcs"]["status"], "no ServiceExport API", "{r:#}");
    assert_eq!(r["lastError"], serde_json::Value::Null, "{r:#}");
    let e = until_report(server.admin, "east", SECOND, |r| r["mcs"]["member"] == true).await;
    assert_eq!(
        e["mcs"]["serviceExportApi"], "serviceexports.multicluster.x-k8s.io/v1beta1",
        "{e:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcs_crds_installed_after_linking_are_watched_without_a_restart() {
    let (sim, dir) = sim(&["local"], |_| {}).await;
    let (bare_sim, _bare_dir) = sim_without_crds().await;
    let local = sim.cluster("local").expect("cluster").clone();
    let bare = bare_sim.cluster("bare").expect("cluster").clone();
    let bc = client(&bare).await;
    plain_service(&bc, "db", true, &[("10.3.0.9", true, Some("db-0"))]).await;
    let server = serve_mcs(&local, dir.path(), &[&bare]).await;
    let dns = server.dns;
    let r = until_report(server.admin, "bare", 5 * SECOND, |r| {
        r["mcs"]["status"] == "no ServiceExport API"
    })
    .await;
    assert_eq!(r["mcs"]["member"], false, "{r:#}");

    // The CRDs are installed and used; the server asks again on its own.
    bare.install_crds("multicluster.x-k8s.io");
    bare.install_crds("about.k8s.io");
    set_cluster_id(&bc, "bare-1", true).await;
    export_mcs(&bc, "db").await;
    until(
        dns,
        &format!("db-0.bare-1.db.{NS}.svc.clusterset.local."),
        ResponseCode::NoError,
        &["10.3.0.9"],
        5 * SECOND,
    )
    .await;
    until(
        dns,
        &fqdn("db"),
        ResponseCode::NoError,
        &["10.3.0.9"],
        SECOND,
    )
    .await;
    let r = until_report(server.admin, "bare", SECOND, |r| r["mcs"]["member"] == true).await;
    assert_eq!(
        r["mcs"]["serviceExportApi"], "serviceexports.multicluster.x-k8s.io/v1beta1",
        "{r:#}"
    );
    assert_eq!(r["mcs"]["clusterId"], "bare-1", "{r:#}");
    assert_eq!(r["synced"], true, "{r:#}");
    assert_eq!(r["lastError"], serde_json::Value::Null, "{r:#}");
}

/// A kubesim cluster `bare` with neither the MCS nor the About CRDs.
async fn sim_without_crds() -> (kubesim::Sim, tempfile::TempDir) {
    sim(&["bare"], |c| {
        c.settings.mcs_crds = false;
        c.settings.about_crd = false;
    })
    .await
}
