//! Live mode against kubesim clusters: Links and Secrets written through the
//! API, the clusters file without the Link CRD, and faults (a cluster down
//! at start, an API restart mid-watch, 410 Gone, 500/429 bursts, latency on
//! one cluster while another changes).
//!
//! Each test answers the user's question "does the DNS name show what the
//! clusters hold now?" by querying the server over UDP. Waits are bounded
//! polls.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use serde_json::json;

use crate::binary::http_get;
use crate::kubesim_api::{client, sim};
use crate::support::{
    Links, Live, Options, Proto, ask, create_object, eventually, loopback_exempt, q, start_live,
};

pub(crate) const NS: &str = "prod";

/// rcode and A records of `name`.
pub(crate) async fn a(dns: SocketAddr, name: &str) -> (ResponseCode, BTreeSet<String>) {
    let (msg, _) = ask(dns, Proto::Udp, &q(name, RecordType::A)).await;
    let ips = msg
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect();
    (msg.metadata.response_code, ips)
}

pub(crate) fn fqdn(label: &str) -> String {
    format!("{label}.{NS}.svc.clusterset.local.")
}

fn ips(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Polls until `name` answers `want` (NOERROR with exactly these A records,
/// or the rcode alone when `want` is empty and `rcode` is not NOERROR), at
/// most `limit`. Returns how long it took.
pub(crate) async fn until(
    dns: SocketAddr,
    name: &str,
    rcode: ResponseCode,
    want: &[&str],
    limit: Duration,
) -> Duration {
    let want = ips(want);
    eventually(&format!("{name}: {rcode:?} {want:?}"), limit, || async {
        let last = a(dns, name).await;
        if last.0 == rcode && last.1 == want {
            Ok(())
        } else {
            Err(format!("last answer {last:?}"))
        }
    })
    .await
}

/// A flat-mode (remote-discovery) service `name` with one slice of `addrs`.
pub(crate) async fn export(c: &kube::Client, name: &str, addrs: &[&str]) {
    create_object(
        c,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"mirror.linkerd.io/exported": "remote-discovery",
                                    "mirror.linkerd.io/federated": "member"}},
            "spec": {"ports": [{"name": "http", "port": 80}]}
        }),
    )
    .await;
    create_object(c, slice_doc(name, &format!("{name}-1"), addrs)).await;
}

fn slice_doc(service: &str, name: &str, addrs: &[&str]) -> serde_json::Value {
    let endpoints: Vec<_> = addrs
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints
    })
}

/// Replaces the endpoints of slice `<service>-1`.
pub(crate) async fn set_endpoints(c: &kube::Client, service: &str, addrs: &[&str]) {
    let endpoints: Vec<_> = addrs
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    let body = json!({"endpoints": endpoints});
    let req = http::Request::patch(format!(
        "/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/{service}-1"
    ))
    .header("content-type", "application/merge-patch+json")
    .body(serde_json::to_vec(&body).expect("json"))
    .expect("request");
    c.request_text(req).await.expect("patch slice");
}

async fn delete(c: &kube::Client, path: &str) {
    let req = http::Request::delete(path)
        .body(Vec::new())
        .expect("request");
    c.request_text(req).await.expect("delete");
}

pub(crate) fn secret_doc(name: &str, kubeconfig: &str) -> serde_json::Value {
    let s = Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("linkerd-multicluster".to_owned()),
            ..Default::default()
        },
        type_: Some("mirror.linkerd.io/remote-kubeconfig".to_owned()),
        data: Some(
            [(
                "kubeconfig".to_owned(),
                ByteString(kubeconfig.as_bytes().to_vec()),
            )]
            .into_iter()
            .collect(),
        ),
        ..Default::default()
    };
    let mut v = serde_json::to_value(s).expect("json");
    v["apiVersion"] = json!("v1");
    v["kind"] = json!("Secret");
    v
}

pub(crate) fn link_doc(cluster: &str) -> serde_json::Value {
    // The shape `linkerd multicluster link-gen --gateway=false` writes.
    json!({
        "apiVersion": "multicluster.linkerd.io/v1alpha3", "kind": "Link",
        "metadata": {"name": cluster, "namespace": "linkerd-multicluster"},
        "spec": {
            "targetClusterName": cluster,
            "targetClusterDomain": "cluster.local",
            "targetClusterLinkerdNamespace": "linkerd",
            "clusterCredentialsSecret": format!("cluster-credentials-{cluster}"),
            "remoteDiscoverySelector": {"matchLabels": {"mirror.linkerd.io/exported": "remote-discovery"}},
            "federatedServiceSelector": {"matchLabels": {"mirror.linkerd.io/federated": "member"}}
        }
    })
}

fn kubeconfig_text(c: &kubesim::Cluster) -> String {
    std::fs::read_to_string(c.kubeconfig_path()).expect("kubeconfig")
}

async fn link(local: &kube::Client, remote: &kubesim::Cluster) {
    create_object(
        local,
        secret_doc(
            &format!("cluster-credentials-{}", remote.name),
            &kubeconfig_text(remote),
        ),
    )
    .await;
    create_object(local, link_doc(&remote.name)).await;
}

pub(crate) fn clusters_file(dir: &Path, clusters: &[&kubesim::Cluster]) -> std::path::PathBuf {
    let path = dir.join("clusters.yaml");
    write_clusters(&path, clusters);
    path
}

pub(crate) fn write_clusters(path: &Path, clusters: &[&kubesim::Cluster]) {
    let text: String = clusters
        .iter()
        .map(|c| {
            format!(
                "- name: {}\n  kubeconfig: {}\n",
                c.name,
                c.kubeconfig_path().display()
            )
        })
        .collect();
    // Written aside and renamed, so the poller never reads half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write clusters file");
    std::fs::rename(&tmp, path).expect("rename clusters file");
}

pub(crate) const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_and_secrets_start_stop_and_rotate_clusters() {
    let (sim, _dir) = sim(&["local", "east", "north", "south"], |_| {}).await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster").clone();
    let (local, east, north, south) = (
        cluster("local"),
        cluster("east"),
        cluster("north"),
        cluster("south"),
    );
    let lc = client(&local).await;
    export(&client(&east).await, "api", &["10.1.0.1"]).await;
    export(&client(&north).await, "api", &["10.2.0.1"]).await;
    export(&client(&south).await, "api", &["10.3.0.1"]).await;
    link(&lc, &east).await;
    link(&lc, &north).await;

    let server = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        Live::new(
            local.kubeconfig_path(),
            Links::Linkerd {
                namespace: "linkerd-multicluster".into(),
            },
        ),
    )
    .await;
    let dns = server.dns;
    assert_eq!(
        a(dns, &fqdn("api-east")).await,
        (ResponseCode::NoError, ips(&["10.1.0.1"]))
    );
    assert_eq!(
        a(dns, &fqdn("api-north")).await,
        (ResponseCode::NoError, ips(&["10.2.0.1"]))
    );
    assert_eq!(
        a(dns, &fqdn("api-federated")).await,
        (ResponseCode::NoError, ips(&["10.1.0.1", "10.2.0.1"]))
    );
    assert_eq!(a(dns, &fqdn("api-south")).await.0, ResponseCode::NXDomain);

    // Linking a cluster needs no restart.
    link(&lc, &south).await;
    until(
        dns,
        &fqdn("api-south"),
        ResponseCode::NoError,
        &["10.3.0.1"],
        5 * SECOND,
    )
    .await;

    // Unlinking north removes its names; the others are untouched.
    delete(
        &lc,
        "/apis/multicluster.linkerd.io/v1alpha3/namespaces/linkerd-multicluster/links/north",
    )
    .await;
    until(
        dns,
        &fqdn("api-north"),
        ResponseCode::NXDomain,
        &[],
        5 * SECOND,
    )
    .await;
    assert_eq!(
        a(dns, &fqdn("api-east")).await,
        (ResponseCode::NoError, ips(&["10.1.0.1"]))
    );
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &["10.1.0.1", "10.3.0.1"],
        SECOND,
    )
    .await;

    // East's token is rotated: the old one is refused from now on, and open
    // watches are cut. Until the Secret is updated, east's last data is served.
    east.rotate_admin_token().expect("rotate");
    east.drop_watches();
    // Positive evidence the cut was seen: east's re-watch is refused, so it
    // is reported broken (with the refusal), and its last data still answers.
    until_report(
        server.admin,
        "east",
        "east reported broken after its token rotation",
        10 * SECOND,
        |r| r["state"] == "broken" && r["lastError"].as_str().is_some_and(|e| e.contains("401")),
    )
    .await;
    assert_eq!(
        a(dns, &fqdn("api-east")).await,
        (ResponseCode::NoError, ips(&["10.1.0.1"]))
    );
    let new_secret = secret_doc("cluster-credentials-east", &kubeconfig_text(&east));
    let req = http::Request::put(
        "/api/v1/namespaces/linkerd-multicluster/secrets/cluster-credentials-east",
    )
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&new_secret).expect("json"))
    .expect("request");
    lc.request_text(req).await.expect("update secret");
    // Watching continues with the new token: a change in east shows up.
    set_endpoints(&client(&east).await, "api", &["10.1.0.2"]).await;
    until(
        dns,
        &fqdn("api-east"),
        ResponseCode::NoError,
        &["10.1.0.2"],
        5 * SECOND,
    )
    .await;

    let (code, body) = http_get(server.admin, "/debug/clusters");
    assert_eq!(code, 200, "{body}");
    for want in [
        "\"name\": \"east\"",
        "\"origin\": \"Link linkerd-multicluster/east\"",
        "\"state\": \"synced\"",
        // The default bound on east's requests in flight.
        "\"apiMaxInFlight\": 16",
    ] {
        assert!(body.contains(want), "missing {want} in {body}");
    }
    let east = cluster_report(server.admin, "east");
    assert!(east["secondsSinceApiAnswered"].is_number(), "{east:#}");
    assert!(!body.contains("\"name\": \"north\""), "{body}");
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_without_its_secret_is_servfail_and_reported() {
    let (sim, _dir) = sim(&["local", "east"], |_| {}).await;
    let local = sim.cluster("local").expect("local").clone();
    let east = sim.cluster("east").expect("east").clone();
    let lc = client(&local).await;
    export(&client(&east).await, "api", &["10.1.0.1"]).await;
    create_object(&lc, link_doc("east")).await;
    let mut live = Live::new(
        local.kubeconfig_path(),
        Links::Linkerd {
            namespace: "linkerd-multicluster".into(),
        },
    );
    live.sync_timeout = Duration::from_millis(500);
    let server = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        live,
    )
    .await;
    // Linked but never synced: SERVFAIL, so nothing caches a false NXDOMAIN.
    assert_eq!(
        a(server.dns, &fqdn("api-east")).await.0,
        ResponseCode::ServFail
    );
    let (_, body) = http_get(server.admin, "/debug/clusters");
    assert!(
        body.contains("Secret linkerd-multicluster/cluster-credentials-east (clusterCredentialsSecret) does not exist"),
        "{body}"
    );
    // The Secret arrives: the cluster starts.
    create_object(
        &lc,
        secret_doc("cluster-credentials-east", &kubeconfig_text(&east)),
    )
    .await;
    until(
        server.dns,
        &fqdn("api-east"),
        ResponseCode::NoError,
        &["10.1.0.1"],
        5 * SECOND,
    )
    .await;
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_file_without_the_link_crd() {
    let (sim, dir) = sim(&["local", "east", "north", "south"], |c| {
        c.settings.link_crd = false;
    })
    .await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster").clone();
    let (local, east, north, south) = (
        cluster("local"),
        cluster("east"),
        cluster("north"),
        cluster("south"),
    );
    export(&client(&east).await, "api", &["10.1.0.1"]).await;
    export(&client(&north).await, "api", &["10.2.0.1"]).await;
    export(&client(&south).await, "api", &["10.3.0.1"]).await;
    let file = clusters_file(dir.path(), &[&east, &north]);
    let server = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        Live::new(local.kubeconfig_path(), Links::File(file.clone())),
    )
    .await;
    let dns = server.dns;
    assert_eq!(
        a(dns, &fqdn("api-east")).await,
        (ResponseCode::NoError, ips(&["10.1.0.1"]))
    );
    assert_eq!(
        a(dns, &fqdn("api-north")).await,
        (ResponseCode::NoError, ips(&["10.2.0.1"]))
    );
    // The file is reloaded: south joins, north leaves.
    write_clusters(&file, &[&east, &south]);
    until(
        dns,
        &fqdn("api-south"),
        ResponseCode::NoError,
        &["10.3.0.1"],
        5 * SECOND,
    )
    .await;
    until(
        dns,
        &fqdn("api-north"),
        ResponseCode::NXDomain,
        &[],
        5 * SECOND,
    )
    .await;
    // A broken file keeps what is linked, and says why.
    std::fs::write(&file, "- name: east\n  kubeconfg: typo\n").expect("write");
    let admin = server.admin;
    eventually(
        "the problem names the bad key",
        10 * SECOND,
        || async move {
            let (_, body) = tokio::task::spawn_blocking(move || http_get(admin, "/debug/clusters"))
                .await
                .map_err(|e| e.to_string())?;
            if body.contains("kubeconfg") {
                Ok(())
            } else {
                Err(body)
            }
        },
    )
    .await;
    assert_eq!(
        a(dns, &fqdn("api-south")).await,
        (ResponseCode::NoError, ips(&["10.3.0.1"]))
    );
    // The Link API was never asked for.
    assert_eq!(
        local.request_count("list", "links.multicluster.linkerd.io"),
        0
    );
    server.server.stop().await;
}

/// A kubesim of local + east + north with `api` exported from both remotes,
/// and a live server over a clusters file.
pub(crate) async fn two_remotes(
    tweak_live: impl FnOnce(&mut Live),
    before_start: impl FnOnce(&kubesim::Sim),
) -> (kubesim::Sim, tempfile::TempDir, crate::support::TestServer) {
    let opts = Options {
        local: Some("local"),
        ..Options::default()
    };
    two_remotes_with(opts, tweak_live, before_start).await
}

/// [`two_remotes`] with the server's options `opts`.
pub(crate) async fn two_remotes_with(
    opts: Options,
    tweak_live: impl FnOnce(&mut Live),
    before_start: impl FnOnce(&kubesim::Sim),
) -> (kubesim::Sim, tempfile::TempDir, crate::support::TestServer) {
    let (sim, dir) = sim(&["local", "east", "north"], |_| {}).await;
    let east = sim.cluster("east").expect("east").clone();
    let north = sim.cluster("north").expect("north").clone();
    export(&client(&east).await, "api", &["10.1.0.1"]).await;
    export(&client(&north).await, "api", &["10.2.0.1"]).await;
    let file = clusters_file(dir.path(), &[&east, &north]);
    let local = sim.cluster("local").expect("local").clone();
    let mut live = Live::new(local.kubeconfig_path(), Links::File(file));
    tweak_live(&mut live);
    before_start(&sim);
    let server = start_live(opts, live).await;
    (sim, dir, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_down_at_start_is_retried_while_the_others_serve() {
    let (sim, _dir, server) = two_remotes(
        |l| l.sync_timeout = Duration::from_millis(500),
        |sim| sim.cluster("north").expect("north").stop(),
    )
    .await;
    let dns = server.dns;
    assert_eq!(
        a(dns, &fqdn("api-east")).await,
        (ResponseCode::NoError, ips(&["10.1.0.1"]))
    );
    assert_eq!(a(dns, &fqdn("api-north")).await.0, ResponseCode::ServFail);
    // Ready once the sync timeout gave up on north, and it says so.
    let (code, _) = http_get(server.admin, "/ready");
    assert_eq!(code, 200);
    let (_, body) = http_get(server.admin, "/debug/clusters");
    assert!(body.contains("\"gaveUpWaitingForSync\": true"), "{body}");
    sim.cluster("north")
        .expect("north")
        .restart()
        .await
        .expect("restart");
    until(
        dns,
        &fqdn("api-north"),
        ResponseCode::NoError,
        &["10.2.0.1"],
        15 * SECOND,
    )
    .await;
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_restart_mid_watch_resumes_and_misses_nothing() {
    let (sim, _dir, server) = two_remotes(|_| {}, |_| {}).await;
    let dns = server.dns;
    let east = sim.cluster("east").expect("east").clone();
    east.stop();
    // Served from last-known data meanwhile, TTL capped, once east is
    // known broken.
    until_report(
        server.admin,
        "east",
        "east reported broken",
        10 * SECOND,
        |r| r["state"] == "broken",
    )
    .await;
    assert_eq!(
        a(dns, &fqdn("api-east")).await,
        (ResponseCode::NoError, ips(&["10.1.0.1"]))
    );
    let metrics = http_get(server.admin, "/metrics").1;
    assert!(
        metrics.contains("clusterset_dns_cluster_stale_seconds{cluster=\"east\"}"),
        "{metrics}"
    );
    east.restart().await.expect("restart");
    // A change made after the restart is served: the watch resumed.
    let ec = client(&east).await;
    set_endpoints(&ec, "api", &["10.1.0.9"]).await;
    until(
        dns,
        &fqdn("api-east"),
        ResponseCode::NoError,
        &["10.1.0.9"],
        15 * SECOND,
    )
    .await;
    // Every watch of east reconnects (each on its own backoff).
    until_report(
        server.admin,
        "east",
        "east healthy again",
        15 * SECOND,
        |r| r["state"] == "synced" && r["watchRestarts"].as_u64().is_some_and(|n| n > 0),
    )
    .await;
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_410_relists_without_losing_or_duplicating_state() {
    let (sim, _dir, server) = two_remotes(|_| {}, |_| {}).await;
    let dns = server.dns;
    let east = sim.cluster("east").expect("east").clone();
    let ec = client(&east).await;
    let lists_before = east.request_count("list", "endpointslices.discovery.k8s.io");
    let admin = server.admin;
    let restarts_before = tokio::task::spawn_blocking(move || cluster_report(admin, "east"))
        .await
        .expect("report")["watchRestarts"]
        .clone();
    // History is forgotten and watches cut: resuming gets 410, so we list.
    east.expire_history();
    east.drop_watches();
    // Changes around the relist: a new export, a deleted slice, a changed one.
    export(&ec, "web", &["10.1.1.1"]).await;
    set_endpoints(&ec, "api", &["10.1.0.5", "10.1.0.6"]).await;
    until(
        dns,
        &fqdn("web-east"),
        ResponseCode::NoError,
        &["10.1.1.1"],
        5 * SECOND,
    )
    .await;
    until(
        dns,
        &fqdn("api-east"),
        ResponseCode::NoError,
        &["10.1.0.5", "10.1.0.6"],
        5 * SECOND,
    )
    .await;
    delete(
        &ec,
        &format!("/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/web-1"),
    )
    .await;
    until(
        dns,
        &fqdn("web-east"),
        ResponseCode::NoError,
        &[],
        5 * SECOND,
    )
    .await;
    assert!(
        east.request_count("list", "endpointslices.discovery.k8s.io") > lists_before,
        "410 led to a new list"
    );
    // An expired resourceVersion is routine: the watch was never broken.
    let after = tokio::task::spawn_blocking(move || cluster_report(admin, "east"))
        .await
        .expect("report");
    assert_eq!(after["watchRestarts"], restarts_before, "{after:#}");
    assert_eq!(after["state"], "synced", "{after:#}");
    // Federated still holds each address once.
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &["10.1.0.5", "10.1.0.6", "10.2.0.1"],
        SECOND,
    )
    .await;
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_of_500_and_429_back_off_and_recover() {
    let (sim, _dir, server) = two_remotes(|_| {}, |_| {}).await;
    let dns = server.dns;
    let east = sim.cluster("east").expect("east").clone();
    let ec = client(&east).await;
    east.fail_next(20);
    east.drop_watches();
    until_report(
        server.admin,
        "east",
        "east's re-watches get 500",
        10 * SECOND,
        |r| r["lastError"].as_str().is_some_and(|e| e.contains("500")),
    )
    .await;
    east.fail_next(0);
    let requests = || east.counters().iter().map(|(_, n)| n).sum::<u64>();
    let before = requests();
    east.throttle_next(20, 1);
    east.drop_watches();
    // The client waits out each 429 and asks again: every throttled answer
    // is used up by east's re-watches.
    eventually(
        "east's re-watches use up 20 throttled answers",
        15 * SECOND,
        || async {
            let n = requests() - before;
            if n >= 20 {
                Ok(())
            } else {
                Err(format!("{n} requests since the throttle"))
            }
        },
    )
    .await;
    // Last-known data is served throughout.
    assert_eq!(
        a(dns, &fqdn("api-east")).await,
        (ResponseCode::NoError, ips(&["10.1.0.1"]))
    );
    // The faults end; the change lands. The test client has retries too.
    east.fail_next(0);
    east.throttle_next(0, 0);
    set_endpoints(&ec, "api", &["10.1.0.7"]).await;
    until(
        dns,
        &fqdn("api-east"),
        ResponseCode::NoError,
        &["10.1.0.7"],
        15 * SECOND,
    )
    .await;
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_cluster_does_not_delay_another() {
    let (sim, _dir, server) = two_remotes(|_| {}, |_| {}).await;
    let dns = server.dns;
    let east = sim.cluster("east").expect("east").clone();
    let north = sim.cluster("north").expect("north").clone();
    let nc = client(&north).await;
    // East answers every request two seconds late, and its watches are cut
    // so it is busy re-listing.
    east.set_latency(Duration::from_secs(2));
    east.drop_watches();
    until_report(
        server.admin,
        "east",
        "east's re-watches wait on it",
        5 * SECOND,
        |r| r["apiRequestsInFlight"].as_u64().is_some_and(|n| n > 0),
    )
    .await;
    for (i, ip) in ["10.2.0.2", "10.2.0.3", "10.2.0.4"].into_iter().enumerate() {
        set_endpoints(&nc, "api", &[ip]).await;
        let took = until(
            dns,
            &fqdn("api-north"),
            ResponseCode::NoError,
            &[ip],
            SECOND,
        )
        .await;
        assert!(
            took < Duration::from_millis(100),
            "change {i} took {took:?}"
        );
    }
    east.set_latency(Duration::ZERO);
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_gateway_given_by_hostname_is_resolved() {
    let (sim, _dir) = sim(&["local", "east"], |_| {}).await;
    let local = sim.cluster("local").expect("local").clone();
    let east = sim.cluster("east").expect("east").clone();
    let lc = client(&local).await;
    let ec = client(&east).await;
    create_object(
        &ec,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": NS,
                         "labels": {"mirror.linkerd.io/exported": "true"}},
            "spec": {"ports": [{"name": "http", "port": 80}]}
        }),
    )
    .await;
    create_object(&ec, slice_doc("web", "web-1", &["10.1.0.1"])).await;
    create_object(
        &lc,
        secret_doc("cluster-credentials-east", &kubeconfig_text(&east)),
    )
    .await;
    let mut link = link_doc("east");
    link["spec"]["gatewayAddress"] = json!("localhost");
    link["spec"]["gatewayPort"] = json!("4143");
    link["spec"]["selector"] = json!({"matchLabels": {"mirror.linkerd.io/exported": "true"}});
    create_object(&lc, link).await;
    // `localhost` resolves to loopback, which no cluster may claim unless
    // the operator exempts it (the hostile-cluster test shows it refused).
    let server = start_live(
        Options {
            local: Some("local"),
            trust: loopback_exempt(),
            ..Options::default()
        },
        Live::new(
            local.kubeconfig_path(),
            Links::Linkerd {
                namespace: "linkerd-multicluster".into(),
            },
        ),
    )
    .await;
    // No mirror Service in the local cluster: the gateway's addresses are
    // the answer (docs/architecture.md, decision 1), here `localhost` resolved.
    until(
        server.dns,
        &fqdn("web-east"),
        ResponseCode::NoError,
        &["127.0.0.1"],
        5 * SECOND,
    )
    .await;
    let (_, body) = http_get(server.admin, "/debug/clusters");
    assert!(body.contains("\"127.0.0.1\""), "{body}");
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_exported_services_and_their_slices_are_held() {
    let (sim, dir) = sim(&["local", "east"], |_| {}).await;
    let local = sim.cluster("local").expect("local").clone();
    let east = sim.cluster("east").expect("east").clone();
    let ec = client(&east).await;
    export(&ec, "api", &["10.1.0.1", "10.1.0.2"]).await;
    // The rest of the cluster: 20 services nobody exported, 10 endpoints each.
    for i in 0..20 {
        let name = format!("internal-{i}");
        create_object(
            &ec,
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": &name, "namespace": NS},
                   "spec": {"ports": [{"name": "http", "port": 80}]}}),
        )
        .await;
        let addrs: Vec<String> = (1..=10).map(|j| format!("10.9.{i}.{j}")).collect();
        let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
        create_object(&ec, slice_doc(&name, &format!("{name}-1"), &addrs)).await;
    }
    let file = clusters_file(dir.path(), &[&east]);
    let server = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        Live::new(local.kubeconfig_path(), Links::File(file)),
    )
    .await;
    let (_, body) = http_get(server.admin, "/debug/clusters");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    let east_report = v["clusters"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "east"))
        .expect("east listed");
    assert_eq!(east_report["services"], 1, "{east_report}");
    assert_eq!(east_report["endpointSlices"], 1, "{east_report}");
    assert_eq!(east_report["endpoints"], 2, "{east_report}");
    // A service exported later brings its slices (a targeted list).
    let req = http::Request::patch(format!("/api/v1/namespaces/{NS}/services/internal-3"))
        .header("content-type", "application/merge-patch+json")
        .body(
            serde_json::to_vec(&json!({"metadata": {"labels": {"mirror.linkerd.io/exported": "remote-discovery"}}}))
                .expect("json"),
        )
        .expect("request");
    ec.request_text(req).await.expect("export internal-3");
    let want: Vec<String> = (1..=10).map(|j| format!("10.9.3.{j}")).collect();
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    until(
        server.dns,
        &fqdn("internal-3-east"),
        ResponseCode::NoError,
        &want,
        5 * SECOND,
    )
    .await;
    server.server.stop().await;
}

/// `/debug/clusters`' report of `cluster`.
/// Polls `/debug/clusters` until `cluster`'s report passes `check`, at
/// most `limit`; returns that report.
pub(crate) async fn until_report(
    admin: SocketAddr,
    cluster: &'static str,
    what: &str,
    limit: Duration,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let report = || async move {
        tokio::task::spawn_blocking(move || cluster_report(admin, cluster))
            .await
            .map_err(|e| e.to_string())
    };
    eventually(what, limit, || async {
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

pub(crate) fn cluster_report(admin: SocketAddr, cluster: &str) -> serde_json::Value {
    let (_, body) = http_get(admin, "/debug/clusters");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["clusters"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == cluster))
        .cloned()
        .unwrap_or_else(|| panic!("{cluster} listed in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_slice_is_clamped_and_counted_and_the_rest_answers() {
    use kubesim::resources::ENDPOINTSLICES;
    let (sim, dir) = sim(&["local", "east"], |_| {}).await;
    let local = sim.cluster("local").expect("local").clone();
    let east = sim.cluster("east").expect("east").clone();
    let ec = client(&east).await;
    export(&ec, "api", &["10.1.0.1"]).await;
    export(&ec, "big", &[]).await;
    let server = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        Live::new(
            local.kubeconfig_path(),
            Links::File(clusters_file(dir.path(), &[&east])),
        ),
    )
    .await;
    // Straight into the store: the API would refuse them.
    let mut hostile = slice_doc(
        "api",
        "api-2",
        &["10.1.0.2", "not-an-ip", "10.1.0.2", "fd00::9"],
    );
    hostile["ports"] = json!([{"name": "http", "port": 8080}, {"name": "zero", "port": 0}]);
    let big: Vec<String> = (0..10_000)
        .map(|i| format!("10.2.{}.{}", i / 250, i % 250 + 1))
        .collect();
    let big: Vec<&str> = big.iter().map(String::as_str).collect();
    {
        let mut store = east.store();
        store
            .create(ENDPOINTSLICES, hostile)
            .expect("hostile slice");
        store
            .create(ENDPOINTSLICES, slice_doc("big", "big-2", &big))
            .expect("10,000 endpoints");
    }
    until(
        server.dns,
        &fqdn("api-east"),
        ResponseCode::NoError,
        &["10.1.0.1", "10.1.0.2"],
        5 * SECOND,
    )
    .await;
    let report = until_report(
        server.admin,
        "east",
        "east holds 1,002 endpoints",
        5 * SECOND,
        |r| r["endpoints"] == 1002,
    )
    .await;
    assert_eq!(
        report["endpoints"], 1002,
        "api's 2 and big's first 1,000: {report:#}"
    );
    assert_eq!(
        report["adjustedObjects"],
        json!({"clamped": {"address_not_ip": 1, "address_wrong_family": 1,
                           "duplicate_address": 1, "port_out_of_range": 1,
                           "too_many_endpoints": 1}}),
        "{report:#}"
    );
    let (_, metrics) = tokio::task::spawn_blocking(move || http_get(server.admin, "/metrics"))
        .await
        .expect("join");
    for reason in ["address_not_ip", "too_many_endpoints"] {
        let row = format!(
            "clusterset_dns_cluster_objects_adjusted_total{{cluster=\"east\",reason=\"{reason}\",action=\"clamped\"}} 1"
        );
        assert!(metrics.contains(&row), "missing {row:?} in:\n{metrics}");
    }
    server.server.stop().await;
}

/// A selector-change storm: many services become exported at once on a
/// slow cluster, each needing a targeted slice list. The lists queue behind
/// the cluster's in-flight bound (16 by default) instead of all hitting its
/// API server at once, and every service is served in the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_newly_exported_services_stays_within_the_in_flight_bound() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    const N: usize = 60;
    let (sim, _dir, server) = two_remotes(|_| {}, |_| {}).await;
    let dns = server.dns;
    let east = sim.cluster("east").expect("east").clone();
    let ec = client(&east).await;
    let lists_before = east.request_count("list", "endpointslices.discovery.k8s.io");
    east.set_latency(Duration::from_millis(300));
    let admin = server.admin;
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut most = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = cluster_report(admin, "east");
                most = most.max(r["apiRequestsInFlight"].as_u64().unwrap_or(0));
                std::thread::sleep(Duration::from_millis(10));
            }
            most
        })
    };
    let names: Vec<String> = (0..N).map(|i| format!("burst-{i}")).collect();
    let addrs: Vec<String> = (0..N).map(|i| format!("10.9.0.{}", i + 1)).collect();
    futures_util::future::join_all(
        names
            .iter()
            .zip(&addrs)
            .map(|(n, a)| async { export(&ec, n, &[a.as_str()]).await }),
    )
    .await;
    eventually("every new service's slices listed", 30 * SECOND, || async {
        let lists = east.request_count("list", "endpointslices.discovery.k8s.io") - lists_before;
        if lists >= N as u64 {
            Ok(())
        } else {
            Err(format!("{lists} targeted lists"))
        }
    })
    .await;
    until(
        dns,
        &fqdn(&format!("burst-{}-east", N - 1)),
        ResponseCode::NoError,
        &[&format!("10.9.0.{N}")],
        30 * SECOND,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let most = sampler.join().expect("sampler");
    assert!(most <= 16, "{most} requests in flight to east");
    assert!(
        most >= 8,
        "the lists ran side by side: at most {most} in flight"
    );
    server.server.stop().await;
}

/// `--deny-addresses` reloaded: every live cluster lists again and
/// converts under it, the data it had served meanwhile; lifted, the
/// addresses come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloaded_deny_addresses_relist_every_cluster() {
    let (_sim, _dir, server) = two_remotes(|_| {}, |_| {}).await;
    let dns = server.dns;
    assert_eq!(
        a(dns, &fqdn("api-federated")).await,
        (ResponseCode::NoError, ips(&["10.1.0.1", "10.2.0.1"]))
    );
    let handle = server.server.settings_handle();
    let set_deny = |list: &str| {
        let mut settings = (*handle.get()).clone();
        settings.trust.deny_addresses =
            clusterset_dns::vocab::trust::parse_cidrs([list]).expect("cidrs");
        handle.set(std::sync::Arc::new(settings));
    };
    set_deny("10.2.0.0/16");
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &["10.1.0.1"],
        10 * SECOND,
    )
    .await;
    // north's service is still there, with no address left: NODATA.
    assert_eq!(
        a(dns, &fqdn("api-north")).await,
        (ResponseCode::NoError, ips(&[]))
    );
    assert_eq!(
        a(dns, &fqdn("api-east")).await,
        (ResponseCode::NoError, ips(&["10.1.0.1"])),
        "east's answer never changed"
    );
    let (_, metrics) = http_get(server.admin, "/metrics");
    assert!(
        metrics.contains(
            "clusterset_dns_cluster_objects_adjusted_total{cluster=\"north\",reason=\"address_denied\",action=\"clamped\"} 1"
        ),
        "{metrics}"
    );
    set_deny("");
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &["10.1.0.1", "10.2.0.1"],
        10 * SECOND,
    )
    .await;
    server.server.stop().await;
}

// ---------------------------------------------------------------------------
// Where each cluster is (docs/locality.md)
// ---------------------------------------------------------------------------

const PROPERTIES: &str = "/apis/about.k8s.io/v1alpha1/clusterproperties";

/// A ClusterProperty document.
fn property_doc(name: &str, value: &str) -> serde_json::Value {
    json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
           "metadata": {"name": name}, "spec": {"value": value}})
}

/// Sets the value of ClusterProperty `name` (it exists).
async fn patch_property(c: &kube::Client, name: &str, value: &str) {
    let req = http::Request::patch(format!("{PROPERTIES}/{name}"))
        .header("content-type", "application/merge-patch+json")
        .body(serde_json::to_vec(&json!({"spec": {"value": value}})).expect("json"))
        .expect("request");
    c.request_text(req).await.expect("patch ClusterProperty");
}

/// A clusters file of `(cluster, extra keys)` entries.
fn write_placed_clusters(path: &Path, clusters: &[(&kubesim::Cluster, &str)]) {
    let text: String = clusters
        .iter()
        .map(|(c, extra)| {
            format!(
                "- name: {}\n  kubeconfig: {}\n{extra}",
                c.name,
                c.kubeconfig_path().display()
            )
        })
        .collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write clusters file");
    std::fs::rename(&tmp, path).expect("rename clusters file");
}

/// `cluster`'s place in `/debug/clusters` once it is `region`/`zone` from
/// `from` (at most `limit`); returns the report.
async fn until_place(
    admin: SocketAddr,
    cluster: &'static str,
    (region, zone): (Option<&str>, Option<&str>),
    from: &str,
    limit: Duration,
) -> serde_json::Value {
    let want = json!({"region": region, "zone": zone});
    until_report(
        admin,
        cluster,
        &format!("{cluster} at {want} ({from})"),
        limit,
        |r| r["place"] == want && r["placeFrom"] == from,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_clusters_place_from_the_clusters_file_or_its_cluster_properties() {
    let (sim, dir) = sim(&["local", "east", "north"], |c| {
        c.settings.link_crd = false;
    })
    .await;
    // South serves no ClusterProperty API: it still syncs, its place unknown.
    let (bare_sim, _bare_dir) = crate::kubesim_api::sim(&["south"], |c| {
        c.settings.about_crd = false;
    })
    .await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster").clone();
    let (local, east, north) = (cluster("local"), cluster("east"), cluster("north"));
    let south = bare_sim.cluster("south").expect("south").clone();
    let (lc, ec, nc) = (
        client(&local).await,
        client(&east).await,
        client(&north).await,
    );
    export(&ec, "api", &["10.1.0.1"]).await;
    export(&nc, "api", &["10.2.0.1"]).await;
    export(&client(&south).await, "api", &["10.3.0.1"]).await;
    create_object(&lc, property_doc("region.clusterset-dns.io", "us-west")).await;
    // East's file entry wins whole over what east says of itself.
    create_object(&ec, property_doc("region.clusterset-dns.io", "ignored")).await;
    create_object(&nc, property_doc("region.clusterset-dns.io", "eu-north")).await;
    create_object(&nc, property_doc("zone.clusterset-dns.io", "eu-north-1a")).await;
    let file = dir.path().join("clusters.yaml");
    let placed = "  region: us-east\n  zone: us-east-1a\n";
    write_placed_clusters(&file, &[(&east, placed), (&north, ""), (&south, "")]);
    // Without --mcs: the ClusterProperty watch runs all the same.
    let server = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        Live::new(local.kubeconfig_path(), Links::File(file.clone())),
    )
    .await;
    let (dns, admin) = (server.dns, server.admin);
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &["10.1.0.1", "10.2.0.1", "10.3.0.1"],
        5 * SECOND,
    )
    .await;
    until_place(
        admin,
        "local",
        (Some("us-west"), None),
        "cluster-property",
        5 * SECOND,
    )
    .await;
    let e = until_place(
        admin,
        "east",
        (Some("us-east"), Some("us-east-1a")),
        "configured",
        5 * SECOND,
    )
    .await;
    until_place(
        admin,
        "north",
        (Some("eu-north"), Some("eu-north-1a")),
        "cluster-property",
        5 * SECOND,
    )
    .await;
    let s = until_place(admin, "south", (None, None), "unknown", 5 * SECOND).await;
    assert_eq!(s["state"], "synced", "{s:#}");
    assert_eq!(s["placeProblem"], serde_json::Value::Null, "{s:#}");

    // The file moves east: the model is told, and east's watches go on.
    write_placed_clusters(
        &file,
        &[
            (&east, "  region: us-central\n"),
            (&north, ""),
            (&south, ""),
        ],
    );
    let moved = until_place(
        admin,
        "east",
        (Some("us-central"), None),
        "configured",
        5 * SECOND,
    )
    .await;
    assert!(
        moved["secondsSinceStart"].as_f64() >= e["secondsSinceStart"].as_f64(),
        "east was not restarted: {moved:#}"
    );
    // North's zone turns invalid: its whole place is unknown, and why.
    patch_property(&nc, "zone.clusterset-dns.io", "eu north 1a").await;
    let n = until_place(admin, "north", (None, None), "unknown", 5 * SECOND).await;
    assert!(
        n["placeProblem"]
            .as_str()
            .is_some_and(|p| p.contains("not a Kubernetes label value")),
        "{n:#}"
    );
    assert!(
        n["adjustedObjects"]["skipped"]["place_invalid"].as_u64() >= Some(1),
        "{n:#}"
    );
    delete(&nc, &format!("{PROPERTIES}/zone.clusterset-dns.io")).await;
    until_place(
        admin,
        "north",
        (Some("eu-north"), None),
        "cluster-property",
        5 * SECOND,
    )
    .await;
    // South gets the CRD and a region: found without a restart.
    south.install_crds("about.k8s.io");
    create_object(
        &client(&south).await,
        property_doc("region.clusterset-dns.io", "ap-south"),
    )
    .await;
    until_place(
        admin,
        "south",
        (Some("ap-south"), None),
        "cluster-property",
        5 * SECOND,
    )
    .await;
    server.server.stop().await;
}

/// Credentials that may read Services and EndpointSlices but no
/// ClusterProperty, as Linkerd's own remote-access ServiceAccount.
const LINKERD_LIKE_RBAC: &str = "
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: remote-access}
rules:
- {apiGroups: [''], resources: [services], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: remote-access}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: remote-access}
subjects:
- {kind: ServiceAccount, name: remote-access, namespace: linkerd-multicluster}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_that_may_not_read_cluster_properties_still_sync() {
    let (sim, dir) = sim(&["local", "east"], |c| {
        c.settings.link_crd = false;
    })
    .await;
    let local = sim.cluster("local").expect("local").clone();
    let east = sim.cluster("east").expect("east").clone();
    let ec = client(&east).await;
    export(&ec, "api", &["10.1.0.1"]).await;
    create_object(&ec, property_doc("region.clusterset-dns.io", "us-east")).await;
    let mut policy = kubesim::Policy::default();
    policy
        .add_yaml("linkerd-like", LINKERD_LIKE_RBAC)
        .expect("policy");
    east.set_policy(Some(policy));
    let token = east.issue_service_account_token("linkerd-multicluster", "remote-access");
    let kubeconfig = dir.path().join("east-remote-access.kubeconfig");
    std::fs::write(&kubeconfig, east.kubeconfig_for("remote-access", &token)).expect("write");
    let file = dir.path().join("clusters.yaml");
    std::fs::write(
        &file,
        format!(
            "- name: east\n  kubeconfig: {}\n  zone: us-east-1a\n",
            kubeconfig.display()
        ),
    )
    .expect("write clusters file");
    let server = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        Live::new(local.kubeconfig_path(), Links::File(file)),
    )
    .await;
    until(
        server.dns,
        &fqdn("api-east"),
        ResponseCode::NoError,
        &["10.1.0.1"],
        5 * SECOND,
    )
    .await;
    let r = until_report(
        server.admin,
        "east",
        "east says why it has no property place",
        5 * SECOND,
        |r| r["placeProblem"].is_string(),
    )
    .await;
    assert!(
        r["placeProblem"]
            .as_str()
            .is_some_and(|p| p.contains("may not list ClusterProperties")),
        "{r:#}"
    );
    // Synced and healthy: no watch was refused, the file's zone is its place.
    assert_eq!(r["state"], "synced", "{r:#}");
    assert_eq!(r["lastError"], serde_json::Value::Null, "{r:#}");
    assert_eq!(r["placeFrom"], "configured", "{r:#}");
    assert_eq!(
        r["place"],
        json!({"region": null, "zone": "us-east-1a"}),
        "{r:#}"
    );
    assert_eq!(
        east.request_count("watch", "clusterproperties.about.k8s.io"),
        0
    );
    server.server.stop().await;
}
