//! A flash-sale campaign's gate: every code of a campaign decided in its campaign's keys, one
//! script checking the code's limit with the campaign's per-user limit, total and budget
//! (docs/ARCHITECTURE.md, "Campaigns in the gate"). Real Redis, and a real Redis Cluster,
//! where a script touching two slots would be refused: exact counts throughout.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::future::join_all;
use shared::config::RedisSettings;
use shared::domain::{Discount, ReserveOutcome, VoucherCode};
use shared::gate::{CodeCounts, Gate, GateMeta, Loaded, Place, Removal, Removed, Retired, Unit};
use shared::reservations::error::WarmupError;

use crate::harness::{cluster_url, load_counts as counts, lock_gate, redis_url, TestApp};

fn gate(cluster: bool) -> Arc<Gate> {
    Arc::new(
        Gate::new(&RedisSettings {
            url: if cluster { cluster_url() } else { redis_url() },
            cluster,
            key_prefix: "fg_test_campaign_gate:".to_owned(),
            timeout: Duration::from_secs(5),
            auth_secret_arn: None,
            password: None,
        })
        .unwrap(),
    )
}

/// A campaign id no other run uses.
fn campaign_id() -> i64 {
    (uuid::Uuid::new_v4().as_u128() as i64).abs()
}

fn codes(id: i64, n: usize) -> Vec<VoucherCode> {
    (0..n)
        .map(|i| VoucherCode::parse(&format!("Q{}-{i}", id % 1_000_000_000)).unwrap())
        .collect()
}

/// Rules open for an hour around now; the campaign's per-user limit is `per_user`.
fn meta(discount: Discount, per_user: i64) -> GateMeta {
    let now = Utc::now().timestamp_millis();
    GateMeta {
        discount,
        min_order: 0,
        starts_ms: now - 3_600_000,
        ends_ms: now + 3_600_000,
        per_user,
        ttl_ms: 60_000,
        active: true,
        version: 1,
    }
}

fn per_code(n: i64) -> CodeCounts {
    CodeCounts {
        per_code: n,
        uses: Vec::new(),
    }
}

/// A small deterministic generator: the amounts differ from run to run only by the seed.
fn amounts(seed: u64, n: usize) -> Vec<i64> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            1_000 + (x % 200_000) as i64
        })
        .collect()
}

async fn budget_covers_exactly_its_share(gate: Arc<Gate>) {
    // 500 customers at once, each on a code of their own; the budget covers 100 discounts.
    let id = campaign_id();
    let codes = codes(id, 500);
    let now = Utc::now().timestamp_millis();
    let at = Place::in_campaign(id, &codes[0]);
    let meta = meta(Discount::Fixed(1_000), i64::MAX);
    let token = lock_gate(&gate, at).await;
    assert_eq!(
        gate.load(
            at,
            token,
            &meta,
            counts(1_000, Some(100_000), &[], Some(&per_code(1)))
        )
        .await
        .unwrap(),
        Loaded::Now
    );
    gate.unlock_loading(at, token).await.unwrap();
    let answers = join_all(codes.iter().enumerate().map(|(i, code)| {
        let gate = gate.clone();
        async move {
            let at = Place::in_campaign(id, code);
            gate.reserve(at, i as i64 + 1, "o", 5_000, now)
                .await
                .unwrap()
                .outcome
        }
    }))
    .await;
    let won = answers
        .iter()
        .filter(|o| **o == ReserveOutcome::Reserved)
        .count();
    let refused = answers
        .iter()
        .filter(|o| **o == ReserveOutcome::BudgetExhausted)
        .count();
    assert_eq!((won, refused), (100, 400), "{answers:?}");
    let counts = gate.counts(at).await.unwrap().unwrap();
    assert_eq!((counts.remaining, counts.budget), (900, Some(0)));
    assert_eq!(
        gate.retire(at, meta.ends_ms + 1, Duration::ZERO)
            .await
            .unwrap(),
        Retired::Pending,
        "kept while its winners are on their way to Postgres"
    );
    retire(&gate, id, &codes, meta.ends_ms + 1).await;
}

/// Every code's order "o" settled, then the campaign's gate retired after its sale.
async fn retire(gate: &Gate, id: i64, codes: &[VoucherCode], after_end: i64) {
    for code in codes {
        gate.settled(Place::in_campaign(id, code), "o")
            .await
            .unwrap();
    }
    let at = Place::in_campaign(id, &codes[0]);
    assert_eq!(
        gate.retire(at, after_end, Duration::ZERO).await.unwrap(),
        Retired::Retired
    );
}

async fn percentage_discounts_never_pass_the_budget(gate: Arc<Gate>) {
    let id = campaign_id();
    let codes = codes(id, 300);
    let now = Utc::now().timestamp_millis();
    let at = Place::in_campaign(id, &codes[0]);
    let budget = 500_000;
    let meta = meta(
        Discount::Percent {
            percent: 15,
            cap: Some(20_000),
        },
        i64::MAX,
    );
    let token = lock_gate(&gate, at).await;
    gate.load(
        at,
        token,
        &meta,
        counts(10_000, Some(budget), &[], Some(&per_code(1))),
    )
    .await
    .unwrap();
    gate.unlock_loading(at, token).await.unwrap();
    let amounts = amounts(id as u64, codes.len());
    let answers = join_all(
        codes
            .iter()
            .zip(&amounts)
            .enumerate()
            .map(|(i, (code, &amount))| {
                let gate = gate.clone();
                async move {
                    let at = Place::in_campaign(id, code);
                    let reply = gate
                        .reserve(at, i as i64 + 1, "o", amount, now)
                        .await
                        .unwrap();
                    (reply, amount)
                }
            }),
    )
    .await;
    let granted: i64 = answers
        .iter()
        .filter_map(|(r, _)| r.held.filter(|_| r.outcome == ReserveOutcome::Reserved))
        .map(|h| h.discount)
        .sum();
    let left = gate.counts(at).await.unwrap().unwrap().budget.unwrap();
    assert!(granted <= budget, "{granted} granted of {budget}");
    assert_eq!(
        granted + left,
        budget,
        "every discount granted is counted once"
    );
    let discount = |amount: i64| (amount * 15 / 100).min(20_000);
    for (reply, amount) in &answers {
        if reply.outcome == ReserveOutcome::BudgetExhausted {
            // The money left only went down: it was no more than it is now when refused.
            assert!(
                discount(*amount) > left,
                "refused {amount} with {left} left"
            );
        } else {
            assert_eq!(reply.outcome, ReserveOutcome::Reserved);
        }
    }
    assert!(
        answers
            .iter()
            .any(|(r, _)| r.outcome == ReserveOutcome::BudgetExhausted),
        "the budget ran out"
    );
    retire(&gate, id, &codes, meta.ends_ms + 1).await;
}

async fn codes_per_user_and_total_hold_together(gate: Arc<Gate>) {
    let id = campaign_id();
    let codes = codes(id, 8);
    let now = Utc::now().timestamp_millis();
    let on = |i: usize| Place::in_campaign(id, &codes[i]);
    // Two uses per customer over the campaign, five in all, one per code.
    let meta = meta(Discount::Fixed(10), 2);
    let token = lock_gate(&gate, on(0)).await;
    gate.load(
        on(0),
        token,
        &meta,
        counts(5, None, &[], Some(&per_code(1))),
    )
    .await
    .unwrap();
    gate.unlock_loading(on(0), token).await.unwrap();
    let reserve = |i: usize, customer: i64, order: &str| {
        let gate = gate.clone();
        let at = on(i);
        let order = order.to_owned();
        async move {
            gate.reserve(at, customer, &order, 100, now)
                .await
                .unwrap()
                .outcome
        }
    };

    // A single-use code wins once among 50 at once; the others find it taken.
    let answers = join_all((0..50).map(|c| reserve(0, 100 + c, &format!("a{c}")))).await;
    let won = answers
        .iter()
        .filter(|o| **o == ReserveOutcome::Reserved)
        .count();
    assert_eq!(won, 1, "{answers:?}");
    assert!(answers
        .iter()
        .all(|o| matches!(o, ReserveOutcome::Reserved | ReserveOutcome::OutOfStock)));
    let winner = 100
        + answers
            .iter()
            .position(|o| *o == ReserveOutcome::Reserved)
            .unwrap() as i64;
    // Its holder asking again with another order is over the code's limit per user first, as
    // fg_validate decides it.
    let won = format!("a{}", winner - 100);
    assert_eq!(reserve(0, winner, "b").await, ReserveOutcome::AlreadyUsed);
    assert_eq!(reserve(0, winner, &won).await, ReserveOutcome::Replay);
    assert_eq!(reserve(0, 1, "c").await, ReserveOutcome::OutOfStock);

    // The campaign's per-user limit holds across codes.
    assert_eq!(reserve(1, 7, "x").await, ReserveOutcome::Reserved);
    assert_eq!(reserve(2, 7, "x").await, ReserveOutcome::Reserved);
    assert_eq!(reserve(3, 7, "x").await, ReserveOutcome::AlreadyUsed);
    assert_eq!(
        gate.validate(on(3), 7, 100, now).await.unwrap(),
        (ReserveOutcome::AlreadyUsed, 0)
    );
    // An order id is per code: the same one on another code is another order.
    assert_eq!(reserve(3, 8, "x").await, ReserveOutcome::Reserved);
    assert_eq!(
        gate.validate(on(4), 9, 100, now).await.unwrap(),
        (ReserveOutcome::Eligible, 10)
    );
    assert_eq!(reserve(4, 9, "x").await, ReserveOutcome::Reserved);
    // Five uses held: the campaign's total.
    assert_eq!(reserve(5, 10, "x").await, ReserveOutcome::OutOfStock);
    assert_eq!(
        gate.validate(on(5), 10, 100, now).await.unwrap(),
        (ReserveOutcome::OutOfStock, 0)
    );

    // A release, repeated ten times at once, gives back the code's use, the customer's and the
    // campaign's once.
    let released = join_all((0..10).map(|_| {
        let gate = gate.clone();
        async move {
            gate.remove(on(1), "x", Removal::Release, None)
                .await
                .unwrap()
        }
    }))
    .await;
    assert_eq!(
        released.iter().filter(|r| **r == Removed::Released).count(),
        1,
        "{released:?}"
    );
    assert_eq!(gate.remaining(on(0)).await.unwrap(), Some(1));
    assert_eq!(
        reserve(1, 7, "x").await,
        ReserveOutcome::ReservationReleased
    );
    assert_eq!(
        reserve(1, 11, "y").await,
        ReserveOutcome::Reserved,
        "the code is free again"
    );
    assert_eq!(
        reserve(6, 7, "z").await,
        ReserveOutcome::OutOfStock,
        "the total again"
    );
    let (entry, uses) = {
        let seen = gate.lookup(on(2), "x", Some(7)).await.unwrap();
        (seen.entry, seen.uses)
    };
    assert!(entry.is_some());
    assert_eq!(uses, 1, "customer 7 holds one use over the campaign again");

    // Retired once the sale is over and nothing is pending: every key goes, `codes` included.
    for (i, order) in [(0, won.as_str()), (2, "x"), (3, "x"), (4, "x"), (1, "y")] {
        gate.settled(on(i), order).await.unwrap();
    }
    let later = meta.ends_ms + 1;
    assert_eq!(
        gate.retire(on(0), later, Duration::ZERO).await.unwrap(),
        Retired::Retired
    );
    assert!(!gate.is_loaded(on(0)).await.unwrap());
    assert_eq!(reserve(7, 12, "x").await, ReserveOutcome::NotLoaded);
}

async fn a_loaded_campaign_knows_its_codes_uses(gate: Arc<Gate>) {
    let id = campaign_id();
    let codes = codes(id, 2);
    let now = Utc::now().timestamp_millis();
    let on = |i: usize| Place::in_campaign(id, &codes[i]);
    let held = CodeCounts {
        per_code: 2,
        uses: vec![
            (codes[0].as_str().to_owned(), 2),
            (format!("{}|5", codes[0].as_str()), 1),
            (format!("{}|6", codes[0].as_str()), 1),
            (codes[1].as_str().to_owned(), 1),
            (format!("{}|5", codes[1].as_str()), 1),
        ],
    };
    let token = lock_gate(&gate, on(0)).await;
    gate.load(
        on(0),
        token,
        &meta(Discount::Fixed(1), 5),
        counts(10, None, &[(5, 2), (6, 1)], Some(&held)),
    )
    .await
    .unwrap();
    gate.unlock_loading(on(0), token).await.unwrap();
    let reserve = |i: usize, customer: i64| {
        let gate = gate.clone();
        let at = on(i);
        let order = format!("n{customer}");
        async move {
            gate.reserve(at, customer, &order, 10, now)
                .await
                .unwrap()
                .outcome
        }
    };
    assert_eq!(
        reserve(0, 7).await,
        ReserveOutcome::OutOfStock,
        "code 0 holds its two"
    );
    assert_eq!(reserve(0, 5).await, ReserveOutcome::OutOfStock);
    assert_eq!(reserve(1, 7).await, ReserveOutcome::Reserved);
    assert_eq!(
        reserve(1, 5).await,
        ReserveOutcome::OutOfStock,
        "code 1 now holds its two"
    );
    let now = meta(Discount::Fixed(1), 5).ends_ms + 1;
    gate.settled(on(1), "n7").await.unwrap();
    assert_eq!(
        gate.retire(on(0), now, Duration::ZERO).await.unwrap(),
        Retired::Retired
    );
}

async fn every_campaign_check(gate: Arc<Gate>) {
    budget_covers_exactly_its_share(gate.clone()).await;
    percentage_discounts_never_pass_the_budget(gate.clone()).await;
    codes_per_user_and_total_hold_together(gate.clone()).await;
    a_loaded_campaign_knows_its_codes_uses(gate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_campaigns_gate_holds_its_limits_on_one_redis() {
    every_campaign_check(gate(false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_campaigns_gate_holds_its_limits_on_a_redis_cluster() {
    every_campaign_check(gate(true)).await;
}

/// A campaign's gate loaded from Postgres knows what the campaign and each code hold: its uses
/// left, its money left, each customer's uses over it and of each code. The campaign here is
/// reserved as a standard one, then made flash-sale in SQL, so that Postgres holds uses the
/// gate never saw (as after Redis lost its data).
#[tokio::test]
async fn a_campaigns_gate_is_loaded_from_what_postgres_holds() {
    let app = TestApp::spawn().await;
    let now = Utc::now();
    let codes = ["LOADA", "LOADB", "LOADC", "LOADD"];
    let (status, view) = app
        .create_campaign(serde_json::json!({
            "discountAmount": 1_000,
            "startsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
            "endsAt": (now + chrono::Duration::days(1)).to_rfc3339(),
            "codes": codes,
            "perCodeLimit": 2,
            "perUserLimit": 3,
            "totalLimit": 10,
            "budgetAmount": 10_000,
        }))
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{view}");
    let id = view["id"].as_i64().unwrap();
    for (code, customer, order) in [("LOADA", 1, "o1"), ("LOADA", 1, "o2"), ("LOADB", 2, "o3")] {
        let (status, body) = app.reserve(code, customer, order, 5_000).await;
        assert_eq!(status, reqwest::StatusCode::CREATED, "{body}");
    }
    let warmup = app.app.reservations().warmup();
    assert!(matches!(
        warmup.warm_campaign(id).await,
        Err(WarmupError::NotFlashSale)
    ));
    assert!(matches!(
        warmup.warm_campaign(id + 1_000_000).await,
        Err(WarmupError::NotFound)
    ));
    app.db
        .execute(
            "UPDATE campaign SET flash_sale = true WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    assert!(warmup.warm_campaign(id).await.unwrap(), "loaded now");
    assert!(!warmup.warm_campaign(id).await.unwrap(), "loaded once");

    let gate = app.app.gate();
    let counts = gate.counts(Unit::Campaign(id)).await.unwrap().unwrap();
    assert_eq!((counts.remaining, counts.budget), (7, Some(7_000)));
    let code = |c: &str| shared::domain::VoucherCode::parse(c).unwrap();
    let (a, b, c) = (code("LOADA"), code("LOADB"), code("LOADC"));
    let ms = now.timestamp_millis();
    // LOADA holds its two uses, both customer 1's.
    assert_eq!(
        reserve_at(gate, Place::in_campaign(id, &a), 3, "n1", ms).await,
        ReserveOutcome::OutOfStock
    );
    assert_eq!(
        reserve_at(gate, Place::in_campaign(id, &a), 1, "n2", ms).await,
        ReserveOutcome::AlreadyUsed
    );
    // Customer 1's two uses count over the campaign too: one more fits, on another code.
    assert_eq!(
        reserve_at(gate, Place::in_campaign(id, &b), 1, "n3", ms).await,
        ReserveOutcome::Reserved,
        "customer 1 holds two of the campaign's three"
    );
    assert_eq!(
        reserve_at(gate, Place::in_campaign(id, &c), 1, "n4", ms).await,
        ReserveOutcome::AlreadyUsed
    );
    assert_eq!(
        reserve_at(gate, Place::in_campaign(id, &b), 4, "n5", ms).await,
        ReserveOutcome::OutOfStock,
        "LOADB holds customer 2's and customer 1's"
    );
    let counts = gate.counts(Unit::Campaign(id)).await.unwrap().unwrap();
    assert_eq!((counts.remaining, counts.budget), (6, Some(6_000)));

    // A change of the campaign is a new version of its rules.
    let version = || async {
        let row = app
            .db
            .query_one("SELECT version FROM campaign WHERE id = $1", &[&id])
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    assert_eq!(version().await, 1);
    let (status, body) = app
        .patch_campaign(id, serde_json::json!({"active": false}))
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert_eq!(version().await, 2);
}

async fn reserve_at(
    gate: &Gate,
    place: Place<'_>,
    customer: i64,
    order: &str,
    now_ms: i64,
) -> ReserveOutcome {
    gate.reserve(place, customer, order, 5_000, now_ms)
        .await
        .unwrap()
        .outcome
}

/// A flash campaign's gate through a sale's life, over HTTP and the sweeper: a change pauses
/// it in the gate at once; expired uses come back to it; a drifted count is repaired; once the
/// sale is over, every key of it goes, and Postgres answers for its codes.
#[tokio::test]
async fn a_flash_campaigns_gate_is_changed_swept_and_retired() {
    let app = TestApp::builder()
        .flash(true)
        .configure(|s| s.sweep.retire_after = Duration::ZERO)
        .spawn()
        .await;
    let now = Utc::now();
    let (status, view) = app
        .create_campaign(serde_json::json!({
            "discountAmount": 1_000,
            "startsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
            "endsAt": (now + chrono::Duration::days(1)).to_rfc3339(),
            "codes": ["SWA", "SWB", "SWC", "SWD", "SWE"],
            "flashSale": true,
            "reservationTtlSeconds": 1,
            "totalLimit": 5,
            "budgetAmount": 5_000,
        }))
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{view}");
    assert_eq!(view["flashSale"], true, "{view}");
    let id = view["id"].as_i64().unwrap();
    let unit = Unit::Campaign(id);
    let gate = app.app.gate();
    let counts = || async {
        let c = gate.counts(unit).await.unwrap().unwrap();
        (c.remaining, c.budget)
    };
    assert_eq!(counts().await, (5, Some(5_000)), "loaded at creation");
    // An operator's warm-up of any of its codes answers for the campaign's gate.
    let (status, warmed) = app.warmup("SWC").await;
    assert_eq!(status, reqwest::StatusCode::OK, "{warmed}");
    assert_eq!(
        (&warmed["loadedNow"], &warmed["remaining"]),
        (&serde_json::json!(false), &serde_json::json!(5))
    );

    // Paused: the gate refuses at once; resumed, it grants again.
    let (status, body) = app
        .patch_campaign(id, serde_json::json!({"active": false}))
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let (status, body) = app.reserve("SWA", 1, "p", 5_000).await;
    assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    app.patch_campaign(id, serde_json::json!({"active": true}))
        .await;
    for (code, customer) in [("SWA", 1), ("SWB", 2), ("SWC", 3)] {
        let (status, body) = app.reserve(code, customer, "o", 5_000).await;
        assert_eq!(status, reqwest::StatusCode::CREATED, "{body}");
    }
    assert_eq!(counts().await, (2, Some(2_000)));
    // A lower total than the gate holds is refused by the gate, nothing changed.
    let (status, body) = app
        .patch_campaign(id, serde_json::json!({"totalLimit": 2}))
        .await;
    assert_eq!(status, reqwest::StatusCode::CONFLICT, "{body}");
    assert_eq!(counts().await, (2, Some(2_000)));

    // The 1 s reservations expire: their uses and money come back to the campaign's gate.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.expired, 3, "{report:?}");
    assert_eq!(counts().await, (5, Some(5_000)));
    assert_eq!(
        app.reserve("SWA", 9, "again", 5_000).await.0,
        reqwest::StatusCode::CREATED,
        "the code is free again"
    );

    // Drift (a count Redis lost): repaired by the next sweep.
    let keys = shared::gate::Keys::campaign(&app.key_prefix(), id);
    let mut redis = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&keys.remaining)
        .arg(1)
        .query_async(&mut redis)
        .await
        .unwrap();
    let report = app.app.sweeper().sweep().await.unwrap();
    assert_eq!(report.drift_repaired, 1, "{report:?}");
    assert_eq!(counts().await, (4, Some(4_000)));

    // The sale ends: the next sweep retires the campaign's gate, every key of it.
    let (status, body) = app
        .patch_campaign(
            id,
            serde_json::json!({"endsAt": (Utc::now() + chrono::Duration::milliseconds(300)).to_rfc3339()}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let report = app.app.sweeper().sweep().await.unwrap();
    assert!(report.retired >= 1, "{report:?}");
    assert!(!gate.is_loaded(unit).await.unwrap());
    let left: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}campaign:{{campaign:{id}}}:*", app.key_prefix()))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    let loaded: bool = app
        .db
        .query_one("SELECT gate_loaded FROM campaign WHERE id = $1", &[&id])
        .await
        .unwrap()
        .get(0);
    assert!(!loaded);
    // Postgres answers for the codes now: the sale is over.
    let (status, body) = app.reserve("SWD", 4, "late", 5_000).await;
    assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{body}");
}
