//! One run of a cluster's watches: what the task does with each message in
//! its queue (a watch's delivery, a targeted list, a resolved gateway, a
//! probe report, a failed heartbeat), gathered into batches that the
//! budget judges at their end, and what it then reports: events to the
//! feed, health to the model, counters and phase to the status board.
//!
//! Owns the batching and the runner's bookkeeping (which watches run,
//! what is pending for the feed). It must not interpret objects
//! ([`crate::source::state`] does), decide health ([`super::health`]
//! does), resolve or probe the gateway ([`super::gateway`] does), nor
//! wait on time: the sync timeout and the silence are
//! `super::watch_until`'s.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use kube::runtime::watcher::Event as WatchEvent;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, info, warn};

use super::gateway::{self, DeclaredGateway};
use super::health::Tracker;
use super::mcs::McsApis;
use super::watches::Watches;
use super::{ClusterRun, Msg};
use crate::k8s::watch::Delivery;
use crate::model::{Event, Settings};
use crate::source::SourceMsg;
use crate::source::convert::{Adjustment, Reason};
use crate::source::feed::FeedTx;
use crate::source::liveness::{self, Liveness};
use crate::source::probe::ProbeReport;
use crate::source::spec::GatewaySource;
use crate::source::state::{Action, BudgetReport, ClusterState, Output, Watch};
use crate::source::status::{Phase, ProbeStatus, StatusBoard};

/// Most events gathered from the watches before the budget judges them and
/// they go to the feed.
pub(super) const BATCH: usize = 1000;
/// Most messages handled in one batch.
pub(super) const BATCH_MESSAGES: usize = 256;
/// Room in the task's queue: a watch waits when it is full, so a storm
/// holds the watches back rather than the memory growing.
const QUEUE: usize = 256;

/// Whether a batch that has handled `handled` messages and gathered
/// `pending` events takes another queued message: a batch ends at either
/// bound, so the budget judges a storm in bounded steps and the model sees
/// its first changes soon.
pub(super) fn gather_more(handled: usize, pending: usize) -> bool {
    handled < BATCH_MESSAGES && pending < BATCH
}

/// The running watches of one cluster and what they produced.
pub(super) struct Runner {
    /// What the task watches.
    pub(super) run: ClusterRun,
    /// The pure state of the cluster's objects.
    pub(super) state: ClusterState,
    tx: FeedTx,
    /// Where the cluster's status is shown.
    pub(super) board: Arc<StatusBoard>,
    /// `None` when the cluster has no client.
    pub(super) watches: Option<Watches>,
    /// The queue every watch, list, resolver and probe sends to.
    pub(super) queue: mpsc::Sender<Msg>,
    /// Stops the watches when the task ends.
    _stop: DropGuard,
    /// What stops this run's watches, lists and helpers.
    pub(super) stop: CancellationToken,
    slice_watch_started: bool,
    declared: Option<DeclaredGateway>,
    /// Its health.
    pub(super) health: Tracker,
    last_budget: Option<BudgetReport>,
    pending: Vec<Event>,
    /// The every-Service watch (`--mcs`) was started, or found pointless.
    pub(super) all_services_started: bool,
    /// The MCS and About APIs whose watches run (`None` before discovery
    /// answered).
    pub(super) mcs_found: Option<McsApis>,
    /// The credentials may not list ClusterProperties.
    pub(super) property_forbidden: bool,
}

impl Runner {
    /// A run of `run`'s watches over `state`, carrying broken-since
    /// `carried` from the run it replaces; and the queue it reads.
    pub(super) fn new(
        run: ClusterRun,
        state: ClusterState,
        carried: Option<Instant>,
        tx: FeedTx,
        board: Arc<StatusBoard>,
        shutdown: &CancellationToken,
    ) -> (Self, mpsc::Receiver<Msg>) {
        let (queue, rx) = mpsc::channel::<Msg>(QUEUE);
        let stop = shutdown.child_token();
        let watches = run
            .client
            .as_ref()
            .ok()
            .map(|c| Watches::new(c.clone(), queue.clone(), stop.clone()));
        let declared = match &run.gateway {
            GatewaySource::Spec(spec) => Some(DeclaredGateway::new(spec.clone())),
            GatewaySource::RemoteService | GatewaySource::None => None,
        };
        let last_answered = run
            .client
            .as_ref()
            .ok()
            .and_then(|c| c.stats.last_answered());
        let timeout = run.settings.borrow().cluster_timeout;
        let liveness = Liveness::new(Instant::now(), last_answered, timeout);
        // A restarted run carries on from the phase its cluster was in, so
        // the log says `broken, was unreachable`, not `was new`.
        let health = Tracker::new(liveness, carried, board.phase(&run.name));
        let r = Self {
            run,
            state,
            tx,
            board,
            watches,
            queue,
            _stop: stop.clone().drop_guard(),
            stop,
            slice_watch_started: false,
            declared,
            health,
            last_budget: None,
            pending: Vec::new(),
            all_services_started: false,
            mcs_found: None,
            property_forbidden: false,
        };
        (r, rx)
    }

    /// The budget for `settings`: the local cluster's exports are our own,
    /// only linked ones are held to a budget.
    /// Returns false when the budget did not change.
    pub(super) fn set_budget(&mut self, settings: &Settings) -> bool {
        self.state
            .set_budget(settings.budget.for_cluster(self.run.local))
    }

    /// Starts the watches (or reports why there are none) and the gateway.
    pub(super) fn start(&mut self) {
        if let Some(w) = &self.watches {
            let stats = w.client.stats.clone();
            self.board
                .update(&self.run.name, |rep| rep.api = Some(stats));
        }
        if self.watches.is_none() {
            let e = match &self.run.client {
                Err(e) => e.clone(),
                Ok(_) => String::new(),
            };
            warn!(cluster = %self.run.name, problem = %e, "cluster cannot be watched");
            self.board
                .update(&self.run.name, |rep| rep.problem = Some(e));
            return;
        }
        self.start_heartbeat();
        let selectors = self.run.service_selectors();
        let all = self.run.all_services();
        if let Some(w) = self.watches.as_mut() {
            for (n, s) in selectors.iter().enumerate() {
                // The every-Service watch waits for the exports' list.
                if Some(n) != all {
                    w.services(n, s);
                }
            }
        }
        self.start_gateway();
        // Nothing exported by selector: the slice watch has nothing to
        // serve, but it still marks the cluster synced.
        if selectors.is_empty() {
            self.start_slice_watch();
        }
        self.start_discovery();
    }

    /// Starts asking the API server whether it answers (the silence rule).
    fn start_heartbeat(&self) {
        let Some(w) = &self.watches else {
            return;
        };
        let client = w.client.heartbeat.clone();
        let queue = self.queue.clone();
        tokio::spawn(liveness::heartbeat(
            move || {
                let client = client.clone();
                async move {
                    // A fresh connection each time (its own client's pool,
                    // and the answer closes it): a partition that keeps old
                    // connections alive but drops new ones is noticed too.
                    let req = http::Request::get(crate::k8s::layer::HEARTBEAT_PATH)
                        .header(http::header::CONNECTION, "close")
                        .body(Vec::new())
                        .map_err(|e| e.to_string())?;
                    client
                        .request_text(req)
                        .await
                        .map(drop)
                        .map_err(|e| e.to_string())
                }
            },
            self.run.settings.clone(),
            move |e| {
                // A full queue drops a report; the silence rule does not
                // depend on it.
                let _ = queue.try_send(Msg::Heartbeat(e));
            },
            self.stop.clone(),
        ));
    }

    /// Where the gateway comes from: the remote gateway Service's watch,
    /// the declared addresses' resolver, or an event saying there is none.
    fn start_gateway(&mut self) {
        match &self.run.gateway {
            GatewaySource::RemoteService => {
                self.state.set_gateway_watch(true);
                if let Some(w) = self.watches.as_mut() {
                    w.gateway();
                }
            }
            GatewaySource::Spec(_) => {
                self.state.set_gateway_watch(false);
                if let Some(d) = &self.declared {
                    d.start(self.queue.clone(), Msg::Resolved, self.stop.clone());
                    if d.has_probe() {
                        self.board.update(&self.run.name, |rep| {
                            rep.probe = Some(ProbeStatus::default());
                        });
                    }
                }
            }
            GatewaySource::None => {
                self.state.set_gateway_watch(false);
                self.pending.push(Event::GatewayApplied {
                    cluster: self.run.name.clone(),
                    gateway: None,
                });
            }
        }
    }

    fn start_slice_watch(&mut self) {
        if let Some(w) = self.watches.as_mut()
            && !self.slice_watch_started
        {
            self.slice_watch_started = true;
            w.slices();
        }
    }

    /// Since when its data is not confirmed (see [`Tracker::broken`]).
    pub(super) fn broken(&self) -> Option<Instant> {
        self.health.broken()
    }

    /// The sync timeout passed before the cluster synced: readiness stops
    /// waiting for it.
    pub(super) fn give_up(&mut self) {
        warn!(cluster = %self.run.name, timeout = ?self.run.sync_timeout, "not synced within the sync timeout; readiness stops waiting for it");
        self.health.give_up();
    }

    fn push_health(&mut self) {
        if self.health.relisted(self.state.relisted()) {
            info!(cluster = %self.run.name, "listed anew: serving what the cluster holds now");
        }
        if let Some(h) = self.health.changed(self.state.synced()) {
            let silent = self.health.silent_since();
            self.board.update(&self.run.name, |r| {
                r.synced = h.synced;
                r.broken_since = h.broken_since;
                r.silent_since = silent;
                r.gave_up = h.sync_given_up;
            });
            self.pending.push(Event::Health {
                cluster: self.run.name.clone(),
                health: h,
            });
        }
        self.log_phase();
    }

    /// One log line per change of the cluster's phase.
    fn log_phase(&mut self) {
        let Some((phase, was)) = self.health.phase(self.board.phase(&self.run.name)) else {
            return;
        };
        let name = &self.run.name;
        match phase {
            Phase::Unreachable => warn!(
                cluster = %name, state = phase.label(), was, timeout = ?self.health.liveness.timeout(),
                "API server silent for the cluster timeout: unreachable; serving last-known data"
            ),
            Phase::Broken | Phase::GaveUp | Phase::NoCredentials => {
                warn!(cluster = %name, state = phase.label(), was, "cluster state changed");
            }
            Phase::Connecting | Phase::Syncing | Phase::Synced => {
                info!(cluster = %name, state = phase.label(), was, "cluster state changed");
            }
        }
    }

    /// Reports the health, counts, MCS state and place, and sends what is
    /// pending to the feed. False when the model is gone.
    pub(super) async fn flush(&mut self) -> bool {
        self.push_health();
        let counts = self.state.counts();
        self.board.update(&self.run.name, |r| r.counts = counts);
        self.report_mcs();
        self.report_place();
        if self.pending.is_empty() {
            return true;
        }
        // The feed coalesces by object and serves clusters in turn: a send
        // never waits for the model.
        let batch = std::mem::take(&mut self.pending);
        self.tx.send(SourceMsg::Events(batch)).is_ok()
    }

    /// Watch `w` delivered: it works.
    fn delivered(&mut self, w: Watch) {
        if self.health.delivered(w) {
            info!(cluster = %self.run.name, "watches healthy again");
        }
    }

    /// The cluster's API server answered: failed watches it accepted again
    /// since their failure work again.
    pub(super) fn answered(&mut self) {
        let Some(watches) = &self.watches else {
            return;
        };
        if self
            .health
            .accepted(|w, since| watches.accepted_since(w, since))
        {
            info!(cluster = %self.run.name, "watches healthy again");
        }
    }

    fn failed(&mut self, w: Watch, error: String, seen: Instant) {
        let failure = self.health.failed(w, seen, Instant::now());
        if failure.restart {
            self.board.update(&self.run.name, |r| r.watch_restarts += 1);
        }
        if failure.broke {
            warn!(cluster = %self.run.name, %error, "watch broken; serving last-known data");
        }
        self.board
            .update(&self.run.name, |r| r.last_error = Some(error));
    }

    /// Takes what a delivery produced: events queue for the feed,
    /// adjustments are logged and counted, actions run.
    pub(super) fn took(&mut self, out: Output) {
        if !out.adjusted.is_empty() {
            for a in &out.adjusted {
                for w in &a.warnings {
                    warn!(
                        cluster = %self.run.name, action = a.adjustment.label(),
                        reason = w.reason.label(), "{}: {w}", a.object
                    );
                }
            }
            self.board.update(&self.run.name, |r| {
                for a in &out.adjusted {
                    if a.adjustment == Adjustment::Skipped {
                        r.skipped_objects += 1;
                    }
                    for w in &a.warnings {
                        *r.adjusted.entry((a.adjustment, w.reason)).or_default() += 1;
                    }
                }
            });
        }
        if !out.events.is_empty() {
            self.board
                .update(&self.run.name, |r| r.last_event = Some(Instant::now()));
        }
        self.pending.extend(out.events);
        for action in out.actions {
            if let Some(w) = &self.watches {
                match action {
                    Action::ListSlices(key) => w.list_slices(key),
                    Action::ListService(key) => w.list_service(key),
                }
            }
        }
    }

    /// Applies the budget to what the last messages changed, and reports it.
    pub(super) fn settle(&mut self) {
        let mut out = Output::default();
        self.state.settle(&mut out);
        let report = self.state.budget_report();
        self.board
            .budget(&self.run.name, self.last_budget.as_ref(), &report);
        self.last_budget = Some(report);
        self.took(out);
    }

    fn undecodable(&mut self, object: &str, error: &str) {
        warn!(cluster = %self.run.name, object, %error, "object skipped: cannot decode");
        self.board.update(&self.run.name, |r| {
            r.skipped_objects += 1;
            *r.adjusted
                .entry((Adjustment::Skipped, Reason::Undecodable))
                .or_default() += 1;
        });
    }

    /// One message.
    fn handle(&mut self, msg: Msg) {
        let out = match msg {
            Msg::Watch(w, Delivery::Event(e), _) => {
                // `Init` comes before the list is asked for: no evidence.
                if !matches!(e, WatchEvent::Init) {
                    self.delivered(w);
                }
                self.state.watched(w, e)
            }
            Msg::Watch(_, Delivery::Undecodable { object, error }, _) => {
                self.undecodable(&object, &error);
                return;
            }
            Msg::Watch(w, Delivery::Failed(e), seen) => {
                self.failed(w, e, seen);
                return;
            }
            Msg::Listed(key, items, bad) => {
                for (object, error) in bad {
                    self.undecodable(&object, &error);
                }
                self.state.listed(&key, items)
            }
            Msg::ListedService(key, items, bad) => {
                for (object, error) in bad {
                    self.undecodable(&object, &error);
                }
                self.state.listed_service(&key, items)
            }
            Msg::McsApis(apis) => {
                self.mcs_apis(*apis);
                Output::default()
            }
            Msg::Resolved(ips) => self.resolved(&ips),
            Msg::Probe(report) => {
                self.probed(&report);
                return;
            }
            Msg::Heartbeat(error) => {
                debug!(cluster = %self.run.name, %error, "heartbeat failed");
                self.board
                    .update(&self.run.name, |r| r.last_error = Some(error));
                return;
            }
        };
        self.took(out);
        self.maybe_start_all_services();
        if self.state.services_listed() {
            self.start_slice_watch();
        }
    }

    /// The declared gateway's addresses changed: the model gets them, and
    /// the probe (started with the first addresses) probes them.
    fn resolved(&mut self, ips: &[IpAddr]) -> Output {
        let mut out = Output::default();
        let Some(d) = self.declared.as_mut() else {
            return out;
        };
        let resolved = d.resolved(ips, self.state.trust());
        out.adjusted.extend(resolved.adjusted);
        let gateway = resolved.gateway;
        info!(cluster = %self.run.name, addresses = ?gateway.addresses, "gateway addresses");
        let queue = self.queue.clone();
        d.start_probe(
            move |report| {
                // A full queue drops a report; the next one carries the state.
                let _ = queue.try_send(Msg::Probe(report));
            },
            self.stop.clone(),
        );
        self.board.update(&self.run.name, |rep| {
            rep.gateway.clone_from(&gateway.addresses);
        });
        out.events.push(Event::GatewayApplied {
            cluster: self.run.name.clone(),
            gateway: Some(gateway),
        });
        out
    }

    fn probed(&mut self, report: &ProbeReport) {
        self.health.set_gateway_alive(report.alive);
        self.board.update(&self.run.name, |rep| {
            gateway::record(rep.probe.get_or_insert_with(ProbeStatus::default), report);
        });
    }

    /// Handles `first` and whatever else is queued, up to a batch.
    pub(super) fn batch(&mut self, first: Msg, rx: &mut mpsc::Receiver<Msg>) {
        let mut next = Some(first);
        let mut handled = 0;
        while let Some(msg) = next.take() {
            handled += 1;
            self.handle(msg);
            if gather_more(handled, self.pending.len()) {
                next = rx.try_recv().ok();
            }
        }
    }
}
