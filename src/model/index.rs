//! The index: service names → record sets, published as immutable
//! [`Snapshot`]s that the query path reads without locks.
//!
//! Owns name ownership (which (service, cluster) pair owns a label when two
//! generate the same one, docs/architecture.md, decision 7), length limits, the reverse
//! map and the counters about them. Updates cost what changed: only the
//! labels a batch of events touched are rebuilt, and the persistent maps make
//! publishing a new snapshot O(changes). It must not parse queries or build
//! DNS messages.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::budget::Budget;
use super::cluster::{ClusterSet, Dirty, Seniority};
use super::entry::mcs::{Conflicts, build_mcs_entry, conflicts};
use super::entry::{
    BuildContext, Entry, PartCache, build_cluster_entry, build_federated_entry,
    build_nearest_entry, federated_members, member_plan,
};
use super::epoch::Epoch;
use super::locality::Plan;
use super::objects::{ObjectKey, Service};
use crate::vocab::name::{FEDERATED, NEAREST};
use crate::vocab::name::{MAX_LABEL, MAX_NAME_TEXT, ZoneName};
use crate::vocab::place::Place;
use crate::vocab::trust::TrustSettings;
use ptr::Ptrs;

/// Answer settings, part of every snapshot so a configuration reload swaps
/// them together with the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The forward zone.
    pub zone: ZoneName,
    /// Positive TTL.
    pub ttl: u32,
    /// Negative TTL: the SOA's TTL and MINIMUM in negative answers.
    pub negative_ttl: u32,
    /// Addresses of `ns.dns.<zone>` (the NS glue).
    pub ns_addrs: Vec<IpAddr>,
    /// Reverse zones served for PTR.
    pub reverse_zones: Vec<ZoneName>,
    /// Largest UDP response (EDNS), docs/architecture.md, decision 9.
    pub max_udp_payload: u16,
    /// Per-cluster names of a cluster whose watch is broken are served for
    /// this long, then SERVFAIL (`None`: forever).
    pub max_stale: Option<Duration>,
    /// TTL cap on answers served from stale data.
    pub stale_ttl: u32,
    /// A member whose watch is broken stays in federated answers this long.
    pub federated_grace: Duration,
    /// A cluster whose API server has answered nothing for this long is
    /// unreachable (its watches count as broken since its last answer).
    /// Read by the cluster tasks, which follow a reload; the index itself
    /// only sees the health they report.
    pub cluster_timeout: Duration,
    /// What one linked cluster may make us hold; the sources apply it.
    pub budget: Budget,
    /// What any cluster may make us answer (addresses, namespaces); the
    /// sources apply it where objects enter.
    pub trust: TrustSettings,
    /// A/AAAA/SRV answers carry at most this many records of their RRset,
    /// rotated (0: as many as fit the transport).
    pub max_answer_records: usize,
    /// Serve the Kubernetes MCS names (`<svc>.<ns>.svc.<zone>`) of
    /// services a ServiceExport exports (docs/architecture.md, decision 6).
    pub mcs: bool,
    /// The local cluster's place (`--region`, `--zone`); unknown leaves it
    /// to the clusters file or its ClusterProperty (docs/locality.md).
    pub local_place: Place,
    /// TTL cap on `<svc>-nearest` answers, so clients follow a failover
    /// quickly.
    pub nearest_ttl: u32,
    /// SRV answers of federated and nearest names carry priority 10 × tier
    /// (off: every priority is 0, as before).
    pub srv_priority_tiers: bool,
    /// Clients that may transfer the zone (AXFR, IXFR); none by default.
    pub allow_transfer: Vec<ipnet::IpNet>,
    /// Secondaries told of each new serial (NOTIFY).
    pub notify: Vec<std::net::SocketAddr>,
    /// TSIG keys: with any, a zone transfer must be signed by one of them
    /// (and come from `allow_transfer`), and NOTIFYs are signed by the
    /// first.
    pub transfer_keys: Vec<crate::vocab::tsig::TsigKey>,
    /// How much of the zone's history the IXFR journal keeps.
    pub ixfr_journal: JournalLimits,
    /// Octets per second every zone transfer shares (0: no limit).
    pub transfer_rate: u64,
}

/// How much the IXFR journal keeps: the oldest versions go first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalLimits {
    /// Versions (differences from one serial to the next) at most.
    pub versions: usize,
    /// Octets of their records at most (uncompressed, as on the wire).
    pub bytes: u64,
}

impl Default for JournalLimits {
    /// 100 versions and 16 MiB: minutes of steady churn, small next to
    /// the index (about 135 MiB at a million endpoints).
    fn default() -> Self {
        Self {
            versions: 100,
            bytes: 16 * 1024 * 1024,
        }
    }
}

impl Settings {
    /// Settings with the documented defaults for `zone`.
    pub fn new(zone: ZoneName) -> Self {
        Self {
            zone,
            ttl: 5,
            negative_ttl: 5,
            ns_addrs: Vec::new(),
            reverse_zones: Vec::new(),
            max_udp_payload: 1232,
            max_stale: None,
            stale_ttl: 5,
            federated_grace: Duration::from_secs(30),
            cluster_timeout: Duration::from_secs(10),
            budget: Budget::default(),
            trust: TrustSettings::default(),
            max_answer_records: 0,
            mcs: false,
            local_place: Place::default(),
            nearest_ttl: 5,
            srv_priority_tiers: false,
            allow_transfer: Vec::new(),
            notify: Vec::new(),
            transfer_keys: Vec::new(),
            ixfr_journal: JournalLimits::default(),
            transfer_rate: 0,
        }
    }
}

/// Sync state of one cluster as the query path sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// Cluster name.
    pub name: Arc<str>,
    /// Synced at least once.
    pub synced: bool,
    /// Watch broken since, if broken.
    pub broken_since: Option<Instant>,
}

/// Counters about the index, exported as metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Names served (service names and pod names).
    pub names: u64,
    /// (service, cluster) pairs that lost a name collision.
    pub collisions: u64,
    /// Names not served because a label exceeds 63 or the name 253 octets.
    pub too_long: u64,
    /// MCS services whose exports disagree on the type or a port (the
    /// oldest export decides).
    pub mcs_conflicts: u64,
    /// Clusters left out of MCS answers because a cluster known before
    /// them claims the same cluster id.
    pub mcs_id_conflicts: u64,
}

/// An immutable view of everything the query path needs.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Answer settings.
    pub settings: Arc<Settings>,
    /// SOA serial: strictly increases with every change.
    pub serial: u32,
    /// Unique per snapshot published in this process (never reused), so a
    /// check made against one snapshot can be remembered.
    pub generation: u64,
    /// Service names by `<label>.<ns>`.
    pub entries: imbl::HashMap<Arc<str>, Arc<Entry>>,
    /// Number of served service names per namespace (empty non-terminals).
    pub namespaces: imbl::HashMap<Arc<str>, u32>,
    /// PTR targets by address (only with reverse zones configured).
    pub reverse: imbl::OrdMap<IpAddr, Arc<str>>,
    /// Cluster status by cluster id.
    pub clusters: Arc<Vec<Option<ClusterStatus>>>,
    /// Names of clusters that are known but have never synced.
    pub unsynced: Arc<Vec<Arc<str>>>,
    /// The source has announced every cluster it knows of: a cluster not in
    /// `clusters` does not exist (until then any name might).
    pub known: bool,
    /// Every local cluster has synced (or there is none): mirror Services,
    /// which change gateway-mode answers of other clusters, are all in.
    pub local_synced: bool,
    /// Start-up is over: every cluster was known and had synced (or been
    /// given up on) at least once. Stays true, so a cluster linked later
    /// does not take federated names away while it syncs.
    pub settled: bool,
    /// Counters.
    pub stats: IndexStats,
    /// What changed since the snapshot published before this one: what
    /// the IXFR journal diffs.
    pub changes: Arc<Changes>,
}

/// The names that changed between two published snapshots, so the zone's
/// differences are computed from them alone, never from whole zones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// The serial of the snapshot published before (0: none).
    pub since: u32,
    /// Keys of the entries rebuilt since (set or taken away).
    pub entries: Vec<Arc<str>>,
    /// Everything may have changed (new settings, a new index): no
    /// difference can be told.
    pub whole: bool,
}

impl Snapshot {
    /// An empty snapshot, serial 1 (an index starts its own at its epoch).
    pub fn empty(settings: Arc<Settings>) -> Self {
        Self {
            settings,
            serial: 1,
            generation: next_generation(),
            entries: imbl::HashMap::new(),
            namespaces: imbl::HashMap::new(),
            reverse: imbl::OrdMap::new(),
            clusters: Arc::new(Vec::new()),
            unsynced: Arc::new(Vec::new()),
            known: false,
            local_synced: true,
            settled: false,
            stats: IndexStats::default(),
            changes: Arc::new(Changes {
                whole: true,
                ..Changes::default()
            }),
        }
    }

    /// The status of cluster `id`.
    pub fn cluster(&self, id: u32) -> Option<&ClusterStatus> {
        self.clusters.get(id as usize).and_then(Option::as_ref)
    }

    /// The status of the cluster called `name` (a scan: for answers that
    /// explain themselves, not for the hot path).
    pub fn cluster_named(&self, name: &str) -> Option<&ClusterStatus> {
        self.clusters.iter().flatten().find(|c| &*c.name == name)
    }
}

fn next_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The clusters whose objects of a federated service changed in a batch;
/// `None` when anything may have changed (a cluster's health or place).
type Touch = Option<Vec<Arc<str>>>;

/// What the last plan of a nearest name answered by one tier decided: the
/// members of farther tiers and where the rule came from. Tiers move only
/// with a health, place, rule or settings change, each of which plans
/// again.
#[derive(Debug)]
struct NearestMemo {
    far: Vec<Arc<str>>,
    rule_from: Option<Arc<str>>,
}

/// Who wants a label. Among Linkerd's forms lower sorts first and wins;
/// an MCS claim then competes with that winner by age ([`winner`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Claim {
    /// Per-cluster (and MCS) claims sort after federated ones:
    /// `<svc>-federated` always means the union.
    per_cluster: bool,
    /// Older wins (docs/architecture.md, decision 7), by a seniority no cluster can
    /// forge.
    seniority: Seniority,
    /// The MCS name `<svc>` (cluster empty).
    mcs: bool,
    /// The nearest name `<svc>-nearest` (cluster empty).
    nearest: bool,
    /// The oldest Service behind the claim (a federated claim's
    /// `seniority` sorts it first; this is its real age, against an MCS
    /// claim).
    age: Seniority,
    /// Cluster name breaks ties.
    cluster: Arc<str>,
    service: ObjectKey,
}

/// The claim that gets a label: the first of Linkerd's forms, unless an
/// MCS claim is older than it (docs/architecture.md, decision 7: the older Service).
fn winner(claims: &[Claim]) -> Option<&Claim> {
    let linkerd = claims.iter().find(|c| !c.mcs);
    let mcs = claims.iter().find(|c| c.mcs);
    match (linkerd, mcs) {
        (Some(l), Some(m)) if (m.age, &m.service) < (l.age, &l.service) => Some(m),
        (Some(l), _) => Some(l),
        (None, m) => m,
    }
}

/// The writer side of the index. One task owns it and publishes snapshots.
#[derive(Debug)]
pub(crate) struct Index {
    settings: Arc<Settings>,
    claims: HashMap<Arc<str>, Vec<Claim>>,
    /// The label key each (cluster, service) currently claims.
    claim_of: HashMap<(Arc<str>, ObjectKey), Arc<str>>,
    /// Services whose name is too long: (cluster, service) for per-cluster
    /// names, (None, service) for the federated name.
    too_long_names: HashSet<(Option<Arc<str>>, ObjectKey)>,
    /// Pod names too long, per entry key.
    too_long_pods: HashMap<Arc<str>, u32>,
    losers: HashMap<Arc<str>, usize>,
    /// MCS services with a conflict, and what it is (one log line per
    /// change of state).
    mcs_conflicts: HashMap<ObjectKey, Conflicts>,
    /// Clusters whose MCS id another holds: (id, holder).
    mcs_id_taken: HashMap<Arc<str>, (Arc<str>, Arc<str>)>,
    /// PTR names (with reverse zones).
    ptrs: Ptrs,
    /// Each held slice's part of its names, rebuilt only when it changes.
    parts: PartCache,
    /// What the last plan of each nearest name answered by one tier
    /// decided.
    nearest_memo: HashMap<ObjectKey, NearestMemo>,
    snap: Snapshot,
    /// Wall-clock time for serials.
    epoch: Epoch,
    /// Entries rebuilt since the last [`Index::publish_snapshot`], and
    /// whether everything was.
    changed: (BTreeSet<Arc<str>>, bool),
    /// The serial of the last published snapshot.
    published: u32,
}

impl Index {
    /// An empty index whose serials start at `epoch`'s Unix seconds.
    pub(crate) fn new(settings: Arc<Settings>, epoch: Epoch) -> Self {
        let mut snap = Snapshot::empty(settings.clone());
        snap.serial = epoch.unix_secs(epoch.at());
        Self {
            snap,
            epoch,
            settings,
            claims: HashMap::new(),
            claim_of: HashMap::new(),
            too_long_names: HashSet::new(),
            too_long_pods: HashMap::new(),
            losers: HashMap::new(),
            mcs_conflicts: HashMap::new(),
            mcs_id_taken: HashMap::new(),
            ptrs: Ptrs::default(),
            parts: PartCache::default(),
            nearest_memo: HashMap::new(),
            changed: (BTreeSet::new(), true),
            published: 0,
        }
    }

    /// The current snapshot (cheap: the maps are persistent). Its
    /// [`Changes`] are those of the last published snapshot: only
    /// [`Index::publish_snapshot`] counts them, so a snapshot taken for a
    /// look costs no copy of what changed.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        let mut snap = self.snap.clone();
        snap.generation = next_generation();
        Arc::new(snap)
    }

    /// The current snapshot, to publish, with what changed since the one
    /// published before; the next one's changes are counted from it.
    pub(crate) fn publish_snapshot(&mut self) -> Arc<Snapshot> {
        let (entries, whole) = std::mem::take(&mut self.changed);
        self.snap.changes = Arc::new(Changes {
            since: self.published,
            entries: entries.into_iter().collect(),
            whole,
        });
        self.published = self.snap.serial;
        self.snapshot()
    }

    /// Replaces the settings and rebuilds every name under them (a
    /// configuration reload). The serial keeps increasing. Returns false
    /// when no answer setting changed: the budget and the trust settings
    /// are the sources' (what a cluster may make us hold), and who may
    /// transfer the zone and whom to notify are the transfers'; no answer
    /// reads them, so a reload of them alone keeps every name and the
    /// serial (the snapshot still carries them).
    pub(crate) fn reset_settings(
        &mut self,
        settings: Arc<Settings>,
        set: &ClusterSet,
        now: Instant,
    ) -> bool {
        let same_answers = Settings {
            budget: settings.budget,
            trust: settings.trust.clone(),
            allow_transfer: settings.allow_transfer.clone(),
            notify: settings.notify.clone(),
            transfer_keys: settings.transfer_keys.clone(),
            ixfr_journal: settings.ixfr_journal,
            transfer_rate: settings.transfer_rate,
            ..(*self.settings).clone()
        } == *settings;
        if same_answers {
            self.snap.settings = settings.clone();
            self.settings = settings;
            return false;
        }
        let serial = self.snap.serial;
        let (known, settled) = (self.snap.known, self.snap.settled);
        let published = self.published;
        *self = Self::new(settings, self.epoch);
        self.published = published;
        self.snap.serial = serial;
        self.snap.known = known;
        self.snap.settled = settled;
        let mut dirty = Dirty::default();
        for c in set.iter() {
            dirty.health.insert(c.name.clone());
            dirty
                .services
                .extend(c.services.keys().map(|k| (c.name.clone(), k.clone())));
        }
        self.refresh(set, &dirty, now);
        if set.iter().next().is_none() {
            // Nothing to rebuild, but the settings are new: a new serial too.
            self.bump_serial(now);
        }
        true
    }

    /// Moves the serial past the last one, and never behind the wall clock.
    fn bump_serial(&mut self, now: Instant) {
        self.snap.serial = self
            .snap
            .serial
            .wrapping_add(1)
            .max(self.epoch.unix_secs(now));
    }

    /// Records, at `now`, that the source has announced every cluster it
    /// knows of (the clusters in `set` are all there is). Returns true when
    /// that is news (the snapshot changed).
    pub(crate) fn set_known(&mut self, set: &ClusterSet, now: Instant) -> bool {
        if self.snap.known {
            return false;
        }
        self.snap.known = true;
        self.refresh_statuses(set);
        self.bump_serial(now);
        true
    }

    /// The settings in use.
    pub(crate) fn settings(&self) -> &Arc<Settings> {
        &self.settings
    }

    /// Recomputes what `dirty` touched and bumps the serial. Returns false
    /// (and does nothing) when `dirty` is empty.
    pub(crate) fn refresh(&mut self, set: &ClusterSet, dirty: &Dirty, now: Instant) -> bool {
        if dirty.is_empty() {
            return false;
        }
        let mut touched: BTreeSet<Arc<str>> = BTreeSet::new();
        let (federated, mcs) = self.collect_dirty(set, dirty, &mut touched);
        for (key, clusters) in &federated {
            let far = clusters
                .as_deref()
                .is_some_and(|changed| self.only_farther(set, key, changed));
            self.update_federated_claim(set, key, &mut touched, !far);
        }
        for key in &mcs {
            self.update_mcs_claim(set, key, &mut touched);
            self.note_mcs_conflicts(set, key);
        }
        // A clone of the Arc, so the context does not borrow `self`.
        let settings = self.settings.clone();
        let cx = BuildContext {
            zone: settings.zone.text(),
            federated_grace: settings.federated_grace,
            now,
            local: &settings.local_place,
            tiers: settings.srv_priority_tiers,
        };
        for key in &touched {
            self.rebuild(set, key, &cx);
        }
        if !dirty.health.is_empty() {
            self.refresh_statuses(set);
        }
        // Clusters coming and going are health changes; an id change is its
        // own.
        if self.settings.mcs && (dirty.ids || !dirty.health.is_empty()) {
            self.note_mcs_ids(set);
        }
        self.snap.stats.too_long = self.too_long_names.len() as u64
            + self
                .too_long_pods
                .values()
                .map(|&n| u64::from(n))
                .sum::<u64>();
        self.bump_serial(now);
        true
    }

    /// True when the nearest name of `key` cannot change because of changes
    /// in clusters `changed`: by the last plan, each is in a tier farther
    /// than the one answered, still a held federated member, and sets no
    /// failover rule (its Service may have changed: a rule could reorder
    /// the tiers). Then not even a plan is needed.
    fn only_farther(&self, set: &ClusterSet, key: &ObjectKey, changed: &[Arc<str>]) -> bool {
        let Some(memo) = self.nearest_memo.get(key) else {
            return false;
        };
        changed.iter().all(|c| {
            memo.far.contains(c)
                && memo.rule_from.as_ref() != Some(c)
                && set
                    .get(c)
                    .and_then(|cl| cl.services.get(key))
                    .is_some_and(|s| s.federated && !s.refused && s.locality.is_none())
        })
    }

    /// Brings the parts and per-cluster claims of every dirty service up
    /// to date, and says which federated and MCS names to look at again:
    /// for each federated service, the clusters whose objects changed, or
    /// `None` when a cluster's health or place changed (anything may have).
    fn collect_dirty(
        &mut self,
        set: &ClusterSet,
        dirty: &Dirty,
        touched: &mut BTreeSet<Arc<str>>,
    ) -> (BTreeMap<ObjectKey, Touch>, BTreeSet<ObjectKey>) {
        let mut federated: BTreeMap<ObjectKey, Touch> = BTreeMap::new();
        let mut mcs: BTreeSet<ObjectKey> = BTreeSet::new();
        for (cluster, key) in &dirty.services {
            self.parts.update(set, cluster, key, self.settings.mcs);
            let held = set
                .get(cluster)
                .and_then(|c| Some((c.services.get(key)?, c)));
            let service = held.map(|(s, _)| s);
            // Most services never are federated: their federated name needs
            // no look at every cluster unless one of them makes it exist.
            if (service.is_some_and(|s| s.federated) || self.has_federated_claim(key))
                && let Some(clusters) = federated.entry(key.clone()).or_insert(Some(Vec::new()))
            {
                clusters.push(cluster.clone());
            }
            if self.settings.mcs
                && (service.is_some_and(|s| s.mcs.is_some()) || self.has_mcs_claim(key))
            {
                mcs.insert(key.clone());
            }
            let seniority = held.map(|(s, c)| (s, c.seniority(s.created)));
            self.update_cluster_claim(cluster, key, seniority, touched);
        }
        for name in &dirty.health {
            if let Some(c) = set.get(name) {
                for s in c.services.values() {
                    if s.federated {
                        federated.insert(s.key.clone(), None);
                    }
                    if s.mcs.is_some() && self.settings.mcs {
                        mcs.insert(s.key.clone());
                    }
                }
            }
        }
        (federated, mcs)
    }

    /// Records whether a service's name is too long to serve, warning once
    /// when it becomes so.
    fn note_too_long(&mut self, who: (Option<Arc<str>>, ObjectKey), too_long: bool, label: &str) {
        if !too_long {
            self.too_long_names.remove(&who);
        } else if self.too_long_names.insert(who.clone()) {
            warn!(
                cluster = who.0.as_deref().unwrap_or("(federated)"), service = %who.1, %label,
                "name not served: a label is limited to 63 octets and a name to 253"
            );
        }
    }

    fn name_fits(&self, label: &str, ns: &str) -> bool {
        label.len() <= MAX_LABEL
            && label.len() + ns.len() + self.settings.zone.text().len() + 6 <= MAX_NAME_TEXT
    }

    /// True when `<svc>-federated` of `key` is claimed now, or would be
    /// but for its length.
    fn has_federated_claim(&self, key: &ObjectKey) -> bool {
        let label_key = format!("{}-{FEDERATED}.{}", key.name, key.namespace);
        self.claims
            .get(label_key.as_str())
            .is_some_and(|claims| claims.iter().any(|c| !c.per_cluster))
            || self.too_long_names.contains(&(None, key.clone()))
    }

    /// True when the MCS name of `key` is claimed now.
    fn has_mcs_claim(&self, key: &ObjectKey) -> bool {
        let label_key = format!("{}.{}", key.name, key.namespace);
        self.claims
            .get(label_key.as_str())
            .is_some_and(|claims| claims.iter().any(|c| c.mcs))
    }

    /// The MCS name `<svc>` of `key`: claimed while any cluster exports
    /// the service through a ServiceExport, as old as its oldest Service.
    fn update_mcs_claim(
        &mut self,
        set: &ClusterSet,
        key: &ObjectKey,
        touched: &mut BTreeSet<Arc<str>>,
    ) {
        let label_key: Arc<str> = format!("{}.{}", key.name, key.namespace).into();
        let age = set
            .iter()
            .filter_map(|c| {
                let s = c.services.get(key).filter(|s| s.mcs.is_some())?;
                Some(c.seniority(s.created))
            })
            .min();
        let fits = self.name_fits(&key.name, &key.namespace);
        let claims = self.claims.entry(label_key.clone()).or_default();
        claims.retain(|c| !c.mcs);
        if let Some(age) = age.filter(|_| fits) {
            claims.push(Claim {
                per_cluster: true,
                seniority: age,
                mcs: true,
                nearest: false,
                age,
                cluster: Arc::from(""),
                service: key.clone(),
            });
            claims.sort();
        }
        touched.insert(label_key);
    }

    /// Reports what the exports of MCS service `key` disagree on when that
    /// changes: the defining export decides (KEP-1645, [`members`]).
    ///
    /// [`members`]: crate::model::entry::mcs::members
    fn note_mcs_conflicts(&mut self, set: &ClusterSet, key: &ObjectKey) {
        let now = conflicts(set, key);
        if now.none() {
            if self.mcs_conflicts.remove(key).is_some() {
                info!(service = %key, "MCS export conflict resolved");
            }
        } else if self.mcs_conflicts.get(key) != Some(&now) {
            warn!(
                service = %key, definer = ?now.definer, conflicts = ?now.found,
                "MCS exports disagree: the defining ServiceExport's type, port numbers and fields are served, with the union of the ports; clusters of the other type are left out"
            );
            self.mcs_conflicts.insert(key.clone(), now);
        }
        self.snap.stats.mcs_conflicts = self.mcs_conflicts.len() as u64;
    }

    /// Reports clusters whose MCS id a cluster known before them holds.
    fn note_mcs_ids(&mut self, set: &ClusterSet) {
        let mut taken = HashMap::new();
        for c in set.iter() {
            if let Some(holder) = set.mcs_id_holder(c.mcs_id()).filter(|h| h.name != c.name) {
                taken.insert(c.name.clone(), (c.mcs_id().clone(), holder.name.clone()));
            }
        }
        for (cluster, (id, holder)) in &taken {
            if self.mcs_id_taken.get(cluster) != Some(&(id.clone(), holder.clone())) {
                warn!(
                    %cluster, %id, %holder,
                    "MCS cluster id already held by a cluster known before: left out of MCS names"
                );
            }
        }
        for cluster in self.mcs_id_taken.keys().filter(|c| !taken.contains_key(*c)) {
            info!(%cluster, "MCS cluster id conflict resolved");
        }
        self.mcs_id_taken = taken;
        self.snap.stats.mcs_id_conflicts = self.mcs_id_taken.len() as u64;
    }

    /// `service` is `key` in `cluster` now (with its seniority), if it is
    /// there.
    fn update_cluster_claim(
        &mut self,
        cluster: &Arc<str>,
        key: &ObjectKey,
        service: Option<(&Service, Seniority)>,
        touched: &mut BTreeSet<Arc<str>>,
    ) {
        let pair = (cluster.clone(), key.clone());
        let service = service.filter(|(s, _)| s.export.is_some());
        let label = format!("{}-{}", key.name, cluster);
        let fits = self.name_fits(&label, &key.namespace);
        self.note_too_long(
            (Some(cluster.clone()), key.clone()),
            service.is_some() && !fits,
            &label,
        );
        let new = service.filter(|_| fits).map(|(_, seniority)| {
            let claim = Claim {
                per_cluster: true,
                seniority,
                mcs: false,
                nearest: false,
                age: seniority,
                cluster: cluster.clone(),
                service: key.clone(),
            };
            (
                Arc::<str>::from(format!("{label}.{}", key.namespace)),
                claim,
            )
        });
        if let Some(old_key) = self.claim_of.remove(&pair) {
            if let Some(claims) = self.claims.get_mut(&old_key) {
                claims.retain(|c| {
                    !(c.per_cluster && !c.mcs && c.cluster == *cluster && c.service == *key)
                });
            }
            touched.insert(old_key);
        }
        if let Some((label_key, claim)) = new {
            let claims = self.claims.entry(label_key.clone()).or_default();
            claims.push(claim);
            claims.sort();
            self.claim_of.insert(pair, label_key.clone());
            touched.insert(label_key);
        }
    }

    /// The federated name `<svc>-federated` and the nearest name
    /// `<svc>-nearest` of `key`: claimed while any cluster has a member,
    /// before any per-cluster claim (decision 7: the reserved suffixes).
    fn update_federated_claim(
        &mut self,
        set: &ClusterSet,
        key: &ObjectKey,
        touched: &mut BTreeSet<Arc<str>>,
        with_nearest: bool,
    ) {
        let present = federated_members(set, key).next().is_some();
        if !present {
            self.nearest_memo.remove(key);
        }
        let age = federated_members(set, key)
            .filter_map(|c| Some(c.seniority(c.services.get(key)?.created)))
            .min()
            .unwrap_or(Seniority::LAST);
        for (suffix, nearest) in [(FEDERATED, false), (NEAREST, true)] {
            if nearest && !with_nearest {
                continue;
            }
            let label = format!("{}-{suffix}", key.name);
            let label_key: Arc<str> = format!("{label}.{}", key.namespace).into();
            let fits = self.name_fits(&label, &key.namespace);
            // The nearest name is one suffix longer or shorter than the
            // federated one; its own length is reported with it.
            self.note_too_long(
                (Some(Arc::from(suffix)).filter(|_| nearest), key.clone()),
                present && !fits,
                &label,
            );
            let claims = self.claims.entry(label_key.clone()).or_default();
            claims.retain(|c| c.per_cluster);
            if present && fits {
                claims.insert(
                    0,
                    Claim {
                        per_cluster: false,
                        seniority: Seniority::FIRST,
                        mcs: false,
                        nearest,
                        age,
                        cluster: Arc::from(""),
                        service: key.clone(),
                    },
                );
            }
            touched.insert(label_key);
        }
    }

    /// Keeps what `plan` decided for the nearest name of `key` (nothing
    /// when no tier is answered: any change may move a fail-open union).
    fn remember_plan(&mut self, key: &ObjectKey, plan: &Plan<'_>) {
        match plan.chosen {
            Some(t) => {
                let far = plan
                    .members
                    .iter()
                    .filter(|m| m.tier.is_some_and(|tier| tier > t))
                    .map(|m| m.cluster.name.clone())
                    .collect();
                let memo = NearestMemo {
                    far,
                    rule_from: plan.rule_from.clone(),
                };
                self.nearest_memo.insert(key.clone(), memo);
            }
            None => {
                self.nearest_memo.remove(key);
            }
        }
    }

    fn rebuild(&mut self, set: &ClusterSet, key: &Arc<str>, cx: &BuildContext<'_>) {
        let claims = self.claims.get(key).cloned().unwrap_or_default();
        if claims.is_empty() {
            self.claims.remove(key);
        }
        let (label, _) = key.split_once('.').unwrap_or((key, ""));
        let won = winner(&claims);
        let entry = match won {
            None => None,
            Some(w) if w.mcs => build_mcs_entry(set, &self.parts, &w.service, cx),
            Some(w) if w.nearest => {
                let plan = member_plan(set, &self.parts, &w.service, cx);
                self.remember_plan(&w.service, &plan);
                // Rebuilt after the federated name (touched keys are
                // sorted: `-federated.` before `-nearest.`), so this is
                // the federated entry of the same state.
                let federated = format!("{}-{FEDERATED}.{}", w.service.name, w.service.namespace);
                let federated = self.snap.entries.get(federated.as_str());
                let label = (label, federated.map(|f| &**f));
                build_nearest_entry(set, &self.parts, &w.service, label, cx, &plan)
            }
            Some(w) if !w.per_cluster => {
                build_federated_entry(set, &self.parts, &w.service, label, cx)
            }
            Some(w) => match set.get(&w.cluster) {
                Some(cluster) => {
                    build_cluster_entry(set, &self.parts, cluster, &w.service, label, cx)
                }
                None => None,
            },
        };

        let losers = claims.len().saturating_sub(1);
        let before = self.losers.get(key).copied().unwrap_or(0);
        if losers > before {
            if let Some(w) = won {
                for lost in claims.iter().filter(|c| *c != w) {
                    warn!(
                        name = %key, winner_cluster = %w.cluster, winner_service = %w.service,
                        winner_mcs = w.mcs, loser_cluster = %lost.cluster,
                        loser_service = %lost.service, loser_mcs = lost.mcs,
                        "name collision: the older service keeps the name"
                    );
                }
            }
        } else if losers < before && losers == 0 {
            info!(name = %key, "name collision resolved");
        }
        if losers == 0 {
            self.losers.remove(key);
        } else {
            self.losers.insert(key.clone(), losers);
        }
        self.snap.stats.collisions = self.snap.stats.collisions + losers as u64 - before as u64;

        let too_long = entry.as_ref().map_or(0, Entry::too_long);
        if too_long == 0 {
            self.too_long_pods.remove(key);
        } else {
            self.too_long_pods.insert(key.clone(), too_long);
        }
        let entry = entry.map(Arc::new);
        if !self.settings.reverse_zones.is_empty() {
            let priority = won
                .map(|w| (w.seniority, w.cluster.clone()))
                .unwrap_or((Seniority::LAST, Arc::from("")));
            self.ptrs
                .update(key, entry.as_deref(), priority, &mut self.snap.reverse);
        }
        self.publish(key, entry);
    }

    /// Puts `new` at `key` in the snapshot (or takes the name away), with
    /// the name count and the namespaces' empty non-terminals.
    fn publish(&mut self, key: &Arc<str>, new: Option<Arc<Entry>>) {
        self.changed.0.insert(key.clone());
        let old = match &new {
            Some(entry) => self.snap.entries.insert(key.clone(), entry.clone()),
            None => self.snap.entries.remove(key),
        };
        let old_names = old.as_ref().map_or(0, |e| e.name_count() as u64);
        let new_names = new.as_ref().map_or(0, |e| e.name_count() as u64);
        self.snap.stats.names = self.snap.stats.names + new_names - old_names;
        match (&old, &new) {
            (None, Some(e)) => *self.snap.namespaces.entry(e.namespace.clone()).or_insert(0) += 1,
            (Some(e), None) => {
                let gone = match self.snap.namespaces.get_mut(&e.namespace) {
                    Some(n) => {
                        *n -= 1;
                        *n == 0
                    }
                    None => false,
                };
                if gone {
                    self.snap.namespaces.remove(&e.namespace);
                }
            }
            _ => {}
        }
    }

    fn refresh_statuses(&mut self, set: &ClusterSet) {
        let mut table: Vec<Option<ClusterStatus>> = Vec::new();
        let mut unsynced = Vec::new();
        let mut waiting = false;
        let mut local_synced = true;
        for c in set.iter() {
            waiting |= !c.health.synced && !c.health.sync_given_up;
            local_synced &= !c.local || c.health.synced;
            let id = c.id as usize;
            if table.len() <= id {
                table.resize(id + 1, None);
            }
            table[id] = Some(ClusterStatus {
                name: c.name.clone(),
                synced: c.health.synced,
                broken_since: c.health.broken_since,
            });
            if !c.health.synced {
                unsynced.push(c.name.clone());
            }
        }
        self.snap.clusters = Arc::new(table);
        self.snap.unsynced = Arc::new(unsynced);
        self.snap.local_synced = local_synced;
        if self.snap.known && !waiting && !self.snap.settled {
            self.snap.settled = true;
            debug!(
                clusters = set.iter().count(),
                "start-up settled: every cluster has loaded or been given up on"
            );
        }
    }
}

mod ptr;

#[cfg(test)]
mod tests;
