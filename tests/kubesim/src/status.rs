//! `Status` errors exactly as kube-apiserver writes them: HTTP code, `reason`, `message` and
//! `details`. Every failed request leaves the server through this type.
//!
//! It owns only the wording and the shape; deciding *when* a request fails is the caller's job.

use serde_json::{Value, json};

/// One entry of `details.causes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `reason` of the cause, e.g. `FieldValueRequired`, `FieldManagerConflict`.
    pub kind: String,
    /// Human-readable text.
    pub message: String,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
}

/// A failed request, rendered as a `meta.k8s.io/v1 Status` body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code, also the Status `code`.
    pub code: u16,
    /// Machine-readable reason (`NotFound`, `Conflict`, `Expired`…).
    pub reason: &'static str,
    /// The message users see, e.g. in `kubectl` errors.
    pub message: String,
    /// `details.name`, `details.group`, `details.kind`.
    pub details: Option<Box<(String, String, String)>>,
    /// `details.causes`.
    pub causes: Vec<Cause>,
    /// `details.retryAfterSeconds`, also sent as `Retry-After`.
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            causes: Vec::new(),
            retry_after: None,
        }
    }

    fn with_details(mut self, name: &str, group: &str, kind: &str) -> Self {
        self.details = Some(Box::new((
            name.to_owned(),
            group.to_owned(),
            kind.to_owned(),
        )));
        self
    }

    /// 404: `services "web" not found`.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, plural)),
        )
        .with_details(name, group, plural)
    }

    /// 404 for a URL that names no resource: the bare `404 page not found` kube serves as Status.
    pub fn no_route() -> Self {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 409: `services "web" already exists`.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, plural)),
        )
        .with_details(name, group, plural)
    }

    /// 409: a stale resourceVersion or a failed precondition.
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, plural)
            ),
        )
        .with_details(name, group, plural)
    }

    /// 409 from server-side apply, with one `FieldManagerConflict` cause per field.
    pub fn apply_conflict(
        group: &str,
        plural: &str,
        name: &str,
        message: String,
        causes: Vec<Cause>,
    ) -> Self {
        let mut e = ApiError::new(409, "Conflict", message).with_details(name, group, plural);
        e.causes = causes;
        e
    }

    /// 422: `Service "web" is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive`.
    ///
    /// The kind is qualified by its group (`EndpointSlice.discovery.k8s.io "web-x" is invalid: …`)
    /// as kube's `NewInvalid` prints a `GroupKind`; only kubectl shortens it, on its own side.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let list: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let joined = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        let mut e = ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {joined}", qualified(group, kind)),
        )
        .with_details(name, group, kind);
        e.causes = causes;
        e
    }

    /// 400 BadRequest with the given message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// 422 for a JSON patch whose operations fail (kube reports these as Invalid).
    pub fn invalid_patch(message: impl Into<String>) -> Self {
        ApiError::new(422, "Invalid", message)
    }

    /// 413 for a body over kube's request size limit.
    pub fn too_large(limit: usize) -> Self {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 401 for a missing or unknown token.
    pub fn unauthorized() -> Self {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 with RBAC's message.
    pub fn forbidden(message: String) -> Self {
        ApiError::new(403, "Forbidden", message)
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(method: &str) -> Self {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// 410 Gone, reason Expired: a resourceVersion or continue token older than the retained history.
    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    /// 415 for a patch content type the resource cannot take.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    /// 429 with `Retry-After`.
    pub fn too_many_requests(retry_after: u32) -> Self {
        let mut e = ApiError::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        );
        e.retry_after = Some(retry_after);
        e
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }

    /// 504 for a resourceVersion newer than the server has.
    pub fn too_large_resource_version(rv: u64, current: u64) -> Self {
        let mut e = ApiError::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {rv}, current: {current}"),
        );
        e.causes.push(Cause {
            kind: "ResourceVersionTooLarge".into(),
            message: "Too large resource version".into(),
            field: String::new(),
        });
        e.retry_after = Some(1);
        e
    }

    /// 403 for a write into a namespace that is being deleted.
    pub fn namespace_terminating(namespace: &str) -> Self {
        ApiError::new(
            403,
            "Forbidden",
            format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ),
        )
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        let mut details = serde_json::Map::new();
        if let Some(d) = &self.details {
            let (name, group, kind) = &**d;
            details.insert("name".into(), json!(name));
            if !group.is_empty() {
                details.insert("group".into(), json!(group));
            }
            details.insert("kind".into(), json!(kind));
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|c| {
                    let mut m = serde_json::Map::new();
                    m.insert("reason".into(), json!(c.kind));
                    m.insert("message".into(), json!(c.message));
                    if !c.field.is_empty() {
                        m.insert("field".into(), json!(c.field));
                    }
                    Value::Object(m)
                })
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(after) = self.retry_after {
            details.insert("retryAfterSeconds".into(), json!(after));
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

/// `services` or `endpointslices.discovery.k8s.io`: how kube names a resource (or, with a kind,
/// a `GroupKind`: `EndpointSlice.discovery.k8s.io`) in messages.
pub(crate) fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}

/// A `FieldValueRequired`/`FieldValueInvalid`… cause.
pub(crate) fn cause(kind: &str, field: impl Into<String>, message: impl Into<String>) -> Cause {
    Cause {
        kind: kind.to_owned(),
        message: message.into(),
        field: field.into(),
    }
}

/// A `metav1.Status` with `status: Success`, as returned by an immediate delete.
pub(crate) fn success(name: &str, group: &str, kind: &str, uid: &str) -> Value {
    let mut details = json!({"name": name, "kind": kind, "uid": uid});
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}
