//! kubesim's fault injection, RBAC, authentication, counters and audit log, each observed the
//! way a client of a real cluster would observe it.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::kubesim_api::{
    api_error, client, client_from, client_without_retry, names_of, service, sim,
};

/// Waits for a watch stream to end (None) or fail, skipping bookmarks.
async fn watch_ends<S>(stream: &mut S) -> bool
where
    S: futures_util::Stream<Item = kube::Result<WatchEvent<EndpointSlice>>> + Unpin,
{
    for _ in 0..100 {
        match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
            Err(_) => return false,
            Ok(None | Some(Err(_))) => return true,
            Ok(Some(Ok(_))) => {}
        }
    }
    false
}

/// One plain HTTP/1.1 request to kubesim's control endpoint; returns (status, JSON body).
/// Blocking on purpose: the kubectl test, which has no runtime, uses it too.
pub(crate) fn control(
    addr: impl std::net::ToSocketAddrs,
    method: &str,
    path: &str,
) -> (u16, serde_json::Value) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("control endpoint");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: kubesim\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("reply");
    let (head, body) = text.split_once("\r\n\r\n").expect("http response");
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    (
        code,
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test]
async fn stop_refuses_connections_and_cuts_watches_restart_keeps_data() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let east = sim.cluster("east").unwrap();
    let c = client(east).await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");
    svcs.create(&PostParams::default(), &service("web", json!({})))
        .await
        .unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(c.clone(), "default");
    let mut watch = slices
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();

    east.stop();
    assert!(watch_ends(&mut watch).await, "the open watch is cut");
    let refused = svcs.get("web").await.unwrap_err();
    assert!(
        !matches!(refused, kube::Error::Api(_)),
        "no HTTP answer while stopped: {refused:?}"
    );
    assert!(
        tokio::net::TcpStream::connect(east.addr).await.is_err(),
        "connection refused"
    );

    east.restart().await.unwrap();
    let back = svcs.get("web").await.unwrap();
    assert_eq!(
        back.metadata.name.as_deref(),
        Some("web"),
        "data survives a restart"
    );
}

#[tokio::test]
async fn drop_watches_ends_streams_but_serves_requests() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let east = sim.cluster("east").unwrap();
    let c = client(east).await;
    let slices: Api<EndpointSlice> = Api::namespaced(c.clone(), "default");
    let mut watch = slices
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    east.drop_watches();
    assert!(watch_ends(&mut watch).await);
    assert!(slices.list(&ListParams::default()).await.is_ok());
    // A new watch after the drop works and sees changes.
    let mut again = slices
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.1.1"]}]}))
    .unwrap();
    slices.create(&PostParams::default(), &slice).await.unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), again.next())
            .await
            .expect("event")
            .expect("open")
        {
            Ok(WatchEvent::Added(s)) => {
                assert_eq!(s.metadata.name.as_deref(), Some("s"));
                break;
            }
            Ok(WatchEvent::Bookmark(_)) => {}
            other => panic!("{other:?}"),
        }
    }
}

// Multi-threaded: the blocking control-endpoint client must not starve the server it asks.
#[tokio::test(flavor = "multi_thread")]
async fn latency_failures_and_throttling() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let east = sim.cluster("east").unwrap();
    let c = client(east).await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");

    east.set_latency(Duration::from_millis(300));
    let started = Instant::now();
    svcs.get("kubernetes").await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the injected latency delays the answer"
    );
    east.set_latency(Duration::ZERO);

    east.fail_next(2);
    for _ in 0..2 {
        let e = api_error(svcs.get("kubernetes").await.unwrap_err());
        assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    }
    svcs.get("kubernetes")
        .await
        .expect("the third request succeeds");

    // kube-rs retries a 429 by itself: the call succeeds, and the server saw two requests.
    east.throttle_next(1, 1);
    let gets = east.request_count("get", "services");
    svcs.get("kubernetes")
        .await
        .expect("kube-rs retried after the 429");
    assert_eq!(east.request_count("get", "services"), gets + 2);
    // Without the retry layer the 429 and its Retry-After are visible.
    east.throttle_next(1, 7);
    let raw = client_without_retry(east).await;
    let req = http::Request::get("/api/v1/namespaces/default/services/kubernetes")
        .body(Vec::new())
        .unwrap();
    let resp = raw.send(req.map(kube::client::Body::from)).await.unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("7")
    );
    svcs.get("kubernetes")
        .await
        .expect("throttling was for one request");

    // The same switches from the control endpoint.
    let (sim2, _dir2) = crate::kubesim_api::sim(&["west"], |c: &mut kubesim::SimConfig| {
        c.control = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let addr = sim2.control_addr().unwrap();
    let west = client_without_retry(sim2.cluster("west").unwrap()).await;
    let (code, _) = control(
        addr,
        "POST",
        "/clusters/west/fail?count=1&code=429&retryAfter=3",
    );
    assert_eq!(code, 200);
    let e = api_error(
        Api::<Service>::namespaced(west.clone(), "default")
            .get("kubernetes")
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));
    let (code, _) = control(addr, "POST", "/clusters/west/stop");
    assert_eq!(code, 200);
    assert!(
        Api::<Service>::namespaced(west.clone(), "default")
            .get("kubernetes")
            .await
            .is_err()
    );
    let (code, body) = control(addr, "POST", "/clusters/west/start");
    assert_eq!((code, body["running"].as_bool()), (200, Some(true)));
    Api::<Service>::namespaced(west.clone(), "default")
        .get("kubernetes")
        .await
        .expect("serving again");
    let (code, counters) = control(addr, "GET", "/clusters/west/counters");
    assert_eq!(code, 200);
    assert!(
        counters
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["verb"] == "get"
                && c["resource"] == "services"
                && c["count"].as_u64() >= Some(2)),
        "{counters}"
    );
    let (code, _) = control(addr, "POST", "/clusters/nope/stop");
    assert_eq!(code, 404);
}

#[tokio::test]
async fn tokens_rotation_and_anonymous() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let east = sim.cluster("east").unwrap();
    let old = client(east).await;
    Api::<Service>::namespaced(old.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    east.rotate_admin_token().unwrap();
    let e = api_error(
        Api::<Service>::namespaced(old.clone(), "default")
            .get("kubernetes")
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (401, "Unauthorized", "Unauthorized")
    );
    let fresh = client(east).await;
    Api::<Service>::namespaced(fresh, "default")
        .get("kubernetes")
        .await
        .expect("the rewritten kubeconfig works");
    let anon = client_from(&east.kubeconfig_for("nobody", "not-a-token")).await;
    let e = api_error(
        Api::<Service>::namespaced(anon, "default")
            .get("kubernetes")
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 401);
    assert!(
        east.audit()
            .iter()
            .any(|a| a.user == "system:anonymous" && a.code == 401)
    );
}

#[tokio::test]
async fn counters_and_audit_log_record_each_request() {
    let (sim, _dir) = sim(&["east"], |_| {}).await;
    let east = sim.cluster("east").unwrap();
    let c = client(east).await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), "default");
    svcs.create(&PostParams::default(), &service("web", json!({})))
        .await
        .unwrap();
    svcs.get("web").await.unwrap();
    assert_eq!(east.request_count("create", "services"), 1);
    assert_eq!(east.request_count("get", "services"), 1);
    let entry = east
        .audit()
        .into_iter()
        .find(|a| a.verb == "create")
        .expect("create audited");
    assert_eq!(
        (
            entry.user.as_str(),
            entry.group.as_str(),
            entry.resource.as_str(),
            entry.namespace.as_str(),
            entry.name.as_str(),
            entry.code
        ),
        ("kubesim-admin", "", "services", "default", "", 201)
    );
}

const READER_RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: service-lister, namespace: default}
rules:
- apiGroups: [""]
  resources: [services]
  verbs: [list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader-lists-services, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: service-lister}
subjects:
- {kind: ServiceAccount, name: reader, namespace: default}
"#;

#[tokio::test]
async fn rbac_allows_exactly_what_is_bound() {
    let (sim, dir) = sim(&["east"], |_| {}).await;
    let east = sim.cluster("east").unwrap();
    let path = dir.path().join("rbac.yaml");
    std::fs::write(&path, READER_RBAC).unwrap();
    east.set_policy(Some(kubesim::load_policy(&[path]).unwrap()));
    let token = east.issue_service_account_token("default", "reader");
    let reader = client_from(&east.kubeconfig_for("reader", &token)).await;
    let user = "system:serviceaccount:default:reader";

    let svcs: Api<Service> = Api::namespaced(reader.clone(), "default");
    let names: Vec<String> = names_of(svcs.list(&ListParams::default()).await.unwrap().items);
    assert_eq!(names, ["kubernetes"]);

    let e = api_error(
        Api::<EndpointSlice>::namespaced(reader.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        e.message,
        format!(
            "endpointslices.discovery.k8s.io is forbidden: User \"{user}\" cannot list resource \"endpointslices\" in API group \"discovery.k8s.io\" in the namespace \"default\""
        )
    );
    let e = api_error(
        svcs.create(&PostParams::default(), &service("web", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        format!(
            "services is forbidden: User \"{user}\" cannot create resource \"services\" in API group \"\" in the namespace \"default\""
        )
    );
    let e = api_error(svcs.get("kubernetes").await.unwrap_err());
    assert_eq!(
        e.message,
        format!(
            "services \"kubernetes\" is forbidden: User \"{user}\" cannot get resource \"services\" in API group \"\" in the namespace \"default\""
        )
    );
    let e = api_error(
        Api::<Service>::namespaced(reader.clone(), "kube-system")
            .list(&ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403, "a RoleBinding grants only in its namespace");

    // The admin (system:masters) is not limited by the policy.
    let admin = client(east).await;
    Api::<EndpointSlice>::namespaced(admin, "default")
        .list(&ListParams::default())
        .await
        .unwrap();
}
