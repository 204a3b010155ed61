//! Answers: what a query means in the clusterset zone, computed from a
//! [`Snapshot`] (docs/dns.md §3, docs/architecture.md, decisions).
//!
//! A pure function from (snapshot, question) to an [`Answer`]: rcode, AA,
//! and the records of each section. It owns NXDOMAIN-versus-NODATA (RFC
//! 8020), the SOA in every negative answer (RFC 2308), SRV targets, weights
//! and Additional records, ANY, PTR, SERVFAIL before sync and for stale data,
//! and how much of a large RRset an answer carries (docs/architecture.md, decision 9):
//! sized with [`wire::answer_len`](super::wire::answer_len) against the
//! [`Room`] the transport leaves, rotated so that successive answers serve
//! every record. It must not touch bytes (that is `wire`) or sockets.

use std::cell::Cell;
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use super::name::{Parsed, QName, ReverseName, parse, parse_reverse};
use super::wire::{
    Answer, CLASS_ANY, CLASS_IN, Ede, Owner, RData, Rcode, Record, Soa, answer_len, rtype,
};
use crate::model::objects::Port;
use crate::model::{Entry, Nearest, Origin, Pod, Snapshot};
use crate::vocab::name::ZoneName;

/// The `dns-version` TXT value. Our schema is not the MCS DNS schema, so it
/// has its own version (docs/dns.md R7).
pub(crate) const SCHEMA_VERSION: &str = "1.0.0";
/// TTL of the `dns-version` TXT record (as in the Kubernetes DNS spec).
pub(crate) const SCHEMA_TTL: u32 = 28800;

/// Facts about an answer that metrics count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Note {
    /// A federated name answered its last-known union because every member
    /// was unhealthy.
    pub fail_open: bool,
    /// Served from a cluster whose watch is broken.
    pub stale: bool,
    /// The answer carries fewer records of its RRset than the RRset has
    /// (too many for the transport's room, or above `max-answer-records`);
    /// successive rotations serve the others.
    pub capped: bool,
    /// A nearest name answered the federated union: no tier had
    /// `min-ready` ready endpoints.
    pub nearest_fail_open: bool,
}

/// How much of a large RRset an answer may carry (docs/architecture.md, decision 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Room {
    /// Every record, whatever its size and `max-answer-records`: zone dumps.
    Whole,
    /// At most `max-answer-records` records of an A, AAAA or SRV RRset, and
    /// no more than fit this many octets of Answer records. UDP gives
    /// `usize::MAX`: an answer too large for it is truncated whole by the
    /// encoder (TC=1), so the client retries over TCP and gets records there.
    Octets(usize),
}

/// The question, as the answer code needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Question<'a> {
    /// Lower-cased name.
    pub name: &'a QName,
    /// QTYPE.
    pub qtype: u16,
    /// QCLASS.
    pub qclass: u16,
    /// The room the transport leaves for Answer records.
    pub room: Room,
}

/// What an answer was computed from, so a copy of it can be reused exactly
/// as long as that part of the snapshot is unchanged (the response cache).
///
/// Every answer also depends on the settings and, when it is NXDOMAIN, on
/// every cluster being known and synced; the SOA serial is the one part that may
/// differ, and the cache rewrites it.
#[derive(Debug, Clone)]
pub(crate) enum Depends {
    /// On time or on data the cache does not check (stale clusters, the
    /// reverse map, refusals, an Extended DNS Error's text): never reuse.
    Uncacheable,
    /// On the settings alone.
    Settings,
    /// On the entry at this key being this very entry, and on its cluster's
    /// watch not being broken.
    Entry(Arc<str>, Arc<Entry>),
    /// On there being no entry at this key.
    Absent(Arc<str>),
    /// On this namespace existing (true) or not (false).
    Namespace(Arc<str>, bool),
}

impl Depends {
    /// The answer this was recorded with is still the answer in `snap`
    /// (given the same settings, and not NXDOMAIN before every cluster is
    /// known and synced).
    pub(crate) fn holds(&self, snap: &Snapshot) -> bool {
        match self {
            Self::Uncacheable => false,
            Self::Settings => true,
            Self::Entry(key, entry) => {
                snap.entries.get(key).is_some_and(|e| Arc::ptr_eq(e, entry))
                    && match entry.origin {
                        Origin::Cluster { id, .. } => {
                            snap.cluster(id).is_none_or(|c| c.broken_since.is_none())
                        }
                        Origin::Federated { .. } => true,
                    }
            }
            Self::Absent(key) => !snap.entries.contains_key(key),
            Self::Namespace(ns, exists) => snap.namespaces.contains_key(ns) == *exists,
        }
    }
}

/// An answer and what went into it.
#[derive(Debug, Clone)]
pub(crate) struct Answered {
    /// The answer.
    pub answer: Answer,
    /// Facts for metrics.
    pub note: Note,
    /// What it was computed from.
    pub depends: Depends,
    /// How many answers `rotation` tells apart (0 or 1: one): the length of
    /// the rotated RRset, or when the answer is capped the number of
    /// windows of it; the answer for rotation `r` equals the one for
    /// `r % rotated`.
    pub rotated: usize,
}

impl Answered {
    /// An answer that is not about any name (NOTIMP, BADVERS): nothing to
    /// note, never reused.
    pub(crate) fn plain(answer: Answer) -> Self {
        Self {
            answer,
            note: Note::default(),
            depends: Depends::Uncacheable,
            rotated: 0,
        }
    }
}

/// Answers one question. `rotation` rotates the address and SRV RRsets so
/// successive queries spread load, and picks the window of an RRset too
/// large for `q.room`; `now` judges staleness.
pub(crate) fn answer(snap: &Snapshot, q: Question<'_>, rotation: usize, now: Instant) -> Answered {
    let mut cx = Cx {
        snap,
        q,
        rotation,
        now,
        note: Note::default(),
        ttl: snap.settings.ttl,
        depends: Depends::Uncacheable,
        rotated: Cell::new(0),
        capped: Cell::new(false),
        ede: None,
    };
    if q.qclass != CLASS_IN && q.qclass != CLASS_ANY {
        return cx.done(Answer::empty(Rcode::Refused, false));
    }
    let settings = &snap.settings;
    let answer = if let Some(rel) = q.name.relative_to(&settings.zone) {
        cx.forward(rel)
    } else if let Some(zone) = settings
        .reverse_zones
        .iter()
        .find(|z| q.name.relative_to(z).is_some())
    {
        cx.reverse(zone)
    } else {
        Answer::empty(Rcode::Refused, false)
    };
    cx.done(answer)
}

struct Cx<'s, 'q> {
    snap: &'s Snapshot,
    q: Question<'q>,
    rotation: usize,
    now: Instant,
    note: Note,
    /// TTL of positive records, lowered for stale data.
    ttl: u32,
    depends: Depends,
    /// [`Answered::rotated`] of the RRset [`Cx::rotate`] saw.
    rotated: Cell<usize>,
    /// [`Cx::rotate`] left records out.
    capped: Cell<bool>,
    /// Why the answer is what it is, when the answer itself does not say
    /// (a stale positive answer).
    ede: Option<Ede>,
}

/// Which unsynced clusters could make a missing name exist.
#[derive(Clone, Copy)]
enum Scope<'a> {
    /// None: the grammar never has this name.
    Never,
    /// Any cluster (a namespace exists once any cluster exports into it).
    AnyCluster,
    /// The cluster a service label ends with, or any for `-federated`.
    Label(&'a str),
}

/// What a name holds, for the type dispatch shared by every kind of name.
enum Found<'e> {
    /// A service name.
    Service(&'e Entry),
    /// Pod names (one pod, one or two families).
    Pods(Vec<&'e Pod>),
}

impl Cx<'_, '_> {
    fn done(self, mut answer: Answer) -> Answered {
        if answer.ede.is_none() {
            answer.ede = self.ede;
        }
        // Stale answers change with the clock, SERVFAIL with any cluster's
        // sync; neither is worth keeping. The one Extended DNS Error left
        // on a cacheable answer (a federated name with a broken member
        // within the grace) has a text without an age, and its entry is
        // rebuilt when that member's health changes: it may be kept, which
        // matters, since every federated name a broken cluster is in would
        // otherwise miss the cache at once.
        let depends = if self.note.stale || self.note.fail_open || answer.rcode == Rcode::ServFail {
            Depends::Uncacheable
        } else {
            self.depends
        };
        // A rotated RRset that did not end up in the answer (the SRV records
        // behind a NODATA) rotates nothing and caps nothing.
        let carried = !answer.answers.is_empty();
        let rotated = if carried { self.rotated.get() } else { 0 };
        let note = Note {
            capped: carried && self.capped.get(),
            ..self.note
        };
        Answered {
            answer,
            note,
            depends,
            rotated,
        }
    }

    fn zone(&self) -> &ZoneName {
        &self.snap.settings.zone
    }

    fn soa(&self, apex: &ZoneName) -> Record {
        let s = &self.snap.settings;
        let z = self.zone().text();
        Record {
            owner: Owner::Name(apex.text().to_owned()),
            ttl: s.negative_ttl,
            data: RData::Soa(Soa {
                mname: format!("ns.dns.{z}"),
                rname: format!("hostmaster.{z}"),
                serial: self.snap.serial,
                refresh: 7200,
                retry: 1800,
                expire: 86400,
                minimum: s.negative_ttl,
            }),
        }
    }

    fn negative(&self, rcode: Rcode, apex: &ZoneName) -> Answer {
        let mut a = Answer::empty(rcode, true);
        a.authority.push(self.soa(apex));
        a
    }

    fn nodata(&self) -> Answer {
        self.negative(Rcode::NoError, self.zone())
    }

    /// True when a cluster that has not synced yet — or, before the source
    /// has announced every cluster, one not known yet — could hold a name
    /// in `scope` (docs/architecture.md, decision 5).
    fn undecided(&self, scope: Scope<'_>) -> bool {
        let unsynced = &self.snap.unsynced;
        match scope {
            Scope::Never => false,
            _ if !self.snap.known => true,
            Scope::AnyCluster => !unsynced.is_empty(),
            Scope::Label(label) => {
                // With MCS on, any label can be a service an unsynced
                // cluster exports.
                !unsynced.is_empty()
                    && (self.snap.settings.mcs
                        || label.ends_with("-federated")
                        || label.ends_with("-nearest")
                        || unsynced.iter().any(|c| claims(label, c)))
            }
        }
    }

    /// SERVFAIL for an existing entry whose answer may still change because
    /// of a cluster that has not loaded: its own cluster before its first
    /// sync; during start-up, also a cluster that could win its label
    /// (decision 7), the local mirrors (decision 1), and for federated
    /// names every member-to-be. After start-up, a cluster linked later
    /// joins federated answers when it has synced.
    fn entry_undecided(&self, entry: &Entry, label: &str) -> bool {
        let snap = self.snap;
        match &entry.origin {
            Origin::Cluster { id, .. } => {
                !snap.cluster(*id).is_none_or(|c| c.synced)
                    || (!snap.settled
                        && (!snap.local_synced || snap.unsynced.iter().any(|c| claims(label, c))))
            }
            Origin::Federated { .. } => !snap.settled,
        }
    }

    /// NXDOMAIN, or SERVFAIL when a cluster that has not synced yet could
    /// make the name exist (docs/architecture.md, decision 5).
    fn nxdomain(&self, scope: Scope<'_>, apex: &ZoneName) -> Answer {
        if self.undecided(scope) {
            return self.servfail(self.not_ready(scope), apex);
        }
        self.negative(Rcode::NxDomain, apex)
    }

    /// EDE 14 for a name [`Cx::undecided`] left open: it names the
    /// unsynced clusters that could make the name exist, as `undecided`
    /// judged them (for `<svc>-east`, east alone; with MCS, or for a
    /// federated name, any).
    fn not_ready(&self, scope: Scope<'_>) -> Ede {
        let only = match scope {
            Scope::Label(label) if !self.snap.settings.mcs && !label.ends_with("-federated") => {
                Some(label)
            }
            _ => None,
        };
        why::not_ready(self.snap, |c| only.is_none_or(|label| claims(label, c)))
    }

    /// SERVFAIL, saying why.
    fn servfail(&self, ede: Ede, apex: &ZoneName) -> Answer {
        let mut a = self.negative(Rcode::ServFail, apex);
        a.ede = Some(ede);
        a
    }

    fn positive(&self, answers: Vec<Record>, additional: Vec<Record>) -> Answer {
        Answer {
            rcode: Rcode::NoError,
            authoritative: true,
            answers,
            authority: Vec::new(),
            additional,
            ede: None,
        }
    }

    fn rr(&self, data: RData) -> Record {
        Record {
            owner: Owner::Query,
            ttl: self.ttl,
            data,
        }
    }

    /// Rotates an A, AAAA or SRV RRset by the rotation, and caps it: when
    /// more records than [`Cx::window`] allows, the RRset is cut into
    /// windows of that many (the last one wrapping round to the start, so
    /// every window is full) and the rotation picks one, so that as many
    /// successive rotations as there are windows serve every record.
    fn rotate(&self, mut records: Vec<Record>) -> Vec<Record> {
        let n = records.len();
        let k = self.window(&records);
        if k >= n {
            self.rotated.set(n);
            if n > 1 {
                records.rotate_left(self.rotation % n);
            }
            return records;
        }
        let windows = n.div_ceil(k);
        records.rotate_left(self.rotation % windows * k);
        records.truncate(k);
        self.rotated.set(windows);
        self.capped.set(true);
        records
    }

    /// How many records of `records` an answer may carry: at most
    /// `max-answer-records` (when set) and as many as fit the room (less
    /// the answer's Extended DNS Error, if any). Every
    /// record is counted at the size of the largest, so that any window of
    /// the RRset fits; at least one, so an answer is never empty by choice
    /// (the encoder truncates one that does not fit).
    fn window(&self, records: &[Record]) -> usize {
        let Room::Octets(room) = self.q.room else {
            return records.len();
        };
        // A stale answer's Extended DNS Error goes in the OPT, after the
        // records: leave it room, so that a capped answer still says why
        // (the encoder would drop it rather than a record). Staleness is
        // judged before any RRset is built, so `ede` is set by now.
        let room = room.saturating_sub(self.ede.as_ref().map_or(0, Ede::wire_len));
        let largest = records.iter().map(|r| answer_len(&r.data)).max();
        let fit = room / largest.unwrap_or(1).max(1);
        let max = match self.snap.settings.max_answer_records {
            0 => usize::MAX,
            max => max,
        };
        records.len().min(fit).min(max).max(1)
    }

    fn forward(&mut self, rel: usize) -> Answer {
        let qtype = self.q.qtype;
        if qtype == rtype::AXFR || qtype == rtype::IXFR {
            return Answer::empty(Rcode::Refused, false);
        }
        let parsed = parse(self.q.name, rel);
        self.depends = Depends::Settings;
        match parsed {
            Parsed::Apex => self.apex(self.zone().clone()),
            Parsed::Dns | Parsed::Svc => self.nodata(),
            Parsed::NsHost => {
                let s = &self.snap.settings;
                let v4: Vec<Record> = s
                    .ns_addrs
                    .iter()
                    .filter(|ip| ip.is_ipv4())
                    .map(|ip| self.addr_rr(*ip))
                    .collect();
                let v6: Vec<Record> = s
                    .ns_addrs
                    .iter()
                    .filter(|ip| ip.is_ipv6())
                    .map(|ip| self.addr_rr(*ip))
                    .collect();
                let records = match qtype {
                    rtype::ANY if !v4.is_empty() => v4,
                    rtype::A => v4,
                    rtype::AAAA | rtype::ANY => v6,
                    _ => Vec::new(),
                };
                if records.is_empty() {
                    self.nodata()
                } else {
                    self.positive(records, Vec::new())
                }
            }
            Parsed::DnsVersion => match qtype {
                rtype::TXT | rtype::ANY => {
                    let rr = Record {
                        owner: Owner::Query,
                        ttl: SCHEMA_TTL,
                        data: RData::Txt(SCHEMA_VERSION.to_owned()),
                    };
                    self.positive(vec![rr], Vec::new())
                }
                _ => self.nodata(),
            },
            Parsed::Namespace { ns } => {
                let exists = self.snap.namespaces.contains_key(ns);
                self.depends = Depends::Namespace(ns.into(), exists);
                if exists {
                    self.nodata()
                } else {
                    self.nxdomain(Scope::AnyCluster, self.zone())
                }
            }
            Parsed::Service { key }
            | Parsed::Proto { key, .. }
            | Parsed::Port { key, .. }
            | Parsed::Child { key, .. }
            | Parsed::Grandchild { key, .. } => self.at_or_below_service(key, parsed),
            Parsed::Nothing => self.nxdomain(Scope::Never, self.zone()),
        }
    }

    /// A name at or below the service entry `key` (`<label>.<ns>`).
    fn at_or_below_service(&mut self, key: &str, parsed: Parsed<'_>) -> Answer {
        let label = key.split_once('.').map_or(key, |(l, _)| l);
        let Some(entry) = self.snap.entries.get(key).cloned() else {
            self.depends = Depends::Absent(key.into());
            return self.nxdomain(Scope::Label(label), self.zone());
        };
        self.depends = Depends::Entry(key.into(), entry.clone());
        if self.entry_undecided(&entry, label) {
            // Its own cluster when that is the one not synced; else
            // (start-up) whichever has not.
            let own = match &entry.origin {
                Origin::Cluster { id, name } => self
                    .snap
                    .cluster(*id)
                    .is_some_and(|c| !c.synced)
                    .then_some(&**name),
                Origin::Federated { .. } => None,
            };
            let ede = why::not_ready(self.snap, |c| own.is_none_or(|own| own == c));
            return self.servfail(ede, self.zone());
        }
        if entry.withheld() {
            return self.servfail(why::prohibited(&entry.refused), self.zone());
        }
        if let Some(stale) = self.staleness(&entry) {
            return stale;
        }
        match self.below(&entry, parsed) {
            Some(answer) => answer,
            // A pod of a refused member may be what was asked for.
            None if refused_below(&entry, parsed) => {
                self.servfail(why::prohibited(&entry.refused), self.zone())
            }
            None => self.nxdomain(Scope::Label(label), self.zone()),
        }
    }

    /// Applies docs/architecture.md, decision 5 to an entry: SERVFAIL past `max_stale`,
    /// a capped TTL before that, and the fail-open cap for federated names.
    fn staleness(&mut self, entry: &Entry) -> Option<Answer> {
        let s = &self.snap.settings;
        match &entry.origin {
            Origin::Cluster { id, name } => {
                let since = self.snap.cluster(*id).and_then(|c| c.broken_since)?;
                if let Some(max) = s.max_stale
                    && self.now.saturating_duration_since(since) > max
                {
                    let ede = why::past_max_stale(name, since, self.now, max);
                    return Some(self.servfail(ede, self.zone()));
                }
                self.note.stale = true;
                self.ttl = self.ttl.min(s.stale_ttl);
                self.ede = Some(why::stale(&[(name, since)], self.now));
            }
            Origin::Federated {
                fail_open,
                stale,
                nearest,
                ..
            } => {
                if *nearest != Nearest::No {
                    self.ttl = self.ttl.min(s.nearest_ttl);
                    self.note.nearest_fail_open = *nearest == Nearest::Union;
                }
                if *fail_open {
                    self.note.fail_open = true;
                }
                if *fail_open || *stale {
                    self.ttl = self.ttl.min(s.stale_ttl);
                    let members = entry.parts.iter().map(|p| &*p.cluster);
                    let old = why::stale_members(self.snap, members);
                    if !old.is_empty() {
                        // Only a fail-open union (never cached) says how
                        // long; within the grace the text must not age.
                        self.ede = Some(if *fail_open {
                            why::stale(&old, self.now)
                        } else {
                            why::within_grace(&old)
                        });
                    }
                }
            }
        }
        None
    }

    /// The answer for a name at or below a service entry; `None` when the
    /// name does not exist.
    fn below(&self, entry: &Entry, parsed: Parsed<'_>) -> Option<Answer> {
        let federated = matches!(entry.origin, Origin::Federated { .. });
        match parsed {
            Parsed::Service { .. } => Some(self.found(entry, Found::Service(entry))),
            Parsed::Proto { proto, .. } => {
                let exists = entry
                    .all_ports()
                    .any(|p| p.name.is_some() && p.protocol.label() == proto);
                exists.then(|| self.nodata())
            }
            Parsed::Port { port, proto, .. } => {
                let (answers, additional) = self.srv(entry, Some((port, proto)));
                if answers.is_empty() {
                    return None;
                }
                Some(
                    if self.q.qtype == rtype::SRV || self.q.qtype == rtype::ANY {
                        self.positive(answers, additional)
                    } else {
                        self.nodata()
                    },
                )
            }
            Parsed::Child { child, .. } if !federated => {
                let pods = entry.pods_named(None, child);
                (!pods.is_empty()).then(|| self.found(entry, Found::Pods(pods)))
            }
            Parsed::Child { child, .. } => {
                // `<cluster>.<svc>…` (`<clusterid>.<svc>…` in MCS) holds no
                // address: an empty non-terminal above its pods.
                if entry.has_member(child) {
                    return Some(self.nodata());
                }
                if matches!(entry.origin, Origin::Federated { mcs: true, .. }) {
                    return None;
                }
                // `<hostname>-<cluster>`: the alias CoreDNS serves from the
                // federated EndpointSlices (docs/architecture.md, decision 4).
                entry.members().find_map(|m| {
                    let host = child.strip_suffix(m)?.strip_suffix('-')?;
                    let pods = entry.pods_named(Some(m), host);
                    (!pods.is_empty()).then(|| self.found(entry, Found::Pods(pods)))
                })
            }
            Parsed::Grandchild { cluster, host, .. } if federated => {
                let pods = entry.pods_named(Some(cluster), host);
                (!pods.is_empty()).then(|| self.found(entry, Found::Pods(pods)))
            }
            _ => None,
        }
    }

    fn addr_rr(&self, ip: IpAddr) -> Record {
        self.rr(addr_data(ip))
    }

    /// An address record owned by `owner` (Additional and glue records).
    fn named_addr(&self, owner: &str, ip: IpAddr) -> Record {
        Record {
            owner: Owner::Name(owner.to_owned()),
            ttl: self.ttl,
            data: addr_data(ip),
        }
    }

    /// Type dispatch at an existing name.
    fn found(&self, entry: &Entry, what: Found<'_>) -> Answer {
        let is_service = matches!(what, Found::Service(_));
        let (v4, v6): (Vec<Record>, Vec<Record>) = match what {
            Found::Service(e) => (
                e.v4().iter().map(|ip| self.rr(RData::A(*ip))).collect(),
                e.v6().iter().map(|ip| self.rr(RData::Aaaa(*ip))).collect(),
            ),
            Found::Pods(pods) => pods
                .iter()
                .map(|p| self.addr_rr(p.addr))
                .partition(|r| matches!(r.data, RData::A(_))),
        };
        let records = match self.q.qtype {
            rtype::A => v4,
            rtype::AAAA => v6,
            rtype::SRV if is_service => {
                let (answers, additional) = self.srv(entry, None);
                if answers.is_empty() {
                    return self.nodata();
                }
                return self.positive(answers, additional);
            }
            rtype::ANY if !v4.is_empty() => v4,
            rtype::ANY if !v6.is_empty() => v6,
            rtype::ANY if is_service => {
                let (answers, _) = self.srv(entry, None);
                answers
            }
            _ => Vec::new(),
        };
        if records.is_empty() {
            self.nodata()
        } else {
            self.positive(self.rotate(records), Vec::new())
        }
    }

    /// SRV records of an entry (all ports, or one named port) and the
    /// Additional address records of their targets.
    fn srv(&self, entry: &Entry, only: Option<(&str, &str)>) -> (Vec<Record>, Vec<Record>) {
        let wanted = |p: &Port| match only {
            None => true,
            Some((name, proto)) => p.name.as_deref() == Some(name) && p.protocol.label() == proto,
        };
        // (priority, port, target): priorities follow tiers when turned on
        // (docs/locality.md), else all are 0.
        let mut targets: Vec<(u16, u16, String)> = Vec::new();
        let mut additional = Vec::new();
        let has_addrs = entry.has_addrs();
        let self_ports: Vec<u16> = entry
            .ports
            .iter()
            .filter(|p| wanted(p))
            .map(|p| p.port)
            .collect();
        if has_addrs && !self_ports.is_empty() {
            for port in self_ports {
                targets.push((0, port, entry.name.to_string()));
            }
            let (v4, v6) = (entry.v4(), entry.v6());
            let addrs = v4
                .iter()
                .map(|ip| IpAddr::V4(*ip))
                .chain(v6.iter().map(|ip| IpAddr::V6(*ip)));
            additional.extend(addrs.map(|ip| self.named_addr(&entry.name, ip)));
        }
        self.pod_targets(entry, wanted, &mut targets, &mut additional);
        targets.sort();
        targets.dedup();
        let all = targets.len();
        // Even weights within a priority: each target is one endpoint.
        let answers = targets
            .chunk_by(|a, b| a.0 == b.0)
            .flat_map(|same| {
                let weight = (100 / same.len()).max(1) as u16;
                same.iter().map(move |(priority, port, target)| {
                    self.rr(RData::Srv {
                        priority: *priority,
                        weight,
                        port: *port,
                        target: target.clone(),
                    })
                })
            })
            .collect();
        let answers = self.rotate(answers);
        if answers.len() < all {
            only_answered_targets(&answers, &mut additional);
        }
        (answers, additional)
    }

    /// The SRV targets of an entry's pods, one per (cluster, hostname) and
    /// wanted port, and the addresses of each target once.
    fn pod_targets(
        &self,
        entry: &Entry,
        wanted: impl Fn(&Port) -> bool,
        targets: &mut Vec<(u16, u16, String)>,
        additional: &mut Vec<Record>,
    ) {
        let federated = matches!(entry.origin, Origin::Federated { .. });
        let pods = entry.pods();
        for group in
            pods.chunk_by(|a, b| a.0.cluster == b.0.cluster && a.1.hostname == b.1.hostname)
        {
            let (part, first) = group[0];
            let cluster = &part.cluster;
            let mut ports: Vec<u16> = group
                .iter()
                .flat_map(|(part, _)| part.ports.iter())
                .filter(|p| wanted(p))
                .map(|p| p.port)
                .collect();
            ports.sort_unstable();
            ports.dedup();
            if ports.is_empty() {
                continue;
            }
            let target = if federated {
                format!("{}.{cluster}.{}", first.hostname, entry.name)
            } else {
                format!("{}.{}", first.hostname, entry.name)
            };
            let priority = entry.priority(cluster);
            for port in ports {
                targets.push((priority, port, target.clone()));
            }
            let mut addrs: Vec<&Pod> = group.iter().map(|(_, p)| *p).collect();
            addrs.sort_by_key(|p| (p.addr.is_ipv6(), p.addr));
            addrs.dedup();
            additional.extend(addrs.iter().map(|p| self.named_addr(&target, p.addr)));
        }
    }

    fn apex(&self, apex: ZoneName) -> Answer {
        match self.q.qtype {
            rtype::SOA | rtype::ANY => {
                let mut soa = self.soa(&apex);
                soa.owner = Owner::Query;
                self.positive(vec![soa], Vec::new())
            }
            rtype::NS => {
                let ns_host = format!("ns.dns.{}", self.zone().text());
                let ns = self.rr(RData::Ns(ns_host.clone()));
                let glue = self
                    .snap
                    .settings
                    .ns_addrs
                    .iter()
                    .map(|ip| self.named_addr(&ns_host, *ip))
                    .collect();
                self.positive(vec![ns], glue)
            }
            _ => self.negative(Rcode::NoError, &apex),
        }
    }

    fn reverse(&self, zone: &ZoneName) -> Answer {
        let qtype = self.q.qtype;
        if qtype == rtype::AXFR || qtype == rtype::IXFR {
            return Answer::empty(Rcode::Refused, false);
        }
        if self.q.name.label_count() == zone.label_count() {
            return self.apex(zone.clone());
        }
        if !self.snap.settled {
            // The oldest Service wins an address: one not loaded yet may.
            return self.servfail(self.not_ready(Scope::AnyCluster), zone);
        }
        // Any cluster that has not synced could still own an address.
        let nx = || self.nxdomain(Scope::AnyCluster, zone);
        match parse_reverse(self.q.name) {
            Some(ReverseName::Addr(ip)) => match self.snap.reverse.get(&ip) {
                Some(target) if qtype == rtype::PTR || qtype == rtype::ANY => {
                    self.positive(vec![self.rr(RData::Ptr(target.to_string()))], Vec::new())
                }
                Some(_) => self.negative(Rcode::NoError, zone),
                None => nx(),
            },
            Some(ReverseName::Prefix { first, last }) => {
                if self.snap.reverse.range(first..=last).next().is_some() {
                    self.negative(Rcode::NoError, zone)
                } else {
                    nx()
                }
            }
            None => nx(),
        }
    }
}

/// True when a name below a federated entry that was not found could be a
/// pod of a member its budget refused: `<host>.<cluster>.<svc>-federated`
/// or `<host>-<cluster>.<svc>-federated`.
fn refused_below(entry: &Entry, parsed: Parsed<'_>) -> bool {
    if entry.refused.is_empty() || !matches!(entry.origin, Origin::Federated { .. }) {
        return false;
    }
    match parsed {
        Parsed::Grandchild { cluster, .. } => entry.refused_from(cluster),
        Parsed::Child { child, .. } => {
            entry.refused_from(child) || entry.refused.iter().any(|c| claims(child, c))
        }
        _ => false,
    }
}

/// True when cluster `cluster` can own service label `label`
/// (`<svc>-<cluster>`).
fn claims(label: &str, cluster: &str) -> bool {
    label
        .strip_suffix(cluster)
        .is_some_and(|s| s.ends_with('-'))
}

/// Keeps the Additional records of SRV targets in `answers` and drops the
/// rest: a capped answer carries the addresses of the targets it answers.
fn only_answered_targets(answers: &[Record], additional: &mut Vec<Record>) {
    let answered: HashSet<&str> = answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::Srv { target, .. } => Some(target.as_str()),
            _ => None,
        })
        .collect();
    additional.retain(|r| matches!(&r.owner, Owner::Name(n) if answered.contains(n.as_str())));
}

fn addr_data(ip: IpAddr) -> RData {
    match ip {
        IpAddr::V4(v4) => RData::A(v4),
        IpAddr::V6(v6) => RData::Aaaa(v6),
    }
}

mod why;

#[cfg(test)]
mod tests;
