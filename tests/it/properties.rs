//! Property tests: random sequences of reserve (new orders, retries, reused orderIds), confirm,
//! release, expiry by the sweeper, limit changes and validations against the real server, on
//! real Postgres and Redis, in standard and flash mode. Every answer is compared with a small
//! reference model of the contract, and so are the final counts (Postgres' and the gate's).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::{error_of, TestApp};

const ORDERS: usize = 5;

#[derive(Debug, Clone)]
enum Op {
    Reserve {
        customer: i64,
        order: usize,
    },
    Confirm(usize),
    Release(usize),
    /// The order's reservation passes its expiry, then a sweep runs.
    Expire(usize),
    SetLimit(i64),
    Validate(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (1..=4_i64, 0..ORDERS).prop_map(|(customer, order)| Op::Reserve { customer, order }),
        1 => (0..ORDERS).prop_map(Op::Confirm),
        2 => (0..ORDERS).prop_map(Op::Release),
        1 => (0..ORDERS).prop_map(Op::Expire),
        1 => (0..=4_i64).prop_map(Op::SetLimit),
        1 => (1..=4_i64).prop_map(Op::Validate),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum St {
    Reserved,
    Confirmed,
    Released,
}

/// The contract, for one voucher.
struct Reference {
    limit: i64,
    per_user: i64,
    /// orderId -> (customer, status); the first 201's body.
    rows: HashMap<usize, (i64, St)>,
    first: HashMap<usize, String>,
}

impl Reference {
    fn used(&self) -> i64 {
        self.rows
            .values()
            .filter(|(_, s)| *s != St::Released)
            .count() as i64
    }
    fn active(&self, customer: i64) -> i64 {
        let of = |(c, s): &&(i64, St)| *c == customer && *s != St::Released;
        self.rows.values().filter(of).count() as i64
    }
    fn count(&self, st: St) -> i64 {
        self.rows.values().filter(|(_, s)| *s == st).count() as i64
    }
    /// A new use for this customer now: None, or the refusal.
    fn refusal(&self, customer: i64) -> Option<&'static str> {
        if self.active(customer) >= self.per_user {
            Some("ALREADY_USED")
        } else if self.used() >= self.limit {
            Some("OUT_OF_STOCK")
        } else {
            None
        }
    }
}

fn check(cond: bool, what: String) -> Result<(), TestCaseError> {
    if cond {
        Ok(())
    } else {
        Err(TestCaseError::fail(what))
    }
}

async fn run(
    app: &TestApp,
    code: &str,
    limit: i64,
    per_user: i64,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    app.voucher(code, limit, json!({"perUserLimit": per_user}))
        .await;
    let mut r = Reference {
        limit,
        per_user,
        rows: HashMap::new(),
        first: HashMap::new(),
    };
    let order_id = |o: usize| format!("ord-{o}");
    for (step, op) in ops.iter().enumerate() {
        let at = format!("step {step} {op:?}");
        match *op {
            Op::Reserve { customer, order } => {
                let (status, body) = app.reserve(code, customer, &order_id(order), 1_000).await;
                let expected = match r.rows.get(&order) {
                    Some((c, _)) if *c != customer => Err("ORDER_CONFLICT"),
                    Some((_, St::Released)) => Err("RESERVATION_RELEASED"),
                    Some(_) => Ok(false),
                    None => r.refusal(customer).map_or(Ok(true), Err),
                };
                match expected {
                    Ok(new) => {
                        check(
                            status == StatusCode::CREATED,
                            format!("{at}: {status} {body}"),
                        )?;
                        if new {
                            r.rows.insert(order, (customer, St::Reserved));
                            r.first.insert(order, body);
                        } else {
                            check(r.first[&order] == body, format!("{at}: replay {body}"))?;
                        }
                    }
                    Err(error) => check(
                        error_of(&body) == error,
                        format!("{at}: expected {error}, got {status} {body}"),
                    )?,
                }
            }
            Op::Confirm(order) => {
                let (status, body) = app.confirm(code, &order_id(order)).await;
                let expected = match r.rows.get(&order).map(|x| x.1) {
                    None => StatusCode::NOT_FOUND,
                    Some(St::Released) => StatusCode::CONFLICT,
                    Some(_) => StatusCode::OK,
                };
                check(status == expected, format!("{at}: {status} {body}"))?;
                if let Some(row) = r.rows.get_mut(&order).filter(|x| x.1 != St::Released) {
                    row.1 = St::Confirmed;
                }
            }
            Op::Release(order) => {
                let (status, body) = app.release(code, &order_id(order)).await;
                let expected = match r.rows.get_mut(&order) {
                    None => StatusCode::NOT_FOUND,
                    Some(row) => {
                        row.1 = St::Released;
                        StatusCode::NO_CONTENT
                    }
                };
                check(status == expected, format!("{at}: {status} {body}"))?;
            }
            Op::Expire(order) => {
                app.db
                    .execute(
                        "UPDATE redemption SET expires_at = now() - interval '1 second'
                          WHERE voucher_code = $1 AND order_id = $2 AND status = 1",
                        &[&code, &order_id(order)],
                    )
                    .await
                    .unwrap();
                app.app.sweeper().sweep().await.unwrap();
                if let Some(row) = r.rows.get_mut(&order).filter(|x| x.1 == St::Reserved) {
                    row.1 = St::Released;
                }
            }
            Op::SetLimit(n) => {
                let (status, body) = app.patch_voucher(code, json!({"totalLimit": n})).await;
                let expected = if n < 1 {
                    StatusCode::BAD_REQUEST
                } else if n < r.used() {
                    StatusCode::CONFLICT
                } else {
                    r.limit = n;
                    StatusCode::OK
                };
                check(status == expected, format!("{at}: {status} {body}"))?;
            }
            Op::Validate(customer) => {
                let (status, body) = app.validate(code, customer, 1_000).await;
                let got = body["error"].as_str().unwrap_or("ELIGIBLE").to_owned();
                let expected = r.refusal(customer).unwrap_or("ELIGIBLE");
                check(
                    got == expected,
                    format!("{at}: expected {expected}, got {status} {body}"),
                )?;
            }
        }
    }
    // The final counts, in Postgres and in the gate.
    let view: Value = app.view(code).await;
    let counts = (
        view["usedCount"].as_i64(),
        view["remaining"].as_i64(),
        view["reservedCount"].as_i64(),
        view["confirmedCount"].as_i64(),
        view["totalLimit"].as_i64(),
    );
    let expected = (
        Some(r.used()),
        Some(r.limit - r.used()),
        Some(r.count(St::Reserved)),
        Some(r.count(St::Confirmed)),
        Some(r.limit),
    );
    check(
        counts == expected,
        format!("final view {view}, expected {expected:?}"),
    )?;
    if app.gate_remaining(code).await.is_some() {
        let gate = app.gate_remaining(code).await;
        check(
            gate == Some(r.limit - r.used()),
            format!("gate remaining {gate:?}, expected {}", r.limit - r.used()),
        )?;
    }
    Ok(())
}

fn random_sequences_agree_with_the_reference(flash: bool) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // One server for all cases, a voucher of its own for each; no sold-out cache, so that a
    // use that came back is seen at once, as the reference sees it.
    let app = rt.block_on(
        TestApp::builder()
            .flash(flash)
            .counter_slots(2)
            .configure(|s| s.reservations.sold_out_ttl = Duration::ZERO)
            .spawn(),
    );
    let cases = AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 40,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (1..=3_i64, 1..=2_i64, prop::collection::vec(op(), 1..40));
    let result = runner.run(&strategy, |(limit, per_user, ops)| {
        let code = format!("P{}", cases.fetch_add(1, Ordering::Relaxed));
        rt.block_on(run(&app, &code, limit, per_user, &ops))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    rt.block_on(async { drop(app) });
}

#[test]
fn random_sequences_agree_with_the_reference_in_standard_mode() {
    random_sequences_agree_with_the_reference(false);
}

#[test]
fn random_sequences_agree_with_the_reference_in_flash_mode() {
    random_sequences_agree_with_the_reference(true);
}
