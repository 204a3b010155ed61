//! Zone-file text (RFC 1035 §5): records rendered the way dig and zone files
//! print them, and the whole zone as `dump` prints it.
//!
//! The dump enumerates every served name and asks [`answer`] for each type,
//! so the text is exactly what the server answers (minus rotation and
//! health-dependent rcodes) and a peer such as Knot DNS or NSD can serve the
//! identical data. It must not compute records itself.

use std::collections::BTreeSet;
use std::time::Instant;

use super::answer::{Question, Room, answer};
use super::name::QName;
use super::wire::{CLASS_IN, Owner, RData, Record, rtype};
use crate::model::{Origin, Snapshot};

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

/// Every name the snapshot serves in the forward zone, with the types to ask
/// for at each.
fn names(snap: &Snapshot) -> Vec<(String, &'static [u16])> {
    const ADDR: &[u16] = &[rtype::A, rtype::AAAA];
    const SERVICE: &[u16] = &[rtype::A, rtype::AAAA, rtype::SRV];
    let zone = snap.settings.zone.text();
    let mut out: Vec<(String, &'static [u16])> = vec![
        (zone.to_owned(), &[rtype::SOA, rtype::NS]),
        (format!("ns.dns.{zone}"), ADDR),
        (format!("dns-version.{zone}"), &[rtype::TXT]),
    ];
    for entry in snap.entries.values() {
        out.push((entry.name.to_string(), SERVICE));
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
    }
    out
}

/// Every record of the forward zone, as [`answer`] gives it to a query of
/// each served name and type, with its owner (lower-case, no trailing
/// dot): the apex records first (the SOA, then the NS), then the rest by
/// name and type. The one enumeration of the zone, which [`dump`] prints
/// and zone transfers send (`transfer`).
pub(crate) fn zone_records(snap: &Snapshot, now: Instant) -> Vec<(String, Record)> {
    let zone = snap.settings.zone.text();
    let mut apex = Vec::new();
    let mut rest: Vec<(String, Record)> = Vec::new();
    for (name, types) in names(snap) {
        let Ok(qname) = QName::from_text(&name) else {
            continue;
        };
        for &qtype in types {
            let q = Question {
                name: &qname,
                qtype,
                qclass: CLASS_IN,
                room: Room::Whole,
            };
            let a = answer(snap, q, 0, now).answer;
            for r in a.answers.into_iter().chain(a.additional) {
                let owner = match &r.owner {
                    Owner::Query => name.clone(),
                    Owner::Name(n) => n.clone(),
                };
                let r = Record {
                    owner: Owner::Name(owner.clone()),
                    ..r
                };
                if owner == zone && name == zone {
                    apex.push((owner, r));
                } else {
                    rest.push((owner, r));
                }
            }
        }
    }
    // By name, type and text: one order whatever the rotation, and the
    // same record given with several names (glue) is one record.
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
