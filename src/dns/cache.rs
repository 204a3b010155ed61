//! The hot path: pre-encoded responses, reused while what they were computed
//! from is unchanged (docs/architecture.md, "Serving").
//!
//! A plain query (opcode QUERY, one question of class IN, no other records
//! but an option-less EDNS(0) OPT) is read without decoding: its lower-cased
//! name, type and the response size limit form the key of a moka cache of
//! wire bytes. A hit is copied out and patched: the ID, the RD and CD bits,
//! the question bytes (so the client's 0x20 case is echoed, and every name
//! compressed against the question reads in that case too) and the SOA
//! serial. A miss, and anything unusual, takes the general path; the
//! general path's response is what gets stored, so both paths give the same
//! bytes. Validity is checked on every hit against the snapshot being
//! served ([`Depends::holds`]): a name's cached answer dies with that name's
//! records, not with every change to the zone. Answers that change with
//! the clock (stale data, fail-open unions: their Extended DNS Error says
//! how long a cluster has been silent) are never stored: `answer` marks
//! them [`Depends::Uncacheable`]. A federated answer with a member within
//! the grace is stored: its EDE carries no age, and its entry changes with
//! that member's health.
//!
//! Each worker also keeps a small direct-mapped table of the stored answers
//! it served last ([`Local`]): the common hit touches no lock, no atomic
//! counter and no shared cache line, and a stored answer remembers the
//! snapshot it was last found valid in, so validity is re-checked only when
//! a new snapshot is published.
//!
//! Rotated RRsets: an address RRset is one run of equal-sized records, each
//! owned by a pointer to the question, so a rotation is the same run cut in
//! two and swapped — one stored copy serves every rotation. SRV records are
//! not alike in size and their targets are what Additional owners point at,
//! and a capped answer (an RRset too large for one answer, or above
//! `max-answer-records`) carries a different window of the RRset at each
//! rotation, so those are stored once per rotation, filled as rotations are
//! asked for, within a byte budget per name. A stored answer keeps its
//! [`Note`], so a hit counts as capped as the general path would. This
//! module must not decide answers (that is `answer`) nor encode records
//! (that is `wire`).

use super::answer::{Answered, Depends, Note};
use super::transport::Transport;
use super::wire::{
    CLASS_IN, Fit, HEADER_LEN, OPCODE_QUERY, Owner, PLAIN_UDP_LIMIT, RData, Rcode, rtype,
    soa_serial_offset,
};
use crate::model::{Settings, Snapshot};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Longest key: the limit (2), flags (1), type (2) and a 255-octet name.
const MAX_KEY: usize = 5 + 255;
/// Most octets of responses stored per rotation for one name: an answer
/// whose rotations would take more (a long SRV RRset over TCP) is answered
/// by the general path every time. Room for a 4,500-address answer over
/// TCP (two windows of 64 KiB) and for hundreds of small windows.
const MAX_ROTATION_BYTES: usize = 512 * 1024;
/// Fixed cost of an entry beyond its bytes, for the weigher.
const ENTRY_OVERHEAD: usize = 160;

/// A query the hot path can answer: the parts of it a response depends on.
#[derive(Debug)]
pub(crate) struct Plain<'a> {
    /// The question as received (name, type, class).
    pub question: &'a [u8],
    /// QTYPE.
    pub qtype: u16,
    key: [u8; MAX_KEY],
    key_len: usize,
}

impl Plain<'_> {
    /// The cache key: size limit, EDNS flags, type, lower-cased wire name.
    pub(crate) fn key(&self) -> &[u8] {
        &self.key[..self.key_len]
    }
}

/// Reads `packet` as a plain query, or `None` when it needs the general
/// path (anything malformed, unusual or merely uncommon). The size limit
/// follows [`super::wire::Request::udp_limit`].
pub(crate) fn plain(
    packet: &[u8],
    transport: Transport,
    max_udp_payload: u16,
) -> Option<Plain<'_>> {
    let header = packet.get(..HEADER_LEN)?;
    // QR=0, opcode QUERY; AA/TC/Z/AD and the rcode are ignored by the
    // general path too, RD and CD are patched in.
    if header[2] & 0x80 != 0 || (header[2] >> 3) & 0x0F != OPCODE_QUERY {
        return None;
    }
    // One question, no answer or authority records, at most the OPT.
    if header[4..10] != [0, 1, 0, 0, 0, 0] || header[10] != 0 || header[11] > 1 {
        return None;
    }
    let mut key = [0u8; MAX_KEY];
    let mut at = HEADER_LEN;
    let mut k = 5;
    loop {
        let len = usize::from(*packet.get(at)?);
        if len & 0xC0 != 0 || k + 1 + len > MAX_KEY {
            return None;
        }
        let label = packet.get(at..at + 1 + len)?;
        for (dst, src) in key[k..k + 1 + len].iter_mut().zip(label) {
            *dst = src.to_ascii_lowercase();
        }
        // The length octet is below 64, so lower-casing left it alone.
        k += 1 + len;
        at += 1 + len;
        if len == 0 {
            break;
        }
    }
    let qtype = u16::from_be_bytes([*packet.get(at)?, *packet.get(at + 1)?]);
    let qclass = u16::from_be_bytes([*packet.get(at + 2)?, *packet.get(at + 3)?]);
    let qend = at + 4;
    if qclass != CLASS_IN || matches!(qtype, rtype::AXFR | rtype::IXFR | rtype::OPT) {
        return None;
    }
    let (limit, edns_flags) = if header[11] == 0 {
        if packet.len() != qend {
            return None;
        }
        (PLAIN_UDP_LIMIT, 0u8)
    } else {
        // Root owner, type OPT, payload, extended rcode 0, version 0, only
        // the DO flag, no options, and nothing after it.
        let opt = packet.get(qend..)?;
        if opt.len() != 11 || opt[0..3] != [0, 0, 41] || opt[5..7] != [0, 0] {
            return None;
        }
        if opt[7] & 0x7F != 0 || opt[8] != 0 || opt[9..11] != [0, 0] {
            return None;
        }
        let payload = u16::from_be_bytes([opt[3], opt[4]]);
        let limit = usize::from(payload.clamp(512, max_udp_payload.max(512)));
        (limit, 1 | (opt[7] >> 6 & 0x02))
    };
    let limit = transport.stream_limit().unwrap_or(limit);
    key[0..2].copy_from_slice(&(limit as u16).to_be_bytes());
    key[2] = edns_flags;
    key[3..5].copy_from_slice(&qtype.to_be_bytes());
    Some(Plain {
        question: &packet[HEADER_LEN..qend],
        qtype,
        key,
        key_len: k,
    })
}

/// One stored answer.
#[derive(Debug)]
struct Stored {
    key: Key,
    /// Generation of the last snapshot this was found valid in (0: none).
    checked: AtomicU64,
    settings: Arc<Settings>,
    depends: Depends,
    rcode: Rcode,
    fit: Fit,
    /// What a hit counts (only `capped` may be set: stale and fail-open
    /// answers, and any with an age in its Extended DNS Error, are never
    /// stored).
    note: Note,
    /// Offset of the SOA serial in the bytes, when there is a SOA.
    serial_at: Option<usize>,
    form: Form,
}

/// How the rotations of a stored answer are kept.
#[derive(Debug)]
enum Form {
    /// One response for every rotation.
    One(Box<[u8]>),
    /// One response whose Answer section is `count` records of `size`
    /// octets from `start`, stored at rotation `base`; rotation `r` moves
    /// the first `(r - base) mod count` records to the end.
    Chunks {
        bytes: Box<[u8]>,
        start: usize,
        size: usize,
        count: usize,
        base: usize,
    },
    /// A response per rotation, filled as asked for.
    PerRotation(Box<[OnceLock<Box<[u8]>>]>),
}

impl Form {
    /// Rotations this form tells apart.
    fn rotations(&self) -> usize {
        match self {
            Self::One(_) => 1,
            Self::Chunks { count, .. } => *count,
            Self::PerRotation(r) => r.len(),
        }
    }

    /// Octets held.
    fn weight(&self) -> usize {
        match self {
            Self::One(b) | Self::Chunks { bytes: b, .. } => b.len(),
            Self::PerRotation(r) => {
                let one = r.iter().find_map(|r| r.get()).map_or(0, |b| b.len());
                one * r.len()
            }
        }
    }

    /// Writes rotation `rotation` into `out`; false when it is not stored.
    fn write(&self, rotation: usize, out: &mut Vec<u8>) -> bool {
        out.clear();
        match self {
            Self::One(bytes) => out.extend_from_slice(bytes),
            Self::Chunks {
                bytes,
                start,
                size,
                count,
                base,
            } => {
                let by = (rotation + count - base % count) % count;
                let (cut, end) = (start + by * size, start + count * size);
                out.extend_from_slice(&bytes[..*start]);
                out.extend_from_slice(&bytes[cut..end]);
                out.extend_from_slice(&bytes[*start..cut]);
                out.extend_from_slice(&bytes[end..]);
            }
            Self::PerRotation(r) => match r[rotation % r.len()].get() {
                Some(bytes) => out.extend_from_slice(bytes),
                None => return false,
            },
        }
        true
    }
}

impl Stored {
    fn holds(&self, snap: &Snapshot) -> bool {
        if self.checked.load(Ordering::Relaxed) == snap.generation {
            return true;
        }
        let holds = Arc::ptr_eq(&self.settings, &snap.settings)
            && (self.rcode != Rcode::NxDomain || (snap.known && snap.unsynced.is_empty()))
            && self.depends.holds(snap);
        if holds {
            self.checked.store(snap.generation, Ordering::Relaxed);
        }
        holds
    }

    /// Writes the response for `q` at `rotation` in `snap` into `out`.
    fn write(
        &self,
        q: &Plain<'_>,
        echo: Echo,
        snap: &Snapshot,
        rotation: usize,
        out: &mut Vec<u8>,
    ) -> Lookup {
        if !self.form.write(rotation, out) {
            return Lookup::Miss(rotation % self.form.rotations());
        }
        out[0..2].copy_from_slice(&echo.id);
        // RD (0x01 of the third octet) and CD (0x10 of the fourth) echo the
        // query; everything else in the header is the answer's.
        out[2] = (out[2] & !0x01) | (echo.flags[0] & 0x01);
        out[3] = (out[3] & !0x10) | (echo.flags[1] & 0x10);
        out[HEADER_LEN..HEADER_LEN + q.question.len()].copy_from_slice(q.question);
        if let Some(at) = self.serial_at {
            out[at..at + 4].copy_from_slice(&snap.serial.to_be_bytes());
        }
        Lookup::Hit(self.rcode, self.fit, self.note)
    }
}

/// One worker's own state: the rotation counter and the front table.
#[derive(Debug)]
pub struct Local {
    rotation: usize,
    front: Box<[Option<Arc<Stored>>]>,
}

impl Local {
    /// State with a front table of `slots` entries (rounded up to a power
    /// of two; 0 for none).
    pub fn new(slots: usize) -> Self {
        Self::starting_at(slots, 0)
    }

    /// [`Local::new`] whose first query gets rotation `rotation`.
    pub(crate) fn starting_at(slots: usize, rotation: usize) -> Self {
        let slots = if slots == 0 {
            0
        } else {
            slots.next_power_of_two()
        };
        Self {
            rotation,
            front: (0..slots).map(|_| None).collect(),
        }
    }

    /// The rotation for the next query; successive queries rotate RRsets.
    pub(crate) fn next_rotation(&mut self) -> usize {
        let r = self.rotation;
        self.rotation = r.wrapping_add(1);
        r
    }

    fn slot(&self, key: &[u8]) -> Option<usize> {
        if self.front.is_empty() {
            return None;
        }
        let h = foldhash::fast::FixedState::with_seed(0x5eed).hash_one(key);
        Some(h as usize & (self.front.len() - 1))
    }
}

/// How `response`, the answer for rotation `rotation`, can be stored.
fn form(
    answered: &Answered,
    fit: Fit,
    rotation: usize,
    response: &[u8],
    qlen: usize,
) -> Option<Form> {
    let count = answered.rotated;
    if count <= 1 || fit.truncated {
        return Some(Form::One(response.into()));
    }
    // A capped answer is a window of its RRset, not all of it rotated:
    // cutting it as `Chunks` does would serve the same window every time.
    if answered.note.capped {
        return per_rotation(count, rotation, response);
    }
    let answers = &answered.answer.answers;
    let size = match answers.first().map(|r| &r.data) {
        Some(RData::A(_)) => 16,
        Some(RData::Aaaa(_)) => 28,
        _ => 0,
    };
    let alike = size > 0
        && answers.len() == count
        && answers
            .iter()
            .all(|r| r.owner == Owner::Query && r.data.rtype() == answers[0].data.rtype());
    let start = HEADER_LEN + qlen;
    if alike && start + count * size <= response.len() {
        return Some(Form::Chunks {
            bytes: response.into(),
            start,
            size,
            count,
            base: rotation % count,
        });
    }
    per_rotation(count, rotation, response)
}

/// `response` stored as rotation `rotation` of `count`, the others filled
/// later; `None` when `count` responses of its size are over the budget.
fn per_rotation(count: usize, rotation: usize, response: &[u8]) -> Option<Form> {
    if count.saturating_mul(response.len()) > MAX_ROTATION_BYTES {
        return None;
    }
    let r: Box<[OnceLock<Box<[u8]>>]> = (0..count).map(|_| OnceLock::new()).collect();
    let _ = r[rotation % count].set(response.into());
    Some(Form::PerRotation(r))
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The response is in `out`; count it with these.
    Hit(Rcode, Fit, Note),
    /// Not stored, or stored for another state or rotation: answer with the
    /// general path using this rotation, then [`AnswerCache::store`].
    Miss(usize),
}

/// The query header fields a stored response takes from each query.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Echo {
    /// The ID octets.
    pub id: [u8; 2],
    /// The flag octets (RD and CD are taken from them).
    pub flags: [u8; 2],
}

impl Echo {
    /// The fields of `packet`'s header (at least 12 octets, as [`plain`]
    /// checked).
    pub(crate) fn of(packet: &[u8]) -> Self {
        Self {
            id: [packet[0], packet[1]],
            flags: [packet[2], packet[3]],
        }
    }
}

/// Owned form of [`Plain::key`].
type Key = Box<[u8]>;

/// Pre-encoded responses, bounded in bytes.
#[derive(Debug, Clone)]
pub(crate) struct AnswerCache {
    map: moka::sync::Cache<Key, Arc<Stored>, foldhash::fast::RandomState>,
}

impl AnswerCache {
    /// A cache holding about `bytes` of responses.
    pub(crate) fn new(bytes: u64) -> Self {
        let map = moka::sync::Cache::builder()
            .max_capacity(bytes)
            .weigher(|key: &Key, value: &Arc<Stored>| {
                let bytes = key.len() + ENTRY_OVERHEAD + value.form.weight();
                u32::try_from(bytes).unwrap_or(u32::MAX)
            })
            .build_with_hasher(foldhash::fast::RandomState::default());
        Self { map }
    }

    /// Writes the stored response to `q` into `out`, if there is one that
    /// holds in `snap`: from the worker's front table, else from the shared
    /// cache (and then keeps it in the front table). `rotation` picks the
    /// rotation of rotated RRsets.
    pub(crate) fn lookup(
        &self,
        local: &mut Local,
        q: &Plain<'_>,
        echo: Echo,
        snap: &Snapshot,
        rotation: usize,
        out: &mut Vec<u8>,
    ) -> Lookup {
        let slot = local.slot(q.key());
        if let Some(Some(stored)) = slot.map(|i| &local.front[i])
            && *stored.key == *q.key()
            && stored.holds(snap)
        {
            return stored.write(q, echo, snap, rotation, out);
        }
        let Some(stored) = self.map.get(q.key()).filter(|s| s.holds(snap)) else {
            return Lookup::Miss(rotation);
        };
        let found = stored.write(q, echo, snap, rotation, out);
        if let Some(i) = slot {
            local.front[i] = Some(stored);
        }
        found
    }

    /// Stores `response`, the general path's encoding of `answered` for `q`
    /// in `snap` with rotation `rotation` (as [`Lookup::Miss`] gave it).
    pub(crate) fn store(
        &self,
        local: &mut Local,
        q: &Plain<'_>,
        snap: &Snapshot,
        rotation: usize,
        answered: &Answered,
        (response, fit): (&[u8], Fit),
    ) {
        let Note {
            stale,
            fail_open,
            nearest_fail_open,
            ..
        } = answered.note;
        // Answers counted as they are served are never reused.
        if matches!(answered.depends, Depends::Uncacheable)
            || stale
            || fail_open
            || nearest_fail_open
        {
            return;
        }
        let existing = self.map.get(q.key()).filter(|s| s.holds(snap));
        if let Some(Form::PerRotation(r)) = existing.as_ref().map(|s| &s.form)
            && r.len() == answered.rotated
        {
            let _ = r[rotation % r.len()].set(response.into());
            return;
        }
        let Some(form) = form(answered, fit, rotation, response, q.question.len()) else {
            return;
        };
        let stored = Stored {
            key: q.key().into(),
            checked: AtomicU64::new(snap.generation),
            settings: snap.settings.clone(),
            depends: answered.depends.clone(),
            rcode: answered.answer.rcode,
            fit,
            note: answered.note,
            serial_at: soa_serial_offset(response),
            form,
        };
        let stored = Arc::new(stored);
        if let Some(i) = local.slot(q.key()) {
            local.front[i] = Some(stored.clone());
        }
        self.map.insert(q.key().into(), stored);
    }
}

#[cfg(test)]
mod tests;
