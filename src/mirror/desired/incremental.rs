//! The desired objects kept between model batches and recomputed per
//! service: what `super::desired` gives for the whole set, updated for
//! the services a batch touched.
//!
//! Every object comes from one service key (namespace, name): its
//! `<svc>-federated` and `<svc>-nearest`, its `<svc>-<cluster>` in every
//! cluster, their endpoint mirrors, its MCS objects. Those depend only on
//! that key's entries in the cluster state (and on cluster-level gateway,
//! health and place, which the model reports as the key's change; the
//! local place of the settings changes everything, and the controller
//! then builds from scratch), except for names: two units may want one name, and the
//! one `super::finish` gives it to wins. So the state keeps, per key, its
//! candidate units already rendered, and per Service name, who claims it;
//! recomputing a key re-settles only the names it claimed or claims and the
//! keys that claim those. Without a collision that is the key alone.
//!
//! It must not do I/O; the same rules as `super::desired`, which stays
//! the reference (tests compare the two after every event).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::{
    Desired, MAX_SERVICE_NAME, MirrorSettings, ObjectRef, Problem, Rank, Unit, describe, fit_name,
    key_held, key_units, render, service_ref,
};
use crate::model::cluster::{ClusterSet, Dirty};
use crate::model::objects::{ExportMode, ObjectKey};

/// One unit of a key, rendered, before its name is settled.
#[derive(Debug)]
struct Candidate {
    rank: Rank,
    /// The Service name it wants.
    name: ObjectRef,
    /// Whether that name is shortened (a problem to report if it wins).
    shortened: Option<Problem>,
    /// An endpoint mirror: it exists only while its root keeps its name.
    child: bool,
    /// How a collision names it.
    describe: String,
    /// Its Service and EndpointSlices.
    objects: Vec<Desired>,
}

/// What one key has computed.
#[derive(Debug, Default)]
struct KeyState {
    candidates: Vec<Candidate>,
    /// Problems met computing its units (settling adds collisions).
    problems: Vec<Problem>,
    /// Its refused services' mirror Service names.
    held: Vec<(Arc<str>, Arc<str>)>,
    /// After settling: the objects it contributes, and collision and
    /// shortening problems.
    out: Vec<ObjectRef>,
    settled_problems: Vec<Problem>,
}

/// The desired objects, kept per service key.
#[derive(Debug, Default)]
pub(crate) struct DesiredState {
    keys: BTreeMap<ObjectKey, KeyState>,
    /// Service name → its claimants, lowest rank first: (rank, key, index
    /// of the candidate in the key).
    claims: BTreeMap<ObjectRef, BTreeMap<Rank, (ObjectKey, usize)>>,
    objects: BTreeMap<ObjectRef, Desired>,
    refused: BTreeMap<(Arc<str>, Arc<str>), usize>,
    /// How many problems all keys hold.
    problem_count: usize,
    /// Problems of the keys computed or settled since [`Self::take_fresh`].
    fresh: Vec<Problem>,
}

impl DesiredState {
    /// Every desired object of `set`, from scratch (startup, resync).
    pub(crate) fn build(set: &ClusterSet, settings: &MirrorSettings) -> Self {
        let mut state = Self::default();
        let keys: BTreeSet<ObjectKey> = set
            .iter()
            .flat_map(|c| c.services.keys().cloned())
            .collect();
        state.update(set, keys, settings);
        state
    }

    /// Recomputes the services `keys` of `set` (and whichever services
    /// share a contested name with them). Returns the objects that may
    /// have changed: each is now desired as [`Self::objects`] says, or no
    /// longer desired.
    pub(crate) fn update(
        &mut self,
        set: &ClusterSet,
        keys: BTreeSet<ObjectKey>,
        settings: &MirrorSettings,
    ) -> BTreeSet<ObjectRef> {
        let mut names = BTreeSet::new();
        let mut touched = BTreeSet::new();
        for key in &keys {
            let (old_names, old_out) = self.forget(key);
            names.extend(old_names);
            touched.extend(old_out);
            let state = compute(set, key, settings);
            for (i, c) in state.candidates.iter().enumerate() {
                self.claims
                    .entry(c.name.clone())
                    .or_default()
                    .insert(c.rank.clone(), (key.clone(), i));
                names.insert(c.name.clone());
            }
            for h in &state.held {
                *self.refused.entry(h.clone()).or_default() += 1;
            }
            self.problem_count += state.problems.len();
            self.fresh.extend(state.problems.iter().cloned());
            self.keys.insert(key.clone(), state);
        }
        let settle = self.contenders(keys, names);
        // Everything first comes out, then goes back in: a name moving
        // between two of these keys must not be removed by the loser after
        // the winner put it in.
        for key in &settle {
            if let Some(state) = self.keys.get_mut(key) {
                for o in std::mem::take(&mut state.out) {
                    self.objects.remove(&o);
                    touched.insert(o);
                }
            }
        }
        for key in &settle {
            touched.extend(self.settle(key));
        }
        touched
    }

    /// Drops what `key` claimed and contributed; returns the names it
    /// claimed and the objects it contributed.
    fn forget(&mut self, key: &ObjectKey) -> (Vec<ObjectRef>, Vec<ObjectRef>) {
        let Some(old) = self.keys.remove(key) else {
            return (Vec::new(), Vec::new());
        };
        for c in &old.candidates {
            if let Some(claimants) = self.claims.get_mut(&c.name) {
                claimants.remove(&c.rank);
                if claimants.is_empty() {
                    self.claims.remove(&c.name);
                }
            }
        }
        for h in &old.held {
            if let Some(n) = self.refused.get_mut(h) {
                *n -= 1;
                if *n == 0 {
                    self.refused.remove(h);
                }
            }
        }
        for o in &old.out {
            self.objects.remove(o);
        }
        self.problem_count -= old.problems.len() + old.settled_problems.len();
        let names = old.candidates.into_iter().map(|c| c.name).collect();
        (names, old.out)
    }

    /// `keys` and every key claiming one of `names`, closed over the
    /// names those keys claim: who may win or lose a name now.
    fn contenders(
        &self,
        keys: BTreeSet<ObjectKey>,
        names: BTreeSet<ObjectRef>,
    ) -> BTreeSet<ObjectKey> {
        let mut out = keys;
        let mut todo: Vec<ObjectRef> = names.into_iter().collect();
        let mut seen: BTreeSet<ObjectRef> = todo.iter().cloned().collect();
        while let Some(name) = todo.pop() {
            for (key, _) in self.claims.get(&name).into_iter().flat_map(|c| c.values()) {
                if !out.insert(key.clone()) {
                    continue;
                }
                for c in self.keys.get(key).into_iter().flat_map(|k| &k.candidates) {
                    if seen.insert(c.name.clone()) {
                        todo.push(c.name.clone());
                    }
                }
            }
        }
        out
    }

    /// The claimant that holds `name`: the lowest rank among those that
    /// take part (an endpoint mirror whose root lost takes none).
    fn holder(&self, name: &ObjectRef) -> Option<&Candidate> {
        self.claims
            .get(name)?
            .values()
            .filter_map(|(key, i)| self.keys.get(key)?.candidates.get(*i))
            .find(|c| !c.child || self.root_holds(c))
    }

    /// Whether the root of endpoint mirror `child` holds its own name.
    fn root_holds(&self, child: &Candidate) -> bool {
        let Some(state) = self.keys.get(&child.rank.service) else {
            return false;
        };
        state
            .candidates
            .iter()
            .find(|c| c.rank.tier == 1 && c.rank.cluster == child.rank.cluster)
            .is_some_and(|root| {
                self.holder(&root.name)
                    .is_some_and(|h| std::ptr::eq(h, root))
            })
    }

    /// Settles the names of `key`'s candidates and records its objects and
    /// problems (what it contributed before is already out). Returns the
    /// objects it contributes now.
    fn settle(&mut self, key: &ObjectKey) -> Vec<ObjectRef> {
        let Some(state) = self.keys.get(key) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut problems = Vec::new();
        for c in &state.candidates {
            if c.child && !self.root_holds(c) {
                continue;
            }
            match self.holder(&c.name) {
                Some(h) if std::ptr::eq(h, c) => {
                    problems.extend(c.shortened.clone());
                    out.extend(c.objects.iter().cloned());
                }
                Some(h) => problems.push(Problem {
                    object: c.name.clone(),
                    message: format!(
                        "name collision: {} wants this name, which {} keeps (federated names first, then the older service)",
                        c.describe, h.describe
                    ),
                }),
                None => {}
            }
        }
        let mut touched = Vec::new();
        if let Some(state) = self.keys.get_mut(key) {
            state.out = out.iter().map(|d| d.key.clone()).collect();
            self.problem_count -= state.settled_problems.len();
            self.problem_count += problems.len();
            self.fresh.extend(problems.iter().cloned());
            state.settled_problems = problems;
            touched.extend(state.out.iter().cloned());
        }
        for d in out {
            self.objects.insert(d.key.clone(), d);
        }
        if self
            .keys
            .get(key)
            .is_some_and(|s| s.candidates.is_empty() && s.problems.is_empty() && s.held.is_empty())
        {
            self.keys.remove(key);
        }
        touched
    }

    /// The service keys whose objects a batch that touched `dirty` may
    /// have changed, `before` and `after` being the states around it: the
    /// services it names, and for a cluster whose health or place changed
    /// (the model reports both as health), its gateway-mode services
    /// (gateway readiness), federated ones (federation eligibility, and
    /// the cluster's tier in `<svc>-nearest`) and MCS ones (eligibility,
    /// the zone of its endpoints) — nothing else reads a cluster's health
    /// or place. A new place of the local cluster moves every other
    /// cluster's tier: the model names every federated service then.
    pub(crate) fn keys_of(
        dirty: &Dirty,
        before: &ClusterSet,
        after: &ClusterSet,
    ) -> BTreeSet<ObjectKey> {
        let mut keys: BTreeSet<ObjectKey> = dirty.services.iter().map(|(_, k)| k.clone()).collect();
        for name in &dirty.health {
            for c in [before, after].into_iter().filter_map(|s| s.get(name)) {
                keys.extend(
                    c.services
                        .values()
                        .filter(|s| {
                            s.federated || s.mcs.is_some() || s.export == Some(ExportMode::Gateway)
                        })
                        .map(|s| s.key.clone()),
                );
            }
        }
        keys
    }

    /// Every desired object, by key.
    pub(crate) fn objects(&self) -> &BTreeMap<ObjectRef, Desired> {
        &self.objects
    }

    /// Every problem met, in no particular order.
    #[cfg(test)]
    pub(crate) fn problems(&self) -> impl Iterator<Item = &Problem> {
        self.keys
            .values()
            .flat_map(|k| k.problems.iter().chain(&k.settled_problems))
    }

    /// How many problems there are.
    pub(crate) fn problem_count(&self) -> usize {
        self.problem_count
    }

    /// The problems of the services recomputed since the last call (the
    /// controller reports each once).
    pub(crate) fn take_fresh(&mut self) -> Vec<Problem> {
        std::mem::take(&mut self.fresh)
    }

    /// What `super::held_by_budget` gives for the same state.
    pub(crate) fn held(&self) -> BTreeSet<(Arc<str>, Arc<str>)> {
        self.refused.keys().cloned().collect()
    }
}

/// The candidates of one key, rendered.
fn compute(set: &ClusterSet, key: &ObjectKey, settings: &MirrorSettings) -> KeyState {
    let mut units: Vec<Unit> = Vec::new();
    let mut problems = Vec::new();
    key_units(set, key, settings, &mut units, &mut problems);
    let candidates = units.into_iter().map(candidate).collect();
    KeyState {
        candidates,
        problems,
        held: key_held(set, key),
        out: Vec::new(),
        settled_problems: Vec::new(),
    }
}

fn candidate(unit: Unit) -> Candidate {
    let short = fit_name(&unit.full_name, MAX_SERVICE_NAME);
    let name = service_ref(&unit.namespace, &short);
    let shortened = (short != unit.full_name).then(|| Problem {
        object: name.clone(),
        message: format!(
            "name {:?} is longer than {MAX_SERVICE_NAME} characters; shortened (full name in annotation {})",
            unit.full_name,
            super::FULL_NAME_ANNOTATION
        ),
    });
    let rank = unit.rank.clone();
    let child = unit.parent.is_some();
    let describe = describe(&unit);
    let mut out = BTreeMap::new();
    render(unit, name.clone(), shortened.is_some(), &mut out);
    Candidate {
        rank,
        name,
        shortened,
        child,
        describe,
        objects: out.into_values().collect(),
    }
}
