//! The HTTP contract (README.md, "API") against a real server and a real Postgres.
//! Every test runs on its own fresh database.

// Each contract test runs eight times: on standard vouchers (Postgres decides) and on
// flash-sale vouchers (the Redis gate decides, mode A writes the winners to Postgres), each
// with the limit in one counter slot, split across eight, and split across eight with the
// writes grouped into batches (group commit); and on flash-sale vouchers in mode B, the
// winners travelling as events on Kafka, and on SQS. Mode B reads without waiting for events to
// land, as a client does (the voucher view counts the uses in flight, a reservation reads back
// from the gate); only [`TestApp::counts`], which reads Postgres' tables directly, waits for
// them ([`TestApp::settle`]).
crate::in_modes!(
    [
        standard = Mode::standard(),
        standard_slots = Mode::standard().slots(8),
        standard_grouped = Mode::standard().slots(8).grouped(),
        flash = Mode::flash(),
        flash_slots = Mode::flash().slots(8),
        flash_grouped = Mode::flash().slots(8).grouped(),
        flash_mode_b_kafka = Mode::flash().slots(8).mode_b(Broker::Kafka),
        flash_mode_b_sqs = Mode::flash().slots(8).mode_b(Broker::Sqs),
    ]
    {
        two_hundred_concurrent_reserves_for_ten_uses,
        two_thousand_mixed_reserves_with_retries_and_per_user_limit,
        the_same_request_fifty_times_is_one_use_with_identical_answers,
        eligibility_and_not_found_answers,
        release_returns_the_use_and_confirm_and_release_are_idempotent,
        a_reservation_past_expiry_but_not_swept_can_still_be_confirmed,
        bad_input_gets_a_4xx_naming_the_problem_and_writes_nothing,
        a_retry_with_another_order_amount_is_refused_not_given_the_first_discount,
    }
);

use std::collections::HashMap;
use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::{self, error_of, path, Mode, Request, TestApp};

async fn two_hundred_concurrent_reserves_for_ten_uses(mode: Mode) {
    let app = Arc::new(TestApp::spawn_in(mode).await);
    app.voucher("TEN", 10, json!({})).await;
    let requests = (1..=200).map(|i| (i, format!("order-{i}"))).collect();
    let answers = app.reserve_all("TEN", requests, 500_000).await;

    let created = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::CREATED)
        .count();
    let sold_out = answers
        .iter()
        .filter(|(s, b)| *s == StatusCode::CONFLICT && error_of(b) == "OUT_OF_STOCK")
        .count();
    assert_eq!(created, 10, "{answers:?}");
    assert_eq!(sold_out, 190);
    let view = app.view("TEN").await;
    assert_eq!(view["usedCount"], 10);
    assert_eq!(view["remaining"], 0);
    assert_eq!(view["reservedCount"], 10);
    let counts = app.counts("TEN").await;
    assert_eq!(
        (
            counts.used_count,
            counts.active_rows,
            counts.customer_counter_sum
        ),
        (10, 10, 10)
    );
}

async fn two_thousand_mixed_reserves_with_retries_and_per_user_limit(mode: Mode) {
    let app = Arc::new(TestApp::spawn_in(mode).await);
    app.voucher("MIXED", 100, json!({"perUserLimit": 2})).await;

    // 1,500 first sends from 500 customers, then 500 re-sends of earlier orders, shuffled
    // deterministically so retries race their originals.
    let mut requests: Vec<(i64, String)> = (0..1500)
        .map(|k| (1 + (k * 7919 % 500), format!("o-{k}")))
        .collect();
    for j in 0..500 {
        let again = requests[(j * 37) % 1500].clone();
        requests.push(again);
    }
    let mut seed: u64 = 42;
    for i in (1..requests.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        requests.swap(i, (seed >> 33) as usize % (i + 1));
    }
    let answers = app.reserve_all("MIXED", requests.clone(), 500_000).await;

    let mut by_order: HashMap<&str, Vec<&(StatusCode, String)>> = HashMap::new();
    for ((_, order), answer) in requests.iter().zip(&answers) {
        by_order.entry(order.as_str()).or_default().push(answer);
    }
    for (order, got) in &by_order {
        assert!(
            got.iter().all(|a| *a == got[0]),
            "{order} answered differently: {got:?}"
        );
        let (status, body) = got[0];
        assert!(
            *status == StatusCode::CREATED
                || (*status == StatusCode::CONFLICT
                    && ["OUT_OF_STOCK", "ALREADY_USED"].contains(&error_of(body).as_str())),
            "{order}: {status} {body}"
        );
    }
    let winners = by_order
        .values()
        .filter(|g| g[0].0 == StatusCode::CREATED)
        .count();
    assert_eq!(winners, 100);
    let counts = app.counts("MIXED").await;
    assert_eq!(counts.used_count, 100);
    assert_eq!(counts.active_rows, 100);
    assert_eq!(counts.customer_counter_sum, 100);
    assert!(counts.max_customer_rows <= 2, "{counts:?}");
    assert!(counts.max_customer_counter <= 2, "{counts:?}");
    assert_eq!(app.view("MIXED").await["remaining"], 0);
}

async fn the_same_request_fifty_times_is_one_use_with_identical_answers(mode: Mode) {
    let app = Arc::new(TestApp::spawn_in(mode).await);
    app.voucher("SAME", 5, json!({})).await;
    let answers = app
        .reserve_all("SAME", vec![(7, "order-7".to_owned()); 50], 500_000)
        .await;
    assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
    assert_eq!(answers[0].0, StatusCode::CREATED);
    let body: Value = serde_json::from_str(&answers[0].1).unwrap();
    assert_eq!(body["status"], "RESERVED");
    assert_eq!(body["customerId"], 7);
    assert_eq!(app.counts("SAME").await.used_count, 1);

    // A later retry, after commit, is still byte-for-byte the same.
    assert_eq!(app.reserve("SAME", 7, "order-7", 500_000).await, answers[0]);

    let (status, body) = app.reserve("SAME", 8, "order-7", 500_000).await;
    assert_eq!(
        (status, error_of(&body).as_str()),
        (StatusCode::CONFLICT, "ORDER_CONFLICT")
    );
    assert_eq!(app.counts("SAME").await.used_count, 1);
}

async fn eligibility_and_not_found_answers(mode: Mode) {
    let app = TestApp::spawn_in(mode).await;
    let now = chrono::Utc::now();
    app.voucher(
        "LATER",
        5,
        json!({"startsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
                                   "endsAt": (now + chrono::Duration::hours(2)).to_rfc3339()}),
    )
    .await;
    app.voucher(
        "OVER",
        5,
        json!({"startsAt": (now - chrono::Duration::days(2)).to_rfc3339(),
                                  "endsAt": (now - chrono::Duration::days(1)).to_rfc3339()}),
    )
    .await;
    app.voucher("BIG", 5, json!({"minOrderAmount": 1000})).await;

    for (code, amount, reason) in [
        ("LATER", 5000, "NOT_STARTED"),
        ("OVER", 5000, "EXPIRED"),
        ("BIG", 999, "MIN_ORDER_AMOUNT"),
    ] {
        let (status, body) = app.reserve(code, 1, "o1", amount).await;
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{code}");
        assert_eq!(body["error"], "NOT_ELIGIBLE");
        assert_eq!(body["reason"], reason);
        assert!(body["message"].as_str().unwrap().len() > 5);
    }
    assert_eq!(
        app.reserve("BIG", 1, "o1", 1000).await.0,
        StatusCode::CREATED
    );

    let (status, body) = app.reserve("NOPE", 1, "o1", 1000).await;
    assert_eq!(
        (status, error_of(&body).as_str()),
        (StatusCode::NOT_FOUND, "VOUCHER_NOT_FOUND")
    );
    let (status, body) = app.get_voucher("NOPE").await;
    assert_eq!(
        (status, body["error"].as_str().unwrap()),
        (StatusCode::NOT_FOUND, "VOUCHER_NOT_FOUND")
    );
    // In mode B too, with BIG's events in flight: the gate holds every order it granted, so an
    // order it does not know is not found at once.
    for (route, (status, body)) in [
        ("get", app.get_reservation("BIG", "missing").await),
        ("confirm", app.confirm("BIG", "missing").await),
        ("release", app.release("BIG", "missing").await),
    ] {
        assert_eq!(status, StatusCode::NOT_FOUND, "{route}");
        assert_eq!(body["error"], "RESERVATION_NOT_FOUND");
    }

    // Codes are case-insensitive and stored upper-case.
    let view = app.voucher("Summer-Sale", 3, json!({})).await;
    assert_eq!(view["code"], "SUMMER-SALE");
    let (status, _) = app.reserve("summer-sale", 1, "o1", 1).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        app.reserve("SUMMER-sale", 1, "o1", 1).await.0,
        StatusCode::CREATED
    );
    assert_eq!(app.view("sUmMeR-sAlE").await["usedCount"], 1);
    let (status, body) = app
        .create_voucher(
            json!({"code": "summer-SALE", "discountAmount": 1, "totalLimit": 1,
                   "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2030-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str().unwrap()),
        (StatusCode::CONFLICT, "VOUCHER_EXISTS")
    );
}

async fn release_returns_the_use_and_confirm_and_release_are_idempotent(mode: Mode) {
    let app = TestApp::spawn_in(mode).await;
    app.voucher("ONE", 1, json!({})).await;
    assert_eq!(app.reserve("ONE", 1, "o1", 10).await.0, StatusCode::CREATED);
    let (status, body) = app.reserve("ONE", 1, "o2", 10).await;
    assert_eq!(
        (status, error_of(&body).as_str()),
        (StatusCode::CONFLICT, "ALREADY_USED")
    );
    let (status, body) = app.reserve("ONE", 2, "o3", 10).await;
    assert_eq!(
        (status, error_of(&body).as_str()),
        (StatusCode::CONFLICT, "OUT_OF_STOCK")
    );

    for _ in 0..2 {
        // Raw, not parsed: the 204 carries no body at all.
        let (status, body) = app
            .send(&Request::delete(path::reservation("ONE", "o1")))
            .await;
        assert_eq!((status, body.as_str()), (StatusCode::NO_CONTENT, ""));
    }
    let view = app.view("ONE").await;
    assert_eq!(
        (view["usedCount"].as_i64(), view["remaining"].as_i64()),
        (Some(0), Some(1))
    );
    let (status, body) = app.reserve("ONE", 1, "o1", 10).await;
    assert_eq!(
        (status, error_of(&body).as_str()),
        (StatusCode::CONFLICT, "RESERVATION_RELEASED")
    );
    let (status, body) = app.confirm("ONE", "o1").await;
    assert_eq!(
        (status, body["error"].as_str().unwrap()),
        (StatusCode::CONFLICT, "RESERVATION_RELEASED")
    );

    // The same customer comes back with a new orderId.
    assert_eq!(app.reserve("ONE", 1, "o2", 10).await.0, StatusCode::CREATED);
    // Raw, not parsed: the second confirm answers the first one's bytes.
    let confirm = Request::post_empty(path::confirm("ONE", "o2"));
    let first = app.send(&confirm).await;
    let second = app.send(&confirm).await;
    assert_eq!(first, second);
    assert_eq!(first.0, StatusCode::OK);
    let body: Value = serde_json::from_str(&first.1).unwrap();
    assert_eq!(
        body,
        // 100,000 off an order of 10: never more off than the order.
        json!({"orderId": "o2", "status": "CONFIRMED", "discountAmount": 10})
    );
    let view = app.view("ONE").await;
    assert_eq!(
        (
            view["confirmedCount"].as_i64(),
            view["reservedCount"].as_i64()
        ),
        (Some(1), Some(0))
    );

    // Cancelled after payment: DELETE of a CONFIRMED reservation releases it.
    assert_eq!(app.release("ONE", "o2").await.0, StatusCode::NO_CONTENT);
    let (_, r) = app.get_reservation("ONE", "o2").await;
    assert_eq!(r["status"], "RELEASED");
    let counts = app.counts("ONE").await;
    assert_eq!(
        (
            counts.used_count,
            counts.active_rows,
            counts.customer_counter_sum
        ),
        (0, 0, 0)
    );
    let reason: String = app
        .db
        .query_one(
            "SELECT release_reason FROM redemption WHERE order_id = 'o2'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(reason, "CANCELLED");
}

async fn a_reservation_past_expiry_but_not_swept_can_still_be_confirmed(mode: Mode) {
    let app = TestApp::spawn_in(mode).await;
    app.voucher("SHORT", 2, json!({"reservationTtlSeconds": 1}))
        .await;
    let (status, body) = app.reserve("SHORT", 1, "o1", 10).await;
    assert_eq!(status, StatusCode::CREATED);
    let reserved: Value = serde_json::from_str(&body).unwrap();
    // A fixed wait on purpose: the clock passing the 1 s TTL is what this test is about.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let (_, view) = app.get_reservation("SHORT", "o1").await;
    assert_eq!(view["status"], "RESERVED");
    assert_eq!(view["expiresAt"], reserved["expiresAt"]);
    let (status, body) = app.confirm("SHORT", "o1").await;
    assert_eq!(
        (status, body["status"].as_str().unwrap()),
        (StatusCode::OK, "CONFIRMED")
    );
    assert_eq!(app.counts("SHORT").await.used_count, 1);
}

async fn bad_input_gets_a_4xx_naming_the_problem_and_writes_nothing(mode: Mode) {
    let app = TestApp::spawn_in(mode).await;
    app.voucher("GOOD", 5, json!({})).await;
    let before = app.snapshot().await;

    let reserve = |body: &str| Request::post(path::reservations("GOOD"), body);
    let huge = format!(
        "{{\"customerId\":1,\"orderId\":\"o\",\"orderAmount\":1,\"pad\":\"{}\"}}",
        // Well past the 16 KiB limit (a body of a megabyte, sent slowly, is tests/it/server.rs's:
        // the server reads it to the end before its 413).
        "x".repeat(64 << 10)
    );
    let long_order = format!(
        r#"{{"customerId":1,"orderId":"{}","orderAmount":1}}"#,
        "o".repeat(65)
    );
    let order = r#"{"customerId":1,"orderId":"o","orderAmount":1}"#;
    // A valid voucher with `patch` applied (a null removes the field).
    let voucher = |patch: Value| {
        let mut v = json!({"code": "NEW", "discountAmount": 1, "totalLimit": 5,
                           "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2030-01-01T00:00:00Z"});
        for (k, val) in patch.as_object().unwrap() {
            if val.is_null() {
                v.as_object_mut().unwrap().remove(k);
            } else {
                v[k] = val.clone();
            }
        }
        Request::post(path::vouchers(), v.to_string())
    };
    let code_33 = "C".repeat(33);
    let invalid = (400, "INVALID_REQUEST");
    // (case, request, (status, error code), a word the message must contain)
    #[rustfmt::skip]
    let cases: Vec<(&str, Request, (u16, &str), &str)> = vec![
        ("reserve: truncated JSON", reserve("{"), invalid, "JSON"),
        ("reserve: empty body", reserve(""), invalid, "JSON"),
        ("reserve: an array", reserve("[]"), invalid, "JSON"),
        ("reserve: no customerId", reserve(r#"{"orderId":"o","orderAmount":1}"#), invalid, "customerId"),
        ("reserve: no orderId", reserve(r#"{"customerId":1,"orderAmount":1}"#), invalid, "orderId"),
        ("reserve: no orderAmount", reserve(r#"{"customerId":1,"orderId":"o"}"#), invalid, "orderAmount"),
        ("reserve: customerId a string", reserve(r#"{"customerId":"1","orderId":"o","orderAmount":1}"#), invalid, "customerId"),
        ("reserve: customerId negative", reserve(r#"{"customerId":-1,"orderId":"o","orderAmount":1}"#), invalid, "customerId"),
        ("reserve: customerId zero", reserve(r#"{"customerId":0,"orderId":"o","orderAmount":1}"#), invalid, "customerId"),
        ("reserve: customerId past i64", reserve(r#"{"customerId":99999999999999999999,"orderId":"o","orderAmount":1}"#), invalid, "customerId"),
        ("reserve: customerId a fraction", reserve(r#"{"customerId":1.5,"orderId":"o","orderAmount":1}"#), invalid, "customerId"),
        ("reserve: orderAmount negative", reserve(r#"{"customerId":1,"orderId":"o","orderAmount":-5}"#), invalid, "orderAmount"),
        ("reserve: orderAmount past the most", reserve(r#"{"customerId":1,"orderId":"o","orderAmount":1000000000000001}"#), invalid, "orderAmount"),
        ("reserve: orderAmount 1e30", reserve(r#"{"customerId":1,"orderId":"o","orderAmount":1e30}"#), invalid, "orderAmount"),
        ("reserve: orderId with a space", reserve(r#"{"customerId":1,"orderId":"a b","orderAmount":1}"#), invalid, "orderId"),
        ("reserve: orderId with a slash", reserve(r#"{"customerId":1,"orderId":"a/b","orderAmount":1}"#), invalid, "orderId"),
        ("reserve: orderId of 65 characters", reserve(&long_order), invalid, "orderId"),
        ("reserve: orderId a number", reserve(r#"{"customerId":1,"orderId":12,"orderAmount":1}"#), invalid, "orderId"),
        ("reserve: body past 16 KiB", reserve(&huge), (413, "INVALID_REQUEST"), "16384"),
        ("reserve: code with a $", Request::post(path::reservations("bad$code"), order), invalid, "code"),
        ("reserve: code of 33 characters", Request::post(path::reservations(&code_33), order), invalid, "code"),
        ("confirm: orderId with a space", Request::post_empty(path::confirm("GOOD", "bad%20id")), invalid, "orderId"),
        ("release: orderId with a #", Request::delete(path::reservation("GOOD", "bad%23id")), invalid, "orderId"),
        ("get voucher: code not ASCII", Request::get(path::voucher("b%C3%A9")), invalid, "code"),
        ("create: totalLimit zero", voucher(json!({"totalLimit": 0})), invalid, "totalLimit"),
        ("create: totalLimit past the most", voucher(json!({"totalLimit": 1_000_000_001})), invalid, "totalLimit"),
        ("create: totalLimit a string", voucher(json!({"totalLimit": "10"})), invalid, "totalLimit"),
        ("create: no totalLimit", voucher(json!({"totalLimit": null})), invalid, "totalLimit"),
        ("create: discountAmount negative", voucher(json!({"discountAmount": -1})), invalid, "discountAmount"),
        ("create: perUserLimit zero", voucher(json!({"perUserLimit": 0})), invalid, "perUserLimit"),
        ("create: reservationTtlSeconds zero", voucher(json!({"reservationTtlSeconds": 0})), invalid, "reservationTtlSeconds"),
        ("create: reservationTtlSeconds past a week", voucher(json!({"reservationTtlSeconds": 604801})), invalid, "reservationTtlSeconds"),
        ("create: budgetAmount negative", voucher(json!({"budgetAmount": -1})), invalid, "budgetAmount"),
        ("create: budgetAmount past the most", voucher(json!({"budgetAmount": 1_000_000_000_000_001_i64})), invalid, "budgetAmount"),
        ("create: budgetAmount a word", voucher(json!({"budgetAmount": "lots"})), invalid, "budgetAmount"),
        ("create: counterSlots zero", voucher(json!({"counterSlots": 0})), invalid, "counterSlots"),
        ("create: counterSlots past 64", voucher(json!({"counterSlots": 65})), invalid, "counterSlots"),
        ("create: counterSlots a word", voucher(json!({"counterSlots": "eight"})), invalid, "counterSlots"),
        ("create: more counterSlots than uses", voucher(json!({"totalLimit": 3, "counterSlots": 4})), invalid, "counterSlots"),
        ("create: endsAt in the past", voucher(json!({"endsAt": "2025-01-01T00:00:00Z"})), invalid, "endsAt"),
        ("create: startsAt not a time", voucher(json!({"startsAt": "yesterday"})), invalid, "startsAt"),
        ("create: code with a space", voucher(json!({"code": "bad code"})), invalid, "code"),
        ("create: flashSale a string", voucher(json!({"flashSale": "yes"})), invalid, "flashSale"),
        ("create: unknown field", voucher(json!({"totalLimitt": 3})), invalid, "totalLimitt"),
        ("unknown route", Request::get("/nope"), (404, "NOT_FOUND"), "/nope"),
        ("PUT on reservations", Request::raw("PUT", path::reservations("GOOD"), "{}"), (405, "METHOD_NOT_ALLOWED"), "PUT"),
        ("GET on confirm", Request::get(path::confirm("GOOD", "o1")), (405, "METHOD_NOT_ALLOWED"), "GET"),
    ];
    for (case, request, (status, error), needle) in cases {
        let (got, text) = app.send(&request).await;
        let shown = &text[..text.len().min(300)];
        assert_eq!(got.as_u16(), status, "{case} ({request}): {shown}");
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{case} ({request}): not JSON: {shown}"));
        assert_eq!(v["error"], error, "{case} ({request}): {shown}");
        let message = v["message"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{case} ({request}): message {message:?} should name {needle:?}"
        );
    }
    assert_eq!(
        app.snapshot().await,
        before,
        "a rejected request changed the database"
    );
}

#[tokio::test]
async fn postgres_refuses_what_would_over_allocate() {
    let app = TestApp::spawn().await;
    app.voucher("NET", 3, json!({})).await;
    for sql in [
        "UPDATE voucher_slot SET used = cap + 1 WHERE voucher_code = 'NET'",
        "UPDATE voucher_slot SET used = -1 WHERE voucher_code = 'NET'",
    ] {
        let err = app.db.execute(sql, &[]).await.unwrap_err();
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION),
            "{sql}"
        );
    }
    // Fill it through the API, then try to push past it directly.
    for i in 0..3 {
        assert_eq!(
            app.reserve("NET", 100 + i, &format!("o{i}"), 1).await.0,
            StatusCode::CREATED
        );
    }
    let err = app
        .db
        .execute(
            "UPDATE voucher_slot SET used = used + 1 WHERE voucher_code = 'NET'",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION)
    );
    assert_eq!(app.counts("NET").await.used_count, 3);
}

/// The document served is the one generated from the code, which is the committed one.
#[tokio::test]
async fn the_server_serves_the_generated_openapi_document() {
    let app = TestApp::spawn().await;
    let (status, body) = app.openapi().await;
    assert_eq!(status, StatusCode::OK);
    let generated: Value = serde_json::from_str(shared::http::openapi::json()).unwrap();
    assert_eq!(body, generated);
    let committed: Value = serde_json::from_str(include_str!("../../docs/openapi.json")).unwrap();
    assert_eq!(body, committed);
    assert_eq!(
        body["paths"]["/vouchers/{code}/reservations"]["post"]["operationId"],
        "reserveVoucher"
    );
}

#[tokio::test]
async fn health_reports_its_dependencies() {
    let app = TestApp::spawn().await;
    let (status, body) = app.health().await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["postgres"], "up");
    let (status, body) = app.live().await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );

    // Postgres unreachable: 503, quickly.
    let dead =
        harness::serve_with(|s| s.database.url = "postgres://postgres@127.0.0.1:1/none".into())
            .await;
    let started = std::time::Instant::now();
    let resp = app
        .http
        .get(format!("{dead}{}", path::health()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["postgres"], "down");
    let resp = app
        .http
        .post(format!("{dead}{}", path::reservations("ANY")))
        .header("content-type", "application/json")
        .body(r#"{"customerId":1,"orderId":"o","orderAmount":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// A body not declared as JSON never reaches a handler: 415 naming the content type, nothing
/// written. (A browser sends a form or `text/plain` cross-site without asking first; a JSON
/// content type it must ask for.) A declared charset is fine.
#[tokio::test]
async fn a_body_not_declared_as_json_gets_415_and_writes_nothing() {
    let app = TestApp::spawn().await;
    app.voucher("CT", 5, json!({})).await;
    let before = app.snapshot().await;
    let order = r#"{"customerId":1,"orderId":"o","orderAmount":1}"#;
    let create = json!({"code": "NEW", "discountAmount": 1, "totalLimit": 5,
                        "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2030-01-01T00:00:00Z"})
    .to_string();
    let validate = r#"{"customerId":1,"orderAmount":1}"#;
    let bodies = [
        (reqwest::Method::POST, path::reservations("CT"), order),
        (reqwest::Method::POST, path::vouchers(), create.as_str()),
        (reqwest::Method::POST, path::validations("CT"), validate),
        (
            reqwest::Method::PATCH,
            path::voucher("CT"),
            r#"{"active":false}"#,
        ),
    ];
    for (method, path, body) in &bodies {
        for content_type in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            None,
        ] {
            let mut req = app
                .http
                .request(method.clone(), app.url(path))
                .body(body.to_string());
            if let Some(ct) = content_type {
                req = req.header("content-type", ct);
            }
            let resp = req.send().await.unwrap();
            let status = resp.status();
            let text = resp.text().await.unwrap();
            let case = format!("{method} {path} as {content_type:?}");
            assert_eq!(
                (status, error_of(&text).as_str()),
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UNSUPPORTED_MEDIA_TYPE"),
                "{case}: {text}"
            );
            assert!(text.contains("application/json"), "{case}: {text}");
        }
    }
    assert_eq!(app.snapshot().await, before, "nothing written");
    let resp = app
        .http
        .post(app.url(&path::reservations("CT")))
        .header("content-type", "application/json; charset=utf-8")
        .body(order)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
}

/// A retry is the same request again (as Stripe treats an idempotency key reused with other
/// parameters). On main a granted order retried with another `orderAmount` got the first
/// discount back (201), past `minOrderAmount` and the discount <= order rule, and in mode B its
/// event was then dead-lettered. It is 409 ORDER_AMOUNT_MISMATCH, writes nothing, and the same
/// body still replays; also from the sold-out short cut.
async fn a_retry_with_another_order_amount_is_refused_not_given_the_first_discount(mode: Mode) {
    let app = TestApp::spawn_in(mode).await;
    app.voucher(
        "SAMEBODY",
        1,
        json!({"discountAmount": 500, "minOrderAmount": 1_000}),
    )
    .await;
    let (status, first) = app.reserve("SAMEBODY", 1, "o1", 2_000).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    // Sold out now: the short cut answers retries from what the gate holds.
    assert_eq!(
        app.reserve("SAMEBODY", 2, "o2", 2_000).await.0,
        StatusCode::CONFLICT
    );
    for amount in [100, 2_001] {
        let (status, body) = app.reserve("SAMEBODY", 1, "o1", amount).await;
        assert_eq!(status, StatusCode::CONFLICT, "orderAmount {amount}: {body}");
        assert_eq!(error_of(&body), "ORDER_AMOUNT_MISMATCH", "{body}");
    }
    assert_eq!(
        app.reserve("SAMEBODY", 1, "o1", 2_000).await,
        (StatusCode::CREATED, first),
        "the same body still replays"
    );
    let view = app.view("SAMEBODY").await;
    assert_eq!(view["usedCount"], 1, "{view}");
}
