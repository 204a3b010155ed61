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
