use kube::runtime::watcher::Event as E;

use super::*;
use crate::model::budget::{Budget, Refused};
use serde_json::json;

fn svc(name: &str, labels: serde_json::Value) -> K8sService {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "prod", "labels": labels},
        "spec": {"clusterIP": "10.0.0.1", "ports": [{"name": "http", "port": 80}]}
    }))
    .expect("a Service")
}

fn gateway_mode(name: &str) -> K8sService {
    svc(name, json!({"mirror.linkerd.io/exported": "true"}))
}

fn federated(name: &str) -> K8sService {
    svc(name, json!({"mirror.linkerd.io/federated": "member"}))
}

fn slice(name: &str, service: &str, ips: &[&str]) -> K8sSlice {
    let endpoints: Vec<_> = ips.iter().map(|ip| json!({"addresses": [ip]})).collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "prod",
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080}]
    }))
    .expect("a slice")
}

/// Events as short strings: `+svc prod/web`, `-slice prod/web-1`...
fn summary(out: &Output) -> Vec<String> {
    out.events
        .iter()
        .map(|e| match e {
            Event::ServiceApplied { service, .. } if service.refused => {
                format!("+svc {} refused", service.key)
            }
            Event::ServiceApplied { service, .. } => format!("+svc {}", service.key),
            Event::ServiceDeleted { key, .. } => format!("-svc {key}"),
            Event::SliceApplied { slice, .. } => {
                format!("+slice {} ({})", slice.key, slice.endpoints.len())
            }
            Event::SliceDeleted { key, .. } => format!("-slice {key}"),
            Event::MirrorApplied { mirror, .. } => format!("+mirror {}", mirror.key),
            Event::MirrorDeleted { key, .. } => format!("-mirror {key}"),
            Event::GatewayApplied { gateway, .. } => format!("gateway {}", gateway.is_some()),
            other => format!("{other:?}"),
        })
        .collect()
}

/// Objects adjusted: `<object>: <action> <reason>`.
fn adjusted(out: &Output) -> Vec<String> {
    out.adjusted
        .iter()
        .flat_map(|a| {
            a.warnings.iter().map(move |w| {
                format!(
                    "{}: {} {}",
                    a.object,
                    a.adjustment.label(),
                    w.reason.label()
                )
            })
        })
        .collect()
}

fn remote() -> ClusterState {
    // Watch 0: gateway selector, 1: remote discovery, 2: federated.
    ClusterState::new(
        "east".into(),
        false,
        Selectors::linkerd_defaults(),
        Trust::default(),
        3,
    )
}

fn sync(st: &mut ClusterState, services: [Vec<K8sService>; 3], slices: Vec<K8sSlice>) -> Output {
    let mut out = Output::default();
    for (w, items) in services.into_iter().enumerate() {
        st.feed(Watch::Services(w), E::Init, &mut out);
        for s in items {
            st.feed(
                Watch::Services(w),
                E::InitApply(Object::service(s.clone())),
                &mut out,
            );
        }
        st.feed(Watch::Services(w), E::InitDone, &mut out);
    }
    assert!(st.services_listed());
    st.feed(Watch::Slices, E::Init, &mut out);
    for s in slices {
        st.feed(
            Watch::Slices,
            E::InitApply(Object::slice(s.clone())),
            &mut out,
        );
    }
    st.feed(Watch::Slices, E::InitDone, &mut out);
    // The end of the shell's batch: the budget judges, slices go out.
    st.settle(&mut out);
    out
}

#[test]
fn first_sync_keeps_only_slices_of_exported_services() {
    let mut st = remote();
    let out = sync(
        &mut st,
        [vec![gateway_mode("web")], vec![], vec![federated("db")]],
        vec![
            slice("web-1", "web", &["10.1.0.1"]),
            slice("db-1", "db", &["10.1.0.2", "10.1.0.3"]),
            slice("internal-1", "internal", &["10.1.0.9"]),
        ],
    );
    assert_eq!(
        summary(&out),
        [
            "+svc prod/web",
            "+svc prod/db",
            "+slice prod/db-1 (2)",
            "+slice prod/web-1 (1)"
        ]
    );
    assert!(st.synced());
    assert_eq!(
        st.counts(),
        Counts {
            services: 2,
            mirrors: 0,
            slices: 2,
            endpoints: 3
        }
    );
}

#[test]
fn a_service_in_two_watches_goes_only_when_both_let_go() {
    let both = svc(
        "bb",
        json!({"mirror.linkerd.io/exported": "true", "mirror.linkerd.io/federated": "member"}),
    );
    let mut st = remote();
    sync(
        &mut st,
        [vec![both.clone()], vec![], vec![both.clone()]],
        vec![slice("bb-1", "bb", &["10.1.0.1"])],
    );
    // Relabelled: no longer gateway-exported; the federated watch still has it.
    let mut out = Output::default();
    st.feed(
        Watch::Services(0),
        E::Delete(Object::service(both.clone())),
        &mut out,
    );
    assert!(summary(&out).is_empty(), "{:?}", summary(&out));
    let fed_only = federated("bb");
    st.feed(
        Watch::Services(2),
        E::Apply(Object::service(fed_only.clone())),
        &mut out,
    );
    assert_eq!(summary(&out), ["+svc prod/bb"]);
    let mut out = Output::default();
    st.feed(
        Watch::Services(2),
        E::Delete(Object::service(fed_only.clone())),
        &mut out,
    );
    assert_eq!(summary(&out), ["-svc prod/bb", "-slice prod/bb-1"]);
    assert_eq!(st.counts(), Counts::default());
}

#[test]
fn newly_exported_service_gets_a_targeted_list_and_newer_watch_data_wins() {
    let mut st = remote();
    sync(&mut st, [vec![], vec![], vec![]], vec![]);
    let mut out = Output::default();
    // Slices of a not-yet-exported service are dropped...
    st.feed(
        Watch::Slices,
        E::Apply(Object::slice(slice("api-1", "api", &["10.2.0.1"]).clone())),
        &mut out,
    );
    assert!(out.events.is_empty());
    // ...until it is exported: then a targeted list is asked for.
    let api = svc(
        "api",
        json!({"mirror.linkerd.io/exported": "remote-discovery"}),
    );
    st.feed(Watch::Services(1), E::Apply(Object::service(api)), &mut out);
    assert_eq!(
        out.actions,
        [Action::ListSlices(ObjectKey::new("prod", "api"))]
    );
    // The watch delivers a newer api-1 and deletes api-2 before the list returns.
    st.feed(
        Watch::Slices,
        E::Apply(Object::slice(
            slice("api-1", "api", &["10.2.0.1", "10.2.0.2"]).clone(),
        )),
        &mut out,
    );
    st.feed(
        Watch::Slices,
        E::Delete(Object::slice(slice("api-2", "api", &["10.2.0.5"]).clone())),
        &mut out,
    );
    let mut out = Output::default();
    st.slices_listed(
        &ObjectKey::new("prod", "api"),
        vec![
            slice("api-1", "api", &["10.2.0.1"]),
            slice("api-2", "api", &["10.2.0.5"]),
            slice("api-3", "api", &["10.2.0.6"]),
        ],
        &mut out,
    );
    st.settle(&mut out);
    assert_eq!(
        summary(&out),
        ["+slice prod/api-1 (2)", "+slice prod/api-3 (1)"],
        "the watch's api-1, the list's api-3"
    );
    assert_eq!(st.counts().endpoints, 3);
}

#[test]
fn relist_deletes_what_disappeared_meanwhile() {
    let mut st = remote();
    sync(
        &mut st,
        [
            vec![gateway_mode("web"), gateway_mode("old")],
            vec![],
            vec![],
        ],
        vec![
            slice("web-1", "web", &["10.1.0.1"]),
            slice("web-2", "web", &["10.1.0.2"]),
        ],
    );
    // After a 410 both watches list again.
    let out = sync(
        &mut st,
        [vec![gateway_mode("web")], vec![], vec![]],
        vec![slice("web-1", "web", &["10.1.0.1"])],
    );
    // Unchanged objects are sent again; the model drops what did not change.
    assert_eq!(
        summary(&out),
        [
            "-svc prod/old",
            "-slice prod/web-2",
            "+slice prod/web-1 (1)"
        ]
    );
}

#[test]
fn restart_serves_old_data_until_the_new_watches_confirm_it() {
    let mut st = remote();
    sync(
        &mut st,
        [
            vec![gateway_mode("web"), gateway_mode("gone")],
            vec![],
            vec![],
        ],
        vec![
            slice("web-1", "web", &["10.1.0.1"]),
            slice("gone-1", "gone", &["10.1.0.7"]),
        ],
    );
    // New credentials; the new watch set has only one Service watch.
    let mut st = st.restart(Selectors::linkerd_defaults(), Trust::default(), 1);
    assert!(st.synced(), "a restarted cluster keeps serving");
    let mut out = Output::default();
    st.feed(Watch::Services(0), E::Init, &mut out);
    st.feed(
        Watch::Services(0),
        E::InitApply(Object::service(gateway_mode("web").clone())),
        &mut out,
    );
    assert!(summary(&out).is_empty(), "unchanged objects send nothing");
    st.feed(Watch::Services(0), E::InitDone, &mut out);
    st.feed(Watch::Slices, E::Init, &mut out);
    st.feed(
        Watch::Slices,
        E::InitApply(Object::slice(slice("web-1", "web", &["10.1.0.1"]).clone())),
        &mut out,
    );
    st.feed(Watch::Slices, E::InitDone, &mut out);
    st.settle(&mut out);
    assert_eq!(
        summary(&out),
        [
            "-svc prod/gone",
            "-slice prod/gone-1",
            "+slice prod/web-1 (1)"
        ]
    );
}

#[test]
fn new_claims_apply_to_what_the_relist_brings() {
    use crate::vocab::trust::{Claims, TrustSettings, parse_cidrs, parse_namespaces};
    let mut st = remote();
    sync(
        &mut st,
        [vec![gateway_mode("web"), flat("api")], vec![], vec![]],
        vec![
            slice("web-1", "web", &["10.1.0.1", "10.2.0.1"]),
            slice("api-1", "api", &["10.1.0.2"]),
        ],
    );
    // The operator narrows east to 10.1.0.0/16 (pods) and 10.0.0.0/24
    // (Services), then also denies namespace
    // `prod`: each relist converts under the claims in force.
    let claims = |deny: &str| Claims {
        allowed_addresses: Some(parse_cidrs(["10.1.0.0/16,10.0.0.0/24"]).expect("cidrs")),
        denied_namespaces: parse_namespaces([deny]).expect("names"),
        ..Claims::default()
    };
    let relist = |st: ClusterState, deny: &str| {
        let mut st = st.restart(
            Selectors::linkerd_defaults(),
            Trust::new(TrustSettings::default(), claims(deny)),
            3,
        );
        let out = sync(
            &mut st,
            [vec![gateway_mode("web"), flat("api")], vec![], vec![]],
            vec![
                slice("web-1", "web", &["10.1.0.1", "10.2.0.1"]),
                slice("api-1", "api", &["10.1.0.2"]),
            ],
        );
        (st, out)
    };
    // The relist's events come in map order, which is not fixed.
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let (st, out) = relist(st, "other");
    assert_eq!(
        sorted(summary(&out)),
        ["+slice prod/api-1 (1)", "+slice prod/web-1 (1)"],
        "web-1 keeps only the address inside 10.1.0.0/16"
    );
    assert_eq!(
        adjusted(&out),
        ["EndpointSlice prod/web-1: clamped address_not_allowed"]
    );
    let (st, out) = relist(st, "prod");
    assert_eq!(
        sorted(summary(&out)),
        [
            "-slice prod/api-1",
            "-slice prod/web-1",
            "-svc prod/api",
            "-svc prod/web",
        ]
    );
    assert_eq!(
        sorted(adjusted(&out)),
        [
            "Service prod/api: skipped namespace_denied",
            "Service prod/web: skipped namespace_denied",
        ]
    );
    assert_eq!(st.counts().services, 0);
    assert_eq!(
        st.counts().slices,
        0,
        "a denied service's slices are not held"
    );
}

#[test]
fn a_bad_object_is_skipped_and_the_last_good_version_kept() {
    let mut st = remote();
    sync(
        &mut st,
        [vec![gateway_mode("web")], vec![], vec![]],
        vec![slice("web-1", "web", &["10.1.0.1"])],
    );
    let mut out = Output::default();
    let bad: K8sSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-1", "namespace": "prod",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv5",
        "endpoints": [{"addresses": ["10.1.0.9"]}]
    }))
    .expect("decodes");
    st.feed(
        Watch::Slices,
        E::Apply(Object::slice(bad.clone())),
        &mut out,
    );
    assert!(out.events.is_empty());
    assert_eq!(
        adjusted(&out),
        ["EndpointSlice prod/web-1: skipped address_type_unknown"]
    );
    // A relist that still holds the bad version does not delete the good one.
    st.feed(Watch::Slices, E::Init, &mut out);
    st.feed(
        Watch::Slices,
        E::InitApply(Object::slice(bad.clone())),
        &mut out,
    );
    st.feed(Watch::Slices, E::InitDone, &mut out);
    assert!(out.events.is_empty(), "{:?}", summary(&out));
    assert_eq!(st.counts().slices, 1);
}

#[test]
fn local_mirrors_and_gateway_service() {
    let mut st = ClusterState::new(
        "west".into(),
        true,
        Selectors::linkerd_defaults(),
        Trust::default(),
        4,
    );
    let mirror = svc(
        "web-east",
        json!({"mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": "east"}),
    );
    let mut out = Output::default();
    for w in 0..4 {
        st.feed(Watch::Services(w), E::Init, &mut out);
        if w == 3 {
            st.feed(
                Watch::Services(w),
                E::InitApply(Object::service(mirror.clone())),
                &mut out,
            );
        }
        st.feed(Watch::Services(w), E::InitDone, &mut out);
    }
    assert_eq!(summary(&out), ["+mirror prod/web-east"]);
    assert_eq!(st.counts().mirrors, 1);

    let mut gw = remote();
    gw.set_gateway_watch(true);
    let mut out = sync(&mut gw, [vec![], vec![], vec![]], vec![]);
    assert!(!gw.synced(), "waits for the gateway list");
    let gateway: K8sService = serde_json::from_value(json!({
        "metadata": {"name": "linkerd-gateway", "namespace": "linkerd-multicluster"},
        "spec": {"ports": [{"name": "mc-gateway", "port": 4143}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
    }))
    .expect("a Service");
    gw.feed(Watch::Gateway, E::Init, &mut out);
    gw.feed(
        Watch::Gateway,
        E::InitApply(Object::service(gateway.clone())),
        &mut out,
    );
    gw.feed(Watch::Gateway, E::InitDone, &mut out);
    assert!(gw.synced());
    assert_eq!(summary(&out), ["gateway true"]);
    let mut out = Output::default();
    gw.feed(Watch::Gateway, E::Init, &mut out);
    gw.feed(Watch::Gateway, E::InitDone, &mut out);
    assert_eq!(
        summary(&out),
        ["gateway false"],
        "gone after a relist without it"
    );
}

fn flat(name: &str) -> K8sService {
    svc(
        name,
        json!({"mirror.linkerd.io/exported": "remote-discovery"}),
    )
}

#[test]
fn over_budget_services_are_announced_refused_and_their_slices_not_held() {
    let mut st = remote();
    let small = Budget {
        max_services: 2,
        max_endpoints: 3,
    };
    st.set_budget(small);
    let out = sync(
        &mut st,
        [vec![], vec![flat("a"), flat("b"), flat("c")], vec![]],
        vec![
            slice("a-1", "a", &["10.1.0.1", "10.1.0.2"]),
            slice("b-1", "b", &["10.1.0.3", "10.1.0.4"]),
            slice("c-1", "c", &["10.1.0.5"]),
        ],
    );
    // Same age: by name. a (2) fits, b (2 more) does not, c (1) does; b's
    // slice never reaches the model.
    let mut events = summary(&out);
    events.sort();
    assert_eq!(
        events,
        [
            "+slice prod/a-1 (2)",
            "+slice prod/c-1 (1)",
            "+svc prod/a",
            "+svc prod/b",
            "+svc prod/b refused",
            "+svc prod/c",
        ]
    );
    assert!(st.synced());
    assert_eq!(
        (st.counts().slices, st.counts().endpoints),
        (2, 3),
        "b's slice is counted, not held"
    );
    let report = st.budget_report();
    assert_eq!(
        report.refused,
        Refused {
            services: 1,
            endpoints: 2
        }
    );
    assert_eq!(report.refused_services, [ObjectKey::new("prod", "b")]);

    // A bigger budget (a reload): b's slices are listed again, and b stays
    // refused in the model until they are in.
    st.set_budget(Budget::default());
    let mut out = Output::default();
    st.settle(&mut out);
    assert!(out.events.is_empty(), "{:?}", summary(&out));
    assert_eq!(
        out.actions,
        [Action::ListSlices(ObjectKey::new("prod", "b"))]
    );
    let mut out = Output::default();
    st.slices_listed(
        &ObjectKey::new("prod", "b"),
        vec![slice("b-1", "b", &["10.1.0.3", "10.1.0.4"])],
        &mut out,
    );
    st.settle(&mut out);
    assert_eq!(summary(&out), ["+svc prod/b", "+slice prod/b-1 (2)"]);
    assert_eq!(st.budget_report().refused, Refused::default());

    // Back to the small budget; then b shrinks while refused: it fits again
    // and c, the last by name, loses the service slot.
    st.set_budget(small);
    let mut out = Output::default();
    st.settle(&mut out);
    assert_eq!(summary(&out), ["+svc prod/b refused", "-slice prod/b-1"]);
    let mut out = Output::default();
    st.feed(
        Watch::Slices,
        E::Apply(Object::slice(slice("b-1", "b", &["10.1.0.3"]).clone())),
        &mut out,
    );
    assert!(
        out.events.is_empty(),
        "a refused service's slice is counted only"
    );
    st.settle(&mut out);
    // The watch just delivered all of b: no list is needed.
    assert_eq!(
        summary(&out),
        [
            "+svc prod/c refused",
            "-slice prod/c-1",
            "+svc prod/b",
            "+slice prod/b-1 (1)"
        ]
    );
    assert!(out.actions.is_empty());
    // Deleted while refused: nothing to tell the model about its slices.
    let mut out = Output::default();
    st.feed(
        Watch::Services(1),
        E::Delete(Object::service(flat("c").clone())),
        &mut out,
    );
    assert_eq!(summary(&out), ["-svc prod/c"]);
}

#[test]
fn a_hostile_slice_keeps_its_good_part_and_only_ours_are_reported() {
    let mut st = remote();
    let out = sync(
        &mut st,
        [vec![gateway_mode("web")], vec![], vec![]],
        vec![
            slice(
                "web-1",
                "web",
                &["10.1.0.1", "nope", "10.1.0.1", "10.1.0.2"],
            ),
            // Not an exported service: not ours to judge, nor to count.
            slice("other-1", "other", &["junk"]),
        ],
    );
    assert_eq!(summary(&out), ["+svc prod/web", "+slice prod/web-1 (2)"]);
    assert_eq!(
        adjusted(&out),
        [
            "EndpointSlice prod/web-1: clamped address_not_ip",
            "EndpointSlice prod/web-1: clamped duplicate_address"
        ]
    );
}

#[test]
fn a_slice_relabelled_to_a_service_not_exported_leaves() {
    let mut st = remote();
    sync(
        &mut st,
        [vec![gateway_mode("web")], vec![], vec![]],
        vec![slice("web-1", "web", &["10.1.0.1"])],
    );
    let mut out = Output::default();
    st.feed(
        Watch::Slices,
        E::Apply(Object::slice(
            slice("web-1", "internal", &["10.1.0.1"]).clone(),
        )),
        &mut out,
    );
    st.settle(&mut out);
    assert_eq!(summary(&out), ["-slice prod/web-1"]);
    assert_eq!(st.counts().slices, 0);
}

fn merge(into: &mut Output, o: Output) {
    into.events.extend(o.events);
    into.actions.extend(o.actions);
    into.adjusted.extend(o.adjusted);
}

#[test]
fn watcher_events_drive_the_state_and_a_relist_is_a_streamed_reset() {
    let mut st = remote();
    let mut out = Output::default();
    for w in 0..3 {
        merge(&mut out, st.watched(Watch::Services(w), E::Init));
        if w == 0 {
            let web = Object::service(gateway_mode("web"));
            merge(&mut out, st.watched(Watch::Services(0), E::InitApply(web)));
        }
        merge(&mut out, st.watched(Watch::Services(w), E::InitDone));
    }
    assert!(st.services_listed());
    merge(&mut out, st.watched(Watch::Slices, E::Init));
    let web1 = Object::slice(slice("web-1", "web", &["10.1.0.1"]));
    merge(&mut out, st.watched(Watch::Slices, E::InitApply(web1)));
    // An object of the wrong kind for the watch changes nothing.
    let stray = Object::service(gateway_mode("stray"));
    merge(&mut out, st.watched(Watch::Slices, E::InitApply(stray)));
    merge(&mut out, st.watched(Watch::Slices, E::InitDone));
    st.settle(&mut out);
    assert_eq!(summary(&out), ["+svc prod/web", "+slice prod/web-1 (1)"]);
    assert!(st.synced());

    // A relist that no longer holds the slice deletes it.
    let mut out = st.watched(Watch::Slices, E::Init);
    merge(&mut out, st.watched(Watch::Slices, E::InitDone));
    assert_eq!(summary(&out), ["-slice prod/web-1"]);

    // The service deleted; a slice of it arriving later is not held.
    let gone = Object::service(gateway_mode("web"));
    let mut out = st.watched(Watch::Services(0), E::Delete(gone));
    let late = Object::slice(slice("web-2", "web", &["10.1.0.2"]));
    merge(&mut out, st.watched(Watch::Slices, E::Apply(late)));
    st.settle(&mut out);
    assert_eq!(summary(&out), ["-svc prod/web"]);
    assert_eq!(st.counts().slices, 0);
}

#[test]
fn a_targeted_list_is_taken_through_listed() {
    let mut st = remote();
    sync(&mut st, [vec![], vec![], vec![]], vec![]);
    // Exported after the slice watch started: the state asks for a list.
    let web = Object::service(gateway_mode("web"));
    let mut out = st.watched(Watch::Services(0), E::Apply(web));
    assert_eq!(
        out.actions,
        [Action::ListSlices(ObjectKey::new("prod", "web"))]
    );
    merge(
        &mut out,
        st.listed(
            &ObjectKey::new("prod", "web"),
            vec![slice("web-1", "web", &["10.1.0.1"])],
        ),
    );
    st.settle(&mut out);
    assert_eq!(summary(&out), ["+svc prod/web", "+slice prod/web-1 (1)"]);
}

fn triggered(name: &str, ips: &[&str], at: &str) -> K8sSlice {
    let mut s = slice(name, "web", ips);
    s.metadata.annotations = Some(
        [(
            "endpoints.kubernetes.io/last-change-trigger-time".to_owned(),
            at.to_owned(),
        )]
        .into(),
    );
    s
}

/// The trigger times the events carry: `slice@unix-seconds` or `slice@-`.
fn triggers(out: &Output) -> Vec<String> {
    out.events
        .iter()
        .filter_map(|e| match e {
            Event::SliceApplied { slice, trigger, .. } => Some(format!(
                "{}@{}",
                slice.key.name,
                trigger
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or("-".to_owned(), |d| d.as_secs().to_string())
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn only_a_change_brings_a_trigger_time_to_measure() {
    let t = |s: u32| format!("2026-01-02T03:04:{s:02}Z");
    let secs = |s: u32| 1_767_323_040 + u64::from(s);
    let mut st = remote();
    // The first sync lists web-1: its trigger time is history, not measured.
    let out = sync(
        &mut st,
        [vec![gateway_mode("web")], vec![], vec![]],
        vec![triggered("web-1", &["10.1.0.1"], &t(1))],
    );
    assert_eq!(triggers(&out), ["web-1@-"]);

    let mut watched = |objects: Vec<K8sSlice>| {
        let mut out = Output::default();
        for s in objects {
            merge(
                &mut out,
                st.watched(Watch::Slices, E::Apply(Object::slice(s))),
            );
        }
        st.settle(&mut out);
        triggers(&out)
    };
    // An update with a new trigger time is measured, a slice created while
    // watching too, one without the annotation is not.
    assert_eq!(
        watched(vec![
            triggered("web-1", &["10.1.0.2"], &t(5)),
            triggered("web-2", &["10.1.0.3"], &t(6)),
            slice("web-3", "web", &["10.1.0.4"]),
        ]),
        [
            format!("web-1@{}", secs(5)),
            format!("web-2@{}", secs(6)),
            "web-3@-".to_owned()
        ]
    );
    // The same trigger time again (someone relabelled it) is no change.
    assert_eq!(
        watched(vec![triggered("web-1", &["10.1.0.2"], &t(5))]),
        ["web-1@-"]
    );
    // Two versions before a settle: the new one's time; a later version
    // without a new time does not cancel it.
    assert_eq!(
        watched(vec![
            triggered("web-2", &["10.1.0.5"], &t(8)),
            triggered("web-2", &["10.1.0.5", "10.1.0.6"], &t(8)),
        ]),
        [format!("web-2@{}", secs(8))]
    );

    // A relist measures what changed while it was away, not the rest.
    let mut out = st.watched(Watch::Slices, E::Init);
    for s in [
        triggered("web-1", &["10.1.0.2"], &t(5)),
        triggered("web-2", &["10.1.0.7"], &t(9)),
        triggered("web-4", &["10.1.0.8"], &t(9)),
    ] {
        merge(
            &mut out,
            st.watched(Watch::Slices, E::InitApply(Object::slice(s))),
        );
    }
    merge(&mut out, st.watched(Watch::Slices, E::InitDone));
    st.settle(&mut out);
    let mut got = triggers(&out);
    got.sort();
    assert_eq!(
        got,
        [
            "web-1@-".to_owned(),
            format!("web-2@{}", secs(9)),
            "web-4@-".to_owned()
        ]
    );
}

mod mcs;
mod property;
