//! The admin HTTP server: `/live`, `/ready`, `/metrics` (Prometheus text,
//! encoded by `metrics`), `/debug/clusters` (per-cluster status as JSON)
//! `/debug/name?name=` (why one name answers what it answers, as JSON
//! or with `&format=text` as text: [`explain`]) and `/debug/transfers`
//! (who may transfer the zone, the IXFR journal, each secondary's serial).
//!
//! Thin: it reads the shared state and renders; it must not change anything.

pub(crate) mod explain;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
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
        .route("/debug/name", get(debug_name))
        .route("/debug/transfers", get(debug_transfers))
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

/// `/debug/transfers`: the zone-transfer settings (key names, never
/// secrets), the IXFR journal's versions, and the serial each secondary
/// last fetched next to the current one.
async fn debug_transfers(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let snap = shared.snapshot.load();
    let s = &snap.settings;
    let journal = shared.journal.versions();
    let versions: Vec<serde_json::Value> = journal
        .list
        .iter()
        .map(|v| {
            serde_json::json!({
                "from": v.from, "to": v.to,
                "removed": v.removed.len(), "added": v.added.len(), "bytes": v.bytes,
            })
        })
        .collect();
    let counts = shared.dns.read();
    let secondaries: Vec<serde_json::Value> = counts
        .secondaries
        .iter()
        .map(|(ip, serial)| {
            let current = *serial == snap.serial;
            serde_json::json!({"address": ip.to_string(), "serial": serial, "current": current})
        })
        .collect();
    let body = serde_json::json!({
        "serial": snap.serial,
        "allowTransfer": s.allow_transfer.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "notify": s.notify.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "transferKeys": s.transfer_keys.iter().map(|k| k.name.clone()).collect::<Vec<_>>(),
        "transferRateBytesPerSecond": s.transfer_rate,
        "journal": {
            "serial": journal.serial,
            "bytes": journal.bytes,
            "limits": {"versions": s.ixfr_journal.versions, "bytes": s.ixfr_journal.bytes},
            "versions": versions,
        },
        "secondaries": secondaries,
    });
    let text = serde_json::to_string_pretty(&body).unwrap_or_default() + "\n";
    ([(header::CONTENT_TYPE, "application/json")], text)
}

/// How long `/debug/name` waits for the model task, which answers between
/// two batches (a batch takes milliseconds; a full rebuild after a reload
/// of a large clusterset, seconds).
const VIEW_WAIT: Duration = Duration::from_secs(5);

/// `/debug/name?name=<name>`: the explanation of one name as JSON (with
/// `&format=text`, the text `clusterset-dns explain` prints); 400 with the
/// reason for a missing or invalid name, 503 when the model task does not
/// answer.
async fn debug_name(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response {
    let text = |status, body: String| {
        let headers = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
        (status, headers, body).into_response()
    };
    let param = |key: &str| {
        query.as_deref().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.into_owned())
        })
    };
    let Some(name) = param("name") else {
        let e = explain::NameInputError::Missing;
        return text(StatusCode::BAD_REQUEST, format!("{e}\n"));
    };
    let as_text = param("format").is_some_and(|f| f == "text");
    let view = match shared.views.get(VIEW_WAIT).await {
        Ok(view) => view,
        Err(e) => return text(StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    };
    match explain::explain(&name, &view.snapshot, &view.clusters, Instant::now()) {
        Ok(explained) if as_text => text(StatusCode::OK, explained.text()),
        Ok(explained) => match serde_json::to_string_pretty(&explained) {
            Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body + "\n").into_response(),
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        },
        Err(e) => text(StatusCode::BAD_REQUEST, format!("{e}\n")),
    }
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
