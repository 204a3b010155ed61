//! The Extended DNS Errors (RFC 8914) an answer carries: why it is stale
//! or SERVFAIL, naming the clusters responsible (docs/architecture.md, decision 5).
//!
//! Owns the texts; the decisions stay in `answer`, which calls these at
//! the point it decides. Pure: the clock comes in as `now`. It must not
//! change what is answered, only say why.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::dns::wire::Ede;
use crate::model::Snapshot;

/// How many clusters a text names before "and N more".
const NAMED: usize = 3;

/// `a, b, c and 2 more`.
fn list<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    let total = names.len();
    let mut out = String::new();
    for (i, name) in names.take(NAMED).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(name);
    }
    if total > NAMED {
        let _ = write!(out, " and {} more", total - NAMED);
    }
    out
}

fn secs(d: Duration) -> u64 {
    d.as_secs()
}

/// EDE 14: the clusters that could hold the name (those `could_hold`
/// accepts) have not synced; before the source has named every cluster,
/// or when none of them is to blame (start-up not over), says so instead.
pub(super) fn not_ready(snap: &Snapshot, could_hold: impl Fn(&str) -> bool) -> Ede {
    let names: Vec<&str> = snap
        .unsynced
        .iter()
        .map(|n| &**n)
        .filter(|n| could_hold(n))
        .collect();
    let text = match names.as_slice() {
        [] if !snap.known => "linked clusters not all known yet".to_owned(),
        [] => "clusters still loading at start-up".to_owned(),
        [one] => format!("cluster {one} not synced yet"),
        many => format!("clusters {} not synced yet", list(many.iter().copied())),
    };
    Ede::new(Ede::NOT_READY, text)
}

/// EDE 18: the clusters whose budget refused the service.
pub(super) fn prohibited(refused: &[Arc<str>]) -> Ede {
    let noun = if refused.len() == 1 {
        "cluster"
    } else {
        "clusters"
    };
    let names = list(refused.iter().map(|n| &**n));
    Ede::new(
        Ede::PROHIBITED,
        format!("refused by the budget of {noun} {names}"),
    )
}

/// EDE 22: the name's cluster has been unheard of past `max_stale`.
pub(super) fn past_max_stale(cluster: &str, since: Instant, now: Instant, max: Duration) -> Ede {
    let age = secs(now.saturating_duration_since(since));
    Ede::new(
        Ede::NO_REACHABLE_AUTHORITY,
        format!(
            "cluster {cluster} not heard from for {age}s (max-stale {}s)",
            max.as_secs()
        ),
    )
}

/// EDE 3: the answer holds last-known data of these clusters, each not
/// heard from since the instant given.
pub(super) fn stale(clusters: &[(&str, Instant)], now: Instant) -> Ede {
    let age = |since: &Instant| secs(now.saturating_duration_since(*since));
    let text = match clusters {
        [(name, since)] => format!("cluster {name} not heard from for {}s", age(since)),
        many => {
            let named: Vec<String> = many
                .iter()
                .map(|(name, since)| format!("{name} ({}s)", age(since)))
                .collect();
            format!(
                "clusters {} not heard from",
                list(named.iter().map(String::as_str))
            )
        }
    };
    Ede::new(Ede::STALE_ANSWER, text)
}

/// EDE 3 for a federated answer whose stale members are still within the
/// federated grace: which members, without an age (the answer is cached
/// until one of them changes health, so its text must not go stale).
pub(super) fn within_grace(clusters: &[(&str, Instant)]) -> Ede {
    let noun = if clusters.len() == 1 {
        "member"
    } else {
        "members"
    };
    let names = list(clusters.iter().map(|(name, _)| *name));
    Ede::new(
        Ede::STALE_ANSWER,
        format!("{noun} {names} not heard from, within the federated grace"),
    )
}

/// The stale clusters among `members` (a federated name's parts), oldest
/// first: those whose data is not confirmed, with since when.
pub(super) fn stale_members<'a>(
    snap: &Snapshot,
    members: impl Iterator<Item = &'a str>,
) -> Vec<(&'a str, Instant)> {
    let mut out: Vec<(&str, Instant)> = members
        .filter_map(|m| Some((m, snap.cluster_named(m)?.broken_since?)))
        .collect();
    out.sort_by_key(|(name, since)| (*since, *name));
    out.dedup_by_key(|(name, _)| *name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts() {
        let now = Instant::now();
        let ago = |s| now - Duration::from_secs(s);
        assert_eq!(
            stale(&[("east", ago(42))], now).text,
            "cluster east not heard from for 42s"
        );
        assert_eq!(
            stale(&[("east", ago(42)), ("west", ago(7))], now).text,
            "clusters east (42s), west (7s) not heard from"
        );
        let five: Vec<(&str, Instant)> = ["a", "b", "c", "d", "e"]
            .into_iter()
            .map(|n| (n, ago(1)))
            .collect();
        assert_eq!(
            stale(&five, now).text,
            "clusters a (1s), b (1s), c (1s) and 2 more not heard from"
        );
        let e = past_max_stale("east", ago(3700), now, Duration::from_secs(3600));
        assert_eq!(
            (e.code, e.text.as_str()),
            (
                22,
                "cluster east not heard from for 3700s (max-stale 3600s)"
            )
        );
        let p = prohibited(&[Arc::from("flood")]);
        assert_eq!(
            (p.code, p.text.as_str()),
            (18, "refused by the budget of cluster flood")
        );
    }

    #[test]
    fn a_long_text_is_cut_at_a_character_boundary() {
        let names: Vec<String> = (0..3).map(|i| format!("{}{i}", "é".repeat(30))).collect();
        let refs: Vec<Arc<str>> = names.iter().map(|n| Arc::from(n.as_str())).collect();
        let e = prohibited(&refs);
        assert!(e.text.len() <= crate::dns::wire::MAX_EDE_TEXT);
        assert!(e.text.starts_with("refused by the budget of clusters é"));
    }
}
