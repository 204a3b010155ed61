//! The IXFR journal: each version's difference is exactly what `dump`
//! of the zone before and after differs by, and the journal keeps what
//! its limits allow.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::dns::zonefile::{dump, record_text};
use crate::model::objects::{ExportMode, ObjectKey, Protocol};
use crate::model::testing::{
    db_north, epoch, fixture_events, port, service, settings, svc_event, t0,
};
use crate::model::{Event, Health, JournalLimits, Model, Settings};

/// A model of the fixture whose positive TTL (30) is above the stale
/// cap (5), so a cluster's health shows in its records.
fn model() -> Model {
    let mut s: Settings = settings();
    s.ttl = 30;
    s.allow_transfer = crate::vocab::trust::parse_cidrs(["127.0.0.1"]).expect("cidrs");
    let mut m = Model::new(Arc::new(s), epoch());
    m.clusters_known(t0());
    m.apply(fixture_events(), t0());
    m
}

/// The lines of `dump` but the SOA (its serial is each version's own).
fn lines(snap: &Snapshot) -> BTreeSet<String> {
    dump(snap)
        .lines()
        .skip(1)
        .filter(|l| !l.contains("\tSOA\t"))
        .map(str::to_owned)
        .collect()
}

fn texts(records: &[Record]) -> BTreeSet<String> {
    records.iter().map(|r| record_text("", r)).collect()
}

fn broken(cluster: &str) -> Event {
    Event::Health {
        cluster: cluster.into(),
        health: Health {
            synced: true,
            broken_since: Some(t0() + Duration::from_secs(1)),
            ..Health::default()
        },
    }
}

#[test]
fn each_version_is_what_dump_before_and_after_differ_by() {
    use Protocol::Tcp;
    let pg = || vec![port(Some("pg"), Tcp, 5432)];
    // (what happens, its events, a record it must add, one it must remove)
    let cases: Vec<(&str, Vec<Event>, &str, &str)> = vec![
        (
            "a StatefulSet pod moves",
            vec![db_north(&[
                ("10.20.2.10", Some("db-0"), true),
                ("10.20.2.99", Some("db-1"), true),
            ])],
            "db-1.db-north.prod.svc.clusterset.local.\t30\tIN\tA\t10.20.2.99",
            "db-1.db-north.prod.svc.clusterset.local.\t30\tIN\tA\t10.20.2.11",
        ),
        (
            "a service is no longer exported",
            vec![Event::ServiceDeleted {
                cluster: "north".into(),
                key: ObjectKey::new("prod", "api"),
            }],
            "",
            "api-north.prod.svc.clusterset.local.\t30\tIN\tA\t10.20.1.1",
        ),
        (
            "a new service",
            vec![svc_event(
                "east",
                service(
                    "prod",
                    "new",
                    Some(ExportMode::Gateway),
                    false,
                    false,
                    &["10.100.9.9"],
                    pg(),
                ),
            )],
            "new-east.prod.svc.clusterset.local.\t30\tIN\tA\t203.0.113.10",
            "",
        ),
        (
            "a cluster's watch breaks: its names' TTLs are capped",
            vec![broken("north")],
            "api-north.prod.svc.clusterset.local.\t5\tIN\tA\t10.20.1.1",
            "api-north.prod.svc.clusterset.local.\t30\tIN\tA\t10.20.1.1",
        ),
    ];
    for (name, events, add, remove) in cases {
        let mut m = model();
        let before = m.publish();
        let mut journal = Versions {
            serial: before.serial,
            ..Versions::default()
        };
        m.apply(events, t0() + Duration::from_secs(2));
        let after = m.publish();
        journal = journal.record((&before, &after), JournalLimits::default(), t0());
        assert_eq!(journal.serial, after.serial, "{name}");
        let v = journal.since(before.serial).expect("one version");
        assert_eq!(v.len(), 1, "{name}");
        let (old, new) = (lines(&before), lines(&after));
        let removed: BTreeSet<String> = old.difference(&new).cloned().collect();
        let added: BTreeSet<String> = new.difference(&old).cloned().collect();
        assert_eq!(texts(&v[0].removed), removed, "{name}: removed");
        assert_eq!(texts(&v[0].added), added, "{name}: added");
        assert!(add.is_empty() || added.contains(add), "{name}: {added:#?}");
        assert!(
            remove.is_empty() || removed.contains(remove),
            "{name}: {removed:#?}"
        );
        assert_eq!(
            (v[0].from, v[0].to),
            (before.serial, after.serial),
            "{name}"
        );
    }
}

#[test]
fn the_journal_keeps_what_its_limits_allow_and_starts_over_on_new_settings() {
    let mut m = model();
    let first = m.publish();
    let mut journal = Versions {
        serial: first.serial,
        ..Versions::default()
    };
    let limits = JournalLimits {
        versions: 3,
        bytes: 1 << 20,
    };
    let mut serials = vec![first.serial];
    let mut prev = first;
    for i in 0..5u8 {
        let pods = [("10.20.2.10", Some("db-0"), true)];
        let ip = format!("10.20.2.{}", 20 + i);
        let pods = [pods[0], (ip.as_str(), Some("db-1"), true)];
        let at = t0() + Duration::from_secs(u64::from(i) + 1);
        m.apply([db_north(&pods)], at);
        let next = m.publish();
        journal = journal.record((&prev, &next), limits, at);
        serials.push(next.serial);
        prev = next;
    }
    assert_eq!(journal.list.len(), 3, "the versions limit");
    // The three last versions are there, the two before are not.
    for (i, s) in serials.iter().enumerate() {
        let held = journal.since(*s).map(|v| v.len());
        let want = match i {
            0 | 1 => None,
            _ => Some(5 - i),
        };
        assert_eq!(held, want, "serial {s} (#{i})");
    }
    let bytes: u64 = journal.list.iter().map(|v| v.bytes).sum();
    assert_eq!(journal.bytes, bytes);

    // A byte limit below one version keeps none: older serials get the
    // whole zone, the current one is current.
    let tight = JournalLimits {
        versions: 100,
        bytes: 10,
    };
    let m_at = t0() + Duration::from_secs(10);
    m.apply([broken("east")], m_at);
    let next = m.publish();
    let kept = journal.record((&prev, &next), tight, m_at);
    assert!(kept.list.is_empty());
    assert_eq!(kept.since(next.serial).map(|v| v.len()), Some(0));
    assert_eq!(kept.since(prev.serial), None);

    // New answer settings: no difference can be told; the journal starts
    // over at the new serial.
    let mut s = (**m.settings()).clone();
    s.ttl = 40;
    m.set_settings(Arc::new(s), m_at);
    let reset = m.publish();
    let grown = journal.record((&prev, &next), limits, m_at);
    assert_eq!(grown.list.len(), 3);
    let after = grown.record((&next, &reset), limits, m_at);
    assert!(after.list.is_empty());
    assert_eq!(after.serial, reset.serial);
    // And a snapshot the journal did not see before it (a gap) too.
    let gap = Versions {
        serial: 1,
        ..journal.clone()
    };
    let m2 = gap.record((&prev, &reset), limits, m_at);
    assert!(m2.list.is_empty());
}

#[test]
fn snapshots_published_while_one_was_recorded_make_one_version() {
    let mut m = model();
    let s0 = m.publish();
    let at = t0() + Duration::from_secs(1);
    m.apply([broken("east")], at);
    let s1 = m.publish();
    m.apply([db_north(&[("10.20.2.77", Some("db-0"), true)])], at);
    let s2 = m.publish();
    let both = merged(&s1, s2.clone());
    assert_eq!(both.serial, s2.serial);
    assert_eq!(both.changes.since, s0.serial);
    let journal = Versions {
        serial: s0.serial,
        ..Versions::default()
    };
    let journal = journal.record((&s0, &both), JournalLimits::default(), at);
    let v = journal.since(s0.serial).expect("one version");
    assert_eq!(v.len(), 1);
    let (old, new) = (lines(&s0), lines(&s2));
    assert_eq!(
        texts(&v[0].removed),
        old.difference(&new).cloned().collect()
    );
    assert_eq!(texts(&v[0].added), new.difference(&old).cloned().collect());
    assert!(!v[0].added.is_empty() && !v[0].removed.is_empty());
    // A snapshot that does not follow is left as it is: no difference.
    let unrelated = merged(&s0, s2.clone());
    assert_eq!(unrelated.changes, s2.changes);
}

#[test]
fn during_start_up_no_difference_is_kept() {
    let mut s: Settings = settings();
    s.allow_transfer = crate::vocab::trust::parse_cidrs(["127.0.0.1"]).expect("cidrs");
    let mut m = Model::new(Arc::new(s), epoch());
    // The source has not announced every cluster: start-up is not over.
    m.apply(fixture_events(), t0());
    let first = m.publish();
    assert!(!first.settled);
    m.apply([broken("east")], t0() + Duration::from_secs(1));
    let next = m.publish();
    assert_eq!(next.changes.since, first.serial);
    let journal = Versions {
        serial: first.serial,
        ..Versions::default()
    };
    let kept = journal.record((&first, &next), JournalLimits::default(), t0());
    assert!(kept.list.is_empty());
    assert_eq!(kept.serial, next.serial);
}
