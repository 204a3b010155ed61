//! Guarded watches and lists: `kube::runtime::watcher` over
//! [`DeserializeGuard`], so one object that does not decode is skipped and
//! reported instead of failing a list, with kube-runtime's backoff on
//! errors (as linkerd2's policy controller watches).
//!
//! Owns the watcher settings every watch here shares (the page size of a
//! collection, the retry delays) and the translation of the watcher's
//! items into [`Delivery`]s. It must not interpret objects: callers
//! convert them.

use std::fmt::Debug;
use std::time::Duration;

use futures_util::{Stream, StreamExt as _};
use kube::Api;
use kube::api::ListParams;
use kube::core::DeserializeGuard;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event, ExponentialBackoff};
use serde::de::DeserializeOwned;
use tracing::debug;

/// HTTP 410 Gone: the resourceVersion a watch resumes from is no longer kept.
const GONE: u16 = 410;

/// Objects per list page for most collections (client-go's reflector
/// default).
pub(crate) const PAGE: u32 = 500;
/// EndpointSlices per list page. A page is decoded whole before its
/// objects are converted to slim ones, so its size is the list's transient
/// memory: 500 slices of 50 endpoints cost the server ~8 MiB of resident
/// memory more than pages of 100 (tests/integration/budget.rs, flood of
/// 200,000 endpoints: 62.5 vs 52.4 MiB bounded), and a linked cluster
/// chooses how big its slices are. Five times the requests at the first
/// sync is the price.
pub(crate) const SLICE_PAGE: u32 = 100;
/// The first retry delay after an error; doubled up to [`MAX_BACKOFF`].
pub(crate) const MIN_BACKOFF: Duration = Duration::from_millis(250);
/// The longest retry delay before jitter, which adds up to as much again:
/// a cluster whose API comes back is watched again within twice this
/// (10 s).
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What a guarded watch delivers.
#[derive(Debug)]
pub(crate) enum Delivery<K> {
    /// A watcher event; every object in it decoded.
    Event(Event<K>),
    /// An object could not be decoded; it is skipped (during a relist it
    /// counts as absent).
    Undecodable {
        /// `namespace/name`, or `?` when even the metadata is unreadable.
        object: String,
        /// The decoder's message.
        error: String,
    },
    /// A request failed; the watcher backs off and retries.
    Failed(String),
}

/// The retry delays of every watch and targeted list: from 250 ms,
/// doubling to 5 s, each plus a random jitter of up to itself, so never
/// more than 10 s (kube-runtime resets them after each success).
pub(crate) fn backoff() -> ExponentialBackoff {
    super::retry::builder().into()
}

/// The watcher settings for a collection: `page_size` objects per list
/// page, bookmarks and kube's 290 s watch timeout.
pub(crate) fn config(page_size: u32) -> watcher::Config {
    watcher::Config::default().page_size(page_size)
}

/// `namespace/name` of an object's metadata.
fn name_of(meta: &kube::core::ObjectMeta) -> String {
    let name = meta.name.as_deref().unwrap_or("?");
    match &meta.namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// One decoded object, or why not.
fn unguard<K>(g: DeserializeGuard<K>) -> Result<K, (String, String)> {
    g.0.map_err(|e| (name_of(&e.metadata), e.error))
}

/// Lifts an event of guarded objects into a [`Delivery`].
fn deliver<K>(event: Event<DeserializeGuard<K>>) -> Delivery<K> {
    let wrap = |g, f: fn(K) -> Event<K>| match unguard(g) {
        Ok(k) => Delivery::Event(f(k)),
        Err((object, error)) => Delivery::Undecodable { object, error },
    };
    match event {
        Event::Init => Delivery::Event(Event::Init),
        Event::InitDone => Delivery::Event(Event::InitDone),
        Event::InitApply(g) => wrap(g, Event::InitApply),
        Event::Apply(g) => wrap(g, Event::Apply),
        Event::Delete(g) => wrap(g, Event::Delete),
    }
}

/// Lifts a watcher error into a [`Delivery`]: a watch line that does not
/// even parse is an undecodable object, the rest are failures.
fn failure<K>(e: &watcher::Error) -> Delivery<K> {
    match e {
        watcher::Error::WatchFailed(kube::Error::SerdeError(se)) => Delivery::Undecodable {
            object: "?".to_owned(),
            error: se.to_string(),
        },
        other => Delivery::Failed(other.to_string()),
    }
}

/// Watches `api` with `config`, forever: errors are delivered and retried
/// after [`backoff`]. A 410 Gone is not delivered: the server has only
/// forgotten our place, and the watcher lists again (a streamed relist),
/// so the watch is not broken.
pub(crate) fn guarded_watch<K>(
    api: Api<DeserializeGuard<K>>,
    config: watcher::Config,
) -> impl Stream<Item = Delivery<K>> + Send + 'static
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher::watcher(api, config)
        .backoff(backoff())
        .filter_map(|item| {
            std::future::ready(match item {
                Ok(event) => Some(deliver(event)),
                Err(watcher::Error::WatchError(status)) if status.code == GONE => {
                    debug!(message = %status.message, "watch expired (410 Gone): listing again");
                    None
                }
                Err(e) => Some(failure(&e)),
            })
        })
}

/// Every object `api` holds under `params` (paged by its `limit`), with the
/// objects that did not decode as `(name, error)`.
pub(crate) async fn guarded_list<K>(
    api: &Api<DeserializeGuard<K>>,
    params: &ListParams,
) -> Result<(Vec<K>, Vec<(String, String)>), kube::Error>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug,
{
    let mut params = params.clone();
    let mut items = Vec::new();
    let mut bad = Vec::new();
    loop {
        let page = api.list(&params).await?;
        for g in page.items {
            match unguard(g) {
                Ok(k) => items.push(k),
                Err(e) => bad.push(e),
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params.continue_token = Some(token),
            None => return Ok((items, bad)),
        }
    }
}

#[cfg(test)]
mod tests;
