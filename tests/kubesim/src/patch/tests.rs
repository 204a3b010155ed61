use serde_json::json;

use super::*;

type Failure = (u16, &'static str, String);

/// (case, patch body, Ok(values at JSON pointers, null for absent) or the Status)
type Case<'a> = (&'a str, &'a str, Result<Vec<(&'a str, Value)>, Failure>);

/// The stored Service every case patches.
fn target() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "web", "namespace": "default",
            "labels": {"app": "web", "tier": "front"},
            "finalizers": ["example.com/a", "example.com/b"],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner-a", "uid": "uid-a"},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner-b", "uid": "uid-b"}
            ]
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {"app": "web"},
            "externalIPs": ["192.0.2.1", "192.0.2.2"],
            "ports": [
                {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}
            ]
        },
        "status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "Init"},
            {"type": "Synced", "status": "True", "reason": "Ok"}
        ]}
    })
}

fn patch(ty: PatchType, body: &str) -> Result<Value, Failure> {
    apply_patch(&target(), ty, body.as_bytes(), &|path| {
        merge_key_for("Service", path)
    })
    .map_err(|e| (e.code, e.reason, e.message))
}

/// Runs each case and compares the values at the given JSON pointers; every other top-level
/// section must be unchanged unless listed.
fn check(ty: PatchType, cases: Vec<Case>) {
    for (case, body, want) in cases {
        match (patch(ty, body), want) {
            (Ok(got), Ok(fields)) => {
                for (pointer, value) in &fields {
                    assert_eq!(
                        got.pointer(pointer),
                        Some(value).filter(|v| !v.is_null()),
                        "{case}: {pointer}"
                    );
                }
                for section in ["/metadata", "/spec", "/status"] {
                    if !fields.iter().any(|(p, _)| p.starts_with(section)) {
                        assert_eq!(
                            got.pointer(section),
                            target().pointer(section),
                            "{case}: {section} untouched"
                        );
                    }
                }
            }
            (got, want) => assert_eq!(got.err(), want.err(), "{case}"),
        }
    }
}

fn fail(code: u16, reason: &'static str, message: &str) -> Failure {
    (code, reason, message.to_owned())
}

#[test]
fn content_types() {
    let cases = [
        ("application/json-patch+json", Some(PatchType::Json)),
        ("application/merge-patch+json", Some(PatchType::Merge)),
        (
            "application/strategic-merge-patch+json",
            Some(PatchType::Strategic),
        ),
        ("application/apply-patch+yaml", Some(PatchType::Apply)),
        ("application/apply-patch+json", Some(PatchType::Apply)),
        (
            "application/merge-patch+json; charset=utf-8",
            Some(PatchType::Merge),
        ),
        (" application/json-patch+json ", Some(PatchType::Json)),
        ("application/json", None),
        ("application/apply-patch+cbor", None),
        ("", None),
    ];
    for (ct, want) in cases {
        assert_eq!(PatchType::from_content_type(ct), want, "{ct:?}");
    }
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of JSON Patch cases
fn json_patch() {
    check(
        PatchType::Json,
        vec![
            (
                "add a label",
                r#"[{"op": "add", "path": "/metadata/labels/env", "value": "prod"}]"#,
                Ok(vec![(
                    "/metadata/labels",
                    json!({"app": "web", "tier": "front", "env": "prod"}),
                )]),
            ),
            (
                "replace inside a list element",
                r#"[{"op": "replace", "path": "/spec/ports/1/port", "value": 8443}]"#,
                Ok(vec![
                    ("/spec/ports/1/port", json!(8443)),
                    ("/spec/ports/0/port", json!(80)),
                ]),
            ),
            (
                "remove a label",
                r#"[{"op": "remove", "path": "/metadata/labels/tier"}]"#,
                Ok(vec![("/metadata/labels", json!({"app": "web"}))]),
            ),
            (
                "append with -",
                r#"[{"op": "add", "path": "/spec/externalIPs/-", "value": "192.0.2.3"}]"#,
                Ok(vec![(
                    "/spec/externalIPs",
                    json!(["192.0.2.1", "192.0.2.2", "192.0.2.3"]),
                )]),
            ),
            (
                "a passing test guards a replace",
                r#"[{"op": "test", "path": "/spec/type", "value": "ClusterIP"},
                    {"op": "replace", "path": "/spec/type", "value": "NodePort"}]"#,
                Ok(vec![("/spec/type", json!("NodePort"))]),
            ),
            (
                "move and copy",
                r#"[{"op": "copy", "from": "/metadata/labels/app", "path": "/metadata/labels/copy"},
                    {"op": "move", "from": "/metadata/labels/tier", "path": "/metadata/labels/moved"}]"#,
                Ok(vec![(
                    "/metadata/labels",
                    json!({"app": "web", "copy": "web", "moved": "front"}),
                )]),
            ),
            ("no operations", "[]", Ok(vec![])),
            (
                "a failing test fails the whole patch",
                r#"[{"op": "replace", "path": "/spec/type", "value": "NodePort"},
                    {"op": "test", "path": "/spec/type", "value": "LoadBalancer"}]"#,
                Err(fail(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request: operation '/1' failed at path '/spec/type': value did not match",
                )),
            ),
            (
                "removing a path that does not exist",
                r#"[{"op": "remove", "path": "/metadata/annotations/x"}]"#,
                Err(fail(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request: operation '/0' failed at path '/metadata/annotations/x': path is invalid",
                )),
            ),
            (
                "an unknown operation fails when applied, as in kube",
                r#"[{"op": "frobnicate", "path": "/spec/type"}]"#,
                Err(fail(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request: unknown variant `frobnicate`, expected one of `add`, `remove`, `replace`, `move`, `copy`, `test`",
                )),
            ),
            (
                "not a list of operations",
                r#"{"op": "add", "path": "/spec/type", "value": "x"}"#,
                Err(fail(
                    400,
                    "BadRequest",
                    "the server rejected our request due to an error in our request: invalid type: map, expected a sequence",
                )),
            ),
            (
                "not JSON",
                "[{",
                Err(fail(
                    400,
                    "BadRequest",
                    "error decoding patch: EOF while parsing an object at line 1 column 2",
                )),
            ),
        ],
    );
}

#[test]
fn json_merge_patch() {
    check(
        PatchType::Merge,
        vec![
            (
                "null removes a key",
                r#"{"metadata": {"labels": {"tier": null}}}"#,
                Ok(vec![("/metadata/labels", json!({"app": "web"}))]),
            ),
            (
                "objects merge",
                r#"{"spec": {"selector": {"tier": "front"}}, "metadata": {"annotations": {"a": "b"}}}"#,
                Ok(vec![
                    ("/spec/selector", json!({"app": "web", "tier": "front"})),
                    ("/metadata/annotations", json!({"a": "b"})),
                    ("/metadata/labels", json!({"app": "web", "tier": "front"})),
                ]),
            ),
            (
                "lists are replaced whole, even Service ports",
                r#"{"spec": {"ports": [{"port": 9090}]}}"#,
                Ok(vec![("/spec/ports", json!([{"port": 9090}]))]),
            ),
            (
                "finalizers are replaced whole",
                r#"{"metadata": {"finalizers": ["example.com/c"]}}"#,
                Ok(vec![("/metadata/finalizers", json!(["example.com/c"]))]),
            ),
            (
                "null for a missing key changes nothing",
                r#"{"spec": {"nothing": null}}"#,
                Ok(vec![("/spec", target()["spec"].clone())]),
            ),
            (
                "null removes a whole object",
                r#"{"spec": {"selector": null}, "status": null}"#,
                Ok(vec![
                    ("/spec/selector", Value::Null),
                    ("/status", Value::Null),
                ]),
            ),
            (
                "strategic directives are plain keys",
                r#"{"spec": {"$patch": "replace"}}"#,
                Ok(vec![
                    ("/spec/$patch", json!("replace")),
                    ("/spec/type", json!("ClusterIP")),
                ]),
            ),
            (
                "a list is not a merge patch",
                r#"[{"op": "add"}]"#,
                Err(fail(
                    400,
                    "BadRequest",
                    "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}",
                )),
            ),
            (
                "nor is a string",
                r#""spec""#,
                Err(fail(
                    400,
                    "BadRequest",
                    "error decoding patch: json: cannot unmarshal string into Go value of type map[string]interface {}",
                )),
            ),
        ],
    );
}

#[test]
fn strategic_merge_of_service_ports_by_port() {
    check(
        PatchType::Strategic,
        vec![
            (
                "a known port is merged in place",
                r#"{"spec": {"ports": [{"port": 443, "targetPort": 9443}]}}"#,
                Ok(vec![(
                    "/spec/ports",
                    json!([
                        {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                        {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 9443}
                    ]),
                )]),
            ),
            (
                "a new port goes first, as kube orders it",
                r#"{"spec": {"ports": [{"name": "alt", "port": 8081}]}}"#,
                Ok(vec![(
                    "/spec/ports",
                    json!([
                        {"name": "alt", "port": 8081},
                        {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                        {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}
                    ]),
                )]),
            ),
            (
                "a new port after a known one stays after it",
                r#"{"spec": {"ports": [{"port": 80, "name": "web"}, {"name": "alt", "port": 8081}]}}"#,
                Ok(vec![(
                    "/spec/ports",
                    json!([
                        {"name": "web", "port": 80, "protocol": "TCP", "targetPort": 8080},
                        {"name": "alt", "port": 8081},
                        {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}
                    ]),
                )]),
            ),
            (
                "$patch: delete removes a port",
                r#"{"spec": {"ports": [{"port": 80, "$patch": "delete"}]}}"#,
                Ok(vec![(
                    "/spec/ports",
                    json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}]),
                )]),
            ),
            (
                "null inside an element removes that field",
                r#"{"spec": {"ports": [{"port": 80, "targetPort": null, "name": null}]}}"#,
                Ok(vec![(
                    "/spec/ports",
                    json!([
                        {"port": 80, "protocol": "TCP"},
                        {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}
                    ]),
                )]),
            ),
            (
                "$setElementOrder is a hint, not content",
                r#"{"spec": {"$setElementOrder/ports": [{"port": 80}, {"port": 443}],
                             "ports": [{"port": 80, "targetPort": 81}]}}"#,
                Ok(vec![
                    ("/spec/ports/0/targetPort", json!(81)),
                    ("/spec/ports/1/targetPort", json!(8443)),
                    ("/spec/$setElementOrder~1ports", Value::Null),
                ]),
            ),
            (
                "a list without a merge key is replaced",
                r#"{"spec": {"externalIPs": ["192.0.2.9"]}}"#,
                Ok(vec![("/spec/externalIPs", json!(["192.0.2.9"]))]),
            ),
        ],
    );
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of strategic-merge cases
fn strategic_merge_of_metadata_and_status() {
    check(
        PatchType::Strategic,
        vec![
            (
                "null removes a label, maps merge",
                r#"{"metadata": {"labels": {"tier": null, "env": "prod"}}}"#,
                Ok(vec![(
                    "/metadata/labels",
                    json!({"app": "web", "env": "prod"}),
                )]),
            ),
            (
                "finalizers merge as a set, new ones first",
                r#"{"metadata": {"finalizers": ["example.com/c", "example.com/a"]}}"#,
                Ok(vec![(
                    "/metadata/finalizers",
                    json!(["example.com/c", "example.com/a", "example.com/b"]),
                )]),
            ),
            (
                "a finalizer after a known one stays after it",
                r#"{"metadata": {"finalizers": ["example.com/b", "example.com/c"]}}"#,
                Ok(vec![(
                    "/metadata/finalizers",
                    json!(["example.com/a", "example.com/b", "example.com/c"]),
                )]),
            ),
            (
                "$deleteFromPrimitiveList removes finalizers",
                r#"{"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a", "example.com/x"]}}"#,
                Ok(vec![("/metadata/finalizers", json!(["example.com/b"]))]),
            ),
            (
                "ownerReferences merge by uid",
                r#"{"metadata": {"ownerReferences": [{"uid": "uid-b", "name": "renamed"}]}}"#,
                Ok(vec![(
                    "/metadata/ownerReferences",
                    json!([
                        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner-a", "uid": "uid-a"},
                        {"apiVersion": "v1", "kind": "ConfigMap", "name": "renamed", "uid": "uid-b"}
                    ]),
                )]),
            ),
            (
                "an ownerReference is deleted by uid",
                r#"{"metadata": {"ownerReferences": [{"uid": "uid-a", "$patch": "delete"}]}}"#,
                Ok(vec![(
                    "/metadata/ownerReferences",
                    json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner-b", "uid": "uid-b"}]),
                )]),
            ),
            (
                "$patch: replace replaces a map",
                r#"{"spec": {"selector": {"$patch": "replace", "run": "web"}}}"#,
                Ok(vec![("/spec/selector", json!({"run": "web"}))]),
            ),
            (
                "status conditions merge by type",
                r#"{"status": {"conditions": [{"type": "Ready", "status": "True", "reason": null}]}}"#,
                Ok(vec![(
                    "/status/conditions",
                    json!([
                        {"type": "Ready", "status": "True"},
                        {"type": "Synced", "status": "True", "reason": "Ok"}
                    ]),
                )]),
            ),
            (
                "a list on a field that has none is set",
                r#"{"metadata": {"annotations": {"a": "b"}}, "spec": {"ipFamilies": ["IPv4"]}}"#,
                Ok(vec![
                    ("/metadata/annotations", json!({"a": "b"})),
                    ("/metadata/labels", json!({"app": "web", "tier": "front"})),
                    ("/spec/ipFamilies", json!(["IPv4"])),
                    ("/spec/type", json!("ClusterIP")),
                ]),
            ),
            (
                "a list is not a strategic merge patch",
                r#"[{"op": "add"}]"#,
                Err(fail(
                    400,
                    "BadRequest",
                    "json: cannot unmarshal array into Go value of type map[string]interface {}",
                )),
            ),
        ],
    );
}

#[test]
fn apply_patches_are_not_handled_here() {
    assert_eq!(
        patch(PatchType::Apply, "{}"),
        Err(fail(
            500,
            "InternalError",
            "Internal error occurred: apply patches go through server-side apply"
        ))
    );
}

#[test]
fn merge_keys() {
    let cases = [
        ("Service", "spec.ports", Some("port")),
        ("Service", "metadata.ownerReferences", Some("uid")),
        ("EndpointSlice", "metadata.ownerReferences", Some("uid")),
        ("ConfigMap", "metadata.finalizers", Some("$set")),
        ("Service", "status.conditions", Some("type")),
        ("Namespace", "status.conditions", Some("type")),
        ("EndpointSlice", "endpoints", None),
        ("EndpointSlice", "ports", None),
        ("Service", "spec.externalIPs", None),
        ("ConfigMap", "spec.ports", None),
        ("Namespace", "spec.finalizers", None),
    ];
    for (kind, path, want) in cases {
        assert_eq!(merge_key_for(kind, path), want, "{kind} {path}");
    }
}
