use super::*;
use serde_json::json;

fn obj(name: &str, uid: &str, rv: &str, port: u16) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "prod", "uid": uid, "resourceVersion": rv,
                        "labels": {"app.kubernetes.io/managed-by": "clusterset-dns"}},
           "spec": {"ports": [{"port": port}]}})
}

fn key(name: &str) -> ObjectRef {
    ObjectRef {
        kind: Kind::Service,
        namespace: "prod".into(),
        name: name.into(),
    }
}

fn port(c: &Cache, name: &str) -> Option<u64> {
    c.actual()
        .get(&key(name))
        .and_then(|a| a.object.pointer("/spec/ports/0/port"))
        .and_then(Value::as_u64)
}

fn listed(objects: Vec<Value>) -> Cache {
    let mut c = Cache::default();
    for kind in [Kind::Service, Kind::EndpointSlice] {
        c.relist_begin(kind);
        if kind == Kind::Service {
            for o in objects.clone() {
                c.relist_item(kind, o);
            }
        }
        c.relist_done(kind);
    }
    c
}

#[test]
fn the_latest_watch_event_wins_whatever_its_resource_version_looks_like() {
    // "9" then "10": a numeric order would keep "10", a string order "9";
    // the watch's own order is the only one that counts.
    let mut c = listed(vec![obj("web", "u1", "9", 80)]);
    assert!(c.applied(Kind::Service, obj("web", "u1", "10", 81)));
    assert!(c.applied(Kind::Service, obj("web", "u1", "a", 82)));
    assert_eq!(port(&c, "web"), Some(82));
    // The same state again is not news.
    assert!(!c.applied(Kind::Service, obj("web", "u1", "a", 82)));
}

#[test]
fn a_write_response_stands_until_the_watch_brings_its_echo() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    c.wrote(key("web"), obj("web", "u1", "7", 81));
    c.wrote(key("web"), obj("web", "u1", "8", 82));
    // The first write's echo, then the second's: neither is news, and the
    // older one does not replace the newer response.
    assert!(!c.applied(Kind::Service, obj("web", "u1", "7", 81)));
    assert_eq!(port(&c, "web"), Some(82));
    assert!(!c.applied(Kind::Service, obj("web", "u1", "8", 82)));
    assert_eq!(port(&c, "web"), Some(82));
    // After the echo the watch is trusted again: a hand edit is news.
    assert!(c.applied(Kind::Service, obj("web", "u1", "9", 99)));
    assert_eq!(port(&c, "web"), Some(99));
}

#[test]
fn a_write_that_changed_nothing_waits_for_no_echo() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    // The server returns the object unchanged, same resourceVersion, and
    // sends no event: the next event (a hand edit) must not be ignored.
    c.wrote(key("web"), obj("web", "u1", "5", 80));
    assert!(c.applied(Kind::Service, obj("web", "u1", "6", 81)));
    assert_eq!(port(&c, "web"), Some(81));
}

#[test]
fn deletions_go_by_uid() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    // Deleted and created again (headless ↔ ClusterIP).
    c.removed(&key("web"), Some("u1".into()));
    c.wrote(key("web"), obj("web", "u2", "9", 80));
    // The old object's late events change nothing.
    assert!(!c.applied(Kind::Service, obj("web", "u1", "6", 80)));
    c.deleted(Kind::Service, &obj("web", "u1", "7", 80));
    assert_eq!(port(&c, "web"), Some(80));
    assert!(c.actual().contains_key(&key("web")));
    // The new one's deletion removes it, echo or not.
    c.deleted(Kind::Service, &obj("web", "u2", "10", 80));
    assert!(!c.actual().contains_key(&key("web")));
}

#[test]
fn a_deleted_object_does_not_come_back_through_a_late_event() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    c.removed(&key("web"), Some("u1".into()));
    assert!(!c.applied(Kind::Service, obj("web", "u1", "6", 80)));
    assert!(c.actual().is_empty());
    c.deleted(Kind::Service, &obj("web", "u1", "7", 80));
    // Someone (or we) created it again: a new uid is news.
    assert!(c.applied(Kind::Service, obj("web", "u3", "8", 80)));
    assert!(c.actual().contains_key(&key("web")));
}

#[test]
fn an_object_that_loses_our_label_leaves_the_cache() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    let mut theirs = obj("web", "u1", "6", 80);
    theirs["metadata"]["labels"] = json!({"team": "mine"});
    assert!(c.applied(Kind::Service, theirs));
    assert!(c.actual().is_empty());
}

#[test]
fn a_relist_replaces_everything_and_completes_the_listing() {
    let mut c = Cache::default();
    c.relist_begin(Kind::Service);
    c.relist_item(Kind::Service, obj("web", "u1", "5", 80));
    c.relist_item(Kind::Service, obj("api", "u2", "5", 80));
    c.relist_done(Kind::Service);
    assert!(!c.listed(), "slices not listed yet");
    c.relist_begin(Kind::EndpointSlice);
    c.relist_done(Kind::EndpointSlice);
    assert!(c.listed());
    // A write whose echo never comes (the watch was lost): the next list
    // says what exists.
    c.wrote(key("web"), obj("web", "u1", "7", 81));
    c.relist_begin(Kind::Service);
    c.relist_item(Kind::Service, obj("web", "u1", "8", 82));
    c.relist_done(Kind::Service);
    assert_eq!(port(&c, "web"), Some(82));
    assert!(!c.actual().contains_key(&key("api")), "not listed: gone");
    assert!(c.applied(Kind::Service, obj("web", "u1", "9", 83)));
}

#[test]
fn the_services_whose_state_changed_are_told_once() {
    let mut c = listed(vec![obj("a", "u1", "1", 80), obj("b", "u2", "1", 80)]);
    let all: Vec<ObjectRef> = c.take_touched_services().into_iter().collect();
    assert_eq!(all, [key("a"), key("b")], "the first list");
    assert!(c.take_touched_services().is_empty(), "told once");

    // The same state again is no change; a new port is.
    c.applied(Kind::Service, obj("a", "u1", "1", 80));
    c.applied(Kind::Service, obj("b", "u2", "2", 81));
    let changed: Vec<ObjectRef> = c.take_touched_services().into_iter().collect();
    assert_eq!(changed, [key("b")]);

    c.wrote(key("c"), obj("c", "u3", "5", 80));
    c.deleted(Kind::Service, &obj("a", "u1", "3", 80));
    let changed: Vec<ObjectRef> = c.take_touched_services().into_iter().collect();
    assert_eq!(changed, [key("a"), key("c")], "a write and a delete");

    // A relist that no longer holds b.
    c.relist_begin(Kind::Service);
    c.relist_item(Kind::Service, obj("c", "u3", "5", 80));
    c.relist_done(Kind::Service);
    let changed: Vec<ObjectRef> = c.take_touched_services().into_iter().collect();
    assert_eq!(changed, [key("b")], "gone from the list");
}
