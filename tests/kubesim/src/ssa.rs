//! Server-side apply and `metadata.managedFields` bookkeeping, modelled on kube-apiserver's
//! field manager and structured-merge-diff (SMD) v6.
//!
//! This module owns: merging an applied configuration into the live object, pruning fields an
//! applier stopped applying, detecting and reporting conflicts between field managers, and
//! recording which manager owns which fields (FieldsV1 `f:`/`k:`/`v:`/`i:` sets) for apply and
//! for every other kind of write.
//!
//! It must not do anything else: no I/O, no clock (the caller passes the timestamp string), no
//! defaulting, no validation beyond what SMD itself rejects, no version or kind checks, no
//! resetting of server-owned fields (status on the main resource, spec on `/status`, uid,
//! creationTimestamp, resourceVersion): the caller does those, as kube-apiserver's handlers and
//! registry strategies do around its field manager.
//!
//! There is no OpenAPI schema here. Every JSON object is treated as a struct with named fields
//! unless [`Schema::atomic_map`] says otherwise, and every list is atomic unless [`Schema::list`]
//! says otherwise. One consequence: a map whose keys are not declared fields (a CRD's
//! `additionalProperties` of objects) is recorded as if its keys were struct fields, so such a key
//! holding a non-empty object gets no `".":{}` marker in an Apply entry where kube-apiserver would
//! write one.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::kubemsg::go_quote;

/// How a list or map at a path merges (structured-merge-diff "list-type"/"map-type").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListType {
    /// The list is one value: an applier sets all of it, and owns it as a whole.
    Atomic,
    /// A set of scalars (`x-kubernetes-list-type: set`): items are owned one by one (`v:`).
    Set,
    /// An associative list keyed by these fields (`x-kubernetes-list-type: map`): items are
    /// owned one by one (`k:`) and merged field by field.
    Map(Vec<String>),
}

/// Per-kind merge semantics: which lists are associative/set, which maps are atomic.
///
/// Paths are dotted field paths from the object root with no list indices, e.g. `"spec.ports"`,
/// `"metadata.finalizers"`; fields of list items continue the list's path
/// (`"spec.template.spec.containers.ports"`). Lists not named are [`ListType::Atomic`]; maps (JSON
/// objects) not named are granular (merged per key).
#[derive(Debug, Clone, Default)]
pub(crate) struct Schema {
    lists: HashMap<String, ListType>,
    atomic_maps: HashSet<String>,
    implicit_objects: Vec<String>,
}

impl Schema {
    /// An empty schema: every list atomic, every map granular.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Declares how the list at `path` merges.
    pub(crate) fn list(mut self, path: &str, t: ListType) -> Self {
        self.lists.insert(path.to_owned(), t);
        self
    }

    /// Declares the map at `path` atomic (`x-kubernetes-map-type: atomic`): it is replaced and
    /// owned as a whole.
    pub(crate) fn atomic_map(mut self, path: &str) -> Self {
        self.atomic_maps.insert(path.to_owned());
        self
    }

    /// Declares that the object at `path` always exists, even when empty, because the Go type
    /// behind it is a non-pointer struct (`spec` of a Service, `status.loadBalancer`).
    ///
    /// Only non-apply writes notice: kube-apiserver compares against a zero-valued object on
    /// create, so such a struct is never "added" and its managedFields entry gets no `".":{}`,
    /// whereas a map or pointer that appears (labels, ports) does.
    pub(crate) fn implicit_object(mut self, path: &str) -> Self {
        self.implicit_objects.push(path.to_owned());
        self
    }

    /// The semantics kubesim serves, by API group and kind. Always includes the metadata rules:
    /// `metadata.finalizers` = Set, `metadata.ownerReferences` = Map(["uid"]), labels and
    /// annotations granular maps.
    ///
    /// Service (group ""): `spec.ports` = Map(["port","protocol"]), `spec.selector` atomic map,
    /// `status.conditions` = Map(["type"]); everything else atomic lists. EndpointSlice
    /// ("discovery.k8s.io"): endpoints and ports atomic. Link ("multicluster.linkerd.io"): all
    /// lists atomic, matchLabels maps granular. Namespace: `status.conditions` = Map(["type"]).
    /// The MCS CRDs ("multicluster.x-k8s.io") as their `x-kubernetes-list-type` markers say:
    /// `status.conditions` = Map(["type"]) on both kinds, ServiceImport `status.clusters` =
    /// Map(["cluster"]), `spec.ports` atomic (marked), `spec.ips` and `spec.ipFamilies` atomic
    /// (unmarked), ServiceExport's exported label and annotation maps granular.
    /// Secret, ConfigMap, Event, Lease and anything else: the metadata rules only. Built-in kinds
    /// also declare their non-pointer structs (see [`Schema::implicit_object`]).
    pub(crate) fn for_kind(group: &str, kind: &str) -> Self {
        let base = Schema::new()
            .list("metadata.finalizers", ListType::Set)
            .list(
                "metadata.ownerReferences",
                ListType::Map(vec!["uid".to_owned()]),
            );
        let by_type = || ListType::Map(vec!["type".to_owned()]);
        match (group, kind) {
            ("", "Service") => base
                .list(
                    "spec.ports",
                    ListType::Map(vec!["port".to_owned(), "protocol".to_owned()]),
                )
                .atomic_map("spec.selector")
                .list("status.conditions", by_type())
                .implicit_object("spec")
                .implicit_object("status")
                .implicit_object("status.loadBalancer"),
            ("discovery.k8s.io", "EndpointSlice") => base
                .list("endpoints", ListType::Atomic)
                .list("ports", ListType::Atomic),
            ("", "Namespace") => base
                .list("status.conditions", by_type())
                .implicit_object("spec")
                .implicit_object("status"),
            ("coordination.k8s.io", "Lease") => base.implicit_object("spec"),
            ("", "Event") => base
                .implicit_object("involvedObject")
                .implicit_object("source"),
            ("events.k8s.io", "Event") => base
                .implicit_object("regarding")
                .implicit_object("deprecatedSource"),
            ("multicluster.x-k8s.io", "ServiceExport") => base.list("status.conditions", by_type()),
            ("multicluster.x-k8s.io", "ServiceImport") => base
                .list("spec.ports", ListType::Atomic)
                .list("spec.ips", ListType::Atomic)
                .list("spec.ipFamilies", ListType::Atomic)
                .list("status.clusters", ListType::Map(vec!["cluster".to_owned()]))
                .list("status.conditions", by_type()),
            _ => base,
        }
    }

    fn list_type(&self, path: &str) -> &ListType {
        self.lists.get(path).unwrap_or(&ListType::Atomic)
    }

    fn is_atomic_map(&self, path: &str) -> bool {
        self.atomic_maps.contains(path)
    }
}

/// A field-manager conflict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conflict {
    /// The manager that owns the field (its name, without operation or version).
    pub manager: String,
    /// The API version that manager's entry was recorded at.
    pub api_version: String,
    /// The field, as kube-apiserver prints it, e.g. `.spec.ports[port=80,protocol="TCP"].targetPort`.
    pub field: String,
    /// The owner as kube's messages name it: `"ctrl"` for an applier, `"ctrl" using v1` for an
    /// updater, with ` with subresource "status"` when it wrote through one.
    pub owner: String,
}

/// Why an apply or update could not be recorded.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum SsaError {
    /// The apply changes fields other managers own. `message` is formatted exactly like
    /// kube-apiserver's, e.g. `Apply failed with 1 conflict: conflict with "kubectl" using v1: .spec.type`
    /// or, for several, `Apply failed with 2 conflicts: conflicts with "mgr" using v1:\n- .spec.a\n- .spec.b`
    /// (managers sorted, each followed by its fields; appliers print without `using`).
    #[error("{message}")]
    Conflicts {
        /// The whole message, for the Status body.
        message: String,
        /// One entry per conflicting field, grouped by manager in message order.
        conflicts: Vec<Conflict>,
    },
    /// The applied configuration or a stored managedFields entry is malformed (an associative
    /// list item lacks a key field, duplicate keys in an applied associative list, managedFields
    /// in an applied configuration, fieldsV1 not an object, ...).
    #[error("{0}")]
    Invalid(String),
}

// ---------------------------------------------------------------------------------------------
// Public operations
// ---------------------------------------------------------------------------------------------

/// Server-side apply of `config` (the full applied object, as the client sent it, JSON) by
/// `manager`. `live` is the stored object (None when apply creates it). Returns the merged object
/// with `metadata.managedFields` updated.
///
/// The manager's `operation: Apply` entry for `subresource` holds exactly the fields in `config`
/// and is stamped with `api_version` and `now`. Like kube-apiserver, an Apply entry is identified
/// by manager and subresource only, so re-applying at another version replaces it. Fields it
/// applied before and no longer applies are removed from the object unless another manager owns
/// them. Fields owned by another manager whose value would change are conflicts unless `force`,
/// which moves them to `manager`; applying the value a field already has shares ownership.
/// Entries left with no fields are dropped; entries are sorted like kube-apiserver's (Apply
/// before Update, then by time, manager, apiVersion, subresource).
///
/// The timestamp is only written when the object changes: re-applying the same configuration
/// leaves managedFields byte-identical, and a manager whose first apply changes nothing gets an
/// entry without `time` (kube-apiserver does the same, kubernetes/kubernetes#127938).
///
/// An explicit `null` in `config` does not mean "not mine": as in SMD, the applier owns the
/// field, other owners of a value there conflict, and the field is absent from the result (the
/// typed decoding in kube-apiserver drops nulls). A `null` for a granular map or list only
/// claims the field; it does not delete the entries others own.
///
/// Never tracked: `apiVersion`, `kind` and `metadata.{name, namespace, uid, resourceVersion,
/// generation, creationTimestamp, deletionTimestamp, deletionGracePeriodSeconds, managedFields,
/// selfLink, clusterName}` (`metadata.generateName` is tracked, as in kube-apiserver).
///
/// The caller checks apiVersion and kind, strips `status` from main-resource applies (and
/// everything but status from `/status` applies), applies defaults to associative-list keys
/// (Service port protocol) before calling, and afterwards restores server-owned metadata (uid,
/// creationTimestamp, resourceVersion) from `live`, which the merge takes from `config` if sent.
// The signature is the contract kubesim's handlers are written against.
#[allow(clippy::too_many_arguments)]
pub(crate) fn apply(
    live: Option<&Value>,
    config: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    subresource: Option<&str>,
    now: &str,
    schema: &Schema,
) -> Result<Value, SsaError> {
    check_config(config)?;
    let empty = Value::Object(Map::new());
    let live_full = live.unwrap_or(&empty);
    let mut managed = decode_managed_fields(live_full.pointer("/metadata/managedFields"))
        .map_err(|e| SsaError::Invalid(format!("failed to decode managed fields: {e}")))?;
    let live_obj = typed_live_object(config, live_full, schema)?;

    let merged = merge(Some(&live_obj), Some(config), "", schema);
    let applied = to_field_set(config, schema);
    let (me, last_set) = claim_applied(&mut managed, manager, subresource, api_version, applied);

    let pruned = prune(&merged, &managed, &last_set, schema);
    let cmp = compare_objects(&live_obj, &pruned, schema);
    take_changed_fields(&mut managed, me, &cmp, force)?;
    managed[me].set = managed[me].set.difference(&strip_set());
    // SMD reports "no change" by comparing values, so the timestamp only moves on real changes.
    if !value_eq(&live_obj, &pruned) {
        managed[me].time = Some(now.to_owned());
    }
    managed.retain(|e| !e.set.is_empty());

    let mut out = pruned;
    strip_nulls(&mut out);
    set_managed_fields(&mut out, &managed);
    Ok(keep_timestamps_on_noop(live, out))
}

/// Refuses what an applied configuration cannot be: other than a JSON object, or carrying
/// managedFields.
fn check_config(config: &Value) -> Result<(), SsaError> {
    let Value::Object(_) = config else {
        return Err(SsaError::Invalid(
            "the applied configuration must be a JSON object".into(),
        ));
    };
    if matches!(
        config.pointer("/metadata/managedFields"),
        Some(Value::Array(_))
    ) {
        return Err(SsaError::Invalid(
            "metadata.managedFields must be nil".into(),
        ));
    }
    Ok(())
}

/// Checks `config` and the live object against `schema`, as SMD does when it makes typed
/// objects of them, and answers the live object without its managedFields.
fn typed_live_object(
    config: &Value,
    live_full: &Value,
    schema: &Schema,
) -> Result<Value, SsaError> {
    let errs = validate(config, schema, false);
    if !errs.is_empty() {
        return Err(SsaError::Invalid(format!(
            "failed to create typed patch object ({}): {}",
            object_gvknn(config),
            format_validation(&errs)
        )));
    }
    let live_obj = without_managed_fields(live_full);
    let errs = validate(&live_obj, schema, true);
    if !errs.is_empty() {
        return Err(SsaError::Invalid(format!(
            "failed to create typed live object ({}): {}",
            object_gvknn(&live_obj),
            format_validation(&errs)
        )));
    }
    Ok(live_obj)
}

/// Makes `applied` the field set of `manager`'s Apply entry for `subresource` (creating the
/// entry if it has none), at `api_version`. Answers the entry's index and the set it had
/// before (empty for a new entry), which pruning needs.
fn claim_applied(
    managed: &mut Vec<Entry>,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    applied: Set,
) -> (usize, Set) {
    let key = EntryKey {
        manager: manager_name(manager),
        operation: Operation::Apply,
        api_version: String::new(),
        subresource: subresource.unwrap_or_default().to_owned(),
    };
    let previous = managed.iter().position(|e| e.key() == key);
    let last_set = previous.map(|i| managed[i].set.clone()).unwrap_or_default();
    let me = match previous {
        Some(i) => {
            managed[i].set = applied;
            managed[i].api_version = api_version.to_owned();
            i
        }
        None => {
            managed.push(Entry {
                manager: key.manager.clone(),
                operation: Operation::Apply,
                api_version: api_version.to_owned(),
                subresource: key.subresource.clone(),
                time: None,
                set: applied,
            });
            managed.len() - 1
        }
    };
    (me, last_set)
}

/// Settles the other managers' ownership after the apply by entry `me` changed what `cmp`
/// says: fields it modified or added that others own are conflicts (an error unless `force`,
/// when they leave the other owners), and removed fields leave every other entry.
fn take_changed_fields(
    managed: &mut [Entry],
    me: usize,
    cmp: &Comparison,
    force: bool,
) -> Result<(), SsaError> {
    let changed = cmp.modified.union(&cmp.added);
    let mut conflicts: Vec<(String, &Entry, Set)> = Vec::new();
    for (i, entry) in managed.iter().enumerate() {
        if i == me {
            continue;
        }
        let clash = entry.set.intersection(&changed);
        if !clash.is_empty() {
            conflicts.push((entry.key().identifier(), entry, clash));
        }
    }
    if !force && !conflicts.is_empty() {
        return Err(conflict_error(conflicts));
    }
    let clashes: HashMap<String, Set> = conflicts.into_iter().map(|(id, _, s)| (id, s)).collect();
    for (i, entry) in managed.iter_mut().enumerate() {
        if i == me {
            continue;
        }
        if let Some(clash) = clashes.get(&entry.key().identifier()) {
            entry.set = entry.set.difference(clash);
        }
        entry.set = entry.set.difference(&cmp.removed);
    }
    Ok(())
}

/// Records a non-apply write (create, update/PUT, merge/JSON/strategic patch) by `manager`.
///
/// Compares `old` (None on create) with `new` (the object about to be stored) and returns `new`
/// with managedFields updated: every field added or changed becomes owned by `manager` with
/// `operation: Update` (merged into its existing Update entry for this api_version and
/// subresource, whose time becomes `now`) and is taken from every other entry, including the
/// same manager's Apply entry; removed fields leave every entry. On create the whole object
/// (minus untracked fields) is owned. Containers that appear (a labels map, a ports list, a list
/// item) are owned themselves too, which shows as `".":{}`. Entries with no fields left are
/// dropped, and at most ten Update entries are kept: the oldest are folded into
/// `ancient-changes`, as kube-apiserver does.
///
/// Which managedFields are the starting point, as in kube-apiserver:
/// - on a subresource: always `old`'s;
/// - `metadata.managedFields` in `new` is `[]` or `[{}]`: none (the client clears them);
/// - a non-empty, well-formed list in `new`: that one (clients may edit managedFields; a patched
///   object still carrying `old`'s is the common case);
/// - absent, null or malformed in `new`: `old`'s (malformed there too: none).
///
/// Pass `new` before bumping resourceVersion or generation: when nothing else changed the old
/// managedFields, timestamps included, are kept. If `old` or `new` is not a valid object for
/// `schema` (an associative list item without its key), the write is not tracked and `old`'s
/// managedFields are kept, like kube-apiserver's `UpdateNoErrors`. Only a `new` that is not a
/// JSON object is an error.
pub(crate) fn update(
    old: Option<&Value>,
    new: &Value,
    manager: &str,
    api_version: &str,
    subresource: Option<&str>,
    now: &str,
    schema: &Schema,
) -> Result<Value, SsaError> {
    let Value::Object(_) = new else {
        return Err(SsaError::Invalid("the object must be a JSON object".into()));
    };
    let empty = Value::Object(Map::new());
    let old_full = old.unwrap_or(&empty);
    let from_old =
        || decode_managed_fields(old_full.pointer("/metadata/managedFields")).unwrap_or_default();
    let new_mf = new.pointer("/metadata/managedFields");
    let mut managed = if subresource.is_some() {
        from_old()
    } else if is_reset(new_mf) {
        Vec::new()
    } else {
        match decode_managed_fields(new_mf) {
            Ok(entries) if !entries.is_empty() => entries,
            _ => from_old(),
        }
    };

    let old_obj = without_managed_fields(old_full);
    let new_obj = without_managed_fields(new);
    if !validate(&old_obj, schema, true).is_empty() || !validate(&new_obj, schema, true).is_empty()
    {
        let mut out = new_obj;
        match old_full.pointer("/metadata/managedFields") {
            Some(mf) if !mf.is_null() => {
                if let Some(Value::Object(meta)) = out.get_mut("metadata") {
                    meta.insert("managedFields".into(), mf.clone());
                }
            }
            _ => {}
        }
        return Ok(out);
    }

    let cmp = compare_objects(
        &with_implicit(&old_obj, schema),
        &with_implicit(&new_obj, schema),
        schema,
    );
    let changed = cmp.modified.union(&cmp.added);
    for entry in &mut managed {
        entry.set = entry.set.difference(&changed).difference(&cmp.removed);
    }
    managed.retain(|e| !e.set.is_empty());
    let current = changed.difference(&cmp.removed).difference(&strip_set());
    if !current.is_empty() {
        let key = EntryKey {
            manager: manager_name(manager),
            operation: Operation::Update,
            api_version: api_version.to_owned(),
            subresource: subresource.unwrap_or_default().to_owned(),
        };
        match managed.iter_mut().find(|e| e.key() == key) {
            Some(entry) => {
                entry.set = current.union(&entry.set);
                entry.time = Some(now.to_owned());
            }
            None => managed.push(Entry {
                manager: key.manager,
                operation: Operation::Update,
                api_version: key.api_version,
                subresource: key.subresource,
                time: Some(now.to_owned()),
                set: current,
            }),
        }
    }
    cap_update_managers(&mut managed);

    let mut out = new_obj;
    set_managed_fields(&mut out, &managed);
    Ok(keep_timestamps_on_noop(old, out))
}

// ---------------------------------------------------------------------------------------------
// Managers and managedFields entries
// ---------------------------------------------------------------------------------------------

/// kube-apiserver keeps this many Update entries before folding the oldest together.
const MAX_UPDATE_MANAGERS: usize = 10;
const ANCIENT_CHANGES: &str = "ancient-changes";

/// Fields that are never recorded: identity and server-owned metadata.
const UNTRACKED_METADATA: [&str; 11] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "clusterName",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// What identifies an entry: appliers are one entry whatever version they apply at, updaters
/// get one entry per version.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EntryKey {
    manager: String,
    operation: Operation,
    api_version: String,
    subresource: String,
}

impl EntryKey {
    /// kube-apiserver's manager identifier: the entry's identifying fields as Go's encoding/json
    /// writes them. Conflict messages are sorted by it.
    fn identifier(&self) -> String {
        let mut s = String::from("{");
        if !self.manager.is_empty() {
            let _ = write!(s, "\"manager\":{},", go_json_string(&self.manager));
        }
        let _ = write!(s, "\"operation\":\"{}\"", self.operation.as_str());
        if !self.api_version.is_empty() {
            let _ = write!(s, ",\"apiVersion\":{}", go_json_string(&self.api_version));
        }
        if !self.subresource.is_empty() {
            let _ = write!(s, ",\"subresource\":{}", go_json_string(&self.subresource));
        }
        s.push('}');
        s
    }

    /// How conflict messages name the manager.
    fn describe(&self) -> String {
        let mut s = go_quote(&self.manager);
        if !self.subresource.is_empty() {
            let _ = write!(s, " with subresource {}", go_quote(&self.subresource));
        }
        if self.operation == Operation::Update {
            let _ = write!(s, " using {}", self.api_version);
        }
        s
    }
}

#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: Operation,
    api_version: String,
    subresource: String,
    time: Option<String>,
    set: Set,
}

impl Entry {
    fn key(&self) -> EntryKey {
        EntryKey {
            manager: self.manager.clone(),
            operation: self.operation,
            api_version: match self.operation {
                Operation::Apply => String::new(),
                Operation::Update => self.api_version.clone(),
            },
            subresource: self.subresource.clone(),
        }
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if !self.manager.is_empty() {
            m.insert("manager".into(), Value::String(self.manager.clone()));
        }
        m.insert(
            "operation".into(),
            Value::String(self.operation.as_str().into()),
        );
        m.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        if let Some(t) = &self.time {
            m.insert("time".into(), Value::String(t.clone()));
        }
        m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
        m.insert("fieldsV1".into(), self.set.to_fields_v1());
        if !self.subresource.is_empty() {
            m.insert(
                "subresource".into(),
                Value::String(self.subresource.clone()),
            );
        }
        Value::Object(m)
    }
}

fn manager_name(manager: &str) -> String {
    if manager.is_empty() {
        "unknown".to_owned()
    } else {
        manager.to_owned()
    }
}

/// `[]` and `[{}]` are how clients ask to clear managedFields; absent or null means "keep".
fn is_reset(mf: Option<&Value>) -> bool {
    match mf {
        Some(Value::Array(items)) => match items.as_slice() {
            [] => true,
            [Value::Object(only)] => only.is_empty(),
            _ => false,
        },
        _ => false,
    }
}

fn decode_managed_fields(mf: Option<&Value>) -> Result<Vec<Entry>, String> {
    let items = match mf {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err("managedFields must be a list".into()),
    };
    let mut entries: Vec<Entry> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let entry = decode_entry(item).map_err(|e| format!("managed fields entry {i}: {e}"))?;
        // Entries with the same identity collapse, the later one winning, as in the Go map.
        let key = entry.key();
        match entries.iter_mut().find(|e| e.key() == key) {
            Some(existing) => *existing = entry,
            None => entries.push(entry),
        }
    }
    Ok(entries)
}

fn decode_entry(item: &Value) -> Result<Entry, String> {
    let Value::Object(m) = item else {
        return Err("entry must be an object".into());
    };
    let string = |field: &str| -> Result<String, String> {
        match m.get(field) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("{field} must be a string")),
        }
    };
    let operation = match string("operation")?.as_str() {
        "Apply" => Operation::Apply,
        "Update" => Operation::Update,
        _ => return Err("operation must be `Apply` or `Update`".into()),
    };
    let api_version = string("apiVersion")?;
    if api_version.is_empty() {
        return Err("apiVersion must not be empty".into());
    }
    match string("fieldsType")?.as_str() {
        "FieldsV1" => {}
        "" => return Err("missing fieldsType".into()),
        other => return Err(format!("invalid fieldsType {}", go_quote(other))),
    }
    let set = match m.get("fieldsV1") {
        None | Some(Value::Null) => Set::default(),
        Some(Value::Object(fields)) => {
            Set::from_fields_v1(fields).map_err(|e| format!("error decoding set: {e}"))?
        }
        Some(_) => return Err("error decoding set: fieldsV1 must be a JSON object".into()),
    };
    let time = string("time")?;
    Ok(Entry {
        manager: string("manager")?,
        operation,
        api_version,
        subresource: string("subresource")?,
        time: (!time.is_empty()).then_some(time),
        set,
    })
}

fn set_managed_fields(obj: &mut Value, managed: &[Entry]) {
    let Value::Object(root) = obj else { return };
    let mut sorted: Vec<&Entry> = managed.iter().collect();
    sorted.sort_by(|a, b| {
        a.operation
            .as_str()
            .cmp(b.operation.as_str())
            .then_with(|| time_seconds(a.time.as_deref()).cmp(&time_seconds(b.time.as_deref())))
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    if sorted.is_empty() {
        if let Some(Value::Object(meta)) = root.get_mut("metadata") {
            meta.remove("managedFields");
        }
        return;
    }
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(
            "managedFields".into(),
            Value::Array(sorted.iter().map(|e| e.to_json()).collect()),
        );
    }
}

/// Folds the oldest Update entries into one `ancient-changes` entry per version until at most
/// [`MAX_UPDATE_MANAGERS`] remain, as kube-apiserver's capManagersManager does.
fn cap_update_managers(managed: &mut Vec<Entry>) {
    let mut updaters: Vec<EntryKey> = managed
        .iter()
        .filter(|e| e.operation == Operation::Update)
        .map(Entry::key)
        .collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    let time_of = |managed: &[Entry], k: &EntryKey| {
        managed
            .iter()
            .find(|e| e.key() == *k)
            .map(|e| time_seconds(e.time.as_deref()))
            .unwrap_or(0)
    };
    updaters.sort_by(|a, b| {
        time_of(managed, a)
            .cmp(&time_of(managed, b))
            .then_with(|| a.identifier().cmp(&b.identifier()))
    });
    let mut first_by_version: HashMap<String, EntryKey> = HashMap::new();
    let mut remaining = updaters.len();
    for key in updaters {
        if remaining <= MAX_UPDATE_MANAGERS {
            break;
        }
        let Some(pos) = managed.iter().position(|e| e.key() == key) else {
            continue;
        };
        let version = managed[pos].api_version.clone();
        let bucket = EntryKey {
            manager: ANCIENT_CHANGES.to_owned(),
            operation: Operation::Update,
            api_version: version.clone(),
            subresource: String::new(),
        };
        let Some(first) = first_by_version.get(&version).cloned() else {
            first_by_version.insert(version, key);
            continue;
        };
        // kube-apiserver would fold an existing bucket into itself and then delete it.
        if key == bucket {
            continue;
        }
        if !managed.iter().any(|e| e.key() == bucket)
            && let Some(f) = managed.iter_mut().find(|e| e.key() == first)
        {
            f.manager = ANCIENT_CHANGES.to_owned();
            f.subresource = String::new();
        }
        let Some(pos) = managed.iter().position(|e| e.key() == key) else {
            continue;
        };
        let folded = managed.remove(pos);
        if let Some(b) = managed.iter_mut().find(|e| e.key() == bucket) {
            b.set = folded.set.union(&b.set);
            // The bucket takes the time of the most recent update folded into it.
            b.time = folded.time;
        }
        remaining -= 1;
    }
}

/// Reverts timestamp-only changes to managedFields when nothing else changed, as
/// kube-apiserver's IgnoreManagedFieldsTimestampsTransformer does to avoid no-op writes.
fn keep_timestamps_on_noop(old: Option<&Value>, mut new: Value) -> Value {
    let Some(old) = old else { return new };
    if without_managed_fields(old) != without_managed_fields(&new) {
        return new;
    }
    let untimed = |v: &Value| -> Vec<Value> {
        match v.pointer("/metadata/managedFields") {
            Some(Value::Array(items)) => items
                .iter()
                .map(|e| {
                    let mut e = e.clone();
                    if let Value::Object(m) = &mut e {
                        m.remove("time");
                    }
                    e
                })
                .collect(),
            _ => Vec::new(),
        }
    };
    if untimed(old) == untimed(&new)
        && let (Some(mf), Some(Value::Object(meta))) = (
            old.pointer("/metadata/managedFields"),
            new.get_mut("metadata"),
        )
    {
        meta.insert("managedFields".into(), mf.clone());
    }
    new
}

fn conflict_error(mut conflicts: Vec<(String, &Entry, Set)>) -> SsaError {
    conflicts.sort_by(|a, b| a.0.cmp(&b.0));
    let mut list = Vec::new();
    let mut groups = Vec::new();
    for (_, entry, set) in &conflicts {
        let key = entry.key();
        let paths: Vec<String> = set.paths().iter().map(|p| path_string(p)).collect();
        for p in &paths {
            list.push(Conflict {
                manager: entry.manager.clone(),
                api_version: entry.api_version.clone(),
                field: p.clone(),
                owner: key.describe(),
            });
        }
        groups.push((key.describe(), paths));
    }
    let message = if let ([only], [(who, _)]) = (list.as_slice(), groups.as_slice()) {
        format!(
            "Apply failed with 1 conflict: conflict with {who}: {}",
            only.field
        )
    } else {
        let body: Vec<String> = groups
            .iter()
            .map(|(who, paths)| {
                let mut s = format!("conflicts with {who}:");
                for p in paths {
                    let _ = write!(s, "\n- {p}");
                }
                s
            })
            .collect();
        format!(
            "Apply failed with {} conflicts: {}",
            list.len(),
            body.join("\n")
        )
    };
    SsaError::Conflicts {
        message,
        conflicts: list,
    }
}

/// `apiVersion`, `kind` and identity/server metadata, removed from every recorded set.
fn strip_set() -> Set {
    let mut s = Set::default();
    s.insert(&[Pe::Field("apiVersion".into())]);
    s.insert(&[Pe::Field("kind".into())]);
    s.insert(&[Pe::Field("metadata".into())]);
    for f in UNTRACKED_METADATA {
        s.insert(&[Pe::Field("metadata".into()), Pe::Field(f.into())]);
    }
    s
}

/// kube-apiserver's object description in typed-conversion errors: `ns/name; group/version, Kind=K`.
fn object_gvknn(obj: &Value) -> String {
    let meta = |f: &str| {
        obj.pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, version) = match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    format!(
        "{}/{}; {group}/{version}, Kind={kind}",
        meta("namespace"),
        meta("name")
    )
}

fn without_managed_fields(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(Value::Object(meta)) = v.get_mut("metadata") {
        meta.remove("managedFields");
    }
    v
}

/// The object as kube-apiserver's typed comparison sees it: non-pointer structs always exist.
fn with_implicit(v: &Value, schema: &Schema) -> Value {
    let mut v = v.clone();
    for path in &schema.implicit_objects {
        let mut cur = &mut v;
        for part in path.split('.') {
            let Value::Object(m) = cur else { break };
            let slot = m.entry(part.to_owned()).or_insert(Value::Null);
            if slot.is_null() {
                *slot = Value::Object(Map::new());
            }
            cur = slot;
        }
    }
    v
}

/// Drops `null` object members: kube-apiserver decodes the merged object into its Go type (or
/// prunes a custom resource), and a null never survives that.
fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, c| !c.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Path elements and field sets
// ---------------------------------------------------------------------------------------------

/// One step of a field path, ordered as SMD orders them.
#[derive(Debug, Clone)]
enum Pe {
    Field(String),
    /// Key fields of an associative-list item, sorted by name.
    Key(Vec<(String, Value)>),
    Value(Value),
    Index(usize),
}

impl Pe {
    fn rank(&self) -> u8 {
        match self {
            Pe::Field(_) => 0,
            Pe::Key(_) => 1,
            Pe::Value(_) => 2,
            Pe::Index(_) => 3,
        }
    }

    /// The `f:`/`k:`/`v:`/`i:` form used as a FieldsV1 key.
    fn serialize(&self) -> String {
        match self {
            Pe::Field(name) => format!("f:{name}"),
            Pe::Key(fields) => {
                let body: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{}:{}", go_json_string(k), go_json(v)))
                    .collect();
                format!("k:{{{}}}", body.join(","))
            }
            Pe::Value(v) => format!("v:{}", go_json(v)),
            Pe::Index(i) => format!("i:{i}"),
        }
    }

    /// Ok(None) for element types a later SMD may define: they are dropped, not rejected.
    fn deserialize(s: &str) -> Result<Option<Pe>, String> {
        let bytes = s.as_bytes();
        if bytes.len() < 2 {
            return Err(format!("key must be 2 characters long: {s}"));
        }
        if bytes[1] != b':' {
            return Err(format!("missing colon: {s}"));
        }
        let body = &s[2..];
        match bytes[0] {
            b'f' => Ok(Some(Pe::Field(body.to_owned()))),
            b'v' => serde_json::from_str(body)
                .map(|v| Some(Pe::Value(v)))
                .map_err(|e| format!("{s}: {e}")),
            b'k' => match serde_json::from_str::<Value>(body) {
                Ok(Value::Object(m)) => Ok(Some(Pe::Key(m.into_iter().collect()))),
                Ok(_) => Err(format!("{s}: key must be a JSON object")),
                Err(e) => Err(format!("{s}: {e}")),
            },
            b'i' => body
                .parse()
                .map(|i| Some(Pe::Index(i)))
                .map_err(|e| format!("{s}: {e}")),
            _ => Ok(None),
        }
    }
}

/// kube-apiserver's path notation: `.spec.ports[port=80,protocol="TCP"]`, `[="x"]`, `[3]`.
impl std::fmt::Display for Pe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pe::Field(name) => write!(f, ".{name}"),
            Pe::Key(fields) => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{k}={}", go_to_string(v)))
                    .collect();
                write!(f, "[{}]", parts.join(","))
            }
            Pe::Value(v) => write!(f, "[={}]", go_to_string(v)),
            Pe::Index(i) => write!(f, "[{i}]"),
        }
    }
}

impl Ord for Pe {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Pe::Field(a), Pe::Field(b)) => a.cmp(b),
            (Pe::Key(a), Pe::Key(b)) => cmp_field_lists(a, b),
            (Pe::Value(a), Pe::Value(b)) => cmp_values(a, b),
            (Pe::Index(a), Pe::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for Pe {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Pe {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Pe {}

fn path_string(path: &[Pe]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of field paths, as SMD's fieldpath.Set: a path is in the set when its last element is
/// a member of the node its prefix leads to. Nodes without members below them are never kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Set {
    members: BTreeSet<Pe>,
    children: BTreeMap<Pe, Set>,
}

impl Set {
    fn insert(&mut self, path: &[Pe]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(Set::is_empty)
    }

    fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    fn difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            let rest = match other.children.get(pe) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                children.insert(pe.clone(), rest);
            }
        }
        Set { members, children }
    }

    fn intersection(&self, other: &Set) -> Set {
        let members = self.members.intersection(&other.members).cloned().collect();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    children.insert(pe.clone(), both);
                }
            }
        }
        Set { members, children }
    }

    /// SMD's EnsureNamedFieldsAreMembers for a schema where every object key is a named field:
    /// pruning then removes a struct whose fields were all abandoned instead of leaving `{}`.
    fn with_named_fields_as_members(&self) -> Set {
        let mut members = self.members.clone();
        let mut children = BTreeMap::new();
        for (pe, child) in &self.children {
            if matches!(pe, Pe::Field(_)) {
                members.insert(pe.clone());
            }
            children.insert(pe.clone(), child.with_named_fields_as_members());
        }
        Set { members, children }
    }

    /// Every member path, in SMD's iteration order: a node's members, then its children.
    fn paths(&self) -> Vec<Vec<Pe>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<Pe>, out: &mut Vec<Vec<Pe>>) {
        for m in &self.members {
            let mut p = prefix.clone();
            p.push(m.clone());
            out.push(p);
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// FieldsV1, with `".":{}` on nodes that are members and also have children, written last
    /// as SMD writes it.
    fn to_fields_v1(&self) -> Value {
        Value::Object(self.fields_v1_body(false))
    }

    fn fields_v1_body(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        let mut keys: BTreeSet<&Pe> = self.members.iter().collect();
        keys.extend(self.children.keys());
        for pe in keys {
            let member = self.members.contains(pe);
            let body = match self.children.get(pe) {
                Some(child) if !child.is_empty() => child.fields_v1_body(member),
                _ if member => Map::new(),
                _ => continue,
            };
            out.insert(pe.serialize(), Value::Object(body));
        }
        if include_self && !out.is_empty() {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        out
    }

    fn from_fields_v1(fields: &Map<String, Value>) -> Result<Set, String> {
        Ok(Self::read_fields_v1(fields)?.0.unwrap_or_default())
    }

    /// Returns the node's children (None if it has none) and whether the node is a member.
    fn read_fields_v1(fields: &Map<String, Value>) -> Result<(Option<Set>, bool), String> {
        let mut node: Option<Set> = None;
        let mut is_member = false;
        for (k, v) in fields {
            if k == "." {
                is_member = true;
                continue;
            }
            let Some(pe) = Pe::deserialize(k)? else {
                continue;
            };
            let Value::Object(sub) = v else {
                return Err(format!("{k}: expected a JSON object"));
            };
            let (grandchildren, child_is_member) = Self::read_fields_v1(sub)?;
            let n = node.get_or_insert_with(Set::default);
            if child_is_member {
                n.members.insert(pe.clone());
            }
            if let Some(g) = grandchildren {
                let merged = match n.children.remove(&pe) {
                    Some(existing) => existing.union(&g),
                    None => g,
                };
                n.children.insert(pe, merged);
            }
        }
        if node.is_none() {
            is_member = true;
        }
        Ok((node, is_member))
    }
}

// ---------------------------------------------------------------------------------------------
// Values: ordering, equality, Go-compatible formatting
// ---------------------------------------------------------------------------------------------

fn type_rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

/// SMD's total order on values: numbers (ints and floats compared numerically), strings,
/// bools, lists, maps, null.
fn cmp_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if x.is_f64() || y.is_f64() {
                let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                x.partial_cmp(&y).unwrap_or(Ordering::Equal)
            } else {
                let int = |n: &serde_json::Number| {
                    n.as_i64()
                        .map(i128::from)
                        .or_else(|| n.as_u64().map(i128::from))
                        .unwrap_or(0)
                };
                int(x).cmp(&int(y))
            }
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (l, r) in x.iter().zip(y) {
                let c = cmp_values(l, r);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            // serde_json keeps object keys sorted, which is the order SMD compares them in.
            for ((lk, lv), (rk, rv)) in x.iter().zip(y) {
                let c = lk.cmp(rk).then_with(|| cmp_values(lv, rv));
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Null, Value::Null) => Ordering::Equal,
        _ => type_rank(a).cmp(&type_rank(b)),
    }
}

fn cmp_field_lists(a: &[(String, Value)], b: &[(String, Value)]) -> Ordering {
    for ((lk, lv), (rk, rv)) in a.iter().zip(b) {
        let c = lk.cmp(rk).then_with(|| cmp_values(lv, rv));
        if c != Ordering::Equal {
            return c;
        }
    }
    a.len().cmp(&b.len())
}

/// SMD equality: `1` equals `1.0`.
fn value_eq(a: &Value, b: &Value) -> bool {
    cmp_values(a, b) == Ordering::Equal
}

/// Go's `%v` of a float64: shortest digits, exponent form below 1e-4 and from 1e6 on.
fn go_float(f: f64) -> String {
    let e = format!("{f:e}");
    let Some((mantissa, exp)) = e.split_once('e') else {
        return e;
    };
    let exp10: i32 = exp.parse().unwrap_or(0);
    if f != 0.0 && !(-4..6).contains(&exp10) {
        let sign = if exp10 < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp10.unsigned_abs())
    } else {
        format!("{f}")
    }
}

/// SMD's value.ToString, used in conflict paths.
fn go_to_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => go_float(n.as_f64().unwrap_or(0.0)),
        Value::Number(n) => n.to_string(),
        Value::String(s) => go_quote(s),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(go_to_string).collect::<Vec<_>>().join(",")
        ),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", go_to_string(v)))
            .collect(),
    }
}

/// A string as Go's encoding/json writes it (HTML-safe escapes included).
fn go_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A value as Go's encoding/json writes it: the form `k:` and `v:` keys carry.
fn go_json(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(0.0);
            let abs = f.abs();
            if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
                let s = format!("{f:e}");
                match s.split_once('e') {
                    Some((mantissa, exp)) => {
                        let (sign, digits) = match exp.strip_prefix('-') {
                            Some(d) => ('-', d),
                            None => ('+', exp),
                        };
                        format!("{mantissa}e{sign}{digits}")
                    }
                    None => s,
                }
            } else {
                format!("{f}")
            }
        }
        Value::Number(n) => n.to_string(),
        Value::String(s) => go_json_string(s),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(go_json).collect::<Vec<_>>().join(",")
        ),
        Value::Object(m) => {
            let body: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{}:{}", go_json_string(k), go_json(v)))
                .collect();
            format!("{{{}}}", body.join(","))
        }
    }
}

/// Seconds since the epoch of an RFC 3339 timestamp; 0 for a missing or unreadable one, which
/// is what kube-apiserver uses for an entry without time when sorting.
fn time_seconds(t: Option<&str>) -> i64 {
    t.and_then(parse_rfc3339).unwrap_or(0)
}

fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let minutes = num(i + 1, 2)? * 60 + num(i + 4, 2)?;
            if *sign == b'+' {
                minutes * 60
            } else {
                -minutes * 60
            }
        }
        _ => return None,
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second - offset)
}

// ---------------------------------------------------------------------------------------------
// Typed walks: validation, field sets, merge, comparison, removal
// ---------------------------------------------------------------------------------------------

fn child_path(parent: &str, field: &str) -> String {
    if parent.is_empty() {
        field.to_owned()
    } else {
        format!("{parent}.{field}")
    }
}

/// The path element of an associative-list item, or SMD's reason it has none.
fn item_pe(item: &Value, list: &ListType) -> Result<Pe, String> {
    match list {
        ListType::Map(keys) => {
            let Value::Object(m) = item else {
                return Err(if item.is_null() {
                    "associative list with keys may not have a null element".into()
                } else {
                    "associative list with keys may not have non-map elements".into()
                });
            };
            let mut fields = Vec::with_capacity(keys.len());
            for k in keys {
                match m.get(k) {
                    Some(v) => fields.push((k.clone(), v.clone())),
                    None => {
                        return Err(format!(
                            "associative list with keys has an element that omits key field {} (and doesn't have default value)",
                            go_quote(k)
                        ));
                    }
                }
            }
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(Pe::Key(fields))
        }
        _ => match item {
            Value::Object(_) => {
                Err("associative list without keys has an element that's a map type".into())
            }
            Value::Array(_) => Err("not supported: associative list with lists as elements".into()),
            Value::Null => {
                Err("associative list without keys has an element that's an explicit null".into())
            }
            scalar => Ok(Pe::Value(scalar.clone())),
        },
    }
}

/// Items of a granular list paired with their path elements; items without one are skipped
/// (validation has reported them already).
fn indexed<'a>(items: &'a [Value], list: &ListType) -> Vec<(Pe, &'a Value)> {
    items
        .iter()
        .filter_map(|item| item_pe(item, list).ok().map(|pe| (pe, item)))
        .collect()
}

struct ValidationError {
    path: String,
    message: String,
}

/// What SMD rejects when turning an object into a typed value.
fn validate(v: &Value, schema: &Schema, allow_duplicates: bool) -> Vec<ValidationError> {
    let mut walker = Validator {
        schema,
        allow_duplicates,
        errs: Vec::new(),
    };
    walker.value(v, "", "");
    walker.errs
}

struct Validator<'s> {
    schema: &'s Schema,
    allow_duplicates: bool,
    errs: Vec<ValidationError>,
}

impl Validator<'_> {
    fn error(&mut self, path: &str, message: String) {
        self.errs.push(ValidationError {
            path: path.to_owned(),
            message,
        });
    }

    /// A field's value: it must have the shape the schema declares for the field.
    fn field(&mut self, v: &Value, spath: &str, path: &str) {
        let granular_list = !matches!(self.schema.list_type(spath), ListType::Atomic);
        if granular_list && !(v.is_array() || v.is_null()) {
            self.error(path, format!("expected list, got {v}"));
        } else if self.schema.is_atomic_map(spath) && !(v.is_object() || v.is_null()) {
            self.error(path, format!("expected map, got {v}"));
        } else {
            self.value(v, spath, path);
        }
    }

    /// A value whose shape is already settled: a field's, or a list item's.
    fn value(&mut self, v: &Value, spath: &str, path: &str) {
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    self.field(c, &child_path(spath, k), &format!("{path}.{k}"));
                }
            }
            Value::Array(items) => {
                let list = self.schema.list_type(spath);
                if matches!(list, ListType::Atomic) {
                    for (i, item) in items.iter().enumerate() {
                        self.value(item, spath, &format!("{path}[{i}]"));
                    }
                    return;
                }
                let mut seen = BTreeSet::new();
                for (i, item) in items.iter().enumerate() {
                    let pe = match item_pe(item, list) {
                        Ok(pe) => pe,
                        Err(e) => {
                            // SMD cannot address anything after an unkeyed item, so it stops here.
                            self.error(path, format!("element {i}: {e}"));
                            return;
                        }
                    };
                    if seen.contains(&pe) && !self.allow_duplicates {
                        self.error(path, format!("duplicate entries for key {pe}"));
                    }
                    self.value(item, spath, &format!("{path}{pe}"));
                    seen.insert(pe);
                }
            }
            _ => {}
        }
    }
}

fn format_validation(errs: &[ValidationError]) -> String {
    let one = |e: &ValidationError| {
        if e.path.is_empty() {
            e.message.clone()
        } else {
            format!("{}: {}", e.path, e.message)
        }
    };
    match errs {
        [only] => one(only),
        _ => {
            let mut s = String::from("errors:");
            for e in errs {
                let _ = write!(s, "\n  {}", one(e));
            }
            s
        }
    }
}

/// SMD's ToFieldSet: scalars, atomic lists and maps, list items, nulls and empty objects are
/// members; objects with content are only reached through.
fn to_field_set(v: &Value, schema: &Schema) -> Set {
    let mut set = Set::default();
    field_set_at(v, "", &mut Vec::new(), schema, &mut set);
    set
}

fn field_set_at(v: &Value, spath: &str, path: &mut Vec<Pe>, schema: &Schema, set: &mut Set) {
    match v {
        Value::Object(m) if !schema.is_atomic_map(spath) => {
            for (k, c) in m {
                path.push(Pe::Field(k.clone()));
                field_set_at(c, &child_path(spath, k), path, schema, set);
                if c.is_null() || c.as_object().is_some_and(Map::is_empty) {
                    set.insert(path);
                }
                path.pop();
            }
        }
        Value::Array(items) if !matches!(schema.list_type(spath), ListType::Atomic) => {
            let list = schema.list_type(spath);
            let pes = indexed(items, list);
            let mut seen = BTreeSet::new();
            let mut duplicated = BTreeSet::new();
            for (pe, _) in &pes {
                if !seen.insert(pe.clone()) {
                    duplicated.insert(pe.clone());
                }
            }
            // A duplicated key is owned as a whole: its items cannot be told apart.
            for pe in &duplicated {
                path.push(pe.clone());
                set.insert(path);
                path.pop();
            }
            for (pe, item) in pes {
                if duplicated.contains(&pe) {
                    continue;
                }
                path.push(pe);
                field_set_at(item, spath, path, schema, set);
                set.insert(path);
                path.pop();
            }
        }
        _ => set.insert(path),
    }
}

/// How a pair of values is walked.
enum Shape<'s> {
    Leaf,
    Map,
    List(&'s ListType),
}

/// Decides how to walk `l` and `r` at `spath`, with SMD's rule that two empty (or null)
/// containers compare and merge as a leaf so `{}` and `null` stay distinct.
fn shape<'s>(l: Option<&Value>, r: Option<&Value>, spath: &str, schema: &'s Schema) -> Shape<'s> {
    let sides = [l, r];
    let all = |f: fn(&Value) -> bool| sides.iter().flatten().all(|v| v.is_null() || f(v));
    let any = |f: fn(&Value) -> bool| sides.iter().flatten().any(|v| f(v));
    let empty = |v: &&Value| match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    if any(Value::is_object) && all(Value::is_object) {
        if schema.is_atomic_map(spath) || sides.iter().flatten().all(empty) {
            return Shape::Leaf;
        }
        return Shape::Map;
    }
    if any(Value::is_array) && all(Value::is_array) {
        let list = schema.list_type(spath);
        if matches!(list, ListType::Atomic) || sides.iter().flatten().all(empty) {
            return Shape::Leaf;
        }
        return Shape::List(list);
    }
    Shape::Leaf
}

fn obj_get<'a>(v: Option<&'a Value>, k: &str) -> Option<&'a Value> {
    v.and_then(|v| v.as_object()).and_then(|m| m.get(k))
}

fn as_items(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// SMD's Merge: the applied configuration (`r`) wins for leaves, maps merge per key,
/// associative lists per item.
fn merge(l: Option<&Value>, r: Option<&Value>, spath: &str, schema: &Schema) -> Value {
    let (l_val, r_val) = match (l, r) {
        (None, None) => return Value::Null,
        (Some(l), None) => return l.clone(),
        (None, Some(r)) => return r.clone(),
        (Some(l), Some(r)) => (l, r),
    };
    match shape(l, r, spath, schema) {
        Shape::Leaf => r_val.clone(),
        Shape::Map => {
            let mut out = Map::new();
            let lm = l_val.as_object();
            let rm = r_val.as_object();
            for k in lm
                .into_iter()
                .flat_map(Map::keys)
                .chain(rm.into_iter().flat_map(Map::keys))
            {
                if out.contains_key(k) {
                    continue;
                }
                let merged = merge(obj_get(l, k), obj_get(r, k), &child_path(spath, k), schema);
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        Shape::List(list) => {
            Value::Array(merge_list(as_items(l), as_items(r), list, spath, schema))
        }
    }
}

/// SMD v6's associative-list merge: items only in the live list keep their place, items the
/// configuration names come out in the configuration's order, and new items go just before the
/// next item both lists share (so at the end when none follows).
fn merge_list(
    lhs: &[Value],
    rhs: &[Value],
    list: &ListType,
    spath: &str,
    schema: &Schema,
) -> Vec<Value> {
    let lhs = indexed(lhs, list);
    let rhs = indexed(rhs, list);
    let mut observed_r: BTreeMap<&Pe, &Value> = BTreeMap::new();
    for (pe, v) in &rhs {
        observed_r.entry(pe).or_insert(v);
    }
    // A key the live list holds twice merges as null: the configuration's item replaces both.
    let null = Value::Null;
    let mut observed_l: BTreeMap<&Pe, &Value> = BTreeMap::new();
    for (pe, v) in &lhs {
        observed_l
            .entry(pe)
            .and_modify(|dup| *dup = &null)
            .or_insert(v);
    }
    let mut shared = rhs
        .iter()
        .map(|(pe, _)| pe)
        .filter(|pe| observed_l.contains_key(pe));
    let mut next_shared = shared.next();
    let mut merged_r: BTreeSet<&Pe> = BTreeSet::new();
    let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
    let (mut li, mut ri) = (0, 0);
    while li < lhs.len() || ri < rhs.len() {
        if li < lhs.len() && ri < rhs.len() {
            let pe = &lhs[li].0;
            if *pe == rhs[ri].0 {
                merged_r.insert(pe);
                out.push(merge(
                    observed_l.get(pe).copied(),
                    observed_r.get(pe).copied(),
                    spath,
                    schema,
                ));
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if observed_r.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                // A shared item the configuration wants later: it is written when reached there.
                li += 1;
                continue;
            }
        }
        if li < lhs.len() {
            let (pe, item) = &lhs[li];
            if !observed_r.contains_key(pe) {
                out.push((*item).clone());
                li += 1;
                continue;
            } else if merged_r.contains(pe) {
                li += 1;
            }
        }
        if ri < rhs.len() {
            let pe = &rhs[ri].0;
            merged_r.insert(pe);
            out.push(merge(
                observed_l.get(pe).copied(),
                observed_r.get(pe).copied(),
                spath,
                schema,
            ));
            ri += 1;
            if next_shared.is_some_and(|n| n == pe) {
                next_shared = shared.next();
            }
        }
    }
    out
}

/// Fields added, changed or removed between two objects, SMD-style: containers that appear or
/// vanish are listed themselves as well as their leaves.
#[derive(Default)]
struct Comparison {
    added: Set,
    modified: Set,
    removed: Set,
}

fn compare_objects(old: &Value, new: &Value, schema: &Schema) -> Comparison {
    let mut cmp = Comparison::default();
    compare_at(Some(old), Some(new), "", &mut Vec::new(), schema, &mut cmp);
    cmp
}

fn compare_at(
    l: Option<&Value>,
    r: Option<&Value>,
    spath: &str,
    path: &mut Vec<Pe>,
    schema: &Schema,
    cmp: &mut Comparison,
) {
    match shape(l, r, spath, schema) {
        Shape::Leaf => {
            match (l, r) {
                (None, Some(_)) => cmp.added.insert(path),
                (Some(_), None) => cmp.removed.insert(path),
                (Some(a), Some(b)) if !value_eq(a, b) => cmp.modified.insert(path),
                _ => {}
            }
            return;
        }
        Shape::Map => {
            let mut keys: BTreeSet<&String> = BTreeSet::new();
            for side in [l, r].into_iter().flatten() {
                if let Value::Object(m) = side {
                    keys.extend(m.keys());
                }
            }
            for k in keys {
                path.push(Pe::Field(k.clone()));
                compare_at(
                    obj_get(l, k),
                    obj_get(r, k),
                    &child_path(spath, k),
                    path,
                    schema,
                    cmp,
                );
                path.pop();
            }
        }
        Shape::List(list) => compare_list(as_items(l), as_items(r), list, spath, path, schema, cmp),
    }
    match (l, r) {
        (None, Some(_)) => cmp.added.insert(path),
        (Some(_), None) => cmp.removed.insert(path),
        _ => {}
    }
}

fn compare_list(
    lhs: &[Value],
    rhs: &[Value],
    list: &ListType,
    spath: &str,
    path: &mut Vec<Pe>,
    schema: &Schema,
    cmp: &mut Comparison,
) {
    let mut order: Vec<Pe> = Vec::new();
    let mut l_items: BTreeMap<Pe, Vec<&Value>> = BTreeMap::new();
    let mut r_items: BTreeMap<Pe, Vec<&Value>> = BTreeMap::new();
    for (pe, v) in indexed(lhs, list) {
        if !l_items.contains_key(&pe) {
            order.push(pe.clone());
        }
        l_items.entry(pe).or_default().push(v);
    }
    for (pe, v) in indexed(rhs, list) {
        if !l_items.contains_key(&pe) && !r_items.contains_key(&pe) {
            order.push(pe.clone());
        }
        r_items.entry(pe).or_default().push(v);
    }
    let none: Vec<&Value> = Vec::new();
    for pe in order {
        let ls = l_items.get(&pe).unwrap_or(&none);
        let rs = r_items.get(&pe).unwrap_or(&none);
        path.push(pe);
        match (ls.len(), rs.len()) {
            (0..=1, 0..=1) => compare_at(
                ls.first().copied(),
                rs.first().copied(),
                spath,
                path,
                schema,
                cmp,
            ),
            // Duplicated keys compare as one atomic value.
            (2.., 2..) => {
                if ls.len() != rs.len() || ls.iter().zip(rs).any(|(a, b)| !value_eq(a, b)) {
                    cmp.modified.insert(path);
                }
            }
            (2.., _) => {
                if let Some(r) = rs.first() {
                    compare_at(None, Some(r), spath, path, schema, cmp);
                }
                cmp.removed.insert(path);
            }
            (_, 2..) => {
                if let Some(l) = ls.first() {
                    compare_at(Some(l), None, spath, path, schema, cmp);
                }
                cmp.added.insert(path);
            }
        }
        path.pop();
    }
}

/// SMD's RemoveItems: drops every member of `set` from `v`. A container left empty becomes
/// null, as in SMD; nulls are stripped from the final object.
fn remove_items(v: &Value, set: &Set, spath: &str, schema: &Schema) -> Value {
    match v {
        Value::Object(m) if !schema.is_atomic_map(spath) => {
            let mut out = Map::new();
            for (k, c) in m {
                let pe = Pe::Field(k.clone());
                if set.members.contains(&pe) {
                    continue;
                }
                let kept = match set.children.get(&pe) {
                    Some(sub) if !sub.is_empty() => {
                        remove_items(c, sub, &child_path(spath, k), schema)
                    }
                    _ => c.clone(),
                };
                out.insert(k.clone(), kept);
            }
            if out.is_empty() {
                Value::Null
            } else {
                Value::Object(out)
            }
        }
        Value::Array(items) if !matches!(schema.list_type(spath), ListType::Atomic) => {
            let list = schema.list_type(spath);
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                let Ok(pe) = item_pe(item, list) else {
                    out.push(item.clone());
                    continue;
                };
                if set.members.contains(&pe) {
                    continue;
                }
                match set.children.get(&pe) {
                    Some(sub) if !sub.is_empty() => {
                        out.push(remove_items(item, sub, spath, schema));
                    }
                    _ => out.push(item.clone()),
                }
            }
            if out.is_empty() {
                Value::Null
            } else {
                Value::Array(out)
            }
        }
        // Paths below an atomic value come from entries recorded under another schema; SMD
        // would reconcile them first, so the value is left alone.
        _ => v.clone(),
    }
}

/// SMD's prune: removes what the applier applied last time and no longer applies, unless some
/// manager (the applier included, through its new configuration) still owns it.
fn prune(merged: &Value, managed: &[Entry], last: &Set, schema: &Schema) -> Value {
    if last.is_empty() {
        return merged.clone();
    }
    let last = last.with_named_fields_as_members();
    let mut owned = strip_set();
    for e in managed {
        owned = owned.union(&e.set);
    }
    // Identity and server metadata are never owned, yet must survive an applier that stops
    // sending metadata at all.
    let owned = owned.with_named_fields_as_members();
    let fields = |v: &Value| to_field_set(v, schema).with_named_fields_as_members();
    let merged_set = fields(merged);
    let pruned = remove_items(merged, &last, "", schema);
    let pruned = remove_items(
        merged,
        &merged_set.difference(&fields(&pruned).union(&owned)),
        "",
        schema,
    );
    let gone = merged_set.difference(&fields(&pruned)).intersection(&last);
    remove_items(merged, &gone, "", schema)
}

#[cfg(test)]
mod tests;
