//! Where a cluster directory says its cluster is: ClusterProperty
//! documents `region.clusterset-dns.io` and `zone.clusterset-dns.io`, read
//! with or without `--mcs`, as the live source reads the cluster's own.

use super::*;

fn property(name: &str, value: &str) -> String {
    format!(
        "apiVersion: about.k8s.io/v1alpha1\nkind: ClusterProperty\nmetadata:\n  name: {name}\nspec:\n  value: '{value}'\n---\n"
    )
}

const REGION: &str = "region.clusterset-dns.io";
const ZONE: &str = "zone.clusterset-dns.io";

fn place(region: Option<&str>, zone: Option<&str>) -> Place {
    Place::parse(region, zone).expect("a place")
}

#[test]
fn the_place_from_cluster_property_documents_table() {
    // (name, files, the place, problems expected (substrings))
    type Case = (
        &'static str,
        Vec<(&'static str, String)>,
        Place,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        ("no property", vec![("api.yaml", SERVICE.to_owned())], Place::default(), vec![]),
        (
            "region and zone, in one file or two",
            vec![
                ("place.yaml", property(REGION, "eu-west-1")),
                ("more/zone.yaml", property(ZONE, "eu-west-1a")),
            ],
            place(Some("eu-west-1"), Some("eu-west-1a")),
            vec![],
        ),
        (
            "a zone alone",
            vec![("place.yaml", property(ZONE, "z1"))],
            place(None, Some("z1")),
            vec![],
        ),
        (
            "an invalid zone: an error, and the whole place unknown",
            vec![(
                "place.yaml",
                property(REGION, "eu") + &property(ZONE, "eu west"),
            )],
            Place::default(),
            vec!["document 2 (line 8): ClusterProperty zone.clusterset-dns.io: spec.value: zone \"eu west\" is not a Kubernetes label value"],
        ),
        (
            "twice: the first one counts",
            vec![(
                "place.yaml",
                property(REGION, "eu") + &property(REGION, "us"),
            )],
            place(Some("eu"), None),
            vec!["ClusterProperty /region.clusterset-dns.io is already defined"],
        ),
        (
            "in a List, beside the cluster id",
            vec![(
                "list.yaml",
                "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: about.k8s.io/v1beta1, kind: ClusterProperty, metadata: {name: region.clusterset-dns.io}, spec: {value: us}}\n- {apiVersion: about.k8s.io/v1beta1, kind: ClusterProperty, metadata: {name: cluster.clusterset.k8s.io}, spec: {value: east-1}}\n".to_owned(),
            )],
            place(Some("us"), None),
            vec![],
        ),
    ];
    for (name, files, want, problems) in cases {
        let tmp = tempfile::tempdir().expect("tempdir");
        for (rel, text) in &files {
            write(tmp.path(), &format!("east/{rel}"), text);
        }
        let load = cluster(tmp.path(), "east");
        assert_eq!(load.objects.place, want, "{name}");
        let got = messages(&load);
        assert_eq!(got.len(), problems.len(), "{name}: {got:#?}");
        for p in problems {
            assert!(
                got.iter().any(|g| g.contains(p)),
                "{name}: {p:?} in {got:#?}"
            );
        }
        if !want.is_unknown() {
            assert!(
                initial_events(&load).iter().any(|e| matches!(
                    e,
                    Event::PlaceApplied { from: PlaceFrom::Property, place, .. } if *place == want
                )),
                "{name}: the first load tells the model"
            );
        }
    }
}

#[test]
fn a_changed_place_is_one_event_and_a_removed_one_withdraws_it() {
    let c: Arc<str> = "east".into();
    let at = |region: Option<&str>| ClusterObjects {
        place: Place::parse(region, None).expect("a place"),
        ..ClusterObjects::default()
    };
    let said = |old: &ClusterObjects, new: &ClusterObjects| -> Vec<String> {
        diff(&c, old, new)
            .iter()
            .map(|e| match e {
                Event::PlaceApplied { from, place, .. } => format!("{} {place}", from.as_str()),
                other => format!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(said(&at(None), &at(Some("eu"))), ["cluster-property eu/?"]);
    assert_eq!(
        said(&at(Some("eu")), &at(Some("us"))),
        ["cluster-property us/?"]
    );
    assert_eq!(said(&at(Some("eu")), &at(Some("eu"))), Vec::<String>::new());
    assert_eq!(said(&at(Some("eu")), &at(None)), ["cluster-property ?/?"]);
    // Not a ClusterProperty we read: counted as skipped, as before.
    let tmp = tempfile::tempdir().expect("tempdir");
    write(
        tmp.path(),
        "east/p.yaml",
        &property("clusterset.k8s.io", "fleet"),
    );
    let load = cluster(tmp.path(), "east");
    assert_eq!(
        load.skipped
            .get("about.k8s.io ClusterProperty (not one we read)"),
        Some(&1)
    );
}
