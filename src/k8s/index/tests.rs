use std::collections::BTreeMap;

use super::*;

/// Objects are `(name, value)`; an empty name has no key.
#[derive(Debug, Default)]
struct Names {
    held: BTreeMap<String, u32>,
    log: Vec<String>,
    listed: u32,
}

impl Index<(&'static str, u32)> for Names {
    type Key = String;

    fn key(&self, obj: &(&'static str, u32)) -> Option<String> {
        (!obj.0.is_empty()).then(|| obj.0.to_owned())
    }

    fn apply(&mut self, (name, value): (&'static str, u32)) {
        self.log.push(format!("apply {name}={value}"));
        self.held.insert(name.to_owned(), value);
    }

    fn delete(&mut self, key: &String, obj: Option<(&'static str, u32)>) {
        let how = if obj.is_some() { "deleted" } else { "gone" };
        self.log.push(format!("{how} {key}"));
        self.held.remove(key);
    }

    fn keys(&self) -> Vec<String> {
        self.held.keys().cloned().collect()
    }

    fn listed(&mut self) {
        self.listed += 1;
    }
}

fn run(events: Vec<Event<(&'static str, u32)>>) -> (Names, Vec<Outcome>, Relist<String>) {
    let mut index = Names::default();
    let mut relist = Relist::default();
    let outcomes = events
        .into_iter()
        .map(|e| relist.handle(&mut index, e))
        .collect();
    (index, outcomes, relist)
}

#[test]
fn a_first_list_applies_everything_and_reports_listed_at_its_end() {
    use Outcome::{Listed, Pending};
    let (index, outcomes, relist) = run(vec![
        Event::Init,
        Event::InitApply(("a", 1)),
        Event::InitApply(("b", 2)),
        Event::InitDone,
    ]);
    assert_eq!(outcomes, [Pending, Pending, Pending, Listed]);
    assert_eq!(index.log, ["apply a=1", "apply b=2"]);
    assert_eq!(index.listed, 1);
    assert!(relist.listed() && !relist.relisting());
}

#[test]
fn a_relist_deletes_only_what_it_did_not_bring_back() {
    let (index, _, _) = run(vec![
        Event::Init,
        Event::InitApply(("a", 1)),
        Event::InitApply(("b", 2)),
        Event::InitApply(("c", 3)),
        Event::InitDone,
        Event::Init,
        Event::InitApply(("b", 20)),
        Event::InitApply(("d", 4)),
        Event::InitDone,
    ]);
    assert_eq!(
        index.held,
        BTreeMap::from([("b".into(), 20), ("d".into(), 4)])
    );
    assert_eq!(
        index.log[3..],
        ["apply b=20", "apply d=4", "gone a", "gone c"]
    );
    assert_eq!(index.listed, 2);
}

#[test]
fn watch_events_apply_and_delete_with_the_object() {
    use Outcome::Changed;
    let (index, outcomes, _) = run(vec![
        Event::Apply(("a", 1)),
        Event::Apply(("a", 2)),
        Event::Delete(("a", 2)),
        Event::Delete(("zz", 9)),
    ]);
    assert_eq!(outcomes, [Changed; 4]);
    assert_eq!(
        index.log,
        ["apply a=1", "apply a=2", "deleted a", "deleted zz"]
    );
    assert!(index.held.is_empty());
}

#[test]
fn objects_without_a_key_are_skipped_everywhere() {
    let (index, _, _) = run(vec![
        Event::Init,
        Event::InitApply(("", 1)),
        Event::InitDone,
        Event::Apply(("", 2)),
        Event::Delete(("", 3)),
    ]);
    assert!(index.log.is_empty());
}

#[test]
fn ending_without_a_relist_empties_the_index() {
    let mut index = Names::default();
    let mut relist = Relist::default();
    relist.handle(&mut index, Event::Apply(("a", 1)));
    relist.end(&mut index);
    assert!(index.held.is_empty());
    assert_eq!(index.log, ["apply a=1", "gone a"]);
    assert!(relist.listed());
}

/// An index that tells listed objects from watched ones.
#[derive(Debug, Default)]
struct Listing(Vec<String>);

impl Index<(&'static str, u32)> for Listing {
    type Key = String;

    fn key(&self, obj: &(&'static str, u32)) -> Option<String> {
        Some(obj.0.to_owned())
    }

    fn apply(&mut self, (name, _): (&'static str, u32)) {
        self.0.push(format!("watched {name}"));
    }

    fn apply_listed(&mut self, (name, _): (&'static str, u32)) {
        self.0.push(format!("listed {name}"));
    }

    fn delete(&mut self, _: &String, _: Option<(&'static str, u32)>) {}

    fn keys(&self) -> Vec<String> {
        Vec::new()
    }
}

#[test]
fn a_relist_applies_its_objects_as_listed_and_the_watch_as_watched() {
    let mut index = Listing::default();
    let mut relist = Relist::default();
    for e in [
        Event::Init,
        Event::InitApply(("a", 1)),
        Event::InitDone,
        Event::Apply(("b", 2)),
    ] {
        relist.handle(&mut index, e);
    }
    assert_eq!(index.0, ["listed a", "watched b"]);
}

/// Holds only objects with an even value, as the source state holds only
/// exported services' slices of every slice it is shown.
#[derive(Debug, Default)]
struct Evens(Names);

impl Index<(&'static str, u32)> for Evens {
    type Key = String;

    fn key(&self, obj: &(&'static str, u32)) -> Option<String> {
        self.0.key(obj)
    }

    fn apply(&mut self, obj: (&'static str, u32)) {
        if obj.1.is_multiple_of(2) {
            self.0.apply(obj);
        } else {
            self.0.delete(&obj.0.to_owned(), Some(obj));
        }
    }

    fn delete(&mut self, key: &String, obj: Option<(&'static str, u32)>) {
        self.0.delete(key, obj);
    }

    fn keys(&self) -> Vec<String> {
        self.0.keys()
    }

    fn holds(&self, key: &String) -> bool {
        self.0.held.contains_key(key)
    }
}

#[test]
fn a_relist_remembers_only_the_keys_the_index_holds() {
    let mut index = Evens::default();
    let mut relist = Relist::default();
    for e in [
        Event::Init,
        Event::InitApply(("a", 2)),
        Event::InitDone,
        Event::Init,
        Event::InitApply(("a", 4)),
        Event::InitApply(("b", 1)),
        Event::InitApply(("c", 3)),
        Event::InitApply(("d", 6)),
    ] {
        relist.handle(&mut index, e);
    }
    assert_eq!(relist.remembered(), 2, "a and d, not b and c");
    relist.handle(&mut index, Event::InitDone);
    assert_eq!(
        index.0.held,
        BTreeMap::from([("a".into(), 4), ("d".into(), 6)])
    );
}
