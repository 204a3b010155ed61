//! The mirror controller as an MCS controller (`--mcs --mirror`, issue 18
//! item 4) over kubesim: east and north export `db` through ServiceExports
//! (east's ClusterProperty names it `east-eu`); the controller writes the
//! derived Service `derived-db` (kubesim allocates its ClusterIP), one
//! EndpointSlice per member labelled with its cluster id, and the
//! ServiceImport `db` whose `ips` is that ClusterIP; everything is read back
//! through kubectl, as a user (or CoreDNS's `multicluster`) sees it. A
//! member that stops exporting takes exactly its slices with it; restarted
//! without `--mcs`, the controller deletes the import, the derived Service
//! and its slices. With the local cluster's zone configured, its member
//! slices carry that zone and a hint for it; a reload moves them.
//!
//! Every wait is a bounded poll; everything listens and dials on loopback.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::kubectl::kubectl;
use crate::kubesim_api::{client, sim};
use crate::live::{NS, a, clusters_file, fqdn};
use crate::support::{Links, Live, MirrorSetup, Options, create_object, eventually, start_live};
use clusterset_dns::vocab::place::Place;

const MCS: &str = "multicluster.x-k8s.io/v1beta1";

/// `kubectl get <args> -o json` against `kubeconfig`, off the runtime's
/// threads; `None` when kubectl fails (the object is not there yet).
async fn get_json(kubeconfig: &Path, args: &[&str]) -> Option<Value> {
    let kubeconfig = kubeconfig.to_owned();
    let mut all: Vec<String> = vec!["get".into(), "-n".into(), NS.into()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    all.extend(["-o".into(), "json".into()]);
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        let (ok, out, _) = kubectl(&kubeconfig, &args);
        ok.then(|| serde_json::from_str(&out).ok()).flatten()
    })
    .await
    .expect("kubectl thread")
}

/// `db` with port `pg` in `c`, one ready pod at `ip`, and its ServiceExport.
async fn export_db(c: &kube::Client, ip: &str) {
    create_object(
        c,
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "db", "namespace": NS},
               "spec": {"ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}}),
    )
    .await;
    create_object(
        c,
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "db-1", "namespace": NS,
                            "labels": {"kubernetes.io/service-name": "db"}},
               "addressType": "IPv4",
               "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
               "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}]}),
    )
    .await;
    create_object(
        c,
        json!({"apiVersion": MCS, "kind": "ServiceExport",
               "metadata": {"name": "db", "namespace": NS}}),
    )
    .await;
}

fn label<'v>(v: &'v Value, key: &str) -> Option<&'v str> {
    v["metadata"]["labels"][key].as_str()
}

/// `(source-cluster, addresses)` of every slice of the MCS service `db`.
async fn member_slices(kubeconfig: &Path) -> BTreeSet<(String, String)> {
    let list = get_json(
        kubeconfig,
        &[
            "endpointslices",
            "-l",
            "multicluster.kubernetes.io/service-name=db",
        ],
    )
    .await;
    let items = list.as_ref().and_then(|l| l["items"].as_array().cloned());
    items
        .unwrap_or_default()
        .iter()
        .map(|s| {
            let id = label(s, "multicluster.kubernetes.io/source-cluster").unwrap_or("");
            let addrs: Vec<&str> = s["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["addresses"][0].as_str())
                .collect();
            (id.to_owned(), addrs.join(","))
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// The derived Service and the ServiceImport once its `ips` are filled.
async fn imported(kubeconfig: &Path) -> (Value, Value) {
    let found = std::sync::Mutex::new(None);
    eventually(
        "db imported with its ClusterIP",
        Duration::from_secs(10),
        || async {
            let derived = get_json(kubeconfig, &["service", "derived-db"]).await;
            let import = get_json(kubeconfig, &["serviceimports", "db"]).await;
            match (derived, import) {
                (Some(d), Some(i)) if i["spec"]["ips"].is_array() => {
                    *found.lock().expect("lock") = Some((d, i));
                    true
                }
                _ => false,
            }
        },
    )
    .await;
    found.into_inner().expect("lock").expect("found")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcs_mirror_objects_read_back_through_kubectl() {
    let (sim, dir) = sim(&["local", "east", "north"], |_| {}).await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster");
    let (local, east, north) = (
        client(cluster("local")).await,
        client(cluster("east")).await,
        client(cluster("north")).await,
    );
    export_db(&east, "10.1.0.1").await;
    export_db(&north, "10.2.0.1").await;
    create_object(
        &east,
        json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
               "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": "east-eu"}}),
    )
    .await;
    create_object(
        &local,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await;
    let file = clusters_file(dir.path(), &[cluster("east"), cluster("north")]);
    let kubeconfig: PathBuf = cluster("local").kubeconfig_path().to_owned();
    let mut live = Live::new(&kubeconfig, Links::File(file.clone()));
    live.mirror = Some(MirrorSetup::new("a"));
    let options = Options {
        local: Some("local"),
        mcs: true,
        ..Options::default()
    };
    let server = start_live(options, live).await;

    let (derived, import) = imported(&kubeconfig).await;
    // The derived Service: ours, selector-less, the union port, a ClusterIP
    // kubesim allocated.
    assert_eq!(
        label(&derived, "app.kubernetes.io/managed-by"),
        Some("clusterset-dns")
    );
    assert_eq!(
        label(&derived, "multicluster.kubernetes.io/service-name"),
        Some("db")
    );
    assert!(derived["spec"]["selector"].is_null(), "{derived}");
    assert_eq!(derived["spec"]["ports"][0]["name"], "pg");
    assert_eq!(derived["spec"]["ports"][0]["port"], 5432);
    let cluster_ips = derived["spec"]["clusterIPs"].clone();
    assert!(
        cluster_ips[0].as_str().is_some_and(|ip| ip != "None"),
        "{derived}"
    );
    // The ServiceImport: ClusterSetIP, the union ports, ips = that ClusterIP.
    assert_eq!(import["apiVersion"], MCS);
    assert_eq!(import["spec"]["type"], "ClusterSetIP");
    assert_eq!(import["spec"]["ips"], cluster_ips);
    assert_eq!(
        import["spec"]["ports"],
        json!([{"name": "pg", "port": 5432, "protocol": "TCP"}])
    );
    assert_eq!(
        label(&import, "app.kubernetes.io/managed-by"),
        Some("clusterset-dns")
    );

    // One slice set per member, by its cluster id, feeding derived-db.
    eventually("both members' slices", Duration::from_secs(5), || async {
        member_slices(&kubeconfig).await == pairs(&[("east-eu", "10.1.0.1"), ("north", "10.2.0.1")])
    })
    .await;
    let slices = get_json(
        &kubeconfig,
        &[
            "endpointslices",
            "-l",
            "multicluster.kubernetes.io/source-cluster=east-eu",
        ],
    )
    .await
    .expect("east's slice");
    let s = &slices["items"][0];
    assert_eq!(label(s, "kubernetes.io/service-name"), Some("derived-db"));
    assert_eq!(
        label(s, "endpointslice.kubernetes.io/managed-by"),
        Some("clusterset-dns.io/mirror")
    );
    assert_eq!(
        label(s, "app.kubernetes.io/managed-by"),
        Some("clusterset-dns")
    );
    assert_eq!(
        s["ports"],
        json!([{"name": "pg", "port": 5432, "protocol": "TCP"}])
    );

    // The server reads the import back: the clusterset name answers its IP.
    let want: BTreeSet<String> = cluster_ips
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip.as_str().map(str::to_owned))
        .collect();
    eventually(
        "db answers the ClusterSetIP",
        Duration::from_secs(5),
        || async { a(server.dns, &fqdn("db")).await.1 == want },
    )
    .await;

    // North stops exporting: its slices go, east's and the import stay.
    let req = http::Request::delete(format!("/apis/{MCS}/namespaces/{NS}/serviceexports/db"))
        .body(Vec::new())
        .expect("request");
    north.request_text(req).await.expect("unexport");
    eventually("north's slices deleted", Duration::from_secs(5), || async {
        member_slices(&kubeconfig).await == pairs(&[("east-eu", "10.1.0.1")])
    })
    .await;
    let import = get_json(&kubeconfig, &["serviceimports", "db"])
        .await
        .expect("import stays");
    assert_eq!(import["spec"]["ips"], cluster_ips);
    server.server.stop().await;

    // Restarted without --mcs: the import, the derived Service and its
    // slices go; the user's ServiceExports stay.
    let mut live = Live::new(&kubeconfig, Links::File(file));
    live.mirror = Some(MirrorSetup::new("a"));
    let options = Options {
        local: Some("local"),
        ..Options::default()
    };
    let server = start_live(options, live).await;
    eventually(
        "the import, derived-db and its slices deleted",
        Duration::from_secs(10),
        || async {
            get_json(&kubeconfig, &["serviceimports", "db"])
                .await
                .is_none()
                && get_json(&kubeconfig, &["service", "derived-db"])
                    .await
                    .is_none()
                && member_slices(&kubeconfig).await.is_empty()
        },
    )
    .await;
    assert!(
        get_json(cluster("east").kubeconfig_path(), &["serviceexports", "db"])
            .await
            .is_some(),
        "east's ServiceExport stays"
    );
    server.server.stop().await;
}

/// `(source-cluster, endpoints)` of every slice of the MCS service `db`:
/// the endpoints as written, zone and hints included.
async fn member_endpoints(kubeconfig: &Path) -> Vec<(String, Value)> {
    let list = get_json(
        kubeconfig,
        &[
            "endpointslices",
            "-l",
            "multicluster.kubernetes.io/service-name=db",
        ],
    )
    .await;
    let items = list.as_ref().and_then(|l| l["items"].as_array().cloned());
    let mut out: Vec<(String, Value)> = items
        .unwrap_or_default()
        .iter()
        .map(|s| {
            let id = label(s, "multicluster.kubernetes.io/source-cluster").unwrap_or("");
            (id.to_owned(), s["endpoints"].clone())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// One ready endpoint at `ip`, in `zone` (with its hint) when known.
fn zoned(ip: &str, zone: Option<&str>) -> Value {
    let mut e = json!({"addresses": [ip], "conditions": {"ready": true}});
    if let Some(z) = zone {
        e["zone"] = json!(z);
        e["hints"] = json!({"forZones": [{"name": z}]});
    }
    json!([e])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcs_member_slices_carry_their_clusters_zone_where_known() {
    let (sim, dir) = sim(&["local", "east"], |_| {}).await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster");
    let (local, east) = (
        client(cluster("local")).await,
        client(cluster("east")).await,
    );
    create_object(
        &local,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await;
    export_db(&local, "10.0.0.1").await;
    export_db(&east, "10.1.0.1").await;
    let file = clusters_file(dir.path(), &[cluster("east")]);
    let kubeconfig: PathBuf = cluster("local").kubeconfig_path().to_owned();
    let mut live = Live::new(&kubeconfig, Links::File(file));
    live.mirror = Some(MirrorSetup::new("a"));
    // `--region eu --topology-zone eu-1a`; east's place is unknown.
    let place = |zone| Place::parse(Some("eu"), Some(zone)).expect("place");
    let options = Options {
        local: Some("local"),
        mcs: true,
        place: place("eu-1a"),
        ..Options::default()
    };
    let server = start_live(options, live).await;
    // As kube-apiserver keeps them (kubesim validates the hints as it does).
    let want = |zone| {
        vec![
            ("east".to_owned(), zoned("10.1.0.1", None)),
            ("local".to_owned(), zoned("10.0.0.1", Some(zone))),
        ]
    };
    eventually(
        "the local member's slice in its zone, east's in none",
        Duration::from_secs(10),
        || async { member_endpoints(&kubeconfig).await == want("eu-1a") },
    )
    .await;

    // A reloaded zone is written into the slices.
    let handle = server.server.settings_handle();
    let mut settings = (*handle.get()).clone();
    settings.local_place = place("eu-1b");
    handle.set(std::sync::Arc::new(settings));
    eventually(
        "the local member's slice in the reloaded zone",
        Duration::from_secs(10),
        || async { member_endpoints(&kubeconfig).await == want("eu-1b") },
    )
    .await;
    server.server.stop().await;
}
