//! The Kubernetes MCS API objects (`docs/mcs.md`): ServiceExport,
//! ServiceImport and the ClusterProperty objects we read
//! (`cluster.clusterset.k8s.io`, and `region.clusterset-dns.io` and
//! `zone.clusterset-dns.io` of docs/locality.md), turned into what the
//! model holds — a ServiceExport's key and age, an import's clusterset
//! IPs, a cluster's id, region and zone.
//!
//! Only the fields we read are typed (the mcs-api types have no maintained
//! Rust crate); both `v1alpha1` and `v1beta1` decode through the same
//! types, since the fields we read are the same in both. It must not join
//! exports to Services (the sources do) nor build DNS records.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ServiceSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::{ConvertError, Converted, Reason, Warnings, invalid, key, quote, trusted};
use crate::model::objects::{
    Affinity, ExportedMeta, Families, Family, Import, ImportFields, ObjectKey, TrafficDistribution,
    TrafficPolicy,
};
use crate::vocab::mcs::{
    ABOUT_GROUP, ABOUT_VERSIONS, ANNOTATION_DEFINED_BY, CLUSTER_ID_PROPERTY, MCS_GROUP,
    MCS_VERSIONS, OWN_PREFIX,
};
use crate::vocab::meta::{MAX_ANNOTATIONS_BYTES, is_label_value, is_qualified_name};
use crate::vocab::name::is_dns_label;
use crate::vocab::place::{ANNOTATION_NEAREST, PROPERTY_REGION, PROPERTY_ZONE, place_value};
use crate::vocab::trust::Trust;

/// A ServiceExport or ServiceImport, as far as we read it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct McsObject {
    /// Name, namespace, creationTimestamp.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The spec of either kind: each reads its own fields.
    #[serde(default)]
    pub spec: Option<McsSpec>,
}

/// `ServiceImport.spec` and `ServiceExport.spec`, as far as we read them.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct McsSpec {
    /// Import: `ClusterSetIP` or `Headless`.
    #[serde(rename = "type", default)]
    pub type_: Option<String>,
    /// Import: the clusterset IPs.
    #[serde(default)]
    pub ips: Vec<String>,
    /// Export (v1beta1): labels for the ServiceImport.
    #[serde(default)]
    pub exported_labels: BTreeMap<String, String>,
    /// Export (v1beta1): annotations for the ServiceImport.
    #[serde(default)]
    pub exported_annotations: BTreeMap<String, String>,
}

/// A ServiceExport as the sources join it to its Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Export {
    /// The Service it exports (its own namespace/name).
    pub key: ObjectKey,
    /// Its `creationTimestamp`, Unix seconds (none: the newest).
    pub created: i64,
    /// It opts its MCS name into nearest answers.
    pub nearest: bool,
    /// Its exported labels and annotations that may be written.
    pub meta: Option<Arc<ExportedMeta>>,
}

/// A ClusterProperty, as far as we read it.
#[derive(Debug, Deserialize)]
pub(crate) struct ClusterProperty {
    /// Its name says what the value is.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The value.
    #[serde(default)]
    pub spec: PropertySpec,
}

/// `ClusterProperty.spec`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PropertySpec {
    /// The value (up to 128,000 characters).
    #[serde(default)]
    pub value: String,
}

/// A ServiceExport: the key of the Service it exports (its own), its
/// `creationTimestamp` in Unix seconds (none: the newest, so it loses every
/// conflict), its nearest opt-in and its exported labels and annotations,
/// an entry the local API server would refuse, or one under our own
/// prefix, left out with a warning.
pub(crate) fn convert_export(export: &McsObject) -> Result<Converted<Export>, ConvertError> {
    let key = key(&export.metadata)?;
    let created = export
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(i64::MAX, |t| t.0.as_second());
    let mut w = Warnings::default();
    let meta = export.spec.as_ref().and_then(|spec| {
        let labels = exported(&spec.exported_labels, "spec.exportedLabels", true, &mut w);
        let annotations = exported(
            &spec.exported_annotations,
            "spec.exportedAnnotations",
            false,
            &mut w,
        );
        (!labels.is_empty() || !annotations.is_empty()).then(|| {
            Arc::new(ExportedMeta {
                labels,
                annotations,
            })
        })
    });
    Ok(Converted {
        value: Export {
            key,
            created,
            nearest: export_opts_nearest(export),
            meta,
        },
        warnings: w.0,
    })
}

/// The entries of `map` the local API server would accept on an object
/// of ours (`labels`: values must be label values too), none under our own
/// prefix, annotations at most [`MAX_ANNOTATIONS_BYTES`] in all.
fn exported(
    map: &BTreeMap<String, String>,
    field: &str,
    labels: bool,
    w: &mut Warnings,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut bytes = 0;
    for (k, v) in map {
        let why = if k.starts_with(OWN_PREFIX) {
            Some("is our own key")
        } else if !is_qualified_name(k) {
            Some("is not a valid key")
        } else if labels && !is_label_value(v) {
            Some("has a value that is not a label value")
        } else if bytes + k.len() + v.len() > MAX_ANNOTATIONS_BYTES {
            Some("would take the entries over 256 KiB")
        } else {
            None
        };
        match why {
            Some(why) => w.add(Reason::ExportedMetaInvalid, || {
                format!("{field}: {} {why}; left off the ServiceImport", quote(k))
            }),
            None => {
                bytes += k.len() + v.len();
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

/// What a ServiceImport copies from Service `spec` (KEP-1645 v1beta1): a
/// value the local API server would refuse is left out with a warning.
pub(super) fn import_fields(spec: Option<&ServiceSpec>, w: &mut Warnings) -> ImportFields {
    let Some(spec) = spec else {
        return ImportFields::default();
    };
    let mut unknown = |field: &str, v: &str| {
        w.add(Reason::ServiceFieldUnknown, || {
            format!(
                "{field} {} is not a value Kubernetes knows; left off the ServiceImport",
                quote(v)
            )
        });
    };
    let families = spec.ip_families.as_deref().unwrap_or_default();
    let families = Families::new(families.iter().filter_map(|f| {
        let parsed = Family::parse(f);
        if parsed.is_none() {
            unknown("spec.ipFamilies", f);
        }
        parsed
    }));
    let timeout = spec
        .session_affinity_config
        .as_ref()
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds);
    let affinity = match spec.session_affinity.as_deref() {
        None => Affinity::Unset,
        Some("None") => Affinity::Off,
        Some("ClientIP") => Affinity::ClientIp(timeout.filter(|t| (1..=86_400).contains(t))),
        Some(other) => {
            unknown("spec.sessionAffinity", other);
            Affinity::Unset
        }
    };
    let mut parse = |field: &str, v: Option<&str>, f: fn(&str) -> Option<_>| {
        let v = v?;
        let parsed = f(v);
        if parsed.is_none() {
            unknown(field, v);
        }
        parsed
    };
    let internal_traffic_policy = parse(
        "spec.internalTrafficPolicy",
        spec.internal_traffic_policy.as_deref(),
        TrafficPolicy::parse,
    );
    let traffic_distribution = spec.traffic_distribution.as_deref().and_then(|v| {
        let parsed = TrafficDistribution::parse(v);
        if parsed.is_none() {
            unknown("spec.trafficDistribution", v);
        }
        parsed
    });
    ImportFields {
        families,
        affinity,
        internal_traffic_policy,
        traffic_distribution,
    }
}

/// True when a ServiceExport opts its service's MCS name into nearest
/// answers (`clusterset-dns.io/nearest: "true"`; any other value does not).
fn export_opts_nearest(export: &McsObject) -> bool {
    export
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_NEAREST))
        .is_some_and(|v| v == "true")
}

/// A ServiceImport: its key and clusterset IPs, those `trust` rejects left
/// out (with a warning). A headless import has none (any it lists are
/// ignored, as kube-proxy would).
pub(crate) fn convert_import(
    import: &McsObject,
    trust: &Trust,
) -> Result<Converted<Import>, ConvertError> {
    let key = key(&import.metadata)?;
    let spec = import.spec.as_ref();
    let headless = match spec.and_then(|s| s.type_.as_deref()) {
        Some("ClusterSetIP") | None => false,
        Some("Headless") => true,
        Some(other) => {
            return Err(invalid(
                Reason::ImportTypeUnknown,
                "spec.type",
                format!("{} is neither ClusterSetIP nor Headless", quote(other)),
            ));
        }
    };
    let mut ips = Vec::new();
    let mut w = Warnings::default();
    for (i, ip) in spec
        .map(|s| &s.ips[..])
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        match ip.parse::<IpAddr>() {
            // Ignored below: nothing to check or report.
            Ok(ip) if headless => ips.push(ip),
            Ok(ip) => ips.extend(trusted(trust, ip, || format!("spec.ips[{i}]"), &mut w)),
            Err(_) => {
                return Err(invalid(
                    Reason::ClusterIpNotIp,
                    format!("spec.ips[{i}]"),
                    format!("{} is not an IP address", quote(ip)),
                ));
            }
        }
    }
    if headless {
        ips.clear();
    }
    ips.sort();
    ips.dedup();
    // Ours when we wrote it; a cluster name is a DNS label.
    let defined_by = import
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_DEFINED_BY))
        .filter(|v| is_dns_label(v))
        .map(|v| Arc::from(v.as_str()));
    Ok(Converted {
        value: Import {
            key,
            ips,
            defined_by,
        },
        warnings: w.0,
    })
}

/// What a ClusterProperty we read says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Property {
    /// `cluster.clusterset.k8s.io`: the MCS cluster id, an RFC 1123 label.
    ClusterId(String),
    /// `region.clusterset-dns.io`: the cluster's region.
    Region(Arc<str>),
    /// `zone.clusterset-dns.io`: the cluster's zone.
    Zone(Arc<str>),
}

/// What a ClusterProperty gives: `Some` for one we read with a valid
/// value, `None` for any other property (not ours to read). Values are
/// trimmed (a YAML block scalar ends in a newline).
pub(crate) fn convert_property(
    property: &ClusterProperty,
) -> Result<Option<Property>, ConvertError> {
    let value = property.spec.value.trim();
    let place = |what: &'static str| {
        place_value(what, value).map_err(|e| {
            invalid(
                Reason::PlaceInvalid,
                "spec.value",
                format!("{e}; the cluster's place from its ClusterProperty objects is unknown"),
            )
        })
    };
    Ok(Some(match property.metadata.name.as_deref() {
        Some(CLUSTER_ID_PROPERTY) => Property::ClusterId(cluster_id(value)?),
        Some(PROPERTY_REGION) => Property::Region(place("region")?),
        Some(PROPERTY_ZONE) => Property::Zone(place("zone")?),
        _ => return Ok(None),
    }))
}

/// The value of `cluster.clusterset.k8s.io`, if it is a label.
fn cluster_id(value: &str) -> Result<String, ConvertError> {
    if !is_dns_label(value) {
        return Err(invalid(
            Reason::ClusterIdNotALabel,
            "spec.value",
            format!(
                "{} is not an RFC 1123 label, which KEP-2149 requires of a cluster id; the cluster's name is its id",
                quote(value)
            ),
        ));
    }
    Ok(value.to_owned())
}

/// A watched ServiceExport, ServiceImport or ClusterProperty (delivered as
/// a `DynamicObject`, since the version a cluster serves is found at run
/// time) read as one of the types above.
pub(crate) fn from_dynamic<T: DeserializeOwned>(object: &DynamicObject) -> Result<T, ConvertError> {
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|e| invalid(Reason::Undecodable, "object", e.to_string()))
}

/// True when `api_version` is one of the MCS API versions we read.
pub(crate) fn is_mcs_api(api_version: &str) -> bool {
    api_version
        .split_once('/')
        .is_some_and(|(g, v)| g == MCS_GROUP && MCS_VERSIONS.contains(&v))
}

/// True when `api_version` is one of the About API versions we read.
pub(crate) fn is_about_api(api_version: &str) -> bool {
    api_version
        .split_once('/')
        .is_some_and(|(g, v)| g == ABOUT_GROUP && ABOUT_VERSIONS.contains(&v))
}

#[cfg(test)]
mod tests;
