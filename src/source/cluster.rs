//! One cluster's watch task: thin glue between kube-runtime watchers and
//! the pure [`ClusterState`]. It pumps each watcher's deliveries into the
//! state, runs the targeted slice lists the state asks for, and sends the
//! model what comes out, with the cluster's health.
//!
//! Owns the watch set (one Service watch per distinct export selector, the
//! mirror Services in the local cluster, the remote gateway Service when no
//! gateway is declared, the EndpointSlice watch once Services are listed),
//! batching (the budget judges a batch at its end), gateway hostname
//! resolution and the gateway probe, the sync timeout, and the health it
//! reports: broken when a watch fails, healthy again when each failed
//! watch delivers again or the cluster's API server accepts it anew (which
//! the client's [`crate::k8s::layer::ApiLayer`] records: a re-watch after an
//! error delivers nothing by itself); broken too, since its last answer,
//! when the API server has answered nothing for the cluster timeout
//! ([`super::liveness`]). When such a silence ends, the watches start
//! anew and list, so that what changed meanwhile is seen at once (a watch
//! held open through a partition can take minutes to notice it is dead),
//! and the cluster stays broken until they have. Interpretation of objects
//! stays in `source::state`; retries and relists are kube-runtime's.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::Service as K8sService;
use k8s_openapi::api::discovery::v1::EndpointSlice as K8sSlice;
use kube::Api;
use kube::api::{ApiResource, ListParams};
use kube::core::DeserializeGuard;
use kube::runtime::watcher::{self, Event as WatchEvent};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, info, warn};

use super::SourceMsg;
use super::convert::{Adjustment, Reason, trusted_addresses};
use super::feed::FeedTx;
use super::liveness::{self, Liveness, Reach};
use super::probe::{self, ProbeReport};
use super::selector::Selectors;
use super::spec::{GatewayAddr, GatewaySource, GatewaySpec};
use super::state::{Action, Adjusted, BudgetReport, ClusterState, Object, Output, Watch};
use super::status::{Phase, ProbeStatus, StatusBoard};
use crate::k8s::client::BoundedClient;
use crate::k8s::watch::{
    Delivery, MAX_BACKOFF, PAGE, SLICE_PAGE, backoff, config, guarded_list, guarded_watch,
};
use crate::model::objects::{Gateway, ObjectKey};
use crate::model::{Event, Health, Settings};
use crate::vocab::linkerd::{GATEWAY_NAME, GATEWAY_NAMESPACE, LABEL_MIRRORED, LABEL_SERVICE_NAME};
use crate::vocab::trust::{Claims, Trust};

mod mcs;
use mcs::McsApis;

/// How often gateway hostnames are resolved again (Linkerd's endpoint
/// refresh period).
pub const RESOLVE_PERIOD: Duration = Duration::from_secs(60);
/// Most events gathered from the watches before the budget judges them and
/// they go to the feed.
const BATCH: usize = 1000;
/// Most messages handled in one batch.
const BATCH_MESSAGES: usize = 256;

/// What a cluster task watches.
#[derive(Clone, Debug)]
pub struct ClusterRun {
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
    /// `--mcs`: how often to ask again for an MCS or About API the cluster
    /// did not serve.
    pub mcs_rediscover: Duration,
}

impl ClusterRun {
    /// The label selectors of the Service watches, in the order of their
    /// [`Watch::Services`] indices.
    pub fn service_selectors(&self) -> Vec<String> {
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
    pub fn all_services(&self) -> Option<usize> {
        self.mcs
            .then(|| self.service_selectors().len().saturating_sub(1))
    }

    /// The rules conversion applies to the cluster's objects under
    /// `settings`.
    pub fn trust(&self, settings: &Settings) -> Trust {
        Trust::new(settings.trust.clone(), self.claims.clone())
    }

    /// A state for this run's watches: `previous` carried over (its data
    /// served until the new watches have listed), or a new one.
    pub fn state(&self, previous: Option<ClusterState>) -> ClusterState {
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
    Resolved(Vec<IpAddr>),
    Probe(ProbeReport),
    /// A heartbeat failed: why.
    Heartbeat(String),
}

/// `d` with its objects wrapped as [`Object`]s.
fn lift<K>(d: Delivery<K>, wrap: fn(K) -> Object) -> Delivery<Object> {
    match d {
        Delivery::Event(e) => Delivery::Event(match e {
            WatchEvent::Init => WatchEvent::Init,
            WatchEvent::InitApply(k) => WatchEvent::InitApply(wrap(k)),
            WatchEvent::Apply(k) => WatchEvent::Apply(wrap(k)),
            WatchEvent::Delete(k) => WatchEvent::Delete(wrap(k)),
            WatchEvent::InitDone => WatchEvent::InitDone,
        }),
        Delivery::Undecodable { object, error } => Delivery::Undecodable { object, error },
        Delivery::Failed(e) => Delivery::Failed(e),
    }
}

/// The cluster's watches and lists: where they send, and what stops them.
struct Watches {
    client: BoundedClient,
    tx: mpsc::Sender<Msg>,
    token: CancellationToken,
    /// Each watch's collection path, to ask the client's layer whether the
    /// API server accepted it again.
    paths: HashMap<Watch, String>,
}

impl Watches {
    /// Starts watch `w` of `api`, pumping its deliveries into the task's
    /// queue until the task ends.
    fn spawn<K>(
        &mut self,
        w: Watch,
        api: Api<DeserializeGuard<K>>,
        config: watcher::Config,
        wrap: fn(K) -> Object,
    ) where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        self.paths.insert(w, api.resource_url().to_owned());
        let tx = self.tx.clone();
        let token = self.token.clone();
        tokio::spawn(async move {
            let stream = guarded_watch(api, config);
            let mut stream = std::pin::pin!(stream);
            loop {
                let next = tokio::select! {
                    d = stream.next() => d,
                    () = token.cancelled() => return,
                };
                let Some(d) = next else { return };
                let seen = Instant::now();
                if tx.send(Msg::Watch(w, lift(d, wrap), seen)).await.is_err() {
                    return;
                }
            }
        });
    }

    fn services(&mut self, n: usize, selector: &str) {
        let api = Api::all(self.client.client.clone());
        // An empty selector is the every-Service watch (`--mcs`).
        let config = match selector {
            "" => config(PAGE),
            s => config(PAGE).labels(s),
        };
        self.spawn(Watch::Services(n), api, config, Object::service);
    }

    /// Watch `w` of the MCS or About resource `ar`, in every namespace.
    fn dynamic(&mut self, w: Watch, ar: &ApiResource, config: watcher::Config) {
        let api = Api::all_with(self.client.client.clone(), ar);
        self.spawn(w, api, config, Object::dynamic);
    }

    /// Lists one Service in the background (`--mcs`: its ServiceExport
    /// came after the every-Service watch passed it).
    fn list_service(&self, key: ObjectKey) {
        let api = Api::namespaced(self.client.client.clone(), &key.namespace);
        let params = ListParams::default().fields(&format!("metadata.name={}", key.name));
        let tx = self.tx.clone();
        let token = self.token.clone();
        tokio::spawn(async move {
            if let Some((items, bad)) = list_retrying(api, params, &key, token).await {
                let _ = tx.send(Msg::ListedService(key, items, bad)).await;
            }
        });
    }

    fn slices(&mut self) {
        let api = Api::all(self.client.client.clone());
        self.spawn(
            Watch::Slices,
            api,
            config(SLICE_PAGE).labels(LABEL_SERVICE_NAME),
            Object::slice,
        );
    }

    fn gateway(&mut self) {
        let api = Api::namespaced(self.client.client.clone(), GATEWAY_NAMESPACE);
        self.spawn(
            Watch::Gateway,
            api,
            config(PAGE).fields(&format!("metadata.name={GATEWAY_NAME}")),
            Object::service,
        );
    }

    /// Lists one service's slices in the background. The client's layer
    /// bounds how many such lists reach the API server at once.
    fn list_slices(&self, key: ObjectKey) {
        let api = Api::namespaced(self.client.client.clone(), &key.namespace);
        let params = ListParams::default()
            .labels(&format!("{LABEL_SERVICE_NAME}={}", key.name))
            .limit(SLICE_PAGE);
        let tx = self.tx.clone();
        let token = self.token.clone();
        tokio::spawn(async move {
            if let Some((items, bad)) = list_retrying(api, params, &key, token).await {
                let _ = tx.send(Msg::Listed(key, items, bad)).await;
            }
        });
    }
}

/// Lists `api` under `params` (for service `key`), retrying until it
/// succeeds; `None` when cancelled.
async fn list_retrying<K>(
    api: Api<DeserializeGuard<K>>,
    params: ListParams,
    key: &ObjectKey,
    shutdown: CancellationToken,
) -> Option<(Vec<K>, Vec<(String, String)>)>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut delays = backoff();
    loop {
        let listed = tokio::select! {
            l = guarded_list(&api, &params) => l,
            () = shutdown.cancelled() => return None,
        };
        match listed {
            Ok(found) => return Some(found),
            Err(e) => {
                debug!(service = %key, error = %e, "targeted list failed; retrying");
                let delay = delays.next().unwrap_or(MAX_BACKOFF);
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = shutdown.cancelled() => return None,
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
    let mut known: HashMap<String, Vec<IpAddr>> = HashMap::new();
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
                            warn!(%host, error = %e, "cannot resolve the gateway address; keeping the last result");
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

/// A declared gateway: its resolved addresses go to the probe.
struct DeclaredGateway {
    spec: GatewaySpec,
    addrs: watch::Sender<Vec<IpAddr>>,
    probe_started: bool,
}

struct Runner {
    run: ClusterRun,
    state: ClusterState,
    tx: FeedTx,
    board: Arc<StatusBoard>,
    /// `None` when the cluster has no client.
    watches: Option<Watches>,
    /// The queue every watch, list, resolver and probe sends to.
    queue: mpsc::Sender<Msg>,
    /// Stops the watches when the task ends.
    _stop: DropGuard,
    stop: CancellationToken,
    slice_watch_started: bool,
    declared: Option<DeclaredGateway>,
    /// Failed watches, and when they last failed.
    failing: HashMap<Watch, Instant>,
    broken_since: Option<Instant>,
    /// Whether the API server answers.
    liveness: Liveness,
    /// Broken since, carried over from the watches this run replaced,
    /// until the new ones have listed.
    carried: Option<Instant>,
    last_phase: Option<Phase>,
    gateway_alive: Option<bool>,
    gave_up: bool,
    last_health: Option<Health>,
    last_budget: Option<BudgetReport>,
    pending: Vec<Event>,
    /// The every-Service watch (`--mcs`) was started, or found pointless.
    all_services_started: bool,
    /// The MCS and About APIs whose watches run (`--mcs`; `None` before
    /// discovery answered).
    mcs_found: Option<McsApis>,
}

impl Runner {
    fn new(
        run: ClusterRun,
        state: ClusterState,
        carried: Option<Instant>,
        tx: FeedTx,
        board: Arc<StatusBoard>,
        shutdown: &CancellationToken,
    ) -> (Self, mpsc::Receiver<Msg>) {
        let (queue, rx) = mpsc::channel::<Msg>(256);
        let stop = shutdown.child_token();
        let watches = run.client.as_ref().ok().map(|c| Watches {
            client: c.clone(),
            tx: queue.clone(),
            token: stop.clone(),
            paths: HashMap::new(),
        });
        let declared = match &run.gateway {
            GatewaySource::Spec(spec) => Some(DeclaredGateway {
                spec: spec.clone(),
                addrs: watch::Sender::new(Vec::new()),
                probe_started: false,
            }),
            _ => None,
        };
        let last_answered = run
            .client
            .as_ref()
            .ok()
            .and_then(|c| c.stats.last_answered());
        let timeout = run.settings.borrow().cluster_timeout;
        // A restarted run carries on from the phase its cluster was in, so
        // the log says `broken, was unreachable`, not `was new`.
        let last_phase = board.phase(&run.name);
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
            failing: HashMap::new(),
            broken_since: None,
            liveness: Liveness::new(Instant::now(), last_answered, timeout),
            carried,
            last_phase,
            gateway_alive: None,
            gave_up: false,
            last_health: None,
            last_budget: None,
            pending: Vec::new(),
            all_services_started: false,
            mcs_found: None,
        };
        (r, rx)
    }

    /// The budget for `settings`: the local cluster's exports are our own,
    /// only linked ones are held to a budget.
    /// Returns false when the budget did not change.
    fn set_budget(&mut self, settings: &Settings) -> bool {
        self.state
            .set_budget(settings.budget.for_cluster(self.run.local))
    }

    /// Starts the watches (or reports why there are none) and the gateway.
    fn start(&mut self) {
        if let Some(w) = &self.watches {
            let stats = w.client.stats.clone();
            self.board
                .update(&self.run.name, |rep| rep.api = Some(stats));
        }
        let Some(w) = self.watches.as_mut() else {
            let e = match &self.run.client {
                Err(e) => e.clone(),
                Ok(_) => String::new(),
            };
            warn!(cluster = %self.run.name, problem = %e, "cluster cannot be watched");
            self.board
                .update(&self.run.name, |rep| rep.problem = Some(e));
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
        let selectors = self.run.service_selectors();
        let all = self.run.all_services();
        for (n, s) in selectors.iter().enumerate() {
            // The every-Service watch waits for the exports' list.
            if Some(n) != all {
                w.services(n, s);
            }
        }
        match &self.run.gateway {
            GatewaySource::RemoteService => {
                self.state.set_gateway_watch(true);
                w.gateway();
            }
            GatewaySource::Spec(spec) => {
                self.state.set_gateway_watch(false);
                tokio::spawn(resolve_gateway(
                    spec.addresses.clone(),
                    self.queue.clone(),
                    self.stop.clone(),
                ));
                if spec.probe.is_some() {
                    self.board.update(&self.run.name, |rep| {
                        rep.probe = Some(ProbeStatus::default());
                    });
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
        // Nothing exported by selector: the slice watch has nothing to
        // serve, but it still marks the cluster synced.
        if selectors.is_empty() {
            self.start_slice_watch();
        }
        self.start_mcs();
    }

    fn start_slice_watch(&mut self) {
        if let Some(w) = self.watches.as_mut()
            && !self.slice_watch_started
        {
            self.slice_watch_started = true;
            w.slices();
        }
    }

    /// Since when its data is not confirmed: the earliest of a failed
    /// watch, a silence (from the last answer) and a broken state carried
    /// over from the watches this run replaced.
    fn broken(&self) -> Option<Instant> {
        let silent = match self.liveness.reach() {
            Reach::Silent(since) => Some(since),
            Reach::Waiting | Reach::Answering => None,
        };
        [self.broken_since, silent, self.carried]
            .into_iter()
            .flatten()
            .min()
    }

    fn health(&self) -> Health {
        Health {
            synced: self.state.synced(),
            broken_since: self.broken(),
            gateway_alive: self.gateway_alive,
            sync_given_up: self.gave_up,
        }
    }

    fn push_health(&mut self) {
        if self.carried.is_some() && self.state.relisted() {
            info!(cluster = %self.run.name, "listed anew: serving what the cluster holds now");
            self.carried = None;
        }
        let h = self.health();
        if self.last_health.as_ref() != Some(&h) {
            self.last_health = Some(h.clone());
            self.pending.push(Event::Health {
                cluster: self.run.name.clone(),
                health: h.clone(),
            });
            let silent = match self.liveness.reach() {
                Reach::Silent(since) => Some(since),
                Reach::Waiting | Reach::Answering => None,
            };
            self.board.update(&self.run.name, |r| {
                r.synced = h.synced;
                r.broken_since = h.broken_since;
                r.silent_since = silent;
                r.gave_up = h.sync_given_up;
            });
        }
        self.log_phase();
    }

    /// One log line per change of the cluster's phase.
    fn log_phase(&mut self) {
        let Some(phase) = self.board.phase(&self.run.name) else {
            return;
        };
        if self.last_phase == Some(phase) {
            return;
        }
        let was = self.last_phase.replace(phase).map_or("new", Phase::label);
        let name = &self.run.name;
        match phase {
            Phase::Unreachable => warn!(
                cluster = %name, state = phase.label(), was, timeout = ?self.liveness.timeout(),
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

    async fn flush(&mut self) -> bool {
        self.push_health();
        let counts = self.state.counts();
        self.board.update(&self.run.name, |r| r.counts = counts);
        self.report_mcs();
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
        if self.failing.remove(&w).is_some() {
            self.maybe_healthy();
        }
    }

    /// The cluster's API server answered: failed watches it accepted again
    /// since their failure work again.
    fn answered(&mut self) {
        let Some(watches) = &self.watches else {
            return;
        };
        let stats = &watches.client.stats;
        self.failing.retain(|w, since| {
            !watches
                .paths
                .get(w)
                .is_some_and(|p| stats.watch_accepted_since(p, *since))
        });
        self.maybe_healthy();
    }

    fn maybe_healthy(&mut self) {
        if self.failing.is_empty() && self.broken_since.is_some() {
            info!(cluster = %self.run.name, "watches healthy again");
            self.broken_since = None;
        }
    }

    fn failed(&mut self, w: Watch, error: String, seen: Instant) {
        if self.failing.insert(w, seen).is_none() {
            self.board.update(&self.run.name, |r| r.watch_restarts += 1);
        }
        if self.broken_since.is_none() {
            warn!(cluster = %self.run.name, %error, "watch broken; serving last-known data");
            self.broken_since = Some(Instant::now());
        }
        self.board
            .update(&self.run.name, |r| r.last_error = Some(error));
    }

    /// Takes what a delivery produced: events queue for the feed,
    /// adjustments are logged and counted, actions run.
    fn took(&mut self, out: Output) {
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
    fn settle(&mut self) {
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
            Msg::Resolved(ips) => self.resolved(ips),
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
    fn resolved(&mut self, ips: Vec<IpAddr>) -> Output {
        let mut out = Output::default();
        let Some(d) = self.declared.as_mut() else {
            return out;
        };
        // Never probed nor answered: a Link names addresses as freely as
        // a remote object does.
        let trusted = trusted_addresses(self.state.trust(), &ips, "gateway address");
        if !trusted.warnings.is_empty() {
            out.adjusted.push(Adjusted {
                object: "declared gateway".to_owned(),
                adjustment: Adjustment::Clamped,
                warnings: trusted.warnings,
            });
        }
        let ips = trusted.value;
        info!(cluster = %self.run.name, addresses = ?ips, "gateway addresses");
        d.addrs.send_replace(ips.clone());
        if let Some(p) = d.spec.probe.clone().filter(|_| !d.probe_started) {
            d.probe_started = true;
            let queue = self.queue.clone();
            tokio::spawn(probe::run(
                p,
                d.addrs.subscribe(),
                move |report| {
                    // A full queue drops a report; the next one carries the state.
                    let _ = queue.try_send(Msg::Probe(report));
                },
                self.stop.clone(),
            ));
        }
        self.board
            .update(&self.run.name, |rep| rep.gateway = ips.clone());
        out.events.push(Event::GatewayApplied {
            cluster: self.run.name.clone(),
            gateway: Some(Gateway {
                addresses: ips,
                port: d.spec.port,
                identity: d.spec.identity.clone(),
            }),
        });
        out
    }

    fn probed(&mut self, report: &ProbeReport) {
        self.gateway_alive = report.alive;
        self.board.update(&self.run.name, |rep| {
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

    /// Handles `first` and whatever else is queued, up to a batch.
    fn batch(&mut self, first: Msg, rx: &mut mpsc::Receiver<Msg>) {
        let mut next = Some(first);
        let mut handled = 0;
        while let Some(msg) = next.take() {
            handled += 1;
            self.handle(msg);
            if handled < BATCH_MESSAGES && self.pending.len() < BATCH {
                next = rx.try_recv().ok();
            }
        }
    }
}

/// Runs one cluster until `shutdown`; returns its state so a restart (new
/// credentials or selectors) carries the data over. Reloaded trust settings
/// restart its watches in place: what they list is converted anew, and the
/// old data is served meanwhile. So does the end of a silence: watches held
/// open through it may be dead without knowing, and a fresh list is the
/// quickest way to what changed meanwhile.
pub async fn run(
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
    // branch below just waits.
    let (_no_client, no_answers) = watch::channel(None);
    let mut answered = r
        .watches
        .as_ref()
        .map_or(no_answers, |w| w.client.stats.subscribe());
    let why = 'run: {
        if !r.flush().await {
            break 'run Ended::Stopped;
        }
        let sync_deadline = tokio::time::sleep(sync_timeout);
        tokio::pin!(sync_deadline);
        loop {
            let silence = r.watches.as_ref().and(r.liveness.deadline());
            let msg = tokio::select! {
                m = rx.recv() => match m { Some(m) => m, None => break 'run Ended::Stopped },
                () = &mut sync_deadline, if !r.gave_up && !r.state.synced() => {
                    warn!(cluster = %r.run.name, timeout = ?sync_timeout, "not synced within the sync timeout; readiness stops waiting for it");
                    r.gave_up = true;
                    if !r.flush().await { break 'run Ended::Stopped; }
                    continue;
                }
                () = until(silence) => {
                    if r.liveness.check(Instant::now()) && !r.flush().await {
                        break 'run Ended::Stopped;
                    }
                    continue;
                }
                Ok(()) = settings.changed() => {
                    let new = settings.borrow_and_update().clone();
                    // Other settings are the answers'; only the budget, the
                    // trust settings and the cluster timeout are ours.
                    if new.trust != *r.state.trust().settings() {
                        break 'run Ended::Retrust;
                    }
                    r.liveness.set_timeout(new.cluster_timeout);
                    if !r.set_budget(&new) {
                        continue;
                    }
                    r.settle();
                    if !r.flush().await { break 'run Ended::Stopped; }
                    continue;
                }
                Ok(()) = answered.changed() => {
                    let at = *answered.borrow_and_update();
                    let before = r.broken();
                    if let Some(at) = at
                        && r.liveness.answered(at)
                    {
                        r.carried = before;
                        break 'run Ended::Answers;
                    }
                    if !r.failing.is_empty() {
                        r.answered();
                    }
                    if !r.flush().await { break 'run Ended::Stopped; }
                    continue;
                }
                () = shutdown.cancelled() => break 'run Ended::Stopped,
            };
            r.batch(msg, &mut rx);
            r.settle();
            if !r.flush().await {
                break 'run Ended::Stopped;
            }
            // Sending never waits, so a cluster in a storm would keep this
            // worker thread: let the other clusters' tasks and the model run.
            tokio::task::yield_now().await;
        }
    };
    Outcome {
        broken_since: r.broken(),
        why,
        state: r.state,
    }
}
