use hickory_proto::op::{Message, MessageType, OpCode};
use hickory_proto::rr::RecordType;

use super::*;

#[test]
fn a_notify_is_an_authoritative_soa_question_of_the_zone() {
    let m = Message::from_vec(&message("clusterset.local", 4242, None)).expect("a DNS message");
    assert_eq!(m.metadata.id, 4242);
    assert_eq!(m.metadata.op_code, OpCode::Notify);
    assert_eq!(m.metadata.message_type, MessageType::Query);
    assert!(m.metadata.authoritative);
    assert_eq!(m.queries.len(), 1);
    assert_eq!(m.queries[0].name().to_string(), "clusterset.local.");
    assert_eq!(m.queries[0].query_type(), RecordType::SOA);
}

#[test]
fn only_a_notify_response_with_the_same_id_acknowledges() {
    let mut reply = message("clusterset.local", 7, None);
    reply[2] |= 0x80;
    let cases: [(&str, Vec<u8>, u16, bool); 5] = [
        ("the response", reply.clone(), 7, true),
        ("another id", reply.clone(), 8, false),
        (
            "the query itself (no QR)",
            message("clusterset.local", 7, None),
            7,
            false,
        ),
        (
            "a query response (opcode 0)",
            {
                let mut r = reply.clone();
                r[2] = 0x80;
                r
            },
            7,
            false,
        ),
        ("too short", vec![0, 7], 7, false),
    ];
    for (name, bytes, id, want) in cases {
        assert_eq!(acknowledges(&bytes, id), want, "{name}");
    }
}

#[test]
fn a_notify_can_carry_the_zones_soa() {
    let soa = Soa {
        mname: "ns.dns.clusterset.local".to_owned(),
        rname: "hostmaster.clusterset.local".to_owned(),
        serial: 1_795_000_123,
        refresh: 7200,
        retry: 1800,
        expire: 86400,
        minimum: 5,
    };
    let m =
        Message::from_vec(&message("clusterset.local", 1, Some((5, &soa)))).expect("a DNS message");
    assert_eq!(m.answers.len(), 1);
    let r = &m.answers[0];
    assert_eq!(r.name.to_string(), "clusterset.local.");
    match &r.data {
        hickory_proto::rr::RData::SOA(s) => {
            assert_eq!(s.serial, 1_795_000_123);
            assert_eq!(s.mname.to_string(), "ns.dns.clusterset.local.");
        }
        other => panic!("{other:?}"),
    }
}
