//! The export conditions per case: the cluster state, the export as
//! listed, and the apply body expected (or none).

use serde_json::{Value, json};

use super::*;
use crate::model::cluster::{Dirty, Event};
use crate::model::objects::{Affinity, ExportedMeta, Import, Port, Protocol, TrafficDistribution};
use crate::model::testing::{port, service, svc_event, up};

const NOW: &str = "2026-11-25T12:00:00Z";
const EARLIER: &str = "2026-11-01T00:00:00Z";

fn pg(p: u16) -> Vec<Port> {
    vec![port(Some("pg"), Protocol::Tcp, p)]
}

fn db(cluster: &str, exported: i64, headless: bool, ports: Vec<Port>) -> Event {
    let mut s = service("data", "db", None, false, headless, &[], ports);
    s.mcs = Some(exported);
    svc_event(cluster, s)
}

fn set(events: Vec<Event>) -> ClusterSet {
    let mut set = ClusterSet::new();
    let mut dirty = Dirty::default();
    let mut all = up("west", true);
    all.extend(up("east", false));
    all.extend(up("north", false));
    for e in all.into_iter().chain(events) {
        set.apply(e, &mut dirty);
    }
    set
}

fn export(conditions: Option<Value>) -> Value {
    let mut v = json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": "db", "namespace": "data", "generation": 1, "uid": "u1"}
    });
    if let Some(c) = conditions {
        v["status"] = json!({ "conditions": c });
    }
    v
}

fn cond(kind: &str, status: &str, reason: &str, message: &str, since: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": since, "observedGeneration": 1})
}

fn body(conditions: Value) -> Value {
    json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": "db", "namespace": "data"},
        "status": {"conditions": conditions}
    })
}

fn valid(since: &str) -> Value {
    cond(
        "Valid",
        "True",
        "Valid",
        "Service data/db is exported",
        since,
    )
}

fn no_conflicts(since: &str) -> Value {
    cond("Conflict", "False", "NoConflicts", "no conflicts", since)
}

struct Case {
    name: &'static str,
    events: Vec<Event>,
    export: Value,
    want: Option<Value>,
}

#[test]
fn export_conditions() {
    let type_msg = "the Service type differs from west's (the export that defines the service) in north, which are left out";
    let port_msg = "the ports differ from west's in north; the import has their union, with west's number where a name and protocol is defined twice";
    let cases = vec![
        Case {
            name: "a valid export without conditions gets Valid and Conflict",
            events: vec![db("west", 200, false, pg(5432))],
            export: export(None),
            want: Some(body(json!([valid(NOW), no_conflicts(NOW)]))),
        },
        Case {
            name: "conditions already so: no write",
            events: vec![db("west", 200, false, pg(5432))],
            export: export(Some(json!([
                valid(EARLIER),
                no_conflicts(EARLIER),
                cond("Ready", "True", "Ready", "someone else's", EARLIER)
            ]))),
            want: None,
        },
        Case {
            name: "no Service of that name here: Valid False",
            events: vec![db("east", 100, false, pg(5432))],
            export: export(None),
            want: Some(body(json!([
                cond(
                    "Valid",
                    "False",
                    "NoService",
                    "no Service data/db in this cluster",
                    NOW
                ),
                no_conflicts(NOW)
            ]))),
        },
        Case {
            name: "an ExternalName Service here: Valid False, InvalidServiceType",
            events: vec![
                db("east", 100, false, pg(5432)),
                Event::ExternalNameApplied {
                    cluster: "west".into(),
                    key: ObjectKey::new("data", "db"),
                    present: true,
                },
            ],
            export: export(None),
            want: Some(body(json!([
                cond(
                    "Valid",
                    "False",
                    "InvalidServiceType",
                    "Service data/db is of type ExternalName, which has no endpoints to export",
                    NOW
                ),
                no_conflicts(NOW)
            ]))),
        },
        Case {
            name: "a port conflict names the clusters; Valid keeps its transition time",
            // The local cluster's export is senior: north's, dated 1970 by
            // a compromised API server, is still the newer one.
            events: vec![
                db("west", 200, false, pg(5432)),
                db("north", 0, false, pg(6432)),
            ],
            export: export(Some(json!([valid(EARLIER), no_conflicts(EARLIER)]))),
            want: Some(body(json!([
                valid(EARLIER),
                cond("Conflict", "True", "PortConflict", port_msg, NOW)
            ]))),
        },
        Case {
            name: "a type conflict names the clusters left out",
            events: vec![
                db("west", 100, false, pg(5432)),
                db("north", 300, true, pg(5432)),
            ],
            export: export(None),
            want: Some(body(json!([
                valid(NOW),
                cond("Conflict", "True", "TypeConflict", type_msg, NOW)
            ]))),
        },
        Case {
            name: "different port sets: Conflict on the defining export too, the import has the union",
            events: vec![
                db("west", 100, false, pg(5432)),
                db(
                    "north",
                    200,
                    false,
                    vec![pg(5432)[0].clone(), port(Some("stcp"), Protocol::Sctp, 142)],
                ),
            ],
            export: export(None),
            want: Some(body(json!([
                valid(NOW),
                cond(
                    "Conflict",
                    "True",
                    "PortConflict",
                    "the ports differ from west's in north; the import has their union, with west's number where a name and protocol is defined twice",
                    NOW
                )
            ]))),
        },
        Case {
            name: "different exported labels: Conflict, the definer's are used",
            events: vec![db("west", 100, false, pg(5432)), {
                let mut e = db("north", 200, false, pg(5432));
                if let Event::ServiceApplied { service, .. } = &mut e {
                    service.exported_meta = Some(std::sync::Arc::new(ExportedMeta {
                        labels: [("tier".to_owned(), "gold".to_owned())].into(),
                        ..ExportedMeta::default()
                    }));
                }
                e
            }],
            export: export(None),
            want: Some(body(json!([
                valid(NOW),
                cond(
                    "Conflict",
                    "True",
                    "LabelsConflict",
                    "the exported labels differ from west's in north; west's are used",
                    NOW
                )
            ]))),
        },
        Case {
            name: "several disagreements: mcs-api's reasons joined by commas",
            events: vec![db("west", 100, false, pg(5432)), {
                let mut e = db("north", 200, false, pg(6432));
                if let Event::ServiceApplied { service, .. } = &mut e {
                    service.import_fields.affinity = Affinity::ClientIp(Some(10));
                    service.import_fields.traffic_distribution =
                        Some(TrafficDistribution::PreferClose);
                    service.exported_meta = Some(std::sync::Arc::new(ExportedMeta {
                        annotations: [("note".to_owned(), "x".to_owned())].into(),
                        ..ExportedMeta::default()
                    }));
                }
                e
            }],
            export: export(None),
            want: Some(body(json!([
                valid(NOW),
                cond(
                    "Conflict",
                    "True",
                    "PortConflict,SessionAffinityConflict,TrafficDistributionConflict,AnnotationsConflict",
                    &[
                        port_msg,
                        "sessionAffinity differs from west's in north; west's is used",
                        "trafficDistribution differs from west's in north; west's is used",
                        "the exported annotations differ from west's in north; west's are used",
                    ]
                    .join("; "),
                    NOW
                )
            ]))),
        },
        Case {
            name: "the import's definer keeps defining it: the local export of the other type is left out",
            events: vec![
                db("west", 100, true, pg(5432)),
                db("east", 200, false, pg(5432)),
                Event::ImportApplied {
                    cluster: "west".into(),
                    import: Import {
                        key: ObjectKey::new("data", "db"),
                        ips: vec![],
                        defined_by: Some("east".into()),
                    },
                },
            ],
            export: export(None),
            want: Some(body(json!([
                valid(NOW),
                cond(
                    "Conflict",
                    "True",
                    "TypeConflict",
                    "the Service type differs from east's (the export that defines the service) in west, which are left out",
                    NOW
                )
            ]))),
        },
    ];
    for case in cases {
        let got = export_status(&set(case.events), &typed(&case.export), NOW);
        assert_eq!(got.map(|e| written(&e)), case.want, "{}", case.name);
    }
}

/// An export as the watch gives it.
fn typed(v: &Value) -> ServiceExport {
    let dynamic = serde_json::from_value(v.clone()).expect("an object");
    crate::k8s::crd::from_dynamic(dynamic).expect("a ServiceExport")
}

/// The apply body as the API is sent it.
fn written(e: &ServiceExport) -> Value {
    let dynamic = crate::k8s::crd::to_dynamic(e, "v1beta1").expect("converts");
    serde_json::to_value(dynamic).expect("encodes")
}

#[test]
fn an_export_without_a_name_is_skipped() {
    let mut e = export(None);
    e["metadata"] = json!({"namespace": "data"});
    assert_eq!(export_status(&set(vec![]), &typed(&e), NOW), None);
}
