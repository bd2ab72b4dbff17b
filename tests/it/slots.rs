//! Counter slots (docs/ARCHITECTURE.md, "Counter slots"): a voucher's limit split across
//! several rows, each with its own cap. Postgres still refuses use `total_limit + 1` by
//! itself; a reserve never refuses while a slot has room, even one another transaction holds;
//! every use goes back to the slot it came from.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::harness::{error_of, TestApp};

/// `(slot, cap, used)` of every slot of a voucher, in slot order.
pub(crate) async fn slots(app: &TestApp, code: &str) -> Vec<(i16, i32, i32)> {
    app.db
        .query(
            "SELECT slot, cap, used FROM voucher_slot WHERE voucher_code = $1 ORDER BY slot",
            &[&code],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

#[tokio::test]
async fn the_limit_is_split_into_slots_whose_caps_sum_to_it() {
    let app = TestApp::spawn().await;
    let view = app.voucher("AUTO", 1000, json!({})).await;
    assert_eq!(view["counterSlots"], 32, "chosen from the limit");
    let view = app.voucher("TINY", 10, json!({})).await;
    assert_eq!(view["counterSlots"], 1, "nothing to spread");
    let view = app.voucher("EIGHT", 10, json!({"counterSlots": 8})).await;
    assert_eq!(view["counterSlots"], 8);
    assert_eq!(
        slots(&app, "EIGHT").await,
        vec![
            (0, 2, 0),
            (1, 2, 0),
            (2, 1, 0),
            (3, 1, 0),
            (4, 1, 0),
            (5, 1, 0),
            (6, 1, 0),
            (7, 1, 0)
        ]
    );
    assert_eq!(app.view("EIGHT").await["counterSlots"], 8);
}

#[tokio::test]
async fn postgres_refuses_a_slot_past_its_cap_and_caps_that_do_not_sum_to_the_limit() {
    let app = TestApp::spawn().await;
    app.voucher("CAPS", 10, json!({"counterSlots": 4})).await;
    let before = app.snapshot().await;

    let err = app
        .db
        .execute(
            "UPDATE voucher_slot SET used = cap + 1 WHERE voucher_code = 'CAPS' AND slot = 0",
            &[],
        )
        .await
        .unwrap_err();
    let db = err.as_db_error().expect("a database error");
    assert_eq!(
        db.constraint(),
        Some("voucher_slot_used_within_cap"),
        "{db:?}"
    );

    // Caps are checked at commit: a cap raised alone, or a limit raised alone, is refused.
    for sql in [
        "UPDATE voucher_slot SET cap = cap + 1 WHERE voucher_code = 'CAPS' AND slot = 0",
        "UPDATE voucher SET total_limit = total_limit + 1 WHERE code = 'CAPS'",
        "DELETE FROM voucher_slot WHERE voucher_code = 'CAPS' AND slot = 3",
        "INSERT INTO voucher_slot (voucher_code, slot, cap) VALUES ('CAPS', 9, 1)",
    ] {
        let err = app.db.execute(sql, &[]).await.unwrap_err();
        let db = err.as_db_error().expect("a database error");
        assert_eq!(
            db.constraint(),
            Some("voucher_slot_caps_sum"),
            "{sql}: {db:?}"
        );
    }
    // Moving a use of cap between slots in one transaction keeps the sum: allowed.
    app.db
        .batch_execute(
            "BEGIN;
             UPDATE voucher_slot SET cap = cap + 1 WHERE voucher_code = 'CAPS' AND slot = 0;
             UPDATE voucher_slot SET cap = cap - 1 WHERE voucher_code = 'CAPS' AND slot = 1;
             COMMIT;",
        )
        .await
        .unwrap();
    assert_ne!(app.snapshot().await, before);
    assert_eq!(
        slots(&app, "CAPS").await.iter().map(|s| s.1).sum::<i32>(),
        10
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reserve_takes_a_free_slot_past_locked_ones_and_waits_rather_than_refuse() {
    let app = TestApp::spawn().await;
    app.voucher("LOCKS", 4, json!({"counterSlots": 4})).await;
    let other = connect(&app.database_url()).await;

    // Three slots held by another transaction (winners not yet committed): the reserve takes
    // the fourth at once.
    other
        .batch_execute(
            "BEGIN; SELECT 1 FROM voucher_slot WHERE voucher_code = 'LOCKS' AND slot < 3 FOR UPDATE;",
        )
        .await
        .unwrap();
    let (status, body) =
        tokio::time::timeout(Duration::from_secs(5), app.reserve("LOCKS", 1, "first", 10))
            .await
            .expect("not blocked by the held slots");
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(slots(&app, "LOCKS").await[3], (3, 1, 1));

    // Now every slot with room is held: the next reserve waits for them, it does not refuse.
    let waiting = {
        let app = Arc::new(app);
        let handle = {
            let app = app.clone();
            tokio::spawn(async move { app.reserve("LOCKS", 2, "second", 10).await })
        };
        tokio::time::sleep(Duration::from_millis(500)).await; // the wait is what is tested
        assert!(!handle.is_finished(), "refused while slots had room");
        // The holder fills slot 0 and lets go: the waiting reserve takes slot 1 or 2.
        other
            .batch_execute(
                "UPDATE voucher_slot SET used = 1 WHERE voucher_code = 'LOCKS' AND slot = 0;
                 COMMIT;",
            )
            .await
            .unwrap();
        let (status, body) = handle.await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{body}");
        app
    };
    let used: Vec<i32> = slots(&waiting, "LOCKS").await.iter().map(|s| s.2).collect();
    assert_eq!(used.iter().sum::<i32>(), 3);
    assert_eq!((used[0], used[3]), (1, 1));

    // One use left, in the slot not yet taken; then really full.
    let (status, _) = waiting.reserve("LOCKS", 3, "third", 10).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = waiting.reserve("LOCKS", 4, "fourth", 10).await;
    assert_eq!(
        (status, error_of(&body)),
        (StatusCode::CONFLICT, "OUT_OF_STOCK".into())
    );
}

/// As many customers as uses, each reserving and releasing over and over: at every instant at
/// most `limit - 1` uses are held by the others, so every reserve must succeed. A refusal
/// would be a slot choice that missed room (a slot freed after its snapshot, or one held).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_of_releases_and_re_reserves_near_sold_out_never_refuses_nor_exceeds() {
    const USES: i64 = 24;
    const ROUNDS: usize = 12;
    let app = Arc::new(TestApp::spawn().await);
    app.voucher("STORM", USES, json!({"counterSlots": 8})).await;
    let mut tasks = Vec::new();
    for customer in 1..=USES {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            let mut answers = HashMap::new();
            for round in 0..ROUNDS {
                let order = format!("c{customer}-r{round}");
                let (status, body) = app.reserve("STORM", customer, &order, 10).await;
                *answers
                    .entry(format!("{status} {}", error_of(&body)))
                    .or_insert(0) += 1;
                if status == StatusCode::CREATED {
                    let (status, _) = app.release("STORM", &order).await;
                    assert_eq!(status, StatusCode::NO_CONTENT);
                }
            }
            answers
        }));
    }
    let mut answers: HashMap<String, usize> = HashMap::new();
    for task in tasks {
        for (k, v) in task.await.unwrap() {
            *answers.entry(k).or_default() += v;
        }
    }
    let created = answers
        .iter()
        .filter(|(k, _)| k.starts_with("201"))
        .map(|(_, v)| v)
        .sum::<usize>();
    assert_eq!(
        created,
        USES as usize * ROUNDS,
        "every reserve had room: {answers:?}"
    );
    assert!(slots(&app, "STORM").await.iter().all(|s| s.2 == 0));
    let counts = app.counts("STORM").await;
    assert_eq!((counts.used_count, counts.active_rows), (0, 0));
    assert_eq!(counts.customer_counter_sum, 0);
}

#[tokio::test]
async fn expiry_and_the_sweeper_return_each_use_to_its_own_slot() {
    for flash in [false, true] {
        let app = TestApp::builder().flash(flash).spawn().await;
        app.voucher(
            "HOME",
            16,
            json!({"counterSlots": 4, "reservationTtlSeconds": 1}),
        )
        .await;
        for i in 1..=12 {
            let (status, body) = app.reserve("HOME", i, &format!("o{i}"), 10).await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
        }
        // Confirm a third of them: their uses stay where they were taken.
        for i in (3..=12).step_by(3) {
            let (status, _) = app.confirm("HOME", &format!("o{i}")).await;
            assert_eq!(status, StatusCode::OK);
        }
        let per_slot = |rows: Vec<tokio_postgres::Row>| {
            let mut m = [0i32; 4];
            for r in rows {
                m[r.get::<_, i16>(0) as usize] += 1;
            }
            m
        };
        let confirmed = per_slot(
            app.db
                .query(
                    "SELECT slot FROM redemption WHERE voucher_code = 'HOME' AND status = 2",
                    &[],
                )
                .await
                .unwrap(),
        );
        let held = per_slot(
            app.db
                .query(
                    "SELECT slot FROM redemption WHERE voucher_code = 'HOME' AND status IN (1, 2)",
                    &[],
                )
                .await
                .unwrap(),
        );
        let used = |s: Vec<(i16, i32, i32)>| -> Vec<i32> { s.iter().map(|x| x.2).collect() };
        assert_eq!(used(slots(&app, "HOME").await), held.to_vec());
        assert!(
            held.iter().filter(|n| **n > 0).count() > 1,
            "uses spread over the slots: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(1200)).await; // past the TTL on purpose
        let report = app.app.sweeper().sweep().await.unwrap();
        assert_eq!(report.expired, 8, "flash {flash}");
        assert_eq!(
            used(slots(&app, "HOME").await),
            confirmed.to_vec(),
            "flash {flash}: each expired use went back to its own slot"
        );
        if flash {
            assert_eq!(app.gate_remaining("HOME").await, Some(12));
        }
    }
}
