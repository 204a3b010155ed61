//! The Kubernetes MCS API's spellings (KEP-1645, KEP-2149; `docs/mcs.md`):
//! API groups and the versions we read, the cluster-id ClusterProperty, the
//! labels of imported EndpointSlices. Shared by the sources (which read
//! these objects) and the mirror controller (which writes them).

/// The MCS API group (ServiceExport, ServiceImport).
pub(crate) const MCS_GROUP: &str = "multicluster.x-k8s.io";
/// The About API group (ClusterProperty, KEP-2149).
pub(crate) const ABOUT_GROUP: &str = "about.k8s.io";
/// The MCS API versions we read and write, most preferred first.
pub(crate) const MCS_VERSIONS: [&str; 2] = ["v1beta1", "v1alpha1"];
/// The About API versions we read, most preferred first.
pub(crate) const ABOUT_VERSIONS: [&str; 2] = ["v1beta1", "v1alpha1"];
/// The ClusterProperty whose value is the cluster id.
pub(crate) const CLUSTER_ID_PROPERTY: &str = "cluster.clusterset.k8s.io";
/// `multicluster.kubernetes.io/service-name`: the MCS service an import's
/// objects belong to.
pub(crate) const MCS_SERVICE_NAME_LABEL: &str = "multicluster.kubernetes.io/service-name";
/// `multicluster.kubernetes.io/source-cluster`: the cluster id an imported
/// EndpointSlice's endpoints come from (CoreDNS's `multicluster` names pods
/// `<hostname>.<clusterid>` by it).
pub(crate) const MCS_SOURCE_CLUSTER_LABEL: &str = "multicluster.kubernetes.io/source-cluster";
/// The annotation on a ServiceImport we write naming the cluster whose
/// export defined it (its type, ports and copied fields): that export keeps
/// winning conflicts while it is a member (docs/mcs.md §3).
pub(crate) const ANNOTATION_DEFINED_BY: &str = "clusterset-dns.io/defined-by";
/// The label prefix of our own keys: never taken from a remote cluster's
/// exported labels or annotations.
pub(crate) const OWN_PREFIX: &str = "clusterset-dns.io/";
