//! Each fault with a kube client: it fails as it should while on, and the API answers after
//! `heal()`; a paused kubesim hangs and answers after `resume()`. The control endpoint keeps
//! working under every fault.

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, WatchEvent, WatchParams};
use netlab::Fault;
use serde_json::json;

use crate::support::{HANG, answers, fixture, hangs, timed_version, version_with_fresh_client};

#[tokio::test]
async fn kubesim_in_a_host_answers_version_through_its_veth() {
    let Some(f) = fixture() else { return };
    let server = f.sim.server_url("east");
    assert!(
        server.starts_with(&format!("https://{}:", f.host.addr())),
        "{server}"
    );
    let (answer, _) = version_with_fresh_client(&f.sim, Duration::from_secs(10)).await;
    let version = answer.expect("answers in time").expect("answers");
    assert!(version.starts_with('v'), "{version}");
    assert_ne!(f.host.addr(), f.host.gateway());
}

/// A fault that makes a new request hang, and the control endpoint still answer.
async fn hangs_until_healed(fault: Fault) {
    let Some(f) = fixture() else { return };
    answers(&f.sim, "before the fault").await;
    f.host
        .fault(f.sim.api_port("east"), fault)
        .expect("fault applies");
    hangs(&f.sim, fault.label()).await;
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": fault.label()}, "data": {"k": "v"}});
    f.sim
        .apply("east", &configmap)
        .expect("the control port is not faulted");
    f.host.heal().expect("heals");
    answers(&f.sim, "after heal").await;
}

#[tokio::test]
async fn blackhole_hangs_until_healed() {
    hangs_until_healed(Fault::Blackhole).await;
}

#[tokio::test]
async fn drop_inbound_hangs_until_healed() {
    hangs_until_healed(Fault::DropInbound).await;
}

#[tokio::test]
async fn drop_outbound_hangs_until_healed() {
    hangs_until_healed(Fault::DropOutbound).await;
}

#[tokio::test]
async fn reset_fails_fast_until_healed() {
    let Some(f) = fixture() else { return };
    answers(&f.sim, "before the fault").await;
    f.host
        .fault(f.sim.api_port("east"), Fault::Reset)
        .expect("fault applies");
    let (answer, took) = version_with_fresh_client(&f.sim, HANG).await;
    assert!(matches!(answer, Some(Err(_))), "refused: {answer:?}");
    assert!(took < Duration::from_secs(1), "quickly: {took:?}");
    f.host.heal().expect("heals");
    answers(&f.sim, "after heal").await;
}

#[tokio::test]
async fn drop_new_spares_an_open_watch_and_hangs_new_connections() {
    let Some(f) = fixture() else { return };
    let client = f.sim.client("east").await.expect("a kube client");
    let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
    let params = WatchParams::default().timeout(60);
    let opened = tokio::time::timeout(Duration::from_secs(10), configmaps.watch(&params, "0"));
    let mut events = opened
        .await
        .expect("the watch opens in time")
        .expect("the watch opens")
        .boxed();
    // A second client with an idle keep-alive connection: its next request speaks first on
    // an open connection, which conntrack-based rules would take for a new one.
    let pooled = f.sim.client("east").await.expect("a kube client");
    let (before, _) = timed_version(&pooled, Duration::from_secs(10)).await;
    assert!(matches!(before, Some(Ok(_))), "{before:?}");

    f.host
        .fault(f.sim.api_port("east"), Fault::DropNew)
        .expect("fault applies");
    let (reused, took) = timed_version(&pooled, HANG).await;
    assert!(
        matches!(reused, Some(Ok(_))),
        "an open keep-alive connection still answers: {reused:?} after {took:?}"
    );
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "while-dropping-new"}});
    f.sim
        .apply("east", &configmap)
        .expect("written via control");
    let added = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if let Ok(WatchEvent::Added(cm)) = event
                && cm.metadata.name.as_deref() == Some("while-dropping-new")
            {
                return true;
            }
        }
        false
    });
    assert!(
        added.await.unwrap_or(false),
        "the open watch sees the new ConfigMap"
    );
    hangs(&f.sim, "a new connection under drop-new").await;
    f.host.heal().expect("heals");
    answers(&f.sim, "after heal").await;
}

#[tokio::test]
async fn a_paused_kubesim_hangs_until_resumed() {
    let Some(f) = fixture() else { return };
    answers(&f.sim, "before the pause").await;
    f.sim.pause().expect("SIGSTOP");
    hangs(&f.sim, "paused").await;
    f.sim.resume().expect("SIGCONT");
    answers(&f.sim, "after resume").await;
}

#[tokio::test]
async fn control_deletes_while_the_api_is_blackholed() {
    let Some(f) = fixture() else { return };
    let configmap =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "doomed"}});
    f.sim.apply("east", &configmap).expect("created");
    f.host
        .fault(f.sim.api_port("east"), Fault::Blackhole)
        .expect("fault applies");
    f.sim
        .delete("east", "v1", "ConfigMap", "default", "doomed")
        .expect("deleted via control");
    let again = f.sim.delete("east", "v1", "ConfigMap", "default", "doomed");
    assert!(
        matches!(
            again,
            Err(netlab::NetlabError::ControlStatus { code: 404, .. })
        ),
        "{again:?}"
    );
    f.host.heal().expect("heals");
}
