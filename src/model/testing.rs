//! Builders shared by the unit tests of the model and of the answers.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, UNIX_EPOCH};

use super::cluster::{Event, Health};
use super::epoch::Epoch;
use super::index::Settings;
use super::objects::{
    Endpoint, ExportMode, Family, Gateway, Mirror, ObjectKey, Port, Protocol, Service, Slice,
};
use crate::vocab::name::ZoneName;

/// The instant every model test starts at. Tests name later times as
/// `t0() + Duration::..`: none waits for real time to pass.
pub(crate) fn t0() -> Instant {
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

/// Unix seconds at [`t0`] in test models, so their serials are known.
pub(crate) const T0_UNIX: u32 = 1_700_000_000;

/// The epoch of test models: [`t0`] is [`T0_UNIX`].
pub(crate) fn epoch() -> Epoch {
    Epoch::new(t0(), UNIX_EPOCH + Duration::from_secs(u64::from(T0_UNIX)))
}

pub(crate) fn port(name: Option<&str>, protocol: Protocol, port: u16) -> Port {
    Port {
        name: name.map(Arc::from),
        protocol,
        port,
    }
}

pub(crate) fn service(
    ns: &str,
    name: &str,
    export: Option<ExportMode>,
    federated: bool,
    headless: bool,
    ips: &[&str],
    ports: Vec<Port>,
) -> Service {
    Service {
        key: ObjectKey::new(ns, name),
        created: 1000,
        export,
        federated,
        headless,
        cluster_ips: ips.iter().map(|s| s.parse().expect("ip")).collect(),
        ports,
        publish_not_ready: false,
        opaque_ports: None,
        refused: false,
        mcs: None,
        locality: None,
        mcs_nearest: false,
        import_fields: Default::default(),
        exported_meta: None,
    }
}

pub(crate) fn slice(
    ns: &str,
    name: &str,
    svc: &str,
    ports: Vec<Port>,
    endpoints: &[(&str, Option<&str>, bool)],
) -> Slice {
    let endpoints: Vec<Endpoint> = endpoints
        .iter()
        .map(|(ip, host, ready)| Endpoint {
            addr: ip.parse().expect("ip"),
            hostname: host.map(Arc::from),
            ready: *ready,
        })
        .collect();
    let family = if endpoints.first().is_some_and(|e| e.addr.is_ipv6()) {
        Family::V6
    } else {
        Family::V4
    };
    Slice {
        key: ObjectKey::new(ns, name),
        service: svc.into(),
        family,
        ports: ports.into(),
        endpoints: endpoints.into(),
    }
}

pub(crate) fn c(name: &str) -> Arc<str> {
    name.into()
}

pub(crate) fn up(cluster: &str, local: bool) -> Vec<Event> {
    vec![
        Event::ClusterUp {
            cluster: c(cluster),
            local,
        },
        Event::Health {
            cluster: c(cluster),
            health: Health {
                synced: true,
                ..Health::default()
            },
        },
    ]
}

pub(crate) fn svc_event(cluster: &str, service: Service) -> Event {
    Event::ServiceApplied {
        cluster: c(cluster),
        service,
    }
}

pub(crate) fn slice_event(cluster: &str, slice: Slice) -> Event {
    Event::SliceApplied {
        cluster: c(cluster),
        slice,
        trigger: None,
    }
}

/// North's `db` EndpointSlice (of [`fixture_events`]) with `pods`
/// instead: (address, hostname, ready).
pub(crate) fn db_north(pods: &[(&str, Option<&str>, bool)]) -> Event {
    let pg = vec![port(Some("pg"), Protocol::Tcp, 5432)];
    slice_event("north", slice("prod", "db-north", "db", pg, pods))
}

/// A small clusterset: west (local), east, north.
pub(crate) fn fixture_events() -> Vec<Event> {
    use ExportMode::{Flat, Gateway as Gw};
    use Protocol::{Tcp, Udp};
    let http = || vec![port(Some("http"), Tcp, 80)];
    let mut ev = Vec::new();
    ev.extend(up("west", true));
    ev.extend(up("east", false));
    ev.extend(up("north", false));
    // web: gateway mode in east, mirrored in west.
    ev.push(svc_event(
        "east",
        service(
            "prod",
            "web",
            Some(Gw),
            false,
            false,
            &["10.100.10.1"],
            vec![port(Some("http"), Tcp, 80), port(None, Tcp, 8443)],
        ),
    ));
    ev.push(Event::MirrorApplied {
        cluster: c("west"),
        mirror: Mirror {
            key: ObjectKey::new("prod", "web-east"),
            cluster: c("east"),
            headless_parent: None,
            cluster_ips: vec!["10.96.10.1".parse().expect("ip")],
            ports: vec![port(Some("http"), Tcp, 80), port(None, Tcp, 8443)],
        },
    });
    // pay: gateway mode without a mirror: the gateway answers.
    ev.push(svc_event(
        "east",
        service(
            "prod",
            "pay",
            Some(Gw),
            false,
            false,
            &["10.100.10.3"],
            http(),
        ),
    ));
    ev.push(Event::GatewayApplied {
        cluster: c("east"),
        gateway: Some(Gateway {
            addresses: vec!["203.0.113.10".parse().expect("ip")],
            port: Some(4143),
            identity: None,
        }),
    });
    // api: flat, dual stack.
    let api_ports = || vec![port(Some("http"), Tcp, 8080), port(Some("dns"), Udp, 53)];
    ev.push(svc_event(
        "north",
        service(
            "prod",
            "api",
            Some(Flat),
            false,
            false,
            &["10.110.0.5"],
            api_ports(),
        ),
    ));
    ev.push(slice_event(
        "north",
        slice(
            "prod",
            "api-v4",
            "api",
            api_ports(),
            &[
                ("10.20.1.1", None, true),
                ("10.20.1.2", None, true),
                ("10.20.1.3", None, false),
            ],
        ),
    ));
    ev.push(slice_event(
        "north",
        slice(
            "prod",
            "api-v6",
            "api",
            api_ports(),
            &[("fd00:20::1", None, true)],
        ),
    ));
    // db: headless, flat, federated in east and north.
    let pg = || vec![port(Some("pg"), Tcp, 5432)];
    for (cluster, pods) in [
        (
            "east",
            vec![
                ("10.10.2.10", Some("db-0"), true),
                ("10.10.2.11", Some("db-1"), true),
            ],
        ),
        (
            "north",
            vec![
                ("10.20.2.10", Some("db-0"), true),
                ("10.20.2.11", Some("db-1"), true),
                ("10.20.2.12", Some("db-2"), false),
            ],
        ),
    ] {
        ev.push(svc_event(
            cluster,
            service("prod", "db", Some(Flat), true, true, &[], pg()),
        ));
        ev.push(slice_event(
            cluster,
            slice("prod", &format!("db-{cluster}"), "db", pg(), &pods),
        ));
    }
    // bb: federated ClusterIP service in all three, local one included.
    for (cluster, ip) in [
        ("west", "10.30.3.1"),
        ("east", "10.10.3.1"),
        ("north", "10.20.3.1"),
    ] {
        let ports = || vec![port(Some("http"), Tcp, 8080)];
        ev.push(svc_event(
            cluster,
            service(
                "prod",
                "bb",
                Some(Flat),
                true,
                false,
                &["10.1.1.1"],
                ports(),
            ),
        ));
        ev.push(slice_event(
            cluster,
            slice(
                "prod",
                &format!("bb-{cluster}"),
                "bb",
                ports(),
                &[(ip, None, true)],
            ),
        ));
    }
    // empty: headless with no ready endpoint.
    ev.push(svc_event(
        "east",
        service("prod", "empty", Some(Flat), false, true, &[], http()),
    ));
    ev.push(slice_event(
        "east",
        slice(
            "prod",
            "empty-1",
            "empty",
            http(),
            &[("10.10.5.1", Some("empty-0"), false)],
        ),
    ));
    // nohost: headless, no hostnames, dual stack.
    let p7000 = || vec![port(Some("p"), Tcp, 7000)];
    ev.push(svc_event(
        "north",
        service("prod", "nohost", Some(Flat), false, true, &[], p7000()),
    ));
    ev.push(slice_event(
        "north",
        slice(
            "prod",
            "nohost-4",
            "nohost",
            p7000(),
            &[("10.20.4.5", None, true)],
        ),
    ));
    ev.push(slice_event(
        "north",
        slice(
            "prod",
            "nohost-6",
            "nohost",
            p7000(),
            &[("fd00:20::5", None, true)],
        ),
    ));
    // cache: a local gateway-mode service answers its own ClusterIP.
    ev.push(svc_event(
        "west",
        service(
            "shop",
            "cache",
            Some(Gw),
            false,
            false,
            &["10.130.40.1"],
            vec![port(Some("redis"), Tcp, 6379)],
        ),
    ));
    ev
}

pub(crate) fn settings() -> Settings {
    let mut s = Settings::new(ZoneName::new("clusterset.local").expect("zone"));
    s.ns_addrs = vec!["10.96.0.53".parse().expect("ip")];
    s.reverse_zones = vec![ZoneName::new("10.in-addr.arpa").expect("zone")];
    s
}

/// Pods of each cluster in [`big_events`].
pub(crate) const BIG_PODS: usize = 1500;

/// Pod `i` of cluster number `c` in [`big_events`]: (address, hostname).
pub(crate) fn big_pod(c: usize, i: usize) -> (String, String) {
    (
        format!("10.{}.{}.{}", 40 + c, i / 256, i % 256),
        format!("db-{i}"),
    )
}

/// Answers too large for one message: `db`, a headless StatefulSet of
/// [`BIG_PODS`] pods (port `pg` 5432) exported as a federated member by
/// west (local), east and north, in namespace `big`. So
/// `db-east.big.svc.clusterset.local` has 1,500 SRV targets and
/// `db-federated.big.svc.clusterset.local` 4,500 addresses.
pub(crate) fn big_events() -> Vec<Event> {
    let pg = || vec![port(Some("pg"), Protocol::Tcp, 5432)];
    let mut ev = Vec::new();
    for (c, cluster) in ["west", "east", "north"].into_iter().enumerate() {
        ev.extend(up(cluster, c == 0));
        ev.push(svc_event(
            cluster,
            service("big", "db", Some(ExportMode::Flat), true, true, &[], pg()),
        ));
        let pods: Vec<(String, String)> = (0..BIG_PODS).map(|i| big_pod(c, i)).collect();
        // Sliced as the EndpointSlice controller does: 100 endpoints each.
        for (n, chunk) in pods.chunks(100).enumerate() {
            let endpoints: Vec<(&str, Option<&str>, bool)> = chunk
                .iter()
                .map(|(ip, host)| (ip.as_str(), Some(host.as_str()), true))
                .collect();
            ev.push(slice_event(
                cluster,
                slice("big", &format!("db-{n}"), "db", pg(), &endpoints),
            ));
        }
    }
    ev
}
