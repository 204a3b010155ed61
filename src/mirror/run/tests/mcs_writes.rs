//! `--mcs` writes, request by request: the ServiceImport through the
//! discovered resource (create, apply, delete), the ServiceExport `/status`
//! apply, the discovery that picks the version, and (without `--mcs`) the
//! deletion of the ServiceImports a run with it left.

use super::*;
use crate::mirror::api::discover_mcs;
use crate::model::cluster::Dirty;
use crate::model::testing::{port, service, svc_event, up};
use kube::api::{ApiResource, DynamicObject};

const IMPORTS: &str = "/apis/multicluster.x-k8s.io/v1beta1/namespaces/prod/serviceimports";
const EXPORTS: &str = "/apis/multicluster.x-k8s.io/v1beta1/namespaces/prod/serviceexports";

fn resource(kind: &str, plural: &str, version: &str) -> ApiResource {
    ApiResource {
        group: "multicluster.x-k8s.io".into(),
        version: version.into(),
        api_version: format!("multicluster.x-k8s.io/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn mcs_controller(client: Client) -> Controller {
    let mut c = controller(client);
    c.config.mcs = true;
    c.mcs.import = Some(resource("ServiceImport", "serviceimports", "v1beta1"));
    c.mcs.export = Some(resource("ServiceExport", "serviceexports", "v1beta1"));
    c.api.set_imports(c.mcs.import.clone());
    c
}

fn import() -> Desired {
    stamped(&Desired {
        key: key(Kind::ServiceImport, "db"),
        object: object(json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
            "metadata": {"name": "db", "namespace": "prod",
                         "labels": {"app.kubernetes.io/managed-by": "clusterset-dns",
                                    "multicluster.kubernetes.io/service-name": "db"}},
            "spec": {"type": "ClusterSetIP", "ips": ["10.96.0.5"],
                     "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}
        })),
        cluster: None,
    })
}

fn stored_import(d: &Desired, uid: &str, rv: &str) -> Value {
    let mut v = json(&d.object);
    v["metadata"]["uid"] = json!(uid);
    v["metadata"]["resourceVersion"] = json!(rv);
    v
}

#[tokio::test]
async fn service_import_create_apply_and_delete_go_to_the_discovered_resource() {
    let (client, handle) = mock::client();
    let d = import();
    let server = mock::serve(
        handle,
        vec![
            Step::new("POST", IMPORTS)
                .query(&[FM])
                .content_type("application/json")
                .body(json(&d.object))
                .ok(stored_import(&d, "u1", "5")),
            Step::new("PATCH", &format!("{IMPORTS}/db"))
                .query(&[FM, ("force", "true")])
                .content_type(APPLY)
                .body(json(&d.object))
                .ok(stored_import(&d, "u1", "6")),
            Step::new("DELETE", &format!("{IMPORTS}/db"))
                .content_type("application/json")
                .body(json!({"preconditions": {"uid": "u1", "resourceVersion": "6"}}))
                .ok(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
        ],
    );
    let mut c = mcs_controller(client);
    assert_eq!(
        c.create(d.clone()).await,
        counted(&[("create", "ok")], true)
    );
    assert_eq!(c.apply(d.clone()).await, counted(&[("apply", "ok")], true));
    assert_eq!(c.cache.actual()[&d.key].resource_version(), Some("6"));
    let done = c
        .delete(d.key.clone(), Some("u1".into()), Some("6".into()))
        .await;
    assert_eq!(done, counted(&[("delete", "ok")], true));
    mock::finished(server).await;
    assert!(!c.cache.actual().contains_key(&d.key));
}

#[tokio::test]
async fn service_import_writes_fail_cleanly_where_none_is_served() {
    let (client, handle) = mock::client();
    let server = mock::serve(handle, vec![]);
    let mut c = controller(client);
    assert_eq!(
        c.create(import()).await,
        counted(&[("create", "error")], false)
    );
    mock::finished(server).await;
}

/// The local cluster exports `prod/db`; its ServiceExport as listed.
fn exported(c: &mut Controller) {
    let mut set = ClusterSet::new();
    let mut dirty = Dirty::default();
    let mut s = service(
        "prod",
        "db",
        None,
        false,
        false,
        &[],
        vec![port(Some("pg"), crate::model::objects::Protocol::Tcp, 5432)],
    );
    s.mcs = Some(100);
    for e in up("local", true).into_iter().chain([svc_event("local", s)]) {
        set.apply(e, &mut dirty);
    }
    c.set = Some(set);
    let export: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": "db", "namespace": "prod", "uid": "e1", "generation": 2,
                     "resourceVersion": "3"},
        "spec": {}
    }))
    .expect("an object");
    let export = crate::k8s::crd::from_dynamic(export).expect("a ServiceExport");
    c.on_export(Event::Apply(export));
}

#[tokio::test]
async fn export_conditions_are_applied_to_the_status_subresource_once() {
    let (client, handle) = mock::client();
    let check = |body: &Value| {
        assert_eq!(body["kind"], "ServiceExport");
        assert_eq!(body["metadata"], json!({"name": "db", "namespace": "prod"}));
        assert!(body.get("spec").is_none(), "only the status: {body}");
        let conditions = body["status"]["conditions"].as_array().expect("conditions");
        let summary: Vec<(&str, &str, &str)> = conditions
            .iter()
            .map(|c| {
                let f = |k: &str| c[k].as_str().unwrap_or("");
                assert!(!f("lastTransitionTime").is_empty());
                assert_eq!(c["observedGeneration"], 2);
                (f("type"), f("status"), f("reason"))
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("Valid", "True", "Valid"),
                ("Conflict", "False", "NoConflicts")
            ]
        );
    };
    let server = mock::serve(
        handle,
        vec![
            Step::new("PATCH", &format!("{EXPORTS}/db/status"))
                .query(&[FM, ("force", "true")])
                .content_type(APPLY)
                .body_with(check)
                .ok(json!({
                    "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
                    "metadata": {"name": "db", "namespace": "prod", "uid": "e1", "generation": 2},
                    "status": {"conditions": [
                        {"type": "Valid", "status": "True", "reason": "Valid",
                         "message": "Service prod/db is exported",
                         "lastTransitionTime": "2026-11-25T12:00:00Z", "observedGeneration": 2},
                        {"type": "Conflict", "status": "False", "reason": "NoConflicts",
                         "message": "no conflicts",
                         "lastTransitionTime": "2026-11-25T12:00:00Z", "observedGeneration": 2}
                    ]}
                })),
        ],
    );
    let mut c = mcs_controller(client);
    exported(&mut c);
    let (_tx, leading) = watch::channel(true);
    c.write_statuses(&leading).await;
    // The answer holds our conditions: the next pass writes nothing.
    c.write_statuses(&leading).await;
    mock::finished(server).await;
    assert_eq!(c.stats.ok_writes(), 1);
}

#[tokio::test]
async fn export_conditions_are_not_written_by_a_follower() {
    let (client, handle) = mock::client();
    let server = mock::serve(handle, vec![]);
    let mut c = mcs_controller(client);
    exported(&mut c);
    let (_tx, leading) = watch::channel(false);
    c.write_statuses(&leading).await;
    mock::finished(server).await;
}

fn group_list(versions: &[&str]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("multicluster.x-k8s.io/{v}"), "version": v}))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
        "name": "multicluster.x-k8s.io", "versions": versions,
        "preferredVersion": versions[0]
    }]})
}

fn resource_list(version: &str) -> Value {
    let r = |kind: &str, plural: &str| {
        json!({"name": plural, "singularName": kind.to_lowercase(), "namespaced": true,
               "kind": kind, "verbs": ["get", "list", "watch", "create", "patch", "delete"]})
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1",
           "groupVersion": format!("multicluster.x-k8s.io/{version}"),
           "resources": [r("ServiceImport", "serviceimports"), r("ServiceExport", "serviceexports")]})
}

#[tokio::test]
async fn discovery_prefers_v1beta1_and_takes_v1alpha1_where_only_that_is_served() {
    for (served, want) in [
        (&["v1beta1", "v1alpha1"][..], "v1beta1"),
        (&["v1alpha1"][..], "v1alpha1"),
    ] {
        let (client, handle) = mock::client();
        let mut script = vec![Step::new("GET", "/apis").ok(group_list(served))];
        for v in served {
            script.push(
                Step::new("GET", &format!("/apis/multicluster.x-k8s.io/{v}")).ok(resource_list(v)),
            );
        }
        let server = mock::serve(handle, script);
        let apis = discover_mcs(&client).await.expect("discovery");
        mock::finished(server).await;
        assert_eq!(
            apis.import.map(|a| a.api_version),
            Some(format!("multicluster.x-k8s.io/{want}"))
        );
        assert_eq!(apis.export.map(|a| a.version), Some(want.to_owned()));
    }
}

#[tokio::test]
async fn discovery_without_the_group_finds_nothing() {
    let (client, handle) = mock::client();
    let server = mock::serve(
        handle,
        vec![
            Step::new("GET", "/apis")
                .ok(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})),
        ],
    );
    let apis = discover_mcs(&client).await.expect("discovery");
    mock::finished(server).await;
    assert!(apis.import.is_none() && apis.export.is_none());
}

/// Discovery of a cluster serving the MCS group at v1beta1, then the list
/// of our ServiceImports in every namespace, answered `list`.
fn sweep_script(list: Step) -> Vec<Step> {
    vec![
        Step::new("GET", "/apis").ok(group_list(&["v1beta1"])),
        Step::new("GET", "/apis/multicluster.x-k8s.io/v1beta1").ok(resource_list("v1beta1")),
        list,
    ]
}

fn list_ours() -> Step {
    Step::new("GET", "/apis/multicluster.x-k8s.io/v1beta1/serviceimports").query(&[(
        "labelSelector",
        "app.kubernetes.io%2Fmanaged-by%3Dclusterset-dns",
    )])
}

fn listed_import(name: &str, uid: &str, rv: &str) -> Value {
    json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
           "metadata": {"name": name, "namespace": "prod", "uid": uid, "resourceVersion": rv,
                        "labels": {"app.kubernetes.io/managed-by": "clusterset-dns"}},
           "spec": {"type": "ClusterSetIP", "ips": ["10.96.0.9"], "ports": []}})
}

#[tokio::test]
async fn without_mcs_our_leftover_imports_are_deleted_with_preconditions() {
    let (client, handle) = mock::client();
    let mut script = sweep_script(list_ours().ok(json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImportList",
        "metadata": {"resourceVersion": "12"},
        "items": [listed_import("db", "u1", "5"), listed_import("web", "u2", "6")]
    })));
    script.push(
        Step::new("DELETE", &format!("{IMPORTS}/db"))
            .body(json!({"preconditions": {"uid": "u1", "resourceVersion": "5"}}))
            .ok(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
    );
    // Changed since it was listed: not what we listed, left alone.
    script.push(
        Step::new("DELETE", &format!("{IMPORTS}/web"))
            .body(json!({"preconditions": {"uid": "u2", "resourceVersion": "6"}}))
            .fails(409, "Conflict"),
    );
    let server = mock::serve(handle, script);
    let swept = sweep::leftover_imports(&client).await;
    mock::finished(server).await;
    assert_eq!(swept, sweep::Swept::Done(1));
}

#[tokio::test]
async fn without_the_right_to_list_them_leftover_imports_stay() {
    let (client, handle) = mock::client();
    let server = mock::serve(handle, sweep_script(list_ours().fails(403, "Forbidden")));
    let swept = sweep::leftover_imports(&client).await;
    mock::finished(server).await;
    assert_eq!(swept, sweep::Swept::Done(0), "nothing more to do");
}

#[tokio::test]
async fn a_failed_list_of_leftover_imports_is_tried_again() {
    let (client, handle) = mock::client();
    let server = mock::serve(
        handle,
        sweep_script(list_ours().fails(500, "InternalError")),
    );
    let swept = sweep::leftover_imports(&client).await;
    mock::finished(server).await;
    assert_eq!(swept, sweep::Swept::Again);
}

#[tokio::test(start_paused = true)]
async fn mcs_discovery_is_asked_again_until_the_api_answers() {
    let (client, handle) = mock::client();
    let server = mock::serve(
        handle,
        vec![
            Step::new("GET", "/apis").fails(500, "InternalError"),
            Step::new("GET", "/apis").fails(503, "ServiceUnavailable"),
            Step::new("GET", "/apis").ok(group_list(&["v1beta1"])),
            Step::new("GET", "/apis/multicluster.x-k8s.io/v1beta1").ok(resource_list("v1beta1")),
        ],
    );
    let apis = discover_until_answered(&client, &CancellationToken::new())
        .await
        .expect("answered");
    mock::finished(server).await;
    assert_eq!(
        apis.import.map(|a| a.api_version),
        Some("multicluster.x-k8s.io/v1beta1".to_owned())
    );
}

#[tokio::test(start_paused = true)]
async fn mcs_discovery_that_never_answers_ends_with_the_mirror() {
    let (client, handle) = mock::client();
    // One failure answered, then the server is gone: every later ask fails.
    let server = mock::serve(
        handle,
        vec![Step::new("GET", "/apis").fails(500, "InternalError")],
    );
    let stop = CancellationToken::new();
    let stopper = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(120)).await;
        stopper.cancel();
    });
    let found = discover_until_answered(&client, &stop).await;
    mock::finished(server).await;
    assert!(found.is_none(), "no APIs without an answer");
    assert!(stop.is_cancelled());
}
