//! The control endpoint: a small plain-HTTP API on loopback that drives fault injection and
//! reads counters and audit logs, for tests in other processes and for people at a shell.
//!
//! Routes (all answer JSON):
//! - `GET  /clusters` — name, server URL, kubeconfig path, running or not
//! - `POST /clusters/<c>/stop` · `/start` · `/drop-watches` · `/expire-history`
//! - `POST /clusters/<c>/latency?ms=N` — added delay per request (0 removes it)
//! - `POST /clusters/<c>/fail?count=N&code=500|429&retryAfter=S` — fail the next N requests
//! - `POST /clusters/<c>/rotate-token` — new admin token, kubeconfig rewritten
//! - `POST /clusters/<c>/tokens?serviceAccount=<ns>/<name>` — a token and kubeconfig for a ServiceAccount
//! - `GET  /clusters/<c>/counters` · `/audit`
//! - `POST /clusters/<c>/objects` — body: one object (JSON, or YAML with a YAML content type)
//!   with apiVersion, kind and metadata.name; creates it, or replaces the stored one as a PUT
//!   would (unconditionally; a Service's allocated addresses, left out, are kept as kube keeps
//!   them, but changed ones are refused), then writes its status through the status
//!   subresource if the kind has one. Answers as the API would (the stored object, or a
//!   Status). A namespaced object without a namespace goes to `default`.
//! - `DELETE /clusters/<c>/objects/<apiVersion>/<kind>/<namespace>/<name>` — the apiVersion
//!   keeps its slash (`v1/Service/default/web`,
//!   `discovery.k8s.io/v1/EndpointSlice/default/web-abc`); kind may also be the plural
//!   (`services`); namespace is `-` for cluster-scoped kinds (`v1/Namespace/-/team`).
//!
//! The object routes take the API's create, update and delete paths (validation, defaults,
//! managedFields, finalizers, watch events) but not its authentication, RBAC, injected faults,
//! counters or audit log: a test changes objects through them while the API port is blocked.
//!
//! It owns only this translation; the switches themselves live on [`Cluster`], the objects in
//! its store.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use crate::cluster::Cluster;

/// Binds `addr` and serves the control API for `clusters` until the process ends.
pub(crate) async fn serve(
    addr: SocketAddr,
    clusters: Vec<Arc<Cluster>>,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let clusters = Arc::new(clusters);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let clusters = clusters.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let clusters = clusters.clone();
                    async move { Ok::<_, Infallible>(handle(&clusters, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(local)
}

fn reply(code: StatusCode, v: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(
        serde_json::to_vec(&v).unwrap_or_default(),
    )));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn describe(c: &Cluster) -> Value {
    json!({"name": c.name, "server": c.server_url(), "kubeconfig": c.kubeconfig_path(), "running": c.is_running()})
}

async fn handle(clusters: &[Arc<Cluster>], req: Request<Incoming>) -> Response<Full<Bytes>> {
    let query: HashMap<String, String> = crate::api::parse_query(req.uri().query());
    let segs: Vec<String> = req
        .uri()
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let method = req.method().clone();
    match (&method, segs.as_slice()) {
        (&Method::GET, ["clusters"]) => reply(
            StatusCode::OK,
            Value::Array(clusters.iter().map(|c| describe(c)).collect()),
        ),
        (method, ["clusters", name, "objects", rest @ ..]) => {
            objects(clusters, name, method, rest, req).await
        }
        (method, ["clusters", name, action]) => {
            let Some(c) = clusters.iter().find(|c| c.name == *name) else {
                return reply(
                    StatusCode::NOT_FOUND,
                    json!({"error": format!("no cluster {name}")}),
                );
            };
            cluster_action(c, method, action, &query).await
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            json!({"error": "see the kubesim control module docs for routes"}),
        ),
    }
}

/// A 400 whose body says what is wrong with the request.
fn bad_request(msg: String) -> Response<Full<Bytes>> {
    reply(StatusCode::BAD_REQUEST, json!({"error": msg}))
}

/// The number in query parameter `k`, or why there is none.
fn query_number(query: &HashMap<String, String>, k: &str) -> Result<u64, String> {
    query
        .get(k)
        .ok_or(format!("missing query parameter {k}"))?
        .parse()
        .map_err(|_| format!("{k} is not a number"))
}

/// The per-cluster routes, `/clusters/<c>/<action>`: stop and start, watch and history faults,
/// latency and failures, tokens, counters and the audit log.
async fn cluster_action(
    c: &Arc<Cluster>,
    method: &Method,
    action: &str,
    query: &HashMap<String, String>,
) -> Response<Full<Bytes>> {
    match (method, action) {
        (&Method::POST, "stop") => {
            c.stop();
            reply(StatusCode::OK, describe(c))
        }
        (&Method::POST, "start") => match c.restart().await {
            Ok(()) => reply(StatusCode::OK, describe(c)),
            Err(e) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"error": e.to_string()}),
            ),
        },
        (&Method::POST, "drop-watches") => {
            c.drop_watches();
            reply(StatusCode::OK, describe(c))
        }
        (&Method::POST, "expire-history") => {
            c.expire_history();
            reply(StatusCode::OK, describe(c))
        }
        (&Method::POST, "latency") => match query_number(query, "ms") {
            Ok(ms) => {
                c.set_latency(Duration::from_millis(ms));
                reply(StatusCode::OK, json!({"latencyMs": ms}))
            }
            Err(e) => bad_request(e),
        },
        (&Method::POST, "fail") => inject_failures(c, query),
        (&Method::POST, "rotate-token") => match c.rotate_admin_token() {
            Ok(_) => reply(StatusCode::OK, describe(c)),
            Err(e) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"error": e.to_string()}),
            ),
        },
        (&Method::POST, "tokens") => issue_token(c, query),
        (&Method::GET, "counters") => {
            let list: Vec<Value> = c
                .counters()
                .into_iter()
                .map(|((verb, resource), count)| json!({"verb": verb, "resource": resource, "count": count}))
                .collect();
            reply(StatusCode::OK, Value::Array(list))
        }
        (&Method::GET, "audit") => reply(StatusCode::OK, json!(c.audit())),
        _ => reply(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no action {action} for {method}")}),
        ),
    }
}

/// `POST /clusters/<c>/fail?count=N[&code=500|429][&retryAfter=S]`: the next `count` requests
/// fail with a 500, or a 429 with that Retry-After.
fn inject_failures(c: &Cluster, query: &HashMap<String, String>) -> Response<Full<Bytes>> {
    let count = match query_number(query, "count") {
        Ok(n) => u32::try_from(n).unwrap_or(u32::MAX),
        Err(e) => return bad_request(e),
    };
    match query.get("code").map(String::as_str).unwrap_or("500") {
        "500" => c.fail_next(count),
        "429" => c.throttle_next(
            count,
            query_number(query, "retryAfter").map_or(1, |n| u32::try_from(n).unwrap_or(1)),
        ),
        other => return bad_request(format!("code must be 500 or 429, not {other}")),
    }
    reply(StatusCode::OK, json!({"failNext": count}))
}

/// `POST /clusters/<c>/tokens?serviceAccount=<namespace>/<name>`: a bearer token for that
/// service account, with a kubeconfig that uses it.
fn issue_token(c: &Cluster, query: &HashMap<String, String>) -> Response<Full<Bytes>> {
    let Some((ns, sa)) = query.get("serviceAccount").and_then(|s| s.split_once('/')) else {
        return bad_request("serviceAccount=<namespace>/<name> is required".into());
    };
    let token = c.issue_service_account_token(ns, sa);
    let user = format!("system:serviceaccount:{ns}:{sa}");
    reply(
        StatusCode::OK,
        json!({"user": user, "token": token, "kubeconfig": c.kubeconfig_for(&user, &token)}),
    )
}

/// The object routes: `POST /clusters/<c>/objects` and
/// `DELETE /clusters/<c>/objects/<apiVersion>/<kind>/<namespace or ->/<name>`.
async fn objects(
    clusters: &[Arc<Cluster>],
    name: &str,
    method: &Method,
    rest: &[&str],
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let Some(c) = clusters.iter().find(|c| c.name == name) else {
        return reply(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no cluster {name}")}),
        );
    };
    let ns = |ns: &str| (ns != "-").then(|| ns.to_owned());
    let response = match (method, rest) {
        (&Method::POST, []) => {
            let content_type = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/json")
                .to_owned();
            let body = match Limited::new(req.into_body(), crate::api::MAX_BODY)
                .collect()
                .await
            {
                Ok(collected) => collected.to_bytes(),
                Err(e) => {
                    return reply(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        json!({"error": format!("body: {e}")}),
                    );
                }
            };
            crate::api::control_apply(c, &content_type, &body)
        }
        (&Method::DELETE, [version, kind, namespace, name]) => {
            crate::api::control_delete(c, version, kind, ns(namespace).as_deref(), name)
        }
        (&Method::DELETE, [group, version, kind, namespace, name]) => crate::api::control_delete(
            c,
            &format!("{group}/{version}"),
            kind,
            ns(namespace).as_deref(),
            name,
        ),
        _ => {
            return reply(
                StatusCode::NOT_FOUND,
                json!({"error": "objects: POST .../objects or DELETE .../objects/<apiVersion>/<kind>/<namespace or ->/<name>"}),
            );
        }
    };
    // The API's answer is complete already (no streaming on these paths); re-box it as this
    // endpoint's body type.
    let (parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    Response::from_parts(parts, Full::new(bytes))
}

#[cfg(test)]
mod tests;
