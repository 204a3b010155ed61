use super::*;
use crate::model::objects::{ExportMode, Gateway, Mirror, Protocol, Service};
use crate::model::testing::{
    c, epoch, fixture_events, port, service, settings, slice, slice_event, svc_event, t0, up,
};
use crate::model::{Event, Model};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn model() -> Model {
    let mut m = Model::new(Arc::new(settings()), epoch());
    m.clusters_known(t0());
    m
}

fn addrs(snap: &Snapshot, key: &str) -> Option<Vec<String>> {
    snap.entries.get(key).map(|e| {
        let mut v: Vec<String> = e
            .v4()
            .iter()
            .map(ToString::to_string)
            .chain(e.v6().iter().map(ToString::to_string))
            .collect();
        v.sort();
        v
    })
}

fn flat(ns: &str, name: &str, created: i64) -> Service {
    let mut s = service(
        ns,
        name,
        Some(ExportMode::Flat),
        false,
        false,
        &[],
        vec![port(Some("http"), Protocol::Tcp, 80)],
    );
    s.created = created;
    s
}

fn endpoint_slice(cluster: &str, ns: &str, svc: &str, ip: &str) -> Event {
    slice_event(
        cluster,
        slice(
            ns,
            &format!("{svc}-x"),
            svc,
            vec![port(Some("http"), Protocol::Tcp, 80)],
            &[(ip, None, true)],
        ),
    )
}

#[test]
fn the_senior_cluster_wins_a_collision() {
    // `c` is known first. `b-c` claims 1970 for its Service (the
    // creationTimestamp a compromised API server writes), which would win
    // by age: the cluster's seniority decides, not the remote time.
    let mut m = model();
    let mut ev = up("c", false);
    ev.extend(up("b-c", false));
    ev.push(svc_event("c", flat("prod", "a-b", 100)));
    ev.push(endpoint_slice("c", "prod", "a-b", "10.50.0.1"));
    ev.push(svc_event("b-c", flat("prod", "a", 0)));
    ev.push(endpoint_slice("b-c", "prod", "a", "10.60.0.1"));
    m.apply(ev, t0());
    let snap = m.snapshot();
    assert_eq!(
        addrs(&snap, "a-b-c.prod"),
        Some(vec!["10.50.0.1".to_owned()])
    );
    assert_eq!(snap.stats.collisions, 1);

    // The winner goes away: the other pair takes the name.
    m.apply(
        [Event::ServiceDeleted {
            cluster: c("c"),
            key: ObjectKey::new("prod", "a-b"),
        }],
        t0(),
    );
    let snap = m.snapshot();
    assert_eq!(
        addrs(&snap, "a-b-c.prod"),
        Some(vec!["10.60.0.1".to_owned()])
    );
    assert_eq!(snap.stats.collisions, 0);

    // It comes back, newer by its timestamp: the senior cluster wins again.
    m.apply([svc_event("c", flat("prod", "a-b", 900))], t0());
    assert_eq!(
        addrs(&m.snapshot(), "a-b-c.prod"),
        Some(vec!["10.50.0.1".to_owned()])
    );

    // The local cluster is senior to every linked one, whenever announced:
    // its `a` and c's older `a-d` both make `a-d-c`.
    m.apply(up("d-c", true), t0());
    m.apply(
        [
            svc_event("c", flat("prod", "a-d", 1)),
            endpoint_slice("c", "prod", "a-d", "10.50.0.2"),
            svc_event("d-c", flat("prod", "a", 2000)),
            endpoint_slice("d-c", "prod", "a", "10.70.0.1"),
        ],
        t0(),
    );
    assert_eq!(
        addrs(&m.snapshot(), "a-d-c.prod"),
        Some(vec!["10.70.0.1".to_owned()])
    );
}

#[test]
fn a_federated_name_beats_a_per_cluster_label() {
    // Service `a` in cluster `b-federated` generates `a-b-federated`, which is
    // also the federated name of service `a-b`.
    let mut m = model();
    let mut ev = up("b-federated", false);
    ev.extend(up("east", false));
    ev.push(svc_event("b-federated", flat("prod", "a", 1)));
    ev.push(endpoint_slice("b-federated", "prod", "a", "10.1.0.1"));
    let mut member = flat("prod", "a-b", 500);
    member.federated = true;
    ev.push(svc_event("east", member));
    ev.push(endpoint_slice("east", "prod", "a-b", "10.2.0.1"));
    m.apply(ev, t0());
    let snap = m.snapshot();
    assert_eq!(
        addrs(&snap, "a-b-federated.prod"),
        Some(vec!["10.2.0.1".to_owned()])
    );
    assert!(matches!(
        snap.entries.get("a-b-federated.prod").map(|e| &e.origin),
        Some(Origin::Federated { .. })
    ));
    assert_eq!(snap.stats.collisions, 1);
}

use crate::model::Origin;

#[test]
fn names_over_the_length_limits_are_not_served() {
    let mut m = model();
    let long = "a".repeat(60);
    let mut ev = up("east", false);
    ev.push(svc_event("east", flat("prod", &long, 1)));
    ev.push(endpoint_slice("east", "prod", &long, "10.1.0.1"));
    // A namespace long enough to push the whole name past 253.
    let ns = "n".repeat(63);
    let svc = "s".repeat(63 - 5);
    let ns2 = "m".repeat(63);
    ev.push(svc_event("east", flat(&ns, &svc, 1)));
    ev.push(svc_event("east", flat(&ns2, "ok", 1)));
    ev.push(endpoint_slice("east", &ns2, "ok", "10.1.0.2"));
    m.apply(ev, t0());
    let snap = m.snapshot();
    assert!(
        snap.entries
            .get(format!("{long}-east.prod").as_str())
            .is_none(),
        "label of 65 octets"
    );
    assert!(
        snap.entries
            .get(format!("ok-east.{ns2}").as_str())
            .is_some()
    );
    // 58 + 5 = 63-octet label: the label fits, and so does the name (63+1+63+5+16 = 148).
    assert!(
        snap.entries
            .get(format!("{svc}-east.{ns}").as_str())
            .is_some()
    );
    assert_eq!(snap.stats.too_long, 1);
}

#[test]
fn a_federated_name_too_long_is_forgotten_once_nobody_federates_it() {
    let mut m = model();
    // `<56>-east` fits in a label of 63; `<56>-federated` and `<56>-nearest`
    // do not.
    let long = "f".repeat(56);
    let mut federated = flat("prod", &long, 1);
    federated.federated = true;
    let mut ev = up("east", false);
    ev.push(svc_event("east", federated));
    ev.push(endpoint_slice("east", "prod", &long, "10.1.0.1"));
    m.apply(ev, t0());
    let snap = m.snapshot();
    assert!(
        snap.entries
            .get(format!("{long}-east.prod").as_str())
            .is_some()
    );
    assert_eq!(snap.stats.too_long, 2, "the federated and nearest names");

    m.apply([svc_event("east", flat("prod", &long, 1))], t0());
    let snap = m.snapshot();
    assert!(
        snap.entries
            .get(format!("{long}-east.prod").as_str())
            .is_some()
    );
    assert_eq!(snap.stats.too_long, 0, "not federated any more");
}

#[test]
fn a_change_rebuilds_only_its_own_names() {
    let mut m = model();
    m.apply(fixture_events(), t0());
    let before = m.snapshot();
    m.apply(
        [slice_event(
            "north",
            slice(
                "prod",
                "api-v4",
                "api",
                vec![port(Some("http"), Protocol::Tcp, 8080)],
                &[("10.20.1.1", None, true), ("10.20.1.9", None, true)],
            ),
        )],
        t0(),
    );
    let after = m.snapshot();
    assert!(after.serial > before.serial, "serial strictly increases");
    for (key, entry) in &before.entries {
        let same = Arc::ptr_eq(entry, &after.entries[key]);
        assert_eq!(
            same,
            &**key != "api-north.prod",
            "{key}: rebuilt = {}",
            !same
        );
    }
    assert_eq!(
        addrs(&after, "api-north.prod"),
        Some(vec![
            "10.20.1.1".to_owned(),
            "10.20.1.9".to_owned(),
            "fd00:20::1".to_owned()
        ])
    );
    // The reverse map follows: 10.20.1.2 is gone, 10.20.1.9 is there.
    assert!(
        !after
            .reverse
            .contains_key(&"10.20.1.2".parse::<IpAddr>().expect("ip"))
    );
    assert!(
        after
            .reverse
            .contains_key(&"10.20.1.9".parse::<IpAddr>().expect("ip"))
    );
}

#[test]
fn a_mirror_or_gateway_change_updates_gateway_mode_names() {
    let mut m = model();
    m.apply(fixture_events(), t0());
    assert_eq!(
        addrs(&m.snapshot(), "pay-east.prod"),
        Some(vec!["203.0.113.10".to_owned()])
    );
    // A mirror appears in the local cluster: its ClusterIP is now the answer.
    m.apply(
        [Event::MirrorApplied {
            cluster: c("west"),
            mirror: Mirror {
                key: ObjectKey::new("prod", "pay-east"),
                cluster: c("east"),
                headless_parent: None,
                cluster_ips: vec!["10.96.10.3".parse().expect("ip")],
                ports: vec![port(Some("http"), Protocol::Tcp, 80)],
            },
        }],
        t0(),
    );
    assert_eq!(
        addrs(&m.snapshot(), "pay-east.prod"),
        Some(vec!["10.96.10.3".to_owned()])
    );
    m.apply(
        [Event::MirrorDeleted {
            cluster: c("west"),
            key: ObjectKey::new("prod", "pay-east"),
        }],
        t0(),
    );
    assert_eq!(
        addrs(&m.snapshot(), "pay-east.prod"),
        Some(vec!["203.0.113.10".to_owned()])
    );
    m.apply(
        [Event::GatewayApplied {
            cluster: c("east"),
            gateway: Some(Gateway {
                addresses: vec!["203.0.113.99".parse().expect("ip")],
                port: Some(4143),
                identity: None,
            }),
        }],
        t0(),
    );
    assert_eq!(
        addrs(&m.snapshot(), "pay-east.prod"),
        Some(vec!["203.0.113.99".to_owned()])
    );
}

#[test]
fn cluster_down_removes_its_names_and_namespaces() {
    let mut m = model();
    m.apply(fixture_events(), t0());
    let snap = m.snapshot();
    assert!(snap.entries.contains_key("api-north.prod"));
    assert!(snap.namespaces.contains_key("shop"));
    m.apply(
        [
            Event::ClusterDown { cluster: c("west") },
            Event::ClusterDown {
                cluster: c("north"),
            },
        ],
        t0(),
    );
    let snap = m.snapshot();
    assert!(!snap.entries.contains_key("api-north.prod"));
    assert!(
        !snap.namespaces.contains_key("shop"),
        "only west exported into shop"
    );
    // west's mirror is gone: web-east falls back to east's gateway.
    assert_eq!(
        addrs(&snap, "web-east.prod"),
        Some(vec!["203.0.113.10".to_owned()])
    );
    assert_eq!(
        addrs(&snap, "bb-federated.prod"),
        Some(vec!["10.10.3.1".to_owned()])
    );
    let names: u64 = snap.entries.values().map(|e| e.name_count() as u64).sum();
    assert_eq!(
        snap.stats.names, names,
        "the names gauge matches the entries"
    );
}

#[test]
fn ptr_goes_to_the_senior_claim() {
    // Across clusters the one known first keeps an address's PTR, however
    // old the other claims its Service is (a compromised cluster writes
    // 1970); within one cluster the older Service does.
    let mut m = model();
    let mut ev = up("east", false);
    ev.extend(up("north", false));
    ev.push(svc_event("east", flat("prod", "young", 300)));
    ev.push(endpoint_slice("east", "prod", "young", "10.9.9.9"));
    ev.push(svc_event("north", flat("prod", "forged", 0)));
    ev.push(endpoint_slice("north", "prod", "forged", "10.9.9.9"));
    ev.push(svc_event("east", flat("prod", "old", 100)));
    ev.push(endpoint_slice("east", "prod", "old", "10.9.9.9"));
    m.apply(ev, t0());
    let ip: IpAddr = "10.9.9.9".parse().expect("ip");
    let ptr = |m: &Model| m.snapshot().reverse.get(&ip).map(ToString::to_string);
    assert_eq!(
        ptr(&m),
        Some("old-east.prod.svc.clusterset.local".to_owned())
    );
    m.apply(
        [Event::ServiceDeleted {
            cluster: c("east"),
            key: ObjectKey::new("prod", "old"),
        }],
        t0(),
    );
    assert_eq!(
        ptr(&m),
        Some("young-east.prod.svc.clusterset.local".to_owned())
    );
    m.apply(
        [Event::ServiceDeleted {
            cluster: c("east"),
            key: ObjectKey::new("prod", "young"),
        }],
        t0(),
    );
    assert_eq!(
        ptr(&m),
        Some("forged-north.prod.svc.clusterset.local".to_owned())
    );
}

/// A comparable view of a snapshot: entries, namespaces, reverse map, stats.
type View = (
    BTreeMap<String, Entry>,
    BTreeMap<String, u32>,
    BTreeMap<IpAddr, String>,
    IndexStats,
);

fn view(snap: &Snapshot) -> View {
    (
        snap.entries
            .iter()
            .map(|(k, v)| {
                let mut e = (**v).clone();
                // Ids depend on the order clusters first appeared.
                if let Origin::Cluster { id, .. } = &mut e.origin {
                    *id = 0;
                }
                (k.to_string(), e)
            })
            .collect(),
        snap.namespaces
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        snap.reverse
            .iter()
            .map(|(k, v)| (*k, v.to_string()))
            .collect(),
        snap.stats,
    )
}

/// Events that rebuild `set` from nothing.
fn events_for(set: &ClusterSet) -> Vec<Event> {
    // Announced in the order they were first (their ids): which cluster is
    // senior decides collisions.
    let mut clusters: Vec<_> = set.iter().collect();
    clusters.sort_by_key(|c| c.id);
    let mut ev: Vec<Event> = clusters
        .iter()
        .map(|cl| Event::ClusterUp {
            cluster: cl.name.clone(),
            local: cl.local,
        })
        .collect();
    for cl in set.iter() {
        ev.push(Event::Health {
            cluster: cl.name.clone(),
            health: cl.health.clone(),
        });
        ev.extend(cl.services.values().map(|s| svc_event(&cl.name, s.clone())));
        for group in cl.slices.values() {
            ev.extend(group.iter().map(|s| slice_event(&cl.name, s.clone())));
        }
        ev.extend(cl.mirrors.values().map(|mi| Event::MirrorApplied {
            cluster: cl.name.clone(),
            mirror: mi.clone(),
        }));
        ev.push(Event::GatewayApplied {
            cluster: cl.name.clone(),
            gateway: cl.gateway.clone(),
        });
        ev.push(Event::PlaceApplied {
            cluster: cl.name.clone(),
            from: crate::vocab::place::PlaceFrom::Property,
            place: cl.property_place.clone(),
        });
    }
    ev
}

fn op() -> impl Strategy<Value = Event> {
    let cluster = prop_oneof![Just("a"), Just("b"), Just("a-b"), Just("local")];
    let name = prop_oneof![Just("s"), Just("b-s"), Just("s-a"), Just("t")];
    let ns = prop_oneof![Just("n1"), Just("n2")];
    let mode = prop_oneof![
        Just(None),
        Just(Some(ExportMode::Flat)),
        Just(Some(ExportMode::Gateway))
    ];
    let ip = prop_oneof![
        3 => (1u8..4, 1u8..4).prop_map(|(x, y)| format!("10.0.{x}.{y}")),
        1 => (1u8..4).prop_map(|x| format!("fd00::{x}")),
    ];
    // Two slices per service, so a change of one keeps the other's part.
    let slice_no = 1u8..3;
    prop_oneof![
        (
            cluster.clone(),
            ns.clone(),
            name.clone(),
            mode,
            any::<bool>(),
            any::<bool>(),
            0i64..4,
            any::<bool>(),
            0u32..3
        )
            .prop_map(
                |(cl, ns, name, export, federated, headless, created, not_ready, min_ready)| {
                    let mut s = service(
                        ns,
                        name,
                        export,
                        federated,
                        headless,
                        &["10.96.0.1"],
                        vec![port(Some("http"), Protocol::Tcp, 80)],
                    );
                    s.created = created;
                    // Changes the part of every slice without changing a slice.
                    s.publish_not_ready = not_ready;
                    // Nearest names under a min-ready rule (0: none).
                    s.locality = (min_ready > 0).then(|| {
                        Arc::new(crate::vocab::place::Rule {
                            order: None,
                            min_ready,
                        })
                    });
                    svc_event(cl, s)
                }
            ),
        (cluster.clone(), ns.clone(), name.clone()).prop_map(|(cl, ns, name)| {
            Event::ServiceDeleted {
                cluster: c(cl),
                key: ObjectKey::new(ns, name),
            }
        }),
        (
            cluster.clone(),
            ns.clone(),
            name.clone(),
            slice_no.clone(),
            proptest::collection::vec((ip, any::<bool>(), any::<bool>()), 0..3)
        )
            .prop_map(|(cl, ns, name, k, eps)| {
                let eps: Vec<(String, Option<String>, bool)> = eps
                    .into_iter()
                    .enumerate()
                    .map(|(i, (ip, named, ready))| (ip, named.then(|| format!("p-{i}")), ready))
                    .collect();
                let refs: Vec<(&str, Option<&str>, bool)> = eps
                    .iter()
                    .map(|(ip, h, r)| (ip.as_str(), h.as_deref(), *r))
                    .collect();
                slice_event(
                    cl,
                    slice(
                        ns,
                        &format!("{name}-{k}"),
                        name,
                        vec![port(Some("http"), Protocol::Tcp, 80)],
                        &refs,
                    ),
                )
            }),
        (
            cluster.clone(),
            prop_oneof![Just(None), Just(Some("eu")), Just(Some("us"))]
        )
            .prop_map(|(cl, region)| Event::PlaceApplied {
                cluster: c(cl),
                from: crate::vocab::place::PlaceFrom::Property,
                place: Place::parse(region, None).expect("region"),
            }),
        (cluster.clone(), ns.clone(), name.clone(), slice_no).prop_map(|(cl, ns, name, k)| {
            Event::SliceDeleted {
                cluster: c(cl),
                key: ObjectKey::new(ns, &format!("{name}-{k}")),
            }
        }),
        (ns, name).prop_map(|(ns, name)| Event::MirrorApplied {
            cluster: c("local"),
            mirror: Mirror {
                key: ObjectKey::new(ns, &format!("{name}-a")),
                cluster: c("a"),
                headless_parent: None,
                cluster_ips: vec!["10.96.9.9".parse().expect("ip")],
                ports: Vec::new(),
            },
        }),
        cluster
            .clone()
            .prop_map(|cl| Event::ClusterDown { cluster: c(cl) }),
        (cluster, any::<bool>()).prop_map(|(cl, alive)| Event::Health {
            cluster: c(cl),
            health: Health {
                synced: true,
                broken_since: None,
                gateway_alive: Some(alive),
                sync_given_up: false,
            },
        }),
    ]
}

use crate::model::{ClusterSet, Health};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Applying events one by one (incremental updates) gives the same index
    /// as building it from the final state in one go.
    #[test]
    fn incremental_equals_rebuilt(ops in proptest::collection::vec(op(), 1..40)) {
        let mut incremental = model();
        for cl in ["a", "b", "a-b"] {
            incremental.apply(up(cl, false), t0());
        }
        incremental.apply(up("local", true), t0());
        for e in ops {
            // Clusters that went down come back before they are used again.
            let name = e.cluster().clone();
            if incremental.clusters().get(&name).is_none() && !matches!(e, Event::ClusterDown { .. }) {
                incremental.apply(up(&name, &*name == "local"), t0());
            }
            incremental.apply([e], t0());
        }
        let mut rebuilt = model();
        rebuilt.apply(events_for(incremental.clusters()), t0());
        prop_assert_eq!(view(&incremental.snapshot()), view(&rebuilt.snapshot()));
    }
}

#[test]
fn a_broken_member_leaves_federated_names_when_the_grace_expires() {
    use std::time::Duration;
    let mut s = settings();
    s.federated_grace = Duration::from_secs(30);
    let mut m = Model::new(Arc::new(s), epoch());
    m.apply(fixture_events(), t0());
    let broke = t0() + Duration::from_secs(5);
    m.apply(
        [Event::Health {
            cluster: c("east"),
            health: Health {
                synced: true,
                broken_since: Some(broke),
                gateway_alive: None,
                sync_given_up: false,
            },
        }],
        broke,
    );
    let members = |m: &Model| addrs(&m.snapshot(), "bb-federated.prod").map(|v| v.len());
    assert_eq!(members(&m), Some(3), "within the grace east stays");
    let edge = broke + Duration::from_secs(30);
    assert!(!m.tick(edge), "a member stays for the whole grace");
    assert_eq!(members(&m), Some(3));
    let serial = m.snapshot().serial;
    assert!(m.tick(edge + Duration::from_millis(1)), "the grace expired");
    assert_eq!(members(&m), Some(2));
    assert!(m.snapshot().serial > serial);
    assert!(!m.tick(edge + Duration::from_secs(1)), "and only once");
}

#[test]
fn serials_start_at_the_epoch_and_follow_the_clock_they_are_given() {
    use crate::model::testing::T0_UNIX;
    use std::time::Duration;
    let mut m = Model::new(Arc::new(settings()), epoch());
    assert_eq!(m.snapshot().serial, T0_UNIX);
    m.clusters_known(t0());
    assert_eq!(m.snapshot().serial, T0_UNIX + 1, "one change, one step");
    m.apply(fixture_events(), t0() + Duration::from_secs(100));
    assert_eq!(
        m.snapshot().serial,
        T0_UNIX + 100,
        "never behind the epoch's wall clock"
    );
    m.apply(up("late", false), t0());
    assert_eq!(
        m.snapshot().serial,
        T0_UNIX + 101,
        "an earlier now still moves it on"
    );
}

#[test]
fn new_settings_rebuild_every_name_and_keep_the_serial_rising() {
    let mut m = model();
    m.apply(fixture_events(), t0());
    let before = m.snapshot();
    let mut s = settings();
    s.zone = ZoneName::new("fleet.example").expect("zone");
    s.ttl = 30;
    assert!(m.set_settings(Arc::new(s), t0()), "answers change");
    let after = m.snapshot();
    assert!(after.serial > before.serial, "the serial keeps rising");
    assert_eq!(after.settings.ttl, 30);
    // The same names, now under the new zone.
    let keys = |snap: &Snapshot| {
        let mut k: Vec<String> = snap.entries.keys().map(ToString::to_string).collect();
        k.sort();
        k
    };
    assert_eq!(keys(&after), keys(&before));
    assert_eq!(
        addrs(&after, "web-east.prod"),
        addrs(&before, "web-east.prod")
    );
    let entry = after.entries.get("db-east.prod").expect("db-east");
    assert!(
        entry.name.ends_with(".fleet.example"),
        "names are rebuilt under the new zone: {}",
        entry.name
    );
    assert_eq!(after.unsynced, before.unsynced);
    assert_eq!(after.stats.names, before.stats.names);
}

#[test]
fn a_budget_alone_is_no_answer_setting_and_rebuilds_nothing() {
    let mut m = model();
    m.apply(fixture_events(), t0());
    let before = m.snapshot();
    let mut s = (**m.settings()).clone();
    s.budget = Budget {
        max_services: 3,
        max_endpoints: 30,
    };
    let later = t0() + Duration::from_secs(5);
    let rebuilt = m.set_settings(Arc::new(s.clone()), later);
    assert!(!rebuilt, "nothing to publish");
    let after = m.snapshot();
    assert_eq!(after.serial, before.serial, "cached answers stay valid");
    assert_eq!(m.settings().budget, s.budget, "the new budget is held");
    assert_eq!(after.stats.names, before.stats.names);
}

/// A nearest name answered by the local tier keeps its very entry when a
/// farther member changes, and follows a change of its own tier; the entry
/// it keeps is the one a full rebuild gives.
#[test]
fn a_change_in_a_farther_tier_keeps_the_nearest_entry() {
    let mut m = model();
    let mut fed = flat("prod", "db", 1);
    fed.federated = true;
    let mut ev = up("west", true);
    ev.extend(up("east", false));
    ev.extend(up("north", false));
    for (cluster, ip) in [
        ("west", "10.0.0.1"),
        ("east", "10.1.0.1"),
        ("north", "10.2.0.1"),
    ] {
        ev.push(svc_event(cluster, fed.clone()));
        ev.push(endpoint_slice(cluster, "prod", "db", ip));
    }
    m.apply(ev, t0());
    let before = m.snapshot();
    let nearest = |s: &Snapshot| s.entries.get("db-nearest.prod").cloned().expect("nearest");
    assert_eq!(
        addrs(&before, "db-nearest.prod").expect("nearest"),
        ["10.0.0.1"]
    );

    m.apply([endpoint_slice("east", "prod", "db", "10.1.0.2")], t0());
    let after = m.snapshot();
    assert!(Arc::ptr_eq(&nearest(&before), &nearest(&after)), "kept");
    assert_eq!(
        addrs(&after, "db-federated.prod").expect("federated"),
        ["10.0.0.1", "10.1.0.2", "10.2.0.1"]
    );
    // A rebuild from scratch (a settings reload) gives the same entry.
    let mut fresh = settings();
    fresh.ttl += 1;
    m.set_settings(Arc::new(fresh), t0());
    assert_eq!(*nearest(&m.snapshot()).parts, *nearest(&after).parts);

    m.apply([endpoint_slice("west", "prod", "db", "10.0.0.2")], t0());
    assert_eq!(
        addrs(&m.snapshot(), "db-nearest.prod").expect("nearest"),
        ["10.0.0.2"]
    );
    // The local tier empties: the rest, both of them.
    m.apply(
        [Event::SliceDeleted {
            cluster: c("west"),
            key: ObjectKey::new("prod", "db-x"),
        }],
        t0(),
    );
    assert_eq!(
        addrs(&m.snapshot(), "db-nearest.prod").expect("nearest"),
        ["10.1.0.2", "10.2.0.1"]
    );
    // A change in the answered tier now rebuilds it.
    m.apply([endpoint_slice("north", "prod", "db", "10.2.0.9")], t0());
    assert_eq!(
        addrs(&m.snapshot(), "db-nearest.prod").expect("nearest"),
        ["10.1.0.2", "10.2.0.9"]
    );
}

/// The memo that spares a plan must not outlive the name: a service that
/// leaves every cluster and comes back gets its nearest name again.
#[test]
fn a_nearest_name_comes_back_with_its_service() {
    let mut m = model();
    let mut fed = flat("prod", "db", 1);
    fed.federated = true;
    let mut ev = up("west", true);
    ev.extend(up("east", false));
    for (cluster, ip) in [("west", "10.0.0.1"), ("east", "10.1.0.1")] {
        ev.push(svc_event(cluster, fed.clone()));
        ev.push(endpoint_slice(cluster, "prod", "db", ip));
    }
    m.apply(ev, t0());
    let gone = |cluster: &str| Event::ServiceDeleted {
        cluster: c(cluster),
        key: ObjectKey::new("prod", "db"),
    };
    m.apply([gone("west"), gone("east")], t0());
    assert_eq!(addrs(&m.snapshot(), "db-nearest.prod"), None);
    m.apply([svc_event("east", fed.clone())], t0());
    assert_eq!(
        addrs(&m.snapshot(), "db-nearest.prod").expect("back"),
        ["10.1.0.1"]
    );
    m.apply([svc_event("west", fed)], t0());
    assert_eq!(
        addrs(&m.snapshot(), "db-nearest.prod").expect("local"),
        ["10.0.0.1"]
    );
    // Far changes keep it; a local one moves it.
    m.apply([endpoint_slice("east", "prod", "db", "10.1.0.2")], t0());
    assert_eq!(
        addrs(&m.snapshot(), "db-nearest.prod").expect("local"),
        ["10.0.0.1"]
    );
    m.apply([endpoint_slice("west", "prod", "db", "10.0.0.2")], t0());
    assert_eq!(
        addrs(&m.snapshot(), "db-nearest.prod").expect("local"),
        ["10.0.0.2"]
    );
}
