//! Shared test harness: start a server on port 0 over a fixture directory,
//! query it with the hickory-net client (UDP or TCP) or with raw bytes, and
//! compare records as zone-file text sets.

#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clusterset_dns::config::Config;
use clusterset_dns::k8s::client as k8s_client;
use clusterset_dns::mirror::lease::LeaseConfig;
use clusterset_dns::mirror::run::MirrorConfig;
use clusterset_dns::model::Settings;
use clusterset_dns::runtime::{Server, Sockets, SourceSetup};
pub(crate) use clusterset_dns::source::live::{Links, LiveConfig};
use clusterset_dns::vocab::name::ZoneName;
use clusterset_dns::vocab::place::Place;
use clusterset_dns::vocab::trust::{TrustSettings, parse_cidrs};
use futures_util::StreamExt;
use hickory_net::client::Client;
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::tcp::TcpClientStream;
use hickory_net::udp::UdpClientStream;
use hickory_net::xfer::DnsHandle;
use hickory_proto::op::{DnsRequest, DnsRequestOptions, Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{DNSClass, Name, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A fixture directory under `tests/fixtures`.
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The demo zones directory.
pub(crate) fn demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("zones/demo")
}

/// Copies a directory tree (for tests that edit files).
pub(crate) fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// Server options for a test.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The local cluster.
    pub(crate) local: Option<&'static str>,
    /// Positive TTL.
    pub(crate) ttl: u32,
    /// Negative TTL.
    pub(crate) negative_ttl: u32,
    /// Reverse zones.
    pub(crate) reverse_zones: Vec<&'static str>,
    /// NS glue addresses.
    pub(crate) ns_addrs: Vec<IpAddr>,
    /// Keep pre-encoded responses (the hot path); false sends every query
    /// down the general path.
    pub(crate) answer_cache: bool,
    /// Per-cluster budget (`None`: the default).
    pub(crate) budget: Option<clusterset_dns::model::budget::Budget>,
    /// `--mcs`.
    pub(crate) mcs: bool,
    /// `--deny-addresses`, `--exempt-addresses` and our namespace.
    pub(crate) trust: TrustSettings,
    /// `--region` and `--topology-zone`: the local cluster's place.
    pub(crate) place: Place,
    /// `--srv-priority-tiers`.
    pub(crate) srv_tiers: bool,
    /// `--allow-transfer` and `--notify`.
    pub(crate) transfers: (Vec<&'static str>, Vec<SocketAddr>),
}

/// Trust settings that accept loopback addresses (`--exempt-addresses
/// 127.0.0.0/8`): for gateways and probe targets on this machine, the only
/// addresses a test may dial.
pub(crate) fn loopback_exempt() -> TrustSettings {
    TrustSettings {
        exempt_addresses: parse_cidrs(["127.0.0.0/8"]).expect("cidr"),
        ..TrustSettings::default()
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            local: None,
            ttl: 5,
            negative_ttl: 5,
            reverse_zones: Vec::new(),
            ns_addrs: Vec::new(),
            answer_cache: true,
            budget: None,
            mcs: false,
            trust: TrustSettings::default(),
            place: Place::default(),
            srv_tiers: false,
            transfers: (Vec::new(), Vec::new()),
        }
    }
}

impl Options {
    /// Fixture F of docs/dns.md §6.1: west is local, ns.dns is 10.96.0.53,
    /// reverse zones 10.in-addr.arpa and 0.0.d.f.ip6.arpa.
    pub(crate) fn conformance() -> Self {
        Self {
            local: Some("west"),
            reverse_zones: vec!["10.in-addr.arpa", "0.0.d.f.ip6.arpa"],
            ns_addrs: vec!["10.96.0.53".parse().expect("ip")],
            ..Self::default()
        }
    }
}

/// A server running in this process on loopback port 0.
pub(crate) struct TestServer {
    /// DNS address (UDP and TCP).
    pub(crate) dns: SocketAddr,
    /// Admin HTTP address.
    pub(crate) admin: SocketAddr,
    /// The running server.
    pub(crate) server: Server,
}

/// Answer settings for `opts`.
fn settings(opts: &Options) -> Settings {
    let mut settings = Settings::new(ZoneName::new("clusterset.local").expect("zone"));
    settings.ttl = opts.ttl;
    settings.negative_ttl = opts.negative_ttl;
    settings.stale_ttl = settings.stale_ttl.min(opts.ttl);
    settings.ns_addrs.clone_from(&opts.ns_addrs);
    settings.mcs = opts.mcs;
    settings.trust = opts.trust.clone();
    settings.local_place = opts.place.clone();
    settings.srv_priority_tiers = opts.srv_tiers;
    settings.allow_transfer = parse_cidrs(opts.transfers.0.iter().copied()).expect("cidrs");
    settings.notify.clone_from(&opts.transfers.1);
    if let Some(budget) = opts.budget {
        settings.budget = budget;
    }
    settings.reverse_zones = opts
        .reverse_zones
        .iter()
        .map(|z| ZoneName::new(z).expect("reverse zone"))
        .collect();
    settings
}

fn cache_bytes(opts: &Options) -> u64 {
    if opts.answer_cache {
        clusterset_dns::config::DEFAULT_ANSWER_CACHE_MB << 20
    } else {
        0
    }
}

/// Starts a server over `zones` and waits until it is ready (at most 10 s).
pub(crate) async fn start(zones: &Path, opts: Options) -> TestServer {
    wait_ready(start_server(zones, opts)).await
}

/// Starts a server over `zones` and returns at once: its sockets answer
/// while it loads.
pub(crate) async fn start_unready(zones: &Path, opts: Options) -> TestServer {
    let server = start_server(zones, opts);
    TestServer {
        dns: server.dns_addr,
        admin: server.admin_addr,
        server,
    }
}

fn start_server(zones: &Path, opts: Options) -> Server {
    let settings = settings(&opts);
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let config = Config {
        mirror: None,
        zones: Some(zones.to_owned()),
        live: None,
        local_cluster: opts.local.map(str::to_owned),
        settings: Arc::new(settings),
        dns_addr: loopback,
        admin_addr: loopback,
        answer_cache_bytes: cache_bytes(&opts),
        log_format: Default::default(),
        limits: Default::default(),
        tls: None,
        transfer_keys_file: None,
    };
    let sockets = Sockets::bind(loopback, loopback).expect("bind sockets");
    Server::start(&config, sockets).expect("start server")
}

/// Waits until `server` is ready (at most 10 s).
async fn wait_ready(server: Server) -> TestServer {
    let ready = async {
        while !server.shared.ready.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), ready)
        .await
        .expect("server ready within 10 s");
    TestServer {
        dns: server.dns_addr,
        admin: server.admin_addr,
        server,
    }
}

/// Live-mode settings for a test server.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    /// The local cluster's kubeconfig.
    pub(crate) kubeconfig: PathBuf,
    /// Where linked clusters come from.
    pub(crate) links: Links,
    /// Readiness stops waiting for a cluster after this long.
    pub(crate) sync_timeout: Duration,
    /// `--max-stale`.
    pub(crate) max_stale: Option<Duration>,
    /// `--federated-grace`.
    pub(crate) federated_grace: Duration,
    /// `--cluster-timeout`.
    pub(crate) cluster_timeout: Duration,
    /// Wait for readiness before returning.
    pub(crate) wait_ready: bool,
    /// Run the mirror controller too.
    pub(crate) mirror: Option<MirrorSetup>,
    /// How often a cluster lacking an MCS or About API is asked again.
    pub(crate) mcs_rediscover: Duration,
    /// `--allow-kubeconfig-exec`.
    pub(crate) allow_kubeconfig_exec: bool,
}

/// Mirror controller settings for a test: short lease timings so takeovers
/// happen within seconds.
#[derive(Debug, Clone)]
pub(crate) struct MirrorSetup {
    /// Lease holder identity.
    pub(crate) identity: String,
    /// `--linkerd-flat-compat`.
    pub(crate) linkerd_flat_compat: bool,
    /// Resync period.
    pub(crate) resync: Duration,
    /// Lease duration; renew deadline is 3/4 of it, retry 1/8.
    pub(crate) lease_duration: Duration,
    /// Namespace of the Lease.
    pub(crate) namespace: String,
}

impl MirrorSetup {
    /// Identity `id`, 60 s resync, 2 s lease.
    pub(crate) fn new(id: &str) -> Self {
        Self {
            identity: id.to_owned(),
            linkerd_flat_compat: false,
            resync: Duration::from_secs(60),
            lease_duration: Duration::from_secs(2),
            namespace: "default".to_owned(),
        }
    }
}

impl Live {
    /// Defaults: Links in `linkerd-multicluster`, 10 s sync timeout, no
    /// max-stale, 30 s federated grace, 10 s cluster timeout, wait until
    /// ready, MCS APIs asked for again every 200 ms.
    pub(crate) fn new(kubeconfig: &Path, links: Links) -> Self {
        Self {
            kubeconfig: kubeconfig.to_owned(),
            links,
            sync_timeout: Duration::from_secs(10),
            max_stale: None,
            federated_grace: Duration::from_secs(30),
            cluster_timeout: Duration::from_secs(10),
            wait_ready: true,
            mirror: None,
            mcs_rediscover: Duration::from_millis(200),
            allow_kubeconfig_exec: false,
        }
    }
}

/// Starts a live-mode server on port 0 whose local cluster is
/// `opts.local` (required).
pub(crate) async fn start_live(opts: Options, live: Live) -> TestServer {
    let mut settings = settings(&opts);
    settings.max_stale = live.max_stale;
    settings.federated_grace = live.federated_grace;
    settings.cluster_timeout = live.cluster_timeout;
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let local = opts.local.expect("live mode needs a local cluster");
    let config = Config {
        mirror: None,
        zones: None,
        live: None,
        local_cluster: Some(local.to_owned()),
        settings: Arc::new(settings),
        dns_addr: loopback,
        admin_addr: loopback,
        answer_cache_bytes: cache_bytes(&opts),
        log_format: Default::default(),
        limits: Default::default(),
        tls: None,
        transfer_keys_file: None,
    };
    let local_client = k8s_client::local(Some(&live.kubeconfig), None)
        .await
        .expect("local client");
    // As the binary does: the heartbeat gets a client (a pool) of its own.
    let local_heartbeat = k8s_client::local(Some(&live.kubeconfig), None)
        .await
        .expect("local client");
    let sockets = Sockets::bind(loopback, loopback).expect("bind sockets");
    let mirror = live.mirror.map(|m| {
        let mut lease = LeaseConfig::new(&m.namespace, "clusterset-dns-mirror", &m.identity);
        lease.lease_duration = m.lease_duration;
        lease.renew_deadline = m.lease_duration * 3 / 4;
        lease.retry_period = m.lease_duration / 8;
        MirrorConfig {
            client: local_client.clone(),
            local: local.into(),
            cluster_domain: "cluster.local".into(),
            linkerd_flat_compat: m.linkerd_flat_compat,
            link_namespace: match &live.links {
                Links::Linkerd { namespace } => Some(namespace.clone()),
                Links::File(_) => None,
            },
            lease,
            resync: m.resync,
            federated_grace: live.federated_grace,
            mcs: config.settings.mcs,
        }
    });
    let server = Server::start_full(
        &config,
        sockets,
        SourceSetup::Live(Box::new(LiveConfig {
            local: local.into(),
            local_client,
            local_heartbeat: Some(local_heartbeat),
            links: live.links,
            sync_timeout: live.sync_timeout,
            mcs_rediscover: live.mcs_rediscover,
            allow_kubeconfig_exec: live.allow_kubeconfig_exec,
        })),
        mirror,
    )
    .expect("start server");
    if live.wait_ready {
        wait_ready(server).await
    } else {
        TestServer {
            dns: server.dns_addr,
            admin: server.admin_addr,
            server,
        }
    }
}

/// The plural resource path segment and API prefix of a kind we load.
fn resource_of(api_version: &str, kind: &str) -> (String, &'static str) {
    let prefix = if api_version == "v1" {
        "/api/v1".to_owned()
    } else {
        format!("/apis/{api_version}")
    };
    let plural = match kind {
        "Service" => "services",
        "EndpointSlice" => "endpointslices",
        "Namespace" => "namespaces",
        "Secret" => "secrets",
        "Link" => "links",
        "ServiceExport" => "serviceexports",
        "ServiceImport" => "serviceimports",
        "ClusterProperty" => "clusterproperties",
        other => panic!("no plural known for kind {other}"),
    };
    (prefix, plural)
}

/// Creates one object through the API (its namespace first, if missing).
/// Server-set fields in the document (resourceVersion, uid) are dropped.
pub(crate) async fn create_object(client: &kube::Client, mut doc: serde_json::Value) {
    let api_version = doc["apiVersion"].as_str().expect("apiVersion").to_owned();
    let kind = doc["kind"].as_str().expect("kind").to_owned();
    if let Some(meta) = doc.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("resourceVersion");
        meta.remove("uid");
    }
    let ns = doc["metadata"]["namespace"].as_str().map(str::to_owned);
    if let Some(ns) = &ns {
        let body =
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        let req = http::Request::post("/api/v1/namespaces")
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).expect("json"))
            .expect("request");
        // 409 AlreadyExists is fine.
        let _ = client.request_text(req).await;
    }
    let (prefix, plural) = resource_of(&api_version, &kind);
    let path = match &ns {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{plural}"),
        None => format!("{prefix}/{plural}"),
    };
    let req = http::Request::post(path.as_str())
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&doc).expect("json"))
        .expect("request");
    if let Err(e) = client.request_text(req).await {
        panic!(
            "creating {kind} {:?} at {path}: {e}",
            doc["metadata"]["name"]
        );
    }
}

/// Every document of every `*.yaml` file under `dir`, in file-name order,
/// with the file it came from.
pub(crate) fn yaml_docs(dir: &Path) -> Vec<(PathBuf, serde_json::Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("fixture dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("fixture file");
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&text).expect("fixture YAML parses");
        out.extend(
            docs.into_iter()
                .filter(|d| !d.is_null())
                .map(|d| (f.clone(), d)),
        );
    }
    out
}

/// Creates every document of every `*.yaml` file under `dir` in `client`'s
/// cluster.
pub(crate) async fn load_yaml_dir(client: &kube::Client, dir: &Path) {
    for (_, doc) in yaml_docs(dir) {
        create_object(client, doc).await;
    }
}

/// Transport for a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    /// UDP.
    Udp,
    /// TCP.
    Tcp,
}

/// A query to send.
#[derive(Debug, Clone)]
pub(crate) struct Q {
    /// Name, absolute (trailing dot optional).
    pub(crate) name: String,
    /// Type.
    pub(crate) rtype: RecordType,
    /// Class.
    pub(crate) class: DNSClass,
    /// EDNS payload; `None` sends no OPT.
    pub(crate) edns: Option<u16>,
    /// EDNS version.
    pub(crate) edns_version: u8,
    /// DO bit.
    pub(crate) dnssec_ok: bool,
    /// CD bit.
    pub(crate) cd: bool,
    /// RD bit.
    pub(crate) rd: bool,
    /// Opcode.
    pub(crate) opcode: OpCode,
}

/// A query for `name` `rtype` with EDNS 1232 and RD=1.
pub(crate) fn q(name: &str, rtype: RecordType) -> Q {
    Q {
        name: name.to_owned(),
        rtype,
        class: DNSClass::IN,
        edns: Some(1232),
        edns_version: 0,
        dnssec_ok: false,
        cd: false,
        rd: true,
        opcode: OpCode::Query,
    }
}

impl Q {
    /// Builds the hickory message.
    pub(crate) fn message(&self) -> Message {
        let mut name = Name::from_ascii(&self.name).expect("query name");
        name.set_fqdn(true);
        let mut query = Query::query(name, self.rtype);
        query.set_query_class(self.class);
        let mut m = Message::new(rand_id(), MessageType::Query, self.opcode);
        m.add_query(query);
        m.metadata.recursion_desired = self.rd;
        m.metadata.checking_disabled = self.cd;
        if let Some(payload) = self.edns {
            let mut e = Edns::new();
            e.set_max_payload(payload)
                .set_version(self.edns_version)
                .set_dnssec_ok(self.dnssec_ok);
            m.set_edns(e);
        }
        m
    }
}

fn rand_id() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::Instant::now()) as u16
}

/// Sends `query` with the hickory-net client and returns the response and
/// its wire bytes.
pub(crate) async fn ask(server: SocketAddr, proto: Proto, query: &Q) -> (Message, Vec<u8>) {
    let provider = TokioRuntimeProvider::default();
    let mut options = DnsRequestOptions::default();
    options.use_edns = query.edns.is_some();
    options.recursion_desired = query.rd;
    let request = DnsRequest::new(query.message(), options);
    let response = match proto {
        Proto::Udp => {
            let stream = UdpClientStream::builder(server, provider)
                .with_timeout(Some(Duration::from_secs(3)))
                .build();
            let (client, bg) = Client::<TokioRuntimeProvider>::from_sender(stream);
            tokio::spawn(bg);
            client.send(request).next().await
        }
        Proto::Tcp => {
            let (connect, handle) =
                TcpClientStream::new(server, None, Some(Duration::from_secs(3)), provider);
            let stream = connect.await.expect("tcp connect");
            let (client, bg) = Client::<TokioRuntimeProvider>::new(stream, handle);
            tokio::spawn(bg);
            client.send(request).next().await
        }
    };
    let response = response.expect("a response").expect("a valid response");
    response.into_parts()
}

/// Sends raw bytes and returns the raw response, if one came within 1 s.
pub(crate) async fn raw(server: SocketAddr, proto: Proto, packet: &[u8]) -> Option<Vec<u8>> {
    let exchange = async {
        match proto {
            Proto::Udp => {
                let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.ok()?;
                sock.send_to(packet, server).await.ok()?;
                let mut buf = vec![0u8; 65535];
                let (n, _) = sock.recv_from(&mut buf).await.ok()?;
                buf.truncate(n);
                Some(buf)
            }
            Proto::Tcp => {
                let mut s = tokio::net::TcpStream::connect(server).await.ok()?;
                s.write_all(&length_prefixed(packet)).await.ok()?;
                let len = s.read_u16().await.ok()?;
                let mut buf = vec![0u8; usize::from(len)];
                s.read_exact(&mut buf).await.ok()?;
                Some(buf)
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(1), exchange)
        .await
        .ok()
        .flatten()
}

/// `msg` with its RFC 7766 length prefix, as sent over TCP or TLS.
pub(crate) fn length_prefixed(msg: &[u8]) -> Vec<u8> {
    let mut out = (msg.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(msg);
    out
}

/// Sends `msg` on a stream (TCP or DNS over TLS), length-prefixed, and
/// decodes the next reply, which must come within 5 s.
pub(crate) async fn on_stream<S>(s: &mut S, msg: &[u8]) -> Message
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    s.write_all(&length_prefixed(msg)).await.expect("write");
    let read = async {
        let len = s.read_u16().await.expect("length");
        let mut body = vec![0u8; usize::from(len)];
        s.read_exact(&mut body).await.expect("body");
        body
    };
    let body = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("an answer within 5 s");
    Message::from_vec(&body).expect("decode")
}

/// A record as normalized zone-file text: `owner ttl class type rdata`,
/// single spaces.
pub(crate) fn text(r: &Record) -> String {
    r.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// True when `got` matches `want`, where a `*` field in `want` matches any
/// one field (used for SOA serials).
fn matches(got: &str, want: &str) -> bool {
    let g: Vec<&str> = got.split(' ').collect();
    let w: Vec<&str> = want.split(' ').collect();
    g.len() == w.len() && g.iter().zip(&w).all(|(g, w)| *w == "*" || g == w)
}

/// Asserts that `got` equals `want` as a set (order ignored; `*` fields
/// match anything).
pub(crate) fn assert_records(context: &str, section: &str, got: &[Record], want: &[&str]) {
    let mut got: Vec<String> = got.iter().map(text).collect();
    let want: Vec<String> = want.iter().map(|w| normalize(w)).collect();
    got.sort();
    let mut unmatched_got = got.clone();
    let mut missing = Vec::new();
    for w in &want {
        match unmatched_got.iter().position(|g| matches(g, w)) {
            Some(i) => {
                unmatched_got.remove(i);
            }
            None => missing.push(w.clone()),
        }
    }
    assert!(
        missing.is_empty() && unmatched_got.is_empty(),
        "{context}: {section} differs\n  missing: {missing:#?}\n  unexpected: {unmatched_got:#?}\n  got: {got:#?}"
    );
}

/// What a poll of [`eventually`] says: passed, or why not yet.
pub(crate) trait Outcome {
    /// `None` when the awaited state holds, else a description of what was
    /// seen instead.
    fn failure(self) -> Option<String>;
}

impl Outcome for bool {
    fn failure(self) -> Option<String> {
        (!self).then(|| "still false".to_owned())
    }
}

impl<T> Outcome for Result<T, String> {
    fn failure(self) -> Option<String> {
        self.err()
    }
}

/// Polls `check` every 20 ms until it passes, for at most `limit` (and at
/// most 10,000 tries); returns how long it took. Panics with the last
/// failure. The one way tests wait for something to happen.
pub(crate) async fn eventually<O, F, Fut>(what: &str, limit: Duration, mut check: F) -> Duration
where
    O: Outcome,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
{
    let start = std::time::Instant::now();
    let mut last = String::new();
    for _ in 0..10_000 {
        match check().await.failure() {
            None => return start.elapsed(),
            Some(e) => last = e,
        }
        if start.elapsed() >= limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "{what}: not within {limit:?} (waited {:?}); last: {last}",
        start.elapsed()
    );
}

/// The Extended DNS Error (RFC 8914, option 15) of a response: INFO-CODE
/// and EXTRA-TEXT (the library's, as `explain --server` reads it).
pub(crate) use clusterset_dns::cli::ede;

/// What `kdig` (knot-dnsutils) prints for `name` `rtype` asked of `dns`
/// over UDP with EDNS: what a user sees, EDE line included
/// (`; EDE: 3 (Stale Answer): '...'`).
pub(crate) async fn kdig(dns: SocketAddr, name: &str, rtype: &str) -> String {
    let args: Vec<String> = vec![
        format!("@{}", dns.ip()),
        "-p".into(),
        dns.port().to_string(),
        "+edns".into(),
        "+timeout=2".into(),
        "+retry=0".into(),
        name.into(),
        rtype.into(),
    ];
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kdig")
            .args(&args)
            .output()
            .expect("kdig runs (knot-dnsutils)")
    })
    .await
    .expect("kdig task");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The strings of a JSON array (none when it is absent; other values
/// skipped).
pub(crate) fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// A loopback port free for both UDP and TCP just now (for a peer server
/// that must be told its port, such as knotd or nsd).
pub(crate) fn free_port() -> u16 {
    for _ in 0..100 {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp socket");
        let port = udp.local_addr().expect("addr").port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no loopback port free for UDP and TCP in 100 tries");
}
