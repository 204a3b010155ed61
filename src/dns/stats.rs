//! The DNS layer's counters: queries by type and response code, what
//! encoding had to do to an answer, the response cache, the stream
//! listeners' limits and connections, and DNS over TLS.
//!
//! The query path only touches fixed arrays of atomics (no label lookup, no
//! lock, no allocation). This module decides what the DNS layer counts and
//! hands plain numbers out through [`DnsStats::read`]; it must not name,
//! describe or encode metrics (the top-level `metrics` module does), and so
//! imports nothing above `dns`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::answer::Note;
use super::transport::Transport;
use super::wire::{Fit, Rcode, rtype};

/// The query types counted by name; any other is `other`, and a packet with
/// no readable question is `none`.
const QTYPES: [(u16, &str); 11] = [
    (rtype::A, "A"),
    (rtype::AAAA, "AAAA"),
    (rtype::SRV, "SRV"),
    (rtype::PTR, "PTR"),
    (rtype::SOA, "SOA"),
    (rtype::NS, "NS"),
    (rtype::TXT, "TXT"),
    (rtype::ANY, "ANY"),
    (rtype::AXFR, "AXFR"),
    (rtype::IXFR, "IXFR"),
    (rtype::HTTPS, "HTTPS"),
];
/// Column for any other type, and one for packets with no readable type.
const OTHER: usize = QTYPES.len();
const NONE: usize = QTYPES.len() + 1;
const RCODES: [Rcode; 8] = [
    Rcode::NoError,
    Rcode::NxDomain,
    Rcode::ServFail,
    Rcode::Refused,
    Rcode::FormErr,
    Rcode::NotImp,
    Rcode::BadVers,
    Rcode::NotAuth,
];

/// Every counter of the DNS layer.
#[derive(Debug, Default)]
pub struct DnsStats {
    queries: [[AtomicU64; RCODES.len()]; QTYPES.len() + 2],
    truncated: AtomicU64,
    additional_trimmed: AtomicU64,
    capped: [AtomicU64; Transport::ALL.len()],
    dropped: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    fail_open: AtomicU64,
    nearest_fail_open: AtomicU64,
    stale: AtomicU64,
    limit_hits: [AtomicU64; Limit::ALL.len()],
    connections_open: [AtomicU64; Stream::ALL.len()],
    tls_handshake_failures: AtomicU64,
    tls_reloads: AtomicU64,
    tls_reload_errors: AtomicU64,
    transfers: [[AtomicU64; XfrOutcome::ALL.len()]; XfrKind::ALL.len()],
    transfer_bytes: AtomicU64,
    /// The IXFR journal's versions and octets.
    journal: [AtomicU64; 2],
    notifies: [AtomicU64; 2],
    /// The serial each secondary last fetched (transfers only: never
    /// touched by a query).
    secondaries: Mutex<BTreeMap<IpAddr, u32>>,
}

/// Secondaries whose last serial is kept; one more is not recorded (the
/// allow-list may name a large range).
const MAX_SECONDARIES: usize = 1000;

/// A zone transfer's kind: its `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XfrKind {
    /// AXFR (RFC 5936).
    Axfr,
    /// IXFR (RFC 1995).
    Ixfr,
}

impl XfrKind {
    /// Every kind, in label order.
    pub const ALL: [XfrKind; 2] = [XfrKind::Axfr, XfrKind::Ixfr];

    /// The `kind` label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Axfr => "axfr",
            Self::Ixfr => "ixfr",
        }
    }
}

/// How a zone transfer ended: its `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XfrOutcome {
    /// The whole zone was sent.
    Full,
    /// The client's serial was current: the SOA alone was sent (IXFR).
    UpToDate,
    /// The journal's differences since the client's serial were sent
    /// (IXFR).
    Incremental,
    /// The client may not transfer (`allow-transfer`): REFUSED.
    Refused,
    /// As many transfers as may run at once were running: REFUSED.
    Busy,
    /// Its TSIG signature failed (bad key, MAC or time): NOTAUTH.
    NotAuth,
}

impl XfrOutcome {
    /// Every outcome, in label order.
    pub const ALL: [XfrOutcome; 6] = [
        XfrOutcome::Full,
        XfrOutcome::UpToDate,
        XfrOutcome::Incremental,
        XfrOutcome::Refused,
        XfrOutcome::Busy,
        XfrOutcome::NotAuth,
    ];

    /// The `outcome` label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::UpToDate => "up_to_date",
            Self::Incremental => "incremental",
            Self::Refused => "refused",
            Self::Busy => "busy",
            Self::NotAuth => "notauth",
        }
    }
}

/// A resource limit of the stream listeners (TCP and DNS over TLS); each has
/// its own `limit` label on `clusterset_dns_limit_hits_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// A connection refused because `max-connections` are open.
    Connections,
    /// A connection closed after `idle-timeout` without a query.
    IdleTimeout,
    /// A connection closed because a started message (or TLS handshake) did
    /// not arrive whole within `message-timeout`.
    MessageTimeout,
    /// Reading paused because `max-in-flight` answers awaited the client.
    InFlight,
    /// A connection closed because a query was not answered and written
    /// within `query-timeout` (the client did not read its answers).
    QueryTimeout,
}

impl Limit {
    /// Every limit, in label order.
    pub const ALL: [Limit; 5] = [
        Limit::Connections,
        Limit::IdleTimeout,
        Limit::MessageTimeout,
        Limit::InFlight,
        Limit::QueryTimeout,
    ];

    /// The `limit` label value.
    pub fn label(self) -> &'static str {
        match self {
            Limit::Connections => "connections",
            Limit::IdleTimeout => "idle_timeout",
            Limit::MessageTimeout => "message_timeout",
            Limit::InFlight => "in_flight",
            Limit::QueryTimeout => "query_timeout",
        }
    }
}

/// A stream transport, for the open-connections gauge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// DNS over TCP.
    Tcp,
    /// DNS over TLS.
    Tls,
}

impl Stream {
    /// Every stream transport, in label order.
    pub const ALL: [Stream; 2] = [Stream::Tcp, Stream::Tls];

    /// The `transport` label value.
    pub fn label(self) -> &'static str {
        match self {
            Stream::Tcp => "tcp",
            Stream::Tls => "tls",
        }
    }
}

/// One reading of every counter, as plain numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsCounts {
    /// Answered queries by query type and response code label, only the
    /// pairs counted at least once.
    pub queries: Vec<(&'static str, &'static str, u64)>,
    /// UDP responses sent with TC=1.
    pub truncated: u64,
    /// Responses whose Additional section was trimmed to fit.
    pub additional_trimmed: u64,
    /// Answers that carried fewer records of an RRset than it has.
    pub capped: [(Transport, u64); Transport::ALL.len()],
    /// Packets that got no response.
    pub dropped: u64,
    /// Plain queries answered from the response cache.
    pub cache_hits: u64,
    /// Plain queries the response cache could not answer.
    pub cache_misses: u64,
    /// Federated answers that served the last-known union.
    pub fail_open: u64,
    /// Nearest answers that served the federated union: no tier had
    /// `min-ready` ready endpoints.
    pub nearest_fail_open: u64,
    /// Answers served from a cluster whose watch is broken.
    pub stale: u64,
    /// Times each limit was hit.
    pub limit_hits: [(Limit, u64); Limit::ALL.len()],
    /// Connections open now on each stream transport.
    pub connections_open: [(Stream, u64); Stream::ALL.len()],
    /// TLS handshakes that failed or timed out.
    pub tls_handshake_failures: u64,
    /// Zone transfers by kind and outcome.
    pub transfers: [(XfrKind, [(XfrOutcome, u64); XfrOutcome::ALL.len()]); XfrKind::ALL.len()],
    /// Octets of zone transfers sent.
    pub transfer_bytes: u64,
    /// Versions the IXFR journal holds.
    pub journal_versions: u64,
    /// Octets of the journal's records.
    pub journal_bytes: u64,
    /// NOTIFYs a target acknowledged.
    pub notifies_acknowledged: u64,
    /// NOTIFYs given up after every try.
    pub notifies_failed: u64,
    /// Each secondary's address and the serial it last fetched.
    pub secondaries: Vec<(IpAddr, u32)>,
    /// Certificate reloads applied.
    pub tls_reloads: u64,
    /// Certificate reloads refused.
    pub tls_reload_errors: u64,
}

fn qtype_index(qtype: Option<u16>) -> usize {
    match qtype {
        None => NONE,
        Some(t) => QTYPES
            .iter()
            .position(|(code, _)| *code == t)
            .unwrap_or(OTHER),
    }
}

fn qtype_label(index: usize) -> &'static str {
    match QTYPES.get(index) {
        Some((_, name)) => name,
        None if index == OTHER => "other",
        None => "none",
    }
}

fn rcode_index(rcode: Rcode) -> usize {
    RCODES.iter().position(|r| *r == rcode).unwrap_or(0)
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

impl DnsStats {
    /// Counts an answered query.
    pub fn query(&self, qtype: Option<u16>, rcode: Rcode) {
        self.queries[qtype_index(qtype)][rcode_index(rcode)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts what encoding and answering had to do for an answer sent
    /// over `transport`.
    pub fn answered(&self, fit: Fit, note: Note, transport: Transport) {
        if fit.truncated {
            self.truncated.fetch_add(1, Ordering::Relaxed);
        } else if note.capped {
            // A truncated answer carried no records at all: counted above.
            self.capped[transport as usize].fetch_add(1, Ordering::Relaxed);
        }
        if fit.additional_dropped > 0 {
            self.additional_trimmed.fetch_add(1, Ordering::Relaxed);
        }
        if note.fail_open {
            self.fail_open.fetch_add(1, Ordering::Relaxed);
        }
        if note.nearest_fail_open {
            self.nearest_fail_open.fetch_add(1, Ordering::Relaxed);
        }
        if note.stale {
            self.stale.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a plain query answered from the response cache.
    pub fn cache_hit(&self) {
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a plain query the response cache could not answer.
    pub fn cache_miss(&self) {
        self.cache_misses.fetch_add(1, Ordering::Relaxed);
    }

    /// Queries answered so far, every type and rcode.
    pub fn answered_total(&self) -> u64 {
        self.queries.iter().flatten().map(load).sum()
    }

    /// Counts a packet that got no response.
    pub fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a limit being hit.
    pub fn limit_hit(&self, limit: Limit) {
        self.limit_hits[limit as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Times `limit` was hit so far.
    pub fn limit_hits(&self, limit: Limit) -> u64 {
        load(&self.limit_hits[limit as usize])
    }

    /// Counts a connection opened (`true`) or closed on `stream`.
    pub fn connection(&self, stream: Stream, open: bool) {
        let gauge = &self.connections_open[stream as usize];
        if open {
            gauge.fetch_add(1, Ordering::Relaxed);
        } else {
            gauge.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Counts a zone transfer of `kind` that ended `outcome`, `bytes`
    /// octets sent.
    pub fn transfer(&self, kind: XfrKind, outcome: XfrOutcome, bytes: usize) {
        self.transfers[kind as usize][outcome as usize].fetch_add(1, Ordering::Relaxed);
        self.transfer_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Records that `peer` fetched the zone at `serial` (a whole transfer,
    /// or the SOA alone when it was up to date).
    pub fn fetched(&self, peer: IpAddr, serial: u32) {
        let mut m = self
            .secondaries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if m.len() < MAX_SECONDARIES || m.contains_key(&peer) {
            m.insert(peer, serial);
        }
    }

    /// Records the IXFR journal's size: `versions` holding `bytes`.
    pub fn journal(&self, versions: usize, bytes: u64) {
        self.journal[0].store(versions as u64, Ordering::Relaxed);
        self.journal[1].store(bytes, Ordering::Relaxed);
    }

    /// Counts a NOTIFY a target acknowledged (`ok`) or never answered.
    pub fn notify(&self, ok: bool) {
        self.notifies[usize::from(ok)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a TLS handshake that failed or timed out.
    pub fn tls_handshake_failed(&self) {
        self.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a certificate reload that was applied (`ok`) or refused.
    pub fn tls_reload(&self, ok: bool) {
        let counter = if ok {
            &self.tls_reloads
        } else {
            &self.tls_reload_errors
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Every counter now. Each is read on its own (relaxed), as a scrape
    /// needs no consistency between counters.
    pub fn read(&self) -> DnsCounts {
        let mut queries = Vec::new();
        for (qi, row) in self.queries.iter().enumerate() {
            for (rcode, count) in RCODES.iter().zip(row) {
                let n = load(count);
                if n > 0 {
                    queries.push((qtype_label(qi), rcode.name(), n));
                }
            }
        }
        DnsCounts {
            queries,
            truncated: load(&self.truncated),
            additional_trimmed: load(&self.additional_trimmed),
            capped: Transport::ALL.map(|t| (t, load(&self.capped[t as usize]))),
            dropped: load(&self.dropped),
            cache_hits: load(&self.cache_hits),
            cache_misses: load(&self.cache_misses),
            fail_open: load(&self.fail_open),
            nearest_fail_open: load(&self.nearest_fail_open),
            stale: load(&self.stale),
            limit_hits: Limit::ALL.map(|l| (l, self.limit_hits(l))),
            connections_open: Stream::ALL.map(|s| (s, load(&self.connections_open[s as usize]))),
            tls_handshake_failures: load(&self.tls_handshake_failures),
            transfers: XfrKind::ALL.map(|k| {
                (
                    k,
                    XfrOutcome::ALL.map(|o| (o, load(&self.transfers[k as usize][o as usize]))),
                )
            }),
            transfer_bytes: load(&self.transfer_bytes),
            journal_versions: load(&self.journal[0]),
            journal_bytes: load(&self.journal[1]),
            notifies_acknowledged: load(&self.notifies[1]),
            notifies_failed: load(&self.notifies[0]),
            secondaries: self
                .secondaries
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|(ip, serial)| (*ip, *serial))
                .collect(),
            tls_reloads: load(&self.tls_reloads),
            tls_reload_errors: load(&self.tls_reload_errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_read_by_type_and_rcode_label() {
        let stats = DnsStats::default();
        stats.query(Some(rtype::A), Rcode::NoError);
        stats.query(Some(rtype::A), Rcode::NoError);
        stats.query(Some(999), Rcode::Refused);
        stats.query(None, Rcode::FormErr);
        let counts = stats.read();
        assert_eq!(
            counts.queries,
            vec![
                ("A", "NOERROR", 2),
                ("other", "REFUSED", 1),
                ("none", "FORMERR", 1)
            ]
        );
        assert_eq!(stats.answered_total(), 4);
    }

    #[test]
    fn connections_go_up_and_down_per_stream() {
        let stats = DnsStats::default();
        stats.connection(Stream::Tls, true);
        stats.connection(Stream::Tls, true);
        stats.connection(Stream::Tls, false);
        stats.limit_hit(Limit::InFlight);
        let counts = stats.read();
        assert_eq!(
            counts.connections_open,
            [(Stream::Tcp, 0), (Stream::Tls, 1)]
        );
        assert_eq!(
            counts.limit_hits[Limit::InFlight as usize],
            (Limit::InFlight, 1)
        );
    }
}
