//! Names that are not there, and names several services want: which
//! services could make a label exist (docs/architecture.md, decision 7:
//! `<svc>-<cluster>`, `<svc>-federated`, `<svc>-nearest`, the MCS `<svc>`),
//! and what each of them lacks.

use super::{Cx, Explanation, Kind};
use crate::model::cluster::Cluster;
use crate::model::entry::federated_members;
use crate::model::objects::ObjectKey;
use crate::model::{Entry, Origin};
use crate::vocab::name::{FEDERATED, NEAREST};

/// Each cluster whose `<svc>-<cluster>` could be `label`, with that `<svc>`
/// (labels are looked up, never split on `-`: several may fit).
fn per_cluster_claims<'a>(
    cx: &'a Cx<'_>,
    label: &'a str,
) -> impl Iterator<Item = (&'a Cluster, &'a str)> + 'a {
    cx.set.iter().filter_map(move |c| {
        let svc = label.strip_suffix(&*c.name)?.strip_suffix('-')?;
        Some((c, svc))
    })
}

/// Explains why there is no entry at `key` (`<label>.<ns>`).
pub(super) fn explain(cx: &Cx<'_>, out: &mut Explanation, key: &str) {
    out.kind = Kind::Missing;
    let (label, ns) = key.split_once('.').unwrap_or((key, ""));
    out.what = format!("no service name {label} in namespace {ns}");
    let mut why = Vec::new();
    for suffix in [FEDERATED, NEAREST] {
        if let Some(svc) = label.strip_suffix(suffix).and_then(|s| s.strip_suffix('-')) {
            why.push(federated_missing(cx, &ObjectKey::new(ns, svc), suffix));
        }
    }
    for (c, svc) in per_cluster_claims(cx, label) {
        let key = ObjectKey::new(ns, svc);
        why.push(match c.services.get(&key) {
            None => format!("cluster {} exports no service {key}", c.name),
            Some(s) if s.export.is_none() => format!(
                "cluster {}'s service {key} is only a federated member, not exported on its own (ask {svc}-federated)",
                c.name
            ),
            Some(s) if s.headless => format!(
                "cluster {}'s service {key} is headless with no ready endpoint",
                c.name
            ),
            Some(_) => format!(
                "cluster {}'s service {key} is exported but no name is served for it",
                c.name
            ),
        });
    }
    if cx.snap.settings.mcs {
        why.push(mcs_missing(cx, &ObjectKey::new(ns, label)));
    }
    if why.is_empty() {
        why.push(format!(
            "{label} is neither <svc>-<cluster> of a known cluster, nor <svc>-{FEDERATED} or <svc>-{NEAREST}{}",
            if cx.snap.settings.mcs {
                ""
            } else {
                " (MCS names <svc> need --mcs)"
            }
        ));
    }
    out.notes = why;
}

/// Why `<svc>-federated` or `<svc>-nearest` of `key` is not there.
fn federated_missing(cx: &Cx<'_>, key: &ObjectKey, suffix: &str) -> String {
    if federated_members(cx.set, key).next().is_some() {
        return format!(
            "every member of {key} is headless with no ready endpoint: no {suffix} name"
        );
    }
    let exporters: Vec<&str> = cx
        .set
        .iter()
        .filter(|c| c.services.contains_key(key))
        .map(|c| &*c.name)
        .collect();
    if exporters.is_empty() {
        format!(
            "no cluster has a federated member {key} (a Service labelled mirror.linkerd.io/federated=member)"
        )
    } else {
        format!(
            "no cluster federates {key}; it is exported per cluster by {}",
            exporters.join(", ")
        )
    }
}

/// Why the MCS name `<svc>` of `key` is not there.
fn mcs_missing(cx: &Cx<'_>, key: &ObjectKey) -> String {
    let exported = cx
        .set
        .iter()
        .any(|c| c.services.get(key).is_some_and(|s| s.mcs.is_some()));
    if exported {
        format!("the MCS service {key} is headless with no ready endpoint")
    } else {
        format!("no cluster exports {key} with a ServiceExport (MCS)")
    }
}

/// Notes the other services that want the label of `entry` (a collision:
/// the older Service wins, docs/architecture.md, decision 7).
pub(super) fn collisions(cx: &Cx<'_>, out: &mut Explanation, entry: &Entry, label: &str, ns: &str) {
    let mut wants: Vec<String> = Vec::new();
    for (c, svc) in per_cluster_claims(cx, label) {
        if c.services
            .get(&ObjectKey::new(ns, svc))
            .is_some_and(|s| s.export.is_some())
        {
            wants.push(format!("service {ns}/{svc} of cluster {}", c.name));
        }
    }
    for suffix in [FEDERATED, NEAREST] {
        if let Some(svc) = label.strip_suffix(suffix).and_then(|s| s.strip_suffix('-'))
            && federated_members(cx.set, &ObjectKey::new(ns, svc))
                .next()
                .is_some()
        {
            wants.push(format!("the {suffix} name of {ns}/{svc}"));
        }
    }
    let mcs_key = ObjectKey::new(ns, label);
    if cx.snap.settings.mcs
        && cx
            .set
            .iter()
            .any(|c| c.services.get(&mcs_key).is_some_and(|s| s.mcs.is_some()))
    {
        wants.push(format!("the MCS name of {mcs_key}"));
    }
    if wants.len() > 1 {
        let winner = match &entry.origin {
            Origin::Cluster { name, .. } => format!(
                "service {} of cluster {name}",
                out.service.as_deref().unwrap_or("?")
            ),
            Origin::Federated { mcs: true, .. } => "the MCS name".to_owned(),
            Origin::Federated { .. } => "the union".to_owned(),
        };
        out.notes.push(format!(
            "name collision: {} want {}.; {winner} has it (the older Service wins; <svc>-federated and <svc>-nearest always mean the union)",
            wants.join(" and "),
            entry.name,
        ));
    }
}
