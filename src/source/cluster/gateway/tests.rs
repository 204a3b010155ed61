use super::*;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::source::spec::ProbeSpec;
use crate::vocab::trust::{Claims, TrustSettings};

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| ip(s)).collect()
}

fn host(h: &str) -> GatewayAddr {
    GatewayAddr::Host(h.to_owned())
}

fn lit(s: &str) -> GatewayAddr {
    GatewayAddr::Ip(ip(s))
}

#[test]
fn addresses_are_literals_and_the_last_answer_of_each_host() {
    let known: HashMap<String, Vec<IpAddr>> = [
        ("gw.east".to_owned(), ips(&["10.0.0.9", "10.0.0.2"])),
        ("gw.dup".to_owned(), ips(&["10.0.0.1"])),
    ]
    .into();
    // (declared, addresses: sorted, without duplicates)
    let cases: Vec<(Vec<GatewayAddr>, Vec<IpAddr>)> = vec![
        (vec![], vec![]),
        (
            vec![lit("10.0.0.5"), lit("10.0.0.1")],
            ips(&["10.0.0.1", "10.0.0.5"]),
        ),
        (vec![host("gw.east")], ips(&["10.0.0.2", "10.0.0.9"])),
        (vec![host("gw.unresolved")], vec![]),
        (
            vec![host("gw.unresolved"), lit("10.0.0.7"), host("gw.east")],
            ips(&["10.0.0.2", "10.0.0.7", "10.0.0.9"]),
        ),
        (vec![lit("10.0.0.1"), host("gw.dup")], ips(&["10.0.0.1"])),
        (
            vec![lit("fd00::1"), lit("10.0.0.1")],
            ips(&["10.0.0.1", "fd00::1"]),
        ),
    ];
    for (declared, want) in cases {
        assert_eq!(addresses(&declared, &known), want, "{declared:?}");
    }
    assert!(!has_hosts(&[lit("10.0.0.1")]));
    assert!(has_hosts(&[lit("10.0.0.1"), host("gw")]));
}

#[test]
fn probe_reports_update_the_status_shown() {
    let ms = Duration::from_millis;
    let ok = |latency| ProbeReport {
        alive: Some(true),
        changed: false,
        success: true,
        latency: Some(latency),
        error: None,
        consecutive_failures: 0,
    };
    let failed = |n, alive| ProbeReport {
        alive,
        changed: false,
        success: false,
        latency: None,
        error: Some(format!("failure {n}")),
        consecutive_failures: n,
    };
    // (report, alive, consecutive, successes, failures, latency, error)
    type Want = (
        Option<bool>,
        u32,
        u64,
        u64,
        Option<Duration>,
        Option<&'static str>,
    );
    let steps: Vec<(ProbeReport, Want)> = vec![
        (failed(1, None), (None, 1, 0, 1, None, Some("failure 1"))),
        (
            ok(ms(5)),
            (Some(true), 0, 1, 1, Some(ms(5)), Some("failure 1")),
        ),
        (
            failed(1, Some(true)),
            (Some(true), 1, 1, 2, Some(ms(5)), Some("failure 1")),
        ),
        (
            failed(2, Some(false)),
            (Some(false), 2, 1, 3, Some(ms(5)), Some("failure 2")),
        ),
        (
            ok(ms(7)),
            (Some(true), 0, 2, 3, Some(ms(7)), Some("failure 2")),
        ),
    ];
    let mut status = ProbeStatus::default();
    for (i, (report, want)) in steps.iter().enumerate() {
        record(&mut status, report);
        let got = (
            status.alive,
            status.consecutive_failures,
            status.successes,
            status.failures,
            status.last_latency,
            status.last_error.as_deref(),
        );
        assert_eq!(got, *want, "step {i}");
    }
}

fn spec(addresses: Vec<GatewayAddr>, probe: Option<ProbeSpec>) -> GatewaySpec {
    GatewaySpec {
        addresses,
        port: Some(4143),
        identity: Some("gw.east".to_owned()),
        probe,
    }
}

#[test]
fn resolved_addresses_are_screened_by_the_claims_and_reach_the_probe() {
    let claims = Claims {
        allowed_addresses: Some(vec!["10.0.0.0/24".parse().expect("a net")]),
        ..Claims::default()
    };
    let trust = Trust::new(TrustSettings::default(), claims);
    let mut d = DeclaredGateway::new(spec(vec![], None));
    let probed = d.addrs.subscribe();
    // (resolved, kept, refused)
    let cases: &[(&[&str], &[&str], bool)] = &[
        (&["10.0.0.1", "10.0.0.2"], &["10.0.0.1", "10.0.0.2"], false),
        (&["10.0.0.1", "192.168.1.1"], &["10.0.0.1"], true),
        (&["127.0.0.1"], &[], true),
        (&[], &[], false),
    ];
    for &(resolved, kept, refused) in cases {
        let got = d.resolved(&ips(resolved), &trust);
        assert_eq!(
            got.gateway,
            Gateway {
                addresses: ips(kept),
                port: Some(4143),
                identity: Some("gw.east".to_owned()),
            },
            "{resolved:?}"
        );
        assert_eq!(got.adjusted.is_some(), refused, "{resolved:?}");
        if let Some(a) = got.adjusted {
            assert_eq!(a.adjustment, Adjustment::Clamped);
        }
        assert_eq!(*probed.borrow(), ips(kept), "the probe probes what is kept");
    }
}

/// A resolver whose answers are scripted: each call takes the next one
/// (the last one repeats), and the calls are counted.
#[derive(Clone, Default)]
struct Script {
    answers: Arc<Mutex<VecDeque<std::io::Result<Vec<IpAddr>>>>>,
    calls: Arc<Mutex<Vec<tokio::time::Instant>>>,
}

impl Script {
    fn new(answers: Vec<std::io::Result<Vec<IpAddr>>>) -> Self {
        Self {
            answers: Arc::new(Mutex::new(answers.into())),
            calls: Arc::default(),
        }
    }

    fn lookup(
        &self,
    ) -> impl Fn(String) -> std::future::Ready<std::io::Result<Vec<IpAddr>>> + use<> {
        let this = self.clone();
        move |_host| {
            this.calls
                .lock()
                .expect("not poisoned")
                .push(tokio::time::Instant::now());
            let mut answers = this.answers.lock().expect("not poisoned");
            let answer = match answers.len() {
                0 => Err(std::io::Error::other("script ended")),
                1 => match &answers[0] {
                    Ok(a) => Ok(a.clone()),
                    Err(e) => Err(std::io::Error::other(e.to_string())),
                },
                _ => answers.pop_front().expect("an answer"),
            };
            std::future::ready(answer)
        }
    }

    fn calls(&self) -> usize {
        self.calls.lock().expect("not poisoned").len()
    }
}

#[tokio::test(start_paused = true)]
async fn the_resolver_reports_each_new_set_at_the_resolve_period() {
    let script = Script::new(vec![
        Ok(ips(&["10.0.0.2"])),
        // Unchanged at one period: nothing reported.
        Ok(ips(&["10.0.0.2"])),
        // A failed lookup at two periods keeps the last answer.
        Err(std::io::Error::other("SERVFAIL")),
        // Changed at three periods.
        Ok(ips(&["10.0.0.3"])),
    ]);
    let (tx, mut rx) = mpsc::channel(8);
    let stop = CancellationToken::new();
    let t0 = tokio::time::Instant::now();
    let task = tokio::spawn(resolve(
        vec![lit("10.0.0.1"), host("gw.east")],
        script.lookup(),
        tx,
        |ips| ips,
        stop.clone(),
    ));
    let first = rx.recv().await.expect("a first set");
    assert_eq!(first, ips(&["10.0.0.1", "10.0.0.2"]));
    assert_eq!(t0.elapsed(), Duration::ZERO, "at once");
    let next = rx.recv().await.expect("a changed set");
    assert_eq!(next, ips(&["10.0.0.1", "10.0.0.3"]));
    assert_eq!(t0.elapsed(), RESOLVE_PERIOD * 3, "the first change");
    // The quiet periods in between were resolved, not skipped.
    assert_eq!(script.calls(), 4);
    stop.cancel();
    task.await.expect("the resolver ends when stopped");
}

#[tokio::test(start_paused = true)]
async fn literal_addresses_are_reported_once_and_the_resolver_ends() {
    let script = Script::new(vec![]);
    let (tx, mut rx) = mpsc::channel(8);
    let t0 = tokio::time::Instant::now();
    let task = tokio::spawn(resolve(
        vec![lit("10.0.0.1")],
        script.lookup(),
        tx,
        |ips| ips,
        CancellationToken::new(),
    ));
    assert_eq!(rx.recv().await, Some(ips(&["10.0.0.1"])));
    task.await.expect("the resolver ends by itself");
    assert_eq!(rx.recv().await, None, "nothing more");
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(script.calls(), 0, "nothing to look up");
}

#[tokio::test(start_paused = true)]
async fn a_host_that_never_resolves_is_reported_as_no_address_then_retried() {
    let script = Script::new(vec![Err(std::io::Error::other("NXDOMAIN"))]);
    let (tx, mut rx) = mpsc::channel(8);
    let stop = CancellationToken::new();
    let task = tokio::spawn(resolve(
        vec![host("gw.nowhere")],
        script.lookup(),
        tx,
        |ips| ips,
        stop.clone(),
    ));
    assert_eq!(
        rx.recv().await,
        Some(vec![]),
        "no address yet, said at once"
    );
    tokio::time::sleep(RESOLVE_PERIOD * 2 + Duration::from_secs(1)).await;
    assert_eq!(script.calls(), 3, "asked again every period");
    assert!(
        rx.try_recv().is_err(),
        "the same empty set is not said again"
    );
    stop.cancel();
    task.await.expect("the resolver ends when stopped");
}

#[tokio::test(start_paused = true)]
async fn the_probe_starts_once_with_the_first_addresses() {
    let probe = ProbeSpec {
        path: "/ready".to_owned(),
        port: 1,
        period: Duration::from_secs(3),
        timeout: Duration::from_secs(1),
        failure_threshold: 1,
    };
    let mut d = DeclaredGateway::new(spec(vec![], Some(probe)));
    assert!(d.has_probe());
    let trust = Trust::new(TrustSettings::default(), Claims::default());
    let stop = CancellationToken::new();
    let (tx, mut reports) = mpsc::unbounded_channel();
    for _ in 0..3 {
        // No address the claims allow: the probe fails at once, no dial.
        d.resolved(&[], &trust);
        let tx = tx.clone();
        d.start_probe(
            move |r| {
                let _ = tx.send(r);
            },
            stop.clone(),
        );
    }
    let t0 = tokio::time::Instant::now();
    let first = reports.recv().await.expect("a report");
    assert_eq!(first.error.as_deref(), Some("no gateway address"));
    assert_eq!(first.alive, Some(false));
    let second = reports.recv().await.expect("a report");
    assert!(
        second.consecutive_failures == 2,
        "one probe loop: {second:?}"
    );
    assert!(t0.elapsed() >= Duration::from_secs(3), "a period later");
    assert!(reports.try_recv().is_err(), "a single probe loop");
    stop.cancel();
}
