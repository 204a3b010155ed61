//! A batching UDP and pipelined TCP DNS load generator, and the data generator of
//! `benches/load.sh`.
//!
//! ```text
//! cargo bench --bench loadgen -- --server 127.0.0.1:5353 --queries FILE \
//!     [--duration 10] [--sockets 8] [--window 256] [--edns 1232] [--timeout-ms 1000]
//! cargo bench --bench loadgen -- --server 127.0.0.1:5353 --queries FILE --tcp \
//!     [--connections 100] [--window 8] [--duration 10] [--edns 1232] [--timeout-ms 1000]
//! cargo bench --bench loadgen -- --respond 127.0.0.1:5355 [--tcp] [--duration 3600]
//! cargo bench --bench loadgen -- --generate DIR [--names 19000]
//! cargo bench --bench loadgen -- --make-queries ZONEFILE --out FILE [--zone clusterset.local]
//! cargo test --bench loadgen          # smoke: in-process responder, 1 s
//! ```
//!
//! Load mode: the queries file has one `name TYPE` per line (dnsperf's format; `#` comments and
//! blank lines skipped). Every query is encoded once up front. Each of `--sockets` non-blocking
//! UDP sockets, connected to the server, keeps `--window` queries outstanding (closed loop): one
//! thread busy-polls every socket, receiving with `recvmmsg` and refilling free slots with
//! `sendmmsg`. A reply is matched by socket and DNS ID (the slot index sits in the ID's low bits,
//! a per-socket generation in the high bits); a query outstanding longer than `--timeout-ms` is
//! counted lost and its slot reused. Latency goes into a log-linear histogram (≈1.6 % buckets),
//! so nothing is allocated per query. The last line is machine-readable:
//! `RESULT qps=… p50_us=… p90_us=… p99_us=… max_us=… answered=… lost=… client_cpu_us_per_q=…`.
//!
//! TCP mode (`--tcp`): `--connections` non-blocking connections, each with `--window` queries
//! pipelined (RFC 7766: 2-octet length, then the message), the same queries, IDs, histogram and
//! report (plus `reconnects=`). One thread busy-polls an epoll set, reads once per ready
//! connection and answers every whole reply the buffer holds (a partial tail waits for the next
//! read), and refills a connection's free slots with one write. A connection the server closes
//! loses what it had in flight (counted lost) and is reopened.
//!
//! Respond mode answers each UDP datagram, or with `--tcp` each length-prefixed message, with
//! itself, QR set: the floor under every server's figure (see [`respond`], [`respond_tcp`]).
//!
//! Generate mode writes `DIR/zones/<cluster>/<namespace>.yaml` for four clusters (`west` local,
//! `east`, `north`, `south`) with flat, gateway-mode, headless and federated Services of the demo's
//! shape, sized so that `clusterset-dns dump --local-cluster west` gives about `--names` names
//! (about 4 records per name). Make-queries mode reads that dump and writes the query mix:
//! 70 % A on names that have A records, 10 % SRV on names that have SRV records, 10 % AAAA on
//! names with A but no AAAA (NODATA), 10 % names that do not exist (NXDOMAIN).

// A load generator drives raw sockets (recvmmsg/sendmmsg, busy polling);
// each unsafe block states its invariant.
#![allow(unsafe_code)]

mod zonegen;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zonegen::{CLUSTERS, FEDERATED, FLAT, GATEWAY, Ips, gateway_doc, service_doc, slice_doc};

// ---------------------------------------------------------------------------------------------
// Arguments

#[derive(Debug, Clone)]
struct LoadArgs {
    server: SocketAddr,
    queries: PathBuf,
    duration: Duration,
    sockets: usize,
    window: usize,
    edns: Option<u16>,
    timeout: Duration,
    /// TCP mode: `connections` connections with `window` queries pipelined on each.
    tcp: bool,
    connections: usize,
}

fn usage() -> ! {
    eprintln!(
        "usage: loadgen --server ADDR --queries FILE [--duration S] [--sockets N] [--window N] \
         [--edns SIZE] [--timeout-ms MS]\n       \
         loadgen --server ADDR --queries FILE --tcp [--connections N] [--window N] [--duration S] \
         [--edns SIZE] [--timeout-ms MS]\n       loadgen --generate DIR [--names N]\n       \
         loadgen --make-queries ZONEFILE --out FILE [--zone ZONE] [--count N]\n       \
         loadgen --respond ADDR [--tcp] [--duration S]"
    );
    std::process::exit(2)
}

fn main() {
    // Cargo appends `--bench` under `cargo bench`; nothing is passed under `cargo test`.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench" && a != "--test" && a != "--nocapture")
        .collect();
    let mut opts: BTreeMap<String, String> = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let key = args[i]
            .strip_prefix("--")
            .unwrap_or_else(|| usage())
            .to_string();
        if key == "tcp" {
            opts.insert(key, String::new());
            i += 1;
            continue;
        }
        let value = args.get(i + 1).cloned().unwrap_or_else(|| usage());
        opts.insert(key, value);
        i += 2;
    }
    let num = |k: &str, default: u64| -> u64 {
        opts.get(k)
            .map(|v| v.parse().unwrap_or_else(|_| usage()))
            .unwrap_or(default)
    };
    if let Some(dir) = opts.get("generate") {
        let names = num("names", 19_000) as usize;
        let stats = generate(Path::new(dir), names).expect("generate");
        println!("{stats}");
        return;
    }
    if let Some(zone_file) = opts.get("make-queries") {
        let out = opts.get("out").unwrap_or_else(|| usage());
        let zone = opts
            .get("zone")
            .map(String::as_str)
            .unwrap_or("clusterset.local");
        let text = std::fs::read_to_string(zone_file).expect("read zone file");
        let queries = make_queries(&text, zone, num("count", 100_000) as usize);
        std::fs::write(out, queries).expect("write queries");
        return;
    }
    let tcp = opts.contains_key("tcp");
    if let Some(addr) = opts.get("respond") {
        let addr: SocketAddr = addr.parse().unwrap_or_else(|_| usage());
        let until = Instant::now() + Duration::from_secs(num("duration", 3600));
        let stop = std::sync::atomic::AtomicBool::new(false);
        let answered = if tcp {
            let listener = TcpListener::bind(addr).expect("bind responder");
            respond_tcp(&listener, until, &stop)
        } else {
            let socket = UdpSocket::bind(addr).expect("bind responder");
            respond(&socket, until, &stop)
        };
        println!("RESULT answered={answered}");
        return;
    }
    let Some(server) = opts.get("server") else {
        smoke();
        return;
    };
    let la = LoadArgs {
        server: server.parse().unwrap_or_else(|_| usage()),
        queries: opts.get("queries").unwrap_or_else(|| usage()).into(),
        duration: Duration::from_secs_f64(
            opts.get("duration")
                .map(|v| v.parse().unwrap_or_else(|_| usage()))
                .unwrap_or(10.0),
        ),
        sockets: num("sockets", 8).clamp(1, 1024) as usize,
        window: num("window", if tcp { 8 } else { 256 }).clamp(1, 4096) as usize,
        edns: opts
            .get("edns")
            .map(|v| v.parse().unwrap_or_else(|_| usage())),
        timeout: Duration::from_millis(num("timeout-ms", 1000)),
        tcp,
        connections: num("connections", 100).clamp(1, 10_000) as usize,
    };
    let text = std::fs::read_to_string(&la.queries).expect("read queries file");
    let queries = Queries::parse(&text, la.edns).unwrap_or_else(|e| {
        eprintln!("queries file: {e}");
        std::process::exit(2)
    });
    let report = if la.tcp {
        run_tcp(&la, &queries)
    } else {
        run(&la, &queries)
    };
    let report = report.unwrap_or_else(|e| {
        eprintln!("load run against {}: {e}", la.server);
        std::process::exit(1)
    });
    print!("{}", report.render(&la));
}

// ---------------------------------------------------------------------------------------------
// Queries

/// Every query encoded once, back to back, with ID 0.
struct Queries {
    wire: Vec<u8>,
    spans: Vec<(u32, u16)>,
}

fn qtype_code(t: &str) -> Option<u16> {
    Some(match t.to_ascii_uppercase().as_str() {
        "A" => 1,
        "NS" => 2,
        "CNAME" => 5,
        "SOA" => 6,
        "PTR" => 12,
        "MX" => 15,
        "TXT" => 16,
        "AAAA" => 28,
        "SRV" => 33,
        "ANY" => 255,
        other => other.strip_prefix("TYPE")?.parse().ok()?,
    })
}

fn encode_query(
    name: &str,
    qtype: u16,
    edns: Option<u16>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    out.extend_from_slice(&[0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    let name = name.strip_suffix('.').unwrap_or(name);
    let mut total = 1;
    if !name.is_empty() {
        for label in name.split('.') {
            if label.is_empty() || label.len() > 63 {
                return Err(format!("bad label in {name:?}"));
            }
            total += label.len() + 1;
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
    }
    if total > 255 {
        return Err(format!("name too long: {name:?}"));
    }
    out.push(0);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    if let Some(size) = edns {
        out.extend_from_slice(&[0, 0, 41]);
        out.extend_from_slice(&size.to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    Ok(())
}

impl Queries {
    fn parse(text: &str, edns: Option<u16>) -> Result<Self, String> {
        let mut q = Queries {
            wire: Vec::new(),
            spans: Vec::new(),
        };
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut it = line.split_whitespace();
            let name = it.next().unwrap_or_default();
            let qtype = it.next().unwrap_or("A");
            let code =
                qtype_code(qtype).ok_or_else(|| format!("line {}: type {qtype:?}", n + 1))?;
            let start = q.wire.len();
            encode_query(name, code, edns, &mut q.wire)
                .map_err(|e| format!("line {}: {e}", n + 1))?;
            q.spans.push((start as u32, (q.wire.len() - start) as u16));
        }
        if q.spans.is_empty() {
            return Err("no queries".into());
        }
        Ok(q)
    }

    fn get(&self, i: usize) -> &[u8] {
        let (start, len) = self.spans[i % self.spans.len()];
        &self.wire[start as usize..start as usize + len as usize]
    }
}

// ---------------------------------------------------------------------------------------------
// Latency histogram: values in ns; exact below 128, then 64 buckets per power of two.

const SUB: u32 = 6;
const MAX_EXP: u32 = 47;
const BUCKETS: usize = 128 + ((MAX_EXP - 7 + 1) as usize) * 64;

struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

fn bucket_of(v: u64) -> usize {
    let v = v.min((1u64 << (MAX_EXP + 1)) - 1);
    if v < 128 {
        v as usize
    } else {
        let e = 63 - v.leading_zeros();
        let sub = (v >> (e - SUB)) & 63;
        128 + (e as usize - 7) * 64 + sub as usize
    }
}

fn bucket_low(b: usize) -> u64 {
    if b < 128 {
        b as u64
    } else {
        let e = ((b - 128) / 64 + 7) as u32;
        let sub = ((b - 128) % 64) as u64;
        (64 + sub) << (e - SUB)
    }
}

impl Histogram {
    fn new() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }

    #[inline]
    fn record(&mut self, ns: u64) {
        self.counts[bucket_of(ns)] += 1;
        self.total += 1;
        self.max = self.max.max(ns);
    }

    /// The lower bound of the bucket holding quantile `q` (0 when empty).
    fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_low(b);
            }
        }
        self.max
    }
}

// ---------------------------------------------------------------------------------------------
// The load loop

const BATCH: usize = 64;
const BUF: usize = 4096;

/// The queries in flight on one UDP socket or TCP connection: `window` slots. A query's DNS ID
/// is its slot index in the low `bits` bits and a per-socket generation in the high bits, so a
/// late reply to a slot since reused does not match.
struct Slots {
    /// Per slot: the ID in flight and when it was sent (ns since start); `u64::MAX` = free.
    ids: Vec<u16>,
    sent_at: Vec<u64>,
    free: Vec<u32>,
    bits: u32,
    generation: u32,
}

impl Slots {
    fn new(window: usize) -> Self {
        Slots {
            ids: vec![0; window],
            sent_at: vec![u64::MAX; window],
            free: (0..window as u32).rev().collect(),
            bits: usize::BITS - (window.max(2) - 1).leading_zeros(),
            generation: 0,
        }
    }

    fn outstanding(&self) -> usize {
        self.ids.len() - self.free.len()
    }

    /// A fresh ID for `slot`, remembered as the one in flight there.
    fn next_id(&mut self, slot: u32) -> u16 {
        self.generation = self.generation.wrapping_add(1);
        let id = ((self.generation << self.bits) | slot) as u16;
        self.ids[slot as usize] = id;
        id
    }

    /// Frees every slot whose query is older than `timeout_ns` at `t`; returns how many.
    fn expire(&mut self, t: u64, timeout_ns: u64) -> u64 {
        let mut lost = 0;
        for slot in 0..self.ids.len() {
            let at = self.sent_at[slot];
            if at != u64::MAX && t.saturating_sub(at) > timeout_ns {
                self.sent_at[slot] = u64::MAX;
                self.free.push(slot as u32);
                lost += 1;
            }
        }
        lost
    }

    /// Frees every slot in flight (the connection carrying them is gone); returns how many.
    fn expire_all(&mut self) -> u64 {
        self.expire(u64::MAX, 0)
    }
}

/// One reply received at `t`: matched to its slot by ID, timed, counted.
#[inline]
fn on_reply(msg: &[u8], t: u64, slots: &mut Slots, c: &mut Counters, hist: &mut Histogram) {
    if msg.len() < 12 || msg[2] & 0x80 == 0 {
        c.unmatched += 1;
        return;
    }
    let id = u16::from_be_bytes([msg[0], msg[1]]);
    let slot = (u32::from(id) & ((1u32 << slots.bits) - 1)) as usize;
    if slot >= slots.ids.len() || slots.sent_at[slot] == u64::MAX || slots.ids[slot] != id {
        c.unmatched += 1;
        return;
    }
    hist.record(t.saturating_sub(slots.sent_at[slot]));
    slots.sent_at[slot] = u64::MAX;
    slots.free.push(slot as u32);
    c.answered += 1;
    c.rcodes[(msg[3] & 0x0f) as usize] += 1;
    if msg[2] & 0x02 != 0 {
        c.truncated += 1;
    }
}

struct Sock {
    sock: UdpSocket,
    slots: Slots,
    recv_bufs: Vec<u8>,
    recv_iov: Vec<libc::iovec>,
    recv_hdr: Vec<libc::mmsghdr>,
    send_bufs: Vec<u8>,
    send_iov: Vec<libc::iovec>,
    send_hdr: Vec<libc::mmsghdr>,
    send_slots: Vec<u32>,
}

impl Sock {
    fn new(server: SocketAddr, window: usize) -> std::io::Result<Self> {
        let bind: SocketAddr = if server.is_ipv4() {
            "0.0.0.0:0".parse().unwrap()
        } else {
            "[::]:0".parse().unwrap()
        };
        let sock = UdpSocket::bind(bind)?;
        sock.connect(server)?;
        sock.set_nonblocking(true)?;
        let mut s = Sock {
            sock,
            slots: Slots::new(window),
            recv_bufs: vec![0; BATCH * BUF],
            recv_iov: Vec::with_capacity(BATCH),
            recv_hdr: Vec::with_capacity(BATCH),
            send_bufs: vec![0; BATCH * 512],
            send_iov: Vec::with_capacity(BATCH),
            send_hdr: Vec::with_capacity(BATCH),
            send_slots: Vec::with_capacity(BATCH),
        };
        // SAFETY (for the raw pointers below): the Vecs are never resized after this point, so
        // the buffers they point into stay where they are when `Sock` moves.
        for i in 0..BATCH {
            s.recv_iov.push(libc::iovec {
                iov_base: s.recv_bufs[i * BUF..].as_mut_ptr().cast(),
                iov_len: BUF,
            });
            s.send_iov.push(libc::iovec {
                iov_base: s.send_bufs[i * 512..].as_mut_ptr().cast(),
                iov_len: 0,
            });
        }
        for i in 0..BATCH {
            // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = &mut s.recv_iov[i];
            h.msg_hdr.msg_iovlen = 1;
            s.recv_hdr.push(h);
            // SAFETY: as above.
            let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
            h.msg_hdr.msg_iov = &mut s.send_iov[i];
            h.msg_hdr.msg_iovlen = 1;
            s.send_hdr.push(h);
        }
        Ok(s)
    }
}

#[derive(Default, Debug, Clone)]
struct Counters {
    sent: u64,
    answered: u64,
    lost: u64,
    unmatched: u64,
    truncated: u64,
    send_errors: u64,
    /// TCP: connections closed under us and opened again.
    reconnects: u64,
    rcodes: [u64; 16],
}

struct Report {
    counters: Counters,
    hist: Histogram,
    elapsed: Duration,
    cpu: Duration,
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn run(la: &LoadArgs, queries: &Queries) -> std::io::Result<Report> {
    let mut socks = (0..la.sockets)
        .map(|_| Sock::new(la.server, la.window))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut c = Counters::default();
    let mut hist = Histogram::new();
    let timeout_ns = la.timeout.as_nanos() as u64;
    let mut next_query = 0usize;
    let cpu0 = cpu_time();
    let start = Instant::now();
    let mut last_scan = 0u64;
    loop {
        let now = start.elapsed();
        if now >= la.duration {
            break;
        }
        for s in &mut socks {
            // Receive whatever is there.
            if s.slots.outstanding() > 0 {
                let fd = s.sock.as_raw_fd();
                // SAFETY: the headers point into this socket's own receive buffers.
                let n = unsafe {
                    libc::recvmmsg(
                        fd,
                        s.recv_hdr.as_mut_ptr(),
                        BATCH as u32,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                    )
                };
                if n > 0 {
                    let t = start.elapsed().as_nanos() as u64;
                    for i in 0..n as usize {
                        let len = s.recv_hdr[i].msg_len as usize;
                        let msg = &s.recv_bufs[i * BUF..i * BUF + len.min(BUF)];
                        on_reply(msg, t, &mut s.slots, &mut c, &mut hist);
                    }
                }
            }
            // Refill the window.
            if !s.slots.free.is_empty() {
                let k = s.slots.free.len().min(BATCH);
                s.send_slots.clear();
                for i in 0..k {
                    let slot = s.slots.free[s.slots.free.len() - 1 - i];
                    let q = queries.get(next_query);
                    next_query = next_query.wrapping_add(1);
                    let id = s.slots.next_id(slot);
                    let buf = &mut s.send_bufs[i * 512..i * 512 + q.len()];
                    buf.copy_from_slice(q);
                    buf[..2].copy_from_slice(&id.to_be_bytes());
                    s.send_iov[i].iov_len = q.len();
                    s.send_slots.push(slot);
                }
                let fd = s.sock.as_raw_fd();
                // SAFETY: the headers point into this socket's own send buffers.
                let n = unsafe {
                    libc::sendmmsg(fd, s.send_hdr.as_mut_ptr(), k as u32, libc::MSG_DONTWAIT)
                };
                if n < 0 {
                    c.send_errors += 1;
                } else {
                    let t = start.elapsed().as_nanos() as u64;
                    for &slot in &s.send_slots[..n as usize] {
                        s.slots.sent_at[slot as usize] = t;
                    }
                    let keep = s.slots.free.len() - n as usize;
                    s.slots.free.truncate(keep);
                    c.sent += n as u64;
                }
            }
        }
        // Every 10 ms: a query outstanding too long is lost; its slot is reused.
        let t = start.elapsed().as_nanos() as u64;
        if t - last_scan > 10_000_000 {
            last_scan = t;
            for s in &mut socks {
                c.lost += s.slots.expire(t, timeout_ns);
            }
        }
    }
    let elapsed = start.elapsed();
    let cpu = cpu_time() - cpu0;
    Ok(Report {
        counters: c,
        hist,
        elapsed,
        cpu,
    })
}

// ---------------------------------------------------------------------------------------------
// The TCP load loop (`--tcp`)

/// A thin level-triggered epoll set; an event's token is what `add` was given.
struct Epoll(OwnedFd);

impl Epoll {
    fn new() -> std::io::Result<Self> {
        // SAFETY: plain syscall; a non-negative result is a fresh fd we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: i32, fd: i32, events: i32, token: u64) -> std::io::Result<()> {
        let mut ev = libc::epoll_event {
            events: events as u32,
            u64: token,
        };
        // SAFETY: `ev` lives across the call.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn add(&self, fd: i32, events: i32, token: u64) -> std::io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    fn modify(&self, fd: i32, events: i32, token: u64) -> std::io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Ready events into `evs`; `timeout_ms` 0 polls. Errors (EINTR) read as none ready.
    fn wait(&self, evs: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        // SAFETY: the kernel writes at most `evs.len()` events into `evs`.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                evs.as_mut_ptr(),
                evs.len() as i32,
                timeout_ms,
            )
        };
        n.max(0) as usize
    }
}

/// Read buffer per TCP connection: above the largest message plus its prefix (65537), so a
/// partial message kept at the front always leaves room to read the rest.
const TCP_RBUF: usize = 1 << 17;

/// One pipelined DNS-over-TCP connection (RFC 7766): 2-octet length, then the message.
struct Conn {
    stream: Option<TcpStream>,
    slots: Slots,
    /// Received bytes; `rbuf[..rlen]` is a partial message left from the last read.
    rbuf: Vec<u8>,
    rlen: usize,
    /// Queries written as one batch; `wbuf[wpos..]` is not yet accepted by the kernel.
    wbuf: Vec<u8>,
    wpos: usize,
    send_slots: Vec<u32>,
    /// When to try (re)connecting while closed, ns since start.
    retry_at: u64,
}

impl Conn {
    fn new(window: usize) -> Self {
        Conn {
            stream: None,
            slots: Slots::new(window),
            rbuf: vec![0; TCP_RBUF],
            rlen: 0,
            wbuf: Vec::with_capacity(window * 514),
            wpos: 0,
            send_slots: Vec::with_capacity(window),
            retry_at: 0,
        }
    }

    /// Connects (blocking, at most `timeout`) and registers with `ep` under `token`.
    fn open(
        &mut self,
        server: SocketAddr,
        timeout: Duration,
        ep: &Epoll,
        token: u64,
    ) -> std::io::Result<()> {
        let stream = TcpStream::connect_timeout(&server, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        ep.add(stream.as_raw_fd(), libc::EPOLLIN, token)?;
        self.stream = Some(stream);
        Ok(())
    }

    /// Drops the connection (closing it also leaves the epoll set); whatever it had in flight
    /// can no longer be answered and is counted lost.
    fn close(&mut self, c: &mut Counters, t: u64) {
        self.stream = None;
        self.rlen = 0;
        self.wbuf.clear();
        self.wpos = 0;
        self.retry_at = t;
        c.lost += self.slots.expire_all();
    }

    /// One read, then every whole reply in the buffer. False when the connection is gone.
    fn receive(&mut self, start: Instant, c: &mut Counters, hist: &mut Histogram) -> bool {
        let Some(stream) = self.stream.as_mut() else {
            return false;
        };
        let n = match stream.read(&mut self.rbuf[self.rlen..]) {
            Ok(0) => return false,
            Ok(n) => n,
            Err(e) if is_transient(&e) => return true,
            Err(_) => return false,
        };
        let t = start.elapsed().as_nanos() as u64;
        self.rlen += n;
        let mut pos = 0;
        while self.rlen - pos >= 2 {
            let len = u16::from_be_bytes([self.rbuf[pos], self.rbuf[pos + 1]]) as usize;
            if self.rlen - pos - 2 < len {
                break;
            }
            on_reply(
                &self.rbuf[pos + 2..pos + 2 + len],
                t,
                &mut self.slots,
                c,
                hist,
            );
            pos += 2 + len;
        }
        self.rbuf.copy_within(pos..self.rlen, 0);
        self.rlen -= pos;
        true
    }

    /// Writes what the kernel did not take last time, or else fills every free slot and writes
    /// the batch in one call. False when the connection is gone.
    fn send(
        &mut self,
        start: Instant,
        queries: &Queries,
        next_query: &mut usize,
        c: &mut Counters,
    ) -> bool {
        let Some(stream) = self.stream.as_mut() else {
            return false;
        };
        if self.wpos == self.wbuf.len() {
            if self.slots.free.is_empty() {
                return true;
            }
            self.wbuf.clear();
            self.wpos = 0;
            self.send_slots.clear();
            while let Some(slot) = self.slots.free.pop() {
                let q = queries.get(*next_query);
                *next_query = next_query.wrapping_add(1);
                let id = self.slots.next_id(slot);
                self.wbuf.extend_from_slice(&(q.len() as u16).to_be_bytes());
                let at = self.wbuf.len();
                self.wbuf.extend_from_slice(q);
                self.wbuf[at..at + 2].copy_from_slice(&id.to_be_bytes());
                self.send_slots.push(slot);
            }
        }
        let result = stream.write(&self.wbuf[self.wpos..]);
        if !self.send_slots.is_empty() {
            // In flight from now, written or still queued here (then timed out like any other).
            let t = start.elapsed().as_nanos() as u64;
            for &slot in &self.send_slots {
                self.slots.sent_at[slot as usize] = t;
            }
            c.sent += self.send_slots.len() as u64;
            self.send_slots.clear();
        }
        match result {
            Ok(n) => {
                self.wpos += n;
                true
            }
            Err(e) if is_transient(&e) => true,
            Err(_) => {
                c.send_errors += 1;
                false
            }
        }
    }
}

fn is_transient(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
    )
}

/// The TCP twin of [`run`]: `--connections` connections, `--window` queries pipelined on each,
/// one thread busy-polling an epoll set (readiness in one syscall, then one read per ready
/// connection) and refilling with one write per connection. A connection the server closes
/// loses what it had in flight and is reopened.
fn run_tcp(la: &LoadArgs, queries: &Queries) -> std::io::Result<Report> {
    let ep = Epoll::new()?;
    let mut conns: Vec<Conn> = (0..la.connections).map(|_| Conn::new(la.window)).collect();
    let setup = Instant::now();
    for (i, conn) in conns.iter_mut().enumerate() {
        // A server whose accept queue is full drops the SYN, which the
        // kernel sends again after a second: a connect is tried up to
        // five times, 3 s each, within the duration.
        let mut tries = 0;
        loop {
            let left = la.duration.saturating_sub(setup.elapsed());
            if left.is_zero() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connecting took the whole duration",
                ));
            }
            tries += 1;
            match conn.open(la.server, left.min(Duration::from_secs(3)), &ep, i as u64) {
                Ok(()) => break,
                Err(e) if tries >= 5 => return Err(e),
                Err(_) => {}
            }
        }
    }
    let mut c = Counters::default();
    let mut hist = Histogram::new();
    let timeout_ns = la.timeout.as_nanos() as u64;
    let mut next_query = 0usize;
    // SAFETY: epoll_event is plain old data.
    let mut evs: Vec<libc::epoll_event> = vec![unsafe { std::mem::zeroed() }; 256];
    let cpu0 = cpu_time();
    let start = Instant::now();
    let mut last_scan = 0u64;
    loop {
        if start.elapsed() >= la.duration {
            break;
        }
        let n = ep.wait(&mut evs, 0);
        for ev in &evs[..n] {
            let conn = &mut conns[ev.u64 as usize];
            if conn.stream.is_some() && !conn.receive(start, &mut c, &mut hist) {
                conn.close(&mut c, start.elapsed().as_nanos() as u64);
            }
        }
        let t = start.elapsed().as_nanos() as u64;
        for (i, conn) in conns.iter_mut().enumerate() {
            if conn.stream.is_none() {
                if t < conn.retry_at {
                    continue;
                }
                let left = la.duration.saturating_sub(start.elapsed());
                if left.is_zero() {
                    break;
                }
                let timeout = left.min(Duration::from_secs(1));
                if conn.open(la.server, timeout, &ep, i as u64).is_err() {
                    conn.retry_at = start.elapsed().as_nanos() as u64 + 10_000_000;
                    continue;
                }
                c.reconnects += 1;
            }
            if !conn.send(start, queries, &mut next_query, &mut c) {
                conn.close(&mut c, t);
            }
        }
        // Every 10 ms: a query outstanding too long is lost; its slot is reused.
        let t = start.elapsed().as_nanos() as u64;
        if t - last_scan > 10_000_000 {
            last_scan = t;
            for conn in &mut conns {
                c.lost += conn.slots.expire(t, timeout_ns);
            }
        }
    }
    let elapsed = start.elapsed();
    let cpu = cpu_time() - cpu0;
    Ok(Report {
        counters: c,
        hist,
        elapsed,
        cpu,
    })
}

const RCODES: [&str; 6] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED",
];

impl Report {
    fn qps(&self) -> f64 {
        self.counters.answered as f64 / self.elapsed.as_secs_f64()
    }

    fn render(&self, la: &LoadArgs) -> String {
        let c = &self.counters;
        let us = |ns: u64| ns as f64 / 1000.0;
        let cpu_per_q = self.cpu.as_secs_f64() * 1e6 / c.answered.max(1) as f64;
        let mut out = String::new();
        let (spread, width) = if la.tcp {
            ("tcp connections", la.connections)
        } else {
            ("sockets", la.sockets)
        };
        let _ = writeln!(
            out,
            "loadgen: server {} {spread} {width} window {} duration {:.2}s",
            la.server,
            la.window,
            self.elapsed.as_secs_f64()
        );
        let reconnects = if la.tcp {
            format!(" reconnects {}", c.reconnects)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  sent {} answered {} lost {} unmatched {} truncated {} send-errors {}{reconnects}",
            c.sent, c.answered, c.lost, c.unmatched, c.truncated, c.send_errors
        );
        let mut rc = String::new();
        for (i, &n) in c.rcodes.iter().enumerate() {
            if n > 0 {
                let name = RCODES
                    .get(i)
                    .map(ToString::to_string)
                    .unwrap_or(format!("RCODE{i}"));
                let _ = write!(rc, " {name}={n}");
            }
        }
        let _ = writeln!(out, "  rcodes:{rc}");
        let _ = writeln!(
            out,
            "  {:.0} queries/s; latency p50 {:.1} µs p90 {:.1} µs p99 {:.1} µs max {:.1} µs; client CPU {:.2} µs/query",
            self.qps(),
            us(self.hist.quantile(0.50)),
            us(self.hist.quantile(0.90)),
            us(self.hist.quantile(0.99)),
            us(self.hist.max),
            cpu_per_q
        );
        let _ = writeln!(
            out,
            "RESULT qps={:.0} p50_us={:.1} p90_us={:.1} p99_us={:.1} max_us={:.1} answered={} lost={} noerror={} nxdomain={} client_cpu_us_per_q={:.2}{}",
            self.qps(),
            us(self.hist.quantile(0.50)),
            us(self.hist.quantile(0.90)),
            us(self.hist.quantile(0.99)),
            us(self.hist.max),
            c.answered,
            c.lost,
            c.rcodes[0],
            c.rcodes[3],
            cpu_per_q,
            reconnects.replace(" reconnects ", " reconnects=")
        );
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Data generation

const SERVICES_PER_NS: usize = 50;

/// Names per group of ten services, measured from `clusterset-dns dump` of this generator's
/// output (see `load.sh`); used to size the clusterset for `--names`.
const NAMES_PER_10_SERVICES: usize = 78;

fn generate(dir: &Path, names: usize) -> std::io::Result<String> {
    let services = (names * 10 / NAMES_PER_10_SERVICES).max(10);
    let zones = dir.join("zones");
    let _ = std::fs::remove_dir_all(&zones);
    let mut files: Vec<BTreeMap<String, String>> = vec![BTreeMap::new(); 4];
    for (c, cluster) in CLUSTERS.iter().enumerate() {
        std::fs::create_dir_all(zones.join(cluster))?;
        if c > 0 {
            let mut g = String::new();
            gateway_doc(&mut g, &format!("203.0.113.{}", 10 * c));
            files[c].insert("linkerd-gateway".into(), g);
        }
    }
    let mut ips = Ips::default();
    let mut cluster_ip = 0u32;
    let (flat, gateway, federated) = (FLAT, GATEWAY, FEDERATED);
    let http = [("http", 80u16, 8080u16)];
    let two = [("peer", 7000u16, 7000u16), ("client", 9042, 9042)];
    for i in 0..services {
        let ns = format!("ns{}", i / SERVICES_PER_NS);
        let c = (i / 10) % 4;
        let name = format!("svc{i}");
        let mut cip = || {
            cluster_ip += 1;
            format!(
                "10.{}.{}.{}",
                200 + cluster_ip / 65536,
                (cluster_ip / 256) % 256,
                cluster_ip % 256
            )
        };
        match i % 10 {
            // Flat ClusterIP, 22 pods.
            0..=3 => {
                let out = files[c].entry(ns.clone()).or_default();
                let pods: Vec<String> = (0..22).map(|_| ips.pod(c)).collect();
                service_doc(out, &name, &ns, &flat, &cip(), &http);
                slice_doc(out, &name, &ns, &flat, &http, &pods, false);
            }
            // Gateway mode, 2 pods (answered with the gateway, or the ClusterIP in `west`).
            4 | 5 => {
                let out = files[c].entry(ns.clone()).or_default();
                let pods: Vec<String> = (0..2).map(|_| ips.pod(c)).collect();
                service_doc(out, &name, &ns, &gateway, &cip(), &http);
                slice_doc(out, &name, &ns, &gateway, &http, &pods, false);
            }
            // Headless StatefulSet, 3 pods with hostnames, two ports.
            6 | 7 => {
                let out = files[c].entry(ns.clone()).or_default();
                let pods: Vec<String> = (0..3).map(|_| ips.pod(c)).collect();
                service_doc(out, &name, &ns, &flat, "None", &two);
                slice_doc(out, &name, &ns, &flat, &two, &pods, true);
            }
            // Federated member in every cluster: ClusterIP with 8 pods, or headless with 2.
            _ => {
                for (cc, f) in files.iter_mut().enumerate() {
                    let out = f.entry(ns.clone()).or_default();
                    let headless = i % 10 == 9;
                    let n = if headless { 2 } else { 8 };
                    let pods: Vec<String> = (0..n).map(|_| ips.pod(cc)).collect();
                    let ip = if headless { "None".to_string() } else { cip() };
                    service_doc(out, &name, &ns, &federated, &ip, &two);
                    slice_doc(out, &name, &ns, &federated, &two, &pods, headless);
                }
            }
        }
    }
    let mut nfiles = 0;
    for (c, f) in files.iter().enumerate() {
        for (ns, text) in f {
            std::fs::write(zones.join(CLUSTERS[c]).join(format!("{ns}.yaml")), text)?;
            nfiles += 1;
        }
    }
    Ok(format!(
        "generated {} services in {} files under {}",
        services,
        nfiles,
        zones.display()
    ))
}

/// The query mix from a zone file (as `clusterset-dns dump` prints it).
fn make_queries(zone_text: &str, zone: &str, count: usize) -> String {
    let mut a = BTreeSet::new();
    let mut aaaa = BTreeSet::new();
    let mut srv = BTreeSet::new();
    let mut parents = BTreeSet::new();
    let mut origin = format!("{}.", zone.trim_end_matches('.'));
    for line in zone_text.lines() {
        let line = line.split(';').next().unwrap_or_default();
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.first() == Some(&"$ORIGIN") {
            if let Some(o) = fields.get(1) {
                origin = o.to_string();
            }
            continue;
        }
        if fields.len() < 3 || line.starts_with(char::is_whitespace) {
            continue;
        }
        let owner = if fields[0] == "@" {
            origin.clone()
        } else if fields[0].ends_with('.') {
            fields[0].to_string()
        } else {
            format!("{}.{}", fields[0], origin)
        };
        let Some(ti) = fields
            .iter()
            .position(|f| matches!(*f, "A" | "AAAA" | "SRV" | "SOA" | "NS" | "TXT" | "PTR"))
        else {
            continue;
        };
        match fields[ti] {
            "A" => {
                a.insert(owner.clone());
            }
            "AAAA" => {
                aaaa.insert(owner.clone());
            }
            "SRV" => {
                srv.insert(owner.clone());
            }
            _ => {}
        }
        if let Some((_, parent)) = owner.split_once('.')
            && !owner.starts_with('_')
            && parent.ends_with(origin.as_str())
        {
            parents.insert(parent.to_string());
        }
    }
    let a: Vec<&String> = a.iter().collect();
    let srv: Vec<&String> = srv.iter().collect();
    let nodata: Vec<&String> = a.iter().copied().filter(|n| !aaaa.contains(*n)).collect();
    let parents: Vec<&String> = parents.iter().collect();
    assert!(!a.is_empty(), "no A records in the zone file");
    // A fixed pseudo-random order (xorshift), so runs are repeatable.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n.max(1) as u64) as usize
    };
    let mut out = String::new();
    for i in 0..count {
        match rnd(10) {
            0 if !srv.is_empty() => {
                let _ = writeln!(out, "{} SRV", srv[rnd(srv.len())]);
            }
            1 if !nodata.is_empty() => {
                let _ = writeln!(out, "{} AAAA", nodata[rnd(nodata.len())]);
            }
            2 => {
                let p = if parents.is_empty() {
                    &origin
                } else {
                    parents[rnd(parents.len())]
                };
                let _ = writeln!(out, "nx{i}.{p} A");
            }
            _ => {
                let _ = writeln!(out, "{} A", a[rnd(a.len())]);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The do-nothing responder: the kernel's floor

/// Answers every datagram on `socket` with itself, QR set, in batches (`recvmmsg` with
/// `MSG_WAITFORONE`, then one `sendmmsg`), until `until` or `stop`. What a UDP server costs
/// when it does no work at all: the floor under every real server's figure, and the ceiling of
/// what this load generator can measure. Returns the datagrams answered.
fn respond(socket: &UdpSocket, until: Instant, stop: &std::sync::atomic::AtomicBool) -> u64 {
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let mut bufs = vec![0u8; BATCH * BUF];
    // SAFETY: all-zero is a valid sockaddr_storage and mmsghdr.
    let mut peers: Vec<libc::sockaddr_storage> = vec![unsafe { std::mem::zeroed() }; BATCH];
    let mut iov: Vec<libc::iovec> = (0..BATCH)
        .map(|i| libc::iovec {
            iov_base: bufs[i * BUF..].as_mut_ptr().cast(),
            iov_len: BUF,
        })
        .collect();
    let mut hdr: Vec<libc::mmsghdr> = (0..BATCH).map(|_| unsafe { std::mem::zeroed() }).collect();
    let mut answered = 0u64;
    let fd = socket.as_raw_fd();
    while Instant::now() < until && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for i in 0..BATCH {
            iov[i].iov_len = BUF;
            let h = &mut hdr[i].msg_hdr;
            h.msg_name = (&mut peers[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
        }
        // SAFETY: every header points at this function's live buffers.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                hdr.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n <= 0 {
            continue;
        }
        let n = n as usize;
        for i in 0..n {
            let len = hdr[i].msg_len as usize;
            bufs[i * BUF + 2] |= 0x80;
            iov[i].iov_len = len;
        }
        // SAFETY: as above; the kernel reads the first `n` headers.
        let sent = unsafe { libc::sendmmsg(fd, hdr.as_mut_ptr(), n as u32, 0) };
        answered += sent.max(0) as u64;
    }
    answered
}

/// The TCP do-nothing responder: one thread, one epoll set. Accepts every connection and
/// answers each length-prefixed message with itself, QR set, in place: all whole messages a
/// read brought are written back with one write (what the kernel does not take waits for
/// EPOLLOUT). Runs until `until` or `stop`; returns the messages answered.
fn respond_tcp(
    listener: &TcpListener,
    until: Instant,
    stop: &std::sync::atomic::AtomicBool,
) -> u64 {
    struct Echo {
        stream: TcpStream,
        buf: Vec<u8>,
        len: usize,
        out: Vec<u8>,
    }
    const LISTENER: u64 = u64::MAX;
    listener.set_nonblocking(true).expect("nonblocking");
    let ep = Epoll::new().expect("epoll");
    ep.add(listener.as_raw_fd(), libc::EPOLLIN, LISTENER)
        .expect("epoll add");
    let mut conns: Vec<Option<Echo>> = Vec::new();
    let mut vacant: Vec<usize> = Vec::new();
    // SAFETY: epoll_event is plain old data.
    let mut evs: Vec<libc::epoll_event> = vec![unsafe { std::mem::zeroed() }; 256];
    let mut answered = 0u64;
    while Instant::now() < until && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let n = ep.wait(&mut evs, 100);
        for ev in &evs[..n] {
            let (token, events) = (ev.u64, ev.events as i32);
            if token == LISTENER {
                while let Ok((stream, _)) = listener.accept() {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let idx = vacant.pop().unwrap_or(conns.len());
                    if ep
                        .add(stream.as_raw_fd(), libc::EPOLLIN, idx as u64)
                        .is_err()
                    {
                        continue;
                    }
                    let echo = Echo {
                        stream,
                        buf: vec![0; TCP_RBUF],
                        len: 0,
                        out: Vec::new(),
                    };
                    if idx == conns.len() {
                        conns.push(Some(echo));
                    } else {
                        conns[idx] = Some(echo);
                    }
                }
                continue;
            }
            let idx = token as usize;
            let Some(e) = conns.get_mut(idx).and_then(Option::as_mut) else {
                continue;
            };
            let fd = e.stream.as_raw_fd();
            let mut ok = true;
            if events & libc::EPOLLOUT != 0 && !e.out.is_empty() {
                match e.stream.write(&e.out) {
                    Ok(w) => {
                        e.out.drain(..w);
                        if e.out.is_empty() {
                            ok = ep.modify(fd, libc::EPOLLIN, token).is_ok();
                        }
                    }
                    Err(err) => ok = is_transient(&err),
                }
            }
            if ok && events & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
                match e.stream.read(&mut e.buf[e.len..]) {
                    Ok(0) => ok = false,
                    Ok(r) => {
                        e.len += r;
                        let mut pos = 0;
                        while e.len - pos >= 2 {
                            let len = u16::from_be_bytes([e.buf[pos], e.buf[pos + 1]]) as usize;
                            if e.len - pos - 2 < len {
                                break;
                            }
                            if len > 2 {
                                e.buf[pos + 4] |= 0x80;
                            }
                            answered += 1;
                            pos += 2 + len;
                        }
                        let mut written = 0;
                        if e.out.is_empty() && pos > 0 {
                            match e.stream.write(&e.buf[..pos]) {
                                Ok(w) => written = w,
                                Err(err) => ok = is_transient(&err),
                            }
                            if ok && written < pos {
                                ok = ep.modify(fd, libc::EPOLLIN | libc::EPOLLOUT, token).is_ok();
                            }
                        }
                        e.out.extend_from_slice(&e.buf[written..pos]);
                        e.buf.copy_within(pos..e.len, 0);
                        e.len -= pos;
                    }
                    Err(err) => ok = is_transient(&err),
                }
            }
            if !ok {
                conns[idx] = None;
                vacant.push(idx);
            }
        }
    }
    answered
}

// ---------------------------------------------------------------------------------------------
// Smoke (`cargo test --bench loadgen`)

/// Runs `run` with `la` against a responder thread (`respond(until, stop)`, at most 10 s),
/// stops the responder, prints the report; returns it and how many the responder answered.
fn smoke_round(
    la: &LoadArgs,
    queries: &Queries,
    run: fn(&LoadArgs, &Queries) -> std::io::Result<Report>,
    respond: impl FnOnce(Instant, &std::sync::atomic::AtomicBool) -> u64 + Send + 'static,
) -> (Report, u64) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let thread =
        std::thread::spawn(move || respond(Instant::now() + Duration::from_secs(10), &stop2));
    let report = run(la, queries).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let served = thread.join().unwrap();
    print!("{}", report.render(la));
    (report, served)
}

fn smoke() {
    assert_eq!(bucket_of(0), 0);
    for v in [1u64, 127, 128, 129, 255, 256, 1000, 123_456, 9_999_999_999] {
        let b = bucket_of(v);
        assert!(
            bucket_low(b) <= v && (b + 1 == BUCKETS || v < bucket_low(b + 1)),
            "{v}"
        );
    }
    let mut h = Histogram::new();
    for v in 1..=1000u64 {
        h.record(v * 1000);
    }
    let p50 = h.quantile(0.5);
    assert!((490_000..=500_000).contains(&p50), "p50 {p50}");

    let q = Queries::parse(
        "# c\nfoo.example. A\nbar.example AAAA\n\n_x._tcp.example SRV\n",
        Some(1232),
    )
    .unwrap();
    assert_eq!(q.spans.len(), 3);
    assert_eq!(q.get(0).len(), 12 + 13 + 4 + 11);
    assert!(Queries::parse("foo BOGUS\n", None).is_err());

    // Generation and the query mix, small.
    let tmp = tempfile::tempdir().unwrap();
    let msg = generate(tmp.path(), 200).unwrap();
    assert!(tmp.path().join("zones/east/ns0.yaml").exists(), "{msg}");
    let zone = "$ORIGIN clusterset.local.\n@ 5 IN SOA ns.dns hostmaster 1 2 3 4 5\nsvc0-east.ns0.svc 5 IN A 10.0.0.1\n_http._tcp.svc0-east.ns0.svc 5 IN SRV 0 100 80 svc0-east.ns0.svc\n";
    let mix = make_queries(zone, "clusterset.local", 1000);
    assert_eq!(mix.lines().count(), 1000);
    assert!(mix.contains("svc0-east.ns0.svc.clusterset.local. A"));
    assert!(mix.contains("_http._tcp.svc0-east.ns0.svc.clusterset.local. SRV"));
    assert!(mix.contains(" AAAA") && mix.contains("nx"));

    // The do-nothing responder, bounded in time.
    let responder = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = responder.local_addr().unwrap();
    let la = LoadArgs {
        server: addr,
        queries: PathBuf::new(),
        duration: Duration::from_secs(1),
        sockets: 4,
        window: 16,
        edns: None,
        timeout: Duration::from_millis(200),
        tcp: false,
        connections: 0,
    };
    let queries = Queries::parse(&mix, None).unwrap();
    let (report, served) = smoke_round(&la, &queries, run, move |until, stop| {
        respond(&responder, until, stop)
    });
    assert!(report.counters.answered > 0, "no answers");
    assert!(served >= report.counters.answered);
    assert_eq!(report.counters.rcodes[0], report.counters.answered);
    println!("loadgen smoke: ok ({} answers)", report.counters.answered);

    // TCP: pipelined connections against the TCP do-nothing responder, bounded in time.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let la = LoadArgs {
        server: addr,
        queries: PathBuf::new(),
        duration: Duration::from_secs(1),
        sockets: 0,
        window: 8,
        edns: Some(1232),
        timeout: Duration::from_millis(1000),
        tcp: true,
        connections: 16,
    };
    let queries = Queries::parse(&mix, Some(1232)).unwrap();
    let (report, served) = smoke_round(&la, &queries, run_tcp, move |until, stop| {
        respond_tcp(&listener, until, stop)
    });
    let c = &report.counters;
    assert!(c.answered > 0, "no TCP answers");
    assert_eq!(c.lost, 0, "TCP queries lost");
    assert_eq!((c.reconnects, c.unmatched, c.send_errors), (0, 0, 0));
    assert!(served >= c.answered);
    assert_eq!(c.rcodes[0], c.answered);
    println!("loadgen smoke (tcp): ok ({} answers)", c.answered);
}
