//! The tower layer on every cluster's [`kube::Client`]: it bounds the
//! requests in flight to that cluster's API server and records when the
//! server last answered.
//!
//! Owns the in-flight bound (a semaphore per cluster: a permit is held
//! until a response's body is read to its end, except for watches, whose
//! permit goes with the response headers since their bodies never end, and
//! the liveness heartbeat's `GET /version`, which takes none: sixteen lists
//! stuck in a partition must not keep the one request that can tell the
//! partition healed from being sent) and
//! [`ApiStats`], what the layer saw: the last successful response, and per
//! watched collection the last watch the server accepted. It must not
//! interpret requests beyond telling watches from other requests, nor
//! retry them (kube-runtime's watcher and the callers do).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower::{Layer, Service};

/// Requests in flight per cluster when nothing else is configured: enough
/// for every watch of a cluster to (re)start at once next to a handful of
/// targeted lists, few enough that a selector change on a big cluster
/// cannot fire thousands of LISTs at its API server (CoreDNS bounds the
/// same with `apiserver_max_inflight`).
pub(crate) const DEFAULT_MAX_INFLIGHT: usize = 16;

/// What the layer saw of one cluster's API server; shared by every clone of
/// its client.
#[derive(Debug)]
pub struct ApiStats {
    /// The last successful (2xx) response.
    answered: watch::Sender<Option<Instant>>,
    /// Per collection path, the last watch request the server accepted.
    /// Only watched collections land here, so it stays as small as the
    /// watch set.
    watches: Mutex<HashMap<String, Instant>>,
    /// The bound.
    limit: Arc<Semaphore>,
    max: usize,
}

impl ApiStats {
    fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            answered: watch::Sender::new(None),
            watches: Mutex::new(HashMap::new()),
            limit: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// When the API server last answered a request successfully.
    pub fn last_answered(&self) -> Option<Instant> {
        *self.answered.borrow()
    }

    /// Changes whenever the API server answers successfully: a task that
    /// waits for "the API answers again" waits on this.
    pub fn subscribe(&self) -> watch::Receiver<Option<Instant>> {
        self.answered.subscribe()
    }

    /// Whether a watch of the collection at `path` (as
    /// [`kube::Api::resource_url`] gives it) was accepted after `since`.
    /// Watches of one collection under different selectors share the
    /// answer: they fail and recover together (one server, one resource,
    /// one set of permissions), and keying by selector would tie this to
    /// kube's query encoding.
    pub fn watch_accepted_since(&self, path: &str, since: Instant) -> bool {
        self.watches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(path)
            .is_some_and(|t| *t > since)
    }

    /// Requests in flight now (permits taken).
    pub fn in_flight(&self) -> usize {
        self.max - self.limit.available_permits()
    }

    /// The bound.
    pub fn max_in_flight(&self) -> usize {
        self.max
    }

    fn record(&self, path: Option<String>) {
        let now = Instant::now();
        if let Some(path) = path {
            self.watches
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(path, now);
        }
        self.answered.send_replace(Some(now));
    }
}

/// The layer: one per cluster (its [`ApiStats`] is that cluster's).
#[derive(Debug, Clone)]
pub(crate) struct ApiLayer {
    stats: Arc<ApiStats>,
}

impl ApiLayer {
    /// A layer allowing `max_inflight` requests at once (at least one).
    pub(crate) fn new(max_inflight: usize) -> Self {
        Self {
            stats: Arc::new(ApiStats::new(max_inflight)),
        }
    }

    /// What the layer sees.
    pub(crate) fn stats(&self) -> Arc<ApiStats> {
        self.stats.clone()
    }
}

impl<S> Layer<S> for ApiLayer {
    type Service = ApiService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ApiService {
            inner,
            stats: self.stats.clone(),
        }
    }
}

/// The service [`ApiLayer`] makes.
#[derive(Debug)]
pub(crate) struct ApiService<S> {
    inner: S,
    stats: Arc<ApiStats>,
}

/// The path of the liveness heartbeat (`source::liveness`), which takes no
/// in-flight permit.
pub(crate) const HEARTBEAT_PATH: &str = "/version";

/// A watch request (`?watch=true`): its response body never ends.
fn is_watch<B>(req: &Request<B>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

impl<S, ReqBody, B> Service<Request<ReqBody>> for ApiService<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Response = Response<PermitBody<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let watch = is_watch(&req).then(|| req.uri().path().to_owned());
        let bounded = req.uri().path() != HEARTBEAT_PATH;
        let stats = self.stats.clone();
        // The inner future sends nothing until polled, so waiting for the
        // permit before polling it is what bounds the requests in flight.
        let fut = self.inner.call(req);
        Box::pin(async move {
            // The semaphore is never closed, so `Err` cannot happen; were it
            // to, the request goes unbounded rather than hanging.
            let permit = match bounded {
                true => stats.limit.clone().acquire_owned().await.ok(),
                false => None,
            };
            let resp = fut.await?;
            let keep = if watch.is_some() { None } else { permit };
            if resp.status().is_success() {
                stats.record(watch);
            }
            Ok(resp.map(|inner| PermitBody {
                inner,
                permit: keep,
            }))
        })
    }
}

/// A response body that holds its request's in-flight permit until it is
/// read to its end or dropped.
#[derive(Debug)]
pub(crate) struct PermitBody<B> {
    inner: B,
    permit: Option<OwnedSemaphorePermit>,
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for PermitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) || this.inner.is_end_stream() {
            this.permit = None;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests;
