//! Desired vs actual: the writes that bring the local cluster to the desired
//! mirror objects, as a pure plan.
//!
//! Owns the rules of safety: only objects carrying our managed-by label are
//! ever updated or deleted (the caller lists exactly those as `actual`); an
//! object we want but that exists without our label is someone else's and is
//! left alone; an object is rewritten only when one of the fields we own
//! differs (so a resync with no change writes nothing, and a manual edit of
//! our fields is repaired). It must not do I/O.

use std::collections::{BTreeMap, BTreeSet};

use super::{Desired, Object, ObjectRef};

mod owned;
pub(crate) use owned::contains;

/// An object of ours as the API holds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Actual {
    /// The whole object as listed.
    pub object: Object,
}

impl Actual {
    /// `metadata.uid`.
    pub(crate) fn uid(&self) -> Option<&str> {
        self.object.meta().uid.as_deref()
    }

    /// The cluster it mirrors ([`super::CLUSTER_LABEL`]); `None` for a
    /// federated object.
    pub(crate) fn cluster(&self) -> Option<&str> {
        self.object.label(super::CLUSTER_LABEL)
    }

    /// `metadata.resourceVersion`.
    pub(crate) fn resource_version(&self) -> Option<&str> {
        self.object.meta().resource_version.as_deref()
    }
}

/// What [`plan`] asks its `hold` about an object, desired or actual.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Subject<'a> {
    /// The linked cluster it mirrors (`None`: a federated object).
    pub cluster: Option<&'a str>,
    /// Its namespace.
    pub namespace: &'a str,
    /// The mirror Service it belongs to: a Service's own name (a headless
    /// endpoint mirror's root), an EndpointSlice's `kubernetes.io/service-name`.
    pub service: Option<&'a str>,
}

impl<'a> Subject<'a> {
    fn of(key: &'a ObjectRef, object: &'a Object, cluster: Option<&'a str>) -> Self {
        let label = |name: &str| object.label(name);
        let service = match key.kind {
            super::Kind::Service => {
                label(crate::vocab::linkerd::LABEL_HEADLESS_PARENT).or(Some(&*key.name))
            }
            super::Kind::EndpointSlice => label(crate::vocab::linkerd::LABEL_SERVICE_NAME),
            // Held with its derived Service, whose name is not stored on it.
            super::Kind::ServiceImport => None,
        };
        Self {
            cluster,
            namespace: &key.namespace,
            service,
        }
    }
}

/// One write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    /// Create a new object (POST: fails if a same-named object exists, so
    /// someone else's object is never taken over).
    Create(Desired),
    /// Server-side apply over an object of ours whose fields drifted.
    Apply(Desired),
    /// Delete an object of ours nobody wants any more, only if it is still
    /// the one we listed (uid and resourceVersion preconditions).
    Delete {
        /// Which.
        key: ObjectRef,
        /// Its uid.
        uid: Option<String>,
        /// Its resourceVersion.
        resource_version: Option<String>,
    },
}

impl Op {
    /// The object the write is about.
    pub(crate) fn key(&self) -> &ObjectRef {
        match self {
            Self::Create(d) | Self::Apply(d) => &d.key,
            Self::Delete { key, .. } => key,
        }
    }
}

/// What to write. `unowned` lists wanted objects that exist without our
/// label (found by a failed create): they are not written. `hold` says
/// which objects must be neither written nor deleted for now: those whose
/// desired state is not known yet because a cluster has not synced, or a
/// service its cluster's budget refused (see [`Hold`]).
pub(crate) fn plan<'d>(
    desired: impl IntoIterator<Item = &'d Desired>,
    actual: &BTreeMap<ObjectRef, Actual>,
    unowned: &BTreeSet<ObjectRef>,
    hold: impl Fn(Subject<'_>) -> bool,
) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut wanted = BTreeSet::new();
    let blocked = blocked(unowned);
    for d in desired.into_iter().filter(|d| !is_blocked(d, &blocked)) {
        wanted.insert(&d.key);
        plan_one(d, actual, unowned, &hold, &mut ops);
    }
    for (key, a) in actual {
        if !wanted.contains(key) {
            plan_delete(key, a, &hold, &mut ops);
        }
    }
    ops
}

/// What to write for the objects `keys` alone, `desired` holding every
/// desired object: the same decisions as [`plan`] for those keys, for a
/// model batch that changed only them. What exists of ours outside `keys`
/// is not looked at (a full pass deletes leftovers).
pub(crate) fn plan_some(
    desired: &BTreeMap<ObjectRef, Desired>,
    keys: &BTreeSet<ObjectRef>,
    actual: &BTreeMap<ObjectRef, Actual>,
    unowned: &BTreeSet<ObjectRef>,
    hold: impl Fn(Subject<'_>) -> bool,
) -> Vec<Op> {
    let mut ops = Vec::new();
    let blocked = blocked(unowned);
    for key in keys {
        let want = desired.get(key).filter(|d| !is_blocked(d, &blocked));
        match (want, actual.get(key)) {
            (Some(d), _) => plan_one(d, actual, unowned, &hold, &mut ops),
            (None, Some(a)) => plan_delete(key, a, &hold, &mut ops),
            (None, None) => {}
        }
    }
    ops
}

/// The slices of a Service someone else owns would feed their Service
/// (by `kubernetes.io/service-name`): they are not wanted either.
fn blocked(unowned: &BTreeSet<ObjectRef>) -> BTreeSet<(&str, &str)> {
    unowned
        .iter()
        .filter(|k| k.kind == super::Kind::Service)
        .map(|k| (&*k.namespace, &*k.name))
        .collect()
}

/// A slice of a Service someone else owns: not wanted.
fn is_blocked(d: &Desired, blocked: &BTreeSet<(&str, &str)>) -> bool {
    d.key.kind == super::Kind::EndpointSlice
        && d.object
            .label(crate::vocab::linkerd::LABEL_SERVICE_NAME)
            .is_some_and(|svc| blocked.contains(&(&*d.key.namespace, svc)))
}

/// The writes for one wanted object.
fn plan_one(
    d: &Desired,
    actual: &BTreeMap<ObjectRef, Actual>,
    unowned: &BTreeSet<ObjectRef>,
    hold: &impl Fn(Subject<'_>) -> bool,
    ops: &mut Vec<Op>,
) {
    if hold(Subject::of(&d.key, &d.object, d.cluster.as_deref())) {
        return;
    }
    let d = &stamped(d);
    match actual.get(&d.key) {
        None if unowned.contains(&d.key) => {}
        None => ops.push(Op::Create(d.clone())),
        Some(a) if headless(&a.object) != headless(&d.object) => {
            // `spec.clusterIP` is immutable: headless ↔ ClusterIP is a
            // new object.
            ops.push(Op::Delete {
                key: d.key.clone(),
                uid: a.uid().map(str::to_owned),
                resource_version: a.resource_version().map(str::to_owned),
            });
            ops.push(Op::Create(d.clone()));
        }
        Some(a) if !contains(&a.object, &d.object) => ops.push(Op::Apply(d.clone())),
        Some(_) => {}
    }
}

/// An object of ours nobody wants: deleted unless held.
fn plan_delete(
    key: &ObjectRef,
    a: &Actual,
    hold: &impl Fn(Subject<'_>) -> bool,
    ops: &mut Vec<Op>,
) {
    if !hold(Subject::of(key, &a.object, a.cluster())) {
        ops.push(Op::Delete {
            key: key.clone(),
            uid: a.uid().map(str::to_owned),
            resource_version: a.resource_version().map(str::to_owned),
        });
    }
}

/// `d` with [`HASH_ANNOTATION`] set to a hash of its body: a field we stop
/// writing shows as a changed hash, which the field comparison alone would
/// not see. The body hashed is the JSON the API is sent, its keys sorted
/// (`serde_json`'s map), so the hash is the same whatever order a typed
/// object writes its fields in.
pub(crate) fn stamped(d: &Desired) -> Desired {
    let mut d = d.clone();
    let text = d
        .object
        .to_json()
        .ok()
        .and_then(|v| serde_json::to_string(&v).ok())
        .unwrap_or_default();
    let hash = format!("{:016x}", fnv1a(text.as_bytes()));
    d.object
        .meta_mut()
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(HASH_ANNOTATION.to_owned(), hash);
    d
}

/// FNV-1a, 64 bits: stable across releases, unlike the std hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A Service with `clusterIP: None`.
fn headless(o: &Object) -> bool {
    match o {
        Object::Service(s) => s.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None"),
        Object::EndpointSlice(_) | Object::ServiceImport { .. } => false,
    }
}

/// Which objects are left as they are. A cluster's own objects are never
/// written while it has not synced (it may have been unreachable since we
/// started: never delete because of that). Federated objects, which hold
/// every member's pods, wait while any cluster is still expected to sync;
/// once the sync timeout gave up on it, they follow the members that
/// answer, as the DNS names do. The objects of a service its cluster's
/// budget refused (and the federated objects it is a member of) are
/// neither written nor deleted: we chose not to hold its endpoints, which
/// says nothing about what the mirrors should be.
#[derive(Debug, Default, Clone)]
pub(crate) struct Hold {
    /// Clusters that have not synced.
    pub unsynced: BTreeSet<std::sync::Arc<str>>,
    /// Some of them are still within the sync timeout.
    pub waiting: bool,
    /// Mirror Services (namespace, name) of refused services
    /// (`super::desired::held_by_budget`).
    pub refused: BTreeSet<(std::sync::Arc<str>, std::sync::Arc<str>)>,
}

impl Hold {
    /// Whether `object` is left as it is.
    pub(crate) fn holds(&self, object: Subject<'_>) -> bool {
        let by_cluster = match object.cluster {
            Some(c) => self.unsynced.contains(c),
            None => self.waiting,
        };
        by_cluster
            || object.service.is_some_and(|s| {
                self.refused
                    .iter()
                    .any(|(ns, name)| **ns == *object.namespace && **name == *s)
            })
    }
}

/// Annotation with a hash of what we last applied.
pub(crate) const HASH_ANNOTATION: &str = "clusterset-dns.io/applied-hash";

#[cfg(test)]
mod tests;
