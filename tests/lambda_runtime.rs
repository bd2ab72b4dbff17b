//! The runtime loop of an HTTP function under Lambda Managed Instances: with
//! `AWS_LAMBDA_MAX_CONCURRENCY` above 1 the function polls for that many invocations at once,
//! and they share the process's clients, its group commit and its sold-out copy. The function
//! here is the reserve function as `functions/reserve` runs it ([`shared::lambda::serve`]), and
//! a Runtime API on port 0 stands in for Lambda's: the routes `/next`, `/response` and `/error`
//! of its version 2018-06-01, an invocation handed out per `/next`.
//!
//! Its own test binary, apart from `tests/it`: the runtime reads its endpoint and concurrency
//! from the environment, which is the whole process's.

#[allow(dead_code, unused_imports)]
#[path = "it/harness/mod.rs"]
mod harness;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use harness::{Mode, TestApp};

/// How many invocations one execution environment runs at once.
const CONCURRENCY: usize = 16;

/// Lambda's side of the Runtime API: invocations queue until a `/next` takes one, and each
/// waits for its `/response` (or `/error`).
struct RuntimeApi {
    queue: tokio::sync::Mutex<mpsc::UnboundedReceiver<(String, Value)>>,
    send: mpsc::UnboundedSender<(String, Value)>,
    answers: Mutex<HashMap<String, oneshot::Sender<Result<Value, Value>>>>,
    /// `/next` requests waiting, and the most there ever were: the first ones wait until
    /// [`CONCURRENCY`] poll at once (or 10 s pass), so a runtime that polls one at a time shows.
    polling: AtomicUsize,
    most_polling: AtomicUsize,
    all_polling: tokio::sync::watch::Sender<bool>,
    /// Invocations handed out and not answered yet, and the most there ever were: the first
    /// answers wait until [`CONCURRENCY`] run at once (or 10 s pass).
    running: AtomicUsize,
    all_running: tokio::sync::watch::Sender<bool>,
    most_running: AtomicUsize,
    next_id: AtomicUsize,
}

impl RuntimeApi {
    fn new() -> Arc<RuntimeApi> {
        let (send, queue) = mpsc::unbounded_channel();
        Arc::new(RuntimeApi {
            queue: tokio::sync::Mutex::new(queue),
            send,
            answers: Mutex::new(HashMap::new()),
            polling: AtomicUsize::new(0),
            most_polling: AtomicUsize::new(0),
            all_polling: tokio::sync::watch::Sender::new(false),
            running: AtomicUsize::new(0),
            all_running: tokio::sync::watch::Sender::new(false),
            most_running: AtomicUsize::new(0),
            next_id: AtomicUsize::new(0),
        })
    }

    /// Listens on port 0; the `host:port` the runtime is given.
    async fn start(self: &Arc<Self>) -> String {
        let routes = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, routes).await });
        addr.to_string()
    }

    /// One invocation, as API Gateway makes it; the function's answer, or its error.
    async fn invoke(&self, event: Value) -> Result<Value, Value> {
        let id = format!("req-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.answers.lock().unwrap().insert(id.clone(), tx);
        self.send.send((id, event)).unwrap();
        rx.await.expect("the function answers every invocation")
    }

    async fn answer(&self, id: &str, answer: Result<Value, Value>) {
        let mut all = self.all_running.subscribe();
        if tokio::time::timeout(Duration::from_secs(10), all.wait_for(|all| *all))
            .await
            .is_err()
        {
            self.all_running.send_replace(true);
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        let waiting = self.answers.lock().unwrap().remove(id);
        waiting.expect("an invocation handed out").send(answer).ok();
    }
}

async fn next(State(api): State<Arc<RuntimeApi>>) -> (HeaderMap, String) {
    let polling = api.polling.fetch_add(1, Ordering::SeqCst) + 1;
    api.most_polling.fetch_max(polling, Ordering::SeqCst);
    let mut all = api.all_polling.subscribe();
    if polling >= CONCURRENCY {
        api.all_polling.send_replace(true);
    }
    if tokio::time::timeout(Duration::from_secs(10), all.wait_for(|all| *all))
        .await
        .is_err()
    {
        // Never all at once: the test fails on `most_polling`; the rest need not wait.
        api.all_polling.send_replace(true);
    }
    let (id, event) = api.queue.lock().await.recv().await.unwrap();
    api.polling.fetch_sub(1, Ordering::SeqCst);
    let now = api.running.fetch_add(1, Ordering::SeqCst) + 1;
    api.most_running.fetch_max(now, Ordering::SeqCst);
    if now >= CONCURRENCY {
        api.all_running.send_replace(true);
    }
    let deadline = chrono::Utc::now().timestamp_millis() + 10_000;
    let mut headers = HeaderMap::new();
    headers.insert("lambda-runtime-aws-request-id", id.parse().unwrap());
    headers.insert("lambda-runtime-deadline-ms", deadline.into());
    headers.insert(
        "lambda-runtime-invoked-function-arn",
        "arn:aws:lambda:eu-west-1:123456789012:function:reserve:live"
            .parse()
            .unwrap(),
    );
    headers.insert(
        "lambda-runtime-trace-id",
        "Root=1-65f0a1b2-0123456789abcdef01234567".parse().unwrap(),
    );
    (headers, event.to_string())
}

async fn response(State(api): State<Arc<RuntimeApi>>, Path(id): Path<String>, body: Bytes) {
    api.answer(&id, Ok(serde_json::from_slice(&body).unwrap()))
        .await;
}

async fn error(State(api): State<Arc<RuntimeApi>>, Path(id): Path<String>, body: Bytes) {
    api.answer(
        &id,
        Err(serde_json::from_slice(&body).unwrap_or(Value::Null)),
    )
    .await;
}

/// The API Gateway (HTTP API, v2) event of a reserve, from the fixture the `it` tests use.
fn reserve_event(code: &str, customer: i64) -> Value {
    let mut event: Value =
        serde_json::from_str(include_str!("fixtures/apigw-v2-reserve.json")).unwrap();
    let path = format!("/vouchers/{code}/reservations");
    event["rawPath"] = json!(path);
    event["requestContext"]["http"]["path"] = json!(path);
    event["pathParameters"]["code"] = json!(code);
    let body =
        json!({"customerId": customer, "orderId": format!("o-{customer}"), "orderAmount": 500_000});
    event["body"] = json!(body.to_string());
    event["headers"]["content-length"] = json!(body.to_string().len().to_string());
    event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_instance_serves_concurrent_invocations_and_grants_exactly_the_limit() {
    let api = RuntimeApi::new();
    let endpoint = api.start().await;
    // What Lambda sets in a managed instance's execution environment. Set before anything else
    // runs: this binary holds this one test.
    for (name, value) in [
        ("AWS_LAMBDA_RUNTIME_API", endpoint.as_str()),
        ("AWS_LAMBDA_MAX_CONCURRENCY", &CONCURRENCY.to_string()),
        ("AWS_LAMBDA_FUNCTION_NAME", "reserve"),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "2048"),
        ("AWS_LAMBDA_FUNCTION_VERSION", "1"),
        // The function's logs (a line per request) would drown the test's output.
        ("RUST_LOG", "error"),
    ] {
        std::env::set_var(name, value);
    }
    // The function's metrics recorder first, as at a cold start.
    let metrics = shared::lambda::observe("reserve").unwrap();
    let app = TestApp::spawn_in(Mode::flash()).await;
    app.voucher("MANAGED", 40, json!({})).await;
    // The runtime loop runs beside the test, in its task: it never ends by itself.
    let serving = shared::lambda::serve(metrics, app.app.clone(), shared::http::Routes::Reserve);
    tokio::select! {
        stopped = serving => panic!("the runtime loop stopped: {stopped:?}"),
        () = invocations(&api, &app) => {}
    }
}

async fn invocations(api: &RuntimeApi, app: &TestApp) {
    // 200 customers at once for 40 uses: sixteen invocations run at a time in the one
    // environment, and exactly 40 win.
    let answers = futures::future::join_all(
        (1..=200).map(|customer| api.invoke(reserve_event("MANAGED", customer))),
    )
    .await;
    let mut by_status: HashMap<i64, usize> = HashMap::new();
    for answer in &answers {
        let answer = answer.as_ref().expect("no invocation fails");
        let status = answer["statusCode"].as_i64().unwrap();
        if status == 409 {
            let body: Value = serde_json::from_str(answer["body"].as_str().unwrap()).unwrap();
            assert_eq!(body["error"], "OUT_OF_STOCK", "{answer}");
        }
        *by_status.entry(status).or_default() += 1;
    }
    assert_eq!(by_status, HashMap::from([(201, 40), (409, 160)]));
    assert_eq!(api.most_polling.load(Ordering::SeqCst), CONCURRENCY);
    assert_eq!(api.most_running.load(Ordering::SeqCst), CONCURRENCY);
    assert_eq!(app.view("MANAGED").await["usedCount"], 40);

    // A winner's retry gets its reservation again, byte for byte, and takes nothing more.
    let winner = answers
        .iter()
        .map(|a| a.as_ref().unwrap())
        .find(|a| a["statusCode"] == 201)
        .unwrap();
    let body: Value = serde_json::from_str(winner["body"].as_str().unwrap()).unwrap();
    let customer = body["customerId"].as_i64().unwrap();
    let again = api
        .invoke(reserve_event("MANAGED", customer))
        .await
        .unwrap();
    assert_eq!(
        (&again["statusCode"], &again["body"]),
        (&winner["statusCode"], &winner["body"])
    );
    assert_eq!(app.view("MANAGED").await["usedCount"], 40);
}
