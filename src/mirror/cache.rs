//! What exists of ours in the local cluster, as the mirror's watches and its
//! own write responses tell it: the `actual` side of
//! [`super::reconcile::plan`].
//!
//! Owns the rule that orders the two inputs without ever parsing or
//! comparing resourceVersions as numbers (API conventions make them opaque:
//! equality is the only comparison allowed). A watch delivers one resource's
//! events in order, so its latest event for a key wins. A write response is
//! newer than every watch event that has not yet brought the same
//! resourceVersion: until that echo arrives, the response stands and older
//! events for the key are ignored. A delete settles by uid: only an event of
//! the object we deleted can be its echo, and a DELETED event removes the
//! cached object only when the uids match. A relist replaces everything of
//! its kind ([`crate::k8s::index::Relist`] does the bookkeeping).
//! Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use kube::runtime::watcher::Event;

use super::reconcile::Actual;
use super::{Kind, MANAGED_BY, MANAGED_BY_LABEL, Object, ObjectRef};
use crate::k8s::index::{Index, Relist};

/// What the cache waits for from the watch before it trusts it again for a
/// key (set by our own writes).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Echo {
    /// The resourceVersion a write of ours returned.
    Version(String),
    /// The DELETED event of the object (by uid) that we deleted.
    Gone(Option<String>),
}

/// The objects of ours that exist, by key.
#[derive(Debug)]
pub(crate) struct Cache {
    actual: BTreeMap<ObjectRef, Actual>,
    /// The resourceVersion of the last watch event per key, to tell whether
    /// a write response is already known (a no-op write has no echo).
    watched: BTreeMap<ObjectRef, String>,
    echoes: BTreeMap<ObjectRef, Echo>,
    /// Per kind: the relist bookkeeping of its watch
    /// ([`crate::k8s::index::Relist`]).
    relists: [Relist<ObjectRef>; 3],
    /// Per kind: watched at all.
    expected: [bool; 3],
    /// Services whose entry in `actual` changed since
    /// [`Cache::take_touched_services`]: what can move a derived Service's
    /// ClusterIP, found without a look at every Service.
    touched_services: BTreeSet<ObjectRef>,
}

impl Default for Cache {
    /// Services and EndpointSlices are watched; ServiceImports only after
    /// [`Cache::expect`].
    fn default() -> Self {
        Self {
            actual: BTreeMap::new(),
            watched: BTreeMap::new(),
            echoes: BTreeMap::new(),
            relists: Default::default(),
            expected: [true, true, false],
            touched_services: BTreeSet::new(),
        }
    }
}

fn slot(kind: Kind) -> usize {
    match kind {
        Kind::Service => 0,
        Kind::EndpointSlice => 1,
        Kind::ServiceImport => 2,
    }
}

/// `(namespace, name)` of an object, as its key.
pub(crate) fn object_ref(o: &Object) -> Option<ObjectRef> {
    let meta = o.meta();
    Some(ObjectRef {
        kind: o.kind(),
        namespace: meta.namespace.as_deref()?.into(),
        name: meta.name.as_deref()?.into(),
    })
}

/// Whether `o` carries our managed-by label.
pub(crate) fn is_ours(o: &Object) -> bool {
    o.label(MANAGED_BY_LABEL) == Some(MANAGED_BY)
}

/// The cache as the [`Index`] of the watch of one kind: what a relist of
/// that kind did not bring back is gone, and whether an event was news is
/// kept for [`Cache::on_event`].
struct OfKind<'c> {
    cache: &'c mut Cache,
    kind: Kind,
    news: bool,
}

impl Index<Object> for OfKind<'_> {
    type Key = ObjectRef;

    fn key(&self, obj: &Object) -> Option<ObjectRef> {
        object_ref(obj).filter(|k| k.kind == self.kind)
    }

    fn apply(&mut self, obj: Object) {
        self.news = self.cache.applied(obj);
    }

    fn apply_listed(&mut self, obj: Object) {
        self.cache.relisted(obj);
    }

    fn delete(&mut self, key: &ObjectRef, obj: Option<Object>) {
        self.news = true;
        match obj {
            Some(obj) => self.cache.deleted(&obj),
            None => self.cache.gone(key),
        }
    }

    fn keys(&self) -> Vec<ObjectRef> {
        // Everything held of the kind, echoes awaited included: a relist
        // settles them all.
        let of_kind = |k: &&ObjectRef| k.kind == self.kind;
        let c = &self.cache;
        let all: BTreeSet<&ObjectRef> = (c.actual.keys().filter(of_kind))
            .chain(c.watched.keys().filter(of_kind))
            .chain(c.echoes.keys().filter(of_kind))
            .collect();
        all.into_iter().cloned().collect()
    }
}

impl Cache {
    /// The objects of ours, by key.
    pub(crate) fn actual(&self) -> &BTreeMap<ObjectRef, Actual> {
        &self.actual
    }

    /// The Services whose state changed since the last call.
    pub(crate) fn take_touched_services(&mut self) -> BTreeSet<ObjectRef> {
        std::mem::take(&mut self.touched_services)
    }

    fn touch(&mut self, key: &ObjectRef) {
        if key.kind == Kind::Service {
            self.touched_services.insert(key.clone());
        }
    }

    /// Every watch has listed once: `actual` is complete.
    pub(crate) fn listed(&self) -> bool {
        self.expected
            .iter()
            .zip(&self.relists)
            .all(|(expected, relist)| !expected || relist.listed())
    }

    /// `kind` is watched too: `actual` is complete only once it has listed.
    pub(crate) fn expect(&mut self, kind: Kind) {
        self.expected[slot(kind)] = true;
    }

    /// One event of the watch of `kind`. Returns whether it is news: a
    /// relist's objects and its end are; an event is unless it is the echo
    /// of our own write or older than it.
    pub(crate) fn on_event(&mut self, kind: Kind, event: Event<Object>) -> bool {
        let fixed = match &event {
            Event::Init => Some(false),
            Event::InitApply(_) | Event::InitDone => Some(true),
            Event::Apply(_) | Event::Delete(_) => None,
        };
        let mut relist = std::mem::take(&mut self.relists[slot(kind)]);
        let mut index = OfKind {
            cache: self,
            kind,
            news: false,
        };
        relist.handle(&mut index, event);
        let news = index.news;
        self.relists[slot(kind)] = relist;
        fixed.unwrap_or(news)
    }

    /// One object of a relist.
    fn relisted(&mut self, o: Object) {
        let Some(key) = object_ref(&o) else { return };
        // The list is at least as new as any write that completed before
        // it: what it says replaces any echo still awaited.
        self.echoes.remove(&key);
        self.take_watched(key, o);
    }

    /// `key` was not brought back by a relist: gone.
    fn gone(&mut self, key: &ObjectRef) {
        if self.actual.remove(key).is_some() {
            self.touch(key);
        }
        self.watched.remove(key);
        self.echoes.remove(key);
    }

    /// An ADDED or MODIFIED event. Returns whether it is news.
    fn applied(&mut self, v: Object) -> bool {
        let Some(key) = object_ref(&v) else {
            return false;
        };
        if !is_ours(&v) {
            self.watched.remove(&key);
            self.echoes.remove(&key);
            self.touch(&key);
            return self.actual.remove(&key).is_some();
        }
        let version = v.meta().resource_version.clone();
        match self.echoes.get(&key) {
            // Our own write coming back: the cache has it already.
            Some(Echo::Version(rv)) if version.as_ref() == Some(rv) => {
                self.echoes.remove(&key);
                if let Some(rv) = version {
                    self.watched.insert(key, rv);
                }
                false
            }
            // Older than our write (the watch has not reached it yet).
            Some(Echo::Version(_)) => false,
            // The object we deleted, before its DELETED event.
            Some(Echo::Gone(uid)) if *uid == v.meta().uid => false,
            // Someone created a new object of that name since.
            Some(Echo::Gone(_)) => {
                self.echoes.remove(&key);
                self.take_watched(key, v)
            }
            None => self.take_watched(key, v),
        }
    }

    /// A DELETED event.
    fn deleted(&mut self, v: &Object) {
        let Some(key) = object_ref(v) else {
            return;
        };
        let uid = v.meta().uid.as_deref();
        if let Some(Echo::Gone(gone)) = self.echoes.get(&key)
            && gone.as_deref() == uid
        {
            self.echoes.remove(&key);
        }
        // The object we hold, however recently written, ends with its own
        // DELETED event; one of an earlier object of that name (deleted
        // before we created ours) says nothing about ours.
        let same = self
            .actual
            .get(&key)
            .is_some_and(|a| uid.is_none() || a.uid().is_none() || a.uid() == uid);
        if same {
            self.watched.remove(&key);
            self.echoes.remove(&key);
            self.touch(&key);
            self.actual.remove(&key);
        }
    }

    /// A write of ours returned `v` (create, apply, repair, or a GET after
    /// a conflict): it is the newest state of the key.
    pub(crate) fn wrote(&mut self, key: ObjectRef, v: Object) {
        let version = v.meta().resource_version.clone();
        match version {
            // Already delivered by the watch (a write that changed nothing
            // has no event): nothing to wait for.
            Some(rv) if self.watched.get(&key) == Some(&rv) => {
                self.echoes.remove(&key);
            }
            Some(rv) => {
                self.echoes.insert(key.clone(), Echo::Version(rv));
            }
            None => {
                self.echoes.remove(&key);
            }
        }
        self.touch(&key);
        self.actual.insert(key, Actual { object: v });
    }

    /// We deleted (or found already gone) the object `uid` of `key`.
    pub(crate) fn removed(&mut self, key: &ObjectRef, uid: Option<String>) {
        self.touch(key);
        self.actual.remove(key);
        self.watched.remove(key);
        self.echoes.insert(key.clone(), Echo::Gone(uid));
    }

    fn take_watched(&mut self, key: ObjectRef, v: Object) -> bool {
        if let Some(rv) = &v.meta().resource_version {
            self.watched.insert(key.clone(), rv.clone());
        }
        let new = Actual { object: v };
        if self.actual.get(&key) == Some(&new) {
            return false;
        }
        self.touch(&key);
        self.actual.insert(key, new);
        true
    }
}

#[cfg(test)]
mod tests;
