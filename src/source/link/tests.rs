use super::*;
use crate::source::selector::{Operator, Requirement};
use crate::vocab::linkerd::{LABEL_EXPORTED, LABEL_FEDERATED};
use crate::vocab::place::Place;
use crate::vocab::trust::{parse_cidrs, parse_namespaces};
use kube::api::DynamicObject;
use serde_json::{Value, json};

/// A Link object as the watch delivers it (its metadata decoded), read as
/// the server reads it.
fn parse_link(v: &Value) -> Result<Link, LinkError> {
    let obj: DynamicObject = serde_json::from_value(v.clone()).expect("a Link object");
    link_from_dynamic(&obj)
}

/// Whether the watch can decode `v` at all (metadata that does not decode
/// makes the watch skip the object, logged, before any Link rule).
fn decodes(v: &Value) -> bool {
    serde_json::from_value::<DynamicObject>(v.clone()).is_ok()
}

const IDENTITY: &str =
    "linkerd-gateway.linkerd-multicluster.serviceaccount.identity.linkerd.cluster.local";

/// A Link as link-gen writes it (docs/linkerd.md §1.5), with the CRD's
/// defaults not yet filled in.
fn v1alpha3() -> Value {
    json!({
        "apiVersion": "multicluster.linkerd.io/v1alpha3",
        "kind": "Link",
        "metadata": {
            "name": "east",
            "namespace": "linkerd-multicluster",
            "annotations": {"linkerd.io/created-by": "linkerd/cli stable-2.18.0"},
            "creationTimestamp": "2026-01-02T03:04:05Z"
        },
        "spec": {
            "targetClusterName": "east",
            "targetClusterDomain": "cluster.local",
            "targetClusterLinkerdNamespace": "linkerd",
            "clusterCredentialsSecret": "cluster-credentials-east",
            "gatewayAddress": "203.0.113.10",
            "gatewayPort": "4143",
            "gatewayIdentity": IDENTITY,
            "probeSpec": {"path": "/ready", "port": "4191", "period": "3s"},
            "selector": {"matchLabels": {"mirror.linkerd.io/exported": "true"}},
            "remoteDiscoverySelector": {"matchLabels": {"mirror.linkerd.io/exported": "remote-discovery"}},
            "federatedServiceSelector": {"matchLabels": {"mirror.linkerd.io/federated": "member"}},
            "excludedAnnotations": [],
            "excludedLabels": []
        }
    })
}

/// `v1alpha3()` with `spec` fields replaced (`null` removes one).
fn with_spec(changes: Value) -> Value {
    let mut obj = v1alpha3();
    let spec = obj["spec"].as_object_mut().expect("spec");
    for (k, v) in changes.as_object().expect("changes").clone() {
        if v.is_null() {
            spec.remove(&k);
        } else {
            spec.insert(k, v);
        }
    }
    obj
}

fn probe(path: &str, port: u16, period: u64, timeout: u64, threshold: u32) -> ProbeSpec {
    ProbeSpec {
        path: path.to_owned(),
        port,
        period: Duration::from_secs(period),
        timeout: Duration::from_secs(timeout),
        failure_threshold: threshold,
    }
}

/// A selector slot in a table row.
type Sel = Option<Selector>;

/// (spec changes, port, identity, probe, warnings containing)
type FieldCase = (
    Value,
    Option<u16>,
    Option<&'static str>,
    Option<ProbeSpec>,
    Vec<&'static str>,
);

fn spec_of(link: &Link) -> &GatewaySpec {
    match &link.gateway {
        GatewaySource::Spec(s) => s,
        other => panic!("expected a gateway spec, got {other:?}"),
    }
}

#[test]
fn generated_v1alpha3_link() {
    let link = parse_link(&v1alpha3()).expect("parses");
    assert_eq!(
        link,
        Link {
            namespace: "linkerd-multicluster".to_owned(),
            name: "east".to_owned(),
            created: 1_767_323_045,
            cluster: Arc::from("east"),
            secret: "cluster-credentials-east".to_owned(),
            selectors: Selectors::linkerd_defaults(),
            gateway: GatewaySource::Spec(GatewaySpec {
                addresses: vec![GatewayAddr::Ip("203.0.113.10".parse().unwrap())],
                port: Some(4143),
                identity: Some(IDENTITY.to_owned()),
                probe: Some(probe("/ready", 4191, 3, 30, 3)),
            }),
            claims: Claims::default(),
            place: Place::default(),
            warnings: vec![],
        }
    );
}

#[test]
fn place_from_annotations_table() {
    let place = |r: Option<&str>, z: Option<&str>| Place::parse(r, z).expect("a place");
    // (annotations, the place, the warning)
    let cases: Vec<(Value, Place, Option<&str>)> = vec![
        (json!({}), Place::default(), None),
        (
            json!({"clusterset-dns.io/region": "eu-west-1"}),
            place(Some("eu-west-1"), None),
            None,
        ),
        (
            json!({"clusterset-dns.io/region": "eu-west-1", "clusterset-dns.io/zone": " eu-west-1a "}),
            place(Some("eu-west-1"), Some("eu-west-1a")),
            None,
        ),
        (
            json!({"clusterset-dns.io/zone": "z1", "topology.kubernetes.io/region": "eu"}),
            place(None, Some("z1")),
            None,
        ),
        // A bad value costs the configured place, not the Link: a place
        // decides who answers first, never what a cluster may claim.
        (
            json!({"clusterset-dns.io/region": "eu west", "clusterset-dns.io/zone": "z1"}),
            Place::default(),
            Some(
                "metadata.annotations[clusterset-dns.io/region]: region \"eu west\" is not a Kubernetes label value",
            ),
        ),
        (
            json!({"clusterset-dns.io/region": "eu", "clusterset-dns.io/zone": ""}),
            Place::default(),
            Some(
                "metadata.annotations[clusterset-dns.io/zone]: zone \"\" is not a Kubernetes label value",
            ),
        ),
    ];
    for (annotations, want, warning) in cases {
        let mut obj = v1alpha3();
        obj["metadata"]["annotations"] = annotations.clone();
        let link = parse_link(&obj).unwrap_or_else(|e| panic!("{annotations}: {e}"));
        assert_eq!(link.place, want, "{annotations}");
        match warning {
            Some(w) => assert!(
                link.warnings.len() == 1 && link.warnings[0].starts_with(w),
                "{annotations}: {:?}",
                link.warnings
            ),
            None => assert_eq!(link.warnings, Vec::<String>::new(), "{annotations}"),
        }
    }
}

#[test]
fn claims_from_annotations() {
    let with = |annotations: Value| {
        let mut obj = v1alpha3();
        obj["metadata"]["annotations"] = annotations;
        parse_link(&obj)
            .map(|l| l.claims)
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        with(json!({
            "clusterset-dns.io/allowed-addresses": "10.10.0.0/16, fd00:10::/64",
            "clusterset-dns.io/allowed-namespaces": "shop,kube-system",
            "clusterset-dns.io/denied-namespaces": "legacy",
            "unrelated.example.com/x": "y",
        })),
        Ok(Claims {
            allowed_addresses: Some(parse_cidrs(["10.10.0.0/16,fd00:10::/64"]).unwrap()),
            allowed_namespaces: Some(parse_namespaces(["shop,kube-system"]).unwrap()),
            denied_namespaces: parse_namespaces(["legacy"]).unwrap(),
        })
    );
    assert_eq!(with(json!({})), Ok(Claims::default()));
    // A bad value makes the Link unusable: ignored, it would let the
    // cluster claim more than the Link says.
    let cases = [
        (
            json!({"clusterset-dns.io/allowed-addresses": "10.0.0.0/8,bogus"}),
            "Link linkerd-multicluster/east: metadata.annotations[clusterset-dns.io/allowed-addresses]: \"bogus\" is not a CIDR (10.0.0.0/8, fd00::/8) or an IP address",
        ),
        (
            json!({"clusterset-dns.io/allowed-addresses": " , "}),
            "Link linkerd-multicluster/east: metadata.annotations[clusterset-dns.io/allowed-addresses]: empty: it would reject every address (remove it to allow any outside the special ranges)",
        ),
        (
            json!({"clusterset-dns.io/denied-namespaces": "ok,Not_OK"}),
            "Link linkerd-multicluster/east: metadata.annotations[clusterset-dns.io/denied-namespaces]: \"Not_OK\" is not a namespace name (an RFC 1123 label)",
        ),
    ];
    for (annotations, want) in cases {
        assert_eq!(
            with(annotations.clone()),
            Err(want.to_owned()),
            "{annotations}"
        );
    }
    // An annotation that is not a string: metadata that does not decode.
    let mut obj = v1alpha3();
    obj["metadata"]["annotations"] = json!({"clusterset-dns.io/allowed-namespaces": 7});
    assert!(!decodes(&obj));
}

#[test]
fn v1alpha1_shaped_link() {
    // v1alpha1 has no federatedServiceSelector, no status, no exclusions.
    let obj = json!({
        "apiVersion": "multicluster.linkerd.io/v1alpha1",
        "kind": "Link",
        "metadata": {"name": "west", "namespace": "linkerd-multicluster"},
        "spec": {
            "targetClusterName": "west",
            "targetClusterDomain": "cluster.local",
            "clusterCredentialsSecret": "cluster-credentials-west",
            "gatewayAddress": "198.51.100.7",
            "gatewayPort": "4143",
            "gatewayIdentity": IDENTITY,
            "probeSpec": {"path": "/ready", "port": "4191", "period": "3s"},
            "selector": {"matchLabels": {"mirror.linkerd.io/exported": "true"}},
            "remoteDiscoverySelector": {"matchLabels": {"mirror.linkerd.io/exported": "remote-discovery"}}
        }
    });
    let link = parse_link(&obj).expect("parses");
    assert_eq!(link.created, i64::MAX);
    assert_eq!(&*link.cluster, "west");
    assert_eq!(
        link.selectors,
        Selectors {
            federated: None,
            ..Selectors::linkerd_defaults()
        }
    );
    assert_eq!(spec_of(&link).port, Some(4143));
    assert!(link.warnings.is_empty(), "{:?}", link.warnings);
}

#[test]
fn selectors_table() {
    let gw = Some(Selector::label(LABEL_EXPORTED, "true"));
    let fed = Some(Selector::label(LABEL_FEDERATED, "member"));
    // (spec changes, gateway, remote discovery, federated)
    let cases: Vec<(Value, Sel, Sel, Sel)> = vec![
        // Absent (nil) and `{}` both match nothing (Linkerd PR #11344).
        (
            json!({"remoteDiscoverySelector": null}),
            gw.clone(),
            None,
            fed.clone(),
        ),
        (
            json!({"selector": {}, "federatedServiceSelector": {"matchLabels": {}}}),
            None,
            Some(Selector::label(LABEL_EXPORTED, "remote-discovery")),
            None,
        ),
        (
            json!({"selector": {"matchExpressions": []}, "remoteDiscoverySelector": {}, "federatedServiceSelector": {}}),
            None,
            None,
            None,
        ),
        (
            json!({"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}}),
            Some(Selector {
                labels: Default::default(),
                expressions: vec![Requirement {
                    key: "tier".to_owned(),
                    op: Operator::Exists,
                    values: vec![],
                }],
            }),
            Some(Selector::label(LABEL_EXPORTED, "remote-discovery")),
            fed.clone(),
        ),
    ];
    for (changes, g, r, f) in cases {
        let link = parse_link(&with_spec(changes.clone())).expect("parses");
        assert_eq!(
            link.selectors,
            Selectors {
                gateway: g,
                remote_discovery: r,
                federated: f,
            },
            "{changes}"
        );
    }
    // An explicit JSON null is nil too.
    let mut obj = v1alpha3();
    obj["spec"]["selector"] = Value::Null;
    assert_eq!(parse_link(&obj).expect("parses").selectors.gateway, None);
}

#[test]
fn gateway_addresses_table() {
    let ip = |s: &str| GatewayAddr::Ip(s.parse().unwrap());
    let host = |s: &str| GatewayAddr::Host(s.to_owned());
    // (gatewayAddress, addresses, warnings containing)
    let cases: Vec<(&str, Vec<GatewayAddr>, Vec<&str>)> = vec![
        ("203.0.113.10", vec![ip("203.0.113.10")], vec![]),
        (
            "lb-1.Example.COM, 203.0.113.10,,2001:db8::1 ,",
            vec![
                host("lb-1.example.com"),
                ip("203.0.113.10"),
                ip("2001:db8::1"),
            ],
            vec![],
        ),
        (
            "gw.example.com,bad_host,-x.example.com,203.0.113.11",
            vec![host("gw.example.com"), ip("203.0.113.11")],
            vec!["\"bad_host\" is neither", "\"-x.example.com\" is neither"],
        ),
        (
            "a..b, [2001:db8::1]",
            vec![],
            vec!["\"a..b\"", "\"[2001:db8::1]\"", "no usable address"],
        ),
        (" , ", vec![], vec!["no usable address"]),
    ];
    for (list, want, warns) in cases {
        let link = parse_link(&with_spec(json!({"gatewayAddress": list}))).expect("parses");
        assert_eq!(spec_of(&link).addresses, want, "{list}");
        assert_eq!(
            link.warnings.len(),
            warns.len(),
            "{list}: {:?}",
            link.warnings
        );
        for (w, text) in link.warnings.iter().zip(warns) {
            assert!(w.contains(text), "{list}: {w}");
        }
    }
}

#[test]
fn no_gateway_address_means_no_gateway() {
    for addr in [Value::Null, json!("")] {
        // Port, identity and probe mean nothing without an address, even bad.
        let obj = with_spec(json!({
            "gatewayAddress": addr, "gatewayPort": "x", "selector": null,
            "probeSpec": {"path": "/ready", "port": "nope"}
        }));
        let link = parse_link(&obj).expect("parses");
        assert_eq!(link.gateway, GatewaySource::None);
        assert!(link.warnings.is_empty(), "{:?}", link.warnings);
    }
}

#[test]
fn gateway_fields_table() {
    // (spec changes, port, identity, probe, warnings containing)
    let default_probe = Some(probe("/ready", 4191, 3, 30, 3));
    let cases: Vec<FieldCase> = vec![
        (
            json!({"gatewayPort": null}),
            None,
            Some(IDENTITY),
            default_probe.clone(),
            vec!["spec.gatewayPort is absent"],
        ),
        (
            json!({"gatewayPort": "0"}),
            None,
            Some(IDENTITY),
            default_probe.clone(),
            vec!["spec.gatewayPort \"0\" is not a port"],
        ),
        (
            json!({"gatewayPort": "65536"}),
            None,
            Some(IDENTITY),
            default_probe.clone(),
            vec!["spec.gatewayPort \"65536\""],
        ),
        (
            json!({"gatewayPort": "https"}),
            None,
            Some(IDENTITY),
            default_probe.clone(),
            vec!["spec.gatewayPort \"https\""],
        ),
        (
            json!({"gatewayIdentity": ""}),
            Some(4143),
            None,
            default_probe.clone(),
            vec![],
        ),
        (
            json!({"gatewayIdentity": null}),
            Some(4143),
            None,
            default_probe.clone(),
            vec![],
        ),
        // Linkerd runs no probe without a path; that is not a problem.
        (
            json!({"probeSpec": null}),
            Some(4143),
            Some(IDENTITY),
            None,
            vec![],
        ),
        (
            json!({"probeSpec": {"path": "", "port": "4191"}}),
            Some(4143),
            Some(IDENTITY),
            None,
            vec![],
        ),
        (
            json!({"probeSpec": {"path": "/ready"}}),
            Some(4143),
            Some(IDENTITY),
            None,
            vec!["spec.probeSpec.port is absent"],
        ),
        (
            json!({"probeSpec": {"path": "/ready", "port": "0"}}),
            Some(4143),
            Some(IDENTITY),
            None,
            vec!["spec.probeSpec.port \"0\""],
        ),
        (
            json!({"probeSpec": {"path": "/ready", "port": "mc-probe"}}),
            Some(4143),
            Some(IDENTITY),
            None,
            vec!["spec.probeSpec.port \"mc-probe\""],
        ),
        // A path the HTTP client would refuse or cut: no probe, said once.
        (
            json!({"probeSpec": {"path": "/<ready>", "port": "4191"}}),
            Some(4143),
            Some(IDENTITY),
            None,
            vec!["spec.probeSpec.path \"/<ready>\" is not a request path"],
        ),
        (
            json!({"probeSpec": {"path": "/ready#x", "port": "4191"}}),
            Some(4143),
            Some(IDENTITY),
            None,
            vec!["spec.probeSpec.path \"/ready#x\" is not a request path"],
        ),
        // The CRD-filled fields, and link-gen's bare-seconds period.
        (
            json!({"probeSpec": {"path": "/health", "port": "4192", "period": "10", "timeout": "1m30s", "failureThreshold": "5"}}),
            Some(4143),
            Some(IDENTITY),
            Some(probe("/health", 4192, 10, 90, 5)),
            vec![],
        ),
        (
            json!({"probeSpec": {"path": "/ready", "port": "4191", "period": "three", "timeout": "0s", "failureThreshold": "0"}}),
            Some(4143),
            Some(IDENTITY),
            default_probe.clone(),
            vec![
                "spec.probeSpec.period: \"three\" is not a Go duration",
                "spec.probeSpec.timeout \"0s\" is zero; using 30s",
                "spec.probeSpec.failureThreshold \"0\"",
            ],
        ),
        (
            json!({"probeSpec": {"path": "/ready", "port": "4191", "period": "-3s", "timeout": "5", "failureThreshold": "-1"}}),
            Some(4143),
            Some(IDENTITY),
            Some(probe("/ready", 4191, 3, 5, 3)),
            vec![
                "spec.probeSpec.period: \"-3s\" is not a Go duration: negative; using 3s",
                "spec.probeSpec.failureThreshold \"-1\"",
            ],
        ),
        (
            json!({"probeSpec": {"path": "/ready", "port": "4191", "period": "", "timeout": "", "failureThreshold": ""}}),
            Some(4143),
            Some(IDENTITY),
            default_probe.clone(),
            vec![],
        ),
    ];
    for (changes, port, identity, want_probe, warns) in cases {
        let link = parse_link(&with_spec(changes.clone())).expect("parses");
        let gw = spec_of(&link);
        assert_eq!(gw.port, port, "{changes}");
        assert_eq!(gw.identity.as_deref(), identity, "{changes}");
        assert_eq!(gw.probe, want_probe, "{changes}");
        assert_eq!(
            link.warnings.len(),
            warns.len(),
            "{changes}: {:?}",
            link.warnings
        );
        for (w, text) in link.warnings.iter().zip(warns) {
            assert!(w.contains(text), "{changes}: {w}");
        }
    }
}

#[test]
fn fatal_errors_table() {
    let mut no_name = v1alpha3();
    no_name["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("name");
    let mut empty_name = v1alpha3();
    empty_name["metadata"]["name"] = json!("");
    let mut no_spec = v1alpha3();
    no_spec.as_object_mut().expect("object").remove("spec");
    let mut list_spec = v1alpha3();
    list_spec["spec"] = json!([]);
    // (object, error containing)
    let cases: Vec<(Value, &str)> = vec![
        (
            no_name,
            "Link in namespace \"linkerd-multicluster\": metadata.name",
        ),
        (empty_name, "metadata.name is missing"),
        (no_spec, "Link linkerd-multicluster/east: spec: missing"),
        (
            list_spec,
            "Link linkerd-multicluster/east: spec: expected an object, found a list",
        ),
        (
            with_spec(json!({"targetClusterName": null})),
            "Link linkerd-multicluster/east: spec.targetClusterName: missing or empty",
        ),
        (
            with_spec(json!({"targetClusterName": ""})),
            "spec.targetClusterName: missing or empty",
        ),
        (
            with_spec(json!({"targetClusterName": "East"})),
            "Link linkerd-multicluster/east: spec.targetClusterName: cluster name \"East\" is not an RFC 1123 label",
        ),
        (
            with_spec(json!({"targetClusterName": "federated"})),
            "spec.targetClusterName: cluster name \"federated\" is reserved",
        ),
        (
            with_spec(json!({"clusterCredentialsSecret": null})),
            "Link linkerd-multicluster/east: spec.clusterCredentialsSecret: missing or empty",
        ),
        (
            with_spec(json!({"clusterCredentialsSecret": ""})),
            "spec.clusterCredentialsSecret: missing or empty",
        ),
        (
            with_spec(
                json!({"selector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}}),
            ),
            "Link linkerd-multicluster/east: spec.selector: matchExpressions[0]: operator \"Gt\"",
        ),
        (
            with_spec(
                json!({"remoteDiscoverySelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
            ),
            "spec.remoteDiscoverySelector: matchExpressions[0] (a In): needs at least one value",
        ),
        (
            with_spec(json!({"federatedServiceSelector": {"matchLabels": {"a": "b c"}}})),
            "spec.federatedServiceSelector: \"b c\" cannot appear",
        ),
        // Numbers where the CRD has strings.
        (
            with_spec(json!({"gatewayPort": 4143})),
            "Link linkerd-multicluster/east: spec.gatewayPort: invalid type: integer `4143`, expected a string",
        ),
        (
            with_spec(json!({"probeSpec": {"path": "/ready", "port": 4191}})),
            "spec.probeSpec.port: invalid type: integer `4191`",
        ),
        (
            with_spec(
                json!({"probeSpec": {"path": "/ready", "port": "4191", "failureThreshold": 3}}),
            ),
            "spec.probeSpec.failureThreshold: invalid type: integer `3`",
        ),
        (
            with_spec(json!({"targetClusterName": true})),
            "spec.targetClusterName: invalid type: boolean `true`",
        ),
        (
            with_spec(json!({"gatewayAddress": ["203.0.113.10"]})),
            "spec.gatewayAddress: invalid type: sequence",
        ),
        (
            with_spec(json!({"selector": {"matchLabels": {"a": 1}}})),
            "spec.selector.matchLabels.a: invalid type: integer `1`",
        ),
    ];
    for (obj, want) in cases {
        let err = parse_link(&obj).expect_err(want).to_string();
        assert!(err.contains(want), "want {want:?} in {err:?}");
    }
    let mut null_spec = v1alpha3();
    null_spec["spec"] = Value::Null;
    let mut string_spec = v1alpha3();
    string_spec["spec"] = json!("x");
    for (obj, want) in [
        (null_spec, "spec: expected an object, found null"),
        (string_spec, "spec: expected an object, found a string"),
    ] {
        let err = parse_link(&obj).expect_err(want).to_string();
        assert!(err.ends_with(want), "want {want:?} in {err:?}");
    }
    // A name that is not a string, or no object at all: the watch cannot
    // decode it and skips it.
    let mut numeric_name = v1alpha3();
    numeric_name["metadata"]["name"] = json!(7);
    assert!(!decodes(&numeric_name));
    assert!(!decodes(&json!("a string")));
}

#[test]
fn unknown_fields_are_tolerated_and_a_bad_timestamp_does_not_decode() {
    let mut obj = with_spec(json!({"someFutureField": {"x": 1}, "targetClusterDomain": 5}));
    let link = parse_link(&obj).expect("parses");
    assert_eq!(link.created, 1_767_323_045);
    assert!(link.warnings.is_empty(), "{:?}", link.warnings);
    obj["metadata"]["creationTimestamp"] = json!("yesterday");
    assert!(!decodes(&obj));
}

#[test]
fn hostnames() {
    let long_label = "a".repeat(63);
    let too_long_label = "a".repeat(64);
    let long_name = [&*long_label, &*long_label, &*long_label, &"a".repeat(61)].join(".");
    let too_long_name = format!("{long_name}a");
    assert_eq!(long_name.len(), 253);
    let cases: Vec<(&str, Option<&str>)> = vec![
        ("gw.example.com", Some("gw.example.com")),
        ("GW.Example.Com", Some("gw.example.com")),
        ("localhost", Some("localhost")),
        ("1-2.example", Some("1-2.example")),
        (&long_label, Some(&long_label)),
        (&long_name, Some(&long_name)),
        (&too_long_label, None),
        (&too_long_name, None),
        ("", None),
        ("a..b", None),
        (".a", None),
        ("a.", None),
        ("-a.b", None),
        ("a-.b", None),
        ("a_b.c", None),
        ("a b", None),
        ("h\u{e9}.example", None),
    ];
    for (s, want) in cases {
        assert_eq!(parse_hostname(s).as_deref(), want, "{s}");
    }
}
