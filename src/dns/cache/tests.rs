//! The hot path must give the general path's bytes (with the client's ID,
//! flags and 0x20 case) and must stop giving a name's stored answer as soon
//! as that name's records change, and only then.

use std::time::Instant;

use super::*;
use crate::dns::wire;
use crate::dns::wire::tests::ede_in;
use crate::model::objects::{ExportMode, Protocol};
use crate::model::testing::{
    big_events, c, epoch, fixture_events, port, service, settings, slice, slice_event, svc_event,
    t0,
};
use crate::model::{Event, Health, Model};

/// A query as a client would send it.
#[derive(Clone, Copy)]
struct Q {
    name: &'static str,
    qtype: u16,
    id: u16,
    rd: bool,
    cd: bool,
    /// EDNS payload and DO bit.
    edns: Option<(u16, bool)>,
}

impl Q {
    fn new(name: &'static str, qtype: u16) -> Self {
        Self {
            name,
            qtype,
            id: 0x1234,
            rd: true,
            cd: false,
            edns: Some((1232, false)),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = self.id.to_be_bytes().to_vec();
        b.push(if self.rd { 0x01 } else { 0 });
        b.push(if self.cd { 0x10 } else { 0 });
        b.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(self.edns.is_some())]);
        for label in self.name.trim_end_matches('.').split('.') {
            b.push(label.len() as u8);
            b.extend_from_slice(label.as_bytes());
        }
        b.push(0);
        b.extend_from_slice(&self.qtype.to_be_bytes());
        b.extend_from_slice(&[0, 1]);
        if let Some((payload, dnssec_ok)) = self.edns {
            b.extend_from_slice(&[0, 0, 41]);
            b.extend_from_slice(&payload.to_be_bytes());
            b.extend_from_slice(&[0, 0, if dnssec_ok { 0x80 } else { 0 }, 0, 0, 0]);
        }
        b
    }
}

/// The general path's response to `packet` with `rotation`.
fn general(
    snap: &Snapshot,
    packet: &[u8],
    transport: Transport,
    rotation: usize,
) -> (Vec<u8>, Answered, Fit) {
    let req = wire::decode(packet).expect("a query");
    let limit = transport
        .stream_limit()
        .unwrap_or_else(|| req.udp_limit(snap.settings.max_udp_payload));
    let answered = crate::dns::handler::respond(snap, &req, (transport, limit), rotation);
    let mut out = Vec::new();
    let fit = wire::encode(&req, &answered.answer, limit, &mut out);
    (out, answered, fit)
}

/// Asks the cache as the handler does: on a miss, answers with the general
/// path and stores. Returns the response and whether it was a hit.
fn ask(
    cache: &AnswerCache,
    local: &mut Local,
    snap: &Snapshot,
    q: Q,
    rotation: usize,
) -> (Vec<u8>, bool) {
    let (bytes, hit) = ask_over(cache, local, snap, (q, Transport::Udp), rotation);
    (bytes, hit.is_some())
}

/// [`ask`] over `transport`; a hit comes with the note it counts.
fn ask_over(
    cache: &AnswerCache,
    local: &mut Local,
    snap: &Snapshot,
    (q, transport): (Q, Transport),
    rotation: usize,
) -> (Vec<u8>, Option<Note>) {
    let packet = q.bytes();
    let plain = plain(&packet, transport, snap.settings.max_udp_payload).expect("plain");
    let mut out = Vec::new();
    match cache.lookup(local, &plain, Echo::of(&packet), snap, rotation, &mut out) {
        Lookup::Hit(_, _, note) => (out, Some(note)),
        Lookup::Miss(r) => {
            let (bytes, answered, fit) = general(snap, &packet, transport, r);
            cache.store(local, &plain, snap, r, &answered, (&bytes, fit));
            (bytes, None)
        }
    }
}

/// Worker states to run a test with: without a front table (every hit from
/// the shared cache) and with one.
fn locals() -> [Local; 2] {
    [Local::new(0), Local::new(64)]
}

fn model() -> Model {
    let mut model = Model::new(Arc::new(settings()), epoch());
    model.clusters_known(t0());
    model.apply(fixture_events(), t0());
    model
}

#[test]
fn plain_queries_and_the_rest() {
    let q = Q::new("web-east.prod.svc.clusterset.local", 1);
    let edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = q.bytes();
        f(&mut b);
        b
    };
    let with_cookie = {
        let mut b = q.bytes();
        let n = b.len();
        b[n - 2..].copy_from_slice(&[0, 12]);
        b.extend_from_slice(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
        b
    };
    // (case, packet, transport, Some((limit, edns flags)) when plain)
    type Case = (&'static str, Vec<u8>, Transport, Option<(u16, u8)>);
    let cases: Vec<Case> = vec![
        ("EDNS 1232", q.bytes(), Transport::Udp, Some((1232, 1))),
        (
            "no EDNS: 512",
            Q { edns: None, ..q }.bytes(),
            Transport::Udp,
            Some((512, 0)),
        ),
        (
            "EDNS 4096 is capped",
            Q {
                edns: Some((4096, false)),
                ..q
            }
            .bytes(),
            Transport::Udp,
            Some((1232, 1)),
        ),
        (
            "EDNS 100 is raised to 512",
            Q {
                edns: Some((100, false)),
                ..q
            }
            .bytes(),
            Transport::Udp,
            Some((512, 1)),
        ),
        (
            "DO bit",
            Q {
                edns: Some((1232, true)),
                ..q
            }
            .bytes(),
            Transport::Udp,
            Some((1232, 3)),
        ),
        ("TCP", q.bytes(), Transport::Tcp, Some((65535, 1))),
        ("an EDNS option", with_cookie, Transport::Udp, None),
        (
            "EDNS version 1",
            edit(&|b| {
                let n = b.len();
                b[n - 5] = 1;
            }),
            Transport::Udp,
            None,
        ),
        (
            "opcode NOTIFY",
            edit(&|b| b[2] |= 4 << 3),
            Transport::Udp,
            None,
        ),
        ("a response", edit(&|b| b[2] |= 0x80), Transport::Udp, None),
        (
            "class CH",
            edit(&|b| {
                let n = b.len();
                b[n - 12] = 3;
            }),
            Transport::Udp,
            None,
        ),
        ("two questions", edit(&|b| b[5] = 2), Transport::Udp, None),
        (
            "an answer record",
            edit(&|b| b[7] = 1),
            Transport::Udp,
            None,
        ),
        (
            "a trailing octet",
            edit(&|b| b.push(0)),
            Transport::Udp,
            None,
        ),
        (
            "cut short",
            edit(&|b| {
                b.truncate(20);
            }),
            Transport::Udp,
            None,
        ),
        (
            "a compression pointer",
            edit(&|b| b[12] = 0xC0),
            Transport::Udp,
            None,
        ),
        (
            "AXFR",
            Q::new("clusterset.local", rtype::AXFR).bytes(),
            Transport::Tcp,
            None,
        ),
        ("shorter than a header", vec![0; 11], Transport::Udp, None),
    ];
    for (case, packet, transport, want) in cases {
        let got = plain(&packet, transport, 1232).map(|p| {
            let k = p.key();
            (u16::from_be_bytes([k[0], k[1]]), k[2])
        });
        assert_eq!(got, want, "{case}");
    }
    // The key ignores case; the question keeps it.
    let upper = Q::new("WEB-East.prod.svc.clusterset.local", 1).bytes();
    let lower = Q::new("web-east.prod.svc.clusterset.local", 1).bytes();
    let (u, l) = (
        plain(&upper, Transport::Udp, 1232).expect("plain"),
        plain(&lower, Transport::Udp, 1232).expect("plain"),
    );
    assert_eq!(u.key(), l.key());
    assert_ne!(u.question, l.question);
}

#[test]
fn hits_are_the_general_paths_bytes() {
    let snap = model().snapshot();
    let names: &[(&str, u16)] = &[
        ("clusterset.local", rtype::SOA),
        ("clusterset.local", rtype::NS),
        ("dns-version.clusterset.local", rtype::TXT),
        ("prod.svc.clusterset.local", rtype::A),
        ("nope.svc.clusterset.local", rtype::A),
        ("web-east.prod.svc.clusterset.local", rtype::A),
        ("web-east.prod.svc.clusterset.local", rtype::AAAA),
        ("_http._tcp.web-east.prod.svc.clusterset.local", rtype::SRV),
        ("db-east.prod.svc.clusterset.local", rtype::A),
        ("db-east.prod.svc.clusterset.local", rtype::SRV),
        ("db-0.db-east.prod.svc.clusterset.local", rtype::A),
        ("db-federated.prod.svc.clusterset.local", rtype::SRV),
        ("db-1-east.db-federated.prod.svc.clusterset.local", rtype::A),
        ("bb-federated.prod.svc.clusterset.local", rtype::A),
        ("zzz-east.prod.svc.clusterset.local", rtype::A),
        ("pod.clusterset.local", rtype::A),
    ];
    for (&(name, qtype), mut local) in names.iter().flat_map(|n| locals().map(|l| (n, l))) {
        let local = &mut local;
        let cache = AnswerCache::new(1 << 20);
        // Stored from one client's query...
        let first = Q {
            id: 1,
            ..Q::new(name, qtype)
        };
        // (at a rotation other than 0, so stored rotations are relative)
        ask(&cache, local, &snap, first, 5);
        // ...and served to others: another ID, case, RD and CD, over every
        // rotation.
        let mixed: &'static str = Box::leak(
            name.char_indices()
                .map(|(i, ch)| {
                    if i % 2 == 0 {
                        ch.to_ascii_uppercase()
                    } else {
                        ch
                    }
                })
                .collect::<String>()
                .into_boxed_str(),
        );
        let other = Q {
            name: mixed,
            id: 0xBEEF,
            rd: false,
            cd: true,
            ..Q::new(name, qtype)
        };
        let mut hits = 0;
        for rotation in 0..8 {
            let (got, _) = ask(&cache, local, &snap, other, rotation);
            let (want, ..) = general(&snap, &other.bytes(), Transport::Udp, rotation);
            assert_eq!(got, want, "{name} type {qtype} rotation {rotation}");
            // A rotation asked for again is always a hit.
            let (again, hit) = ask(&cache, local, &snap, other, rotation);
            assert!(hit, "{name} type {qtype} rotation {rotation}: stored");
            assert_eq!(again, want, "{name} type {qtype} rotation {rotation}");
            hits += 1;
        }
        assert_eq!(hits, 8);
    }
}

#[test]
fn a_change_ends_only_the_answers_it_changes() {
    for mut local in locals() {
        change_ends_only_what_it_changes(&mut local);
    }
}

/// Which of `asked` are hits in `snap`.
fn hits(cache: &AnswerCache, local: &mut Local, snap: &Snapshot, asked: &[Q]) -> Vec<bool> {
    asked
        .iter()
        .map(|q| {
            let packet = q.bytes();
            let p = plain(&packet, Transport::Udp, 1232).expect("plain");
            let mut out = Vec::new();
            matches!(
                cache.lookup(local, &p, Echo::of(&packet), snap, 0, &mut out),
                Lookup::Hit(..)
            )
        })
        .collect()
}

fn change_ends_only_what_it_changes(local: &mut Local) {
    let mut model = model();
    let cache = AnswerCache::new(1 << 20);
    let web = Q::new("web-east.prod.svc.clusterset.local", rtype::A);
    let web_aaaa = Q::new("web-east.prod.svc.clusterset.local", rtype::AAAA);
    let db = Q::new("db-0.db-east.prod.svc.clusterset.local", rtype::A);
    let zzz = Q::new("zzz-east.prod.svc.clusterset.local", rtype::A);
    let fed = Q::new("db-federated.prod.svc.clusterset.local", rtype::A);
    let asked = [web, web_aaaa, db, zzz, fed];
    let snap = model.snapshot();
    for q in asked {
        assert!(!ask(&cache, local, &snap, q, 0).1);
        assert!(ask(&cache, local, &snap, q, 0).1, "{}: stored", q.name);
    }

    // A pod of db in east moves: db-east and db-federated change, the rest
    // keeps its bytes (NODATA included, with the new serial).
    let pg = || vec![port(Some("pg"), Protocol::Tcp, 5432)];
    model.apply(
        [slice_event(
            "east",
            slice(
                "prod",
                "db-east",
                "db",
                pg(),
                &[("10.10.2.99", Some("db-0"), true)],
            ),
        )],
        t0(),
    );
    let snap = model.snapshot();
    assert_eq!(
        hits(&cache, local, &snap, &asked),
        [true, true, false, true, false]
    );
    let (bytes, hit) = ask(&cache, local, &snap, web_aaaa, 0);
    let (want, ..) = general(&snap, &web_aaaa.bytes(), Transport::Udp, 0);
    assert!(hit);
    assert_eq!(bytes, want, "NODATA carries the current serial");
    for q in [db, fed] {
        let (got, hit) = ask(&cache, local, &snap, q, 0);
        let (want, ..) = general(&snap, &q.bytes(), Transport::Udp, 0);
        assert!(!hit);
        assert_eq!(got, want);
    }

    // zzz appears in east: its NXDOMAIN goes.
    model.apply(
        [svc_event(
            "east",
            service(
                "prod",
                "zzz",
                Some(ExportMode::Flat),
                false,
                false,
                &["10.100.99.1"],
                vec![port(Some("http"), Protocol::Tcp, 80)],
            ),
        )],
        t0(),
    );
    let snap = model.snapshot();
    assert_eq!(
        hits(&cache, local, &snap, &asked),
        [true, true, true, false, true]
    );
    let (got, _) = ask(&cache, local, &snap, zzz, 0);
    let (want, answered, _) = general(&snap, &zzz.bytes(), Transport::Udp, 0);
    assert_eq!(answered.answer.rcode, Rcode::NoError);
    assert_eq!(got, want);

    // A cluster that has not synced yet could hold any name: no stored
    // NXDOMAIN holds, the rest does.
    let nx = Q::new("yyy-east.prod.svc.clusterset.local", rtype::A);
    ask(&cache, local, &snap, nx, 0);
    assert!(ask(&cache, local, &snap, nx, 0).1);
    model.apply(
        [Event::ClusterUp {
            cluster: c("south"),
            local: false,
        }],
        t0(),
    );
    let snap = model.snapshot();
    assert!(!ask(&cache, local, &snap, nx, 0).1);
    assert!(ask(&cache, local, &snap, web, 0).1);

    // East's watch breaks: its names are served stale (capped TTL, counted),
    // never from the cache.
    model.apply(
        [Event::Health {
            cluster: c("east"),
            health: Health {
                synced: true,
                broken_since: Some(Instant::now()),
                ..Health::default()
            },
        }],
        t0(),
    );
    let snap = model.snapshot();
    for _ in 0..2 {
        let (got, hit) = ask(&cache, local, &snap, db, 0);
        assert!(!hit, "stale answers are not stored");
        let (want, answered, _) = general(&snap, &db.bytes(), Transport::Udp, 0);
        assert!(answered.note.stale);
        assert_eq!(got, want);
    }
}

#[test]
fn new_settings_end_every_stored_answer() {
    let cache = AnswerCache::new(1 << 20);
    let local = &mut Local::new(64);
    let q = Q::new("web-east.prod.svc.clusterset.local", rtype::A);
    let snap = model().snapshot();
    ask(&cache, local, &snap, q, 0);
    assert!(ask(&cache, local, &snap, q, 0).1);
    let mut s = settings();
    s.ttl = 30;
    let mut other = Model::new(Arc::new(s), epoch());
    other.clusters_known(t0());
    other.apply(fixture_events(), t0());
    let snap = other.snapshot();
    let (got, hit) = ask(&cache, local, &snap, q, 0);
    assert!(!hit);
    assert_eq!(got, general(&snap, &q.bytes(), Transport::Udp, 0).0);
}

/// Answers that carry a window of an RRset too large for one answer (over
/// TCP and TLS) or above `max-answer-records` (over UDP too) are stored per
/// window: each window is the general path's bytes, a repeated query is a
/// hit, and the hit counts as capped.
#[test]
fn capped_answers_are_stored_per_window_and_hit() {
    let srv = ("db-east.big.svc.clusterset.local", rtype::SRV);
    let a = ("db-federated.big.svc.clusterset.local", rtype::A);
    // Four addresses in two windows of two: as many records as windows.
    let small = ("db-federated.prod.svc.clusterset.local", rtype::A);
    let cases = [
        (0, Transport::Tcp, srv, 2),
        (0, Transport::Tcp, a, 2),
        (0, Transport::Tls, a, 2),
        (8, Transport::Udp, srv, 188),
        (8, Transport::Udp, a, 563),
        (2, Transport::Udp, small, 2),
    ];
    for (max, transport, (name, qtype), windows) in cases {
        let mut s = settings();
        s.max_answer_records = max;
        let mut model = Model::new(Arc::new(s), epoch());
        model.clusters_known(t0());
        model.apply(
            if name == small.0 {
                fixture_events()
            } else {
                big_events()
            },
            t0(),
        );
        let snap = model.snapshot();
        let q = (Q::new(name, qtype), transport);
        for mut local in locals() {
            let local = &mut local;
            let cache = AnswerCache::new(32 << 20);
            let ctx = format!("{name} {qtype} over {transport:?}, max {max}");
            // Two rounds: the first stores each window, the second hits.
            for rotation in 0..2 * windows {
                let (got, hit) = ask_over(&cache, local, &snap, q, rotation);
                let (want, answered, fit) = general(&snap, &q.0.bytes(), transport, rotation);
                assert!(answered.note.capped && !fit.truncated, "{ctx}");
                assert_eq!(answered.rotated, windows, "{ctx}");
                assert_eq!(got, want, "{ctx}: rotation {rotation}");
                assert_eq!(
                    hit.is_some(),
                    rotation >= windows,
                    "{ctx}: rotation {rotation}"
                );
                let (again, hit) = ask_over(&cache, local, &snap, q, rotation);
                assert_eq!(again, want, "{ctx}: rotation {rotation}");
                assert!(hit.is_some_and(|n| n.capped), "{ctx}: a capped hit");
            }
        }
    }
}

#[test]
fn rotations_are_stored_within_a_byte_budget() {
    let tcp_answer = vec![0u8; 65535];
    assert!(
        per_rotation(2, 0, &tcp_answer).is_some(),
        "two 64 KiB windows"
    );
    assert!(
        per_rotation(563, 0, &[0u8; 200]).is_some(),
        "563 small windows"
    );
    assert!(
        per_rotation(9, 0, &tcp_answer).is_none(),
        "nine 64 KiB windows"
    );
}

/// An answer that says how long a cluster has been silent changes with
/// the clock, so it is never stored: a federated name with a broken member
/// within the grace (not stale by the answer's note, TTL capped, EDE 3)
/// is answered afresh every time, with the age as of that query.
#[test]
fn a_federated_answer_within_the_grace_is_stored_with_an_ageless_error() {
    for mut local in locals() {
        let local = &mut local;
        let mut model = model();
        model.apply(
            [Event::Health {
                cluster: c("east"),
                health: Health {
                    synced: true,
                    broken_since: Some(Instant::now()),
                    ..Health::default()
                },
            }],
            t0(),
        );
        let snap = model.snapshot();
        let cache = AnswerCache::new(1 << 20);
        let fed = Q::new("db-federated.prod.svc.clusterset.local", rtype::A);
        // Every federated name a broken cluster is in would miss the cache
        // at once otherwise (the soak test's load saw it): its text names
        // the member, without an age that would go stale in the cache.
        for round in 0..2 {
            let (got, hit) = ask(&cache, local, &snap, fed, 0);
            assert_eq!(hit, round == 1, "stored, then served from the cache");
            assert_eq!(
                ede_in(&got),
                Some((
                    3,
                    "member east not heard from, within the federated grace".to_owned()
                ))
            );
        }
        // Per-cluster stale answers carry an age: never stored.
        let east = Q::new("db-east.prod.svc.clusterset.local", rtype::A);
        for _ in 0..2 {
            let (got, hit) = ask(&cache, local, &snap, east, 0);
            assert!(!hit, "an answer with an age in it is not stored");
            let (code, text) = ede_in(&got).expect("EDE 3");
            assert_eq!(code, 3);
            assert!(
                text.starts_with("cluster east not heard from for "),
                "{text}"
            );
        }
        // A fresh name next to it is stored as before.
        let db = Q::new("db-north.prod.svc.clusterset.local", rtype::A);
        ask(&cache, local, &snap, db, 0);
        let (got, hit) = ask(&cache, local, &snap, db, 0);
        assert!(hit && ede_in(&got).is_none());
    }
}
