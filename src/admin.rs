//! The admin HTTP server: `/live`, `/ready`, `/metrics` (Prometheus text)
//! and `/debug/clusters` (per-cluster status as JSON).
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
        .route("/debug/clusters", get(debug_clusters))
        .with_state(shared)
}

async fn ready(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    if shared.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: not every cluster has loaded yet (see /debug/clusters)\n",
        )
    }
}

async fn debug_clusters(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let mut body = shared.board.debug_json();
    body["ready"] = shared.ready.load(Ordering::Acquire).into();
    body["serial"] = shared.snapshot.load().serial.into();
    let text = serde_json::to_string_pretty(&body).unwrap_or_default() + "\n";
    ([(header::CONTENT_TYPE, "application/json")], text)
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let snap = shared.snapshot.load();
    let mut body = shared
        .metrics
        .render(&snap, shared.ready.load(Ordering::Acquire));
    shared.board.render_metrics(&mut body);
    shared.mirror.render(&mut body);
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
