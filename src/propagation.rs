//! Propagation: the time from a change of an EndpointSlice on its cluster
//! (the slice's `endpoints.kubernetes.io/last-change-trigger-time`) to the
//! moment answers reflecting it are published here, per cluster. It is
//! what CoreDNS's `dns_programming_duration_seconds` measures for the local
//! cluster's objects, taken across clusters: the EndpointSlice controller's
//! batching, the remote API server, the watch over the network, the feed
//! and the model.
//!
//! The sources decide which deliveries bring a trigger time to measure
//! (`source::state`: a change seen by the watch, not a list's first sight
//! of a slice; the file source brings none), and the model ignores it. This
//! module collects the trigger times of a round's events ([`Pending`]) and,
//! once the runtime has published the snapshot that holds them, observes
//! them against the wall clock the runtime reads into [`Propagation`],
//! which the metrics encoder reads. It must not read a clock itself, and
//! must not name or encode metrics (`metrics` does).
//!
//! The rules:
//! - One observation per slice event applied. The feed coalesces a slice's
//!   versions, so a round holds the latest, and its trigger time is the one
//!   observed.
//! - Observed whether or not the version changed any name: from that round
//!   on, the published answers reflect it. This is what CoreDNS does (one
//!   observation per update of the object).
//! - A trigger time later than the publication (the remote cluster's clock
//!   runs ahead of ours) is observed as 0 and counted apart, so skew shows
//!   instead of silently lowering the sum.
//! - Only clusters the model knows have series: a cluster that has gone
//!   when its round is published is not observed, and its series go with it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use prometheus_client::metrics::histogram::Histogram;

use crate::model::objects::ObjectKey;
use crate::model::{ClusterSet, Event};

/// Upper bounds (seconds) of the propagation histogram: from a few
/// milliseconds (a watch on a nearby cluster) to ten minutes (a cluster
/// whose watch was broken and came back), with the tens of milliseconds to
/// seconds of a healthy cross-cluster hop in between, and 5 s (the alert
/// docs/operations.md suggests) on a bound.
pub(crate) const BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// One cluster's series.
#[derive(Debug, Clone)]
pub struct Series {
    /// Seconds from trigger to publication.
    pub seconds: Histogram,
    /// Trigger times that were later than the publication (observed as 0).
    pub clock_skew: u64,
}

impl Default for Series {
    fn default() -> Self {
        Self {
            seconds: Histogram::new(BUCKETS),
            clock_skew: 0,
        }
    }
}

/// Every known cluster's propagation series; written by the model task,
/// read by the metrics encoder.
#[derive(Debug, Default)]
pub struct Propagation {
    clusters: Mutex<BTreeMap<Arc<str>, Series>>,
}

impl Propagation {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<Arc<str>, Series>> {
        // Plain data behind the lock: a panic elsewhere leaves it usable.
        self.clusters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Each cluster's series (a histogram handle shares its counts).
    pub fn read(&self) -> Vec<(Arc<str>, Series)> {
        self.lock()
            .iter()
            .map(|(c, s)| (c.clone(), s.clone()))
            .collect()
    }

    /// Series for exactly the `known` clusters: new ones start at zero (so
    /// a rate sees their first observation), gone ones are removed.
    fn keep_only<'c>(&self, known: impl Iterator<Item = &'c Arc<str>>) {
        let mut series = self.lock();
        let mut next = BTreeMap::new();
        for name in known {
            let s = series.remove(name).unwrap_or_default();
            next.insert(name.clone(), s);
        }
        *series = next;
    }
}

/// The trigger times of the slice events applied since the last
/// publication, and whether clusters came or went.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    triggers: HashMap<(Arc<str>, ObjectKey), SystemTime>,
    clusters_changed: bool,
}

impl Pending {
    /// Notes `events`, about to be applied (in order: a later version of a
    /// slice replaces an earlier one's trigger time).
    pub(crate) fn note(&mut self, events: &[Event]) {
        for event in events {
            match event {
                Event::SliceApplied {
                    cluster,
                    slice,
                    trigger: Some(at),
                } => {
                    self.triggers
                        .insert((cluster.clone(), slice.key.clone()), *at);
                }
                Event::ClusterUp { .. } | Event::ClusterDown { .. } => {
                    self.clusters_changed = true;
                }
                _ => {}
            }
        }
    }

    /// Called right after the snapshot holding what was noted is published
    /// (or found not to need one), at wall-clock `now`: observes every
    /// trigger time noted for a cluster `clusters` still holds, and keeps
    /// series for those clusters only. Empties the pending set.
    pub(crate) fn publish(&mut self, into: &Propagation, clusters: &ClusterSet, now: SystemTime) {
        if std::mem::take(&mut self.clusters_changed) {
            into.keep_only(clusters.iter().map(|c| &c.name));
        }
        if self.triggers.is_empty() {
            return;
        }
        let mut series = into.lock();
        for ((cluster, _), at) in self.triggers.drain() {
            if clusters.get(&cluster).is_none() {
                continue;
            }
            let s = series.entry(cluster).or_default();
            match now.duration_since(at) {
                Ok(took) => s.seconds.observe(took.as_secs_f64()),
                Err(_) => {
                    s.seconds.observe(0.0);
                    s.clock_skew += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
