//! Conversion of Kubernetes objects into slim model objects, shared by every
//! source so the file source and the live watches classify alike.
//!
//! Owns the meaning of Linkerd's labels (docs/linkerd.md §2): export mode,
//! federated membership, mirror Services and the gateway; and what a hostile
//! or broken object from a linked cluster costs: each problem is either a
//! skip of the whole object ([`ConvertError`]) or a clamp of the part that is
//! wrong (a [`Warning`]), always with a [`Reason`] from a fixed set, so it
//! can be counted. Clamps follow the API's own limits (1,000 endpoints per
//! slice, 100 addresses per endpoint, 63-character names and label values),
//! so what a real cluster can hold converts unchanged. Warnings are one per
//! reason per object, however many times the object repeats the problem,
//! and never echo more than a few dozen characters of input.
//!
//! An address held by two slices of one service is not a problem here:
//! Kubernetes itself shows an endpoint in two slices while it moves between
//! them, and the answer dedups (`model::entry`).
//!
//! It must not keep the full objects (only the fields the model needs, and
//! of the annotations only the bounded `config.linkerd.io/opaque-ports` and
//! gateway identity, plus a slice's last-change trigger time read as a time
//! for the propagation metric, [`slice_trigger_time`]), must not decide
//! anything about DNS names, and must not count or log: its callers do.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Service as K8sService;
use k8s_openapi::api::discovery::v1::EndpointSlice as K8sSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use super::selector::{LINKERD_DEFAULTS, Selectors};
use crate::model::objects::{
    Endpoint, Family, Gateway, Mirror, ObjectKey, Port, Protocol, Service, Slice,
};
use crate::vocab::name::is_dns_label;
use crate::vocab::place::{ANNOTATION_FAILOVER_ORDER, ANNOTATION_MIN_READY, Rule};
use crate::vocab::trust::{NamespaceDenied, Rejected, Special, Trust};

use crate::vocab::linkerd::*;

/// Most endpoints Kubernetes allows in one EndpointSlice; the rest of a
/// longer one is left out.
pub(crate) const MAX_SLICE_ENDPOINTS: usize = 1000;
/// Most addresses Kubernetes allows in one endpoint.
pub(crate) const MAX_ENDPOINT_ADDRESSES: usize = 100;
/// Longest label value Kubernetes allows.
pub(crate) const MAX_LABEL_VALUE: usize = 63;
/// Longest annotation value kept. A list of opaque ports or an identity
/// name is far shorter; anything longer is hostile, and would be copied
/// onto every mirror Service.
pub(crate) const MAX_ANNOTATION: usize = 1024;
/// Longest EndpointSlice name (a DNS subdomain).
const MAX_OBJECT_NAME: usize = 253;
/// How much of an input value a text quotes.
const QUOTED: usize = 64;

/// Why an object was skipped or clamped: a fixed set, so that it can be a
/// metric label and a key of `/debug/clusters`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// `metadata.name` is missing.
    NameMissing,
    /// A name is longer than Kubernetes allows (a Service name over 63, a
    /// slice name over 253 characters).
    NameTooLong,
    /// A Service name is not an RFC 1123 label.
    NameNotALabel,
    /// The namespace is not an RFC 1123 label.
    NamespaceNotALabel,
    /// A label value we read is longer than 63 characters.
    LabelValueTooLong,
    /// An annotation value we keep is longer than [`MAX_ANNOTATION`].
    AnnotationTooLarge,
    /// A ClusterIP is not an IP address.
    ClusterIpNotIp,
    /// A port number is not in 1-65535.
    PortOutOfRange,
    /// A port name is not a DNS label.
    PortNameInvalid,
    /// A port protocol is not TCP, UDP or SCTP.
    PortProtocolUnknown,
    /// The value of `mirror.linkerd.io/exported` means nothing to us.
    ExportLabelUnknown,
    /// The value of `mirror.linkerd.io/federated` means nothing to us.
    FederatedLabelUnknown,
    /// An ExternalName Service has no addresses to serve.
    ExternalName,
    /// A gateway load-balancer ingress given by hostname.
    GatewayHostname,
    /// The gateway has no `mc-gateway` port.
    GatewayPortMissing,
    /// A slice's `kubernetes.io/service-name` label is missing.
    ServiceNameMissing,
    /// A slice's `kubernetes.io/service-name` label is not a Service name.
    ServiceNameNotALabel,
    /// A slice's addressType is not IPv4, IPv6 or FQDN.
    AddressTypeUnknown,
    /// FQDN slices are not served.
    AddressTypeFqdn,
    /// More than [`MAX_SLICE_ENDPOINTS`] endpoints in one slice.
    TooManyEndpoints,
    /// More than [`MAX_ENDPOINT_ADDRESSES`] addresses in one endpoint.
    TooManyAddresses,
    /// An endpoint without any address.
    EndpointWithoutAddress,
    /// An address (endpoint or gateway ingress) is not an IP address.
    AddressNotIp,
    /// An endpoint address is not of the slice's addressType.
    AddressWrongFamily,
    /// The same address twice in one slice.
    DuplicateAddress,
    /// An endpoint hostname is not a DNS label (the dashed IP is used).
    HostnameNotALabel,
    /// The object could not be decoded at all (counted by the sources).
    Undecodable,
    /// A ClusterProperty `cluster.clusterset.k8s.io` whose value is not an
    /// RFC 1123 label (KEP-2149 requires one).
    ClusterIdNotALabel,
    /// A ServiceImport `spec.type` that is neither ClusterSetIP nor Headless.
    ImportTypeUnknown,
    /// An address in `0.0.0.0/8` or `::` ([`Special::Unspecified`]).
    AddressUnspecified,
    /// A loopback address ([`Special::Loopback`]).
    AddressLoopback,
    /// A link-local address ([`Special::LinkLocal`]).
    AddressLinkLocal,
    /// A multicast address ([`Special::Multicast`]).
    AddressMulticast,
    /// The limited broadcast address ([`Special::Broadcast`]).
    AddressBroadcast,
    /// A cloud metadata service address ([`Special::Metadata`]).
    AddressMetadata,
    /// An address in the operator's `deny-addresses`.
    AddressDenied,
    /// An address outside the cluster's `allowedAddresses`.
    AddressNotAllowed,
    /// A service in a namespace the cluster may not export from (a system
    /// namespace, ours, or one its claims deny): not held, and its names
    /// do not exist.
    NamespaceDenied,
    /// A Service's `clusterset-dns.io/failover-order` or `min-ready` is
    /// invalid: the default failover rule applies to it.
    LocalityAnnotationInvalid,
    /// A region or zone (ClusterProperty, Link annotation) that is not a
    /// Kubernetes label value: the place stays unknown.
    PlaceInvalid,
    /// A Service's `ipFamilies`, `sessionAffinity`, `internalTrafficPolicy`
    /// or `trafficDistribution` value Kubernetes does not know: left off
    /// the ServiceImport.
    ServiceFieldUnknown,
    /// A ServiceExport's exported label or annotation that the local API
    /// server would refuse, or one under our own prefix: left off the
    /// ServiceImport.
    ExportedMetaInvalid,
}

impl Reason {
    /// Every reason, in declaration order.
    pub const ALL: [Reason; 42] = [
        Reason::NameMissing,
        Reason::NameTooLong,
        Reason::NameNotALabel,
        Reason::NamespaceNotALabel,
        Reason::LabelValueTooLong,
        Reason::AnnotationTooLarge,
        Reason::ClusterIpNotIp,
        Reason::PortOutOfRange,
        Reason::PortNameInvalid,
        Reason::PortProtocolUnknown,
        Reason::ExportLabelUnknown,
        Reason::FederatedLabelUnknown,
        Reason::ExternalName,
        Reason::GatewayHostname,
        Reason::GatewayPortMissing,
        Reason::ServiceNameMissing,
        Reason::ServiceNameNotALabel,
        Reason::AddressTypeUnknown,
        Reason::AddressTypeFqdn,
        Reason::TooManyEndpoints,
        Reason::TooManyAddresses,
        Reason::EndpointWithoutAddress,
        Reason::AddressNotIp,
        Reason::AddressWrongFamily,
        Reason::DuplicateAddress,
        Reason::HostnameNotALabel,
        Reason::Undecodable,
        Reason::ClusterIdNotALabel,
        Reason::ImportTypeUnknown,
        Reason::AddressUnspecified,
        Reason::AddressLoopback,
        Reason::AddressLinkLocal,
        Reason::AddressMulticast,
        Reason::AddressBroadcast,
        Reason::AddressMetadata,
        Reason::AddressDenied,
        Reason::AddressNotAllowed,
        Reason::NamespaceDenied,
        Reason::LocalityAnnotationInvalid,
        Reason::PlaceInvalid,
        Reason::ServiceFieldUnknown,
        Reason::ExportedMetaInvalid,
    ];

    /// The `reason` label value.
    pub fn label(self) -> &'static str {
        match self {
            Reason::NameMissing => "name_missing",
            Reason::NameTooLong => "name_too_long",
            Reason::NameNotALabel => "name_not_a_label",
            Reason::NamespaceNotALabel => "namespace_not_a_label",
            Reason::LabelValueTooLong => "label_value_too_long",
            Reason::AnnotationTooLarge => "annotation_too_large",
            Reason::ClusterIpNotIp => "cluster_ip_not_ip",
            Reason::PortOutOfRange => "port_out_of_range",
            Reason::PortNameInvalid => "port_name_invalid",
            Reason::PortProtocolUnknown => "port_protocol_unknown",
            Reason::ExportLabelUnknown => "export_label_unknown",
            Reason::FederatedLabelUnknown => "federated_label_unknown",
            Reason::ExternalName => "external_name",
            Reason::GatewayHostname => "gateway_hostname",
            Reason::GatewayPortMissing => "gateway_port_missing",
            Reason::ServiceNameMissing => "service_name_missing",
            Reason::ServiceNameNotALabel => "service_name_not_a_label",
            Reason::AddressTypeUnknown => "address_type_unknown",
            Reason::AddressTypeFqdn => "address_type_fqdn",
            Reason::TooManyEndpoints => "too_many_endpoints",
            Reason::TooManyAddresses => "too_many_addresses",
            Reason::EndpointWithoutAddress => "endpoint_without_address",
            Reason::AddressNotIp => "address_not_ip",
            Reason::AddressWrongFamily => "address_wrong_family",
            Reason::DuplicateAddress => "duplicate_address",
            Reason::HostnameNotALabel => "hostname_not_a_label",
            Reason::Undecodable => "undecodable",
            Reason::ClusterIdNotALabel => "cluster_id_not_a_label",
            Reason::ImportTypeUnknown => "import_type_unknown",
            Reason::AddressUnspecified => "address_unspecified",
            Reason::AddressLoopback => "address_loopback",
            Reason::AddressLinkLocal => "address_link_local",
            Reason::AddressMulticast => "address_multicast",
            Reason::AddressBroadcast => "address_broadcast",
            Reason::AddressMetadata => "address_metadata",
            Reason::AddressDenied => "address_denied",
            Reason::AddressNotAllowed => "address_not_allowed",
            Reason::NamespaceDenied => "namespace_denied",
            Reason::LocalityAnnotationInvalid => "locality_annotation_invalid",
            Reason::PlaceInvalid => "place_invalid",
            Reason::ServiceFieldUnknown => "service_field_unknown",
            Reason::ExportedMetaInvalid => "exported_meta_invalid",
        }
    }

    /// The reason an address [`Trust`] rejects is counted under.
    pub fn of_rejected(r: Rejected) -> Self {
        match r {
            Rejected::Special(Special::Unspecified) => Reason::AddressUnspecified,
            Rejected::Special(Special::Loopback) => Reason::AddressLoopback,
            Rejected::Special(Special::LinkLocal) => Reason::AddressLinkLocal,
            Rejected::Special(Special::Multicast) => Reason::AddressMulticast,
            Rejected::Special(Special::Broadcast) => Reason::AddressBroadcast,
            Rejected::Special(Special::Metadata) => Reason::AddressMetadata,
            Rejected::Denied(_) => Reason::AddressDenied,
            Rejected::NotAllowed => Reason::AddressNotAllowed,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// What became of an object that had a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Adjustment {
    /// Not used at all: a conversion error (the last good version, if any,
    /// is kept), or an object we do not serve (ExternalName, FQDN, an
    /// unknown export label).
    Skipped,
    /// Used, with the part the reason names left out or replaced.
    Clamped,
}

impl Adjustment {
    /// The `action` label value.
    pub fn label(self) -> &'static str {
        match self {
            Adjustment::Skipped => "skipped",
            Adjustment::Clamped => "clamped",
        }
    }
}

/// Why an object could not be converted at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConvertError {
    /// A required field is missing.
    #[error("{field} is missing")]
    Missing {
        /// Field path.
        field: &'static str,
        /// The counted reason.
        reason: Reason,
    },
    /// A field has a value we cannot use.
    #[error("{field}: {text}")]
    Invalid {
        /// Field path.
        field: String,
        /// What is wrong.
        text: String,
        /// The counted reason.
        reason: Reason,
    },
}

impl ConvertError {
    /// The counted reason.
    pub(crate) fn reason(&self) -> Reason {
        match self {
            ConvertError::Missing { reason, .. } | ConvertError::Invalid { reason, .. } => *reason,
        }
    }
}

fn invalid(reason: Reason, field: impl Into<String>, text: impl Into<String>) -> ConvertError {
    ConvertError::Invalid {
        field: field.into(),
        text: text.into(),
        reason,
    }
}

/// Something left out of (or noted about) an object that still converted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Warning {
    /// The counted reason.
    pub reason: Reason,
    /// The first occurrence, naming the field.
    pub text: String,
    /// Further occurrences of the same reason in this object, not spelled
    /// out: one warning per reason per object bounds logs and problem lists
    /// however hostile the object.
    pub more: usize,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        if self.more > 0 {
            write!(f, " (and {} more like it)", self.more)?;
        }
        Ok(())
    }
}

/// The warnings of one object, one per reason.
#[derive(Debug, Default)]
struct Warnings(Vec<Warning>);

impl Warnings {
    /// Notes `reason`; `text` is only built for its first occurrence.
    fn add(&mut self, reason: Reason, text: impl FnOnce() -> String) {
        match self.0.iter_mut().find(|w| w.reason == reason) {
            Some(w) => w.more += 1,
            None => self.0.push(Warning {
                reason,
                text: text(),
                more: 0,
            }),
        }
    }
}

/// `addr` (found at `field`) when `trust` takes it from the cluster; else
/// `None`, with a warning: a rejected address is left out, and the rest of
/// the object is served.
fn trusted(
    trust: &Trust,
    addr: IpAddr,
    field: impl FnOnce() -> String,
    w: &mut Warnings,
) -> Option<IpAddr> {
    match trust.check_address(addr) {
        Ok(()) => Some(addr),
        Err(r) => {
            w.add(Reason::of_rejected(r), || {
                format!("{}: {addr} is {r}; left out", field())
            });
            None
        }
    }
}

/// The addresses of `addrs` that `trust` takes, with a warning per reason
/// for the rest: for addresses that come from no object (a gateway
/// declared by a Link or the clusters file, hostnames resolved to
/// addresses). `field` names where they came from.
pub(crate) fn trusted_addresses(
    trust: &Trust,
    addrs: &[IpAddr],
    field: &str,
) -> Converted<Vec<IpAddr>> {
    let mut w = Warnings::default();
    let value = addrs
        .iter()
        .filter_map(|a| trusted(trust, *a, || field.to_owned(), &mut w))
        .collect();
    Converted {
        value,
        warnings: w.0,
    }
}

/// What a Service is to us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServiceKind {
    /// Exported and/or a federated member.
    Exported(Service),
    /// A mirror Service in the local cluster.
    Mirror(Mirror),
    /// The cluster's multicluster gateway.
    Gateway(Gateway),
    /// An ordinary Service with no Linkerd export label: served only if a
    /// ServiceExport of the same namespace/name makes it an MCS member.
    Unexported(Service),
    /// An ExternalName Service: no addresses to serve. Its key is kept
    /// only to tell a ServiceExport of it why it is invalid.
    ExternalName(ObjectKey),
    /// Nothing we serve (a mirror seen in a remote cluster, a Service with
    /// our mirror label but no cluster).
    Ignored,
}

/// A conversion that succeeded, possibly with something worth reporting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Converted<T> {
    /// The result.
    pub value: T,
    /// Problems that did not stop the conversion, one per reason.
    pub warnings: Vec<Warning>,
}

impl Converted<ServiceKind> {
    /// What the warnings did to the Service: nothing served is a skip.
    pub(crate) fn adjustment(&self) -> Adjustment {
        match self.value {
            ServiceKind::Ignored | ServiceKind::ExternalName(_) | ServiceKind::Unexported(_) => {
                Adjustment::Skipped
            }
            _ => Adjustment::Clamped,
        }
    }
}

impl Converted<Option<Slice>> {
    /// What the warnings did to the slice: nothing served is a skip.
    pub(crate) fn adjustment(&self) -> Adjustment {
        match self.value {
            None => Adjustment::Skipped,
            Some(_) => Adjustment::Clamped,
        }
    }
}

/// `s` quoted, cut to a few dozen characters: texts end up in logs and
/// problem lists, and a hostile value may be a megabyte.
fn quote(s: &str) -> String {
    if s.len() <= QUOTED {
        return format!("{s:?}");
    }
    let cut = (0..=QUOTED)
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{:?}... ({} bytes)", &s[..cut], s.len())
}

fn namespace(meta: &ObjectMeta) -> Result<&str, ConvertError> {
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    if !is_dns_label(namespace) {
        return Err(invalid(
            Reason::NamespaceNotALabel,
            "metadata.namespace",
            format!("{} is not an RFC 1123 label", quote(namespace)),
        ));
    }
    Ok(namespace)
}

fn name(meta: &ObjectMeta) -> Result<&str, ConvertError> {
    meta.name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(ConvertError::Missing {
            field: "metadata.name",
            reason: Reason::NameMissing,
        })
}

/// A Service's key: its name becomes a DNS label.
fn key(meta: &ObjectMeta) -> Result<ObjectKey, ConvertError> {
    let name = name(meta)?;
    let namespace = namespace(meta)?;
    if name.len() > 63 {
        return Err(invalid(
            Reason::NameTooLong,
            "metadata.name",
            format!(
                "{} is {} characters; a Service name is an RFC 1123 label of at most 63",
                quote(name),
                name.len()
            ),
        ));
    }
    if !is_dns_label(name) {
        return Err(invalid(
            Reason::NameNotALabel,
            "metadata.name",
            format!("{} is not an RFC 1123 label", quote(name)),
        ));
    }
    Ok(ObjectKey::new(namespace, name))
}

fn label<'m>(meta: &'m ObjectMeta, key: &str) -> Option<&'m str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// A label value we keep or key on, which Kubernetes bounds to 63
/// characters.
fn bounded_label<'m>(meta: &'m ObjectMeta, key: &str) -> Result<Option<&'m str>, ConvertError> {
    match label(meta, key) {
        Some(v) if v.len() > MAX_LABEL_VALUE => Err(invalid(
            Reason::LabelValueTooLong,
            format!("metadata.labels[{key}]"),
            format!(
                "{} is {} characters; a label value has at most {MAX_LABEL_VALUE}",
                quote(v),
                v.len()
            ),
        )),
        v => Ok(v),
    }
}

/// An annotation we keep, dropped (with a warning) past [`MAX_ANNOTATION`].
fn bounded_annotation(meta: &ObjectMeta, key: &str, w: &mut Warnings) -> Option<String> {
    let v = meta.annotations.as_ref()?.get(key)?;
    if v.len() > MAX_ANNOTATION {
        w.add(Reason::AnnotationTooLarge, || {
            format!(
                "metadata.annotations[{key}] is {} bytes, more than {MAX_ANNOTATION}; it is dropped",
                v.len()
            )
        });
        return None;
    }
    Some(v.clone())
}

/// The failover rule a Service's annotations set (docs/locality.md), if
/// any; an invalid one is reported and the default rule applies.
fn locality_rule(meta: &ObjectMeta, w: &mut Warnings) -> Option<Arc<Rule>> {
    let order = bounded_annotation(meta, ANNOTATION_FAILOVER_ORDER, w);
    let min_ready = bounded_annotation(meta, ANNOTATION_MIN_READY, w);
    if order.is_none() && min_ready.is_none() {
        return None;
    }
    match Rule::parse(order.as_deref(), min_ready.as_deref()) {
        Ok(rule) => Some(Arc::new(rule)),
        Err(e) => {
            w.add(Reason::LocalityAnnotationInvalid, || {
                format!("{e}; the default failover rule applies")
            });
            None
        }
    }
}

/// One port, or `None` (with a warning) when any of its fields is unusable:
/// a bad port costs that port, not the object.
fn port(
    field: &str,
    name: Option<&str>,
    protocol: Option<&str>,
    number: i32,
    w: &mut Warnings,
) -> Option<Port> {
    let Some(port) = u16::try_from(number).ok().filter(|p| *p != 0) else {
        w.add(Reason::PortOutOfRange, || {
            format!("{field}.port: {number} is not a port number (1-65535); the port is left out")
        });
        return None;
    };
    let name = match name {
        None | Some("") => None,
        Some(n) => {
            let lower = n.to_ascii_lowercase();
            // IANA service names: letters, digits and '-'; 15 at most in
            // Kubernetes, but anything that is a DNS label can be served.
            if !is_dns_label(&lower) {
                w.add(Reason::PortNameInvalid, || {
                    format!(
                        "{field}.name: {} is not a valid port name; the port is left out",
                        quote(n)
                    )
                });
                return None;
            }
            Some(Arc::from(lower))
        }
    };
    let Some(protocol) = Protocol::parse(protocol) else {
        w.add(Reason::PortProtocolUnknown, || {
            format!(
                "{field}.protocol: {} is not TCP, UDP or SCTP; the port is left out",
                quote(protocol.unwrap_or(""))
            )
        });
        return None;
    };
    Some(Port {
        name,
        protocol,
        port,
    })
}

fn service_ports(svc: &K8sService, w: &mut Warnings) -> Vec<Port> {
    let ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
    ports
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, p)| {
            let field = format!("spec.ports[{i}]");
            port(&field, p.name.as_deref(), p.protocol.as_deref(), p.port, w)
        })
        .collect()
}

fn cluster_ip(field: &str, s: &str) -> Result<IpAddr, ConvertError> {
    s.parse().map_err(|_| {
        invalid(
            Reason::ClusterIpNotIp,
            field,
            format!("{} is not an IP address", quote(s)),
        )
    })
}

/// Whether the Service is headless, and its ClusterIPs. A bad ClusterIP
/// skips the Service: without it, it would look headless. One `trust`
/// rejects is left out (a local Service's ClusterIP is answered for its
/// gateway-mode name, and it is no more trusted than a remote one).
fn cluster_ips(
    svc: &K8sService,
    trust: &Trust,
    w: &mut Warnings,
) -> Result<(bool, Vec<IpAddr>), ConvertError> {
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
                let field = format!("spec.clusterIPs[{i}]");
                ips.push((cluster_ip(&field, ip)?, field));
            }
        }
        _ => {
            if let Some(ip) = single.filter(|s| !s.is_empty()) {
                let field = "spec.clusterIP".to_owned();
                ips.push((cluster_ip(&field, ip)?, field));
            }
        }
    }
    let ips = ips
        .into_iter()
        .filter_map(|(ip, field)| trusted(trust, ip, || field, w))
        .collect();
    Ok((false, ips))
}

/// Classifies and converts a Service with the cluster's export
/// `selectors`, taking from it only what `trust` allows. `local` tells
/// whether it lives in the local cluster (only there are mirror Services
/// meaningful).
pub(crate) fn convert_service(
    svc: &K8sService,
    local: bool,
    selectors: &Selectors,
    trust: &Trust,
) -> Result<Converted<ServiceKind>, ConvertError> {
    let meta = &svc.metadata;
    let key = key(meta)?;
    let mut w = Warnings::default();
    let value = if &*key.namespace == GATEWAY_NAMESPACE && &*key.name == GATEWAY_NAME {
        ServiceKind::Gateway(gateway(svc, trust, &mut w))
    } else if let Err(why) = trust.check_namespace(&key.namespace) {
        denied_namespace(svc, &key, local, selectors, why, &mut w)
    } else if label(meta, LABEL_MIRRORED) == Some("true") {
        mirror(svc, key, local, trust, &mut w)?
    } else {
        exported(svc, key, selectors, trust, &mut w)?
    };
    Ok(Converted {
        value,
        warnings: w.0,
    })
}

/// A Service of a namespace the cluster may not export from is not ours to
/// serve: ignored, and counted when it would have been served (an
/// exported or federated Service, a local mirror).
fn denied_namespace(
    svc: &K8sService,
    key: &ObjectKey,
    local: bool,
    selectors: &Selectors,
    why: NamespaceDenied,
    w: &mut Warnings,
) -> ServiceKind {
    let meta = &svc.metadata;
    let no_labels = BTreeMap::new();
    let (export, federated) = selectors.classify(meta.labels.as_ref().unwrap_or(&no_labels));
    let mirror = local && label(meta, LABEL_MIRRORED) == Some("true");
    if export.is_some() || federated || mirror {
        w.add(Reason::NamespaceDenied, || {
            format!(
                "metadata.namespace: {} is {why}; the Service is not served",
                key.namespace
            )
        });
    }
    ServiceKind::Ignored
}

fn gateway(svc: &K8sService, trust: &Trust, w: &mut Warnings) -> Gateway {
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    let mut addresses = Vec::new();
    for (i, ing) in ingress.into_iter().flatten().enumerate() {
        let field = format!("status.loadBalancer.ingress[{i}]");
        match (&ing.ip, &ing.hostname) {
            (Some(ip), _) => match ip.parse() {
                Ok(ip) => addresses.extend(trusted(trust, ip, || format!("{field}.ip"), w)),
                Err(_) => w.add(Reason::AddressNotIp, || {
                    format!("{field}.ip: {} is not an IP address; left out", quote(ip))
                }),
            },
            (None, Some(host)) => w.add(Reason::GatewayHostname, || {
                format!(
                    "{field}: hostname {} is not resolved by the file source; give the gateway an ip",
                    quote(host)
                )
            }),
            (None, None) => {}
        }
    }
    let port = service_ports(svc, w)
        .into_iter()
        .find(|p| p.name.as_deref() == Some(GATEWAY_PORT_NAME))
        .map(|p| p.port);
    if port.is_none() {
        w.add(Reason::GatewayPortMissing, || {
            format!("the gateway has no port named {GATEWAY_PORT_NAME}; SRV records for gateway-mode names are left out")
        });
    }
    Gateway {
        addresses,
        port,
        identity: bounded_annotation(&svc.metadata, ANNOTATION_GATEWAY_IDENTITY, w),
    }
}

fn mirror(
    svc: &K8sService,
    key: ObjectKey,
    local: bool,
    trust: &Trust,
    w: &mut Warnings,
) -> Result<ServiceKind, ConvertError> {
    // Mirrors of a remote cluster are outputs, never exports.
    if !local {
        return Ok(ServiceKind::Ignored);
    }
    let meta = &svc.metadata;
    let Some(cluster) = bounded_label(meta, LABEL_CLUSTER_NAME)? else {
        return Ok(ServiceKind::Ignored);
    };
    let headless_parent = bounded_label(meta, LABEL_HEADLESS_PARENT)?.map(Arc::from);
    let (_, ips) = cluster_ips(svc, trust, w)?;
    Ok(ServiceKind::Mirror(Mirror {
        key,
        cluster: cluster.into(),
        headless_parent,
        cluster_ips: ips,
        ports: service_ports(svc, w),
    }))
}

fn exported(
    svc: &K8sService,
    key: ObjectKey,
    selectors: &Selectors,
    trust: &Trust,
    w: &mut Warnings,
) -> Result<ServiceKind, ConvertError> {
    let meta = &svc.metadata;
    let no_labels = BTreeMap::new();
    let (export, federated) = selectors.classify(meta.labels.as_ref().unwrap_or(&no_labels));
    if *selectors == *LINKERD_DEFAULTS {
        // Under the defaults an unmatched value is most likely a typo.
        if let Some(other) = label(meta, LABEL_EXPORTED).filter(|_| export.is_none()) {
            w.add(Reason::ExportLabelUnknown, || format!(
                "label {LABEL_EXPORTED}={} is neither \"true\" (gateway mode) nor \"remote-discovery\" (flat mode); not exported",
                quote(other)
            ));
        }
        if let Some(other) = label(meta, LABEL_FEDERATED).filter(|_| !federated) {
            w.add(Reason::FederatedLabelUnknown, || {
                format!(
                    "label {LABEL_FEDERATED}={} is not \"member\"; not federated",
                    quote(other)
                )
            });
        }
    }
    let spec = svc.spec.as_ref();
    if spec.and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
        if export.is_some() || federated {
            w.add(Reason::ExternalName, || {
                "ExternalName services have no addresses to serve; skipped".to_owned()
            });
        }
        return Ok(ServiceKind::ExternalName(key));
    }
    let exported = export.is_some() || federated;
    // An unexported service's problems are only worth a warning once an
    // MCS export makes it served; until then they are not reported.
    let mut quiet = Warnings::default();
    let w = if exported { w } else { &mut quiet };
    let (headless, ips) = cluster_ips(svc, trust, w)?;
    let created = meta
        .creation_timestamp
        .as_ref()
        .map_or(i64::MAX, |t| t.0.as_second());
    let service = Service {
        key,
        created,
        export,
        federated,
        headless,
        cluster_ips: ips,
        ports: service_ports(svc, w),
        publish_not_ready: spec.and_then(|s| s.publish_not_ready_addresses) == Some(true),
        opaque_ports: bounded_annotation(meta, ANNOTATION_OPAQUE_PORTS, w).map(Arc::from),
        refused: false,
        mcs: None,
        locality: locality_rule(meta, w),
        mcs_nearest: false,
        import_fields: mcs::import_fields(spec, w),
        exported_meta: None,
    };
    Ok(if exported {
        ServiceKind::Exported(service)
    } else {
        ServiceKind::Unexported(service)
    })
}

/// Converts an EndpointSlice. `Ok` with no slice for slices we do not
/// serve (FQDN address type); a bad port, endpoint or address is left out
/// with a warning, and only a slice we cannot place (its key, service or
/// address type) is an error.
pub(crate) fn convert_slice(
    slice: &K8sSlice,
    trust: &Trust,
) -> Result<Converted<Option<Slice>>, ConvertError> {
    let meta = &slice.metadata;
    let key = key_for_slice(meta)?;
    let mut w = Warnings::default();
    let family = match slice.address_type.as_str() {
        "IPv4" => Family::V4,
        "IPv6" => Family::V6,
        "FQDN" => {
            w.add(Reason::AddressTypeFqdn, || {
                "addressType FQDN is not served".to_owned()
            });
            return Ok(Converted {
                value: None,
                warnings: w.0,
            });
        }
        other => {
            return Err(invalid(
                Reason::AddressTypeUnknown,
                "addressType",
                format!("{} is not IPv4, IPv6 or FQDN", quote(other)),
            ));
        }
    };
    let service = slice_service(meta)?;
    let mut ports = Vec::new();
    for (i, p) in slice.ports.iter().flatten().enumerate() {
        // A port without a number means "all ports": nothing SRV can say.
        let Some(number) = p.port else { continue };
        let field = format!("ports[{i}]");
        ports.extend(port(
            &field,
            p.name.as_deref(),
            p.protocol.as_deref(),
            number,
            &mut w,
        ));
    }
    let endpoints = slice_endpoints(slice, family, trust, &mut w);
    Ok(Converted {
        value: Some(Slice {
            key,
            service: service.into(),
            family,
            ports: ports.into(),
            endpoints: endpoints.into(),
        }),
        warnings: w.0,
    })
}

/// The slice's service, from its `kubernetes.io/service-name` label.
fn slice_service(meta: &ObjectMeta) -> Result<&str, ConvertError> {
    const FIELD: &str = "metadata.labels[kubernetes.io/service-name]";
    let service = bounded_label(meta, LABEL_SERVICE_NAME)?.ok_or(ConvertError::Missing {
        field: FIELD,
        reason: Reason::ServiceNameMissing,
    })?;
    if !is_dns_label(service) {
        return Err(invalid(
            Reason::ServiceNameNotALabel,
            FIELD,
            format!("{} is not a service name", quote(service)),
        ));
    }
    Ok(service)
}

/// The endpoints of a slice, one per address: at most the first
/// [`MAX_SLICE_ENDPOINTS`], each address once.
fn slice_endpoints(
    slice: &K8sSlice,
    family: Family,
    trust: &Trust,
    w: &mut Warnings,
) -> Vec<Endpoint> {
    let all = &slice.endpoints;
    if all.len() > MAX_SLICE_ENDPOINTS {
        w.add(Reason::TooManyEndpoints, || {
            format!(
                "endpoints: {} endpoints, more than the {MAX_SLICE_ENDPOINTS} Kubernetes allows in one slice; the first {MAX_SLICE_ENDPOINTS} are kept",
                all.len()
            )
        });
    }
    let kept = &all[..all.len().min(MAX_SLICE_ENDPOINTS)];
    let mut seen = HashSet::with_capacity(kept.len());
    let mut out = Vec::with_capacity(kept.len());
    for (i, ep) in kept.iter().enumerate() {
        let ready = ep.conditions.as_ref().and_then(|c| c.ready) != Some(false);
        let hostname = match ep.hostname.as_deref() {
            None | Some("") => None,
            Some(h) if is_dns_label(h) => Some(Arc::<str>::from(h)),
            Some(h) => {
                w.add(Reason::HostnameNotALabel, || {
                    format!(
                        "endpoints[{i}].hostname {} is not an RFC 1123 label; the dashed IP is used",
                        quote(h)
                    )
                });
                None
            }
        };
        let kind = (family, slice.address_type.as_str());
        for addr in endpoint_addresses(i, &ep.addresses, kind, trust, w) {
            if !seen.insert(addr) {
                w.add(Reason::DuplicateAddress, || {
                    format!("endpoints[{i}]: {addr} is already in this slice; the first is kept")
                });
                continue;
            }
            out.push(Endpoint {
                addr,
                hostname: hostname.clone(),
                ready,
            });
        }
    }
    out
}

/// The usable addresses of endpoint `i`: at most the first
/// [`MAX_ENDPOINT_ADDRESSES`], IPs of the slice's family (`kind`: the
/// family and the addressType as written) that `trust` takes.
fn endpoint_addresses(
    i: usize,
    addresses: &[String],
    (family, address_type): (Family, &str),
    trust: &Trust,
    w: &mut Warnings,
) -> Vec<IpAddr> {
    if addresses.is_empty() {
        w.add(Reason::EndpointWithoutAddress, || {
            format!(
                "endpoints[{i}].addresses: must hold at least one address; the endpoint is left out"
            )
        });
    }
    if addresses.len() > MAX_ENDPOINT_ADDRESSES {
        w.add(Reason::TooManyAddresses, || {
            format!(
                "endpoints[{i}].addresses: {} addresses, more than the {MAX_ENDPOINT_ADDRESSES} Kubernetes allows; the first {MAX_ENDPOINT_ADDRESSES} are kept",
                addresses.len()
            )
        });
    }
    let mut out = Vec::new();
    for (j, a) in addresses.iter().take(MAX_ENDPOINT_ADDRESSES).enumerate() {
        let field = || format!("endpoints[{i}].addresses[{j}]");
        let Ok(addr) = a.parse::<IpAddr>() else {
            w.add(Reason::AddressNotIp, || {
                format!("{}: {} is not an IP address; left out", field(), quote(a))
            });
            continue;
        };
        if addr.is_ipv4() != (family == Family::V4) {
            w.add(Reason::AddressWrongFamily, || {
                format!(
                    "{}: {a} does not match addressType {address_type}; left out",
                    field()
                )
            });
            continue;
        }
        out.extend(trusted(trust, addr, field, w));
    }
    out
}

fn key_for_slice(meta: &ObjectMeta) -> Result<ObjectKey, ConvertError> {
    let name = name(meta)?;
    let namespace = namespace(meta)?;
    // Slice names are DNS subdomains (they may hold dots), not labels.
    if name.len() > MAX_OBJECT_NAME {
        return Err(invalid(
            Reason::NameTooLong,
            "metadata.name",
            format!(
                "{} is {} characters; an object name has at most {MAX_OBJECT_NAME}",
                quote(name),
                name.len()
            ),
        ));
    }
    Ok(ObjectKey::new(namespace, name))
}

/// Longest trigger-time annotation read: RFC 3339 with nanoseconds and an
/// offset is 35 characters; anything much longer is not a time.
const MAX_TRIGGER_TIME: usize = 64;

/// Why a slice's `endpoints.kubernetes.io/last-change-trigger-time` is not
/// used (the slice is, unchanged: the annotation only feeds a metric).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TriggerTimeError {
    /// Longer than any RFC 3339 time.
    #[error("{0} bytes, longer than an RFC 3339 time")]
    TooLong(usize),
    /// Not an RFC 3339 time with an offset (`Z` or `±hh:mm`).
    #[error("{text} is not an RFC 3339 time: {why}")]
    NotRfc3339 {
        /// The value, quoted and bounded.
        text: String,
        /// What the parser said.
        why: String,
    },
}

/// Parses a trigger time as the EndpointSlice controller writes it (Go's
/// `time.RFC3339Nano`): RFC 3339 with `Z` or a numeric offset, fractional
/// seconds optional. A time without an offset names no instant and is
/// refused. Uses the parser k8s-openapi reads `metav1.Time` with, so the
/// spellings accepted are the ones the API objects use.
pub(crate) fn parse_trigger_time(text: &str) -> Result<SystemTime, TriggerTimeError> {
    if text.len() > MAX_TRIGGER_TIME {
        return Err(TriggerTimeError::TooLong(text.len()));
    }
    let at: Timestamp =
        text.parse()
            .map_err(|e: k8s_openapi::jiff::Error| TriggerTimeError::NotRfc3339 {
                text: quote(text),
                why: e.to_string(),
            })?;
    Ok(SystemTime::from(at))
}

/// A slice's trigger time, `None` when it has none or an unusable one
/// (such a slice is simply not measured: the annotation is informational,
/// and the controllers of other projects do not set it).
pub(crate) fn slice_trigger_time(slice: &K8sSlice) -> Option<SystemTime> {
    let text = slice
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_TRIGGER_TIME)?;
    parse_trigger_time(text).ok()
}

pub(crate) mod mcs;

#[cfg(test)]
mod tests;
