use super::*;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Upper bound on a test server's life, so no server outlives a hung test.
const SERVER_LIFETIME: Duration = Duration::from_secs(5);
/// Upper bound on connections one test server accepts.
const MAX_CONNECTIONS: usize = 100;
/// How long a test waits for one report before failing.
const REPORT_WAIT: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------- state

/// Steps as `s`/`f`, published state after each as `?`/`T`/`F`.
fn published(c: u8) -> Option<bool> {
    match c {
        b'?' => None,
        b'T' => Some(true),
        b'F' => Some(false),
        other => panic!("bad expectation {}", other as char),
    }
}

#[test]
fn state_machine_table() {
    // (threshold, results, published state after each result)
    let cases: &[(u32, &str, &str)] = &[
        (1, "s", "T"),
        (1, "f", "F"),
        (1, "sfsf", "TFTF"),
        (1, "ssff", "TTFF"),
        (2, "f", "?"),
        (2, "ff", "?F"),
        (2, "fs", "?T"),
        (2, "ffs", "?FT"),
        (2, "fffs", "?FFT"),
        (2, "sf", "TT"),
        (2, "sff", "TTF"),
        (2, "sfsfsf", "TTTTTT"),
        (2, "sffsf", "TTFTT"),
        (3, "ff", "??"),
        (3, "fff", "??F"),
        (3, "ffsfff", "??TTTF"),
        (3, "sffsff", "TTTTTT"),
        (3, "sfff", "TTTF"),
        (3, "sffffs", "TTTFFT"),
        // 0 acts as 1.
        (0, "f", "F"),
        (0, "sf", "TF"),
    ];
    for &(threshold, results, want) in cases {
        assert_eq!(results.len(), want.len(), "bad case {results}");
        let mut state = ProbeState::new(threshold);
        assert_eq!(state.alive(), None);
        let mut before = None;
        for (i, (r, w)) in results.bytes().zip(want.bytes()).enumerate() {
            let want = published(w);
            let changed = state.record(r == b's');
            let ctx = format!("threshold {threshold}, {results} step {i}");
            assert_eq!(state.alive(), want, "{ctx}");
            let want_changed = (want != before).then_some(want).flatten();
            assert_eq!(changed, want_changed, "{ctx}");
            before = want;
        }
    }
}

#[test]
fn counters() {
    let ms = Duration::from_millis;
    let mut state = ProbeState::new(2);
    assert_eq!(state.failure_threshold(), 2);
    assert_eq!(ProbeState::new(0).failure_threshold(), 1);
    // (success, latency, successes, failures, consecutive, last latency)
    type Step = (bool, Option<Duration>, u64, u64, u32, Option<Duration>);
    let steps: &[Step] = &[
        (true, Some(ms(5)), 1, 0, 0, Some(ms(5))),
        (false, None, 1, 1, 1, Some(ms(5))),
        (false, None, 1, 2, 2, Some(ms(5))),
        (false, None, 1, 3, 3, Some(ms(5))),
        (true, Some(ms(7)), 2, 3, 0, Some(ms(7))),
    ];
    for (i, &(success, latency, s, f, c, last)) in steps.iter().enumerate() {
        state.record_with_latency(success, latency);
        assert_eq!(
            (
                state.successes(),
                state.failures(),
                state.consecutive_failures(),
                state.last_latency()
            ),
            (s, f, c, last),
            "step {i}"
        );
    }
}

#[test]
fn jitter_within_ten_percent() {
    let period = Duration::from_secs(1);
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..1000 {
        let j = jitter(period, seed);
        assert!(j <= period / 10, "seed {seed}: {j:?}");
        seen.insert(j);
    }
    assert!(seen.len() > 900, "jitter barely varies: {}", seen.len());
    assert_eq!(jitter(Duration::ZERO, 1), Duration::ZERO);
    assert_eq!(jitter(Duration::from_nanos(9), 1), Duration::ZERO);
}

// ---------------------------------------------------------------- parsing

#[test]
fn status_line_table() {
    // (line, status or None for BadResponse)
    let cases: &[(&[u8], Option<u16>)] = &[
        (b"HTTP/1.1 200 OK", Some(200)),
        (b"HTTP/1.0 503 Service Unavailable", Some(503)),
        (b"HTTP/1.1 204", Some(204)),
        (b"HTTP/1.1 200 ", Some(200)),
        (b"HTTP/2 200", None),
        (b"HTTP/1.1 20", None),
        (b"HTTP/1.1 2000 OK", None),
        (b"HTTP/1.1 +20 OK", None),
        (b"HTTP/1.1  200 OK", None),
        (b"SSH-2.0-OpenSSH_9.6", None),
        (b"", None),
        (b"HTTP/1.1 200 \xff", Some(200)),
        (b"\xffHTTP/1.1 200", None),
    ];
    for &(line, want) in cases {
        let got = parse_status_line(line);
        match (want, &got) {
            (Some(code), Ok(got)) => assert_eq!(*got, code, "{line:?}"),
            (None, Err(ProbeError::BadResponse(_))) => {}
            _ => panic!("{line:?}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn snippet_truncates_and_escapes() {
    assert_eq!(snippet(b"a\r\nb"), "\"a\\r\\nb\"");
    let long = snippet(&[b'x'; 500]);
    assert!(long.chars().count() < 100, "{long}");
    assert!(long.ends_with("…\""), "{long}");
}

// ---------------------------------------------------------------- server

/// What a test server does with each connection.
#[derive(Clone)]
enum Reply {
    /// Answer with the status currently held.
    Status(Arc<AtomicU16>),
    /// Write these bytes, then close.
    Raw(Vec<u8>),
    /// Accept, read, and never answer.
    Silent,
}

fn status(code: u16) -> Reply {
    Reply::Status(Arc::new(AtomicU16::new(code)))
}

/// A server on 127.0.0.1:0; aborted on drop.
struct Server {
    addr: SocketAddr,
    requests: mpsc::UnboundedReceiver<Vec<u8>>,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(reply: Reply) -> Server {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, requests) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let accept = async {
            for _ in 0..MAX_CONNECTIONS {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(tokio::time::timeout(
                    SERVER_LIFETIME,
                    handle(stream, reply.clone(), tx.clone()),
                ));
            }
        };
        let _ = tokio::time::timeout(SERVER_LIFETIME, accept).await;
    });
    Server {
        addr,
        requests,
        task,
    }
}

async fn handle(mut stream: TcpStream, reply: Reply, requests: mpsc::UnboundedSender<Vec<u8>>) {
    // Read the request head: bounded by size here and by time in `serve`.
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    while len < buf.len() && !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf[len..]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
    }
    let _ = requests.send(buf[..len].to_vec());
    let answer = match reply {
        Reply::Status(code) => format!(
            "HTTP/1.1 {} Whatever\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            code.load(Ordering::SeqCst)
        )
        .into_bytes(),
        Reply::Raw(bytes) => bytes,
        Reply::Silent => {
            // Hold the connection open until the test ends.
            tokio::time::sleep(SERVER_LIFETIME).await;
            return;
        }
    };
    let _ = stream.write_all(&answer).await;
    let _ = stream.shutdown().await;
}

/// An address nothing listens on: bound, then released.
async fn refused_addr() -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    listener.local_addr().unwrap()
}

// ---------------------------------------------------------------- http_probe

/// What a probe should end in.
#[derive(Debug)]
enum Want {
    Ok,
    Status(u16),
    /// BadResponse whose text contains this.
    Bad(&'static str),
    Timeout,
}

/// A response whose head is larger than [`MAX_RESPONSE_READ`].
fn big_head(status: u16) -> Vec<u8> {
    let filler = "a".repeat(MAX_RESPONSE_READ + 1000);
    format!("HTTP/1.1 {status} Whatever\r\nX-Filler: {filler}\r\n\r\n").into_bytes()
}

/// What each kind of answer makes of a probe.
fn http_probe_cases() -> Vec<(&'static str, Reply, Want)> {
    let long_garbage = vec![b'x'; 5000];
    vec![
        ("200", status(200), Want::Ok),
        ("503", status(503), Want::Status(503)),
        ("302", status(302), Want::Status(302)),
        (
            "HTTP/1.0 and LF only",
            Reply::Raw(b"HTTP/1.0 200 OK\n\n".to_vec()),
            Want::Ok,
        ),
        (
            "unterminated then closed",
            Reply::Raw(b"HTTP/1.1 200 OK".to_vec()),
            Want::Ok,
        ),
        (
            "garbage",
            Reply::Raw(b"SSH-2.0-OpenSSH_9.6\r\n".to_vec()),
            Want::Bad("SSH-2.0"),
        ),
        (
            "closed without answer",
            Reply::Raw(Vec::new()),
            Want::Bad("closed without an answer"),
        ),
        (
            "no line end in 4 KiB",
            Reply::Raw(long_garbage),
            Want::Bad("first 4096 bytes"),
        ),
        ("silent", Reply::Silent, Want::Timeout),
        // hyper reads no head in these; the status line still decides.
        (
            "200 with a head over the read bound",
            Reply::Raw(big_head(200)),
            Want::Ok,
        ),
        (
            "503 with a head over the read bound",
            Reply::Raw(big_head(503)),
            Want::Status(503),
        ),
        (
            "200 with a header hyper refuses",
            Reply::Raw(b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n".to_vec()),
            Want::Ok,
        ),
        (
            "a four-digit status",
            Reply::Raw(b"HTTP/1.1 2000 OK\r\n\r\n".to_vec()),
            Want::Bad("not an HTTP status line"),
        ),
        (
            "200 with headers and a body",
            Reply::Raw(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nready"
                    .to_vec(),
            ),
            Want::Ok,
        ),
    ]
}

#[tokio::test]
async fn http_probe_table() {
    let cases = http_probe_cases();
    let timeout = Duration::from_millis(200);
    for (name, reply, want) in cases {
        let server = serve(reply).await;
        let start = Instant::now();
        let got = http_probe(server.addr, "/ready", "gw", timeout).await;
        let elapsed = start.elapsed();
        assert!(
            elapsed < timeout + Duration::from_millis(300),
            "{name}: took {elapsed:?}"
        );
        match (&want, &got) {
            (Want::Ok, Ok(latency)) => assert!(*latency <= elapsed, "{name}"),
            (Want::Status(w), Err(ProbeError::Status(g))) => assert_eq!(w, g, "{name}"),
            (Want::Bad(text), Err(ProbeError::BadResponse(msg))) => {
                assert!(msg.contains(text), "{name}: {msg}");
                assert!(msg.len() < 300, "{name}: not truncated: {msg}");
            }
            (Want::Timeout, Err(ProbeError::Timeout)) => {
                assert!(elapsed >= timeout, "{name}: {elapsed:?}");
            }
            _ => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

#[tokio::test]
async fn http_probe_sends_the_request() {
    let mut server = serve(status(200)).await;
    http_probe(server.addr, "/ready?x=1", "10.0.0.1:4191", REPORT_WAIT)
        .await
        .unwrap();
    let request = tokio::time::timeout(REPORT_WAIT, server.requests.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8(request).unwrap(),
        "GET /ready?x=1 HTTP/1.1\r\nHost: 10.0.0.1:4191\r\nUser-Agent: clusterset-dns-probe\r\nConnection: close\r\n\r\n"
    );
}

#[tokio::test]
async fn http_probe_connection_refused() {
    let addr = refused_addr().await;
    let got = http_probe(addr, "/ready", "gw", REPORT_WAIT).await;
    assert!(matches!(got, Err(ProbeError::Connect(_))), "{got:?}");
}

#[tokio::test]
async fn http_probe_refuses_unsafe_requests() {
    // A refused address: a Request error proves nothing was dialled.
    let addr = refused_addr().await;
    let cases: &[(&str, &str)] = &[
        ("ready", "gw"),
        ("", "gw"),
        ("/a b", "gw"),
        ("/x\r\nEvil: 1", "gw"),
        ("/ready", ""),
        ("/ready", "gw\r\nEvil: 1"),
        ("/ready", "g w"),
    ];
    for &(path, host) in cases {
        let got = http_probe(addr, path, host, REPORT_WAIT).await;
        assert!(
            matches!(got, Err(ProbeError::Request(_))),
            "{path:?} {host:?}: {got:?}"
        );
    }
}

// ---------------------------------------------------------------- run

fn spec(port: u16, period_ms: u64, timeout_ms: u64, failure_threshold: u32) -> ProbeSpec {
    ProbeSpec {
        path: "/ready".to_owned(),
        port,
        period: Duration::from_millis(period_ms),
        timeout: Duration::from_millis(timeout_ms),
        failure_threshold,
    }
}

/// A running `run` and what it reported.
struct Running {
    reports: mpsc::UnboundedReceiver<ProbeReport>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    fn start(spec: ProbeSpec, addrs: watch::Receiver<Vec<IpAddr>>) -> Self {
        let (tx, reports) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run(
            spec,
            addrs,
            move |r| {
                let _ = tx.send(r);
            },
            shutdown.clone(),
        ));
        Self {
            reports,
            shutdown,
            task,
        }
    }

    async fn next(&mut self) -> ProbeReport {
        tokio::time::timeout(REPORT_WAIT, self.reports.recv())
            .await
            .expect("no report in time")
            .expect("run ended")
    }

    /// Stops `run` and checks it ends promptly.
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_millis(500), self.task)
            .await
            .expect("run did not end on shutdown")
            .unwrap();
    }
}

#[tokio::test]
async fn run_alive_then_dead() {
    let code = Arc::new(AtomicU16::new(200));
    let server = serve(Reply::Status(code.clone())).await;
    let (_tx, addrs) = watch::channel(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let start = Instant::now();
    let mut running = Running::start(spec(server.addr.port(), 50, 500, 2), addrs);

    let first = running.next().await;
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(
        (
            first.alive,
            first.changed,
            first.success,
            first.error.as_deref()
        ),
        (Some(true), true, true, None),
        "{first:?}"
    );
    assert!(first.latency.is_some());

    code.store(503, Ordering::SeqCst);
    // A probe already under way may still see 200: skip those (bounded).
    let mut report = running.next().await;
    for _ in 0..5 {
        if !report.success {
            break;
        }
        assert_eq!((report.alive, report.changed), (Some(true), false));
        report = running.next().await;
    }
    // One failure does not flap.
    assert_eq!(
        (
            report.alive,
            report.changed,
            report.success,
            report.consecutive_failures
        ),
        (Some(true), false, false, 1),
        "{report:?}"
    );
    assert!(
        report.error.as_deref().unwrap_or_default().contains("503"),
        "{report:?}"
    );
    let report = running.next().await;
    assert_eq!(
        (
            report.alive,
            report.changed,
            report.success,
            report.consecutive_failures
        ),
        (Some(false), true, false, 2),
        "{report:?}"
    );
    let report = running.next().await;
    assert_eq!((report.alive, report.changed), (Some(false), false));

    running.stop().await;
}

#[tokio::test]
async fn run_without_addresses_fails() {
    let (_tx, addrs) = watch::channel(Vec::new());
    let mut running = Running::start(spec(1, 50, 500, 1), addrs);
    let report = running.next().await;
    assert_eq!(
        (
            report.alive,
            report.changed,
            report.success,
            report.error.as_deref()
        ),
        (Some(false), true, false, Some("no gateway address")),
    );
    running.stop().await;
}

#[tokio::test]
async fn run_tries_addresses_in_order() {
    let server = serve(status(200)).await;
    // The server listens on 127.0.0.1 only, so [::1] on its port fails
    // at once (refused, or unavailable without IPv6).
    let dead = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let live = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let port = server.addr.port();

    let (_tx, addrs) = watch::channel(vec![dead, live]);
    let mut running = Running::start(spec(port, 50, 500, 1), addrs);
    let report = running.next().await;
    assert_eq!(
        (report.alive, report.success),
        (Some(true), true),
        "{report:?}"
    );
    running.stop().await;

    // Stops at the first success: a second live address is not dialled.
    let mut server = server;
    for _ in 0..MAX_CONNECTIONS {
        if server.requests.try_recv().is_err() {
            break;
        }
    }
    let (_tx, addrs) = watch::channel(vec![live, live]);
    let mut running = Running::start(spec(port, 1000, 500, 1), addrs);
    running.next().await;
    running.stop().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut seen = 0;
    for _ in 0..MAX_CONNECTIONS {
        if server.requests.try_recv().is_err() {
            break;
        }
        seen += 1;
    }
    assert_eq!(seen, 1);

    // Every failing address is named.
    let (_tx, addrs) = watch::channel(vec![dead, dead]);
    let refused = refused_addr().await;
    let mut running = Running::start(spec(refused.port(), 50, 500, 1), addrs);
    let report = running.next().await;
    let error = report.error.unwrap_or_default();
    assert_eq!(error.matches("[::1]").count(), 2, "{error}");
    running.stop().await;
}

#[tokio::test]
async fn run_keeps_state_across_address_changes() {
    let server = serve(status(200)).await;
    let (tx, addrs) = watch::channel(Vec::new());
    let mut running = Running::start(spec(server.addr.port(), 50, 500, 3), addrs);

    let first = running.next().await;
    assert_eq!((first.alive, first.consecutive_failures), (None, 1));
    // Still failing after the change: the count goes on, not from zero.
    tx.send_replace(vec![IpAddr::V6(Ipv6Addr::LOCALHOST)]);
    let mut last = first.consecutive_failures;
    let mut changed_seen = false;
    for _ in 0..10 {
        let report = running.next().await;
        assert_eq!(report.consecutive_failures, last + 1, "{report:?}");
        last = report.consecutive_failures;
        let error = report.error.unwrap_or_default();
        if !error.contains("no gateway address") {
            changed_seen = true;
            assert!(error.contains("[::1]"), "{error}");
        }
        if changed_seen && report.alive == Some(false) {
            break;
        }
    }
    assert!(changed_seen && last >= 3, "last {last}");

    tx.send_replace(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let mut report = running.next().await;
    for _ in 0..5 {
        if report.success {
            break;
        }
        report = running.next().await;
    }
    assert_eq!(
        (report.alive, report.changed, report.consecutive_failures),
        (Some(true), true, 0)
    );
    running.stop().await;
}

#[tokio::test]
async fn run_shutdown_interrupts_a_hanging_probe() {
    let server = serve(Reply::Silent).await;
    let (_tx, addrs) = watch::channel(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let mut running = Running::start(spec(server.addr.port(), 50, 10_000, 1), addrs);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(running.reports.try_recv().is_err(), "the probe should hang");
    running.stop().await;
}
