//! Certificates load with messages naming the file, reloads swap what new
//! handshakes see while older connections keep working, and ALPN `dot` is
//! offered but not required. Every network wait is bounded.

use std::net::SocketAddr;
use std::os::unix::fs::symlink;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ProtocolVersion, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_rustls::client::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::*;

const WAIT: Duration = Duration::from_secs(5);

/// A self-signed certificate for `localhost` and its key, as PEM.
struct Pair {
    cert_pem: String,
    key_pem: String,
    der: CertificateDer<'static>,
    /// The key's PKCS#8 DER.
    key_der: Vec<u8>,
}

fn pair(common_name: &str) -> Pair {
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("cert params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("self-signed cert");
    Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        der: cert.der().clone(),
        key_der: key.serialize_der(),
    }
}

/// `tls.crt` and `tls.key` in `dir`.
fn files_in(dir: &Path) -> TlsFiles {
    TlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    }
}

fn write(files: &TlsFiles, cert: &str, key: &str) {
    fs::write(&files.cert, cert).expect("write cert");
    fs::write(&files.key, key).expect("write key");
}

fn serving(store: &CertStore) -> CertificateDer<'static> {
    store.current().cert[0].clone()
}

/// A TLS echo server on loopback; it lives as long as the test's runtime.
async fn echo_server(config: Arc<ServerConfig>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = [0u8; 256];
                while let Ok(n @ 1..) = tls.read(&mut buf).await {
                    if tls.write_all(&buf[..n]).await.is_err() || tls.flush().await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A client trusting `trusted`, offering `alpn`, limited to `versions`,
/// without session resumption (so every handshake sees a certificate).
fn client(
    trusted: &[&CertificateDer<'static>],
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for cert in trusted {
        roots.add((*cert).clone()).expect("trust anchor");
    }
    let mut config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config.resumption = rustls::client::Resumption::disabled();
    TlsConnector::from(Arc::new(config))
}

async fn connect(addr: SocketAddr, connector: &TlsConnector) -> TlsStream<TcpStream> {
    let name = ServerName::try_from("localhost").expect("server name");
    timeout(WAIT, async {
        let tcp = TcpStream::connect(addr).await?;
        connector.connect(name, tcp).await
    })
    .await
    .expect("handshake in time")
    .expect("handshake")
}

fn presented(stream: &TlsStream<TcpStream>) -> CertificateDer<'static> {
    stream
        .get_ref()
        .1
        .peer_certificates()
        .expect("server certificate")[0]
        .clone()
}

/// Sends `bytes` and expects them back.
async fn echo(stream: &mut TlsStream<TcpStream>, bytes: &[u8]) {
    let mut back = vec![0u8; bytes.len()];
    timeout(WAIT, async {
        stream.write_all(bytes).await?;
        stream.flush().await?;
        stream.read_exact(&mut back).await
    })
    .await
    .expect("echo in time")
    .expect("echo");
    assert_eq!(back, bytes);
}

/// The SEC1 `ECPrivateKey` inside a PKCS#8 EC key (the `privateKey`
/// OCTET STRING of `PrivateKeyInfo`).
fn sec1_of(pkcs8: &[u8]) -> Vec<u8> {
    fn tlv(b: &[u8]) -> (u8, &[u8], &[u8]) {
        let (len, header) = match b[1] {
            short @ 0..0x80 => (usize::from(short), 2),
            long => {
                let n = usize::from(long & 0x7f);
                let len = b[2..2 + n]
                    .iter()
                    .fold(0, |acc, &x| (acc << 8) | usize::from(x));
                (len, 2 + n)
            }
        };
        (b[0], &b[header..header + len], &b[header + len..])
    }
    let (_, info, _) = tlv(pkcs8);
    let (_, _, rest) = tlv(info); // version
    let (_, _, rest) = tlv(rest); // privateKeyAlgorithm
    let (tag, key, _) = tlv(rest);
    assert_eq!(tag, 0x04, "privateKey is an OCTET STRING");
    key.to_vec()
}

fn pem_section(label: &str, der: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for chunk in der.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &x)| acc | (u32::from(x) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                b64.push('=');
            }
        }
    }
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|l| std::str::from_utf8(l).expect("ascii"))
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

#[test]
fn load_accepts_a_matching_pair() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = files_in(dir.path());
    let a = pair("a");
    write(&files, &a.cert_pem, &a.key_pem);
    let store = CertStore::load(&files).expect("load");
    assert_eq!(serving(&store), a.der);
    assert_eq!(store.files(), &files);
}

#[test]
fn load_accepts_sec1_keys_and_one_file_holding_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = pair("a");

    let sec1 = pem_section("EC PRIVATE KEY", &sec1_of(&a.key_der));
    let files = files_in(dir.path());
    write(&files, &a.cert_pem, &sec1);
    let store = CertStore::load(&files).expect("SEC1 key loads");
    assert_eq!(serving(&store), a.der);

    let both = dir.path().join("tls.pem");
    fs::write(&both, format!("{}{}", a.key_pem, a.cert_pem)).expect("write");
    let store = CertStore::load(&TlsFiles {
        cert: both.clone(),
        key: both,
    })
    .expect("combined file loads");
    assert_eq!(serving(&store), a.der);
}

/// A pair of files that must not load (`None`: the file is missing), the
/// error it must give and which files the message must name.
struct Case<'a> {
    name: &'a str,
    cert: Option<&'a str>,
    key: Option<&'a str>,
    is: fn(&TlsError) -> bool,
    names_cert: bool,
    names_key: bool,
}

#[test]
fn load_errors_name_the_file() {
    let a = pair("a");
    let b = pair("b");
    let not_a_key = pem_section("PRIVATE KEY", b"not a key");
    let not_a_cert = pem_section("CERTIFICATE", b"not a certificate");
    let encrypted = pem_section("ENCRYPTED PRIVATE KEY", b"not a key either");
    let unterminated = "-----BEGIN CERTIFICATE-----\nbm90IGEga2V5\n";
    let cases = [
        Case {
            name: "missing certificate file",
            cert: None,
            key: Some(&a.key_pem),
            is: |e| matches!(e, TlsError::Read { .. }),
            names_cert: true,
            names_key: false,
        },
        Case {
            name: "missing key file",
            cert: Some(&a.cert_pem),
            key: None,
            is: |e| matches!(e, TlsError::Read { .. }),
            names_cert: false,
            names_key: true,
        },
        Case {
            name: "no certificate in the certificate file",
            cert: Some(&a.key_pem),
            key: Some(&a.key_pem),
            is: |e| matches!(e, TlsError::NoCertificate { .. }),
            names_cert: true,
            names_key: false,
        },
        Case {
            name: "unterminated PEM section",
            cert: Some(unterminated),
            key: Some(&a.key_pem),
            is: |e| matches!(e, TlsError::Pem { .. }),
            names_cert: true,
            names_key: false,
        },
        Case {
            name: "not a certificate",
            cert: Some(&not_a_cert),
            key: Some(&a.key_pem),
            is: |e| matches!(e, TlsError::BadCertificate { .. }),
            names_cert: true,
            names_key: false,
        },
        Case {
            name: "no key in the key file",
            cert: Some(&a.cert_pem),
            key: Some(&a.cert_pem),
            is: |e| matches!(e, TlsError::NoPrivateKey { .. }),
            names_cert: false,
            names_key: true,
        },
        Case {
            name: "encrypted key",
            cert: Some(&a.cert_pem),
            key: Some(&encrypted),
            is: |e| matches!(e, TlsError::EncryptedKey { .. }),
            names_cert: false,
            names_key: true,
        },
        Case {
            name: "not a key",
            cert: Some(&a.cert_pem),
            key: Some(&not_a_key),
            is: |e| matches!(e, TlsError::UnsupportedKey { .. }),
            names_cert: false,
            names_key: true,
        },
        Case {
            name: "key of another certificate",
            cert: Some(&a.cert_pem),
            key: Some(&b.key_pem),
            is: |e| matches!(e, TlsError::KeyMismatch { .. }),
            names_cert: true,
            names_key: true,
        },
    ];
    for Case {
        name: case,
        cert,
        key,
        is,
        names_cert,
        names_key,
    } in cases
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = files_in(dir.path());
        if let Some(cert) = cert {
            fs::write(&files.cert, cert).expect("write cert");
        }
        if let Some(key) = key {
            fs::write(&files.key, key).expect("write key");
        }
        let err = CertStore::load(&files).expect_err(case);
        let message = err.to_string();
        assert!(is(&err), "{case}: {err:?}");
        let cert_path = files.cert.display().to_string();
        let key_path = files.key.display().to_string();
        assert_eq!(
            message.contains(&cert_path),
            names_cert,
            "{case}: {message}"
        );
        assert_eq!(message.contains(&key_path), names_key, "{case}: {message}");
    }
}

#[test]
fn reload_of_unchanged_files_is_false() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = files_in(dir.path());
    let a = pair("a");
    write(&files, &a.cert_pem, &a.key_pem);
    let store = CertStore::load(&files).expect("load");
    let before = store.current();
    assert!(!store.reload().expect("reload"));
    // Rewritten with the same bytes: a touch, not a change.
    write(&files, &a.cert_pem, &a.key_pem);
    assert!(!store.reload().expect("reload"));
    assert!(Arc::ptr_eq(&before, &store.current()));
}

#[tokio::test]
async fn reload_serves_new_handshakes_and_keeps_old_connections() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = files_in(dir.path());
    let (a, b) = (pair("a"), pair("b"));
    write(&files, &a.cert_pem, &a.key_pem);
    let store = Arc::new(CertStore::load(&files).expect("load"));
    let addr = echo_server(server_config(store.clone()).expect("config")).await;
    let versions = rustls::DEFAULT_VERSIONS;

    let mut before = connect(addr, &client(&[&a.der, &b.der], &[ALPN_DOT], versions)).await;
    assert_eq!(presented(&before), a.der);
    echo(&mut before, b"before the reload").await;

    write(&files, &b.cert_pem, &b.key_pem);
    assert!(store.reload().expect("reload"));
    assert_eq!(serving(&store), b.der);

    let mut after = connect(addr, &client(&[&a.der, &b.der], &[ALPN_DOT], versions)).await;
    assert_eq!(presented(&after), b.der);
    echo(&mut after, b"new connection").await;
    echo(&mut before, b"old connection, after the reload").await;
}

#[tokio::test]
async fn reload_with_broken_files_keeps_the_old_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = files_in(dir.path());
    let (a, b) = (pair("a"), pair("b"));
    write(&files, &a.cert_pem, &a.key_pem);
    let store = Arc::new(CertStore::load(&files).expect("load"));
    let addr = echo_server(server_config(store.clone()).expect("config")).await;

    write(&files, &b.cert_pem, &a.key_pem);
    let err = store.reload().expect_err("mismatched key");
    assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err:?}");
    assert_eq!(serving(&store), a.der);

    fs::write(&files.key, "garbage").expect("write key");
    let err = store.reload().expect_err("no key");
    assert!(matches!(err, TlsError::NoPrivateKey { .. }), "{err:?}");
    assert!(err.to_string().contains(&files.key.display().to_string()));
    assert_eq!(serving(&store), a.der);

    let mut conn = connect(
        addr,
        &client(&[&a.der, &b.der], &[ALPN_DOT], rustls::DEFAULT_VERSIONS),
    )
    .await;
    assert_eq!(presented(&conn), a.der);
    echo(&mut conn, b"still a").await;

    // Back to what is loaded: no change.
    write(&files, &a.cert_pem, &a.key_pem);
    assert!(!store.reload().expect("reload"));
}

#[tokio::test]
async fn alpn_dot_is_negotiated_and_optional() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = files_in(dir.path());
    let a = pair("a");
    write(&files, &a.cert_pem, &a.key_pem);
    let store = Arc::new(CertStore::load(&files).expect("load"));
    let addr = echo_server(server_config(store).expect("config")).await;

    let mut dot = connect(
        addr,
        &client(&[&a.der], &[ALPN_DOT], rustls::DEFAULT_VERSIONS),
    )
    .await;
    assert_eq!(dot.get_ref().1.alpn_protocol(), Some(ALPN_DOT));
    assert_eq!(
        dot.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_3)
    );
    echo(&mut dot, b"dot").await;

    let mut plain = connect(addr, &client(&[&a.der], &[], rustls::DEFAULT_VERSIONS)).await;
    assert_eq!(plain.get_ref().1.alpn_protocol(), None);
    echo(&mut plain, b"no alpn").await;

    let mut tls12 = connect(
        addr,
        &client(&[&a.der], &[ALPN_DOT], &[&rustls::version::TLS12]),
    )
    .await;
    assert_eq!(
        tls12.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_2)
    );
    assert_eq!(tls12.get_ref().1.alpn_protocol(), Some(ALPN_DOT));
    echo(&mut tls12, b"tls 1.2").await;
}

/// Points `link` at `target` atomically, as a Kubernetes Secret volume
/// swaps its `..data` link.
fn swap_link(dir: &Path, target: &str) {
    let tmp = dir.join("current.tmp");
    symlink(dir.join(target), &tmp).expect("symlink");
    fs::rename(&tmp, dir.join("current")).expect("swap link");
}

#[tokio::test]
async fn watch_reports_changes_and_each_failure_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (pair("a"), pair("b"));
    for (name, cert, key) in [
        ("good", &a.cert_pem, a.key_pem.as_str()),
        ("broken", &a.cert_pem, "garbage"),
        ("new", &b.cert_pem, b.key_pem.as_str()),
    ] {
        let data = dir.path().join(name);
        fs::create_dir(&data).expect("mkdir");
        write(&files_in(&data), cert, key);
    }
    swap_link(dir.path(), "good");
    let store = Arc::new(CertStore::load(&files_in(&dir.path().join("current"))).expect("load"));

    let (tx, mut rx) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let watcher = tokio::spawn(watch(
        store.clone(),
        Duration::ZERO, // raised to MIN_POLL
        shutdown.clone(),
        move |outcome| {
            let _ = tx.send(outcome);
        },
    ));
    let mut next = async || {
        timeout(WAIT, rx.recv())
            .await
            .expect("a report in time")
            .expect("watch running")
    };

    swap_link(dir.path(), "broken");
    let err = next().await.expect_err("broken key reported");
    assert!(matches!(err, TlsError::NoPrivateKey { .. }), "{err:?}");
    assert_eq!(serving(&store), a.der);
    // Several polls while broken; a repeated report would come next.
    tokio::time::sleep(3 * MIN_POLL).await;

    swap_link(dir.path(), "good");
    assert!(!next().await.expect("recovered"), "back to the loaded pair");

    swap_link(dir.path(), "new");
    assert!(next().await.expect("reloaded"), "a new pair");
    assert_eq!(serving(&store), b.der);

    shutdown.cancel();
    timeout(WAIT, watcher)
        .await
        .expect("watch stops on shutdown")
        .expect("watch task");
    // Unchanged polls are not reported.
    assert!(rx.try_recv().is_err(), "no further reports");
}
