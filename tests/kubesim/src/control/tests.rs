//! The control endpoint's object routes: a POST creates or replaces, a DELETE deletes, each
//! through the API's validation and seen by an API watch as an API write would be; and none
//! of them is counted or audited. A plain-HTTP cluster and its control endpoint on
//! 127.0.0.1:0, spoken to with a minimal HTTP/1.1 client (one request per connection).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{Sim, SimConfig};

/// A one-cluster kubesim over plain HTTP with a control endpoint; the kubeconfig directory is
/// removed on drop.
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

async fn fixture() -> Fixture {
    let dir = std::env::temp_dir().join(format!("kubesim-control-{}", uuid::Uuid::new_v4()));
    let mut config = SimConfig::new(["east"], &dir);
    config.tls = false;
    config.control = Some("127.0.0.1:0".parse().expect("an address"));
    let sim = crate::start(config).await.expect("kubesim starts");
    Fixture { sim, dir }
}

/// Sends one request to `addr`; returns the status code and the JSON body (Null if not JSON).
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: kubesim\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
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

impl Fixture {
    fn control(&self) -> SocketAddr {
        self.sim.control_addr().expect("a control endpoint")
    }

    async fn post(&self, object: &Value) -> (u16, Value) {
        call(
            self.control(),
            "POST",
            "/clusters/east/objects",
            None,
            Some(object),
        )
        .await
    }

    async fn delete(&self, path: &str) -> (u16, Value) {
        let path = format!("/clusters/east/objects/{path}");
        call(self.control(), "DELETE", &path, None, None).await
    }

    /// GET through the API with the admin token.
    async fn get(&self, path: &str) -> (u16, Value) {
        let east = self.sim.cluster("east").expect("configured");
        call(east.addr, "GET", path, Some(&east.admin_token()), None).await
    }
}

fn config_map(color: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "web", "namespace": "default", "resourceVersion": "1"},
           "data": {"color": color}})
}

/// Reads a watch stream until it has shown `want` (substrings, in order) or 10 s passed.
async fn read_until(stream: &mut TcpStream, want: &[&str]) -> String {
    let mut seen = String::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            let found = want.iter().try_fold(0, |from, w| {
                seen[from..].find(w).map(|at| from + at + w.len())
            });
            if found.is_some() {
                return;
            }
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    seen
}

#[tokio::test]
async fn post_creates_then_replaces_and_delete_deletes_as_an_api_watch_sees_them() {
    let f = fixture().await;
    let east = f.sim.cluster("east").expect("configured");
    let mut watch = TcpStream::connect(east.addr).await.expect("connects");
    let request = format!(
        "GET /api/v1/namespaces/default/configmaps?watch=true&resourceVersion={} HTTP/1.1\r\nHost: kubesim\r\nAuthorization: Bearer {}\r\n\r\n",
        east.store().resource_version(),
        east.admin_token()
    );
    watch.write_all(request.as_bytes()).await.expect("sends");

    // The caller's resourceVersion is ignored: a create takes none, a replace is unconditional.
    let (code, created) = f.post(&config_map("red")).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        created["metadata"]["managedFields"][0]["manager"],
        "kubesim-control"
    );
    let (code, replaced) = f.post(&config_map("blue")).await;
    assert_eq!(code, 200, "{replaced}");
    assert_eq!(replaced["data"]["color"], "blue");
    assert_eq!(replaced["metadata"]["uid"], created["metadata"]["uid"]);
    let (code, got) = f.get("/api/v1/namespaces/default/configmaps/web").await;
    assert_eq!((code, &got["data"]["color"]), (200, &json!("blue")));

    let (code, gone) = f.delete("v1/configmaps/default/web").await;
    assert_eq!(code, 200, "{gone}");
    let seen = read_until(
        &mut watch,
        &[
            r#""type":"ADDED""#,
            r#""type":"MODIFIED""#,
            r#""type":"DELETED""#,
        ],
    )
    .await;
    // The chunked body's event lines, as (type, color).
    let events: Vec<Value> = seen
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .map(|e| json!([e["type"], e["object"]["data"]["color"]]))
        .collect();
    assert_eq!(
        events,
        [
            json!(["ADDED", "red"]),
            json!(["MODIFIED", "blue"]),
            json!(["DELETED", "blue"])
        ],
        "{seen}"
    );
    let (code, _) = f.get("/api/v1/namespaces/default/configmaps/web").await;
    assert_eq!(code, 404);
    // Not API requests: none of the writes is counted.
    for verb in ["create", "update", "delete"] {
        assert_eq!(east.request_count(verb, "configmaps"), 0, "{verb}");
    }
}

#[tokio::test]
async fn a_service_is_defaulted_and_allocated_as_on_create() {
    let f = fixture().await;
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web"}, "spec": {"ports": [{"name": "http", "port": 80}]}});
    let (code, created) = f.post(&service).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["namespace"], "default");
    assert!(created["spec"]["clusterIP"].is_string(), "{created}");
    assert_eq!(created["spec"]["ports"][0]["protocol"], "TCP");
}

#[tokio::test]
async fn object_routes_validate_and_name_what_they_refuse() {
    let f = fixture().await;
    let bad_name =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_A_Name"}});
    let (code, status) = f.post(&bad_name).await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (422, Some("Invalid")),
        "{status}"
    );
    let unknown = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    let (code, status) = f.post(&unknown).await;
    assert_eq!(code, 400, "{status}");
    let nameless = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
    assert_eq!(f.post(&nameless).await.0, 400);
    let (code, status) = f.delete("v1/ConfigMap/default/absent").await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (404, Some("NotFound")),
        "{status}"
    );
    assert_eq!(
        f.delete("v1/ConfigMap/-/absent").await.0,
        400,
        "namespaced needs a namespace"
    );
    assert_eq!(
        f.delete("v1/ConfigMap/default").await.0,
        404,
        "too few segments"
    );
}

#[tokio::test]
async fn grouped_and_cluster_scoped_objects_and_status_go_through() {
    let f = fixture().await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
    assert_eq!(f.post(&ns).await.0, 201);
    let export = json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
        "metadata": {"name": "web", "namespace": "team"},
        "status": {"conditions": [{"type": "Valid", "status": "True", "reason": "Test",
            "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
    let (code, written) = f.post(&export).await;
    assert_eq!(code, 200, "the status write answers: {written}");
    assert_eq!(written["status"]["conditions"][0]["type"], "Valid");
    let (code, _) = f
        .get("/apis/multicluster.x-k8s.io/v1alpha1/namespaces/team/serviceexports/web")
        .await;
    assert_eq!(code, 200);
    let (code, body) = f
        .delete("multicluster.x-k8s.io/v1alpha1/serviceexports/team/web")
        .await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = f.delete("v1/Namespace/-/team").await;
    assert_eq!(code, 200, "{body}");
}
