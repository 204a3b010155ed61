//! Table tests of the tier rules: each case names the clusters (place,
//! health, ready endpoints), the service's rule, and the tiers and chosen
//! tier expected, as text.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::model::cluster::{Event, Health};
use crate::model::objects::{ExportMode, Protocol};
use crate::model::testing::{
    c, epoch, port, service, settings, slice, slice_event, svc_event, t0, up,
};
use crate::model::{Model, Settings};
use crate::vocab::place::{Place, PlaceFrom, Rule};

/// How a member cluster stands.
#[derive(Clone, Copy)]
enum State {
    Healthy,
    /// Watch broken 5 s ago (within the 30 s grace).
    Stale,
    /// Watch broken 60 s ago (past the grace).
    PastGrace,
    /// Gateway probe failing.
    GatewayDead,
}

/// One member: name, local, configured region, property region, ready
/// endpoints, not-ready endpoints, state.
type Member = (
    &'static str,
    bool,
    Option<&'static str>,
    Option<&'static str>,
    usize,
    usize,
    State,
);

struct Case {
    name: &'static str,
    /// The local cluster's `--region`.
    local_region: Option<&'static str>,
    members: &'static [Member],
    /// (failover-order, min-ready) annotations of the oldest member.
    rule: (Option<&'static str>, Option<&'static str>),
    /// `cluster=tier` (`-` for none) by (tier, name), then the chosen tier.
    want: &'static str,
}

fn events(case: &Case) -> Vec<Event> {
    let http = || vec![port(Some("http"), Protocol::Tcp, 80)];
    let mut ev = Vec::new();
    for (i, &(name, local, configured, property, ready, unready, state)) in
        case.members.iter().enumerate()
    {
        ev.extend(up(name, local));
        for (from, region) in [
            (PlaceFrom::Configured, configured),
            (PlaceFrom::Property, property),
        ] {
            ev.push(Event::PlaceApplied {
                cluster: c(name),
                from,
                place: Place::parse(region, None).expect("region"),
            });
        }
        let mut svc = service(
            "prod",
            "db",
            Some(ExportMode::Flat),
            true,
            false,
            &["10.96.0.1"],
            http(),
        );
        if i == 0 && (case.rule.0.is_some() || case.rule.1.is_some()) {
            let rule = Rule::parse(case.rule.0, case.rule.1).expect("rule");
            svc.locality = Some(Arc::new(rule));
        }
        ev.push(svc_event(name, svc));
        let addrs: Vec<(String, bool)> = (0..ready + unready)
            .map(|k| (format!("10.{i}.0.{k}"), k < ready))
            .collect();
        let eps: Vec<(&str, Option<&str>, bool)> =
            addrs.iter().map(|(a, r)| (a.as_str(), None, *r)).collect();
        ev.push(slice_event(
            name,
            slice("prod", &format!("db-{name}"), "db", http(), &eps),
        ));
        let broken = |secs| Some(t0() + Duration::from_secs(60) - Duration::from_secs(secs));
        let health = match state {
            Healthy => None,
            Stale => Some((broken(5), None)),
            PastGrace => Some((broken(60), None)),
            GatewayDead => Some((None, Some(false))),
        };
        if let Some((broken_since, gateway_alive)) = health {
            ev.push(Event::Health {
                cluster: c(name),
                health: Health {
                    synced: true,
                    broken_since,
                    gateway_alive,
                    ..Health::default()
                },
            });
        }
    }
    ev
}

/// The plan, as text, one minute after t0 (so "60 s broken" is past the
/// 30 s grace).
fn render(case: &Case) -> String {
    let mut settings: Settings = settings();
    settings.local_place = Place::parse(case.local_region, None).expect("region");
    let mut m = Model::new(Arc::new(settings.clone()), epoch());
    m.clusters_known(t0());
    m.apply(events(case), t0());
    let cx = BuildContext {
        zone: "clusterset.local",
        federated_grace: settings.federated_grace,
        now: t0() + Duration::from_secs(60),
        local: &settings.local_place,
        tiers: false,
    };
    let key = ObjectKey::new("prod", "db");
    let plan = plan(m.clusters(), &key, &settings.local_place, &cx, |c, s| {
        c.slices_of(&s.key)
            .flat_map(|sl| sl.endpoints.iter())
            .filter(|ep| ep.ready)
            .count() as u64
    });
    let mut out: Vec<String> = plan
        .members
        .iter()
        .map(|m| {
            let tier = m.tier.map_or("-".to_owned(), |t| t.to_string());
            let stale = if m.stale { "(stale)" } else { "" };
            format!("{}={tier}{stale}", m.cluster.name)
        })
        .collect();
    out.push(match plan.chosen {
        Some(t) => format!("chosen {t}"),
        None => "union".to_owned(),
    });
    out.join(" ")
}

use State::{GatewayDead, Healthy, PastGrace, Stale};

const CASES: &[Case] = &[
    Case {
        name: "no places: local first, every other cluster is the rest",
        local_region: None,
        members: &[
            ("west", true, None, None, 2, 0, Healthy),
            ("east", false, None, None, 2, 0, Healthy),
            ("north", false, None, None, 2, 0, Healthy),
        ],
        rule: (None, None),
        want: "west=0 east=2 north=2 chosen 0",
    },
    Case {
        name: "same region before the rest; region from the flag, a link, a property",
        local_region: Some("eu"),
        members: &[
            ("west", true, None, None, 0, 2, Healthy),
            ("east", false, Some("eu"), None, 1, 0, Healthy),
            ("north", false, None, Some("eu"), 1, 0, Healthy),
            ("south", false, Some("us"), Some("eu"), 3, 0, Healthy),
        ],
        rule: (None, None),
        want: "west=0 east=1 north=1 south=2 chosen 1",
    },
    Case {
        name: "local region from its own property when no flag",
        local_region: None,
        members: &[
            ("west", true, None, Some("eu"), 0, 1, Healthy),
            ("east", false, Some("eu"), None, 1, 0, Healthy),
            ("south", false, Some("us"), None, 1, 0, Healthy),
        ],
        rule: (None, None),
        want: "west=0 east=1 south=2 chosen 1",
    },
    Case {
        name: "an unknown place is the rest, never the same region",
        local_region: Some("eu"),
        members: &[
            ("west", true, None, None, 0, 0, Healthy),
            ("east", false, None, None, 1, 0, Healthy),
            ("south", false, Some("us"), None, 1, 0, Healthy),
        ],
        rule: (None, None),
        want: "west=0 east=2 south=2 chosen 2",
    },
    Case {
        name: "min-ready sums a tier: two same-region clusters of one each make 2",
        local_region: Some("eu"),
        members: &[
            ("west", true, None, None, 1, 0, Healthy),
            ("east", false, Some("eu"), None, 1, 0, Healthy),
            ("north", false, Some("eu"), None, 1, 0, Healthy),
            ("south", false, Some("us"), None, 5, 0, Healthy),
        ],
        rule: (None, Some("2")),
        want: "west=0 east=1 north=1 south=2 chosen 1",
    },
    Case {
        name: "no tier meets min-ready: the union",
        local_region: Some("eu"),
        members: &[
            ("west", true, None, None, 1, 0, Healthy),
            ("south", false, Some("us"), None, 1, 0, Healthy),
        ],
        rule: (None, Some("3")),
        want: "west=0 south=2 union",
    },
    Case {
        name: "a stale member drops below the rest, even the local one",
        local_region: Some("eu"),
        members: &[
            ("west", true, None, None, 2, 0, Stale),
            ("east", false, Some("eu"), None, 2, 0, Stale),
            ("south", false, Some("us"), None, 2, 0, Healthy),
        ],
        rule: (None, None),
        want: "south=2 east=3(stale) west=3(stale) chosen 2",
    },
    Case {
        name: "stale is still better than nothing",
        local_region: Some("eu"),
        members: &[
            ("west", true, None, None, 0, 1, Healthy),
            ("east", false, Some("eu"), None, 2, 0, Stale),
        ],
        rule: (None, None),
        want: "west=0 east=3(stale) chosen 3",
    },
    Case {
        name: "past the grace or with a dead gateway: no tier",
        local_region: Some("eu"),
        members: &[
            ("west", true, None, None, 0, 0, Healthy),
            ("east", false, Some("eu"), None, 2, 0, PastGrace),
            ("north", false, Some("eu"), None, 2, 0, GatewayDead),
            ("south", false, Some("us"), None, 1, 0, Healthy),
        ],
        rule: (None, None),
        want: "west=0 south=2 east=- north=- chosen 2",
    },
    Case {
        name: "explicit order; a name that is no member is skipped",
        local_region: Some("eu"),
        members: &[
            ("west", true, None, None, 5, 0, Healthy),
            ("east", false, Some("eu"), None, 1, 0, Healthy),
            ("south", false, Some("us"), None, 1, 0, Healthy),
        ],
        rule: (Some("gone,south,east"), None),
        want: "south=1 east=2 west=- chosen 1",
    },
    Case {
        name: "explicit order with '*': the rest by default tier after the named",
        local_region: Some("eu"),
        members: &[
            ("west", true, None, None, 0, 0, Healthy),
            ("east", false, Some("eu"), None, 1, 0, Healthy),
            ("north", false, Some("us"), None, 1, 0, Healthy),
            ("south", false, Some("us"), None, 1, 0, Healthy),
        ],
        rule: (Some("south,*"), None),
        want: "south=0 west=1 east=2 north=3 chosen 0",
    },
    Case {
        name: "'*' first: named clusters after the default tiers; stale below all",
        local_region: Some("eu"),
        members: &[
            ("west", true, None, None, 0, 1, Healthy),
            ("east", false, Some("eu"), None, 0, 1, Healthy),
            ("north", false, Some("us"), None, 1, 0, Stale),
            ("south", false, Some("us"), None, 0, 1, Healthy),
        ],
        rule: (Some("*,south"), None),
        want: "west=0 east=1 south=3 north=4(stale) chosen 4",
    },
    Case {
        name: "ties within a tier are by name; all unready: union",
        local_region: None,
        members: &[
            ("west", true, None, None, 0, 1, Healthy),
            ("north", false, None, None, 0, 1, Healthy),
            ("east", false, None, None, 0, 1, Healthy),
        ],
        rule: (None, None),
        want: "west=0 east=2 north=2 union",
    },
];

#[test]
fn tiers() {
    for case in CASES {
        assert_eq!(render(case), case.want, "{}", case.name);
    }
}

#[test]
fn the_oldest_members_rule_wins() {
    // west is local (most senior); east's rule applies only when west sets none.
    let http = || vec![port(Some("http"), Protocol::Tcp, 80)];
    let rule = |order: &str| Some(Arc::new(Rule::parse(Some(order), None).expect("rule")));
    let mut m = Model::new(Arc::new(settings()), epoch());
    m.clusters_known(t0());
    let svc = |order: Option<&str>| {
        let mut s = service(
            "prod",
            "db",
            Some(ExportMode::Flat),
            true,
            false,
            &[],
            http(),
        );
        s.locality = order.and_then(rule);
        s
    };
    let mut ev = up("west", true);
    ev.extend(up("east", false));
    ev.push(svc_event("west", svc(None)));
    ev.push(svc_event("east", svc(Some("east,*"))));
    m.apply(ev, t0());
    let s = settings();
    let cx = BuildContext {
        zone: "clusterset.local",
        federated_grace: s.federated_grace,
        now: t0(),
        local: &s.local_place,
        tiers: false,
    };
    let key = ObjectKey::new("prod", "db");
    let p = plan(m.clusters(), &key, &s.local_place, &cx, |_, _| 1);
    assert_eq!(p.rule_from.as_deref(), Some("east"));
    assert_eq!(p.tier_of("east"), Some(0));
    m.apply([svc_event("west", svc(Some("west,east")))], t0());
    let p = plan(m.clusters(), &key, &s.local_place, &cx, |_, _| 1);
    assert_eq!(p.rule_from.as_deref(), Some("west"));
    assert_eq!((p.tier_of("west"), p.tier_of("east")), (Some(0), Some(1)));
}

#[test]
fn a_cluster_that_leaves_and_comes_back_gets_its_tier_again() {
    let case = Case {
        name: "",
        local_region: Some("eu"),
        members: &[
            ("west", true, None, None, 0, 0, Healthy),
            ("east", false, Some("eu"), None, 1, 0, Healthy),
            ("south", false, Some("us"), None, 1, 0, Healthy),
        ],
        rule: (None, None),
        want: "",
    };
    let mut settings = settings();
    settings.local_place = Place::parse(Some("eu"), None).expect("region");
    let mut m = Model::new(Arc::new(settings.clone()), epoch());
    m.clusters_known(t0());
    m.apply(events(&case), t0());
    let cx = BuildContext {
        zone: "clusterset.local",
        federated_grace: settings.federated_grace,
        now: t0(),
        local: &settings.local_place,
        tiers: false,
    };
    let key = ObjectKey::new("prod", "db");
    let ready = |c: &Cluster, s: &Service| {
        c.slices_of(&s.key)
            .map(|sl| sl.endpoints.iter().filter(|ep| ep.ready).count() as u64)
            .sum()
    };
    let chosen = |m: &Model| plan(m.clusters(), &key, &settings.local_place, &cx, ready).chosen;
    assert_eq!(chosen(&m), Some(1));
    m.apply([Event::ClusterDown { cluster: c("east") }], t0());
    assert_eq!(chosen(&m), Some(2), "east gone: the other region");
    let back: Vec<Event> = events(&case)
        .into_iter()
        .filter(|e| &**e.cluster() == "east")
        .collect();
    m.apply(back, t0());
    assert_eq!(chosen(&m), Some(1), "east back, with its place");
}
