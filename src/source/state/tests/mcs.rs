//! Table tests of the MCS join: watcher events in, model events and
//! actions out.

use super::*;
use k8s_openapi::jiff::Timestamp;

const T1: i64 = 1_767_225_600;
const T2: i64 = 1_767_312_000;
/// The every-Service watch of [`mcs_remote`].
const ALL: usize = 3;

fn plain(name: &str) -> K8sService {
    svc(name, json!({}))
}

fn flat_svc(name: &str) -> K8sService {
    svc(
        name,
        json!({"mirror.linkerd.io/exported": "remote-discovery"}),
    )
}

fn dynamic(v: serde_json::Value) -> Object {
    Object::dynamic(serde_json::from_value(v).expect("an object"))
}

fn export(name: &str, created: i64) -> Object {
    let t = Timestamp::from_second(created).expect("a time").to_string();
    dynamic(json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": name, "namespace": "prod", "creationTimestamp": t}
    }))
}

/// A ServiceExport that opts its MCS name into nearest answers.
fn export_nearest(name: &str, created: i64) -> Object {
    let t = Timestamp::from_second(created).expect("a time").to_string();
    dynamic(json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": name, "namespace": "prod", "creationTimestamp": t,
                     "annotations": {"clusterset-dns.io/nearest": "true"}}
    }))
}

fn export_in(namespace: &str, name: &str, created: i64) -> Object {
    let t = Timestamp::from_second(created).expect("a time").to_string();
    dynamic(json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": t}
    }))
}

fn property(name: &str, value: &str) -> Object {
    dynamic(json!({
        "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
        "metadata": {"name": name}, "spec": {"value": value}
    }))
}

fn import(name: &str, ips: &[&str]) -> Object {
    dynamic(json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": name, "namespace": "prod"},
        "spec": {"type": "ClusterSetIP", "ips": ips, "ports": []}
    }))
}

/// A linked cluster with `--mcs`: watches 0-2 Linkerd's selectors, 3 every
/// Service.
fn mcs_remote() -> ClusterState {
    let mut st = ClusterState::new(
        "east".into(),
        false,
        Selectors::linkerd_defaults(),
        Trust::default(),
        4,
    );
    // As the shell does: the ClusterProperty watch runs in every mode.
    st.set_property_watch();
    st.set_mcs(ALL);
    st
}

/// One step of a case.
enum Step {
    /// A watcher event of a watch.
    W(Watch, WatchEvent<Object>),
    /// A targeted Service list returned.
    ListedService(&'static str, Vec<K8sService>),
    /// A targeted slice list returned.
    ListedSlices(&'static str, Vec<K8sSlice>),
    /// The end of a batch.
    Settle,
}

use Step::*;

fn apply(w: Watch, o: Object) -> Step {
    W(w, WatchEvent::Apply(o))
}

fn delete(w: Watch, o: Object) -> Step {
    W(w, WatchEvent::Delete(o))
}

fn svc_obj(s: K8sService) -> Object {
    Object::service(s)
}

/// A full list of `w`.
fn list(w: Watch, items: Vec<Object>) -> Vec<Step> {
    let mut steps = vec![W(w, WatchEvent::Init)];
    steps.extend(items.into_iter().map(|o| W(w, WatchEvent::InitApply(o))));
    steps.push(W(w, WatchEvent::InitDone));
    steps
}

/// First sync: the Linkerd watches list `linkerd` (watch 1, remote
/// discovery), the exports `exports`, then every Service `all`, the slices
/// `slices`, and the batch settles.
fn first_sync(
    linkerd: Vec<K8sService>,
    exports: Vec<Object>,
    all: Vec<K8sService>,
    slices: Vec<K8sSlice>,
) -> Vec<Step> {
    let mut steps = list(Watch::Services(0), vec![]);
    steps.extend(list(
        Watch::Services(1),
        linkerd.into_iter().map(svc_obj).collect(),
    ));
    steps.extend(list(Watch::Services(2), vec![]));
    steps.extend(list(Watch::Exports, exports));
    steps.extend(list(Watch::Properties, vec![]));
    steps.extend(list(
        Watch::Services(ALL),
        all.into_iter().map(svc_obj).collect(),
    ));
    steps.extend(list(
        Watch::Slices,
        slices.into_iter().map(Object::slice).collect(),
    ));
    steps.push(Settle);
    steps
}

/// Events and actions as short strings.
fn said(out: &Output) -> Vec<String> {
    let mut v: Vec<String> = out
        .events
        .iter()
        .map(|e| match e {
            Event::ServiceApplied { service, .. } => format!(
                "+svc {} mcs={}{}",
                service.key,
                service.mcs.map_or("-".to_owned(), |t| t.to_string()),
                if service.mcs_nearest { " nearest" } else { "" }
            ),
            Event::ClusterIdApplied { id, .. } => format!("id {}", id.as_deref().unwrap_or("-")),
            Event::ImportApplied { import, .. } => {
                format!("+import {} {:?}", import.key, import.ips)
            }
            Event::ImportDeleted { key, .. } => format!("-import {key}"),
            Event::SliceApplied { slice, .. } => {
                format!("+slice {} ({})", slice.key, slice.endpoints.len())
            }
            Event::SliceDeleted { key, .. } => format!("-slice {key}"),
            Event::ServiceDeleted { key, .. } => format!("-svc {key}"),
            Event::ExternalNameApplied { key, present, .. } => {
                format!("{}externalname {key}", if *present { "+" } else { "-" })
            }
            other => format!("{other:?}"),
        })
        .collect();
    v.extend(out.actions.iter().map(|a| match a {
        Action::ListSlices(k) => format!("list slices {k}"),
        Action::ListService(k) => format!("list svc {k}"),
    }));
    v.extend(adjusted(out));
    v
}

/// Runs `setup`, then `steps`, and returns what `steps` said.
fn run(st: &mut ClusterState, setup: Vec<Step>, steps: Vec<Step>) -> Vec<String> {
    let mut out = Output::default();
    for s in setup {
        step(st, s, &mut out);
    }
    let mut out = Output::default();
    for s in steps {
        step(st, s, &mut out);
    }
    said(&out)
}

fn step(st: &mut ClusterState, s: Step, out: &mut Output) {
    let o = match s {
        W(w, e) => st.watched(w, e),
        ListedService(name, items) => st.listed_service(&ObjectKey::new("prod", name), items),
        ListedSlices(name, items) => st.listed(&ObjectKey::new("prod", name), items),
        Settle => {
            let mut o = Output::default();
            st.settle(&mut o);
            o
        }
    };
    merge(out, o);
}

fn t(s: &str) -> String {
    s.replace("T1", &T1.to_string())
        .replace("T2", &T2.to_string())
}

#[test]
fn the_export_join_table() {
    struct Case {
        name: &'static str,
        setup: Vec<Step>,
        steps: Vec<Step>,
        said: Vec<&'static str>,
        services: usize,
    }
    let web1 = || slice("web-1", "web", &["10.1.0.1"]);
    let cases = vec![
        Case {
            name: "an export makes an unlabelled Service a member, with the export's age",
            setup: vec![],
            steps: first_sync(
                vec![],
                vec![export("web", T1)],
                vec![plain("web")],
                vec![web1()],
            ),
            said: vec!["+svc prod/web mcs=T1", "+slice prod/web-1 (1)"],
            services: 1,
        },
        Case {
            name: "an export's nearest opt-in reaches the model, and so does its removal",
            setup: first_sync(
                vec![],
                vec![export("web", T1)],
                vec![plain("web")],
                vec![web1()],
            ),
            steps: vec![
                apply(Watch::Exports, export_nearest("web", T1)),
                apply(Watch::Exports, export("web", T1)),
            ],
            said: vec!["+svc prod/web mcs=T1 nearest", "+svc prod/web mcs=T1"],
            services: 1,
        },
        Case {
            name: "an unlabelled Service without an export is not held, its slices neither",
            setup: vec![],
            steps: first_sync(vec![], vec![], vec![plain("web")], vec![web1()]),
            said: vec![],
            services: 0,
        },
        Case {
            name: "a Linkerd export with a ServiceExport carries its age; the label alone does not",
            setup: vec![],
            steps: first_sync(
                vec![flat_svc("web"), flat_svc("db")],
                vec![export("web", T1)],
                vec![flat_svc("web"), flat_svc("db")],
                vec![],
            ),
            said: vec![
                "+svc prod/web mcs=-",
                "+svc prod/db mcs=-",
                "+svc prod/web mcs=T1",
            ],
            services: 2,
        },
        Case {
            name: "a later export asks for its Service; the list makes it a member and lists its slices",
            setup: first_sync(vec![], vec![], vec![plain("web")], vec![web1()]),
            steps: vec![
                apply(Watch::Exports, export("web", T1)),
                ListedService("web", vec![plain("web")]),
                ListedSlices("web", vec![web1()]),
                Settle,
            ],
            said: vec![
                "+svc prod/web mcs=T1",
                "+slice prod/web-1 (1)",
                "list svc prod/web",
                "list slices prod/web",
            ],
            services: 1,
        },
        Case {
            name: "what the every-Service watch said since wins over the targeted list",
            setup: first_sync(vec![], vec![], vec![], vec![]),
            steps: vec![
                apply(Watch::Exports, export("web", T1)),
                apply(Watch::Services(ALL), svc_obj(plain("web"))),
                delete(Watch::Services(ALL), svc_obj(plain("web"))),
                ListedService("web", vec![plain("web")]),
            ],
            said: vec![
                "+svc prod/web mcs=T1",
                "-svc prod/web",
                "list svc prod/web",
                "list slices prod/web",
            ],
            services: 0,
        },
        Case {
            name: "an export added to and removed from a Linkerd export re-emits it, slices stay",
            setup: first_sync(
                vec![flat_svc("web")],
                vec![],
                vec![flat_svc("web")],
                vec![web1()],
            ),
            steps: vec![
                apply(Watch::Exports, export("web", T1)),
                apply(Watch::Exports, export("web", T2)),
                delete(Watch::Exports, export("web", T2)),
            ],
            said: vec![
                "+svc prod/web mcs=T1",
                "+svc prod/web mcs=T2",
                "+svc prod/web mcs=-",
            ],
            services: 1,
        },
        Case {
            name: "the export deleted: the member and its slices go",
            setup: first_sync(
                vec![],
                vec![export("web", T1)],
                vec![plain("web")],
                vec![web1()],
            ),
            steps: vec![delete(Watch::Exports, export("web", T1))],
            said: vec!["-svc prod/web", "-slice prod/web-1"],
            services: 0,
        },
        Case {
            name: "an export missing from a relist is deleted; one still there says nothing",
            setup: first_sync(
                vec![],
                vec![export("web", T1), export("db", T1)],
                vec![plain("web"), plain("db")],
                vec![web1()],
            ),
            steps: list(Watch::Exports, vec![export("db", T1)]),
            said: vec!["-svc prod/web", "-slice prod/web-1"],
            services: 1,
        },
        Case {
            name: "the Linkerd label goes while an export stays: still a member",
            setup: first_sync(
                vec![flat_svc("web")],
                vec![export("web", T1)],
                vec![flat_svc("web")],
                vec![web1()],
            ),
            steps: vec![
                delete(Watch::Services(1), svc_obj(flat_svc("web"))),
                apply(Watch::Services(ALL), svc_obj(plain("web"))),
            ],
            said: vec!["+svc prod/web mcs=T1"],
            services: 1,
        },
        Case {
            name: "an export that names no possible Service is skipped and reported",
            setup: first_sync(vec![], vec![export("web", T1)], vec![plain("web")], vec![]),
            steps: list(Watch::Exports, vec![export("web", T1), export("Web_1", T1)]),
            said: vec!["ServiceExport prod/Web_1: skipped name_not_a_label"],
            services: 1,
        },
        Case {
            name: "an export from kube-system is not ours to serve: skipped and counted, its Service not asked for",
            setup: first_sync(vec![], vec![], vec![], vec![]),
            steps: vec![
                apply(Watch::Exports, export_in("kube-system", "kube-dns", T1)),
                Settle,
            ],
            said: vec!["ServiceExport kube-system/kube-dns: skipped namespace_denied"],
            services: 0,
        },
    ];
    for c in cases {
        let mut st = mcs_remote();
        let got = run(&mut st, c.setup, c.steps);
        let want: Vec<String> = c.said.iter().map(|s| t(s)).collect();
        assert_eq!(got, want, "{}", c.name);
        assert_eq!(st.counts().services, c.services, "{}", c.name);
        assert!(st.synced(), "{}", c.name);
    }
}

#[test]
fn the_cluster_id_table() {
    let id = |v: &str| apply(Watch::Properties, property(CLUSTER_ID, v));
    // Name, steps, what they say, the problem reported.
    type Case = (
        &'static str,
        Vec<Step>,
        Vec<&'static str>,
        Option<&'static str>,
    );
    let cases: Vec<Case> = vec![
        ("a valid id", vec![id("east-1")], vec!["id east-1"], None),
        (
            "an id changes",
            vec![id("east-1"), id("east-2")],
            vec!["id east-1", "id east-2"],
            None,
        ),
        (
            "the same id again says nothing",
            vec![id("east-1"), id("east-1")],
            vec!["id east-1"],
            None,
        ),
        (
            "an invalid id: counted, the name stays the id, reported",
            vec![id("east-1"), id("East_1")],
            vec![
                "id east-1",
                "id -",
                "ClusterProperty cluster.clusterset.k8s.io: skipped cluster_id_not_a_label",
            ],
            Some("not an RFC 1123 label"),
        ),
        (
            "the property deleted",
            vec![
                id("east-1"),
                delete(Watch::Properties, property(CLUSTER_ID, "east-1")),
            ],
            vec!["id east-1", "id -"],
            None,
        ),
        (
            "a relist without it",
            [vec![id("east-1")], list(Watch::Properties, vec![])]
                .into_iter()
                .flatten()
                .collect(),
            vec!["id east-1", "id -"],
            None,
        ),
        (
            "another property is not ours",
            vec![apply(
                Watch::Properties,
                property("clusterset.k8s.io", "set"),
            )],
            vec![],
            None,
        ),
    ];
    for (name, steps, want, problem) in cases {
        let mut st = mcs_remote();
        let got = run(&mut st, first_sync(vec![], vec![], vec![], vec![]), steps);
        assert_eq!(got, want, "{name}");
        let report = st.mcs_report();
        match problem {
            Some(p) => assert!(
                report.id_problem.as_deref().is_some_and(|s| s.contains(p)),
                "{name}: {report:?}"
            ),
            None => assert_eq!(report.id_problem, None, "{name}"),
        }
    }
}

const CLUSTER_ID: &str = "cluster.clusterset.k8s.io";

/// `name` as an ExternalName Service.
fn external_name(name: &str) -> K8sService {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "prod"},
        "spec": {"type": "ExternalName", "externalName": "example.com"}
    }))
    .expect("a Service")
}

#[test]
fn the_local_clusters_external_name_services_are_told_to_the_model() {
    let mut st = ClusterState::new(
        "west".into(),
        true,
        Selectors::linkerd_defaults(),
        Trust::default(),
        3,
    );
    st.set_mcs(2);
    let setup = [
        list(Watch::Services(0), vec![]),
        list(Watch::Services(1), vec![]),
        list(Watch::Exports, vec![]),
        list(Watch::Properties, vec![]),
        list(Watch::Imports, vec![]),
        list(Watch::Slices, vec![]),
    ]
    .into_iter()
    .flatten()
    .collect();
    let got = run(
        &mut st,
        setup,
        [
            list(
                Watch::Services(2),
                vec![svc_obj(external_name("hello")), svc_obj(plain("web"))],
            ),
            // Seen again, and by a Linkerd watch: nothing new.
            vec![apply(Watch::Services(2), svc_obj(external_name("hello")))],
            vec![apply(Watch::Services(0), svc_obj(external_name("hello")))],
            // It becomes a ClusterIP Service, then an ExternalName again.
            vec![apply(Watch::Services(2), svc_obj(plain("hello")))],
            vec![apply(Watch::Services(2), svc_obj(external_name("hello")))],
            vec![delete(Watch::Services(2), svc_obj(external_name("hello")))],
            vec![apply(Watch::Services(2), svc_obj(external_name("api")))],
            // A relist without it: gone.
            list(Watch::Services(2), vec![]),
        ]
        .into_iter()
        .flatten()
        .collect(),
    );
    assert_eq!(
        got,
        [
            "+externalname prod/hello",
            "-externalname prod/hello",
            "+externalname prod/hello",
            "-externalname prod/hello",
            "+externalname prod/api",
            "-externalname prod/api",
        ]
    );
    // A linked cluster's ExternalName Services are never the model's.
    let mut remote = mcs_remote();
    let got = run(
        &mut remote,
        vec![],
        list(Watch::Services(ALL), vec![svc_obj(external_name("hello"))]),
    );
    assert_eq!(got, Vec::<String>::new());
}

#[test]
fn local_imports_follow_their_watch() {
    let mut st = ClusterState::new(
        "west".into(),
        true,
        Selectors::linkerd_defaults(),
        Trust::default(),
        3,
    );
    st.set_mcs(2);
    let mut setup = list(Watch::Services(0), vec![]);
    setup.extend(list(Watch::Services(1), vec![]));
    setup.extend(list(Watch::Exports, vec![]));
    setup.extend(list(Watch::Properties, vec![]));
    setup.extend(list(Watch::Services(2), vec![]));
    setup.extend(list(Watch::Slices, vec![]));
    setup.push(Settle);
    let mut out = Output::default();
    for s in setup {
        step(&mut st, s, &mut out);
    }
    assert!(
        !st.synced(),
        "the local cluster waits for its ServiceImports"
    );
    let got = run(
        &mut st,
        vec![],
        [
            list(
                Watch::Imports,
                vec![import("web", &["10.9.0.1"]), import("db", &[])],
            ),
            vec![apply(Watch::Imports, import("web", &["10.9.0.1"]))],
            list(Watch::Imports, vec![import("web", &["10.9.0.2"])]),
            // Even the local cluster's imports may not name a metadata
            // address: left out, the rest kept.
            vec![apply(
                Watch::Imports,
                import("web", &["169.254.169.254", "10.9.0.2"]),
            )],
        ]
        .into_iter()
        .flatten()
        .collect(),
    );
    assert_eq!(
        got,
        [
            "+import prod/web [10.9.0.1]",
            "+import prod/db []",
            "+import prod/web [10.9.0.2]",
            "-import prod/db",
            "ServiceImport prod/web: clamped address_metadata"
        ]
    );
    assert!(st.synced());
}

#[test]
fn sync_waits_for_the_mcs_watches_and_an_empty_list_releases_it() {
    let mut st = mcs_remote();
    let mut out = Output::default();
    for w in [0, 1, 2] {
        for s in list(Watch::Services(w), vec![]) {
            step(&mut st, s, &mut out);
        }
    }
    assert!(!st.exports_listed());
    // What the shell does for a cluster without the CRDs.
    for w in [
        Watch::Exports,
        Watch::Properties,
        Watch::Services(ALL),
        Watch::Slices,
    ] {
        assert!(!st.synced(), "{w:?}");
        for s in list(w, vec![]) {
            step(&mut st, s, &mut out);
        }
    }
    assert!(st.exports_listed());
    assert!(st.synced());
    assert!(said(&out).is_empty());
}

#[test]
fn a_restart_keeps_the_members_until_the_new_watches_list() {
    let mut st = mcs_remote();
    run(
        &mut st,
        vec![],
        first_sync(vec![], vec![export("web", T1)], vec![plain("web")], vec![]),
    );
    let mut st = st.restart(Selectors::linkerd_defaults(), Trust::default(), 4);
    st.set_property_watch();
    st.set_mcs(ALL);
    assert_eq!(st.counts().services, 1);
    let got = run(
        &mut st,
        vec![],
        first_sync(vec![], vec![export("web", T1)], vec![plain("web")], vec![]),
    );
    assert!(got.is_empty(), "{got:?}");
    assert!(st.synced());
    let got = run(&mut st, vec![], first_sync(vec![], vec![], vec![], vec![]));
    assert_eq!(got, ["-svc prod/web"]);
}
