use super::*;
use crate::model::objects::{Mirror, Protocol};
use crate::model::testing::{
    c, epoch, port, service, settings, slice, slice_event, svc_event, t0, up,
};
use crate::model::{Event, Model};

fn snapshot(events: Vec<Event>) -> Arc<crate::model::Snapshot> {
    let mut m = Model::new(Arc::new(settings()), epoch());
    m.clusters_known(t0());
    m.apply(events, t0());
    m.snapshot()
}

fn pods(e: &Entry) -> Vec<String> {
    e.pods()
        .into_iter()
        .map(|(part, p)| {
            format!(
                "{}={} ports {:?}",
                p.hostname,
                p.addr,
                part.ports.iter().map(|p| p.port).collect::<Vec<_>>()
            )
        })
        .collect()
}

#[test]
fn headless_gateway_mode_uses_linkerd_endpoint_mirrors() {
    let pg = || vec![port(Some("pg"), Protocol::Tcp, 5432)];
    let mut ev = up("west", true);
    ev.extend(up("east", false));
    ev.push(svc_event(
        "east",
        service(
            "prod",
            "db",
            Some(ExportMode::Gateway),
            false,
            true,
            &[],
            pg(),
        ),
    ));
    ev.push(slice_event(
        "east",
        slice(
            "prod",
            "db-1",
            "db",
            pg(),
            &[
                ("10.10.2.10", Some("db-0"), true),
                ("10.10.2.11", Some("db-1"), true),
            ],
        ),
    ));
    // Linkerd wrote an endpoint mirror for db-0 only.
    ev.push(Event::MirrorApplied {
        cluster: c("west"),
        mirror: Mirror {
            key: ObjectKey::new("prod", "db-0-east"),
            cluster: c("east"),
            headless_parent: Some("db-east".into()),
            cluster_ips: vec!["10.96.7.7".parse().expect("ip")],
            ports: vec![port(Some("pg"), Protocol::Tcp, 15432)],
        },
    });
    let snap = snapshot(ev);
    let e = snap.entries.get("db-east.prod").expect("entry");
    // db-0 goes through its mirror ClusterIP and Service port; db-1 has no
    // mirror and keeps its pod IP and target port.
    assert_eq!(
        pods(e),
        [
            "db-0=10.96.7.7 ports [15432]",
            "db-1=10.10.2.11 ports [5432]"
        ]
    );
    // Only the pod IP gets a PTR; the mirror IP is the local CoreDNS's.
    assert!(
        !snap
            .reverse
            .contains_key(&"10.96.7.7".parse::<IpAddr>().expect("ip"))
    );
}

#[test]
fn publish_not_ready_serves_not_ready_endpoints() {
    let http = || vec![port(Some("http"), Protocol::Tcp, 80)];
    let mut svc = service(
        "prod",
        "warm",
        Some(ExportMode::Flat),
        false,
        true,
        &[],
        http(),
    );
    svc.publish_not_ready = true;
    let mut ev = up("east", false);
    ev.push(svc_event("east", svc));
    ev.push(slice_event(
        "east",
        slice(
            "prod",
            "warm-1",
            "warm",
            http(),
            &[("10.1.1.1", Some("warm-0"), false)],
        ),
    ));
    let snap = snapshot(ev);
    assert_eq!(
        snap.entries.get("warm-east.prod").map(|e| e.v4().len()),
        Some(1)
    );
}

#[test]
fn pod_names_over_253_are_left_out_but_addresses_stay() {
    // host(63) . cluster(50) . <svc>-federated(63) . ns(63) .svc.clusterset.local = 263.
    let http = || vec![port(Some("http"), Protocol::Tcp, 80)];
    let ns = "n".repeat(63);
    let svc_name = "s".repeat(53);
    let cluster = "c".repeat(50);
    let host = "h".repeat(63);
    let mut ev = up(&cluster, false);
    ev.push(svc_event(
        &cluster,
        service(
            &ns,
            &svc_name,
            Some(ExportMode::Flat),
            true,
            true,
            &[],
            http(),
        ),
    ));
    ev.push(slice_event(
        &cluster,
        slice(
            &ns,
            "x-1",
            &svc_name,
            http(),
            &[
                ("10.1.1.1", Some(&host), true),
                ("10.1.1.2", Some("short"), true),
            ],
        ),
    ));
    let snap = snapshot(ev);
    let e = snap
        .entries
        .get(format!("{svc_name}-federated.{ns}").as_str())
        .expect("entry");
    assert_eq!(e.v4().len(), 2, "both addresses answer the service name");
    assert_eq!(pods(e), ["short=10.1.1.2 ports [80]"]);
    // One pod name under each of `-federated` and `-nearest`, and the
    // per-cluster label (53 + 1 + 50 = 104 octets).
    assert_eq!(snap.stats.too_long, 3);
    assert!(
        !snap
            .entries
            .contains_key(format!("{svc_name}-{cluster}.{ns}").as_str())
    );
}

#[test]
fn federated_members_and_aliases() {
    let pg = || vec![port(Some("pg"), Protocol::Tcp, 5432)];
    let mut ev = Vec::new();
    for (cl, ip) in [("east", "10.10.2.10"), ("north", "10.20.2.10")] {
        ev.extend(up(cl, false));
        ev.push(svc_event(
            cl,
            service("prod", "db", None, true, true, &[], pg()),
        ));
        ev.push(slice_event(
            cl,
            slice("prod", "db-1", "db", pg(), &[(ip, Some("db-0"), true)]),
        ));
    }
    let snap = snapshot(ev);
    let e = snap
        .entries
        .get("db-federated.prod")
        .expect("federated entry");
    assert_eq!(e.members().collect::<Vec<_>>(), ["east", "north"]);
    assert!(e.has_member("north") && !e.has_member("south"));
    assert_eq!(e.pods_named(Some("north"), "db-0").len(), 1);
    assert_eq!(e.name_count(), 3);
    // Federated-only members (no export label) get no per-cluster name.
    assert!(!snap.entries.contains_key("db-east.prod"));
}

#[test]
fn an_address_in_two_slices_of_a_service_is_answered_once() {
    // Kubernetes shows an endpoint in two slices while it moves between
    // them; a hostile cluster may do it on purpose. Neither doubles a record.
    let http = || vec![port(Some("http"), Protocol::Tcp, 80)];
    let mut ev = up("east", false);
    for (name, headless) in [("flat", false), ("db", true)] {
        ev.push(svc_event(
            "east",
            service(
                "prod",
                name,
                Some(ExportMode::Flat),
                false,
                headless,
                &[],
                http(),
            ),
        ));
        for (slice_name, addrs) in [
            (
                "1",
                &[("10.1.0.1", Some("db-0"), true), ("10.1.0.2", None, true)][..],
            ),
            ("2", &[("10.1.0.1", Some("db-0"), true)][..]),
        ] {
            ev.push(slice_event(
                "east",
                slice("prod", &format!("{name}-{slice_name}"), name, http(), addrs),
            ));
        }
    }
    let snap = snapshot(ev);
    let flat = snap.entries.get("flat-east.prod").expect("flat");
    assert_eq!(flat.v4().len(), 2, "{:?}", flat.v4());
    let db = snap.entries.get("db-east.prod").expect("db");
    assert_eq!(db.v4().len(), 2, "{:?}", db.v4());
    assert_eq!(
        pods(db),
        ["10-1-0-2=10.1.0.2 ports [80]", "db-0=10.1.0.1 ports [80]"]
    );
}
