use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::vocab::name::ZoneName;

const T: Duration = Duration::from_secs(10);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Each case: answers at these offsets, checks at these offsets, and the
/// reach after the last step (`Some(n)`: silent since offset n).
#[test]
fn the_silence_rule() {
    enum Step {
        Answer(u64),
        Check(u64, bool),
    }
    use Step::{Answer, Check};
    struct Case {
        name: &'static str,
        steps: Vec<Step>,
        reach: Result<Option<u64>, ()>,
    }
    let cases = [
        Case {
            name: "never answered, timeout not passed: waiting",
            steps: vec![Check(9, false)],
            reach: Err(()),
        },
        Case {
            name: "never answered: silent since the start once the timeout passes",
            steps: vec![Check(10, true)],
            reach: Ok(Some(0)),
        },
        Case {
            name: "answers keep it reachable",
            steps: vec![Answer(3), Check(12, false), Answer(12), Check(21, false)],
            reach: Ok(None),
        },
        Case {
            name: "silent since its last answer, declared once",
            steps: vec![Answer(3), Check(13, true), Check(20, false)],
            reach: Ok(Some(3)),
        },
        Case {
            name: "an answer ends the silence",
            steps: vec![Answer(3), Check(13, true), Answer(40), Check(45, false)],
            reach: Ok(None),
        },
        Case {
            name: "an answer recorded late (older than the last) changes nothing",
            steps: vec![Answer(8), Answer(2), Check(17, false), Check(18, true)],
            reach: Ok(Some(8)),
        },
    ];
    let t0 = Instant::now();
    for case in cases {
        let mut l = Liveness::new(t0, None, T);
        for step in &case.steps {
            match *step {
                Answer(at) => {
                    l.answered(t0 + secs(at));
                }
                Check(at, expect) => {
                    assert_eq!(
                        l.check(t0 + secs(at)),
                        expect,
                        "{}: check at {at}",
                        case.name
                    );
                }
            }
        }
        let expected = match case.reach {
            Err(()) => Reach::Waiting,
            Ok(None) => Reach::Answering,
            Ok(Some(s)) => Reach::Silent(t0 + secs(s)),
        };
        assert_eq!(l.reach(), expected, "{}", case.name);
    }
}

#[test]
fn deadlines_and_the_end_of_a_silence() {
    let t0 = Instant::now();
    let mut l = Liveness::new(t0, Some(t0 + secs(1)), T);
    assert_eq!(l.deadline(), Some(t0 + secs(11)));
    assert!(l.check(t0 + secs(11)));
    assert_eq!(l.deadline(), None, "while silent only an answer matters");
    assert!(l.answered(t0 + secs(30)), "the answer ends the silence");
    assert!(!l.answered(t0 + secs(31)), "later answers end nothing");
    assert_eq!(l.deadline(), Some(t0 + secs(41)));
    l.set_timeout(secs(2));
    assert_eq!(
        l.deadline(),
        Some(t0 + secs(33)),
        "a reloaded timeout applies"
    );
}

#[test]
fn heartbeat_timing_stays_within_bounds() {
    assert_eq!(heartbeat_period(secs(10)), Duration::from_millis(2500));
    assert_eq!(heartbeat_period(secs(60)), MAX_HEARTBEAT_PERIOD);
    assert_eq!(heartbeat_period(secs(1)), Duration::from_millis(250));
    assert_eq!(heartbeat_deadline(secs(10)), Duration::from_millis(2500));
    assert_eq!(heartbeat_deadline(secs(60)), secs(5));
    assert_eq!(heartbeat_deadline(secs(3)), secs(1), "at least a second");
    assert_eq!(
        heartbeat_deadline(secs(1)),
        Duration::from_millis(500),
        "at most half"
    );
}

fn settings(timeout: Duration) -> watch::Receiver<Arc<Settings>> {
    let mut s = Settings::new(ZoneName::new("clusterset.local").expect("zone"));
    s.cluster_timeout = timeout;
    watch::channel(Arc::new(s)).1
}

/// A server that never answers costs one request per period, each given
/// up at its deadline, and each reported.
#[tokio::test(start_paused = true)]
async fn a_hung_server_gets_one_bounded_request_per_period() {
    let asked = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = CancellationToken::new();
    let task = {
        let asked = asked.clone();
        let failures = failures.clone();
        tokio::spawn(heartbeat(
            move || {
                asked.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<Result<(), String>>()
            },
            settings(secs(8)),
            move |e| failures.lock().expect("lock").push(e),
            stop.clone(),
        ))
    };
    // Period 1 s, deadline 2 s: requests at 0, 2, 4, 6, 8 (each waits out
    // its deadline, then the next starts at once).
    tokio::time::sleep(Duration::from_millis(9500)).await;
    stop.cancel();
    task.await.expect("heartbeat task");
    assert_eq!(asked.load(Ordering::SeqCst), 5);
    let failures = failures.lock().expect("lock").clone();
    assert_eq!(failures.len(), 4, "{failures:?}");
    assert!(
        failures
            .iter()
            .all(|f| f == "heartbeat: no answer within 2s"),
        "{failures:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_healthy_server_is_asked_once_per_period() {
    let asked = Arc::new(AtomicUsize::new(0));
    let stop = CancellationToken::new();
    let task = {
        let asked = asked.clone();
        tokio::spawn(heartbeat(
            move || {
                asked.fetch_add(1, Ordering::SeqCst);
                std::future::ready(Ok(()))
            },
            settings(secs(10)),
            |e| panic!("no failure expected: {e}"),
            stop.clone(),
        ))
    };
    // Period 2.5 s: requests at 0, 2.5, 5, 7.5.
    tokio::time::sleep(Duration::from_millis(9000)).await;
    stop.cancel();
    task.await.expect("heartbeat task");
    assert_eq!(asked.load(Ordering::SeqCst), 4);
}
