//! Locality vocabulary (docs/locality.md): where a cluster is (region and
//! zone), where that was learnt, and a service's failover rule (an explicit
//! cluster order and a `min-ready` threshold), with the annotation and
//! ClusterProperty names that carry them.
//!
//! Parsing only: which cluster is near which, and what a `-nearest` name
//! answers, is the model's ([`crate::model::locality`]). Nothing here holds
//! state or does I/O.

use std::fmt;
use std::sync::Arc;

/// Link annotation (and clusters-file key `region`) naming a cluster's region.
pub const ANNOTATION_REGION: &str = "clusterset-dns.io/region";
/// Link annotation (and clusters-file key `zone`) naming a cluster's zone.
pub const ANNOTATION_ZONE: &str = "clusterset-dns.io/zone";
/// The ClusterProperty (`about.k8s.io`) a cluster states its region with.
pub const PROPERTY_REGION: &str = "region.clusterset-dns.io";
/// The ClusterProperty (`about.k8s.io`) a cluster states its zone with.
pub const PROPERTY_ZONE: &str = "zone.clusterset-dns.io";
/// Service annotation: an explicit failover order, `"east,west,*"`.
pub const ANNOTATION_FAILOVER_ORDER: &str = "clusterset-dns.io/failover-order";
/// Service annotation: the ready endpoints a tier needs to be answered.
pub const ANNOTATION_MIN_READY: &str = "clusterset-dns.io/min-ready";
/// ServiceExport annotation (with `--mcs`): `"true"` makes the MCS name of
/// a headless service answer its nearest tier, as `<svc>-nearest` does.
/// Opt-in only: the KEP's answers are the default.
pub const ANNOTATION_NEAREST: &str = "clusterset-dns.io/nearest";
/// The label Kubernetes puts the zone of a node (and EndpointSlices their
/// endpoints' zone) under.
pub const TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";

/// Most clusters an explicit failover order may name: keeps the SRV
/// priority (10 × tier) well inside 16 bits and the rule small.
pub const MAX_ORDER: usize = 64;
/// Largest `min-ready`.
pub const MAX_MIN_READY: u32 = 1_000_000;

/// Why a region, zone or failover rule was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    /// A region or zone that is not a Kubernetes label value.
    #[error(
        "{what} {value:?} is not a Kubernetes label value (1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
    )]
    BadValue {
        /// `region` or `zone`.
        what: &'static str,
        /// The value given.
        value: String,
    },
    /// A failover order entry that is neither a cluster name nor `*`.
    #[error("failover order entry {0:?} is neither a cluster name nor '*'")]
    BadOrderEntry(String),
    /// A cluster (or `*`) named twice in a failover order.
    #[error("failover order names {0:?} twice")]
    Repeated(String),
    /// Too many entries.
    #[error("failover order names {0} clusters; at most {MAX_ORDER} are allowed")]
    TooLong(usize),
    /// `min-ready` that is not a whole number from 1.
    #[error("min-ready {0:?} is not a whole number from 1 to {MAX_MIN_READY}")]
    BadMinReady(String),
}

/// Where a cluster is. Either part may be unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Place {
    /// Region (`topology.kubernetes.io/region` style), if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<Arc<str>>,
    /// Zone, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<Arc<str>>,
}

impl Place {
    /// A place from optional region and zone text, each checked.
    pub fn parse(region: Option<&str>, zone: Option<&str>) -> Result<Self, PlaceError> {
        Ok(Self {
            region: region.map(|v| place_value("region", v)).transpose()?,
            zone: zone.map(|v| place_value("zone", v)).transpose()?,
        })
    }

    /// Neither region nor zone is known.
    pub fn is_unknown(&self) -> bool {
        self.region.is_none() && self.zone.is_none()
    }

    /// The place that counts of `configured` and `property`, and where it
    /// came from: a configured place wins whole (a region from one source
    /// and a zone from another would describe no real place).
    pub fn choose<'a>(configured: &'a Self, property: &'a Self) -> (&'a Self, PlaceFrom) {
        if !configured.is_unknown() {
            (configured, PlaceFrom::Configured)
        } else if !property.is_unknown() {
            (property, PlaceFrom::Property)
        } else {
            (configured, PlaceFrom::Unknown)
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let part = |p: &Option<Arc<str>>| p.as_deref().unwrap_or("?").to_owned();
        write!(f, "{}/{}", part(&self.region), part(&self.zone))
    }
}

/// Where a cluster's place was learnt, in precedence order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlaceFrom {
    /// The operator said so: the clusters file, Link annotations, or for
    /// the local cluster `--region`/`--zone`.
    Configured,
    /// The cluster's own ClusterProperty objects.
    Property,
    /// Nobody said.
    #[default]
    Unknown,
}

impl PlaceFrom {
    /// The word `/debug/clusters` and `explain` print.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::Property => "cluster-property",
            Self::Unknown => "unknown",
        }
    }
}

/// Checks a region or zone: a Kubernetes label value, non-empty.
pub fn place_value(what: &'static str, value: &str) -> Result<Arc<str>, PlaceError> {
    let b = value.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge);
    if ok {
        Ok(value.into())
    } else {
        Err(PlaceError::BadValue {
            what,
            value: value.chars().take(80).collect(),
        })
    }
}

/// One entry of an explicit failover order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OrderItem {
    /// A cluster, by name.
    Cluster(Arc<str>),
    /// `*`: every cluster not named, by its default tier.
    Rest,
}

/// A service's failover rule (its annotations), when it has one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    /// The explicit order; `None` for the default tiers (local, same
    /// region, the rest).
    pub order: Option<Arc<[OrderItem]>>,
    /// A tier is answered only with at least this many ready endpoints.
    pub min_ready: u32,
}

impl Default for Rule {
    fn default() -> Self {
        Self {
            order: None,
            min_ready: 1,
        }
    }
}

impl Rule {
    /// The rule from the two annotations' values (either may be absent).
    /// An invalid value is an error naming it; the caller decides what to
    /// keep (the sources keep the rest of the Service and warn).
    pub fn parse(order: Option<&str>, min_ready: Option<&str>) -> Result<Self, PlaceError> {
        Ok(Self {
            order: order.map(parse_order).transpose()?,
            min_ready: min_ready.map_or(Ok(1), parse_min_ready)?,
        })
    }

    /// True for the default rule (no annotation said anything).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

fn parse_order(text: &str) -> Result<Arc<[OrderItem]>, PlaceError> {
    let mut items: Vec<OrderItem> = Vec::new();
    for raw in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let item = if raw == "*" {
            OrderItem::Rest
        } else if crate::vocab::name::is_dns_label(raw) {
            OrderItem::Cluster(raw.into())
        } else {
            return Err(PlaceError::BadOrderEntry(raw.chars().take(80).collect()));
        };
        if items.contains(&item) {
            return Err(PlaceError::Repeated(raw.to_owned()));
        }
        items.push(item);
    }
    if items.len() > MAX_ORDER {
        return Err(PlaceError::TooLong(items.len()));
    }
    Ok(items.into())
}

fn parse_min_ready(text: &str) -> Result<u32, PlaceError> {
    match text.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_MIN_READY).contains(&n) => Ok(n),
        _ => Err(PlaceError::BadMinReady(text.chars().take(80).collect())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        let cases: &[(&str, bool)] = &[
            ("eu-west-1", true),
            ("us_east.2", true),
            ("A1", true),
            ("", false),
            ("-eu", false),
            ("eu-", false),
            ("eu west", false),
            ("eu/west", false),
            (&"a".repeat(63), true),
            (&"a".repeat(64), false),
        ];
        for (value, ok) in cases {
            assert_eq!(place_value("region", value).is_ok(), *ok, "{value:?}");
        }
    }

    #[test]
    fn rules() {
        let c = |s: &str| OrderItem::Cluster(s.into());
        let rule = Rule::parse(Some("east, west ,*"), Some("3")).unwrap();
        assert_eq!(
            rule.order.as_deref(),
            Some(&[c("east"), c("west"), OrderItem::Rest][..])
        );
        assert_eq!(rule.min_ready, 3);
        assert!(Rule::parse(None, None).unwrap().is_default());
        assert_eq!(Rule::parse(None, Some(" 2 ")).unwrap().min_ready, 2);
        let errors: &[(Option<&str>, Option<&str>, &str)] = &[
            (Some("east,East"), None, "neither a cluster name"),
            (Some("east,east"), None, "twice"),
            (Some("*,east,*"), None, "twice"),
            (None, Some("0"), "min-ready \"0\""),
            (None, Some("-1"), "min-ready"),
            (None, Some("many"), "min-ready"),
        ];
        for (order, min, want) in errors {
            let err = Rule::parse(*order, *min).unwrap_err().to_string();
            assert!(err.contains(want), "{order:?} {min:?}: {err}");
        }
        let long: Vec<String> = (0..=MAX_ORDER).map(|i| format!("c{i}")).collect();
        assert_eq!(
            Rule::parse(Some(&long.join(",")), None),
            Err(PlaceError::TooLong(MAX_ORDER + 1))
        );
    }

    #[test]
    fn place_fallback() {
        let configured = Place::parse(Some("eu"), None).unwrap();
        let property = Place::parse(Some("us"), Some("us-1a")).unwrap();
        let none = Place::default();
        assert_eq!(
            Place::choose(&configured, &property),
            (&configured, PlaceFrom::Configured)
        );
        assert_eq!(
            Place::choose(&none, &property),
            (&property, PlaceFrom::Property)
        );
        assert_eq!(Place::choose(&none, &none).1, PlaceFrom::Unknown);
        assert_eq!(configured.to_string(), "eu/?");
        assert_eq!(property.to_string(), "us/us-1a");
    }
}
