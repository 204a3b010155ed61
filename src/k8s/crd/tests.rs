use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;

use super::*;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some("shop".to_owned()),
        ..ObjectMeta::default()
    }
}

#[test]
fn a_service_import_takes_the_served_version() {
    let import = ServiceImport {
        metadata: meta("cart"),
        spec: ServiceImportSpec {
            type_: Some("ClusterSetIP".to_owned()),
            ports: Some(vec![ImportPort {
                name: Some("http".to_owned()),
                protocol: Some("TCP".to_owned()),
                app_protocol: None,
                port: 80,
            }]),
            ips: None,
            ..ServiceImportSpec::default()
        },
    };
    let dynamic = to_dynamic(&import, "v1alpha1").expect("converts");
    assert_eq!(
        serde_json::to_value(&dynamic).expect("encodes"),
        json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1",
            "kind": "ServiceImport",
            "metadata": {"name": "cart", "namespace": "shop"},
            "spec": {"type": "ClusterSetIP", "ports": [{"name": "http", "protocol": "TCP", "port": 80}]},
        })
    );
    let back: ServiceImport = from_dynamic(dynamic).expect("decodes");
    assert_eq!(back, import);
}

#[test]
fn a_service_export_has_no_spec_on_the_wire() {
    let export = ServiceExport {
        metadata: meta("cart"),
        spec: ServiceExportSpec {},
        status: Some(ServiceExportStatus {
            conditions: Some(vec![ExportCondition {
                type_: Some("Valid".to_owned()),
                status: Some("True".to_owned()),
                ..ExportCondition::default()
            }]),
        }),
    };
    assert_eq!(
        serde_json::to_value(to_dynamic(&export, "v1beta1").expect("converts")).expect("encodes"),
        json!({
            "apiVersion": "multicluster.x-k8s.io/v1beta1",
            "kind": "ServiceExport",
            "metadata": {"name": "cart", "namespace": "shop"},
            "status": {"conditions": [{"type": "Valid", "status": "True"}]},
        })
    );
}

#[test]
fn an_incomplete_condition_of_another_manager_still_reads() {
    let dynamic: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ServiceExport",
        "metadata": {"name": "cart", "namespace": "shop"},
        "spec": {"unknown": true},
        "status": {"conditions": [{"type": "Ready"}]},
    }))
    .expect("dynamic");
    let export: ServiceExport = from_dynamic(dynamic).expect("decodes");
    let conditions = export.status.and_then(|s| s.conditions).unwrap_or_default();
    assert_eq!(conditions.len(), 1);
    assert_eq!(conditions[0].type_.as_deref(), Some("Ready"));
}

#[test]
fn a_service_import_of_the_wrong_shape_does_not_decode() {
    let dynamic: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1",
        "kind": "ServiceImport",
        "metadata": {"name": "cart", "namespace": "shop"},
        "spec": {"ports": "80"},
    }))
    .expect("dynamic");
    let err = from_dynamic::<ServiceImport>(dynamic).expect_err("a string is no list");
    assert!(err.to_string().starts_with("ServiceImport: "), "{err}");
}
