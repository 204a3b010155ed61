//! Cluster state: what every source has told us about every cluster, and the
//! events that change it.
//!
//! Owns the per-cluster maps of slim objects and the sync/health state.
//! Applying an event records which services it touched ([`Dirty`]) so the
//! index recomputes only those. It must not compute DNS records.
//!
//! The maps are persistent (`imbl::OrdMap`): cloning a [`ClusterSet`] is
//! O(1) and shares every node, and a later change copies only the nodes on
//! its path. The mirror controller reads such a clone per model batch
//! instead of a deep copy. A service's slices sit behind one `Arc`, so a
//! copied node copies pointers, not endpoints; changing a slice copies that
//! one service's slices (only while a clone shares them).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use imbl::{OrdMap, OrdSet};

use tracing::warn;

use super::objects::{ExportMode, Gateway, Import, Mirror, ObjectKey, Service, Slice};
use crate::vocab::name::check_cluster_name;
use crate::vocab::place::{Place, PlaceFrom};

/// Sync and health of one cluster, as the sources report it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Every object of the cluster has been listed at least once.
    pub synced: bool,
    /// When the cluster's watch broke, if it is broken now.
    pub broken_since: Option<Instant>,
    /// Result of the gateway probe: `None` until the first result, or when
    /// the cluster has no probe.
    pub gateway_alive: Option<bool>,
    /// The cluster did not sync within the sync timeout: readiness stops
    /// waiting for it (its undecidable names stay SERVFAIL).
    pub sync_given_up: bool,
}

/// A change reported by a source. The file source and the live watches emit
/// exactly these.
#[derive(Debug, Clone)]
pub enum Event {
    /// A cluster is known (linked, or its directory appeared). Not synced yet.
    ClusterUp {
        /// Cluster name.
        cluster: Arc<str>,
        /// This is the local cluster.
        local: bool,
    },
    /// A cluster is gone (unlinked, directory removed): all its data goes.
    ClusterDown {
        /// Cluster name.
        cluster: Arc<str>,
    },
    /// The cluster's sync or health changed.
    Health {
        /// Cluster name.
        cluster: Arc<str>,
        /// New state.
        health: Health,
    },
    /// An exported or federated Service was added or changed.
    ServiceApplied {
        /// Cluster name.
        cluster: Arc<str>,
        /// The service.
        service: Service,
    },
    /// A Service was deleted or is no longer exported.
    ServiceDeleted {
        /// Cluster name.
        cluster: Arc<str>,
        /// Its key.
        key: ObjectKey,
    },
    /// An EndpointSlice was added or changed.
    SliceApplied {
        /// Cluster name.
        cluster: Arc<str>,
        /// The slice.
        slice: Slice,
        /// When the change this version carries began on its cluster (its
        /// `endpoints.kubernetes.io/last-change-trigger-time`), for the
        /// propagation metric (kept by the runtime); `None` when there is
        /// none to measure. The model ignores it: it travels beside the
        /// slice, not in it, so a new trigger time alone never makes the
        /// slice compare different (no rebuild, no new snapshot) and is
        /// never held in the model's memory.
        trigger: Option<SystemTime>,
    },
    /// An EndpointSlice was deleted.
    SliceDeleted {
        /// Cluster name.
        cluster: Arc<str>,
        /// The slice's key.
        key: ObjectKey,
    },
    /// A mirror Service in the local cluster was added or changed.
    MirrorApplied {
        /// The local cluster's name.
        cluster: Arc<str>,
        /// The mirror.
        mirror: Mirror,
    },
    /// A mirror Service in the local cluster was deleted.
    MirrorDeleted {
        /// The local cluster's name.
        cluster: Arc<str>,
        /// Its key.
        key: ObjectKey,
    },
    /// The cluster's gateway changed (`None`: it has none).
    GatewayApplied {
        /// Cluster name.
        cluster: Arc<str>,
        /// The gateway.
        gateway: Option<Gateway>,
    },
    /// The cluster's MCS cluster id changed: the value of its ClusterProperty
    /// `cluster.clusterset.k8s.io`, already checked to be a DNS label
    /// (`None`: it has none, and its name is its id).
    ClusterIdApplied {
        /// Cluster name.
        cluster: Arc<str>,
        /// The id.
        id: Option<Arc<str>>,
    },
    /// Where the cluster is, as one source states it (docs/locality.md):
    /// `Configured` from the clusters file or the Link's annotations,
    /// `Property` from the cluster's own ClusterProperty objects. An unknown
    /// place withdraws what that source said.
    PlaceApplied {
        /// Cluster name.
        cluster: Arc<str>,
        /// Which source states it (`Unknown` is ignored).
        from: PlaceFrom,
        /// The place.
        place: Place,
    },
    /// A ServiceImport of the local cluster was added or changed.
    ImportApplied {
        /// The local cluster's name.
        cluster: Arc<str>,
        /// The import.
        import: Import,
    },
    /// A ServiceImport of the local cluster was deleted.
    ImportDeleted {
        /// The local cluster's name.
        cluster: Arc<str>,
        /// Its key.
        key: ObjectKey,
    },
    /// An `ExternalName` Service of the local cluster appeared (`present`)
    /// or went (`--mcs`): a ServiceExport of its name is invalid, not
    /// missing its Service (mcs-api's `InvalidServiceType`).
    ExternalNameApplied {
        /// The local cluster's name.
        cluster: Arc<str>,
        /// The Service.
        key: ObjectKey,
        /// It is there.
        present: bool,
    },
}

impl Event {
    /// The cluster the event is about.
    pub(crate) fn cluster(&self) -> &Arc<str> {
        match self {
            Self::ClusterUp { cluster, .. }
            | Self::ClusterDown { cluster }
            | Self::Health { cluster, .. }
            | Self::ServiceApplied { cluster, .. }
            | Self::ServiceDeleted { cluster, .. }
            | Self::SliceApplied { cluster, .. }
            | Self::SliceDeleted { cluster, .. }
            | Self::MirrorApplied { cluster, .. }
            | Self::MirrorDeleted { cluster, .. }
            | Self::GatewayApplied { cluster, .. }
            | Self::ClusterIdApplied { cluster, .. }
            | Self::PlaceApplied { cluster, .. }
            | Self::ImportApplied { cluster, .. }
            | Self::ImportDeleted { cluster, .. }
            | Self::ExternalNameApplied { cluster, .. } => cluster,
        }
    }
}

/// Everything known about one cluster.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    /// Cluster name.
    pub name: Arc<str>,
    /// Stable small id, used by the index to look up status per query. Ids
    /// follow the order the clusters were announced in, which makes them
    /// the trusted half of [`Seniority`].
    pub id: u32,
    /// The local cluster.
    pub local: bool,
    /// Exported or federated services.
    pub services: OrdMap<ObjectKey, Service>,
    /// EndpointSlices grouped by their service (namespace, service name),
    /// in slice-name order.
    pub slices: OrdMap<ObjectKey, SliceGroup>,
    /// Which service each slice belongs to, so a delete needs only the key.
    slice_service: OrdMap<ObjectKey, ObjectKey>,
    /// Mirror Services (local cluster only).
    pub mirrors: OrdMap<ObjectKey, Mirror>,
    /// The gateway.
    pub gateway: Option<Gateway>,
    /// Sync and health.
    pub health: Health,
    /// The MCS cluster id its ClusterProperty gives, if any.
    pub property_id: Option<Arc<str>>,
    /// ServiceImports (MCS; the local cluster's are the ones served).
    pub imports: OrdMap<ObjectKey, Import>,
    /// Its `ExternalName` Services (MCS, local cluster): held only to say
    /// why a ServiceExport of one is invalid.
    pub external_names: OrdSet<ObjectKey>,
    /// Its place as the operator configured it (clusters file, Link
    /// annotations).
    pub place: Place,
    /// Its place as its own ClusterProperty objects state it.
    pub property_place: Place,
}

/// The EndpointSlices of one service, sorted by slice name, in one shared
/// allocation of exactly their size.
///
/// Most services have one slice, and the model keeps one group per
/// service of every cluster: a `BTreeMap` allocates a node of eleven
/// slots for that one slice (about 1.1 KiB: 11.6 MiB of the live heap of
/// `cargo bench --bench fleet` at 50 clusters of 200 services, measured
/// with heaptrack), this about 100 B. A change copies the group's slices, which
/// are handles (`Arc`s); the map it replaced was copied whole too whenever
/// a snapshot still shared it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SliceGroup(Arc<[Slice]>);

impl SliceGroup {
    fn position(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|s| (*s.key.name).cmp(name))
    }

    /// The slice named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Slice> {
        self.position(name).ok().map(|i| &self.0[i])
    }

    /// The slices, in name order.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Slice> {
        self.0.iter()
    }

    /// Adds `slice`, or replaces the slice of its name: in place when
    /// nothing else shares the group (the usual change of a big service
    /// then copies no other slice), else in a new allocation.
    pub(crate) fn insert(&mut self, slice: Slice) {
        let at = self.position(&slice.key.name);
        if let (Ok(i), Some(slices)) = (at, Arc::get_mut(&mut self.0)) {
            slices[i] = slice;
            return;
        }
        let mut v = self.0.to_vec();
        match at {
            Ok(i) => v[i] = slice,
            Err(i) => v.insert(i, slice),
        }
        self.0 = v.into();
    }

    /// This group without the slice `name`; `None` when nothing is left.
    #[must_use]
    pub(crate) fn without(&self, name: &str) -> Option<Self> {
        let mut v = self.0.to_vec();
        if let Ok(i) = self.position(name) {
            v.remove(i);
        }
        (!v.is_empty()).then(|| Self(v.into()))
    }
}

/// Where a cluster's object stands when "the older one wins" across
/// clusters (docs/architecture.md, decision 7: name collisions, the MCS export that sets a
/// service's type and ports, the Service whose ports a federated mirror
/// takes). Lower is older.
///
/// A cluster's own `creationTimestamp`s are written by its API server, and
/// a compromised one writes 1970 there to win every comparison; so across
/// clusters only what this server trusts decides: the local cluster first,
/// then the order in which the clusters became known ([`Cluster::id`]: Links
/// by their own creationTimestamp in the local cluster, clusters-file
/// entries and zone directories in file order, a cluster linked later after
/// all of them). The remote timestamp decides only between two objects of
/// one cluster, which can then only reorder its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Seniority {
    /// Not the local cluster (false sorts first).
    remote: bool,
    /// The cluster's [`Cluster::id`].
    cluster: u32,
    /// The object's `creationTimestamp`, Unix seconds.
    created: i64,
}

impl Seniority {
    /// Older than any object.
    pub(crate) const FIRST: Self = Self {
        remote: false,
        cluster: 0,
        created: i64::MIN,
    };
    /// Newer than any object.
    pub(crate) const LAST: Self = Self {
        remote: true,
        cluster: u32::MAX,
        created: i64::MAX,
    };
}

impl Cluster {
    /// The seniority of an object of this cluster created at `created`
    /// (its `creationTimestamp`, Unix seconds).
    pub(crate) fn seniority(&self, created: i64) -> Seniority {
        Seniority {
            remote: !self.local,
            cluster: self.id,
            created,
        }
    }

    fn new(name: Arc<str>, id: u32, local: bool) -> Self {
        Self {
            name,
            id,
            local,
            services: OrdMap::new(),
            slices: OrdMap::new(),
            slice_service: OrdMap::new(),
            mirrors: OrdMap::new(),
            gateway: None,
            health: Health::default(),
            property_id: None,
            imports: OrdMap::new(),
            external_names: OrdSet::new(),
            place: Place::default(),
            property_place: Place::default(),
        }
    }

    /// The MCS cluster id it claims: its ClusterProperty's, else its name.
    pub(crate) fn mcs_id(&self) -> &Arc<str> {
        self.property_id.as_ref().unwrap_or(&self.name)
    }

    /// The slices of a service.
    pub(crate) fn slices_of(&self, service: &ObjectKey) -> impl Iterator<Item = &Slice> {
        self.slices
            .get(service)
            .into_iter()
            .flat_map(SliceGroup::iter)
    }

    /// Applies an event about one of this cluster's objects (`name` is the
    /// cluster's), recording what it touched into `dirty`.
    fn apply(&mut self, name: Arc<str>, event: Event, dirty: &mut Dirty) {
        match event {
            Event::ClusterUp { .. }
            | Event::ClusterDown { .. }
            | Event::ClusterIdApplied { .. }
            | Event::PlaceApplied { .. } => {}
            Event::ImportApplied { import, .. } => {
                if self.imports.get(&import.key) != Some(&import) {
                    let key = import.key.clone();
                    self.imports.insert(key.clone(), import);
                    dirty.services.insert((name, key));
                }
            }
            Event::ImportDeleted { key, .. } => {
                if self.imports.remove(&key).is_some() {
                    dirty.services.insert((name, key));
                }
            }
            Event::ExternalNameApplied { key, present, .. } => {
                let changed = if present {
                    self.external_names.insert(key.clone()).is_none()
                } else {
                    self.external_names.remove(&key).is_some()
                };
                if changed {
                    dirty.services.insert((name, key));
                }
            }
            Event::Health { health, .. } => {
                if self.health != health {
                    self.health = health;
                    dirty.health.insert(name);
                }
            }
            Event::ServiceApplied { service, .. } => {
                let key = service.key.clone();
                if self.services.get(&key) != Some(&service) {
                    self.services.insert(key.clone(), service);
                    dirty.services.insert((name, key));
                }
            }
            Event::ServiceDeleted { key, .. } => {
                if self.services.remove(&key).is_some() {
                    dirty.services.insert((name, key));
                }
            }
            Event::SliceApplied { slice, .. } => self.slice_applied(name, slice, dirty),
            Event::SliceDeleted { key, .. } => {
                if let Some(service) = remove_slice(self, &key) {
                    dirty.services.insert((name, service));
                }
            }
            Event::MirrorApplied { mirror, .. } => {
                let old = self.mirrors.insert(mirror.key.clone(), mirror.clone());
                if old.as_ref() != Some(&mirror) {
                    dirty
                        .services
                        .extend(old.iter().chain(Some(&mirror)).filter_map(mirror_target));
                }
            }
            Event::MirrorDeleted { key, .. } => {
                if let Some(target) = self.mirrors.remove(&key).as_ref().and_then(mirror_target) {
                    dirty.services.insert(target);
                }
            }
            Event::GatewayApplied { gateway, .. } => {
                if self.gateway != gateway {
                    self.gateway = gateway;
                    dirty.services.extend(
                        self.services
                            .values()
                            .filter(|s| s.export == Some(ExportMode::Gateway))
                            .map(|s| (name.clone(), s.key.clone())),
                    );
                }
            }
        }
    }

    fn slice_applied(&mut self, name: Arc<str>, slice: Slice, dirty: &mut Dirty) {
        let service = ObjectKey {
            namespace: slice.key.namespace.clone(),
            name: slice.service.clone(),
        };
        // A slice can move to another service only by being recreated, but
        // handle a relabel all the same.
        if let Some(old) = self.slice_service.get(&slice.key).cloned()
            && old != service
        {
            remove_slice(self, &slice.key);
            dirty.services.insert((name.clone(), old));
        }
        let group = self.slices.entry(service.clone()).or_default();
        if group.get(&slice.key.name) != Some(&slice) {
            let key = slice.key.clone();
            group.insert(slice);
            // Unchanged most of the time: no path copy for nothing.
            if self.slice_service.get(&key) != Some(&service) {
                self.slice_service.insert(key, service.clone());
            }
            dirty.services.insert((name, service));
        }
    }
}

/// What an applied batch of events touched.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Dirty {
    /// (cluster, service key) pairs whose records may have changed.
    pub services: BTreeSet<(Arc<str>, ObjectKey)>,
    /// Clusters whose sync or health state changed.
    pub health: BTreeSet<Arc<str>>,
    /// A cluster's MCS cluster id changed (who holds which id is decided
    /// again; the services it moves are in `services`).
    pub ids: bool,
}

impl Dirty {
    /// True when nothing changed.
    pub(crate) fn is_empty(&self) -> bool {
        self.services.is_empty() && self.health.is_empty() && !self.ids
    }
}

/// Every cluster, by name. Cloning is O(1) (see the module docs).
#[derive(Debug, Default, Clone)]
pub(crate) struct ClusterSet {
    clusters: OrdMap<Arc<str>, Cluster>,
    next_id: u32,
}

impl ClusterSet {
    /// An empty set.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A cluster by name.
    pub(crate) fn get(&self, name: &str) -> Option<&Cluster> {
        self.clusters.get(name)
    }

    /// Every cluster, by name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Cluster> {
        self.clusters.values()
    }

    /// Applies one event, recording what it touched into `dirty`.
    pub(crate) fn apply(&mut self, event: Event, dirty: &mut Dirty) {
        let name = event.cluster().clone();
        if let Err(e) = check_cluster_name(&name) {
            // Sources reject these first; this is the model's own guard.
            warn!(cluster = %name, error = %e, "ignoring an event for an invalid cluster");
            return;
        }
        match event {
            Event::ClusterUp { cluster, local } => self.cluster_up(cluster, local, dirty),
            Event::ClusterDown { cluster } => self.cluster_down(&cluster, dirty),
            Event::ClusterIdApplied { cluster, id } => self.cluster_id(&cluster, id, dirty),
            Event::PlaceApplied {
                cluster,
                from,
                place,
            } => self.place(&cluster, from, place, dirty),
            event => match self.clusters.get_mut(&name) {
                Some(c) => c.apply(name, event, dirty),
                None => warn!(cluster = %name, "event for a cluster that is not up; ignored"),
            },
        }
    }

    fn cluster_up(&mut self, cluster: Arc<str>, local: bool, dirty: &mut Dirty) {
        match self.clusters.get_mut(&cluster) {
            Some(c) if c.local != local => {
                c.local = local;
                dirty
                    .services
                    .extend(c.services.keys().map(|k| (cluster.clone(), k.clone())));
                self.every_federated(dirty);
            }
            Some(_) => {}
            None => {
                let id = self.next_id;
                self.next_id += 1;
                self.clusters
                    .insert(cluster.clone(), Cluster::new(cluster.clone(), id, local));
                dirty.health.insert(cluster);
                if local {
                    self.every_federated(dirty);
                }
            }
        }
    }

    /// A new id can move every MCS pod name of the cluster, and decide who
    /// of two clusters claiming one id keeps it: every MCS service is
    /// rebuilt (ids change rarely).
    fn cluster_id(&mut self, cluster: &Arc<str>, id: Option<Arc<str>>, dirty: &mut Dirty) {
        let Some(c) = self.clusters.get_mut(cluster) else {
            warn!(cluster = %cluster, "event for a cluster that is not up; ignored");
            return;
        };
        if c.property_id == id {
            return;
        }
        c.property_id = id;
        dirty.ids = true;
        for c in self.clusters.values() {
            dirty.services.extend(
                c.services
                    .values()
                    .filter(|s| s.mcs.is_some())
                    .map(|s| (c.name.clone(), s.key.clone())),
            );
        }
    }

    /// A new place moves the cluster's tier in every federated service it
    /// is a member of; the local cluster's moves every other cluster's too
    /// (same region or not), so then every federated service is rebuilt.
    fn place(&mut self, cluster: &Arc<str>, from: PlaceFrom, place: Place, dirty: &mut Dirty) {
        let Some(c) = self.clusters.get_mut(cluster) else {
            warn!(cluster = %cluster, "event for a cluster that is not up; ignored");
            return;
        };
        let slot = match from {
            PlaceFrom::Configured => &mut c.place,
            PlaceFrom::Property => &mut c.property_place,
            PlaceFrom::Unknown => return,
        };
        if *slot == place {
            return;
        }
        *slot = place;
        dirty.health.insert(cluster.clone());
        if c.local {
            self.every_federated(dirty);
        }
    }

    /// Marks every federated service dirty: the local cluster's place (or
    /// the local cluster itself) came or went, which moves the tier of
    /// every member of every one (decision 14).
    fn every_federated(&self, dirty: &mut Dirty) {
        for c in self.clusters.values() {
            dirty.services.extend(
                c.services
                    .values()
                    .filter(|s| s.federated || s.mcs_nearest)
                    .map(|s| (c.name.clone(), s.key.clone())),
            );
        }
    }

    /// The cluster that holds MCS cluster id `id`: of two claiming it, the
    /// senior one (the local cluster, else the one known first: the older
    /// Link, the clusters-file entry or directory listed first).
    pub(crate) fn mcs_id_holder(&self, id: &str) -> Option<&Cluster> {
        self.clusters
            .values()
            .filter(|c| &**c.mcs_id() == id)
            .min_by_key(|c| c.seniority(0))
    }

    fn cluster_down(&mut self, cluster: &Arc<str>, dirty: &mut Dirty) {
        if let Some(c) = self.clusters.remove(cluster) {
            if c.local {
                self.every_federated(dirty);
            }
            dirty
                .services
                .extend(c.services.keys().map(|k| (cluster.clone(), k.clone())));
            // The local cluster's mirrors answered for other clusters.
            dirty
                .services
                .extend(c.mirrors.values().filter_map(mirror_target));
            dirty.health.insert(cluster.clone());
        }
    }

    /// A mirror Service of the local cluster(s) by key.
    fn local_mirror(&self, key: &ObjectKey) -> Option<&Mirror> {
        self.clusters
            .values()
            .filter(|c| c.local)
            .find_map(|c| c.mirrors.get(key))
    }

    /// The local mirror Service for `<svc>-<cluster>` in `namespace`, if any.
    pub(crate) fn mirror_for(
        &self,
        namespace: &str,
        label: &str,
        cluster: &str,
    ) -> Option<&Mirror> {
        self.local_mirror(&ObjectKey::new(namespace, label))
            .filter(|m| &*m.cluster == cluster && m.headless_parent.is_none())
    }

    /// The local headless endpoint mirror `<host>-<cluster>` whose root is
    /// `parent`, if any.
    pub(crate) fn endpoint_mirror(
        &self,
        namespace: &str,
        parent: &str,
        host: &str,
        cluster: &str,
    ) -> Option<&Mirror> {
        self.local_mirror(&ObjectKey::new(namespace, &format!("{host}-{cluster}")))
            .filter(|m| &*m.cluster == cluster && m.headless_parent.as_deref() == Some(parent))
    }
}

fn remove_slice(c: &mut Cluster, key: &ObjectKey) -> Option<ObjectKey> {
    let service = c.slice_service.remove(key)?;
    if let Some(group) = c.slices.get_mut(&service)
        && group.get(&key.name).is_some()
    {
        match group.without(&key.name) {
            Some(rest) => *group = rest,
            None => {
                c.slices.remove(&service);
            }
        }
    }
    Some(service)
}

/// The (cluster, service) a mirror answers for: `<svc>-<cluster>` names
/// service `<svc>` of `<cluster>`; an endpoint mirror belongs to its root.
fn mirror_target(m: &Mirror) -> Option<(Arc<str>, ObjectKey)> {
    let root = m.headless_parent.as_deref().unwrap_or(&m.key.name);
    let svc = root.strip_suffix(&*m.cluster)?.strip_suffix('-')?;
    Some((m.cluster.clone(), ObjectKey::new(&m.key.namespace, svc)))
}
