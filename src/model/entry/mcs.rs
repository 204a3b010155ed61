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
use crate::model::objects::{Affinity, Families, ObjectKey, Port, Service};

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

/// A property the members of an MCS service disagree on, named after
/// mcs-api's `Conflict` reasons (`ServiceExportReason…Conflict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Disagreement {
    /// ClusterSetIP against Headless: the other type's members are left out.
    Type,
    /// Another set of ports: the import has the union, with the definer's
    /// number for a name and protocol it defines.
    Port,
    /// `sessionAffinity`.
    SessionAffinity,
    /// The `ClientIP` timeout of `sessionAffinityConfig`.
    SessionAffinityConfig,
    /// `internalTrafficPolicy`.
    InternalTrafficPolicy,
    /// `trafficDistribution`.
    TrafficDistribution,
    /// `ipFamilies`: a client of a family some members lack reaches only
    /// the others.
    IpFamily,
    /// The export's `exportedLabels`.
    Labels,
    /// The export's `exportedAnnotations`.
    Annotations,
}

impl Disagreement {
    /// The `Conflict` condition's reason.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::Type => "TypeConflict",
            Self::Port => "PortConflict",
            Self::SessionAffinity => "SessionAffinityConflict",
            Self::SessionAffinityConfig => "SessionAffinityConfigConflict",
            Self::InternalTrafficPolicy => "InternalTrafficPolicyConflict",
            Self::TrafficDistribution => "TrafficDistributionConflict",
            Self::IpFamily => "IPFamilyConflict",
            Self::Labels => "LabelsConflict",
            Self::Annotations => "AnnotationsConflict",
        }
    }

    /// What differs in `clusters`, and what is done about it, for a
    /// message naming the `definer`.
    pub(crate) fn text(self, definer: &str, clusters: &[Arc<str>]) -> String {
        let clusters = clusters.join(", ");
        match self {
            Self::Type => format!(
                "the Service type differs from {definer}'s (the export that defines the service) in {clusters}, which are left out"
            ),
            Self::Port => format!(
                "the ports differ from {definer}'s in {clusters}; the import has their union, with {definer}'s number where a name and protocol is defined twice"
            ),
            Self::SessionAffinity => {
                format!(
                    "sessionAffinity differs from {definer}'s in {clusters}; {definer}'s is used"
                )
            }
            Self::SessionAffinityConfig => format!(
                "sessionAffinityConfig differs from {definer}'s in {clusters}; {definer}'s is used"
            ),
            Self::InternalTrafficPolicy => format!(
                "internalTrafficPolicy differs from {definer}'s in {clusters}; {definer}'s is used"
            ),
            Self::TrafficDistribution => format!(
                "trafficDistribution differs from {definer}'s in {clusters}; {definer}'s is used"
            ),
            Self::IpFamily => format!(
                "the IP families differ from {definer}'s in {clusters}; clients of a family a member lacks reach only the others"
            ),
            Self::Labels => format!(
                "the exported labels differ from {definer}'s in {clusters}; {definer}'s are used"
            ),
            Self::Annotations => format!(
                "the exported annotations differ from {definer}'s in {clusters}; {definer}'s are used"
            ),
        }
    }
}

/// What the members disagree on, for the report: the KEP asks for a
/// `Conflict` condition on every export of the service when anything is.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Conflicts {
    /// The cluster whose export defines the service (the first member).
    pub definer: Option<Arc<str>>,
    /// Each property some members disagree on, with the clusters whose
    /// value is not the definer's, in [`Disagreement`] order.
    pub found: Vec<(Disagreement, Vec<Arc<str>>)>,
}

impl Conflicts {
    /// Nothing to report.
    pub(crate) fn none(&self) -> bool {
        self.found.is_empty()
    }
}

/// The union of the members' service ports by (name, protocol): the
/// definer's (the first member's) number wins.
pub(crate) fn union_ports(members: &[Member<'_>]) -> Vec<Port> {
    let mut ports: Vec<Port> = Vec::new();
    for p in members.iter().flat_map(|m| &m.service.ports) {
        if !ports
            .iter()
            .any(|q| q.name == p.name && q.protocol == p.protocol)
        {
            ports.push(p.clone());
        }
    }
    ports
}

/// The MCS members of service `key` and what they disagree on, for
/// `/debug` and the mirror's export conditions. Members of the other type
/// count for [`Disagreement::Type`] only, since they are left out.
pub(crate) fn conflicts(set: &ClusterSet, key: &ObjectKey) -> Conflicts {
    let members = members(set, key);
    let Some(first) = members.first() else {
        return Conflicts::default();
    };
    let definer = first.service;
    let (kept, other_type): (Vec<Member<'_>>, Vec<Member<'_>>) = members
        .iter()
        .partition(|m| m.service.headless == definer.headless);
    let mut found = Vec::new();
    if !other_type.is_empty() {
        let names = other_type.iter().map(|m| m.cluster.name.clone()).collect();
        found.push((Disagreement::Type, names));
    }
    for what in [
        Disagreement::Port,
        Disagreement::SessionAffinity,
        Disagreement::SessionAffinityConfig,
        Disagreement::InternalTrafficPolicy,
        Disagreement::TrafficDistribution,
        Disagreement::IpFamily,
        Disagreement::Labels,
        Disagreement::Annotations,
    ] {
        let names: Vec<Arc<str>> = kept
            .iter()
            .filter(|m| differs(what, definer, m.service))
            .map(|m| m.cluster.name.clone())
            .collect();
        if !names.is_empty() {
            found.push((what, names));
        }
    }
    Conflicts {
        definer: Some(first.cluster.name.clone()),
        found,
    }
}

/// Whether `other`'s `what` is not `definer`'s. An affinity left unset is
/// `None` (the API's default); a family list left out says nothing.
fn differs(what: Disagreement, definer: &Service, other: &Service) -> bool {
    let (d, o) = (&definer.import_fields, &other.import_fields);
    let affinity = |a: Affinity| match a {
        Affinity::Unset | Affinity::Off => None,
        Affinity::ClientIp(t) => Some(t),
    };
    let sorted = |s: &Service| {
        let mut p = s.ports.clone();
        p.sort();
        p
    };
    let meta = |s: &Service, labels: bool| {
        s.exported_meta
            .as_deref()
            .map(|m| {
                if labels {
                    m.labels.clone()
                } else {
                    m.annotations.clone()
                }
            })
            .unwrap_or_default()
    };
    match what {
        Disagreement::Type => definer.headless != other.headless,
        Disagreement::Port => sorted(definer) != sorted(other),
        Disagreement::SessionAffinity => {
            affinity(d.affinity).is_some() != affinity(o.affinity).is_some()
        }
        Disagreement::SessionAffinityConfig => matches!(
            (affinity(d.affinity), affinity(o.affinity)),
            (Some(a), Some(b)) if a != b
        ),
        Disagreement::InternalTrafficPolicy => {
            d.internal_traffic_policy != o.internal_traffic_policy
        }
        Disagreement::TrafficDistribution => d.traffic_distribution != o.traffic_distribution,
        Disagreement::IpFamily => {
            let set = |f: Families| {
                let mut v: Vec<_> = f.iter().collect();
                v.sort_by_key(|f| f.k8s());
                v
            };
            !d.families.is_empty() && !o.families.is_empty() && set(d.families) != set(o.families)
        }
        Disagreement::Labels => meta(definer, true) != meta(other, true),
        Disagreement::Annotations => meta(definer, false) != meta(other, false),
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
    let ports = union_ports(&members);
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
