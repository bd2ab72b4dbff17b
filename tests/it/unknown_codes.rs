//! Codes that do not exist: answered 404 from memory for `UNKNOWN_CODE_CACHE_MS`, so a flood
//! of mistyped or guessed codes during a sale does not reach Postgres twice per code; a code
//! created in the same process is found at once, one created elsewhere within the cache's age.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::harness::{self, error_of, path, TestApp};

#[tokio::test]
async fn an_unknown_code_is_answered_from_memory_while_postgres_is_away() {
    let app = TestApp::builder()
        .with_pg_proxy()
        .configure(|s| {
            s.database.timeout = Duration::from_millis(1000);
            s.reservations.unknown_code_ttl = Duration::from_secs(60);
        })
        .spawn()
        .await;
    let (status, body) = app.reserve("GUESSED", 1, "o1", 10).await;
    assert_eq!(
        (status, error_of(&body).as_str()),
        (StatusCode::NOT_FOUND, "VOUCHER_NOT_FOUND")
    );

    // Postgres unreachable: the code Postgres said does not exist is still answered, from
    // memory, by reserve and validate alike; a code never asked about needs Postgres.
    app.pg_proxy().set_up(false);
    let (status, body) = app.reserve("guessed", 2, "o2", 10).await;
    assert_eq!(
        (status, error_of(&body).as_str()),
        (StatusCode::NOT_FOUND, "VOUCHER_NOT_FOUND")
    );
    let (status, body) = app.validate("GUESSED", 3, 10).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("VOUCHER_NOT_FOUND"))
    );
    let (status, _) = app.reserve("NEVERASKED", 1, "o1", 10).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    // Created in this process: found at once, though its 404 was remembered a moment ago.
    app.pg_proxy().set_up(true);
    app.voucher("GUESSED", 5, json!({})).await;
    assert_eq!(
        app.reserve("GUESSED", 1, "o1", 10).await.0,
        StatusCode::CREATED
    );
    // A campaign's codes too, and every unknown code with them.
    let (status, _) = app.reserve("PRINTED-1", 1, "o1", 10).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let now = chrono::Utc::now();
    let (status, _) = app
        .create_campaign(json!({
            "discountAmount": 100,
            "startsAt": now - chrono::Duration::hours(1),
            "endsAt": now + chrono::Duration::hours(1),
            "codes": ["PRINTED-1", "PRINTED-2"],
        }))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        app.reserve("PRINTED-1", 1, "o1", 10).await.0,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn a_code_created_in_another_process_is_found_within_the_cache_age() {
    let app = TestApp::spawn().await;
    let db_url = app.database_url();
    let age = Duration::from_secs(3);
    let other = harness::serve_with(move |s| {
        s.database.url = db_url.into();
        s.reservations.unknown_code_ttl = age;
    })
    .await;
    let reserve = |order: &'static str| {
        let (http, other) = (app.http.clone(), other.clone());
        async move {
            http.post(format!("{other}{}", path::reservations("LATECOMER")))
                .header("content-type", "application/json")
                .body(format!(
                    r#"{{"customerId":1,"orderId":"{order}","orderAmount":10}}"#
                ))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(reserve("o1").await, StatusCode::NOT_FOUND);
    app.voucher("LATECOMER", 5, json!({})).await;
    // The other process remembers the 404 for the cache's age, no longer.
    assert_eq!(reserve("o1").await, StatusCode::NOT_FOUND);
    // Only reserve and validate trust it: an operator's change of the code, within that age,
    // asks Postgres and finds it.
    let patched = app
        .http
        .patch(format!("{other}/vouchers/LATECOMER"))
        .header("content-type", "application/json")
        .body(r#"{"name":"late"}"#)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(patched, StatusCode::OK);
    tokio::time::sleep(age).await;
    assert_eq!(reserve("o1").await, StatusCode::CREATED);
}
