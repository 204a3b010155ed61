//! Zone transfers: who may transfer, and that the messages carry exactly
//! the zone `dump` prints, SOA first and last, each within a stream
//! message.

use std::collections::BTreeSet;
use std::sync::Arc;

use hickory_proto::op::Message;

use super::*;
use crate::dns::journal::Versions;
use crate::dns::stats::{XfrKind, XfrOutcome};
use crate::dns::zonefile::dump;
use crate::model::testing::{big_events, epoch, fixture_events, settings, t0};
use crate::model::{Event, Model, Settings};
use crate::vocab::trust::parse_cidrs;

fn snapshot(allow: &[&str], events: Vec<Event>) -> Arc<Snapshot> {
    let mut s: Settings = settings();
    s.allow_transfer = parse_cidrs(allow.iter().copied()).expect("cidrs");
    let mut model = Model::new(Arc::new(s), epoch());
    model.clusters_known(t0());
    model.apply(events, t0());
    model.snapshot()
}

/// A query for `qname` `qtype`, class IN, no EDNS.
fn query(qname: &str, qtype: u16) -> Vec<u8> {
    let mut b = vec![0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in qname.trim_end_matches('.').split('.') {
        b.push(label.len() as u8);
        b.extend_from_slice(label.as_bytes());
    }
    b.push(0);
    b.extend_from_slice(&qtype.to_be_bytes());
    b.extend_from_slice(&[0, 1]);
    b
}

/// What [`check`] makes of `packet` from `peer`, in a word.
fn checked(snap: &Snapshot, packet: &[u8], peer: &str) -> String {
    let req = wire::decode(packet).expect("a query");
    match check(snap, (&req, packet), peer.parse().expect("ip"), NOW) {
        Check::NotOne => "not one".to_owned(),
        Check::Refused(k) => format!("refused {}", k.label()),
        Check::NotAuth(k, why) => format!("notauth {} {why:?}", k.label()),
        Check::Allowed(k, v) => format!(
            "allowed {}{}",
            k.label(),
            v.map_or(String::new(), |v| format!(" signed by {}", v.key.name))
        ),
    }
}

fn ask(snap: &Snapshot, qname: &str, qtype: u16, peer: &str) -> String {
    checked(snap, &query(qname, qtype), peer)
}

/// The time TSIG checks run at.
const NOW: u64 = 1_795_000_000;

/// The messages of the transfer of `kind` the query `packet` asks for,
/// with the journal `journal`, and what it was.
fn built_with(
    snap: &Snapshot,
    journal: &Versions,
    packet: &[u8],
    kind: XfrKind,
) -> (XfrOutcome, Vec<Vec<u8>>) {
    let req = wire::decode(packet).expect("a query");
    let plan = plan(snap, journal, kind, packet);
    let mut messages = Vec::new();
    produce(snap, (&req, &plan), t0(), &mut |m| {
        messages.push(m);
        true
    })
    .expect("produced to the end");
    (plan.outcome(), messages)
}

/// The messages of the transfer of `kind` the query `packet` asks for,
/// with an empty journal, and whether the client was up to date.
fn built(snap: &Snapshot, packet: &[u8], kind: XfrKind) -> (bool, Vec<Vec<u8>>) {
    let (outcome, messages) = built_with(snap, &Versions::default(), packet, kind);
    (outcome == XfrOutcome::UpToDate, messages)
}

/// The messages of a whole-zone transfer (AXFR) of `snap`.
fn axfr_messages(snap: &Snapshot) -> Vec<Vec<u8>> {
    built(snap, &query("clusterset.local", rtype::AXFR), XfrKind::Axfr).1
}

/// An IXFR query for `qname` whose Authority holds an SOA of `serial`.
fn ixfr_query(serial: u32) -> Vec<u8> {
    let mut b = query("clusterset.local", rtype::IXFR);
    b[9] = 1; // NSCOUNT
    b.extend_from_slice(&[0xC0, 12]); // the question's name
    b.extend_from_slice(&rtype::SOA.to_be_bytes());
    b.extend_from_slice(&[0, 1, 0, 0, 0, 0]); // class IN, TTL 0
    b.extend_from_slice(&22u16.to_be_bytes()); // RDLENGTH
    b.extend_from_slice(&[0, 0]); // MNAME, RNAME: the root
    b.extend_from_slice(&serial.to_be_bytes());
    b.extend_from_slice(&[0; 16]);
    b
}

#[test]
fn who_may_transfer_table() {
    let snap = snapshot(&["127.0.0.1", "10.0.0.0/8", "fd00::/8"], fixture_events());
    let none = snapshot(&[], fixture_events());
    let zone = "clusterset.local";
    let cases = [
        (
            "allowed address",
            &snap,
            zone,
            rtype::AXFR,
            "127.0.0.1",
            true,
        ),
        ("allowed range", &snap, zone, rtype::AXFR, "10.1.2.3", true),
        (
            "IPv4-mapped IPv6 of an allowed address",
            &snap,
            zone,
            rtype::AXFR,
            "::ffff:10.1.2.3",
            true,
        ),
        ("IPv6 range", &snap, zone, rtype::AXFR, "fd00::53", true),
        (
            "outside the ranges",
            &snap,
            zone,
            rtype::AXFR,
            "192.0.2.1",
            false,
        ),
        (
            "nothing allowed (the default)",
            &none,
            zone,
            rtype::AXFR,
            "127.0.0.1",
            false,
        ),
    ];
    for (name, snap, qname, qtype, peer, allowed) in cases {
        let want = if allowed {
            "allowed axfr"
        } else {
            "refused axfr"
        };
        assert_eq!(ask(snap, qname, qtype, peer), want, "{name}");
    }
    let not_one = [
        (
            "a name below the apex",
            "web-east.prod.svc.clusterset.local",
            rtype::AXFR,
        ),
        ("another zone", "example.com", rtype::AXFR),
        ("SOA of the apex", zone, rtype::SOA),
        (
            "IXFR of a name below the apex",
            "web-east.prod.svc.clusterset.local",
            rtype::IXFR,
        ),
    ];
    for (name, qname, qtype) in not_one {
        assert_eq!(ask(&snap, qname, qtype, "127.0.0.1"), "not one", "{name}");
    }
}

/// The records of the messages, in zone-file text, in order.
fn records_of(messages: &[Vec<u8>]) -> Vec<String> {
    let mut out = Vec::new();
    for m in messages {
        assert!(m.len() <= usize::from(u16::MAX), "a message fits a stream");
        let msg = Message::from_vec(m).expect("a DNS message");
        assert!(msg.metadata.authoritative, "AA");
        assert_eq!(msg.metadata.id, 7, "the query's id");
        for r in &msg.answers {
            out.push(format!(
                "{} {} IN {} {}",
                r.name,
                r.ttl,
                r.record_type(),
                r.data
            ));
        }
    }
    out
}

/// `dump`'s records, as hickory prints them back from the wire.
fn dumped(snap: &Snapshot) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let messages = axfr_messages(snap);
    let text = dump(snap);
    let lines = text.lines().skip(1).count();
    for r in records_of(&messages) {
        out.insert(r);
    }
    assert_eq!(out.len(), lines, "as many distinct records as dump prints");
    out
}

#[test]
fn an_axfr_is_the_dumped_zone_soa_first_and_last() {
    let snap = snapshot(&["127.0.0.1"], fixture_events());
    let messages = axfr_messages(&snap);
    let records = records_of(&messages);
    let soa = |r: &str| r.contains(" IN SOA ");
    assert!(soa(records.first().expect("records")), "{records:?}");
    assert!(soa(records.last().expect("records")), "{records:?}");
    assert_eq!(records.first(), records.last(), "one serial");
    assert_eq!(records.iter().filter(|r| soa(r)).count(), 2);
    assert_eq!(
        dumped(&snap).len() + 1,
        records.len(),
        "dump's records and the closing SOA"
    );
    assert!(
        records.contains(&"clusterset.local. 5 IN NS ns.dns.clusterset.local.".to_owned()),
        "{records:?}"
    );
}

#[test]
fn a_big_zone_takes_several_messages_and_loses_nothing() {
    let snap = snapshot(&["127.0.0.1"], big_events());
    let messages = axfr_messages(&snap);
    assert!(messages.len() > 5, "{} messages", messages.len());
    let records = records_of(&messages);
    // 4,500 pods federated: every address of the union is in the zone,
    // whatever max-answer-records a query would take.
    let union = records
        .iter()
        .filter(|r| {
            r.starts_with("db-federated.big.svc.clusterset.local. ") && r.contains(" IN A ")
        })
        .count();
    assert_eq!(union, 4500);
    assert_eq!(
        dumped(&snap).len() + 1,
        records.len(),
        "dump's records and the closing SOA"
    );
}

#[test]
fn an_ixfr_gets_the_soa_alone_when_current_else_the_whole_zone() {
    let snap = snapshot(&["127.0.0.1"], fixture_events());
    let serial = snap.serial;
    let full = records_of(&axfr_messages(&snap));
    // (the client's serial, up to date)
    let cases = [
        (serial, true),
        (serial.wrapping_add(5), true),
        (serial.wrapping_sub(1), false),
        (serial.wrapping_sub(1 << 30), false),
        // Half the serial space away is "newer" by RFC 1982: up to date.
        (serial.wrapping_add(1 << 30), true),
    ];
    for (theirs, current) in cases {
        let (up_to_date, messages) = built(&snap, &ixfr_query(theirs), XfrKind::Ixfr);
        assert_eq!(up_to_date, current, "{theirs}");
        let records = records_of(&messages);
        if current {
            assert_eq!(records.len(), 1, "{theirs}: the SOA alone");
            assert!(records[0].contains(" IN SOA "), "{records:?}");
            assert!(records[0].contains(&format!(" {serial} ")), "{records:?}");
        } else {
            assert_eq!(records, full, "{theirs}: the whole zone, AXFR-style");
        }
    }
    // An IXFR without an SOA of the client's: the whole zone.
    let whole = records_of(
        &built(
            &snap,
            &query("clusterset.local", rtype::IXFR),
            XfrKind::Ixfr,
        )
        .1,
    );
    assert_eq!(whole, full);
}

#[tokio::test]
async fn a_transfer_past_the_limit_is_refused_as_busy_until_one_ends() {
    use crate::dns::handler::{Handler, MAX_TRANSFERS};
    use crate::dns::stats::DnsStats;
    let snap = snapshot(&["127.0.0.1"], fixture_events());
    let stats = Arc::new(DnsStats::default());
    let handler = Handler::new(
        Arc::new(arc_swap::ArcSwap::new(snap.clone())),
        stats.clone(),
        0,
    );
    let packet = query("clusterset.local", rtype::AXFR);
    let peer = "127.0.0.1".parse().expect("ip");
    let mut running: Vec<_> = (0..MAX_TRANSFERS)
        .map(|i| {
            handler
                .transfer(&packet, peer)
                .unwrap_or_else(|| panic!("transfer {i}"))
        })
        .collect();
    assert!(
        handler.transfer(&packet, peer).is_none(),
        "one more is busy"
    );
    let count = |o: XfrOutcome| {
        let counts = stats.read();
        counts.transfers[XfrKind::Axfr as usize].1[o as usize].1
    };
    assert_eq!(count(XfrOutcome::Busy), 1);
    // An IXFR of a current client is a message: never busy.
    let current = handler.transfer(&ixfr_query(snap.serial), peer);
    assert!(
        current.is_some(),
        "an up-to-date IXFR is answered while every slot is taken"
    );
    // Read to the end: each was produced whole, and counted.
    let mut first = Vec::new();
    for (i, xfr) in running.iter_mut().enumerate() {
        let mut messages = Vec::new();
        while let Some(m) = xfr.messages.recv().await {
            messages.push(m);
        }
        assert_eq!(
            records_of(&messages),
            records_of(&axfr_messages(&snap)),
            "{i}"
        );
        first.push(messages);
    }
    assert_eq!(count(XfrOutcome::Full), MAX_TRANSFERS as u64);
    drop(running);
    assert!(
        handler.transfer(&packet, peer).is_some(),
        "a slot is free again"
    );
}

#[test]
fn with_transfer_keys_a_transfer_must_be_signed_by_one() {
    use crate::dns::tsig::sign_request;
    use crate::vocab::tsig::{TsigAlgorithm, TsigKey};
    let key = |name: &str, secret: &[u8]| TsigKey {
        name: name.to_owned(),
        algorithm: TsigAlgorithm::HmacSha256,
        secret: secret.to_vec(),
    };
    let ours = key("xfr-key", b"0123456789abcdef0123456789abcdef");
    let mut s: Settings = settings();
    s.allow_transfer = parse_cidrs(["127.0.0.1"]).expect("cidrs");
    s.transfer_keys = vec![ours.clone()];
    let mut model = Model::new(Arc::new(s), epoch());
    model.clusters_known(t0());
    model.apply(fixture_events(), t0());
    let snap = model.snapshot();
    let signed = |k: &TsigKey, at: u64| {
        let mut q = query("clusterset.local", rtype::AXFR);
        sign_request(&mut q, k, at);
        q
    };
    let cases = [
        (
            "signed by our key",
            signed(&ours, NOW),
            "127.0.0.1",
            "allowed axfr signed by xfr-key",
        ),
        (
            "unsigned",
            query("clusterset.local", rtype::AXFR),
            "127.0.0.1",
            "refused axfr",
        ),
        (
            "another secret",
            signed(&key("xfr-key", b"another secret of 32 octets....."), NOW),
            "127.0.0.1",
            "notauth axfr BadSig",
        ),
        (
            "a key we do not have",
            signed(&key("other", b"0123456789abcdef0123456789abcdef"), NOW),
            "127.0.0.1",
            "notauth axfr BadKey",
        ),
        (
            "signed an hour ago",
            signed(&ours, NOW - 3600),
            "127.0.0.1",
            "notauth axfr BadTime",
        ),
        (
            "signed, from an address not allowed",
            signed(&ours, NOW),
            "192.0.2.1",
            "refused axfr",
        ),
    ];
    for (name, packet, peer, want) in cases {
        assert_eq!(checked(&snap, &packet, peer), want, "{name}");
    }
}

#[test]
fn an_ixfr_from_a_journal_serial_gets_each_versions_differences() {
    use crate::model::testing::db_north;
    let mut s: Settings = settings();
    s.allow_transfer = parse_cidrs(["127.0.0.1"]).expect("cidrs");
    let mut model = Model::new(Arc::new(s), epoch());
    model.clusters_known(t0());
    model.apply(fixture_events(), t0());
    let v0 = model.publish();
    let mut journal = Versions {
        serial: v0.serial,
        ..Versions::default()
    };
    let mut snaps = vec![v0];
    for (i, ip) in ["10.20.2.50", "10.20.2.51"].into_iter().enumerate() {
        let pods = [("10.20.2.10", Some("db-0"), true), (ip, Some("db-1"), true)];
        let at = t0() + std::time::Duration::from_secs(i as u64 + 1);
        model.apply([db_north(&pods)], at);
        let next = model.publish();
        journal = journal.record((snaps.last().expect("one"), &next), Default::default(), at);
        snaps.push(next);
    }
    let (v0, v1, v2) = (snaps[0].serial, snaps[1].serial, snaps[2].serial);
    let now = &snaps[2];
    let soa = |serial: u32| {
        format!(
            "clusterset.local. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. {serial} 7200 1800 86400 5"
        )
    };
    let a = |ip: &str| format!("db-1.db-north.prod.svc.clusterset.local. 5 IN A {ip}");
    let (outcome, messages) = built_with(now, &journal, &ixfr_query(v0), XfrKind::Ixfr);
    assert_eq!(outcome, XfrOutcome::Incremental);
    let records = records_of(&messages);
    // RFC 1995 §4: the new SOA; per version the old SOA, what it removed,
    // its SOA, what it added; the new SOA.
    let want: Vec<String> = vec![soa(v2), soa(v0)];
    assert_eq!(records[..2], want[..], "{records:#?}");
    assert!(records.contains(&a("10.20.2.11")) && records.contains(&a("10.20.2.50")));
    let at = |r: &String| records.iter().position(|x| x == r).expect("present");
    assert!(at(&soa(v0)) < at(&a("10.20.2.11")) && at(&a("10.20.2.11")) < at(&soa(v1)));
    assert!(at(&soa(v1)) < at(&a("10.20.2.50")));
    assert_eq!(records.last(), Some(&soa(v2)));
    assert_eq!(records.iter().filter(|r| r.contains(" IN SOA ")).count(), 6);
    // From the middle: one version. From before the journal: the zone.
    let (outcome, messages) = built_with(now, &journal, &ixfr_query(v1), XfrKind::Ixfr);
    assert_eq!(outcome, XfrOutcome::Incremental);
    assert_eq!(
        records_of(&messages)
            .iter()
            .filter(|r| r.contains(" IN SOA "))
            .count(),
        4
    );
    let (outcome, messages) = built_with(now, &journal, &ixfr_query(v0 - 1), XfrKind::Ixfr);
    assert_eq!(outcome, XfrOutcome::Full);
    assert_eq!(records_of(&messages), records_of(&axfr_messages(now)));
}
