//! The health one cluster task reports: which of its watches have failed
//! and since when, since when its data is not confirmed (a failed watch, a
//! silence of its API server, or a broken state carried over from the
//! watches a restart replaced), whether the sync timeout has given up on
//! it, its gateway probe's verdict, and whether any of that changed since
//! it was last sent to the model or logged as a phase.
//!
//! Owns those decisions as a pure [`Tracker`]: every instant is handed in,
//! the clock is never read. It must not log, send, or touch the status
//! board (the runner does, from what the tracker answers), nor decide when
//! a silence begins ([`crate::source::liveness`] does; the tracker only
//! holds the [`Liveness`] so that the silence counts in broken-since).

use std::collections::HashMap;
use std::time::Instant;

use crate::model::Health;
use crate::source::liveness::{Liveness, Reach};
use crate::source::state::Watch;
use crate::source::status::Phase;

/// What a watch failure changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Failure {
    /// The watch was working until now: one more watch restart to count
    /// (a watch that keeps failing counts once per spell).
    pub(super) restart: bool,
    /// The cluster was healthy until now: it is broken from `now`.
    pub(super) broke: bool,
}

/// The health of one run of a cluster's watches.
#[derive(Debug, Clone)]
pub(super) struct Tracker {
    /// Failed watches, and when they last failed (the instant a re-watch
    /// the API server accepted must come after).
    failing: HashMap<Watch, Instant>,
    /// Since when a watch is failing.
    broken_since: Option<Instant>,
    /// Whether the API server answers.
    pub(super) liveness: Liveness,
    /// Broken since, carried over from the watches this run replaced,
    /// until the new ones have listed: a restart must not make stale data
    /// look fresh.
    carried: Option<Instant>,
    /// The gateway probe's verdict (`None`: no probe, or no result yet).
    gateway_alive: Option<bool>,
    /// The sync timeout passed before the cluster synced.
    gave_up: bool,
    /// The health last sent to the model.
    last: Option<Health>,
    /// The phase last logged.
    last_phase: Option<Phase>,
}

impl Tracker {
    /// A run whose API server's silence `liveness` judges, carrying
    /// `carried` (broken-since of the run it replaces) and starting from
    /// `last_phase` (so a restarted run logs `broken, was unreachable`,
    /// not `was new`).
    pub(super) fn new(
        liveness: Liveness,
        carried: Option<Instant>,
        last_phase: Option<Phase>,
    ) -> Self {
        Self {
            failing: HashMap::new(),
            broken_since: None,
            liveness,
            carried,
            gateway_alive: None,
            gave_up: false,
            last: None,
            last_phase,
        }
    }

    /// Watch `w` failed, as seen at `seen`; `now` dates the break when the
    /// cluster was healthy.
    pub(super) fn failed(&mut self, w: Watch, seen: Instant, now: Instant) -> Failure {
        let restart = self.failing.insert(w, seen).is_none();
        let broke = self.broken_since.is_none();
        if broke {
            self.broken_since = Some(now);
        }
        Failure { restart, broke }
    }

    /// Watch `w` delivered: it works. True when that makes every watch
    /// work again.
    pub(super) fn delivered(&mut self, w: Watch) -> bool {
        self.failing.remove(&w).is_some() && self.maybe_healthy()
    }

    /// Whether a watch is failing.
    pub(super) fn any_failing(&self) -> bool {
        !self.failing.is_empty()
    }

    /// The API server answered: each failed watch for which `accepted`
    /// says it accepted the watch again since its failure works again (a
    /// re-watch after an error delivers nothing by itself). True when
    /// every watch works again.
    pub(super) fn accepted(&mut self, accepted: impl Fn(&Watch, Instant) -> bool) -> bool {
        self.failing.retain(|w, since| !accepted(w, *since));
        self.maybe_healthy()
    }

    fn maybe_healthy(&mut self) -> bool {
        if self.failing.is_empty() && self.broken_since.is_some() {
            self.broken_since = None;
            return true;
        }
        false
    }

    /// The API server answered at `at`. True when that ends a silence:
    /// the watches must list anew, and until they have, the cluster stays
    /// broken since when it was before the answer.
    pub(super) fn answered(&mut self, at: Instant) -> bool {
        let before = self.broken();
        if self.liveness.answered(at) {
            self.carried = before;
            return true;
        }
        false
    }

    /// Since when the API server is silent, if it is.
    pub(super) fn silent_since(&self) -> Option<Instant> {
        match self.liveness.reach() {
            Reach::Silent(since) => Some(since),
            Reach::Waiting | Reach::Answering => None,
        }
    }

    /// Since when its data is not confirmed: the earliest of a failed
    /// watch, a silence (from the last answer) and a broken state carried
    /// over from the watches this run replaced.
    pub(super) fn broken(&self) -> Option<Instant> {
        [self.broken_since, self.silent_since(), self.carried]
            .into_iter()
            .flatten()
            .min()
    }

    /// The probe's verdict.
    pub(super) fn set_gateway_alive(&mut self, alive: Option<bool>) {
        self.gateway_alive = alive;
    }

    /// Whether the sync timeout still has something to give up on: it
    /// fires once, and only for a cluster that has not synced.
    pub(super) fn sync_pending(&self, synced: bool) -> bool {
        !self.gave_up && !synced
    }

    /// The sync timeout passed: readiness stops waiting for the cluster.
    pub(super) fn give_up(&mut self) {
        self.gave_up = true;
    }

    /// The health now, given whether the state is synced.
    pub(super) fn health(&self, synced: bool) -> Health {
        Health {
            synced,
            broken_since: self.broken(),
            gateway_alive: self.gateway_alive,
            sync_given_up: self.gave_up,
        }
    }

    /// Whether the new watches have listed since a restart: true once, when
    /// that ends the carried broken state.
    pub(super) fn relisted(&mut self, relisted: bool) -> bool {
        relisted && self.carried.take().is_some()
    }

    /// The health to send the model: `Some` only when it differs from the
    /// last one sent (which it then becomes).
    pub(super) fn changed(&mut self, synced: bool) -> Option<Health> {
        let h = self.health(synced);
        if self.last.as_ref() == Some(&h) {
            return None;
        }
        self.last = Some(h.clone());
        Some(h)
    }

    /// The phase the status board now shows: `Some((phase, was))` when it
    /// differs from the last one logged (`was` is that one's label, or
    /// `new`), so the log has one line per change.
    pub(super) fn phase(&mut self, now: Option<Phase>) -> Option<(Phase, &'static str)> {
        let phase = now?;
        if self.last_phase == Some(phase) {
            return None;
        }
        let was = self.last_phase.replace(phase).map_or("new", Phase::label);
        Some((phase, was))
    }
}

#[cfg(test)]
mod tests;
