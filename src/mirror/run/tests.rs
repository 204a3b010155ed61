//! The status-code policy, request by request, against a scripted API
//! server: each write's exact request (method, path, query, body), and
//! what the controller does and counts for 2xx, 404, 409, 422 and 500.

use super::*;
use crate::mirror::fixtures::{json, object};
use crate::mirror::mock::{self, Step};
use crate::mirror::{Kind, reconcile::stamped};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

const SERVICES: &str = "/api/v1/namespaces/prod/services";
const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/prod/endpointslices";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/prod/events";
const FM: (&str, &str) = ("fieldManager", "clusterset-dns");
const APPLY: &str = "application/apply-patch+yaml";
const MERGE: &str = "application/merge-patch+json";

fn controller(client: Client) -> Controller {
    let config = MirrorConfig {
        client,
        local: "local".into(),
        cluster_domain: "cluster.local".to_owned(),
        linkerd_flat_compat: false,
        link_namespace: None,
        lease: LeaseConfig::new("default", "clusterset-dns-mirror", "replica-a"),
        resync: Duration::from_secs(60),
        federated_grace: Duration::from_secs(30),
        mcs: false,
    };
    Controller::new(config, Arc::new(MirrorStats::default()))
}

fn key(kind: Kind, name: &str) -> ObjectRef {
    ObjectRef {
        kind,
        namespace: "prod".into(),
        name: name.into(),
    }
}

/// The mirror Service `web-east` as we want it (stamped, as plan sends it).
fn web() -> Desired {
    stamped(&Desired {
        key: key(Kind::Service, "web-east"),
        object: object(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web-east", "namespace": "prod",
                         "labels": {"app.kubernetes.io/managed-by": "clusterset-dns",
                                    "mirror.linkerd.io/cluster-name": "east"}},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
        })),
        cluster: Some("east".into()),
    })
}

/// `d` as the API would hold it.
fn stored(d: &Desired, uid: &str, rv: &str) -> Value {
    let mut v = json(&d.object);
    v["metadata"]["uid"] = json!(uid);
    v["metadata"]["resourceVersion"] = json!(rv);
    v["spec"]["clusterIP"] = json!("10.96.0.10");
    v
}

/// Someone else's `web-east`.
fn theirs() -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "web-east", "namespace": "prod", "uid": "their-uid",
                        "resourceVersion": "3", "labels": {"team": "mine"}},
           "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

/// The create of `d`, exactly.
fn post(d: &Desired) -> Step {
    Step::new("POST", SERVICES)
        .query(&[FM])
        .content_type("application/json")
        .body(json(&d.object))
}

/// The forced server-side apply of `d`, exactly.
fn apply(d: &Desired) -> Step {
    Step::new("PATCH", &format!("{SERVICES}/web-east"))
        .query(&[FM, ("force", "true")])
        .content_type(APPLY)
        .body(json(&d.object))
}

/// The merge-patch repair to `d`, exactly.
fn merge(d: &Desired) -> Step {
    Step::new("PATCH", &format!("{SERVICES}/web-east"))
        .query(&[FM])
        .content_type(MERGE)
        .body(json(&d.object))
}

fn counted(pairs: &[(&'static str, &'static str)], changed: bool) -> Done {
    Done {
        changed,
        counted: pairs.to_vec(),
    }
}

#[tokio::test]
async fn create_posts_the_object_with_our_field_manager() {
    let (client, handle) = mock::client();
    let d = web();
    let server = mock::serve(handle, vec![post(&d).ok(stored(&d, "u1", "5"))]);
    let mut c = controller(client);
    assert_eq!(
        c.create(d.clone()).await,
        counted(&[("create", "ok")], true)
    );
    mock::finished(server).await;
    assert_eq!(c.cache.actual()[&d.key].uid(), Some("u1"));
}

#[tokio::test]
async fn create_409_on_someone_elses_object_leaves_it_and_warns_once_with_an_event() {
    let (client, handle) = mock::client();
    let d = web();
    let server = mock::serve(
        handle,
        vec![
            post(&d).fails(409, "AlreadyExists"),
            Step::new("GET", &format!("{SERVICES}/web-east")).ok(theirs()),
            Step::new("POST", EVENTS).body_with(|e| {
                assert_eq!(e["apiVersion"], "events.k8s.io/v1");
                assert_eq!(e["type"], "Warning");
                assert_eq!(e["reason"], "NotOwned");
                assert_eq!(e["action"], "Mirror");
                assert_eq!(e["reportingController"], "clusterset-dns-mirror");
                assert_eq!(e["reportingInstance"], "replica-a");
                assert_eq!(
                    e["regarding"],
                    json!({"apiVersion": "v1", "kind": "Service", "namespace": "prod",
                           "name": "web-east", "uid": "their-uid"})
                );
                assert_eq!(e["metadata"]["namespace"], "prod");
                let note = e["note"].as_str().unwrap_or("");
                assert!(
                    note.contains("app.kubernetes.io/managed-by=clusterset-dns"),
                    "{note}"
                );
            }),
            // The next pass tries again: no second Event.
            post(&d).fails(409, "AlreadyExists"),
            Step::new("GET", &format!("{SERVICES}/web-east")).ok(theirs()),
        ],
    );
    let mut c = controller(client);
    let not_owned = counted(&[("create", "not_owned")], false);
    assert_eq!(c.create(d.clone()).await, not_owned);
    assert!(c.unowned.contains(&d.key));
    assert!(c.cache.actual().is_empty(), "theirs is not cached as ours");
    c.unowned.clear();
    assert_eq!(c.create(d.clone()).await, not_owned);
    mock::finished(server).await;
    // Planned again, nothing is written for it.
    let ops = plan(
        std::slice::from_ref(&d),
        c.cache.actual(),
        &c.unowned,
        |_| false,
    );
    assert!(ops.is_empty(), "{ops:?}");
}

#[tokio::test]
async fn create_409_on_our_own_object_caches_it_without_counting() {
    let (client, handle) = mock::client();
    let d = web();
    let server = mock::serve(
        handle,
        vec![
            post(&d).fails(409, "AlreadyExists"),
            Step::new("GET", &format!("{SERVICES}/web-east")).ok(stored(&d, "u1", "5")),
        ],
    );
    let mut c = controller(client);
    assert_eq!(c.create(d.clone()).await, Done::default());
    mock::finished(server).await;
    assert!(c.unowned.is_empty());
    assert_eq!(c.cache.actual()[&d.key].uid(), Some("u1"));
}

#[tokio::test]
async fn create_404_is_a_missing_namespace() {
    let (client, handle) = mock::client();
    let server = mock::serve(handle, vec![post(&web()).fails(404, "NotFound")]);
    let mut c = controller(client);
    assert_eq!(
        c.create(web()).await,
        counted(&[("create", "missing_namespace")], false)
    );
    mock::finished(server).await;
    assert!(c.unowned.is_empty(), "retried on the next pass");
}

#[tokio::test]
async fn apply_is_a_forced_server_side_apply_of_the_whole_object() {
    let (client, handle) = mock::client();
    let d = web();
    let server = mock::serve(handle, vec![apply(&d).ok(stored(&d, "u1", "6"))]);
    let mut c = controller(client);
    assert_eq!(c.apply(d.clone()).await, counted(&[("apply", "ok")], true));
    mock::finished(server).await;
    assert_eq!(c.cache.actual()[&d.key].resource_version(), Some("6"));
}

#[tokio::test]
async fn apply_422_is_counted_invalid_and_repaired_by_a_merge_patch() {
    let (client, handle) = mock::client();
    let d = web();
    let server = mock::serve(
        handle,
        vec![
            apply(&d).fails(422, "Invalid"),
            merge(&d).ok(stored(&d, "u1", "7")),
        ],
    );
    let mut c = controller(client);
    assert_eq!(
        c.apply(d.clone()).await,
        counted(&[("apply", "invalid"), ("repair", "ok")], true)
    );
    mock::finished(server).await;
    assert_eq!(c.cache.actual()[&d.key].resource_version(), Some("7"));
}

#[tokio::test]
async fn apply_that_leaves_our_fields_wrong_is_repaired() {
    let (client, handle) = mock::client();
    let d = web();
    // Another manager's port entry survives the apply (lists merge by key).
    let mut kept = stored(&d, "u1", "6");
    kept["spec"]["ports"] = json!([{"name": "http", "port": 80, "protocol": "TCP"},
                                   {"name": "admin", "port": 81, "protocol": "TCP"}]);
    let server = mock::serve(
        handle,
        vec![apply(&d).ok(kept), merge(&d).fails(500, "InternalError")],
    );
    let mut c = controller(client);
    assert_eq!(
        c.apply(d.clone()).await,
        counted(&[("apply", "ok"), ("repair", "error")], false)
    );
    mock::finished(server).await;
}

#[tokio::test]
async fn apply_409_and_500_are_counted_and_left_for_the_next_pass() {
    for (code, reason, outcome) in [
        (409, "Conflict", "conflict"),
        (500, "InternalError", "error"),
    ] {
        let (client, handle) = mock::client();
        let server = mock::serve(handle, vec![apply(&web()).fails(code, reason)]);
        let mut c = controller(client);
        assert_eq!(c.apply(web()).await, counted(&[("apply", outcome)], false));
        mock::finished(server).await;
    }
}

fn slice_key() -> ObjectRef {
    key(Kind::EndpointSlice, "web-east-v4-0")
}

/// A controller whose cache holds our slice `web-east-v4-0` (uid u9, rv 7).
fn with_slice(client: Client) -> Controller {
    let mut c = controller(client);
    let slice = object(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                       "metadata": {"name": "web-east-v4-0", "namespace": "prod",
                                    "uid": "u9", "resourceVersion": "7",
                                    "labels": {"app.kubernetes.io/managed-by": "clusterset-dns"}},
                       "addressType": "IPv4", "endpoints": []}),
    );
    for kind in [Kind::Service, Kind::EndpointSlice] {
        c.cache.on_event(kind, Event::Init);
        c.cache.on_event(kind, Event::InitDone);
    }
    c.cache.on_event(Kind::EndpointSlice, Event::Apply(slice));
    c
}

fn delete_step() -> Step {
    Step::new("DELETE", &format!("{SLICES}/web-east-v4-0"))
        .content_type("application/json")
        .body(json!({"preconditions": {"uid": "u9", "resourceVersion": "7"}}))
}

#[tokio::test]
async fn delete_sends_uid_and_resource_version_preconditions() {
    for (step, outcome, gone) in [
        (
            delete_step().ok(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
            counted(&[("delete", "ok")], true),
            true,
        ),
        // Already gone: what we wanted.
        (
            delete_step().fails(404, "NotFound"),
            counted(&[("delete", "ok")], true),
            true,
        ),
        // Changed since listed (a precondition failed): not deleted blind.
        (
            delete_step().fails(409, "Conflict"),
            counted(&[("delete", "conflict")], false),
            false,
        ),
        (
            delete_step().fails(500, "InternalError"),
            counted(&[("delete", "error")], false),
            false,
        ),
    ] {
        let (client, handle) = mock::client();
        let server = mock::serve(handle, vec![step]);
        let mut c = with_slice(client);
        let done = c
            .delete(slice_key(), Some("u9".into()), Some("7".into()))
            .await;
        mock::finished(server).await;
        assert_eq!(done, outcome);
        assert_eq!(!c.cache.actual().contains_key(&slice_key()), gone);
    }
}

#[tokio::test]
async fn execute_counts_each_outcome_in_the_stats() {
    let (client, handle) = mock::client();
    let d = web();
    let server = mock::serve(
        handle,
        vec![
            post(&d).ok(stored(&d, "u1", "5")),
            apply(&d).fails(422, "Invalid"),
            merge(&d).ok(stored(&d, "u1", "6")),
        ],
    );
    let mut c = controller(client);
    assert!(c.execute(Op::Create(d.clone())).await);
    assert!(c.execute(Op::Apply(d)).await);
    mock::finished(server).await;
    // create ok + repair ok; "invalid" is not an ok write.
    assert_eq!(c.stats.ok_writes(), 2);
}

mod mcs_writes;
