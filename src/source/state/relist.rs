//! How one watch's events reach the state: a [`Feed`] is the
//! [`Index`] of one [`Watch`] over the [`ClusterState`], so the relist
//! bookkeeping (which keys a new list did not bring back) is
//! [`Relist`]'s, done once for every watch, and this module only routes
//! each call to the kind's handler.
//!
//! The handlers keep the state's rules: an object that does not convert is
//! still a key the list brought (its last good version stays), and an
//! object the list brings that is no longer ours is released by its
//! handler at once. Pure, like the rest of the state.

use kube::runtime::watcher::Event as WatchEvent;

use super::{ClusterState, Object, Output, Watch, meta_key, meta_key_any};
use crate::k8s::index::{Index, Relist};
use crate::model::objects::ObjectKey;

/// The key of a watch that holds at most one object (the gateway Service).
fn single() -> ObjectKey {
    ObjectKey::new("", "")
}

/// One watch's view of the state, for one event.
pub(super) struct Feed<'a> {
    pub(super) state: &'a mut ClusterState,
    pub(super) watch: Watch,
    /// The event is part of a list (not a change the watch saw).
    pub(super) listing: bool,
    pub(super) out: &'a mut Output,
}

impl ClusterState {
    /// Passes `event` of watch `w` through its [`Relist`].
    pub(super) fn feed(&mut self, w: Watch, event: WatchEvent<Object>, out: &mut Output) {
        if matches!(event, WatchEvent::Init) && w == Watch::Slices {
            self.slice_started = true;
        }
        let listing = matches!(event, WatchEvent::InitApply(_));
        let mut relist = self.relists.remove(&w).unwrap_or_default();
        relist.handle(
            &mut Feed {
                state: self,
                watch: w,
                listing,
                out,
            },
            event,
        );
        self.relists.insert(w, relist);
    }
}

impl Index<Object> for Feed<'_> {
    type Key = ObjectKey;

    fn key(&self, obj: &Object) -> Option<ObjectKey> {
        match (self.watch, obj) {
            (Watch::Gateway, Object::Service(_)) => Some(single()),
            (Watch::Properties, Object::Dynamic(o)) => self.state.property_key(o),
            (Watch::Services(_), Object::Service(s)) => {
                meta_key(s.metadata.namespace.as_deref(), s.metadata.name.as_deref())
            }
            (Watch::Slices, Object::Slice(s)) => meta_key_any(s),
            (Watch::Exports | Watch::Imports, Object::Dynamic(o)) => {
                meta_key(o.metadata.namespace.as_deref(), o.metadata.name.as_deref())
            }
            // An object of the wrong kind for the watch is ignored.
            _ => None,
        }
    }

    fn apply(&mut self, obj: Object) {
        let (st, out) = (&mut *self.state, &mut *self.out);
        match (self.watch, &obj) {
            (Watch::Services(n), Object::Service(s)) => st.service_apply(n, s, out),
            (Watch::Slices, Object::Slice(s)) => st.slice_delivered(s, self.listing, out),
            (Watch::Gateway, Object::Service(s)) => st.gateway_apply(s, self.listing, out),
            (Watch::Exports, Object::Dynamic(o)) => st.export_apply(o, out),
            (Watch::Properties, Object::Dynamic(o)) => st.property_apply(o, out),
            (Watch::Imports, Object::Dynamic(o)) => st.import_apply(o, out),
            _ => {}
        }
    }

    fn delete(&mut self, key: &ObjectKey, obj: Option<Object>) {
        let (st, out) = (&mut *self.state, &mut *self.out);
        match (self.watch, obj) {
            (Watch::Services(n), Some(Object::Service(s))) => st.service_delete(n, &s, out),
            (Watch::Services(n), _) => {
                st.note_external_name(n, key, false, out);
                st.release(n, key, out);
            }
            (Watch::Slices, Some(Object::Slice(s))) => st.slice_delete(&s, out),
            (Watch::Slices, _) => st.remove_slice(key, out),
            (Watch::Gateway, _) => st.gateway_delete(out),
            (Watch::Exports, _) => st.export_gone(key, out),
            (Watch::Properties, _) => st.property_gone(key, out),
            (Watch::Imports, _) => st.import_gone(key.clone(), out),
        }
    }

    fn keys(&self) -> Vec<ObjectKey> {
        let st = &*self.state;
        match self.watch {
            Watch::Services(n) => {
                let bit = 1u32 << n;
                st.services
                    .iter()
                    .filter(|(_, h)| h.mask & bit != 0)
                    .map(|(k, _)| k.clone())
                    .chain(st.external_names_of(n).cloned())
                    .collect()
            }
            Watch::Slices => st.slices.keys().cloned().collect(),
            Watch::Gateway => st.has_gateway.then(single).into_iter().collect(),
            Watch::Exports => st.mcs.exports.keys().cloned().collect(),
            Watch::Properties => st.property_keys(),
            Watch::Imports => st.mcs.imports.keys().cloned().collect(),
        }
    }

    fn holds(&self, key: &ObjectKey) -> bool {
        let st = &*self.state;
        match self.watch {
            Watch::Services(n) => {
                st.services
                    .get(key)
                    .is_some_and(|h| h.mask & (1u32 << n) != 0)
                    || st.external_names_of(n).any(|k| k == key)
            }
            Watch::Slices => st.slices.contains_key(key),
            Watch::Gateway => st.has_gateway,
            Watch::Exports => st.mcs.exports.contains_key(key),
            Watch::Properties => st.holds_property(&key.name),
            Watch::Imports => st.mcs.imports.contains_key(key),
        }
    }

    fn listed(&mut self) {
        let (st, out) = (&mut *self.state, &mut *self.out);
        match self.watch {
            Watch::Services(n) => st.service_listed(n, out),
            Watch::Slices => st.slice_listed = true,
            Watch::Gateway => st.gateway_listed = true,
            Watch::Exports => st.mcs.exports_listed = true,
            Watch::Properties => st.properties.listed = true,
            Watch::Imports => st.mcs.imports_listed = true,
        }
        st.check_synced();
    }
}

/// The relist state of every watch of a cluster.
pub(super) type Relists = std::collections::HashMap<Watch, Relist<ObjectKey>>;
