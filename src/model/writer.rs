//! The top of the model: [`Model`] ties the cluster state to the index,
//! applies events in batches, ticks, and publishes snapshots. Owned by one
//! writer (the runtime's model task, or `check` and `dump`); it must not do
//! I/O or read a clock (it is told `now`).

use std::sync::Arc;
use std::time::Instant;

use super::cluster::{ClusterSet, Dirty, Event};
use super::epoch::Epoch;
use super::index::{Index, Settings, Snapshot};

/// Cluster state plus its index.
#[derive(Debug)]
pub struct Model {
    set: ClusterSet,
    index: Index,
    last_tick: Instant,
    /// What changed since [`Model::take_changes`], when someone reads it
    /// ([`Model::track_changes`]); `None`: nobody does, nothing is kept.
    changes: Option<Dirty>,
}

impl Model {
    /// An empty model, started at `epoch` (its serials begin at the
    /// epoch's Unix seconds).
    pub fn new(settings: Arc<Settings>, epoch: Epoch) -> Self {
        Self {
            set: ClusterSet::new(),
            index: Index::new(settings, epoch),
            last_tick: epoch.at(),
            changes: None,
        }
    }

    /// From now on, keeps what every batch and tick touched until
    /// [`Model::take_changes`] (the mirror controller recomputes only that).
    pub fn track_changes(&mut self) {
        self.changes.get_or_insert_with(Dirty::default);
    }

    /// What changed since the last call (empty unless tracking).
    pub(crate) fn take_changes(&mut self) -> Dirty {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn keep(&mut self, dirty: &Dirty) {
        if let Some(c) = &mut self.changes {
            c.services.extend(dirty.services.iter().cloned());
            c.health.extend(dirty.health.iter().cloned());
            c.ids |= dirty.ids;
        }
    }

    /// Applies a batch of events at `now`. Returns true when any name
    /// changed (a new snapshot should be published).
    pub fn apply(&mut self, events: impl IntoIterator<Item = Event>, now: Instant) -> bool {
        let mut dirty = Dirty::default();
        for event in events {
            self.set.apply(event, &mut dirty);
        }
        self.keep(&dirty);
        self.index.refresh(&self.set, &dirty, now)
    }

    /// Records, at `now`, that the source has announced every cluster it
    /// knows of, so a name no known cluster could hold does not exist.
    /// Returns true when a new snapshot should be published.
    pub fn clusters_known(&mut self, now: Instant) -> bool {
        self.index.set_known(&self.set, now)
    }

    /// Re-evaluates time-dependent state at `now`: a cluster whose watch
    /// has been broken for longer than the federated grace since the last
    /// tick leaves the federated names. Returns true when anything was
    /// rebuilt.
    pub fn tick(&mut self, now: Instant) -> bool {
        let grace = self.index.settings().federated_grace;
        let mut dirty = Dirty::default();
        for c in self.set.iter() {
            let Some(since) = c.health.broken_since else {
                continue;
            };
            // Members are out once more than the grace has passed
            // (`entry::federation_eligible`), so the tick that first sees that
            // rebuilds, and only that one.
            let expiry = since + grace;
            if self.last_tick <= expiry && expiry < now {
                dirty.health.insert(c.name.clone());
            }
        }
        self.last_tick = now;
        self.keep(&dirty);
        self.index.refresh(&self.set, &dirty, now)
    }

    /// Answers under new settings from `now` on: every name is rebuilt,
    /// unless only the budget changed (see [`Index::reset_settings`]).
    /// Returns whether a new snapshot should be published.
    pub fn set_settings(&mut self, settings: Arc<Settings>, now: Instant) -> bool {
        self.index.reset_settings(settings, &self.set, now)
    }

    /// The settings in use.
    pub fn settings(&self) -> &Arc<Settings> {
        self.index.settings()
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.index.snapshot()
    }

    /// The current snapshot, to publish: its [`Changes`] say what changed
    /// since the one published before, and the next one's start from it.
    ///
    /// [`Changes`]: super::index::Changes
    pub fn publish(&mut self) -> Arc<Snapshot> {
        self.index.publish_snapshot()
    }

    /// The cluster state.
    pub(crate) fn clusters(&self) -> &ClusterSet {
        &self.set
    }
}
