//! Record sets of one service name: how `<svc>-<cluster>` and
//! `<svc>-federated` are computed from cluster state (docs/architecture.md, decisions
//! 1–4, 6 and 10), and the MCS name `<svc>` (in [`mcs`]).
//!
//! Pure functions from the [`ClusterSet`] to an [`Entry`]. They must not
//! look at other entries, claims or time beyond the `now` they are given.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cluster::{Cluster, ClusterSet, Health};
use super::locality::{Plan, Why, plan};
use super::objects::{Endpoint, ExportMode, ObjectKey, Port, Service, Slice};
use crate::vocab::name::dashed_ip;
use crate::vocab::place::Place;

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
    /// The union over member clusters: `<svc>-federated`, or the MCS
    /// clusterset name `<svc>` (its pods named under each cluster's id).
    Federated {
        /// Every member was left out for health, so the last-known union is
        /// served (fail open).
        fail_open: bool,
        /// A member in the answer has a broken watch (within the grace):
        /// its part is last-known data, so the TTL is capped.
        stale: bool,
        /// The MCS name: no `<hostname>-<cluster>` alias (the KEP has none).
        mcs: bool,
        /// What a `<svc>-nearest` name answers; `Nearest::No` for the
        /// federated and MCS names.
        nearest: Nearest,
    },
}

/// What a `<svc>-nearest` name answers (docs/locality.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nearest {
    /// Not a nearest name.
    No,
    /// The members of this tier.
    Tier(u32),
    /// No tier has `min-ready` ready endpoints: the federated union (fail
    /// open, counted).
    Union,
}

/// One pod address under a service name. A pod with an IPv4 and an IPv6
/// address is two of these with the same hostname.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pod {
    /// Hostname label (the endpoint's, else the dashed IP).
    pub hostname: Arc<str>,
    /// The address to answer.
    pub addr: IpAddr,
}

/// Which reverse (PTR) names a part's addresses offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reverse {
    /// None (gateway addresses, Linkerd's endpoint mirrors).
    None,
    /// Each address names its pod (headless).
    Pods,
    /// Each address names the service (flat ClusterIP services).
    Service,
}

/// One EndpointSlice's share of a name (or, in gateway mode, the addresses
/// a client reaches the service by). A name's records are the union of its
/// parts, so a change of one slice rebuilds one part, not the name: a
/// service of 10,000 endpoints costs what its changed slice holds. The same
/// part serves `<svc>-<cluster>` and `<svc>-federated`.
#[derive(Debug, PartialEq, Eq)]
pub struct Part {
    /// The cluster the addresses are in.
    pub cluster: Arc<str>,
    /// IPv4 addresses, sorted, each once.
    pub v4: Vec<Ipv4Addr>,
    /// IPv6 addresses, sorted, each once.
    pub v6: Vec<Ipv6Addr>,
    /// Pod names (headless services), sorted by (hostname, address), each
    /// once.
    pub pods: Vec<Pod>,
    /// The ports a client dials at the pods (docs/architecture.md, decision 10): the
    /// slice's, shared by all its pods.
    pub ports: Arc<[Port]>,
    /// Reverse names the addresses offer under a per-cluster name.
    pub reverse: Reverse,
    /// Octets of the longest hostname, to tell cheaply whether every pod
    /// name fits under a given suffix.
    longest_host: usize,
    /// Distinct hostnames.
    hostnames: usize,
}

impl Part {
    /// A part of `cluster` holding `addrs` and `pods` (either may be
    /// empty), whose pods listen on `ports`.
    pub fn new(
        cluster: Arc<str>,
        addrs: impl IntoIterator<Item = IpAddr>,
        (mut pods, ports): (Vec<Pod>, Arc<[Port]>),
        reverse: Reverse,
    ) -> Self {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for ip in addrs {
            match ip {
                IpAddr::V4(a) => v4.push(a),
                IpAddr::V6(a) => v6.push(a),
            }
        }
        v4.sort_unstable();
        v4.dedup();
        v6.sort_unstable();
        v6.dedup();
        pods.sort_unstable();
        pods.dedup();
        let longest_host = pods.iter().map(|p| p.hostname.len()).max().unwrap_or(0);
        let hostnames = if pods.is_empty() {
            0
        } else {
            1 + pods
                .windows(2)
                .filter(|w| w[0].hostname != w[1].hostname)
                .count()
        };
        Self {
            cluster,
            v4,
            v6,
            pods,
            ports,
            reverse,
            longest_host,
            hostnames,
        }
    }

    /// The same records under another cluster label (an MCS cluster id).
    fn relabeled(&self, cluster: Arc<str>) -> Self {
        Self {
            cluster,
            v4: self.v4.clone(),
            v6: self.v6.clone(),
            pods: self.pods.clone(),
            ports: self.ports.clone(),
            reverse: self.reverse,
            longest_host: self.longest_host,
            hostnames: self.hostnames,
        }
    }

    /// The pods named `hostname`.
    fn named(&self, hostname: &str) -> &[Pod] {
        let start = self.pods.partition_point(|p| &*p.hostname < hostname);
        let end = start + self.pods[start..].partition_point(|p| &*p.hostname == hostname);
        &self.pods[start..end]
    }
}

/// Each tiered member's tier, sorted by cluster name.
pub(crate) type Tiers = Arc<[(Arc<str>, u32)]>;

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
    /// Where the records come from, sorted by cluster (then slice name).
    pub parts: Vec<Arc<Part>>,
    /// SRV ports whose target is the name itself (non-headless answers).
    pub ports: Vec<Port>,
    /// Clusters whose part of this name their budget refused, sorted: the
    /// records they would add are not held (a per-cluster name is then
    /// undecided as a whole; a federated one answers from the others).
    pub refused: Vec<Arc<str>>,
    /// Each tiered member's tier, by cluster name, when SRV priorities
    /// follow tiers (`--srv-priority-tiers`); `None` otherwise.
    pub tiers: Option<Tiers>,
    /// Names served: this one and its pod names.
    names: usize,
    /// Pod names not served because they exceed 253 octets.
    too_long: u32,
}

/// Sorted, each once: borrowed when one part holds them all.
fn merged<T: Ord + Copy>(parts: &[Arc<Part>], of: impl Fn(&Part) -> &[T]) -> Cow<'_, [T]> {
    let mut holding = parts.iter().filter(|p| !of(p).is_empty());
    match (holding.next(), holding.next()) {
        (None, _) => Cow::Borrowed(&[]),
        (Some(one), None) => Cow::Borrowed(of(one)),
        _ => {
            let mut all: Vec<T> = parts.iter().flat_map(|p| of(p).iter().copied()).collect();
            all.sort_unstable();
            all.dedup();
            Cow::Owned(all)
        }
    }
}

impl Entry {
    fn federated(&self) -> bool {
        matches!(self.origin, Origin::Federated { .. })
    }

    /// The A records of the name, sorted, each once.
    pub fn v4(&self) -> Cow<'_, [Ipv4Addr]> {
        merged(&self.parts, |p| &p.v4)
    }

    /// The AAAA records of the name, sorted, each once.
    pub fn v6(&self) -> Cow<'_, [Ipv6Addr]> {
        merged(&self.parts, |p| &p.v6)
    }

    /// True when the name has an address record.
    pub fn has_addrs(&self) -> bool {
        self.parts
            .iter()
            .any(|p| !p.v4.is_empty() || !p.v6.is_empty())
    }

    /// The parts whose pods are named under `cluster` (every part under a
    /// per-cluster name).
    fn parts_of(&self, cluster: Option<&str>) -> &[Arc<Part>] {
        let (start, end) = match cluster {
            Some(c) if self.federated() => {
                let start = self.parts.partition_point(|p| &*p.cluster < c);
                let len = self.parts[start..].partition_point(|p| &*p.cluster == c);
                (start, start + len)
            }
            Some(_) => (0, 0),
            None if self.federated() => (0, 0),
            None => (0, self.parts.len()),
        };
        &self.parts[start..end]
    }

    /// Whether `<host>.<suffix>` fits in a name, where the suffix is this
    /// name, or `<cluster>.` and this name for federated pods.
    fn host_fits(&self, cluster: &str, host_len: usize) -> bool {
        let suffix = if self.federated() {
            cluster.len() + 1 + self.name.len()
        } else {
            self.name.len()
        };
        host_len + 1 + suffix <= crate::vocab::name::MAX_NAME_TEXT
    }

    /// The pods named `hostname` (in `cluster`, for federated names).
    pub fn pods_named(&self, cluster: Option<&str>, hostname: &str) -> Vec<&Pod> {
        let mut pods: Vec<&Pod> = Vec::new();
        for part in self.parts_of(cluster) {
            if self.host_fits(&part.cluster, hostname.len()) {
                pods.extend(part.named(hostname));
            }
        }
        if self.parts.len() > 1 {
            pods.sort_unstable();
            pods.dedup();
        }
        pods
    }

    /// Every pod name's pods, sorted by (cluster, hostname, address), with
    /// the part each is in (its cluster is named only under federated
    /// names; its ports are the pod's).
    pub fn pods(&self) -> Vec<(&Part, &Pod)> {
        let mut pods: Vec<(&Part, &Pod)> = Vec::new();
        for part in &self.parts {
            let fits = self.host_fits(&part.cluster, part.longest_host);
            pods.extend(
                part.pods
                    .iter()
                    .filter(|p| fits || self.host_fits(&part.cluster, p.hostname.len()))
                    .map(|p| (&**part, p)),
            );
        }
        if self.parts.iter().filter(|p| !p.pods.is_empty()).count() > 1 {
            pods.sort_by(|a, b| (&a.0.cluster, a.1).cmp(&(&b.0.cluster, b.1)));
            // A pod in two slices (while it moves between them) is one pod.
            pods.dedup_by(|a, b| {
                a.0.cluster == b.0.cluster && a.1 == b.1 && a.0.ports == b.0.ports
            });
        }
        pods
    }

    /// The ports of the name and of its pods: what `_<port>._<proto>`
    /// names exist for.
    pub fn all_ports(&self) -> impl Iterator<Item = &Port> {
        self.ports.iter().chain(
            self.parts
                .iter()
                .filter(|p| !p.pods.is_empty())
                .flat_map(|p| p.ports.iter()),
        )
    }

    /// True when `cluster` contributes at least one pod name (the empty
    /// non-terminal `<cluster>.<svc>-federated`).
    pub fn has_member(&self, cluster: &str) -> bool {
        self.parts_of(Some(cluster))
            .iter()
            .any(|p| !p.pods.is_empty())
    }

    /// The member clusters contributing pods, in order.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        let mut last: Option<&str> = None;
        self.parts
            .iter()
            .filter(|p| self.federated() && !p.pods.is_empty())
            .filter_map(move |p| {
                let c = &*p.cluster;
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
                Origin::Federated { .. } => self
                    .parts
                    .iter()
                    .all(|p| p.v4.is_empty() && p.v6.is_empty() && p.pods.is_empty()),
            }
    }

    /// True when `cluster`'s part of this name was refused by its budget.
    pub fn refused_from(&self, cluster: &str) -> bool {
        self.refused.iter().any(|c| &**c == cluster)
    }

    /// The SRV priority of records of `cluster`: 10 × its tier when
    /// priorities follow tiers, else 0.
    pub fn priority(&self, cluster: &str) -> u16 {
        let Some(tiers) = &self.tiers else {
            return 0;
        };
        match tiers.binary_search_by(|(c, _)| (**c).cmp(cluster)) {
            Ok(i) => u16::try_from(tiers[i].1.saturating_mul(10)).unwrap_or(u16::MAX),
            // An untiered member only answers a fail-open union: last.
            Err(_) => u16::MAX,
        }
    }

    /// Number of names this entry serves: itself and its pod names.
    pub fn name_count(&self) -> usize {
        self.names
    }

    /// Pod names not served because they would exceed 253 octets.
    pub fn too_long(&self) -> u32 {
        self.too_long
    }

    /// The PTR records `part` of this name offers: address → name. Only
    /// per-cluster names offer them (a federated name repeats its members'
    /// addresses).
    pub fn part_ptrs(&self, part: &Part) -> Vec<(IpAddr, Arc<str>)> {
        if self.federated() {
            return Vec::new();
        }
        match part.reverse {
            Reverse::None => Vec::new(),
            Reverse::Service => part
                .v4
                .iter()
                .map(|ip| IpAddr::V4(*ip))
                .chain(part.v6.iter().map(|ip| IpAddr::V6(*ip)))
                .map(|ip| (ip, self.name.clone()))
                .collect(),
            Reverse::Pods => part
                .pods
                .iter()
                .filter(|p| self.host_fits(&part.cluster, p.hostname.len()))
                .map(|p| (p.addr, format!("{}.{}", p.hostname, self.name).into()))
                .collect(),
        }
    }

    /// Builds an entry from its parts; `None` when the name does not exist
    /// (headless with no address and nothing refused).
    fn from_parts(head: Head, mut parts: Vec<Arc<Part>>, mut ports: Vec<Port>) -> Option<Self> {
        let Head {
            name,
            namespace,
            origin,
            headless,
            mut refused,
            tiers,
        } = head;
        parts.retain(|p| !p.v4.is_empty() || !p.v6.is_empty() || !p.pods.is_empty());
        parts.sort_by(|a, b| a.cluster.cmp(&b.cluster));
        ports.sort_unstable();
        ports.dedup();
        refused.sort_unstable();
        let exists = !headless || !parts.is_empty() || !refused.is_empty();
        let mut entry = Self {
            name,
            namespace,
            origin,
            headless,
            parts,
            ports,
            refused,
            tiers,
            names: 1,
            too_long: 0,
        };
        entry.count_names();
        exists.then_some(entry)
    }

    /// Counts pod names (and those too long to serve). Hostnames of one
    /// cluster's slices are distinct except across address families (a
    /// dual-stack pod is in an IPv4 and an IPv6 slice), so only a cluster
    /// with parts of both families is counted by set.
    fn count_names(&mut self) {
        let mut names = 1;
        let mut too_long = 0u32;
        let mut i = 0;
        while i < self.parts.len() {
            let c = &self.parts[i].cluster;
            let j = i + self.parts[i..].partition_point(|p| p.cluster == *c);
            let group = &self.parts[i..j];
            let fits = |p: &Part| self.host_fits(c, p.longest_host);
            let both = group.iter().any(|p| !p.v4.is_empty() && !p.pods.is_empty())
                && group.iter().any(|p| !p.v6.is_empty() && !p.pods.is_empty());
            if !both && group.iter().all(|p| fits(p)) {
                names += group.iter().map(|p| p.hostnames).sum::<usize>();
            } else {
                let mut hosts: Vec<&str> = Vec::new();
                for p in group.iter().flat_map(|p| &p.pods) {
                    if self.host_fits(c, p.hostname.len()) {
                        hosts.push(&p.hostname);
                    } else {
                        too_long += 1;
                    }
                }
                hosts.sort_unstable();
                hosts.dedup();
                names += hosts.len();
            }
            i = j;
        }
        self.names = names;
        self.too_long = too_long;
    }
}

/// What an entry is, apart from its records.
struct Head {
    name: Arc<str>,
    namespace: Arc<str>,
    origin: Origin,
    headless: bool,
    refused: Vec<Arc<str>>,
    tiers: Option<Tiers>,
}

/// Inputs of a build that are not cluster state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BuildContext<'a> {
    /// The zone, lower-case, no trailing dot.
    pub zone: &'a str,
    /// How long a broken watch keeps a member in federated answers.
    pub federated_grace: Duration,
    /// The time to judge staleness against.
    pub now: Instant,
    /// The local cluster's configured place (`--region`, `--zone`).
    pub local: &'a Place,
    /// SRV priorities follow tiers (`--srv-priority-tiers`).
    pub tiers: bool,
}

fn ready(svc: &Service, ep: &Endpoint) -> bool {
    ep.ready || svc.publish_not_ready
}

fn hostname(ep: &Endpoint) -> Arc<str> {
    ep.hostname
        .clone()
        .unwrap_or_else(|| dashed_ip(ep.addr).into())
}

/// The rules a slice's part was built under, besides the slice itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rules {
    headless: bool,
    publish_not_ready: bool,
}

/// A slice's part and what it was built from.
#[derive(Debug)]
struct Cached {
    slice: Arc<str>,
    endpoints: Arc<[Endpoint]>,
    ports: Arc<[Port]>,
    rules: Rules,
    part: Arc<Part>,
    /// The same part under the cluster's MCS id, when the service is an
    /// MCS member and the id is not the cluster's name: kept with the part,
    /// so a change elsewhere in an MCS name copies nothing.
    mcs: Option<Arc<Part>>,
}

impl Cached {
    fn holds(&self, slice: &Slice, rules: Rules) -> bool {
        self.slice == slice.key.name
            && Arc::ptr_eq(&self.endpoints, &slice.endpoints)
            && Arc::ptr_eq(&self.ports, &slice.ports)
            && self.rules == rules
    }
}

/// The parts of every held (cluster, service), one per EndpointSlice: a
/// slice whose endpoint list, ports and service rules are the ones a part
/// was built from keeps that part, so a batch rebuilds only what changed.
#[derive(Debug, Default)]
pub(crate) struct PartCache {
    parts: HashMap<(Arc<str>, ObjectKey), Vec<Cached>>,
    /// Ready endpoints of each held federated (cluster, service), counted
    /// when its parts change: a locality plan reads it for every member on
    /// every change of the service, far more often than it changes.
    ready: HashMap<(Arc<str>, ObjectKey), u64>,
}

impl PartCache {
    /// Brings the parts of service `key` of `cluster` up to date with `set`
    /// (dropping them when the service is gone or not held); with `mcs`,
    /// also their copies under the cluster's MCS id.
    pub(crate) fn update(
        &mut self,
        set: &ClusterSet,
        cluster: &Arc<str>,
        key: &ObjectKey,
        mcs: bool,
    ) {
        let pair = (cluster.clone(), key.clone());
        let held = set
            .get(cluster)
            .and_then(|c| Some((c, c.services.get(key)?)))
            .filter(|(_, s)| !s.refused && (s.export.is_some() || s.federated || s.mcs.is_some()));
        let Some((c, svc)) = held else {
            self.parts.remove(&pair);
            self.ready.remove(&pair);
            return;
        };
        let rules = Rules {
            headless: svc.headless,
            publish_not_ready: svc.publish_not_ready,
        };
        let mut old = self
            .parts
            .remove(&pair)
            .unwrap_or_default()
            .into_iter()
            .peekable();
        let id = c.mcs_id();
        let relabel = mcs && svc.mcs.is_some() && *id != c.name;
        let mut new = Vec::new();
        for slice in c.slices_of(key) {
            while old.next_if(|o| o.slice < slice.key.name).is_some() {}
            let (part, mcs) = match old.next_if(|o| o.holds(slice, rules)) {
                Some(kept) => (kept.part, kept.mcs.filter(|p| p.cluster == *id)),
                None => (Arc::new(slice_part(&c.name, svc, slice)), None),
            };
            let mcs = match mcs {
                Some(p) if relabel => Some(p),
                _ if relabel => Some(Arc::new(part.relabeled(id.clone()))),
                _ => None,
            };
            new.push(Cached {
                slice: slice.key.name.clone(),
                endpoints: slice.endpoints.clone(),
                ports: slice.ports.clone(),
                rules,
                part,
                mcs,
            });
        }
        if svc.federated || svc.mcs_nearest {
            self.ready
                .insert(pair.clone(), ready_count(new.iter().map(|c| &*c.part)));
        } else {
            self.ready.remove(&pair);
        }
        self.parts.insert(pair, new);
    }

    /// Ready endpoints of federated (or nearest MCS) service `key` in
    /// `cluster`.
    pub(crate) fn ready_of(&self, cluster: &Arc<str>, key: &ObjectKey) -> u64 {
        self.ready
            .get(&(cluster.clone(), key.clone()))
            .copied()
            .unwrap_or(0)
    }

    /// The part of `slice` of service `key`, if it was built from this
    /// version of the slice.
    fn of_slice(
        &self,
        cluster: &Arc<str>,
        key: &ObjectKey,
        slice: &Slice,
        svc: &Service,
    ) -> Option<&Arc<Part>> {
        let rules = Rules {
            headless: svc.headless,
            publish_not_ready: svc.publish_not_ready,
        };
        self.parts
            .get(&(cluster.clone(), key.clone()))?
            .iter()
            .find(|c| c.holds(slice, rules))
            .map(|c| &c.part)
    }

    fn of(&self, cluster: &Arc<str>, key: &ObjectKey) -> impl Iterator<Item = &Arc<Part>> {
        self.parts
            .get(&(cluster.clone(), key.clone()))
            .into_iter()
            .flatten()
            .map(|c| &c.part)
    }

    /// The parts of service `key` of `cluster` with their pods named under
    /// the cluster's MCS id.
    fn of_mcs(&self, cluster: &Arc<str>, key: &ObjectKey) -> impl Iterator<Item = &Arc<Part>> {
        self.parts
            .get(&(cluster.clone(), key.clone()))
            .into_iter()
            .flatten()
            .map(|c| c.mcs.as_ref().unwrap_or(&c.part))
    }
}

/// The part of one slice: its ready addresses, and for a headless service
/// its pods.
fn slice_part(cluster: &Arc<str>, svc: &Service, slice: &Slice) -> Part {
    let ready = slice.endpoints.iter().filter(|ep| ready(svc, ep));
    let pods = if svc.headless {
        ready
            .clone()
            .map(|ep| Pod {
                hostname: hostname(ep),
                addr: ep.addr,
            })
            .collect()
    } else {
        Vec::new()
    };
    let reverse = if svc.headless {
        Reverse::Pods
    } else {
        Reverse::Service
    };
    Part::new(
        cluster.clone(),
        ready.map(|ep| ep.addr),
        (pods, slice.ports.clone()),
        reverse,
    )
}

/// Builds `<label>.<ns>.svc.<zone>` for service `key` of `cluster`, the
/// winner of that label, from the slices' parts in `parts`; `None` when the
/// name does not exist (headless with no ready endpoints).
pub(crate) fn build_cluster_entry(
    set: &ClusterSet,
    parts: &PartCache,
    cluster: &Cluster,
    key: &ObjectKey,
    label: &str,
    cx: &BuildContext<'_>,
) -> Option<Entry> {
    let svc = cluster.services.get(key)?;
    let mode = svc.export?;
    let ns = &key.namespace;
    let mut head = Head {
        name: format!("{label}.{ns}.svc.{}", cx.zone).into(),
        namespace: ns.clone(),
        origin: Origin::Cluster {
            id: cluster.id,
            name: cluster.name.clone(),
        },
        headless: svc.headless,
        refused: Vec::new(),
        tiers: None,
    };
    if svc.refused {
        head.refused.push(cluster.name.clone());
        return Entry::from_parts(head, Vec::new(), Vec::new());
    }
    let (found, ports) = match (mode, cluster.local, svc.headless) {
        // Through Linkerd's per-pod endpoint mirrors where they exist:
        // their ClusterIPs are what a client can reach.
        (ExportMode::Gateway, false, true) => {
            (mirrored_pods(set, parts, cluster, svc, label), Vec::new())
        }
        // A local gateway-mode service needs no gateway: its own ClusterIP.
        (ExportMode::Gateway, true, false) => (
            vec![Arc::new(Part::new(
                cluster.name.clone(),
                svc.cluster_ips.iter().copied(),
                (Vec::new(), Arc::from([])),
                Reverse::None,
            ))],
            svc.ports.clone(),
        ),
        (ExportMode::Gateway, false, false) => gateway_part(set, cluster, svc, label),
        (ExportMode::Flat, _, _) | (ExportMode::Gateway, true, true) => {
            let ports = if svc.headless {
                Vec::new()
            } else {
                cluster
                    .slices_of(key)
                    .flat_map(|s| s.ports.iter().cloned())
                    .collect()
            };
            (parts.of(&cluster.name, key).cloned().collect(), ports)
        }
    };
    Entry::from_parts(head, found, ports)
}

/// A remote gateway-mode service's address: the ClusterIP of its mirror
/// Service in the local cluster, else the cluster's gateway.
fn gateway_part(
    set: &ClusterSet,
    cluster: &Cluster,
    svc: &Service,
    label: &str,
) -> (Vec<Arc<Part>>, Vec<Port>) {
    let part = |addrs: &[IpAddr]| {
        vec![Arc::new(Part::new(
            cluster.name.clone(),
            addrs.iter().copied(),
            (Vec::new(), Arc::from([])),
            Reverse::None,
        ))]
    };
    match set
        .mirror_for(&svc.key.namespace, label, &cluster.name)
        .filter(|m| !m.cluster_ips.is_empty())
    {
        Some(m) => (part(&m.cluster_ips), m.ports.clone()),
        None => match &cluster.gateway {
            Some(gw) => {
                let ports = gw.port.map_or_else(Vec::new, |port| {
                    svc.ports
                        .iter()
                        .map(|p| Port { port, ..p.clone() })
                        .collect()
                });
                (part(&gw.addresses), ports)
            }
            None => (Vec::new(), Vec::new()),
        },
    }
}

/// The parts of remote headless gateway-mode `svc`: an endpoint Linkerd
/// mirrors per pod is answered by the mirror's ClusterIPs (what a client can
/// reach); a slice with no such endpoint keeps its own part.
fn mirrored_pods(
    set: &ClusterSet,
    parts: &PartCache,
    cluster: &Cluster,
    svc: &Service,
    label: &str,
) -> Vec<Arc<Part>> {
    let ns = &svc.key.namespace;
    let mut out = Vec::new();
    let part = |pods: Vec<Pod>, ports: Arc<[Port]>, reverse| {
        let addrs: Vec<IpAddr> = pods.iter().map(|p| p.addr).collect();
        Arc::new(Part::new(
            cluster.name.clone(),
            addrs,
            (pods, ports),
            reverse,
        ))
    };
    for slice in cluster.slices_of(&svc.key) {
        let (mut mirrored, mut own) = (Vec::new(), Vec::new());
        for ep in slice.endpoints.iter().filter(|ep| ready(svc, ep)) {
            let host = hostname(ep);
            match set
                .endpoint_mirror(ns, label, &host, &cluster.name)
                .filter(|m| !m.cluster_ips.is_empty())
            {
                // A part of its own: the mirror's ports are its pod's.
                Some(m) => {
                    let pods = m.cluster_ips.iter().map(|ip| Pod {
                        hostname: host.clone(),
                        addr: *ip,
                    });
                    mirrored.push(part(pods.collect(), m.ports.clone().into(), Reverse::None));
                }
                None => own.push(Pod {
                    hostname: host,
                    addr: ep.addr,
                }),
            }
        }
        if mirrored.is_empty() {
            match parts.of_slice(&cluster.name, &svc.key, slice, svc) {
                Some(p) => out.push(Arc::clone(p)),
                None => out.push(Arc::new(slice_part(&cluster.name, svc, slice))),
            }
            continue;
        }
        out.extend(mirrored);
        out.push(part(own, slice.ports.clone(), Reverse::Pods));
    }
    out
}

/// Whether a member cluster takes part in federated answers now (docs/architecture.md,
/// decision 5): not while its gateway probe fails, not once its watch has
/// been broken for longer than the grace.
pub(crate) fn federation_eligible(health: &Health, cx: &BuildContext<'_>) -> bool {
    if health.gateway_alive == Some(false) {
        return false;
    }
    match health.broken_since {
        Some(since) => cx.now.saturating_duration_since(since) <= cx.federated_grace,
        None => true,
    }
}

/// The clusters that have a federated member `key`.
pub(crate) fn federated_members<'s>(
    set: &'s ClusterSet,
    key: &'s ObjectKey,
) -> impl Iterator<Item = &'s Cluster> + 's {
    set.iter()
        .filter(move |c| c.services.get(key).is_some_and(|s| s.federated))
}

/// Builds `<svc>-federated.<ns>.svc.<zone>`: the union of every member's
/// ready pod addresses (docs/architecture.md, decision 4), from the members' parts;
/// `None` when no member is left.
pub(crate) fn build_federated_entry(
    set: &ClusterSet,
    parts: &PartCache,
    key: &ObjectKey,
    label: &str,
    cx: &BuildContext<'_>,
) -> Option<Entry> {
    let plan = cx.tiers.then(|| member_plan(set, parts, key, cx));
    union_entry(set, parts, key, label, cx, plan.as_ref(), false)
}

/// Builds `<svc>-nearest.<ns>.svc.<zone>`: the members of the first tier
/// with `min-ready` ready endpoints, else the federated union
/// (docs/locality.md); `None` when no member is left.
///
/// `federated` is the service's federated entry as just built: when the
/// chosen tier holds every member the federated name answers (no place
/// configured, or the local cluster not a member), its records are taken
/// as they are instead of being gathered again.
pub(crate) fn build_nearest_entry(
    set: &ClusterSet,
    parts: &PartCache,
    key: &ObjectKey,
    (label, federated): (&str, Option<&Entry>),
    cx: &BuildContext<'_>,
    plan: &Plan<'_>,
) -> Option<Entry> {
    let Some(f) = federated else {
        return union_entry(set, parts, key, label, cx, Some(plan), true);
    };
    // Every member the federated name uses (held and healthy) is in the
    // chosen tier: the same records, ports and flags.
    let whole = plan.chosen.is_none()
        || plan
            .members
            .iter()
            .filter(|m| !matches!(m.why, Why::Unhealthy | Why::Refused))
            .all(|m| m.tier == plan.chosen);
    if whole {
        Some(renamed_nearest(f, label, key, cx, plan))
    } else {
        federated_subset(f, plan, set, key, (label, cx))
    }
}

/// The chosen tier's share of federated entry `f`: its parts are already
/// gathered, sorted and held, so only the tier's are kept.
fn federated_subset(
    f: &Entry,
    plan: &Plan<'_>,
    set: &ClusterSet,
    key: &ObjectKey,
    (label, cx): (&str, &BuildContext<'_>),
) -> Option<Entry> {
    let tier = plan.chosen?;
    let chosen: Vec<&Cluster> = plan
        .members
        .iter()
        .filter(|m| m.tier == Some(tier))
        .map(|m| m.cluster)
        .collect();
    let services = || {
        chosen
            .iter()
            .filter_map(|c| Some((*c, c.services.get(key)?)))
    };
    let found: Vec<Arc<Part>> = f
        .parts
        .chunk_by(|a, b| a.cluster == b.cluster)
        .filter(|group| chosen.iter().any(|c| c.name == group[0].cluster))
        .flatten()
        .cloned()
        .collect();
    let mut ports = Vec::new();
    for (c, _) in services().filter(|(_, s)| !s.headless) {
        ports.extend(c.slices_of(key).flat_map(|s| s.ports.iter().cloned()));
    }
    let refused_headless = federated_members(set, key)
        .filter_map(|c| c.services.get(key))
        .filter(|s| s.refused)
        .all(|s| s.headless);
    let head = Head {
        name: format!("{label}.{}.svc.{}", key.namespace, cx.zone).into(),
        namespace: key.namespace.clone(),
        origin: Origin::Federated {
            fail_open: false,
            stale: chosen.iter().any(|c| c.health.broken_since.is_some()),
            mcs: false,
            nearest: Nearest::Tier(tier),
        },
        headless: refused_headless && services().all(|(_, s)| s.headless),
        refused: f.refused.clone(),
        tiers: f.tiers.clone(),
    };
    Entry::from_parts(head, found, ports)
}

/// The federated entry `f` under the nearest name: the same records.
fn renamed_nearest(
    f: &Entry,
    label: &str,
    key: &ObjectKey,
    cx: &BuildContext<'_>,
    plan: &Plan<'_>,
) -> Entry {
    let mut e = f.clone();
    e.name = format!("{label}.{}.svc.{}", key.namespace, cx.zone).into();
    if let Origin::Federated { nearest, .. } = &mut e.origin {
        *nearest = plan.chosen.map_or(Nearest::Union, Nearest::Tier);
    }
    // A shorter name: pod names too long under the federated one may fit.
    e.count_names();
    e
}

/// The locality plan of federated service `key`, its members' ready
/// endpoints counted from their built parts.
pub(crate) fn member_plan<'s>(
    set: &'s ClusterSet,
    parts: &PartCache,
    key: &ObjectKey,
    cx: &BuildContext<'_>,
) -> Plan<'s> {
    plan(set, key, cx.local, cx, |c, _| parts.ready_of(&c.name, key))
}

/// Ready endpoints in `parts`: a dual-stack endpoint is in a slice of each
/// family, and counts once.
fn ready_count<'p>(parts: impl Iterator<Item = &'p Part>) -> u64 {
    let (mut v4, mut v6) = (0, 0);
    for p in parts {
        v4 += p.v4.len() as u64;
        v6 += p.v6.len() as u64;
    }
    v4.max(v6)
}

/// The union of the members `plan` lets in (every eligible one for the
/// federated name; the chosen tier for the nearest name).
fn union_entry(
    set: &ClusterSet,
    parts: &PartCache,
    key: &ObjectKey,
    label: &str,
    cx: &BuildContext<'_>,
    plan: Option<&Plan<'_>>,
    nearest: bool,
) -> Option<Entry> {
    let (members, refused): (Vec<&Cluster>, Vec<&Cluster>) =
        federated_members(set, key).partition(|c| c.services.get(key).is_some_and(|s| !s.refused));
    if members.is_empty() && refused.is_empty() {
        return None;
    }
    let eligible: Vec<&Cluster> = members
        .iter()
        .copied()
        .filter(|c| federation_eligible(&c.health, cx))
        .collect();
    let fail_open = eligible.is_empty() && !members.is_empty();
    let mut used = if fail_open { members } else { eligible };
    let nearest = match plan.filter(|_| nearest).map(|p| (p, p.chosen)) {
        None => Nearest::No,
        Some((_, None)) => Nearest::Union,
        Some((p, Some(tier))) => {
            used.retain(|c| p.chosen_member(&c.name));
            Nearest::Tier(tier)
        }
    };
    let stale = used.iter().any(|c| c.health.broken_since.is_some());
    let ns = &key.namespace;
    let mut head = Head {
        name: format!("{label}.{ns}.svc.{}", cx.zone).into(),
        namespace: ns.clone(),
        origin: Origin::Federated {
            fail_open,
            stale,
            mcs: false,
            nearest,
        },
        headless: refused
            .iter()
            .all(|c| c.services.get(key).is_some_and(|s| s.headless)),
        refused: refused.iter().map(|c| c.name.clone()).collect(),
        tiers: plan.filter(|_| cx.tiers).map(|p| p.tiers().into()),
    };
    let (mut found, mut ports) = (Vec::new(), Vec::new());
    for c in used {
        let Some(svc) = c.services.get(key) else {
            continue;
        };
        head.headless &= svc.headless;
        if !svc.headless {
            ports.extend(c.slices_of(key).flat_map(|s| s.ports.iter().cloned()));
        }
        found.extend(parts.of(&c.name, key).cloned());
    }
    Entry::from_parts(head, found, ports)
}

pub(crate) mod mcs;

#[cfg(test)]
mod tests;
