//! Campaigns of unique codes (docs/ARCHITECTURE.md, "Campaigns"): each code is a voucher, and
//! a reserve wins only if the code, the customer and the campaign all have room; the
//! campaign's total, per-user limit and budget hold whatever the concurrency, and a use given
//! back returns its use and discount exactly once. Reserves written one by one, and grouped
//! into batches; standard, and flash-sale (the campaign's gate decides; its winners are written
//! by group commit in mode A, carried by events keyed by the campaign in mode B,
//! docs/ARCHITECTURE.md, "Campaigns in the gate").

crate::in_modes!(
    [
        standard = Mode::standard(),
        grouped = Mode::standard().grouped(),
        flash = Mode::flash(),
        flash_grouped = Mode::flash().grouped(),
        flash_kafka = Mode::flash().mode_b(Broker::Kafka),
        flash_sqs = Mode::flash().mode_b(Broker::Sqs),
    ]
    {
        a_budget_covering_100_of_500_codes_reserved_at_once_grants_exactly_100,
        percentage_discounts_over_many_codes_never_sum_past_the_budget,
        the_campaign_total_and_per_user_limit_hold_across_codes,
        a_single_use_code_wins_once,
        a_released_use_gives_its_use_and_discount_back_exactly_once,
    }
);

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::gate::Unit;

use crate::harness::{error_of, Mode, TestApp};

async fn spawn(mode: Mode) -> Arc<TestApp> {
    Arc::new(TestApp::spawn_in(mode).await)
}

/// A campaign open now for a day; `overrides` replaces any field. Its id.
async fn campaign(app: &TestApp, overrides: Value) -> (i64, Value) {
    let now = chrono::Utc::now();
    let mut body = json!({
        "discountAmount": 1_000,
        "startsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
        "endsAt": (now + chrono::Duration::days(1)).to_rfc3339(),
        "codes": {"count": 100},
        "flashSale": app.is_flash(),
    });
    for (k, v) in overrides.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, view) = app.create_campaign(body).await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    (view["id"].as_i64().unwrap(), view)
}

/// Every code of campaign `id`, in code order, through the listing's pages.
async fn codes(app: &TestApp, id: i64, status: Option<&str>) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut query = vec![("limit", "100")];
        if let Some(s) = status {
            query.push(("status", s));
        }
        if let Some(a) = &after {
            query.push(("after", a));
        }
        let (st, page) = app.campaign_codes(id, &query).await;
        assert_eq!(st, StatusCode::OK, "{page}");
        for item in page["items"].as_array().unwrap() {
            out.push((
                item["code"].as_str().unwrap().to_owned(),
                item["usedCount"].as_i64().unwrap(),
            ));
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return out,
        }
    }
}

/// Reserves `(code, customer, amount)` all at once (order `o-{i}`); each granted discount or
/// the refusal's error code.
async fn reserve_at_once(
    app: &Arc<TestApp>,
    requests: &[(String, i64, i64)],
) -> Vec<Result<i64, String>> {
    let requests = requests
        .iter()
        .enumerate()
        .map(|(i, (code, customer, amount))| (code.clone(), *customer, format!("o-{i}"), *amount))
        .collect();
    app.reserve_codes(requests)
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

/// The campaign's counters agree with its codes' rows.
async fn assert_counters(app: &TestApp, id: i64, used: i64, budget_used: Option<i64>) {
    // Mode B: the view counts uses in flight at once; the budget and the rows once they land.
    app.settle_campaign(id).await;
    let (_, view) = app.campaign(id).await;
    assert_eq!(view["inFlightCount"], 0, "{view}");
    assert_eq!(view["usedCount"], used, "{view}");
    if let Some(b) = budget_used {
        assert_eq!(view["budgetUsed"], b, "{view}");
        assert_eq!(
            view["budgetRemaining"].as_i64().unwrap(),
            view["budgetAmount"].as_i64().unwrap() - b
        );
    }
    let row = app
        .db
        .query_one(
            "SELECT count(*), COALESCE(sum(r.discount_amount), 0)::int8
               FROM redemption r JOIN voucher v ON v.code = r.voucher_code
              WHERE v.campaign_id = $1 AND r.status IN (1, 2)",
            &[&id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), used, "the rows' uses");
    if let Some(b) = budget_used {
        assert_eq!(row.get::<_, i64>(1), b, "the rows' discounts");
    }
}

async fn a_budget_covering_100_of_500_codes_reserved_at_once_grants_exactly_100(mode: Mode) {
    let app = spawn(mode).await;
    let (id, _) = campaign(
        &app,
        json!({"budgetAmount": 100_000, "codes": {"count": 500, "prefix": "B-"}}),
    )
    .await;
    let all = codes(&app, id, None).await;
    assert_eq!(all.len(), 500);
    let requests: Vec<(String, i64, i64)> = all
        .iter()
        .enumerate()
        .map(|(i, (code, _))| (code.clone(), i as i64 + 1, 5_000))
        .collect();
    let answers = reserve_at_once(&app, &requests).await;
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 100);
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert_eq!(refused, "BUDGET_EXHAUSTED");
    }
    assert_counters(&app, id, 100, Some(100_000)).await;
    if mode.flash {
        // The campaign's gate decided, and holds what Postgres holds.
        let gate = app.app.gate().counts(Unit::Campaign(id)).await.unwrap();
        assert_eq!(gate.map(|g| (g.remaining, g.budget)), Some((400, Some(0))));
    }
    assert_eq!(codes(&app, id, Some("used")).await.len(), 100);
    assert_eq!(codes(&app, id, Some("unused")).await.len(), 400);
    // An unused code still has room; the campaign's money does not.
    let unused = &codes(&app, id, Some("unused")).await[0].0;
    let (status, body) = app.validate(unused, 9_999, 5_000).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("BUDGET_EXHAUSTED")),
        "{body}"
    );
}

async fn percentage_discounts_over_many_codes_never_sum_past_the_budget(mode: Mode) {
    let app = spawn(mode).await;
    let budget = 50_000;
    let (id, _) = campaign(
        &app,
        json!({"discountAmount": null, "discountPercent": 10, "budgetAmount": budget,
               "codes": {"count": 300}}),
    )
    .await;
    let all = codes(&app, id, None).await;
    let requests: Vec<(String, i64, i64)> = all
        .iter()
        .enumerate()
        .map(|(i, (code, _))| {
            let c = i as i64 + 1;
            (code.clone(), c, 100 + c * 7_919 % 19_901)
        })
        .collect();
    let answers = reserve_at_once(&app, &requests).await;
    let spent: i64 = answers.iter().filter_map(|a| a.as_ref().ok()).sum();
    assert!(spent <= budget, "{spent} given past {budget}");
    // Nothing is given back: a refusal's discount exceeded what was left then, which is at
    // least what is left now.
    let left = budget - spent;
    let mut refused = 0;
    for ((_, _, amount), answer) in requests.iter().zip(&answers) {
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
    assert_counters(&app, id, 300 - refused, Some(spent)).await;
}

async fn the_campaign_total_and_per_user_limit_hold_across_codes(mode: Mode) {
    let app = spawn(mode).await;
    let (id, _) = campaign(
        &app,
        json!({"totalLimit": 50, "perUserLimit": 3, "codes": {"count": 200}}),
    )
    .await;
    let all = codes(&app, id, None).await;
    // 20 customers, each on 10 codes of their own at once: 3 each would be 60, the total
    // allows 50.
    let requests: Vec<(String, i64, i64)> = all
        .iter()
        .enumerate()
        .map(|(i, (code, _))| (code.clone(), (i % 20) as i64 + 1, 5_000))
        .collect();
    let answers = reserve_at_once(&app, &requests).await;
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 50);
    let mut per_customer = [0; 21];
    for ((_, customer, _), answer) in requests.iter().zip(&answers) {
        match answer {
            Ok(_) => per_customer[*customer as usize] += 1,
            Err(e) => assert!(e == "ALREADY_USED" || e == "OUT_OF_STOCK", "{e}"),
        }
    }
    assert!(per_customer.iter().all(|n| *n <= 3), "{per_customer:?}");
    assert_counters(&app, id, 50, None).await;
    // The total refuses a lower limit than what is held, and takes one at it.
    let (status, body) = app.patch_campaign(id, json!({"totalLimit": 49})).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("LIMIT_BELOW_USED"))
    );
    let (status, body) = app.patch_campaign(id, json!({"totalLimit": null})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.get("totalLimit").is_none(), "{body}");
    // Without a total, only the per-user limit binds: every customer gets to 3.
    let unused = codes(&app, id, Some("unused")).await;
    let requests: Vec<(String, i64, i64)> = unused
        .iter()
        .take(100)
        .enumerate()
        .map(|(i, (code, _))| (code.clone(), (i % 20) as i64 + 1, 5_000))
        .collect();
    let more = reserve_at_once(&app, &requests).await;
    assert_eq!(more.iter().filter(|a| a.is_ok()).count(), 10);
    assert_counters(&app, id, 60, None).await;
}

async fn a_single_use_code_wins_once(mode: Mode) {
    let app = spawn(mode).await;
    let (id, _) = campaign(&app, json!({"codes": ["ONCE-1", "once-2"]})).await;
    let requests: Vec<(String, i64, i64)> =
        (1..=50).map(|c| ("ONCE-1".to_owned(), c, 5_000)).collect();
    let answers = reserve_at_once(&app, &requests).await;
    assert_eq!(answers.iter().filter(|a| a.is_ok()).count(), 1);
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert_eq!(refused, "OUT_OF_STOCK");
    }
    assert_counters(&app, id, 1, None).await;
    assert_eq!(
        codes(&app, id, None).await,
        vec![("ONCE-1".to_owned(), 1), ("ONCE-2".to_owned(), 0)]
    );
}

async fn a_released_use_gives_its_use_and_discount_back_exactly_once(mode: Mode) {
    let app = spawn(mode).await;
    let (id, _) = campaign(
        &app,
        json!({"budgetAmount": 3_000, "totalLimit": 3, "codes": {"count": 10}}),
    )
    .await;
    let all = codes(&app, id, None).await;
    for (i, (code, _)) in all.iter().take(3).enumerate() {
        let (status, body) = app.reserve(code, i as i64 + 1, "o", 5_000).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (status, body) = app.reserve(&all[3].0, 9, "o", 5_000).await;
    assert_eq!(
        (status, error_of(&body)),
        (StatusCode::CONFLICT, "OUT_OF_STOCK".to_owned())
    );
    assert_eq!(app.confirm(&all[1].0, "o").await.0, StatusCode::OK);
    // Ten releases of one use at once, and of a confirmed one.
    let releases: Vec<_> = (0..10)
        .flat_map(|_| [0, 1])
        .map(|i| {
            let (app, code) = (app.clone(), all[i].0.clone());
            tokio::spawn(async move { app.release(&code, "o").await.0 })
        })
        .collect();
    for r in releases {
        assert_eq!(r.await.unwrap(), StatusCode::NO_CONTENT);
    }
    assert_counters(&app, id, 1, Some(1_000)).await;
    // Two uses and their money came back: two more fit, and no third.
    for (i, (code, _)) in all[4..7].iter().enumerate() {
        let (status, _) = app.reserve(code, 20 + i as i64, "o", 5_000).await;
        assert_eq!(
            status,
            if i < 2 {
                StatusCode::CREATED
            } else {
                StatusCode::CONFLICT
            }
        );
    }
    assert_counters(&app, id, 3, Some(3_000)).await;
}

#[tokio::test]
async fn generated_codes_are_unique_match_their_pattern_and_list_in_pages_and_csv() {
    let app = TestApp::spawn().await;
    let (id, view) = campaign(
        &app,
        json!({"codes": {"count": 1_234, "length": 8, "prefix": "spring-", "charset": "ABC234"}}),
    )
    .await;
    assert_eq!(
        (
            &view["codeCount"],
            &view["usedCount"],
            &view["perCodeLimit"]
        ),
        (&json!(1_234), &json!(0), &json!(1)),
        "{view}"
    );
    let all = codes(&app, id, None).await;
    assert_eq!(all.len(), 1_234);
    let re = regex_like("SPRING-", 8, "ABC234");
    for (code, used) in &all {
        assert!(re(code), "{code}");
        assert_eq!(*used, 0);
    }
    assert!(
        all.windows(2).all(|w| w[0].0 < w[1].0),
        "unique, in code order"
    );
    // A code is a voucher that names its campaign; the vouchers' listing leaves it out.
    let v = app.view(&all[0].0).await;
    assert_eq!(
        (&v["campaignId"], &v["totalLimit"]),
        (&json!(id), &json!(1)),
        "{v}"
    );
    let (_, page) = app.json("GET", "/vouchers", None).await;
    assert_eq!(page["items"], json!([]), "{page}");
    // The CSV download: every code, as the pages list them.
    let (status, csv) = app.csv(&format!("/campaigns/{id}/codes")).await;
    assert_eq!(status, StatusCode::OK);
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("code,usedCount"));
    let listed: Vec<(String, i64)> = lines
        .map(|l| {
            let (c, n) = l.split_once(',').unwrap();
            (c.to_owned(), n.parse().unwrap())
        })
        .collect();
    assert_eq!(listed, all);
    // The campaigns' listing.
    let (_, second) = campaign(&app, json!({"codes": ["X1"]})).await;
    let (_, page) = app.list_campaigns(&[("limit", "1")]).await;
    assert_eq!(page["items"][0]["id"], id, "{page}");
    let next = page["next"].as_str().unwrap().to_owned();
    let (_, page) = app.list_campaigns(&[("after", &next)]).await;
    assert_eq!(
        (&page["items"][0]["id"], &page["next"]),
        (&second["id"], &Value::Null)
    );
}

/// `^{prefix}[{charset}]{length}$`, without a regex engine.
fn regex_like(prefix: &'static str, length: usize, charset: &'static str) -> impl Fn(&str) -> bool {
    move |code: &str| {
        code.len() == prefix.len() + length
            && code.starts_with(prefix)
            && code[prefix.len()..].chars().all(|c| charset.contains(c))
    }
}

#[tokio::test]
async fn an_import_with_an_existing_code_creates_nothing_and_names_the_code() {
    let app = TestApp::spawn().await;
    app.voucher("TAKEN", 10, json!({})).await;
    campaign(&app, json!({"codes": ["OTHER-1"]})).await;
    for (codes, taken) in [
        (json!(["FREE-1", "taken", "FREE-2"]), "TAKEN"),
        (json!(["FREE-1", "OTHER-1"]), "OTHER-1"),
    ] {
        let now = chrono::Utc::now();
        let (status, body) = app
            .create_campaign(json!({
                "discountAmount": 100, "codes": codes,
                "startsAt": now.to_rfc3339(), "endsAt": (now + chrono::Duration::days(1)).to_rfc3339(),
            }))
            .await;
        assert_eq!(
            (status, &body["error"]),
            (StatusCode::CONFLICT, &json!("CODE_EXISTS")),
            "{body}"
        );
        assert!(body["message"].as_str().unwrap().contains(taken), "{body}");
    }
    let (status, _) = app.json("GET", "/vouchers/FREE-1", None).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "nothing of the refused import is left"
    );
    let n: i64 = app
        .db
        .query_one("SELECT count(*) FROM campaign", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

#[tokio::test]
async fn bad_campaigns_and_changes_are_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    let now = chrono::Utc::now();
    let base = json!({
        "discountAmount": 100, "codes": {"count": 10},
        "startsAt": now.to_rfc3339(), "endsAt": (now + chrono::Duration::days(1)).to_rfc3339(),
    });
    for (change, field) in [
        (
            json!({"codes": {"count": 17, "length": 2, "charset": "AB2C"}}),
            "codes.count",
        ),
        (
            json!({"codes": {"count": 1, "charset": "abc"}}),
            "codes.charset",
        ),
        (json!({"codes": ["OK", "ok"]}), "codes"),
        (json!({"codes": "x"}), "codes"),
        (json!({"perCodeLimit": 0}), "perCodeLimit"),
        (json!({"budgetAmount": -1}), "budgetAmount"),
        (json!({"endsAt": now.to_rfc3339()}), "endsAt"),
    ] {
        let mut body = base.clone();
        for (k, v) in change.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, answer) = app.create_campaign(body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{change}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().starts_with(field),
            "{change}: {answer}"
        );
    }
    let n: i64 = app
        .db
        .query_one("SELECT count(*) FROM voucher", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "nothing written");

    let (id, _) = campaign(
        &app,
        json!({"budgetAmount": 5_000, "codes": ["P-1", "P-2"]}),
    )
    .await;
    assert_eq!(
        app.reserve("P-1", 1, "o", 5_000).await.0,
        StatusCode::CREATED
    );
    let (status, body) = app.patch_campaign(id, json!({"budgetAmount": 999})).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("BUDGET_BELOW_USED"))
    );
    let (status, body) = app
        .patch_campaign(
            id,
            json!({"endsAt": (now - chrono::Duration::days(1)).to_rfc3339()}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().unwrap().starts_with("endsAt"),
        "{body}"
    );
    assert_eq!(app.campaign(404).await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        app.json("GET", "/campaigns/x", None).await.0,
        StatusCode::BAD_REQUEST
    );
    // A code changes with its campaign, not on its own.
    let (status, body) = app
        .json("PATCH", "/vouchers/P-2", Some(json!({"active": false})))
        .await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("CAMPAIGN_CODE")),
        "{body}"
    );
    // Pausing the campaign pauses every code; the window is the campaign's too.
    let (status, body) = app.patch_campaign(id, json!({"active": false})).await;
    assert_eq!((status, &body["active"]), (StatusCode::OK, &json!(false)));
    assert_eq!(app.view("P-2").await["active"], false);
    let (status, body) = app.reserve("P-2", 2, "o", 5_000).await;
    assert_eq!(
        (status, error_of(&body)),
        (StatusCode::UNPROCESSABLE_ENTITY, "NOT_ELIGIBLE".to_owned()),
        "{body}"
    );
    let later = (now + chrono::Duration::hours(1)).to_rfc3339();
    let (status, _) = app
        .patch_campaign(id, json!({"active": true, "startsAt": later}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = app.validate("P-2", 2, 5_000).await;
    assert_eq!(body["reason"], "NOT_STARTED", "{body}");
}

/// The Postgres backstop's gaps, closed by `fg_campaign_budget_unused`. Before it: a campaign without a budget summed the
/// discounts held without a bound, and one overflowed bigint failed every later use (503); the
/// slot-caps check could be turned off for a voucher by marking its slots `campaign`; a
/// negative discount was stored.
#[tokio::test]
async fn the_backstop_has_no_gap_in_budgets_slots_or_discounts() {
    let app = TestApp::spawn().await;
    let (id, _) = campaign(&app, json!({"codes": ["N-1", "N-2", "N-3"]})).await;
    assert_eq!(
        app.reserve("N-1", 1, "o1", 5_000).await.0,
        StatusCode::CREATED
    );
    // What years of discounts held without a budget came to.
    app.db
        .execute(
            "UPDATE campaign_counter SET budget_used = 9223372036854775000 WHERE campaign_id = $1",
            &[&id],
        )
        .await
        .unwrap();
    let (status, body) = app.reserve("N-2", 2, "o2", 5_000).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Given a budget, the campaign counts what its codes hold.
    let (status, view) = app
        .patch_campaign(id, json!({"budgetAmount": 1_000_000}))
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_counters(&app, id, 2, Some(2_000)).await;
    assert_eq!(
        app.reserve("N-3", 3, "o3", 5_000).await.0,
        StatusCode::CREATED
    );
    assert_counters(&app, id, 3, Some(3_000)).await;

    app.voucher("PLAIN", 5, json!({})).await;
    for sql in [
        "UPDATE voucher_slot SET campaign = true WHERE voucher_code = 'PLAIN'",
        "INSERT INTO voucher_slot (voucher_code, slot, cap, campaign) VALUES ('PLAIN', 7, 100, true)",
        "INSERT INTO redemption (voucher_code, order_id, customer_id, status, order_amount,
                                 discount_amount, reserved_at, expires_at)
         VALUES ('PLAIN', 'neg', 1, 1, 10, -5, now(), now())",
    ] {
        let e = app.db.execute(sql, &[]).await.unwrap_err();
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION),
            "{sql}: {:?}",
            e.as_db_error()
        );
    }
}

#[tokio::test]
async fn sql_past_a_campaigns_total_or_budget_is_refused_by_the_database() {
    let app = TestApp::spawn().await;
    let (id, _) = campaign(
        &app,
        json!({"totalLimit": 1, "budgetAmount": 1_000, "codes": ["S-1", "S-2"]}),
    )
    .await;
    assert_eq!(
        app.reserve("S-1", 1, "o", 5_000).await.0,
        StatusCode::CREATED
    );
    for sql in [
        "UPDATE campaign_counter SET used = used + 1 WHERE campaign_id = $1",
        "UPDATE campaign_counter SET budget_used = budget_used + 1 WHERE campaign_id = $1",
        "UPDATE campaign_counter SET used = -1 WHERE campaign_id = $1",
    ] {
        let e = app.db.execute(sql, &[&id]).await.unwrap_err();
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION),
            "{sql}: {:?}",
            e.as_db_error()
        );
    }
    // fg_merge itself, called past the total, refuses.
    let e = app
        .db
        .query(
            "SELECT * FROM fg_merge('S-2', 'x', 7, 1::smallint, 5000, 1000, now(),
                                    now() + interval '1 minute', NULL, now(), false)",
            &[],
        )
        .await
        .unwrap_err();
    let db = e.as_db_error().expect("a database error");
    assert_eq!((db.code().code(), db.message()), ("FG409", "OUT_OF_STOCK"));
}
