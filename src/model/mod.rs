//! The model: cluster state fed by sources, and the index derived from it.
//!
//! [`Model`] is owned by one writer (the runtime's model task, or `check` and
//! `dump` directly). Sources send [`Event`]s; the model applies them, updates
//! only the names they touched, and hands out immutable [`Snapshot`]s that
//! the query path and the mirror controller both read. It also holds what
//! a linked cluster may cost ([`budget`]).
//!
//! The model never reads a clock: every mutating method is told `now`, and
//! the wall clock reaches it once, as the [`Epoch`] it is built with (SOA
//! serials). Tests therefore choose the time instead of waiting for it.
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
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub use cluster::{Cluster, ClusterSet, Dirty, Event, Health, Seniority};
pub use entry::{Entry, Origin, Pod};
pub use index::{ClusterStatus, Index, IndexStats, Settings, Snapshot};

/// The wall-clock time at one instant: SOA serials never fall behind the
/// Unix seconds it gives for a later instant.
///
/// The seconds are counted on from the instant on the monotonic clock, so a
/// system clock stepped back while we run cannot make a serial go back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    at: Instant,
    unix_secs: u32,
}

impl Epoch {
    /// `at` on the monotonic clock is `wall` on the system clock (both
    /// read by the caller, one right after the other).
    pub fn new(at: Instant, wall: SystemTime) -> Self {
        let unix_secs = wall
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX));
        Self { at, unix_secs }
    }

    /// The instant the epoch was taken at.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// Unix seconds at `now` (at the epoch's, if `now` is earlier).
    pub fn unix_secs(&self, now: Instant) -> u32 {
        let since = now.saturating_duration_since(self.at).as_secs();
        self.unix_secs
            .saturating_add(u32::try_from(since).unwrap_or(u32::MAX))
    }
}

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
    pub fn take_changes(&mut self) -> Dirty {
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

    /// The cluster state.
    pub fn clusters(&self) -> &ClusterSet {
        &self.set
    }
}
