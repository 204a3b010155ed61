//! The model task on tokio's paused clock: events in through the feed,
//! snapshots, readiness and the mirror's updates out, as a user of the
//! server sees them.

use super::*;

use crate::model::Event;
use crate::model::objects::ExportMode;
use crate::model::testing::{epoch, fixture_events, service, settings, svc_event, up};
use crate::model::{Health, Snapshot};

/// A running model task and its ends.
struct Task {
    tx: FeedTx,
    shared: Arc<Shared>,
    settings: tokio::sync::watch::Sender<Arc<Settings>>,
    mirror: mirror_feed::FeedRx,
    shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
}

impl Task {
    fn spawn() -> Self {
        let model = Model::new(Arc::new(settings()), epoch());
        let shared = Arc::new(Shared::new(
            model.snapshot(),
            Arc::default(),
            ModelViews::default(),
        ));
        let (feed, tx) = Feed::new();
        let (settings, settings_rx) = tokio::sync::watch::channel(Arc::new(settings()));
        let (to_mirror, mirror) = mirror_feed::channel();
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(model_task(
            model,
            feed,
            settings_rx,
            (shared.clone(), tokio::sync::mpsc::unbounded_channel().0),
            (Some(to_mirror), ModelViews::channel().1),
            shutdown.clone(),
        ));
        Self {
            tx,
            shared,
            settings,
            mirror,
            shutdown,
            handle,
        }
    }

    fn send(&self, events: Vec<Event>) {
        self.tx
            .send(SourceMsg::Events(events))
            .expect("the model task runs");
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.snapshot.load_full()
    }

    fn ready(&self) -> bool {
        self.shared.ready.load(Ordering::Acquire)
    }

    /// The mirror's next update (within a minute of paused time).
    async fn update(&self) -> mirror_feed::Update {
        let changed = tokio::time::timeout(Duration::from_secs(60), self.mirror.changed())
            .await
            .expect("an update within a minute");
        assert!(changed, "the mirror's feed is open");
        self.mirror.take().expect("an update")
    }

    /// Lets the model task run until `done` holds (at most a minute of
    /// paused time, which passes at once).
    async fn until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        for _ in 0..60_000 {
            if done(self) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("never: {what}");
    }
}

/// Whether `s` holds cluster `name`.
fn has(s: &Snapshot, name: &str) -> bool {
    s.clusters.iter().flatten().any(|c| &*c.name == name)
}

fn health(cluster: &str, health: Health) -> Event {
    Event::Health {
        cluster: cluster.into(),
        health,
    }
}

/// The snapshot a model makes of `events` applied at once.
fn direct(events: Vec<Event>) -> Arc<Snapshot> {
    let mut model = Model::new(Arc::new(settings()), epoch());
    let now = Instant::now();
    model.apply(events, now);
    model.clusters_known(now);
    model.snapshot()
}

#[tokio::test(start_paused = true)]
async fn events_are_published_as_the_model_answers_them() {
    let task = Task::spawn();
    let before = task.snapshot();
    task.send(fixture_events());
    task.tx.send(SourceMsg::ClustersKnown).expect("runs");
    task.until("a new snapshot", |t| !Arc::ptr_eq(&t.snapshot(), &before))
        .await;
    task.until("every event applied", |t| {
        t.snapshot().entries.len() == direct(fixture_events()).entries.len()
    })
    .await;
    let mut names: Vec<_> = task.snapshot().entries.keys().cloned().collect();
    let mut want: Vec<_> = direct(fixture_events()).entries.keys().cloned().collect();
    names.sort();
    want.sort();
    assert_eq!(names, want, "the names the model itself would serve");
    assert!(task.snapshot().serial > before.serial, "a new serial");
    task.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn ready_once_every_cluster_is_known_and_synced_or_given_up() {
    let task = Task::spawn();
    task.send(up("west", true));
    task.send(vec![
        Event::ClusterUp {
            cluster: "east".into(),
            local: false,
        },
        health("east", Health::default()),
    ]);
    task.until("west applied", |t| has(&t.snapshot(), "east"))
        .await;
    assert!(!task.ready(), "clusters may still be unannounced");

    task.tx.send(SourceMsg::ClustersKnown).expect("runs");
    task.until("every cluster known", |t| t.snapshot().known)
        .await;
    assert!(!task.ready(), "east has not synced");

    let given_up = Health {
        sync_given_up: true,
        ..Health::default()
    };
    task.send(vec![health("east", given_up)]);
    task.until("ready", Task::ready).await;

    // Readiness follows the clusters: a new cluster that has not synced
    // takes it away again.
    task.send(vec![Event::ClusterUp {
        cluster: "north".into(),
        local: false,
    }]);
    task.until("not ready", |t| !t.ready()).await;
    task.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn the_mirror_gets_the_whole_state_once_every_cluster_is_known_then_changes() {
    let task = Task::spawn();
    task.send(fixture_events());
    // Let the events be applied: the mirror hears nothing before
    // ClustersKnown (a cluster not yet announced would look unlinked).
    task.until("applied", |t| has(&t.snapshot(), "north")).await;
    assert!(
        task.mirror.take().is_none(),
        "nothing before every cluster is known"
    );

    task.tx.send(SourceMsg::ClustersKnown).expect("runs");
    let first = task.update().await;
    assert!(matches!(first.changed, Changed::All), "{:?}", first.changed);
    assert!(first.set.get("east").is_some());

    let svc = service(
        "prod",
        "api",
        Some(ExportMode::Flat),
        false,
        false,
        &["10.1.0.9"],
        vec![],
    );
    task.send(vec![svc_event("east", svc)]);
    let next = task.update().await;
    assert!(
        matches!(&next.changed, Changed::Some(_)),
        "then only what changed: {:?}",
        next.changed
    );
    task.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn reloaded_settings_are_answered_under_at_once() {
    let task = Task::spawn();
    task.send(fixture_events());
    task.tx.send(SourceMsg::ClustersKnown).expect("runs");
    task.until("applied", |t| t.snapshot().known).await;
    assert_eq!(task.snapshot().settings.ttl, 5);
    let mut reloaded = settings();
    reloaded.ttl = 30;
    task.settings.send_replace(Arc::new(reloaded));
    task.until("the new TTL", |t| t.snapshot().settings.ttl == 30)
        .await;
    task.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_quiet_model_publishes_nothing_new_while_its_clock_ticks() {
    let task = Task::spawn();
    task.send(fixture_events());
    task.tx.send(SourceMsg::ClustersKnown).expect("runs");
    task.until("applied", |t| t.snapshot().known).await;
    let settled = task.snapshot();
    // Ten ticks of the model's clock with nothing due.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(Arc::ptr_eq(&task.snapshot(), &settled), "no new snapshot");
    // The task was running all along: the next event is applied.
    task.send(vec![Event::ClusterDown {
        cluster: "north".into(),
    }]);
    task.until("north gone", |t| !has(&t.snapshot(), "north"))
        .await;
    task.shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_the_task_and_closes_the_feed() {
    let task = Task::spawn();
    task.send(up("west", true));
    task.until("applied", |t| has(&t.snapshot(), "west")).await;
    task.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(1), task.handle)
        .await
        .expect("stops at once")
        .expect("no panic");
    assert!(
        task.tx.send(SourceMsg::ClustersKnown).is_err(),
        "sources are told the model is gone"
    );
    let open = tokio::time::timeout(Duration::from_secs(1), task.mirror.changed())
        .await
        .expect("said at once");
    assert!(!open, "the mirror's feed closes too");
}
