//! The whole request path, shared by every transport: a plain query
//! answered from a stored response, else decoded, answered from the current
//! snapshot within the room the transport leaves, encoded within its size
//! limit (and stored); counted. Synchronous: the UDP workers and the TCP
//! and TLS listeners call it; it must not touch a socket.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::answer::{self, Answered, Question, Room};
use super::cache::{self, AnswerCache, Echo, Local, Lookup};
use super::journal::Journal;
use super::pace::Pacer;
use super::stats::{DnsStats, XfrKind, XfrOutcome};
use super::transfer::{self, Check};
use super::transport::Transport;
use super::tsig::{self, TsigError};
use super::wire::{self, Answer, DecodeError, OPCODE_QUERY, Rcode, Request};
use crate::model::Snapshot;

/// Answers packets from the latest published snapshot.
#[derive(Debug)]
pub struct Handler {
    snapshot: Arc<ArcSwap<Snapshot>>,
    stats: Arc<DnsStats>,
    cache: Option<AnswerCache>,
    /// Where the next stream connection's rotation starts.
    next_stream: AtomicUsize,
    /// Zone transfers under way ([`MAX_TRANSFERS`]).
    transfers: Arc<Semaphore>,
    /// The IXFR journal, fed by the runtime.
    journal: Arc<Journal>,
    /// The byte rate every transfer shares.
    pacer: Arc<Pacer>,
}

/// Whole-zone transfers written at once: each keeps a thread producing
/// its messages (a few messages of memory; the byte rate they share
/// bounds their CPU), so one more is refused (busy) rather than let
/// transfers crowd out queries. Enough for a fleet of secondaries started
/// together; differences and up-to-date answers, a message or two each,
/// are not counted.
pub(crate) const MAX_TRANSFERS: usize = 8;

/// Messages a transfer's producer may be ahead of its writer: a few
/// messages of memory per transfer, whatever the zone's size.
const AHEAD: usize = 4;

/// A zone transfer to write: its messages as they are produced, the byte
/// rate it shares, and for a whole zone its place among the
/// [`MAX_TRANSFERS`] (freed when dropped).
#[derive(Debug)]
pub struct Outgoing {
    /// The messages, each at most 65,535 octets; closed after the last.
    pub messages: mpsc::Receiver<Vec<u8>>,
    /// The byte rate of transfers (octets per second, 0: unlimited).
    pub rate: u64,
    /// The rate's schedule, shared by every transfer.
    pub pacer: Arc<Pacer>,
    _slot: Option<OwnedSemaphorePermit>,
}

impl Handler {
    /// A handler reading `snapshot` and counting into `stats`, answering
    /// plain queries from a response cache of about `cache_bytes` (0: every
    /// query takes the general path).
    pub fn new(snapshot: Arc<ArcSwap<Snapshot>>, stats: Arc<DnsStats>, cache_bytes: u64) -> Self {
        Self {
            snapshot,
            stats,
            cache: (cache_bytes > 0).then(|| AnswerCache::new(cache_bytes)),
            next_stream: AtomicUsize::new(0),
            transfers: Arc::new(Semaphore::new(MAX_TRANSFERS)),
            journal: Arc::new(Journal::default()),
            pacer: Arc::new(Pacer::default()),
        }
    }

    /// This handler, its IXFR journals read from `journal` (which the
    /// runtime feeds, `journal::run`); without it, every IXFR that is not
    /// current gets the whole zone.
    #[must_use]
    pub fn with_journal(mut self, journal: Arc<Journal>) -> Self {
        self.journal = journal;
        self
    }

    /// The state of a new TCP or TLS connection: no front table
    /// (connections are many and each sees few names), and a rotation
    /// following the previous connection's, so that a client opening a
    /// connection per query still gets successive windows of an RRset too
    /// large for one answer, and so every record.
    pub fn stream_local(&self) -> Local {
        Local::starting_at(0, self.next_stream.fetch_add(1, Ordering::Relaxed))
    }

    /// The counters this handler writes to.
    pub fn stats(&self) -> &DnsStats {
        &self.stats
    }

    /// Handles one packet with the calling worker's `local` state. Writes
    /// the response into `out` and returns true, or returns false when the
    /// packet gets no response (not a query).
    pub fn handle(
        &self,
        local: &mut Local,
        packet: &[u8],
        transport: Transport,
        out: &mut Vec<u8>,
    ) -> bool {
        let snap = self.snapshot.load();
        let keys = &snap.settings.transfer_keys;
        // A query signed by a transfer key (a secondary's SOA check) gets
        // a signed answer, never a stored one; one whose signature fails,
        // NOTAUTH (RFC 8945 §5.2).
        if !keys.is_empty() && wire::has_additional(packet) {
            let now = unix_now();
            match tsig::verify(packet, keys, now) {
                Ok(v) => return self.signed(&snap, (packet, transport), &v, out),
                Err(TsigError::Unsigned) => {}
                Err(why) => {
                    let Some(answer) = tsig::notauth(packet, keys, why, now) else {
                        self.stats.dropped();
                        return false;
                    };
                    *out = answer;
                    self.stats.query(None, Rcode::NotAuth);
                    return true;
                }
            }
        }
        let mut rotation = local.next_rotation();
        let plain = match &self.cache {
            Some(cache) => {
                cache::plain(packet, transport, snap.settings.max_udp_payload).map(|q| (cache, q))
            }
            None => None,
        };
        if let Some((cache, q)) = &plain {
            match cache.lookup(local, q, Echo::of(packet), &snap, rotation, out) {
                Lookup::Hit(rcode, fit, note) => {
                    self.stats.cache_hit();
                    self.stats.query(Some(q.qtype), rcode);
                    self.stats.answered(fit, note, transport);
                    return true;
                }
                Lookup::Miss(r) => {
                    self.stats.cache_miss();
                    rotation = r;
                }
            }
        }
        let req = match wire::decode(packet) {
            Ok(req) => req,
            Err(DecodeError::Drop(_)) => {
                self.stats.dropped();
                return false;
            }
            Err(DecodeError::FormErr { header, edns, .. }) => {
                wire::encode_error(&header, edns, Rcode::FormErr, out);
                self.stats.query(None, Rcode::FormErr);
                return true;
            }
        };
        let (answered, fit) = self.general(&snap, &req, (transport, rotation, 0), out);
        if let Some((cache, q)) = &plain {
            cache.store(local, q, &snap, rotation, &answered, (out, fit));
        }
        true
    }
}

impl Handler {
    /// The answer to `packet`, whose signature `v` checked, signed in
    /// turn: the general path within the room the TSIG record leaves.
    fn signed(
        &self,
        snap: &Snapshot,
        (packet, transport): (&[u8], Transport),
        v: &tsig::Verified<'_>,
        out: &mut Vec<u8>,
    ) -> bool {
        let Ok(req) = wire::decode(packet) else {
            self.stats.dropped();
            return false;
        };
        let room = tsig::record_len(v);
        self.general(snap, &req, (transport, 0, room), out);
        tsig::Signer::new(v, unix_now()).sign(out);
        true
    }

    /// The general path: `req` answered from `snap` with `rotation`,
    /// encoded into `out` within the transport's limit less `reserve`
    /// octets (a TSIG record's room), and counted.
    fn general(
        &self,
        snap: &Snapshot,
        req: &Request<'_>,
        (transport, rotation, reserve): (Transport, usize, usize),
        out: &mut Vec<u8>,
    ) -> (Answered, wire::Fit) {
        let limit = transport
            .stream_limit()
            .unwrap_or_else(|| req.udp_limit(snap.settings.max_udp_payload))
            .saturating_sub(reserve);
        let answered = respond(snap, req, (transport, limit), rotation);
        let fit = wire::encode(req, &answered.answer, limit, out);
        self.stats.query(Some(req.qtype), answered.answer.rcode);
        self.stats.answered(fit, answered.note, transport);
        (answered, fit)
    }

    /// The zone transfer `packet` asks for over a stream from `peer`, if
    /// it asks for one `allow-transfer` lets it make and, for a whole
    /// zone, fewer than [`MAX_TRANSFERS`] are under way (counted); `None`
    /// sends it down [`Handler::handle`], which answers a refused one
    /// REFUSED.
    pub fn transfer(&self, packet: &[u8], peer: IpAddr) -> Option<Outgoing> {
        // Cheap for every other query: QTYPE sits right after the name.
        if !wire::asks_for(packet, wire::rtype::AXFR) && !wire::asks_for(packet, wire::rtype::IXFR)
        {
            return None;
        }
        let req = wire::decode(packet).ok()?;
        let snap = self.snapshot.load_full();
        let now = unix_now();
        let (kind, verified) = match transfer::check(&snap, (&req, packet), peer, now) {
            Check::NotOne => return None,
            Check::Refused(kind) => {
                self.stats.transfer(kind, XfrOutcome::Refused, 0);
                return None;
            }
            Check::NotAuth(kind, why) => {
                self.stats.transfer(kind, XfrOutcome::NotAuth, 0);
                let keys = &snap.settings.transfer_keys;
                let answer = tsig::notauth(packet, keys, why, now)?;
                let (tx, rx) = mpsc::channel(1);
                tx.try_send(answer).ok()?;
                return Some(self.outgoing(rx, &snap, None));
            }
            Check::Allowed(kind, verified) => (kind, verified),
        };
        let plan = transfer::plan(&snap, &self.journal.versions(), kind, packet);
        let slot = match plan {
            transfer::Plan::Full => match self.transfers.clone().try_acquire_owned() {
                Ok(slot) => Some(slot),
                Err(_) => {
                    self.stats.transfer(kind, XfrOutcome::Busy, 0);
                    return None;
                }
            },
            _ => None,
        };
        let signer = verified.map(|v| tsig::Signer::new(&v, now));
        let (tx, rx) = mpsc::channel(AHEAD);
        let job = Job {
            snap: snap.clone(),
            packet: packet.to_vec(),
            kind,
            plan,
            signer,
            peer: peer.to_canonical(),
            stats: self.stats.clone(),
        };
        tokio::task::spawn_blocking(move || job.run(&tx));
        Some(self.outgoing(rx, &snap, slot))
    }

    fn outgoing(
        &self,
        messages: mpsc::Receiver<Vec<u8>>,
        snap: &Snapshot,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Outgoing {
        Outgoing {
            messages,
            rate: snap.settings.transfer_rate,
            pacer: self.pacer.clone(),
            _slot: slot,
        }
    }
}

/// A transfer's production, on a thread of its own: the CPU it takes is
/// not the query path's.
struct Job {
    snap: Arc<Snapshot>,
    packet: Vec<u8>,
    kind: XfrKind,
    plan: transfer::Plan,
    signer: Option<tsig::Signer>,
    peer: IpAddr,
    stats: Arc<DnsStats>,
}

impl Job {
    /// Produces every message into `tx`, signed where the request was,
    /// and counts the transfer once it is written or the client is gone.
    fn run(mut self, tx: &mpsc::Sender<Vec<u8>>) {
        let Ok(req) = wire::decode(&self.packet) else {
            return;
        };
        let mut bytes = 0;
        let mut send = |mut m: Vec<u8>| {
            if let Some(s) = &mut self.signer {
                s.sign(&mut m);
            }
            bytes += m.len();
            tx.blocking_send(m).is_ok()
        };
        let done = transfer::produce(&self.snap, (&req, &self.plan), Instant::now(), &mut send);
        self.stats.transfer(self.kind, self.plan.outcome(), bytes);
        if done.is_ok() {
            self.stats.fetched(self.peer, self.plan.serial(&self.snap));
        }
    }
}

/// The wall clock in Unix seconds, for TSIG.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The answer to `req` over `transport`, whose responses are at most
/// `limit` octets (the cache's tests use it as the general path).
pub(crate) fn respond(
    snap: &Snapshot,
    req: &Request<'_>,
    (transport, limit): (Transport, usize),
    rotation: usize,
) -> Answered {
    if req.header.opcode != OPCODE_QUERY {
        return Answered::plain(Answer::empty(Rcode::NotImp, false));
    }
    if req.edns.is_some_and(|e| e.version > 0) {
        return Answered::plain(Answer::empty(Rcode::BadVers, false));
    }
    // Over UDP an answer too large is truncated whole, so that the client
    // retries over TCP (docs/architecture.md, decision 9); over TCP and TLS it carries
    // as many records as fit.
    let room = match transport {
        Transport::Udp => usize::MAX,
        Transport::Tcp | Transport::Tls => req.answer_room(limit),
    };
    let q = Question {
        name: &req.name,
        qtype: req.qtype,
        qclass: req.qclass,
        room: Room::Octets(room),
    };
    answer::answer(snap, q, rotation, Instant::now())
}
