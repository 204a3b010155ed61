//! Linkerd's multicluster vocabulary (docs/linkerd.md §2): the labels and
//! annotations that say what a linked cluster exports and what a mirror
//! object is, and the gateway's well-known names.
//!
//! Only names live here, so the sources, the mirror controller and the
//! selector rules share one spelling; what the labels *mean* is decided in
//! `source::convert` and `source::selector`.

/// `mirror.linkerd.io/exported`.
pub(crate) const LABEL_EXPORTED: &str = "mirror.linkerd.io/exported";
/// `mirror.linkerd.io/federated`.
pub(crate) const LABEL_FEDERATED: &str = "mirror.linkerd.io/federated";
/// `mirror.linkerd.io/mirrored-service`.
pub(crate) const LABEL_MIRRORED: &str = "mirror.linkerd.io/mirrored-service";
/// `mirror.linkerd.io/cluster-name`.
pub(crate) const LABEL_CLUSTER_NAME: &str = "mirror.linkerd.io/cluster-name";
/// `mirror.linkerd.io/headless-mirror-svc-name`.
pub(crate) const LABEL_HEADLESS_PARENT: &str = "mirror.linkerd.io/headless-mirror-svc-name";
/// `mirror.linkerd.io/gateway-identity`.
pub(crate) const ANNOTATION_GATEWAY_IDENTITY: &str = "mirror.linkerd.io/gateway-identity";
/// `config.linkerd.io/opaque-ports` (copied onto mirror Services).
pub(crate) const ANNOTATION_OPAQUE_PORTS: &str = "config.linkerd.io/opaque-ports";
/// `kubernetes.io/service-name` on EndpointSlices.
pub(crate) const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// `endpoints.kubernetes.io/last-change-trigger-time` on EndpointSlices:
/// when the change (of a Pod or Service) that the controller's last write
/// carries happened, in RFC 3339, as the EndpointSlice controller sets it.
pub(crate) const ANNOTATION_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// Namespace of the Linkerd multicluster gateway.
pub(crate) const GATEWAY_NAMESPACE: &str = "linkerd-multicluster";
/// Name of the Linkerd multicluster gateway Service.
pub(crate) const GATEWAY_NAME: &str = "linkerd-gateway";
/// The gateway's data port name.
pub(crate) const GATEWAY_PORT_NAME: &str = "mc-gateway";

// What Linkerd writes on mirror objects (and so do we).

/// `multicluster.linkerd.io/remote-discovery`: a label naming the cluster on
/// flat-mode mirrors, an annotation listing `svc@cluster` members on
/// federated Services (docs/linkerd.md §2.2).
pub(crate) const REMOTE_DISCOVERY: &str = "multicluster.linkerd.io/remote-discovery";
/// `multicluster.linkerd.io/remote-service` label on flat-mode mirrors.
pub(crate) const LABEL_REMOTE_SERVICE: &str = "multicluster.linkerd.io/remote-service";
/// `multicluster.linkerd.io/local-discovery` annotation on federated
/// Services whose local cluster is a member.
pub(crate) const ANNOTATION_LOCAL_DISCOVERY: &str = "multicluster.linkerd.io/local-discovery";
/// `mirror.linkerd.io/remote-svc-fq-name`: what the gateway dials.
pub(crate) const ANNOTATION_REMOTE_FQ_NAME: &str = "mirror.linkerd.io/remote-svc-fq-name";
/// `mirror.linkerd.io/remote-gateway-identity`: the gateway's mTLS identity.
pub(crate) const ANNOTATION_REMOTE_GATEWAY_IDENTITY: &str =
    "mirror.linkerd.io/remote-gateway-identity";
/// `endpointslice.kubernetes.io/managed-by`.
pub(crate) const LABEL_SLICE_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
