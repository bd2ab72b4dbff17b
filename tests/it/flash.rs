//! Flash-sale mode: the Redis gate's scripts, a real Redis Cluster, warm-up, the sold-out
//! short cut, and the faults of docs/ARCHITECTURE.md, "Faults and what they give" (Redis
//! down, Postgres down, Redis emptied mid-sale). Real Redis and Postgres throughout; faults are made with a TCP proxy that each
//! test cuts for itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::config::RedisSettings;
use shared::domain::{Discount, Held, ReserveOutcome, VoucherCode};
use shared::gate::{Gate, GateCounts, GateMeta, GateReply, Loaded, Removal, Removed};

use crate::harness::{
    self, cluster_url, error_of, load_counts as counts, lock_gate, path, redis_url, voucher_code,
    TestApp,
};

async fn every_script_outcome(gate: Gate) {
    let code = VoucherCode::parse(&format!(
        "G{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    ))
    .unwrap();
    let now = Utc::now().timestamp_millis();
    let meta = GateMeta {
        discount: Discount::Fixed(50),
        min_order: 100,
        starts_ms: now - 3_600_000,
        ends_ms: now + 3_600_000,
        per_user: 1,
        ttl_ms: 60_000,
        active: true,
        version: 1,
    };
    let reserve = |c: i64, o: &'static str, amount: i64, at: i64| {
        let (gate, code) = (&gate, &code);
        async move { gate.reserve(code, c, o, amount, at).await.unwrap() }
    };

    assert_eq!(
        reserve(1, "o1", 100, now).await.outcome,
        ReserveOutcome::NotLoaded
    );
    let token = lock_gate(&gate, &code).await;
    assert_eq!(
        gate.load(&code, token, &meta, counts(2, None, &[], None))
            .await
            .unwrap(),
        Loaded::Now
    );
    assert_eq!(
        gate.load(&code, token, &meta, counts(99, None, &[], None))
            .await
            .unwrap(),
        Loaded::Already,
        "loads only once"
    );
    gate.unlock_loading(&code, token).await.unwrap();
    assert_eq!(gate.remaining(&code).await.unwrap(), Some(2));

    let held = Held {
        customer_id: 1,
        reserved_ms: now,
        expires_ms: now + 60_000,
        discount: 50,
    };
    assert_eq!(
        reserve(1, "o1", 100, now).await,
        GateReply {
            outcome: ReserveOutcome::Reserved,
            held: Some(held),
            rules_version: Some(1),
        }
    );
    assert_eq!(
        reserve(1, "o1", 100, now + 5).await,
        GateReply {
            outcome: ReserveOutcome::Replay,
            held: Some(held),
            rules_version: Some(1),
        },
        "a retry keeps its first expiry, and the rules version that granted it"
    );
    assert_eq!(
        reserve(2, "o1", 100, now).await.outcome,
        ReserveOutcome::OrderConflict
    );
    assert_eq!(
        reserve(1, "o2", 100, now).await.outcome,
        ReserveOutcome::AlreadyUsed
    );
    assert_eq!(
        reserve(2, "o2", 99, now).await.outcome,
        ReserveOutcome::MinOrderAmount
    );
    assert_eq!(
        reserve(2, "o2", 100, meta.starts_ms - 1).await.outcome,
        ReserveOutcome::NotStarted
    );
    assert_eq!(
        reserve(2, "o2", 100, meta.ends_ms).await.outcome,
        ReserveOutcome::Expired
    );
    assert!(reserve(2, "o3", 100, now).await.outcome == ReserveOutcome::Reserved);
    assert_eq!(
        reserve(3, "o4", 100, now).await.outcome,
        ReserveOutcome::OutOfStock
    );
    assert_eq!(gate.remaining(&code).await.unwrap(), Some(0));

    // Release: the use returns once, a tombstone stays, the orderId is spent.
    assert_eq!(
        gate.remove(&code, "o1", Removal::Release, None)
            .await
            .unwrap(),
        Removed::Released
    );
    assert_eq!(
        gate.remove(&code, "o1", Removal::Release, None)
            .await
            .unwrap(),
        Removed::Already
    );
    assert_eq!(gate.remaining(&code).await.unwrap(), Some(1));
    assert_eq!(
        reserve(1, "o1", 100, now).await.outcome,
        ReserveOutcome::ReservationReleased
    );
    assert_eq!(
        reserve(9, "o1", 100, now).await.outcome,
        ReserveOutcome::OrderConflict
    );
    // The customer's count went back with the release: a new orderId works.
    assert!(reserve(1, "o5", 100, now).await.outcome == ReserveOutcome::Reserved);

    // Revoke: tombstone, and the use does not come back.
    assert_eq!(
        gate.remove(&code, "o5", Removal::Revoke, None)
            .await
            .unwrap(),
        Removed::Released
    );
    assert_eq!(gate.remaining(&code).await.unwrap(), Some(0));
    assert_eq!(
        reserve(1, "o5", 100, now).await.outcome,
        ReserveOutcome::ReservationReleased
    );

    // Forget (undo): the use returns and the same orderId may reserve afresh.
    let forget = Removal::Forget { give_back: true };
    assert_eq!(
        gate.remove(&code, "o3", forget, None).await.unwrap(),
        Removed::Released
    );
    assert_eq!(gate.remaining(&code).await.unwrap(), Some(1));
    assert!(reserve(2, "o3", 100, now).await.outcome == ReserveOutcome::Reserved);

    // Uncount: an order counted twice gives one use back and stays active.
    assert_eq!(
        gate.remove(&code, "o3", Removal::Uncount, None)
            .await
            .unwrap(),
        Removed::Released
    );
    assert_eq!(gate.remaining(&code).await.unwrap(), Some(1));
    assert!(reserve(2, "o3", 100, now).await.outcome == ReserveOutcome::Replay);
    assert!(reserve(4, "o6", 100, now).await.outcome == ReserveOutcome::Reserved);

    // Releasing an order the gate never saw leaves a tombstone that blocks a late reserve.
    assert_eq!(
        gate.remove(&code, "zz", Removal::Release, Some(5))
            .await
            .unwrap(),
        Removed::Unknown
    );
    assert_eq!(
        reserve(5, "zz", 100, now).await.outcome,
        ReserveOutcome::ReservationReleased
    );
    assert_eq!(
        reserve(6, "zz", 100, now).await.outcome,
        ReserveOutcome::OrderConflict
    );
    assert_eq!(gate.remaining(&code).await.unwrap(), Some(0));

    // Pending until Postgres has the row.
    let seen = gate.lookup(&code, "o3", Some(2)).await.unwrap();
    assert!(seen.entry.is_some());
    assert_eq!(seen.uses, 0, "the uncount took customer 2's count back");
    assert_eq!(seen.per_user, Some(1));
    gate.settled(&code, "o3").await.unwrap();
}

#[tokio::test]
async fn gate_scripts_answer_every_outcome_on_one_redis() {
    let gate = Gate::new(&RedisSettings {
        url: redis_url(),
        cluster: false,
        key_prefix: "fg_test_gate:".to_owned(),
        timeout: Duration::from_secs(2),
        auth_secret_arn: None,
        password: None,
    })
    .unwrap();
    every_script_outcome(gate).await;
}

#[tokio::test]
async fn gate_scripts_answer_every_outcome_on_a_redis_cluster() {
    let gate = Gate::new(&RedisSettings {
        url: cluster_url(),
        cluster: true,
        key_prefix: "fg_test_gate:".to_owned(),
        timeout: Duration::from_secs(2),
        auth_secret_arn: None,
        password: None,
    })
    .unwrap();
    every_script_outcome(gate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reserve_and_release_over_http_on_a_redis_cluster() {
    let url = cluster_url();
    let app = Arc::new(
        TestApp::builder()
            .configure(move |s| {
                s.redis.cluster = true;
                s.redis.url = url;
            })
            .spawn()
            .await,
    );
    app.voucher("CLUSTERED", 10, json!({"flashSale": true}))
        .await;
    let tasks: Vec<_> = (1..=60)
        .map(|i| {
            let app = app.clone();
            tokio::spawn(async move { app.reserve("CLUSTERED", i, &format!("o{i}"), 10).await })
        })
        .collect();
    let mut created = 0;
    for t in tasks {
        let (status, body) = t.await.unwrap();
        match status {
            StatusCode::CREATED => created += 1,
            StatusCode::CONFLICT => assert_eq!(error_of(&body), "OUT_OF_STOCK"),
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!(created, 10);
    // Release one winner and take its use again.
    let (_, r) = app.get_voucher("CLUSTERED").await;
    assert_eq!(r["usedCount"], 10);
    let won: i64 = app
        .db
        .query_one(
            "SELECT customer_id FROM redemption WHERE status = 1 LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let (status, _) = app.release("CLUSTERED", &format!("o{won}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        app.reserve("CLUSTERED", 1000, "late", 10).await.0,
        StatusCode::CREATED
    );
    assert_eq!(app.counts("CLUSTERED").await.used_count, 10);
}

#[tokio::test]
async fn redis_down_fails_flash_fast_and_leaves_standard_alone() {
    let app = TestApp::builder()
        .with_redis_proxy()
        .configure(|s| s.redis.timeout = Duration::from_millis(500))
        .spawn()
        .await;
    app.voucher("FLASHY", 5, json!({"flashSale": true})).await;
    app.voucher("PLAIN", 5, json!({})).await;
    assert_eq!(
        app.reserve("FLASHY", 1, "o1", 10).await.0,
        StatusCode::CREATED
    );

    app.redis_proxy().set_up(false);
    let started = Instant::now();
    let resp = app
        .http
        .post(app.url(&path::reservations("FLASHY")))
        .header("content-type", "application/json")
        .body(r#"{"customerId":2,"orderId":"o2","orderAmount":10}"#)
        .send()
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(error_of(&resp.text().await.unwrap()), "UNAVAILABLE");
    assert!(took < Duration::from_secs(1), "took {took:?}");

    assert_eq!(
        app.reserve("PLAIN", 2, "o2", 10).await.0,
        StatusCode::CREATED
    );
    let (status, health) = app.health().await;
    assert_eq!(
        (status, health["redis"].as_str()),
        (StatusCode::OK, Some("down"))
    );
    assert_eq!(app.counts("FLASHY").await.used_count, 1);
}

#[tokio::test]
async fn a_redis_that_never_answers_times_out_within_a_second() {
    // Accepts connections and never replies: the worst kind of dead.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("redis://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let app = TestApp::spawn().await;
    app.voucher("FLASHY", 5, json!({"flashSale": true})).await;
    // A second server on the same database whose Redis is the silent one.
    let db_url = app.database_url();
    let other = harness::serve_with(|s| {
        s.database.url = db_url.into();
        s.redis.url = silent_url;
        s.redis.timeout = Duration::from_millis(500);
    })
    .await;
    let started = Instant::now();
    let resp = app
        .http
        .post(format!("{other}{}", path::reservations("FLASHY")))
        .header("content-type", "application/json")
        .body(r#"{"customerId":2,"orderId":"o2","orderAmount":10}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn postgres_down_in_mode_a_answers_503_and_gives_the_use_back() {
    let app = TestApp::builder()
        .with_pg_proxy()
        .configure(|s| s.database.timeout = Duration::from_millis(1000))
        .spawn()
        .await;
    app.voucher("PGDOWN", 5, json!({"flashSale": true})).await;
    let (status, first) = app.reserve("PGDOWN", 1, "o1", 10).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(app.gate_remaining("PGDOWN").await, Some(4));

    app.pg_proxy().set_up(false);
    let (status, body) = app.reserve("PGDOWN", 2, "o2", 10).await;
    assert_eq!(
        (status, error_of(&body).as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE")
    );
    assert_eq!(
        app.gate_remaining("PGDOWN").await,
        Some(4),
        "the use went back to the gate"
    );
    let (status, _) = app.health().await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    app.pg_proxy().set_up(true);
    // The client's retry with the same orderId goes through, and the first order replays.
    assert_eq!(
        app.reserve("PGDOWN", 2, "o2", 10).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        app.reserve("PGDOWN", 1, "o1", 10).await,
        (StatusCode::CREATED, first)
    );
    assert_eq!(app.gate_remaining("PGDOWN").await, Some(3));
    let counts = app.counts("PGDOWN").await;
    assert_eq!((counts.used_count, counts.active_rows), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_emptied_mid_sale_never_over_allocates() {
    let app = Arc::new(TestApp::spawn_mode(true).await);
    app.voucher("FLUSHED", 300, json!({})).await;
    let wave = |from: i64| {
        let app = app.clone();
        async move {
            let tasks: Vec<_> = (from..from + 500)
                .map(|i| {
                    let app = app.clone();
                    tokio::spawn(
                        async move { app.reserve("FLUSHED", i, &format!("o{i}"), 10).await.0 },
                    )
                })
                .collect();
            let mut created = 0;
            for t in tasks {
                let status = t.await.unwrap();
                assert!(
                    [
                        StatusCode::CREATED,
                        StatusCode::CONFLICT,
                        StatusCode::SERVICE_UNAVAILABLE
                    ]
                    .contains(&status),
                    "{status}"
                );
                created += (status == StatusCode::CREATED) as i64;
            }
            created
        }
    };
    let mut created = wave(1).await;
    app.flush_gate().await;
    // Empty it again while the next wave is in flight.
    let flusher = {
        let app = app.clone();
        tokio::spawn(async move {
            // A fixed delay on purpose: it aims the flush into the middle of the wave.
            tokio::time::sleep(Duration::from_millis(30)).await;
            app.flush_gate().await;
        })
    };
    created += wave(1000).await;
    flusher.await.unwrap();
    created += wave(2000).await;

    let counts = app.counts("FLUSHED").await;
    assert_eq!(counts.used_count, 300, "{counts:?}");
    assert_eq!(counts.active_rows, 300);
    assert_eq!(created, 300, "every 201 is a use Postgres holds");
}

#[tokio::test]
async fn sold_out_short_cut_answers_without_redis_but_replays_winners() {
    let app = TestApp::builder()
        .with_redis_proxy()
        .configure(|s| {
            s.reservations.sold_out_ttl = Duration::from_millis(1500);
            s.redis.timeout = Duration::from_millis(500);
        })
        .spawn()
        .await;
    app.voucher("GONE", 1, json!({"flashSale": true})).await;
    let first = app.reserve("GONE", 1, "o1", 10).await;
    assert_eq!(first.0, StatusCode::CREATED);
    let (status, body) = app.reserve("GONE", 2, "o2", 10).await;
    assert_eq!(
        (status, error_of(&body).as_str()),
        (StatusCode::CONFLICT, "OUT_OF_STOCK")
    );

    // Inside the window a winner's retry still gets its own 201, byte for byte.
    assert_eq!(app.reserve("GONE", 1, "o1", 10).await, first);
    // And with Redis gone, the process still answers OUT_OF_STOCK itself.
    app.redis_proxy().set_up(false);
    let (status, body) = app.reserve("GONE", 3, "o3", 10).await;
    assert_eq!(
        (status, error_of(&body).as_str()),
        (StatusCode::CONFLICT, "OUT_OF_STOCK")
    );

    // After the window, the gate is asked again (and is down). A fixed wait on purpose: the
    // window's length is what is tested.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(
        app.reserve("GONE", 4, "o4", 10).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    app.redis_proxy().set_up(true);
    assert_eq!(app.counts("GONE").await.used_count, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sold_out_voucher_answers_from_its_copy_as_the_gate_would() {
    let app = TestApp::builder()
        .with_redis_proxy()
        .configure(|s| {
            s.reservations.sold_out_ttl = Duration::from_secs(3);
            s.redis.timeout = Duration::from_millis(500);
        })
        .spawn()
        .await;
    app.voucher("COPY", 3, json!({"flashSale": true, "perUserLimit": 1}))
        .await;
    // Three winners and a tombstone, and the script's answer to each kind of retry.
    let won = [
        app.reserve("COPY", 1, "o1", 10).await,
        app.reserve("COPY", 2, "o2", 10).await,
        app.reserve("COPY", 3, "o3", 10).await,
    ];
    assert!(
        won.iter().all(|(s, _)| *s == StatusCode::CREATED),
        "{won:?}"
    );
    assert_eq!(app.release("COPY", "o3").await.0, StatusCode::NO_CONTENT);
    let released = app.reserve("COPY", 3, "o3", 10).await;
    let conflict = app.reserve("COPY", 9, "o2", 10).await;
    let already = app.reserve("COPY", 1, "o5", 10).await;
    assert_eq!(
        app.reserve("COPY", 4, "o4", 10).await.0,
        StatusCode::CREATED
    );
    let (status, body) = app.reserve("COPY", 5, "o6", 10).await;
    assert_eq!(error_of(&body), "OUT_OF_STOCK", "{status}");

    // The copy is taken in the background within milliseconds; then Redis goes away and
    // every answer, a winner's retry byte for byte included, comes from the process.
    tokio::time::sleep(Duration::from_millis(500)).await;
    app.redis_proxy().set_up(false);
    assert_eq!(app.reserve("COPY", 1, "o1", 10).await, won[0]);
    assert_eq!(app.reserve("COPY", 2, "o2", 10).await, won[1]);
    assert_eq!(app.reserve("COPY", 3, "o3", 10).await, released);
    assert_eq!(app.reserve("COPY", 9, "o2", 10).await, conflict);
    assert_eq!(app.reserve("COPY", 1, "o5", 10).await, already);
    let (_, body) = app.reserve("COPY", 7, "o7", 10).await;
    assert_eq!(error_of(&body), "OUT_OF_STOCK");
    app.redis_proxy().set_up(true);

    // A use that comes back through this process drops the copy at once.
    assert_eq!(app.release("COPY", "o1").await.0, StatusCode::NO_CONTENT);
    let late = app.reserve("COPY", 8, "o8", 10).await;
    assert_eq!(late.0, StatusCode::CREATED, "{late:?}");
    let (_, body) = app.reserve("COPY", 5, "o9", 10).await;
    assert_eq!(error_of(&body), "OUT_OF_STOCK");
    tokio::time::sleep(Duration::from_millis(500)).await;
    app.redis_proxy().set_up(false);
    assert_eq!(
        app.reserve("COPY", 8, "o8", 10).await,
        late,
        "the new copy has o8"
    );
    app.redis_proxy().set_up(true);

    // A use that comes back through another process (its two steps, as a release there makes
    // them) is seen once the mark has run out: the copy is checked against the gate's change
    // counter, not trusted.
    let code = voucher_code("COPY");
    let order = shared::domain::OrderId::parse("o2").unwrap();
    app.app.store().release(&code, &order).await.unwrap();
    let gate_release = app
        .app
        .gate()
        .remove(&code, "o2", Removal::Release, Some(2))
        .await
        .unwrap();
    assert_eq!(gate_release, Removed::Released);
    let (_, body) = app.reserve("COPY", 6, "o10", 10).await;
    assert_eq!(error_of(&body), "OUT_OF_STOCK", "within the mark");
    tokio::time::sleep(Duration::from_millis(3100)).await;
    assert_eq!(
        app.reserve("COPY", 6, "o10", 10).await.0,
        StatusCode::CREATED
    );
    let (_, body) = app.reserve("COPY", 5, "o11", 10).await;
    assert_eq!(error_of(&body), "OUT_OF_STOCK");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warm_up_loads_what_postgres_has_left_never_the_total() {
    let app = Arc::new(TestApp::spawn().await);
    let later = Utc::now() + chrono::Duration::hours(2);
    app.voucher(
        "LATER",
        10,
        json!({"flashSale": true, "startsAt": later.to_rfc3339(),
                                   "endsAt": (later + chrono::Duration::hours(1)).to_rfc3339()}),
    )
    .await;
    assert_eq!(
        app.gate_remaining("LATER").await,
        None,
        "a sale hours away is not loaded at creation"
    );
    let (status, body) = app.warmup("later").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"code": "LATER", "loadedNow": true, "remaining": 10})
    );
    let (_, body) = app.warmup("LATER").await;
    assert_eq!(body["loadedNow"], false);

    app.voucher("PLAIN", 10, json!({})).await;
    let (status, body) = app.warmup("PLAIN").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("INVALID_REQUEST"))
    );
    let (status, body) = app.warmup("NOPE").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("VOUCHER_NOT_FOUND"))
    );

    // A sale under way: 3 uses taken, Redis emptied, then loaded again from Postgres.
    app.voucher("NOW", 10, json!({"flashSale": true, "perUserLimit": 2}))
        .await;
    assert_eq!(
        app.gate_remaining("NOW").await,
        Some(10),
        "a sale starting now is loaded at creation"
    );
    for (c, o) in [(1, "a"), (1, "b"), (2, "c")] {
        assert_eq!(app.reserve("NOW", c, o, 10).await.0, StatusCode::CREATED);
    }
    app.flush_gate().await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flashgate"))
        .args(["warmup", "now"])
        .env("DATABASE_URL", app.database_url())
        .env("REDIS_URL", redis_url())
        .env("REDIS_KEY_PREFIX", app.key_prefix())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["remaining"], 7);
    assert_eq!(app.gate_remaining("NOW").await, Some(7));
    // Per-customer counts came back too: customer 1 is at its limit of 2.
    let (status, body) = app.reserve("NOW", 1, "d", 10).await;
    assert_eq!(
        (status, error_of(&body).as_str()),
        (StatusCode::CONFLICT, "ALREADY_USED")
    );

    // Lazily, under the lock: many callers at once find it unloaded, one loads.
    app.flush_gate().await;
    let tasks: Vec<_> = (10..60)
        .map(|i| {
            let app = app.clone();
            tokio::spawn(async move { app.reserve("NOW", i, &format!("lazy{i}"), 10).await.0 })
        })
        .collect();
    let mut created = 0;
    for t in tasks {
        created += (t.await.unwrap() == StatusCode::CREATED) as i32;
    }
    assert_eq!(created, 7);
    assert_eq!(app.counts("NOW").await.used_count, 10);
    assert_eq!(app.gate_remaining("NOW").await, Some(0));
}

/// The reconciler repairs `remaining` only with nothing pending, checked in the same atomic
/// step: an order the gate granted after the reconciler counted what was in flight (its event
/// still on the queue) makes the gate look one short, and raising it would hand that use out
/// twice.
#[tokio::test]
async fn the_repair_never_raises_the_gate_while_an_order_is_pending() {
    let app = TestApp::spawn_mode(true).await;
    app.voucher("RACE", 5, json!({})).await;
    assert_eq!(
        app.gate_remaining("RACE").await,
        Some(5),
        "loaded at creation"
    );
    let code = harness::voucher_code("RACE");
    let gate = app.app.gate();
    let now = Utc::now().timestamp_millis();
    let reply = gate.reserve(&code, 1, "flying", 10, now).await.unwrap();
    assert_eq!(reply.outcome, ReserveOutcome::Reserved);
    let read = gate.counts(&code).await.unwrap().expect("loaded");
    assert_eq!(read.remaining, 4);
    // What a reconciler that counted nothing in flight would do: 4 -> 5.
    assert!(!gate
        .repair_remaining(&code, read, 5, None, 1)
        .await
        .unwrap());
    assert_eq!(app.gate_remaining("RACE").await, Some(4));
    gate.settled(&code, "flying").await.unwrap();
    // Nor when the voucher changed since the figure was computed.
    assert!(!gate
        .repair_remaining(&code, read, 5, None, 0)
        .await
        .unwrap());
    // Nor when an order gained or lost a use since it was read (the change counter moved).
    let before = GateCounts {
        moves: read.moves - 1,
        ..read
    };
    assert!(!gate
        .repair_remaining(&code, before, 5, None, 1)
        .await
        .unwrap());
    // With nothing pending (its row landed and the mark was cleared), the repair goes through.
    assert!(gate
        .repair_remaining(&code, read, 5, None, 1)
        .await
        .unwrap());
    assert_eq!(app.gate_remaining("RACE").await, Some(5));
}

/// A loader that outlived its lock's TTL must not release the lock another caller took since.
#[tokio::test]
async fn a_late_loader_leaves_another_callers_lock_alone() {
    let app = TestApp::spawn().await;
    let code = harness::voucher_code("LOCKED");
    let gate = app.app.gate();
    let ttl = Duration::from_millis(100);
    assert!(gate.try_lock_loading(&code, "first", ttl).await.unwrap());
    tokio::time::sleep(Duration::from_millis(250)).await; // past the TTL on purpose
    assert!(gate
        .try_lock_loading(&code, "second", ttl * 50)
        .await
        .unwrap());
    assert!(
        !gate.unlock_loading(&code, "first").await.unwrap(),
        "the first loader's lock is gone; the second's stays"
    );
    assert!(!gate.try_lock_loading(&code, "third", ttl).await.unwrap());
    assert!(gate.unlock_loading(&code, "second").await.unwrap());
    assert!(gate.try_lock_loading(&code, "third", ttl).await.unwrap());
}

/// A loader that stalls past its gate lock (a pool wait, a slow statement, a big campaign) read
/// Postgres before a change that took the lock since, found the gate not loaded and so had
/// nothing to change there. Its snapshot must not be written: `load.lua` writes only while the
/// lock still holds the loader's token. Before the fix it wrote: PATCH `totalLimit` 100 -> 10
/// and `active: false` answered 200, and the gate said 100 uses left, open.
#[tokio::test]
async fn a_loader_that_outlived_its_lock_cannot_write_over_a_change() {
    let app = TestApp::spawn_mode(true).await;
    let later = Utc::now() + chrono::Duration::hours(1);
    // Starting in an hour: not loaded at creation.
    app.voucher(
        "STALE",
        100,
        json!({"startsAt": later.to_rfc3339(),
               "endsAt": (later + chrono::Duration::days(1)).to_rfc3339()}),
    )
    .await;
    let (gate, code) = (app.app.gate(), voucher_code("STALE"));
    // The loader takes the lock and reads its snapshot, then stalls past the lock's life.
    assert!(gate
        .try_lock_loading(&code, "stale-loader", Duration::from_millis(100))
        .await
        .unwrap());
    let source = app
        .app
        .store()
        .gate_source(&code, true)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, patched) = app
        .patch_voucher("STALE", json!({"totalLimit": 10, "active": false}))
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    let meta = GateMeta::of(
        &source.rules,
        source.reservation_ttl_seconds,
        source.version,
    );
    let late = gate
        .load(
            &code,
            "stale-loader",
            &meta,
            counts(source.remaining, source.budget_left, &source.users, None),
        )
        .await
        .unwrap();
    assert_eq!(late, Loaded::Fenced);
    assert_eq!(
        gate.remaining(&code).await.unwrap(),
        None,
        "nothing written"
    );
    // The next loader reads the change.
    let (status, warmed) = app.warmup("STALE").await;
    assert_eq!(status, StatusCode::OK, "{warmed}");
    assert_eq!(gate.remaining(&code).await.unwrap(), Some(10));
    assert_eq!(app.gate_meta("STALE", "active").await.as_deref(), Some("0"));
}

/// The gate's calls are tried again on a dropped connection, so only a script that runs the
/// same twice may be. Uncount (an order the gate counted twice after it lost data: one use
/// comes back, the order stays active) is not such a script: a connection dropped after it ran
/// and before its reply came back gave the use back twice on main. It now runs once; the lost
/// reply is an error, and the reconciler sees to the drift.
#[tokio::test]
async fn an_uncount_whose_reply_is_lost_gives_its_use_back_once() {
    let app = TestApp::builder()
        .flash(true)
        .with_redis_proxy()
        .spawn()
        .await;
    app.voucher("UNCOUNT", 10, json!({})).await;
    assert_eq!(
        app.reserve("UNCOUNT", 1, "o1", 100).await.0,
        StatusCode::CREATED
    );
    assert_eq!(app.gate_remaining("UNCOUNT").await, Some(9));
    let code = voucher_code("UNCOUNT");
    app.redis_proxy().drop_replies(1);
    let removed = app
        .app
        .gate()
        .remove(&code, "o1", Removal::Uncount, Some(1))
        .await;
    assert_eq!(
        app.gate_remaining("UNCOUNT").await,
        Some(10),
        "one use back, not two"
    );
    assert!(removed.is_err(), "the reply was lost: {removed:?}");
}
