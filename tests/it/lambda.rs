//! The Lambda entry path: an API Gateway HTTP API (v2) event, as kept in `tests/fixtures`, goes
//! through `lambda_http`'s conversion into the router a function mounts (`Routes::Reserve`).

use http_body_util::BodyExt;
use lambda_http::request::LambdaRequest;
use serde_json::{json, Value};
use shared::events::sqs::handle_batch;
use shared::http::{router, Routes};
use tower::ServiceExt;

use crate::harness::TestApp;

const RESERVE_EVENT: &str = include_str!("../fixtures/apigw-v2-reserve.json");

async fn invoke(routes: Routes, app: &TestApp, event: &str) -> (u16, Value) {
    let event: LambdaRequest =
        serde_json::from_str(event).expect("fixture is an API Gateway event");
    let request: lambda_http::Request = event.into();
    let response = router(app.app.clone(), routes)
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn reserve_function_answers_an_api_gateway_v2_event() {
    let app = TestApp::spawn().await;
    app.voucher("LAMBDA-SALE", 2, json!({})).await;

    let (status, first) = invoke(Routes::Reserve, &app, RESERVE_EVENT).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["orderId"], "order-42");
    assert_eq!(first["customerId"], 42);
    assert_eq!(first["status"], "RESERVED");

    // The same event delivered again (a client retry) is the same answer and no second use.
    let (status, again) = invoke(Routes::Reserve, &app, RESERVE_EVENT).await;
    assert_eq!((status, &again), (201, &first));
    assert_eq!(app.view("LAMBDA-SALE").await["usedCount"], 1);
}

#[tokio::test]
async fn a_function_serves_only_its_own_family() {
    let app = TestApp::spawn().await;
    app.voucher("LAMBDA-SALE", 2, json!({})).await;
    let (status, body) = invoke(Routes::Confirm, &app, RESERVE_EVENT).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"], "NOT_FOUND");
    assert_eq!(app.view("LAMBDA-SALE").await["usedCount"], 0);
}

/// The SQS batch kept for the `cargo lambda watch` smoke test is one the consumer accepts, on
/// the voucher the smoke test creates (its rules are what the event is checked against).
#[tokio::test]
async fn consumer_lands_the_sqs_fixture_event() {
    let app = TestApp::spawn().await;
    let smoke_terms = json!({
        "discountAmount": 10_000,
        "startsAt": "2020-01-01T00:00:00Z",
        "endsAt": "2099-01-01T00:00:00Z",
    });
    app.voucher("SMOKE-EVENTS", 5, smoke_terms).await;
    let batch = serde_json::from_str(include_str!("../fixtures/sqs-voucher-reserved.json"))
        .expect("fixture is an SQS event");
    let answer = handle_batch(app.app.consumer(), None, batch).await;
    assert!(answer.batch_item_failures.is_empty());
    let (status, row) = app.get_reservation("SMOKE-EVENTS", "smoke-event-1").await;
    assert_eq!(status, 200, "{row}");
    assert_eq!(row["status"], "RESERVED");
    assert_eq!(row["customerId"], 7);
    assert_eq!(app.view("SMOKE-EVENTS").await["usedCount"], 1);
}

/// A Lambda environment frozen between invocations finds, when it thaws, that RDS Proxy and
/// ElastiCache closed its idle connections. The first request after that succeeds, on a new
/// connection: for a standard voucher (Postgres), a flash one (Redis and Postgres), and reads.
#[tokio::test]
async fn after_idle_connections_were_closed_the_first_request_succeeds() {
    let app = TestApp::builder()
        .with_pg_proxy()
        .with_redis_proxy()
        .spawn()
        .await;
    app.voucher("THAW", 10, json!({})).await;
    app.voucher("THAWF", 10, json!({"flashSale": true})).await;
    for (i, code) in ["THAW", "THAWF"].into_iter().enumerate() {
        let order = format!("warm-{i}");
        assert_eq!(app.reserve(code, 1, &order, 10).await.0, 201);
    }
    for round in 0..3 {
        // Frozen, and the dependencies closed what sat idle.
        app.pg_proxy().close_connections();
        app.redis_proxy().close_connections();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        for code in ["THAW", "THAWF"] {
            let (status, body) = app.reserve(code, 2 + round, &format!("o{round}"), 10).await;
            assert_eq!(status, 201, "{code}, round {round}: {body}");
            let (status, body) = app.confirm(code, &format!("o{round}")).await;
            assert_eq!(status, 200, "{code}, round {round}: {body}");
        }
    }
}
