//! The admin HTTP server: `/live`, `/ready`, `/metrics` (Prometheus text,
//! encoded by `metrics`) and `/debug/clusters` (per-cluster status as JSON).
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

use crate::metrics::Shared;
use crate::metrics::{CONTENT_TYPE, Metrics};

/// The admin routes.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    let registry = Arc::new(Metrics::new(&shared));
    Router::new()
        .route("/live", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/metrics", get(move || metrics(registry.clone())))
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
    let snapshot = shared.snapshot.load();
    // The local cluster's place from the settings the answers use.
    let mut body = shared.board.debug_json(&snapshot.settings.local_place);
    body["ready"] = shared.ready.load(Ordering::Acquire).into();
    body["serial"] = snapshot.serial.into();
    let text = serde_json::to_string_pretty(&body).unwrap_or_default() + "\n";
    ([(header::CONTENT_TYPE, "application/json")], text)
}

async fn metrics(registry: Arc<Metrics>) -> impl IntoResponse {
    match registry.encode() {
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, CONTENT_TYPE)], body),
        // Only a collector can fail an encode into a String; say so rather
        // than serve half a scrape.
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "metrics could not be encoded\n".to_owned(),
        ),
    }
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
