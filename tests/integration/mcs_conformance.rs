//! A port of the DNS specs of kubernetes-sigs/mcs-api's conformance suite
//! (`conformance/clusterip_service_dns.go`, `conformance/headless_service_dns.go`,
//! with the setup of `conformance_suite.go` and `k8s_objects.go`), run
//! against the built binary (`serve --zones … --mcs`).
//!
//! The suite deploys `hello` (ports `tcp/42` and `udp/42`, PreferDualStack)
//! in its first cluster, exports it, and runs `nslookup` in a request pod of
//! every cluster. Here the objects it creates are the zones directory
//! `tests/fixtures/mcs-conformance` (its README says what is where), and
//! "every cluster" is one server per cluster directory, run with
//! `--local-cluster` set to it, so each reads its own ServiceImport. The
//! suite's expectations are derived the way the suite derives them: from
//! the ServiceImport of the querying cluster, the EndpointSlices of the
//! exporting cluster and the cluster id of the ClusterProperty (the suite
//! reads it from the MCS EndpointSlice's `source-cluster` label).
//!
//! Queries are what `nslookup -type=T <name>.` sends and shows
//! ([`nslookup`]): no EDNS, UDP, again over TCP when truncated, and every
//! record of the Answer section counted, duplicates included.
//!
//! The suite's `--dns-domain` is our `--zone`: every spec runs again under
//! `example.clusterset` ([`every_dns_spec_with_dns_domain_example_clusterset`]).
//!
//! Not portable: "DNS lookups of the <service>.<ns>.svc.cluster.local domain
//! for a ClusterIP service should only resolve local services" needs the
//! cluster's own DNS; we never serve `cluster.local`, so the port asserts
//! that we refuse it.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};
use serde_json::Value;

use crate::binary::{Served, serve};
use crate::support::{Proto, ask, fixture, q, yaml_docs};

/// The suite's service name (`helloServiceName`).
const HELLO: &str = "hello";

/// The clusters, the suite's `clients`: `east` is `clients[0]`, where the
/// service is deployed and exported.
const CLUSTERS: [&str; 2] = ["east", "west"];

/// The namespace of the ClusterIP specs.
const NS_CLUSTERIP: &str = "mcs-conformance-clusterip";
/// The namespace of the headless specs backed by a Deployment.
const NS_HEADLESS: &str = "mcs-conformance-headless";
/// The namespace of the headless spec backed by a StatefulSet.
const NS_STATEFULSET: &str = "mcs-conformance-statefulset";
/// Headless, exported from both clusters (not a suite setup).
const NS_TWO_CLUSTERS: &str = "mcs-conformance-two-clusters";

/// The suite's `replicas` in `headless_service_dns.go`.
const REPLICAS: usize = 2;

/// The zones directory.
fn zones() -> PathBuf {
    fixture("mcs-conformance")
}

// ---------------------------------------------------------------------------
// The objects, read the way the suite reads them from the API
// ---------------------------------------------------------------------------

/// Every document of `cluster`'s directory.
fn docs(cluster: &str) -> Vec<Value> {
    yaml_docs(&zones().join(cluster))
        .into_iter()
        .map(|(_, d)| d)
        .collect()
}

/// The `kind` named `hello` in `ns` of `cluster`, if any.
fn hello_object(cluster: &str, kind: &str, ns: &str) -> Option<Value> {
    docs(cluster).into_iter().find(|d| {
        d["kind"] == kind && d["metadata"]["namespace"] == ns && d["metadata"]["name"] == HELLO
    })
}

/// Strings of a JSON array (empty when absent).
fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().expect("a string").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `cluster`'s ServiceImport for `hello` in `ns`: (`spec.ips`,
/// `spec.ipFamilies`), as `awaitServiceImport` returns it.
fn service_import(cluster: &str, ns: &str) -> (Vec<String>, Vec<String>) {
    let si = hello_object(cluster, "ServiceImport", ns)
        .unwrap_or_else(|| panic!("ServiceImport was not found on cluster {cluster:?} ({ns})"));
    (
        strings(&si["spec"]["ips"]),
        strings(&si["spec"]["ipFamilies"]),
    )
}

/// `awaitServiceImportIPFamilies`: the families of the import, never empty.
fn import_families(cluster: &str, ns: &str) -> Vec<String> {
    let (_, families) = service_import(cluster, ns);
    assert!(
        !families.is_empty(),
        "ServiceImport on cluster {cluster:?} does not contain an IP family"
    );
    families
}

/// `hello`'s `spec.ipFamilies` and first port (`t.helloService.Spec.Ports[0].Port`)
/// in `cluster`.
fn hello_service(cluster: &str, ns: &str) -> (Vec<String>, u16) {
    let svc = hello_object(cluster, "Service", ns).expect("the hello Service");
    let port = svc["spec"]["ports"][0]["port"].as_u64().expect("a port");
    (
        strings(&svc["spec"]["ipFamilies"]),
        u16::try_from(port).expect("a u16 port"),
    )
}

/// `addressTypeOf`.
fn address_type(family: &str) -> &'static str {
    match family {
        "IPv4" => "IPv4",
        "IPv6" => "IPv6",
        other => panic!("unknown IP family {other:?}"),
    }
}

/// `dnsRecordTypeOf`.
pub(crate) fn record_type(family: &str) -> RecordType {
    if family == "IPv4" {
        RecordType::A
    } else {
        RecordType::AAAA
    }
}

/// `ipFamilyOf`.
fn family_of(ip: &str) -> &'static str {
    match ip.parse::<IpAddr>().expect("an IP") {
        IpAddr::V4(_) => "IPv4",
        IpAddr::V6(_) => "IPv6",
    }
}

/// The EndpointSlices of `hello` in `ns` of `cluster` with `address_type`.
fn hello_slices(cluster: &str, ns: &str, address_type: &str) -> Vec<Value> {
    docs(cluster)
        .into_iter()
        .filter(|d| {
            d["kind"] == "EndpointSlice"
                && d["metadata"]["namespace"] == ns
                && d["metadata"]["labels"]["kubernetes.io/service-name"] == HELLO
                && d["addressType"] == address_type
        })
        .collect()
}

/// `ptr.Deref(ep.Conditions.Ready, true)`.
fn ready(endpoint: &Value) -> bool {
    endpoint["conditions"]["ready"].as_bool().unwrap_or(true)
}

/// `endpointInfo`: an address and the name the suite expects an SRV
/// target to start with.
#[derive(Debug, Clone)]
pub(crate) struct EndpointInfo {
    pub(crate) address: String,
    pub(crate) host_name: String,
}

/// The `endpointInfo`s of the ready endpoints of `slice`, each address
/// with its hostname or else its dashed IP; an endpoint not ready is an
/// error (`ptr.Deref(ep.Conditions.Ready, true)`).
pub(crate) fn endpoint_infos(slice: &Value) -> Result<Vec<EndpointInfo>, String> {
    let mut out = Vec::new();
    for ep in slice["endpoints"].as_array().into_iter().flatten() {
        let addresses = strings(&ep["addresses"]);
        if !ready(ep) {
            return Err(format!(
                "the endpoint address {} in the K8s EndpointSlice {} is not ready",
                addresses.join(","),
                slice["metadata"]["name"]
            ));
        }
        for address in addresses {
            let host_name = match ep["hostname"].as_str() {
                Some(h) if !h.is_empty() => h.to_owned(),
                _ => address.replace(['.', ':'], "-"),
            };
            out.push(EndpointInfo { address, host_name });
        }
    }
    Ok(out)
}

/// `awaitK8sEndpoints`: the [`endpoint_infos`] of `hello`'s slices in
/// `cluster`.
fn k8s_endpoints(cluster: &str, ns: &str, address_type: &str) -> Vec<EndpointInfo> {
    hello_slices(cluster, ns, address_type)
        .iter()
        .flat_map(|slice| endpoint_infos(slice).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// The cluster id of `cluster`: the value of its ClusterProperty
/// `cluster.clusterset.k8s.io`, which an MCS implementation puts in the
/// `multicluster.kubernetes.io/source-cluster` label the suite reads.
fn cluster_id(cluster: &str) -> String {
    docs(cluster)
        .into_iter()
        .find(|d| {
            d["kind"] == "ClusterProperty" && d["metadata"]["name"] == "cluster.clusterset.k8s.io"
        })
        .and_then(|d| d["spec"]["value"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no cluster id for {cluster:?}"))
}

// ---------------------------------------------------------------------------
// The clusterset and nslookup
// ---------------------------------------------------------------------------

/// One server per cluster over the zones directory, in the order of
/// [`CLUSTERS`], each with that cluster local; `domain` is `--zone`.
struct Clusterset {
    domain: &'static str,
    servers: Vec<(&'static str, Served)>,
}

impl Clusterset {
    fn start(domain: &'static str) -> Self {
        let servers = CLUSTERS
            .iter()
            .map(|&c| {
                let served = serve(&zones(), &["--mcs", "--local-cluster", c, "--zone", domain]);
                (c, served)
            })
            .collect();
        Self { domain, servers }
    }

    /// The server of the request pod of `cluster`.
    fn dns(&self, cluster: &str) -> SocketAddr {
        self.servers
            .iter()
            .find(|(c, _)| *c == cluster)
            .map(|(_, s)| s.dns)
            .expect("a server for the cluster")
    }

    /// `<svc>.<ns>.svc.<domain>`, without the trailing dot (as the suite
    /// compares SRV targets).
    fn service_name(&self, ns: &str) -> String {
        format!("{HELLO}.{ns}.svc.{}", self.domain)
    }
}

/// What `nslookup -type=<rtype> <name>.` gets from `server`: a query without
/// EDNS over UDP, asked again over TCP when truncated. nslookup prints every
/// Answer record (duplicates too). It prints Authority and Additional as
/// well when the reply is not authoritative and the type is not A or AAAA;
/// the suite's SRV regex would count the additional `internet address = …`
/// lines of the SRV glue as SRV records, so every reply must be AA.
async fn nslookup(server: SocketAddr, name: &str, rtype: RecordType) -> Message {
    let mut query = q(&format!("{name}."), rtype);
    query.edns = None;
    let (mut msg, _) = ask(server, Proto::Udp, &query).await;
    if msg.metadata.truncation {
        msg = ask(server, Proto::Tcp, &query).await.0;
    }
    assert_eq!(
        msg.metadata.response_code,
        ResponseCode::NoError,
        "nslookup -type={rtype} {name}."
    );
    assert!(
        msg.metadata.authoritative,
        "nslookup -type={rtype} {name}.: AA (else nslookup prints the glue too)"
    );
    msg
}

/// The addresses the suite's `addressesRegEx` takes from nslookup's output,
/// sorted (`haveAddressesMatcher`).
pub(crate) fn addresses(msg: &Message) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = msg
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

/// `HaveAddresses(expected)`.
fn parse_sorted(expected: &[String]) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = expected.iter().map(|a| a.parse().expect("an IP")).collect();
    v.sort();
    v
}

/// `parseSRVRecords`: (port, target without its trailing dot) of every SRV
/// of the Answer section, in order.
pub(crate) fn srv_records(msg: &Message) -> Vec<(u16, String)> {
    msg.answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::SRV(s) => Some((
                s.port,
                s.target.to_string().trim_end_matches('.').to_owned(),
            )),
            _ => None,
        })
        .collect()
}

/// `expectSRVRecords`: the SRV records of `name`, exactly `count` of them.
async fn expect_srv_records(
    server: SocketAddr,
    cluster: &str,
    name: &str,
    count: usize,
) -> Vec<(u16, String)> {
    let recs = srv_records(&nslookup(server, name, RecordType::SRV).await);
    assert_eq!(
        recs.len(),
        count,
        "cluster {cluster:?}: expected {count} SRV records for {name} but got {}: {recs:?}",
        recs.len()
    );
    recs
}

// ---------------------------------------------------------------------------
// clusterip_service_dns.go
// ---------------------------------------------------------------------------

/// clusterip_service_dns.go, `Specify("A DNS lookup of the
/// <service>.<ns>.svc."+dnsDomain+" domain for a ClusterIP service should
/// resolve to the clusterset IP")`: in every cluster, for every IP of that
/// cluster's ServiceImport, `nslookup -type=A|AAAA` of the service name
/// shows it.
async fn spec_clusterip_lookup_resolves_to_the_clusterset_ip(set: &Clusterset) {
    let name = set.service_name(NS_CLUSTERIP);
    for cluster in CLUSTERS {
        let (ips, _) = service_import(cluster, NS_CLUSTERIP);
        assert!(
            !ips.is_empty(),
            "ServiceImport on cluster {cluster:?} does not contain an IP"
        );
        for ip in &ips {
            let rtype = record_type(family_of(ip));
            let got = addresses(&nslookup(set.dns(cluster), &name, rtype).await);
            let want: IpAddr = ip.parse().expect("an IP");
            assert!(
                got.contains(&want),
                "cluster {cluster:?}: nslookup -type={rtype} {name}. shows {got:?}, not the clusterset IP {ip}"
            );
        }
    }
}

/// clusterip_service_dns.go, `Specify("A DNS SRV query of the
/// <service>.<ns>.svc."+dnsDomain+" domain for a ClusterIP service should
/// return valid SRV records")`: in every cluster exactly one SRV, the
/// first service port, target the service name. (`hello` has tcp/42 and
/// udp/42: one record per port, and the two are the same record.)
async fn spec_clusterip_srv_query_returns_valid_srv_records(set: &Clusterset) {
    let name = set.service_name(NS_CLUSTERIP);
    let (_, port) = hello_service(CLUSTERS[0], NS_CLUSTERIP);
    for cluster in CLUSTERS {
        let want = vec![(port, name.clone())];
        let got = expect_srv_records(set.dns(cluster), cluster, &name, want.len()).await;
        assert_eq!(
            got, want,
            "cluster {cluster:?}: received SRV records do not match the expected records"
        );
    }
}

/// clusterip_service_dns.go, `Specify("DNS lookups of the
/// <service>.<ns>.svc.cluster.local domain for a ClusterIP service should
/// only resolve local services")`. Not portable: the suite expects the
/// cluster's DNS to answer the local ClusterIP. Ours must leave
/// `cluster.local` alone: REFUSED, nothing in the answer.
async fn spec_clusterip_cluster_local_is_not_ours(set: &Clusterset) {
    let name = format!("{HELLO}.{NS_CLUSTERIP}.svc.cluster.local.");
    for cluster in CLUSTERS {
        for rtype in [RecordType::A, RecordType::AAAA] {
            let mut query = q(&name, rtype);
            query.edns = None;
            let (msg, _) = ask(set.dns(cluster), Proto::Udp, &query).await;
            assert_eq!(
                (msg.metadata.response_code, msg.answers.len()),
                (ResponseCode::Refused, 0),
                "cluster {cluster:?}: {rtype} {name}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// headless_service_dns.go
// ---------------------------------------------------------------------------

/// The `hello` endpoints of every cluster in `exporting` for `family`.
fn endpoints_of(exporting: &[&str], ns: &str, family: &str) -> Vec<EndpointInfo> {
    exporting
        .iter()
        .flat_map(|c| k8s_endpoints(c, ns, address_type(family)))
        .collect()
}

/// headless_service_dns.go, `Specify("A DNS query of the
/// <service>.<ns>.svc."+dnsDomain+" domain for a headless service should
/// return the ready endpoint addresses of all the backing pods")`: in every
/// cluster, per family of its ServiceImport, the addresses shown are
/// exactly those of the ready endpoints (the suite's are those of
/// `clients[0]`, the one cluster it exports from; `exporting` lists them).
async fn spec_headless_query_returns_the_ready_endpoint_addresses(
    set: &Clusterset,
    ns: &str,
    exporting: &[&str],
    replicas: usize,
) {
    let name = set.service_name(ns);
    for cluster in CLUSTERS {
        for family in import_families(cluster, ns) {
            let endpoints = endpoints_of(exporting, ns, &family);
            assert_eq!(
                endpoints.len(),
                replicas,
                "the K8s EndpointSlices do not contain the expected number of ready {family} endpoints"
            );
            let want: Vec<String> = endpoints.into_iter().map(|e| e.address).collect();
            let rtype = record_type(&family);
            let got = addresses(&nslookup(set.dns(cluster), &name, rtype).await);
            assert_eq!(
                got,
                parse_sorted(&want),
                "cluster {cluster:?}: nslookup -type={rtype} {name}."
            );
        }
    }
}

/// headless_service_dns.go, `Specify("A DNS query of the
/// <hostname>.<clusterid>.<service>.<ns>.svc."+dnsDomain+" domain for a
/// headless StatefulSet service should return the requested pod's endpoint
/// address")`: in every cluster, per family, each endpoint of the exporting
/// cluster's slice (all ready, all with a hostname, `replicas` of them) is
/// `<hostname>.<clusterid>.hello.<ns>.svc.<domain>` with its addresses.
async fn spec_headless_statefulset_pod_query_returns_the_pods_address(
    set: &Clusterset,
    ns: &str,
    exporting: &[&str],
) {
    for cluster in CLUSTERS {
        for family in import_families(cluster, ns) {
            for &source in exporting {
                let id = cluster_id(source);
                let slices = hello_slices(source, ns, address_type(&family));
                let endpoints: Vec<&Value> = slices
                    .iter()
                    .flat_map(|s| s["endpoints"].as_array().expect("endpoints"))
                    .collect();
                assert_eq!(
                    endpoints.len(),
                    REPLICAS,
                    "{source}'s {family} slice does not contain the expected number of endpoints"
                );
                for ep in endpoints {
                    let addresses_of_ep = strings(&ep["addresses"]);
                    assert!(ready(ep), "{addresses_of_ep:?} is not ready");
                    let hostname = ep["hostname"].as_str().unwrap_or_default();
                    assert!(!hostname.is_empty(), "{addresses_of_ep:?} has no hostname");
                    let name = format!("{hostname}.{id}.{HELLO}.{ns}.svc.{}", set.domain);
                    let rtype = record_type(&family);
                    let got = addresses(&nslookup(set.dns(cluster), &name, rtype).await);
                    assert_eq!(
                        got,
                        parse_sorted(&addresses_of_ep),
                        "cluster {cluster:?}: nslookup -type={rtype} {name}."
                    );
                }
            }
        }
    }
}

/// headless_service_dns.go, `Specify("A DNS SRV query of the
/// <service>.<ns>.svc."+dnsDomain+" domain for a headless service should
/// return valid SRV records")`: in every cluster, as many SRV records as
/// endpoint addresses over the Service's families, and for each endpoint
/// one whose target starts with its hostname, or its dashed IP without one,
/// with the service's first port.
async fn spec_headless_srv_query_returns_valid_srv_records(
    set: &Clusterset,
    ns: &str,
    exporting: &[&str],
) {
    let (families, port) = hello_service(exporting[0], ns);
    let all: Vec<EndpointInfo> = families
        .iter()
        .flat_map(|f| endpoints_of(exporting, ns, f))
        .collect();
    let name = set.service_name(ns);
    for cluster in CLUSTERS {
        let recs = expect_srv_records(set.dns(cluster), cluster, &name, all.len()).await;
        check_srv_targets(cluster, &recs, &all, port);
    }
}

/// For each endpoint, an SRV whose target starts with its host name and
/// whose port is `port`.
fn check_srv_targets(cluster: &str, recs: &[(u16, String)], all: &[EndpointInfo], port: u16) {
    for ep in all {
        let found = recs
            .iter()
            .find(|(_, target)| target.starts_with(&ep.host_name))
            .unwrap_or_else(|| {
                panic!(
                    "cluster {cluster:?}: SRV record for endpoint host name {:?} ({}) not received. Actual records received: {recs:?}",
                    ep.host_name, ep.address
                )
            });
        assert_eq!(found.0, port, "cluster {cluster:?}: {found:?}");
    }
}

// ---------------------------------------------------------------------------
// The tests: the suite's specs under its default --dns-domain
// ---------------------------------------------------------------------------

/// clusterip_service_dns.go: `Specify("A DNS lookup of the <service>.<ns>.svc."+dnsDomain+" domain for a ClusterIP service should resolve to the clusterset IP")`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterip_dns_lookup_of_service_ns_svc_domain_resolves_to_the_clusterset_ip() {
    let set = Clusterset::start("clusterset.local");
    spec_clusterip_lookup_resolves_to_the_clusterset_ip(&set).await;
}

/// clusterip_service_dns.go: `Specify("A DNS SRV query of the <service>.<ns>.svc."+dnsDomain+" domain for a ClusterIP service should return valid SRV records")`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterip_dns_srv_query_of_service_ns_svc_domain_returns_valid_srv_records() {
    let set = Clusterset::start("clusterset.local");
    spec_clusterip_srv_query_returns_valid_srv_records(&set).await;
}

/// clusterip_service_dns.go: `Specify("DNS lookups of the <service>.<ns>.svc.cluster.local domain for a ClusterIP service should only resolve local services")`.
/// Not portable (needs the cluster's DNS): we answer REFUSED instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterip_dns_lookups_of_service_ns_svc_cluster_local_are_refused_not_ours() {
    let set = Clusterset::start("clusterset.local");
    spec_clusterip_cluster_local_is_not_ours(&set).await;
}

/// headless_service_dns.go: `Specify("A DNS query of the <service>.<ns>.svc."+dnsDomain+" domain for a headless service should return the ready endpoint addresses of all the backing pods")`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_dns_query_of_service_ns_svc_domain_returns_the_ready_endpoint_addresses_of_all_the_backing_pods()
 {
    let set = Clusterset::start("clusterset.local");
    spec_headless_query_returns_the_ready_endpoint_addresses(
        &set,
        NS_HEADLESS,
        &CLUSTERS[..1],
        REPLICAS,
    )
    .await;
}

/// headless_service_dns.go: `Specify("A DNS query of the <hostname>.<clusterid>.<service>.<ns>.svc."+dnsDomain+" domain for a headless StatefulSet service should return the requested pod's endpoint address")`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_dns_query_of_hostname_clusterid_service_ns_svc_domain_returns_the_requested_pods_endpoint_address()
 {
    let set = Clusterset::start("clusterset.local");
    spec_headless_statefulset_pod_query_returns_the_pods_address(
        &set,
        NS_STATEFULSET,
        &CLUSTERS[..1],
    )
    .await;
}

/// headless_service_dns.go: `Specify("A DNS SRV query of the <service>.<ns>.svc."+dnsDomain+" domain for a headless service should return valid SRV records")`.
/// The suite's service is backed by a Deployment: no hostnames, so every
/// target is `<dashed IP>.<clusterid>.…`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_dns_srv_query_of_service_ns_svc_domain_returns_valid_srv_records() {
    let set = Clusterset::start("clusterset.local");
    spec_headless_srv_query_returns_valid_srv_records(&set, NS_HEADLESS, &CLUSTERS[..1]).await;
}

/// All the specs above with the suite's `--dns-domain example.clusterset`
/// (our `--zone`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dns_spec_with_dns_domain_example_clusterset() {
    let set = Clusterset::start("example.clusterset");
    spec_clusterip_lookup_resolves_to_the_clusterset_ip(&set).await;
    spec_clusterip_srv_query_returns_valid_srv_records(&set).await;
    spec_clusterip_cluster_local_is_not_ours(&set).await;
    spec_headless_query_returns_the_ready_endpoint_addresses(
        &set,
        NS_HEADLESS,
        &CLUSTERS[..1],
        REPLICAS,
    )
    .await;
    spec_headless_statefulset_pod_query_returns_the_pods_address(
        &set,
        NS_STATEFULSET,
        &CLUSTERS[..1],
    )
    .await;
    spec_headless_srv_query_returns_valid_srv_records(&set, NS_HEADLESS, &CLUSTERS[..1]).await;
    // The default domain is not served under another one.
    let name = format!("{HELLO}.{NS_CLUSTERIP}.svc.clusterset.local");
    let mut query = q(&format!("{name}."), RecordType::A);
    query.edns = None;
    let (msg, _) = ask(set.dns(CLUSTERS[1]), Proto::Udp, &query).await;
    assert_eq!(
        (msg.metadata.response_code, msg.answers.len()),
        (ResponseCode::Refused, 0),
        "{name} under --zone example.clusterset"
    );
}

// ---------------------------------------------------------------------------
// Beyond the suite's setups: the same checks where it would generalize them
// ---------------------------------------------------------------------------

/// The headless specs with `hello` exported from both clusters (east: a
/// Deployment, west: a StatefulSet, one endpoint with `ready` unset, which
/// the suite counts as ready): the addresses are the union of both
/// clusters', west's pods are named under west's id.
/// SRV: the suite counts one record per endpoint address, but a dual-stack
/// pod with a hostname has one target for both its addresses, and an RRset
/// holds no duplicates: one record per distinct target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_specs_with_the_service_exported_from_two_clusters() {
    let set = Clusterset::start("clusterset.local");
    spec_headless_query_returns_the_ready_endpoint_addresses(
        &set,
        NS_TWO_CLUSTERS,
        &CLUSTERS,
        2 * REPLICAS,
    )
    .await;
    spec_headless_statefulset_pod_query_returns_the_pods_address(&set, NS_TWO_CLUSTERS, &["west"])
        .await;
    srv_one_per_distinct_target(&set, NS_TWO_CLUSTERS, &CLUSTERS).await;
}

/// The headless SRV spec on the suite's StatefulSet: targets start with the
/// pods' hostnames (one record per pod, shared by its two families).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_srv_query_of_a_statefulset_service_targets_the_hostnames() {
    let set = Clusterset::start("clusterset.local");
    srv_one_per_distinct_target(&set, NS_STATEFULSET, &CLUSTERS[..1]).await;
}

/// Every endpoint has an SRV record whose target starts with its host name
/// (the suite's check), and the records are exactly one per distinct
/// `<host name>.<clusterid>.hello.<ns>.svc.<domain>`, on the service port.
async fn srv_one_per_distinct_target(set: &Clusterset, ns: &str, exporting: &[&str]) {
    let (families, port) = hello_service(exporting[0], ns);
    let mut all = Vec::new();
    let mut want = BTreeSet::new();
    for &source in exporting {
        let id = cluster_id(source);
        for family in &families {
            for ep in k8s_endpoints(source, ns, address_type(family)) {
                want.insert((
                    port,
                    format!("{}.{id}.{HELLO}.{ns}.svc.{}", ep.host_name, set.domain),
                ));
                all.push(ep);
            }
        }
    }
    let name = set.service_name(ns);
    for cluster in CLUSTERS {
        let recs = expect_srv_records(set.dns(cluster), cluster, &name, want.len()).await;
        check_srv_targets(cluster, &recs, &all, port);
        let got: BTreeSet<(u16, String)> = recs.into_iter().collect();
        assert_eq!(got, want, "cluster {cluster:?}: SRV {name}");
    }
}

/// The fixture is the suite's setup, so that no check above passes on an
/// empty list: two dual-stack clusters whose ServiceImports list both
/// families (ClusterSetIP: one IP per family, other IPs in each cluster,
/// none of them an endpoint's), cluster ids unlike the directory names,
/// the Deployment's endpoints without hostnames and the StatefulSet's with.
#[test]
fn the_fixture_is_the_suites_setup() {
    let dual = vec!["IPv4".to_owned(), "IPv6".to_owned()];
    let mut all_ips = BTreeSet::new();
    for cluster in CLUSTERS {
        for ns in [NS_CLUSTERIP, NS_HEADLESS, NS_STATEFULSET, NS_TWO_CLUSTERS] {
            assert_eq!(import_families(cluster, ns), dual, "{cluster} {ns}");
        }
        let (ips, _) = service_import(cluster, NS_CLUSTERIP);
        let families: Vec<&str> = ips.iter().map(|ip| family_of(ip)).collect();
        assert_eq!(families, ["IPv4", "IPv6"], "{cluster}: {ips:?}");
        all_ips.extend(ips);
        assert!(
            service_import(cluster, NS_HEADLESS).0.is_empty(),
            "headless imports have no IPs"
        );
    }
    assert_eq!(all_ips.len(), 4, "each cluster has its own clusterset IPs");
    for family in ["IPv4", "IPv6"] {
        for e in k8s_endpoints("east", NS_CLUSTERIP, family) {
            assert!(!all_ips.contains(&e.address), "{e:?}");
        }
    }
    assert_eq!(
        CLUSTERS.map(cluster_id),
        ["east-1".to_owned(), "west-1".to_owned()]
    );
    for family in ["IPv4", "IPv6"] {
        let deployment = k8s_endpoints("east", NS_HEADLESS, family);
        assert_eq!(deployment.len(), REPLICAS);
        assert!(
            deployment
                .iter()
                .all(|e| e.host_name.contains(&e.address.replace(['.', ':'], "-")))
        );
        let statefulset = k8s_endpoints("east", NS_STATEFULSET, family);
        let hosts: Vec<&str> = statefulset.iter().map(|e| e.host_name.as_str()).collect();
        assert_eq!(hosts, ["hello-ss-0", "hello-ss-1"]);
        assert!(
            hello_slices("west", NS_HEADLESS, family).is_empty(),
            "exported from east only"
        );
    }
}
