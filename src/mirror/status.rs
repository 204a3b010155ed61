//! The status conditions we keep on the local cluster's own ServiceExports
//! (`--mcs`; KEP-1645, `docs/mcs.md` §1): `Valid` (a Service of the
//! export's namespace/name exists here and is not `ExternalName`) and
//! `Conflict` (the members disagree on anything the KEP resolves, by the
//! DNS side's rules, [`crate::model::entry::mcs::conflicts`]: the
//! defining export wins).
//!
//! Owns the condition texts and when a write is due: only when a condition
//! of ours differs in status, reason or message, so a pass with nothing new
//! writes nothing; `lastTransitionTime` moves only when the status does.
//! The body is a server-side apply of `status.conditions` alone: other
//! managers' conditions (a `Ready` of another implementation) and the rest
//! of the export are never touched. Pure: the time is an input.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::k8s::crd::{ExportCondition, ServiceExport, ServiceExportStatus};

use crate::model::cluster::ClusterSet;
use crate::model::entry::mcs::{Conflicts, conflicts};
use crate::model::objects::ObjectKey;

/// Condition type: the export is valid.
pub(crate) const VALID: &str = "Valid";
/// Condition type: the members disagree.
pub(crate) const CONFLICT: &str = "Conflict";

/// One condition as we want it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Want {
    kind: &'static str,
    status: bool,
    reason: String,
    message: String,
}

fn wanted(set: &ClusterSet, key: &ObjectKey) -> [Want; 2] {
    let local = set.iter().find(|c| c.local);
    let has_service = local.is_some_and(|c| c.services.contains_key(key));
    let external_name = local.is_some_and(|c| c.external_names.contains(key));
    let (status, reason, message) = match (has_service, external_name) {
        (true, _) => (true, "Valid", format!("Service {key} is exported")),
        (false, true) => (
            false,
            "InvalidServiceType",
            format!("Service {key} is of type ExternalName, which has no endpoints to export"),
        ),
        (false, false) => (
            false,
            "NoService",
            format!("no Service {key} in this cluster"),
        ),
    };
    let valid = Want {
        kind: VALID,
        status,
        reason: reason.to_owned(),
        message,
    };
    [valid, conflict_condition(&conflicts(set, key))]
}

/// The `Conflict` condition: true on every export of the service while the
/// members disagree on anything ([`Conflicts`]), with mcs-api's reasons
/// joined by commas as its API says, and a message naming the clusters and
/// the export that defines the service.
fn conflict_condition(found: &Conflicts) -> Want {
    if found.none() {
        return Want {
            kind: CONFLICT,
            status: false,
            reason: "NoConflicts".to_owned(),
            message: "no conflicts".to_owned(),
        };
    }
    let definer = found.definer.as_deref().unwrap_or("?");
    let reason: Vec<&str> = found.found.iter().map(|(d, _)| d.reason()).collect();
    let message: Vec<String> = found
        .found
        .iter()
        .map(|(d, clusters)| d.text(definer, clusters))
        .collect();
    Want {
        kind: CONFLICT,
        status: true,
        reason: reason.join(","),
        message: message.join("; "),
    }
}

fn status_text(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// The export's own condition of type `kind`, if any.
fn existing<'e>(export: &'e ServiceExport, kind: &str) -> Option<&'e ExportCondition> {
    export
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_.as_deref() == Some(kind))
}

fn same(have: &ExportCondition, want: &Want) -> bool {
    have.status.as_deref() == Some(status_text(want.status))
        && have.reason.as_deref() == Some(want.reason.as_str())
        && have.message.as_deref() == Some(want.message.as_str())
}

/// The server-side apply body that brings the conditions of ServiceExport
/// `export` (as listed) to what `set` says, `now` (RFC 3339) dating a
/// status that changes; `None` when they are already so, or the export has
/// no name. The body holds the export's name and namespace and its
/// conditions, nothing else.
pub(crate) fn export_status(
    set: &ClusterSet,
    export: &ServiceExport,
    now: &str,
) -> Option<ServiceExport> {
    let meta = &export.metadata;
    let (namespace, name) = (meta.namespace.as_deref()?, meta.name.as_deref()?);
    let key = ObjectKey::new(namespace, name);
    let want = wanted(set, &key);
    if want
        .iter()
        .all(|w| existing(export, w.kind).is_some_and(|h| same(h, w)))
    {
        return None;
    }
    let conditions: Vec<ExportCondition> = want
        .iter()
        .map(|w| {
            let since = existing(export, w.kind)
                .filter(|h| h.status.as_deref() == Some(status_text(w.status)))
                .and_then(|h| h.last_transition_time.as_deref())
                .unwrap_or(now);
            ExportCondition {
                type_: Some(w.kind.to_owned()),
                status: Some(status_text(w.status).to_owned()),
                reason: Some(w.reason.clone()),
                message: Some(w.message.clone()),
                last_transition_time: Some(since.to_owned()),
                observed_generation: meta.generation,
            }
        })
        .collect();
    Some(ServiceExport {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Default::default(),
        status: Some(ServiceExportStatus {
            conditions: Some(conditions),
        }),
    })
}

#[cfg(test)]
mod tests;
