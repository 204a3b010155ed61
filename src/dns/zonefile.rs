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

/// The whole forward zone as zone-file text: `$ORIGIN`, the SOA and NS
/// first, then every record sorted by name and type.
pub fn dump(snap: &Snapshot) -> String {
    let zone = snap.settings.zone.text();
    let now = Instant::now();
    let mut apex = Vec::new();
    let mut rest: BTreeSet<(String, u16, String)> = BTreeSet::new();
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
            for r in a.answers.iter().chain(&a.additional) {
                let line = record_text(&format!("{name}."), r);
                if name == zone && r.owner == Owner::Query {
                    apex.push(line);
                } else {
                    let owner = match &r.owner {
                        Owner::Query => name.clone(),
                        Owner::Name(n) => n.clone(),
                    };
                    rest.insert((owner, r.data.rtype(), line));
                }
            }
        }
    }
    let mut out = format!("$ORIGIN {zone}.\n");
    for line in apex {
        out.push_str(&line);
        out.push('\n');
    }
    for (_, _, line) in rest {
        out.push_str(&line);
        out.push('\n');
    }
    out
}
