use super::*;
use crate::model::objects::ExportMode;
use serde_json::json;

fn svc(v: serde_json::Value) -> K8sService {
    serde_json::from_value(v).expect("a Service")
}

fn kind(v: serde_json::Value, local: bool) -> Result<ServiceKind, String> {
    convert_service(&svc(v), local, &Selectors::linkerd_defaults())
        .map(|c| c.value)
        .map_err(|e| e.to_string())
}

#[test]
fn export_labels_decide_the_mode() {
    let base = |labels: serde_json::Value| {
        json!({
            "metadata": {"name": "web", "namespace": "prod", "labels": labels, "creationTimestamp": "2026-01-02T03:04:05Z"},
            "spec": {"clusterIP": "10.0.0.1", "ports": [{"name": "HTTP", "port": 80}, {"port": 8443, "protocol": "UDP"}]}
        })
    };
    let exported = |labels| match kind(base(labels), false) {
        Ok(ServiceKind::Exported(s)) => Some((s.export, s.federated)),
        Ok(_) => None,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(
        exported(json!({"mirror.linkerd.io/exported": "true"})),
        Some((Some(ExportMode::Gateway), false))
    );
    assert_eq!(
        exported(json!({"mirror.linkerd.io/exported": "remote-discovery"})),
        Some((Some(ExportMode::Flat), false))
    );
    assert_eq!(
        exported(json!({"mirror.linkerd.io/federated": "member"})),
        Some((None, true))
    );
    assert_eq!(
        exported(
            json!({"mirror.linkerd.io/exported": "remote-discovery", "mirror.linkerd.io/federated": "member"})
        ),
        Some((Some(ExportMode::Flat), true))
    );
    assert_eq!(exported(json!({"app": "web"})), None);
    // An unknown value is reported, not guessed.
    let c = convert_service(
        &svc(base(json!({"mirror.linkerd.io/exported": "yes"}))),
        false,
        &Selectors::linkerd_defaults(),
    )
    .expect("converts");
    assert_eq!(c.value, ServiceKind::Ignored);
    assert!(
        c.warnings[0].contains("neither \"true\""),
        "{:?}",
        c.warnings
    );

    let Ok(ServiceKind::Exported(s)) =
        kind(base(json!({"mirror.linkerd.io/exported": "true"})), false)
    else {
        panic!("exported")
    };
    assert_eq!(s.created, 1_767_323_045);
    assert_eq!(
        s.cluster_ips,
        vec!["10.0.0.1".parse::<IpAddr>().expect("ip")]
    );
    // Port names are lower-cased; protocol defaults to TCP.
    assert_eq!(
        s.ports.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["http/TCP/80", "UDP/8443"]
    );
}

#[test]
fn mirrors_only_count_in_the_local_cluster() {
    let mirror = json!({
        "metadata": {"name": "web-east", "namespace": "prod", "labels": {
            "mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": "east",
            "mirror.linkerd.io/exported": "true"}},
        "spec": {"clusterIP": "10.96.10.1", "ports": [{"port": 80}]}
    });
    match kind(mirror.clone(), true) {
        Ok(ServiceKind::Mirror(m)) => {
            assert_eq!(
                (&*m.cluster, m.cluster_ips.len(), m.headless_parent),
                ("east", 1, None)
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        kind(mirror, false),
        Ok(ServiceKind::Ignored),
        "a remote cluster's mirrors are never exports"
    );
}

#[test]
fn the_gateway_is_recognised() {
    let gw = json!({
        "metadata": {"name": "linkerd-gateway", "namespace": "linkerd-multicluster",
            "annotations": {"mirror.linkerd.io/gateway-identity": "gw.id"}},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "mc-gateway", "port": 4143}, {"name": "mc-probe", "port": 4191}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}, {"hostname": "gw.example.com"}]}}
    });
    let c = convert_service(&svc(gw), false, &Selectors::linkerd_defaults()).expect("converts");
    assert_eq!(
        c.value,
        ServiceKind::Gateway(Gateway {
            addresses: vec!["203.0.113.10".parse().expect("ip")],
            port: Some(4143),
            identity: Some("gw.id".into()),
        })
    );
    assert!(c.warnings[0].contains("gw.example.com"));
}

#[test]
fn bad_services_are_errors_naming_the_field() {
    let cases = [
        (
            json!({"metadata": {"namespace": "prod"}}),
            "metadata.name is missing",
        ),
        (
            json!({"metadata": {"name": "Web", "labels": {"mirror.linkerd.io/exported": "true"}}}),
            "metadata.name: \"Web\" is not an RFC 1123 label",
        ),
        (
            json!({"metadata": {"name": "web", "labels": {"mirror.linkerd.io/exported": "true"}},
                   "spec": {"clusterIP": "10.0.0.999"}}),
            "spec.clusterIP: \"10.0.0.999\" is not an IP address",
        ),
        (
            json!({"metadata": {"name": "web", "labels": {"mirror.linkerd.io/exported": "true"}},
                   "spec": {"ports": [{"port": 70000}]}}),
            "spec.ports[0].port: 70000 is not a port number",
        ),
        (
            json!({"metadata": {"name": "web", "labels": {"mirror.linkerd.io/exported": "true"}},
                   "spec": {"ports": [{"port": 80, "protocol": "QUIC"}]}}),
            "spec.ports[0].protocol: \"QUIC\" is not TCP, UDP or SCTP",
        ),
    ];
    for (v, want) in cases {
        let got = kind(v, false).expect_err("should fail");
        assert!(got.contains(want), "{got:?} should contain {want:?}");
    }
}

#[test]
fn headless_and_dual_stack() {
    let v = json!({
        "metadata": {"name": "db", "labels": {"mirror.linkerd.io/exported": "remote-discovery"}},
        "spec": {"clusterIP": "None", "clusterIPs": ["None"]}
    });
    let Ok(ServiceKind::Exported(s)) = kind(v, false) else {
        panic!()
    };
    assert!(s.headless && s.cluster_ips.is_empty());
    assert_eq!(
        &*s.key.namespace, "default",
        "no namespace means default, as with kubectl"
    );
    let v = json!({
        "metadata": {"name": "api", "labels": {"mirror.linkerd.io/exported": "remote-discovery"}},
        "spec": {"clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5", "fd00::5"]}
    });
    let Ok(ServiceKind::Exported(s)) = kind(v, false) else {
        panic!()
    };
    assert_eq!(s.cluster_ips.len(), 2);
}

fn slice_of(v: serde_json::Value) -> Result<Converted<Option<Slice>>, String> {
    let s: K8sSlice = serde_json::from_value(v).expect("an EndpointSlice");
    convert_slice(&s).map_err(|e| e.to_string())
}

#[test]
fn slices() {
    let ok = slice_of(json!({
        "metadata": {"name": "db-abc12", "namespace": "prod", "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4",
        "ports": [{"name": "pg", "port": 5432}, {"name": "all"}],
        "endpoints": [
            {"addresses": ["10.0.0.1"], "hostname": "db-0", "conditions": {"ready": true}},
            {"addresses": ["10.0.0.2"], "conditions": {}},
            {"addresses": ["10.0.0.3"], "hostname": "DB_3", "conditions": {"ready": false}}
        ]
    }))
    .expect("converts");
    let s = ok.value.expect("a slice");
    assert_eq!(
        (&*s.service, s.family, s.ports.len()),
        ("db", Family::V4, 1),
        "a port without a number is skipped"
    );
    let eps: Vec<(String, Option<&str>, bool)> = s
        .endpoints
        .iter()
        .map(|e| (e.addr.to_string(), e.hostname.as_deref(), e.ready))
        .collect();
    assert_eq!(
        eps,
        [
            ("10.0.0.1".to_owned(), Some("db-0"), true),
            ("10.0.0.2".to_owned(), None, true),
            ("10.0.0.3".to_owned(), None, false)
        ],
        "ready nil counts as ready; an invalid hostname falls back to the dashed IP"
    );
    assert!(ok.warnings[0].contains("DB_3"));

    let fqdn = slice_of(
        json!({"metadata": {"name": "x", "labels": {"kubernetes.io/service-name": "x"}}, "addressType": "FQDN", "endpoints": []}),
    );
    assert!(fqdn.expect("skipped, not an error").value.is_none());

    let errors = [
        (
            json!({"metadata": {"name": "x"}, "addressType": "IPv4", "endpoints": []}),
            "kubernetes.io/service-name] is missing",
        ),
        (
            json!({"metadata": {"name": "x", "labels": {"kubernetes.io/service-name": "x"}}, "addressType": "IPv6",
                   "endpoints": [{"addresses": ["10.0.0.1"]}]}),
            "endpoints[0].addresses[0]: 10.0.0.1 does not match addressType IPv6",
        ),
        (
            json!({"metadata": {"name": "x", "labels": {"kubernetes.io/service-name": "x"}}, "addressType": "IPv4",
                   "endpoints": [{"addresses": []}]}),
            "endpoints[0].addresses: must hold at least one address",
        ),
    ];
    for (v, want) in errors {
        let got = slice_of(v).map(|_| ()).expect_err("should fail");
        assert!(got.contains(want), "{got:?} should contain {want:?}");
    }
}
