//! What one cluster's watches have delivered, and the model events that
//! follow from each delivery: the pure core of a live cluster watch.
//!
//! Owns the merge of several Service watches (one per export selector, since
//! a label selector cannot express "or"), the rule that only slices of
//! exported services are kept (memory follows exported endpoints), the
//! targeted slice list when a service becomes exported after the slice watch
//! started, relist bookkeeping (objects missing from a relist are deleted),
//! the cluster's budget (a refused service is announced refused and its
//! slices are counted, not held; admitted again, they are listed anew), and
//! carrying state across a restart (new credentials or selectors) so the
//! old data is served until the new watches have listed; and which slice
//! deliveries bring a new last-change trigger time to measure propagation
//! from (a change, not a list's first sight of a slice).
//!
//! Its entry points follow kube-runtime's watcher events, kubert-style:
//! [`ClusterState::watched`] takes one event of one [`Watch`] and returns
//! the [`Output`] (model events, adjusted objects, targeted lists to run);
//! under it, each watch is an [`Index`](crate::k8s::index::Index) fed
//! through its [`Relist`](crate::k8s::index::Relist) (`relist`), which
//! does the relist bookkeeping.
//! [`ClusterState::listed`] takes a targeted list, [`ClusterState::settle`]
//! ends a batch. Under it, `mcs` owns the MCS join and `property` the
//! ClusterProperty objects (the cluster's place, and its MCS id). It must
//! not do I/O or read the clock.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Service as K8sService;
use k8s_openapi::api::discovery::v1::EndpointSlice as K8sSlice;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event as WatchEvent;

use super::convert::mcs::Export;
use super::convert::{
    Adjustment, ConvertError, ServiceKind, Warning, convert_service, convert_slice,
    slice_trigger_time,
};
use super::selector::Selectors;
use crate::model::Event;
use crate::model::budget::{Admission, Budget, Refused};
use crate::model::objects::ObjectKey;
use crate::vocab::linkerd::LABEL_SERVICE_NAME;
use crate::vocab::trust::Trust;

mod mcs;
mod property;
mod relist;
use mcs::Mcs;
pub(crate) use mcs::McsReport;
use property::Properties;

/// Which of a cluster's watches delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Watch {
    /// Service watch `n` (one per distinct export selector, then the
    /// mirror Services in the local cluster).
    Services(usize),
    /// The EndpointSlice watch (every slice with a service-name label).
    Slices,
    /// The remote `linkerd-gateway` Service.
    Gateway,
    /// ServiceExports (`--mcs`).
    Exports,
    /// ClusterProperty objects (every mode): the place, and with `--mcs`
    /// the cluster id.
    Properties,
    /// ServiceImports of the local cluster (`--mcs`).
    Imports,
}

/// A delivered object (boxed: API objects are large, and they travel
/// through queues).
#[derive(Debug, Clone)]
pub(crate) enum Object {
    /// A Service (from [`Watch::Services`] or [`Watch::Gateway`]).
    Service(Box<K8sService>),
    /// An EndpointSlice (from [`Watch::Slices`]).
    Slice(Box<K8sSlice>),
    /// A ServiceExport, ServiceImport or ClusterProperty (from
    /// [`Watch::Exports`], [`Watch::Imports`], [`Watch::Properties`]): their
    /// version is the one the cluster serves, found at run time.
    Dynamic(Box<DynamicObject>),
}

impl Object {
    /// A Service.
    pub(crate) fn service(s: K8sService) -> Self {
        Self::Service(Box::new(s))
    }

    /// An EndpointSlice.
    pub(crate) fn slice(s: K8sSlice) -> Self {
        Self::Slice(Box::new(s))
    }

    /// An MCS or About API object.
    pub(crate) fn dynamic(o: DynamicObject) -> Self {
        Self::Dynamic(Box::new(o))
    }
}

/// Something the shell must do for the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// List the EndpointSlices of this service (it became exported after the
    /// slice watch started) and hand them to [`ClusterState::listed`].
    ListSlices(ObjectKey),
    /// Get this Service (a ServiceExport of its name arrived after the
    /// every-Service watch had listed, which does not hold unexported
    /// Services) and hand it to [`ClusterState::listed_service`].
    ListService(ObjectKey),
}

/// The result of one delivery.
#[derive(Debug, Default)]
pub(crate) struct Output {
    /// Model events.
    pub events: Vec<Event>,
    /// Work for the shell.
    pub actions: Vec<Action>,
    /// Objects skipped or clamped, for logs and counters.
    pub adjusted: Vec<Adjusted>,
}

/// An object a delivery skipped or clamped, with the reasons why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Adjusted {
    /// Kind and name, for logs (`EndpointSlice prod/web-1`).
    pub object: String,
    /// Skipped (its last good version, if any, is kept) or clamped.
    pub adjustment: Adjustment,
    /// One per reason.
    pub warnings: Vec<Warning>,
}

impl Adjusted {
    /// `object` could not be converted.
    fn failed(object: String, e: &ConvertError) -> Self {
        Self {
            object,
            adjustment: Adjustment::Skipped,
            warnings: vec![Warning {
                reason: e.reason(),
                text: e.to_string(),
                more: 0,
            }],
        }
    }
}

#[derive(Debug, Clone)]
struct Held {
    /// Which Service watches currently hold it.
    mask: u32,
    kind: ServiceKind,
    /// The model was told the budget refuses it.
    refused: bool,
}

/// What the model holds of one service.
#[derive(Debug, Clone, PartialEq)]
enum Served {
    /// Nothing.
    Nothing,
    /// An exported service (Linkerd's labels, or a ServiceExport).
    Exported(crate::model::objects::Service),
    /// A mirror Service (local cluster).
    Mirror(crate::model::objects::Mirror),
}

#[derive(Debug, Clone)]
struct HeldSlice {
    service: ObjectKey,
    /// Its endpoint addresses now (what the budget counts).
    endpoints: usize,
    /// The endpoint count of the version the model holds; `None` when the
    /// model has none (its service is refused, or it waits in `deferred`).
    sent: Option<usize>,
    /// Its last-change trigger time now: a delivery carrying the same one
    /// again (a relist, a relabel by someone else) is no new change.
    trigger: Option<SystemTime>,
}

/// Counts for status pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Exported or federated services.
    pub services: usize,
    /// Mirror Services (local cluster).
    pub mirrors: usize,
    /// EndpointSlices held.
    pub slices: usize,
    /// Endpoint addresses held.
    pub endpoints: usize,
}

/// The budget and what it refuses, for status pages and logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BudgetReport {
    /// The budget in force.
    pub budget: Budget,
    /// What it refuses.
    pub refused: Refused,
    /// The oldest refused services (at most [`REFUSED_LISTED`](crate::model::budget::REFUSED_LISTED)).
    pub refused_services: Vec<ObjectKey>,
}

/// One cluster's delivered state.
#[derive(Debug, Clone)]
pub(crate) struct ClusterState {
    name: Arc<str>,
    local: bool,
    selectors: Selectors,
    /// What the cluster may make us hold (addresses, namespaces).
    trust: Trust,
    services: HashMap<ObjectKey, Held>,
    /// Service watches that have not listed since the last (re)start; held
    /// services no watch confirmed are deleted when this reaches zero.
    unconfirmed: usize,
    service_lists_done: Vec<bool>,
    /// Each watch's relist under way, if any.
    relists: relist::Relists,
    slices: HashMap<ObjectKey, HeldSlice>,
    by_service: HashMap<ObjectKey, HashSet<ObjectKey>>,
    slice_started: bool,
    slice_listed: bool,
    /// Targeted lists in flight: the slices the watch touched since.
    pending: HashMap<ObjectKey, HashSet<ObjectKey>>,
    /// Mirror Services held (the rest of `services` are exports).
    mirrors: usize,
    /// Slices the model holds, and their endpoint addresses.
    forwarded: (usize, usize),
    /// Slices delivered since the last [`Self::settle`]: the model gets
    /// them once the budget has judged their service, so a refused
    /// service's endpoints never reach it. Each with the trigger time to
    /// measure its propagation from, if it brings a new one.
    deferred: BTreeMap<ObjectKey, (crate::model::objects::Slice, Option<SystemTime>)>,
    /// Exported services against the budget.
    admission: Admission,
    budget: Budget,
    /// The budget changed: every service is judged again.
    rebudget: bool,
    gateway_listed: bool,
    has_gateway: bool,
    synced: bool,
    /// Services the model holds as exported (Linkerd's or MCS).
    exported_count: usize,
    /// ServiceExports, the cluster id and ServiceImports (`--mcs`).
    mcs: Mcs,
    /// The place its ClusterProperty objects state.
    properties: Properties,
}

impl ClusterState {
    /// An empty state for `service_watches` Service watches, converting
    /// what they deliver under `selectors` and `trust`.
    pub(crate) fn new(
        name: Arc<str>,
        local: bool,
        selectors: Selectors,
        trust: Trust,
        service_watches: usize,
    ) -> Self {
        Self {
            name,
            local,
            selectors,
            trust,
            services: HashMap::new(),
            unconfirmed: service_watches,
            service_lists_done: vec![false; service_watches],
            relists: relist::Relists::new(),
            slices: HashMap::new(),
            by_service: HashMap::new(),
            slice_started: false,
            slice_listed: false,
            pending: HashMap::new(),
            mirrors: 0,
            forwarded: (0, 0),
            deferred: BTreeMap::new(),
            admission: Admission::new(),
            budget: Budget::default(),
            rebudget: false,
            gateway_listed: true,
            has_gateway: false,
            synced: false,
            exported_count: 0,
            mcs: Mcs::off(),
            properties: Properties::off(),
        }
    }

    /// The state for new watches (new credentials, selectors, trust or
    /// watch set): what is held stays and is served until the new watches
    /// have listed, and what they list is converted under the new rules;
    /// whatever they do not confirm is then deleted. A cluster that had
    /// synced stays synced.
    pub(crate) fn restart(
        self,
        selectors: Selectors,
        trust: Trust,
        service_watches: usize,
    ) -> Self {
        let mut next = Self::new(self.name, self.local, selectors, trust, service_watches);
        next.services = self
            .services
            .into_iter()
            .map(|(k, h)| (k, Held { mask: 0, ..h }))
            .collect();
        next.slices = self.slices;
        next.mirrors = self.mirrors;
        next.forwarded = self.forwarded;
        next.deferred = self.deferred;
        next.admission = self.admission;
        next.budget = self.budget;
        next.by_service = self.by_service;
        next.has_gateway = self.has_gateway;
        next.synced = self.synced;
        next.exported_count = self.exported_count;
        next.mcs = self.mcs.restart();
        next.properties = self.properties.restart();
        next
    }

    /// The rules its objects are converted under.
    pub(crate) fn trust(&self) -> &Trust {
        &self.trust
    }

    /// Every watch has listed once (and no targeted list from that first
    /// sync is outstanding). Stays true once reached.
    pub(crate) fn synced(&self) -> bool {
        self.synced
    }

    /// Every Service watch has listed since the last (re)start: the slice
    /// watch may start.
    pub(crate) fn services_listed(&self) -> bool {
        self.service_lists_done.iter().all(|d| *d)
    }

    /// One watcher event of watch `w`, through the watch's
    /// [`Relist`](crate::k8s::index::Relist): a relist is streamed, its
    /// objects applied as they come (a cluster's slices can be hundreds of
    /// megabytes as API objects, and only their slim conversions are held),
    /// and what it did not bring back is deleted at its end. A watch whose
    /// API the cluster does not serve is fed `Init` and `InitDone`.
    pub(crate) fn watched(&mut self, w: Watch, event: WatchEvent<Object>) -> Output {
        let mut out = Output::default();
        self.feed(w, event, &mut out);
        out
    }

    /// The targeted list of [`Action::ListSlices`] for `service` returned
    /// `items`.
    pub(crate) fn listed(&mut self, service: &ObjectKey, items: Vec<K8sSlice>) -> Output {
        let mut out = Output::default();
        self.slices_listed(service, items, &mut out);
        out
    }

    /// Counts of what is held (kept as they change: asked after every
    /// batch, so it must not walk the cluster).
    pub(crate) fn counts(&self) -> Counts {
        Counts {
            services: self.exported_count,
            mirrors: self.mirrors,
            slices: self.forwarded.0,
            endpoints: self.forwarded.1,
        }
    }

    /// The budget and what it refuses (asked after every batch: no walk,
    /// the last settle listed the refused).
    pub(crate) fn budget_report(&self) -> BudgetReport {
        BudgetReport {
            budget: self.budget,
            refused: self.admission.refused(),
            refused_services: self.admission.listed().to_vec(),
        }
    }

    /// Judges every service against `budget` at the next [`Self::settle`].
    /// Returns false when it is the budget in force (nothing to judge).
    pub(crate) fn set_budget(&mut self, budget: Budget) -> bool {
        if budget == self.budget {
            return false;
        }
        self.budget = budget;
        self.rebudget = true;
        true
    }

    /// Applies the budget to what this batch changed: newly refused
    /// services are announced refused and their slices leave the model;
    /// newly admitted ones get their slices listed again (the model keeps
    /// them refused until the list is in, so they never answer short).
    pub(crate) fn settle(&mut self, out: &mut Output) {
        let changes = if std::mem::take(&mut self.rebudget) {
            self.admission.rebudget(self.budget)
        } else {
            self.admission.settle(self.budget)
        };
        for key in changes.refused {
            self.pending.remove(&key);
            self.announce(&key, true, out);
            self.unforward_slices_of(&key, out);
        }
        for key in changes.admitted {
            let withheld = self.by_service.get(&key).is_some_and(|slices| {
                slices.iter().any(|k| {
                    !self.deferred.contains_key(k)
                        && self.slices.get(k).is_some_and(|h| h.sent.is_none())
                })
            });
            if withheld {
                // Its slices were counted, not kept: fetch them again.
                self.pending.insert(key.clone(), HashSet::new());
                out.actions.push(Action::ListSlices(key));
            } else {
                self.announce(&key, false, out);
            }
        }
        self.forward_deferred(out);
        self.check_synced();
    }

    /// Sends the model the slices delivered since the last settle whose
    /// service is admitted; the others stay counted only.
    fn forward_deferred(&mut self, out: &mut Output) {
        for (key, (slice, trigger)) in std::mem::take(&mut self.deferred) {
            let Some(held) = self.slices.get_mut(&key) else {
                continue;
            };
            if !self.admission.admitted(&held.service) {
                continue;
            }
            let n = slice.endpoints.len();
            match held.sent.replace(n) {
                Some(was) => self.forwarded.1 = self.forwarded.1 - was + n,
                None => self.forwarded = (self.forwarded.0 + 1, self.forwarded.1 + n),
            }
            out.events.push(Event::SliceApplied {
                cluster: self.name.clone(),
                slice,
                trigger,
            });
        }
    }

    /// Tells the model service `key` is refused (or not) if it was told
    /// otherwise.
    fn announce(&mut self, key: &ObjectKey, refused: bool, out: &mut Output) {
        let Served::Exported(service) = self.served(key) else {
            return;
        };
        let Some(h) = self.services.get_mut(key) else {
            return;
        };
        if h.refused != refused {
            h.refused = refused;
            out.events.push(Event::ServiceApplied {
                cluster: self.name.clone(),
                service: crate::model::objects::Service { refused, ..service },
            });
        }
    }

    fn unforward_slices_of(&mut self, service: &ObjectKey, out: &mut Output) {
        for key in self.by_service.get(service).into_iter().flatten() {
            self.deferred.remove(key);
            if let Some(held) = self.slices.get_mut(key)
                && let Some(sent) = held.sent.take()
            {
                withdraw(&mut self.forwarded, &self.name, key.clone(), sent, out);
            }
        }
    }

    /// Declares whether a gateway watch runs (the remote `linkerd-gateway`
    /// Service); sync then waits for its list. Without one, the gateway
    /// comes from elsewhere (a Link, or none): a Service's is forgotten.
    pub(crate) fn set_gateway_watch(&mut self, on: bool) {
        self.gateway_listed = !on;
        if !on {
            self.has_gateway = false;
        }
    }

    fn exported(&self, key: &ObjectKey) -> bool {
        self.services.get(key).is_some_and(|h| match h.kind {
            ServiceKind::Exported(_) => true,
            ServiceKind::Unexported(_) => self.mcs.exports.contains_key(key),
            _ => false,
        })
    }

    /// What the model holds of service `key`: its held kind joined to its
    /// ServiceExport (an MCS member carries the export's age).
    fn served(&self, key: &ObjectKey) -> Served {
        let Some(h) = self.services.get(key) else {
            return Served::Nothing;
        };
        let export = self.mcs.exports.get(key);
        // The export's part of an MCS member.
        let join =
            |s: &crate::model::objects::Service, e: &Export| crate::model::objects::Service {
                mcs: Some(e.created),
                mcs_nearest: e.nearest,
                exported_meta: e.meta.clone(),
                ..s.clone()
            };
        match &h.kind {
            ServiceKind::Exported(s) => Served::Exported(match export {
                Some(e) => join(s, e),
                None => s.clone(),
            }),
            ServiceKind::Unexported(s) => {
                export.map_or(Served::Nothing, |e| Served::Exported(join(s, e)))
            }
            ServiceKind::Mirror(m) => Served::Mirror(m.clone()),
            ServiceKind::Gateway(_) | ServiceKind::Ignored | ServiceKind::ExternalName(_) => {
                Served::Nothing
            }
        }
    }

    /// Tells the model what changed of service `key` since it was
    /// `before`: the one place a service starts or stops being exported,
    /// whether a label, a ServiceExport or a deletion made it so.
    fn transition(&mut self, key: &ObjectKey, before: Served, out: &mut Output) {
        let after = self.served(key);
        if after == before {
            return;
        }
        let cluster = self.name.clone();
        let was_exported = matches!(before, Served::Exported(_));
        match after {
            Served::Exported(service) => {
                self.admission.service(key, service.created);
                let refused = self.services.get(key).is_some_and(|h| h.refused);
                out.events.push(Event::ServiceApplied {
                    cluster,
                    service: crate::model::objects::Service { refused, ..service },
                });
                if !was_exported {
                    self.exported_count += 1;
                    self.became_exported(key, out);
                }
            }
            Served::Mirror(mirror) => {
                if was_exported {
                    self.stopped_exporting(key, out);
                }
                out.events.push(Event::MirrorApplied { cluster, mirror });
            }
            Served::Nothing => {
                if was_exported {
                    self.stopped_exporting(key, out);
                } else if matches!(before, Served::Mirror(_)) {
                    out.events.push(Event::MirrorDeleted {
                        cluster,
                        key: key.clone(),
                    });
                }
            }
        }
    }

    /// Service `key` is no longer exported: it and its slices leave.
    fn stopped_exporting(&mut self, key: &ObjectKey, out: &mut Output) {
        out.events.push(Event::ServiceDeleted {
            cluster: self.name.clone(),
            key: key.clone(),
        });
        self.exported_count -= 1;
        self.drop_slices_of(key, out);
        self.admission.remove(key);
        if let Some(h) = self.services.get_mut(key) {
            h.refused = false;
        }
    }

    /// Every watch has listed since the last (re)start and no targeted
    /// list from those lists is outstanding: what is held is what the
    /// cluster holds now, not what it held before the restart.
    pub(crate) fn relisted(&self) -> bool {
        self.services_listed()
            && self.slice_listed
            && self.gateway_listed
            && self.pending.is_empty()
            && self.mcs.synced()
            && self.properties.listed
    }

    fn check_synced(&mut self) {
        if !self.synced && self.relisted() {
            self.synced = true;
        }
    }

    // ---- Services ---------------------------------------------------------

    /// Service watch `w`'s list is complete (what it did not bring back
    /// is released already): once every Service watch has listed since the
    /// last (re)start, services no watch confirmed are deleted.
    fn service_listed(&mut self, w: usize, out: &mut Output) {
        if let Some(done) = self.service_lists_done.get_mut(w)
            && !*done
        {
            *done = true;
            self.unconfirmed = self.unconfirmed.saturating_sub(1);
            if self.unconfirmed == 0 {
                let orphans: Vec<ObjectKey> = self
                    .services
                    .iter()
                    .filter(|(_, h)| h.mask == 0)
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in orphans {
                    self.remove_service(&key, out);
                }
            }
        }
    }

    /// Converts `svc`, delivered by Service watch `w`, reporting its
    /// problems. `None` when it cannot be converted: whatever was known of
    /// it is kept (a bad edit must not drop a name), also by a relist.
    fn convert_delivered(
        &mut self,
        w: usize,
        svc: &K8sService,
        out: &mut Output,
    ) -> Option<ServiceKind> {
        let (ns, name) = (
            svc.metadata.namespace.as_deref(),
            svc.metadata.name.as_deref(),
        );
        let object = || format!("Service {}", display_name(ns, name));
        // The every-Service watch (`--mcs`) sees all of the cluster's
        // Services: only problems of members are ours to report.
        let ours = self.mcs.all_services != Some(w)
            || meta_key(ns, name).is_some_and(|k| self.mcs.exports.contains_key(&k));
        match convert_service(svc, self.local, &self.selectors, &self.trust) {
            Ok(c) => {
                let member = !matches!(
                    c.value,
                    ServiceKind::Unexported(_)
                        | ServiceKind::Ignored
                        | ServiceKind::ExternalName(_)
                );
                if !c.warnings.is_empty() && (ours || member) {
                    out.adjusted.push(Adjusted {
                        object: object(),
                        adjustment: c.adjustment(),
                        warnings: c.warnings,
                    });
                }
                Some(c.value)
            }
            Err(e) => {
                if ours {
                    out.adjusted.push(Adjusted::failed(object(), &e));
                }
                None
            }
        }
    }

    /// Service watch `w` saw `svc` added or changed.
    fn service_apply(&mut self, w: usize, svc: &K8sService, out: &mut Output) {
        let meta = meta_key(
            svc.metadata.namespace.as_deref(),
            svc.metadata.name.as_deref(),
        );
        if self.mcs.all_services == Some(w)
            && let Some(key) = &meta
        {
            self.mcs.touch(key);
        }
        let Some(kind) = self.convert_delivered(w, svc, out) else {
            return;
        };
        if let Some(key) = &meta {
            self.note_external_name(w, key, matches!(kind, ServiceKind::ExternalName(_)), out);
        }
        let key = match &kind {
            ServiceKind::Exported(s) => s.key.clone(),
            ServiceKind::Mirror(m) => m.key.clone(),
            // Held only while a ServiceExport makes it a member: memory
            // follows what is exported, not every Service of the cluster.
            ServiceKind::Unexported(s) if self.mcs.exports.contains_key(&s.key) => s.key.clone(),
            ServiceKind::Gateway(_)
            | ServiceKind::Ignored
            | ServiceKind::ExternalName(_)
            | ServiceKind::Unexported(_) => {
                // Not ours to hold (a selector matching the gateway, an
                // ExternalName service): as if this watch did not hold it.
                if let Some(key) = meta {
                    self.release(w, &key, out);
                }
                return;
            }
        };
        let before = self.served(&key);
        let bit = 1u32 << w;
        let is_mirror = matches!(kind, ServiceKind::Mirror(_));
        match self.services.get_mut(&key) {
            Some(h) => {
                h.mask |= bit;
                let was_mirror = matches!(h.kind, ServiceKind::Mirror(_));
                h.kind = kind;
                self.mirrors = self.mirrors + usize::from(is_mirror) - usize::from(was_mirror);
            }
            None => {
                self.mirrors += usize::from(is_mirror);
                self.services.insert(
                    key.clone(),
                    Held {
                        mask: bit,
                        kind,
                        refused: false,
                    },
                );
            }
        }
        self.transition(&key, before, out);
    }

    /// Service watch `w` saw `svc` deleted (or leave its selector).
    fn service_delete(&mut self, w: usize, svc: &K8sService, out: &mut Output) {
        if let Some(key) = meta_key(
            svc.metadata.namespace.as_deref(),
            svc.metadata.name.as_deref(),
        ) {
            if self.mcs.all_services == Some(w) {
                self.mcs.touch(&key);
            }
            self.note_external_name(w, &key, false, out);
            self.release(w, &key, out);
        }
    }

    /// Watch `w` no longer holds `key`; the service goes when no watch does.
    fn release(&mut self, w: usize, key: &ObjectKey, out: &mut Output) {
        let Some(h) = self.services.get_mut(key) else {
            return;
        };
        h.mask &= !(1u32 << w);
        if h.mask == 0 && self.unconfirmed == 0 {
            self.remove_service(key, out);
        }
    }

    fn remove_service(&mut self, key: &ObjectKey, out: &mut Output) {
        let before = self.served(key);
        let Some(h) = self.services.remove(key) else {
            return;
        };
        self.mirrors -= usize::from(matches!(h.kind, ServiceKind::Mirror(_)));
        self.transition(key, before, out);
    }

    fn became_exported(&mut self, key: &ObjectKey, out: &mut Output) {
        // Before the slice watch starts, its own list brings the slices.
        if self.slice_started && !self.pending.contains_key(key) {
            self.pending.insert(key.clone(), HashSet::new());
            out.actions.push(Action::ListSlices(key.clone()));
        }
    }

    fn drop_slices_of(&mut self, service: &ObjectKey, out: &mut Output) {
        self.pending.remove(service);
        for slice in self.by_service.remove(service).into_iter().flatten() {
            self.deferred.remove(&slice);
            if let Some(held) = self.slices.remove(&slice)
                && let Some(sent) = held.sent
            {
                withdraw(&mut self.forwarded, &self.name, slice, sent, out);
            }
        }
    }

    // ---- EndpointSlices ---------------------------------------------------

    /// `slice` was delivered (`listed`: by a list, not the watch). Problems
    /// are reported only for slices of exported services: the watch sees
    /// every slice of the cluster, and the others are none of our business.
    fn slice_delivered(&mut self, slice: &K8sSlice, listed: bool, out: &mut Output) {
        let meta = &slice.metadata;
        let ours = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SERVICE_NAME))
            .is_none_or(|service| {
                self.exported(&ObjectKey::new(
                    meta.namespace.as_deref().unwrap_or("default"),
                    service,
                ))
            });
        let object = || {
            format!(
                "EndpointSlice {}",
                display_name(meta.namespace.as_deref(), meta.name.as_deref())
            )
        };
        let converted = match convert_slice(slice, &self.trust) {
            Ok(c) => c,
            Err(e) => {
                // Its last good version stays, also through a relist.
                if ours {
                    out.adjusted.push(Adjusted::failed(object(), &e));
                }
                return;
            }
        };
        let adjustment = converted.adjustment();
        if ours && !converted.warnings.is_empty() {
            out.adjusted.push(Adjusted {
                object: object(),
                adjustment,
                warnings: converted.warnings,
            });
        }
        let Some(s) = converted.value else {
            // FQDN slices: nothing to serve; drop an older version.
            if let Some(key) = meta_key_any(slice) {
                self.remove_slice(&key, out);
            }
            return;
        };
        let service = ObjectKey {
            namespace: s.key.namespace.clone(),
            name: s.service.clone(),
        };
        if let Some(touched) = self.pending.get_mut(&service) {
            touched.insert(s.key.clone());
        }
        if !self.exported(&service) {
            // Relabelled away from an exported service: it goes with it.
            self.remove_slice(&s.key, out);
            return;
        }
        let trigger = slice_trigger_time(slice);
        self.hold_slice(service, s, (trigger, listed), out);
    }

    /// The trigger time a delivery of `key` brings to measure, if any: one
    /// that differs from the held version's (an update, as CoreDNS measures
    /// them), or any for a slice not held that the watch (not a list) saw
    /// created. A list's new slices are not measured: their trigger time is
    /// when they last changed, long before this process looked (the
    /// cluster's first sync, a service exported later).
    fn new_trigger(
        &self,
        key: &ObjectKey,
        (trigger, listed): (Option<SystemTime>, bool),
    ) -> Option<SystemTime> {
        let fresh = match self.slices.get(key) {
            Some(held) => trigger.filter(|t| held.trigger != Some(*t)),
            None => trigger.filter(|_| !listed),
        };
        // A later version that brings none does not cancel one still
        // waiting for the settle (its change is in what is sent).
        fresh.or_else(|| self.deferred.get(key).and_then(|(_, t)| *t))
    }

    /// Keeps `s` of exported `service`: counted against the budget now,
    /// sent to the model at the next [`Self::settle`] if the service is
    /// admitted then.
    fn hold_slice(
        &mut self,
        service: ObjectKey,
        s: crate::model::objects::Slice,
        (trigger, listed): (Option<SystemTime>, bool),
        out: &mut Output,
    ) {
        let measured = self.new_trigger(&s.key, (trigger, listed));
        let n = s.endpoints.len();
        let mut sent = None;
        if let Some(old) = self.slices.remove(&s.key) {
            self.admission
                .endpoints(&old.service, -(old.endpoints as isize));
            if old.service != service {
                if let Some(set) = self.by_service.get_mut(&old.service) {
                    set.remove(&s.key);
                }
                // Moved to another service: the old one loses it now.
                if let Some(was) = old.sent {
                    withdraw(&mut self.forwarded, &self.name, s.key.clone(), was, out);
                }
            } else {
                sent = old.sent;
            }
        }
        self.admission.endpoints(&service, n as isize);
        self.by_service
            .entry(service.clone())
            .or_default()
            .insert(s.key.clone());
        self.slices.insert(
            s.key.clone(),
            HeldSlice {
                service,
                endpoints: n,
                sent,
                trigger,
            },
        );
        self.deferred.insert(s.key.clone(), (s, measured));
    }

    /// The slice watch saw `slice` deleted.
    fn slice_delete(&mut self, slice: &K8sSlice, out: &mut Output) {
        let Some(key) = meta_key_any(slice) else {
            return;
        };
        if let Some(service) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SERVICE_NAME))
        {
            let service = ObjectKey::new(&key.namespace, service);
            if let Some(touched) = self.pending.get_mut(&service) {
                touched.insert(key.clone());
            }
        }
        self.remove_slice(&key, out);
    }

    fn remove_slice(&mut self, key: &ObjectKey, out: &mut Output) {
        self.deferred.remove(key);
        if let Some(held) = self.slices.remove(key) {
            self.admission
                .endpoints(&held.service, -(held.endpoints as isize));
            if let Some(set) = self.by_service.get_mut(&held.service) {
                set.remove(key);
                if set.is_empty() {
                    self.by_service.remove(&held.service);
                }
            }
            if let Some(sent) = held.sent {
                withdraw(&mut self.forwarded, &self.name, key.clone(), sent, out);
            }
        }
    }

    /// The targeted list for `service` returned `items`. Slices the watch
    /// touched since the list was asked for are newer there and kept.
    fn slices_listed(&mut self, service: &ObjectKey, items: Vec<K8sSlice>, out: &mut Output) {
        let Some(touched) = self.pending.remove(service) else {
            return;
        };
        if self.exported(service) {
            for slice in items {
                let Some(key) = meta_key_any(&slice) else {
                    continue;
                };
                if touched.contains(&key) {
                    continue;
                }
                self.slice_delivered(&slice, true, out);
            }
            // Admitted again while refused: its slices are in, so it may
            // answer.
            if self.admission.admitted(service) {
                self.announce(service, false, out);
            }
        }
        self.check_synced();
    }

    // ---- Gateway ----------------------------------------------------------

    /// The gateway watch saw the `linkerd-gateway` Service (`listing`: a
    /// list brought it). Unlike other objects, a listed gateway that is
    /// no gateway (or does not convert) is forgotten, not kept: the list
    /// says what the gateway is now.
    fn gateway_apply(&mut self, svc: &K8sService, listing: bool, out: &mut Output) {
        let object = || "gateway Service".to_owned();
        match convert_service(svc, false, &self.selectors, &self.trust) {
            Ok(c) => {
                if let ServiceKind::Gateway(g) = c.value {
                    self.has_gateway = true;
                    if !c.warnings.is_empty() {
                        out.adjusted.push(Adjusted {
                            object: object(),
                            adjustment: Adjustment::Clamped,
                            warnings: c.warnings,
                        });
                    }
                    out.events.push(Event::GatewayApplied {
                        cluster: self.name.clone(),
                        gateway: Some(g),
                    });
                    return;
                }
            }
            Err(e) => out.adjusted.push(Adjusted::failed(object(), &e)),
        }
        if listing {
            self.gateway_delete(out);
        }
    }

    /// The gateway Service was deleted.
    fn gateway_delete(&mut self, out: &mut Output) {
        if self.has_gateway {
            self.has_gateway = false;
            out.events.push(Event::GatewayApplied {
                cluster: self.name.clone(),
                gateway: None,
            });
        }
    }
}

fn display_name(ns: Option<&str>, name: Option<&str>) -> String {
    format!(
        "{}/{}",
        ns.unwrap_or("default"),
        name.unwrap_or("(no name)")
    )
}

fn meta_key(ns: Option<&str>, name: Option<&str>) -> Option<ObjectKey> {
    Some(ObjectKey::new(ns.unwrap_or("default"), name?))
}

fn meta_key_any(slice: &K8sSlice) -> Option<ObjectKey> {
    meta_key(
        slice.metadata.namespace.as_deref(),
        slice.metadata.name.as_deref(),
    )
}

/// Takes back a slice the model was sent (`sent` endpoints of it): the
/// forwarded counts drop and the model is told it is gone.
fn withdraw(
    forwarded: &mut (usize, usize),
    cluster: &Arc<str>,
    key: ObjectKey,
    sent: usize,
    out: &mut Output,
) {
    forwarded.0 -= 1;
    forwarded.1 -= sent;
    out.events.push(Event::SliceDeleted {
        cluster: cluster.clone(),
        key,
    });
}

#[cfg(test)]
mod tests;
