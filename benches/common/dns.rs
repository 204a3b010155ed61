//! What the live-mode benches (`propagation`, `fleet`, `failover`) share to talk to a running
//! server: its admin endpoint (`/ready`, and any other path) and a UDP DNS client with one query
//! in flight.
//!
//! Each bench includes it with `#[path = "common/dns.rs"] mod dns;`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};

/// Longest wait for one DNS response before the query is sent again.
pub(crate) const QUERY_TIMEOUT: Duration = Duration::from_millis(200);

/// Longest an admin request may take, each of connect, write and every read.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(1);
/// Most bytes read of an admin response.
const ADMIN_MAX_BYTES: u64 = 16 << 20;

/// `GET path` on the admin server: the body of a 200 response, `None` on any other status or
/// error.
pub(crate) fn admin_get(admin: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&admin, ADMIN_TIMEOUT).ok()?;
    s.set_read_timeout(Some(ADMIN_TIMEOUT)).ok()?;
    s.set_write_timeout(Some(ADMIN_TIMEOUT)).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).ok()?;
    let mut response = Vec::new();
    s.take(ADMIN_MAX_BYTES).read_to_end(&mut response).ok()?;
    let text = String::from_utf8(response).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    // axum answers with a Content-Length, never chunked, for these small bodies.
    Some(body.to_owned())
}

/// `GET /ready` on the admin server: true on 200.
pub(crate) fn admin_ready(admin: SocketAddr) -> bool {
    admin_get(admin, "/ready").is_some()
}

/// A UDP DNS client with one query in flight.
pub(crate) struct Dns {
    sock: UdpSocket,
    id: u16,
    buf: Vec<u8>,
}

impl Dns {
    pub(crate) fn new(server: SocketAddr) -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        sock.connect(server).expect("connect udp");
        sock.set_read_timeout(Some(QUERY_TIMEOUT))
            .expect("read timeout");
        Self {
            sock,
            id: 0,
            buf: vec![0; 65535],
        }
    }

    /// The A records answering `name`, or `None` when no response came in time.
    pub(crate) fn a(&mut self, name: &Name) -> Option<Vec<Ipv4Addr>> {
        self.id = self.id.wrapping_add(1);
        let mut m = Message::new(self.id, MessageType::Query, OpCode::Query);
        m.add_query(Query::query(name.clone(), RecordType::A));
        let bytes = m.to_vec().expect("encode query");
        self.sock.send(&bytes).ok()?;
        let deadline = Instant::now() + QUERY_TIMEOUT;
        while Instant::now() < deadline {
            let n = self.sock.recv(&mut self.buf).ok()?;
            let Ok(resp) = Message::from_vec(&self.buf[..n]) else {
                continue;
            };
            // A late answer to an earlier, timed-out query: skip it.
            if resp.metadata.id != self.id {
                continue;
            }
            return Some(
                resp.answers
                    .iter()
                    .filter_map(|r| match &r.data {
                        RData::A(a) => Some(a.0),
                        _ => None,
                    })
                    .collect(),
            );
        }
        None
    }
}
