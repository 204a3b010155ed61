//! UDP, TCP and DNS-over-TLS listeners: thin loops around [`Handler::handle`].
//!
//! Sockets are bound by the caller and handed in (tests bind port 0). TCP
//! and TLS connections share one message loop and one set of [`Limits`]:
//! they stay open across queries (idle timeout well above CoreDNS
//! forward's 10 s reuse, docs/architecture.md, decision 12), pipelined queries are read
//! back to back and answered in order, and a length prefix split from its
//! body is fine as long as the whole message arrives within the message
//! timeout. Every limit hit is counted. This module must not interpret DNS
//! messages, nor know how certificates are loaded (`tls` does).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::cache::Local;
use super::handler::{Handler, Outgoing};
use super::stats::{DnsStats, Limit, Stream};
use super::transport::Transport;
use super::udp;

/// Limits of the stream listeners (TCP and DNS over TLS), each counted
/// in `clusterset_dns_limit_hits_total` when hit ([`Limit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once over TCP and TLS together; one more is
    /// accepted and closed at once.
    pub max_connections: usize,
    /// Close a connection idle this long between queries.
    pub idle_timeout: Duration,
    /// A message (or a TLS handshake) must arrive whole this long after its
    /// first byte: a client dribbling a length prefix is cut off.
    pub message_timeout: Duration,
    /// Answers of one connection waiting for the client to read them; at
    /// this many, reading from it pauses until they are written.
    pub max_in_flight: usize,
    /// From a query's first byte to its answer taken by the kernel; a
    /// client that does not read its answers is cut off after this.
    pub query_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1000,
            // Above CoreDNS forward's 10 s connection reuse.
            idle_timeout: Duration::from_secs(30),
            message_timeout: Duration::from_secs(2),
            max_in_flight: 128,
            query_timeout: Duration::from_secs(5),
        }
    }
}

/// Serves UDP on `socket` with `workers` threads ([`super::udp`]) until
/// `shutdown` is cancelled; each finishes the batch in hand.
pub(crate) async fn serve_udp(
    socket: std::net::UdpSocket,
    handler: Arc<Handler>,
    workers: usize,
    shutdown: CancellationToken,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let threads = match udp::spawn(socket, handler, workers, stop.clone()) {
        Ok(threads) => threads,
        Err(e) => {
            warn!(error = %e, "udp workers could not start");
            return;
        }
    };
    shutdown.cancelled().await;
    stop.store(true, Ordering::Relaxed);
    let joined = tokio::task::spawn_blocking(move || {
        for t in threads {
            let _ = t.join();
        }
    });
    let _ = joined.await;
}

/// The open-connection budget shared by the TCP and TLS listeners.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionSlots(Arc<Semaphore>);

impl ConnectionSlots {
    /// Room for `limits.max_connections` connections.
    pub(crate) fn new(limits: &Limits) -> Self {
        Self(Arc::new(Semaphore::new(limits.max_connections)))
    }

    /// A slot for one more connection, or `None` (counted) when all are taken.
    fn take(&self, stats: &DnsStats) -> Option<OwnedSemaphorePermit> {
        let permit = self.0.clone().try_acquire_owned().ok();
        if permit.is_none() {
            stats.limit_hit(Limit::Connections);
        }
        permit
    }
}

/// Counts a connection open on its transport while alive.
struct Open(Arc<Handler>, Stream);

impl Open {
    fn new(handler: Arc<Handler>, stream: Stream) -> Self {
        handler.stats().connection(stream, true);
        Self(handler, stream)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.stats().connection(self.1, false);
    }
}

/// Accepts TCP connections on `listener` until `shutdown` is cancelled.
pub(crate) async fn serve_tcp(
    listener: TcpListener,
    handler: Arc<Handler>,
    limits: Limits,
    slots: ConnectionSlots,
    shutdown: CancellationToken,
) {
    let accepted = |stream: TcpStream, peer: SocketAddr, handler: Arc<Handler>, shutdown| async move {
        let (rd, wr) = stream.into_split();
        let conn = (&*handler, Transport::Tcp, peer.ip());
        if let Err(e) = connection(rd, wr, conn, limits, shutdown).await {
            debug!(%peer, error = %e, "tcp connection ended");
        }
    };
    accept(listener, handler, Stream::Tcp, slots, shutdown, accepted).await;
}

/// Accepts DNS-over-TLS connections (RFC 7858) on `listener` until
/// `shutdown` is cancelled: the handshake must finish within
/// `message-timeout`, then the connection runs the same message loop as
/// TCP. `acceptor` reads the certificate store at each handshake, so a
/// reloaded certificate serves new connections while open ones go on.
pub(crate) async fn serve_tls(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    handler: Arc<Handler>,
    limits: Limits,
    slots: ConnectionSlots,
    shutdown: CancellationToken,
) {
    let accepted = move |stream: TcpStream,
                         peer: SocketAddr,
                         handler: Arc<Handler>,
                         shutdown: CancellationToken| {
        let acceptor = acceptor.clone();
        async move {
            let stats = handler.stats();
            let handshake = tokio::select! {
                r = tokio::time::timeout(limits.message_timeout, acceptor.accept(stream)) => r,
                () = shutdown.cancelled() => return,
            };
            let tls = match handshake {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    stats.tls_handshake_failed();
                    debug!(%peer, error = %e, "tls handshake failed");
                    return;
                }
                Err(_) => {
                    stats.tls_handshake_failed();
                    stats.limit_hit(Limit::MessageTimeout);
                    debug!(%peer, "tls handshake timed out");
                    return;
                }
            };
            let (rd, wr) = tokio::io::split(tls);
            let conn = (&*handler, Transport::Tls, peer.ip());
            let served = connection(rd, wr, conn, limits, shutdown);
            if let Err(e) = served.await {
                debug!(%peer, error = %e, "tls connection ended");
            }
        }
    };
    accept(listener, handler, Stream::Tls, slots, shutdown, accepted).await;
}

/// The accept loop of a stream listener: each connection gets a slot (or
/// is closed at once, counted), is counted open while it lives, and runs
/// `serve` in its own task; on `shutdown` every connection task finishes.
async fn accept<F, Fut>(
    listener: TcpListener,
    handler: Arc<Handler>,
    stream: Stream,
    slots: ConnectionSlots,
    shutdown: CancellationToken,
    serve: F,
) where
    F: Fn(TcpStream, SocketAddr, Arc<Handler>, CancellationToken) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut conns = JoinSet::new();
    loop {
        let (conn, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!(error = %e, transport = ?stream, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let Some(permit) = slots.take(handler.stats()) else {
            debug!(%peer, transport = ?stream, "connection refused: max-connections open");
            continue;
        };
        let _ = conn.set_nodelay(true);
        let open = Open::new(handler.clone(), stream);
        let served = serve(conn, peer, handler.clone(), shutdown.clone());
        conns.spawn(async move {
            served.await;
            drop((open, permit));
        });
    }
    // Each connection answers what it has read and closes; one stuck on a
    // client that does not read is aborted.
    let finish = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(3), finish)
        .await
        .is_err()
    {
        conns.shutdown().await;
    }
}

/// Runs the DNS message loop of one stream connection (TCP, or TLS once
/// the handshake is done) over `transport` until the client closes it, a
/// limit cuts it off, or `shutdown`.
pub(crate) async fn connection<R, W>(
    rd: R,
    wr: W,
    (handler, transport, peer): (&Handler, Transport, IpAddr),
    limits: Limits,
    shutdown: CancellationToken,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut rd = BufReader::with_capacity(16 * 1024, rd);
    let mut wr = BufWriter::with_capacity(16 * 1024, wr);
    messages(
        &mut rd,
        &mut wr,
        (handler, transport, peer),
        limits,
        shutdown,
    )
    .await?;
    // A clean close: FIN, and close_notify over TLS, for a client that
    // still reads; one that does not gets no more time than a message.
    let _ = tokio::time::timeout(limits.message_timeout, wr.shutdown()).await;
    Ok(())
}

/// The message loop of [`connection`]; returns when the connection should
/// close.
async fn messages<R, W>(
    rd: &mut BufReader<R>,
    wr: &mut BufWriter<W>,
    (handler, transport, peer): (&Handler, Transport, IpAddr),
    limits: Limits,
    shutdown: CancellationToken,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let stats = handler.stats();
    let mut msg = Vec::with_capacity(512);
    let mut out = Vec::with_capacity(512);
    let mut local = handler.stream_local();
    // Answers written into `wr` but not yet flushed, and the first byte of
    // the oldest of them: its query-timeout bounds every write until flushed.
    let mut waiting = 0usize;
    let mut oldest: Option<Instant> = None;
    loop {
        let more = tokio::select! {
            r = tokio::time::timeout(limits.idle_timeout, rd.fill_buf()) => match r {
                Ok(Ok(buf)) => !buf.is_empty(),
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    stats.limit_hit(Limit::IdleTimeout);
                    return Ok(());
                }
            },
            () = shutdown.cancelled() => {
                return drain(rd.buffer(), (handler, transport, peer), &mut local, &mut out, wr).await;
            }
        };
        if !more {
            return Ok(());
        }
        let first_byte = Instant::now();
        if !read_message(rd, &mut msg, limits.message_timeout, stats).await? {
            return Ok(());
        }
        if let Some(xfr) = handler.transfer(&msg, peer) {
            // The answers read before it go first, in order.
            let deadline = oldest.unwrap_or(first_byte) + limits.query_timeout;
            if waiting > 0 && !flushed(wr, deadline, stats).await? {
                return Ok(());
            }
            (waiting, oldest) = (0, None);
            if !transferred(wr, xfr, limits.query_timeout, stats).await? {
                return Ok(());
            }
            continue;
        }
        let deadline = oldest.unwrap_or(first_byte) + limits.query_timeout;
        let written = tokio::time::timeout_at(
            deadline.into(),
            answer((handler, transport, peer), &mut local, &msg, &mut out, wr),
        );
        match written.await {
            Ok(Ok(true)) => {
                waiting += 1;
                oldest.get_or_insert(first_byte);
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                stats.limit_hit(Limit::QueryTimeout);
                return Ok(());
            }
        }
        // Flush once the pipeline is drained, not after every answer; a
        // client pipelining past max-in-flight waits for its answers to go.
        let pipelined = !rd.buffer().is_empty();
        if waiting > 0 && (!pipelined || waiting >= limits.max_in_flight) {
            if pipelined {
                stats.limit_hit(Limit::InFlight);
            }
            let deadline = oldest.unwrap_or(first_byte) + limits.query_timeout;
            if !flushed(wr, deadline, stats).await? {
                return Ok(());
            }
            waiting = 0;
            oldest = None;
        }
    }
}

/// Reads one length-prefixed message into `msg` within `timeout`; false
/// (counted) when the client was too slow and the connection should close.
async fn read_message<R: AsyncRead + Unpin>(
    rd: &mut BufReader<R>,
    msg: &mut Vec<u8>,
    timeout: Duration,
    stats: &DnsStats,
) -> io::Result<bool> {
    let whole = async {
        let len = usize::from(rd.read_u16().await?);
        msg.resize(len, 0);
        rd.read_exact(msg).await
    };
    match tokio::time::timeout(timeout, whole).await {
        Ok(Ok(_)) => Ok(true),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            stats.limit_hit(Limit::MessageTimeout);
            Ok(false)
        }
    }
}

/// Stopping: answers the whole queries already read (`held`), flushes, and
/// says the connection may close.
async fn drain<W: AsyncWrite + Unpin>(
    mut held: &[u8],
    (handler, transport, peer): (&Handler, Transport, IpAddr),
    local: &mut Local,
    out: &mut Vec<u8>,
    wr: &mut BufWriter<W>,
) -> io::Result<()> {
    while let [hi, lo, rest @ ..] = held {
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        let Some((msg, after)) = rest.split_at_checked(len) else {
            break;
        };
        answer((handler, transport, peer), local, msg, out, wr).await?;
        held = after;
    }
    wr.flush().await
}

/// Flushes `wr` by `deadline`; false (counted) when the client did not read
/// in time and the connection should close.
async fn flushed<W: AsyncWrite + Unpin>(
    wr: &mut BufWriter<W>,
    deadline: Instant,
    stats: &DnsStats,
) -> io::Result<bool> {
    match tokio::time::timeout_at(deadline.into(), wr.flush()).await {
        Ok(Ok(())) => Ok(true),
        Ok(Err(e)) => Err(e),
        Err(_) => {
            stats.limit_hit(Limit::QueryTimeout);
            Ok(false)
        }
    }
}

/// Writes the messages of a zone transfer as they are produced, each at
/// its turn of the transfers' byte rate and taken by the kernel within
/// `each` (a transfer may take longer than any one query should); false
/// (counted) when the client stopped reading and the connection should
/// close.
async fn transferred<W: AsyncWrite + Unpin>(
    wr: &mut BufWriter<W>,
    mut xfr: Outgoing,
    each: Duration,
    stats: &DnsStats,
) -> io::Result<bool> {
    while let Some(m) = xfr.messages.recv().await {
        if let Some(at) = xfr.pacer.slot(m.len(), xfr.rate, Instant::now()) {
            tokio::time::sleep_until(at.into()).await;
        }
        let write = async {
            // Each message is at most 65,535 octets (`transfer`).
            wr.write_all(&(m.len() as u16).to_be_bytes()).await?;
            wr.write_all(&m).await?;
            wr.flush().await
        };
        match tokio::time::timeout(each, write).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                stats.limit_hit(Limit::QueryTimeout);
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Answers one message received over `transport` (TCP or TLS) into `wr`,
/// length-prefixed (unflushed). Returns whether there was an answer.
async fn answer<W: AsyncWrite + Unpin>(
    (handler, transport, _): (&Handler, Transport, IpAddr),
    local: &mut Local,
    msg: &[u8],
    out: &mut Vec<u8>,
    wr: &mut W,
) -> io::Result<bool> {
    if !handler.handle(local, msg, transport, out) {
        return Ok(false);
    }
    wr.write_all(&(out.len() as u16).to_be_bytes()).await?;
    wr.write_all(out).await?;
    Ok(true)
}

/// Binds UDP and TCP on the same address. With port 0, TCP is bound to the
/// port UDP was given (retried a few times if that port is taken for TCP).
pub(crate) fn bind_dns(
    addr: SocketAddr,
) -> io::Result<(std::net::UdpSocket, std::net::TcpListener)> {
    let attempts = if addr.port() == 0 { 16 } else { 1 };
    let mut last = None;
    for _ in 0..attempts {
        let udp = udp::bind(addr)?;
        let bound = udp.local_addr()?;
        match std::net::TcpListener::bind(bound) {
            Ok(tcp) => {
                tcp.set_nonblocking(true)?;
                return Ok((udp, tcp));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("could not bind TCP and UDP on one port")))
}
