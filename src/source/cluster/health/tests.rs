use super::*;

use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A tracker started at `t0`, its API server never heard from.
fn tracker(t0: Instant) -> Tracker {
    Tracker::new(Liveness::new(t0, None, TIMEOUT), None, None)
}

/// One step of a health table.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Watch `w` fails, seen and dated `t0 + s`.
    Fail(Watch, u64),
    /// Watch `w` delivers.
    Deliver(Watch),
    /// The API server accepted these watches again.
    Accept(&'static [Watch]),
    /// The silence rule is judged at `t0 + s`.
    Check(u64),
    /// The API server answers at `t0 + s`.
    Answer(u64),
}

const A: Watch = Watch::Services(0);
const B: Watch = Watch::Slices;

/// A case: its name, its steps, and broken-since after each, as seconds
/// after the start.
type Case = (&'static str, &'static [Step], &'static [Option<u64>]);

/// The cases of [`broken_since_follows_failures_deliveries_and_silences`].
fn broken_since_cases() -> &'static [Case] {
    use Step::*;
    &[
        (
            "one failure, then a delivery",
            &[Fail(A, 1), Deliver(A)],
            &[Some(1), None],
        ),
        (
            "the first failure dates the break; the last delivery ends it",
            &[Fail(A, 1), Fail(B, 2), Deliver(A), Deliver(B)],
            &[Some(1), Some(1), Some(1), None],
        ),
        (
            "a delivery of a watch that never failed changes nothing",
            &[Fail(A, 1), Deliver(B)],
            &[Some(1), Some(1)],
        ),
        (
            "a failing watch failing again keeps the first date",
            &[Fail(A, 1), Fail(A, 5)],
            &[Some(1), Some(1)],
        ),
        (
            "the API server accepting the watch again heals it",
            &[Fail(A, 1), Fail(B, 2), Accept(&[A]), Accept(&[B])],
            &[Some(1), Some(1), Some(1), None],
        ),
        (
            "silent for the timeout: broken since the start (never answered)",
            &[Check(9), Check(10)],
            &[None, Some(0)],
        ),
        (
            "silent since the last answer",
            &[Answer(3), Check(12), Check(13)],
            &[None, None, Some(3)],
        ),
        (
            "a failure during a silence: the earlier date wins",
            &[Answer(3), Check(13), Fail(A, 20)],
            &[None, Some(3), Some(3)],
        ),
        (
            "an answer ends the silence but the earlier break is carried",
            &[Answer(3), Check(13), Answer(14)],
            &[None, Some(3), Some(3)],
        ),
    ]
}

#[test]
fn broken_since_follows_failures_deliveries_and_silences() {
    use Step::*;
    let cases = broken_since_cases();
    for (name, steps, want) in cases {
        assert_eq!(steps.len(), want.len(), "{name}: bad case");
        let t0 = Instant::now();
        let at = |s: u64| t0 + secs(s);
        let mut t = tracker(t0);
        for (i, (step, want)) in steps.iter().zip(want.iter()).enumerate() {
            match *step {
                Fail(w, s) => {
                    t.failed(w, at(s), at(s));
                }
                Deliver(w) => {
                    t.delivered(w);
                }
                Accept(ws) => {
                    t.accepted(|w, _| ws.contains(w));
                }
                Check(s) => {
                    t.liveness.check(at(s));
                }
                Answer(s) => {
                    t.answered(at(s));
                }
            }
            assert_eq!(
                t.health(true).broken_since,
                want.map(at),
                "{name}: step {i} {step:?}"
            );
        }
    }
}

#[test]
fn a_failure_counts_one_restart_per_spell_and_breaks_once() {
    let t0 = Instant::now();
    let mut t = tracker(t0);
    let (a, b) = (Watch::Services(0), Watch::Gateway);
    let restart_and_break = |restart, broke| Failure { restart, broke };
    assert_eq!(t.failed(a, t0, t0), restart_and_break(true, true));
    assert_eq!(t.failed(a, t0, t0), restart_and_break(false, false));
    assert_eq!(t.failed(b, t0, t0), restart_and_break(true, false));
    assert!(!t.delivered(a), "b still fails");
    assert!(t.delivered(b), "every watch works again");
    assert!(!t.delivered(b), "said once");
    assert_eq!(t.failed(a, t0, t0), restart_and_break(true, true));
}

#[test]
fn an_accepted_watch_heals_only_when_accepted_after_its_failure() {
    let t0 = Instant::now();
    let mut t = tracker(t0);
    let a = Watch::Services(0);
    t.failed(a, t0 + secs(5), t0 + secs(5));
    // The layer last accepted the watch at t0 + 4: before the failure.
    let accepted_at = t0 + secs(4);
    assert!(!t.accepted(|_, since| accepted_at > since));
    assert!(t.any_failing());
    let accepted_at = t0 + secs(6);
    assert!(t.accepted(|_, since| accepted_at > since));
    assert!(!t.any_failing());
    assert_eq!(t.broken(), None);
}

#[test]
fn the_end_of_a_silence_says_so_once_and_carries_the_break_until_relisted() {
    let t0 = Instant::now();
    let mut t = tracker(t0);
    assert!(!t.answered(t0 + secs(1)), "no silence to end");
    assert!(t.liveness.check(t0 + secs(11)));
    assert_eq!(t.silent_since(), Some(t0 + secs(1)));
    assert!(t.answered(t0 + secs(12)), "the silence ends");
    assert_eq!(t.silent_since(), None);
    assert_eq!(t.broken(), Some(t0 + secs(1)), "carried until relisted");
    assert!(!t.relisted(false), "not listed yet");
    assert_eq!(t.broken(), Some(t0 + secs(1)));
    assert!(t.relisted(true), "listed anew");
    assert!(!t.relisted(true), "said once");
    assert_eq!(t.broken(), None);
}

#[test]
fn a_restarted_run_carries_the_break_of_the_run_it_replaced() {
    let t0 = Instant::now();
    let carried = t0 - secs(30);
    let mut t = Tracker::new(Liveness::new(t0, Some(t0), TIMEOUT), Some(carried), None);
    assert_eq!(t.broken(), Some(carried));
    t.failed(Watch::Slices, t0, t0);
    assert_eq!(t.broken(), Some(carried), "the earlier date wins");
}

#[test]
fn the_sync_timeout_fires_once_and_only_before_the_sync() {
    // (synced, given up already, timer armed)
    let cases = [
        (false, false, true),
        (true, false, false),
        (false, true, false),
        (true, true, false),
    ];
    for (synced, gave_up, armed) in cases {
        let mut t = tracker(Instant::now());
        if gave_up {
            t.give_up();
        }
        assert_eq!(
            t.sync_pending(synced),
            armed,
            "synced {synced}, gave up {gave_up}"
        );
        assert_eq!(t.health(synced).sync_given_up, gave_up);
    }
}

#[test]
fn health_is_sent_only_when_it_changes() {
    let t0 = Instant::now();
    let mut t = tracker(t0);
    let first = t.changed(false).expect("the first health is news");
    assert_eq!(
        first,
        Health {
            synced: false,
            broken_since: None,
            gateway_alive: None,
            sync_given_up: false,
        }
    );
    assert_eq!(t.changed(false), None, "nothing changed");
    t.set_gateway_alive(Some(false));
    assert_eq!(t.changed(false).map(|h| h.gateway_alive), Some(Some(false)));
    t.give_up();
    assert_eq!(t.changed(false).map(|h| h.sync_given_up), Some(true));
    assert_eq!(t.changed(true).map(|h| h.synced), Some(true));
    t.failed(Watch::Slices, t0, t0);
    assert_eq!(t.changed(true).map(|h| h.broken_since), Some(Some(t0)));
    assert_eq!(t.changed(true), None);
}

#[test]
fn each_phase_change_is_logged_once_with_the_phase_before() {
    // (phase before the run, phases the board shows, what is logged)
    type Case = (
        Option<Phase>,
        &'static [Option<Phase>],
        &'static [Option<(Phase, &'static str)>],
    );
    let cases: &[Case] = &[
        (
            None,
            &[
                Some(Phase::Connecting),
                Some(Phase::Connecting),
                Some(Phase::Syncing),
            ],
            &[
                Some((Phase::Connecting, "new")),
                None,
                Some((Phase::Syncing, "connecting")),
            ],
        ),
        (
            Some(Phase::Unreachable),
            &[Some(Phase::Broken), Some(Phase::Synced)],
            &[
                Some((Phase::Broken, "unreachable")),
                Some((Phase::Synced, "broken")),
            ],
        ),
        (Some(Phase::Synced), &[Some(Phase::Synced)], &[None]),
        (
            None,
            &[None, Some(Phase::NoCredentials)],
            &[None, Some((Phase::NoCredentials, "new"))],
        ),
    ];
    for (before, shown, want) in cases {
        let mut t = Tracker::new(Liveness::new(Instant::now(), None, TIMEOUT), None, *before);
        let got: Vec<_> = shown.iter().map(|p| t.phase(*p)).collect();
        assert_eq!(&got, want, "from {before:?}");
    }
}
