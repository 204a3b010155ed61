//! The admin HTTP server: `/live`, `/ready` (503 until every cluster has
//! loaded) and `/metrics` in Prometheus text.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use clusterset_dns::metrics::Shared;
use clusterset_dns::model::{Settings, Snapshot};
use clusterset_dns::vocab::name::ZoneName;
use hickory_proto::rr::RecordType;
use tokio_util::sync::CancellationToken;

use crate::binary::http_get;
use crate::support::{Options, Proto, ask, eventually, fixture, q, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_503_until_loaded() {
    let settings = Arc::new(Settings::new(
        ZoneName::new("clusterset.local").expect("zone"),
    ));
    let shared = Arc::new(Shared::new(
        Arc::new(Snapshot::empty(settings)),
        Arc::default(),
        Default::default(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let token = CancellationToken::new();
    let task = tokio::spawn(clusterset_dns::admin::serve(
        listener,
        shared.clone(),
        token.clone(),
    ));
    let get = |path: &'static str| tokio::task::spawn_blocking(move || http_get(addr, path));
    assert_eq!(get("/live").await.expect("join").0, 200);
    let (status, body) = get("/ready").await.expect("join");
    assert_eq!(status, 503, "{body}");
    assert!(
        get("/metrics")
            .await
            .expect("join")
            .1
            .contains("clusterset_dns_ready 0")
    );
    shared.ready.store(true, Ordering::Release);
    assert_eq!(get("/ready").await.expect("join").0, 200);
    assert_eq!(get("/nope").await.expect("join").0, 404);
    token.cancel();
    task.await.expect("join").expect("clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_queries_names_and_clusters() {
    let server = start(&fixture("conformance"), Options::conformance()).await;
    for (name, rtype) in [
        ("web-east.prod.svc.clusterset.local.", RecordType::A),
        ("web-east.prod.svc.clusterset.local.", RecordType::A),
        ("nope.prod.svc.clusterset.local.", RecordType::AAAA),
        ("example.com.", RecordType::A),
    ] {
        ask(server.dns, Proto::Udp, &q(name, rtype)).await;
    }
    let admin = server.admin;
    let (status, body) = tokio::task::spawn_blocking(move || http_get(admin, "/metrics"))
        .await
        .expect("join");
    assert_eq!(status, 200);
    for want in [
        "clusterset_dns_queries_total{qtype=\"A\",rcode=\"NOERROR\"} 2",
        "clusterset_dns_queries_total{qtype=\"AAAA\",rcode=\"NXDOMAIN\"} 1",
        "clusterset_dns_queries_total{qtype=\"A\",rcode=\"REFUSED\"} 1",
        "clusterset_dns_cluster_synced{cluster=\"east\"} 1",
        "clusterset_dns_names_too_long 1",
        "clusterset_dns_ready 1",
        "# TYPE clusterset_dns_names gauge",
    ] {
        assert!(body.contains(want), "missing {want:?} in:\n{body}");
    }
    let names: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix("clusterset_dns_names "))
        .and_then(|v| v.parse().ok())
        .expect("names gauge");
    assert!(names > 100, "the fixture serves over 100 names ({names})");
    server.server.stop().await;
}

/// `/debug/clusters` as JSON, from a blocking thread.
async fn debug_clusters(admin: std::net::SocketAddr) -> serde_json::Value {
    let (status, body) = tokio::task::spawn_blocking(move || http_get(admin, "/debug/clusters"))
        .await
        .expect("join");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

fn cluster<'a>(body: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    body["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {body:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_clusters_lists_each_cluster_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    crate::support::copy_tree(&crate::support::demo(), dir.path());
    std::fs::write(
        dir.path().join("south/broken.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: [not, a, map]\n",
    )
    .expect("write");
    let server = start(
        dir.path(),
        Options {
            local: Some("west"),
            ..Options::default()
        },
    )
    .await;
    let body = debug_clusters(server.admin).await;
    let names: Vec<&str> = body["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["east", "north", "south", "west"], "{body:#}");
    let north = cluster(&body, "north");
    assert_eq!(north["state"], "synced", "{north:#}");
    assert!(north["origin"].as_str().expect("origin").contains("north"));
    assert!(
        north["services"].as_u64().expect("services") > 0,
        "{north:#}"
    );
    assert!(
        north["endpoints"].as_u64().expect("endpoints") > 0,
        "{north:#}"
    );
    assert_eq!(north["fileProblems"], serde_json::json!([]));
    assert_eq!(cluster(&body, "west")["local"], true);
    let south = cluster(&body, "south");
    let problems = south["fileProblems"].as_array().expect("problems");
    assert!(
        problems
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.contains("broken.yaml"))),
        "{south:#}"
    );
    assert_eq!(south["skippedObjects"], 1, "{south:#}");

    // A reload that fails keeps the old data, and says so.
    let before = north["services"].clone();
    std::fs::write(dir.path().join("north/broken.yaml"), "kind: [\n").expect("write");
    eventually(
        "north reported broken",
        std::time::Duration::from_secs(5),
        || async {
            let north = cluster(&debug_clusters(server.admin).await, "north").clone();
            (north["state"] == "broken")
                .then_some(())
                .ok_or(format!("{north:#}"))
        },
    )
    .await;
    let north = cluster(&debug_clusters(server.admin).await, "north").clone();
    assert_eq!(north["services"], before, "the previous data is still held");
    assert!(
        north["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("previous data")),
        "{north:#}"
    );
    server.server.stop().await;
}

/// `/debug/name`: the JSON of one name (or its text), 400 with the reason
/// for no name or a name that is not one, the same explanation whether
/// the name is relative or absolute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_name_explains_one_name() {
    let server = start(
        &crate::support::demo(),
        Options {
            local: Some("west"),
            ..Options::default()
        },
    )
    .await;
    let admin = server.admin;
    let get = |path: String| tokio::task::spawn_blocking(move || http_get(admin, &path));
    let (status, body) = get("/debug/name?name=db-federated.data".to_owned())
        .await
        .expect("join");
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(json["name"], "db-federated.data.svc.clusterset.local.");
    assert_eq!(json["kind"], "federated");
    assert_eq!(json["service"], "data/db");
    let members: Vec<(&str, bool, u64)> = json["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| {
            (
                m["cluster"].as_str().expect("cluster"),
                m["answered"].as_bool().expect("answered"),
                m["ready"].as_u64().expect("ready"),
            )
        })
        .collect();
    assert_eq!(
        members,
        [("east", true, 3), ("north", true, 3), ("south", true, 3)],
        "{json:#}"
    );
    assert_eq!(json["answers"][0]["count"], 9, "{json:#}");
    // Percent-encoded, absolute, as text.
    let (status, text) =
        get("/debug/name?format=text&name=db-federated.data.svc.clusterset.local%2E".to_owned())
            .await
            .expect("join");
    assert_eq!(status, 200, "{text}");
    assert!(
        text.starts_with("name     db-federated.data.svc.clusterset.local.\n"),
        "{text}"
    );
    for (path, want) in [
        ("/debug/name", "no name given"),
        ("/debug/name?name=", "no name given"),
        ("/debug/name?name=a%20b.prod", "is not a DNS name"),
    ] {
        let (status, body) = get(path.to_owned()).await.expect("join");
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains(want), "{path}: {body}");
    }
    server.server.stop().await;
}

/// A flat service `api` in `prod` and its slice, with `extra` slice
/// endpoints and ports (YAML list items) appended.
fn hostile_files(dir: &std::path::Path, extra_endpoints: &str, extra_ports: &str) {
    let text = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: api\n  namespace: prod\n  labels:\n    mirror.linkerd.io/exported: remote-discovery\nspec:\n  clusterIP: 10.96.0.5\n  ports:\n  - name: http\n    port: 80\n\
---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: api-1\n  namespace: prod\n  labels:\n    kubernetes.io/service-name: api\naddressType: IPv4\nports:\n- name: http\n  port: 8080\n{extra_ports}endpoints:\n- addresses: [10.20.1.1]\n- addresses: [10.20.1.2]\n{extra_endpoints}"
    );
    // Written aside and renamed, so a reload never reads half a file.
    let tmp = dir.join("east/.all.tmp");
    std::fs::create_dir_all(dir.join("east")).expect("mkdir");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, dir.join("east/all.yaml")).expect("rename");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_objects_are_counted_by_reason_as_the_files_hold_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    hostile_files(
        dir.path(),
        "- addresses: [not-an-ip]\n- addresses: [10.20.1.1]\n",
        "- name: zero\n  port: 0\n",
    );
    let server = start(dir.path(), Options::default()).await;
    let (msg, _) = ask(
        server.dns,
        Proto::Udp,
        &q("api-east.prod.svc.clusterset.local.", RecordType::A),
    )
    .await;
    assert_eq!(msg.answers.len(), 2, "the rest of the slice answers");
    let east = cluster(&debug_clusters(server.admin).await, "east").clone();
    assert_eq!(
        east["adjustedObjects"],
        serde_json::json!({"clamped": {"address_not_ip": 1, "duplicate_address": 1, "port_out_of_range": 1}}),
        "{east:#}"
    );
    assert_eq!(east["skippedObjects"], 0, "a clamped slice is served");
    let admin = server.admin;
    let (_, metrics) = tokio::task::spawn_blocking(move || http_get(admin, "/metrics"))
        .await
        .expect("join");
    assert!(
        metrics.contains(
            "clusterset_dns_cluster_objects_adjusted_total{cluster=\"east\",reason=\"address_not_ip\",action=\"clamped\"} 1"
        ),
        "{metrics}"
    );
    // Fixed files: the counts are the files', not a sum over reloads.
    hostile_files(dir.path(), "", "");
    eventually(
        "east's adjusted objects follow the fixed files",
        std::time::Duration::from_secs(5),
        || async {
            let east = cluster(&debug_clusters(server.admin).await, "east").clone();
            (east["adjustedObjects"] == serde_json::json!({}))
                .then_some(())
                .ok_or(format!("{east:#}"))
        },
    )
    .await;
    server.server.stop().await;
}
