use super::*;
use std::fs;

const SERVICE: &str = "apiVersion: v1
kind: Service
metadata:
  name: api
  namespace: prod
  labels:
    mirror.linkerd.io/exported: remote-discovery
spec:
  clusterIP: 10.0.0.5
  ports:
  - name: http
    port: 8080
";

const SLICE: &str = "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: api-abcde
  namespace: prod
  labels:
    kubernetes.io/service-name: api
addressType: IPv4
ports:
- name: http
  port: 8080
endpoints:
- addresses: [10.20.1.1]
";

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

fn cluster(dir: &Path, name: &str) -> ClusterLoad {
    load_cluster(
        &ClusterDir {
            name: name.into(),
            path: dir.join(name),
        },
        false,
        &Trust::default(),
    )
}

fn messages(load: &ClusterLoad) -> Vec<String> {
    load.problems.iter().map(ToString::to_string).collect()
}

#[test]
fn documents_are_split_at_markers_and_numbered_by_content() {
    let text = "# a comment\n---\na: 1\n---\n\n# nothing here\n---\nb: 2\n...\n--- {c: 3}\n";
    let docs: Vec<(usize, String)> = split_documents(text);
    assert_eq!(
        docs,
        vec![
            (3, "a: 1\n".to_owned()),
            (8, "b: 2\n".to_owned()),
            (10, " {c: 3}\n".to_owned())
        ]
    );
    assert_eq!(split_documents("x: 1"), vec![(1, "x: 1\n".to_owned())]);
    assert!(split_documents("---\n# only a comment\n").is_empty());
}

#[test]
fn a_cluster_directory_with_nested_files_and_lists() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n- {}\n- {}\n",
        serde_json::to_string(&serde_saphyr::from_str::<Value>(SERVICE).expect("yaml"))
            .expect("json"),
        serde_json::to_string(&serde_saphyr::from_str::<Value>(SLICE).expect("yaml"))
            .expect("json"),
    );
    write(tmp.path(), "north/sub/dir/list.yaml", &list);
    write(
        tmp.path(),
        "north/deploy.yml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n",
    );
    write(tmp.path(), "north/README.md", "not yaml");
    write(tmp.path(), "north/.hidden.yaml", "this: [is not read");
    let load = cluster(tmp.path(), "north");
    assert_eq!(messages(&load), Vec::<String>::new());
    assert_eq!(load.files, 2);
    assert_eq!(load.objects.services.len(), 1);
    assert_eq!(load.objects.slices.len(), 1);
    assert_eq!(load.skipped.get("apps/v1 Deployment"), Some(&1));
}

#[test]
fn every_problem_names_file_document_and_reason() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let bad_type = SERVICE.replace("port: 8080", "port: eighty");
    let text = format!("{SLICE}---\n{bad_type}---\nkind: Service\n---\nfoo: [1,\n");
    write(tmp.path(), "east/api.yaml", &text);
    write(tmp.path(), "east/dup.yaml", SLICE);
    let load = cluster(tmp.path(), "east");
    assert!(load.has_errors());
    let file = tmp.path().join("east/api.yaml");
    let dup = tmp.path().join("east/dup.yaml");
    let got = messages(&load);
    let want = [
        format!(
            "error: {}: document 2 (line 15): Service spec.ports[0].port: invalid type: string \"eighty\", expected i32",
            file.display()
        ),
        format!(
            "error: {}: document 3 (line 28): not a Kubernetes object: apiVersion and kind are required",
            file.display()
        ),
        format!(
            "error: {}: document 4 (line 30): invalid YAML: line 30, column 6: unclosed bracket",
            file.display()
        ),
        format!(
            "error: {}: document 1 (line 1): EndpointSlice prod/api-abcde is already defined at {}: document 1 (line 1); this copy is ignored",
            dup.display(),
            file.display()
        ),
        format!(
            "warning: {}: document 1 (line 1): EndpointSlice prod/api-abcde belongs to Service prod/api, which this cluster directory does not define",
            file.display()
        ),
    ];
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for w in &want {
        assert!(
            got.iter().any(|g| g.starts_with(w.as_str())),
            "missing {w:?} in {got:#?}"
        );
    }
    // The valid slice is still read (it belongs to no exported service).
    assert!(load.objects.slices.is_empty());
}

#[test]
fn invalid_cluster_directories_are_reported_and_skipped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for d in ["east", "federated", "Bad_Name", ".git"] {
        fs::create_dir_all(tmp.path().join(d)).expect("mkdir");
    }
    write(tmp.path(), "notes.md", "top-level files are ignored");
    let (dirs, problems) = cluster_dirs(tmp.path()).expect("readable");
    assert_eq!(dirs.iter().map(|d| &*d.name).collect::<Vec<_>>(), ["east"]);
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(text.len(), 2, "{text:#?}");
    assert!(
        text.iter()
            .any(|t| t.contains("federated") && t.contains("reserved"))
    );
    assert!(
        text.iter()
            .any(|t| t.contains("Bad_Name") && t.contains("RFC 1123"))
    );
    assert!(cluster_dirs(&tmp.path().join("missing")).is_err());
}

#[test]
fn diff_emits_only_changes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(
        tmp.path(),
        "north/api.yaml",
        &format!("{SERVICE}---\n{SLICE}"),
    );
    let before = cluster(tmp.path(), "north");
    let fingerprint_before = fingerprint(&tmp.path().join("north"));
    let name: Arc<str> = "north".into();
    assert_eq!(diff(&name, &before.objects, &before.objects).len(), 0);
    let initial = initial_events(&before);
    assert_eq!(initial.len(), 4, "up, service, slice, synced");

    write(
        tmp.path(),
        "north/api.yaml",
        &format!("{SERVICE}---\n{}", SLICE.replace("10.20.1.1", "10.20.1.2")),
    );
    let after = cluster(tmp.path(), "north");
    let events = diff(&name, &before.objects, &after.objects);
    assert!(
        matches!(events.as_slice(), [Event::SliceApplied { .. }]),
        "{events:?}"
    );

    write(tmp.path(), "north/api.yaml", SERVICE);
    let gone = cluster(tmp.path(), "north");
    let events = diff(&name, &after.objects, &gone.objects);
    assert!(
        matches!(events.as_slice(), [Event::SliceDeleted { .. }]),
        "{events:?}"
    );
    assert_ne!(fingerprint_before, fingerprint(&tmp.path().join("north")));
}

/// What `kubectl get svc,endpointslices -A -o yaml` prints: a List with
/// server-populated fields, unexported services and their slices.
const KUBECTL_DUMP: &str = r#"apiVersion: v1
items:
- apiVersion: v1
  kind: Service
  metadata:
    annotations:
      kubectl.kubernetes.io/last-applied-configuration: |
        {"apiVersion":"v1","kind":"Service","metadata":{"name":"api","namespace":"prod"}}
    creationTimestamp: "2026-03-01T10:00:00Z"
    labels:
      app: api
      mirror.linkerd.io/exported: remote-discovery
    managedFields:
    - apiVersion: v1
      fieldsType: FieldsV1
      fieldsV1:
        f:spec:
          f:ports: {}
      manager: kubectl-client-side-apply
      operation: Update
      time: "2026-03-01T10:00:00Z"
    name: api
    namespace: prod
    resourceVersion: "48213"
    uid: 0f7c1a52-3b1e-4c55-9a43-1f0a5f7d2b11
  spec:
    clusterIP: 10.110.0.5
    clusterIPs:
    - 10.110.0.5
    internalTrafficPolicy: Cluster
    ipFamilies:
    - IPv4
    ipFamilyPolicy: SingleStack
    ports:
    - name: http
      port: 80
      protocol: TCP
      targetPort: 8080
    selector:
      app: api
    sessionAffinity: None
    type: ClusterIP
  status:
    loadBalancer: {}
- apiVersion: v1
  kind: Service
  metadata:
    name: kubernetes
    namespace: default
    resourceVersion: "196"
  spec:
    clusterIP: 10.96.0.1
    ports:
    - name: https
      port: 443
      protocol: TCP
      targetPort: 6443
    type: ClusterIP
  status:
    loadBalancer: {}
- addressType: IPv4
  apiVersion: discovery.k8s.io/v1
  endpoints:
  - addresses:
    - 10.20.1.1
    conditions:
      ready: true
      serving: true
      terminating: false
    nodeName: north-worker-1
    targetRef:
      kind: Pod
      name: api-7d9f8b6c5-x2lkq
      namespace: prod
      uid: 5b1e2c3d-aaaa-bbbb-cccc-000000000001
    zone: north-a
  kind: EndpointSlice
  metadata:
    annotations:
      endpoints.kubernetes.io/last-change-trigger-time: "2026-03-01T10:00:05Z"
    generateName: api-
    labels:
      app: api
      endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io
      kubernetes.io/service-name: api
      mirror.linkerd.io/exported: remote-discovery
    name: api-8xk2p
    namespace: prod
    ownerReferences:
    - apiVersion: v1
      blockOwnerDeletion: true
      controller: true
      kind: Service
      name: api
      uid: 0f7c1a52-3b1e-4c55-9a43-1f0a5f7d2b11
    resourceVersion: "48220"
  ports:
  - name: http
    port: 8080
    protocol: TCP
- addressType: IPv4
  apiVersion: discovery.k8s.io/v1
  endpoints:
  - addresses:
    - 172.18.0.2
    conditions:
      ready: true
  kind: EndpointSlice
  metadata:
    labels:
      kubernetes.io/service-name: kubernetes
    name: kubernetes
    namespace: default
  ports:
  - name: https
    port: 6443
    protocol: TCP
kind: List
metadata:
  resourceVersion: ""
"#;

#[test]
fn a_kubectl_dump_loads_as_is() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write(tmp.path(), "north/all.yaml", KUBECTL_DUMP);
    let load = cluster(tmp.path(), "north");
    assert_eq!(messages(&load), Vec::<String>::new());
    assert_eq!(
        load.objects
            .services
            .keys()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["prod/api"]
    );
    assert_eq!(
        load.objects
            .slices
            .keys()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["prod/api-8xk2p"]
    );
    assert_eq!(
        load.not_exported, 1,
        "the kubernetes Service is read and left out"
    );
}

#[test]
fn hostile_documents_are_counted_by_reason_and_a_clamp_is_no_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let hostile_slice = SLICE.replace(
        "- addresses: [10.20.1.1]\n",
        "- addresses: [10.20.1.1]\n- addresses: [not-an-ip]\n- addresses: [bogus]\n- addresses: [10.20.1.1]\n",
    );
    let long_name = SERVICE.replace("name: api\n", &format!("name: {}\n", "a".repeat(64)));
    write(
        tmp.path(),
        "east/all.yaml",
        &format!("{SERVICE}---\n{hostile_slice}---\n{long_name}"),
    );
    let load = cluster(tmp.path(), "east");
    let counts: Vec<String> = load
        .adjusted
        .iter()
        .map(|((a, r), n)| format!("{} {} {n}", a.label(), r.label()))
        .collect();
    assert_eq!(
        counts,
        [
            "skipped name_too_long 1",
            "clamped address_not_ip 1",
            "clamped duplicate_address 1"
        ]
    );
    let slice = load.objects.slices.values().next().expect("the slice");
    assert_eq!(slice.endpoints.len(), 1, "the good address is served");
    let errors: Vec<String> = load
        .problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .map(ToString::to_string)
        .collect();
    assert_eq!(errors.len(), 1, "only the skipped Service: {errors:?}");
    assert!(
        load.problems.iter().any(|p| p
            .message
            .contains("\"not-an-ip\" is not an IP address; left out (and 1 more like it)")),
        "{:?}",
        messages(&load)
    );
}

mod mcs;
mod place;
