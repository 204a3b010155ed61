//! The mirror controller: the Services and EndpointSlices that make the
//! clusterset's names visible in the local cluster's own DNS and to
//! kube-proxy, derived from the same model the DNS answers come from.
//!
//! - [`desired`]: the desired objects, a pure function of the cluster state,
//!   and [`desired::DesiredState`], the same kept per service between model
//!   batches and recomputed only for the services a batch touched;
//! - [`feed`]: the model's states and what changed, merged while busy;
//! - [`reconcile`]: desired vs actual, and the writes that close the gap,
//!   as a pure plan;
//! - [`cache`]: what exists of ours, from the watches and our own write
//!   responses, ordered without comparing resourceVersions;
//! - [`watch`]: the watches of our objects (`kube::runtime::watcher`) and
//!   the look for Linkerd's own service mirror;
//! - [`api`]: every write, through kube's typed `Api` and event `Recorder`;
//! - [`lease`]: leader election on a Lease (`Api<Lease>`);
//! - [`status`]: the conditions of the local ServiceExports (`--mcs`);
//! - [`sweep`]: without `--mcs`, the ServiceImports a run with it left;
//! - [`run`]: the loop, and what each API status means for a write;
//! - [`stats`]: its counters.
//!
//! Every object is typed end to end ([`Object`]: k8s-openapi's `Service`
//! and `EndpointSlice`, [`crate::k8s::crd::ServiceImport`] at the version
//! the local cluster serves): built so by [`desired`], watched and written
//! so, compared on its typed fields by [`reconcile`]. JSON exists only as
//! what the API is sent ([`Object::to_json`], hashed into the
//! applied-hash annotation).
//!
//! Nothing here builds an HTTP request by hand or reads from
//! `crate::source`. Objects are told apart from everyone else's by
//! [`MANAGED_BY_LABEL`] = [`MANAGED_BY`]; nothing without it is ever
//! modified or deleted.

pub(crate) mod api;
pub(crate) mod cache;
pub(crate) mod desired;
pub(crate) mod feed;
pub mod lease;
pub(crate) mod reconcile;
pub mod run;
pub(crate) mod stats;
pub(crate) mod status;
pub(crate) mod sweep;
pub(crate) mod watch;

#[cfg(test)]
#[path = "tests/fixtures.rs"]
mod fixtures;
#[cfg(test)]
#[path = "tests/mock.rs"]
mod mock;

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::k8s::crd::{self, CrdError, ServiceImport};

/// Ownership label on every object we write.
pub(crate) const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub(crate) const MANAGED_BY: &str = "clusterset-dns";
/// `endpointslice.kubernetes.io/managed-by` on our EndpointSlices.
pub(crate) const SLICE_MANAGED_BY: &str = "clusterset-dns.io/mirror";
/// The server-side apply field manager.
pub(crate) const FIELD_MANAGER: &str = "clusterset-dns";
/// Annotation holding the full name of an object whose name was shortened.
pub(crate) const FULL_NAME_ANNOTATION: &str = "clusterset-dns.io/full-name";
/// Label naming the linked cluster an object mirrors (absent on federated
/// objects, which belong to every member).
pub(crate) const CLUSTER_LABEL: &str = "clusterset-dns.io/cluster";
/// Prefix of the derived Service of an MCS service: `derived-<svc>`, the
/// selector-less Service whose ClusterIP is the ServiceImport's clusterset IP.
pub(crate) const DERIVED_PREFIX: &str = "derived-";

/// Kind of a mirror object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// `v1 Service`.
    Service,
    /// `discovery.k8s.io/v1 EndpointSlice`.
    EndpointSlice,
    /// `multicluster.x-k8s.io ServiceImport` (v1beta1, or v1alpha1 where
    /// only that is served), written with `--mcs`.
    ServiceImport,
}

impl Kind {
    /// The `kind` field.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Service => "Service",
            Self::EndpointSlice => "EndpointSlice",
            Self::ServiceImport => "ServiceImport",
        }
    }
}

/// Which object: kind, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ObjectRef {
    /// Kind.
    pub kind: Kind,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// One mirror object, typed: as we want it (only the fields we own set)
/// or as the API holds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Object {
    /// A Service (boxed: it is the largest by far).
    Service(Box<Service>),
    /// An EndpointSlice.
    EndpointSlice(EndpointSlice),
    /// A ServiceImport, at the version the local cluster serves.
    ServiceImport {
        /// The served version (`v1beta1`, `v1alpha1`): the `apiVersion`
        /// the object is written and hashed with.
        version: Arc<str>,
        /// The object.
        import: ServiceImport,
    },
}

impl Object {
    /// Its kind.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Self::Service(_) => Kind::Service,
            Self::EndpointSlice(_) => Kind::EndpointSlice,
            Self::ServiceImport { .. } => Kind::ServiceImport,
        }
    }

    /// Its `metadata`.
    pub(crate) fn meta(&self) -> &ObjectMeta {
        match self {
            Self::Service(s) => &s.metadata,
            Self::EndpointSlice(s) => &s.metadata,
            Self::ServiceImport { import, .. } => &import.metadata,
        }
    }

    /// Its `metadata`, to change.
    pub(crate) fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Self::Service(s) => &mut s.metadata,
            Self::EndpointSlice(s) => &mut s.metadata,
            Self::ServiceImport { import, .. } => &mut import.metadata,
        }
    }

    /// The label `key`, if set.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        self.meta().labels.as_ref()?.get(key).map(String::as_str)
    }

    /// The object as the JSON the API is sent: `apiVersion` (a
    /// ServiceImport's the served one), `kind`, and every field set.
    pub(crate) fn to_json(&self) -> Result<serde_json::Value, CrdError> {
        let json = |kind: &str, r: Result<serde_json::Value, serde_json::Error>| {
            r.map_err(|source| CrdError::Json {
                kind: kind.to_owned(),
                source,
            })
        };
        match self {
            Self::Service(s) => json("Service", serde_json::to_value(s)),
            Self::EndpointSlice(s) => json("EndpointSlice", serde_json::to_value(s)),
            Self::ServiceImport { version, import } => {
                let dynamic = crd::to_dynamic(import, version)?;
                json("ServiceImport", serde_json::to_value(dynamic))
            }
        }
    }
}

/// One object we want to exist.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Desired {
    /// Which object.
    pub key: ObjectRef,
    /// The whole server-side apply body: `metadata` (name, namespace,
    /// labels, annotations) and the fields we own.
    pub object: Object,
    /// The linked cluster it mirrors (`None` for `<svc>-federated` objects,
    /// MCS derived Services and ServiceImports).
    pub cluster: Option<Arc<str>>,
}
