//! One simulated cluster at run time: its listener (which can be stopped and restarted), its
//! tokens, RBAC policy, fault switches, request counters and audit log.
//!
//! It owns connection handling (TLS, HTTP/1.1) and the fault and observability state that the
//! request path reads. Request semantics live in `api`; storage in `store`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::rbac::{Policy, UserInfo};
use crate::store::{Store, StoreConfig};
use crate::tls;

/// Fault switches, read on every request.
#[derive(Debug, Default)]
pub struct Faults {
    latency_ms: AtomicU64,
    fail_next: AtomicU32,
    fail_code: AtomicU16,
    retry_after: AtomicU32,
}

/// An injected failure for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 500 InternalError.
    Internal,
    /// 429 TooManyRequests with this Retry-After.
    TooMany(u32),
}

impl Faults {
    /// Added delay before each request is served.
    pub fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms.load(Ordering::Relaxed))
    }

    /// Takes one pending failure, if any.
    pub fn take_failure(&self) -> Option<Failure> {
        self.fail_next
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .ok()?;
        Some(match self.fail_code.load(Ordering::Relaxed) {
            429 => Failure::TooMany(self.retry_after.load(Ordering::Relaxed)),
            _ => Failure::Internal,
        })
    }
}

/// One request, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditEntry {
    /// The authenticated user (`system:anonymous` for a rejected token).
    pub user: String,
    /// kube verb: get, list, watch, create, update, patch, delete, deletecollection; or the
    /// lower-case HTTP method for non-resource paths.
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    /// Resource plural, or the path for non-resource requests.
    pub resource: String,
    /// Subresource, e.g. `status`.
    pub subresource: String,
    /// Namespace, `""` when cluster-wide.
    pub namespace: String,
    /// Object name, `""` for collections.
    pub name: String,
    /// The HTTP status sent.
    pub code: u16,
}

/// Settings shared by all clusters of one kubesim.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// Storage settings.
    pub store: StoreConfig,
    /// How often an idle watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Default watch length when the client sets no timeoutSeconds.
    pub watch_timeout: Duration,
    /// Serve the Linkerd Link CRD (`false`: as in a cluster without Linkerd
    /// multicluster, its group is absent and its paths are 404).
    pub link_crd: bool,
    /// Serve the MCS API CRDs, ServiceExport and ServiceImport in `multicluster.x-k8s.io`
    /// (`false`: as in a cluster without mcs-api installed).
    pub mcs_crds: bool,
    /// Serve the About API CRD, ClusterProperty in `about.k8s.io` (`false`: as in a cluster
    /// without about-api installed).
    pub about_crd: bool,
}

impl ClusterSettings {
    /// The API groups of CRDs these settings leave uninstalled.
    pub fn uninstalled_groups(&self) -> Vec<&'static str> {
        [
            (self.link_crd, "multicluster.linkerd.io"),
            (self.mcs_crds, "multicluster.x-k8s.io"),
            (self.about_crd, "about.k8s.io"),
        ]
        .into_iter()
        .filter(|(installed, _)| !installed)
        .map(|(_, group)| group)
        .collect()
    }
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            store: StoreConfig::default(),
            bookmark_interval: Duration::from_secs(10),
            watch_timeout: Duration::from_secs(1800),
            link_crd: true,
            mcs_crds: true,
            about_crd: true,
        }
    }
}

/// A running simulated cluster.
pub struct Cluster {
    /// The cluster's name.
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Settings.
    pub settings: ClusterSettings,
    store: Mutex<Store>,
    tokens: RwLock<HashMap<String, UserInfo>>,
    admin_token: RwLock<String>,
    policy: RwLock<Option<Arc<Policy>>>,
    /// Fault switches.
    pub faults: Faults,
    watch_cut: Mutex<CancellationToken>,
    listening: Mutex<Option<CancellationToken>>,
    tls: Option<Arc<rustls::ServerConfig>>,
    ca_pem: Option<String>,
    kubeconfig: PathBuf,
    counters: Mutex<BTreeMap<(String, String), u64>>,
    audit: Mutex<Vec<AuditEntry>>,
    /// CRD groups installed since the start ([`Cluster::install_crds`]).
    installed: Mutex<BTreeSet<String>>,
}

/// Names the cluster and where it serves; leaves out the store (possibly large) and the
/// bearer tokens (secrets).
impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .field("addr", &self.addr)
            .field("tls", &self.tls.is_some())
            .field("kubeconfig", &self.kubeconfig)
            .finish_non_exhaustive()
    }
}

/// Errors starting or restarting a cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Binding the listener failed.
    #[error("cluster {cluster}: binding {addr}: {source}")]
    Bind {
        /// Cluster name.
        cluster: String,
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// Certificates or kubeconfig.
    #[error("cluster {cluster}: {source}")]
    Tls {
        /// Cluster name.
        cluster: String,
        /// Cause.
        source: tls::TlsError,
    },
}

const ADMIN_USER: &str = "kubesim-admin";

fn new_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock is a kubesim bug; keep serving the data as it is.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Cluster {
    /// Binds `addr` (port 0 picks one), writes `<dir>/<name>.kubeconfig` and starts serving.
    pub(crate) async fn start(
        name: &str,
        addr: SocketAddr,
        authority: Option<&tls::Authority>,
        dir: &std::path::Path,
        settings: ClusterSettings,
    ) -> Result<Arc<Cluster>, ClusterError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ClusterError::Bind {
                cluster: name.to_owned(),
                addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ClusterError::Bind {
            cluster: name.to_owned(),
            addr,
            source,
        })?;
        let tls_err = |source| ClusterError::Tls {
            cluster: name.to_owned(),
            source,
        };
        let tls = match authority {
            Some(a) => Some(a.server_config(name, addr.ip()).map_err(tls_err)?),
            None => None,
        };
        let token = new_token();
        let mut tokens = HashMap::new();
        tokens.insert(
            token.clone(),
            UserInfo {
                name: ADMIN_USER.to_owned(),
                groups: vec![
                    "system:masters".to_owned(),
                    "system:authenticated".to_owned(),
                ],
            },
        );
        let cluster = Arc::new(Cluster {
            name: name.to_owned(),
            addr,
            store: Mutex::new(Store::new(&settings.store)),
            settings,
            tokens: RwLock::new(tokens),
            admin_token: RwLock::new(token),
            policy: RwLock::new(None),
            faults: Faults::default(),
            watch_cut: Mutex::new(CancellationToken::new()),
            listening: Mutex::new(None),
            tls,
            ca_pem: authority.map(|a| a.ca_pem.clone()),
            kubeconfig: dir.join(format!("{name}.kubeconfig")),
            counters: Mutex::new(BTreeMap::new()),
            audit: Mutex::new(Vec::new()),
            installed: Mutex::new(BTreeSet::new()),
        });
        cluster.write_kubeconfig().map_err(tls_err)?;
        cluster.serve(listener);
        Ok(cluster)
    }

    /// Installs the CRDs of API group `group` now, as a `kubectl apply` of
    /// their manifests would: the group appears in discovery and its paths
    /// serve. Only the groups [`ClusterSettings`] can leave uninstalled
    /// have any to install.
    pub fn install_crds(&self, group: &str) {
        lock(&self.installed).insert(group.to_owned());
    }

    /// The API groups of CRDs not installed now: those the settings leave
    /// out, less those installed since.
    pub fn uninstalled_groups(&self) -> Vec<&'static str> {
        let installed = lock(&self.installed);
        self.settings
            .uninstalled_groups()
            .into_iter()
            .filter(|g| !installed.contains(*g))
            .collect()
    }

    /// `https://127.0.0.1:port` (or `http://` without TLS).
    pub fn server_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        match self.addr {
            SocketAddr::V4(a) => format!("{scheme}://{a}"),
            SocketAddr::V6(a) => format!("{scheme}://[{}]:{}", a.ip(), a.port()),
        }
    }

    /// The admin kubeconfig written for this cluster.
    pub fn kubeconfig_path(&self) -> &std::path::Path {
        &self.kubeconfig
    }

    /// The PEM of the CA that signed this cluster's certificate (None over plain HTTP).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The current admin token (user `kubesim-admin`, group `system:masters`).
    pub fn admin_token(&self) -> String {
        self.admin_token
            .read()
            .map(|t| t.clone())
            .unwrap_or_default()
    }

    /// Kubeconfig text for `token`.
    pub fn kubeconfig_for(&self, user: &str, token: &str) -> String {
        tls::kubeconfig(
            &self.name,
            &self.server_url(),
            self.ca_pem.as_deref(),
            user,
            token,
            "default",
        )
    }

    fn write_kubeconfig(&self) -> Result<(), tls::TlsError> {
        let text = self.kubeconfig_for(ADMIN_USER, &self.admin_token());
        tls::write_private(&self.kubeconfig, &text)
    }

    /// Issues a bearer token for ServiceAccount `namespace/name` (user
    /// `system:serviceaccount:<ns>:<name>` with the ServiceAccount groups).
    pub fn issue_service_account_token(&self, namespace: &str, name: &str) -> String {
        let token = new_token();
        let user = UserInfo {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_owned(),
            ],
        };
        if let Ok(mut t) = self.tokens.write() {
            t.insert(token.clone(), user);
        }
        token
    }

    /// Replaces the admin token: the old one gets 401 from now on. Rewrites the kubeconfig.
    pub fn rotate_admin_token(&self) -> Result<String, tls::TlsError> {
        let token = new_token();
        let old = self.admin_token();
        if let (Ok(mut tokens), Ok(mut admin)) = (self.tokens.write(), self.admin_token.write()) {
            if let Some(user) = tokens.remove(&old) {
                tokens.insert(token.clone(), user);
            }
            *admin = token.clone();
        }
        self.write_kubeconfig()?;
        Ok(token)
    }

    /// Revokes any token.
    pub fn revoke_token(&self, token: &str) {
        if let Ok(mut t) = self.tokens.write() {
            t.remove(token);
        }
    }

    /// Who holds `token`.
    pub fn authenticate(&self, token: &str) -> Option<UserInfo> {
        self.tokens.read().ok()?.get(token).cloned()
    }

    /// Turns RBAC enforcement on with `policy`, or off with None (everyone authenticated may do anything).
    pub fn set_policy(&self, policy: Option<Policy>) {
        if let Ok(mut p) = self.policy.write() {
            *p = policy.map(Arc::new);
        }
    }

    /// The RBAC policy in force, if any.
    pub fn policy(&self) -> Option<Arc<Policy>> {
        self.policy.read().ok()?.clone()
    }

    /// The store, locked.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    /// Every change committed from now on, as watchers get them (for tests and benchmarks that
    /// need to know when a write has landed).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<crate::store::Change>> {
        self.store().subscribe()
    }

    /// Adds `latency` before every request.
    pub fn set_latency(&self, latency: Duration) {
        self.faults
            .latency_ms
            .store(latency.as_millis() as u64, Ordering::Relaxed);
    }

    /// Fails the next `count` requests with 500 InternalError.
    pub fn fail_next(&self, count: u32) {
        self.faults.fail_code.store(500, Ordering::Relaxed);
        self.faults.fail_next.store(count, Ordering::Relaxed);
    }

    /// Fails the next `count` requests with 429 TooManyRequests and `Retry-After: retry_after`.
    pub fn throttle_next(&self, count: u32, retry_after: u32) {
        self.faults.fail_code.store(429, Ordering::Relaxed);
        self.faults
            .retry_after
            .store(retry_after, Ordering::Relaxed);
        self.faults.fail_next.store(count, Ordering::Relaxed);
    }

    /// Ends every open watch (clients see a clean end of stream and re-watch).
    pub fn drop_watches(&self) {
        let mut cut = lock(&self.watch_cut);
        cut.cancel();
        *cut = CancellationToken::new();
    }

    /// Token that is cancelled by the next [`Cluster::drop_watches`].
    pub(crate) fn watch_cut(&self) -> CancellationToken {
        lock(&self.watch_cut).clone()
    }

    /// Forgets the change history: the next watch from any resourceVersion handed out so far gets 410 Expired.
    pub fn expire_history(&self) {
        self.store().expire_history();
    }

    /// Stops the listener: new connections are refused, open connections (and watches) are cut.
    /// The data is kept, as an API server restart keeps etcd.
    pub fn stop(&self) {
        if let Some(token) = lock(&self.listening).take() {
            token.cancel();
        }
    }

    /// Whether the listener is up.
    pub fn is_running(&self) -> bool {
        lock(&self.listening).is_some()
    }

    /// Starts the listener again on the same address.
    pub async fn restart(self: &Arc<Self>) -> Result<(), ClusterError> {
        if self.is_running() {
            return Ok(());
        }
        let listener = TcpListener::bind(self.addr)
            .await
            .map_err(|source| ClusterError::Bind {
                cluster: self.name.clone(),
                addr: self.addr,
                source,
            })?;
        self.serve(listener);
        Ok(())
    }

    fn serve(self: &Arc<Self>, listener: TcpListener) {
        let token = CancellationToken::new();
        *lock(&self.listening) = Some(token.clone());
        let cluster = self.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = token.cancelled() => break,
                    a = listener.accept() => a,
                };
                let (stream, _) = match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(cluster = %cluster.name, error = %e, "accept");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let cluster = cluster.clone();
                let token = token.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = token.cancelled() => {}
                        _ = cluster.connection(stream) => {}
                    }
                });
            }
        });
    }

    async fn connection(self: Arc<Self>, stream: tokio::net::TcpStream) {
        let cluster = self.clone();
        let service = service_fn(move |req| {
            let cluster = cluster.clone();
            async move { Ok::<_, std::convert::Infallible>(crate::api::handle(cluster, req).await) }
        });
        let builder = hyper::server::conn::http1::Builder::new();
        match &self.tls {
            Some(config) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
                let handshake =
                    tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await;
                let Ok(Ok(tls)) = handshake else { return };
                let _ = builder.serve_connection(TokioIo::new(tls), service).await;
            }
            None => {
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            }
        }
    }

    /// Records one request in the counters and the audit log.
    pub(crate) fn record(&self, entry: AuditEntry) {
        let resource = if entry.subresource.is_empty() {
            crate::status::qualified(&entry.group, &entry.resource)
        } else {
            format!(
                "{}/{}",
                crate::status::qualified(&entry.group, &entry.resource),
                entry.subresource
            )
        };
        *lock(&self.counters)
            .entry((entry.verb.clone(), resource))
            .or_default() += 1;
        lock(&self.audit).push(entry);
    }

    /// How many requests with `verb` reached `resource` (`services`, `endpointslices.discovery.k8s.io`,
    /// `services/status`…), faulted ones included.
    pub fn request_count(&self, verb: &str, resource: &str) -> u64 {
        lock(&self.counters)
            .get(&(verb.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Every counter: ((verb, resource), count).
    pub fn counters(&self) -> Vec<((String, String), u64)> {
        lock(&self.counters)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// The audit log so far.
    pub fn audit(&self) -> Vec<AuditEntry> {
        lock(&self.audit).clone()
    }
}
