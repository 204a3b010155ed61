//! The model's feed to the mirror controller: the latest cluster state (a
//! persistent [`ClusterSet`], O(1) to clone) and which services changed
//! since the controller last took it.
//!
//! Owns the rule that no change is lost when the controller is busy: the
//! model task may send many batches while one reconcile runs; the feed keeps
//! only the newest state but the union of their [`Dirty`] sets, and the
//! controller takes both at once. A gap the feed cannot describe (the first
//! state) is [`Changed::All`]. It must not compute mirror objects.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use crate::model::{ClusterSet, Dirty};

/// What changed between the state the controller last took and this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Changed {
    /// Unknown: everything is recomputed.
    All,
    /// The services and cluster healths the model's batches touched.
    Some(Dirty),
}

impl Changed {
    /// Adds `later` to what changed.
    pub(crate) fn merge(&mut self, later: Self) {
        match (&mut *self, later) {
            (Self::All, _) => {}
            (Self::Some(_), Self::All) => *self = Self::All,
            (Self::Some(d), Self::Some(l)) => {
                d.services.extend(l.services);
                d.health.extend(l.health);
            }
        }
    }
}

/// A state for the controller.
#[derive(Debug, Clone)]
pub(crate) struct Update {
    /// The cluster state.
    pub set: ClusterSet,
    /// What changed since the state taken before.
    pub changed: Changed,
    /// When the oldest change in it was sent (for the latency metric).
    pub since: Instant,
}

#[derive(Debug, Default)]
struct Shared {
    pending: Mutex<Option<Update>>,
    notify: Notify,
    closed: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Update>> {
        // A panic while holding the lock left a whole Update or none.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The model task's end. Dropping it closes the feed.
#[derive(Debug)]
pub(crate) struct FeedTx(Arc<Shared>);

/// The controller's end.
#[derive(Debug)]
pub(crate) struct FeedRx(Arc<Shared>);

/// A connected pair.
pub(crate) fn channel() -> (FeedTx, FeedRx) {
    let shared = Arc::new(Shared::default());
    (FeedTx(shared.clone()), FeedRx(shared))
}

impl FeedTx {
    /// Sends the state `set` after `changed`, at `at`; merges with what the
    /// controller has not taken yet.
    pub(crate) fn send(&self, set: ClusterSet, changed: Changed, at: Instant) {
        let mut pending = self.0.lock();
        match pending.as_mut() {
            Some(p) => {
                p.set = set;
                p.changed.merge(changed);
            }
            None => {
                *pending = Some(Update {
                    set,
                    changed,
                    since: at,
                });
            }
        }
        drop(pending);
        self.0.notify.notify_one();
    }
}

impl Drop for FeedTx {
    fn drop(&mut self) {
        self.0
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.0.notify.notify_one();
    }
}

impl FeedRx {
    /// Waits until an update is pending (without taking it). `false` once
    /// the sender is gone and nothing is pending.
    pub(crate) async fn changed(&self) -> bool {
        loop {
            // Registered before looking, so a send in between still wakes us.
            let notified = self.0.notify.notified();
            if self.0.lock().is_some() {
                return true;
            }
            if self.0.closed.load(std::sync::atomic::Ordering::Acquire) {
                return false;
            }
            notified.await;
        }
    }

    /// Takes the pending update, if any.
    pub(crate) fn take(&self) -> Option<Update> {
        self.0.lock().take()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::objects::ObjectKey;

    fn dirty(cluster: &str, svc: &str) -> Changed {
        let mut d = Dirty::default();
        d.services
            .insert((Arc::from(cluster), ObjectKey::new("ns", svc)));
        Changed::Some(d)
    }

    #[tokio::test]
    async fn batches_sent_while_busy_are_merged_not_lost() {
        let (tx, rx) = channel();
        let t = Instant::now();
        tx.send(ClusterSet::new(), dirty("a", "x"), t);
        tx.send(ClusterSet::new(), dirty("b", "y"), t);
        assert!(rx.changed().await);
        let u = rx.take().expect("pending");
        let Changed::Some(d) = u.changed else {
            panic!("not a full recompute")
        };
        assert_eq!(d.services.len(), 2);
        assert!(rx.take().is_none(), "taken once");
        tx.send(ClusterSet::new(), Changed::All, t);
        tx.send(ClusterSet::new(), dirty("c", "z"), t);
        assert_eq!(rx.take().map(|u| u.changed), Some(Changed::All));
    }

    #[tokio::test]
    async fn a_dropped_sender_closes_after_the_last_update() {
        let (tx, rx) = channel();
        tx.send(ClusterSet::new(), Changed::All, Instant::now());
        drop(tx);
        assert!(rx.changed().await, "the last update is still delivered");
        assert!(rx.take().is_some());
        assert!(!rx.changed().await);
    }
}
