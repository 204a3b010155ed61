//! The one adapter from a watch to whatever holds its objects: an
//! [`Index`] says how to apply an object and how to forget one by key, and
//! [`Relist`] turns kube-runtime's watcher events into those calls, doing
//! the relist bookkeeping (which keys a new list did not bring back) once
//! for every watch, the way kubert's `index::namespaced` does for linkerd's
//! policy controller.
//!
//! A relist is streamed, not buffered: each listed object is applied as it
//! arrives (a cluster's EndpointSlices can be hundreds of megabytes as API
//! objects, and an index keeps only what it converts them to), and only the
//! listed keys are remembered until the list ends. The index itself says
//! which keys it holds, so no second copy of them is kept between relists.
//!
//! Pure: no I/O, no clock. It must not interpret objects beyond their key.

use std::collections::HashSet;
use std::hash::Hash;

use kube::runtime::watcher::Event;

/// What a watch feeds: the objects of one resource, by key.
pub(crate) trait Index<K> {
    /// How objects are told apart (usually namespace and name).
    type Key: Eq + Hash + Clone;

    /// The key of `obj`; `None` for an object without one, which is then
    /// neither applied nor deleted.
    fn key(&self, obj: &K) -> Option<Self::Key>;

    /// `obj` exists: new, or changed (or listed by a relist, unless
    /// [`Index::apply_listed`] says otherwise).
    fn apply(&mut self, obj: K);

    /// `obj` was listed by a relist. The same as [`Index::apply`] unless
    /// the index orders the watch against another input: a list is at
    /// least as new as anything that completed before it (the mirror's
    /// cache drops the echoes of its own writes it still awaits).
    fn apply_listed(&mut self, obj: K) {
        self.apply(obj);
    }

    /// The object `key` is gone: deleted, or not brought back by a relist.
    fn delete(&mut self, key: &Self::Key, obj: Option<K>);

    /// Every key this index holds from the watch: a relist deletes those it
    /// does not bring back.
    fn keys(&self) -> Vec<Self::Key>;

    /// Whether the index holds `key` from the watch (one of [`Index::keys`]).
    /// A relist remembers only the listed keys the index holds after
    /// applying them: a watch that sees far more objects than the index
    /// keeps (every EndpointSlice of a cluster, of which only exported
    /// services' are held) then costs no memory for the others. The default
    /// remembers every listed key.
    fn holds(&self, _key: &Self::Key) -> bool {
        true
    }

    /// A relist ended (after its deletes): the index is complete.
    fn listed(&mut self) {}
}

/// The relist state of one watch.
#[derive(Debug, Clone)]
pub(crate) struct Relist<Key> {
    /// The keys a relist under way has brought so far.
    seen: Option<HashSet<Key>>,
    listed: bool,
}

impl<Key> Default for Relist<Key> {
    fn default() -> Self {
        Self {
            seen: None,
            listed: false,
        }
    }
}

/// What one event did to the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing the index's readers need to look at yet (a relist began, or
    /// an object arrived within a relist).
    Pending,
    /// The index changed, or may have.
    Changed,
    /// A relist ended: the index is complete again.
    Listed,
}

impl<Key: Eq + Hash + Clone> Relist<Key> {
    /// Applies one watcher event to `index`.
    pub(crate) fn handle<K, I>(&mut self, index: &mut I, event: Event<K>) -> Outcome
    where
        I: Index<K, Key = Key>,
    {
        match event {
            Event::Init => {
                self.seen = Some(HashSet::new());
                Outcome::Pending
            }
            Event::InitApply(obj) => {
                if let Some(key) = index.key(&obj) {
                    index.apply_listed(obj);
                    if let Some(seen) = self.seen.as_mut()
                        && index.holds(&key)
                    {
                        seen.insert(key);
                    }
                }
                Outcome::Pending
            }
            Event::InitDone => {
                self.end(index);
                Outcome::Listed
            }
            Event::Apply(obj) => {
                if index.key(&obj).is_some() {
                    index.apply(obj);
                }
                Outcome::Changed
            }
            Event::Delete(obj) => {
                if let Some(key) = index.key(&obj) {
                    index.delete(&key, Some(obj));
                }
                Outcome::Changed
            }
        }
    }

    /// Ends a relist without a list (the watch reset with nothing to list,
    /// for instance): every key held is gone unless a relist under way
    /// brought it.
    pub(crate) fn end<K, I>(&mut self, index: &mut I)
    where
        I: Index<K, Key = Key>,
    {
        let seen = self.seen.take().unwrap_or_default();
        for key in index.keys() {
            if !seen.contains(&key) {
                index.delete(&key, None);
            }
        }
        self.listed = true;
        index.listed();
    }

    /// A relist is under way.
    #[cfg(test)]
    pub(crate) fn relisting(&self) -> bool {
        self.seen.is_some()
    }

    /// How many listed keys a relist under way remembers.
    #[cfg(test)]
    pub(crate) fn remembered(&self) -> usize {
        self.seen.as_ref().map_or(0, HashSet::len)
    }

    /// The watch has listed at least once.
    pub(crate) fn listed(&self) -> bool {
        self.listed
    }
}

#[cfg(test)]
mod tests;
