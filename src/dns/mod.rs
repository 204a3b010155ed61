//! DNS: from a packet to a response.
//!
//! [`Handler::handle`] is the whole request path: a plain query answered
//! from a stored response (`cache`), else decode, answer from the current
//! snapshot, encode within the transport's size limit (and store); count.
//! It is synchronous and shared by the UDP workers (`udp`) and the TCP
//! server (`server`). Name grammar is in `name`, answers in `answer`, bytes
//! in `wire`, zone-file text in `zonefile`.

pub mod answer;
pub mod cache;
pub mod name;
pub mod server;
pub mod tls;
pub mod udp;
pub mod wire;
pub mod zonefile;

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;

use crate::metrics::Metrics;
use crate::model::Snapshot;
use answer::{Answered, Note, Question};
pub use cache::Local;
use cache::{AnswerCache, Echo, Lookup};
use wire::{Answer, DecodeError, OPCODE_QUERY, Rcode};

/// The transport a query came over; it sets the response size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP: 512 without EDNS, else the EDNS size capped by the server.
    Udp,
    /// TCP: 65535.
    Tcp,
}

/// Answers packets from the latest published snapshot.
#[derive(Debug)]
pub struct Handler {
    snapshot: Arc<ArcSwap<Snapshot>>,
    metrics: Arc<Metrics>,
    cache: Option<AnswerCache>,
}

impl Handler {
    /// A handler reading `snapshot` and counting into `metrics`, answering
    /// plain queries from a response cache of about `cache_bytes` (0: every
    /// query takes the general path).
    pub fn new(snapshot: Arc<ArcSwap<Snapshot>>, metrics: Arc<Metrics>, cache_bytes: u64) -> Self {
        Self {
            snapshot,
            metrics,
            cache: (cache_bytes > 0).then(|| AnswerCache::new(cache_bytes)),
        }
    }

    /// The counters this handler writes to.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
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
        let mut rotation = local.next_rotation();
        let plain = match &self.cache {
            Some(cache) => {
                cache::plain(packet, transport, snap.settings.max_udp_payload).map(|q| (cache, q))
            }
            None => None,
        };
        if let Some((cache, q)) = &plain {
            match cache.lookup(local, q, Echo::of(packet), &snap, rotation, out) {
                Lookup::Hit(rcode, fit) => {
                    self.metrics.cache_hit();
                    self.metrics.query(Some(q.qtype), rcode);
                    self.metrics.answered(fit, Note::default());
                    return true;
                }
                Lookup::Miss(r) => {
                    self.metrics.cache_miss();
                    rotation = r;
                }
            }
        }
        let req = match wire::decode(packet) {
            Ok(req) => req,
            Err(DecodeError::Drop(_)) => {
                self.metrics.dropped();
                return false;
            }
            Err(DecodeError::FormErr { header, edns, .. }) => {
                wire::encode_error(&header, edns, Rcode::FormErr, out);
                self.metrics.query(None, Rcode::FormErr);
                return true;
            }
        };
        let answered = if req.header.opcode != OPCODE_QUERY {
            Answered::plain(Answer::empty(Rcode::NotImp, false))
        } else if req.edns.is_some_and(|e| e.version > 0) {
            Answered::plain(Answer::empty(Rcode::BadVers, false))
        } else {
            let q = Question {
                name: &req.name,
                qtype: req.qtype,
                qclass: req.qclass,
            };
            answer::answer(&snap, q, rotation, Instant::now())
        };
        let limit = match transport {
            Transport::Udp => req.udp_limit(snap.settings.max_udp_payload),
            Transport::Tcp => usize::from(u16::MAX),
        };
        let fit = wire::encode(&req, &answered.answer, limit, out);
        self.metrics.query(Some(req.qtype), answered.answer.rcode);
        self.metrics.answered(fit, answered.note);
        if let Some((cache, q)) = &plain {
            cache.store(local, q, &snap, rotation, &answered, (out, fit));
        }
        true
    }
}
