//! Answers too large for one DNS message, against the built binary over a
//! generated zones directory: `db`, a headless StatefulSet of 1,500 pods in
//! each of west (local), east and north, exported as a federated member, so
//! `SRV db-east…` has 1,500 records and `A db-federated…` 4,500. Over UDP
//! they are truncated (TC=1, AA=1) for the client to retry over TCP; over
//! TCP and DNS over TLS each answer carries as many records as fit, TC
//! clear, and successive queries, on a new connection each, together return
//! every record, counted in `clusterset_dns_answers_capped_total` and
//! served from the response cache once seen; `dig` (which retries over TCP
//! by itself) prints them. With `--max-answer-records 8` UDP answers carry 8
//! records, rotated, and a reload of the option takes effect at once.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::binary::{Served, http_get, serve};
use crate::conformance::metric;
use crate::dot::{certificate, connect, connector};
use crate::support::{Proto, ask, eventually, on_stream, q, raw, text};
use crate::zonegen;

/// Pods of `db` in each cluster.
const PODS: usize = 1500;
/// Pods of `web`, a small headless service of east.
const WEB_PODS: usize = 20;
const SRV_NAME: &str = "db-east.big.svc.clusterset.local.";
const A_NAME: &str = "db-federated.big.svc.clusterset.local.";
const WEB_NAME: &str = "web-east.big.svc.clusterset.local.";

/// Appends EndpointSlices of service `svc` holding `pods` (address,
/// hostname), 100 endpoints each, as the EndpointSlice controller cuts them.
fn slices(out: &mut String, svc: &str, labels: &[(&str, &str)], pods: &[(String, String)]) {
    for (n, chunk) in pods.chunks(100).enumerate() {
        let _ = writeln!(
            out,
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {svc}-{n}\n  namespace: big\n  labels:\n    kubernetes.io/service-name: {svc}"
        );
        for (k, v) in labels {
            let _ = writeln!(out, "    {k}: \"{v}\"");
        }
        let _ = writeln!(
            out,
            "addressType: IPv4\nports:\n- name: pg\n  protocol: TCP\n  port: 5432\nendpoints:"
        );
        for (ip, host) in chunk {
            let _ = writeln!(
                out,
                "- addresses: [{ip}]\n  hostname: {host}\n  conditions:\n    ready: true"
            );
        }
    }
}

/// Writes the zones directory: `db` in west, east and north; `web` in east.
fn write_zones(root: &Path) {
    let pg = [("pg", 5432u16, 5432u16)];
    for (c, cluster) in ["west", "east", "north"].into_iter().enumerate() {
        let mut out = String::new();
        let pods: Vec<(String, String)> = (0..PODS)
            .map(|i| {
                let ip = format!("10.{}.{}.{}", 40 + c, i / 256, i % 256);
                (ip, format!("db-{i}"))
            })
            .collect();
        zonegen::service_doc(&mut out, "db", "big", &zonegen::FEDERATED, "None", &pg);
        slices(&mut out, "db", &zonegen::FEDERATED, &pods);
        if cluster == "east" {
            let pods: Vec<(String, String)> = (0..WEB_PODS)
                .map(|i| (format!("10.50.0.{i}"), format!("web-{i}")))
                .collect();
            zonegen::service_doc(&mut out, "web", "big", &zonegen::FLAT, "None", &pg);
            slices(&mut out, "web", &zonegen::FLAT, &pods);
        }
        let dir = root.join(cluster);
        std::fs::create_dir_all(&dir).expect("cluster dir");
        std::fs::write(dir.join("big.yaml"), out).expect("write zones");
    }
}

/// The records of an answer as zone-file text.
fn records(m: &Message) -> Vec<String> {
    m.answers.iter().map(text).collect()
}

/// The query's wire bytes (EDNS 1232, as `support::q` builds it).
fn wire(name: &str, rtype: RecordType) -> Vec<u8> {
    q(name, rtype).message().to_vec().expect("encode")
}

/// A UDP exchange with raw bytes, so that a truncated answer is seen as it
/// is (no retry over TCP).
async fn over_udp(dns: SocketAddr, name: &str, rtype: RecordType) -> Message {
    let reply = raw(dns, Proto::Udp, &wire(name, rtype))
        .await
        .expect("a UDP reply");
    Message::from_vec(&reply).expect("decode")
}

/// One query on a stream (TCP or TLS), length-prefixed.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    name: &str,
    rtype: RecordType,
) -> Message {
    on_stream(s, &wire(name, rtype)).await
}

/// The value of one series of `/metrics` (0 when absent).
fn counter(s: &Served, series: &str) -> u64 {
    let (_, body) = http_get(s.admin, "/metrics");
    metric(&body, series).unwrap_or(0.0) as u64
}

/// Asserts that `m` carries `per_answer` records, TC clear, NOERROR, AA.
fn window(m: &Message, per_answer: usize, ctx: &str) -> Vec<String> {
    assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{ctx}");
    assert!(m.metadata.authoritative, "{ctx}: AA");
    assert!(!m.metadata.truncation, "{ctx}: TC clear");
    assert_eq!(m.answers.len(), per_answer, "{ctx}: records");
    records(m)
}

/// The two big names: (name, type, records of the RRset, records per TCP
/// answer: 1,091 SRV of 60 octets or 4,091 addresses of 16 fit 65,535).
const BIG: [(&str, RecordType, usize, usize); 2] = [
    (SRV_NAME, RecordType::SRV, PODS, 1091),
    (A_NAME, RecordType::A, 3 * PODS, 4091),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_answers_over_tcp_and_tls_carry_what_fits_and_successive_queries_serve_every_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let zones = dir.path().join("zones");
    write_zones(&zones);
    let (cert, key, der) = certificate();
    let (c, k) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&c, cert).expect("write cert");
    std::fs::write(&k, key).expect("write key");
    let server = serve(
        &zones,
        &[
            "--local-cluster",
            "west",
            "--tls-addr",
            "127.0.0.1:0",
            "--tls-cert",
            c.to_str().expect("utf-8"),
            "--tls-key",
            k.to_str().expect("utf-8"),
        ],
    );
    let tls = server.tls.expect("a tls= address");
    let tls_client = connector(&[&der]);
    for (name, rtype, all, per_answer) in BIG {
        // UDP: too large, so TC=1 with AA=1 and nothing else.
        let m = over_udp(server.dns, name, rtype).await;
        assert!(
            m.metadata.truncation && m.metadata.authoritative,
            "{name}: TC, AA over UDP"
        );
        assert!(m.answers.is_empty() && m.additionals.is_empty(), "{name}");

        // TCP, a new connection per query: two answers serve every record.
        let mut seen = BTreeSet::new();
        for i in 0..2 {
            let (m, _) = ask(server.dns, Proto::Tcp, &q(name, rtype)).await;
            seen.extend(window(
                &m,
                per_answer,
                &format!("{name} over TCP, query {i}"),
            ));
        }
        assert_eq!(
            seen.len(),
            all,
            "{name}: two TCP answers carry every record"
        );

        // DNS over TLS, likewise.
        let mut seen = BTreeSet::new();
        for i in 0..2 {
            let mut s = connect(tls, &tls_client).await;
            let m = exchange(&mut s, name, rtype).await;
            seen.extend(window(
                &m,
                per_answer,
                &format!("{name} over TLS, query {i}"),
            ));
        }
        assert_eq!(
            seen.len(),
            all,
            "{name}: two TLS answers carry every record"
        );

        // One connection, two queries: the next window too.
        let mut s = tokio::net::TcpStream::connect(server.dns)
            .await
            .expect("connect");
        let mut seen = BTreeSet::new();
        for i in 0..2 {
            let m = exchange(&mut s, name, rtype).await;
            seen.extend(window(
                &m,
                per_answer,
                &format!("{name} on one connection, query {i}"),
            ));
        }
        assert_eq!(seen.len(), all, "{name}: one connection, two answers");
    }
    // Every capped answer counted by transport; repeated ones were hits.
    let capped = |t: &str| {
        counter(
            &server,
            &format!("clusterset_dns_answers_capped_total{{transport=\"{t}\"}}"),
        )
    };
    assert_eq!(capped("udp"), 0, "UDP answers were truncated, not capped");
    assert_eq!(capped("tcp"), 8);
    assert_eq!(capped("tls"), 4);
    let hits = counter(&server, "clusterset_dns_answer_cache_hits_total");
    let _ = ask(server.dns, Proto::Tcp, &q(A_NAME, RecordType::A)).await;
    assert_eq!(
        counter(&server, "clusterset_dns_answer_cache_hits_total"),
        hits + 1,
        "a capped answer asked again comes from the cache"
    );

    // dig, as a user runs it: over UDP it gets TC and retries over TCP by
    // itself, and prints the records; +tcp asks over TCP at once.
    for (name, rtype, _, per_answer) in BIG {
        for extra in [&[][..], &["+tcp"][..]] {
            let out = Command::new("dig")
                .arg("@127.0.0.1")
                .args(["-p", &server.dns.port().to_string()])
                .args(["+short", "+time=5", "+tries=1"])
                .args(extra)
                .args([name, &rtype.to_string()])
                .output()
                .expect("dig must be installed (Debian package dnsutils)");
            let stdout = String::from_utf8_lossy(&out.stdout);
            // Without +tcp dig first says ";; Truncated, retrying in TCP mode."
            let printed = stdout
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with(';'));
            assert_eq!(
                printed.count(),
                per_answer,
                "dig {extra:?} {name} {rtype}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Sends SIGHUP to the server.
#[allow(unsafe_code)]
fn hangup(s: &Served) {
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(s.child.id() as libc::pid_t, libc::SIGHUP) };
    assert_eq!(rc, 0, "kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_answer_records_8_gives_small_rotated_answers_over_udp_and_reloads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let zones = dir.path().join("zones");
    write_zones(&zones);
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "max-answer-records: 8\n").expect("write config");
    let server = serve(
        &zones,
        &[
            "--local-cluster",
            "west",
            "--config",
            config.to_str().expect("utf-8"),
        ],
    );

    // 20 addresses in windows of 8: a few queries return them all (the UDP
    // workers each rotate, so a window may come twice).
    let mut seen = BTreeSet::new();
    for i in 0..30 {
        let m = over_udp(server.dns, WEB_NAME, RecordType::A).await;
        seen.extend(window(&m, 8, &format!("{WEB_NAME} query {i}")));
        if seen.len() == WEB_PODS {
            break;
        }
    }
    assert_eq!(seen.len(), WEB_PODS, "every address within 30 queries");

    // The big names fit UDP too, 8 records at a time, rotated.
    for (name, rtype, _, _) in BIG {
        let mut windows = BTreeSet::new();
        for i in 0..4 {
            let m = over_udp(server.dns, name, rtype).await;
            windows.insert(window(&m, 8, &format!("{name} over UDP, query {i}")));
        }
        assert!(windows.len() > 1, "{name}: rotated");
        let (m, _) = ask(server.dns, Proto::Tcp, &q(name, rtype)).await;
        window(&m, 8, &format!("{name} over TCP"));
    }
    let udp = "clusterset_dns_answers_capped_total{transport=\"udp\"}";
    assert!(counter(&server, udp) >= 8, "capped UDP answers counted");

    // Back to 0 by a reload: the big names are truncated over UDP again.
    std::fs::write(&config, "max-answer-records: 0\n").expect("write config");
    hangup(&server);
    eventually("the reload took effect", Duration::from_secs(5), || async {
        over_udp(server.dns, A_NAME, RecordType::A)
            .await
            .metadata
            .truncation
    })
    .await;
    let m = over_udp(server.dns, WEB_NAME, RecordType::A).await;
    window(&m, WEB_PODS, "every web address in one answer again");
}
