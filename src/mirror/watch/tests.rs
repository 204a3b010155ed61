//! The watch of our Services against a scripted API server: the LIST it
//! starts with (our label, pages of 500, and no `resourceVersion=0`: the
//! most recent state, not the API server's cache), and one object that
//! does not decode skipped and counted while the rest of the list goes
//! through.

use super::*;
use crate::mirror::mock::{self, Step};
use serde_json::{Value, json};

fn svc(name: &str, ports: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "prod", "uid": format!("uid-{name}"),
                        "resourceVersion": "5",
                        "labels": {"app.kubernetes.io/managed-by": "clusterset-dns"}},
           "spec": {"ports": ports}})
}

#[tokio::test]
async fn an_undecodable_object_is_skipped_and_counted_and_the_list_goes_on() {
    let (client, handle) = mock::client();
    let list = json!({"apiVersion": "v1", "kind": "ServiceList",
                      "metadata": {"resourceVersion": "9"},
                      "items": [svc("good", json!([{"port": 80}])),
                                svc("bad", json!("not a list"))]});
    let server = mock::serve(
        handle,
        vec![
            Step::new("GET", "/api/v1/services")
                .query(&[
                    (
                        "labelSelector",
                        "app.kubernetes.io%2Fmanaged-by%3Dclusterset-dns",
                    ),
                    ("limit", "500"),
                ])
                .ok(list),
        ],
    );
    let (tx, mut rx) = mpsc::channel(16);
    let stop = CancellationToken::new();
    let stats = Arc::new(MirrorStats::default());
    let task = tokio::spawn(forward::<Service>(
        Api::all(client),
        Kind::Service,
        |s| Ok(Object::Service(Box::new(s))),
        (tx, stats.clone()),
        stop.clone(),
    ));
    let mut got = Vec::new();
    for _ in 0..3 {
        let (kind, event) = rx.recv().await.expect("an event");
        assert_eq!(kind, Kind::Service);
        got.push(match event {
            watcher::Event::Init => "init".to_owned(),
            watcher::Event::InitApply(o) => {
                format!("item {:?}", o.meta().name.as_deref().unwrap_or_default())
            }
            watcher::Event::InitDone => "done".to_owned(),
            other => format!("unexpected {other:?}"),
        });
    }
    stop.cancel();
    mock::finished(server).await;
    let _ = task.await;
    assert_eq!(got, ["init", "item \"good\"", "done"]);
    assert_eq!(stats.undecodable(), 1, "the bad one is counted");
}

#[tokio::test]
async fn linkerd_managed_clusters_come_from_foreign_mirrors_and_held_leases() {
    let (client, handle) = mock::client();
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let lease = |link: &str, holder: &str, renew: &str| {
        json!({"metadata": {"name": format!("service-mirror-write-{link}"), "namespace": "lm"},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renew}})
    };
    let server = mock::serve(
        handle,
        vec![
            Step::new("GET", "/api/v1/services")
                .query(&[
                    (
                        "labelSelector",
                        "mirror.linkerd.io%2Fmirrored-service%3Dtrue%2Capp.kubernetes.io%2Fmanaged-by%21%3Dclusterset-dns",
                    ),
                    ("limit", "500"),
                ])
                .ok(json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                           "metadata": {},
                           "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                                      "metadata": {"name": "web-east", "namespace": "prod",
                                                   "labels": {"mirror.linkerd.io/cluster-name": "east"}}}]})),
            Step::new("GET", "/apis/coordination.k8s.io/v1/namespaces/lm/leases")
                .query(&[("limit", "500")])
                .ok(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
                           "metadata": {},
                           "items": [lease("north", "linkerd-sm", &now),
                                     lease("south", "", &now),
                                     lease("west", "linkerd-sm", "2001-01-01T00:00:00Z")]})),
        ],
    );
    let got = linkerd_managed(&client, Some("lm")).await;
    mock::finished(server).await;
    let got: Vec<&str> = got.iter().map(|c| &**c).collect();
    // east by its mirror Services; north by its held, fresh Lease; south's
    // Lease has no holder, west's was last renewed long ago.
    assert_eq!(got, ["east", "north"]);
}
