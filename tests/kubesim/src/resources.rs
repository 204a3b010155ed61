//! The resources kubesim serves and the discovery documents that describe them (`/api`,
//! `/apis`, the group and group-version lists, `/version`).
//!
//! It owns the static facts about each resource (group, versions, kind, scope, subresources,
//! verbs, field selectors). It must not hold objects or know about HTTP.

use serde_json::{Value, json};

/// Verbs on a collection-or-item resource, in kube's discovery order.
const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// One served resource.
#[derive(Debug)]
pub struct ResourceDef {
    /// API group, `""` for core.
    pub group: &'static str,
    /// Served versions, the preferred (and storage) version first.
    pub versions: &'static [&'static str],
    /// Lower-case plural, the URL segment.
    pub plural: &'static str,
    /// Lower-case singular.
    pub singular: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// `kubectl` short names.
    pub short_names: &'static [&'static str],
    /// Versions that have a `/status` subresource.
    pub status_versions: &'static [&'static str],
    /// Whether `metadata.generation` is maintained (bumped on spec changes).
    pub generation: bool,
    /// Fields accepted in `fieldSelector`.
    pub field_selectors: &'static [&'static str],
    /// Whether this is a custom resource (no strategic merge patch, items carry apiVersion/kind).
    pub custom: bool,
    /// Discovery categories (`kubectl get <category>`), as the CRD's `names.categories`.
    pub categories: &'static [&'static str],
}

impl ResourceDef {
    /// The storage version.
    pub fn storage_version(&self) -> &'static str {
        self.versions[0]
    }

    /// `v1` or `discovery.k8s.io/v1`.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_owned()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// Whether `version` has the status subresource.
    pub fn has_status(&self, version: &str) -> bool {
        self.status_versions.contains(&version)
    }
}

const META: &[&str] = &["metadata.name", "metadata.namespace"];

/// Every resource kubesim serves. Index positions are stable and used as resource ids.
pub static RESOURCES: &[ResourceDef] = &[
    ResourceDef {
        group: "",
        versions: &["v1"],
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        status_versions: &["v1"],
        generation: false,
        field_selectors: &["metadata.name", "status.phase"],
        custom: false,
        categories: &[],
    },
    ResourceDef {
        group: "",
        versions: &["v1"],
        plural: "services",
        singular: "service",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        status_versions: &["v1"],
        generation: false,
        field_selectors: META,
        custom: false,
        categories: &[],
    },
    ResourceDef {
        group: "",
        versions: &["v1"],
        plural: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        short_names: &[],
        status_versions: &[],
        generation: false,
        field_selectors: &["metadata.name", "metadata.namespace", "type"],
        custom: false,
        categories: &[],
    },
    ResourceDef {
        group: "",
        versions: &["v1"],
        plural: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        status_versions: &[],
        generation: false,
        field_selectors: META,
        custom: false,
        categories: &[],
    },
    ResourceDef {
        group: "",
        versions: &["v1"],
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        status_versions: &[],
        generation: false,
        field_selectors: &[
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "reason",
            "type",
        ],
        custom: false,
        categories: &[],
    },
    ResourceDef {
        group: "discovery.k8s.io",
        versions: &["v1"],
        plural: "endpointslices",
        singular: "endpointslice",
        kind: "EndpointSlice",
        namespaced: true,
        short_names: &[],
        status_versions: &[],
        generation: true,
        field_selectors: META,
        custom: false,
        categories: &[],
    },
    ResourceDef {
        group: "coordination.k8s.io",
        versions: &["v1"],
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        status_versions: &[],
        generation: false,
        field_selectors: META,
        custom: false,
        categories: &[],
    },
    ResourceDef {
        group: "events.k8s.io",
        versions: &["v1"],
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        status_versions: &[],
        generation: false,
        field_selectors: &["metadata.name", "metadata.namespace", "reason", "type"],
        custom: false,
        categories: &[],
    },
    ResourceDef {
        group: "multicluster.linkerd.io",
        versions: &["v1alpha3", "v1alpha2", "v1alpha1"],
        plural: "links",
        singular: "link",
        kind: "Link",
        namespaced: true,
        short_names: &[],
        status_versions: &["v1alpha3", "v1alpha2"],
        generation: true,
        field_selectors: META,
        custom: true,
        categories: &["linkerd"],
    },
    // The MCS API CRDs as kubernetes-sigs/mcs-api v0.5.0 installs them: v1alpha1 and v1beta1
    // served with the same schema, v1beta1 stored, a status subresource in both, no categories.
    ResourceDef {
        group: "multicluster.x-k8s.io",
        versions: &["v1beta1", "v1alpha1"],
        plural: "serviceexports",
        singular: "serviceexport",
        kind: "ServiceExport",
        namespaced: true,
        short_names: &["svcex", "svcexport"],
        status_versions: &["v1beta1", "v1alpha1"],
        generation: true,
        field_selectors: META,
        custom: true,
        categories: &[],
    },
    ResourceDef {
        group: "multicluster.x-k8s.io",
        versions: &["v1beta1", "v1alpha1"],
        plural: "serviceimports",
        singular: "serviceimport",
        kind: "ServiceImport",
        namespaced: true,
        short_names: &["svcim", "svcimport"],
        status_versions: &["v1beta1", "v1alpha1"],
        generation: true,
        field_selectors: META,
        custom: true,
        categories: &[],
    },
    // KEP-2149's ClusterProperty as kubernetes-sigs/about-api's CRD installs it: cluster-scoped,
    // v1beta1 stored, v1alpha1 still served, category `multicluster`.
    ResourceDef {
        group: "about.k8s.io",
        versions: &["v1beta1", "v1alpha1"],
        plural: "clusterproperties",
        singular: "clusterproperty",
        kind: "ClusterProperty",
        namespaced: false,
        short_names: &[],
        status_versions: &["v1beta1", "v1alpha1"],
        generation: true,
        field_selectors: META,
        custom: true,
        categories: &["multicluster"],
    },
];

/// Index of the Namespace resource in [`RESOURCES`].
pub const NAMESPACES: usize = 0;
/// Index of the Service resource in [`RESOURCES`].
pub const SERVICES: usize = 1;
/// Index of the EndpointSlice resource in [`RESOURCES`].
pub const ENDPOINTSLICES: usize = 5;
/// Index of the Link resource in [`RESOURCES`].
pub const LINKS: usize = 8;
/// Index of the ServiceExport resource in [`RESOURCES`].
pub const SERVICEEXPORTS: usize = 9;
/// Index of the ServiceImport resource in [`RESOURCES`].
pub const SERVICEIMPORTS: usize = 10;
/// Index of the ClusterProperty resource in [`RESOURCES`].
pub const CLUSTERPROPERTIES: usize = 11;

/// Finds a resource by group, version and plural.
pub fn find(group: &str, version: &str, plural: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.plural == plural && r.versions.contains(&version))
}

/// Finds a resource by group, version and kind (or lower-case plural), for callers that name
/// objects as manifests do rather than as URLs do.
pub fn find_kind(group: &str, version: &str, kind: &str) -> Option<usize> {
    RESOURCES.iter().position(|r| {
        r.group == group && (r.kind == kind || r.plural == kind) && r.versions.contains(&version)
    })
}

/// Groups other than core, in first-seen order.
fn groups() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in RESOURCES {
        if !r.group.is_empty() && !out.contains(&r.group) {
            out.push(r.group);
        }
    }
    out
}

fn group_versions(group: &str) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in RESOURCES.iter().filter(|r| r.group == group) {
        for v in r.versions {
            if !out.contains(v) {
                out.push(v);
            }
        }
    }
    out
}

/// `GET /api`.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn api_group(group: &str) -> Value {
    let versions: Vec<Value> = group_versions(group)
        .into_iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

/// `GET /apis`.
pub fn api_group_list() -> Value {
    let groups: Vec<Value> = groups().into_iter().map(api_group).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`, or None for an unknown group.
pub fn api_group_doc(group: &str) -> Option<Value> {
    if !groups().contains(&group) {
        return None;
    }
    let mut doc = api_group(group);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `GET /api/v1` or `GET /apis/<group>/<version>`, or None when nothing is served there.
pub fn api_resource_list(group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.versions.contains(&version))
    {
        let mut doc = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
        });
        if !r.short_names.is_empty() {
            doc["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            doc["categories"] = json!(r.categories);
        }
        resources.push(doc);
        if r.has_status(version) {
            resources.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

/// `GET /version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-kubesim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `GET /openapi/v3`: the index of group-version documents.
pub fn openapi_v3_root() -> Value {
    let mut paths = serde_json::Map::new();
    let mut seen: Vec<String> = Vec::new();
    for r in RESOURCES {
        for v in r.versions {
            let key = if r.group.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{}/{v}", r.group)
            };
            if !seen.contains(&key) {
                paths.insert(
                    key.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash=kubesim")}),
                );
                seen.push(key);
            }
        }
    }
    json!({"paths": paths})
}

/// `GET /openapi/v3/api/v1` or `/openapi/v3/apis/<group>/<version>`: a document with one
/// operation per resource path, carrying the query parameters kube's PATCH, POST and PUT take.
/// It has no schemas: clients read it to learn which parameters (`fieldValidation`, `dryRun`)
/// the server supports, and kubesim validates server-side.
pub fn openapi_v3_group_version(group: &str, version: &str) -> Option<Value> {
    let params = json!([
        {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
        {"name": "force", "in": "query", "schema": {"type": "boolean"}},
    ]);
    let mut paths = serde_json::Map::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.versions.contains(&version))
    {
        let gvk = json!({"group": r.group, "version": version, "kind": r.kind});
        let op = |id: &str| {
            json!({"operationId": format!("{id}{}", r.kind), "parameters": params, "x-kubernetes-group-version-kind": gvk,
                   "responses": {"200": {"description": "OK"}}})
        };
        let base = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let scope = if r.namespaced {
            "/namespaces/{namespace}"
        } else {
            ""
        };
        paths.insert(
            format!("{base}{scope}/{}", r.plural),
            json!({"post": op("create")}),
        );
        paths.insert(
            format!("{base}{scope}/{}/{{name}}", r.plural),
            json!({"put": op("replace"), "patch": op("patch")}),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.33.0"}, "paths": paths}),
    )
}
