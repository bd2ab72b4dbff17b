//! The voucher's whole life (README.md, "API"): changing a voucher mid-sale, pausing it,
//! percentage discounts, validations that take nothing, and the listings. Each test runs on
//! standard vouchers (Postgres decides) and on flash-sale vouchers (the gate decides, mode A),
//! with the limit split across eight counter slots and the writes grouped into batches.

crate::in_modes!(
    [
        standard = Mode::standard().slots(8).grouped(),
        flash = Mode::flash().slots(8).grouped(),
    ]
    {
        a_lower_and_a_higher_limit_under_concurrent_reserves_grant_exactly_the_limit_in_force,
        a_limit_below_the_uses_held_is_refused_and_changes_nothing,
        the_counter_slots_change_under_concurrent_reserves_and_never_lose_a_use,
        a_paused_voucher_refuses_new_uses_and_keeps_the_old_ones_working,
        a_new_discount_applies_to_new_reservations_only,
        percentages_round_down_and_stop_at_the_cap,
        a_fixed_discount_never_exceeds_the_order_amount,
        a_validation_answers_as_a_reserve_would_and_takes_nothing,
        listings_page_through_a_thousand_reservations_while_reserves_go_on,
        bad_input_to_the_new_routes_gets_a_4xx_naming_the_problem_and_writes_nothing,
    }
);

use std::collections::HashMap;
use std::sync::Arc;

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::domain::Discount;

use crate::harness::{self, error_of, path, Mode, Request, TestApp};
use crate::slots::slots;

async fn spawn(mode: Mode) -> Arc<TestApp> {
    Arc::new(TestApp::spawn_in(mode).await)
}

/// Reserves for customers `from..to` (one order each) all at once; the number granted.
async fn reserve_many(app: &Arc<TestApp>, code: &str, from: i64, to: i64) -> usize {
    granted(app, code, from, to).await.len()
}

/// Reserves for customers `from..to` (order `o-{customer}`) all at once; the orders granted.
async fn granted(app: &Arc<TestApp>, code: &str, from: i64, to: i64) -> Vec<String> {
    let requests = (from..to).map(|i| (i, format!("o-{i}"))).collect();
    let answers = app.reserve_all(code, requests, 1_000).await;
    let mut granted = Vec::new();
    for (i, (status, body)) in (from..to).zip(answers) {
        match status {
            StatusCode::CREATED => granted.push(format!("o-{i}")),
            StatusCode::CONFLICT => assert_eq!(error_of(&body), "OUT_OF_STOCK", "{body}"),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    granted
}

/// Postgres' view and the gate's agree on what is left.
async fn assert_counts(app: &TestApp, code: &str, flash: bool, limit: i64, used: i64) {
    let view = app.view(code).await;
    assert_eq!(view["totalLimit"], limit, "{view}");
    assert_eq!(view["usedCount"], used, "{view}");
    assert_eq!(view["remaining"], limit - used, "{view}");
    assert_eq!(app.counts(code).await.active_rows, used);
    if flash {
        assert_eq!(app.gate_remaining(code).await, Some(limit - used));
    }
}

async fn a_lower_and_a_higher_limit_under_concurrent_reserves_grant_exactly_the_limit_in_force(
    mode: Mode,
) {
    let app = spawn(mode).await;
    let flash = mode.flash;
    app.voucher("LIMITS", 150, json!({})).await;

    // 100 customers want a use while the limit is lowered from 150 to 80: either the change
    // lands while 80 or fewer are held (then exactly 80 are granted in all), or it comes too
    // late and is refused (then all 100 are).
    let reserves = {
        let app = app.clone();
        tokio::spawn(async move { reserve_many(&app, "LIMITS", 1, 101).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (status, body) = app.patch_voucher("LIMITS", json!({"totalLimit": 80})).await;
    let granted = reserves.await.unwrap() as i64;
    let limit = match status {
        StatusCode::OK => {
            assert_eq!(granted, 80, "the new limit holds: {body}");
            80
        }
        StatusCode::CONFLICT => {
            assert_eq!(body["error"], "LIMIT_BELOW_USED", "{body}");
            assert_eq!(granted, 100);
            150
        }
        other => panic!("unexpected {other}: {body}"),
    };
    assert_counts(&app, "LIMITS", flash, limit, granted).await;

    // Raised by 20 mid-sale: 30 customers more than there are uses left get exactly those.
    let (status, body) = app
        .patch_voucher("LIMITS", json!({"totalLimit": limit + 20}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["remaining"], limit + 20 - granted);
    let more = self::granted(&app, "LIMITS", 1_000, 1_030 + limit + 20 - granted).await;
    assert_eq!(more.len() as i64, limit + 20 - granted);
    assert_counts(&app, "LIMITS", flash, limit + 20, limit + 20).await;

    // Uses given back by a release go to a slot that still has room: the caps still sum to the
    // limit and every use is reachable.
    let (status, _) = app.release("LIMITS", &more[0]).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(reserve_many(&app, "LIMITS", 2_000, 2_005).await, 1);
    assert_counts(&app, "LIMITS", flash, limit + 20, limit + 20).await;
}

async fn the_counter_slots_change_under_concurrent_reserves_and_never_lose_a_use(mode: Mode) {
    let app = spawn(mode).await;
    let flash = mode.flash;
    app.voucher("SLOTS", 40, json!({"counterSlots": 1})).await;
    let mut held = granted(&app, "SLOTS", 1, 11).await;
    assert_eq!(held.len(), 10);

    // 60 customers want the 30 uses left while the one slot becomes sixteen: whenever the
    // change lands, exactly the 30 are granted.
    let reserves = {
        let app = app.clone();
        tokio::spawn(async move { granted(&app, "SLOTS", 100, 160).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (status, body) = app
        .patch_voucher("SLOTS", json!({"counterSlots": 16}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["counterSlots"], 16);
    held.extend(reserves.await.unwrap());
    assert_eq!(held.len(), 40);
    assert_counts(&app, "SLOTS", flash, 40, 40).await;
    let now = slots(&app, "SLOTS").await;
    assert_eq!(now.len(), 16);
    let sum = |slots: &[(i16, i32, i32)], f: fn(&(i16, i32, i32)) -> i32| {
        slots.iter().map(|s| i64::from(f(s))).sum::<i64>()
    };
    assert_eq!(sum(&now, |s| s.1), 40, "caps sum to the limit");
    assert_eq!(sum(&now, |s| s.2), 40);

    // Every use back. Where the room sits depends on when the change landed (had the 30 all
    // been granted first, slot 0 would keep every cap), so a new limit spreads it again: three
    // a slot. Then 20 taken across the sixteen slots: the first four have room for 12 of them,
    // so fewer slots would drop some that count uses. Refused, nothing written.
    for order in held.drain(..) {
        assert_eq!(app.release("SLOTS", &order).await.0, StatusCode::NO_CONTENT);
    }
    let (status, body) = app.patch_voucher("SLOTS", json!({"totalLimit": 48})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(slots(&app, "SLOTS").await.iter().all(|s| s.1 == 3));
    let again = granted(&app, "SLOTS", 200, 220).await;
    assert_eq!(again.len(), 20);
    let before = app.snapshot().await;
    let (status, body) = app.patch_voucher("SLOTS", json!({"counterSlots": 4})).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("SLOTS_IN_USE")),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("counterSlots"),
        "{body}"
    );
    assert_eq!(app.snapshot().await, before, "nothing written");

    // Once those uses are back too, the slots shrink, with a new limit in the same change.
    for order in &again {
        assert_eq!(app.release("SLOTS", order).await.0, StatusCode::NO_CONTENT);
    }
    let (status, body) = app
        .patch_voucher("SLOTS", json!({"counterSlots": 4, "totalLimit": 30}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (&body["counterSlots"], &body["totalLimit"]),
        (&json!(4), &json!(30))
    );
    assert_eq!(
        slots(&app, "SLOTS").await,
        vec![(0, 8, 0), (1, 8, 0), (2, 7, 0), (3, 7, 0)]
    );
    assert_eq!(reserve_many(&app, "SLOTS", 1_000, 1_050).await, 30);
    assert_counts(&app, "SLOTS", flash, 30, 30).await;
}

async fn a_limit_below_the_uses_held_is_refused_and_changes_nothing(mode: Mode) {
    let app = spawn(mode).await;
    let flash = mode.flash;
    app.voucher("HELD", 10, json!({})).await;
    assert_eq!(reserve_many(&app, "HELD", 1, 6).await, 5);
    let before = app.snapshot().await;
    let (status, body) = app
        .patch_voucher("HELD", json!({"totalLimit": 4, "active": false}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "LIMIT_BELOW_USED");
    assert!(body["message"].as_str().unwrap().contains("totalLimit"));
    assert_eq!(app.snapshot().await, before, "nothing written");
    assert_counts(&app, "HELD", flash, 10, 5).await;
    if flash {
        assert_eq!(app.gate_meta("HELD", "active").await.as_deref(), Some("1"));
    }
    // Exactly the uses held is allowed: sold out at once.
    let (status, body) = app.patch_voucher("HELD", json!({"totalLimit": 5})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_counts(&app, "HELD", flash, 5, 5).await;
    assert_eq!(reserve_many(&app, "HELD", 10, 12).await, 0);
}

async fn a_paused_voucher_refuses_new_uses_and_keeps_the_old_ones_working(mode: Mode) {
    let app = spawn(mode).await;
    let flash = mode.flash;
    app.voucher("PAUSE", 10, json!({"perUserLimit": 5})).await;
    let (_, first) = app.reserve("PAUSE", 1, "a", 1_000).await;
    app.reserve("PAUSE", 1, "b", 1_000).await;
    app.reserve("PAUSE", 1, "c", 1_000).await;

    let (status, view) = app.patch_voucher("PAUSE", json!({"active": false})).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["active"], false);
    let (status, body) = app.reserve("PAUSE", 2, "d", 1_000).await;
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        (&body["error"], &body["reason"]),
        (&json!("NOT_ELIGIBLE"), &json!("INACTIVE"))
    );
    let (status, body) = app.validate("PAUSE", 2, 1_000).await;
    assert_eq!(
        (status, &body["reason"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("INACTIVE"))
    );
    // A retry of an earlier reserve still gets its first answer; confirm and release work.
    assert_eq!(
        app.reserve("PAUSE", 1, "a", 1_000).await,
        (StatusCode::CREATED, first)
    );
    let (status, _) = app.confirm("PAUSE", "b").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = app.release("PAUSE", "c").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_counts(&app, "PAUSE", flash, 10, 2).await;

    let (status, view) = app.patch_voucher("PAUSE", json!({"active": true})).await;
    assert_eq!((status, &view["active"]), (StatusCode::OK, &json!(true)));
    assert_eq!(
        app.reserve("PAUSE", 2, "d", 1_000).await.0,
        StatusCode::CREATED
    );
    assert_counts(&app, "PAUSE", flash, 10, 3).await;
}

async fn a_new_discount_applies_to_new_reservations_only(mode: Mode) {
    let app = spawn(mode).await;
    app.voucher(
        "DISC",
        10,
        json!({"discountAmount": 700, "perUserLimit": 5}),
    )
    .await;
    let (status, first) = app.reserve("DISC", 1, "before", 10_000).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        serde_json::from_str::<Value>(&first).unwrap()["discountAmount"],
        700
    );

    let (status, view) = app
        .patch_voucher(
            "DISC",
            json!({"discountPercent": 10, "maxDiscountAmount": 500, "minOrderAmount": 2_000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert!(view.get("discountAmount").is_none(), "{view}");
    assert_eq!(
        (&view["discountPercent"], &view["maxDiscountAmount"]),
        (&json!(10), &json!(500))
    );
    assert_eq!(view["minOrderAmount"], 2_000);

    let (_, body) = app.reserve("DISC", 1, "after", 3_000).await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["discountAmount"],
        300
    );
    let (status, body) = app.reserve("DISC", 1, "small", 1_000).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // The earlier reservation keeps its discount, in its replay and in its row.
    assert_eq!(
        app.reserve("DISC", 1, "before", 10_000).await,
        (StatusCode::CREATED, first)
    );
    let (_, row) = app.get_reservation("DISC", "before").await;
    assert_eq!(row["discountAmount"], 700);

    // Back to a fixed amount: the cap goes with the percentage.
    let (status, view) = app
        .patch_voucher("DISC", json!({"discountAmount": 50}))
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["discountAmount"], 50);
    assert!(view.get("discountPercent").is_none() && view.get("maxDiscountAmount").is_none());
    let (_, body) = app.reserve("DISC", 1, "fixed", 3_000).await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["discountAmount"],
        50
    );
}

async fn percentages_round_down_and_stop_at_the_cap(mode: Mode) {
    let app = spawn(mode).await;
    app.voucher(
        "PCT",
        100,
        json!({"discountAmount": null, "discountPercent": 15, "perUserLimit": 100}),
    )
    .await;
    app.voucher(
        "CAP",
        100,
        json!({"discountAmount": null, "discountPercent": 99, "maxDiscountAmount": 1_000, "perUserLimit": 100}),
    )
    .await;
    app.voucher(
        "BIG",
        100,
        json!({"discountAmount": null, "discountPercent": 99, "perUserLimit": 100}),
    )
    .await;
    // (voucher, amount, discount): 15% of 999 is 149.85; 99% of 10^15 - 1 needs exact
    // integers (it is past 2^53 before the division), in SQL and in the gate's Lua alike.
    let cases = [
        ("PCT", 0_i64, 0_i64),
        ("PCT", 6, 0),
        ("PCT", 7, 1),
        ("PCT", 999, 149),
        ("PCT", 1_000, 150),
        ("CAP", 1_000, 990),
        ("CAP", 1_011, 1_000),
        ("CAP", 5_000_000, 1_000),
        ("BIG", 1_000_000_000_000_000, 990_000_000_000_000),
        ("BIG", 999_999_999_999_999, 989_999_999_999_999),
        ("BIG", 999_999_999_999_901, 989_999_999_999_901),
    ];
    // The consumer's check of mode B events computes it a third time, in Rust.
    let rules = |code| match code {
        "PCT" => Discount::Percent {
            percent: 15,
            cap: None,
        },
        "CAP" => Discount::Percent {
            percent: 99,
            cap: Some(1_000),
        },
        _ => Discount::Percent {
            percent: 99,
            cap: None,
        },
    };
    for (i, (code, amount, discount)) in cases.into_iter().enumerate() {
        assert_eq!(rules(code).off(amount), discount, "Rust: {code} {amount}");
        let (status, v) = app.validate(code, 1, amount).await;
        assert_eq!(
            (status, &v["discountAmount"]),
            (StatusCode::OK, &json!(discount)),
            "{code} {amount}"
        );
        let (status, body) = app.reserve(code, 1, &format!("p{i}"), amount).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let r: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(r["discountAmount"], discount, "{code} {amount}");
    }
    let view = app.view("CAP").await;
    assert_eq!(
        (&view["discountPercent"], &view["maxDiscountAmount"]),
        (&json!(99), &json!(1_000))
    );
    assert!(view.get("discountAmount").is_none());
}

async fn a_fixed_discount_never_exceeds_the_order_amount(mode: Mode) {
    let app = spawn(mode).await;
    app.voucher(
        "FIX",
        100,
        json!({"discountAmount": 100_000, "perUserLimit": 100}),
    )
    .await;
    // (amount, discount): 100,000 off an order of 500 is 500 off, in SQL and in the gate alike.
    let cases = [
        (0_i64, 0_i64),
        (500, 500),
        (99_999, 99_999),
        (100_000, 100_000),
        (100_001, 100_000),
    ];
    for (i, (amount, discount)) in cases.into_iter().enumerate() {
        let (status, v) = app.validate("FIX", 1, amount).await;
        assert_eq!(
            (status, &v["discountAmount"]),
            (StatusCode::OK, &json!(discount)),
            "validate {amount}"
        );
        let (status, body) = app.reserve("FIX", 1, &format!("f{i}"), amount).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let r: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(r["discountAmount"], discount, "reserve {amount}");
        let (status, r) = app.confirm("FIX", &format!("f{i}")).await;
        assert_eq!(
            (status, &r["discountAmount"]),
            (StatusCode::OK, &json!(discount)),
            "confirm {amount}"
        );
    }
}

async fn a_validation_answers_as_a_reserve_would_and_takes_nothing(mode: Mode) {
    let app = spawn(mode).await;
    app.voucher(
        "VAL",
        2,
        json!({"discountAmount": 300, "minOrderAmount": 500}),
    )
    .await;
    app.voucher(
        "LATER",
        2,
        json!({"startsAt": (Utc::now() + chrono::Duration::hours(1)).to_rfc3339()}),
    )
    .await;
    assert_eq!(
        app.reserve("VAL", 1, "held", 1_000).await.0,
        StatusCode::CREATED
    );
    let before = (app.snapshot().await, app.gate_remaining("VAL").await);

    let (status, body) = app.validate("VAL", 2, 1_000).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"eligible": true, "discountAmount": 300}));
    let refused = |status: StatusCode, error: &str, reason: Option<&str>| {
        (status, error.to_owned(), reason.map(str::to_owned))
    };
    let answer = |(status, body): (StatusCode, Value)| {
        (
            status,
            body["error"].as_str().unwrap_or("").to_owned(),
            body["reason"].as_str().map(str::to_owned),
        )
    };
    assert_eq!(
        answer(app.validate("VAL", 1, 1_000).await),
        refused(StatusCode::CONFLICT, "ALREADY_USED", None)
    );
    assert_eq!(
        answer(app.validate("VAL", 2, 499).await),
        refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            "NOT_ELIGIBLE",
            Some("MIN_ORDER_AMOUNT")
        )
    );
    assert_eq!(
        answer(app.validate("LATER", 2, 1_000).await),
        refused(
            StatusCode::UNPROCESSABLE_ENTITY,
            "NOT_ELIGIBLE",
            Some("NOT_STARTED")
        )
    );
    assert_eq!(
        answer(app.validate("NOPE", 2, 1_000).await),
        refused(StatusCode::NOT_FOUND, "VOUCHER_NOT_FOUND", None)
    );
    // A thousand validations take nothing.
    for c in 0..1_000 {
        assert_eq!(app.validate("VAL", 10 + c, 1_000).await.0, StatusCode::OK);
    }
    assert_eq!(
        (app.snapshot().await, app.gate_remaining("VAL").await),
        before,
        "nothing written"
    );

    assert_eq!(
        app.reserve("VAL", 2, "last", 1_000).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        answer(app.validate("VAL", 3, 1_000).await),
        refused(StatusCode::CONFLICT, "OUT_OF_STOCK", None)
    );
}

async fn listings_page_through_a_thousand_reservations_while_reserves_go_on(mode: Mode) {
    let app = spawn(mode).await;
    app.voucher("LIST", 5_000, json!({"perUserLimit": 1_000}))
        .await;
    app.voucher("LIST2", 1, json!({})).await;
    app.voucher("LIST3", 1, json!({})).await;
    let order = |i: i64| format!("ord-{i:04}");
    let requests = (0..1_000).map(|i| (1 + i % 7, order(i))).collect();
    for (status, body) in app.reserve_all("LIST", requests, 1_000).await {
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    for i in (0..1_000).step_by(10) {
        app.confirm("LIST", &order(i)).await;
    }

    // New reservations land between the pages, before and after the cursor.
    let writer = {
        let app = app.clone();
        tokio::spawn(async move {
            for i in 0..300 {
                let id = format!("ord-{:04}-new", (i * 37) % 1_000);
                assert_eq!(
                    app.reserve("LIST", 100 + i, &id, 1_000).await.0,
                    StatusCode::CREATED
                );
            }
        })
    };
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let query = match &after {
            None => vec![("limit", "37")],
            Some(c) => vec![("limit", "37"), ("after", c.as_str())],
        };
        let (status, page) = app.list_reservations("LIST", &query).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        pages += 1;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 37);
        for item in items {
            *seen
                .entry(item["orderId"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    writer.await.unwrap();
    assert!(pages >= 28, "{pages} pages");
    assert!(seen.values().all(|&n| n == 1), "an item came twice");
    for i in 0..1_000 {
        assert_eq!(seen.get(&order(i)), Some(&1), "{} missed", order(i));
    }

    // Filters: by status and by customer, with every field of an item.
    let (_, page) = app
        .list_reservations("LIST", &[("status", "CONFIRMED"), ("limit", "100")])
        .await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 100);
    assert!(page["next"].is_null());
    let item = &items[0];
    assert_eq!(item["orderId"], "ord-0000");
    assert_eq!(item["status"], "CONFIRMED");
    for field in [
        "customerId",
        "discountAmount",
        "orderAmount",
        "reservedAt",
        "expiresAt",
        "confirmedAt",
    ] {
        assert!(!item[field].is_null(), "{field}: {item}");
    }
    assert!(
        item["releasedAt"].is_null() && item["releaseReason"].is_null(),
        "{item}"
    );
    let (_, page) = app
        .list_reservations("LIST", &[("customerId", "3"), ("limit", "100")])
        .await;
    let mut of_three = page["items"].as_array().unwrap().len();
    let mut next = page["next"].as_str().map(str::to_owned);
    while let Some(c) = next {
        let (_, page) = app
            .list_reservations(
                "LIST",
                &[("customerId", "3"), ("limit", "100"), ("after", &c)],
            )
            .await;
        of_three += page["items"].as_array().unwrap().len();
        next = page["next"].as_str().map(str::to_owned);
    }
    assert_eq!(of_three, (0..1_000).filter(|i| 1 + i % 7 == 3).count());
    app.release("LIST", "ord-0001").await;
    let (_, page) = app
        .list_reservations("LIST", &[("status", "RELEASED")])
        .await;
    assert_eq!(page["items"][0]["releaseReason"], "CANCELLED");
    assert_eq!(page["items"].as_array().unwrap().len(), 1);

    // The vouchers, one per page.
    let (_, first) = app.list_vouchers(&[("limit", "2")]).await;
    let codes: Vec<&str> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["LIST", "LIST2"]);
    assert_eq!(first["items"][0]["usedCount"], 1_299);
    let next = first["next"].as_str().unwrap();
    let (_, last) = app.list_vouchers(&[("limit", "2"), ("after", next)]).await;
    assert_eq!(last["items"][0]["code"], "LIST3");
    assert!(last["next"].is_null());
    let (status, empty) = app.list_reservations("LIST3", &[]).await;
    assert_eq!(
        (status, empty),
        (StatusCode::OK, json!({"items": [], "next": null}))
    );
}

async fn bad_input_to_the_new_routes_gets_a_4xx_naming_the_problem_and_writes_nothing(mode: Mode) {
    let app = spawn(mode).await;
    app.voucher("BAD", 10, json!({})).await;
    app.reserve("BAD", 1, "o1", 1_000).await;
    let before = app.snapshot().await;
    let patch = |code: &str, body: Value| Request::patch(path::voucher(code), body.to_string());
    let validate =
        |code: &str, body: Value| Request::post(path::validations(code), body.to_string());
    let create = |body: Value| Request::post(path::vouchers(), body.to_string());
    let vouchers = |query: &str| Request::get(format!("{}?{query}", path::vouchers()));
    let reservations = |query: &str| Request::get(format!("{}?{query}", path::reservations("BAD")));
    let (starts, ends) = ("2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z");
    let invalid = (StatusCode::BAD_REQUEST, "INVALID_REQUEST");
    let not_found = (StatusCode::NOT_FOUND, "VOUCHER_NOT_FOUND");
    // (case, request, (status, error code), what the message must name)
    #[rustfmt::skip]
    let cases: Vec<(&str, Request, (StatusCode, &str), &str)> = vec![
        ("patch: totalLimit zero", patch("BAD", json!({"totalLimit": 0})), invalid, "totalLimit"),
        ("patch: totalLimit a word", patch("BAD", json!({"totalLimit": "ten"})), invalid, "totalLimit"),
        ("patch: perUserLimit negative", patch("BAD", json!({"perUserLimit": -1})), invalid, "perUserLimit"),
        ("patch: budgetAmount negative", patch("BAD", json!({"budgetAmount": -1})), invalid, "budgetAmount"),
        ("patch: budgetAmount a word", patch("BAD", json!({"budgetAmount": "lots"})), invalid, "budgetAmount"),
        ("patch: active a word", patch("BAD", json!({"active": "no"})), invalid, "active"),
        ("patch: flashSale", patch("BAD", json!({"flashSale": true})), invalid, "flashSale"),
        ("patch: amount and percent", patch("BAD", json!({"discountAmount": 1, "discountPercent": 5})), invalid, "discountPercent"),
        ("patch: a cap without a percent", patch("BAD", json!({"maxDiscountAmount": 5})), invalid, "maxDiscountAmount"),
        ("patch: discountPercent zero", patch("BAD", json!({"discountPercent": 0})), invalid, "discountPercent"),
        ("patch: endsAt in the past", patch("BAD", json!({"endsAt": "2000-01-01T00:00:00Z"})), invalid, "endsAt"),
        ("patch: startsAt not a time", patch("BAD", json!({"startsAt": "yesterday"})), invalid, "startsAt"),
        ("patch: endsAt past year 9999", patch("BAD", json!({"endsAt": "+10000-01-01T00:00:00Z"})), invalid, "endsAt"),
        ("patch: counterSlots zero", patch("BAD", json!({"counterSlots": 0})), invalid, "counterSlots"),
        ("patch: more counterSlots than uses", patch("BAD", json!({"counterSlots": 11})), invalid, "counterSlots"),
        ("patch: no such voucher", patch("NOPE", json!({"active": false})), not_found, "NOPE"),
        ("validate: customerId zero", validate("BAD", json!({"customerId": 0, "orderAmount": 1})), invalid, "customerId"),
        ("validate: no orderAmount", validate("BAD", json!({"customerId": 1})), invalid, "orderAmount"),
        ("validate: orderAmount negative", validate("BAD", json!({"customerId": 1, "orderAmount": -5})), invalid, "orderAmount"),
        ("validate: code with a space", validate("b%20d", json!({"customerId": 1, "orderAmount": 5})), invalid, "code"),
        ("create: amount and percent", create(json!({"code": "X", "discountAmount": 1, "discountPercent": 5, "totalLimit": 1, "startsAt": starts, "endsAt": ends})), invalid, "discountPercent"),
        ("create: startsAt before year 1", create(json!({"code": "X", "discountAmount": 1, "totalLimit": 1, "startsAt": "-5000-01-01T00:00:00Z", "endsAt": ends})), invalid, "startsAt"),
        ("create: no discount", create(json!({"code": "X", "totalLimit": 1, "startsAt": starts, "endsAt": ends})), invalid, "discountAmount"),
        ("create: discountPercent past 100", create(json!({"code": "X", "discountPercent": 101, "totalLimit": 1, "startsAt": starts, "endsAt": ends})), invalid, "discountPercent"),
        ("list vouchers: limit zero", vouchers("limit=0"), invalid, "limit"),
        ("list vouchers: limit past 100", vouchers("limit=101"), invalid, "limit"),
        ("list vouchers: not a cursor", vouchers("after=zzz"), invalid, "after"),
        ("list vouchers: unknown parameter", vouchers("sort=code"), invalid, "sort"),
        ("list reservations: unknown status", reservations("status=GONE"), invalid, "status"),
        ("list reservations: customerId a word", reservations("customerId=abc"), invalid, "customerId"),
        ("list reservations: limit a word", reservations("limit=x"), invalid, "limit"),
        ("list reservations: not a cursor", reservations("after=bad"), invalid, "after"),
        ("list reservations: no such voucher", Request::get(path::reservations("NOPE")), not_found, "voucher"),
        ("DELETE on vouchers", Request::delete(path::vouchers()), (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED"), "DELETE"),
    ];
    for (case, request, (status, error), names) in cases {
        let (got, text) = app.send(&request).await;
        assert_eq!(
            (got, error_of(&text).as_str()),
            (status, error),
            "{case} ({request}): {text}"
        );
        assert!(
            text.contains(names),
            "{case} ({request}): {text} should name {names}"
        );
    }
    // A cursor of the voucher listing (a real one, from a page that has a next) is no cursor of
    // a reservation listing.
    assert_eq!(app.snapshot().await, before, "nothing written");
    app.voucher("BAD2", 1, json!({})).await;
    let before = app.snapshot().await;
    let (_, page) = app.list_vouchers(&[("limit", "1")]).await;
    let cursor = page["next"].as_str().expect("two vouchers, one per page");
    let (status, body) = app.list_reservations("BAD", &[("after", cursor)]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("after"), "{body}");
    assert_eq!(app.snapshot().await, before, "nothing written");
}

/// A use the gate granted that Postgres does not have yet (mode A between the gate and the
/// write, mode B with the event on the queue) counts: the limit may not go below it.
#[tokio::test]
async fn a_lower_limit_counts_the_uses_still_on_their_way_to_the_database() {
    let app = spawn(Mode::flash().slots(8).grouped()).await;
    app.voucher("FLYING", 3, json!({})).await;
    assert_eq!(
        app.reserve("FLYING", 1, "landed", 1_000).await.0,
        StatusCode::CREATED
    );
    let gate = app.app.gate();
    let code = harness::voucher_code("FLYING");
    let now = Utc::now().timestamp_millis();
    let reply = gate.reserve(&code, 2, "flying", 1_000, now).await.unwrap();
    assert_eq!(reply.outcome, shared::domain::ReserveOutcome::Reserved);
    assert_eq!(
        app.view("FLYING").await["usedCount"],
        1,
        "Postgres holds one"
    );

    let before = app.snapshot().await;
    let (status, body) = app.patch_voucher("FLYING", json!({"totalLimit": 1})).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::CONFLICT, &json!("LIMIT_BELOW_USED")),
        "{body}"
    );
    assert_eq!(app.snapshot().await, before);
    assert_eq!(
        app.gate_remaining("FLYING").await,
        Some(1),
        "the gate kept its count"
    );
    let (status, body) = app.patch_voucher("FLYING", json!({"totalLimit": 2})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(app.gate_remaining("FLYING").await, Some(0));
    assert_eq!(
        reserve_many(&app, "FLYING", 10, 13).await,
        0,
        "sold out: two held, limit two"
    );
}

/// With Redis unreachable, a flash voucher cannot change: its gate would keep deciding by the
/// old rules. The change is refused whole, nothing written anywhere.
#[tokio::test]
async fn a_flash_voucher_does_not_change_while_its_gate_is_unreachable() {
    let app = Arc::new(
        TestApp::builder()
            .flash(true)
            .with_redis_proxy()
            .spawn()
            .await,
    );
    app.voucher("DARK", 5, json!({})).await;
    let before = app.snapshot().await;
    app.redis_proxy().set_up(false);
    let (status, body) = app
        .patch_voucher("DARK", json!({"totalLimit": 1, "active": false}))
        .await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::SERVICE_UNAVAILABLE, &json!("UNAVAILABLE")),
        "{body}"
    );
    app.redis_proxy().set_up(true);
    assert_eq!(app.snapshot().await, before, "nothing written");
    assert_eq!(app.gate_remaining("DARK").await, Some(5));
    assert_eq!(app.gate_meta("DARK", "active").await.as_deref(), Some("1"));
}

/// A change whose last gate step failed leaves the gate stricter than Postgres; the sweep
/// brings its rules to Postgres' own, but never over newer ones.
#[tokio::test]
async fn the_sweep_brings_the_gates_rules_to_the_databases() {
    let app = spawn(Mode::flash().slots(8).grouped()).await;
    app.voucher("SYNC", 5, json!({})).await;
    let (status, _) = app.patch_voucher("SYNC", json!({"perUserLimit": 3})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        app.gate_meta("SYNC", "per_user").await.as_deref(),
        Some("3")
    );
    assert_eq!(app.gate_meta("SYNC", "version").await.as_deref(), Some("2"));

    // What step 1 left when step 3 did not reach Redis: the old, stricter limit.
    app.set_gate_meta("SYNC", "per_user", "1").await;
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.rules_synced, 1);
    assert_eq!(
        app.gate_meta("SYNC", "per_user").await.as_deref(),
        Some("3")
    );
    assert_eq!(
        app.app.sweeper().sweep().await.unwrap().rules_synced,
        0,
        "nothing differs"
    );

    // Rules newer than what the sweep read are left alone.
    app.set_gate_meta("SYNC", "version", "9").await;
    app.set_gate_meta("SYNC", "per_user", "2").await;
    assert_eq!(app.app.sweeper().sweep().await.unwrap().rules_synced, 0);
    assert_eq!(
        app.gate_meta("SYNC", "per_user").await.as_deref(),
        Some("2")
    );
}
