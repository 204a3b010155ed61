//! The IXFR journal (RFC 1995): the differences between the last versions
//! of the zone, so a secondary that is a few serials behind gets those
//! and not the whole zone.
//!
//! A version's difference is computed when its snapshot is published, from
//! what the model says changed ([`Changes`]): the records of each rebuilt
//! entry before and after ([`entry_records`], the enumeration transfers
//! and `dump` use), and of each name of a cluster whose health changed
//! (its TTLs are capped while it is stale). Never from two whole zones,
//! and never on the query path. A change that cannot be told apart (new
//! settings, start-up being over) empties the journal: older serials then
//! get the whole zone, as RFC 1995 §4 allows.
//!
//! The journal is bounded by a number of versions and by the octets of
//! their records (uncompressed, as on the wire); the oldest go first.
//! [`Versions`] is immutable and swapped whole, so a transfer reads one
//! consistent journal without a lock. [`run`] is the thin task that
//! feeds it published snapshots, in order.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use tokio::sync::mpsc;

use super::stats::DnsStats;
use super::transfer::wire_len;
use super::wire::Record;
use super::zonefile::{entry_records, record_order};
use crate::model::{Changes, JournalLimits as Limits, Origin, Snapshot};

/// The difference from one serial to the next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Version {
    /// The serial before.
    pub from: u32,
    /// The serial after.
    pub to: u32,
    /// Records the version took away.
    pub removed: Vec<Record>,
    /// Records the version added.
    pub added: Vec<Record>,
    /// Their octets, uncompressed.
    pub bytes: u64,
}

/// The journal at one moment: the versions that lead, one after the
/// other, to `serial`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Versions {
    /// The serial of the last snapshot recorded (0: none yet).
    pub serial: u32,
    /// Oldest first; each one's `to` is the next one's `from`, the last
    /// one's is `serial`.
    pub list: VecDeque<Arc<Version>>,
    /// Octets of every version's records.
    pub bytes: u64,
}

impl Versions {
    /// The versions from serial `from` to [`Versions::serial`], in order;
    /// `None` when `from` starts none of them (older than the journal, or
    /// never ours), and empty when `from` is the last serial.
    pub(crate) fn since(&self, from: u32) -> Option<Vec<Arc<Version>>> {
        if from == self.serial {
            return Some(Vec::new());
        }
        let at = self.list.iter().position(|v| v.from == from)?;
        Some(self.list.range(at..).cloned().collect())
    }

    /// This journal with `next` recorded after `prev` (the snapshot
    /// published before it), under `limits`, at `now` (staleness).
    pub(crate) fn record(
        &self,
        (prev, next): (&Snapshot, &Snapshot),
        limits: Limits,
        now: Instant,
    ) -> Versions {
        let told = self.serial == prev.serial && next.changes.since == prev.serial;
        let diff = told
            .then(|| difference((prev, next), limits.bytes, now))
            .flatten();
        let Some((removed, added)) = diff else {
            return Versions {
                serial: next.serial,
                ..Versions::default()
            };
        };
        let bytes = removed
            .iter()
            .chain(&added)
            .map(|r| wire_len(r) as u64)
            .sum();
        let mut out = self.clone();
        out.serial = next.serial;
        out.list.push_back(Arc::new(Version {
            from: prev.serial,
            to: next.serial,
            removed,
            added,
            bytes,
        }));
        out.bytes += bytes;
        while out.list.len() > limits.versions || out.bytes > limits.bytes {
            let Some(old) = out.list.pop_front() else {
                break;
            };
            out.bytes -= old.bytes;
        }
        out
    }
}

/// The records `next` removed from and added to the zone of `prev`, or
/// `None` when the change cannot be told from [`Changes`] (the apex or
/// every name may have changed), during start-up (the zone is still
/// being loaded: every name is new, and a secondary gets it whole), or
/// when the difference passes `bytes` octets (more than the journal
/// keeps: it is not finished, so the work and the memory stay bounded).
///
/// [`Changes`]: crate::model::Changes
pub(crate) fn difference(
    (prev, next): (&Snapshot, &Snapshot),
    bytes: u64,
    now: Instant,
) -> Option<(Vec<Record>, Vec<Record>)> {
    // New answer settings come with `whole` (`Index::reset_settings`).
    let same_state = prev.known == next.known
        && prev.settled == next.settled
        && prev.local_synced == next.local_synced;
    if next.changes.whole || !same_state || !next.settled {
        return None;
    }
    let mut keys: BTreeSet<&str> = next.changes.entries.iter().map(|k| &**k).collect();
    if prev.clusters != next.clusters {
        // A per-cluster name reads its cluster's health when answered.
        let changed = |id: &u32| prev.cluster(*id) != next.cluster(*id);
        for snap in [prev, next] {
            keys.extend(snap.entries.iter().filter_map(|(k, e)| match &e.origin {
                Origin::Cluster { id, .. } if changed(id) => Some(&**k),
                _ => None,
            }));
        }
    }
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    let mut octets = 0u64;
    for key in keys {
        let records = |snap: &Snapshot| {
            snap.entries
                .get(key)
                .map(|e| entry_records(snap, e, now))
                .unwrap_or_default()
        };
        let (mut old, mut new) = (records(prev), records(next));
        old.sort_unstable_by(record_order);
        new.sort_unstable_by(record_order);
        let missing =
            |from: &[Record], r: &Record| from.binary_search_by(|x| record_order(x, r)).is_err();
        for (from, to, out) in [(&old, &new, &mut removed), (&new, &old, &mut added)] {
            for r in from.iter().filter(|r| missing(to, r)) {
                octets += wire_len(r) as u64;
                out.push(r.clone());
            }
        }
        if octets > bytes {
            return None;
        }
    }
    Some((removed, added))
}

/// The journal shared by the task that records versions and the
/// transfers that read them.
#[derive(Debug, Default)]
pub struct Journal {
    current: ArcSwap<Versions>,
}

impl Journal {
    /// The journal as it is now.
    pub(crate) fn versions(&self) -> Arc<Versions> {
        self.current.load_full()
    }

    /// The serial of the last version recorded (0: none yet).
    pub fn serial(&self) -> u32 {
        self.current.load().serial
    }
}

/// `newer`, its changes counted since the snapshot before `older` (the one
/// `older`'s were counted since): the two changes in one.
fn merged(older: &Snapshot, newer: Arc<Snapshot>) -> Arc<Snapshot> {
    if newer.changes.since != older.serial {
        // Not the one after: nothing can be told; `record` starts over.
        return newer;
    }
    let mut entries: BTreeSet<Arc<str>> = older.changes.entries.iter().cloned().collect();
    entries.extend(newer.changes.entries.iter().cloned());
    let changes = Changes {
        since: older.changes.since,
        entries: entries.into_iter().collect(),
        whole: older.changes.whole || newer.changes.whole,
    };
    let mut snap = Snapshot::clone(&newer);
    snap.changes = Arc::new(changes);
    Arc::new(snap)
}

/// Records each snapshot `published` sends into `journal`, in order,
/// until the sender is dropped, and its size into `stats`. Differences
/// are kept only while someone may transfer the zone; otherwise the
/// journal just follows the serial.
pub(crate) async fn run(
    journal: Arc<Journal>,
    mut published: mpsc::UnboundedReceiver<Arc<Snapshot>>,
    stats: Arc<DnsStats>,
) {
    let mut prev: Option<Arc<Snapshot>> = None;
    while let Some(mut next) = published.recv().await {
        // Snapshots published while the last was being recorded make one
        // version: the journal never falls further behind than one.
        while let Ok(newer) = published.try_recv() {
            next = merged(&next, newer);
        }
        let restart = Versions {
            serial: next.serial,
            ..Versions::default()
        };
        let recorded = match prev.take() {
            Some(prev) if !next.settings.allow_transfer.is_empty() => {
                let (j, n) = (journal.clone(), next.clone());
                let work = move || {
                    let limits = n.settings.ixfr_journal;
                    j.versions().record((&prev, &n), limits, Instant::now())
                };
                // A health change may touch every name of a cluster: not
                // on the runtime's threads.
                tokio::task::spawn_blocking(work).await.unwrap_or(restart)
            }
            _ => restart,
        };
        stats.journal(recorded.list.len(), recorded.bytes);
        journal.current.store(Arc::new(recorded));
        prev = Some(next);
    }
}

#[cfg(test)]
mod tests;
