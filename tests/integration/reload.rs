//! Hot reload of the zones directory: edits, additions and deletions under a
//! temporary copy of `zones/demo` are served within 2 s without a restart;
//! a broken file keeps the cluster's previous data; a ConfigMap volume
//! update (a swapped `..data` link) is served as soon.

use std::path::Path;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use crate::binary::http_get;
use crate::support::{Options, Proto, TestServer, ask, copy_tree, demo, eventually, q, start};

/// The sorted A (or AAAA) answer for `name`, or the rcode when negative.
async fn lookup(
    server: &TestServer,
    name: &str,
    rtype: RecordType,
) -> Result<Vec<String>, ResponseCode> {
    let (m, _) = ask(server.dns, Proto::Udp, &q(name, rtype)).await;
    if m.metadata.response_code != ResponseCode::NoError || m.answers.is_empty() {
        return Err(m.metadata.response_code);
    }
    let mut v: Vec<String> = m.answers.iter().map(|r| r.data.to_string()).collect();
    v.sort();
    Ok(v)
}

/// Waits (at most 2 s) until `lookup` returns `want`; returns how long it took.
async fn served_within_2s(
    server: &TestServer,
    name: &str,
    rtype: RecordType,
    want: Result<Vec<&str>, ResponseCode>,
) -> Duration {
    let want = want.map(|v| v.into_iter().map(str::to_owned).collect::<Vec<_>>());
    let want = &want;
    eventually(
        &format!("{name} {rtype} served as {want:?}"),
        Duration::from_secs(2),
        || async move {
            let got = lookup(server, name, rtype).await;
            if got == *want {
                Ok(())
            } else {
                Err(format!("still {got:?}"))
            }
        },
    )
    .await
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).expect("read");
    assert!(
        text.contains(from),
        "{} does not contain {from:?}",
        path.display()
    );
    std::fs::write(path, text.replace(from, to)).expect("write");
}

const NEW_SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: ledger
  namespace: shop
  labels:
    mirror.linkerd.io/exported: remote-discovery
spec:
  clusterIP: 10.100.99.1
  ports:
  - name: http
    port: 80
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ledger-k2x9p
  namespace: shop
  labels:
    kubernetes.io/service-name: ledger
addressType: IPv4
ports:
- name: http
  port: 80
endpoints:
- addresses: [10.10.99.1]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_served_within_2s_and_broken_files_keep_old_data() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_tree(&demo(), tmp.path());
    let server = start(
        tmp.path(),
        Options {
            local: Some("west"),
            ..Options::default()
        },
    )
    .await;
    let dir = tmp.path();
    let payments = "payments-north.shop.svc.clusterset.local.";
    assert_eq!(
        lookup(&server, payments, RecordType::A).await,
        Ok(vec![
            "10.20.20.1".into(),
            "10.20.20.2".into(),
            "10.20.20.3".into()
        ])
    );

    // Edit: a pod IP changes.
    edit(&dir.join("north/payments.yaml"), "10.20.20.1", "10.20.20.9");
    served_within_2s(
        &server,
        payments,
        RecordType::A,
        Ok(vec!["10.20.20.2", "10.20.20.3", "10.20.20.9"]),
    )
    .await;

    // Add: a new file with a new service.
    std::fs::write(dir.join("east/ledger.yaml"), NEW_SERVICE).expect("write");
    served_within_2s(
        &server,
        "ledger-east.shop.svc.clusterset.local.",
        RecordType::A,
        Ok(vec!["10.10.99.1"]),
    )
    .await;

    // Delete: a file goes away, and so does its name.
    std::fs::remove_file(dir.join("south/reviews.yaml")).expect("remove");
    served_within_2s(
        &server,
        "reviews-south.shop.svc.clusterset.local.",
        RecordType::A,
        Err(ResponseCode::NXDomain),
    )
    .await;

    // Broken: the cluster keeps its previous data, and the error is counted.
    let before = std::fs::read_to_string(dir.join("north/payments.yaml")).expect("read");
    std::fs::write(
        dir.join("north/payments.yaml"),
        format!("{before}\n---\nkind: [unclosed\n"),
    )
    .expect("write");
    eventually(
        "the failed reload is counted",
        Duration::from_secs(3),
        || async {
            let (_, metrics) = http_get(server.admin, "/metrics");
            if metrics.contains("clusterset_dns_source_reload_errors_total{cluster=\"north\"} 1") {
                Ok(())
            } else {
                Err(metrics)
            }
        },
    )
    .await;
    assert_eq!(
        lookup(&server, payments, RecordType::A).await,
        Ok(vec![
            "10.20.20.2".into(),
            "10.20.20.3".into(),
            "10.20.20.9".into()
        ]),
        "old data kept"
    );
    // Other clusters still reload while north is broken.
    edit(&dir.join("east/ledger.yaml"), "10.10.99.1", "10.10.99.2");
    served_within_2s(
        &server,
        "ledger-east.shop.svc.clusterset.local.",
        RecordType::A,
        Ok(vec!["10.10.99.2"]),
    )
    .await;
    // Fixing the file applies the new data.
    std::fs::write(
        dir.join("north/payments.yaml"),
        before.replace("10.20.20.2", "10.20.20.8"),
    )
    .expect("write");
    served_within_2s(
        &server,
        payments,
        RecordType::A,
        Ok(vec!["10.20.20.3", "10.20.20.8", "10.20.20.9"]),
    )
    .await;

    // A new cluster directory, then its removal.
    std::fs::create_dir(dir.join("far")).expect("mkdir");
    std::fs::write(
        dir.join("far/ledger.yaml"),
        NEW_SERVICE.replace("10.10.99.1", "10.50.99.1"),
    )
    .expect("write");
    served_within_2s(
        &server,
        "ledger-far.shop.svc.clusterset.local.",
        RecordType::A,
        Ok(vec!["10.50.99.1"]),
    )
    .await;
    std::fs::remove_dir_all(dir.join("far")).expect("rmdir");
    served_within_2s(
        &server,
        "ledger-far.shop.svc.clusterset.local.",
        RecordType::NS,
        Err(ResponseCode::NXDomain),
    )
    .await;
    server.server.stop().await;
}

/// Writes `text` as `ledger.yaml` of a ConfigMap volume in `dir`, the way
/// the kubelet updates one: a new versioned directory, then one rename
/// that swaps the `..data` link (`ledger.yaml` links through it).
fn configmap_update(dir: &Path, version: &str, text: &str) {
    use std::os::unix::fs::symlink;
    std::fs::create_dir(dir.join(version)).expect("mkdir");
    std::fs::write(dir.join(version).join("ledger.yaml"), text).expect("write");
    symlink(version, dir.join("..data_tmp")).expect("symlink");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap ..data");
    if std::fs::symlink_metadata(dir.join("ledger.yaml")).is_err() {
        symlink("..data/ledger.yaml", dir.join("ledger.yaml")).expect("symlink");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_volume_update_is_served_within_2s() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_tree(&demo(), tmp.path());
    let far = tmp.path().join("far");
    std::fs::create_dir(&far).expect("mkdir");
    configmap_update(
        &far,
        "..v1",
        &NEW_SERVICE.replace("10.10.99.1", "10.50.99.1"),
    );
    let server = start(
        tmp.path(),
        Options {
            local: Some("west"),
            ..Options::default()
        },
    )
    .await;
    let ledger = "ledger-far.shop.svc.clusterset.local.";
    assert_eq!(
        lookup(&server, ledger, RecordType::A).await,
        Ok(vec!["10.50.99.1".into()])
    );
    configmap_update(
        &far,
        "..v2",
        &NEW_SERVICE.replace("10.10.99.1", "10.50.99.2"),
    );
    served_within_2s(&server, ledger, RecordType::A, Ok(vec!["10.50.99.2"])).await;
    server.server.stop().await;
}
