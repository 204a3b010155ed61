//! Dual-stack Services: which families and addresses each `ipFamilyPolicy` gets on a
//! dual-stack and on an IPv4-only cluster, headless and ExternalName Services, and addresses
//! kept, upgraded, downgraded and freed by updates and deletes.

use serde_json::{Value, json};

use super::{ServiceOp, run_service_op, svc};
use crate::resources::SERVICES;
use crate::status::ApiError;
use crate::store::{Obj, Store, StoreConfig};

/// A dual-stack cluster: kubesim's default ranges, 10.96.0.0/12 and fd00:96::/108.
fn dual() -> Store {
    Store::new(&StoreConfig::default())
}

/// An IPv4-only cluster.
fn v4_only() -> Store {
    Store::new(&StoreConfig {
        service_cidrs_v6: Vec::new(),
        ..StoreConfig::default()
    })
}

/// What a Service got: `clusterIP`, `clusterIPs`, `ipFamilies`, `ipFamilyPolicy` (null for
/// absent).
fn got(o: &Obj) -> Value {
    let spec = &o.value()["spec"];
    json!([
        spec["clusterIP"],
        spec["clusterIPs"],
        spec["ipFamilies"],
        spec["ipFamilyPolicy"]
    ])
}

/// The Status of a failed write: code and each cause's field and message.
fn refused(e: ApiError) -> Value {
    let causes: Vec<Value> = e
        .causes
        .iter()
        .map(|c| json!([c.field, c.message]))
        .collect();
    json!([e.code, e.reason, causes])
}

/// The 422 kube answers with one cause.
fn invalid(field: &str, message: &str) -> Value {
    json!([422, "Invalid", [[field, message]]])
}

/// Runs `ops` in order on `s`, each against what it should answer ([`got`] or [`refused`]).
fn run(s: &mut Store, ops: Vec<(&str, ServiceOp, Value)>) {
    for (case, op, want) in ops {
        let answer = match run_service_op(s, op) {
            Ok(o) => got(&o),
            Err(e) => refused(e),
        };
        assert_eq!(answer, want, "{case}");
    }
}

fn port() -> Value {
    json!([{"port": 80}])
}

/// A selector Service with `extra` spec fields.
fn with(extra: Value) -> Value {
    let mut spec = json!({"selector": {"app": "web"}, "ports": port()});
    if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
        s.extend(e);
    }
    spec
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of policies on a dual-stack cluster
fn each_policy_on_a_dual_stack_cluster() {
    use ServiceOp::Create;
    // kubernetes has 10.96.0.1; the rest come in order, IPv6 from fd00:96::1.
    let cases = vec![
        (
            "no policy is SingleStack, of the primary family",
            Create("a", with(json!({}))),
            json!(["10.96.0.2", ["10.96.0.2"], ["IPv4"], "SingleStack"]),
        ),
        (
            "SingleStack of IPv6",
            Create(
                "b",
                with(json!({"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv6"]})),
            ),
            json!(["fd00:96::1", ["fd00:96::1"], ["IPv6"], "SingleStack"]),
        ),
        (
            "PreferDualStack gets both, primary first",
            Create("c", with(json!({"ipFamilyPolicy": "PreferDualStack"}))),
            json!([
                "10.96.0.3",
                ["10.96.0.3", "fd00:96::2"],
                ["IPv4", "IPv6"],
                "PreferDualStack"
            ]),
        ),
        (
            "PreferDualStack in the order of ipFamilies",
            Create(
                "d",
                with(json!({"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv6", "IPv4"]})),
            ),
            json!([
                "fd00:96::3",
                ["fd00:96::3", "10.96.0.4"],
                ["IPv6", "IPv4"],
                "PreferDualStack"
            ]),
        ),
        (
            "PreferDualStack adds the family ipFamilies leaves out",
            Create(
                "e",
                with(json!({"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv6"]})),
            ),
            json!([
                "fd00:96::4",
                ["fd00:96::4", "10.96.0.5"],
                ["IPv6", "IPv4"],
                "PreferDualStack"
            ]),
        ),
        (
            "RequireDualStack gets both",
            Create("f", with(json!({"ipFamilyPolicy": "RequireDualStack"}))),
            json!([
                "10.96.0.6",
                ["10.96.0.6", "fd00:96::5"],
                ["IPv4", "IPv6"],
                "RequireDualStack"
            ]),
        ),
        (
            "requested addresses of both families",
            Create(
                "g",
                with(
                    json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.1.1",
                            "clusterIPs": ["10.96.1.1", "fd00:96::1:1"]}),
                ),
            ),
            json!([
                "10.96.1.1",
                ["10.96.1.1", "fd00:96::1:1"],
                ["IPv4", "IPv6"],
                "RequireDualStack"
            ]),
        ),
        (
            "a requested primary, the secondary allocated",
            Create(
                "h",
                with(json!({"ipFamilyPolicy": "PreferDualStack", "clusterIP": "10.96.1.2"})),
            ),
            json!([
                "10.96.1.2",
                ["10.96.1.2", "fd00:96::6"],
                ["IPv4", "IPv6"],
                "PreferDualStack"
            ]),
        ),
        (
            "an IPv6 clusterIP alone makes an IPv6 single-stack Service",
            Create("i", with(json!({"clusterIP": "fd00:96::1:2"}))),
            json!(["fd00:96::1:2", ["fd00:96::1:2"], ["IPv6"], "SingleStack"]),
        ),
        (
            "a requested IPv6 address that is taken",
            Create(
                "j",
                with(
                    json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.1.3",
                            "clusterIPs": ["10.96.1.3", "fd00:96::1:1"]}),
                ),
            ),
            invalid(
                "spec.clusterIPs",
                "Invalid value: []string{\"10.96.1.3\", \"fd00:96::1:1\"}: failed to allocate IP fd00:96::1:1: provided IP is already allocated",
            ),
        ),
        (
            "the IPv4 address of the refused Service was given back",
            Create("k", with(json!({"clusterIP": "10.96.1.3"}))),
            json!(["10.96.1.3", ["10.96.1.3"], ["IPv4"], "SingleStack"]),
        ),
    ];
    run(&mut dual(), cases);
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of policies on an IPv4-only cluster
fn each_policy_on_an_ipv4_only_cluster() {
    use ServiceOp::Create;
    let cases = vec![
        (
            "no policy",
            Create("a", with(json!({}))),
            json!(["10.96.0.2", ["10.96.0.2"], ["IPv4"], "SingleStack"]),
        ),
        (
            "PreferDualStack gets the one family there is",
            Create("b", with(json!({"ipFamilyPolicy": "PreferDualStack"}))),
            json!(["10.96.0.3", ["10.96.0.3"], ["IPv4"], "PreferDualStack"]),
        ),
        (
            "RequireDualStack cannot be had",
            Create("c", with(json!({"ipFamilyPolicy": "RequireDualStack"}))),
            invalid(
                "spec.ipFamilyPolicy",
                "Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services",
            ),
        ),
        (
            "SingleStack of IPv6",
            Create(
                "d",
                with(json!({"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv6"]})),
            ),
            invalid(
                "spec.ipFamilies[0]",
                "Invalid value: \"IPv6\": not configured on this cluster",
            ),
        ),
        (
            "PreferDualStack naming both families",
            Create(
                "e",
                with(json!({"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv4", "IPv6"]})),
            ),
            invalid(
                "spec.ipFamilies[1]",
                "Invalid value: \"IPv6\": not configured on this cluster",
            ),
        ),
        (
            "an IPv6 clusterIP",
            Create("f", with(json!({"clusterIP": "fd00:96::1"}))),
            invalid(
                "spec.clusterIPs[0]",
                "Invalid value: []string{\"fd00:96::1\"}: IPv6 is not configured on this cluster",
            ),
        ),
        (
            "none of the refused Services took an address",
            Create("g", with(json!({}))),
            json!(["10.96.0.4", ["10.96.0.4"], ["IPv4"], "SingleStack"]),
        ),
    ];
    run(&mut v4_only(), cases);
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of refused IP fields
fn ip_fields_kube_refuses() {
    use ServiceOp::Create;
    let cases = vec![
        (
            "a family twice",
            Create(
                "a",
                with(json!({"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv4", "IPv4"]})),
            ),
            json!([
                422,
                "Invalid",
                [["spec.ipFamilies[1]", "Duplicate value: \"IPv4\""]]
            ]),
        ),
        (
            "three families",
            Create(
                "b",
                with(json!({"ipFamilyPolicy": "PreferDualStack",
                            "ipFamilies": ["IPv4", "IPv6", "IPv4"]})),
            ),
            json!([
                422,
                "Invalid",
                [["spec.ipFamilies[2]", "Duplicate value: \"IPv4\""]]
            ]),
        ),
        (
            "a family kube does not know",
            Create("c", with(json!({"ipFamilies": ["IPv5"]}))),
            json!([
                422,
                "Invalid",
                [[
                    "spec.ipFamilies[0]",
                    "Unsupported value: \"IPv5\": supported values: \"IPv4\", \"IPv6\""
                ]]
            ]),
        ),
        (
            "a policy kube does not know",
            Create("d", with(json!({"ipFamilyPolicy": "DualStack"}))),
            json!([
                422,
                "Invalid",
                [[
                    "spec.ipFamilyPolicy",
                    "Unsupported value: \"DualStack\": supported values: \"PreferDualStack\", \"RequireDualStack\", \"SingleStack\""
                ]]
            ]),
        ),
        (
            "two families under SingleStack",
            Create(
                "e",
                with(json!({"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4", "IPv6"]})),
            ),
            invalid(
                "spec.ipFamilyPolicy",
                "Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
            ),
        ),
        (
            "clusterIPs that do not start with clusterIP",
            Create(
                "f",
                with(json!({"clusterIP": "10.96.1.1", "clusterIPs": ["10.96.1.2"]})),
            ),
            invalid(
                "spec.clusterIPs",
                "Invalid value: []string{\"10.96.1.2\"}: first value must match `clusterIP`",
            ),
        ),
        (
            "clusterIPs without clusterIP",
            Create("g", with(json!({"clusterIPs": ["10.96.1.2"]}))),
            invalid(
                "spec.clusterIPs",
                "Invalid value: []string{\"10.96.1.2\"}: must be empty when `clusterIP` is not specified",
            ),
        ),
        (
            "an address of another family than ipFamilies says",
            Create(
                "h",
                with(json!({"clusterIP": "10.96.1.3", "ipFamilies": ["IPv6"]})),
            ),
            invalid(
                "spec.clusterIPs[0]",
                "Invalid value: \"10.96.1.3\": expected an IPv6 value as indicated by `ipFamilies[0]`",
            ),
        ),
        (
            "two addresses of one family",
            Create(
                "i",
                with(
                    json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.1.4",
                            "clusterIPs": ["10.96.1.4", "10.96.1.5"]}),
                ),
            ),
            invalid(
                "spec.clusterIPs",
                "Invalid value: []string{\"10.96.1.4\", \"10.96.1.5\"}: may specify no more than one IP for each IP family",
            ),
        ),
        (
            "None among addresses",
            Create(
                "j",
                with(
                    json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "None",
                            "clusterIPs": ["None", "fd00:96::9"]}),
                ),
            ),
            invalid(
                "spec.clusterIPs",
                "Invalid value: []string{\"None\", \"fd00:96::9\"}: 'None' must be the first and only value",
            ),
        ),
    ];
    run(&mut dual(), cases);
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of headless Services
fn headless_services_get_families_but_no_address() {
    use ServiceOp::Create;
    let headless = |extra: Value| {
        let mut spec = json!({"clusterIP": "None"});
        if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
            s.extend(e);
        }
        spec
    };
    let selector = json!({"app": "web"});
    let dual_cases = vec![
        (
            "with a selector: SingleStack, the primary family",
            Create("a", headless(json!({"selector": selector}))),
            json!(["None", ["None"], ["IPv4"], "SingleStack"]),
        ),
        (
            "with a selector, PreferDualStack: both",
            Create(
                "b",
                headless(json!({"selector": selector, "ipFamilyPolicy": "PreferDualStack"})),
            ),
            json!(["None", ["None"], ["IPv4", "IPv6"], "PreferDualStack"]),
        ),
        (
            "without a selector: RequireDualStack, both",
            Create("c", headless(json!({}))),
            json!(["None", ["None"], ["IPv4", "IPv6"], "RequireDualStack"]),
        ),
        (
            "without a selector, SingleStack: one",
            Create("d", headless(json!({"ipFamilyPolicy": "SingleStack"}))),
            json!(["None", ["None"], ["IPv4"], "SingleStack"]),
        ),
        (
            "without a selector, PreferDualStack from IPv6",
            Create(
                "e",
                headless(json!({"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv6"]})),
            ),
            json!(["None", ["None"], ["IPv6", "IPv4"], "PreferDualStack"]),
        ),
        (
            "no address was taken",
            Create("f", with(json!({"ipFamilyPolicy": "PreferDualStack"}))),
            json!([
                "10.96.0.2",
                ["10.96.0.2", "fd00:96::1"],
                ["IPv4", "IPv6"],
                "PreferDualStack"
            ]),
        ),
    ];
    run(&mut dual(), dual_cases);
    let v4_cases = vec![
        (
            "with a selector, PreferDualStack: the one family",
            Create(
                "a",
                headless(json!({"selector": selector, "ipFamilyPolicy": "PreferDualStack"})),
            ),
            json!(["None", ["None"], ["IPv4"], "PreferDualStack"]),
        ),
        (
            "with a selector, RequireDualStack",
            Create(
                "b",
                headless(json!({"selector": selector, "ipFamilyPolicy": "RequireDualStack"})),
            ),
            invalid(
                "spec.ipFamilyPolicy",
                "Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services",
            ),
        ),
        (
            "without a selector kube gives both even here",
            Create("c", headless(json!({}))),
            json!(["None", ["None"], ["IPv4", "IPv6"], "RequireDualStack"]),
        ),
    ];
    run(&mut v4_only(), v4_cases);
}

#[test]
fn external_names_have_no_ip_fields() {
    use ServiceOp::{Create, Update};
    let ext = json!({"type": "ExternalName", "externalName": "example.com"});
    let mut s = dual();
    let cases = vec![
        (
            "an ExternalName",
            Create("a", ext.clone()),
            json!([null, null, null, null]),
        ),
        (
            "a dual-stack Service",
            Create("b", with(json!({"ipFamilyPolicy": "RequireDualStack"}))),
            json!([
                "10.96.0.2",
                ["10.96.0.2", "fd00:96::1"],
                ["IPv4", "IPv6"],
                "RequireDualStack"
            ]),
        ),
        (
            "becoming an ExternalName as a client that read it first",
            Update(
                "b",
                json!({"type": "ExternalName", "externalName": "example.com",
                       "clusterIP": "10.96.0.2", "clusterIPs": ["10.96.0.2", "fd00:96::1"],
                       "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack"}),
            ),
            json!([null, null, null, null]),
        ),
        (
            "both of its addresses are free again",
            Create(
                "c",
                with(
                    json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.0.2",
                            "clusterIPs": ["10.96.0.2", "fd00:96::1"]}),
                ),
            ),
            json!([
                "10.96.0.2",
                ["10.96.0.2", "fd00:96::1"],
                ["IPv4", "IPv6"],
                "RequireDualStack"
            ]),
        ),
        (
            "an ExternalName becoming a PreferDualStack Service",
            Update("a", with(json!({"ipFamilyPolicy": "PreferDualStack"}))),
            json!([
                "10.96.0.3",
                ["10.96.0.3", "fd00:96::2"],
                ["IPv4", "IPv6"],
                "PreferDualStack"
            ]),
        ),
    ];
    run(&mut s, cases);
    let a = s.get(SERVICES, "default", "a").expect("stored");
    assert_eq!(a.value()["spec"]["internalTrafficPolicy"], "Cluster");
    let ext_only = s
        .create(SERVICES, svc("default", "d", ext))
        .expect("created");
    assert_eq!(ext_only.value()["spec"].get("internalTrafficPolicy"), None);
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of update and delete steps
fn updates_keep_upgrade_and_downgrade_addresses_and_deletes_free_them() {
    use ServiceOp::{Create, Delete, Update};
    let both = json!([
        "10.96.0.2",
        ["10.96.0.2", "fd00:96::1"],
        ["IPv4", "IPv6"],
        "PreferDualStack"
    ]);
    let taken = |ip: &str| {
        invalid(
            "spec.clusterIPs",
            &format!(
                "Invalid value: []string{{\"10.96.1.1\", \"{ip}\"}}: failed to allocate IP {ip}: provided IP is already allocated"
            ),
        )
    };
    let cases = vec![
        (
            "the suite's Service",
            Create(
                "hello",
                json!({"selector": {"app": "hello"},
                       "ports": [{"name": "tcp", "port": 42, "protocol": "TCP"},
                                 {"name": "udp", "port": 42, "protocol": "UDP"}],
                       "sessionAffinity": "ClientIP",
                       "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}},
                       "ipFamilyPolicy": "PreferDualStack"}),
            ),
            both.clone(),
        ),
        (
            "an update that leaves out every IP field keeps them",
            Update("hello", with(json!({}))),
            both.clone(),
        ),
        (
            "an update naming the policy keeps them",
            Update("hello", with(json!({"ipFamilyPolicy": "PreferDualStack"}))),
            both.clone(),
        ),
        (
            "its IPv6 address is taken",
            Create(
                "x",
                with(
                    json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.1.1",
                            "clusterIPs": ["10.96.1.1", "fd00:96::1"]}),
                ),
            ),
            taken("fd00:96::1"),
        ),
        (
            "SingleStack with the addresses as read downgrades",
            Update(
                "hello",
                with(
                    json!({"ipFamilyPolicy": "SingleStack", "clusterIP": "10.96.0.2",
                            "clusterIPs": ["10.96.0.2", "fd00:96::1"],
                            "ipFamilies": ["IPv4", "IPv6"]}),
                ),
            ),
            json!(["10.96.0.2", ["10.96.0.2"], ["IPv4"], "SingleStack"]),
        ),
        (
            "the released IPv6 address can be had",
            Create(
                "y",
                with(
                    json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.1.1",
                            "clusterIPs": ["10.96.1.1", "fd00:96::1"]}),
                ),
            ),
            json!([
                "10.96.1.1",
                ["10.96.1.1", "fd00:96::1"],
                ["IPv4", "IPv6"],
                "RequireDualStack"
            ]),
        ),
        (
            "RequireDualStack upgrades, with the next IPv6 address",
            Update("hello", with(json!({"ipFamilyPolicy": "RequireDualStack"}))),
            json!([
                "10.96.0.2",
                ["10.96.0.2", "fd00:96::2"],
                ["IPv4", "IPv6"],
                "RequireDualStack"
            ]),
        ),
        (
            "delete frees both",
            Delete("hello"),
            json!([
                "10.96.0.2",
                ["10.96.0.2", "fd00:96::2"],
                ["IPv4", "IPv6"],
                "RequireDualStack"
            ]),
        ),
        (
            "both addresses can be had again",
            Create(
                "z",
                with(
                    json!({"ipFamilyPolicy": "RequireDualStack", "clusterIP": "10.96.0.2",
                            "clusterIPs": ["10.96.0.2", "fd00:96::2"]}),
                ),
            ),
            json!([
                "10.96.0.2",
                ["10.96.0.2", "fd00:96::2"],
                ["IPv4", "IPv6"],
                "RequireDualStack"
            ]),
        ),
    ];
    let mut s = dual();
    run(&mut s, cases);
}

#[test]
fn a_full_ipv6_range_refuses_and_gives_the_ipv4_address_back() {
    use ServiceOp::Create;
    // A /126: fd00:96::1 to ::3.
    let mut s = Store::new(&StoreConfig {
        service_cidrs_v6: vec![("fd00:96::".parse().expect("v6"), 126)],
        ..StoreConfig::default()
    });
    let require = || with(json!({"ipFamilyPolicy": "RequireDualStack"}));
    let cases = vec![
        (
            "1",
            Create("a", require()),
            json!([
                "10.96.0.2",
                ["10.96.0.2", "fd00:96::1"],
                ["IPv4", "IPv6"],
                "RequireDualStack"
            ]),
        ),
        (
            "2",
            Create("b", require()),
            json!([
                "10.96.0.3",
                ["10.96.0.3", "fd00:96::2"],
                ["IPv4", "IPv6"],
                "RequireDualStack"
            ]),
        ),
        (
            "3",
            Create("c", require()),
            json!([
                "10.96.0.4",
                ["10.96.0.4", "fd00:96::3"],
                ["IPv4", "IPv6"],
                "RequireDualStack"
            ]),
        ),
        (
            "full",
            Create("d", require()),
            json!([500, "InternalError", []]),
        ),
        (
            "the IPv4 address d took went back",
            Create("e", with(json!({"clusterIP": "10.96.0.5"}))),
            json!(["10.96.0.5", ["10.96.0.5"], ["IPv4"], "SingleStack"]),
        ),
    ];
    run(&mut s, cases);
}
