//! kubesim: a test Kubernetes API server that hosts several clusters on loopback, for
//! multi-cluster tests on one machine.
//!
//! Each cluster has its own port, TLS certificate (from one generated CA), bearer tokens and
//! kubeconfig, and serves kube-apiserver's URLs, bodies, status codes and watch semantics for
//! Namespaces, Services, EndpointSlices, Secrets, ConfigMaps, Events, Leases, Linkerd Links, the
//! MCS API's ServiceExports and ServiceImports and the About API's ClusterProperties:
//! list with selectors and pagination, watch with bookmarks and 410 Expired, create, update,
//! delete with preconditions and finalizers, JSON/merge/strategic patch and server-side apply
//! with managedFields. Optional RBAC enforcement from YAML manifests, fault injection (from
//! [`Cluster`] methods or the control endpoint), request counters and an audit log.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kubesim::SimError> {
//! let sim = kubesim::start(kubesim::SimConfig::new(["east", "west"], "/tmp/kubesim")).await?;
//! let east = sim.cluster("east").expect("configured");
//! println!("{}", east.kubeconfig_path().display());
//! east.drop_watches();
//! # Ok(()) }
//! ```

#![warn(clippy::too_many_lines)] // the house rule; threshold in the root clippy.toml

pub(crate) mod api;
pub(crate) mod cluster;
pub(crate) mod control;
pub(crate) mod kubemsg;
pub(crate) mod patch;
pub mod rbac;
pub mod resources;
pub(crate) mod selector;
pub(crate) mod ssa;
pub(crate) mod status;
pub mod store;
pub mod tls;
pub(crate) mod validate;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use cluster::{AuditEntry, Cluster, ClusterSettings};
pub use rbac::Policy;
pub use store::StoreConfig;

/// Errors starting kubesim.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A cluster could not start.
    #[error(transparent)]
    Cluster(#[from] cluster::ClusterError),
    /// The CA could not be made.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// An RBAC manifest is invalid.
    #[error(transparent)]
    Rbac(#[from] rbac::RbacError),
    /// Bad configuration.
    #[error("{0}")]
    Config(String),
}

/// What to start.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Cluster names, each a DNS label.
    pub clusters: Vec<String>,
    /// Where kubeconfigs are written (`<dir>/<cluster>.kubeconfig`).
    pub dir: PathBuf,
    /// HTTPS with a generated CA (default) or plain HTTP.
    pub tls: bool,
    /// Loopback address every cluster listens on (each on its own port).
    pub bind: IpAddr,
    /// Shared settings.
    pub settings: ClusterSettings,
    /// Address of the control endpoint, if one is wanted.
    pub control: Option<SocketAddr>,
}

impl SimConfig {
    /// HTTPS clusters on 127.0.0.1 with default settings and no control endpoint.
    pub fn new<I, S>(clusters: I, dir: impl Into<PathBuf>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        SimConfig {
            clusters: clusters.into_iter().map(Into::into).collect(),
            dir: dir.into(),
            tls: true,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            settings: ClusterSettings::default(),
            control: None,
        }
    }
}

/// A running kubesim.
pub struct Sim {
    clusters: Vec<Arc<Cluster>>,
    control: Option<SocketAddr>,
    dir: PathBuf,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.clusters.iter().map(|c| c.name.as_str()).collect();
        f.debug_struct("Sim")
            .field("clusters", &names)
            .field("control", &self.control)
            .field("dir", &self.dir)
            .finish()
    }
}

impl Sim {
    /// A cluster by name.
    pub fn cluster(&self, name: &str) -> Option<&Arc<Cluster>> {
        self.clusters.iter().find(|c| c.name == name)
    }

    /// Every cluster, in configuration order.
    pub fn clusters(&self) -> &[Arc<Cluster>] {
        &self.clusters
    }

    /// Where the control endpoint listens.
    pub fn control_addr(&self) -> Option<SocketAddr> {
        self.control
    }

    /// The kubeconfig directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops every cluster's listener.
    pub fn stop(&self) {
        for c in &self.clusters {
            c.stop();
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts every configured cluster (and the control endpoint).
pub async fn start(config: SimConfig) -> Result<Sim, SimError> {
    std::fs::create_dir_all(&config.dir).map_err(|source| SimError::Io {
        path: config.dir.display().to_string(),
        source,
    })?;
    let authority = if config.tls {
        Some(tls::Authority::generate()?)
    } else {
        None
    };
    let mut clusters: Vec<Arc<Cluster>> = Vec::new();
    for name in &config.clusters {
        if !kubemsg::dns1123_label_errors(name).is_empty() {
            return Err(SimError::Config(format!(
                "cluster name {name:?} is not a DNS label"
            )));
        }
        if clusters.iter().any(|c| &c.name == name) {
            return Err(SimError::Config(format!("cluster {name:?} is named twice")));
        }
        let addr = SocketAddr::new(config.bind, 0);
        clusters.push(
            Cluster::start(
                name,
                addr,
                authority.as_ref(),
                &config.dir,
                config.settings.clone(),
            )
            .await?,
        );
    }
    let control = match config.control {
        Some(addr) => Some(
            control::serve(addr, clusters.clone())
                .await
                .map_err(|source| SimError::Io {
                    path: addr.to_string(),
                    source,
                })?,
        ),
        None => None,
    };
    Ok(Sim {
        clusters,
        control,
        dir: config.dir,
    })
}

/// Loads an RBAC policy from YAML files or directories (every `*.yaml`/`*.yml` below them).
pub fn load_policy(paths: &[PathBuf]) -> Result<Policy, SimError> {
    let mut policy = Policy::default();
    let mut files = Vec::new();
    for p in paths {
        collect_yaml(p, true, &mut files)?;
    }
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|source| SimError::Io {
            path: f.display().to_string(),
            source,
        })?;
        policy.add_yaml(&f.display().to_string(), &text)?;
    }
    Ok(policy)
}

fn collect_yaml(p: &Path, named: bool, out: &mut Vec<PathBuf>) -> Result<(), SimError> {
    let io = |source| SimError::Io {
        path: p.display().to_string(),
        source,
    };
    if p.is_dir() {
        for entry in std::fs::read_dir(p).map_err(io)? {
            let entry = entry.map_err(io)?;
            collect_yaml(&entry.path(), false, out)?;
        }
    } else if named || p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
        out.push(p.to_path_buf());
    }
    Ok(())
}
