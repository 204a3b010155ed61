//! Live mode: which clusters are linked (Linkerd Links and their Secrets in
//! the local cluster, or the clusters file), and one watch task per cluster,
//! started, restarted and stopped as that set changes.
//!
//! Owns the supervisor (a Link added starts that cluster alone; a changed
//! Link or Secret restarts it while its old data keeps being served; a
//! deleted Link removes its names), the choice of the Link API version the
//! local cluster serves, and the pure rule from Links and Secrets to linked
//! clusters ([`desired_from_links`]). Watching one cluster is
//! `source::cluster`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::SourceMsg;
use super::api::{self, WatchMsg, WatchTarget, list_watch};
use super::cluster::{self, ClusterRun};
use super::clusters_file::load_clusters_file;
use super::feed::FeedTx;
use super::link::{Link, parse_link};
use super::selector::Selectors;
use super::spec::{GatewaySource, LinkedCluster};
use super::state::ClusterState;
use super::status::StatusBoard;
use crate::model::{Event, Settings};

/// The Secret key holding the kubeconfig (Linkerd's `k8s.ConfigKeyName`).
pub const SECRET_KEY: &str = "kubeconfig";
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
    /// The local cluster's client.
    pub local_client: Client,
    /// Where linked clusters come from.
    pub links: Links,
    /// Readiness stops waiting for a cluster's first sync after this long.
    pub sync_timeout: Duration,
}

/// The linked clusters from Links and Secrets: one per valid Link (the
/// oldest Link wins a cluster name), with the problems found.
pub fn desired_from_links(
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
            origin,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
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

/// Watches Links and Secrets in `namespace` and publishes linked clusters.
async fn watch_links(
    client: Client,
    local: Arc<str>,
    namespace: String,
    out: watch::Sender<Desired>,
    shutdown: CancellationToken,
) {
    let version = loop {
        match link_version(&client).await {
            Ok(Some(v)) => break v,
            Ok(None) => {
                let p = "the Link CRD (links.multicluster.linkerd.io) is not installed in the local cluster; no linked clusters (looking again every 30 s)".to_owned();
                warn!("{p}");
                out.send_replace(Some((Vec::new(), vec![p])));
                tokio::select! {
                    () = tokio::time::sleep(CRD_RECHECK) => continue,
                    () = shutdown.cancelled() => return,
                }
            }
            Err(e) => {
                warn!(error = %e, "cannot read the Link API group; retrying");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(2)) => continue,
                    () = shutdown.cancelled() => return,
                }
            }
        }
    };
    info!(%version, %namespace, "watching Links");
    let (ltx, mut lrx) = mpsc::channel::<WatchMsg<serde_json::Value>>(64);
    let (stx, mut srx) = mpsc::channel::<WatchMsg<Secret>>(64);
    tokio::spawn(list_watch(
        client.clone(),
        WatchTarget {
            path: format!("/apis/multicluster.linkerd.io/{version}/namespaces/{namespace}/links"),
            label_selector: None,
            field_selector: None,
        },
        ltx,
        shutdown.clone(),
    ));
    tokio::spawn(list_watch(
        client,
        WatchTarget {
            path: format!("/api/v1/namespaces/{namespace}/secrets"),
            label_selector: None,
            field_selector: None,
        },
        stx,
        shutdown.clone(),
    ));
    let mut links: NamedCache<Result<Link, String>> = NamedCache::default();
    let mut secrets: NamedCache<Result<String, String>> = NamedCache::default();
    let link_name = |v: &serde_json::Value| -> String {
        v.pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .to_owned()
    };
    let link = |v: &serde_json::Value| parse_link(v).map_err(|e| e.to_string());
    let secret_name = |s: &Secret| s.metadata.name.clone().unwrap_or_default();
    loop {
        let changed = tokio::select! {
            m = lrx.recv() => match m {
                Some(m) => links.update(m, "Link", link_name, link),
                None => return,
            },
            m = srx.recv() => match m {
                Some(m) => secrets.update(m, "Secret", secret_name, secret_kubeconfig),
                None => return,
            },
            () = shutdown.cancelled() => return,
        };
        if changed && links.listed && secrets.listed {
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

/// One watch's objects by name, converted as they arrive; a list replaces
/// what was known (objects it does not hold are gone).
struct NamedCache<V> {
    items: BTreeMap<String, V>,
    seen: Option<Vec<String>>,
    listed: bool,
}

impl<V> Default for NamedCache<V> {
    fn default() -> Self {
        Self {
            items: BTreeMap::new(),
            seen: None,
            listed: false,
        }
    }
}

impl<V> NamedCache<V> {
    /// Applies one message; true when the set may have changed.
    fn update<K>(
        &mut self,
        msg: WatchMsg<K>,
        what: &str,
        name: impl Fn(&K) -> String,
        convert: impl Fn(&K) -> V,
    ) -> bool {
        match msg {
            WatchMsg::Init => {
                self.seen = Some(Vec::new());
                false
            }
            WatchMsg::Page(objects) => {
                for o in objects {
                    let n = name(&o);
                    if let Some(seen) = self.seen.as_mut() {
                        seen.push(n.clone());
                    }
                    self.items.insert(n, convert(&o));
                }
                false
            }
            WatchMsg::InitDone => {
                if let Some(seen) = self.seen.take() {
                    self.items.retain(|k, _| seen.contains(k));
                }
                self.listed = true;
                true
            }
            WatchMsg::Apply(o) => {
                self.items.insert(name(&o), convert(&o));
                true
            }
            WatchMsg::Delete(o) => self.items.remove(&name(&o)).is_some(),
            WatchMsg::Connected => false,
            WatchMsg::Failed(e) => {
                warn!(error = %e, "{what} watch failed; retrying");
                false
            }
            WatchMsg::Undecodable { object, error } => {
                warn!(object = object.as_deref().unwrap_or("?"), %error, "{what} skipped: cannot decode");
                false
            }
        }
    }
}

/// The newest Link version the local cluster serves; `None` when the CRD is
/// not installed.
async fn link_version(client: &Client) -> Result<Option<&'static str>, String> {
    let req = http::Request::get("/apis/multicluster.linkerd.io")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client
        .request::<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup>(req)
        .await
    {
        Ok(group) => Ok(LINK_VERSIONS
            .into_iter()
            .find(|v| group.versions.iter().any(|g| g.version == *v))),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e.to_string()),
    }
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

async fn client_for(spec: &LinkedCluster) -> Result<Client, String> {
    let text = spec.kubeconfig.clone()?;
    api::client_from_kubeconfig(&text, spec.context.as_deref())
        .await
        .map_err(|e| e.to_string())
}

/// Runs live mode until `shutdown`: the local cluster, the linked clusters,
/// and the supervisor that keeps them in step with Links or the file.
pub async fn run(
    config: LiveConfig,
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
        .await
        .is_err()
    {
        return;
    }
    board.register(&local, true, "--kubeconfig / in-cluster".into());
    let local_run = ClusterRun {
        name: local.clone(),
        local: true,
        client: Ok(config.local_client.clone()),
        selectors: Selectors::linkerd_defaults(),
        gateway: GatewaySource::None,
        sync_timeout: config.sync_timeout,
        settings: settings.clone(),
    };
    let n = local_run.service_targets().len();
    let local_task = tokio::spawn(cluster::run(
        local_run,
        ClusterState::new(local.clone(), true, Selectors::linkerd_defaults(), n),
        tx.clone(),
        board.clone(),
        shutdown.child_token(),
    ));

    let (dtx, mut drx) = watch::channel::<Desired>(None);
    match &config.links {
        Links::Linkerd { namespace } => {
            tokio::spawn(watch_links(
                config.local_client.clone(),
                local.clone(),
                namespace.clone(),
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
                if tx.send(SourceMsg::ClustersKnown).await.is_err() { break; }
                continue;
            }
            () = shutdown.cancelled() => break,
        }
        let Some((desired, problems)) = drx.borrow_and_update().clone() else {
            continue;
        };
        board.set_problems(problems);
        let cx = Supervisor {
            config: &config,
            tx: &tx,
            board: &board,
            settings: &settings,
            shutdown: &shutdown,
        };
        if !apply_desired(&cx, &desired, &mut running).await {
            break;
        }
        if !initial_sent {
            initial_sent = true;
            if tx.send(SourceMsg::ClustersKnown).await.is_err() {
                break;
            }
        }
    }
    for (_, r) in running {
        r.token.cancel();
        let _ = r.handle.await;
    }
    let _ = local_task.await;
}

/// What the supervisor hands every cluster task it starts.
struct Supervisor<'a> {
    config: &'a LiveConfig,
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
    let Supervisor {
        config,
        tx,
        board,
        shutdown,
        ..
    } = *cx;
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
            board.remove(&name);
            if tx
                .send(SourceMsg::Events(vec![Event::ClusterDown {
                    cluster: name,
                }]))
                .await
                .is_err()
            {
                return false;
            }
        }
    }
    // Every new cluster is announced before any of them starts, so none of
    // their names is NXDOMAIN while another one syncs.
    let new: Vec<Event> = desired
        .iter()
        .filter(|d| !running.contains_key(&d.name))
        .map(|d| Event::ClusterUp {
            cluster: d.name.clone(),
            local: false,
        })
        .collect();
    if !new.is_empty() && tx.send(SourceMsg::Events(new)).await.is_err() {
        return false;
    }
    for spec in desired {
        let previous = match running.remove(&spec.name) {
            Some(r) if r.spec == *spec => {
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
        board.register(&spec.name, false, spec.origin.clone());
        let run = ClusterRun {
            name: spec.name.clone(),
            local: false,
            client: client_for(spec).await,
            selectors: spec.selectors.clone(),
            gateway: spec.gateway.clone(),
            sync_timeout: config.sync_timeout,
            settings: cx.settings.clone(),
        };
        let n = run.service_targets().len();
        let state = match previous {
            Some(s) => s.restart(spec.selectors.clone(), n),
            None => ClusterState::new(spec.name.clone(), false, spec.selectors.clone(), n),
        };
        let token = shutdown.child_token();
        let handle = tokio::spawn(cluster::run(
            run,
            state,
            tx.clone(),
            board.clone(),
            token.clone(),
        ));
        running.insert(
            spec.name.clone(),
            Running {
                spec: spec.clone(),
                token,
                handle,
            },
        );
    }
    true
}

#[cfg(test)]
mod tests;
