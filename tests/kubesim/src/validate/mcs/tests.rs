use serde_json::{Value, json};

use crate::resources::{CLUSTERPROPERTIES, RESOURCES, SERVICEEXPORTS, SERVICEIMPORTS};
use crate::ssa::{self, Schema, SsaError};
use crate::status::Cause;
use crate::validate::{decode, prune_for_version, validate};

/// A cause as (reason, field, message).
type Triple = (String, String, String);

/// Ok, or the error's code and causes.
type Checked = Result<(), (u16, Vec<Triple>)>;

fn export(version: &str) -> Value {
    json!({"apiVersion": format!("multicluster.x-k8s.io/{version}"), "kind": "ServiceExport",
           "metadata": {"name": "web", "namespace": "default"},
           "spec": {"exportedLabels": {"team": "a"}, "exportedAnnotations": {"note": "x"}},
           "status": {"conditions": [{"type": "Valid", "status": "True", "reason": "Exported",
                                      "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
                                      "observedGeneration": 1}]}})
}

fn import(version: &str) -> Value {
    json!({"apiVersion": format!("multicluster.x-k8s.io/{version}"), "kind": "ServiceImport",
           "metadata": {"name": "web", "namespace": "default"},
           "spec": {"type": "ClusterSetIP", "ips": ["10.0.0.1", "fd00::1"],
                    "ipFamilies": ["IPv4", "IPv6"],
                    "ports": [{"name": "http", "protocol": "TCP", "appProtocol": "http", "port": 80}],
                    "sessionAffinity": "ClientIP",
                    "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
                    "internalTrafficPolicy": "Cluster", "trafficDistribution": "PreferClose"},
           "status": {"clusters": [{"cluster": "east"}, {"cluster": "west"}]}})
}

fn property(value: Value) -> Value {
    json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
           "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": value}})
}

/// Decode, then validate: the 422's causes as (reason, field, message), or the other error.
fn check(res: usize, version: &str, body: Value) -> Checked {
    let triple = |c: &Cause| (c.kind.clone(), c.field.clone(), c.message.clone());
    let object = decode(res, version, body)
        .map_err(|e| (e.code, e.causes.iter().map(triple).collect()))?
        .object;
    validate(res, &object, None).map_err(|e| (e.code, e.causes.iter().map(triple).collect()))
}

fn one(reason: &str, field: &str, message: &str) -> Checked {
    Err((422, vec![(reason.into(), field.into(), message.into())]))
}

#[test]
fn every_field_of_every_version_is_kept() {
    for version in ["v1alpha1", "v1beta1"] {
        for (res, body) in [
            (SERVICEEXPORTS, export(version)),
            (SERVICEIMPORTS, import(version)),
        ] {
            let decoded = decode(res, version, body.clone()).unwrap();
            assert_eq!(decoded.unknown, Vec::<String>::new(), "{version}");
            assert_eq!(decoded.object, body, "{version} {}", RESOURCES[res].kind);
            // One schema in every version: a read in the other version prunes nothing.
            let mut read = decoded.object.clone();
            prune_for_version(res, "v1alpha1", &mut read);
            assert_eq!(read, body);
            assert_eq!(check(res, version, body), Ok(()));
        }
    }
    let p = property(json!("east"));
    assert_eq!(
        decode(CLUSTERPROPERTIES, "v1alpha1", p.clone())
            .unwrap()
            .object,
        p
    );
}

#[test]
fn unknown_fields_are_pruned_and_reported() {
    let mut body = import("v1beta1");
    body["spec"]["bogus"] = json!(1);
    body["spec"]["ports"][0]["targetPort"] = json!(8080);
    body["status"]["clusters"][0]["weight"] = json!(2);
    let decoded = decode(SERVICEIMPORTS, "v1beta1", body).unwrap();
    assert_eq!(
        decoded.unknown,
        [
            "spec.bogus",
            "spec.ports[0].targetPort",
            "status.clusters[0].weight"
        ]
    );
    assert_eq!(decoded.object, import("v1beta1"));
    // ClusterProperty's status has no properties: all of it is pruned.
    let mut p = property(json!("east"));
    p["status"] = json!({"observed": "yes"});
    let decoded = decode(CLUSTERPROPERTIES, "v1beta1", {
        let mut p = p.clone();
        p["apiVersion"] = json!("about.k8s.io/v1beta1");
        p
    })
    .unwrap();
    assert_eq!(decoded.object["status"], json!({}));
    assert_eq!(decoded.unknown, ["status.observed"]);
}

#[test]
fn wrong_types_are_422_outside_metadata() {
    let mut body = import("v1beta1");
    body["spec"]["type"] = json!(5);
    assert_eq!(
        check(SERVICEIMPORTS, "v1beta1", body),
        one(
            "FieldValueTypeInvalid",
            "spec.type",
            "Invalid value: \"integer\": spec.type in body must be of type string: \"integer\""
        )
    );
    let mut body = import("v1beta1");
    body["spec"]["ports"][0]["port"] = json!("80");
    assert_eq!(
        check(SERVICEIMPORTS, "v1beta1", body),
        one(
            "FieldValueTypeInvalid",
            "spec.ports[0].port",
            "Invalid value: \"string\": spec.ports[0].port in body must be of type integer: \"string\""
        )
    );
    let mut body = import("v1beta1");
    body["spec"]["ports"] = json!({"port": 80});
    assert_eq!(
        check(SERVICEIMPORTS, "v1beta1", body),
        one(
            "FieldValueTypeInvalid",
            "spec.ports",
            "Invalid value: \"object\": spec.ports in body must be of type array: \"object\""
        )
    );
    let mut body = export("v1alpha1");
    body["spec"]["exportedLabels"]["team"] = json!(true);
    assert_eq!(
        check(SERVICEEXPORTS, "v1alpha1", body),
        one(
            "FieldValueTypeInvalid",
            "spec.exportedLabels.team",
            "Invalid value: \"boolean\": spec.exportedLabels.team in body must be of type string: \"boolean\""
        )
    );
    assert_eq!(
        check(CLUSTERPROPERTIES, "v1alpha1", property(json!(1.5))),
        one(
            "FieldValueTypeInvalid",
            "spec.value",
            "Invalid value: \"number\": spec.value in body must be of type string: \"number\""
        )
    );
    // Metadata is decoded as ObjectMeta, as for every kind: a 400.
    let mut body = export("v1beta1");
    body["metadata"]["labels"] = json!(["a"]);
    let e = decode(SERVICEEXPORTS, "v1beta1", body).unwrap_err();
    assert_eq!(e.code, 400, "{}", e.message);
    assert!(
        e.message
            .starts_with("ServiceExport in version \"v1beta1\" cannot be handled as a ServiceExport: metadata.labels: invalid type: sequence"),
        "{}",
        e.message
    );
}

#[test]
fn schema_rules_are_422() {
    let t = |r: &str, f: &str, m: &str| (r.to_owned(), f.to_owned(), m.to_owned());
    let mut body = import("v1beta1");
    body["spec"] = json!({"type": "LoadBalancer", "ips": ["1.1.1.1", "2.2.2.2", "3.3.3.3"],
                          "ports": [{"name": "http"}]});
    let e = check(SERVICEIMPORTS, "v1beta1", body).unwrap_err();
    assert_eq!(
        e,
        (
            422,
            vec![
                t(
                    "FieldValueNotSupported",
                    "spec.type",
                    "Unsupported value: \"LoadBalancer\": supported values: \"ClusterSetIP\", \"Headless\""
                ),
                t(
                    "FieldValueTooMany",
                    "spec.ips",
                    "Too many: 3: must have at most 2 items"
                ),
                t("FieldValueRequired", "spec.ports[0].port", "Required value"),
            ]
        )
    );
    let mut body = import("v1beta1");
    body["spec"] = json!({});
    let e = check(SERVICEIMPORTS, "v1beta1", body).unwrap_err();
    assert_eq!(
        e.1,
        [
            t("FieldValueRequired", "spec.ports", "Required value"),
            t("FieldValueRequired", "spec.type", "Required value"),
        ]
    );
    // The whole ServiceImport 422 message names every cause.
    let mut body = import("v1beta1");
    body["status"]["clusters"] = json!([{"cluster": "east"}, {}, {"cluster": "east"}]);
    let object = decode(SERVICEIMPORTS, "v1beta1", body).unwrap().object;
    let e = validate(SERVICEIMPORTS, &object, None).unwrap_err();
    assert_eq!(
        e.message,
        "ServiceImport.multicluster.x-k8s.io \"web\" is invalid: [status.clusters[1].cluster: Required value, status.clusters[2]: Duplicate value: map[string]interface {}{\"cluster\":\"east\"}]"
    );

    assert_eq!(
        check(CLUSTERPROPERTIES, "v1alpha1", property(json!(""))),
        one(
            "FieldValueInvalid",
            "spec.value",
            "Invalid value: \"\": spec.value in body should be at least 1 chars long"
        )
    );
    let mut no_value = property(json!("x"));
    no_value["spec"] = json!({});
    assert_eq!(
        check(CLUSTERPROPERTIES, "v1alpha1", no_value),
        one("FieldValueRequired", "spec.value", "Required value")
    );
    // The published CRD has no maxLength (the Go marker is misspelt `Maxlength`).
    let long = "a".repeat(128_001);
    assert_eq!(
        check(CLUSTERPROPERTIES, "v1alpha1", property(json!(long))),
        Ok(())
    );
    // Names are DNS subdomains, as for every custom resource.
    let mut upper = property(json!("x"));
    upper["metadata"]["name"] = json!("Cluster");
    let e = check(CLUSTERPROPERTIES, "v1alpha1", upper).unwrap_err();
    assert_eq!(e.1[0].1, "metadata.name");
}

#[test]
fn conditions_follow_metav1_condition() {
    let t = |r: &str, f: &str, m: &str| (r.to_owned(), f.to_owned(), m.to_owned());
    let mut body = export("v1beta1");
    body["status"]["conditions"] = json!([
        {"type": "Valid", "status": "Maybe", "reason": "9lives", "message": "m",
         "lastTransitionTime": "yesterday", "observedGeneration": -1},
        {"type": "bad type!", "status": "True"},
        {"type": "Valid", "status": "False", "reason": "Conflict", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"},
    ]);
    let e = check(SERVICEEXPORTS, "v1beta1", body).unwrap_err();
    let reason_pattern = "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";
    let type_pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";
    assert_eq!(
        e.1,
        [
            t(
                "FieldValueTypeInvalid",
                "status.conditions[0].lastTransitionTime",
                "Invalid value: \"yesterday\": status.conditions[0].lastTransitionTime in body must be of type date-time: \"yesterday\""
            ),
            t(
                "FieldValueInvalid",
                "status.conditions[0].observedGeneration",
                "Invalid value: -1: status.conditions[0].observedGeneration in body should be greater than or equal to 0"
            ),
            t(
                "FieldValueInvalid",
                "status.conditions[0].reason",
                &format!(
                    "Invalid value: \"9lives\": status.conditions[0].reason in body should match '{reason_pattern}'"
                )
            ),
            t(
                "FieldValueNotSupported",
                "status.conditions[0].status",
                "Unsupported value: \"Maybe\": supported values: \"True\", \"False\", \"Unknown\""
            ),
            t(
                "FieldValueRequired",
                "status.conditions[1].lastTransitionTime",
                "Required value"
            ),
            t(
                "FieldValueRequired",
                "status.conditions[1].message",
                "Required value"
            ),
            t(
                "FieldValueRequired",
                "status.conditions[1].reason",
                "Required value"
            ),
            t(
                "FieldValueInvalid",
                "status.conditions[1].type",
                &format!(
                    "Invalid value: \"bad type!\": status.conditions[1].type in body should match '{type_pattern}'"
                )
            ),
            t(
                "FieldValueDuplicate",
                "status.conditions[2]",
                "Duplicate value: map[string]interface {}{\"type\":\"Valid\"}"
            ),
        ]
    );
    for good in ["Ready", "multicluster.x-k8s.io/Conflict", "a.b-c/X_y.z"] {
        let mut body = export("v1beta1");
        body["status"]["conditions"][0]["type"] = json!(good);
        assert_eq!(check(SERVICEEXPORTS, "v1beta1", body), Ok(()), "{good}");
    }
}

/// Server-side apply follows the CRDs' list types: ServiceImport ports are one atomic value,
/// status.clusters is keyed by cluster.
#[test]
fn apply_follows_the_crd_list_types() {
    let schema = Schema::for_kind("multicluster.x-k8s.io", "ServiceImport");
    let v = "multicluster.x-k8s.io/v1beta1";
    let now = "2026-01-01T00:00:00Z";
    let base = json!({"apiVersion": v, "kind": "ServiceImport",
                      "metadata": {"name": "web", "namespace": "default"}});
    let with = |spec: Value| {
        let mut b = base.clone();
        b["spec"] = spec;
        b
    };
    let a = with(json!({"type": "ClusterSetIP", "ports": [{"port": 80, "protocol": "TCP"}]}));
    let live = ssa::apply(None, &a, "a", false, v, None, now, &schema).unwrap();
    let b = with(json!({"ports": [{"port": 81, "protocol": "TCP"}]}));
    let err = ssa::apply(Some(&live), &b, "b", false, v, None, now, &schema).unwrap_err();
    let SsaError::Conflicts { conflicts, .. } = err else {
        panic!("a conflict: {err:?}")
    };
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].field, ".spec.ports");
    let forced = ssa::apply(Some(&live), &b, "b", true, v, None, now, &schema).unwrap();
    assert_eq!(
        forced["spec"]["ports"],
        json!([{"port": 81, "protocol": "TCP"}])
    );

    let status = |cluster: &str| {
        let mut s = base.clone();
        s["status"] = json!({"clusters": [{"cluster": cluster}]});
        s
    };
    let east = ssa::apply(
        Some(&live),
        &status("east"),
        "east",
        false,
        v,
        Some("status"),
        now,
        &schema,
    )
    .unwrap();
    let both = ssa::apply(
        Some(&east),
        &status("west"),
        "west",
        false,
        v,
        Some("status"),
        now,
        &schema,
    )
    .unwrap();
    assert_eq!(
        both["status"]["clusters"],
        json!([{"cluster": "east"}, {"cluster": "west"}])
    );
}
