//! A declared gateway (Link `gatewayAddress`, or the clusters file's
//! `gateway`): resolving its hostnames now and every [`RESOLVE_PERIOD`],
//! screening the addresses by what the cluster may claim, handing them to
//! the gateway probe (started with the first addresses, then fed each new
//! set through a watch channel), and what each probe report means for the
//! cluster's `/debug/clusters` entry.
//!
//! Owns those choices and the two tasks behind them (the resolver and the
//! probe's start). It stands alone: it reports through a channel and a
//! callback it is handed, and knows nothing of watches, the cluster's state
//! or its health. It must not speak HTTP ([`crate::source::probe`] does),
//! nor send the model anything: it says what the gateway is, and the
//! cluster task sends it.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::model::objects::Gateway;
use crate::source::convert::{Adjustment, trusted_addresses};
use crate::source::probe::{self, ProbeReport};
use crate::source::spec::{GatewayAddr, GatewaySpec};
use crate::source::state::Adjusted;
use crate::source::status::ProbeStatus;
use crate::vocab::trust::Trust;

/// How often gateway hostnames are resolved again (Linkerd's endpoint
/// refresh period).
pub(crate) const RESOLVE_PERIOD: Duration = Duration::from_secs(60);

/// The addresses `addrs` stand for: literals as they are, each hostname as
/// last resolved (`known`; none before its first answer), in address order
/// without duplicates, so that the same set always compares equal.
pub(super) fn addresses(
    addrs: &[GatewayAddr],
    known: &HashMap<String, Vec<IpAddr>>,
) -> Vec<IpAddr> {
    let mut ips = BTreeSet::new();
    for a in addrs {
        match a {
            GatewayAddr::Ip(ip) => {
                ips.insert(*ip);
            }
            GatewayAddr::Host(host) => ips.extend(known.get(host).into_iter().flatten().copied()),
        }
    }
    ips.into_iter().collect()
}

/// Whether `addrs` need resolving again later: only hostnames change.
pub(super) fn has_hosts(addrs: &[GatewayAddr]) -> bool {
    addrs.iter().any(|a| matches!(a, GatewayAddr::Host(_)))
}

/// Resolves `host` with the system resolver.
pub(super) async fn lookup(host: String) -> std::io::Result<Vec<IpAddr>> {
    let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
    Ok(found.map(|s| s.ip()).collect())
}

/// Resolves the declared gateway addresses now and every
/// [`RESOLVE_PERIOD`] (with `resolve`), sending `wrap(addresses)` to `tx`
/// each time the set changes; returns after the first set when there is no
/// hostname to resolve again, or when `stop` fires or `tx` closes. A failed
/// lookup keeps the previous addresses of that host: a resolver's bad
/// moment must not take a working gateway away.
pub(super) async fn resolve<M, R, Fut>(
    addrs: Vec<GatewayAddr>,
    resolve: R,
    tx: mpsc::Sender<M>,
    wrap: fn(Vec<IpAddr>) -> M,
    stop: CancellationToken,
) where
    R: Fn(String) -> Fut,
    Fut: Future<Output = std::io::Result<Vec<IpAddr>>>,
{
    let mut last: Option<Vec<IpAddr>> = None;
    let mut known: HashMap<String, Vec<IpAddr>> = HashMap::new();
    loop {
        for a in &addrs {
            let GatewayAddr::Host(host) = a else {
                continue;
            };
            match resolve(host.clone()).await {
                Ok(found) => {
                    known.insert(host.clone(), found);
                }
                Err(e) => {
                    warn!(%host, error = %e, "cannot resolve the gateway address; keeping the last result");
                }
            }
        }
        let ips = addresses(&addrs, &known);
        if last.as_ref() != Some(&ips) {
            last = Some(ips.clone());
            if tx.send(wrap(ips)).await.is_err() {
                return;
            }
        }
        if !has_hosts(&addrs) {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(RESOLVE_PERIOD) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// What new addresses of a declared gateway come to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resolved {
    /// The gateway as the model should hold it: only addresses the cluster
    /// may claim.
    pub(super) gateway: Gateway,
    /// The addresses refused, if any.
    pub(super) adjusted: Option<Adjusted>,
}

/// A declared gateway: its spec, and the channel its probe reads the
/// addresses from.
#[derive(Debug)]
pub(super) struct DeclaredGateway {
    spec: GatewaySpec,
    addrs: watch::Sender<Vec<IpAddr>>,
    probe_started: bool,
}

impl DeclaredGateway {
    /// The gateway `spec` declares; nothing runs yet.
    pub(super) fn new(spec: GatewaySpec) -> Self {
        Self {
            spec,
            addrs: watch::Sender::new(Vec::new()),
            probe_started: false,
        }
    }

    /// Whether it has a probe (the status board shows one from the start).
    pub(super) fn has_probe(&self) -> bool {
        self.spec.probe.is_some()
    }

    /// Starts resolving its addresses (see [`resolve`]).
    pub(super) fn start<M: Send + 'static>(
        &self,
        tx: mpsc::Sender<M>,
        wrap: fn(Vec<IpAddr>) -> M,
        stop: CancellationToken,
    ) {
        tokio::spawn(resolve(self.spec.addresses.clone(), lookup, tx, wrap, stop));
    }

    /// Its addresses resolved to `ips`: those the cluster may claim under
    /// `trust` become its addresses, which the probe probes from now on.
    /// The addresses are screened like a remote object's: never probed nor
    /// answered, a Link names addresses as freely as a remote object does.
    pub(super) fn resolved(&mut self, ips: &[IpAddr], trust: &Trust) -> Resolved {
        let trusted = trusted_addresses(trust, ips, "gateway address");
        let adjusted = (!trusted.warnings.is_empty()).then(|| Adjusted {
            object: "declared gateway".to_owned(),
            adjustment: Adjustment::Clamped,
            warnings: trusted.warnings,
        });
        let ips = trusted.value;
        self.addrs.send_replace(ips.clone());
        Resolved {
            gateway: Gateway {
                addresses: ips,
                port: self.spec.port,
                identity: self.spec.identity.clone(),
            },
            adjusted,
        }
    }

    /// Starts the probe, once (the first addresses start it; later ones
    /// reach it through the channel): `report` hears every result. No-op
    /// without a probe or when it runs already.
    pub(super) fn start_probe(
        &mut self,
        report: impl Fn(ProbeReport) + Send + 'static,
        stop: CancellationToken,
    ) {
        let Some(spec) = self.spec.probe.clone().filter(|_| !self.probe_started) else {
            return;
        };
        self.probe_started = true;
        tokio::spawn(probe::run(spec, self.addrs.subscribe(), report, stop));
    }
}

/// A probe result onto the cluster's probe status: the verdict and the
/// failures in a row as the probe says them, and the counters, latency and
/// error of this one probe.
pub(super) fn record(status: &mut ProbeStatus, report: &ProbeReport) {
    status.alive = report.alive;
    status.consecutive_failures = report.consecutive_failures;
    if report.success {
        status.successes += 1;
        status.last_latency = report.latency;
    } else {
        status.failures += 1;
        status.last_error.clone_from(&report.error);
    }
}

#[cfg(test)]
mod tests;
