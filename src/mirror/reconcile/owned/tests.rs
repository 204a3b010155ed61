use k8s_openapi::api::core::v1::ServiceSpec;

use super::*;

fn headless(ports: Option<Vec<ServicePort>>) -> Object {
    Object::Service(Box::new(Service {
        metadata: ObjectMeta {
            name: Some("web-east".into()),
            namespace: Some("prod".into()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            ports,
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }))
}

fn port(n: i32) -> ServicePort {
    ServicePort {
        port: n,
        name: Some(format!("p{n}")),
        ..ServicePort::default()
    }
}

#[test]
fn lists_we_set_are_compared_and_an_empty_one_is_held_by_none() {
    let cases = [
        ("no ports wanted, none read back", None, Some(vec![]), true),
        (
            "no ports wanted, an empty list read back",
            Some(vec![]),
            Some(vec![]),
            true,
        ),
        (
            "ports wanted, none read back",
            None,
            Some(vec![port(80)]),
            false,
        ),
        (
            "ports wanted, the same read back",
            Some(vec![port(80)]),
            Some(vec![port(80)]),
            true,
        ),
        (
            "ports wanted, another read back",
            Some(vec![port(81)]),
            Some(vec![port(80)]),
            false,
        ),
        (
            "ports wanted, one more read back",
            Some(vec![port(80), port(81)]),
            Some(vec![port(80)]),
            false,
        ),
        (
            "ports left unset, any read back",
            Some(vec![port(81)]),
            None,
            true,
        ),
    ];
    for (name, have, want, holds) in cases {
        assert_eq!(contains(&headless(have), &headless(want)), holds, "{name}");
    }
}
