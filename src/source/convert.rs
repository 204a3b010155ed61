//! Conversion of Kubernetes objects into slim model objects, shared by every
//! source so the file source and the live watches classify alike.
//!
//! Owns the meaning of Linkerd's labels (linkerd-compat.md §2): export mode,
//! federated membership, mirror Services and the gateway. It must not keep
//! the full objects, and must not decide anything about DNS names.

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service as K8sService;
use k8s_openapi::api::discovery::v1::EndpointSlice as K8sSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::selector::{LINKERD_DEFAULTS, Selectors};
use crate::model::names::is_dns_label;
use crate::model::objects::{
    Endpoint, Family, Gateway, Mirror, ObjectKey, Port, Protocol, Service, Slice,
};

/// `mirror.linkerd.io/exported`.
pub const LABEL_EXPORTED: &str = "mirror.linkerd.io/exported";
/// `mirror.linkerd.io/federated`.
pub const LABEL_FEDERATED: &str = "mirror.linkerd.io/federated";
/// `mirror.linkerd.io/mirrored-service`.
pub const LABEL_MIRRORED: &str = "mirror.linkerd.io/mirrored-service";
/// `mirror.linkerd.io/cluster-name`.
pub const LABEL_CLUSTER_NAME: &str = "mirror.linkerd.io/cluster-name";
/// `mirror.linkerd.io/headless-mirror-svc-name`.
pub const LABEL_HEADLESS_PARENT: &str = "mirror.linkerd.io/headless-mirror-svc-name";
/// `mirror.linkerd.io/gateway-identity`.
pub const ANNOTATION_GATEWAY_IDENTITY: &str = "mirror.linkerd.io/gateway-identity";
/// `config.linkerd.io/opaque-ports` (copied onto mirror Services).
pub const ANNOTATION_OPAQUE_PORTS: &str = "config.linkerd.io/opaque-ports";
/// `kubernetes.io/service-name` on EndpointSlices.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Namespace of the Linkerd multicluster gateway.
pub const GATEWAY_NAMESPACE: &str = "linkerd-multicluster";
/// Name of the Linkerd multicluster gateway Service.
pub const GATEWAY_NAME: &str = "linkerd-gateway";
/// The gateway's data port name.
pub const GATEWAY_PORT_NAME: &str = "mc-gateway";

/// Why an object could not be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A required field is missing.
    #[error("{0} is missing")]
    Missing(&'static str),
    /// A field has a value we cannot use.
    #[error("{field}: {reason}")]
    Invalid {
        /// Field path.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ConvertError {
    ConvertError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

/// What a Service is to us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceKind {
    /// Exported and/or a federated member.
    Exported(Service),
    /// A mirror Service in the local cluster.
    Mirror(Mirror),
    /// The cluster's multicluster gateway.
    Gateway(Gateway),
    /// Nothing we serve (not exported, or a mirror seen in a remote cluster).
    Ignored,
}

/// A conversion that succeeded, possibly with something worth reporting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted<T> {
    /// The result.
    pub value: T,
    /// Problems that did not stop the conversion.
    pub warnings: Vec<String>,
}

fn key(meta: &ObjectMeta) -> Result<ObjectKey, ConvertError> {
    let name = meta
        .name
        .as_deref()
        .ok_or(ConvertError::Missing("metadata.name"))?;
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    if !is_dns_label(namespace) {
        return Err(invalid(
            "metadata.namespace",
            format!("{namespace:?} is not an RFC 1123 label"),
        ));
    }
    if !is_dns_label(name) {
        return Err(invalid(
            "metadata.name",
            format!("{name:?} is not an RFC 1123 label"),
        ));
    }
    Ok(ObjectKey::new(namespace, name))
}

fn label<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn parse_ip(field: &str, s: &str) -> Result<IpAddr, ConvertError> {
    s.parse()
        .map_err(|_| invalid(field, format!("{s:?} is not an IP address")))
}

fn port_number(field: &str, port: i32) -> Result<u16, ConvertError> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| invalid(field, format!("{port} is not a port number (1-65535)")))
}

fn port_name(field: &str, name: Option<&str>) -> Result<Option<Arc<str>>, ConvertError> {
    match name {
        None | Some("") => Ok(None),
        Some(n) => {
            let lower = n.to_ascii_lowercase();
            // IANA service names: letters, digits and '-'; 15 at most in
            // Kubernetes, but anything that is a DNS label can be served.
            if !is_dns_label(&lower) {
                return Err(invalid(field, format!("{n:?} is not a valid port name")));
            }
            Ok(Some(lower.into()))
        }
    }
}

fn protocol(field: &str, p: Option<&str>) -> Result<Protocol, ConvertError> {
    Protocol::parse(p).ok_or_else(|| {
        invalid(
            field,
            format!("{:?} is not TCP, UDP or SCTP", p.unwrap_or("")),
        )
    })
}

fn service_ports(svc: &K8sService) -> Result<Vec<Port>, ConvertError> {
    let ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
    ports
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, p)| {
            Ok(Port {
                name: port_name(&format!("spec.ports[{i}].name"), p.name.as_deref())?,
                protocol: protocol(&format!("spec.ports[{i}].protocol"), p.protocol.as_deref())?,
                port: port_number(&format!("spec.ports[{i}].port"), p.port)?,
            })
        })
        .collect()
}

fn cluster_ips(svc: &K8sService) -> Result<(bool, Vec<IpAddr>), ConvertError> {
    let spec = svc.spec.as_ref();
    let single = spec.and_then(|s| s.cluster_ip.as_deref());
    if single == Some("None") {
        return Ok((true, Vec::new()));
    }
    let many = spec.and_then(|s| s.cluster_ips.as_ref());
    let mut ips = Vec::new();
    match many {
        Some(list) if !list.is_empty() => {
            for (i, ip) in list.iter().enumerate() {
                if ip == "None" {
                    return Ok((true, Vec::new()));
                }
                ips.push(parse_ip(&format!("spec.clusterIPs[{i}]"), ip)?);
            }
        }
        _ => {
            if let Some(ip) = single.filter(|s| !s.is_empty()) {
                ips.push(parse_ip("spec.clusterIP", ip)?);
            }
        }
    }
    Ok((false, ips))
}

/// Classifies and converts a Service with the cluster's export
/// `selectors`. `local` tells whether it lives in the local cluster (only
/// there are mirror Services meaningful).
pub fn convert_service(
    svc: &K8sService,
    local: bool,
    selectors: &Selectors,
) -> Result<Converted<ServiceKind>, ConvertError> {
    let meta = &svc.metadata;
    let key = key(meta)?;
    let mut warnings = Vec::new();
    let done = |value, warnings| Ok(Converted { value, warnings });

    if &*key.namespace == GATEWAY_NAMESPACE && &*key.name == GATEWAY_NAME {
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref());
        let mut addresses = Vec::new();
        for (i, ing) in ingress.into_iter().flatten().enumerate() {
            match (&ing.ip, &ing.hostname) {
                (Some(ip), _) => addresses.push(parse_ip(&format!("status.loadBalancer.ingress[{i}].ip"), ip)?),
                (None, Some(host)) => warnings.push(format!(
                    "status.loadBalancer.ingress[{i}]: hostname {host:?} is not resolved by the file source; give the gateway an ip"
                )),
                (None, None) => {}
            }
        }
        let port = service_ports(svc)?
            .into_iter()
            .find(|p| p.name.as_deref() == Some(GATEWAY_PORT_NAME))
            .map(|p| p.port);
        if port.is_none() {
            warnings.push(format!("the gateway has no port named {GATEWAY_PORT_NAME}; SRV records for gateway-mode names are left out"));
        }
        let identity = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_GATEWAY_IDENTITY))
            .cloned();
        return done(
            ServiceKind::Gateway(Gateway {
                addresses,
                port,
                identity,
            }),
            warnings,
        );
    }

    if label(meta, LABEL_MIRRORED) == Some("true") {
        // Mirrors of a remote cluster are outputs, never exports.
        let Some(cluster) = label(meta, LABEL_CLUSTER_NAME).filter(|_| local) else {
            return done(ServiceKind::Ignored, warnings);
        };
        let (_, ips) = cluster_ips(svc)?;
        return done(
            ServiceKind::Mirror(Mirror {
                key,
                cluster: cluster.into(),
                headless_parent: label(meta, LABEL_HEADLESS_PARENT).map(Arc::from),
                cluster_ips: ips,
                ports: service_ports(svc)?,
            }),
            warnings,
        );
    }

    let labels = meta.labels.clone().unwrap_or_default();
    let (export, federated) = selectors.classify(&labels);
    if *selectors == *LINKERD_DEFAULTS {
        // Under the defaults an unmatched value is most likely a typo.
        if let Some(other) = label(meta, LABEL_EXPORTED).filter(|_| export.is_none()) {
            warnings.push(format!(
                "label {LABEL_EXPORTED}={other:?} is neither \"true\" (gateway mode) nor \"remote-discovery\" (flat mode); not exported"
            ));
        }
        if let Some(other) = label(meta, LABEL_FEDERATED).filter(|_| !federated) {
            warnings.push(format!(
                "label {LABEL_FEDERATED}={other:?} is not \"member\"; not federated"
            ));
        }
    }
    if export.is_none() && !federated {
        return done(ServiceKind::Ignored, warnings);
    }
    let spec = svc.spec.as_ref();
    if spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
        warnings.push("ExternalName services have no addresses to serve; skipped".to_owned());
        return done(ServiceKind::Ignored, warnings);
    }
    let (headless, ips) = cluster_ips(svc)?;
    let created = meta
        .creation_timestamp
        .as_ref()
        .map_or(i64::MAX, |t| t.0.as_second());
    done(
        ServiceKind::Exported(Service {
            key,
            created,
            export,
            federated,
            headless,
            cluster_ips: ips,
            ports: service_ports(svc)?,
            publish_not_ready: spec.and_then(|s| s.publish_not_ready_addresses) == Some(true),
            opaque_ports: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_OPAQUE_PORTS))
                .map(|v| Arc::from(v.as_str())),
            refused: false,
        }),
        warnings,
    )
}

/// Converts an EndpointSlice. `Ok(None)` for slices we do not serve (FQDN
/// address type).
pub fn convert_slice(slice: &K8sSlice) -> Result<Converted<Option<Slice>>, ConvertError> {
    let meta = &slice.metadata;
    let key = key_for_slice(meta)?;
    let mut warnings = Vec::new();
    let family = match slice.address_type.as_str() {
        "IPv4" => Family::V4,
        "IPv6" => Family::V6,
        "FQDN" => {
            return Ok(Converted {
                value: None,
                warnings: vec!["addressType FQDN is not served".to_owned()],
            });
        }
        other => {
            return Err(invalid(
                "addressType",
                format!("{other:?} is not IPv4, IPv6 or FQDN"),
            ));
        }
    };
    let service = label(meta, LABEL_SERVICE_NAME).ok_or(ConvertError::Missing(
        "metadata.labels[kubernetes.io/service-name]",
    ))?;
    if !is_dns_label(service) {
        return Err(invalid(
            "metadata.labels[kubernetes.io/service-name]",
            format!("{service:?} is not a service name"),
        ));
    }
    let mut ports = Vec::new();
    for (i, p) in slice.ports.iter().flatten().enumerate() {
        // A port without a number means "all ports": nothing SRV can say.
        let Some(number) = p.port else { continue };
        ports.push(Port {
            name: port_name(&format!("ports[{i}].name"), p.name.as_deref())?,
            protocol: protocol(&format!("ports[{i}].protocol"), p.protocol.as_deref())?,
            port: port_number(&format!("ports[{i}].port"), number)?,
        });
    }
    let mut endpoints = Vec::new();
    for (i, ep) in slice.endpoints.iter().enumerate() {
        let ready = ep.conditions.as_ref().and_then(|c| c.ready) != Some(false);
        let hostname = match ep.hostname.as_deref() {
            None | Some("") => None,
            Some(h) if is_dns_label(h) => Some(Arc::<str>::from(h)),
            Some(h) => {
                warnings.push(format!(
                    "endpoints[{i}].hostname {h:?} is not an RFC 1123 label; the dashed IP is used"
                ));
                None
            }
        };
        if ep.addresses.is_empty() {
            return Err(invalid(
                format!("endpoints[{i}].addresses"),
                "must hold at least one address",
            ));
        }
        for (j, a) in ep.addresses.iter().enumerate() {
            let field = format!("endpoints[{i}].addresses[{j}]");
            let addr = parse_ip(&field, a)?;
            if addr.is_ipv4() != (family == Family::V4) {
                return Err(invalid(
                    field,
                    format!("{a} does not match addressType {}", slice.address_type),
                ));
            }
            endpoints.push(Endpoint {
                addr,
                hostname: hostname.clone(),
                ready,
            });
        }
    }
    Ok(Converted {
        value: Some(Slice {
            key,
            service: service.into(),
            family,
            ports: ports.into(),
            endpoints,
        }),
        warnings,
    })
}

fn key_for_slice(meta: &ObjectMeta) -> Result<ObjectKey, ConvertError> {
    let name = meta
        .name
        .as_deref()
        .ok_or(ConvertError::Missing("metadata.name"))?;
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    if !is_dns_label(namespace) {
        return Err(invalid(
            "metadata.namespace",
            format!("{namespace:?} is not an RFC 1123 label"),
        ));
    }
    // Slice names are DNS subdomains (they may hold dots), not labels.
    if name.is_empty() || name.len() > 253 {
        return Err(invalid(
            "metadata.name",
            format!("{name:?} is not a valid object name"),
        ));
    }
    Ok(ObjectKey::new(namespace, name))
}

#[cfg(test)]
mod tests;
