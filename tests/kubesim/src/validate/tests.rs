use serde_json::json;

use super::*;
use crate::resources::{ENDPOINTSLICES, LINKS, NAMESPACES, SERVICES, find};

type Failure = (u16, &'static str, String);

/// Ok, or the 422's message and causes.
type Checked = Result<(), (String, Vec<Cause>)>;

fn res(group: &str, plural: &str) -> usize {
    let version = if group == "multicluster.linkerd.io" {
        "v1alpha3"
    } else {
        "v1"
    };
    find(group, version, plural).expect("served")
}

fn fail(code: u16, reason: &'static str, message: &str) -> Failure {
    (code, reason, message.to_owned())
}

/// The 422 the causes give: their reasons, fields and messages, and the Status message. `kind`
/// is qualified by its group as kube prints it (`EndpointSlice.discovery.k8s.io`).
fn invalid(kind: &str, name: &str, causes: &[(&str, &str, &str)]) -> Checked {
    let list: Vec<String> = causes.iter().map(|(_, f, m)| format!("{f}: {m}")).collect();
    let joined = if list.len() == 1 {
        list[0].clone()
    } else {
        format!("[{}]", list.join(", "))
    };
    Err((
        format!("{kind} \"{name}\" is invalid: {joined}"),
        causes.iter().map(|(k, f, m)| cause(k, *f, *m)).collect(),
    ))
}

fn validated(res: usize, object: &Value, old: Option<&Value>) -> Checked {
    validate(res, object, old).map_err(|e| {
        assert_eq!((e.code, e.reason), (422, "Invalid"), "{}", e.message);
        (e.message, e.causes)
    })
}

/// A dual-stack cluster, kubesim's default.
const DUAL: service::ServiceFamilies = service::ServiceFamilies { dual_stack: true };

/// A Service as the API checks it: defaulted, its IP fields settled against `families` and
/// the stored `old`, then validated. Answers the settled spec too.
fn service_checked(
    object: &Value,
    old: Option<&Value>,
    families: service::ServiceFamilies,
) -> (Value, Checked) {
    let mut v = object.clone();
    default(SERVICES, &mut v);
    let checked = service::prepare(&mut v, old, families)
        .and_then(|()| validate(SERVICES, &v, old))
        .map_err(|e| {
            assert_eq!((e.code, e.reason), (422, "Invalid"), "{}", e.message);
            (e.message, e.causes)
        });
    (v["spec"].clone(), checked)
}

fn link(version: &str) -> Value {
    json!({
        "apiVersion": format!("multicluster.linkerd.io/{version}"), "kind": "Link",
        "metadata": {"name": "east", "namespace": "linkerd-multicluster"},
        "spec": {
            "targetClusterName": "east",
            "clusterCredentialsSecret": "cluster-credentials-east",
            "gatewayAddress": "203.0.113.10", "gatewayPort": "4143",
            "probeSpec": {"path": "/ready", "port": "4191", "period": "3s"},
            "selector": {"matchLabels": {"mirror.linkerd.io/exported": "true"}},
            "federatedServiceSelector": {"matchLabels": {"mirror.linkerd.io/federated": "member"}},
            "excludedAnnotations": ["a/*"],
            "excludedLabels": ["b/*"]
        },
        "status": {"mirrorServices": [{"name": "web-east"}]}
    })
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of refused bodies
fn decode_refuses_bodies_it_cannot_read() {
    let cases: Vec<(&str, usize, &str, Value, Failure)> = vec![
        (
            "not an object",
            SERVICES,
            "v1",
            json!([{"kind": "Service"}]),
            fail(
                400,
                "BadRequest",
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml",
            ),
        ),
        (
            "another apiVersion",
            SERVICES,
            "v1",
            json!({"apiVersion": "apps/v1", "kind": "Service", "metadata": {"name": "web"}}),
            fail(
                400,
                "BadRequest",
                "the API version in the data (apps/v1) does not match the expected API version (v1)",
            ),
        ),
        (
            "a Link in another version than the URL's",
            LINKS,
            "v1alpha2",
            link("v1alpha3"),
            fail(
                400,
                "BadRequest",
                "the API version in the data (multicluster.linkerd.io/v1alpha3) does not match the expected API version (multicluster.linkerd.io/v1alpha2)",
            ),
        ),
        (
            "another kind",
            SERVICES,
            "v1",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}}),
            fail(
                400,
                "BadRequest",
                "the kind in the data (Pod) does not match the expected kind (Service)",
            ),
        ),
        (
            "a port as a string",
            SERVICES,
            "v1",
            json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}, {"port": "443"}]}}),
            fail(
                400,
                "BadRequest",
                "Service in version \"v1\" cannot be handled as a Service: spec.ports[1].port: invalid type: string \"443\", expected i32",
            ),
        ),
        (
            "a label that is not a string",
            res("", "configmaps"),
            "v1",
            json!({"metadata": {"name": "c", "labels": {"n": 1}}}),
            fail(
                400,
                "BadRequest",
                "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: metadata.labels.n: invalid type: integer `1`, expected a string",
            ),
        ),
        (
            "Secret data that is not base64",
            res("", "secrets"),
            "v1",
            json!({"metadata": {"name": "s"}, "data": {"k": "not base64!"}}),
            fail(
                400,
                "BadRequest",
                "Secret in version \"v1\" cannot be handled as a Secret: data.k: Invalid symbol 32, offset 3.",
            ),
        ),
        (
            "endpoints that are not a list",
            ENDPOINTSLICES,
            "v1",
            json!({"metadata": {"name": "s"}, "addressType": "IPv4", "endpoints": {"addresses": []}}),
            fail(
                400,
                "BadRequest",
                "EndpointSlice in version \"v1\" cannot be handled as a EndpointSlice: endpoints: invalid type: map, expected a sequence",
            ),
        ),
        (
            "a Link port as a number: every Link scalar is a string",
            LINKS,
            "v1alpha3",
            json!({"metadata": {"name": "east"}, "spec": {"gatewayPort": 4143}}),
            fail(
                400,
                "BadRequest",
                "Link in version \"v1alpha3\" cannot be handled as a Link: spec.gatewayPort: invalid type: integer `4143`, expected a string",
            ),
        ),
    ];
    for (case, res, version, body, want) in cases {
        let got = decode(res, version, body).map_err(|e| (e.code, e.reason, e.message));
        assert_eq!(got.err(), Some(want), "{case}");
    }
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of (body, unknown fields) cases
fn decode_reports_fields_the_schema_does_not_have() {
    let cases: Vec<(&str, usize, &str, Value, Vec<&str>)> = vec![
        (
            "a clean Service",
            SERVICES,
            "v1",
            json!({"metadata": {"name": "web", "labels": {"a": "b"}},
                   "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}],
                            "selector": {"app": "web"}}}),
            vec![],
        ),
        (
            "unknown fields at every depth",
            SERVICES,
            "v1",
            json!({"extra": 1, "metadata": {"name": "web", "labelz": {"a": "b"}},
                   "spec": {"foo": "bar", "ports": [{"port": 80}, {"port": 81, "bogus": true}]}}),
            vec![
                "extra",
                "metadata.labelz",
                "spec.foo",
                "spec.ports[1].bogus",
            ],
        ),
        (
            "an unknown field set to null is not reported",
            SERVICES,
            "v1",
            json!({"metadata": {"name": "web"}, "spec": {"foo": null, "ports": [{"port": 80}]}}),
            vec![],
        ),
        (
            "spec on a ConfigMap",
            res("", "configmaps"),
            "v1",
            json!({"metadata": {"name": "c"}, "data": {"a": "b"}, "spec": {}}),
            vec!["spec"],
        ),
        (
            "an EndpointSlice field misspelt",
            ENDPOINTSLICES,
            "v1",
            json!({"metadata": {"name": "s"}, "addressType": "IPv4",
                   "endpoints": [{"addresses": ["10.0.0.1"], "condition": {"ready": true}}]}),
            vec!["endpoints[0].condition"],
        ),
        (
            "a v1alpha3 Link has every field",
            LINKS,
            "v1alpha3",
            link("v1alpha3"),
            vec![],
        ),
        (
            "v1alpha2 prunes the exclusions",
            LINKS,
            "v1alpha2",
            link("v1alpha2"),
            vec!["spec.excludedAnnotations", "spec.excludedLabels"],
        ),
        (
            "v1alpha1 also prunes the federated selector and status",
            LINKS,
            "v1alpha1",
            link("v1alpha1"),
            vec![
                "spec.excludedAnnotations",
                "spec.excludedLabels",
                "spec.federatedServiceSelector",
                "status",
            ],
        ),
        (
            "unknown Link spec fields",
            LINKS,
            "v1alpha3",
            json!({"metadata": {"name": "east"}, "spec": {"targetClusterName": "east", "gatewayPorts": "1"}}),
            vec!["spec.gatewayPorts"],
        ),
    ];
    for (case, res, version, body, want) in cases {
        let decoded = decode(res, version, body).unwrap_or_else(|e| panic!("{case}: {e:?}"));
        assert_eq!(decoded.unknown, want, "{case}");
        // What is reported is what was dropped.
        for path in &decoded.unknown {
            let pointer = format!("/{}", path.replace(['.', '['], "/").replace(']', ""));
            assert_eq!(
                decoded.object.pointer(&pointer),
                None,
                "{case}: {path} kept"
            );
        }
        assert_eq!(
            decoded.object["apiVersion"],
            RESOURCES[res].api_version(version),
            "{case}"
        );
        assert_eq!(decoded.object["kind"], RESOURCES[res].kind, "{case}");
    }
}

#[test]
fn links_are_pruned_to_their_version() {
    let stored = decode(LINKS, "v1alpha3", link("v1alpha3")).unwrap().object;
    let spec_keys =
        |v: &Value| -> Vec<String> { v["spec"].as_object().unwrap().keys().cloned().collect() };
    assert_eq!(
        spec_keys(&stored),
        [
            "clusterCredentialsSecret",
            "excludedAnnotations",
            "excludedLabels",
            "federatedServiceSelector",
            "gatewayAddress",
            "gatewayPort",
            "probeSpec",
            "selector",
            "targetClusterName"
        ]
    );
    // (version read in, spec keys gone, status kept)
    let cases = [
        ("v1alpha3", vec![], true),
        (
            "v1alpha2",
            vec!["excludedAnnotations", "excludedLabels"],
            true,
        ),
        (
            "v1alpha1",
            vec![
                "excludedAnnotations",
                "excludedLabels",
                "federatedServiceSelector",
            ],
            false,
        ),
    ];
    for (version, gone, status) in cases {
        let mut read = stored.clone();
        prune_for_version(LINKS, version, &mut read);
        let want: Vec<String> = spec_keys(&stored)
            .into_iter()
            .filter(|k| !gone.contains(&k.as_str()))
            .collect();
        assert_eq!(spec_keys(&read), want, "{version}");
        assert_eq!(read.get("status").is_some(), status, "{version}: status");
        assert_eq!(
            read["spec"]["probeSpec"], stored["spec"]["probeSpec"],
            "{version}"
        );
    }
    // Built-in kinds are never pruned.
    let mut svc = json!({"spec": {"excludedLabels": ["x"]}, "status": {}});
    prune_for_version(SERVICES, "v1alpha1", &mut svc);
    assert_eq!(
        svc,
        json!({"spec": {"excludedLabels": ["x"]}, "status": {}})
    );
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of (object, defaulted) cases
fn defaults() {
    let cases: Vec<(&str, usize, Value, Value)> = vec![
        (
            "a Namespace",
            NAMESPACES,
            json!({"metadata": {"name": "shop"}}),
            json!({"metadata": {"name": "shop", "labels": {"kubernetes.io/metadata.name": "shop"}},
                   "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
        ),
        (
            "a Namespace keeps its labels and phase, the name label is forced",
            NAMESPACES,
            json!({"metadata": {"name": "shop", "labels": {"a": "b", "kubernetes.io/metadata.name": "x"}},
                   "spec": {"finalizers": []}, "status": {"phase": "Terminating"}}),
            json!({"metadata": {"name": "shop", "labels": {"a": "b", "kubernetes.io/metadata.name": "shop"}},
                   "spec": {"finalizers": []}, "status": {"phase": "Terminating"}}),
        ),
        (
            "a ClusterIP Service",
            SERVICES,
            json!({"spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}}),
            json!({"spec": {"type": "ClusterIP", "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80},
                                      {"port": 53, "protocol": "UDP", "targetPort": "dns"}]},
                  "status": {"loadBalancer": {}}}),
        ),
        (
            "a targetPort of 0 or \"\" is the port",
            SERVICES,
            json!({"spec": {"ports": [{"port": 80, "targetPort": 0}, {"port": 81, "targetPort": ""}]}}),
            json!({"spec": {"type": "ClusterIP", "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80},
                                      {"port": 81, "protocol": "TCP", "targetPort": 81}]},
                  "status": {"loadBalancer": {}}}),
        ),
        (
            "a NodePort Service",
            SERVICES,
            json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}}),
            json!({"spec": {"type": "NodePort", "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                            "externalTrafficPolicy": "Cluster",
                            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]},
                  "status": {"loadBalancer": {}}}),
        ),
        (
            "a LoadBalancer Service",
            SERVICES,
            json!({"spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"port": 80}]}}),
            json!({"spec": {"type": "LoadBalancer", "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                            "externalTrafficPolicy": "Local", "allocateLoadBalancerNodePorts": true,
                            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]},
                  "status": {"loadBalancer": {}}}),
        ),
        (
            "an ExternalName Service gets sessionAffinity and port defaults only",
            SERVICES,
            json!({"spec": {"type": "ExternalName", "externalName": "example.com", "ports": [{"port": 80}]}}),
            json!({"spec": {"type": "ExternalName", "externalName": "example.com", "sessionAffinity": "None",
                            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]},
                  "status": {"loadBalancer": {}}}),
        ),
        (
            "ClientIP without a config gets kube's three-hour timeout",
            SERVICES,
            json!({"spec": {"sessionAffinity": "ClientIP", "ports": [{"port": 80}]}}),
            json!({"spec": {"type": "ClusterIP", "sessionAffinity": "ClientIP", "internalTrafficPolicy": "Cluster",
                            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
                            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]},
                  "status": {"loadBalancer": {}}}),
        ),
        (
            "a ClientIP config without a timeout is replaced whole",
            SERVICES,
            json!({"spec": {"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {}},
                            "ports": [{"port": 80}]}}),
            json!({"spec": {"type": "ClusterIP", "sessionAffinity": "ClientIP", "internalTrafficPolicy": "Cluster",
                            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
                            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]},
                  "status": {"loadBalancer": {}}}),
        ),
        (
            "a ClientIP timeout, a traffic policy and trafficDistribution are kept",
            SERVICES,
            json!({"spec": {"sessionAffinity": "ClientIP",
                            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}},
                            "internalTrafficPolicy": "Local", "trafficDistribution": "PreferClose",
                            "ports": [{"port": 80}]}}),
            json!({"spec": {"type": "ClusterIP", "sessionAffinity": "ClientIP", "internalTrafficPolicy": "Local",
                            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}},
                            "trafficDistribution": "PreferClose",
                            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]},
                  "status": {"loadBalancer": {}}}),
        ),
        (
            "an empty sessionAffinity is None, which drops sessionAffinityConfig",
            SERVICES,
            json!({"spec": {"type": "", "sessionAffinity": "",
                            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}},
                            "ports": [{"port": 80}]}}),
            json!({"spec": {"type": "ClusterIP", "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]},
                  "status": {"loadBalancer": {}}}),
        ),
        (
            "an ExternalName with ClientIP affinity gets the timeout but no traffic policy",
            SERVICES,
            json!({"spec": {"type": "ExternalName", "externalName": "example.com", "sessionAffinity": "ClientIP"}}),
            json!({"spec": {"type": "ExternalName", "externalName": "example.com", "sessionAffinity": "ClientIP",
                            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}}},
                  "status": {"loadBalancer": {}}}),
        ),
        (
            "Secret stringData goes into data, base64",
            res("", "secrets"),
            json!({"data": {"a": "b2xk", "keep": "eA=="}, "stringData": {"a": "new", "b": "two words"}}),
            json!({"data": {"a": "bmV3", "keep": "eA==", "b": "dHdvIHdvcmRz"}, "type": "Opaque"}),
        ),
        (
            "a Secret keeps its type",
            res("", "secrets"),
            json!({"type": "kubernetes.io/tls"}),
            json!({"type": "kubernetes.io/tls"}),
        ),
        (
            "EndpointSlice ports get a name and protocol",
            ENDPOINTSLICES,
            json!({"addressType": "IPv4", "ports": [{"port": 80}, {"name": "dns", "protocol": "UDP", "port": 53}]}),
            json!({"addressType": "IPv4", "ports": [{"name": "", "protocol": "TCP", "port": 80},
                                                    {"name": "dns", "protocol": "UDP", "port": 53}]}),
        ),
        (
            "a Link probeSpec gets timeout and failureThreshold",
            LINKS,
            json!({"spec": {"probeSpec": {"path": "/ready", "timeout": "5s"}}}),
            json!({"spec": {"probeSpec": {"path": "/ready", "timeout": "5s", "failureThreshold": "3"}}}),
        ),
        (
            "a Link without probeSpec gets none",
            LINKS,
            json!({"spec": {"targetClusterName": "east"}}),
            json!({"spec": {"targetClusterName": "east"}}),
        ),
        (
            "a ConfigMap has no defaults",
            res("", "configmaps"),
            json!({"metadata": {"name": "c"}}),
            json!({"metadata": {"name": "c"}}),
        ),
    ];
    for (case, res, mut object, want) in cases {
        default(res, &mut object);
        assert_eq!(object, want, "{case}");
    }
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of Service validation cases
fn service_validation() {
    let dns1035 = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
    let label = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    let bad_name = format!("Invalid value: \"1web\": {dns1035}");
    let bad_port_name = format!("Invalid value: \"HTTP\": {label}");
    // (case, name, spec before defaulting, expected)
    let cases: Vec<(&str, &str, Value, Checked)> = vec![
        (
            "one unnamed port",
            "web",
            json!({"ports": [{"port": 80}]}),
            Ok(()),
        ),
        (
            "two ports need names",
            "web",
            json!({"ports": [{"port": 80}, {"port": 443}]}),
            invalid(
                "Service",
                "web",
                &[
                    ("FieldValueRequired", "spec.ports[0].name", "Required value"),
                    ("FieldValueRequired", "spec.ports[1].name", "Required value"),
                ],
            ),
        ),
        (
            "duplicate port names",
            "web",
            json!({"ports": [{"name": "http", "port": 80}, {"name": "http", "port": 8080}]}),
            invalid(
                "Service",
                "web",
                &[(
                    "FieldValueDuplicate",
                    "spec.ports[1].name",
                    "Duplicate value: \"http\"",
                )],
            ),
        ),
        (
            "duplicate port and protocol",
            "web",
            json!({"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80, "targetPort": 81}]}),
            invalid(
                "Service",
                "web",
                &[(
                    "FieldValueDuplicate",
                    "spec.ports[1]",
                    "Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\", AppProtocol:(*string)(nil), Port:80, TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}, NodePort:0}",
                )],
            ),
        ),
        (
            "the same port over TCP and UDP",
            "dns",
            json!({"ports": [{"name": "tcp", "port": 53}, {"name": "udp", "port": 53, "protocol": "UDP"}]}),
            Ok(()),
        ),
        (
            "a protocol kube does not know",
            "web",
            json!({"ports": [{"port": 80, "protocol": "HTTP"}]}),
            invalid(
                "Service",
                "web",
                &[(
                    "FieldValueNotSupported",
                    "spec.ports[0].protocol",
                    "Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                )],
            ),
        ),
        (
            "a port out of range",
            "web",
            json!({"ports": [{"port": 70000, "targetPort": 80}]}),
            invalid(
                "Service",
                "web",
                &[(
                    "FieldValueInvalid",
                    "spec.ports[0].port",
                    "Invalid value: 70000: must be between 1 and 65535, inclusive",
                )],
            ),
        ),
        (
            "a target port out of range",
            "web",
            json!({"ports": [{"port": 80, "targetPort": 65536}]}),
            invalid(
                "Service",
                "web",
                &[(
                    "FieldValueInvalid",
                    "spec.ports[0].targetPort",
                    "Invalid value: 65536: must be between 1 and 65535, inclusive",
                )],
            ),
        ),
        (
            "a named target port",
            "web",
            json!({"ports": [{"port": 80, "targetPort": "http-alt"}]}),
            Ok(()),
        ),
        (
            "a target port name that is not an IANA name",
            "web",
            json!({"ports": [{"port": 80, "targetPort": "bad_name"}]}),
            invalid(
                "Service",
                "web",
                &[(
                    "FieldValueInvalid",
                    "spec.ports[0].targetPort",
                    "Invalid value: \"bad_name\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                )],
            ),
        ),
        (
            "no ports",
            "web",
            json!({"selector": {"app": "web"}}),
            invalid(
                "Service",
                "web",
                &[("FieldValueRequired", "spec.ports", "Required value")],
            ),
        ),
        (
            "headless without ports",
            "web",
            json!({"clusterIP": "None"}),
            Ok(()),
        ),
        (
            "an ExternalName needs externalName",
            "web",
            json!({"type": "ExternalName"}),
            invalid(
                "Service",
                "web",
                &[("FieldValueRequired", "spec.externalName", "Required value")],
            ),
        ),
        (
            "an ExternalName without ports",
            "web",
            json!({"type": "ExternalName", "externalName": "db.example.com"}),
            Ok(()),
        ),
        (
            "a type kube does not know",
            "web",
            json!({"type": "Internal", "ports": [{"port": 80}]}),
            invalid(
                "Service",
                "web",
                &[(
                    "FieldValueNotSupported",
                    "spec.type",
                    "Unsupported value: \"Internal\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
                )],
            ),
        ),
        (
            "a clusterIP that is not an address",
            "web",
            json!({"clusterIP": "10.96.0.300", "ports": [{"port": 80}]}),
            invalid(
                "Service",
                "web",
                &[(
                    "FieldValueInvalid",
                    "spec.clusterIPs[0]",
                    "Invalid value: \"10.96.0.300\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                )],
            ),
        ),
        (
            "a Service name must be a DNS-1035 label, and every problem is listed",
            "1web",
            json!({"ports": [{"name": "HTTP", "port": 80, "protocol": "ICMP"}]}),
            invalid(
                "Service",
                "1web",
                &[
                    ("FieldValueInvalid", "metadata.name", bad_name.as_str()),
                    (
                        "FieldValueInvalid",
                        "spec.ports[0].name",
                        bad_port_name.as_str(),
                    ),
                    (
                        "FieldValueNotSupported",
                        "spec.ports[0].protocol",
                        "Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                    ),
                ],
            ),
        ),
    ];
    for (case, name, spec, want) in cases {
        let object = json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec});
        assert_eq!(service_checked(&object, None, DUAL).1, want, "{case}");
    }
}

#[test]
fn service_updates_keep_the_cluster_ip() {
    // As stored: defaulted, with its address and family.
    let old = json!({"metadata": {"name": "web"},
                     "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                              "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                              "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                              "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]}});
    let with = |spec: Value| json!({"metadata": {"name": "web"}, "spec": spec});
    let cases: Vec<(&str, Value, Checked)> = vec![
        (
            "the same address",
            with(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]})),
            Ok(()),
        ),
        (
            "another address",
            with(json!({"clusterIP": "10.96.0.11", "ports": [{"port": 80}]})),
            invalid(
                "Service",
                "web",
                &[(
                    "FieldValueInvalid",
                    "spec.clusterIPs[0]",
                    "Invalid value: []string{\"10.96.0.11\"}: may not change once set",
                )],
            ),
        ),
        (
            "becoming headless",
            with(json!({"clusterIP": "None", "ports": [{"port": 80}]})),
            invalid(
                "Service",
                "web",
                &[(
                    "FieldValueInvalid",
                    "spec.clusterIPs[0]",
                    "Invalid value: []string{\"None\"}: may not change once set",
                )],
            ),
        ),
        (
            "becoming an ExternalName drops it",
            with(json!({"type": "ExternalName", "externalName": "db.example.com"})),
            Ok(()),
        ),
    ];
    for (case, object, want) in cases {
        assert_eq!(service_checked(&object, Some(&old), DUAL).1, want, "{case}");
    }
}

/// The spec of the Service the mcs-api conformance suite creates, with `extra` fields.
fn suite_service(extra: Value) -> Value {
    let mut spec = json!({"selector": {"app": "hello"},
                          "ports": [{"name": "tcp", "port": 42, "protocol": "TCP"},
                                    {"name": "udp", "port": 42, "protocol": "UDP"}],
                          "sessionAffinity": "ClientIP",
                          "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}},
                          "ipFamilyPolicy": "PreferDualStack"});
    if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
        s.extend(e);
    }
    spec
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of Service field cases
fn service_affinity_traffic_and_external_name_validation() {
    let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    let bad_external_name = format!("Invalid value: \"Example_Com\": {subdomain}");
    let one = |kind: &str, field: &str, message: &str| {
        invalid("Service", "hello", &[(kind, field, message)])
    };
    let external = |extra: Value| {
        let mut spec = json!({"type": "ExternalName", "externalName": "example.com"});
        if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
            s.extend(e);
        }
        spec
    };
    let cases: Vec<(&str, Value, Checked)> = vec![
        ("the suite's Service", suite_service(json!({})), Ok(())),
        (
            "the suite's Service with internalTrafficPolicy",
            suite_service(json!({"internalTrafficPolicy": "Cluster"})),
            Ok(()),
        ),
        (
            "the suite's Service with trafficDistribution",
            suite_service(json!({"trafficDistribution": "PreferClose"})),
            Ok(()),
        ),
        (
            "the suite's headless Service",
            suite_service(json!({"clusterIP": "None"})),
            Ok(()),
        ),
        (
            "the suite's ExternalName Service",
            suite_service(
                json!({"type": "ExternalName", "externalName": "example.com",
                                 "ipFamilyPolicy": null}),
            ),
            Ok(()),
        ),
        (
            "a sessionAffinity kube does not know",
            suite_service(json!({"sessionAffinity": "Sticky"})),
            one(
                "FieldValueNotSupported",
                "spec.sessionAffinity",
                "Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\"",
            ),
        ),
        (
            "a ClientIP timeout of 0",
            suite_service(json!({"sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 0}}})),
            one(
                "FieldValueInvalid",
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                "Invalid value: 0: must be greater than 0 and less than 86400",
            ),
        ),
        (
            "a ClientIP timeout over a day",
            suite_service(
                json!({"sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 86401}}}),
            ),
            one(
                "FieldValueInvalid",
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                "Invalid value: 86401: must be greater than 0 and less than 86400",
            ),
        ),
        (
            "a ClientIP timeout of a day",
            suite_service(
                json!({"sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 86400}}}),
            ),
            Ok(()),
        ),
        (
            "an internalTrafficPolicy kube does not know",
            suite_service(json!({"internalTrafficPolicy": "Node"})),
            one(
                "FieldValueNotSupported",
                "spec.internalTrafficPolicy",
                "Unsupported value: \"Node\": supported values: \"Cluster\", \"Local\"",
            ),
        ),
        (
            "PreferSameZone needs a feature gate that is off in 1.33",
            suite_service(json!({"trafficDistribution": "PreferSameZone"})),
            one(
                "FieldValueNotSupported",
                "spec.trafficDistribution",
                "Unsupported value: \"PreferSameZone\": supported values: \"PreferClose\"",
            ),
        ),
        (
            "an externalName that is not a DNS-1123 subdomain",
            external(json!({"externalName": "Example_Com"})),
            one("FieldValueInvalid", "spec.externalName", &bad_external_name),
        ),
        (
            "an externalName with a trailing dot",
            external(json!({"externalName": "example.com."})),
            Ok(()),
        ),
        (
            "an ExternalName with ipFamilyPolicy",
            external(json!({"ipFamilyPolicy": "SingleStack"})),
            one(
                "FieldValueForbidden",
                "spec.ipFamilyPolicy",
                "Forbidden: may not be set for ExternalName services",
            ),
        ),
        (
            "an ExternalName with ipFamilies",
            external(json!({"ipFamilies": ["IPv4"]})),
            one(
                "FieldValueForbidden",
                "spec.ipFamilies",
                "Forbidden: may not be set for ExternalName services",
            ),
        ),
        (
            "an ExternalName with a clusterIP",
            external(json!({"clusterIP": "10.96.0.10"})),
            one(
                "FieldValueForbidden",
                "spec.clusterIPs",
                "Forbidden: may not be set for ExternalName services",
            ),
        ),
        (
            "a headless NodePort",
            json!({"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80}]}),
            one(
                "FieldValueInvalid",
                "spec.clusterIPs[0]",
                "Invalid value: \"None\": may not be set to 'None' for NodePort services",
            ),
        ),
    ];
    for (case, spec, want) in cases {
        let object = json!({"metadata": {"name": "hello", "namespace": "default"}, "spec": spec});
        assert_eq!(service_checked(&object, None, DUAL).1, want, "{case}");
    }
}

#[test]
fn service_ip_family_updates() {
    // As stored: PreferDualStack with both families.
    let old = json!({"metadata": {"name": "hello"},
                     "spec": {"type": "ClusterIP", "selector": {"app": "hello"},
                              "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00:96::10"],
                              "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack",
                              "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                              "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]}});
    let with = |spec: Value| json!({"metadata": {"name": "hello"}, "spec": spec});
    let one = |field: &str, message: &str| {
        invalid("Service", "hello", &[("FieldValueInvalid", field, message)])
    };
    // (case, new object, the IP fields settled when it passes, the outcome)
    let cases: Vec<(&str, Value, Option<Value>, Checked)> = vec![
        (
            "a manifest without IP fields keeps them all",
            with(json!({"selector": {"app": "hello"}, "ports": [{"port": 80}]})),
            Some(json!([
                "10.96.0.10",
                ["10.96.0.10", "fd00:96::10"],
                ["IPv4", "IPv6"],
                "PreferDualStack"
            ])),
            Ok(()),
        ),
        (
            "SingleStack with the fields as read drops the secondary",
            with(
                json!({"ports": [{"port": 80}], "ipFamilyPolicy": "SingleStack",
                        "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00:96::10"],
                        "ipFamilies": ["IPv4", "IPv6"]}),
            ),
            Some(json!([
                "10.96.0.10",
                ["10.96.0.10"],
                ["IPv4"],
                "SingleStack"
            ])),
            Ok(()),
        ),
        (
            "dropping the secondary address needs SingleStack",
            with(
                json!({"ports": [{"port": 80}], "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"]}),
            ),
            None,
            one(
                "spec.ipFamilyPolicy",
                "Invalid value: \"PreferDualStack\": must be 'SingleStack' to release the secondary cluster IP",
            ),
        ),
        (
            "the secondary address may not change",
            with(json!({"ports": [{"port": 80}], "clusterIP": "10.96.0.10",
                        "clusterIPs": ["10.96.0.10", "fd00:96::11"]})),
            None,
            one(
                "spec.clusterIPs[1]",
                "Invalid value: []string{\"10.96.0.10\", \"fd00:96::11\"}: may not change once set",
            ),
        ),
    ];
    for (case, object, settled, want) in cases {
        let (spec, checked) = service_checked(&object, Some(&old), DUAL);
        assert_eq!(checked, want, "{case}");
        if let Some(settled) = settled {
            let got = json!([
                spec["clusterIP"],
                spec["clusterIPs"],
                spec["ipFamilies"],
                spec["ipFamilyPolicy"]
            ]);
            assert_eq!(got, settled, "{case}");
        }
    }
}

#[test]
#[allow(clippy::too_many_lines)] // the body is the table of EndpointSlice validation cases
fn endpoint_slice_validation() {
    let slice = |ty: Option<&str>, endpoints: Value, ports: Value| {
        let mut v = json!({"metadata": {"name": "web-x"}, "endpoints": endpoints, "ports": ports});
        if let Some(ty) = ty {
            v["addressType"] = json!(ty);
        }
        v
    };
    let one = |a: &str| json!([{"addresses": [a]}]);
    let many_addresses: Vec<String> = (0..101)
        .map(|i| format!("10.0.{}.{}", i / 200, i % 200 + 1))
        .collect();
    let many_endpoints: Vec<Value> = (0..1001)
        .map(|i| json!({"addresses": [format!("10.1.{}.{}", i / 200, i % 200 + 1)]}))
        .collect();
    let p80 = json!([{"name": "http", "port": 80, "protocol": "TCP"}]);
    let cases: Vec<(&str, Value, Checked)> = vec![
        (
            "IPv4 addresses",
            slice(Some("IPv4"), one("10.0.0.1"), p80.clone()),
            Ok(()),
        ),
        (
            "IPv6 addresses",
            slice(Some("IPv6"), one("fd00::1"), p80.clone()),
            Ok(()),
        ),
        (
            "FQDN addresses",
            slice(Some("FQDN"), one("db.example.com"), p80.clone()),
            Ok(()),
        ),
        (
            "an IPv6 address in an IPv4 slice",
            slice(
                Some("IPv4"),
                json!([{"addresses": ["10.0.0.1", "fd00::1"]}]),
                p80.clone(),
            ),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[(
                    "FieldValueInvalid",
                    "endpoints[0].addresses[1]",
                    "Invalid value: \"fd00::1\": must be a valid IPv4 address",
                )],
            ),
        ),
        (
            "an IPv4 address in an IPv6 slice",
            slice(
                Some("IPv6"),
                json!([{"addresses": ["fd00::1"]}, {"addresses": ["10.0.0.1"]}]),
                p80.clone(),
            ),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[(
                    "FieldValueInvalid",
                    "endpoints[1].addresses[0]",
                    "Invalid value: \"10.0.0.1\": must be a valid IPv6 address",
                )],
            ),
        ),
        (
            "no addressType",
            slice(None, one("10.0.0.1"), p80.clone()),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[("FieldValueRequired", "addressType", "Required value")],
            ),
        ),
        (
            "an addressType kube does not know",
            slice(Some("IPX"), one("10.0.0.1"), p80.clone()),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[(
                    "FieldValueNotSupported",
                    "addressType",
                    "Unsupported value: \"IPX\": supported values: \"FQDN\", \"IPv4\", \"IPv6\"",
                )],
            ),
        ),
        (
            "an endpoint without addresses",
            slice(Some("IPv4"), json!([{"addresses": []}]), p80.clone()),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[(
                    "FieldValueRequired",
                    "endpoints[0].addresses",
                    "Required value: must contain at least 1 address",
                )],
            ),
        ),
        (
            "an endpoint with 101 addresses",
            slice(
                Some("IPv4"),
                json!([{"addresses": many_addresses}]),
                p80.clone(),
            ),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[(
                    "FieldValueTooMany",
                    "endpoints[0].addresses",
                    "Too many: 101: must have at most 100 items",
                )],
            ),
        ),
        (
            "1001 endpoints",
            slice(Some("IPv4"), Value::Array(many_endpoints), p80.clone()),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[(
                    "FieldValueTooMany",
                    "endpoints",
                    "Too many: 1001: must have at most 1000 items",
                )],
            ),
        ),
        (
            "a port out of range",
            slice(
                Some("IPv4"),
                one("10.0.0.1"),
                json!([{"name": "a", "port": 0}, {"name": "b", "port": 65536}]),
            ),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[
                    (
                        "FieldValueInvalid",
                        "ports[0].port",
                        "Invalid value: 0: must be between 1 and 65535, inclusive",
                    ),
                    (
                        "FieldValueInvalid",
                        "ports[1].port",
                        "Invalid value: 65536: must be between 1 and 65535, inclusive",
                    ),
                ],
            ),
        ),
        (
            "no endpoints and no ports",
            json!({"metadata": {"name": "web-x"}, "addressType": "IPv4"}),
            Ok(()),
        ),
    ];
    for (case, object, want) in cases {
        assert_eq!(validated(ENDPOINTSLICES, &object, None), want, "{case}");
    }
}

#[test]
fn endpoint_slice_zone_hints() {
    let slice = |endpoint: Value| json!({"metadata": {"name": "web-x"}, "addressType": "IPv4", "endpoints": [endpoint]});
    let hinted = |zones: &[&str]| {
        let for_zones: Vec<Value> = zones.iter().map(|z| json!({"name": z})).collect();
        slice(json!({"addresses": ["10.0.0.1"], "hints": {"forZones": for_zones}}))
    };
    let nine: Vec<String> = (0..9).map(|i| format!("z{i}")).collect();
    let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
    let not_a_label = format!(
        "Invalid value: \"eu 1a\": {}",
        kubemsg::label_value_errors("eu 1a").join("")
    );
    let cases: Vec<(&str, Value, Checked)> = vec![
        (
            "a zone and a hint for it",
            slice(json!({"addresses": ["10.0.0.1"], "zone": "eu-1a",
                         "hints": {"forZones": [{"name": "eu-1a"}]}})),
            Ok(()),
        ),
        (
            "any zone text: kube does not validate it",
            slice(json!({"addresses": ["10.0.0.1"], "zone": "not a label/value"})),
            Ok(()),
        ),
        ("an empty hint list", hinted(&[]), Ok(())),
        ("eight hints", hinted(&nine[..8]), Ok(())),
        (
            "nine hints: too many, nothing else reported",
            hinted(&["z0", "z0", "z1", "z2", "z3", "z4", "z5", "z6", "bad zone"]),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[(
                    "FieldValueTooMany",
                    "endpoints[0].hints.forZones",
                    "Too many: 9: must have at most 8 items",
                )],
            ),
        ),
        (
            "a zone hinted twice",
            hinted(&["eu-1a", "eu-1a"]),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[(
                    "FieldValueDuplicate",
                    "endpoints[0].hints.forZones[1].name",
                    "Duplicate value: \"eu-1a\"",
                )],
            ),
        ),
        (
            "a hint that is no label value",
            hinted(&["eu 1a"]),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[(
                    "FieldValueInvalid",
                    "endpoints[0].hints.forZones[0].name",
                    &not_a_label,
                )],
            ),
        ),
    ];
    for (case, object, want) in cases {
        assert_eq!(validated(ENDPOINTSLICES, &object, None), want, "{case}");
    }
}

#[test]
fn endpoint_slice_address_type_is_immutable() {
    let slice = |ty: &str, address: &str| {
        json!({"metadata": {"name": "web-x"}, "addressType": ty,
               "endpoints": [{"addresses": [address]}],
               "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]})
    };
    let old = slice("IPv4", "10.0.0.1");
    assert_eq!(
        validated(ENDPOINTSLICES, &slice("IPv4", "10.0.0.2"), Some(&old)),
        Ok(())
    );
    assert_eq!(
        validated(ENDPOINTSLICES, &slice("IPv6", "fd00::2"), Some(&old)),
        invalid(
            "EndpointSlice.discovery.k8s.io",
            "web-x",
            &[(
                "FieldValueInvalid",
                "addressType",
                "Invalid value: \"IPv6\": field is immutable"
            )],
        )
    );
}

/// kube's `ValidateEndpointIP` classes, per address: unspecified, loopback, link-local and
/// link-local multicast are a 422 in IPv4 and IPv6 slices; documentation, private and global
/// addresses stay accepted, as do the neighbours of each refused range.
#[test]
fn endpoint_slice_addresses_kube_refuses() {
    const UNSPECIFIED: &str = "may not be unspecified";
    const LOOPBACK: &str = "may not be in the loopback range (127.0.0.0/8, ::1/128)";
    const LINK_LOCAL: &str = "may not be in the link-local range (169.254.0.0/16, fe80::/10)";
    const MULTICAST: &str =
        "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)";
    // (addressType, address, None = accepted, Some(the cause's message after the value))
    let cases: Vec<(&str, &str, Option<&str>)> = vec![
        ("IPv4", "192.0.2.1", None),
        ("IPv4", "10.0.0.1", None),
        ("IPv4", "0.0.0.0", Some(UNSPECIFIED)),
        ("IPv4", "127.0.0.1", Some(LOOPBACK)),
        ("IPv4", "127.255.255.254", Some(LOOPBACK)),
        ("IPv4", "128.0.0.1", None),
        ("IPv4", "169.254.169.254", Some(LINK_LOCAL)),
        ("IPv4", "169.255.0.1", None),
        ("IPv4", "224.0.0.1", Some(MULTICAST)),
        ("IPv4", "224.0.0.251", Some(MULTICAST)),
        // Only the link-local block of multicast: kube lets global multicast through.
        ("IPv4", "224.0.1.1", None),
        ("IPv6", "2001:db8::1", None),
        ("IPv6", "fd00::1", None),
        ("IPv6", "::", Some(UNSPECIFIED)),
        ("IPv6", "::1", Some(LOOPBACK)),
        ("IPv6", "::2", None),
        ("IPv6", "fe80::1", Some(LINK_LOCAL)),
        ("IPv6", "febf:ffff::1", Some(LINK_LOCAL)),
        ("IPv6", "fec0::1", None),
        ("IPv6", "ff02::1", Some(MULTICAST)),
        // Go's test is the scope nibble, so a flagged link-local group is refused too.
        ("IPv6", "ff12::1:2", Some(MULTICAST)),
        ("IPv6", "ff05::1", None),
    ];
    for (ty, address, refusal) in cases {
        let object = json!({
            "metadata": {"name": "web-x"}, "addressType": ty,
            "endpoints": [{"addresses": [address]}],
        });
        let want = match refusal {
            None => Ok(()),
            // The unspecified message names the address, as kube's `%v` does.
            Some(UNSPECIFIED) => invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[(
                    "FieldValueInvalid",
                    "endpoints[0].addresses[0]",
                    &format!("Invalid value: \"{address}\": {UNSPECIFIED} ({address})"),
                )],
            ),
            Some(why) => invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[(
                    "FieldValueInvalid",
                    "endpoints[0].addresses[0]",
                    &format!("Invalid value: \"{address}\": {why}"),
                )],
            ),
        };
        assert_eq!(
            validated(ENDPOINTSLICES, &object, None),
            want,
            "{ty} {address}"
        );
    }
}

/// Where the refusal lands among other addresses and causes, and that every write path sees it.
#[test]
#[allow(clippy::too_many_lines)] // the body is the table of refused-address cases
fn endpoint_slice_refused_addresses_in_context() {
    let slice = |ty: &str, endpoints: Value| json!({"metadata": {"name": "web-x"}, "addressType": ty, "endpoints": endpoints});
    let cases: Vec<(&str, Value, Checked)> = vec![
        (
            "the second address of the second endpoint, and one more",
            slice(
                "IPv4",
                json!([{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "127.0.0.1"]},
                       {"addresses": ["169.254.1.1"]}]),
            ),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[
                    (
                        "FieldValueInvalid",
                        "endpoints[1].addresses[1]",
                        "Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)",
                    ),
                    (
                        "FieldValueInvalid",
                        "endpoints[2].addresses[0]",
                        "Invalid value: \"169.254.1.1\": may not be in the link-local range (169.254.0.0/16, fe80::/10)",
                    ),
                ],
            ),
        ),
        (
            // kube classifies any address that parses, so the wrong family gets both causes.
            "IPv6 loopback in an IPv4 slice",
            slice("IPv4", json!([{"addresses": ["::1"]}])),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[
                    (
                        "FieldValueInvalid",
                        "endpoints[0].addresses[0]",
                        "Invalid value: \"::1\": must be a valid IPv4 address",
                    ),
                    (
                        "FieldValueInvalid",
                        "endpoints[0].addresses[0]",
                        "Invalid value: \"::1\": may not be in the loopback range (127.0.0.0/8, ::1/128)",
                    ),
                ],
            ),
        ),
        (
            "IPv4 unspecified in an IPv6 slice",
            slice("IPv6", json!([{"addresses": ["0.0.0.0"]}])),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[
                    (
                        "FieldValueInvalid",
                        "endpoints[0].addresses[0]",
                        "Invalid value: \"0.0.0.0\": must be a valid IPv6 address",
                    ),
                    (
                        "FieldValueInvalid",
                        "endpoints[0].addresses[0]",
                        "Invalid value: \"0.0.0.0\": may not be unspecified (0.0.0.0)",
                    ),
                ],
            ),
        ),
        (
            // kube's IPv6 parse refuses the mapped form before any classification.
            "an IPv4-mapped address in an IPv6 slice",
            slice(
                "IPv6",
                json!([{"addresses": ["::ffff:10.0.0.1", "::ffff:127.0.0.1"]}]),
            ),
            invalid(
                "EndpointSlice.discovery.k8s.io",
                "web-x",
                &[
                    (
                        "FieldValueInvalid",
                        "endpoints[0].addresses[0]",
                        "Invalid value: \"::ffff:10.0.0.1\": must be a valid IPv6 address",
                    ),
                    (
                        "FieldValueInvalid",
                        "endpoints[0].addresses[1]",
                        "Invalid value: \"::ffff:127.0.0.1\": must be a valid IPv6 address",
                    ),
                ],
            ),
        ),
        (
            "an FQDN that looks like loopback is a name",
            slice("FQDN", json!([{"addresses": ["127.0.0.1"]}])),
            Ok(()),
        ),
    ];
    for (case, object, want) in cases {
        assert_eq!(validated(ENDPOINTSLICES, &object, None), want, "{case}");
    }

    // An update is checked as a create is: a good slice may not gain a loopback address.
    let old = slice("IPv6", json!([{"addresses": ["fd00::1"]}]));
    assert_eq!(
        validated(
            ENDPOINTSLICES,
            &slice("IPv6", json!([{"addresses": ["fd00::1", "::1"]}])),
            Some(&old)
        ),
        invalid(
            "EndpointSlice.discovery.k8s.io",
            "web-x",
            &[(
                "FieldValueInvalid",
                "endpoints[0].addresses[1]",
                "Invalid value: \"::1\": may not be in the loopback range (127.0.0.0/8, ::1/128)",
            )],
        )
    );
}

/// Go classes an IPv4-mapped IPv6 address as the IPv4 address it maps (`net.IP.To4`); an
/// IPv4-compatible one (`::127.0.0.1`) is plain IPv6 and in no class.
#[test]
fn endpoint_ip_classes_follow_go() {
    for (text, want) in [
        (
            "::ffff:0.0.0.0",
            Some("may not be unspecified (::ffff:0.0.0.0)"),
        ),
        (
            "::ffff:127.0.0.1",
            Some("may not be in the loopback range (127.0.0.0/8, ::1/128)"),
        ),
        (
            "::ffff:169.254.0.1",
            Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)"),
        ),
        (
            "::ffff:224.0.0.9",
            Some("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"),
        ),
        ("::ffff:10.0.0.1", None),
        ("::127.0.0.1", None),
    ] {
        let ip: IpAddr = text.parse().expect("an IP");
        assert_eq!(endpoint_ip_refusal(ip, text).as_deref(), want, "{text}");
    }
}

#[test]
fn names() {
    let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    let label = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    let configmaps = res("", "configmaps");
    // (resource, name, None = valid, Some(message after `Invalid value: "<name>": `))
    let cases: Vec<(usize, &str, Option<&str>)> = vec![
        (configmaps, "a.b-c", None),
        (configmaps, "A", Some(subdomain)),
        (configmaps, "a..b", Some(subdomain)),
        (configmaps, "-a", Some(subdomain)),
        (NAMESPACES, "shop-1", None),
        (NAMESPACES, "1shop", None),
        // kube 1.33's IsDNS1123Label: a valid subdomain that is not a label "must not contain dots".
        (NAMESPACES, "a.b", Some("must not contain dots")),
        (NAMESPACES, "Shop", Some(label)),
        (ENDPOINTSLICES, "web-abc12.x", None),
        (LINKS, "east", None),
        (LINKS, "East", Some(subdomain)),
    ];
    for (res, name, want) in cases {
        let object = json!({"metadata": {"name": name}, "addressType": "IPv4"});
        let kind = RESOURCES[res].kind;
        let want = match want {
            None => Ok(()),
            Some(msg) => {
                let message = format!("Invalid value: \"{name}\": {msg}");
                invalid(
                    &crate::status::qualified(RESOURCES[res].group, kind),
                    name,
                    &[("FieldValueInvalid", "metadata.name", message.as_str())],
                )
            }
        };
        assert_eq!(validated(res, &object, None), want, "{kind} {name:?}");
    }
    assert_eq!(
        validated(configmaps, &json!({"metadata": {}}), None),
        invalid(
            "ConfigMap",
            "",
            &[(
                "FieldValueRequired",
                "metadata.name",
                "Required value: name or generateName is required",
            )],
        )
    );
    let (long63, long64) = ("a".repeat(63), "a".repeat(64));
    for (s, ok) in [
        ("a", true),
        ("a-1", true),
        ("1", true),
        ("", false),
        ("a-", false),
        ("a_b", false),
        ("a.b", false),
        (long63.as_str(), true),
        (long64.as_str(), false),
    ] {
        assert_eq!(kubemsg::dns1123_label_errors(s).is_empty(), ok, "{s:?}");
    }
}
