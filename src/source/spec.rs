//! What a linked cluster is, however it was declared (a Linkerd Link and its
//! Secret, or an entry of the clusters file): the plain data the live source
//! starts, restarts and stops watches from.
//!
//! Owns only the data types; parsing lives in `source::link` and
//! `source::clusters_file`, and nothing here talks to an API.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::selector::Selectors;
use crate::vocab::place::Place;
use crate::vocab::trust::Claims;

/// One entry of a gateway address list: Link `gatewayAddress` is a
/// comma-separated list of IPs and hostnames.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum GatewayAddr {
    /// A literal address.
    Ip(IpAddr),
    /// A hostname, resolved periodically.
    Host(String),
}

/// The gateway liveness probe (Link `spec.probeSpec`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProbeSpec {
    /// HTTP path, e.g. `/ready`.
    pub path: String,
    /// TCP port on the gateway addresses.
    pub port: u16,
    /// Time between probes.
    pub period: Duration,
    /// Time one probe may take.
    pub timeout: Duration,
    /// Consecutive failures before the gateway counts as dead.
    pub failure_threshold: u32,
}

impl ProbeSpec {
    /// Linkerd's defaults for what a Link leaves out.
    pub(crate) const DEFAULT_PERIOD: Duration = Duration::from_secs(3);
    /// The CRD's default timeout.
    pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
    /// The CRD's default failure threshold.
    pub(crate) const DEFAULT_FAILURE_THRESHOLD: u32 = 3;
}

/// A gateway declared by a Link or the clusters file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GatewaySpec {
    /// Addresses, in the order given.
    pub addresses: Vec<GatewayAddr>,
    /// Data port (`gatewayPort`).
    pub port: Option<u16>,
    /// mTLS identity (`gatewayIdentity`).
    pub identity: Option<String>,
    /// Liveness probe; `None` runs none (Linkerd: empty `probeSpec.path`).
    pub probe: Option<ProbeSpec>,
}

/// Where a linked cluster's gateway comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GatewaySource {
    /// Declared (Link `gatewayAddress`..., or the clusters file `gateway`).
    Spec(GatewaySpec),
    /// The remote `linkerd-gateway` Service in `linkerd-multicluster`
    /// (clusters file entry without `gateway`).
    RemoteService,
    /// No gateway (a Link without `gatewayAddress`: flat mode only).
    None,
}

/// Everything needed to watch one linked cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LinkedCluster {
    /// Cluster name (Link `targetClusterName`, or the file's `name`).
    pub name: Arc<str>,
    /// Kubeconfig YAML text; `Err` says why there is none (Secret missing,
    /// key missing, file unreadable). A cluster without credentials is still
    /// linked: its names are SERVFAIL until it syncs.
    pub kubeconfig: Result<String, String>,
    /// Context to use (`None`: the kubeconfig's current context).
    pub context: Option<String>,
    /// Export selectors.
    pub selectors: Selectors,
    /// The gateway.
    pub gateway: GatewaySource,
    /// What it may claim: its address ranges and namespaces (clusters-file
    /// keys, Link annotations).
    pub claims: Claims,
    /// Where it is, as configured (clusters-file `region`/`zone`, Link
    /// annotations); changing it alone restarts no watch.
    pub place: Place,
    /// Where it was declared, for messages: `Link linkerd-multicluster/east`
    /// or `clusters.yaml entry 2`.
    pub origin: String,
}
