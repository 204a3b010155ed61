//! The cluster's ClusterProperty objects (`about.k8s.io`, KEP-2149), read
//! by one watch in every mode: the place the cluster states for itself
//! (`region.clusterset-dns.io`, `zone.clusterset-dns.io`; docs/locality.md)
//! always, and its MCS cluster id (`cluster.clusterset.k8s.io`) with
//! `--mcs`, which this module routes to [`super::mcs`].
//!
//! Owns the place from properties: each value as last delivered (valid, or
//! why not), the rule that one invalid value makes the whole place unknown
//! (a zone without the region it was written with would be a guess), and
//! telling the model only when that place changes. Other properties are
//! not ours: they are neither applied nor remembered through a relist. A
//! cluster that serves no ClusterProperty API (or may not list it) is fed
//! an empty list by the shell, so sync never waits for it. Like the rest of
//! the state it must not do I/O or read the clock.

use std::sync::Arc;

use kube::api::DynamicObject;

use super::{Adjusted, ClusterState, Output};
use crate::model::Event;
use crate::model::objects::ObjectKey;
use crate::source::convert::mcs::{ClusterProperty, Property, convert_property, from_dynamic};
use crate::vocab::mcs::CLUSTER_ID_PROPERTY;
use crate::vocab::place::{PROPERTY_REGION, PROPERTY_ZONE, Place, PlaceFrom};

/// One place property as last delivered: its value, or why it is unusable.
type Value = Result<Arc<str>, String>;

/// The place properties of a cluster.
#[derive(Debug, Clone)]
pub(super) struct Properties {
    /// `region.clusterset-dns.io`, if the cluster has it.
    region: Option<Value>,
    /// `zone.clusterset-dns.io`, if the cluster has it.
    zone: Option<Value>,
    /// The place the model was told (unknown until told otherwise).
    sent: Place,
    /// The watch has listed since the last (re)start.
    pub(super) listed: bool,
}

/// The place a cluster's ClusterProperty objects state, for status pages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PlaceReport {
    /// The place (unknown when a value is invalid).
    pub place: Place,
    /// Why a property's value is not used, if one is not.
    pub problem: Option<String>,
}

impl Properties {
    /// No watch: nothing is waited for.
    pub(super) fn off() -> Self {
        Self {
            region: None,
            zone: None,
            sent: Place::default(),
            listed: true,
        }
    }

    /// The state for new watches: what is held stays until they list.
    pub(super) fn restart(self) -> Self {
        Self {
            listed: true,
            ..self
        }
    }

    /// The place the values state: unknown as a whole when one is invalid.
    fn place(&self) -> Place {
        let valid = |v: &Option<Value>| v.as_ref().map(|r| r.as_ref().ok().cloned());
        match (valid(&self.region), valid(&self.zone)) {
            (Some(None), _) | (_, Some(None)) => Place::default(),
            (region, zone) => Place {
                region: region.flatten(),
                zone: zone.flatten(),
            },
        }
    }

    /// The slot of a place property's name.
    fn slot(&mut self, name: &str) -> Option<&mut Option<Value>> {
        match name {
            PROPERTY_REGION => Some(&mut self.region),
            PROPERTY_ZONE => Some(&mut self.zone),
            _ => None,
        }
    }

    fn holds(&self, name: &str) -> bool {
        match name {
            PROPERTY_REGION => self.region.is_some(),
            PROPERTY_ZONE => self.zone.is_some(),
            _ => false,
        }
    }
}

/// The key a property is held under: its name (cluster-scoped).
fn key(name: &str) -> ObjectKey {
    ObjectKey::new("", name)
}

impl ClusterState {
    /// A ClusterProperty watch runs: sync waits for its list (the shell
    /// feeds an empty one when the cluster serves no such API).
    pub(crate) fn set_property_watch(&mut self) {
        self.properties.listed = false;
    }

    /// The place from the cluster's properties, for status pages.
    pub(crate) fn place_report(&self) -> PlaceReport {
        let problem = [&self.properties.region, &self.properties.zone]
            .into_iter()
            .find_map(|v| v.as_ref().and_then(|r| r.as_ref().err().cloned()));
        PlaceReport {
            place: self.properties.place(),
            problem,
        }
    }

    /// The key of a delivered ClusterProperty, if it is one we read: the
    /// place's always, the cluster id's with `--mcs`.
    pub(super) fn property_key(&self, o: &DynamicObject) -> Option<ObjectKey> {
        let name = o.metadata.name.as_deref()?;
        let ours = match name {
            CLUSTER_ID_PROPERTY => self.mcs_on(),
            _ => name == PROPERTY_REGION || name == PROPERTY_ZONE,
        };
        ours.then(|| key(name))
    }

    /// Every property held (a relist deletes those it does not bring back).
    pub(super) fn property_keys(&self) -> Vec<ObjectKey> {
        [CLUSTER_ID_PROPERTY, PROPERTY_REGION, PROPERTY_ZONE]
            .into_iter()
            .filter(|n| self.holds_property(n))
            .map(key)
            .collect()
    }

    /// Whether property `name` is held.
    pub(super) fn holds_property(&self, name: &str) -> bool {
        match name {
            CLUSTER_ID_PROPERTY => self.mcs.has_id(),
            _ => self.properties.holds(name),
        }
    }

    /// A ClusterProperty we read was added or changed. An invalid place
    /// value is reported and makes the place unknown; a property that does
    /// not decode counts as invalid.
    pub(super) fn property_apply(&mut self, o: &DynamicObject, out: &mut Output) {
        let Some(name) = o.metadata.name.clone() else {
            return;
        };
        let converted = from_dynamic::<ClusterProperty>(o).and_then(|p| convert_property(&p));
        if name == CLUSTER_ID_PROPERTY {
            self.id_apply(converted, out);
            return;
        }
        let value = match converted {
            Ok(Some(Property::Region(v) | Property::Zone(v))) => Ok(v),
            // The name said which property it is.
            Ok(_) => return,
            Err(e) => {
                out.adjusted
                    .push(Adjusted::failed(format!("ClusterProperty {name}"), &e));
                Err(e.to_string())
            }
        };
        if let Some(slot) = self.properties.slot(&name) {
            *slot = Some(value);
        }
        self.send_place(out);
    }

    /// ClusterProperty `key` is gone.
    pub(super) fn property_gone(&mut self, key: &ObjectKey, out: &mut Output) {
        if &*key.name == CLUSTER_ID_PROPERTY {
            self.id_gone(out);
        } else if let Some(slot) = self.properties.slot(&key.name) {
            *slot = None;
            self.send_place(out);
        }
    }

    /// Tells the model the place if it changed.
    fn send_place(&mut self, out: &mut Output) {
        let place = self.properties.place();
        if place != self.properties.sent {
            self.properties.sent = place.clone();
            out.events.push(Event::PlaceApplied {
                cluster: self.name.clone(),
                from: PlaceFrom::Property,
                place,
            });
        }
    }
}
