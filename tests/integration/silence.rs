//! A linked cluster that goes silent without refusing anything: its API
//! server hangs with its connections open. It must be unreachable within
//! `--cluster-timeout`, answered per decision 5 meanwhile, and back (listed
//! anew) as soon as it answers. kubesim's added latency is the hung server
//! here; `netfault` has the network-level faults (packets dropped, resets,
//! a paused process).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use crate::binary::http_get;
use crate::live::{SECOND, a, fqdn, two_remotes, until, until_report};
use crate::support::{Proto, ask, ede, kdig, q};

/// `clusterset_dns_cluster_state{cluster,state}` is 1 for `state`.
fn metric_state(admin: SocketAddr, cluster: &str, state: &str) -> bool {
    let (_, body) = http_get(admin, "/metrics");
    let line = format!("clusterset_dns_cluster_state{{cluster=\"{cluster}\",state=\"{state}\"}} 1");
    body.lines().any(|l| l == line)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_api_server_is_unreachable_within_the_cluster_timeout_and_back_when_it_answers() {
    let timeout = 2 * SECOND;
    let (sim, _dir, server) = two_remotes(
        |l| {
            l.cluster_timeout = timeout;
            l.federated_grace = Duration::from_millis(500);
        },
        |_| {},
    )
    .await;
    let dns = server.dns;
    let east = sim.cluster("east").expect("east").clone();
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &["10.1.0.1", "10.2.0.1"],
        5 * SECOND,
    )
    .await;
    until_report(server.admin, "east", "east synced", 5 * SECOND, |r| {
        r["state"] == "synced"
    })
    .await;

    // Every request to east now waits a minute: connections stay open,
    // nothing is refused, nothing comes back.
    let hung = Instant::now();
    east.set_latency(Duration::from_secs(60));
    let report = until_report(
        server.admin,
        "east",
        "east unreachable",
        timeout + 2 * SECOND,
        |r| r["state"] == "unreachable",
    )
    .await;
    let detected = hung.elapsed();
    assert!(detected <= timeout + SECOND, "detected after {detected:?}");
    assert!(
        report["unreachableSeconds"].as_f64().is_some(),
        "{report:#}"
    );
    assert!(metric_state(server.admin, "east", "unreachable"));
    assert!(metric_state(server.admin, "north", "synced"));

    // Decision 5: east's own name from last-known data, TTL capped; the
    // federated name without east (its grace has passed since its last
    // answer); never NXDOMAIN, never an address east never had.
    let (msg, _) = ask(dns, Proto::Udp, &q(&fqdn("api-east"), RecordType::A)).await;
    assert_eq!(msg.metadata.response_code, ResponseCode::NoError);
    assert!(
        msg.answers.iter().all(|r| r.ttl <= 5),
        "TTL capped: {:?}",
        msg.answers
    );
    assert_eq!(
        a(dns, &fqdn("api-east")).await.1,
        ["10.1.0.1".to_owned()].into()
    );
    // dig and kdig print the Extended DNS Error: the cluster and its age.
    let (code, text) = ede(&msg).expect("EDE on a stale answer");
    assert_eq!(code, 3);
    assert!(
        text.starts_with("cluster east not heard from for "),
        "{text}"
    );
    let printed = kdig(dns, &fqdn("api-east"), "A").await;
    assert!(
        printed.contains("EDE: 3 (Stale Answer): 'cluster east not heard from for"),
        "{printed}"
    );
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &["10.2.0.1"],
        2 * SECOND,
    )
    .await;

    // Healed: reachable at its first answer, listed anew, back in the
    // federated name.
    let healed = Instant::now();
    east.set_latency(Duration::ZERO);
    until_report(
        server.admin,
        "east",
        "east synced again",
        10 * SECOND,
        |r| r["state"] == "synced",
    )
    .await;
    until(
        dns,
        &fqdn("api-federated"),
        ResponseCode::NoError,
        &["10.1.0.1", "10.2.0.1"],
        5 * SECOND,
    )
    .await;
    let recovered = healed.elapsed();
    eprintln!("hung API server: unreachable after {detected:?}, back after {recovered:?}");
    assert!(recovered < 5 * SECOND, "recovered after {recovered:?}");
    server.server.stop().await;
}
