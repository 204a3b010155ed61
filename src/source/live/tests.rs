use super::*;
use serde_json::json;

fn link(name: &str, cluster: &str, secret: &str, created: &str) -> (String, Result<Link, String>) {
    let v = json!({
        "apiVersion": "multicluster.linkerd.io/v1alpha3",
        "kind": "Link",
        "metadata": {"name": name, "namespace": "linkerd-multicluster", "creationTimestamp": created},
        "spec": {
            "targetClusterName": cluster,
            "clusterCredentialsSecret": secret,
            "remoteDiscoverySelector": {"matchLabels": {"mirror.linkerd.io/exported": "remote-discovery"}}
        }
    });
    let obj: DynamicObject = serde_json::from_value(v).expect("a Link object");
    (
        name.to_owned(),
        link_from_dynamic(&obj).map_err(|e| e.to_string()),
    )
}

#[test]
fn links_and_secrets_to_linked_clusters() {
    let links: BTreeMap<_, _> = [
        link("east", "east", "creds-east", "2026-01-01T00:00:00Z"),
        // Same cluster, newer: loses.
        link("east-again", "east", "creds-east", "2026-02-01T00:00:00Z"),
        // The local cluster's own name: ignored.
        link("self", "west", "creds-west", "2026-01-01T00:00:00Z"),
        // Secret missing: linked all the same (SERVFAIL until it syncs).
        link("north", "north", "creds-north", "2026-01-01T00:00:00Z"),
        (
            "broken".to_owned(),
            Err("Link linkerd-multicluster/broken: spec.targetClusterName is missing".to_owned()),
        ),
    ]
    .into_iter()
    .collect();
    let secrets: BTreeMap<String, Result<String, String>> =
        [("creds-east".to_owned(), Ok("apiVersion: v1".to_owned()))]
            .into_iter()
            .collect();
    let (clusters, problems) = desired_from_links("west", &links, &secrets);
    let names: Vec<&str> = clusters.iter().map(|c| &*c.name).collect();
    assert_eq!(names, ["east", "north"]);
    assert_eq!(clusters[0].origin, "Link linkerd-multicluster/east");
    assert_eq!(clusters[0].kubeconfig, Ok("apiVersion: v1".to_owned()));
    assert!(
        clusters[0].selectors.gateway.is_none(),
        "nil selector matches nothing"
    );
    assert!(clusters[0].selectors.remote_discovery.is_some());
    assert!(
        clusters[1]
            .kubeconfig
            .as_ref()
            .is_err_and(|e| e.contains("creds-north") && e.contains("does not exist"))
    );
    let all = problems.join("\n");
    for want in [
        "east-again: cluster east is already linked by the older Link linkerd-multicluster/east",
        "self: targetClusterName west is the local cluster",
        "north: Secret linkerd-multicluster/creds-north (clusterCredentialsSecret) does not exist",
        "broken: spec.targetClusterName is missing",
    ] {
        assert!(all.contains(want), "missing {want:?} in:\n{all}");
    }
}

#[test]
fn clusters_come_oldest_link_first() {
    // Announced in this order, so of two clusters claiming one MCS cluster
    // id the older Link's keeps it.
    let links: BTreeMap<_, _> = [
        link("alpha", "alpha", "c", "2026-03-01T00:00:00Z"),
        link("zulu", "zulu", "c", "2026-01-01T00:00:00Z"),
        link("mike", "mike", "c", "2026-02-01T00:00:00Z"),
    ]
    .into_iter()
    .collect();
    let (clusters, _) = desired_from_links("west", &links, &BTreeMap::new());
    let names: Vec<&str> = clusters.iter().map(|c| &*c.name).collect();
    assert_eq!(names, ["zulu", "mike", "alpha"]);
}

#[test]
fn secret_kubeconfig_key() {
    let with = |data: serde_json::Value| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": "s"}, "data": data})).expect("a Secret")
    };
    // "a: b" in base64.
    assert_eq!(
        secret_kubeconfig(&with(json!({"kubeconfig": "YTogYg=="}))),
        Ok("a: b".to_owned())
    );
    assert!(
        secret_kubeconfig(&with(json!({"config": "YTogYg=="})))
            .is_err_and(|e| e.contains("no key \"kubeconfig\""))
    );
    assert!(
        secret_kubeconfig(&with(json!({"kubeconfig": "//79"})))
            .is_err_and(|e| e.contains("not UTF-8"))
    );
}

/// A Link for cluster `name` with `annotations`, read as the watch does.
fn placed_link(name: &str, annotations: serde_json::Value) -> (String, Result<Link, String>) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "multicluster.linkerd.io/v1alpha3",
        "kind": "Link",
        "metadata": {"name": name, "namespace": "linkerd-multicluster",
                     "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": annotations},
        "spec": {"targetClusterName": name, "clusterCredentialsSecret": "c"}
    }))
    .expect("a Link object");
    (
        name.to_owned(),
        link_from_dynamic(&obj).map_err(|e| e.to_string()),
    )
}

#[test]
fn a_links_place_is_its_clusters_and_a_bad_one_a_problem() {
    let links: BTreeMap<_, _> = [
        placed_link(
            "east",
            json!({"clusterset-dns.io/region": "us-east-1", "clusterset-dns.io/zone": "us-east-1a"}),
        ),
        placed_link("north", json!({"clusterset-dns.io/region": "eu north"})),
    ]
    .into_iter()
    .collect();
    let (clusters, problems) = desired_from_links("west", &links, &BTreeMap::new());
    assert_eq!(
        clusters[0].place,
        Place::parse(Some("us-east-1"), Some("us-east-1a")).expect("a place")
    );
    // Still linked, with no configured place, and the reason shown.
    assert_eq!(&*clusters[1].name, "north");
    assert!(clusters[1].place.is_unknown());
    let all = problems.join("\n");
    assert!(
        all.contains("Link north: metadata.annotations[clusterset-dns.io/region]: region \"eu north\" is not a Kubernetes label value")
            && all.contains("; the Link configures no place"),
        "{all}"
    );
}

/// A linked cluster `name` at `region` (none: unknown).
fn linked(name: &str, region: Option<&str>) -> LinkedCluster {
    LinkedCluster {
        name: name.into(),
        kubeconfig: Ok("apiVersion: v1".to_owned()),
        context: None,
        selectors: Selectors::linkerd_defaults(),
        gateway: GatewaySource::None,
        claims: Claims::default(),
        place: Place::parse(region, None).expect("a place"),
        origin: format!("test {name}"),
    }
}

#[test]
fn a_changed_place_is_an_event_and_restarts_no_watch() {
    // (name, running clusters and their places, desired, events)
    type Case = (
        &'static str,
        Vec<(&'static str, Option<&'static str>)>,
        Vec<LinkedCluster>,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "new clusters: only a known place is said",
            vec![],
            vec![linked("east", Some("us")), linked("north", None)],
            vec!["east configured us/?"],
        ),
        (
            "unchanged: nothing",
            vec![("east", Some("us")), ("north", None)],
            vec![linked("east", Some("us")), linked("north", None)],
            vec![],
        ),
        (
            "changed, set and withdrawn",
            vec![("east", Some("us")), ("north", None), ("south", Some("eu"))],
            vec![
                linked("east", Some("eu")),
                linked("north", Some("eu")),
                linked("south", None),
            ],
            vec![
                "east configured eu/?",
                "north configured eu/?",
                "south configured ?/?",
            ],
        ),
    ];
    for (name, running, desired, want) in cases {
        let held: BTreeMap<&str, Place> = running
            .iter()
            .map(|(n, r)| (*n, Place::parse(*r, None).expect("a place")))
            .collect();
        let got: Vec<String> = place_events(&desired, |n| held.get(n))
            .iter()
            .map(|e| match e {
                Event::PlaceApplied {
                    cluster,
                    from,
                    place,
                } => format!("{cluster} {} {place}", from.as_str()),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(got, want, "{name}");
    }
    // The place alone restarts nothing; anything else does.
    let a = linked("east", Some("us"));
    assert!(same_watches(&a, &linked("east", Some("eu"))));
    assert!(same_watches(&a, &linked("east", None)));
    let mut b = linked("east", Some("us"));
    b.context = Some("other".to_owned());
    assert!(!same_watches(&a, &b));
}
