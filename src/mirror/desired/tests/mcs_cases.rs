//! MCS objects (`--mcs`): per case the cluster state and every derived
//! Service, EndpointSlice and ServiceImport expected.

use super::*;

const MB: &str = "app.kubernetes.io/managed-by";

fn mcs_on(s: &mut MirrorSettings) {
    s.mcs.enabled = true;
}

/// MCS on, and the API gave `derived-db` the ClusterIP 10.96.0.5.
fn with_ip(s: &mut MirrorSettings) {
    mcs_on(s);
    let ips = BTreeMap::from([(
        ObjectKey::new("data", "db"),
        vec!["10.96.0.5".parse().expect("ip")],
    )]);
    s.mcs.derived_ips = Arc::new(ips);
}

fn metrics(p: u16) -> Port {
    port(Some("metrics"), Protocol::Tcp, p)
}

/// `data/db`, exported through a ServiceExport created at `exported`.
fn db(cluster: &str, exported: i64, headless: bool, ports: Vec<Port>) -> Event {
    let mut s = service("data", "db", None, false, headless, &[], ports);
    s.mcs = Some(exported);
    svc_event(cluster, s)
}

fn db_slice(cluster: &str, ports: Vec<Port>, eps: &[(&str, Option<&str>, bool)]) -> Event {
    slice_event(
        cluster,
        slice("data", &format!("db-{cluster}"), "db", ports, eps),
    )
}

/// west (local) exports `db` with pg, east (the oldest export) with pg and
/// metrics; one ready pod in west, a ready and a not-ready one in east.
fn clusterset_ip() -> Vec<Event> {
    let mut ev = clusters(&[("west", true), ("east", false)]);
    ev.push(db("west", 200, false, pg()));
    ev.push(db("east", 100, false, vec![pg()[0].clone(), metrics(9090)]));
    ev.push(db_slice("west", pg(), &[("10.1.0.1", None, true)]));
    ev.push(db_slice(
        "east",
        vec![pg()[0].clone(), metrics(9090)],
        &[("10.2.0.1", None, true), ("10.2.0.2", None, false)],
    ));
    ev
}

fn derived(headless: bool, ports: Value) -> Value {
    let mut spec = json!({ "ports": ports });
    if headless {
        spec["clusterIP"] = json!("None");
    }
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "derived-db", "namespace": "data",
            "labels": {MB: "clusterset-dns", "multicluster.kubernetes.io/service-name": "db"}
        },
        "spec": spec
    })
}

fn pg_json() -> Value {
    json!({"name": "pg", "protocol": "TCP", "port": 5432})
}

fn metrics_json(p: u16) -> Value {
    json!({"name": "metrics", "protocol": "TCP", "port": p})
}

/// A member's slice of `derived-db`: `cluster` the cluster's name, `id`
/// its MCS id.
fn member_slice(cluster: &str, id: &str, endpoints: Value, ports: Value) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("derived-db-{id}-v4-0"), "namespace": "data",
            "labels": {
                MB: "clusterset-dns",
                "clusterset-dns.io/cluster": cluster,
                "kubernetes.io/service-name": "derived-db",
                "endpointslice.kubernetes.io/managed-by": "clusterset-dns.io/mirror",
                "multicluster.kubernetes.io/service-name": "db",
                "multicluster.kubernetes.io/source-cluster": id
            }
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports
    })
}

fn ep(ip: &str, ready: bool) -> Value {
    json!({"addresses": [ip], "conditions": {"ready": ready}})
}

fn named_ep(ip: &str, host: &str) -> Value {
    json!({"addresses": [ip], "conditions": {"ready": true}, "hostname": host})
}

/// The ServiceImport `db` defined by `definer`'s export; IPv4 `ips`
/// (with their family in v1beta1).
fn import(version: &str, kind: &str, ports: Value, ips: Option<Value>, definer: &str) -> Value {
    let mut spec = json!({"type": kind, "ports": ports});
    if let Some(ips) = ips {
        if version == "v1beta1" {
            let n = ips.as_array().map_or(0, Vec::len);
            spec["ipFamilies"] = json!(vec!["IPv4"; n]);
        }
        spec["ips"] = ips;
    }
    json!({
        "apiVersion": format!("multicluster.x-k8s.io/{version}"), "kind": "ServiceImport",
        "metadata": {
            "name": "db", "namespace": "data",
            "labels": {MB: "clusterset-dns", "multicluster.kubernetes.io/service-name": "db"},
            "annotations": {"clusterset-dns.io/defined-by": definer}
        },
        "spec": spec
    })
}

/// The objects of [`clusterset_ip`], east's endpoints `east_ready`.
fn clusterset_ip_objects(ips: Option<Value>, east_ready: bool) -> Vec<Value> {
    let union = json!([pg_json(), metrics_json(9090)]);
    vec![
        derived(false, union.clone()),
        member_slice(
            "east",
            "east",
            json!([ep("10.2.0.1", east_ready)]),
            json!([metrics_json(9090), pg_json()]),
        ),
        member_slice(
            "west",
            "west",
            json!([ep("10.1.0.1", true)]),
            json!([pg_json()]),
        ),
        import("v1beta1", "ClusterSetIP", union, ips, "west"),
    ]
}

/// east (oldest) and west export a headless `db`; east's id comes from its
/// ClusterProperty; one pod with a hostname, one without.
fn headless() -> Vec<Event> {
    let mut ev = clusters(&[("west", true), ("east", false)]);
    ev.push(Event::ClusterIdApplied {
        cluster: c("east"),
        id: Some(c("east-eu")),
    });
    ev.push(db("east", 100, true, pg()));
    ev.push(db("west", 200, true, pg()));
    ev.push(db_slice(
        "east",
        pg(),
        &[("10.2.0.1", Some("db-0"), true), ("10.2.0.2", None, true)],
    ));
    ev.push(db_slice("west", pg(), &[("10.1.0.1", Some("db-0"), true)]));
    ev
}

#[test]
fn mcs_objects() {
    let cases = vec![
        Case {
            name: "--mcs off: no MCS objects",
            events: clusterset_ip(),
            settings: defaults,
            want: vec![],
            problems: vec![],
        },
        Case {
            name: "ClusterSetIP: derived Service with the union ports (oldest export first), a slice set per member with its ready pods, the import without ips until the ClusterIP is known",
            events: clusterset_ip(),
            settings: mcs_on,
            want: clusterset_ip_objects(None, true),
            problems: vec![],
        },
        Case {
            name: "ClusterSetIP: the import's ips are the derived Service's ClusterIP as read back",
            events: clusterset_ip(),
            settings: with_ip,
            want: clusterset_ip_objects(Some(json!(["10.96.0.5"])), true),
            problems: vec![],
        },
        Case {
            name: "v1alpha1 where the cluster serves only that",
            events: clusterset_ip(),
            settings: |s| {
                with_ip(s);
                s.mcs.import_version = Some(Arc::from("v1alpha1"));
            },
            want: {
                let mut objects = clusterset_ip_objects(Some(json!(["10.96.0.5"])), true);
                objects[3]["apiVersion"] = json!("multicluster.x-k8s.io/v1alpha1");
                // v1alpha1 has no ipFamilies.
                if let Some(spec) = objects[3]["spec"].as_object_mut() {
                    spec.remove("ipFamilies");
                }
                objects
            },
            problems: vec![],
        },
        Case {
            name: "a cluster that serves no ServiceImport: derived Service and slices only",
            events: clusterset_ip(),
            settings: |s| {
                with_ip(s);
                s.mcs.import_version = None;
            },
            want: {
                let mut objects = clusterset_ip_objects(None, true);
                objects.pop();
                objects
            },
            problems: vec![],
        },
        Case {
            name: "a member whose watch is broken past the grace keeps its slices, not ready",
            events: {
                let mut ev = clusterset_ip();
                ev.push(health("east", None, Some(base())));
                ev
            },
            settings: with_ip,
            want: clusterset_ip_objects(Some(json!(["10.96.0.5"])), false),
            problems: vec![],
        },
        Case {
            name: "every member ineligible: all ready (fail open, as DNS answers)",
            events: {
                let mut ev = clusterset_ip();
                ev.push(health("east", Some(false), None));
                ev.push(health("west", None, Some(base())));
                ev
            },
            settings: with_ip,
            want: clusterset_ip_objects(Some(json!(["10.96.0.5"])), true),
            problems: vec![],
        },
        Case {
            name: "headless: clusterIP None, hostnames else the dashed IP, slices named and labelled by the ClusterProperty id, a Headless import without ips",
            events: headless(),
            settings: with_ip,
            want: vec![
                derived(true, json!([pg_json()])),
                member_slice(
                    "east",
                    "east-eu",
                    json!([
                        named_ep("10.2.0.1", "db-0"),
                        named_ep("10.2.0.2", "10-2-0-2")
                    ]),
                    json!([pg_json()]),
                ),
                member_slice(
                    "west",
                    "west",
                    json!([named_ep("10.1.0.1", "db-0")]),
                    json!([pg_json()]),
                ),
                import("v1beta1", "Headless", json!([pg_json()]), None, "west"),
            ],
            problems: vec![],
        },
        Case {
            name: "type conflict: the senior export's type wins, the other member is left out",
            events: {
                // east is linked before north; north's 1970 export (a
                // forged creationTimestamp) does not make it the oldest.
                let mut ev = clusters(&[("west", true), ("east", false), ("north", false)]);
                ev.push(db("east", 100, true, pg()));
                ev.push(db("north", 0, false, pg()));
                ev.push(db_slice("east", pg(), &[("10.2.0.1", Some("db-0"), true)]));
                ev.push(db_slice("north", pg(), &[("10.3.0.1", None, true)]));
                ev
            },
            settings: with_ip,
            want: vec![
                derived(true, json!([pg_json()])),
                member_slice(
                    "east",
                    "east",
                    json!([named_ep("10.2.0.1", "db-0")]),
                    json!([pg_json()]),
                ),
                import("v1beta1", "Headless", json!([pg_json()]), None, "east"),
            ],
            problems: vec![],
        },
        Case {
            name: "port conflict: the oldest export's number wins; each slice keeps its own endpoint ports",
            events: {
                let mut ev = clusters(&[("west", true), ("east", false)]);
                ev.push(db("west", 100, false, vec![metrics(9090)]));
                ev.push(db("east", 200, false, vec![metrics(9100)]));
                ev.push(db_slice(
                    "west",
                    vec![metrics(9090)],
                    &[("10.1.0.1", None, true)],
                ));
                ev.push(db_slice(
                    "east",
                    vec![metrics(9100)],
                    &[("10.2.0.1", None, true)],
                ));
                ev
            },
            settings: mcs_on,
            want: vec![
                derived(false, json!([metrics_json(9090)])),
                member_slice(
                    "east",
                    "east",
                    json!([ep("10.2.0.1", true)]),
                    json!([metrics_json(9100)]),
                ),
                member_slice(
                    "west",
                    "west",
                    json!([ep("10.1.0.1", true)]),
                    json!([metrics_json(9090)]),
                ),
                import(
                    "v1beta1",
                    "ClusterSetIP",
                    json!([metrics_json(9090)]),
                    None,
                    "west",
                ),
            ],
            problems: vec![],
        },
        Case {
            name: "a cluster claiming an id another cluster known first holds is left out",
            events: {
                let mut ev = clusterset_ip();
                ev.extend(up("north", false));
                ev.push(Event::ClusterIdApplied {
                    cluster: c("north"),
                    id: Some(c("east")),
                });
                ev.push(db("north", 50, false, pg()));
                ev.push(db_slice("north", pg(), &[("10.3.0.1", None, true)]));
                ev
            },
            settings: mcs_on,
            want: clusterset_ip_objects(None, true),
            problems: vec![],
        },
        Case {
            name: "a member with no ready endpoint has no slices; the import stays",
            events: {
                let mut ev = clusters(&[("west", true), ("east", false)]);
                ev.push(db("east", 100, false, pg()));
                ev.push(db_slice("east", pg(), &[("10.2.0.1", None, false)]));
                ev
            },
            settings: mcs_on,
            want: vec![
                derived(false, json!([pg_json()])),
                import("v1beta1", "ClusterSetIP", json!([pg_json()]), None, "east"),
            ],
            problems: vec![],
        },
        Case {
            name: "a ClusterSetIP service without ports: nothing, reported",
            events: {
                let mut ev = clusters(&[("west", true), ("east", false)]);
                ev.push(db("east", 100, false, vec![]));
                ev
            },
            settings: mcs_on,
            want: vec![],
            problems: vec![("derived-db", "no ports")],
        },
        Case {
            name: "the definer's fields: families, affinity, traffic policy and distribution, exported labels",
            events: copied_fields(None),
            settings: dual_ips,
            want: copied_fields_objects(
                "east",
                json!(["IPv4", "IPv6"]),
                json!(["10.96.0.5", "fd00:96::5"]),
            ),
            problems: vec![],
        },
        Case {
            name: "the local ServiceImport's definer keeps defining it though the local export is senior",
            events: copied_fields(Some("east")),
            settings: dual_ips,
            want: copied_fields_objects(
                "east",
                json!(["IPv4", "IPv6"]),
                json!(["10.96.0.5", "fd00:96::5"]),
            ),
            problems: vec![],
        },
    ];
    for case in cases {
        check(case);
    }
}

/// MCS on; `derived-db` got an IPv4 and an IPv6 ClusterIP.
fn dual_ips(s: &mut MirrorSettings) {
    mcs_on(s);
    let ips = BTreeMap::from([(
        ObjectKey::new("data", "db"),
        vec![
            "10.96.0.5".parse().expect("ip"),
            "fd00:96::5".parse().expect("ip"),
        ],
    )]);
    s.mcs.derived_ips = Arc::new(ips);
}

/// east exports a dual-stack `db` with ClientIP affinity, policies and
/// exported labels; with `definer`, west (local, so senior) exports a
/// single-stack `db` too and the local ServiceImport names `definer`.
fn copied_fields(definer: Option<&str>) -> Vec<Event> {
    use crate::model::objects::{
        Affinity, ExportedMeta, Families, Family, Import, ImportFields, TrafficDistribution,
        TrafficPolicy,
    };
    let mut ev = clusters(&[("west", true), ("east", false)]);
    let mut s = service("data", "db", None, false, false, &[], pg());
    s.mcs = Some(100);
    s.import_fields = ImportFields {
        families: Families::new([Family::V4, Family::V6]),
        affinity: Affinity::ClientIp(Some(10)),
        internal_traffic_policy: Some(TrafficPolicy::Cluster),
        traffic_distribution: Some(TrafficDistribution::PreferClose),
    };
    s.exported_meta = Some(Arc::new(ExportedMeta {
        labels: [("dummy-label".to_owned(), "true".to_owned())].into(),
        annotations: [("dummy-annotation".to_owned(), "true".to_owned())].into(),
    }));
    ev.push(svc_event("east", s));
    if let Some(definer) = definer {
        let mut west = service("data", "db", None, false, false, &[], pg());
        west.mcs = Some(50);
        west.import_fields.affinity = Affinity::Off;
        ev.push(svc_event("west", west));
        ev.push(Event::ImportApplied {
            cluster: c("west"),
            import: Import {
                key: ObjectKey::new("data", "db"),
                ips: vec![],
                defined_by: Some(c(definer)),
            },
        });
    }
    ev
}

/// The derived Service and import of [`copied_fields`], no slices.
fn copied_fields_objects(definer: &str, families: Value, ips: Value) -> Vec<Value> {
    let mut derived = derived(false, json!([pg_json()]));
    derived["spec"]["ipFamilyPolicy"] = json!("PreferDualStack");
    derived["spec"]["sessionAffinity"] = json!("ClientIP");
    derived["spec"]["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10}});
    derived["spec"]["trafficDistribution"] = json!("PreferClose");
    let mut import = import(
        "v1beta1",
        "ClusterSetIP",
        json!([pg_json()]),
        Some(ips),
        definer,
    );
    import["spec"]["ipFamilies"] = families;
    import["spec"]["sessionAffinity"] = json!("ClientIP");
    import["spec"]["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10}});
    import["spec"]["internalTrafficPolicy"] = json!("Cluster");
    import["spec"]["trafficDistribution"] = json!("PreferClose");
    import["metadata"]["labels"]["dummy-label"] = json!("true");
    import["metadata"]["annotations"]["dummy-annotation"] = json!("true");
    vec![derived, import]
}

/// `clusterset_ip` with east's place (from `from`) as given.
fn placed_east(
    from: crate::vocab::place::PlaceFrom,
    region: &str,
    zone: Option<&str>,
) -> Vec<Event> {
    let mut ev = clusterset_ip();
    ev.push(Event::PlaceApplied {
        cluster: c("east"),
        from,
        place: Place {
            region: Some(Arc::from(region)),
            zone: zone.map(Arc::from),
        },
    });
    ev
}

/// The objects of [`clusterset_ip`] (no ips), east's endpoint in
/// `east_zone` and west's in `west_zone`, each with its hint, where given.
fn zoned_objects(east_zone: Option<&str>, west_zone: Option<&str>) -> Vec<Value> {
    let mut objects = clusterset_ip_objects(None, true);
    for (i, zone) in [(1, east_zone), (2, west_zone)] {
        if let Some(z) = zone {
            let ep = &mut objects[i]["endpoints"][0];
            ep["zone"] = json!(z);
            ep["hints"] = json!({"forZones": [{"name": z}]});
        }
    }
    objects
}

/// MCS on; the local cluster (west) is in zone `eu-1b`.
fn mcs_in_eu_1b(s: &mut MirrorSettings) {
    mcs_on(s);
    s.local_place = Place {
        region: Some(Arc::from("eu")),
        zone: Some(Arc::from("eu-1b")),
    };
}

#[test]
fn mcs_slices_carry_their_clusters_zone() {
    use crate::vocab::place::PlaceFrom::{Configured, Property};
    let cases = vec![
        Case {
            name: "each member's endpoints in its cluster's zone, with a hint for it; the local cluster's from the settings",
            events: placed_east(Configured, "eu", Some("eu-1a")),
            settings: mcs_in_eu_1b,
            want: zoned_objects(Some("eu-1a"), Some("eu-1b")),
            problems: vec![],
        },
        Case {
            name: "a zone from the cluster's ClusterProperty; a cluster whose zone is unknown gets none",
            events: placed_east(Property, "eu", Some("eu-1c")),
            settings: mcs_on,
            want: zoned_objects(Some("eu-1c"), None),
            problems: vec![],
        },
        Case {
            name: "a configured place without a zone: none (a configured place wins whole)",
            events: {
                let mut ev = placed_east(Property, "eu", Some("eu-1c"));
                ev.extend(placed_east(Configured, "eu", None).pop());
                ev
            },
            settings: mcs_on,
            want: zoned_objects(None, None),
            problems: vec![],
        },
        Case {
            name: "no place anywhere: no zone, no hints (as before)",
            events: clusterset_ip(),
            settings: mcs_on,
            want: zoned_objects(None, None),
            problems: vec![],
        },
    ];
    for case in cases {
        check(case);
    }
}

#[test]
fn refused_member_holds_the_derived_service() {
    let mut ev = clusterset_ip();
    let mut s = service("data", "db", None, false, false, &[], pg());
    s.mcs = Some(300);
    s.refused = true;
    ev.extend(up("north", false));
    ev.push(svc_event("north", s));
    let set = build(ev);
    let held = held_by_budget(&set);
    assert!(
        held.contains(&(Arc::from("data"), Arc::from("derived-db"))),
        "{held:?}"
    );
}

#[test]
fn derived_names_fit_a_label() {
    let long = "s".repeat(60);
    let name = mcs::derived_name(&long);
    assert_eq!(name.len(), 63);
    assert!(name.starts_with("derived-sss"), "{name}");
    assert_eq!(mcs::derived_name("db"), "derived-db");
}

#[test]
fn derived_ips_are_read_back_from_our_derived_services() {
    let svc = |name: &str| ObjectRef {
        kind: Kind::Service,
        namespace: "data".into(),
        name: name.into(),
    };
    let label = |mcs: &str, spec: Value| -> k8s_openapi::api::core::v1::Service {
        serde_json::from_value(json!({"metadata": {"labels": {"multicluster.kubernetes.io/service-name": mcs}}, "spec": spec}))
            .expect("a Service")
    };
    let objects = [
        (
            svc("derived-db"),
            label(
                "db",
                json!({"clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5", "fd00::5"]}),
            ),
        ),
        (
            svc("derived-web"),
            label("web", json!({"clusterIP": "10.96.0.6"})),
        ),
        // Headless, not allocated yet, or not the derived name of its label.
        (
            svc("derived-hl"),
            label("hl", json!({"clusterIP": "None", "clusterIPs": ["None"]})),
        ),
        (svc("derived-new"), label("new", json!({}))),
        (
            svc("web-east"),
            label("web2", json!({"clusterIP": "10.96.0.7"})),
        ),
        (
            svc("derived-x"),
            serde_json::from_value(json!({"spec": {"clusterIP": "10.96.0.8"}})).expect("a Service"),
        ),
    ];
    let got = mcs::derived_ips(objects.iter().map(|(k, v)| (k, v)));
    let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
    assert_eq!(
        got,
        BTreeMap::from([
            (
                ObjectKey::new("data", "db"),
                vec![ip("10.96.0.5"), ip("fd00::5")]
            ),
            (ObjectKey::new("data", "web"), vec![ip("10.96.0.6")]),
        ])
    );
}
