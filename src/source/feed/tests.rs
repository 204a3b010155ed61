use super::*;
use crate::model::Health;
use crate::model::testing::{c, slice, slice_event};

fn s(cluster: &str, name: &str, ip: &str) -> Event {
    slice_event(
        cluster,
        slice("prod", name, "web", Vec::new(), &[(ip, None, true)]),
    )
}

fn synced(cluster: &str) -> Event {
    Event::Health {
        cluster: c(cluster),
        health: Health {
            synced: true,
            ..Health::default()
        },
    }
}

/// Events as `cluster:slice@ip` or `cluster:health`.
fn names(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            Event::SliceApplied { cluster, slice, .. } => {
                format!("{cluster}:{}@{}", slice.key.name, slice.endpoints[0].addr)
            }
            Event::Health { cluster, .. } => format!("{cluster}:health"),
            other => format!("{other:?}"),
        })
        .collect()
}

fn send(tx: &FeedTx, events: Vec<Event>) {
    tx.send(SourceMsg::Events(events)).expect("open");
}

#[test]
fn a_storm_coalesces_by_object_and_health_stays_behind_its_objects() {
    let (feed, tx) = Feed::new();
    send(
        &tx,
        vec![s("east", "a", "10.0.0.1"), s("east", "b", "10.0.0.2")],
    );
    send(&tx, vec![synced("east")]);
    // 10,000 rewrites of two slices cost two queued events.
    for i in 0..10_000u32 {
        let ip = format!("10.1.{}.{}", i / 250, i % 250 + 1);
        send(
            &tx,
            vec![s("east", if i % 2 == 0 { "a" } else { "b" }, &ip)],
        );
    }
    send(&tx, vec![s("east", "c", "10.0.0.3"), synced("east")]);
    assert_eq!(feed.queued(), 4);
    let round = feed.take(100);
    assert_eq!(
        names(&round.events),
        [
            "east:a@10.1.39.249",
            "east:b@10.1.39.250",
            "east:c@10.0.0.3",
            "east:health"
        ],
        "the latest state of each object, in its first place; health last"
    );
    assert!(feed.take(100).is_empty());
}

#[test]
fn clusters_are_served_round_robin() {
    let (feed, tx) = Feed::new();
    let storm: Vec<Event> = (0..1000)
        .map(|i| s("east", &format!("s{i}"), "10.0.0.1"))
        .collect();
    send(&tx, storm);
    send(&tx, vec![s("north", "n", "10.2.0.1")]);
    let round = feed.take(16);
    assert_eq!(round.events.len(), 17, "16 from east, north's one");
    assert!(names(&round.events).contains(&"north:n@10.2.0.1".to_owned()));
    // The next round does not start with the same cluster.
    send(&tx, vec![s("west", "w", "10.3.0.1")]);
    let round = feed.take(16);
    assert_eq!(names(&round.events)[0], "west:w@10.3.0.1");
    let mut left = feed.queued();
    let mut rounds = 0;
    while left > 0 {
        assert!(rounds < 100, "bounded");
        left -= feed.take(16).events.len();
        rounds += 1;
    }
    assert_eq!(rounds, (1000 - 32usize).div_ceil(16));
}

#[test]
fn control_goes_first_and_a_cluster_that_goes_takes_its_queue() {
    let (feed, tx) = Feed::new();
    send(
        &tx,
        vec![
            Event::ClusterUp {
                cluster: c("east"),
                local: false,
            },
            s("east", "a", "10.0.0.1"),
        ],
    );
    tx.send(SourceMsg::ClustersKnown).expect("open");
    send(&tx, vec![s("north", "n", "10.2.0.1")]);
    send(&tx, vec![Event::ClusterDown { cluster: c("east") }]);
    let round = feed.take(10);
    assert_eq!(round.control.len(), 3, "{:?}", round.control);
    assert!(matches!(
        &round.control[0],
        SourceMsg::Events(e) if matches!(e[..], [Event::ClusterUp { .. }])
    ));
    assert!(matches!(round.control[1], SourceMsg::ClustersKnown));
    assert_eq!(names(&round.events), ["north:n@10.2.0.1"]);
    feed.close();
    assert_eq!(tx.send(SourceMsg::ClustersKnown), Err(Closed));
}
