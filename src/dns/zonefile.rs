//! Zone-file text (RFC 1035 §5): records rendered the way dig and zone files
//! print them, and the whole zone as `dump` prints it.
//!
//! The dump enumerates every served name and asks [`answer`] for each type,
//! so the text is exactly what the server answers (minus rotation and
//! health-dependent rcodes) and a peer such as Knot DNS or NSD can serve the
//! identical data. It must not compute records itself.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashSet};
use std::time::Instant;

use super::answer::{Question, Room, answer};
use super::name::QName;
use super::wire::{CLASS_IN, Owner, RData, Record, rtype};
use crate::model::{Entry, Origin, Snapshot};

/// Renders a record as one zone-file line. `query` is the owner to print for
/// [`Owner::Query`] (absolute names end with a dot).
pub(crate) fn record_text(query: &str, r: &Record) -> String {
    let owner = match &r.owner {
        Owner::Query => query.to_owned(),
        Owner::Name(n) => format!("{n}."),
    };
    let data = match &r.data {
        RData::A(ip) => ip.to_string(),
        RData::Aaaa(ip) => ip.to_string(),
        RData::Srv {
            priority,
            weight,
            port,
            target,
        } => format!("{priority} {weight} {port} {target}."),
        RData::Ns(n) | RData::Ptr(n) => format!("{n}."),
        RData::Soa(s) => format!(
            "{}. {}. {} {} {} {} {}",
            s.mname, s.rname, s.serial, s.refresh, s.retry, s.expire, s.minimum
        ),
        RData::Txt(t) => format!("\"{}\"", t.replace('\\', "\\\\").replace('"', "\\\"")),
    };
    format!("{owner}\t{}\tIN\t{}\t{data}", r.ttl, r.data.mnemonic())
}

const ADDR: &[u16] = &[rtype::A, rtype::AAAA];
const SERVICE: &[u16] = &[rtype::A, rtype::AAAA, rtype::SRV];

/// The names of the zone's own (not of any service), with the types to
/// ask for at each: the apex first.
fn apex_names(zone: &str) -> Vec<(String, &'static [u16])> {
    vec![
        (zone.to_owned(), &[rtype::SOA, rtype::NS]),
        (format!("ns.dns.{zone}"), ADDR),
        (format!("dns-version.{zone}"), &[rtype::TXT]),
    ]
}

/// Every name `entry` serves, with the types to ask for at each. Each is
/// at or below the entry's name, so no two entries share one.
fn entry_names(entry: &Entry) -> Vec<(String, &'static [u16])> {
    let mut out: Vec<(String, &'static [u16])> = vec![(entry.name.to_string(), SERVICE)];
    let named: BTreeSet<(String, &str)> = entry
        .all_ports()
        .filter_map(|p| Some((p.name.as_deref()?.to_owned(), p.protocol.label())))
        .collect();
    for (port, proto) in named {
        out.push((format!("_{port}._{proto}.{}", entry.name), &[rtype::SRV]));
    }
    let federated = matches!(entry.origin, Origin::Federated { .. });
    let hosts: BTreeSet<(&str, &str)> = entry
        .pods()
        .into_iter()
        .map(|(part, p)| (&*part.cluster, &*p.hostname))
        .collect();
    for (c, host) in hosts {
        if federated {
            out.push((format!("{host}.{c}.{}", entry.name), ADDR));
            out.push((format!("{host}-{c}.{}", entry.name), ADDR));
        } else {
            out.push((format!("{host}.{}", entry.name), ADDR));
        }
    }
    out
}

/// The records [`answer`] gives to a query of each of `names` and its
/// types, each with its owner spelled out (lower-case, no trailing dot),
/// in the order asked: the answers, and the glue (additional records).
fn answered(
    snap: &Snapshot,
    names: &[(String, &'static [u16])],
    now: Instant,
) -> (Vec<Record>, Vec<Record>) {
    let (mut out, mut glue) = (Vec::new(), Vec::new());
    for (name, types) in names {
        let Ok(qname) = QName::from_text(name) else {
            continue;
        };
        for &qtype in *types {
            let q = Question {
                name: &qname,
                qtype,
                qclass: CLASS_IN,
                room: Room::Whole,
            };
            let a = answer(snap, q, 0, now).answer;
            let owned = |r: Record| {
                let owner = match r.owner {
                    Owner::Query => name.clone(),
                    Owner::Name(n) => n,
                };
                Record {
                    owner: Owner::Name(owner),
                    ..r
                }
            };
            out.extend(a.answers.into_iter().map(owned));
            glue.extend(a.additional.into_iter().map(owned));
        }
    }
    (out, glue)
}

/// The order of an entry's records: by owner, type, data and TTL.
pub(crate) fn record_order(a: &Record, b: &Record) -> Ordering {
    (&a.owner, a.data.rtype(), &a.data, a.ttl).cmp(&(&b.owner, b.data.rtype(), &b.data, b.ttl))
}

/// Sorts `records` by [`record_order`] and drops repeats (the glue of an
/// SRV answer is also the A answer of its target).
fn sorted(mut records: Vec<Record>) -> Vec<Record> {
    records.sort_unstable_by(record_order);
    records.dedup();
    records
}

/// The records of the zone's own names: the apex SOA first, then the
/// apex NS, then the others sorted.
pub(crate) fn apex_records(snap: &Snapshot, now: Instant) -> Vec<Record> {
    let zone = snap.settings.zone.text();
    let (mut all, glue) = answered(snap, &apex_names(zone), now);
    all.extend(glue);
    let (mut apex, rest): (Vec<Record>, Vec<Record>) = all
        .into_iter()
        .partition(|r| matches!(&r.owner, Owner::Name(n) if n == zone));
    apex.sort_by_key(|r| r.data.rtype() != rtype::SOA);
    apex.dedup();
    apex.extend(sorted(rest));
    apex
}

/// The records of every name `entry` serves, each once, name by name in
/// the order [`entry_names`] gives: its part of the zone, built without
/// the rest. Unsorted: sorting was a quarter of a zone transfer's CPU
/// (perf, 300,000 endpoints), and each RRset holds no repeats already.
/// The glue of an SRV answer is the A or AAAA answer of one of the
/// entry's own names (its targets are below it), so it is left out;
/// glue of any other owner would be kept once.
pub(crate) fn entry_records(snap: &Snapshot, entry: &Entry, now: Instant) -> Vec<Record> {
    let names = entry_names(entry);
    let (mut out, glue) = answered(snap, &names, now);
    let own: HashSet<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    let mut kept: Vec<Record> = Vec::new();
    for r in glue {
        let ours = matches!(&r.owner, Owner::Name(n) if own.contains(n.as_str()));
        if !ours && !kept.contains(&r) {
            kept.push(r);
        }
    }
    out.extend(kept);
    out
}

/// Every record of the forward zone, as [`answer`] gives it to a query of
/// each served name and type, with its owner (lower-case, no trailing
/// dot): the apex records first (the SOA, then the NS), then the rest by
/// name, type and text. The one enumeration of the zone ([`apex_records`]
/// and [`entry_records`]), which [`dump`] prints and zone transfers send
/// entry by entry (`transfer`).
pub(crate) fn zone_records(snap: &Snapshot, now: Instant) -> Vec<(String, Record)> {
    let zone = snap.settings.zone.text();
    let owned = |r: Record| match &r.owner {
        Owner::Name(n) => (n.clone(), r),
        Owner::Query => (String::new(), r),
    };
    let (mut apex, mut rest): (Vec<_>, Vec<_>) = apex_records(snap, now)
        .into_iter()
        .map(owned)
        .partition(|(owner, _)| owner == zone);
    for entry in snap.entries.values() {
        rest.extend(entry_records(snap, entry, now).into_iter().map(owned));
    }
    // By name, type and text: one order whatever the rotation or the
    // order of the entries.
    rest.sort_by_cached_key(|(owner, r)| (owner.clone(), r.data.rtype(), record_text("", r)));
    rest.dedup();
    apex.extend(rest);
    apex
}

/// The whole forward zone as zone-file text: `$ORIGIN`, the SOA and NS
/// first, then every record sorted by name and type.
pub fn dump(snap: &Snapshot) -> String {
    let zone = snap.settings.zone.text();
    let mut out = format!("$ORIGIN {zone}.\n");
    for (_, r) in zone_records(snap, Instant::now()) {
        out.push_str(&record_text("", &r));
        out.push('\n');
    }
    out
}
