//! `clusterset_dns_propagation_seconds` in live mode: an EndpointSlice
//! change on a kubesim cluster, carrying the
//! `endpoints.kubernetes.io/last-change-trigger-time` annotation, is
//! observed once its answer is served, and no sooner than the age it was
//! given; the first sync and a slice without the annotation are not
//! observed.

use std::time::{Duration, SystemTime};

use hickory_proto::op::ResponseCode;
use k8s_openapi::jiff::Timestamp;
use openmetrics_parser::PrometheusValue;
use serde_json::json;

use crate::kubesim_api::{client, sim};
use crate::live::{NS, SECOND, clusters_file, export, fqdn, until};
use crate::metrics_scrape::{parse, scrape};
use crate::support::{Links, Live, Options, create_object, eventually, start_live};

const FAMILY: &str = "clusterset_dns_propagation_seconds";
const TRIGGER: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// (count, sum) of `cluster`'s propagation histogram in a scrape.
async fn observed(admin: std::net::SocketAddr, cluster: &str) -> Result<(u64, f64), String> {
    let (_, body) = scrape(admin).await;
    let exposition = parse(&body);
    let family = exposition
        .families
        .get(FAMILY)
        .ok_or_else(|| format!("no {FAMILY} in:\n{body}"))?;
    let samples = family.iter_samples().filter(|s| {
        s.get_labelset()
            .is_ok_and(|l| l.iter().any(|(k, v)| k == "cluster" && v == cluster))
    });
    for sample in samples {
        if let PrometheusValue::Histogram(h) = &sample.value {
            let sum = h
                .sum
                .as_ref()
                .map_or(0.0, openmetrics_parser::MetricNumber::as_f64);
            return Ok((h.count.unwrap_or(0), sum));
        }
    }
    Err(format!("no {FAMILY}{{cluster=\"{cluster}\"}} in:\n{body}"))
}

/// Sets the endpoints of `api-1` to `addr` and its trigger time to `age`
/// before now, as the EndpointSlice controller does on a Pod change.
async fn change(c: &kube::Client, addr: &str, age: Duration) {
    let at = Timestamp::try_from(SystemTime::now() - age).expect("a time");
    let body = json!({
        "metadata": {"annotations": {TRIGGER: at.to_string()}},
        "endpoints": [{"addresses": [addr], "conditions": {"ready": true}}]
    });
    let req = http::Request::patch(format!(
        "/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/api-1"
    ))
    .header("content-type", "application/merge-patch+json")
    .body(serde_json::to_vec(&body).expect("json"))
    .expect("request");
    c.request_text(req).await.expect("patch slice");
}

/// Waits (bounded) until `cluster`'s histogram counts `want`, and returns
/// its sum.
async fn until_count(admin: std::net::SocketAddr, cluster: &str, want: u64) -> f64 {
    eventually(
        &format!("{FAMILY} count {want}"),
        10 * SECOND,
        || async move {
            match observed(admin, cluster).await {
                Ok((n, _)) if n == want => Ok(()),
                Ok((n, sum)) => Err(format!("count {n}, sum {sum}")),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    let (_, sum) = observed(admin, cluster).await.expect("observed");
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_slice_change_is_observed_from_its_trigger_time() {
    let (sim, dir) = sim(&["local", "east"], |_| {}).await;
    let east = sim.cluster("east").expect("east").clone();
    let c = client(&east).await;
    export(&c, "api", &["10.1.0.1"]).await;
    let local = sim.cluster("local").expect("local").clone();
    let live = Live::new(
        local.kubeconfig_path(),
        Links::File(clusters_file(dir.path(), &[&east])),
    );
    let server = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        live,
    )
    .await;
    let (dns, admin) = (server.dns, server.admin);
    let name = fqdn("api-east");
    until(
        dns,
        &name,
        ResponseCode::NoError,
        &["10.1.0.1"],
        15 * SECOND,
    )
    .await;
    // The first sync listed the slice: history, not a propagation.
    assert_eq!(observed(admin, "east").await, Ok((0, 0.0)));

    // A change triggered 3 s ago: observed once served, at least 3 s.
    change(&c, "10.1.0.2", 3 * SECOND).await;
    until(
        dns,
        &name,
        ResponseCode::NoError,
        &["10.1.0.2"],
        15 * SECOND,
    )
    .await;
    let sum = until_count(admin, "east", 1).await;
    assert!((3.0..60.0).contains(&sum), "sum {sum}");

    // A slice without the annotation: served, not observed. The next
    // annotated change makes the count 2, not 3, once it is served.
    let bare = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "api-2", "namespace": NS,
                     "labels": {"kubernetes.io/service-name": "api"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.1.0.9"], "conditions": {"ready": true}}]
    });
    create_object(&c, bare).await;
    let both = ["10.1.0.2", "10.1.0.9"];
    until(dns, &name, ResponseCode::NoError, &both, 15 * SECOND).await;
    assert_eq!(observed(admin, "east").await.map(|(n, _)| n), Ok(1));
    change(&c, "10.1.0.3", SECOND).await;
    let both = ["10.1.0.3", "10.1.0.9"];
    until(dns, &name, ResponseCode::NoError, &both, 15 * SECOND).await;
    let sum = until_count(admin, "east", 2).await;
    assert!(sum >= 4.0, "sum {sum}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(observed(admin, "east").await.map(|(n, _)| n), Ok(2));
    // Same clock on both sides: no skew.
    let (_, body) = scrape(admin).await;
    assert!(
        body.lines()
            .any(|l| l == "clusterset_dns_propagation_clock_skew_total{cluster=\"east\"} 0"),
        "{body}"
    );
    server.server.stop().await;
}
