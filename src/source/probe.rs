//! The gateway liveness probe (Linkerd `probe_worker.go`, reference
//! `docs/linkerd.md` §4.2–4.3): a plain HTTP/1.1 `GET` of
//! `probeSpec.path` on `probeSpec.port` of each gateway address, success
//! only on status 200, and a gateway counted dead after `failureThreshold`
//! consecutive failures.
//!
//! Owns the published-state machine ([`ProbeState`]), the single HTTP
//! exchange ([`http_probe`], on hyper's HTTP/1 client connection) and the
//! periodic loop ([`run`]). It must not resolve gateway hostnames (addresses
//! arrive on a watch channel), touch the model or DNS answers (it only calls
//! `report`), or speak TLS: Linkerd's controller goes through its meshed
//! proxy, this probe dials the gateway's probe port directly, which the
//! gateway serves in plain HTTP.
//!
//! Only the status line decides: hyper reads the response head, and when
//! it cannot (a head cut short by the server closing, or by the read bound,
//! or one it refuses), the status line among the bytes read still says what
//! the gateway meant, as it always did here.
//!
//! Two deliberate differences from Linkerd: the first probe runs at start
//! rather than one period later, so a dead gateway is known sooner; and the
//! state is unknown (`None`) until the first result, rather than `false`, so
//! the caller decides what "not probed yet" means.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::Empty;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::spec::ProbeSpec;

/// Most bytes read of a response; a real status line is a few dozen bytes
/// and a probe's response head a few hundred, so anything longer is not
/// the answer of a gateway's probe port.
pub(crate) const MAX_RESPONSE_READ: usize = 4096;

/// Shortest period the loop honours: a zero period would probe in a tight
/// loop.
pub(crate) const MIN_PERIOD: Duration = Duration::from_millis(10);

/// How many characters of an unexpected response an error shows.
const SNIPPET_CHARS: usize = 80;

/// Why one probe failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    /// The TCP connection could not be made (refused, unreachable...).
    #[error("connect: {0}")]
    Connect(#[source] io::Error),
    /// The connection broke while sending the request or reading the answer.
    #[error("connection failed: {0}")]
    Io(#[source] io::Error),
    /// No status line within the timeout.
    #[error("no answer within the timeout")]
    Timeout,
    /// What came back is not an HTTP status line (shown, truncated).
    #[error("bad response: {0}")]
    BadResponse(String),
    /// An HTTP status other than 200.
    #[error("HTTP status {0}, want 200")]
    Status(u16),
    /// The path or host cannot go into a request line or header unchanged
    /// (refused rather than sent, so a Link cannot inject headers).
    #[error("cannot send the probe: {0}")]
    Request(String),
}

/// The published liveness of one gateway and the probe counters behind it.
///
/// Pure: [`run`] feeds it results, tests feed it sequences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeState {
    failure_threshold: u32,
    alive: Option<bool>,
    consecutive_failures: u32,
    successes: u64,
    failures: u64,
    last_latency: Option<Duration>,
}

impl ProbeState {
    /// Unknown state; `failure_threshold` consecutive failures make the
    /// gateway dead. A threshold of 0 acts as 1: "dead after no failures"
    /// would have nothing to wait for.
    pub(crate) fn new(failure_threshold: u32) -> Self {
        Self {
            failure_threshold: failure_threshold.max(1),
            alive: None,
            consecutive_failures: 0,
            successes: 0,
            failures: 0,
            last_latency: None,
        }
    }

    /// Records one probe result; returns `Some(new_alive)` only when the
    /// published state changes.
    pub(crate) fn record(&mut self, success: bool) -> Option<bool> {
        let next = if success {
            self.successes = self.successes.saturating_add(1);
            // One success is enough: Linkerd resets the count and reports
            // alive again on the first success after a failure.
            self.consecutive_failures = 0;
            true
        } else {
            self.failures = self.failures.saturating_add(1);
            self.consecutive_failures = self.consecutive_failures.saturating_add(1);
            if self.consecutive_failures < self.failure_threshold {
                // Below the threshold nothing is published, whatever the
                // current state, so one lost probe never flaps the answer.
                return None;
            }
            false
        };
        if self.alive == Some(next) {
            return None;
        }
        self.alive = Some(next);
        Some(next)
    }

    /// [`Self::record`], also keeping `latency` (when known) as the last
    /// latency.
    pub(crate) fn record_with_latency(
        &mut self,
        success: bool,
        latency: Option<Duration>,
    ) -> Option<bool> {
        if latency.is_some() {
            self.last_latency = latency;
        }
        self.record(success)
    }

    /// The published state: `None` until the first result decides one.
    pub(crate) fn alive(&self) -> Option<bool> {
        self.alive
    }

    /// The threshold in use (at least 1).
    #[cfg(test)]
    pub(crate) fn failure_threshold(&self) -> u32 {
        self.failure_threshold
    }

    /// Failures since the last success.
    pub(crate) fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// Successful probes so far.
    #[cfg(test)]
    pub(crate) fn successes(&self) -> u64 {
        self.successes
    }

    /// Failed probes so far.
    #[cfg(test)]
    pub(crate) fn failures(&self) -> u64 {
        self.failures
    }

    /// Latency of the last probe that had one.
    #[cfg(test)]
    pub(crate) fn last_latency(&self) -> Option<Duration> {
        self.last_latency
    }
}

/// What [`run`] reports after every probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeReport {
    /// The published state after this probe.
    pub alive: Option<bool>,
    /// Whether this probe changed the published state.
    pub changed: bool,
    /// Whether this probe succeeded.
    pub success: bool,
    /// Time to the response head of the address that answered 200.
    pub latency: Option<Duration>,
    /// Why the probe failed: each address tried and its error.
    pub error: Option<String>,
    /// Failures since the last success.
    pub consecutive_failures: u32,
}

/// One HTTP/1.1 `GET path` to `addr` with `Host: host`; the whole exchange
/// (connect, send, response head) is bounded by `timeout`. At most
/// [`MAX_RESPONSE_READ`] bytes are read, then the connection is dropped.
/// Success is status 200 only (Linkerd's rule), and returns the time from
/// the start of the connect to the response head.
pub(crate) async fn http_probe(
    addr: SocketAddr,
    path: &str,
    host: &str,
    timeout: Duration,
) -> Result<Duration, ProbeError> {
    let request = build_request(path, host)?;
    let start = Instant::now();
    match tokio::time::timeout(timeout, exchange(addr, request)).await {
        Ok(Ok(())) => Ok(start.elapsed()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ProbeError::Timeout),
    }
}

/// The request, or why `path`/`host` cannot be sent as they are.
/// Anything at or below space, or DEL, would end the request line or a
/// header early.
fn unsafe_byte(s: &str) -> bool {
    s.bytes().any(|b| b <= b' ' || b == 0x7f)
}

/// Why `path` cannot be a probe's request path, if it cannot: it must
/// start with '/', hold no spaces or control characters, and be a path the
/// HTTP client sends as it is (no `<`, `>`, backtick, nor a `#` fragment,
/// which it would cut off). Checked where a Link or the clusters file is
/// read, so a bad path is reported once there, not as a dead gateway.
pub(crate) fn path_problem(path: &str) -> Option<String> {
    let sent = path.parse::<http::uri::PathAndQuery>();
    let whole = sent.is_ok_and(|p| p.as_str() == path);
    (!path.starts_with('/') || unsafe_byte(path) || !whole).then(|| {
        format!(
            "{path:?} is not a request path (it must start with '/' and hold no spaces, control characters, '<', '>', '`' or '#')"
        )
    })
}

fn build_request(path: &str, host: &str) -> Result<http::Request<Empty<Bytes>>, ProbeError> {
    // The path and host come from a Link: refuse what would not be sent as
    // it is (hyper would refuse some, but the message should name the field).
    if let Some(problem) = path_problem(path) {
        return Err(ProbeError::Request(format!("path {problem}")));
    }
    if host.is_empty() || unsafe_byte(host) {
        return Err(ProbeError::Request(format!(
            "host {host:?} must be non-empty and hold no spaces or control characters"
        )));
    }
    let host = http::HeaderValue::from_bytes(host.as_bytes())
        .map_err(|e| ProbeError::Request(format!("host {host:?}: {e}")))?;
    http::Request::get(path)
        .header(http::header::HOST, host)
        .header(http::header::USER_AGENT, "clusterset-dns-probe")
        // One request per connection: a probe proves the port answers now.
        .header(http::header::CONNECTION, "close")
        .body(Empty::new())
        .map_err(|e| ProbeError::Request(format!("path {path:?}: {e}")))
}

/// The gateway connection as hyper reads it: the response ends after
/// [`MAX_RESPONSE_READ`] bytes (hyper's own buffer bound is larger), and
/// the bytes read are kept, to judge a head hyper cannot read.
struct Bounded {
    stream: TcpStream,
    seen: Arc<Mutex<Vec<u8>>>,
}

fn lock(seen: &Mutex<Vec<u8>>) -> std::sync::MutexGuard<'_, Vec<u8>> {
    // A panic while holding the lock leaves plain bytes behind; keep going.
    seen.lock().unwrap_or_else(PoisonError::into_inner)
}

impl AsyncRead for Bounded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let room = MAX_RESPONSE_READ
            .saturating_sub(lock(&this.seen).len())
            .min(buf.remaining());
        if room == 0 {
            // The bound: to hyper, the response ends here.
            return Poll::Ready(Ok(()));
        }
        let mut chunk = [0u8; MAX_RESPONSE_READ];
        let mut limited = ReadBuf::new(&mut chunk[..room]);
        ready!(Pin::new(&mut this.stream).poll_read(cx, &mut limited))?;
        let got = limited.filled();
        lock(&this.seen).extend_from_slice(got);
        buf.put_slice(got);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Bounded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Connect, send, and read the response head; `Ok` only on 200.
async fn exchange(
    addr: SocketAddr,
    request: http::Request<Empty<Bytes>>,
) -> Result<(), ProbeError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(ProbeError::Connect)?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let io = TokioIo::new(Bounded {
        stream,
        seen: seen.clone(),
    });
    // Title case, as the probe always sent them: some servers care.
    let (mut sender, conn) = http1::Builder::new()
        .title_case_headers(true)
        .handshake(io)
        .await
        .map_err(|e| unanswered(&e))?;
    // The connection is driven here, not spawned, so the caller's timeout
    // drops it with the request.
    tokio::pin!(conn);
    let response = sender.send_request(request);
    tokio::pin!(response);
    let mut conn_done = false;
    let answered = loop {
        tokio::select! {
            biased;
            r = &mut response => break r,
            r = &mut conn, if !conn_done => match r {
                Err(e) => break Err(e),
                // Ended without an error: the request's end says why.
                Ok(()) => conn_done = true,
            },
        }
    };
    match answered {
        Ok(response) => match response.status().as_u16() {
            200 => Ok(()),
            status => Err(ProbeError::Status(status)),
        },
        Err(e) => http_failure(&e, &lock(&seen)),
    }
}

/// The verdict when hyper read no response head: from the status line
/// among the bytes `seen`, when there are any (the head was cut short,
/// refused, or over the bound); else what broke the connection. A
/// connection that broke in the middle of the status line broke.
fn http_failure(error: &hyper::Error, seen: &[u8]) -> Result<(), ProbeError> {
    let broke = io_cause(error).is_some() && !seen.contains(&b'\n');
    if seen.is_empty() || broke {
        return Err(unanswered(error));
    }
    status_of(seen)
}

/// Why nothing usable came back: the connection's I/O error, or it closed.
fn unanswered(error: &hyper::Error) -> ProbeError {
    match io_cause(error) {
        Some(io) => ProbeError::Io(io::Error::new(io.kind(), io.to_string())),
        None => ProbeError::BadResponse("connection closed without an answer".to_owned()),
    }
}

/// The I/O error behind `error`, if one is.
fn io_cause(error: &hyper::Error) -> Option<&io::Error> {
    let mut cause = std::error::Error::source(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io);
        }
        cause = e.source();
    }
    None
}

/// The verdict of the status line that starts `seen`: `Ok` only on 200. A
/// server that closes right after an unterminated status line still said
/// what it meant.
fn status_of(seen: &[u8]) -> Result<(), ProbeError> {
    let line = match seen.iter().position(|&b| b == b'\n') {
        Some(i) => &seen[..i],
        None if seen.len() >= MAX_RESPONSE_READ => {
            return Err(ProbeError::BadResponse(format!(
                "no status line in the first {MAX_RESPONSE_READ} bytes: {}",
                snippet(seen)
            )));
        }
        None => seen,
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    match parse_status_line(line)? {
        200 => Ok(()),
        status => Err(ProbeError::Status(status)),
    }
}

/// The status code of an HTTP/1.x status line (without its line end).
fn parse_status_line(line: &[u8]) -> Result<u16, ProbeError> {
    let bad = || ProbeError::BadResponse(format!("not an HTTP status line: {}", snippet(line)));
    // Bytes, not text: the reason phrase may hold any octet (obs-text), and
    // only the version and code matter.
    let mut parts = line.splitn(3, |&b| b == b' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    if !version.starts_with(b"HTTP/1.") || code.len() != 3 {
        return Err(bad());
    }
    code.iter().try_fold(0u16, |acc, &b| {
        b.is_ascii_digit()
            .then(|| acc * 10 + u16::from(b - b'0'))
            .ok_or_else(bad)
    })
}

/// The start of `bytes` as printable text, for error messages.
fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text
        .chars()
        .take(SNIPPET_CHARS)
        .flat_map(char::escape_debug)
        .collect();
    if text.chars().nth(SNIPPET_CHARS).is_some() {
        out.push('…');
    }
    format!("\"{out}\"")
}

/// The extra delay added to a period: up to +10% (Linkerd's
/// `NewTicker(period, period/10)`), spread so that gateways probed by one
/// process do not stay in step. Deterministic in `seed`, which [`run`]
/// derives from the clock and a counter (no rand crate).
fn jitter(period: Duration, seed: u64) -> Duration {
    let max = period.as_nanos() / 10;
    if max == 0 {
        return Duration::ZERO;
    }
    let mut hasher = DefaultHasher::new();
    seed.hash(&mut hasher);
    let nanos = u128::from(hasher.finish()) % (max + 1);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// A fresh jitter seed: the wall clock's nanoseconds mixed with a counter,
/// so two loops started together still differ after their first probe.
fn jitter_seed(counter: u64) -> u64 {
    let clock = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    u64::from(clock) ^ counter.rotate_left(32)
}

/// Probes the gateway until `shutdown`: first at once, then every
/// `spec.period` (at least [`MIN_PERIOD`]) plus up to 10% jitter, counted
/// from the start of the previous probe, so a slow probe is followed by the
/// next one at once rather than a full period later.
///
/// Each probe tries the current `addrs` in order on `spec.port` and succeeds
/// at the first 200; all of them together get `spec.timeout`. No addresses
/// is a failure. Address changes are picked up at the next probe and do not
/// reset the state. `report` is called after every probe; state changes are
/// also logged (the caller's span names the gateway).
pub(crate) async fn run(
    spec: ProbeSpec,
    addrs: watch::Receiver<Vec<IpAddr>>,
    report: impl Fn(ProbeReport) + Send + 'static,
    shutdown: CancellationToken,
) {
    let mut state = ProbeState::new(spec.failure_threshold);
    let period = spec.period.max(MIN_PERIOD);
    let mut counter: u64 = 0;
    loop {
        let started = tokio::time::Instant::now();
        // Cloned so the watch is not borrowed across the probe's awaits.
        let targets = addrs.borrow().clone();
        let outcome = tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            outcome = probe_once(&spec, &targets) => outcome,
        };
        let (success, latency, error) = match outcome {
            Ok(latency) => (true, Some(latency), None),
            Err(error) => (false, None, Some(error)),
        };
        let changed = state.record_with_latency(success, latency);
        match changed {
            Some(true) => info!(
                addresses = ?targets,
                port = spec.port,
                path = %spec.path,
                ?latency,
                "gateway probe: alive"
            ),
            Some(false) => warn!(
                addresses = ?targets,
                port = spec.port,
                path = %spec.path,
                consecutive_failures = state.consecutive_failures(),
                error = error.as_deref().unwrap_or_default(),
                "gateway probe: dead"
            ),
            None => debug!(
                success,
                ?latency,
                consecutive_failures = state.consecutive_failures(),
                error = error.as_deref().unwrap_or_default(),
                "gateway probe"
            ),
        }
        report(ProbeReport {
            alive: state.alive(),
            changed: changed.is_some(),
            success,
            latency,
            error,
            consecutive_failures: state.consecutive_failures(),
        });

        counter = counter.wrapping_add(1);
        let wait = period
            .saturating_add(jitter(period, jitter_seed(counter)))
            .saturating_sub(started.elapsed());
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// One probe of `targets` in order, all within `spec.timeout`; the latency
/// of the first 200, or every attempt's error.
async fn probe_once(spec: &ProbeSpec, targets: &[IpAddr]) -> Result<Duration, String> {
    if targets.is_empty() {
        return Err("no gateway address".to_owned());
    }
    // An absurd timeout that overflows the clock just means no deadline.
    let deadline = Instant::now().checked_add(spec.timeout);
    let mut errors = Vec::new();
    for ip in targets {
        let remaining = deadline.map_or(spec.timeout, |d| {
            d.saturating_duration_since(Instant::now())
        });
        if remaining.is_zero() {
            errors.push(format!("{ip}: not tried, probe timeout spent"));
            continue;
        }
        let addr = SocketAddr::new(*ip, spec.port);
        // No name was dialled, so the address is the truthful Host.
        match http_probe(addr, &spec.path, &addr.to_string(), remaining).await {
            Ok(latency) => return Ok(latency),
            Err(e) => errors.push(format!("{addr}: {e}")),
        }
    }
    Err(errors.join("; "))
}

#[cfg(test)]
mod tests;
