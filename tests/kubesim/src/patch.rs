//! The three non-apply patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
//! Kubernetes strategic merge patch for the built-in kinds kubesim serves.
//!
//! It owns turning (stored object, patch body) into the patched object. It must not check
//! resourceVersions or store anything; server-side apply lives in `ssa`.

use serde_json::{Map, Value};

use crate::status::ApiError;

/// The patch formats, by their `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    /// `application/json-patch+json`
    Json,
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply)
    Apply,
}

impl PatchType {
    /// Parses a `Content-Type` value.
    pub(crate) fn from_content_type(ct: &str) -> Option<PatchType> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Applies a JSON, merge or strategic patch to `target`. `merge_key` says, for a dotted path,
/// which field keys a strategic-merge list (None: the list is replaced).
pub(crate) fn apply_patch(
    target: &Value,
    ty: PatchType,
    body: &[u8],
    merge_key: &dyn Fn(&str) -> Option<&'static str>,
) -> Result<Value, ApiError> {
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    match ty {
        PatchType::Json => {
            // kube decodes any list of objects and fails bad operations when applying them (422).
            let applied_later = patch
                .as_array()
                .is_some_and(|ops| ops.iter().all(Value::is_object));
            let ops: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
                let message =
                    format!("the server rejected our request due to an error in our request: {e}");
                if applied_later {
                    ApiError::invalid_patch(message)
                } else {
                    ApiError::bad_request(message)
                }
            })?;
            let mut out = target.clone();
            json_patch::patch(&mut out, &ops).map_err(|e| {
                ApiError::invalid_patch(format!(
                    "the server rejected our request due to an error in our request: {e}"
                ))
            })?;
            Ok(out)
        }
        PatchType::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(format!(
                    "error decoding patch: {}",
                    not_a_map(&patch)
                )));
            }
            let mut out = target.clone();
            json_patch::merge(&mut out, &patch);
            Ok(out)
        }
        PatchType::Strategic => {
            let Value::Object(p) = patch else {
                return Err(ApiError::bad_request(not_a_map(&patch)));
            };
            let mut out = target.clone();
            strategic(&mut out, &p, "", merge_key);
            Ok(out)
        }
        PatchType::Apply => Err(ApiError::internal(
            "apply patches go through server-side apply",
        )),
    }
}

/// Go's `json.Unmarshal` error for a non-object patch decoded into a map.
fn not_a_map(patch: &Value) -> String {
    let kind = match patch {
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Null | Value::Object(_) => "object",
    };
    format!("json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}")
}

fn strategic(
    target: &mut Value,
    patch: &Map<String, Value>,
    path: &str,
    merge_key: &dyn Fn(&str) -> Option<&'static str>,
) {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replaced = patch.clone();
        replaced.remove("$patch");
        *target = Value::Object(replaced);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in patch {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(gone)) = (t.get_mut(field), v) {
                list.retain(|x| !gone.contains(x));
            }
            continue;
        }
        let child = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Object(pm) => {
                let entry = t.entry(k.clone()).or_insert(Value::Null);
                strategic(entry, pm, &child, merge_key);
            }
            Value::Array(items) => match (merge_key(&child), t.get_mut(k)) {
                (Some(mk), Some(Value::Array(existing))) => {
                    merge_list(existing, items, mk, &child, merge_key);
                }
                _ => {
                    let kept: Vec<Value> = items
                        .iter()
                        .filter(|i| i.get("$patch").and_then(Value::as_str) != Some("delete"))
                        .cloned()
                        .collect();
                    t.insert(k.clone(), Value::Array(kept));
                }
            },
            scalar => {
                t.insert(k.clone(), scalar.clone());
            }
        }
    }
}

/// What identifies a merge-list element: its merge key, or itself for a primitive.
fn list_key<'a>(v: &'a Value, mk: &str) -> Option<&'a Value> {
    if v.is_object() { v.get(mk) } else { Some(v) }
}

fn merge_list(
    existing: &mut Vec<Value>,
    items: &[Value],
    mk: &str,
    path: &str,
    merge_key: &dyn Fn(&str) -> Option<&'static str>,
) {
    // Deletions first, as kube's mergeSliceWithSpecialElements does; the rest is ordered
    // relative to what is left.
    for item in items {
        if item.get("$patch").and_then(Value::as_str) == Some("delete")
            && let Some(kv) = item.get(mk)
        {
            existing.retain(|e| e.get(mk) != Some(kv));
        }
    }
    let original = existing.clone();
    for item in items {
        match item {
            Value::Object(pm) => {
                let Some(kv) = pm.get(mk) else { continue };
                let pos = existing.iter().position(|e| e.get(mk) == Some(kv));
                if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
                    continue;
                }
                match pos {
                    Some(i) => strategic(&mut existing[i], pm, path, merge_key),
                    None => {
                        let mut fresh = Value::Object(Map::new());
                        strategic(&mut fresh, pm, path, merge_key);
                        existing.push(fresh);
                    }
                }
            }
            // A primitive list with a merge strategy (finalizers) is a set union.
            scalar => {
                if !existing.contains(scalar) {
                    existing.push(scalar.clone());
                }
            }
        }
    }
    // kube's normalizeElementOrder: the patch's elements in patch order, the others in their
    // old order, each of those before the first patch element it came before in the old list
    // (so elements new to the list come ahead of the old ones that follow them).
    let patch_keys: Vec<&Value> = items
        .iter()
        .filter(|i| i.get("$patch").is_none())
        .filter_map(|i| list_key(i, mk))
        .collect();
    let (mut from_patch, server_only): (Vec<Value>, Vec<Value>) = std::mem::take(existing)
        .into_iter()
        .partition(|e| list_key(e, mk).is_some_and(|k| patch_keys.contains(&k)));
    from_patch
        .sort_by_key(|e| list_key(e, mk).and_then(|k| patch_keys.iter().position(|p| *p == k)));
    let old_pos = |e: &Value| {
        list_key(e, mk).and_then(|k| original.iter().position(|o| list_key(o, mk) == Some(k)))
    };
    let mut left = server_only.into_iter().peekable();
    let mut right = from_patch.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!((old_pos(l), old_pos(r)), (Some(a), Some(b)) if a < b),
        };
        existing.extend(if take_left { left.next() } else { right.next() });
    }
}

/// Strategic-merge keys of the built-in kinds kubesim serves (from their OpenAPI
/// `x-kubernetes-patch-merge-key`). `"$set"` marks a primitive list merged as a set.
pub(crate) fn merge_key_for(kind: &str, path: &str) -> Option<&'static str> {
    match (kind, path) {
        (_, "metadata.ownerReferences") => Some("uid"),
        (_, "metadata.finalizers") => Some("$set"),
        ("Service", "spec.ports") => Some("port"),
        ("Service" | "Namespace", "status.conditions") => Some("type"),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
