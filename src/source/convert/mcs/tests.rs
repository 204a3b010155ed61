use super::*;

fn object(yaml: &str) -> McsObject {
    serde_saphyr::from_str(yaml).expect("test YAML")
}

fn property(yaml: &str) -> ClusterProperty {
    serde_saphyr::from_str(yaml).expect("test YAML")
}

#[test]
fn an_export_opts_into_nearest_answers_only_with_true() {
    let cases = [
        ("metadata: {name: db, namespace: prod}", false),
        (
            "metadata: {name: db, annotations: {clusterset-dns.io/nearest: 'true'}}",
            true,
        ),
        (
            "metadata: {name: db, annotations: {clusterset-dns.io/nearest: 'yes'}}",
            false,
        ),
        (
            "metadata: {name: db, annotations: {clusterset-dns.io/nearest: 'false'}}",
            false,
        ),
    ];
    for (yaml, want) in cases {
        assert_eq!(export_opts_nearest(&object(yaml)), want, "{yaml}");
    }
}

#[test]
fn an_export_gives_its_key_and_age() {
    let e =
        object("metadata: {name: db, namespace: prod, creationTimestamp: '2026-01-01T00:00:10Z'}");
    let export = convert_export(&e).expect("valid").value;
    assert_eq!(export.key, ObjectKey::new("prod", "db"));
    assert_eq!(export.created, 1_767_225_610);
    let e = object("metadata: {name: db}");
    assert_eq!(
        convert_export(&e).expect("valid").value.created,
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
fn the_properties_we_read_table() {
    let region = |v: &str| Ok(Some(Property::Region(v.into())));
    let zone = |v: &str| Ok(Some(Property::Zone(v.into())));
    // (name, value, what it gives or the reason it is rejected)
    type Case = (&'static str, String, Result<Option<Property>, Reason>);
    let cases: Vec<Case> = vec![
        (
            "cluster.clusterset.k8s.io",
            "east-1".into(),
            Ok(Some(Property::ClusterId("east-1".to_owned()))),
        ),
        ("clusterset.k8s.io", "fleet".into(), Ok(None)),
        (
            "cluster.clusterset.k8s.io",
            "East.1".into(),
            Err(Reason::ClusterIdNotALabel),
        ),
        (
            "cluster.clusterset.k8s.io",
            String::new(),
            Err(Reason::ClusterIdNotALabel),
        ),
        (
            "cluster.clusterset.k8s.io",
            "a".repeat(64),
            Err(Reason::ClusterIdNotALabel),
        ),
        (
            "region.clusterset-dns.io",
            "eu-west-1".into(),
            region("eu-west-1"),
        ),
        // Label values, not DNS labels: case and '_' are fine.
        (
            "region.clusterset-dns.io",
            "EU_West.1".into(),
            region("EU_West.1"),
        ),
        (
            "region.clusterset-dns.io",
            "eu west".into(),
            Err(Reason::PlaceInvalid),
        ),
        (
            "region.clusterset-dns.io",
            String::new(),
            Err(Reason::PlaceInvalid),
        ),
        (
            "region.clusterset-dns.io",
            "a".repeat(64),
            Err(Reason::PlaceInvalid),
        ),
        (
            "zone.clusterset-dns.io",
            "eu-west-1a".into(),
            zone("eu-west-1a"),
        ),
        (
            "zone.clusterset-dns.io",
            "-1a".into(),
            Err(Reason::PlaceInvalid),
        ),
        // Another owner's spelling is not ours to read.
        ("topology.kubernetes.io/region", "eu".into(), Ok(None)),
    ];
    for (name, value, want) in cases {
        let got = convert_property(&property(&format!(
            "metadata: {{name: '{name}'}}\nspec: {{value: '{value}'}}"
        )))
        .map_err(|e| e.reason());
        assert_eq!(got, want, "{name} = {value:?}");
    }
    // A block scalar's newline is not part of the value.
    let p = property("metadata: {name: zone.clusterset-dns.io}\nspec:\n  value: |\n    z1\n");
    assert_eq!(convert_property(&p).map_err(|e| e.reason()), zone("z1"));
}

#[test]
fn a_bad_place_property_says_the_place_is_unknown() {
    let p = property("metadata: {name: region.clusterset-dns.io}\nspec: {value: 'eu/west'}");
    let e = convert_property(&p).expect_err("invalid");
    let text = e.to_string();
    assert!(text.starts_with("spec.value: region \"eu/west\""), "{text}");
    assert!(
        text.contains("place from its ClusterProperty objects is unknown"),
        "{text}"
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
