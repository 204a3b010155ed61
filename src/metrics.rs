//! Counters and their Prometheus text rendering.
//!
//! The query path only touches fixed arrays of atomics (no label lookup, no
//! lock, no allocation); labelled counters that change rarely (per cluster,
//! per skipped kind) sit behind a mutex. Gauges about names come from the
//! snapshot at scrape time. This module must not decide what to count; its
//! callers do.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::dns::Transport;
use crate::dns::answer::Note;
use crate::dns::wire::{Fit, Rcode, rtype};
use crate::model::Snapshot;

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
const RCODES: [Rcode; 7] = [
    Rcode::NoError,
    Rcode::NxDomain,
    Rcode::ServFail,
    Rcode::Refused,
    Rcode::FormErr,
    Rcode::NotImp,
    Rcode::BadVers,
];

/// Every counter of the process.
#[derive(Debug, Default)]
pub struct Metrics {
    queries: [[AtomicU64; RCODES.len()]; QTYPES.len() + 2],
    truncated: AtomicU64,
    additional_trimmed: AtomicU64,
    capped: [AtomicU64; Transport::ALL.len()],
    dropped: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    config_reloads: AtomicU64,
    config_reload_errors: AtomicU64,
    fail_open: AtomicU64,
    stale: AtomicU64,
    reload_errors: Mutex<BTreeMap<String, u64>>,
    invalid_documents: AtomicU64,
    skipped_objects: Mutex<BTreeMap<String, u64>>,
    limit_hits: [AtomicU64; Limit::ALL.len()],
    connections_open: [AtomicU64; 2],
    tls_handshake_failures: AtomicU64,
    tls_reloads: AtomicU64,
    tls_reload_errors: AtomicU64,
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
    fn index(self) -> usize {
        match self {
            Stream::Tcp => 0,
            Stream::Tls => 1,
        }
    }
}

/// Writes the HELP and TYPE lines of a metric family.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
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

fn rcode_index(rcode: Rcode) -> usize {
    RCODES.iter().position(|r| *r == rcode).unwrap_or(0)
}

impl Metrics {
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

    /// Counts a configuration reload that was applied (`ok`) or refused.
    pub fn config_reload(&self, ok: bool) {
        let counter = if ok {
            &self.config_reloads
        } else {
            &self.config_reload_errors
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Queries answered so far, every type and rcode.
    pub fn answered_total(&self) -> u64 {
        self.queries
            .iter()
            .flatten()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
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
        self.limit_hits[limit as usize].load(Ordering::Relaxed)
    }

    /// Counts a connection opened (`true`) or closed on `stream`.
    pub fn connection(&self, stream: Stream, open: bool) {
        let gauge = &self.connections_open[stream.index()];
        if open {
            gauge.fetch_add(1, Ordering::Relaxed);
        } else {
            gauge.fetch_sub(1, Ordering::Relaxed);
        }
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

    /// Counts a reload of `cluster` that failed and kept the old data.
    pub fn reload_error(&self, cluster: &str) {
        if let Ok(mut m) = self.reload_errors.lock() {
            *m.entry(cluster.to_owned()).or_default() += 1;
        }
    }

    /// Counts documents that could not be used.
    pub fn invalid_documents(&self, n: u64) {
        self.invalid_documents.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts objects of kinds the source does not read.
    pub fn skipped(&self, kind: &str, n: u64) {
        if let Ok(mut m) = self.skipped_objects.lock() {
            *m.entry(kind.to_owned()).or_default() += n;
        }
    }

    /// Renders every metric in the Prometheus text format.
    pub fn render(&self, snap: &Snapshot, ready: bool) -> String {
        let mut out = String::with_capacity(4096);
        family(
            &mut out,
            "clusterset_dns_queries_total",
            "counter",
            "DNS queries answered, by query type and response code.",
        );
        for (qi, row) in self.queries.iter().enumerate() {
            let qtype = match qi {
                OTHER => "other",
                NONE => "none",
                _ => QTYPES[qi].1,
            };
            for (ri, count) in row.iter().enumerate() {
                let v = count.load(Ordering::Relaxed);
                if v > 0 {
                    let _ = writeln!(
                        out,
                        "clusterset_dns_queries_total{{qtype=\"{qtype}\",rcode=\"{}\"}} {v}",
                        RCODES[ri].name()
                    );
                }
            }
        }
        let counters: [(&str, &str, &AtomicU64); 13] = [
            (
                "clusterset_dns_tls_handshake_failures_total",
                "DNS-over-TLS handshakes that failed or did not finish within message-timeout.",
                &self.tls_handshake_failures,
            ),
            (
                "clusterset_dns_tls_cert_reloads_total",
                "DNS-over-TLS certificate reloads applied (the files changed).",
                &self.tls_reloads,
            ),
            (
                "clusterset_dns_tls_cert_reload_errors_total",
                "DNS-over-TLS certificate reloads refused (unreadable or mismatched files); the previous certificate stays.",
                &self.tls_reload_errors,
            ),
            (
                "clusterset_dns_config_reloads_total",
                "Configuration file reloads applied (SIGHUP or a change of the file).",
                &self.config_reloads,
            ),
            (
                "clusterset_dns_config_reload_errors_total",
                "Configuration file reloads refused because the new file is invalid; the running configuration stays.",
                &self.config_reload_errors,
            ),
            (
                "clusterset_dns_responses_truncated_total",
                "UDP responses sent with TC=1 because the answer did not fit.",
                &self.truncated,
            ),
            (
                "clusterset_dns_additional_trimmed_total",
                "Responses whose Additional section was trimmed to fit (no TC).",
                &self.additional_trimmed,
            ),
            (
                "clusterset_dns_packets_dropped_total",
                "Packets answered with nothing: shorter than a header, or responses.",
                &self.dropped,
            ),
            (
                "clusterset_dns_answer_cache_hits_total",
                "Plain queries answered from pre-encoded responses.",
                &self.cache_hits,
            ),
            (
                "clusterset_dns_answer_cache_misses_total",
                "Plain queries the response cache did not hold (answered by the general path).",
                &self.cache_misses,
            ),
            (
                "clusterset_dns_federated_fail_open_total",
                "Federated answers that served the last-known union because every member was unhealthy.",
                &self.fail_open,
            ),
            (
                "clusterset_dns_stale_answers_total",
                "Answers served from a cluster whose watch is broken.",
                &self.stale,
            ),
            (
                "clusterset_dns_source_invalid_documents_total",
                "Source documents that could not be used.",
                &self.invalid_documents,
            ),
        ];
        for (name, help, v) in counters {
            family(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name} {}", v.load(Ordering::Relaxed));
        }
        family(
            &mut out,
            "clusterset_dns_answers_capped_total",
            "counter",
            "Answers that carried fewer records of their RRset than it has (too large for one answer, or above max-answer-records); successive queries get the others.",
        );
        for t in Transport::ALL {
            let _ = writeln!(
                out,
                "clusterset_dns_answers_capped_total{{transport=\"{}\"}} {}",
                t.label(),
                self.capped[t as usize].load(Ordering::Relaxed)
            );
        }
        family(
            &mut out,
            "clusterset_dns_source_reload_errors_total",
            "counter",
            "Reloads of a cluster that failed and kept the previous data.",
        );
        if let Ok(m) = self.reload_errors.lock() {
            for (cluster, v) in m.iter() {
                let _ = writeln!(
                    out,
                    "clusterset_dns_source_reload_errors_total{{cluster=\"{cluster}\"}} {v}"
                );
            }
        }
        family(
            &mut out,
            "clusterset_dns_source_skipped_objects_total",
            "counter",
            "Source objects of kinds that are not read.",
        );
        if let Ok(m) = self.skipped_objects.lock() {
            for (kind, v) in m.iter() {
                let _ = writeln!(
                    out,
                    "clusterset_dns_source_skipped_objects_total{{kind=\"{kind}\"}} {v}"
                );
            }
        }
        family(
            &mut out,
            "clusterset_dns_limit_hits_total",
            "counter",
            "Times a TCP/TLS resource limit was hit (see README, Limits).",
        );
        for limit in Limit::ALL {
            let _ = writeln!(
                out,
                "clusterset_dns_limit_hits_total{{limit=\"{}\"}} {}",
                limit.label(),
                self.limit_hits(limit)
            );
        }
        family(
            &mut out,
            "clusterset_dns_connections_open",
            "gauge",
            "TCP and DNS-over-TLS connections open now.",
        );
        for (stream, name) in [(Stream::Tcp, "tcp"), (Stream::Tls, "tls")] {
            let _ = writeln!(
                out,
                "clusterset_dns_connections_open{{transport=\"{name}\"}} {}",
                self.connections_open[stream.index()].load(Ordering::Relaxed)
            );
        }
        let gauges = [
            (
                "clusterset_dns_names",
                "Names served (service names and pod names).",
                snap.stats.names,
            ),
            (
                "clusterset_dns_name_collisions",
                "Services not served because an older service owns the same name.",
                snap.stats.collisions,
            ),
            (
                "clusterset_dns_names_too_long",
                "Names not served because a label exceeds 63 octets or the name 253.",
                snap.stats.too_long,
            ),
            (
                "clusterset_dns_soa_serial",
                "SOA serial of the zone.",
                u64::from(snap.serial),
            ),
            (
                "clusterset_dns_ready",
                "1 once every cluster has synced once.",
                u64::from(ready),
            ),
        ];
        for (name, help, v) in gauges {
            family(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {v}");
        }
        family(
            &mut out,
            "clusterset_dns_cluster_synced",
            "gauge",
            "1 when the cluster has synced at least once.",
        );
        for c in snap.clusters.iter().flatten() {
            let _ = writeln!(
                out,
                "clusterset_dns_cluster_synced{{cluster=\"{}\"}} {}",
                c.name,
                u8::from(c.synced)
            );
        }
        out
    }
}
