//! Counters of the mirror controller, rendered into `/metrics`: writes by
//! kind, operation and outcome, objects owned, objects left alone because
//! someone else owns them, leadership, and the time from a model change to
//! the local write.
//!
//! Written by the controller, read by the admin server; it decides nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the reconcile latency histogram.
const BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// The mirror controller's counters.
#[derive(Debug, Default)]
pub struct MirrorStats {
    enabled: AtomicBool,
    leader: AtomicBool,
    owned: AtomicU64,
    unowned: AtomicU64,
    problems: AtomicU64,
    writes: Mutex<BTreeMap<(&'static str, &'static str, &'static str), u64>>,
    latency: Mutex<([u64; BUCKETS.len()], u64, f64)>,
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
        let secs = d.as_secs_f64();
        let mut h = lock(&self.latency);
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.0[i] += 1;
            }
        }
        h.1 += 1;
        h.2 += secs;
    }

    /// Appends the families to `out` (nothing when not enabled).
    pub fn render(&self, out: &mut String) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        let gauge = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        gauge(
            out,
            "clusterset_dns_mirror_leader",
            "1 while this process holds the mirror lease and writes.",
            u64::from(self.is_leader()),
        );
        gauge(
            out,
            "clusterset_dns_mirror_objects_owned",
            "Services and EndpointSlices carrying our managed-by label.",
            self.owned.load(Ordering::Relaxed),
        );
        gauge(
            out,
            "clusterset_dns_mirror_objects_not_owned",
            "Wanted objects left alone because a same-named object without our label exists.",
            self.unowned.load(Ordering::Relaxed),
        );
        gauge(
            out,
            "clusterset_dns_mirror_problems",
            "Desired objects reported at the last computation: names shortened to 63 characters (full name kept in an annotation), name collisions.",
            self.problems.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP clusterset_dns_mirror_writes_total Writes to the local cluster by kind, operation and outcome.\n# TYPE clusterset_dns_mirror_writes_total counter"
        );
        for ((kind, op, outcome), n) in lock(&self.writes).iter() {
            let _ = writeln!(
                out,
                "clusterset_dns_mirror_writes_total{{kind=\"{kind}\",op=\"{op}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        let h = lock(&self.latency);
        let name = "clusterset_dns_mirror_reconcile_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from a model change to the local writes it caused.\n# TYPE {name} histogram"
        );
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {}", h.0[i]);
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.1);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", h.2, h.1);
    }
}
