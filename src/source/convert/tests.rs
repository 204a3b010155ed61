use super::*;
use crate::model::objects::ExportMode;
use serde_json::json;

fn svc(v: serde_json::Value) -> K8sService {
    serde_json::from_value(v).expect("a Service")
}

fn kind(v: serde_json::Value, local: bool) -> Result<ServiceKind, String> {
    convert_service(
        &svc(v),
        local,
        &Selectors::linkerd_defaults(),
        &Trust::default(),
    )
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
        &Trust::default(),
    )
    .expect("converts");
    assert!(
        matches!(c.value, ServiceKind::Unexported(_)),
        "{:?}",
        c.value
    );
    assert!(
        c.warnings[0].text.contains("neither \"true\""),
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
    let c = convert_service(
        &svc(gw),
        false,
        &Selectors::linkerd_defaults(),
        &Trust::default(),
    )
    .expect("converts");
    assert_eq!(
        c.value,
        ServiceKind::Gateway(Gateway {
            addresses: vec!["203.0.113.10".parse().expect("ip")],
            port: Some(4143),
            identity: Some("gw.id".into()),
        })
    );
    assert!(c.warnings[0].text.contains("gw.example.com"));
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
    convert_slice(&s, &Trust::default()).map_err(|e| e.to_string())
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
    assert!(ok.warnings[0].text.contains("DB_3"));

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
            json!({"metadata": {"name": "x", "labels": {"kubernetes.io/service-name": "x"}}, "addressType": "IPv5",
                   "endpoints": [{"addresses": ["10.0.0.1"]}]}),
            "addressType: \"IPv5\" is not IPv4, IPv6 or FQDN",
        ),
    ];
    for (v, want) in errors {
        let got = slice_of(v).map(|_| ()).expect_err("should fail");
        assert!(got.contains(want), "{got:?} should contain {want:?}");
    }
}

// ---- Hostile objects from a linked cluster (issue 15, item 5) -------------

/// An object as a linked cluster delivers it.
enum Obj {
    /// A Service in a linked cluster.
    Service(serde_json::Value),
    /// A Service in the local cluster (mirrors count there).
    Local(serde_json::Value),
    /// An EndpointSlice.
    Slice(serde_json::Value),
}

/// What a user sees of a conversion.
#[derive(Debug, PartialEq)]
enum Want {
    /// Converted: the reasons it was clamped (or noted) under, sorted, and
    /// what remains of it.
    Converted(Vec<&'static str>, String),
    /// Not used at all, for this reason.
    Skipped(&'static str),
}

fn converted(reasons: &[&'static str], remains: &str) -> Want {
    Want::Converted(reasons.to_vec(), remains.to_owned())
}

/// What a slice holds: its endpoints (`host=addr`, `!` when not ready;
/// counted with the first and last when there are many) and its ports.
fn slice_summary(s: &Slice) -> String {
    let ep = |e: &Endpoint| {
        let host = e
            .hostname
            .as_deref()
            .map(|h| format!("{h}="))
            .unwrap_or_default();
        format!("{host}{}{}", e.addr, if e.ready { "" } else { "!" })
    };
    let eps = match &s.endpoints[..] {
        [first, .., last] if s.endpoints.len() > 6 => {
            format!(
                "{} endpoints {} .. {}",
                s.endpoints.len(),
                ep(first),
                ep(last)
            )
        }
        all => all.iter().map(ep).collect::<Vec<_>>().join(" "),
    };
    let ports: Vec<String> = s.ports.iter().map(ToString::to_string).collect();
    format!("{eps} | {}", ports.join(","))
}

/// `s`, or its length when it is too long to show in a failed assertion.
fn short(s: &str) -> String {
    if s.len() > 64 {
        format!("<{} bytes>", s.len())
    } else {
        s.to_owned()
    }
}

/// What a Service is to us, in one line.
fn service_summary(kind: &ServiceKind) -> String {
    let ports = |ports: &[Port]| {
        ports
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    match kind {
        ServiceKind::Exported(s) => format!(
            "{} {} | {} | opaque {}",
            s.key,
            s.cluster_ips
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            ports(&s.ports),
            s.opaque_ports.as_deref().map_or("-".to_owned(), short)
        ),
        ServiceKind::Mirror(m) => {
            format!(
                "mirror {} of {} | {}",
                m.key,
                short(&m.cluster),
                ports(&m.ports)
            )
        }
        ServiceKind::Gateway(g) => format!(
            "gateway {} port {} identity {}",
            g.addresses
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            g.port.map_or("-".to_owned(), |p| p.to_string()),
            g.identity.as_deref().map_or("-".to_owned(), short)
        ),
        ServiceKind::Unexported(s) => format!("unexported {}", s.key),
        ServiceKind::Ignored => "ignored".to_owned(),
        ServiceKind::ExternalName(key) => format!("external name {key}"),
    }
}

/// An exported flat Service `prod/db` with `extra` merged into it.
fn db(extra: serde_json::Value) -> serde_json::Value {
    let mut v = json!({
        "metadata": {"name": "db", "namespace": "prod",
                     "labels": {"mirror.linkerd.io/exported": "remote-discovery"}},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "pg", "port": 5432}]}
    });
    merge(&mut v, extra);
    v
}

/// An IPv4 EndpointSlice `prod/db-1` of `db` with `extra` merged into it.
fn db_slice(extra: serde_json::Value) -> serde_json::Value {
    let mut v = json!({
        "metadata": {"name": "db-1", "namespace": "prod",
                     "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4",
        "ports": [{"name": "pg", "port": 5432}],
        "endpoints": [{"addresses": ["10.0.0.1"]}]
    });
    merge(&mut v, extra);
    v
}

/// The gateway Service with `extra` merged into it.
fn gateway(extra: serde_json::Value) -> serde_json::Value {
    let mut v = json!({
        "metadata": {"name": "linkerd-gateway", "namespace": "linkerd-multicluster",
                     "annotations": {"mirror.linkerd.io/gateway-identity": "gw.id"}},
        "spec": {"ports": [{"name": "mc-gateway", "port": 4143}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
    });
    merge(&mut v, extra);
    v
}

/// JSON merge patch (RFC 7386), so each case shows only what is hostile.
fn merge(into: &mut serde_json::Value, patch: serde_json::Value) {
    match (into, patch) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                if v.is_null() {
                    a.remove(&k);
                } else {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn eps(addrs: &[&str]) -> serde_json::Value {
    addrs.iter().map(|a| json!({"addresses": [a]})).collect()
}

/// `n` endpoints 10.0.x.y, in order.
fn many_endpoints(n: usize) -> serde_json::Value {
    (0..n)
        .map(|i| json!({"addresses": [format!("10.0.{}.{}", i / 250, i % 250 + 1)]}))
        .collect()
}

fn mib() -> String {
    "x".repeat(1 << 20)
}

fn hostile_cases() -> Vec<(&'static str, Obj, Want)> {
    use Obj::{Local, Service, Slice};
    let long = "a".repeat(64);
    let pg = "pg/TCP/5432";
    vec![
        // -- EndpointSlices ------------------------------------------------
        (
            "10,000 endpoints: the first 1,000 are kept (Kubernetes allows 1,000)",
            Slice(db_slice(json!({"endpoints": many_endpoints(10_000)}))),
            converted(
                &["too_many_endpoints"],
                &format!("1000 endpoints 10.0.0.1 .. 10.0.3.250 | {pg}"),
            ),
        ),
        (
            "exactly 1,000 endpoints are all kept",
            Slice(db_slice(json!({"endpoints": many_endpoints(1000)}))),
            converted(
                &[],
                &format!("1000 endpoints 10.0.0.1 .. 10.0.3.250 | {pg}"),
            ),
        ),
        (
            "an address that is not an IP is left out, the rest kept",
            Slice(db_slice(
                json!({"endpoints": eps(&["10.0.0.1", "not-an-ip", "10.0.0.3"])}),
            )),
            converted(&["address_not_ip"], &format!("10.0.0.1 10.0.0.3 | {pg}")),
        ),
        (
            "three addresses that are not IPs: one reason, counted once for the object",
            Slice(db_slice(
                json!({"endpoints": eps(&["a", "10.0.0.2", "b", "c"])}),
            )),
            converted(&["address_not_ip"], &format!("10.0.0.2 | {pg}")),
        ),
        (
            "an IPv4 address in an IPv6 slice is left out",
            Slice(db_slice(
                json!({"addressType": "IPv6", "endpoints": eps(&["fd00::1", "10.0.0.2"])}),
            )),
            converted(&["address_wrong_family"], &format!("fd00::1 | {pg}")),
        ),
        (
            "an IPv6 address in an IPv4 slice is left out",
            Slice(db_slice(
                json!({"endpoints": eps(&["fd00::1", "10.0.0.2"])}),
            )),
            converted(&["address_wrong_family"], &format!("10.0.0.2 | {pg}")),
        ),
        (
            "the same address twice in one slice: the first is kept",
            Slice(db_slice(json!({"endpoints": [
                {"addresses": ["10.0.0.1"], "hostname": "db-0"},
                {"addresses": ["10.0.0.2"]},
                {"addresses": ["10.0.0.1"], "hostname": "db-9", "conditions": {"ready": false}}
            ]}))),
            converted(
                &["duplicate_address"],
                &format!("db-0=10.0.0.1 10.0.0.2 | {pg}"),
            ),
        ),
        (
            "an address another slice of the service holds is no matter for one slice (the answer dedups)",
            Slice(db_slice(
                json!({"metadata": {"name": "db-2"}, "endpoints": eps(&["10.0.0.1"])}),
            )),
            converted(&[], &format!("10.0.0.1 | {pg}")),
        ),
        (
            "a hostname that is not a DNS label: the dashed IP is used",
            Slice(db_slice(json!({"endpoints": [
                {"addresses": ["10.0.0.1"], "hostname": "db-0"},
                {"addresses": ["10.0.0.3"], "hostname": "DB_3"}
            ]}))),
            converted(
                &["hostname_not_a_label"],
                &format!("db-0=10.0.0.1 10.0.0.3 | {pg}"),
            ),
        ),
        (
            "a 1 MiB hostname: the dashed IP is used",
            Slice(db_slice(
                json!({"endpoints": [{"addresses": ["10.0.0.1"], "hostname": mib()}]}),
            )),
            converted(&["hostname_not_a_label"], &format!("10.0.0.1 | {pg}")),
        ),
        (
            "an endpoint without addresses is left out",
            Slice(db_slice(
                json!({"endpoints": [{"addresses": []}, {"addresses": ["10.0.0.2"]}]}),
            )),
            converted(&["endpoint_without_address"], &format!("10.0.0.2 | {pg}")),
        ),
        (
            "an endpoint with 150 addresses keeps the first 100 (Kubernetes allows 100)",
            Slice(db_slice(json!({"endpoints": [{"addresses":
                (1..=150).map(|i| format!("10.0.{}.{}", i / 250, i % 250)).collect::<Vec<_>>()}]}))),
            converted(
                &["too_many_addresses"],
                &format!("100 endpoints 10.0.0.1 .. 10.0.0.100 | {pg}"),
            ),
        ),
        (
            "port 0 on a slice is left out, the other port kept",
            Slice(db_slice(
                json!({"ports": [{"name": "zero", "port": 0}, {"name": "pg", "port": 5432}]}),
            )),
            converted(&["port_out_of_range"], &format!("10.0.0.1 | {pg}")),
        ),
        (
            "port 65536 on a slice is left out",
            Slice(db_slice(
                json!({"ports": [{"name": "pg", "port": 5432}, {"name": "big", "port": 65536}]}),
            )),
            converted(&["port_out_of_range"], &format!("10.0.0.1 | {pg}")),
        ),
        (
            "a negative port on a slice is left out",
            Slice(db_slice(
                json!({"ports": [{"name": "neg", "port": -1}, {"name": "pg", "port": 5432}]}),
            )),
            converted(&["port_out_of_range"], &format!("10.0.0.1 | {pg}")),
        ),
        (
            "a slice port name that is not a label is left out",
            Slice(db_slice(
                json!({"ports": [{"name": "PG_x", "port": 1}, {"name": "pg", "port": 5432}]}),
            )),
            converted(&["port_name_invalid"], &format!("10.0.0.1 | {pg}")),
        ),
        (
            "everything at once: each reason once, what is good kept",
            Slice(db_slice(json!({
            "ports": [{"name": "pg", "port": 5432}, {"port": 0}, {"port": 70000}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "hostname": "Bad_Host"},
                {"addresses": ["10.0.0.1"]},
                {"addresses": ["nope"]},
                {"addresses": ["fd00::1"]},
                {"addresses": ["10.0.0.2"], "hostname": "db-2"}
            ]}))),
            converted(
                &[
                    "address_not_ip",
                    "address_wrong_family",
                    "duplicate_address",
                    "hostname_not_a_label",
                    "port_out_of_range",
                ],
                &format!("10.0.0.1 db-2=10.0.0.2 | {pg}"),
            ),
        ),
        (
            "a kubernetes.io/service-name label over 63 characters: the slice is skipped",
            Slice(db_slice(
                json!({"metadata": {"labels": {"kubernetes.io/service-name": long}}}),
            )),
            Want::Skipped("label_value_too_long"),
        ),
        (
            "a kubernetes.io/service-name label that is not a name: the slice is skipped",
            Slice(db_slice(
                json!({"metadata": {"labels": {"kubernetes.io/service-name": "DB"}}}),
            )),
            Want::Skipped("service_name_not_a_label"),
        ),
        (
            "no kubernetes.io/service-name label: the slice is skipped",
            Slice(db_slice(json!({"metadata": {"labels": null}}))),
            Want::Skipped("service_name_missing"),
        ),
        (
            "other label values over 63 characters are not read",
            Slice(db_slice(
                json!({"metadata": {"labels": {"hostile": mib()}}}),
            )),
            converted(&[], &format!("10.0.0.1 | {pg}")),
        ),
        (
            "a 1 MiB annotation on a slice is never read",
            Slice(db_slice(
                json!({"metadata": {"annotations": {"config.linkerd.io/opaque-ports": mib(), "x": mib()}}}),
            )),
            converted(&[], &format!("10.0.0.1 | {pg}")),
        ),
        (
            "a slice name over 253 characters: skipped",
            Slice(db_slice(json!({"metadata": {"name": "a".repeat(254)}}))),
            Want::Skipped("name_too_long"),
        ),
        (
            "a slice without a name: skipped",
            Slice(db_slice(json!({"metadata": {"name": null}}))),
            Want::Skipped("name_missing"),
        ),
        (
            "a namespace that is not a label: skipped",
            Slice(db_slice(json!({"metadata": {"namespace": long}}))),
            Want::Skipped("namespace_not_a_label"),
        ),
        (
            "an addressType that does not exist: skipped",
            Slice(db_slice(json!({"addressType": "IPv5"}))),
            Want::Skipped("address_type_unknown"),
        ),
        (
            "an FQDN slice is not served",
            Slice(db_slice(
                json!({"addressType": "FQDN", "endpoints": eps(&["db.example.com"])}),
            )),
            Want::Skipped("address_type_fqdn"),
        ),
        // -- Services ------------------------------------------------------
        (
            "a well-formed Service",
            Service(db(json!({}))),
            converted(&[], "prod/db 10.96.0.10 | pg/TCP/5432 | opaque -"),
        ),
        (
            "Service port 0 is left out, the others kept",
            Service(db(
                json!({"spec": {"ports": [{"name": "pg", "port": 5432}, {"name": "zero", "port": 0}]}}),
            )),
            converted(
                &["port_out_of_range"],
                "prod/db 10.96.0.10 | pg/TCP/5432 | opaque -",
            ),
        ),
        (
            "Service port 65536 is left out",
            Service(db(
                json!({"spec": {"ports": [{"name": "big", "port": 65536}, {"name": "pg", "port": 5432}]}}),
            )),
            converted(
                &["port_out_of_range"],
                "prod/db 10.96.0.10 | pg/TCP/5432 | opaque -",
            ),
        ),
        (
            "a negative Service port is left out",
            Service(db(
                json!({"spec": {"ports": [{"name": "neg", "port": -80}, {"name": "pg", "port": 5432}]}}),
            )),
            converted(
                &["port_out_of_range"],
                "prod/db 10.96.0.10 | pg/TCP/5432 | opaque -",
            ),
        ),
        (
            "a Service port with an unknown protocol is left out",
            Service(db(
                json!({"spec": {"ports": [{"name": "q", "port": 443, "protocol": "QUIC"}, {"name": "pg", "port": 5432}]}}),
            )),
            converted(
                &["port_protocol_unknown"],
                "prod/db 10.96.0.10 | pg/TCP/5432 | opaque -",
            ),
        ),
        (
            "a Service port name that is not a label is left out",
            Service(db(
                json!({"spec": {"ports": [{"name": "pg", "port": 5432}, {"name": long, "port": 1}]}}),
            )),
            converted(
                &["port_name_invalid"],
                "prod/db 10.96.0.10 | pg/TCP/5432 | opaque -",
            ),
        ),
        (
            "a Service name over 63 characters is not a label: skipped",
            Service(db(json!({"metadata": {"name": long}}))),
            Want::Skipped("name_too_long"),
        ),
        (
            "a Service name that is not a label: skipped",
            Service(db(json!({"metadata": {"name": "Web"}}))),
            Want::Skipped("name_not_a_label"),
        ),
        (
            "a Service without a name: skipped",
            Service(db(json!({"metadata": {"name": null}}))),
            Want::Skipped("name_missing"),
        ),
        (
            "a clusterIP that is not an IP: skipped",
            Service(db(json!({"spec": {"clusterIP": "10.0.0.999"}}))),
            Want::Skipped("cluster_ip_not_ip"),
        ),
        (
            "a 1 MiB annotation on a Service is never copied",
            Service(db(json!({"metadata": {"annotations": {"hostile": mib()}}}))),
            converted(&[], "prod/db 10.96.0.10 | pg/TCP/5432 | opaque -"),
        ),
        (
            "a 1 MiB label value on a Service is never read",
            Service(db(json!({"metadata": {"labels": {"hostile": mib()}}}))),
            converted(&[], "prod/db 10.96.0.10 | pg/TCP/5432 | opaque -"),
        ),
        (
            "config.linkerd.io/opaque-ports of a sane size is kept",
            Service(db(
                json!({"metadata": {"annotations": {"config.linkerd.io/opaque-ports": "5432"}}}),
            )),
            converted(&[], "prod/db 10.96.0.10 | pg/TCP/5432 | opaque 5432"),
        ),
        (
            "a 1 MiB config.linkerd.io/opaque-ports is dropped",
            Service(db(
                json!({"metadata": {"annotations": {"config.linkerd.io/opaque-ports": mib()}}}),
            )),
            converted(
                &["annotation_too_large"],
                "prod/db 10.96.0.10 | pg/TCP/5432 | opaque -",
            ),
        ),
        (
            "an ExternalName Service is not served",
            Service(db(
                json!({"spec": {"type": "ExternalName", "externalName": "db.example.com", "clusterIP": null}}),
            )),
            Want::Skipped("external_name"),
        ),
        (
            "an unknown export label value is not guessed",
            Service(db(
                json!({"metadata": {"labels": {"mirror.linkerd.io/exported": "yes"}}}),
            )),
            Want::Skipped("export_label_unknown"),
        ),
        (
            "an unknown export label on a federated member: served as a member",
            Service(db(
                json!({"metadata": {"labels": {"mirror.linkerd.io/exported": "yes", "mirror.linkerd.io/federated": "member"}}}),
            )),
            converted(
                &["export_label_unknown"],
                "prod/db 10.96.0.10 | pg/TCP/5432 | opaque -",
            ),
        ),
        (
            "an unknown federated label value is not guessed",
            Service(db(
                json!({"metadata": {"labels": {"mirror.linkerd.io/exported": null, "mirror.linkerd.io/federated": "yes"}}}),
            )),
            Want::Skipped("federated_label_unknown"),
        ),
        // -- The gateway and local mirrors -----------------------------------
        (
            "a gateway ingress that is not an IP is left out",
            Service(gateway(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "bogus"}, {"ip": "203.0.113.11"}]}}}),
            )),
            converted(
                &["address_not_ip"],
                "gateway 203.0.113.11 port 4143 identity gw.id",
            ),
        ),
        (
            "a gateway ingress by hostname is left out",
            Service(gateway(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}, {"hostname": "gw.example.com"}]}}}),
            )),
            converted(
                &["gateway_hostname"],
                "gateway 203.0.113.10 port 4143 identity gw.id",
            ),
        ),
        (
            "a gateway without an mc-gateway port",
            Service(gateway(
                json!({"spec": {"ports": [{"name": "mc-gateway", "port": 0}]}}),
            )),
            converted(
                &["gateway_port_missing", "port_out_of_range"],
                "gateway 203.0.113.10 port - identity gw.id",
            ),
        ),
        (
            "a 1 MiB gateway identity is dropped",
            Service(gateway(
                json!({"metadata": {"annotations": {"mirror.linkerd.io/gateway-identity": mib()}}}),
            )),
            converted(
                &["annotation_too_large"],
                "gateway 203.0.113.10 port 4143 identity -",
            ),
        ),
        (
            "a local mirror whose cluster-name label is over 63 characters: skipped",
            Local(json!({
                "metadata": {"name": "db-east", "namespace": "prod", "labels": {
                    "mirror.linkerd.io/mirrored-service": "true", "mirror.linkerd.io/cluster-name": long}},
                "spec": {"clusterIP": "10.96.1.1", "ports": [{"port": 5432}]}
            })),
            Want::Skipped("label_value_too_long"),
        ),
    ]
}

/// What a user sees of `obj` converted, and the texts that would be
/// logged and listed as problems.
fn outcome(obj: &Obj) -> (Want, Vec<String>) {
    let (result, summary) = match obj {
        Obj::Service(v) | Obj::Local(v) => {
            let local = matches!(obj, Obj::Local(_));
            match convert_service(
                &svc(v.clone()),
                local,
                &Selectors::linkerd_defaults(),
                &Trust::default(),
            ) {
                Ok(c) => {
                    let summary = service_summary(&c.value);
                    (Ok((c.adjustment(), c.warnings)), summary)
                }
                Err(e) => (Err(e), String::new()),
            }
        }
        Obj::Slice(v) => {
            let s: K8sSlice = serde_json::from_value(v.clone()).expect("an EndpointSlice");
            match convert_slice(&s, &Trust::default()) {
                Ok(c) => {
                    let summary = c.value.as_ref().map(slice_summary).unwrap_or_default();
                    (Ok((c.adjustment(), c.warnings)), summary)
                }
                Err(e) => (Err(e), String::new()),
            }
        }
    };
    match result {
        Err(e) => (Want::Skipped(e.reason().label()), vec![e.to_string()]),
        Ok((adjustment, warnings)) => {
            let mut reasons: Vec<&str> = warnings.iter().map(|w| w.reason.label()).collect();
            reasons.sort_unstable();
            let texts = warnings.iter().map(ToString::to_string).collect();
            let want = match (adjustment, reasons.as_slice()) {
                (Adjustment::Skipped, [one]) => Want::Skipped(one),
                _ => Want::Converted(reasons, summary),
            };
            (want, texts)
        }
    }
}

#[test]
fn hostile_objects_are_skipped_or_clamped_with_a_reason() {
    for (name, obj, want) in hostile_cases() {
        let (got, texts) = outcome(&obj);
        assert_eq!(got, want, "{name}");
        let reasons = match &got {
            Want::Converted(reasons, _) => reasons.len(),
            Want::Skipped(_) => 1,
        };
        assert_eq!(
            texts.len(),
            reasons,
            "{name}: one text per reason: {texts:?}"
        );
        for t in &texts {
            assert!(
                t.len() < 300,
                "{name}: a text quotes its input whole ({} bytes): {}",
                t.len(),
                &t[..200]
            );
        }
    }
}

#[test]
fn texts_name_the_field_the_value_and_what_was_done() {
    let cases = [
        (
            Obj::Slice(db_slice(
                json!({"endpoints": eps(&["10.0.0.1", "bad", "worse"])}),
            )),
            "endpoints[1].addresses[0]: \"bad\" is not an IP address; left out (and 1 more like it)",
        ),
        (
            Obj::Slice(db_slice(json!({"endpoints": many_endpoints(1001)}))),
            "endpoints: 1001 endpoints, more than the 1000 Kubernetes allows in one slice; the first 1000 are kept",
        ),
        (
            Obj::Slice(db_slice(
                json!({"endpoints": eps(&["10.0.0.1", "10.0.0.1"])}),
            )),
            "endpoints[1]: 10.0.0.1 is already in this slice; the first is kept",
        ),
        (
            Obj::Service(db(
                json!({"spec": {"ports": [{"name": "pg", "port": 5432}, {"port": -1}]}}),
            )),
            "spec.ports[1].port: -1 is not a port number (1-65535); the port is left out",
        ),
        (
            Obj::Service(db(json!({"metadata": {"name": "a".repeat(70)}}))),
            "metadata.name: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"... (70 bytes) is 70 characters; a Service name is an RFC 1123 label of at most 63",
        ),
        (
            Obj::Service(db(
                json!({"metadata": {"annotations": {"config.linkerd.io/opaque-ports": mib()}}}),
            )),
            "metadata.annotations[config.linkerd.io/opaque-ports] is 1048576 bytes, more than 1024; it is dropped",
        ),
    ];
    for (obj, want) in cases {
        let (_, texts) = outcome(&obj);
        assert_eq!(texts, [want]);
    }
}

#[test]
fn reason_labels_are_fixed_distinct_snake_case() {
    let labels: std::collections::BTreeSet<&str> = Reason::ALL.iter().map(|r| r.label()).collect();
    assert_eq!(labels.len(), Reason::ALL.len(), "distinct");
    for l in labels {
        assert!(
            !l.is_empty() && l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{l}"
        );
    }
    assert_eq!(Adjustment::Skipped.label(), "skipped");
    assert_eq!(Adjustment::Clamped.label(), "clamped");
}

#[test]
fn trigger_times_are_rfc3339_with_an_offset() {
    use std::time::{Duration, UNIX_EPOCH};
    let at = |secs: u64, nanos: u32| UNIX_EPOCH + Duration::new(secs, nanos);
    // 2026-01-02T03:04:05Z
    let base = 1_767_323_045;
    let ok = [
        ("2026-01-02T03:04:05Z", at(base, 0)),
        // Go's RFC3339Nano, as the EndpointSlice controller writes it.
        ("2026-01-02T03:04:05.123456789Z", at(base, 123_456_789)),
        ("2026-01-02T03:04:05.5Z", at(base, 500_000_000)),
        ("2026-01-02T05:04:05+02:00", at(base, 0)),
        ("2026-01-01T22:04:05.25-05:00", at(base, 250_000_000)),
        // Far in the future is a time; the metric clamps it, not the parse.
        ("3000-01-01T00:00:00Z", at(32_503_680_000, 0)),
    ];
    for (text, want) in ok {
        assert_eq!(parse_trigger_time(text), Ok(want), "{text}");
    }
    let bad = [
        "",
        "garbage",
        "2026-01-02",
        // No offset: no instant.
        "2026-01-02T03:04:05",
        "2026-13-02T03:04:05Z",
        "1767323045",
        // Past the parser's range (its last instant is a day earlier).
        "9999-12-31T23:59:59Z",
    ];
    for text in bad {
        assert!(
            matches!(
                parse_trigger_time(text),
                Err(TriggerTimeError::NotRfc3339 { .. })
            ),
            "{text}: {:?}",
            parse_trigger_time(text)
        );
    }
    let long = format!("2026-01-02T03:04:05.{}Z", "1".repeat(100));
    assert_eq!(
        parse_trigger_time(&long),
        Err(TriggerTimeError::TooLong(long.len()))
    );
}

#[test]
fn a_slice_without_a_usable_trigger_time_has_none() {
    let with = |annotations: serde_json::Value| {
        let s: K8sSlice = serde_json::from_value(json!({
            "metadata": {"name": "db-1", "namespace": "prod", "annotations": annotations,
                         "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4",
            "endpoints": []
        }))
        .expect("an EndpointSlice");
        slice_trigger_time(&s)
    };
    let key = "endpoints.kubernetes.io/last-change-trigger-time";
    assert!(with(json!({key: "2026-01-02T03:04:05Z"})).is_some());
    assert_eq!(with(json!({})), None);
    assert_eq!(with(json!({"other": "2026-01-02T03:04:05Z"})), None);
    assert_eq!(with(json!({key: "yesterday"})), None);
}

mod trust;
