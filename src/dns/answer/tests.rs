//! Table tests in the CoreDNS `handler_test.go` style: each case names a
//! query and the records expected in zone-file text.

use super::*;
use crate::dns::zonefile::record_text;
use crate::model::testing::{
    BIG_PODS, big_events, big_pod, c, epoch, fixture_events, settings, t0,
};
use crate::model::{Event, Health, Model, Settings};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// A snapshot after start-up: the source knew of no cluster at first (so
/// start-up ended at once), then `events` arrived.
fn snapshot_with(settings: Settings, events: Vec<Event>) -> Arc<Snapshot> {
    let mut model = Model::new(Arc::new(settings), epoch());
    model.clusters_known(t0());
    model.apply(events, t0());
    model.snapshot()
}

/// The room a UDP query leaves: no bound on size (an answer too large is
/// truncated whole by the encoder).
const UDP: Room = Room::Octets(usize::MAX);

const SOA: &str = "clusterset.local. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. * 7200 1800 86400 5";

struct Case {
    name: &'static str,
    qname: &'static str,
    qtype: u16,
    rcode: Rcode,
    answer: &'static [&'static str],
    authority: &'static [&'static str],
    additional: &'static [&'static str],
}

fn render(qname: &str, records: &[Record]) -> Vec<String> {
    let mut lines: Vec<String> = records
        .iter()
        .map(|r| {
            record_text(qname, r)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    lines.sort();
    lines
}

fn same(got: &[String], want: &[&str]) -> bool {
    let mut want: Vec<String> = want
        .iter()
        .map(|w| w.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    want.sort();
    got.len() == want.len()
        && got.iter().zip(&want).all(|(g, w)| {
            let (g, w): (Vec<&str>, Vec<&str>) = (g.split(' ').collect(), w.split(' ').collect());
            g.len() == w.len() && g.iter().zip(&w).all(|(g, w)| *w == "*" || g == w)
        })
}

fn run(snap: &Snapshot, cases: &[Case]) {
    for (i, case) in cases.iter().enumerate() {
        let name = QName::from_text(case.qname).expect("qname");
        let q = Question {
            name: &name,
            qtype: case.qtype,
            qclass: CLASS_IN,
            room: UDP,
        };
        let Answered { answer: a, .. } = answer(snap, q, i, Instant::now());
        let ctx = format!("case {i} {:?} ({} {})", case.name, case.qname, case.qtype);
        assert_eq!(a.rcode, case.rcode, "{ctx}: rcode");
        for (section, got, want) in [
            ("answer", &a.answers, case.answer),
            ("authority", &a.authority, case.authority),
            ("additional", &a.additional, case.additional),
        ] {
            let got = render(case.qname, got);
            assert!(
                same(&got, want),
                "{ctx}: {section}\n got: {got:#?}\nwant: {want:#?}"
            );
        }
        let in_zone = !matches!(a.rcode, Rcode::Refused);
        assert_eq!(a.authoritative, in_zone, "{ctx}: AA");
    }
}

use rtype::{A, AAAA, ANY, AXFR, HINFO, NS, PTR, SOA as SOA_T, SRV, TXT};

#[test]
fn answers() {
    let snap = snapshot_with(settings(), fixture_events());
    let cases = [
        Case {
            name: "apex SOA",
            qname: "clusterset.local.",
            qtype: SOA_T,
            rcode: Rcode::NoError,
            answer: &[SOA],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "apex NS with glue",
            qname: "clusterset.local.",
            qtype: NS,
            rcode: Rcode::NoError,
            answer: &["clusterset.local. 5 IN NS ns.dns.clusterset.local."],
            authority: &[],
            additional: &["ns.dns.clusterset.local. 5 IN A 10.96.0.53"],
        },
        Case {
            name: "apex A is NODATA",
            qname: "clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "apex ANY is the SOA alone",
            qname: "clusterset.local.",
            qtype: ANY,
            rcode: Rcode::NoError,
            answer: &[SOA],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "AXFR refused",
            qname: "clusterset.local.",
            qtype: AXFR,
            rcode: Rcode::Refused,
            answer: &[],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "ns.dns A",
            qname: "ns.dns.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &["ns.dns.clusterset.local. 5 IN A 10.96.0.53"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "dns ENT",
            qname: "dns.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "dns-version",
            qname: "dns-version.clusterset.local.",
            qtype: TXT,
            rcode: Rcode::NoError,
            answer: &["dns-version.clusterset.local. 28800 IN TXT \"1.0.0\""],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "svc ENT",
            qname: "svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "namespace ENT",
            qname: "prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "unknown namespace",
            qname: "nope.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "unknown second label",
            qname: "pod.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "out of zone",
            qname: "example.com.",
            qtype: A,
            rcode: Rcode::Refused,
            answer: &[],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "root NS (forward health check)",
            qname: ".",
            qtype: NS,
            rcode: Rcode::Refused,
            answer: &[],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "gateway mode: the local mirror ClusterIP",
            qname: "web-east.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &["web-east.prod.svc.clusterset.local. 5 IN A 10.96.10.1"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "other family is NODATA",
            qname: "web-east.prod.svc.clusterset.local.",
            qtype: AAAA,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "bare SRV lists every port of the mirror, unnamed included",
            qname: "web-east.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: &[
                "web-east.prod.svc.clusterset.local. 5 IN SRV 0 50 80 web-east.prod.svc.clusterset.local.",
                "web-east.prod.svc.clusterset.local. 5 IN SRV 0 50 8443 web-east.prod.svc.clusterset.local.",
            ],
            authority: &[],
            additional: &["web-east.prod.svc.clusterset.local. 5 IN A 10.96.10.1"],
        },
        Case {
            name: "named SRV",
            qname: "_http._tcp.web-east.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: &[
                "_http._tcp.web-east.prod.svc.clusterset.local. 5 IN SRV 0 100 80 web-east.prod.svc.clusterset.local.",
            ],
            authority: &[],
            additional: &["web-east.prod.svc.clusterset.local. 5 IN A 10.96.10.1"],
        },
        Case {
            name: "named SRV, wrong protocol",
            qname: "_http._udp.web-east.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "protocol ENT",
            qname: "_tcp.web-east.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "SRV name, other type",
            qname: "_http._tcp.web-east.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "no names under a ClusterIP-like service",
            qname: "foo.web-east.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "ANY is one RRset",
            qname: "web-east.prod.svc.clusterset.local.",
            qtype: ANY,
            rcode: Rcode::NoError,
            answer: &["web-east.prod.svc.clusterset.local. 5 IN A 10.96.10.1"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "unknown types are NODATA",
            qname: "web-east.prod.svc.clusterset.local.",
            qtype: HINFO,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "gateway mode without mirror: the gateway",
            qname: "pay-east.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &["pay-east.prod.svc.clusterset.local. 5 IN A 203.0.113.10"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "gateway SRV port",
            qname: "_http._tcp.pay-east.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: &[
                "_http._tcp.pay-east.prod.svc.clusterset.local. 5 IN SRV 0 100 4143 pay-east.prod.svc.clusterset.local.",
            ],
            authority: &[],
            additional: &["pay-east.prod.svc.clusterset.local. 5 IN A 203.0.113.10"],
        },
        Case {
            name: "not exported from that cluster",
            qname: "web-north.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "flat: ready endpoints",
            qname: "api-north.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[
                "api-north.prod.svc.clusterset.local. 5 IN A 10.20.1.1",
                "api-north.prod.svc.clusterset.local. 5 IN A 10.20.1.2",
            ],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "flat AAAA",
            qname: "api-north.prod.svc.clusterset.local.",
            qtype: AAAA,
            rcode: Rcode::NoError,
            answer: &["api-north.prod.svc.clusterset.local. 5 IN AAAA fd00:20::1"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "flat SRV: endpoint ports, every address in Additional",
            qname: "api-north.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: &[
                "api-north.prod.svc.clusterset.local. 5 IN SRV 0 50 8080 api-north.prod.svc.clusterset.local.",
                "api-north.prod.svc.clusterset.local. 5 IN SRV 0 50 53 api-north.prod.svc.clusterset.local.",
            ],
            authority: &[],
            additional: &[
                "api-north.prod.svc.clusterset.local. 5 IN A 10.20.1.1",
                "api-north.prod.svc.clusterset.local. 5 IN A 10.20.1.2",
                "api-north.prod.svc.clusterset.local. 5 IN AAAA fd00:20::1",
            ],
        },
        Case {
            name: "headless: ready pods",
            qname: "db-north.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[
                "db-north.prod.svc.clusterset.local. 5 IN A 10.20.2.10",
                "db-north.prod.svc.clusterset.local. 5 IN A 10.20.2.11",
            ],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "pod name",
            qname: "DB-0.Db-East.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &["DB-0.Db-East.prod.svc.clusterset.local. 5 IN A 10.10.2.10"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "not-ready pod",
            qname: "db-2.db-north.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "pod name SRV is NODATA",
            qname: "db-0.db-east.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "headless SRV: one target per pod",
            qname: "_pg._tcp.db-east.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: &[
                "_pg._tcp.db-east.prod.svc.clusterset.local. 5 IN SRV 0 50 5432 db-0.db-east.prod.svc.clusterset.local.",
                "_pg._tcp.db-east.prod.svc.clusterset.local. 5 IN SRV 0 50 5432 db-1.db-east.prod.svc.clusterset.local.",
            ],
            authority: &[],
            additional: &[
                "db-0.db-east.prod.svc.clusterset.local. 5 IN A 10.10.2.10",
                "db-1.db-east.prod.svc.clusterset.local. 5 IN A 10.10.2.11",
            ],
        },
        Case {
            name: "headless with no ready endpoint is NXDOMAIN",
            qname: "empty-east.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "dashed-IP hostnames, one target for both families",
            qname: "nohost-north.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: &[
                "nohost-north.prod.svc.clusterset.local. 5 IN SRV 0 50 7000 10-20-4-5.nohost-north.prod.svc.clusterset.local.",
                "nohost-north.prod.svc.clusterset.local. 5 IN SRV 0 50 7000 fd00-20--5.nohost-north.prod.svc.clusterset.local.",
            ],
            authority: &[],
            additional: &[
                "10-20-4-5.nohost-north.prod.svc.clusterset.local. 5 IN A 10.20.4.5",
                "fd00-20--5.nohost-north.prod.svc.clusterset.local. 5 IN AAAA fd00:20::5",
            ],
        },
        Case {
            name: "federated: union, local included",
            qname: "bb-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.30.3.1",
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.10.3.1",
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.20.3.1",
            ],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "federated ClusterIP SRV targets itself",
            qname: "_http._tcp.bb-federated.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: &[
                "_http._tcp.bb-federated.prod.svc.clusterset.local. 5 IN SRV 0 100 8080 bb-federated.prod.svc.clusterset.local.",
            ],
            authority: &[],
            additional: &[
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.30.3.1",
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.10.3.1",
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.20.3.1",
            ],
        },
        Case {
            name: "federated headless SRV: every pod of every cluster",
            qname: "db-federated.prod.svc.clusterset.local.",
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: &[
                "db-federated.prod.svc.clusterset.local. 5 IN SRV 0 25 5432 db-0.east.db-federated.prod.svc.clusterset.local.",
                "db-federated.prod.svc.clusterset.local. 5 IN SRV 0 25 5432 db-1.east.db-federated.prod.svc.clusterset.local.",
                "db-federated.prod.svc.clusterset.local. 5 IN SRV 0 25 5432 db-0.north.db-federated.prod.svc.clusterset.local.",
                "db-federated.prod.svc.clusterset.local. 5 IN SRV 0 25 5432 db-1.north.db-federated.prod.svc.clusterset.local.",
            ],
            authority: &[],
            additional: &[
                "db-0.east.db-federated.prod.svc.clusterset.local. 5 IN A 10.10.2.10",
                "db-1.east.db-federated.prod.svc.clusterset.local. 5 IN A 10.10.2.11",
                "db-0.north.db-federated.prod.svc.clusterset.local. 5 IN A 10.20.2.10",
                "db-1.north.db-federated.prod.svc.clusterset.local. 5 IN A 10.20.2.11",
            ],
        },
        Case {
            name: "federated pod, canonical",
            qname: "db-0.north.db-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &["db-0.north.db-federated.prod.svc.clusterset.local. 5 IN A 10.20.2.10"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "federated pod, CoreDNS alias",
            qname: "db-1-east.db-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &["db-1-east.db-federated.prod.svc.clusterset.local. 5 IN A 10.10.2.11"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "federated pod without cluster",
            qname: "db-0.db-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "federated cluster ENT",
            qname: "east.db-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "federated cluster without pods",
            qname: "south.db-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "not a federated member",
            qname: "web-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "local gateway-mode service: its own ClusterIP",
            qname: "cache-west.shop.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &["cache-west.shop.svc.clusterset.local. 5 IN A 10.130.40.1"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "PTR of a headless pod",
            qname: "10.2.10.10.in-addr.arpa.",
            qtype: PTR,
            rcode: Rcode::NoError,
            answer: &["10.2.10.10.in-addr.arpa. 5 IN PTR db-0.db-east.prod.svc.clusterset.local."],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "PTR of a flat endpoint",
            qname: "1.1.20.10.in-addr.arpa.",
            qtype: PTR,
            rcode: Rcode::NoError,
            answer: &["1.1.20.10.in-addr.arpa. 5 IN PTR api-north.prod.svc.clusterset.local."],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "PTR unknown",
            qname: "99.99.99.10.in-addr.arpa.",
            qtype: PTR,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[
                "10.in-addr.arpa. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. * 7200 1800 86400 5",
            ],
            additional: &[],
        },
        Case {
            name: "reverse ENT",
            qname: "20.10.in-addr.arpa.",
            qtype: PTR,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[
                "10.in-addr.arpa. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. * 7200 1800 86400 5",
            ],
            additional: &[],
        },
        Case {
            name: "PTR outside the configured reverse zones",
            qname: "1.0.168.192.in-addr.arpa.",
            qtype: PTR,
            rcode: Rcode::Refused,
            answer: &[],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "gateway VIPs get no PTR here",
            qname: "1.10.96.10.in-addr.arpa.",
            qtype: PTR,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[
                "10.in-addr.arpa. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. * 7200 1800 86400 5",
            ],
            additional: &[],
        },
    ];
    run(&snap, &cases);
}

#[test]
fn non_in_class_is_refused() {
    let snap = snapshot_with(settings(), fixture_events());
    let name = QName::from_text("web-east.prod.svc.clusterset.local").expect("name");
    let Answered { answer: a, .. } = answer(
        &snap,
        Question {
            name: &name,
            qtype: A,
            qclass: 3,
            room: UDP,
        },
        0,
        Instant::now(),
    );
    assert_eq!((a.rcode, a.authoritative), (Rcode::Refused, false));
    let Answered { answer: a, .. } = answer(
        &snap,
        Question {
            name: &name,
            qtype: A,
            qclass: CLASS_ANY,
            room: UDP,
        },
        0,
        Instant::now(),
    );
    assert_eq!(a.rcode, Rcode::NoError, "QCLASS ANY is treated as IN");
}

#[test]
fn rotation_changes_order_not_content() {
    let snap = snapshot_with(settings(), fixture_events());
    let name = QName::from_text("bb-federated.prod.svc.clusterset.local").expect("name");
    let q = Question {
        name: &name,
        qtype: A,
        qclass: CLASS_IN,
        room: UDP,
    };
    let orders: Vec<Vec<Record>> = (0..3)
        .map(|r| answer(&snap, q, r, Instant::now()).answer.answers)
        .collect();
    assert_ne!(orders[0], orders[1]);
    let sorted = |v: &Vec<Record>| render("x.", v);
    assert_eq!(sorted(&orders[0]), sorted(&orders[1]));
    assert_eq!(sorted(&orders[1]), sorted(&orders[2]));
}

/// The fixture with the sync of `unsynced` clusters left out: as the
/// source delivers it during start-up.
fn fixture_without_sync(unsynced: &[&str]) -> Vec<Event> {
    fixture_events()
        .into_iter()
        .filter(|e| !matches!(e, Event::Health { cluster, .. } if unsynced.contains(&&**cluster)))
        .collect()
}

/// A snapshot as the source builds it at start: clusters announced, then
/// (when `known`) the word that they are all there is.
fn start_up_snapshot(known: bool, events: Vec<Event>) -> Arc<Snapshot> {
    let mut model = Model::new(Arc::new(settings()), epoch());
    model.apply(events, t0());
    if known {
        model.clusters_known(t0());
    }
    model.snapshot()
}

#[test]
fn before_the_source_has_announced_its_clusters_any_name_may_exist() {
    let snap = start_up_snapshot(false, Vec::new());
    let cases = [
        Case {
            name: "a service name",
            qname: "web-east.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::ServFail,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "a federated pod name",
            qname: "db-0.east.db-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::ServFail,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "a namespace",
            qname: "prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::ServFail,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "an address",
            qname: "1.1.30.10.in-addr.arpa.",
            qtype: PTR,
            rcode: Rcode::ServFail,
            answer: &[],
            authority: &[
                "10.in-addr.arpa. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. * 7200 1800 86400 5",
            ],
            additional: &[],
        },
        Case {
            name: "a name the grammar never has",
            qname: "pod.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "the apex",
            qname: "clusterset.local.",
            qtype: SOA_T,
            rcode: Rcode::NoError,
            answer: &[SOA],
            authority: &[],
            additional: &[],
        },
    ];
    run(&snap, &cases);
    // Once it says every cluster is known (here: none), absence is final.
    let snap = start_up_snapshot(true, Vec::new());
    let nx = |qname| Case {
        name: "known to be absent",
        qname,
        qtype: A,
        rcode: Rcode::NxDomain,
        answer: &[],
        authority: &[SOA],
        additional: &[],
    };
    run(
        &snap,
        &[
            nx("web-east.prod.svc.clusterset.local."),
            nx("prod.svc.clusterset.local."),
        ],
    );
}

#[test]
fn during_start_up_only_final_answers_or_servfail() {
    // Every cluster is known; north has not loaded yet.
    let snap = start_up_snapshot(true, fixture_without_sync(&["north"]));
    let servfail = |name, qname, qtype| Case {
        name,
        qname,
        qtype,
        rcode: Rcode::ServFail,
        answer: &[],
        authority: &[SOA],
        additional: &[],
    };
    let cases = [
        Case {
            name: "a loaded cluster's name is final",
            qname: "web-east.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &["web-east.prod.svc.clusterset.local. 5 IN A 10.96.10.1"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "a loaded cluster's absent name is final",
            qname: "zzz-east.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        servfail(
            "an entry of a cluster still loading (NODATA would be a lie)",
            "api-north.prod.svc.clusterset.local.",
            AAAA,
        ),
        servfail(
            "a pod of a cluster still loading",
            "db-0.db-north.prod.svc.clusterset.local.",
            A,
        ),
        servfail(
            "a federated union a member is missing from",
            "bb-federated.prod.svc.clusterset.local.",
            A,
        ),
        servfail(
            "a federated SRV",
            "_pg._tcp.db-federated.prod.svc.clusterset.local.",
            SRV,
        ),
        servfail(
            "an absent name the loading cluster could hold",
            "zzz-north.prod.svc.clusterset.local.",
            A,
        ),
    ];
    run(&snap, &cases);

    // The local cluster's mirrors decide gateway-mode answers of others.
    let snap = start_up_snapshot(true, fixture_without_sync(&["west"]));
    run(
        &snap,
        &[
            servfail(
                "a gateway-mode name before the local mirrors",
                "web-east.prod.svc.clusterset.local.",
                A,
            ),
            servfail("even a flat one", "api-north.prod.svc.clusterset.local.", A),
        ],
    );

    // A cluster given up on ends start-up: the others answer in full.
    let mut events = fixture_without_sync(&["north"]);
    events.push(Event::Health {
        cluster: c("north"),
        health: Health {
            sync_given_up: true,
            ..Health::default()
        },
    });
    let snap = start_up_snapshot(true, events);
    assert!(snap.settled);
    run(
        &snap,
        &[
            Case {
                name: "the union of what has arrived",
                qname: "bb-federated.prod.svc.clusterset.local.",
                qtype: A,
                rcode: Rcode::NoError,
                answer: &[
                    "bb-federated.prod.svc.clusterset.local. 5 IN A 10.10.3.1",
                    "bb-federated.prod.svc.clusterset.local. 5 IN A 10.20.3.1",
                    "bb-federated.prod.svc.clusterset.local. 5 IN A 10.30.3.1",
                ],
                authority: &[],
                additional: &[],
            },
            servfail(
                "the given-up cluster's own names stay undecided",
                "api-north.prod.svc.clusterset.local.",
                A,
            ),
        ],
    );
}

#[test]
fn unsynced_clusters_turn_nxdomain_into_servfail() {
    // After start-up, south is linked and has not synced yet.
    let mut events = fixture_events();
    events.push(Event::ClusterUp {
        cluster: c("south"),
        local: false,
    });
    let snap = snapshot_with(settings(), events);
    assert!(snap.settled, "start-up ended before south was linked");
    let cases = [
        Case {
            name: "a name that south could hold",
            qname: "zzz-south.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::ServFail,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "federated names wait for every member",
            qname: "zzz-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::ServFail,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "an unknown namespace",
            qname: "nope.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::ServFail,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "a synced cluster's name is still NXDOMAIN",
            qname: "zzz-east.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
        Case {
            name: "existing names still answer",
            qname: "web-east.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &["web-east.prod.svc.clusterset.local. 5 IN A 10.96.10.1"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "never-existing shapes stay NXDOMAIN",
            qname: "pod.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
    ];
    run(&snap, &cases);
}

#[test]
fn stale_clusters_cap_ttl_then_servfail() {
    let broken = |since: Instant| Event::Health {
        cluster: c("north"),
        health: Health {
            synced: true,
            broken_since: Some(since),
            gateway_alive: None,
            sync_given_up: false,
        },
    };
    let mut s = settings();
    s.ttl = 30;
    s.negative_ttl = 30;
    s.stale_ttl = 5;
    s.max_stale = Some(Duration::from_secs(300));
    let name = QName::from_text("api-north.prod.svc.clusterset.local").expect("name");
    let q = Question {
        name: &name,
        qtype: A,
        qclass: CLASS_IN,
        room: UDP,
    };

    let mut events = fixture_events();
    events.push(broken(Instant::now()));
    let snap = snapshot_with(s.clone(), events);
    let Answered {
        answer: a, note, ..
    } = answer(&snap, q, 0, Instant::now());
    assert_eq!(a.rcode, Rcode::NoError);
    assert!(note.stale);
    assert!(
        a.answers.iter().all(|r| r.ttl == 5),
        "TTL capped while stale: {:?}",
        a.answers
    );

    let Answered { answer: a, .. } = answer(&snap, q, 0, Instant::now() + Duration::from_secs(301));
    assert_eq!(a.rcode, Rcode::ServFail, "SERVFAIL after max-stale");
    assert_eq!(a.authority.len(), 1);
}

#[test]
fn federated_leaves_out_unhealthy_members_and_fails_open() {
    let gateway_down = |cluster: &str| Event::Health {
        cluster: c(cluster),
        health: Health {
            synced: true,
            broken_since: None,
            gateway_alive: Some(false),
            sync_given_up: false,
        },
    };
    let name = QName::from_text("bb-federated.prod.svc.clusterset.local").expect("name");
    let q = Question {
        name: &name,
        qtype: A,
        qclass: CLASS_IN,
        room: UDP,
    };
    let addrs = |snap: &Snapshot| {
        let Answered {
            answer: a, note, ..
        } = answer(snap, q, 0, Instant::now());
        let mut v = render("bb.", &a.answers);
        v.iter_mut()
            .for_each(|l| *l = l.rsplit(' ').next().unwrap_or("").to_owned());
        v.sort();
        (v, note.fail_open)
    };

    let mut events = fixture_events();
    events.push(gateway_down("east"));
    let snap = snapshot_with(settings(), events.clone());
    assert_eq!(
        addrs(&snap),
        (vec!["10.20.3.1".to_owned(), "10.30.3.1".to_owned()], false)
    );
    // Per-cluster names are not health-filtered.
    let east = QName::from_text("bb-east.prod.svc.clusterset.local").expect("name");
    let Answered { answer: a, .. } = answer(
        &snap,
        Question {
            name: &east,
            qtype: A,
            qclass: CLASS_IN,
            room: UDP,
        },
        0,
        Instant::now(),
    );
    assert_eq!(a.answers.len(), 1);

    events.push(gateway_down("north"));
    events.push(gateway_down("west"));
    let snap = snapshot_with(settings(), events);
    let (v, fail_open) = addrs(&snap);
    assert_eq!(v.len(), 3, "every member out: the last-known union");
    assert!(fail_open);
}

/// The fixture with `service` of `cluster` refused by the cluster's budget,
/// as the source sends it: flagged, its slices withheld.
fn fixture_with_refused(refused: &[(&str, &str)]) -> Vec<Event> {
    fixture_events()
        .into_iter()
        .filter_map(|e| match e {
            Event::SliceApplied { cluster, slice, .. }
                if refused.contains(&(&*cluster, &*slice.service)) =>
            {
                None
            }
            Event::ServiceApplied {
                cluster,
                mut service,
            } => {
                service.refused = refused.contains(&(&*cluster, &*service.key.name));
                Some(Event::ServiceApplied { cluster, service })
            }
            other => Some(other),
        })
        .collect()
}

#[test]
fn refused_services_answer_servfail_never_nxdomain() {
    let snap = snapshot_with(
        settings(),
        fixture_with_refused(&[("north", "api"), ("north", "db"), ("north", "bb")]),
    );
    let servfail = |name, qname, qtype| Case {
        name,
        qname,
        qtype,
        rcode: Rcode::ServFail,
        answer: &[],
        authority: &[SOA],
        additional: &[],
    };
    let cases = [
        servfail(
            "a refused service",
            "api-north.prod.svc.clusterset.local.",
            A,
        ),
        servfail(
            "its SRV",
            "_http._tcp.api-north.prod.svc.clusterset.local.",
            SRV,
        ),
        servfail(
            "a pod of a refused headless service",
            "db-0.db-north.prod.svc.clusterset.local.",
            A,
        ),
        servfail(
            "a federated pod of the refused member",
            "db-0.north.db-federated.prod.svc.clusterset.local.",
            A,
        ),
        servfail(
            "the alias form of it",
            "db-0-north.db-federated.prod.svc.clusterset.local.",
            A,
        ),
        Case {
            name: "the federated union leaves the refused member out",
            qname: "db-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[
                "db-federated.prod.svc.clusterset.local. 5 IN A 10.10.2.10",
                "db-federated.prod.svc.clusterset.local. 5 IN A 10.10.2.11",
            ],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "a pod of a member that is held",
            qname: "db-1.east.db-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &["db-1.east.db-federated.prod.svc.clusterset.local. 5 IN A 10.10.2.11"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "other names of the cluster are exact",
            qname: "nohost-north.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &["nohost-north.prod.svc.clusterset.local. 5 IN A 10.20.4.5"],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "absent names stay NXDOMAIN",
            qname: "zzz-north.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NxDomain,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
    ];
    run(&snap, &cases);

    // Every member refused: the union is undecided, not empty.
    let snap = snapshot_with(
        settings(),
        fixture_with_refused(&[("east", "db"), ("north", "db")]),
    );
    run(
        &snap,
        &[
            servfail(
                "a union of refused members",
                "db-federated.prod.svc.clusterset.local.",
                A,
            ),
            servfail(
                "its SRV",
                "_pg._tcp.db-federated.prod.svc.clusterset.local.",
                SRV,
            ),
        ],
    );
}

/// `max-answer-records` 3 and 2 over the small fixture: each answer is one
/// window of the RRset, the last wrapping round to the start; a capped SRV
/// answer carries the addresses of its own targets only.
#[test]
fn max_answer_records_answers_windows_of_the_rrset() {
    let mut s = settings();
    s.max_answer_records = 3;
    let snap = snapshot_with(s, fixture_events());
    let fed = "db-federated.prod.svc.clusterset.local.";
    let target =
        |t: &str| format!("{fed} 5 IN SRV 0 25 5432 {t}.db-federated.prod.svc.clusterset.local.");
    let addr =
        |t: &str, ip: &str| format!("{t}.db-federated.prod.svc.clusterset.local. 5 IN A {ip}");
    let leak = |v: Vec<String>| -> &'static [&'static str] {
        Box::leak(
            v.into_iter()
                .map(|l| &*Box::leak(l.into_boxed_str()))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        )
    };
    // `run` asks case i with rotation i.
    let cases = [
        Case {
            name: "window 0: the first three of four targets",
            qname: fed,
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: leak(vec![
                target("db-0.east"),
                target("db-0.north"),
                target("db-1.east"),
            ]),
            authority: &[],
            additional: leak(vec![
                addr("db-0.east", "10.10.2.10"),
                addr("db-0.north", "10.20.2.10"),
                addr("db-1.east", "10.10.2.11"),
            ]),
        },
        Case {
            name: "window 1: the fourth, then round to the start",
            qname: fed,
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: leak(vec![
                target("db-1.north"),
                target("db-0.east"),
                target("db-0.north"),
            ]),
            authority: &[],
            additional: leak(vec![
                addr("db-1.north", "10.20.2.11"),
                addr("db-0.east", "10.10.2.10"),
                addr("db-0.north", "10.20.2.10"),
            ]),
        },
        Case {
            name: "window 0 again (two windows)",
            qname: fed,
            qtype: SRV,
            rcode: Rcode::NoError,
            answer: leak(vec![
                target("db-0.east"),
                target("db-0.north"),
                target("db-1.east"),
            ]),
            authority: &[],
            additional: leak(vec![
                addr("db-0.east", "10.10.2.10"),
                addr("db-0.north", "10.20.2.10"),
                addr("db-1.east", "10.10.2.11"),
            ]),
        },
        Case {
            name: "three addresses are not capped by 3",
            qname: "bb-federated.prod.svc.clusterset.local.",
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.10.3.1",
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.20.3.1",
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.30.3.1",
            ],
            authority: &[],
            additional: &[],
        },
    ];
    run(&snap, &cases);

    let mut s = settings();
    s.max_answer_records = 2;
    let snap = snapshot_with(s, fixture_events());
    let bb = "bb-federated.prod.svc.clusterset.local.";
    let cases = [
        Case {
            name: "max 2 of three addresses, window 0",
            qname: bb,
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.10.3.1",
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.20.3.1",
            ],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "max 2 of three addresses, window 1 wraps round",
            qname: bb,
            qtype: A,
            rcode: Rcode::NoError,
            answer: &[
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.30.3.1",
                "bb-federated.prod.svc.clusterset.local. 5 IN A 10.10.3.1",
            ],
            authority: &[],
            additional: &[],
        },
        Case {
            name: "a NODATA is not capped",
            qname: bb,
            qtype: AAAA,
            rcode: Rcode::NoError,
            answer: &[],
            authority: &[SOA],
            additional: &[],
        },
    ];
    run(&snap, &cases);
}

/// The big fixture (`db` in `big`: 1,500 pods in each of west, east and
/// north) with `max-answer-records` set to `max`.
fn big_snapshot(max: usize) -> Arc<Snapshot> {
    let mut s = settings();
    s.max_answer_records = max;
    snapshot_with(s, big_events())
}

/// A query for `qname` `qtype` with EDNS, as a client sends it.
fn query_packet(qname: &str, qtype: u16) -> Vec<u8> {
    let mut b = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in qname.trim_end_matches('.').split('.') {
        b.push(label.len() as u8);
        b.extend_from_slice(label.as_bytes());
    }
    b.push(0);
    b.extend_from_slice(&qtype.to_be_bytes());
    b.extend_from_slice(&[0, 1, 0, 0, 41, 4, 0xD0, 0, 0, 0, 0, 0, 0]);
    b
}

/// Every record of the big RRsets, in zone-file text.
fn big_rrset(qname: &str, qtype: u16) -> BTreeSet<String> {
    let clusters = ["west", "east", "north"];
    let mut all = BTreeSet::new();
    for (c, cluster) in clusters.iter().enumerate() {
        for i in 0..BIG_PODS {
            let (ip, host) = big_pod(c, i);
            match qtype {
                A => all.insert(format!("{qname} 5 IN A {ip}")),
                _ if *cluster == "east" => all.insert(format!(
                    "{qname} 5 IN SRV 0 1 5432 {host}.db-east.big.svc.clusterset.local."
                )),
                _ => false,
            };
        }
    }
    all
}

/// An RRset too large for one answer: what each answer carries and how
/// many windows serve every record.
struct Big {
    name: &'static str,
    qname: &'static str,
    qtype: u16,
    /// `max-answer-records`.
    max: usize,
    /// Asked over TCP (else UDP), with EDNS.
    tcp: bool,
    /// Records of the RRset in each answer.
    per_answer: usize,
    /// Answers that together carry every record.
    windows: usize,
}

#[test]
fn big_answers_carry_what_fits_and_successive_answers_serve_every_record() {
    let srv = "db-east.big.svc.clusterset.local.";
    let a = "db-federated.big.svc.clusterset.local.";
    let cases = [
        Big {
            name: "1,500 SRV over TCP: 1,091 of 60 octets fit 65,535",
            qname: srv,
            qtype: SRV,
            max: 0,
            tcp: true,
            per_answer: 1091,
            windows: 2,
        },
        Big {
            name: "4,500 A over TCP: 4,091 of 16 octets fit 65,535",
            qname: a,
            qtype: A,
            max: 0,
            tcp: true,
            per_answer: 4091,
            windows: 2,
        },
        Big {
            name: "max-answer-records 8: 8 SRV over UDP",
            qname: srv,
            qtype: SRV,
            max: 8,
            tcp: false,
            per_answer: 8,
            windows: 188,
        },
        Big {
            name: "max-answer-records 8: 8 A over UDP",
            qname: a,
            qtype: A,
            max: 8,
            tcp: false,
            per_answer: 8,
            windows: 563,
        },
        Big {
            name: "max-answer-records 8: 8 A over TCP too",
            qname: a,
            qtype: A,
            max: 8,
            tcp: true,
            per_answer: 8,
            windows: 563,
        },
    ];
    for case in cases {
        big_case(&case);
    }
}

fn big_case(case: &Big) {
    let ctx = case.name;
    let snap = big_snapshot(case.max);
    let packet = query_packet(case.qname, case.qtype);
    let req = crate::dns::wire::decode(&packet).expect("a query");
    let limit = if case.tcp { 65535 } else { 1232 };
    let room = if case.tcp {
        Room::Octets(req.answer_room(limit))
    } else {
        UDP
    };
    let q = Question {
        name: &req.name,
        qtype: case.qtype,
        qclass: CLASS_IN,
        room,
    };
    let want = big_rrset(case.qname, case.qtype);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for rotation in 0..case.windows {
        let got = answer(&snap, q, rotation, Instant::now());
        let a = &got.answer;
        assert_eq!((a.rcode, a.authoritative), (Rcode::NoError, true), "{ctx}");
        assert_eq!(
            a.answers.len(),
            case.per_answer,
            "{ctx}: rotation {rotation}"
        );
        assert!(got.note.capped, "{ctx}: counted as capped");
        assert_eq!(got.rotated, case.windows, "{ctx}: windows");
        let records = render(case.qname, &a.answers);
        assert!(
            records.iter().all(|r| want.contains(r)),
            "{ctx}: {records:?}"
        );
        if case.qtype == SRV {
            // The addresses of the targets answered, one each, and no others.
            let targets: BTreeSet<&str> = records
                .iter()
                .filter_map(|r| r.rsplit(' ').next())
                .collect();
            let owners: BTreeSet<String> = render(case.qname, &a.additional)
                .iter()
                .filter_map(|r| r.split(' ').next().map(str::to_owned))
                .collect();
            assert_eq!(a.additional.len(), case.per_answer, "{ctx}: additional");
            assert!(
                owners.iter().all(|o| targets.contains(o.as_str())),
                "{ctx}: additional owners"
            );
        }
        seen.extend(records);
        // On the wire: the whole window, no TC (Additional trimmed as needed).
        let fit = crate::dns::wire::encode(&req, a, limit, &mut out);
        assert!(
            !fit.truncated && out.len() <= limit,
            "{ctx}: {fit:?}, {} octets",
            out.len()
        );
        assert_eq!(out[2] & 0x02, 0, "{ctx}: TC clear");
        assert_eq!(
            u16::from_be_bytes([out[6], out[7]]) as usize,
            case.per_answer
        );
    }
    assert_eq!(seen.len(), want.len(), "{ctx}: every record served");
    let again = |r| answer(&snap, q, r, Instant::now()).answer.answers;
    assert_eq!(again(case.windows), again(0), "{ctx}: the windows repeat");
}

#[test]
fn over_udp_a_big_answer_is_truncated_whole_for_the_client_to_retry_over_tcp() {
    let snap = big_snapshot(0);
    for (qname, qtype, n) in [
        ("db-east.big.svc.clusterset.local.", SRV, BIG_PODS),
        ("db-federated.big.svc.clusterset.local.", A, 3 * BIG_PODS),
    ] {
        let packet = query_packet(qname, qtype);
        let req = crate::dns::wire::decode(&packet).expect("a query");
        let q = Question {
            name: &req.name,
            qtype,
            qclass: CLASS_IN,
            room: UDP,
        };
        let got = answer(&snap, q, 0, Instant::now());
        assert_eq!(got.answer.answers.len(), n, "{qname}: the whole RRset");
        assert!(!got.note.capped, "{qname}");
        let mut out = Vec::new();
        let fit = crate::dns::wire::encode(&req, &got.answer, 1232, &mut out);
        assert!(fit.truncated, "{qname}");
        // TC and AA set, no records.
        assert_eq!(out[2] & 0x06, 0x06, "{qname}: TC and AA");
        assert_eq!(&out[6..10], &[0, 0, 0, 0], "{qname}: no records");
        // A zone dump gets every record, max-answer-records or not.
        let whole = Question {
            room: Room::Whole,
            ..q
        };
        let dumped = answer(&big_snapshot(8), whole, 0, Instant::now());
        assert_eq!(dumped.answer.answers.len(), n, "{qname}: dump");
    }
}

/// RFC 8914: each kind of SERVFAIL and stale answer says why, naming the
/// cluster; a fresh answer says nothing.
#[test]
fn extended_errors_say_why() {
    let secs = Duration::from_secs;
    let health = |cluster: &str, synced: bool, broken_since: Option<Instant>| Event::Health {
        cluster: c(cluster),
        health: Health {
            synced,
            broken_since,
            gateway_alive: None,
            sync_given_up: false,
        },
    };
    let mut s = settings();
    s.max_stale = Some(secs(300));
    // North silent since t0; south and far linked later and never synced.
    let mut events = fixture_events();
    events.push(health("north", true, Some(t0())));
    for cluster in ["south", "far"] {
        events.push(Event::ClusterUp {
            cluster: c(cluster),
            local: false,
        });
    }
    let snap = snapshot_with(s.clone(), events);
    let refused = snapshot_with(
        s.clone(),
        fixture_with_refused(&[("north", "api"), ("north", "db")]),
    );
    // Every member of bb silent past the grace (30 s) when the snapshot
    // was built: the federated name fails open to the last-known union.
    let ago = |n: u64| t0().checked_sub(secs(n)).expect("uptime over a minute");
    let mut events = fixture_events();
    for (cluster, silent) in [("west", 40), ("east", 60), ("north", 50)] {
        events.push(health(cluster, true, Some(ago(silent))));
    }
    let failed_open = snapshot_with(s, events);
    let why = |snap: &Snapshot, qname: &str, after: u64| {
        let name = QName::from_text(qname).expect("name");
        let q = Question {
            name: &name,
            qtype: A,
            qclass: CLASS_IN,
            room: UDP,
        };
        let a = answer(snap, q, 0, t0() + secs(after)).answer;
        (a.rcode, a.ede.map(|e| (e.code, e.text)))
    };
    let ede = |code: u16, text: &str| Some((code, text.to_owned()));
    type Why = (Rcode, Option<(u16, String)>);
    let cases: [(&str, &Snapshot, &str, u64, Why); 11] = [
        (
            "fresh",
            &snap,
            "web-east.prod.svc.clusterset.local",
            42,
            (Rcode::NoError, None),
        ),
        (
            "stale: the cluster and its age",
            &snap,
            "api-north.prod.svc.clusterset.local",
            42,
            (
                Rcode::NoError,
                ede(3, "cluster north not heard from for 42s"),
            ),
        ),
        (
            "a federated union with a stale member (within the grace)",
            &snap,
            "bb-federated.prod.svc.clusterset.local",
            10,
            (
                Rcode::NoError,
                ede(3, "member north not heard from, within the federated grace"),
            ),
        ),
        (
            "past max-stale",
            &snap,
            "api-north.prod.svc.clusterset.local",
            301,
            (
                Rcode::ServFail,
                ede(22, "cluster north not heard from for 301s (max-stale 300s)"),
            ),
        ),
        (
            "a fail-open union: every member, oldest first",
            &failed_open,
            "bb-federated.prod.svc.clusterset.local",
            0,
            (
                Rcode::NoError,
                ede(
                    3,
                    "clusters east (60s), north (50s), west (40s) not heard from",
                ),
            ),
        ),
        (
            "a name an unsynced cluster could hold: that cluster alone",
            &snap,
            "zzz-south.prod.svc.clusterset.local",
            1,
            (Rcode::ServFail, ede(14, "cluster south not synced yet")),
        ),
        (
            "a federated name any unsynced cluster could join",
            &snap,
            "zzz-federated.prod.svc.clusterset.local",
            1,
            (
                Rcode::ServFail,
                ede(14, "clusters far, south not synced yet"),
            ),
        ),
        (
            "a namespace any unsynced cluster could export into",
            &snap,
            "nope.svc.clusterset.local",
            1,
            (
                Rcode::ServFail,
                ede(14, "clusters far, south not synced yet"),
            ),
        ),
        (
            "refused by the budget",
            &refused,
            "api-north.prod.svc.clusterset.local",
            1,
            (
                Rcode::ServFail,
                ede(18, "refused by the budget of cluster north"),
            ),
        ),
        (
            "a pod of a refused federated member",
            &refused,
            "db-0.north.db-federated.prod.svc.clusterset.local",
            1,
            (
                Rcode::ServFail,
                ede(18, "refused by the budget of cluster north"),
            ),
        ),
        (
            "NXDOMAIN says nothing",
            &refused,
            "zzz-north.prod.svc.clusterset.local",
            1,
            (Rcode::NxDomain, None),
        ),
    ];
    for (case, snap, qname, after, want) in cases {
        assert_eq!(why(snap, qname, after), want, "{case}");
    }
}

/// A stale answer too large for one response still says why, within the
/// limit: capped over TCP, its records leave room for the EDE; truncated
/// over UDP, the OPT keeps it.
#[test]
fn a_big_stale_answer_keeps_its_extended_error_within_the_limit() {
    use crate::dns::wire::{encode, tests::ede_in};
    let mut events = big_events();
    events.push(Event::Health {
        cluster: c("east"),
        health: Health {
            synced: true,
            broken_since: Some(t0()),
            ..Health::default()
        },
    });
    let snap = snapshot_with(settings(), events);
    let federated = "db-federated.big.svc.clusterset.local.";
    let east = "db-east.big.svc.clusterset.local.";
    // (name, type, over TCP, truncated)
    let cases = [
        (federated, A, true, false),
        (east, SRV, true, false),
        (federated, A, false, true),
        (east, SRV, false, true),
    ];
    for (qname, qtype, tcp, truncated) in cases {
        let stale = Some((
            3,
            if qname == federated {
                "member east not heard from, within the federated grace"
            } else {
                "cluster east not heard from for 42s"
            }
            .to_owned(),
        ));
        let ctx = format!("{qname} {qtype} over {}", if tcp { "TCP" } else { "UDP" });
        let packet = query_packet(qname, qtype);
        let req = crate::dns::wire::decode(&packet).expect("a query");
        let limit = if tcp { 65535 } else { 1232 };
        let room = if tcp {
            Room::Octets(req.answer_room(limit))
        } else {
            UDP
        };
        let q = Question {
            name: &req.name,
            qtype,
            qclass: CLASS_IN,
            room,
        };
        let got = answer(&snap, q, 0, t0() + Duration::from_secs(42));
        assert_eq!(got.note.capped, tcp, "{ctx}: capped over TCP only");
        let mut out = Vec::new();
        let fit = encode(&req, &got.answer, limit, &mut out);
        assert_eq!(fit.truncated, truncated, "{ctx}");
        assert!(out.len() <= limit, "{ctx}: {} octets", out.len());
        assert_eq!(ede_in(&out), stale, "{ctx}");
        let an = u16::from_be_bytes([out[6], out[7]]) as usize;
        assert_eq!(an, if tcp { got.answer.answers.len() } else { 0 }, "{ctx}");
    }
}

mod locality;
