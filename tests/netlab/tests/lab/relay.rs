//! A kube client through a latency relay to a kubesim in a lab host: TLS verifies through the
//! rewritten kubeconfig, and a request pays two legs of latency.

use std::net::SocketAddr;
use std::time::Duration;

use netlab::{Relay, RelaySpec};

use crate::support::{fixture, timed_version};

/// Starts a relay on loopback to east's API with `latency` each way, and a client through it.
async fn relayed(f: &crate::support::Fixture, latency: Duration) -> (Relay, kube::Client) {
    let target = SocketAddr::new(f.host.addr().into(), f.sim.api_port("east"));
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let relay = Relay::start(listen, target, RelaySpec::latency(latency))
        .await
        .expect("relay starts");
    let kubeconfig = f
        .sim
        .kubeconfig_via("east", relay.local_addr())
        .expect("kubeconfig written");
    let client = netlab::sim::client_from(&kubeconfig)
        .await
        .expect("a kube client");
    (relay, client)
}

#[tokio::test]
async fn forty_ms_each_way_makes_a_request_take_eighty() {
    let Some(f) = fixture() else { return };
    let (_relay, client) = relayed(&f, Duration::from_millis(40)).await;
    // The first request also pays TCP and TLS setup; time the second, on the open connection.
    let (first, _) = timed_version(&client, Duration::from_secs(10)).await;
    assert!(matches!(first, Some(Ok(_))), "{first:?}");
    let (second, took) = timed_version(&client, Duration::from_secs(10)).await;
    assert!(matches!(second, Some(Ok(_))), "{second:?}");
    assert!(took >= Duration::from_millis(80), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn zero_latency_relays_and_lists() {
    let Some(f) = fixture() else { return };
    let (_relay, client) = relayed(&f, Duration::ZERO).await;
    let (answer, _) = timed_version(&client, Duration::from_secs(10)).await;
    assert!(matches!(answer, Some(Ok(_))), "{answer:?}");
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    let list = tokio::time::timeout(
        Duration::from_secs(10),
        namespaces.list(&Default::default()),
    )
    .await
    .expect("lists in time")
    .expect("lists");
    assert!(
        list.items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("default"))
    );
}
