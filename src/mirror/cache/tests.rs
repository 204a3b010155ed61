use super::*;
use crate::mirror::fixtures::{edited, object};
use serde_json::json;

fn obj(name: &str, uid: &str, rv: &str, port: u16) -> Object {
    object(json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": "prod", "uid": uid, "resourceVersion": rv,
                        "labels": {"app.kubernetes.io/managed-by": "clusterset-dns"}},
           "spec": {"ports": [{"port": port}]}}))
}

fn key(name: &str) -> ObjectRef {
    ObjectRef {
        kind: Kind::Service,
        namespace: "prod".into(),
        name: name.into(),
    }
}

fn port(c: &Cache, name: &str) -> Option<i32> {
    match &c.actual().get(&key(name))?.object {
        Object::Service(s) => Some(s.spec.as_ref()?.ports.as_ref()?.first()?.port),
        _ => None,
    }
}

/// A relist of `kind` bringing `objects`.
fn relist(c: &mut Cache, kind: Kind, objects: Vec<Object>) {
    c.on_event(kind, Event::Init);
    for o in objects {
        c.on_event(kind, Event::InitApply(o));
    }
    c.on_event(kind, Event::InitDone);
}

fn listed(objects: Vec<Object>) -> Cache {
    let mut c = Cache::default();
    relist(&mut c, Kind::Service, objects);
    relist(&mut c, Kind::EndpointSlice, Vec::new());
    c
}

#[test]
fn the_latest_watch_event_wins_whatever_its_resource_version_looks_like() {
    // "9" then "10": a numeric order would keep "10", a string order "9";
    // the watch's own order is the only one that counts.
    let mut c = listed(vec![obj("web", "u1", "9", 80)]);
    assert!(c.applied(obj("web", "u1", "10", 81)));
    assert!(c.applied(obj("web", "u1", "a", 82)));
    assert_eq!(port(&c, "web"), Some(82));
    // The same state again is not news.
    assert!(!c.applied(obj("web", "u1", "a", 82)));
}

#[test]
fn a_write_response_stands_until_the_watch_brings_its_echo() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    c.wrote(key("web"), obj("web", "u1", "7", 81));
    c.wrote(key("web"), obj("web", "u1", "8", 82));
    // The first write's echo, then the second's: neither is news, and the
    // older one does not replace the newer response.
    assert!(!c.applied(obj("web", "u1", "7", 81)));
    assert_eq!(port(&c, "web"), Some(82));
    assert!(!c.applied(obj("web", "u1", "8", 82)));
    assert_eq!(port(&c, "web"), Some(82));
    // After the echo the watch is trusted again: a hand edit is news.
    assert!(c.applied(obj("web", "u1", "9", 99)));
    assert_eq!(port(&c, "web"), Some(99));
}

#[test]
fn a_write_that_changed_nothing_waits_for_no_echo() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    // The server returns the object unchanged, same resourceVersion, and
    // sends no event: the next event (a hand edit) must not be ignored.
    c.wrote(key("web"), obj("web", "u1", "5", 80));
    assert!(c.applied(obj("web", "u1", "6", 81)));
    assert_eq!(port(&c, "web"), Some(81));
}

#[test]
fn deletions_go_by_uid() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    // Deleted and created again (headless ↔ ClusterIP).
    c.removed(&key("web"), Some("u1".into()));
    c.wrote(key("web"), obj("web", "u2", "9", 80));
    // The old object's late events change nothing.
    assert!(!c.applied(obj("web", "u1", "6", 80)));
    c.deleted(&obj("web", "u1", "7", 80));
    assert_eq!(port(&c, "web"), Some(80));
    assert!(c.actual().contains_key(&key("web")));
    // The new one's deletion removes it, echo or not.
    c.deleted(&obj("web", "u2", "10", 80));
    assert!(!c.actual().contains_key(&key("web")));
}

#[test]
fn a_deleted_object_does_not_come_back_through_a_late_event() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    c.removed(&key("web"), Some("u1".into()));
    assert!(!c.applied(obj("web", "u1", "6", 80)));
    assert!(c.actual().is_empty());
    c.deleted(&obj("web", "u1", "7", 80));
    // Someone (or we) created it again: a new uid is news.
    assert!(c.applied(obj("web", "u3", "8", 80)));
    assert!(c.actual().contains_key(&key("web")));
}

#[test]
fn an_object_that_loses_our_label_leaves_the_cache() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    let theirs = edited(&obj("web", "u1", "6", 80), |v| {
        v["metadata"]["labels"] = json!({"team": "mine"});
    });
    assert!(c.applied(theirs));
    assert!(c.actual().is_empty());
}

#[test]
fn a_relist_replaces_everything_and_completes_the_listing() {
    let mut c = Cache::default();
    relist(
        &mut c,
        Kind::Service,
        vec![obj("web", "u1", "5", 80), obj("api", "u2", "5", 80)],
    );
    assert!(!c.listed(), "slices not listed yet");
    relist(&mut c, Kind::EndpointSlice, Vec::new());
    assert!(c.listed());
    // A write whose echo never comes (the watch was lost): the next list
    // says what exists.
    c.wrote(key("web"), obj("web", "u1", "7", 81));
    relist(&mut c, Kind::Service, vec![obj("web", "u1", "8", 82)]);
    assert_eq!(port(&c, "web"), Some(82));
    assert!(!c.actual().contains_key(&key("api")), "not listed: gone");
    assert!(c.applied(obj("web", "u1", "9", 83)));
}

#[test]
fn the_services_whose_state_changed_are_told_once() {
    let mut c = listed(vec![obj("a", "u1", "1", 80), obj("b", "u2", "1", 80)]);
    let all: Vec<ObjectRef> = c.take_touched_services().into_iter().collect();
    assert_eq!(all, [key("a"), key("b")], "the first list");
    assert!(c.take_touched_services().is_empty(), "told once");

    // The same state again is no change; a new port is.
    c.applied(obj("a", "u1", "1", 80));
    c.applied(obj("b", "u2", "2", 81));
    let changed: Vec<ObjectRef> = c.take_touched_services().into_iter().collect();
    assert_eq!(changed, [key("b")]);

    c.wrote(key("c"), obj("c", "u3", "5", 80));
    c.deleted(&obj("a", "u1", "3", 80));
    let changed: Vec<ObjectRef> = c.take_touched_services().into_iter().collect();
    assert_eq!(changed, [key("a"), key("c")], "a write and a delete");

    // A relist that no longer holds b.
    relist(&mut c, Kind::Service, vec![obj("c", "u3", "5", 80)]);
    let changed: Vec<ObjectRef> = c.take_touched_services().into_iter().collect();
    assert_eq!(changed, [key("b")], "gone from the list");
}

#[test]
fn news_is_what_the_watch_says_that_we_did_not_write() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    c.wrote(key("web"), obj("web", "u1", "6", 81));
    // Our own write's echo is not news; a hand edit is, and so is a delete.
    assert!(!c.on_event(Kind::Service, Event::Apply(obj("web", "u1", "6", 81))));
    assert!(c.on_event(Kind::Service, Event::Apply(obj("web", "u1", "7", 82))));
    assert!(c.on_event(Kind::Service, Event::Delete(obj("web", "u1", "8", 82))));
    // A relist's start is not, its objects and its end are.
    assert!(!c.on_event(Kind::Service, Event::Init));
    assert!(c.on_event(Kind::Service, Event::InitApply(obj("api", "u2", "1", 80))));
    assert!(c.on_event(Kind::Service, Event::InitDone));
}

#[test]
fn a_relist_settles_the_echo_of_an_object_we_deleted() {
    let mut c = listed(vec![obj("web", "u1", "5", 80)]);
    c.removed(&key("web"), Some("u1".into()));
    // The list does not hold it: the DELETED event it stands for will not
    // come, and nothing of it is awaited any more.
    relist(&mut c, Kind::Service, Vec::new());
    assert!(c.echoes.is_empty() && c.watched.is_empty());
    assert!(
        c.applied(obj("web", "u1", "9", 80)),
        "the same uid again is news"
    );
}
