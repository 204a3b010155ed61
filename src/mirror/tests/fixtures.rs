//! Mirror objects written as JSON in tests, and back: the tests state
//! objects the way the API sends them, and compare what we write as the
//! JSON the API is sent.
//!
//! Test-only.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::Object;
use crate::k8s::crd;

/// `kind` and `apiVersion` of a JSON object.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Types {
    kind: String,
    #[serde(default)]
    api_version: String,
}

/// The object `v` states (its `kind` says which; a ServiceImport takes the
/// version of its `apiVersion`). Panics on a fixture that is not one.
pub(crate) fn object(v: Value) -> Object {
    let types = Types::deserialize(&v).expect("kind");
    let decoded = match types.kind.as_str() {
        "Service" => serde_json::from_value(v).map(Object::Service),
        "EndpointSlice" => serde_json::from_value(v).map(Object::EndpointSlice),
        "ServiceImport" => {
            let version = types.api_version.rsplit('/').next().unwrap_or_default();
            let dynamic = serde_json::from_value(v).expect("a dynamic object");
            return Object::ServiceImport {
                version: Arc::from(version),
                import: crd::from_dynamic(dynamic).expect("a ServiceImport"),
            };
        }
        other => panic!("no mirror kind {other}"),
    };
    decoded.expect("a fixture of its kind")
}

/// `o` as the JSON the API is sent.
pub(crate) fn json(o: &Object) -> Value {
    o.to_json().expect("encodes")
}

/// `o` changed as JSON by `edit`.
pub(crate) fn edited(o: &Object, edit: impl FnOnce(&mut Value)) -> Object {
    let mut v = json(o);
    edit(&mut v);
    object(v)
}
