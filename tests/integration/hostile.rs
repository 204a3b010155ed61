//! A hostile linked cluster, over the file source (issue 25): `evil`
//! publishes every address class no cluster may publish, in A and AAAA
//! slices, in its gateway and beside a good address; exports a Service
//! from `kube-system`; and dates its objects 1970 to win a name collision
//! and an MCS port conflict. The local cluster `west` also lists a
//! metadata address in a ServiceImport. Every name is asked, the counters
//! read, and the good clusters' answers compared with a server that never
//! saw `evil`.

use std::net::SocketAddr;
use std::path::Path;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};

use crate::conformance::{http_get, metric};
use crate::support::{Options, Proto, ask, q, start};

/// Objects of one namespace, `prod` unless a document says otherwise.
const WEST: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: prod, labels: {mirror.linkerd.io/exported: remote-discovery, mirror.linkerd.io/federated: member}}
spec: {clusterIP: 10.130.0.1, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: prod, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.30.0.1]}]
---
# The local cluster is held to the same rule: a ServiceImport's metadata
# address is left out.
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: db, namespace: prod}
spec: {type: ClusterSetIP, ips: [169.254.169.254, 10.96.5.5], ports: [{name: pg, port: 5432}]}
"#;

const EAST: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: prod, labels: {mirror.linkerd.io/exported: remote-discovery, mirror.linkerd.io/federated: member}}
spec: {clusterIP: 10.110.0.1, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-4, namespace: prod, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.10.0.1]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-6, namespace: prod, labels: {kubernetes.io/service-name: web}}
addressType: IPv6
ports: [{name: http, port: 8080}]
endpoints: [{addresses: ["fd00:10::1"]}]
---
apiVersion: v1
kind: Service
metadata: {name: front, namespace: prod, labels: {mirror.linkerd.io/exported: "true"}}
spec: {clusterIP: 10.110.0.2, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: linkerd-gateway, namespace: linkerd-multicluster}
spec: {type: LoadBalancer, ports: [{name: mc-gateway, port: 4143}]}
status: {loadBalancer: {ingress: [{ip: 203.0.113.10}]}}
---
# MCS: db, port pg 5432, exported in 2026.
apiVersion: v1
kind: Service
metadata: {name: db, namespace: prod, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {clusterIP: 10.110.0.3, ports: [{name: pg, port: 5432}]}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: db, namespace: prod, creationTimestamp: "2026-01-01T00:00:00Z"}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: db-1, namespace: prod, labels: {kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{name: pg, port: 5432}]
endpoints: [{addresses: [10.10.5.1]}]
---
# MCS: api-evil, whose name is also evil's Linkerd name for its api.
apiVersion: v1
kind: Service
metadata: {name: api-evil, namespace: prod, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {clusterIP: 10.110.0.4, ports: [{name: http, port: 80}]}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: api-evil, namespace: prod, creationTimestamp: "2026-01-01T00:00:00Z"}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: api-evil-1, namespace: prod, labels: {kubernetes.io/service-name: api-evil}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.10.7.1]}]
"#;

const EVIL: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: prod, labels: {mirror.linkerd.io/exported: remote-discovery, mirror.linkerd.io/federated: member}}
spec: {clusterIP: 10.190.0.1, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-4, namespace: prod, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [169.254.169.254]
- addresses: [127.0.0.1]
- addresses: [0.0.0.0]
- addresses: [224.0.0.1]
- addresses: [255.255.255.255]
- addresses: [100.100.100.200]
- addresses: [10.9.0.1]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-6, namespace: prod, labels: {kubernetes.io/service-name: web}}
addressType: IPv6
ports: [{name: http, port: 8080}]
endpoints:
- addresses: ["::1"]
- addresses: ["fe80::1"]
- addresses: ["fd00:ec2::254"]
- addresses: ["::ffff:127.0.0.1"]
- addresses: ["fd00:9::1"]
---
apiVersion: v1
kind: Service
metadata: {name: front, namespace: prod, labels: {mirror.linkerd.io/exported: "true"}}
spec: {clusterIP: 10.190.0.2, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: linkerd-gateway, namespace: linkerd-multicluster}
spec: {type: LoadBalancer, ports: [{name: mc-gateway, port: 4143}]}
status: {loadBalancer: {ingress: [{ip: 169.254.169.254}, {ip: 127.0.0.1}, {ip: 203.0.113.99}]}}
---
# Not an application's service to export.
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {mirror.linkerd.io/exported: remote-discovery}}
spec: {clusterIP: 10.190.0.10, ports: [{name: dns, port: 53, protocol: UDP}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: kube-dns-1, namespace: kube-system, labels: {kubernetes.io/service-name: kube-dns}}
addressType: IPv4
ports: [{name: dns, port: 53, protocol: UDP}]
endpoints: [{addresses: [10.9.0.53]}]
---
# MCS: db with another number for pg, dated 1970 to be the oldest export.
apiVersion: v1
kind: Service
metadata: {name: db, namespace: prod, creationTimestamp: "1970-01-01T00:00:00Z"}
spec: {clusterIP: 10.190.0.3, ports: [{name: pg, port: 6432}]}
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceExport
metadata: {name: db, namespace: prod, creationTimestamp: "1970-01-01T00:00:00Z"}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: db-1, namespace: prod, labels: {kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{name: pg, port: 6432}]
endpoints: [{addresses: [10.9.5.1]}]
---
# Linkerd's api-evil, dated 1970 to win the name from east's MCS api-evil.
apiVersion: v1
kind: Service
metadata: {name: api, namespace: prod, creationTimestamp: "1970-01-01T00:00:00Z", labels: {mirror.linkerd.io/exported: remote-discovery}}
spec: {clusterIP: 10.190.0.4, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: api-1, namespace: prod, labels: {kubernetes.io/service-name: api}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.9.7.1]}]
"#;

fn write(root: &Path, cluster: &str, text: &str) {
    let dir = root.join(cluster);
    std::fs::create_dir_all(&dir).expect("cluster dir");
    std::fs::write(dir.join("objects.yaml"), text).expect("write");
}

/// rcode and the sorted data of `name`: addresses for A and AAAA,
/// `port target` for SRV.
pub(crate) async fn answer_data(
    dns: SocketAddr,
    name: &str,
    rtype: RecordType,
) -> (ResponseCode, Vec<String>) {
    let (msg, _) = ask(dns, Proto::Udp, &q(name, rtype)).await;
    let mut data: Vec<String> = msg
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.to_string()),
            RData::AAAA(a) => Some(a.0.to_string()),
            RData::SRV(s) => Some(format!("{} {}", s.port, s.target)),
            _ => None,
        })
        .collect();
    data.sort();
    (msg.metadata.response_code, data)
}

/// [`answer_data`] of `<label>.svc.clusterset.local.` (`label` is
/// `<name>.<namespace>`).
async fn records(dns: SocketAddr, label: &str, rtype: RecordType) -> (ResponseCode, Vec<String>) {
    answer_data(dns, &format!("{label}.svc.clusterset.local."), rtype).await
}

/// The names of the good clusters, whose answers `evil` must not change.
const GOOD: [(&str, RecordType); 5] = [
    ("web-east.prod", RecordType::A),
    ("web-east.prod", RecordType::AAAA),
    ("web-west.prod", RecordType::A),
    ("front-east.prod", RecordType::A),
    ("front-east.prod", RecordType::SRV),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_cluster_cannot_point_our_names_anywhere() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write(root, "west", WEST);
    write(root, "east", EAST);
    let opts = || Options {
        local: Some("west"),
        mcs: true,
        ..Options::default()
    };
    let without = start(root, opts()).await;
    let mut before = Vec::new();
    for (label, rtype) in GOOD {
        before.push(records(without.dns, label, rtype).await);
    }
    without.server.stop().await;

    write(root, "evil", EVIL);
    let server = start(root, opts()).await;
    let dns = server.dns;
    let ok = ResponseCode::NoError;
    let v = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    // (what a user would notice, name, type, rcode, records)
    let cases: Vec<(&str, &str, RecordType, ResponseCode, Vec<String>)> = vec![
        (
            "evil's A records: only its ordinary pod address",
            "web-evil.prod",
            RecordType::A,
            ok,
            v(&["10.9.0.1"]),
        ),
        (
            "evil's AAAA records: no loopback, link-local, metadata or mapped loopback",
            "web-evil.prod",
            RecordType::AAAA,
            ok,
            v(&["fd00:9::1"]),
        ),
        (
            "the federated union takes evil's ordinary address and nothing else",
            "web-federated.prod",
            RecordType::A,
            ok,
            v(&["10.10.0.1", "10.30.0.1", "10.9.0.1"]),
        ),
        (
            "the federated union, AAAA",
            "web-federated.prod",
            RecordType::AAAA,
            ok,
            v(&["fd00:10::1", "fd00:9::1"]),
        ),
        (
            "evil's gateway: the metadata and loopback ingress addresses are left out",
            "front-evil.prod",
            RecordType::A,
            ok,
            v(&["203.0.113.99"]),
        ),
        (
            "a Service exported from kube-system does not exist",
            "kube-dns-evil.kube-system",
            RecordType::A,
            ResponseCode::NXDomain,
            v(&[]),
        ),
        (
            "the local ServiceImport's metadata address is left out",
            "db.prod",
            RecordType::A,
            ok,
            v(&["10.96.5.5"]),
        ),
        (
            "an export dated 1970 does not make evil's port the clusterset's",
            "db.prod",
            RecordType::SRV,
            ok,
            v(&["5432 db.prod.svc.clusterset.local."]),
        ),
        (
            "a Linkerd name dated 1970 does not take the name from east's MCS service",
            "api-evil.prod",
            RecordType::A,
            ok,
            v(&["10.10.7.1"]),
        ),
    ];
    for (what, label, rtype, rcode, want) in cases {
        let (got_rcode, got) = records(dns, label, rtype).await;
        assert_eq!((got_rcode, &got), (rcode, &want), "{what}: {label} {rtype}");
    }
    for ((label, rtype), was) in GOOD.into_iter().zip(before) {
        assert_eq!(
            records(dns, label, rtype).await,
            was,
            "{label} {rtype}: a good cluster's answer changed with evil linked"
        );
    }

    let body = http_get(server.admin, "/metrics").await;
    let adjusted = |cluster: &str, reason: &str, action: &str| {
        metric(
            &body,
            &format!(
                "clusterset_dns_cluster_objects_adjusted_total{{cluster=\"{cluster}\",reason=\"{reason}\",action=\"{action}\"}}"
            ),
        )
    };
    // Counted once per object and reason: the IPv4 slice, the IPv6 slice
    // and the gateway Service.
    for (reason, objects) in [
        ("address_unspecified", 1.0),
        ("address_loopback", 3.0),
        ("address_link_local", 1.0),
        ("address_multicast", 1.0),
        ("address_broadcast", 1.0),
        ("address_metadata", 3.0),
    ] {
        assert_eq!(
            adjusted("evil", reason, "clamped"),
            Some(objects),
            "{reason} in:\n{body}"
        );
    }
    assert_eq!(
        adjusted("evil", "namespace_denied", "skipped"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        adjusted("west", "address_metadata", "clamped"),
        Some(1.0),
        "the local ServiceImport: {body}"
    );
    assert_eq!(adjusted("east", "address_loopback", "clamped"), None);
    assert_eq!(
        metric(&body, "clusterset_dns_name_collisions"),
        Some(1.0),
        "api-evil: one loser"
    );
    assert_eq!(metric(&body, "clusterset_dns_mcs_conflicts"), Some(1.0));
    server.server.stop().await;
}

/// The file source reads every cluster directory again under reloaded
/// trust settings (only converted objects are kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloaded_deny_addresses_apply_to_every_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    write(root, "west", WEST);
    write(root, "east", EAST);
    let server = start(
        root,
        Options {
            local: Some("west"),
            ..Options::default()
        },
    )
    .await;
    let dns = server.dns;
    let federated = || records(dns, "web-federated.prod", RecordType::A);
    assert_eq!(
        federated().await.1,
        ["10.10.0.1", "10.30.0.1"].map(str::to_owned)
    );
    let handle = server.server.settings_handle();
    let mut settings = (*handle.get()).clone();
    settings.trust.deny_addresses =
        clusterset_dns::vocab::trust::parse_cidrs(["10.10.0.0/16"]).expect("cidrs");
    handle.set(std::sync::Arc::new(settings));
    crate::support::eventually(
        "east's pod leaves the federated answer",
        std::time::Duration::from_secs(10),
        || async {
            match federated().await.1.as_slice() {
                [only] if only == "10.30.0.1" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let body = http_get(server.admin, "/metrics").await;
    assert_eq!(
        metric(
            &body,
            "clusterset_dns_cluster_objects_adjusted_total{cluster=\"east\",reason=\"address_denied\",action=\"clamped\"}"
        ),
        Some(3.0),
        "east's web, db and api-evil slices: {body}"
    );
    server.server.stop().await;
}
