//! Hostile input: random bytes, truncated headers, compression loops, wrong
//! counts, responses sent as queries. The server never crashes, never
//! answers a response, never exceeds the size a query allows, never
//! amplifies an error, and keeps answering.

use std::collections::HashMap;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Options, Proto, ask, fixture, q, raw, start};

/// xorshift64*: deterministic, so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn valid_query(id: u16) -> Vec<u8> {
    let mut m = q("api-north.prod.svc.clusterset.local.", RecordType::SRV).message();
    m.metadata.id = id;
    m.to_vec().expect("encode")
}

/// A packet: random bytes, or a valid query mutated.
fn hostile(rng: &mut Rng, i: usize) -> Vec<u8> {
    match i % 4 {
        0 => (0..rng.below(600)).map(|_| rng.next() as u8).collect(),
        1 => {
            // A plausible header with random counts and a random tail.
            let mut p = valid_query(i as u16);
            for b in &mut p[4..12] {
                *b = rng.next() as u8;
            }
            p
        }
        2 => {
            let mut p = valid_query(i as u16);
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(p.len());
                p[at] = rng.next() as u8;
            }
            p
        }
        _ => {
            let p = valid_query(i as u16);
            p[..rng.below(p.len())].to_vec()
        }
    }
}

/// Checks one reply against the packet that caused it.
fn check_reply(packet: &[u8], reply: &[u8]) {
    assert!(
        packet.len() >= 12,
        "a packet shorter than a header got a reply"
    );
    assert_eq!(packet[2] & 0x80, 0, "a response (QR=1) got a reply");
    assert_eq!(reply[..2], packet[..2], "reply id");
    assert_eq!(reply[2] & 0x80, 0x80, "QR set in replies");
    assert!(
        reply.len() <= 1232,
        "reply of {} octets exceeds the EDNS cap",
        reply.len()
    );
    let rcode = reply[3] & 0x0F;
    if rcode == 1 || rcode == 5 {
        assert!(
            reply.len() <= packet.len(),
            "FORMERR/REFUSED of {} octets for a {}-octet query",
            reply.len(),
            packet.len()
        );
    }
    if let Ok(m) = Message::from_vec(packet)
        && m.edns.is_none()
    {
        assert!(
            reply.len() <= 512,
            "{} octets to a query without EDNS",
            reply.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_and_malformed_udp_packets() {
    let server = start(&fixture("conformance"), Options::conformance()).await;
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut sent: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut buf = vec![0u8; 65535];
    let mut replies = 0;
    for i in 0..4000 {
        let packet = hostile(&mut rng, i);
        sock.send_to(&packet, server.dns).await.expect("send");
        if packet.len() >= 2 {
            sent.insert(packet[..2].to_vec(), packet);
        }
        // Drain replies as they come, without waiting for any one.
        while let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_micros(200), sock.recv_from(&mut buf)).await
        {
            replies += 1;
            if let Some(p) = sent.get(&buf[..2]) {
                // Ids collide among random packets; only check exact pairs.
                if p.len() >= 12 && buf[..n].len() >= 12 {
                    check_reply(p, &buf[..n]);
                }
            }
        }
    }
    assert!(
        replies > 1000,
        "most hostile packets are answered with FORMERR or an answer ({replies})"
    );
    // Still answering, correctly, over both transports.
    for proto in [Proto::Udp, Proto::Tcp] {
        let (m, _) = ask(
            server.dns,
            proto,
            &q("web-east.prod.svc.clusterset.local.", RecordType::A),
        )
        .await;
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert_eq!(m.answers.len(), 1);
    }
    server.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_packets() {
    let server = start(&fixture("conformance"), Options::conformance()).await;
    let valid = valid_query(0x1234);
    let qlen = valid.len() - 12 - 11; // question octets (the query has an OPT)

    // Shorter than a header: dropped.
    assert_eq!(raw(server.dns, Proto::Udp, &valid[..5]).await, None);
    // A response: never answered (no reply loops).
    let mut response = valid.clone();
    response[2] |= 0x80;
    assert_eq!(raw(server.dns, Proto::Udp, &response).await, None);
    // A compression loop in the question name.
    let mut looped = valid[..12].to_vec();
    looped.extend_from_slice(&[0xC0, 0x0C, 0, 1, 0, 1]);
    looped[11] = 0;
    let reply = raw(server.dns, Proto::Udp, &looped).await.expect("FORMERR");
    assert_eq!((reply[3] & 0x0F, reply.len()), (1, 12));
    // Zero and two questions.
    for qd in [0u8, 2] {
        let mut p = valid.clone();
        p[5] = qd;
        let reply = raw(server.dns, Proto::Udp, &p).await.expect("FORMERR");
        assert_eq!(reply[3] & 0x0F, 1, "QDCOUNT {qd}");
        assert!(reply.len() <= p.len());
    }
    // Counts that promise records that are not there.
    let mut p = valid.clone();
    p[6] = 0xFF;
    let reply = raw(server.dns, Proto::Udp, &p).await.expect("FORMERR");
    assert_eq!(reply[3] & 0x0F, 1);
    // The question alone, without its type and class.
    let reply = raw(server.dns, Proto::Udp, &valid[..12 + qlen - 4])
        .await
        .expect("FORMERR");
    assert_eq!(reply[3] & 0x0F, 1);

    // TCP: an empty message, a huge length that never arrives, garbage.
    for payload in [
        vec![0u8, 0],
        vec![0xFF, 0xFF, 1, 2, 3],
        vec![0, 3, 0xAA, 0xBB, 0xCC],
    ] {
        let mut s = tokio::net::TcpStream::connect(server.dns)
            .await
            .expect("connect");
        s.write_all(&payload).await.expect("write");
        s.shutdown().await.expect("shutdown");
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut rest)).await;
    }
    let (m, _) = ask(
        server.dns,
        Proto::Tcp,
        &q("db-0.db-east.prod.svc.clusterset.local.", RecordType::A),
    )
    .await;
    assert_eq!(
        m.answers.len(),
        1,
        "still answering after hostile TCP input"
    );
    server.server.stop().await;
}
