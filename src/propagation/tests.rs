use std::time::{Duration, UNIX_EPOCH};

use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;

use super::*;
use crate::model::Dirty;
use crate::model::testing::{c, slice};

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn applied(cluster: &str, name: &str, trigger: Option<SystemTime>) -> Event {
    Event::SliceApplied {
        cluster: c(cluster),
        slice: slice("prod", name, "web", vec![], &[("10.0.0.1", None, true)]),
        trigger,
    }
}

fn up(cluster: &str) -> Event {
    Event::ClusterUp {
        cluster: c(cluster),
        local: false,
    }
}

/// The clusters after `events`, as the model would hold them.
fn clusters(events: &[Event]) -> ClusterSet {
    let mut set = ClusterSet::new();
    for e in events {
        set.apply(e.clone(), &mut Dirty::default());
    }
    set
}

/// A histogram's count and sum, as a scrape shows them.
fn count_sum(h: &Histogram) -> (u64, f64) {
    let mut registry = Registry::default();
    registry.register("h", "h", h.clone());
    let mut text = String::new();
    prometheus_text::encode(&mut text, &registry).expect("encodes");
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    (value("h_count ") as u64, value("h_sum "))
}

/// Cluster → (count, sum, clock skew).
fn series(p: &Propagation) -> BTreeMap<String, (u64, f64, u64)> {
    p.read()
        .into_iter()
        .map(|(c, s)| {
            let (count, sum) = count_sum(&s.seconds);
            (c.to_string(), (count, sum, s.clock_skew))
        })
        .collect()
}

#[test]
fn known_clusters_get_series_at_zero_and_a_latest_version_is_observed_once() {
    let p = Propagation::default();
    let mut pending = Pending::default();
    let lifecycle = [up("east"), up("west")];
    pending.note(&lifecycle);
    // Two versions of east's web-1 in one round, one slice of west without
    // a trigger time: one observation, of the later version.
    let round = [
        applied("east", "web-1", Some(at(1_000))),
        applied("west", "web-1", None),
        applied("east", "web-1", Some(at(1_007))),
    ];
    pending.note(&round);
    let set = clusters(&[&lifecycle[..], &round[..]].concat());
    pending.publish(&p, &set, at(1_010));
    assert_eq!(
        series(&p),
        BTreeMap::from([
            ("east".to_owned(), (1, 3.0, 0)),
            ("west".to_owned(), (0, 0.0, 0)),
        ])
    );
    // Nothing pending: publishing again observes nothing.
    pending.publish(&p, &set, at(2_000));
    assert_eq!(series(&p)["east"], (1, 3.0, 0));
}

#[test]
fn a_trigger_in_the_future_is_observed_as_zero_and_counted() {
    let p = Propagation::default();
    let mut pending = Pending::default();
    let events = [up("east"), applied("east", "web-1", Some(at(5_000)))];
    pending.note(&events);
    pending.publish(&p, &clusters(&events), at(4_000));
    assert_eq!(series(&p)["east"], (1, 0.0, 1));
}

#[test]
fn a_cluster_gone_is_not_observed_and_loses_its_series() {
    let p = Propagation::default();
    let mut pending = Pending::default();
    let start = [up("east"), up("west")];
    pending.note(&start);
    pending.publish(&p, &clusters(&start), at(0));
    assert_eq!(series(&p).len(), 2);
    let down = [Event::ClusterDown { cluster: c("west") }];
    pending.note(&[applied("west", "web-1", Some(at(1)))]);
    pending.note(&down);
    let set = clusters(&[&start[..], &down[..]].concat());
    pending.publish(&p, &set, at(2));
    assert_eq!(
        series(&p),
        BTreeMap::from([("east".to_owned(), (0, 0.0, 0))])
    );
}
