//! The set-based batch writes (`fg_merge_strict`, `fg_reserve_strict`, and the loop when they
//! decline, as the service runs them) against the loop they replace
//! (`fg_merge_batch` and `fg_reserve_batch`, each change in a savepoint of its own): random
//! batches, duplicates, conflicts, refusals, revocations and bad changes included, run through
//! both from the same stored state. Every answer, every row (but the slot it took: the set-based
//! path hands a batch's winners slot room in bulk) and every counter must be the same, and every
//! slot's counters and every budget's must equal the rows they hold. The same again with the
//! two vouchers the codes of one campaign: the campaign's total, budget and per-user
//! counters too, and a campaign whose pause or window differs from its code rows' copies.

use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

use crate::harness::TestApp;

const CODES: [&str; 3] = ["SA", "SB", "SZ"]; // SZ does not exist
const TTL_SECONDS: i64 = 60;

fn base() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap()
}

/// One argument list of `fg_merge`.
#[derive(Debug, Clone)]
struct Change {
    code: &'static str,
    order: String,
    customer: Option<i64>,
    status: i16,
    /// Expiry past the TTL (fg_merge raises).
    forged: bool,
    revoke: bool,
    /// Seconds after `base()` it happens.
    at: i64,
}

fn change() -> impl Strategy<Value = Change> {
    (
        prop_oneof![10 => Just(0usize), 10 => Just(1usize), 1 => Just(2usize)],
        0..14usize,
        prop_oneof![1 => Just(None), 4 => (1..=3_i64).prop_map(Some)],
        prop_oneof![4 => Just(1_i16), 2 => Just(2_i16), 2 => Just(3_i16)],
        prop::bool::weighted(0.03),
        prop::bool::weighted(0.6),
        0..30_i64,
    )
        .prop_map(
            |(code, order, customer, status, forged, revoke, at)| Change {
                code: CODES[code],
                order: format!("o{order}"),
                customer,
                status,
                forged,
                revoke,
                at,
            },
        )
}

/// One standard reserve.
#[derive(Debug, Clone)]
struct Request {
    code: &'static str,
    order: String,
    customer: i64,
    amount: i64,
}

fn request() -> impl Strategy<Value = Request> {
    (
        prop_oneof![10 => Just(0usize), 10 => Just(1usize), 1 => Just(2usize)],
        0..14usize,
        1..=4_i64,
        prop_oneof![1 => Just(50_i64), 6 => Just(1_000_i64)],
    )
        .prop_map(|(code, order, customer, amount)| Request {
            code: CODES[code],
            order: format!("o{order}"),
            customer,
            amount,
        })
}

#[derive(Debug, Clone)]
struct Voucher {
    limit: i32,
    per_user: i32,
    slots: i16,
    active: bool,
    /// The money budget (None: none); discounts are 30 or 100.
    budget: Option<i64>,
}

fn voucher() -> impl Strategy<Value = Voucher> {
    (
        1..=4_i32,
        1..=2_i32,
        1..=3_i16,
        prop::bool::weighted(0.9),
        prop_oneof![1 => Just(None), 1 => (0..=8_i64).prop_map(|k| Some(k * 30 + k / 3 * 10))],
    )
        .prop_map(|(limit, per_user, slots, active, budget)| Voucher {
            limit,
            per_user,
            slots: slots.min(limit as i16),
            active,
            budget,
        })
}

/// The campaign whose codes SA and SB are, in the campaign run.
#[derive(Debug, Clone)]
struct Campaign {
    total: Option<i64>,
    per_user: Option<i32>,
    budget: Option<i64>,
    active: bool,
    /// The campaign's window against its codes' copies of it (written with the codes, never
    /// moved by a PATCH of the campaign): 0 the same, 1 the campaign's ended before the
    /// batch, 2 the codes' copies ended before it but the campaign's was moved on.
    window: u8,
}

const CAMPAIGN_ID: i64 = 7;

fn campaign() -> impl Strategy<Value = Campaign> {
    (
        // Room often enough that the set-based path takes batches, small often enough that
        // the campaign refuses some and the loop decides them.
        prop_oneof![2 => Just(None), 1 => (0..=3_i64).prop_map(Some), 3 => (4..=12_i64).prop_map(Some)],
        prop_oneof![2 => Just(None), 1 => (1..=2_i32).prop_map(Some), 2 => (3..=6_i32).prop_map(Some)],
        prop_oneof![
            2 => Just(None),
            1 => (0..=8_i64).prop_map(|k| Some(k * 30 + k / 3 * 10)),
            2 => (10..=20_i64).prop_map(|k| Some(k * 100)),
        ],
        prop::bool::weighted(0.95),
        prop_oneof![16 => Just(0_u8), 1 => Just(1_u8), 1 => Just(2_u8)],
    )
        .prop_map(|(total, per_user, budget, active, window)| Campaign {
            total,
            per_user,
            budget,
            active,
            window,
        })
}

/// `fg_merge_batch`'s or `fg_merge_strict`'s answer rows, as text.
type Answers = Vec<String>;

/// Everything stored: rows without their slot, customer counters, each voucher's summed slot
/// counters.
type Stored = Vec<String>;

async fn merge(db: &Client, function: &str, changes: &[Change]) -> Result<Answers, String> {
    let codes: Vec<&str> = changes.iter().map(|c| c.code).collect();
    let orders: Vec<&str> = changes.iter().map(|c| c.order.as_str()).collect();
    let customers: Vec<Option<i64>> = changes.iter().map(|c| c.customer).collect();
    let statuses: Vec<i16> = changes.iter().map(|c| c.status).collect();
    let held = |c: &Change| c.customer.is_some();
    let amounts: Vec<Option<i64>> = changes.iter().map(|c| held(c).then_some(1_000)).collect();
    // Two sizes of discount, so that a budget can fit one and not the other.
    let discounts: Vec<Option<i64>> = changes
        .iter()
        .map(|c| held(c).then_some(if c.at % 3 == 0 { 30 } else { 100 }))
        .collect();
    let reserved: Vec<Option<DateTime<Utc>>> = changes
        .iter()
        .map(|c| held(c).then(|| base() + Duration::seconds(c.at)))
        .collect();
    let expires: Vec<Option<DateTime<Utc>>> = changes
        .iter()
        .map(|c| {
            let ttl = TTL_SECONDS + if c.forged { 60 } else { 0 };
            held(c).then(|| base() + Duration::seconds(c.at + ttl))
        })
        .collect();
    let reasons: Vec<Option<&str>> = changes
        .iter()
        .map(|c| (c.status == 3 && c.at % 2 == 0).then_some("EXPIRED"))
        .collect();
    let nows: Vec<DateTime<Utc>> = changes
        .iter()
        .map(|c| base() + Duration::seconds(c.at + 1))
        .collect();
    let revokes: Vec<bool> = changes.iter().map(|c| c.revoke).collect();
    let isolate = function == "fg_merge_batch";
    let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
        (&codes, Type::TEXT_ARRAY),
        (&orders, Type::TEXT_ARRAY),
        (&customers, Type::INT8_ARRAY),
        (&statuses, Type::INT2_ARRAY),
        (&amounts, Type::INT8_ARRAY),
        (&discounts, Type::INT8_ARRAY),
        (&reserved, Type::TIMESTAMPTZ_ARRAY),
        (&expires, Type::TIMESTAMPTZ_ARRAY),
        (&reasons, Type::TEXT_ARRAY),
        (&nows, Type::TIMESTAMPTZ_ARRAY),
        (&revokes, Type::BOOL_ARRAY),
    ];
    let args = if isolate {
        params.push((&isolate, Type::BOOL));
        "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12"
    } else {
        "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11"
    };
    call(db, function, args, &params).await
}

/// `fg_merge_winners`: the same changes, with only the arguments a winner has.
async fn winners(db: &Client, changes: &[Change]) -> Result<Answers, String> {
    let codes: Vec<&str> = changes.iter().map(|c| c.code).collect();
    let orders: Vec<&str> = changes.iter().map(|c| c.order.as_str()).collect();
    let customers: Vec<Option<i64>> = changes.iter().map(|c| c.customer).collect();
    let amounts: Vec<i64> = changes.iter().map(|_| 1_000).collect();
    let discounts: Vec<i64> = changes
        .iter()
        .map(|c| if c.at % 3 == 0 { 30 } else { 100 })
        .collect();
    let reserved: Vec<DateTime<Utc>> = changes
        .iter()
        .map(|c| base() + Duration::seconds(c.at))
        .collect();
    let expires: Vec<DateTime<Utc>> = changes
        .iter()
        .map(|c| {
            let ttl = TTL_SECONDS + if c.forged { 60 } else { 0 };
            base() + Duration::seconds(c.at + ttl)
        })
        .collect();
    let params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
        (&codes, Type::TEXT_ARRAY),
        (&orders, Type::TEXT_ARRAY),
        (&customers, Type::INT8_ARRAY),
        (&amounts, Type::INT8_ARRAY),
        (&discounts, Type::INT8_ARRAY),
        (&reserved, Type::TIMESTAMPTZ_ARRAY),
        (&expires, Type::TIMESTAMPTZ_ARRAY),
    ];
    call(
        db,
        "fg_merge_winners",
        "$1, $2, $3, $4, $5, $6, $7",
        &params,
    )
    .await
}

async fn reserve(db: &Client, function: &str, requests: &[Request]) -> Result<Answers, String> {
    let codes: Vec<&str> = requests.iter().map(|r| r.code).collect();
    let orders: Vec<&str> = requests.iter().map(|r| r.order.as_str()).collect();
    let customers: Vec<i64> = requests.iter().map(|r| r.customer).collect();
    let amounts: Vec<i64> = requests.iter().map(|r| r.amount).collect();
    let nows: Vec<DateTime<Utc>> = (0..requests.len())
        .map(|i| base() + Duration::seconds(40 + i as i64))
        .collect();
    let isolate = true;
    let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
        (&codes, Type::TEXT_ARRAY),
        (&orders, Type::TEXT_ARRAY),
        (&customers, Type::INT8_ARRAY),
        (&amounts, Type::INT8_ARRAY),
        (&nows, Type::TIMESTAMPTZ_ARRAY),
    ];
    let args = if function == "fg_reserve_batch" {
        params.push((&isolate, Type::BOOL));
        "$1, $2, $3, $4, $5, $6"
    } else {
        "$1, $2, $3, $4, $5"
    };
    call(db, function, args, &params).await
}

/// `function`'s answer rows, in order, as text.
async fn call(
    db: &Client,
    function: &str,
    args: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Answers, String> {
    let rows = db
        .query_typed(
            &format!("SELECT * FROM {function}({args}) ORDER BY idx"),
            params,
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(rows.iter().map(answer).collect())
}

/// Every column of an answer row, whatever the function.
fn answer(row: &tokio_postgres::Row) -> String {
    (0..row.len())
        .map(|i| match *row.columns()[i].type_() {
            Type::INT4 => format!("{:?}", row.get::<_, Option<i32>>(i)),
            Type::INT8 => format!("{:?}", row.get::<_, Option<i64>>(i)),
            Type::INT2 => format!("{:?}", row.get::<_, Option<i16>>(i)),
            Type::BOOL => format!("{:?}", row.get::<_, Option<bool>>(i)),
            Type::TIMESTAMPTZ => format!("{:?}", row.get::<_, Option<DateTime<Utc>>>(i)),
            _ => format!("{:?}", row.get::<_, Option<String>>(i)),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

async fn stored(db: &Client) -> Stored {
    let mut out = Vec::new();
    for query in [
        "SELECT voucher_code, order_id, customer_id::TEXT, status::TEXT, order_amount::TEXT,
                discount_amount::TEXT, reserved_at::TEXT, expires_at::TEXT,
                COALESCE(confirmed_at::TEXT, '-'), COALESCE(released_at::TEXT, '-'),
                COALESCE(release_reason, '-'), (slot IS NULL)::TEXT
           FROM redemption ORDER BY 1, 2",
        "SELECT voucher_code, customer_id::TEXT, active::TEXT FROM voucher_customer ORDER BY 1, 2",
        "SELECT voucher_code, sum(used)::TEXT, sum(confirmed)::TEXT, sum(revoked)::TEXT,
                sum(cap)::TEXT
           FROM voucher_slot GROUP BY 1 ORDER BY 1",
        "SELECT voucher_code, amount::TEXT, used::TEXT FROM voucher_budget ORDER BY 1",
        "SELECT 'campaign', used::TEXT, budget_used::TEXT FROM campaign_counter ORDER BY 1",
        "SELECT 'campaign customer', customer_id::TEXT, active::TEXT
           FROM campaign_customer ORDER BY 2",
    ] {
        for row in db.query(query, &[]).await.unwrap() {
            out.push(
                (0..row.len())
                    .map(|i| row.get::<_, String>(i))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
    }
    out
}

/// Counters that are not the rows they count, one line each: none, whichever path wrote them.
/// Slots: their uses and confirmed uses; budgets: the discounts of the active rows (a campaign
/// without a budget keeps none).
async fn counters_off(db: &Client) -> Vec<String> {
    let mut off = Vec::new();
    for query in [
        "SELECT s.voucher_code || '/' || s.slot || ' used ' || s.used || ' held ' || count(r.*)
           FROM voucher_slot s
           LEFT JOIN redemption r ON r.voucher_code = s.voucher_code AND r.slot = s.slot
                                 AND r.status IN (1, 2)
          GROUP BY s.voucher_code, s.slot, s.used, s.confirmed
         HAVING s.used <> count(r.*) OR s.confirmed <> count(r.*) FILTER (WHERE r.status = 2)",
        "SELECT 'budget ' || b.voucher_code || ' used ' || b.used || ' held '
                || COALESCE(sum(r.discount_amount), 0)
           FROM voucher_budget b
           LEFT JOIN redemption r ON r.voucher_code = b.voucher_code AND r.status IN (1, 2)
          GROUP BY b.voucher_code, b.used
         HAVING b.used <> COALESCE(sum(r.discount_amount), 0)",
        "SELECT 'campaign used ' || k.used || '/' || k.budget_used || ' held ' || count(r.*)
                || '/' || COALESCE(sum(r.discount_amount), 0)
           FROM campaign_counter k
           JOIN voucher v ON v.campaign_id = k.campaign_id
           LEFT JOIN redemption r ON r.voucher_code = v.code AND r.status IN (1, 2)
          GROUP BY k.campaign_id, k.used, k.budget_used, k.budget_amount
         HAVING k.used <> count(r.*)
             OR k.budget_used <> CASE WHEN k.budget_amount IS NULL THEN 0
                                      ELSE COALESCE(sum(r.discount_amount), 0) END",
        "SELECT 'campaign customer ' || r.customer_id || ' active ' || COALESCE(max(c.active), 0)
                || ' held ' || count(*)
           FROM redemption r
           JOIN voucher v ON v.code = r.voucher_code AND v.campaign_id IS NOT NULL
           LEFT JOIN campaign_customer c
                  ON c.campaign_id = v.campaign_id AND c.customer_id = r.customer_id
          WHERE r.status IN (1, 2)
          GROUP BY r.customer_id
         HAVING COALESCE(max(c.active), 0) <> count(*)",
    ] {
        for row in db.query(query, &[]).await.unwrap() {
            off.push(row.get(0));
        }
    }
    off
}

/// The vouchers (with a campaign: its codes) and the state before the batch, inside the open
/// transaction.
async fn set_up(
    db: &Client,
    vouchers: &[Voucher; 2],
    campaign: Option<&Campaign>,
    history: &[Change],
) {
    if let Some(g) = campaign {
        // The batch runs 40 s after base(): an ended window ends 10 s after it.
        let (starts, ends) = (base() - Duration::hours(1), base() + Duration::hours(1));
        let ended = base() + Duration::seconds(10);
        db.execute(
            "INSERT INTO campaign (id, discount_amount, starts_at, ends_at, reservation_ttl_seconds,
                                   active, per_code_limit, per_user_limit, min_order_amount)
             OVERRIDING SYSTEM VALUE
             VALUES ($1, 100, $2, $3, $4, $5, 1, $6, 100)",
            &[
                &CAMPAIGN_ID,
                &starts,
                &if g.window == 1 { ended } else { ends },
                &(TTL_SECONDS as i32),
                &g.active,
                &g.per_user,
            ],
        )
        .await
        .unwrap();
        db.execute(
            "INSERT INTO campaign_counter (campaign_id, total_limit, budget_amount)
             VALUES ($1, $2, $3)",
            &[&CAMPAIGN_ID, &g.total, &g.budget],
        )
        .await
        .unwrap();
    }
    for (code, v) in CODES.iter().zip(vouchers) {
        db.execute(
            "INSERT INTO voucher (code, discount_amount, total_limit, per_user_limit, starts_at,
                                  ends_at, flash_sale, counter_slots, active,
                                  reservation_ttl_seconds, min_order_amount)
             VALUES ($1, 100, $2, $3, $4, $8, $1 = 'SA', $5, $6, $7, 100)",
            &[
                code,
                &v.limit,
                &v.per_user,
                &(base() - Duration::hours(1)),
                &v.slots,
                &v.active,
                &(TTL_SECONDS as i32),
                &(base() + Duration::hours(1)),
            ],
        )
        .await
        .unwrap();
        if let Some(g) = campaign {
            // A code: one slot, its copies of the campaign's rules (the window as written
            // before the campaign's was moved, with window 2), not flash.
            let ends = if g.window == 2 {
                base() + Duration::seconds(10)
            } else {
                base() + Duration::hours(1)
            };
            db.execute(
                "UPDATE voucher SET campaign_id = $2, flash_sale = false, counter_slots = 1,
                                    per_user_limit = total_limit, active = true, ends_at = $3
                  WHERE code = $1",
                &[code, &CAMPAIGN_ID, &ends],
            )
            .await
            .unwrap();
        }
        let slots = if campaign.is_some() { 1 } else { v.slots };
        db.execute("SELECT fg_set_slots($1, $2, $3)", &[code, &v.limit, &slots])
            .await
            .unwrap();
        if let (Some(budget), None) = (v.budget, campaign) {
            db.execute(
                "INSERT INTO voucher_budget (voucher_code, amount) VALUES ($1, $2)",
                &[code, &budget],
            )
            .await
            .unwrap();
        }
    }
    merge(db, "fg_merge_batch", history).await.unwrap();
}

/// Runs `batch` from the same state through the loop and through the set-based path; whether
/// the set-based path took it (rather than handing it to the loop).
async fn compare(
    db: &Client,
    vouchers: &[Voucher; 2],
    campaign: Option<&Campaign>,
    history: &[Change],
    batch: &Batch,
) -> Result<bool, TestCaseError> {
    let mut runs = Vec::new();
    let mut took = false;
    for set_based in [false, true] {
        db.batch_execute("BEGIN").await.unwrap();
        set_up(db, vouchers, campaign, history).await;
        // The set-based path, and the loop when it declines (as `Store::merge_batch` and
        // `Store::reserve_batch` do), against the loop alone.
        let mut function = batch.loop_function();
        if set_based {
            db.batch_execute("SAVEPOINT strict").await.unwrap();
            took = batch.run(db, batch.strict_function()).await.is_ok();
            db.batch_execute("ROLLBACK TO SAVEPOINT strict")
                .await
                .unwrap();
            if took {
                function = batch.strict_function();
            }
        }
        let answers = batch.run(db, function).await;
        let state = stored(db).await;
        let off = counters_off(db).await;
        db.batch_execute("ROLLBACK").await.unwrap();
        prop_assert!(
            off.is_empty(),
            "{function}: counters off their rows: {off:?}"
        );
        runs.push((answers, state));
    }
    let (looped, set) = (&runs[0], &runs[1]);
    prop_assert_eq!(&looped.0, &set.0, "answers");
    prop_assert_eq!(&looped.1, &set.1, "stored state");
    Ok(took)
}

#[derive(Debug, Clone)]
enum Batch {
    Merges(Vec<Change>),
    /// New RESERVED uses with their customer, not revoked: mode A's winners, which
    /// `fg_merge_winners` writes when it can.
    Winners(Vec<Change>),
    Reserves(Vec<Request>),
}

impl Batch {
    fn loop_function(&self) -> &'static str {
        match self {
            Batch::Merges(_) | Batch::Winners(_) => "fg_merge_batch",
            Batch::Reserves(_) => "fg_reserve_batch",
        }
    }
    fn strict_function(&self) -> &'static str {
        match self {
            Batch::Merges(_) => "fg_merge_strict",
            Batch::Winners(_) => "fg_merge_winners",
            Batch::Reserves(_) => "fg_reserve_strict",
        }
    }
    async fn run(&self, db: &Client, function: &str) -> Result<Answers, String> {
        match self {
            Batch::Winners(changes) if function == "fg_merge_winners" => winners(db, changes).await,
            Batch::Merges(changes) | Batch::Winners(changes) => merge(db, function, changes).await,
            Batch::Reserves(requests) => reserve(db, function, requests).await,
        }
    }
}

fn batch() -> impl Strategy<Value = Batch> {
    prop_oneof![
        2 => prop::collection::vec(change(), 1..12).prop_map(Batch::Merges),
        // Given-back uses alone, as the sweeper's expiries and a burst of cancels come: the
        // set-based path takes them whole, budgets included.
        1 => prop::collection::vec(change(), 1..12).prop_map(|changes| {
            Batch::Merges(changes.into_iter().map(|c| Change { status: 3, ..c }).collect())
        }),
        1 => prop::collection::vec(request(), 1..12).prop_map(Batch::Reserves),
    ]
}

#[test]
fn set_based_batches_answer_and_store_exactly_what_the_loop_does() {
    check(false, batch().boxed());
}

/// Mode A's winners through `fg_merge_winners`, and the loop when it declines: mostly a sale's
/// (distinct customers), some with a customer twice, a retry of an order already stored, a
/// code that does not exist or an expiry past the TTL (each declined, so the loop decides). A
/// campaign's code is declined too; the service never sends one this way.
#[test]
fn winners_batches_answer_and_store_exactly_what_the_loop_does() {
    let winner = |c: Change| Change {
        status: 1,
        revoke: false,
        customer: c.customer.or(Some(1)),
        ..c
    };
    let batches = prop_oneof![
        3 => prop::collection::vec(change(), 1..12).prop_map(move |changes| {
            Batch::Winners(
                changes
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let c = winner(c);
                        Change {
                            // A new order of each customer, on a voucher that exists.
                            code: if c.code == "SZ" { "SA" } else { c.code },
                            order: format!("w{i}"),
                            customer: c.customer.map(|n| n + 10 * i as i64),
                            ..c
                        }
                    })
                    .collect(),
            )
        }),
        1 => prop::collection::vec(change(), 1..12)
            .prop_map(move |changes| Batch::Winners(changes.into_iter().map(winner).collect())),
    ];
    // Mostly vouchers with room for a batch (without a budget it would overrun), so that
    // `fg_merge_winners` takes a good share itself; the others refuse, and it declines.
    let vouchers = prop_oneof![
        3 => voucher().prop_map(|v| Voucher { limit: 24, budget: None, ..v }),
        1 => voucher(),
    ];
    check_with(vouchers.boxed(), false, batches.boxed(), 3);
}

/// The codes of one campaign: its counters moved once per batch by the set-based path, and
/// everything the campaign decides (its refusals, its pause and window over the codes'
/// copies, winners that do not fit together) left to the loop.
#[test]
fn set_based_batches_of_campaign_codes_answer_and_store_exactly_what_the_loop_does() {
    // Mostly reserves, and new uses without revocation: what the set-based path takes of a
    // campaign's codes.
    let batches = prop_oneof![
        // A sale's: mostly different customers.
        3 => prop::collection::vec(request(), 1..12).prop_map(|requests| {
            Batch::Reserves(
                requests
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| Request { customer: r.customer + 10 * i as i64, ..r })
                    .collect(),
            )
        }),
        1 => prop::collection::vec(request(), 1..12).prop_map(Batch::Reserves),
        1 => prop::collection::vec(change(), 1..12).prop_map(|changes| {
            Batch::Merges(
                changes
                    .into_iter()
                    .map(|c| Change { status: 1, revoke: false, ..c })
                    .collect(),
            )
        }),
        1 => batch(),
    ];
    // A campaign refuses often here (small totals, budgets and per-user limits, paused or
    // ended ones), and each refusal sends its batch to the loop.
    check(true, batches.boxed());
}

/// What the sweeper's expiries and mode B's events bring of a campaign's codes: given-back
/// uses, confirms, and new uses that may be revoked. The set-based path takes each batch whole,
/// with the loop's answers and counters; before, one such change sent its batch to the loop.
#[test]
fn a_campaigns_expiries_confirms_and_events_take_the_set_based_path() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let app = rt.block_on(TestApp::spawn());
    let campaign = Campaign {
        total: Some(10),
        per_user: Some(3),
        budget: Some(2_000),
        active: true,
        window: 0,
    };
    let voucher = Voucher {
        limit: 4,
        per_user: 2,
        slots: 1,
        active: true,
        budget: None,
    };
    let change = |code, order: &str, customer, status, revoke, at| Change {
        code,
        order: order.to_string(),
        customer,
        status,
        forged: false,
        revoke,
        at,
    };
    let history = vec![
        change("SA", "o0", Some(1), 1, false, 0),
        change("SA", "o1", Some(2), 1, false, 0),
        change("SB", "o2", Some(1), 1, false, 1),
        change("SB", "o3", Some(3), 1, false, 1),
        change("SB", "o4", Some(3), 2, false, 2),
    ];
    let batches = [
        // The sweeper's expiries and the API's releases by key, a confirmed use among them.
        vec![
            change("SA", "o0", Some(1), 3, false, 30),
            change("SA", "o1", None, 3, false, 30),
            change("SB", "o2", Some(1), 3, false, 30),
            change("SB", "o4", Some(3), 3, false, 30),
        ],
        // Mode B's events: confirms, a new use that may be revoked, a release ahead of its
        // reserve, a release of a use of the other code.
        vec![
            change("SB", "o2", Some(1), 2, true, 20),
            change("SB", "o5", Some(2), 1, true, 20),
            change("SB", "o6", Some(4), 2, true, 20),
            change("SB", "o7", Some(4), 3, true, 20),
            change("SA", "o0", Some(1), 3, true, 20),
        ],
    ];
    for batch in batches {
        let took = rt
            .block_on(compare(
                &app.db,
                &[voucher.clone(), voucher.clone()],
                Some(&campaign),
                &history,
                &Batch::Merges(batch.clone()),
            ))
            .unwrap();
        assert!(took, "the set-based path declined {batch:?}");
    }
    rt.block_on(async { drop(app) });
}

/// Runs 500 random batches through both paths; the set-based path must have taken a fifth of
/// them itself (with a campaign, which declines more, a sixteenth: about an eighth, measured).
fn check(with_campaign: bool, batches: BoxedStrategy<Batch>) {
    let share = if with_campaign { 16 } else { 5 };
    check_with(voucher().boxed(), with_campaign, batches, share);
}

/// [`check`] with vouchers drawn from `vouchers`; the set-based path must take one batch in
/// `share`.
fn check_with(
    vouchers: BoxedStrategy<Voucher>,
    with_campaign: bool,
    batches: BoxedStrategy<Batch>,
    share: usize,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let app = rt.block_on(TestApp::spawn());
    let (cases, took) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mut runner = TestRunner::new(Config {
        cases: 500,
        failure_persistence: None,
        ..Config::default()
    });
    let campaigns = if with_campaign {
        campaign().prop_map(Some).boxed()
    } else {
        Just(None).boxed()
    };
    let strategy = (
        [vouchers.clone(), vouchers],
        campaigns,
        prop::collection::vec(change(), 0..10),
        batches,
    );
    let result = runner.run(&strategy, |(vouchers, campaign, history, batch)| {
        // The history goes through the loop one change at a time: no bad change in it.
        let history: Vec<Change> = history
            .into_iter()
            .filter(|c| c.code != "SZ" && !c.forged)
            .collect();
        cases.fetch_add(1, Ordering::Relaxed);
        if rt.block_on(compare(
            &app.db,
            &vouchers,
            campaign.as_ref(),
            &history,
            &batch,
        ))? {
            took.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The comparison means something only if the set-based path took a good share of the
    // batches itself (small limits and refusals without revocation send many to the loop; a
    // sale's batches of distinct winners all take it).
    let (cases, took) = (cases.into_inner(), took.into_inner());
    assert!(
        took * share >= cases,
        "the set-based path took {took} of {cases} batches"
    );
    rt.block_on(async { drop(app) });
}
