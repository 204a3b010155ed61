//! What the mirror reads from the local cluster: its own Services,
//! EndpointSlices and (with `--mcs`) ServiceImports (by our managed-by
//! label, on `kube::runtime::watcher`), every ServiceExport (with `--mcs`,
//! for their status conditions), and the clusters whose mirrors Linkerd's
//! own service mirror manages.
//!
//! Stands on [`crate::k8s::watch`] (pages of 500, bookmarks, relist on 410,
//! backoff on errors, objects that do not decode skipped), and owns what
//! the mirror adds: lists at the most recent version, so a relist is newer
//! than every write that finished before it, every object handed on typed
//! ([`Object`]; ServiceImports and ServiceExports, watched at the version
//! the cluster serves, read as [`crate::k8s::crd`]'s types), and each
//! skipped object logged with its name and counted in [`MirrorStats`]. It
//! must not write anything.

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
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::stats::MirrorStats;
use super::{Kind, MANAGED_BY, MANAGED_BY_LABEL, Object};
use crate::k8s::crd::{self, ServiceExport, ServiceImport};
use crate::k8s::watch::{self as k8s_watch, Delivery};
use crate::vocab::linkerd::{LABEL_CLUSTER_NAME, LABEL_MIRRORED};

/// One watch event of one of our kinds.
pub(crate) type Change = (Kind, watcher::Event<Object>);

fn ours() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}

fn skipped(kind: Kind, object: &str, error: &str, stats: &MirrorStats) {
    let total = stats.skipped_undecodable();
    warn!(kind = kind.as_str(), object, %error, skipped_total = total, "mirror cache: object skipped");
}

/// `e` with its object converted by `f`; `None` when `f` gives none.
fn map_event<A, B>(
    e: watcher::Event<A>,
    f: impl FnOnce(A) -> Option<B>,
) -> Option<watcher::Event<B>> {
    Some(match e {
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
        watcher::Event::InitApply(k) => watcher::Event::InitApply(f(k)?),
        watcher::Event::Apply(k) => watcher::Event::Apply(f(k)?),
        watcher::Event::Delete(k) => watcher::Event::Delete(f(k)?),
    })
}

/// A delivery of one of our watches as a [`Change`], if it carries one;
/// `object` makes the watched object one of ours (`Err`: skipped, counted
/// with the undecodable ones).
fn change<K: Resource>(
    kind: Kind,
    d: Delivery<K>,
    object: impl FnOnce(K) -> Result<Object, String>,
    stats: &MirrorStats,
) -> Option<Change> {
    let event = match d {
        Delivery::Event(e) => map_event(e, |k| {
            let name = k.name_any();
            object(k)
                .inspect_err(|e| skipped(kind, &name, e, stats))
                .ok()
        })?,
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
    object: impl Fn(K) -> Result<Object, String>,
    (tx, stats): (mpsc::Sender<Change>, Arc<MirrorStats>),
    stop: CancellationToken,
) where
    K: Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    let config = k8s_watch::config(k8s_watch::PAGE)
        .labels(&ours())
        .list_semantic(ListSemantic::MostRecent);
    let deliveries = k8s_watch::guarded_watch(api, config);
    pump(deliveries, &tx, &stop, |d| change(kind, d, &object, &stats)).await;
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
pub(crate) fn spawn(
    client: &Client,
    imports: Option<&ApiResource>,
    tx: &mpsc::Sender<Change>,
    stop: &CancellationToken,
    stats: &Arc<MirrorStats>,
) {
    tokio::spawn(forward::<Service>(
        Api::all(client.clone()),
        Kind::Service,
        |s| Ok(Object::Service(Box::new(s))),
        (tx.clone(), stats.clone()),
        stop.clone(),
    ));
    tokio::spawn(forward::<EndpointSlice>(
        Api::all(client.clone()),
        Kind::EndpointSlice,
        |s| Ok(Object::EndpointSlice(s)),
        (tx.clone(), stats.clone()),
        stop.clone(),
    ));
    if let Some(ar) = imports {
        let version: Arc<str> = Arc::from(ar.version.as_str());
        tokio::spawn(forward::<DynamicObject>(
            Api::all_with(client.clone(), ar),
            Kind::ServiceImport,
            move |o| {
                let import = crd::from_dynamic::<ServiceImport>(o).map_err(|e| e.to_string())?;
                Ok(Object::ServiceImport {
                    version: version.clone(),
                    import,
                })
            },
            (tx.clone(), stats.clone()),
            stop.clone(),
        ));
    }
}

/// One watch event of the local ServiceExports.
pub(crate) type ExportChange = watcher::Event<ServiceExport>;

/// Starts the watch of every ServiceExport of the local cluster (resource
/// `ar`), sending its events to `tx` until `stop`. Read only for their
/// status conditions: nothing of theirs but `/status` is ever written.
pub(crate) fn spawn_exports(
    client: &Client,
    ar: &ApiResource,
    tx: mpsc::Sender<ExportChange>,
    stop: CancellationToken,
) {
    let api: Api<DeserializeGuard<DynamicObject>> = Api::all_with(client.clone(), ar);
    tokio::spawn(async move {
        let deliveries = k8s_watch::guarded_watch(api, k8s_watch::config(k8s_watch::PAGE));
        pump(deliveries, &tx, &stop, |d| match d {
            Delivery::Event(e) => map_event(e, typed_export),
            _ => None,
        })
        .await;
    });
}

/// A ServiceExport as the typed object (`None`, said, if it is not one).
fn typed_export(o: DynamicObject) -> Option<ServiceExport> {
    let name = o.name_any();
    crd::from_dynamic(o)
        .inspect_err(|e| warn!(export = %name, error = %e, "ServiceExport skipped: cannot decode"))
        .ok()
}

/// Clusters whose Links Linkerd's own service mirror manages: its Lease
/// `service-mirror-write-<link>` is held, or mirror Services of that cluster
/// exist without our label. Their `<svc>-<cluster>` objects are Linkerd's.
/// A list that fails counts as "none found" (looked at again next resync).
pub(crate) async fn linkerd_managed(
    client: &Client,
    link_namespace: Option<&str>,
) -> BTreeSet<Arc<str>> {
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
