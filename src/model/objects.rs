//! Slim objects: the few fields of Services, EndpointSlices and gateways
//! that DNS answers and mirror objects are computed from.
//!
//! Sources convert Kubernetes objects into these at the edge (docs/architecture.md,
//! "Slim objects at the edge"), so memory follows exported endpoints and not
//! the size of the remote cluster. This module must not know about
//! k8s-openapi types or YAML.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

mod mcs;

pub use mcs::{Affinity, ExportedMeta, Families, ImportFields, TrafficDistribution, TrafficPolicy};

/// How a remote service is exported (Linkerd's `mirror.linkerd.io/exported`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExportMode {
    /// `exported=true`: reached through the cluster's gateway (or a local
    /// mirror ClusterIP).
    Gateway,
    /// `exported=remote-discovery`: pod IPs are routable (flat network).
    Flat,
}

impl ExportMode {
    /// The word used in `check` output and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Flat => "flat",
        }
    }
}

/// Transport protocol of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP (the Kubernetes default).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// Parses a Kubernetes protocol name; `None` means TCP (the API default).
    pub fn parse(s: Option<&str>) -> Option<Self> {
        match s {
            None | Some("TCP") => Some(Self::Tcp),
            Some("UDP") => Some(Self::Udp),
            Some("SCTP") => Some(Self::Sctp),
            Some(_) => None,
        }
    }

    /// The SRV label, without the underscore (`tcp`).
    pub fn label(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }

    /// The Kubernetes spelling (`TCP`).
    pub fn k8s(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
            Self::Sctp => "SCTP",
        }
    }
}

/// A port: on a Service, the Service port; on an EndpointSlice, the port the
/// endpoints listen on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Port {
    /// Port name, lower-cased; `None` for an unnamed port.
    pub name: Option<Arc<str>>,
    /// Protocol.
    pub protocol: Protocol,
    /// Port number.
    pub port: u16,
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{name}/{}/{}", self.protocol.k8s(), self.port),
            None => write!(f, "{}/{}", self.protocol.k8s(), self.port),
        }
    }
}

/// Namespace and name of an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl ObjectKey {
    /// Builds a key.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// An exported (or federated) Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// Namespace and name.
    pub key: ObjectKey,
    /// `metadata.creationTimestamp` in Unix seconds; an object without one
    /// counts as the newest (it loses every collision).
    pub created: i64,
    /// Export mode, if exported.
    pub export: Option<ExportMode>,
    /// Member of `<svc>-federated`.
    pub federated: bool,
    /// `clusterIP: None`.
    pub headless: bool,
    /// ClusterIPs (empty when headless).
    pub cluster_ips: Vec<IpAddr>,
    /// Service ports.
    pub ports: Vec<Port>,
    /// `publishNotReadyAddresses`: not-ready endpoints are served too.
    pub publish_not_ready: bool,
    /// `config.linkerd.io/opaque-ports`, copied onto mirror Services as
    /// Linkerd does (docs/linkerd.md §2.2): meshed clients need it to skip
    /// protocol detection on server-speaks-first ports.
    pub opaque_ports: Option<Arc<str>>,
    /// Refused by its cluster's budget ([`super::budget`]): it exists, but
    /// its endpoints are not held, so its names answer SERVFAIL (never
    /// NXDOMAIN) and the mirror leaves its objects as they are.
    pub refused: bool,
    /// Exported through the Kubernetes MCS API: the `creationTimestamp`
    /// (Unix seconds) of the ServiceExport of the same namespace/name in
    /// its cluster, which decides port conflicts (oldest export wins).
    pub mcs: Option<i64>,
    /// Its failover rule (`clusterset-dns.io/failover-order` and
    /// `min-ready`), when it sets one (docs/locality.md).
    pub locality: Option<Arc<crate::vocab::place::Rule>>,
    /// Its ServiceExport opts its MCS name into nearest answers
    /// (`clusterset-dns.io/nearest: "true"`, docs/locality.md).
    pub mcs_nearest: bool,
    /// What a ServiceImport copies from it when its export defines the
    /// import (KEP-1645 v1beta1).
    pub import_fields: ImportFields,
    /// Its ServiceExport's exported labels and annotations (MCS members
    /// whose export sets some).
    pub exported_meta: Option<Arc<ExportedMeta>>,
}

/// A ServiceImport of the local cluster (Kubernetes MCS API): what the
/// clusterset name `<svc>.<ns>.svc.<zone>` of a ClusterSetIP service
/// answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// Namespace and name.
    pub key: ObjectKey,
    /// `spec.ips`: the clusterset IPs (at most one per family); empty for a
    /// headless import, or before the implementation allocated them.
    pub ips: Vec<IpAddr>,
    /// The cluster whose export our controller defined it from
    /// (`clusterset-dns.io/defined-by`, docs/mcs.md §3): that export keeps
    /// winning conflicts while it is a member, so every cluster's
    /// controller keeps the definition the first one saw.
    pub defined_by: Option<Arc<str>>,
}

/// An address family of an EndpointSlice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// One address of an EndpointSlice endpoint. An endpoint with several
/// addresses becomes several of these sharing the hostname.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The address.
    pub addr: IpAddr,
    /// `hostname`, lower-cased, if set and a valid DNS label.
    pub hostname: Option<Arc<str>>,
    /// `conditions.ready` (nil counts as ready, as in CoreDNS).
    pub ready: bool,
}

/// An EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// Namespace and name of the slice itself.
    pub key: ObjectKey,
    /// The Service it belongs to (`kubernetes.io/service-name`).
    pub service: Arc<str>,
    /// Address family.
    pub family: Family,
    /// The ports the endpoints listen on, shared by every endpoint.
    pub ports: Arc<[Port]>,
    /// Endpoints.
    pub endpoints: Arc<[Endpoint]>,
}

/// A linked cluster's multicluster gateway.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Gateway {
    /// Gateway addresses (load-balancer ingress IPs).
    pub addresses: Vec<IpAddr>,
    /// The `mc-gateway` port.
    pub port: Option<u16>,
    /// `mirror.linkerd.io/gateway-identity`.
    pub identity: Option<String>,
}

/// A mirror Service in the local cluster (written by Linkerd or by our
/// controller): its ClusterIP is the gateway-mode answer for its name
/// (docs/architecture.md, decision 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    /// Namespace and name (`<svc>-<cluster>`, or `<host>-<cluster>` for a
    /// headless endpoint mirror).
    pub key: ObjectKey,
    /// The remote cluster it mirrors (`mirror.linkerd.io/cluster-name`).
    pub cluster: Arc<str>,
    /// For a headless endpoint mirror, the root mirror's name
    /// (`mirror.linkerd.io/headless-mirror-svc-name`).
    pub headless_parent: Option<Arc<str>>,
    /// ClusterIPs (empty for a headless root mirror).
    pub cluster_ips: Vec<IpAddr>,
    /// Service ports.
    pub ports: Vec<Port>,
}
