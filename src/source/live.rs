//! Live mode: which clusters are linked (Linkerd Links and their Secrets in
//! the local cluster, or the clusters file), and one watch task per cluster,
//! started, restarted and stopped as that set changes.
//!
//! Owns the supervisor (a Link added starts that cluster alone; a changed
//! Link or Secret restarts it while its old data keeps being served, unless
//! only its configured place changed, which the model is told without a
//! restart; a deleted Link removes its names), the choice of the Link API version the
//! local cluster serves (asked through `kube::discovery`), the Link and
//! Secret watches (guarded kube-runtime watchers), each cluster's bounded
//! client ([`crate::k8s::client`]), and the pure rule from Links and
//! Secrets to linked clusters ([`desired_from_links`]). Watching one
//! cluster is `source::cluster`. It builds no request by hand.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject};
use kube::core::DeserializeGuard;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::SourceMsg;
use super::cluster::{self, ClusterRun};
use super::clusters_file::load_clusters_file;
use super::feed::FeedTx;
use super::link::{Link, link_from_dynamic};
use super::selector::Selectors;
use super::spec::{GatewaySource, LinkedCluster};
use super::state::ClusterState;
use super::status::StatusBoard;
use crate::k8s::client::{self, BoundedClient};
use crate::k8s::credentials::check_secret_kubeconfig;
use crate::k8s::discover;
use crate::k8s::index::{Index, Outcome, Relist};
use crate::k8s::retry::{pause, retry_logged};
use crate::k8s::watch::{Delivery, PAGE, config, guarded_watch};
use crate::model::{Event, Settings};
use crate::vocab::place::{Place, PlaceFrom};
use crate::vocab::trust::Claims;

/// The Secret key holding the kubeconfig (Linkerd's `k8s.ConfigKeyName`).
pub const SECRET_KEY: &str = "kubeconfig";
/// The Link API group.
pub const LINK_GROUP: &str = "multicluster.linkerd.io";
/// Link API versions, newest first.
pub const LINK_VERSIONS: [&str; 3] = ["v1alpha3", "v1alpha2", "v1alpha1"];
/// How often the clusters file (and the kubeconfigs it names) is checked.
pub const FILE_POLL: Duration = Duration::from_secs(1);
/// How often a missing Link CRD is looked for again.
const CRD_RECHECK: Duration = Duration::from_secs(30);

/// Where linked clusters come from.
#[derive(Debug, Clone)]
pub enum Links {
    /// Linkerd Links in this namespace.
    Linkerd {
        /// The link namespace.
        namespace: String,
    },
    /// The clusters file.
    File(PathBuf),
}

/// Live-mode configuration.
#[derive(Clone)]
pub struct LiveConfig {
    /// The local cluster's name.
    pub local: Arc<str>,
    /// The local cluster's client (shared with the mirror controller; the
    /// live source puts its own in-flight bound on top).
    pub local_client: Client,
    /// A second client of the local cluster, for the liveness heartbeat
    /// alone (its own connection pool: see
    /// [`crate::k8s::client::BoundedClient::heartbeat`]); `None`: the
    /// heartbeat shares `local_client`.
    pub local_heartbeat: Option<Client>,
    /// Where linked clusters come from.
    pub links: Links,
    /// Readiness stops waiting for a cluster's first sync after this long.
    pub sync_timeout: Duration,
    /// How often a cluster that lacks the About API (or, with `--mcs`, an
    /// MCS API) is asked again whether it serves it now
    /// ([`MCS_REDISCOVER`] outside tests).
    pub mcs_rediscover: Duration,
    /// `--allow-kubeconfig-exec`: a Link Secret's kubeconfig may run
    /// programs and read this server's files.
    pub allow_kubeconfig_exec: bool,
}

/// How often a cluster that serves no ClusterProperty API (or may not list
/// it) or, with `--mcs`, no ServiceExport or (local) ServiceImport API is
/// asked again: CRDs installed (or access granted) after the cluster was
/// linked are watched within this long, without a restart.
pub const MCS_REDISCOVER: Duration = Duration::from_secs(30);

impl std::fmt::Debug for LiveConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // kube's Client has no Debug.
        f.debug_struct("LiveConfig")
            .field("local", &self.local)
            .field("links", &self.links)
            .field("sync_timeout", &self.sync_timeout)
            .field("mcs_rediscover", &self.mcs_rediscover)
            .field("allow_kubeconfig_exec", &self.allow_kubeconfig_exec)
            .finish_non_exhaustive()
    }
}

/// The linked clusters from Links and Secrets: one per valid Link (the
/// oldest Link wins a cluster name), oldest first, with the problems found.
pub(crate) fn desired_from_links(
    local: &str,
    links: &BTreeMap<String, Result<Link, String>>,
    secrets: &BTreeMap<String, Result<String, String>>,
) -> (Vec<LinkedCluster>, Vec<String>) {
    let mut problems = Vec::new();
    let mut ok: Vec<&Link> = Vec::new();
    for (name, link) in links {
        match link {
            Ok(l) => {
                problems.extend(l.warnings.iter().map(|w| format!("Link {name}: {w}")));
                ok.push(l);
            }
            Err(e) => problems.push(e.clone()),
        }
    }
    ok.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
    let mut out: Vec<LinkedCluster> = Vec::new();
    for l in ok {
        let origin = format!("Link {}/{}", l.namespace, l.name);
        if &*l.cluster == local {
            problems.push(format!(
                "{origin}: targetClusterName {} is the local cluster; ignored",
                l.cluster
            ));
            continue;
        }
        if let Some(first) = out.iter().find(|c| c.name == l.cluster) {
            problems.push(format!(
                "{origin}: cluster {} is already linked by the older {}; ignored",
                l.cluster, first.origin
            ));
            continue;
        }
        let kubeconfig = match secrets.get(&l.secret) {
            Some(Ok(text)) => Ok(text.clone()),
            Some(Err(e)) => Err(format!("Secret {}/{}: {e}", l.namespace, l.secret)),
            None => Err(format!(
                "Secret {}/{} (clusterCredentialsSecret) does not exist",
                l.namespace, l.secret
            )),
        };
        if let Err(e) = &kubeconfig {
            problems.push(format!("{origin}: {e}"));
        }
        out.push(LinkedCluster {
            name: l.cluster.clone(),
            kubeconfig,
            context: None,
            selectors: l.selectors.clone(),
            gateway: l.gateway.clone(),
            claims: l.claims.clone(),
            place: l.place.clone(),
            origin,
        });
    }
    // Oldest Link first: clusters are announced in this order, and of two
    // claiming one MCS cluster id the one announced first keeps it.
    (out, problems)
}

/// The kubeconfig a credentials Secret holds.
pub fn secret_kubeconfig(secret: &Secret) -> Result<String, String> {
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(SECRET_KEY)) else {
        if let Some(s) = secret.string_data.as_ref().and_then(|d| d.get(SECRET_KEY)) {
            return Ok(s.clone());
        }
        return Err(format!("has no key {SECRET_KEY:?}"));
    };
    String::from_utf8(bytes.0.clone()).map_err(|_| format!("key {SECRET_KEY:?} is not UTF-8 text"))
}

/// What the supervisor is told: the linked clusters and problems that
/// belong to no cluster. `None` until the first complete read.
type Desired = Option<(Vec<LinkedCluster>, Vec<String>)>;

/// Waits until the local cluster serves the Link CRD, reporting its
/// absence meanwhile (looked for again every [`CRD_RECHECK`]); a group
/// that cannot be read is asked again with [`retry_logged`]'s backoff.
/// `None` when shut down.
async fn wait_for_links(
    client: &Client,
    out: &watch::Sender<Desired>,
    shutdown: &CancellationToken,
) -> Option<(&'static str, ApiResource)> {
    loop {
        let found = retry_logged(shutdown, "reading the Link API group", || {
            link_resource(client)
        })
        .await?;
        if let Some(found) = found {
            return Some(found);
        }
        let p = "the Link CRD (links.multicluster.linkerd.io) is not installed in the local cluster; no linked clusters (looking again every 30 s)".to_owned();
        warn!("{p}");
        out.send_replace(Some((Vec::new(), vec![p])));
        if !pause(shutdown, CRD_RECHECK).await {
            return None;
        }
    }
}

/// The kubeconfig of a credentials Secret, unless it may not be used: one
/// that runs a program or reads this server's files is refused (whoever
/// may write a Secret and a Link would otherwise run code as us) unless
/// `allow_exec`; refusals are logged and counted, once per Secret version.
fn secret_credentials(
    secret: &Secret,
    allow_exec: bool,
    board: &StatusBoard,
) -> Result<String, String> {
    let text = secret_kubeconfig(secret)?;
    if let Err(refused) = check_secret_kubeconfig(&text, allow_exec) {
        let name = secret.metadata.name.as_deref().unwrap_or_default();
        warn!(
            secret = name,
            reason = refused.label(),
            "kubeconfig refused: {refused}"
        );
        board.counters().credentials_refused(refused.label());
        return Err(format!("kubeconfig refused: {refused}"));
    }
    Ok(text)
}

/// Watches Links and Secrets in `namespace` and publishes linked clusters.
async fn watch_links(
    client: Client,
    local: Arc<str>,
    namespace: String,
    (allow_exec, board): (bool, Arc<StatusBoard>),
    out: watch::Sender<Desired>,
    shutdown: CancellationToken,
) {
    let Some((version, resource)) = wait_for_links(&client, &out, &shutdown).await else {
        return;
    };
    info!(%version, %namespace, "watching Links");
    let link_api: Api<DeserializeGuard<DynamicObject>> =
        Api::namespaced_with(client.clone(), &namespace, &resource);
    let secret_api: Api<DeserializeGuard<Secret>> = Api::namespaced(client, &namespace);
    let mut link_events = std::pin::pin!(guarded_watch(link_api, config(PAGE)));
    let mut secret_events = std::pin::pin!(guarded_watch(secret_api, config(PAGE)));
    let mut links = Named::new("Link", |o: &DynamicObject| {
        link_from_dynamic(o).map_err(|e| e.to_string())
    });
    let mut secrets = Named::new("Secret", |s: &Secret| {
        secret_credentials(s, allow_exec, &board)
    });
    loop {
        let changed = tokio::select! {
            d = link_events.next() => match d {
                Some(d) => links.update(d),
                None => return,
            },
            d = secret_events.next() => match d {
                Some(d) => secrets.update(d),
                None => return,
            },
            () = shutdown.cancelled() => return,
        };
        if changed && links.relist.listed() && secrets.relist.listed() {
            publish(
                &out,
                desired_from_links(&local, &links.items, &secrets.items),
            );
        }
    }
}

/// Publishes `desired` unless it is what was published last.
fn publish(out: &watch::Sender<Desired>, desired: (Vec<LinkedCluster>, Vec<String>)) {
    out.send_if_modified(|cur| {
        if cur.as_ref() == Some(&desired) {
            false
        } else {
            *cur = Some(desired);
            true
        }
    });
}

/// One watch's objects by name (an unnamed one under `""`), converted as
/// they arrive; a relist replaces what was known ([`Relist`]: objects it
/// does not bring back are gone).
struct Named<V, F> {
    /// What is watched, for the log.
    what: &'static str,
    items: BTreeMap<String, V>,
    convert: F,
    relist: Relist<String>,
}

impl<V, F> Named<V, F> {
    fn new(what: &'static str, convert: F) -> Self {
        Self {
            what,
            items: BTreeMap::new(),
            convert,
            relist: Relist::default(),
        }
    }
}

impl<K: kube::Resource, V, F: Fn(&K) -> V> Index<K> for Named<V, F> {
    type Key = String;

    fn key(&self, obj: &K) -> Option<String> {
        Some(obj.meta().name.clone().unwrap_or_default())
    }

    fn apply(&mut self, obj: K) {
        let name = obj.meta().name.clone().unwrap_or_default();
        self.items.insert(name, (self.convert)(&obj));
    }

    fn delete(&mut self, key: &String, _: Option<K>) {
        self.items.remove(key);
    }

    fn keys(&self) -> Vec<String> {
        self.items.keys().cloned().collect()
    }
}

impl<V, F> Named<V, F> {
    /// Applies one delivery; true when the set may have changed.
    fn update<K>(&mut self, delivery: Delivery<K>) -> bool
    where
        K: kube::Resource,
        F: Fn(&K) -> V,
    {
        match delivery {
            Delivery::Event(e) => {
                let mut relist = std::mem::take(&mut self.relist);
                let outcome = relist.handle(self, e);
                self.relist = relist;
                outcome != Outcome::Pending
            }
            Delivery::Failed(e) => {
                warn!(error = %e, "{} watch failed; retrying", self.what);
                false
            }
            Delivery::Undecodable { object, error } => {
                warn!(%object, %error, "{} skipped: cannot decode", self.what);
                false
            }
        }
    }
}

/// The newest Link version the local cluster serves and its resource;
/// `None` when the CRD is not installed. Asked through kube's discovery.
async fn link_resource(client: &Client) -> Result<Option<(&'static str, ApiResource)>, String> {
    let Some(group) = discover::group(client, LINK_GROUP)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    Ok(LINK_VERSIONS
        .into_iter()
        .find_map(|v| discover::resource(&group, &[v], "Link").map(|r| (v, r))))
}

/// Reads the clusters file and its kubeconfigs when one of them changes
/// (notify, and a poll every [`FILE_POLL`]) and publishes linked clusters.
/// A file that fails to parse keeps the previous set, loudly (once per
/// error, not per change).
async fn watch_file(
    path: PathBuf,
    local: Arc<str>,
    out: watch::Sender<Desired>,
    shutdown: CancellationToken,
) {
    use crate::filewatch::{FileWatch, Kept, Offer};
    let mut changes = FileWatch::new(vec![path.clone()], FILE_POLL);
    // The clusters linked are in `out`; this tells a new error from one
    // already reported.
    let mut kept = Kept::new(());
    loop {
        tokio::select! {
            () = changes.changed() => {}
            () = shutdown.cancelled() => return,
        }
        let p = path.clone();
        let Ok((read, read_paths)) = tokio::task::spawn_blocking(move || read_clusters(&p)).await
        else {
            error!("clusters file reader panicked");
            continue;
        };
        // A kubeconfig rewritten (a rotated token) is a change too.
        changes.watch_paths(read_paths);
        match read {
            Ok(clusters) => {
                kept.offer(Ok::<(), String>(()));
                publish(&out, usable(clusters, &local));
            }
            Err(text) => {
                if let Offer::Failed(text) = kept.offer(Err(text.clone())) {
                    error!(error = %text, "clusters file unusable; keeping the clusters already linked");
                }
                out.send_if_modified(|cur| match cur {
                    Some((_, problems)) => {
                        let p = vec![text.clone()];
                        if *problems == p {
                            false
                        } else {
                            *problems = p;
                            true
                        }
                    }
                    // Nothing linked yet: the error is the whole story.
                    None => {
                        *cur = Some((Vec::new(), vec![text.clone()]));
                        true
                    }
                });
            }
        }
    }
}

/// The clusters `path` links, with their kubeconfigs read, and every file
/// that was read for them.
fn read_clusters(path: &std::path::Path) -> (Result<Vec<LinkedCluster>, String>, Vec<PathBuf>) {
    let mut read = vec![path.to_owned()];
    let clusters = load_clusters_file(path).map(|entries| {
        entries
            .into_iter()
            .map(|e| {
                read.push(e.kubeconfig.clone());
                LinkedCluster {
                    kubeconfig: std::fs::read_to_string(&e.kubeconfig)
                        .map_err(|err| format!("kubeconfig {}: {err}", e.kubeconfig.display())),
                    name: e.name,
                    context: e.context,
                    selectors: e.selectors,
                    gateway: e.gateway,
                    claims: e.claims,
                    place: e.place,
                    origin: format!("clusters file {}", path.display()),
                }
            })
            .collect::<Vec<_>>()
    });
    (clusters.map_err(|e| e.to_string()), read)
}

/// The clusters of the file that can be linked (not the local one), and
/// the problems to show.
fn usable(clusters: Vec<LinkedCluster>, local: &str) -> (Vec<LinkedCluster>, Vec<String>) {
    let mut problems = Vec::new();
    let clusters = clusters
        .into_iter()
        .filter(|c| {
            if *c.name == *local {
                problems.push(format!(
                    "{}: cluster {} is the local cluster; ignored",
                    c.origin, c.name
                ));
                false
            } else {
                if let Err(e) = &c.kubeconfig {
                    problems.push(format!("cluster {}: {e}", c.name));
                }
                true
            }
        })
        .collect();
    (clusters, problems)
}

struct Running {
    spec: LinkedCluster,
    token: CancellationToken,
    handle: JoinHandle<ClusterState>,
}

async fn client_for(spec: &LinkedCluster, max_inflight: usize) -> Result<BoundedClient, String> {
    let text = spec.kubeconfig.clone()?;
    client::bounded_from_kubeconfig(&text, spec.context.as_deref(), max_inflight)
        .await
        .map_err(|e| e.to_string())
}

/// Runs live mode until `shutdown`: the local cluster, the linked clusters,
/// and the supervisor that keeps them in step with Links or the file. Each
/// cluster's requests in flight are bounded by `max_inflight`.
pub(crate) async fn run(
    config: LiveConfig,
    max_inflight: usize,
    tx: FeedTx,
    board: Arc<StatusBoard>,
    settings: watch::Receiver<Arc<Settings>>,
    shutdown: CancellationToken,
) {
    let local = config.local.clone();
    if tx
        .send(SourceMsg::Events(vec![Event::ClusterUp {
            cluster: local.clone(),
            local: true,
        }]))
        .is_err()
    {
        return;
    }
    board.register(&local, true, "--kubeconfig / in-cluster".into());
    let local_client = client::bound(
        config.local_client.clone(),
        config.local_heartbeat.clone(),
        max_inflight,
    );
    let local_run = ClusterRun {
        name: local.clone(),
        local: true,
        client: Ok(local_client.clone()),
        selectors: Selectors::linkerd_defaults(),
        gateway: GatewaySource::None,
        // The local cluster is held to the operator's settings alone.
        claims: Claims::default(),
        sync_timeout: config.sync_timeout,
        settings: settings.clone(),
        mcs: settings.borrow().mcs,
        mcs_rediscover: config.mcs_rediscover,
    };
    let local_state = local_run.state(None);
    let local_task = tokio::spawn(cluster::run(
        local_run,
        local_state,
        tx.clone(),
        board.clone(),
        shutdown.child_token(),
    ));

    let (dtx, drx) = watch::channel::<Desired>(None);
    match &config.links {
        Links::Linkerd { namespace } => {
            tokio::spawn(watch_links(
                local_client.client,
                local.clone(),
                namespace.clone(),
                (config.allow_kubeconfig_exec, board.clone()),
                dtx,
                shutdown.clone(),
            ));
        }
        Links::File(path) => {
            tokio::spawn(watch_file(
                path.clone(),
                local.clone(),
                dtx,
                shutdown.clone(),
            ));
        }
    }
    let cx = Supervisor {
        config: &config,
        max_inflight,
        tx: &tx,
        board: &board,
        settings: &settings,
        shutdown: &shutdown,
    };
    supervise(&cx, drx).await;
    let _ = local_task.await;
}

/// Keeps the linked clusters' tasks in step with what `drx` publishes until
/// shutdown, then stops them.
async fn supervise(cx: &Supervisor<'_>, mut drx: watch::Receiver<Desired>) {
    let Supervisor {
        config,
        tx,
        board,
        shutdown,
        ..
    } = *cx;
    let mut running: BTreeMap<Arc<str>, Running> = BTreeMap::new();
    let mut initial_sent = false;
    let initial_deadline = tokio::time::sleep(config.sync_timeout);
    tokio::pin!(initial_deadline);
    loop {
        tokio::select! {
            r = drx.changed() => if r.is_err() { break },
            () = &mut initial_deadline, if !initial_sent => {
                warn!(timeout = ?config.sync_timeout, "linked clusters not known within the sync timeout; readiness stops waiting");
                initial_sent = true;
                if tx.send(SourceMsg::ClustersKnown).is_err() { break; }
                continue;
            }
            () = shutdown.cancelled() => break,
        }
        let Some((desired, problems)) = drx.borrow_and_update().clone() else {
            continue;
        };
        board.set_problems(problems);
        if !apply_desired(cx, &desired, &mut running).await {
            break;
        }
        if !initial_sent {
            initial_sent = true;
            if tx.send(SourceMsg::ClustersKnown).is_err() {
                break;
            }
        }
    }
    for (_, r) in running {
        r.token.cancel();
        let _ = r.handle.await;
    }
}

/// What the supervisor hands every cluster task it starts.
struct Supervisor<'a> {
    config: &'a LiveConfig,
    max_inflight: usize,
    tx: &'a FeedTx,
    board: &'a Arc<StatusBoard>,
    settings: &'a watch::Receiver<Arc<Settings>>,
    shutdown: &'a CancellationToken,
}

/// Starts, restarts and stops cluster tasks so they match `desired`.
/// Returns false when the model is gone.
async fn apply_desired(
    cx: &Supervisor<'_>,
    desired: &[LinkedCluster],
    running: &mut BTreeMap<Arc<str>, Running>,
) -> bool {
    if !stop_unlinked(cx, desired, running).await {
        return false;
    }
    // Every new cluster is announced before any of them starts, so none of
    // their names is NXDOMAIN while another one syncs; with it, every
    // configured place that changed.
    let mut events: Vec<Event> = desired
        .iter()
        .filter(|d| !running.contains_key(&d.name))
        .map(|d| Event::ClusterUp {
            cluster: d.name.clone(),
            local: false,
        })
        .collect();
    events.extend(place_events(desired, |name| {
        running.get(name).map(|r| &r.spec.place)
    }));
    if !events.is_empty() && cx.tx.send(SourceMsg::Events(events)).is_err() {
        return false;
    }
    for spec in desired {
        let previous = match running.remove(&spec.name) {
            Some(mut r) if same_watches(&r.spec, spec) => {
                cx.board
                    .update(&spec.name, |r| r.place.clone_from(&spec.place));
                r.spec.place.clone_from(&spec.place);
                running.insert(spec.name.clone(), r);
                continue;
            }
            Some(r) => {
                info!(cluster = %spec.name, origin = %spec.origin, "link changed; restarting its watches (old data is served meanwhile)");
                r.token.cancel();
                r.handle.await.ok()
            }
            None => {
                info!(cluster = %spec.name, origin = %spec.origin, "linked");
                None
            }
        };
        let started = start_cluster(cx, spec, previous).await;
        running.insert(spec.name.clone(), started);
    }
    true
}

/// Whether `a` and `b` need the same watches: they differ in nothing but
/// the configured place, which the model is told without a restart.
fn same_watches(a: &LinkedCluster, b: &LinkedCluster) -> bool {
    let unplaced = |c: &LinkedCluster| LinkedCluster {
        place: Place::default(),
        ..c.clone()
    };
    unplaced(a) == unplaced(b)
}

/// The configured place of each cluster of `desired` whose place the model
/// does not hold yet: a new cluster with a place, or a running one whose
/// place changed (an unknown one withdraws the old). `running` gives the
/// place a running cluster was last given.
fn place_events<'r>(
    desired: &[LinkedCluster],
    running: impl Fn(&str) -> Option<&'r Place>,
) -> Vec<Event> {
    desired
        .iter()
        .filter(|d| match running(&d.name) {
            Some(was) => *was != d.place,
            None => !d.place.is_unknown(),
        })
        .map(|d| Event::PlaceApplied {
            cluster: d.name.clone(),
            from: PlaceFrom::Configured,
            place: d.place.clone(),
        })
        .collect()
}

/// Stops the tasks of clusters no longer linked and removes their names.
/// Returns false when the model is gone.
async fn stop_unlinked(
    cx: &Supervisor<'_>,
    desired: &[LinkedCluster],
    running: &mut BTreeMap<Arc<str>, Running>,
) -> bool {
    let gone: Vec<Arc<str>> = running
        .keys()
        .filter(|k| !desired.iter().any(|d| &d.name == *k))
        .cloned()
        .collect();
    for name in gone {
        if let Some(r) = running.remove(&name) {
            info!(cluster = %name, "unlinked");
            r.token.cancel();
            let _ = r.handle.await;
            cx.board.remove(&name);
            if cx
                .tx
                .send(SourceMsg::Events(vec![Event::ClusterDown {
                    cluster: name,
                }]))
                .is_err()
            {
                return false;
            }
        }
    }
    true
}

/// Starts the task of linked cluster `spec`, carrying over the state of its
/// previous task when it is a restart.
async fn start_cluster(
    cx: &Supervisor<'_>,
    spec: &LinkedCluster,
    previous: Option<ClusterState>,
) -> Running {
    cx.board.register(&spec.name, false, spec.origin.clone());
    cx.board.update(&spec.name, |r| {
        r.claims = spec.claims.clone();
        r.place = spec.place.clone();
    });
    let run = ClusterRun {
        name: spec.name.clone(),
        local: false,
        client: client_for(spec, cx.max_inflight).await,
        selectors: spec.selectors.clone(),
        gateway: spec.gateway.clone(),
        claims: spec.claims.clone(),
        sync_timeout: cx.config.sync_timeout,
        settings: cx.settings.clone(),
        mcs: cx.settings.borrow().mcs,
        mcs_rediscover: cx.config.mcs_rediscover,
    };
    let state = run.state(previous);
    let token = cx.shutdown.child_token();
    let handle = tokio::spawn(cluster::run(
        run,
        state,
        cx.tx.clone(),
        cx.board.clone(),
        token.clone(),
    ));
    Running {
        spec: spec.clone(),
        token,
        handle,
    }
}

#[cfg(test)]
mod tests;
