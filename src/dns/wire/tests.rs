use super::*;
use hickory_proto::op::Message;
use std::net::Ipv4Addr;

/// A query: header + question (+ OPT when `edns` is set).
fn query(id: u16, flags: u16, name: &str, qtype: u16, edns: Option<(u16, u8, bool)>) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&id.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    b.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        b.push(label.len() as u8);
        b.extend_from_slice(label.as_bytes());
    }
    b.push(0);
    b.extend_from_slice(&qtype.to_be_bytes());
    b.extend_from_slice(&CLASS_IN.to_be_bytes());
    if let Some((payload, version, dnssec_ok)) = edns {
        b.push(0);
        b.extend_from_slice(&rtype::OPT.to_be_bytes());
        b.extend_from_slice(&payload.to_be_bytes());
        b.push(0);
        b.push(version);
        b.extend_from_slice(&(if dnssec_ok { 0x8000u16 } else { 0 }).to_be_bytes());
        b.extend_from_slice(&[0, 0]);
    }
    b
}

#[test]
fn decode_table() {
    let ok = query(7, 0x0100, "Web-East.clusterset.local", rtype::A, None);
    let req = decode(&ok).expect("valid");
    assert_eq!(
        req.header,
        HeaderEcho {
            id: 7,
            opcode: 0,
            rd: true,
            cd: false
        }
    );
    assert_eq!(
        (req.name.text(), req.qtype, req.qclass, req.edns),
        ("web-east.clusterset.local", 1, 1, None)
    );
    assert_eq!(req.question, &ok[12..]);

    let with_opt = query(8, 0x0010, "a.b", rtype::SRV, Some((4096, 0, true)));
    let req = decode(&with_opt).expect("valid");
    assert!(req.header.cd);
    assert_eq!(
        req.edns,
        Some(Edns {
            payload: 4096,
            version: 0,
            dnssec_ok: true
        })
    );
    assert_eq!(req.udp_limit(1232), 1232);
    assert_eq!(
        decode(&query(8, 0, "a", 1, Some((100, 0, false))))
            .expect("ok")
            .udp_limit(1232),
        512
    );
    assert_eq!(
        decode(&query(8, 0, "a", 1, Some((800, 0, false))))
            .expect("ok")
            .udp_limit(1232),
        800
    );
    assert_eq!(decode(&ok).expect("ok").udp_limit(1232), 512);

    // Dropped: too short, or a response.
    assert!(matches!(decode(&ok[..11]), Err(DecodeError::Drop(_))));
    assert!(matches!(
        decode(&query(1, 0x8000, "a", 1, None)),
        Err(DecodeError::Drop(_))
    ));

    let formerr = |packet: &[u8]| match decode(packet) {
        Err(DecodeError::FormErr { edns, .. }) => edns,
        other => panic!("expected FORMERR, got {other:?}"),
    };
    // QDCOUNT 0, with an OPT right after the header: the FORMERR keeps the OPT.
    let mut zero = query(1, 0, "a", 1, Some((1232, 0, false)));
    zero[5] = 0;
    zero.drain(12..12 + 7);
    assert_eq!(
        formerr(&zero),
        Some(Edns {
            payload: 1232,
            version: 0,
            dnssec_ok: false
        })
    );
    // QDCOUNT 2.
    let mut two = query(1, 0, "a", 1, None);
    two[5] = 2;
    two.extend_from_within(12..);
    assert_eq!(formerr(&two), None);
    // A 64-octet label.
    let mut long = query(1, 0, "x", 1, None);
    long.splice(12..14, [64u8].into_iter().chain([b'a'; 64]));
    formerr(&long);
    // ARCOUNT says 1 but nothing follows.
    let mut missing = query(1, 0, "a", 1, None);
    missing[11] = 1;
    formerr(&missing);
    // Two OPT records.
    let mut double = query(1, 0, "a", 1, Some((1232, 0, false)));
    double[11] = 2;
    double.extend_from_within(double.len() - 11..);
    formerr(&double);
    // An EDNS option whose length runs past the OPT.
    let mut bad_opt = query(1, 0, "a", 1, Some((1232, 0, false)));
    let n = bad_opt.len();
    bad_opt[n - 2..].copy_from_slice(&[0, 4]);
    bad_opt.extend_from_slice(&[0, 10, 0, 9, 1, 2]);
    assert!(formerr(&bad_opt).is_some());
    // A compression pointer looping onto itself in the question.
    let mut pointer = query(1, 0, "", 1, None);
    pointer.splice(12..13, [0xC0, 12]);
    formerr(&pointer);
}

#[test]
fn unknown_edns_options_are_accepted() {
    // A cookie (option 10) as BIND and Unbound send it.
    let mut q = query(3, 0, "a.b", 1, Some((1232, 0, false)));
    let n = q.len();
    q[n - 2..].copy_from_slice(&[0, 12]);
    q.extend_from_slice(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert!(decode(&q).is_ok());
}

fn a_answer(n: usize) -> Answer {
    let mut a = Answer::empty(Rcode::NoError, true);
    for i in 0..n {
        a.answers.push(Record {
            owner: Owner::Query,
            ttl: 5,
            data: RData::A(Ipv4Addr::new(10, 0, (i / 256) as u8, (i % 256) as u8)),
        });
    }
    a
}

fn srv_answer(targets: usize) -> Answer {
    let mut a = Answer::empty(Rcode::NoError, true);
    for i in 0..targets {
        let target = format!("pod-{i}.svc-east.prod.svc.clusterset.local");
        a.answers.push(Record {
            owner: Owner::Query,
            ttl: 5,
            data: RData::Srv {
                priority: 0,
                weight: 10,
                port: 80,
                target: target.clone(),
            },
        });
        a.additional.push(Record {
            owner: Owner::Name(target),
            ttl: 5,
            data: RData::A(Ipv4Addr::new(10, 0, 0, i as u8)),
        });
    }
    a
}

#[test]
fn question_is_echoed_and_owners_point_at_it() {
    let packet = query(
        0xBEEF,
        0x0100,
        "WeB-EaSt.Prod.svc.ClusterSet.local",
        rtype::A,
        None,
    );
    let req = decode(&packet).expect("valid");
    let mut out = Vec::new();
    let fit = encode(&req, &a_answer(2), 512, &mut out);
    assert_eq!(fit, Fit::default());
    assert_eq!(&out[12..12 + req.question.len()], req.question);
    // Both answer owners are the 2-byte pointer to the question.
    let first_rr = 12 + req.question.len();
    assert_eq!(&out[first_rr..first_rr + 2], &[0xC0, 12]);
    let m = Message::from_vec(&out).expect("hickory decodes it");
    assert_eq!(m.metadata.id, 0xBEEF);
    assert!(
        m.metadata.authoritative && m.metadata.recursion_desired && !m.metadata.recursion_available
    );
    assert_eq!(m.answers.len(), 2);
    assert_eq!(
        m.answers[0].name.to_string(),
        "WeB-EaSt.Prod.svc.ClusterSet.local."
    );
    assert!(m.edns.is_none(), "no OPT in the query, none in the reply");
}

#[test]
fn srv_targets_are_never_compressed() {
    let packet = query(
        1,
        0,
        "_http._tcp.svc-east.prod.svc.clusterset.local",
        rtype::SRV,
        Some((1232, 0, false)),
    );
    let req = decode(&packet).expect("valid");
    let mut out = Vec::new();
    encode(&req, &srv_answer(3), 1232, &mut out);
    let m = Message::from_vec(&out).expect("decodes");
    assert_eq!(m.answers.len(), 3);
    assert_eq!(m.additionals.len(), 3);
    // Every SRV RDATA is 6 octets plus the full target name, no pointer.
    let mut at = 12 + req.question.len();
    for r in &m.answers {
        let target = r.data.to_string();
        let target = target.split_whitespace().last().expect("target");
        at += 2 + 10; // owner pointer, type, class, ttl, rdlength
        let rdlen = u16::from_be_bytes([out[at - 2], out[at - 1]]) as usize;
        assert_eq!(rdlen, 6 + target.len() + 1, "{target} is written in full");
        assert!(!out[at + 6..at + rdlen].iter().any(|b| b & 0xC0 == 0xC0));
        at += rdlen;
    }
    // Additional owners point at the targets written in the answers.
    assert_eq!(out[at] & 0xC0, 0xC0);
}

#[test]
fn additional_is_trimmed_before_tc() {
    let packet = query(
        1,
        0,
        "_http._tcp.svc-east.prod.svc.clusterset.local",
        rtype::SRV,
        Some((1232, 0, false)),
    );
    let req = decode(&packet).expect("valid");
    let mut out = Vec::new();
    // 16 SRV records fit in 1232 but their 16 Additional A records do not.
    let answer = srv_answer(16);
    let fit = encode(&req, &answer, 1232, &mut out);
    assert!(!fit.truncated);
    assert!(fit.additional_dropped > 0);
    assert!(out.len() <= 1232);
    let m = Message::from_vec(&out).expect("decodes");
    assert!(!m.metadata.truncation);
    assert_eq!(m.answers.len(), 16);
    assert_eq!(m.additionals.len(), 16 - fit.additional_dropped);
    assert!(m.edns.is_some(), "the OPT survives trimming");
}

#[test]
fn answers_that_do_not_fit_set_tc_and_keep_aa_question_and_opt() {
    let packet = query(
        9,
        0x0100,
        "big-north.prod.svc.clusterset.local",
        rtype::A,
        Some((4096, 0, true)),
    );
    let req = decode(&packet).expect("valid");
    let mut out = Vec::new();
    let fit = encode(&req, &a_answer(100), 1232, &mut out);
    assert!(fit.truncated);
    let m = Message::from_vec(&out).expect("decodes");
    assert!(m.metadata.truncation && m.metadata.authoritative);
    assert_eq!(
        (
            m.queries.len(),
            m.answers.len(),
            m.authorities.len(),
            m.additionals.len()
        ),
        (1, 0, 0, 0)
    );
    let edns = m.edns.expect("OPT kept");
    assert_eq!(edns.max_payload(), ADVERTISED_PAYLOAD);
    assert!(edns.flags().dnssec_ok, "DO echoed");
    // Without EDNS the limit is 512 and there is no OPT.
    let plain = query(9, 0, "big-north.prod.svc.clusterset.local", rtype::A, None);
    let req = decode(&plain).expect("valid");
    let fit = encode(&req, &a_answer(40), req.udp_limit(1232), &mut out);
    assert!(fit.truncated && out.len() <= 512);
    assert!(Message::from_vec(&out).expect("decodes").edns.is_none());
    // The same answer fits over TCP.
    let fit = encode(&req, &a_answer(100), 65535, &mut out);
    assert!(!fit.truncated);
    assert_eq!(Message::from_vec(&out).expect("decodes").answers.len(), 100);
}

#[test]
fn error_responses() {
    let mut out = Vec::new();
    let header = HeaderEcho {
        id: 5,
        opcode: 0,
        rd: true,
        cd: false,
    };
    encode_error(
        &header,
        Some(Edns {
            payload: 1232,
            version: 0,
            dnssec_ok: false,
        }),
        Rcode::FormErr,
        &mut out,
    );
    let m = Message::from_vec(&out).expect("decodes");
    assert_eq!(u16::from(m.metadata.response_code), 1);
    assert!(m.queries.is_empty() && !m.metadata.authoritative);
    assert!(m.edns.is_some());
    encode_error(&header, None, Rcode::FormErr, &mut out);
    assert_eq!(out.len(), HEADER_LEN);

    // BADVERS: header rcode 0, the upper bits in the OPT.
    let packet = query(6, 0, "a.b", rtype::A, Some((1232, 1, false)));
    let req = decode(&packet).expect("valid");
    encode(&req, &Answer::empty(Rcode::BadVers, false), 1232, &mut out);
    assert_eq!(out[3] & 0x0F, 0);
    let opt = &out[out.len() - 11..];
    assert_eq!(
        (opt[5], opt[6]),
        (1, 0),
        "extended rcode 1 (BADVERS = 16), version 0"
    );
}

#[test]
fn soa_names_compress_against_the_question() {
    let packet = query(1, 0, "nope.prod.svc.clusterset.local", rtype::A, None);
    let req = decode(&packet).expect("valid");
    let mut a = Answer::empty(Rcode::NxDomain, true);
    a.authority.push(Record {
        owner: Owner::Name("clusterset.local".into()),
        ttl: 5,
        data: RData::Soa(Soa {
            mname: "ns.dns.clusterset.local".into(),
            rname: "hostmaster.clusterset.local".into(),
            serial: 42,
            refresh: 7200,
            retry: 1800,
            expire: 86400,
            minimum: 5,
        }),
    });
    let mut out = Vec::new();
    encode(&req, &a, 512, &mut out);
    let m = Message::from_vec(&out).expect("decodes");
    assert_eq!(
        m.authorities[0]
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        "clusterset.local. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 42 7200 1800 86400 5"
    );
    // Owner (2) + fixed (10) + mname "ns.dns" + ptr (2+3+4=9) + rname (11+2=13) + 20.
    assert_eq!(out.len(), 12 + req.question.len() + 2 + 10 + 9 + 13 + 20);
}

#[test]
fn answer_len_is_what_encode_writes() {
    let packet = query(
        1,
        0,
        "_http._tcp.svc-east.prod.svc.clusterset.local",
        rtype::SRV,
        Some((1232, 0, false)),
    );
    let req = decode(&packet).expect("valid");
    let mut out = Vec::new();
    encode(&req, &Answer::empty(Rcode::NoError, true), 65535, &mut out);
    let bare = out.len();
    let long_txt = "x".repeat(300);
    let exact = [
        RData::A(Ipv4Addr::new(10, 0, 0, 1)),
        RData::Aaaa("fd00::1".parse().expect("ip")),
        RData::Srv {
            priority: 0,
            weight: 1,
            port: 5432,
            target: "db-1499.db-east.prod.svc.clusterset.local".into(),
        },
        RData::Txt(String::new()),
        RData::Txt(long_txt),
    ];
    assert_eq!(answer_len(&exact[0]), 16);
    assert_eq!(answer_len(&exact[1]), 28);
    assert_eq!(answer_len(&exact[2]), 12 + 6 + 43);
    for data in exact {
        let mut a = Answer::empty(Rcode::NoError, true);
        // Two of each: a second SRV target is still written in full.
        for _ in 0..2 {
            a.answers.push(Record {
                owner: Owner::Query,
                ttl: 5,
                data: data.clone(),
            });
        }
        encode(&req, &a, 65535, &mut out);
        assert_eq!(out.len() - bare, 2 * answer_len(&data), "{data:?}");
    }
    // The room for records is what is left beside header, question and OPT.
    assert_eq!(req.answer_room(65535), 65535 - 12 - req.question.len() - 11);
    let plain = query(1, 0, "a.b", rtype::A, None);
    assert_eq!(
        decode(&plain).expect("valid").answer_room(512),
        512 - 12 - 9
    );
}

/// The EDE option (code and text) of a response, as hickory reads it
/// (hickory 0.26 has no EDE variant: it is an unknown option 15).
pub(crate) fn ede_of(m: &Message) -> Option<(u16, String)> {
    use hickory_proto::rr::rdata::opt::EdnsOption;
    m.edns
        .as_ref()?
        .options()
        .options
        .iter()
        .find_map(|(_, o)| match o {
            EdnsOption::Unknown(15, data) if data.len() >= 2 => Some((
                u16::from_be_bytes([data[0], data[1]]),
                String::from_utf8(data[2..].to_vec()).expect("utf-8"),
            )),
            _ => None,
        })
}

/// [`ede_of`] the response `bytes`.
pub(crate) fn ede_in(bytes: &[u8]) -> Option<(u16, String)> {
    ede_of(&Message::from_vec(bytes).expect("a response hickory reads"))
}

#[test]
fn an_extended_error_goes_to_edns_clients_only_and_within_the_limit() {
    let name = "api-east.prod.svc.clusterset.local";
    let mut a = a_answer(3);
    a.ede = Some(Ede::new(
        Ede::STALE_ANSWER,
        "cluster east not heard from for 42s",
    ));
    let mut out = Vec::new();
    let with_edns = query(1, 0, name, rtype::A, Some((1232, 0, false)));
    let with = decode(&with_edns).expect("valid");
    assert!(!encode(&with, &a, 1232, &mut out).truncated);
    let m = Message::from_vec(&out).expect("decodes");
    assert_eq!(m.answers.len(), 3);
    assert_eq!(
        ede_of(&m),
        Some((3, "cluster east not heard from for 42s".to_owned()))
    );
    let without = query(1, 0, name, rtype::A, None);
    let plain = decode(&without).expect("valid");
    encode(&plain, &a, 512, &mut out);
    assert!(Message::from_vec(&out).expect("decodes").edns.is_none());

    // Too big for UDP: truncated, and the OPT keeps the EDE within 1232.
    let mut big = a_answer(100);
    big.ede = Some(Ede::new(Ede::STALE_ANSWER, "x".repeat(500)));
    assert!(encode(&with, &big, 1232, &mut out).truncated);
    assert!(out.len() <= 1232);
    let (code, text) = ede_of(&Message::from_vec(&out).expect("decodes")).expect("EDE kept");
    assert_eq!(
        (code, text.len()),
        (3, MAX_EDE_TEXT),
        "the text is cut to its limit"
    );

    // Records that fit only without the EDE are sent without it.
    let fits = a_answer(3);
    let bare = {
        encode(&with, &fits, 1232, &mut out);
        out.len()
    };
    let mut tight = fits.clone();
    tight.ede = Some(Ede::new(
        Ede::STALE_ANSWER,
        "cluster east not heard from for 42s",
    ));
    assert!(!encode(&with, &tight, bare, &mut out).truncated);
    assert_eq!(out.len(), bare);
    assert_eq!(ede_of(&Message::from_vec(&out).expect("decodes")), None);
}

/// Every response size from 512 to 1232 octets, A and SRV answers of every
/// length around it, with the longest EDE text: the response never passes
/// the limit; a truncated one keeps its OPT and EDE; a complete one carries
/// the EDE exactly when its Answer and Authority sections fit beside it
/// (Additional records make way for it).
#[test]
fn an_extended_error_never_pushes_a_response_past_its_limit() {
    let name = "api-east.prod.svc.clusterset.local";
    let ede = Ede::new(Ede::STALE_ANSWER, "x".repeat(MAX_EDE_TEXT));
    let (mut out, mut bare) = (Vec::new(), Vec::new());
    for qtype in [rtype::A, rtype::SRV] {
        let packet = query(1, 0, name, qtype, Some((1232, 0, false)));
        let req = decode(&packet).expect("valid");
        for n in 0..24 {
            let mut a = if qtype == rtype::A {
                a_answer(n * 4)
            } else {
                srv_answer(n)
            };
            a.ede = Some(ede.clone());
            // The response without Additional records nor EDE.
            let core = Answer {
                additional: Vec::new(),
                ede: None,
                ..a.clone()
            };
            encode(&req, &core, usize::MAX, &mut bare);
            for limit in 512..=1232 {
                let ctx = format!("type {qtype}, {n} records, limit {limit}");
                let fit = encode(&req, &a, limit, &mut out);
                assert!(out.len() <= limit, "{ctx}: {} octets", out.len());
                let got = ede_in(&out);
                let has_room = bare.len() + ede.wire_len() <= limit;
                if fit.truncated {
                    assert!(bare.len() > limit, "{ctx}: truncated though it fits");
                    assert_eq!(got.map(|e| e.0), Some(3), "{ctx}: TC keeps the EDE");
                } else {
                    assert_eq!(got.is_some(), has_room, "{ctx}");
                }
            }
        }
    }
}
