//! The file source: a directory per cluster holding ordinary Kubernetes YAML
//! (`DIR/<cluster>/**/*.yaml`), turned into the same [`Event`]s the live
//! watches emit.
//!
//! Owns reading and validating files (every problem located by file,
//! document and List item), and diffing a cluster's new objects against the
//! previous ones. A cluster whose files fail on reload keeps its previous
//! data. It must not build DNS records; watching for changes is in
//! `source::watch`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service as K8sService;
use k8s_openapi::api::discovery::v1::EndpointSlice as K8sSlice;
use rayon::prelude::*;
use serde_json::Value;

use super::convert::mcs::{
    ClusterProperty, Export, McsObject, Property, convert_export, convert_import, convert_property,
    is_about_api, is_mcs_api,
};
use super::convert::{
    Adjustment, ConvertError, Converted, Reason, ServiceKind, Warning, convert_service,
    convert_slice,
};
use super::selector::LINKERD_DEFAULTS;
use super::state::BudgetReport;
use super::status::AdjustedCounts;
use crate::model::budget::{Admission, Budget};
use crate::model::objects::{Gateway, Import, Mirror, ObjectKey, Service, Slice};
use crate::model::{Event, Health};
use crate::vocab::name::check_cluster_name;
use crate::vocab::place::{PROPERTY_REGION, PROPERTY_ZONE, Place, PlaceFrom};
use crate::vocab::trust::{Claims, Trust, TrustSettings};

/// Deepest directory level searched below a cluster directory (guards
/// against symlink loops).
const MAX_DEPTH: usize = 16;

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Served anyway, but probably not what was meant.
    Warning,
    /// The document (or cluster) was not used.
    Error,
}

/// Something wrong in the zones directory, located as precisely as possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file or directory.
    pub path: PathBuf,
    /// 1-based document number in a multi-document file.
    pub document: Option<usize>,
    /// 1-based line where that document starts.
    pub line: Option<usize>,
    /// 0-based item index inside a `kind: List` document.
    pub item: Option<usize>,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(f, "{level}: {}", self.path.display())?;
        if let Some(d) = self.document {
            write!(f, ": document {d}")?;
            if let Some(l) = self.line {
                write!(f, " (line {l})")?;
            }
        }
        if let Some(i) = self.item {
            write!(f, ": items[{i}]")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Why the zones directory could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum FileSourceError {
    /// The directory is missing or unreadable.
    #[error("cannot read zones directory {path}: {source}")]
    Root {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The slim objects of one cluster directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterObjects {
    /// Exported or federated services.
    pub services: BTreeMap<ObjectKey, Service>,
    /// EndpointSlices of those services.
    pub slices: BTreeMap<ObjectKey, Slice>,
    /// Mirror Services (local cluster only).
    pub mirrors: BTreeMap<ObjectKey, Mirror>,
    /// The gateway, if the directory has one.
    pub gateway: Option<Gateway>,
    /// ServiceImports (MCS; read in the local cluster's directory only).
    pub imports: BTreeMap<ObjectKey, Import>,
    /// The MCS cluster id its ClusterProperty `cluster.clusterset.k8s.io`
    /// gives, if it has one.
    pub cluster_id: Option<Arc<str>>,
    /// The place its ClusterProperty objects `region.clusterset-dns.io`
    /// and `zone.clusterset-dns.io` give (docs/locality.md); unknown when
    /// one of them is invalid.
    pub place: Place,
}

/// The result of reading one cluster directory.
#[derive(Debug, Clone)]
pub struct ClusterLoad {
    /// Cluster name (the directory name).
    pub name: Arc<str>,
    /// The directory.
    pub path: PathBuf,
    /// Whether it is the local cluster.
    pub local: bool,
    /// What it holds.
    pub objects: ClusterObjects,
    /// Problems found.
    pub problems: Vec<Problem>,
    /// Documents of kinds we do not read, by `apiVersion kind`.
    pub skipped: BTreeMap<String, u64>,
    /// Services and EndpointSlices skipped or clamped, by reason (every
    /// document of the directory, as `check` lists their problems).
    pub adjusted: AdjustedCounts,
    /// Services present but not exported.
    pub not_exported: usize,
    /// Files read.
    pub files: usize,
}

impl ClusterLoad {
    /// True when some document could not be used.
    pub fn has_errors(&self) -> bool {
        self.problems.iter().any(|p| p.severity == Severity::Error)
    }
}

/// The result of reading the whole zones directory.
#[derive(Debug, Clone)]
pub struct DirLoad {
    /// Clusters, by name.
    pub clusters: Vec<ClusterLoad>,
    /// Problems with the directory itself (rejected cluster names).
    pub problems: Vec<Problem>,
}

impl DirLoad {
    /// Every problem, directory-level first.
    pub fn all_problems(&self) -> impl Iterator<Item = &Problem> {
        self.problems
            .iter()
            .chain(self.clusters.iter().flat_map(|c| &c.problems))
    }
}

/// A cluster directory found under the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDir {
    /// Cluster name.
    pub name: Arc<str>,
    /// Its path.
    pub path: PathBuf,
}

fn is_hidden(name: &str) -> bool {
    name.starts_with('.')
}

/// Lists the cluster directories under `root`. Directories whose name is not
/// a valid cluster name are reported, not returned.
pub fn cluster_dirs(root: &Path) -> Result<(Vec<ClusterDir>, Vec<Problem>), FileSourceError> {
    let err = |source| FileSourceError::Root {
        path: root.to_owned(),
        source,
    };
    let mut dirs = Vec::new();
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(root).map_err(err)? {
        let entry = entry.map_err(err)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        // Files at the top (a README, clusters.md) are not clusters.
        if is_hidden(&name) || !path.is_dir() {
            continue;
        }
        match check_cluster_name(&name) {
            Ok(()) => dirs.push(ClusterDir {
                name: name.into(),
                path,
            }),
            Err(e) => problems.push(Problem {
                path,
                document: None,
                line: None,
                item: None,
                severity: Severity::Error,
                message: format!("directory skipped: {e}"),
            }),
        }
    }
    dirs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((dirs, problems))
}

/// The YAML files below a cluster directory, sorted, with the problems met
/// while listing them.
fn yaml_files(dir: &Path) -> (Vec<PathBuf>, Vec<Problem>) {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    let mut stack = vec![(dir.to_owned(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) => {
                problems.push(Problem {
                    path: d,
                    document: None,
                    line: None,
                    item: None,
                    severity: Severity::Error,
                    message: format!("cannot read directory: {e}"),
                });
                continue;
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_hidden(&name) {
                continue;
            }
            let path = entry.path();
            if path.is_dir() {
                if depth < MAX_DEPTH {
                    stack.push((path, depth + 1));
                }
            } else if [".yaml", ".yml", ".json"]
                .iter()
                .any(|ext| name.ends_with(ext))
            {
                files.push(path);
            }
        }
    }
    files.sort();
    (files, problems)
}

/// Fingerprint of a cluster directory: changes when any YAML file is added,
/// removed, resized or modified.
pub fn fingerprint(dir: &Path) -> u64 {
    let (files, _) = yaml_files(dir);
    let mut h = DefaultHasher::new();
    for f in &files {
        f.hash(&mut h);
        if let Ok(meta) = std::fs::metadata(f) {
            meta.len().hash(&mut h);
            if let Ok(m) = meta.modified() {
                m.hash(&mut h);
            }
        }
    }
    h.finish()
}

/// True for a line that holds YAML content (not blank, not a comment, not
/// a `%` directive).
fn has_content(line: &str) -> bool {
    let t = line.trim_start();
    !t.is_empty() && !t.starts_with('#') && !t.starts_with('%')
}

/// Splits a multi-document YAML text at `---` and `...` markers. Returns
/// each document that holds content, with the 1-based line its content
/// starts on. Document numbers in problems count these documents.
fn split_documents(text: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    let mut flush = |current: &mut String, start: usize| {
        if current.lines().any(has_content) {
            docs.push((start, std::mem::take(current)));
        }
        current.clear();
    };
    for (i, line) in text.lines().enumerate() {
        let marker = |m: &str| {
            line == m
                || line
                    .strip_prefix(m)
                    .is_some_and(|r| r.starts_with([' ', '\t']))
        };
        if marker("---") || marker("...") {
            flush(&mut current, start);
            start = i + 2;
            // `--- {inline: document}` keeps its content.
            if let Some(rest) = line.strip_prefix("---").filter(|r| has_content(r)) {
                current.push_str(rest);
                current.push('\n');
                start = i + 1;
            }
            continue;
        }
        if current.is_empty() && !has_content(line) {
            start = i + 2;
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    flush(&mut current, start);
    docs
}

/// A YAML error message with its line made absolute within the file.
fn yaml_error(e: &serde_saphyr::Error, first_line: usize) -> String {
    let msg = e.without_snippet().render();
    let Some(loc) = e.location() else { return msg };
    let suffix = format!(" at line {}, column {}", loc.line(), loc.column());
    let line = first_line + loc.line() as usize - 1;
    match msg.strip_suffix(&suffix) {
        Some(head) => format!("line {line}, column {}: {head}", loc.column()),
        None => format!("line {line}: {msg}"),
    }
}

/// One document, parsed: the part of reading that needs no other document
/// and so runs in parallel.
enum Parsed {
    /// Nothing but comments or `null`.
    Empty,
    /// A Service, converted; with its namespace/name as written.
    Service(ObjectKey, Result<Converted<ServiceKind>, ConvertError>),
    /// An EndpointSlice, converted.
    Slice(Result<Converted<Option<Slice>>, ConvertError>),
    /// Any other object, or one the direct read refused (the generic read
    /// names the field in its error).
    Value(Value),
    /// Not YAML: the message.
    Invalid(String),
}

/// A file's documents, each with the line its content starts on; or why
/// the file could not be read.
struct ParsedFile {
    path: PathBuf,
    docs: Result<Vec<(usize, Parsed)>, String>,
}

fn parse_file(path: &Path, local: bool, trust: &Trust) -> ParsedFile {
    let docs = match std::fs::read_to_string(path) {
        Ok(text) => Ok(split_documents(&text)
            .into_iter()
            .map(|(first_line, doc)| (first_line, parse_document(&doc, first_line, local, trust)))
            .collect()),
        Err(e) => Err(format!("cannot read file: {e}")),
    };
    ParsedFile {
        path: path.to_owned(),
        docs,
    }
}

/// Parses one document (and converts it, when it is an object we hold: the
/// converted form is what is kept, so the parsed one need not wait for the
/// reader). A block-style Service or EndpointSlice is read straight into its
/// type: the generic tree in between was most of the load time of a large
/// zones directory (`cargo bench --bench index_scale`). Anything else, and
/// anything the direct read refuses, takes the generic path, whose errors
/// the reader reports.
fn parse_document(doc: &str, first_line: usize, local: bool, trust: &Trust) -> Parsed {
    match object_head(doc) {
        Some(("v1", "Service")) => {
            if let Ok(svc) = serde_saphyr::from_str::<K8sService>(doc) {
                let (key, converted) = service_doc(&svc, local, trust);
                return Parsed::Service(key, converted);
            }
        }
        Some(("discovery.k8s.io/v1", "EndpointSlice")) => {
            if let Ok(slice) = serde_saphyr::from_str::<K8sSlice>(doc) {
                return Parsed::Slice(convert_slice(&slice, trust));
            }
        }
        _ => {}
    }
    match serde_saphyr::from_str::<Value>(doc) {
        Ok(Value::Null) => Parsed::Empty,
        Ok(value) => Parsed::Value(value),
        Err(e) => Parsed::Invalid(format!("invalid YAML: {}", yaml_error(&e, first_line))),
    }
}

/// A Service's namespace/name as written, and its conversion.
fn service_doc(
    svc: &K8sService,
    local: bool,
    trust: &Trust,
) -> (ObjectKey, Result<Converted<ServiceKind>, ConvertError>) {
    let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
    let name = svc.metadata.name.as_deref().unwrap_or("");
    (
        ObjectKey::new(ns, name),
        convert_service(svc, local, &LINKERD_DEFAULTS, trust),
    )
}

/// `apiVersion` and `kind` of a block-style document, when each is a plain
/// scalar on a top-level line of its own, exactly once; `None` for anything
/// less simple (flow style, anchors, tags, block scalars), which then takes
/// the generic path.
fn object_head(doc: &str) -> Option<(&str, &str)> {
    let (mut api, mut kind) = (None, None);
    for line in doc.lines() {
        let slot = if let Some(v) = line.strip_prefix("apiVersion:") {
            (&mut api, v)
        } else if let Some(v) = line.strip_prefix("kind:") {
            (&mut kind, v)
        } else {
            continue;
        };
        let value = plain_scalar(slot.1)?;
        if slot.0.replace(value).is_some() {
            return None;
        }
    }
    Some((api?, kind?))
}

/// The text of a one-line scalar with its comment and quotes removed, if it
/// is that simple.
fn plain_scalar(raw: &str) -> Option<&str> {
    let v = raw.split(" #").next().unwrap_or("").trim();
    let v = v
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(v);
    let simple = !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '-' | '_'));
    simple.then_some(v)
}

struct Reader {
    local: bool,
    /// What the cluster may make us hold.
    trust: Trust,
    load: ClusterLoad,
    /// Every Service seen, exported or not, to spot orphan slices.
    services_seen: BTreeSet<ObjectKey>,
    /// Where each object was first defined, to report duplicates.
    origin: BTreeMap<(&'static str, ObjectKey), String>,
    /// Slices before filtering by exported service, with their location.
    slices: Vec<(Slice, PathBuf, usize, usize, Option<usize>)>,
    /// Services with no Linkerd export label: members only if exported
    /// through a ServiceExport.
    unexported: BTreeMap<ObjectKey, Service>,
    /// ServiceExports with their location.
    exports: Vec<(Export, PathBuf, usize, usize, Option<usize>)>,
    /// A place property is invalid: the place is unknown, whatever the
    /// other one says.
    place_invalid: bool,
    /// First line of the document being read.
    line: usize,
}

impl Reader {
    fn problem(
        &mut self,
        path: &Path,
        doc: Option<usize>,
        item: Option<usize>,
        severity: Severity,
        message: String,
    ) {
        self.load.problems.push(Problem {
            path: path.to_owned(),
            document: doc,
            line: doc.map(|_| self.line),
            item,
            severity,
            message,
        });
    }

    /// Takes in one parsed file, in order: problems and duplicates are
    /// reported as if the files were read one after the other.
    fn read_parsed(&mut self, file: ParsedFile) {
        let ParsedFile { path, docs } = file;
        let docs = match docs {
            Ok(d) => d,
            Err(e) => {
                self.problem(&path, None, None, Severity::Error, e);
                return;
            }
        };
        self.load.files += 1;
        for (n, (first_line, doc)) in docs.into_iter().enumerate() {
            let doc_no = n + 1;
            self.line = first_line;
            match doc {
                Parsed::Empty => {}
                Parsed::Service(key, converted) => {
                    self.service(&path, doc_no, None, key, converted);
                }
                Parsed::Slice(converted) => self.slice(&path, doc_no, None, converted),
                Parsed::Value(value) => self.read_object(&path, doc_no, None, value),
                Parsed::Invalid(msg) => {
                    self.problem(&path, Some(doc_no), None, Severity::Error, msg);
                }
            }
        }
    }

    fn read_object(&mut self, path: &Path, doc: usize, item: Option<usize>, value: Value) {
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let err = |this: &mut Self, msg: String| {
            this.problem(path, Some(doc), item, Severity::Error, msg);
        };
        match (api_version.as_str(), kind.as_str()) {
            ("", _) | (_, "") => err(
                self,
                "not a Kubernetes object: apiVersion and kind are required".to_owned(),
            ),
            ("v1", "List") if item.is_none() => match value.get("items") {
                Some(Value::Array(items)) => {
                    for (i, it) in items.iter().enumerate() {
                        self.read_object(path, doc, Some(i), it.clone());
                    }
                }
                None | Some(Value::Null) => {}
                Some(_) => err(self, "items: must be a list".to_owned()),
            },
            ("v1", "Service") => match serde_path_to_error::deserialize::<_, K8sService>(value) {
                Ok(svc) => {
                    let (key, converted) = service_doc(&svc, self.local, &self.trust);
                    self.service(path, doc, item, key, converted);
                }
                Err(e) => {
                    self.count(Adjustment::Skipped, Reason::Undecodable);
                    err(self, format!("Service {}: {}", e.path(), e.inner()));
                }
            },
            ("discovery.k8s.io/v1", "EndpointSlice") => {
                match serde_path_to_error::deserialize::<_, K8sSlice>(value) {
                    Ok(slice) => self.slice(path, doc, item, convert_slice(&slice, &self.trust)),
                    Err(e) => {
                        self.count(Adjustment::Skipped, Reason::Undecodable);
                        err(self, format!("EndpointSlice {}: {}", e.path(), e.inner()));
                    }
                }
            }
            (api, "ServiceExport" | "ServiceImport") if is_mcs_api(api) => {
                match serde_path_to_error::deserialize::<_, McsObject>(value) {
                    Ok(object) if kind == "ServiceExport" => self.export(path, doc, item, &object),
                    Ok(object) => self.import(path, doc, item, &object),
                    Err(e) => {
                        self.count(Adjustment::Skipped, Reason::Undecodable);
                        err(self, format!("{kind} {}: {}", e.path(), e.inner()));
                    }
                }
            }
            (api, "ClusterProperty") if is_about_api(api) => {
                match serde_path_to_error::deserialize::<_, ClusterProperty>(value) {
                    Ok(property) => self.property(path, doc, item, &property),
                    Err(e) => {
                        self.count(Adjustment::Skipped, Reason::Undecodable);
                        err(self, format!("ClusterProperty {}: {}", e.path(), e.inner()));
                    }
                }
            }
            _ => {
                *self
                    .load
                    .skipped
                    .entry(format!("{api_version} {kind}"))
                    .or_default() += 1;
            }
        }
    }

    fn location(&self, path: &Path, doc: usize, item: Option<usize>) -> String {
        let line = self.line;
        match item {
            Some(i) => format!(
                "{}: document {doc} (line {line}): items[{i}]",
                path.display()
            ),
            None => format!("{}: document {doc} (line {line})", path.display()),
        }
    }

    /// Records where an object was defined; false (and an error) when it was
    /// defined before.
    fn first_definition(
        &mut self,
        kind: &'static str,
        key: &ObjectKey,
        path: &Path,
        doc: usize,
        item: Option<usize>,
    ) -> bool {
        let here = self.location(path, doc, item);
        if let Some(first) = self.origin.get(&(kind, key.clone())).cloned() {
            self.problem(
                path,
                Some(doc),
                item,
                Severity::Error,
                format!("{kind} {key} is already defined at {first}; this copy is ignored"),
            );
            return false;
        }
        self.origin.insert((kind, key.clone()), here);
        true
    }

    fn service(
        &mut self,
        path: &Path,
        doc: usize,
        item: Option<usize>,
        key: ObjectKey,
        converted: Result<Converted<ServiceKind>, ConvertError>,
    ) {
        let converted = match converted {
            Ok(c) => c,
            Err(e) => return self.convert_error(path, doc, item, "Service", e),
        };
        let adjustment = converted.adjustment();
        self.warnings(path, doc, item, adjustment, converted.warnings);
        if !self.first_definition("Service", &key, path, doc, item) {
            return;
        }
        self.services_seen.insert(key);
        match converted.value {
            ServiceKind::Exported(s) => {
                self.load.objects.services.insert(s.key.clone(), s);
            }
            ServiceKind::Mirror(m) => {
                self.load.objects.mirrors.insert(m.key.clone(), m);
            }
            ServiceKind::Gateway(g) => self.load.objects.gateway = Some(g),
            ServiceKind::Unexported(s) => {
                self.unexported.insert(s.key.clone(), s);
            }
            ServiceKind::Ignored | ServiceKind::ExternalName(_) => self.load.not_exported += 1,
        }
    }

    fn export(&mut self, path: &Path, doc: usize, item: Option<usize>, export: &McsObject) {
        match convert_export(export) {
            Ok(Converted { value: e, .. })
                if let Err(why) = self.trust.check_namespace(&e.key.namespace) =>
            {
                let key = e.key;
                self.count(Adjustment::Skipped, Reason::NamespaceDenied);
                self.problem(
                    path,
                    Some(doc),
                    item,
                    Severity::Warning,
                    format!(
                        "ServiceExport {key}: namespace {} is {why}; not exported",
                        key.namespace
                    ),
                );
            }
            Ok(Converted { value: e, warnings }) => {
                self.warnings(path, doc, item, Adjustment::Clamped, warnings);
                if self.first_definition("ServiceExport", &e.key, path, doc, item) {
                    self.exports
                        .push((e, path.to_owned(), self.line, doc, item));
                }
            }
            Err(e) => self.convert_error(path, doc, item, "ServiceExport", e),
        }
    }

    fn import(&mut self, path: &Path, doc: usize, item: Option<usize>, import: &McsObject) {
        match convert_import(import, &self.trust) {
            // A linked cluster's imports are its own MCS controller's view,
            // not ours: a copy of a real clusterset has them everywhere.
            Ok(_) if !self.local => {
                *self
                    .load
                    .skipped
                    .entry(
                        "multicluster.x-k8s.io ServiceImport (not the local cluster's)".to_owned(),
                    )
                    .or_default() += 1;
            }
            Ok(Converted { value: i, warnings }) => {
                self.warnings(path, doc, item, Adjustment::Clamped, warnings);
                if self.first_definition("ServiceImport", &i.key, path, doc, item) {
                    self.load.objects.imports.insert(i.key.clone(), i);
                }
            }
            Err(e) => self.convert_error(path, doc, item, "ServiceImport", e),
        }
    }

    fn property(&mut self, path: &Path, doc: usize, item: Option<usize>, p: &ClusterProperty) {
        let converted = match convert_property(p) {
            Ok(Some(c)) => c,
            Ok(None) => {
                *self
                    .load
                    .skipped
                    .entry("about.k8s.io ClusterProperty (not one we read)".to_owned())
                    .or_default() += 1;
                return;
            }
            Err(e) => {
                let name = p.metadata.name.as_deref().unwrap_or_default();
                self.place_invalid |= name == PROPERTY_REGION || name == PROPERTY_ZONE;
                return self.convert_error(path, doc, item, &format!("ClusterProperty {name}"), e);
            }
        };
        let name = p.metadata.name.as_deref().unwrap_or_default();
        if !self.first_definition(
            "ClusterProperty",
            &ObjectKey::new("", name),
            path,
            doc,
            item,
        ) {
            return;
        }
        let place = &mut self.load.objects.place;
        match converted {
            Property::ClusterId(id) => self.load.objects.cluster_id = Some(id.into()),
            Property::Region(v) => place.region = Some(v),
            Property::Zone(v) => place.zone = Some(v),
        }
    }

    /// Makes the Services that a ServiceExport names MCS members; an export
    /// with no Service of its name is reported, as the MCS API's `Valid`
    /// condition would.
    fn join_exports(&mut self) {
        for (e, path, line, doc, item) in std::mem::take(&mut self.exports) {
            let key = e.key.clone();
            let join = |s: &mut Service| {
                s.mcs = Some(e.created);
                s.mcs_nearest = e.nearest;
                s.exported_meta.clone_from(&e.meta);
            };
            if let Some(s) = self.load.objects.services.get_mut(&key) {
                join(s);
            } else if let Some(mut s) = self.unexported.remove(&key) {
                join(&mut s);
                self.load.objects.services.insert(key, s);
            } else {
                self.line = line;
                self.problem(
                    &path,
                    Some(doc),
                    item,
                    Severity::Warning,
                    format!("ServiceExport {key} has no Service of the same namespace/name in this cluster directory; nothing is exported"),
                );
            }
        }
    }

    fn slice(
        &mut self,
        path: &Path,
        doc: usize,
        item: Option<usize>,
        converted: Result<Converted<Option<Slice>>, ConvertError>,
    ) {
        let converted = match converted {
            Ok(c) => c,
            Err(e) => return self.convert_error(path, doc, item, "EndpointSlice", e),
        };
        let adjustment = converted.adjustment();
        self.warnings(path, doc, item, adjustment, converted.warnings);
        if let Some(s) = converted.value
            && self.first_definition("EndpointSlice", &s.key, path, doc, item)
        {
            self.slices.push((s, path.to_owned(), self.line, doc, item));
        }
    }

    fn count(&mut self, adjustment: Adjustment, reason: Reason) {
        *self.load.adjusted.entry((adjustment, reason)).or_default() += 1;
    }

    /// Lists an object's warnings as problems, and counts them.
    fn warnings(
        &mut self,
        path: &Path,
        doc: usize,
        item: Option<usize>,
        adjustment: Adjustment,
        warnings: Vec<Warning>,
    ) {
        for w in warnings {
            self.count(adjustment, w.reason);
            self.problem(path, Some(doc), item, Severity::Warning, w.to_string());
        }
    }

    fn convert_error(
        &mut self,
        path: &Path,
        doc: usize,
        item: Option<usize>,
        kind: &str,
        e: ConvertError,
    ) {
        self.count(Adjustment::Skipped, e.reason());
        self.problem(
            path,
            Some(doc),
            item,
            Severity::Error,
            format!("{kind}: {e}"),
        );
    }

    fn finish(mut self) -> ClusterLoad {
        self.join_exports();
        if self.place_invalid {
            // As in live mode: half a place would be a guess.
            self.load.objects.place = Place::default();
        }
        // What no ServiceExport made a member is read and left out.
        self.load.not_exported += self.unexported.len();
        for (slice, path, line, doc, item) in std::mem::take(&mut self.slices) {
            self.line = line;
            let service = ObjectKey {
                namespace: slice.key.namespace.clone(),
                name: slice.service.clone(),
            };
            if self.load.objects.services.contains_key(&service) {
                self.load.objects.slices.insert(slice.key.clone(), slice);
            } else if !self.services_seen.contains(&service) {
                self.problem(
                    &path,
                    Some(doc),
                    item,
                    Severity::Warning,
                    format!("EndpointSlice {} belongs to Service {service}, which this cluster directory does not define", slice.key),
                );
            }
        }
        self.load
    }
}

/// Reads one cluster directory, taking from it what `trust` allows.
pub fn load_cluster(dir: &ClusterDir, local: bool, trust: &Trust) -> ClusterLoad {
    let (files, problems) = yaml_files(&dir.path);
    let mut reader = Reader {
        local,
        trust: trust.clone(),
        load: ClusterLoad {
            name: dir.name.clone(),
            path: dir.path.clone(),
            local,
            objects: ClusterObjects::default(),
            problems,
            skipped: BTreeMap::new(),
            adjusted: AdjustedCounts::new(),
            not_exported: 0,
            files: 0,
        },
        services_seen: BTreeSet::new(),
        origin: BTreeMap::new(),
        slices: Vec::new(),
        unexported: BTreeMap::new(),
        exports: Vec::new(),
        place_invalid: false,
        line: 1,
    };
    // Parsed and converted on every core, taken in in order.
    let parsed: Vec<ParsedFile> = files
        .par_iter()
        .map(|f| parse_file(f, local, trust))
        .collect();
    crate::memory::after_parallel_work();
    for file in parsed {
        reader.read_parsed(file);
    }
    reader.finish()
}

/// Reads the whole zones directory. `local` names the local cluster; every
/// cluster is held to the operator's `trust` settings (a zones directory
/// declares no per-cluster claims).
pub fn load_dir(
    root: &Path,
    local: Option<&str>,
    trust: &TrustSettings,
) -> Result<DirLoad, FileSourceError> {
    let (dirs, problems) = cluster_dirs(root)?;
    let trust = Trust::new(trust.clone(), Claims::default());
    let clusters = dirs
        .iter()
        .map(|d| load_cluster(d, Some(&*d.name) == local, &trust))
        .collect();
    Ok(DirLoad { clusters, problems })
}

/// Judges a cluster's services against `budget` (the oldest whose
/// endpoints fit are kept, [`crate::model::budget`]); the returned admission
/// says which are refused and what they hold.
fn admission(objects: &ClusterObjects, budget: Budget) -> Admission {
    let mut a = Admission::new();
    for (key, s) in &objects.services {
        a.service(key, s.created);
    }
    for slice in objects.slices.values() {
        let service = ObjectKey {
            namespace: slice.key.namespace.clone(),
            name: slice.service.clone(),
        };
        a.endpoints(&service, slice.endpoints.len() as isize);
    }
    a.rebudget(budget);
    a
}

/// The services `budget` refuses in `objects` (one walk of the
/// admission), and the report of it.
pub fn judge(objects: &ClusterObjects, budget: Budget) -> (BTreeSet<ObjectKey>, BudgetReport) {
    let admission = admission(objects, budget);
    let all = admission.refused_keys(usize::MAX);
    let report = BudgetReport {
        budget,
        refused: admission.refused(),
        refused_services: admission.listed().to_vec(),
    };
    (all.into_iter().collect(), report)
}

/// `objects` as the model holds them when `refused` services are refused:
/// flagged, and their EndpointSlices left out.
pub fn within_budget<'o>(
    objects: &'o ClusterObjects,
    refused: &BTreeSet<ObjectKey>,
) -> std::borrow::Cow<'o, ClusterObjects> {
    if refused.is_empty() {
        return std::borrow::Cow::Borrowed(objects);
    }
    let mut held = objects.clone();
    for key in refused {
        if let Some(s) = held.services.get_mut(key) {
            s.refused = true;
        }
    }
    held.slices.retain(|_, slice| {
        !refused.contains(&ObjectKey {
            namespace: slice.key.namespace.clone(),
            name: slice.service.clone(),
        })
    });
    std::borrow::Cow::Owned(held)
}

/// The events that turn `old` (nothing, for a new cluster) into `new`.
pub fn diff(cluster: &Arc<str>, old: &ClusterObjects, new: &ClusterObjects) -> Vec<Event> {
    let mut events = Vec::new();
    let c = || cluster.clone();
    for (k, s) in &new.services {
        if old.services.get(k) != Some(s) {
            events.push(Event::ServiceApplied {
                cluster: c(),
                service: s.clone(),
            });
        }
    }
    for k in old
        .services
        .keys()
        .filter(|k| !new.services.contains_key(*k))
    {
        events.push(Event::ServiceDeleted {
            cluster: c(),
            key: k.clone(),
        });
    }
    for (k, s) in &new.slices {
        if old.slices.get(k) != Some(s) {
            // No trigger time: a zones file holds no change in progress,
            // and what it was copied with is as old as the copy.
            events.push(Event::SliceApplied {
                cluster: c(),
                slice: s.clone(),
                trigger: None,
            });
        }
    }
    for k in old.slices.keys().filter(|k| !new.slices.contains_key(*k)) {
        events.push(Event::SliceDeleted {
            cluster: c(),
            key: k.clone(),
        });
    }
    for (k, m) in &new.mirrors {
        if old.mirrors.get(k) != Some(m) {
            events.push(Event::MirrorApplied {
                cluster: c(),
                mirror: m.clone(),
            });
        }
    }
    for k in old.mirrors.keys().filter(|k| !new.mirrors.contains_key(*k)) {
        events.push(Event::MirrorDeleted {
            cluster: c(),
            key: k.clone(),
        });
    }
    if old.gateway != new.gateway {
        events.push(Event::GatewayApplied {
            cluster: c(),
            gateway: new.gateway.clone(),
        });
    }
    if old.place != new.place {
        events.push(Event::PlaceApplied {
            cluster: c(),
            from: PlaceFrom::Property,
            place: new.place.clone(),
        });
    }
    diff_mcs(cluster, old, new, &mut events);
    events
}

/// The MCS part of [`diff`]: the cluster id, then the imports.
fn diff_mcs(
    cluster: &Arc<str>,
    old: &ClusterObjects,
    new: &ClusterObjects,
    events: &mut Vec<Event>,
) {
    let c = || cluster.clone();
    if old.cluster_id != new.cluster_id {
        events.push(Event::ClusterIdApplied {
            cluster: c(),
            id: new.cluster_id.clone(),
        });
    }
    for (k, i) in &new.imports {
        if old.imports.get(k) != Some(i) {
            events.push(Event::ImportApplied {
                cluster: c(),
                import: i.clone(),
            });
        }
    }
    for k in old.imports.keys().filter(|k| !new.imports.contains_key(*k)) {
        events.push(Event::ImportDeleted {
            cluster: c(),
            key: k.clone(),
        });
    }
}

/// The events that bring a freshly loaded cluster up: up, its objects,
/// synced.
pub fn initial_events(load: &ClusterLoad) -> Vec<Event> {
    initial_events_of(load, &load.objects)
}

/// [`initial_events`] with `objects` (the load's, within a budget).
pub fn initial_events_of(load: &ClusterLoad, objects: &ClusterObjects) -> Vec<Event> {
    let mut events = vec![Event::ClusterUp {
        cluster: load.name.clone(),
        local: load.local,
    }];
    events.extend(diff(&load.name, &ClusterObjects::default(), objects));
    events.push(Event::Health {
        cluster: load.name.clone(),
        health: Health {
            synced: true,
            ..Health::default()
        },
    });
    events
}

#[cfg(test)]
mod tests;
