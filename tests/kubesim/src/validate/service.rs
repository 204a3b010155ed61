//! Services as kube-apiserver (1.33, default feature gates) takes them: the defaults of
//! `SetDefaults_Service`, the IP family fields its registry settles before allocating
//! ([`families`]), and the checks of `ValidateService` and `ValidateServiceUpdate`.
//!
//! The addresses and node ports are allocated in the store, which owns the allocators; the API
//! runs [`prepare`] and then [`super::validate`] on what it will hand the store, which
//! prepares again (the preparation is idempotent) before it allocates.

use serde_json::{Value, json};

use super::obj;
use crate::kubemsg;
use crate::status::{Cause, cause};

mod families;

pub(crate) use families::{IpFields, ServiceFamilies, prepare};

/// kube's `DefaultClientIPServiceAffinitySeconds`: three hours.
const DEFAULT_CLIENT_IP_TIMEOUT: i64 = 10_800;

/// kube's `MaxClientIPServiceAffinitySeconds`: a day.
const MAX_CLIENT_IP_TIMEOUT: i64 = 86_400;

/// The `trafficDistribution` values kube-apiserver 1.33 accepts with its default feature
/// gates: `PreferSameZone` and `PreferSameNode` need the `PreferSameTrafficDistribution` gate,
/// alpha and off in 1.33 (on by default from 1.34).
const TRAFFIC_DISTRIBUTIONS: &[&str] = &["PreferClose"];

/// kube's `SetDefaults_Service`: type ClusterIP; sessionAffinity None (which has no
/// `sessionAffinityConfig`), ClientIP's timeout three hours; each port's protocol and target
/// port; `internalTrafficPolicy: Cluster` for every type but ExternalName; the external
/// traffic policy and LoadBalancer node ports.
pub(super) fn default(object: &mut Value) {
    // A Service's status is a struct in kube: it is always there, `loadBalancer: {}` at least.
    obj(object, "status")
        .entry("loadBalancer")
        .or_insert_with(|| json!({}));
    let spec = obj(object, "spec");
    let ty = default_text(spec, "type", "ClusterIP");
    match default_text(spec, "sessionAffinity", "None").as_str() {
        "None" => {
            spec.remove("sessionAffinityConfig");
        }
        "ClientIP" => {
            // Anything short of a timeout is replaced whole, as kube does.
            let timeout = spec
                .get("sessionAffinityConfig")
                .and_then(|c| c.pointer("/clientIP/timeoutSeconds"))
                .filter(|t| !t.is_null());
            if timeout.is_none() {
                spec.insert(
                    "sessionAffinityConfig".into(),
                    json!({"clientIP": {"timeoutSeconds": DEFAULT_CLIENT_IP_TIMEOUT}}),
                );
            }
        }
        _ => {}
    }
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert_with(|| json!("TCP"));
            // An absent, 0 or "" targetPort is the port.
            let unset = match p.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(s)) => s.is_empty(),
                Some(_) => false,
            };
            if unset {
                let port = p.get("port").cloned().unwrap_or(Value::Null);
                p.insert("targetPort".into(), port);
            }
        }
    }
    if !["ClusterIP", "NodePort", "LoadBalancer"].contains(&ty.as_str()) {
        return;
    }
    spec.entry("internalTrafficPolicy")
        .or_insert_with(|| json!("Cluster"));
    if ty == "LoadBalancer" || ty == "NodePort" {
        spec.entry("externalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        spec.entry("allocateLoadBalancerNodePorts")
            .or_insert_with(|| json!(true));
    }
}

/// `spec[key]`, set to `default` when it is absent or empty (Go's zero value).
fn default_text(spec: &mut serde_json::Map<String, Value>, key: &str, default: &str) -> String {
    match spec.get(key).and_then(Value::as_str) {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => {
            spec.insert(key.to_owned(), json!(default));
            default.to_owned()
        }
    }
}

/// kube's `ValidateServiceUpdate` (with the stored `old`) or `ValidateService`, on a Service
/// that [`prepare`] has been through, in kube's order of checks.
pub(super) fn validate(object: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
    let spec = object.get("spec").cloned().unwrap_or(json!({}));
    let f = IpFields::read(&spec);
    if let Some(old) = old.and_then(|o| o.get("spec")) {
        let before = IpFields::read(old);
        upgrade_downgrade_cluster_ips(&before, &f, causes);
        upgrade_downgrade_families(&before, &f, causes);
    }
    let ports = spec
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if ports.is_empty() && !f.is_headless() && f.ty != "ExternalName" {
        causes.push(cause("FieldValueRequired", "spec.ports", "Required value"));
    }
    by_type(&spec, &f, causes);
    validate_service_ports(&ports, causes);
    session_affinity(&spec, causes);
    causes.extend(families::cluster_ips_related_fields(&f));
    if !["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"].contains(&f.ty.as_str()) {
        causes.push(cause(
            "FieldValueNotSupported",
            "spec.type",
            format!(
                "Unsupported value: {}: supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
                kubemsg::go_quote(&f.ty)
            ),
        ));
    }
    duplicate_ports(&ports, causes);
    traffic_policy_and_distribution(&spec, &f.ty, causes);
}

/// The checks of kube's `ValidateService` that depend on the type: a NodePort or
/// LoadBalancer Service is not headless; an ExternalName one has no IP fields and an
/// `externalName` that is a DNS-1123 subdomain (a trailing dot allowed).
fn by_type(spec: &Value, f: &IpFields, causes: &mut Vec<Cause>) {
    match f.ty.as_str() {
        "LoadBalancer" | "NodePort" if f.is_headless() => causes.push(cause(
            "FieldValueInvalid",
            "spec.clusterIPs[0]",
            format!(
                "Invalid value: \"None\": may not be set to 'None' for {} services",
                f.ty
            ),
        )),
        "ExternalName" => {
            let forbidden = |field: &str| {
                cause(
                    "FieldValueForbidden",
                    field,
                    "Forbidden: may not be set for ExternalName services",
                )
            };
            if !f.cluster_ips.is_empty() {
                causes.push(forbidden("spec.clusterIPs"));
            }
            if !f.families.is_empty() {
                causes.push(forbidden("spec.ipFamilies"));
            }
            if f.policy.is_some() {
                causes.push(forbidden("spec.ipFamilyPolicy"));
            }
            let name = spec
                .get("externalName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let cname = name.strip_suffix('.').unwrap_or(name);
            if cname.is_empty() {
                causes.push(cause(
                    "FieldValueRequired",
                    "spec.externalName",
                    "Required value",
                ));
                return;
            }
            for msg in kubemsg::dns1123_subdomain_errors(cname) {
                causes.push(cause(
                    "FieldValueInvalid",
                    "spec.externalName",
                    format!("Invalid value: {}: {msg}", kubemsg::go_quote(cname)),
                ));
            }
        }
        _ => {}
    }
}

/// `sessionAffinity` is None or ClientIP; ClientIP's timeout lies in 1..=86400 seconds, and
/// None has no `sessionAffinityConfig` (which the defaults drop, so only a client that skips
/// them meets this).
fn session_affinity(spec: &Value, causes: &mut Vec<Cause>) {
    let affinity = spec
        .get("sessionAffinity")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let config = spec.get("sessionAffinityConfig").filter(|c| !c.is_null());
    match affinity {
        "" => causes.push(cause(
            "FieldValueRequired",
            "spec.sessionAffinity",
            "Required value",
        )),
        "None" if config.is_some() => causes.push(cause(
            "FieldValueForbidden",
            "spec.sessionAffinityConfig",
            "Forbidden: must not be set when session affinity is None",
        )),
        "None" => {}
        "ClientIP" => client_ip_affinity(config, causes),
        other => causes.push(cause(
            "FieldValueNotSupported",
            "spec.sessionAffinity",
            format!(
                "Unsupported value: {}: supported values: \"ClientIP\", \"None\"",
                kubemsg::go_quote(other)
            ),
        )),
    }
}

/// kube's `validateClientIPAffinityConfig`.
fn client_ip_affinity(config: Option<&Value>, causes: &mut Vec<Cause>) {
    let required = |field: &str| {
        cause(
            "FieldValueRequired",
            field,
            "Required value: when session affinity type is ClientIP",
        )
    };
    let Some(config) = config else {
        causes.push(required("spec.sessionAffinityConfig"));
        return;
    };
    let Some(client_ip) = config.get("clientIP").filter(|c| !c.is_null()) else {
        causes.push(required("spec.sessionAffinityConfig.clientIP"));
        return;
    };
    let field = "spec.sessionAffinityConfig.clientIP.timeoutSeconds";
    let Some(timeout) = client_ip.get("timeoutSeconds").and_then(Value::as_i64) else {
        causes.push(required(field));
        return;
    };
    if !(1..=MAX_CLIENT_IP_TIMEOUT).contains(&timeout) {
        causes.push(cause(
            "FieldValueInvalid",
            field,
            format!(
                "Invalid value: {timeout}: must be greater than 0 and less than {MAX_CLIENT_IP_TIMEOUT}"
            ),
        ));
    }
}

/// `internalTrafficPolicy` (required where the defaults set it) is Cluster or Local;
/// `trafficDistribution`, when set, one of [`TRAFFIC_DISTRIBUTIONS`].
fn traffic_policy_and_distribution(spec: &Value, ty: &str, causes: &mut Vec<Cause>) {
    match spec.get("internalTrafficPolicy").and_then(Value::as_str) {
        None if ["ClusterIP", "NodePort", "LoadBalancer"].contains(&ty) => causes.push(cause(
            "FieldValueRequired",
            "spec.internalTrafficPolicy",
            "Required value",
        )),
        Some(p) if p != "Cluster" && p != "Local" => causes.push(cause(
            "FieldValueNotSupported",
            "spec.internalTrafficPolicy",
            format!(
                "Unsupported value: {}: supported values: \"Cluster\", \"Local\"",
                kubemsg::go_quote(p)
            ),
        )),
        _ => {}
    }
    if let Some(d) = spec.get("trafficDistribution").and_then(Value::as_str)
        && !TRAFFIC_DISTRIBUTIONS.contains(&d)
    {
        let supported: Vec<String> = TRAFFIC_DISTRIBUTIONS
            .iter()
            .map(|s| kubemsg::go_quote(s))
            .collect();
        causes.push(cause(
            "FieldValueNotSupported",
            "spec.trafficDistribution",
            format!(
                "Unsupported value: {}: supported values: {}",
                kubemsg::go_quote(d),
                supported.join(", ")
            ),
        ));
    }
}

/// kube's `validateUpgradeDowngradeClusterIPs`: the primary address never changes; the
/// secondary goes only with `ipFamilyPolicy: SingleStack`.
fn upgrade_downgrade_cluster_ips(old: &IpFields, f: &IpFields, causes: &mut Vec<Cause>) {
    if !old.needs_cluster_ip() || !f.needs_cluster_ip() || (old.is_headless() && f.is_headless()) {
        return;
    }
    let ips = kubemsg::go_string_slice(&f.cluster_ips);
    let changed = |i: usize| {
        cause(
            "FieldValueInvalid",
            format!("spec.clusterIPs[{i}]"),
            format!("Invalid value: {ips}: may not change once set"),
        )
    };
    let primary_changed = !old.cluster_ips.is_empty()
        && !f.cluster_ips.is_empty()
        && old.cluster_ips[0] != f.cluster_ips[0];
    match old.cluster_ips.len().cmp(&f.cluster_ips.len()) {
        std::cmp::Ordering::Equal => {
            for (i, (a, b)) in old.cluster_ips.iter().zip(&f.cluster_ips).enumerate() {
                if a != b {
                    causes.push(changed(i));
                }
            }
        }
        std::cmp::Ordering::Greater => {
            if f.cluster_ips.is_empty() {
                causes.push(cause(
                    "FieldValueInvalid",
                    "spec.clusterIPs[0]",
                    format!("Invalid value: {ips}: primary clusterIP can not be unset"),
                ));
            }
            if primary_changed {
                causes.push(changed(0));
            }
            if f.cluster_ips.len() == 1 && f.policy.as_deref() != Some("SingleStack") {
                causes.push(cause("FieldValueInvalid", "spec.ipFamilyPolicy", format!("Invalid value: {}: must be set to 'SingleStack' when releasing the secondary clusterIP", policy_value(f))));
            }
        }
        std::cmp::Ordering::Less => {
            if primary_changed {
                causes.push(changed(0));
            }
        }
    }
}

/// kube's `validateUpgradeDowngradeIPFamilies`: the primary family never changes (but a
/// headless Service's); the secondary goes only with `ipFamilyPolicy: SingleStack`. The
/// values kube prints in two of these causes are its own (`clusterIPs` for a family).
fn upgrade_downgrade_families(old: &IpFields, f: &IpFields, causes: &mut Vec<Cause>) {
    if !old.needs_cluster_ip() || !f.needs_cluster_ip() || old.is_headless() || f.is_headless() {
        return;
    }
    let families = kubemsg::go_string_slice(&f.families);
    let ips = kubemsg::go_string_slice(&f.cluster_ips);
    let at0 = |value: &str, why: &str| {
        cause(
            "FieldValueInvalid",
            "spec.ipFamilies[0]",
            format!("Invalid value: {value}: {why}"),
        )
    };
    let primary_changed =
        !old.families.is_empty() && !f.families.is_empty() && old.families[0] != f.families[0];
    match old.families.len().cmp(&f.families.len()) {
        std::cmp::Ordering::Equal => {
            for (a, b) in old.families.iter().zip(&f.families) {
                if a != b {
                    causes.push(at0(&families, "may not change once set"));
                }
            }
        }
        std::cmp::Ordering::Greater => {
            if f.cluster_ips.is_empty() {
                causes.push(at0(&families, "primary ipFamily can not be unset"));
            }
            if primary_changed {
                causes.push(at0(&ips, "may not change once set"));
            }
            if f.families.len() == 1 && f.policy.as_deref() != Some("SingleStack") {
                causes.push(cause("FieldValueInvalid", "spec.ipFamilyPolicy", format!("Invalid value: {}: must be set to 'SingleStack' when releasing the secondary ipFamily", policy_value(f))));
            }
        }
        std::cmp::Ordering::Less => {
            if primary_changed {
                causes.push(at0(&ips, "may not change once set"));
            }
        }
    }
}

/// `ipFamilyPolicy` as kube prints the pointer in a cause: quoted, or `null`.
fn policy_value(f: &IpFields) -> String {
    f.policy
        .as_deref()
        .map_or_else(|| "null".to_owned(), kubemsg::go_quote)
}

/// Each port: named (when there are several) with a unique DNS label, a valid port, protocol
/// and target port, as kube's `validateServicePort`.
fn validate_service_ports(ports: &[Value], causes: &mut Vec<Cause>) {
    let mut names = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let at = |f: &str| format!("spec.ports[{i}].{f}");
        let port_name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if ports.len() > 1 && port_name.is_empty() {
            causes.push(cause("FieldValueRequired", at("name"), "Required value"));
        } else if !port_name.is_empty() {
            for msg in kubemsg::dns1123_label_errors(port_name) {
                causes.push(cause(
                    "FieldValueInvalid",
                    at("name"),
                    format!("Invalid value: {}: {msg}", kubemsg::go_quote(port_name)),
                ));
            }
            if names.contains(&port_name) {
                causes.push(cause(
                    "FieldValueDuplicate",
                    at("name"),
                    format!("Duplicate value: \"{port_name}\""),
                ));
            }
            names.push(port_name);
        }
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&port) {
            causes.push(cause(
                "FieldValueInvalid",
                at("port"),
                format!("Invalid value: {port}: must be between 1 and 65535, inclusive"),
            ));
        }
        let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
        if !["TCP", "UDP", "SCTP"].contains(&proto) {
            causes.push(cause(
                "FieldValueNotSupported",
                at("protocol"),
                format!(
                    "Unsupported value: \"{proto}\": supported values: \"SCTP\", \"TCP\", \"UDP\""
                ),
            ));
        }
        validate_target_port(p.get("targetPort"), &at("targetPort"), causes);
    }
}

/// No two ports with the same port and protocol.
fn duplicate_ports(ports: &[Value], causes: &mut Vec<Cause>) {
    let mut keys = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
        let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
        if keys.contains(&(port, proto)) {
            // kube's key is a ServicePort with only Protocol and Port set, printed with `%#v`.
            causes.push(cause(
                "FieldValueDuplicate",
                format!("spec.ports[{i}]"),
                format!("Duplicate value: core.ServicePort{{Name:\"\", Protocol:\"{proto}\", AppProtocol:(*string)(nil), Port:{port}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}"),
            ));
        }
        keys.push((port, proto));
    }
}

/// A Service port's `targetPort` (at `field`): a number in 1..=65535 or an IANA service name.
fn validate_target_port(target_port: Option<&Value>, field: &str, causes: &mut Vec<Cause>) {
    match target_port {
        Some(Value::Number(n)) => {
            let t = n.as_i64().unwrap_or(0);
            if !(1..=65535).contains(&t) {
                causes.push(cause(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: {t}: must be between 1 and 65535, inclusive"),
                ));
            }
        }
        Some(Value::String(s)) if !is_iana_svc_name(s) => {
            causes.push(cause("FieldValueInvalid", field, format!("Invalid value: \"{s}\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")));
        }
        _ => {}
    }
}

fn is_iana_svc_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && !s.starts_with('-')
        && !s.ends_with('-')
        && !s.contains("--")
}
