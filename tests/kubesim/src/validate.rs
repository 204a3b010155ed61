//! Decoding, defaulting and validation of request bodies, per kind, the way kube-apiserver's
//! codecs, defaulters and `validation` packages treat them.
//!
//! It owns the schema side of a write: a body is decoded into its typed form (k8s-openapi types,
//! or the Link, MCS and About CRDs' own schemas), unknown fields are found (for
//! `fieldValidation`), defaults are filled and the result is checked. It must not touch storage:
//! allocation of ClusterIPs and node ports happens in the store, which owns the allocators.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::kubemsg;
use crate::resources::{RESOURCES, ResourceDef};
use crate::status::{ApiError, Cause, cause};

/// A decoded body: the object as the schema keeps it, and the fields the schema dropped.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// The pruned object.
    pub object: Value,
    /// Dotted paths of fields the schema does not declare (`spec.foo`).
    pub unknown: Vec<String>,
}

/// The Link CRD schema (`links.multicluster.linkerd.io`), every scalar a string as in Linkerd's CRD.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Link {
    #[serde(skip_serializing_if = "Option::is_none")]
    api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec: Option<LinkSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<LinkStatus>,
}

#[derive(Debug, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LinkSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    target_cluster_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_cluster_domain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_cluster_linkerd_namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster_credentials_secret: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway_address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway_port: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway_identity: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    probe_spec: Option<ProbeSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    remote_discovery_selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    federated_service_selector: Option<LabelSelector>,
    #[serde(skip_serializing_if = "Option::is_none")]
    excluded_annotations: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    excluded_labels: Option<Vec<String>>,
}

#[derive(Debug, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ProbeSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    period: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_threshold: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LinkStatus {
    #[serde(skip_serializing_if = "Option::is_none")]
    mirror_services: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    federated_services: Option<Vec<Value>>,
}

/// Fields a version of a custom resource does not have, to prune from reads in that version. Only
/// Link's schemas differ between versions (each adds fields); the MCS and About CRDs serve one
/// schema in every version.
fn fields_missing_in(def: &ResourceDef, version: &str) -> &'static [&'static str] {
    match (def.group, version) {
        ("multicluster.linkerd.io", "v1alpha1") => &[
            "spec.federatedServiceSelector",
            "spec.excludedAnnotations",
            "spec.excludedLabels",
            "status",
        ],
        ("multicluster.linkerd.io", "v1alpha2") => {
            &["spec.excludedAnnotations", "spec.excludedLabels"]
        }
        _ => &[],
    }
}

fn roundtrip<T: DeserializeOwned + Serialize>(
    def: &ResourceDef,
    version: &str,
    body: &Value,
) -> Result<Value, ApiError> {
    let typed: T = serde_path_to_error::deserialize(body).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {}: {}",
            e.path(),
            e.inner(),
            kind = def.kind
        ))
    })?;
    serde_json::to_value(&typed).map_err(|e| ApiError::internal(e.to_string()))
}

/// Decodes `body` as resource `res` in `version`: checks apiVersion and kind, runs it through the
/// typed schema, and reports which fields the schema does not know.
pub(crate) fn decode(res: usize, version: &str, mut body: Value) -> Result<Decoded, ApiError> {
    let def = &RESOURCES[res];
    let Value::Object(map) = &mut body else {
        return Err(ApiError::bad_request(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml",
        ));
    };
    let want = def.api_version(version);
    match map.get("apiVersion").and_then(Value::as_str) {
        Some(got) if got != want => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({got}) does not match the expected API version ({want})"
            )));
        }
        _ => {}
    }
    match map.get("kind").and_then(Value::as_str) {
        Some(got) if got != def.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({got}) does not match the expected kind ({})",
                def.kind
            )));
        }
        _ => {}
    }
    map.insert("apiVersion".into(), json!(want));
    map.insert("kind".into(), json!(def.kind));
    use k8s_openapi::api;
    let mut object = match (def.group, def.kind) {
        ("", "Namespace") => roundtrip::<api::core::v1::Namespace>(def, version, &body)?,
        ("", "Service") => roundtrip::<api::core::v1::Service>(def, version, &body)?,
        ("", "Secret") => roundtrip::<api::core::v1::Secret>(def, version, &body)?,
        ("", "ConfigMap") => roundtrip::<api::core::v1::ConfigMap>(def, version, &body)?,
        ("", "Event") => roundtrip::<api::core::v1::Event>(def, version, &body)?,
        ("discovery.k8s.io", _) => {
            roundtrip::<api::discovery::v1::EndpointSlice>(def, version, &body)?
        }
        ("coordination.k8s.io", _) => {
            roundtrip::<api::coordination::v1::Lease>(def, version, &body)?
        }
        ("events.k8s.io", _) => roundtrip::<api::events::v1::Event>(def, version, &body)?,
        ("multicluster.linkerd.io", _) => roundtrip::<Link>(def, version, &body)?,
        ("multicluster.x-k8s.io" | "about.k8s.io", _) => mcs::decode(def, version, &body)?,
        _ => body.clone(),
    };
    if def.custom {
        for path in fields_missing_in(def, version) {
            remove_path(&mut object, path);
        }
    }
    let mut unknown = Vec::new();
    unknown_fields(&body, &object, "", &mut unknown);
    Ok(Decoded { object, unknown })
}

/// Removes fields that `version` of a custom resource does not declare, for reads in that version.
pub(crate) fn prune_for_version(res: usize, version: &str, object: &mut Value) {
    if RESOURCES[res].custom {
        for path in fields_missing_in(&RESOURCES[res], version) {
            remove_path(object, path);
        }
    }
}

fn remove_path(object: &mut Value, path: &str) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let Some(last) = parts.pop() else { return };
    let mut cur = object;
    for p in parts {
        match cur.get_mut(p) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Value::Object(m) = cur {
        m.remove(last);
    }
}

fn unknown_fields(orig: &Value, kept: &Value, prefix: &str, out: &mut Vec<String>) {
    match (orig, kept) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                match b.get(k) {
                    None if !v.is_null() => out.push(path),
                    Some(kv) => unknown_fields(v, kv, &path, out),
                    None => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                unknown_fields(x, y, &format!("{prefix}[{i}]"), out);
            }
        }
        _ => {}
    }
}

pub(super) fn obj<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v.get(key).is_some_and(Value::is_object) {
        v[key] = json!({});
    }
    match v.get_mut(key) {
        Some(Value::Object(m)) => m,
        // Unreachable: the key was just set to an object.
        _ => unreachable!("{key} was set to an object"),
    }
}

/// Fills the defaults kube's defaulters set, for resource `res`. Allocation is not done here.
pub(crate) fn default(res: usize, object: &mut Value) {
    let def = &RESOURCES[res];
    match (def.group, def.kind) {
        ("", "Namespace") => {
            let name = object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let meta = obj(object, "metadata");
            if !meta.get("labels").is_some_and(Value::is_object) {
                meta.insert("labels".into(), json!({}));
            }
            if let Some(Value::Object(labels)) = meta.get_mut("labels") {
                labels.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            let spec = obj(object, "spec");
            spec.entry("finalizers")
                .or_insert_with(|| json!(["kubernetes"]));
            obj(object, "status")
                .entry("phase")
                .or_insert_with(|| json!("Active"));
        }
        ("", "Service") => service::default(object),
        ("", "Secret") => {
            if let Some(Value::Object(string_data)) =
                object.as_object_mut().and_then(|m| m.remove("stringData"))
            {
                use base64::Engine;
                let data = obj(object, "data");
                for (k, v) in string_data {
                    let text = v.as_str().unwrap_or_default();
                    data.insert(
                        k,
                        json!(base64::engine::general_purpose::STANDARD.encode(text)),
                    );
                }
            }
            if let Value::Object(m) = object {
                m.entry("type").or_insert_with(|| json!("Opaque"));
            }
        }
        ("discovery.k8s.io", _) => {
            if let Some(Value::Array(ports)) = object.get_mut("ports") {
                for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                    p.entry("name").or_insert_with(|| json!(""));
                    p.entry("protocol").or_insert_with(|| json!("TCP"));
                }
            }
        }
        ("multicluster.linkerd.io", _) => {
            if let Some(Value::Object(probe)) = object.pointer_mut("/spec/probeSpec") {
                probe.entry("timeout").or_insert_with(|| json!("30s"));
                probe
                    .entry("failureThreshold")
                    .or_insert_with(|| json!("3"));
            }
        }
        _ => {}
    }
}

fn check_name(res: usize, name: &str, out: &mut Vec<Cause>) {
    let def = &RESOURCES[res];
    let errors = match (def.group, def.kind) {
        ("", "Service") => kubemsg::dns1035_label_errors(name),
        ("", "Namespace") => kubemsg::dns1123_label_errors(name),
        _ => kubemsg::dns1123_subdomain_errors(name),
    };
    for msg in errors {
        out.push(cause(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: {}: {msg}", kubemsg::go_quote(name)),
        ));
    }
}

/// Validates an object about to be stored (after defaulting and allocation). `old` is the stored
/// object on update. Returns kube's 422 Invalid with every problem found.
pub(crate) fn validate(res: usize, object: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let def = &RESOURCES[res];
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    } else {
        check_name(res, name, &mut causes);
    }
    match (def.group, def.kind) {
        ("", "Service") => service::validate(object, old, &mut causes),
        ("discovery.k8s.io", _) => validate_slice(object, old, &mut causes),
        ("multicluster.x-k8s.io" | "about.k8s.io", _) => mcs::validate(def, object, &mut causes),
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(def.group, def.kind, name, causes))
    }
}

fn validate_slice(object: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
    let ty = object
        .get("addressType")
        .and_then(Value::as_str)
        .unwrap_or("");
    let check: fn(&str) -> bool = match ty {
        "IPv4" => |a| a.parse::<Ipv4Addr>().is_ok(),
        // kube's IPv6 check refuses an IPv4-mapped address (`::ffff:10.0.0.1`): Go parses it
        // to the IPv4 address it maps, so it is not an IPv6 address to kube.
        "IPv6" => |a| {
            a.parse::<Ipv6Addr>()
                .is_ok_and(|ip| ip.to_ipv4_mapped().is_none())
        },
        "FQDN" => |a| kubemsg::dns1123_subdomain_errors(a).is_empty(),
        "" => {
            causes.push(cause("FieldValueRequired", "addressType", "Required value"));
            |_| true
        }
        other => {
            causes.push(cause(
                "FieldValueNotSupported",
                "addressType",
                format!(
                    "Unsupported value: \"{other}\": supported values: \"FQDN\", \"IPv4\", \"IPv6\""
                ),
            ));
            |_| true
        }
    };
    validate_slice_endpoints(object, ty, check, causes);
    let ports = object
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, p) in ports.iter().enumerate() {
        if let Some(port) = p.get("port").and_then(Value::as_i64)
            && !(1..=65535).contains(&port)
        {
            causes.push(cause(
                "FieldValueInvalid",
                format!("ports[{i}].port"),
                format!("Invalid value: {port}: must be between 1 and 65535, inclusive"),
            ));
        }
    }
    if let Some(old) = old {
        let old_ty = old.get("addressType").and_then(Value::as_str).unwrap_or("");
        if old_ty != ty {
            causes.push(cause(
                "FieldValueInvalid",
                "addressType",
                format!("Invalid value: \"{ty}\": field is immutable"),
            ));
        }
    }
}

/// The endpoints of a slice of address type `ty`: at most 1000, each with 1 to 100
/// addresses, every address valid for the type (`check`) and not refused by kube's
/// `ValidateEndpointIP`, and its topology hints valid ([`validate_hints`]).
fn validate_slice_endpoints(
    object: &Value,
    ty: &str,
    check: fn(&str) -> bool,
    causes: &mut Vec<Cause>,
) {
    let endpoints = object
        .get("endpoints")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if endpoints.len() > 1000 {
        causes.push(cause(
            "FieldValueTooMany",
            "endpoints",
            format!(
                "Too many: {}: must have at most 1000 items",
                endpoints.len()
            ),
        ));
    }
    for (i, e) in endpoints.iter().enumerate() {
        let addrs = e
            .get("addresses")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if addrs.is_empty() {
            causes.push(cause(
                "FieldValueRequired",
                format!("endpoints[{i}].addresses"),
                "Required value: must contain at least 1 address",
            ));
        } else if addrs.len() > 100 {
            causes.push(cause(
                "FieldValueTooMany",
                format!("endpoints[{i}].addresses"),
                format!("Too many: {}: must have at most 100 items", addrs.len()),
            ));
        }
        validate_hints(i, e, causes);
        for (j, a) in addrs.iter().enumerate() {
            let text = a.as_str().unwrap_or("");
            if !check(text) {
                causes.push(cause(
                    "FieldValueInvalid",
                    format!("endpoints[{i}].addresses[{j}]"),
                    format!("Invalid value: \"{text}\": must be a valid {ty} address"),
                ));
            }
            if let Some(why) = classified_ip(ty, text).and_then(|ip| endpoint_ip_refusal(ip, text))
            {
                causes.push(cause(
                    "FieldValueInvalid",
                    format!("endpoints[{i}].addresses[{j}]"),
                    format!("Invalid value: {}: {why}", kubemsg::go_quote(text)),
                ));
            }
        }
    }
}

/// Most zone hints an endpoint may carry (kube's `maxZoneHints`).
const MAX_ZONE_HINTS: usize = 8;

/// kube's `validateHints` for endpoint `i` (`e`): at most [`MAX_ZONE_HINTS`] `forZones`
/// (beyond that nothing else about them is reported), each name once and a label value (empty
/// passes, as `IsValidLabelValue` lets it). The endpoint's `zone` itself kube does not validate;
/// `forNodes` (alpha in 1.33) is not checked here.
fn validate_hints(i: usize, e: &Value, causes: &mut Vec<Cause>) {
    let Some(zones) = e.pointer("/hints/forZones").and_then(Value::as_array) else {
        return;
    };
    let path = format!("endpoints[{i}].hints.forZones");
    if zones.len() > MAX_ZONE_HINTS {
        causes.push(cause(
            "FieldValueTooMany",
            path,
            format!(
                "Too many: {}: must have at most {MAX_ZONE_HINTS} items",
                zones.len()
            ),
        ));
        return;
    }
    let mut seen = std::collections::HashSet::new();
    for (j, z) in zones.iter().enumerate() {
        let name = z.get("name").and_then(Value::as_str).unwrap_or("");
        let field = format!("{path}[{j}].name");
        if !seen.insert(name) {
            causes.push(cause(
                "FieldValueDuplicate",
                &field,
                format!("Duplicate value: {}", kubemsg::go_quote(name)),
            ));
        }
        for msg in kubemsg::label_value_errors(name) {
            causes.push(cause(
                "FieldValueInvalid",
                &field,
                format!("Invalid value: {}: {msg}", kubemsg::go_quote(name)),
            ));
        }
    }
}

/// The address kube classifies with `ValidateEndpointIP` in a slice of type `ty`, if any.
///
/// Kube classifies every address of an IPv4 or IPv6 slice that parses as an IP at all, even one
/// of the other family, which then gets both causes (`::1` in an IPv4 slice). Since
/// kubernetes#122550 (1.33) the parse for IPv6 slices refuses IPv4-mapped addresses before that,
/// so those get only the family cause. FQDN slices are never classified, even where a name looks
/// like an IPv4 address.
fn classified_ip(ty: &str, text: &str) -> Option<IpAddr> {
    let ip = text.parse::<IpAddr>().ok()?;
    match (ty, ip) {
        ("IPv6", IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_some() => None,
        ("IPv4" | "IPv6", _) => Some(ip),
        _ => None,
    }
}

/// Why kube-apiserver refuses `ip` (written `text`) as an endpoint address, if it does: the
/// address classes of `ValidateEndpointIP` (k8s.io/kubernetes `pkg/apis/core/validation`), which
/// EndpointSlice validation applies to every IPv4 and IPv6 address, on create and on update alike.
/// (Since 1.33 kube drops endpoint errors on an update that leaves `endpoints` unchanged, for
/// slices stored under older rules; kubesim has none, as every stored slice passed this check.)
///
/// Such an address is nonsense as a backend (unspecified, loopback) or means the node's own link
/// (link-local, e.g. a cloud metadata service); kube refuses it outright, as a 422 and not a
/// warning. The classes are Go's `net.IP` predicates, so an IPv4-mapped IPv6 address is classed as
/// the IPv4 address it maps, and link-local multicast is `224.0.0.0/24` and every `ffX2::/16`
/// (scope 2, any flags), whatever the range the message names.
fn endpoint_ip_refusal(ip: IpAddr, text: &str) -> Option<String> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let (unspecified, loopback, link_local, link_local_multicast) = match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            (
                v4.is_unspecified(),
                v4.is_loopback(),
                v4.is_link_local(),
                o[0] == 224 && o[1] == 0 && o[2] == 0,
            )
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            (
                v6.is_unspecified(),
                v6.is_loopback(),
                o[0] == 0xfe && o[1] & 0xc0 == 0x80,
                o[0] == 0xff && o[1] & 0x0f == 0x02,
            )
        }
    };
    // At most one class holds for any address, so kube never reports two for one address.
    if unspecified {
        Some(format!("may not be unspecified ({text})"))
    } else if loopback {
        Some("may not be in the loopback range (127.0.0.0/8, ::1/128)".into())
    } else if link_local {
        Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)".into())
    } else if link_local_multicast {
        Some("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".into())
    } else {
        None
    }
}

mod mcs;
pub(crate) mod service;

#[cfg(test)]
mod tests;
