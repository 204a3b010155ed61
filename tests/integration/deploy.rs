//! deploy/: every manifest parses into its Kubernetes type with no unknown
//! field, the kustomize overlays render to the objects an install needs, the
//! shipped config is accepted by the server's own parser with the
//! Deployments' arguments, and the scripts do what they say against a
//! stand-in kubectl.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap::Parser as _;
use clusterset_dns::cli::{Cli, Command as SubCommand};
use clusterset_dns::config::{Config, FileConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PodSpec, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

const NS: &str = "clusterset-dns";
const LINK_NS: &str = "linkerd-multicluster";
const IMAGE: &str = "ghcr.io/clusterset-dns/clusterset-dns:0.1.0";
const DNS: &str = "clusterset-dns";
const MIRROR: &str = "clusterset-dns-mirror";
/// The image's user and group (distroless `nonroot`).
const UID: i64 = 65532;
const PLACEHOLDER: &str = "CHANGE-ME";

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

// ---------------------------------------------------------------------------
// Strict parsing
// ---------------------------------------------------------------------------

/// Every `*.yaml`/`*.yml` file under `dir`, recursively, sorted.
fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read deploy/") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The documents of a multi-document YAML text, empty ones left out.
fn documents(text: &str) -> Result<Vec<Value>, String> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| e.to_string())?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Parses `doc` as the k8s-openapi type of its apiVersion and kind, and
/// fails on any key the type does not keep: k8s-openapi ignores unknown
/// fields, so the document is deserialized, serialized back, and every key
/// of the input must still be there.
fn strict(doc: &Value) -> Result<(), String> {
    let api = doc["apiVersion"].as_str().unwrap_or("");
    let kind = doc["kind"].as_str().unwrap_or("");
    match (api, kind) {
        ("v1", "Namespace") => round_trip::<Namespace>(doc),
        ("v1", "ServiceAccount") => round_trip::<ServiceAccount>(doc),
        ("v1", "Service") => round_trip::<Service>(doc),
        ("v1", "ConfigMap") => round_trip::<ConfigMap>(doc),
        ("v1", "Secret") => round_trip::<Secret>(doc),
        ("apps/v1", "Deployment") => round_trip::<Deployment>(doc),
        ("policy/v1", "PodDisruptionBudget") => round_trip::<PodDisruptionBudget>(doc),
        ("networking.k8s.io/v1", "NetworkPolicy") => round_trip::<NetworkPolicy>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(doc),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            round_trip::<ClusterRoleBinding>(doc)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<Role>(doc),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<RoleBinding>(doc),
        _ => Err(format!(
            "apiVersion {api:?} kind {kind:?} is not a kind deploy/ is expected to hold"
        )),
    }
}

fn round_trip<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<(), String> {
    let typed: T = serde_path_to_error::deserialize(doc.clone())
        .map_err(|e| format!("{}: {}", e.path(), e.inner()))?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    match first_unknown(doc, &back, "") {
        Some(path) => Err(format!(
            "unknown field {path} (the type drops it: misspelled, misplaced or null)"
        )),
        None => Ok(()),
    }
}

/// The path of the first key of `input` that `output` lacks.
fn first_unknown(input: &Value, output: &Value, path: &str) -> Option<String> {
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => i.iter().find_map(|(key, v)| {
            let here = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match o.get(key) {
                None => Some(here),
                Some(ov) => first_unknown(v, ov, &here),
            }
        }),
        (Value::Array(i), Value::Array(o)) => {
            if i.len() != o.len() {
                return Some(format!("{path} (length {} became {})", i.len(), o.len()));
            }
            i.iter()
                .zip(o)
                .enumerate()
                .find_map(|(n, (iv, ov))| first_unknown(iv, ov, &format!("{path}[{n}]")))
        }
        _ => None,
    }
}

/// `kind/namespace/name` of a document, for messages.
fn ident(doc: &Value) -> String {
    format!(
        "{}/{}/{}",
        doc["kind"].as_str().unwrap_or("?"),
        doc["metadata"]["namespace"].as_str().unwrap_or(""),
        doc["metadata"]["name"].as_str().unwrap_or("?")
    )
}

#[test]
fn strict_parse_reports_unknown_fields() {
    let deployment = |spec_extra: &str, container_extra: &str| {
        format!(
            "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: prod}}
spec:
  {spec_extra}
  selector: {{matchLabels: {{app: x}}}}
  template:
    metadata: {{labels: {{app: x}}}}
    spec:
      containers:
        - name: x
          image: x
          securityContext: {{readOnlyRootFilesystem: true{container_extra}}}
"
        )
    };
    let check = |text: String| strict(&documents(&text).expect("yaml")[0]);
    assert_eq!(check(deployment("replicas: 2", "")), Ok(()));
    let err = check(deployment("replica: 2", "")).expect_err("spec.replica is unknown");
    assert!(err.contains("unknown field spec.replica "), "{err}");
    let err = check(deployment("replicas: 2", ", runAsNonroot: true")).expect_err("misspelled");
    assert!(
        err.contains(
            "unknown field spec.template.spec.containers[0].securityContext.runAsNonroot "
        ),
        "{err}"
    );
    // A wrong type is an error of its own, with its path.
    let err = check(deployment("replicas: two", "")).expect_err("not a number");
    assert!(err.starts_with("spec.replicas"), "{err}");
    // A kind outside the list fails.
    let err = strict(&documents("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n").unwrap()[0])
        .expect_err("Pod is not expected");
    assert!(err.contains("\"Pod\""), "{err}");
}

#[test]
fn every_manifest_parses_into_its_kubernetes_type() {
    let files = yaml_files(&deploy_dir());
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in &files {
        if file.file_name().is_some_and(|n| n == "kustomization.yaml") {
            continue; // checked by rendering, below
        }
        let rel = file
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(file);
        let text = std::fs::read_to_string(file).expect("read manifest");
        let docs = match documents(&text) {
            Ok(d) => d,
            Err(e) => {
                failures.push(format!("{}: not YAML: {e}", rel.display()));
                continue;
            }
        };
        assert!(!docs.is_empty(), "{}: no document", rel.display());
        for (n, doc) in docs.iter().enumerate() {
            checked += 1;
            if let Err(e) = strict(doc) {
                failures.push(format!(
                    "{} document {} ({}): {e}",
                    rel.display(),
                    n + 1,
                    ident(doc)
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "manifests that do not parse strictly:\n  {}",
        failures.join("\n  ")
    );
    assert!(
        checked >= 20,
        "only {checked} documents found under deploy/"
    );
}

// ---------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------

/// `kubectl kustomize deploy/<dir>`, parsed, every document strictly.
fn kustomize(dir: &str) -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy_dir().join(dir))
        .output()
        .expect("kubectl runs (tests/run checks it is installed)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Every kubectl since 1.14 has `kustomize`; tests/run requires kubectl.
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/{dir} failed:\n{stderr}"
    );
    let docs = documents(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|e| panic!("deploy/{dir} renders YAML that does not parse: {e}"));
    for doc in &docs {
        if let Err(e) = strict(doc) {
            panic!("deploy/{dir} renders {}: {e}", ident(doc));
        }
    }
    docs
}

/// Objects of a rendering, by (kind, namespace, name).
struct Rendered(BTreeMap<(String, String, String), Value>);

impl Rendered {
    fn new(dir: &str, docs: Vec<Value>) -> Self {
        let mut map = BTreeMap::new();
        for doc in docs {
            let key = (
                doc["kind"].as_str().unwrap_or("").to_owned(),
                doc["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                doc["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            );
            let dup = map.insert(key, doc);
            assert!(dup.is_none(), "deploy/{dir}: an object is rendered twice");
        }
        Self(map)
    }

    fn keys(&self) -> BTreeSet<(String, String, String)> {
        self.0.keys().cloned().collect()
    }

    fn get<T: DeserializeOwned>(&self, kind: &str, ns: &str, name: &str) -> T {
        let doc = self
            .0
            .get(&(kind.to_owned(), ns.to_owned(), name.to_owned()))
            .unwrap_or_else(|| panic!("{kind} {ns}/{name} is not rendered"));
        serde_json::from_value(doc.clone()).expect("typed")
    }

    fn all<T: DeserializeOwned>(&self, kind: &str) -> Vec<T> {
        self.0
            .iter()
            .filter(|((k, _, _), _)| k == kind)
            .map(|(_, doc)| serde_json::from_value(doc.clone()).expect("typed"))
            .collect()
    }
}

fn keys(list: &[(&str, &str, &str)]) -> BTreeSet<(String, String, String)> {
    list.iter()
        .map(|(k, ns, n)| ((*k).to_owned(), (*ns).to_owned(), (*n).to_owned()))
        .collect()
}

/// The objects of deploy/base (and so of overlays/dns).
const BASE_OBJECTS: [(&str, &str, &str); 13] = [
    ("Namespace", "", NS),
    ("ServiceAccount", NS, DNS),
    ("ClusterRole", "", "clusterset-dns-read"),
    ("ClusterRoleBinding", "", "clusterset-dns-read"),
    ("ClusterRole", "", "clusterset-dns-mcs-read"),
    ("ClusterRoleBinding", "", "clusterset-dns-mcs-read"),
    ("Role", LINK_NS, "clusterset-dns-links"),
    ("RoleBinding", LINK_NS, "clusterset-dns-links"),
    ("ConfigMap", NS, "clusterset-dns-config"),
    ("Deployment", NS, DNS),
    ("Service", NS, DNS),
    ("PodDisruptionBudget", NS, DNS),
    ("NetworkPolicy", NS, DNS),
];

/// What overlays/dns-mirror adds.
const MIRROR_OBJECTS: [(&str, &str, &str); 14] = [
    ("ServiceAccount", NS, MIRROR),
    ("ClusterRoleBinding", "", "clusterset-dns-mirror-read"),
    ("RoleBinding", LINK_NS, "clusterset-dns-mirror-links"),
    ("ClusterRole", "", MIRROR),
    ("ClusterRoleBinding", "", MIRROR),
    ("ClusterRoleBinding", "", "clusterset-dns-mirror-mcs-read"),
    ("ClusterRole", "", "clusterset-dns-mirror-mcs"),
    ("ClusterRoleBinding", "", "clusterset-dns-mirror-mcs"),
    ("Role", NS, "clusterset-dns-mirror-lease"),
    ("RoleBinding", NS, "clusterset-dns-mirror-lease"),
    ("Role", LINK_NS, "clusterset-dns-mirror-linkerd-leases"),
    (
        "RoleBinding",
        LINK_NS,
        "clusterset-dns-mirror-linkerd-leases",
    ),
    ("Deployment", NS, MIRROR),
    ("PodDisruptionBudget", NS, MIRROR),
];

const REMOTE_OBJECTS: [(&str, &str, &str); 7] = [
    ("Namespace", "", NS),
    ("ServiceAccount", NS, "clusterset-dns-remote"),
    ("Secret", NS, "clusterset-dns-remote-token"),
    ("ClusterRole", "", "clusterset-dns-remote"),
    ("ClusterRoleBinding", "", "clusterset-dns-remote"),
    ("ClusterRole", "", "clusterset-dns-remote-mcs"),
    ("ClusterRoleBinding", "", "clusterset-dns-remote-mcs"),
];

/// Namespaced objects name their namespace (none is left to the user's
/// current namespace): ours, or linkerd-multicluster for the Roles and
/// RoleBindings that read Links, Secrets and Linkerd's Leases there.
fn check_namespaces(dir: &str, r: &Rendered) {
    for (kind, ns, name) in r.0.keys() {
        let cluster_scoped = matches!(
            kind.as_str(),
            "Namespace" | "ClusterRole" | "ClusterRoleBinding"
        );
        let ok = if cluster_scoped {
            ns.is_empty()
        } else {
            ns == NS || (ns == LINK_NS && (kind == "Role" || kind == "RoleBinding"))
        };
        assert!(ok, "deploy/{dir}: {kind} {name} in namespace {ns:?}");
    }
}

fn selects(selector: Option<&BTreeMap<String, String>>, labels: &BTreeMap<String, String>) -> bool {
    selector.is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

fn pod_labels(d: &Deployment) -> BTreeMap<String, String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .expect("pod labels")
}

fn pod_spec(d: &Deployment) -> &PodSpec {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
}

/// The value following `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn port_of(addr: &str) -> i32 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("{addr} has no port"))
}

/// What every workload Deployment must be, whatever it runs; returns its
/// one container and the text of the config file its `--config` names.
fn check_workload<'a>(r: &Rendered, d: &'a Deployment) -> (&'a Container, String) {
    let name = d.metadata.name.as_deref().unwrap_or("");
    let spec = d.spec.as_ref().expect("spec");
    assert_eq!(spec.replicas, Some(2), "{name}: replicas");
    let labels = pod_labels(d);
    assert!(
        selects(spec.selector.match_labels.as_ref(), &labels),
        "{name}: selector"
    );
    let pod = pod_spec(d);

    // Spread over nodes, when possible.
    let anti = pod
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .unwrap_or_else(|| panic!("{name}: preferred pod anti-affinity"));
    assert!(
        anti.iter().any(|t| {
            t.pod_affinity_term.topology_key == "kubernetes.io/hostname"
                && selects(
                    t.pod_affinity_term
                        .label_selector
                        .as_ref()
                        .and_then(|s| s.match_labels.as_ref()),
                    &labels,
                )
        }),
        "{name}: anti-affinity by hostname against its own pods"
    );

    // Its ServiceAccount is part of the same rendering.
    let sa = pod
        .service_account_name
        .as_deref()
        .expect("serviceAccountName");
    let _: ServiceAccount = r.get("ServiceAccount", NS, sa);

    // Security: pod-level settings, unless the container overrides them.
    let pod_sc = pod.security_context.clone().unwrap_or_default();
    assert_eq!(pod.containers.len(), 1, "{name}: one container");
    let c = &pod.containers[0];
    let sc = c.security_context.clone().unwrap_or_default();
    assert_eq!(
        sc.run_as_non_root.or(pod_sc.run_as_non_root),
        Some(true),
        "{name}: runAsNonRoot"
    );
    assert_eq!(sc.run_as_user.or(pod_sc.run_as_user), Some(UID), "{name}");
    assert_eq!(sc.run_as_group.or(pod_sc.run_as_group), Some(UID), "{name}");
    let seccomp = sc
        .seccomp_profile
        .or(pod_sc.seccomp_profile)
        .expect("seccomp");
    assert_eq!(seccomp.type_, "RuntimeDefault", "{name}: seccomp");
    assert_eq!(sc.allow_privilege_escalation, Some(false), "{name}");
    assert_eq!(sc.read_only_root_filesystem, Some(true), "{name}");
    assert!(!sc.privileged.unwrap_or(false), "{name}: not privileged");
    let caps = sc.capabilities.expect("capabilities");
    assert_eq!(caps.drop, Some(vec!["ALL".to_owned()]), "{name}: drop ALL");
    assert!(
        caps.add.unwrap_or_default().is_empty(),
        "{name}: no capability added"
    );

    assert_eq!(c.image.as_deref(), Some(IMAGE), "{name}: image");

    // Requests and a memory limit; no CPU limit (throttling stalls answers).
    let res = c.resources.as_ref().expect("resources");
    let requests = res.requests.clone().unwrap_or_default();
    let limits = res.limits.clone().unwrap_or_default();
    assert!(
        requests.contains_key("cpu") && requests.contains_key("memory"),
        "{name}"
    );
    assert!(limits.contains_key("memory"), "{name}: memory limit");
    assert!(!limits.contains_key("cpu"), "{name}: no CPU limit");

    // Probes on the admin port the arguments bind.
    let args = c.args.clone().unwrap_or_default();
    let admin = port_of(flag(&args, "--admin-addr").expect("--admin-addr"));
    assert_eq!(admin, 9153, "{name}: admin port");
    for (probe, path) in [(&c.liveness_probe, "/live"), (&c.readiness_probe, "/ready")] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("{name}: {path} probe"));
        assert_eq!(get.path.as_deref(), Some(path), "{name}");
        assert_eq!(get.port, IntOrString::Int(admin), "{name}: {path} port");
    }
    let ports = c.ports.clone().unwrap_or_default();
    assert!(
        ports
            .iter()
            .any(|p| p.container_port == admin && p.protocol.as_deref() == Some("TCP")),
        "{name}: admin containerPort"
    );

    // `--config FILE`: a read-only mount of the ConfigMap that has FILE.
    let config = Path::new(flag(&args, "--config").expect("--config"));
    let (dir, file) = (
        config.parent().expect("dir"),
        config.file_name().and_then(|f| f.to_str()).expect("file"),
    );
    let mount = c
        .volume_mounts
        .as_ref()
        .and_then(|m| m.iter().find(|m| Path::new(&m.mount_path) == dir))
        .unwrap_or_else(|| panic!("{name}: nothing mounted at {}", dir.display()));
    assert_eq!(
        mount.read_only,
        Some(true),
        "{name}: config mounted read-only"
    );
    assert!(
        mount.sub_path.is_none(),
        "{name}: no subPath (it would not update)"
    );
    let volume = pod
        .volumes
        .as_ref()
        .and_then(|v| v.iter().find(|v| v.name == mount.name))
        .expect("config volume");
    let cm_name = volume
        .config_map
        .as_ref()
        .map(|c| c.name.clone())
        .expect("the config volume is a ConfigMap");
    let cm: ConfigMap = r.get("ConfigMap", NS, &cm_name);
    let text = cm
        .data
        .and_then(|d| d.get(file).cloned())
        .unwrap_or_else(|| panic!("ConfigMap {cm_name} has no key {file}"));
    (c, text)
}

/// The clusters-file Secret's mount (optional, for installs without
/// Linkerd), the same in every workload.
fn clusters_mount(d: &Deployment) -> String {
    let pod = pod_spec(d);
    let volume = pod
        .volumes
        .as_ref()
        .and_then(|v| {
            v.iter().find(|v| {
                v.secret
                    .as_ref()
                    .is_some_and(|s| s.secret_name.as_deref() == Some("clusterset-dns-clusters"))
            })
        })
        .expect("the clusters Secret volume");
    assert_eq!(
        volume.secret.as_ref().and_then(|s| s.optional),
        Some(true),
        "the clusters Secret is optional"
    );
    let mount = pod.containers[0]
        .volume_mounts
        .as_ref()
        .and_then(|m| m.iter().find(|m| m.name == volume.name))
        .expect("mounted");
    assert_eq!(mount.read_only, Some(true));
    mount.mount_path.clone()
}

/// The Deployment's arguments, with `--config` pointing at `config_text`
/// in a temporary file, resolved by the server's own parser as `serve` or
/// `mirror` would.
fn resolve(args: &[String], config_text: &str) -> Result<(bool, Config), String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config_text).expect("write config");
    let mut args = args.to_vec();
    let i = args.iter().position(|a| a == "--config").expect("--config") + 1;
    args[i] = path.to_str().expect("utf-8").to_owned();
    let cli = Cli::try_parse_from(std::iter::once("clusterset-dns".to_owned()).chain(args))
        .map_err(|e| e.to_string())?;
    match cli.command {
        SubCommand::Serve(a) => Config::resolve(&a).map(|c| (false, c)),
        SubCommand::Mirror(mut a) => {
            a.mirror = true; // as cli::main does
            Config::resolve(&a).map(|c| (true, c))
        }
        other => panic!("a Deployment runs {other:?}"),
    }
    .map_err(|e| e.to_string())
}

/// The shipped config: FileConfig accepts it (unknown keys are errors),
/// the placeholder stops the server, and with a real name it resolves to
/// live mode on the addresses and namespaces the manifests use.
fn check_config(r: &Rendered, d: &Deployment, args: &[String], text: &str) -> Config {
    let name = d.metadata.name.as_deref().unwrap_or("");
    let file: FileConfig = serde_saphyr::from_str(text)
        .unwrap_or_else(|e| panic!("the ConfigMap's config file does not parse: {e}"));
    assert!(file.zones.is_none(), "live mode: no zones");
    assert_eq!(file.local_cluster.as_deref(), Some(PLACEHOLDER));

    // The placeholder is not a cluster name: unchanged, the server refuses
    // to start and says which key.
    let err = resolve(args, text).expect_err("the placeholder must not be accepted");
    assert!(err.contains("local-cluster"), "{name}: {err}");

    let edited = text.replacen(
        &format!("local-cluster: {PLACEHOLDER}"),
        "local-cluster: west",
        1,
    );
    let (mirror_only, config) =
        resolve(args, &edited).unwrap_or_else(|e| panic!("{name}: config rejected: {e}"));
    assert_eq!(config.local_cluster.as_deref(), Some("west"));
    let live = config.live.as_ref().expect("live mode");
    assert!(config.zones.is_none());
    assert!(live.kubeconfig.is_none(), "in-cluster config");
    assert!(live.clusters.is_none(), "Links by default");
    // The Links are read where local-dns.yaml's Role lets us read them.
    let links: Role = r.get("Role", &live.link_namespace, "clusterset-dns-links");
    assert!(links.rules.is_some());
    assert_eq!(config.admin_addr.to_string(), "0.0.0.0:9153");

    // The documented edit for installs without Linkerd: uncommenting
    // `clusters:` names a file in the clusters Secret's mount.
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("# clusters: "))
        .expect("a commented `clusters:` line");
    assert_eq!(
        Path::new(line).parent(),
        Some(Path::new(&clusters_mount(d))),
        "{name}: the clusters file is in the clusters Secret"
    );
    let with_file = edited.replacen(
        &format!("# clusters: {line}"),
        &format!("clusters: {line}"),
        1,
    );
    let (_, c) = resolve(args, &with_file).expect("with a clusters file");
    assert_eq!(
        c.live.and_then(|l| l.clusters),
        Some(PathBuf::from(line)),
        "{name}"
    );
    assert_eq!(mirror_only, config.mirror.is_some());
    config
}

fn check_dns(r: &Rendered) {
    let d: Deployment = r.get("Deployment", NS, DNS);
    let (c, text) = check_workload(r, &d);
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("serve"));
    assert!(!args.iter().any(|a| a == "--zones" || a == "--mirror"));
    assert_eq!(pod_spec(&d).service_account_name.as_deref(), Some(DNS));
    let config = check_config(r, &d, &args, &text);
    assert!(config.mirror.is_none(), "the DNS Deployment runs no mirror");
    assert_eq!(config.dns_addr.to_string(), "0.0.0.0:5353");
    let dns_port = port_of(flag(&args, "--dns-addr").expect("--dns-addr"));
    assert_eq!(dns_port, 5353);
    let ports = c.ports.clone().unwrap_or_default();
    for proto in ["UDP", "TCP"] {
        assert!(
            ports
                .iter()
                .any(|p| p.container_port == dns_port && p.protocol.as_deref() == Some(proto)),
            "containerPort {dns_port}/{proto}"
        );
    }
    let labels = pod_labels(&d);

    // The Service: 53/UDP and 53/TCP to the container's port, and metrics.
    let svc: Service = r.get("Service", NS, DNS);
    let spec = svc.spec.expect("spec");
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert!(
        selects(spec.selector.as_ref(), &labels),
        "Service selects the DNS pods"
    );
    let ports = spec.ports.unwrap_or_default();
    for proto in ["UDP", "TCP"] {
        assert!(
            ports.iter().any(|p| p.port == 53
                && p.protocol.as_deref() == Some(proto)
                && p.target_port == Some(IntOrString::Int(dns_port))),
            "Service port 53/{proto} -> {dns_port}: {ports:?}"
        );
    }
    assert!(
        ports
            .iter()
            .any(|p| p.target_port == Some(IntOrString::Int(9153))),
        "Service exposes the admin port"
    );

    let pdb: PodDisruptionBudget = r.get("PodDisruptionBudget", NS, DNS);
    let pdb = pdb.spec.expect("spec");
    assert_eq!(pdb.min_available, Some(IntOrString::Int(1)));
    assert!(selects(
        pdb.selector.and_then(|s| s.match_labels).as_ref(),
        &labels
    ));

    // The NetworkPolicy lets DNS and admin traffic in, to every workload.
    let np: NetworkPolicy = r.get("NetworkPolicy", NS, DNS);
    let np = np.spec.expect("spec");
    for dep in r.all::<Deployment>("Deployment") {
        assert!(
            selects(
                np.pod_selector
                    .as_ref()
                    .and_then(|s| s.match_labels.as_ref()),
                &pod_labels(&dep)
            ),
            "the NetworkPolicy covers {:?}",
            dep.metadata.name
        );
    }
    let allowed: BTreeSet<(i32, String)> = np
        .ingress
        .unwrap_or_default()
        .into_iter()
        .filter(|rule| rule.from.as_ref().is_none_or(Vec::is_empty))
        .flat_map(|rule| rule.ports.unwrap_or_default())
        .filter_map(|p| match p.port {
            Some(IntOrString::Int(n)) => Some((n, p.protocol.unwrap_or_else(|| "TCP".into()))),
            _ => None,
        })
        .collect();
    for want in [(5353, "UDP"), (5353, "TCP"), (9153, "TCP")] {
        assert!(
            allowed.contains(&(want.0, want.1.to_owned())),
            "NetworkPolicy allows {want:?} from anywhere: {allowed:?}"
        );
    }
    // Egress stays open (remote API servers live anywhere).
    assert!(
        !np.policy_types
            .unwrap_or_default()
            .iter()
            .any(|t| t == "Egress"),
        "egress is left open, as networkpolicy.yaml documents"
    );
}

#[test]
fn overlay_dns_renders_the_dns_server_only() {
    let docs = kustomize("overlays/dns");
    let r = Rendered::new("overlays/dns", docs);
    assert_eq!(r.keys(), keys(&BASE_OBJECTS), "deploy/overlays/dns objects");
    check_namespaces("overlays/dns", &r);
    check_dns(&r);
}

#[test]
fn overlay_dns_mirror_renders_both_deployments() {
    let docs = kustomize("overlays/dns-mirror");
    let r = Rendered::new("overlays/dns-mirror", docs);
    let mut want = keys(&BASE_OBJECTS);
    want.extend(keys(&MIRROR_OBJECTS));
    assert_eq!(r.keys(), want, "deploy/overlays/dns-mirror objects");
    check_namespaces("overlays/dns-mirror", &r);
    check_dns(&r);

    let d: Deployment = r.get("Deployment", NS, MIRROR);
    let (c, text) = check_workload(&r, &d);
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("mirror"));
    assert_eq!(pod_spec(&d).service_account_name.as_deref(), Some(MIRROR));
    let dns_labels = pod_labels(&r.get::<Deployment>("Deployment", NS, DNS));
    let svc: Service = r.get("Service", NS, DNS);
    assert!(
        !selects(svc.spec.and_then(|s| s.selector).as_ref(), &pod_labels(&d)),
        "the DNS Service must not send queries to the mirror pods"
    );
    assert_ne!(dns_labels, pod_labels(&d));
    let pdb: PodDisruptionBudget = r.get("PodDisruptionBudget", NS, MIRROR);
    assert!(selects(
        pdb.spec
            .and_then(|s| s.selector)
            .and_then(|s| s.match_labels)
            .as_ref(),
        &pod_labels(&d)
    ));

    let config = check_config(&r, &d, &args, &text);
    let mirror = config.mirror.expect("mirror options");
    // The Lease's namespace comes from the downward API; it is the
    // Deployment's own, where local-mirror.yaml's Lease Role is.
    let env = c.env.clone().unwrap_or_default();
    let pod_ns = env
        .iter()
        .find(|e| e.name == "POD_NAMESPACE")
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.field_ref.as_ref())
        .map(|f| f.field_path.as_str());
    assert_eq!(pod_ns, Some("metadata.namespace"), "POD_NAMESPACE");
    assert!(
        env.iter().any(|e| e.name == "POD_NAME"),
        "POD_NAME names the leader"
    );
    // In a pod it is POD_NAMESPACE; in this test process (normally without
    // one) the default, which is the same namespace.
    let expected = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| NS.to_owned());
    assert_eq!(mirror.namespace, expected, "the Lease's namespace");
    let lease: Role = r.get("Role", NS, "clusterset-dns-mirror-lease");
    assert!(
        lease
            .rules
            .unwrap_or_default()
            .iter()
            .any(|rule| rule.resource_names.as_deref() == Some(&["clusterset-dns-mirror".into()])),
        "the Lease Role names the Lease"
    );
}

#[test]
fn remote_renders_the_linked_cluster_rbac() {
    let docs = kustomize("remote");
    let r = Rendered::new("remote", docs);
    assert_eq!(r.keys(), keys(&REMOTE_OBJECTS), "deploy/remote objects");
    check_namespaces("remote", &r);
    let secret: Secret = r.get("Secret", NS, "clusterset-dns-remote-token");
    assert_eq!(
        secret.type_.as_deref(),
        Some("kubernetes.io/service-account-token")
    );
}

/// The RBAC files are where rbac.rs reads them, and the rendered rules are
/// theirs, unchanged by kustomize.
#[test]
fn rbac_files_render_unchanged() {
    let docs = kustomize("overlays/dns-mirror");
    let rendered = Rendered::new("overlays/dns-mirror", docs);
    let remote = kustomize("remote");
    let remote = Rendered::new("remote", remote);
    for (file, r) in [
        ("base/local-dns.yaml", &rendered),
        ("overlays/dns-mirror/local-mirror.yaml", &rendered),
        ("remote/remote.yaml", &remote),
    ] {
        let text = std::fs::read_to_string(deploy_dir().join(file)).expect(file);
        for doc in documents(&text).expect("yaml") {
            let key = (
                doc["kind"].as_str().unwrap_or("").to_owned(),
                doc["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                doc["metadata"]["name"].as_str().unwrap_or("").to_owned(),
            );
            let out = r.0.get(&key).unwrap_or_else(|| panic!("{file}: {key:?}"));
            for field in ["rules", "roleRef", "subjects"] {
                assert_eq!(doc[field], out[field], "{file}: {key:?} {field}");
            }
        }
    }
}

// ---------------------------------------------------------------------------
// CoreDNS, scripts, image, docs
// ---------------------------------------------------------------------------

fn shipped_config() -> FileConfig {
    let text = std::fs::read_to_string(deploy_dir().join("base/config.yaml")).expect("config");
    let cm: ConfigMap = serde_saphyr::from_str(&text).expect("ConfigMap");
    serde_saphyr::from_str(&cm.data.expect("data")["config.yaml"]).expect("FileConfig")
}

/// The stub-zone block forwards the configured zone, and caches no longer
/// than the configured TTL.
#[test]
fn coredns_block_matches_the_config() {
    let text = std::fs::read_to_string(deploy_dir().join("coredns/clusterset.Corefile"))
        .expect("clusterset.Corefile");
    let block: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let config = shipped_config();
    let zone = config.zone.unwrap_or_else(|| "clusterset.local".into());
    let ttl = config.ttl.unwrap_or(5);
    assert_eq!(
        block,
        [
            format!("{zone}:53 {{").as_str(),
            "errors",
            format!("cache {ttl}").as_str(),
            "forward . CLUSTERSET_DNS_SERVICE_IP",
            "}",
        ]
    );
}

/// A stand-in kubectl (a shell script) answering the calls the scripts make
/// from files in `dir`, recording patches there; `create` goes to the real
/// kubectl (client-side only).
fn fake_kubectl(dir: &Path) -> PathBuf {
    let path = dir.join("kubectl");
    let script = r#"#!/bin/sh
d=$(dirname "$0")
echo "$*" >>"$d/calls"
case "$*" in
    *"get service clusterset-dns "*) cat "$d/clusterip" ;;
    *"get configmap coredns "*) printf '4711\n'; cat "$d/Corefile" ;;
    *"create configmap "*) exec kubectl "$@" ;;
    *"patch configmap coredns "*)
        while [ $# -gt 0 ]; do
            [ "$1" = --patch-file ] && cp "$2" "$d/patch.json"
            shift
        done ;;
    *"config view "*) printf 'https://203.0.113.7:6443' ;;
    *"get secret clusterset-dns-remote-token "*"go-template"*) cat "$d/token" ;;
    *"get secret clusterset-dns-remote-token "*"jsonpath"*) printf 'Q0EgY2VydA==' ;;
    *) echo "fake kubectl: unexpected call: $*" >&2; exit 1 ;;
esac
"#;
    std::fs::write(&path, script).expect("write fake kubectl");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

fn run_script(dir: &Path, script: &str, args: &[&str]) -> Output {
    Command::new("sh")
        .arg(deploy_dir().join(script))
        .args(args)
        .env("KUBECTL", dir.join("kubectl"))
        .env("TMPDIR", dir)
        .output()
        .expect("sh runs")
}

const COREFILE: &str = ".:53 {
\terrors
\thealth {
\t   lameduck 5s
\t}
\tkubernetes cluster.local in-addr.arpa ip6.arpa {
\t   pods insecure
\t   fallthrough in-addr.arpa ip6.arpa
\t}
\thosts {
\t   192.0.2.1 \"quoted\" back\\slash
\t}
\tforward . /etc/resolv.conf
\tcache 30
\tloop
\treload
}
";

#[test]
fn patch_corefile_adds_the_block_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    fake_kubectl(dir);
    std::fs::write(dir.join("clusterip"), "10.96.0.53").unwrap();
    std::fs::write(dir.join("Corefile"), COREFILE).unwrap();
    let script = "coredns/patch-corefile.sh";

    // Printed: the Corefile as it was, then our block with the address.
    let out = run_script(dir, script, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let block = "clusterset.local:53 {\n    errors\n    cache 5\n    forward . 10.96.0.53\n}\n";
    assert!(printed.starts_with(COREFILE), "{printed}");
    assert!(printed.ends_with(block), "{printed}");
    assert_eq!(printed.matches("clusterset.local:53").count(), 1);
    assert!(!dir.join("patch.json").exists(), "printing changes nothing");

    // Idempotent: on a Corefile that has the block, nothing is added.
    std::fs::write(dir.join("Corefile"), &printed).unwrap();
    let again = run_script(dir, script, &[]);
    assert!(again.status.success());
    assert_eq!(String::from_utf8(again.stdout).unwrap(), printed);
    let applied = run_script(dir, script, &["--apply"]);
    assert!(applied.status.success());
    assert!(
        !dir.join("patch.json").exists(),
        "applying it again changes nothing"
    );
    assert!(String::from_utf8_lossy(&applied.stderr).contains("nothing to do"));

    // Applied: a merge patch of exactly the printed Corefile, conditional on
    // the resourceVersion read, with a backup of the old one.
    std::fs::write(dir.join("Corefile"), COREFILE).unwrap();
    let out = run_script(dir, script, &["--apply", "--context", "west"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let patch: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("patch.json")).unwrap())
            .expect("the patch is JSON");
    assert_eq!(patch["data"]["Corefile"], printed.as_str());
    assert_eq!(patch["metadata"]["resourceVersion"], "4711");
    let calls = std::fs::read_to_string(dir.join("calls")).unwrap();
    assert!(
        calls.contains("--context west -n kube-system patch configmap coredns --type merge"),
        "{calls}"
    );
    let backups: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("coredns-Corefile.4711."))
        .collect();
    assert_eq!(backups.len(), 1, "one backup");
    assert_eq!(std::fs::read_to_string(&backups[0]).unwrap(), COREFILE);

    // Another zone.
    let out = run_script(dir, script, &["--zone", "mcs.example"]);
    assert!(out.status.success());
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .ends_with("mcs.example:53 {\n    errors\n    cache 5\n    forward . 10.96.0.53\n}\n")
    );

    // No ClusterIP (headless, or not applied): refused.
    std::fs::write(dir.join("clusterip"), "None").unwrap();
    let out = run_script(dir, script, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no ClusterIP"));

    // Nothing left behind but the backup.
    let left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("patch-corefile."))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn remote_kubeconfig_script_prints_a_kubeconfig() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    fake_kubectl(dir);
    let token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln";
    std::fs::write(dir.join("token"), token).unwrap();
    let script = "remote/kubeconfig.sh";

    let out = run_script(dir, script, &["--context", "east"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let kc = kube::config::Kubeconfig::from_yaml(&printed).expect("a kubeconfig");
    assert_eq!(kc.current_context.as_deref(), Some("east"));
    let cluster = kc.clusters[0].cluster.as_ref().expect("cluster");
    assert_eq!(cluster.server.as_deref(), Some("https://203.0.113.7:6443"));
    assert_eq!(
        cluster.certificate_authority_data.as_deref(),
        Some("Q0EgY2VydA==")
    );
    // The token, as written (kube's type keeps it secret).
    assert_eq!(kc.auth_infos[0].name, "clusterset-dns-remote");
    let raw: Value = serde_saphyr::from_str(&printed).expect("yaml");
    assert_eq!(raw["users"][0]["user"]["token"], token);

    let out = run_script(
        dir,
        script,
        &[
            "--context",
            "east",
            "--name",
            "east-1",
            "--server",
            "https://[fd00::1]:6443",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kc = kube::config::Kubeconfig::from_yaml(&String::from_utf8(out.stdout).unwrap())
        .expect("a kubeconfig");
    assert_eq!(kc.current_context.as_deref(), Some("east-1"));
    assert_eq!(
        kc.clusters[0]
            .cluster
            .as_ref()
            .and_then(|c| c.server.as_deref()),
        Some("https://[fd00::1]:6443")
    );

    // Not a cluster name, or not a URL: refused.
    for args in [
        &["--context", "East_1"][..],
        &["--context", "east", "--server", "http://x"],
    ] {
        let out = run_script(dir, script, args);
        assert!(!out.status.success(), "{args:?} accepted");
    }
}

/// The image runs as the user the Deployments ask for, exposes their ports
/// and builds the binary they run.
#[test]
fn dockerfile_matches_the_manifests() {
    let text = std::fs::read_to_string(deploy_dir().join("Dockerfile")).expect("Dockerfile");
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    let has = |want: &str| lines.iter().any(|l| l.contains(want));
    assert!(has("cargo build --release --locked --bin clusterset-dns"));
    assert!(has("FROM gcr.io/distroless/cc-debian12:nonroot"));
    assert!(
        lines
            .iter()
            .any(|l| *l == format!("USER {UID}:{UID}") || *l == format!("USER {UID}"))
    );
    let expose = lines
        .iter()
        .find_map(|l| l.strip_prefix("EXPOSE "))
        .expect("EXPOSE");
    let exposed: BTreeSet<&str> = expose.split_whitespace().collect();
    assert_eq!(
        exposed,
        BTreeSet::from(["5353/udp", "5353/tcp", "9153/tcp"])
    );
    let entry = lines
        .iter()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "))
        .expect("ENTRYPOINT");
    let entry: Vec<String> = serde_json::from_str(entry).expect("exec form");
    assert!(entry[0].ends_with("/clusterset-dns"));
}

/// Every `deploy/...` path the docs mention exists.
#[test]
fn documented_paths_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md")];
    docs.extend(
        std::fs::read_dir(deploy_dir())
            .expect("deploy/")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    let mut missing = Vec::new();
    let mut seen = 0;
    for doc in &docs {
        let Ok(text) = std::fs::read_to_string(doc) else {
            continue;
        };
        for (i, _) in text.match_indices("deploy/") {
            if i > 0 && text.as_bytes()[i - 1].is_ascii_alphanumeric() {
                continue;
            }
            let path: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "._/-".contains(*c))
                .collect();
            let path = path.trim_end_matches(['.', '/']);
            seen += 1;
            if !root.join(path).exists() {
                missing.push(format!("{}: {path}", doc.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documented paths missing:\n  {}",
        missing.join("\n  ")
    );
    assert!(seen > 0, "no deploy/ path documented");
}
