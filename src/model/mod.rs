//! The model: cluster state fed by sources, and the index derived from it.
//!
//! [`Model`] is owned by one writer (the runtime's model task, or `check` and
//! `dump` directly). Sources send [`Event`]s; the model applies them, updates
//! only the names they touched, and hands out immutable [`Snapshot`]s that
//! the query path and the mirror controller both read. It also holds what
//! a linked cluster may cost ([`budget`]).
//!
//! It must not do I/O, and it imports only [`crate::vocab`]: the DNS layer
//! reads it, never the other way round.

pub mod budget;
pub mod cluster;
pub mod entry;
pub mod index;
pub mod objects;
#[cfg(test)]
pub(crate) mod testing;

use std::sync::Arc;
use std::time::Instant;

pub use cluster::{Cluster, ClusterSet, Dirty, Event, Health};
pub use entry::{Entry, Origin, Pod};
pub use index::{ClusterStatus, Index, IndexStats, Settings, Snapshot};

/// Cluster state plus its index.
#[derive(Debug)]
pub struct Model {
    set: ClusterSet,
    index: Index,
    last_tick: Instant,
}

impl Model {
    /// An empty model.
    pub fn new(settings: Arc<Settings>) -> Self {
        Self {
            set: ClusterSet::new(),
            index: Index::new(settings),
            last_tick: Instant::now(),
        }
    }

    /// Applies a batch of events. Returns true when any name changed (a new
    /// snapshot should be published).
    pub fn apply(&mut self, events: impl IntoIterator<Item = Event>) -> bool {
        let mut dirty = Dirty::default();
        for event in events {
            self.set.apply(event, &mut dirty);
        }
        self.index.refresh(&self.set, &dirty, Instant::now())
    }

    /// Records that the source has announced every cluster it knows of, so
    /// a name no known cluster could hold does not exist. Returns true when
    /// a new snapshot should be published.
    pub fn clusters_known(&mut self) -> bool {
        self.index.set_known(&self.set)
    }

    /// Re-evaluates time-dependent state: a cluster whose watch has been
    /// broken for longer than the federated grace since the last tick leaves
    /// the federated names. Returns true when anything was rebuilt.
    pub fn tick(&mut self) -> bool {
        let now = Instant::now();
        let grace = self.index.settings().federated_grace;
        let mut dirty = Dirty::default();
        for c in self.set.iter() {
            let Some(since) = c.health.broken_since else {
                continue;
            };
            let expiry = since + grace;
            if self.last_tick < expiry && expiry <= now {
                dirty.health.insert(c.name.clone());
            }
        }
        self.last_tick = now;
        self.index.refresh(&self.set, &dirty, now)
    }

    /// Answers under new settings from now on: every name is rebuilt.
    pub fn set_settings(&mut self, settings: Arc<Settings>) {
        self.index
            .reset_settings(settings, &self.set, Instant::now());
    }

    /// The settings in use.
    pub fn settings(&self) -> &Arc<Settings> {
        self.index.settings()
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.index.snapshot()
    }

    /// The cluster state.
    pub fn clusters(&self) -> &ClusterSet {
        &self.set
    }
}
