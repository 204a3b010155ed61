//! TSIG (RFC 8945) for zone transfers and NOTIFY: checking the signature
//! of a request, signing every message of the response (the first over
//! the request's MAC, each later one over the previous MAC and the
//! timers, RFC 8945 §5.3.1), signing a NOTIFY, and the NOTAUTH answer to a
//! request whose signature fails.
//!
//! Written here rather than taken from hickory-proto: our messages are our
//! own codec's bytes ([`super::wire`]), and TSIG is a MAC over exactly
//! those bytes plus a few fields; the HMAC itself is `ring`'s, compared in
//! constant time. Pure: the time is an input.

use ring::hmac;

use super::wire::{HEADER_LEN, name_uncompressed};
use crate::vocab::tsig::{TsigAlgorithm, TsigKey};

/// The TSIG record type.
const TSIG: u16 = 250;
/// Class ANY, which a TSIG record carries.
const CLASS_ANY: u16 = 255;
/// The clock difference we accept, and announce in what we sign.
const FUDGE: u16 = 300;
/// The NOTAUTH rcode.
const NOTAUTH: u16 = 9;

/// Why a request's signature is not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TsigError {
    /// No TSIG record (or not the last one).
    Unsigned,
    /// A key we do not have, or of another algorithm (BADKEY, 17).
    BadKey,
    /// The MAC does not match (BADSIG, 16).
    BadSig,
    /// Signed too long ago or ahead (BADTIME, 18).
    BadTime,
}

impl TsigError {
    /// The TSIG error code a NOTAUTH answer carries.
    fn code(self) -> u16 {
        match self {
            Self::Unsigned | Self::BadSig => 16,
            Self::BadKey => 17,
            Self::BadTime => 18,
        }
    }
}

/// A request whose signature checked: what signing its answer needs.
#[derive(Debug, Clone)]
pub(crate) struct Verified<'k> {
    /// The key it was signed with.
    pub key: &'k TsigKey,
    /// Its MAC, which the first answer message's MAC covers.
    mac: Vec<u8>,
}

/// The TSIG record of a message, as read.
struct Record<'m> {
    /// Where the record starts (the message without it ends there).
    at: usize,
    name: String,
    algorithm: String,
    time: u64,
    fudge: u16,
    mac: &'m [u8],
    original_id: u16,
    error: u16,
    other: &'m [u8],
}

fn be16(m: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*m.get(at)?, *m.get(at + 1)?]))
}

/// Reads a (possibly compressed) name at `at`: its lower-case dotted text
/// and where the name ends in place.
fn read_name(m: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut labels: Vec<String> = Vec::new();
    let mut end = None;
    for _ in 0..128 {
        let len = *m.get(at)?;
        match len & 0xC0 {
            0xC0 => {
                end.get_or_insert(at + 2);
                at = usize::from(be16(m, at)? & 0x3FFF);
            }
            0 if len == 0 => {
                return Some((labels.join("."), end.unwrap_or(at + 1)));
            }
            0 => {
                let label = m.get(at + 1..at + 1 + usize::from(len))?;
                labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
                at += 1 + usize::from(len);
            }
            _ => return None,
        }
    }
    None
}

/// Skips a resource record at `at`; where the next one starts.
fn skip_record(m: &[u8], at: usize) -> Option<usize> {
    let (_, end) = read_name(m, at)?;
    let rdlen = usize::from(be16(m, end + 8)?);
    Some(end + 10 + rdlen).filter(|&e| e <= m.len())
}

/// The TSIG record of `m`: the last record, in the Additional section.
fn find(m: &[u8]) -> Option<Record<'_>> {
    let counts: Vec<u16> = (0..4).map(|i| be16(m, 4 + 2 * i)).collect::<Option<_>>()?;
    let mut at = HEADER_LEN;
    for _ in 0..counts[0] {
        at = read_name(m, at)?.1 + 4;
    }
    let records = usize::from(counts[1]) + usize::from(counts[2]) + usize::from(counts[3]);
    let mut last = None;
    for _ in 0..records {
        last = Some(at);
        at = skip_record(m, at)?;
    }
    let start = last?;
    let (name, end) = read_name(m, start)?;
    if be16(m, end)? != TSIG || be16(m, end + 2)? != CLASS_ANY || at != m.len() {
        return None;
    }
    let rdata = end + 10;
    let (algorithm, p) = read_name(m, rdata)?;
    let time = m
        .get(p..p + 6)?
        .iter()
        .fold(0u64, |t, b| t << 8 | u64::from(*b));
    let fudge = be16(m, p + 6)?;
    let mac_len = usize::from(be16(m, p + 8)?);
    let mac = m.get(p + 10..p + 10 + mac_len)?;
    let q = p + 10 + mac_len;
    let other_len = usize::from(be16(m, q + 4)?);
    Some(Record {
        at: start,
        name,
        algorithm,
        time,
        fudge,
        mac,
        original_id: be16(m, q)?,
        error: be16(m, q + 2)?,
        other: m.get(q + 6..q + 6 + other_len)?,
    })
}

fn time48(t: u64) -> [u8; 6] {
    let b = t.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// The TSIG variables (RFC 8945 §4.3.3): the key's name and algorithm,
/// the time signed, the fudge, the error and the other data.
fn variables(
    (name, algorithm): (&str, &str),
    (time, fudge): (u64, u16),
    error: u16,
    other: &[u8],
) -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    name_uncompressed(name, &mut v);
    v.extend_from_slice(&CLASS_ANY.to_be_bytes());
    v.extend_from_slice(&0u32.to_be_bytes());
    name_uncompressed(algorithm, &mut v);
    v.extend_from_slice(&time48(time));
    v.extend_from_slice(&fudge.to_be_bytes());
    v.extend_from_slice(&error.to_be_bytes());
    v.extend_from_slice(&(other.len() as u16).to_be_bytes());
    v.extend_from_slice(other);
    v
}

/// The variables of what we sign with `key` at `time`: no error, no
/// other data.
fn our_variables(key: &TsigKey, time: u64) -> Vec<u8> {
    variables((&key.name, key.algorithm.name()), (time, FUDGE), 0, &[])
}

fn hmac_key(key: &TsigKey) -> hmac::Key {
    let alg = match key.algorithm {
        TsigAlgorithm::HmacSha256 => hmac::HMAC_SHA256,
        TsigAlgorithm::HmacSha512 => hmac::HMAC_SHA512,
    };
    hmac::Key::new(alg, &key.secret)
}

/// Checks the signature of request `m` against `keys` at `now` (Unix
/// seconds).
pub(crate) fn verify<'k>(
    m: &[u8],
    keys: &'k [TsigKey],
    now: u64,
) -> Result<Verified<'k>, TsigError> {
    let r = find(m).ok_or(TsigError::Unsigned)?;
    let key = keys
        .iter()
        .find(|k| k.name == r.name && TsigAlgorithm::parse(&r.algorithm) == Some(k.algorithm))
        .ok_or(TsigError::BadKey)?;
    // The message as it was before the TSIG was added: without the
    // record, one record less, and its original id.
    let mut signed = m[..r.at].to_vec();
    signed[0..2].copy_from_slice(&r.original_id.to_be_bytes());
    let arcount = be16(m, 10).unwrap_or(1).saturating_sub(1);
    signed[10..12].copy_from_slice(&arcount.to_be_bytes());
    signed.extend_from_slice(&variables(
        (&r.name, &r.algorithm),
        (r.time, r.fudge),
        r.error,
        r.other,
    ));
    hmac::verify(&hmac_key(key), &signed, r.mac).map_err(|_| TsigError::BadSig)?;
    if now.abs_diff(r.time) > u64::from(r.fudge) {
        return Err(TsigError::BadTime);
    }
    Ok(Verified {
        key,
        mac: r.mac.to_vec(),
    })
}

/// Appends to message `m` a TSIG record of `key`: `mac` (of `mac_len`),
/// signed at `time`, with `error`; one more Additional record.
fn append(m: &mut Vec<u8>, key: &TsigKey, time: u64, mac: &[u8], error: u16) {
    let id = be16(m, 0).unwrap_or(0);
    let mut rdata = Vec::with_capacity(64 + mac.len());
    name_uncompressed(key.algorithm.name(), &mut rdata);
    rdata.extend_from_slice(&time48(time));
    rdata.extend_from_slice(&FUDGE.to_be_bytes());
    rdata.extend_from_slice(&(mac.len() as u16).to_be_bytes());
    rdata.extend_from_slice(mac);
    rdata.extend_from_slice(&id.to_be_bytes());
    rdata.extend_from_slice(&error.to_be_bytes());
    rdata.extend_from_slice(&0u16.to_be_bytes());
    name_uncompressed(&key.name, m);
    m.extend_from_slice(&TSIG.to_be_bytes());
    m.extend_from_slice(&CLASS_ANY.to_be_bytes());
    m.extend_from_slice(&0u32.to_be_bytes());
    m.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    m.extend_from_slice(&rdata);
    let arcount = be16(m, 10).unwrap_or(0).saturating_add(1);
    m[10..12].copy_from_slice(&arcount.to_be_bytes());
}

/// The octets the TSIG record [`Signer`] appends for `v` takes: what an
/// answer must leave room for.
pub(crate) fn record_len(v: &Verified<'_>) -> usize {
    let name = |n: &str| n.len() + 2;
    // Owner, type, class, TTL, RDLENGTH; algorithm, time, fudge, MAC
    // size, MAC, id, error, other length.
    name(&v.key.name) + 10 + name(v.key.algorithm.name()) + 6 + 2 + 2 + v.mac.len() + 6
}

/// Signs the messages of an answer to a verified request, one after
/// the other: the first covers the request's MAC and every TSIG variable,
/// each later one the MAC before it and the time (RFC 8945 §5.3.1). Owns
/// its key, so a transfer's producer thread can carry it.
pub(crate) struct Signer {
    key: TsigKey,
    prior: Vec<u8>,
    first: bool,
    now: u64,
}

impl Signer {
    /// The signer of the answer to `v`, at `now` (Unix seconds).
    pub(crate) fn new(v: &Verified<'_>, now: u64) -> Self {
        Self {
            key: v.key.clone(),
            prior: v.mac.clone(),
            first: true,
            now,
        }
    }

    /// Signs `m`, the next message of the answer.
    pub(crate) fn sign(&mut self, m: &mut Vec<u8>) {
        let mut ctx = hmac::Context::with_key(&hmac_key(&self.key));
        ctx.update(&(self.prior.len() as u16).to_be_bytes());
        ctx.update(&self.prior);
        ctx.update(m);
        if self.first {
            ctx.update(&our_variables(&self.key, self.now));
        } else {
            ctx.update(&time48(self.now));
            ctx.update(&FUDGE.to_be_bytes());
        }
        let mac = ctx.sign().as_ref().to_vec();
        append(m, &self.key, self.now, &mac, 0);
        self.prior = mac;
        self.first = false;
    }
}

/// Signs request `m` (a NOTIFY) with `key` at `now`.
pub(crate) fn sign_request(m: &mut Vec<u8>, key: &TsigKey, now: u64) {
    let mut signed = m.clone();
    signed.extend_from_slice(&our_variables(key, now));
    let mac = hmac::sign(&hmac_key(key), &signed);
    append(m, key, now, mac.as_ref(), 0);
}

/// The NOTAUTH answer to request `m` whose signature failed with `why`:
/// the question echoed and, but for an unsigned request, a TSIG record of
/// the key it named with the error and no MAC (RFC 8945 §5.2). `None` when
/// the request has no readable question.
pub(crate) fn notauth(m: &[u8], keys: &[TsigKey], why: TsigError, now: u64) -> Option<Vec<u8>> {
    let question_end = read_name(m, HEADER_LEN)?.1 + 4;
    let question = m.get(HEADER_LEN..question_end)?;
    let flags = be16(m, 2)?;
    // QR, the opcode and RD echoed, rcode NOTAUTH.
    let flags = 0x8000 | (flags & 0x7900) | NOTAUTH;
    let mut out = Vec::with_capacity(question.len() + 80);
    out.extend_from_slice(&m[0..2]);
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(question);
    let named = find(m).and_then(|r| keys.iter().find(|k| k.name == r.name).cloned());
    let key = named.unwrap_or_else(|| TsigKey {
        name: find(m).map(|r| r.name).unwrap_or_default(),
        algorithm: TsigAlgorithm::HmacSha256,
        secret: Vec::new(),
    });
    if why != TsigError::Unsigned {
        append(&mut out, &key, now, &[], why.code());
    }
    Some(out)
}

#[cfg(test)]
mod tests;
