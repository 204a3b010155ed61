use super::*;

fn object(yaml: &str) -> McsObject {
    serde_saphyr::from_str(yaml).expect("test YAML")
}

fn property(yaml: &str) -> ClusterProperty {
    serde_saphyr::from_str(yaml).expect("test YAML")
}

#[test]
fn an_export_gives_its_key_and_age() {
    let e =
        object("metadata: {name: db, namespace: prod, creationTimestamp: '2026-01-01T00:00:10Z'}");
    let (key, created) = convert_export(&e).expect("valid");
    assert_eq!(key, ObjectKey::new("prod", "db"));
    assert_eq!(created, 1_767_225_610);
    let e = object("metadata: {name: db}");
    assert_eq!(
        convert_export(&e).expect("valid").1,
        i64::MAX,
        "no age: newest"
    );
    let e = object("metadata: {name: Not_A_Label, namespace: prod}");
    assert_eq!(
        convert_export(&e).map_err(|e| e.reason()),
        Err(Reason::NameNotALabel)
    );
}

#[test]
fn imports_table() {
    // (spec, expected ips or the reason it is rejected)
    let cases: [(&str, Result<&[&str], Reason>); 6] = [
        (
            "{type: ClusterSetIP, ips: [10.96.0.10]}",
            Ok(&["10.96.0.10"]),
        ),
        (
            "{type: ClusterSetIP, ips: ['fd00::a', 10.96.0.10, 10.96.0.10]}",
            Ok(&["10.96.0.10", "fd00::a"]),
        ),
        ("{type: ClusterSetIP}", Ok(&[])),
        ("{type: Headless, ips: [10.96.0.10]}", Ok(&[])),
        (
            "{type: ClusterSetIP, ips: [ten]}",
            Err(Reason::ClusterIpNotIp),
        ),
        ("{type: LoadBalancer}", Err(Reason::ImportTypeUnknown)),
    ];
    for (spec, want) in cases {
        let got = convert_import(
            &object(&format!(
                "metadata: {{name: db, namespace: prod}}\nspec: {spec}"
            )),
            &Trust::default(),
        )
        .map(|c| c.value);
        match want {
            Ok(ips) => {
                let import = got.unwrap_or_else(|e| panic!("{spec}: {e}"));
                let ips: Vec<IpAddr> = ips.iter().map(|i| i.parse().expect("ip")).collect();
                assert_eq!(import.ips, ips, "{spec}");
                assert_eq!(import.key, ObjectKey::new("prod", "db"));
            }
            Err(reason) => assert_eq!(got.map_err(|e| e.reason()), Err(reason), "{spec}"),
        }
    }
}

#[test]
fn the_cluster_id_property_is_a_label() {
    let id = |name: &str, value: &str| {
        convert_property(&property(&format!(
            "metadata: {{name: {name}}}\nspec: {{value: '{value}'}}"
        )))
        .map_err(|e| e.reason())
    };
    assert_eq!(
        id("cluster.clusterset.k8s.io", "east-1"),
        Ok(Some("east-1".to_owned()))
    );
    assert_eq!(
        id("clusterset.k8s.io", "fleet"),
        Ok(None),
        "membership, not the id"
    );
    assert_eq!(
        id("cluster.clusterset.k8s.io", "East.1"),
        Err(Reason::ClusterIdNotALabel)
    );
    assert_eq!(
        id("cluster.clusterset.k8s.io", ""),
        Err(Reason::ClusterIdNotALabel)
    );
    assert_eq!(
        id("cluster.clusterset.k8s.io", &"a".repeat(64)),
        Err(Reason::ClusterIdNotALabel)
    );
}

#[test]
fn api_versions() {
    assert!(is_mcs_api("multicluster.x-k8s.io/v1alpha1"));
    assert!(is_mcs_api("multicluster.x-k8s.io/v1beta1"));
    assert!(!is_mcs_api("multicluster.x-k8s.io/v2"));
    assert!(!is_mcs_api("multicluster.linkerd.io/v1alpha1"));
    assert!(is_about_api("about.k8s.io/v1alpha1"));
    assert!(!is_about_api("about.k8s.io"));
}
