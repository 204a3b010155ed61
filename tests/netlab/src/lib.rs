//! netlab: a network lab for tests and benchmarks. It runs a test Kubernetes API server (the
//! `kubesim` binary) inside its own Linux network namespace and injects *silent* faults on its
//! API port (packets dropped or refused, not HTTP errors), and relays TCP with added latency.
//!
//! - [`lab`]: [`Lab`] and [`Host`], a network namespace joined to the root namespace by a veth
//!   pair with a /30 from 198.18.0.0/15 (RFC 2544's benchmarking range) and no default route.
//! - [`sim`]: [`Sim`], a kubesim process inside a host, its kubeconfigs, SIGSTOP/SIGCONT and
//!   object writes through kubesim's control endpoint.
//! - [`fault`]: [`Fault`]s applied with nftables inside the host's namespace.
//! - [`relay`]: [`Relay`], a TCP relay with one-way latency, jitter and a bandwidth cap.
//!
//! It needs root and the `ip` (iproute2) and `nft` (nftables) commands; [`Lab::new`] answers
//! `Ok(None)` without them, so a test can skip. It must never dial or bind an address outside
//! 127.0.0.0/8 and 198.18.0.0/15 ([`permitted`]), and everything it starts or creates
//! (namespaces, veths, processes, relay tasks) is removed by a drop guard, a panicking test
//! included.
//!
//! ```no_run
//! # fn demo() -> Result<(), netlab::NetlabError> {
//! let Some(lab) = netlab::Lab::new()? else { return Ok(()) };
//! let host = lab.host("east")?;
//! let dir = std::env::temp_dir().join("netlab-demo");
//! let sim = host.kubesim(&["east"], &dir, &[])?;
//! host.fault(sim.api_port("east"), netlab::Fault::Blackhole)?;
//! // ... a client of sim.kubeconfig("east") now times out ...
//! host.heal()?;
//! # Ok(()) }
//! ```

#![warn(clippy::too_many_lines)] // the house rule; threshold in the root clippy.toml

pub(crate) mod fault;
pub(crate) mod lab;
pub(crate) mod relay;
pub mod sim;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

pub use fault::Fault;
pub use lab::{Host, Lab};
pub use relay::{Relay, RelaySpec, rewrite_kubeconfig_server};
pub use sim::Sim;

/// Errors of the lab, its processes and its relays.
#[derive(Debug, thiserror::Error)]
pub enum NetlabError {
    /// A command (`ip`, `nft`, kubesim) could not run or exited with a failure.
    #[error("{command}: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Why: the spawn error, or the exit status and stderr.
        detail: String,
    },
    /// A file or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Every /30 of 198.18.0.0/15 is assigned on this machine already.
    #[error("no free /30 left in 198.18.0.0/15")]
    NoFreeSubnet,
    /// The kubesim binary was not found.
    #[error(
        "the kubesim binary is missing (tried {tried}): build it with `cargo build -p kubesim --bin kubesim`"
    )]
    KubesimMissing {
        /// The paths looked at.
        tried: String,
    },
    /// kubesim exited or did not announce its clusters in time.
    #[error("kubesim did not start: {0}")]
    KubesimStart(String),
    /// The control endpoint could not be reached or answered garbage.
    #[error("kubesim control {path}: {detail}")]
    Control {
        /// The request path.
        path: String,
        /// What went wrong.
        detail: String,
    },
    /// The control endpoint answered with an error status.
    #[error("kubesim control {path}: HTTP {code}: {body}")]
    ControlStatus {
        /// The request path.
        path: String,
        /// The HTTP status code.
        code: u16,
        /// The response body.
        body: String,
    },
    /// An address outside 127.0.0.0/8 and 198.18.0.0/15 was asked for.
    #[error("{0} is outside 127.0.0.0/8 and 198.18.0.0/15: netlab dials and binds only those")]
    NotPermitted(SocketAddr),
    /// A kubeconfig could not be read.
    #[error(transparent)]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// A kube client could not be built.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// Whether netlab may dial or bind `ip`: loopback (127.0.0.0/8, `::1`) or the lab range
/// 198.18.0.0/15.
pub fn permitted(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || in_lab_range(v4),
        IpAddr::V6(v6) => v6.is_loopback(),
    }
}

/// Whether `ip` is in 198.18.0.0/15, the range lab hosts take their addresses from.
pub(crate) fn in_lab_range(ip: Ipv4Addr) -> bool {
    u32::from(ip) & 0xfffe_0000 == u32::from(Ipv4Addr::new(198, 18, 0, 0))
}

/// `Err(NotPermitted)` unless [`permitted`].
pub(crate) fn check_permitted(addr: SocketAddr) -> Result<(), NetlabError> {
    if permitted(addr.ip()) {
        Ok(())
    } else {
        Err(NetlabError::NotPermitted(addr))
    }
}
