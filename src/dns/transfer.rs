//! Zone transfers out to the clients `allow-transfer` lets in, over TCP or
//! DNS over TLS (XoT, RFC 9103): AXFR (RFC 5936) sends the whole forward
//! zone of one snapshot, SOA first and last, in as many messages as it
//! takes. IXFR (RFC 1995) sends the SOA alone to a client whose serial is
//! current, and otherwise the whole zone the same way, which RFC 1995 §4
//! allows ("the entire zone is returned") and every secondary takes.
//!
//! The records are [`zone_records`]'s, the one enumeration `dump` prints,
//! so a secondary holds exactly what queries answer. The answer cap of
//! queries (`max-answer-records`, the room of a message) does not apply: a
//! transfer carries every record. Owns who may transfer and how the zone
//! is cut into messages; it must not touch a socket (the stream listeners
//! write what it returns) and answers nothing else (a refused transfer
//! takes the query path, which REFUSES it).

use std::net::IpAddr;
use std::time::Instant;

use super::stats::XfrKind;
use super::tsig::{self, TsigError, Verified};
use super::wire::{self, Answer, OPCODE_QUERY, RData, Rcode, Record, Request, rtype};
use super::zonefile::zone_records;
use crate::model::Snapshot;

/// Records of at most about this many octets go in one message, well
/// below the 65,535 a stream message can hold (names only shrink when
/// compressed), as BIND and Knot cut theirs.
const MESSAGE_OCTETS: usize = 16 * 1024;

/// What a query is to the transfers.
#[derive(Debug)]
pub(crate) enum Check<'k> {
    /// Not a transfer of our zone: the query path answers it.
    NotOne,
    /// A transfer the client may not make (its address, or no signature
    /// where keys are configured): the query path REFUSES it.
    Refused(XfrKind),
    /// A signature that failed: NOTAUTH (RFC 8945).
    NotAuth(XfrKind, TsigError),
    /// A transfer the client may make; signed, where keys are configured.
    Allowed(XfrKind, Option<Verified<'k>>),
}

/// Whether `peer` may transfer the zone.
pub(crate) fn allowed(snap: &Snapshot, peer: IpAddr) -> bool {
    let peer = peer.to_canonical();
    snap.settings
        .allow_transfer
        .iter()
        .any(|net| net.contains(&peer))
}

/// What `req` (the query `packet`, from `peer`, over a stream) is: an
/// AXFR or IXFR of the forward zone's apex, class IN, that `peer` may or
/// may not make. Where transfer keys are configured, the request must
/// also be signed by one of them, checked at `now` (Unix seconds).
pub(crate) fn check<'s>(
    snap: &'s Snapshot,
    (req, packet): (&Request<'_>, &[u8]),
    peer: IpAddr,
    now: u64,
) -> Check<'s> {
    let kind = match req.qtype {
        rtype::AXFR => XfrKind::Axfr,
        rtype::IXFR => XfrKind::Ixfr,
        _ => return Check::NotOne,
    };
    let ours = req.header.opcode == OPCODE_QUERY
        && req.qclass == wire::CLASS_IN
        && req.edns.is_none_or(|e| e.version == 0)
        && req.name.text() == snap.settings.zone.text();
    if !ours {
        return Check::NotOne;
    }
    if !allowed(snap, peer) {
        return Check::Refused(kind);
    }
    let keys = &snap.settings.transfer_keys;
    if keys.is_empty() {
        return Check::Allowed(kind, None);
    }
    match tsig::verify(packet, keys, now) {
        Ok(v) => Check::Allowed(kind, Some(v)),
        Err(TsigError::Unsigned) => Check::Refused(kind),
        Err(e) => Check::NotAuth(kind, e),
    }
}

/// The messages of an allowed transfer of `kind` asked by `req` (the query
/// `packet`), and whether the client was up to date (IXFR: then the SOA
/// alone is sent).
pub(crate) fn build(
    snap: &Snapshot,
    (req, packet): (&Request<'_>, &[u8]),
    kind: XfrKind,
    now: Instant,
) -> (bool, Vec<Vec<u8>>) {
    let records = zone(snap, now);
    // The IXFR query's Authority SOA carries the client's serial.
    let theirs = (kind == XfrKind::Ixfr)
        .then(|| wire::soa_serial_offset(packet))
        .flatten()
        .and_then(|at| packet.get(at..at + 4))
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let up_to_date = theirs.is_some_and(|s| !serial_lt(s, snap.serial));
    let records = if up_to_date {
        &records[..1]
    } else {
        &records[..]
    };
    (up_to_date, messages(req, records))
}

/// `a` is before `b` in serial number arithmetic (RFC 1982).
fn serial_lt(a: u32, b: u32) -> bool {
    a != b && b.wrapping_sub(a) < 1 << 31
}

/// The records of an AXFR: the SOA, every other record, the SOA again.
fn zone(snap: &Snapshot, now: Instant) -> Vec<Record> {
    let mut records: Vec<Record> = zone_records(snap, now)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    if let Some(soa) = records
        .iter()
        .position(|r| matches!(r.data, RData::Soa(_)))
        .map(|i| records[i].clone())
    {
        records.push(soa);
    }
    records
}

/// `records` encoded as answers to `req`, cut where a message would pass
/// [`MESSAGE_OCTETS`].
fn messages(req: &Request<'_>, records: &[Record]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut octets = 0;
    for (i, r) in records.iter().enumerate() {
        let len = wire_len(r);
        if i > start && octets + len > MESSAGE_OCTETS {
            out.push(encode(req, &records[start..i]));
            (start, octets) = (i, 0);
        }
        octets += len;
    }
    if start < records.len() {
        out.push(encode(req, &records[start..]));
    }
    out
}

fn encode(req: &Request<'_>, records: &[Record]) -> Vec<u8> {
    let answer = Answer {
        answers: records.to_vec(),
        ..Answer::empty(Rcode::NoError, true)
    };
    let mut out = Vec::with_capacity(MESSAGE_OCTETS + 512);
    wire::encode(req, &answer, usize::from(u16::MAX), &mut out);
    out
}

/// The octets `r` takes uncompressed, at most: its owner, type, class,
/// TTL, length and data.
fn wire_len(r: &Record) -> usize {
    let name = |n: &str| n.len() + 2;
    let owner = match &r.owner {
        wire::Owner::Name(n) => name(n),
        wire::Owner::Query => 2,
    };
    let data = match &r.data {
        RData::A(_) => 4,
        RData::Aaaa(_) => 16,
        RData::Srv { target, .. } => 6 + name(target),
        RData::Ns(n) | RData::Ptr(n) => name(n),
        RData::Soa(s) => name(&s.mname) + name(&s.rname) + 20,
        RData::Txt(t) => t.len() + t.len() / 255 + 1,
    };
    owner + 10 + data
}

#[cfg(test)]
mod tests;
