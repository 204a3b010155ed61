//! The member clusters of a name and why each is in or out of its answer:
//! per-cluster, federated and nearest (ranked by the model's
//! [`plan`]), and MCS names; and the text table of them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use super::{Cx, Explanation, Kind, MemberView, NearestView, RuleView, health, place_words};
use crate::model::cluster::Cluster;
use crate::model::entry::federation_eligible;
use crate::model::entry::mcs::members as mcs_members;
use crate::model::locality::{Plan, Ranked, Why, place_of, plan};
use crate::model::objects::{ExportMode, ObjectKey, Service};
use crate::model::{Entry, Nearest, Origin};
use crate::vocab::place::OrderItem;

/// Ready endpoints of `svc` in `c`, counted as the index counts them for
/// the ranking (`model::entry::member_plan`: each slice's distinct ready
/// addresses, the larger family).
pub(super) fn ready_of(c: &Cluster, svc: &Service, key: &ObjectKey) -> u64 {
    let (mut v4, mut v6) = (0u64, 0u64);
    for slice in c.slices_of(key) {
        let mut addrs: Vec<IpAddr> = slice
            .endpoints
            .iter()
            .filter(|ep| ep.ready || svc.publish_not_ready)
            .map(|ep| ep.addr)
            .collect();
        addrs.sort_unstable();
        addrs.dedup();
        let four = addrs.iter().filter(|a| a.is_ipv4()).count() as u64;
        v4 += four;
        v6 += addrs.len() as u64 - four;
    }
    v4.max(v6)
}

/// One member's row.
fn row(
    cx: &Cx<'_>,
    c: &Cluster,
    ranked: Option<&Ranked<'_>>,
    answer: (bool, String),
) -> MemberView {
    let (place, from) = place_of(c, &cx.snap.settings.local_place);
    let ready = ranked.map_or(0, |r| r.ready);
    MemberView {
        cluster: c.name.to_string(),
        local: c.local,
        region: place.region.as_deref().map(str::to_owned),
        zone: place.zone.as_deref().map(str::to_owned),
        place_from: from.as_str().to_owned(),
        tier: ranked.and_then(|r| r.tier),
        // An unhealthy or refused member has no tier: its health says why.
        ranked: ranked
            .filter(|r| !matches!(r.why, Why::Unhealthy | Why::Refused))
            .map(|r| {
                let mut words = r.why.describe();
                if r.stale {
                    words.push_str(", stale: last");
                }
                words
            }),
        health: health(c, cx),
        ready,
        answered: answer.0,
        why: answer.1,
    }
}

/// A row for a name without tiers: `ready` counted here.
fn plain_row(cx: &Cx<'_>, c: &Cluster, ready: u64, answer: (bool, String)) -> MemberView {
    MemberView {
        ready,
        ..row(cx, c, None, answer)
    }
}

/// `<svc>-<cluster>`: the one cluster whose service it is.
pub(super) fn per_cluster(
    cx: &Cx<'_>,
    out: &mut Explanation,
    cluster: &str,
    key: &ObjectKey,
    label: &str,
) {
    out.kind = Kind::Cluster;
    out.service = Some(key.to_string());
    let Some(c) = cx.set.get(cluster) else {
        out.what = format!("<svc>-<cluster> name of cluster {cluster}, which is gone");
        return;
    };
    let Some(svc) = c.services.get(key) else {
        out.what = format!("<svc>-<cluster> name of cluster {cluster}; its service {key} is gone");
        return;
    };
    out.what = format!(
        "<svc>-<cluster> name of service {key} in cluster {cluster}: {}",
        addresses(cx, c, svc, label)
    );
    let answer = per_cluster_answer(cx, c, svc);
    out.members
        .push(plain_row(cx, c, ready_of(c, svc, key), answer));
}

/// Where a per-cluster name's addresses come from (docs/architecture.md,
/// decisions 1 and 3).
fn addresses(cx: &Cx<'_>, c: &Cluster, svc: &Service, label: &str) -> String {
    let Some(mode) = svc.export else {
        return "not exported".to_owned();
    };
    match (mode, c.local, svc.headless) {
        (ExportMode::Gateway, false, false) => {
            match cx.set.mirror_for(&svc.key.namespace, label, &c.name) {
                Some(m) if !m.cluster_ips.is_empty() => format!(
                    "gateway mode: the ClusterIP of its Linkerd mirror Service {} in the local cluster",
                    m.key
                ),
                _ if c.gateway.as_ref().is_some_and(|g| !g.addresses.is_empty()) => {
                    "gateway mode: the cluster's gateway (no mirror Service in the local cluster)"
                        .to_owned()
                }
                _ => "gateway mode, but no mirror Service and no gateway address: no address"
                    .to_owned(),
            }
        }
        (ExportMode::Gateway, false, true) => {
            "gateway mode, headless: each pod's Linkerd mirror ClusterIP where it has one, else the pod".to_owned()
        }
        (ExportMode::Gateway, true, false) => {
            "gateway mode in the local cluster: its own ClusterIP".to_owned()
        }
        (_, _, true) => "flat, headless: its ready pods, each with a name".to_owned(),
        (ExportMode::Flat, _, false) => "flat: its ready endpoints' addresses".to_owned(),
    }
}

/// Whether a per-cluster name answers (docs/architecture.md, decision 5).
fn per_cluster_answer(cx: &Cx<'_>, c: &Cluster, svc: &Service) -> (bool, String) {
    let s = &cx.snap.settings;
    if svc.refused {
        return (false, "refused by its budget: SERVFAIL (EDE 18)".to_owned());
    }
    match c.health.broken_since {
        Some(since) => {
            let age = cx.now.saturating_duration_since(since);
            match s.max_stale {
                Some(max) if age > max => (
                    false,
                    format!("past --max-stale {}s: SERVFAIL (EDE 22)", max.as_secs()),
                ),
                _ => (
                    true,
                    format!(
                        "stale: its last-known data, TTL at most {}s (EDE 3)",
                        s.stale_ttl
                    ),
                ),
            }
        }
        None if !c.health.synced => (false, "not synced yet: SERVFAIL until it is".to_owned()),
        None => (true, "the name's own cluster".to_owned()),
    }
}

/// `<svc>-federated` and `<svc>-nearest`: every member, ranked as the
/// index ranks them.
pub(super) fn federated(cx: &Cx<'_>, out: &mut Explanation, entry: &Entry, key: &ObjectKey) {
    let Origin::Federated {
        fail_open, nearest, ..
    } = entry.origin
    else {
        return;
    };
    let settings = &cx.snap.settings;
    let build = cx.build();
    let plan = plan(cx.set, key, &settings.local_place, &build, |c, svc| {
        ready_of(c, svc, key)
    });
    out.service = Some(key.to_string());
    out.rule = Some(rule_view(&plan));
    out.local = Some(cx.local());
    let sums = tier_sums(&plan);
    let min = plan.rule.min_ready;
    if nearest == Nearest::No {
        out.kind = Kind::Federated;
        out.what = format!(
            "<svc>-federated name of service {key}: the union of its healthy members' ready endpoints"
        );
    } else {
        out.kind = Kind::Nearest;
        out.what = format!(
            "<svc>-nearest name of service {key}: the nearest tier of its members with min-ready ready endpoints"
        );
        out.nearest = Some(nearest_view(nearest, &plan, &sums));
        if let (Nearest::Tier(t), Some(now)) = (nearest, plan.chosen)
            && t != now
        {
            out.notes.push(format!("the ranking has moved to tier {now} since the answer was built; the next rebuild (within a second) answers it"));
        }
    }
    for r in &plan.members {
        let answer = match nearest {
            Nearest::No => union_answer(cx, r, fail_open),
            Nearest::Tier(t) => tier_answer(cx, r, t, &sums, min),
            Nearest::Union if matches!(r.why, Why::Refused | Why::Unhealthy) => {
                union_answer(cx, r, fail_open)
            }
            Nearest::Union => (
                true,
                format!(
                    "fail open: no tier has min-ready {min}, so the federated union is answered"
                ),
            ),
        };
        out.members.push(row(cx, r.cluster, Some(r), answer));
    }
    federated_notes(cx, out, fail_open);
}

/// Notes every federated name may carry.
fn federated_notes(cx: &Cx<'_>, out: &mut Explanation, fail_open: bool) {
    let s = &cx.snap.settings;
    if fail_open {
        out.notes.push(format!(
            "fail open: every member is unhealthy, so the last-known union is answered (TTL at most {}s)",
            s.stale_ttl
        ));
    }
    if s.srv_priority_tiers {
        out.notes
            .push("SRV priorities follow tiers: 10 × the tier of the target's cluster".to_owned());
    }
}

/// The rule in force.
fn rule_view(plan: &Plan<'_>) -> RuleView {
    RuleView {
        order: plan.rule.order.as_ref().map(|order| {
            order
                .iter()
                .map(|item| match item {
                    OrderItem::Cluster(c) => c.to_string(),
                    OrderItem::Rest => "*".to_owned(),
                })
                .collect()
        }),
        min_ready: plan.rule.min_ready,
        from: plan.rule_from.as_deref().map(str::to_owned),
    }
}

/// Ready endpoints per tier.
fn tier_sums(plan: &Plan<'_>) -> BTreeMap<u32, u64> {
    let mut sums = BTreeMap::new();
    for m in &plan.members {
        if let Some(t) = m.tier {
            *sums.entry(t).or_default() += m.ready;
        }
    }
    sums
}

/// Which tier a nearest name answers, in words.
fn nearest_view(nearest: Nearest, plan: &Plan<'_>, sums: &BTreeMap<u32, u64>) -> NearestView {
    let min = plan.rule.min_ready;
    match nearest {
        Nearest::Tier(t) => {
            let names: Vec<&str> = plan
                .members
                .iter()
                .filter(|m| m.tier == Some(t))
                .map(|m| &*m.cluster.name)
                .collect();
            NearestView {
                tier: Some(t),
                why: format!(
                    "tier {t} ({}): {} ready, min-ready {min}",
                    names.join(", "),
                    sums.get(&t).copied().unwrap_or(0)
                ),
            }
        }
        Nearest::Union | Nearest::No => NearestView {
            tier: None,
            why: format!(
                "fail open: no tier has min-ready {min} ready endpoints, so the federated union is answered"
            ),
        },
    }
}

/// In or out of a federated union.
fn union_answer(cx: &Cx<'_>, r: &Ranked<'_>, fail_open: bool) -> (bool, String) {
    let (answered, why) = match r.why {
        Why::Refused => (
            false,
            "refused by its budget: none of it is held".to_owned(),
        ),
        Why::Unhealthy if fail_open => (
            true,
            "fail open: every member is unhealthy, so all are answered".to_owned(),
        ),
        Why::Unhealthy => (false, format!("left out: {}", health(r.cluster, cx))),
        _ if r.stale => (
            true,
            "stale but within the grace: its last-known endpoints are answered".to_owned(),
        ),
        _ => (true, "a healthy member".to_owned()),
    };
    (answered, with_ready(answered, r.ready, why))
}

/// In or out of a nearest name that answers tier `t`.
fn tier_answer(
    cx: &Cx<'_>,
    r: &Ranked<'_>,
    t: u32,
    sums: &BTreeMap<u32, u64>,
    min: u32,
) -> (bool, String) {
    match (r.why, r.tier) {
        (Why::Refused | Why::Unhealthy, _) => union_answer(cx, r, false),
        (_, Some(x)) if x == t => (
            true,
            with_ready(true, r.ready, format!("tier {t} is answered")),
        ),
        (_, Some(x)) if x < t => (
            false,
            format!(
                "tier {x} has {} ready, fewer than min-ready {min}",
                sums.get(&x).copied().unwrap_or(0)
            ),
        ),
        (_, Some(_)) => (false, format!("tier {t} is nearer and has enough ready")),
        (_, None) => (
            false,
            "not in the failover order: only a fail-open union answers it".to_owned(),
        ),
    }
}

/// `why`, saying so when an answered member adds no endpoint.
fn with_ready(answered: bool, ready: u64, why: String) -> String {
    if answered && ready == 0 {
        format!("{why} (no ready endpoints: adds nothing)")
    } else {
        why
    }
}

/// The MCS name `<svc>`: the members a ServiceExport makes (KEP-1645).
pub(super) fn mcs(cx: &Cx<'_>, out: &mut Explanation, entry: &Entry, key: &ObjectKey) {
    out.kind = Kind::Mcs;
    out.service = Some(key.to_string());
    out.what = format!("MCS clusterset name of service {key}: its ServiceExports' members (--mcs)");
    let fail_open = matches!(
        entry.origin,
        Origin::Federated {
            fail_open: true,
            ..
        }
    );
    let members = mcs_members(cx.set, key);
    let headless = members.first().map(|m| m.service.headless);
    let build = cx.build();
    for m in &members {
        let (c, svc) = (m.cluster, m.service);
        let answer = if Some(svc.headless) != headless {
            let kind = |h: bool| if h { "Headless" } else { "ClusterSetIP" };
            (
                false,
                format!(
                    "its Service is {}, the oldest export's {}: left out",
                    kind(svc.headless),
                    kind(!svc.headless)
                ),
            )
        } else if svc.refused {
            (
                false,
                "refused by its budget: none of it is held".to_owned(),
            )
        } else if fail_open {
            (
                true,
                "fail open: every member is unhealthy, so all are answered".to_owned(),
            )
        } else if federation_eligible(&c.health, &build) {
            (
                true,
                format!("a member, pods named under cluster id {}", c.mcs_id()),
            )
        } else {
            (false, format!("left out: {}", health(c, cx)))
        };
        out.members
            .push(plain_row(cx, c, ready_of(c, svc, key), answer));
    }
    for c in cx.set.iter() {
        let Some(svc) = c.services.get(key).filter(|s| s.mcs.is_some()) else {
            continue;
        };
        if members.iter().any(|m| m.cluster.name == c.name) {
            continue;
        }
        let holder = cx
            .set
            .mcs_id_holder(c.mcs_id())
            .map_or("another cluster", |h| &*h.name);
        let why = format!(
            "its cluster id {} is held by {holder}, known first",
            c.mcs_id()
        );
        out.members
            .push(plain_row(cx, c, ready_of(c, svc, key), (false, why)));
    }
    mcs_import_note(cx, out, key, headless);
}

/// The local ServiceImport's clusterset IPs answer a ClusterSetIP name.
fn mcs_import_note(cx: &Cx<'_>, out: &mut Explanation, key: &ObjectKey, headless: Option<bool>) {
    let import = cx
        .set
        .iter()
        .find(|c| c.local)
        .and_then(|c| c.imports.get(key))
        .filter(|i| !i.ips.is_empty() && headless == Some(false));
    if let Some(import) = import {
        let ips: Vec<String> = import.ips.iter().map(ToString::to_string).collect();
        out.notes.push(format!(
            "answered by the local ServiceImport's clusterset IP {}; the members decide its ports and whether it exists",
            ips.join(", ")
        ));
    }
}

/// The members as an aligned table.
pub(super) fn table(members: &[MemberView]) -> String {
    let header = [
        "CLUSTER", "PLACE", "TIER", "HEALTH", "READY", "ANSWER", "WHY",
    ];
    let rows: Vec<[String; 7]> = members
        .iter()
        .map(|m| {
            let place = crate::vocab::place::Place {
                region: m.region.as_deref().map(Into::into),
                zone: m.zone.as_deref().map(Into::into),
            };
            let from = match m.place_from.as_str() {
                "configured" => crate::vocab::place::PlaceFrom::Configured,
                "cluster-property" => crate::vocab::place::PlaceFrom::Property,
                _ => crate::vocab::place::PlaceFrom::Unknown,
            };
            let tier = match (m.tier, &m.ranked) {
                (Some(t), Some(r)) => format!("{t}: {r}"),
                (None, Some(r)) => format!("-: {r}"),
                (_, None) => "-".to_owned(),
            };
            [
                format!("{}{}", m.cluster, if m.local { " (local)" } else { "" }),
                place_words(&place, from)
                    .trim_start_matches("place ")
                    .to_owned(),
                tier,
                m.health.clone(),
                m.ready.to_string(),
                if m.answered { "in" } else { "out" }.to_owned(),
                m.why.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; 7]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<w$}  ");
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(header);
    for r in &rows {
        line(r.each_ref().map(String::as_str));
    }
    out
}
