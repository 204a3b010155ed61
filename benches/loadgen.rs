//! A batching UDP DNS load generator, and the data generator of `benches/load.sh`.
//!
//! ```text
//! cargo bench --bench loadgen -- --server 127.0.0.1:5353 --queries FILE \
//!     [--duration 10] [--sockets 8] [--window 256] [--edns 1232] [--timeout-ms 1000]
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
//! Generate mode writes `DIR/zones/<cluster>/<namespace>.yaml` for four clusters (`west` local,
//! `east`, `north`, `south`) with flat, gateway-mode, headless and federated Services of the demo's
//! shape, sized so that `clusterset-dns dump --local-cluster west` gives about `--names` names
//! (about 4 records per name). Make-queries mode reads that dump and writes the query mix:
//! 70 % A on names that have A records, 10 % SRV on names that have SRV records, 10 % AAAA on
//! names with A but no AAAA (NODATA), 10 % names that do not exist (NXDOMAIN).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
}

fn usage() -> ! {
    eprintln!(
        "usage: loadgen --server ADDR --queries FILE [--duration S] [--sockets N] [--window N] \
         [--edns SIZE] [--timeout-ms MS]\n       loadgen --generate DIR [--names N]\n       \
         loadgen --make-queries ZONEFILE --out FILE [--zone ZONE] [--count N]\n       \
         loadgen --respond ADDR [--duration S]"
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
    if let Some(addr) = opts.get("respond") {
        let addr: SocketAddr = addr.parse().unwrap_or_else(|_| usage());
        let socket = UdpSocket::bind(addr).expect("bind responder");
        let secs = num("duration", 3600);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let answered = respond(&socket, Instant::now() + Duration::from_secs(secs), &stop);
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
        window: num("window", 256).clamp(1, 4096) as usize,
        edns: opts
            .get("edns")
            .map(|v| v.parse().unwrap_or_else(|_| usage())),
        timeout: Duration::from_millis(num("timeout-ms", 1000)),
    };
    let text = std::fs::read_to_string(&la.queries).expect("read queries file");
    let queries = Queries::parse(&text, la.edns).unwrap_or_else(|e| {
        eprintln!("queries file: {e}");
        std::process::exit(2)
    });
    let report = run(&la, &queries).expect("load run");
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

struct Sock {
    sock: UdpSocket,
    /// Per slot: the ID in flight and when it was sent (ns since start); `u64::MAX` = free.
    ids: Vec<u16>,
    sent_at: Vec<u64>,
    free: Vec<u32>,
    bits: u32,
    generation: u32,
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
        let bits = usize::BITS - (window.max(2) - 1).leading_zeros();
        let mut s = Sock {
            sock,
            ids: vec![0; window],
            sent_at: vec![u64::MAX; window],
            free: (0..window as u32).rev().collect(),
            bits,
            generation: 0,
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

    fn outstanding(&self) -> usize {
        self.ids.len() - self.free.len()
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
        for s in socks.iter_mut() {
            // Receive whatever is there.
            if s.outstanding() > 0 {
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
                    let mask = (1u32 << s.bits) - 1;
                    for i in 0..n as usize {
                        let len = s.recv_hdr[i].msg_len as usize;
                        let msg = &s.recv_bufs[i * BUF..i * BUF + len.min(BUF)];
                        if len < 12 || msg[2] & 0x80 == 0 {
                            c.unmatched += 1;
                            continue;
                        }
                        let id = u16::from_be_bytes([msg[0], msg[1]]);
                        let slot = (u32::from(id) & mask) as usize;
                        if slot >= s.ids.len() || s.sent_at[slot] == u64::MAX || s.ids[slot] != id {
                            c.unmatched += 1;
                            continue;
                        }
                        hist.record(t.saturating_sub(s.sent_at[slot]));
                        s.sent_at[slot] = u64::MAX;
                        s.free.push(slot as u32);
                        c.answered += 1;
                        c.rcodes[(msg[3] & 0x0f) as usize] += 1;
                        if msg[2] & 0x02 != 0 {
                            c.truncated += 1;
                        }
                    }
                }
            }
            // Refill the window.
            if !s.free.is_empty() {
                let k = s.free.len().min(BATCH);
                s.send_slots.clear();
                for i in 0..k {
                    let slot = s.free[s.free.len() - 1 - i];
                    let q = queries.get(next_query);
                    next_query = next_query.wrapping_add(1);
                    s.generation = s.generation.wrapping_add(1);
                    let id = ((s.generation << s.bits) | slot) as u16;
                    let buf = &mut s.send_bufs[i * 512..i * 512 + q.len()];
                    buf.copy_from_slice(q);
                    buf[..2].copy_from_slice(&id.to_be_bytes());
                    s.send_iov[i].iov_len = q.len();
                    s.ids[slot as usize] = id;
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
                        s.sent_at[slot as usize] = t;
                    }
                    let keep = s.free.len() - n as usize;
                    s.free.truncate(keep);
                    c.sent += n as u64;
                }
            }
        }
        // Every 10 ms: a query outstanding too long is lost; its slot is reused.
        let t = start.elapsed().as_nanos() as u64;
        if t - last_scan > 10_000_000 {
            last_scan = t;
            for s in socks.iter_mut() {
                for slot in 0..s.ids.len() {
                    let at = s.sent_at[slot];
                    if at != u64::MAX && t.saturating_sub(at) > timeout_ns {
                        s.sent_at[slot] = u64::MAX;
                        s.free.push(slot as u32);
                        c.lost += 1;
                    }
                }
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
        let _ = writeln!(
            out,
            "loadgen: server {} sockets {} window {} duration {:.2}s",
            la.server,
            la.sockets,
            la.window,
            self.elapsed.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "  sent {} answered {} lost {} unmatched {} truncated {} send-errors {}",
            c.sent, c.answered, c.lost, c.unmatched, c.truncated, c.send_errors
        );
        let mut rc = String::new();
        for (i, &n) in c.rcodes.iter().enumerate() {
            if n > 0 {
                let name = RCODES
                    .get(i)
                    .map(|s| s.to_string())
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
            "RESULT qps={:.0} p50_us={:.1} p90_us={:.1} p99_us={:.1} max_us={:.1} answered={} lost={} noerror={} nxdomain={} client_cpu_us_per_q={:.2}",
            self.qps(),
            us(self.hist.quantile(0.50)),
            us(self.hist.quantile(0.90)),
            us(self.hist.quantile(0.99)),
            us(self.hist.max),
            c.answered,
            c.lost,
            c.rcodes[0],
            c.rcodes[3],
            cpu_per_q
        );
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Data generation

const CLUSTERS: [&str; 4] = ["west", "east", "north", "south"];
const SERVICES_PER_NS: usize = 50;

struct Ips {
    next: [u32; 4],
}

impl Ips {
    fn pod(&mut self, c: usize) -> String {
        let n = self.next[c];
        self.next[c] += 1;
        format!(
            "10.{}.{}.{}",
            16 * c as u32 + n / 65536,
            (n / 256) % 256,
            n % 256
        )
    }
}

fn service_doc(
    out: &mut String,
    name: &str,
    ns: &str,
    labels: &[(&str, &str)],
    cluster_ip: &str,
    ports: &[(&str, u16, u16)],
) {
    let _ = writeln!(
        out,
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    app: \"{name}\""
    );
    for (k, v) in labels {
        let _ = writeln!(out, "    {k}: \"{v}\"");
    }
    let _ = writeln!(
        out,
        "spec:\n  type: ClusterIP\n  selector:\n    app: \"{name}\"\n  clusterIP: {cluster_ip}\n  clusterIPs: [{cluster_ip}]\n  ipFamilies: [IPv4]\n  ipFamilyPolicy: SingleStack\n  ports:"
    );
    for (pname, port, target) in ports {
        let _ = writeln!(
            out,
            "  - name: {pname}\n    protocol: TCP\n    port: {port}\n    targetPort: {target}"
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn slice_doc(
    out: &mut String,
    name: &str,
    ns: &str,
    labels: &[(&str, &str)],
    ports: &[(&str, u16, u16)],
    pods: &[String],
    hostnames: bool,
) {
    let _ = writeln!(
        out,
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-abcde\n  namespace: {ns}\n  labels:\n    kubernetes.io/service-name: \"{name}\""
    );
    for (k, v) in labels {
        let _ = writeln!(out, "    {k}: \"{v}\"");
    }
    let _ = writeln!(out, "addressType: IPv4\nports:");
    for (pname, _, target) in ports {
        let _ = writeln!(out, "- name: {pname}\n  protocol: TCP\n  port: {target}");
    }
    let _ = writeln!(out, "endpoints:");
    for (i, ip) in pods.iter().enumerate() {
        let _ = writeln!(out, "- addresses: [{ip}]");
        if hostnames {
            let _ = writeln!(out, "  hostname: {name}-{i}");
        }
        let _ = writeln!(out, "  conditions:\n    ready: true");
    }
}

fn gateway_doc(out: &mut String, ip: &str) {
    let _ = writeln!(
        out,
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: linkerd-gateway\n  namespace: linkerd-multicluster\n  annotations:\n    mirror.linkerd.io/gateway-identity: \"linkerd-gateway.linkerd-multicluster.serviceaccount.identity.linkerd.cluster.local\"\nspec:\n  type: LoadBalancer\n  clusterIP: 10.100.0.200\n  clusterIPs: [10.100.0.200]\n  ports:\n  - name: mc-gateway\n    protocol: TCP\n    port: 4143\n    targetPort: 4143\nstatus:\n  loadBalancer:\n    ingress:\n    - ip: {ip}"
    );
}

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
    let mut ips = Ips { next: [256; 4] };
    let mut cluster_ip = 0u32;
    let flat = [("mirror.linkerd.io/exported", "remote-discovery")];
    let gateway = [("mirror.linkerd.io/exported", "true")];
    let federated = [
        ("mirror.linkerd.io/exported", "remote-discovery"),
        ("mirror.linkerd.io/federated", "member"),
    ];
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
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
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

// ---------------------------------------------------------------------------------------------
// Smoke (`cargo test --bench loadgen`)

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
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let thread = std::thread::spawn(move || {
        respond(&responder, Instant::now() + Duration::from_secs(10), &stop2)
    });
    let la = LoadArgs {
        server: addr,
        queries: PathBuf::new(),
        duration: Duration::from_secs(1),
        sockets: 4,
        window: 16,
        edns: None,
        timeout: Duration::from_millis(200),
    };
    let queries = Queries::parse(&mix, None).unwrap();
    let report = run(&la, &queries).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let served = thread.join().unwrap();
    print!("{}", report.render(&la));
    assert!(report.counters.answered > 0, "no answers");
    assert!(served >= report.counters.answered);
    assert_eq!(report.counters.rcodes[0], report.counters.answered);
    println!("loadgen smoke: ok ({} answers)", report.counters.answered);
}
