//! The MCS clusterset name `<svc>.<ns>.svc.<zone>` (KEP-1645,
//! `docs/mcs.md` §2): built from the services a ServiceExport makes
//! members in each cluster, and the local ServiceImport's clusterset IPs.
//!
//! - A ClusterSetIP service answers the local ServiceImport's `spec.ips`,
//!   SRV one record per service port, target the name itself; with no
//!   ServiceImport (DNS without the mirror controller), the union of the
//!   members' ready endpoints, and SRV the endpoints' ports (the ports a
//!   client dials at those addresses, docs/architecture.md, decision 10).
//! - A Headless service answers the union of ready endpoints; its pods are
//!   named `<hostname>.<clusterid>.<svc>…` and SRV targets those names.
//!
//! The import's type and ports follow the oldest ServiceExport: a member
//! whose Service is of the other type is left out, and a port whose number
//! differs from the oldest export's under the same name and protocol is the
//! oldest export's (the KEP's conflict rule). A cluster whose id another
//! cluster known before it holds is left out. Health follows the federated
//! rules (docs/architecture.md, decision 5). Pure: no claims, no other entries.

use std::sync::Arc;

use super::{
    BuildContext, Entry, Head, Nearest, Origin, Part, PartCache, Reverse, federation_eligible,
};
use crate::model::cluster::{Cluster, ClusterSet};
use crate::model::locality::{Membership, plan_of};
use crate::model::objects::{ObjectKey, Port, Service};

/// One cluster's member service.
#[derive(Clone, Copy)]
pub(crate) struct Member<'s> {
    /// The cluster.
    pub(crate) cluster: &'s Cluster,
    /// Its Service, which a ServiceExport makes a member.
    pub(crate) service: &'s Service,
}

/// The clusters whose Service `key` a ServiceExport makes an MCS member,
/// the one whose export defines the service first: the cluster the local
/// ServiceImport names as its definer ([`Import::defined_by`], written by
/// our controller) while it is a member, then by [`Seniority`]. A cluster
/// whose id another cluster holds is left out.
///
/// Why the definer first: seniority ranks the local cluster first, so
/// without it each cluster's controller would take its own export's type
/// and ports and the clusterset would disagree (the mcs-api conformance
/// suite's type-conflict spec). The definer is what this cluster's
/// controller saw first and wrote down in its own cluster, so no remote
/// cluster can forge it, and it holds across restarts.
///
/// [`Import::defined_by`]: crate::model::objects::Import::defined_by
/// [`Seniority`]: crate::model::cluster::Seniority
pub(crate) fn members<'s>(set: &'s ClusterSet, key: &ObjectKey) -> Vec<Member<'s>> {
    let mut members: Vec<Member<'s>> = set
        .iter()
        .filter_map(|c| {
            let service = c.services.get(key).filter(|s| s.mcs.is_some())?;
            let holder = set.mcs_id_holder(c.mcs_id());
            holder.is_none_or(|h| h.name == c.name).then_some(Member {
                cluster: c,
                service,
            })
        })
        .collect();
    let definer = set
        .iter()
        .find(|c| c.local)
        .and_then(|c| c.imports.get(key))
        .and_then(|i| i.defined_by.as_deref());
    // Senior first: the cluster's seniority (which a cluster cannot forge,
    // unlike the export's creationTimestamp), then the export's age within
    // one cluster.
    members.sort_by_key(|m| {
        (
            definer != Some(&*m.cluster.name),
            m.cluster.seniority(m.service.mcs.unwrap_or(i64::MAX)),
        )
    });
    members
}

/// What the members disagree on, for the report. The KEP asks for a
/// `Conflict` condition on every export of the service when any of these
/// holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Conflicts {
    /// The cluster whose export defines the service (the first member).
    pub definer: Option<Arc<str>>,
    /// Clusters left out because their Service's type (ClusterSetIP or
    /// Headless) is not the definer's.
    pub type_mismatch: Vec<Arc<str>>,
    /// Clusters with a port of a name and protocol the definer defines
    /// with another number.
    pub port_mismatch: Vec<Arc<str>>,
    /// Clusters whose set of ports is not the definer's: the import has
    /// the union.
    pub port_sets: Vec<Arc<str>>,
    /// Clusters whose exported labels or annotations are not the
    /// definer's: the definer's are used.
    pub meta_mismatch: Vec<Arc<str>>,
}

impl Conflicts {
    /// Nothing to report.
    pub(crate) fn none(&self) -> bool {
        self.type_mismatch.is_empty()
            && self.port_mismatch.is_empty()
            && self.port_sets.is_empty()
            && self.meta_mismatch.is_empty()
    }
}

/// The union of the members' service ports by (name, protocol): the
/// definer's definition wins; clusters that disagree are returned.
pub(crate) fn union_ports(members: &[Member<'_>]) -> (Vec<Port>, Vec<Arc<str>>) {
    let mut ports: Vec<Port> = Vec::new();
    let mut disagree = Vec::new();
    for m in members {
        for p in &m.service.ports {
            match ports
                .iter()
                .find(|q| q.name == p.name && q.protocol == p.protocol)
            {
                Some(q) if q.port != p.port => disagree.push(m.cluster.name.clone()),
                Some(_) => {}
                None => ports.push(p.clone()),
            }
        }
    }
    disagree.dedup();
    (ports, disagree)
}

/// The MCS members of service `key` and what they disagree on, for
/// `/debug` and the mirror's export conditions.
pub(crate) fn conflicts(set: &ClusterSet, key: &ObjectKey) -> Conflicts {
    let members = members(set, key);
    let Some(first) = members.first() else {
        return Conflicts::default();
    };
    let definer = first.service;
    let sorted = |s: &Service| {
        let mut p = s.ports.clone();
        p.sort();
        p
    };
    let ports = sorted(definer);
    let names = |pick: &dyn Fn(&Member<'_>) -> bool| {
        members
            .iter()
            .filter(|m| pick(m))
            .map(|m| m.cluster.name.clone())
            .collect()
    };
    let (kept, type_mismatch): (Vec<Member<'_>>, Vec<Member<'_>>) = members
        .iter()
        .partition(|m| m.service.headless == definer.headless);
    Conflicts {
        definer: Some(first.cluster.name.clone()),
        type_mismatch: type_mismatch
            .iter()
            .map(|m| m.cluster.name.clone())
            .collect(),
        port_mismatch: union_ports(&kept).1,
        port_sets: names(&|m| m.service.headless == definer.headless && sorted(m.service) != ports),
        meta_mismatch: names(&|m| m.service.exported_meta != definer.exported_meta),
    }
}

/// Builds `<svc>.<ns>.svc.<zone>` for MCS service `key`; `None` when no
/// cluster exports it (or a headless one has no ready endpoint).
pub(crate) fn build_mcs_entry(
    set: &ClusterSet,
    parts: &PartCache,
    key: &ObjectKey,
    cx: &BuildContext<'_>,
) -> Option<Entry> {
    let members = members(set, key);
    let headless = members.first()?.service.headless;
    let members: Vec<Member<'_>> = members
        .into_iter()
        .filter(|m| m.service.headless == headless)
        .collect();
    let (ports, _) = union_ports(&members);
    let (held, refused): (Vec<&Member<'_>>, Vec<&Member<'_>>) =
        members.iter().partition(|m| !m.service.refused);
    let eligible: Vec<&Member<'_>> = held
        .iter()
        .copied()
        .filter(|m| federation_eligible(&m.cluster.health, cx))
        .collect();
    let fail_open = eligible.is_empty() && !held.is_empty();
    let mut used = if fail_open { held } else { eligible };
    let nearest = match members.first() {
        // Opted in by the oldest export (decision 7), and only where the
        // KEP answers pods: a ClusterSetIP stays one address.
        Some(oldest) if headless && oldest.service.mcs_nearest && !fail_open => {
            nearest_tier(set, parts, key, cx, &mut used)
        }
        _ => Nearest::No,
    };
    let stale = used.iter().any(|m| m.cluster.health.broken_since.is_some());
    let head = Head {
        name: format!("{}.{}.svc.{}", key.name, key.namespace, cx.zone).into(),
        namespace: key.namespace.clone(),
        origin: Origin::Federated {
            fail_open,
            stale,
            mcs: true,
            nearest,
        },
        headless,
        // Pods are named under cluster ids here: a name below that a
        // refused member's pod could own is asked by its id.
        refused: refused.iter().map(|m| m.cluster.mcs_id().clone()).collect(),
        tiers: None,
    };
    let import = set
        .iter()
        .find(|c| c.local)
        .and_then(|c| c.imports.get(key))
        .filter(|i| !i.ips.is_empty() && !headless);
    let (found, ports) = match import {
        Some(import) => (
            vec![Arc::new(Part::new(
                Arc::from(""),
                import.ips.iter().copied(),
                (Vec::new(), Arc::from([])),
                Reverse::None,
            ))],
            ports,
        ),
        // Pod addresses: SRV gives the ports a client dials at them, the
        // endpoints' (docs/architecture.md, decision 10), not the Service's.
        None if !headless => (
            member_parts(parts, key, &used),
            used.iter()
                .flat_map(|m| m.cluster.slices_of(key))
                .flat_map(|s| s.ports.iter().cloned())
                .collect(),
        ),
        None => (member_parts(parts, key, &used), Vec::new()),
    };
    Entry::from_parts(head, found, ports)
}

/// Keeps in `used` the members of the nearest tier of MCS service `key`
/// (docs/locality.md), all of them when no tier has `min-ready` ready
/// endpoints; says which.
fn nearest_tier(
    set: &ClusterSet,
    parts: &PartCache,
    key: &ObjectKey,
    cx: &BuildContext<'_>,
    used: &mut Vec<&Member<'_>>,
) -> Nearest {
    let plan = plan_of(set, key, Membership::Mcs, (cx.local, cx), |c, _| {
        // A cluster whose id another holds is no member: it counts nothing.
        let holder = set.mcs_id_holder(c.mcs_id());
        if holder.is_some_and(|h| h.name != c.name) {
            0
        } else {
            parts.ready_of(&c.name, key)
        }
    });
    match plan.chosen {
        Some(t) => {
            used.retain(|m| plan.tier_of(&m.cluster.name) == Some(t));
            Nearest::Tier(t)
        }
        None => Nearest::Union,
    }
}

/// The members' slice parts, their pods named under each member's id.
fn member_parts(parts: &PartCache, key: &ObjectKey, used: &[&Member<'_>]) -> Vec<Arc<Part>> {
    used.iter()
        .flat_map(|m| parts.of_mcs(&m.cluster.name, key).cloned())
        .collect()
}
