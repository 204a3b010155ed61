//! The three non-apply patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
//! Kubernetes strategic merge patch for the built-in kinds kubesim serves.
//!
//! It owns turning (stored object, patch body) into the patched object. It must not check
//! resourceVersions or store anything; server-side apply lives in `ssa`.

use serde_json::{Map, Value};

use crate::status::ApiError;

/// The patch formats, by their `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
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
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
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
pub fn apply_patch(
    target: &Value,
    ty: PatchType,
    body: &[u8],
    merge_key: &dyn Fn(&str) -> Option<&'static str>,
) -> Result<Value, ApiError> {
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    match ty {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
                ApiError::bad_request(format!(
                    "the server rejected our request due to an error in our request: {e}"
                ))
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
                return Err(ApiError::bad_request(
                    "json: cannot unmarshal non-object into Go value of type map[string]interface {}",
                ));
            }
            let mut out = target.clone();
            json_patch::merge(&mut out, &patch);
            Ok(out)
        }
        PatchType::Strategic => {
            let Value::Object(p) = patch else {
                return Err(ApiError::bad_request(
                    "json: cannot unmarshal non-object into Go value of type map[string]interface {}",
                ));
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
                    merge_list(existing, items, mk, &child, merge_key)
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

fn merge_list(
    existing: &mut Vec<Value>,
    items: &[Value],
    mk: &str,
    path: &str,
    merge_key: &dyn Fn(&str) -> Option<&'static str>,
) {
    for item in items {
        match item {
            Value::Object(pm) => {
                let Some(kv) = pm.get(mk) else { continue };
                let pos = existing.iter().position(|e| e.get(mk) == Some(kv));
                if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
                    if let Some(i) = pos {
                        existing.remove(i);
                    }
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
}

/// Strategic-merge keys of the built-in kinds kubesim serves (from their OpenAPI
/// `x-kubernetes-patch-merge-key`). `"$set"` marks a primitive list merged as a set.
pub fn merge_key_for(kind: &str, path: &str) -> Option<&'static str> {
    match (kind, path) {
        (_, "metadata.ownerReferences") => Some("uid"),
        (_, "metadata.finalizers") => Some("$set"),
        ("Service", "spec.ports") => Some("port"),
        _ => None,
    }
}
