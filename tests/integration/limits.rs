//! Resource limits of the TCP listener, hit on purpose against the built
//! binary: too many connections, an idle connection, a client dribbling a
//! length prefix, a pipeline deeper than `max-in-flight`, a client that
//! never reads its answers. Each must cut off only the offender, show up in
//! `clusterset_dns_limit_hits_total{limit=…}`, and leave the server
//! answering everyone else.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;

use crate::binary::{Served, http_get, serve};
use crate::support::{demo, length_prefixed, q};

const NAME: &str = "payments-north.shop.svc.clusterset.local.";

/// The demo zones served with small limits, so each is quick to hit.
fn served(extra: &[&str]) -> Served {
    serve(&demo(), &[&["--local-cluster", "north"], extra].concat())
}

/// The value of `clusterset_dns_limit_hits_total{limit="<limit>"}`.
fn hits(s: &Served, limit: &str) -> u64 {
    let (status, body) = http_get(s.admin, "/metrics");
    assert_eq!(status, 200);
    let prefix = format!("clusterset_dns_limit_hits_total{{limit=\"{limit}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in /metrics"))
}

/// Waits (3 s at most) for `hits(limit)` to reach `at_least`.
fn wait_hits(s: &Served, limit: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let n = hits(s, limit);
        if n >= at_least || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn query(id: u16) -> Vec<u8> {
    let mut m = q(NAME, RecordType::A).message();
    m.metadata.id = id;
    m.to_vec().expect("encode")
}

fn framed(id: u16) -> Vec<u8> {
    length_prefixed(&query(id))
}

fn connect(s: &Served) -> TcpStream {
    let c = TcpStream::connect(s.dns).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    c
}

/// Reads one length-prefixed response.
fn read_answer(c: &mut TcpStream) -> Message {
    let mut len = [0u8; 2];
    c.read_exact(&mut len).expect("length prefix");
    let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
    c.read_exact(&mut body).expect("response");
    Message::from_vec(&body).expect("decode")
}

/// Asks `id` on `c` and checks the answer is the demo service's NOERROR.
fn ask_tcp(c: &mut TcpStream, id: u16) {
    c.write_all(&framed(id)).expect("write");
    let m = read_answer(c);
    assert_eq!(m.metadata.id, id);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(!m.answers.is_empty(), "no records for {NAME}");
}

/// Waits (timeout `within`) for the server to close `c`: the read returns
/// end of file or a reset, not a timeout. Returns how long it took.
fn closed_within(c: &mut TcpStream, within: Duration) -> Duration {
    let started = Instant::now();
    c.set_read_timeout(Some(within)).expect("timeout");
    let mut buf = [0u8; 512];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return started.elapsed(),
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return started.elapsed(),
            Err(e) => panic!("not closed within {within:?}: {e}"),
        }
    }
}

/// The server still answers a fresh client over UDP and TCP.
fn still_answers(s: &Served) {
    let udp = UdpSocket::bind("127.0.0.1:0").expect("bind");
    udp.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    udp.send_to(&query(7), s.dns).expect("send");
    let mut buf = [0u8; 4096];
    let n = udp.recv(&mut buf).expect("UDP answer");
    let m = Message::from_vec(&buf[..n]).expect("decode");
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    ask_tcp(&mut connect(s), 8);
}

#[test]
fn connections_over_the_limit_are_closed_and_counted() {
    let s = served(&["--max-connections", "3"]);
    let mut held: Vec<TcpStream> = (0..3u16)
        .map(|i| {
            let mut c = connect(&s);
            ask_tcp(&mut c, i);
            c
        })
        .collect();
    let mut extra = connect(&s);
    let _ = extra.write_all(&framed(9));
    closed_within(&mut extra, Duration::from_secs(2));
    assert_eq!(wait_hits(&s, "connections", 1), 1);
    // UDP is not limited by TCP connections.
    let udp = UdpSocket::bind("127.0.0.1:0").expect("bind");
    udp.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    udp.send_to(&query(5), s.dns).expect("send");
    let mut buf = [0u8; 4096];
    assert!(udp.recv(&mut buf).is_ok(), "UDP answered while TCP is full");
    // The held connections still work, and a closed one frees its slot.
    ask_tcp(&mut held[0], 10);
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let mut c = connect(&s);
        let _ = c.write_all(&framed(11));
        c.set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let mut len = [0u8; 2];
        if c.read_exact(&mut len).is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the freed slot was not reused");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn idle_connections_are_closed_after_idle_timeout() {
    let s = served(&["--idle-timeout", "400ms"]);
    let mut c = connect(&s);
    ask_tcp(&mut c, 1);
    let took = closed_within(&mut c, Duration::from_secs(3));
    assert!(took >= Duration::from_millis(300), "closed after {took:?}");
    assert_eq!(wait_hits(&s, "idle_timeout", 1), 1);
    still_answers(&s);
}

#[test]
fn a_dribbled_length_prefix_is_cut_off_after_message_timeout() {
    // Idle timeout long, message timeout short: the cut must come from the
    // message timeout, well before the idle one.
    let s = served(&["--idle-timeout", "20s", "--message-timeout", "300ms"]);
    let mut c = connect(&s);
    c.write_all(&framed(1)[..1]).expect("first byte");
    let took = closed_within(&mut c, Duration::from_secs(3));
    assert!(took < Duration::from_secs(2), "closed after {took:?}");
    // A body dribbled a byte at a time is cut off the same way, even
    // though each byte comes well within the timeout.
    let mut c = connect(&s);
    let whole = framed(2);
    let started = Instant::now();
    let mut cut = false;
    for b in &whole {
        if c.write_all(std::slice::from_ref(b)).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !cut {
        closed_within(&mut c, Duration::from_secs(3));
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(wait_hits(&s, "message_timeout", 2), 2);
    still_answers(&s);
}

#[test]
fn a_pipeline_deeper_than_max_in_flight_is_answered_in_order_and_counted() {
    let s = served(&["--max-in-flight", "4"]);
    let mut c = connect(&s);
    let burst: Vec<u8> = (0..50u16).flat_map(framed).collect();
    c.write_all(&burst).expect("write burst");
    for id in 0..50u16 {
        let m = read_answer(&mut c);
        assert_eq!(m.metadata.id, id, "answers in order");
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    }
    assert!(wait_hits(&s, "in_flight", 1) >= 1);
}

#[test]
fn a_client_that_never_reads_is_cut_off_after_query_timeout() {
    let s = served(&["--query-timeout", "500ms", "--idle-timeout", "30s"]);
    // A tiny receive window, so the server's writes block soon.
    let sock =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    sock.set_recv_buffer_size(4096).expect("rcvbuf");
    sock.connect(&s.dns.into()).expect("connect");
    let mut c: TcpStream = sock.into();
    c.set_write_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    // Write queries, never read, until the server stops taking them (its
    // writes are blocked) or cuts the connection off; 10 s at most.
    let deadline = Instant::now() + Duration::from_secs(10);
    let chunk: Vec<u8> = (0..200u16).flat_map(framed).collect();
    while Instant::now() < deadline {
        match c.write_all(&chunk) {
            Ok(()) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if hits(&s, "query_timeout") > 0 {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    assert_eq!(wait_hits(&s, "query_timeout", 1), 1);
    still_answers(&s);
}

#[test]
fn limits_have_safe_defaults_and_bad_values_are_refused() {
    let s = served(&[]);
    let (_, body) = http_get(s.admin, "/metrics");
    for limit in [
        "connections",
        "idle_timeout",
        "message_timeout",
        "in_flight",
        "query_timeout",
    ] {
        assert!(
            body.contains(&format!(
                "clusterset_dns_limit_hits_total{{limit=\"{limit}\"}} 0"
            )),
            "{limit} not exported at 0"
        );
    }
    assert!(body.contains("clusterset_dns_connections_open{transport=\"tcp\"} 0"));
    for (flag, value, message) in [
        ("--max-connections", "0", "invalid max-connections"),
        ("--idle-timeout", "0s", "invalid idle-timeout"),
        ("--message-timeout", "soon", "invalid message-timeout"),
        ("--max-in-flight", "2000000", "invalid max-in-flight"),
    ] {
        let out = std::process::Command::new(crate::binary::bin())
            .args(["serve", "--zones"])
            .arg(demo())
            .args([flag, value, "--dns-addr", "127.0.0.1:0"])
            .output()
            .expect("run");
        assert!(!out.status.success(), "{flag} {value} accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{flag} {value}: {stderr}");
    }
}
