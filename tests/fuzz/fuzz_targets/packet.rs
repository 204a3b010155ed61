//! The packet path: any bytes in, a response or a drop out, never a panic.
//!
//! Every input is one DNS message (without the TCP length prefix) handed to
//! `Handler::handle` over the demo clusterset (`zones/demo`, local cluster
//! `west`, reverse zones for its pod networks), for three servers (the
//! default EDNS cap of 1232, a cap of 4096, and the default cap with some
//! clusters unsynced, stale or unhealthy), over UDP and over TCP, with the
//! response cache off and on — on, the same input twice, so the second one
//! is answered from the stored response. For every response the harness
//! checks, with its own decoding of the request and an independent parser
//! (hickory-proto) for the response:
//!
//! - a message with QR set, or shorter than a header, gets no response, and
//!   every other message gets one;
//! - the response echoes the ID, the opcode, RD and CD and (when it has one)
//!   the question byte for byte, has QR set, and parses;
//! - it fits the size the request allows: over UDP 512 octets without EDNS,
//!   else the requestor's payload size (below 512 read as 512, RFC 6891
//!   §6.2.5) capped by the server's own limit; over TCP 65535;
//! - REFUSED, FORMERR, NOTIMP and BADVERS responses are no longer than the
//!   request (no amplification);
//! - OPT in the response only when the request had one (RFC 6891 §7), and
//!   always when it had a single valid one, unless the answer is FORMERR;
//! - a truncated response carries no records but the OPT, and only when the
//!   whole response (as TCP gets it) would not fit;
//! - over UDP the same answer as over TCP, unless truncated;
//! - the cached response says the same as the general path: same rcode,
//!   flags, section counts and the same answer and authority records (their
//!   order may differ: RRsets rotate).

#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex};

use arc_swap::ArcSwap;
use hickory_proto::op::Message;
use libfuzzer_sys::fuzz_target;

use clusterset_dns::config::{Config, ZoneArgs};
use clusterset_dns::dns::stats::DnsStats;
use clusterset_dns::dns::{Handler, Local, Transport};
use clusterset_dns::model::{Epoch, Event, Health, Model, Settings};
use clusterset_dns::source::file::{initial_events, load_dir};

/// The UDP limit of a message without EDNS (RFC 1035 §4.2.1).
const PLAIN_UDP: usize = 512;
/// Bytes of cache for the cached handlers.
const CACHE_BYTES: u64 = 1 << 20;

const RCODE_FORMERR: u16 = 1;
const RCODE_NOTIMP: u16 = 4;
const RCODE_REFUSED: u16 = 5;
const RCODE_BADVERS: u16 = 16;
const TYPE_OPT: u16 = 41;

/// One server: the same snapshot behind a handler without and one with the
/// response cache, each with its own worker state.
struct Server {
    max_udp_payload: u16,
    general: Handler,
    general_local: Local,
    cached: Handler,
    cached_local: Local,
}

/// The state of the demo's clusters a server answers from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Every cluster synced and healthy.
    Healthy,
    /// `north` not synced yet (SERVFAIL for names it could hold), `south`'s
    /// watch broken an hour ago (stale answers, out of federated names),
    /// `east`'s gateway probe failing (out of federated names).
    Degraded,
}

fn server(max_udp_payload: u16, state: State) -> Server {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut config = Config::resolve_zone(&ZoneArgs {
        zones: Some(root.join("zones/demo")),
        local_cluster: Some("west".into()),
        // Every pod network of the demo, so PTR queries find names.
        reverse_zones: vec!["10.in-addr.arpa".into(), "0.4.0.0.0.0.d.f.ip6.arpa".into()],
        ns_addrs: vec![
            "192.0.2.53".parse().unwrap(),
            "2001:db8::53".parse().unwrap(),
        ],
        ..ZoneArgs::default()
    })
    .expect("fuzz config");
    config.settings = Arc::new(Settings {
        max_udp_payload,
        ..(*config.settings).clone()
    });
    let load = load_dir(&root.join("zones/demo"), Some("west"), &Default::default())
        .expect("demo zones load");
    let now = std::time::Instant::now();
    let mut model = Model::new(
        config.settings.clone(),
        Epoch::new(now, std::time::SystemTime::now()),
    );
    let an_hour_ago = now.checked_sub(std::time::Duration::from_secs(3600));
    model.apply(
        load.clusters.iter().flat_map(|c| {
            let mut events = initial_events(c);
            if state == State::Degraded {
                // The last event marks the cluster synced.
                let health = match &*c.name {
                    // Never synced, and given up on: start-up is over.
                    "north" => Some(Health {
                        sync_given_up: true,
                        ..Health::default()
                    }),
                    "south" => Some(Health {
                        synced: true,
                        broken_since: an_hour_ago,
                        ..Health::default()
                    }),
                    "east" => Some(Health {
                        synced: true,
                        gateway_alive: Some(false),
                        ..Health::default()
                    }),
                    _ => return events,
                };
                events.pop();
                events.extend(health.map(|health| Event::Health {
                    cluster: c.name.clone(),
                    health,
                }));
            }
            events
        }),
        now,
    );
    model.clusters_known(now);
    let snapshot = Arc::new(ArcSwap::new(model.snapshot()));
    let handler = |cache| Handler::new(snapshot.clone(), Arc::new(DnsStats::default()), cache);
    Server {
        max_udp_payload,
        general: handler(0),
        general_local: Local::new(64),
        cached: handler(CACHE_BYTES),
        cached_local: Local::new(64),
    }
}

static SERVERS: LazyLock<Mutex<Vec<Server>>> = LazyLock::new(|| {
    Mutex::new(vec![
        server(1232, State::Healthy),
        server(4096, State::Healthy),
        server(1232, State::Degraded),
    ])
});

fuzz_target!(|packet: &[u8]| {
    let mut servers = SERVERS.lock().unwrap_or_else(|e| e.into_inner());
    let req = Request::read(packet);
    let mut out = Vec::new();
    for s in servers.iter_mut() {
        let mut by_transport = Vec::new();
        for transport in [Transport::Udp, Transport::Tcp] {
            let limit = req.limit(transport, s.max_udp_payload);
            let ctx = Check {
                packet,
                req: &req,
                transport,
                limit,
            };
            let general = s
                .general
                .handle(&mut s.general_local, packet, transport, &mut out)
                .then(|| out.clone());
            let general = ctx.response(general.as_deref(), "general path");
            for what in ["cache (first)", "cache (second)"] {
                let cached = s
                    .cached
                    .handle(&mut s.cached_local, packet, transport, &mut out)
                    .then_some(&out[..]);
                let cached = ctx.response(cached, what);
                same_answer(&general, &cached, what);
            }
            by_transport.push((limit, general));
        }
        if let [(limit, Some(udp)), (_, Some(tcp))] = &by_transport[..] {
            udp_against_tcp(udp, tcp, *limit);
        }
    }
});

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Skips a wire name at `at` (a compression pointer ends it); the offset
/// after it.
fn skip_name(b: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *b.get(at)?;
        match len >> 6 {
            0 if len == 0 => return Some(at + 1),
            0 => at += 1 + usize::from(len),
            3 => {
                b.get(at + 1)?;
                return Some(at + 2);
            }
            _ => return None,
        }
    }
}

/// What the harness reads from a request, by itself.
#[derive(Debug)]
struct Request {
    /// The message is a query that must get a response (a header, QR=0).
    answerable: bool,
    /// The first question's bytes (name, type, class), when it is there.
    question: Option<(usize, usize)>,
    /// OPT records seen in the additional section.
    opts: usize,
    /// The payload size and version of the last one.
    opt: Option<(u16, u8)>,
    /// Every record could be read.
    well_formed: bool,
}

impl Request {
    fn read(p: &[u8]) -> Self {
        let answerable = p.len() >= 12 && p[2] & 0x80 == 0;
        let mut req = Self {
            answerable,
            question: None,
            opts: 0,
            opt: None,
            well_formed: false,
        };
        if p.len() < 12 {
            return req;
        }
        let count = |i: usize| u16::from_be_bytes([p[4 + 2 * i], p[5 + 2 * i]]);
        let mut at = 12;
        for i in 0..count(0) {
            let Some(end) = skip_name(p, at).map(|e| e + 4).filter(|&e| e <= p.len()) else {
                return req;
            };
            if i == 0 {
                req.question = Some((at, end));
            }
            at = end;
        }
        let records = u32::from(count(1)) + u32::from(count(2));
        for i in 0..records + u32::from(count(3)) {
            let Some(after_name) = skip_name(p, at) else {
                return req;
            };
            let (Some(rtype), Some(rdlen)) = (be16(p, after_name), be16(p, after_name + 8)) else {
                return req;
            };
            let end = after_name + 10 + usize::from(rdlen);
            if end > p.len() {
                return req;
            }
            if i >= records && rtype == TYPE_OPT {
                req.opts += 1;
                let payload = be16(p, after_name + 2).unwrap_or(0);
                req.opt = Some((payload, p[after_name + 5]));
            }
            at = end;
        }
        req.well_formed = true;
        req
    }

    /// The largest response the request allows.
    fn limit(&self, transport: Transport, max_udp_payload: u16) -> usize {
        match (transport, self.opt) {
            (Transport::Tcp | Transport::Tls, _) => usize::from(u16::MAX),
            // RFC 6891 §6.2.5: a payload size below 512 is read as 512; the
            // responder sends no more than that nor than its own limit,
            // which is at least 512 too.
            (Transport::Udp, Some((payload, _))) if self.opts == 1 && self.well_formed => {
                let asked = usize::from(payload).max(PLAIN_UDP);
                asked.min(usize::from(max_udp_payload).max(PLAIN_UDP))
            }
            (Transport::Udp, _) => PLAIN_UDP,
        }
    }
}

/// A response as the checks read it.
#[derive(Debug, Default)]
struct Summary {
    /// Flags without the ID, and the four counts.
    header: [u8; 10],
    rcode: u16,
    truncated: bool,
    len: usize,
    answers: Vec<String>,
    authority: Vec<String>,
}

struct Check<'a> {
    packet: &'a [u8],
    req: &'a Request,
    transport: Transport,
    limit: usize,
}

impl Check<'_> {
    fn fail(&self, what: &str, why: String) -> ! {
        panic!(
            "{what}, {:?}: {why}\nrequest {:02x?}\nas read: {:?}",
            self.transport, self.packet, self.req
        );
    }

    /// Checks one response (`None`: dropped) and sums it up.
    fn response(&self, resp: Option<&[u8]>, what: &str) -> Option<Summary> {
        let p = self.packet;
        let Some(r) = resp else {
            if self.req.answerable {
                self.fail(what, "a query got no response".into());
            }
            return None;
        };
        let fail = |why: String| -> ! { self.fail(what, format!("{why}\nresponse {r:02x?}")) };
        if !self.req.answerable {
            fail("a response or a runt got a response".into());
        }
        if r.len() < 12 {
            fail("response shorter than a header".into());
        }
        if r[..2] != p[..2] {
            fail("ID not echoed".into());
        }
        if r[2] & 0x80 == 0 {
            fail("QR not set".into());
        }
        // Opcode (0x78) and RD (0x01) of the third octet, CD (0x10) of the
        // fourth.
        if (r[2] ^ p[2]) & 0x79 != 0 || (r[3] ^ p[3]) & 0x10 != 0 {
            fail("opcode, RD or CD not echoed".into());
        }
        if r.len() > self.limit {
            fail(format!(
                "{} octets, over the limit of {}",
                r.len(),
                self.limit
            ));
        }
        let msg = Message::from_vec(r)
            .unwrap_or_else(|e| fail(format!("the response does not parse: {e}")));
        let rcode = msg.metadata.response_code.into();
        if matches!(
            rcode,
            RCODE_FORMERR | RCODE_REFUSED | RCODE_NOTIMP | RCODE_BADVERS
        ) && r.len() > p.len()
        {
            fail(format!(
                "rcode {rcode}: {} octets for a {}-octet request",
                r.len(),
                p.len()
            ));
        }
        let qd = be16(r, 4).unwrap_or(0);
        if qd > 1 {
            fail("more than one question".into());
        }
        if qd == 1 {
            match self.req.question {
                Some((start, end)) if r.get(start..end) == Some(&p[start..end]) => {}
                _ => fail("the question is not the request's".into()),
            }
        }
        if msg.edns.is_some() && self.req.opts == 0 {
            fail("OPT in a response to a request without one".into());
        }
        if msg.edns.is_none()
            && self.req.opts == 1
            && self.req.well_formed
            && rcode != RCODE_FORMERR
        {
            fail("no OPT in a response to a request with one".into());
        }
        if let Some((_, version)) = self.req.opt
            && version > 0
            && self.req.opts == 1
            && self.req.well_formed
            && !matches!(rcode, RCODE_FORMERR | RCODE_BADVERS | RCODE_NOTIMP)
        {
            fail(format!(
                "EDNS version {version} answered with rcode {rcode}"
            ));
        }
        let truncated = r[2] & 0x02 != 0;
        if truncated
            && (!msg.answers.is_empty()
                || !msg.authorities.is_empty()
                || !msg.additionals.is_empty())
        {
            fail("TC set but records kept".into());
        }
        if truncated && self.transport != Transport::Udp {
            fail("TC over TCP: the demo's answers all fit 65535 octets".into());
        }
        let mut header = [0u8; 10];
        header.copy_from_slice(&r[2..12]);
        let text = |records: &[hickory_proto::rr::Record]| {
            let mut v: Vec<String> = records.iter().map(|r| r.to_string()).collect();
            v.sort();
            v
        };
        Some(Summary {
            header,
            rcode,
            truncated,
            len: r.len(),
            answers: text(&msg.answers),
            authority: text(&msg.authorities),
        })
    }
}

/// The cached handler's response against the general path's.
fn same_answer(general: &Option<Summary>, cached: &Option<Summary>, what: &str) {
    let (Some(g), Some(c)) = (general, cached) else {
        assert_eq!(
            general.is_some(),
            cached.is_some(),
            "{what}: one path dropped"
        );
        return;
    };
    // Flags, QDCOUNT, ANCOUNT, NSCOUNT (ARCOUNT may differ: the additional
    // RRsets that fit depend on the rotation).
    assert_eq!(g.header[..8], c.header[..8], "{what}: header differs");
    assert_eq!(g.rcode, c.rcode, "{what}: rcode differs");
    assert_eq!(g.answers, c.answers, "{what}: answer section differs");
    assert_eq!(
        g.authority, c.authority,
        "{what}: authority section differs"
    );
}

/// The UDP response against the TCP one (general path both): the same
/// answer unless truncated, and truncated only when the answer does not fit.
fn udp_against_tcp(udp: &Summary, tcp: &Summary, limit: usize) {
    if udp.truncated {
        assert!(
            tcp.len > limit,
            "TC over UDP, yet the whole TCP response ({} octets) fits the limit of {limit}",
            tcp.len
        );
        return;
    }
    assert_eq!(udp.rcode, tcp.rcode, "UDP and TCP rcodes differ");
    assert_eq!(udp.answers, tcp.answers, "UDP and TCP answers differ");
    assert_eq!(
        udp.authority, tcp.authority,
        "UDP and TCP authority differs"
    );
}
