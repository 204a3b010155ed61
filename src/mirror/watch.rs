//! What the mirror reads from the local cluster: its own Services and
//! EndpointSlices (by our managed-by label, on `kube::runtime::watcher`),
//! and the clusters whose mirrors Linkerd's own service mirror manages.
//!
//! Owns the watch settings (kube's: pages of 500, bookmarks, relist on 410,
//! backoff on errors; lists at the most recent version, so a relist is newer
//! than every write that finished before it) and the skipping of objects
//! that do not decode: each is logged with its name and counted, the rest
//! of the list goes on. It must not write anything.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use kube::core::{DeserializeGuard, ObjectList, PartialObjectMeta};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, ListSemantic};
use kube::{Api, Client, Resource, ResourceExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{Kind, MANAGED_BY, MANAGED_BY_LABEL};
use crate::vocab::linkerd::{LABEL_CLUSTER_NAME, LABEL_MIRRORED};

/// One watch event of one of our kinds, the object as JSON.
pub type Change = (Kind, watcher::Event<Value>);

/// Objects our watches skipped because they did not decode.
static UNDECODABLE: AtomicU64 = AtomicU64::new(0);

/// How many objects the mirror's watches have skipped as undecodable since
/// the process started.
pub fn undecodable() -> u64 {
    UNDECODABLE.load(Ordering::Relaxed)
}

/// Page size of the lists we make ourselves (as kube's watcher pages).
const PAGE: u32 = 500;

fn ours() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// The object as JSON, or `None` (logged and counted) if it did not decode.
fn checked<K: Serialize>(kind: Kind, guard: DeserializeGuard<K>) -> Option<Value> {
    match guard.0 {
        Ok(k) => match serde_json::to_value(&k) {
            Ok(v) => Some(v),
            Err(e) => {
                skipped(kind, None, &e.to_string());
                None
            }
        },
        Err(invalid) => {
            let name = format!(
                "{}/{}",
                invalid.metadata.namespace.as_deref().unwrap_or(""),
                invalid.metadata.name.as_deref().unwrap_or("?")
            );
            skipped(kind, Some(&name), &invalid.error);
            None
        }
    }
}

fn skipped(kind: Kind, name: Option<&str>, error: &str) {
    let total = UNDECODABLE.fetch_add(1, Ordering::Relaxed) + 1;
    warn!(kind = kind.as_str(), object = name.unwrap_or("?"), %error, skipped_total = total, "mirror cache: object skipped");
}

fn convert<K: Serialize>(kind: Kind, e: watcher::Event<DeserializeGuard<K>>) -> Option<Change> {
    let event = match e {
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
        watcher::Event::InitApply(g) => watcher::Event::InitApply(checked(kind, g)?),
        watcher::Event::Apply(g) => watcher::Event::Apply(checked(kind, g)?),
        watcher::Event::Delete(g) => watcher::Event::Delete(checked(kind, g)?),
    };
    Some((kind, event))
}

async fn forward<K>(client: Client, kind: Kind, tx: mpsc::Sender<Change>, stop: CancellationToken)
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + 'static,
{
    let api: Api<DeserializeGuard<K>> = Api::all(client);
    let config = watcher::Config::default()
        .labels(&ours())
        .list_semantic(ListSemantic::MostRecent);
    let events = watcher::watcher(api, config).default_backoff();
    let mut events = std::pin::pin!(events);
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => return,
            next = events.next() => next,
        };
        match next {
            None => return,
            Some(Ok(e)) => {
                if let Some(change) = convert(kind, e)
                    && tx.send(change).await.is_err()
                {
                    return;
                }
            }
            // kube retries (relisting if the version expired) after a backoff.
            Some(Err(e)) => {
                debug!(kind = kind.as_str(), error = %e, "mirror cache watch failed; retrying");
            }
        }
    }
}

/// Starts the watches of our Services and EndpointSlices, cluster-wide,
/// sending their events to `tx` until `stop`.
pub fn spawn(client: &Client, tx: &mpsc::Sender<Change>, stop: &CancellationToken) {
    tokio::spawn(forward::<Service>(
        client.clone(),
        Kind::Service,
        tx.clone(),
        stop.clone(),
    ));
    tokio::spawn(forward::<EndpointSlice>(
        client.clone(),
        Kind::EndpointSlice,
        tx.clone(),
        stop.clone(),
    ));
}

/// Every page of a list.
async fn list_all<K>(api: &Api<K>, params: ListParams) -> Result<Vec<K>, kube::Error>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    let mut params = params.limit(PAGE);
    let mut out = Vec::new();
    loop {
        let page: ObjectList<K> = api.list(&params).await?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => params = params.continue_token(&next),
            None => return Ok(out),
        }
    }
}

/// Clusters whose Links Linkerd's own service mirror manages: its Lease
/// `service-mirror-write-<link>` is held, or mirror Services of that cluster
/// exist without our label. Their `<svc>-<cluster>` objects are Linkerd's.
/// A list that fails counts as "none found" (looked at again next resync).
pub async fn linkerd_managed(client: &Client, link_namespace: Option<&str>) -> BTreeSet<Arc<str>> {
    let mut out = BTreeSet::new();
    // Only labels are read: a metadata list cannot fail on a bad spec.
    let services: Api<PartialObjectMeta<Service>> = Api::all(client.clone());
    let foreign = ListParams::default().labels(&format!(
        "{LABEL_MIRRORED}=true,{MANAGED_BY_LABEL}!={MANAGED_BY}"
    ));
    match list_all(&services, foreign).await {
        Ok(items) => out.extend(
            items
                .iter()
                .filter_map(|m| m.labels().get(LABEL_CLUSTER_NAME))
                .map(|c| Arc::from(c.as_str())),
        ),
        Err(e) => debug!(error = %e, "listing Linkerd's mirror Services failed"),
    }
    if let Some(ns) = link_namespace {
        let leases: Api<DeserializeGuard<Lease>> = Api::namespaced(client.clone(), ns);
        match list_all(&leases, ListParams::default()).await {
            Ok(items) => out.extend(held_links(items.into_iter().filter_map(|g| g.0.ok()))),
            Err(e) => debug!(error = %e, "listing Linkerd's Leases failed"),
        }
    }
    out
}

/// Links whose `service-mirror-write-<link>` Lease has a holder that
/// renewed it within its duration.
fn held_links(leases: impl Iterator<Item = Lease>) -> Vec<Arc<str>> {
    let now = k8s_openapi::jiff::Timestamp::now();
    leases
        .filter_map(|l| {
            let link = l
                .metadata
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix("service-mirror-write-"))
                .map(Arc::from)?;
            let spec = l.spec.unwrap_or_default();
            let held = spec.holder_identity.is_some_and(|h| !h.is_empty());
            let fresh = spec.renew_time.is_some_and(|t| {
                let age = now.as_second() - t.0.as_second();
                age <= i64::from(spec.lease_duration_seconds.unwrap_or(15))
            });
            (held && fresh).then_some(link)
        })
        .collect()
}

#[cfg(test)]
mod tests;
