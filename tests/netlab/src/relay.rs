//! A TCP relay that adds latency, jitter and a bandwidth cap, for cross-region links in tests
//! (the kernel here has no netem). Each chunk read from one side is written to the other
//! `latency ± uniform jitter` later, never before a chunk read earlier on the same
//! connection (no reordering), and a token bucket per direction caps the bytes per second.
//! The relay's own TCP handshakes are not delayed; a request and its answer pay
//! `2 × latency`.
//!
//! TLS passes through as plain bytes: a client dials the relay but must verify the server's
//! certificate, so its kubeconfig needs the relay's URL and a name the certificate has
//! ([`rewrite_kubeconfig_server`]).
//!
//! It owns its listener and connections and stops them all on drop. It must not listen on or
//! dial addresses outside 127.0.0.0/8 and 198.18.0.0/15.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::{NetlabError, check_permitted};

/// Bytes read at once: one chunk.
const CHUNK: usize = 16 * 1024;

/// Chunks in flight per direction before the relay stops reading (backpressure).
const IN_FLIGHT: usize = 64;

/// What the relay does to the bytes it carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelaySpec {
    /// One-way delay, added in each direction.
    pub latency: Duration,
    /// Each chunk's delay is `latency` plus a uniform draw from `-jitter..=jitter` (at least 0).
    pub jitter: Duration,
    /// Cap on bytes per second in each direction, or none.
    pub bytes_per_sec: Option<u64>,
}

impl RelaySpec {
    /// A spec with this one-way latency, no jitter and no cap.
    pub fn latency(latency: Duration) -> RelaySpec {
        RelaySpec {
            latency,
            ..RelaySpec::default()
        }
    }

    /// One chunk's delay.
    fn delay(&self) -> Duration {
        let jitter = self.jitter.as_secs_f64();
        let offset = (fastrand::f64() * 2.0 - 1.0) * jitter;
        Duration::from_secs_f64((self.latency.as_secs_f64() + offset).max(0.0))
    }
}

/// A running relay; dropping it closes its listener and every connection through it.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Relay {
    /// Listens on `listen` (port 0 for any) and relays each connection to `target` as `spec`
    /// says. Both must be loopback or lab addresses. Needs a tokio runtime.
    pub async fn start(
        listen: SocketAddr,
        target: SocketAddr,
        spec: RelaySpec,
    ) -> Result<Relay, NetlabError> {
        check_permitted(listen)?;
        check_permitted(target)?;
        let io = |what: String| move |source| NetlabError::Io { what, source };
        let listener = TcpListener::bind(listen)
            .await
            .map_err(io(format!("relay listening on {listen}")))?;
        let addr = listener
            .local_addr()
            .map_err(io(format!("relay on {listen}")))?;
        let task = tokio::spawn(accept(listener, target, spec));
        Ok(Relay { addr, task })
    }

    /// Where the relay listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // The connections are tasks of the JoinSet inside this task: they go with it.
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, target: SocketAddr, spec: RelaySpec) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    connections.spawn(connection(client, target, spec));
                }
                // Out of descriptors, say: try again shortly rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Relays one connection until both directions have ended or either fails; a target that
/// refuses closes the client's connection.
async fn connection(client: TcpStream, target: SocketAddr, spec: RelaySpec) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    // Small writes (TLS records, watch events) must not wait for Nagle on top of the delay.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let _ = tokio::try_join!(
        pipe(client_read, server_write, spec),
        pipe(server_read, client_write, spec)
    );
}

/// One direction: a reader stamps each chunk with its due time, a writer delivers it then,
/// within the bandwidth cap, and half-closes after the last.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    spec: RelaySpec,
) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let read = async move {
        let mut buf = vec![0u8; CHUNK];
        let mut last_due = Instant::now();
        loop {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            // A later chunk with a shorter draw waits for the earlier one: no reordering.
            let due = (Instant::now() + spec.delay()).max(last_due);
            last_due = due;
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                return Ok(());
            }
        }
    };
    let write = async move {
        let mut bucket = spec.bytes_per_sec.map(Bucket::new);
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if let Some(bucket) = &mut bucket {
                bucket.take(chunk.len()).await;
            }
            to.write_all(&chunk).await?;
        }
        to.shutdown().await
    };
    tokio::try_join!(read, write).map(drop)
}

/// A token bucket: `rate` bytes per second, bursts up to `burst`; a chunk larger than the
/// tokens left goes into debt and waits it off.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(bytes_per_sec: u64) -> Bucket {
        let rate = bytes_per_sec.max(1) as f64;
        // 20 ms worth, but at least a chunk, so small caps still pass whole chunks.
        let burst = (rate / 50.0).max(CHUNK as f64);
        Bucket {
            rate,
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    async fn take(&mut self, bytes: usize) {
        let now = Instant::now();
        let earned = now.duration_since(self.last).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(self.burst) - bytes as f64;
        self.last = now;
        if self.tokens < 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(-self.tokens / self.rate)).await;
        }
    }
}

/// `text` (a kubeconfig as kubesim writes it, one cluster) with its `server:` set to
/// `new_url`, and for an `https` URL `tls-server-name: localhost`, a name every kubesim
/// certificate has, so that TLS verification passes whatever address the relay listens on
/// (kube 5 honours `tls-server-name` for SNI and verification). Any earlier
/// `tls-server-name` is replaced.
pub fn rewrite_kubeconfig_server(text: &str, new_url: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed.starts_with("tls-server-name:") {
            continue;
        }
        if trimmed.starts_with("server:") {
            out.push_str(&format!("{indent}server: {new_url}\n"));
            if new_url.starts_with("https://") {
                out.push_str(&format!("{indent}tls-server-name: localhost\n"));
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: east\n  cluster:\n    server: https://198.18.4.2:40123\n    certificate-authority-data: QUJD\nusers:\n- name: admin\n  user:\n    token: t\n";

    #[test]
    fn the_server_is_rewritten_and_the_name_kept_verifiable() {
        let text = rewrite_kubeconfig_server(KUBECONFIG, "https://127.0.0.1:5555");
        assert!(
            text.contains("    server: https://127.0.0.1:5555\n    tls-server-name: localhost\n"),
            "{text}"
        );
        assert!(!text.contains("40123") && text.contains("certificate-authority-data: QUJD"));
        let again = rewrite_kubeconfig_server(&text, "https://127.0.0.1:6666");
        assert_eq!(again.matches("tls-server-name").count(), 1, "{again}");
        let plain = rewrite_kubeconfig_server(KUBECONFIG, "http://127.0.0.1:5555");
        assert!(!plain.contains("tls-server-name"), "{plain}");
    }

    #[tokio::test]
    async fn only_loopback_and_lab_addresses() {
        let spec = RelaySpec::default();
        let local: SocketAddr = "127.0.0.1:0".parse().expect("an address");
        for outside in ["192.0.2.1:80", "10.0.0.1:80", "198.20.0.1:80"] {
            let outside: SocketAddr = outside.parse().expect("an address");
            assert!(matches!(
                Relay::start(local, outside, spec).await,
                Err(NetlabError::NotPermitted(_))
            ));
            assert!(matches!(
                Relay::start(outside, local, spec).await,
                Err(NetlabError::NotPermitted(_))
            ));
        }
    }

    /// An echo server on loopback; answers each connection until it closes.
    async fn echo() -> (SocketAddr, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("an address");
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        (addr, task)
    }

    #[tokio::test]
    async fn jittered_bytes_arrive_in_order_and_late_enough() {
        let (target, server) = echo().await;
        let spec = RelaySpec {
            latency: Duration::from_millis(20),
            jitter: Duration::from_millis(15),
            bytes_per_sec: None,
        };
        let relay = Relay::start("127.0.0.1:0".parse().expect("addr"), target, spec)
            .await
            .expect("relay starts");
        let mut s = TcpStream::connect(relay.local_addr())
            .await
            .expect("connects");
        s.set_nodelay(true).expect("nodelay");
        let started = Instant::now();
        let mut sent = Vec::new();
        for i in 0u8..50 {
            s.write_all(&[i]).await.expect("writes");
            sent.push(i);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut got = vec![0u8; sent.len()];
        tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut got))
            .await
            .expect("echoed within 10 s")
            .expect("reads");
        assert_eq!(got, sent, "no reordering");
        // The last byte went out ≥ 50 ms in and took two legs of ≥ 5 ms each.
        assert!(started.elapsed() >= Duration::from_millis(60));
        server.abort();
    }

    #[tokio::test]
    async fn the_cap_paces_a_bulk_transfer() {
        let (target, server) = echo().await;
        let spec = RelaySpec {
            bytes_per_sec: Some(512 * 1024),
            ..RelaySpec::default()
        };
        let relay = Relay::start("127.0.0.1:0".parse().expect("addr"), target, spec)
            .await
            .expect("relay starts");
        let s = TcpStream::connect(relay.local_addr())
            .await
            .expect("connects");
        let (mut r, mut w) = s.into_split();
        let payload = vec![7u8; 256 * 1024];
        let started = Instant::now();
        let writer = tokio::spawn(async move {
            w.write_all(&payload).await.expect("writes");
            w
        });
        let mut got = vec![0u8; 256 * 1024];
        tokio::time::timeout(Duration::from_secs(10), r.read_exact(&mut got))
            .await
            .expect("echoed within 10 s")
            .expect("reads");
        // 256 KiB at 512 KiB/s, less one burst of 16 KiB: about 470 ms, each way in parallel.
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(400), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        drop(writer.await);
        server.abort();
    }

    #[tokio::test]
    async fn dropping_the_relay_closes_its_connections() {
        let (target, server) = echo().await;
        let relay = Relay::start(
            "127.0.0.1:0".parse().expect("addr"),
            target,
            RelaySpec::default(),
        )
        .await
        .expect("relay starts");
        let addr = relay.local_addr();
        let mut s = TcpStream::connect(addr).await.expect("connects");
        s.write_all(b"x").await.expect("writes");
        let mut one = [0u8; 1];
        s.read_exact(&mut one).await.expect("echoed");
        drop(relay);
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
        assert!(matches!(closed, Ok(Ok(0) | Err(_))), "{closed:?}");
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is gone"
        );
        server.abort();
    }
}
