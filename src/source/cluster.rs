//! One cluster's watch task: runs the list+watch loops a cluster needs,
//! feeds their deliveries through [`ClusterState`], and sends the model the
//! resulting events and health.
//!
//! Owns the watch set (one Service watch per distinct export selector, the
//! mirror Services in the local cluster, the remote gateway Service when no
//! gateway is declared, the EndpointSlice watch once Services are listed),
//! targeted slice lists, gateway hostname resolution, the gateway probe,
//! the sync timeout and the health it reports (synced, broken since, gateway
//! alive). Interpretation of objects stays in `source::state`.

use std::collections::{BTreeSet, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service as K8sService;
use k8s_openapi::api::discovery::v1::EndpointSlice as K8sSlice;
use kube::Client;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::SourceMsg;
use super::api::{Backoff, MAX_BACKOFF, WatchMsg, WatchTarget, list_watch};
use super::convert::{Adjustment, Reason};
use super::feed::FeedTx;
use super::probe::{self, ProbeReport};
use super::selector::Selectors;
use super::spec::{GatewayAddr, GatewaySource, GatewaySpec};
use super::state::{Action, BudgetReport, ClusterState, Output};
use super::status::{ProbeStatus, StatusBoard};
use crate::model::budget::Budget;
use crate::model::objects::{Gateway, ObjectKey};
use crate::model::{Event, Health, Settings};
use crate::vocab::linkerd::{GATEWAY_NAME, GATEWAY_NAMESPACE, LABEL_MIRRORED, LABEL_SERVICE_NAME};

/// How often gateway hostnames are resolved again (Linkerd's endpoint
/// refresh period).
pub const RESOLVE_PERIOD: Duration = Duration::from_secs(60);
/// Most events gathered from the watches before the budget judges them and
/// they go to the feed.
const BATCH: usize = 1000;

/// What a cluster task watches.
#[derive(Clone)]
pub struct ClusterRun {
    /// Cluster name.
    pub name: Arc<str>,
    /// The local cluster (also watches mirror Services).
    pub local: bool,
    /// The API client; `Err` says why there is none.
    pub client: Result<Client, String>,
    /// Export selectors.
    pub selectors: Selectors,
    /// The gateway.
    pub gateway: GatewaySource,
    /// Readiness stops waiting for the first sync after this long.
    pub sync_timeout: Duration,
    /// The answer settings; their budget bounds what the cluster may make
    /// us hold, and follows a configuration reload.
    pub settings: watch::Receiver<Arc<Settings>>,
}

impl ClusterRun {
    /// The Service watches, in the order their indices are used.
    pub fn service_targets(&self) -> Vec<WatchTarget> {
        let mut out: Vec<WatchTarget> = self
            .selectors
            .distinct()
            .into_iter()
            .map(|s| services(Some(s.to_query())))
            .collect();
        if self.local {
            out.push(services(Some(format!("{LABEL_MIRRORED}=true"))));
        }
        out
    }
}

fn services(label_selector: Option<String>) -> WatchTarget {
    WatchTarget {
        path: "/api/v1/services".into(),
        label_selector,
        field_selector: None,
    }
}

fn slice_target(namespace: Option<&str>, service: Option<&str>) -> WatchTarget {
    WatchTarget {
        path: match namespace {
            Some(ns) => format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"),
            None => "/apis/discovery.k8s.io/v1/endpointslices".into(),
        },
        label_selector: Some(match service {
            Some(s) => format!("{LABEL_SERVICE_NAME}={s}"),
            None => LABEL_SERVICE_NAME.to_owned(),
        }),
        field_selector: None,
    }
}

enum Msg {
    Service(usize, WatchMsg<K8sService>),
    Slice(WatchMsg<K8sSlice>),
    Gateway(WatchMsg<K8sService>),
    Listed(ObjectKey, Vec<K8sSlice>),
    Resolved(Vec<IpAddr>),
    Probe(ProbeReport),
}

/// Watch ids for health: services are `0..n`, then these.
const SLICE_WATCH: usize = usize::MAX - 1;
const GATEWAY_WATCH: usize = usize::MAX;

fn forward<K: Send + 'static>(
    mut rx: mpsc::Receiver<WatchMsg<K>>,
    tx: mpsc::Sender<Msg>,
    wrap: impl Fn(WatchMsg<K>) -> Msg + Send + 'static,
) {
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if tx.send(wrap(m)).await.is_err() {
                return;
            }
        }
    });
}

fn spawn_watch<K>(
    client: &Client,
    target: WatchTarget,
    tx: &mpsc::Sender<Msg>,
    shutdown: &CancellationToken,
    wrap: impl Fn(WatchMsg<K>) -> Msg + Send + 'static,
) where
    K: serde::de::DeserializeOwned + Send + 'static,
{
    let (wtx, wrx) = mpsc::channel(64);
    tokio::spawn(list_watch(client.clone(), target, wtx, shutdown.clone()));
    forward(wrx, tx.clone(), wrap);
}

/// Lists one service's slices, retrying until it succeeds or is cancelled.
async fn list_slices(
    client: Client,
    key: ObjectKey,
    tx: mpsc::Sender<Msg>,
    shutdown: CancellationToken,
) {
    let target = slice_target(Some(&key.namespace), Some(&key.name));
    let mut backoff = Backoff::new(MAX_BACKOFF);
    loop {
        match super::api::list_once::<K8sSlice>(&client, &target).await {
            Ok(items) => {
                let _ = tx.send(Msg::Listed(key, items)).await;
                return;
            }
            Err(e) => {
                debug!(service = %key, error = %e, "slice list failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(backoff.next_delay()) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        }
    }
}

/// Resolves the declared gateway addresses now and every [`RESOLVE_PERIOD`],
/// reporting when the set changes. A failed lookup keeps the previous
/// addresses of that host.
async fn resolve_gateway(
    addrs: Vec<GatewayAddr>,
    tx: mpsc::Sender<Msg>,
    shutdown: CancellationToken,
) {
    let mut last: Option<Vec<IpAddr>> = None;
    let mut known: std::collections::HashMap<String, Vec<IpAddr>> =
        std::collections::HashMap::new();
    loop {
        let mut ips = BTreeSet::new();
        for a in &addrs {
            match a {
                GatewayAddr::Ip(ip) => {
                    ips.insert(*ip);
                }
                GatewayAddr::Host(host) => {
                    match tokio::net::lookup_host((host.as_str(), 0)).await {
                        Ok(found) => {
                            let found: Vec<IpAddr> = found.map(|s| s.ip()).collect();
                            known.insert(host.clone(), found);
                        }
                        Err(e) => {
                            warn!(%host, error = %e, "cannot resolve the gateway address; keeping the last result")
                        }
                    }
                    ips.extend(known.get(host).into_iter().flatten().copied());
                }
            }
        }
        let ips: Vec<IpAddr> = ips.into_iter().collect();
        if last.as_ref() != Some(&ips) {
            last = Some(ips.clone());
            if tx.send(Msg::Resolved(ips)).await.is_err() {
                return;
            }
        }
        if !addrs.iter().any(|a| matches!(a, GatewayAddr::Host(_))) {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(RESOLVE_PERIOD) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

struct Runner {
    run: ClusterRun,
    state: ClusterState,
    tx: FeedTx,
    board: Arc<StatusBoard>,
    failing: HashSet<usize>,
    broken_since: Option<Instant>,
    gateway_alive: Option<bool>,
    gave_up: bool,
    last_health: Option<Health>,
    last_budget: Option<BudgetReport>,
    pending: Vec<Event>,
}

impl Runner {
    fn health(&self) -> Health {
        Health {
            synced: self.state.synced(),
            broken_since: self.broken_since,
            gateway_alive: self.gateway_alive,
            sync_given_up: self.gave_up,
        }
    }

    fn push_health(&mut self) {
        let h = self.health();
        if self.last_health.as_ref() != Some(&h) {
            self.last_health = Some(h.clone());
            self.pending.push(Event::Health {
                cluster: self.run.name.clone(),
                health: h.clone(),
            });
            self.board.update(&self.run.name, |r| {
                r.synced = h.synced;
                r.broken_since = h.broken_since;
                r.gave_up = h.sync_given_up;
            });
        }
    }

    async fn flush(&mut self) -> bool {
        self.push_health();
        let counts = self.state.counts();
        self.board.update(&self.run.name, |r| r.counts = counts);
        if self.pending.is_empty() {
            return true;
        }
        // The feed coalesces by object and serves clusters in turn: a send
        // never waits for the model.
        let batch = std::mem::take(&mut self.pending);
        self.tx.send(SourceMsg::Events(batch)).await.is_ok()
    }

    fn connected(&mut self, id: usize) {
        self.failing.remove(&id);
        if self.failing.is_empty() && self.broken_since.is_some() {
            info!(cluster = %self.run.name, "watches healthy again");
            self.broken_since = None;
        }
    }

    fn failed(&mut self, id: usize, error: String) {
        if self.failing.insert(id) {
            self.board.update(&self.run.name, |r| r.watch_restarts += 1);
        }
        if self.broken_since.is_none() {
            warn!(cluster = %self.run.name, %error, "watch broken; serving last-known data");
            self.broken_since = Some(Instant::now());
        }
        self.board
            .update(&self.run.name, |r| r.last_error = Some(error));
    }

    fn took(&mut self, out: Output) -> Vec<Action> {
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
        out.actions
    }

    /// Applies the budget to what the last messages changed, and reports it.
    fn settle(&mut self) -> Vec<Action> {
        let mut out = Output::default();
        self.state.settle(&mut out);
        let report = self.state.budget_report();
        self.board
            .budget(&self.run.name, self.last_budget.as_ref(), &report);
        self.last_budget = Some(report);
        self.took(out)
    }

    fn undecodable(&mut self, object: Option<String>, error: &str) {
        warn!(cluster = %self.run.name, object = object.as_deref().unwrap_or("?"), %error, "object skipped: cannot decode");
        self.board.update(&self.run.name, |r| {
            r.skipped_objects += 1;
            *r.adjusted
                .entry((Adjustment::Skipped, Reason::Undecodable))
                .or_default() += 1;
        });
    }
}

/// Runs one cluster until `shutdown`; returns its state so a restart (new
/// credentials or selectors) carries the data over.
pub async fn run(
    run: ClusterRun,
    state: ClusterState,
    tx: FeedTx,
    board: Arc<StatusBoard>,
    shutdown: CancellationToken,
) -> ClusterState {
    let (mtx, mut mrx) = mpsc::channel::<Msg>(256);
    let targets = run.service_targets();
    let mut r = Runner {
        state,
        tx,
        board,
        failing: HashSet::new(),
        broken_since: None,
        gateway_alive: None,
        gave_up: false,
        last_health: None,
        last_budget: None,
        pending: Vec::new(),
        run,
    };
    let mut settings = r.run.settings.clone();
    // The local cluster's exports are our own: only linked ones are held
    // to a budget.
    let local = r.run.local;
    let budget_of = move |s: &Settings| {
        if local { Budget::UNLIMITED } else { s.budget }
    };
    let budget = budget_of(&settings.borrow_and_update());
    r.state.set_budget(budget);
    let watches = shutdown.child_token();
    let _stop_watches = watches.clone().drop_guard();
    let mut slice_watch_started = false;
    let mut probe_started = false;

    let client = match &r.run.client {
        Ok(c) => Some(c.clone()),
        Err(e) => {
            warn!(cluster = %r.run.name, problem = %e, "cluster cannot be watched");
            let e = e.clone();
            r.board.update(&r.run.name, |rep| rep.problem = Some(e));
            None
        }
    };
    let (addr_tx, addr_rx) = watch::channel(Vec::<IpAddr>::new());
    if let Some(client) = &client {
        for (w, t) in targets.iter().enumerate() {
            spawn_watch(client, t.clone(), &mtx, &watches, move |m| {
                Msg::Service(w, m)
            });
        }
        match &r.run.gateway {
            GatewaySource::RemoteService => {
                r.state.set_gateway_watch(true);
                spawn_watch(
                    client,
                    WatchTarget {
                        path: format!("/api/v1/namespaces/{GATEWAY_NAMESPACE}/services"),
                        label_selector: None,
                        field_selector: Some(format!("metadata.name={GATEWAY_NAME}")),
                    },
                    &mtx,
                    &watches,
                    Msg::Gateway,
                );
            }
            GatewaySource::Spec(spec) => {
                r.state.set_gateway_watch(false);
                tokio::spawn(resolve_gateway(
                    spec.addresses.clone(),
                    mtx.clone(),
                    watches.clone(),
                ));
                if spec.probe.is_some() {
                    r.board
                        .update(&r.run.name, |rep| rep.probe = Some(ProbeStatus::default()));
                }
            }
            GatewaySource::None => {
                r.state.set_gateway_watch(false);
                r.pending.push(Event::GatewayApplied {
                    cluster: r.run.name.clone(),
                    gateway: None,
                });
            }
        }
        if targets.is_empty() {
            // Nothing exported by selector: the slice watch has nothing to
            // serve either, but it still marks the cluster synced.
            slice_watch_started = true;
            spawn_watch(client, slice_target(None, None), &mtx, &watches, Msg::Slice);
        }
    }
    if !r.flush().await {
        return r.state;
    }

    let sync_deadline = tokio::time::sleep(r.run.sync_timeout);
    tokio::pin!(sync_deadline);
    let gateway_spec: Option<GatewaySpec> = match &r.run.gateway {
        GatewaySource::Spec(s) => Some(s.clone()),
        _ => None,
    };
    let list = |key: ObjectKey| {
        if let Some(c) = &client {
            tokio::spawn(list_slices(c.clone(), key, mtx.clone(), watches.clone()));
        }
    };
    loop {
        let msg = tokio::select! {
            m = mrx.recv() => match m { Some(m) => m, None => break },
            () = &mut sync_deadline, if !r.gave_up && !r.state.synced() => {
                warn!(cluster = %r.run.name, timeout = ?r.run.sync_timeout, "not synced within the sync timeout; readiness stops waiting for it");
                r.gave_up = true;
                if !r.flush().await { break; }
                continue;
            }
            Ok(()) = settings.changed() => {
                let budget = budget_of(&settings.borrow_and_update());
                r.state.set_budget(budget);
                for Action::ListSlices(key) in r.settle() {
                    list(key);
                }
                if !r.flush().await { break; }
                continue;
            }
            () = shutdown.cancelled() => break,
        };
        let mut next = Some(msg);
        let mut handled = 0;
        while let Some(msg) = next.take() {
            handled += 1;
            let mut out = Output::default();
            match msg {
                Msg::Service(w, m) => match m {
                    WatchMsg::Init => r.state.service_init(w),
                    WatchMsg::Page(items) => r.state.service_page(w, items, &mut out),
                    WatchMsg::InitDone => r.state.service_init_done(w, &mut out),
                    WatchMsg::Apply(s) => r.state.service_apply(w, &s, &mut out),
                    WatchMsg::Delete(s) => r.state.service_delete(w, &s, &mut out),
                    WatchMsg::Connected => r.connected(w),
                    WatchMsg::Failed(e) => r.failed(w, e),
                    WatchMsg::Undecodable { object, error } => r.undecodable(object, &error),
                },
                Msg::Slice(m) => match m {
                    WatchMsg::Init => r.state.slice_init(),
                    WatchMsg::Page(items) => r.state.slice_page(items, &mut out),
                    WatchMsg::InitDone => r.state.slice_init_done(&mut out),
                    WatchMsg::Apply(s) => r.state.slice_apply(&s, &mut out),
                    WatchMsg::Delete(s) => r.state.slice_delete(&s, &mut out),
                    WatchMsg::Connected => r.connected(SLICE_WATCH),
                    WatchMsg::Failed(e) => r.failed(SLICE_WATCH, e),
                    WatchMsg::Undecodable { object, error } => r.undecodable(object, &error),
                },
                Msg::Gateway(m) => match m {
                    WatchMsg::Init => r.state.gateway_init(),
                    WatchMsg::Page(items) => {
                        for s in items {
                            r.state.gateway_apply(&s, &mut out);
                        }
                    }
                    WatchMsg::InitDone => r.state.gateway_init_done(&mut out),
                    WatchMsg::Apply(s) => r.state.gateway_apply(&s, &mut out),
                    WatchMsg::Delete(_) => r.state.gateway_delete(&mut out),
                    WatchMsg::Connected => r.connected(GATEWAY_WATCH),
                    WatchMsg::Failed(e) => r.failed(GATEWAY_WATCH, e),
                    WatchMsg::Undecodable { object, error } => r.undecodable(object, &error),
                },
                Msg::Listed(key, items) => r.state.slices_listed(&key, items, &mut out),
                Msg::Resolved(ips) => {
                    if let Some(spec) = &gateway_spec {
                        info!(cluster = %r.run.name, addresses = ?ips, "gateway addresses");
                        let _ = addr_tx.send(ips.clone());
                        // The first probe waits for addresses to probe.
                        if let Some(p) = spec.probe.clone().filter(|_| !probe_started) {
                            probe_started = true;
                            let ptx = mtx.clone();
                            tokio::spawn(probe::run(
                                p,
                                addr_rx.clone(),
                                move |report| {
                                    // A full queue drops a report; the next one carries the state.
                                    let _ = ptx.try_send(Msg::Probe(report));
                                },
                                watches.clone(),
                            ));
                        }
                        r.board.update(&r.run.name, |rep| rep.gateway = ips.clone());
                        out.events.push(Event::GatewayApplied {
                            cluster: r.run.name.clone(),
                            gateway: Some(Gateway {
                                addresses: ips,
                                port: spec.port,
                                identity: spec.identity.clone(),
                            }),
                        });
                    }
                }
                Msg::Probe(report) => {
                    r.gateway_alive = report.alive;
                    r.board.update(&r.run.name, |rep| {
                        let p = rep.probe.get_or_insert_with(ProbeStatus::default);
                        p.alive = report.alive;
                        p.consecutive_failures = report.consecutive_failures;
                        if report.success {
                            p.successes += 1;
                            p.last_latency = report.latency;
                        } else {
                            p.failures += 1;
                            p.last_error.clone_from(&report.error);
                        }
                    });
                }
            }
            for Action::ListSlices(key) in r.took(out) {
                list(key);
            }
            if !slice_watch_started
                && r.state.services_listed()
                && let Some(c) = &client
            {
                slice_watch_started = true;
                spawn_watch(c, slice_target(None, None), &mtx, &watches, Msg::Slice);
            }
            if handled < 256 && r.pending.len() < BATCH {
                next = mrx.try_recv().ok();
            }
        }
        for Action::ListSlices(key) in r.settle() {
            list(key);
        }
        if !r.flush().await {
            break;
        }
        // Sending never waits, so a cluster in a storm would keep this
        // worker thread: let the other clusters' tasks and the model run.
        tokio::task::yield_now().await;
    }
    r.state
}
