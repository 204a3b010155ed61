//! `explain`: why one name answers what it answers (`/debug/name` and
//! `clusterset-dns explain`), for the operator a failover surprised.
//!
//! For one query name: which entry it maps to (`<svc>-<cluster>`,
//! `<svc>-federated`, `<svc>-nearest`, the MCS `<svc>`, a name below one,
//! or none, and then why none), the failover rule in force, and for each
//! member cluster its place, tier, health and ready endpoints and whether
//! it is in the answer, with the reason; and the A, AAAA and SRV answers
//! themselves, computed by the very function the DNS path runs
//! (`dns::answer`), so the records shown are the records served.
//!
//! Pure: a function of the snapshot, the model's cluster state and `now`.
//! The ranking is the model's own ([`crate::model::locality::plan`]), so
//! `explain`, the index and the mirror never disagree. The result is
//! [`Explanation`], serialized as the JSON of `/debug/name`, and
//! [`Explanation::text`] renders it for a terminal; the CLI reads the JSON
//! back and prints the text.

use std::fmt::Write as _;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::dns::answer::{Question, Room, answer};
use crate::dns::name::{Parsed, QName, parse};
use crate::dns::wire::{CLASS_IN, Ede, Record, rtype};
use crate::dns::zonefile::record_text;
use crate::model::cluster::Cluster;
use crate::model::entry::BuildContext;
use crate::model::objects::ObjectKey;
use crate::model::{ClusterSet, Entry, Origin, Snapshot};
use crate::vocab::name::ZoneName;

mod members;
mod missing;

/// Records of one RRset listed in full; beyond, only counted.
const LISTED: usize = 100;
/// Addresses or SRV records the text shows per RRset; beyond, "and N more".
const SHOWN: usize = 8;

/// Why a name cannot be explained.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NameInputError {
    /// No name was given.
    #[error(
        "no name given: ask /debug/name?name=<name>, e.g. name=web-federated.prod or name=web-federated.prod.svc.clusterset.local."
    )]
    Missing,
    /// Not a DNS name.
    #[error("{name:?} is not a DNS name: {reason}")]
    Invalid {
        /// The name as given (cut to 80 characters).
        name: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// What kind of name was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// `<svc>-<cluster>`, or a name below it.
    Cluster,
    /// `<svc>-federated`, or a name below it.
    Federated,
    /// `<svc>-nearest`, or a name below it.
    Nearest,
    /// The MCS name `<svc>`, or a name below it.
    Mcs,
    /// A name of the zone's own (apex, `ns.dns`, `dns-version`, `svc`, a
    /// namespace).
    Zone,
    /// No such name (NXDOMAIN; SERVFAIL while a cluster that could make it
    /// exist is still loading).
    Missing,
    /// Not in the zone: REFUSED.
    OutOfZone,
}

/// A service's failover rule, as `explain` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RuleView {
    /// The explicit order (`*`: the rest, by default tiers); `None` for
    /// the default tiers.
    pub order: Option<Vec<String>>,
    /// Ready endpoints a tier needs to be answered by `-nearest`.
    pub min_ready: u32,
    /// The cluster whose Service's annotations set it (`None`: no Service
    /// sets one, the default applies).
    pub from: Option<String>,
}

/// Which tier a nearest name answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NearestView {
    /// The tier answered; `None` when no tier has `min-ready` ready
    /// endpoints and the federated union is answered (fail open).
    pub tier: Option<u32>,
    /// In words.
    pub why: String,
}

/// One member cluster of the name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemberView {
    /// The cluster.
    pub cluster: String,
    /// The local cluster.
    pub local: bool,
    /// Its region, if known.
    pub region: Option<String>,
    /// Its zone, if known.
    pub zone: Option<String>,
    /// Where its place came from (`configured`, `cluster-property`,
    /// `unknown`).
    pub place_from: String,
    /// Its tier (`None`: no tier, or tiers do not apply to this name).
    pub tier: Option<u32>,
    /// Why that tier, in words (`None` where tiers do not apply).
    pub ranked: Option<String>,
    /// Its health in words.
    pub health: String,
    /// Ready endpoints it holds for the service.
    pub ready: u64,
    /// In the answer.
    pub answered: bool,
    /// Why in or out.
    pub why: String,
}

/// What the server answers for one query type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RrsetView {
    /// `A`, `AAAA` or `SRV`.
    pub qtype: String,
    /// `NOERROR`, `NXDOMAIN`, `SERVFAIL`, `REFUSED`.
    pub rcode: String,
    /// TTL of the records (`None` without records).
    pub ttl: Option<u32>,
    /// Records in the answer (the whole RRset, as a TCP client gets it).
    pub count: usize,
    /// The first records' data (`10.0.0.1`, `0 50 80 target.`), at most
    /// [`LISTED`].
    pub records: Vec<String>,
    /// The Extended DNS Error the answer carries, if any.
    pub ede: Option<String>,
}

/// Everything `explain` says about one name: the JSON of `/debug/name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Explanation {
    /// The name, absolute, with the trailing dot.
    pub name: String,
    /// What kind of name it is.
    pub kind: Kind,
    /// What the name is, in words.
    pub what: String,
    /// The service behind it (`<namespace>/<name>`).
    pub service: Option<String>,
    /// What the labels below the service name ask for (a pod, an SRV
    /// port), when the name is below one.
    pub below: Option<String>,
    /// The failover rule (federated and nearest names).
    pub rule: Option<RuleView>,
    /// The local cluster and its place.
    pub local: Option<String>,
    /// The tier answered (nearest names).
    pub nearest: Option<NearestView>,
    /// Further facts: why a name does not exist, fail open, collisions.
    pub notes: Vec<String>,
    /// The member clusters.
    pub members: Vec<MemberView>,
    /// The A, AAAA and SRV answers.
    pub answers: Vec<RrsetView>,
    /// The SOA serial of the snapshot explained.
    pub serial: u32,
}

/// Explains `input` (absolute, or relative to the zone) from `snap`, the
/// cluster state `set` it was built from, at `now`.
pub(crate) fn explain(
    input: &str,
    snap: &Snapshot,
    set: &ClusterSet,
    now: Instant,
) -> Result<Explanation, NameInputError> {
    let settings = &snap.settings;
    let qname = absolute(input, &settings.zone)?;
    let mut out = Explanation {
        name: format!("{}.", qname.text()),
        kind: Kind::Missing,
        what: String::new(),
        service: None,
        below: None,
        rule: None,
        local: None,
        nearest: None,
        notes: Vec::new(),
        members: Vec::new(),
        answers: answers(snap, &qname, now),
        serial: snap.serial,
    };
    let Some(rel) = qname.relative_to(&settings.zone) else {
        out.kind = Kind::OutOfZone;
        out.what = format!("not in the zone {}.: REFUSED", settings.zone.text());
        return Ok(out);
    };
    let cx = Cx { snap, set, now };
    match parse(&qname, rel) {
        parsed @ (Parsed::Service { key }
        | Parsed::Proto { key, .. }
        | Parsed::Port { key, .. }
        | Parsed::Child { key, .. }
        | Parsed::Grandchild { key, .. }) => {
            out.below = below(parsed);
            match snap.entries.get(key) {
                Some(entry) => cx.entry(&mut out, entry, key),
                None => missing::explain(&cx, &mut out, key),
            }
        }
        Parsed::Nothing => {
            out.what = "no name of this shape in the zone (docs/dns.md §2.1): service names are <label>.<namespace>.svc.<zone>".to_owned();
        }
        zone_name => {
            out.kind = Kind::Zone;
            out.what = zone_what(zone_name);
        }
    }
    Ok(out)
}

/// The name `input` stands for, lower-cased. Absolute when it ends with a
/// dot or in the zone; else relative to the zone, and completed as a user
/// means it: `<label>.<namespace>` and the names below it get
/// `.svc.<zone>` (a name already ending in `svc`, and the zone's own
/// `dns-version`, `dns` and `ns.dns`, get `.<zone>`).
pub(crate) fn absolute(input: &str, zone: &ZoneName) -> Result<QName, NameInputError> {
    let text = input.trim().to_ascii_lowercase();
    if text.is_empty() {
        return Err(NameInputError::Missing);
    }
    let invalid = |reason: String| NameInputError::Invalid {
        name: input.chars().take(80).collect(),
        reason,
    };
    let zone = zone.text();
    let own =
        |t: &str| matches!(t, "svc" | "dns" | "dns-version" | "ns.dns") || t.ends_with(".svc");
    let fqdn = match text.strip_suffix('.') {
        Some(abs) => abs.to_owned(),
        None if text == zone || text.ends_with(&format!(".{zone}")) => text,
        None if own(&text) => format!("{text}.{zone}"),
        None => format!("{text}.svc.{zone}"),
    };
    let name = QName::from_text(&fqdn).map_err(|e| invalid(e.to_string()))?;
    if name.is_opaque() {
        return Err(invalid(
            "a label holds a character no served name has (letters, digits, '-' and '_' only)"
                .to_owned(),
        ));
    }
    Ok(name)
}

/// What a name of the zone's own is.
fn zone_what(parsed: Parsed<'_>) -> String {
    match parsed {
        Parsed::Apex => "the zone apex (SOA, NS)".to_owned(),
        Parsed::Dns => "dns.<zone>: an empty name above the name server's".to_owned(),
        Parsed::NsHost => "the name server's own name (its addresses: --ns-addrs)".to_owned(),
        Parsed::DnsVersion => "the schema version (TXT)".to_owned(),
        Parsed::Svc => "svc.<zone>: an empty name above the namespaces".to_owned(),
        Parsed::Namespace { ns } => {
            format!("namespace {ns}: exists (NODATA) while some cluster exports a service into it")
        }
        _ => String::new(),
    }
}

/// What the labels below a service name ask for.
fn below(parsed: Parsed<'_>) -> Option<String> {
    Some(match parsed {
        Parsed::Proto { proto, .. } => {
            format!("the _{proto} SRV branch (exists while a named port has that protocol)")
        }
        Parsed::Port { port, proto, .. } => format!("the SRV records of port {port}/{proto}"),
        Parsed::Child { child, .. } => format!(
            "{child}: a pod hostname (per-cluster names), a member cluster or <host>-<cluster> (federated names), a cluster id (MCS names)"
        ),
        Parsed::Grandchild { cluster, host, .. } => format!("pod {host} of cluster {cluster}"),
        // The service name itself, or no name at all.
        _ => return None,
    })
}

/// The A, AAAA and SRV answers to `name`, as the DNS path computes them
/// (the whole RRset, unrotated).
fn answers(snap: &Snapshot, name: &QName, now: Instant) -> Vec<RrsetView> {
    [("A", rtype::A), ("AAAA", rtype::AAAA), ("SRV", rtype::SRV)]
        .into_iter()
        .map(|(mnemonic, qtype)| {
            let q = Question {
                name,
                qtype,
                qclass: CLASS_IN,
                room: Room::Whole,
            };
            let a = answer(snap, q, 0, now).answer;
            RrsetView {
                qtype: mnemonic.to_owned(),
                rcode: a.rcode.name().to_owned(),
                ttl: a.answers.first().map(|r| r.ttl),
                count: a.answers.len(),
                records: a
                    .answers
                    .iter()
                    .take(LISTED)
                    .map(|r| rdata(name, r))
                    .collect(),
                ede: a.ede.as_ref().map(ede_text),
            }
        })
        .collect()
}

/// A record's data as zone-file text (the form `dump` prints).
fn rdata(name: &QName, r: &Record) -> String {
    let line = record_text(name.text(), r);
    line.splitn(5, '\t').nth(4).unwrap_or_default().to_owned()
}

/// `14 (Not Ready): cluster east not synced yet`.
fn ede_text(ede: &Ede) -> String {
    let what = match ede.code {
        Ede::STALE_ANSWER => "Stale Answer",
        Ede::NOT_READY => "Not Ready",
        Ede::PROHIBITED => "Prohibited",
        Ede::NO_REACHABLE_AUTHORITY => "No Reachable Authority",
        _ => "Other",
    };
    format!("{} ({what}): {}", ede.code, ede.text)
}

/// What an explanation is made from.
pub(super) struct Cx<'a> {
    /// The snapshot answered from.
    pub snap: &'a Snapshot,
    /// The model's cluster state.
    pub set: &'a ClusterSet,
    /// The time to judge staleness against.
    pub now: Instant,
}

impl Cx<'_> {
    /// What the model's builders are told.
    fn build(&self) -> BuildContext<'_> {
        let s = &self.snap.settings;
        BuildContext {
            zone: s.zone.text(),
            federated_grace: s.federated_grace,
            now: self.now,
            local: &s.local_place,
            tiers: s.srv_priority_tiers,
        }
    }

    /// Explains an existing entry at `key`.
    fn entry(&self, out: &mut Explanation, entry: &Entry, key: &str) {
        let label = key.split_once('.').map_or(key, |(l, _)| l);
        let ns = &*entry.namespace;
        match &entry.origin {
            Origin::Cluster { name, .. } => {
                let svc = label
                    .strip_suffix(&**name)
                    .and_then(|s| s.strip_suffix('-'))
                    .unwrap_or(label);
                let key = ObjectKey::new(ns, svc);
                members::per_cluster(self, out, name, &key, label);
            }
            Origin::Federated { mcs: true, .. } => {
                members::mcs(self, out, entry, &ObjectKey::new(ns, label));
            }
            Origin::Federated { nearest, .. } => {
                let suffix = match nearest {
                    crate::model::Nearest::No => "-federated",
                    _ => "-nearest",
                };
                let svc = label.strip_suffix(suffix).unwrap_or(label);
                members::federated(self, out, entry, &ObjectKey::new(ns, svc));
            }
        }
        missing::collisions(self, out, entry, label, ns);
    }

    /// The local cluster and its place, in words.
    fn local(&self) -> String {
        let local = &self.snap.settings.local_place;
        match self.set.iter().find(|c| c.local) {
            Some(c) => {
                let (place, from) = crate::model::locality::place_of(c, local);
                format!("{}, {}", c.name, place_words(place, from))
            }
            None => "none known (--local-cluster): no cluster is tier 0 and no region is ours"
                .to_owned(),
        }
    }
}

/// `eu-west/eu-west-1a (configured)`, or `place unknown`.
pub(super) fn place_words(
    place: &crate::vocab::place::Place,
    from: crate::vocab::place::PlaceFrom,
) -> String {
    if place.is_unknown() {
        "place unknown".to_owned()
    } else {
        format!("place {place} ({})", from.as_str())
    }
}

/// The health of cluster `c`, in words, at `now`.
pub(super) fn health(c: &Cluster, cx: &Cx<'_>) -> String {
    let h = &c.health;
    let grace = cx.snap.settings.federated_grace.as_secs();
    let mut words = Vec::new();
    if h.gateway_alive == Some(false) {
        words.push("gateway dead (probe failing)".to_owned());
    }
    match h.broken_since {
        Some(since) => {
            let age = cx.now.saturating_duration_since(since).as_secs();
            words.push(if age > grace {
                format!("watch broken {age}s, past the {grace}s grace")
            } else {
                format!("stale: watch broken {age}s (grace {grace}s)")
            });
        }
        None if h.synced => {}
        None if h.sync_given_up => words.push("never synced (start-up stopped waiting)".to_owned()),
        None => words.push("not synced yet".to_owned()),
    }
    if words.is_empty() {
        "synced".to_owned()
    } else {
        words.join("; ")
    }
}

impl Explanation {
    /// The explanation as aligned text, for a terminal.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        let mut line = |key: &str, value: &str| {
            let _ = writeln!(out, "{key:<9}{value}");
        };
        line("name", &self.name);
        line("what", &self.what);
        if let Some(below) = &self.below {
            line("below", below);
        }
        if let Some(rule) = &self.rule {
            line("rule", &rule.words());
        }
        if let Some(local) = &self.local {
            line("local", local);
        }
        if let Some(nearest) = &self.nearest {
            line("nearest", &nearest.why);
        }
        for note in &self.notes {
            line("note", note);
        }
        let mut last_ede = None;
        for rrset in &self.answers {
            // One Extended DNS Error said once, not under every type.
            let ede = rrset.ede.as_ref().filter(|e| last_ede != Some(*e));
            rrset.text(&mut out, ede);
            last_ede = rrset.ede.as_ref();
        }
        if !self.members.is_empty() {
            out.push('\n');
            out.push_str(&members::table(&self.members));
        }
        out
    }
}

impl RuleView {
    /// `failover order east,west,*, min-ready 2 (from cluster east's Service)`.
    fn words(&self) -> String {
        let order = match &self.order {
            Some(order) => format!("failover order {}", order.join(",")),
            None => "default tiers (0 local cluster, 1 its region, 2 the rest; stale members last)"
                .to_owned(),
        };
        let from = match &self.from {
            Some(c) => format!("from cluster {c}'s Service"),
            None => "no Service sets a rule".to_owned(),
        };
        format!("{order}, min-ready {} ({from})", self.min_ready)
    }
}

impl RrsetView {
    /// `A        NOERROR ttl 5, 2 records: 10.0.0.1, 10.0.0.2`, and `ede`
    /// below.
    fn text(&self, out: &mut String, ede: Option<&String>) {
        let head = match (self.count, self.ttl) {
            (0, _) if self.rcode == "NOERROR" => format!("{} (no records: NODATA)", self.rcode),
            (0, _) | (_, None) => self.rcode.clone(),
            (n, Some(ttl)) => format!(
                "{} ttl {ttl}, {n} record{}",
                self.rcode,
                if n == 1 { "" } else { "s" }
            ),
        };
        let shown: Vec<&str> = self
            .records
            .iter()
            .take(SHOWN)
            .map(String::as_str)
            .collect();
        let more = match self.count.saturating_sub(shown.len()) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        if shown.is_empty() {
            let _ = writeln!(out, "{:<9}{head}", self.qtype);
        } else if self.qtype == "SRV" {
            let _ = writeln!(out, "{:<9}{head}:", self.qtype);
            for r in &shown {
                let _ = writeln!(out, "{:<9}  {r}", "");
            }
            if !more.is_empty() {
                let _ = writeln!(out, "{:<9} {more}", "");
            }
        } else {
            let _ = writeln!(out, "{:<9}{head}: {}{more}", self.qtype, shown.join(", "));
        }
        if let Some(ede) = ede {
            let _ = writeln!(out, "{:<9}EDE {ede}", "");
        }
    }
}

#[cfg(test)]
mod tests;
