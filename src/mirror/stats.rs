//! Counters of the mirror controller: writes by kind, operation and
//! outcome, objects owned, objects left alone because someone else owns
//! them, leadership, and the time from a model change to the local write
//! (a histogram of the metrics crate, so its buckets are encoded as
//! Prometheus expects).
//!
//! Written by the controller, read by the metrics encoder; it decides
//! nothing, and must not name or encode metrics (the top-level `metrics`
//! module does).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;

/// Upper bounds (seconds) of the reconcile latency histogram.
const BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// Writes by (kind, op, outcome); every key is a `&'static str` the
/// controller names, so the label set is fixed.
pub(crate) type WriteCounts = BTreeMap<(&'static str, &'static str, &'static str), u64>;

/// The mirror controller's counters.
#[derive(Debug)]
pub struct MirrorStats {
    enabled: AtomicBool,
    leader: AtomicBool,
    owned: AtomicU64,
    unowned: AtomicU64,
    problems: AtomicU64,
    undecodable: AtomicU64,
    writes: Mutex<WriteCounts>,
    latency: Histogram,
}

impl Default for MirrorStats {
    fn default() -> Self {
        Self {
            enabled: AtomicBool::default(),
            leader: AtomicBool::default(),
            owned: AtomicU64::default(),
            unowned: AtomicU64::default(),
            problems: AtomicU64::default(),
            undecodable: AtomicU64::default(),
            writes: Mutex::default(),
            latency: Histogram::new(BUCKETS),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MirrorStats {
    /// Marks the controller as running (its families are rendered).
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// Leadership changed.
    pub fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::Relaxed);
    }

    /// Whether this process leads.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// Objects we own now, and wanted objects someone else owns.
    pub fn set_objects(&self, owned: usize, unowned: usize) {
        self.owned.store(owned as u64, Ordering::Relaxed);
        self.unowned.store(unowned as u64, Ordering::Relaxed);
    }

    /// One object of ours that did not decode was skipped by a watch;
    /// returns how many have been so far.
    pub fn skipped_undecodable(&self) -> u64 {
        self.undecodable.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Objects of ours skipped because they did not decode.
    pub fn undecodable(&self) -> u64 {
        self.undecodable.load(Ordering::Relaxed)
    }

    /// Problems of the last computation (names shortened, collisions).
    pub fn set_problems(&self, n: usize) {
        self.problems.store(n as u64, Ordering::Relaxed);
    }

    /// One write: kind (`Service`...), op (`create`, `apply`, `delete`),
    /// outcome (`ok`, `conflict`, `not_owned`, `missing_namespace`, `error`).
    pub fn write(&self, kind: &'static str, op: &'static str, outcome: &'static str) {
        *lock(&self.writes).entry((kind, op, outcome)).or_default() += 1;
    }

    /// Total writes so far with outcome `ok`.
    pub fn ok_writes(&self) -> u64 {
        lock(&self.writes)
            .iter()
            .filter(|((_, _, o), _)| *o == "ok")
            .map(|(_, n)| n)
            .sum()
    }

    /// Time from a model change to the writes it caused.
    pub fn observe_latency(&self, d: Duration) {
        self.latency.observe(d.as_secs_f64());
    }

    /// Whether the controller runs (its families are encoded only then).
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Objects we own now, and wanted objects someone else owns.
    pub fn objects(&self) -> (u64, u64) {
        (
            self.owned.load(Ordering::Relaxed),
            self.unowned.load(Ordering::Relaxed),
        )
    }

    /// Problems of the last computation.
    pub fn problems(&self) -> u64 {
        self.problems.load(Ordering::Relaxed)
    }

    /// Writes so far by (kind, op, outcome).
    pub fn writes(&self) -> WriteCounts {
        lock(&self.writes).clone()
    }

    /// The reconcile latency histogram (seconds).
    pub fn latency(&self) -> &Histogram {
        &self.latency
    }
}
