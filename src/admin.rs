//! The admin HTTP server: `/live`, `/ready` and `/metrics` (Prometheus text).
//!
//! Thin: it reads the shared state and renders; it must not change anything.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::runtime::Shared;

/// The admin routes.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/live", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

async fn ready(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    if shared.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: not every cluster has loaded yet\n",
        )
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let snap = shared.snapshot.load();
    let body = shared
        .metrics
        .render(&snap, shared.ready.load(Ordering::Acquire));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
}

/// Serves the admin routes on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(shared))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
