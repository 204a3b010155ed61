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
//! cached object only when the uids match. A relist replaces everything.
//! Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::reconcile::Actual;
use super::{Kind, MANAGED_BY, MANAGED_BY_LABEL, ObjectRef};

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
pub struct Cache {
    actual: BTreeMap<ObjectRef, Actual>,
    /// The resourceVersion of the last watch event per key, to tell whether
    /// a write response is already known (a no-op write has no echo).
    watched: BTreeMap<ObjectRef, String>,
    echoes: BTreeMap<ObjectRef, Echo>,
    /// Keys of one kind seen during a relist in progress.
    relist: [Option<BTreeSet<ObjectRef>>; 3],
    /// Per kind: listed once, or not watched at all.
    listed: [bool; 3],
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
            relist: [None, None, None],
            listed: [false, false, true],
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

/// `(namespace, name)` of an object, as its key of kind `kind`.
pub fn object_ref(kind: Kind, v: &Value) -> Option<ObjectRef> {
    Some(ObjectRef {
        kind,
        namespace: v.pointer("/metadata/namespace")?.as_str()?.into(),
        name: v.pointer("/metadata/name")?.as_str()?.into(),
    })
}

/// Whether `v` carries our managed-by label.
pub fn is_ours(v: &Value) -> bool {
    v.pointer(&format!(
        "/metadata/labels/{}",
        MANAGED_BY_LABEL.replace('/', "~1")
    ))
    .and_then(Value::as_str)
        == Some(MANAGED_BY)
}

fn meta<'v>(v: &'v Value, field: &str) -> Option<&'v str> {
    v.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_str)
}

impl Cache {
    /// The objects of ours, by key.
    pub fn actual(&self) -> &BTreeMap<ObjectRef, Actual> {
        &self.actual
    }

    /// The Services whose state changed since the last call.
    pub fn take_touched_services(&mut self) -> BTreeSet<ObjectRef> {
        std::mem::take(&mut self.touched_services)
    }

    fn touch(&mut self, key: &ObjectRef) {
        if key.kind == Kind::Service {
            self.touched_services.insert(key.clone());
        }
    }

    /// Every watch has listed once: `actual` is complete.
    pub fn listed(&self) -> bool {
        self.listed.iter().all(|l| *l)
    }

    /// `kind` is watched too: `actual` is complete only once it has listed.
    pub fn expect(&mut self, kind: Kind) {
        self.listed[slot(kind)] = false;
    }

    /// A relist of `kind` begins.
    pub fn relist_begin(&mut self, kind: Kind) {
        self.relist[slot(kind)] = Some(BTreeSet::new());
    }

    /// One object of a relist of `kind`. Returns whether anything changed.
    pub fn relist_item(&mut self, kind: Kind, v: Value) -> bool {
        let Some(key) = object_ref(kind, &v) else {
            return false;
        };
        if let Some(seen) = self.relist[slot(kind)].as_mut() {
            seen.insert(key.clone());
        }
        // The list is at least as new as any write that completed before
        // it: what it says replaces any echo still awaited.
        self.echoes.remove(&key);
        self.take_watched(key, v)
    }

    /// The relist of `kind` is complete: what it did not list is gone.
    pub fn relist_done(&mut self, kind: Kind) -> bool {
        if let Some(seen) = self.relist[slot(kind)].take() {
            let gone = |k: &ObjectRef| k.kind == kind && !seen.contains(k);
            let removed: Vec<ObjectRef> = self.actual.keys().filter(|k| gone(k)).cloned().collect();
            for k in &removed {
                self.touch(k);
            }
            self.actual.retain(|k, _| !gone(k));
            self.watched.retain(|k, _| !gone(k));
            self.echoes.retain(|k, _| !gone(k));
        }
        self.listed[slot(kind)] = true;
        true
    }

    /// An ADDED or MODIFIED event. Returns whether it is news.
    pub fn applied(&mut self, kind: Kind, v: Value) -> bool {
        let Some(key) = object_ref(kind, &v) else {
            return false;
        };
        if !is_ours(&v) {
            self.watched.remove(&key);
            self.echoes.remove(&key);
            self.touch(&key);
            return self.actual.remove(&key).is_some();
        }
        let version = meta(&v, "resourceVersion").map(str::to_owned);
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
            Some(Echo::Gone(uid)) if uid.as_deref() == meta(&v, "uid") => false,
            // Someone created a new object of that name since.
            Some(Echo::Gone(_)) => {
                self.echoes.remove(&key);
                self.take_watched(key, v)
            }
            None => self.take_watched(key, v),
        }
    }

    /// A DELETED event. Returns whether it is news.
    pub fn deleted(&mut self, kind: Kind, v: &Value) -> bool {
        let Some(key) = object_ref(kind, v) else {
            return false;
        };
        let uid = meta(v, "uid");
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
        true
    }

    /// A write of ours returned `v` (create, apply, repair, or a GET after
    /// a conflict): it is the newest state of the key.
    pub fn wrote(&mut self, key: ObjectRef, v: Value) {
        let version = meta(&v, "resourceVersion").map(str::to_owned);
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
    pub fn removed(&mut self, key: &ObjectRef, uid: Option<String>) {
        self.touch(key);
        self.actual.remove(key);
        self.watched.remove(key);
        self.echoes.insert(key.clone(), Echo::Gone(uid));
    }

    fn take_watched(&mut self, key: ObjectRef, v: Value) -> bool {
        if let Some(rv) = meta(&v, "resourceVersion") {
            self.watched.insert(key.clone(), rv.to_owned());
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
