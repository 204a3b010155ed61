//! A hostile linked cluster in live mode (docs/architecture.md, decision 13), over
//! kubesim: the local cluster `local` links a good cluster `east` and a
//! hostile one `evil` through Links and Secrets, and the server runs with
//! `--mcs` and the mirror controller, so both the DNS answers and the
//! objects the mirror writes into `local` are checked.
//!
//! `evil` tries, each answered by one assertion:
//! - pod addresses of every class no cluster may publish (metadata,
//!   loopback, unspecified, multicast, broadcast, link-local, IPv4-mapped
//!   loopback), one outside its Link's `allowed-addresses` and one in the
//!   operator's `--deny-addresses`, beside an ordinary address, in the A
//!   and AAAA slices of `web`, flat and federated: the names answer only
//!   the ordinary addresses, the mirror's local EndpointSlices hold none of
//!   the others, and each class is counted;
//! - a Link whose `gatewayAddress` is the metadata address and `localhost`
//!   beside a public one: `/debug/clusters` shows only the public one as
//!   evil's gateway, and the EndpointSlices of the gateway-mode mirror
//!   `front-evil` (whose ClusterIP `front-evil` answers) point only there;
//! - a Service exported from `kube-system` (Linkerd label and
//!   ServiceExport): its names do not exist;
//! - objects older than east's, to take `api-evil` (its Linkerd name for
//!   `api`, east's MCS name for `api-evil`), to put its port in the MCS
//!   service `db` and in the federated mirror `web-federated`: east, linked
//!   first, keeps all three, and every east answer is what it was before
//!   `evil` was linked;
//! - a third Link, `exec`, whose Secret's kubeconfig runs a program: it is
//!   never run, and the cluster is reported without credentials.
//!
//! Kubesim, like kube-apiserver, sets `creationTimestamp` itself on create
//! (and keeps it on update): the 1970 date `evil` sends is not stored. So
//! evil's objects are made a second before east's instead; a server that
//! compared remote timestamps across clusters would let `evil` win exactly
//! as with 1970. The hostile slices go straight into evil's store, past
//! kubesim's validation, as a compromised API server would serve them.
//!
//! Every wait is a bounded poll; only loopback is dialled (the gateways are
//! never probed: the Links have no probe spec).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;

use clusterset_dns::vocab::trust::{TrustSettings, parse_cidrs};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use kubesim::resources::{ENDPOINTSLICES, SERVICEEXPORTS, SERVICES};
use serde_json::{Value, json};

use crate::conformance::{http_get, metric};
use crate::hostile::answer_data as records;
use crate::kubesim_api::{client, sim};
use crate::live::{NS, SECOND, export, fqdn, link_doc, secret_doc, until};
use crate::mirror::{endpoints_of, get, items, svc_path};
use crate::support::{Links, Live, MirrorSetup, Options, create_object, eventually, start_live};

const MCS: &str = "multicluster.x-k8s.io/v1beta1";
const LINKS: &str = "linkerd-multicluster";

/// What evil lists as pod addresses and no answer or mirror may carry.
const HOSTILE_V4: [&str; 6] = [
    "169.254.169.254",
    "127.0.0.1",
    "0.0.0.0",
    "224.0.0.1",
    "255.255.255.255",
    "100.100.100.200",
];
const HOSTILE_V6: [&str; 4] = ["::1", "fe80::1", "fd00:ec2::254", "::ffff:127.0.0.1"];
/// Outside evil's `clusterset-dns.io/allowed-addresses`.
const NOT_ALLOWED: &str = "10.77.0.1";
/// In the operator's `--deny-addresses`.
const DENIED: &str = "10.250.0.1";
/// Evil's Link annotation: what evil may claim at all. Its pods, its
/// Service CIDR (kubesim allocates ClusterIPs from 10.96.0.0/12 in every
/// cluster) and its gateway; 10.250.0.0/16 too, to show that the operator's
/// `--deny-addresses` wins over a claim.
const EVIL_ALLOWED: &str = "10.9.0.0/16, 10.96.0.0/12, 10.250.0.0/16, fd00:9::/64, 203.0.113.77/32";

fn sorted(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

/// A Service in `namespace` with one TCP port `port_name`/`port`, these
/// labels, and (if given) the `creationTimestamp` a hostile server would
/// date it with.
fn service(namespace: &str, name: &str, port: (&str, u16), labels: Value, dated: bool) -> Value {
    let mut meta = json!({"name": name, "namespace": namespace, "labels": labels});
    if dated {
        meta["creationTimestamp"] = json!("1970-01-01T00:00:00Z");
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": meta,
           "spec": {"ports": [{"name": port.0, "port": port.1, "protocol": "TCP"}]}})
}

/// EndpointSlice `name` of `service` in `namespace`: one ready endpoint per
/// address, port `port_name`/`port`.
fn slice(
    namespace: &str,
    service: &str,
    name: &str,
    family: &str,
    port: (&str, u16),
    addrs: &[&str],
) -> Value {
    let endpoints: Vec<Value> = addrs
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": name, "namespace": namespace,
                        "labels": {"kubernetes.io/service-name": service}},
           "addressType": family,
           "ports": [{"name": port.0, "port": port.1, "protocol": "TCP"}],
           "endpoints": endpoints})
}

fn service_export(namespace: &str, name: &str, dated: bool) -> Value {
    let mut meta = json!({"name": name, "namespace": namespace});
    if dated {
        meta["creationTimestamp"] = json!("1970-01-01T00:00:00Z");
    }
    json!({"apiVersion": MCS, "kind": "ServiceExport", "metadata": meta})
}

/// Secret `cluster-credentials-<cluster>` holding `kubeconfig`, then its
/// Link, with a declared gateway and the gateway-mode selector when
/// `gateway` is given, and these annotations.
async fn link(
    lc: &kube::Client,
    cluster: &str,
    kubeconfig: &str,
    gateway: Option<&str>,
    annotations: Value,
) {
    create_object(
        lc,
        secret_doc(&format!("cluster-credentials-{cluster}"), kubeconfig),
    )
    .await;
    let mut doc = link_doc(cluster);
    doc["metadata"]["annotations"] = annotations;
    if let Some(gw) = gateway {
        doc["spec"]["gatewayAddress"] = json!(gw);
        doc["spec"]["gatewayPort"] = json!("4143");
        doc["spec"]["gatewayIdentity"] = json!(format!("gateway.{cluster}.example"));
        doc["spec"]["selector"] = json!({"matchLabels": {"mirror.linkerd.io/exported": "true"}});
    }
    create_object(lc, doc).await;
}

fn kubeconfig_text(c: &kubesim::Cluster) -> String {
    std::fs::read_to_string(c.kubeconfig_path()).expect("kubeconfig")
}

/// East's kubeconfig with its user replaced by an exec credential plugin
/// that would leave `marker` behind if it ever ran.
fn exec_kubeconfig(east: &kubesim::Cluster, marker: &Path) -> String {
    let mut kc: Value = serde_saphyr::from_str(&kubeconfig_text(east)).expect("kubeconfig YAML");
    let script = format!(
        "touch {}; echo '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"x\"}}}}'",
        marker.display()
    );
    kc["users"][0]["user"] = json!({"exec": {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "/bin/sh",
        "args": ["-c", script],
        "interactiveMode": "Never"
    }});
    // JSON is YAML: kube reads it as it reads any kubeconfig.
    serde_json::to_string_pretty(&kc).expect("json")
}

/// `cluster`'s entry of `/debug/clusters`, if listed.
async fn report(admin: SocketAddr, cluster: &str) -> Option<Value> {
    let body = http_get(admin, "/debug/clusters").await;
    let v: Value = serde_json::from_str(&body).ok()?;
    v["clusters"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == cluster)
        .cloned()
}

/// The ClusterIP of local Service `name`, once it has one.
async fn cluster_ip(lc: &kube::Client, name: &str) -> Option<String> {
    let svc = get(lc, &svc_path(name)).await?;
    svc["spec"]["clusterIP"]
        .as_str()
        .filter(|ip| *ip != "None")
        .map(str::to_owned)
}

/// The local ServiceImport `name` (the mirror writes it with `--mcs`).
async fn import(lc: &kube::Client, name: &str) -> Option<Value> {
    get(
        lc,
        &format!("/apis/{MCS}/namespaces/{NS}/serviceimports/{name}"),
    )
    .await
}

/// Every address of every endpoint (ready or not) of every EndpointSlice
/// the mirror wrote into the local cluster.
async fn all_mirrored_addresses(lc: &kube::Client) -> BTreeSet<String> {
    items(
        lc,
        "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=app.kubernetes.io/managed-by%3Dclusterset-dns",
    )
    .await
    .iter()
    .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
    .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
    .filter_map(|a| a.as_str().map(str::to_owned))
    .collect()
}

/// The names whose answers come from the local objects the mirror writes
/// (a gateway-mode name answers its mirror Service's ClusterIP, an MCS
/// name its ServiceImport's ips) answer them: the mirror has caught up
/// with the clusters, and the answers will not move on their own.
async fn mirrored_answers(dns: SocketAddr, lc: &kube::Client, gateway_mode: &[&str], mcs: &[&str]) {
    eventually(
        "gateway-mode names answer their mirror's ClusterIP, MCS names their import's ips",
        15 * SECOND,
        || async {
            for label in gateway_mode {
                let ip = cluster_ip(lc, label)
                    .await
                    .ok_or(format!("no mirror Service {label} yet"))?;
                let got = records(dns, &fqdn(label), RecordType::A).await;
                if got != (ResponseCode::NoError, vec![ip.clone()]) {
                    return Err(format!("{label}: {got:?}, mirror ClusterIP {ip}"));
                }
            }
            for name in mcs {
                let ips: Vec<String> = import(lc, name)
                    .await
                    .and_then(|i| i["spec"]["ips"].as_array().cloned())
                    .ok_or(format!("no ServiceImport {name} with ips yet"))?
                    .iter()
                    .filter_map(|ip| ip.as_str().map(str::to_owned))
                    .collect();
                let got = records(dns, &fqdn(name), RecordType::A).await;
                if got != (ResponseCode::NoError, ips.clone()) || ips.is_empty() {
                    return Err(format!("{name}: {got:?}, import ips {ips:?}"));
                }
            }
            Ok(())
        },
    )
    .await;
}

/// East's names, which evil must not change.
const EAST: [(&str, RecordType); 6] = [
    ("web-east", RecordType::A),
    ("web-east", RecordType::AAAA),
    ("front-east", RecordType::A),
    ("db", RecordType::A),
    ("db", RecordType::SRV),
    ("api-evil", RecordType::A),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_linked_cluster_cannot_point_names_or_mirrors_anywhere() {
    let (sim, dir) = sim(&["local", "east", "evil"], |_| {}).await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster").clone();
    let (local, east, evil) = (cluster("local"), cluster("east"), cluster("evil"));
    let (lc, ec, vc) = (
        client(&local).await,
        client(&east).await,
        client(&evil).await,
    );
    let flat_fed = json!({"mirror.linkerd.io/exported": "remote-discovery",
                          "mirror.linkerd.io/federated": "member"});
    let gateway_mode = json!({"mirror.linkerd.io/exported": "true"});

    // Evil first, so that every object of evil's is older than east's
    // (see the module doc). Its `web` has another port number, to take
    // the federated mirror's ports if age decided across clusters.
    create_object(
        &vc,
        service(NS, "web", ("http", 9999), flat_fed.clone(), true),
    )
    .await;
    let mut v4: Vec<&str> = HOSTILE_V4.to_vec();
    v4.extend([NOT_ALLOWED, DENIED, "10.9.0.1"]);
    let mut v6: Vec<&str> = HOSTILE_V6.to_vec();
    v6.push("fd00:9::1");
    {
        let mut store = evil.store();
        for doc in [
            slice(NS, "web", "web-4", "IPv4", ("http", 8080), &v4),
            slice(NS, "web", "web-6", "IPv6", ("http", 8080), &v6),
        ] {
            store.create(ENDPOINTSLICES, doc).expect("hostile slice");
        }
    }
    create_object(
        &vc,
        service(NS, "front", ("http", 80), gateway_mode.clone(), true),
    )
    .await;
    create_object(
        &vc,
        slice(
            NS,
            "front",
            "front-1",
            "IPv4",
            ("http", 8080),
            &["10.9.1.1"],
        ),
    )
    .await;
    // The cluster's own DNS, exported both ways.
    create_object(
        &vc,
        service(
            "kube-system",
            "kube-dns",
            ("dns", 53),
            json!({"mirror.linkerd.io/exported": "remote-discovery"}),
            true,
        ),
    )
    .await;
    create_object(
        &vc,
        slice(
            "kube-system",
            "kube-dns",
            "kube-dns-1",
            "IPv4",
            ("dns", 53),
            &["10.9.0.53"],
        ),
    )
    .await;
    create_object(&vc, service_export("kube-system", "kube-dns", true)).await;
    // MCS db with another number for port pg.
    create_object(&vc, service(NS, "db", ("pg", 6432), json!({}), true)).await;
    create_object(
        &vc,
        slice(NS, "db", "db-1", "IPv4", ("pg", 6432), &["10.9.5.1"]),
    )
    .await;
    create_object(&vc, service_export(NS, "db", true)).await;
    // Linkerd's `api-evil`, which east's MCS service is also called.
    create_object(
        &vc,
        service(
            NS,
            "api",
            ("http", 80),
            json!({"mirror.linkerd.io/exported": "remote-discovery"}),
            true,
        ),
    )
    .await;
    create_object(
        &vc,
        slice(NS, "api", "api-1", "IPv4", ("http", 8080), &["10.9.7.1"]),
    )
    .await;
    let evil_made = kubesim::store::now();
    eventually(
        "kubesim's clock passes the second evil's objects were made in",
        3 * SECOND,
        || async { kubesim::store::now() > evil_made },
    )
    .await;

    // East: web (flat, federated; A and AAAA), front (gateway mode), MCS
    // db and api-evil.
    export(&ec, "web", &["10.1.0.1"]).await;
    create_object(
        &ec,
        slice(NS, "web", "web-6", "IPv6", ("http", 8080), &["fd00:1::1"]),
    )
    .await;
    create_object(&ec, service(NS, "front", ("http", 80), gateway_mode, false)).await;
    create_object(
        &ec,
        slice(
            NS,
            "front",
            "front-1",
            "IPv4",
            ("http", 8080),
            &["10.1.1.1"],
        ),
    )
    .await;
    create_object(&ec, service(NS, "db", ("pg", 5432), json!({}), false)).await;
    create_object(
        &ec,
        slice(NS, "db", "db-1", "IPv4", ("pg", 5432), &["10.1.5.1"]),
    )
    .await;
    create_object(&ec, service_export(NS, "db", false)).await;
    create_object(&ec, service(NS, "api-evil", ("http", 80), json!({}), false)).await;
    create_object(
        &ec,
        slice(
            NS,
            "api-evil",
            "api-evil-1",
            "IPv4",
            ("http", 8080),
            &["10.1.7.1"],
        ),
    )
    .await;
    create_object(&ec, service_export(NS, "api-evil", false)).await;

    // The premise of the collisions: by evil's own clock its objects are
    // the older ones.
    let created = |c: &kubesim::Cluster, res: usize, name: &str| {
        let obj = c.store().get(res, NS, name).expect("stored");
        obj.value()["metadata"]["creationTimestamp"]
            .as_str()
            .expect("creationTimestamp")
            .to_owned()
    };
    for (res, evil_name, east_name) in [
        (SERVICES, "db", "db"),
        (SERVICEEXPORTS, "db", "db"),
        (SERVICES, "api", "api-evil"),
        (SERVICES, "web", "web"),
    ] {
        let (old, new) = (
            created(&evil, res, evil_name),
            created(&east, res, east_name),
        );
        assert!(
            old < new,
            "evil's {evil_name} ({old}) predates east's {east_name} ({new})"
        );
    }

    create_object(
        &lc,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await;
    link(
        &lc,
        "east",
        &kubeconfig_text(&east),
        Some("203.0.113.10"),
        json!({}),
    )
    .await;
    let mut live = Live::new(
        local.kubeconfig_path(),
        Links::Linkerd {
            namespace: LINKS.into(),
        },
    );
    live.mirror = Some(MirrorSetup::new("a"));
    // No loopback exemption: `localhost` is evil's to abuse here.
    let trust = TrustSettings {
        deny_addresses: parse_cidrs(["10.250.0.0/16"]).expect("cidr"),
        ..TrustSettings::default()
    };
    let server = start_live(
        Options {
            local: Some("local"),
            mcs: true,
            trust,
            ..Options::default()
        },
        live,
    )
    .await;
    let (dns, admin) = (server.dns, server.admin);

    // East alone: what its names answer is what they must still answer
    // once evil is linked.
    until(
        dns,
        &fqdn("web-east"),
        ResponseCode::NoError,
        &["10.1.0.1"],
        10 * SECOND,
    )
    .await;
    mirrored_answers(dns, &lc, &["front-east"], &["db", "api-evil"]).await;
    let mut before = Vec::new();
    for (label, rtype) in EAST {
        before.push(records(dns, &fqdn(label), rtype).await);
    }
    let was = |label: &str, rtype: RecordType| {
        EAST.iter()
            .zip(&before)
            .find(|((l, t), _)| *l == label && *t == rtype)
            .map(|(_, answer)| answer.clone())
            .expect("one of east's names")
    };
    assert_eq!(
        was("web-east", RecordType::AAAA),
        (ResponseCode::NoError, sorted(&["fd00:1::1"])),
        "east's web answers its IPv6 pod"
    );
    assert_eq!(
        was("db", RecordType::SRV),
        (
            ResponseCode::NoError,
            sorted(&["5432 db.prod.svc.clusterset.local."])
        ),
        "db's port is east's, its only exporter"
    );
    // The ClusterSetIP of east's MCS api-evil (its local ServiceImport's).
    let east_api_evil = was("api-evil", RecordType::A).1;

    // Evil is linked, after east, with what its Link says it may claim.
    link(
        &lc,
        "evil",
        &kubeconfig_text(&evil),
        Some("169.254.169.254,localhost,203.0.113.77"),
        json!({"clusterset-dns.io/allowed-addresses": EVIL_ALLOWED}),
    )
    .await;
    until(
        dns,
        &fqdn("web-evil"),
        ResponseCode::NoError,
        &["10.9.0.1"],
        10 * SECOND,
    )
    .await;
    eventually(
        "evil synced, /debug/clusters showing its gateway without the metadata address and localhost",
        10 * SECOND,
        || async {
        let r = report(admin, "evil").await.ok_or("evil not listed")?;
        if r["state"] == "synced" && r["gatewayAddresses"] == json!(["203.0.113.77"]) {
            Ok(())
        } else {
            Err(format!("{r:#}"))
        }
    })
    .await;
    // East's MCS names are left to the assertions below: they must not
    // move at all.
    mirrored_answers(dns, &lc, &["front-evil"], &[]).await;

    let ok = ResponseCode::NoError;
    // (what a user would notice, name, type, rcode, records)
    let cases: Vec<(&str, String, RecordType, ResponseCode, Vec<String>)> = vec![
        (
            "evil's pods answer only its ordinary address: no metadata service, loopback, \
             this-host, multicast or broadcast, nothing outside its allowed range or in deny-addresses",
            fqdn("web-evil"),
            RecordType::A,
            ok,
            sorted(&["10.9.0.1"]),
        ),
        (
            "evil's AAAA: no ::1, link-local, AWS metadata or IPv4-mapped loopback",
            fqdn("web-evil"),
            RecordType::AAAA,
            ok,
            sorted(&["fd00:9::1"]),
        ),
        (
            "the federated union takes evil's ordinary address and nothing else",
            fqdn("web-federated"),
            RecordType::A,
            ok,
            sorted(&["10.1.0.1", "10.9.0.1"]),
        ),
        (
            "the federated union, AAAA",
            fqdn("web-federated"),
            RecordType::AAAA,
            ok,
            sorted(&["fd00:1::1", "fd00:9::1"]),
        ),
        (
            "a Service exported from kube-system has no Linkerd name",
            "kube-dns-evil.kube-system.svc.clusterset.local.".to_owned(),
            RecordType::A,
            ResponseCode::NXDomain,
            Vec::new(),
        ),
        (
            "a Service exported from kube-system has no MCS name",
            "kube-dns.kube-system.svc.clusterset.local.".to_owned(),
            RecordType::A,
            ResponseCode::NXDomain,
            Vec::new(),
        ),
        (
            "evil's older api does not take api-evil from east's MCS service (linked first)",
            fqdn("api-evil"),
            RecordType::A,
            ok,
            east_api_evil.clone(),
        ),
        (
            "evil's older export does not make its port db's",
            fqdn("db"),
            RecordType::SRV,
            ok,
            sorted(&["5432 db.prod.svc.clusterset.local."]),
        ),
    ];
    for (what, name, rtype, rcode, want) in cases {
        let got = records(dns, &name, rtype).await;
        assert_eq!(got, (rcode, want), "{what}: {name} {rtype}");
    }
    assert!(
        !east_api_evil.contains(&"10.9.7.1".to_owned()),
        "api-evil answered evil's pod before evil was linked: {east_api_evil:?}"
    );
    for ((label, rtype), was) in EAST.into_iter().zip(before) {
        assert_eq!(
            records(dns, &fqdn(label), rtype).await,
            was,
            "{label} {rtype}: an answer of east's changed when evil was linked"
        );
    }

    // The mirror's local objects: the special addresses reach no
    // EndpointSlice, and east keeps the ports of what it shares.
    eventually(
        "evil's mirrors written with its ordinary addresses",
        10 * SECOND,
        || async {
            let got = (
                endpoints_of(&lc, "web-evil").await,
                endpoints_of(&lc, "web-federated").await,
                endpoints_of(&lc, "front-evil").await,
            );
            let want = (
                sorted(&["10.9.0.1", "fd00:9::1"]),
                sorted(&["10.1.0.1", "10.9.0.1", "fd00:1::1", "fd00:9::1"]),
                sorted(&["203.0.113.77"]),
            );
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await;
    let mirrored = all_mirrored_addresses(&lc).await;
    for addr in HOSTILE_V4
        .iter()
        .chain(&HOSTILE_V6)
        .chain(&[NOT_ALLOWED, DENIED])
    {
        assert!(
            !mirrored.contains(*addr),
            "a local EndpointSlice points {addr}, where evil sent us: {mirrored:?}"
        );
    }
    let fed = get(&lc, &svc_path("web-federated"))
        .await
        .expect("web-federated");
    assert_eq!(
        fed["spec"]["ports"],
        json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}]),
        "the local web-federated Service has east's port (linked first), not evil's older 9999"
    );
    let db = import(&lc, "db").await.expect("db import");
    assert_eq!(
        db["spec"]["ports"],
        json!([{"name": "pg", "port": 5432, "protocol": "TCP"}]),
        "the local ServiceImport db has east's port, not evil's older 6432"
    );

    // Counted, per reason, under evil.
    let body = http_get(admin, "/metrics").await;
    let adjusted = |reason: &str, action: &str| {
        metric(
            &body,
            &format!(
                "clusterset_dns_cluster_objects_adjusted_total{{cluster=\"evil\",reason=\"{reason}\",action=\"{action}\"}}"
            ),
        )
    };
    for reason in [
        "address_metadata",
        "address_loopback",
        "address_unspecified",
        "address_link_local",
        "address_multicast",
        "address_broadcast",
        "address_not_allowed",
        "address_denied",
    ] {
        assert!(
            adjusted(reason, "clamped").is_some_and(|n| n >= 1.0),
            "{reason} counted for evil:\n{body}"
        );
    }
    assert!(
        adjusted("namespace_denied", "skipped").is_some_and(|n| n >= 1.0),
        "evil's kube-system export counted:\n{body}"
    );
    assert!(
        !body.lines().any(
            |l| l.starts_with("clusterset_dns_cluster_objects_adjusted_total{cluster=\"east\"")
        ),
        "nothing of east's adjusted:\n{body}"
    );
    assert_eq!(
        metric(&body, "clusterset_dns_name_collisions"),
        Some(1.0),
        "api-evil: one loser"
    );
    assert_eq!(metric(&body, "clusterset_dns_mcs_conflicts"), Some(1.0));

    // A Link whose credentials would run a program in our container.
    let marker = dir.path().join("exec-ran");
    link(
        &lc,
        "exec",
        &exec_kubeconfig(&east, &marker),
        None,
        json!({}),
    )
    .await;
    eventually(
        "the exec Link reported without credentials",
        10 * SECOND,
        || async {
            // Checked at every poll: a plugin that ran fails here, not as
            // a missing state ten seconds later.
            assert!(
                !marker.exists(),
                "the Secret's exec plugin ran in our process: {} exists",
                marker.display()
            );
            let r = report(admin, "exec").await.ok_or("exec not listed")?;
            if r["state"] == "no-credentials" {
                Ok(())
            } else {
                Err(format!("{r:#}"))
            }
        },
    )
    .await;
    let exec = report(admin, "exec").await.expect("exec listed");
    assert!(
        exec["problem"]
            .as_str()
            .is_some_and(|p| p.contains("exec credential plugin")),
        "the problem says why: {exec:#}"
    );
    assert!(
        !marker.exists(),
        "the Secret's exec plugin ran in our process: {} exists",
        marker.display()
    );
    let body = http_get(admin, "/metrics").await;
    assert!(
        metric(
            &body,
            "clusterset_dns_link_credentials_refused_total{reason=\"exec\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "the refusal counted:\n{body}"
    );
    // A Link that never syncs takes nothing down with it.
    assert_eq!(
        records(dns, &fqdn("web-east"), RecordType::A).await,
        (ok, sorted(&["10.1.0.1"])),
        "web-east with the exec Link refused"
    );
    assert_eq!(
        records(dns, &fqdn("web-federated"), RecordType::A).await,
        (ok, sorted(&["10.1.0.1", "10.9.0.1"])),
        "web-federated with the exec Link refused"
    );
    server.server.stop().await;
}
