//! The mirror controller against kubesim: the objects it writes into the
//! local cluster, what it must never touch, what it removes and when, and
//! leader election between two replicas.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use serde_json::{Value, json};

use crate::binary::http_get;
use crate::kubesim_api::{client, sim};
use crate::support::{
    Links, Live, MirrorSetup, Options, Proto, TestServer, ask, create_object, eventually, q,
    start_live,
};

const NS: &str = "prod";
const OURS: &str = "app.kubernetes.io/managed-by=clusterset-dns";

pub(crate) async fn get(c: &kube::Client, path: &str) -> Option<Value> {
    let req = http::Request::get(path).body(Vec::new()).expect("request");
    match c.request::<Value>(req).await {
        Ok(v) => Some(v),
        Err(kube::Error::Api(s)) if s.code == 404 => None,
        Err(e) => panic!("GET {path}: {e}"),
    }
}

pub(crate) async fn items(c: &kube::Client, path: &str) -> Vec<Value> {
    get(c, path)
        .await
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

pub(crate) fn svc_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/services/{name}")
}

/// Our EndpointSlices of local Service `service`.
async fn slices_of(c: &kube::Client, service: &str) -> Vec<Value> {
    items(
        c,
        &format!("/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices?labelSelector=kubernetes.io/service-name%3D{service}"),
    )
    .await
}

/// Addresses (and hostnames) of the ready endpoints of `service`'s slices.
pub(crate) async fn endpoints_of(c: &kube::Client, service: &str) -> Vec<String> {
    let mut out: Vec<String> = slices_of(c, service)
        .await
        .iter()
        .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"] != json!(false))
        .flat_map(|e| {
            let host = e["hostname"]
                .as_str()
                .map(|h| format!("{h}="))
                .unwrap_or_default();
            e["addresses"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |a| format!("{host}{}", a.as_str().unwrap_or("")))
        })
        .collect();
    out.sort();
    out
}

/// A gauge or counter without labels from `/metrics`.
fn metric(admin: SocketAddr, name: &str) -> Option<f64> {
    let (_, body) = http_get(admin, "/metrics");
    body.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        (words.next()? == name).then(|| words.next()?.parse().ok())?
    })
}

/// Our Services and EndpointSlices in the local cluster, every namespace.
async fn ours_in_api(c: &kube::Client) -> usize {
    items(c, &format!("/api/v1/services?labelSelector={OURS}"))
        .await
        .len()
        + items(
            c,
            &format!("/apis/discovery.k8s.io/v1/endpointslices?labelSelector={OURS}"),
        )
        .await
        .len()
}

/// Whether the mirror of `admin` has finished a reconcile since our
/// objects last changed: its owned-objects gauge, set at the end of each
/// reconcile, counts exactly what the API holds. Right after a write the
/// API holds one more object than the gauge of the previous reconcile, so
/// this is the positive evidence that the reconcile which wrote it, and
/// every delete it planned, is over.
async fn reconciled(c: &kube::Client, admin: SocketAddr) -> Result<(), String> {
    let api = ours_in_api(c).await;
    match metric(admin, "clusterset_dns_mirror_objects_owned") {
        Some(g) if g == api as f64 => Ok(()),
        g => Err(format!(
            "owned gauge {g:?}, {api} objects of ours in the API"
        )),
    }
}

/// The rcode of an A query for `<label>.prod.svc.clusterset.local`.
async fn rcode(dns: SocketAddr, label: &str) -> ResponseCode {
    let name = format!("{label}.{NS}.svc.clusterset.local.");
    ask(dns, Proto::Udp, &q(&name, RecordType::A))
        .await
        .0
        .metadata
        .response_code
}

/// Exports `new` from east: a change whose mirror (`new-east`) shows that
/// the mirror has taken a model state at least as new as everything
/// before it.
async fn export_new_from_east(s: &Setup) {
    let east = client(s.sim.cluster("east").expect("east")).await;
    create_object(
        &east,
        service("new", json!({"mirror.linkerd.io/exported": "true"}), false),
    )
    .await;
}

fn service(name: &str, labels: Value, headless: bool) -> Value {
    let mut spec = json!({"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]});
    if headless {
        spec["clusterIP"] = json!("None");
    }
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": NS, "labels": labels}, "spec": spec})
}

fn slice(service: &str, name: &str, eps: &[(&str, Option<&str>)]) -> Value {
    let endpoints: Vec<Value> = eps
        .iter()
        .map(|(ip, host)| {
            let mut e = json!({"addresses": [ip], "conditions": {"ready": true}});
            if let Some(h) = host {
                e["hostname"] = json!(h);
            }
            e
        })
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": name, "namespace": NS, "labels": {"kubernetes.io/service-name": service}},
           "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
           "endpoints": endpoints})
}

fn write_clusters(path: &Path, entries: &[(&kubesim::Cluster, Option<&str>)]) {
    let text: String = entries
        .iter()
        .map(|(c, gw)| {
            let mut e = format!(
                "- name: {}\n  kubeconfig: {}\n",
                c.name,
                c.kubeconfig_path().display()
            );
            if let Some(ip) = gw {
                e.push_str(&format!(
                    "  gateway: {{addresses: [{ip}], port: 4143, identity: gw.east.example}}\n"
                ));
            }
            e
        })
        .collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// local + east (gateway-mode `web`, federated headless `db`) + north (flat
/// `api`, federated headless `db`), and a server with the mirror.
struct Setup {
    sim: kubesim::Sim,
    dir: tempfile::TempDir,
    local: kube::Client,
    file: std::path::PathBuf,
}

async fn setup(before: impl AsyncFnOnce(&kube::Client)) -> Setup {
    let (sim, dir) = sim(&["local", "east", "north"], |_| {}).await;
    let local = client(sim.cluster("local").expect("local")).await;
    let east = client(sim.cluster("east").expect("east")).await;
    let north = client(sim.cluster("north").expect("north")).await;
    let fed = json!({"mirror.linkerd.io/exported": "remote-discovery", "mirror.linkerd.io/federated": "member"});
    create_object(
        &east,
        service("web", json!({"mirror.linkerd.io/exported": "true"}), false),
    )
    .await;
    create_object(&east, slice("web", "web-1", &[("10.1.0.1", None)])).await;
    create_object(&east, service("db", fed.clone(), true)).await;
    create_object(
        &east,
        slice(
            "db",
            "db-1",
            &[("10.1.2.10", Some("db-0")), ("10.1.2.11", Some("db-1"))],
        ),
    )
    .await;
    create_object(
        &north,
        service(
            "api",
            json!({"mirror.linkerd.io/exported": "remote-discovery"}),
            false,
        ),
    )
    .await;
    create_object(
        &north,
        slice("api", "api-1", &[("10.2.0.1", None), ("10.2.0.2", None)]),
    )
    .await;
    create_object(&north, service("db", fed, true)).await;
    create_object(&north, slice("db", "db-1", &[("10.2.2.10", Some("db-0"))])).await;
    // The mirrors go into namespaces that exist locally.
    create_object(
        &local,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await;
    before(&local).await;
    let file = dir.path().join("clusters.yaml");
    write_clusters(
        &file,
        &[
            (sim.cluster("east").expect("east"), Some("203.0.113.10")),
            (sim.cluster("north").expect("north"), None),
        ],
    );
    Setup {
        sim,
        dir,
        local,
        file,
    }
}

async fn serve(s: &Setup, mirror: MirrorSetup, tweak: impl FnOnce(&mut Live)) -> TestServer {
    let mut live = Live::new(
        s.sim.cluster("local").expect("local").kubeconfig_path(),
        Links::File(s.file.clone()),
    );
    live.mirror = Some(mirror);
    tweak(&mut live);
    start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        live,
    )
    .await
}

fn label<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v["metadata"]["labels"][key].as_str()
}

fn annotation<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v["metadata"]["annotations"][key].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_and_federated_objects_as_linkerd_reads_them() {
    let s = setup(async |_| {}).await;
    let server = serve(&s, MirrorSetup::new("a"), |_| {}).await;
    let c = &s.local;
    // Objects are written in key order (Services, then slices by name):
    // wait for web-east's slice too, written after db-federated's and
    // db-nearest's.
    eventually("mirrors written", Duration::from_secs(10), || async {
        get(c, &svc_path("web-east")).await.is_some()
            && get(c, &svc_path("api-north")).await.is_some()
            && get(c, &svc_path("db-federated")).await.is_some()
            && !endpoints_of(c, "db-federated").await.is_empty()
            && !endpoints_of(c, "web-east").await.is_empty()
    })
    .await;

    // Gateway mode (docs/linkerd.md §3.1): a ClusterIP Service, slices of
    // the gateway address and port with the gateway identity.
    let web = get(c, &svc_path("web-east")).await.expect("web-east");
    assert_eq!(
        label(&web, "mirror.linkerd.io/mirrored-service"),
        Some("true")
    );
    assert_eq!(label(&web, "mirror.linkerd.io/cluster-name"), Some("east"));
    assert_eq!(
        label(&web, "app.kubernetes.io/managed-by"),
        Some("clusterset-dns")
    );
    assert_eq!(
        annotation(&web, "mirror.linkerd.io/remote-svc-fq-name"),
        Some("web.prod.svc.cluster.local")
    );
    assert_ne!(web["spec"]["clusterIP"], json!("None"));
    assert!(web["spec"]["selector"].is_null(), "no selector: {web}");
    let web_slices = slices_of(c, "web-east").await;
    assert!(!web_slices.is_empty());
    for sl in &web_slices {
        assert_eq!(
            label(sl, "endpointslice.kubernetes.io/managed-by"),
            Some("clusterset-dns.io/mirror")
        );
        assert_eq!(
            annotation(sl, "mirror.linkerd.io/remote-gateway-identity"),
            Some("gw.east.example")
        );
        assert_eq!(sl["ports"][0]["port"], json!(4143), "{sl}");
    }
    assert_eq!(endpoints_of(c, "web-east").await, ["203.0.113.10"]);

    // Flat mode (§3.2): Linkerd's remote-discovery labels, plus the remote
    // pod IPs so clients without a mesh work.
    let api = get(c, &svc_path("api-north")).await.expect("api-north");
    assert_eq!(
        label(&api, "multicluster.linkerd.io/remote-discovery"),
        Some("north")
    );
    assert_eq!(
        label(&api, "multicluster.linkerd.io/remote-service"),
        Some("api")
    );
    assert_eq!(endpoints_of(c, "api-north").await, ["10.2.0.1", "10.2.0.2"]);

    // Federated (§3.4, plus our EndpointSlices): members listed, pods of
    // every member with hostnames <host>-<cluster>.
    let fed = get(c, &svc_path("db-federated"))
        .await
        .expect("db-federated");
    assert_eq!(
        label(&fed, "mirror.linkerd.io/mirrored-service"),
        Some("true")
    );
    assert_eq!(label(&fed, "mirror.linkerd.io/cluster-name"), None);
    assert_eq!(
        annotation(&fed, "multicluster.linkerd.io/remote-discovery"),
        Some("db@east,db@north")
    );
    assert_eq!(
        endpoints_of(c, "db-federated").await,
        [
            "db-0-east=10.1.2.10",
            "db-0-north=10.2.2.10",
            "db-1-east=10.1.2.11"
        ]
    );

    // Every object of ours answers to the label users filter on.
    let ours = items(c, &format!("/api/v1/services?labelSelector={OURS}")).await;
    assert!(ours.len() >= 4, "{ours:?}");

    // A StatefulSet scaled in north: the federated slice follows within a second.
    let north = client(s.sim.cluster("north").expect("north")).await;
    let body = json!({"endpoints": [
        {"addresses": ["10.2.2.10"], "hostname": "db-0", "conditions": {"ready": true}},
        {"addresses": ["10.2.2.11"], "hostname": "db-1", "conditions": {"ready": true}}]});
    let req = http::Request::patch(format!(
        "/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/db-1"
    ))
    .header("content-type", "application/merge-patch+json")
    .body(serde_json::to_vec(&body).expect("json"))
    .expect("request");
    north.request_text(req).await.expect("scale");
    eventually(
        "db-1-north in the federated slice",
        Duration::from_secs(1),
        || async {
            endpoints_of(c, "db-federated")
                .await
                .contains(&"db-1-north=10.2.2.11".to_owned())
        },
    )
    .await;
    let metrics = http_get(server.admin, "/metrics").1;
    assert!(
        metrics.contains("clusterset_dns_mirror_leader 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "clusterset_dns_mirror_writes_total{kind=\"Service\",op=\"create\",outcome=\"ok\"}"
        ),
        "{metrics}"
    );
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_object_survives_and_an_unlinked_cluster_takes_exactly_its_objects() {
    let s = setup(async |local| {
        // The user's own Service that happens to be called web-east.
        create_object(local, service("web-east", json!({"team": "mine"}), false)).await;
    })
    .await;
    let c = &s.local;
    let before = get(c, &svc_path("web-east"))
        .await
        .expect("user's web-east");
    let server = serve(&s, MirrorSetup::new("a"), |_| {}).await;
    eventually("north mirrored", Duration::from_secs(10), || async {
        get(c, &svc_path("api-north")).await.is_some()
            && !endpoints_of(c, "db-federated").await.is_empty()
    })
    .await;
    // Reported: the controller met the user's web-east and left it (an
    // Event, the gauge), and the reconcile that did so is over.
    eventually("web-east reported", Duration::from_secs(5), || async {
        let events = items(c, &format!("/apis/events.k8s.io/v1/namespaces/{NS}/events")).await;
        let reported = events
            .iter()
            .any(|e| e["reason"] == "NotOwned" && e["regarding"]["name"] == "web-east");
        let gauge = metric(server.admin, "clusterset_dns_mirror_objects_not_owned");
        if !reported || gauge != Some(1.0) {
            return Err(format!("not_owned gauge {gauge:?}, events {events:?}"));
        }
        reconciled(c, server.admin).await
    })
    .await;
    // Untouched: same resourceVersion, no label of ours.
    let after = get(c, &svc_path("web-east")).await.expect("still there");
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(label(&after, "app.kubernetes.io/managed-by"), None);
    // Nor is anything attached to it: no slice of ours feeds the user's Service.
    assert!(
        slices_of(c, "web-east").await.is_empty(),
        "{:?}",
        slices_of(c, "web-east").await
    );

    // North unlinked: its mirrors go, its federated membership goes, east's stay.
    write_clusters(
        &s.file,
        &[(s.sim.cluster("east").expect("east"), Some("203.0.113.10"))],
    );
    eventually(
        "north's objects removed",
        Duration::from_secs(5),
        || async {
            get(c, &svc_path("api-north")).await.is_none()
                && slices_of(c, "api-north").await.is_empty()
        },
    )
    .await;
    eventually(
        "north left the federation",
        Duration::from_secs(5),
        || async {
            endpoints_of(c, "db-federated").await == ["db-0-east=10.1.2.10", "db-1-east=10.1.2.11"]
        },
    )
    .await;
    let fed = get(c, &svc_path("db-federated"))
        .await
        .expect("db-federated");
    assert_eq!(
        annotation(&fed, "multicluster.linkerd.io/remote-discovery"),
        Some("db@east")
    );
    assert!(
        get(c, &svc_path("web-east")).await.is_some(),
        "the user's web-east stays"
    );
    let _ = &s.dir;
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_past_max_stale_keeps_its_mirrors() {
    let s = setup(async |_| {}).await;
    let server = serve(&s, MirrorSetup::new("a"), |l| {
        l.max_stale = Some(Duration::from_millis(500));
    })
    .await;
    let c = &s.local;
    eventually("north mirrored", Duration::from_secs(10), || async {
        !endpoints_of(c, "api-north").await.is_empty()
    })
    .await;
    s.sim.cluster("north").expect("north").stop();
    // The event: north past max-stale, as the model sees it (SERVFAIL).
    eventually(
        "north's names SERVFAIL",
        Duration::from_secs(10),
        || async { rcode(server.dns, "api-north").await == ResponseCode::ServFail },
    )
    .await;
    // A later change the mirror must write: once that reconcile is over
    // (it planned from a model where north is stale), nothing of north's
    // may have gone.
    export_new_from_east(&s).await;
    eventually(
        "new-east written, its reconcile over",
        Duration::from_secs(10),
        || async {
            if get(c, &svc_path("new-east")).await.is_none() {
                return Err("new-east not written yet".to_owned());
            }
            reconciled(c, server.admin).await
        },
    )
    .await;
    assert!(get(c, &svc_path("api-north")).await.is_some());
    assert_eq!(endpoints_of(c, "api-north").await, ["10.2.0.1", "10.2.0.2"]);
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resync_without_change_writes_nothing_and_a_manual_edit_is_repaired() {
    let s = setup(async |_| {}).await;
    let mut m = MirrorSetup::new("a");
    m.resync = Duration::from_millis(300);
    let server = serve(&s, m, |_| {}).await;
    let c = &s.local;
    eventually("mirrors written", Duration::from_secs(10), || async {
        !endpoints_of(c, "db-federated").await.is_empty()
            && !endpoints_of(c, "web-east").await.is_empty()
    })
    .await;
    eventually("settled", Duration::from_secs(10), || async {
        reconciled(c, server.admin).await
    })
    .await;
    let writes = server.server.shared.mirror.ok_writes();
    // Each resync looks for Linkerd's mirror Services (a LIST) before it
    // reconciles: three more LISTs are two whole resyncs done.
    let local = s.sim.cluster("local").expect("local");
    let lists = local.request_count("list", "services");
    eventually("three resyncs", Duration::from_secs(10), || async {
        local.request_count("list", "services") >= lists + 3
    })
    .await;
    assert_eq!(
        server.server.shared.mirror.ok_writes(),
        writes,
        "resyncs wrote"
    );

    // Someone edits our Service's port: put back.
    let req = http::Request::patch(svc_path("web-east"))
        .header("content-type", "application/merge-patch+json")
        .body(
            serde_json::to_vec(
                &json!({"spec": {"ports": [{"name": "http", "port": 81, "protocol": "TCP"}]}}),
            )
            .expect("json"),
        )
        .expect("request");
    c.request_text(req).await.expect("edit");
    eventually("edit repaired", Duration::from_secs(3), || async {
        get(c, &svc_path("web-east"))
            .await
            .is_some_and(|v| v["spec"]["ports"][0]["port"] == json!(80))
    })
    .await;
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_writer_and_a_takeover() {
    let s = setup(async |_| {}).await;
    let a = serve(&s, MirrorSetup::new("replica-a"), |_| {}).await;
    let b = serve(&s, MirrorSetup::new("replica-b"), |_| {}).await;
    let c = &s.local;
    eventually("mirrors written", Duration::from_secs(10), || async {
        !endpoints_of(c, "db-federated").await.is_empty()
    })
    .await;
    let (leader, follower) = if a.server.shared.mirror.is_leader() {
        (a, b)
    } else {
        (b, a)
    };
    assert!(leader.server.shared.mirror.is_leader());
    assert!(!follower.server.shared.mirror.is_leader());
    assert!(leader.server.shared.mirror.ok_writes() > 0);
    // The follower has the clusterset the leader wrote from (its DNS
    // answers it), and wrote nothing.
    eventually("the follower answers", Duration::from_secs(5), || async {
        rcode(follower.dns, "db-federated").await == ResponseCode::NoError
    })
    .await;
    assert_eq!(
        follower.server.shared.mirror.ok_writes(),
        0,
        "the follower wrote"
    );
    // The leader dies; within the lease duration (2 s) the other takes over
    // and mirrors what changed meanwhile.
    leader.server.stop().await;
    let east = client(s.sim.cluster("east").expect("east")).await;
    create_object(
        &east,
        service("new", json!({"mirror.linkerd.io/exported": "true"}), false),
    )
    .await;
    let took = eventually("takeover", Duration::from_secs(6), || async {
        get(c, &svc_path("new-east")).await.is_some()
    })
    .await;
    assert!(follower.server.shared.mirror.is_leader());
    assert!(took < Duration::from_secs(5), "took {took:?}");
    follower.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_a_cluster_is_down_deletes_nothing() {
    let s = setup(async |_| {}).await;
    let c = &s.local;
    let first = serve(&s, MirrorSetup::new("a"), |_| {}).await;
    eventually("north mirrored", Duration::from_secs(10), || async {
        !endpoints_of(c, "api-north").await.is_empty()
            && !endpoints_of(c, "db-federated").await.is_empty()
    })
    .await;
    first.server.stop().await;
    // North is down when the controller comes back: it never syncs north,
    // so north's mirrors and the federated objects must stay as they are.
    s.sim.cluster("north").expect("north").stop();
    // (Within the sync timeout: once it gives up on north, the federated
    // objects follow the members that answer, as the DNS names do.)
    let second = serve(&s, MirrorSetup::new("b"), |l| {
        l.sync_timeout = Duration::from_secs(30);
        l.wait_ready = false;
    })
    .await;
    eventually("b leads", Duration::from_secs(6), || async {
        second.server.shared.mirror.is_leader()
    })
    .await;
    // b writes what it may: once that reconcile is over, what it held
    // back is still as it was.
    export_new_from_east(&s).await;
    eventually(
        "new-east written by b, its reconcile over",
        Duration::from_secs(10),
        || async {
            if get(c, &svc_path("new-east")).await.is_none() {
                return Err("new-east not written yet".to_owned());
            }
            reconciled(c, second.admin).await
        },
    )
    .await;
    assert!(second.server.shared.mirror.ok_writes() > 0);
    assert_eq!(endpoints_of(c, "api-north").await, ["10.2.0.1", "10.2.0.2"]);
    assert!(
        endpoints_of(c, "db-federated")
            .await
            .contains(&"db-0-north=10.2.2.10".to_owned())
    );
    second.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_linkerd_already_mirrors_is_left_to_linkerd() {
    let s = setup(async |local| {
        // Linkerd's service mirror wrote east's mirrors (no label of ours).
        create_object(
            local,
            service(
                "web-east",
                json!({"mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": "east"}),
                false,
            ),
        )
        .await;
    })
    .await;
    let c = &s.local;
    let server = serve(&s, MirrorSetup::new("a"), |_| {}).await;
    eventually(
        "north mirrored and federated written, that reconcile over",
        Duration::from_secs(10),
        || async {
            if get(c, &svc_path("api-north")).await.is_none()
                || endpoints_of(c, "db-federated").await.is_empty()
            {
                return Err("not written yet".to_owned());
            }
            reconciled(c, server.admin).await
        },
    )
    .await;
    // East's <svc>-east objects are Linkerd's business: db-east is not
    // written, nothing touches web-east; east still counts in db-federated.
    assert!(get(c, &svc_path("db-east")).await.is_none());
    assert_eq!(
        label(
            &get(c, &svc_path("web-east")).await.expect("web-east"),
            "app.kubernetes.io/managed-by"
        ),
        None
    );
    assert!(
        endpoints_of(c, "db-federated")
            .await
            .contains(&"db-0-east=10.1.2.10".to_owned())
    );
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mirror_subcommand_writes_without_serving_dns() {
    let s = setup(async |_| {}).await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_clusterset-dns"))
        .arg("mirror")
        .arg("--kubeconfig")
        .arg(s.sim.cluster("local").expect("local").kubeconfig_path())
        .args(["--local-cluster", "local", "--clusters"])
        .arg(&s.file)
        .args([
            "--admin-addr",
            "127.0.0.1:0",
            "--mirror-namespace",
            "default",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("mirror starts");
    let lines = crate::kubectl::stdout_lines(&mut child);
    let _child = crate::kubectl::Running(child);
    let first = lines
        .recv_timeout(Duration::from_secs(20))
        .expect("prints where it listens");
    assert!(
        first.starts_with("listening admin=127.0.0.1:") && !first.contains("dns="),
        "{first}"
    );
    let c = &s.local;
    eventually(
        "mirrors written by the subcommand",
        Duration::from_secs(15),
        || async {
            !endpoints_of(c, "db-federated").await.is_empty()
                && get(c, &svc_path("api-north")).await.is_some()
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_its_lease_stops_writing_at_once() {
    let s = setup(async |_| {}).await;
    let a = serve(&s, MirrorSetup::new("replica-a"), |_| {}).await;
    let c = &s.local;
    eventually("mirrors written", Duration::from_secs(10), || async {
        !endpoints_of(c, "db-federated").await.is_empty()
    })
    .await;
    assert!(a.server.shared.mirror.is_leader());
    // Someone else takes the Lease (as another replica would after a
    // partition): the old leader must notice and write nothing more.
    let path = "/apis/coordination.k8s.io/v1/namespaces/default/leases/clusterset-dns-mirror";
    let mut lease = get(c, path).await.expect("lease");
    lease["spec"]["holderIdentity"] = json!("intruder");
    lease["spec"]["leaseDurationSeconds"] = json!(60);
    lease["spec"]["renewTime"] = json!(k8s_openapi::jiff::Timestamp::now().to_string());
    let req = http::Request::put(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&lease).expect("json"))
        .expect("request");
    c.request_text(req).await.expect("take the lease");
    eventually("a steps down", Duration::from_secs(2), || async {
        !a.server.shared.mirror.is_leader()
    })
    .await;
    let writes = a.server.shared.mirror.ok_writes();
    export_new_from_east(&s).await;
    // The event reached a's model (the one its mirror derives from): its
    // DNS answers the new name. Nothing was written for it.
    eventually("a answers new-east", Duration::from_secs(5), || async {
        rcode(a.dns, "new-east").await == ResponseCode::NoError
    })
    .await;
    assert_eq!(
        a.server.shared.mirror.ok_writes(),
        writes,
        "wrote without the lease"
    );
    assert!(get(c, &svc_path("new-east")).await.is_none());
    // The intruder lets go: a takes the Lease and writes what it held back,
    // so the mirror had the change and only the Lease stopped it.
    let mut lease = get(c, path).await.expect("lease");
    lease["spec"]["holderIdentity"] = json!("");
    let req = http::Request::put(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&lease).expect("json"))
        .expect("request");
    c.request_text(req).await.expect("release the lease");
    eventually(
        "a leads again and writes",
        Duration::from_secs(5),
        || async {
            a.server.shared.mirror.is_leader() && get(c, &svc_path("new-east")).await.is_some()
        },
    )
    .await;
    a.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_cluster_makes_the_mirror_write_nothing() {
    // The local cluster is a member of db with a ready pod, so db-nearest
    // answers the local tier whatever north's state: a stale member drops
    // a tier (docs/locality.md), and without a local member north's outage
    // would move db-nearest to east alone, by design, as the DNS answer
    // moves (`the_nearest_mirror_follows_the_tier_dns_answers`).
    let s = setup(async |local| {
        create_object(
            local,
            service("db", json!({"mirror.linkerd.io/federated": "member"}), true),
        )
        .await;
        create_object(local, slice("db", "db-1", &[("10.0.2.10", Some("db-0"))])).await;
    })
    .await;
    // The outage is shorter than the federated grace: nothing at all may
    // be written because of it, federated and nearest slices included.
    let server = serve(&s, MirrorSetup::new("a"), |l| {
        l.cluster_timeout = Duration::from_secs(1);
    })
    .await;
    let c = &s.local;
    eventually("mirrored and settled", Duration::from_secs(10), || async {
        if endpoints_of(c, "api-north").await.is_empty() {
            return Err("api-north not written yet".to_owned());
        }
        reconciled(c, server.admin).await
    })
    .await;
    let writes = server.server.shared.mirror.ok_writes();
    let north = s.sim.cluster("north").expect("north").clone();
    north.set_latency(Duration::from_secs(60));
    crate::live::until_report(
        server.admin,
        "north",
        "north unreachable",
        Duration::from_secs(5),
        |r| r["state"] == "unreachable",
    )
    .await;
    // A change elsewhere makes the mirror reconcile from a model where
    // north is unreachable.
    export_new_from_east(&s).await;
    eventually("new-east written", Duration::from_secs(10), || async {
        get(c, &svc_path("new-east")).await.is_some()
    })
    .await;
    let after_change = server.server.shared.mirror.ok_writes();
    assert_eq!(endpoints_of(c, "api-north").await, ["10.2.0.1", "10.2.0.2"]);
    north.set_latency(Duration::ZERO);
    crate::live::until_report(
        server.admin,
        "north",
        "north synced again",
        Duration::from_secs(10),
        |r| r["state"] == "synced",
    )
    .await;
    eventually(
        "settled after the relist",
        Duration::from_secs(10),
        || async { reconciled(c, server.admin).await },
    )
    .await;
    assert!(after_change > writes, "new-east was written");
    assert_eq!(
        endpoints_of(c, "db-nearest").await,
        ["db-0-local=10.0.2.10"]
    );
    assert_eq!(
        server.server.shared.mirror.ok_writes(),
        after_change,
        "north's outage and relist wrote nothing"
    );
    assert_eq!(endpoints_of(c, "api-north").await, ["10.2.0.1", "10.2.0.2"]);
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_local_api_hangs_stops_leading_within_the_renew_deadline() {
    let s = setup(async |_| {}).await;
    // Lease 2 s: renew deadline 1.5 s, retry every 250 ms.
    let a = serve(&s, MirrorSetup::new("replica-a"), |_| {}).await;
    eventually("a leads", Duration::from_secs(10), || async {
        a.server.shared.mirror.is_leader()
    })
    .await;
    let local = s.sim.cluster("local").expect("local").clone();
    let hung = std::time::Instant::now();
    // The local API hangs: nothing refused, nothing answered.
    local.set_latency(Duration::from_secs(60));
    eventually("a steps down", Duration::from_secs(4), || async {
        !a.server.shared.mirror.is_leader()
    })
    .await;
    let stepped_down = hung.elapsed();
    assert!(
        stepped_down <= Duration::from_millis(1500) + Duration::from_secs(1),
        "stepped down after {stepped_down:?}"
    );
    local.set_latency(Duration::ZERO);
    eventually("a leads again", Duration::from_secs(10), || async {
        a.server.shared.mirror.is_leader()
    })
    .await;
    a.server.stop().await;
}

/// The addresses our server answers (A) for `<label>.prod.svc.clusterset.local`.
async fn dns_addrs(dns: SocketAddr, label: &str) -> Vec<String> {
    let name = format!("{label}.{NS}.svc.clusterset.local.");
    let (msg, _) = ask(dns, Proto::Udp, &q(&name, RecordType::A)).await;
    let mut out: Vec<String> = msg
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            hickory_proto::rr::RData::A(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// `db-nearest` answers (and holds) what the DNS name `db-nearest` does:
/// every member while they share a tier, the local member alone while it
/// has a ready pod, the rest again when it has none, east alone while
/// north's watch is broken (a stale member drops a tier); it goes when db
/// stops being federated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nearest_mirror_follows_the_tier_dns_answers() {
    let s = setup(async |_| {}).await;
    let server = serve(&s, MirrorSetup::new("a"), |l| {
        l.cluster_timeout = Duration::from_secs(1);
    })
    .await;
    let c = &s.local;
    let both = [
        "db-0-east=10.1.2.10",
        "db-0-north=10.2.2.10",
        "db-1-east=10.1.2.11",
    ];
    // No place anywhere: east and north are one tier.
    let follows = async |what: &str, want: &[&str], dns: &[&str]| {
        eventually(what, Duration::from_secs(10), || async {
            let (got, answered) = (
                endpoints_of(c, "db-nearest").await,
                dns_addrs(server.dns, "db-nearest").await,
            );
            if got != want || answered != dns {
                return Err(format!("slices {got:?}, DNS {answered:?}"));
            }
            Ok(())
        })
        .await;
    };
    follows(
        "every member",
        &both,
        &["10.1.2.10", "10.1.2.11", "10.2.2.10"],
    )
    .await;
    // Ours, without Linkerd's marker or discovery annotations; headless as
    // the members are.
    let svc = get(c, &svc_path("db-nearest")).await.expect("db-nearest");
    assert_eq!(
        label(&svc, "app.kubernetes.io/managed-by"),
        Some("clusterset-dns")
    );
    assert_eq!(label(&svc, "mirror.linkerd.io/mirrored-service"), None);
    assert_eq!(
        annotation(&svc, "multicluster.linkerd.io/remote-discovery"),
        None
    );
    assert_eq!(svc["spec"]["clusterIP"], json!("None"));

    // A local member with a ready pod: the local tier alone.
    let member = json!({"mirror.linkerd.io/federated": "member"});
    create_object(c, service("db", member, true)).await;
    create_object(c, slice("db", "db-1", &[("10.0.2.10", Some("db-0"))])).await;
    follows("the local tier", &["db-0-local=10.0.2.10"], &["10.0.2.10"]).await;

    // Its pod not ready: the remote members again.
    let body = json!({"endpoints": [
        {"addresses": ["10.0.2.10"], "hostname": "db-0", "conditions": {"ready": false}}]});
    let req = http::Request::patch(format!(
        "/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/db-1"
    ))
    .header("content-type", "application/merge-patch+json")
    .body(serde_json::to_vec(&body).expect("json"))
    .expect("request");
    c.request_text(req).await.expect("not ready");
    follows(
        "the remote tier",
        &both,
        &["10.1.2.10", "10.1.2.11", "10.2.2.10"],
    )
    .await;

    // North unreachable, within the grace: stale, a tier down; east alone.
    let north = s.sim.cluster("north").expect("north").clone();
    north.set_latency(Duration::from_secs(60));
    follows(
        "north demoted",
        &["db-0-east=10.1.2.10", "db-1-east=10.1.2.11"],
        &["10.1.2.10", "10.1.2.11"],
    )
    .await;
    north.set_latency(Duration::ZERO);
    follows(
        "north back",
        &both,
        &["10.1.2.10", "10.1.2.11", "10.2.2.10"],
    )
    .await;

    // db federated nowhere any more: db-nearest and its slices go (east's
    // and north's flat mirrors stay).
    let unfederate = json!({"metadata": {"labels": {"mirror.linkerd.io/federated": null}}});
    for api in [
        c.clone(),
        client(s.sim.cluster("east").expect("east")).await,
        client(&north).await,
    ] {
        let req = http::Request::patch(svc_path("db"))
            .header("content-type", "application/merge-patch+json")
            .body(serde_json::to_vec(&unfederate).expect("json"))
            .expect("request");
        api.request_text(req).await.expect("unfederate");
    }
    eventually("db-nearest deleted", Duration::from_secs(10), || async {
        get(c, &svc_path("db-nearest")).await.is_none()
            && slices_of(c, "db-nearest").await.is_empty()
            && get(c, &svc_path("db-federated")).await.is_none()
    })
    .await;
    assert!(
        get(c, &svc_path("db-east")).await.is_some(),
        "db-east stays"
    );
    server.server.stop().await;
}
