use super::*;
use crate::mirror::Kind;
use crate::mirror::fixtures::{edited, object};
use serde_json::{Value, json};

fn key(name: &str) -> ObjectRef {
    ObjectRef {
        kind: Kind::Service,
        namespace: "prod".into(),
        name: name.into(),
    }
}

fn desired(name: &str, port: u16) -> Desired {
    Desired {
        key: key(name),
        object: object(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "prod",
                         "labels": {"app.kubernetes.io/managed-by": "clusterset-dns"}},
            "spec": {"ports": [{"name": "http", "port": port, "protocol": "TCP"}]}
        })),
        cluster: Some("east".into()),
    }
}

/// What the API would hold after applying `d`: server fields added.
fn applied(d: &Desired) -> Actual {
    let object = edited(&stamped(d).object, |object| {
        object["metadata"]["uid"] = json!(format!("uid-{}", d.key.name));
        object["metadata"]["resourceVersion"] = json!("7");
        object["spec"]["clusterIP"] = json!("10.96.0.9");
        object["spec"]["ports"][0]["targetPort"] = json!(80);
        object["metadata"]["labels"]["team"] = json!("added-by-someone");
    });
    Actual { object }
}

fn names(ops: &[Op]) -> Vec<String> {
    ops.iter()
        .map(|op| match op {
            Op::Create(d) => format!("create {}", d.key.name),
            Op::Apply(d) => format!("apply {}", d.key.name),
            Op::Delete { key, uid, .. } => {
                format!("delete {} {}", key.name, uid.as_deref().unwrap_or("-"))
            }
        })
        .collect()
}

/// (case, desired, actual, unowned, expected writes)
type PlanCase = (
    &'static str,
    Vec<Desired>,
    Vec<Actual>,
    Vec<ObjectRef>,
    Vec<&'static str>,
);

#[test]
fn objects_wait_for_clusters_to_sync() {
    let mut web = applied(&desired("web-east", 80));
    web.object = edited(&web.object, |v| {
        v["metadata"]["labels"]["clusterset-dns.io/cluster"] = json!("east");
    });
    let mut fed = applied(&desired("db-federated", 80));
    fed.object = edited(&fed.object, |v| {
        v["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "clusterset-dns"});
    });
    let actual = BTreeMap::from([(key("web-east"), web), (key("db-federated"), fed)]);
    let hold = |unsynced: &[&str], waiting| Hold {
        unsynced: unsynced.iter().map(|c| (*c).into()).collect(),
        waiting,
        ..Hold::default()
    };
    // (hold, expected writes when nothing is wanted any more)
    let cases = [
        (hold(&["east"], true), vec![]),
        (
            hold(&["east"], false),
            vec!["delete db-federated uid-db-federated"],
        ),
        (hold(&["north"], true), vec!["delete web-east uid-web-east"]),
        (
            hold(&[], false),
            vec![
                "delete db-federated uid-db-federated",
                "delete web-east uid-web-east",
            ],
        ),
    ];
    for (h, expect) in cases {
        let ops = plan(&[], &actual, &BTreeSet::new(), |o| h.holds(o));
        assert_eq!(names(&ops), expect, "{h:?}");
    }
    // Nor is anything created or applied for a waiting cluster.
    let mut want = desired("api-north", 80);
    want.cluster = Some("north".into());
    let ops = plan(&[want], &BTreeMap::new(), &BTreeSet::new(), |o| {
        hold(&["north"], false).holds(o)
    });
    assert!(ops.is_empty());
}

#[test]
fn plan_table() {
    let web = desired("web-east", 80);
    let api = desired("api-east", 80);
    let cases: Vec<PlanCase> = vec![
        (
            "nothing yet: create",
            vec![web.clone()],
            vec![],
            vec![],
            vec!["create web-east"],
        ),
        (
            "as applied, server defaults and other labels added: no write",
            vec![web.clone()],
            vec![applied(&web)],
            vec![],
            vec![],
        ),
        (
            "desired port changed: apply",
            vec![desired("web-east", 8080)],
            vec![applied(&web)],
            vec![],
            vec!["apply web-east"],
        ),
        (
            "ours, no longer wanted: delete with its uid",
            vec![],
            vec![applied(&web)],
            vec![],
            vec!["delete web-east uid-web-east"],
        ),
        (
            "someone else's same-named object: left alone",
            vec![web.clone(), api.clone()],
            vec![applied(&api)],
            vec![key("web-east")],
            vec![],
        ),
    ];
    for (name, want_objects, have, unowned, expect) in cases {
        let actual: BTreeMap<ObjectRef, Actual> = have
            .into_iter()
            .map(|a| {
                let n = a.object.meta().name.clone().unwrap_or_default();
                (key(&n), a)
            })
            .collect();
        let unowned: BTreeSet<ObjectRef> = unowned.into_iter().collect();
        let ops = plan(&want_objects, &actual, &unowned, |_| false);
        assert_eq!(names(&ops), expect, "{name}");
    }
}

#[test]
fn a_manual_edit_of_our_fields_is_repaired() {
    let web = desired("web-east", 80);
    let mut by_hand = applied(&web);
    by_hand.object = edited(&by_hand.object, |v| {
        v["spec"]["ports"][0]["port"] = json!(81);
    });
    let actual = BTreeMap::from([(key("web-east"), by_hand)]);
    assert_eq!(
        names(&plan(&[web], &actual, &BTreeSet::new(), |_| false)),
        ["apply web-east"]
    );
}

#[test]
fn a_field_we_stop_writing_is_applied_away() {
    let mut with_identity = desired("web-east", 80);
    with_identity.object = edited(&with_identity.object, |v| {
        v["metadata"]["annotations"] = json!({"mirror.linkerd.io/remote-gateway-identity": "gw"});
    });
    let actual = BTreeMap::from([(key("web-east"), applied(&with_identity))]);
    // The annotation is still there, so field comparison alone passes; the
    // applied hash differs.
    assert_eq!(
        names(&plan(
            &[desired("web-east", 80)],
            &actual,
            &BTreeSet::new(),
            |_| false
        )),
        ["apply web-east"]
    );
}

#[test]
fn headless_to_cluster_ip_is_a_new_object() {
    let mut headless = desired("db-east", 80);
    headless.object = edited(&headless.object, |v| {
        v["spec"]["clusterIP"] = json!("None");
    });
    let actual = BTreeMap::from([(key("db-east"), applied(&desired("db-east", 80)))]);
    assert_eq!(
        names(&plan(&[headless], &actual, &BTreeSet::new(), |_| false)),
        ["delete db-east uid-db-east", "create db-east"]
    );
}

#[test]
fn the_slices_of_someone_elses_service_are_not_written() {
    let slice = Desired {
        key: ObjectRef {
            kind: Kind::EndpointSlice,
            namespace: "prod".into(),
            name: "web-east-v4-0".into(),
        },
        object: object(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-east-v4-0", "namespace": "prod",
                         "labels": {"kubernetes.io/service-name": "web-east"}},
            "addressType": "IPv4", "endpoints": []
        })),
        cluster: Some("east".into()),
    };
    let unowned = BTreeSet::from([key("web-east")]);
    let ops = plan(
        &[desired("web-east", 80), slice.clone()],
        &BTreeMap::new(),
        &unowned,
        |_| false,
    );
    assert!(ops.is_empty(), "{:?}", names(&ops));
    // One of ours already there is removed.
    let actual = BTreeMap::from([(
        slice.key.clone(),
        Actual {
            object: stamped(&slice).object,
        },
    )]);
    let ops = plan(&[desired("web-east", 80), slice], &actual, &unowned, |_| {
        false
    });
    assert_eq!(ops.len(), 1);
    assert!(matches!(&ops[0], Op::Delete { key, .. } if &*key.name == "web-east-v4-0"));
}

#[test]
fn contains_table() {
    let want = desired("web-east", 80).object;
    let with_name = |name: &str| {
        edited(&want, |v| {
            v["spec"]["ports"][0]["name"] = json!(name);
        })
    };
    // (case, edit of what the API holds, whether it holds what we want)
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit, bool)> = vec![
        ("the same", Box::new(|_| {}), true),
        (
            "server defaults and others' fields added",
            Box::new(|v| {
                v["spec"]["clusterIP"] = json!("10.96.0.9");
                v["spec"]["ports"][0]["targetPort"] = json!(80);
                v["metadata"]["labels"]["team"] = json!("x");
                v["metadata"]["annotations"] = json!({"a": "b"});
            }),
            true,
        ),
        (
            "a port of ours changed",
            Box::new(|v| v["spec"]["ports"][0]["port"] = json!(81)),
            false,
        ),
        (
            "a port added",
            Box::new(|v| {
                if let Some(ports) = v["spec"]["ports"].as_array_mut() {
                    ports.push(json!({"name": "x", "port": 1}));
                }
            }),
            false,
        ),
        (
            "a label of ours removed",
            Box::new(|v| v["metadata"]["labels"] = json!({})),
            false,
        ),
        (
            "a label of ours changed",
            Box::new(|v| v["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("me")),
            false,
        ),
        ("no spec", Box::new(|v| v["spec"] = Value::Null), false),
    ];
    for (name, edit, expect) in cases {
        let have = edited(&want, |v| edit(v));
        assert_eq!(contains(&have, &want), expect, "{name}");
    }
    // A field we leave unset is anyone's; a kind is never another's.
    let unnamed = edited(&want, |v| {
        v["spec"]["ports"][0]
            .as_object_mut()
            .map(|p| p.remove("name"));
    });
    assert!(contains(&with_name("other"), &unnamed));
    assert!(!contains(&with_name("other"), &want));
    let slice = object(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                              "metadata": {"name": "web-east", "namespace": "prod"}}),
    );
    assert!(!contains(&slice, &want));
}

#[test]
fn objects_of_refused_services_are_neither_written_nor_deleted() {
    let slice_of = |service: &str, name: &str| -> Actual {
        Actual {
            object: object(json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": "prod", "uid": format!("uid-{name}"),
                             "labels": {"app.kubernetes.io/managed-by": "clusterset-dns",
                                        "kubernetes.io/service-name": service,
                                        "clusterset-dns.io/cluster": "east"}},
                "endpoints": [{"addresses": ["10.1.0.1"]}]
            })),
        }
    };
    let slice_key = |name: &str| ObjectRef {
        kind: Kind::EndpointSlice,
        namespace: "prod".into(),
        name: name.into(),
    };
    let mut web = applied(&desired("web-east", 80));
    web.object = edited(&web.object, |v| {
        v["metadata"]["labels"]["clusterset-dns.io/cluster"] = json!("east");
    });
    let mut api = applied(&desired("api-east", 80));
    api.object = edited(&api.object, |v| {
        v["metadata"]["labels"]["clusterset-dns.io/cluster"] = json!("east");
    });
    let actual = BTreeMap::from([
        (key("web-east"), web),
        (slice_key("web-east-1"), slice_of("web-east", "web-east-1")),
        (key("api-east"), api),
        (slice_key("api-east-1"), slice_of("api-east", "api-east-1")),
    ]);
    let hold = Hold {
        refused: BTreeSet::from([("prod".into(), "web-east".into())]),
        ..Hold::default()
    };
    // web is refused: what is wanted for it (here a changed port, no
    // slices) is not written, and its objects stay; api is not wanted any
    // more and goes.
    let ops = plan(
        &[desired("web-east", 8080)],
        &actual,
        &BTreeSet::new(),
        |o| hold.holds(o),
    );
    assert_eq!(
        names(&ops),
        [
            "delete api-east uid-api-east",
            "delete api-east-1 uid-api-east-1"
        ]
    );
}

#[test]
fn the_applied_hash_is_of_the_json_body_so_an_upgrade_rewrites_nothing() {
    // The hash releases before the typed objects wrote: FNV-1a of the body
    // as JSON text with its keys sorted. The typed object must hash the
    // same, or every object would be applied again after an upgrade.
    let body = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web-east", "namespace": "prod",
                     "labels": {"app.kubernetes.io/managed-by": "clusterset-dns"}},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    });
    let text = serde_json::to_string(&body).expect("encodes");
    let want = format!("{:016x}", fnv1a(text.as_bytes()));
    let d = desired("web-east", 80);
    let stamped = stamped(&d);
    let got = stamped
        .object
        .meta()
        .annotations
        .as_ref()
        .expect("annotations");
    assert_eq!(got.get(HASH_ANNOTATION), Some(&want));
}
