//! One cluster's watch task: glue between kube-runtime watchers and the
//! pure [`ClusterState`]. It pumps each watcher's deliveries into the
//! state, runs the targeted slice lists the state asks for, and sends the
//! model what comes out, with the cluster's health.
//!
//! This module owns what a task watches ([`ClusterRun`]), its queue's
//! messages, and the task's life: [`run`] restarts the watches in place
//! when the trust settings change or a silence ends, and `watch_until`
//! waits on the queue, the sync timeout, the silence deadline, reloaded
//! settings and the API server's answers. The rest lives in its children,
//! each by what it owns:
//! - `watches`: the watch set (one Service watch per distinct export
//!   selector, the mirror Services in the local cluster, the remote gateway
//!   Service when no gateway is declared, the EndpointSlice watch once
//!   Services are listed) and the targeted lists;
//! - `runner`: handling each message, batching (the budget judges a batch
//!   at its end), and reporting to the feed and the status board;
//! - `health`: the pure health rule: broken when a watch fails, healthy
//!   again when each failed watch delivers again or the cluster's API
//!   server accepts it anew (which the client's
//!   [`crate::k8s::layer::ApiLayer`] records: a re-watch after an error
//!   delivers nothing by itself); broken too, since its last answer, when
//!   the API server has answered nothing for the cluster timeout
//!   ([`super::liveness`]); the sync timeout's verdict; the phase changes
//!   to log;
//! - `gateway`: a declared gateway's resolution and its probe's start;
//! - `mcs`: the discovered watches: ClusterProperties (every mode) and
//!   the MCS watches (`--mcs`).
//!
//! When a silence ends, the watches start anew and list, so that what
//! changed meanwhile is seen at once (a watch held open through a
//! partition can take minutes to notice it is dead), and the cluster stays
//! broken until they have. It must not interpret objects (`source::state`
//! does); retries and relists are kube-runtime's.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service as K8sService;
use k8s_openapi::api::discovery::v1::EndpointSlice as K8sSlice;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::feed::FeedTx;
use super::probe::ProbeReport;
use super::selector::Selectors;
use super::spec::GatewaySource;
use super::state::{ClusterState, Object, Watch};
use super::status::StatusBoard;
use crate::k8s::client::BoundedClient;
use crate::k8s::watch::Delivery;
use crate::model::Settings;
use crate::model::objects::ObjectKey;
use crate::vocab::linkerd::LABEL_MIRRORED;
use crate::vocab::trust::{Claims, Trust};

mod gateway;
mod health;
mod mcs;
mod runner;
mod watches;

use mcs::McsApis;
use runner::Runner;

/// What a cluster task watches.
#[derive(Clone, Debug)]
pub(crate) struct ClusterRun {
    /// Cluster name.
    pub name: Arc<str>,
    /// The local cluster (also watches mirror Services).
    pub local: bool,
    /// The API client; `Err` says why there is none.
    pub client: Result<BoundedClient, String>,
    /// Export selectors.
    pub selectors: Selectors,
    /// The gateway.
    pub gateway: GatewaySource,
    /// What the cluster may claim (its addresses and namespaces), under
    /// the operator's trust settings in `settings`.
    pub claims: Claims,
    /// Readiness stops waiting for the first sync after this long.
    pub sync_timeout: Duration,
    /// The answer settings; their budget bounds what the cluster may make
    /// us hold, and follows a configuration reload.
    pub settings: watch::Receiver<Arc<Settings>>,
    /// `--mcs`: also watch ServiceExports, the cluster id and (local)
    /// ServiceImports, and every Service (a ServiceExport can make any
    /// Service a member).
    pub mcs: bool,
    /// How often to ask again for an About (ClusterProperty) or, with
    /// `--mcs`, MCS API the cluster did not serve (or the credentials
    /// might not list).
    pub mcs_rediscover: Duration,
}

impl ClusterRun {
    /// The label selectors of the Service watches, in the order of their
    /// [`Watch::Services`] indices.
    pub(crate) fn service_selectors(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .selectors
            .distinct()
            .into_iter()
            .map(super::selector::Selector::to_query)
            .collect();
        if self.local {
            out.push(format!("{LABEL_MIRRORED}=true"));
        }
        if self.mcs {
            // Last: the every-Service watch, [`Self::all_services`].
            out.push(String::new());
        }
        out
    }

    /// The index of the every-Service watch (`--mcs`).
    pub(crate) fn all_services(&self) -> Option<usize> {
        self.mcs
            .then(|| self.service_selectors().len().saturating_sub(1))
    }

    /// The rules conversion applies to the cluster's objects under
    /// `settings`.
    pub(crate) fn trust(&self, settings: &Settings) -> Trust {
        Trust::new(settings.trust.clone(), self.claims.clone())
    }

    /// A state for this run's watches: `previous` carried over (its data
    /// served until the new watches have listed), or a new one.
    pub(crate) fn state(&self, previous: Option<ClusterState>) -> ClusterState {
        let n = self.service_selectors().len();
        let trust = self.trust(&self.settings.borrow());
        match previous {
            Some(s) => s.restart(self.selectors.clone(), trust, n),
            None => ClusterState::new(
                self.name.clone(),
                self.local,
                self.selectors.clone(),
                trust,
                n,
            ),
        }
    }
}

/// What the task's queue carries: everything its watches, lists and
/// helpers found.
enum Msg {
    /// A watch's delivery, and when the watch task saw it: a failure is
    /// dated before the watcher retries, so a retry the API accepts is
    /// always later than the failure, however long this message queued.
    Watch(Watch, Delivery<Object>, Instant),
    /// A targeted slice list: the slices, and those that did not decode.
    Listed(ObjectKey, Vec<K8sSlice>, Vec<(String, String)>),
    /// A targeted Service list (`--mcs`).
    ListedService(ObjectKey, Vec<K8sService>, Vec<(String, String)>),
    /// Which MCS and About APIs the cluster serves.
    McsApis(Box<McsApis>),
    /// The declared gateway's addresses, when they changed.
    Resolved(Vec<IpAddr>),
    /// A gateway probe's result.
    Probe(ProbeReport),
    /// A heartbeat failed: why.
    Heartbeat(String),
}

/// Runs one cluster until `shutdown`; returns its state so a restart (new
/// credentials or selectors) carries the data over. Reloaded trust settings
/// restart its watches in place: what they list is converted anew, and the
/// old data is served meanwhile. So does the end of a silence: watches held
/// open through it may be dead without knowing, and a fresh list is the
/// quickest way to what changed meanwhile.
pub(crate) async fn run(
    run: ClusterRun,
    mut state: ClusterState,
    tx: FeedTx,
    board: Arc<StatusBoard>,
    shutdown: CancellationToken,
) -> ClusterState {
    let mut carried = None;
    loop {
        let ended = watch_until(
            run.clone(),
            state,
            carried,
            tx.clone(),
            board.clone(),
            &shutdown,
        )
        .await;
        match ended.why {
            Ended::Stopped => return ended.state,
            Ended::Retrust => {
                info!(cluster = %run.name, "trust settings changed; listing the cluster again under them");
            }
            Ended::Answers => {
                info!(cluster = %run.name, "API server answers again; listing the cluster anew");
            }
        }
        state = run.state(Some(ended.state));
        carried = ended.broken_since;
    }
}

/// Why [`watch_until`] returned.
enum Ended {
    /// Shut down, or the model is gone.
    Stopped,
    /// The trust settings changed: the watches must list again.
    Retrust,
    /// The API server answers again after a silence: the watches must list
    /// again.
    Answers,
}

/// What [`watch_until`] leaves behind.
struct Outcome {
    why: Ended,
    state: ClusterState,
    /// The health's broken-since when it ended, carried into the next
    /// watches until they list.
    broken_since: Option<Instant>,
}

/// Sleeps until `deadline`, or forever without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// What woke a run of the watches.
enum Woke {
    /// A message: the start of a batch.
    Msg(Msg),
    /// The health may have changed: report it.
    Flush,
    /// The budget changed: judge the held objects again, then report.
    Settle,
    /// Nothing to report.
    Nothing,
    /// The run ends.
    End(Ended),
}

/// What a run of the watches waits on, besides its queue.
struct Waits<'a> {
    /// The sync timeout, from the start of the run.
    sync_deadline: std::pin::Pin<&'a mut tokio::time::Sleep>,
    /// Reloaded settings.
    settings: watch::Receiver<Arc<Settings>>,
    /// When the API server last answered.
    answered: watch::Receiver<Option<Instant>>,
    shutdown: &'a CancellationToken,
}

/// Waits for what comes first: a message, the sync timeout (once, and
/// only while the cluster has not synced), the silence deadline (only with
/// a client: without one nothing ever answers), reloaded settings, an
/// answer of the API server, or shutdown; and takes the decisions that
/// need no message.
async fn wake(r: &mut Runner, rx: &mut mpsc::Receiver<Msg>, w: &mut Waits<'_>) -> Woke {
    let silence = r.watches.as_ref().and(r.health.liveness.deadline());
    let sync_pending = r.health.sync_pending(r.state.synced());
    tokio::select! {
        m = rx.recv() => m.map_or(Woke::End(Ended::Stopped), Woke::Msg),
        () = w.sync_deadline.as_mut(), if sync_pending => {
            r.give_up();
            Woke::Flush
        }
        () = until(silence) => {
            if r.health.liveness.check(Instant::now()) { Woke::Flush } else { Woke::Nothing }
        }
        Ok(()) = w.settings.changed() => {
            let new = w.settings.borrow_and_update().clone();
            // Other settings are the answers'; only the budget, the trust
            // settings and the cluster timeout are ours.
            if new.trust != *r.state.trust().settings() {
                return Woke::End(Ended::Retrust);
            }
            r.health.liveness.set_timeout(new.cluster_timeout);
            if r.set_budget(&new) { Woke::Settle } else { Woke::Nothing }
        }
        Ok(()) = w.answered.changed() => {
            let at = *w.answered.borrow_and_update();
            if let Some(at) = at && r.health.answered(at) {
                return Woke::End(Ended::Answers);
            }
            if r.health.any_failing() {
                r.answered();
            }
            Woke::Flush
        }
        () = w.shutdown.cancelled() => Woke::End(Ended::Stopped),
    }
}

/// Runs the cluster's watches until shutdown, new trust settings or the
/// end of a silence.
async fn watch_until(
    run: ClusterRun,
    state: ClusterState,
    carried: Option<Instant>,
    tx: FeedTx,
    board: Arc<StatusBoard>,
    shutdown: &CancellationToken,
) -> Outcome {
    let mut settings = run.settings.clone();
    // Settings reloaded since the state was made: list under the new ones.
    if settings.borrow_and_update().trust != *state.trust().settings() {
        return Outcome {
            why: Ended::Retrust,
            state,
            broken_since: carried,
        };
    }
    let sync_timeout = run.sync_timeout;
    let (mut r, mut rx) = Runner::new(run, state, carried, tx, board, shutdown);
    r.set_budget(&settings.borrow());
    r.start();
    // Without a client nothing ever answers; the sender stays so the
    // branch that waits for answers just waits.
    let (_no_client, no_answers) = watch::channel(None);
    let answered = r
        .watches
        .as_ref()
        .map_or(no_answers, |w| w.client.stats.subscribe());
    let sync_deadline = tokio::time::sleep(sync_timeout);
    tokio::pin!(sync_deadline);
    let mut waits = Waits {
        sync_deadline,
        settings,
        answered,
        shutdown,
    };
    let why = 'run: {
        if !r.flush().await {
            break 'run Ended::Stopped;
        }
        loop {
            let flush = match wake(&mut r, &mut rx, &mut waits).await {
                Woke::End(why) => break 'run why,
                Woke::Nothing => false,
                Woke::Flush => true,
                Woke::Settle => {
                    r.settle();
                    true
                }
                Woke::Msg(msg) => {
                    r.batch(msg, &mut rx);
                    r.settle();
                    if !r.flush().await {
                        break 'run Ended::Stopped;
                    }
                    // Sending never waits, so a cluster in a storm would
                    // keep this worker thread: let the other clusters'
                    // tasks and the model run.
                    tokio::task::yield_now().await;
                    false
                }
            };
            if flush && !r.flush().await {
                break 'run Ended::Stopped;
            }
        }
    };
    Outcome {
        broken_since: r.broken(),
        why,
        state: r.state,
    }
}

#[cfg(test)]
mod tests;
