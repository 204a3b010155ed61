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
fn exported_labels_and_annotations_table() {
    // (spec, labels kept, annotations kept, warnings)
    type Pairs = &'static [(&'static str, &'static str)];
    let cases: [(&str, Pairs, Pairs, usize); 6] = [
        ("{}", &[], &[], 0),
        (
            "{exportedLabels: {dummy-label: 'true'}, exportedAnnotations: {dummy-annotation: 'true'}}",
            &[("dummy-label", "true")],
            &[("dummy-annotation", "true")],
            0,
        ),
        (
            "{exportedLabels: {example.com/tier: gold, 'bad key': x, ok: 'not a value'}}",
            &[("example.com/tier", "gold")],
            &[],
            2,
        ),
        (
            "{exportedAnnotations: {note: 'any text, spaces too'}}",
            &[],
            &[("note", "any text, spaces too")],
            0,
        ),
        (
            "{exportedLabels: {clusterset-dns.io/defined-by: east}, exportedAnnotations: {clusterset-dns.io/defined-by: east}}",
            &[],
            &[],
            2,
        ),
        ("{exportedLabels: {'': x}}", &[], &[], 1),
    ];
    for (spec, labels, annotations, warnings) in cases {
        let e = object(&format!(
            "{{metadata: {{name: db, namespace: prod}}, spec: {spec}}}"
        ));
        let got = convert_export(&e).expect("valid");
        let map = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
            kv.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let meta = got.value.meta.as_deref().cloned().unwrap_or_default();
        assert_eq!(meta.labels, map(labels), "{spec}");
        assert_eq!(meta.annotations, map(annotations), "{spec}");
        assert_eq!(
            got.value.meta.is_none(),
            labels.is_empty() && annotations.is_empty(),
            "{spec}"
        );
        let counted: usize = got.warnings.iter().map(|w| 1 + w.more).sum();
        assert_eq!(counted, warnings, "{spec}: {:?}", got.warnings);
        assert!(
            got.warnings
                .iter()
                .all(|w| w.reason == Reason::ExportedMetaInvalid),
            "{spec}"
        );
    }
}

#[test]
fn what_an_import_copies_from_a_service_table() {
    use crate::model::objects::{Affinity, Family, TrafficDistribution, TrafficPolicy};
    // (Service spec, families, affinity, internal policy, distribution, warnings)
    type Want = (
        &'static [Family],
        Affinity,
        Option<TrafficPolicy>,
        Option<TrafficDistribution>,
        usize,
    );
    let cases: [(&str, Want); 6] = [
        ("{}", (&[], Affinity::Unset, None, None, 0)),
        (
            "{ipFamilies: [IPv4, IPv6], sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 10}}, internalTrafficPolicy: Cluster, trafficDistribution: PreferClose}",
            (
                &[Family::V4, Family::V6],
                Affinity::ClientIp(Some(10)),
                Some(TrafficPolicy::Cluster),
                Some(TrafficDistribution::PreferClose),
                0,
            ),
        ),
        (
            "{ipFamilies: [IPv6], sessionAffinity: None, internalTrafficPolicy: Local}",
            (
                &[Family::V6],
                Affinity::Off,
                Some(TrafficPolicy::Local),
                None,
                0,
            ),
        ),
        (
            "{ipFamilies: [IPv4, IPv4, IPv6, IPv6]}",
            (&[Family::V4, Family::V6], Affinity::Unset, None, None, 0),
        ),
        (
            "{ipFamilies: [IPv5], sessionAffinity: Sticky, internalTrafficPolicy: Nowhere, trafficDistribution: Anywhere}",
            (&[], Affinity::Unset, None, None, 4),
        ),
        (
            "{sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 999999}}}",
            (&[], Affinity::ClientIp(None), None, None, 0),
        ),
    ];
    for (yaml, (families, affinity, itp, td, warnings)) in cases {
        let spec: ServiceSpec = serde_saphyr::from_str(yaml).expect("test YAML");
        let mut w = Warnings::default();
        let got = import_fields(Some(&spec), &mut w);
        assert_eq!(got.families.iter().collect::<Vec<_>>(), families, "{yaml}");
        assert_eq!(got.affinity, affinity, "{yaml}");
        assert_eq!(got.internal_traffic_policy, itp, "{yaml}");
        assert_eq!(got.traffic_distribution, td, "{yaml}");
        let counted: usize = w.0.iter().map(|w| 1 + w.more).sum();
        assert_eq!(counted, warnings, "{yaml}: {:?}", w.0);
    }
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
