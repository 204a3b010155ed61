//! The index's PTR names (with reverse zones configured): which name each
//! address points back to when several names hold it (the name of the
//! older service, then the lower name), kept as names change.
//!
//! Owns the cost of a change: a name's PTR list is the union of its parts'
//! lists, each computed once per version of its part (as the name's
//! records are), and only the addresses whose target changed touch the
//! claims and the published reverse map. Recomputing every address of a
//! changed name cost a one-endpoint change of a 10,000-pod name about 5 ms
//! (`INDEX_SCALE_REVERSE=1 cargo bench --bench index_scale`). It must not
//! decide which names exist; the index hands it each rebuilt entry.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use crate::model::cluster::Seniority;
use crate::model::entry::{Entry, Part};

/// One address and the name it points back to.
type Ptr = (IpAddr, Arc<str>);

/// A part of a name, with its PTRs sorted.
type PartPtrs = (Arc<Part>, Arc<[Ptr]>);

/// Which name claims an address, and how strongly.
#[derive(Debug, Clone)]
struct Claim {
    /// Lower wins: (the seniority of the name's service, its cluster).
    priority: (Seniority, Arc<str>),
    key: Arc<str>,
    target: Arc<str>,
}

/// What one name contributes.
#[derive(Debug)]
struct NamePtrs {
    /// Each part of the name's entry, with its PTRs sorted.
    parts: Vec<PartPtrs>,
    /// The name's PTRs: sorted, one per address (the lowest target).
    list: Vec<Ptr>,
    priority: (Seniority, Arc<str>),
}

/// Every name's PTRs and the claims on each address.
#[derive(Debug, Default)]
pub(super) struct Ptrs {
    names: HashMap<Arc<str>, NamePtrs>,
    claims: HashMap<IpAddr, Vec<Claim>>,
}

impl Ptrs {
    /// Name `key` is now `entry` (`None`: gone), its service ranked
    /// `priority`; `reverse` (address → target) follows.
    pub(super) fn update(
        &mut self,
        key: &Arc<str>,
        entry: Option<&Entry>,
        priority: (Seniority, Arc<str>),
        reverse: &mut imbl::OrdMap<IpAddr, Arc<str>>,
    ) {
        let old = self.names.remove(key);
        let (parts, list) = match entry {
            Some(e) => lists(e, old.as_ref()),
            None => (Vec::new(), Vec::new()),
        };
        let mut affected = Vec::new();
        match old {
            Some(old) if old.priority == priority => {
                self.apply_diff(key, &old.list, &list, &priority, &mut affected);
            }
            old => {
                // A new rank changes every claim of the name.
                let old_list = old.map(|o| o.list).unwrap_or_default();
                self.apply_diff(key, &old_list, &[], &priority, &mut affected);
                self.apply_diff(key, &[], &list, &priority, &mut affected);
            }
        }
        for ip in affected {
            self.publish(ip, reverse);
        }
        if !list.is_empty() {
            self.names.insert(
                key.clone(),
                NamePtrs {
                    parts,
                    list,
                    priority,
                },
            );
        }
    }

    /// Moves the claims of `key` from `old` to `new` (both sorted, one per
    /// address); the addresses whose claim changed go to `affected`.
    fn apply_diff(
        &mut self,
        key: &Arc<str>,
        old: &[Ptr],
        new: &[Ptr],
        priority: &(Seniority, Arc<str>),
        affected: &mut Vec<IpAddr>,
    ) {
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            let (o, n) = (old.get(i), new.get(j));
            match (o, n) {
                (Some(o), Some(n)) if o.0 == n.0 => {
                    if !same(&o.1, &n.1) {
                        self.claim(key, n, priority);
                        affected.push(n.0);
                    }
                    i += 1;
                    j += 1;
                }
                (Some(o), n) if n.is_none_or(|n| o.0 < n.0) => {
                    if let Some(claims) = self.claims.get_mut(&o.0) {
                        claims.retain(|c| c.key != *key);
                    }
                    affected.push(o.0);
                    i += 1;
                }
                (_, Some(n)) => {
                    self.claim(key, n, priority);
                    affected.push(n.0);
                    j += 1;
                }
                (_, None) => break,
            }
        }
    }

    /// `key` claims `ptr` (replacing its earlier claim on the address).
    fn claim(&mut self, key: &Arc<str>, ptr: &Ptr, priority: &(Seniority, Arc<str>)) {
        let claims = self.claims.entry(ptr.0).or_default();
        match claims.iter_mut().find(|c| c.key == *key) {
            Some(c) => {
                c.target = ptr.1.clone();
                c.priority = priority.clone();
            }
            None => claims.push(Claim {
                priority: priority.clone(),
                key: key.clone(),
                target: ptr.1.clone(),
            }),
        }
    }

    /// Publishes the winning claim on `ip`, or takes the address away.
    fn publish(&mut self, ip: IpAddr, reverse: &mut imbl::OrdMap<IpAddr, Arc<str>>) {
        let winner = self.claims.get(&ip).and_then(|claims| {
            claims
                .iter()
                .min_by(|a, b| a.priority.cmp(&b.priority).then_with(|| a.key.cmp(&b.key)))
                .map(|c| c.target.clone())
        });
        match winner {
            // A persistent map's insert copies a path: only when it changes.
            Some(target) => {
                if reverse.get(&ip).is_none_or(|t| !same(t, &target)) {
                    reverse.insert(ip, target);
                }
            }
            None => {
                self.claims.remove(&ip);
                reverse.remove(&ip);
            }
        }
    }
}

fn same(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

/// The PTR lists of `entry`'s parts (reusing `old`'s for parts that did
/// not change) and the name's merged list.
fn lists(entry: &Entry, old: Option<&NamePtrs>) -> (Vec<PartPtrs>, Vec<Ptr>) {
    let cached: HashMap<*const Part, &Arc<[Ptr]>> = old
        .map(|o| o.parts.iter().map(|(p, l)| (Arc::as_ptr(p), l)).collect())
        .unwrap_or_default();
    let mut parts = Vec::with_capacity(entry.parts.len());
    let mut list = Vec::new();
    for part in &entry.parts {
        let ptrs = match cached.get(&Arc::as_ptr(part)) {
            Some(l) => Arc::clone(l),
            None => {
                let mut v = entry.part_ptrs(part);
                v.sort();
                Arc::from(v)
            }
        };
        list.extend(ptrs.iter().cloned());
        parts.push((part.clone(), ptrs));
    }
    // Each part's list is sorted: the sort merges runs.
    list.sort();
    list.dedup_by(|a, b| a.0 == b.0);
    (parts, list)
}
