//! "What we own and what we set": whether an object as the API holds it
//! carries every field a desired object sets, with the same value, on the
//! typed fields.
//!
//! The rule, field by field: a field the desired object leaves unset
//! (`None`) is anyone's (server defaults, other managers' fields); a map
//! we set (labels, annotations) must hold each of our entries, and may
//! hold more; a list we set must have as many entries, each holding ours.
//! The desired objects set only the fields compared here
//! (`mirror::desired`): a new one must be compared here too, or a manual
//! edit of it would not be repaired (a change of what we write is still
//! seen through the applied-hash annotation). Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::k8s::crd::{ImportPort, ServiceImport};
use crate::mirror::Object;

/// Whether `have` holds every field `want` sets with the same value.
pub(crate) fn contains(have: &Object, want: &Object) -> bool {
    match (have, want) {
        (Object::Service(h), Object::Service(w)) => service(h, w),
        (Object::EndpointSlice(h), Object::EndpointSlice(w)) => slice(h, w),
        (Object::ServiceImport { import: h, .. }, Object::ServiceImport { import: w, .. }) => {
            import(h, w)
        }
        _ => false,
    }
}

/// A field we set holds our value; one we leave unset is anyone's.
fn opt<T: PartialEq>(have: &Option<T>, want: &Option<T>) -> bool {
    want.is_none() || have == want
}

/// A field we set (`want` is `Some`) exists and `same` holds.
fn opt_with<T>(have: &Option<T>, want: &Option<T>, same: impl Fn(&T, &T) -> bool) -> bool {
    match (have, want) {
        (_, None) => true,
        (Some(h), Some(w)) => same(h, w),
        (None, Some(_)) => false,
    }
}

/// A list we set, as [`opt_with`] and [`list`]; an empty list of ours is
/// also held by an absent one, since the API server drops empty lists (a
/// headless Service without ports reads back without `spec.ports`) and
/// the object would otherwise be rewritten on every pass.
fn opt_list<T>(
    have: &Option<Vec<T>>,
    want: &Option<Vec<T>>,
    same: impl Fn(&T, &T) -> bool,
) -> bool {
    match (have, want) {
        (None, Some(w)) if w.is_empty() => true,
        _ => opt_with(have, want, |h, w| list(h, w, &same)),
    }
}

/// As many entries, each holding ours.
fn list<T>(have: &[T], want: &[T], same: impl Fn(&T, &T) -> bool) -> bool {
    have.len() == want.len() && have.iter().zip(want).all(|(h, w)| same(h, w))
}

/// Every entry of ours, others allowed.
fn entries(
    have: &Option<BTreeMap<String, String>>,
    want: &Option<BTreeMap<String, String>>,
) -> bool {
    opt_with(have, want, |h, w| {
        w.iter().all(|(k, v)| h.get(k) == Some(v))
    })
}

fn meta(have: &ObjectMeta, want: &ObjectMeta) -> bool {
    opt(&have.name, &want.name)
        && opt(&have.namespace, &want.namespace)
        && entries(&have.labels, &want.labels)
        && entries(&have.annotations, &want.annotations)
}

fn service(have: &Service, want: &Service) -> bool {
    meta(&have.metadata, &want.metadata)
        && opt_with(&have.spec, &want.spec, |h, w| {
            opt_list(&h.ports, &w.ports, service_port)
                && opt(&h.cluster_ip, &w.cluster_ip)
                && opt(&h.type_, &w.type_)
                && opt(&h.ip_family_policy, &w.ip_family_policy)
                && opt(&h.ip_families, &w.ip_families)
                && opt(&h.session_affinity, &w.session_affinity)
                && opt(&h.session_affinity_config, &w.session_affinity_config)
                && opt(&h.traffic_distribution, &w.traffic_distribution)
        })
}

fn service_port(have: &ServicePort, want: &ServicePort) -> bool {
    have.port == want.port
        && opt(&have.name, &want.name)
        && opt(&have.protocol, &want.protocol)
        && opt(&have.app_protocol, &want.app_protocol)
        && opt(&have.target_port, &want.target_port)
}

fn slice(have: &EndpointSlice, want: &EndpointSlice) -> bool {
    meta(&have.metadata, &want.metadata)
        && have.address_type == want.address_type
        && list(&have.endpoints, &want.endpoints, endpoint)
        && opt_list(&have.ports, &want.ports, slice_port)
}

fn endpoint(have: &Endpoint, want: &Endpoint) -> bool {
    have.addresses == want.addresses
        && opt_with(&have.conditions, &want.conditions, |h, w| {
            opt(&h.ready, &w.ready)
                && opt(&h.serving, &w.serving)
                && opt(&h.terminating, &w.terminating)
        })
        && opt(&have.hostname, &want.hostname)
        && opt(&have.node_name, &want.node_name)
        && opt(&have.zone, &want.zone)
}

fn slice_port(have: &EndpointPort, want: &EndpointPort) -> bool {
    opt(&have.port, &want.port)
        && opt(&have.name, &want.name)
        && opt(&have.protocol, &want.protocol)
        && opt(&have.app_protocol, &want.app_protocol)
}

fn import(have: &ServiceImport, want: &ServiceImport) -> bool {
    let (h, w) = (&have.spec, &want.spec);
    meta(&have.metadata, &want.metadata)
        && opt(&h.type_, &w.type_)
        && opt_list(&h.ports, &w.ports, import_port)
        && opt(&h.ips, &w.ips)
        && opt(&h.ip_families, &w.ip_families)
        && opt(&h.session_affinity, &w.session_affinity)
        && opt(&h.session_affinity_config, &w.session_affinity_config)
        && opt(&h.internal_traffic_policy, &w.internal_traffic_policy)
        && opt(&h.traffic_distribution, &w.traffic_distribution)
}

fn import_port(have: &ImportPort, want: &ImportPort) -> bool {
    have.port == want.port
        && opt(&have.name, &want.name)
        && opt(&have.protocol, &want.protocol)
        && opt(&have.app_protocol, &want.app_protocol)
}

#[cfg(test)]
mod tests;
