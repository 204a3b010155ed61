//! UDP and TCP listeners: thin loops around [`Handler::handle`].
//!
//! Sockets are bound by the caller and handed in (tests bind port 0). TCP
//! connections stay open across queries (idle timeout well above CoreDNS
//! forward's 10 s reuse, DESIGN.md decision 12), pipelined queries are read
//! back to back and answered in order, and a length prefix split from its
//! body is fine. This module must not interpret DNS messages.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{Handler, Local, Transport, udp};

/// TCP connection limits.
#[derive(Debug, Clone, Copy)]
pub struct TcpLimits {
    /// Close a connection idle this long between queries.
    pub idle_timeout: Duration,
    /// Give a started message this long to arrive in full.
    pub read_timeout: Duration,
}

impl Default for TcpLimits {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(10),
        }
    }
}

/// Serves UDP on `socket` with `workers` threads ([`super::udp`]) until
/// `shutdown` is cancelled; each finishes the batch in hand.
pub async fn serve_udp(
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

/// Accepts TCP connections on `listener` until `shutdown` is cancelled.
pub async fn serve_tcp(
    listener: TcpListener,
    handler: Arc<Handler>,
    limits: TcpLimits,
    shutdown: CancellationToken,
) {
    let mut conns = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    warn!(error = %e, "tcp accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (handler, shutdown) = (handler.clone(), shutdown.clone());
        conns.spawn(async move {
            if let Err(e) = connection(stream, &handler, limits, shutdown).await {
                debug!(%peer, error = %e, "tcp connection ended");
            }
        });
    }
    conns.shutdown().await;
}

async fn connection(
    stream: TcpStream,
    handler: &Handler,
    limits: TcpLimits,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    let mut rd = BufReader::with_capacity(16 * 1024, rd);
    let mut wr = BufWriter::with_capacity(16 * 1024, wr);
    let mut msg = Vec::with_capacity(512);
    let mut out = Vec::with_capacity(512);
    // No front table: connections are many and each sees few names.
    let mut local = Local::new(0);
    loop {
        let len = tokio::select! {
            r = tokio::time::timeout(limits.idle_timeout, rd.read_u16()) => match r {
                Ok(Ok(len)) => usize::from(len),
                Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(()),
            },
            () = shutdown.cancelled() => {
                // Stopping: answer the whole queries already read, then close.
                let mut held = rd.buffer();
                while let [hi, lo, rest @ ..] = held {
                    let len = usize::from(u16::from_be_bytes([*hi, *lo]));
                    let Some((msg, after)) = rest.split_at_checked(len) else {
                        break;
                    };
                    answer(handler, &mut local, msg, &mut out, &mut wr).await?;
                    held = after;
                }
                wr.flush().await?;
                return Ok(());
            }
        };
        msg.resize(len, 0);
        match tokio::time::timeout(limits.read_timeout, rd.read_exact(&mut msg)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Ok(()),
        }
        answer(handler, &mut local, &msg, &mut out, &mut wr).await?;
        // Flush once the pipeline is drained, not after every answer.
        if rd.buffer().is_empty() {
            wr.flush().await?;
        }
    }
}

/// Answers one TCP message into `wr`, length-prefixed (unflushed).
async fn answer<W: tokio::io::AsyncWrite + Unpin>(
    handler: &Handler,
    local: &mut Local,
    msg: &[u8],
    out: &mut Vec<u8>,
    wr: &mut W,
) -> io::Result<()> {
    if handler.handle(local, msg, Transport::Tcp, out) {
        wr.write_all(&(out.len() as u16).to_be_bytes()).await?;
        wr.write_all(out).await?;
    }
    Ok(())
}

/// Binds UDP and TCP on the same address. With port 0, TCP is bound to the
/// port UDP was given (retried a few times if that port is taken for TCP).
pub fn bind_dns(addr: SocketAddr) -> io::Result<(std::net::UdpSocket, std::net::TcpListener)> {
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
