//! Zone transfers out to the clients `allow-transfer` lets in, over TCP or
//! DNS over TLS (XoT, RFC 9103): AXFR (RFC 5936) sends the whole forward
//! zone of one snapshot, SOA first and last, in as many messages as it
//! takes. IXFR (RFC 1995) sends the SOA alone to a client whose serial is
//! current, the journal's differences to one whose serial the journal
//! holds (`journal`), and otherwise the whole zone the AXFR way, which RFC
//! 1995 §4 allows ("the entire zone is returned") and every secondary
//! takes.
//!
//! The records are the enumeration `dump` prints (`zonefile`), so a
//! secondary holds exactly what queries answer; a whole zone is produced
//! entry by entry and handed on message by message, never held whole. The
//! answer cap of queries (`max-answer-records`, the room of a message)
//! does not apply: a transfer carries every record. Owns who may transfer,
//! what a transfer sends and how it is cut into messages; it must not
//! touch a socket (the stream listeners write what it produces) and
//! answers nothing else (a refused transfer takes the query path, which
//! REFUSES it).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use super::journal::{Version, Versions};
use super::stats::{XfrKind, XfrOutcome};
use super::tsig::{self, TsigError, Verified};
use super::wire::{self, Answer, OPCODE_QUERY, RData, Rcode, Record, Request, rtype};
use super::zonefile::{apex_records, entry_records};
use crate::model::Snapshot;

/// Records of at most about this many octets, counted uncompressed, go
/// in one message: well below the 65,535 a stream message can hold (names
/// only shrink when compressed), and about 16 KiB once compressed, as
/// BIND and Knot cut theirs.
const MESSAGE_OCTETS: usize = 32 * 1024;

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

/// What a transfer sends, decided before its first message.
#[derive(Debug)]
pub(crate) enum Plan {
    /// The client's serial is the one given (IXFR): the SOA alone.
    UpToDate(u32),
    /// The journal's versions from the client's serial on (IXFR).
    Incremental(Vec<Arc<Version>>),
    /// The whole zone (AXFR, or an IXFR the journal cannot answer).
    Full,
}

impl Plan {
    /// The `outcome` a transfer of this plan counts.
    pub(crate) fn outcome(&self) -> XfrOutcome {
        match self {
            Self::UpToDate(_) => XfrOutcome::UpToDate,
            Self::Incremental(_) => XfrOutcome::Incremental,
            Self::Full => XfrOutcome::Full,
        }
    }

    /// The serial the client holds once it has read the transfer.
    pub(crate) fn serial(&self, snap: &Snapshot) -> u32 {
        match self {
            Self::UpToDate(s) => *s,
            Self::Incremental(v) => v.last().map_or(snap.serial, |v| v.to),
            Self::Full => snap.serial,
        }
    }
}

/// What a transfer of `kind` asked by `packet` sends from `snap` and the
/// `journal`. An IXFR whose serial is current gets the SOA alone; one
/// whose serial starts a journal version gets the versions since; any
/// other gets the whole zone. A client at the journal's last serial while
/// a newer snapshot is still being recorded is told it is current: the
/// NOTIFY of the newer one follows once it is recorded.
pub(crate) fn plan(snap: &Snapshot, journal: &Versions, kind: XfrKind, packet: &[u8]) -> Plan {
    // The IXFR query's Authority SOA carries the client's serial.
    let theirs = (kind == XfrKind::Ixfr)
        .then(|| wire::soa_serial_offset(packet))
        .flatten()
        .and_then(|at| packet.get(at..at + 4))
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let Some(theirs) = theirs else {
        return Plan::Full;
    };
    if !serial_lt(theirs, snap.serial) {
        return Plan::UpToDate(snap.serial);
    }
    match journal.since(theirs) {
        Some(v) if v.is_empty() => Plan::UpToDate(theirs),
        Some(v) => Plan::Incremental(v),
        None => Plan::Full,
    }
}

/// `a` is before `b` in serial number arithmetic (RFC 1982).
pub(crate) fn serial_lt(a: u32, b: u32) -> bool {
    a != b && b.wrapping_sub(a) < 1 << 31
}

/// The client stopped reading: the transfer ends.
#[derive(Debug)]
pub(crate) struct Stopped;

/// Produces the messages of `plan`, answers to `req`, from `snap` at `now`,
/// handing each to `sink` in order as soon as it is full: a whole zone is
/// never held, only one entry's records and one message. `sink` returns
/// false when the client is gone; so does this, then.
///
/// A whole zone is the SOA, the apex's other records, each entry's, the
/// SOA again (RFC 5936 §2.2). A journal answer is RFC 1995 §4's: the new
/// SOA, then per version the old SOA, what it removed, its SOA and what it
/// added, and the new SOA again.
pub(crate) fn produce(
    snap: &Snapshot,
    (req, plan): (&Request<'_>, &Plan),
    now: Instant,
    sink: &mut dyn FnMut(Vec<u8>) -> bool,
) -> Result<(), Stopped> {
    let apex = apex_records(snap, now);
    let Some(soa) = apex
        .first()
        .filter(|r| matches!(r.data, RData::Soa(_)))
        .cloned()
    else {
        return Ok(());
    };
    let at = |serial: u32| {
        let mut r = soa.clone();
        if let RData::Soa(s) = &mut r.data {
            s.serial = serial;
        }
        r
    };
    let mut out = Cutter::new(req, sink);
    match plan {
        Plan::UpToDate(serial) => out.push(at(*serial))?,
        Plan::Incremental(versions) => {
            let last = at(plan.serial(snap));
            out.push(last.clone())?;
            for v in versions {
                out.push(at(v.from))?;
                out.extend(v.removed.iter().cloned())?;
                out.push(at(v.to))?;
                out.extend(v.added.iter().cloned())?;
            }
            out.push(last)?;
        }
        Plan::Full => {
            out.extend(apex)?;
            for entry in snap.entries.values() {
                out.extend(entry_records(snap, entry, now))?;
            }
            out.push(soa)?;
        }
    }
    out.finish()
}

/// Records gathered into messages of about [`MESSAGE_OCTETS`], each
/// handed on once full.
struct Cutter<'a> {
    req: &'a Request<'a>,
    sink: &'a mut dyn FnMut(Vec<u8>) -> bool,
    records: Vec<Record>,
    octets: usize,
}

impl<'a> Cutter<'a> {
    fn new(req: &'a Request<'a>, sink: &'a mut dyn FnMut(Vec<u8>) -> bool) -> Self {
        Self {
            req,
            sink,
            records: Vec::new(),
            octets: 0,
        }
    }

    fn push(&mut self, r: Record) -> Result<(), Stopped> {
        let len = wire_len(&r);
        if !self.records.is_empty() && self.octets + len > MESSAGE_OCTETS {
            self.flush()?;
        }
        self.octets += len;
        self.records.push(r);
        Ok(())
    }

    fn extend(&mut self, records: impl IntoIterator<Item = Record>) -> Result<(), Stopped> {
        records.into_iter().try_for_each(|r| self.push(r))
    }

    fn flush(&mut self) -> Result<(), Stopped> {
        let answer = Answer {
            answers: std::mem::take(&mut self.records),
            ..Answer::empty(Rcode::NoError, true)
        };
        self.octets = 0;
        let mut out = Vec::with_capacity(MESSAGE_OCTETS + 512);
        wire::encode(self.req, &answer, usize::from(u16::MAX), &mut out);
        if (self.sink)(out) {
            Ok(())
        } else {
            Err(Stopped)
        }
    }

    fn finish(mut self) -> Result<(), Stopped> {
        if self.records.is_empty() {
            return Ok(());
        }
        self.flush()
    }
}

/// The octets `r` takes uncompressed, at most: its owner, type, class,
/// TTL, length and data.
pub(crate) fn wire_len(r: &Record) -> usize {
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
