use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, WatchParams};
use kube::client::{Body, ClientBuilder};
use kube::{Api, Client};

use super::*;

const LIST: &[u8] =
    br#"{"apiVersion":"v1","kind":"ConfigMapList","metadata":{"resourceVersion":"1"},"items":[]}"#;

/// An API server that counts the requests it holds at once, answers each
/// after `delay` with `status`.
#[derive(Clone, Default)]
struct Mock {
    now: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
    seen: Arc<AtomicUsize>,
    status: u16,
    delay: Duration,
}

impl Service<Request<Body>> for Mock {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<Body>) -> Self::Future {
        let m = self.clone();
        Box::pin(async move {
            let n = m.now.fetch_add(1, Ordering::SeqCst) + 1;
            m.max.fetch_max(n, Ordering::SeqCst);
            m.seen.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(m.delay).await;
            m.now.fetch_sub(1, Ordering::SeqCst);
            let body = if m.status == 200 {
                LIST.to_vec()
            } else {
                br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"boom","reason":"InternalError","code":500}"#.to_vec()
            };
            Ok(Response::builder()
                .status(m.status)
                .header("content-type", "application/json")
                .body(Body::from(body))
                .expect("response"))
        })
    }
}

fn client(mock: &Mock, max: usize) -> (Client, Arc<ApiStats>) {
    let layer = ApiLayer::new(max);
    let client = ClientBuilder::new(mock.clone(), "default")
        .with_layer(&layer)
        .build();
    (client, layer.stats())
}

#[tokio::test]
async fn a_burst_of_lists_never_has_more_than_the_bound_in_flight() {
    let mock = Mock {
        status: 200,
        delay: Duration::from_millis(20),
        ..Mock::default()
    };
    let (client, stats) = client(&mock, 4);
    // As a selector change on a big cluster does: one LIST per service.
    let lists = (0..40).map(|i| {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("ns{i}"));
        async move { api.list(&ListParams::default()).await }
    });
    let results = futures_util::future::join_all(lists).await;
    assert!(results.iter().all(Result::is_ok), "every list answered");
    assert_eq!(
        mock.seen.load(Ordering::SeqCst),
        40,
        "every list reached the server"
    );
    assert_eq!(
        mock.max.load(Ordering::SeqCst),
        4,
        "at most the bound at once, and the bound was used"
    );
    assert_eq!(stats.in_flight(), 0, "every permit came back");
    assert!(stats.last_answered().is_some());
}

#[tokio::test]
async fn a_watch_gives_its_permit_back_with_the_headers() {
    let mock = Mock {
        status: 200,
        delay: Duration::ZERO,
        ..Mock::default()
    };
    let (client, stats) = client(&mock, 1);
    let api: Api<ConfigMap> = Api::all(client);
    let before = Instant::now();
    // The stream is held, unread: its body is open.
    let _stream = api
        .watch(&WatchParams::default(), "1")
        .await
        .expect("watch");
    assert!(stats.watch_accepted_since(api.resource_url(), before));
    assert!(!stats.watch_accepted_since("/api/v1/secrets", before));
    // With a bound of one, a list still gets through.
    tokio::time::timeout(Duration::from_secs(5), api.list(&ListParams::default()))
        .await
        .expect("not blocked by the open watch")
        .expect("list");
}

#[tokio::test]
async fn an_error_is_not_an_answer() {
    let mock = Mock {
        status: 500,
        delay: Duration::ZERO,
        ..Mock::default()
    };
    let (client, stats) = client(&mock, 2);
    let api: Api<ConfigMap> = Api::all(client);
    assert!(api.list(&ListParams::default()).await.is_err());
    assert_eq!(mock.seen.load(Ordering::SeqCst), 1);
    assert_eq!(stats.last_answered(), None);
    assert_eq!(stats.in_flight(), 0);
}

/// A partition holds every permit with lists that never answer; the
/// heartbeat, which can tell the partition healed, still goes out.
#[tokio::test]
async fn the_heartbeat_takes_no_permit() {
    let hung = Mock {
        status: 200,
        delay: Duration::from_secs(3600),
        ..Mock::default()
    };
    let (client, stats) = client(&hung, 2);
    let lists: Vec<_> = (0..2)
        .map(|i| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("ns{i}"));
            tokio::spawn(async move { api.list(&ListParams::default()).await })
        })
        .collect();
    // Bounded wait for both lists to reach the server and hold the bound.
    for _ in 0..200 {
        if hung.now.load(Ordering::SeqCst) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(stats.in_flight(), 2, "the hung lists hold the bound");
    // A third list waits for a permit and never reaches the server...
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "ns3");
    let params = ListParams::default();
    let third = tokio::time::timeout(Duration::from_millis(200), api.list(&params));
    assert!(third.await.is_err(), "a list past the bound waits");
    assert_eq!(hung.seen.load(Ordering::SeqCst), 2);
    // ...while GET /version reaches it at once.
    let version = tokio::time::timeout(Duration::from_millis(200), client.apiserver_version());
    let _ = version.await;
    assert_eq!(
        hung.seen.load(Ordering::SeqCst),
        3,
        "the heartbeat reached the server past a full bound"
    );
    for l in lists {
        l.abort();
    }
}
