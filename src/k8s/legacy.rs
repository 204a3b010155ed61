//! The hand-written list+watch loop the mirror controller still uses
//! (removed once the mirror is off it: `kube::runtime::watcher` through
//! [`super::watch`] replaces it; the live source no longer uses it).
//!
//! Owns the protocol details it re-implements (pages of 500,
//! resourceVersion bookkeeping, bookmarks, relist on 410 Gone, retries with
//! [`super::watch::backoff`]) and reports what happened as [`WatchMsg`]s. It
//! must not interpret objects: callers convert them.

use std::future::Future;
use std::time::Duration;

use kube::Client;
use kube::api::{ListParams, WatchParams};
use kube::core::{Request, WatchEvent};
use kube::runtime::watcher::ExponentialBackoff;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use futures_util::StreamExt as _;

use super::watch::{MAX_BACKOFF, PAGE, SLICE_PAGE, backoff};

/// What a list+watch reports.
#[derive(Debug)]
pub enum WatchMsg<K> {
    /// A full list begins; the pages that follow replace what was known.
    Init,
    /// One page of the list.
    Page(Vec<K>),
    /// The list is complete: anything not in its pages is gone.
    InitDone,
    /// An object was added or changed.
    Apply(K),
    /// An object was deleted (its last state).
    Delete(K),
    /// The API answered: the watch is established (after a list, or a
    /// re-watch following an error).
    Connected,
    /// A request failed; the loop backs off and retries.
    Failed(String),
    /// An object could not be decoded; it is skipped.
    Undecodable {
        /// `namespace/name` when the metadata could be read.
        object: Option<String>,
        /// The decoder's message.
        error: String,
    },
}

/// Where and what to list+watch.
#[derive(Debug, Clone)]
pub struct WatchTarget {
    /// Collection path, e.g. `/api/v1/services` or
    /// `/api/v1/namespaces/linkerd-multicluster/secrets`.
    pub path: String,
    /// `labelSelector`.
    pub label_selector: Option<String>,
    /// `fieldSelector`.
    pub field_selector: Option<String>,
}

/// The page size for the collection at `path`.
fn page_size(path: &str) -> u32 {
    if path.ends_with("/endpointslices") {
        SLICE_PAGE
    } else {
        PAGE
    }
}
/// Server-side watch timeout; the watch is renewed from the last
/// resourceVersion when it ends.
const WATCH_TIMEOUT_SECS: u32 = 290;

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct RawList {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<Box<RawValue>>,
}

#[derive(Deserialize, Default)]
struct ListMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(default, rename = "continue")]
    continue_: Option<String>,
}

#[derive(Deserialize)]
struct MetaOnly {
    #[serde(default)]
    metadata: Option<Meta>,
}

fn object_name(raw: &str) -> Option<String> {
    let m = serde_json::from_str::<MetaOnly>(raw).ok()?.metadata?;
    let name = m.name?;
    Some(match m.namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name,
    })
}

fn resource_version(v: &serde_json::Value) -> Option<String> {
    v.get("metadata")?
        .get("resourceVersion")?
        .as_str()
        .map(str::to_owned)
}

/// The API said the resourceVersion is too old (410 Gone, reason Expired).
fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 410)
}

fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}: {}", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}

/// Sends, or reports that the receiver is gone.
async fn send<K>(tx: &mpsc::Sender<WatchMsg<K>>, msg: WatchMsg<K>) -> Result<(), ()> {
    tx.send(msg).await.map_err(|_| ())
}

/// One page of a list, its items left undecoded so one bad object does not
/// fail the page.
async fn list_page(
    client: &Client,
    target: &WatchTarget,
    token: Option<&str>,
) -> Result<RawList, kube::Error> {
    let mut lp = ListParams::default().limit(page_size(&target.path));
    lp.label_selector.clone_from(&target.label_selector);
    lp.field_selector.clone_from(&target.field_selector);
    if let Some(t) = token {
        lp = lp.continue_token(t);
    }
    let req = Request::new(&target.path)
        .list(&lp)
        .map_err(kube::Error::BuildRequest)?;
    let text = client.request_text(req).await?;
    serde_json::from_str(&text).map_err(kube::Error::SerdeError)
}

/// One full list. Returns the list's resourceVersion, or the error text
/// and whether it was 410 (an expired continue token).
async fn list_all<K: DeserializeOwned>(
    client: &Client,
    target: &WatchTarget,
    tx: &mpsc::Sender<WatchMsg<K>>,
) -> Result<Result<String, kube::Error>, ()> {
    send(tx, WatchMsg::Init).await?;
    let mut token: Option<String> = None;
    loop {
        let list = match list_page(client, target, token.as_deref()).await {
            Ok(l) => l,
            Err(e) => return Ok(Err(e)),
        };
        let mut page = Vec::with_capacity(list.items.len());
        for raw in list.items {
            match serde_json::from_str::<K>(raw.get()) {
                Ok(k) => page.push(k),
                Err(e) => {
                    send(
                        tx,
                        WatchMsg::Undecodable {
                            object: object_name(raw.get()),
                            error: e.to_string(),
                        },
                    )
                    .await?;
                }
            }
        }
        send(tx, WatchMsg::Page(page)).await?;
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => token = Some(next),
            None => {
                send(tx, WatchMsg::InitDone).await?;
                return Ok(Ok(list.metadata.resource_version.unwrap_or_default()));
            }
        }
    }
}

/// How a watch stream ended.
enum Ended {
    /// Normally (server timeout): watch again from the same version.
    Renew,
    /// 410: list again.
    Relist,
    /// An error: back off.
    Failed(String),
}

async fn watch_once<K: DeserializeOwned>(
    client: &Client,
    target: &WatchTarget,
    rv: &mut String,
    tx: &mpsc::Sender<WatchMsg<K>>,
    delays: &mut ExponentialBackoff,
) -> Result<Ended, ()> {
    // Bookmarks are on by default; they keep `rv` fresh on quiet streams.
    let mut wp = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
    wp.label_selector.clone_from(&target.label_selector);
    wp.field_selector.clone_from(&target.field_selector);
    let req = match Request::new(&target.path).watch(&wp, rv) {
        Ok(r) => r,
        Err(e) => return Ok(Ended::Failed(e.to_string())),
    };
    let stream = match client.request_events::<serde_json::Value>(req).await {
        Ok(s) => s,
        Err(e) if is_gone(&e) => return Ok(Ended::Relist),
        Err(e) => return Ok(Ended::Failed(describe(&e))),
    };
    send(tx, WatchMsg::Connected).await?;
    let mut stream = std::pin::pin!(stream);
    // A stream that stays silent well past its own timeout is dead.
    let idle = Duration::from_secs(u64::from(WATCH_TIMEOUT_SECS) + 60);
    loop {
        let item = match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => return Ok(Ended::Failed("watch stream silent for too long".into())),
            Ok(None) => return Ok(Ended::Renew),
            Ok(Some(item)) => item,
        };
        let event = match item {
            Ok(ev) => ev,
            Err(kube::Error::SerdeError(e)) => {
                send(
                    tx,
                    WatchMsg::Undecodable {
                        object: None,
                        error: e.to_string(),
                    },
                )
                .await?;
                continue;
            }
            Err(e) if is_gone(&e) => return Ok(Ended::Relist),
            Err(e) => return Ok(Ended::Failed(describe(&e))),
        };
        match event {
            WatchEvent::Added(v) | WatchEvent::Modified(v) => {
                if let Some(new) = resource_version(&v) {
                    *rv = new;
                }
                *delays = backoff();
                decoded(tx, v, WatchMsg::Apply).await?;
            }
            WatchEvent::Deleted(v) => {
                if let Some(new) = resource_version(&v) {
                    *rv = new;
                }
                decoded(tx, v, WatchMsg::Delete).await?;
            }
            WatchEvent::Bookmark(b) => {
                rv.clone_from(&b.metadata.resource_version);
            }
            WatchEvent::Error(status) if status.code == 410 => return Ok(Ended::Relist),
            WatchEvent::Error(status) => {
                return Ok(Ended::Failed(format!(
                    "{} {}: {}",
                    status.code, status.reason, status.message
                )));
            }
        }
    }
}

async fn decoded<K: DeserializeOwned>(
    tx: &mpsc::Sender<WatchMsg<K>>,
    v: serde_json::Value,
    wrap: fn(K) -> WatchMsg<K>,
) -> Result<(), ()> {
    let object = v.get("metadata").and_then(|m| {
        let name = m.get("name")?.as_str()?;
        Some(match m.get("namespace").and_then(|n| n.as_str()) {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_owned(),
        })
    });
    match serde_json::from_value::<K>(v) {
        Ok(k) => send(tx, wrap(k)).await,
        Err(e) => {
            send(
                tx,
                WatchMsg::Undecodable {
                    object,
                    error: e.to_string(),
                },
            )
            .await
        }
    }
}

/// Sleeps for the next backoff delay; false when cancelled.
async fn pause(delays: &mut ExponentialBackoff, shutdown: &CancellationToken) -> bool {
    let delay = delays.next().unwrap_or(MAX_BACKOFF);
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = shutdown.cancelled() => false,
    }
}

/// Lists and watches `target` until `shutdown` or until the receiver is
/// dropped, reporting on `tx`.
pub async fn list_watch<K: DeserializeOwned + Send + 'static>(
    client: Client,
    target: WatchTarget,
    tx: mpsc::Sender<WatchMsg<K>>,
    shutdown: CancellationToken,
) {
    let body = async {
        let mut delays = backoff();
        let mut rv: Option<String> = None;
        loop {
            let current = match rv.take() {
                Some(v) => v,
                None => match list_all(&client, &target, &tx).await? {
                    Ok(v) => {
                        send(&tx, WatchMsg::Connected).await?;
                        delays = backoff();
                        v
                    }
                    Err(e) => {
                        debug!(path = %target.path, error = %describe(&e), "list failed");
                        send(&tx, WatchMsg::Failed(describe(&e))).await?;
                        if !pause(&mut delays, &shutdown).await {
                            return Ok(());
                        }
                        continue;
                    }
                },
            };
            let mut current = current;
            match watch_once(&client, &target, &mut current, &tx, &mut delays).await? {
                Ended::Renew => rv = Some(current),
                Ended::Relist => {
                    debug!(path = %target.path, "resourceVersion expired; listing again");
                }
                Ended::Failed(e) => {
                    debug!(path = %target.path, error = %e, "watch failed");
                    send(&tx, WatchMsg::Failed(e)).await?;
                    if !pause(&mut delays, &shutdown).await {
                        return Ok(());
                    }
                    rv = Some(current);
                }
            }
        }
    };
    let body: std::pin::Pin<Box<dyn Future<Output = Result<(), ()>> + Send + '_>> = Box::pin(body);
    tokio::select! {
        _ = body => {}
        () = shutdown.cancelled() => {}
    }
}

/// One complete list of `target` (every page), skipping objects that do not
/// decode.
pub async fn list_once<K: DeserializeOwned>(
    client: &Client,
    target: &WatchTarget,
) -> Result<Vec<K>, String> {
    let mut token: Option<String> = None;
    let mut out = Vec::new();
    loop {
        let list = list_page(client, target, token.as_deref())
            .await
            .map_err(|e| describe(&e))?;
        out.extend(
            list.items
                .iter()
                .filter_map(|raw| serde_json::from_str::<K>(raw.get()).ok()),
        );
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => token = Some(next),
            None => return Ok(out),
        }
    }
}
