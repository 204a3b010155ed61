//! Table tests of the place a cluster's ClusterProperty objects state:
//! watcher events of the ClusterProperty watch in, model events out.

use super::*;
use crate::vocab::place::{Place, PlaceFrom};

const REGION: &str = "region.clusterset-dns.io";
const ZONE: &str = "zone.clusterset-dns.io";
const CLUSTER_ID: &str = "cluster.clusterset.k8s.io";

fn property(name: &str, value: &str) -> Object {
    Object::dynamic(
        serde_json::from_value(json!({
            "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
            "metadata": {"name": name}, "spec": {"value": value}
        }))
        .expect("a ClusterProperty"),
    )
}

/// A linked cluster without `--mcs` whose ClusterProperty watch runs, its
/// other watches listed empty: only the property watch's list is missing.
fn placed() -> ClusterState {
    let mut st = remote();
    st.set_property_watch();
    for w in [
        Watch::Services(0),
        Watch::Services(1),
        Watch::Services(2),
        Watch::Slices,
    ] {
        st.watched(w, E::Init);
        st.watched(w, E::InitDone);
    }
    st
}

/// One step: a watcher event of the ClusterProperty watch.
fn apply(name: &str, value: &str) -> E<Object> {
    E::Apply(property(name, value))
}

fn delete(name: &str) -> E<Object> {
    E::Delete(property(name, "any"))
}

/// A full list of the ClusterProperty watch.
fn list(items: &[(&str, &str)]) -> Vec<E<Object>> {
    let mut steps = vec![E::Init];
    steps.extend(items.iter().map(|(n, v)| E::InitApply(property(n, v))));
    steps.push(E::InitDone);
    steps
}

/// Place events as `place <region>/<zone>`, then adjusted objects.
fn said(out: &Output) -> Vec<String> {
    let mut v: Vec<String> = out
        .events
        .iter()
        .map(|e| match e {
            Event::PlaceApplied {
                from: PlaceFrom::Property,
                place,
                ..
            } => format!("place {place}"),
            other => format!("{other:?}"),
        })
        .collect();
    v.extend(adjusted(out));
    v
}

#[test]
fn the_place_from_properties_table() {
    // Name, steps (after an empty first list), what they say, the problem
    // reported at the end.
    type Case = (
        &'static str,
        Vec<E<Object>>,
        Vec<&'static str>,
        Option<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "a region",
            vec![apply(REGION, "eu")],
            vec!["place eu/?"],
            None,
        ),
        (
            "a region, then a zone",
            vec![apply(REGION, "eu"), apply(ZONE, "eu-1a")],
            vec!["place eu/?", "place eu/eu-1a"],
            None,
        ),
        (
            "the same value again says nothing",
            vec![apply(REGION, "eu"), apply(REGION, " eu\n")],
            vec!["place eu/?"],
            None,
        ),
        (
            "an invalid zone: counted, the whole place unknown, reported",
            vec![apply(REGION, "eu"), apply(ZONE, "eu 1a")],
            vec![
                "place eu/?",
                "place ?/?",
                "ClusterProperty zone.clusterset-dns.io: skipped place_invalid",
            ],
            Some("zone \"eu 1a\" is not a Kubernetes label value"),
        ),
        (
            "an invalid value fixed",
            vec![apply(REGION, "eu"), apply(ZONE, "-"), apply(ZONE, "eu-1a")],
            vec![
                "place eu/?",
                "place ?/?",
                "place eu/eu-1a",
                "ClusterProperty zone.clusterset-dns.io: skipped place_invalid",
            ],
            None,
        ),
        (
            "an invalid value deleted",
            vec![apply(REGION, "eu"), apply(ZONE, "-"), delete(ZONE)],
            vec![
                "place eu/?",
                "place ?/?",
                "place eu/?",
                "ClusterProperty zone.clusterset-dns.io: skipped place_invalid",
            ],
            None,
        ),
        (
            "deleted: unknown again",
            vec![apply(REGION, "eu"), delete(REGION)],
            vec!["place eu/?", "place ?/?"],
            None,
        ),
        (
            "a relist without it: unknown again",
            [
                vec![apply(REGION, "eu"), apply(ZONE, "z")],
                list(&[(ZONE, "z")]),
            ]
            .into_iter()
            .flatten()
            .collect(),
            vec!["place eu/?", "place eu/z", "place ?/z"],
            None,
        ),
        (
            "a relist that brings the same says nothing new",
            [vec![apply(REGION, "eu")], list(&[(REGION, "eu")])]
                .into_iter()
                .flatten()
                .collect(),
            vec!["place eu/?"],
            None,
        ),
        (
            "other properties are not ours, and without --mcs nor is the id",
            vec![
                apply("clusterset.k8s.io", "fleet"),
                apply(CLUSTER_ID, "east-1"),
                apply("topology.kubernetes.io/region", "eu"),
            ],
            vec![],
            None,
        ),
    ];
    for (name, steps, want, problem) in cases {
        let mut st = placed();
        let mut out = Output::default();
        for e in list(&[]) {
            merge(&mut out, st.watched(Watch::Properties, e));
        }
        assert!(out.events.is_empty(), "{name}: an empty list says nothing");
        assert!(st.synced(), "{name}");
        let mut out = Output::default();
        for e in steps {
            merge(&mut out, st.watched(Watch::Properties, e));
        }
        assert_eq!(said(&out), want, "{name}");
        assert_eq!(
            st.place_report()
                .problem
                .as_deref()
                .map(|p| p.contains(problem.unwrap_or("-"))),
            problem.map(|_| true),
            "{name}: {:?}",
            st.place_report()
        );
    }
}

#[test]
fn sync_waits_for_the_property_watch_and_a_list_brings_the_place() {
    let mut st = placed();
    assert!(!st.synced(), "the ClusterProperty watch has not listed");
    let mut out = Output::default();
    for e in list(&[(REGION, "eu"), (ZONE, "eu-1a"), ("other", "x")]) {
        merge(&mut out, st.watched(Watch::Properties, e));
    }
    assert!(st.synced());
    assert_eq!(said(&out), ["place eu/?", "place eu/eu-1a"]);
    assert_eq!(
        st.place_report().place,
        Place::parse(Some("eu"), Some("eu-1a")).expect("a place")
    );
    // Properties not ours are not held: a relist would not remember them.
    assert_eq!(st.property_keys().len(), 2);

    // A restart keeps the place until the new watch lists, and says nothing
    // when it lists the same.
    let mut st = st.restart(Selectors::linkerd_defaults(), Trust::default(), 3);
    st.set_property_watch();
    assert_eq!(st.place_report().place.region.as_deref(), Some("eu"));
    let mut out = Output::default();
    for e in list(&[(REGION, "eu"), (ZONE, "eu-1a")]) {
        merge(&mut out, st.watched(Watch::Properties, e));
    }
    assert!(out.events.is_empty(), "{:?}", said(&out));
}

#[test]
fn with_mcs_the_same_watch_brings_the_cluster_id() {
    let mut st = placed();
    st.set_mcs(3);
    let mut out = Output::default();
    for e in list(&[(CLUSTER_ID, "east-1"), (REGION, "eu")]) {
        merge(&mut out, st.watched(Watch::Properties, e));
    }
    merge(&mut out, st.watched(Watch::Properties, delete(CLUSTER_ID)));
    let got: Vec<String> = out
        .events
        .iter()
        .map(|e| match e {
            Event::ClusterIdApplied { id, .. } => format!("id {}", id.as_deref().unwrap_or("-")),
            Event::PlaceApplied { place, .. } => format!("place {place}"),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(got, ["id east-1", "place eu/?", "id -"]);
}
