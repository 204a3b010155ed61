use std::net::Ipv4Addr;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::*;
use crate::resources::{ENDPOINTSLICES, NAMESPACES, SERVICES, find};

/// The state every new store starts in: namespaces at rv 1-4, `default/kubernetes` at rv 5.
const BUILT_IN_RV: u64 = 5;

type Failure = (u16, &'static str, String);

fn configmaps() -> usize {
    find("", "v1", "configmaps").expect("configmaps are served")
}

fn store_with(history: usize, service_cidr: (Ipv4Addr, u8)) -> Store {
    Store::new(&StoreConfig {
        history,
        service_cidr,
        ..StoreConfig::default()
    })
}

fn store() -> Store {
    store_with(1000, (Ipv4Addr::new(10, 96, 0, 0), 12))
}

fn cm(ns: &str, name: &str, data: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": ns}, "data": {"k": data}})
}

fn namespace(name: &str, finalizers: &[&str]) -> Value {
    let mut v = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    if !finalizers.is_empty() {
        v["metadata"]["finalizers"] = json!(finalizers);
    }
    crate::validate::default(NAMESPACES, &mut v);
    v
}

/// A defaulted Service, as the API layer hands it to the store.
fn svc(ns: &str, name: &str, spec: Value) -> Value {
    let mut v = json!({"apiVersion": "v1", "kind": "Service",
                       "metadata": {"name": name, "namespace": ns}, "spec": spec});
    crate::validate::default(SERVICES, &mut v);
    v
}

fn slice(name: &str, finalizers: &[&str], addresses: &[&str]) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": name, "namespace": "default", "finalizers": finalizers},
           "addressType": "IPv4", "endpoints": [{"addresses": addresses}]})
}

fn failure(e: ApiError) -> Failure {
    (e.code, e.reason, e.message)
}

fn fail(code: u16, reason: &'static str, message: &str) -> Failure {
    (code, reason, message.to_owned())
}

/// `ns/name@rv`, with `=data` for ConfigMaps.
fn show(o: &Obj) -> String {
    let mut s = format!("{}/{}@{}", o.namespace(), o.name(), o.resource_version());
    if let Some(d) = o.value().pointer("/data/k").and_then(Value::as_str) {
        s.push('=');
        s.push_str(d);
    }
    s
}

fn shown(objs: &[Arc<Obj>]) -> Vec<String> {
    objs.iter().map(|o| show(o)).collect()
}

/// `MODIFIED configmaps default/a@7=v2`; the object's rv must be the change's.
fn event(c: &Change) -> String {
    assert_eq!(
        c.object.resource_version(),
        c.rv,
        "a change carries its object at its own resourceVersion"
    );
    format!(
        "{} {} {}",
        c.kind.as_str(),
        RESOURCES[c.res].plural,
        show(&c.object)
    )
}

fn drain(rx: &mut broadcast::Receiver<Arc<Change>>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(c) = rx.try_recv() {
        out.push(event(&c));
    }
    out
}

/// A write to the Service `default/<name>` in a table of allocation cases.
enum ServiceOp {
    Create(&'static str, Value),
    Update(&'static str, Value),
    Delete(&'static str),
}

/// Makes the write `op`; answers the object written (or deleted, or marked for deletion).
fn run_service_op(s: &mut Store, op: ServiceOp) -> Result<Arc<Obj>, ApiError> {
    match op {
        ServiceOp::Create(name, spec) => s.create(SERVICES, svc("default", name, spec)),
        ServiceOp::Update(name, spec) => s.update(SERVICES, svc("default", name, spec)),
        ServiceOp::Delete(name) => {
            s.delete(SERVICES, "default", name, None, None)
                .map(|d| match d {
                    Deleted::Gone(o) | Deleted::Pending(o) => o,
                })
        }
    }
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn a_new_store_has_the_built_in_objects() {
    let s = store();
    assert_eq!(s.resource_version(), BUILT_IN_RV);
    let (rv, ns) = s.list(NAMESPACES, None, ReadAt::Latest).unwrap();
    assert_eq!(rv, BUILT_IN_RV);
    assert_eq!(
        shown(&ns),
        [
            "/default@1",
            "/kube-node-lease@4",
            "/kube-public@3",
            "/kube-system@2"
        ]
    );
    let kubernetes = s.get(SERVICES, "default", "kubernetes").unwrap();
    assert_eq!(kubernetes.resource_version(), 5);
    assert_eq!(kubernetes.value()["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(
        kubernetes.value()["spec"]["clusterIPs"],
        json!(["10.96.0.1"])
    );
    assert_eq!(
        s.get(NAMESPACES, "", "default").unwrap().value()["status"]["phase"],
        "Active"
    );
}

/// Checks a created object: shown as `id` (ns/name@rv=data), with `generation`, the server
/// fields set (a uid, a creation time), no deletion fields, and stored.
fn assert_created(s: &Store, case: &str, res: usize, obj: &Obj, id: &str, generation: Option<i64>) {
    assert_eq!(show(obj), id, "{case}");
    let meta = &obj.value()["metadata"];
    assert_eq!(
        meta.get("generation").and_then(Value::as_i64),
        generation,
        "{case}"
    );
    assert_eq!(meta["uid"].as_str().map(str::len), Some(36), "{case}: uid");
    let ts = meta["creationTimestamp"].as_str().unwrap();
    assert!(
        ts.len() == 20 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
        "{case}: creationTimestamp {ts}"
    );
    assert!(meta.get("deletionTimestamp").is_none(), "{case}");
    assert!(meta.get("deletionGracePeriodSeconds").is_none(), "{case}");
    assert_eq!(
        s.get(res, obj.namespace(), obj.name()).as_deref().map(show),
        Some(id.to_owned()),
        "{case}: stored"
    );
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of create cases
fn create_sets_server_fields_and_refuses_bad_creates() {
    let cms = configmaps();
    let mut forged = cm("default", "forged", "x");
    forged["metadata"]["generation"] = json!(9);
    forged["metadata"]["deletionTimestamp"] = json!("2020-01-01T00:00:00Z");
    forged["metadata"]["deletionGracePeriodSeconds"] = json!(30);
    let mut with_rv = cm("default", "b", "x");
    with_rv["metadata"]["resourceVersion"] = json!("3");
    let mut slice_with_generation = slice("s", &[], &["10.0.0.1"]);
    slice_with_generation["metadata"]["generation"] = json!(7);

    // (case, resource, body, Ok((ns/name@rv, generation)) or the Status)
    type Want = Result<(&'static str, Option<i64>), Failure>;
    let cases: Vec<(&str, usize, Value, Want)> = vec![
        (
            "a ConfigMap in an existing namespace",
            cms,
            cm("default", "a", "x"),
            Ok(("default/a@6=x", None)),
        ),
        (
            "the same name again",
            cms,
            cm("default", "a", "y"),
            Err(fail(
                409,
                "AlreadyExists",
                "configmaps \"a\" already exists",
            )),
        ),
        (
            "a namespace that does not exist",
            cms,
            cm("nowhere", "a", "x"),
            Err(fail(404, "NotFound", "namespaces \"nowhere\" not found")),
        ),
        (
            "a resourceVersion on create",
            cms,
            with_rv,
            Err(fail(
                400,
                "BadRequest",
                "resourceVersion should not be set on objects to be created",
            )),
        ),
        (
            "server-owned metadata from the body is dropped",
            cms,
            forged,
            Ok(("default/forged@7=x", None)),
        ),
        (
            "a cluster-scoped Namespace",
            NAMESPACES,
            namespace("shop", &[]),
            Ok(("/shop@8", None)),
        ),
        (
            "an EndpointSlice starts at generation 1",
            ENDPOINTSLICES,
            slice_with_generation,
            Ok(("default/s@9", Some(1))),
        ),
        (
            "a Namespace that exists",
            NAMESPACES,
            namespace("default", &[]),
            Err(fail(
                409,
                "AlreadyExists",
                "namespaces \"default\" already exists",
            )),
        ),
    ];
    let mut s = store();
    for (case, res, body, want) in cases {
        let got = s.create(res, body).map_err(failure);
        match (got, want) {
            (Ok(obj), Ok((id, generation))) => {
                assert_created(&s, case, res, &obj, id, generation);
            }
            (got, want) => assert_eq!(
                got.map(|o| show(&o)),
                want.map(|w| w.0.to_owned()),
                "{case}"
            ),
        }
    }
    assert_eq!(
        s.resource_version(),
        9,
        "failed creates take no resourceVersion"
    );
}

#[test]
fn list_reconstructs_any_retained_resource_version() {
    let cms = configmaps();
    let mut s = store();
    s.create(cms, cm("default", "a", "v1")).unwrap(); // 6
    s.create(cms, cm("default", "b", "v1")).unwrap(); // 7
    s.update(cms, cm("default", "a", "v2")).unwrap(); // 8
    s.update(cms, cm("default", "a", "v3")).unwrap(); // 9
    s.delete(cms, "default", "b", None, None).unwrap(); // 10
    s.create(NAMESPACES, namespace("shop", &[])).unwrap(); // 11
    s.create(cms, cm("shop", "c", "v1")).unwrap(); // 12
    s.create(
        SERVICES,
        svc("shop", "web", json!({"ports": [{"port": 80}]})),
    )
    .unwrap(); // 13

    // (read at, namespace, Ok((list rv, items)) or the Status)
    type Want = Result<(u64, Vec<&'static str>), Failure>;
    let cases: Vec<(ReadAt, Option<&str>, Want)> = vec![
        (
            ReadAt::Latest,
            None,
            Ok((13, vec!["default/a@9=v3", "shop/c@12=v1"])),
        ),
        (
            ReadAt::Latest,
            Some("default"),
            Ok((13, vec!["default/a@9=v3"])),
        ),
        (ReadAt::Exact(5), None, Ok((5, vec![]))),
        (ReadAt::Exact(6), None, Ok((6, vec!["default/a@6=v1"]))),
        (
            ReadAt::Exact(7),
            None,
            Ok((7, vec!["default/a@6=v1", "default/b@7=v1"])),
        ),
        // Between the two updates of a: the first update's version.
        (
            ReadAt::Exact(8),
            None,
            Ok((8, vec!["default/a@8=v2", "default/b@7=v1"])),
        ),
        (
            ReadAt::Exact(9),
            Some("default"),
            Ok((9, vec!["default/a@9=v3", "default/b@7=v1"])),
        ),
        // The delete at 10 brings b back for every earlier rv, and removes it from 10 on.
        (ReadAt::Exact(10), None, Ok((10, vec!["default/a@9=v3"]))),
        (ReadAt::Exact(11), Some("shop"), Ok((11, vec![]))),
        (
            ReadAt::Exact(12),
            Some("shop"),
            Ok((12, vec!["shop/c@12=v1"])),
        ),
        // Changes of other resources (the Service at 13) do not show up.
        (
            ReadAt::Exact(13),
            None,
            Ok((13, vec!["default/a@9=v3", "shop/c@12=v1"])),
        ),
        (
            ReadAt::Exact(14),
            None,
            Err(fail(
                504,
                "Timeout",
                "Timeout: Too large resource version: 14, current: 13",
            )),
        ),
    ];
    for (at, ns, want) in cases {
        let got = s
            .list(cms, ns, at)
            .map(|(rv, items)| (rv, shown(&items)))
            .map_err(failure);
        let want = want.map(|(rv, items)| (rv, strs(&items)));
        assert_eq!(got, want, "list configmaps in {ns:?} at {at:?}");
    }
    let (_, services) = s.list(SERVICES, None, ReadAt::Exact(12)).unwrap();
    assert_eq!(shown(&services), ["default/kubernetes@5"]);
}

#[test]
fn history_is_bounded_by_store_config() {
    let cms = configmaps();
    // Three changes are kept: after the two writes below, those at 5, 6 and 7.
    let mut s = store_with(3, (Ipv4Addr::new(10, 96, 0, 0), 12));
    s.create(cms, cm("default", "x", "v1")).unwrap(); // 6
    s.update(cms, cm("default", "x", "v2")).unwrap(); // 7

    let list_too_old = fail(
        410,
        "Expired",
        "The resourceVersion for the provided list is too old.",
    );
    // (rv, list at exactly rv, watch from rv: its backlog)
    type Want = (
        u64,
        Result<Vec<&'static str>, Failure>,
        Result<Vec<&'static str>, Failure>,
    );
    let cases: Vec<Want> = vec![
        (
            1,
            Err(list_too_old.clone()),
            Err(fail(410, "Expired", "too old resource version: 1 (4)")),
        ),
        (
            3,
            Err(list_too_old),
            Err(fail(410, "Expired", "too old resource version: 3 (4)")),
        ),
        // The oldest rv still covered: every change after 4 is kept.
        (
            4,
            Ok(vec![]),
            Ok(vec![
                "ADDED configmaps default/x@6=v1",
                "MODIFIED configmaps default/x@7=v2",
            ]),
        ),
        (
            6,
            Ok(vec!["default/x@6=v1"]),
            Ok(vec!["MODIFIED configmaps default/x@7=v2"]),
        ),
        (7, Ok(vec!["default/x@7=v2"]), Ok(vec![])),
    ];
    for (rv, want_list, want_watch) in cases {
        let list = s
            .list(cms, None, ReadAt::Exact(rv))
            .map(|(_, items)| shown(&items))
            .map_err(failure);
        assert_eq!(list, want_list.map(|v| strs(&v)), "list at {rv}");
        let watch = s
            .watch(cms, Some(rv), false)
            .map(|w| w.backlog.iter().map(|c| event(c)).collect::<Vec<_>>())
            .map_err(failure);
        assert_eq!(watch, want_watch.map(|v| strs(&v)), "watch from {rv}");
    }
    assert_eq!(s.history.len(), 3);
}

#[test]
fn expire_history_makes_every_earlier_resource_version_410() {
    let cms = configmaps();
    let mut s = store();
    s.create(cms, cm("default", "a", "v1")).unwrap(); // 6
    s.update(cms, cm("default", "a", "v2")).unwrap(); // 7
    s.expire_history();
    assert_eq!(s.resource_version(), 8, "expiring takes a resourceVersion");

    for rv in [1, 5, 6, 7] {
        assert_eq!(
            s.list(cms, None, ReadAt::Exact(rv)).map_err(failure).err(),
            Some(fail(
                410,
                "Expired",
                "The resourceVersion for the provided list is too old."
            )),
            "list at {rv}"
        );
        assert_eq!(
            s.watch(cms, Some(rv), false).map_err(failure).err(),
            Some((
                410,
                "Expired",
                format!("too old resource version: {rv} (8)")
            )),
            "watch from {rv}"
        );
    }
    // The new resourceVersion is listable and watchable.
    let (rv, items) = s.list(cms, None, ReadAt::Exact(8)).unwrap();
    assert_eq!((rv, shown(&items)), (8, strs(&["default/a@7=v2"])));
    let mut w = s.watch(cms, Some(8), true).unwrap();
    assert_eq!(shown(&w.initial), ["default/a@7=v2"]);
    assert!(w.backlog.is_empty());
    assert_eq!(w.rv, 8);

    s.create(cms, cm("default", "b", "v1")).unwrap(); // 9
    assert_eq!(drain(&mut w.rx), ["ADDED configmaps default/b@9=v1"]);
    let backlog: Vec<String> = s
        .watch(cms, Some(8), false)
        .unwrap()
        .backlog
        .iter()
        .map(|c| event(c))
        .collect();
    assert_eq!(backlog, ["ADDED configmaps default/b@9=v1"]);
}

/// A store with five writes after the built-in objects, at resourceVersions 6 to 10: ConfigMap
/// default/a (v1, then v2 at 8), Service default/web, Namespace shop and ConfigMap shop/c.
fn store_with_history_to_watch() -> Store {
    let cms = configmaps();
    let mut s = store();
    s.create(cms, cm("default", "a", "v1")).unwrap(); // 6
    s.create(
        SERVICES,
        svc("default", "web", json!({"ports": [{"port": 80}]})),
    )
    .unwrap(); // 7
    s.update(cms, cm("default", "a", "v2")).unwrap(); // 8
    s.create(NAMESPACES, namespace("shop", &[])).unwrap(); // 9
    s.create(cms, cm("shop", "c", "v1")).unwrap(); // 10
    s
}

#[test]
fn watch_start_yields_initial_state_backlog_and_live_changes() {
    let cms = configmaps();
    let mut s = store_with_history_to_watch();

    // (from, initial) -> (initial objects, backlog, position) or the Status
    type Want = Result<(Vec<&'static str>, Vec<&'static str>, u64), Failure>;
    let cases: Vec<(Option<u64>, bool, Want)> = vec![
        (None, false, Ok((vec![], vec![], 10))),
        (
            None,
            true,
            Ok((vec!["default/a@8=v2", "shop/c@10=v1"], vec![], 10)),
        ),
        // The Service and Namespace changes in between are not in a configmaps backlog.
        (
            Some(5),
            false,
            Ok((
                vec![],
                vec![
                    "ADDED configmaps default/a@6=v1",
                    "MODIFIED configmaps default/a@8=v2",
                    "ADDED configmaps shop/c@10=v1",
                ],
                10,
            )),
        ),
        (
            Some(7),
            false,
            Ok((
                vec![],
                vec![
                    "MODIFIED configmaps default/a@8=v2",
                    "ADDED configmaps shop/c@10=v1",
                ],
                10,
            )),
        ),
        (Some(10), false, Ok((vec![], vec![], 10))),
        (
            Some(11),
            false,
            Err(fail(
                504,
                "Timeout",
                "Timeout: Too large resource version: 11, current: 10",
            )),
        ),
    ];
    for (from, initial, want) in cases {
        let got = s
            .watch(cms, from, initial)
            .map(|w| {
                (
                    shown(&w.initial),
                    w.backlog.iter().map(|c| event(c)).collect::<Vec<_>>(),
                    w.rv,
                )
            })
            .map_err(failure);
        let want = want.map(|(i, b, rv)| (strs(&i), strs(&b), rv));
        assert_eq!(got, want, "watch from {from:?}, initial {initial}");
    }

    // Live changes reach the receiver in commit order, whatever the resource.
    let mut w = s.watch(cms, None, false).unwrap();
    s.create(cms, cm("default", "d", "v1")).unwrap(); // 11
    s.delete(SERVICES, "default", "web", None, None).unwrap(); // 12
    s.delete(cms, "default", "a", None, None).unwrap(); // 13
    assert_eq!(
        drain(&mut w.rx),
        [
            "ADDED configmaps default/d@11=v1",
            "DELETED services default/web@12",
            "DELETED configmaps default/a@13=v2",
        ]
    );
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of update cases
fn update_checks_preconditions_and_skips_no_op_writes() {
    let cms = configmaps();
    let mut s = store();
    let created = s.create(cms, cm("default", "a", "v1")).unwrap(); // 6
    let uid = created.value()["metadata"]["uid"].clone();
    let ts = created.value()["metadata"]["creationTimestamp"].clone();
    let with = |data: &str, rv: Option<&str>| {
        let mut v = cm("default", "a", data);
        if let Some(rv) = rv {
            v["metadata"]["resourceVersion"] = json!(rv);
        }
        v
    };
    let mut forged_identity = with("v2", None);
    forged_identity["metadata"]["uid"] = json!("forged");
    forged_identity["metadata"]["creationTimestamp"] = json!("2000-01-01T00:00:00Z");

    let mut rx = s.watch(cms, None, false).unwrap().rx;
    // (case, body, Ok(rv of the stored object) or the Status, events emitted)
    type Want = Result<&'static str, Failure>;
    let cases: Vec<(&str, Value, Want, Vec<&str>)> = vec![
        (
            "a stale resourceVersion",
            with("v2", Some("5")),
            Err(fail(
                409,
                "Conflict",
                "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again",
            )),
            vec![],
        ),
        (
            "an object that does not exist",
            cm("default", "b", "v1"),
            Err(fail(404, "NotFound", "configmaps \"b\" not found")),
            vec![],
        ),
        (
            "the current resourceVersion and new data",
            with("v2", Some("6")),
            Ok("default/a@7=v2"),
            vec!["MODIFIED configmaps default/a@7=v2"],
        ),
        (
            "unconditional, nothing changed",
            with("v2", None),
            Ok("default/a@7=v2"),
            vec![],
        ),
        (
            "conditional, nothing changed",
            with("v2", Some("7")),
            Ok("default/a@7=v2"),
            vec![],
        ),
        (
            "uid and creationTimestamp in the body are not taken",
            forged_identity,
            Ok("default/a@7=v2"),
            vec![],
        ),
        (
            "the old resourceVersion after a write",
            with("v3", Some("6")),
            Err(fail(
                409,
                "Conflict",
                "Operation cannot be fulfilled on configmaps \"a\": the object has been modified; please apply your changes to the latest version and try again",
            )),
            vec![],
        ),
        (
            "unconditional change",
            with("v3", None),
            Ok("default/a@8=v3"),
            vec!["MODIFIED configmaps default/a@8=v3"],
        ),
    ];
    for (case, body, want, events) in cases {
        let got = s.update(cms, body).map(|o| show(&o)).map_err(failure);
        assert_eq!(got, want.map(str::to_owned), "{case}");
        assert_eq!(drain(&mut rx), strs(&events), "{case}: events");
        let stored = s.get(cms, "default", "a").unwrap();
        assert_eq!(stored.value()["metadata"]["uid"], uid, "{case}: uid");
        assert_eq!(
            stored.value()["metadata"]["creationTimestamp"],
            ts,
            "{case}: creationTimestamp"
        );
    }
    assert_eq!(s.resource_version(), 8);
    assert_eq!(
        s.history.back().map(|c| c.rv),
        Some(8),
        "no-op updates leave no history"
    );
}

#[test]
fn generation_counts_spec_changes_only() {
    let mut s = store();
    s.create(ENDPOINTSLICES, slice("s", &[], &["10.0.0.1"]))
        .unwrap(); // 6, generation 1
    let mut labelled = slice("s", &[], &["10.0.0.1"]);
    labelled["metadata"]["labels"] = json!({"a": "b"});
    let mut labelled_moved = slice("s", &[], &["10.0.0.2"]);
    labelled_moved["metadata"]["labels"] = json!({"a": "b"});
    let mut forged = labelled_moved.clone();
    forged["metadata"]["generation"] = json!(40);

    // (case, body, (rv, generation))
    let cases: Vec<(&str, Value, (u64, i64))> = vec![
        ("a label change", labelled, (7, 1)),
        ("an endpoint change", labelled_moved.clone(), (8, 2)),
        ("the same object again", labelled_moved, (8, 2)),
        ("a generation from the client is ignored", forged, (8, 2)),
    ];
    for (case, body, want) in cases {
        let got = s.update(ENDPOINTSLICES, body).unwrap();
        assert_eq!(
            (
                got.resource_version(),
                got.value()["metadata"]["generation"].as_i64().unwrap()
            ),
            want,
            "{case}"
        );
    }
}

/// Checks that `o` is marked for deletion (the deletion fields stay whatever the client sends,
/// once marked); answers `how` it was written, its resourceVersion and its generation.
fn marked_for_deletion(case: &str, how: &'static str, o: &Obj) -> (&'static str, u64, i64) {
    assert!(
        o.value()["metadata"]["deletionTimestamp"].is_string(),
        "{case}: deletionTimestamp"
    );
    assert_eq!(
        o.value()["metadata"]["deletionGracePeriodSeconds"],
        0,
        "{case}"
    );
    (
        how,
        o.resource_version(),
        o.value()["metadata"]["generation"].as_i64().unwrap(),
    )
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of delete/update steps
fn finalizers_hold_a_deleted_object_until_removed() {
    enum Step {
        Delete,
        Update(Value),
    }
    let mut s = store();
    s.create(
        ENDPOINTSLICES,
        slice("s", &["example.com/a", "example.com/b"], &["10.0.0.1"]),
    )
    .unwrap(); // 6
    let mut rx = s.watch(ENDPOINTSLICES, None, false).unwrap().rx;

    // (case, step, Ok((Gone|Pending|Updated, rv, generation)) or the Status, events, still stored)
    type Want = Result<(&'static str, u64, i64), Failure>;
    let cases: Vec<(&str, Step, Want, Vec<&str>, bool)> = vec![
        (
            "delete marks it and bumps generation",
            Step::Delete,
            Ok(("Pending", 7, 2)),
            vec!["MODIFIED endpointslices default/s@7"],
            true,
        ),
        (
            "a second delete changes nothing",
            Step::Delete,
            Ok(("Pending", 7, 2)),
            vec![],
            true,
        ),
        (
            "no finalizer may be added while deleting",
            Step::Update(slice(
                "s",
                &[
                    "example.com/a",
                    "example.com/b",
                    "example.com/c",
                    "example.com/0",
                ],
                &["10.0.0.1"],
            )),
            Err(fail(
                422,
                "Invalid",
                "EndpointSlice.discovery.k8s.io \"s\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/0\", \"example.com/c\"}",
            )),
            vec![],
            true,
        ),
        (
            "removing one of two keeps it, still deleting",
            Step::Update(slice("s", &["example.com/b"], &["10.0.0.1"])),
            Ok(("Updated", 8, 2)),
            vec!["MODIFIED endpointslices default/s@8"],
            true,
        ),
        (
            "removing the last one deletes it",
            Step::Update(slice("s", &[], &["10.0.0.1"])),
            Ok(("Updated", 9, 2)),
            vec!["DELETED endpointslices default/s@9"],
            false,
        ),
    ];
    for (case, step, want, events, stored) in cases {
        let got = match step {
            Step::Delete => s
                .delete(ENDPOINTSLICES, "default", "s", None, None)
                .map(|d| match d {
                    Deleted::Gone(o) => ("Gone", o),
                    Deleted::Pending(o) => ("Pending", o),
                }),
            Step::Update(v) => s.update(ENDPOINTSLICES, v).map(|o| ("Updated", o)),
        };
        let got = got
            .map_err(failure)
            .map(|(how, o)| marked_for_deletion(case, how, &o));
        assert_eq!(got, want, "{case}");
        assert_eq!(drain(&mut rx), strs(&events), "{case}: events");
        assert_eq!(
            s.get(ENDPOINTSLICES, "default", "s").is_some(),
            stored,
            "{case}: stored"
        );
    }
}

#[test]
fn delete_honours_preconditions() {
    let cms = configmaps();
    let mut s = store();
    let uid = s.create(cms, cm("default", "a", "v1")).unwrap().value()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned(); // 6
    let mut rx = s.watch(cms, None, false).unwrap().rx;

    // (case, name, uid precondition, rv precondition, Ok(deleted object) or the Status)
    type Case<'a> = (
        &'a str,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        Result<&'a str, Failure>,
    );
    let cases: Vec<Case> = vec![
        (
            "another uid",
            "a",
            Some("0000"),
            None,
            Err((
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on configmaps \"a\": Precondition failed: UID in precondition: 0000, UID in object meta: {uid}"
                ),
            )),
        ),
        (
            "an old resourceVersion",
            "a",
            Some(uid.as_str()),
            Some("5"),
            Err(fail(
                409,
                "Conflict",
                "Operation cannot be fulfilled on configmaps \"a\": Precondition failed: ResourceVersion in precondition: 5, ResourceVersion in object meta: 6",
            )),
        ),
        (
            "an object that does not exist",
            "b",
            None,
            None,
            Err(fail(404, "NotFound", "configmaps \"b\" not found")),
        ),
        (
            "matching preconditions",
            "a",
            Some(uid.as_str()),
            Some("6"),
            Ok("default/a@7=v1"),
        ),
        (
            "again",
            "a",
            None,
            None,
            Err(fail(404, "NotFound", "configmaps \"a\" not found")),
        ),
    ];
    for (case, name, want_uid, want_rv, want) in cases {
        let got = s
            .delete(cms, "default", name, want_uid, want_rv)
            .map(|d| match d {
                Deleted::Gone(o) => show(&o),
                Deleted::Pending(o) => format!("pending {}", show(&o)),
            })
            .map_err(failure);
        assert_eq!(got, want.map(str::to_owned), "{case}");
    }
    assert_eq!(drain(&mut rx), ["DELETED configmaps default/a@7=v1"]);
    // The list at 6 still has it; the one at 7 does not.
    let at = |rv| shown(&s.list(cms, None, ReadAt::Exact(rv)).unwrap().1);
    assert_eq!((at(6), at(7)), (strs(&["default/a@6=v1"]), vec![]));
}

#[test]
fn deleting_a_namespace_deletes_its_contents() {
    let cms = configmaps();
    let mut s = store();
    s.create(NAMESPACES, namespace("shop", &[])).unwrap(); // 6
    s.create(cms, cm("shop", "b", "v1")).unwrap(); // 7
    let web = s
        .create(
            SERVICES,
            svc("shop", "web", json!({"ports": [{"port": 80}]})),
        )
        .unwrap(); // 8
    assert_eq!(web.value()["spec"]["clusterIP"], "10.96.0.2");
    s.create(cms, cm("shop", "a", "v1")).unwrap(); // 9
    s.create(cms, cm("default", "keep", "v1")).unwrap(); // 10
    let mut rx = s.watch(NAMESPACES, None, false).unwrap().rx;

    let gone = s.delete(NAMESPACES, "", "shop", None, None).unwrap();
    assert!(matches!(&gone, Deleted::Gone(o) if show(o) == "/shop@14"));
    assert_eq!(
        drain(&mut rx),
        [
            "DELETED services shop/web@11",
            "DELETED configmaps shop/a@12=v1",
            "DELETED configmaps shop/b@13=v1",
            "DELETED namespaces /shop@14",
        ]
    );
    assert_eq!(
        shown(&s.list(cms, None, ReadAt::Latest).unwrap().1),
        ["default/keep@10=v1"]
    );
    assert_eq!(
        s.create(cms, cm("shop", "c", "v1")).map_err(failure).err(),
        Some(fail(404, "NotFound", "namespaces \"shop\" not found"))
    );
    // The Service's address went back to the pool.
    let again = s
        .create(
            SERVICES,
            svc(
                "default",
                "again",
                json!({"clusterIP": "10.96.0.2", "ports": [{"port": 80}]}),
            ),
        )
        .unwrap();
    assert_eq!(again.value()["spec"]["clusterIP"], "10.96.0.2");
}

#[test]
fn a_namespace_with_finalizers_terminates_until_they_are_removed() {
    let cms = configmaps();
    let mut s = store();
    s.create(NAMESPACES, namespace("shop", &["example.com/hold"]))
        .unwrap(); // 6
    s.create(cms, cm("shop", "a", "v1")).unwrap(); // 7
    let mut rx = s.watch(NAMESPACES, None, false).unwrap().rx;

    let pending = match s.delete(NAMESPACES, "", "shop", None, None).unwrap() {
        Deleted::Pending(o) => o,
        Deleted::Gone(o) => panic!("deleted at once: {}", show(&o)),
    };
    assert_eq!(show(&pending), "/shop@9");
    assert_eq!(pending.value()["status"]["phase"], "Terminating");
    assert!(pending.value()["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        drain(&mut rx),
        [
            "DELETED configmaps shop/a@8=v1",
            "MODIFIED namespaces /shop@9",
        ]
    );
    assert_eq!(
        s.create(cms, cm("shop", "b", "v1")).map_err(failure).err(),
        Some(fail(
            403,
            "Forbidden",
            "unable to create new content in namespace shop because it is being terminated"
        ))
    );

    let mut released = pending.value();
    released["metadata"]["finalizers"] = json!([]);
    let last = s.update(NAMESPACES, released).unwrap();
    assert_eq!(show(&last), "/shop@10");
    assert_eq!(drain(&mut rx), ["DELETED namespaces /shop@10"]);
    assert!(s.get(NAMESPACES, "", "shop").is_none());
    assert_eq!(
        s.create(cms, cm("shop", "b", "v1")).map_err(failure).err(),
        Some(fail(404, "NotFound", "namespaces \"shop\" not found"))
    );
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of ClusterIP allocation steps
fn cluster_ips_come_from_the_service_cidr() {
    use ServiceOp::{Create, Delete, Update};
    let port = || json!([{"port": 80}]);
    let with_ip = |ip: &str| json!({"clusterIP": ip, "ports": port()});
    // A /29: 10.96.0.1 to 10.96.0.6 are usable, and kubernetes has .1.
    let mut s = store_with(1000, (Ipv4Addr::new(10, 96, 0, 3), 29));
    assert_eq!(
        s.get(SERVICES, "default", "kubernetes").unwrap().value()["spec"]["clusterIP"],
        "10.96.0.1"
    );

    // (case, operation, Ok(clusterIP, "" for none) or the Status)
    let cases: Vec<(&str, ServiceOp, Result<&str, Failure>)> = vec![
        (
            "the next free address",
            Create("a", json!({"ports": port()})),
            Ok("10.96.0.2"),
        ),
        (
            "a requested free address",
            Create("b", with_ip("10.96.0.5")),
            Ok("10.96.0.5"),
        ),
        (
            "a requested address that is taken",
            Create("c", with_ip("10.96.0.5")),
            Err(fail(
                422,
                "Invalid",
                "Service \"c\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.96.0.5\"}: failed to allocate IP 10.96.0.5: provided IP is already allocated",
            )),
        ),
        (
            "a requested address outside the range",
            Create("d", with_ip("10.96.0.9")),
            Err(fail(
                422,
                "Invalid",
                "Service \"d\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.96.0.9\"}: failed to allocate IP 10.96.0.9: the provided IP (10.96.0.9) is not in the valid range. The range of valid IPs is 10.96.0.0/29",
            )),
        ),
        (
            "something that is not an address",
            Create("e", with_ip("10.96.0")),
            Err(fail(
                422,
                "Invalid",
                "Service \"e\" is invalid: spec.clusterIPs[0]: Invalid value: \"10.96.0\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            )),
        ),
        ("headless", Create("headless", with_ip("None")), Ok("None")),
        (
            "an ExternalName has none",
            Create(
                "ext",
                json!({"type": "ExternalName", "externalName": "example.com"}),
            ),
            Ok(""),
        ),
        ("f", Create("f", json!({"ports": port()})), Ok("10.96.0.3")),
        ("g", Create("g", json!({"ports": port()})), Ok("10.96.0.4")),
        (
            "the allocator skips a requested address",
            Create("h", json!({"ports": port()})),
            Ok("10.96.0.6"),
        ),
        (
            "the range is full",
            Create("i", json!({"ports": port()})),
            Err(fail(
                500,
                "InternalError",
                "Internal error occurred: failed to allocate a serviceIP: range is full",
            )),
        ),
        ("delete a", Delete("a"), Ok("10.96.0.2")),
        (
            "the released address is reused",
            Create("j", json!({"ports": port()})),
            Ok("10.96.0.2"),
        ),
        ("delete b", Delete("b"), Ok("10.96.0.5")),
        (
            "a requested address freed by a delete",
            Create("c", with_ip("10.96.0.5")),
            Ok("10.96.0.5"),
        ),
        (
            "an update without clusterIP keeps the address",
            Update("j", json!({"ports": [{"port": 8080}]})),
            Ok("10.96.0.2"),
        ),
    ];
    for (case, op, want) in cases {
        let got = run_service_op(&mut s, op);
        let got = got.map_err(failure).map(|o| {
            let spec = &o.value()["spec"];
            let ip = spec["clusterIP"].as_str().unwrap_or("").to_owned();
            // Headless Services' families are `headless_services_get_families_but_no_address`'s.
            if !ip.is_empty() && ip != "None" {
                assert_eq!(spec["clusterIPs"], json!([ip]), "{case}");
                assert_eq!(spec["ipFamilies"], json!(["IPv4"]), "{case}");
                assert_eq!(spec["ipFamilyPolicy"], "SingleStack", "{case}");
            }
            ip
        });
        assert_eq!(got, want.map(str::to_owned), "{case}");
    }
}

/// (case, name, spec, Ok((clusterIP, ipFamily)) or the Status)
type V6Case = (
    &'static str,
    &'static str,
    Value,
    Result<(&'static str, &'static str), Failure>,
);

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of IPv6 ClusterIP cases
fn requested_ipv6_cluster_ips_come_from_the_ipv6_service_cidrs() {
    let port = || json!([{"port": 80}]);
    let v6 = |ip: &str| json!({"clusterIP": ip, "clusterIPs": [ip], "ipFamilies": ["IPv6"], "ports": port()});
    let mut s = Store::new(&StoreConfig {
        service_cidrs_v6: vec![
            ("fd00:96::".parse().unwrap(), 108),
            // Host bits in the network are ignored, as for the IPv4 range.
            ("fd00:100::1".parse().unwrap(), 112),
        ],
        ..StoreConfig::default()
    });
    let family = |o: &Obj| {
        let spec = &o.value()["spec"];
        (
            spec["clusterIP"].as_str().unwrap_or("").to_owned(),
            spec["clusterIPs"].clone(),
            spec["ipFamilies"].clone(),
        )
    };

    let cases: Vec<V6Case> = vec![
        (
            "in the first range",
            "a",
            v6("fd00:96::10"),
            Ok(("fd00:96::10", "IPv6")),
        ),
        (
            "in the second range",
            "b",
            v6("fd00:100::10"),
            Ok(("fd00:100::10", "IPv6")),
        ),
        (
            "the last address of a range",
            "c",
            v6("fd00:96::f:ffff"),
            Ok(("fd00:96::f:ffff", "IPv6")),
        ),
        (
            "taken",
            "d",
            v6("fd00:96::10"),
            Err(fail(
                422,
                "Invalid",
                "Service \"d\" is invalid: spec.clusterIPs: Invalid value: []string{\"fd00:96::10\"}: failed to allocate IP fd00:96::10: provided IP is already allocated",
            )),
        ),
        (
            "just past the /108",
            "e",
            v6("fd00:96::10:0"),
            Err(fail(
                422,
                "Invalid",
                "Service \"e\" is invalid: spec.clusterIPs: Invalid value: []string{\"fd00:96::10:0\"}: failed to allocate IP fd00:96::10:0: the provided IP (fd00:96::10:0) is not in the valid range. The range of valid IPs is fd00:96::/108, fd00:100::/112",
            )),
        ),
        (
            "allocation stays IPv4",
            "f",
            json!({"ports": port()}),
            Ok(("10.96.0.2", "IPv4")),
        ),
    ];
    for (case, name, spec, want) in cases {
        let got = s
            .create(SERVICES, svc("default", name, spec))
            .map_err(failure)
            .map(|o| family(&o));
        match want {
            Ok((ip, fam)) => {
                let (got_ip, ips, fams) = got.unwrap_or_else(|e| panic!("{case}: {e:?}"));
                assert_eq!(got_ip, ip, "{case}");
                assert_eq!(ips, json!([ip]), "{case}");
                assert_eq!(fams, json!([fam]), "{case}");
            }
            Err(e) => assert_eq!(got.map(|_| ()), Err(e), "{case}"),
        }
    }

    // Deleting gives the address back; an update keeps it.
    s.delete(SERVICES, "default", "a", None, None).unwrap();
    let again = s
        .create(SERVICES, svc("default", "g", v6("fd00:96::10")))
        .unwrap();
    assert_eq!(family(&again).0, "fd00:96::10");
    let updated = s
        .update(
            SERVICES,
            svc("default", "g", json!({"ports": [{"port": 8080}]})),
        )
        .unwrap();
    assert_eq!(
        (family(&updated).0, family(&updated).2),
        ("fd00:96::10".to_owned(), json!(["IPv6"]))
    );
}

#[test]
fn ipv6_cluster_ips_need_an_ipv6_service_cidr() {
    let v6 = |ip: &str| json!({"clusterIP": ip, "clusterIPs": [ip], "ipFamilies": ["IPv6"], "ports": [{"port": 80}]});
    // A cluster without IPv6 ranges refuses IPv6 ClusterIPs; the default has one.
    let mut v4_only = Store::new(&StoreConfig {
        service_cidrs_v6: Vec::new(),
        ..StoreConfig::default()
    });
    assert_eq!(
        v4_only
            .create(SERVICES, svc("default", "a", v6("fd00:96::10")))
            .map(|_| ())
            .map_err(failure),
        Err(fail(
            422,
            "Invalid",
            "Service \"a\" is invalid: spec.ipFamilies[0]: Invalid value: \"IPv6\": not configured on this cluster",
        ))
    );
    let mut default = store();
    let o = default
        .create(SERVICES, svc("default", "a", v6("fd00:96::10")))
        .unwrap();
    assert_eq!(o.value()["spec"]["ipFamilies"], json!(["IPv6"]));
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of node port allocation steps
fn node_ports_are_allocated_kept_and_released() {
    use ServiceOp::{Create, Delete, Update};
    let node_port = |ports: Value| json!({"type": "NodePort", "ports": ports});

    // (case, operation, Ok((clusterIP, nodePorts)) or the Status)
    type Want = Result<(&'static str, Vec<u64>), Failure>;
    let cases: Vec<(&str, ServiceOp, Want)> = vec![
        (
            "a NodePort Service",
            Create("a", node_port(json!([{"port": 80}]))),
            Ok(("10.96.0.2", vec![30000])),
        ),
        (
            "a LoadBalancer with two ports",
            Create(
                "b",
                json!({"type": "LoadBalancer",
                       "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]}),
            ),
            Ok(("10.96.0.3", vec![30001, 30002])),
        ),
        (
            "a requested node port",
            Create("c", node_port(json!([{"port": 80, "nodePort": 30005}]))),
            Ok(("10.96.0.4", vec![30005])),
        ),
        (
            "a requested node port that is taken",
            Create("d", node_port(json!([{"port": 80, "nodePort": 30000}]))),
            Err(fail(
                422,
                "Invalid",
                "Service \"d\" is invalid: spec.ports[0].nodePort: Invalid value: 30000: provided port is already allocated",
            )),
        ),
        (
            "a requested node port outside the range",
            Create("e", node_port(json!([{"port": 80, "nodePort": 29999}]))),
            Err(fail(
                422,
                "Invalid",
                "Service \"e\" is invalid: spec.ports[0].nodePort: Invalid value: 29999: provided port is not in the valid range. The range of valid ports is 30000-32767",
            )),
        ),
        // The failed creates above took 10.96.0.5 and .6 and gave them back.
        (
            "the address a failed create had",
            Create(
                "k",
                json!({"clusterIP": "10.96.0.5", "ports": [{"port": 80}]}),
            ),
            Ok(("10.96.0.5", vec![])),
        ),
        (
            "the address the other failed create had",
            Create(
                "l",
                json!({"clusterIP": "10.96.0.6", "ports": [{"port": 80}]}),
            ),
            Ok(("10.96.0.6", vec![])),
        ),
        (
            "the next one",
            Create("f", node_port(json!([{"port": 80}]))),
            Ok(("10.96.0.7", vec![30003])),
        ),
        (
            "the allocator skips a requested node port",
            Create(
                "g",
                node_port(json!([{"name": "a", "port": 80}, {"name": "b", "port": 81}])),
            ),
            Ok(("10.96.0.8", vec![30004, 30006])),
        ),
        (
            "an update keeps the node port of the same port and adds one",
            Update(
                "a",
                node_port(json!([{"name": "a", "port": 80}, {"name": "b", "port": 8080}])),
            ),
            Ok(("10.96.0.2", vec![30000, 30007])),
        ),
        (
            "an update to ClusterIP gives the node ports back",
            Update("a", json!({"ports": [{"port": 80}]})),
            Ok(("10.96.0.2", vec![])),
        ),
        (
            "a node port released by an update",
            Create("h", node_port(json!([{"port": 80, "nodePort": 30007}]))),
            Ok(("10.96.0.9", vec![30007])),
        ),
        (
            "delete b",
            Delete("b"),
            Ok(("10.96.0.3", vec![30001, 30002])),
        ),
        (
            "node ports released by a delete",
            Create(
                "i",
                node_port(json!([{"name": "a", "port": 80}, {"name": "b", "port": 81}])),
            ),
            Ok(("10.96.0.10", vec![30000, 30001])),
        ),
    ];
    let mut s = store();
    for (case, op, want) in cases {
        let got = run_service_op(&mut s, op);
        let got = got.map_err(failure).map(|o| {
            let spec = &o.value()["spec"];
            let ports: Vec<u64> = spec["ports"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
                .collect();
            (spec["clusterIP"].as_str().unwrap().to_owned(), ports)
        });
        assert_eq!(got, want.map(|(ip, p)| (ip.to_owned(), p)), "{case}");
    }
}

mod dual_stack;
