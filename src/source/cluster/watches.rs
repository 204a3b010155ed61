//! The watch set of one cluster task and its targeted lists: each watch
//! pumps its deliveries into the task's queue, dated when seen; each list
//! retries until it succeeds and sends what it found.
//!
//! Owns which API each watch and list asks (selectors, field selectors,
//! pages) and the rule that both stop with the task. It must not interpret
//! what they deliver ([`crate::source::state`] does), nor judge health from
//! their failures (the runner and [`super::health`] do); retries and
//! relists of the watches are kube-runtime's.

use std::collections::HashMap;
use std::time::Instant;

use futures_util::StreamExt as _;
use kube::Api;
use kube::api::{ApiResource, ListParams};
use kube::core::DeserializeGuard;
use kube::runtime::watcher::{self, Event as WatchEvent};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::Msg;
use crate::k8s::client::BoundedClient;
use crate::k8s::retry::retry_until;
use crate::k8s::watch::{Delivery, PAGE, SLICE_PAGE, config, guarded_list, guarded_watch};
use crate::model::objects::ObjectKey;
use crate::source::state::{Object, Watch};
use crate::vocab::linkerd::{GATEWAY_NAME, GATEWAY_NAMESPACE, LABEL_SERVICE_NAME};

/// `d` with its objects wrapped as [`Object`]s.
fn lift<K>(d: Delivery<K>, wrap: fn(K) -> Object) -> Delivery<Object> {
    match d {
        Delivery::Event(e) => Delivery::Event(match e {
            WatchEvent::Init => WatchEvent::Init,
            WatchEvent::InitApply(k) => WatchEvent::InitApply(wrap(k)),
            WatchEvent::Apply(k) => WatchEvent::Apply(wrap(k)),
            WatchEvent::Delete(k) => WatchEvent::Delete(wrap(k)),
            WatchEvent::InitDone => WatchEvent::InitDone,
        }),
        Delivery::Undecodable { object, error } => Delivery::Undecodable { object, error },
        Delivery::Failed(e) => Delivery::Failed(e),
    }
}

/// The cluster's watches and lists: where they send, and what stops them.
pub(super) struct Watches {
    /// The cluster's client.
    pub(super) client: BoundedClient,
    /// The task's queue.
    tx: mpsc::Sender<Msg>,
    /// Stops every watch and list.
    token: CancellationToken,
    /// Each watch's collection path, to ask the client's layer whether the
    /// API server accepted it again.
    paths: HashMap<Watch, String>,
}

impl Watches {
    /// The watches of `client`'s cluster, sending to `tx` until `token`
    /// fires.
    pub(super) fn new(
        client: BoundedClient,
        tx: mpsc::Sender<Msg>,
        token: CancellationToken,
    ) -> Self {
        Self {
            client,
            tx,
            token,
            paths: HashMap::new(),
        }
    }

    /// Whether the API server accepted watch `w` again since `since` (its
    /// failure), as the client's layer recorded it.
    pub(super) fn accepted_since(&self, w: &Watch, since: Instant) -> bool {
        self.paths
            .get(w)
            .is_some_and(|p| self.client.stats.watch_accepted_since(p, since))
    }

    /// Starts watch `w` of `api`, pumping its deliveries into the task's
    /// queue until the task ends.
    fn spawn<K>(
        &mut self,
        w: Watch,
        api: Api<DeserializeGuard<K>>,
        config: watcher::Config,
        wrap: fn(K) -> Object,
    ) where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        self.paths.insert(w, api.resource_url().to_owned());
        let tx = self.tx.clone();
        let token = self.token.clone();
        tokio::spawn(async move {
            let stream = guarded_watch(api, config);
            let mut stream = std::pin::pin!(stream);
            loop {
                let next = tokio::select! {
                    d = stream.next() => d,
                    () = token.cancelled() => return,
                };
                let Some(d) = next else { return };
                let seen = Instant::now();
                if tx.send(Msg::Watch(w, lift(d, wrap), seen)).await.is_err() {
                    return;
                }
            }
        });
    }

    /// Starts Service watch `n`, of the Services `selector` selects.
    pub(super) fn services(&mut self, n: usize, selector: &str) {
        let api = Api::all(self.client.client.clone());
        // An empty selector is the every-Service watch (`--mcs`).
        let config = match selector {
            "" => config(PAGE),
            s => config(PAGE).labels(s),
        };
        self.spawn(Watch::Services(n), api, config, Object::service);
    }

    /// Watch `w` of the MCS or About resource `ar`, in every namespace.
    pub(super) fn dynamic(&mut self, w: Watch, ar: &ApiResource, config: watcher::Config) {
        let api = Api::all_with(self.client.client.clone(), ar);
        self.spawn(w, api, config, Object::dynamic);
    }

    /// Lists one Service in the background (`--mcs`: its ServiceExport
    /// came after the every-Service watch passed it).
    pub(super) fn list_service(&self, key: ObjectKey) {
        let api = Api::namespaced(self.client.client.clone(), &key.namespace);
        let params = ListParams::default().fields(&format!("metadata.name={}", key.name));
        let tx = self.tx.clone();
        let token = self.token.clone();
        tokio::spawn(async move {
            if let Some((items, bad)) = list_retrying(api, params, &key, token).await {
                let _ = tx.send(Msg::ListedService(key, items, bad)).await;
            }
        });
    }

    /// Starts the EndpointSlice watch: every slice that names its Service
    /// (the state keeps those of the Services it holds).
    pub(super) fn slices(&mut self) {
        let api = Api::all(self.client.client.clone());
        self.spawn(
            Watch::Slices,
            api,
            config(SLICE_PAGE).labels(LABEL_SERVICE_NAME),
            Object::slice,
        );
    }

    /// Starts the watch of the remote gateway Service, when no gateway is
    /// declared.
    pub(super) fn gateway(&mut self) {
        let api = Api::namespaced(self.client.client.clone(), GATEWAY_NAMESPACE);
        self.spawn(
            Watch::Gateway,
            api,
            config(PAGE).fields(&format!("metadata.name={GATEWAY_NAME}")),
            Object::service,
        );
    }

    /// Lists one service's slices in the background. The client's layer
    /// bounds how many such lists reach the API server at once.
    pub(super) fn list_slices(&self, key: ObjectKey) {
        let api = Api::namespaced(self.client.client.clone(), &key.namespace);
        let params = ListParams::default()
            .labels(&format!("{LABEL_SERVICE_NAME}={}", key.name))
            .limit(SLICE_PAGE);
        let tx = self.tx.clone();
        let token = self.token.clone();
        tokio::spawn(async move {
            if let Some((items, bad)) = list_retrying(api, params, &key, token).await {
                let _ = tx.send(Msg::Listed(key, items, bad)).await;
            }
        });
    }
}

/// Lists `api` under `params` (for service `key`), retrying until it
/// succeeds; `None` when cancelled.
async fn list_retrying<K>(
    api: Api<DeserializeGuard<K>>,
    params: ListParams,
    key: &ObjectKey,
    shutdown: CancellationToken,
) -> Option<(Vec<K>, Vec<(String, String)>)>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    retry_until(
        &shutdown,
        || guarded_list(&api, &params),
        |e, _| debug!(service = %key, error = %e, "targeted list failed; retrying"),
    )
    .await
}
