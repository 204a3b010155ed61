//! The MCS objects of one multi-cluster service (`--mcs`, KEP-1645,
//! `docs/mcs.md` §1): what makes the clusterset service usable by
//! kube-proxy and by stock CoreDNS's `multicluster` option in the local
//! cluster.
//!
//! - `derived-<svc>`: a selector-less Service we own whose ClusterIP kube
//!   allocates (the clusterset IP; `clusterIP: None` for a Headless
//!   import), ports the members' union;
//! - its EndpointSlices, one set per member cluster, labelled with the MCS
//!   service name and the member's cluster id, so kube-proxy routes the
//!   derived Service and CoreDNS names pods `<hostname>.<clusterid>`; each
//!   endpoint with the zone of its cluster (`model::locality::place_of`:
//!   `--topology-zone` for the local one) and `hints.forZones` for it,
//!   where that zone is known. The known limit: the slim model's
//!   `Endpoint` keeps no zone of its own, so a cluster spread over several
//!   zones gives all its endpoints its one configured zone;
//! - the `ServiceImport` `<svc>`: type, union ports, and as `ips` the
//!   derived Service's ClusterIPs as read back from the API (an input:
//!   [`super::McsSettings::derived_ips`]), none until known.
//!
//! Who is a member, the import's type and ports, and eligibility are the DNS
//! side's rules ([`crate::model::entry::mcs`]): the same members, the
//! oldest export's type, the union of ports with the oldest export's number
//! winning, a member whose id another cluster holds left out. A member the
//! federated rules make ineligible (a failing gateway probe, a watch broken
//! past the grace) keeps its slices with its endpoints not ready, unless
//! every member is (then all are ready: fail open, as DNS answers): its
//! objects are never deleted because it is unreachable. Pure.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    ClientIPConfig, Service as ServiceObject, ServiceSpec, SessionAffinityConfig,
};

use super::{
    Desired, Endpoints, Ep, MAX_SERVICE_NAME, MirrorSettings, Problem, Rank, Slices, Strings, Unit,
    fit_name, metadata, pod_hostname, ready, render_slices, service_ref, text,
};
use crate::k8s::crd::{
    ClientIpConfig, ImportPort, ServiceImport, ServiceImportSpec,
    SessionAffinityConfig as ImportAffinityConfig,
};
use crate::mirror::{
    CLUSTER_LABEL, DERIVED_PREFIX, Kind, MANAGED_BY, MANAGED_BY_LABEL, Object, ObjectRef,
    SLICE_MANAGED_BY,
};
use crate::model::cluster::ClusterSet;
use crate::model::entry::federation_eligible;
use crate::model::entry::mcs::{Member, members, union_ports};
use crate::model::locality::place_of;
use crate::model::objects::{
    Affinity, Families, Family, ObjectKey, Port, Service, TrafficDistribution,
};
use crate::vocab::linkerd::{LABEL_SERVICE_NAME, LABEL_SLICE_MANAGED_BY};
use crate::vocab::mcs::{ANNOTATION_DEFINED_BY, MCS_SERVICE_NAME_LABEL, MCS_SOURCE_CLUSTER_LABEL};
use crate::vocab::trust::special;

/// The name of MCS service `svc`'s derived Service, as written.
pub(crate) fn derived_name(svc: &str) -> String {
    fit_name(&format!("{DERIVED_PREFIX}{svc}"), MAX_SERVICE_NAME)
}

/// The ClusterIPs of our derived Services among `services` (objects of
/// ours as the API holds them), by the MCS service their
/// [`MCS_SERVICE_NAME_LABEL`] names: the ServiceImports' `ips`
/// ([`super::McsSettings::derived_ips`]). A Service not named
/// `derived-<that service>`, or without an allocated IP yet, gives none.
pub(crate) fn derived_ips<'v>(
    services: impl IntoIterator<Item = (&'v ObjectRef, &'v ServiceObject)>,
) -> BTreeMap<ObjectKey, Vec<IpAddr>> {
    let mut out = BTreeMap::new();
    for (key, v) in services {
        let labels = v.metadata.labels.as_ref();
        let Some(svc) = labels.and_then(|l| l.get(MCS_SERVICE_NAME_LABEL)) else {
            continue;
        };
        if key.kind != Kind::Service || *key.name != derived_name(svc) {
            continue;
        }
        let spec = v.spec.as_ref();
        // `clusterIPs` when the API gave it, even empty; else `clusterIP`.
        let listed = spec.and_then(|s| s.cluster_ips.as_deref());
        let one = spec.and_then(|s| s.cluster_ip.as_ref().map(std::slice::from_ref));
        let ips: Vec<IpAddr> = listed
            .or(one)
            .unwrap_or_default()
            .iter()
            .filter_map(|ip| ip.parse().ok())
            .collect();
        if !ips.is_empty() {
            out.insert(ObjectKey::new(&key.namespace, svc), ips);
        }
    }
    out
}

/// The derived Service of MCS service `key` (with its slices and the
/// ServiceImport to be rendered beside it), if `--mcs` is on and `key` has
/// a member.
pub(super) fn mcs_unit(
    set: &ClusterSet,
    key: &ObjectKey,
    settings: &MirrorSettings,
    units: &mut Vec<Unit>,
    problems: &mut Vec<Problem>,
) {
    if !settings.mcs.enabled {
        return;
    }
    let all = members(set, key);
    let Some(&first) = all.first() else {
        return;
    };
    let oldest = first.service;
    let seniority = first.cluster.seniority(oldest.created);
    let headless = oldest.headless;
    // Members of the other type are left out, as the DNS name leaves them
    // (the Conflict condition reports them).
    let members: Vec<Member<'_>> = all
        .into_iter()
        .filter(|m| m.service.headless == headless)
        .collect();
    let ports = union_ports(&members);
    let full_name = format!("{DERIVED_PREFIX}{}", key.name);
    let name = fit_name(&full_name, MAX_SERVICE_NAME);
    if ports.is_empty() && !headless {
        // The API refuses a ClusterIP Service without ports.
        problems.push(Problem {
            object: service_ref(&key.namespace, &name),
            message: format!("no derived Service for MCS service {key}: its members have no ports"),
        });
        return;
    }
    let mut extra = member_slices(key, &name, &members, settings, headless);
    let families = families(&members);
    if let Some(version) = &settings.mcs.import_version {
        let import = Definition {
            key,
            definer: first,
            ports: &ports,
            families,
            version,
        };
        extra.push(service_import(&import, settings));
    }
    let mut labels = Strings::new();
    labels.insert(MCS_SERVICE_NAME_LABEL.to_owned(), text(&key.name));
    units.push(Unit {
        rank: Rank {
            // Against a Linkerd-form mirror of the same name, the older
            // Service keeps it (docs/architecture.md, decision 7).
            tier: 1,
            created: seniority,
            cluster: Arc::from(""),
            service: key.clone(),
            host: Arc::from(""),
        },
        namespace: key.namespace.clone(),
        full_name,
        cluster: None,
        parent: None,
        labels,
        annotations: Strings::new(),
        ports,
        headless,
        slice_labels: Strings::new(),
        slice_annotations: Strings::new(),
        endpoints: Endpoints::default(),
        extra,
        mcs: true,
        nearest: false,
        spec: derived_spec(oldest, families),
    });
}

/// The IP families of the members' Services, the definer's order first;
/// empty when no member's Service lists any.
fn families(members: &[Member<'_>]) -> Families {
    Families::new(
        members
            .iter()
            .flat_map(|m| m.service.import_fields.families.iter()),
    )
}

/// The derived Service's fields beyond its ports and headlessness:
/// - one ClusterIP per family the members have (`PreferDualStack` for
///   two, so a single-stack cluster still gets one; `SingleStack` of that
///   family for one; the cluster's default when no member says);
/// - the definer's session affinity, and its traffic distribution as
///   `PreferClose`, which kube-proxy applies to the clusterset IP (the
///   member slices carry the zone hints `PreferClose` reads).
///
/// Not `internalTrafficPolicy`: `Local` keeps only endpoints on the
/// client's node, and imported endpoints have none; the ServiceImport
/// carries it.
fn derived_spec(definer: &Service, families: Families) -> ServiceSpec {
    let fields = &definer.import_fields;
    let (policy, listed) = match (families.is_empty(), families.is_dual()) {
        (true, _) => (None, None),
        (false, true) => (Some("PreferDualStack"), None),
        (false, false) => (
            Some("SingleStack"),
            Some(families.iter().map(|f| text(f.k8s())).collect()),
        ),
    };
    let (affinity, timeout) = affinity(fields.affinity);
    ServiceSpec {
        ip_family_policy: policy.map(text),
        ip_families: listed,
        session_affinity: affinity.map(text),
        session_affinity_config: timeout.map(|t| SessionAffinityConfig {
            client_ip: Some(ClientIPConfig {
                timeout_seconds: Some(t),
            }),
        }),
        // `PreferClose` for any value: it is the one every Kubernetes that
        // has the field accepts (1.33 refuses the other two without a
        // feature gate, and a refused write would take the whole derived
        // Service with it), the member slices' hints are per zone, and
        // imported endpoints have no node for `PreferSameNode`.
        traffic_distribution: fields
            .traffic_distribution
            .map(|_| text(TrafficDistribution::PreferClose.k8s())),
        ..ServiceSpec::default()
    }
}

/// `sessionAffinity` and the `ClientIP` timeout to write.
fn affinity(a: Affinity) -> (Option<&'static str>, Option<i32>) {
    match a {
        Affinity::Unset => (None, None),
        Affinity::Off => (Some("None"), None),
        Affinity::ClientIp(timeout) => (Some("ClientIP"), timeout),
    }
}

/// Each member's EndpointSlices: `<derived>-<clusterid>-v4-0`, … Refused
/// members have none (their objects are held as they are, like federated
/// ones).
fn member_slices(
    key: &ObjectKey,
    name: &str,
    members: &[Member<'_>],
    settings: &MirrorSettings,
    headless: bool,
) -> Vec<Desired> {
    let cx = settings.context();
    let held: Vec<&Member<'_>> = members.iter().filter(|m| !m.service.refused).collect();
    let eligible: Vec<bool> = held
        .iter()
        .map(|m| federation_eligible(&m.cluster.health, &cx))
        .collect();
    let fail_open = !eligible.contains(&true);
    let mut out = BTreeMap::new();
    for (m, ok) in held.iter().zip(eligible) {
        let id = m.cluster.mcs_id();
        // The cluster's zone stands for each endpoint's: the slim model
        // keeps no per-endpoint zone (see `Ep::zone`).
        let zone = place_of(m.cluster, &settings.local_place).0.zone.clone();
        let mut endpoints = Endpoints::default();
        for slice in m.cluster.slices_of(key) {
            for ep in slice.endpoints.iter().filter(|ep| ready(m.service, ep)) {
                endpoints.add(
                    &slice.ports,
                    Ep {
                        addr: ep.addr,
                        hostname: headless.then(|| pod_hostname(ep)),
                        ready: ok || fail_open,
                        zone: zone.clone(),
                    },
                );
            }
        }
        let mut labels = Strings::new();
        labels.insert(MANAGED_BY_LABEL.to_owned(), text(MANAGED_BY));
        labels.insert(LABEL_SERVICE_NAME.to_owned(), text(name));
        labels.insert(LABEL_SLICE_MANAGED_BY.to_owned(), text(SLICE_MANAGED_BY));
        labels.insert(MCS_SERVICE_NAME_LABEL.to_owned(), text(&key.name));
        labels.insert(MCS_SOURCE_CLUSTER_LABEL.to_owned(), text(id));
        // Held while its cluster has not synced, like `<svc>-<cluster>`.
        labels.insert(CLUSTER_LABEL.to_owned(), text(&m.cluster.name));
        let prefix = format!("{name}-{id}");
        let slices = Slices {
            service: &prefix,
            namespace: &key.namespace,
            cluster: &Some(m.cluster.name.clone()),
            labels: &labels,
            annotations: &Strings::new(),
        };
        render_slices(&slices, endpoints, &mut out);
    }
    out.into_values().collect()
}

/// What a ServiceImport is written from.
struct Definition<'a> {
    /// The MCS service.
    key: &'a ObjectKey,
    /// The member whose export defines it ([`members`]' first).
    definer: Member<'a>,
    /// The union of the members' ports.
    ports: &'a [Port],
    /// The members' IP families.
    families: Families,
    /// The MCS API version written.
    version: &'a str,
}

/// The ServiceImport `<svc>`: ClusterSetIP with the derived Service's
/// ClusterIPs once the API has allocated them (`ipFamilies` theirs, in
/// their order), or Headless without IPs (`ipFamilies` the members');
/// the definer's session affinity, internal traffic policy, traffic
/// distribution and exported labels and annotations; and the definer's
/// name in [`ANNOTATION_DEFINED_BY`], so it keeps winning conflicts here.
/// The fields v1alpha1 lacks are written to v1beta1 only.
fn service_import(d: &Definition<'_>, settings: &MirrorSettings) -> Desired {
    let headless = d.definer.service.headless;
    let kind = if headless { "Headless" } else { "ClusterSetIP" };
    let ips: &[IpAddr] = match settings.mcs.derived_ips.get(d.key) {
        Some(ips) if !headless => ips,
        _ => &[],
    };
    // Left out rather than empty: an empty list may be dropped by the
    // server, and the comparison would then see a difference every pass.
    // The local API allocated them, but the rule for what we write holds
    // for every address (`Endpoints::add`).
    let ips: Vec<IpAddr> = ips
        .iter()
        .copied()
        .filter(|ip| special(*ip).is_none())
        .collect();
    let families = if headless {
        d.families
    } else {
        Families::new(ips.iter().map(|ip| Family::of(*ip)))
    };
    let fields = &d.definer.service.import_fields;
    let beta = d.version != "v1alpha1";
    let (affinity, timeout) = affinity(fields.affinity);
    let exported = d.definer.service.exported_meta.as_deref();
    let mut labels: Strings = exported.map(|m| m.labels.clone()).unwrap_or_default();
    labels.insert(MANAGED_BY_LABEL.to_owned(), text(MANAGED_BY));
    labels.insert(MCS_SERVICE_NAME_LABEL.to_owned(), text(&d.key.name));
    let mut annotations: Strings = exported.map(|m| m.annotations.clone()).unwrap_or_default();
    annotations.insert(
        ANNOTATION_DEFINED_BY.to_owned(),
        text(&d.definer.cluster.name),
    );
    let import = ServiceImport {
        metadata: metadata(&d.key.name, &d.key.namespace, labels, annotations),
        spec: ServiceImportSpec {
            type_: Some(text(kind)),
            ports: Some(d.ports.iter().map(import_port).collect()),
            ips: (!ips.is_empty()).then(|| ips.iter().map(IpAddr::to_string).collect()),
            ip_families: (beta && !families.is_empty())
                .then(|| families.iter().map(|f| text(f.k8s())).collect()),
            session_affinity: affinity.map(text),
            session_affinity_config: timeout.map(|t| ImportAffinityConfig {
                client_ip: Some(ClientIpConfig {
                    timeout_seconds: Some(t),
                }),
            }),
            internal_traffic_policy: fields
                .internal_traffic_policy
                .filter(|_| beta)
                .map(|p| text(p.k8s())),
            traffic_distribution: fields
                .traffic_distribution
                .filter(|_| beta)
                .map(|t| text(t.k8s())),
        },
    };
    Desired {
        key: ObjectRef {
            kind: Kind::ServiceImport,
            namespace: d.key.namespace.clone(),
            name: d.key.name.clone(),
        },
        object: Object::ServiceImport {
            version: Arc::from(d.version),
            import,
        },
        cluster: None,
    }
}

/// A ServiceImport port: name, protocol, number, as the derived Service's.
fn import_port(p: &Port) -> ImportPort {
    ImportPort {
        name: p.name.as_deref().map(text),
        protocol: Some(text(p.protocol.k8s())),
        app_protocol: None,
        port: i32::from(p.port),
    }
}
