//! The MCS part of one cluster's delivered state (issue 18, `--mcs`): the
//! ServiceExports joined to the Services they export (namespace sameness),
//! the cluster id from the ClusterProperty `cluster.clusterset.k8s.io`
//! (delivered by the ClusterProperty watch, [`super::property`]), and the
//! local cluster's ServiceImports.
//!
//! Owns the export side of the join: an export arriving or leaving
//! re-emits its Service through [`ClusterState::transition`], exactly as an
//! export-label change does (its slices start or stop with it); a Service
//! that only an export makes a member is held while the export exists, and
//! fetched with [`Action::ListService`] when the export comes after the
//! every-Service watch listed. A cluster whose API serves no ServiceExport
//! is fed an empty list by the shell, so nothing here waits for it. Like
//! the rest of the state it must not do I/O or read the clock.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service as K8sService;
use kube::api::DynamicObject;

use super::{Action, Adjusted, ClusterState, Output, display_name, meta_key};
use crate::model::Event;
use crate::model::objects::{Import, ObjectKey};
use crate::source::convert::mcs::{
    Export, McsObject, Property, convert_export, convert_import, from_dynamic,
};
use crate::source::convert::{Adjustment, ConvertError, Converted, Reason, Warning};
use crate::vocab::mcs::CLUSTER_ID_PROPERTY;

/// The MCS state of a cluster.
#[derive(Debug, Clone)]
pub(super) struct Mcs {
    /// The Service watch that delivers every Service (`None`: MCS is off).
    pub(super) all_services: Option<usize>,
    /// ServiceExports, by the key they export.
    pub(super) exports: HashMap<ObjectKey, Export>,
    pub(super) exports_listed: bool,
    /// Targeted Service lists in flight, and whether the every-Service
    /// watch delivered that Service since (then the list is older).
    pending: HashMap<ObjectKey, bool>,
    /// The cluster id the model was told (`None`: the cluster's name).
    id: Option<Arc<str>>,
    /// Why the ClusterProperty's value is not used, if it is not.
    id_problem: Option<String>,
    pub(super) imports: HashMap<ObjectKey, Import>,
    pub(super) imports_listed: bool,
    /// The local cluster's ExternalName Services (the model is told, so
    /// that a ServiceExport of one is `InvalidServiceType`).
    external_names: HashSet<ObjectKey>,
}

/// The MCS state, for status pages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McsReport {
    /// ServiceExports held.
    pub exports: usize,
    /// The cluster id from the ClusterProperty (`None`: the cluster's name).
    pub id: Option<Arc<str>>,
    /// Why the ClusterProperty's value is not the id.
    pub id_problem: Option<String>,
}

impl Mcs {
    /// MCS off: nothing is watched, nothing is waited for.
    pub(super) fn off() -> Self {
        Self {
            all_services: None,
            exports: HashMap::new(),
            exports_listed: true,
            pending: HashMap::new(),
            id: None,
            id_problem: None,
            imports: HashMap::new(),
            imports_listed: true,
            external_names: HashSet::new(),
        }
    }

    /// The state for new watches: what is held stays until they list.
    pub(super) fn restart(self) -> Self {
        Self {
            exports: self.exports,
            id: self.id,
            id_problem: self.id_problem,
            imports: self.imports,
            external_names: self.external_names,
            ..Self::off()
        }
    }

    /// Every MCS watch has listed, and no targeted Service list is out.
    pub(super) fn synced(&self) -> bool {
        self.exports_listed && self.imports_listed && self.pending.is_empty()
    }

    /// The ClusterProperty told something: an id, or why it is none.
    pub(super) fn has_id(&self) -> bool {
        self.id.is_some() || self.id_problem.is_some()
    }

    /// The every-Service watch delivered `key`: a list in flight for it is
    /// older than what the watch said.
    pub(super) fn touch(&mut self, key: &ObjectKey) {
        if let Some(touched) = self.pending.get_mut(key) {
            *touched = true;
        }
    }
}

/// `namespace/name` of a delivered object, for logs.
fn object_name(kind: &str, o: &DynamicObject) -> String {
    format!(
        "{kind} {}",
        display_name(o.metadata.namespace.as_deref(), o.metadata.name.as_deref())
    )
}

impl ClusterState {
    /// Turns MCS on: Service watch `all_services` delivers every Service,
    /// the ClusterProperty watch ([`Self::set_property_watch`]) brings the
    /// cluster id too, and sync waits for the ServiceExport watch (and, in
    /// the local cluster, ServiceImports). The shell feeds an empty list
    /// for a watch whose API the cluster does not serve.
    pub(crate) fn set_mcs(&mut self, all_services: usize) {
        self.mcs.all_services = Some(all_services);
        self.mcs.exports_listed = false;
        self.mcs.imports_listed = !self.local;
    }

    /// MCS is on: the cluster id is read.
    pub(super) fn mcs_on(&self) -> bool {
        self.mcs.all_services.is_some()
    }

    /// The ServiceExport watch has listed: the every-Service watch may
    /// start (its list then holds every member at once, with no targeted
    /// list per export).
    pub(crate) fn exports_listed(&self) -> bool {
        self.mcs.exports_listed
    }

    /// The MCS state, for status pages.
    pub(crate) fn mcs_report(&self) -> McsReport {
        McsReport {
            exports: self.mcs.exports.len(),
            id: self.mcs.id.clone(),
            id_problem: self.mcs.id_problem.clone(),
        }
    }

    /// The targeted list of [`Action::ListService`] for `key` returned
    /// `items`.
    pub(crate) fn listed_service(&mut self, key: &ObjectKey, items: Vec<K8sService>) -> Output {
        let mut out = Output::default();
        let touched = self.mcs.pending.remove(key);
        if touched == Some(false)
            && self.mcs.exports.contains_key(key)
            && let Some(w) = self.mcs.all_services
        {
            for svc in items.iter().filter(|s| {
                meta_key(s.metadata.namespace.as_deref(), s.metadata.name.as_deref()).as_ref()
                    == Some(key)
            }) {
                self.service_apply(w, svc, &mut out);
            }
        }
        self.check_synced();
        out
    }

    // ---- ServiceExports ---------------------------------------------------

    pub(super) fn export_apply(&mut self, o: &DynamicObject, out: &mut Output) {
        let export = match from_dynamic::<McsObject>(o).and_then(|e| convert_export(&e)) {
            Ok(Converted { value, warnings }) => {
                if !warnings.is_empty() {
                    out.adjusted.push(Adjusted {
                        object: object_name("ServiceExport", o),
                        adjustment: Adjustment::Clamped,
                        warnings,
                    });
                }
                value
            }
            Err(e) => {
                // Keep what was known of it, also through a relist.
                self.mcs_failed(object_name("ServiceExport", o), &e, out);
                return;
            }
        };
        let key = export.key.clone();
        if let Err(why) = self.trust.check_namespace(&key.namespace) {
            // Not ours to serve: as if it were not there (a relist under new
            // claims drops what the old ones let in).
            out.adjusted.push(Adjusted {
                object: object_name("ServiceExport", o),
                adjustment: Adjustment::Skipped,
                warnings: vec![Warning {
                    reason: Reason::NamespaceDenied,
                    text: format!(
                        "metadata.namespace: {} is {why}; not exported",
                        key.namespace
                    ),
                    more: 0,
                }],
            });
            self.export_gone(&key, out);
            return;
        }
        if self.mcs.exports.get(&key) == Some(&export) {
            return;
        }
        let before = self.served(&key);
        self.mcs.exports.insert(key.clone(), export);
        if self.services.contains_key(&key) {
            self.transition(&key, before, out);
        } else {
            self.want_service(key, out);
        }
    }

    /// The ServiceExport of `key` is gone: its Service stops being a
    /// member (and goes, unless Linkerd's labels export it).
    pub(super) fn export_gone(&mut self, key: &ObjectKey, out: &mut Output) {
        if !self.mcs.exports.contains_key(key) {
            return;
        }
        let before = self.served(key);
        self.mcs.exports.remove(key);
        self.mcs.pending.remove(key);
        self.transition(key, before, out);
        if self
            .services
            .get(key)
            .is_some_and(|h| matches!(h.kind, super::ServiceKind::Unexported(_)))
        {
            self.services.remove(key);
        }
        self.check_synced();
    }

    /// An export names a Service not held. The every-Service watch starts
    /// once the export watch has listed, and its list brings the Services
    /// of the exports known then; a later export's Service is asked for
    /// (the watch may have passed it before the export came).
    fn want_service(&mut self, key: ObjectKey, out: &mut Output) {
        if self.mcs.all_services.is_some()
            && self.mcs.exports_listed
            && !self.mcs.pending.contains_key(&key)
        {
            self.mcs.pending.insert(key.clone(), false);
            out.actions.push(Action::ListService(key));
        }
    }

    fn mcs_failed(&self, object: String, e: &ConvertError, out: &mut Output) {
        out.adjusted.push(Adjusted::failed(object, e));
    }

    // ---- The cluster id -----------------------------------------------------

    /// The ClusterProperty `cluster.clusterset.k8s.io` converted
    /// ([`super::property`] routes it here).
    pub(super) fn id_apply(
        &mut self,
        converted: Result<Option<Property>, ConvertError>,
        out: &mut Output,
    ) {
        match converted {
            Ok(Some(Property::ClusterId(id))) => {
                self.mcs.id_problem = None;
                self.set_id(Some(id.into()), out);
            }
            // Another property: not ours to read.
            Ok(_) => {}
            Err(e) => {
                // KEP-2149 requires a label: the cluster's name stays its id.
                self.mcs.id_problem = Some(e.to_string());
                self.mcs_failed(format!("ClusterProperty {CLUSTER_ID_PROPERTY}"), &e, out);
                self.set_id(None, out);
            }
        }
    }

    /// The cluster-id ClusterProperty is gone: the cluster's name is its
    /// id again.
    pub(super) fn id_gone(&mut self, out: &mut Output) {
        self.mcs.id_problem = None;
        self.set_id(None, out);
    }

    fn set_id(&mut self, id: Option<Arc<str>>, out: &mut Output) {
        if self.mcs.id != id {
            self.mcs.id.clone_from(&id);
            out.events.push(Event::ClusterIdApplied {
                cluster: self.name.clone(),
                id,
            });
        }
    }

    // ---- ExternalName Services (local cluster) -----------------------------

    /// Service `key`, delivered by watch `w`, is (`now`) or is no longer an
    /// ExternalName Service: the model is told when that changes. Only the
    /// local cluster's every-Service watch (`--mcs`) counts.
    pub(super) fn note_external_name(
        &mut self,
        w: usize,
        key: &ObjectKey,
        now: bool,
        out: &mut Output,
    ) {
        if !self.local || self.mcs.all_services != Some(w) {
            return;
        }
        let changed = if now {
            self.mcs.external_names.insert(key.clone())
        } else {
            self.mcs.external_names.remove(key)
        };
        if changed {
            out.events.push(Event::ExternalNameApplied {
                cluster: self.name.clone(),
                key: key.clone(),
                present: now,
            });
        }
    }

    /// The ExternalName Services watch `w` holds, for its relists.
    pub(super) fn external_names_of(&self, w: usize) -> impl Iterator<Item = &ObjectKey> {
        let ours = self.local && self.mcs.all_services == Some(w);
        self.mcs.external_names.iter().filter(move |_| ours)
    }

    // ---- ServiceImports (local cluster) -------------------------------------

    pub(super) fn import_apply(&mut self, o: &DynamicObject, out: &mut Output) {
        // One that does not convert keeps its last good version.
        match from_dynamic::<McsObject>(o).and_then(|i| convert_import(&i, &self.trust)) {
            Ok(Converted {
                value: import,
                warnings,
            }) => {
                if !warnings.is_empty() {
                    out.adjusted.push(Adjusted {
                        object: object_name("ServiceImport", o),
                        adjustment: Adjustment::Clamped,
                        warnings,
                    });
                }
                if self.mcs.imports.get(&import.key) != Some(&import) {
                    self.mcs.imports.insert(import.key.clone(), import.clone());
                    out.events.push(Event::ImportApplied {
                        cluster: self.name.clone(),
                        import,
                    });
                }
            }
            Err(e) => self.mcs_failed(object_name("ServiceImport", o), &e, out),
        }
    }

    pub(super) fn import_gone(&mut self, key: ObjectKey, out: &mut Output) {
        if self.mcs.imports.remove(&key).is_some() {
            out.events.push(Event::ImportDeleted {
                cluster: self.name.clone(),
                key,
            });
        }
    }
}
