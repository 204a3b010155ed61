//! Services: the defaults kube-apiserver's `SetDefaults_Service` fills and the checks of its
//! `ValidateService`.

use std::net::IpAddr;

use serde_json::{Value, json};

use super::obj;
use crate::kubemsg;
use crate::status::{Cause, cause};

/// kube's `SetDefaults_Service`.
pub(super) fn default(object: &mut Value) {
    // A Service's status is a struct in kube: it is always there, `loadBalancer: {}` at least.
    obj(object, "status")
        .entry("loadBalancer")
        .or_insert_with(|| json!({}));
    let spec = obj(object, "spec");
    let ty = spec
        .entry("type")
        .or_insert_with(|| json!("ClusterIP"))
        .as_str()
        .unwrap_or("ClusterIP")
        .to_owned();
    // kube's SetDefaults_Service: sessionAffinity and ports for every type, the rest not for
    // ExternalName.
    spec.entry("sessionAffinity")
        .or_insert_with(|| json!("None"));
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
    if ty == "ExternalName" {
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

/// kube's `ValidateService` and `ValidateServiceUpdate` (with the stored `old`).
pub(super) fn validate(object: &Value, old: Option<&Value>, causes: &mut Vec<Cause>) {
    let spec = object.get("spec").cloned().unwrap_or(json!({}));
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    if !["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"].contains(&ty) {
        causes.push(cause(
            "FieldValueNotSupported",
            "spec.type",
            format!("Unsupported value: \"{ty}\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""),
        ));
    }
    let cluster_ip = spec.get("clusterIP").and_then(Value::as_str).unwrap_or("");
    if !cluster_ip.is_empty() && cluster_ip != "None" && cluster_ip.parse::<IpAddr>().is_err() {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.clusterIPs[0]",
            format!(
                "Invalid value: \"{cluster_ip}\": must be empty, 'None', or a valid IP address"
            ),
        ));
    }
    if ty == "ExternalName" {
        if spec
            .get("externalName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            causes.push(cause(
                "FieldValueRequired",
                "spec.externalName",
                "Required value",
            ));
        }
    } else {
        validate_service_ports(&spec, cluster_ip, causes);
    }
    if let Some(old) = old {
        let old_ip = old
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !old_ip.is_empty() && old_ip != cluster_ip && ty != "ExternalName" {
            causes.push(cause(
                "FieldValueInvalid",
                "spec.clusterIPs[0]",
                format!("Invalid value: []string{{\"{cluster_ip}\"}}: may not change once set"),
            ));
        }
    }
}

/// The ports of a Service that is not ExternalName: required unless headless, each named
/// (when there are several) with a unique DNS label, a valid port, protocol and target port,
/// and no two with the same port and protocol.
fn validate_service_ports(spec: &Value, cluster_ip: &str, causes: &mut Vec<Cause>) {
    let ports = spec
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if ports.is_empty() && cluster_ip != "None" {
        causes.push(cause("FieldValueRequired", "spec.ports", "Required value"));
    }
    let mut names = Vec::new();
    let mut keys = Vec::new();
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
        if keys.contains(&(port, proto)) {
            // kube's key is a ServicePort with only Protocol and Port set, printed with `%#v`.
            causes.push(cause(
                "FieldValueDuplicate",
                format!("spec.ports[{i}]"),
                format!("Duplicate value: core.ServicePort{{Name:\"\", Protocol:\"{proto}\", AppProtocol:(*string)(nil), Port:{port}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}"),
            ));
        }
        keys.push((port, proto));
        validate_target_port(p.get("targetPort"), &at("targetPort"), causes);
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
