//! Configuration: command-line flags, environment variables and an optional
//! YAML file, merged in that order of precedence (flag, env, file, default).
//!
//! Every option has one name used three ways: the flag `--ttl`, the
//! environment variable `CLUSTERSET_DNS_TTL`, the file key `ttl`. The file
//! rejects unknown keys, naming them. This module owns validation of values
//! and must not start anything.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use crate::dns::server::Limits;
use crate::model::Settings;
use crate::model::budget::Budget;
use crate::vocab::name::ZoneName;
use crate::vocab::name::{check_cluster_name, is_dns_label};
use crate::vocab::place::{Place, PlaceError, place_value};
use crate::vocab::trust::{DEFAULT_OWN_NAMESPACE, TrustSettings, parse_cidrs};
use crate::vocab::tsig::{TsigAlgorithm, TsigKey};
use base64::Engine as _;

/// Most API requests in flight a cluster may be allowed: far above what
/// any API server wants from one client, low enough to catch a typo.
const MAX_INFLIGHT: usize = 1000;

/// Why the configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid YAML for our keys.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said (it names unknown keys).
        message: String,
    },
    /// A value is out of range or malformed.
    #[error("invalid {key}: {reason}")]
    Invalid {
        /// The option's name.
        key: &'static str,
        /// Why.
        reason: String,
    },
    /// A required option is missing.
    #[error("{0} is required (flag --{0}, env {1}, or config key {0})")]
    Missing(&'static str, &'static str),
}

/// Options shared by `serve`, `check` and `dump`.
#[derive(Debug, Clone, Default, Args)]
// clap prints these doc comments as `--help`, where backticks around
// `<zone>` would show; rustdoc would read `<zone>` as an HTML tag.
#[allow(rustdoc::invalid_html_tags)]
pub struct ZoneArgs {
    /// Directory holding one sub-directory of Kubernetes YAML per cluster.
    #[arg(long, env = "CLUSTERSET_DNS_ZONES", value_name = "DIR")]
    pub zones: Option<PathBuf>,
    /// Name of the local cluster (one of the sub-directories).
    #[arg(long, env = "CLUSTERSET_DNS_LOCAL_CLUSTER", value_name = "NAME")]
    pub local_cluster: Option<String>,
    /// The zone served [default: clusterset.local].
    #[arg(long, env = "CLUSTERSET_DNS_ZONE", value_name = "ZONE")]
    pub zone: Option<String>,
    /// TTL of positive answers, 0-3600 seconds [default: 5].
    #[arg(long, env = "CLUSTERSET_DNS_TTL", value_name = "SECONDS")]
    pub ttl: Option<u32>,
    /// TTL of negative answers (the SOA's TTL and MINIMUM), 0-3600 [default: the TTL].
    #[arg(long, env = "CLUSTERSET_DNS_NEGATIVE_TTL", value_name = "SECONDS")]
    pub negative_ttl: Option<u32>,
    /// Reverse zone to serve PTR records in (repeatable), e.g. 10.in-addr.arpa.
    #[arg(
        long = "reverse-zone",
        env = "CLUSTERSET_DNS_REVERSE_ZONE",
        value_name = "ZONE",
        value_delimiter = ','
    )]
    pub reverse_zones: Vec<String>,
    /// Address of ns.dns.<zone>, the NS glue (repeatable) [default: the --dns-addr IP unless unspecified].
    #[arg(
        long = "ns-addr",
        env = "CLUSTERSET_DNS_NS_ADDR",
        value_name = "IP",
        value_delimiter = ','
    )]
    pub ns_addrs: Vec<IpAddr>,
    /// YAML config file; its keys are the flag names without `--`.
    #[arg(long, env = "CLUSTERSET_DNS_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Also serve the Kubernetes MCS API's names (<svc>.<ns>.svc.<zone>, <hostname>.<clusterid>.<svc>…) for Services a ServiceExport exports.
    #[arg(long, env = "CLUSTERSET_DNS_MCS")]
    pub mcs: bool,
    /// Region of the local cluster, for <svc>-nearest and SRV tiers [default: from its ClusterProperty region.clusterset-dns.io, else unknown].
    #[arg(long, env = "CLUSTERSET_DNS_REGION", value_name = "REGION")]
    pub region: Option<String>,
    /// Zone of the local cluster (topology.kubernetes.io/zone; --zone names the DNS zone) [default: from its ClusterProperty zone.clusterset-dns.io].
    #[arg(long, env = "CLUSTERSET_DNS_TOPOLOGY_ZONE", value_name = "ZONE")]
    pub topology_zone: Option<String>,
    /// TTL cap on <svc>-nearest answers, so clients follow a failover quickly [default: 5].
    #[arg(long, env = "CLUSTERSET_DNS_NEAREST_TTL", value_name = "SECONDS")]
    pub nearest_ttl: Option<u32>,
    /// SRV answers of federated and nearest names carry priority 10 x tier (local 0, same region 10, rest 20, stale 30).
    #[arg(long, env = "CLUSTERSET_DNS_SRV_PRIORITY_TIERS")]
    pub srv_priority_tiers: bool,
    /// Address ranges no cluster may publish, on top of the built-in ones (loopback, link-local, metadata…), e.g. 10.96.0.0/12.
    #[arg(
        long = "deny-addresses",
        env = "CLUSTERSET_DNS_DENY_ADDRESSES",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    pub deny_addresses: Vec<String>,
    /// Ranges of the built-in denied classes accepted anyway (a lab whose gateways listen on 127.0.0.0/8); deny-addresses still wins.
    #[arg(
        long = "exempt-addresses",
        env = "CLUSTERSET_DNS_EXEMPT_ADDRESSES",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    pub exempt_addresses: Vec<String>,
    /// Clients that may transfer the zone (AXFR), e.g. 10.0.0.0/8,127.0.0.1; none by default (REFUSED).
    #[arg(
        long = "allow-transfer",
        env = "CLUSTERSET_DNS_ALLOW_TRANSFER",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    pub allow_transfer: Vec<String>,
    /// Secondaries told of each new serial by NOTIFY, as ADDR or ADDR:PORT (port 53 by default).
    #[arg(
        long = "notify",
        env = "CLUSTERSET_DNS_NOTIFY",
        value_name = "ADDR[:PORT]",
        value_delimiter = ','
    )]
    pub notify: Vec<String>,
    /// A YAML file of TSIG keys (- name, algorithm: hmac-sha256, secret: base64): transfers must then be signed by one; NOTIFYs are signed by the first.
    #[arg(long, env = "CLUSTERSET_DNS_TRANSFER_KEYS", value_name = "FILE")]
    pub transfer_keys: Option<PathBuf>,
    /// Versions of the zone the IXFR journal keeps for secondaries that are behind [default: 100].
    #[arg(long, env = "CLUSTERSET_DNS_IXFR_JOURNAL_VERSIONS", value_name = "N")]
    pub ixfr_journal_versions: Option<usize>,
    /// Mebibytes of records the IXFR journal keeps at most [default: 16].
    #[arg(long, env = "CLUSTERSET_DNS_IXFR_JOURNAL_MB", value_name = "MIB")]
    pub ixfr_journal_mb: Option<u64>,
    /// Mebibytes per second every zone transfer shares, so transfers never starve queries; 0 is no limit [default: 64].
    #[arg(long, env = "CLUSTERSET_DNS_TRANSFER_RATE_MB", value_name = "MIB")]
    pub transfer_rate_mb: Option<u64>,
}

/// Options of `serve`.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Zone and data options.
    #[command(flatten)]
    pub zone: ZoneArgs,
    /// UDP and TCP address to answer DNS on [default: 127.0.0.1:5353].
    #[arg(long, env = "CLUSTERSET_DNS_DNS_ADDR", value_name = "ADDR")]
    pub dns_addr: Option<SocketAddr>,
    /// Address of the admin HTTP server (/live, /ready, /metrics, /debug/clusters) [default: 127.0.0.1:9153].
    #[arg(long, env = "CLUSTERSET_DNS_ADMIN_ADDR", value_name = "ADDR")]
    pub admin_addr: Option<SocketAddr>,
    /// Live mode: kubeconfig of the local cluster [default: in-cluster configuration].
    #[arg(long, env = "CLUSTERSET_DNS_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Live mode: kubeconfig context of the local cluster [default: its current context].
    #[arg(long, env = "CLUSTERSET_DNS_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
    /// Live mode: YAML list of linked clusters, instead of Linkerd Links.
    #[arg(long, env = "CLUSTERSET_DNS_CLUSTERS", value_name = "FILE")]
    pub clusters: Option<PathBuf>,
    /// Live mode: namespace of the Linkerd Links and their credentials Secrets [default: linkerd-multicluster].
    #[arg(long, env = "CLUSTERSET_DNS_LINK_NAMESPACE", value_name = "NS")]
    pub link_namespace: Option<String>,
    /// Live mode: accept a Link Secret's kubeconfig that runs a program (exec, auth-provider) or reads files of this server; refused by default.
    #[arg(long, env = "CLUSTERSET_DNS_ALLOW_KUBECONFIG_EXEC")]
    pub allow_kubeconfig_exec: bool,
    /// Serve a cluster's names from last-known data this long after its watch broke, then SERVFAIL [default: unlimited].
    #[arg(long, env = "CLUSTERSET_DNS_MAX_STALE", value_name = "DURATION")]
    pub max_stale: Option<String>,
    /// Keep a cluster in federated answers this long after its watch broke [default: 30s].
    #[arg(long, env = "CLUSTERSET_DNS_FEDERATED_GRACE", value_name = "DURATION")]
    pub federated_grace: Option<String>,
    /// A cluster whose API server has answered nothing for this long is unreachable, whatever the cause [default: 10s].
    #[arg(long, env = "CLUSTERSET_DNS_CLUSTER_TIMEOUT", value_name = "DURATION")]
    pub cluster_timeout: Option<String>,
    /// Readiness stops waiting for a cluster's first sync after this long [default: 60s].
    #[arg(long, env = "CLUSTERSET_DNS_SYNC_TIMEOUT", value_name = "DURATION")]
    pub sync_timeout: Option<String>,
    /// Most requests in flight to one cluster's API server; more wait (a watch counts until the server accepts it) [default: 16].
    #[arg(
        long,
        env = "CLUSTERSET_DNS_MAX_INFLIGHT_PER_CLUSTER",
        value_name = "N"
    )]
    pub max_inflight_per_cluster: Option<usize>,
    /// Live mode: also run the mirror controller (writes mirror Services and EndpointSlices locally).
    #[arg(long, env = "CLUSTERSET_DNS_MIRROR")]
    pub mirror: bool,
    /// Mirror: flat-mode mirrors get no endpoints, exactly as Linkerd writes them.
    #[arg(long, env = "CLUSTERSET_DNS_LINKERD_FLAT_COMPAT")]
    pub linkerd_flat_compat: bool,
    /// Mirror: DNS domain of the linked clusters, for mirror.linkerd.io/remote-svc-fq-name [default: cluster.local].
    #[arg(long, env = "CLUSTERSET_DNS_CLUSTER_DOMAIN", value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,
    /// Mirror: namespace of the leader-election Lease [default: $POD_NAMESPACE, else clusterset-dns].
    #[arg(long, env = "CLUSTERSET_DNS_MIRROR_NAMESPACE", value_name = "NS")]
    pub mirror_namespace: Option<String>,
    /// Mirror: full resync period, which also repairs manual edits [default: 60s].
    #[arg(long, env = "CLUSTERSET_DNS_MIRROR_RESYNC", value_name = "DURATION")]
    pub mirror_resync: Option<String>,
    /// Memory for pre-encoded responses, in MiB; 0 answers every query the slow way [default: 32].
    #[arg(long, env = "CLUSTERSET_DNS_ANSWER_CACHE_MB", value_name = "MIB")]
    pub answer_cache_mb: Option<u64>,
    /// A/AAAA/SRV answers carry at most N records of their RRset, rotated, on every transport; 0: as many as fit [default: 0].
    #[arg(long, env = "CLUSTERSET_DNS_MAX_ANSWER_RECORDS", value_name = "N")]
    pub max_answer_records: Option<usize>,
    /// Log lines as text or as JSON objects (level from RUST_LOG) [default: text].
    #[arg(long, env = "CLUSTERSET_DNS_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// TCP and DNS-over-TLS connections open at once; more are closed on accept [default: 1000].
    #[arg(long, env = "CLUSTERSET_DNS_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Close a TCP/TLS connection idle this long [default: 30s].
    #[arg(long, env = "CLUSTERSET_DNS_IDLE_TIMEOUT", value_name = "DURATION")]
    pub idle_timeout: Option<String>,
    /// A TCP/TLS message or TLS handshake must arrive whole this long after its first byte [default: 2s].
    #[arg(long, env = "CLUSTERSET_DNS_MESSAGE_TIMEOUT", value_name = "DURATION")]
    pub message_timeout: Option<String>,
    /// Answers of one connection waiting for the client to read them before reading pauses [default: 128].
    #[arg(long, env = "CLUSTERSET_DNS_MAX_IN_FLIGHT", value_name = "N")]
    pub max_in_flight: Option<usize>,
    /// From a TCP/TLS query's first byte to its answer written; slower clients are cut off [default: 5s].
    #[arg(long, env = "CLUSTERSET_DNS_QUERY_TIMEOUT", value_name = "DURATION")]
    pub query_timeout: Option<String>,
    /// DNS over TLS: certificate chain (PEM); with --tls-key, enables DoT. Reloaded when the file changes.
    #[arg(long, env = "CLUSTERSET_DNS_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// DNS over TLS: private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "CLUSTERSET_DNS_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// DNS over TLS address [default: the --dns-addr IP, port 853].
    #[arg(long, env = "CLUSTERSET_DNS_TLS_ADDR", value_name = "ADDR")]
    pub tls_addr: Option<SocketAddr>,
    /// Exported services held per linked cluster; past it the newest are refused (SERVFAIL) [default: 20000].
    #[arg(
        long,
        env = "CLUSTERSET_DNS_MAX_SERVICES_PER_CLUSTER",
        value_name = "N"
    )]
    pub max_services_per_cluster: Option<usize>,
    /// Endpoint addresses held per linked cluster; past it the newest services are refused (SERVFAIL) [default: 500000].
    #[arg(
        long,
        env = "CLUSTERSET_DNS_MAX_ENDPOINTS_PER_CLUSTER",
        value_name = "N"
    )]
    pub max_endpoints_per_cluster: Option<usize>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The config file: the same names as the flags.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileConfig {
    /// `zones`.
    pub zones: Option<PathBuf>,
    /// `local-cluster`.
    pub local_cluster: Option<String>,
    /// `zone`.
    pub zone: Option<String>,
    /// `ttl`.
    pub ttl: Option<u32>,
    /// `negative-ttl`.
    pub negative_ttl: Option<u32>,
    /// `reverse-zone`: a list.
    #[serde(default)]
    pub reverse_zone: Vec<String>,
    /// `deny-addresses`.
    #[serde(default)]
    pub deny_addresses: Vec<String>,
    /// `exempt-addresses`.
    #[serde(default)]
    pub exempt_addresses: Vec<String>,
    /// `allow-transfer`.
    #[serde(default)]
    pub allow_transfer: Vec<String>,
    /// `notify`.
    #[serde(default)]
    pub notify: Vec<String>,
    /// `transfer-keys`.
    pub transfer_keys: Option<PathBuf>,
    /// `ixfr-journal-versions`.
    pub ixfr_journal_versions: Option<usize>,
    /// `ixfr-journal-mb`.
    pub ixfr_journal_mb: Option<u64>,
    /// `transfer-rate-mb`.
    pub transfer_rate_mb: Option<u64>,
    /// `ns-addr`: a list.
    #[serde(default)]
    pub ns_addr: Vec<IpAddr>,
    /// `dns-addr`.
    pub dns_addr: Option<SocketAddr>,
    /// `admin-addr`.
    pub admin_addr: Option<SocketAddr>,
    /// `kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `context`.
    pub context: Option<String>,
    /// `clusters`.
    pub clusters: Option<PathBuf>,
    /// `link-namespace`.
    pub link_namespace: Option<String>,
    /// `max-stale`.
    pub max_stale: Option<String>,
    /// `federated-grace`.
    pub federated_grace: Option<String>,
    /// `cluster-timeout`.
    pub cluster_timeout: Option<String>,
    /// `sync-timeout`.
    pub sync_timeout: Option<String>,
    /// `max-inflight-per-cluster`.
    pub max_inflight_per_cluster: Option<usize>,
    /// `allow-kubeconfig-exec`.
    pub allow_kubeconfig_exec: Option<bool>,
    /// `mirror`.
    pub mirror: Option<bool>,
    /// `mcs`.
    pub mcs: Option<bool>,
    /// `region`.
    pub region: Option<String>,
    /// `topology-zone`.
    pub topology_zone: Option<String>,
    /// `nearest-ttl`.
    pub nearest_ttl: Option<u32>,
    /// `srv-priority-tiers`.
    pub srv_priority_tiers: Option<bool>,
    /// `linkerd-flat-compat`.
    pub linkerd_flat_compat: Option<bool>,
    /// `cluster-domain`.
    pub cluster_domain: Option<String>,
    /// `mirror-namespace`.
    pub mirror_namespace: Option<String>,
    /// `mirror-resync`.
    pub mirror_resync: Option<String>,
    /// `answer-cache-mb`.
    pub answer_cache_mb: Option<u64>,
    /// `max-answer-records`.
    pub max_answer_records: Option<usize>,
    /// `log-format`: `text` or `json`.
    pub log_format: Option<LogFormat>,
    /// `max-connections`.
    pub max_connections: Option<usize>,
    /// `idle-timeout`.
    pub idle_timeout: Option<String>,
    /// `message-timeout`.
    pub message_timeout: Option<String>,
    /// `max-in-flight`.
    pub max_in_flight: Option<usize>,
    /// `query-timeout`.
    pub query_timeout: Option<String>,
    /// `tls-cert`.
    pub tls_cert: Option<PathBuf>,
    /// `tls-key`.
    pub tls_key: Option<PathBuf>,
    /// `tls-addr`.
    pub tls_addr: Option<SocketAddr>,
    /// `max-services-per-cluster`.
    pub max_services_per_cluster: Option<usize>,
    /// `max-endpoints-per-cluster`.
    pub max_endpoints_per_cluster: Option<usize>,
}

impl FileConfig {
    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_saphyr::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.without_snippet().render(),
        })
    }
}

/// Default DNS address.
pub(crate) const DEFAULT_DNS_ADDR: &str = "127.0.0.1:5353";
/// Default admin address.
pub(crate) const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:9153";
/// Default zone.
pub(crate) const DEFAULT_ZONE: &str = "clusterset.local";

/// Default namespace of Linkerd Links.
pub(crate) const DEFAULT_LINK_NAMESPACE: &str = "linkerd-multicluster";
/// Default size of the response cache, in MiB.
pub const DEFAULT_ANSWER_CACHE_MB: u64 = 32;
/// Largest response cache, in MiB.
const MAX_ANSWER_CACHE_MB: u64 = 64 * 1024;
/// Largest `max-answer-records`: more would never bind (4,095 addresses
/// fill a TCP answer).
const MAX_ANSWER_RECORDS: usize = 10_000;

/// Default sync timeout.
pub(crate) const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// Default DNS-over-TLS port (RFC 7858).
pub(crate) const DEFAULT_TLS_PORT: u16 = 853;

/// DNS over TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// Where to listen.
    pub addr: SocketAddr,
    /// Certificate chain and private key files.
    pub files: crate::dns::tls::TlsFiles,
}

/// Live-mode options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveOptions {
    /// The local cluster's kubeconfig (`None`: in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// Its context.
    pub context: Option<String>,
    /// The clusters file (`None`: Linkerd Links).
    pub clusters: Option<PathBuf>,
    /// The Links' namespace.
    pub link_namespace: String,
    /// Readiness stops waiting for a cluster after this long.
    pub sync_timeout: Duration,
    /// Most requests in flight to one cluster's API server.
    pub max_inflight_per_cluster: usize,
    /// A Link Secret's kubeconfig may run programs and read files
    /// (`allow-kubeconfig-exec`).
    pub allow_kubeconfig_exec: bool,
}

/// Mirror controller options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorOptions {
    /// Flat-mode mirrors without endpoints.
    pub linkerd_flat_compat: bool,
    /// Remote clusters' DNS domain.
    pub cluster_domain: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// Full resync period.
    pub resync: Duration,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The mirror controller, when asked for (live mode only).
    pub mirror: Option<MirrorOptions>,
    /// The zones directory (file mode).
    pub zones: Option<PathBuf>,
    /// Live mode, when no zones directory is given.
    pub live: Option<LiveOptions>,
    /// The local cluster's name.
    pub local_cluster: Option<String>,
    /// Answer settings.
    pub settings: Arc<Settings>,
    /// DNS address.
    pub dns_addr: SocketAddr,
    /// Admin address.
    pub admin_addr: SocketAddr,
    /// Bytes of pre-encoded responses to keep (0: none).
    pub answer_cache_bytes: u64,
    /// Log format.
    pub log_format: LogFormat,
    /// TCP and TLS resource limits.
    pub limits: Limits,
    /// DNS over TLS, when a certificate and key are given.
    pub tls: Option<TlsOptions>,
    /// The TSIG keys file, watched like the config file: a rotated key
    /// (a Secret's volume updated) applies without a signal.
    pub transfer_keys_file: Option<PathBuf>,
}

fn check_ttl(key: &'static str, v: u32) -> Result<u32, ConfigError> {
    if v > 3600 {
        return Err(ConfigError::Invalid {
            key,
            reason: format!("{v} is above 3600 seconds"),
        });
    }
    Ok(v)
}

fn check_max_answer_records(n: usize) -> Result<usize, ConfigError> {
    if n > MAX_ANSWER_RECORDS {
        return Err(ConfigError::Invalid {
            key: "max-answer-records",
            reason: format!("{n} is outside 0-{MAX_ANSWER_RECORDS} (0: as many as fit)"),
        });
    }
    Ok(n)
}

fn zone(key: &'static str, name: &str) -> Result<ZoneName, ConfigError> {
    ZoneName::new(name).map_err(|e| ConfigError::Invalid {
        key,
        reason: e.to_string(),
    })
}

fn reverse_zone(name: &str) -> Result<ZoneName, ConfigError> {
    let z = zone("reverse-zone", name)?;
    let text = z.text();
    let ok = if let Some(octets) = text.strip_suffix(".in-addr.arpa") {
        octets.split('.').count() <= 4
            && octets
                .split('.')
                .all(|o| o.parse::<u8>().is_ok_and(|n| n.to_string() == o))
    } else if let Some(nibbles) = text.strip_suffix(".ip6.arpa") {
        nibbles.split('.').count() <= 32
            && nibbles
                .split('.')
                .all(|n| n.len() == 1 && n.chars().all(|c| c.is_ascii_hexdigit()))
    } else {
        text == "in-addr.arpa" || text == "ip6.arpa"
    };
    if !ok {
        return Err(ConfigError::Invalid {
            key: "reverse-zone",
            reason: format!(
                "{name:?} is not an in-addr.arpa zone on an octet boundary or an ip6.arpa zone on a nibble boundary"
            ),
        });
    }
    Ok(z)
}

/// Parses a duration option (`30s`, `5m`, `1h30m`, `250ms`; a bare number
/// is seconds). `unlimited` means no limit.
/// The shortest `--cluster-timeout`: the heartbeat asks every quarter of
/// it, and a quarter second between requests is already more than an API
/// server should get from one client for liveness.
const MIN_CLUSTER_TIMEOUT: Duration = Duration::from_secs(1);

fn check_cluster_timeout(t: Duration) -> Result<Duration, ConfigError> {
    if t < MIN_CLUSTER_TIMEOUT {
        return Err(ConfigError::Invalid {
            key: "cluster-timeout",
            reason: format!("must be at least 1s, not {t:?}"),
        });
    }
    Ok(t)
}

fn duration(key: &'static str, v: Option<&str>) -> Result<Option<Duration>, ConfigError> {
    let Some(v) = v else { return Ok(None) };
    if v == "unlimited" && key == "max-stale" {
        return Ok(None);
    }
    crate::vocab::duration::parse_go_duration(v)
        .map(Some)
        .map_err(|reason| ConfigError::Invalid { key, reason })
}

impl Config {
    /// The options that differ between `self` (running) and `new` and only
    /// take effect after a restart: addresses, the source, the mirror, the
    /// cache size, the log format. Everything in [`Settings`] reloads.
    pub fn restart_only_changes(&self, new: &Self) -> Vec<&'static str> {
        let mut changed = Vec::new();
        let mut check = |key, differs: bool| {
            if differs {
                changed.push(key);
            }
        };
        check("dns-addr", self.dns_addr != new.dns_addr);
        check("admin-addr", self.admin_addr != new.admin_addr);
        check("zones", self.zones != new.zones);
        check("live options", self.live != new.live);
        check("mirror options", self.mirror != new.mirror);
        check("local-cluster", self.local_cluster != new.local_cluster);
        check(
            "answer-cache-mb",
            self.answer_cache_bytes != new.answer_cache_bytes,
        );
        check("log-format", self.log_format != new.log_format);
        check("connection limits", self.limits != new.limits);
        check("tls options", self.tls != new.tls);
        check(
            "mcs (live mode: its watches start with the process)",
            self.zones.is_none() && self.settings.mcs != new.settings.mcs,
        );
        changed
    }

    /// The answer settings a reload to `new` applies now: `new`'s, except
    /// what [`Self::restart_only_changes`] keeps — in live mode `mcs`, since
    /// the MCS watches start and stop only with the process, and MCS names
    /// without them would come and go wrong.
    pub fn reloaded_settings(&self, new: &Self) -> Arc<Settings> {
        if self.zones.is_none() && self.settings.mcs != new.settings.mcs {
            let mut kept = (*new.settings).clone();
            kept.mcs = self.settings.mcs;
            Arc::new(kept)
        } else {
            new.settings.clone()
        }
    }

    /// Resolves `serve` options: flags and env (already merged by clap) over
    /// the config file over defaults.
    pub fn resolve(args: &ServeArgs) -> Result<Self, ConfigError> {
        Self::resolve_with(args, false)
    }

    fn resolve_with(args: &ServeArgs, need_zones: bool) -> Result<Self, ConfigError> {
        let file = match &args.zone.config {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        if need_zones && args.zone.zones.is_none() && file.zones.is_none() {
            return Err(ConfigError::Missing("zones", "CLUSTERSET_DNS_ZONES"));
        }
        Self::merge(args, file)
    }

    /// Resolves `check`/`dump` options (no addresses given); they need a
    /// zones directory.
    pub fn resolve_zone(args: &ZoneArgs) -> Result<Self, ConfigError> {
        Self::resolve_with(
            &ServeArgs {
                zone: args.clone(),
                ..ServeArgs::default()
            },
            true,
        )
    }

    /// Flags and env over the file, section by section.
    fn merge(args: &ServeArgs, file: FileConfig) -> Result<Self, ConfigError> {
        let FileSections {
            zones,
            local_cluster,
            live: live_file,
            mirror: mirror_file,
            answers: answers_file,
            dns_addr,
            admin_addr,
            answer_cache_mb,
            log_format,
            limit_counts,
            limit_times,
            tls: (tls_cert, tls_key, tls_addr),
        } = file.into_sections();
        let zones = args.zone.zones.clone().or(zones);
        let local_cluster = args.zone.local_cluster.clone().or(local_cluster);
        if let Some(name) = &local_cluster {
            check_cluster_name(name).map_err(|e| ConfigError::Invalid {
                key: "local-cluster",
                reason: e.to_string(),
            })?;
        }
        let live = live_options(args, (zones.is_some(), local_cluster.is_some()), live_file)?;
        let mirror = mirror_options(args, live.is_some(), mirror_file)?;
        let (dns_addr, admin_addr) =
            addresses(args.dns_addr.or(dns_addr), args.admin_addr.or(admin_addr))?;
        let transfer_keys_file = (args.zone.transfer_keys.clone())
            .or_else(|| answers_file.transfers.transfer_keys.clone());
        let settings = settings(args, dns_addr, answers_file)?;
        let answer_cache_mb = args
            .answer_cache_mb
            .or(answer_cache_mb)
            .unwrap_or(DEFAULT_ANSWER_CACHE_MB);
        if answer_cache_mb > MAX_ANSWER_CACHE_MB {
            return Err(ConfigError::Invalid {
                key: "answer-cache-mb",
                reason: format!("{answer_cache_mb} is above {MAX_ANSWER_CACHE_MB} MiB"),
            });
        }
        let limits = limits(args, limit_counts, limit_times)?;
        let tls = tls_options(
            args.tls_cert.clone().or(tls_cert),
            args.tls_key.clone().or(tls_key),
            args.tls_addr.or(tls_addr),
            dns_addr,
        )?;
        Ok(Self {
            mirror,
            zones,
            live,
            local_cluster,
            settings: Arc::new(settings),
            dns_addr,
            admin_addr,
            answer_cache_bytes: answer_cache_mb * 1024 * 1024,
            log_format: args.log_format.or(log_format).unwrap_or_default(),
            limits,
            tls,
            transfer_keys_file,
        })
    }
}

/// The config file's keys grouped by the section of [`Config::merge`] that
/// reads them.
struct FileSections {
    zones: Option<PathBuf>,
    local_cluster: Option<String>,
    live: FileLive,
    mirror: FileMirror,
    answers: FileAnswers,
    dns_addr: Option<SocketAddr>,
    admin_addr: Option<SocketAddr>,
    answer_cache_mb: Option<u64>,
    log_format: Option<LogFormat>,
    limit_counts: (Option<usize>, Option<usize>),
    limit_times: [Option<String>; 3],
    tls: (Option<PathBuf>, Option<PathBuf>, Option<SocketAddr>),
}

impl FileConfig {
    /// Takes the file apart field by field, so that a new key cannot be
    /// forgotten by [`Config::merge`].
    // One line per key, twice: the exhaustive destructuring is the point.
    #[allow(clippy::too_many_lines)]
    fn into_sections(self) -> FileSections {
        let Self {
            zones,
            local_cluster,
            zone,
            ttl,
            negative_ttl,
            reverse_zone,
            deny_addresses,
            exempt_addresses,
            allow_transfer,
            notify,
            transfer_keys,
            ixfr_journal_versions,
            ixfr_journal_mb,
            transfer_rate_mb,
            ns_addr,
            dns_addr,
            admin_addr,
            kubeconfig,
            context,
            clusters,
            link_namespace,
            max_stale,
            federated_grace,
            cluster_timeout,
            sync_timeout,
            max_inflight_per_cluster,
            allow_kubeconfig_exec,
            mirror,
            linkerd_flat_compat,
            cluster_domain,
            mirror_namespace,
            mirror_resync,
            answer_cache_mb,
            max_answer_records,
            mcs,
            region,
            topology_zone,
            nearest_ttl,
            srv_priority_tiers,
            log_format,
            max_connections,
            idle_timeout,
            message_timeout,
            max_in_flight,
            query_timeout,
            tls_cert,
            tls_key,
            tls_addr,
            max_services_per_cluster,
            max_endpoints_per_cluster,
        } = self;
        FileSections {
            zones,
            local_cluster,
            live: FileLive {
                kubeconfig,
                context,
                clusters,
                link_namespace,
                sync_timeout,
                max_inflight_per_cluster,
                allow_kubeconfig_exec,
            },
            mirror: FileMirror {
                mirror,
                linkerd_flat_compat,
                cluster_domain,
                mirror_namespace,
                mirror_resync,
            },
            answers: FileAnswers {
                zone,
                ttl,
                negative_ttl,
                reverse_zone,
                deny_addresses,
                exempt_addresses,
                transfers: FileTransfers {
                    allow_transfer,
                    notify,
                    transfer_keys,
                    ixfr_journal_versions,
                    ixfr_journal_mb,
                    transfer_rate_mb,
                },
                ns_addr,
                max_stale,
                federated_grace,
                cluster_timeout,
                max_answer_records,
                max_services_per_cluster,
                max_endpoints_per_cluster,
                mcs,
                locality: FileLocality {
                    region,
                    topology_zone,
                    nearest_ttl,
                    srv_priority_tiers,
                },
            },
            dns_addr,
            admin_addr,
            answer_cache_mb,
            log_format,
            limit_counts: (max_connections, max_in_flight),
            limit_times: [idle_timeout, message_timeout, query_timeout],
            tls: (tls_cert, tls_key, tls_addr),
        }
    }
}

/// The live-mode keys of the config file.
struct FileLive {
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    clusters: Option<PathBuf>,
    link_namespace: Option<String>,
    sync_timeout: Option<String>,
    max_inflight_per_cluster: Option<usize>,
    allow_kubeconfig_exec: Option<bool>,
}

/// Live mode's options, or `None` in file mode. `(file_mode, local_named)`:
/// whether a zones directory and a local cluster name were given.
fn live_options(
    args: &ServeArgs,
    (file_mode, local_named): (bool, bool),
    file: FileLive,
) -> Result<Option<LiveOptions>, ConfigError> {
    let kubeconfig = args.kubeconfig.clone().or(file.kubeconfig);
    let context = args.context.clone().or(file.context);
    let clusters = args.clusters.clone().or(file.clusters);
    let link_namespace = args.link_namespace.clone().or(file.link_namespace);
    if file_mode {
        let live_flags = [
            ("kubeconfig", kubeconfig.is_some()),
            ("context", context.is_some()),
            ("clusters", clusters.is_some()),
            ("link-namespace", link_namespace.is_some()),
            (
                "allow-kubeconfig-exec",
                args.allow_kubeconfig_exec || file.allow_kubeconfig_exec == Some(true),
            ),
        ];
        if let Some((key, _)) = live_flags.iter().find(|(_, set)| *set) {
            return Err(ConfigError::Invalid {
                key,
                reason: "is a live-mode option; it cannot be combined with --zones (file mode)"
                    .into(),
            });
        }
        return Ok(None);
    }
    if !local_named {
        return Err(ConfigError::Invalid {
            key: "local-cluster",
            reason:
                "is required in live mode (no --zones given): name the cluster this server runs in"
                    .into(),
        });
    }
    if let Some(ns) = &link_namespace
        && !is_dns_label(ns)
    {
        return Err(ConfigError::Invalid {
            key: "link-namespace",
            reason: format!("{ns:?} is not a namespace name"),
        });
    }
    Ok(Some(LiveOptions {
        kubeconfig,
        context,
        clusters,
        link_namespace: link_namespace.unwrap_or_else(|| DEFAULT_LINK_NAMESPACE.to_owned()),
        sync_timeout: duration(
            "sync-timeout",
            args.sync_timeout
                .as_deref()
                .or(file.sync_timeout.as_deref()),
        )?
        .unwrap_or(DEFAULT_SYNC_TIMEOUT),
        max_inflight_per_cluster: match args
            .max_inflight_per_cluster
            .or(file.max_inflight_per_cluster)
        {
            None => crate::k8s::layer::DEFAULT_MAX_INFLIGHT,
            Some(n) if (1..=MAX_INFLIGHT).contains(&n) => n,
            Some(n) => {
                return Err(ConfigError::Invalid {
                    key: "max-inflight-per-cluster",
                    reason: format!("{n} is outside 1-{MAX_INFLIGHT}"),
                });
            }
        },
        allow_kubeconfig_exec: args.allow_kubeconfig_exec
            || file.allow_kubeconfig_exec == Some(true),
    }))
}

/// The mirror controller's keys of the config file.
struct FileMirror {
    mirror: Option<bool>,
    linkerd_flat_compat: Option<bool>,
    cluster_domain: Option<String>,
    mirror_namespace: Option<String>,
    mirror_resync: Option<String>,
}

/// The mirror controller's options, or `None` when it is off.
fn mirror_options(
    args: &ServeArgs,
    live: bool,
    file: FileMirror,
) -> Result<Option<MirrorOptions>, ConfigError> {
    if !(args.mirror || file.mirror == Some(true)) {
        return Ok(None);
    }
    if !live {
        return Err(ConfigError::Invalid {
            key: "mirror",
            reason: "needs live mode: the mirror writes into the local cluster, so give --local-cluster (and --kubeconfig outside a cluster) instead of --zones".into(),
        });
    }
    let namespace = args
        .mirror_namespace
        .clone()
        .or(file.mirror_namespace)
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "clusterset-dns".to_owned());
    if !is_dns_label(&namespace) {
        return Err(ConfigError::Invalid {
            key: "mirror-namespace",
            reason: format!("{namespace:?} is not a namespace name"),
        });
    }
    let cluster_domain = args
        .cluster_domain
        .clone()
        .or(file.cluster_domain)
        .unwrap_or_else(|| "cluster.local".to_owned());
    zone("cluster-domain", &cluster_domain)?;
    Ok(Some(MirrorOptions {
        linkerd_flat_compat: args.linkerd_flat_compat || file.linkerd_flat_compat == Some(true),
        cluster_domain,
        namespace,
        resync: duration(
            "mirror-resync",
            args.mirror_resync
                .as_deref()
                .or(file.mirror_resync.as_deref()),
        )?
        .unwrap_or(Duration::from_secs(60)),
    }))
}

/// The DNS and admin listen addresses, defaults filled in.
fn addresses(
    dns_addr: Option<SocketAddr>,
    admin_addr: Option<SocketAddr>,
) -> Result<(SocketAddr, SocketAddr), ConfigError> {
    let or_default = |key, v: Option<SocketAddr>, default: &str| match v {
        Some(a) => Ok(a),
        None => default.parse().map_err(|_| ConfigError::Invalid {
            key,
            reason: "bad default".into(),
        }),
    };
    Ok((
        or_default("dns-addr", dns_addr, DEFAULT_DNS_ADDR)?,
        or_default("admin-addr", admin_addr, DEFAULT_ADMIN_ADDR)?,
    ))
}

/// The config file's keys that shape answers (all of them reload).
struct FileAnswers {
    zone: Option<String>,
    ttl: Option<u32>,
    negative_ttl: Option<u32>,
    reverse_zone: Vec<String>,
    deny_addresses: Vec<String>,
    exempt_addresses: Vec<String>,
    transfers: FileTransfers,
    ns_addr: Vec<IpAddr>,
    max_stale: Option<String>,
    federated_grace: Option<String>,
    cluster_timeout: Option<String>,
    max_answer_records: Option<usize>,
    max_services_per_cluster: Option<usize>,
    max_endpoints_per_cluster: Option<usize>,
    mcs: Option<bool>,
    locality: FileLocality,
}

/// The config file's zone-transfer keys (docs/transfer.md).
struct FileTransfers {
    allow_transfer: Vec<String>,
    notify: Vec<String>,
    transfer_keys: Option<PathBuf>,
    ixfr_journal_versions: Option<usize>,
    ixfr_journal_mb: Option<u64>,
    transfer_rate_mb: Option<u64>,
}

/// The config file's locality keys (docs/locality.md).
struct FileLocality {
    region: Option<String>,
    topology_zone: Option<String>,
    nearest_ttl: Option<u32>,
    srv_priority_tiers: Option<bool>,
}

/// The locality settings: flags over the file over defaults.
fn locality(a: &ZoneArgs, file: FileLocality, settings: &mut Settings) -> Result<(), ConfigError> {
    let region = a.region.as_deref().or(file.region.as_deref());
    let zone = a.topology_zone.as_deref().or(file.topology_zone.as_deref());
    let invalid = |key| {
        move |e: PlaceError| ConfigError::Invalid {
            key,
            reason: e.to_string(),
        }
    };
    settings.local_place = Place {
        region: region
            .map(|r| place_value("region", r))
            .transpose()
            .map_err(invalid("region"))?,
        zone: zone
            .map(|z| place_value("zone", z))
            .transpose()
            .map_err(invalid("topology-zone"))?,
    };
    settings.nearest_ttl = check_ttl(
        "nearest-ttl",
        a.nearest_ttl.or(file.nearest_ttl).unwrap_or(5),
    )?
    .min(settings.ttl);
    settings.srv_priority_tiers = a.srv_priority_tiers || file.srv_priority_tiers == Some(true);
    Ok(())
}

/// The answer settings: flags over the file over defaults. Without a
/// configured NS address the server names its own DNS address, unless it
/// listens on every address.
fn settings(
    args: &ServeArgs,
    dns_addr: SocketAddr,
    file: FileAnswers,
) -> Result<Settings, ConfigError> {
    let a = &args.zone;
    let zone_name = zone(
        "zone",
        a.zone
            .as_deref()
            .or(file.zone.as_deref())
            .unwrap_or(DEFAULT_ZONE),
    )?;
    let ttl = check_ttl("ttl", a.ttl.or(file.ttl).unwrap_or(5))?;
    let negative_ttl = check_ttl(
        "negative-ttl",
        a.negative_ttl.or(file.negative_ttl).unwrap_or(ttl),
    )?;
    let reverse_names = if a.reverse_zones.is_empty() {
        file.reverse_zone
    } else {
        a.reverse_zones.clone()
    };
    let mut ns_addrs = if a.ns_addrs.is_empty() {
        file.ns_addr
    } else {
        a.ns_addrs.clone()
    };
    if ns_addrs.is_empty() && !dns_addr.ip().is_unspecified() {
        ns_addrs.push(dns_addr.ip());
    }
    let mut settings = Settings::new(zone_name);
    settings.ttl = ttl;
    settings.negative_ttl = negative_ttl;
    settings.reverse_zones = reverse_names
        .iter()
        .map(|z| reverse_zone(z))
        .collect::<Result<Vec<_>, _>>()?;
    settings.ns_addrs = ns_addrs;
    settings.stale_ttl = settings.stale_ttl.min(ttl);
    settings.max_stale = duration(
        "max-stale",
        args.max_stale.as_deref().or(file.max_stale.as_deref()),
    )?;
    if let Some(g) = duration(
        "federated-grace",
        args.federated_grace
            .as_deref()
            .or(file.federated_grace.as_deref()),
    )? {
        settings.federated_grace = g;
    }
    if let Some(t) = duration(
        "cluster-timeout",
        args.cluster_timeout
            .as_deref()
            .or(file.cluster_timeout.as_deref()),
    )? {
        settings.cluster_timeout = check_cluster_timeout(t)?;
    }
    settings.budget = budget(
        args.max_services_per_cluster
            .or(file.max_services_per_cluster),
        args.max_endpoints_per_cluster
            .or(file.max_endpoints_per_cluster),
    )?;
    settings.max_answer_records = check_max_answer_records(
        args.max_answer_records
            .or(file.max_answer_records)
            .unwrap_or(0),
    )?;
    settings.mcs = a.mcs || file.mcs == Some(true);
    locality(a, file.locality, &mut settings)?;
    settings.trust = trust_settings(
        pick(&a.deny_addresses, file.deny_addresses),
        pick(&a.exempt_addresses, file.exempt_addresses),
    )?;
    transfers(a, file.transfers, &mut settings)?;
    Ok(settings)
}

/// The zone-transfer settings: `allow-transfer`, `notify`,
/// `transfer-keys`, the IXFR journal's size and the transfer rate from
/// the flags, else the file's, else the defaults.
fn transfers(
    a: &ZoneArgs,
    file: FileTransfers,
    settings: &mut Settings,
) -> Result<(), ConfigError> {
    let FileTransfers {
        allow_transfer: allow,
        notify,
        transfer_keys: keys,
        ixfr_journal_versions,
        ixfr_journal_mb,
        transfer_rate_mb,
    } = file;
    const MIB: u64 = 1024 * 1024;
    let journal = &mut settings.ixfr_journal;
    journal.versions = a
        .ixfr_journal_versions
        .or(ixfr_journal_versions)
        .unwrap_or(journal.versions);
    let mb = a.ixfr_journal_mb.or(ixfr_journal_mb);
    journal.bytes = mb.map_or(journal.bytes, |mb| mb.saturating_mul(MIB));
    settings.transfer_rate = a
        .transfer_rate_mb
        .or(transfer_rate_mb)
        .unwrap_or(DEFAULT_TRANSFER_RATE_MB)
        .saturating_mul(MIB);
    let allow = pick(&a.allow_transfer, allow);
    settings.allow_transfer =
        parse_cidrs(allow.iter().map(String::as_str)).map_err(|e| ConfigError::Invalid {
            key: "allow-transfer",
            reason: e.to_string(),
        })?;
    settings.notify = notify_targets(&pick(&a.notify, notify))?;
    if let Some(path) = a.transfer_keys.as_ref().or(keys.as_ref()) {
        settings.transfer_keys = transfer_keys(path)?;
    }
    Ok(())
}

/// The default `transfer-rate-mb`: well above what a secondary of a
/// million endpoints needs to load in seconds, well below what would take
/// a core from the queries (docs/transfer.md, Figures).
const DEFAULT_TRANSFER_RATE_MB: u64 = 64;

/// One key of the `transfer-keys` file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    name: String,
    algorithm: String,
    secret: String,
}

/// The TSIG keys of `path` (re-read at every reload), each checked: a DNS
/// name, an algorithm we have, a base64 secret of at least 16 octets.
fn transfer_keys(path: &Path) -> Result<Vec<TsigKey>, ConfigError> {
    let bad = |reason: String| ConfigError::Invalid {
        key: "transfer-keys",
        reason: format!("{}: {reason}", path.display()),
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let entries: Vec<KeyEntry> = serde_saphyr::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let mut keys: Vec<TsigKey> = Vec::new();
    for e in entries {
        let name = e.name.trim_end_matches('.').to_ascii_lowercase();
        if ZoneName::new(&name).is_err() || keys.iter().any(|k| k.name == name) {
            return Err(bad(format!(
                "key name {:?} is not a DNS name, or is given twice",
                e.name
            )));
        }
        let algorithm = TsigAlgorithm::parse(&e.algorithm).ok_or_else(|| {
            bad(format!(
                "key {name}: algorithm {:?} is neither hmac-sha256 nor hmac-sha512",
                e.algorithm
            ))
        })?;
        let secret = base64::engine::general_purpose::STANDARD
            .decode(e.secret.trim())
            .map_err(|_| bad(format!("key {name}: the secret is not base64")))?;
        if secret.len() < 16 {
            return Err(bad(format!(
                "key {name}: the secret is shorter than 16 octets"
            )));
        }
        keys.push(TsigKey {
            name,
            algorithm,
            secret,
        });
    }
    Ok(keys)
}

/// The `notify` targets: `ADDR` (port 53) or `ADDR:PORT`, IPv6 as
/// `[ADDR]:PORT` or bare.
fn notify_targets(list: &[String]) -> Result<Vec<SocketAddr>, ConfigError> {
    list.iter()
        .flat_map(|s| s.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<SocketAddr>()
                .or_else(|_| s.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
                .map_err(|_| ConfigError::Invalid {
                    key: "notify",
                    reason: format!("{s:?} is neither ADDR nor ADDR:PORT"),
                })
        })
        .collect()
}

/// A list option: the flag's (or env's) when given, else the file's.
fn pick(flag: &[String], file: Vec<String>) -> Vec<String> {
    if flag.is_empty() { file } else { flag.to_vec() }
}

/// The operator's trust settings: `deny-addresses`, `exempt-addresses`,
/// and our own namespace (the pod's, from `POD_NAMESPACE` as the deploy
/// files set it, else theirs), which no cluster exports from.
fn trust_settings(deny: Vec<String>, exempt: Vec<String>) -> Result<TrustSettings, ConfigError> {
    let cidrs = |key, list: Vec<String>| {
        parse_cidrs(list.iter().map(String::as_str)).map_err(|e| ConfigError::Invalid {
            key,
            reason: e.to_string(),
        })
    };
    let own_namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|n| is_dns_label(n))
        .unwrap_or_else(|| DEFAULT_OWN_NAMESPACE.to_owned());
    Ok(TrustSettings {
        deny_addresses: cidrs("deny-addresses", deny)?,
        exempt_addresses: cidrs("exempt-addresses", exempt)?,
        own_namespace: own_namespace.into(),
    })
}

/// DNS over TLS: on when both a certificate and a key are given.
fn tls_options(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    addr: Option<SocketAddr>,
    dns_addr: SocketAddr,
) -> Result<Option<TlsOptions>, ConfigError> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsOptions {
            addr: addr.unwrap_or_else(|| SocketAddr::new(dns_addr.ip(), DEFAULT_TLS_PORT)),
            files: crate::dns::tls::TlsFiles { cert, key },
        })),
        (None, None) if addr.is_some() => Err(ConfigError::Invalid {
            key: "tls-addr",
            reason: "needs tls-cert and tls-key".into(),
        }),
        (None, None) => Ok(None),
        (Some(_), None) => Err(ConfigError::Missing("tls-key", "CLUSTERSET_DNS_TLS_KEY")),
        (None, Some(_)) => Err(ConfigError::Missing("tls-cert", "CLUSTERSET_DNS_TLS_CERT")),
    }
}

/// The per-cluster budget: the given limits over the defaults.
fn budget(services: Option<usize>, endpoints: Option<usize>) -> Result<Budget, ConfigError> {
    let check = |key, v: Option<usize>, max: usize, default: usize| match v {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ConfigError::Invalid {
            key,
            reason: format!("{n} is outside 1-{max}"),
        }),
    };
    let defaults = Budget::default();
    Ok(Budget {
        max_services: check(
            "max-services-per-cluster",
            services,
            10_000_000,
            defaults.max_services,
        )?,
        max_endpoints: check(
            "max-endpoints-per-cluster",
            endpoints,
            1_000_000_000,
            defaults.max_endpoints,
        )?,
    })
}

/// Resolves the connection limits: flags over the file's
/// `(max-connections, max-in-flight)` and
/// `[idle-timeout, message-timeout, query-timeout]` over the defaults.
fn limits(
    args: &ServeArgs,
    (max_connections, max_in_flight): (Option<usize>, Option<usize>),
    [idle, message, query]: [Option<String>; 3],
) -> Result<Limits, ConfigError> {
    let defaults = Limits::default();
    let count = |key, v: Option<usize>, default: usize| match v {
        None => Ok(default),
        Some(n) if (1..=1_000_000).contains(&n) => Ok(n),
        Some(n) => Err(ConfigError::Invalid {
            key,
            reason: format!("{n} is outside 1-1000000"),
        }),
    };
    let time = |key, flag: &Option<String>, file: Option<String>, default: Duration| match duration(
        key,
        flag.as_deref().or(file.as_deref()),
    )? {
        None => Ok(default),
        Some(d) if d.is_zero() || d > Duration::from_secs(3600) => Err(ConfigError::Invalid {
            key,
            reason: format!("{d:?} is outside 1ms-1h"),
        }),
        Some(d) => Ok(d),
    };
    Ok(Limits {
        max_connections: count(
            "max-connections",
            args.max_connections.or(max_connections),
            defaults.max_connections,
        )?,
        max_in_flight: count(
            "max-in-flight",
            args.max_in_flight.or(max_in_flight),
            defaults.max_in_flight,
        )?,
        idle_timeout: time(
            "idle-timeout",
            &args.idle_timeout,
            idle,
            defaults.idle_timeout,
        )?,
        message_timeout: time(
            "message-timeout",
            &args.message_timeout,
            message,
            defaults.message_timeout,
        )?,
        query_timeout: time(
            "query-timeout",
            &args.query_timeout,
            query,
            defaults.query_timeout,
        )?,
    })
}

#[cfg(test)]
mod tests;
