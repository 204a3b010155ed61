//! What a cluster may make us answer or write (docs/architecture.md, decision 13): the
//! address classes no cluster ever publishes, the operator's own address
//! lists, and the namespaces a cluster may export from.
//!
//! Every linked cluster (and the local one) is untrusted: a compromised API
//! server can publish `127.0.0.1`, `169.254.169.254` (the cloud metadata
//! service) or a multicast address as a pod IP, and every peer that answers
//! it turns a service name into a way to reach a node's own services or its
//! cloud credentials (Submariner Lighthouse, CVE-2026-66788). [`Trust`] is
//! the one rule that decides, applied where objects enter (conversion),
//! never on the query path.
//!
//! Owns the classes ([`Special`]), the parsing of CIDR lists and namespace
//! lists, and the decision for one address or namespace. It holds no state,
//! does no I/O and knows nothing of objects: the sources call it and count
//! what it rejects.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use ipnet::IpNet;

use super::name::is_dns_label;

/// An address class that never comes from a cluster: nothing legitimate
/// in a Kubernetes cluster is reachable there from another node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Special {
    /// `0.0.0.0/8`, `::`: "this host" to whoever dials it.
    Unspecified,
    /// `127.0.0.0/8`, `::1`: the dialling node itself.
    Loopback,
    /// `169.254.0.0/16`, `fe80::/10`: the node's own link.
    LinkLocal,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// A cloud metadata service: `169.254.169.254` (AWS, GCP, Azure,
    /// OpenStack…), `fd00:ec2::254` (AWS IPv6) and `100.100.100.200`
    /// (Alibaba Cloud), which hand out the node's credentials.
    Metadata,
}

impl Special {
    /// What the class is, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Special::Unspecified => "an unspecified address (0.0.0.0/8, ::)",
            Special::Loopback => "a loopback address (127.0.0.0/8, ::1)",
            Special::LinkLocal => "a link-local address (169.254.0.0/16, fe80::/10)",
            Special::Multicast => "a multicast address (224.0.0.0/4, ff00::/8)",
            Special::Broadcast => "the broadcast address 255.255.255.255",
            Special::Metadata => "a cloud metadata service address",
        }
    }
}

const METADATA_V4: [Ipv4Addr; 2] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(100, 100, 100, 200),
];
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x254);

fn special_v4(a: Ipv4Addr) -> Option<Special> {
    let o = a.octets();
    if METADATA_V4.contains(&a) {
        Some(Special::Metadata)
    } else if o[0] == 0 {
        Some(Special::Unspecified)
    } else if a.is_loopback() {
        Some(Special::Loopback)
    } else if a.is_link_local() {
        Some(Special::LinkLocal)
    } else if a.is_multicast() {
        Some(Special::Multicast)
    } else if a.is_broadcast() {
        Some(Special::Broadcast)
    } else {
        None
    }
}

/// The IPv4 address an IPv6 one embeds as IPv4-mapped (`::ffff:a.b.c.d`)
/// or IPv4-compatible (`::a.b.c.d`, deprecated but still routed by some
/// stacks to the IPv4 address); `::` and `::1` are IPv6's own.
fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = a.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = a.segments();
    let compatible = s[..6].iter().all(|x| *x == 0) && u128::from(a) > 1;
    compatible.then(|| Ipv4Addr::from(u32::try_from(u128::from(a)).unwrap_or(0)))
}

/// The class of `addr`, or `None` for an address a cluster may publish.
/// An IPv6 address that embeds an IPv4 one is the IPv4 address's class.
pub fn special(addr: IpAddr) -> Option<Special> {
    match addr {
        IpAddr::V4(a) => special_v4(a),
        IpAddr::V6(a) => {
            if let Some(v4) = embedded_v4(a) {
                return special_v4(v4);
            }
            if a == METADATA_V6 {
                Some(Special::Metadata)
            } else if a.is_unspecified() {
                Some(Special::Unspecified)
            } else if a.is_loopback() {
                Some(Special::Loopback)
            } else if a.is_unicast_link_local() {
                Some(Special::LinkLocal)
            } else if a.is_multicast() {
                Some(Special::Multicast)
            } else {
                None
            }
        }
    }
}

/// Why an address is not taken from a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// It is of a class no cluster publishes.
    Special(Special),
    /// It is in the operator's `deny-addresses`.
    Denied(IpNet),
    /// The cluster's `allowedAddresses` do not hold it.
    NotAllowed,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejected::Special(s) => f.write_str(s.describe()),
            Rejected::Denied(net) => write!(f, "in deny-addresses ({net})"),
            Rejected::NotAllowed => f.write_str("outside the cluster's allowedAddresses"),
        }
    }
}

/// Why a CIDR or namespace list is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// An entry is neither an address nor a CIDR.
    #[error("{0:?} is not a CIDR (10.0.0.0/8, fd00::/8) or an IP address")]
    NotCidr(String),
    /// A CIDR has host bits set: probably a typo for a narrower range.
    #[error("{given:?} has host bits set; did you mean {network}?")]
    HostBits {
        /// As written.
        given: String,
        /// The network it would mean.
        network: IpNet,
    },
    /// An entry is not a namespace name.
    #[error("{0:?} is not a namespace name (an RFC 1123 label)")]
    NotNamespace(String),
}

/// Parses one CIDR (`10.0.0.0/8`) or address (a /32 or /128).
pub fn parse_cidr(text: &str) -> Result<IpNet, ListError> {
    let text = text.trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(IpNet::from(ip));
    }
    let net: IpNet = text
        .parse()
        .map_err(|_| ListError::NotCidr(text.to_owned()))?;
    if net.trunc() != net {
        return Err(ListError::HostBits {
            given: text.to_owned(),
            network: net.trunc(),
        });
    }
    Ok(net)
}

/// Parses a list of CIDRs, as given in a comma-separated flag, a YAML list
/// or an annotation (`10.0.0.0/8, fd00::/8`); empty entries are skipped.
pub fn parse_cidrs<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<Vec<IpNet>, ListError> {
    items
        .into_iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.trim().is_empty())
        .map(parse_cidr)
        .collect()
}

/// Parses a list of namespace names (comma-separated or listed).
pub fn parse_namespaces<'a>(
    items: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeSet<Arc<str>>, ListError> {
    items
        .into_iter()
        .flat_map(|s| s.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            if is_dns_label(s) {
                Ok(Arc::from(s))
            } else {
                Err(ListError::NotNamespace(s.to_owned()))
            }
        })
        .collect()
}

/// Link annotation: the cluster's `allowedAddresses`, comma-separated CIDRs.
pub const ANNOTATION_ALLOWED_ADDRESSES: &str = "clusterset-dns.io/allowed-addresses";
/// Link annotation: the cluster's `namespaces.allow`, comma-separated.
pub const ANNOTATION_ALLOWED_NAMESPACES: &str = "clusterset-dns.io/allowed-namespaces";
/// Link annotation: the cluster's `namespaces.deny`, comma-separated.
pub const ANNOTATION_DENIED_NAMESPACES: &str = "clusterset-dns.io/denied-namespaces";

/// The namespaces no cluster exports from unless its claims allow them by
/// name: the cluster's own machinery, never an application's service.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// Our own namespace when nothing says which it is (the deploy files').
pub const DEFAULT_OWN_NAMESPACE: &str = "clusterset-dns";

/// The operator's rules for every cluster (flags, environment, config file;
/// reloadable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustSettings {
    /// `deny-addresses`: further ranges no cluster may publish.
    pub deny_addresses: Vec<IpNet>,
    /// `exempt-addresses`: ranges taken although a [`Special`] class holds
    /// them (a lab whose gateways listen on loopback); `deny-addresses`
    /// still wins.
    pub exempt_addresses: Vec<IpNet>,
    /// The namespace this server runs in: denied like the system ones.
    pub own_namespace: Arc<str>,
}

impl Default for TrustSettings {
    fn default() -> Self {
        Self {
            deny_addresses: Vec::new(),
            exempt_addresses: Vec::new(),
            own_namespace: Arc::from(DEFAULT_OWN_NAMESPACE),
        }
    }
}

/// What one linked cluster may claim (its clusters-file entry or Link
/// annotations); the default claims anything but the special classes and
/// the system namespaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    /// `allowedAddresses`: when given, every address must be in one of
    /// these (the cluster's pod, service and gateway ranges).
    pub allowed_addresses: Option<Vec<IpNet>>,
    /// `namespaces.allow`: when given, the only namespaces served (a system
    /// namespace or ours only when listed).
    pub allowed_namespaces: Option<BTreeSet<Arc<str>>>,
    /// `namespaces.deny`: never served.
    pub denied_namespaces: BTreeSet<Arc<str>>,
}

/// Why a namespace is not served from a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceDenied {
    /// A system namespace, or ours, that the claims do not allow by name.
    System,
    /// In the cluster's deny list.
    Listed,
    /// Not in the cluster's allow list.
    NotAllowed,
}

impl fmt::Display for NamespaceDenied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NamespaceDenied::System => {
                "a system namespace (or this server's own), denied unless the cluster's namespaces.allow names it"
            }
            NamespaceDenied::Listed => "in the cluster's namespaces.deny",
            NamespaceDenied::NotAllowed => "not in the cluster's namespaces.allow",
        })
    }
}

/// The operator's settings and one cluster's claims together: what
/// conversion applies to every object of that cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trust {
    settings: TrustSettings,
    claims: Claims,
}

impl Trust {
    /// The rules for a cluster with `claims` under `settings`.
    pub fn new(settings: TrustSettings, claims: Claims) -> Self {
        Self { settings, claims }
    }

    /// The operator's part.
    pub fn settings(&self) -> &TrustSettings {
        &self.settings
    }

    /// Whether `addr` may come from the cluster. The operator's deny list
    /// comes first, then the special classes (unless exempted), then the
    /// cluster's own ranges. An IPv4-mapped IPv6 address is matched as
    /// the IPv4 address it is.
    pub fn check_address(&self, addr: IpAddr) -> Result<(), Rejected> {
        let canonical = addr.to_canonical();
        let within = |nets: &[IpNet]| {
            nets.iter()
                .find(|n| n.contains(&canonical) || n.contains(&addr))
                .copied()
        };
        if let Some(net) = within(&self.settings.deny_addresses) {
            return Err(Rejected::Denied(net));
        }
        if let Some(class) = special(addr)
            && within(&self.settings.exempt_addresses).is_none()
        {
            return Err(Rejected::Special(class));
        }
        match &self.claims.allowed_addresses {
            Some(allowed) if within(allowed).is_none() => Err(Rejected::NotAllowed),
            _ => Ok(()),
        }
    }

    /// Whether services of `namespace` may come from the cluster.
    pub fn check_namespace(&self, namespace: &str) -> Result<(), NamespaceDenied> {
        let c = &self.claims;
        if c.denied_namespaces.contains(namespace) {
            return Err(NamespaceDenied::Listed);
        }
        if let Some(allowed) = &c.allowed_namespaces {
            return if allowed.contains(namespace) {
                Ok(())
            } else {
                Err(NamespaceDenied::NotAllowed)
            };
        }
        if SYSTEM_NAMESPACES.contains(&namespace) || *self.settings.own_namespace == *namespace {
            return Err(NamespaceDenied::System);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
