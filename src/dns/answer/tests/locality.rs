//! Nearest names and SRV priorities by tier (docs/locality.md), in the
//! table style of the parent module.

use super::*;
use crate::model::objects::{ExportMode, Protocol};
use crate::model::testing::{port, service, slice, slice_event, svc_event, up};
use crate::vocab::place::{Place, PlaceFrom};

/// west (local, eu) has `west_ready` ready pods of headless `db`; east is
/// in eu, south in us, each with one ready pod.
fn clusterset(west_ready: usize) -> Vec<Event> {
    let pg = || vec![port(Some("pg"), Protocol::Tcp, 5432)];
    let mut ev = Vec::new();
    for (name, local, region, net) in [
        ("west", true, None, 30),
        ("east", false, Some("eu"), 10),
        ("south", false, Some("us"), 20),
    ] {
        ev.extend(up(name, local));
        ev.push(Event::PlaceApplied {
            cluster: c(name),
            from: PlaceFrom::Configured,
            place: Place::parse(region, None).expect("region"),
        });
        let svc = service("prod", "db", Some(ExportMode::Flat), true, true, &[], pg());
        ev.push(svc_event(name, svc));
        let ready = if local { west_ready } else { 1 };
        let addrs: Vec<(String, String)> = (0..ready)
            .map(|i| (format!("10.{net}.2.{}", 10 + i), format!("db-{i}")))
            .collect();
        let eps: Vec<(&str, Option<&str>, bool)> = addrs
            .iter()
            .map(|(a, h)| (a.as_str(), Some(h.as_str()), true))
            .collect();
        ev.push(slice_event(
            name,
            slice("prod", &format!("db-{name}"), "db", pg(), &eps),
        ));
    }
    ev
}

fn locality_settings(tiers: bool) -> Settings {
    let mut s = settings();
    s.ttl = 30;
    s.nearest_ttl = 5;
    s.srv_priority_tiers = tiers;
    s.local_place = Place::parse(Some("eu"), None).expect("region");
    s
}

#[test]
fn nearest_answers_the_first_tier_with_ready_pods_and_caps_its_ttl() {
    let snap = snapshot_with(locality_settings(false), clusterset(2));
    run(
        &snap,
        &[
            Case {
                name: "local pods ready: the local tier, TTL capped at nearest-ttl",
                qname: "db-nearest.prod.svc.clusterset.local.",
                qtype: A,
                rcode: Rcode::NoError,
                answer: &[
                    "db-nearest.prod.svc.clusterset.local. 5 IN A 10.30.2.10",
                    "db-nearest.prod.svc.clusterset.local. 5 IN A 10.30.2.11",
                ],
                authority: &[],
                additional: &[],
            },
            Case {
                name: "the federated name keeps its TTL and the whole union",
                qname: "db-federated.prod.svc.clusterset.local.",
                qtype: A,
                rcode: Rcode::NoError,
                answer: &[
                    "db-federated.prod.svc.clusterset.local. 30 IN A 10.10.2.10",
                    "db-federated.prod.svc.clusterset.local. 30 IN A 10.20.2.10",
                    "db-federated.prod.svc.clusterset.local. 30 IN A 10.30.2.10",
                    "db-federated.prod.svc.clusterset.local. 30 IN A 10.30.2.11",
                ],
                authority: &[],
                additional: &[],
            },
            Case {
                name: "pod names of the chosen tier only",
                qname: "db-0.east.db-nearest.prod.svc.clusterset.local.",
                qtype: A,
                rcode: Rcode::NxDomain,
                answer: &[],
                authority: &[SOA],
                additional: &[],
            },
            Case {
                name: "flags off: federated SRV priorities stay 0",
                qname: "_pg._tcp.db-federated.prod.svc.clusterset.local.",
                qtype: SRV,
                rcode: Rcode::NoError,
                answer: &[
                    "_pg._tcp.db-federated.prod.svc.clusterset.local. 30 IN SRV 0 25 5432 db-0.east.db-federated.prod.svc.clusterset.local.",
                    "_pg._tcp.db-federated.prod.svc.clusterset.local. 30 IN SRV 0 25 5432 db-0.south.db-federated.prod.svc.clusterset.local.",
                    "_pg._tcp.db-federated.prod.svc.clusterset.local. 30 IN SRV 0 25 5432 db-0.west.db-federated.prod.svc.clusterset.local.",
                    "_pg._tcp.db-federated.prod.svc.clusterset.local. 30 IN SRV 0 25 5432 db-1.west.db-federated.prod.svc.clusterset.local.",
                ],
                authority: &[],
                additional: &[
                    "db-0.east.db-federated.prod.svc.clusterset.local. 30 IN A 10.10.2.10",
                    "db-0.south.db-federated.prod.svc.clusterset.local. 30 IN A 10.20.2.10",
                    "db-0.west.db-federated.prod.svc.clusterset.local. 30 IN A 10.30.2.10",
                    "db-1.west.db-federated.prod.svc.clusterset.local. 30 IN A 10.30.2.11",
                ],
            },
        ],
    );
    // No local pod: the same region; the SOA's own TTL is untouched.
    let snap = snapshot_with(locality_settings(false), clusterset(0));
    run(
        &snap,
        &[Case {
            name: "local empty: the same-region cluster",
            qname: "db-nearest.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: &[
                "db-nearest.prod.svc.clusterset.local. 5 IN SRV 0 100 5432 db-0.east.db-nearest.prod.svc.clusterset.local.",
            ],
            authority: &[],
            additional: &["db-0.east.db-nearest.prod.svc.clusterset.local. 5 IN A 10.10.2.10"],
        }],
    );
}

#[test]
fn srv_priorities_follow_tiers_when_turned_on() {
    let snap = snapshot_with(locality_settings(true), clusterset(2));
    run(
        &snap,
        &[Case {
            name: "local 0, same region 10, rest 20; weights even within a priority",
            qname: "_pg._tcp.db-federated.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: &[
                "_pg._tcp.db-federated.prod.svc.clusterset.local. 30 IN SRV 0 50 5432 db-0.west.db-federated.prod.svc.clusterset.local.",
                "_pg._tcp.db-federated.prod.svc.clusterset.local. 30 IN SRV 0 50 5432 db-1.west.db-federated.prod.svc.clusterset.local.",
                "_pg._tcp.db-federated.prod.svc.clusterset.local. 30 IN SRV 10 100 5432 db-0.east.db-federated.prod.svc.clusterset.local.",
                "_pg._tcp.db-federated.prod.svc.clusterset.local. 30 IN SRV 20 100 5432 db-0.south.db-federated.prod.svc.clusterset.local.",
            ],
            authority: &[],
            additional: &[
                "db-0.east.db-federated.prod.svc.clusterset.local. 30 IN A 10.10.2.10",
                "db-0.south.db-federated.prod.svc.clusterset.local. 30 IN A 10.20.2.10",
                "db-0.west.db-federated.prod.svc.clusterset.local. 30 IN A 10.30.2.10",
                "db-1.west.db-federated.prod.svc.clusterset.local. 30 IN A 10.30.2.11",
            ],
        }],
    );
}

#[test]
fn nearest_with_no_tier_at_min_ready_answers_the_union_and_says_so() {
    let mut events = clusterset(1);
    for e in &mut events {
        if let Event::ServiceApplied { cluster, service } = e
            && &**cluster == "west"
        {
            let rule = crate::vocab::place::Rule::parse(None, Some("5")).expect("rule");
            service.locality = Some(Arc::new(rule));
        }
    }
    let snap = snapshot_with(locality_settings(false), events);
    let name = QName::from_text("db-nearest.prod.svc.clusterset.local.").expect("qname");
    let q = Question {
        name: &name,
        qtype: A,
        qclass: CLASS_IN,
        room: UDP,
    };
    let got = answer(&snap, q, 0, Instant::now());
    assert_eq!(got.answer.answers.len(), 3, "the union of three pods");
    assert!(got.note.nearest_fail_open, "counted");
    assert!(got.answer.answers.iter().all(|r| r.ttl == 5));
}

/// With `--mcs`, a headless MCS name answers its nearest tier only when
/// the oldest ServiceExport opts in; otherwise the KEP's union, as before.
#[test]
fn an_mcs_name_answers_its_nearest_tier_only_when_its_export_opts_in() {
    let exported = |opt_in: bool| {
        let mut events = clusterset(2);
        for e in &mut events {
            if let Event::ServiceApplied { service, .. } = e {
                service.federated = false;
                service.export = None;
                service.mcs = Some(1000);
                service.mcs_nearest = opt_in;
            }
        }
        let mut s = locality_settings(false);
        s.mcs = true;
        snapshot_with(s, events)
    };
    let name = QName::from_text("db.prod.svc.clusterset.local.").expect("qname");
    let ask = |snap: &Snapshot| {
        let q = Question {
            name: &name,
            qtype: A,
            qclass: CLASS_IN,
            room: UDP,
        };
        let got = answer(snap, q, 0, Instant::now()).answer;
        let mut addrs: Vec<(String, u32)> = got
            .answers
            .iter()
            .map(|r| (record_text("db.prod.svc.clusterset.local.", r), r.ttl))
            .map(|(text, ttl)| {
                (
                    text.rsplit(['\t', ' ']).next().unwrap_or("").to_owned(),
                    ttl,
                )
            })
            .collect();
        addrs.sort();
        addrs
    };
    let local = |ttl| {
        vec![
            ("10.30.2.10".to_owned(), ttl),
            ("10.30.2.11".to_owned(), ttl),
        ]
    };
    assert_eq!(ask(&exported(true)), local(5), "the local tier, TTL capped");
    let union = ask(&exported(false));
    assert_eq!(union.len(), 4, "the KEP's union: {union:?}");
    assert!(union.iter().all(|(_, ttl)| *ttl == 30));
}
