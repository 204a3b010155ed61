//! UDP workers: one thread per worker, each on its own socket where the
//! kernel allows it (`SO_REUSEPORT` on the same address), receiving and
//! sending in batches with `recvmmsg`/`sendmmsg`.
//!
//! Owns the only `unsafe` code of the crate: the two system calls and the
//! message headers they fill. A batch is whatever the kernel has queued when
//! the first datagram arrives (`MSG_WAITFORONE`), so an idle server answers
//! one query per call with no added latency and a loaded one amortises each
//! call over up to [`BATCH`] queries. It must not interpret DNS messages.

// The one place the crate uses `unsafe`: the recvmmsg/sendmmsg batches
// (each block states its invariant). Denied everywhere else by Cargo.toml.
#![allow(unsafe_code)]

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tracing::debug;

use super::cache::Local;
use super::handler::Handler;
use super::transport::Transport;

/// Datagrams per system call at most.
pub(crate) const BATCH: usize = 32;
/// Largest datagram read (a query never needs more; nothing is cut short).
const RECV_BUF: usize = 65_535;
/// Front-table slots per worker ([`Local`]): a few thousand hot names cost
/// a pointer each.
const FRONT_SLOTS: usize = 4096;
/// Batches a stopping worker answers at most from its socket's queue.
const DRAIN_ROUNDS: usize = 64;
/// How often a blocked worker looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);
/// Receive buffer asked for on every socket (the kernel caps it at
/// `net.core.rmem_max`, and doubles what it grants for its own overhead).
/// The default (`rmem_default`, often 208 KiB) holds only a few hundred
/// queries, a few milliseconds at tens of thousands of queries per second:
/// a worker descheduled that long on a busy machine sees the kernel drop
/// the rest, which clients can only take for lost answers (the soak test,
/// at 95,000 queries/s on two cores, lost 0.1–2 % of them every second).
const RECV_BUFFER: usize = 4 << 20;

/// Raises the socket's receive buffer to [`RECV_BUFFER`] where the kernel
/// allows it; a refusal leaves the default, which still works.
fn grow_receive_buffer(socket: &Socket) {
    if socket.recv_buffer_size().is_ok_and(|n| n >= RECV_BUFFER) {
        return;
    }
    if let Err(e) = socket.set_recv_buffer_size(RECV_BUFFER) {
        debug!(error = %e, "cannot raise the UDP receive buffer; keeping the default");
    }
}

/// Binds a UDP socket on `addr`. A fixed port gets `SO_REUSEPORT`, so that
/// each worker can bind a socket of its own to it ([`spawn`]); port 0 does
/// not, because the kernel may hand a port 0 bind with `SO_REUSEPORT` a port
/// already shared by another such socket of the same user.
pub(crate) fn bind(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.port() != 0 {
        socket.set_reuse_port(true)?;
    }
    grow_receive_buffer(&socket);
    socket.bind(&SockAddr::from(addr))?;
    Ok(socket.into())
}

/// One socket per worker: `first`, then sockets bound to its address with
/// `SO_REUSEPORT` where possible, else clones of `first` (the workers then
/// share its queue).
fn worker_sockets(first: UdpSocket, workers: usize) -> io::Result<Vec<UdpSocket>> {
    let addr = first.local_addr()?;
    let mut sockets = Vec::with_capacity(workers);
    for _ in 1..workers.max(1) {
        let own = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
            .and_then(|s| {
                s.set_reuse_port(true)?;
                grow_receive_buffer(&s);
                s.bind(&SockAddr::from(addr))?;
                Ok(UdpSocket::from(s))
            });
        match own {
            Ok(s) => sockets.push(s),
            Err(_) => sockets.push(first.try_clone()?),
        }
    }
    sockets.insert(0, first);
    for s in &sockets {
        s.set_nonblocking(false)?;
        s.set_read_timeout(Some(STOP_POLL))?;
    }
    Ok(sockets)
}

/// Starts `workers` threads answering on `socket` (and its siblings) until
/// `stop` is set. Each thread finishes the batch in hand before it exits.
pub(crate) fn spawn(
    socket: UdpSocket,
    handler: Arc<Handler>,
    workers: usize,
    stop: Arc<AtomicBool>,
) -> io::Result<Vec<JoinHandle<()>>> {
    let sockets = worker_sockets(socket, workers)?;
    let mut threads = Vec::with_capacity(sockets.len());
    for (i, socket) in sockets.into_iter().enumerate() {
        let (handler, stop) = (handler.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(format!("dns-udp-{i}"))
            .spawn(move || Worker::new(socket).run(&handler, &stop))?;
        threads.push(thread);
    }
    Ok(threads)
}

/// A worker's buffers and the message headers pointing into them.
struct Worker {
    socket: UdpSocket,
    bufs: Vec<Box<[u8]>>,
    outs: Vec<Vec<u8>>,
    peers: Vec<libc::sockaddr_storage>,
    recv_iov: Vec<libc::iovec>,
    send_iov: Vec<libc::iovec>,
    recv: Vec<libc::mmsghdr>,
    send: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in the headers point into this struct's own heap
// buffers, which move with it; no other thread sees them.
unsafe impl Send for Worker {}

fn empty_msg() -> libc::mmsghdr {
    // SAFETY: mmsghdr is a plain C struct for which all-zero is valid (null
    // pointers, zero lengths).
    unsafe { std::mem::zeroed() }
}

impl Worker {
    fn new(socket: UdpSocket) -> Self {
        let mut bufs: Vec<Box<[u8]>> = (0..BATCH)
            .map(|_| vec![0u8; RECV_BUF].into_boxed_slice())
            .collect();
        // SAFETY: all-zero is a valid sockaddr_storage.
        let peers = vec![unsafe { std::mem::zeroed::<libc::sockaddr_storage>() }; BATCH];
        let recv_iov = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let send_iov = (0..BATCH)
            .map(|_| libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            })
            .collect();
        Self {
            socket,
            bufs,
            outs: (0..BATCH).map(|_| Vec::with_capacity(1232)).collect(),
            peers,
            recv_iov,
            send_iov,
            recv: (0..BATCH).map(|_| empty_msg()).collect(),
            send: (0..BATCH).map(|_| empty_msg()).collect(),
        }
    }

    fn run(mut self, handler: &Handler, stop: &AtomicBool) {
        let mut local = Local::new(FRONT_SLOTS);
        while !stop.load(Ordering::Relaxed) {
            self.round(handler, &mut local, libc::MSG_WAITFORONE);
        }
        // Stopping: answer what the kernel has already queued for us, then
        // close the socket (later queries are refused by the kernel, not
        // silently dropped).
        for _ in 0..DRAIN_ROUNDS {
            if self.round(handler, &mut local, libc::MSG_DONTWAIT) == 0 {
                break;
            }
        }
    }

    /// Receives one batch (`flags`: wait for one, or not at all), answers
    /// it; returns the datagrams received.
    fn round(&mut self, handler: &Handler, local: &mut Local, flags: libc::c_int) -> usize {
        let n = match self.receive(flags) {
            Ok(n) => n,
            Err(e) => {
                // Timeouts let the stop flag be seen; ICMP errors from
                // earlier sends surface here too. Keep serving.
                if !matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) {
                    debug!(error = %e, "udp receive error");
                }
                return 0;
            }
        };
        let mut replies = 0;
        for i in 0..n {
            let len = self.recv[i].msg_len as usize;
            let out = &mut self.outs[replies];
            if !handler.handle(local, &self.bufs[i][..len], Transport::Udp, out) {
                continue;
            }
            let peer_len = self.recv[i].msg_hdr.msg_namelen;
            self.peers.swap(i, replies);
            self.send_iov[replies] = libc::iovec {
                iov_base: out.as_mut_ptr().cast(),
                iov_len: out.len(),
            };
            let msg = &mut self.send[replies].msg_hdr;
            msg.msg_name = std::ptr::from_mut(&mut self.peers[replies]).cast();
            msg.msg_namelen = peer_len;
            msg.msg_iov = std::ptr::from_mut(&mut self.send_iov[replies]);
            msg.msg_iovlen = 1;
            replies += 1;
        }
        self.transmit(replies);
        n
    }

    /// Takes up to [`BATCH`] datagrams; `flags` says whether to wait for
    /// the first.
    fn receive(&mut self, flags: libc::c_int) -> io::Result<usize> {
        for i in 0..BATCH {
            let msg = &mut self.recv[i].msg_hdr;
            msg.msg_name = std::ptr::from_mut(&mut self.peers[i]).cast();
            msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            msg.msg_iov = std::ptr::from_mut(&mut self.recv_iov[i]);
            msg.msg_iovlen = 1;
            msg.msg_control = std::ptr::null_mut();
            msg.msg_controllen = 0;
            msg.msg_flags = 0;
        }
        // SAFETY: `recv` holds BATCH headers, each pointing at a live
        // sockaddr_storage and a live iovec over a buffer of RECV_BUF bytes;
        // the kernel writes only within them.
        let n = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                self.recv.as_mut_ptr(),
                BATCH as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Sends the first `count` prepared replies; a reply the kernel refuses
    /// is skipped, the rest still go.
    fn transmit(&mut self, count: usize) {
        let mut sent = 0;
        while sent < count {
            // SAFETY: headers `sent..count` were filled by `run` and point at
            // live peers, iovecs and reply buffers that are not touched until
            // this call returns.
            let n = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    self.send[sent..].as_mut_ptr(),
                    (count - sent) as libc::c_uint,
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                debug!(error = %e, "udp send failed");
                sent += 1;
            } else {
                sent += n as usize;
            }
        }
    }
}

#[cfg(test)]
mod tests;
