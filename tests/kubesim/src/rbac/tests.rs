use super::*;

const FIXTURE: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: reader
rules:
- apiGroups: [""]
  resources: ["services", "pods/log"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["apps"]
  resources: ["deployments", "deployments/scale"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: named-configmap
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  resourceNames: ["settings"]
  verbs: ["get", "list", "watch", "update", "create", "deletecollection"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: status-everything
rules:
- apiGroups: ["*"]
  resources: ["*/status"]
  verbs: ["get"]
- nonResourceURLs: ["/metrics", "/logs/*"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: editor
  namespace: team
rules:
- apiGroups: ["*"]
  resources: ["*"]
  verbs: ["*"]
---
apiVersion: v1
kind: List
items:
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata:
    name: readers
    namespace: team
  roleRef:
    apiGroup: rbac.authorization.k8s.io
    kind: ClusterRole
    name: reader
  subjects:
  - kind: ServiceAccount
    name: builder
  - kind: Group
    name: devs
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata:
    name: editors
    namespace: team
  roleRef:
    kind: Role
    name: editor
  subjects:
  - kind: User
    name: alice
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: editors
  namespace: other
roleRef:
  kind: Role
  name: editor
subjects:
- kind: User
  name: alice
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: config
  namespace: team
roleRef:
  kind: ClusterRole
  name: named-configmap
subjects:
- kind: User
  name: carol
- kind: User
  name: dave
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: status
  namespace: team
roleRef:
  kind: ClusterRole
  name: status-everything
subjects:
- kind: User
  name: dave
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ops
roleRef:
  kind: ClusterRole
  name: status-everything
subjects:
- kind: User
  name: ops
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: cluster-readers
roleRef:
  kind: ClusterRole
  name: reader
subjects:
- kind: Group
  name: auditors
- kind: ServiceAccount
  name: auditor
  namespace: tools
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: aggregate-view
aggregationRule:
  clusterRoleSelectors:
  - matchLabels:
      example.com/aggregate-to-view: "true"
rules:
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: view-b
  labels:
    example.com/aggregate-to-view: "true"
rules:
- apiGroups: ["example.com"]
  resources: ["widgets"]
  verbs: ["get"]
- apiGroups: ["example.com"]
  resources: ["gadgets"]
  verbs: ["list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: view-a
  labels:
    example.com/aggregate-to-view: "true"
rules:
- apiGroups: ["example.com"]
  resources: ["widgets"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: viewers
roleRef:
  kind: ClusterRole
  name: aggregate-view
subjects:
- kind: User
  name: viewer
"#;

fn fixture() -> Policy {
    let mut policy = Policy::default();
    match policy.add_yaml("fixture.yaml", FIXTURE) {
        Ok(count) => assert_eq!(count, 15, "objects in the fixture"),
        Err(e) => panic!("fixture must load: {e}"),
    }
    policy
}

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        name: name.to_string(),
        groups: groups.iter().map(ToString::to_string).collect(),
    }
}

fn resource(
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Attributes {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (resource, None),
    };
    Attributes::Resource {
        verb: verb.to_string(),
        api_group: group.to_string(),
        resource: resource.to_string(),
        subresource,
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
    }
}

fn path(verb: &str, path: &str) -> Attributes {
    Attributes::NonResource {
        verb: verb.to_string(),
        path: path.to_string(),
    }
}

fn allowed(source: &str, document: usize, role: &str, rule: usize) -> Decision {
    Decision::Allow(Some(RuleId {
        source: source.to_string(),
        document,
        role: role.to_string(),
        rule,
    }))
}

fn fx(document: usize, role: &str, rule: usize) -> Decision {
    allowed("fixture.yaml", document, role, rule)
}

fn builtin(document: usize, role: &str, rule: usize) -> Decision {
    allowed("builtin", document, role, rule)
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of (user, request, decision) cases
fn authorize_decisions() {
    let policy = fixture();
    let builder = user("system:serviceaccount:team:builder", &[]);
    let auth = &["system:authenticated"][..];
    let cases: Vec<(&str, UserInfo, Attributes, Decision)> = vec![
        (
            "system:masters may do anything",
            user("root", &["system:masters"]),
            resource("delete", "", "nodes", None, Some("n1")),
            Decision::Allow(None),
        ),
        (
            "service account subject defaults to the binding's namespace",
            builder.clone(),
            resource("list", "", "services", Some("team"), None),
            fx(0, "ClusterRole/reader", 0),
        ),
        (
            "role binding grants nothing in another namespace",
            builder.clone(),
            resource("list", "", "services", Some("default"), None),
            Decision::Deny,
        ),
        (
            "role binding grants nothing at cluster scope",
            builder.clone(),
            resource("list", "", "services", None, None),
            Decision::Deny,
        ),
        (
            "same service account name in another namespace",
            user("system:serviceaccount:other:builder", &[]),
            resource("list", "", "services", Some("team"), None),
            Decision::Deny,
        ),
        (
            "group subject and resource/subresource rule",
            user("bob", &["devs"]),
            resource("get", "", "pods/log", Some("team"), Some("p")),
            fx(0, "ClusterRole/reader", 0),
        ),
        (
            "a subresource rule does not grant the resource",
            user("bob", &["devs"]),
            resource("get", "", "pods", Some("team"), Some("p")),
            Decision::Deny,
        ),
        (
            "second rule of the role",
            user("bob", &["devs"]),
            resource("get", "apps", "deployments/scale", Some("team"), Some("d")),
            fx(0, "ClusterRole/reader", 1),
        ),
        (
            "api group must match",
            user("bob", &["devs"]),
            resource("get", "", "deployments", Some("team"), Some("d")),
            Decision::Deny,
        ),
        (
            "verb must match",
            user("bob", &["devs"]),
            resource("delete", "", "services", Some("team"), Some("s")),
            Decision::Deny,
        ),
        (
            "wildcards in a namespaced Role",
            user("alice", &[]),
            resource("deletecollection", "batch", "jobs", Some("team"), None),
            fx(3, "Role/team/editor", 0),
        ),
        (
            "binding to a Role missing from its namespace",
            user("alice", &[]),
            resource("list", "", "pods", Some("other"), None),
            Decision::Deny,
        ),
        (
            "cluster role binding grants at cluster scope",
            user("eve", &["auditors"]),
            resource("list", "", "services", None, None),
            fx(0, "ClusterRole/reader", 0),
        ),
        (
            "cluster role binding grants in every namespace",
            user("system:serviceaccount:tools:auditor", &[]),
            resource("watch", "", "services", Some("anywhere"), None),
            fx(0, "ClusterRole/reader", 0),
        ),
        (
            "resourceNames match the named object",
            user("carol", &[]),
            resource("get", "", "configmaps", Some("team"), Some("settings")),
            fx(1, "ClusterRole/named-configmap", 0),
        ),
        (
            "resourceNames do not match another name",
            user("carol", &[]),
            resource("update", "", "configmaps", Some("team"), Some("other")),
            Decision::Deny,
        ),
        (
            "resourceNames never match list",
            user("carol", &[]),
            resource("list", "", "configmaps", Some("team"), None),
            Decision::Deny,
        ),
        (
            "resourceNames never match watch without a name",
            user("carol", &[]),
            resource("watch", "", "configmaps", Some("team"), None),
            Decision::Deny,
        ),
        (
            "resourceNames never match create",
            user("carol", &[]),
            resource("create", "", "configmaps", Some("team"), None),
            Decision::Deny,
        ),
        (
            "resourceNames never match deletecollection",
            user("carol", &[]),
            resource("deletecollection", "", "configmaps", Some("team"), None),
            Decision::Deny,
        ),
        (
            "an empty name is no name",
            user("carol", &[]),
            resource("get", "", "configmaps", Some("team"), Some("")),
            Decision::Deny,
        ),
        (
            "*/subresource rule",
            user("ops", &[]),
            resource("get", "apps", "deployments/status", Some("x"), Some("d")),
            fx(2, "ClusterRole/status-everything", 0),
        ),
        (
            "*/subresource does not grant the resource",
            user("ops", &[]),
            resource("get", "", "pods", Some("x"), Some("p")),
            Decision::Deny,
        ),
        (
            "*/subresource does not grant another subresource",
            user("ops", &[]),
            resource("get", "", "pods/log", Some("x"), Some("p")),
            Decision::Deny,
        ),
        (
            "non-resource URL through a cluster role binding",
            user("ops", &[]),
            path("get", "/metrics"),
            fx(2, "ClusterRole/status-everything", 1),
        ),
        (
            "non-resource URL prefix",
            user("ops", &[]),
            path("get", "/logs/kube-apiserver.log"),
            fx(2, "ClusterRole/status-everything", 1),
        ),
        (
            "non-resource URL prefix keeps its slash",
            user("ops", &[]),
            path("get", "/logs"),
            Decision::Deny,
        ),
        (
            "non-resource verb must match",
            user("ops", &[]),
            path("post", "/metrics"),
            Decision::Deny,
        ),
        (
            "non-resource URLs are never granted by a RoleBinding",
            user("dave", &[]),
            path("get", "/metrics"),
            Decision::Deny,
        ),
        (
            "resource rules of the same ClusterRole work through a RoleBinding",
            user("dave", &[]),
            resource("get", "", "pods/status", Some("team"), Some("p")),
            fx(2, "ClusterRole/status-everything", 0),
        ),
        (
            "bindings in name order: config before status",
            user("dave", &[]),
            resource("get", "", "configmaps", Some("team"), Some("settings")),
            fx(1, "ClusterRole/named-configmap", 0),
        ),
        (
            "aggregated rule reported where it is defined (view-a sorts first)",
            user("viewer", &[]),
            resource("get", "example.com", "widgets", Some("x"), Some("w")),
            fx(12, "ClusterRole/view-a", 0),
        ),
        (
            "aggregated rule from the second matching role",
            user("viewer", &[]),
            resource("list", "example.com", "gadgets", None, None),
            fx(11, "ClusterRole/view-b", 1),
        ),
        (
            "rules written in an aggregated ClusterRole are replaced",
            user("viewer", &[]),
            resource("get", "", "services", Some("x"), Some("s")),
            Decision::Deny,
        ),
        (
            "discovery for authenticated users",
            user("anyone", auth),
            path("get", "/apis/apps/v1"),
            builtin(0, "ClusterRole/system:discovery", 0),
        ),
        (
            "health for authenticated users comes from system:discovery (sorts first)",
            user("anyone", auth),
            path("get", "/healthz"),
            builtin(0, "ClusterRole/system:discovery", 0),
        ),
        (
            "openapi for authenticated users",
            user("anyone", auth),
            path("get", "/openapi/v3/apis/apps/v1"),
            builtin(0, "ClusterRole/system:discovery", 0),
        ),
        (
            "discovery is read-only",
            user("anyone", auth),
            path("post", "/api"),
            Decision::Deny,
        ),
        (
            "no discovery without system:authenticated",
            user("anyone", &[]),
            path("get", "/api"),
            Decision::Deny,
        ),
        (
            "unauthenticated users may read health and version",
            user("system:anonymous", &["system:unauthenticated"]),
            path("get", "/version"),
            builtin(2, "ClusterRole/system:public-info-viewer", 0),
        ),
        (
            "unauthenticated users get no discovery",
            user("system:anonymous", &["system:unauthenticated"]),
            path("get", "/apis"),
            Decision::Deny,
        ),
        (
            "basic user may review its own access",
            user("anyone", auth),
            resource(
                "create",
                "authorization.k8s.io",
                "selfsubjectaccessreviews",
                None,
                None,
            ),
            builtin(1, "ClusterRole/system:basic-user", 0),
        ),
        (
            "basic user may ask who it is",
            user("anyone", auth),
            resource(
                "create",
                "authentication.k8s.io",
                "selfsubjectreviews",
                None,
                None,
            ),
            builtin(1, "ClusterRole/system:basic-user", 1),
        ),
        (
            "authenticated users get nothing else",
            user("anyone", auth),
            resource("list", "", "namespaces", None, None),
            Decision::Deny,
        ),
    ];
    for (what, who, attrs, want) in cases {
        assert_eq!(policy.authorize(&who, &attrs), want, "{what}");
    }
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of (user, request, message) cases
fn forbidden_messages() {
    let sa = user("system:serviceaccount:a:b", &[]);
    let u = user("u", &[]);
    let cases: Vec<(UserInfo, Attributes, &str)> = vec![
        (
            sa,
            resource("list", "", "services", Some("default"), None),
            r#"services is forbidden: User "system:serviceaccount:a:b" cannot list resource "services" in API group "" in the namespace "default""#,
        ),
        (
            u.clone(),
            resource("get", "", "services", Some("default"), Some("web")),
            r#"services "web" is forbidden: User "u" cannot get resource "services" in API group "" in the namespace "default""#,
        ),
        (
            u.clone(),
            resource("list", "", "nodes", None, None),
            r#"nodes is forbidden: User "u" cannot list resource "nodes" in API group "" at the cluster scope"#,
        ),
        (
            u.clone(),
            resource("list", "", "nodes", Some(""), Some("")),
            r#"nodes is forbidden: User "u" cannot list resource "nodes" in API group "" at the cluster scope"#,
        ),
        (
            u.clone(),
            resource(
                "watch",
                "discovery.k8s.io",
                "endpointslices",
                Some("default"),
                None,
            ),
            r#"endpointslices.discovery.k8s.io is forbidden: User "u" cannot watch resource "endpointslices" in API group "discovery.k8s.io" in the namespace "default""#,
        ),
        (
            u.clone(),
            resource(
                "update",
                "",
                "services/status",
                Some("default"),
                Some("web"),
            ),
            r#"services "web" is forbidden: User "u" cannot update resource "services/status" in API group "" in the namespace "default""#,
        ),
        (
            u.clone(),
            resource(
                "patch",
                "apps",
                "deployments/scale",
                Some("ns"),
                Some("web"),
            ),
            r#"deployments.apps "web" is forbidden: User "u" cannot patch resource "deployments/scale" in API group "apps" in the namespace "ns""#,
        ),
        (
            u.clone(),
            resource(
                "get",
                "rbac.authorization.k8s.io",
                "clusterroles",
                None,
                Some("admin"),
            ),
            r#"clusterroles.rbac.authorization.k8s.io "admin" is forbidden: User "u" cannot get resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope"#,
        ),
        (
            u.clone(),
            path("get", "/foo"),
            r#"forbidden: User "u" cannot get path "/foo""#,
        ),
        (
            u.clone(),
            path("get", "/a<b>&c"),
            r#"forbidden: User "u" cannot get path "/a&lt;b&gt;&amp;c""#,
        ),
        (
            user("we\"ird\\", &[]),
            path("get", "/"),
            r#"forbidden: User "we\"ird\\" cannot get path "/""#,
        ),
        (
            u,
            resource("get", "", "", None, None),
            r#"forbidden: User "u" cannot get resource "" in API group "" at the cluster scope"#,
        ),
    ];
    for (who, attrs, want) in cases {
        assert_eq!(forbidden_message(&who, &attrs), want, "{attrs:?}");
    }
}

#[test]
fn forbidden_messages_with_rbac_reasons() {
    let mut policy = fixture();
    let missing = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ghost
roleRef:
  kind: ClusterRole
  name: ghost
subjects:
- kind: Group
  name: haunted
"#;
    if let Err(e) = policy.add_yaml("missing.yaml", missing) {
        panic!("missing.yaml must load: {e}");
    }
    let cases: Vec<(UserInfo, Attributes, &str)> = vec![
        (
            user("alice", &[]),
            resource("list", "", "pods", Some("other"), None),
            r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "other": RBAC: role.rbac.authorization.k8s.io "editor" not found"#,
        ),
        (
            user("alice", &["haunted"]),
            resource("list", "", "pods", Some("other"), None),
            r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "other": RBAC: [clusterrole.rbac.authorization.k8s.io "ghost" not found, role.rbac.authorization.k8s.io "editor" not found]"#,
        ),
        (
            user("bob", &[]),
            resource("list", "", "pods", Some("other"), None),
            r#"pods is forbidden: User "bob" cannot list resource "pods" in API group "" in the namespace "other""#,
        ),
    ];
    for (who, attrs, want) in cases {
        assert_eq!(policy.authorize(&who, &attrs), Decision::Deny, "{want}");
        assert_eq!(policy.forbidden_message(&who, &attrs), want);
    }
}

fn id(source: &str, document: usize, role: &str, rule: usize) -> RuleId {
    RuleId {
        source: source.to_string(),
        document,
        role: role.to_string(),
        rule,
    }
}

#[test]
fn rules_listing() {
    let builtin_rules = vec![
        id("builtin", 0, "ClusterRole/system:discovery", 0),
        id("builtin", 1, "ClusterRole/system:basic-user", 0),
        id("builtin", 1, "ClusterRole/system:basic-user", 1),
        id("builtin", 2, "ClusterRole/system:public-info-viewer", 0),
    ];
    assert_eq!(Policy::default().rules(), builtin_rules);

    let text = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: r, namespace: ns}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get]}
- {apiGroups: [""], resources: [pods], verbs: [list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: agg}
aggregationRule:
  clusterRoleSelectors: [{matchLabels: {a: b}}]
rules:
- {apiGroups: [""], resources: [pods], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: plain, labels: {a: b}}
rules:
- {nonResourceURLs: ["/x"], verbs: [get]}
"#;
    let mut policy = Policy::default();
    match policy.add_yaml("r.yaml", text) {
        Ok(n) => assert_eq!(n, 3),
        Err(e) => panic!("{e}"),
    }
    let mut want = builtin_rules;
    want.extend([
        id("r.yaml", 0, "Role/ns/r", 0),
        id("r.yaml", 0, "Role/ns/r", 1),
        id("r.yaml", 2, "ClusterRole/plain", 0),
    ]);
    want.sort();
    assert_eq!(policy.rules(), want);
}

#[test]
fn add_yaml_counts_and_skips() {
    let text = r#"
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
---
apiVersion: example.com/v1
kind: Role
metadata: {name: not-rbac}
spec: {anything: goes}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleList
items:
- metadata: {name: listed}
  rules:
  - {apiGroups: [""], resources: [secrets], verbs: [get]}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: s}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: RoleBinding
  metadata: {name: listed}
  roleRef: {kind: Role, name: listed}
  subjects: [{kind: User, name: u}]
---
"#;
    let mut policy = Policy::default();
    assert_eq!(policy.add_yaml("mixed.yaml", text), Ok(2));
    // Without metadata.namespace both objects land in "default", as kubectl would.
    assert_eq!(
        policy.authorize(
            &user("u", &[]),
            &resource("get", "", "secrets", Some("default"), Some("x"))
        ),
        allowed("mixed.yaml", 2, "Role/default/listed", 0)
    );
}

#[test]
fn later_objects_replace_earlier_ones() {
    let first = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: r}
subjects: [{kind: User, name: u}]
"#;
    let second = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r}
rules:
- {apiGroups: [""], resources: [services], verbs: [get]}
"#;
    let mut policy = Policy::default();
    assert_eq!(policy.add_yaml("first.yaml", first), Ok(2));
    assert_eq!(policy.add_yaml("second.yaml", second), Ok(1));
    let u = user("u", &[]);
    let cases = [
        ("pods", Decision::Deny),
        ("services", allowed("second.yaml", 0, "ClusterRole/r", 0)),
    ];
    for (res, want) in cases {
        assert_eq!(
            policy.authorize(&u, &resource("get", "", res, Some("ns"), Some("x"))),
            want,
            "{res}"
        );
    }
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of (manifest, error) cases
fn add_yaml_errors() {
    const CR: &str = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n";
    const CRB: &str =
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: b}\n";
    const RB: &str = "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: b, namespace: ns}\nroleRef: {kind: Role, name: r}\n";
    let cases: Vec<(String, &str)> = vec![
        (
            "a: [\n".into(),
            "f.yaml: unclosed bracket '[' at line 1, column 4",
        ),
        (
            "apiVersion: rbac.authorization.k8s.io/v1beta1\nkind: ClusterRole\nmetadata: {name: r}\n".into(),
            r#"f.yaml: document 0: no matches for kind "ClusterRole" in version "rbac.authorization.k8s.io/v1beta1""#,
        ),
        (
            format!("{CR}metadata: {{name: r}}\nrules:\n- {{apiGroups: [''], resources: [pods], verb: [get]}}\n"),
            r#"f.yaml: document 0: ClusterRole in version "v1" cannot be handled as a ClusterRole: strict decoding error: unknown field "rules[0].verb""#,
        ),
        (
            format!("{CR}metadata: {{name: r, nmespace: x}}\nrule: []\n"),
            r#"f.yaml: document 0: ClusterRole in version "v1" cannot be handled as a ClusterRole: strict decoding error: unknown field "rule", unknown field "metadata.nmespace""#,
        ),
        (
            format!("{CR}metadata: {{name: r}}\nrules:\n- verbs: get\n"),
            r#"f.yaml: document 0: ClusterRole in version "v1" cannot be handled as a ClusterRole: invalid type: string "get", expected a sequence"#,
        ),
        (
            format!("{CR}metadata: {{name: r}}\nrules:\n- {{apiGroups: [''], resources: [pods]}}\n"),
            r#"f.yaml: document 0: ClusterRole.rbac.authorization.k8s.io "r" is invalid: rules[0].verbs: Required value: verbs must contain at least one value"#,
        ),
        (
            format!("{CR}metadata: {{name: r}}\nrules:\n- {{verbs: [get]}}\n"),
            r#"f.yaml: document 0: ClusterRole.rbac.authorization.k8s.io "r" is invalid: [rules[0].apiGroups: Required value: resource rules must supply at least one api group, rules[0].resources: Required value: resource rules must supply at least one resource]"#,
        ),
        (
            format!("{CR}metadata: {{name: r}}\nrules:\n- {{nonResourceURLs: [/x], resources: [pods], verbs: [get]}}\n"),
            r#"f.yaml: document 0: ClusterRole.rbac.authorization.k8s.io "r" is invalid: rules[0].nonResourceURLs: Invalid value: []string{"/x"}: rules cannot apply to both regular resources and non-resource URLs"#,
        ),
        (
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r, namespace: ns}\nrules:\n- {nonResourceURLs: [/x, /y], verbs: [get]}\n".into(),
            r#"f.yaml: document 0: Role.rbac.authorization.k8s.io "r" is invalid: rules[0].nonResourceURLs: Invalid value: []string{"/x", "/y"}: namespaced rules cannot apply to non-resource URLs"#,
        ),
        (
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r, namespace: My_NS}\n".into(),
            r#"f.yaml: document 0: Role.rbac.authorization.k8s.io "r" is invalid: metadata.namespace: Invalid value: "My_NS": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"#,
        ),
        (
            format!("{CR}metadata: {{labels: {{a: b}}}}\n"),
            r#"f.yaml: document 0: ClusterRole.rbac.authorization.k8s.io "" is invalid: metadata.name: Required value: name or generateName is required"#,
        ),
        (
            format!("{CR}metadata: {{name: 'a/b%'}}\n"),
            r#"f.yaml: document 0: ClusterRole.rbac.authorization.k8s.io "a/b%" is invalid: [metadata.name: Invalid value: "a/b%": may not contain '/', metadata.name: Invalid value: "a/b%": may not contain '%']"#,
        ),
        (
            format!("{CR}metadata: {{name: '..'}}\n"),
            r#"f.yaml: document 0: ClusterRole.rbac.authorization.k8s.io ".." is invalid: metadata.name: Invalid value: "..": may not be '..'"#,
        ),
        (
            format!("{CRB}roleRef: {{kind: Role, name: r}}\n"),
            r#"f.yaml: document 0: ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole""#,
        ),
        (
            format!("{CRB}roleRef: {{apiGroup: foo, kind: ClusterRole}}\n"),
            r#"f.yaml: document 0: ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: [roleRef.apiGroup: Unsupported value: "foo": supported values: "rbac.authorization.k8s.io", roleRef.name: Required value]"#,
        ),
        (
            format!("{CRB}roleRef: {{kind: ClusterRole, name: r}}\nsubjects: [{{kind: ServiceAccount, name: sa}}]\n"),
            r#"f.yaml: document 0: ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: subjects[0].namespace: Required value"#,
        ),
        (
            format!("{RB}subjects: [{{kind: Usr, name: u}}, {{kind: ServiceAccount, name: Bad_SA, apiGroup: v1}}, {{kind: Group}}]\n"),
            r#"f.yaml: document 0: RoleBinding.rbac.authorization.k8s.io "b" is invalid: [subjects[0].kind: Unsupported value: "Usr": supported values: "ServiceAccount", "User", "Group", subjects[1].name: Invalid value: "Bad_SA": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), subjects[1].apiGroup: Unsupported value: "v1": supported values: "", subjects[2].name: Required value]"#,
        ),
        (
            format!("{RB}subjects: [{{kind: User, name: u, apiGroup: v1}}]\n"),
            r#"f.yaml: document 0: RoleBinding.rbac.authorization.k8s.io "b" is invalid: subjects[0].apiGroup: Unsupported value: "v1": supported values: "rbac.authorization.k8s.io""#,
        ),
        (
            format!("{CR}metadata: {{name: r}}\naggregationRule: {{}}\n"),
            r#"f.yaml: document 0: ClusterRole.rbac.authorization.k8s.io "r" is invalid: aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"#,
        ),
        (
            format!("{CR}metadata: {{name: r}}\naggregationRule:\n  clusterRoleSelectors:\n  - matchExpressions: [{{key: a, operator: Equals, values: [b]}}]\n"),
            r#"f.yaml: document 0: ClusterRole.rbac.authorization.k8s.io "r" is invalid: [aggregationRule.clusterRoleSelectors[0].matchExpressions[0].operator: Invalid value: "Equals": not a valid selector operator, aggregationRule.clusterRoleSelectors[0]: Invalid value: "null": invalid label selector.]"#,
        ),
        (
            format!("{CR}metadata: {{name: r}}\naggregationRule:\n  clusterRoleSelectors:\n  - matchExpressions: [{{key: a, operator: In}}]\n"),
            r#"f.yaml: document 0: ClusterRole.rbac.authorization.k8s.io "r" is invalid: [aggregationRule.clusterRoleSelectors[0].matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn', aggregationRule.clusterRoleSelectors[0]: Invalid value: "null": invalid label selector.]"#,
        ),
        (
            format!("{CR}metadata: {{name: ok}}\n---\n{CR}metadata: {{name: r}}\nrules: [{{verbs: [get], nonResourceURLs: [/x]}}, {{verbs: []}}]\n"),
            r#"f.yaml: document 1: ClusterRole.rbac.authorization.k8s.io "r" is invalid: [rules[1].verbs: Required value: verbs must contain at least one value, rules[1].apiGroups: Required value: resource rules must supply at least one api group, rules[1].resources: Required value: resource rules must supply at least one resource]"#,
        ),
        (
            format!("apiVersion: v1\nkind: List\nitems:\n- {{apiVersion: v1, kind: Pod}}\n- {CRB_FLOW}\n", CRB_FLOW = "{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRoleBinding, metadata: {name: b}, roleRef: {kind: ClusterRole, name: r}, subjects: [{kind: Robot, name: x}]}"),
            r#"f.yaml: document 0: items[1]: ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group""#,
        ),
    ];
    for (text, want) in cases {
        let mut policy = Policy::default();
        let before = policy.rules();
        match policy.add_yaml("f.yaml", &text) {
            Ok(n) => panic!("expected {want:?}, but {n} objects were added from:\n{text}"),
            Err(e) => assert_eq!(e.to_string(), want, "for:\n{text}"),
        }
        assert_eq!(policy.rules(), before, "nothing is added on error:\n{text}");
    }
}

#[test]
fn failed_text_adds_nothing() {
    let text = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: b}
roleRef: {kind: ClusterRole, name: cluster-admin}
subjects: [{kind: User, name: u}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cluster-admin}
rules: [{apiGroups: ['*'], resources: ['*'], verbs: ['*']}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: broken}
rules: [{verbs: [get]}]
"#;
    let mut policy = Policy::default();
    assert!(policy.add_yaml("f.yaml", text).is_err());
    assert_eq!(
        policy.authorize(
            &user("u", &[]),
            &resource("get", "", "pods", Some("ns"), Some("p"))
        ),
        Decision::Deny
    );
}

#[test]
fn aggregation_follows_chains_and_survives_cycles() {
    let text = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: top, labels: {level: top}}
aggregationRule:
  clusterRoleSelectors: [{matchLabels: {feeds: top}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: middle, labels: {feeds: top}}
aggregationRule:
  clusterRoleSelectors: [{matchLabels: {feeds: middle}}, {matchExpressions: [{key: level, operator: In, values: [top]}]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: leaf, labels: {feeds: middle}}
rules: [{apiGroups: [""], resources: [pods], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: top}
roleRef: {kind: ClusterRole, name: top}
subjects: [{kind: User, name: u}]
"#;
    let mut policy = Policy::default();
    assert_eq!(policy.add_yaml("agg.yaml", text), Ok(4));
    let cases = [
        ("pods", allowed("agg.yaml", 2, "ClusterRole/leaf", 0)),
        ("services", Decision::Deny),
    ];
    for (res, want) in cases {
        assert_eq!(
            policy.authorize(
                &user("u", &[]),
                &resource("get", "", res, Some("ns"), Some("x"))
            ),
            want,
            "{res}"
        );
    }
}
