//! Orders of several codes, all or none (`/orders/{orderId}`): the discounts stacked fixed
//! first then percentages, each code's use its own reservation; a refusal names the code and
//! leaves nothing held; exclusive codes alone; replays byte for byte; confirm and release of
//! the whole order; an exact count under a burst of orders racing for a scarce code (standard,
//! flash and a flash code of another gate, on one Redis and on a Redis Cluster); a failure
//! between two codes, then the sweeper, leaving nothing held; expiry of every code together.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::{cluster_url, Broker, Mode, TestApp};

fn body(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// The order's codes' reservation statuses, as `GET /vouchers/{code}/reservations/{order}`
/// answers them ("NONE": not found).
async fn statuses(app: &TestApp, order: &str, codes: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for code in codes {
        let (status, view) = app.get_reservation(code, order).await;
        out.push(if status == StatusCode::NOT_FOUND {
            "NONE".to_owned()
        } else {
            view["status"].as_str().unwrap_or("?").to_owned()
        });
    }
    out
}

/// Uses held (RESERVED or CONFIRMED) of a voucher, as its view counts them.
async fn used(app: &TestApp, code: &str) -> i64 {
    app.view(code).await["usedCount"].as_i64().unwrap()
}

#[tokio::test]
async fn fixed_discounts_come_first_and_percentages_apply_to_what_is_left() {
    let app = TestApp::spawn().await;
    app.voucher("FIX30", 10, json!({"discountAmount": 30_000}))
        .await;
    app.voucher(
        "PCT10",
        10,
        json!({"discountAmount": null, "discountPercent": 10}),
    )
    .await;
    app.voucher(
        "PCT50",
        10,
        json!({"discountAmount": null, "discountPercent": 50, "maxDiscountAmount": 20_000}),
    )
    .await;
    app.voucher("FIX80", 10, json!({"discountAmount": 80_000}))
        .await;
    app.voucher("FIX50", 10, json!({"discountAmount": 50_000}))
        .await;

    // FIX30 first (30,000, 70,000 left), then PCT10 (7,000, 63,000 left), then PCT50 (31,500
    // capped at 20,000); the items in the order given.
    let (status, text) = app
        .reserve_order("o-stack", 7, 100_000, &["PCT10", "FIX30", "PCT50"])
        .await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let order = body(&text);
    assert_eq!(order["status"], "RESERVED");
    assert_eq!(order["discountAmount"], 57_000);
    assert_eq!(
        order["items"],
        json!([
            {"code": "PCT10", "discountAmount": 7_000},
            {"code": "FIX30", "discountAmount": 30_000},
            {"code": "PCT50", "discountAmount": 20_000},
        ])
    );
    // Each code's use is its own reservation, with the discount it gave.
    let (_, page) = app.list_reservations("PCT10", &[]).await;
    assert_eq!(
        page["items"][0]["orderCodes"],
        json!(["PCT10", "FIX30", "PCT50"])
    );
    let (_, r) = app.get_reservation("PCT10", "o-stack").await;
    assert_eq!(
        (&r["status"], &r["discountAmount"]),
        (&json!("RESERVED"), &json!(7_000))
    );

    // The total never exceeds the order: the second fixed discount gets what is left.
    let (status, text) = app
        .reserve_order("o-cap", 8, 100_000, &["FIX80", "FIX50"])
        .await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let order = body(&text);
    assert_eq!(order["discountAmount"], 100_000);
    assert_eq!(order["items"][1]["discountAmount"], 20_000);
}

#[tokio::test]
async fn an_order_replays_confirms_and_releases_as_a_whole_in_mode_a() {
    an_order_replays_confirms_and_releases_as_a_whole(TestApp::spawn().await).await;
}

/// Mode B: the flash code's use travels as an event; the order's answers are the same.
#[tokio::test]
async fn an_order_replays_confirms_and_releases_as_a_whole_in_mode_b() {
    let app = TestApp::spawn_in(Mode::flash().mode_b(Broker::Kafka)).await;
    let _consumer = app.start_kafka_consumer();
    an_order_replays_confirms_and_releases_as_a_whole(app).await;
}

async fn an_order_replays_confirms_and_releases_as_a_whole(app: TestApp) {
    app.voucher("STD-A", 10, json!({"flashSale": false})).await;
    app.voucher("FLASH-A", 10, json!({"flashSale": true})).await;
    let codes = ["STD-A", "FLASH-A"];

    let first = app.reserve_order("o-1", 7, 500_000, &codes).await;
    assert_eq!(first.0, StatusCode::CREATED, "{}", first.1);
    // The same body again: the same bytes; another body under the orderId: 409.
    assert_eq!(app.reserve_order("o-1", 7, 500_000, &codes).await, first);
    for (customer, amount, codes) in [
        (8, 500_000, &codes[..]),
        (7, 400_000, &codes[..]),
        (7, 500_000, &["STD-A"][..]),
        (7, 500_000, &["FLASH-A", "STD-A"][..]),
    ] {
        let (status, text) = app.reserve_order("o-1", customer, amount, codes).await;
        assert_eq!(status, StatusCode::CONFLICT, "{text}");
        assert_eq!(body(&text)["error"], "ORDER_CONFLICT");
    }
    assert_eq!(
        (used(&app, "STD-A").await, used(&app, "FLASH-A").await),
        (1, 1)
    );

    let (status, view) = app.get_order("o-1").await;
    assert_eq!(
        (status, &view["status"]),
        (StatusCode::OK, &json!("RESERVED"))
    );

    // Confirm: every code CONFIRMED; again: the same.
    for _ in 0..2 {
        let (status, view) = app.confirm_order("o-1").await;
        assert_eq!(status, StatusCode::OK, "{view}");
        assert_eq!(view["status"], "CONFIRMED");
    }
    assert_eq!(
        statuses(&app, "o-1", &codes).await,
        ["CONFIRMED", "CONFIRMED"]
    );
    // A retry of the reserve still gets its first bytes.
    assert_eq!(app.reserve_order("o-1", 7, 500_000, &codes).await, first);

    // Release (a refund): every code RELEASED, every use back; again: 204.
    for _ in 0..2 {
        let (status, _) = app.release_order("o-1").await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    assert_eq!(
        statuses(&app, "o-1", &codes).await,
        ["RELEASED", "RELEASED"]
    );
    assert_eq!(
        (used(&app, "STD-A").await, used(&app, "FLASH-A").await),
        (0, 0)
    );
    let (_, view) = app.get_order("o-1").await;
    assert_eq!(view["status"], "RELEASED");
    let (status, text) = app.reserve_order("o-1", 7, 500_000, &codes).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body(&text)["error"], "RESERVATION_RELEASED");
    let (status, view) = app.confirm_order("o-1").await;
    assert_eq!(
        (status, &view["error"]),
        (StatusCode::CONFLICT, &json!("RESERVATION_RELEASED"))
    );

    // An order nobody made.
    for (status, view) in [
        app.get_order("o-none").await,
        app.confirm_order("o-none").await,
        app.release_order("o-none").await,
    ] {
        assert_eq!(
            (status, &view["error"]),
            (StatusCode::NOT_FOUND, &json!("ORDER_NOT_FOUND"))
        );
    }
}

#[tokio::test]
async fn a_refusal_names_its_code_and_leaves_nothing_held() {
    let app = TestApp::spawn().await;
    app.voucher("PLENTY", 10, json!({})).await;
    app.voucher("FLASH-P", 10, json!({"flashSale": true})).await;
    app.voucher("ONE", 1, json!({})).await;
    app.voucher("MIN", 10, json!({"minOrderAmount": 400_000}))
        .await;
    assert_eq!(
        app.reserve("ONE", 1, "taken", 500_000).await.0,
        StatusCode::CREATED
    );

    // PLENTY and FLASH-P are held for a moment, then given back before the 409.
    let (status, text) = app
        .reserve_order("o-out", 7, 500_000, &["PLENTY", "FLASH-P", "ONE"])
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{text}");
    let refusal = body(&text);
    assert_eq!(
        (&refusal["error"], &refusal["code"]),
        (&json!("OUT_OF_STOCK"), &json!("ONE"))
    );
    assert_eq!(
        (used(&app, "PLENTY").await, used(&app, "FLASH-P").await),
        (0, 0)
    );
    assert_eq!(
        statuses(&app, "o-out", &["PLENTY", "FLASH-P", "ONE"]).await,
        ["RELEASED", "RELEASED", "NONE"]
    );
    // A retry gets the same refusal, byte for byte; the order holds nothing.
    assert_eq!(
        app.reserve_order("o-out", 7, 500_000, &["PLENTY", "FLASH-P", "ONE"])
            .await,
        (status, text)
    );
    assert_eq!(app.get_order("o-out").await.0, StatusCode::NOT_FOUND);
    assert_eq!(app.release_order("o-out").await.0, StatusCode::NO_CONTENT);

    // The minimum is checked against what the discounts before it left: 500,000 - 100,000.
    let (status, text) = app
        .reserve_order("o-min", 7, 500_000, &["PLENTY", "MIN"])
        .await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let (status, text) = app
        .reserve_order("o-min2", 8, 450_000, &["PLENTY", "MIN"])
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    let refusal = body(&text);
    assert_eq!(
        (&refusal["reason"], &refusal["code"]),
        (&json!("MIN_ORDER_AMOUNT"), &json!("MIN"))
    );
    assert_eq!(used(&app, "PLENTY").await, 1, "o-min's only");

    // An unknown code: 404 naming it, nothing written.
    let (status, text) = app
        .reserve_order("o-404", 7, 500_000, &["PLENTY", "NOPE"])
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
    assert_eq!(body(&text)["code"], "NOPE");
    assert_eq!(app.get_order("o-404").await.0, StatusCode::NOT_FOUND);
    assert_eq!(statuses(&app, "o-404", &["PLENTY"]).await, ["NONE"]);

    // Bad bodies: 400 naming the field, nothing written.
    for codes in [
        json!([]),
        json!(["A", "B", "C", "D", "E", "F"]),
        json!(["PLENTY", "PLENTY"]),
        json!(["bad code"]),
        json!("PLENTY"),
    ] {
        let (status, view) = app
            .json(
                "POST",
                "/orders/o-bad/reservations",
                Some(json!({"customerId": 7, "orderAmount": 1, "codes": codes})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{codes}: {view}");
        assert!(
            view["message"].as_str().unwrap().contains("codes"),
            "{view}"
        );
    }
    let (status, _) = app
        .json(
            "POST",
            "/orders/bad%20id/reservations",
            Some(json!({"customerId": 7, "orderAmount": 1, "codes": ["PLENTY"]})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(app.get_order("o-bad").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_exclusive_code_is_never_combined_and_works_alone() {
    let app = TestApp::spawn().await;
    app.voucher("PLENTY", 10, json!({})).await;
    let created = app.voucher("SOLO", 10, json!({"exclusive": true})).await;
    assert_eq!(created["exclusive"], true);
    assert_eq!(app.view("PLENTY").await["exclusive"], false);
    let now = chrono::Utc::now();
    let (status, campaign) = app
        .create_campaign(json!({
            "discountAmount": 1_000, "perCodeLimit": 1, "exclusive": true,
            "startsAt": (now - chrono::Duration::minutes(5)).to_rfc3339(),
            "endsAt": (now + chrono::Duration::days(1)).to_rfc3339(),
            "codes": ["CAMP-SOLO"],
        }))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{campaign}");
    assert_eq!(campaign["exclusive"], true);

    for solo in ["SOLO", "CAMP-SOLO"] {
        let (status, text) = app
            .reserve_order("o-x", 7, 500_000, &["PLENTY", solo])
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{text}");
        let refusal = body(&text);
        assert_eq!(
            (&refusal["error"], &refusal["code"]),
            (&json!("NOT_COMBINABLE"), &json!(solo))
        );
        assert_eq!(used(&app, "PLENTY").await, 0);
    }
    let (status, text) = app.reserve_order("o-solo", 7, 500_000, &["SOLO"]).await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    assert_eq!(
        app.reserve("SOLO", 8, "o-single", 500_000).await.0,
        StatusCode::CREATED
    );
}

/// Orders of three codes race for a flash code of 5 uses: a standard code, the scarce flash
/// code, and a flash code of its own gate. Exactly 5 orders are granted; every code holds
/// exactly their 5 uses, so no refused order kept a use.
async fn a_burst_of_orders_holds_exactly_the_scarce_codes_uses(app: TestApp) {
    let app = Arc::new(app);
    app.voucher("STD-B", 1_000, json!({"flashSale": false}))
        .await;
    app.voucher("SCARCE", 5, json!({"flashSale": true})).await;
    app.voucher("FLASH-B", 1_000, json!({"flashSale": true}))
        .await;
    let codes = ["STD-B", "SCARCE", "FLASH-B"];
    let barrier = Arc::new(tokio::sync::Barrier::new(60));
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let (app, barrier) = (app.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                app.reserve_order(&format!("burst-{i}"), 100 + i, 500_000, &codes)
                    .await
            })
        })
        .collect();
    let mut granted = 0;
    for task in tasks {
        let (status, text) = task.await.unwrap();
        match status {
            StatusCode::CREATED => granted += 1,
            StatusCode::CONFLICT => {
                let refusal = body(&text);
                assert_eq!(
                    (&refusal["error"], &refusal["code"]),
                    (&json!("OUT_OF_STOCK"), &json!("SCARCE")),
                    "{text}"
                );
            }
            other => panic!("{other}: {text}"),
        }
    }
    assert_eq!(granted, 5);
    for code in codes {
        assert_eq!(used(&app, code).await, 5, "{code}");
    }
}

#[tokio::test]
async fn a_burst_of_orders_on_one_redis_holds_exactly_the_scarce_codes_uses() {
    a_burst_of_orders_holds_exactly_the_scarce_codes_uses(TestApp::spawn().await).await;
}

#[tokio::test]
async fn a_burst_of_orders_on_a_redis_cluster_holds_exactly_the_scarce_codes_uses() {
    let app = TestApp::builder()
        .configure(|s| {
            s.redis.url = cluster_url();
            s.redis.cluster = true;
        })
        .spawn()
        .await;
    a_burst_of_orders_holds_exactly_the_scarce_codes_uses(app).await;
}

/// Redis goes away between the order's two codes: the standard code is held, the flash code's
/// reserve fails (503 naming it), and the order stays pending. Left so (a client that never
/// retries, or a process that died there), the sweeper gives the held use back once the order
/// is older than the lease, and not before; a retry after Redis is back goes on with the order.
#[tokio::test]
async fn a_failure_between_two_codes_leaves_nothing_held_after_the_sweep() {
    let app = TestApp::builder().with_redis_proxy().spawn().await;
    app.voucher("STD-C", 10, json!({})).await;
    app.voucher("FLASH-C", 10, json!({"flashSale": true})).await;
    let codes = ["STD-C", "FLASH-C"];

    app.redis_proxy().set_up(false);
    app.redis_proxy().close_connections();
    let (status, text) = app.reserve_order("o-cut", 7, 500_000, &codes).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert_eq!(body(&text)["code"], "FLASH-C");
    assert_eq!(
        used(&app, "STD-C").await,
        1,
        "held when the second code failed"
    );
    assert_eq!(
        app.get_order("o-cut").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );

    // Younger than the lease: the sweep leaves it (its request may still be deciding).
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.orders_abandoned, 0);
    assert_eq!(used(&app, "STD-C").await, 1);

    // Past the lease: released, and its use back in the same sweep.
    app.db
        .execute(
            "UPDATE customer_order SET created_at = created_at - interval '2 minutes'
              WHERE order_id = 'o-cut'",
            &[],
        )
        .await
        .unwrap();
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!((report.orders_abandoned, report.expired), (1, 1));
    assert_eq!(used(&app, "STD-C").await, 0);
    assert_eq!(statuses(&app, "o-cut", &codes).await, ["RELEASED", "NONE"]);
    let (_, view) = app.get_order("o-cut").await;
    assert_eq!(
        view["error"], "ORDER_NOT_FOUND",
        "never reserved: nothing to show"
    );
    let (status, text) = app.reserve_order("o-cut", 7, 500_000, &codes).await;
    assert_eq!(
        (status, body(&text)["error"].clone()),
        (StatusCode::CONFLICT, json!("RESERVATION_RELEASED"))
    );

    // A retry once Redis is back goes on with the pending order.
    let (status, _) = app.reserve_order("o-retry", 8, 500_000, &codes).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    app.redis_proxy().set_up(true);
    let (status, text) = app.reserve_order("o-retry", 8, 500_000, &codes).await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    assert_eq!(
        (used(&app, "STD-C").await, used(&app, "FLASH-C").await),
        (1, 1)
    );
}

/// The order expires with its first code: the sweep that finds it due releases every code,
/// the one with an hour left too.
#[tokio::test]
async fn an_orders_codes_expire_together() {
    let app = TestApp::spawn().await;
    app.voucher("SHORT", 10, json!({"reservationTtlSeconds": 1}))
        .await;
    app.voucher(
        "LONG",
        10,
        json!({"reservationTtlSeconds": 3600, "flashSale": true}),
    )
    .await;
    let (status, text) = app
        .reserve_order("o-exp", 7, 500_000, &["SHORT", "LONG"])
        .await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
    let (_, single) = app.get_reservation("SHORT", "o-exp").await;
    assert_eq!(
        body(&text)["expiresAt"],
        single["expiresAt"],
        "the first expiry"
    );

    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!((report.orders_expired, report.expired), (1, 2));
    assert_eq!(
        statuses(&app, "o-exp", &["SHORT", "LONG"]).await,
        ["RELEASED", "RELEASED"]
    );
    assert_eq!(
        (used(&app, "SHORT").await, used(&app, "LONG").await),
        (0, 0)
    );
    let (_, view) = app.get_order("o-exp").await;
    assert_eq!(view["status"], "RELEASED");
    let (status, view) = app.confirm_order("o-exp").await;
    assert_eq!(
        (status, &view["error"]),
        (StatusCode::CONFLICT, &json!("RESERVATION_RELEASED"))
    );
}

/// A refused order is kept a day (its retries get the refusal), a released or confirmed one 30
/// days; then the sweeper deletes it. Its codes' reservations stay.
#[tokio::test]
async fn settled_orders_are_deleted_after_their_keeping() {
    let app = TestApp::spawn().await;
    app.voucher("KEEP", 10, json!({})).await;
    app.voucher("ONE", 1, json!({})).await;
    assert_eq!(
        app.reserve("ONE", 1, "taken", 500_000).await.0,
        StatusCode::CREATED
    );
    let refused = app
        .reserve_order("o-refused", 7, 500_000, &["KEEP", "ONE"])
        .await;
    assert_eq!(refused.0, StatusCode::CONFLICT);
    for (customer, order) in [(8, "o-released"), (9, "o-confirmed"), (10, "o-young")] {
        let (status, text) = app.reserve_order(order, customer, 500_000, &["KEEP"]).await;
        assert_eq!(status, StatusCode::CREATED, "{text}");
    }
    assert_eq!(
        app.release_order("o-released").await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(app.confirm_order("o-confirmed").await.0, StatusCode::OK);
    assert_eq!(app.confirm_order("o-young").await.0, StatusCode::OK);

    let age = |order: &'static str, days: i32| {
        let db = &app.db;
        async move {
            db.execute(
                "UPDATE customer_order SET settled_at = settled_at - make_interval(days => $2)
                  WHERE order_id = $1",
                &[&order, &days],
            )
            .await
            .unwrap();
        }
    };
    // A day is enough for the refusal, not for the others.
    for order in ["o-refused", "o-released", "o-confirmed"] {
        age(order, 2).await;
    }
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.orders_retired, 1);
    let (status, text) = app
        .reserve_order("o-refused", 7, 500_000, &["KEEP", "ONE"])
        .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "decided again: KEEP's orderId is spent"
    );
    assert_eq!(body(&text)["error"], "RESERVATION_RELEASED");

    for order in ["o-released", "o-confirmed"] {
        age(order, 30).await;
    }
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.orders_retired, 2);
    assert_eq!(app.get_order("o-confirmed").await.0, StatusCode::NOT_FOUND);
    assert_eq!(app.get_order("o-young").await.0, StatusCode::OK);
    assert_eq!(
        statuses(&app, "o-confirmed", &["KEEP"]).await,
        ["CONFIRMED"]
    );
}

/// Retries of one order arriving together (a client that timed out and tried again): one
/// request decides it, the others are answered 503 while it does, or its answer once it has.
/// No retry gives back what another was granted, so every code is held once, or none is.
#[tokio::test]
async fn twin_requests_of_one_order_decide_it_once() {
    let app = Arc::new(TestApp::spawn().await);
    app.voucher("TWIN-A", 10, json!({})).await;
    app.voucher("TWIN-F", 10, json!({"flashSale": true})).await;
    app.voucher("TWIN-1", 1, json!({})).await;
    assert_eq!(
        app.reserve("TWIN-1", 1, "taken", 500_000).await.0,
        StatusCode::CREATED
    );
    for (order, customer, codes, want) in [
        ("o-twins", 7, ["TWIN-A", "TWIN-F"], StatusCode::CREATED),
        (
            "o-twins-refused",
            8,
            ["TWIN-F", "TWIN-1"],
            StatusCode::CONFLICT,
        ),
    ] {
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (app, barrier) = (app.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    app.reserve_order(order, customer, 500_000, &codes).await
                })
            })
            .collect();
        let mut answers = Vec::new();
        for task in tasks {
            let (status, text) = task.await.unwrap();
            assert!(
                status == want || status == StatusCode::SERVICE_UNAVAILABLE,
                "{status}: {text}"
            );
            if status == want {
                answers.push(text);
            }
        }
        // Every decided answer is the same, and a retry now gets it too.
        let (status, last) = app.reserve_order(order, customer, 500_000, &codes).await;
        assert_eq!(status, want, "{last}");
        assert!(answers.iter().all(|a| *a == last), "{answers:?} / {last}");
    }
    assert_eq!(
        (used(&app, "TWIN-A").await, used(&app, "TWIN-F").await),
        (1, 1)
    );
    assert_eq!(used(&app, "TWIN-1").await, 1, "the order taken before");
    assert_eq!(
        statuses(&app, "o-twins-refused", &["TWIN-F", "TWIN-1"]).await,
        ["RELEASED", "NONE"]
    );
}
