//! kube-rs clients against kubesim: the typed `Api`, `kube::runtime::watcher`, server-side
//! apply, conflicts, pagination, selectors, finalizers, Links in every version, RBAC and each
//! fault kubesim can inject. A client that works here must work against a real cluster, so
//! every assertion is on what kube-apiserver would send.

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use kube::{Client, Config};
use serde_json::json;

/// A kubesim with the named clusters, its kubeconfigs in a temporary directory.
pub(crate) async fn sim(
    names: &[&str],
    tweak: impl FnOnce(&mut kubesim::SimConfig),
) -> (kubesim::Sim, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = kubesim::SimConfig::new(names.iter().copied(), dir.path());
    tweak(&mut config);
    (kubesim::start(config).await.expect("kubesim starts"), dir)
}

/// A kube client from kubeconfig text, as a user would build one.
pub(crate) async fn client_from(kubeconfig: &str) -> Client {
    let kc = Kubeconfig::from_yaml(kubeconfig).expect("kubeconfig parses");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

/// A kube client that does not retry 429/503/504 itself, to see what the server sent.
pub(crate) async fn client_without_retry(cluster: &kubesim::Cluster) -> Client {
    let text = std::fs::read_to_string(cluster.kubeconfig_path()).expect("kubeconfig written");
    let kc = Kubeconfig::from_yaml(&text).expect("kubeconfig parses");
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    config.default_retry = false;
    Client::try_from(config).expect("client")
}

/// The admin client of a cluster, from the kubeconfig file kubesim wrote.
pub(crate) async fn client(cluster: &kubesim::Cluster) -> Client {
    let text = std::fs::read_to_string(cluster.kubeconfig_path()).expect("kubeconfig written");
    client_from(&text).await
}

/// Creates a namespace (objects go only into namespaces that exist).
pub(crate) async fn create_namespace(c: &Client, name: &str) {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
}

/// A Service with one port and these labels.
pub(crate) fn service(name: &str, labels: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"ports": [{"name": "http", "port": 80}]},
    }))
    .expect("service")
}

/// The names of listed objects, in list order.
pub(crate) fn names_of<K: kube::Resource>(items: Vec<K>) -> Vec<String> {
    items
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect()
}

/// The Status of a failed request (panics on any other error).
pub(crate) fn api_error(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected a Status error, got {other:?}"),
    }
}

async fn next_event<S, T>(stream: &mut S) -> T
where
    S: futures_util::Stream<Item = T> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("an event within 5 s")
        .expect("stream still open")
}

#[tokio::test]
async fn typed_api_create_get_list_update_delete() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let c = client(sim.cluster("east").unwrap()).await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");

    let created = svcs
        .create(
            &PostParams::default(),
            &service("web", json!({"app": "web"})),
        )
        .await
        .unwrap();
    let ip = created
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .expect("ClusterIP allocated");
    assert!(ip.starts_with("10.96."), "{ip}");
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    let port = &created.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));

    let again = api_error(
        svcs.create(&PostParams::default(), &service("web", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(again.message, "services \"web\" already exists");

    let missing = api_error(svcs.get("nope").await.unwrap_err());
    assert_eq!(
        (
            missing.code,
            missing.reason.as_str(),
            missing.message.as_str()
        ),
        (404, "NotFound", "services \"nope\" not found")
    );

    // Headless keeps None; a second service gets a different address.
    let mut headless = service("db", json!({}));
    headless.spec.as_mut().unwrap().cluster_ip = Some("None".into());
    let db = svcs
        .create(&PostParams::default(), &headless)
        .await
        .unwrap();
    assert_eq!(db.spec.unwrap().cluster_ip.as_deref(), Some("None"));

    // Update with a stale resourceVersion: 409 Conflict.
    let mut stale = created.clone();
    svcs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
    )
    .await
    .unwrap();
    stale.metadata.labels = Some([("v".to_owned(), "3".to_owned())].into());
    let conflict = api_error(
        svcs.replace("web", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert!(
        conflict.message.contains("the object has been modified"),
        "{}",
        conflict.message
    );

    // ClusterIP is immutable.
    let mut moved = svcs.get("web").await.unwrap();
    moved.spec.as_mut().unwrap().cluster_ip = Some("10.96.9.9".into());
    moved.spec.as_mut().unwrap().cluster_ips = Some(vec!["10.96.9.9".into()]);
    let immutable = api_error(
        svcs.replace("web", &PostParams::default(), &moved)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (immutable.code, immutable.reason.as_str()),
        (422, "Invalid")
    );

    // Invalid ports are rejected with kube's wording.
    let bad: Service = serde_json::from_value(
        json!({"metadata": {"name": "bad"}, "spec": {"ports": [{"port": 0}]}}),
    )
    .unwrap();
    let invalid = api_error(svcs.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(invalid.code, 422);
    assert!(
        invalid.message.contains(
            "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"
        ),
        "{}",
        invalid.message
    );

    let deleted = svcs.delete("web", &DeleteParams::default()).await.unwrap();
    assert!(
        deleted.is_right(),
        "an immediate delete answers a Success Status"
    );
    let names: Vec<String> = names_of(svcs.list(&ListParams::default()).await.unwrap().items);
    assert_eq!(names, ["db", "kubernetes"]);

    // Objects only go into namespaces that exist.
    let nowhere: Api<Service> = Api::namespaced(c.clone(), "nowhere");
    let e = api_error(
        nowhere
            .create(&PostParams::default(), &service("x", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "namespaces \"nowhere\" not found")
    );
}

#[tokio::test]
async fn selectors_and_pagination() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let c = client(sim.cluster("east").unwrap()).await;
    create_namespace(&c, "shop").await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), "shop");
    for (name, tier) in [
        ("a", "web"),
        ("b", "web"),
        ("c", "db"),
        ("d", "cache"),
        ("e", "web"),
    ] {
        svcs.create(
            &PostParams::default(),
            &service(name, json!({"tier": tier, "team": "x"})),
        )
        .await
        .unwrap();
    }
    let names = |l: kube::core::ObjectList<Service>| names_of(l.items);
    for (selector, want) in [
        ("tier=web", vec!["a", "b", "e"]),
        ("tier!=web", vec!["c", "d"]),
        ("tier in (db,cache)", vec!["c", "d"]),
        ("tier notin (web),team", vec!["c", "d"]),
        ("!team", vec![]),
        ("team,tier=db", vec!["c"]),
    ] {
        let got = names(
            svcs.list(&ListParams::default().labels(selector))
                .await
                .unwrap(),
        );
        assert_eq!(got, want, "labelSelector {selector}");
    }
    let got = names(
        svcs.list(&ListParams::default().fields("metadata.name=d"))
            .await
            .unwrap(),
    );
    assert_eq!(got, ["d"]);
    let bad = api_error(
        svcs.list(&ListParams::default().fields("spec.type=ClusterIP"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (bad.code, bad.message.as_str()),
        (400, "field label not supported: spec.type")
    );

    // limit + continue walk all five in order, at one consistent resourceVersion.
    let first = svcs.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let token = first.metadata.continue_.clone().expect("a continue token");
    svcs.create(&PostParams::default(), &service("f", json!({})))
        .await
        .unwrap();
    let second = svcs
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        second.metadata.resource_version, first.metadata.resource_version,
        "pages share the first page's resourceVersion"
    );
    let third = svcs
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert!(third.metadata.continue_.is_none());
    let all: Vec<String> = [first, second, third].into_iter().flat_map(names).collect();
    assert_eq!(
        all,
        ["a", "b", "c", "d", "e"],
        "the page after the create still shows the state of the first page"
    );

    // Pages across namespaces follow etcd's key order: "a-b/x" sorts before "a/x".
    for ns in ["a", "a-b"] {
        create_namespace(&c, ns).await;
        Api::<Service>::namespaced(c.clone(), ns)
            .create(&PostParams::default(), &service("x", json!({"page": "1"})))
            .await
            .unwrap();
    }
    let everywhere: Api<Service> = Api::all(c.clone());
    let mut paged = Vec::new();
    let mut next: Option<String> = None;
    for _ in 0..5 {
        let mut params = ListParams::default().labels("page=1").limit(1);
        if let Some(t) = &next {
            params = params.continue_token(t);
        }
        let page = everywhere.list(&params).await.unwrap();
        paged.extend(page.items.iter().map(|s| {
            format!(
                "{}/{}",
                s.metadata.namespace.as_deref().unwrap_or(""),
                s.metadata.name.as_deref().unwrap_or("")
            )
        }));
        next = page.metadata.continue_;
        if next.is_none() {
            break;
        }
    }
    assert_eq!(paged, ["a-b/x", "a/x"]);

    // An expired continue token is 410 Expired.
    sim.cluster("east").unwrap().expire_history();
    let expired = api_error(
        svcs.list(&ListParams::default().limit(2).continue_token(&token))
            .await
            .unwrap_err(),
    );
    assert_eq!((expired.code, expired.reason.as_str()), (410, "Expired"));
}

#[tokio::test]
async fn watcher_sees_changes_and_relists_after_410() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let east = sim.cluster("east").unwrap();
    let c = client(east).await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");
    svcs.create(&PostParams::default(), &service("one", json!({"x": "1"})))
        .await
        .unwrap();

    let mut events = watcher(svcs.clone(), watcher::Config::default().labels("x")).boxed();
    assert!(matches!(
        next_event(&mut events).await.unwrap(),
        watcher::Event::Init
    ));
    match next_event(&mut events).await.unwrap() {
        watcher::Event::InitApply(s) => assert_eq!(s.metadata.name.as_deref(), Some("one")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        next_event(&mut events).await.unwrap(),
        watcher::Event::InitDone
    ));

    svcs.create(&PostParams::default(), &service("two", json!({"x": "2"})))
        .await
        .unwrap();
    match next_event(&mut events).await.unwrap() {
        watcher::Event::Apply(s) => assert_eq!(s.metadata.name.as_deref(), Some("two")),
        other => panic!("{other:?}"),
    }
    // A label change that leaves the selector is a delete for this watcher.
    svcs.patch(
        "two",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{"op": "remove", "path": "/metadata/labels/x"}]))
                .unwrap(),
        ),
    )
    .await
    .unwrap();
    match next_event(&mut events).await.unwrap() {
        watcher::Event::Delete(s) => assert_eq!(s.metadata.name.as_deref(), Some("two")),
        other => panic!("{other:?}"),
    }

    // Expire history and cut the watch: the re-watch gets 410 Expired and the watcher relists.
    let lists_before = east.request_count("list", "services");
    east.expire_history();
    east.drop_watches();
    let mut saw_410 = false;
    loop {
        match next_event(&mut events).await {
            Err(watcher::Error::WatchError(e)) => {
                assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
                saw_410 = true;
            }
            Ok(watcher::Event::Init) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        saw_410,
        "the watch from the old resourceVersion was refused with 410"
    );
    match next_event(&mut events).await.unwrap() {
        watcher::Event::InitApply(s) => assert_eq!(s.metadata.name.as_deref(), Some("one")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        next_event(&mut events).await.unwrap(),
        watcher::Event::InitDone
    ));
    assert_eq!(
        east.request_count("list", "services"),
        lists_before + 1,
        "exactly one relist"
    );

    // And it keeps watching after the relist.
    svcs.create(&PostParams::default(), &service("three", json!({"x": "3"})))
        .await
        .unwrap();
    match next_event(&mut events).await.unwrap() {
        watcher::Event::Apply(s) => assert_eq!(s.metadata.name.as_deref(), Some("three")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn streaming_list_and_bookmarks() {
    let (sim, _dir) = sim(&["east"], |c| {
        c.settings.bookmark_interval = Duration::from_millis(200);
    })
    .await;
    let c = client(sim.cluster("east").unwrap()).await;
    let slices: Api<EndpointSlice> = Api::namespaced(c.clone(), "default");
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"port": 80}],
    }))
    .unwrap();
    let created = slices.create(&PostParams::default(), &slice).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));

    // sendInitialEvents: the state as ADDED events, then the initial-events-end bookmark.
    let mut stream = watcher(slices.clone(), watcher::Config::default().streaming_lists()).boxed();
    assert!(matches!(
        next_event(&mut stream).await.unwrap(),
        watcher::Event::Init
    ));
    assert!(matches!(
        next_event(&mut stream).await.unwrap(),
        watcher::Event::InitApply(_)
    ));
    assert!(matches!(
        next_event(&mut stream).await.unwrap(),
        watcher::Event::InitDone
    ));
    drop(stream);

    // Plain watch with bookmarks: a BOOKMARK carrying the current resourceVersion arrives while idle.
    let rv = created.metadata.resource_version.clone().unwrap();
    let mut raw = slices
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut raw).await.unwrap() {
        WatchEvent::Bookmark(b) => assert!(
            b.metadata.resource_version.parse::<u64>().unwrap() >= rv.parse::<u64>().unwrap()
        ),
        other => panic!("expected a bookmark, got {other:?}"),
    }

    // A watch from a resourceVersion older than the history: an ERROR event with 410 Expired.
    sim.cluster("east").unwrap().expire_history();
    let mut old = slices
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut old).await.unwrap() {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }

    // timeoutSeconds ends the stream.
    let mut short = slices
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        next_event(&mut short).await.unwrap(),
        WatchEvent::Added(_)
    ));
    let mut ended = false;
    for _ in 0..50 {
        match tokio::time::timeout(Duration::from_secs(5), short.next())
            .await
            .expect("the watch ends")
        {
            None => {
                ended = true;
                break;
            }
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            Some(other) => panic!("only bookmarks while idle, got {other:?}"),
        }
    }
    assert!(ended, "timeoutSeconds=1 ended the watch");
}

#[tokio::test]
async fn server_side_apply_owns_fields_and_reports_conflicts() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let c = client(sim.cluster("east").unwrap()).await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");
    let applied = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}], "selector": {"app": "web"}},
    });
    let svc = svcs
        .patch(
            "web",
            &PatchParams::apply("mirror"),
            &Patch::Apply(&applied),
        )
        .await
        .unwrap();
    assert!(
        svc.spec.as_ref().unwrap().cluster_ip.is_some(),
        "apply creates and allocates"
    );
    let managed = svc.metadata.managed_fields.clone().unwrap();
    assert_eq!(managed.len(), 1);
    assert_eq!(managed[0].manager.as_deref(), Some("mirror"));
    assert_eq!(managed[0].operation.as_deref(), Some("Apply"));
    let fields = serde_json::to_value(&managed[0].fields_v1).unwrap();
    assert!(
        fields.pointer("/f:metadata/f:labels/f:app").is_some(),
        "{fields}"
    );
    assert!(fields.pointer("/f:spec/f:ports").is_some(), "{fields}");

    // Re-applying the same thing changes nothing: same resourceVersion.
    let again = svcs
        .patch(
            "web",
            &PatchParams::apply("mirror"),
            &Patch::Apply(&applied),
        )
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version, svc.metadata.resource_version,
        "a no-op apply writes nothing"
    );

    // Another manager setting the same field to another value conflicts, naming the owner.
    let other = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "labels": {"app": "api"}}});
    let e = api_error(
        svcs.patch(
            "web",
            &PatchParams::apply("intruder"),
            &Patch::Apply(&other),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("conflict with \"mirror\""),
        "{}",
        e.message
    );
    assert!(e.message.contains(".metadata.labels.app"), "{}", e.message);
    let cause = &e.details.as_ref().expect("details").causes[0];
    assert_eq!(
        (
            cause.reason.as_str(),
            cause.message.as_str(),
            cause.field.as_str()
        ),
        (
            "FieldManagerConflict",
            "conflict with \"mirror\"",
            ".metadata.labels.app"
        )
    );

    // force takes the field over.
    let forced = svcs
        .patch(
            "web",
            &PatchParams::apply("intruder").force(),
            &Patch::Apply(&other),
        )
        .await
        .unwrap();
    assert_eq!(forced.metadata.labels.unwrap()["app"], "api");
    let mut managers: Vec<String> = forced
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    managers.sort();
    assert_eq!(managers, ["intruder", "mirror"]);

    // Dropping a field from the applied config removes it when nobody else owns it.
    let fewer = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                       "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}});
    let pruned = svcs
        .patch("web", &PatchParams::apply("mirror"), &Patch::Apply(&fewer))
        .await
        .unwrap();
    assert!(
        pruned.spec.unwrap().selector.is_none(),
        "the selector mirror stopped applying is gone"
    );

    // fieldManager is required for apply.
    let raw = c
        .request_text(
            http::Request::patch("/api/v1/namespaces/default/services/web")
                .header("content-type", "application/apply-patch+yaml")
                .body(serde_json::to_vec(&applied).unwrap())
                .unwrap(),
        )
        .await;
    let e = api_error(raw.unwrap_err());
    assert_eq!(e.code, 422);
    assert!(
        e.message
            .contains("fieldManager: Required value: is required for apply patch"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn finalizers_preconditions_and_generate_name() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let c = client(sim.cluster("east").unwrap()).await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");
    let mut held = service("", json!({}));
    held.metadata.name = None;
    held.metadata.generate_name = Some("held-".into());
    held.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    let created = svcs.create(&PostParams::default(), &held).await.unwrap();
    let name = created.metadata.name.clone().unwrap();
    assert!(
        name.starts_with("held-") && name.len() == "held-".len() + 5,
        "{name}"
    );

    let wrong = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("not-it".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let e = api_error(svcs.delete(&name, &wrong).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message
            .contains("Precondition failed: UID in precondition: not-it"),
        "{}",
        e.message
    );

    let pending = svcs.delete(&name, &DeleteParams::default()).await.unwrap();
    let obj = pending.left().expect("finalizers keep the object");
    assert!(obj.metadata.deletion_timestamp.is_some());
    assert!(svcs.get(&name).await.is_ok());
    let add = api_error(
        svcs.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/keep", "more"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        add.code, 422,
        "no new finalizers on a deleting object: {}",
        add.message
    );
    svcs.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let gone = api_error(svcs.get(&name).await.unwrap_err());
    assert_eq!(
        gone.code, 404,
        "removing the last finalizer completes the delete"
    );
}

#[tokio::test]
async fn links_are_served_in_three_versions() {
    let (sim, _dir) = sim(&["local"], |_| {}).await;
    let c = client(sim.cluster("local").unwrap()).await;
    create_namespace(&c, "linkerd-multicluster").await;
    let link_api = |version: &str| {
        let gvk = GroupVersionKind::gvk("multicluster.linkerd.io", version, "Link");
        Api::<DynamicObject>::namespaced_with(
            c.clone(),
            "linkerd-multicluster",
            &ApiResource::from_gvk(&gvk),
        )
    };
    let link: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "multicluster.linkerd.io/v1alpha3", "kind": "Link",
        "metadata": {"name": "east"},
        "spec": {"targetClusterName": "east", "clusterCredentialsSecret": "cluster-credentials-east",
                 "gatewayAddress": "203.0.113.10", "gatewayPort": "4143",
                 "probeSpec": {"path": "/ready", "port": "4191", "period": "3s"},
                 "federatedServiceSelector": {"matchLabels": {"mirror.linkerd.io/federated": "member"}},
                 "excludedLabels": ["a/*"]},
    }))
    .unwrap();
    let created = link_api("v1alpha3")
        .create(&PostParams::default(), &link)
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"]["probeSpec"]["timeout"], "30s",
        "CRD default"
    );
    assert_eq!(
        created.data["spec"]["probeSpec"]["failureThreshold"], "3",
        "CRD default"
    );
    assert_eq!(created.metadata.generation, Some(1));

    let v1 = link_api("v1alpha1").get("east").await.unwrap();
    assert_eq!(
        v1.types.as_ref().unwrap().api_version,
        "multicluster.linkerd.io/v1alpha1"
    );
    assert!(
        v1.data["spec"].get("federatedServiceSelector").is_none(),
        "v1alpha1 has no federated selector"
    );
    assert_eq!(v1.data["spec"]["gatewayAddress"], "203.0.113.10");
    let v2 = link_api("v1alpha2").get("east").await.unwrap();
    assert!(v2.data["spec"].get("federatedServiceSelector").is_some());
    assert!(
        v2.data["spec"].get("excludedLabels").is_none(),
        "v1alpha2 has no excludedLabels"
    );

    // Ports are strings in every Link version: a number is a decode error.
    let mut bad = link.clone();
    bad.metadata.name = Some("bad".into());
    bad.data["spec"]["gatewayPort"] = json!(4143);
    let e = api_error(
        link_api("v1alpha3")
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 400, "{}", e.message);

    // Strategic merge is not for custom resources.
    let e = api_error(
        link_api("v1alpha3")
            .patch(
                "east",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"gatewayPort": "1"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 415);

    // The status subresource exists from v1alpha2 and changes only status.
    let status = json!({"status": {"mirrorServices": [{"controllerName": "x"}]}, "spec": {"gatewayPort": "9"}});
    let patched = link_api("v1alpha3")
        .patch_status("east", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(
        patched.data["status"]["mirrorServices"][0]["controllerName"],
        "x"
    );
    assert_eq!(
        patched.data["spec"]["gatewayPort"], "4143",
        "status writes leave spec alone"
    );
    assert_eq!(
        patched.metadata.generation,
        Some(1),
        "a status write is not a new generation"
    );
    let e = api_error(
        link_api("v1alpha1")
            .patch_status("east", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 404);
}

#[tokio::test]
async fn kube_discovery_finds_every_served_group() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let c = client(sim.cluster("east").unwrap()).await;
    let discovery = kube::discovery::Discovery::new(c.clone())
        .run()
        .await
        .expect("discovery runs");
    let links = discovery
        .get("multicluster.linkerd.io")
        .expect("the Link group is discovered");
    assert_eq!(links.preferred_version_or_latest(), "v1alpha3");
    let (ar, caps) = links.recommended_kind("Link").expect("Link kind");
    assert_eq!(
        (ar.plural.as_str(), ar.version.as_str()),
        ("links", "v1alpha3")
    );
    assert!(caps.supports_operation(kube::discovery::verbs::WATCH));
    assert!(
        caps.subresources
            .iter()
            .any(|(sub, _)| sub.plural == "links/status" || sub.plural == "status"),
        "{:?}",
        caps.subresources
    );
    for (group, kind) in [
        ("", "Service"),
        ("discovery.k8s.io", "EndpointSlice"),
        ("coordination.k8s.io", "Lease"),
        ("events.k8s.io", "Event"),
    ] {
        let g = discovery
            .get(group)
            .unwrap_or_else(|| panic!("group {group:?} discovered"));
        assert!(g.recommended_kind(kind).is_some(), "{kind} in {group:?}");
    }
    let version = c.apiserver_version().await.expect("/version");
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "33")
    );
}

#[tokio::test]
async fn dry_run_field_validation_warnings_and_deletecollection() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let c = client(sim.cluster("east").unwrap()).await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");

    // dryRun=All validates and answers, but stores nothing.
    let dry = svcs
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &service("dry", json!({})),
        )
        .await
        .unwrap();
    assert_eq!(dry.metadata.name.as_deref(), Some("dry"));
    assert_eq!(api_error(svcs.get("dry").await.unwrap_err()).code, 404);

    // fieldValidation=Warn keeps the object and says which field was dropped.
    let body = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "warned"},
                      "spec": {"ports": [{"port": 80}], "bogus": 1}});
    let req = http::Request::post("/api/v1/namespaces/default/services?fieldValidation=Warn")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    let resp = c.send(req.map(kube::client::Body::from)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let warning = resp
        .headers()
        .get("warning")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    assert_eq!(warning, r#"299 - "unknown field \"spec.bogus\"""#);
    assert!(svcs.get("warned").await.is_ok());

    // deletecollection removes exactly what the selector matches.
    for (name, team) in [("a", "x"), ("b", "x"), ("c", "y")] {
        svcs.create(
            &PostParams::default(),
            &service(name, json!({"team": team})),
        )
        .await
        .unwrap();
    }
    svcs.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("team=x"),
    )
    .await
    .unwrap();
    let mut left: Vec<String> = names_of(svcs.list(&ListParams::default()).await.unwrap().items);
    left.sort();
    assert_eq!(left, ["c", "kubernetes", "warned"]);
}
