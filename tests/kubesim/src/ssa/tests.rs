use serde_json::{Value, json};

use super::*;

const T0: &str = "2026-11-21T10:00:00Z";
const T1: &str = "2026-11-21T11:00:00Z";
const T2: &str = "2026-11-21T12:00:00Z";

/// One write in a scenario; every step but an error case's last must succeed.
enum Step {
    Apply {
        manager: &'static str,
        at: &'static str,
        force: bool,
        sub: Option<&'static str>,
        config: Value,
    },
    /// A POST: `update` with no old object.
    Create {
        manager: &'static str,
        at: &'static str,
        object: Value,
    },
    /// A PUT or patch: `update` with the current object changed by a JSON merge patch.
    Update {
        manager: &'static str,
        at: &'static str,
        sub: Option<&'static str>,
        patch: Value,
    },
    /// Replaces the stored object as is, to start from a hand-made state.
    Put(Value),
}

fn apply(manager: &'static str, at: &'static str, config: Value) -> Step {
    Step::Apply {
        manager,
        at,
        force: false,
        sub: None,
        config,
    }
}

fn force(manager: &'static str, at: &'static str, config: Value) -> Step {
    Step::Apply {
        manager,
        at,
        force: true,
        sub: None,
        config,
    }
}

fn apply_status(manager: &'static str, at: &'static str, config: Value) -> Step {
    Step::Apply {
        manager,
        at,
        force: false,
        sub: Some("status"),
        config,
    }
}

fn create(manager: &'static str, at: &'static str, object: Value) -> Step {
    Step::Create {
        manager,
        at,
        object,
    }
}

fn update(manager: &'static str, at: &'static str, patch: Value) -> Step {
    Step::Update {
        manager,
        at,
        sub: None,
        patch,
    }
}

fn update_status(manager: &'static str, at: &'static str, patch: Value) -> Step {
    Step::Update {
        manager,
        at,
        sub: Some("status"),
        patch,
    }
}

/// RFC 7386, enough to express the edits clients make.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

fn api_version_of(v: &Value) -> String {
    v["apiVersion"].as_str().unwrap_or("v1").to_owned()
}

/// Runs the steps in order, returning the stored object or the first error.
fn run(schema: &Schema, steps: Vec<Step>) -> Result<Option<Value>, SsaError> {
    let mut live: Option<Value> = None;
    for step in steps {
        live = Some(match step {
            Step::Apply {
                manager,
                at,
                force,
                sub,
                config,
            } => super::apply(
                live.as_ref(),
                &config,
                manager,
                force,
                &api_version_of(&config),
                sub,
                at,
                schema,
            )?,
            Step::Create {
                manager,
                at,
                object,
            } => super::update(
                None,
                &object,
                manager,
                &api_version_of(&object),
                None,
                at,
                schema,
            )?,
            Step::Update {
                manager,
                at,
                sub,
                patch,
            } => {
                let old = live.clone().expect("an update needs an object");
                let mut new = old.clone();
                merge_patch(&mut new, &patch);
                super::update(
                    Some(&old),
                    &new,
                    manager,
                    &api_version_of(&old),
                    sub,
                    at,
                    schema,
                )?
            }
            Step::Put(object) => object,
        });
    }
    Ok(live)
}

fn entry(
    manager: &str,
    operation: &str,
    api_version: &str,
    time: Option<&str>,
    fields: Value,
) -> Value {
    let mut e = json!({"manager": manager, "operation": operation, "apiVersion": api_version,
                       "fieldsType": "FieldsV1", "fieldsV1": fields});
    if let Some(t) = time {
        e["time"] = json!(t);
    }
    e
}

fn with_managed_fields(mut obj: Value, entries: Vec<Value>) -> Value {
    obj["metadata"]["managedFields"] = Value::Array(entries);
    obj
}

fn service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"type": "ClusterIP", "selector": {"app": "web"},
                 "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}]}
    })
}

fn service_with(patch: Value) -> Value {
    let mut s = service();
    merge_patch(&mut s, &patch);
    s
}

/// What applying [`service`] owns.
fn service_fields() -> Value {
    json!({
        "f:metadata": {"f:labels": {"f:app": {}}},
        "f:spec": {
            "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
            "f:selector": {}, "f:type": {}
        }
    })
}

fn named(kind: &str, extra: Value) -> Value {
    let mut v = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "web", "namespace": "default"}});
    merge_patch(&mut v, &extra);
    v
}

/// Not built with [`named`]: a merge patch would read the null as "delete".
fn null_affinity() -> Value {
    let mut v = named("Service", json!({}));
    v["spec"] = json!({"sessionAffinity": null});
    v
}

struct Scenario {
    name: &'static str,
    schema: Schema,
    steps: Vec<Step>,
    want: Value,
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of apply scenarios
fn apply_scenarios() {
    let port = |p: u16, target: u16| json!({"port": p, "protocol": "TCP", "targetPort": target});
    let cases = vec![
        Scenario {
            name: "apply creates the object and owns exactly the applied fields",
            schema: Schema::for_kind("", "Service"),
            steps: vec![apply("kubectl", T0, service())],
            want: with_managed_fields(
                service(),
                vec![entry("kubectl", "Apply", "v1", Some(T0), service_fields())],
            ),
        },
        Scenario {
            name: "finalizers are v: items, ownerReferences k: items marked with '.'",
            schema: Schema::for_kind("", "Secret"),
            steps: vec![apply(
                "ctrl",
                T0,
                named(
                    "Secret",
                    json!({"metadata": {"finalizers": ["example.com/keep"],
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "1234"}]},
                    "data": {"token": "dA=="}}),
                ),
            )],
            want: with_managed_fields(
                named(
                    "Secret",
                    json!({"metadata": {"finalizers": ["example.com/keep"],
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "1234"}]},
                    "data": {"token": "dA=="}}),
                ),
                vec![entry(
                    "ctrl",
                    "Apply",
                    "v1",
                    Some(T0),
                    json!({
                        "f:data": {"f:token": {}},
                        "f:metadata": {
                            "f:finalizers": {"v:\"example.com/keep\"": {}},
                            "f:ownerReferences": {"k:{\"uid\":\"1234\"}": {".": {}, "f:apiVersion": {}, "f:kind": {}, "f:name": {}, "f:uid": {}}}
                        }
                    }),
                )],
            ),
        },
        Scenario {
            name: "re-applying the same configuration changes nothing, not even the time",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply("kubectl", T0, service()),
                apply("kubectl", T1, service()),
            ],
            want: with_managed_fields(
                service(),
                vec![entry("kubectl", "Apply", "v1", Some(T0), service_fields())],
            ),
        },
        Scenario {
            name: "a changed value is written and the entry's time moves",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply("kubectl", T0, service()),
                apply(
                    "kubectl",
                    T1,
                    service_with(json!({"spec": {"type": "NodePort"}})),
                ),
            ],
            want: with_managed_fields(
                service_with(json!({"spec": {"type": "NodePort"}})),
                vec![entry("kubectl", "Apply", "v1", Some(T1), service_fields())],
            ),
        },
        Scenario {
            name: "a second applier of the same value shares the field; its entry has no time",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply("kubectl", T0, service()),
                apply(
                    "team-b",
                    T1,
                    named("Service", json!({"metadata": {"labels": {"app": "web"}}})),
                ),
            ],
            want: with_managed_fields(
                service(),
                vec![
                    entry(
                        "team-b",
                        "Apply",
                        "v1",
                        None,
                        json!({"f:metadata": {"f:labels": {"f:app": {}}}}),
                    ),
                    entry("kubectl", "Apply", "v1", Some(T0), service_fields()),
                ],
            ),
        },
        Scenario {
            name: "a field dropped from the configuration is removed when nobody else owns it",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply(
                    "kubectl",
                    T0,
                    service_with(json!({"metadata": {"labels": {"tier": "fe"}}})),
                ),
                apply("kubectl", T1, service()),
            ],
            want: with_managed_fields(
                service(),
                vec![entry("kubectl", "Apply", "v1", Some(T1), service_fields())],
            ),
        },
        Scenario {
            name: "a dropped field another applier also owns stays",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply(
                    "kubectl",
                    T0,
                    service_with(json!({"metadata": {"labels": {"tier": "fe"}}})),
                ),
                apply(
                    "team-b",
                    T1,
                    named("Service", json!({"metadata": {"labels": {"tier": "fe"}}})),
                ),
                apply("kubectl", T2, service()),
            ],
            want: with_managed_fields(
                service_with(json!({"metadata": {"labels": {"tier": "fe"}}})),
                vec![
                    entry(
                        "team-b",
                        "Apply",
                        "v1",
                        None,
                        json!({"f:metadata": {"f:labels": {"f:tier": {}}}}),
                    ),
                    entry("kubectl", "Apply", "v1", Some(T0), service_fields()),
                ],
            ),
        },
        Scenario {
            name: "a field an updater took over stays when the applier drops it",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply(
                    "kubectl",
                    T0,
                    service_with(json!({"metadata": {"labels": {"tier": "fe"}}})),
                ),
                update(
                    "editor",
                    T1,
                    json!({"metadata": {"labels": {"tier": "be"}}}),
                ),
                apply("kubectl", T2, service()),
            ],
            want: with_managed_fields(
                service_with(json!({"metadata": {"labels": {"tier": "be"}}})),
                vec![
                    entry("kubectl", "Apply", "v1", Some(T0), service_fields()),
                    entry(
                        "editor",
                        "Update",
                        "v1",
                        Some(T1),
                        json!({"f:metadata": {"f:labels": {"f:tier": {}}}}),
                    ),
                ],
            ),
        },
        Scenario {
            name: "associative list items merge by key; new ones are appended; dropped ones go",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply(
                    "kubectl",
                    T0,
                    service_with(json!({"spec": {"ports": [port(80, 8080), port(443, 8443)]}})),
                ),
                apply(
                    "team-b",
                    T1,
                    named(
                        "Service",
                        json!({"spec": {"ports": [{"port": 8080, "protocol": "TCP"}]}}),
                    ),
                ),
                apply(
                    "kubectl",
                    T2,
                    service_with(json!({"spec": {"ports": [port(443, 8443)]}})),
                ),
            ],
            want: with_managed_fields(
                service_with(
                    json!({"spec": {"ports": [port(443, 8443), {"port": 8080, "protocol": "TCP"}]}}),
                ),
                vec![
                    entry(
                        "team-b",
                        "Apply",
                        "v1",
                        Some(T1),
                        json!({"f:spec": {"f:ports": {
                        "k:{\"port\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}}}}}),
                    ),
                    entry(
                        "kubectl",
                        "Apply",
                        "v1",
                        Some(T2),
                        json!({
                            "f:metadata": {"f:labels": {"f:app": {}}},
                            "f:spec": {
                                "f:ports": {"k:{\"port\":443,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                                "f:selector": {}, "f:type": {}
                            }
                        }),
                    ),
                ],
            ),
        },
        Scenario {
            name: "a new item lands before the next item both lists share",
            schema: Schema::new().list("spec.items", ListType::Map(vec!["name".into()])),
            steps: vec![
                apply(
                    "a",
                    T0,
                    named(
                        "Thing",
                        json!({"spec": {"items": [{"name": "x"}, {"name": "y"}]}}),
                    ),
                ),
                apply(
                    "b",
                    T1,
                    named(
                        "Thing",
                        json!({"spec": {"items": [{"name": "n"}, {"name": "y", "v": 1}]}}),
                    ),
                ),
            ],
            want: with_managed_fields(
                named(
                    "Thing",
                    json!({"spec": {"items": [{"name": "x"}, {"name": "n"}, {"name": "y", "v": 1}]}}),
                ),
                vec![
                    entry(
                        "a",
                        "Apply",
                        "v1",
                        Some(T0),
                        json!({"f:spec": {"f:items": {
                        "k:{\"name\":\"x\"}": {".": {}, "f:name": {}},
                        "k:{\"name\":\"y\"}": {".": {}, "f:name": {}}}}}),
                    ),
                    entry(
                        "b",
                        "Apply",
                        "v1",
                        Some(T1),
                        json!({"f:spec": {"f:items": {
                        "k:{\"name\":\"n\"}": {".": {}, "f:name": {}},
                        "k:{\"name\":\"y\"}": {".": {}, "f:name": {}, "f:v": {}}}}}),
                    ),
                ],
            ),
        },
        Scenario {
            name: "set items union; the applier's dropped item goes, another manager's stays",
            schema: Schema::for_kind("", "ConfigMap"),
            steps: vec![
                apply(
                    "kubectl",
                    T0,
                    named("ConfigMap", json!({"metadata": {"finalizers": ["a", "b"]}})),
                ),
                update(
                    "ctrl",
                    T1,
                    json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
                ),
                apply(
                    "kubectl",
                    T2,
                    named("ConfigMap", json!({"metadata": {"finalizers": ["a"]}})),
                ),
            ],
            want: with_managed_fields(
                named("ConfigMap", json!({"metadata": {"finalizers": ["a", "c"]}})),
                vec![
                    entry(
                        "kubectl",
                        "Apply",
                        "v1",
                        Some(T2),
                        json!({"f:metadata": {"f:finalizers": {"v:\"a\"": {}}}}),
                    ),
                    entry(
                        "ctrl",
                        "Update",
                        "v1",
                        Some(T1),
                        json!({"f:metadata": {"f:finalizers": {"v:\"c\"": {}}}}),
                    ),
                ],
            ),
        },
        Scenario {
            name: "an atomic list is replaced whole and owned as one field",
            schema: Schema::for_kind("discovery.k8s.io", "EndpointSlice"),
            steps: vec![
                apply(
                    "ctrl",
                    T0,
                    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": "web-1", "namespace": "default"}, "addressType": "IPv4",
                    "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}]}),
                ),
                apply(
                    "ctrl",
                    T1,
                    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": "web-1", "namespace": "default"}, "addressType": "IPv4",
                    "endpoints": [{"addresses": ["10.0.0.3"]}]}),
                ),
            ],
            want: json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "web-1", "namespace": "default", "managedFields": [
                    entry("ctrl", "Apply", "discovery.k8s.io/v1", Some(T1), json!({"f:addressType": {}, "f:endpoints": {}}))]},
                "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.3"]}]}),
        },
        Scenario {
            name: "an atomic map is replaced whole while labels merge per key",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply("kubectl", T0, service()),
                force(
                    "team-b",
                    T1,
                    named(
                        "Service",
                        json!({"metadata": {"labels": {"team": "b"}}, "spec": {"selector": {"x": "y"}}}),
                    ),
                ),
            ],
            want: {
                let mut s = service_with(json!({"metadata": {"labels": {"team": "b"}}}));
                s["spec"]["selector"] = json!({"x": "y"});
                with_managed_fields(
                    s,
                    vec![
                        entry(
                            "kubectl",
                            "Apply",
                            "v1",
                            Some(T0),
                            json!({
                                "f:metadata": {"f:labels": {"f:app": {}}},
                                "f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                                           "f:type": {}}
                            }),
                        ),
                        entry(
                            "team-b",
                            "Apply",
                            "v1",
                            Some(T1),
                            json!({"f:metadata": {"f:labels": {"f:team": {}}}, "f:spec": {"f:selector": {}}}),
                        ),
                    ],
                )
            },
        },
        Scenario {
            name: "force moves ownership and drops the entry left empty",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply(
                    "a",
                    T0,
                    named("Service", json!({"spec": {"type": "ClusterIP"}})),
                ),
                force(
                    "b",
                    T1,
                    named("Service", json!({"spec": {"type": "NodePort"}})),
                ),
            ],
            want: with_managed_fields(
                named("Service", json!({"spec": {"type": "NodePort"}})),
                vec![entry(
                    "b",
                    "Apply",
                    "v1",
                    Some(T1),
                    json!({"f:spec": {"f:type": {}}}),
                )],
            ),
        },
        Scenario {
            name: "an explicit null removes the field and the applier owns it",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply(
                    "a",
                    T0,
                    named(
                        "Service",
                        json!({"spec": {"type": "ClusterIP", "sessionAffinity": "None"}}),
                    ),
                ),
                force("b", T1, null_affinity()),
            ],
            want: with_managed_fields(
                named("Service", json!({"spec": {"type": "ClusterIP"}})),
                vec![
                    entry(
                        "a",
                        "Apply",
                        "v1",
                        Some(T0),
                        json!({"f:spec": {"f:type": {}}}),
                    ),
                    entry(
                        "b",
                        "Apply",
                        "v1",
                        Some(T1),
                        json!({"f:spec": {"f:sessionAffinity": {}}}),
                    ),
                ],
            ),
        },
        Scenario {
            name: "a status apply is its own entry, marked with the subresource",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply("kubectl", T0, service()),
                apply_status(
                    "ctrl",
                    T1,
                    named(
                        "Service",
                        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                    ),
                ),
            ],
            want: with_managed_fields(
                service_with(
                    json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                ),
                vec![
                    entry("kubectl", "Apply", "v1", Some(T0), service_fields()),
                    {
                        let mut e = entry(
                            "ctrl",
                            "Apply",
                            "v1",
                            Some(T1),
                            json!({"f:status": {"f:conditions": {
                        "k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}}}),
                        );
                        e["subresource"] = json!("status");
                        e
                    },
                ],
            ),
        },
    ];
    for case in cases {
        let got = run(&case.schema, case.steps).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(got, Some(case.want), "{}", case.name);
    }
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of update scenarios and their steps
fn update_scenarios() {
    // As kubesim's create handler stores a Service: status reset to an empty load balancer.
    let created = service_with(json!({"status": {"loadBalancer": {}}}));
    let created_fields = json!({
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {
            "f:ports": {".": {}, "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
            "f:selector": {}, "f:type": {}
        }
    });
    let mut data_steps = vec![create(
        "m00",
        "2026-11-21T10:00:00Z",
        named("ConfigMap", json!({"data": {"k0": "0"}})),
    )];
    const TIMES: [&str; 10] = [
        "2026-11-21T10:01:00Z",
        "2026-11-21T10:02:00Z",
        "2026-11-21T10:03:00Z",
        "2026-11-21T10:04:00Z",
        "2026-11-21T10:05:00Z",
        "2026-11-21T10:06:00Z",
        "2026-11-21T10:07:00Z",
        "2026-11-21T10:08:00Z",
        "2026-11-21T10:09:00Z",
        "2026-11-21T10:10:00Z",
    ];
    const MANAGERS: [&str; 10] = [
        "m01", "m02", "m03", "m04", "m05", "m06", "m07", "m08", "m09", "m10",
    ];
    for (i, (m, t)) in MANAGERS.iter().zip(TIMES).enumerate() {
        data_steps.push(update(
            m,
            t,
            json!({"data": {format!("k{}", i + 1): (i + 1).to_string()}}),
        ));
    }
    let mut data = json!({"k0": "0"});
    let mut capped = vec![entry(
        "ancient-changes",
        "Update",
        "v1",
        Some(TIMES[0]),
        json!({"f:data": {".": {}, "f:k0": {}, "f:k1": {}}}),
    )];
    for i in 1..=10 {
        data[format!("k{i}")] = json!(i.to_string());
        if i >= 2 {
            capped.push(entry(
                MANAGERS[i - 1],
                "Update",
                "v1",
                Some(TIMES[i - 1]),
                json!({"f:data": {format!("f:k{i}"): {}}}),
            ));
        }
    }
    let broken = json!([{"manager": "x", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": "oops"}]);

    let cases = vec![
        Scenario {
            name: "create owns every field, with '.' on containers that appeared but not on structs",
            schema: Schema::for_kind("", "Service"),
            steps: vec![create("kubectl-create", T0, created.clone())],
            want: with_managed_fields(
                created.clone(),
                vec![entry(
                    "kubectl-create",
                    "Update",
                    "v1",
                    Some(T0),
                    created_fields.clone(),
                )],
            ),
        },
        Scenario {
            name: "Apply entries sort before Update entries whatever their times",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                create("kubectl-create", T0, created.clone()),
                apply(
                    "kubectl",
                    T1,
                    named("Service", json!({"metadata": {"labels": {"team": "x"}}})),
                ),
            ],
            want: with_managed_fields(
                {
                    let mut s = created.clone();
                    s["metadata"]["labels"]["team"] = json!("x");
                    s
                },
                vec![
                    entry(
                        "kubectl",
                        "Apply",
                        "v1",
                        Some(T1),
                        json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
                    ),
                    entry(
                        "kubectl-create",
                        "Update",
                        "v1",
                        Some(T0),
                        created_fields.clone(),
                    ),
                ],
            ),
        },
        Scenario {
            name: "an update takes what it changes from the applier; later updates merge into its entry",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply("kubectl", T0, service()),
                update("editor", T1, json!({"spec": {"type": "NodePort"}})),
                update(
                    "editor",
                    T2,
                    json!({"metadata": {"labels": {"app": "web2"}}}),
                ),
            ],
            want: with_managed_fields(
                service_with(
                    json!({"metadata": {"labels": {"app": "web2"}}, "spec": {"type": "NodePort"}}),
                ),
                vec![
                    entry(
                        "kubectl",
                        "Apply",
                        "v1",
                        Some(T0),
                        json!({"f:spec": {
                        "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                        "f:selector": {}}}),
                    ),
                    entry(
                        "editor",
                        "Update",
                        "v1",
                        Some(T2),
                        json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:type": {}}}),
                    ),
                ],
            ),
        },
        Scenario {
            name: "an update that changes nothing keeps managedFields (absent in the body = keep)",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply("kubectl", T0, service()),
                update("editor", T1, json!({"metadata": {"managedFields": null}})),
            ],
            want: with_managed_fields(
                service(),
                vec![entry("kubectl", "Apply", "v1", Some(T0), service_fields())],
            ),
        },
        Scenario {
            name: "managedFields: [] in the body clears them",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply("kubectl", T0, service()),
                update("editor", T1, json!({"metadata": {"managedFields": []}})),
            ],
            want: service(),
        },
        Scenario {
            name: "managedFields: [{}] in the body clears them too",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply("kubectl", T0, service()),
                update("editor", T1, json!({"metadata": {"managedFields": [{}]}})),
            ],
            want: service(),
        },
        Scenario {
            name: "a /status update is its own entry and ignores managedFields in the body",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply("kubectl", T0, service()),
                update_status(
                    "ctrl",
                    T1,
                    json!({"metadata": {"managedFields": []},
                           "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                ),
            ],
            want: with_managed_fields(
                service_with(
                    json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                ),
                vec![
                    entry("kubectl", "Apply", "v1", Some(T0), service_fields()),
                    {
                        let mut e = entry(
                            "ctrl",
                            "Update",
                            "v1",
                            Some(T1),
                            json!({"f:status": {"f:conditions": {
                        ".": {}, "k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}}}),
                        );
                        e["subresource"] = json!("status");
                        e
                    },
                ],
            ),
        },
        Scenario {
            name: "removing a field takes it from its owner",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                apply("kubectl", T0, service()),
                update("editor", T1, json!({"metadata": {"labels": null}})),
            ],
            want: {
                let mut s = service();
                s["metadata"].as_object_mut().map(|m| m.remove("labels"));
                with_managed_fields(
                    s,
                    vec![entry(
                        "kubectl",
                        "Apply",
                        "v1",
                        Some(T0),
                        json!({"f:spec": {
                        "f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                        "f:selector": {}, "f:type": {}}}),
                    )],
                )
            },
        },
        Scenario {
            name: "at most ten Update entries: the oldest fold into ancient-changes",
            schema: Schema::for_kind("", "ConfigMap"),
            steps: data_steps,
            want: with_managed_fields(named("ConfigMap", json!({"data": data})), capped),
        },
        Scenario {
            name: "unreadable stored managedFields are dropped by an update",
            schema: Schema::for_kind("", "Service"),
            steps: vec![
                Step::Put(with_managed_fields(
                    service(),
                    broken.as_array().cloned().unwrap_or_default(),
                )),
                update(
                    "editor",
                    T1,
                    json!({"metadata": {"managedFields": null, "labels": {"app": "web2"}}}),
                ),
            ],
            want: with_managed_fields(
                service_with(json!({"metadata": {"labels": {"app": "web2"}}})),
                vec![entry(
                    "editor",
                    "Update",
                    "v1",
                    Some(T1),
                    json!({"f:metadata": {"f:labels": {"f:app": {}}}}),
                )],
            ),
        },
    ];
    for case in cases {
        let got = run(&case.schema, case.steps).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(got, Some(case.want), "{}", case.name);
    }
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of apply error cases
fn apply_errors() {
    // (manager, field, how messages name the owner)
    let conflicts = |message: &str, list: &[(&str, &str, &str)]| SsaError::Conflicts {
        message: message.to_owned(),
        conflicts: list
            .iter()
            .map(|(m, f, o)| Conflict {
                manager: (*m).to_owned(),
                api_version: "v1".to_owned(),
                field: (*f).to_owned(),
                owner: (*o).to_owned(),
            })
            .collect(),
    };
    let svc = || Schema::for_kind("", "Service");
    let broken = json!([{"manager": "x", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": "oops"}]);
    let cases: Vec<(&str, Schema, Vec<Step>, SsaError)> = vec![
        (
            "changing a field an updater owns",
            svc(),
            vec![create("kubectl", T0, service()), apply("helm", T1, named("Service", json!({"spec": {"type": "NodePort"}})))],
            conflicts(r#"Apply failed with 1 conflict: conflict with "kubectl" using v1: .spec.type"#, &[("kubectl", ".spec.type", r#""kubectl" using v1"#)]),
        ),
        (
            "several fields of one manager",
            svc(),
            vec![
                create("kubectl", T0, service()),
                apply("helm", T1, named("Service", json!({"spec": {"type": "NodePort",
                    "ports": [{"port": 80, "protocol": "TCP", "targetPort": 9090}]}}))),
            ],
            conflicts(
                "Apply failed with 2 conflicts: conflicts with \"kubectl\" using v1:\n- .spec.type\n- .spec.ports[port=80,protocol=\"TCP\"].targetPort",
                &[
                    ("kubectl", ".spec.type", r#""kubectl" using v1"#),
                    ("kubectl", ".spec.ports[port=80,protocol=\"TCP\"].targetPort", r#""kubectl" using v1"#),
                ],
            ),
        ),
        (
            "several managers, sorted, appliers without a version",
            svc(),
            vec![
                create("kubectl", T0, service()),
                apply("ctrl", T1, named("Service", json!({"metadata": {"labels": {"tier": "fe"}}}))),
                apply("helm", T2, named("Service", json!({"metadata": {"labels": {"tier": "be"}}, "spec": {"type": "NodePort"}}))),
            ],
            conflicts(
                "Apply failed with 2 conflicts: conflicts with \"ctrl\":\n- .metadata.labels.tier\nconflicts with \"kubectl\" using v1:\n- .spec.type",
                &[("ctrl", ".metadata.labels.tier", r#""ctrl""#), ("kubectl", ".spec.type", r#""kubectl" using v1"#)],
            ),
        ),
        (
            "an explicit null for a field another manager set",
            svc(),
            vec![
                apply("a", T0, named("Service", json!({"spec": {"sessionAffinity": "None"}}))),
                apply("b", T1, null_affinity()),
            ],
            conflicts(r#"Apply failed with 1 conflict: conflict with "a": .spec.sessionAffinity"#, &[("a", ".spec.sessionAffinity", r#""a""#)]),
        ),
        (
            "a status field another status applier owns",
            svc(),
            vec![
                apply("kubectl", T0, service()),
                apply_status("ctrl", T1, named("Service", json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}))),
                apply_status("other", T2, named("Service", json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}))),
            ],
            conflicts(
                r#"Apply failed with 1 conflict: conflict with "ctrl" with subresource "status": .status.conditions[type="Ready"].status"#,
                &[("ctrl", ".status.conditions[type=\"Ready\"].status", r#""ctrl" with subresource "status""#)],
            ),
        ),
        (
            "an associative list item without its key",
            svc(),
            vec![apply("kubectl", T0, named("Service", json!({"spec": {"ports": [{"protocol": "TCP", "targetPort": 80}]}})))],
            SsaError::Invalid(
                "failed to create typed patch object (default/web; /v1, Kind=Service): .spec.ports: element 0: associative list with keys has an element that omits key field \"port\" (and doesn't have default value)".into(),
            ),
        ),
        (
            "duplicate keys in an applied associative list",
            svc(),
            vec![apply("kubectl", T0, named("Service", json!({"spec": {"ports": [
                {"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "TCP", "name": "again"}]}})))],
            SsaError::Invalid(
                "failed to create typed patch object (default/web; /v1, Kind=Service): .spec.ports: duplicate entries for key [port=80,protocol=\"TCP\"]".into(),
            ),
        ),
        (
            "a null set item",
            Schema::for_kind("", "ConfigMap"),
            vec![apply("kubectl", T0, named("ConfigMap", json!({"metadata": {"finalizers": [null]}})))],
            SsaError::Invalid(
                "failed to create typed patch object (default/web; /v1, Kind=ConfigMap): .metadata.finalizers: element 0: associative list without keys has an element that's an explicit null".into(),
            ),
        ),
        (
            "managedFields in the applied configuration",
            svc(),
            vec![apply("kubectl", T0, named("Service", json!({"metadata": {"managedFields": []}})))],
            SsaError::Invalid("metadata.managedFields must be nil".into()),
        ),
        (
            "unreadable stored managedFields",
            svc(),
            vec![
                Step::Put(with_managed_fields(service(), broken.as_array().cloned().unwrap_or_default())),
                apply("kubectl", T1, service()),
            ],
            SsaError::Invalid(
                "failed to decode managed fields: managed fields entry 0: error decoding set: fieldsV1 must be a JSON object".into(),
            ),
        ),
    ];
    for (name, schema, steps, want) in cases {
        let shown = match &want {
            SsaError::Conflicts { message, .. } => message.clone(),
            SsaError::Invalid(m) => m.clone(),
        };
        assert_eq!(
            want.to_string(),
            shown,
            "{name}: Display is the bare message"
        );
        assert_eq!(run(&schema, steps).err(), Some(want), "{name}");
    }
}

#[test]
fn stored_fields_v1_round_trips() {
    let cases = [
        json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}),
        json!({"f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}}}}),
        json!({"f:metadata": {"f:finalizers": {"v:\"a\"": {}, "v:\"b\"": {}}}}),
        json!({"f:spec": {"f:containers": {"i:0": {}}}}),
    ];
    for fields in cases {
        let Value::Object(m) = &fields else {
            unreachable!()
        };
        let set = Set::from_fields_v1(m).expect("valid fieldsV1");
        assert_eq!(set.to_fields_v1(), fields);
    }
}
