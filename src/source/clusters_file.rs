//! The `--clusters FILE` format: linked clusters declared without Linkerd,
//! as a YAML list of entries (name, kubeconfig, optional context, export
//! selectors, gateway, what the cluster may claim, and where it is).
//!
//! Owns the file's schema (camelCase keys, unknown keys rejected at every
//! level), its defaults (Linkerd's selectors; the remote `linkerd-gateway`
//! Service when no gateway is given) and the resolution of relative
//! kubeconfig paths against the file's directory. It reads the clusters
//! file itself and nothing else: the kubeconfigs are read by the live
//! source, and nothing here talks to an API.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::vocab::name::check_cluster_name;
use crate::vocab::place::{Place, place_value};
use crate::vocab::trust::{Claims, parse_cidrs, parse_namespaces};

use super::link::parse_gateway_addr;
use super::selector::{Selector, Selectors};
use super::spec::{GatewaySource, GatewaySpec, ProbeSpec};
use crate::vocab::duration::parse_go_duration;

/// One linked cluster of the clusters file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEntry {
    /// `name`: the cluster name.
    pub name: Arc<str>,
    /// `kubeconfig`, resolved against the clusters file's directory.
    pub kubeconfig: PathBuf,
    /// `context` (`None`: the kubeconfig's current context).
    pub context: Option<String>,
    /// `selectors`, each omitted one at Linkerd's default.
    pub(crate) selectors: Selectors,
    /// `gateway`, or [`GatewaySource::RemoteService`] without one.
    pub(crate) gateway: GatewaySource,
    /// `allowedAddresses` and `namespaces`: what the cluster may claim.
    pub claims: Claims,
    /// `region` and `zone`: where the cluster is (docs/locality.md); over
    /// what its own ClusterProperty objects say.
    pub place: Place,
}

/// Why a clusters file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ClustersFileError {
    /// The file could not be read.
    #[error("cannot read clusters file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A problem inside a file read by [`load_clusters_file`].
    #[error("clusters file {}: {source}", path.display())]
    InFile {
        /// The file.
        path: PathBuf,
        /// The problem.
        source: Box<ClustersFileError>,
    },
    /// Not YAML, or not a list of entries.
    #[error("{0}")]
    Syntax(String),
    /// An entry does not have the schema's shape (unknown or missing key,
    /// wrong type).
    #[error("entry {index}{}: {message}", field_suffix(field))]
    Shape {
        /// 0-based position in the list.
        index: usize,
        /// Where in the entry, e.g. `gateway.port` (empty: the entry).
        field: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// An entry has the right shape but a value that cannot work.
    #[error("entry {index} ({name}): {field}: {reason}")]
    Invalid {
        /// 0-based position in the list.
        index: usize,
        /// The entry's `name` as written.
        name: String,
        /// The key, e.g. `gateway.addresses[1]`.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

/// ` (field)` for a non-empty field path.
fn field_suffix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!(", {field}")
    }
}

/// Reads and parses a clusters file; relative kubeconfig paths are taken
/// from the file's directory.
pub fn load_clusters_file(path: &Path) -> Result<Vec<ClusterEntry>, ClustersFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ClustersFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let base_dir = path.parent().unwrap_or(Path::new(""));
    parse_clusters_file(&text, base_dir).map_err(|e| ClustersFileError::InFile {
        path: path.to_owned(),
        source: Box::new(e),
    })
}

/// Parses the text of a clusters file; relative kubeconfig paths are joined
/// to `base_dir`. An empty file or list declares no clusters.
pub fn parse_clusters_file(
    text: &str,
    base_dir: &Path,
) -> Result<Vec<ClusterEntry>, ClustersFileError> {
    let entries = decode(text)?;
    let mut out: Vec<ClusterEntry> = Vec::with_capacity(entries.len());
    for (index, raw) in entries.into_iter().enumerate() {
        let entry = check_entry(index, raw, base_dir)?;
        if let Some(first) = out.iter().position(|e| e.name == entry.name) {
            return Err(ClustersFileError::Invalid {
                index,
                name: entry.name.to_string(),
                field: "name".to_owned(),
                reason: format!("duplicate of entry {first}"),
            });
        }
        out.push(entry);
    }
    Ok(out)
}

/// Deserializes the list, keeping the path of a failure so the message can
/// say which entry and key.
fn decode(text: &str) -> Result<Vec<RawEntry>, ClustersFileError> {
    // An empty document deserializes as unit, which `Entries` accepts; this
    // only spares the parser a file of blanks.
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut failed_at: Option<serde_path_to_error::Path> = None;
    let result = serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize::<_, Entries>(de).map_err(|e| {
            failed_at = Some(e.path().clone());
            e.into_inner()
        })
    });
    match result {
        Ok(Entries(v)) => Ok(v),
        Err(e) => {
            let message = e.without_snippet().render();
            let mut segments = failed_at.iter().flat_map(|p| p.iter());
            match segments.next() {
                Some(serde_path_to_error::Segment::Seq { index }) => {
                    let field: Vec<String> = segments.map(ToString::to_string).collect();
                    Err(ClustersFileError::Shape {
                        index: *index,
                        // Segment renders sequence indices as `[1]` and keys
                        // bare; join keys with dots as written in YAML.
                        field: field.join(".").replace(".[", "["),
                        message,
                    })
                }
                _ => Err(ClustersFileError::Syntax(message)),
            }
        }
    }
}

/// The top level: a list, with a clear message for the likely mistake of a
/// mapping keyed by cluster name.
struct Entries(Vec<RawEntry>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of cluster entries (`- name: ...`)")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(e) = seq.next_element()? {
                    out.push(e);
                }
                Ok(Entries(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, _map: A) -> Result<Entries, A::Error> {
                Err(de::Error::custom(
                    "the clusters file is a list of entries (`- name: east`), not a mapping",
                ))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Entries, E> {
                Ok(Entries(Vec::new()))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawEntry {
    name: String,
    kubeconfig: String,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    selectors: Option<RawSelectors>,
    #[serde(default)]
    gateway: Option<RawGateway>,
    #[serde(default)]
    allowed_addresses: Option<Vec<String>>,
    #[serde(default)]
    namespaces: Option<RawNamespaces>,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    zone: Option<String>,
}

/// `namespaces`: each list optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawNamespaces {
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Option<Vec<String>>,
}

/// Each key: absent keeps Linkerd's default; present (`{}` or null) replaces
/// it, and an empty selector matches nothing, as in a Link.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSelectors {
    #[serde(default, deserialize_with = "present")]
    gateway: Option<Option<LabelSelector>>,
    #[serde(default, deserialize_with = "present")]
    remote_discovery: Option<Option<LabelSelector>>,
    #[serde(default, deserialize_with = "present")]
    federated: Option<Option<LabelSelector>>,
}

/// Tells an explicit `key:` (null) from an absent key, which plain
/// `Option<Option<_>>` cannot: both would be `None`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<LabelSelector>>, D::Error> {
    Option::<LabelSelector>::deserialize(d).map(Some)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawGateway {
    addresses: Vec<String>,
    #[serde(default)]
    port: Option<u16>,
    #[serde(default)]
    identity: Option<String>,
    #[serde(default)]
    probe: Option<RawProbe>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawProbe {
    path: String,
    port: u16,
    #[serde(default)]
    period: Option<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    failure_threshold: Option<u32>,
}

/// Validates one entry. Unlike a Link, which another tool wrote, this file
/// is the operator's own: every bad value is an error, never a warning.
fn check_entry(
    index: usize,
    raw: RawEntry,
    base_dir: &Path,
) -> Result<ClusterEntry, ClustersFileError> {
    let name = raw.name;
    let invalid = |field: &str, reason: String| ClustersFileError::Invalid {
        index,
        name: name.clone(),
        field: field.to_owned(),
        reason,
    };
    check_cluster_name(&name).map_err(|e| invalid("name", e.to_string()))?;
    if raw.kubeconfig.is_empty() {
        return Err(invalid("kubeconfig", "empty".to_owned()));
    }
    // `join` keeps an absolute path as it is.
    let kubeconfig = base_dir.join(&raw.kubeconfig);
    let context = match raw.context {
        Some(c) if c.is_empty() => {
            return Err(invalid(
                "context",
                "empty (leave it out to use the kubeconfig's current context)".to_owned(),
            ));
        }
        other => other,
    };

    let mut selectors = Selectors::linkerd_defaults();
    let sel = raw.selectors.unwrap_or_default();
    for (key, given, slot) in [
        ("selectors.gateway", sel.gateway, &mut selectors.gateway),
        (
            "selectors.remoteDiscovery",
            sel.remote_discovery,
            &mut selectors.remote_discovery,
        ),
        (
            "selectors.federated",
            sel.federated,
            &mut selectors.federated,
        ),
    ] {
        if let Some(given) = given {
            *slot = Selector::from_k8s(given.as_ref()).map_err(|e| invalid(key, e.to_string()))?;
        }
    }

    let gateway = match raw.gateway {
        None => GatewaySource::RemoteService,
        Some(gw) => GatewaySource::Spec(check_gateway(gw, &invalid)?),
    };
    let claims = check_claims(raw.allowed_addresses, raw.namespaces, &invalid)?;
    let place = check_place(raw.region, raw.zone, &invalid)?;

    Ok(ClusterEntry {
        name: Arc::from(name.as_str()),
        kubeconfig,
        context,
        selectors,
        gateway,
        claims,
        place,
    })
}

/// `allowedAddresses` and `namespaces`. An empty `allowedAddresses` would
/// reject every address: most likely a mistake, so it is one.
fn check_claims(
    allowed_addresses: Option<Vec<String>>,
    namespaces: Option<RawNamespaces>,
    invalid: &dyn Fn(&str, String) -> ClustersFileError,
) -> Result<Claims, ClustersFileError> {
    let allowed_addresses = match allowed_addresses {
        None => None,
        Some(list) if list.is_empty() => {
            return Err(invalid(
                "allowedAddresses",
                "empty (leave it out to allow any address outside the special ranges)".to_owned(),
            ));
        }
        Some(list) => Some(
            parse_cidrs(list.iter().map(String::as_str))
                .map_err(|e| invalid("allowedAddresses", e.to_string()))?,
        ),
    };
    let ns = namespaces.unwrap_or_default();
    let names = |key: &str, list: Option<Vec<String>>| {
        list.map(|l| {
            parse_namespaces(l.iter().map(String::as_str)).map_err(|e| invalid(key, e.to_string()))
        })
        .transpose()
    };
    Ok(Claims {
        allowed_addresses,
        allowed_namespaces: names("namespaces.allow", ns.allow)?,
        denied_namespaces: names("namespaces.deny", ns.deny)?.unwrap_or_default(),
    })
}

/// `region` and `zone`: Kubernetes label values, like the ClusterProperty
/// and annotation values that can say the same.
fn check_place(
    region: Option<String>,
    zone: Option<String>,
    invalid: &dyn Fn(&str, String) -> ClustersFileError,
) -> Result<Place, ClustersFileError> {
    let part = |what: &'static str, v: Option<String>| {
        v.map(|v| place_value(what, &v).map_err(|e| invalid(what, e.to_string())))
            .transpose()
    };
    Ok(Place {
        region: part("region", region)?,
        zone: part("zone", zone)?,
    })
}

fn check_gateway(
    gw: RawGateway,
    invalid: &dyn Fn(&str, String) -> ClustersFileError,
) -> Result<GatewaySpec, ClustersFileError> {
    if gw.addresses.is_empty() {
        return Err(invalid(
            "gateway.addresses",
            "empty (leave gateway out to read the remote linkerd-gateway Service)".to_owned(),
        ));
    }
    let addresses = gw
        .addresses
        .iter()
        .enumerate()
        .map(|(i, a)| {
            parse_gateway_addr(a.trim()).ok_or_else(|| {
                invalid(
                    &format!("gateway.addresses[{i}]"),
                    format!("{a:?} is neither an IP address nor a DNS hostname"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if gw.port == Some(0) {
        return Err(invalid("gateway.port", "0 is not a port".to_owned()));
    }
    let identity = match gw.identity {
        Some(i) if i.is_empty() => {
            return Err(invalid(
                "gateway.identity",
                "empty (leave it out for none)".to_owned(),
            ));
        }
        other => other,
    };
    let probe = gw.probe.map(|p| check_probe(p, invalid)).transpose()?;
    Ok(GatewaySpec {
        addresses,
        port: gw.port,
        identity,
        probe,
    })
}

fn check_probe(
    p: RawProbe,
    invalid: &dyn Fn(&str, String) -> ClustersFileError,
) -> Result<ProbeSpec, ClustersFileError> {
    if p.path.is_empty() {
        return Err(invalid(
            "gateway.probe.path",
            "empty (leave probe out to run none)".to_owned(),
        ));
    }
    if let Some(problem) = super::probe::path_problem(&p.path) {
        return Err(invalid("gateway.probe.path", problem));
    }
    if p.port == 0 {
        return Err(invalid("gateway.probe.port", "0 is not a port".to_owned()));
    }
    let duration = |key: &str, v: Option<String>, default: Duration| match v {
        None => Ok(default),
        Some(v) => match parse_go_duration(&v) {
            Ok(d) if d.is_zero() => Err(invalid(key, format!("{v:?} is zero"))),
            Ok(d) => Ok(d),
            Err(e) => Err(invalid(key, e)),
        },
    };
    let period = duration("gateway.probe.period", p.period, ProbeSpec::DEFAULT_PERIOD)?;
    let timeout = duration(
        "gateway.probe.timeout",
        p.timeout,
        ProbeSpec::DEFAULT_TIMEOUT,
    )?;
    let failure_threshold = match p.failure_threshold {
        None => ProbeSpec::DEFAULT_FAILURE_THRESHOLD,
        Some(0) => {
            return Err(invalid(
                "gateway.probe.failureThreshold",
                "must be at least 1".to_owned(),
            ));
        }
        Some(n) => n,
    };
    Ok(ProbeSpec {
        path: p.path,
        port: p.port,
        period,
        timeout,
        failure_threshold,
    })
}

#[cfg(test)]
mod tests;
