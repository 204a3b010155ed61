//! RBAC: the RBAC manifests of `deploy/` enforced by kubesim, exactly as written.
//!
//! One fleet (local + east + north), three ServiceAccounts with tokens
//! kubesim issues: the DNS server and the mirror controller in the local
//! cluster, the remote reader in each linked cluster (its kubeconfig is what
//! the Link credentials Secrets hold). Then:
//! - the live DNS server runs from Links and Secrets and answers, without
//!   `--mcs` (its ClusterProperty watch, every cluster's place, still runs)
//!   and with it;
//! - the mirror controller, two replicas, creates, updates and deletes
//!   mirrors, reports objects it does not own, and hands the Lease over;
//! - sufficiency: no request of our ServiceAccounts was denied;
//! - minimality: every verb × resource of every rule, for every
//!   ServiceAccount a binding gives it to, was what allowed some request.
//!   A grant no request used fails the test, unless its manifest keeps it
//!   with a `# kept-unused: <verb> <resource>[.<group>] <why>` comment.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use kubesim::rbac::{Attributes, Decision, UserInfo};
use serde_json::{Value, json};

use crate::kubesim_api::{client, sim};
use crate::live::{link_doc, secret_doc};
use crate::mirror::{endpoints_of, get, items, svc_path};
use crate::support::strings;
use crate::support::{
    Links, Live, MirrorSetup, Options, Proto, TestServer, ask, create_object, eventually, q,
    start_live,
};

/// Where our ServiceAccounts live (and the mirror's Lease).
const SA_NS: &str = "clusterset-dns";
/// Where Links, their Secrets and Linkerd's Leases live.
const LINK_NS: &str = "linkerd-multicluster";
/// Where the test's Services live.
const NS: &str = "prod";
const DNS_SA: &str = "clusterset-dns";
const MIRROR_SA: &str = "clusterset-dns-mirror";
const REMOTE_SA: &str = "clusterset-dns-remote";
const LOCAL_FILES: [&str; 2] = [
    "base/local-dns.yaml",
    "overlays/dns-mirror/local-mirror.yaml",
];
const REMOTE_FILES: [&str; 1] = ["remote/remote.yaml"];

fn manifest(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file)
}

fn sa_user(name: &str) -> String {
    format!("system:serviceaccount:{SA_NS}:{name}")
}

// ---------------------------------------------------------------------------
// The fleet
// ---------------------------------------------------------------------------

struct Fleet {
    sim: kubesim::Sim,
    dir: tempfile::TempDir,
    /// Admin client of the local cluster (the test's own hand).
    local: kube::Client,
    /// The DNS server's kubeconfig file for the local cluster.
    dns_kubeconfig: PathBuf,
    /// The mirror controller's kubeconfig file for the local cluster.
    mirror_kubeconfig: PathBuf,
}

impl Fleet {
    fn cluster(&self, name: &str) -> &Arc<kubesim::Cluster> {
        self.sim.cluster(name).expect("cluster")
    }
}

fn service(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": name, "namespace": NS, "labels": labels},
           "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

fn slice(service: &str, name: &str, addrs: &[&str]) -> Value {
    let endpoints: Vec<Value> = addrs
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": name, "namespace": NS,
                        "labels": {"kubernetes.io/service-name": service}},
           "addressType": "IPv4",
           "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
           "endpoints": endpoints})
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn load(files: &[&str]) -> kubesim::Policy {
    let paths: Vec<PathBuf> = files.iter().map(|f| manifest(f)).collect();
    kubesim::load_policy(&paths)
        .unwrap_or_else(|e| panic!("the deploy/ RBAC manifests do not load: {e}"))
}

/// The fleet with its data, the manifests enforced, every ServiceAccount
/// token issued, and east and north linked with the remote ServiceAccount's
/// kubeconfigs.
async fn fleet() -> Fleet {
    let (sim, dir) = sim(&["local", "east", "north"], |_| {}).await;
    let admin = |n: &str| client(sim.cluster(n).expect("cluster"));
    let (local, east, north) = (
        admin("local").await,
        admin("east").await,
        admin("north").await,
    );
    let exported = json!({"mirror.linkerd.io/exported": "remote-discovery",
                          "mirror.linkerd.io/federated": "member"});
    for (c, ip) in [(&east, "10.1.0.1"), (&north, "10.2.0.1")] {
        create_object(c, namespace(SA_NS)).await;
        create_object(c, service("api", exported.clone())).await;
        create_object(c, slice("api", "api-1", &[ip])).await;
    }
    create_object(
        &east,
        service(
            "web",
            json!({"mirror.linkerd.io/exported": "remote-discovery"}),
        ),
    )
    .await;
    create_object(&east, slice("web", "web-1", &["10.1.1.1"])).await;
    create_object(
        &east,
        json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
               "metadata": {"name": "web", "namespace": NS}}),
    )
    .await;
    create_object(
        &east,
        json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
               "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": "east"}}),
    )
    .await;
    // Where east and the local cluster are: read in every mode.
    for (c, region) in [(&east, "us-east"), (&local, "eu-west")] {
        create_object(
            c,
            json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                   "metadata": {"name": "region.clusterset-dns.io"}, "spec": {"value": region}}),
        )
        .await;
    }
    for ns in [SA_NS, LINK_NS, NS] {
        create_object(&local, namespace(ns)).await;
    }

    // Enforced from here on; the admin user is system:masters.
    sim.cluster("local")
        .expect("local")
        .set_policy(Some(load(&LOCAL_FILES)));
    for name in ["east", "north"] {
        let remote = sim.cluster(name).expect("remote");
        remote.set_policy(Some(load(&REMOTE_FILES)));
        let token = remote.issue_service_account_token(SA_NS, REMOTE_SA);
        let kubeconfig = remote.kubeconfig_for(REMOTE_SA, &token);
        create_object(
            &local,
            secret_doc(&format!("cluster-credentials-{name}"), &kubeconfig),
        )
        .await;
        create_object(&local, link_doc(name)).await;
    }
    let kubeconfig = |sa: &str| {
        let c = sim.cluster("local").expect("local");
        let token = c.issue_service_account_token(SA_NS, sa);
        let path = dir.path().join(format!("{sa}.kubeconfig"));
        std::fs::write(&path, c.kubeconfig_for(sa, &token)).expect("write kubeconfig");
        path
    };
    let dns_kubeconfig = kubeconfig(DNS_SA);
    let mirror_kubeconfig = kubeconfig(MIRROR_SA);
    Fleet {
        sim,
        dir,
        local,
        dns_kubeconfig,
        mirror_kubeconfig,
    }
}

// ---------------------------------------------------------------------------
// Requests the test makes (as admin)
// ---------------------------------------------------------------------------

async fn set_endpoints(c: &kube::Client, service: &str, addrs: &[&str]) {
    let endpoints: Vec<Value> = addrs
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    let req = http::Request::patch(format!(
        "/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/{service}-1"
    ))
    .header("content-type", "application/merge-patch+json")
    .body(serde_json::to_vec(&json!({"endpoints": endpoints})).expect("json"))
    .expect("request");
    c.request_text(req).await.expect("patch slice");
}

/// The A records of `<label>.prod.svc.clusterset.local`, if NOERROR.
async fn a(dns: SocketAddr, label: &str) -> Option<BTreeSet<String>> {
    let name = format!("{label}.{NS}.svc.clusterset.local.");
    let (msg, _) = ask(dns, Proto::Udp, &q(&name, RecordType::A)).await;
    (msg.metadata.response_code == ResponseCode::NoError).then(|| {
        msg.answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0.to_string()),
                _ => None,
            })
            .collect()
    })
}

async fn answers(dns: SocketAddr, label: &str, want: &[&str]) {
    let want: BTreeSet<String> = want.iter().map(|s| (*s).to_owned()).collect();
    eventually(
        &format!("{label} answers {want:?}"),
        Duration::from_secs(5),
        || async { a(dns, label).await.as_ref() == Some(&want) },
    )
    .await;
}

// ---------------------------------------------------------------------------
// The two runs
// ---------------------------------------------------------------------------

/// The place `/debug/clusters` shows for each cluster, once it shows
/// `want` (region, or `None` for unknown).
async fn places(admin: SocketAddr, want: &[(&'static str, Option<&str>)]) {
    for (cluster, region) in want {
        let region = region.map_or(Value::Null, |r| json!(r));
        crate::live::until_report(
            admin,
            cluster,
            &format!("{cluster}'s region {region}"),
            Duration::from_secs(5),
            |r| r["place"]["region"] == region,
        )
        .await;
    }
}

/// (a) The live DNS server as the `clusterset-dns` ServiceAccount, its
/// linked clusters from Links and Secrets: first without `--mcs` (its
/// ClusterProperty watch runs under the always-needed roles), then with.
async fn run_dns_server(f: &Fleet) {
    let plain = start_live(
        Options {
            local: Some("local"),
            ..Options::default()
        },
        Live::new(
            &f.dns_kubeconfig,
            Links::Linkerd {
                namespace: LINK_NS.into(),
            },
        ),
    )
    .await;
    answers(plain.dns, "api-east", &["10.1.0.1"]).await;
    places(
        plain.admin,
        &[
            ("local", Some("eu-west")),
            ("east", Some("us-east")),
            ("north", None),
        ],
    )
    .await;
    plain.server.stop().await;

    let server = start_live(
        Options {
            local: Some("local"),
            // Its MCS watches (ServiceExports, ClusterProperty, local
            // ServiceImports) are what the mcs roles grant.
            mcs: true,
            ..Options::default()
        },
        Live::new(
            &f.dns_kubeconfig,
            Links::Linkerd {
                namespace: LINK_NS.into(),
            },
        ),
    )
    .await;
    let dns = server.dns;
    answers(dns, "api-east", &["10.1.0.1"]).await;
    answers(dns, "api-north", &["10.2.0.1"]).await;
    answers(dns, "web-east", &["10.1.1.1"]).await;
    answers(dns, "api-federated", &["10.1.0.1", "10.2.0.1"]).await;
    // East exports web with a ServiceExport too: the MCS name.
    answers(dns, "web", &["10.1.1.1"]).await;
    places(server.admin, &[("east", Some("us-east"))]).await;
    // A change in a linked cluster comes through the remote watch.
    let north = client(f.cluster("north")).await;
    set_endpoints(&north, "api", &["10.2.0.2"]).await;
    answers(dns, "api-north", &["10.2.0.2"]).await;
    server.server.stop().await;
}

/// A `serve --mirror` replica in process, as the `clusterset-dns-mirror`
/// ServiceAccount, electing with the Lease where the deployment puts it.
async fn start_mirror(f: &Fleet, identity: &str) -> TestServer {
    let mut live = Live::new(
        &f.mirror_kubeconfig,
        Links::Linkerd {
            namespace: LINK_NS.into(),
        },
    );
    let mut mirror = MirrorSetup::new(identity);
    mirror.namespace = SA_NS.to_owned();
    mirror.resync = Duration::from_secs(1);
    live.mirror = Some(mirror);
    start_live(
        Options {
            local: Some("local"),
            // Its MCS writes (ServiceImports, ServiceExport conditions) are
            // what clusterset-dns-mirror-mcs grants.
            mcs: true,
            ..Options::default()
        },
        live,
    )
    .await
}

const IMPORTS: &str = "/apis/multicluster.x-k8s.io/v1beta1/namespaces";

fn mcs_doc(kind: &str, name: &str, labels: Value) -> Value {
    json!({"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": kind,
           "metadata": {"name": name, "namespace": NS, "labels": labels}})
}

/// The local cluster exports `db` itself, and holds a ServiceImport `db`
/// of someone else's: the controller's create finds it (409, then a get)
/// and leaves it; the export gets its conditions.
async fn mcs_local_export(c: &kube::Client) {
    create_object(c, service("db", json!({}))).await;
    create_object(c, mcs_doc("ServiceExport", "db", json!({}))).await;
    let mut theirs = mcs_doc("ServiceImport", "db", json!({"team": "mine"}));
    theirs["spec"] = json!({"type": "ClusterSetIP", "ports": [{"port": 80, "protocol": "TCP"}]});
    create_object(c, theirs).await;
}

/// East's `web` (exported by a ServiceExport in the fleet) is imported with
/// its derived Service's ClusterIP (a create, then an apply), and the local
/// export `db` is valid.
async fn mcs_imported(c: &kube::Client) {
    eventually(
        "web imported with its ClusterIP",
        Duration::from_secs(10),
        || async {
            let import = get(c, &format!("{IMPORTS}/{NS}/serviceimports/web")).await;
            let derived = get(c, &svc_path("derived-web")).await;
            match (import, derived) {
                (Some(i), Some(d)) => {
                    !d["spec"]["clusterIP"].is_null() && i["spec"]["ips"] == d["spec"]["clusterIPs"]
                }
                _ => false,
            }
        },
    )
    .await;
    eventually("db's export conditions", Duration::from_secs(5), || async {
        get(c, &format!("{IMPORTS}/{NS}/serviceexports/db"))
            .await
            .is_some_and(|e| {
                e["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Valid" && c["status"] == "True")
                })
            })
    })
    .await;
    let db = get(c, &format!("{IMPORTS}/{NS}/serviceimports/db"))
        .await
        .expect("their import");
    assert_eq!(db["metadata"]["labels"], json!({"team": "mine"}));
}

/// East stops exporting `web`: its ServiceImport is deleted.
async fn mcs_unexported(f: &Fleet) {
    let east = client(f.cluster("east")).await;
    let req = http::Request::delete(format!("{IMPORTS}/{NS}/serviceexports/web"))
        .body(Vec::new())
        .expect("request");
    east.request_text(req).await.expect("delete export");
    eventually("web's import deleted", Duration::from_secs(10), || async {
        get(&f.local, &format!("{IMPORTS}/{NS}/serviceimports/web"))
            .await
            .is_none()
    })
    .await;
}

/// (b) The mirror controller: two replicas, objects created, updated and
/// deleted, NotOwned Events, a Lease takeover.
async fn run_mirror(f: &Fleet) {
    let c = &f.local;
    // Same-named objects the controller does not own: a Service, and an
    // EndpointSlice with the name of api-east's first slice.
    create_object(c, service("web-east", json!({"team": "mine"}))).await;
    create_object(c, slice("mine", "api-east-v4-0", &["10.9.9.9"])).await;
    mcs_local_export(c).await;

    let first = start_mirror(f, "replica-a").await;
    eventually("replica-a leads", Duration::from_secs(5), || async {
        first.server.shared.mirror.is_leader()
    })
    .await;
    eventually("mirrors created", Duration::from_secs(10), || async {
        get(c, &svc_path("api-east")).await.is_some()
            && endpoints_of(c, "api-north").await == ["10.2.0.2"]
            && endpoints_of(c, "api-federated").await == ["10.1.0.1", "10.2.0.2"]
    })
    .await;
    eventually("NotOwned events", Duration::from_secs(5), || async {
        let events = items(c, &format!("/apis/events.k8s.io/v1/namespaces/{NS}/events")).await;
        let reported = |kind: &str, name: &str| {
            events.iter().any(|e| {
                e["reason"] == "NotOwned"
                    && e["regarding"]["kind"] == kind
                    && e["regarding"]["name"] == name
            })
        };
        reported("Service", "web-east") && reported("EndpointSlice", "api-east-v4-0")
    })
    .await;
    let web = get(c, &svc_path("web-east"))
        .await
        .expect("user's web-east");
    assert_eq!(web["metadata"]["labels"], json!({"team": "mine"}));
    mcs_imported(c).await;

    // A second replica follows.
    let second = start_mirror(f, "replica-b").await;

    // An update in north: the leader applies the changed slices.
    let north = client(f.cluster("north")).await;
    set_endpoints(&north, "api", &["10.2.0.3"]).await;
    eventually(
        "north's change mirrored",
        Duration::from_secs(5),
        || async {
            endpoints_of(c, "api-north").await == ["10.2.0.3"]
                && endpoints_of(c, "api-federated").await == ["10.1.0.1", "10.2.0.3"]
        },
    )
    .await;
    // The follower had the change too (its DNS answers it, from the model
    // its mirror derives from) and wrote nothing for it.
    answers(second.dns, "api-north", &["10.2.0.3"]).await;
    assert!(!second.server.shared.mirror.is_leader());
    assert_eq!(second.server.shared.mirror.ok_writes(), 0);

    // The leader goes; the follower takes the Lease over.
    first.server.stop().await;
    eventually("replica-b takes over", Duration::from_secs(6), || async {
        second.server.shared.mirror.is_leader()
    })
    .await;

    // North unlinked: its mirrors are deleted, the federated Service is
    // updated to east alone.
    let req = http::Request::delete(format!(
        "/apis/multicluster.linkerd.io/v1alpha3/namespaces/{LINK_NS}/links/north"
    ))
    .body(Vec::new())
    .expect("request");
    c.request_text(req).await.expect("delete link");
    eventually(
        "north's mirrors deleted",
        Duration::from_secs(5),
        || async {
            get(c, &svc_path("api-north")).await.is_none()
                && endpoints_of(c, "api-north").await.is_empty()
                && endpoints_of(c, "api-federated").await == ["10.1.0.1"]
        },
    )
    .await;
    eventually(
        "api-federated lists east alone",
        Duration::from_secs(5),
        || async {
            get(c, &svc_path("api-federated")).await.is_some_and(|v| {
                v["metadata"]["annotations"]["multicluster.linkerd.io/remote-discovery"]
                    == "api@east"
            })
        },
    )
    .await;
    mcs_unexported(f).await;
    assert!(second.server.shared.mirror.ok_writes() > 0);
    second.server.stop().await;
}

// ---------------------------------------------------------------------------
// What the manifests grant
// ---------------------------------------------------------------------------

/// One verb on one resource that a binding gives one ServiceAccount through
/// one rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    /// The manifest defining the role.
    file: String,
    /// `ClusterRoleBinding/<name>` or `RoleBinding/<ns>/<name>`.
    binding: String,
    /// `ClusterRole/<name>` or `Role/<ns>/<name>`, as kubesim's RuleId.
    role: String,
    rule: usize,
    user: String,
    verb: String,
    group: String,
    /// Plural, with `/<subresource>` if any.
    resource: String,
    /// `cluster-wide` or the Role's namespace.
    scope: String,
}

impl Grant {
    fn describe(&self) -> String {
        let group = if self.group.is_empty() {
            String::new()
        } else {
            format!(".{}", self.group)
        };
        format!(
            "{} {}{} ({}) for {} via {} -> {} rule {} [{}]",
            self.verb,
            self.resource,
            group,
            self.scope,
            self.user,
            self.binding,
            self.role,
            self.rule,
            self.file
        )
    }
}

/// The key the audit side fills in.
type Use = (String, String, usize, String, String, String);

impl Grant {
    fn key(&self) -> Use {
        (
            self.user.clone(),
            self.role.clone(),
            self.rule,
            self.verb.clone(),
            self.group.clone(),
            self.resource.clone(),
        )
    }
}

/// `(verb, resource, group)` triples that a manifest keeps without a use,
/// from `# kept-unused: <verb> <resource>[.<group>] <why>` lines.
fn kept_unused(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("# kept-unused:"))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            let verb = words.next()?.to_owned();
            let target = words.next()?;
            let (resource, group) = target.split_once('.').unwrap_or((target, ""));
            assert!(
                words.next().is_some(),
                "kept-unused without a reason: {rest}"
            );
            Some((verb, resource.to_owned(), group.to_owned()))
        })
        .collect()
}

/// Every grant of the manifests, and the ones kept without a use.
fn grants(files: &[&str]) -> (Vec<Grant>, BTreeSet<Grant>) {
    let mut roles: BTreeMap<String, (String, Vec<Value>)> = BTreeMap::new();
    let mut bindings: Vec<(String, String, Value)> = Vec::new();
    let mut kept: BTreeMap<String, Vec<(String, String, String)>> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(manifest(file)).expect("manifest");
        kept.insert((*file).to_owned(), kept_unused(&text));
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("manifest parses");
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            let name = doc["metadata"]["name"].as_str().unwrap_or("").to_owned();
            let ns = doc["metadata"]["namespace"].as_str().unwrap_or("");
            let kind = doc["kind"].as_str().unwrap_or("");
            match kind {
                "ClusterRole" => {
                    let rules = doc["rules"].as_array().cloned().unwrap_or_default();
                    roles.insert(format!("ClusterRole/{name}"), ((*file).to_owned(), rules));
                }
                "Role" => {
                    let rules = doc["rules"].as_array().cloned().unwrap_or_default();
                    roles.insert(format!("Role/{ns}/{name}"), ((*file).to_owned(), rules));
                }
                "ClusterRoleBinding" => {
                    bindings.push((format!("ClusterRoleBinding/{name}"), String::new(), doc));
                }
                "RoleBinding" => {
                    bindings.push((format!("RoleBinding/{ns}/{name}"), ns.to_owned(), doc));
                }
                "ServiceAccount" | "Namespace" | "Secret" => {}
                other => panic!("{file}: unexpected kind {other}"),
            }
        }
    }
    let mut out = Vec::new();
    let mut exempt = BTreeSet::new();
    for (binding, binding_ns, doc) in &bindings {
        let role_ref = &doc["roleRef"];
        let role_kind = role_ref["kind"].as_str().unwrap_or("");
        let role_name = role_ref["name"].as_str().unwrap_or("");
        let (role, scope) = match role_kind {
            "ClusterRole" if binding_ns.is_empty() => (
                format!("ClusterRole/{role_name}"),
                "cluster-wide".to_owned(),
            ),
            "Role" => (format!("Role/{binding_ns}/{role_name}"), binding_ns.clone()),
            // A ClusterRole bound in one namespace would need its grants
            // counted per namespace; the manifests do not do that.
            _ => panic!("{binding}: {role_kind} {role_name} bound in a namespace; not supported"),
        };
        let (file, rules) = roles
            .get(&role)
            .unwrap_or_else(|| panic!("{binding}: {role} is in no manifest"));
        for subject in doc["subjects"].as_array().into_iter().flatten() {
            assert_eq!(
                subject["kind"], "ServiceAccount",
                "{binding}: only ServiceAccounts are bound"
            );
            let user = format!(
                "system:serviceaccount:{}:{}",
                subject["namespace"].as_str().unwrap_or(binding_ns),
                subject["name"].as_str().unwrap_or("")
            );
            for (i, rule) in rules.iter().enumerate() {
                for verb in strings(&rule["verbs"]) {
                    for group in strings(&rule["apiGroups"]) {
                        for resource in strings(&rule["resources"]) {
                            let g = Grant {
                                file: file.clone(),
                                binding: binding.clone(),
                                role: role.clone(),
                                rule: i,
                                user: user.clone(),
                                verb: verb.clone(),
                                group: group.clone(),
                                resource: resource.clone(),
                                scope: scope.clone(),
                            };
                            if kept[file].contains(&(verb.clone(), resource.clone(), group.clone()))
                            {
                                exempt.insert(g.clone());
                            }
                            out.push(g);
                        }
                    }
                }
            }
        }
    }
    out.sort();
    (out, exempt)
}

// ---------------------------------------------------------------------------
// What the audit logs show
// ---------------------------------------------------------------------------

/// The groups kubesim gives a ServiceAccount token.
fn sa_info(user: &str) -> UserInfo {
    let ns = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|r| r.split(':').next())
        .unwrap_or("");
    UserInfo {
        name: user.to_owned(),
        groups: vec![
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".to_owned(),
        ],
    }
}

fn attributes(e: &kubesim::AuditEntry) -> Attributes {
    if e.group.is_empty() && e.resource.starts_with('/') {
        return Attributes::NonResource {
            verb: e.verb.clone(),
            path: e.resource.clone(),
        };
    }
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Attributes::Resource {
        verb: e.verb.clone(),
        api_group: e.group.clone(),
        resource: e.resource.clone(),
        subresource: some(&e.subresource),
        namespace: some(&e.namespace),
        name: some(&e.name),
    }
}

fn describe(e: &kubesim::AuditEntry) -> String {
    let mut resource = e.resource.clone();
    if !e.subresource.is_empty() {
        resource = format!("{resource}/{}", e.subresource);
    }
    if !e.group.is_empty() {
        resource = format!("{resource}.{}", e.group);
    }
    format!(
        "{} {} {resource} namespace={:?} name={:?} -> {}",
        e.user, e.verb, e.namespace, e.name, e.code
    )
}

/// How each ServiceAccount request of `cluster` was allowed, under the
/// policy `cluster` enforces: (grant key, namespace) → count. Denied or
/// unauthenticated ServiceAccount requests go to `refused`.
fn uses(
    cluster: &kubesim::Cluster,
    used: &mut BTreeMap<Use, BTreeMap<String, usize>>,
    refused: &mut Vec<String>,
) {
    let policy = cluster.policy().expect("policy enforced");
    for e in cluster.audit() {
        if e.code == 401 {
            refused.push(format!("{}: {}", cluster.name, describe(&e)));
            continue;
        }
        if !e.user.starts_with("system:serviceaccount:") {
            continue;
        }
        if e.code == 403 {
            refused.push(format!("{}: {}", cluster.name, describe(&e)));
            continue;
        }
        match policy.authorize(&sa_info(&e.user), &attributes(&e)) {
            Decision::Allow(Some(rule)) if rule.source != "builtin" => {
                let resource = if e.subresource.is_empty() {
                    e.resource.clone()
                } else {
                    format!("{}/{}", e.resource, e.subresource)
                };
                let key = (
                    e.user.clone(),
                    rule.role,
                    rule.rule,
                    e.verb.clone(),
                    e.group.clone(),
                    resource,
                );
                let ns = if e.namespace.is_empty() {
                    "(all)".to_owned()
                } else {
                    e.namespace.clone()
                };
                *used.entry(key).or_default().entry(ns).or_default() += 1;
            }
            Decision::Allow(_) => {} // discovery, granted to everyone
            Decision::Deny => panic!(
                "{}: {} was served but the policy denies it",
                cluster.name,
                describe(&e)
            ),
        }
    }
}

/// The manifests load, and the rules the test reads from them are the ones
/// kubesim enforces (same roles, same rule indices).
#[test]
fn rbac_manifests_load_and_bind_only_our_service_accounts() {
    for (files, expected_users) in [
        (&LOCAL_FILES[..], vec![sa_user(DNS_SA), sa_user(MIRROR_SA)]),
        (&REMOTE_FILES[..], vec![sa_user(REMOTE_SA)]),
    ] {
        let policy = load(files);
        let enforced: BTreeSet<(String, usize)> = policy
            .rules()
            .into_iter()
            .filter(|r| r.source != "builtin")
            .map(|r| (r.role, r.rule))
            .collect();
        let (grants, _) = grants(files);
        let read: BTreeSet<(String, usize)> =
            grants.iter().map(|g| (g.role.clone(), g.rule)).collect();
        assert_eq!(read, enforced, "{files:?}: every rule is bound, once read");
        let users: BTreeSet<String> = grants.iter().map(|g| g.user.clone()).collect();
        let expected: BTreeSet<String> = expected_users.into_iter().collect();
        assert_eq!(users, expected, "{files:?}");
        // Every bound ServiceAccount is defined in the same files.
        let defined: BTreeSet<String> = files
            .iter()
            .flat_map(|f| {
                let text = std::fs::read_to_string(manifest(f)).expect("manifest");
                serde_saphyr::from_multiple::<Value>(&text).expect("parses")
            })
            .filter(|d| d["kind"] == "ServiceAccount")
            .map(|d| {
                format!(
                    "system:serviceaccount:{}:{}",
                    d["metadata"]["namespace"].as_str().unwrap_or(""),
                    d["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(defined, expected, "{files:?}: ServiceAccounts defined");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_dns_server_and_mirror_need_every_rule_and_nothing_more() {
    let f = fleet().await;
    run_dns_server(&f).await;
    run_mirror(&f).await;

    let mut used: BTreeMap<Use, BTreeMap<String, usize>> = BTreeMap::new();
    let mut refused = Vec::new();
    for name in ["local", "east", "north"] {
        uses(f.cluster(name), &mut used, &mut refused);
    }

    // Sufficiency.
    assert!(
        refused.is_empty(),
        "requests of our ServiceAccounts refused:\n  {}",
        refused.join("\n  ")
    );
    let users: BTreeSet<&str> = used.keys().map(|k| k.0.as_str()).collect();
    for sa in [DNS_SA, MIRROR_SA, REMOTE_SA] {
        assert!(users.contains(sa_user(sa).as_str()), "{sa} made no request");
    }

    // Minimality.
    let mut files: Vec<&str> = LOCAL_FILES.to_vec();
    files.extend(REMOTE_FILES);
    let (all, exempt) = grants(&files);
    let mut report = Vec::new();
    let mut unused = Vec::new();
    for g in &all {
        match used.get(&g.key()) {
            Some(namespaces) => {
                let seen: Vec<String> = namespaces
                    .iter()
                    .map(|(ns, n)| format!("{ns}:{n}"))
                    .collect();
                report.push(format!("used  {}  <- {}", g.describe(), seen.join(" ")));
            }
            None if exempt.contains(g) => {
                report.push(format!("KEPT  {} (kept-unused comment)", g.describe()));
            }
            None => {
                report.push(format!("UNUSED {}", g.describe()));
                unused.push(g.describe());
            }
        }
    }
    eprintln!("RBAC coverage:\n  {}", report.join("\n  "));
    // Requests allowed by a rule no grant above describes cannot happen (the
    // grants are the policy), but say so if they do.
    let known: BTreeSet<Use> = all.iter().map(Grant::key).collect();
    let strays: Vec<String> = used
        .keys()
        .filter(|k| !known.contains(*k))
        .map(|k| format!("{k:?}"))
        .collect();
    assert!(strays.is_empty(), "uses outside the grants: {strays:?}");
    assert!(
        unused.is_empty(),
        "grants no request used (remove them, or keep one with a `# kept-unused:` comment saying why):\n  {}",
        unused.join("\n  ")
    );
    let _ = &f.dir;
}
