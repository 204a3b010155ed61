//! Record sets of one service name: how `<svc>-<cluster>` and
//! `<svc>-federated` are computed from cluster state (DESIGN.md decisions
//! 1–4, 6 and 10).
//!
//! Pure functions from the [`ClusterSet`] to an [`Entry`]. They must not
//! look at other entries, claims or time beyond the `now` they are given.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cluster::{Cluster, ClusterSet, Health};
use super::objects::{Endpoint, ExportMode, ObjectKey, Port, Service};
use crate::vocab::name::dashed_ip;

/// Where an entry's records come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// One cluster's copy of a service: `<svc>-<cluster>`.
    Cluster {
        /// Cluster id (index into the snapshot's status table).
        id: u32,
        /// Cluster name.
        name: Arc<str>,
    },
    /// The union over member clusters: `<svc>-federated`.
    Federated {
        /// Every member was left out for health, so the last-known union is
        /// served (fail open).
        fail_open: bool,
        /// A member in the answer has a broken watch (within the grace):
        /// its part is last-known data, so the TTL is capped.
        stale: bool,
    },
}

/// One pod address under a service name. A pod with an IPv4 and an IPv6
/// address is two of these with the same hostname.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pod {
    /// The member cluster, for federated names; `None` under a per-cluster
    /// name.
    pub cluster: Option<Arc<str>>,
    /// Hostname label (the endpoint's, else the dashed IP).
    pub hostname: Arc<str>,
    /// The address to answer.
    pub addr: IpAddr,
    /// The ports a client dials at `addr` (DESIGN.md decision 10).
    pub ports: Arc<[Port]>,
}

/// Everything served at and below one service name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `<label>.<ns>.svc.<zone>`, lower-case, no trailing dot.
    pub name: Arc<str>,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Per-cluster or federated.
    pub origin: Origin,
    /// Headless: addresses are pods, SRV targets are pod names.
    pub headless: bool,
    /// A records of the name, sorted.
    pub v4: Vec<Ipv4Addr>,
    /// AAAA records of the name, sorted.
    pub v6: Vec<Ipv6Addr>,
    /// SRV ports whose target is the name itself (non-headless answers).
    pub ports: Vec<Port>,
    /// Pod names, sorted by (cluster, hostname, address).
    pub pods: Vec<Pod>,
    /// Clusters whose part of this name their budget refused, sorted: the
    /// records they would add are not held (a per-cluster name is then
    /// undecided as a whole; a federated one answers from the others).
    pub refused: Vec<Arc<str>>,
}

impl Entry {
    /// The pods named `hostname` (in `cluster`, for federated names).
    pub fn pods_named(&self, cluster: Option<&str>, hostname: &str) -> &[Pod] {
        fn key(p: &Pod) -> (Option<&str>, &str) {
            (p.cluster.as_deref(), &p.hostname)
        }
        let start = self.pods.partition_point(|p| key(p) < (cluster, hostname));
        let end = start + self.pods[start..].partition_point(|p| key(p) == (cluster, hostname));
        &self.pods[start..end]
    }

    /// True when `cluster` contributes at least one pod name (the empty
    /// non-terminal `<cluster>.<svc>-federated`).
    pub fn has_member(&self, cluster: &str) -> bool {
        let start = self
            .pods
            .partition_point(|p| p.cluster.as_deref() < Some(cluster));
        self.pods
            .get(start)
            .is_some_and(|p| p.cluster.as_deref() == Some(cluster))
    }

    /// The member clusters contributing pods, in order.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        let mut last: Option<&str> = None;
        self.pods.iter().filter_map(move |p| {
            let c = p.cluster.as_deref()?;
            (last != Some(c)).then(|| {
                last = Some(c);
                c
            })
        })
    }

    /// True when nothing can be answered at this name because of the
    /// budget: a refused per-cluster service, or a federated name all of
    /// whose held members have no address while some member is refused.
    pub fn withheld(&self) -> bool {
        !self.refused.is_empty()
            && match self.origin {
                Origin::Cluster { .. } => true,
                Origin::Federated { .. } => {
                    self.v4.is_empty() && self.v6.is_empty() && self.pods.is_empty()
                }
            }
    }

    /// True when `cluster`'s part of this name was refused by its budget.
    pub fn refused_from(&self, cluster: &str) -> bool {
        self.refused.iter().any(|c| &**c == cluster)
    }

    /// Number of names this entry serves: itself and its pod names.
    pub fn name_count(&self) -> usize {
        let mut names = 1;
        let mut prev: Option<(&Option<Arc<str>>, &Arc<str>)> = None;
        for p in &self.pods {
            if prev != Some((&p.cluster, &p.hostname)) {
                names += 1;
            }
            prev = Some((&p.cluster, &p.hostname));
        }
        names
    }
}

/// The result of building one entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Built {
    /// The entry; `None` when the name does not exist (headless with no
    /// ready endpoints, no federated member left).
    pub entry: Option<Entry>,
    /// PTR records this entry offers: address → name.
    pub ptrs: Vec<(IpAddr, Arc<str>)>,
    /// Pod names not served because they exceed 253 characters.
    pub too_long: u32,
}

/// Inputs of a build that are not cluster state.
#[derive(Debug, Clone, Copy)]
pub struct BuildContext<'a> {
    /// The zone, lower-case, no trailing dot.
    pub zone: &'a str,
    /// How long a broken watch keeps a member in federated answers.
    pub federated_grace: Duration,
    /// The time to judge staleness against.
    pub now: Instant,
}

fn ready(svc: &Service, ep: &Endpoint) -> bool {
    ep.ready || svc.publish_not_ready
}

struct Acc {
    v4: Vec<Ipv4Addr>,
    v6: Vec<Ipv6Addr>,
    ports: Vec<Port>,
    pods: Vec<Pod>,
    ptrs: Vec<(IpAddr, Arc<str>)>,
    too_long: u32,
    refused: Vec<Arc<str>>,
}

impl Acc {
    fn new() -> Self {
        Self {
            v4: Vec::new(),
            v6: Vec::new(),
            ports: Vec::new(),
            pods: Vec::new(),
            ptrs: Vec::new(),
            too_long: 0,
            refused: Vec::new(),
        }
    }

    fn addr(&mut self, ip: IpAddr) {
        match ip {
            IpAddr::V4(v4) => self.v4.push(v4),
            IpAddr::V6(v6) => self.v6.push(v6),
        }
    }

    /// Adds a pod; its name is `<host>.<suffix>`.
    fn pod(
        &mut self,
        cluster: Option<&Arc<str>>,
        host: Arc<str>,
        suffix: &str,
        addr: IpAddr,
        ports: Arc<[Port]>,
        ptr: bool,
    ) {
        self.addr(addr);
        if host.len() + 1 + suffix.len() > crate::vocab::name::MAX_NAME_TEXT {
            self.too_long += 1;
            return;
        }
        if ptr {
            self.ptrs.push((addr, format!("{host}.{suffix}").into()));
        }
        self.pods.push(Pod {
            cluster: cluster.cloned(),
            hostname: host,
            addr,
            ports,
        });
    }

    fn finish(
        mut self,
        name: Arc<str>,
        namespace: Arc<str>,
        origin: Origin,
        headless: bool,
    ) -> Built {
        self.v4.sort_unstable();
        self.v4.dedup();
        self.v6.sort_unstable();
        self.v6.dedup();
        self.ports.sort_unstable();
        self.ports.dedup();
        self.pods.sort_unstable();
        self.pods.dedup();
        self.refused.sort_unstable();
        // A refused member may hold the pods that would make it exist.
        let exists = !headless
            || !self.pods.is_empty()
            || !self.v4.is_empty()
            || !self.v6.is_empty()
            || !self.refused.is_empty();
        let entry = exists.then_some(Entry {
            name,
            namespace,
            origin,
            headless,
            v4: self.v4,
            v6: self.v6,
            ports: self.ports,
            pods: self.pods,
            refused: self.refused,
        });
        if entry.is_none() {
            self.ptrs.clear();
        }
        Built {
            entry,
            ptrs: self.ptrs,
            too_long: self.too_long,
        }
    }
}

fn hostname(ep: &Endpoint) -> Arc<str> {
    ep.hostname
        .clone()
        .unwrap_or_else(|| dashed_ip(ep.addr).into())
}

/// Builds `<label>.<ns>.svc.<zone>` for service `key` of `cluster`, the
/// winner of that label.
pub fn build_cluster_entry(
    set: &ClusterSet,
    cluster: &Cluster,
    key: &ObjectKey,
    label: &str,
    cx: &BuildContext<'_>,
) -> Built {
    let Some(svc) = cluster.services.get(key) else {
        return Built::default();
    };
    let Some(mode) = svc.export else {
        return Built::default();
    };
    let ns = &key.namespace;
    let name: Arc<str> = format!("{label}.{ns}.svc.{}", cx.zone).into();
    let origin = Origin::Cluster {
        id: cluster.id,
        name: cluster.name.clone(),
    };
    let mut acc = Acc::new();
    if svc.refused {
        acc.refused.push(cluster.name.clone());
        return acc.finish(name, ns.clone(), origin, svc.headless);
    }
    if svc.headless {
        headless_pods(set, cluster, svc, (label, &name), &mut acc);
        return acc.finish(name, ns.clone(), origin, true);
    }
    match (mode, cluster.local) {
        // A local gateway-mode service needs no gateway: its own ClusterIP.
        (ExportMode::Gateway, true) => {
            svc.cluster_ips.iter().for_each(|ip| acc.addr(*ip));
            acc.ports.extend(svc.ports.iter().cloned());
        }
        (ExportMode::Gateway, false) => match set
            .mirror_for(ns, label, &cluster.name)
            .filter(|m| !m.cluster_ips.is_empty())
        {
            Some(m) => {
                m.cluster_ips.iter().for_each(|ip| acc.addr(*ip));
                acc.ports.extend(m.ports.iter().cloned());
            }
            None => {
                if let Some(gw) = &cluster.gateway {
                    gw.addresses.iter().for_each(|ip| acc.addr(*ip));
                    if let Some(port) = gw.port {
                        acc.ports
                            .extend(svc.ports.iter().map(|p| Port { port, ..p.clone() }));
                    }
                }
            }
        },
        (ExportMode::Flat, _) => {
            for slice in cluster.slices_of(key) {
                acc.ports.extend(slice.ports.iter().cloned());
                for ep in slice.endpoints.iter().filter(|ep| ready(svc, ep)) {
                    acc.addr(ep.addr);
                    acc.ptrs.push((ep.addr, name.clone()));
                }
            }
        }
    }
    acc.finish(name, ns.clone(), origin, false)
}

/// The pods of headless `svc` of `cluster` into `acc`: each ready endpoint,
/// or in gateway mode Linkerd's per-pod endpoint mirror when there is one.
fn headless_pods(
    set: &ClusterSet,
    cluster: &Cluster,
    svc: &Service,
    (label, name): (&str, &str),
    acc: &mut Acc,
) {
    let (key, ns) = (&svc.key, &svc.key.namespace);
    let mode = svc.export;
    for slice in cluster.slices_of(key) {
        for ep in slice.endpoints.iter().filter(|ep| ready(svc, ep)) {
            let host = hostname(ep);
            // Gateway mode through Linkerd's per-pod endpoint mirrors when
            // they exist: their ClusterIPs are what a client can reach.
            let mirror = (mode == Some(ExportMode::Gateway) && !cluster.local)
                .then(|| set.endpoint_mirror(ns, label, &host, &cluster.name))
                .flatten()
                .filter(|m| !m.cluster_ips.is_empty());
            match mirror {
                Some(m) => {
                    let ports: Arc<[Port]> = m.ports.clone().into();
                    for ip in &m.cluster_ips {
                        acc.pod(None, host.clone(), name, *ip, ports.clone(), false);
                    }
                }
                None => acc.pod(None, host, name, ep.addr, slice.ports.clone(), true),
            }
        }
    }
}

/// Whether a member cluster takes part in federated answers now (DESIGN.md
/// decision 5): not while its gateway probe fails, not once its watch has
/// been broken for longer than the grace.
pub fn federation_eligible(health: &Health, cx: &BuildContext<'_>) -> bool {
    if health.gateway_alive == Some(false) {
        return false;
    }
    match health.broken_since {
        Some(since) => cx.now.saturating_duration_since(since) <= cx.federated_grace,
        None => true,
    }
}

/// The clusters that have a federated member `key`.
pub fn federated_members<'s>(
    set: &'s ClusterSet,
    key: &'s ObjectKey,
) -> impl Iterator<Item = &'s Cluster> + 's {
    set.iter()
        .filter(move |c| c.services.get(key).is_some_and(|s| s.federated))
}

/// Builds `<svc>-federated.<ns>.svc.<zone>`: the union of every member's
/// ready pod addresses (DESIGN.md decision 4).
pub fn build_federated_entry(
    set: &ClusterSet,
    key: &ObjectKey,
    label: &str,
    cx: &BuildContext<'_>,
) -> Built {
    let (members, refused): (Vec<&Cluster>, Vec<&Cluster>) =
        federated_members(set, key).partition(|c| c.services.get(key).is_some_and(|s| !s.refused));
    if members.is_empty() && refused.is_empty() {
        return Built::default();
    }
    let eligible: Vec<&Cluster> = members
        .iter()
        .copied()
        .filter(|c| federation_eligible(&c.health, cx))
        .collect();
    let fail_open = eligible.is_empty() && !members.is_empty();
    let used = if fail_open { members } else { eligible };
    let stale = used.iter().any(|c| c.health.broken_since.is_some());
    let ns = &key.namespace;
    let name: Arc<str> = format!("{label}.{ns}.svc.{}", cx.zone).into();
    let mut acc = Acc::new();
    acc.refused = refused.iter().map(|c| c.name.clone()).collect();
    let mut headless = refused
        .iter()
        .all(|c| c.services.get(key).is_some_and(|s| s.headless));
    for c in used {
        let Some(svc) = c.services.get(key) else {
            continue;
        };
        headless &= svc.headless;
        let pod_suffix = format!("{}.{name}", c.name);
        for slice in c.slices_of(key) {
            if !svc.headless {
                acc.ports.extend(slice.ports.iter().cloned());
            }
            for ep in slice.endpoints.iter().filter(|ep| ready(svc, ep)) {
                if svc.headless {
                    acc.pod(
                        Some(&c.name),
                        hostname(ep),
                        &pod_suffix,
                        ep.addr,
                        slice.ports.clone(),
                        false,
                    );
                } else {
                    acc.addr(ep.addr);
                }
            }
        }
    }
    acc.finish(
        name,
        ns.clone(),
        Origin::Federated { fail_open, stale },
        headless,
    )
}

#[cfg(test)]
mod tests;
