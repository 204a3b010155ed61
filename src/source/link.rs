//! Reading a Linkerd `Link` (`multicluster.linkerd.io` v1alpha1, v1alpha2 and
//! v1alpha3) into the plain data of [`super::spec`].
//!
//! Owns the Link's field rules: which problems make a Link unusable (a fatal
//! [`LinkError`]) and which only degrade it (a warning, with the Linkerd
//! default or no probe/port in its place, or no configured place for an
//! invalid region or zone annotation) and the gateway address rules shared
//! with the clusters file. The Link is read as the typed
//! [`crate::k8s::crd::Link`]: [`link_from_dynamic`] decodes the watched
//! object of whatever version is served (its `spec` with the path of a
//! field that does not decode), [`parse_link`] applies the rules. Its
//! `metadata` is the typed `ObjectMeta` the watch already decoded, so a
//! Link whose metadata is malformed (a name or annotation that is not a
//! string, a bad creationTimestamp) never reaches here: the watch skips it
//! as undecodable. It does not fetch the Link or its credentials Secret,
//! and it must not talk to an API.

use std::net::IpAddr;
use std::sync::Arc;

use crate::vocab::duration::parse_go_duration;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::DynamicObject;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use crate::k8s::crd::{self, LinkProbe, LinkSpec};

use crate::vocab::name::{ClusterNameError, check_cluster_name};
use crate::vocab::place::{ANNOTATION_REGION, ANNOTATION_ZONE, Place, place_value};
use crate::vocab::trust::{
    ANNOTATION_ALLOWED_ADDRESSES, ANNOTATION_ALLOWED_NAMESPACES, ANNOTATION_DENIED_NAMESPACES,
    Claims, ListError, parse_cidrs, parse_namespaces,
};

use super::selector::{Selector, SelectorError, Selectors};
use super::spec::{GatewayAddr, GatewaySource, GatewaySpec, ProbeSpec};

/// A Link as this server uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    /// `metadata.namespace` (empty if absent).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.creationTimestamp` in Unix seconds; `i64::MAX` if absent,
    /// so that a Link without one loses every "oldest wins" tie.
    pub created: i64,
    /// `spec.targetClusterName`.
    pub cluster: Arc<str>,
    /// `spec.clusterCredentialsSecret`: a Secret in the Link's namespace.
    pub secret: String,
    /// `selector`, `remoteDiscoverySelector`, `federatedServiceSelector`.
    pub selectors: Selectors,
    /// From `gatewayAddress`, `gatewayPort`, `gatewayIdentity`, `probeSpec`.
    pub gateway: GatewaySource,
    /// From the annotations `clusterset-dns.io/allowed-addresses`,
    /// `…/allowed-namespaces` and `…/denied-namespaces`.
    pub claims: Claims,
    /// From the annotations `clusterset-dns.io/region` and `…/zone`
    /// (docs/locality.md); unknown when either is invalid.
    pub place: Place,
    /// Problems that degraded the Link without making it unusable.
    pub warnings: Vec<String>,
}

/// Why a Link cannot be used at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LinkError {
    /// Without a name the Link cannot even be referred to.
    #[error("Link in namespace {namespace:?}: metadata.name is missing, empty or not a string")]
    MissingName {
        /// `metadata.namespace`, if any.
        namespace: String,
    },
    /// A field is missing, has the wrong type, or a value that cannot work.
    #[error("Link {link}: {field}: {reason}")]
    Field {
        /// `namespace/name`.
        link: String,
        /// The field, e.g. `spec.gatewayPort`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// `spec.targetClusterName` is not a usable cluster name.
    #[error("Link {link}: spec.targetClusterName: {source}")]
    ClusterName {
        /// `namespace/name`.
        link: String,
        /// The name rule broken.
        source: ClusterNameError,
    },
    /// One of the three selectors is invalid.
    #[error("Link {link}: spec.{field}: {source}")]
    Selector {
        /// `namespace/name`.
        link: String,
        /// `selector`, `remoteDiscoverySelector` or `federatedServiceSelector`.
        field: &'static str,
        /// What is wrong with it.
        source: SelectorError,
    },
}

/// A Link as the watch delivers it, of whatever version the local cluster
/// serves, read into the typed [`crd::Link`] and then by [`parse_link`].
pub(crate) fn link_from_dynamic(obj: &DynamicObject) -> Result<Link, LinkError> {
    parse_link(&typed(obj)?)
}

/// The parts of a Link object besides `metadata` that we read.
#[derive(Deserialize)]
struct Data {
    /// `None`: absent.
    #[serde(default, deserialize_with = "object")]
    spec: Option<LinkSpec>,
}

/// `obj` as the typed Link; the error names the field of `spec` that does
/// not decode (`spec.gatewayPort`, ...).
fn typed(obj: &DynamicObject) -> Result<crd::Link, LinkError> {
    let (namespace, name) = names(&obj.metadata)?;
    let field = |field: String, reason: String| LinkError::Field {
        link: format!("{namespace}/{name}"),
        field,
        reason,
    };
    let data: Data = serde_path_to_error::deserialize(&obj.data)
        .map_err(|e| field(e.path().to_string(), e.into_inner().to_string()))?;
    let spec = data
        .spec
        .ok_or_else(|| field("spec".to_owned(), "missing".to_owned()))?;
    Ok(crd::Link {
        metadata: obj.metadata.clone(),
        spec,
    })
}

/// `spec` when it is an object; anything else is an error that says what
/// it is instead (`expected an object, found a list`).
fn object<'de, D: Deserializer<'de>>(d: D) -> Result<Option<LinkSpec>, D::Error> {
    struct Object;
    fn found<E: de::Error>(what: &str) -> Result<Option<LinkSpec>, E> {
        Err(E::custom(format!("expected an object, found {what}")))
    }
    impl<'de> Visitor<'de> for Object {
        type Value = Option<LinkSpec>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            LinkSpec::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            found("a list")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            found("null")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            found("null")
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            found("a boolean")
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            found("a number")
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            found("a number")
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            found("a number")
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            found("a string")
        }
    }
    d.deserialize_any(Object)
}

/// `metadata.namespace` (empty if absent) and `metadata.name`.
fn names(meta: &ObjectMeta) -> Result<(String, String), LinkError> {
    let namespace = meta.namespace.clone().unwrap_or_default();
    match meta.name.as_deref() {
        Some(n) if !n.is_empty() => Ok((namespace, n.to_owned())),
        _ => Err(LinkError::MissingName { namespace }),
    }
}

/// Reads a typed Link object (the whole object, not just `spec`).
pub(crate) fn parse_link(obj: &crd::Link) -> Result<Link, LinkError> {
    let meta = &obj.metadata;
    let (namespace, name) = names(meta)?;
    let link = format!("{namespace}/{name}");
    let mut warnings = Vec::new();
    // A Link without one (the API always sets it) counts as the newest.
    let created = meta
        .creation_timestamp
        .as_ref()
        .map_or(i64::MAX, |t| t.0.as_second());
    let claims = claims(meta, &link)?;
    let place = place(meta, &mut warnings);
    let spec = obj.spec.clone();
    let field = |field: &str, reason: String| LinkError::Field {
        link: link.clone(),
        field: field.to_owned(),
        reason,
    };
    let cluster = non_empty(spec.target_cluster_name.clone())
        .ok_or_else(|| field("spec.targetClusterName", "missing or empty".to_owned()))?;
    check_cluster_name(&cluster).map_err(|source| LinkError::ClusterName {
        link: link.clone(),
        source,
    })?;
    let secret = non_empty(spec.cluster_credentials_secret.clone()).ok_or_else(|| {
        field(
            "spec.clusterCredentialsSecret",
            "missing or empty".to_owned(),
        )
    })?;
    let selectors = selectors(&link, &spec)?;
    let gateway = match non_empty(spec.gateway_address) {
        // Linkerd's link-gen leaves gatewayAddress out with --gateway=false:
        // the cluster is reachable only in flat mode, so the port, identity
        // and probe mean nothing and are not checked.
        None => GatewaySource::None,
        Some(list) => GatewaySource::Spec(GatewaySpec {
            addresses: gateway_addresses(&list, &mut warnings),
            port: gateway_port(spec.gateway_port.as_deref(), &mut warnings),
            identity: non_empty(spec.gateway_identity),
            probe: probe(spec.probe_spec.unwrap_or_default(), &mut warnings),
        }),
    };
    Ok(Link {
        namespace,
        name,
        created,
        cluster: Arc::from(cluster),
        secret,
        selectors,
        gateway,
        claims,
        place,
        warnings,
    })
}

/// Where the Link's annotations put the cluster. Unlike the claims, a bad
/// value only degrades the Link: a place decides which cluster answers
/// first, never what a cluster may claim, so the Link stays usable with no
/// configured place (its ClusterProperty objects may still give one; half
/// a place would be a guess).
fn place(meta: &ObjectMeta, warnings: &mut Vec<String>) -> Place {
    let annotations = meta.annotations.as_ref();
    let mut place = Place::default();
    for (key, what) in [(ANNOTATION_REGION, "region"), (ANNOTATION_ZONE, "zone")] {
        let Some(v) = annotations.and_then(|a| a.get(key)) else {
            continue;
        };
        match place_value(what, v.trim()) {
            Ok(v) if what == "region" => place.region = Some(v),
            Ok(v) => place.zone = Some(v),
            Err(e) => {
                warnings.push(format!(
                    "metadata.annotations[{key}]: {e}; the Link configures no place"
                ));
                return Place::default();
            }
        }
    }
    place
}

/// What the Link's annotations let the cluster claim. A bad value makes
/// the Link unusable rather than ignored: ignored, it would let the
/// cluster claim more than its Link says.
fn claims(meta: &ObjectMeta, link: &str) -> Result<Claims, LinkError> {
    let annotation = |key: &str| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    };
    let field = |key: &str, e: ListError| LinkError::Field {
        link: link.to_owned(),
        field: format!("metadata.annotations[{key}]"),
        reason: e.to_string(),
    };
    let allowed_addresses = match annotation(ANNOTATION_ALLOWED_ADDRESSES) {
        None => None,
        Some(v) => {
            let nets = parse_cidrs([v]).map_err(|e| field(ANNOTATION_ALLOWED_ADDRESSES, e))?;
            if nets.is_empty() {
                return Err(LinkError::Field {
                    link: link.to_owned(),
                    field: format!("metadata.annotations[{ANNOTATION_ALLOWED_ADDRESSES}]"),
                    reason: "empty: it would reject every address (remove it to allow any outside the special ranges)".to_owned(),
                });
            }
            Some(nets)
        }
    };
    let names = |key: &'static str| {
        annotation(key)
            .map(|v| parse_namespaces([v]).map_err(|e| field(key, e)))
            .transpose()
    };
    Ok(Claims {
        allowed_addresses,
        allowed_namespaces: names(ANNOTATION_ALLOWED_NAMESPACES)?,
        denied_namespaces: names(ANNOTATION_DENIED_NAMESPACES)?.unwrap_or_default(),
    })
}

/// The Link's three export selectors.
fn selectors(link: &str, spec: &LinkSpec) -> Result<Selectors, LinkError> {
    let selector = |field: &'static str, sel: Option<&LabelSelector>| {
        Selector::from_k8s(sel).map_err(|source| LinkError::Selector {
            link: link.to_owned(),
            field,
            source,
        })
    };
    Ok(Selectors {
        gateway: selector("selector", spec.selector.as_ref())?,
        remote_discovery: selector(
            "remoteDiscoverySelector",
            spec.remote_discovery_selector.as_ref(),
        )?,
        federated: selector(
            "federatedServiceSelector",
            spec.federated_service_selector.as_ref(),
        )?,
    })
}

/// The CRD's strings have no "unset" other than empty.
fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// `gatewayAddress`: a comma-separated list, as link-gen joins the gateway
/// Service's load-balancer ingress entries.
fn gateway_addresses(list: &str, warnings: &mut Vec<String>) -> Vec<GatewayAddr> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match parse_gateway_addr(item) {
            Some(addr) => out.push(addr),
            None => warnings.push(format!(
                "spec.gatewayAddress: {item:?} is neither an IP address nor a DNS hostname; skipped"
            )),
        }
    }
    if out.is_empty() {
        // Linkerd would still mirror gateway-mode services, with no
        // endpoints; we keep the gateway so they stay known, but say why
        // they have no addresses.
        warnings.push(format!(
            "spec.gatewayAddress {list:?} has no usable address; gateway-mode names get none"
        ));
    }
    out
}

/// `gatewayPort`: link-gen always sets it (default 4143), so its absence is
/// worth a warning too.
fn gateway_port(port: Option<&str>, warnings: &mut Vec<String>) -> Option<u16> {
    match port.filter(|p| !p.is_empty()) {
        None => {
            warnings.push(
                "spec.gatewayPort is absent (link-gen sets it, default \"4143\"); the gateway has no port".to_owned(),
            );
            None
        }
        Some(p) => match parse_port(p) {
            Some(n) => Some(n),
            None => {
                warnings.push(format!(
                    "spec.gatewayPort {p:?} is not a port number (1-65535); the gateway has no port"
                ));
                None
            }
        },
    }
}

/// A port given as a string, as the CRD has it.
fn parse_port(s: &str) -> Option<u16> {
    s.trim().parse::<u16>().ok().filter(|&p| p != 0)
}

/// `probeSpec`. Linkerd runs no probe worker when `path` is empty, and its
/// worker quietly exits on a bad period; we warn instead and fall back to the
/// CRD defaults where one exists.
fn probe(raw: LinkProbe, warnings: &mut Vec<String>) -> Option<ProbeSpec> {
    let path = non_empty(raw.path)?;
    if let Some(problem) = super::probe::path_problem(&path) {
        warnings.push(format!("spec.probeSpec.path {problem}; no gateway probe"));
        return None;
    }
    let port = match raw.port.as_deref().filter(|p| !p.is_empty()) {
        None => {
            warnings.push("spec.probeSpec.port is absent; no gateway probe".to_owned());
            return None;
        }
        Some(p) => match parse_port(p) {
            Some(n) => n,
            None => {
                warnings.push(format!(
                    "spec.probeSpec.port {p:?} is not a port number (1-65535); no gateway probe"
                ));
                return None;
            }
        },
    };
    let duration = |field: &str, value: Option<String>, default: Duration, w: &mut Vec<String>| {
        let Some(v) = non_empty(value) else {
            return default;
        };
        match parse_go_duration(&v) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                w.push(format!(
                    "spec.probeSpec.{field} {v:?} is zero; using {default:?}"
                ));
                default
            }
            Err(e) => {
                w.push(format!("spec.probeSpec.{field}: {e}; using {default:?}"));
                default
            }
        }
    };
    let period = duration("period", raw.period, ProbeSpec::DEFAULT_PERIOD, warnings);
    let timeout = duration("timeout", raw.timeout, ProbeSpec::DEFAULT_TIMEOUT, warnings);
    let failure_threshold = match non_empty(raw.failure_threshold) {
        None => ProbeSpec::DEFAULT_FAILURE_THRESHOLD,
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if n >= 1 => n,
            _ => {
                warnings.push(format!(
                    "spec.probeSpec.failureThreshold {v:?} is not a whole number of at least 1; using {}",
                    ProbeSpec::DEFAULT_FAILURE_THRESHOLD
                ));
                ProbeSpec::DEFAULT_FAILURE_THRESHOLD
            }
        },
    };
    Some(ProbeSpec {
        path,
        port,
        period,
        timeout,
        failure_threshold,
    })
}

/// One gateway address: an IP literal, else a DNS hostname (lower-cased).
/// Shared with the clusters file so both accept the same addresses.
pub(crate) fn parse_gateway_addr(s: &str) -> Option<GatewayAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(GatewayAddr::Ip(ip));
    }
    parse_hostname(s).map(GatewayAddr::Host)
}

/// A DNS hostname: dot-separated labels of 1-63 letters, digits and `-`, not
/// starting or ending with `-`, 253 characters at most. Case does not matter
/// in DNS, so the result is lower-cased to compare equal across spellings.
pub(crate) fn parse_hostname(s: &str) -> Option<String> {
    if s.is_empty() || s.len() > 253 {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    lower
        .split('.')
        .all(crate::vocab::name::is_dns_label)
        .then_some(lower)
}

#[cfg(test)]
mod tests;
