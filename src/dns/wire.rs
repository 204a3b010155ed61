//! The DNS wire format as this server needs it: decoding a query (header,
//! the one question, the OPT record) and encoding a response within a size
//! limit.
//!
//! Owns the byte-level rules of docs/architecture.md, decisions 9 and 12: the question is
//! echoed byte for byte (0x20 case kept), SRV targets are never compressed,
//! Additional is trimmed by whole RRsets before TC is ever set, and a
//! truncated reply keeps AA, the question and the OPT. It must not decide
//! what the answer is; that is `dns::answer`.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::name::{NameError, QName};

/// Length of the DNS header.
pub(crate) const HEADER_LEN: usize = 12;
/// UDP payload limit without EDNS (RFC 1035 §4.2.1).
pub(crate) const PLAIN_UDP_LIMIT: usize = 512;
/// Size of an OPT record without options.
pub(crate) const OPT_LEN: usize = 11;
/// Longest EXTRA-TEXT of an Extended DNS Error we send (longer texts are
/// cut): short enough that a truncated UDP response always fits 512
/// octets with it.
pub(crate) const MAX_EDE_TEXT: usize = 100;
/// EDNS option code of an Extended DNS Error (RFC 8914).
const OPTION_EDE: u16 = 15;

/// An Extended DNS Error (RFC 8914): why an answer is what it is, for
/// clients that sent EDNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ede {
    /// INFO-CODE.
    pub code: u16,
    /// EXTRA-TEXT, at most [`MAX_EDE_TEXT`] octets of UTF-8.
    pub text: String,
}

impl Ede {
    /// 3 Stale Answer: served from data not confirmed lately.
    pub(crate) const STALE_ANSWER: u16 = 3;
    /// 14 Not Ready: a cluster that could hold the name has not synced.
    pub(crate) const NOT_READY: u16 = 14;
    /// 18 Prohibited: a cluster's budget refused the service.
    pub(crate) const PROHIBITED: u16 = 18;
    /// 22 No Reachable Authority: past `max-stale`.
    pub(crate) const NO_REACHABLE_AUTHORITY: u16 = 22;

    /// An EDE with `text` cut to [`MAX_EDE_TEXT`] octets (at a character
    /// boundary).
    pub(crate) fn new(code: u16, text: impl Into<String>) -> Self {
        let mut text = text.into();
        if text.len() > MAX_EDE_TEXT {
            let mut end = MAX_EDE_TEXT;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        Self { code, text }
    }

    /// Octets the option takes in the OPT's RDATA (code, length, INFO-CODE
    /// and text), on top of [`OPT_LEN`].
    pub(crate) fn wire_len(&self) -> usize {
        4 + 2 + self.text.len()
    }
}

/// Record types this server knows by name.
pub(crate) mod rtype {
    /// IPv4 address.
    pub(crate) const A: u16 = 1;
    /// Name server.
    pub(crate) const NS: u16 = 2;
    /// Start of authority.
    pub(crate) const SOA: u16 = 6;
    /// Pointer.
    pub(crate) const PTR: u16 = 12;
    /// Host information (the tests ask for a type no name has).
    #[cfg(test)]
    pub(crate) const HINFO: u16 = 13;
    /// Text.
    pub(crate) const TXT: u16 = 16;
    /// IPv6 address.
    pub(crate) const AAAA: u16 = 28;
    /// Service locator.
    pub(crate) const SRV: u16 = 33;
    /// EDNS pseudo-record.
    pub(crate) const OPT: u16 = 41;
    /// HTTPS binding.
    pub(crate) const HTTPS: u16 = 65;
    /// Incremental zone transfer.
    pub(crate) const IXFR: u16 = 251;
    /// Zone transfer.
    pub(crate) const AXFR: u16 = 252;
    /// Any type.
    pub(crate) const ANY: u16 = 255;
}

/// Class IN.
pub(crate) const CLASS_IN: u16 = 1;
/// Class ANY (QCLASS only).
pub(crate) const CLASS_ANY: u16 = 255;

/// Response codes, the extended ones included (BADVERS is 16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rcode {
    /// No error.
    NoError,
    /// The query could not be interpreted.
    FormErr,
    /// The server could not answer (not synced, too stale).
    ServFail,
    /// The name does not exist.
    NxDomain,
    /// The opcode is not implemented.
    NotImp,
    /// Not our zone, not our class, or a zone transfer.
    Refused,
    /// EDNS version not supported.
    BadVers,
    /// A TSIG signature that failed (RFC 8945).
    NotAuth,
}

impl Rcode {
    /// The 12-bit code.
    pub fn code(self) -> u16 {
        match self {
            Self::NoError => 0,
            Self::FormErr => 1,
            Self::ServFail => 2,
            Self::NxDomain => 3,
            Self::NotImp => 4,
            Self::Refused => 5,
            Self::BadVers => 16,
            Self::NotAuth => 9,
        }
    }

    /// The mnemonic dig prints.
    pub fn name(self) -> &'static str {
        match self {
            Self::NoError => "NOERROR",
            Self::FormErr => "FORMERR",
            Self::ServFail => "SERVFAIL",
            Self::NxDomain => "NXDOMAIN",
            Self::NotImp => "NOTIMP",
            Self::Refused => "REFUSED",
            Self::BadVers => "BADVERS",
            Self::NotAuth => "NOTAUTH",
        }
    }
}

/// Opcode QUERY.
pub(crate) const OPCODE_QUERY: u8 = 0;

/// The EDNS(0) parameters of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Edns {
    /// Requestor's UDP payload size.
    pub payload: u16,
    /// EDNS version.
    pub version: u8,
    /// The DO bit.
    pub dnssec_ok: bool,
}

/// The header fields a response copies from its query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeaderEcho {
    /// Query ID.
    pub id: u16,
    /// Opcode.
    pub opcode: u8,
    /// Recursion desired.
    pub rd: bool,
    /// Checking disabled.
    pub cd: bool,
}

/// A decoded query.
#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    /// Header fields to echo.
    pub header: HeaderEcho,
    /// The question name, lower-cased.
    pub name: QName,
    /// The question exactly as received: name, type and class.
    pub question: &'a [u8],
    /// QTYPE.
    pub qtype: u16,
    /// QCLASS.
    pub qclass: u16,
    /// The OPT record, if the query had one.
    pub edns: Option<Edns>,
}

impl Request<'_> {
    /// Size limit for a UDP response to this query, given the server's cap.
    pub(crate) fn udp_limit(&self, max_udp_payload: u16) -> usize {
        match self.edns {
            None => PLAIN_UDP_LIMIT,
            Some(edns) => usize::from(edns.payload.clamp(512, max_udp_payload.max(512))),
        }
    }

    /// Octets left for Answer records in a response of at most `limit`
    /// octets to this query: the limit less the header, the question echoed
    /// and the OPT without options. An answer that carries an Extended DNS
    /// Error leaves room for it when it sizes its records
    /// ([`Ede::wire_len`]); one that does not fit beside the records is
    /// left out, see [`encode`].
    pub(crate) fn answer_room(&self, limit: usize) -> usize {
        let opt_len = if self.edns.is_some() { OPT_LEN } else { 0 };
        limit.saturating_sub(HEADER_LEN + self.question.len() + opt_len)
    }
}

/// Why a packet could not be decoded as a query, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecodeError {
    /// Not even a header, or a response (QR=1): answering could start a loop,
    /// so the packet is dropped.
    #[error("dropped: {0}")]
    Drop(&'static str),
    /// Malformed: answer FORMERR with this header (and OPT when the query's
    /// OPT was readable).
    #[error("malformed query: {reason}")]
    FormErr {
        /// Header to echo.
        header: HeaderEcho,
        /// The query's OPT, when it could be read.
        edns: Option<Edns>,
        /// What was wrong.
        reason: &'static str,
    },
}

fn be16(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*buf.get(at)?, *buf.get(at + 1)?]))
}

fn be32(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes([
        *buf.get(at)?,
        *buf.get(at + 1)?,
        *buf.get(at + 2)?,
        *buf.get(at + 3)?,
    ]))
}

/// Skips a possibly compressed name in a record; returns the offset after it.
fn skip_name(buf: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *buf.get(at)?;
        match len & 0xC0 {
            0x00 if len == 0 => return Some(at + 1),
            0x00 => at += 1 + usize::from(len),
            // A pointer ends the name; where it points does not matter here.
            0xC0 => return buf.get(at + 1).map(|_| at + 2),
            _ => return None,
        }
    }
}

/// Whether `packet`'s first question asks for `qtype`: a look at the
/// question alone, before any decoding.
pub(crate) fn asks_for(packet: &[u8], qtype: u16) -> bool {
    skip_name(packet, HEADER_LEN)
        .and_then(|end| packet.get(end..end + 2))
        .is_some_and(|t| u16::from_be_bytes([t[0], t[1]]) == qtype)
}

/// Whether `packet` has records in its additional section (an OPT, a
/// TSIG): a look at the header alone.
pub(crate) fn has_additional(packet: &[u8]) -> bool {
    packet.get(10..12).is_some_and(|c| c != [0, 0])
}

/// Decodes a query. Anything but exactly one question is FORMERR; answers
/// and authority records in a query are skipped; one OPT is read from the
/// additional section; unknown EDNS options are accepted and ignored.
pub(crate) fn decode(buf: &[u8]) -> Result<Request<'_>, DecodeError> {
    if buf.len() < HEADER_LEN {
        return Err(DecodeError::Drop("shorter than a DNS header"));
    }
    let id = u16::from_be_bytes([buf[0], buf[1]]);
    let flags = u16::from_be_bytes([buf[2], buf[3]]);
    if flags & 0x8000 != 0 {
        return Err(DecodeError::Drop("QR=1: a response, not a query"));
    }
    let header = HeaderEcho {
        id,
        opcode: ((flags >> 11) & 0x0F) as u8,
        rd: flags & 0x0100 != 0,
        cd: flags & 0x0010 != 0,
    };
    let [qdcount, ancount, nscount, arcount] =
        [4, 6, 8, 10].map(|at| u16::from_be_bytes([buf[at], buf[at + 1]]));

    // Read the OPT first: a FORMERR must carry an OPT when the query's was
    // readable (RFC 6891 §7), so it is needed even when the question is bad.
    let form = |reason, edns| DecodeError::FormErr {
        header,
        edns,
        reason,
    };
    let mut at = HEADER_LEN;
    for _ in 0..qdcount {
        at = skip_name(buf, at)
            .map(|end| end + 4)
            .filter(|&end| end <= buf.len())
            .ok_or_else(|| form("question runs past the end", None))?;
    }
    let questions_end = at;
    for _ in 0..u32::from(ancount) + u32::from(nscount) {
        at = skip_record(buf, at).ok_or_else(|| form("record runs past the end", None))?;
    }
    let mut edns = None;
    for _ in 0..arcount {
        let name_start = at;
        let after_name =
            skip_name(buf, at).ok_or_else(|| form("record runs past the end", edns))?;
        let rtype = be16(buf, after_name).ok_or_else(|| form("record runs past the end", edns))?;
        let end =
            skip_record(buf, name_start).ok_or_else(|| form("record runs past the end", edns))?;
        if rtype == rtype::OPT {
            if edns.is_some() {
                return Err(form("more than one OPT record", edns));
            }
            if after_name != name_start + 1 {
                return Err(form("OPT owner is not the root", None));
            }
            let (parsed, problem) = opt_record(buf, after_name, end);
            if let Some(reason) = problem {
                return Err(form(reason, Some(parsed)));
            }
            edns = Some(parsed);
        }
        at = end;
    }
    if qdcount != 1 {
        return Err(form("QDCOUNT is not 1", edns));
    }
    let (name, name_len) =
        QName::from_wire(&buf[HEADER_LEN..]).map_err(|e| form(question_problem(e), edns))?;
    let qend = HEADER_LEN + name_len + 4;
    debug_assert_eq!(qend, questions_end);
    let (Some(qtype), Some(qclass)) = (be16(buf, qend - 4), be16(buf, qend - 2)) else {
        return Err(form("question type or class missing", edns));
    };
    let question = &buf[HEADER_LEN..qend];
    Ok(Request {
        header,
        name,
        question,
        qtype,
        qclass,
        edns,
    })
}

/// The EDNS parameters of an OPT record whose owner name ends at
/// `after_name` and whose record ends at `end`, and the problem with its
/// options if there is one (the parameters still shape the FORMERR).
fn opt_record(buf: &[u8], after_name: usize, end: usize) -> (Edns, Option<&'static str>) {
    let payload = be16(buf, after_name + 2).unwrap_or(512);
    let ttl = be32(buf, after_name + 4).unwrap_or(0);
    let parsed = Edns {
        payload,
        version: ((ttl >> 16) & 0xFF) as u8,
        dnssec_ok: ttl & 0x8000 != 0,
    };
    // Options are type-length-value; a length running past the record is
    // the only malformation that matters to us.
    let mut opt = after_name + 10;
    while opt < end {
        let len = be16(buf, opt + 2).filter(|_| opt + 4 <= end);
        match len {
            Some(len) if opt + 4 + usize::from(len) <= end => opt += 4 + usize::from(len),
            _ => return (parsed, Some("EDNS option runs past the OPT record")),
        }
    }
    (parsed, None)
}

/// The FORMERR reason for a question name that cannot be read.
fn question_problem(e: NameError) -> &'static str {
    match e {
        NameError::Truncated => "question name runs past the end",
        NameError::BadLabel(_) => "question label longer than 63 octets or of a reserved type",
        NameError::Pointer => "compression pointer in the question",
        NameError::TooLong => "question name longer than 255 octets",
    }
}

/// Where the serial of the first SOA record in the Answer or Authority
/// section of response `msg` starts, if there is one.
pub(crate) fn soa_serial_offset(msg: &[u8]) -> Option<usize> {
    let qdcount = be16(msg, 4)?;
    let records = u32::from(be16(msg, 6)?) + u32::from(be16(msg, 8)?);
    let mut at = HEADER_LEN;
    for _ in 0..qdcount {
        at = skip_name(msg, at)? + 4;
    }
    for _ in 0..records {
        let after_name = skip_name(msg, at)?;
        if be16(msg, after_name)? == rtype::SOA {
            let mname_end = skip_name(msg, after_name + 10)?;
            let serial = skip_name(msg, mname_end)?;
            return (serial + 4 <= msg.len()).then_some(serial);
        }
        at = skip_record(msg, at)?;
    }
    None
}

fn skip_record(buf: &[u8], at: usize) -> Option<usize> {
    let after_name = skip_name(buf, at)?;
    let rdlen = usize::from(be16(buf, after_name + 8)?);
    let end = after_name + 10 + rdlen;
    (end <= buf.len()).then_some(end)
}

/// The owner name of a record in an answer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Owner {
    /// The question name, exactly as the client spelled it.
    Query,
    /// Another name, lower-case dotted text without the trailing dot.
    Name(String),
}

/// SOA record data (RFC 1035 §3.3.13).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Soa {
    /// Primary name server.
    pub mname: String,
    /// Responsible mailbox.
    pub rname: String,
    /// Serial.
    pub serial: u32,
    /// Refresh.
    pub refresh: u32,
    /// Retry.
    pub retry: u32,
    /// Expire.
    pub expire: u32,
    /// Minimum (the negative TTL, RFC 2308).
    pub minimum: u32,
}

/// Record data of the types this server answers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum RData {
    /// IPv4 address.
    A(Ipv4Addr),
    /// IPv6 address.
    Aaaa(Ipv6Addr),
    /// Service locator; the target is never compressed (RFC 2782).
    Srv {
        /// Priority.
        priority: u16,
        /// Weight.
        weight: u16,
        /// Port.
        port: u16,
        /// Target host, lower-case text without the trailing dot.
        target: String,
    },
    /// Name server.
    Ns(String),
    /// Start of authority.
    Soa(Soa),
    /// One text string.
    Txt(String),
    /// Pointer.
    Ptr(String),
}

impl RData {
    /// The record type code.
    pub(crate) fn rtype(&self) -> u16 {
        match self {
            Self::A(_) => rtype::A,
            Self::Aaaa(_) => rtype::AAAA,
            Self::Srv { .. } => rtype::SRV,
            Self::Ns(_) => rtype::NS,
            Self::Soa(_) => rtype::SOA,
            Self::Txt(_) => rtype::TXT,
            Self::Ptr(_) => rtype::PTR,
        }
    }

    /// The type's mnemonic (`AAAA`), as zone files and dig print it.
    pub(crate) fn mnemonic(&self) -> &'static str {
        match self {
            Self::A(_) => "A",
            Self::Aaaa(_) => "AAAA",
            Self::Srv { .. } => "SRV",
            Self::Ns(_) => "NS",
            Self::Soa(_) => "SOA",
            Self::Txt(_) => "TXT",
            Self::Ptr(_) => "PTR",
        }
    }
}

/// One resource record of class IN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// Owner name.
    pub owner: Owner,
    /// Time to live in seconds.
    pub ttl: u32,
    /// Record data.
    pub data: RData,
}

/// A complete answer, before encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Response code.
    pub rcode: Rcode,
    /// AA flag: set for every answer inside a served zone.
    pub authoritative: bool,
    /// Answer section.
    pub answers: Vec<Record>,
    /// Authority section (the SOA of negative answers).
    pub authority: Vec<Record>,
    /// Additional section; consecutive records with the same owner and type
    /// form one RRset and are kept or dropped together.
    pub additional: Vec<Record>,
    /// Why, for clients that sent EDNS (RFC 8914).
    pub ede: Option<Ede>,
}

impl Answer {
    /// An answer with no records.
    pub(crate) fn empty(rcode: Rcode, authoritative: bool) -> Self {
        Self {
            rcode,
            authoritative,
            answers: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
            ede: None,
        }
    }
}

/// What the encoder did to make a response fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fit {
    /// The answer did not fit: TC is set and every section is empty.
    pub truncated: bool,
    /// Additional RRsets left out (no TC).
    pub additional_dropped: usize,
}

/// Octets of a record's fixed part after its owner: type, class, TTL and
/// RDLENGTH.
const RR_FIXED: usize = 2 + 2 + 4 + 2;

/// `name` (dotted text, no trailing dot needed, labels of 1–63 octets
/// as configured or checked) in wire form, lower-case and uncompressed:
/// for messages built outside an answer (TSIG's MAC input, NOTIFY).
pub(crate) fn name_uncompressed(name: &str, out: &mut Vec<u8>) {
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    }
    out.push(0);
}

/// Octets of `name` (dotted text without the trailing dot) written in full.
fn name_len(name: &str) -> usize {
    if name.is_empty() { 1 } else { name.len() + 2 }
}

/// Octets an Answer record owned by the question ([`Owner::Query`], written
/// as a two-octet pointer) takes in a response. Exact for A (16), AAAA (28),
/// SRV (18 plus its target, which is never compressed) and TXT; for NS, PTR
/// and SOA an upper bound, since their names may be compressed. The answer
/// code sizes what it puts in an answer with it, without encoding.
pub(crate) fn answer_len(data: &RData) -> usize {
    2 + RR_FIXED
        + match data {
            RData::A(_) => 4,
            RData::Aaaa(_) => 16,
            RData::Srv { target, .. } => 6 + name_len(target),
            RData::Ns(name) | RData::Ptr(name) => name_len(name),
            RData::Soa(soa) => name_len(&soa.mname) + name_len(&soa.rname) + 5 * 4,
            RData::Txt(text) => text.len() + text.len().div_ceil(255).max(1),
        }
}

/// Our advertised UDP payload in responses' OPT records.
pub(crate) const ADVERTISED_PAYLOAD: u16 = 1232;

/// Where a name may point when it is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compress {
    /// Anywhere, the question included: the client's spelling is fine.
    Question,
    /// Only at names written in canonical lower case (Additional owners, NS
    /// and PTR targets), so they never take on the client's 0x20 case.
    Canonical,
    /// Never (SRV targets, RFC 2782). Still a target for later pointers.
    Never,
}

/// Length of the RRset at the start of `records`: consecutive records with
/// the same owner and type.
fn rrset_len(records: &[Record]) -> usize {
    let Some(first) = records.first() else {
        return 0;
    };
    1 + records[1..]
        .iter()
        .take_while(|r| r.owner == first.owner && r.data.rtype() == first.data.rtype())
        .count()
}

struct Writer<'n> {
    out: Vec<u8>,
    /// Suffixes of the question (client case) → offset.
    question: Offsets<'n>,
    /// Suffixes written in canonical lower case → offset.
    canonical: Offsets<'n>,
}

/// Name suffixes → where they were written. Hashed with foldhash, not
/// SipHash: the keys are our own names and the question's few suffixes,
/// nothing a client can flood, and SipHash was 5 % of a zone transfer's
/// CPU (perf, 300,000 endpoints).
type Offsets<'n> = HashMap<&'n str, u16, foldhash::fast::RandomState>;

impl<'n> Writer<'n> {
    /// A writer reusing `out`'s allocation.
    fn new(out: &mut Vec<u8>) -> Self {
        let mut out = std::mem::take(out);
        out.clear();
        Self {
            out,
            question: Offsets::default(),
            canonical: Offsets::default(),
        }
    }

    fn u16(&mut self, v: u16) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    /// Writes `name` (dotted text, lower case), pointing at an earlier copy
    /// of its longest known suffix as `how` allows.
    fn name(&mut self, name: &'n str, how: Compress) {
        let mut rest = name;
        while !rest.is_empty() {
            let found = match how {
                Compress::Question => self.canonical.get(rest).or_else(|| self.question.get(rest)),
                Compress::Canonical => self.canonical.get(rest),
                Compress::Never => None,
            };
            if let Some(&ptr) = found {
                self.u16(0xC000 | ptr);
                return;
            }
            // Only fully canonical suffixes become pointer targets for
            // canonical names; a `Question` name may end in a pointer.
            if how != Compress::Question && self.out.len() < 0x4000 {
                self.canonical.entry(rest).or_insert(self.out.len() as u16);
            }
            let (label, tail) = rest.split_once('.').unwrap_or((rest, ""));
            self.out.push(label.len() as u8);
            self.out.extend_from_slice(label.as_bytes());
            rest = tail;
        }
        self.out.push(0);
    }

    fn record(&mut self, record: &'n Record) {
        match &record.owner {
            Owner::Query => self.u16(0xC000 | HEADER_LEN as u16),
            // Authority owners (the SOA) may use the question's spelling of
            // the zone; Additional owners are canonical.
            Owner::Name(name) if record.data.rtype() == rtype::SOA => {
                self.name(name, Compress::Question);
            }
            Owner::Name(name) => self.name(name, Compress::Canonical),
        }
        self.u16(record.data.rtype());
        self.u16(CLASS_IN);
        self.u32(record.ttl);
        let len_at = self.out.len();
        self.u16(0);
        match &record.data {
            RData::A(ip) => self.out.extend_from_slice(&ip.octets()),
            RData::Aaaa(ip) => self.out.extend_from_slice(&ip.octets()),
            RData::Srv {
                priority,
                weight,
                port,
                target,
            } => {
                self.u16(*priority);
                self.u16(*weight);
                self.u16(*port);
                self.name(target, Compress::Never);
            }
            RData::Ns(name) | RData::Ptr(name) => self.name(name, Compress::Canonical),
            RData::Soa(soa) => {
                self.name(&soa.mname, Compress::Question);
                self.name(&soa.rname, Compress::Question);
                for v in [soa.serial, soa.refresh, soa.retry, soa.expire, soa.minimum] {
                    self.u32(v);
                }
            }
            RData::Txt(text) => {
                // Character-strings are at most 255 octets each.
                for chunk in text.as_bytes().chunks(255) {
                    self.out.push(chunk.len() as u8);
                    self.out.extend_from_slice(chunk);
                }
                if text.is_empty() {
                    self.out.push(0);
                }
            }
        }
        let rdlen = (self.out.len() - len_at - 2) as u16;
        self.out[len_at..len_at + 2].copy_from_slice(&rdlen.to_be_bytes());
    }

    fn opt(&mut self, dnssec_ok: bool, ext_rcode: u8, ede: Option<&Ede>) {
        self.out.push(0);
        self.u16(rtype::OPT);
        self.u16(ADVERTISED_PAYLOAD);
        self.out.push(ext_rcode);
        self.out.push(0);
        self.u16(if dnssec_ok { 0x8000 } else { 0 });
        match ede {
            None => self.u16(0),
            Some(ede) => {
                // Both lengths are bounded by MAX_EDE_TEXT.
                self.u16(ede.wire_len() as u16);
                self.u16(OPTION_EDE);
                self.u16((2 + ede.text.len()) as u16);
                self.u16(ede.code);
                self.out.extend_from_slice(ede.text.as_bytes());
            }
        }
    }
}

fn header_bytes(echo: &HeaderEcho, aa: bool, tc: bool, rcode: Rcode, counts: [u16; 4]) -> [u8; 12] {
    let mut flags: u16 = 0x8000 | (u16::from(echo.opcode & 0x0F) << 11);
    if aa {
        flags |= 0x0400;
    }
    if tc {
        flags |= 0x0200;
    }
    if echo.rd {
        flags |= 0x0100;
    }
    if echo.cd {
        flags |= 0x0010;
    }
    flags |= rcode.code() & 0x0F;
    let mut h = [0u8; 12];
    h[0..2].copy_from_slice(&echo.id.to_be_bytes());
    h[2..4].copy_from_slice(&flags.to_be_bytes());
    for (i, c) in counts.iter().enumerate() {
        h[4 + 2 * i..6 + 2 * i].copy_from_slice(&c.to_be_bytes());
    }
    h
}

/// Encodes `answer` for `req` in at most `limit` octets.
///
/// Order of sacrifice: Additional RRsets from the last, without TC; the
/// Extended DNS Error, when the Answer and Authority sections fit only
/// without it (the answer matters more than why); then, if they still do
/// not fit, every section is emptied and TC set. Header, question and OPT
/// (with its EDE, which a truncated response always has room for) stay.
pub(crate) fn encode(req: &Request<'_>, answer: &Answer, limit: usize, out: &mut Vec<u8>) -> Fit {
    let mut ede = answer.ede.as_ref().filter(|_| req.edns.is_some());
    let opt_len = |ede: Option<&Ede>| match req.edns {
        Some(_) => OPT_LEN + ede.map_or(0, Ede::wire_len),
        None => 0,
    };
    let mut budget = limit.saturating_sub(opt_len(ede));
    let ext_rcode = (answer.rcode.code() >> 4) as u8;
    let mut w = Writer::new(out);
    w.out.extend_from_slice(&[0; HEADER_LEN]);
    w.out.extend_from_slice(req.question);
    for i in 0..req.name.label_count() {
        let offset = HEADER_LEN + req.name.wire_offset(i);
        w.question.insert(req.name.suffix(i), offset as u16);
    }
    let after_question = w.out.len();

    let mut fit = Fit::default();
    for r in answer.answers.iter().chain(&answer.authority) {
        w.record(r);
    }
    if w.out.len() > budget && w.out.len() <= limit.saturating_sub(opt_len(None)) {
        ede = None;
        budget = limit.saturating_sub(opt_len(None));
    }
    let mut additional = 0usize;
    if w.out.len() > budget {
        fit.truncated = true;
        w.out.truncate(after_question);
    } else {
        let mut i = 0;
        while i < answer.additional.len() {
            let j = i + rrset_len(&answer.additional[i..]);
            let mark = w.out.len();
            for r in &answer.additional[i..j] {
                w.record(r);
            }
            if w.out.len() > budget {
                w.out.truncate(mark);
                fit.additional_dropped = count_rrsets(&answer.additional[i..]);
                break;
            }
            additional += j - i;
            i = j;
        }
    }
    if let Some(edns) = req.edns {
        w.opt(edns.dnssec_ok, ext_rcode, ede);
    }
    let (an, ns) = if fit.truncated {
        (0, 0)
    } else {
        (answer.answers.len() as u16, answer.authority.len() as u16)
    };
    let ar = additional as u16 + u16::from(req.edns.is_some());
    let h = header_bytes(
        &req.header,
        answer.authoritative,
        fit.truncated,
        answer.rcode,
        [1, an, ns, ar],
    );
    w.out[..HEADER_LEN].copy_from_slice(&h);
    *out = w.out;
    fit
}

fn count_rrsets(mut records: &[Record]) -> usize {
    let mut sets = 0;
    while !records.is_empty() {
        records = &records[rrset_len(records)..];
        sets += 1;
    }
    sets
}

/// Encodes a header-only error response (FORMERR for an unreadable
/// question): no question is echoed, so it is never larger than the query.
pub(crate) fn encode_error(
    header: &HeaderEcho,
    edns: Option<Edns>,
    rcode: Rcode,
    out: &mut Vec<u8>,
) {
    let counts = [0, 0, 0, u16::from(edns.is_some())];
    let mut w = Writer::new(out);
    w.out
        .extend_from_slice(&header_bytes(header, false, false, rcode, counts));
    if let Some(edns) = edns {
        w.opt(edns.dnssec_ok, (rcode.code() >> 4) as u8, None);
    }
    *out = w.out;
}

#[cfg(test)]
pub(crate) mod tests;
