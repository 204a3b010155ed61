//! Desired mirror objects: the Services and EndpointSlices the local cluster
//! should hold, as a pure function of the cluster state (docs/architecture.md, "Data
//! flow"; docs/linkerd.md §3 and §8).
//!
//! Owns the shape of every object we write: names (and their deterministic
//! shortening), Linkerd's labels and annotations, sharding of endpoints into
//! EndpointSlices, and which endpoints a mirror carries. The endpoint rules
//! are the ones the DNS answers use ([`crate::model::entry`]), so that
//! CoreDNS serving these objects in `cluster.local` gives the names and
//! addresses we serve in the clusterset zone.
//!
//! It must not do I/O, read the clock, or look at what exists in the API:
//! comparing with the actual objects and deciding writes (and whether a
//! delete is safe, e.g. while a cluster has not synced yet) is
//! [`super::reconcile`]'s job.
//!
//! Documented differences from Linkerd's service mirror, all forced by the
//! slim model (docs/architecture.md, "Slim objects at the edge"):
//! - remote labels and annotations are not copied (we keep neither), except
//!   `config.linkerd.io/opaque-ports`, which Linkerd copies even when it is
//!   excluded because meshed clients need it;
//! - no `mirror.linkerd.io/remote-resource-version`: we are level-based and
//!   compare whole objects, not versions;
//! - Service ports carry `name`, `protocol` and `port` but no `targetPort`
//!   (the model does not keep it). On a selector-less Service it is
//!   informational: kube-proxy and CoreDNS take the endpoint port from the
//!   EndpointSlice, matched by port name, and the API server defaults
//!   `targetPort` to `port`;
//! - EndpointSlices instead of v1 Endpoints (docs/linkerd.md §8.1 item 5).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Service as ServiceObject, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{
    Endpoint as SliceEndpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice,
    ForZone,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    CLUSTER_LABEL, Desired, FULL_NAME_ANNOTATION, Kind, MANAGED_BY, MANAGED_BY_LABEL, Object,
    ObjectRef, SLICE_MANAGED_BY,
};
use crate::model::cluster::{Cluster, ClusterSet, Seniority};
use crate::model::entry::{BuildContext, federation_eligible};
use crate::model::objects::{Endpoint, ExportMode, Mirror, ObjectKey, Port, Service};
use crate::vocab::linkerd::{
    ANNOTATION_LOCAL_DISCOVERY, ANNOTATION_OPAQUE_PORTS, ANNOTATION_REMOTE_FQ_NAME,
    ANNOTATION_REMOTE_GATEWAY_IDENTITY, LABEL_CLUSTER_NAME, LABEL_HEADLESS_PARENT, LABEL_MIRRORED,
    LABEL_REMOTE_SERVICE, LABEL_SERVICE_NAME, LABEL_SLICE_MANAGED_BY, REMOTE_DISCOVERY,
};
use crate::vocab::name::{FEDERATED, MAX_LABEL, MAX_NAME_TEXT, NEAREST, dashed_ip};
use crate::vocab::place::Place;
use crate::vocab::trust::special;

/// Most endpoints in one EndpointSlice (the Kubernetes controller's default).
pub(crate) const MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// Longest Service name: a DNS label, since it becomes one in `cluster.local`.
pub(crate) const MAX_SERVICE_NAME: usize = MAX_LABEL;
/// Longest object name that is a DNS subdomain (EndpointSlices).
pub(crate) const MAX_SUBDOMAIN_NAME: usize = MAX_NAME_TEXT;

/// Inputs of `desired` that are not cluster state.
#[derive(Debug, Clone)]
pub(crate) struct MirrorSettings {
    /// The local cluster's name (its own services are never mirrored as
    /// `<svc>-<local>`).
    pub local: Arc<str>,
    /// Cluster domain of the remote clusters, for
    /// `mirror.linkerd.io/remote-svc-fq-name` (default `cluster.local`).
    pub cluster_domain: String,
    /// `--linkerd-flat-compat`: flat-mode mirrors get no endpoints (exactly
    /// Linkerd's shape).
    pub linkerd_flat_compat: bool,
    /// Clusters whose `<svc>-<cluster>` objects Linkerd's own service mirror
    /// manages: they are skipped (their federated membership still counts).
    pub linkerd_managed: BTreeSet<Arc<str>>,
    /// The time federated eligibility is judged against (a broken watch
    /// leaves federated names after [`Self::federated_grace`]).
    pub now: Instant,
    /// How long a broken watch keeps a member in `<svc>-federated`; the same
    /// value the index uses, so DNS and mirrors agree.
    pub federated_grace: Duration,
    /// The local cluster's configured place (`--region`,
    /// `--topology-zone`): the tiers of `<svc>-nearest` and the zone of the
    /// local cluster's MCS endpoints, as the index uses it.
    pub local_place: Place,
    /// The MCS objects (`--mcs`).
    pub mcs: McsSettings,
}

/// The inputs of the MCS objects ([`mcs`]).
#[derive(Debug, Clone)]
pub(crate) struct McsSettings {
    /// `--mcs`: write derived Services, their slices and ServiceImports.
    pub enabled: bool,
    /// The ServiceImport version the local cluster serves (`v1beta1`, else
    /// `v1alpha1`; the schema is the same); `None`: it serves neither, and
    /// no ServiceImport is wanted (derived Services and slices still are).
    pub import_version: Option<Arc<str>>,
    /// The ClusterIPs the API gave each MCS service's derived Service, by
    /// MCS service (namespace, name), as read back: the ServiceImport's
    /// `ips`. An input, so that `desired` stays pure.
    pub derived_ips: Arc<BTreeMap<ObjectKey, Vec<IpAddr>>>,
}

impl Default for McsSettings {
    /// Off, ServiceImports at `v1beta1`, no IPs known.
    fn default() -> Self {
        Self {
            enabled: false,
            import_version: Some(Arc::from("v1beta1")),
            derived_ips: Arc::default(),
        }
    }
}

impl MirrorSettings {
    #[cfg(test)]
    /// Settings with the documented defaults: `cluster.local`, Linkerd flat
    /// compatibility off, no Linkerd-managed cluster, a 30 s grace, no
    /// local place.
    pub(crate) fn new(local: impl Into<Arc<str>>, now: Instant) -> Self {
        Self {
            local: local.into(),
            cluster_domain: "cluster.local".to_owned(),
            linkerd_flat_compat: false,
            linkerd_managed: BTreeSet::new(),
            now,
            federated_grace: Duration::from_secs(30),
            local_place: Place::default(),
            mcs: McsSettings::default(),
        }
    }

    /// What the model's rules read of these settings: the grace, the time
    /// and the local place (no zone: nothing here builds a DNS name; SRV
    /// tiers are a DNS matter).
    pub(crate) fn context(&self) -> BuildContext<'_> {
        BuildContext {
            zone: "",
            federated_grace: self.federated_grace,
            now: self.now,
            local: &self.local_place,
            tiers: false,
        }
    }
}

/// Something about the desired objects worth reporting (an Event and a
/// metric): a shortened name, a lost name collision, a hostname left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The object it is about (as written, i.e. with its shortened name).
    pub object: ObjectRef,
    /// What happened.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.message)
    }
}

// The whole computation at once: the oracle the incremental one is tested against.
#[cfg(test)]
/// Every object the local cluster should hold, sorted by key, and the
/// problems met computing them.
///
/// - `<svc>-<cluster>` for every exported service of every remote cluster
///   not managed by Linkerd (gateway, flat, headless shapes as in
///   docs/linkerd.md §3.1–3.3), plus `<hostname>-<cluster>` endpoint
///   mirrors for gateway-mode StatefulSets;
/// - `<svc>-federated` for every service with a federated member anywhere,
///   the local cluster included (§3.4, with EndpointSlices), and beside it
///   `<svc>-nearest`, whose slices hold the members the nearest DNS name
///   answers ([`nearest`]);
///
/// - with `--mcs`, for every MCS service with a member, `derived-<svc>`,
///   its per-cluster EndpointSlices and the ServiceImport `<svc>` ([`mcs`]).
///
/// When two objects want one name, the one DNS gives the name to keeps it
/// (docs/architecture.md, decision 7: federated first, then the older Service, then
/// the cluster name); endpoint mirrors come after every service.
pub(crate) fn desired(set: &ClusterSet, settings: &MirrorSettings) -> (Vec<Desired>, Vec<Problem>) {
    let mut units = Vec::new();
    let mut problems = Vec::new();
    federated_units(set, settings, &mut units, &mut problems);
    let mcs_keys: BTreeSet<&ObjectKey> = set
        .iter()
        .flat_map(|c| c.services.values())
        .filter(|s| s.mcs.is_some())
        .map(|s| &s.key)
        .collect();
    for key in mcs_keys {
        mcs::mcs_unit(set, key, settings, &mut units, &mut problems);
    }
    for c in set.iter() {
        if is_local(c, settings) || settings.linkerd_managed.contains(&c.name) {
            continue;
        }
        let mut keys: Vec<&ObjectKey> = c.services.keys().collect();
        keys.sort();
        for key in keys {
            if let Some(svc) = c.services.get(key) {
                cluster_units(set, c, svc, settings, &mut units, &mut problems);
            }
        }
    }
    let mut out = BTreeMap::new();
    finish(units, &mut out, &mut problems);
    (out.into_values().collect(), problems)
}

#[cfg(test)]
/// The mirror Services (namespace, name) that belong to services their
/// cluster's budget refused: `<svc>-<cluster>`, and `<svc>-federated` when
/// a refused service is a member. The reconciler leaves them (and their
/// slices) exactly as they are: nothing is written or deleted because of
/// the budget.
pub(crate) fn held_by_budget(set: &ClusterSet) -> BTreeSet<(Arc<str>, Arc<str>)> {
    let mut held = BTreeSet::new();
    for c in set.iter() {
        for svc in c.services.values().filter(|s| s.refused) {
            held.extend(refused_names(c, svc));
        }
    }
    held
}

/// Which unit keeps a contested name. Lower wins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    /// 0 federated, 1 a service's own mirror, 2 an endpoint mirror: the
    /// same order as the index's claims, endpoint mirrors (not a DNS name of
    /// ours) last.
    tier: u8,
    /// The Service's seniority (a time no cluster can forge): older wins.
    created: Seniority,
    /// Ties broken by cluster, then service, then hostname.
    cluster: Arc<str>,
    service: ObjectKey,
    host: Arc<str>,
}

/// One endpoint of a slice we write: one address (Kubernetes consumers
/// assume one per endpoint).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Ep {
    addr: IpAddr,
    hostname: Option<Arc<str>>,
    ready: bool,
    /// The zone it is in, written as `zone` and `hints.forZones` (MCS
    /// slices only, see [`mcs`]); `None`: unknown, neither is written. The
    /// known limit: the slim model keeps no per-endpoint zone, so this is
    /// the zone of the endpoint's cluster.
    zone: Option<Arc<str>>,
}

/// Endpoints grouped the way EndpointSlices must hold them: by address
/// family, then by port set (every endpoint of a slice shares its ports).
#[derive(Debug, Default)]
struct Endpoints {
    groups: BTreeMap<(bool, Vec<Port>), Vec<Ep>>,
}

impl Endpoints {
    fn add(&mut self, ports: &[Port], ep: Ep) {
        // Never written, whatever reached the model: no cluster may point
        // a local Service at the node itself or its metadata service, and
        // a real API server refuses loopback and link-local endpoints
        // (422), which would fail the whole slice. The sources drop them
        // first (docs/architecture.md, decision 13); every endpoint passes here.
        if special(ep.addr).is_some() {
            return;
        }
        let mut ports = ports.to_vec();
        // One port set in whatever order the sources listed it.
        ports.sort();
        ports.dedup();
        self.groups
            .entry((ep.addr.is_ipv6(), ports))
            .or_default()
            .push(ep);
    }
}

/// A Service and its EndpointSlices, before its name is settled.
#[derive(Debug)]
struct Unit {
    rank: Rank,
    namespace: Arc<str>,
    /// The name it should have; shortened if too long.
    full_name: String,
    cluster: Option<Arc<str>>,
    /// For an endpoint mirror, the root's full name. If the root loses its
    /// name, its children go too (the root is the tier-1 unit of the same
    /// cluster and service).
    parent: Option<String>,
    labels: Strings,
    annotations: Strings,
    ports: Vec<Port>,
    headless: bool,
    /// Labels of the slices besides the ones every slice gets.
    slice_labels: Strings,
    slice_annotations: Strings,
    endpoints: Endpoints,
    /// Objects rendered beside the Service when it keeps its name: an MCS
    /// derived Service's per-cluster slices and its ServiceImport.
    extra: Vec<Desired>,
    /// An MCS derived Service (how a collision describes it).
    mcs: bool,
    /// `<svc>-nearest` (how a collision describes it).
    nearest: bool,
    /// The Service's spec besides its ports and `clusterIP` (an MCS
    /// derived Service's families, affinity and traffic distribution).
    spec: ServiceSpec,
}

fn is_local(c: &Cluster, settings: &MirrorSettings) -> bool {
    c.local || c.name == settings.local
}

/// The same readiness rule as the DNS answers (`entry.rs`): a not-ready
/// endpoint counts when the Service publishes not-ready addresses.
fn ready(svc: &Service, ep: &Endpoint) -> bool {
    ep.ready || svc.publish_not_ready
}

/// The hostname CoreDNS and our DNS give an endpoint.
fn pod_hostname(ep: &Endpoint) -> Arc<str> {
    ep.hostname
        .clone()
        .unwrap_or_else(|| dashed_ip(ep.addr).into())
}

fn has_ready(c: &Cluster, svc: &Service) -> bool {
    c.slices_of(&svc.key)
        .any(|s| s.endpoints.iter().any(|ep| ready(svc, ep)))
}

/// Labels or annotations.
type Strings = BTreeMap<String, String>;

fn text(s: &str) -> String {
    s.to_owned()
}

fn fq_name(svc: &ObjectKey, settings: &MirrorSettings) -> String {
    format!(
        "{}.{}.svc.{}",
        svc.name, svc.namespace, settings.cluster_domain
    )
}

/// Labels of every object of one linked cluster: ours, and Linkerd's owner
/// labels (its destination controller and `check` key on them; docs/architecture.md,
/// decision 1 finds the mirror by them).
fn cluster_labels(cluster: &str) -> Strings {
    let mut m = Strings::new();
    m.insert(CLUSTER_LABEL.to_owned(), text(cluster));
    m.insert(LABEL_MIRRORED.to_owned(), text("true"));
    m.insert(LABEL_CLUSTER_NAME.to_owned(), text(cluster));
    m
}

/// The Service-level annotations of `<svc>-<cluster>`.
fn mirror_annotations(svc: &Service, settings: &MirrorSettings) -> Strings {
    let mut m = Strings::new();
    m.insert(
        ANNOTATION_REMOTE_FQ_NAME.to_owned(),
        text(&fq_name(&svc.key, settings)),
    );
    if let Some(opaque) = &svc.opaque_ports {
        m.insert(ANNOTATION_OPAQUE_PORTS.to_owned(), text(opaque));
    }
    m
}

/// Annotations of a gateway-mode slice: what the gateway dials and its
/// identity, read by Linkerd's destination from the slices.
fn gateway_slice_annotations(c: &Cluster, fq: &str) -> Strings {
    let mut m = Strings::new();
    m.insert(ANNOTATION_REMOTE_FQ_NAME.to_owned(), text(fq));
    if let Some(id) = c.gateway.as_ref().and_then(|g| g.identity.as_deref()) {
        m.insert(ANNOTATION_REMOTE_GATEWAY_IDENTITY.to_owned(), text(id));
    }
    m
}

/// The cluster's gateway endpoints for a Service with `ports`: every
/// gateway address, every Service port mapped to the gateway port (names
/// kept), not ready while the gateway probe fails (docs/architecture.md, decision 5).
/// Nothing when the cluster has no usable gateway.
fn add_gateway_endpoints(c: &Cluster, ports: &[Port], eps: &mut Endpoints) {
    let Some(gw) = &c.gateway else { return };
    let Some(gw_port) = gw.port else { return };
    let ports: Vec<Port> = ports
        .iter()
        .map(|p| Port {
            port: gw_port,
            ..p.clone()
        })
        .collect();
    let ready = c.health.gateway_alive != Some(false);
    for addr in &gw.addresses {
        eps.add(
            &ports,
            Ep {
                addr: *addr,
                hostname: None,
                ready,
                zone: None,
            },
        );
    }
}

fn cluster_rank(c: &Cluster, svc: &Service, tier: u8, host: &str) -> Rank {
    Rank {
        tier,
        created: c.seniority(svc.created),
        cluster: c.name.clone(),
        service: svc.key.clone(),
        host: host.into(),
    }
}

/// The units of one exported service of a remote cluster.
fn cluster_units(
    set: &ClusterSet,
    c: &Cluster,
    svc: &Service,
    settings: &MirrorSettings,
    units: &mut Vec<Unit>,
    problems: &mut Vec<Problem>,
) {
    let Some(mode) = svc.export else { return };
    let full_name = format!("{}-{}", svc.key.name, c.name);
    let mut unit = Unit {
        rank: cluster_rank(c, svc, 1, ""),
        namespace: svc.key.namespace.clone(),
        full_name,
        cluster: Some(c.name.clone()),
        parent: None,
        labels: cluster_labels(&c.name),
        annotations: mirror_annotations(svc, settings),
        ports: svc.ports.clone(),
        headless: svc.headless,
        slice_labels: cluster_labels(&c.name),
        slice_annotations: Strings::new(),
        endpoints: Endpoints::default(),
        extra: Vec::new(),
        mcs: false,
        nearest: false,
        spec: ServiceSpec::default(),
    };
    match mode {
        ExportMode::Flat => {
            unit.labels
                .insert(REMOTE_DISCOVERY.to_owned(), text(&c.name));
            unit.labels
                .insert(LABEL_REMOTE_SERVICE.to_owned(), text(&svc.key.name));
            // Linkerd's destination resolves flat mirrors itself (remote
            // discovery); the pod IPs are for everyone else (kube-proxy,
            // Ingress, CoreDNS), unless asked for Linkerd's exact shape.
            if !settings.linkerd_flat_compat {
                add_pod_endpoints(c, svc, &mut unit.endpoints);
            }
            units.push(unit);
        }
        ExportMode::Gateway => {
            let named = c
                .slices_of(&svc.key)
                .flat_map(|s| s.endpoints.iter())
                .any(|ep| ep.hostname.is_some());
            let any = c.slices_of(&svc.key).any(|s| !s.endpoints.is_empty());
            // Linkerd's shouldExportAsHeadlessService: a headless service
            // with pod hostnames (a StatefulSet) keeps per-pod names through
            // endpoint mirrors; one without (a headless Deployment) gets a
            // ClusterIP mirror. With no endpoints at all we keep it
            // headless, so a StatefulSet scaled to zero does not flip the
            // (immutable) clusterIP.
            if svc.headless && (named || !any) {
                gateway_headless_units(set, c, svc, settings, unit, units, problems);
                return;
            }
            unit.headless = false;
            unit.slice_annotations = gateway_slice_annotations(c, &fq_name(&svc.key, settings));
            // Linkerd's isEmptyService: no ready remote endpoint, no
            // endpoints here either, so failover can tell.
            if has_ready(c, svc) {
                add_gateway_endpoints(c, &svc.ports, &mut unit.endpoints);
            }
            units.push(unit);
        }
    }
}

/// The ready pods of a flat-mode service, by address. Headless: each with
/// the pod's own hostname, else the dashed IP our DNS serves (docs/architecture.md,
/// decision 3), written out: CoreDNS dashes a bare address its own way
/// (`fd00:5::` → `fd00-5--`, ours `fd00-5--0`).
fn add_pod_endpoints(c: &Cluster, svc: &Service, eps: &mut Endpoints) {
    for slice in c.slices_of(&svc.key) {
        for ep in slice.endpoints.iter().filter(|ep| ready(svc, ep)) {
            let hostname = svc.headless.then(|| pod_hostname(ep));
            eps.add(
                &slice.ports,
                Ep {
                    addr: ep.addr,
                    hostname,
                    ready: true,
                    zone: None,
                },
            );
        }
    }
}

/// A gateway-mode StatefulSet: Linkerd's root headless mirror plus one
/// ClusterIP endpoint mirror `<hostname>-<cluster>` per pod hostname
/// (docs/linkerd.md §3.3).
///
/// The root's endpoints are the endpoint mirrors' ClusterIPs, which exist
/// only once the API has allocated them: they are read back from the local
/// mirrors in the model (the same ones the DNS answers use), and a pod
/// whose endpoint mirror has no ClusterIP yet is left out of the root's
/// slices until it has one. The next computation after the mirror Service
/// is seen adds it.
fn gateway_headless_units(
    set: &ClusterSet,
    c: &Cluster,
    svc: &Service,
    settings: &MirrorSettings,
    mut root: Unit,
    units: &mut Vec<Unit>,
    problems: &mut Vec<Problem>,
) {
    let root_name = fit_name(&root.full_name, MAX_SERVICE_NAME);
    let fq = fq_name(&svc.key, settings);
    root.slice_annotations = gateway_slice_annotations(c, &fq);
    for (host, host_ready) in pod_hosts(c, svc) {
        let parent = Parent {
            full_name: &root.full_name,
            name: &root_name,
            fq: &fq,
        };
        let Some(unit) = endpoint_mirror_unit(c, svc, &host, host_ready, &parent, problems) else {
            continue;
        };
        let name = fit_name(&unit.full_name, MAX_SERVICE_NAME);
        units.push(unit);
        if !host_ready {
            continue;
        }
        let Some(mirror) = local_endpoint_mirror(set, &svc.key.namespace, &name, &root_name, c)
        else {
            continue;
        };
        // Always ready: per-cluster names are never health-filtered
        // (docs/architecture.md, decision 5); the endpoint mirror's own slice carries
        // the gateway's liveness. Ports are the endpoint mirror's Service
        // ports, since that is what its ClusterIP listens on (decision 10;
        // Linkerd copies the remote target ports here instead).
        for ip in &mirror.cluster_ips {
            root.endpoints.add(
                &mirror.ports,
                Ep {
                    addr: *ip,
                    hostname: Some(host.clone()),
                    ready: true,
                    zone: None,
                },
            );
        }
    }
    units.push(root);
}

/// Every pod hostname of `svc` in `c`, and whether any of its endpoints is
/// ready. Ready or not, each gets an endpoint mirror: a pod that restarts
/// keeps its mirror and so its ClusterIP.
fn pod_hosts(c: &Cluster, svc: &Service) -> BTreeMap<Arc<str>, bool> {
    let mut hosts: BTreeMap<Arc<str>, bool> = BTreeMap::new();
    for ep in c.slices_of(&svc.key).flat_map(|s| s.endpoints.iter()) {
        if let Some(host) = &ep.hostname {
            *hosts.entry(host.clone()).or_default() |= ready(svc, ep);
        }
    }
    hosts
}

/// The root headless mirror an endpoint mirror belongs to.
struct Parent<'a> {
    /// Its full (unshortened) name.
    full_name: &'a str,
    /// Its name as written.
    name: &'a str,
    /// The remote service's fully qualified name.
    fq: &'a str,
}

/// The endpoint mirror `<host>-<cluster>` of one pod, or `None` (with a
/// problem) when its name cannot be a Service name.
fn endpoint_mirror_unit(
    c: &Cluster,
    svc: &Service,
    host: &Arc<str>,
    host_ready: bool,
    parent: &Parent<'_>,
    problems: &mut Vec<Problem>,
) -> Option<Unit> {
    let full_name = format!("{host}-{}", c.name);
    let name = fit_name(&full_name, MAX_SERVICE_NAME);
    if !name.starts_with(|ch: char| ch.is_ascii_lowercase()) {
        // Service names are RFC 1035 labels: a hostname starting with a
        // digit cannot make one.
        problems.push(Problem {
            object: service_ref(&svc.key.namespace, &name),
            message: format!(
                "no endpoint mirror for pod {host} of {}/{} in {}: {name:?} does not start with a letter, as a Service name must",
                svc.key.namespace, svc.key.name, c.name
            ),
        });
        return None;
    }
    let host_fq = format!("{host}.{}", parent.fq);
    let mut labels = cluster_labels(&c.name);
    labels.insert(LABEL_HEADLESS_PARENT.to_owned(), text(parent.name));
    let slice_labels = labels.clone();
    // Only these two on endpoint mirrors, as Linkerd writes them.
    let mut annotations = Strings::new();
    annotations.insert(ANNOTATION_REMOTE_FQ_NAME.to_owned(), text(&host_fq));
    let mut endpoints = Endpoints::default();
    // The per-pod form of isEmptyService: no ready pod, no endpoints.
    if host_ready {
        add_gateway_endpoints(c, &svc.ports, &mut endpoints);
    }
    Some(Unit {
        rank: cluster_rank(c, svc, 2, host),
        namespace: svc.key.namespace.clone(),
        full_name,
        cluster: Some(c.name.clone()),
        parent: Some(parent.full_name.to_owned()),
        labels,
        annotations,
        ports: svc.ports.clone(),
        headless: false,
        slice_labels,
        slice_annotations: gateway_slice_annotations(c, &host_fq),
        endpoints,
        extra: Vec::new(),
        mcs: false,
        nearest: false,
        spec: ServiceSpec::default(),
    })
}

/// The local endpoint mirror `name` of root `parent` for cluster `c`, once
/// the API has given it a ClusterIP. Looked up by the names we write (which
/// are `ClusterSet::endpoint_mirror`'s unless shortened).
fn local_endpoint_mirror<'s>(
    set: &'s ClusterSet,
    namespace: &str,
    name: &str,
    parent: &str,
    c: &Cluster,
) -> Option<&'s Mirror> {
    let key = ObjectKey::new(namespace, name);
    set.iter()
        .filter(|l| l.local)
        .find_map(|l| l.mirrors.get(&key))
        .filter(|m| {
            m.cluster == c.name
                && m.headless_parent.as_deref() == Some(parent)
                && !m.cluster_ips.is_empty()
        })
}

/// One federated service's members: (cluster, its Service), in
/// cluster-name order.
type Members<'s> = Vec<(&'s Cluster, &'s Service)>;

#[cfg(test)]
/// `<svc>-federated` and `<svc>-nearest` for every service with a
/// federated member.
fn federated_units(
    set: &ClusterSet,
    settings: &MirrorSettings,
    units: &mut Vec<Unit>,
    problems: &mut Vec<Problem>,
) {
    let keys: BTreeSet<&ObjectKey> = set
        .iter()
        .flat_map(|c| c.services.values())
        .filter(|s| s.federated)
        .map(|s| &s.key)
        .collect();
    for key in keys {
        federated_unit(set, key, settings, units, problems);
    }
}

/// `<svc>-federated` and `<svc>-nearest` of service `key`, if it has a
/// federated member.
fn federated_unit(
    set: &ClusterSet,
    key: &ObjectKey,
    settings: &MirrorSettings,
    units: &mut Vec<Unit>,
    problems: &mut Vec<Problem>,
) {
    // In cluster-name order (the set is ordered).
    let members: Members<'_> = set
        .iter()
        .filter_map(|c| Some((c, c.services.get(key).filter(|s| s.federated)?)))
        .collect();
    // Source of truth for ports and opaque-ports: the local member, else
    // the senior one, which is the oldest Link's as in Linkerd (a remote
    // creationTimestamp alone would let a cluster claim it with 1970).
    let Some((_, truth)) = members
        .iter()
        .min_by_key(|(c, s)| (!is_local(c, settings), c.seniority(s.created)))
    else {
        return;
    };
    let full_name = format!("{}-{FEDERATED}", key.name);
    let name = fit_name(&full_name, MAX_SERVICE_NAME);
    let mut labels = Strings::new();
    labels.insert(LABEL_MIRRORED.to_owned(), text("true"));
    let slice_labels = labels.clone();
    let used = union_members(&members, &settings.context());
    let object = service_ref(&key.namespace, &name);
    units.push(Unit {
        rank: union_rank(key, ""),
        namespace: key.namespace.clone(),
        full_name,
        cluster: None,
        parent: None,
        labels,
        annotations: federated_annotations(key, &members, truth, settings),
        ports: truth.ports.clone(),
        // The shape follows every member, not only the healthy ones, so
        // a probe flap does not flip the (immutable) clusterIP.
        headless: members.iter().all(|(_, s)| s.headless),
        slice_labels,
        slice_annotations: Strings::new(),
        endpoints: member_endpoints(key, &object, &used, problems),
        extra: Vec::new(),
        mcs: false,
        nearest: false,
        spec: ServiceSpec::default(),
    });
    nearest::nearest_unit(set, key, &members, truth, settings, units, problems);
}

/// The rank of a union name of service `key` (`<svc>-federated`, `host`
/// empty; `<svc>-nearest`, `host` [`NEAREST`]): before every per-cluster
/// name, as in the index's claims.
fn union_rank(key: &ObjectKey, host: &str) -> Rank {
    Rank {
        tier: 0,
        created: Seniority::FIRST,
        cluster: Arc::from(""),
        service: key.clone(),
        host: Arc::from(host),
    }
}

/// Every unit of service `key`: its `<svc>-federated` and `<svc>-nearest`, and its
/// `<svc>-<cluster>` (with endpoint mirrors) in every remote cluster not
/// managed by Linkerd. What `desired` computes, for one service.
fn key_units(
    set: &ClusterSet,
    key: &ObjectKey,
    settings: &MirrorSettings,
    units: &mut Vec<Unit>,
    problems: &mut Vec<Problem>,
) {
    federated_unit(set, key, settings, units, problems);
    mcs::mcs_unit(set, key, settings, units, problems);
    for c in set.iter() {
        if is_local(c, settings) || settings.linkerd_managed.contains(&c.name) {
            continue;
        }
        if let Some(svc) = c.services.get(key) {
            cluster_units(set, c, svc, settings, units, problems);
        }
    }
}

/// The mirror Services of service `key` that its clusters' budgets
/// refused (see `held_by_budget`).
fn key_held(set: &ClusterSet, key: &ObjectKey) -> Vec<(Arc<str>, Arc<str>)> {
    let mut held = Vec::new();
    for c in set.iter() {
        if let Some(svc) = c.services.get(key).filter(|s| s.refused) {
            held.extend(refused_names(c, svc));
        }
    }
    held
}

/// `<svc>-<cluster>`, `<svc>-federated`, `<svc>-nearest` and
/// `derived-<svc>` of a refused service.
fn refused_names(c: &Cluster, svc: &Service) -> Vec<(Arc<str>, Arc<str>)> {
    let mut held = Vec::new();
    let ns = svc.key.namespace.clone();
    if svc.mcs.is_some() {
        held.push((ns.clone(), Arc::from(mcs::derived_name(&svc.key.name))));
    }
    if svc.export.is_some() {
        let name = fit_name(&format!("{}-{}", svc.key.name, c.name), MAX_SERVICE_NAME);
        held.push((ns.clone(), Arc::from(name)));
    }
    if svc.federated {
        for suffix in [FEDERATED, NEAREST] {
            let name = fit_name(&format!("{}-{suffix}", svc.key.name), MAX_SERVICE_NAME);
            held.push((ns.clone(), Arc::from(name)));
        }
    }
    held
}

/// Who the members are (Linkerd's remote- and local-discovery) and the
/// opaque ports of the source of truth.
fn federated_annotations(
    key: &ObjectKey,
    members: &Members<'_>,
    truth: &Service,
    settings: &MirrorSettings,
) -> Strings {
    let mut annotations = Strings::new();
    let remote: Vec<String> = members
        .iter()
        .filter(|(c, _)| !is_local(c, settings))
        .map(|(c, _)| format!("{}@{}", key.name, c.name))
        .collect();
    if !remote.is_empty() {
        annotations.insert(REMOTE_DISCOVERY.to_owned(), text(&remote.join(",")));
    }
    if members.iter().any(|(c, _)| is_local(c, settings)) {
        annotations.insert(ANNOTATION_LOCAL_DISCOVERY.to_owned(), text(&key.name));
    }
    if let Some(opaque) = &truth.opaque_ports {
        annotations.insert(ANNOTATION_OPAQUE_PORTS.to_owned(), text(opaque));
    }
    annotations
}

/// The members the federated DNS answer uses: the eligible ones, or all of
/// them when none is (fail open), exactly as `build_federated_entry`.
fn union_members<'m, 's>(
    members: &'m Members<'s>,
    cx: &BuildContext<'_>,
) -> Vec<&'m (&'s Cluster, &'s Service)> {
    let eligible: Vec<&(&Cluster, &Service)> = members
        .iter()
        .filter(|(c, _)| federation_eligible(&c.health, cx))
        .collect();
    if eligible.is_empty() {
        members.iter().collect()
    } else {
        eligible
    }
}

/// The ready pods of the members `used`, for the slices of the union
/// Service `object`: headless members' pods named `<hostname>-<cluster>`.
fn member_endpoints(
    key: &ObjectKey,
    object: &ObjectRef,
    used: &[&(&Cluster, &Service)],
    problems: &mut Vec<Problem>,
) -> Endpoints {
    let mut endpoints = Endpoints::default();
    for (c, svc) in used {
        for slice in c.slices_of(key) {
            for ep in slice.endpoints.iter().filter(|ep| ready(svc, ep)) {
                let hostname = if svc.headless {
                    federated_hostname(ep, c, object, problems)
                } else {
                    None
                };
                endpoints.add(
                    &slice.ports,
                    Ep {
                        addr: ep.addr,
                        hostname,
                        ready: true,
                        zone: None,
                    },
                );
            }
        }
    }
    endpoints
}

/// A headless member's pod is named `<hostname>-<cluster>` in the union
/// Service `object`, the alias our DNS serves next to the canonical
/// `<hostname>.<cluster>` (docs/architecture.md, decision 4); `None` (with a
/// problem on `object`) if that is too long for a label.
fn federated_hostname(
    ep: &Endpoint,
    c: &Cluster,
    object: &ObjectRef,
    problems: &mut Vec<Problem>,
) -> Option<Arc<str>> {
    let alias = format!("{}-{}", pod_hostname(ep), c.name);
    if alias.len() > MAX_LABEL {
        problems.push(Problem {
            object: object.clone(),
            message: format!(
                "pod {} of {} has no hostname in the slices of {}: {alias:?} is longer than {MAX_LABEL} characters",
                ep.addr, c.name, object.name
            ),
        });
        return None;
    }
    Some(Arc::from(alias))
}

fn service_ref(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        kind: Kind::Service,
        namespace: namespace.into(),
        name: name.into(),
    }
}

#[cfg(test)]
/// Settles names (shortening, collisions) and renders the objects.
fn finish(
    mut units: Vec<Unit>,
    out: &mut BTreeMap<ObjectRef, Desired>,
    problems: &mut Vec<Problem>,
) {
    units.sort_by(|a, b| a.rank.cmp(&b.rank));
    // Who holds each Service name, and which roots (by cluster and
    // service: an endpoint mirror's root is the unit of its own service in
    // its own cluster) lost theirs.
    let mut holders: BTreeMap<ObjectRef, String> = BTreeMap::new();
    let mut lost: BTreeSet<(Arc<str>, ObjectKey)> = BTreeSet::new();
    for unit in units {
        let name = fit_name(&unit.full_name, MAX_SERVICE_NAME);
        let key = service_ref(&unit.namespace, &name);
        if unit.parent.is_some()
            && lost.contains(&(unit.rank.cluster.clone(), unit.rank.service.clone()))
        {
            continue;
        }
        if let Some(holder) = holders.get(&key) {
            problems.push(Problem {
                object: key.clone(),
                message: format!(
                    "name collision: {} wants this name, which {holder} keeps (federated names first, then the older service)",
                    describe(&unit)
                ),
            });
            if unit.rank.tier == 1 {
                lost.insert((unit.rank.cluster.clone(), unit.rank.service.clone()));
            }
            continue;
        }
        let shortened = name != unit.full_name;
        if shortened {
            problems.push(Problem {
                object: key.clone(),
                message: format!(
                    "name {:?} is longer than {MAX_SERVICE_NAME} characters; shortened (full name in annotation {FULL_NAME_ANNOTATION})",
                    unit.full_name
                ),
            });
        }
        holders.insert(key.clone(), describe(&unit));
        render(unit, key, shortened, out);
    }
}

fn describe(unit: &Unit) -> String {
    if unit.mcs {
        return format!("{} (MCS {})", unit.full_name, unit.rank.service);
    }
    if unit.nearest {
        return format!("{} (nearest {})", unit.full_name, unit.rank.service);
    }
    match &unit.cluster {
        Some(c) => format!(
            "{} of service {} in cluster {c}",
            unit.full_name, unit.rank.service
        ),
        None => format!("{} (federated {})", unit.full_name, unit.rank.service),
    }
}

/// A Service port as we write it: name, protocol, number (no
/// `targetPort`: see the module doc).
fn service_port(p: &Port) -> ServicePort {
    ServicePort {
        name: p.name.as_deref().map(text),
        protocol: Some(text(p.protocol.k8s())),
        port: i32::from(p.port),
        ..ServicePort::default()
    }
}

/// An EndpointSlice port: name, protocol, number.
fn slice_port(p: &Port) -> EndpointPort {
    EndpointPort {
        name: p.name.as_deref().map(text),
        protocol: Some(text(p.protocol.k8s())),
        port: Some(i32::from(p.port)),
        ..EndpointPort::default()
    }
}

/// `metadata` of an object we write: annotations left out when there are
/// none.
fn metadata(name: &str, namespace: &str, labels: Strings, annotations: Strings) -> ObjectMeta {
    ObjectMeta {
        name: Some(text(name)),
        namespace: Some(text(namespace)),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..ObjectMeta::default()
    }
}

/// Renders a unit whose name is settled: the Service, then its slices.
fn render(unit: Unit, key: ObjectRef, shortened: bool, out: &mut BTreeMap<ObjectRef, Desired>) {
    let Unit {
        namespace,
        full_name,
        cluster,
        mut labels,
        mut annotations,
        ports,
        headless,
        mut slice_labels,
        slice_annotations,
        endpoints,
        extra,
        spec,
        ..
    } = unit;
    let name = key.name.clone();

    labels.insert(MANAGED_BY_LABEL.to_owned(), text(MANAGED_BY));
    if shortened {
        annotations.insert(FULL_NAME_ANNOTATION.to_owned(), text(&full_name));
    }
    // No selector, type or clusterIP: a selector-less ClusterIP Service
    // whose IP the API allocates, as Linkerd writes it.
    let spec = ServiceSpec {
        ports: Some(ports.iter().map(service_port).collect()),
        cluster_ip: headless.then(|| text("None")),
        ..spec
    };
    out.insert(
        key,
        Desired {
            key: service_ref(&namespace, &name),
            object: Object::Service(Box::new(ServiceObject {
                metadata: metadata(&name, &namespace, labels, annotations),
                spec: Some(spec),
                status: None,
            })),
            cluster: cluster.clone(),
        },
    );

    slice_labels.insert(MANAGED_BY_LABEL.to_owned(), text(MANAGED_BY));
    slice_labels.insert(LABEL_SERVICE_NAME.to_owned(), text(&name));
    slice_labels.insert(LABEL_SLICE_MANAGED_BY.to_owned(), text(SLICE_MANAGED_BY));
    let slices = Slices {
        service: &name,
        namespace: &namespace,
        cluster: &cluster,
        labels: &slice_labels,
        annotations: &slice_annotations,
    };
    render_slices(&slices, endpoints, out);
    for d in extra {
        out.insert(d.key.clone(), d);
    }
}

/// What every EndpointSlice of one Service shares.
struct Slices<'a> {
    service: &'a str,
    namespace: &'a Arc<str>,
    cluster: &'a Option<Arc<str>>,
    labels: &'a Strings,
    annotations: &'a Strings,
}

/// The EndpointSlices of one Service: one family and port set each, at
/// most [`MAX_ENDPOINTS_PER_SLICE`] endpoints.
fn render_slices(s: &Slices<'_>, endpoints: Endpoints, out: &mut BTreeMap<ObjectRef, Desired>) {
    // Numbered per family across port sets: `<service>-v4-0`, `-v4-1`, …
    // The fixed suffix keeps slice names of different Services apart, and
    // a Service name of at most 63 keeps them far below 253.
    let mut next = [0usize; 2];
    for ((v6, ports), mut eps) in endpoints.groups {
        // Sorted, so the same endpoints always make the same slices.
        eps.sort();
        eps.dedup_by(|a, b| a.addr == b.addr);
        let (family, address_type) = if v6 { ("v6", "IPv6") } else { ("v4", "IPv4") };
        for chunk in eps.chunks(MAX_ENDPOINTS_PER_SLICE) {
            let n = &mut next[usize::from(v6)];
            let slice_name = fit_name(&format!("{}-{family}-{n}", s.service), MAX_SUBDOMAIN_NAME);
            *n += 1;
            let endpoints: Vec<SliceEndpoint> = chunk.iter().map(slice_endpoint).collect();
            let key = ObjectRef {
                kind: Kind::EndpointSlice,
                namespace: s.namespace.clone(),
                name: slice_name.as_str().into(),
            };
            out.insert(
                key.clone(),
                Desired {
                    key,
                    object: Object::EndpointSlice(EndpointSlice {
                        metadata: metadata(
                            &slice_name,
                            s.namespace,
                            s.labels.clone(),
                            s.annotations.clone(),
                        ),
                        address_type: text(address_type),
                        endpoints,
                        ports: Some(ports.iter().map(slice_port).collect()),
                    }),
                    cluster: s.cluster.clone(),
                },
            );
        }
    }
}

/// One endpoint: its one address, readiness, hostname if any, and where
/// its zone is known, the zone and a hint for that zone (the shape the
/// EndpointSlice controller writes for topology-aware routing; kube-proxy
/// acts on hints only for a Service that asks for it, and only when every
/// ready endpoint has one).
fn slice_endpoint(ep: &Ep) -> SliceEndpoint {
    SliceEndpoint {
        addresses: vec![ep.addr.to_string()],
        conditions: Some(EndpointConditions {
            ready: Some(ep.ready),
            ..EndpointConditions::default()
        }),
        hostname: ep.hostname.as_deref().map(text),
        zone: ep.zone.as_deref().map(text),
        hints: ep.zone.as_deref().map(|zone| EndpointHints {
            for_zones: Some(vec![ForZone { name: text(zone) }]),
            for_nodes: None,
        }),
        ..SliceEndpoint::default()
    }
}

/// `full` if it fits in `max` characters, else a readable prefix, `-` and
/// 8 hex digits of its FNV-1a hash: deterministic across runs and releases,
/// and distinct for distinct long names short of a hash collision.
pub(crate) fn fit_name(full: &str, max: usize) -> String {
    if full.len() <= max {
        return full.to_owned();
    }
    let hash = format!("{:08x}", fnv1a32(full.as_bytes()));
    let mut end = max.saturating_sub(hash.len() + 1);
    while !full.is_char_boundary(end) {
        end -= 1;
    }
    // No `--` or `.-` before the hash: names stay labels/subdomains.
    let prefix = full[..end].trim_end_matches(['-', '.']);
    format!("{prefix}-{hash}")
}

/// 32-bit FNV-1a. `DefaultHasher` is not stable across Rust releases, and a
/// name that changed with the compiler would delete and recreate objects.
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

mod incremental;
pub(crate) use incremental::DesiredState;

pub(crate) mod mcs;
mod nearest;

#[cfg(test)]
mod tests;
