//! Every datagram of a burst larger than a batch gets exactly its answer,
//! from one worker or several sharing a port.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::*;
use crate::dns::stats::DnsStats;
use crate::model::{Settings, Snapshot};
use crate::vocab::name::ZoneName;

fn handler() -> Arc<Handler> {
    let zone = ZoneName::new("clusterset.local").expect("zone");
    let snap = Snapshot::empty(Arc::new(Settings::new(zone)));
    Arc::new(Handler::new(
        Arc::new(ArcSwap::from_pointee(snap)),
        Arc::new(DnsStats::default()),
        1 << 20,
    ))
}

/// A SOA query for the apex with `id`.
fn soa_query(id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    q.extend_from_slice(b"\x0aclusterset\x05local\x00\x00\x06\x00\x01");
    q
}

/// Sends `per_client` queries from each client socket back to back, then
/// collects replies for at most 5 s. Returns rcode by ID.
fn burst(server: SocketAddr, clients: usize, per_client: u16) -> BTreeMap<u16, u8> {
    let sockets: Vec<UdpSocket> = (0..clients)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0").expect("client socket");
            s.set_read_timeout(Some(Duration::from_millis(50)))
                .expect("timeout");
            s
        })
        .collect();
    for (c, s) in sockets.iter().enumerate() {
        for i in 0..per_client {
            let id = c as u16 * per_client + i;
            s.send_to(&soa_query(id), server).expect("send");
        }
    }
    let want = clients * usize::from(per_client);
    let mut got = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 1500];
    while got.len() < want && Instant::now() < deadline {
        for s in &sockets {
            while let Ok(n) = s.recv(&mut buf) {
                assert!(n >= 12, "a header");
                let id = u16::from_be_bytes([buf[0], buf[1]]);
                assert_eq!(buf[2] & 0x80, 0x80, "a response");
                assert!(
                    got.insert(id, buf[3] & 0x0F).is_none(),
                    "one reply per query"
                );
            }
        }
    }
    got
}

fn serve(socket: UdpSocket, workers: usize) -> (SocketAddr, Arc<AtomicBool>, Vec<JoinHandle<()>>) {
    let addr = socket.local_addr().expect("addr");
    let stop = Arc::new(AtomicBool::new(false));
    let threads = spawn(socket, handler(), workers, stop.clone()).expect("spawn");
    (addr, stop, threads)
}

fn stop_all(stop: &AtomicBool, threads: Vec<JoinHandle<()>>) {
    let started = Instant::now();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("worker exits cleanly");
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "workers stop promptly"
    );
}

#[test]
fn a_burst_larger_than_a_batch_is_answered_once_each() {
    let socket = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let (addr, stop, threads) = serve(socket, 1);
    let got = burst(addr, 1, 3 * BATCH as u16);
    assert_eq!(got.len(), 3 * BATCH);
    assert!(got.values().all(|&rcode| rcode == 0), "NOERROR: {got:?}");
    stop_all(&stop, threads);
}

#[test]
fn workers_on_a_port_0_socket_share_it() {
    let socket = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let sockets = worker_sockets(socket, 3).expect("sockets");
    let addrs: Vec<SocketAddr> = sockets
        .iter()
        .map(|s| s.local_addr().expect("addr"))
        .collect();
    assert!(addrs.iter().all(|a| *a == addrs[0]));
    for s in &sockets {
        let s = socket2::SockRef::from(s);
        assert!(
            !s.reuse_port().expect("getsockopt"),
            "port 0 never shares by SO_REUSEPORT"
        );
    }
}

#[test]
fn workers_on_a_fixed_port_get_sockets_of_their_own() {
    // A port of our own on an address no other test uses: bind port 0
    // without sharing, then take that port with SO_REUSEPORT.
    let probe = UdpSocket::bind("127.0.0.77:0").expect("probe");
    let addr = probe.local_addr().expect("addr");
    drop(probe);
    let socket = bind(addr).expect("bind with SO_REUSEPORT");
    let sockets = worker_sockets(socket.try_clone().expect("clone"), 2).expect("sockets");
    for s in &sockets {
        assert!(socket2::SockRef::from(s).reuse_port().expect("getsockopt"));
    }
    drop(sockets);
    let (addr, stop, threads) = serve(socket, 2);
    assert_eq!(threads.len(), 2);
    // Many source ports, so the kernel spreads them over both sockets.
    let got = burst(addr, 16, 8);
    assert_eq!(got.len(), 16 * 8);
    stop_all(&stop, threads);
}
