//! The schemas of the MCS API CRDs (`serviceexports` and `serviceimports` in
//! `multicluster.x-k8s.io`, kubernetes-sigs/mcs-api v0.5.0) and of the About API CRD
//! (`clusterproperties.about.k8s.io`, kubernetes-sigs/about-api), the way kube-apiserver applies
//! a CRD's structural schema: unknown fields are pruned, and a body that breaks the schema (wrong
//! type, missing required field, value outside an enum, too many items, duplicate list-map key)
//! is a 422 Invalid with the openapi validator's messages.
//!
//! Each of these CRDs serves every version with one schema, so nothing here depends on the
//! version (but the version named in the 400 for malformed metadata). It owns only the schema:
//! the served resources are in [`crate::resources`], the list semantics for server-side apply
//! in [`crate::ssa::Schema::for_kind`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::kubemsg::go_quote;
use crate::resources::ResourceDef;
use crate::status::{ApiError, Cause, cause};

/// `ServiceExport`: spec holds only the annotations and labels to export.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServiceExport {
    #[serde(skip_serializing_if = "Option::is_none")]
    api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<ServiceExportSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<ServiceExportStatus>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServiceExportSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    exported_annotations: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exported_labels: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServiceExportStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    conditions: Option<Vec<Condition>>,
}

/// `metav1.Condition`. Every field is optional here so that a missing one is the schema's 422
/// `Required value`, not a decode error.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Condition {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    type_: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_transition_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// `ServiceImport`. The v1alpha1 and v1beta1 schemas of mcs-api v0.5.0 are identical (v1alpha1
/// already has ipFamilies, sessionAffinity, internalTrafficPolicy and trafficDistribution).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServiceImport {
    #[serde(skip_serializing_if = "Option::is_none")]
    api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<ServiceImportSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<ServiceImportStatus>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServiceImportSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    internal_traffic_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip_families: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ips: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ports: Option<Vec<ServicePort>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_affinity: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_affinity_config: Option<SessionAffinityConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traffic_distribution: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    type_: Option<String>,
}

/// A ServiceImport port. `port` is `format: int32` in the CRD, which kube-apiserver does not
/// range-check, hence i64.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServicePort {
    #[serde(skip_serializing_if = "Option::is_none")]
    app_protocol: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    protocol: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct SessionAffinityConfig {
    #[serde(rename = "clientIP", skip_serializing_if = "Option::is_none")]
    client_ip: Option<ClientIpConfig>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClientIpConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_seconds: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServiceImportStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    clusters: Option<Vec<ClusterStatus>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    conditions: Option<Vec<Condition>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ClusterStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<String>,
}

/// `ClusterProperty` (KEP-2149).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClusterProperty {
    #[serde(skip_serializing_if = "Option::is_none")]
    api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<ClusterPropertySpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<ClusterPropertyStatus>,
}

/// The about-api Go type marks `value` `Maxlength=128000` (sic), a marker controller-gen does
/// not know, so the published CRD has `minLength: 1` and no maximum; kubesim serves the CRD.
#[derive(Debug, Serialize, Deserialize)]
struct ClusterPropertySpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
}

/// The status schema is `type: object` without properties: everything in it is pruned.
#[derive(Debug, Serialize, Deserialize)]
struct ClusterPropertyStatus {}

/// Decodes `body` through the kind's schema (pruning unknown fields).
pub(super) fn decode(def: &ResourceDef, version: &str, body: &Value) -> Result<Value, ApiError> {
    match def.kind {
        "ServiceExport" => typed::<ServiceExport>(def, version, body),
        "ServiceImport" => typed::<ServiceImport>(def, version, body),
        _ => typed::<ClusterProperty>(def, version, body),
    }
}

fn typed<T: DeserializeOwned + Serialize>(
    def: &ResourceDef,
    version: &str,
    body: &Value,
) -> Result<Value, ApiError> {
    let typed: T = serde_path_to_error::deserialize(body).map_err(|e| {
        let (path, inner) = (e.path().to_string(), e.inner().to_string());
        type_error(def, version, body, &path, &inner)
    })?;
    serde_json::to_value(&typed).map_err(|e| ApiError::internal(e.to_string()))
}

/// The error for a value of the wrong JSON type. kube-apiserver decodes a custom resource without
/// a schema and then validates it, so outside metadata this is a 422 `FieldValueTypeInvalid`:
/// `spec.type: Invalid value: "integer": spec.type in body must be of type string: "integer"`.
/// In metadata (decoded as `ObjectMeta`) it is a 400, as for the Link CRD.
fn type_error(def: &ResourceDef, version: &str, body: &Value, path: &str, inner: &str) -> ApiError {
    let types = inner
        .strip_prefix("invalid type: ")
        .and_then(|rest| rest.split_once(", expected "))
        .map(|(got, want)| (json_type(got), schema_type(want)));
    match types {
        Some((Some(got), Some(want))) if path != "." && !path.starts_with("metadata") => {
            let name = body
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let message = format!(
                "Invalid value: \"{got}\": {path} in body must be of type {want}: \"{got}\""
            );
            ApiError::invalid(
                def.group,
                def.kind,
                name,
                vec![cause("FieldValueTypeInvalid", path, message)],
            )
        }
        _ => ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {path}: {inner}",
            kind = def.kind,
        )),
    }
}

/// The openapi type name of what serde found (`integer `5``, `string "x"`, `map`, ...).
fn json_type(found: &str) -> Option<&'static str> {
    let word = found.split([' ', ',']).next()?;
    Some(match word {
        "integer" => "integer",
        "floating" => "number",
        "string" => "string",
        "boolean" => "boolean",
        "map" => "object",
        "sequence" => "array",
        "null" | "unit" => "null",
        _ => return None,
    })
}

/// The openapi type name of what the schema wanted (serde's `expected ...` text).
fn schema_type(expected: &str) -> Option<&'static str> {
    Some(match expected {
        "a string" => "string",
        "i64" | "i32" | "u64" => "integer",
        "a boolean" => "boolean",
        "a sequence" => "array",
        e if e == "a map" || e.starts_with("struct ") => "object",
        _ => return None,
    })
}

/// Checks the schema's value constraints (required, enum, maxItems, list-map keys, the
/// `metav1.Condition` rules) on a decoded object.
pub(super) fn validate(def: &ResourceDef, object: &Value, causes: &mut Vec<Cause>) {
    match def.kind {
        "ServiceExport" => {}
        "ServiceImport" => service_import_spec(object, causes),
        _ => cluster_property(object, causes),
    }
    if let Some(Value::Array(clusters)) = object.pointer("/status/clusters") {
        for (i, c) in clusters.iter().enumerate() {
            if c.get("cluster").is_none() {
                causes.push(required(&format!("status.clusters[{i}].cluster")));
            }
        }
        duplicate_keys("status.clusters", clusters, "cluster", causes);
    }
    if let Some(Value::Array(conditions)) = object.pointer("/status/conditions") {
        for (i, c) in conditions.iter().enumerate() {
            condition(&format!("status.conditions[{i}]"), c, causes);
        }
        duplicate_keys("status.conditions", conditions, "type", causes);
    }
}

fn required(path: &str) -> Cause {
    cause("FieldValueRequired", path, "Required value")
}

fn invalid(path: &str, value: &str, rule: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        path,
        format!("Invalid value: {value}: {path} in body {rule}"),
    )
}

fn not_supported(path: &str, value: &str, allowed: &[&str]) -> Cause {
    let allowed: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
    cause(
        "FieldValueNotSupported",
        path,
        format!(
            "Unsupported value: {}: supported values: {}",
            go_quote(value),
            allowed.join(", ")
        ),
    )
}

fn too_many(path: &str, items: Option<&Value>, max: usize, causes: &mut Vec<Cause>) {
    if let Some(Value::Array(items)) = items
        && items.len() > max
    {
        causes.push(cause(
            "FieldValueTooMany",
            path,
            format!("Too many: {}: must have at most {max} items", items.len()),
        ));
    }
}

fn service_import_spec(object: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = object.get("spec") else {
        return;
    };
    if spec.get("ports").is_none() {
        causes.push(required("spec.ports"));
    }
    match spec.get("type").and_then(Value::as_str) {
        None => causes.push(required("spec.type")),
        Some(t) if !["ClusterSetIP", "Headless"].contains(&t) => {
            causes.push(not_supported("spec.type", t, &["ClusterSetIP", "Headless"]));
        }
        Some(_) => {}
    }
    too_many("spec.ipFamilies", spec.get("ipFamilies"), 2, causes);
    too_many("spec.ips", spec.get("ips"), 2, causes);
    if let Some(Value::Array(ports)) = spec.get("ports") {
        for (i, p) in ports.iter().enumerate() {
            if p.get("port").is_none() {
                causes.push(required(&format!("spec.ports[{i}].port")));
            }
        }
    }
}

fn cluster_property(object: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = object.get("spec") else {
        return;
    };
    match spec.get("value").and_then(Value::as_str) {
        None => causes.push(required("spec.value")),
        Some("") => causes.push(invalid(
            "spec.value",
            "\"\"",
            "should be at least 1 chars long",
        )),
        Some(_) => {}
    }
}

/// `metav1.Condition`'s CRD schema: five required fields, an enum, patterns and lengths.
fn condition(at: &str, c: &Value, causes: &mut Vec<Cause>) {
    let field = |f: &str| format!("{at}.{f}");
    for f in ["lastTransitionTime", "message", "reason", "status", "type"] {
        if c.get(f).is_none() {
            causes.push(required(&field(f)));
        }
    }
    if let Some(t) = c.get("lastTransitionTime").and_then(Value::as_str)
        && t.parse::<jiff::Timestamp>().is_err()
    {
        let path = field("lastTransitionTime");
        causes.push(cause(
            "FieldValueTypeInvalid",
            &path,
            format!(
                "Invalid value: {q}: {path} in body must be of type date-time: {q}",
                q = go_quote(t)
            ),
        ));
    }
    if let Some(m) = c.get("message").and_then(Value::as_str)
        && m.len() > 32768
    {
        causes.push(cause(
            "FieldValueTooLong",
            field("message"),
            "Too long: may not be more than 32768 bytes",
        ));
    }
    if let Some(g) = c.get("observedGeneration").and_then(Value::as_i64)
        && g < 0
    {
        let path = field("observedGeneration");
        causes.push(invalid(
            &path,
            &g.to_string(),
            "should be greater than or equal to 0",
        ));
    }
    if let Some(r) = c.get("reason").and_then(Value::as_str) {
        REASON.check(&field("reason"), r, causes);
    }
    if let Some(s) = c.get("status").and_then(Value::as_str)
        && !["True", "False", "Unknown"].contains(&s)
    {
        causes.push(not_supported(
            &field("status"),
            s,
            &["True", "False", "Unknown"],
        ));
    }
    if let Some(t) = c.get("type").and_then(Value::as_str) {
        CONDITION_TYPE.check(&field("type"), t, causes);
    }
}

/// The string rules of a condition field: minLength, maxLength, pattern (checked by `matches`).
struct StringRules {
    min: usize,
    max: usize,
    matches: fn(&str) -> bool,
    pattern: &'static str,
}

const REASON: StringRules = StringRules {
    min: 1,
    max: 1024,
    matches: is_reason,
    pattern: "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
};

const CONDITION_TYPE: StringRules = StringRules {
    min: 0,
    max: 316,
    matches: is_condition_type,
    pattern: r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
};

impl StringRules {
    fn check(&self, path: &str, value: &str, causes: &mut Vec<Cause>) {
        if value.len() > self.max {
            causes.push(cause(
                "FieldValueTooLong",
                path,
                format!("Too long: may not be more than {} bytes", self.max),
            ));
        }
        if value.len() < self.min {
            causes.push(invalid(
                path,
                &go_quote(value),
                &format!("should be at least {} chars long", self.min),
            ));
        }
        if !(self.matches)(value) {
            causes.push(invalid(
                path,
                &go_quote(value),
                &format!("should match '{}'", self.pattern),
            ));
        }
    }
}

/// [`REASON`]'s pattern: a letter, then letters, digits, `_`, `,`, `:`, not ending in `,` or `:`.
fn is_reason(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':');
    b.first().is_some_and(u8::is_ascii_alphabetic)
        && b.iter().all(inner)
        && b.last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// [`CONDITION_TYPE`]'s pattern: an optional DNS-subdomain prefix and `/`, then a qualified-name part.
fn is_condition_type(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let label = |l: &str| {
        let b = l.as_bytes();
        b.first()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && b.last()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    };
    let prefix_ok = prefix.is_none_or(|p| p.split('.').all(label));
    let n = name.as_bytes();
    prefix_ok
        && n.first().is_some_and(u8::is_ascii_alphanumeric)
        && n.last().is_some_and(u8::is_ascii_alphanumeric)
        && n.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// kube's check of an `x-kubernetes-list-type: map` list: two items with the same key are a
/// `Duplicate value` naming the second item and its key fields.
fn duplicate_keys(path: &str, items: &[Value], key: &str, causes: &mut Vec<Cause>) {
    let mut seen: Vec<&Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some(k) = item.get(key) else { continue };
        if seen.contains(&k) {
            causes.push(cause(
                "FieldValueDuplicate",
                format!("{path}[{i}]"),
                format!(
                    "Duplicate value: map[string]interface {{}}{{\"{key}\":{}}}",
                    serde_json::to_string(k).unwrap_or_default()
                ),
            ));
        }
        seen.push(k);
    }
}

#[cfg(test)]
mod tests;
