//! `/metrics` as Prometheus reads it: the whole scrape parses with a real
//! text-format parser, every family keeps its name and type, and a zones
//! file, whatever its documents say, can neither add a series nor break
//! the scrape.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::rr::RecordType;
use openmetrics_parser::prometheus::parse_prometheus;
use openmetrics_parser::{MetricsExposition, PrometheusType, PrometheusValue};

use crate::support::{Options, Proto, ask, eventually, fixture, q, start};

pub(crate) type Exposition = MetricsExposition<PrometheusType, PrometheusValue>;

/// `GET /metrics`: (Content-Type, body), from a blocking thread.
pub(crate) async fn scrape(admin: SocketAddr) -> (String, String) {
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect_timeout(&admin, Duration::from_secs(2))
            .expect("connect to admin");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        write!(s, "GET /metrics HTTP/1.0\r\nHost: test\r\n\r\n").expect("send");
        let mut resp = String::new();
        s.read_to_string(&mut resp).expect("read");
        let (head, body) = resp.split_once("\r\n\r\n").expect("a whole response");
        assert!(
            head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
            "{head}"
        );
        let content_type = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_owned())
            })
            .expect("a Content-Type");
        (content_type, body.to_owned())
    })
    .await
    .expect("join")
}

/// The scrape parsed, or the parser's complaint with the scrape.
pub(crate) fn parse(body: &str) -> Exposition {
    match parse_prometheus(body) {
        Ok(e) => e,
        Err(e) => panic!("the scrape does not parse: {e:?}\n{body}"),
    }
}

/// `family`'s samples as label set (sorted `k=v` pairs) → value.
fn samples(exposition: &Exposition, family: &str) -> BTreeMap<String, f64> {
    let family = exposition
        .families
        .get(family)
        .unwrap_or_else(|| panic!("no family {family}"));
    family
        .iter_samples()
        .map(|s| {
            let labels = s.get_labelset().expect("labels");
            let mut pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            pairs.sort();
            let value = match &s.value {
                PrometheusValue::Counter(c) => c.value.as_f64(),
                PrometheusValue::Gauge(n) | PrometheusValue::Unknown(n) => n.as_f64(),
                other => panic!("{other:?} in a counter or gauge family"),
            };
            (pairs.join(","), value)
        })
        .collect()
}

const SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  labels:
    mirror.linkerd.io/exported: remote-discovery
spec:
  clusterIP: 10.100.0.1
  ports:
  - name: http
    port: 80
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-k2x9p
  namespace: shop
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  port: 80
endpoints:
- addresses: [10.10.0.1]
"#;

/// A document whose `kind` closes the label, ends the line and starts a
/// series of its own, were it written into the scrape as it is.
const FORGED: &str =
    "apiVersion: v1\nkind: \"Foo\\\"} 1\\nevil_metric{x=\\\"y\"\nmetadata:\n  name: forged\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zones_file_cannot_forge_or_grow_the_scrape() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let east = tmp.path().join("east");
    std::fs::create_dir(&east).expect("mkdir");
    let mut docs = vec![SERVICE.to_owned(), FORGED.to_owned()];
    docs.extend(
        (0..300).map(|i| format!("apiVersion: v1\nkind: Bogus{i}\nmetadata:\n  name: b{i}\n")),
    );
    // A Service of an apiVersion not read keeps its kind's name.
    docs.push("apiVersion: v2\nkind: Service\nmetadata:\n  name: future\n".to_owned());
    std::fs::write(east.join("objects.yaml"), docs.join("---\n")).expect("write");
    let server = start(tmp.path(), Options::default()).await;

    let skipped = "clusterset_dns_source_skipped_objects_total";
    let admin = server.admin;
    eventually(
        "the skipped documents are counted",
        Duration::from_secs(10),
        || async move {
            let (_, body) = scrape(admin).await;
            let other = samples(&parse(&body), skipped).get("kind=other").copied();
            match other {
                Some(301.0) => Ok(()),
                _ => Err(format!("kind=other is {other:?}")),
            }
        },
    )
    .await;
    let (content_type, body) = scrape(admin).await;
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "the Prometheus text format, got {content_type}"
    );
    let exposition = parse(&body);
    assert!(
        !exposition.families.keys().any(|f| f.contains("evil")),
        "a document added a family: {:?}",
        exposition.families.keys().collect::<Vec<_>>()
    );
    assert!(!body.contains("\nevil_metric"), "{body}");
    let kinds = samples(&exposition, skipped);
    assert_eq!(
        kinds,
        BTreeMap::from([
            ("kind=EndpointSlice".to_owned(), 0.0),
            ("kind=List".to_owned(), 0.0),
            ("kind=Service".to_owned(), 1.0),
            ("kind=other".to_owned(), 301.0),
        ]),
        "302 kinds not read make the fixed four series"
    );
    // The cluster itself is still served.
    let (answer, _) = ask(
        server.dns,
        Proto::Udp,
        &q("web-east.shop.svc.clusterset.local.", RecordType::A),
    )
    .await;
    assert_eq!(answer.answers.len(), 1, "{answer:?}");
    server.server.stop().await;
}

/// Every family a file-mode server exposes, with its Prometheus type: the
/// names and types dashboards and alerts depend on.
const FAMILIES: [(&str, PrometheusType); 33] = [
    ("clusterset_dns_queries_total", PrometheusType::Counter),
    (
        "clusterset_dns_tls_handshake_failures_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_tls_cert_reloads_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_tls_cert_reload_errors_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_responses_truncated_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_additional_trimmed_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_packets_dropped_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_answer_cache_hits_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_answer_cache_misses_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_federated_fail_open_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_stale_answers_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_answers_capped_total",
        PrometheusType::Counter,
    ),
    ("clusterset_dns_limit_hits_total", PrometheusType::Counter),
    ("clusterset_dns_connections_open", PrometheusType::Gauge),
    (
        "clusterset_dns_config_reloads_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_config_reload_errors_total",
        PrometheusType::Counter,
    ),
    ("clusterset_dns_names", PrometheusType::Gauge),
    ("clusterset_dns_name_collisions", PrometheusType::Gauge),
    ("clusterset_dns_mcs_conflicts", PrometheusType::Gauge),
    (
        "clusterset_dns_mcs_cluster_id_conflicts",
        PrometheusType::Gauge,
    ),
    ("clusterset_dns_names_too_long", PrometheusType::Gauge),
    ("clusterset_dns_soa_serial", PrometheusType::Gauge),
    ("clusterset_dns_ready", PrometheusType::Gauge),
    ("clusterset_dns_cluster_synced", PrometheusType::Gauge),
    (
        "clusterset_dns_source_invalid_documents_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_source_reload_errors_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_source_skipped_objects_total",
        PrometheusType::Counter,
    ),
    ("clusterset_dns_cluster_services", PrometheusType::Gauge),
    ("clusterset_dns_cluster_endpoints", PrometheusType::Gauge),
    (
        "clusterset_dns_cluster_watch_restarts_total",
        PrometheusType::Counter,
    ),
    (
        "clusterset_dns_cluster_objects_adjusted_total",
        PrometheusType::Counter,
    ),
    // Every known cluster has a series from the start (file mode observes
    // nothing: its slices carry no change in progress).
    (
        "clusterset_dns_propagation_seconds",
        PrometheusType::Histogram,
    ),
    (
        "clusterset_dns_propagation_clock_skew_total",
        PrometheusType::Counter,
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_keeps_its_name_and_type() {
    let server = start(&fixture("conformance"), Options::conformance()).await;
    ask(
        server.dns,
        Proto::Udp,
        &q("web-east.prod.svc.clusterset.local.", RecordType::A),
    )
    .await;
    let (_, body) = scrape(server.admin).await;
    let exposition = parse(&body);
    for (name, kind) in FAMILIES {
        let family = exposition
            .families
            .get(name)
            .unwrap_or_else(|| panic!("no family {name} in:\n{body}"));
        assert_eq!(family.family_type, kind, "{name}");
        assert!(!family.help.is_empty(), "{name} has no help");
    }
    assert_eq!(
        samples(&exposition, "clusterset_dns_queries_total").get("qtype=A,rcode=NOERROR"),
        Some(&1.0)
    );
    assert_eq!(
        samples(&exposition, "clusterset_dns_limit_hits_total").len(),
        5,
        "one series per limit"
    );
    assert!(!body.contains("_total_total"), "{body}");
    server.server.stop().await;
}
