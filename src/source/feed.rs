//! The way from the sources to the model task: one queue per cluster,
//! coalesced by object, served round-robin, so one cluster's churn storm
//! neither delays another cluster's change nor costs memory per event.
//!
//! Owns the order rules: clusters coming and going and "every cluster is
//! known" ([`SourceMsg::ClustersKnown`]) travel in one ordered control lane,
//! applied before any queued object event; a cluster's object events are
//! keyed by object (the latest state of a Service, EndpointSlice, mirror or
//! the gateway replaces the one queued before, in place), and its health
//! always goes behind everything queued before it, so "synced" never
//! overtakes the objects it vouches for. A storm therefore costs memory in
//! proportion to the objects it touches, not the events it sends. It must
//! not interpret events beyond their key and cluster.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use super::SourceMsg;
use crate::model::Event;
use crate::model::objects::ObjectKey;
use crate::vocab::place::PlaceFrom;

/// The model task is gone: sources stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the model task has stopped")]
pub(crate) struct Closed;

/// What a queued event is about: a later event with the same key replaces
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Health,
    Gateway,
    Service(ObjectKey),
    Slice(ObjectKey),
    Mirror(ObjectKey),
    ClusterId,
    Place(PlaceFrom),
    Import(ObjectKey),
    ExternalName(ObjectKey),
}

impl Key {
    fn of(event: &Event) -> Option<Self> {
        Some(match event {
            Event::ClusterUp { .. } | Event::ClusterDown { .. } => return None,
            Event::Health { .. } => Self::Health,
            Event::GatewayApplied { .. } => Self::Gateway,
            Event::ServiceApplied { service, .. } => Self::Service(service.key.clone()),
            Event::ServiceDeleted { key, .. } => Self::Service(key.clone()),
            Event::SliceApplied { slice, .. } => Self::Slice(slice.key.clone()),
            Event::SliceDeleted { key, .. } => Self::Slice(key.clone()),
            Event::MirrorApplied { mirror, .. } => Self::Mirror(mirror.key.clone()),
            Event::MirrorDeleted { key, .. } => Self::Mirror(key.clone()),
            Event::ClusterIdApplied { .. } => Self::ClusterId,
            Event::PlaceApplied { from, .. } => Self::Place(*from),
            Event::ImportApplied { import, .. } => Self::Import(import.key.clone()),
            Event::ImportDeleted { key, .. } => Self::Import(key.clone()),
            Event::ExternalNameApplied { key, .. } => Self::ExternalName(key.clone()),
        })
    }
}

/// One cluster's coalesced events in arrival order of their keys.
#[derive(Debug, Default)]
struct Queue {
    /// Keys in the order they are served, with the sequence number they
    /// were queued under; an entry whose number no longer matches `latest`
    /// was moved behind and is skipped.
    order: VecDeque<(Key, u64)>,
    latest: HashMap<Key, (u64, Event)>,
    seq: u64,
}

impl Queue {
    fn push(&mut self, key: Key, event: Event) {
        // Health goes behind what was queued before it; objects keep their
        // place (their newest state is what is served there).
        let moves = key == Key::Health;
        match self.latest.get_mut(&key) {
            Some(slot) if !moves => slot.1 = event,
            _ => {
                self.seq += 1;
                self.order.push_back((key.clone(), self.seq));
                self.latest.insert(key, (self.seq, event));
            }
        }
    }

    /// Takes up to `n` events from the front.
    fn take(&mut self, n: usize, out: &mut Vec<Event>) {
        let mut taken = 0;
        while taken < n {
            let Some((key, seq)) = self.order.pop_front() else {
                break;
            };
            if self.latest.get(&key).is_some_and(|(s, _)| *s == seq)
                && let Some((_, event)) = self.latest.remove(&key)
            {
                out.push(event);
                taken += 1;
            }
        }
    }

    fn len(&self) -> usize {
        self.latest.len()
    }
}

#[derive(Debug, Default)]
struct State {
    control: VecDeque<SourceMsg>,
    queues: BTreeMap<Arc<str>, Queue>,
    /// The first cluster served last round: the next round starts after it,
    /// so no cluster is always served first.
    next: Option<Arc<str>>,
}

/// What one round hands the model task.
#[derive(Debug, Default)]
pub(crate) struct Round {
    /// Control messages, in order, to apply first.
    pub control: Vec<SourceMsg>,
    /// Object events: at most the quantum from each cluster with work.
    pub events: Vec<Event>,
}

impl Round {
    /// True when there is nothing to apply.
    pub(crate) fn is_empty(&self) -> bool {
        self.control.is_empty() && self.events.is_empty()
    }
}

/// The queues between every source and the model task. Sources hold a
/// [`FeedTx`]; the model task takes [`Round`]s.
#[derive(Debug, Default)]
pub(crate) struct Feed {
    state: Mutex<State>,
    ready: Notify,
    closed: AtomicBool,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves plain data behind; keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Feed {
    /// A new feed and the handle sources send through.
    pub(crate) fn new() -> (Arc<Self>, FeedTx) {
        let feed = Arc::new(Self::default());
        let tx = FeedTx(feed.clone());
        (feed, tx)
    }

    /// Waits until something was sent since the last wait.
    pub(crate) async fn wait(&self) {
        self.ready.notified().await;
    }

    /// The model task stops taking: sources are told at their next send.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Takes every control message and, round-robin from where the last
    /// round stopped, up to `quantum` events of each cluster.
    pub(crate) fn take(&self, quantum: usize) -> Round {
        let mut s = lock(&self.state);
        let mut round = Round {
            control: s.control.drain(..).collect(),
            events: Vec::new(),
        };
        let names: Vec<Arc<str>> = s.queues.keys().cloned().collect();
        let start = s
            .next
            .as_ref()
            .and_then(|n| names.iter().position(|c| c > n))
            .unwrap_or(0);
        for name in names[start..].iter().chain(&names[..start]) {
            if let Some(q) = s.queues.get_mut(name) {
                q.take(quantum, &mut round.events);
            }
        }
        s.queues.retain(|_, q| q.len() > 0);
        // The next round starts after this one's first cluster.
        s.next = names.get(start).cloned();
        round
    }

    /// Events queued now, over every cluster (for tests and status).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        lock(&self.state).queues.values().map(Queue::len).sum()
    }

    fn send(&self, msg: SourceMsg) -> Result<(), Closed> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Closed);
        }
        {
            let mut s = lock(&self.state);
            match msg {
                SourceMsg::Events(events) => {
                    let mut lifecycle = Vec::new();
                    for event in events {
                        let cluster = event.cluster().clone();
                        match Key::of(&event) {
                            Some(key) => s.queues.entry(cluster).or_default().push(key, event),
                            None => {
                                // A cluster that goes takes its queued
                                // events with it.
                                if matches!(event, Event::ClusterDown { .. }) {
                                    s.queues.remove(&cluster);
                                }
                                lifecycle.push(event);
                            }
                        }
                    }
                    if !lifecycle.is_empty() {
                        s.control.push_back(SourceMsg::Events(lifecycle));
                    }
                }
                other => s.control.push_back(other),
            }
        }
        self.ready.notify_one();
        Ok(())
    }
}

/// A source's handle on the [`Feed`].
#[derive(Debug, Clone)]
pub(crate) struct FeedTx(Arc<Feed>);

impl FeedTx {
    /// Queues `msg` (never waits: the queues coalesce instead).
    pub(crate) fn send(&self, msg: SourceMsg) -> Result<(), Closed> {
        self.0.send(msg)
    }
}

#[cfg(test)]
mod tests;
