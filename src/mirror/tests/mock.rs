//! A scripted API server for the mirror's exact-request tests: a
//! `kube::Client` on a `tower-test` mock, and a task that takes the
//! requests one by one, asserts each against the next step of a script
//! (method, path, every query parameter, the body) and answers with the
//! step's status and body. A request beyond the script finds the server
//! gone and fails; a step never reached fails the test's final check.
//!
//! Test-only; it knows nothing of the controller.

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// How a step checks the request body.
enum BodyCheck {
    /// No body (GET).
    Empty,
    /// Exactly this JSON.
    Exact(Value),
    /// A check of its own (for bodies with timestamps or generated names).
    With(Box<dyn Fn(&Value) + Send>),
}

/// One expected request and the answer to it.
pub(crate) struct Step {
    method: &'static str,
    path: String,
    query: Vec<(String, String)>,
    content_type: Option<&'static str>,
    body: BodyCheck,
    status: u16,
    reply: Value,
}

impl Step {
    /// `method path`, no query, no body, answered `200 {}`.
    pub(crate) fn new(method: &'static str, path: &str) -> Self {
        Self {
            method,
            path: path.to_owned(),
            query: Vec::new(),
            content_type: None,
            body: BodyCheck::Empty,
            status: 200,
            reply: json!({}),
        }
    }

    /// The query parameters, all of them, in any order.
    pub(crate) fn query(mut self, pairs: &[(&str, &str)]) -> Self {
        self.query = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.query.sort();
        self
    }

    /// The request's `content-type` (which says what kind of patch it is).
    pub(crate) fn content_type(mut self, content_type: &'static str) -> Self {
        self.content_type = Some(content_type);
        self
    }

    /// The body must be exactly `body`.
    pub(crate) fn body(mut self, body: Value) -> Self {
        self.body = BodyCheck::Exact(body);
        self
    }

    /// The body must pass `check`.
    pub(crate) fn body_with(mut self, check: impl Fn(&Value) + Send + 'static) -> Self {
        self.body = BodyCheck::With(Box::new(check));
        self
    }

    /// Answer `200` with `object`.
    pub(crate) fn ok(mut self, object: Value) -> Self {
        self.status = 200;
        self.reply = object;
        self
    }

    /// Answer `code` with a `Status` of `reason`, as the API server does.
    pub(crate) fn fails(mut self, code: u16, reason: &str) -> Self {
        self.status = code;
        self.reply = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": format!("scripted {reason}"),
            "reason": reason, "code": code
        });
        self
    }
}

/// A client whose requests go to the returned handle.
pub(crate) fn client() -> (Client, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

fn query_of(req: &Request<Body>) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect();
    pairs.sort();
    pairs
}

async fn answer(handle: &mut Handle, step: Step, n: usize) {
    let (req, send) = handle
        .next_request()
        .await
        .unwrap_or_else(|| panic!("step {n}: no request for {} {}", step.method, step.path));
    let what = format!("step {n} ({} {})", step.method, step.path);
    assert_eq!(req.method().as_str(), step.method, "{what}: method");
    assert_eq!(req.uri().path(), step.path, "{what}: path");
    assert_eq!(query_of(&req), step.query, "{what}: query");
    if let Some(want) = step.content_type {
        let got = req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        assert_eq!(got, Some(want), "{what}: content-type");
    }
    let bytes = req
        .into_body()
        .collect_bytes()
        .await
        .unwrap_or_else(|e| panic!("{what}: body: {e}"));
    match step.body {
        BodyCheck::Empty => assert!(bytes.is_empty(), "{what}: unexpected body"),
        BodyCheck::Exact(want) => {
            let got: Value = serde_json::from_slice(&bytes).expect("JSON body");
            assert_eq!(got, want, "{what}: body");
        }
        BodyCheck::With(check) => {
            check(&serde_json::from_slice(&bytes).expect("JSON body"));
        }
    }
    let body = serde_json::to_vec(&step.reply).expect("reply encodes");
    let response = Response::builder()
        .status(step.status)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .expect("response");
    send.send_response(response);
}

/// Serves `script` in order on `handle`; the task ends after the last step
/// (later requests then fail).
pub(crate) fn serve(mut handle: Handle, script: Vec<Step>) -> JoinHandle<()> {
    tokio::spawn(async move {
        for (n, step) in script.into_iter().enumerate() {
            answer(&mut handle, step, n + 1).await;
        }
    })
}

/// Waits for the scripted server to have answered every step.
pub(crate) async fn finished(server: JoinHandle<()>) {
    tokio::time::timeout(std::time::Duration::from_secs(5), server)
        .await
        .expect("the script was not played to its end")
        .expect("a scripted request did not match");
}

/// Serves `script`, then takes the next request and never answers it: an
/// API server that hangs. The task ends only when aborted.
pub(crate) fn serve_then_hang(mut handle: Handle, script: Vec<Step>) -> JoinHandle<()> {
    tokio::spawn(async move {
        for (n, step) in script.into_iter().enumerate() {
            answer(&mut handle, step, n + 1).await;
        }
        if let Some((_request, _unanswered)) = handle.next_request().await {
            std::future::pending::<()>().await;
        }
    })
}
