//! DNS over TLS (RFC 7858) against the built binary: a rustls client and
//! Knot's `kdig +tls` get the same answers as over TCP, the certificate is
//! reloaded from its files while an established connection keeps working,
//! a broken certificate file is refused and counted, a client that never
//! finishes its handshake is cut off, and TLS connections share the TCP
//! connection limit.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream as AsyncTcp;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::binary::{Served, http_get, serve};
use crate::support::{demo, eventually, length_prefixed, on_stream, q};

const NAME: &str = "payments-north.shop.svc.clusterset.local.";
pub(crate) const HOST: &str = "dns.clusterset.local";

/// A self-signed certificate for [`HOST`] and 127.0.0.1: (cert PEM, key PEM, cert DER).
pub(crate) fn certificate() -> (String, String, CertificateDer<'static>) {
    let made = rcgen::generate_simple_self_signed(vec![HOST.to_owned(), "127.0.0.1".to_owned()])
        .expect("generate certificate");
    (
        made.cert.pem(),
        made.signing_key.serialize_pem(),
        made.cert.der().clone(),
    )
}

struct Tls {
    dir: tempfile::TempDir,
    server: Served,
    addr: SocketAddr,
}

impl Tls {
    fn cert_path(&self) -> PathBuf {
        self.dir.path().join("tls.crt")
    }

    fn key_path(&self) -> PathBuf {
        self.dir.path().join("tls.key")
    }
}

/// Writes `cert`/`key` into the files the server watches: each through a
/// rename, so the server never reads half a file.
fn install(dir: &Path, cert: &str, key: &str) {
    for (name, text) in [("tls.key", key), ("tls.crt", cert)] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, dir.join(name)).expect("rename");
    }
}

fn start(cert: &str, key: &str, extra: &[&str]) -> Tls {
    let dir = tempfile::tempdir().expect("tempdir");
    install(dir.path(), cert, key);
    let (c, k) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let args = [
        &[
            "--local-cluster",
            "north",
            "--tls-addr",
            "127.0.0.1:0",
            "--tls-cert",
            c.to_str().expect("utf-8"),
            "--tls-key",
            k.to_str().expect("utf-8"),
        ],
        extra,
    ]
    .concat();
    let server = serve(&demo(), &args);
    let addr = server.tls.expect("a tls= address on the listening line");
    Tls { dir, server, addr }
}

/// A client trusting exactly `roots`, offering ALPN "dot".
pub(crate) fn connector(roots: &[&CertificateDer<'static>]) -> TlsConnector {
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add((*r).clone()).expect("root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"dot".to_vec()];
    TlsConnector::from(Arc::new(config))
}

/// A TLS connection to `addr`, verified as [`HOST`] (handshake within 5 s).
pub(crate) async fn connect(addr: SocketAddr, connector: &TlsConnector) -> TlsStream<AsyncTcp> {
    let tcp = AsyncTcp::connect(addr).await.expect("connect");
    let name = ServerName::try_from(HOST).expect("server name");
    tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
        .await
        .expect("handshake within 5 s")
        .expect("handshake")
}

fn presented(stream: &TlsStream<AsyncTcp>) -> CertificateDer<'static> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .expect("a certificate")
        .clone()
        .into_owned()
}

/// A query for `name` with `id`, unframed.
fn query(id: u16, name: &str, rtype: RecordType) -> Vec<u8> {
    let mut m = q(name, rtype).message();
    m.metadata.id = id;
    m.to_vec().expect("encode")
}

async fn ask<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    id: u16,
    rtype: RecordType,
) -> Message {
    let m = on_stream(s, &query(id, NAME, rtype)).await;
    assert_eq!(m.metadata.id, id);
    m
}

/// The A addresses of an answer, sorted (the server rotates them).
fn addresses(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.to_string()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

fn metric(s: &Served, name: &str) -> u64 {
    let (_, body) = http_get(s.admin, "/metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Waits (5 s at most) for `metric(name)` to reach `at_least`.
fn wait_metric(s: &Served, name: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let v = metric(s, name);
        if v >= at_least || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The same question over plain TCP, for comparison.
async fn over_tcp(dns: SocketAddr, rtype: RecordType) -> Message {
    let mut s = AsyncTcp::connect(dns).await.expect("connect");
    ask(&mut s, 1, rtype).await
}

#[tokio::test]
async fn a_rustls_client_gets_the_tcp_answers_with_alpn_dot() {
    let (cert, key, der) = certificate();
    let t = start(&cert, &key, &[]);
    let mut s = connect(t.addr, &connector(&[&der])).await;
    assert_eq!(s.get_ref().1.alpn_protocol(), Some(&b"dot"[..]));
    assert_eq!(presented(&s), der);
    for (id, rtype) in [
        (1, RecordType::A),
        (2, RecordType::SRV),
        (3, RecordType::AAAA),
    ] {
        let tls = ask(&mut s, id, rtype).await;
        let tcp = over_tcp(t.server.dns, rtype).await;
        assert_eq!(tls.metadata.response_code, tcp.metadata.response_code);
        assert_eq!(tls.answers.len(), tcp.answers.len(), "{rtype}");
        if rtype == RecordType::A {
            assert!(!tls.answers.is_empty());
            assert_eq!(addresses(&tls), addresses(&tcp));
        }
    }
    assert_eq!(
        metric(
            &t.server,
            "clusterset_dns_connections_open{transport=\"tls\"}"
        ),
        1
    );
}

#[test]
fn kdig_over_tls_verifies_the_certificate_and_gets_the_answer() {
    let (cert, key, _) = certificate();
    let t = start(&cert, &key, &[]);
    let ca = format!("+tls-ca={}", t.cert_path().display());
    let run = |extra: &[&str]| {
        let out = Command::new("kdig")
            .arg(format!("@{}", t.addr.ip()))
            .args(["-p", &t.addr.port().to_string()])
            .args([
                "+tls",
                &format!("+tls-hostname={HOST}"),
                "+time=5",
                "+retry=0",
            ])
            .args(extra)
            .args([NAME, "A"])
            .output()
            .expect("kdig (Debian knot-dnsutils) must be installed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = run(&[&ca]);
    assert!(out.contains("status: NOERROR"), "{out}");
    assert!(out.contains("TLS session"), "not over TLS: {out}");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let tcp = runtime.block_on(over_tcp(t.server.dns, RecordType::A));
    for a in addresses(&tcp) {
        assert!(out.contains(&a), "{a} missing from kdig's answer: {out}");
    }
    // With a CA that did not sign the server's certificate, kdig refuses.
    let (other, _, _) = certificate();
    let other_path = t.dir.path().join("other-ca.pem");
    std::fs::write(&other_path, other).expect("write");
    let out = run(&[&format!("+tls-ca={}", other_path.display())]);
    assert!(!out.contains("status: NOERROR"), "unverified: {out}");
}

#[tokio::test]
async fn a_new_certificate_is_served_without_dropping_open_connections() {
    let (cert1, key1, der1) = certificate();
    let (cert2, key2, der2) = certificate();
    let t = start(&cert1, &key1, &[]);
    let both = connector(&[&der1, &der2]);
    let mut before = connect(t.addr, &both).await;
    assert_eq!(presented(&before), der1);
    assert_eq!(
        ask(&mut before, 1, RecordType::A)
            .await
            .metadata
            .response_code,
        ResponseCode::NoError
    );

    install(t.dir.path(), &cert2, &key2);
    eventually(
        "the new certificate served",
        Duration::from_secs(10),
        || async { presented(&connect(t.addr, &both).await) == der2 },
    )
    .await;
    assert_eq!(
        metric(&t.server, "clusterset_dns_tls_cert_reloads_total"),
        1
    );
    // The connection made before the reload still answers.
    let m = ask(&mut before, 2, RecordType::A).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(!m.answers.is_empty());

    // A key that does not match is refused; the current certificate stays.
    let (_, stray_key, _) = certificate();
    std::fs::write(t.key_path(), stray_key).expect("write");
    assert_eq!(
        wait_metric(&t.server, "clusterset_dns_tls_cert_reload_errors_total", 1),
        1
    );
    let mut after = connect(t.addr, &both).await;
    assert_eq!(presented(&after), der2);
    assert_eq!(
        ask(&mut after, 3, RecordType::A)
            .await
            .metadata
            .response_code,
        ResponseCode::NoError
    );
}

#[tokio::test]
async fn a_stalled_handshake_is_cut_off_and_tls_shares_the_connection_limit() {
    let (cert, key, der) = certificate();
    let t = start(
        &cert,
        &key,
        &["--message-timeout", "300ms", "--max-connections", "2"],
    );
    // A client that connects and sends nothing.
    let mut silent = AsyncTcp::connect(t.addr).await.expect("connect");
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(3), silent.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the server should close a silent TLS client: {read:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        wait_metric(&t.server, "clusterset_dns_tls_handshake_failures_total", 1),
        1
    );
    // One TCP and one TLS connection, both answered, take both slots: a
    // third is closed at once.
    let mut tcp = AsyncTcp::connect(t.server.dns).await.expect("connect");
    ask(&mut tcp, 1, RecordType::A).await;
    let mut tls = connect(t.addr, &connector(&[&der])).await;
    ask(&mut tls, 2, RecordType::A).await;
    let mut third = AsyncTcp::connect(t.server.dns).await.expect("connect");
    let _ = third
        .write_all(&length_prefixed(&query(3, NAME, RecordType::A)))
        .await;
    let read = tokio::time::timeout(Duration::from_secs(3), third.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
    assert_eq!(
        wait_metric(
            &t.server,
            "clusterset_dns_limit_hits_total{limit=\"connections\"}",
            1
        ),
        1
    );
    // The two held connections still answer.
    ask(&mut tcp, 4, RecordType::A).await;
    ask(&mut tls, 5, RecordType::A).await;
}

/// Zone transfer over TLS (XoT, RFC 9103): `kdig +tls AXFR` from an
/// allowed client gets the whole zone, SOA first and last, as many records
/// as `dump` prints and the closing SOA.
#[test]
fn kdig_transfers_the_zone_over_tls() {
    let (cert, key, _) = certificate();
    let t = start(&cert, &key, &["--allow-transfer", "127.0.0.1"]);
    let out = Command::new("kdig")
        .arg(format!("@{}", t.addr.ip()))
        .args(["-p", &t.addr.port().to_string()])
        .args([
            "+tls",
            &format!("+tls-hostname={HOST}"),
            &format!("+tls-ca={}", t.cert_path().display()),
            "+time=5",
            "+retry=0",
            "AXFR",
            "clusterset.local.",
        ])
        .output()
        .expect("kdig (Debian knot-dnsutils) must be installed");
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    // kdig 3.2 prints no TLS session line for a transfer; the TLS listener
    // speaks nothing but TLS, so an answer from its port came over TLS.
    let port = format!("@{}(", t.addr.port());
    assert!(out.contains(&port), "not from the TLS listener: {out}");
    let records: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with(';') && l.contains("\tIN\t"))
        .collect();
    let soa = |l: &&str| l.contains("\tSOA\t");
    assert!(records.first().is_some_and(soa), "{out}");
    assert!(records.last().is_some_and(soa), "{out}");
    let dumped = Command::new(crate::binary::bin())
        .args(["dump", "--zones"])
        .arg(demo())
        .args(["--local-cluster", "north"])
        .output()
        .expect("dump");
    let dumped = String::from_utf8_lossy(&dumped.stdout)
        .lines()
        .filter(|l| !l.starts_with('$'))
        .count();
    assert_eq!(records.len(), dumped + 1, "{out}");
}
