//! Money budgets (docs/ARCHITECTURE.md, "Budgets"): a voucher gives away at most its
//! `budgetAmount` in discounts over its active uses, whatever the concurrency and the order
//! sizes, and a use given back returns its discount exactly once. Standard vouchers (Postgres
//! decides; reserves written one by one, and grouped into batches over eight counter slots) and
//! flash-sale vouchers (the gate decides; mode A, and mode B on Kafka and on SQS).

crate::in_modes!(
    [
        standard = Mode::standard(),
        grouped = Mode::standard().slots(8).grouped(),
        flash = Mode::flash().slots(8).grouped(),
        flash_mode_b_kafka = Mode::flash().mode_b(Broker::Kafka),
        flash_mode_b_sqs = Mode::flash().slots(8).mode_b(Broker::Sqs),
    ]
    {
        a_budget_covering_100_of_500_concurrent_reserves_grants_exactly_100,
        percentage_discounts_of_random_orders_never_sum_past_the_budget,
        a_refusal_comes_only_when_the_budget_left_is_smaller_than_the_discount,
        a_released_use_gives_its_discount_back_exactly_once,
    }
);

crate::in_modes!(
    [
        flash_changes = Mode::flash().slots(8).grouped(),
        flash_mode_b_changes = Mode::flash().mode_b(Broker::Kafka),
    ]
    {
        a_flash_vouchers_budget_changes_in_the_gate_and_the_database,
    }
);

// A flash-sale voucher created without a budget cannot be given one: see
// a_flash_vouchers_budget_changes_in_the_gate_and_the_database.
crate::in_modes!(
    [
        standard_changes = Mode::standard(),
        grouped_changes = Mode::standard().slots(8).grouped(),
    ]
    {
        a_budget_changes_but_never_below_the_discounts_held,
    }
);

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::{error_of, wait_for, Mode, TestApp};

async fn spawn(mode: Mode) -> Arc<TestApp> {
    Arc::new(TestApp::spawn_in(mode).await)
}

/// Sends every reserve of `requests` (customer, order amount; order `o-{customer}`) at once;
/// the answers in request order, each granted discount or the refusal's error code.
async fn reserve_at_once(
    app: &Arc<TestApp>,
    code: &str,
    requests: &[(i64, i64)],
) -> Vec<Result<i64, String>> {
    let requests = requests
        .iter()
        .map(|&(customer, amount)| (customer, format!("o-{customer}"), amount))
        .collect();
    app.reserve_each(code, requests)
        .await
        .into_iter()
        .map(|(status, body)| match status {
            StatusCode::CREATED => {
                let body: Value = serde_json::from_str(&body).unwrap();
                Ok(body["discountAmount"].as_i64().unwrap())
            }
            StatusCode::CONFLICT => Err(error_of(&body)),
            other => panic!("unexpected {other}: {body}"),
        })
        .collect()
}

/// The view's budget agrees with the rows: `used` is the discounts of the active uses.
async fn assert_budget(app: &TestApp, code: &str, amount: i64, used: i64) {
    // Mode B: Postgres counts a use once its event has landed.
    app.settle(code).await;
    let view = app.view(code).await;
    assert_eq!(
        (
            &view["budgetAmount"],
            &view["budgetUsed"],
            &view["budgetRemaining"]
        ),
        (&json!(amount), &json!(used), &json!(amount - used)),
        "{view}"
    );
    let held: i64 = app
        .db
        .query_one(
            "SELECT COALESCE(sum(discount_amount), 0)::int8 FROM redemption
              WHERE voucher_code = $1 AND status IN (1, 2)",
            &[&code],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(held, used, "the rows' discounts");
}

async fn a_budget_covering_100_of_500_concurrent_reserves_grants_exactly_100(mode: Mode) {
    let app = spawn(mode).await;
    app.voucher(
        "BUDGET",
        500,
        json!({"discountAmount": 1_000, "budgetAmount": 100_000}),
    )
    .await;
    let requests: Vec<(i64, i64)> = (1..=500).map(|c| (c, 5_000)).collect();
    let answers = reserve_at_once(&app, "BUDGET", &requests).await;
    let granted = answers.iter().filter(|a| a.is_ok()).count();
    assert_eq!(granted, 100);
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert_eq!(refused, "BUDGET_EXHAUSTED");
    }
    assert_budget(&app, "BUDGET", 100_000, 100_000).await;
    let view = app.view("BUDGET").await;
    assert_eq!(view["usedCount"], 100, "{view}");
    // The count limit still has room; the money does not.
    let (status, body) = app.validate("BUDGET", 9_999, 5_000).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("BUDGET_EXHAUSTED")),
        "{body}"
    );
}

async fn percentage_discounts_of_random_orders_never_sum_past_the_budget(mode: Mode) {
    let app = spawn(mode).await;
    let budget = 50_000;
    app.voucher(
        "PERCENT",
        1_000,
        json!({"discountAmount": null, "discountPercent": 10, "budgetAmount": budget}),
    )
    .await;
    // Order amounts spread over 100..20,000 without a pattern the budget could line up with.
    let requests: Vec<(i64, i64)> = (1..=300).map(|c| (c, 100 + c * 7_919 % 19_901)).collect();
    let answers = reserve_at_once(&app, "PERCENT", &requests).await;
    let spent: i64 = answers.iter().filter_map(|a| a.as_ref().ok()).sum();
    assert!(spent <= budget, "{spent} given past {budget}");
    // Nothing is given back here, so the budget left only shrank: a refused reserve's discount
    // exceeded what was left when it was refused, which is at least what is left now.
    let left = budget - spent;
    let mut refused = 0;
    for ((_, amount), answer) in requests.iter().zip(&answers) {
        match answer {
            Ok(discount) => assert_eq!(*discount, amount / 10),
            Err(error) => {
                assert_eq!(error, "BUDGET_EXHAUSTED");
                assert!(amount / 10 > left, "{amount} refused with {left} left");
                refused += 1;
            }
        }
    }
    assert!(
        refused > 0,
        "the budget never ran out: the test proves nothing"
    );
    assert_budget(&app, "PERCENT", budget, spent).await;
}

async fn a_refusal_comes_only_when_the_budget_left_is_smaller_than_the_discount(mode: Mode) {
    let app = spawn(mode).await;
    app.voucher(
        "EXACT",
        10,
        json!({"discountAmount": null, "discountPercent": 10, "budgetAmount": 250, "perUserLimit": 10}),
    )
    .await;
    let reserve = async |order: &str, amount: i64| {
        let (status, body) = app.reserve("EXACT", 1, order, amount).await;
        (status, error_of(&body))
    };
    assert_eq!(reserve("a", 2_000).await.0, StatusCode::CREATED); // 200 of 250
    assert_eq!(
        reserve("b", 600).await,
        (StatusCode::CONFLICT, "BUDGET_EXHAUSTED".to_owned()),
        "60 does not fit in 50"
    );
    assert_eq!(
        reserve("c", 500).await.0,
        StatusCode::CREATED,
        "50 fits in 50"
    );
    assert_budget(&app, "EXACT", 250, 250).await;
    // A smaller discount still fits nowhere; a zero one always does.
    assert_eq!(reserve("d", 10).await.0, StatusCode::CONFLICT);
    assert_eq!(
        reserve("e", 9).await.0,
        StatusCode::CREATED,
        "10% of 9 is 0"
    );
    assert_budget(&app, "EXACT", 250, 250).await;
}

async fn a_released_use_gives_its_discount_back_exactly_once(mode: Mode) {
    let app = spawn(mode).await;
    app.voucher(
        "GIVE",
        10,
        json!({"discountAmount": 300, "budgetAmount": 1_000}),
    )
    .await;
    for customer in 1..=3 {
        let (status, body) = app
            .reserve("GIVE", customer, &format!("o-{customer}"), 1_000)
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    assert_eq!(app.confirm("GIVE", "o-2").await.0, StatusCode::OK);
    assert_budget(&app, "GIVE", 1_000, 900).await;
    assert_eq!(
        reserve_at_once(&app, "GIVE", &[(4, 1_000)]).await,
        vec![Err("BUDGET_EXHAUSTED".to_owned())]
    );

    // Ten releases of one order at once give back its 300 once.
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { app.release("GIVE", "o-1").await.0 })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), StatusCode::NO_CONTENT);
    }
    assert_budget(&app, "GIVE", 1_000, 600).await;
    // A confirmed use given back returns its discount too.
    assert_eq!(app.release("GIVE", "o-2").await.0, StatusCode::NO_CONTENT);
    assert_budget(&app, "GIVE", 1_000, 300).await;
    let answers = reserve_at_once(&app, "GIVE", &[(5, 1_000), (6, 1_000), (7, 1_000)]).await;
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 2);
    assert_budget(&app, "GIVE", 1_000, 900).await;
}

async fn a_budget_changes_but_never_below_the_discounts_held(mode: Mode) {
    let app = spawn(mode).await;
    app.voucher("LATER", 10, json!({"discountAmount": 100}))
        .await;
    for customer in 1..=3 {
        app.reserve("LATER", customer, &format!("o-{customer}"), 1_000)
            .await;
    }
    let view = app.view("LATER").await;
    assert!(view.get("budgetAmount").is_none(), "{view}");

    // A first budget counts the discounts already held.
    let before = app.snapshot().await;
    let (status, body) = app
        .patch_voucher("LATER", json!({"budgetAmount": 299, "active": false}))
        .await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("BUDGET_BELOW_USED")),
        "{body}"
    );
    assert!(body["message"].as_str().unwrap().contains("budgetAmount"));
    assert_eq!(app.snapshot().await, before, "nothing written");
    let (status, body) = app
        .patch_voucher("LATER", json!({"budgetAmount": 400}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_budget(&app, "LATER", 400, 300).await;
    let mut answers = reserve_at_once(&app, "LATER", &[(4, 1_000), (5, 1_000)]).await;
    answers.sort();
    assert_eq!(answers, vec![Ok(100), Err("BUDGET_EXHAUSTED".to_owned())]);

    // Lowered to exactly what is held: allowed; below: refused, nothing changed.
    let (status, _) = app
        .patch_voucher("LATER", json!({"budgetAmount": 400}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = app
        .patch_voucher("LATER", json!({"budgetAmount": 399}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_budget(&app, "LATER", 400, 400).await;

    // Removed, the counter keeps running; put back, it holds at once.
    let (status, body) = app
        .patch_voucher("LATER", json!({"budgetAmount": null}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.get("budgetAmount").is_none(), "{body}");
    app.reserve("LATER", 6, "o-6", 1_000).await;
    assert_eq!(app.release("LATER", "o-1").await.0, StatusCode::NO_CONTENT);
    let (status, body) = app
        .patch_voucher("LATER", json!({"budgetAmount": 400}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_budget(&app, "LATER", 400, 400).await;
}

#[tokio::test]
async fn the_database_refuses_sql_that_pushes_a_voucher_past_its_budget() {
    let app = TestApp::spawn().await;
    app.voucher(
        "SQL",
        10,
        json!({"discountAmount": 500, "budgetAmount": 1_000}),
    )
    .await;
    app.reserve("SQL", 1, "o-1", 1_000).await;
    app.reserve("SQL", 2, "o-2", 1_000).await;
    let err = app
        .db
        .execute(
            "UPDATE voucher_budget SET used = used + 1 WHERE voucher_code = 'SQL'",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        err.as_db_error().unwrap().constraint(),
        Some("voucher_budget_used_within_amount")
    );
    // A use the gate would have granted (an event) is revoked, not counted.
    let row = app
        .db
        .query_one(
            "SELECT outcome FROM fg_merge('SQL', 'forced', 3, 1::int2, 1000, 500, now(),
                                          now() + interval '1 minute', NULL, now(), true)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "REVOKED");
    // Without revoking, the refusal is raised and nothing is written.
    let err = app
        .db
        .execute(
            "SELECT fg_merge('SQL', 'forced-2', 4, 1::int2, 1000, 500, now(),
                             now() + interval '1 minute', NULL, now(), false)",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(err.as_db_error().unwrap().message(), "BUDGET_EXHAUSTED");
    assert_budget(&app, "SQL", 1_000, 1_000).await;
}

async fn a_flash_vouchers_budget_changes_in_the_gate_and_the_database(mode: Mode) {
    let app = spawn(mode).await;
    app.voucher(
        "FLASHB",
        20,
        json!({"discountAmount": 100, "budgetAmount": 1_000, "perUserLimit": 20}),
    )
    .await;
    let reserve_n = async |from: i64, n: i64| {
        let requests: Vec<(i64, i64)> = (from..from + n).map(|c| (c, 1_000)).collect();
        reserve_at_once(&app, "FLASHB", &requests)
            .await
            .iter()
            .filter(|a| a.is_ok())
            .count()
    };
    assert_eq!(reserve_n(1, 3).await, 3);
    let gate_budget = async || app.gate_meta("FLASHB", "budget").await;
    assert_eq!(gate_budget().await.as_deref(), Some("700"));

    // Below the discounts held: refused in the gate, nothing changed anywhere.
    app.settle("FLASHB").await;
    let before = app.snapshot().await;
    let (status, body) = app
        .patch_voucher("FLASHB", json!({"budgetAmount": 299}))
        .await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("BUDGET_BELOW_USED")),
        "{body}"
    );
    assert_eq!(app.snapshot().await, before, "nothing written");
    assert_eq!(gate_budget().await.as_deref(), Some("700"));

    // Lowered, then raised mid-sale: the gate grants exactly what is left each time.
    let (status, body) = app
        .patch_voucher("FLASHB", json!({"budgetAmount": 400}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(gate_budget().await.as_deref(), Some("100"));
    assert_eq!(reserve_n(10, 5).await, 1);
    let (status, body) = app
        .patch_voucher("FLASHB", json!({"budgetAmount": 600}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(reserve_n(20, 5).await, 2);
    assert_budget(&app, "FLASHB", 600, 600).await;
    assert_eq!(gate_budget().await.as_deref(), Some("0"));

    // Removed: the gate stops counting money; the count limit still holds. A budget cannot be
    // put back on a flash-sale voucher.
    let (status, body) = app
        .patch_voucher("FLASHB", json!({"budgetAmount": null}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(gate_budget().await, None);
    assert_eq!(reserve_n(30, 20).await, 14);
    let (status, body) = app
        .patch_voucher("FLASHB", json!({"budgetAmount": 5_000}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("budgetAmount"),
        "{body}"
    );
}

#[tokio::test]
async fn the_sweep_repairs_a_gates_budget_when_nothing_is_in_flight() {
    let app = TestApp::spawn_in(Mode::flash()).await;
    app.voucher(
        "DRIFTB",
        10,
        json!({"discountAmount": 100, "budgetAmount": 1_000}),
    )
    .await;
    for customer in 1..=2 {
        let (status, body) = app
            .reserve("DRIFTB", customer, &format!("o-{customer}"), 1_000)
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    wait_for(
        "the pending marks to clear",
        Duration::from_secs(5),
        async || app.gate_pending("DRIFTB").await == 0,
    )
    .await;
    assert_eq!(
        app.gate_meta("DRIFTB", "budget").await.as_deref(),
        Some("800")
    );
    // A gate that lost money (a release whose gate step failed, say) gets it back; the count
    // is right, so the money alone is the drift.
    app.set_gate_meta("DRIFTB", "budget", "300").await;
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(
        (report.drift_found, report.drift_repaired),
        (1, 1),
        "{report:?}"
    );
    assert_eq!(
        app.gate_meta("DRIFTB", "budget").await.as_deref(),
        Some("800")
    );
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.drift_found, 0, "repaired for good");
}
