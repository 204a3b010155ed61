//! Every MCS name form (`docs/mcs.md` §2) over the file source, in the
//! CoreDNS table style: each case names a query and the records expected
//! in zone-file text. Three cluster directories: `west` (local, its own
//! ServiceImports), `east` (cluster id `east-1` from its ClusterProperty),
//! `north` (id `east-1` too: `east` was read first and keeps it).

use std::sync::Arc;
use std::time::Instant;

use super::write;
use crate::dns::answer::{Question, Room, answer};
use crate::dns::name::QName;
use crate::dns::wire::{CLASS_IN, Rcode, rtype};
use crate::dns::zonefile::record_text;
use crate::model::cluster::Event;
use crate::model::{Epoch, Model, Settings};
use crate::source::file::{initial_events, load_dir};
use crate::vocab::name::ZoneName;

fn service(ns: &str, name: &str, extra: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n{extra}spec:\n{spec}---\n"
    )
}

fn slice(ns: &str, svc: &str, n: &str, port: (&str, u16), endpoints: &str) -> String {
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {svc}-{n}\n  namespace: {ns}\n  labels:\n    kubernetes.io/service-name: {svc}\naddressType: IPv4\nports:\n- name: {}\n  port: {}\nendpoints:\n{endpoints}---\n",
        port.0, port.1
    )
}

fn export(version: &str, ns: &str, name: &str, created: &str) -> String {
    format!(
        "apiVersion: multicluster.x-k8s.io/{version}\nkind: ServiceExport\nmetadata:\n  name: {name}\n  namespace: {ns}\n  creationTimestamp: '{created}'\n---\n"
    )
}

fn cluster_id(id: &str) -> String {
    format!(
        "apiVersion: about.k8s.io/v1alpha1\nkind: ClusterProperty\nmetadata:\n  name: cluster.clusterset.k8s.io\nspec:\n  value: {id}\n---\n"
    )
}

const CLUSTER_IP: &str =
    "  clusterIP: 10.96.0.10\n  ports:\n  - name: http\n    port: 80\n    targetPort: 8080\n";
const HEADLESS: &str = "  clusterIP: None\n  ports:\n  - name: peer\n    port: 7000\n";
const OLD: &str = "  creationTimestamp: '2026-01-01T00:00:00Z'\n";
const NEW: &str = "  creationTimestamp: '2026-02-01T00:00:00Z'\n";
const FLAT: &str = "  labels:\n    mirror.linkerd.io/exported: remote-discovery\n";
const READY: &str = "  conditions: {ready: true}\n";

/// A Service with one EndpointSlice of `endpoints` (YAML list items) on
/// `port`, and a ServiceExport of `version` when `exported`.
struct Member<'a> {
    name: &'a str,
    meta: &'a str,
    spec: &'a str,
    port: (&'a str, u16),
    endpoints: &'a str,
    export: Option<(&'a str, &'a str)>,
}

impl Member<'_> {
    fn yaml(&self) -> String {
        let mut out = service("prod", self.name, self.meta, self.spec);
        out += &slice("prod", self.name, "a", self.port, self.endpoints);
        if let Some((version, created)) = self.export {
            out += &export(version, "prod", self.name, created);
        }
        out
    }
}

const HTTP: (&str, u16) = ("http", 8080);
const PEER: (&str, u16) = ("peer", 7000);
const OLD_EXPORT: Option<(&str, &str)> = Some(("v1beta1", "2026-01-01T00:00:00Z"));
const NEW_EXPORT: Option<(&str, &str)> = Some(("v1beta1", "2026-02-01T00:00:00Z"));

fn ready(addr: &str, hostname: Option<&str>) -> String {
    let host = hostname.map_or(String::new(), |h| format!("  hostname: {h}\n"));
    format!("- addresses: [{addr}]\n{host}{READY}")
}

/// The zones directory of the table.
fn zones(dir: &std::path::Path) {
    let m = |name, meta, spec, port, endpoints: &str, export| {
        Member {
            name,
            meta,
            spec,
            port,
            endpoints,
            export,
        }
        .yaml()
    };
    let mut west = m(
        "web",
        NEW,
        CLUSTER_IP,
        HTTP,
        &ready("10.1.0.1", None),
        NEW_EXPORT,
    );
    west += "apiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\nmetadata:\n  name: web\n  namespace: prod\nspec:\n  type: ClusterSetIP\n  ips: [10.200.0.1]\n  ports:\n  - name: http\n    port: 80\n---\n";
    let v1alpha1 = Some(("v1alpha1", "2026-02-01T00:00:00Z"));
    west += &m(
        "db",
        NEW,
        HEADLESS,
        PEER,
        &ready("10.1.1.1", Some("db-0")),
        v1alpha1,
    );
    // `api-east`: an MCS service whose name is also east's Linkerd name
    // for `api`, which claims to be older (but west, the local cluster, is
    // senior).
    west += &m(
        "api-east",
        NEW,
        CLUSTER_IP,
        HTTP,
        &ready("10.1.3.1", None),
        NEW_EXPORT,
    );
    // Exported with no Service: nothing to serve.
    west += &export("v1beta1", "prod", "ghost", "2026-02-01T00:00:00Z");

    let mut east = cluster_id("east-1");
    let not_ready = "- addresses: [10.2.0.2]\n  conditions: {ready: false}\n";
    let web = ready("10.2.0.1", None) + not_ready;
    east += &m("web", OLD, CLUSTER_IP, HTTP, &web, OLD_EXPORT);
    let db = ready("10.2.1.1", Some("db-0")) + &ready("10.2.1.2", None);
    east += &m("db", OLD, HEADLESS, PEER, &db, OLD_EXPORT);
    east += &m(
        "cache",
        OLD,
        CLUSTER_IP,
        HTTP,
        &ready("10.2.2.1", None),
        OLD_EXPORT,
    );
    // Linkerd's form only: `api-east`, and no MCS name.
    let flat = format!("{OLD}{FLAT}");
    east += &m(
        "api",
        &flat,
        CLUSTER_IP,
        HTTP,
        &ready("10.2.3.1", None),
        None,
    );
    // Neither: nothing.
    east += &m(
        "solo",
        OLD,
        CLUSTER_IP,
        HTTP,
        &ready("10.2.4.1", None),
        None,
    );

    let mut north = cluster_id("east-1");
    north += &m(
        "db",
        OLD,
        HEADLESS,
        PEER,
        &ready("10.3.1.1", Some("db-0")),
        OLD_EXPORT,
    );

    write(dir, "west/all.yaml", &west);
    write(dir, "east/all.yaml", &east);
    write(dir, "north/all.yaml", &north);
}

/// The model of zones directory `dir` (local cluster `west`), MCS on or
/// off. Directories are announced in name order, as the file source does:
/// `east` is known before `north` and keeps the id both claim.
fn model_of(dir: &std::path::Path, mcs: bool) -> Model {
    model_with(dir, mcs, Some)
}

/// [`model_of`] with each of the load's events passed through `edit`
/// first (`None` drops it).
fn model_with(dir: &std::path::Path, mcs: bool, edit: impl Fn(Event) -> Option<Event>) -> Model {
    let load = load_dir(dir, Some("west"), &Default::default()).expect("zones");
    let mut settings = Settings::new(ZoneName::new("clusterset.local").expect("zone"));
    settings.mcs = mcs;
    let now = Instant::now();
    let epoch = Epoch::new(now, std::time::SystemTime::now());
    let mut model = Model::new(Arc::new(settings), epoch);
    model.apply(
        load.clusters
            .iter()
            .flat_map(initial_events)
            .filter_map(edit),
        now,
    );
    model.clusters_known(now);
    model
}

/// The model of the table's directory.
fn model(mcs: bool) -> Model {
    let tmp = tempfile::tempdir().expect("tempdir");
    zones(tmp.path());
    model_of(tmp.path(), mcs)
}

fn snapshot(mcs: bool) -> Arc<crate::model::Snapshot> {
    model(mcs).snapshot()
}

/// (rcode, answer records, additional records) in zone-file text, sorted.
fn ask(
    snap: &crate::model::Snapshot,
    qname: &str,
    qtype: u16,
) -> (Rcode, Vec<String>, Vec<String>) {
    let name = QName::from_text(qname).expect("qname");
    let q = Question {
        name: &name,
        qtype,
        qclass: CLASS_IN,
        room: Room::Whole,
    };
    let a = answer(snap, q, 0, Instant::now()).answer;
    let text = |records: &[crate::dns::wire::Record]| {
        let mut v: Vec<String> = records
            .iter()
            .map(|r| {
                record_text(qname, r)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        v.sort();
        v
    };
    (a.rcode, text(&a.answers), text(&a.additional))
}

const Z: &str = "prod.svc.clusterset.local.";

#[test]
fn every_mcs_name_form() {
    use rtype::{A, SRV};
    let snap = snapshot(true);
    let ok = Rcode::NoError;
    // (what, query, type, rcode, answer records)
    let cases: Vec<(&str, String, u16, Rcode, Vec<String>)> = vec![
        (
            "ClusterSetIP: the local ServiceImport's ips, not endpoints",
            format!("web.{Z}"),
            A,
            ok,
            vec![format!("web.{Z} 5 IN A 10.200.0.1")],
        ),
        (
            "ClusterSetIP bare-name SRV: one per service port, target the name",
            format!("web.{Z}"),
            SRV,
            ok,
            vec![format!("web.{Z} 5 IN SRV 0 100 80 web.{Z}")],
        ),
        (
            "ClusterSetIP _port._proto SRV",
            format!("_http._tcp.web.{Z}"),
            SRV,
            ok,
            vec![format!("_http._tcp.web.{Z} 5 IN SRV 0 100 80 web.{Z}")],
        ),
        (
            "ClusterSetIP with no ServiceImport: SRV gives the endpoints' port (they are the answer)",
            format!("cache.{Z}"),
            SRV,
            ok,
            vec![format!("cache.{Z} 5 IN SRV 0 100 8080 cache.{Z}")],
        ),
        (
            "ClusterSetIP with no ServiceImport: the ready endpoints of every exporting cluster",
            format!("cache.{Z}"),
            A,
            ok,
            vec![format!("cache.{Z} 5 IN A 10.2.2.1")],
        ),
        (
            "Headless: every ready endpoint, north left out (its id is east's)",
            format!("db.{Z}"),
            A,
            ok,
            vec![
                format!("db.{Z} 5 IN A 10.1.1.1"),
                format!("db.{Z} 5 IN A 10.2.1.1"),
                format!("db.{Z} 5 IN A 10.2.1.2"),
            ],
        ),
        (
            "Headless bare-name SRV: one per endpoint and port, <hostname>.<clusterid> targets, dashed IP without a hostname",
            format!("db.{Z}"),
            SRV,
            ok,
            vec![
                format!("db.{Z} 5 IN SRV 0 33 7000 10-2-1-2.east-1.db.{Z}"),
                format!("db.{Z} 5 IN SRV 0 33 7000 db-0.east-1.db.{Z}"),
                format!("db.{Z} 5 IN SRV 0 33 7000 db-0.west.db.{Z}"),
            ],
        ),
        (
            "per-pod name under the cluster id",
            format!("db-0.east-1.db.{Z}"),
            A,
            ok,
            vec![format!("db-0.east-1.db.{Z} 5 IN A 10.2.1.1")],
        ),
        (
            "per-pod dashed-IP name",
            format!("10-2-1-2.east-1.db.{Z}"),
            A,
            ok,
            vec![format!("10-2-1-2.east-1.db.{Z} 5 IN A 10.2.1.2")],
        ),
        (
            "per-pod name of the local cluster (no ClusterProperty: its name is its id)",
            format!("db-0.west.db.{Z}"),
            A,
            ok,
            vec![format!("db-0.west.db.{Z} 5 IN A 10.1.1.1")],
        ),
        (
            "<clusterid>.<svc> never has an address: NODATA above its pods",
            format!("east-1.db.{Z}"),
            A,
            ok,
            vec![],
        ),
        (
            "a cluster's name is not its id",
            format!("db-0.east.db.{Z}"),
            A,
            Rcode::NxDomain,
            vec![],
        ),
        (
            "no <hostname>-<cluster> alias in MCS",
            format!("db-0-east-1.db.{Z}"),
            A,
            Rcode::NxDomain,
            vec![],
        ),
        (
            "the <clusterid>.<svc> of a ClusterSetIP service does not exist",
            format!("east-1.web.{Z}"),
            A,
            Rcode::NxDomain,
            vec![],
        ),
        (
            "no MCS name for a Linkerd-labelled service",
            format!("api.{Z}"),
            A,
            Rcode::NxDomain,
            vec![],
        ),
        (
            "no Linkerd form for an MCS export",
            format!("web-east.{Z}"),
            A,
            Rcode::NxDomain,
            vec![],
        ),
        (
            "same name in both forms: the senior cluster's Service wins (the local MCS api-east, though east dates its Linkerd api older)",
            format!("api-east.{Z}"),
            A,
            ok,
            vec![format!("api-east.{Z} 5 IN A 10.1.3.1")],
        ),
        (
            "neither exported nor labelled",
            format!("solo.{Z}"),
            A,
            Rcode::NxDomain,
            vec![],
        ),
        (
            "a ServiceExport without its Service",
            format!("ghost.{Z}"),
            A,
            Rcode::NxDomain,
            vec![],
        ),
    ];
    for (what, qname, qtype, rcode, want) in cases {
        let (got_rcode, got, _) = ask(&snap, &qname, qtype);
        assert_eq!(got_rcode, rcode, "{what}: {qname} rcode");
        let want: Vec<String> = {
            let mut w: Vec<String> = want
                .iter()
                .map(|r| r.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect();
            w.sort();
            w
        };
        assert_eq!(got, want, "{what}: {qname}");
    }
    assert_eq!(snap.stats.collisions, 1, "api-east: one loser");
}

#[test]
fn headless_srv_carries_the_targets_addresses() {
    let snap = snapshot(true);
    let (_, _, additional) = ask(&snap, &format!("db.{Z}"), rtype::SRV);
    assert_eq!(
        additional,
        [
            format!("10-2-1-2.east-1.db.{Z} 5 IN A 10.2.1.2"),
            format!("db-0.east-1.db.{Z} 5 IN A 10.2.1.1"),
            format!("db-0.west.db.{Z} 5 IN A 10.1.1.1"),
        ]
    );
}

#[test]
fn without_mcs_no_mcs_name_exists() {
    let snap = snapshot(false);
    for name in ["web", "db", "cache", "db-0.east-1.db"] {
        let (rcode, answers, _) = ask(&snap, &format!("{name}.{Z}"), rtype::A);
        assert_eq!((rcode, answers.len()), (Rcode::NxDomain, 0), "{name}");
    }
    // Linkerd's names are as they were.
    let (rcode, answers, _) = ask(&snap, &format!("api-east.{Z}"), rtype::A);
    assert_eq!(
        (rcode, answers),
        (
            Rcode::NoError,
            vec![format!("api-east.{Z} 5 IN A 10.2.3.1")]
        )
    );
}

#[test]
fn a_new_cluster_id_moves_the_pod_names_and_hands_the_old_one_over() {
    use crate::model::Event;
    let mut m = model(true);
    m.apply(
        [Event::ClusterIdApplied {
            cluster: "east".into(),
            id: Some("e2".into()),
        }],
        Instant::now(),
    );
    let snap = m.snapshot();
    let a = |name: &str| ask(&snap, &format!("{name}.{Z}"), rtype::A);
    assert_eq!(
        a("db-0.e2.db").1,
        [format!("db-0.e2.db.{Z} 5 IN A 10.2.1.1")]
    );
    // north now holds `east-1` alone, so it joins the union under it.
    assert_eq!(
        a("db-0.east-1.db").1,
        [format!("db-0.east-1.db.{Z} 5 IN A 10.3.1.1")]
    );
    assert_eq!(a("db").1.len(), 4, "west, east and north");
}

#[test]
fn removing_a_serviceexport_from_the_files_takes_the_name_away() {
    use crate::source::file::{diff, load_cluster};
    let tmp = tempfile::tempdir().expect("tempdir");
    zones(tmp.path());
    let load = load_dir(tmp.path(), Some("west"), &Default::default()).expect("zones");
    let mut m = model_of(tmp.path(), true);
    let now = Instant::now();
    assert_eq!(
        ask(&m.snapshot(), &format!("cache.{Z}"), rtype::A).0,
        Rcode::NoError
    );

    let path = tmp.path().join("east/all.yaml");
    let text = std::fs::read_to_string(&path).expect("read");
    let without = text.replace(
        &export("v1beta1", "prod", "cache", "2026-01-01T00:00:00Z"),
        "",
    );
    assert_ne!(text, without, "the export was in the file");
    std::fs::write(&path, without).expect("write");
    let east = load
        .clusters
        .iter()
        .find(|c| &*c.name == "east")
        .expect("east");
    let reloaded = load_cluster(
        &crate::source::file::ClusterDir {
            name: east.name.clone(),
            path: east.path.clone(),
        },
        false,
        &crate::vocab::trust::Trust::default(),
    );
    m.apply(diff(&east.name, &east.objects, &reloaded.objects), now);
    let snap = m.snapshot();
    assert_eq!(
        ask(&snap, &format!("cache.{Z}"), rtype::A).0,
        Rcode::NxDomain
    );
    assert_eq!(
        ask(&snap, &format!("web.{Z}"), rtype::A).0,
        Rcode::NoError,
        "the others stay"
    );
}

#[test]
fn before_a_cluster_syncs_any_name_could_be_an_mcs_export() {
    use crate::model::Event;
    let mut m = model(true);
    m.apply(
        [Event::ClusterUp {
            cluster: "late".into(),
            local: false,
        }],
        Instant::now(),
    );
    let snap = m.snapshot();
    assert_eq!(
        ask(&snap, &format!("nothing.{Z}"), rtype::A).0,
        Rcode::ServFail
    );
    let mut off = model(false);
    off.apply(
        [Event::ClusterUp {
            cluster: "late".into(),
            local: false,
        }],
        Instant::now(),
    );
    let snap = off.snapshot();
    assert_eq!(
        ask(&snap, &format!("nothing.{Z}"), rtype::A).0,
        Rcode::NxDomain,
        "without MCS only a name ending in -late could be late's"
    );
}

#[test]
fn the_demo_serves_the_mcs_names_its_table_lists() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("zones/demo");
    let load = load_dir(&dir, Some("west"), &Default::default()).expect("the demo");
    for c in &load.clusters {
        assert_eq!(c.problems, [], "{}: no problem in the demo", c.name);
    }
    let snap = model_of(&dir, true).snapshot();
    let z = "svc.clusterset.local.";
    let ask = |name: &str, qtype| ask(&snap, &format!("{name}.{z}"), qtype);
    assert_eq!(
        ask("payments.shop", rtype::A).1,
        [format!("payments.shop.{z} 5 IN A 10.96.30.5")]
    );
    assert_eq!(
        ask("payments.shop", rtype::SRV).1,
        [
            format!("payments.shop.{z} 5 IN SRV 0 50 80 payments.shop.{z}"),
            format!("payments.shop.{z} 5 IN SRV 0 50 9090 payments.shop.{z}"),
        ]
    );
    assert_eq!(ask("db.data", rtype::A).1.len(), 9);
    let peers = ask("_peer._tcp.db.data", rtype::SRV).1;
    assert_eq!(peers.len(), 9);
    assert!(peers.iter().all(|r| r.contains(" 7000 db-")), "{peers:?}");
    assert!(
        peers
            .iter()
            .any(|r| r.ends_with(&format!("db-0.south-eu.db.data.{z}")))
    );
    assert_eq!(
        ask("db-0.south-eu.db.data", rtype::A).1,
        [format!("db-0.south-eu.db.data.{z} 5 IN A 10.40.30.10")]
    );
    assert_eq!(ask("south-eu.db.data", rtype::A).0, Rcode::NoError);
    assert_eq!(ask("south-eu.db.data", rtype::A).1.len(), 0, "NODATA");
    assert_eq!(ask("db-0.south.db.data", rtype::A).0, Rcode::NxDomain);
}

#[test]
fn conflicts_are_counted_and_the_senior_export_decides() {
    use crate::model::Event;
    use crate::model::objects::{ObjectKey, Port, Protocol};
    let mut m = model(true);
    let snap = m.snapshot();
    assert_eq!(snap.stats.mcs_id_conflicts, 1, "north's id is east's");
    assert_eq!(snap.stats.mcs_conflicts, 0);
    // east's web redefines port http, and dates its export 1970 (what a
    // compromised API server can write): west, the local cluster, is
    // senior all the same.
    let mut web = m
        .clusters()
        .get("east")
        .and_then(|c| c.services.get(&ObjectKey::new("prod", "web")))
        .cloned()
        .expect("east/web");
    web.ports = vec![Port {
        name: Some("http".into()),
        protocol: Protocol::Tcp,
        port: 81,
    }];
    web.created = 0;
    web.mcs = Some(0);
    m.apply(
        [Event::ServiceApplied {
            cluster: "east".into(),
            service: web,
        }],
        Instant::now(),
    );
    let snap = m.snapshot();
    assert_eq!(snap.stats.mcs_conflicts, 1);
    assert_eq!(
        ask(&snap, &format!("web.{Z}"), rtype::SRV).1,
        [format!("web.{Z} 5 IN SRV 0 100 80 web.{Z}")],
        "west's export is senior: its port 80 is served"
    );
    // The local ServiceImport says our controller defined the service
    // from east's export: east's definition is served, as in every
    // cluster whose controller saw east's export first.
    let import = m
        .clusters()
        .get("west")
        .and_then(|c| c.imports.get(&ObjectKey::new("prod", "web")))
        .cloned()
        .expect("west's import of web");
    m.apply(
        [Event::ImportApplied {
            cluster: "west".into(),
            import: crate::model::objects::Import {
                defined_by: Some("east".into()),
                ..import
            },
        }],
        Instant::now(),
    );
    let snap = m.snapshot();
    assert_eq!(snap.stats.mcs_conflicts, 1);
    assert_eq!(
        ask(&snap, &format!("web.{Z}"), rtype::SRV).1,
        [format!("web.{Z} 5 IN SRV 0 100 81 web.{Z}")],
        "east defines the import: its port 81 is served"
    );
    m.apply(
        [Event::ClusterIdApplied {
            cluster: "north".into(),
            id: Some("north".into()),
        }],
        Instant::now(),
    );
    assert_eq!(m.snapshot().stats.mcs_id_conflicts, 0);
}

#[test]
fn a_linked_clusters_serviceimports_are_skipped_without_a_problem() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let import = "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceImport\nmetadata:\n  name: web\n  namespace: prod\nspec:\n  type: ClusterSetIP\n  ips: [10.200.0.9]\n";
    write(tmp.path(), "east/import.yaml", import);
    write(tmp.path(), "west/import.yaml", import);
    let load = load_dir(tmp.path(), Some("west"), &Default::default()).expect("zones");
    for c in &load.clusters {
        assert_eq!(c.problems, [], "{}", c.name);
        let held = c.objects.imports.len();
        let skipped: u64 = c.skipped.values().sum();
        match &*c.name {
            "west" => assert_eq!(
                (held, skipped),
                (1, 0),
                "the local cluster's import is read"
            ),
            _ => assert_eq!((held, skipped), (0, 1), "east's is its own controller's"),
        }
    }
}

#[test]
fn a_change_in_one_member_reuses_the_others_parts_under_their_ids() {
    use crate::model::Event;
    use crate::model::objects::ObjectKey;
    let mut m = model(true);
    let east_part = |snap: &crate::model::Snapshot| {
        let entry = snap.entries.get("db.prod").expect("db.prod").clone();
        let part = entry
            .parts
            .iter()
            .find(|p| &*p.cluster == "east-1")
            .expect("east's part under its id")
            .clone();
        (entry, part)
    };
    let (_, before) = east_part(&m.snapshot());
    let west = m.clusters().get("west").expect("west");
    let mut slice = west
        .slices_of(&ObjectKey::new("prod", "db"))
        .next()
        .expect("west's db slice")
        .clone();
    let mut endpoints = slice.endpoints.to_vec();
    endpoints[0].ready = false;
    slice.endpoints = endpoints.into();
    m.apply(
        [Event::SliceApplied {
            cluster: "west".into(),
            slice,
            trigger: None,
        }],
        Instant::now(),
    );
    let (entry, after) = east_part(&m.snapshot());
    assert!(
        !entry.parts.iter().any(|p| &*p.cluster == "west"),
        "west's only pod is not ready any more"
    );
    assert!(
        Arc::ptr_eq(&before, &after),
        "east's part under east-1 is the one built before, not a new copy"
    );
}

#[test]
fn a_pod_name_of_a_member_its_budget_refused_is_servfail_under_its_cluster_id() {
    let tmp = tempfile::tempdir().expect("tempdir");
    zones(tmp.path());
    // east's `db` refused, as the source sends it: flagged, slices withheld.
    let refused = |cluster: &str, svc: &str| cluster == "east" && svc == "db";
    let snap = model_with(tmp.path(), true, |e| match e {
        Event::SliceApplied { cluster, .. } if refused(&cluster, "db") => None,
        Event::ServiceApplied {
            cluster,
            mut service,
        } => {
            service.refused = refused(&cluster, &service.key.name);
            Some(Event::ServiceApplied { cluster, service })
        }
        other => Some(other),
    })
    .snapshot();
    assert_eq!(
        ask(&snap, &format!("db-0.east-1.db.{Z}"), rtype::A).0,
        Rcode::ServFail,
        "east's pods are named under its id east-1, not its name"
    );
    assert_eq!(
        ask(&snap, &format!("db.{Z}"), rtype::A),
        (
            Rcode::NoError,
            vec![format!("db.{Z} 5 IN A 10.1.1.1")],
            vec![]
        ),
        "the union leaves the refused member out"
    );
    assert_eq!(
        ask(&snap, &format!("db-0.west.db.{Z}"), rtype::A).1,
        vec![format!("db-0.west.db.{Z} 5 IN A 10.1.1.1")],
        "a held member's pods answer"
    );
}
