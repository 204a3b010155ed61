//! Table tests in the CoreDNS plugin style: each case names its input (a
//! clusterset built from model events) and every object it must produce,
//! written out field by field as docs/linkerd.md §3 lists them.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::mirror::fixtures::json as to_json;
use crate::model::cluster::{Dirty, Event, Health};
use crate::model::objects::{Gateway, Mirror, Protocol};
use crate::model::testing::{c, port, service, slice, slice_event, svc_event, up};

const GW_ID: &str =
    "linkerd-gateway.linkerd-multicluster.serviceaccount.identity.linkerd.cluster.local";

/// One case: a name, the events building the clusterset, a settings tweak,
/// every object expected (any order) and the problems expected (object
/// name, part of the message).
struct Case {
    name: &'static str,
    events: Vec<Event>,
    settings: fn(&mut MirrorSettings),
    want: Vec<Value>,
    problems: Vec<(&'static str, &'static str)>,
}

fn defaults(_: &mut MirrorSettings) {}

/// Time of every case: broken watches are dated against it.
fn base() -> Instant {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// `now` in every case: 100 s after [`base`].
fn now() -> Instant {
    base() + Duration::from_secs(100)
}

fn build(events: Vec<Event>) -> ClusterSet {
    let mut set = ClusterSet::new();
    let mut dirty = Dirty::default();
    for e in events {
        set.apply(e, &mut dirty);
    }
    set
}

fn run(case: &Case) -> (Vec<Desired>, Vec<Problem>) {
    let set = build(case.events.clone());
    let mut settings = MirrorSettings::new("west", now());
    (case.settings)(&mut settings);
    desired(&set, &settings)
}

fn sort_key(v: &Value) -> (String, String, String) {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    (s("/kind"), s("/metadata/namespace"), s("/metadata/name"))
}

/// Invariants every output must hold, whatever the case.
fn check_invariants(case: &str, got: &[Desired]) {
    let services: BTreeSet<(String, String)> = got
        .iter()
        .filter(|d| d.key.kind == Kind::Service)
        .map(|d| (d.key.namespace.to_string(), d.key.name.to_string()))
        .collect();
    let mut prev: Option<&ObjectRef> = None;
    for d in got {
        let o = &to_json(&d.object);
        let at = format!("{case}: {}", d.key);
        assert!(prev < Some(&d.key), "{at}: output not sorted by key");
        prev = Some(&d.key);
        assert_eq!(o["kind"], d.key.kind.as_str(), "{at}");
        assert_eq!(o["metadata"]["name"], &*d.key.name, "{at}");
        assert_eq!(o["metadata"]["namespace"], &*d.key.namespace, "{at}");
        let labels = &o["metadata"]["labels"];
        assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY, "{at}");
        assert_eq!(
            labels[CLUSTER_LABEL].as_str(),
            d.cluster.as_deref(),
            "{at}: cluster label vs Desired::cluster"
        );
        match d.key.kind {
            Kind::Service => assert!(d.key.name.len() <= 63, "{at}: name too long"),
            Kind::EndpointSlice => {
                assert!(d.key.name.len() <= 253, "{at}: name too long");
                let eps = o["endpoints"].as_array().map_or(0, Vec::len);
                assert!(
                    (1..=MAX_ENDPOINTS_PER_SLICE).contains(&eps),
                    "{at}: {eps} endpoints"
                );
                assert_eq!(labels[LABEL_SLICE_MANAGED_BY], SLICE_MANAGED_BY, "{at}");
                let svc = labels[LABEL_SERVICE_NAME].as_str().unwrap_or("");
                assert!(
                    services.contains(&(d.key.namespace.to_string(), svc.to_owned())),
                    "{at}: slice of a Service not in the output"
                );
            }
            Kind::ServiceImport => {
                let derived = mcs::derived_name(&d.key.name);
                assert!(
                    services.contains(&(d.key.namespace.to_string(), derived)),
                    "{at}: import without its derived Service"
                );
            }
        }
    }
}

/// Applies the case's events one at a time, keeping a [`DesiredState`] up
/// to date from each batch's `Dirty`, and compares it after every event
/// with [`desired`] computed from scratch: objects equal, problems equal
/// as sets, refused names equal.
fn check_incremental(case: &Case) {
    let mut settings = MirrorSettings::new("west", now());
    (case.settings)(&mut settings);
    incremental_equals_full(case.name, &case.events, &settings);
}

/// See [`check_incremental`].
fn incremental_equals_full(name: &str, events: &[Event], settings: &MirrorSettings) {
    let settings = settings.clone();
    let mut set = ClusterSet::new();
    let mut state = DesiredState::default();
    for (i, e) in events.iter().enumerate() {
        let before = set.clone();
        let objects_before = state.objects().clone();
        let mut dirty = Dirty::default();
        set.apply(e.clone(), &mut dirty);
        let keys = DesiredState::keys_of(&dirty, &before, &set);
        let touched = state.update(&set, keys, &settings);
        let (want, problems) = desired(&set, &settings);
        let got: Vec<&Desired> = state.objects().values().collect();
        let want_refs: Vec<&Desired> = want.iter().collect();
        assert_eq!(got, want_refs, "{name}: after event {i} ({e:?})");
        let mut got_p: Vec<String> = state.problems().map(ToString::to_string).collect();
        let mut want_p: Vec<String> = problems.iter().map(ToString::to_string).collect();
        got_p.sort();
        want_p.sort();
        assert_eq!(got_p, want_p, "{name}: problems after event {i}");
        assert_eq!(state.problem_count(), want_p.len(), "{name}: problem count");
        assert_eq!(state.held(), held_by_budget(&set), "{name}: held");
        let rebuilt = DesiredState::build(&set, &settings);
        assert_eq!(rebuilt.objects(), state.objects(), "{name}: build");
        // Every object that changed is among those the update touched: the
        // reconciler looks at no other.
        let refs: BTreeSet<&ObjectRef> = objects_before
            .keys()
            .chain(state.objects().keys())
            .collect();
        for r in refs {
            if objects_before.get(r) != state.objects().get(r) {
                assert!(touched.contains(r), "{name}: {r} changed untouched");
            }
        }
    }
}

fn check(case: Case) {
    check_incremental(&case);
    let (got, problems) = run(&case);
    check_invariants(case.name, &got);
    let mut got: Vec<Value> = got.into_iter().map(|d| to_json(&d.object)).collect();
    got.sort_by_key(sort_key);
    let mut want = case.want;
    want.sort_by_key(sort_key);
    let pretty = |v: &[Value]| serde_json::to_string_pretty(v).unwrap_or_default();
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(
            g,
            w,
            "{}: object {:?} differs\ngot:  {}\nwant: {}",
            case.name,
            sort_key(w),
            pretty(std::slice::from_ref(g)),
            pretty(std::slice::from_ref(w))
        );
    }
    assert_eq!(
        got.len(),
        want.len(),
        "{}: object count\ngot:  {}\nwant: {}",
        case.name,
        pretty(&got),
        pretty(&want)
    );
    assert_eq!(
        problems.len(),
        case.problems.len(),
        "{}: problems {problems:#?}",
        case.name
    );
    for (p, (object, text)) in problems.iter().zip(&case.problems) {
        assert_eq!(&*p.object.name, *object, "{}: {p}", case.name);
        assert!(p.message.contains(text), "{}: {p}", case.name);
    }
}

// ---- fixture events ----

fn gateway(cluster: &str, addrs: &[&str], identity: Option<&str>) -> Event {
    Event::GatewayApplied {
        cluster: c(cluster),
        gateway: Some(Gateway {
            addresses: addrs.iter().map(|a| a.parse().expect("ip")).collect(),
            port: Some(4143),
            identity: identity.map(str::to_owned),
        }),
    }
}

fn health(cluster: &str, alive: Option<bool>, broken_since: Option<Instant>) -> Event {
    Event::Health {
        cluster: c(cluster),
        health: Health {
            synced: true,
            broken_since,
            gateway_alive: alive,
            sync_given_up: false,
        },
    }
}

fn endpoint_mirror(name: &str, parent: &str, ips: &[&str], ports: Vec<Port>) -> Event {
    Event::MirrorApplied {
        cluster: c("west"),
        mirror: Mirror {
            key: ObjectKey::new("data", name),
            cluster: c("east"),
            headless_parent: Some(parent.into()),
            cluster_ips: ips.iter().map(|a| a.parse().expect("ip")).collect(),
            ports,
        },
    }
}

fn clusters(names: &[(&str, bool)]) -> Vec<Event> {
    names.iter().flat_map(|(n, local)| up(n, *local)).collect()
}

fn http(p: u16) -> Port {
    port(Some("http"), Protocol::Tcp, p)
}

fn pg() -> Vec<Port> {
    vec![port(Some("pg"), Protocol::Tcp, 5432)]
}

/// `web` in `shop`, gateway mode in east: two service ports, one ready and
/// one not-ready pod, a two-address gateway with an identity.
fn gateway_web() -> Vec<Event> {
    let mut ev = clusters(&[("west", true), ("east", false)]);
    let mut web = service(
        "shop",
        "web",
        Some(ExportMode::Gateway),
        false,
        false,
        &["10.100.0.1"],
        vec![http(80), port(Some("admin"), Protocol::Tcp, 9990)],
    );
    web.opaque_ports = Some("9990".into());
    ev.push(svc_event("east", web));
    ev.push(slice_event(
        "east",
        slice(
            "shop",
            "web-x1",
            "web",
            vec![http(8080), port(Some("admin"), Protocol::Tcp, 9990)],
            &[("10.10.1.1", None, true), ("10.10.1.2", None, false)],
        ),
    ));
    ev.push(gateway(
        "east",
        &["203.0.113.11", "203.0.113.10"],
        Some(GW_ID),
    ));
    ev
}

fn web_east_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "web-east", "namespace": "shop",
            "labels": {
                "app.kubernetes.io/managed-by": "clusterset-dns",
                "clusterset-dns.io/cluster": "east",
                "mirror.linkerd.io/mirrored-service": "true",
                "mirror.linkerd.io/cluster-name": "east"
            },
            "annotations": {
                "mirror.linkerd.io/remote-svc-fq-name": "web.shop.svc.cluster.local",
                "config.linkerd.io/opaque-ports": "9990"
            }
        },
        "spec": {"ports": [
            {"name": "http", "protocol": "TCP", "port": 80},
            {"name": "admin", "protocol": "TCP", "port": 9990}
        ]}
    })
}

fn web_east_slice(ready: bool) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": "web-east-v4-0", "namespace": "shop",
            "labels": {
                "app.kubernetes.io/managed-by": "clusterset-dns",
                "clusterset-dns.io/cluster": "east",
                "mirror.linkerd.io/mirrored-service": "true",
                "mirror.linkerd.io/cluster-name": "east",
                "kubernetes.io/service-name": "web-east",
                "endpointslice.kubernetes.io/managed-by": "clusterset-dns.io/mirror"
            },
            "annotations": {
                "mirror.linkerd.io/remote-svc-fq-name": "web.shop.svc.cluster.local",
                "mirror.linkerd.io/remote-gateway-identity": GW_ID
            }
        },
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["203.0.113.10"], "conditions": {"ready": ready}},
            {"addresses": ["203.0.113.11"], "conditions": {"ready": ready}}
        ],
        // Every Service port maps to the gateway port, names kept.
        "ports": [
            {"name": "admin", "protocol": "TCP", "port": 4143},
            {"name": "http", "protocol": "TCP", "port": 4143}
        ]
    })
}

/// `api` in `shop`, flat mode in north: ready, not-ready and IPv6 pods.
fn flat_api(v6: bool) -> Vec<Event> {
    let mut ev = clusters(&[("west", true), ("north", false)]);
    ev.push(svc_event(
        "north",
        service(
            "shop",
            "api",
            Some(ExportMode::Flat),
            false,
            false,
            &["10.110.0.5"],
            vec![http(80)],
        ),
    ));
    ev.push(slice_event(
        "north",
        slice(
            "shop",
            "api-a",
            "api",
            vec![http(8080)],
            &[
                ("10.20.1.2", None, true),
                ("10.20.1.1", None, true),
                ("10.20.1.3", None, false),
            ],
        ),
    ));
    if v6 {
        ev.push(slice_event(
            "north",
            slice(
                "shop",
                "api-b",
                "api",
                vec![http(8080)],
                &[("fd00:20::1", None, true), ("fd00:20::2", None, false)],
            ),
        ));
    }
    ev
}

fn api_north_service(domain: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "api-north", "namespace": "shop",
            "labels": {
                "app.kubernetes.io/managed-by": "clusterset-dns",
                "clusterset-dns.io/cluster": "north",
                "mirror.linkerd.io/mirrored-service": "true",
                "mirror.linkerd.io/cluster-name": "north",
                "multicluster.linkerd.io/remote-discovery": "north",
                "multicluster.linkerd.io/remote-service": "api"
            },
            "annotations": {
                "mirror.linkerd.io/remote-svc-fq-name": format!("api.shop.svc.{domain}")
            }
        },
        "spec": {"ports": [{"name": "http", "protocol": "TCP", "port": 80}]}
    })
}

fn flat_slice_labels(svc: &str, cluster: &str) -> Value {
    json!({
        "app.kubernetes.io/managed-by": "clusterset-dns",
        "clusterset-dns.io/cluster": cluster,
        "mirror.linkerd.io/mirrored-service": "true",
        "mirror.linkerd.io/cluster-name": cluster,
        "kubernetes.io/service-name": svc,
        "endpointslice.kubernetes.io/managed-by": "clusterset-dns.io/mirror"
    })
}

/// `db` in `data` in east, a headless StatefulSet: db-0 and db-1 ready,
/// db-2 not ready.
fn headless_db(mode: ExportMode, hostnames: bool) -> Vec<Event> {
    let mut ev = clusters(&[("west", true), ("east", false)]);
    ev.push(svc_event(
        "east",
        service("data", "db", Some(mode), false, true, &[], pg()),
    ));
    let h = |n| hostnames.then_some(n);
    ev.push(slice_event(
        "east",
        slice(
            "data",
            "db-x1",
            "db",
            pg(),
            &[
                ("10.10.2.11", h("db-1"), true),
                ("10.10.2.10", h("db-0"), true),
                ("10.10.2.12", h("db-2"), false),
            ],
        ),
    ));
    ev.push(gateway("east", &["203.0.113.10"], Some(GW_ID)));
    ev
}

fn db_east_root() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "db-east", "namespace": "data",
            "labels": {
                "app.kubernetes.io/managed-by": "clusterset-dns",
                "clusterset-dns.io/cluster": "east",
                "mirror.linkerd.io/mirrored-service": "true",
                "mirror.linkerd.io/cluster-name": "east"
            },
            "annotations": {"mirror.linkerd.io/remote-svc-fq-name": "db.data.svc.cluster.local"}
        },
        "spec": {"clusterIP": "None", "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}]}
    })
}

/// The endpoint mirror `<host>-east` and, for a ready pod, its gateway slice.
fn db_endpoint_mirror(host: &str, ready_pod: bool) -> Vec<Value> {
    let name = format!("{host}-east");
    let fq = format!("{host}.db.data.svc.cluster.local");
    let labels = json!({
        "app.kubernetes.io/managed-by": "clusterset-dns",
        "clusterset-dns.io/cluster": "east",
        "mirror.linkerd.io/mirrored-service": "true",
        "mirror.linkerd.io/cluster-name": "east",
        "mirror.linkerd.io/headless-mirror-svc-name": "db-east"
    });
    let mut out = vec![json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": name, "namespace": "data",
            "labels": labels,
            "annotations": {"mirror.linkerd.io/remote-svc-fq-name": fq}
        },
        "spec": {"ports": [{"name": "pg", "protocol": "TCP", "port": 5432}]}
    })];
    if ready_pod {
        let mut slice_labels = labels.clone();
        slice_labels["kubernetes.io/service-name"] = json!(name);
        slice_labels["endpointslice.kubernetes.io/managed-by"] = json!("clusterset-dns.io/mirror");
        out.push(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": format!("{name}-v4-0"), "namespace": "data",
                "labels": slice_labels,
                "annotations": {
                    "mirror.linkerd.io/remote-svc-fq-name": fq,
                    "mirror.linkerd.io/remote-gateway-identity": GW_ID
                }
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["203.0.113.10"], "conditions": {"ready": true}}],
            "ports": [{"name": "pg", "protocol": "TCP", "port": 4143}]
        }));
    }
    out
}

/// `bb` in `prod`, a federated ClusterIP service in west (local, newest),
/// east and north (oldest remote). North's pods listen on another port.
fn federated_bb() -> Vec<Event> {
    let mut ev = clusters(&[("west", true), ("east", false), ("north", false)]);
    for (cluster, created, target, pods) in [
        (
            "west",
            3000,
            8080,
            vec![("10.30.3.1", true), ("10.30.3.2", false)],
        ),
        ("east", 2000, 8080, vec![("10.10.3.1", true)]),
        ("north", 1000, 9090, vec![("10.20.3.1", true)]),
    ] {
        let mut svc = service(
            "prod",
            "bb",
            Some(ExportMode::Flat),
            true,
            false,
            &["10.1.1.1"],
            vec![http(80 + (created / 1000) as u16 - 1)],
        );
        svc.created = created;
        ev.push(svc_event(cluster, svc));
        let eps: Vec<(&str, Option<&str>, bool)> =
            pods.iter().map(|(ip, r)| (*ip, None, *r)).collect();
        ev.push(slice_event(
            cluster,
            slice(
                "prod",
                &format!("bb-{cluster}"),
                "bb",
                vec![http(target)],
                &eps,
            ),
        ));
    }
    ev
}

fn bb_federated_service(remote: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "bb-federated", "namespace": "prod",
            "labels": {
                "app.kubernetes.io/managed-by": "clusterset-dns",
                "mirror.linkerd.io/mirrored-service": "true"
            },
            "annotations": {
                "multicluster.linkerd.io/remote-discovery": remote,
                "multicluster.linkerd.io/local-discovery": "bb"
            }
        },
        // The local member's ports (port 82 marks west's Service).
        "spec": {"ports": [{"name": "http", "protocol": "TCP", "port": 82}]}
    })
}

fn federated_slice(svc: &str, ns: &str, n: u32, endpoints: Value, ports: Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{svc}-v4-{n}"), "namespace": ns,
            "labels": {
                "app.kubernetes.io/managed-by": "clusterset-dns",
                "mirror.linkerd.io/mirrored-service": "true",
                "kubernetes.io/service-name": svc,
                "endpointslice.kubernetes.io/managed-by": "clusterset-dns.io/mirror"
            }
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports
    })
}

fn ready_eps(ips: &[&str]) -> Value {
    Value::Array(
        ips.iter()
            .map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}}))
            .collect(),
    )
}

/// `db` in `prod`, federated headless in east and north (flat mode), with
/// one pod without a hostname.
fn federated_db() -> Vec<Event> {
    let mut ev = clusters(&[("west", true), ("east", false), ("north", false)]);
    for (cluster, pods) in [
        (
            "east",
            vec![
                ("10.10.2.10", Some("db-0"), true),
                ("10.10.2.11", Some("db-1"), true),
            ],
        ),
        (
            "north",
            vec![
                ("10.20.2.10", Some("db-0"), true),
                ("10.20.2.11", None, true),
                ("10.20.2.12", Some("db-2"), false),
            ],
        ),
    ] {
        ev.push(svc_event(
            cluster,
            service("prod", "db", Some(ExportMode::Flat), true, true, &[], pg()),
        ));
        ev.push(slice_event(
            cluster,
            slice("prod", &format!("db-{cluster}"), "db", pg(), &pods),
        ));
    }
    ev
}

/// The flat mirrors of `db` in east and north, which every federated `db`
/// case also produces.
fn federated_db_flat_mirrors() -> Vec<Value> {
    let mut out = Vec::new();
    for (cluster, pods) in [
        (
            "east",
            json!([["10.10.2.10", "db-0"], ["10.10.2.11", "db-1"]]),
        ),
        (
            "north",
            // No hostname: the dashed IP our DNS serves, written out.
            json!([["10.20.2.10", "db-0"], ["10.20.2.11", "10-20-2-11"]]),
        ),
    ] {
        let name = format!("db-{cluster}");
        out.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": name, "namespace": "prod",
                "labels": {
                    "app.kubernetes.io/managed-by": "clusterset-dns",
                    "clusterset-dns.io/cluster": cluster,
                    "mirror.linkerd.io/mirrored-service": "true",
                    "mirror.linkerd.io/cluster-name": cluster,
                    "multicluster.linkerd.io/remote-discovery": cluster,
                    "multicluster.linkerd.io/remote-service": "db"
                },
                "annotations": {"mirror.linkerd.io/remote-svc-fq-name": "db.prod.svc.cluster.local"}
            },
            "spec": {"clusterIP": "None", "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}]}
        }));
        let eps: Vec<Value> = pods
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let mut e = json!({"addresses": [p[0]], "conditions": {"ready": true}});
                if let Some(h) = p[1].as_str() {
                    e["hostname"] = json!(h);
                }
                e
            })
            .collect();
        out.push(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": format!("{name}-v4-0"), "namespace": "prod",
                "labels": flat_slice_labels(&name, cluster)
            },
            "addressType": "IPv4",
            "endpoints": eps,
            "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}]
        }));
    }
    out
}

fn db_federated_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "db-federated", "namespace": "prod",
            "labels": {
                "app.kubernetes.io/managed-by": "clusterset-dns",
                "mirror.linkerd.io/mirrored-service": "true"
            },
            "annotations": {"multicluster.linkerd.io/remote-discovery": "db@east,db@north"}
        },
        "spec": {"clusterIP": "None", "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}]}
    })
}

/// `<svc>-nearest` as we write it: ours, without Linkerd's marker label or
/// discovery annotations; `spec` and `annotations` (if any) as given.
fn nearest_service(name: &str, ns: &str, spec: Value, annotations: Option<Value>) -> Value {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": name, "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "clusterset-dns"}
        },
        "spec": spec
    });
    if let Some(a) = annotations {
        v["metadata"]["annotations"] = a;
    }
    v
}

/// Slice `n` (IPv4) of `<svc>-nearest` `svc`.
fn nearest_slice(svc: &str, ns: &str, n: u32, endpoints: Value, ports: Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{svc}-v4-{n}"), "namespace": ns,
            "labels": {
                "app.kubernetes.io/managed-by": "clusterset-dns",
                "kubernetes.io/service-name": svc,
                "endpointslice.kubernetes.io/managed-by": "clusterset-dns.io/mirror"
            }
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports
    })
}

/// `bb-nearest` of [`federated_bb`] while the local member west has its
/// ready pod: west's alone, with west's ports.
fn bb_nearest_west() -> Vec<Value> {
    vec![
        nearest_service(
            "bb-nearest",
            "prod",
            json!({"ports": [{"name": "http", "protocol": "TCP", "port": 82}]}),
            None,
        ),
        nearest_slice(
            "bb-nearest",
            "prod",
            0,
            ready_eps(&["10.30.3.1"]),
            json!([{"name": "http", "protocol": "TCP", "port": 8080}]),
        ),
    ]
}

/// `db-nearest` of [`federated_db`] holding `endpoints` (headless, named
/// as in `db-federated`).
fn db_nearest(endpoints: Value) -> Vec<Value> {
    vec![
        nearest_service(
            "db-nearest",
            "prod",
            json!({"clusterIP": "None", "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}]}),
            None,
        ),
        nearest_slice(
            "db-nearest",
            "prod",
            0,
            endpoints,
            json!([{"name": "pg", "protocol": "TCP", "port": 5432}]),
        ),
    ]
}

fn with(mut base: Vec<Event>, more: impl IntoIterator<Item = Event>) -> Vec<Event> {
    base.extend(more);
    base
}

fn concat(parts: impl IntoIterator<Item = Vec<Value>>) -> Vec<Value> {
    parts.into_iter().flatten().collect()
}

#[test]
fn gateway_mode() {
    let cases = vec![
        Case {
            name: "gateway ClusterIP: gateway addresses and port, Linkerd's annotations",
            events: gateway_web(),
            settings: defaults,
            want: vec![web_east_service(), web_east_slice(true)],
            problems: vec![],
        },
        Case {
            name: "gateway probe failing: endpoints kept, not ready",
            events: with(gateway_web(), [health("east", Some(false), None)]),
            settings: defaults,
            want: vec![web_east_service(), web_east_slice(false)],
            problems: vec![],
        },
        Case {
            name: "gateway probe alive: ready",
            events: with(gateway_web(), [health("east", Some(true), None)]),
            settings: defaults,
            want: vec![web_east_service(), web_east_slice(true)],
            problems: vec![],
        },
        Case {
            name: "no ready remote endpoint (isEmptyService): the Service only",
            events: with(
                gateway_web(),
                [Event::SliceDeleted {
                    cluster: c("east"),
                    key: ObjectKey::new("shop", "web-x1"),
                }],
            ),
            settings: defaults,
            want: vec![web_east_service()],
            problems: vec![],
        },
        Case {
            name: "no gateway: the Service only",
            events: with(
                gateway_web(),
                [Event::GatewayApplied {
                    cluster: c("east"),
                    gateway: None,
                }],
            ),
            settings: defaults,
            want: vec![web_east_service()],
            problems: vec![],
        },
        Case {
            name: "the watch is broken: per-cluster mirrors stay (never health-filtered)",
            events: with(gateway_web(), [health("east", None, Some(base()))]),
            settings: defaults,
            want: vec![web_east_service(), web_east_slice(true)],
            problems: vec![],
        },
    ];
    for case in cases {
        check(case);
    }
}

#[test]
fn flat_mode() {
    let api_slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "api-north-v4-0", "namespace": "shop", "labels": flat_slice_labels("api-north", "north")},
        "addressType": "IPv4",
        "endpoints": ready_eps(&["10.20.1.1", "10.20.1.2"]),
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
    });
    let cases = vec![
        Case {
            name: "flat ClusterIP: remote-discovery labels and the ready pod IPs",
            events: flat_api(false),
            settings: defaults,
            want: vec![api_north_service("cluster.local"), api_slice.clone()],
            problems: vec![],
        },
        Case {
            name: "flat with --linkerd-flat-compat: Linkerd's shape, no endpoints",
            events: flat_api(true),
            settings: |s| {
                s.linkerd_flat_compat = true;
                s.cluster_domain = "north.example".to_owned();
            },
            want: vec![api_north_service("north.example")],
            problems: vec![],
        },
        Case {
            name: "IPv6: one slice set per family",
            events: flat_api(true),
            settings: defaults,
            want: vec![
                api_north_service("cluster.local"),
                api_slice,
                json!({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": "api-north-v6-0", "namespace": "shop", "labels": flat_slice_labels("api-north", "north")},
                    "addressType": "IPv6",
                    "endpoints": ready_eps(&["fd00:20::1"]),
                    "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
                }),
            ],
            problems: vec![],
        },
        Case {
            name: "local exported services and Linkerd's mirrors are inputs only",
            events: {
                let mut ev = clusters(&[("west", true), ("east", false)]);
                ev.push(svc_event(
                    "west",
                    service(
                        "shop",
                        "cache",
                        Some(ExportMode::Flat),
                        false,
                        false,
                        &["10.130.40.1"],
                        vec![http(80)],
                    ),
                ));
                ev.push(slice_event(
                    "west",
                    slice(
                        "shop",
                        "cache-1",
                        "cache",
                        vec![http(80)],
                        &[("10.30.1.1", None, true)],
                    ),
                ));
                ev.push(Event::MirrorApplied {
                    cluster: c("west"),
                    mirror: Mirror {
                        key: ObjectKey::new("shop", "web-east"),
                        cluster: c("east"),
                        headless_parent: None,
                        cluster_ips: vec!["10.96.0.10".parse().expect("ip")],
                        ports: vec![http(80)],
                    },
                });
                ev
            },
            settings: defaults,
            want: vec![],
            problems: vec![],
        },
    ];
    for case in cases {
        check(case);
    }
}

#[test]
fn headless() {
    let flat_root = || {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": "db-east", "namespace": "data",
                "labels": {
                    "app.kubernetes.io/managed-by": "clusterset-dns",
                    "clusterset-dns.io/cluster": "east",
                    "mirror.linkerd.io/mirrored-service": "true",
                    "mirror.linkerd.io/cluster-name": "east",
                    "multicluster.linkerd.io/remote-discovery": "east",
                    "multicluster.linkerd.io/remote-service": "db"
                },
                "annotations": {"mirror.linkerd.io/remote-svc-fq-name": "db.data.svc.cluster.local"}
            },
            "spec": {"clusterIP": "None", "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}]}
        })
    };
    let flat_slice = |endpoints: Value| {
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "db-east-v4-0", "namespace": "data", "labels": flat_slice_labels("db-east", "east")},
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}]
        })
    };
    let root_slice = |endpoints: Value| {
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {
                "name": "db-east-v4-0", "namespace": "data",
                "labels": flat_slice_labels("db-east", "east"),
                "annotations": {
                    "mirror.linkerd.io/remote-svc-fq-name": "db.data.svc.cluster.local",
                    "mirror.linkerd.io/remote-gateway-identity": GW_ID
                }
            },
            "addressType": "IPv4",
            "endpoints": endpoints,
            // The endpoint mirror's Service port: what its ClusterIP serves.
            "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}]
        })
    };
    let cases = vec![
        Case {
            name: "flat headless with hostnames: per-pod hostnames, ready pods only",
            events: headless_db(ExportMode::Flat, true),
            settings: defaults,
            want: vec![
                flat_root(),
                flat_slice(json!([
                    {"addresses": ["10.10.2.10"], "conditions": {"ready": true}, "hostname": "db-0"},
                    {"addresses": ["10.10.2.11"], "conditions": {"ready": true}, "hostname": "db-1"}
                ])),
            ],
            problems: vec![],
        },
        Case {
            // Written out, so CoreDNS serves the names our DNS serves (it
            // dashes a bare `fd00:5::` differently).
            name: "flat headless without hostnames: the dashed IP as hostname",
            events: headless_db(ExportMode::Flat, false),
            settings: defaults,
            want: vec![
                flat_root(),
                flat_slice(json!([
                    {"addresses": ["10.10.2.10"], "conditions": {"ready": true}, "hostname": "10-10-2-10"},
                    {"addresses": ["10.10.2.11"], "conditions": {"ready": true}, "hostname": "10-10-2-11"}
                ])),
            ],
            problems: vec![],
        },
        Case {
            name: "gateway headless, endpoint mirrors not allocated yet: root without slices",
            events: headless_db(ExportMode::Gateway, true),
            settings: defaults,
            want: concat([
                vec![db_east_root()],
                db_endpoint_mirror("db-0", true),
                db_endpoint_mirror("db-1", true),
                // Not ready: the mirror stays (its ClusterIP too), no endpoints.
                db_endpoint_mirror("db-2", false),
            ]),
            problems: vec![],
        },
        Case {
            name: "gateway headless with local endpoint mirrors: root slice of their ClusterIPs",
            events: with(
                headless_db(ExportMode::Gateway, true),
                [
                    endpoint_mirror("db-0-east", "db-east", &["10.96.7.7"], pg()),
                    // Not allocated yet: left out of the root until it is.
                    endpoint_mirror("db-1-east", "db-east", &[], pg()),
                    endpoint_mirror("db-2-east", "db-east", &["10.96.7.9"], pg()),
                    // Someone else's parent: not ours to use.
                    endpoint_mirror("db-3-east", "other-east", &["10.96.7.10"], pg()),
                ],
            ),
            settings: defaults,
            want: concat([
                vec![
                    db_east_root(),
                    root_slice(json!([
                        {"addresses": ["10.96.7.7"], "conditions": {"ready": true}, "hostname": "db-0"}
                    ])),
                ],
                db_endpoint_mirror("db-0", true),
                db_endpoint_mirror("db-1", true),
                db_endpoint_mirror("db-2", false),
            ]),
            problems: vec![],
        },
        Case {
            name: "gateway headless without hostnames (a Deployment): Linkerd's ClusterIP mirror",
            events: headless_db(ExportMode::Gateway, false),
            settings: defaults,
            want: {
                let mut svc = db_east_root();
                svc["spec"].as_object_mut().map(|s| s.remove("clusterIP"));
                let mut slice = db_endpoint_mirror("x", true)[1].clone();
                slice["metadata"]["name"] = json!("db-east-v4-0");
                let labels = &mut slice["metadata"]["labels"];
                labels["kubernetes.io/service-name"] = json!("db-east");
                labels
                    .as_object_mut()
                    .map(|l| l.remove("mirror.linkerd.io/headless-mirror-svc-name"));
                slice["metadata"]["annotations"]["mirror.linkerd.io/remote-svc-fq-name"] =
                    json!("db.data.svc.cluster.local");
                vec![svc, slice]
            },
            problems: vec![],
        },
    ];
    for case in cases {
        check(case);
    }
}

#[test]
fn federated() {
    let bb_slices = |with_east: bool| {
        let first = if with_east {
            vec!["10.10.3.1", "10.30.3.1"]
        } else {
            vec!["10.30.3.1"]
        };
        vec![
            // One slice per port set: members whose pods listen elsewhere
            // cannot share a slice.
            federated_slice(
                "bb-federated",
                "prod",
                0,
                ready_eps(&first),
                json!([{"name": "http", "protocol": "TCP", "port": 8080}]),
            ),
            federated_slice(
                "bb-federated",
                "prod",
                1,
                ready_eps(&["10.20.3.1"]),
                json!([{"name": "http", "protocol": "TCP", "port": 9090}]),
            ),
        ]
    };
    // bb is also flat-exported in east and north: their mirrors appear too.
    let bb_mirror = |cluster: &str, port: u16, ip: &str, target: u16| {
        let name = format!("bb-{cluster}");
        vec![
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {
                    "name": name, "namespace": "prod",
                    "labels": {
                        "app.kubernetes.io/managed-by": "clusterset-dns",
                        "clusterset-dns.io/cluster": cluster,
                        "mirror.linkerd.io/mirrored-service": "true",
                        "mirror.linkerd.io/cluster-name": cluster,
                        "multicluster.linkerd.io/remote-discovery": cluster,
                        "multicluster.linkerd.io/remote-service": "bb"
                    },
                    "annotations": {"mirror.linkerd.io/remote-svc-fq-name": "bb.prod.svc.cluster.local"}
                },
                "spec": {"ports": [{"name": "http", "protocol": "TCP", "port": port}]}
            }),
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("{name}-v4-0"), "namespace": "prod", "labels": flat_slice_labels(&name, cluster)},
                "addressType": "IPv4",
                "endpoints": ready_eps(&[ip]),
                "ports": [{"name": "http", "protocol": "TCP", "port": target}]
            }),
        ]
    };
    let bb_mirrors = || {
        concat([
            bb_mirror("east", 81, "10.10.3.1", 8080),
            bb_mirror("north", 80, "10.20.3.1", 9090),
        ])
    };
    let db_federated_slice = |endpoints: Value| {
        federated_slice(
            "db-federated",
            "prod",
            0,
            endpoints,
            json!([{"name": "pg", "protocol": "TCP", "port": 5432}]),
        )
    };
    let all_db = json!([
        {"addresses": ["10.10.2.10"], "conditions": {"ready": true}, "hostname": "db-0-east"},
        {"addresses": ["10.10.2.11"], "conditions": {"ready": true}, "hostname": "db-1-east"},
        {"addresses": ["10.20.2.10"], "conditions": {"ready": true}, "hostname": "db-0-north"},
        // No hostname: the dashed IP, as in our DNS's alias name.
        {"addresses": ["10.20.2.11"], "conditions": {"ready": true}, "hostname": "10-20-2-11-north"}
    ]);
    let north_db = json!([
        {"addresses": ["10.20.2.10"], "conditions": {"ready": true}, "hostname": "db-0-north"},
        {"addresses": ["10.20.2.11"], "conditions": {"ready": true}, "hostname": "10-20-2-11-north"}
    ]);
    let cases = vec![
        Case {
            name: "federated ClusterIP, local + 2 remote members: local ports, every ready pod",
            events: federated_bb(),
            settings: defaults,
            want: concat([
                vec![bb_federated_service("bb@east,bb@north")],
                bb_slices(true),
                bb_mirrors(),
                bb_nearest_west(),
            ]),
            problems: vec![],
        },
        Case {
            name: "federated headless: pods named <hostname>-<cluster>",
            events: federated_db(),
            settings: defaults,
            want: concat([
                vec![db_federated_service(), db_federated_slice(all_db.clone())],
                federated_db_flat_mirrors(),
                // West is no member; east and north share the default
                // tier of clusters without a place.
                db_nearest(all_db.clone()),
            ]),
            problems: vec![],
        },
        Case {
            name: "federated: a member whose gateway probe fails is left out, still listed",
            events: with(federated_bb(), [health("east", Some(false), None)]),
            settings: defaults,
            want: concat([
                vec![bb_federated_service("bb@east,bb@north")],
                bb_slices(false),
                bb_mirrors(),
                bb_nearest_west(),
            ]),
            problems: vec![],
        },
        Case {
            name: "federated: a watch broken past the grace leaves, within the grace stays",
            events: with(
                federated_db(),
                [
                    health("east", None, Some(base())),
                    health("north", None, Some(base() + Duration::from_secs(90))),
                ],
            ),
            settings: defaults,
            want: concat([
                vec![db_federated_service(), db_federated_slice(north_db.clone())],
                federated_db_flat_mirrors(),
                // North alone is left: stale, a tier down, still chosen.
                db_nearest(north_db),
            ]),
            problems: vec![],
        },
        Case {
            name: "federated: every member left out: the last-known union (fail open)",
            events: with(
                federated_db(),
                [
                    health("east", Some(false), None),
                    health("north", None, Some(base())),
                ],
            ),
            settings: defaults,
            want: concat([
                vec![db_federated_service(), db_federated_slice(all_db.clone())],
                federated_db_flat_mirrors(),
                // No tier at all: the union, as the DNS answer.
                db_nearest(all_db),
            ]),
            problems: vec![],
        },
        Case {
            name: "Linkerd manages east: no east mirrors, east still a federated member",
            events: federated_bb(),
            settings: |s| {
                s.linkerd_managed.insert("east".into());
            },
            want: concat([
                vec![bb_federated_service("bb@east,bb@north")],
                bb_slices(true),
                bb_mirror("north", 80, "10.20.3.1", 9090),
                bb_nearest_west(),
            ]),
            problems: vec![],
        },
        Case {
            name: "only the local cluster is a member: local-discovery alone, local ports",
            events: {
                let mut ev = clusters(&[("west", true)]);
                let mut svc = service(
                    "prod",
                    "solo",
                    None,
                    true,
                    false,
                    &["10.1.1.9"],
                    vec![http(80)],
                );
                svc.opaque_ports = Some("80".into());
                ev.push(svc_event("west", svc));
                ev.push(slice_event(
                    "west",
                    slice(
                        "prod",
                        "solo-1",
                        "solo",
                        vec![http(8080)],
                        &[("10.30.9.1", None, true)],
                    ),
                ));
                ev
            },
            settings: defaults,
            want: vec![
                json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {
                        "name": "solo-federated", "namespace": "prod",
                        "labels": {
                            "app.kubernetes.io/managed-by": "clusterset-dns",
                            "mirror.linkerd.io/mirrored-service": "true"
                        },
                        "annotations": {
                            "multicluster.linkerd.io/local-discovery": "solo",
                            "config.linkerd.io/opaque-ports": "80"
                        }
                    },
                    "spec": {"ports": [{"name": "http", "protocol": "TCP", "port": 80}]}
                }),
                federated_slice(
                    "solo-federated",
                    "prod",
                    0,
                    ready_eps(&["10.30.9.1"]),
                    json!([{"name": "http", "protocol": "TCP", "port": 8080}]),
                ),
                // Opaque ports kept: meshed clients need them here too.
                nearest_service(
                    "solo-nearest",
                    "prod",
                    json!({"ports": [{"name": "http", "protocol": "TCP", "port": 80}]}),
                    Some(json!({"config.linkerd.io/opaque-ports": "80"})),
                ),
                nearest_slice(
                    "solo-nearest",
                    "prod",
                    0,
                    ready_eps(&["10.30.9.1"]),
                    json!([{"name": "http", "protocol": "TCP", "port": 8080}]),
                ),
            ],
            problems: vec![],
        },
    ];
    for case in cases {
        check(case);
    }
}

#[test]
fn sharding() {
    // 150 ready pods, listed in reverse: sorted, then cut at 100.
    let ips: Vec<String> = (1..=150)
        .rev()
        .map(|i| format!("10.1.{}.{}", i / 100, i % 100))
        .collect();
    let mut ev = clusters(&[("west", true), ("north", false)]);
    ev.push(svc_event(
        "north",
        service(
            "shop",
            "big",
            Some(ExportMode::Flat),
            false,
            false,
            &["10.110.0.9"],
            vec![http(80)],
        ),
    ));
    let eps: Vec<(&str, Option<&str>, bool)> =
        ips.iter().map(|ip| (ip.as_str(), None, true)).collect();
    ev.push(slice_event(
        "north",
        slice("shop", "big-1", "big", vec![http(8080)], &eps[..120]),
    ));
    ev.push(slice_event(
        "north",
        slice("shop", "big-2", "big", vec![http(8080)], &eps[120..]),
    ));
    let mut sorted: Vec<IpAddr> = ips.iter().map(|ip| ip.parse().expect("ip")).collect();
    sorted.sort();
    let text: Vec<String> = sorted.iter().map(ToString::to_string).collect();
    let refs: Vec<&str> = text.iter().map(String::as_str).collect();
    let shard = |n: usize, part: &[&str]| {
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("big-north-v4-{n}"), "namespace": "shop", "labels": flat_slice_labels("big-north", "north")},
            "addressType": "IPv4",
            "endpoints": ready_eps(part),
            "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
        })
    };
    let mut svc = api_north_service("cluster.local");
    svc["metadata"]["name"] = json!("big-north");
    svc["metadata"]["labels"]["multicluster.linkerd.io/remote-service"] = json!("big");
    svc["metadata"]["annotations"]["mirror.linkerd.io/remote-svc-fq-name"] =
        json!("big.shop.svc.cluster.local");
    check(Case {
        name: ">100 endpoints: 100 + the rest, in address order",
        events: ev,
        settings: defaults,
        want: vec![svc, shard(0, &refs[..100]), shard(1, &refs[100..])],
        problems: vec![],
    });
}

#[test]
fn names() {
    // 52 + "-" + 12 = 65 characters: two too many for a Service name.
    let long = "a-service-with-a-name-long-enough-to-overflow-a-labe";
    let cluster = "cluster-east";
    let full = format!("{long}-{cluster}");
    assert_eq!(full.len(), 65);
    // A golden value: the hash must not change between releases, or every
    // shortened object would be deleted and recreated on upgrade.
    let short = "a-service-with-a-name-long-enough-to-overflow-a-labe-c-b250c990";
    assert_eq!(fit_name(&full, 63), short);
    assert_eq!(fit_name(&full, 63).len(), 63);
    assert_eq!(fit_name("web-east", 63), "web-east");

    let mut ev = clusters(&[("west", true), (cluster, false)]);
    ev.push(svc_event(
        cluster,
        service(
            "shop",
            long,
            Some(ExportMode::Gateway),
            false,
            false,
            &["10.100.0.7"],
            vec![http(80)],
        ),
    ));
    // Two services generating the same label `a-b-c`: the one of the
    // senior cluster (`b-c`, linked first) keeps it, though `c` claims an
    // older Service (1970, as a compromised API server would).
    ev.extend(clusters(&[("b-c", false), ("c", false)]));
    let mut senior = service(
        "shop",
        "a",
        Some(ExportMode::Gateway),
        false,
        false,
        &["10.100.0.8"],
        vec![http(80)],
    );
    senior.created = 500;
    ev.push(svc_event("b-c", senior));
    let mut forged = service(
        "shop",
        "a-b",
        Some(ExportMode::Gateway),
        false,
        false,
        &["10.100.0.9"],
        vec![http(81)],
    );
    forged.created = 0;
    ev.push(svc_event("c", forged));
    let mirror = |name: &str, cluster: &str, fq: &str, port: u16| {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": name, "namespace": "shop",
                "labels": {
                    "app.kubernetes.io/managed-by": "clusterset-dns",
                    "clusterset-dns.io/cluster": cluster,
                    "mirror.linkerd.io/mirrored-service": "true",
                    "mirror.linkerd.io/cluster-name": cluster
                },
                "annotations": {"mirror.linkerd.io/remote-svc-fq-name": fq}
            },
            "spec": {"ports": [{"name": "http", "protocol": "TCP", "port": port}]}
        })
    };
    let mut shortened = mirror(
        short,
        cluster,
        &format!("{long}.shop.svc.cluster.local"),
        80,
    );
    shortened["metadata"]["annotations"]["clusterset-dns.io/full-name"] = json!(full);
    check(Case {
        name: "long names shortened (full name kept), collisions: the senior cluster wins",
        events: ev,
        settings: defaults,
        want: vec![
            mirror("a-b-c", "b-c", "a.shop.svc.cluster.local", 80),
            shortened,
        ],
        problems: vec![
            (short, "is longer than 63 characters; shortened"),
            (
                "a-b-c",
                "name collision: a-b-c of service shop/a-b in cluster c",
            ),
        ],
    });
}

#[test]
fn endpoint_mirrors_rank_after_services() {
    // A pod hostname that cannot start a Service name is reported.
    let mut ev = headless_db(ExportMode::Gateway, true);
    ev.push(slice_event(
        "east",
        slice(
            "data",
            "db-x2",
            "db",
            pg(),
            &[("10.10.2.20", Some("0db"), true)],
        ),
    ));
    let (got, problems) = run_events(ev, defaults);
    assert!(got.iter().all(|d| !d.key.name.starts_with("0db")));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].message.contains("does not start with a letter"));

    // Remote service `db-1` of east is named `db-1-east`, like db's endpoint
    // mirror for pod db-1: the service keeps the name, as in our DNS, even
    // though it is newer.
    let mut ev = headless_db(ExportMode::Gateway, true);
    let mut rival = service(
        "data",
        "db-1",
        Some(ExportMode::Flat),
        false,
        false,
        &["10.100.1.1"],
        pg(),
    );
    rival.created = 5000;
    ev.push(svc_event("east", rival));
    let (got, problems) = run_events(ev, defaults);
    let db1 = got
        .iter()
        .find(|d| d.key.kind == Kind::Service && &*d.key.name == "db-1-east")
        .expect("db-1-east");
    assert_eq!(
        to_json(&db1.object)["metadata"]["labels"]["multicluster.linkerd.io/remote-service"],
        "db-1"
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0]
            .message
            .contains("name collision: db-1-east of service data/db in cluster east"),
        "{problems:?}"
    );

    // A root that loses its name takes its endpoint mirrors with it:
    // headless `a` of cluster `b-c` and `a-b` of cluster `c`, linked
    // before it (senior), both want `a-b-c`.
    let mut ev = clusters(&[("west", true), ("c", false), ("b-c", false)]);
    ev.push(svc_event(
        "b-c",
        service(
            "data",
            "a",
            Some(ExportMode::Gateway),
            false,
            true,
            &[],
            pg(),
        ),
    ));
    ev.push(slice_event(
        "b-c",
        slice("data", "a-1", "a", pg(), &[("10.9.0.1", Some("a-0"), true)]),
    ));
    let mut older = service(
        "data",
        "a-b",
        Some(ExportMode::Gateway),
        false,
        false,
        &["10.100.0.1"],
        pg(),
    );
    older.created = 10;
    ev.push(svc_event("c", older));
    let (got, problems) = run_events(ev, defaults);
    let names: Vec<String> = got.iter().map(|d| d.key.to_string()).collect();
    assert_eq!(names, ["Service data/a-b-c"]);
    assert_eq!(got[0].cluster.as_deref(), Some("c"));
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0]
            .message
            .contains("of service data/a in cluster b-c"),
        "{problems:?}"
    );
}

fn run_events(
    events: Vec<Event>,
    settings: fn(&mut MirrorSettings),
) -> (Vec<Desired>, Vec<Problem>) {
    let case = Case {
        name: "",
        events,
        settings,
        want: vec![],
        problems: vec![],
    };
    let out = run(&case);
    check_invariants("run_events", &out.0);
    out
}

#[test]
fn federated_alias_too_long_is_reported() {
    let cluster = "a-cluster-name-of-forty-characters-xxxxx";
    let host = "a-hostname-of-twenty-five";
    let mut ev = clusters(&[("west", true), (cluster, false)]);
    ev.push(svc_event(
        cluster,
        service("prod", "db", None, true, true, &[], pg()),
    ));
    ev.push(slice_event(
        cluster,
        slice(
            "prod",
            "db-1",
            "db",
            pg(),
            &[("10.10.9.9", Some(host), true)],
        ),
    ));
    let (got, problems) = run_events(ev, defaults);
    // The same pod is in `db-federated` and `db-nearest`: reported for each.
    let slices: Vec<&Desired> = got
        .iter()
        .filter(|d| d.key.kind == Kind::EndpointSlice)
        .collect();
    assert_eq!(slices.len(), 2, "{slices:?}");
    for slice in slices {
        assert_eq!(
            to_json(&slice.object)["endpoints"],
            json!([{"addresses": ["10.10.9.9"], "conditions": {"ready": true}}])
        );
    }
    let mut objects: Vec<&str> = problems.iter().map(|p| &*p.object.name).collect();
    objects.sort_unstable();
    assert_eq!(objects, ["db-federated", "db-nearest"], "{problems:?}");
    assert!(
        problems
            .iter()
            .all(|p| p.message.contains("has no hostname")),
        "{problems:?}"
    );
}

#[test]
fn opaque_ports_come_from_the_linkerd_annotation() {
    use crate::source::convert::{ServiceKind, convert_service};
    use crate::source::selector::Selectors;
    let svc = serde_json::from_value(json!({
        "metadata": {
            "name": "mysql", "namespace": "prod",
            "labels": {"mirror.linkerd.io/exported": "true"},
            "annotations": {"config.linkerd.io/opaque-ports": "3306"}
        },
        "spec": {"clusterIP": "10.0.0.3", "ports": [{"name": "mysql", "port": 3306}]}
    }))
    .expect("a Service");
    let converted = convert_service(
        &svc,
        false,
        &Selectors::linkerd_defaults(),
        &crate::vocab::trust::Trust::default(),
    )
    .expect("converts");
    let ServiceKind::Exported(svc) = converted.value else {
        panic!("not exported: {:?}", converted.value);
    };
    assert_eq!(svc.opaque_ports.as_deref(), Some("3306"));
}

#[test]
fn deterministic() {
    let events = concat_events([
        federated_bb(),
        federated_db(),
        gateway_web(),
        flat_api(true),
    ]);
    let set = build(events);
    let settings = MirrorSettings::new("west", now());
    let a = desired(&set, &settings);
    for _ in 0..5 {
        assert_eq!(desired(&set.clone(), &settings), a);
    }
}

fn concat_events(parts: impl IntoIterator<Item = Vec<Event>>) -> Vec<Event> {
    parts.into_iter().flatten().collect()
}

#[test]
fn refused_services_hold_their_mirrors_and_federated_and_nearest_unions() {
    use crate::model::objects::ExportMode::Flat;
    let mut events = Vec::new();
    events.extend(up("west", true));
    events.extend(up("east", false));
    let mut refused = service(
        "prod",
        "web",
        Some(Flat),
        true,
        false,
        &["10.0.0.1"],
        Vec::new(),
    );
    refused.refused = true;
    events.push(svc_event("east", refused));
    let long = "a".repeat(60);
    let mut long_refused = service("prod", &long, Some(Flat), false, false, &[], Vec::new());
    long_refused.refused = true;
    events.push(svc_event("east", long_refused));
    events.push(svc_event(
        "east",
        service(
            "prod",
            "api",
            Some(Flat),
            true,
            false,
            &["10.0.0.2"],
            Vec::new(),
        ),
    ));
    let mut set = ClusterSet::new();
    let mut dirty = Dirty::default();
    for e in events {
        set.apply(e, &mut dirty);
    }
    let held: Vec<(String, String)> = held_by_budget(&set)
        .into_iter()
        .map(|(ns, name)| (ns.to_string(), name.to_string()))
        .collect();
    let shortened = fit_name(&format!("{long}-east"), MAX_SERVICE_NAME);
    let mut want = vec![
        ("prod".to_owned(), shortened),
        ("prod".to_owned(), "web-east".to_owned()),
        ("prod".to_owned(), "web-federated".to_owned()),
        ("prod".to_owned(), "web-nearest".to_owned()),
    ];
    want.sort();
    assert_eq!(held, want, "api is admitted: nothing of it is held");
}

// ---- incremental == full, on random event sequences ----

mod random {
    use proptest::prelude::*;

    use super::*;
    use crate::model::testing::port;

    /// Clusters `b-c` and `c` with services `a` and `a-b` both want
    /// `a-b-c`: collisions happen. `west` is local.
    const CLUSTERS: [&str; 4] = ["east", "b-c", "c", "west"];
    const SERVICES: [&str; 3] = ["a", "a-b", "db"];
    const HOSTS: [&str; 3] = ["pod-0", "pod-1", "0pod"];

    fn cluster() -> impl Strategy<Value = &'static str> {
        prop::sample::select(&CLUSTERS[..])
    }

    fn svc_name() -> impl Strategy<Value = &'static str> {
        prop::sample::select(&SERVICES[..])
    }

    fn service_event() -> impl Strategy<Value = Event> {
        (
            cluster(),
            svc_name(),
            prop::option::of(prop_oneof![
                Just(ExportMode::Flat),
                Just(ExportMode::Gateway)
            ]),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            0..3i64,
        )
            .prop_map(
                |(cl, name, export, federated, headless, refused, created)| {
                    let mut s = service(
                        "ns",
                        name,
                        export,
                        federated,
                        headless,
                        &[],
                        vec![port(Some("http"), Protocol::Tcp, 80)],
                    );
                    s.refused = refused;
                    s.created = created;
                    svc_event(cl, s)
                },
            )
    }

    fn slice_event_s() -> impl Strategy<Value = Event> {
        let ep = (
            0..4u8,
            prop::option::of(prop::sample::select(&HOSTS[..])),
            any::<bool>(),
        );
        (
            cluster(),
            svc_name(),
            0..2u8,
            proptest::collection::vec(ep, 0..3),
        )
            .prop_map(|(cl, name, n, eps)| {
                let ips: Vec<String> = eps.iter().map(|(i, _, _)| format!("10.0.0.{i}")).collect();
                let eps: Vec<(&str, Option<&str>, bool)> = eps
                    .iter()
                    .zip(&ips)
                    .map(|((_, h, r), ip)| (ip.as_str(), *h, *r))
                    .collect();
                let ports = vec![port(Some("http"), Protocol::Tcp, 8080)];
                slice_event(cl, slice("ns", &format!("{name}-{n}"), name, ports, &eps))
            })
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            4 => service_event(),
            4 => slice_event_s(),
            1 => (cluster(), svc_name()).prop_map(|(cl, name)| Event::ServiceDeleted {
                cluster: c(cl),
                key: ObjectKey::new("ns", name),
            }),
            1 => (cluster(), svc_name(), 0..2u8).prop_map(|(cl, name, n)| Event::SliceDeleted {
                cluster: c(cl),
                key: ObjectKey::new("ns", &format!("{name}-{n}")),
            }),
            1 => (cluster(), any::<bool>(), any::<bool>()).prop_map(|(cl, synced, broken)| {
                Event::Health {
                    cluster: c(cl),
                    health: Health {
                        synced,
                        broken_since: broken.then(base),
                        gateway_alive: Some(synced),
                        sync_given_up: false,
                    },
                }
            }),
            1 => (cluster(), any::<bool>()).prop_map(|(cl, has)| Event::GatewayApplied {
                cluster: c(cl),
                gateway: has.then(|| Gateway {
                    addresses: vec!["192.0.2.1".parse().expect("ip")],
                    port: Some(4143),
                    identity: Some("gw".into()),
                }),
            }),
            1 => (cluster(), prop::sample::select(&HOSTS[..]), 0..2u8).prop_map(|(cl, host, ip)| {
                endpoint_mirror_of(cl, host, ip)
            }),
            1 => cluster().prop_map(|cl| Event::ClusterDown { cluster: c(cl) }),
            1 => cluster().prop_map(|cl| Event::ClusterUp { cluster: c(cl), local: cl == "west" }),
        ]
    }

    /// The local endpoint mirror `<host>-<cluster>` of `db-<cluster>`.
    fn endpoint_mirror_of(cl: &str, host: &str, ip: u8) -> Event {
        Event::MirrorApplied {
            cluster: c("west"),
            mirror: Mirror {
                key: ObjectKey::new("ns", &format!("{host}-{cl}")),
                cluster: c(cl),
                headless_parent: Some(format!("db-{cl}").into()),
                cluster_ips: vec![format!("10.96.0.{ip}").parse().expect("ip")],
                ports: vec![port(Some("http"), Protocol::Tcp, 80)],
            },
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(150))]

        /// After every event, the kept state equals `desired` from scratch.
        #[test]
        fn incremental_equals_full_on_random_events(
            more in proptest::collection::vec(event(), 1..30),
        ) {
            let mut events: Vec<Event> = CLUSTERS
                .iter()
                .flat_map(|cl| up(cl, *cl == "west"))
                .collect();
            events.extend(more);
            incremental_equals_full("random", &events, &MirrorSettings::new("west", now()));
        }
    }
}

mod mcs_cases;
mod nearest_cases;

#[test]
fn special_addresses_are_never_written_whatever_reached_the_model() {
    // The sources drop them first; these events skip the sources, as a
    // path added later might: no slice the mirror writes holds one.
    let mut ev = clusters(&[("west", true), ("east", false)]);
    let mut web = service(
        "shop",
        "web",
        Some(ExportMode::Flat),
        true,
        false,
        &["10.100.0.1"],
        vec![http(80)],
    );
    web.created = 100;
    ev.push(svc_event("east", web));
    ev.push(slice_event(
        "east",
        slice(
            "shop",
            "web-4",
            "web",
            vec![http(8080)],
            &[
                ("127.0.0.1", None, true),
                ("169.254.169.254", None, true),
                ("0.0.0.0", None, true),
                ("10.1.0.1", None, true),
            ],
        ),
    ));
    ev.push(slice_event(
        "east",
        slice(
            "shop",
            "web-6",
            "web",
            vec![http(8080)],
            &[
                ("fe80::1", None, true),
                ("::ffff:127.0.0.1", None, true),
                ("fd00:1::1", None, true),
            ],
        ),
    ));
    let (got, _) = run_events(ev, defaults);
    let mut written: Vec<String> = got
        .iter()
        .filter(|d| d.key.kind == Kind::EndpointSlice)
        .flat_map(|d| {
            to_json(&d.object)["endpoints"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|e| e["addresses"][0].as_str().map(str::to_owned))
        .collect();
    written.sort();
    written.dedup();
    assert_eq!(written, ["10.1.0.1", "fd00:1::1"], "{got:#?}");
}
