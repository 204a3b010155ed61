//! The MCS and About CRDs through kubesim's HTTP face: discovery, create and read in either
//! version, the status subresource, patch types and 422s; and EndpointSlice addresses kube
//! refuses, on every write path. A plain-HTTP cluster on 127.0.0.1:0, spoken to with a minimal
//! HTTP/1.1 client (one request per connection).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{Sim, SimConfig};

/// A one-cluster kubesim over plain HTTP, with its kubeconfig directory removed on drop.
struct Fixture {
    sim: Sim,
    dir: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.sim.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn fixture(settings: impl FnOnce(&mut crate::ClusterSettings)) -> Fixture {
    let dir = std::env::temp_dir().join(format!("kubesim-api-{}", uuid::Uuid::new_v4()));
    let mut config = SimConfig::new(["east"], &dir);
    config.tls = false;
    settings(&mut config.settings);
    let sim = crate::start(config).await.expect("kubesim starts");
    Fixture { sim, dir }
}

impl Fixture {
    /// Sends one request; returns the status code and the JSON body (Null if not JSON).
    async fn call(&self, method: &str, path: &str, ct: &str, body: Option<&Value>) -> (u16, Value) {
        let cluster = self.sim.cluster("east").expect("configured");
        let body = body.map(ToString::to_string).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: kubesim\r\nAuthorization: Bearer {}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            cluster.admin_token(),
            body.len()
        );
        let exchange = async {
            let mut stream = TcpStream::connect(cluster.addr).await?;
            stream.write_all(request.as_bytes()).await?;
            let mut raw = Vec::new();
            stream.read_to_end(&mut raw).await?;
            Ok::<_, std::io::Error>(raw)
        };
        let raw = tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .expect("kubesim answers within 10s")
            .expect("the exchange succeeds");
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
        let code = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status line");
        (code, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, "application/json", None).await
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call("POST", path, "application/json", Some(body))
            .await
    }

    /// Server-side apply by `manager`.
    async fn apply(&self, path: &str, body: &Value, manager: &str) -> (u16, Value) {
        let path = format!("{path}?fieldManager={manager}");
        self.call("PATCH", &path, "application/apply-patch+yaml", Some(body))
            .await
    }

    async fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call("PUT", path, "application/json", Some(body)).await
    }
}

const MCS: &str = "/apis/multicluster.x-k8s.io";
const ABOUT: &str = "/apis/about.k8s.io";

fn names(list: &Value) -> Vec<String> {
    list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn discovery_lists_the_crds_as_installed() {
    let f = fixture(|_| {}).await;
    let (code, groups) = f.get("/apis").await;
    assert_eq!(code, 200);
    for (group, versions) in [
        ("multicluster.x-k8s.io", ["v1beta1", "v1alpha1"]),
        ("about.k8s.io", ["v1beta1", "v1alpha1"]),
    ] {
        let doc = groups["groups"]
            .as_array()
            .and_then(|g| g.iter().find(|g| g["name"] == group))
            .unwrap_or_else(|| panic!("{group} in /apis: {groups}"));
        let listed: Vec<&str> = doc["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_str().unwrap())
            .collect();
        assert_eq!(listed, versions, "{group}");
        assert_eq!(
            doc["preferredVersion"]["groupVersion"],
            format!("{group}/v1beta1")
        );
        let (code, one) = f.get(&format!("/apis/{group}")).await;
        assert_eq!((code, &one["kind"]), (200, &json!("APIGroup")));
    }
    for version in ["v1alpha1", "v1beta1"] {
        let (code, list) = f.get(&format!("{MCS}/{version}")).await;
        assert_eq!(code, 200);
        assert_eq!(
            names(&list),
            [
                "serviceexports",
                "serviceexports/status",
                "serviceimports",
                "serviceimports/status"
            ]
        );
        let r = &list["resources"];
        assert_eq!(r[0]["kind"], "ServiceExport");
        assert_eq!(r[0]["namespaced"], true);
        assert_eq!(r[0]["shortNames"], json!(["svcex", "svcexport"]));
        assert_eq!(r[2]["shortNames"], json!(["svcim", "svcimport"]));
        assert!(r[0].get("categories").is_none());
        assert_eq!(r[1]["verbs"], json!(["get", "patch", "update"]));

        let (code, list) = f.get(&format!("{ABOUT}/{version}")).await;
        assert_eq!(code, 200);
        assert_eq!(
            names(&list),
            ["clusterproperties", "clusterproperties/status"]
        );
        let r = &list["resources"][0];
        assert_eq!(
            (&r["kind"], &r["namespaced"]),
            (&json!("ClusterProperty"), &json!(false))
        );
        assert_eq!(r["categories"], json!(["multicluster"]));
        assert_eq!(r["singularName"], "clusterproperty");
    }
}

/// Uninstalled, the groups are gone, as on a cluster without the CRDs;
/// installed later, they serve.
#[tokio::test]
async fn uninstalled_crds_are_absent() {
    let bare = fixture(|s| {
        s.mcs_crds = false;
        s.about_crd = false;
    })
    .await;
    let (_, groups) = bare.get("/apis").await;
    let listed = groups.to_string();
    assert!(!listed.contains("multicluster.x-k8s.io") && !listed.contains("about.k8s.io"));
    assert!(listed.contains("multicluster.linkerd.io"), "{listed}");
    for path in [
        MCS.to_owned(),
        format!("{MCS}/v1beta1"),
        format!("{MCS}/v1beta1/namespaces/default/serviceimports"),
        format!("{ABOUT}/v1alpha1/clusterproperties"),
    ] {
        assert_eq!(bare.get(&path).await.0, 404, "{path}");
    }

    // Installed later, as `kubectl apply` of the CRDs would: served at once.
    bare.sim
        .cluster("east")
        .expect("configured")
        .install_crds("multicluster.x-k8s.io");
    let (_, groups) = bare.get("/apis").await;
    let listed = groups.to_string();
    assert!(listed.contains("multicluster.x-k8s.io"), "{listed}");
    assert!(!listed.contains("about.k8s.io"), "{listed}");
    let path = format!("{MCS}/v1beta1/namespaces/default/serviceexports");
    assert_eq!(bare.get(&path).await.0, 200, "{path}");
    assert_eq!(
        bare.get(&format!("{ABOUT}/v1alpha1/clusterproperties"))
            .await
            .0,
        404
    );
}

fn export(version: &str) -> Value {
    json!({"apiVersion": format!("multicluster.x-k8s.io/{version}"), "kind": "ServiceExport",
           "metadata": {"name": "web"}, "spec": {"exportedLabels": {"team": "a"}},
           "status": {"conditions": [{"type": "Valid", "status": "True", "reason": "Exported",
                                      "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
}

#[tokio::test]
async fn serviceexport_versions_and_status_subresource() {
    let f = fixture(|_| {}).await;
    let exports = |v: &str| format!("{MCS}/{v}/namespaces/default/serviceexports");
    let (code, created) = f.post(&exports("v1alpha1"), &export("v1alpha1")).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["apiVersion"], "multicluster.x-k8s.io/v1alpha1");
    assert!(
        created.get("status").is_none(),
        "create ignores status: {created}"
    );
    assert_eq!(created["metadata"]["generation"], 1);

    // Stored once, readable in either version.
    let (code, beta) = f.get(&format!("{}/web", exports("v1beta1"))).await;
    assert_eq!(code, 200);
    assert_eq!(beta["apiVersion"], "multicluster.x-k8s.io/v1beta1");
    assert_eq!(beta["spec"], created["spec"]);
    let (_, list) = f.get(&exports("v1beta1")).await;
    assert_eq!(list["kind"], "ServiceExportList");
    assert_eq!(
        list["items"][0]["apiVersion"],
        "multicluster.x-k8s.io/v1beta1"
    );

    // /status changes only status (a spec change in its body is ignored).
    let mut body = beta.clone();
    body["spec"]["exportedLabels"]["team"] = json!("b");
    body["status"] = export("v1beta1")["status"].clone();
    let (code, after) = f
        .put(&format!("{}/web/status", exports("v1beta1")), &body)
        .await;
    assert_eq!(code, 200, "{after}");
    assert_eq!(after["spec"]["exportedLabels"]["team"], "a");
    assert_eq!(after["status"]["conditions"][0]["type"], "Valid");
    assert_eq!(after["metadata"]["generation"], 1);

    // The main resource changes spec, never status.
    let mut body = after.clone();
    body["apiVersion"] = json!("multicluster.x-k8s.io/v1alpha1");
    body["spec"]["exportedLabels"]["team"] = json!("c");
    body["status"] = json!({});
    let (code, after) = f.put(&format!("{}/web", exports("v1alpha1")), &body).await;
    assert_eq!(code, 200, "{after}");
    assert_eq!(after["spec"]["exportedLabels"]["team"], "c");
    assert_eq!(after["status"]["conditions"][0]["reason"], "Exported");
    assert_eq!(after["metadata"]["generation"], 2);

    // A bad condition through /status is the schema's 422.
    let mut bad = after.clone();
    bad["status"]["conditions"][0]["status"] = json!("Maybe");
    let (code, status) = f
        .put(&format!("{}/web/status", exports("v1alpha1")), &bad)
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "status.conditions[0].status"
    );
}

/// Merge and JSON patch work; strategic merge patch is 415 as for every CRD; delete works.
#[tokio::test]
async fn serviceexport_patch_types_and_delete() {
    let f = fixture(|_| {}).await;
    let exports = |v: &str| format!("{MCS}/{v}/namespaces/default/serviceexports");
    let (code, created) = f.post(&exports("v1beta1"), &export("v1beta1")).await;
    assert_eq!(code, 201, "{created}");
    let path = format!("{}/web", exports("v1beta1"));
    let merge = json!({"spec": {"exportedAnnotations": {"note": "x"}}});
    let (code, patched) = f
        .call("PATCH", &path, "application/merge-patch+json", Some(&merge))
        .await;
    assert_eq!(
        (code, &patched["spec"]["exportedAnnotations"]["note"]),
        (200, &json!("x"))
    );
    let ops = json!([{"op": "remove", "path": "/spec/exportedAnnotations"}]);
    let (code, patched) = f
        .call("PATCH", &path, "application/json-patch+json", Some(&ops))
        .await;
    assert_eq!(code, 200);
    assert!(patched["spec"].get("exportedAnnotations").is_none());
    let (code, _) = f
        .call(
            "PATCH",
            &path,
            "application/strategic-merge-patch+json",
            Some(&merge),
        )
        .await;
    assert_eq!(code, 415);

    let (code, _) = f.call("DELETE", &path, "application/json", None).await;
    assert_eq!(code, 200);
    assert_eq!(f.get(&path).await.0, 404);
}

#[tokio::test]
async fn serviceimport_keeps_v1beta1_fields_in_v1alpha1_and_applies_status() {
    let f = fixture(|_| {}).await;
    let imports = |v: &str| format!("{MCS}/{v}/namespaces/default/serviceimports");
    let import = json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "web"},
        "spec": {"type": "ClusterSetIP", "ips": ["10.0.0.1"], "ipFamilies": ["IPv4"],
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
                 "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                 "trafficDistribution": "PreferClose"}});
    let (code, created) = f
        .apply(&format!("{}/web", imports("v1beta1")), &import, "mcs")
        .await;
    assert_eq!(code, 201, "{created}");
    let (_, alpha) = f.get(&format!("{}/web", imports("v1alpha1"))).await;
    assert_eq!(alpha["apiVersion"], "multicluster.x-k8s.io/v1alpha1");
    assert_eq!(alpha["spec"], import["spec"]);

    // Two managers apply their own cluster to status.clusters (a map keyed by cluster).
    for cluster in ["east", "west"] {
        let body = json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
                          "metadata": {"name": "web"}, "status": {"clusters": [{"cluster": cluster}]}});
        let status = format!("{}/web/status", imports("v1beta1"));
        let (code, out) = f.apply(&status, &body, cluster).await;
        assert_eq!(code, 200, "{out}");
    }
    let (_, read) = f.get(&format!("{}/web", imports("v1beta1"))).await;
    assert_eq!(
        read["status"]["clusters"],
        json!([{"cluster": "east"}, {"cluster": "west"}])
    );
    assert_eq!(read["spec"], import["spec"]);

    // A schema break is a 422 naming the qualified resource.
    let mut bad = import.clone();
    bad["metadata"]["name"] = json!("bad");
    bad["spec"]["type"] = json!("NodePort");
    let (code, status) = f.post(&imports("v1beta1"), &bad).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(
        status["message"],
        "ServiceImport.multicluster.x-k8s.io \"bad\" is invalid: spec.type: Unsupported value: \"NodePort\": supported values: \"ClusterSetIP\", \"Headless\""
    );
}

#[tokio::test]
async fn clusterproperty_is_cluster_scoped() {
    let f = fixture(|_| {}).await;
    let property = json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                          "metadata": {"name": "cluster.clusterset.k8s.io"},
                          "spec": {"value": "east"}, "status": {"anything": 1}});
    let (code, created) = f
        .post(&format!("{ABOUT}/v1alpha1/clusterproperties"), &property)
        .await;
    assert_eq!(code, 201, "{created}");
    assert!(created["metadata"].get("namespace").is_none());
    assert!(created.get("status").is_none());
    let (code, beta) = f
        .get(&format!(
            "{ABOUT}/v1beta1/clusterproperties/cluster.clusterset.k8s.io"
        ))
        .await;
    assert_eq!(code, 200);
    assert_eq!(beta["apiVersion"], "about.k8s.io/v1beta1");
    assert_eq!(beta["spec"]["value"], "east");
    // No namespaced URL for a cluster-scoped kind.
    let namespaced =
        format!("{ABOUT}/v1beta1/namespaces/default/clusterproperties/cluster.clusterset.k8s.io");
    assert_eq!(f.get(&namespaced).await.0, 404);

    let mut empty = property.clone();
    empty["metadata"]["name"] = json!("clusterset.k8s.io");
    empty["spec"]["value"] = json!("");
    let (code, status) = f
        .post(&format!("{ABOUT}/v1alpha1/clusterproperties"), &empty)
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["details"]["causes"][0]["field"], "spec.value");
    let mut number = property.clone();
    number["spec"]["value"] = json!(7);
    let (code, status) = f
        .post(&format!("{ABOUT}/v1alpha1/clusterproperties"), &number)
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldValueTypeInvalid"
    );
}

const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices";

fn slice(name: &str, ty: &str, address: &str) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "web"}},
           "addressType": ty, "endpoints": [{"addresses": [address]}],
           "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]})
}

/// The 422 Status kube writes for one refused endpoint address.
fn assert_refused(code: u16, status: &Value, name: &str, address: &str, why: &str) {
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid", "{status}");
    assert_eq!(
        status["message"],
        format!(
            "EndpointSlice.discovery.k8s.io \"{name}\" is invalid: endpoints[0].addresses[0]: Invalid value: \"{address}\": {why}"
        ),
        "{status}"
    );
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "FieldValueInvalid", "field": "endpoints[0].addresses[0]",
                "message": format!("Invalid value: \"{address}\": {why}")}]),
        "{status}"
    );
}

/// Create, update, merge patch and server-side apply all refuse a loopback, link-local or
/// unspecified endpoint address with kube's 422, and leave the stored slice as it was.
#[tokio::test]
async fn endpointslice_addresses_kube_refuses_on_every_write() {
    let f = fixture(|_| {}).await;
    let loopback = "may not be in the loopback range (127.0.0.0/8, ::1/128)";
    let link_local = "may not be in the link-local range (169.254.0.0/16, fe80::/10)";

    let (code, status) = f.post(SLICES, &slice("web-a", "IPv4", "127.0.0.1")).await;
    assert_refused(code, &status, "web-a", "127.0.0.1", loopback);
    assert_eq!(f.get(&format!("{SLICES}/web-a")).await.0, 404);

    let (code, good) = f.post(SLICES, &slice("web-b", "IPv4", "192.0.2.1")).await;
    assert_eq!(code, 201, "{good}");
    let path = format!("{SLICES}/web-b");

    let mut body = good.clone();
    body["endpoints"][0]["addresses"] = json!(["169.254.169.254"]);
    let (code, status) = f.put(&path, &body).await;
    assert_refused(code, &status, "web-b", "169.254.169.254", link_local);

    let merge = json!({"endpoints": [{"addresses": ["0.0.0.0"]}]});
    let (code, status) = f
        .call("PATCH", &path, "application/merge-patch+json", Some(&merge))
        .await;
    assert_refused(
        code,
        &status,
        "web-b",
        "0.0.0.0",
        "may not be unspecified (0.0.0.0)",
    );

    // Forced: another manager owns the endpoints, and a conflict (409) comes before validation.
    let (code, status) = f
        .call(
            "PATCH",
            &format!("{path}?fieldManager=tester&force=true"),
            "application/apply-patch+yaml",
            Some(&slice("web-b", "IPv4", "224.0.0.251")),
        )
        .await;
    assert_refused(
        code,
        &status,
        "web-b",
        "224.0.0.251",
        "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
    );

    let (code, stored) = f.get(&path).await;
    assert_eq!(code, 200);
    assert_eq!(stored["endpoints"], json!([{"addresses": ["192.0.2.1"]}]));
    assert_eq!(
        stored["metadata"]["resourceVersion"],
        good["metadata"]["resourceVersion"]
    );

    // An apply that would create an IPv6 slice is refused the same way; a private one is not.
    let six = format!("{SLICES}/web-c");
    let (code, status) = f
        .apply(&six, &slice("web-c", "IPv6", "fe80::1"), "tester")
        .await;
    assert_refused(code, &status, "web-c", "fe80::1", link_local);
    assert_eq!(f.get(&six).await.0, 404);
    let (code, created) = f
        .apply(&six, &slice("web-c", "IPv6", "fd00::1"), "tester")
        .await;
    assert_eq!(code, 201, "{created}");
}
