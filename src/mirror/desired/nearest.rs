//! The nearest mirror of one federated service (docs/mirror.md, "The
//! nearest mirror"): the Service `<svc>-nearest` and EndpointSlices of the
//! ready pods of the members the DNS name `<svc>-nearest` answers, so that
//! clients of `cluster.local` (kube-proxy, Ingress controllers, CoreDNS)
//! fail over by locality the way our DNS does.
//!
//! Which members: [`crate::model::locality::plan`], the function the index
//! answers the nearest name with, each member's ready endpoints counted
//! from its slices as the index counts them from the slices' parts (per
//! slice each address once, the larger of the two families), so the two
//! pick the same tier. With no tier holding `min-ready` ready endpoints,
//! the federated union (fail open), as the DNS answer.
//!
//! The Service is ours, not Linkerd's: the same ports, shape and
//! `config.linkerd.io/opaque-ports` as `<svc>-federated`, but neither
//! Linkerd's `mirrored-service` label nor its `remote-discovery` and
//! `local-discovery` annotations. With those Linkerd's destination
//! controller would resolve the federated union itself and ignore the tier
//! in the slices, and its tooling would count the Service as one of its
//! mirrors. Pure.

use std::net::IpAddr;

use super::{
    Endpoints, MAX_SERVICE_NAME, Members, MirrorSettings, Problem, Service, Strings, Unit,
    fit_name, member_endpoints, ready, service_ref, text, union_members, union_rank,
};
use crate::model::cluster::{Cluster, ClusterSet};
use crate::model::locality::plan;
use crate::model::objects::ObjectKey;
use crate::vocab::linkerd::ANNOTATION_OPAQUE_PORTS;
use crate::vocab::name::NEAREST;

/// `<svc>-nearest` of federated service `key`, whose `members` (in
/// cluster-name order) and source of truth `truth` the federated unit
/// found.
pub(super) fn nearest_unit(
    set: &ClusterSet,
    key: &ObjectKey,
    members: &Members<'_>,
    truth: &Service,
    settings: &MirrorSettings,
    units: &mut Vec<Unit>,
    problems: &mut Vec<Problem>,
) {
    let full_name = format!("{}-{NEAREST}", key.name);
    let name = fit_name(&full_name, MAX_SERVICE_NAME);
    let mut annotations = Strings::new();
    if let Some(opaque) = &truth.opaque_ports {
        annotations.insert(ANNOTATION_OPAQUE_PORTS.to_owned(), text(opaque));
    }
    let endpoints = nearest_endpoints(set, key, members, &name, settings, problems);
    units.push(Unit {
        rank: union_rank(key, NEAREST),
        namespace: key.namespace.clone(),
        full_name,
        cluster: None,
        parent: None,
        labels: Strings::new(),
        annotations,
        ports: truth.ports.clone(),
        // As `<svc>-federated`: every member decides, so that a failover
        // does not flip the (immutable) clusterIP.
        headless: members.iter().all(|(_, s)| s.headless),
        slice_labels: Strings::new(),
        slice_annotations: Strings::new(),
        endpoints,
        extra: Vec::new(),
        mcs: false,
        nearest: true,
        spec: k8s_openapi::api::core::v1::ServiceSpec::default(),
    });
}

/// The ready pods of the members the nearest name answers: those of the
/// chosen tier, else (no tier chosen) the federated union.
fn nearest_endpoints(
    set: &ClusterSet,
    key: &ObjectKey,
    members: &Members<'_>,
    name: &str,
    settings: &MirrorSettings,
    problems: &mut Vec<Problem>,
) -> Endpoints {
    let cx = settings.context();
    let plan = plan(set, key, &settings.local_place, &cx, |c, svc| {
        ready_count(c, svc, key)
    });
    let mut used = union_members(members, &cx);
    if plan.chosen.is_some() {
        used.retain(|(c, _)| plan.chosen_member(&c.name));
    }
    let object = service_ref(&key.namespace, name);
    member_endpoints(key, &object, &used, problems)
}

/// The ready endpoints member `c` contributes to service `key`, counted as
/// the index counts its parts (`entry::member_plan`): each slice's distinct
/// ready addresses, summed per family; a dual-stack pod is in a slice of
/// each family, so the larger family counts.
fn ready_count(c: &Cluster, svc: &Service, key: &ObjectKey) -> u64 {
    let (mut v4, mut v6) = (0u64, 0u64);
    for slice in c.slices_of(key) {
        let mut addrs: Vec<IpAddr> = slice
            .endpoints
            .iter()
            .filter(|ep| ready(svc, ep))
            .map(|ep| ep.addr)
            .collect();
        addrs.sort_unstable();
        addrs.dedup();
        let six = addrs.iter().filter(|a| a.is_ipv6()).count() as u64;
        v6 += six;
        v4 += addrs.len() as u64 - six;
    }
    v4.max(v6)
}
