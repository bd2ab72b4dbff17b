//! The sweeper (docs/ARCHITECTURE.md, "The sweeper") on real Postgres and Redis: expiry in
//! both modes, two sweeps at once, orphan recovery, drift repair, a large backlog in bounded
//! batches, retirement of a sale that is over, and the Lambda entry with an EventBridge fixture.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::json;
use shared::domain::{ReserveOutcome, Status};
use shared::store::{Merge, MergeOutcome};

use crate::harness::{error_of, reserve_req, voucher_code, wait_for, TestApp};

async fn expired_uses_come_back(flash: bool) {
    let app = TestApp::spawn_mode(flash).await;
    app.voucher("BRIEF", 3, json!({"reservationTtlSeconds": 1}))
        .await;
    for i in 1..=3 {
        assert_eq!(
            app.reserve("BRIEF", i, &format!("o{i}"), 10).await.0,
            StatusCode::CREATED
        );
    }
    assert_eq!(app.view("BRIEF").await["remaining"], 0);
    // A fixed wait on purpose: the clock passing the 1 s TTL is what makes them due.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.expired, 3);
    let view = app.view("BRIEF").await;
    assert_eq!(
        (view["remaining"].as_i64(), view["reservedCount"].as_i64()),
        (Some(3), Some(0))
    );
    if flash {
        assert_eq!(app.gate_remaining("BRIEF").await, Some(3));
    }
    let (_, r) = app.get_reservation("BRIEF", "o1").await;
    assert_eq!(r["status"], "RELEASED");
    // The same customers come back with new orderIds.
    for i in 1..=3 {
        assert_eq!(
            app.reserve("BRIEF", i, &format!("again{i}"), 10).await.0,
            StatusCode::CREATED
        );
    }
    assert_eq!(
        app.app.sweeper().sweep().await.unwrap().expired,
        0,
        "nothing else is due"
    );
}

#[tokio::test]
async fn expired_standard_reservations_come_back() {
    expired_uses_come_back(false).await;
}

#[tokio::test]
async fn expired_flash_reservations_come_back_to_the_gate_too() {
    expired_uses_come_back(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_sweeps_at_once_release_each_of_5000_once() {
    let app = Arc::new(TestApp::spawn_mode(true).await);
    app.voucher(
        "MANY",
        5000,
        json!({"reservationTtlSeconds": 1, "perUserLimit": 5000}),
    )
    .await;
    let next = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let workers: Vec<_> = (0..32)
        .map(|_| {
            let (app, next) = (app.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= 5000 {
                        return;
                    }
                    let r = reserve_req("MANY", 1 + i % 700, &format!("o{i}"));
                    app.app.reservations().reserve(&r).await.unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(app.counts("MANY").await.used_count, 5000);
    assert_eq!(app.gate_remaining("MANY").await, Some(0));
    // A fixed wait on purpose: the clock passing the 1 s TTL is what makes them due.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let (a, b) = tokio::join!(app.app.sweeper().sweep(), app.app.sweeper().sweep());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.expired + b.expired, 5000, "{a:?} {b:?}");
    let counts = app.counts("MANY").await;
    assert_eq!(
        (
            counts.used_count,
            counts.active_rows,
            counts.customer_counter_sum
        ),
        (0, 0, 0)
    );
    assert_eq!(app.gate_remaining("MANY").await, Some(5000));
    let released: i64 = app
        .db
        .query_one(
            "SELECT count(*) FROM redemption WHERE status = 3 AND release_reason = 'EXPIRED'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(released, 5000);
}

#[tokio::test]
async fn an_orphan_comes_back_and_its_late_event_changes_nothing() {
    let app = TestApp::builder()
        .flash(true)
        .configure(|s| s.sweep.orphan_grace = Duration::ZERO)
        .spawn()
        .await;
    app.voucher("ORPH", 5, json!({"reservationTtlSeconds": 1}))
        .await;
    let gate = app.app.gate();
    // The gate granted two uses, then the process "crashed" before Postgres: one long ago,
    // one just now (still in flight, not an orphan yet).
    let old = Utc::now().timestamp_millis() - 10_000;
    let Some(held) = gate
        .reserve(&voucher_code("ORPH"), 7, "lost", 4321, old)
        .await
        .unwrap()
        .held
    else {
        panic!("gate refused");
    };
    let now = Utc::now().timestamp_millis();
    assert_eq!(
        gate.reserve(&voucher_code("ORPH"), 8, "young", 10, now)
            .await
            .unwrap()
            .outcome,
        ReserveOutcome::Reserved
    );
    assert_eq!(app.gate_remaining("ORPH").await, Some(3));

    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.orphans_recovered, 1);
    assert_eq!(
        app.gate_remaining("ORPH").await,
        Some(4),
        "the orphan's use is back; the young one is held"
    );
    let (_, r) = app.get_reservation("ORPH", "lost").await;
    assert_eq!(r["status"], "RELEASED");
    let amount: i64 = app
        .db
        .query_one(
            "SELECT order_amount FROM redemption WHERE voucher_code = 'ORPH' AND order_id = 'lost'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        amount, 4321,
        "the recovered row keeps the order's amount from the gate"
    );

    // The event for it arrives late: it merges into nothing.
    let code = voucher_code("ORPH");
    let late = app
        .app
        .store()
        .merge(&Merge::held(&code, "lost", held, 10, Status::Reserved).revoking())
        .await
        .unwrap();
    assert_eq!(late.outcome, MergeOutcome::Unchanged);
    assert_eq!(app.counts("ORPH").await.used_count, 0);
    let (status, _) = app.reserve("ORPH", 7, "lost", 10).await;
    assert_eq!(status, StatusCode::CONFLICT);
}

/// Mode B, a consumer behind by more than the TTL: the orphan sweep looks up which pending
/// orders Postgres has, then tombstones the others, and a confirm read from the gate's entry
/// may write the row in between. The confirm wins: the tombstone is written only where no row
/// exists or the row is still RESERVED. Before the fix the sweep merged RELEASED over the
/// CONFIRMED row (`3|EXPIRED`) and the gate sold the use again.
#[tokio::test]
async fn a_confirm_between_the_orphan_sweeps_look_up_and_its_write_wins() {
    let app = TestApp::builder()
        .with_events(3)
        .configure(|s| {
            s.events.poll = false;
            s.sweep.orphan_grace = Duration::ZERO;
        })
        .spawn()
        .await;
    app.voucher(
        "LATE",
        5,
        json!({"flashSale": true, "reservationTtlSeconds": 1}),
    )
    .await;
    // Created within the warm-up lead: loaded into the gate at creation.
    let (gate, code) = (app.app.gate(), voucher_code("LATE"));
    let long_ago = Utc::now().timestamp_millis() - 10_000;
    let held = |order: &'static str, customer: i64| {
        let code = code.clone();
        async move {
            gate.reserve(&code, customer, order, 100, long_ago)
                .await
                .unwrap()
                .held
                .expect("granted")
        }
    };

    // The exact interleaving: the sweep found no row for "paid" (its look-up), then the
    // confirm wrote CONFIRMED, then the sweep's write comes.
    let paid = held("paid", 1).await;
    let (status, confirmed) = app.confirm("LATE", "paid").await;
    assert_eq!(
        (status, &confirmed["status"]),
        (StatusCode::OK, &json!("CONFIRMED"))
    );
    let tombstone = Merge::held(&code, "paid", paid, 100, Status::Released)
        .reason(shared::domain::ReleaseReason::Expired);
    let recovered = app.app.store().recover_orphan(&tombstone).await.unwrap();
    assert_eq!(recovered.outcome, MergeOutcome::Unchanged);
    assert_eq!(recovered.row.unwrap().status, Status::Confirmed);
    // No row, or a RESERVED one: the tombstone is written, and the use comes back.
    let lost = held("lost", 2).await;
    let tombstone = Merge::held(&code, "lost", lost, 100, Status::Released)
        .reason(shared::domain::ReleaseReason::Expired);
    let recovered = app.app.store().recover_orphan(&tombstone).await.unwrap();
    assert_eq!(recovered.outcome, MergeOutcome::Applied);
    assert_eq!(recovered.row.unwrap().status, Status::Released);
    let late = held("late", 3).await;
    app.app
        .store()
        .merge(&Merge::held(&code, "late", late, 100, Status::Reserved))
        .await
        .unwrap();
    let tombstone = Merge::held(&code, "late", late, 100, Status::Released)
        .reason(shared::domain::ReleaseReason::Expired);
    let recovered = app.app.store().recover_orphan(&tombstone).await.unwrap();
    assert_eq!(recovered.outcome, MergeOutcome::Applied);
    let (_, r) = app.get_reservation("LATE", "paid").await;
    assert_eq!(r["status"], "CONFIRMED");
    let reason: String = app
        .db
        .query_one(
            "SELECT release_reason FROM redemption WHERE voucher_code = 'LATE' AND order_id = 'late'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(reason, "EXPIRED");

    // Through the API: confirms racing sweeps. Whatever the order, an order answered 200 is
    // CONFIRMED and holds its use, in Postgres and in the gate; the others are released.
    app.voucher(
        "RACE",
        40,
        json!({"flashSale": true, "reservationTtlSeconds": 1}),
    )
    .await;
    let race = voucher_code("RACE");
    let orders: Vec<String> = (0..30).map(|i| format!("o{i}")).collect();
    for (i, order) in orders.iter().enumerate() {
        gate.reserve(&race, 10 + i as i64, order, 100, long_ago)
            .await
            .unwrap()
            .held
            .expect("granted");
    }
    let app = Arc::new(app);
    let sweeps: Vec<_> = (0..3)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { app.app.sweeper().sweep().await.unwrap() })
        })
        .collect();
    let confirms: Vec<_> = orders
        .iter()
        .map(|order| {
            let (app, order) = (app.clone(), order.clone());
            tokio::spawn(async move { app.confirm("RACE", &order).await.0 })
        })
        .collect();
    let mut confirmed = 0;
    for (order, confirm) in orders.iter().zip(confirms) {
        let status = confirm.await.unwrap();
        let (_, row) = app.get_reservation("RACE", order).await;
        match status {
            StatusCode::OK => {
                confirmed += 1;
                assert_eq!(row["status"], "CONFIRMED", "{order} was told 200");
            }
            StatusCode::CONFLICT => assert_eq!(row["status"], "RELEASED", "{order}"),
            other => panic!("{order}: confirm answered {other}"),
        }
    }
    for sweep in sweeps {
        sweep.await.unwrap();
    }
    app.app.sweeper().sweep().await.unwrap();
    assert_eq!(app.counts("RACE").await.used_count, confirmed);
    assert_eq!(app.gate_remaining("RACE").await, Some(40 - confirmed));
}

#[tokio::test]
async fn drift_in_the_gate_is_reported_and_repaired_when_nothing_is_in_flight() {
    let app = TestApp::spawn_mode(true).await;
    app.voucher("DRIFT", 10, json!({})).await;
    for i in 1..=2 {
        assert_eq!(
            app.reserve("DRIFT", i, &format!("o{i}"), 10).await.0,
            StatusCode::CREATED
        );
    }
    // Let the pending marks clear (they are cleared off the request path).
    wait_for(
        "the pending marks to clear",
        Duration::from_secs(5),
        async || app.gate_pending("DRIFT").await == 0,
    )
    .await;
    app.set_gate_remaining("DRIFT", 5).await;

    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(
        (report.drift_found, report.drift_repaired),
        (1, 1),
        "{report:?}"
    );
    assert_eq!(app.gate_remaining("DRIFT").await, Some(8));
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.drift_found, 0, "repaired for good");

    // With an order in flight (in the gate, not yet in Postgres) drift is reported, not touched.
    let now = Utc::now().timestamp_millis();
    app.app
        .gate()
        .reserve(&voucher_code("DRIFT"), 50, "flying", 10, now)
        .await
        .unwrap();
    app.set_gate_remaining("DRIFT", 3).await;
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(
        (report.drift_found, report.drift_repaired),
        (1, 0),
        "{report:?}"
    );
    assert_eq!(app.gate_remaining("DRIFT").await, Some(3));
}

#[tokio::test]
async fn a_backlog_of_100000_expired_is_swept_in_bounded_batches() {
    let app = TestApp::spawn().await;
    app.voucher(
        "BULK",
        100_000,
        json!({"perUserLimit": 1, "counterSlots": 1}),
    )
    .await;
    app.db
        .batch_execute(
            "INSERT INTO redemption (voucher_code, order_id, customer_id, status, order_amount,
                                     discount_amount, reserved_at, expires_at, slot)
             SELECT 'BULK', 'o' || g, g, 1, 100, 1, now() - interval '1 hour', now() - interval '30 minutes', 0
               FROM generate_series(1, 100000) g;
             INSERT INTO voucher_customer SELECT 'BULK', g, 1 FROM generate_series(1, 100000) g;
             UPDATE voucher_slot SET used = 100000 WHERE voucher_code = 'BULK';",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let report = app.app.sweeper().sweep().await.unwrap();
    let took = started.elapsed();
    println!(
        "swept {} expired reservations in {:.1} s ({:.0}/s, batches of {})",
        report.expired,
        took.as_secs_f64(),
        report.expired as f64 / took.as_secs_f64(),
        shared::sweeper::EXPIRE_BATCH
    );
    assert_eq!(report.expired, 100_000);
    let counts = app.counts("BULK").await;
    assert_eq!(
        (
            counts.used_count,
            counts.active_rows,
            counts.customer_counter_sum
        ),
        (0, 0, 0)
    );
}

#[tokio::test]
async fn the_sweeper_function_handles_an_eventbridge_schedule() {
    let app = TestApp::spawn().await;
    app.voucher("LAMBDA", 2, json!({"reservationTtlSeconds": 1}))
        .await;
    assert_eq!(
        app.reserve("LAMBDA", 1, "o1", 10).await.0,
        StatusCode::CREATED
    );
    // A fixed wait on purpose: the clock passing the 1 s TTL is what makes it due.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let event =
        serde_json::from_str(include_str!("../fixtures/eventbridge-schedule.json")).unwrap();
    let event = lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default());
    let report = shared::lambda::sweep_handler(&app.app, event)
        .await
        .unwrap();
    assert_eq!(report.expired, 1);
    assert_eq!(app.view("LAMBDA").await["remaining"], 2);
}

/// A release that reached Postgres but not the gate (its gate step is on its way, or failed):
/// the sweep finishes it, once. The model checker found that the reconciler used to count its
/// use as back already and raise `remaining`, after which the release's own gate step gave the
/// same use back a second time: the gate then held one use more than the limit.
#[tokio::test]
async fn a_release_in_flight_gives_its_use_back_once() {
    let app = TestApp::spawn_mode(true).await;
    app.voucher("TWICE", 2, json!({})).await;
    assert_eq!(
        app.reserve("TWICE", 1, "o1", 10).await.0,
        StatusCode::CREATED
    );
    assert_eq!(app.gate_remaining("TWICE").await, Some(1));
    let code = voucher_code("TWICE");
    let order = shared::domain::OrderId::parse("o1").unwrap();

    // The release's Postgres step, and nothing yet in the gate.
    let released = app.app.store().release(&code, &order).await.unwrap();
    assert!(released.is_some_and(|m| m.outcome == MergeOutcome::Applied));
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.releases_finished, 1);
    assert_eq!(report.drift_repaired, 0);
    assert_eq!(app.gate_remaining("TWICE").await, Some(2));

    // The release's own gate step comes late: the use is back already.
    let late = app
        .app
        .gate()
        .remove(&code, "o1", shared::gate::Removal::Release, Some(1))
        .await
        .unwrap();
    assert_eq!(late, shared::gate::Removed::Already);
    assert_eq!(
        app.gate_remaining("TWICE").await,
        Some(2),
        "never above the limit"
    );
    assert_eq!(app.app.sweeper().sweep().await.unwrap().drift_found, 0);
    // And the customer's count in the gate came back with it: they may reserve again.
    assert_eq!(
        app.reserve("TWICE", 1, "o2", 10).await.0,
        StatusCode::CREATED
    );
}

/// A release whose gate step failed (Redis unreachable at that moment) no longer leaves the
/// customer counted in the gate for the rest of the sale. The gate holds a long history here,
/// so the sweep finds the order in a later step of its walk, not in the first one.
#[tokio::test]
async fn a_failed_gate_release_is_finished_by_the_sweep() {
    let app = TestApp::builder()
        .flash(true)
        .with_redis_proxy()
        .spawn()
        .await;
    app.voucher("LOST", 2, json!({})).await;
    assert_eq!(
        app.reserve("LOST", 7, "o1", 10).await.0,
        StatusCode::CREATED
    );
    let history = 10 * shared::gate::SCAN_STEP;
    app.gate_history("LOST", history).await;
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(
        (report.drift_found, report.releases_finished),
        (0, 0),
        "history alone is no drift"
    );
    app.redis_proxy().set_up(false);
    let (status, _) = app.release("LOST", "o1").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "released in Postgres");
    app.redis_proxy().set_up(true);
    let (status, body) = app.reserve("LOST", 7, "o2", 10).await;
    assert_eq!(
        (status, shared_error(&body)),
        (StatusCode::CONFLICT, "ALREADY_USED".into()),
        "the gate still counts customer 7"
    );

    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.releases_finished, 1);
    assert_eq!(
        app.reserve("LOST", 7, "o2", 10).await.0,
        StatusCode::CREATED
    );
    assert_eq!(app.gate_remaining("LOST").await, Some(1));
    assert_eq!(app.view("LOST").await["usedCount"], 1);
}

fn shared_error(body: &str) -> String {
    crate::harness::error_of(body)
}

/// A sale that is over leaves the gate: once it ended (here with no delay) and nothing of it is
/// in flight, the sweep removes every gate key of the voucher. Every answer afterwards is the
/// one given before, byte for byte for a replayed reserve, from Postgres; a release or an expiry
/// writes no gate key back; and a change that reopens the window loads it again.
async fn a_sale_that_is_over_leaves_the_gate_and_answers_the_same_after(app: TestApp) {
    let ends = Utc::now() + chrono::Duration::seconds(2);
    app.voucher(
        "OVERSOON",
        5,
        json!({"flashSale": true, "endsAt": ends.to_rfc3339()}),
    )
    .await;
    let mut firsts = Vec::new();
    for i in 1..=3 {
        let (status, body) = app.reserve("OVERSOON", i, &format!("o{i}"), 100).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        firsts.push(body);
    }
    assert_eq!(app.confirm("OVERSOON", "o2").await.0, StatusCode::OK);
    assert_eq!(
        app.release("OVERSOON", "o3").await.0,
        StatusCode::NO_CONTENT
    );
    app.settle("OVERSOON").await;
    tokio::time::sleep(
        (ends - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(100),
    )
    .await;

    // Every answer while the gate still holds the voucher...
    let answers = async || {
        vec![
            app.reserve("OVERSOON", 1, "o1", 100).await,
            app.reserve("OVERSOON", 3, "o3", 100).await,
            app.reserve("OVERSOON", 4, "o4", 100).await,
            app.reserve("OVERSOON", 2, "o1", 100).await,
            (app.get_reservation("OVERSOON", "o1").await.0, String::new()),
            (
                StatusCode::OK,
                app.get_reservation("OVERSOON", "o2").await.1.to_string(),
            ),
            (
                StatusCode::OK,
                app.get_reservation("OVERSOON", "o3").await.1.to_string(),
            ),
            (StatusCode::OK, app.view("OVERSOON").await.to_string()),
        ]
    };
    let before = answers().await;
    assert_eq!(
        before[0],
        (StatusCode::CREATED, firsts[0].clone()),
        "a replay"
    );
    assert!(app.gate_key_count("OVERSOON").await > 0);

    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.retired, 1, "{report:?}");
    assert_eq!(app.gate_key_count("OVERSOON").await, 0, "every key gone");
    // ... is the answer after it, from Postgres.
    assert_eq!(answers().await, before);
    assert_eq!(app.gate_key_count("OVERSOON").await, 0, "not loaded again");

    // Confirm, release and expiry go through Postgres, and write no gate key back.
    assert_eq!(app.confirm("OVERSOON", "o1").await.0, StatusCode::OK);
    assert_eq!(
        app.release("OVERSOON", "o2").await.0,
        StatusCode::NO_CONTENT
    );
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.retired, 0, "nothing left to retire");
    assert_eq!(app.gate_key_count("OVERSOON").await, 0);
    assert_eq!(app.view("OVERSOON").await["usedCount"], 1);

    // Reopened: loaded again through warm-up, with what Postgres holds.
    let later = (Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let (status, body) = app
        .patch_voucher("OVERSOON", json!({"endsAt": later}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        app.reserve("OVERSOON", 5, "o5", 100).await.0,
        StatusCode::CREATED
    );
    assert_eq!(app.gate_remaining("OVERSOON").await, Some(3));
}

#[tokio::test]
async fn a_flash_sale_that_is_over_leaves_the_gate_in_mode_a() {
    let app = TestApp::builder()
        .flash(true)
        .configure(|s| s.sweep.retire_after = Duration::ZERO)
        .spawn()
        .await;
    a_sale_that_is_over_leaves_the_gate_and_answers_the_same_after(app).await;
}

#[tokio::test]
async fn a_flash_sale_that_is_over_leaves_the_gate_in_mode_b() {
    let app = TestApp::builder()
        .flash(true)
        .with_events(3)
        .configure(|s| s.sweep.retire_after = Duration::ZERO)
        .spawn()
        .await;
    a_sale_that_is_over_leaves_the_gate_and_answers_the_same_after(app).await;
}

/// Retirement removes the gate's keys first and the mark (Postgres' "the gate may hold it")
/// after. Before, the mark went first, and a sweep that died before `retire.lua` left live keys
/// that no sweep visited again. Between the two steps now, a reserve finds the keys gone and the
/// mark still set: it is answered by Postgres, and must not load the gate again behind the
/// sweeper's back (it did on main: the mark said the gate had held it). The next sweep finishes.
#[tokio::test]
async fn between_retirements_two_steps_a_reserve_loads_nothing_and_the_next_sweep_finishes() {
    let app = TestApp::builder()
        .flash(true)
        .configure(|s| s.sweep.retire_after = Duration::ZERO)
        .spawn()
        .await;
    let ends = Utc::now() + chrono::Duration::milliseconds(500);
    app.voucher("HALFWAY", 5, json!({"endsAt": ends.to_rfc3339()}))
        .await;
    assert_eq!(
        app.reserve("HALFWAY", 1, "o1", 100).await.0,
        StatusCode::CREATED
    );
    app.settle("HALFWAY").await;
    tokio::time::sleep(
        (ends - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(100),
    )
    .await;
    // The sweep's first step, and then it dies.
    let code = voucher_code("HALFWAY");
    let retired = app
        .app
        .gate()
        .retire(&code, Utc::now().timestamp_millis(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(retired, shared::gate::Retired::Retired);
    assert_eq!(
        app.app.store().gate_loaded(&code).await.unwrap(),
        Some(true)
    );

    let (status, body) = app.reserve("HALFWAY", 2, "o2", 100).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(error_of(&body), "NOT_ELIGIBLE");
    assert!(body.contains("EXPIRED"), "{body}");
    let (status, replay) = app.reserve("HALFWAY", 1, "o1", 100).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "a replay, from Postgres: {replay}"
    );
    assert_eq!(app.gate_key_count("HALFWAY").await, 0, "not loaded again");

    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.retired, 1, "{report:?}");
    assert_eq!(
        app.app.store().gate_loaded(&code).await.unwrap(),
        Some(false)
    );
    assert_eq!(app.gate_key_count("HALFWAY").await, 0);
}

/// The rules a change replaced, a voucher's or a campaign's, are kept for mode B's consumer as
/// long as a queue may keep an event granted under them (two weeks), then a sweep forgets them;
/// the recent ones stay.
#[tokio::test]
async fn superseded_rules_are_forgotten_after_two_weeks() {
    let app = TestApp::spawn().await;
    app.voucher("OLDRULES", 5, json!({})).await;
    for (version, days_ago) in [(1_i64, 15_i32), (2, 13)] {
        app.db
            .execute(
                "INSERT INTO voucher_rules (voucher_code, version, discount_amount,
                        min_order_amount, starts_at, ends_at, active, superseded_at)
                 VALUES ('OLDRULES', $1, 5, 0, now(), now() + interval '1 day', true,
                         now() - make_interval(days => $2))",
                &[&version, &days_ago],
            )
            .await
            .unwrap();
        app.db
            .execute(
                "INSERT INTO campaign_rules (campaign_id, version, starts_at, ends_at, active,
                        superseded_at)
                 VALUES (7, $1, now(), now() + interval '1 day', true,
                         now() - make_interval(days => $2))",
                &[&version, &days_ago],
            )
            .await
            .unwrap();
    }
    assert_eq!(app.app.sweeper().sweep().await.unwrap().rules_forgotten, 2);
    for table in ["voucher_rules", "campaign_rules"] {
        let kept: Vec<i64> = app
            .db
            .query(
                &format!("SELECT version FROM {table} ORDER BY version"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(kept, vec![2], "{table}");
    }
    assert_eq!(app.app.sweeper().sweep().await.unwrap().rules_forgotten, 0);
}

/// A customer whose uses all came back (released or expired) leaves no counter row behind: the
/// table holds the customers who hold a use, not every customer who ever had one. The next
/// reserve of such a customer counts from zero again.
#[tokio::test]
async fn customers_whose_uses_came_back_leave_no_counter_row() {
    let app = TestApp::spawn().await;
    app.voucher(
        "IDLE",
        10,
        json!({"reservationTtlSeconds": 1, "perUserLimit": 2}),
    )
    .await;
    let counters = || async {
        app.db
            .query(
                "SELECT customer_id, active FROM voucher_customer ORDER BY customer_id",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get::<_, i64>(0), r.get::<_, i32>(1)))
            .collect::<Vec<_>>()
    };
    for (customer, order) in [(1, "a1"), (1, "a2"), (2, "b1"), (3, "c1")] {
        assert_eq!(
            app.reserve("IDLE", customer, order, 10).await.0,
            StatusCode::CREATED
        );
    }
    assert_eq!(counters().await, vec![(1, 2), (2, 1), (3, 1)]);
    assert_eq!(app.release("IDLE", "a1").await.0, StatusCode::NO_CONTENT);
    assert_eq!(app.confirm("IDLE", "b1").await.0, StatusCode::OK);
    assert_eq!(counters().await, vec![(1, 1), (2, 1), (3, 1)]);
    assert_eq!(app.release("IDLE", "a2").await.0, StatusCode::NO_CONTENT);
    assert_eq!(counters().await, vec![(2, 1), (3, 1)]);
    // c1 was never confirmed: it expires (a fixed wait: the clock passing its 1 s TTL).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(app.app.sweeper().sweep().await.unwrap().expired, 1);
    assert_eq!(counters().await, vec![(2, 1)]);
    // Customer 1 starts again from zero: two uses allowed, as before.
    for order in ["a3", "a4"] {
        assert_eq!(
            app.reserve("IDLE", 1, order, 10).await.0,
            StatusCode::CREATED
        );
    }
    assert_eq!(
        app.reserve("IDLE", 1, "a5", 10).await.0,
        StatusCode::CONFLICT
    );
    assert_eq!(counters().await, vec![(1, 2), (2, 1)]);
}

/// A released order's tombstone answers a retry of it from the gate for the retention only;
/// then a sweep deletes it, and Postgres answers the retry the same (mode A). So a sale that
/// lasts years keeps in its `orders` hash what is live and what was released within the
/// retention, not every order it ever released; a backlog leaves a bounded batch a call. On
/// main a tombstone stayed until the sale's end plus the retirement delay.
#[tokio::test]
async fn tombstones_leave_the_gate_a_retention_after_their_release() {
    let retention = Duration::from_millis(1500);
    let app = TestApp::builder()
        .flash(true)
        .configure(move |s| s.sweep.tombstone_retention = retention)
        .spawn()
        .await;
    app.voucher("TOMBS", 10, json!({})).await;
    for (customer, order) in [(1, "o1"), (2, "o2")] {
        assert_eq!(
            app.reserve("TOMBS", customer, order, 100).await.0,
            StatusCode::CREATED
        );
    }
    app.settle("TOMBS").await;
    assert_eq!(app.release("TOMBS", "o1").await.0, StatusCode::NO_CONTENT);
    // A fixed wait on purpose: the Redis clock passing the retention is what makes it due.
    tokio::time::sleep(retention + Duration::from_millis(200)).await;
    assert_eq!(app.release("TOMBS", "o2").await.0, StatusCode::NO_CONTENT);

    let keys = app.gate_keys("TOMBS");
    let mut r = app.redis().await;
    let entry = async |r: &mut _, order: &str| -> Option<String> {
        redis::cmd("HGET")
            .arg(&keys.orders)
            .arg(order)
            .query_async(r)
            .await
            .unwrap()
    };
    assert!(entry(&mut r, "o1").await.unwrap().starts_with("R|"));
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.tombstones_pruned, 1, "{report:?}");
    assert_eq!(entry(&mut r, "o1").await, None, "past the retention");
    assert!(
        entry(&mut r, "o2").await.unwrap().starts_with("R|"),
        "within it"
    );

    // Both retries answer the same: o2 from its tombstone, o1 from Postgres' row, the gate's
    // use given back.
    for (customer, order) in [(2, "o2"), (1, "o1")] {
        let (status, body) = app.reserve("TOMBS", customer, order, 100).await;
        assert_eq!(status, StatusCode::CONFLICT, "{order}: {body}");
        assert_eq!(error_of(&body), "RESERVATION_RELEASED", "{order}");
    }
    assert_eq!(app.gate_remaining("TOMBS").await, Some(10));
    assert_eq!(app.view("TOMBS").await["usedCount"], 0);

    // A backlog (1,234 tombstones due at once) leaves in calls of 500, within one run.
    let mut zadd = redis::cmd("ZADD");
    zadd.arg(&keys.released);
    let mut hset = redis::cmd("HSET");
    hset.arg(&keys.orders);
    for i in 0..1234 {
        zadd.arg(1).arg(format!("old-{i}"));
        hset.arg(format!("old-{i}"))
            .arg(format!("R|{}|1|2|10|100", 1_000 + i));
    }
    let () = zadd.query_async(&mut r).await.unwrap();
    let () = hset.query_async(&mut r).await.unwrap();
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.tombstones_pruned, 1234, "{report:?}");
    let left: i64 = redis::cmd("HLEN")
        .arg(&keys.orders)
        .query_async(&mut r)
        .await
        .unwrap();
    // o1 (its tombstone written again by the retry), o2, and `#moves`.
    assert_eq!(left, 3);
}
