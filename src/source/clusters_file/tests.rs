use super::*;
use crate::source::spec::GatewayAddr;
use crate::vocab::linkerd::{LABEL_EXPORTED, LABEL_FEDERATED};
use crate::vocab::place::Place;
use crate::vocab::trust::{Claims, parse_cidrs, parse_namespaces};

const FULL: &str = r#"
- name: east                      # required
  kubeconfig: east.kubeconfig     # relative to the file's directory
  context: east
  selectors:
    gateway: {matchLabels: {mirror.linkerd.io/exported: "true"}}
    remoteDiscovery: {matchLabels: {mirror.linkerd.io/exported: remote-discovery}}
    federated: {matchLabels: {mirror.linkerd.io/federated: member}}
  gateway:
    addresses: [203.0.113.10, GW.example.com]
    port: 4143
    identity: linkerd-gateway.linkerd-multicluster.serviceaccount.identity.linkerd.cluster.local
    probe: {path: /ready, port: 4191, period: 3s, timeout: 30s, failureThreshold: 3}
  allowedAddresses: [10.10.0.0/16, "fd00:10::/64", 203.0.113.10]
  namespaces: {allow: [shop, data, kube-system], deny: [data]}
  region: us-east-1
  zone: us-east-1a
- name: west
  kubeconfig: /etc/clusterset/west.kubeconfig
"#;

/// A selector slot in a table row.
type Sel = Option<Selector>;

fn parse(text: &str) -> Result<Vec<ClusterEntry>, String> {
    parse_clusters_file(text, Path::new("/etc/clusterset")).map_err(|e| e.to_string())
}

fn one(text: &str) -> ClusterEntry {
    let mut v = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(v.len(), 1, "{text}");
    v.remove(0)
}

#[test]
fn full_example() {
    let got = parse(FULL).expect("parses");
    assert_eq!(
        got,
        vec![
            ClusterEntry {
                name: Arc::from("east"),
                kubeconfig: PathBuf::from("/etc/clusterset/east.kubeconfig"),
                context: Some("east".to_owned()),
                selectors: Selectors::linkerd_defaults(),
                gateway: GatewaySource::Spec(GatewaySpec {
                    addresses: vec![
                        GatewayAddr::Ip("203.0.113.10".parse().unwrap()),
                        GatewayAddr::Host("gw.example.com".to_owned()),
                    ],
                    port: Some(4143),
                    identity: Some(
                        "linkerd-gateway.linkerd-multicluster.serviceaccount.identity.linkerd.cluster.local"
                            .to_owned()
                    ),
                    probe: Some(ProbeSpec {
                        path: "/ready".to_owned(),
                        port: 4191,
                        period: Duration::from_secs(3),
                        timeout: Duration::from_secs(30),
                        failure_threshold: 3,
                    }),
                }),
                claims: Claims {
                    allowed_addresses: Some(
                        parse_cidrs(["10.10.0.0/16,fd00:10::/64,203.0.113.10/32"]).unwrap()
                    ),
                    allowed_namespaces: Some(parse_namespaces(["shop,data,kube-system"]).unwrap()),
                    denied_namespaces: parse_namespaces(["data"]).unwrap(),
                },
                place: Place::parse(Some("us-east-1"), Some("us-east-1a")).unwrap(),
            },
            ClusterEntry {
                name: Arc::from("west"),
                kubeconfig: PathBuf::from("/etc/clusterset/west.kubeconfig"),
                context: None,
                selectors: Selectors::linkerd_defaults(),
                gateway: GatewaySource::RemoteService,
                claims: Claims::default(),
                place: Place::default(),
            },
        ]
    );
}

#[test]
fn empty_files_declare_no_clusters() {
    for text in [
        "",
        "\n\n",
        "# nothing yet\n",
        "[]",
        "---\n",
        "~\n",
        "---\n[]\n",
    ] {
        assert_eq!(parse(text), Ok(vec![]), "{text:?}");
    }
}

#[test]
fn kubeconfig_resolution() {
    // (base dir, kubeconfig, resolved)
    let cases = [
        (
            "/etc/clusterset",
            "east.kubeconfig",
            "/etc/clusterset/east.kubeconfig",
        ),
        (
            "/etc/clusterset",
            "sub/east.yaml",
            "/etc/clusterset/sub/east.yaml",
        ),
        (
            "/etc/clusterset",
            "../kube/east",
            "/etc/clusterset/../kube/east",
        ),
        ("/etc/clusterset", "/abs/east", "/abs/east"),
        ("", "east.kubeconfig", "east.kubeconfig"),
        ("conf", "east.kubeconfig", "conf/east.kubeconfig"),
    ];
    for (base, kc, want) in cases {
        let text = format!("- {{name: east, kubeconfig: {kc:?}}}\n");
        let got = parse_clusters_file(&text, Path::new(base)).expect("parses");
        assert_eq!(got[0].kubeconfig, PathBuf::from(want), "{base} + {kc}");
    }
}

#[test]
fn selectors_override_per_key() {
    let exported = |v: &str| Some(Selector::label(LABEL_EXPORTED, v));
    let federated = Some(Selector::label(LABEL_FEDERATED, "member"));
    // (selectors block, gateway, remote discovery, federated)
    let cases: Vec<(&str, Sel, Sel, Sel)> = vec![
        (
            "",
            exported("true"),
            exported("remote-discovery"),
            federated.clone(),
        ),
        (
            "  selectors: {}\n",
            exported("true"),
            exported("remote-discovery"),
            federated.clone(),
        ),
        (
            "  selectors:\n",
            exported("true"),
            exported("remote-discovery"),
            federated.clone(),
        ),
        (
            "  selectors: {gateway: {}}\n",
            None,
            exported("remote-discovery"),
            federated.clone(),
        ),
        (
            "  selectors: {gateway: {matchLabels: {}}, federated: {matchExpressions: []}}\n",
            None,
            exported("remote-discovery"),
            None,
        ),
        // An explicit null is a nil selector: it matches nothing.
        (
            "  selectors:\n    remoteDiscovery:\n",
            exported("true"),
            None,
            federated.clone(),
        ),
        (
            "  selectors:\n    federated: {matchLabels: {team: a}}\n",
            exported("true"),
            exported("remote-discovery"),
            Some(Selector::label("team", "a")),
        ),
        (
            "  selectors:\n    gateway: {matchLabels: {mirror.linkerd.io/exported: \"yes\"}}\n    remoteDiscovery: {}\n    federated: {}\n",
            exported("yes"),
            None,
            None,
        ),
    ];
    for (block, g, r, f) in cases {
        let text = format!("- name: east\n  kubeconfig: k\n{block}");
        assert_eq!(
            one(&text).selectors,
            Selectors {
                gateway: g,
                remote_discovery: r,
                federated: f,
            },
            "{block}"
        );
    }
}

#[test]
fn gateway_table() {
    // (gateway block, expected spec)
    let ip = |s: &str| GatewayAddr::Ip(s.parse().unwrap());
    let cases: Vec<(&str, GatewaySpec)> = vec![
        (
            "  gateway: {addresses: [2001:db8::1]}\n",
            GatewaySpec {
                addresses: vec![ip("2001:db8::1")],
                port: None,
                identity: None,
                probe: None,
            },
        ),
        (
            "  gateway:\n    addresses: [gw.example.com]\n    probe: {path: /ready, port: 4191}\n",
            GatewaySpec {
                addresses: vec![GatewayAddr::Host("gw.example.com".to_owned())],
                port: None,
                identity: None,
                probe: Some(ProbeSpec {
                    path: "/ready".to_owned(),
                    port: 4191,
                    period: ProbeSpec::DEFAULT_PERIOD,
                    timeout: ProbeSpec::DEFAULT_TIMEOUT,
                    failure_threshold: ProbeSpec::DEFAULT_FAILURE_THRESHOLD,
                }),
            },
        ),
        (
            "  gateway:\n    addresses: [203.0.113.10]\n    port: 14143\n    probe: {path: /ready, port: 4191, period: 10, timeout: 1m30s, failureThreshold: 5}\n",
            GatewaySpec {
                addresses: vec![ip("203.0.113.10")],
                port: Some(14143),
                identity: None,
                probe: Some(ProbeSpec {
                    path: "/ready".to_owned(),
                    port: 4191,
                    period: Duration::from_secs(10),
                    timeout: Duration::from_secs(90),
                    failure_threshold: 5,
                }),
            },
        ),
    ];
    for (block, want) in cases {
        let text = format!("- name: east\n  kubeconfig: k\n{block}");
        assert_eq!(one(&text).gateway, GatewaySource::Spec(want), "{block}");
    }
    // `gateway:` with no value is the same as leaving it out.
    assert_eq!(
        one("- name: east\n  kubeconfig: k\n  gateway:\n").gateway,
        GatewaySource::RemoteService
    );
}

#[test]
fn place_keys_table() {
    // (keys of the entry, the place)
    let cases: [(&str, Place); 4] = [
        ("", Place::default()),
        (
            "region: eu-west-1",
            Place::parse(Some("eu-west-1"), None).unwrap(),
        ),
        (
            "zone: eu-west-1a",
            Place::parse(None, Some("eu-west-1a")).unwrap(),
        ),
        (
            "region: EU_1, zone: eu.1.a",
            Place::parse(Some("EU_1"), Some("eu.1.a")).unwrap(),
        ),
    ];
    for (keys, want) in cases {
        let sep = if keys.is_empty() { "" } else { ", " };
        let text = format!("- {{name: east, kubeconfig: k{sep}{keys}}}\n");
        assert_eq!(one(&text).place, want, "{keys}");
    }
}

#[test]
fn invalid_files() {
    // (file, error containing)
    let cases: Vec<(&str, &str)> = vec![
        (
            "east:\n  kubeconfig: k\n",
            "the clusters file is a list of entries (`- name: east`), not a mapping",
        ),
        ("just text\n", "expected a list of cluster entries"),
        ("- [a, b]\n", "entry 0: "),
        ("- name: east\n  kubeconfig: [k\n", "line"),
        // Shape: unknown and missing keys at each level, wrong types.
        (
            "- name: a\n  kubeconfig: k\n- name: b\n  kubeconfig: k\n  kubeConfig: k\n",
            "entry 1, kubeConfig: unknown field `kubeConfig`",
        ),
        ("- name: a\n", "entry 0: missing field `kubeconfig`"),
        ("- kubeconfig: k\n", "entry 0: missing field `name`"),
        (
            "- name: a\n  kubeconfig: k\n  selectors: {gateways: {}}\n",
            "entry 0, selectors.gateways: unknown field `gateways`",
        ),
        (
            "- name: a\n  kubeconfig: k\n  gateway: {port: 4143}\n",
            "entry 0, gateway: missing field `addresses`",
        ),
        (
            "- name: a\n  kubeconfig: k\n  gateway: {addresses: [x.y], ports: 1}\n",
            "entry 0, gateway.ports: unknown field `ports`",
        ),
        (
            "- name: a\n  kubeconfig: k\n  gateway: {addresses: [x.y], port: 70000}\n",
            "entry 0, gateway.port: ",
        ),
        (
            "- name: a\n  kubeconfig: k\n  gateway: {addresses: [x.y], port: -1}\n",
            "entry 0, gateway.port: ",
        ),
        (
            "- name: a\n  kubeconfig: k\n  gateway: {addresses: [x.y], probe: {path: /ready}}\n",
            "entry 0, gateway.probe: missing field `port`",
        ),
        (
            "- name: a\n  kubeconfig: k\n  gateway: {addresses: [x.y], probe: {path: /r, port: 1, failure_threshold: 3}}\n",
            "entry 0, gateway.probe.failure_threshold: unknown field",
        ),
        (
            "- name: a\n  kubeconfig: k\n  gateway: {addresses: [x.y, [z]]}\n",
            "entry 0, gateway.addresses[1]: ",
        ),
        (
            "- name: a\n  kubeconfig: k\n  gateway: {addresses: x.y}\n",
            "entry 0, gateway.addresses: ",
        ),
        // Claims: every bad value is the operator's mistake, named.
        (
            "- name: a\n  kubeconfig: k\n  allowedAddresses: [10.0.0.0/33]\n",
            "entry 0 (a): allowedAddresses: \"10.0.0.0/33\" is not a CIDR",
        ),
        (
            "- name: a\n  kubeconfig: k\n  allowedAddresses: [10.1.0.0/8]\n",
            "entry 0 (a): allowedAddresses: \"10.1.0.0/8\" has host bits set; did you mean 10.0.0.0/8?",
        ),
        (
            "- name: a\n  kubeconfig: k\n  allowedAddresses: []\n",
            "entry 0 (a): allowedAddresses: empty",
        ),
        (
            "- name: a\n  kubeconfig: k\n  namespaces: {allow: [Shop]}\n",
            "entry 0 (a): namespaces.allow: \"Shop\" is not a namespace name",
        ),
        (
            "- name: a\n  kubeconfig: k\n  namespaces: {deny: [a_b]}\n",
            "entry 0 (a): namespaces.deny: \"a_b\" is not a namespace name",
        ),
        (
            "- name: a\n  kubeconfig: k\n  namespaces: {allowed: [x]}\n",
            "entry 0, namespaces.allowed: unknown field `allowed`",
        ),
        // The place: label values, named by key.
        (
            "- name: a\n  kubeconfig: k\n  region: eu west\n",
            "entry 0 (a): region: region \"eu west\" is not a Kubernetes label value",
        ),
        (
            "- name: a\n  kubeconfig: k\n  region: eu\n  zone: -eu-1\n",
            "entry 0 (a): zone: zone \"-eu-1\" is not a Kubernetes label value",
        ),
        (
            "- name: a\n  kubeconfig: k\n  region: \"\"\n",
            "entry 0 (a): region: region \"\" is not a Kubernetes label value",
        ),
        (
            "- name: a\n  kubeconfig: k\n  region: [eu]\n",
            "entry 0, region: ",
        ),
        (
            "- name: a\n  kubeconfig: k\n  topologyZone: eu-1\n",
            "entry 0, topologyZone: unknown field `topologyZone`",
        ),
        // Values.
        (
            "- {name: East, kubeconfig: k}\n",
            "entry 0 (East): name: cluster name \"East\" is not an RFC 1123 label",
        ),
        (
            "- {name: federated, kubeconfig: k}\n",
            "entry 0 (federated): name: cluster name \"federated\" is reserved",
        ),
        ("- {name: \"\", kubeconfig: k}\n", "entry 0 (): name: "),
        (
            "- {name: east, kubeconfig: a}\n- {name: west, kubeconfig: b}\n- {name: east, kubeconfig: c}\n",
            "entry 2 (east): name: duplicate of entry 0",
        ),
        (
            "- {name: east, kubeconfig: \"\"}\n",
            "entry 0 (east): kubeconfig: empty",
        ),
        (
            "- {name: east, kubeconfig: k, context: \"\"}\n",
            "entry 0 (east): context: empty",
        ),
        (
            "- name: east\n  kubeconfig: k\n  selectors: {federated: {matchExpressions: [{key: a, operator: Gt, values: [\"1\"]}]}}\n",
            "entry 0 (east): selectors.federated: matchExpressions[0]: operator \"Gt\"",
        ),
        (
            "- name: east\n  kubeconfig: k\n  selectors: {gateway: {matchLabels: {a: \"b c\"}}}\n",
            "entry 0 (east): selectors.gateway: \"b c\" cannot appear",
        ),
        (
            "- name: east\n  kubeconfig: k\n  gateway: {addresses: []}\n",
            "entry 0 (east): gateway.addresses: empty",
        ),
        (
            "- name: east\n  kubeconfig: k\n  gateway: {addresses: [203.0.113.10, bad_host]}\n",
            "entry 0 (east): gateway.addresses[1]: \"bad_host\" is neither an IP address nor a DNS hostname",
        ),
        (
            "- name: east\n  kubeconfig: k\n  gateway: {addresses: [x.y], port: 0}\n",
            "entry 0 (east): gateway.port: 0 is not a port",
        ),
        (
            "- name: east\n  kubeconfig: k\n  gateway: {addresses: [x.y], identity: \"\"}\n",
            "entry 0 (east): gateway.identity: empty",
        ),
        (
            "- name: east\n  kubeconfig: k\n  gateway: {addresses: [x.y], probe: {path: \"\", port: 1}}\n",
            "entry 0 (east): gateway.probe.path: empty",
        ),
        (
            "- name: east\n  kubeconfig: k\n  gateway: {addresses: [x.y], probe: {path: \"/a`b\", port: 1}}\n",
            "entry 0 (east): gateway.probe.path: \"/a`b\" is not a request path",
        ),
        (
            "- name: east\n  kubeconfig: k\n  gateway: {addresses: [x.y], probe: {path: /r, port: 0}}\n",
            "entry 0 (east): gateway.probe.port: 0 is not a port",
        ),
        (
            "- name: east\n  kubeconfig: k\n  gateway: {addresses: [x.y], probe: {path: /r, port: 1, period: 3 sec}}\n",
            "entry 0 (east): gateway.probe.period: \"3 sec\" is not a Go duration",
        ),
        (
            "- name: east\n  kubeconfig: k\n  gateway: {addresses: [x.y], probe: {path: /r, port: 1, timeout: 0s}}\n",
            "entry 0 (east): gateway.probe.timeout: \"0s\" is zero",
        ),
        (
            "- name: east\n  kubeconfig: k\n  gateway: {addresses: [x.y], probe: {path: /r, port: 1, period: -1s}}\n",
            "entry 0 (east): gateway.probe.period: \"-1s\" is not a Go duration: negative",
        ),
        (
            "- name: east\n  kubeconfig: k\n  gateway: {addresses: [x.y], probe: {path: /r, port: 1, failureThreshold: 0}}\n",
            "entry 0 (east): gateway.probe.failureThreshold: must be at least 1",
        ),
    ];
    for (text, want) in cases {
        let err = parse(text).expect_err(text);
        assert!(err.contains(want), "{text}\nwant {want:?}\ngot  {err:?}");
    }
}

#[test]
fn load_reads_the_file_and_names_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("clusters.yaml");
    std::fs::write(&path, "- {name: east, kubeconfig: east.kubeconfig}\n").expect("write");
    let got = load_clusters_file(&path).expect("loads");
    assert_eq!(got[0].kubeconfig, dir.path().join("east.kubeconfig"));

    std::fs::write(&path, "- {name: East, kubeconfig: k}\n").expect("write");
    let err = load_clusters_file(&path).expect_err("bad name").to_string();
    assert!(
        err.starts_with(&format!("clusters file {}: entry 0 (East)", path.display())),
        "{err}"
    );

    let missing = dir.path().join("nope.yaml");
    let err = load_clusters_file(&missing)
        .expect_err("missing")
        .to_string();
    assert!(
        err.starts_with(&format!(
            "cannot read clusters file {}: ",
            missing.display()
        )),
        "{err}"
    );
}
