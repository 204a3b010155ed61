//! Acquire, renew, follow and take over, request by request against a
//! scripted API server; and the expiry rule, which trusts only our own
//! clock.

use super::*;
use crate::mirror::mock::{self, Step};
use serde_json::{Value, json};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/mirror";

fn config() -> LeaseConfig {
    LeaseConfig::new("ns", "mirror", "me")
}

fn lease(holder: &str, renew: &str, transitions: i32, rv: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": "mirror", "namespace": "ns", "resourceVersion": rv},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                    "acquireTime": "2026-01-01T00:00:00Z", "renewTime": renew,
                    "leaseTransitions": transitions}})
}

async fn attempt(script: Vec<Step>, observed: &mut Observed) -> Result<Attempt, ApiError> {
    let (client, handle) = mock::client();
    let server = mock::serve(handle, script);
    let api: Api<Lease> = Api::namespaced(client, "ns");
    let out = try_once(&api, &config(), observed).await;
    mock::finished(server).await;
    out
}

/// A body that holds the Lease for us: our identity, 15 s, a fresh
/// renewTime, `transitions`, the resourceVersion we read.
fn held_by_us(
    transitions: i32,
    rv: Option<&'static str>,
    acquired_now: bool,
) -> impl Fn(&Value) + Send + 'static {
    move |b: &Value| {
        assert_eq!(b["metadata"]["name"], "mirror");
        assert_eq!(b["metadata"]["namespace"], "ns");
        assert_eq!(
            b["metadata"]["resourceVersion"].as_str(),
            rv,
            "optimistic concurrency"
        );
        let spec = &b["spec"];
        assert_eq!(spec["holderIdentity"], "me");
        assert_eq!(spec["leaseDurationSeconds"], 15);
        assert_eq!(spec["leaseTransitions"], transitions);
        assert!(spec["renewTime"].as_str().is_some_and(|t| t > "2026-06"));
        let acquire = spec["acquireTime"].as_str().unwrap_or("");
        if acquired_now {
            assert_eq!(spec["acquireTime"], spec["renewTime"]);
        } else {
            assert!(
                acquire.starts_with("2026-01-01T00:00:00"),
                "kept on renewal: {acquire}"
            );
        }
    }
}

#[tokio::test]
async fn a_missing_lease_is_created_and_held() {
    let script = vec![
        Step::new("GET", LEASE).fails(404, "NotFound"),
        Step::new("POST", LEASES)
            .content_type("application/json")
            .body_with(held_by_us(0, None, true))
            .ok(lease("me", "2026-11-25T00:00:00Z", 0, "1")),
    ];
    let got = attempt(script, &mut Observed::default()).await;
    assert_eq!(got, Ok(Attempt::Held));
}

#[tokio::test]
async fn our_lease_is_renewed_by_a_replace_at_the_version_read() {
    let script = vec![
        Step::new("GET", LEASE).ok(lease("me", "2026-11-25T00:00:00Z", 3, "12")),
        Step::new("PUT", LEASE)
            .content_type("application/json")
            .body_with(held_by_us(3, Some("12"), false))
            .ok(lease("me", "2026-11-25T00:00:02Z", 3, "13")),
    ];
    let got = attempt(script, &mut Observed::default()).await;
    assert_eq!(got, Ok(Attempt::Held));
}

#[tokio::test]
async fn someone_elses_lease_is_followed_however_old_its_renew_time_looks() {
    // Renewed "in 2001" by the holder's clock: our clock has not seen it
    // unchanged for a lease duration, so it is not expired.
    let script = vec![Step::new("GET", LEASE).ok(lease("them", "2001-01-01T00:00:00Z", 1, "4"))];
    let got = attempt(script, &mut Observed::default()).await;
    assert_eq!(got, Ok(Attempt::Other("them".to_owned())));
}

#[tokio::test]
async fn a_lease_unchanged_for_a_duration_by_our_clock_is_taken_over() {
    let renew = "2026-11-25T00:00:00Z";
    let long_ago = Instant::now()
        .checked_sub(Duration::from_secs(16))
        .expect("clock");
    let mut observed = Observed::seen("them", renew, long_ago);
    let script = vec![
        Step::new("GET", LEASE).ok(lease("them", renew, 1, "4")),
        Step::new("PUT", LEASE)
            .body_with(held_by_us(2, Some("4"), true))
            .ok(lease("me", renew, 2, "5")),
    ];
    assert_eq!(attempt(script, &mut observed).await, Ok(Attempt::Held));
}

#[tokio::test]
async fn a_renewal_seen_resets_our_clock() {
    let long_ago = Instant::now()
        .checked_sub(Duration::from_secs(16))
        .expect("clock");
    let mut observed = Observed::seen("them", "2026-11-25T00:00:00Z", long_ago);
    // The holder renewed since: not expired, and no write.
    let script = vec![Step::new("GET", LEASE).ok(lease("them", "2026-11-25T00:00:10Z", 1, "6"))];
    let got = attempt(script, &mut observed).await;
    assert_eq!(got, Ok(Attempt::Other("them".to_owned())));
}

#[tokio::test]
async fn a_released_lease_is_taken_at_once_and_a_lost_race_is_a_409() {
    let script = vec![
        Step::new("GET", LEASE).ok(lease("", "2026-11-25T00:00:00Z", 2, "8")),
        Step::new("PUT", LEASE)
            .body_with(held_by_us(3, Some("8"), true))
            .fails(409, "Conflict"),
    ];
    let got = attempt(script, &mut Observed::default()).await;
    assert!(
        matches!(got, Err(ApiError::Status { code: 409, .. })),
        "{got:?}"
    );
}

/// A leader whose API stops answering stops writing within the renew
/// deadline, not when the client's own timeout (minutes) gives up: else a
/// second replica takes the Lease over while we still write.
#[tokio::test]
async fn a_leader_whose_renewal_hangs_stops_leading_within_the_renew_deadline() {
    let mut config = config();
    config.renew_deadline = Duration::from_millis(300);
    config.retry_period = Duration::from_millis(50);
    let (client, handle) = mock::client();
    let script = vec![
        Step::new("GET", LEASE).fails(404, "NotFound"),
        Step::new("POST", LEASES)
            .content_type("application/json")
            .body_with(held_by_us(0, None, true))
            .ok(lease("me", "2026-11-25T00:00:00Z", 0, "1")),
    ];
    let server = mock::serve_then_hang(handle, script);
    let (leading_tx, mut leading) = watch::channel(false);
    let shutdown = CancellationToken::new();
    let election = tokio::spawn(run(client, config, leading_tx, shutdown.clone()));
    let wait = |want: bool| {
        let mut rx = leading.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(3), rx.wait_for(|l| *l == want))
                .await
                .is_ok()
        }
    };
    assert!(wait(true).await, "the created Lease makes us leader");
    let led = Instant::now();
    assert!(wait(false).await, "a hung renewal ends the leadership");
    let held = led.elapsed();
    assert!(
        held < Duration::from_millis(300 + 500),
        "led {held:?} after the last renewal; the renew deadline is 300 ms"
    );
    assert!(!*leading.borrow_and_update());
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(2), election).await;
    server.abort();
}
