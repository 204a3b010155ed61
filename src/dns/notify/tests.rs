use hickory_proto::op::{Message, MessageType, OpCode};
use hickory_proto::rr::RecordType;

use super::*;

#[test]
fn a_notify_is_an_authoritative_soa_question_of_the_zone() {
    let m = Message::from_vec(&message("clusterset.local", 4242)).expect("a DNS message");
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
    let mut reply = message("clusterset.local", 7);
    reply[2] |= 0x80;
    let cases: [(&str, Vec<u8>, u16, bool); 5] = [
        ("the response", reply.clone(), 7, true),
        ("another id", reply.clone(), 8, false),
        (
            "the query itself (no QR)",
            message("clusterset.local", 7),
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
