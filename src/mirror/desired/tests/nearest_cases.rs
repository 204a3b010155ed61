//! The nearest mirror `<svc>-nearest`: per case the cluster state (members,
//! their places, health and the service's failover rule) and the nearest
//! Service and EndpointSlices expected. The federated and per-cluster
//! objects beside them are the `federated` cases' business and are left out
//! of the comparison here; the incremental check still covers everything.

use std::sync::Arc;

use super::*;
use crate::vocab::place::{PlaceFrom, Rule};

/// The local cluster (west) is in region `eu`.
fn in_eu(s: &mut MirrorSettings) {
    s.local_place = region("eu");
}

fn region(r: &str) -> Place {
    Place {
        region: Some(Arc::from(r)),
        zone: None,
    }
}

fn place(cluster: &str, from: PlaceFrom, place: Place) -> Event {
    Event::PlaceApplied {
        cluster: c(cluster),
        from,
        place,
    }
}

/// A pod of a test slice: address, hostname, ready.
type Pod<'a> = (&'a str, Option<&'a str>, bool);

/// `web` in `shop`, federated in west (local), east (region eu) and north
/// (region us), under `rule`: west's pod 10.1.0.1 ready when `west_ready`,
/// east's two and north's one ready unless `east_ready` is false.
fn web(west_ready: bool, east_ready: bool, rule: Option<Rule>) -> Vec<Event> {
    let mut ev = clusters(&[("west", true), ("east", false), ("north", false)]);
    ev.push(place("east", PlaceFrom::Configured, region("eu")));
    ev.push(place("north", PlaceFrom::Configured, region("us")));
    let pods: [(&str, Vec<Pod<'_>>); 3] = [
        ("west", vec![("10.1.0.1", None, west_ready)]),
        (
            "east",
            vec![
                ("10.2.0.1", None, east_ready),
                ("10.2.0.2", None, east_ready),
            ],
        ),
        ("north", vec![("10.3.0.1", None, true)]),
    ];
    for (cluster, eps) in pods {
        let mut svc = service("shop", "web", None, true, false, &[], vec![http(80)]);
        svc.locality = rule.clone().map(Arc::new);
        ev.push(svc_event(cluster, svc));
        ev.push(slice_event(
            cluster,
            slice(
                "shop",
                &format!("web-{cluster}"),
                "web",
                vec![http(8080)],
                &eps,
            ),
        ));
    }
    ev
}

fn rule(order: Option<&str>, min_ready: Option<&str>) -> Option<Rule> {
    Some(Rule::parse(order, min_ready).expect("rule"))
}

/// `web-nearest` holding the ready pods `ips`.
fn nearest(ips: &[&str]) -> Vec<Value> {
    vec![
        nearest_service(
            "web-nearest",
            "shop",
            json!({"ports": [{"name": "http", "protocol": "TCP", "port": 80}]}),
            None,
        ),
        nearest_slice(
            "web-nearest",
            "shop",
            0,
            ready_eps(ips),
            json!([{"name": "http", "protocol": "TCP", "port": 8080}]),
        ),
    ]
}

/// [`check`] restricted to the objects of `web-nearest`: the incremental
/// check and the invariants over everything, the comparison over those.
fn check_nearest(case: Case) {
    check_incremental(&case);
    let (got, problems) = run(&case);
    check_invariants(case.name, &got);
    let mut got: Vec<Value> = got
        .iter()
        .filter(|d| d.key.name.starts_with("web-nearest"))
        .map(|d| to_json(&d.object))
        .collect();
    got.sort_by_key(sort_key);
    let mut want = case.want;
    want.sort_by_key(sort_key);
    let pretty = |v: &[Value]| serde_json::to_string_pretty(v).unwrap_or_default();
    assert_eq!(
        got,
        want,
        "{}\ngot:  {}\nwant: {}",
        case.name,
        pretty(&got),
        pretty(&want)
    );
    assert!(problems.is_empty(), "{}: {problems:#?}", case.name);
}

#[test]
fn nearest_mirror() {
    let all = ["10.1.0.1", "10.2.0.1", "10.2.0.2", "10.3.0.1"];
    let cases = vec![
        Case {
            name: "the local tier has a ready pod: the local cluster's pods only",
            events: web(true, true, None),
            settings: in_eu,
            want: nearest(&["10.1.0.1"]),
            problems: vec![],
        },
        Case {
            name: "no ready pod in the local tier: the same region's",
            events: web(false, true, None),
            settings: in_eu,
            want: nearest(&["10.2.0.1", "10.2.0.2"]),
            problems: vec![],
        },
        Case {
            name: "min-ready 2: the local tier's one pod is not enough, the region's two are",
            events: web(true, true, rule(None, Some("2"))),
            settings: in_eu,
            want: nearest(&["10.2.0.1", "10.2.0.2"]),
            problems: vec![],
        },
        Case {
            name: "min-ready 3: no tier has it: the federated union (fail open)",
            events: web(true, true, rule(None, Some("3"))),
            settings: in_eu,
            want: nearest(&all),
            problems: vec![],
        },
        Case {
            name: "a member whose watch is broken within the grace drops below the rest",
            events: with(
                web(false, true, None),
                [health("east", None, Some(base() + Duration::from_secs(90)))],
            ),
            settings: in_eu,
            want: nearest(&["10.3.0.1"]),
            problems: vec![],
        },
        Case {
            name: "the stale tier is still answered when it is the first with a ready pod",
            events: with(
                web(false, true, None),
                [
                    health("east", None, Some(base() + Duration::from_secs(90))),
                    health("north", Some(false), None),
                ],
            ),
            settings: in_eu,
            want: nearest(&["10.2.0.1", "10.2.0.2"]),
            problems: vec![],
        },
        Case {
            name: "a member whose gateway probe fails is never the tier",
            events: with(web(false, true, None), [health("east", Some(false), None)]),
            settings: in_eu,
            want: nearest(&["10.3.0.1"]),
            problems: vec![],
        },
        Case {
            name: "explicit failover order: north first, whatever the places",
            events: web(true, true, rule(Some("north,*"), None)),
            settings: in_eu,
            want: nearest(&["10.3.0.1"]),
            problems: vec![],
        },
        Case {
            name: "an order without '*' whose only tier has no ready pod: the union",
            events: web(true, false, rule(Some("east"), None)),
            settings: in_eu,
            want: nearest(&["10.1.0.1", "10.3.0.1"]),
            problems: vec![],
        },
        Case {
            name: "no local place configured: every remote cluster in one tier",
            events: web(false, true, None),
            settings: defaults,
            want: nearest(&["10.2.0.1", "10.2.0.2", "10.3.0.1"]),
            problems: vec![],
        },
        Case {
            name: "a region from a ClusterProperty counts where none is configured",
            events: {
                let mut ev = web(false, true, None);
                ev.push(place("east", PlaceFrom::Configured, Place::default()));
                ev.push(place("north", PlaceFrom::Configured, Place::default()));
                ev.push(place("north", PlaceFrom::Property, region("eu")));
                ev
            },
            settings: in_eu,
            want: nearest(&["10.3.0.1"]),
            problems: vec![],
        },
        Case {
            name: "the service stops being federated: no nearest mirror",
            events: {
                let mut ev = web(true, true, None);
                for cluster in ["west", "east", "north"] {
                    ev.push(svc_event(
                        cluster,
                        service("shop", "web", None, false, false, &[], vec![http(80)]),
                    ));
                }
                ev
            },
            settings: in_eu,
            want: vec![],
            problems: vec![],
        },
    ];
    for case in cases {
        check_nearest(case);
    }
}

/// A dual-stack pod is in a slice of each family and counts once, as the
/// index counts it: west's one pod does not meet `min-ready: 2`.
#[test]
fn a_dual_stack_pod_counts_once_toward_min_ready() {
    let mut events = web(true, true, rule(None, Some("2")));
    events.push(slice_event(
        "west",
        slice(
            "shop",
            "web-west-v6",
            "web",
            vec![http(8080)],
            &[("fd00:1::1", None, true)],
        ),
    ));
    check_nearest(Case {
        name: "dual-stack west, min-ready 2: east",
        events,
        settings: in_eu,
        want: nearest(&["10.2.0.1", "10.2.0.2"]),
        problems: vec![],
    });
}

/// The nearest name is shortened as the federated one is, and said so.
#[test]
fn a_long_nearest_name_is_shortened() {
    let long = "a".repeat(56);
    let mut events = clusters(&[("west", true)]);
    events.push(svc_event(
        "west",
        service("shop", &long, None, true, false, &[], vec![http(80)]),
    ));
    events.push(slice_event(
        "west",
        slice(
            "shop",
            "long-1",
            &long,
            vec![http(8080)],
            &[("10.1.0.1", None, true)],
        ),
    ));
    let (got, problems) = run_events(events, defaults);
    let full = format!("{long}-nearest");
    let name = fit_name(&full, MAX_SERVICE_NAME);
    assert_ne!(name, full);
    let svc = got
        .iter()
        .find(|d| d.key.kind == Kind::Service && *d.key.name == *name)
        .expect("the shortened nearest Service");
    assert_eq!(
        to_json(&svc.object)["metadata"]["annotations"][FULL_NAME_ANNOTATION],
        json!(full)
    );
    assert!(
        problems
            .iter()
            .any(|p| *p.object.name == *name && p.message.contains("shortened")),
        "{problems:?}"
    );
}
