//! The cluster task on tokio's paused clock. Without a client a task has
//! no watches, so what it does is all timing: the health it reports at
//! start, the sync timeout, and stopping. The watches' handling is covered
//! by [`super::health`]'s tables and the integration tests.

use super::*;

use std::time::Duration;

use super::runner::{BATCH, BATCH_MESSAGES};
use crate::model::testing::settings;
use crate::model::{Event, Health};
use crate::source::SourceMsg;
use crate::source::feed::Feed;
use crate::source::status::Phase;

const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

fn no_client(name: &str, settings: watch::Receiver<Arc<Settings>>) -> ClusterRun {
    ClusterRun {
        name: name.into(),
        local: false,
        client: Err("no kubeconfig in the Secret".to_owned()),
        selectors: Selectors::default(),
        gateway: GatewaySource::None,
        claims: Claims::default(),
        sync_timeout: SYNC_TIMEOUT,
        settings,
        mcs: false,
        mcs_rediscover: Duration::from_secs(60),
    }
}

/// A task of `run` spawned on `board` (registered first, as the live
/// source does), and the feed it sends to.
struct Task {
    feed: Arc<Feed>,
    board: Arc<StatusBoard>,
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<ClusterState>,
}

impl Task {
    fn spawn(run: ClusterRun) -> Self {
        let (feed, tx) = Feed::new();
        let board = Arc::new(StatusBoard::default());
        board.register(&run.name, run.local, "test".to_owned());
        let stop = CancellationToken::new();
        let state = run.state(None);
        let handle = tokio::spawn(super::run(run, state, tx, board.clone(), stop.clone()));
        Self {
            feed,
            board,
            stop,
            handle,
        }
    }

    /// The next events the task sends, and how long after `since` they
    /// came (the paused clock only moves when every task waits).
    async fn next(&self, since: tokio::time::Instant) -> (Vec<Event>, Duration) {
        loop {
            let round = self.feed.take(usize::MAX);
            let mut events: Vec<Event> = round.events;
            for msg in round.control {
                if let SourceMsg::Events(more) = msg {
                    events.extend(more);
                }
            }
            if !events.is_empty() {
                return (events, since.elapsed());
            }
            self.feed.wait().await;
        }
    }
}

fn healths(events: &[Event]) -> Vec<Health> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Health { health, .. } => Some(health.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_batch_ends_at_either_bound() {
    // (handled, pending, another message)
    let cases = [
        (1, 0, true),
        (BATCH_MESSAGES - 1, BATCH - 1, true),
        (BATCH_MESSAGES, 0, false),
        (1, BATCH, false),
        (BATCH_MESSAGES, BATCH, false),
    ];
    for (handled, pending, more) in cases {
        assert_eq!(
            runner::gather_more(handled, pending),
            more,
            "{handled} handled, {pending} pending"
        );
    }
}

#[test]
fn service_watches_are_one_per_selector_then_mirrors_then_every_service() {
    let (_tx, rx) = watch::channel(Arc::new(settings()));
    let mut run = no_client("east", rx);
    let distinct = run.selectors.distinct().len();
    assert_eq!(run.service_selectors().len(), distinct);
    assert_eq!(run.all_services(), None);
    run.local = true;
    assert_eq!(
        run.service_selectors().last().map(String::as_str),
        Some("mirror.linkerd.io/mirrored-service=true")
    );
    run.mcs = true;
    let selectors = run.service_selectors();
    assert_eq!(selectors.len(), distinct + 2);
    assert_eq!(
        selectors.last().map(String::as_str),
        Some(""),
        "every Service"
    );
    assert_eq!(run.all_services(), Some(distinct + 1));
}

#[tokio::test(start_paused = true)]
async fn without_credentials_the_task_reports_once_then_gives_up_at_the_sync_timeout() {
    let (_settings, rx) = watch::channel(Arc::new(settings()));
    let task = Task::spawn(no_client("east", rx));
    let t0 = tokio::time::Instant::now();

    let (events, after) = task.next(t0).await;
    assert_eq!(after, Duration::ZERO, "reported at start");
    assert_eq!(
        healths(&events),
        vec![Health::default()],
        "not synced, not given up: {events:?}"
    );
    assert_eq!(task.board.phase("east"), Some(Phase::NoCredentials));
    let problem = task.board.snapshot()["east"].problem.clone();
    assert_eq!(problem.as_deref(), Some("no kubeconfig in the Secret"));

    // Nothing happens until the sync timeout: the next events are its.
    let (events, after) = task.next(t0).await;
    assert_eq!(after, SYNC_TIMEOUT, "at the sync timeout");
    assert_eq!(
        healths(&events),
        vec![Health {
            sync_given_up: true,
            ..Health::default()
        }],
    );
    assert!(task.board.snapshot()["east"].gave_up);

    // It fires once: an hour later, still nothing new, and the task runs.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(task.feed.take(usize::MAX).is_empty(), "nothing more");
    assert!(!task.handle.is_finished());
    task.stop.cancel();
    let state = tokio::time::timeout(Duration::from_secs(1), task.handle)
        .await
        .expect("stops at once")
        .expect("no panic");
    assert!(!state.synced());
}

#[tokio::test(start_paused = true)]
async fn the_sync_timeout_follows_the_configured_duration() {
    let (_settings, rx) = watch::channel(Arc::new(settings()));
    let mut run = no_client("north", rx);
    run.sync_timeout = Duration::from_secs(5);
    let task = Task::spawn(run);
    let t0 = tokio::time::Instant::now();
    let _ = task.next(t0).await;
    let (events, after) = task.next(t0).await;
    assert_eq!(after, Duration::from_secs(5));
    assert!(
        healths(&events).iter().all(|h| h.sync_given_up),
        "{events:?}"
    );
    task.stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn new_trust_settings_restart_the_watches_and_keep_the_task_running() {
    let (settings_tx, rx) = watch::channel(Arc::new(settings()));
    let task = Task::spawn(no_client("east", rx));
    let t0 = tokio::time::Instant::now();
    let (events, _) = task.next(t0).await;
    assert_eq!(healths(&events), vec![Health::default()]);

    let mut reloaded = settings();
    reloaded.trust.deny_addresses = vec!["10.9.0.0/16".parse().expect("a net")];
    settings_tx.send_replace(Arc::new(reloaded));
    // The restarted run reports its health anew (a new run sends its
    // first health whatever the last one was), at once.
    let (events, after) = task.next(t0).await;
    assert_eq!(after, Duration::ZERO);
    assert_eq!(healths(&events), vec![Health::default()]);
    // And its sync timeout counts from the restart: still 30 s from t0.
    let (events, after) = task.next(t0).await;
    assert_eq!(after, SYNC_TIMEOUT);
    assert!(healths(&events).iter().all(|h| h.sync_given_up));
    assert!(!task.handle.is_finished());
    task.stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn the_task_stops_when_the_model_is_gone() {
    let (_settings, rx) = watch::channel(Arc::new(settings()));
    let task = Task::spawn(no_client("east", rx));
    let t0 = tokio::time::Instant::now();
    let _ = task.next(t0).await;
    task.feed.close();
    // The next report (the sync timeout's) finds the feed closed.
    let state = tokio::time::timeout(SYNC_TIMEOUT * 2, task.handle)
        .await
        .expect("the task ends")
        .expect("no panic");
    assert!(!state.synced());
    assert_eq!(t0.elapsed(), SYNC_TIMEOUT, "at its next send");
}
