//! The status conditions we keep on the local cluster's own ServiceExports
//! (`--mcs`; KEP-1645, `docs/mcs.md` §1): `Valid` (a Service of the
//! export's namespace/name exists here) and `Conflict` (the members
//! disagree on the service's type or ports, by the DNS side's rules,
//! [`crate::model::entry::mcs::conflicts`]: the oldest export wins).
//!
//! Owns the condition texts and when a write is due: only when a condition
//! of ours differs in status, reason or message, so a pass with nothing new
//! writes nothing; `lastTransitionTime` moves only when the status does.
//! The body is a server-side apply of `status.conditions` alone: other
//! managers' conditions (a `Ready` of another implementation) and the rest
//! of the export are never touched. Pure: the time is an input.

use serde_json::{Value, json};

use crate::model::cluster::ClusterSet;
use crate::model::entry::mcs::conflicts;
use crate::model::objects::ObjectKey;

/// Condition type: the export is valid.
pub const VALID: &str = "Valid";
/// Condition type: the members disagree.
pub const CONFLICT: &str = "Conflict";

/// One condition as we want it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Want {
    kind: &'static str,
    status: bool,
    reason: &'static str,
    message: String,
}

fn wanted(set: &ClusterSet, key: &ObjectKey) -> [Want; 2] {
    let has_service = set
        .iter()
        .find(|c| c.local)
        .is_some_and(|c| c.services.contains_key(key));
    let valid = if has_service {
        Want {
            kind: VALID,
            status: true,
            reason: "Valid",
            message: format!("Service {key} is exported"),
        }
    } else {
        Want {
            kind: VALID,
            status: false,
            reason: "NoService",
            message: format!("no Service {key} in this cluster"),
        }
    };
    let found = conflicts(set, key);
    let join = |v: &[std::sync::Arc<str>]| v.join(", ");
    let mut texts = Vec::new();
    if !found.type_mismatch.is_empty() {
        texts.push(format!(
            "the Service type differs from the oldest export's in {}, which are left out",
            join(&found.type_mismatch)
        ));
    }
    if !found.port_mismatch.is_empty() {
        texts.push(format!(
            "ports differ from the oldest export's in {}; the oldest export's definitions are used",
            join(&found.port_mismatch)
        ));
    }
    let conflict = match (found.type_mismatch.is_empty(), texts.is_empty()) {
        (_, true) => Want {
            kind: CONFLICT,
            status: false,
            reason: "NoConflicts",
            message: "no conflicts".to_owned(),
        },
        (false, false) => Want {
            kind: CONFLICT,
            status: true,
            reason: "TypeConflict",
            message: texts.join("; "),
        },
        (true, false) => Want {
            kind: CONFLICT,
            status: true,
            reason: "PortConflict",
            message: texts.join("; "),
        },
    };
    [valid, conflict]
}

fn status_text(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// The export's own condition of type `kind`, if any.
fn existing<'v>(export: &'v Value, kind: &str) -> Option<&'v Value> {
    export
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

fn same(have: &Value, want: &Want) -> bool {
    let field = |f: &str| have.get(f).and_then(Value::as_str);
    field("status") == Some(status_text(want.status))
        && field("reason") == Some(want.reason)
        && field("message") == Some(want.message.as_str())
}

/// The server-side apply body that brings the conditions of ServiceExport
/// `export` (as listed) to what `set` says, `now` (RFC 3339) dating a
/// status that changes; `None` when they are already so, or the export has
/// no name.
pub fn export_status(set: &ClusterSet, export: &Value, now: &str) -> Option<Value> {
    let meta = |f: &str| export.pointer(&format!("/metadata/{f}"))?.as_str();
    let (namespace, name) = (meta("namespace")?, meta("name")?);
    let api_version = export.get("apiVersion")?.as_str()?;
    let key = ObjectKey::new(namespace, name);
    let want = wanted(set, &key);
    if want
        .iter()
        .all(|w| existing(export, w.kind).is_some_and(|h| same(h, w)))
    {
        return None;
    }
    let generation = export
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let conditions: Vec<Value> = want
        .iter()
        .map(|w| {
            let since = existing(export, w.kind)
                .filter(|h| h.get("status").and_then(Value::as_str) == Some(status_text(w.status)))
                .and_then(|h| h.get("lastTransitionTime")?.as_str())
                .unwrap_or(now);
            let mut c = json!({
                "type": w.kind,
                "status": status_text(w.status),
                "reason": w.reason,
                "message": w.message,
                "lastTransitionTime": since,
            });
            if let Some(g) = generation {
                c["observedGeneration"] = json!(g);
            }
            c
        })
        .collect();
    Some(json!({
        "apiVersion": api_version,
        "kind": "ServiceExport",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"conditions": conditions},
    }))
}

#[cfg(test)]
mod tests;
