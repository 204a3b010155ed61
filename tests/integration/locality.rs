//! Locality (docs/locality.md) as a user sees it: `<svc>-nearest` follows
//! the local cluster's ready pods to the same region, then to another
//! region, and back; a silent cluster is demoted below the rest; and real
//! clients (HAProxy's `server-template`, dnspython's RFC 2782 ordering,
//! `dig`) act on the answers.
//!
//! Every pod address a client could dial is a loopback address, and no
//! client here dials one (HAProxy has no health checks and no traffic).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use serde_json::json;

use clusterset_dns::vocab::place::Place;

use crate::kubesim_api::{client, sim};
use crate::live::{NS, SECOND, a, fqdn, until};
use crate::support::{
    Links, Live, Options, create_object, eventually, loopback_exempt, start, start_live,
};

/// A federated flat-mode `db` with one slice `db-1` of `addrs`, each ready
/// or not; `min_ready` as its annotation.
fn db_docs(addrs: &[(&str, bool)], min_ready: Option<&str>) -> [serde_json::Value; 2] {
    let annotations = match min_ready {
        Some(n) => json!({"clusterset-dns.io/min-ready": n}),
        None => json!({}),
    };
    [
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "db", "namespace": NS, "annotations": annotations,
                         "labels": {"mirror.linkerd.io/exported": "remote-discovery",
                                    "mirror.linkerd.io/federated": "member"}},
            "spec": {"ports": [{"name": "pg", "port": 5432}]}
        }),
        slice_doc(addrs),
    ]
}

fn endpoints(addrs: &[(&str, bool)]) -> serde_json::Value {
    addrs
        .iter()
        .map(|(a, ready)| json!({"addresses": [a], "conditions": {"ready": ready}}))
        .collect()
}

fn slice_doc(addrs: &[(&str, bool)]) -> serde_json::Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "db-1", "namespace": NS,
                     "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": "IPv4",
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
        "endpoints": endpoints(addrs)
    })
}

/// Sets which endpoints of `db-1` are ready.
async fn set_ready(c: &kube::Client, addrs: &[(&str, bool)]) {
    let body = json!({"endpoints": endpoints(addrs)});
    let req = http::Request::patch(format!(
        "/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/db-1"
    ))
    .header("content-type", "application/merge-patch+json")
    .body(serde_json::to_vec(&body).expect("json"))
    .expect("request");
    c.request_text(req).await.expect("patch slice");
}

/// A clusters file naming each (cluster, region).
fn clusters_file(dir: &Path, clusters: &[(&kubesim::Cluster, &str)]) -> std::path::PathBuf {
    let text: String = clusters
        .iter()
        .map(|(c, region)| {
            format!(
                "- name: {}\n  kubeconfig: {}\n  region: {region}\n",
                c.name,
                c.kubeconfig_path().display()
            )
        })
        .collect();
    let path = dir.join("clusters.yaml");
    std::fs::write(&path, text).expect("write clusters file");
    path
}

const LOCAL: [&str; 3] = ["10.0.0.1", "10.0.0.2", "10.0.0.3"];
const EAST: [&str; 2] = ["10.1.0.1", "10.1.0.2"];
const NORTH: [&str; 2] = ["10.2.0.1", "10.2.0.2"];

/// `addrs` with the first `n` ready.
fn first_ready<'a>(addrs: &[&'a str], n: usize) -> Vec<(&'a str, bool)> {
    addrs.iter().enumerate().map(|(i, a)| (*a, i < n)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nearest_follows_ready_pods_to_the_same_region_then_the_rest_and_back() {
    let (sim, dir) = sim(&["local", "east", "north"], |_| {}).await;
    let cluster = |n: &str| sim.cluster(n).expect("cluster").clone();
    let (local, east, north) = (cluster("local"), cluster("east"), cluster("north"));
    let (lc, ec, nc) = (
        client(&local).await,
        client(&east).await,
        client(&north).await,
    );
    for doc in db_docs(&first_ready(&LOCAL, 3), Some("2")) {
        create_object(&lc, doc).await;
    }
    for doc in db_docs(&first_ready(&EAST, 2), None) {
        create_object(&ec, doc).await;
    }
    for doc in db_docs(&first_ready(&NORTH, 2), None) {
        create_object(&nc, doc).await;
    }
    let file = clusters_file(dir.path(), &[(&east, "eu"), (&north, "us")]);
    let mut live = Live::new(local.kubeconfig_path(), Links::File(file));
    live.cluster_timeout = 2 * SECOND;
    live.federated_grace = 60 * SECOND;
    let opts = Options {
        local: Some("local"),
        place: Place::parse(Some("eu"), None).expect("region"),
        ..Options::default()
    };
    let server = start_live(opts, live).await;
    let dns = server.dns;
    let nearest = fqdn("db-nearest");
    let wait = |want: Vec<&'static str>| {
        let nearest = nearest.clone();
        async move { until(dns, &nearest, ResponseCode::NoError, &want, 5 * SECOND).await }
    };

    // min-ready 2 (the local Service's rule): the local tier while 2 are ready.
    wait(LOCAL.to_vec()).await;
    set_ready(&lc, &first_ready(&LOCAL, 2)).await;
    wait(LOCAL[..2].to_vec()).await;
    // One left: the same region (east), not the union.
    set_ready(&lc, &first_ready(&LOCAL, 1)).await;
    wait(EAST.to_vec()).await;
    // East below min-ready too: the other region.
    set_ready(&ec, &first_ready(&EAST, 1)).await;
    wait(NORTH.to_vec()).await;
    // Back as they return.
    set_ready(&ec, &first_ready(&EAST, 2)).await;
    wait(EAST.to_vec()).await;
    set_ready(&lc, &first_ready(&LOCAL, 3)).await;
    wait(LOCAL.to_vec()).await;
    // The federated name was the union all along.
    let (_, union) = a(dns, &fqdn("db-federated")).await;
    assert_eq!(union.len(), 7, "{union:?}");

    // East goes silent (its API server hangs): within the cluster timeout
    // it is stale, still within the grace, and drops below north.
    set_ready(&lc, &first_ready(&LOCAL, 0)).await;
    wait(EAST.to_vec()).await;
    east.set_latency(Duration::from_secs(60));
    let silent = Instant::now();
    wait(NORTH.to_vec()).await;
    assert!(silent.elapsed() < 5 * SECOND, "{:?}", silent.elapsed());
    let (_, union) = a(dns, &fqdn("db-federated")).await;
    assert!(
        union.contains(EAST[0]),
        "east stays in the union within the grace: {union:?}"
    );
    // Heard from again: same region again.
    east.set_latency(Duration::ZERO);
    until(dns, &nearest, ResponseCode::NoError, &EAST, 15 * SECOND).await;
    server.server.stop().await;
}

/// A zones directory: headless `db` in `prod`, federated, with loopback pod
/// addresses (HAProxy is given them, never dials them): west (local) has
/// `west` ready pods, east and south one each.
fn write_zones(dir: &Path, west: usize) {
    let members = [("west", 1, 2), ("east", 2, 1), ("south", 3, 1)];
    for (cluster, net, n) in members {
        let n = if cluster == "west" { west.min(n) } else { n };
        let all = if cluster == "west" { 2 } else { n };
        let eps: String = (0..all)
            .map(|i| {
                format!(
                    "- addresses: [127.0.{net}.{}]\n  hostname: db-{i}\n  conditions: {{ready: {}}}\n",
                    10 + i,
                    i < n
                )
            })
            .collect();
        let text = format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: db\n  namespace: prod\n  labels:\n    mirror.linkerd.io/exported: remote-discovery\n    mirror.linkerd.io/federated: member\nspec:\n  clusterIP: None\n  ports:\n  - name: pg\n    port: 5432\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: db-1\n  namespace: prod\n  labels:\n    kubernetes.io/service-name: db\naddressType: IPv4\nports:\n- name: pg\n  port: 5432\n  protocol: TCP\nendpoints:\n{eps}"
        );
        let d = dir.join(cluster);
        std::fs::create_dir_all(&d).expect("cluster dir");
        // Written aside and renamed: the watcher never reads half a file.
        let tmp = d.join("db.yaml.tmp");
        std::fs::write(&tmp, text).expect("write zone file");
        std::fs::rename(&tmp, d.join("db.yaml")).expect("rename");
    }
}

fn file_options() -> Options {
    Options {
        local: Some("west"),
        trust: loopback_exempt(),
        srv_tiers: true,
        ..Options::default()
    }
}

/// HAProxy with a `server-template` over `srv`, resolving through `dns`;
/// its admin socket in `dir`.
struct Haproxy {
    child: Child,
    socket: std::path::PathBuf,
}

impl Haproxy {
    fn start(dir: &Path, dns: SocketAddr, srv: &str) -> Self {
        let socket = dir.join("haproxy.sock");
        let config = format!(
            "global\n  stats socket {sock} mode 600 level admin\n\
             resolvers ours\n  nameserver ns1 {dns}\n  accepted_payload_size 8192\n  \
             hold valid 1s\n  hold obsolete 0s\n  hold nx 0s\n  resolve_retries 3\n  \
             timeout resolve 200ms\n  timeout retry 200ms\n\
             defaults\n  mode tcp\n  timeout connect 1s\n  timeout client 1s\n  timeout server 1s\n\
             backend db\n  server-template pg 4 {srv} resolvers ours init-addr none\n",
            sock = socket.display()
        );
        let cfg = dir.join("haproxy.cfg");
        std::fs::write(&cfg, config).expect("haproxy config");
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy runs (Debian package haproxy)");
        Self { child, socket }
    }

    /// The addresses of the backend's servers that have one.
    fn servers(&self) -> Result<BTreeSet<String>, String> {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&self.socket)
            .map_err(|e| format!("admin socket: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        s.write_all(b"show servers state db\n")
            .map_err(|e| e.to_string())?;
        let mut out = String::new();
        s.read_to_string(&mut out).map_err(|e| e.to_string())?;
        // `be_id be_name srv_id srv_name srv_addr …`: unresolved slots have
        // no address.
        Ok(out
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_whitespace().nth(4))
            .filter(|addr| {
                addr.parse::<std::net::Ipv4Addr>()
                    .is_ok_and(|a| !a.is_unspecified())
            })
            .map(str::to_owned)
            .collect())
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_server_template_over_the_nearest_srv_follows_a_failover() {
    let dir = tempfile::tempdir().expect("tempdir");
    let zones = dir.path().join("zones");
    write_zones(&zones, 2);
    let server = start(&zones, file_options()).await;
    let haproxy = Haproxy::start(
        dir.path(),
        server.dns,
        "_pg._tcp.db-nearest.prod.svc.clusterset.local",
    );
    let servers = |want: &'static [&'static str]| {
        let haproxy = &haproxy;
        async move {
            let want: BTreeSet<String> = want.iter().map(|s| (*s).to_owned()).collect();
            eventually("haproxy's servers", 10 * SECOND, || async {
                let got = haproxy.servers()?;
                if got == want {
                    Ok(())
                } else {
                    Err(format!("servers {got:?}"))
                }
            })
            .await
        }
    };
    servers(&["127.0.1.10", "127.0.1.11"]).await;
    // The last local pod goes unready: the next tier (east and south, the
    // rest) within HAProxy's resolution period and hold time.
    let failover = Instant::now();
    write_zones(&zones, 0);
    servers(&["127.0.2.10", "127.0.3.10"]).await;
    let took = failover.elapsed();
    assert!(took < 5 * SECOND, "failover seen by HAProxy after {took:?}");
    write_zones(&zones, 1);
    servers(&["127.0.1.10"]).await;
    drop(haproxy);
    server.server.stop().await;
}

/// dnspython's RFC 2782 processing order of an SRV answer, one
/// `priority weight port target` line per record.
fn dnspython_order(dns: SocketAddr, name: &str) -> Vec<String> {
    let script = "import sys, dns.resolver\n\
        r = dns.resolver.Resolver(configure=False)\n\
        r.nameservers = [sys.argv[1]]\n\
        r.port = int(sys.argv[2])\n\
        ans = r.resolve(sys.argv[3], 'SRV')\n\
        for rd in ans.rrset.processing_order():\n    print(rd.priority, rd.weight, rd.port, rd.target)\n";
    let out = Command::new("/usr/bin/python3")
        .args([
            "-c",
            script,
            &dns.ip().to_string(),
            &dns.port().to_string(),
            name,
        ])
        .output()
        .expect("python3 runs (Debian package python3-dnspython)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rfc_2782_clients_and_dig_see_the_local_tier_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let zones = dir.path().join("zones");
    write_zones(&zones, 2);
    let server = start(&zones, file_options()).await;
    let name = "_pg._tcp.db-federated.prod.svc.clusterset.local.";
    // Weighted random within a priority: the local pair first, in either
    // order, then the rest; the same on every try.
    for _ in 0..5 {
        let order = dnspython_order(server.dns, name);
        assert_eq!(order.len(), 4, "{order:?}");
        let first: BTreeSet<&str> = order[..2].iter().map(String::as_str).collect();
        assert_eq!(
            first,
            BTreeSet::from([
                "0 50 5432 db-0.west.db-federated.prod.svc.clusterset.local.",
                "0 50 5432 db-1.west.db-federated.prod.svc.clusterset.local.",
            ]),
            "{order:?}"
        );
        assert!(
            order[2..].iter().all(|l| l.starts_with("20 50 5432 ")),
            "{order:?}"
        );
    }
    // dig prints the tiers as priorities.
    let out = Command::new("dig")
        .args([
            &format!("@{}", server.dns.ip()),
            "-p",
            &server.dns.port().to_string(),
            "+short",
            "SRV",
            name,
        ])
        .output()
        .expect("dig runs");
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "0 50 5432 db-0.west.db-federated.prod.svc.clusterset.local.",
            "0 50 5432 db-1.west.db-federated.prod.svc.clusterset.local.",
            "20 50 5432 db-0.east.db-federated.prod.svc.clusterset.local.",
            "20 50 5432 db-0.south.db-federated.prod.svc.clusterset.local.",
        ]
    );
    server.server.stop().await;
}
