//! What the netlab tests share: a lab (or a skip), a host running kubesim, timed requests.

use std::time::{Duration, Instant};

use netlab::{Host, Lab, Sim};

/// How long a request may take before it counts as hanging.
pub(crate) const HANG: Duration = Duration::from_secs(2);

/// A lab, or None when this machine cannot have one (Lab::new printed why).
pub(crate) fn lab() -> Option<Lab> {
    Lab::new().expect("the lab's tools answer")
}

/// A lab host running a one-cluster (`east`) kubesim, its kubeconfig directory, and the lab.
/// Fields drop in order: the sim, then the host, the directory, the lab.
pub(crate) struct Fixture {
    pub(crate) sim: Sim,
    pub(crate) host: Host,
    _dir: tempfile::TempDir,
    _lab: Lab,
}

pub(crate) fn fixture() -> Option<Fixture> {
    let lab = lab()?;
    let host = lab.host("api").expect("a lab host");
    let dir = tempfile::tempdir().expect("a temp dir");
    let sim = host
        .kubesim(&["east"], dir.path(), &[])
        .expect("kubesim starts in the host");
    Some(Fixture {
        sim,
        host,
        _dir: dir,
        _lab: lab,
    })
}

/// `GET /version` with a client of its own (so a new connection), bounded by `limit`:
/// `Some(result)` if it finished in time, with how long it took.
pub(crate) async fn version_with_fresh_client(
    sim: &Sim,
    limit: Duration,
) -> (Option<Result<String, kube::Error>>, Duration) {
    let client = sim.client("east").await.expect("a kube client");
    timed_version(&client, limit).await
}

/// `GET /version` on `client`, bounded by `limit`.
pub(crate) async fn timed_version(
    client: &kube::Client,
    limit: Duration,
) -> (Option<Result<String, kube::Error>>, Duration) {
    let started = Instant::now();
    let answer = tokio::time::timeout(limit, client.apiserver_version()).await;
    let answer = answer.ok().map(|r| r.map(|info| info.git_version));
    (answer, started.elapsed())
}

/// Asserts that a new client gets `/version` within 5 s.
pub(crate) async fn answers(sim: &Sim, when: &str) {
    let (answer, took) = version_with_fresh_client(sim, Duration::from_secs(5)).await;
    match answer {
        Some(Ok(_)) => {}
        other => panic!("{when}: /version should answer, got {other:?} after {took:?}"),
    }
}

/// Asserts that a new client's `/version` is still pending after [`HANG`].
pub(crate) async fn hangs(sim: &Sim, when: &str) {
    let (answer, took) = version_with_fresh_client(sim, HANG).await;
    assert!(
        answer.is_none(),
        "{when}: /version should hang, got {answer:?} after {took:?}"
    );
}
