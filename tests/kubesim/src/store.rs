//! One cluster's storage: objects by resource, the global resourceVersion counter, the bounded
//! change history that watches resume from, and the ClusterIP and node-port allocators.
//! ClusterIPs come from the IPv4 service CIDR and, when IPv6 service CIDRs are configured (a
//! dual-stack cluster, IPv4 primary), from the first IPv6 one; a requested IPv6 address may lie
//! in any of them. A Service gets one address per family of its `ipFamilies`, which
//! [`crate::validate::service::prepare`] settles from its `ipFamilyPolicy` first, as
//! kube-apiserver's allocator does; updates keep, add or give back the secondary address, and
//! deletes free every family's.
//!
//! It owns the etcd-like part of kube-apiserver: create/update/delete with resourceVersion
//! preconditions, finalizers, namespace lifetime, consistent lists at a past resourceVersion,
//! and change fan-out to watchers. Every method is synchronous and runs under the caller's lock,
//! so each write is atomic and watch start-up sees no gap. It must not parse HTTP or bodies.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::kubemsg::go_string_slice;
use crate::resources::{NAMESPACES, RESOURCES, ResourceDef, SERVICES};
use crate::status::{ApiError, cause};
use crate::validate::service::{self, IpFields, ServiceFamilies};

/// A stored object in its storage version. It is kept as its JSON encoding (shared by every
/// list and watch that sends it) plus the few metadata fields watches filter on; the full
/// object is decoded only when a write or a field selector needs it. A parsed
/// `serde_json::Value` costs about 17 times its JSON size, so this is what lets a cluster hold
/// 100,000 EndpointSlices in a few hundred megabytes.
#[derive(Debug)]
pub struct Obj {
    /// `serde_json::to_vec` of the object.
    pub json: Bytes,
    namespace: Box<str>,
    name: Box<str>,
    resource_version: u64,
    labels: Option<Box<Map<String, Value>>>,
}

impl Obj {
    /// Encodes `value` once and keeps what watches filter on.
    pub fn new(value: Value) -> Arc<Obj> {
        let json = Bytes::from(serde_json::to_vec(&value).unwrap_or_default());
        let labels = value
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .filter(|m| !m.is_empty())
            .map(|m| Box::new(m.clone()));
        Arc::new(Obj {
            namespace: meta_str(&value, "namespace").into(),
            name: meta_str(&value, "name").into(),
            resource_version: meta_str(&value, "resourceVersion").parse().unwrap_or(0),
            labels,
            json,
        })
    }

    /// The whole object, decoded from its JSON.
    pub fn value(&self) -> Value {
        // The bytes were encoded from a Value by Obj::new, so they always decode.
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    /// `metadata.namespace` or `""`.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.labels`, None when there are none.
    pub fn labels(&self) -> Option<&Map<String, Value>> {
        self.labels.as_deref()
    }

    /// `metadata.resourceVersion` parsed.
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }
}

/// `metadata.<field>` as a string, `""` when absent.
pub fn meta_str<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `ADDED`
    Added,
    /// `MODIFIED`
    Modified,
    /// `DELETED`
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One committed change.
#[derive(Debug)]
pub struct Change {
    /// The resourceVersion the change committed at.
    pub rv: u64,
    /// Resource index in [`RESOURCES`].
    pub res: usize,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (for a delete: as it was when deleted, with the new rv).
    pub object: Arc<Obj>,
    /// The object before the change, for selector transitions and past-rv lists.
    pub prev: Option<Arc<Obj>>,
}

/// Where a list reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAt {
    /// The newest state.
    Latest,
    /// The state exactly at this resourceVersion.
    Exact(u64),
}

/// What a watch starts from.
#[derive(Debug)]
pub struct WatchStart {
    /// Objects to send as synthetic ADDED events first (state at `rv`).
    pub initial: Vec<Arc<Obj>>,
    /// Changes after the requested resourceVersion that are already committed.
    pub backlog: Vec<Arc<Change>>,
    /// Live changes from here on.
    pub rx: broadcast::Receiver<Arc<Change>>,
    /// The resourceVersion the watch is positioned at.
    pub rv: u64,
}

/// The outcome of a delete.
#[derive(Debug)]
pub enum Deleted {
    /// The object is gone.
    Gone(Arc<Obj>),
    /// Finalizers hold it: it now carries a deletionTimestamp.
    Pending(Arc<Obj>),
}

/// Storage settings.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// How many changes are kept for watches; older resourceVersions get 410 Expired.
    pub history: usize,
    /// Service ClusterIP range (IPv4 network and prefix length): where addresses are
    /// allocated, and where a requested IPv4 address must lie.
    pub service_cidr: (Ipv4Addr, u8),
    /// IPv6 service ranges (network and prefix length), as a cluster with several ServiceCIDR
    /// objects has. Any makes the cluster dual-stack: IPv6 ClusterIPs are allocated from the
    /// first, and a requested one must lie in one of them. Empty: IPv6 is not configured, as
    /// in an IPv4-only cluster.
    pub service_cidrs_v6: Vec<(Ipv6Addr, u8)>,
}

/// The default IPv6 service range, which makes clusters dual-stack: a /108, the largest
/// kube-apiserver's classic allocator accepts.
pub const DEFAULT_SERVICE_CIDR_V6: (Ipv6Addr, u8) =
    (Ipv6Addr::new(0xfd00, 0x96, 0, 0, 0, 0, 0, 0), 108);

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            history: 10_000,
            service_cidr: (Ipv4Addr::new(10, 96, 0, 0), 12),
            service_cidrs_v6: vec![DEFAULT_SERVICE_CIDR_V6],
        }
    }
}

/// Objects are keyed as etcd keys them (`<namespace>/<name>`, or `<name>` when cluster-scoped),
/// so lists come out in kube's order and continue tokens compare the same way.
type Key = String;

/// One cluster's objects and history.
#[derive(Debug)]
pub struct Store {
    rv: u64,
    objects: Vec<BTreeMap<Key, Arc<Obj>>>,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// The history holds every change with an rv above this.
    complete_after: u64,
    cidr: (u32, u32),
    ips: BTreeSet<u32>,
    /// IPv6 ranges as (network, prefix length), host bits cleared.
    cidrs6: Vec<(u128, u8)>,
    ips6: BTreeSet<u128>,
    next_ip: u32,
    /// Offset in the first IPv6 range of the next address to try.
    next_ip6: u128,
    node_ports: BTreeSet<u16>,
    tx: broadcast::Sender<Arc<Change>>,
}

/// Current time as kube writes `metav1.Time`.
pub fn now() -> String {
    let ts = jiff::Timestamp::now();
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The storage key of an object, also the `start` of a continue token.
pub fn key(ns: &str, name: &str) -> Key {
    if ns.is_empty() {
        name.to_owned()
    } else {
        format!("{ns}/{name}")
    }
}

fn set_meta(v: &mut Value, field: &str, value: Value) {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v["metadata"] = json!({});
    }
    v["metadata"][field] = value;
}

fn remove_meta(v: &mut Value, field: &str) {
    if let Some(Value::Object(m)) = v.get_mut("metadata") {
        m.remove(field);
    }
}

fn finalizers(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The `spec.ports[].nodePort` values of a Service.
fn node_ports_of(v: Option<&Value>) -> Vec<u64> {
    v.and_then(|v| v.pointer("/spec/ports"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .collect()
}

/// Refuses an update of an object being deleted that adds finalizers to the `old` ones, as
/// kube-apiserver does.
fn no_new_finalizers(
    def: &ResourceDef,
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    let before = finalizers(old);
    let mut added: Vec<String> = finalizers(new)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    // kube prints the sorted set with Go's `%#v`.
    added.sort();
    added.dedup();
    Err(ApiError::invalid(
        def.group,
        def.kind,
        name,
        vec![cause(
            "FieldValueForbidden",
            "metadata.finalizers",
            format!(
                "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {}",
                go_string_slice(&added)
            ),
        )],
    ))
}

/// The server-owned metadata an update cannot change, carried from `old` into `v`: uid and
/// creation time, the pending deletion (`deleting`, its timestamp) or none, and the generation,
/// bumped when the spec changed.
fn keep_server_fields(def: &ResourceDef, v: &mut Value, old: &Value, deleting: Option<&Value>) {
    for field in ["uid", "creationTimestamp"] {
        set_meta(v, field, old["metadata"][field].clone());
    }
    match deleting {
        Some(ts) => {
            set_meta(v, "deletionTimestamp", ts.clone());
            set_meta(v, "deletionGracePeriodSeconds", json!(0));
        }
        None => {
            remove_meta(v, "deletionTimestamp");
            remove_meta(v, "deletionGracePeriodSeconds");
        }
    }
    if def.generation {
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let bumped = if spec_part(v) != spec_part(old) {
            generation + 1
        } else {
            generation
        };
        set_meta(v, "generation", json!(bumped));
    }
}

/// Everything but metadata and status: what a generation counts.
fn spec_part(v: &Value) -> Value {
    let mut c = v.clone();
    if let Value::Object(m) = &mut c {
        m.remove("metadata");
        m.remove("status");
    }
    c
}

impl Store {
    /// An empty cluster with the namespaces every cluster has and the `default/kubernetes` Service.
    pub fn new(config: &StoreConfig) -> Store {
        let (tx, _) = broadcast::channel(1 << 16);
        let net = u32::from(config.service_cidr.0);
        let size = 1u32
            .checked_shl(32 - u32::from(config.service_cidr.1.min(30)))
            .unwrap_or(u32::MAX);
        let mut store = Store {
            rv: 0,
            objects: RESOURCES.iter().map(|_| BTreeMap::new()).collect(),
            history: VecDeque::new(),
            history_limit: config.history.max(1),
            complete_after: 0,
            cidr: (net & !(size - 1), size),
            ips: BTreeSet::new(),
            cidrs6: config
                .service_cidrs_v6
                .iter()
                .map(|(net, prefix)| {
                    let prefix = (*prefix).min(128);
                    (u128::from(*net) & mask6(prefix), prefix)
                })
                .collect(),
            ips6: BTreeSet::new(),
            next_ip: 1,
            next_ip6: 1,
            node_ports: BTreeSet::new(),
            tx,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let mut v = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            crate::validate::default(NAMESPACES, &mut v);
            // The built-in objects are well-formed by construction; an error here is a bug.
            if let Err(e) = store.create(NAMESPACES, v) {
                tracing::error!(error = %e.message, "built-in namespace");
            }
        }
        let mut kubernetes = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]},
        });
        crate::validate::default(SERVICES, &mut kubernetes);
        if let Err(e) = store.create(SERVICES, kubernetes) {
            tracing::error!(error = %e.message, "built-in kubernetes service");
        }
        store
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// Number of stored objects of resource `res`.
    pub fn count(&self, res: usize) -> usize {
        self.objects[res].len()
    }

    /// Gets one object.
    pub fn get(&self, res: usize, ns: &str, name: &str) -> Option<Arc<Obj>> {
        self.objects[res].get(&key(ns, name)).cloned()
    }

    /// Objects of `res` (in `ns`, or everywhere when None) at `at`, sorted by namespace and name,
    /// with the resourceVersion of that state.
    pub fn list(
        &self,
        res: usize,
        ns: Option<&str>,
        at: ReadAt,
    ) -> Result<(u64, Vec<Arc<Obj>>), ApiError> {
        let in_ns = |o: &Obj| ns.is_none_or(|n| o.namespace() == n);
        match at {
            ReadAt::Latest => Ok((
                self.rv,
                self.objects[res]
                    .values()
                    .filter(|o| in_ns(o))
                    .cloned()
                    .collect(),
            )),
            ReadAt::Exact(rv) => {
                if rv > self.rv {
                    return Err(ApiError::too_large_resource_version(rv, self.rv));
                }
                if rv < self.complete_after {
                    // kube reads an exact resourceVersion from etcd, which words a compacted one so.
                    return Err(ApiError::expired(
                        "The resourceVersion for the provided list is too old.",
                    ));
                }
                let mut state: BTreeMap<Key, Arc<Obj>> = self.objects[res]
                    .iter()
                    .filter(|(_, o)| in_ns(o))
                    .map(|(k, o)| (k.clone(), o.clone()))
                    .collect();
                for change in self.history.iter().rev().take_while(|c| c.rv > rv) {
                    if change.res != res {
                        continue;
                    }
                    if !in_ns(&change.object) {
                        continue;
                    }
                    let k = key(change.object.namespace(), change.object.name());
                    match &change.prev {
                        Some(prev) => state.insert(k, prev.clone()),
                        None => state.remove(&k),
                    };
                }
                Ok((rv, state.into_values().collect()))
            }
        }
    }

    fn commit(&mut self, res: usize, kind: EventType, object: Arc<Obj>, prev: Option<Arc<Obj>>) {
        let change = Arc::new(Change {
            rv: self.rv,
            res,
            kind,
            object,
            prev,
        });
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.complete_after = old.rv;
            }
        }
        // No receivers is normal: nobody is watching.
        let _ = self.tx.send(change);
    }

    fn check_namespace(&self, res: usize, ns: &str) -> Result<(), ApiError> {
        if !RESOURCES[res].namespaced {
            return Ok(());
        }
        match self.objects[NAMESPACES].get(&key("", ns)) {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(n) if n.value().pointer("/metadata/deletionTimestamp").is_some() => {
                Err(ApiError::namespace_terminating(ns))
            }
            Some(_) => Ok(()),
        }
    }

    /// Creates an object that has been decoded, defaulted and validated. Sets uid,
    /// creationTimestamp, resourceVersion and generation, and allocates Service addresses.
    pub fn create(&mut self, res: usize, mut v: Value) -> Result<Arc<Obj>, ApiError> {
        let def = &RESOURCES[res];
        let ns = meta_str(&v, "namespace").to_owned();
        let name = meta_str(&v, "name").to_owned();
        if !meta_str(&v, "resourceVersion").is_empty() {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        self.check_namespace(res, &ns)?;
        if self.objects[res].contains_key(&key(&ns, &name)) {
            return Err(ApiError::already_exists(def.group, def.plural, &name));
        }
        if res == SERVICES {
            self.allocate(&mut v, None)?;
        }
        self.rv += 1;
        set_meta(&mut v, "uid", json!(uuid::Uuid::new_v4().to_string()));
        set_meta(&mut v, "creationTimestamp", json!(now()));
        set_meta(&mut v, "resourceVersion", json!(self.rv.to_string()));
        remove_meta(&mut v, "deletionTimestamp");
        remove_meta(&mut v, "deletionGracePeriodSeconds");
        if def.generation {
            set_meta(&mut v, "generation", json!(1));
        } else {
            remove_meta(&mut v, "generation");
        }
        let obj = Obj::new(v);
        self.objects[res].insert(key(&ns, &name), obj.clone());
        self.commit(res, EventType::Added, obj.clone(), None);
        Ok(obj)
    }

    /// Replaces a stored object. `v` carries the caller's resourceVersion precondition (empty =
    /// unconditional). Keeps identity fields, bumps generation on spec changes, and completes a
    /// pending deletion once the last finalizer is gone.
    pub fn update(&mut self, res: usize, mut v: Value) -> Result<Arc<Obj>, ApiError> {
        let def = &RESOURCES[res];
        let ns = meta_str(&v, "namespace").to_owned();
        let name = meta_str(&v, "name").to_owned();
        let Some(old) = self.get(res, &ns, &name) else {
            return Err(ApiError::not_found(def.group, def.plural, &name));
        };
        let old_value = old.value();
        let want_rv = meta_str(&v, "resourceVersion");
        if !want_rv.is_empty() && want_rv != meta_str(&old_value, "resourceVersion") {
            return Err(ApiError::conflict(
                def.group,
                def.plural,
                &name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let deleting = old_value.pointer("/metadata/deletionTimestamp").cloned();
        if deleting.is_some() {
            no_new_finalizers(def, &name, &old_value, &v)?;
        }
        if res == SERVICES {
            self.allocate(&mut v, Some(&old_value))?;
        }
        keep_server_fields(def, &mut v, &old_value, deleting.as_ref());
        // kube-apiserver skips the write when nothing changed: no new resourceVersion, no event.
        set_meta(
            &mut v,
            "resourceVersion",
            old_value["metadata"]["resourceVersion"].clone(),
        );
        if v == old_value {
            return Ok(old);
        }
        self.rv += 1;
        set_meta(&mut v, "resourceVersion", json!(self.rv.to_string()));
        let finished = deleting.is_some() && finalizers(&v).is_empty();
        if finished {
            self.release(res, &v);
        }
        let obj = Obj::new(v);
        if finished {
            self.objects[res].remove(&key(&ns, &name));
            self.commit(res, EventType::Deleted, obj.clone(), Some(old));
            return Ok(obj);
        }
        self.objects[res].insert(key(&ns, &name), obj.clone());
        self.commit(res, EventType::Modified, obj.clone(), Some(old));
        Ok(obj)
    }

    /// Deletes an object, honouring `uid` / `resourceVersion` preconditions and finalizers.
    /// Deleting a namespace deletes everything in it.
    pub fn delete(
        &mut self,
        res: usize,
        ns: &str,
        name: &str,
        precondition_uid: Option<&str>,
        precondition_rv: Option<&str>,
    ) -> Result<Deleted, ApiError> {
        let def = &RESOURCES[res];
        let Some(old) = self.get(res, ns, name) else {
            return Err(ApiError::not_found(def.group, def.plural, name));
        };
        let old_value = old.value();
        if let Some(uid) = precondition_uid
            && uid != meta_str(&old_value, "uid")
        {
            return Err(ApiError::conflict(
                def.group,
                def.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old_value, "uid")
                ),
            ));
        }
        if let Some(rv) = precondition_rv
            && rv != meta_str(&old_value, "resourceVersion")
        {
            return Err(ApiError::conflict(
                def.group,
                def.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old_value, "resourceVersion")
                ),
            ));
        }
        if res == NAMESPACES {
            self.empty_namespace(name);
        }
        if !finalizers(&old_value).is_empty() {
            if old_value.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(Deleted::Pending(old));
            }
            let mut v = old_value.clone();
            set_meta(&mut v, "deletionTimestamp", json!(now()));
            set_meta(&mut v, "deletionGracePeriodSeconds", json!(0));
            if res == NAMESPACES {
                // What kube's namespace lifecycle shows while finalizers hold it.
                if !v.get("status").is_some_and(Value::is_object) {
                    v["status"] = json!({});
                }
                v["status"]["phase"] = json!("Terminating");
            }
            if RESOURCES[res].generation {
                let generation = v
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                set_meta(&mut v, "generation", json!(generation + 1));
            }
            self.rv += 1;
            set_meta(&mut v, "resourceVersion", json!(self.rv.to_string()));
            let obj = Obj::new(v);
            self.objects[res].insert(key(ns, name), obj.clone());
            self.commit(res, EventType::Modified, obj.clone(), Some(old));
            return Ok(Deleted::Pending(obj));
        }
        Ok(Deleted::Gone(self.remove(res, ns, name, old)))
    }

    fn remove(&mut self, res: usize, ns: &str, name: &str, old: Arc<Obj>) -> Arc<Obj> {
        self.objects[res].remove(&key(ns, name));
        let mut v = old.value();
        self.release(res, &v);
        self.rv += 1;
        set_meta(&mut v, "resourceVersion", json!(self.rv.to_string()));
        let obj = Obj::new(v);
        self.commit(res, EventType::Deleted, obj.clone(), Some(old));
        obj
    }

    fn empty_namespace(&mut self, ns: &str) {
        for (res, def) in RESOURCES.iter().enumerate() {
            if !def.namespaced {
                continue;
            }
            let prefix = key(ns, "");
            let names: Vec<(String, Arc<Obj>)> = self.objects[res]
                .range(prefix.clone()..)
                .take_while(|(k, _)| k.starts_with(&prefix))
                .map(|(_, o)| (o.name().to_owned(), o.clone()))
                .collect();
            for (name, old) in names {
                self.remove(res, ns, &name, old);
            }
        }
    }

    /// Starts a watch on `res`: from resourceVersion `from` (None = now), with the current state
    /// as initial events when `initial` is set.
    pub fn watch(
        &self,
        res: usize,
        from: Option<u64>,
        initial: bool,
    ) -> Result<WatchStart, ApiError> {
        let mut backlog = Vec::new();
        if let Some(rv) = from {
            if rv < self.complete_after {
                return Err(ApiError::expired(format!(
                    "too old resource version: {rv} ({})",
                    self.complete_after
                )));
            }
            if rv > self.rv {
                return Err(ApiError::too_large_resource_version(rv, self.rv));
            }
            backlog = self
                .history
                .iter()
                .filter(|c| c.rv > rv && c.res == res)
                .cloned()
                .collect();
        }
        let initial = if initial {
            self.objects[res].values().cloned().collect()
        } else {
            Vec::new()
        };
        Ok(WatchStart {
            initial,
            backlog,
            rx: self.subscribe(),
            rv: self.rv,
        })
    }

    /// Every change committed from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.tx.subscribe()
    }

    /// Forgets all history: every resourceVersion handed out so far becomes too old to watch
    /// or list from (the next watch from one gets 410 Expired).
    pub fn expire_history(&mut self) {
        self.history.clear();
        self.rv += 1;
        self.complete_after = self.rv;
    }

    fn release(&mut self, res: usize, v: &Value) {
        if res != SERVICES {
            return;
        }
        // kube's releaseClusterIPs: every address in clusterIPs, each to its family's range.
        let f = IpFields::read(v.get("spec").unwrap_or(&Value::Null));
        if f.needs_cluster_ip() && !f.is_headless() {
            for ip in f
                .cluster_ips
                .iter()
                .filter_map(|s| s.parse::<IpAddr>().ok())
            {
                self.free_ip(ip);
            }
        }
        for p in v
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(np) = p.get("nodePort").and_then(Value::as_u64) {
                self.node_ports.remove(&(np as u16));
            }
        }
    }

    /// The families this cluster has Service ranges for.
    pub(crate) fn service_families(&self) -> ServiceFamilies {
        ServiceFamilies {
            dual_stack: !self.cidrs6.is_empty(),
        }
    }

    /// Gives a Service its ClusterIPs and node ports, as kube's Service registry does before it
    /// stores one: the IP fields are settled first ([`service::prepare`]: allocated values
    /// kept on update, as kube's `patchAllocatedValues`), then the addresses taken.
    fn allocate(&mut self, v: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
        service::prepare(v, old, self.service_families())?;
        let name = meta_str(v, "name").to_owned();
        let old_spec = old.and_then(|o| o.get("spec"));
        let Some(spec) = v.get_mut("spec") else {
            return Ok(());
        };
        let mut f = IpFields::read(spec);
        let before = old_spec.map(IpFields::read);
        let (fresh, released) = match &before {
            None => (self.allocate_cluster_ips(&name, &mut f)?, Vec::new()),
            Some(b) => self.update_cluster_ips(&name, &mut f, b)?,
        };
        f.write(spec);
        let old_node_ports = node_ports_of(old);
        if f.ty == "NodePort" || f.ty == "LoadBalancer" {
            match self.allocate_node_ports(&name, spec, old, &old_node_ports) {
                Ok(taken) => self.node_ports.extend(taken),
                Err(e) => {
                    // The addresses this call took go back: the Service is not written.
                    for a in fresh {
                        self.free_ip(a);
                    }
                    return Err(e);
                }
            }
        }
        // Node ports the updated Service no longer uses go back to the pool.
        let kept = node_ports_of(Some(v));
        for np in old_node_ports {
            if !kept.contains(&np) {
                self.node_ports.remove(&(np as u16));
            }
        }
        for a in released {
            self.free_ip(a);
        }
        Ok(())
    }

    /// kube's `allocClusterIPs`: an address of each family in `ipFamilies` (none for
    /// ExternalName or headless), the one `clusterIPs` names at its index or else the next
    /// free one. Answers the addresses taken; on an error none stays taken.
    fn allocate_cluster_ips(
        &mut self,
        name: &str,
        f: &mut IpFields,
    ) -> Result<Vec<IpAddr>, ApiError> {
        if !f.needs_cluster_ip() || f.is_headless() {
            return Ok(Vec::new());
        }
        // Empty strings mark the families still to allocate, as kube's do (and show in
        // its errors).
        while f.cluster_ips.len() < f.families.len() {
            f.cluster_ips.push(String::new());
        }
        let mut taken = Vec::new();
        for i in 0..f.families.len() {
            match self.take_cluster_ip(name, &f.families[i], &f.cluster_ips[i], &f.cluster_ips) {
                Ok(addr) => {
                    taken.push(addr);
                    f.cluster_ips[i] = addr.to_string();
                }
                Err(e) => {
                    for a in taken {
                        self.free_ip(a);
                    }
                    return Err(e);
                }
            }
        }
        if let Some(first) = f.cluster_ips.first() {
            f.cluster_ip.clone_from(first);
        }
        Ok(taken)
    }

    /// kube's `updateClusterIPs`: a Service that stops being ExternalName gets addresses, one
    /// that becomes ExternalName gives them back, one upgraded to two families gets its
    /// secondary address and one downgraded to one gives it back. Answers the addresses taken
    /// and those to give back once the Service is written.
    fn update_cluster_ips(
        &mut self,
        name: &str,
        f: &mut IpFields,
        old: &IpFields,
    ) -> Result<(Vec<IpAddr>, Vec<IpAddr>), ApiError> {
        let none = Ok((Vec::new(), Vec::new()));
        if f.matching_prefer_dual_stack(Some(old)) {
            return none;
        }
        if !old.needs_cluster_ip() && f.needs_cluster_ip() {
            return Ok((self.allocate_cluster_ips(name, f)?, Vec::new()));
        }
        if old.is_headless() {
            return none;
        }
        let parsed =
            |ips: &[String]| -> Vec<IpAddr> { ips.iter().filter_map(|s| s.parse().ok()).collect() };
        if old.needs_cluster_ip() && !f.needs_cluster_ip() {
            return Ok((Vec::new(), parsed(&old.cluster_ips)));
        }
        match (old.families.len(), f.families.len()) {
            (1, 2) => {
                if f.cluster_ips.len() < 2 {
                    f.cluster_ips.push(String::new());
                }
                let addr =
                    self.take_cluster_ip(name, &f.families[1], &f.cluster_ips[1], &f.cluster_ips)?;
                f.cluster_ips[1] = addr.to_string();
                Ok((vec![addr], Vec::new()))
            }
            (2, 1) => Ok((
                Vec::new(),
                parsed(old.cluster_ips.get(1..).unwrap_or_default()),
            )),
            _ => none,
        }
    }

    /// Takes an address of `family` for the Service `name`: the `requested` one if it is in
    /// range and free, the next free one when none is requested. `all` is the Service's
    /// `clusterIPs`, which kube prints in its refusals.
    fn take_cluster_ip(
        &mut self,
        name: &str,
        family: &str,
        requested: &str,
        all: &[String],
    ) -> Result<IpAddr, ApiError> {
        if requested.is_empty() {
            let next = if family == "IPv6" {
                self.next_free_ip6().map(IpAddr::V6)
            } else {
                self.next_free_ip().map(IpAddr::V4)
            };
            let addr = next.ok_or_else(|| {
                ApiError::internal("failed to allocate a serviceIP: range is full")
            })?;
            self.take_ip(addr);
            return Ok(addr);
        }
        // Every refusal of a requested address is a 422 on the Service.
        let refuse = |field: &str, why: String| {
            ApiError::invalid(
                "",
                "Service",
                name,
                vec![cause(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: {}: {why}", go_string_slice(all)),
                )],
            )
        };
        let ip = requested;
        // The address was validated before, so this only guards callers that skip that.
        let addr: IpAddr = ip.parse().map_err(|_| {
            refuse(
                "spec.clusterIPs",
                format!("failed to allocate IP {ip}: not an IP address"),
            )
        })?;
        if !self.in_range(addr) {
            return Err(refuse(
                "spec.clusterIPs",
                format!(
                    "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
                    self.ranges_of(addr)
                ),
            ));
        }
        if !self.take_ip(addr) {
            return Err(refuse(
                "spec.clusterIPs",
                format!("failed to allocate IP {ip}: provided IP is already allocated"),
            ));
        }
        Ok(addr)
    }

    /// Fills in the node port of each port of a NodePort or LoadBalancer Service `spec`: a
    /// requested one is checked (this Service's own, or free and in range), a missing one is the
    /// old port's with the same port and protocol, else the first free one. Answers the ports
    /// to mark allocated; marks none itself, so an error leaves the pool as it was.
    fn allocate_node_ports(
        &self,
        name: &str,
        spec: &mut Value,
        old: Option<&Value>,
        old_node_ports: &[u64],
    ) -> Result<Vec<u16>, ApiError> {
        let old_ports = old
            .and_then(|o| o.pointer("/spec/ports"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut taken = Vec::new();
        let Some(Value::Array(ports)) = spec.get_mut("ports") else {
            return Ok(taken);
        };
        for (i, p) in ports.iter_mut().enumerate() {
            if let Some(np) = p.get("nodePort").and_then(Value::as_u64) {
                if let Some(why) = self.requested_node_port_problem(np, old_node_ports) {
                    return Err(ApiError::invalid(
                        "",
                        "Service",
                        name,
                        vec![cause(
                            "FieldValueInvalid",
                            format!("spec.ports[{i}].nodePort"),
                            format!("Invalid value: {np}: {why}"),
                        )],
                    ));
                }
                taken.push(np as u16);
                continue;
            }
            let same = old_ports
                .iter()
                .find(|o| o.get("port") == p.get("port") && o.get("protocol") == p.get("protocol"));
            let np = match same.and_then(|o| o.get("nodePort")).and_then(Value::as_u64) {
                Some(np) => np as u16,
                None => (30000u16..=32767)
                    .find(|n| !self.node_ports.contains(n) && !taken.contains(n))
                    .ok_or_else(|| {
                        ApiError::internal("failed to allocate a nodePort: range is full")
                    })?,
            };
            taken.push(np);
            p["nodePort"] = json!(np);
        }
        Ok(taken)
    }

    /// Why a requested node port cannot be had, if it cannot: it is neither this Service's own
    /// (`old_node_ports`) nor free and in range.
    fn requested_node_port_problem(&self, np: u64, old_node_ports: &[u64]) -> Option<&'static str> {
        if old_node_ports.contains(&np) {
            None
        } else if !(30000..=32767).contains(&np) {
            Some("provided port is not in the valid range. The range of valid ports is 30000-32767")
        } else if self.node_ports.contains(&(np as u16)) {
            Some("provided port is already allocated")
        } else {
            None
        }
    }

    /// Whether `addr` lies in the service range of its family.
    fn in_range(&self, addr: IpAddr) -> bool {
        match addr {
            IpAddr::V4(a) => u32::from(a).wrapping_sub(self.cidr.0) < self.cidr.1,
            IpAddr::V6(a) => {
                let n = u128::from(a);
                self.cidrs6
                    .iter()
                    .any(|(net, prefix)| n & mask6(*prefix) == *net)
            }
        }
    }

    /// The service ranges of `addr`'s family, as kube prints them in errors.
    fn ranges_of(&self, addr: IpAddr) -> String {
        match addr {
            IpAddr::V4(_) => format!(
                "{}/{}",
                Ipv4Addr::from(self.cidr.0),
                32 - self.cidr.1.trailing_zeros()
            ),
            IpAddr::V6(_) => self
                .cidrs6
                .iter()
                .map(|(net, prefix)| format!("{}/{prefix}", Ipv6Addr::from(*net)))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Marks `addr` allocated; false when it already was.
    fn take_ip(&mut self, addr: IpAddr) -> bool {
        match addr {
            IpAddr::V4(a) => self.ips.insert(u32::from(a)),
            IpAddr::V6(a) => self.ips6.insert(u128::from(a)),
        }
    }

    /// Gives `addr` back.
    fn free_ip(&mut self, addr: IpAddr) {
        match addr {
            IpAddr::V4(a) => {
                self.ips.remove(&u32::from(a));
            }
            IpAddr::V6(a) => {
                self.ips6.remove(&u128::from(a));
            }
        }
    }

    fn next_free_ip(&mut self) -> Option<Ipv4Addr> {
        let usable = self.cidr.1.saturating_sub(2);
        for _ in 0..usable {
            let offset = self.next_ip;
            self.next_ip = if self.next_ip + 1 >= self.cidr.1 - 1 {
                1
            } else {
                self.next_ip + 1
            };
            let n = self.cidr.0 + offset;
            if !self.ips.contains(&n) {
                return Some(Ipv4Addr::from(n));
            }
        }
        None
    }

    /// The next free address of the first IPv6 range, in order from the one after the network
    /// address (IPv6 has no broadcast address to keep out), wrapping around.
    fn next_free_ip6(&mut self) -> Option<Ipv6Addr> {
        let (net, prefix) = *self.cidrs6.first()?;
        let size = 1u128
            .checked_shl(128 - u32::from(prefix))
            .unwrap_or(u128::MAX);
        let usable = size.saturating_sub(1);
        // Only addresses already taken can be skipped, so a free one is this close.
        let tries = usable.min(self.ips6.len() as u128 + 1);
        for _ in 0..tries {
            let offset = self.next_ip6;
            self.next_ip6 = if offset + 1 >= size { 1 } else { offset + 1 };
            let n = net + offset;
            if !self.ips6.contains(&n) {
                return Some(Ipv6Addr::from(n));
            }
        }
        None
    }
}

/// The network mask of an IPv6 prefix length (at most 128).
fn mask6(prefix: u8) -> u128 {
    u128::MAX
        .checked_shl(128 - u32::from(prefix.min(128)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
