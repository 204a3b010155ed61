//! Locality (docs/architecture.md, decision 14; docs/locality.md): the tier
//! of each member cluster of a federated service, as seen by a client of
//! this server (one server per cluster, so the client is in the local
//! cluster), and which tier `<svc>-nearest` answers.
//!
//! Tiers, lowest first: the local cluster, clusters in its region, the
//! rest; or the service's explicit failover order, `*` standing for the
//! default tiers of the clusters it does not name. A member served from
//! stale data (its watch broken, within the federated grace) drops to a
//! tier below all of those. `-nearest` answers the first tier with at least
//! `min-ready` ready endpoints; with none, the federated union (fail open).
//!
//! Pure functions of the [`ClusterSet`], the local place and the time in the
//! [`BuildContext`]: the index, the mirror controller and `explain` all
//! call [`plan`], so the three never disagree. Must not build records.

use std::sync::Arc;

use super::cluster::{Cluster, ClusterSet};
use super::entry::{BuildContext, federation_eligible};
use super::objects::{ObjectKey, Service};
use crate::vocab::place::{OrderItem, Place, PlaceFrom, Rule};

/// Why a member has the tier it has (or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// The local cluster.
    Local,
    /// In the local cluster's region.
    SameRegion,
    /// In another region.
    OtherRegion,
    /// Its place, or the local cluster's region, is unknown.
    PlaceUnknown,
    /// Named at this position (from 0) of the explicit order.
    Listed(usize),
    /// Not named by an explicit order that has no `*`: never answered by
    /// the nearest name.
    NotListed,
    /// Left out of every answer: its gateway probe fails, or its watch has
    /// been broken for longer than the federated grace.
    Unhealthy,
    /// Its budget refused the service: nothing of it is held.
    Refused,
}

impl Why {
    /// Words for `explain`.
    pub(crate) fn describe(self) -> String {
        match self {
            Self::Local => "the local cluster".to_owned(),
            Self::SameRegion => "same region as the local cluster".to_owned(),
            Self::OtherRegion => "another region".to_owned(),
            Self::PlaceUnknown => "place unknown (its region or ours)".to_owned(),
            Self::Listed(i) => format!("position {} of the failover order", i + 1),
            Self::NotListed => "not in the failover order (no '*')".to_owned(),
            Self::Unhealthy => "unhealthy: gateway probe failing or past the grace".to_owned(),
            Self::Refused => "refused by its budget".to_owned(),
        }
    }
}

/// One member cluster of a federated service, ranked.
#[derive(Debug, Clone)]
pub(crate) struct Ranked<'s> {
    /// The cluster.
    pub cluster: &'s Cluster,
    /// Its tier; `None` when the nearest name never answers it.
    pub tier: Option<u32>,
    /// Why that tier (before any stale demotion).
    pub why: Why,
    /// Demoted: its part is last-known data (watch broken, within the
    /// grace).
    pub stale: bool,
    /// Ready endpoints it contributes.
    pub ready: u64,
}

/// The ranking of one federated service's members.
#[derive(Debug, Clone)]
pub(crate) struct Plan<'s> {
    /// Every member (refused ones too), by (tier, name); untiered last.
    pub members: Vec<Ranked<'s>>,
    /// The rule in force, and the cluster whose Service gave it.
    pub rule: Rule,
    /// Where the rule came from (`None`: the default rule).
    pub rule_from: Option<Arc<str>>,
    /// The tier `-nearest` answers; `None` when no tier meets `min-ready`
    /// (the nearest name then answers the federated union).
    pub chosen: Option<u32>,
}

impl Plan<'_> {
    /// The tier of `cluster`, if it has one.
    pub(crate) fn tier_of(&self, cluster: &str) -> Option<u32> {
        self.members
            .iter()
            .find(|m| &*m.cluster.name == cluster)
            .and_then(|m| m.tier)
    }

    /// True when `cluster` is in the answer of the nearest name (the
    /// chosen tier; with none chosen, the caller answers the union).
    pub(crate) fn chosen_member(&self, cluster: &str) -> bool {
        self.chosen.is_some() && self.tier_of(cluster) == self.chosen
    }

    /// (cluster, tier) of every tiered member, by cluster name: what SRV
    /// priorities are computed from.
    pub(crate) fn tiers(&self) -> Vec<(Arc<str>, u32)> {
        let mut out: Vec<(Arc<str>, u32)> = self
            .members
            .iter()
            .filter_map(|m| Some((m.cluster.name.clone(), m.tier?)))
            .collect();
        out.sort();
        out
    }
}

/// The place that counts for cluster `c` and where it came from: for the
/// local cluster `--region`/`--zone` (in `local`) first.
pub(crate) fn place_of<'c>(c: &'c Cluster, local: &'c Place) -> (&'c Place, PlaceFrom) {
    if c.local && !local.is_unknown() {
        return (local, PlaceFrom::Configured);
    }
    Place::choose(&c.place, &c.property_place)
}

/// Which clusters are members of a service, for a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Membership {
    /// Linkerd's federated members (`<svc>-nearest`).
    Federated,
    /// The clusters a ServiceExport exports it from (an MCS name that opts
    /// into nearest answers).
    Mcs,
}

impl Membership {
    fn holds(self, s: &Service) -> bool {
        match self {
            Self::Federated => s.federated,
            Self::Mcs => s.mcs.is_some(),
        }
    }
}

/// The failover rule of service `key`: the one set on the most senior
/// member's Service that sets one (the local cluster's first, decision 7),
/// else the default.
fn rule_of(set: &ClusterSet, key: &ObjectKey, by: Membership) -> (Rule, Option<Arc<str>>) {
    set.iter()
        .filter_map(|c| {
            let s = c.services.get(key).filter(|s| by.holds(s))?;
            let rule = s.locality.as_ref()?;
            Some((c.seniority(s.created), rule, &c.name))
        })
        .min_by_key(|(seniority, ..)| *seniority)
        .map_or((Rule::default(), None), |(_, rule, name)| {
            ((**rule).clone(), Some(name.clone()))
        })
}

/// The default tier of a healthy member: 0 local, 1 same region, 2 rest.
fn default_tier(c: &Cluster, local_region: Option<&str>, local: &Place) -> (u32, Why) {
    if c.local {
        return (0, Why::Local);
    }
    match (local_region, place_of(c, local).0.region.as_deref()) {
        (Some(ours), Some(theirs)) if ours == theirs => (1, Why::SameRegion),
        (Some(_), Some(_)) => (2, Why::OtherRegion),
        _ => (2, Why::PlaceUnknown),
    }
}

/// Tiers a default ranking uses before the stale tier.
const DEFAULT_TIERS: u32 = 3;

/// The tier of a healthy member under `rule`, before stale demotion; and
/// the tier stale members drop to (below every other).
fn base_tier(
    c: &Cluster,
    rule: &Rule,
    local_region: Option<&str>,
    local: &Place,
) -> (Option<u32>, Why, u32) {
    let Some(order) = &rule.order else {
        let (tier, why) = default_tier(c, local_region, local);
        return (Some(tier), why, DEFAULT_TIERS);
    };
    // `*` takes the default tiers' room: entries after it move down.
    let rest_at = order.iter().position(|i| *i == OrderItem::Rest);
    let slot = |i: usize| {
        let shift = match rest_at {
            Some(r) if i > r => DEFAULT_TIERS - 1,
            _ => 0,
        };
        i as u32 + shift
    };
    let stale_tier = order.len() as u32 + rest_at.map_or(0, |_| DEFAULT_TIERS - 1);
    let listed = order
        .iter()
        .position(|i| matches!(i, OrderItem::Cluster(n) if *n == c.name));
    match (listed, rest_at) {
        (Some(i), _) => (Some(slot(i)), Why::Listed(i), stale_tier),
        (None, Some(r)) => {
            let (tier, why) = default_tier(c, local_region, local);
            (Some(slot(r) + tier), why, stale_tier)
        }
        (None, None) => (None, Why::NotListed, stale_tier),
    }
}

/// Ranks the members of federated service `key` and picks the tier the
/// nearest name answers. `ready` counts a member's ready endpoints (the
/// index counts its built parts, the mirror the slices).
pub(crate) fn plan<'s>(
    set: &'s ClusterSet,
    key: &ObjectKey,
    local: &Place,
    cx: &BuildContext<'_>,
    ready: impl Fn(&Cluster, &Service) -> u64,
) -> Plan<'s> {
    plan_of(set, key, Membership::Federated, (local, cx), ready)
}

/// [`plan`] over the members `by` names.
pub(crate) fn plan_of<'s>(
    set: &'s ClusterSet,
    key: &ObjectKey,
    by: Membership,
    (local, cx): (&Place, &BuildContext<'_>),
    ready: impl Fn(&Cluster, &Service) -> u64,
) -> Plan<'s> {
    let (rule, rule_from) = rule_of(set, key, by);
    let local_region = set
        .iter()
        .find(|c| c.local)
        .and_then(|c| place_of(c, local).0.region.clone());
    let mut members: Vec<Ranked<'s>> = Vec::new();
    for c in set.iter() {
        let Some(svc) = c.services.get(key).filter(|s| by.holds(s)) else {
            continue;
        };
        let mut ranked = Ranked {
            cluster: c,
            tier: None,
            why: Why::Refused,
            stale: false,
            ready: 0,
        };
        if !svc.refused {
            if federation_eligible(&c.health, cx) {
                let (tier, why, stale_tier) = base_tier(c, &rule, local_region.as_deref(), local);
                ranked.stale = c.health.broken_since.is_some();
                ranked.tier = tier.map(|t| if ranked.stale { stale_tier } else { t });
                ranked.why = why;
            } else {
                ranked.why = Why::Unhealthy;
            }
            ranked.ready = ready(c, svc);
        }
        members.push(ranked);
    }
    members.sort_by(|a, b| {
        (a.tier.is_none(), a.tier, &a.cluster.name).cmp(&(
            b.tier.is_none(),
            b.tier,
            &b.cluster.name,
        ))
    });
    let chosen = choose(&members, rule.min_ready);
    Plan {
        members,
        rule,
        rule_from,
        chosen,
    }
}

/// The first tier whose members hold at least `min_ready` ready endpoints
/// (members sorted by tier).
fn choose(members: &[Ranked<'_>], min_ready: u32) -> Option<u32> {
    let mut tiered = members.iter().filter_map(|m| Some((m.tier?, m.ready)));
    let (mut tier, mut sum) = tiered.next()?;
    for (t, ready) in tiered {
        if t != tier {
            if sum >= u64::from(min_ready) {
                return Some(tier);
            }
            (tier, sum) = (t, 0);
        }
        sum += ready;
    }
    (sum >= u64::from(min_ready)).then_some(tier)
}

#[cfg(test)]
mod tests;
