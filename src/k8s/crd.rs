//! The custom resources this server reads and writes, as typed objects:
//! the MCS API's `ServiceImport` and `ServiceExport`
//! ([`crate::vocab::mcs::MCS_GROUP`], KEP-1645) and Linkerd's `Link`
//! (`multicluster.linkerd.io`), each derived with `kube::CustomResource`,
//! and the conversion between them and the `DynamicObject` of whatever
//! version a cluster serves.
//!
//! A cluster serves these CRDs in one of several versions, found only at
//! run time (`crate::k8s::discover`), while a derived type is fixed to one
//! version. So requests go through an `Api<DynamicObject>` of the served
//! `ApiResource`, and the object crosses that boundary here: typed to
//! dynamic with the served `apiVersion` stamped on ([`to_dynamic`]), and
//! dynamic to typed ([`from_dynamic`]; the derived types ignore the
//! `apiVersion` they are read from). Every version we accept has the same
//! shape for the fields modelled here, which is what makes one type per
//! kind enough.
//!
//! Only the fields this server sets or reads are modelled; others are
//! ignored on read (so a field a newer CRD version adds cannot make an
//! object unreadable) and never written. The schema is disabled: we never
//! install these CRDs from these types. Owns the types and the conversion;
//! it must not decide what a field's value means (`mirror::*` and
//! `source::link` do).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{DynamicObject, TypeMeta};
use kube::{CustomResource, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Why an object did not cross between its typed and dynamic forms.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CrdError {
    /// The typed object did not encode, or the dynamic one did not decode
    /// as the typed one.
    #[error("{kind}: {source}")]
    Json {
        /// The kind converted.
        kind: String,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
}

/// `spec` of an MCS `ServiceImport`: what the clusterset service looks like
/// to this cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1beta1",
    kind = "ServiceImport",
    namespaced,
    schema = "disabled",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServiceImportSpec {
    /// `ClusterSetIP` or `Headless`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The service's ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ImportPort>>,
    /// The clusterset IPs (`ClusterSetIP` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ips: Option<Vec<String>>,
    /// The IP families of `ips`, in their order (v1beta1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_families: Option<Vec<String>>,
    /// `None` or `ClientIP`, as the exported Service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    /// The `ClientIP` timeout, as the exported Service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// As the exported Service's (v1beta1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    /// As the exported Service's (v1beta1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
}

/// `sessionAffinityConfig` (the core API's, with `Eq`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionAffinityConfig {
    /// The `ClientIP` settings.
    #[serde(rename = "clientIP", default, skip_serializing_if = "Option::is_none")]
    pub client_ip: Option<ClientIpConfig>,
}

/// `sessionAffinityConfig.clientIP`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClientIpConfig {
    /// How long a client sticks to one endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
}

/// One port of a [`ServiceImportSpec`] (the MCS API's `ServicePort`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ImportPort {
    /// The port's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `TCP`, `UDP` or `SCTP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The application protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The port number.
    #[serde(default)]
    pub port: i32,
}

/// An MCS `ServiceExport` has no spec: this empty one is flattened away,
/// so the object is `apiVersion`, `kind`, `metadata` and `status` alone.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1beta1",
    kind = "ServiceExport",
    namespaced,
    schema = "disabled",
    no_spec,
    status = "ServiceExportStatus",
    derive = "PartialEq",
    derive = "Default"
)]
pub(crate) struct ServiceExportSpec {}

/// `status` of a [`ServiceExport`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServiceExportStatus {
    /// Conditions, ours (`Valid`, `Conflict`) and other managers'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<ExportCondition>>,
}

/// One condition of a [`ServiceExportStatus`] (a `metav1.Condition`).
/// Every field is optional and `lastTransitionTime` is kept as the text
/// the API holds: another manager's condition that is incomplete must not
/// make the export unreadable, and a time we keep is written back as it
/// was.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExportCondition {
    /// The condition type (`Valid`, `Conflict`, ...).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// `True`, `False` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// A machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the status last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// The export's `metadata.generation` the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// `spec` of a Linkerd `Link` (`multicluster.linkerd.io` v1alpha1 to
/// v1alpha3): the fields we read, every scalar a string as in every CRD
/// version. Unknown fields are ignored (each Linkerd release may add
/// some; v1alpha3 added `excludedLabels`), and fields we do not read
/// (`targetClusterDomain`, ...) are left out on purpose, so that a
/// malformed one cannot make an otherwise usable Link unreadable.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "multicluster.linkerd.io",
    version = "v1alpha3",
    kind = "Link",
    namespaced,
    schema = "disabled"
)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct LinkSpec {
    /// The linked cluster's name.
    pub target_cluster_name: Option<String>,
    /// The Secret (in the Link's namespace) holding its kubeconfig.
    pub cluster_credentials_secret: Option<String>,
    /// The gateway's addresses, comma-separated.
    pub gateway_address: Option<String>,
    /// The gateway's port.
    pub gateway_port: Option<String>,
    /// The gateway's TLS identity.
    pub gateway_identity: Option<String>,
    /// How the gateway is probed.
    pub probe_spec: Option<LinkProbe>,
    /// Services mirrored through the gateway.
    pub selector: Option<LabelSelector>,
    /// Services mirrored for remote discovery (flat mode).
    pub remote_discovery_selector: Option<LabelSelector>,
    /// Services that are federated members.
    pub federated_service_selector: Option<LabelSelector>,
}

/// `spec.probeSpec` of a [`Link`]; every scalar is a string in every CRD
/// version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct LinkProbe {
    /// The probe's HTTP path.
    pub path: Option<String>,
    /// The probe's port.
    pub port: Option<String>,
    /// Time between probes (a Go duration).
    pub period: Option<String>,
    /// A probe's timeout (a Go duration).
    pub timeout: Option<String>,
    /// Failures in a row before the gateway counts as down.
    pub failure_threshold: Option<String>,
}

/// `obj` as a `DynamicObject` of API version `<group>/<version>`: the
/// version the cluster serves, which the derived type cannot know.
pub(crate) fn to_dynamic<K>(obj: &K, version: &str) -> Result<DynamicObject, CrdError>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let kind = K::kind(&()).into_owned();
    let json = |source| CrdError::Json {
        kind: kind.clone(),
        source,
    };
    let value = serde_json::to_value(obj).map_err(json)?;
    let mut dynamic: DynamicObject = serde_json::from_value(value).map_err(json)?;
    dynamic.types = Some(TypeMeta {
        api_version: format!("{}/{version}", K::group(&())),
        kind: kind.clone(),
    });
    Ok(dynamic)
}

/// `obj`, of whatever version the cluster serves, as the typed `K`.
pub(crate) fn from_dynamic<K>(obj: DynamicObject) -> Result<K, CrdError>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    // What `DynamicObject::try_parse` does, keeping serde's own error.
    serde_json::to_value(obj)
        .and_then(serde_json::from_value)
        .map_err(|source| CrdError::Json {
            kind: K::kind(&()).into_owned(),
            source,
        })
}

#[cfg(test)]
mod tests;
