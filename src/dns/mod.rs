//! DNS: from a packet to a response.
//!
//! [`Handler::handle`] is the whole request path: decode, answer from the
//! current snapshot, encode within the transport's size limit, count. It is
//! synchronous and shared by the UDP and TCP servers (`server`). Name
//! grammar is in `name`, answers in `answer`, bytes in `wire`, zone-file text
//! in `zonefile`.

pub mod answer;
pub mod name;
pub mod server;
pub mod wire;
pub mod zonefile;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;

use crate::metrics::Metrics;
use crate::model::Snapshot;
use answer::Question;
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
    rotation: AtomicUsize,
}

impl Handler {
    /// A handler reading `snapshot` and counting into `metrics`.
    pub fn new(snapshot: Arc<ArcSwap<Snapshot>>, metrics: Arc<Metrics>) -> Self {
        Self {
            snapshot,
            metrics,
            rotation: AtomicUsize::new(0),
        }
    }

    /// Handles one packet. Writes the response into `out` and returns true,
    /// or returns false when the packet gets no response (not a query).
    pub fn handle(&self, packet: &[u8], transport: Transport, out: &mut Vec<u8>) -> bool {
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
        let snap = self.snapshot.load();
        let (answer, note) = if req.header.opcode != OPCODE_QUERY {
            (Answer::empty(Rcode::NotImp, false), Default::default())
        } else if req.edns.is_some_and(|e| e.version > 0) {
            (Answer::empty(Rcode::BadVers, false), Default::default())
        } else {
            let rotation = self.rotation.fetch_add(1, Ordering::Relaxed);
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
        let fit = wire::encode(&req, &answer, limit, out);
        self.metrics.query(Some(req.qtype), answer.rcode);
        self.metrics.answered(fit, note);
        true
    }
}
