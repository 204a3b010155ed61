//! What a ServiceImport takes from the member export that defines it
//! (KEP-1645 v1beta1, `docs/mcs.md` §1): the Service's IP families,
//! session affinity, internal traffic policy and traffic distribution, and
//! the ServiceExport's `exportedLabels` and `exportedAnnotations`.
//!
//! Slim like the rest of `objects`: the Service's fields are a few bytes
//! kept inline (every Service carries them, MCS member or not), the
//! export's maps are shared and present only when an export sets them. It
//! must not know about k8s-openapi types; the sources parse the Kubernetes
//! spellings with the `parse` functions here.

use std::collections::BTreeMap;

use super::Family;

/// A Service's `spec.ipFamilies`, in order: at most two, no repeats. Empty
/// when the Service lists none (an API server older than dual-stack, or a
/// file that leaves it out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Families([Option<Family>; 2]);

impl Families {
    /// The families of `list`, in order, repeats and a third dropped.
    pub fn new(list: impl IntoIterator<Item = Family>) -> Self {
        let mut out = [None, None];
        for f in list {
            match out {
                [None, _] => out[0] = Some(f),
                [Some(a), None] if a != f => out[1] = Some(f),
                _ => {}
            }
        }
        Self(out)
    }

    /// The families, in order.
    pub fn iter(&self) -> impl Iterator<Item = Family> + '_ {
        self.0.iter().flatten().copied()
    }

    /// No family is known.
    pub fn is_empty(&self) -> bool {
        self.0[0].is_none()
    }

    /// Both families.
    pub fn is_dual(&self) -> bool {
        self.0[1].is_some()
    }
}

impl Family {
    /// Parses a Kubernetes IP family (`IPv4`, `IPv6`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "IPv4" => Some(Self::V4),
            "IPv6" => Some(Self::V6),
            _ => None,
        }
    }

    /// The Kubernetes spelling of the family (`IPv4`).
    pub fn k8s(self) -> &'static str {
        match self {
            Self::V4 => "IPv4",
            Self::V6 => "IPv6",
        }
    }

    /// The family of an address.
    pub fn of(addr: std::net::IpAddr) -> Self {
        if addr.is_ipv4() { Self::V4 } else { Self::V6 }
    }
}

/// A Service's `sessionAffinity`, with the `ClientIP` timeout of its
/// `sessionAffinityConfig`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Affinity {
    /// The Service says nothing (the API server defaults it to `None`).
    #[default]
    Unset,
    /// `None`.
    Off,
    /// `ClientIP`, with `sessionAffinityConfig.clientIP.timeoutSeconds` if
    /// given.
    ClientIp(Option<i32>),
}

/// `internalTrafficPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrafficPolicy {
    /// `Cluster`.
    Cluster,
    /// `Local`.
    Local,
}

impl TrafficPolicy {
    /// Parses the Kubernetes spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Cluster" => Some(Self::Cluster),
            "Local" => Some(Self::Local),
            _ => None,
        }
    }

    /// The Kubernetes spelling.
    pub fn k8s(self) -> &'static str {
        match self {
            Self::Cluster => "Cluster",
            Self::Local => "Local",
        }
    }
}

/// `trafficDistribution` (the values Kubernetes 1.33 accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrafficDistribution {
    /// `PreferClose`.
    PreferClose,
    /// `PreferSameZone`.
    PreferSameZone,
    /// `PreferSameNode`.
    PreferSameNode,
}

impl TrafficDistribution {
    /// Parses the Kubernetes spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "PreferClose" => Some(Self::PreferClose),
            "PreferSameZone" => Some(Self::PreferSameZone),
            "PreferSameNode" => Some(Self::PreferSameNode),
            _ => None,
        }
    }

    /// The Kubernetes spelling.
    pub fn k8s(self) -> &'static str {
        match self {
            Self::PreferClose => "PreferClose",
            Self::PreferSameZone => "PreferSameZone",
            Self::PreferSameNode => "PreferSameNode",
        }
    }
}

/// The Service fields a ServiceImport copies (KEP-1645 v1beta1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ImportFields {
    /// `spec.ipFamilies`.
    pub families: Families,
    /// `sessionAffinity` and its `ClientIP` timeout.
    pub affinity: Affinity,
    /// `internalTrafficPolicy`, if set.
    pub internal_traffic_policy: Option<TrafficPolicy>,
    /// `trafficDistribution`, if set.
    pub traffic_distribution: Option<TrafficDistribution>,
}

/// A ServiceExport's `exportedLabels` and `exportedAnnotations`, as far as
/// they are valid and not ours to set (`source::convert::mcs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ExportedMeta {
    /// Labels for the ServiceImport.
    pub labels: BTreeMap<String, String>,
    /// Annotations for the ServiceImport.
    pub annotations: BTreeMap<String, String>,
}
