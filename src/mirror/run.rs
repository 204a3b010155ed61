//! The mirror controller's loop: watches the objects we own in the local
//! cluster, recomputes the desired objects when the model changes, and, while
//! this process holds the Lease, writes the difference.
//!
//! Thin: what to write is `mirror::desired` and `mirror::reconcile`; this
//! module does the requests and keeps the cache of what exists. Writes stop
//! the moment leadership is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::desired::{MirrorSettings, desired, held_by_budget};
use super::lease::{self, LeaseConfig};
use super::reconcile::{Actual, Hold, Op, plan};
use super::stats::MirrorStats;
use super::{FIELD_MANAGER, Kind, MANAGED_BY, MANAGED_BY_LABEL, ObjectRef};
use crate::model::ClusterSet;
use crate::source::api::{WatchMsg, WatchTarget, list_once, list_watch};
use crate::vocab::linkerd::{LABEL_CLUSTER_NAME, LABEL_MIRRORED};

/// A model state for the mirror, and when it changed.
pub type ModelFeed = watch::Receiver<Option<(Arc<ClusterSet>, Instant)>>;

/// What the controller needs.
#[derive(Clone)]
pub struct MirrorConfig {
    /// The local cluster's client.
    pub client: Client,
    /// The local cluster's name.
    pub local: Arc<str>,
    /// Remote clusters' DNS domain, for `remote-svc-fq-name`.
    pub cluster_domain: String,
    /// Flat-mode mirrors without endpoints (exactly Linkerd's shape).
    pub linkerd_flat_compat: bool,
    /// Where Linkerd's Leases would be (`None`: no Linkerd Links).
    pub link_namespace: Option<String>,
    /// Leader election.
    pub lease: LeaseConfig,
    /// Full resync period (repairs anything the watches missed, retries
    /// objects that were blocked).
    pub resync: Duration,
    /// Federated grace, as the DNS side uses it.
    pub federated_grace: Duration,
}

fn collection(kind: Kind, namespace: &str) -> String {
    match kind {
        Kind::Service => format!("/api/v1/namespaces/{namespace}/services"),
        Kind::EndpointSlice => {
            format!("/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices")
        }
    }
}

fn item(key: &ObjectRef) -> String {
    format!("{}/{}", collection(key.kind, &key.namespace), key.name)
}

fn object_ref(kind: Kind, v: &Value) -> Option<ObjectRef> {
    Some(ObjectRef {
        kind,
        namespace: v.pointer("/metadata/namespace")?.as_str()?.into(),
        name: v.pointer("/metadata/name")?.as_str()?.into(),
    })
}

fn is_ours(v: &Value) -> bool {
    v.pointer(&format!(
        "/metadata/labels/{}",
        MANAGED_BY_LABEL.replace('/', "~1")
    ))
    .and_then(Value::as_str)
        == Some(MANAGED_BY)
}

/// The outcome of one request.
enum Sent {
    Ok(Value),
    Status(u16, String),
    Failed(String),
}

async fn request(client: &Client, req: http::Request<Vec<u8>>) -> Sent {
    match client.request::<Value>(req).await {
        Ok(v) => Sent::Ok(v),
        Err(kube::Error::Api(s)) => Sent::Status(s.code, format!("{}: {}", s.reason, s.message)),
        Err(e) => Sent::Failed(e.to_string()),
    }
}

fn build(method: &str, uri: &str, content_type: &str, body: &Value) -> http::Request<Vec<u8>> {
    http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(serde_json::to_vec(body).unwrap_or_default())
        .unwrap_or_default()
}

/// Clusters whose Links Linkerd's own service mirror manages: its Lease
/// `service-mirror-write-<link>` is held, or mirror Services of that cluster
/// exist without our label. Their `<svc>-<cluster>` objects are Linkerd's.
async fn linkerd_managed(client: &Client, link_namespace: Option<&str>) -> BTreeSet<Arc<str>> {
    let mut out = BTreeSet::new();
    let foreign = WatchTarget {
        path: "/api/v1/services".into(),
        label_selector: Some(format!(
            "{LABEL_MIRRORED}=true,{MANAGED_BY_LABEL}!={MANAGED_BY}"
        )),
        field_selector: None,
    };
    if let Ok(items) = list_once::<Value>(client, &foreign).await {
        for v in items {
            if let Some(c) = v
                .pointer(&format!(
                    "/metadata/labels/{}",
                    LABEL_CLUSTER_NAME.replace('/', "~1")
                ))
                .and_then(Value::as_str)
            {
                out.insert(c.into());
            }
        }
    }
    if let Some(ns) = link_namespace {
        let leases = WatchTarget {
            path: format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
            label_selector: None,
            field_selector: None,
        };
        if let Ok(items) =
            list_once::<k8s_openapi::api::coordination::v1::Lease>(client, &leases).await
        {
            let now = k8s_openapi::jiff::Timestamp::now();
            for l in items {
                let Some(link) = l
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|n| n.strip_prefix("service-mirror-write-"))
                else {
                    continue;
                };
                let spec = l.spec.unwrap_or_default();
                let held = spec.holder_identity.is_some_and(|h| !h.is_empty());
                let fresh = spec.renew_time.is_some_and(|t| {
                    let age = now.as_second() - t.0.as_second();
                    age <= i64::from(spec.lease_duration_seconds.unwrap_or(15))
                });
                if held && fresh {
                    out.insert(link.into());
                }
            }
        }
    }
    out
}

struct Controller {
    config: MirrorConfig,
    stats: Arc<MirrorStats>,
    actual: BTreeMap<ObjectRef, Actual>,
    listed: [bool; 2],
    unowned: BTreeSet<ObjectRef>,
    reported: BTreeSet<String>,
    linkerd: BTreeSet<Arc<str>>,
}

impl Controller {
    fn on_watch(
        &mut self,
        kind: Kind,
        msg: WatchMsg<Value>,
        relist: &mut Option<BTreeSet<ObjectRef>>,
    ) -> bool {
        let i = usize::from(kind == Kind::EndpointSlice);
        match msg {
            WatchMsg::Init => {
                *relist = Some(BTreeSet::new());
                false
            }
            WatchMsg::Page(items) => {
                for v in items {
                    if let Some(key) = object_ref(kind, &v) {
                        if let Some(seen) = relist.as_mut() {
                            seen.insert(key.clone());
                        }
                        self.actual.insert(key, Actual { object: v });
                    }
                }
                true
            }
            WatchMsg::InitDone => {
                if let Some(seen) = relist.take() {
                    self.actual
                        .retain(|k, _| k.kind != kind || seen.contains(k));
                }
                self.listed[i] = true;
                true
            }
            WatchMsg::Apply(v) => {
                let Some(key) = object_ref(kind, &v) else {
                    return false;
                };
                if !is_ours(&v) {
                    return self.actual.remove(&key).is_some();
                }
                // Our own write comes back through the watch after its
                // response was cached, and may arrive after a newer write's
                // response: not news, and an older version must not replace
                // the newer one (that would plan a write that changes nothing).
                let version = |o: &Value| {
                    o.pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                        .and_then(|r| r.parse::<u64>().ok())
                };
                if let Some(cached) = self.actual.get(&key)
                    && let (Some(have), Some(got)) = (version(&cached.object), version(&v))
                    && got <= have
                {
                    return false;
                }
                self.actual.insert(key, Actual { object: v });
                true
            }
            WatchMsg::Delete(v) => {
                if let Some(key) = object_ref(kind, &v) {
                    self.actual.remove(&key);
                }
                true
            }
            WatchMsg::Connected => false,
            WatchMsg::Failed(e) => {
                debug!(error = %e, "mirror cache watch failed; retrying");
                false
            }
            WatchMsg::Undecodable { object, error } => {
                warn!(object = object.as_deref().unwrap_or("?"), %error, "mirror cache: object skipped");
                false
            }
        }
    }

    /// Computes and writes the difference. Stops at once if leadership is
    /// lost.
    async fn reconcile(
        &mut self,
        set: &ClusterSet,
        changed: Option<Instant>,
        leading: &watch::Receiver<bool>,
    ) {
        let settings = MirrorSettings {
            local: self.config.local.clone(),
            cluster_domain: self.config.cluster_domain.clone(),
            linkerd_flat_compat: self.config.linkerd_flat_compat,
            linkerd_managed: self.linkerd.clone(),
            now: Instant::now(),
            federated_grace: self.config.federated_grace,
        };
        let (want, problems) = desired(set, &settings);
        self.stats.set_problems(problems.len());
        for p in problems {
            let text = format!("{}: {}", p.object, p.message);
            if self.reported.insert(text.clone()) {
                warn!("mirror: {text}");
            }
        }
        // Before a cluster's first sync its part of `want` is unknown.
        let hold = Hold {
            unsynced: set
                .iter()
                .filter(|c| !c.health.synced)
                .map(|c| c.name.clone())
                .collect(),
            waiting: set
                .iter()
                .any(|c| !c.health.synced && !c.health.sync_given_up),
            refused: held_by_budget(set),
        };
        let mut wrote = false;
        // A create that finds someone else's Service changes what is wanted
        // (its slices would feed that Service): plan again from there. Each
        // round settles at least one object, so this ends.
        for _ in 0..=want.len() {
            let unowned_before = self.unowned.len();
            let ops = plan(&want, &self.actual, &self.unowned, |o| hold.holds(o));
            if ops.is_empty() {
                break;
            }
            for op in ops {
                if !*leading.borrow() {
                    info!("mirror writes stopped: not the leader");
                    return;
                }
                wrote |= self.execute(op).await;
                if self.unowned.len() != unowned_before {
                    break;
                }
            }
            if self.unowned.len() == unowned_before {
                break;
            }
        }
        if wrote && let Some(t) = changed {
            self.stats.observe_latency(t.elapsed());
        }
        self.stats
            .set_objects(self.actual.len(), self.unowned.len());
    }

    async fn execute(&mut self, op: Op) -> bool {
        let client = self.config.client.clone();
        let key = op.key().clone();
        let kind = key.kind.as_str();
        match op {
            Op::Create(d) => {
                let req = build(
                    "POST",
                    &format!(
                        "{}?fieldManager={FIELD_MANAGER}",
                        collection(key.kind, &key.namespace)
                    ),
                    "application/json",
                    &d.object,
                );
                match request(&client, req).await {
                    Sent::Ok(v) => {
                        self.stats.write(kind, "create", "ok");
                        self.actual.insert(key, Actual { object: v });
                        true
                    }
                    Sent::Status(409, _) => {
                        // Someone's object of that name: ours only if it
                        // carries our label (our own create raced the watch).
                        let get = http::Request::get(item(&key))
                            .body(Vec::new())
                            .unwrap_or_default();
                        match request(&client, get).await {
                            Sent::Ok(v) if is_ours(&v) => {
                                self.actual.insert(key, Actual { object: v });
                            }
                            _ => {
                                self.stats.write(kind, "create", "not_owned");
                                // Retried every resync; said once.
                                if self.reported.insert(format!("unowned:{key}")) {
                                    warn!(object = %key, "a same-named object without our managed-by label exists; left alone");
                                    self.event(&key).await;
                                }
                                self.unowned.insert(key);
                            }
                        }
                        false
                    }
                    Sent::Status(404, m) => {
                        self.stats.write(kind, "create", "missing_namespace");
                        if self.reported.insert(format!("ns:{}", key.namespace)) {
                            warn!(object = %key, message = %m, "namespace missing in the local cluster; not mirrored until it exists");
                        }
                        false
                    }
                    Sent::Status(code, m) => {
                        self.stats.write(kind, "create", "error");
                        warn!(object = %key, code, message = %m, "create failed");
                        false
                    }
                    Sent::Failed(e) => {
                        self.stats.write(kind, "create", "error");
                        warn!(object = %key, error = %e, "create failed");
                        false
                    }
                }
            }
            Op::Apply(d) => {
                let uri = format!("{}?fieldManager={FIELD_MANAGER}&force=true", item(&key));
                match request(
                    &client,
                    build("PATCH", &uri, "application/apply-patch+yaml", &d.object),
                )
                .await
                {
                    Sent::Ok(v) if !super::reconcile::contains(&v, &d.object) => {
                        self.stats.write(kind, "apply", "ok");
                        self.repair(&key, &d.object).await
                    }
                    Sent::Status(422, _) => {
                        self.stats.write(kind, "apply", "invalid");
                        self.repair(&key, &d.object).await
                    }
                    Sent::Ok(v) => {
                        self.stats.write(kind, "apply", "ok");
                        self.actual.insert(key, Actual { object: v });
                        true
                    }
                    Sent::Status(409, m) => {
                        self.stats.write(kind, "apply", "conflict");
                        debug!(object = %key, message = %m, "apply conflict; retried on the next pass");
                        false
                    }
                    Sent::Status(code, m) => {
                        self.stats.write(kind, "apply", "error");
                        warn!(object = %key, code, message = %m, "apply failed");
                        false
                    }
                    Sent::Failed(e) => {
                        self.stats.write(kind, "apply", "error");
                        warn!(object = %key, error = %e, "apply failed");
                        false
                    }
                }
            }
            Op::Delete {
                uid,
                resource_version,
                ..
            } => {
                let body = json!({
                    "apiVersion": "v1", "kind": "DeleteOptions",
                    "preconditions": {"uid": uid, "resourceVersion": resource_version}
                });
                match request(
                    &client,
                    build("DELETE", &item(&key), "application/json", &body),
                )
                .await
                {
                    Sent::Ok(_) | Sent::Status(404, _) => {
                        self.stats.write(kind, "delete", "ok");
                        self.actual.remove(&key);
                        true
                    }
                    Sent::Status(409, m) => {
                        self.stats.write(kind, "delete", "conflict");
                        debug!(object = %key, message = %m, "changed since listed; not deleted");
                        false
                    }
                    Sent::Status(code, m) => {
                        self.stats.write(kind, "delete", "error");
                        warn!(object = %key, code, message = %m, "delete failed");
                        false
                    }
                    Sent::Failed(e) => {
                        self.stats.write(kind, "delete", "error");
                        warn!(object = %key, error = %e, "delete failed");
                        false
                    }
                }
            }
        }
    }

    /// Puts an object of ours back when apply cannot: another manager owns
    /// entries of a list we set (a port edited by hand), and apply merges
    /// lists by key, keeping theirs (or failing on a duplicate port name).
    /// A merge patch replaces the lists.
    async fn repair(&mut self, key: &ObjectRef, body: &Value) -> bool {
        let kind = key.kind.as_str();
        let uri = format!("{}?fieldManager={FIELD_MANAGER}", item(key));
        let patch = build("PATCH", &uri, "application/merge-patch+json", body);
        match request(&self.config.client, patch).await {
            Sent::Ok(v) => {
                self.stats.write(kind, "repair", "ok");
                self.actual.insert(key.clone(), Actual { object: v });
                true
            }
            Sent::Status(_, m) | Sent::Failed(m) => {
                self.stats.write(kind, "repair", "error");
                warn!(object = %key, error = %m, "repair failed");
                false
            }
        }
    }

    /// A Warning Event on the object we did not touch.
    async fn event(&self, key: &ObjectRef) {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let body = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": format!("{}.", key.name), "namespace": &*key.namespace},
            "involvedObject": {"kind": key.kind.as_str(), "namespace": &*key.namespace, "name": &*key.name,
                               "apiVersion": if key.kind == Kind::Service { "v1" } else { "discovery.k8s.io/v1" }},
            "reason": "NotOwned",
            "message": format!("clusterset-dns wants to mirror into {key} but a same-named object without the label {MANAGED_BY_LABEL}={MANAGED_BY} exists; it is left alone"),
            "type": "Warning",
            "source": {"component": "clusterset-dns-mirror"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1
        });
        let uri = format!("/api/v1/namespaces/{}/events", key.namespace);
        if let Sent::Status(_, m) | Sent::Failed(m) = request(
            &self.config.client,
            build("POST", &uri, "application/json", &body),
        )
        .await
        {
            debug!(object = %key, error = %m, "could not record the event");
        }
    }
}

/// Runs the controller until `shutdown`.
pub async fn run(
    config: MirrorConfig,
    mut model: ModelFeed,
    stats: Arc<MirrorStats>,
    shutdown: CancellationToken,
) {
    stats.enable();
    let (lead_tx, mut leading) = watch::channel(false);
    let mut lease_task = tokio::spawn(lease::run(
        config.client.clone(),
        config.lease.clone(),
        lead_tx,
        shutdown.clone(),
    ));
    let (tx, mut rx) = mpsc::channel::<(Kind, WatchMsg<Value>)>(256);
    for kind in [Kind::Service, Kind::EndpointSlice] {
        let (wtx, mut wrx) = mpsc::channel(64);
        let path = match kind {
            Kind::Service => "/api/v1/services",
            Kind::EndpointSlice => "/apis/discovery.k8s.io/v1/endpointslices",
        };
        tokio::spawn(list_watch(
            config.client.clone(),
            WatchTarget {
                path: path.into(),
                label_selector: Some(format!("{MANAGED_BY_LABEL}={MANAGED_BY}")),
                field_selector: None,
            },
            wtx,
            shutdown.clone(),
        ));
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(m) = wrx.recv().await {
                if tx.send((kind, m)).await.is_err() {
                    return;
                }
            }
        });
    }
    let mut c = Controller {
        config,
        stats: stats.clone(),
        actual: BTreeMap::new(),
        listed: [false, false],
        unowned: BTreeSet::new(),
        reported: BTreeSet::new(),
        linkerd: BTreeSet::new(),
    };
    let mut relists: [Option<BTreeSet<ObjectRef>>; 2] = [None, None];
    let mut resync = tokio::time::interval(c.config.resync);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut dirty = true;
    loop {
        let mut full = false;
        tokio::select! {
            r = model.changed() => { if r.is_err() { return; } dirty = true; }
            m = rx.recv() => {
                let Some((kind, msg)) = m else { return };
                let i = usize::from(kind == Kind::EndpointSlice);
                dirty |= c.on_watch(kind, msg, &mut relists[i]);
                // Take whatever else is queued before reconciling once.
                while let Ok((kind, msg)) = rx.try_recv() {
                    let i = usize::from(kind == Kind::EndpointSlice);
                    dirty |= c.on_watch(kind, msg, &mut relists[i]);
                }
            }
            r = leading.changed() => {
                if r.is_err() { return; }
                stats.set_leader(*leading.borrow());
                dirty = true;
                full = true;
            }
            _ = resync.tick() => { dirty = true; full = true; }
            // Without the election nothing may write: end, and the process
            // with it (the server treats a task that ends as fatal).
            r = &mut lease_task => {
                if !shutdown.is_cancelled() {
                    tracing::error!(result = ?r.err(), "the lease task ended; the mirror controller stops");
                }
                return;
            }
            () = shutdown.cancelled() => return,
        }
        if full {
            // Retry what was blocked and look again for Linkerd's own mirror.
            c.unowned.clear();
            c.linkerd = linkerd_managed(&c.config.client, c.config.link_namespace.as_deref()).await;
        }
        if !dirty || !*leading.borrow() || !c.listed.iter().all(|l| *l) {
            continue;
        }
        let Some((set, changed)) = model.borrow_and_update().clone() else {
            continue;
        };
        dirty = false;
        c.reconcile(&set, Some(changed), &leading).await;
    }
}
