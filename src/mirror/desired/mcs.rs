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

use k8s_openapi::api::core::v1::Service as ServiceObject;

use super::{
    Desired, Endpoints, Ep, MAX_SERVICE_NAME, MirrorSettings, Problem, Rank, Slices, Strings, Unit,
    fit_name, metadata, pod_hostname, ready, render_slices, service_ref, text,
};
use crate::k8s::crd::{ImportPort, ServiceImport, ServiceImportSpec};
use crate::mirror::{
    CLUSTER_LABEL, DERIVED_PREFIX, Kind, MANAGED_BY, MANAGED_BY_LABEL, Object, ObjectRef,
    SLICE_MANAGED_BY,
};
use crate::model::cluster::ClusterSet;
use crate::model::entry::federation_eligible;
use crate::model::entry::mcs::{Member, members, union_ports};
use crate::model::locality::place_of;
use crate::model::objects::{ObjectKey, Port};
use crate::vocab::linkerd::{LABEL_SERVICE_NAME, LABEL_SLICE_MANAGED_BY};
use crate::vocab::mcs::{MCS_SERVICE_NAME_LABEL, MCS_SOURCE_CLUSTER_LABEL};
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
    let Some(first) = all.first() else {
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
    let (ports, _) = union_ports(&members);
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
    if let Some(version) = &settings.mcs.import_version {
        extra.push(service_import(key, &ports, headless, version, settings));
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
    });
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

/// The ServiceImport `<svc>`: ClusterSetIP with the derived Service's
/// ClusterIPs once the API has allocated them, or Headless without IPs.
fn service_import(
    key: &ObjectKey,
    ports: &[Port],
    headless: bool,
    version: &str,
    settings: &MirrorSettings,
) -> Desired {
    let kind = if headless { "Headless" } else { "ClusterSetIP" };
    let ips: &[IpAddr] = match settings.mcs.derived_ips.get(key) {
        Some(ips) if !headless => ips,
        _ => &[],
    };
    // Left out rather than empty: an empty list may be dropped by the
    // server, and the comparison would then see a difference every pass.
    // The local API allocated them, but the rule for what we write holds
    // for every address (`Endpoints::add`).
    let ips: Vec<String> = ips
        .iter()
        .filter(|ip| special(**ip).is_none())
        .map(IpAddr::to_string)
        .collect();
    let mut labels = Strings::new();
    labels.insert(MANAGED_BY_LABEL.to_owned(), text(MANAGED_BY));
    labels.insert(MCS_SERVICE_NAME_LABEL.to_owned(), text(&key.name));
    let import = ServiceImport {
        metadata: metadata(&key.name, &key.namespace, labels, Strings::new()),
        spec: ServiceImportSpec {
            type_: Some(text(kind)),
            ports: Some(ports.iter().map(import_port).collect()),
            ips: (!ips.is_empty()).then_some(ips),
        },
    };
    Desired {
        key: ObjectRef {
            kind: Kind::ServiceImport,
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        },
        object: Object::ServiceImport {
            version: Arc::from(version),
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
