//! Table tests in the CoreDNS plugin style: each case names its setup (a
//! clusterset as model events, the settings, the time) and the lines the
//! operator reads, compared with runs of spaces collapsed (the table's
//! alignment is not the point; its cells are).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::model::objects::{ExportMode, Protocol};
use crate::model::testing::{epoch, fixture_events, port, service, settings, slice, svc_event, t0};
use crate::model::{Event, Health, Model, Settings};
use crate::vocab::place::{Place, PlaceFrom, Rule};

/// When every case's events are applied and explained: a minute after
/// start, so a watch can have broken in between.
fn at() -> Instant {
    t0() + Duration::from_secs(60)
}

/// The snapshot and cluster state after start-up (every cluster known at
/// once) and `events`, at [`at`].
fn model_with(settings: Settings, events: Vec<Event>) -> Model {
    let mut model = Model::new(Arc::new(settings), epoch());
    model.clusters_known(t0());
    model.apply(events, at());
    model
}

fn c(name: &str) -> Arc<str> {
    name.into()
}

/// Cluster `name` is known and synced, with `health` on top.
fn cluster(name: &str, local: bool, health: Health) -> Vec<Event> {
    vec![
        Event::ClusterUp {
            cluster: c(name),
            local,
        },
        Event::Health {
            cluster: c(name),
            health: Health {
                synced: true,
                ..health
            },
        },
    ]
}

/// Cluster `name` is in `region` (from the clusters file or its Link).
fn region(name: &str, region: &str) -> Event {
    Event::PlaceApplied {
        cluster: c(name),
        from: PlaceFrom::Configured,
        place: Place::parse(Some(region), None).expect("region"),
    }
}

/// Cluster `name` holds a federated member `shop/cache` (flat, port 6379)
/// with `ready` ready and one not-ready endpoint, its Service carrying
/// `rule` when given.
fn member(name: &str, net: u8, ready: usize, rule: Option<Rule>) -> Vec<Event> {
    let ports = || vec![port(Some("redis"), Protocol::Tcp, 6379)];
    let mut svc = service("shop", "cache", None, true, false, &["10.1.1.1"], ports());
    svc.locality = rule.map(Arc::new);
    let ips: Vec<String> = (0..=ready)
        .map(|i| format!("10.{net}.0.{}", i + 1))
        .collect();
    let eps: Vec<(&str, Option<&str>, bool)> = ips
        .iter()
        .enumerate()
        .map(|(i, ip)| (ip.as_str(), None, i < ready))
        .collect();
    vec![
        svc_event(name, svc),
        Event::SliceApplied {
            cluster: c(name),
            slice: slice("shop", &format!("cache-{name}"), "cache", ports(), &eps),
            trigger: None,
        },
    ]
}

fn healthy() -> Health {
    Health::default()
}

/// Watch broken `secs` before [`at`].
fn broken(secs: u64) -> Health {
    Health {
        broken_since: Some(at() - Duration::from_secs(secs)),
        ..Health::default()
    }
}

fn gateway_dead() -> Health {
    Health {
        gateway_alive: Some(false),
        ..Health::default()
    }
}

/// west (local, eu), east (eu), north (us): `shop/cache` federated in
/// all three with the given ready endpoints and health.
fn three(ready: [usize; 3], health: [Health; 3], rule: Option<Rule>) -> Vec<Event> {
    let mut ev = Vec::new();
    for (i, (name, local, reg)) in [
        ("west", true, "eu"),
        ("east", false, "eu"),
        ("north", false, "us"),
    ]
    .into_iter()
    .enumerate()
    {
        ev.extend(cluster(name, local, health[i].clone()));
        ev.push(region(name, reg));
        ev.extend(member(name, 10 + i as u8, ready[i], rule.clone()));
    }
    ev
}

fn rule(order: Option<&str>, min_ready: &str) -> Option<Rule> {
    Some(Rule::parse(order, Some(min_ready)).expect("rule"))
}

struct Case {
    /// The setup, in words.
    name: &'static str,
    settings: fn() -> Settings,
    events: fn() -> Vec<Event>,
    /// The name asked, as an operator types it.
    query: &'static str,
    /// Lines of the text, each present exactly (spaces collapsed).
    want: &'static [&'static str],
}

fn mcs_settings() -> Settings {
    let mut s = settings();
    s.mcs = true;
    s
}

fn tiered_settings() -> Settings {
    let mut s = settings();
    s.srv_priority_tiers = true;
    s
}

const CASES: &[Case] = &[
    Case {
        name: "nearest: the local tier has nothing ready, the same region answers",
        settings,
        events: || three([0, 2, 3], [healthy(), healthy(), healthy()], None),
        query: "cache-nearest.shop",
        want: &[
            "name cache-nearest.shop.svc.clusterset.local.",
            "what <svc>-nearest name of service shop/cache: the nearest tier of its members with min-ready ready endpoints",
            "rule default tiers (0 local cluster, 1 its region, 2 the rest; stale members last), min-ready 1 (no Service sets a rule)",
            "local west, place eu/? (configured)",
            "nearest tier 1 (east): 2 ready, min-ready 1",
            "A NOERROR ttl 5, 2 records: 10.11.0.1, 10.11.0.2",
            "CLUSTER PLACE TIER HEALTH READY ANSWER WHY",
            "east eu/? (configured) 1: same region as the local cluster synced 2 in tier 1 is answered",
            "west (local) eu/? (configured) 0: the local cluster synced 0 out tier 0 has 0 ready, fewer than min-ready 1",
            "north us/? (configured) 2: another region synced 3 out tier 1 is nearer and has enough ready",
        ],
    },
    Case {
        name: "nearest: an explicit order and min-ready from a Service; the first tier is short",
        settings,
        events: || {
            three(
                [4, 1, 2],
                [healthy(), healthy(), healthy()],
                rule(Some("north,east,*"), "2"),
            )
        },
        query: "cache-nearest.shop.svc.clusterset.local.",
        want: &[
            "rule failover order north,east,*, min-ready 2 (from cluster west's Service)",
            "nearest tier 0 (north): 2 ready, min-ready 2",
            "north us/? (configured) 0: position 1 of the failover order synced 2 in tier 0 is answered",
            "east eu/? (configured) 1: position 2 of the failover order synced 1 out tier 0 is nearer and has enough ready",
            "west (local) eu/? (configured) 2: the local cluster synced 4 out tier 0 is nearer and has enough ready",
        ],
    },
    Case {
        name: "nearest: no tier has min-ready, so the union is answered (fail open)",
        settings,
        events: || {
            three(
                [1, 1, 1],
                [healthy(), healthy(), healthy()],
                rule(None, "5"),
            )
        },
        query: "cache-nearest.shop",
        want: &[
            "nearest fail open: no tier has min-ready 5 ready endpoints, so the federated union is answered",
            "A NOERROR ttl 5, 3 records: 10.10.0.1, 10.11.0.1, 10.12.0.1",
            "north us/? (configured) 2: another region synced 1 in fail open: no tier has min-ready 5, so the federated union is answered",
        ],
    },
    Case {
        name: "nearest: a stale member drops below every tier; an unhealthy one is out",
        settings,
        events: || three([0, 2, 3], [healthy(), broken(10), gateway_dead()], None),
        query: "cache-nearest.shop",
        want: &[
            "nearest tier 3 (east): 2 ready, min-ready 1",
            "east eu/? (configured) 3: same region as the local cluster, stale: last stale: watch broken 10s (grace 30s) 2 in tier 3 is answered",
            "north us/? (configured) - gateway dead (probe failing) 3 out left out: gateway dead (probe failing)",
        ],
    },
    Case {
        name: "federated: a member past the grace is out, a stale one within it is in",
        settings,
        events: || three([1, 2, 3], [healthy(), broken(10), broken(45)], None),
        query: "cache-federated.shop",
        want: &[
            "what <svc>-federated name of service shop/cache: the union of its healthy members' ready endpoints",
            "A NOERROR ttl 5, 3 records: 10.10.0.1, 10.11.0.1, 10.11.0.2",
            "EDE 3 (Stale Answer): member east not heard from, within the federated grace",
            "west (local) eu/? (configured) 0: the local cluster synced 1 in a healthy member",
            "east eu/? (configured) 3: same region as the local cluster, stale: last stale: watch broken 10s (grace 30s) 2 in stale but within the grace: its last-known endpoints are answered",
            "north us/? (configured) - watch broken 45s, past the 30s grace 3 out left out: watch broken 45s, past the 30s grace",
        ],
    },
    Case {
        name: "federated: every member unhealthy, the last-known union is answered (fail open)",
        settings,
        events: || {
            three(
                [1, 1, 0],
                [gateway_dead(), gateway_dead(), gateway_dead()],
                None,
            )
        },
        query: "cache-federated.shop",
        want: &[
            "note fail open: every member is unhealthy, so the last-known union is answered (TTL at most 5s)",
            "west (local) eu/? (configured) - gateway dead (probe failing) 1 in fail open: every member is unhealthy, so all are answered",
            "north us/? (configured) - gateway dead (probe failing) 0 in fail open: every member is unhealthy, so all are answered (no ready endpoints: adds nothing)",
        ],
    },
    Case {
        name: "federated SRV priorities follow tiers",
        settings: tiered_settings,
        events: || three([1, 1, 1], [healthy(), healthy(), healthy()], None),
        query: "cache-federated.shop",
        want: &[
            "note SRV priorities follow tiers: 10 × the tier of the target's cluster",
            "SRV NOERROR ttl 5, 1 record:",
            "0 100 6379 cache-federated.shop.svc.clusterset.local.",
        ],
    },
    Case {
        name: "per-cluster: a gateway-mode service answered by its mirror's ClusterIP",
        settings,
        events: fixture_events,
        query: "web-east.prod",
        want: &[
            "what <svc>-<cluster> name of service prod/web in cluster east: gateway mode: the ClusterIP of its Linkerd mirror Service prod/web-east in the local cluster",
            "A NOERROR ttl 5, 1 record: 10.96.10.1",
            "AAAA NOERROR (no records: NODATA)",
            "east unknown - synced 0 in the name's own cluster",
        ],
    },
    Case {
        name: "federated: a pod name below a headless federated service",
        settings,
        events: fixture_events,
        query: "db-0.north.db-federated.prod",
        want: &[
            "below pod db-0 of cluster north",
            "A NOERROR ttl 5, 1 record: 10.20.2.10",
            "north unknown 2: place unknown (its region or ours) synced 2 in a healthy member",
        ],
    },
    Case {
        name: "missing: a federated name nobody federates, exported per cluster",
        settings,
        events: fixture_events,
        query: "api-federated.prod",
        want: &[
            "what no service name api-federated in namespace prod",
            "note no cluster federates prod/api; it is exported per cluster by north",
            "A NXDOMAIN",
        ],
    },
    Case {
        name: "missing: a per-cluster name of a federated-only member",
        settings,
        events: || three([1, 1, 1], [healthy(), healthy(), healthy()], None),
        query: "cache-east.shop",
        want: &[
            "note cluster east's service shop/cache is only a federated member, not exported on its own (ask cache-federated)",
            "A NXDOMAIN",
        ],
    },
    Case {
        name: "missing: a headless per-cluster service with no ready endpoint",
        settings,
        events: fixture_events,
        query: "empty-east.prod",
        want: &[
            "note cluster east's service prod/empty is headless with no ready endpoint",
            "A NXDOMAIN",
        ],
    },
    Case {
        name: "missing: no such cluster",
        settings,
        events: fixture_events,
        query: "web-south.prod",
        want: &[
            "note web-south is neither <svc>-<cluster> of a known cluster, nor <svc>-federated or <svc>-nearest (MCS names <svc> need --mcs)",
        ],
    },
    Case {
        name: "MCS: an export of the other type is left out, and a held cluster id",
        settings: mcs_settings,
        events: || {
            let mut ev = three([1, 2, 1], [healthy(), healthy(), healthy()], None);
            for (i, (name, headless)) in [("west", false), ("east", false), ("north", true)]
                .into_iter()
                .enumerate()
            {
                let mut svc = service(
                    "shop",
                    "kv",
                    Some(ExportMode::Flat),
                    false,
                    headless,
                    &[],
                    vec![],
                );
                svc.mcs = Some(1000 + i as i64);
                ev.push(svc_event(name, svc));
            }
            ev.push(Event::ClusterIdApplied {
                cluster: c("east"),
                id: Some(c("west")),
            });
            ev
        },
        query: "kv.shop",
        want: &[
            "what MCS clusterset name of service shop/kv: its ServiceExports' members (--mcs)",
            "west (local) eu/? (configured) - synced 0 in a member, pods named under cluster id west",
            "north us/? (configured) - synced 0 out its Service is Headless, the oldest export's ClusterSetIP: left out",
            "east eu/? (configured) - synced 0 out its cluster id west is held by west, known first",
        ],
    },
    Case {
        name: "collision: service a-b of cluster c and service a of cluster b-c both make a-b-c",
        settings,
        events: || {
            let mut ev = cluster("c", true, healthy());
            ev.extend(cluster("b-c", false, healthy()));
            let svc = |name: &str| {
                service(
                    "prod",
                    name,
                    Some(ExportMode::Flat),
                    false,
                    false,
                    &["10.1.1.1"],
                    vec![],
                )
            };
            ev.push(svc_event("c", svc("a-b")));
            ev.push(svc_event("b-c", svc("a")));
            ev
        },
        query: "a-b-c.prod",
        want: &[
            "what <svc>-<cluster> name of service prod/a-b in cluster c: flat: its ready endpoints' addresses",
            "note name collision: service prod/a of cluster b-c and service prod/a-b of cluster c want a-b-c.prod.svc.clusterset.local.; service prod/a-b of cluster c has it (the older Service wins; <svc>-federated and <svc>-nearest always mean the union)",
            "A NOERROR (no records: NODATA)",
        ],
    },
    Case {
        name: "a namespace is a name of the zone's own",
        settings,
        events: fixture_events,
        query: "prod",
        want: &[
            "what namespace prod: exists (NODATA) while some cluster exports a service into it",
            "A NOERROR (no records: NODATA)",
        ],
    },
    Case {
        name: "the zone's own names and names outside it",
        settings,
        events: fixture_events,
        query: "example.com.",
        want: &[
            "what not in the zone clusterset.local.: REFUSED",
            "A REFUSED",
        ],
    },
];

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn explains_the_lines_an_operator_reads() {
    for case in CASES {
        let model = model_with((case.settings)(), (case.events)());
        let explained = explain(case.query, &model.snapshot(), model.clusters(), at())
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let text = explained.text();
        let lines: Vec<String> = text.lines().map(collapse).collect();
        for want in case.want {
            assert!(
                lines.contains(&collapse(want)),
                "{}: no line {want:?} in:\n{text}",
                case.name
            );
        }
        // The JSON the CLI reads back renders the same text.
        let json = serde_json::to_string(&explained).expect("serialize");
        let back: Explanation = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back.text(), text, "{}", case.name);
    }
}

#[test]
fn names_are_completed_as_a_user_means_them() {
    let zone = ZoneName::new("clusterset.local").expect("zone");
    let cases: &[(&str, &str)] = &[
        (
            "web-federated.prod",
            "web-federated.prod.svc.clusterset.local",
        ),
        (
            "Web-Federated.Prod.svc",
            "web-federated.prod.svc.clusterset.local",
        ),
        (
            "web-federated.prod.svc.clusterset.local",
            "web-federated.prod.svc.clusterset.local",
        ),
        (
            "web-federated.prod.svc.clusterset.local.",
            "web-federated.prod.svc.clusterset.local",
        ),
        (
            "db-0.north.db-federated.prod",
            "db-0.north.db-federated.prod.svc.clusterset.local",
        ),
        (
            "_http._tcp.web-east.prod",
            "_http._tcp.web-east.prod.svc.clusterset.local",
        ),
        ("prod", "prod.svc.clusterset.local"),
        ("dns-version", "dns-version.clusterset.local"),
        ("ns.dns", "ns.dns.clusterset.local"),
        ("clusterset.local", "clusterset.local"),
        ("example.com.", "example.com"),
    ];
    for (input, want) in cases {
        let got = absolute(input, &zone).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(got.text(), *want, "{input}");
    }
    let errors: &[(&str, &str)] = &[
        ("", "no name given"),
        ("  ", "no name given"),
        ("web federated.prod", "a label holds a character"),
        ("web..prod", "is not a DNS name"),
        (&"a".repeat(64), "is not a DNS name"),
    ];
    for (input, want) in errors {
        let err = absolute(input, &zone).expect_err(input).to_string();
        assert!(err.contains(want), "{input:?}: {err}");
    }
}

#[test]
fn the_json_names_every_member_field() {
    let model = model_with(
        settings(),
        three([0, 2, 3], [healthy(), broken(10), healthy()], None),
    );
    let explained = explain(
        "cache-nearest.shop",
        &model.snapshot(),
        model.clusters(),
        at(),
    )
    .expect("explain");
    let json = serde_json::to_value(&explained).expect("json");
    assert_eq!(json["kind"], "nearest");
    assert_eq!(json["service"], "shop/cache");
    assert_eq!(json["rule"]["minReady"], 1);
    assert_eq!(json["nearest"]["tier"], 2);
    let east = &json["members"][2];
    assert_eq!(east["cluster"], "east", "{json:#}");
    assert_eq!(east["region"], "eu");
    assert_eq!(east["placeFrom"], "configured");
    assert_eq!(east["tier"], 3);
    assert_eq!(east["ready"], 2);
    assert_eq!(east["answered"], false);
    let a = &json["answers"][0];
    assert_eq!(a["qtype"], "A");
    assert_eq!(a["rcode"], "NOERROR");
    assert_eq!(a["count"], 3);
    assert_eq!(a["ttl"], 5);
}
