use k8s_openapi::api::core::v1::Service;

use super::*;

fn guarded(json: &str) -> DeserializeGuard<Service> {
    serde_json::from_str(json).expect("metadata decodes")
}

#[test]
fn a_bad_object_is_delivered_as_undecodable_with_its_name() {
    // `spec.ports` must be a list.
    let bad = guarded(
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"prod","name":"web"},"spec":{"ports":"80"}}"#,
    );
    match deliver(Event::InitApply(bad)) {
        Delivery::Undecodable { object, error } => {
            assert_eq!(object, "prod/web");
            assert!(!error.is_empty());
        }
        other => panic!("expected undecodable, got {other:?}"),
    }
}

#[test]
fn a_good_object_keeps_its_event() {
    let good = guarded(
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"prod","name":"web"}}"#,
    );
    assert!(matches!(
        deliver(Event::Delete(good)),
        Delivery::Event(Event::Delete(s)) if s.metadata.name.as_deref() == Some("web")
    ));
    assert!(matches!(
        deliver::<Service>(Event::InitDone),
        Delivery::Event(Event::InitDone)
    ));
}

#[test]
fn retries_start_small_and_stay_bounded() {
    let delays: Vec<Duration> = backoff().take(12).collect();
    assert!(delays[0] < Duration::from_millis(600), "{delays:?}");
    // Jitter adds at most the delay itself.
    assert!(delays.iter().all(|d| *d <= MAX_BACKOFF * 2), "{delays:?}");
    assert!(delays[11] >= MAX_BACKOFF, "{delays:?}");
}
