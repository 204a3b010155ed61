//! Role-based access control as kube-apiserver's RBAC authorizer applies it, fed from
//! YAML text that the caller has already read from files.
//!
//! This module owns decoding and validating Role, ClusterRole, RoleBinding and
//! ClusterRoleBinding objects (rbac.authorization.k8s.io/v1), ClusterRole aggregation,
//! the authorization decision, the discovery grants every authenticated user gets, and
//! the exact 403 message text. It identifies every rule ([`RuleId`]) so that tests can
//! report rules no request used.
//!
//! It must not do I/O, know about HTTP, or authenticate anyone: the caller says who the
//! user is ([`UserInfo`]) and what the request wants ([`Attributes`]).

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1 as rbacv1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use serde_json::{Map, Value};

use crate::kubemsg::{
    aggregate, dns1123_label_errors, dns1123_subdomain_errors, go_quote, go_string_slice, invalid,
    label_key_errors, label_value_errors,
};
use crate::selector::LabelSelector;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const BUILTIN_SOURCE: &str = "builtin";
/// Where a Role or RoleBinding without `metadata.namespace` lands, as with
/// `kubectl apply -f` against a context whose namespace is unset.
const DEFAULT_NAMESPACE: &str = "default";

/// The authenticated identity making a request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// User name, e.g. `alice` or `system:serviceaccount:ns:name`.
    pub name: String,
    /// Group names, e.g. `system:authenticated`.
    pub groups: Vec<String>,
}

/// What a request wants (kube's authorizer.Attributes, as much as RBAC needs).
/// `Some("")` means the same as `None`, as an empty string does in kube.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attributes {
    /// A request for an API resource.
    Resource {
        /// e.g. `get`, `list`, `watch`, `create`, `deletecollection`.
        verb: String,
        /// `""` for the core group.
        api_group: String,
        /// Plural resource name, e.g. `services`.
        resource: String,
        /// e.g. `status`, `scale`, `log`.
        subresource: Option<String>,
        /// None (or empty) for cluster-scoped requests.
        namespace: Option<String>,
        /// None for list, watch, create and deletecollection.
        name: Option<String>,
    },
    /// A request for a path outside the resource API, e.g. `/healthz`.
    NonResource {
        /// Lower-case HTTP verb, e.g. `get`.
        verb: String,
        /// The URL path.
        path: String,
    },
}

impl Attributes {
    fn namespace(&self) -> &str {
        match self {
            Attributes::Resource { namespace, .. } => namespace.as_deref().unwrap_or(""),
            Attributes::NonResource { .. } => "",
        }
    }
}

/// Identity of one PolicyRule: which file/document it came from, the role, the rule
/// index — so a later test can report rules no request used. `document` counts the
/// non-empty YAML documents of the source from 0; `rule` is the index in the role's
/// `rules` list.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId {
    /// The `source` given to [`Policy::add_yaml`], or `builtin`.
    pub source: String,
    /// Index of the YAML document within the source (items of a `List` share it).
    pub document: usize,
    /// `ClusterRole/<name>` or `Role/<namespace>/<name>`.
    pub role: String,
    /// Index of the rule within the role's `rules`.
    pub rule: usize,
}

/// The outcome of [`Policy::authorize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed by this rule; `None` for a `system:masters` member, who needs no rule.
    Allow(Option<RuleId>),
    /// No rule allows it; kube answers 403 with [`Policy::forbidden_message`].
    Deny,
}

/// Why YAML text could not be added to a [`Policy`]. Nothing from that text is added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RbacError {
    /// The text is not valid YAML.
    #[error("{file}: {message}")]
    Yaml {
        /// The source name given to [`Policy::add_yaml`].
        file: String,
        /// The YAML parser's description, with its location.
        message: String,
    },
    /// One document could not be decoded or fails kube's validation; `message` is the
    /// text kube-apiserver would answer when the object is applied.
    #[error("{file}: document {document}: {message}")]
    Document {
        /// The source name given to [`Policy::add_yaml`].
        file: String,
        /// Index of the non-empty YAML document, counting from 0.
        document: usize,
        /// e.g. `ClusterRole.rbac.authorization.k8s.io "x" is invalid: ...`.
        message: String,
    },
}

/// A policy rule in the form the matcher needs, with its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    id: RuleId,
    verbs: Vec<String>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    non_resource_urls: Vec<String>,
}

impl Rule {
    fn new(id: RuleId, rule: &rbacv1::PolicyRule) -> Self {
        Rule {
            id,
            verbs: rule.verbs.clone(),
            api_groups: rule.api_groups.clone().unwrap_or_default(),
            resources: rule.resources.clone().unwrap_or_default(),
            resource_names: rule.resource_names.clone().unwrap_or_default(),
            non_resource_urls: rule.non_resource_urls.clone().unwrap_or_default(),
        }
    }

    /// The aggregation controller drops rules equal to one already collected.
    fn same_grant(&self, other: &Rule) -> bool {
        self.verbs == other.verbs
            && self.api_groups == other.api_groups
            && self.resources == other.resources
            && self.resource_names == other.resource_names
            && self.non_resource_urls == other.non_resource_urls
    }

    fn allows(&self, attrs: &Attributes) -> bool {
        let verb_matches = |verb: &str| self.verbs.iter().any(|v| v == "*" || v == verb);
        match attrs {
            Attributes::Resource {
                verb,
                api_group,
                resource,
                subresource,
                name,
                ..
            } => {
                let sub = subresource.as_deref().unwrap_or("");
                let combined = if sub.is_empty() {
                    resource.clone()
                } else {
                    format!("{resource}/{sub}")
                };
                let name = name.as_deref().unwrap_or("");
                verb_matches(verb)
                    && self.api_groups.iter().any(|g| g == "*" || g == api_group)
                    && self.resources.iter().any(|r| {
                        r == "*"
                            || *r == combined
                            || (!sub.is_empty() && r.strip_prefix("*/") == Some(sub))
                    })
                    // A request without a name matches only a rule without resourceNames
                    // (or, as in kube, one listing the empty name).
                    && (self.resource_names.is_empty()
                        || self.resource_names.iter().any(|n| n == name))
            }
            Attributes::NonResource { verb, path } => {
                verb_matches(verb)
                    && self.non_resource_urls.iter().any(|u| {
                        u == "*"
                            || u == path
                            || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*')))
                    })
            }
        }
    }
}

#[derive(Debug, Clone)]
struct ClusterRoleEntry {
    labels: BTreeMap<String, String>,
    /// The rules written in the object; ignored when `aggregation` is set, because kube's
    /// aggregation controller overwrites them.
    rules: Vec<Rule>,
    aggregation: Option<Vec<LabelSelector>>,
}

#[derive(Debug, Clone)]
struct SubjectEntry {
    kind: String,
    name: String,
    namespace: String,
}

#[derive(Debug, Clone)]
struct Binding {
    role_kind: String,
    role_name: String,
    subjects: Vec<SubjectEntry>,
}

/// A decoded, validated object waiting to be committed.
enum Object {
    ClusterRole(rbacv1::ClusterRole, usize),
    Role(rbacv1::Role, usize),
    ClusterRoleBinding(rbacv1::ClusterRoleBinding),
    RoleBinding(rbacv1::RoleBinding),
}

/// A set of RBAC objects and the decisions they imply.
///
/// [`Policy::default`] already holds kube's discovery grants for authenticated users
/// (ClusterRoles and ClusterRoleBindings `system:discovery`, `system:basic-user` and
/// `system:public-info-viewer`, source `builtin`). Objects added later replace earlier
/// ones of the same kind, namespace and name, as `kubectl apply` would.
#[derive(Debug, Clone)]
pub struct Policy {
    cluster_roles: BTreeMap<String, ClusterRoleEntry>,
    roles: BTreeMap<String, BTreeMap<String, Vec<Rule>>>,
    cluster_role_bindings: BTreeMap<String, Binding>,
    role_bindings: BTreeMap<String, BTreeMap<String, Binding>>,
    /// Each ClusterRole's rules after aggregation, recomputed whenever objects change.
    effective: BTreeMap<String, Vec<Rule>>,
}

impl Default for Policy {
    fn default() -> Self {
        let mut policy = Policy {
            cluster_roles: BTreeMap::new(),
            roles: BTreeMap::new(),
            cluster_role_bindings: BTreeMap::new(),
            role_bindings: BTreeMap::new(),
            effective: BTreeMap::new(),
        };
        policy.add_builtin();
        policy.resolve_aggregation();
        policy
    }
}

impl Policy {
    /// Adds every Role, ClusterRole, RoleBinding and ClusterRoleBinding
    /// (rbac.authorization.k8s.io/v1) found in a multi-document YAML text, also inside
    /// `kind: List` (and `RoleList`-style) items; other kinds are skipped. `source` names
    /// the file in errors and [`RuleId`]s. Documents are decoded as kube does with strict
    /// field validation (unknown fields are errors), defaulted and validated like
    /// kube-apiserver; the first bad document fails the whole text and nothing is added.
    /// Returns the number of RBAC objects added.
    pub fn add_yaml(&mut self, source: &str, text: &str) -> Result<usize, RbacError> {
        // Without the snippet the parser's message is one line naming line and column.
        let options = serde_saphyr::options! { with_snippet: false };
        let docs: Vec<Value> =
            serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
                RbacError::Yaml {
                    file: source.to_string(),
                    message: e.to_string(),
                }
            })?;
        let mut objects = Vec::new();
        for (document, doc) in docs.iter().enumerate() {
            decode(doc, "", document, &mut objects).map_err(|message| RbacError::Document {
                file: source.to_string(),
                document,
                message,
            })?;
        }
        let added = objects.len();
        for object in objects {
            self.insert(source, object);
        }
        self.resolve_aggregation();
        Ok(added)
    }

    /// Decides a request with kube's RBAC semantics: `system:masters` is always allowed;
    /// ClusterRoleBindings grant everywhere, RoleBindings only in their namespace; rules
    /// are checked in a deterministic order (ClusterRoleBindings by name, then the
    /// namespace's RoleBindings by name, each role's rules in order) and the first
    /// matching rule is returned.
    pub fn authorize(&self, user: &UserInfo, attrs: &Attributes) -> Decision {
        self.evaluate(user, attrs).0
    }

    /// The exact Status message kube-apiserver sends with a 403 for this request under
    /// this policy: [`forbidden_message`] plus, when a binding that applies to the user
    /// refers to a role that does not exist, kube's `: RBAC: ... not found` reason.
    pub fn forbidden_message(&self, user: &UserInfo, attrs: &Attributes) -> String {
        let (_, errors) = self.evaluate(user, attrs);
        let message = forbidden_message(user, attrs);
        if errors.is_empty() {
            message
        } else {
            format!("{message}: RBAC: {}", aggregate(errors))
        }
    }

    /// Every rule loaded, sorted, for coverage reports. Rules written inside an
    /// aggregated ClusterRole are left out: kube replaces them, so no request can use
    /// them; aggregated permissions are reported under the ClusterRole that defines them.
    pub fn rules(&self) -> Vec<RuleId> {
        let mut ids: Vec<RuleId> = self
            .cluster_roles
            .values()
            .filter(|role| role.aggregation.is_none())
            .flat_map(|role| role.rules.iter().map(|r| r.id.clone()))
            .chain(
                self.roles
                    .values()
                    .flat_map(BTreeMap::values)
                    .flatten()
                    .map(|r| r.id.clone()),
            )
            .collect();
        ids.sort();
        ids
    }

    /// The decision plus the role-resolution errors met on the way, in visiting order,
    /// as kube's authorizer collects them for its denial reason.
    fn evaluate(&self, user: &UserInfo, attrs: &Attributes) -> (Decision, Vec<String>) {
        if user.groups.iter().any(|g| g == "system:masters") {
            return (Decision::Allow(None), Vec::new());
        }
        let mut errors = Vec::new();
        for binding in self.cluster_role_bindings.values() {
            if !applies(user, &binding.subjects, "") {
                continue;
            }
            match self.role_rules(binding, "") {
                Ok(rules) => {
                    if let Some(rule) = rules.iter().find(|r| r.allows(attrs)) {
                        return (Decision::Allow(Some(rule.id.clone())), errors);
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        let namespace = attrs.namespace();
        if !namespace.is_empty() {
            for binding in self
                .role_bindings
                .get(namespace)
                .into_iter()
                .flat_map(BTreeMap::values)
            {
                if !applies(user, &binding.subjects, namespace) {
                    continue;
                }
                match self.role_rules(binding, namespace) {
                    Ok(rules) => {
                        if let Some(rule) = rules.iter().find(|r| r.allows(attrs)) {
                            return (Decision::Allow(Some(rule.id.clone())), errors);
                        }
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        (Decision::Deny, errors)
    }

    fn role_rules(&self, binding: &Binding, namespace: &str) -> Result<&[Rule], String> {
        match binding.role_kind.as_str() {
            "Role" => self
                .roles
                .get(namespace)
                .and_then(|roles| roles.get(&binding.role_name))
                .map(Vec::as_slice)
                .ok_or_else(|| {
                    format!(
                        "role.{RBAC_GROUP} {} not found",
                        go_quote(&binding.role_name)
                    )
                }),
            "ClusterRole" => self
                .effective
                .get(&binding.role_name)
                .map(Vec::as_slice)
                .ok_or_else(|| {
                    format!(
                        "clusterrole.{RBAC_GROUP} {} not found",
                        go_quote(&binding.role_name)
                    )
                }),
            other => Err(format!(
                "unsupported role reference kind: {}",
                go_quote(other)
            )),
        }
    }

    fn insert(&mut self, source: &str, object: Object) {
        let id = |document: usize, role: String, rule: usize| RuleId {
            source: source.to_string(),
            document,
            role,
            rule,
        };
        match object {
            Object::ClusterRole(role, document) => {
                let name = role.metadata.name.clone().unwrap_or_default();
                let rules = role
                    .rules
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, r)| Rule::new(id(document, format!("ClusterRole/{name}"), i), r))
                    .collect();
                // Selectors were converted successfully during validation.
                let aggregation = role.aggregation_rule.as_ref().map(|agg| {
                    agg.cluster_role_selectors
                        .iter()
                        .flatten()
                        .filter_map(|s| LabelSelector::from_k8s(s).ok())
                        .collect()
                });
                self.cluster_roles.insert(
                    name,
                    ClusterRoleEntry {
                        labels: role.metadata.labels.clone().unwrap_or_default(),
                        rules,
                        aggregation,
                    },
                );
            }
            Object::Role(role, document) => {
                let name = role.metadata.name.clone().unwrap_or_default();
                let namespace = namespace_of(&role.metadata);
                let rules = role
                    .rules
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(|(i, r)| Rule::new(id(document, format!("Role/{namespace}/{name}"), i), r))
                    .collect();
                self.roles.entry(namespace).or_default().insert(name, rules);
            }
            Object::ClusterRoleBinding(binding) => {
                let name = binding.metadata.name.clone().unwrap_or_default();
                self.cluster_role_bindings.insert(
                    name,
                    to_binding(&binding.role_ref, binding.subjects.as_deref()),
                );
            }
            Object::RoleBinding(binding) => {
                let name = binding.metadata.name.clone().unwrap_or_default();
                let namespace = namespace_of(&binding.metadata);
                self.role_bindings.entry(namespace).or_default().insert(
                    name,
                    to_binding(&binding.role_ref, binding.subjects.as_deref()),
                );
            }
        }
    }

    /// kube's built-in discovery grants, bound the way kube-apiserver bootstraps them.
    fn add_builtin(&mut self) {
        let rule = |document: usize,
                    role: &str,
                    index: usize,
                    verbs: &[&str],
                    groups: &[&str],
                    resources: &[&str],
                    urls: &[&str]| Rule {
            id: RuleId {
                source: BUILTIN_SOURCE.to_string(),
                document,
                role: format!("ClusterRole/{role}"),
                rule: index,
            },
            verbs: strings(verbs),
            api_groups: strings(groups),
            resources: strings(resources),
            resource_names: Vec::new(),
            non_resource_urls: strings(urls),
        };
        let builtin_roles = [
            (
                "system:discovery",
                vec![rule(
                    0,
                    "system:discovery",
                    0,
                    &["get"],
                    &[],
                    &[],
                    &[
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ],
                )],
                &["system:authenticated"][..],
            ),
            (
                "system:basic-user",
                vec![
                    rule(
                        1,
                        "system:basic-user",
                        0,
                        &["create"],
                        &["authorization.k8s.io"],
                        &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                        &[],
                    ),
                    rule(
                        1,
                        "system:basic-user",
                        1,
                        &["create"],
                        &["authentication.k8s.io"],
                        &["selfsubjectreviews"],
                        &[],
                    ),
                ],
                &["system:authenticated"][..],
            ),
            (
                "system:public-info-viewer",
                vec![rule(
                    2,
                    "system:public-info-viewer",
                    0,
                    &["get"],
                    &[],
                    &[],
                    &["/healthz", "/livez", "/readyz", "/version", "/version/"],
                )],
                &["system:authenticated", "system:unauthenticated"][..],
            ),
        ];
        for (name, rules, groups) in builtin_roles {
            self.cluster_roles.insert(
                name.to_string(),
                ClusterRoleEntry {
                    labels: BTreeMap::from([(
                        "kubernetes.io/bootstrapping".to_string(),
                        "rbac-defaults".to_string(),
                    )]),
                    rules,
                    aggregation: None,
                },
            );
            self.cluster_role_bindings.insert(
                name.to_string(),
                Binding {
                    role_kind: "ClusterRole".to_string(),
                    role_name: name.to_string(),
                    subjects: groups
                        .iter()
                        .map(|g| SubjectEntry {
                            kind: "Group".to_string(),
                            name: g.to_string(),
                            namespace: String::new(),
                        })
                        .collect(),
                },
            );
        }
    }

    fn resolve_aggregation(&mut self) {
        let mut effective = BTreeMap::new();
        for name in self.cluster_roles.keys() {
            effective.insert(name.clone(), self.resolve(name, &mut Vec::new()));
        }
        self.effective = effective;
    }

    /// Mirrors kube's aggregation controller: for each selector in order, the matching
    /// ClusterRoles sorted by name (never the role itself), their rules appended unless
    /// an equal rule is already there. Aggregated roles contribute their own aggregated
    /// rules, as they do once the controller has settled; cycles are cut by skipping
    /// roles already being resolved.
    fn resolve(&self, name: &str, visiting: &mut Vec<String>) -> Vec<Rule> {
        let Some(role) = self.cluster_roles.get(name) else {
            return Vec::new();
        };
        let Some(selectors) = &role.aggregation else {
            return role.rules.clone();
        };
        visiting.push(name.to_string());
        let mut out: Vec<Rule> = Vec::new();
        for selector in selectors {
            for (other_name, other) in &self.cluster_roles {
                if other_name == name || visiting.contains(other_name) {
                    continue;
                }
                if !selector.matches_with(|k| other.labels.get(k).map(String::as_str)) {
                    continue;
                }
                for rule in self.resolve(other_name, visiting) {
                    if !out.iter().any(|r| r.same_grant(&rule)) {
                        out.push(rule);
                    }
                }
            }
        }
        visiting.pop();
        out
    }
}

/// The exact Status message kube-apiserver sends with a 403 for this request, e.g.
/// `services is forbidden: User "system:serviceaccount:a:b" cannot list resource "services" in API group "" in the namespace "default"`,
/// `services "web" is forbidden: User "u" cannot get resource "services" in API group "" in the namespace "default"`,
/// `endpointslices.discovery.k8s.io is forbidden: ... at the cluster scope`, subresources as
/// `resource "services/status"`, non-resource `forbidden: User "u" cannot get path "/foo"`.
/// Like kube, `&`, `<` and `>` in the part after the prefix are HTML-escaped.
pub fn forbidden_message(user: &UserInfo, attrs: &Attributes) -> String {
    match attrs {
        Attributes::NonResource { verb, path } => format!(
            "forbidden: {}",
            sanitize(&format!(
                "User {} cannot {verb} path {}",
                go_quote(&user.name),
                go_quote(path)
            ))
        ),
        Attributes::Resource {
            verb,
            api_group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let group_resource = if api_group.is_empty() {
                resource.clone()
            } else {
                format!("{resource}.{api_group}")
            };
            let name = name.as_deref().unwrap_or("");
            let prefix = if api_group.is_empty() && resource.is_empty() {
                "forbidden".to_string()
            } else if name.is_empty() {
                format!("{group_resource} is forbidden")
            } else {
                format!("{group_resource} {} is forbidden", go_quote(name))
            };
            let full_resource = match subresource.as_deref() {
                Some(sub) if !sub.is_empty() => format!("{resource}/{sub}"),
                _ => resource.clone(),
            };
            let scope = match namespace.as_deref() {
                Some(ns) if !ns.is_empty() => format!("in the namespace {}", go_quote(ns)),
                _ => "at the cluster scope".to_string(),
            };
            let body = format!(
                "User {} cannot {verb} resource {} in API group {} {scope}",
                go_quote(&user.name),
                go_quote(&full_resource),
                go_quote(api_group),
            );
            format!("{prefix}: {}", sanitize(&body))
        }
    }
}

/// kube escapes these so that the message cannot pass for HTML.
fn sanitize(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(ToString::to_string).collect()
}

fn namespace_of(meta: &metav1::ObjectMeta) -> String {
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => DEFAULT_NAMESPACE.to_string(),
    }
}

fn to_binding(role_ref: &rbacv1::RoleRef, subjects: Option<&[rbacv1::Subject]>) -> Binding {
    Binding {
        role_kind: role_ref.kind.clone(),
        role_name: role_ref.name.clone(),
        subjects: subjects
            .unwrap_or_default()
            .iter()
            .map(|s| SubjectEntry {
                kind: s.kind.clone(),
                name: s.name.clone(),
                namespace: s.namespace.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

/// kube's `appliesTo`: a ServiceAccount subject without a namespace means one in the
/// binding's namespace, and never applies through a ClusterRoleBinding.
fn applies(user: &UserInfo, subjects: &[SubjectEntry], binding_namespace: &str) -> bool {
    subjects.iter().any(|s| match s.kind.as_str() {
        "User" => user.name == s.name,
        "Group" => user.groups.contains(&s.name),
        "ServiceAccount" => {
            let namespace = if s.namespace.is_empty() {
                binding_namespace
            } else {
                &s.namespace
            };
            !namespace.is_empty()
                && user.name == format!("system:serviceaccount:{namespace}:{}", s.name)
        }
        _ => false,
    })
}

// ---------------------------------------------------------------------------------------
// Decoding and validation
// ---------------------------------------------------------------------------------------

const RBAC_KINDS: [&str; 4] = ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"];

fn decode(doc: &Value, prefix: &str, document: usize, out: &mut Vec<Object>) -> Result<(), String> {
    let Some(object) = doc.as_object() else {
        return Ok(());
    };
    let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or("");
    let api_version = text("apiVersion");
    let kind = text("kind");

    if let (Some(item_kind), Some(Value::Array(items))) =
        (kind.strip_suffix("List"), object.get("items"))
    {
        return decode_list(api_version, item_kind, items, prefix, document, out);
    }

    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    if group != RBAC_GROUP || !RBAC_KINDS.contains(&kind) {
        return Ok(());
    }
    if version != "v1" {
        // kube-apiserver serves RBAC only as v1 since 1.22, so kubectl refuses these.
        return Err(format!(
            "{prefix}no matches for kind {} in version {}",
            go_quote(kind),
            go_quote(api_version)
        ));
    }

    let unknown = unknown_fields(kind, object);
    if !unknown.is_empty() {
        let list: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field {}", go_quote(f)))
            .collect();
        return Err(format!(
            "{prefix}{kind} in version \"v1\" cannot be handled as a {kind}: strict decoding error: {}",
            list.join(", ")
        ));
    }

    let (name, errors, decoded) = decode_v1(kind, doc, prefix, document)?;
    if !errors.is_empty() {
        return Err(format!(
            "{prefix}{kind}.{RBAC_GROUP} {} is invalid: {}",
            go_quote(name.as_deref().unwrap_or("")),
            aggregate(errors)
        ));
    }
    out.push(decoded);
    Ok(())
}

/// Decodes the items of a `List` or of a typed list (`RoleList`: `item_kind` is `Role`) in
/// document `document`, each with `items[i]` in its errors.
fn decode_list(
    api_version: &str,
    item_kind: &str,
    items: &[Value],
    prefix: &str,
    document: usize,
    out: &mut Vec<Object>,
) -> Result<(), String> {
    for (i, item) in items.iter().enumerate() {
        let mut item = item.clone();
        // Items of a typed list (e.g. RoleList) may omit their own apiVersion and kind.
        if let Value::Object(fields) = &mut item
            && RBAC_KINDS.contains(&item_kind)
        {
            fields
                .entry("apiVersion")
                .or_insert_with(|| Value::String(api_version.to_string()));
            fields
                .entry("kind")
                .or_insert_with(|| Value::String(item_kind.to_string()));
        }
        decode(&item, &format!("{prefix}items[{i}]: "), document, out)?;
    }
    Ok(())
}

/// Decodes an rbac.authorization.k8s.io/v1 object of `kind` (one of [`RBAC_KINDS`]), with
/// kube's defaults: its name, what validation finds wrong with it, and the object.
fn decode_v1(
    kind: &str,
    doc: &Value,
    prefix: &str,
    document: usize,
) -> Result<(Option<String>, Vec<String>, Object), String> {
    let cannot_handle = |e: serde_json::Error| {
        format!("{prefix}{kind} in version \"v1\" cannot be handled as a {kind}: {e}")
    };
    Ok(match kind {
        "ClusterRole" => {
            let role: rbacv1::ClusterRole =
                serde_json::from_value(doc.clone()).map_err(cannot_handle)?;
            let errors = validate_cluster_role(&role);
            (
                role.metadata.name.clone(),
                errors,
                Object::ClusterRole(role, document),
            )
        }
        "Role" => {
            let mut role: rbacv1::Role =
                serde_json::from_value(doc.clone()).map_err(cannot_handle)?;
            default_namespace(&mut role.metadata);
            let errors = validate_role(&role);
            (
                role.metadata.name.clone(),
                errors,
                Object::Role(role, document),
            )
        }
        "ClusterRoleBinding" => {
            let mut binding: rbacv1::ClusterRoleBinding =
                serde_json::from_value(doc.clone()).map_err(cannot_handle)?;
            default_binding(&mut binding.role_ref, binding.subjects.as_deref_mut());
            let errors = validate_binding(
                &binding.metadata,
                &binding.role_ref,
                binding.subjects.as_deref(),
                false,
            );
            (
                binding.metadata.name.clone(),
                errors,
                Object::ClusterRoleBinding(binding),
            )
        }
        _ => {
            let mut binding: rbacv1::RoleBinding =
                serde_json::from_value(doc.clone()).map_err(cannot_handle)?;
            default_namespace(&mut binding.metadata);
            default_binding(&mut binding.role_ref, binding.subjects.as_deref_mut());
            let errors = validate_binding(
                &binding.metadata,
                &binding.role_ref,
                binding.subjects.as_deref(),
                true,
            );
            (
                binding.metadata.name.clone(),
                errors,
                Object::RoleBinding(binding),
            )
        }
    })
}

fn default_namespace(meta: &mut metav1::ObjectMeta) {
    if meta.namespace.as_deref().unwrap_or("").is_empty() {
        meta.namespace = Some(DEFAULT_NAMESPACE.to_string());
    }
}

/// kube's v1 defaulting for bindings.
fn default_binding(role_ref: &mut rbacv1::RoleRef, subjects: Option<&mut [rbacv1::Subject]>) {
    if role_ref.api_group.is_empty() {
        role_ref.api_group = RBAC_GROUP.to_string();
    }
    for subject in subjects.into_iter().flatten() {
        if subject.api_group.as_deref().unwrap_or("").is_empty()
            && matches!(subject.kind.as_str(), "User" | "Group")
        {
            subject.api_group = Some(RBAC_GROUP.to_string());
        }
    }
}

const OBJECT_META_FIELDS: &[&str] = &[
    "annotations",
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "labels",
    "managedFields",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
];
const POLICY_RULE_FIELDS: &[&str] = &[
    "apiGroups",
    "nonResourceURLs",
    "resourceNames",
    "resources",
    "verbs",
];

/// Fields kube's strict decoding would reject, as dotted paths.
fn unknown_fields(kind: &str, object: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    let top: &[&str] = match kind {
        "Role" => &["apiVersion", "kind", "metadata", "rules"],
        "ClusterRole" => &["apiVersion", "kind", "metadata", "rules", "aggregationRule"],
        _ => &["apiVersion", "kind", "metadata", "roleRef", "subjects"],
    };
    check_fields(object, top, "", &mut out);
    let child = |key: &str| object.get(key);
    if let Some(Value::Object(meta)) = child("metadata") {
        check_fields(meta, OBJECT_META_FIELDS, "metadata.", &mut out);
    }
    for (i, rule) in items(child("rules")) {
        check_fields(rule, POLICY_RULE_FIELDS, &format!("rules[{i}]."), &mut out);
    }
    if let Some(Value::Object(agg)) = child("aggregationRule") {
        check_fields(agg, &["clusterRoleSelectors"], "aggregationRule.", &mut out);
        for (i, selector) in items(agg.get("clusterRoleSelectors")) {
            let path = format!("aggregationRule.clusterRoleSelectors[{i}].");
            check_fields(
                selector,
                &["matchExpressions", "matchLabels"],
                &path,
                &mut out,
            );
            for (j, expr) in items(selector.get("matchExpressions")) {
                check_fields(
                    expr,
                    &["key", "operator", "values"],
                    &format!("{path}matchExpressions[{j}]."),
                    &mut out,
                );
            }
        }
    }
    if let Some(Value::Object(role_ref)) = child("roleRef") {
        check_fields(
            role_ref,
            &["apiGroup", "kind", "name"],
            "roleRef.",
            &mut out,
        );
    }
    for (i, subject) in items(child("subjects")) {
        check_fields(
            subject,
            &["apiGroup", "kind", "name", "namespace"],
            &format!("subjects[{i}]."),
            &mut out,
        );
    }
    out
}

fn items(value: Option<&Value>) -> impl Iterator<Item = (usize, &Map<String, Value>)> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, v)| v.as_object().map(|o| (i, o)))
}

fn check_fields(object: &Map<String, Value>, known: &[&str], path: &str, out: &mut Vec<String>) {
    for key in object.keys() {
        if !known.contains(&key.as_str()) {
            out.push(format!("{path}{key}"));
        }
    }
}

fn required(path: &str, detail: &str) -> String {
    if detail.is_empty() {
        format!("{path}: Required value")
    } else {
        format!("{path}: Required value: {detail}")
    }
}

fn not_supported(path: &str, value: &str, supported: &[&str]) -> String {
    let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
    format!(
        "{path}: Unsupported value: {}: supported values: {}",
        go_quote(value),
        quoted.join(", ")
    )
}

/// kube's `path.IsValidPathSegmentName`, which is all RBAC asks of names.
fn path_segment_errors(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| name.contains(*bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

fn validate_meta(meta: &metav1::ObjectMeta, namespaced: bool, errs: &mut Vec<String>) {
    match meta.name.as_deref() {
        None | Some("") => errs.push(required(
            "metadata.name",
            "name or generateName is required",
        )),
        Some(name) => {
            for msg in path_segment_errors(name) {
                errs.push(invalid("metadata.name", &go_quote(name), &msg));
            }
        }
    }
    if namespaced {
        let namespace = meta.namespace.as_deref().unwrap_or("");
        for msg in dns1123_label_errors(namespace) {
            errs.push(invalid("metadata.namespace", &go_quote(namespace), &msg));
        }
    }
    for (key, value) in meta.labels.iter().flatten() {
        for msg in label_key_errors(key) {
            errs.push(invalid("metadata.labels", &go_quote(key), &msg));
        }
        for msg in label_value_errors(value) {
            errs.push(invalid("metadata.labels", &go_quote(value), &msg));
        }
    }
}

fn validate_rules(rules: Option<&[rbacv1::PolicyRule]>, namespaced: bool, errs: &mut Vec<String>) {
    for (i, rule) in rules.unwrap_or_default().iter().enumerate() {
        let path = format!("rules[{i}]");
        if rule.verbs.is_empty() {
            errs.push(required(
                &format!("{path}.verbs"),
                "verbs must contain at least one value",
            ));
        }
        let len = |v: &Option<Vec<String>>| v.as_ref().map_or(0, Vec::len);
        if let Some(urls) = rule.non_resource_urls.as_ref().filter(|u| !u.is_empty()) {
            let urls_path = format!("{path}.nonResourceURLs");
            if namespaced {
                errs.push(invalid(
                    &urls_path,
                    &go_string_slice(urls),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if len(&rule.api_groups) + len(&rule.resources) + len(&rule.resource_names) > 0 {
                errs.push(invalid(
                    &urls_path,
                    &go_string_slice(urls),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if len(&rule.api_groups) == 0 {
            errs.push(required(
                &format!("{path}.apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if len(&rule.resources) == 0 {
            errs.push(required(
                &format!("{path}.resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
}

fn validate_role(role: &rbacv1::Role) -> Vec<String> {
    let mut errs = Vec::new();
    validate_meta(&role.metadata, true, &mut errs);
    validate_rules(role.rules.as_deref(), true, &mut errs);
    errs
}

fn validate_cluster_role(role: &rbacv1::ClusterRole) -> Vec<String> {
    let mut errs = Vec::new();
    validate_meta(&role.metadata, false, &mut errs);
    validate_rules(role.rules.as_deref(), false, &mut errs);
    if let Some(agg) = &role.aggregation_rule {
        let selectors = agg.cluster_role_selectors.as_deref().unwrap_or_default();
        if selectors.is_empty() {
            errs.push(required(
                "aggregationRule.clusterRoleSelectors",
                "at least one clusterRoleSelector required if aggregationRule is non-nil",
            ));
        }
        for (i, selector) in selectors.iter().enumerate() {
            let path = format!("aggregationRule.clusterRoleSelectors[{i}]");
            validate_label_selector(selector, &path, &mut errs);
            if LabelSelector::from_k8s(selector).is_err() {
                // kube prints the failed conversion's nil result as "null".
                errs.push(invalid(&path, "\"null\"", "invalid label selector."));
            }
        }
    }
    errs
}

/// kube's `ValidateLabelSelector`.
fn validate_label_selector(selector: &metav1::LabelSelector, path: &str, errs: &mut Vec<String>) {
    let labels_path = format!("{path}.matchLabels");
    for (key, value) in selector.match_labels.iter().flatten() {
        for msg in label_key_errors(key) {
            errs.push(invalid(&labels_path, &go_quote(key), &msg));
        }
        for msg in label_value_errors(value) {
            errs.push(invalid(&labels_path, &go_quote(value), &msg));
        }
    }
    for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
        let expr_path = format!("{path}.matchExpressions[{i}]");
        let values = expr.values.as_deref().unwrap_or_default();
        match expr.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(required(
                &format!("{expr_path}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(format!(
                "{expr_path}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.push(invalid(
                &format!("{expr_path}.operator"),
                &go_quote(other),
                "not a valid selector operator",
            )),
        }
        for msg in label_key_errors(&expr.key) {
            errs.push(invalid(
                &format!("{expr_path}.key"),
                &go_quote(&expr.key),
                &msg,
            ));
        }
        for (j, value) in values.iter().enumerate() {
            for msg in label_value_errors(value) {
                errs.push(invalid(
                    &format!("{expr_path}.values[{j}]"),
                    &go_quote(value),
                    &msg,
                ));
            }
        }
    }
}

fn validate_binding(
    meta: &metav1::ObjectMeta,
    role_ref: &rbacv1::RoleRef,
    subjects: Option<&[rbacv1::Subject]>,
    namespaced: bool,
) -> Vec<String> {
    let mut errs = Vec::new();
    validate_meta(meta, namespaced, &mut errs);
    if role_ref.api_group != RBAC_GROUP {
        errs.push(not_supported(
            "roleRef.apiGroup",
            &role_ref.api_group,
            &[RBAC_GROUP],
        ));
    }
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kinds.contains(&role_ref.kind.as_str()) {
        errs.push(not_supported("roleRef.kind", &role_ref.kind, kinds));
    }
    if role_ref.name.is_empty() {
        errs.push(required("roleRef.name", ""));
    } else {
        for msg in path_segment_errors(&role_ref.name) {
            errs.push(invalid("roleRef.name", &go_quote(&role_ref.name), &msg));
        }
    }
    for (i, subject) in subjects.unwrap_or_default().iter().enumerate() {
        let path = format!("subjects[{i}]");
        if subject.name.is_empty() {
            errs.push(required(&format!("{path}.name"), ""));
        }
        let api_group = subject.api_group.as_deref().unwrap_or("");
        match subject.kind.as_str() {
            "ServiceAccount" => {
                if !subject.name.is_empty() {
                    for msg in dns1123_subdomain_errors(&subject.name) {
                        errs.push(invalid(
                            &format!("{path}.name"),
                            &go_quote(&subject.name),
                            &msg,
                        ));
                    }
                }
                if !api_group.is_empty() {
                    errs.push(not_supported(&format!("{path}.apiGroup"), api_group, &[""]));
                }
                if !namespaced && subject.namespace.as_deref().unwrap_or("").is_empty() {
                    errs.push(required(&format!("{path}.namespace"), ""));
                }
            }
            "User" | "Group" => {
                if api_group != RBAC_GROUP {
                    errs.push(not_supported(
                        &format!("{path}.apiGroup"),
                        api_group,
                        &[RBAC_GROUP],
                    ));
                }
            }
            other => errs.push(not_supported(
                &format!("{path}.kind"),
                other,
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
    errs
}

#[cfg(test)]
mod tests;
