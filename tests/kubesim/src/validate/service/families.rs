//! A Service's IP fields (`clusterIP`, `clusterIPs`, `ipFamilies`, `ipFamilyPolicy`) as
//! kube-apiserver's Service registry settles them before it allocates addresses and validates:
//! `patchAllocatedValues` and `normalizeClusterIPs` (storage), the allocator's
//! `initIPFamilyFields` (which also checks the fields with
//! `ValidateServiceClusterIPsRelatedFields`), and the strategy's `dropTypeDependentFields`.
//!
//! It owns the decision of which families a Service gets on which cluster; the addresses
//! themselves are taken in the store ([`crate::store`]), which owns the allocators.

use std::net::IpAddr;

use serde_json::{Map, Value, json};

use crate::kubemsg::{go_quote, go_string_slice};
use crate::status::{ApiError, Cause, cause};

/// The IP families a cluster has Service ranges for. IPv4 always, and primary (kubesim's
/// `--service-cidr` is IPv4); IPv6 as well when an IPv6 range is configured, which makes the
/// cluster dual-stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServiceFamilies {
    /// An IPv6 range is configured besides the IPv4 one.
    pub dual_stack: bool,
}

impl ServiceFamilies {
    /// The family of `--service-cluster-ip-range[0]`, the default of single-stack Services.
    const PRIMARY: &'static str = "IPv4";

    fn has(self, family: &str) -> bool {
        family == "IPv4" || (family == "IPv6" && self.dual_stack)
    }

    fn count(self) -> usize {
        if self.dual_stack { 2 } else { 1 }
    }
}

const SINGLE_STACK: &str = "SingleStack";
const REQUIRE_DUAL_STACK: &str = "RequireDualStack";
const PREFER_DUAL_STACK: &str = "PreferDualStack";

/// The IP fields of a Service spec (and what they depend on), as kube's code reads them:
/// absent and empty are the same.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct IpFields {
    /// `type`.
    pub ty: String,
    /// `clusterIP`.
    pub cluster_ip: String,
    /// `clusterIPs`.
    pub cluster_ips: Vec<String>,
    /// `ipFamilies`.
    pub families: Vec<String>,
    /// `ipFamilyPolicy`.
    pub policy: Option<String>,
    /// `selector` has at least one entry.
    pub selector: bool,
}

fn strings(spec: &Value, key: &str) -> Vec<String> {
    spec.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| s.as_str().unwrap_or_default().to_owned())
        .collect()
}

fn set_or_remove(spec: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    match value {
        Some(v) => {
            spec.insert(key.to_owned(), v);
        }
        None => {
            spec.remove(key);
        }
    }
}

impl IpFields {
    /// Reads the fields from a Service `spec`.
    pub(crate) fn read(spec: &Value) -> IpFields {
        let text = |key: &str| spec.get(key).and_then(Value::as_str).unwrap_or_default();
        IpFields {
            ty: text("type").to_owned(),
            cluster_ip: text("clusterIP").to_owned(),
            cluster_ips: strings(spec, "clusterIPs"),
            families: strings(spec, "ipFamilies"),
            policy: spec
                .get("ipFamilyPolicy")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
                .map(str::to_owned),
            selector: spec
                .get("selector")
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty()),
        }
    }

    /// Writes the fields back into `spec`, leaving out the empty ones as kube's JSON does.
    pub(crate) fn write(&self, spec: &mut Value) {
        let Some(spec) = spec.as_object_mut() else {
            return;
        };
        let nonempty = |v: &Vec<String>| (!v.is_empty()).then(|| json!(v));
        set_or_remove(
            spec,
            "clusterIP",
            (!self.cluster_ip.is_empty()).then(|| json!(self.cluster_ip)),
        );
        set_or_remove(spec, "clusterIPs", nonempty(&self.cluster_ips));
        set_or_remove(spec, "ipFamilies", nonempty(&self.families));
        set_or_remove(
            spec,
            "ipFamilyPolicy",
            self.policy.as_ref().map(|p| json!(p)),
        );
    }

    /// Not ExternalName: kube's `needsClusterIP` (a headless Service needs one too: `None`).
    pub(crate) fn needs_cluster_ip(&self) -> bool {
        self.ty != "ExternalName"
    }

    /// kube's `isHeadlessService`: `clusterIPs` is exactly `["None"]`.
    pub(crate) fn is_headless(&self) -> bool {
        self.cluster_ips.len() == 1 && self.cluster_ips[0] == "None"
    }

    fn policy_is(&self, policy: &str) -> bool {
        self.policy.as_deref() == Some(policy)
    }

    /// kube's `isMatchingPreferDualStackClusterIPFields`: an update of a PreferDualStack
    /// Service that keeps its type, addresses and families, which is neither upgraded nor
    /// downgraded when the cluster's families changed since.
    pub(crate) fn matching_prefer_dual_stack(&self, old: Option<&IpFields>) -> bool {
        let Some(old) = old else { return false };
        self.policy.is_some()
            && old.ty == self.ty
            && self.needs_cluster_ip()
            && self.policy_is(PREFER_DUAL_STACK)
            && old.policy.as_deref().is_none_or(|p| p == PREFER_DUAL_STACK)
            && old.cluster_ips == self.cluster_ips
            && old.families == self.families
    }
}

/// The family of an address as Go's `netutils` tells it (an IPv4-mapped IPv6 address is
/// IPv4), or None when it is no address.
pub(crate) fn family_of(ip: &str) -> Option<&'static str> {
    match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(_) => Some("IPv4"),
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => Some("IPv4"),
        IpAddr::V6(_) => Some("IPv6"),
    }
}

fn other_family(family: &str) -> &'static str {
    if family == "IPv4" { "IPv6" } else { "IPv4" }
}

/// What kube-apiserver does to a Service's IP fields before it allocates and validates, given
/// the stored `old` on update and the cluster's `families`: allocated values the request left
/// out are kept, `clusterIPs` follows `clusterIP`, `ipFamilyPolicy` and `ipFamilies` are
/// defaulted, and a switch to ExternalName drops the fields it no longer has. Refuses what
/// kube's allocator refuses before taking any address (422).
pub(crate) fn prepare(
    v: &mut Value,
    old: Option<&Value>,
    families: ServiceFamilies,
) -> Result<(), ApiError> {
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let Some(spec) = v.get_mut("spec") else {
        return Ok(());
    };
    let mut f = IpFields::read(spec);
    let before = old.and_then(|o| o.get("spec")).map(IpFields::read);
    if let Some(o) = &before {
        patch_allocated_values(&mut f, o);
    }
    normalize_cluster_ips(&mut f, before.as_ref());
    init_ip_family_fields(&mut f, before.as_ref(), families)
        .map_err(|causes| ApiError::invalid("", "Service", &name, causes))?;
    if let Some(o) = &before {
        drop_type_dependent_fields(&mut f, o);
    }
    f.write(spec);
    Ok(())
}

/// kube's `patchAllocatedValues` (the addresses; node ports are the store's): an update that
/// leaves out `clusterIP` or `clusterIPs` keeps the stored ones, so a client can send the same
/// manifest again.
fn patch_allocated_values(f: &mut IpFields, old: &IpFields) {
    if old.needs_cluster_ip() && f.needs_cluster_ip() {
        if f.cluster_ip.is_empty() {
            f.cluster_ip.clone_from(&old.cluster_ip);
        }
        if f.cluster_ips.is_empty() && !old.cluster_ips.is_empty() {
            f.cluster_ips.clone_from(&old.cluster_ips);
        }
    }
}

/// kube's `normalizeClusterIPs`: an old client sets only `clusterIP`, so `clusterIPs` follows
/// it where the client plainly meant that.
fn normalize_cluster_ips(f: &mut IpFields, old: Option<&IpFields>) {
    let Some(old) = old else {
        if !f.cluster_ip.is_empty() && f.cluster_ips.is_empty() {
            f.cluster_ips = vec![f.cluster_ip.clone()];
        }
        return;
    };
    // An old client that patched another field and left out clusterIPs.
    if !old.cluster_ips.is_empty() && f.cluster_ips.is_empty() && old.cluster_ip == f.cluster_ip {
        f.cluster_ips.clone_from(&old.cluster_ips);
    }
    if old.cluster_ip != f.cluster_ip && old.cluster_ips == f.cluster_ips {
        if !old.cluster_ip.is_empty() && f.cluster_ip.is_empty() {
            // Clearing clusterIP clears clusterIPs on the client's behalf.
            f.cluster_ips.clear();
        } else {
            f.cluster_ips = vec![f.cluster_ip.clone()];
        }
    }
}

/// kube's `dropTypeDependentFields` for the IP fields: a Service that becomes ExternalName
/// loses the addresses, families and policy the request did not change.
fn drop_type_dependent_fields(f: &mut IpFields, old: &IpFields) {
    if !old.needs_cluster_ip() || f.needs_cluster_ip() {
        return;
    }
    if f.cluster_ip == old.cluster_ip && f.cluster_ips == old.cluster_ips {
        f.cluster_ip.clear();
        f.cluster_ips.clear();
    }
    if f.families == old.families {
        f.families.clear();
    }
    if f.policy == old.policy {
        f.policy = None;
    }
}

fn invalid(field: impl Into<String>, value: &str, why: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {value}: {why}"),
    )
}

/// kube's `initIPFamilyFields`: defaults `ipFamilyPolicy` (the old one on update; else
/// RequireDualStack for a headless Service without selector, SingleStack otherwise) and
/// `ipFamilies` from the addresses given, the policy and the cluster's families; refuses
/// families the cluster does not have and policies the fields contradict.
fn init_ip_family_fields(
    f: &mut IpFields,
    old: Option<&IpFields>,
    cluster: ServiceFamilies,
) -> Result<(), Vec<Cause>> {
    if !f.needs_cluster_ip() || f.matching_prefer_dual_stack(old) {
        return Ok(());
    }
    if f.policy.is_none() {
        f.policy = Some(match old.and_then(|o| o.policy.clone()) {
            Some(p) => p,
            None if f.cluster_ip == "None" && !f.selector => REQUIRE_DUAL_STACK.to_owned(),
            None => SINGLE_STACK.to_owned(),
        });
    }
    let errors = cluster_ips_related_fields(f);
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut errors = old.map(|o| policy_on_update(f, o)).unwrap_or_default();
    if f.policy_is(SINGLE_STACK) {
        let policy = go_quote(SINGLE_STACK);
        if f.cluster_ips.len() == 2 {
            errors.push(invalid("spec.ipFamilyPolicy", &policy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"));
        }
        if f.families.len() == 2 {
            errors.push(invalid("spec.ipFamilyPolicy", &policy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"));
        }
    }
    infer_families(f, cluster, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    if f.cluster_ip == "None" && !f.selector {
        // Headless without selector: any families go, on any cluster, as kube lets them.
        if f.families.is_empty() {
            f.families.push(ServiceFamilies::PRIMARY.to_owned());
        }
        if f.families.len() < 2 && !f.policy_is(SINGLE_STACK) {
            f.families.push(other_family(&f.families[0]).to_owned());
        }
        return Ok(());
    }
    complete_families(f, cluster)
}

/// The checks of an update's policy: SingleStack releases a secondary address or family that
/// the request kept as it was; another policy may not drop one.
fn policy_on_update(f: &mut IpFields, old: &IpFields) -> Vec<Cause> {
    let mut errors = Vec::new();
    if f.policy_is(SINGLE_STACK) {
        if f.cluster_ips == old.cluster_ips && f.cluster_ips.len() > 1 {
            f.cluster_ips.truncate(1);
        }
        if f.families == old.families && f.families.len() > 1 {
            f.families.truncate(1);
        }
        return errors;
    }
    let policy = go_quote(f.policy.as_deref().unwrap_or_default());
    if !f.cluster_ips.is_empty() && f.cluster_ips.len() < old.cluster_ips.len() {
        errors.push(invalid(
            "spec.ipFamilyPolicy",
            &policy,
            "must be 'SingleStack' to release the secondary cluster IP",
        ));
    }
    if !f.families.is_empty() && f.families.len() < old.families.len() {
        errors.push(invalid(
            "spec.ipFamilyPolicy",
            &policy,
            "must be 'SingleStack' to release the secondary IP family",
        ));
    }
    errors
}

/// Adds the family of each given address that `ipFamilies` does not name, if the cluster has
/// it.
fn infer_families(f: &mut IpFields, cluster: ServiceFamilies, errors: &mut Vec<Cause>) {
    for (i, ip) in f.cluster_ips.iter().enumerate() {
        if ip == "None" {
            break;
        }
        let family = family_of(ip).unwrap_or("unknown");
        if i >= f.families.len() {
            if cluster.has(family) {
                f.families.push(family.to_owned());
            } else {
                errors.push(invalid(
                    format!("spec.clusterIPs[{i}]"),
                    &go_string_slice(&f.cluster_ips),
                    &format!("{family} is not configured on this cluster"),
                ));
            }
        }
    }
}

/// The end of `initIPFamilyFields` for a Service that gets addresses (or is headless with a
/// selector): the families must be the cluster's; none given is the primary one; a dual-stack
/// policy on a dual-stack cluster adds the other.
fn complete_families(f: &mut IpFields, cluster: ServiceFamilies) -> Result<(), Vec<Cause>> {
    let mut errors = Vec::new();
    if f.policy_is(REQUIRE_DUAL_STACK) && cluster.count() < 2 {
        errors.push(invalid(
            "spec.ipFamilyPolicy",
            &go_quote(REQUIRE_DUAL_STACK),
            "this cluster is not configured for dual-stack services",
        ));
    }
    for (i, family) in f.families.iter().enumerate() {
        if !cluster.has(family) {
            errors.push(invalid(
                format!("spec.ipFamilies[{i}]"),
                &go_quote(family),
                "not configured on this cluster",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    if f.families.is_empty() {
        f.families.push(ServiceFamilies::PRIMARY.to_owned());
    }
    if !f.policy_is(SINGLE_STACK) && f.families.len() == 1 && cluster.count() == 2 {
        f.families.push(other_family(&f.families[0]).to_owned());
    }
    Ok(())
}

/// kube's `ValidateServiceClusterIPsRelatedFields`: `clusterIPs` agrees with `clusterIP`,
/// holds at most one valid address per family (or only `None`) and matches `ipFamilies`;
/// `ipFamilies` and `ipFamilyPolicy` hold supported values, no family twice.
pub(crate) fn cluster_ips_related_fields(f: &IpFields) -> Vec<Cause> {
    if !f.needs_cluster_ip() {
        return Vec::new();
    }
    let mut errors = Vec::new();
    let ips = go_string_slice(&f.cluster_ips);
    if !f.cluster_ip.is_empty() {
        if f.cluster_ips.is_empty() {
            errors.push(cause(
                "FieldValueRequired",
                "spec.clusterIPs",
                "Required value",
            ));
        } else if f.cluster_ips[0] != f.cluster_ip {
            errors.push(invalid(
                "spec.clusterIPs",
                &ips,
                "first value must match `clusterIP`",
            ));
        }
    } else if !f.cluster_ips.is_empty() {
        errors.push(invalid(
            "spec.clusterIPs",
            &ips,
            "must be empty when `clusterIP` is not specified",
        ));
    }
    families_and_policy(f, &mut errors);
    if !cluster_ip_values(f, &mut errors) {
        return errors;
    }
    let families: Vec<_> = f
        .cluster_ips
        .iter()
        .filter_map(|ip| family_of(ip))
        .collect();
    if f.cluster_ips.len() > 1 && !(families.contains(&"IPv4") && families.contains(&"IPv6")) {
        errors.push(invalid(
            "spec.clusterIPs",
            &ips,
            "may specify no more than one IP for each IP family",
        ));
    }
    if !f.is_headless() {
        for (i, (ip, family)) in f.cluster_ips.iter().zip(&f.families).enumerate() {
            let v6 = family_of(ip) == Some("IPv6");
            if (family == "IPv4" && v6) || (family == "IPv6" && !v6) {
                errors.push(invalid(
                    format!("spec.clusterIPs[{i}]"),
                    &go_quote(ip),
                    &format!("expected an {family} value as indicated by `ipFamilies[{i}]`"),
                ));
            }
        }
    }
    errors
}

/// `ipFamilies` entries are IPv4 or IPv6, none twice; `ipFamilyPolicy` is one of the three.
fn families_and_policy(f: &IpFields, errors: &mut Vec<Cause>) {
    let mut seen: Vec<&str> = Vec::new();
    for (i, family) in f.families.iter().enumerate() {
        let field = format!("spec.ipFamilies[{i}]");
        if family != "IPv4" && family != "IPv6" {
            errors.push(cause(
                "FieldValueNotSupported",
                &field,
                format!(
                    "Unsupported value: {}: supported values: \"IPv4\", \"IPv6\"",
                    go_quote(family)
                ),
            ));
        }
        if seen.contains(&family.as_str()) {
            errors.push(cause(
                "FieldValueDuplicate",
                &field,
                format!("Duplicate value: {}", go_quote(family)),
            ));
        }
        seen.push(family);
    }
    if let Some(p) = &f.policy
        && ![SINGLE_STACK, PREFER_DUAL_STACK, REQUIRE_DUAL_STACK].contains(&p.as_str())
    {
        errors.push(cause(
            "FieldValueNotSupported",
            "spec.ipFamilyPolicy",
            format!(
                "Unsupported value: {}: supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\"",
                go_quote(p)
            ),
        ));
    }
}

/// Each `clusterIPs` entry is an address, or `None` alone; at most two. False when an entry is
/// neither, after which kube checks nothing more about the addresses.
fn cluster_ip_values(f: &IpFields, errors: &mut Vec<Cause>) -> bool {
    let ips = go_string_slice(&f.cluster_ips);
    let mut valid = true;
    for (i, ip) in f.cluster_ips.iter().enumerate() {
        if i == 0 && ip == "None" {
            if f.cluster_ips.len() > 1 {
                valid = false;
                errors.push(invalid(
                    "spec.clusterIPs",
                    &ips,
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        if ip.parse::<IpAddr>().is_err() {
            valid = false;
            errors.push(invalid(
                format!("spec.clusterIPs[{i}]"),
                &go_quote(ip),
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
    }
    if f.cluster_ips.len() > 2 {
        errors.push(invalid(
            "spec.clusterIPs",
            &ips,
            "may only hold up to 2 values",
        ));
    }
    valid
}
