//! What conversion takes from a cluster it does not trust: every address
//! class no cluster publishes, wherever an address enters (slice endpoints
//! of both families, ClusterIPs, the gateway's load-balancer ingress,
//! ServiceImport IPs, declared gateway addresses), the operator's and the
//! cluster's lists, and the namespaces a cluster may not export from.

use super::*;
use crate::source::convert::mcs::{McsObject, convert_import};
use crate::vocab::trust::{Claims, TrustSettings, parse_cidrs, parse_namespaces};

/// The operator's deny list holds 10.99.0.0/16; east may claim only
/// 10.10.0.0/16, fd00:10::/64 and its gateway 203.0.113.10.
fn bounded() -> Trust {
    Trust::new(
        TrustSettings {
            deny_addresses: parse_cidrs(["10.99.0.0/16"]).expect("cidrs"),
            ..TrustSettings::default()
        },
        Claims {
            allowed_addresses: Some(
                parse_cidrs(["10.10.0.0/16,fd00:10::/64,203.0.113.10"]).expect("cidrs"),
            ),
            ..Claims::default()
        },
    )
}

/// (reason label, count of further occurrences) of each warning.
fn reasons(warnings: &[Warning]) -> Vec<(&'static str, usize)> {
    warnings
        .iter()
        .map(|w| (w.reason.label(), w.more))
        .collect()
}

fn slice_with(family: &str, addresses: &[&str], trust: &Trust) -> Converted<Option<Slice>> {
    let endpoints: Vec<serde_json::Value> = addresses
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    let s: K8sSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": family,
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": endpoints,
    }))
    .expect("an EndpointSlice");
    convert_slice(&s, trust).expect("converts")
}

#[test]
fn slice_addresses() {
    let open = Trust::default();
    let bounded = bounded();
    // (case, addressType, addresses, rules, kept, warnings)
    type Row<'a> = (
        &'a str,
        &'a str,
        &'a [&'a str],
        &'a Trust,
        &'a [&'a str],
        &'a [(&'static str, usize)],
    );
    let cases: &[Row<'_>] = &[
        (
            "every IPv4 class, and the pod address beside them",
            "IPv4",
            &[
                "0.0.0.0",
                "127.0.0.1",
                "127.8.9.10",
                "169.254.1.1",
                "169.254.169.254",
                "100.100.100.200",
                "224.0.0.1",
                "239.1.2.3",
                "255.255.255.255",
                "10.1.2.3",
            ],
            &open,
            &["10.1.2.3"],
            &[
                ("address_unspecified", 0),
                ("address_loopback", 1),
                ("address_link_local", 0),
                ("address_metadata", 1),
                ("address_multicast", 1),
                ("address_broadcast", 0),
            ],
        ),
        (
            "every IPv6 class, IPv4-mapped and -compatible forms included",
            "IPv6",
            &[
                "::",
                "::1",
                "fe80::1",
                "ff02::1",
                "fd00:ec2::254",
                "::ffff:127.0.0.1",
                "::ffff:169.254.169.254",
                "::127.0.0.1",
                "fd00:40::1",
            ],
            &open,
            &["fd00:40::1"],
            &[
                ("address_unspecified", 0),
                ("address_loopback", 2),
                ("address_link_local", 0),
                ("address_multicast", 0),
                ("address_metadata", 1),
            ],
        ),
        (
            "documentation ranges stay (tests and demos use them)",
            "IPv4",
            &["192.0.2.1", "198.51.100.2", "203.0.113.3"],
            &open,
            &["192.0.2.1", "198.51.100.2", "203.0.113.3"],
            &[],
        ),
        (
            "the operator's deny list, then the cluster's allowed ranges",
            "IPv4",
            &["10.99.0.5", "10.10.0.5", "10.20.0.5"],
            &bounded,
            &["10.10.0.5"],
            &[("address_denied", 0), ("address_not_allowed", 0)],
        ),
        (
            "allowed ranges in IPv6",
            "IPv6",
            &["fd00:10::5", "fd00:20::5"],
            &bounded,
            &["fd00:10::5"],
            &[("address_not_allowed", 0)],
        ),
        (
            "nothing left: the slice is still held, empty",
            "IPv4",
            &["127.0.0.1"],
            &open,
            &[],
            &[("address_loopback", 0)],
        ),
    ];
    for (case, family, addresses, trust, kept, warned) in cases {
        let c = slice_with(family, addresses, trust);
        let got: Vec<String> = c
            .value
            .as_ref()
            .expect("a slice")
            .endpoints
            .iter()
            .map(|e| e.addr.to_string())
            .collect();
        assert_eq!(got, *kept, "{case}");
        assert_eq!(reasons(&c.warnings), *warned, "{case}");
    }
    // The text names the field, the address and the class.
    let c = slice_with("IPv4", &["10.1.2.3", "169.254.169.254"], &open);
    assert_eq!(
        c.warnings[0].to_string(),
        "endpoints[1].addresses[0]: 169.254.169.254 is a cloud metadata service address; left out"
    );
}

#[test]
fn cluster_ips_and_gateway_ingress() {
    let c = convert_service(
        &svc(json!({
            "metadata": {"name": "web", "namespace": "shop", "labels": {"mirror.linkerd.io/exported": "true"}},
            "spec": {"clusterIP": "127.0.0.1", "clusterIPs": ["127.0.0.1", "fd00::5"]}
        })),
        true,
        &Selectors::linkerd_defaults(),
        &Trust::default(),
    )
    .expect("converts");
    let ServiceKind::Exported(s) = &c.value else {
        panic!("{:?}", c.value)
    };
    assert_eq!(
        s.cluster_ips,
        vec!["fd00::5".parse::<IpAddr>().expect("ip")]
    );
    assert_eq!(reasons(&c.warnings), [("address_loopback", 0)]);

    let gw = json!({
        "metadata": {"name": "linkerd-gateway", "namespace": "linkerd-multicluster"},
        "spec": {"ports": [{"name": "mc-gateway", "port": 4143}]},
        "status": {"loadBalancer": {"ingress": [
            {"ip": "169.254.169.254"}, {"ip": "0.0.0.0"}, {"ip": "203.0.113.10"}, {"ip": "203.0.113.11"}
        ]}}
    });
    for (trust, kept, warned) in [
        (
            Trust::default(),
            vec!["203.0.113.10", "203.0.113.11"],
            vec![("address_metadata", 0), ("address_unspecified", 0)],
        ),
        (
            bounded(),
            vec!["203.0.113.10"],
            vec![
                ("address_metadata", 0),
                ("address_unspecified", 0),
                ("address_not_allowed", 0),
            ],
        ),
    ] {
        let c = convert_service(
            &svc(gw.clone()),
            false,
            &Selectors::linkerd_defaults(),
            &trust,
        )
        .expect("converts");
        let ServiceKind::Gateway(g) = &c.value else {
            panic!("{:?}", c.value)
        };
        let got: Vec<String> = g.addresses.iter().map(ToString::to_string).collect();
        assert_eq!(got, kept);
        assert_eq!(reasons(&c.warnings), warned);
    }

    let declared: Vec<IpAddr> = ["127.0.0.1", "203.0.113.10", "::1"]
        .iter()
        .map(|a| a.parse().expect("ip"))
        .collect();
    let t = trusted_addresses(&Trust::default(), &declared, "gateway address");
    assert_eq!(t.value, vec![declared[1]]);
    assert_eq!(reasons(&t.warnings), [("address_loopback", 1)]);
    assert_eq!(
        t.warnings[0].to_string(),
        "gateway address: 127.0.0.1 is a loopback address (127.0.0.0/8, ::1); left out (and 1 more like it)"
    );
    let exempt = Trust::new(
        TrustSettings {
            exempt_addresses: parse_cidrs(["127.0.0.0/8"]).expect("cidrs"),
            ..TrustSettings::default()
        },
        Claims::default(),
    );
    let t = trusted_addresses(&exempt, &declared, "gateway address");
    assert_eq!(t.value, declared[..2], "exempted: only ::1 is left out");
}

#[test]
fn service_import_ips() {
    let import: McsObject = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"type": "ClusterSetIP", "ips": ["169.254.169.254", "10.96.0.7", "::1"]}
    }))
    .expect("an import");
    let c = convert_import(&import, &Trust::default()).expect("converts");
    assert_eq!(
        c.value.ips,
        vec!["10.96.0.7".parse::<IpAddr>().expect("ip")]
    );
    assert_eq!(
        reasons(&c.warnings),
        [("address_metadata", 0), ("address_loopback", 0)]
    );
}

#[test]
fn namespaces() {
    let exported = |ns: &str, labels: serde_json::Value| {
        json!({
            "metadata": {"name": "web", "namespace": ns, "labels": labels},
            "spec": {"clusterIP": "10.0.0.1", "ports": [{"port": 80}]}
        })
    };
    let flat = json!({"mirror.linkerd.io/exported": "remote-discovery"});
    let listed = Trust::new(
        TrustSettings::default(),
        Claims {
            allowed_namespaces: Some(parse_namespaces(["shop,kube-system"]).expect("names")),
            ..Claims::default()
        },
    );
    // (case, namespace, labels, local, rules, served, warnings)
    let cases = [
        (
            "kube-system",
            "kube-system",
            flat.clone(),
            false,
            Trust::default(),
            false,
            vec![("namespace_denied", 0)],
        ),
        (
            "kube-public",
            "kube-public",
            flat.clone(),
            false,
            Trust::default(),
            false,
            vec![("namespace_denied", 0)],
        ),
        (
            "kube-node-lease",
            "kube-node-lease",
            flat.clone(),
            false,
            Trust::default(),
            false,
            vec![("namespace_denied", 0)],
        ),
        (
            "our own namespace",
            "clusterset-dns",
            flat.clone(),
            false,
            Trust::default(),
            false,
            vec![("namespace_denied", 0)],
        ),
        (
            "the local cluster is held to the same rule",
            "kube-system",
            flat.clone(),
            true,
            Trust::default(),
            false,
            vec![("namespace_denied", 0)],
        ),
        (
            "an unexported Service there is not counted",
            "kube-system",
            json!({}),
            false,
            Trust::default(),
            false,
            vec![],
        ),
        (
            "allowed by name",
            "kube-system",
            flat.clone(),
            false,
            listed.clone(),
            true,
            vec![],
        ),
        (
            "outside the allow list",
            "data",
            flat.clone(),
            false,
            listed.clone(),
            false,
            vec![("namespace_denied", 0)],
        ),
        (
            "an application namespace",
            "shop",
            flat.clone(),
            false,
            Trust::default(),
            true,
            vec![],
        ),
    ];
    for (case, ns, labels, local, trust, served, warned) in cases {
        let c = convert_service(
            &svc(exported(ns, labels)),
            local,
            &Selectors::linkerd_defaults(),
            &trust,
        )
        .expect("converts");
        assert_eq!(
            matches!(c.value, ServiceKind::Exported(_)),
            served,
            "{case}"
        );
        if !served {
            assert_eq!(c.value, ServiceKind::Ignored, "{case}");
            assert_eq!(c.adjustment(), Adjustment::Skipped, "{case}");
        }
        assert_eq!(reasons(&c.warnings), warned, "{case}");
    }
    // A local mirror there is not ours to serve either; the gateway, in
    // linkerd-multicluster, is not an export and stays.
    let mirror = json!({
        "metadata": {"name": "web-east", "namespace": "kube-system",
            "labels": {"mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": "east"}},
        "spec": {"clusterIP": "10.96.0.9"}
    });
    let c = convert_service(
        &svc(mirror),
        true,
        &Selectors::linkerd_defaults(),
        &Trust::default(),
    )
    .expect("converts");
    assert_eq!(c.value, ServiceKind::Ignored);
    assert_eq!(reasons(&c.warnings), [("namespace_denied", 0)]);
    let denied_gateway_ns = Trust::new(
        TrustSettings::default(),
        Claims {
            denied_namespaces: parse_namespaces(["linkerd-multicluster"]).expect("names"),
            ..Claims::default()
        },
    );
    let gw = json!({
        "metadata": {"name": "linkerd-gateway", "namespace": "linkerd-multicluster"},
        "spec": {"ports": [{"name": "mc-gateway", "port": 4143}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
    });
    let c = convert_service(
        &svc(gw),
        false,
        &Selectors::linkerd_defaults(),
        &denied_gateway_ns,
    )
    .expect("converts");
    assert!(matches!(c.value, ServiceKind::Gateway(_)));
}
