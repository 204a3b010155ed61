//! What one linked cluster may make us hold: a budget of exported services
//! and endpoints, and which of its services fit in it.
//!
//! Owns the admission rule (docs/live.md, "A budget per linked cluster"): a cluster over budget keeps
//! its oldest exported services (creationTimestamp, then namespace/name)
//! whose endpoints fit, and refuses the others. Sources apply it before
//! anything reaches the model, so memory follows the budget rather than what
//! a cluster exports; the model only learns that a service exists and was
//! refused. It must not know where counts come from (files or watches) and
//! must not hold endpoints, only their number per service.

use std::collections::{BTreeSet, HashMap};

use super::objects::ObjectKey;

/// Default most exported services held per cluster.
pub const DEFAULT_MAX_SERVICES: usize = 20_000;
/// Default most endpoint addresses held per cluster.
pub const DEFAULT_MAX_ENDPOINTS: usize = 500_000;

/// The most one cluster's exports may make us hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Exported (or federated) services.
    pub max_services: usize,
    /// Endpoint addresses over all its EndpointSlices.
    pub max_endpoints: usize,
}

impl Budget {
    /// No limit (the local cluster: its exports are our own).
    pub const UNLIMITED: Self = Self {
        max_services: usize::MAX,
        max_endpoints: usize::MAX,
    };

    /// The budget a cluster is held to: none for the local cluster (its
    /// exports are our own), `self` for a linked one.
    pub fn for_cluster(self, local: bool) -> Self {
        if local { Self::UNLIMITED } else { self }
    }
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_services: DEFAULT_MAX_SERVICES,
            max_endpoints: DEFAULT_MAX_ENDPOINTS,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Member {
    created: i64,
    endpoints: usize,
    admitted: bool,
}

/// Services whose admission changed in a [`Admission::settle`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Refused before (or new and refused), admitted now.
    pub admitted: Vec<ObjectKey>,
    /// Admitted before, refused now.
    pub refused: Vec<ObjectKey>,
}

impl Changes {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.admitted.is_empty() && self.refused.is_empty()
    }
}

/// What a budget refuses, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refused {
    /// Services refused.
    pub services: usize,
    /// Their endpoints (not held).
    pub endpoints: usize,
}

/// One cluster's exported services with their endpoint counts, and which
/// of them the budget admits. A new service is admitted until a
/// [`Admission::settle`] says otherwise.
#[derive(Debug, Clone, Default)]
pub struct Admission {
    members: HashMap<ObjectKey, Member>,
    /// Oldest first: the order services are admitted in.
    order: BTreeSet<(i64, ObjectKey)>,
    endpoints: usize,
    refused: Refused,
    /// The oldest refused services, at most [`REFUSED_LISTED`]: found by
    /// the walk that refuses them, so a report costs no walk of its own.
    listed: Vec<ObjectKey>,
    changed: bool,
}

/// Refused services a report names.
pub const REFUSED_LISTED: usize = 20;

impl Admission {
    /// An empty admission.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds service `key` (created at `created`, Unix seconds) or updates
    /// its creation time; a new one has no endpoints yet.
    pub fn service(&mut self, key: &ObjectKey, created: i64) {
        match self.members.get_mut(key) {
            Some(m) if m.created == created => {}
            Some(m) => {
                self.order.remove(&(m.created, key.clone()));
                m.created = created;
                self.order.insert((created, key.clone()));
                self.changed = true;
            }
            None => {
                self.members.insert(
                    key.clone(),
                    Member {
                        created,
                        endpoints: 0,
                        admitted: true,
                    },
                );
                self.order.insert((created, key.clone()));
                self.changed = true;
            }
        }
    }

    /// Changes the endpoint count of service `key` by `delta` (slices come
    /// and go one at a time). Unknown services are ignored.
    pub fn endpoints(&mut self, key: &ObjectKey, delta: isize) {
        if delta == 0 {
            return;
        }
        if let Some(m) = self.members.get_mut(key) {
            let was = m.endpoints;
            m.endpoints = was.saturating_add_signed(delta);
            self.endpoints = self.endpoints - was + m.endpoints;
            if !m.admitted {
                self.refused.endpoints = self.refused.endpoints - was + m.endpoints;
            }
            self.changed = true;
        }
    }

    /// Forgets service `key`.
    pub fn remove(&mut self, key: &ObjectKey) {
        if let Some(m) = self.members.remove(key) {
            self.order.remove(&(m.created, key.clone()));
            self.endpoints -= m.endpoints;
            if !m.admitted {
                self.refused.services -= 1;
                self.refused.endpoints -= m.endpoints;
            }
            self.changed = true;
        }
    }

    /// Whether `key` is admitted (unknown services are not).
    pub fn admitted(&self, key: &ObjectKey) -> bool {
        self.members.get(key).is_some_and(|m| m.admitted)
    }

    /// What is refused now.
    pub fn refused(&self) -> Refused {
        self.refused
    }

    /// The oldest refused services as of the last settle, at most
    /// [`REFUSED_LISTED`].
    pub fn listed(&self) -> &[ObjectKey] {
        &self.listed
    }

    /// The refused services, oldest first, at most `limit` of them.
    pub fn refused_keys(&self, limit: usize) -> Vec<ObjectKey> {
        if self.refused.services == 0 {
            return Vec::new();
        }
        self.order
            .iter()
            .filter(|(_, k)| !self.admitted(k))
            .take(limit)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// Applies `budget` to what changed since the last call: the oldest
    /// services whose endpoints fit are admitted, the rest refused.
    /// Returns the services whose admission changed. Cheap when nothing
    /// changed or everything fits; otherwise one walk over the services.
    pub fn settle(&mut self, budget: Budget) -> Changes {
        self.settle_with(budget, false)
    }

    /// [`Self::settle`] under a new budget, even if no count changed.
    pub fn rebudget(&mut self, budget: Budget) -> Changes {
        self.settle_with(budget, true)
    }

    fn settle_with(&mut self, budget: Budget, force: bool) -> Changes {
        let mut changes = Changes::default();
        if !self.changed && !force {
            return changes;
        }
        self.changed = false;
        let fits_all =
            self.members.len() <= budget.max_services && self.endpoints <= budget.max_endpoints;
        if fits_all && self.refused.services == 0 {
            self.listed.clear();
            return changes;
        }
        let (mut services, mut endpoints) = (0usize, 0usize);
        let mut refused = Refused::default();
        self.listed.clear();
        for (_, key) in &self.order {
            let Some(m) = self.members.get_mut(key) else {
                continue;
            };
            let admit = fits_all
                || (services < budget.max_services
                    && endpoints.saturating_add(m.endpoints) <= budget.max_endpoints);
            if admit {
                services += 1;
                endpoints += m.endpoints;
            } else {
                refused.services += 1;
                refused.endpoints += m.endpoints;
                if self.listed.len() < REFUSED_LISTED {
                    self.listed.push(key.clone());
                }
            }
            if admit != m.admitted {
                m.admitted = admit;
                if admit {
                    changes.admitted.push(key.clone());
                } else {
                    changes.refused.push(key.clone());
                }
            }
        }
        self.refused = refused;
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("ns", name)
    }

    fn names(keys: &[ObjectKey]) -> Vec<&str> {
        keys.iter().map(|k| &*k.name).collect()
    }

    #[test]
    fn over_budget_the_oldest_services_that_fit_are_kept() {
        let budget = Budget {
            max_services: 3,
            max_endpoints: 10,
        };
        let mut a = Admission::new();
        // (name, created, endpoints): added newest first, to show that
        // age, not arrival, decides.
        let services = [
            ("e", 50, 1),
            ("d", 40, 1),
            ("c", 30, 6),
            ("b", 20, 2),
            ("a", 10, 2),
        ];
        for (name, created, endpoints) in services {
            a.service(&key(name), created);
            a.endpoints(&key(name), endpoints);
        }
        let changes = a.settle(budget);
        // a (2) and b (4) fit; c would make 10... it does: 2+2+6 = 10.
        // Then the service limit (3) refuses d and e.
        assert_eq!(names(&changes.refused), ["d", "e"]);
        assert!(changes.admitted.is_empty());
        assert_eq!(
            a.refused(),
            Refused {
                services: 2,
                endpoints: 2
            }
        );
        assert_eq!(names(&a.refused_keys(10)), ["d", "e"]);

        // c grows past the endpoint budget: it is refused, and the room it
        // leaves goes to the oldest that fits (d; e is past the service
        // limit again).
        a.endpoints(&key("c"), 1);
        let changes = a.settle(budget);
        assert_eq!(names(&changes.refused), ["c"]);
        assert_eq!(names(&changes.admitted), ["d"]);
        assert_eq!(
            a.refused(),
            Refused {
                services: 2,
                endpoints: 8
            }
        );

        // Ties on age go by namespace/name: aa, as old as a, comes before b
        // and takes the last service slot from d.
        a.service(&key("aa"), 10);
        let changes = a.settle(budget);
        assert_eq!(names(&changes.refused), ["d"]);
        assert!(changes.admitted.is_empty());
        assert!(a.admitted(&key("aa")));

        // Deleting an old one makes room: c fits again (0 + 2 + 7 = 9).
        a.remove(&key("a"));
        let changes = a.settle(budget);
        assert_eq!(names(&changes.admitted), ["c"]);
        assert!(changes.refused.is_empty());

        // A bigger budget (a reload) admits everything.
        let changes = a.rebudget(Budget {
            max_services: 100,
            max_endpoints: 100,
        });
        assert_eq!(names(&changes.admitted), ["d", "e"]);
        assert_eq!(a.refused(), Refused::default());
        assert!(a.settle(budget).is_empty(), "nothing changed since");
    }

    #[test]
    fn within_budget_settling_costs_nothing_and_admits_all() {
        let mut a = Admission::new();
        for i in 0..1000 {
            a.service(&key(&format!("s{i}")), i);
            a.endpoints(&key(&format!("s{i}")), 10);
        }
        assert!(a.settle(Budget::default()).is_empty());
        assert_eq!(a.refused(), Refused::default());
        assert!(a.admitted(&key("s999")));
        assert!(!a.admitted(&key("unknown")));
        // A service bigger than the whole budget is refused alone.
        a.service(&key("huge"), 5000);
        a.endpoints(&key("huge"), 1_000_000);
        let changes = a.settle(Budget::default());
        assert_eq!(names(&changes.refused), ["huge"]);
        a.endpoints(&key("huge"), -1_000_000);
        assert_eq!(names(&a.settle(Budget::default()).admitted), ["huge"]);
    }

    #[test]
    fn the_refused_listed_follow_every_settle() {
        let budget = Budget {
            max_services: 2,
            max_endpoints: 100,
        };
        let mut a = Admission::new();
        for (i, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
            a.service(&key(name), i as i64);
        }
        a.settle(budget);
        assert_eq!(names(a.listed()), ["c", "d"]);
        assert_eq!(a.listed(), a.refused_keys(REFUSED_LISTED));
        // A refused one goes: the next settle lists the rest.
        a.remove(&key("c"));
        a.settle(budget);
        assert_eq!(names(a.listed()), ["d"]);
        // An admitted one goes: the oldest refused takes its place.
        a.remove(&key("a"));
        a.settle(budget);
        assert!(a.listed().is_empty(), "{:?}", a.listed());
        // More than a report names: the oldest REFUSED_LISTED.
        for i in 0..30 {
            a.service(&key(&format!("n{i:02}")), 100 + i);
        }
        a.settle(budget);
        assert_eq!(a.listed().len(), REFUSED_LISTED);
        assert_eq!(a.listed(), a.refused_keys(REFUSED_LISTED));
        assert_eq!(a.refused().services, 30);
    }
}
