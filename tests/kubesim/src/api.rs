//! The HTTP face of one cluster: authentication, RBAC, routing of kube's URL layout, the verbs
//! (get, list, watch, create, update, patch, delete, deletecollection) and discovery.
//!
//! It owns the translation between HTTP requests and store operations, with kube-apiserver's
//! status codes and bodies. It must not keep state of its own: objects live in the store,
//! switches and logs in the cluster.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine;
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::cluster::{AuditEntry, Cluster, Failure};
use crate::patch::{PatchType, apply_patch, merge_key_for};
use crate::rbac::{Attributes, Decision, UserInfo};
use crate::resources::{self, RESOURCES, SERVICES};
use crate::selector::{FieldSelector, LabelSelector};
use crate::ssa;
use crate::status::{ApiError, Cause, success};
use crate::store::{self, Change, Deleted, EventType, Obj, ReadAt, meta_str, now};
use crate::validate;

/// Response body type.
pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// kube-apiserver's request size limit.
pub(crate) const MAX_BODY: usize = 3 * 1024 * 1024;

/// What a URL names.
#[derive(Debug, Clone)]
struct Target {
    res: usize,
    version: String,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

enum Route {
    Doc(Value),
    Resource(Target),
    Missing,
}

fn route(path: &str, server: &str) -> Route {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Route::Doc(resources::version()),
        ["api"] => return Route::Doc(resources::api_versions(server)),
        ["apis"] => return Route::Doc(resources::api_group_list()),
        ["healthz" | "livez" | "readyz"] => return Route::Doc(Value::String("ok".into())),
        ["openapi", "v3"] => return Route::Doc(resources::openapi_v3_root()),
        ["openapi", "v3", "api", v] => {
            return resources::openapi_v3_group_version("", v).map_or(Route::Missing, Route::Doc);
        }
        ["openapi", "v3", "apis", g, v] => {
            return resources::openapi_v3_group_version(g, v).map_or(Route::Missing, Route::Doc);
        }
        ["apis", g] => return resources::api_group_doc(g).map_or(Route::Missing, Route::Doc),
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Route::Missing,
    };
    if rest.is_empty() {
        return resources::api_resource_list(group, version).map_or(Route::Missing, Route::Doc);
    }
    let find = |plural: &str| resources::find(group, version, plural);
    let target = |res: usize, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        Route::Resource(Target {
            res,
            version: version.to_owned(),
            ns: ns.map(str::to_owned),
            name: name.map(str::to_owned),
            sub: sub.map(str::to_owned),
        })
    };
    match rest {
        ["namespaces", ns, plural, tail @ ..]
            if find(plural).is_some_and(|r| RESOURCES[r].namespaced) =>
        {
            let Some(res) = find(plural) else {
                return Route::Missing;
            };
            match tail {
                [] => target(res, Some(ns), None, None),
                [name] => target(res, Some(ns), Some(name), None),
                [name, sub] => target(res, Some(ns), Some(name), Some(sub)),
                _ => Route::Missing,
            }
        }
        [plural, tail @ ..] => {
            let Some(res) = find(plural) else {
                return Route::Missing;
            };
            let def = &RESOURCES[res];
            match tail {
                [] => target(res, None, None, None),
                [name] if !def.namespaced => target(res, None, Some(name), None),
                [name, sub] if !def.namespaced => target(res, None, Some(name), Some(sub)),
                _ => Route::Missing,
            }
        }
        _ => Route::Missing,
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&s[i + 1..i + 3], 16) {
                Ok(b) => {
                    out.push(b);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    q.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(p), String::new()),
        })
        .collect()
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

fn json_response(code: u16, body: Bytes, warnings: &[String]) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for w in warnings {
        if let Ok(v) = HeaderValue::from_str(&format!("299 - {}", Value::String(w.clone()))) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

fn value_response(code: u16, v: &Value, warnings: &[String]) -> Response<Body> {
    json_response(
        code,
        Bytes::from(serde_json::to_vec(v).unwrap_or_default()),
        warnings,
    )
}

/// The response for a failed request.
pub(crate) fn error_response(e: &ApiError) -> Response<Body> {
    let mut resp = value_response(e.code, &e.to_status(), &[]);
    if let Some(after) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&after.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

fn verb_of(method: &Method, t: &Target, q: &HashMap<String, String>) -> Option<&'static str> {
    let item = t.name.is_some();
    let watch = matches!(q.get("watch").map(String::as_str), Some("true" | "1"));
    Some(match (method.as_str(), item) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    })
}

fn bearer(req: &http::request::Parts) -> Option<&str> {
    let v = req.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Makes the CRD groups in `hidden` look not installed: absent from `/apis`, 404 below
/// `/apis/<group>`, as on a cluster without those CRDs.
fn hide_uninstalled(route: &mut Route, path: &str, hidden: &[&str]) {
    if hidden.is_empty() {
        return;
    }
    let path = path.trim_end_matches('/');
    match route {
        Route::Doc(doc) if path == "/apis" => {
            if let Some(groups) = doc.get_mut("groups").and_then(Value::as_array_mut) {
                groups.retain(|g| !hidden.iter().any(|h| g["name"] == *h));
            }
        }
        _ => {
            let group = path
                .strip_prefix("/apis/")
                .map(|rest| rest.split('/').next());
            if let Some(Some(group)) = group
                && hidden.contains(&group)
            {
                *route = Route::Missing;
            }
        }
    }
}

/// Serves one request for `cluster`.
pub(crate) async fn handle(cluster: Arc<Cluster>, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parse_query(parts.uri.query());
    let mut route = route(&path, &cluster.addr.to_string());
    hide_uninstalled(&mut route, &path, &cluster.uninstalled_groups());
    let mut audit = AuditEntry {
        user: "system:anonymous".into(),
        verb: parts.method.as_str().to_ascii_lowercase(),
        group: String::new(),
        resource: path.clone(),
        subresource: String::new(),
        namespace: String::new(),
        name: String::new(),
        code: 0,
    };
    if let Route::Resource(t) = &route {
        let def = &RESOURCES[t.res];
        audit.verb = verb_of(&parts.method, t, &query)
            .unwrap_or("unknown")
            .to_owned();
        audit.group = def.group.to_owned();
        audit.resource = def.plural.to_owned();
        audit.subresource = t.sub.clone().unwrap_or_default();
        audit.namespace = t.ns.clone().unwrap_or_default();
        audit.name = t.name.clone().unwrap_or_default();
    }
    let user = bearer(&parts).and_then(|t| cluster.authenticate(t));
    let response = match user {
        None => error_response(&ApiError::unauthorized()),
        Some(user) => {
            audit.user = user.name.clone();
            serve(&cluster, &user, route, &audit, parts, body, query).await
        }
    };
    audit.code = response.status().as_u16();
    cluster.record(audit);
    response
}

async fn serve(
    cluster: &Arc<Cluster>,
    user: &UserInfo,
    route: Route,
    audit: &AuditEntry,
    parts: http::request::Parts,
    body: Incoming,
    query: HashMap<String, String>,
) -> Response<Body> {
    let attrs = attributes(&route, audit);
    if let Some(policy) = cluster.policy()
        && matches!(policy.authorize(user, &attrs), Decision::Deny)
    {
        return error_response(&ApiError::forbidden(policy.forbidden_message(user, &attrs)));
    }
    if let Some(injected) = injected_faults(cluster).await {
        return error_response(&injected);
    }
    let t = match route {
        Route::Doc(doc) => return value_response(200, &doc, &[]),
        Route::Missing => return error_response(&ApiError::no_route()),
        Route::Resource(t) => t,
    };
    let bytes = match read_body(&parts.method, body).await {
        Ok(bytes) => bytes,
        Err(e) => return error_response(&e),
    };
    let req = Req {
        cluster: cluster.clone(),
        t,
        query,
        content_type: header_or(&parts, header::CONTENT_TYPE, "application/json"),
        user_agent: header_or(&parts, header::USER_AGENT, ""),
        body: bytes,
        warnings: Vec::new(),
    };
    let result = match audit.verb.as_str() {
        "get" => req.get(),
        "list" => req.list(),
        "watch" => req.watch(),
        "create" => req.create(),
        "update" => req.update(),
        "patch" => req.patch(),
        "delete" => req.delete(),
        "deletecollection" => req.delete_collection(),
        _ => Err(ApiError::method_not_allowed(parts.method.as_str())),
    };
    result.unwrap_or_else(|e| error_response(&e))
}

/// What RBAC decides on for a request: its verb, resource and names, or its path when it is
/// not for a resource (discovery, `/version`, a missing route).
fn attributes(route: &Route, audit: &AuditEntry) -> Attributes {
    match route {
        Route::Resource(_) => Attributes::Resource {
            verb: audit.verb.clone(),
            api_group: audit.group.clone(),
            resource: audit.resource.clone(),
            subresource: (!audit.subresource.is_empty()).then(|| audit.subresource.clone()),
            namespace: (!audit.namespace.is_empty()).then(|| audit.namespace.clone()),
            name: (!audit.name.is_empty()).then(|| audit.name.clone()),
        },
        _ => Attributes::NonResource {
            verb: audit.verb.clone(),
            path: audit.resource.clone(),
        },
    }
}

/// Applies the cluster's injected faults to one authorized request: waits out the latency,
/// then answers the injected failure, if one is due.
async fn injected_faults(cluster: &Cluster) -> Option<ApiError> {
    let latency = cluster.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match cluster.faults.take_failure()? {
        Failure::Internal => Some(ApiError::internal("kubesim: injected failure")),
        Failure::TooMany(after) => Some(ApiError::too_many_requests(after)),
    }
}

/// The body of a write (POST, PUT, PATCH, DELETE), refused past [`MAX_BODY`]; empty for
/// reads, whose body is not read.
async fn read_body(method: &Method, body: Incoming) -> Result<Bytes, ApiError> {
    if !matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        return Ok(Bytes::new());
    }
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(_) => Err(ApiError::too_large(MAX_BODY)),
    }
}

/// A request header as text, or `default` when it is missing or not visible ASCII.
fn header_or(parts: &http::request::Parts, name: header::HeaderName, default: &str) -> String {
    parts
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or(default)
        .to_owned()
}

/// Field manager and user agent of the writes the control endpoint makes.
const CONTROL_MANAGER: &str = "kubesim-control";

/// The resource an `apiVersion` and a kind (or plural) name, with its version.
fn control_target(api_version: &str, kind: &str) -> Result<(usize, String), ApiError> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    resources::find_kind(group, version, kind)
        .map(|res| (res, version.to_owned()))
        .ok_or_else(|| {
            ApiError::bad_request(format!("kubesim serves no {kind:?} in {api_version:?}"))
        })
}

/// A request as the control endpoint makes it: JSON body, the control field manager.
fn control_req(cluster: &Arc<Cluster>, t: Target, body: &Value) -> Req {
    Req {
        cluster: cluster.clone(),
        t,
        query: HashMap::from([("fieldManager".to_owned(), CONTROL_MANAGER.to_owned())]),
        content_type: "application/json".to_owned(),
        user_agent: CONTROL_MANAGER.to_owned(),
        body: Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
        warnings: Vec::new(),
    }
}

/// Creates the object in `body` (JSON or YAML naming its apiVersion and kind; a namespaced
/// object without a namespace goes to `default`), or replaces the stored object of that name
/// unconditionally, then writes its `status` through the status subresource if the kind has
/// one: the control endpoint's `POST /clusters/<c>/objects`. It goes through the create and
/// update paths of an API request (decoding, defaulting, validation, managedFields, the
/// store), so watches see exactly what an API write would show them. It skips
/// authentication, RBAC, injected latency and failures, counters and the audit log: it is a
/// test's hand on the cluster, not a request to it.
pub(crate) fn control_apply(
    cluster: &Arc<Cluster>,
    content_type: &str,
    body: &[u8],
) -> Response<Body> {
    control_apply_inner(cluster, content_type, body).unwrap_or_else(|e| error_response(&e))
}

fn control_apply_inner(
    cluster: &Arc<Cluster>,
    content_type: &str,
    body: &[u8],
) -> Result<Response<Body>, ApiError> {
    let mut v = parse_body(content_type, body)?;
    if !v.is_object() {
        return Err(ApiError::bad_request("the body must be one object"));
    }
    let api_version = v["apiVersion"].as_str().unwrap_or("").to_owned();
    let kind = v["kind"].as_str().unwrap_or("").to_owned();
    let (res, version) = control_target(&api_version, &kind)?;
    let def = &RESOURCES[res];
    let name = meta_str(&v, "name").to_owned();
    if name.is_empty() {
        return Err(ApiError::bad_request("metadata.name is required"));
    }
    let ns = def.namespaced.then(|| match meta_str(&v, "namespace") {
        "" => "default".to_owned(),
        ns => ns.to_owned(),
    });
    let exists = cluster
        .store()
        .get(res, ns.as_deref().unwrap_or(""), &name)
        .is_some();
    // A replace is unconditional: whatever resourceVersion the caller copied is ignored.
    if let Some(Value::Object(m)) = v.get_mut("metadata") {
        m.remove("resourceVersion");
    }
    let target = |sub: Option<&str>, named: bool| Target {
        res,
        version: version.clone(),
        ns: ns.clone(),
        name: named.then(|| name.clone()),
        sub: sub.map(str::to_owned),
    };
    let written = if exists {
        control_req(cluster, target(None, true), &v).update()?
    } else {
        control_req(cluster, target(None, false), &v).create()?
    };
    if v.get("status").is_none() || !def.has_status(&version) {
        return Ok(written);
    }
    // The main resource ignores status, as kube-apiserver does; a controller would write it
    // through the subresource next, and so does this.
    control_req(cluster, target(Some("status"), true), &v).update()
}

/// Deletes one object named by apiVersion, kind (or plural), namespace (ignored for
/// cluster-scoped kinds) and name, through the delete path of an API request (finalizers
/// included): the control endpoint's `DELETE /clusters/<c>/objects/...`.
pub(crate) fn control_delete(
    cluster: &Arc<Cluster>,
    api_version: &str,
    kind: &str,
    ns: Option<&str>,
    name: &str,
) -> Response<Body> {
    let inner = || -> Result<Response<Body>, ApiError> {
        let (res, version) = control_target(api_version, kind)?;
        let ns = match (RESOURCES[res].namespaced, ns) {
            (true, Some(ns)) => Some(ns.to_owned()),
            (true, None) => {
                return Err(ApiError::bad_request(format!(
                    "{kind} is namespaced: name its namespace"
                )));
            }
            (false, _) => None,
        };
        let t = Target {
            res,
            version,
            ns,
            name: Some(name.to_owned()),
            sub: None,
        };
        let mut req = control_req(cluster, t, &Value::Null);
        req.body = Bytes::new();
        req.delete()
    };
    inner().unwrap_or_else(|e| error_response(&e))
}

/// Parses a request body (JSON or YAML) sent with `content_type`.
fn parse_body(content_type: &str, body: &[u8]) -> Result<Value, ApiError> {
    let ct = content_type.split(';').next().unwrap_or("").trim();
    if ct.starts_with("application/vnd.kubernetes.protobuf") || ct == "application/cbor" {
        // kube-apiserver answers 415 for an encoding it does not take;
        // client-go (kubectl >= 1.32) then retries with JSON.
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {ct})"
        )));
    }
    if ct.ends_with("yaml") {
        let text = std::str::from_utf8(body)
            .map_err(|e| ApiError::bad_request(format!("body is not UTF-8: {e}")))?;
        serde_saphyr::from_str::<Value>(text)
            .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: {e}")))
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml: {e}")))
    }
}

struct Req {
    cluster: Arc<Cluster>,
    t: Target,
    query: HashMap<String, String>,
    content_type: String,
    user_agent: String,
    body: Bytes,
    warnings: Vec<String>,
}

/// An object as served in `version` (custom resources are stored in their first version).
fn encode_as(res: usize, version: &str, obj: &Obj) -> Bytes {
    let def = &RESOURCES[res];
    if version == def.storage_version() {
        return obj.json.clone();
    }
    let mut v = obj.value();
    v["apiVersion"] = json!(def.api_version(version));
    validate::prune_for_version(res, version, &mut v);
    Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
}

fn selectors(
    res: usize,
    q: &HashMap<String, String>,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let label = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let field = FieldSelector::parse(
        q.get("fieldSelector").map(String::as_str).unwrap_or(""),
        RESOURCES[res].field_selectors,
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((label, field))
}

fn matches(obj: &Obj, ns: Option<&str>, label: &LabelSelector, field: &FieldSelector) -> bool {
    ns.is_none_or(|n| obj.namespace() == n)
        && label.matches(obj.labels())
        // Only a field selector needs the decoded object.
        && (field.is_empty() || field.matches(&obj.value()))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    v: String,
    rv: u64,
    start: String,
}

/// The key a list is ordered by, which a continue token resumes after.
fn list_key(o: &Obj) -> String {
    store::key(o.namespace(), o.name())
}

/// One page of a list: the `items` after the key `after` (all when empty) that the selectors
/// match, at most `limit` of them (all when 0); and how many more match past the page.
fn select_page(
    items: &[Arc<Obj>],
    after: &str,
    limit: usize,
    label: &LabelSelector,
    field: &FieldSelector,
) -> (Vec<Arc<Obj>>, usize) {
    let mut selected = Vec::new();
    let mut remaining = 0usize;
    for obj in items {
        if !after.is_empty() && list_key(obj).as_str() <= after {
            continue;
        }
        if !matches(obj, None, label, field) {
            continue;
        }
        if limit > 0 && selected.len() == limit {
            remaining += 1;
            continue;
        }
        selected.push(obj.clone());
    }
    (selected, remaining)
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s}")))
}

impl Req {
    fn def(&self) -> &'static resources::ResourceDef {
        &RESOURCES[self.t.res]
    }

    fn ns(&self) -> &str {
        self.t.ns.as_deref().unwrap_or("")
    }

    fn name(&self) -> &str {
        self.t.name.as_deref().unwrap_or("")
    }

    fn param(&self, key: &str) -> Option<&str> {
        self.query.get(key).map(String::as_str)
    }

    fn check_sub(&self) -> Result<(), ApiError> {
        match self.t.sub.as_deref() {
            None => Ok(()),
            Some("status") if self.def().has_status(&self.t.version) => Ok(()),
            Some(_) => Err(ApiError::no_route()),
        }
    }

    fn get(&self) -> Result<Response<Body>, ApiError> {
        self.check_sub()?;
        let def = self.def();
        let obj = self
            .cluster
            .store()
            .get(self.t.res, self.ns(), self.name())
            .ok_or_else(|| ApiError::not_found(def.group, def.plural, self.name()))?;
        Ok(json_response(
            200,
            encode_as(self.t.res, &self.t.version, &obj),
            &[],
        ))
    }

    fn list(&self) -> Result<Response<Body>, ApiError> {
        if self.t.sub.is_some() {
            return Err(ApiError::no_route());
        }
        let (label, field) = selectors(self.t.res, &self.query)?;
        let limit: usize = match self.param("limit") {
            Some(l) if !l.is_empty() => l
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid limit: {l}")))?,
            _ => 0,
        };
        let (at, start) = self.list_read_point()?;
        let (list_rv, items) = match self
            .cluster
            .store()
            .list(self.t.res, self.t.ns.as_deref(), at)
        {
            Ok(r) => r,
            Err(e) if e.code == 410 && !start.is_empty() => {
                return Err(ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                ));
            }
            Err(e) => return Err(e),
        };
        let after = start.trim_end_matches('\0');
        let (selected, remaining) = select_page(&items, after, limit, &label, &field);
        let mut meta = json!({"resourceVersion": list_rv.to_string()});
        if remaining > 0
            && let Some(last) = selected.last()
        {
            let token = ContinueToken {
                v: "meta.k8s.io/v1".into(),
                rv: list_rv,
                start: format!("{}\0", list_key(last)),
            };
            let raw = serde_json::to_vec(&token).unwrap_or_default();
            meta["continue"] = json!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw));
            if label.is_empty() && self.param("fieldSelector").unwrap_or("").is_empty() {
                meta["remainingItemCount"] = json!(remaining);
            }
        }
        Ok(json_response(200, self.encode_list(meta, &selected), &[]))
    }

    /// Where a list reads, from its `continue` token or its `resourceVersion` and
    /// `resourceVersionMatch`, with kube-apiserver's refusals of the combinations it refuses;
    /// and the key the page starts after (from the token, else empty).
    fn list_read_point(&self) -> Result<(ReadAt, String), ApiError> {
        let rv = self.param("resourceVersion").unwrap_or("");
        let rv_match = self.param("resourceVersionMatch").unwrap_or("");
        if let Some(token) = self.param("continue").filter(|c| !c.is_empty()) {
            if !rv.is_empty() {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(token.trim_end_matches('='))
                .map_err(|_| {
                    ApiError::bad_request("continue key is not valid: illegal base64 data")
                })?;
            let c: ContinueToken = serde_json::from_slice(&raw)
                .map_err(|e| ApiError::bad_request(format!("continue key is not valid: {e}")))?;
            return Ok((ReadAt::Exact(c.rv), c.start));
        }
        let at = match (rv, rv_match) {
            ("", "") | ("0", "" | "NotOlderThan") => ReadAt::Latest,
            ("", _) => {
                return Err(ApiError::bad_request(
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            (_, "Exact") => ReadAt::Exact(parse_rv(rv)?),
            (_, "" | "NotOlderThan") => {
                let want = parse_rv(rv)?;
                let have = self.cluster.store().resource_version();
                if want > have {
                    return Err(ApiError::too_large_resource_version(want, have));
                }
                ReadAt::Latest
            }
            (_, other) => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch: Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\""
                )));
            }
        };
        Ok((at, String::new()))
    }

    /// A `<Kind>List` with `metadata` and the `items`, each encoded in the request's version,
    /// written without decoding the stored objects again.
    fn encode_list(&self, metadata: Value, items: &[Arc<Obj>]) -> Bytes {
        let def = self.def();
        let head = json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(&self.t.version), "metadata": metadata});
        let mut out = BytesMut::new();
        let head = serde_json::to_vec(&head).unwrap_or_default();
        out.extend_from_slice(&head[..head.len() - 1]);
        out.extend_from_slice(b",\"items\":[");
        for (i, obj) in items.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b",");
            }
            out.extend_from_slice(&encode_as(self.t.res, &self.t.version, obj));
        }
        out.extend_from_slice(b"]}");
        out.freeze()
    }

    fn watch(&self) -> Result<Response<Body>, ApiError> {
        if self.t.sub.is_some() {
            return Err(ApiError::no_route());
        }
        let (label, mut field) = selectors(self.t.res, &self.query)?;
        if let Some(name) = &self.t.name {
            // A watch on an item URL is a watch filtered to that name.
            field = FieldSelector::parse(
                &format!("metadata.name={name}"),
                RESOURCES[self.t.res].field_selectors,
            )
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        self.watch_with(label, field)
    }

    fn watch_with(
        &self,
        label: LabelSelector,
        field: FieldSelector,
    ) -> Result<Response<Body>, ApiError> {
        let truthy = |k: &str| matches!(self.param(k), Some("true" | "1"));
        let bookmarks = truthy("allowWatchBookmarks");
        let send_initial = truthy("sendInitialEvents");
        let rv = self.param("resourceVersion").unwrap_or("");
        let rv_match = self.param("resourceVersionMatch").unwrap_or("");
        if send_initial && (rv_match != "NotOlderThan" || !bookmarks) {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                vec![Cause {
                    kind: "FieldValueForbidden".into(),
                    message: "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan and allowWatchBookmarks".into(),
                    field: "sendInitialEvents".into(),
                }],
            ));
        }
        if !send_initial && !rv_match.is_empty() {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                vec![Cause {
                    kind: "FieldValueForbidden".into(),
                    message: "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided".into(),
                    field: "resourceVersionMatch".into(),
                }],
            ));
        }
        let (from, initial) = match rv {
            "" | "0" => (None, true),
            rv => (Some(parse_rv(rv)?), send_initial),
        };
        let timeout = match self.param("timeoutSeconds") {
            Some(s) if !s.is_empty() => Duration::from_secs(
                s.parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {s}")))?,
            ),
            _ => self.cluster.settings.watch_timeout,
        };
        let (tx, rx) = mpsc::channel::<Bytes>(1024);
        let start = self.cluster.store().watch(self.t.res, from, initial);
        let watch = Watch {
            res: self.t.res,
            version: self.t.version.clone(),
            ns: self.t.ns.clone(),
            label,
            field,
            tx,
        };
        match start {
            Ok(start) => {
                let cluster = self.cluster.clone();
                tokio::spawn(watch.run(cluster, start, bookmarks, send_initial, timeout));
            }
            Err(e) if e.code == 410 => {
                // kube-apiserver reports a too-old resourceVersion inside the stream.
                let line = event_line(
                    "ERROR",
                    &Bytes::from(serde_json::to_vec(&e.to_status()).unwrap_or_default()),
                );
                let _ = watch.tx.try_send(line);
            }
            Err(e) => return Err(e),
        }
        let mut resp = Response::new(BoxBody::new(ChannelBody { rx }));
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }

    fn manager(&self) -> Result<String, ApiError> {
        let m = match self.param("fieldManager") {
            Some(m) if !m.is_empty() => m.to_owned(),
            _ => self.user_agent.split('/').next().unwrap_or("").to_owned(),
        };
        if m.len() > 128 {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause {
                    kind: "FieldValueTooLong".into(),
                    message: "Too long: may not be more than 128 bytes".into(),
                    field: "fieldManager".into(),
                }],
            ));
        }
        Ok(m)
    }

    fn dry_run(&self) -> bool {
        self.param("dryRun") == Some("All")
    }

    /// Validates `v` (with the stored `old` on update) as the store will take it: a Service
    /// first has its IP family fields settled as kube's registry does before it validates, so
    /// the checks see the policy and families it will be stored with. The store settles them
    /// again on the object itself; `v` stays as the client sent it, for managedFields.
    fn validate(&self, v: &Value, old: Option<&Value>) -> Result<(), ApiError> {
        if self.t.res != SERVICES {
            return validate::validate(self.t.res, v, old);
        }
        let families = self.cluster.store().service_families();
        let mut prepared = v.clone();
        validate::service::prepare(&mut prepared, old, families)?;
        validate::validate(self.t.res, &prepared, old)
    }

    /// Parses the request body (JSON or YAML).
    fn body_value(&self) -> Result<Value, ApiError> {
        parse_body(&self.content_type, &self.body)
    }

    /// Decodes `v` against the schema and applies `fieldValidation`.
    fn decode(&mut self, v: Value) -> Result<Value, ApiError> {
        let decoded = validate::decode(self.t.res, &self.t.version, v)?;
        if !decoded.unknown.is_empty() {
            let list: Vec<String> = decoded
                .unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect();
            match self.param("fieldValidation").unwrap_or("Warn") {
                "Strict" => {
                    let kind = self.def().kind;
                    return Err(ApiError::bad_request(format!(
                        "{kind} in version \"{}\" cannot be handled as a {kind}: strict decoding error: {}",
                        self.t.version,
                        list.join(", ")
                    )));
                }
                "Ignore" => {}
                _ => self.warnings.extend(list),
            }
        }
        let mut object = decoded.object;
        // Stored objects carry the storage version.
        object["apiVersion"] = json!(self.def().api_version(self.def().storage_version()));
        Ok(object)
    }

    fn check_identity(&self, v: &mut Value, name_from_url: bool) -> Result<(), ApiError> {
        let body_ns = meta_str(v, "namespace").to_owned();
        if self.def().namespaced {
            if !body_ns.is_empty() && body_ns != self.ns() {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            v["metadata"]["namespace"] = json!(self.ns());
        } else if let Some(Value::Object(m)) = v.get_mut("metadata") {
            m.remove("namespace");
        }
        if name_from_url {
            let body_name = meta_str(v, "name").to_owned();
            if body_name.is_empty() {
                v["metadata"]["name"] = json!(self.name());
            } else if body_name != self.name() {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({})",
                    self.name()
                )));
            }
        }
        Ok(())
    }

    fn respond(&self, code: u16, obj: &Obj) -> Response<Body> {
        json_response(
            code,
            encode_as(self.t.res, &self.t.version, obj),
            &self.warnings,
        )
    }

    fn create(mut self) -> Result<Response<Body>, ApiError> {
        if self.t.sub.is_some() {
            return Err(ApiError::method_not_allowed("POST"));
        }
        let mut v = self.body_value()?;
        if !v.is_object() {
            return Err(ApiError::bad_request(
                "Object 'Kind' is missing in the request body",
            ));
        }
        if !v.get("metadata").is_some_and(Value::is_object) {
            v["metadata"] = json!({});
        }
        let mut v = self.decode(v)?;
        self.check_identity(&mut v, false)?;
        let manager = self.manager()?;
        let def = self.def();
        if self.def().has_status(&self.t.version)
            && let Value::Object(m) = &mut v
        {
            m.remove("status");
        }
        if let Some(Value::Object(m)) = v.get_mut("metadata") {
            m.remove("managedFields");
        }
        validate::default(self.t.res, &mut v);
        let generate = meta_str(&v, "generateName").to_owned();
        if meta_str(&v, "name").is_empty() && !generate.is_empty() {
            v["metadata"]["name"] = json!(format!("{generate}{}", random_suffix()));
        }
        self.validate(&v, None)?;
        let v = ssa::update(
            None,
            &v,
            &manager,
            &def.api_version(&self.t.version),
            None,
            &now(),
            &ssa::Schema::for_kind(def.group, def.kind),
        )
        .map_err(ssa_error(def, meta_str(&v, "name")))?;
        if self.dry_run() {
            return Ok(value_response(201, &v, &self.warnings));
        }
        let obj = self.cluster.store().create(self.t.res, v)?;
        Ok(self.respond(201, &obj))
    }

    /// The stored object, or 404.
    fn current(&self) -> Result<Arc<Obj>, ApiError> {
        let def = self.def();
        self.cluster
            .store()
            .get(self.t.res, self.ns(), self.name())
            .ok_or_else(|| ApiError::not_found(def.group, def.plural, self.name()))
    }

    /// Keeps the part of `new` that this endpoint may change: the status subresource changes
    /// only status; the main resource of a kind with status never changes status.
    fn reset_fields(&self, old: &Value, new: &mut Value) {
        if !self.def().has_status(&self.t.version) {
            return;
        }
        if self.t.sub.as_deref() == Some("status") {
            let status = new.get("status").cloned();
            let rv = meta_str(new, "resourceVersion").to_owned();
            let mut kept = old.clone();
            match status {
                Some(s) => kept["status"] = s,
                None => {
                    if let Value::Object(m) = &mut kept {
                        m.remove("status");
                    }
                }
            }
            kept["metadata"]["resourceVersion"] = json!(rv);
            *new = kept;
        } else {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Value::Object(m) = new {
                        m.remove("status");
                    }
                }
            }
        }
    }

    /// The common end of update and non-apply patch: defaults, validation, managedFields, store.
    fn store_update(&self, old: &Arc<Obj>, mut new: Value) -> Result<Response<Body>, ApiError> {
        let def = self.def();
        let manager = self.manager()?;
        let old_value = old.value();
        self.reset_fields(&old_value, &mut new);
        // managedFields absent = keep; present = the client's (an empty list clears them).
        if new.pointer("/metadata/managedFields").is_none()
            && let Some(mf) = old_value.pointer("/metadata/managedFields")
        {
            new["metadata"]["managedFields"] = mf.clone();
        }
        validate::default(self.t.res, &mut new);
        self.validate(&new, Some(&old_value))?;
        let new = ssa::update(
            Some(&old_value),
            &new,
            &manager,
            &def.api_version(&self.t.version),
            self.t.sub.as_deref(),
            &now(),
            &ssa::Schema::for_kind(def.group, def.kind),
        )
        .map_err(ssa_error(def, self.name()))?;
        if self.dry_run() {
            return Ok(value_response(200, &new, &self.warnings));
        }
        let obj = self.cluster.store().update(self.t.res, new)?;
        Ok(self.respond(200, &obj))
    }

    fn update(mut self) -> Result<Response<Body>, ApiError> {
        self.check_sub()?;
        let v = self.body_value()?;
        let mut v = self.decode(v)?;
        self.check_identity(&mut v, true)?;
        let old = self.current()?;
        self.store_update(&old, v)
    }

    fn patch(mut self) -> Result<Response<Body>, ApiError> {
        self.check_sub()?;
        let def = self.def();
        let Some(ty) = PatchType::from_content_type(&self.content_type) else {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml{}",
                if def.custom {
                    ""
                } else {
                    ", application/strategic-merge-patch+json"
                }
            )));
        };
        if ty == PatchType::Strategic && def.custom {
            return Err(ApiError::unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        if ty == PatchType::Apply {
            return self.apply();
        }
        if self.param("force").is_some() {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause {
                    kind: "FieldValueForbidden".into(),
                    message: "Forbidden: may not be specified for non-apply patch".into(),
                    field: "force".into(),
                }],
            ));
        }
        let old = self.current()?;
        let mut served: Value =
            serde_json::from_slice(&encode_as(self.t.res, &self.t.version, &old))
                .map_err(|e| ApiError::internal(e.to_string()))?;
        if let Value::Object(m) = &mut served {
            m.entry("apiVersion")
                .or_insert(json!(def.api_version(&self.t.version)));
        }
        let kind = def.kind;
        let patched = apply_patch(&served, ty, &self.body, &|path| merge_key_for(kind, path))?;
        let mut v = self.decode(patched)?;
        self.check_identity(&mut v, true)?;
        self.store_update(&old, v)
    }

    fn apply(mut self) -> Result<Response<Body>, ApiError> {
        let def = self.def();
        let manager = self.field_manager()?;
        let force = matches!(self.param("force"), Some("true" | "1"));
        let config = self.applied_config()?;
        let status_sub = self.t.sub.as_deref() == Some("status");
        let old = self.cluster.store().get(self.t.res, self.ns(), self.name());
        if old.is_none() && status_sub {
            return Err(ApiError::not_found(def.group, def.plural, self.name()));
        }
        let schema = ssa::Schema::for_kind(def.group, def.kind);
        let old_value = old.as_ref().map(|o| o.value());
        let mut merged = ssa::apply(
            old_value.as_ref(),
            &config,
            &manager,
            force,
            &def.api_version(&self.t.version),
            self.t.sub.as_deref(),
            &now(),
            &schema,
        )
        .map_err(ssa_error(def, self.name()))?;
        merged["apiVersion"] = json!(def.api_version(def.storage_version()));
        match old {
            None => {
                if let Some(Value::Object(m)) = merged.get_mut("metadata") {
                    m.remove("resourceVersion");
                }
                validate::default(self.t.res, &mut merged);
                self.validate(&merged, None)?;
                if self.dry_run() {
                    return Ok(value_response(201, &merged, &self.warnings));
                }
                let obj = self.cluster.store().create(self.t.res, merged)?;
                Ok(self.respond(201, &obj))
            }
            Some(old) => {
                merged["metadata"]["resourceVersion"] = json!(old.resource_version().to_string());
                validate::default(self.t.res, &mut merged);
                self.validate(&merged, old_value.as_ref())?;
                if self.dry_run() {
                    return Ok(value_response(200, &merged, &self.warnings));
                }
                let obj = self.cluster.store().update(self.t.res, merged)?;
                Ok(self.respond(200, &obj))
            }
        }
    }

    /// The `fieldManager` of an apply, which kube requires.
    fn field_manager(&self) -> Result<String, ApiError> {
        match self.param("fieldManager") {
            Some(m) if !m.is_empty() => Ok(m.to_owned()),
            _ => Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause {
                    kind: "FieldValueRequired".into(),
                    message: "Required value: is required for apply patch".into(),
                    field: "fieldManager".into(),
                }],
            )),
        }
    }

    /// The configuration an apply sends, as server-side apply merges it: decoded and checked
    /// against the URL, without the fields a client cannot own (managedFields,
    /// resourceVersion), cut to the status on the status subresource and without it elsewhere,
    /// and with the defaulted keys of associative lists filled in.
    fn applied_config(&mut self) -> Result<Value, ApiError> {
        let config = self.body_value()?;
        if !config.is_object() {
            return Err(ApiError::bad_request(
                "error decoding YAML: the applied configuration is not an object",
            ));
        }
        let mut config = self.decode(config)?;
        self.check_identity(&mut config, true)?;
        if let Some(Value::Object(m)) = config.get_mut("metadata") {
            m.remove("managedFields");
            m.remove("resourceVersion");
        }
        let status_sub = self.t.sub.as_deref() == Some("status");
        if self.def().has_status(&self.t.version)
            && let Value::Object(m) = &mut config
        {
            if status_sub {
                m.retain(|k, _| {
                    matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")
                });
            } else {
                m.remove("status");
            }
        }
        // Associative-list keys with defaults must be present before merging (protocol on Service ports).
        if self.t.res == SERVICES
            && let Some(Value::Array(ports)) = config.pointer_mut("/spec/ports")
        {
            for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                p.entry("protocol").or_insert(json!("TCP"));
            }
        }
        Ok(config)
    }

    fn delete_options(&self) -> Result<(Option<String>, Option<String>), ApiError> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok((None, None));
        }
        let v: Value = serde_json::from_slice(&self.body)
            .map_err(|e| ApiError::bad_request(format!("DeleteOptions: {e}")))?;
        let pre = v.get("preconditions");
        let field = |f: &str| {
            pre.and_then(|p| p.get(f))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Ok((field("uid"), field("resourceVersion")))
    }

    fn delete(self) -> Result<Response<Body>, ApiError> {
        if self.t.sub.is_some() {
            return Err(ApiError::method_not_allowed("DELETE"));
        }
        let def = self.def();
        let (uid, rv) = self.delete_options()?;
        if self.dry_run() {
            let obj = self.current()?;
            return Ok(self.respond(200, &obj));
        }
        let outcome = self.cluster.store().delete(
            self.t.res,
            self.ns(),
            self.name(),
            uid.as_deref(),
            rv.as_deref(),
        )?;
        Ok(match outcome {
            Deleted::Pending(obj) => self.respond(200, &obj),
            Deleted::Gone(obj) => value_response(
                200,
                &success(
                    obj.name(),
                    def.group,
                    def.plural,
                    meta_str(&obj.value(), "uid"),
                ),
                &[],
            ),
        })
    }

    fn delete_collection(self) -> Result<Response<Body>, ApiError> {
        let def = self.def();
        let (label, field) = selectors(self.t.res, &self.query)?;
        let mut store = self.cluster.store();
        let (_, items) = store.list(self.t.res, self.t.ns.as_deref(), ReadAt::Latest)?;
        let mut out = Vec::new();
        for obj in items.iter().filter(|o| matches(o, None, &label, &field)) {
            if self.dry_run() {
                out.push(obj.value());
                continue;
            }
            match store.delete(self.t.res, obj.namespace(), obj.name(), None, None)? {
                Deleted::Gone(o) | Deleted::Pending(o) => out.push(o.value()),
            }
        }
        let rv = store.resource_version();
        drop(store);
        let list = json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(&self.t.version),
                          "metadata": {"resourceVersion": rv.to_string()}, "items": out});
        Ok(value_response(200, &list, &[]))
    }
}

fn ssa_error<'a>(
    def: &'static resources::ResourceDef,
    name: &'a str,
) -> impl Fn(ssa::SsaError) -> ApiError + 'a {
    move |e| match e {
        ssa::SsaError::Conflicts { message, conflicts } => {
            let causes = conflicts
                .into_iter()
                .map(|c| Cause {
                    kind: "FieldManagerConflict".into(),
                    message: format!("conflict with {}", c.owner),
                    field: c.field,
                })
                .collect();
            ApiError::apply_conflict(def.group, def.plural, name, message, causes)
        }
        ssa::SsaError::Invalid(msg) => ApiError::invalid(
            def.group,
            def.kind,
            name,
            vec![Cause {
                kind: "FieldValueInvalid".into(),
                message: msg,
                field: String::new(),
            }],
        ),
    }
}

fn random_suffix() -> String {
    // kube's generateName alphabet: no vowels, no confusable characters.
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes
        .iter()
        .take(5)
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

fn event_line(ty: &str, object: &Bytes) -> Bytes {
    let mut out = BytesMut::with_capacity(object.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(ty.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    out.freeze()
}

/// A streamed response body fed by a channel (the watch stream).
struct ChannelBody {
    rx: mpsc::Receiver<Bytes>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

/// One open watch.
struct Watch {
    res: usize,
    version: String,
    ns: Option<String>,
    label: LabelSelector,
    field: FieldSelector,
    tx: mpsc::Sender<Bytes>,
}

impl Watch {
    fn selected(&self, obj: &Obj) -> bool {
        matches(obj, self.ns.as_deref(), &self.label, &self.field)
    }

    async fn send(&self, ty: &str, obj: &Obj) -> bool {
        self.tx
            .send(event_line(ty, &encode_as(self.res, &self.version, obj)))
            .await
            .is_ok()
    }

    async fn bookmark(&self, rv: u64, initial_end: bool) -> bool {
        let def = &RESOURCES[self.res];
        let mut meta = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({"kind": def.kind, "apiVersion": def.api_version(&self.version), "metadata": meta});
        let bytes = Bytes::from(serde_json::to_vec(&object).unwrap_or_default());
        self.tx.send(event_line("BOOKMARK", &bytes)).await.is_ok()
    }

    /// Sends one change as this watcher sees it (selector transitions become ADDED/DELETED).
    async fn change(&self, c: &Change) -> bool {
        if c.res != self.res {
            return true;
        }
        let now = self.selected(&c.object);
        let before = c.prev.as_ref().is_some_and(|p| self.selected(p));
        let ty = match c.kind {
            EventType::Modified if now && before => EventType::Modified,
            EventType::Added | EventType::Modified if now => EventType::Added,
            EventType::Modified if before => EventType::Deleted,
            EventType::Deleted if before || now => EventType::Deleted,
            _ => return true,
        };
        self.send(ty.as_str(), &c.object).await
    }

    async fn run(
        self,
        cluster: Arc<Cluster>,
        start: store::WatchStart,
        bookmarks: bool,
        initial_end: bool,
        timeout: Duration,
    ) {
        let cut = cluster.watch_cut();
        let every = cluster
            .settings
            .bookmark_interval
            .max(Duration::from_millis(10));
        drop(cluster);
        for obj in &start.initial {
            if self.selected(obj) && !self.send("ADDED", obj).await {
                return;
            }
        }
        if initial_end && !self.bookmark(start.rv, true).await {
            return;
        }
        for c in &start.backlog {
            if !self.change(c).await {
                return;
            }
        }
        let mut pos = start.rv;
        let mut rx = start.rx;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                _ = cut.cancelled() => return,
                _ = &mut deadline => return,
                _ = self.tx.closed() => return,
                _ = tick.tick(), if bookmarks => {
                    if !self.bookmark(pos, false).await {
                        return;
                    }
                }
                r = rx.recv() => match r {
                    Ok(c) => {
                        if c.rv <= pos {
                            continue;
                        }
                        pos = c.rv;
                        if !self.change(&c).await {
                            return;
                        }
                    }
                    // A watcher that fell this far behind is closed, as kube-apiserver closes slow watchers.
                    Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests;
