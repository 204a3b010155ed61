//! What the mirror reads from the local cluster: its own Services,
//! EndpointSlices and (with `--mcs`) ServiceImports (by our managed-by
//! label, on `kube::runtime::watcher`), every ServiceExport (with `--mcs`,
//! for their status conditions), and the clusters whose mirrors Linkerd's
//! own service mirror manages.
//!
//! Stands on [`crate::k8s::watch`] (pages of 500, bookmarks, relist on 410,
//! backoff on errors, objects that do not decode skipped), and owns what
//! the mirror adds: lists at the most recent version, so a relist is newer
//! than every write that finished before it, and each skipped object logged
//! with its name and counted in [`MirrorStats`]. It must not write anything.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;

use futures_util::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::core::{DeserializeGuard, PartialObjectMeta};
use kube::runtime::watcher::{self, ListSemantic};
use kube::{Api, Client, Resource, ResourceExt as _};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::stats::MirrorStats;
use super::{Kind, MANAGED_BY, MANAGED_BY_LABEL};
use crate::k8s::watch::{self as k8s_watch, Delivery};
use crate::vocab::linkerd::{LABEL_CLUSTER_NAME, LABEL_MIRRORED};

/// One watch event of one of our kinds, the object as JSON.
pub type Change = (Kind, watcher::Event<Value>);

fn ours() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// The object as JSON, or `None` when even our own typed object does not
/// encode (counted with the undecodable ones).
fn encoded<K: Serialize>(kind: Kind, k: &K, stats: &MirrorStats) -> Option<Value> {
    serde_json::to_value(k)
        .inspect_err(|e| skipped(kind, "?", &e.to_string(), stats))
        .ok()
}

fn skipped(kind: Kind, object: &str, error: &str, stats: &MirrorStats) {
    let total = stats.skipped_undecodable();
    warn!(kind = kind.as_str(), object, %error, skipped_total = total, "mirror cache: object skipped");
}

/// A delivery of one of our watches as a [`Change`], if it carries one.
fn change<K: Serialize>(kind: Kind, d: Delivery<K>, stats: &MirrorStats) -> Option<Change> {
    let event = match d {
        Delivery::Event(e) => match e {
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitDone => watcher::Event::InitDone,
            watcher::Event::InitApply(k) => watcher::Event::InitApply(encoded(kind, &k, stats)?),
            watcher::Event::Apply(k) => watcher::Event::Apply(encoded(kind, &k, stats)?),
            watcher::Event::Delete(k) => watcher::Event::Delete(encoded(kind, &k, stats)?),
        },
        Delivery::Undecodable { object, error } => {
            skipped(kind, &object, &error, stats);
            return None;
        }
        // The watcher retries (relisting if the version expired) after a
        // backoff; the resync repairs anything missed meanwhile.
        Delivery::Failed(error) => {
            debug!(kind = kind.as_str(), %error, "mirror cache watch failed; retrying");
            return None;
        }
    };
    Some((kind, event))
}

async fn forward<K>(
    api: Api<DeserializeGuard<K>>,
    kind: Kind,
    (tx, stats): (mpsc::Sender<Change>, Arc<MirrorStats>),
    stop: CancellationToken,
) where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned + Send + 'static,
{
    let config = k8s_watch::config(k8s_watch::PAGE)
        .labels(&ours())
        .list_semantic(ListSemantic::MostRecent);
    let deliveries = k8s_watch::guarded_watch(api, config);
    pump(deliveries, &tx, &stop, |d| change(kind, d, &stats)).await;
}

/// Sends what `convert` makes of each of `deliveries` to `tx` until `stop`,
/// the end of the stream, or nobody listening.
async fn pump<D, T>(
    deliveries: impl futures_util::Stream<Item = D>,
    tx: &mpsc::Sender<T>,
    stop: &CancellationToken,
    convert: impl Fn(D) -> Option<T>,
) {
    let mut deliveries = std::pin::pin!(deliveries);
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => return,
            next = deliveries.next() => next,
        };
        let Some(d) = next else { return };
        if let Some(t) = convert(d)
            && tx.send(t).await.is_err()
        {
            return;
        }
    }
}

/// Starts the watches of our Services and EndpointSlices, cluster-wide,
/// and of our ServiceImports when `imports` names their resource, sending
/// their events to `tx` until `stop`; objects that do not decode are
/// counted in `stats`.
pub fn spawn(
    client: &Client,
    imports: Option<&ApiResource>,
    tx: &mpsc::Sender<Change>,
    stop: &CancellationToken,
    stats: &Arc<MirrorStats>,
) {
    tokio::spawn(forward::<Service>(
        Api::all(client.clone()),
        Kind::Service,
        (tx.clone(), stats.clone()),
        stop.clone(),
    ));
    tokio::spawn(forward::<EndpointSlice>(
        Api::all(client.clone()),
        Kind::EndpointSlice,
        (tx.clone(), stats.clone()),
        stop.clone(),
    ));
    if let Some(ar) = imports {
        tokio::spawn(forward::<DynamicObject>(
            Api::all_with(client.clone(), ar),
            Kind::ServiceImport,
            (tx.clone(), stats.clone()),
            stop.clone(),
        ));
    }
}

/// One watch event of the local ServiceExports, the object as JSON.
pub type ExportChange = watcher::Event<Value>;

/// Starts the watch of every ServiceExport of the local cluster (resource
/// `ar`), sending its events to `tx` until `stop`. Read only for their
/// status conditions: nothing of theirs but `/status` is ever written.
pub fn spawn_exports(
    client: &Client,
    ar: &ApiResource,
    tx: mpsc::Sender<ExportChange>,
    stop: CancellationToken,
) {
    let api: Api<DeserializeGuard<DynamicObject>> = Api::all_with(client.clone(), ar);
    tokio::spawn(async move {
        let deliveries = k8s_watch::guarded_watch(api, k8s_watch::config(k8s_watch::PAGE));
        pump(deliveries, &tx, &stop, |d| match d {
            Delivery::Event(e) => as_json(e),
            _ => None,
        })
        .await;
    });
}

/// A ServiceExport event with the object as JSON (`None` if it does not
/// encode, which a decoded object always does).
fn as_json(e: watcher::Event<DynamicObject>) -> Option<ExportChange> {
    let json = |o: DynamicObject| serde_json::to_value(o).ok();
    Some(match e {
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(json(o)?),
        watcher::Event::Apply(o) => watcher::Event::Apply(json(o)?),
        watcher::Event::Delete(o) => watcher::Event::Delete(json(o)?),
    })
}

/// Clusters whose Links Linkerd's own service mirror manages: its Lease
/// `service-mirror-write-<link>` is held, or mirror Services of that cluster
/// exist without our label. Their `<svc>-<cluster>` objects are Linkerd's.
/// A list that fails counts as "none found" (looked at again next resync).
pub async fn linkerd_managed(client: &Client, link_namespace: Option<&str>) -> BTreeSet<Arc<str>> {
    let mut out = BTreeSet::new();
    // Only labels are read: a metadata list cannot fail on a bad spec.
    let services: Api<DeserializeGuard<PartialObjectMeta<Service>>> = Api::all(client.clone());
    let foreign = ListParams::default()
        .labels(&format!(
            "{LABEL_MIRRORED}=true,{MANAGED_BY_LABEL}!={MANAGED_BY}"
        ))
        .limit(k8s_watch::PAGE);
    match k8s_watch::guarded_list(&services, &foreign).await {
        Ok((items, _)) => out.extend(
            items
                .iter()
                .filter_map(|m| m.labels().get(LABEL_CLUSTER_NAME))
                .map(|c| Arc::from(c.as_str())),
        ),
        Err(e) => debug!(error = %e, "listing Linkerd's mirror Services failed"),
    }
    if let Some(ns) = link_namespace {
        let leases: Api<DeserializeGuard<Lease>> = Api::namespaced(client.clone(), ns);
        let all = ListParams::default().limit(k8s_watch::PAGE);
        match k8s_watch::guarded_list(&leases, &all).await {
            Ok((items, _)) => out.extend(held_links(items.into_iter())),
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
