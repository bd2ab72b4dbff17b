//! Small helpers more than one test file needs.

use std::time::{Duration, Instant};

use serde_json::Value;
use shared::domain::{Held, OrderId, Reserve, VoucherCode};
use shared::events::ReservedEvent;
use shared::Settings;

/// The `error` code of an error body ("" when there is none).
pub fn error_of(body: &str) -> String {
    serde_json::from_str::<Value>(body).unwrap()["error"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

pub fn voucher_code(code: &str) -> VoucherCode {
    VoucherCode::parse(code).unwrap()
}

/// A reserve as the API would pass it to the service, for an order of 10.
pub fn reserve_req(code: &str, customer: i64, order: &str) -> Reserve {
    Reserve {
        code: voucher_code(code),
        order_id: OrderId::parse(order).unwrap(),
        customer_id: customer,
        order_amount: 10,
    }
}

/// The `voucher-reserved` event of [`reserve_req`]'s reserve, made at `reserved_ms`: it holds
/// its use for a minute with a discount of 10 (a [`TestApp::voucher`]'s 100,000 off, which
/// stops at the order's 10), and no rules version, so it is checked against the voucher's
/// current rules. Tests change a field to make it bad.
pub fn reserved_event(code: &str, customer: i64, order: &str, reserved_ms: i64) -> ReservedEvent {
    let held = Held {
        customer_id: customer,
        reserved_ms,
        expires_ms: reserved_ms + 60_000,
        discount: 10,
    };
    ReservedEvent::new(&reserve_req(code, customer, order), held, None, None)
}

/// Settings made of exactly these variables (the last of a name wins), as if they were the
/// whole environment.
pub fn settings<K: AsRef<str>, V: AsRef<str>>(vars: &[(K, V)]) -> Settings {
    Settings::from_lookup(|name| {
        vars.iter()
            .rev()
            .find(|(k, _)| k.as_ref() == name)
            .map(|(_, v)| v.as_ref().to_owned())
    })
    .expect("settings")
}

/// `prefix_<random>`: names of databases, queues and secrets no other test (or earlier run)
/// uses.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// Polls `check` until it holds, failing the test after `limit`: for what happens in the
/// background, whose timing a test does not control.
pub async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Takes the gate lock of `at` for a test that loads a gate itself, as the warm-up does before
/// it loads; returns the token [`shared::gate::Gate::load`] wants. The test lets go of it after
/// (`unlock_loading`): a held lock keeps retirement, repairs and changes away.
pub async fn lock_gate<'u>(
    gate: &shared::gate::Gate,
    at: impl Into<shared::gate::Unit<'u>>,
) -> &'static str {
    const TOKEN: &str = "test-loader";
    assert!(
        gate.try_lock_loading(at, TOKEN, Duration::from_secs(60))
            .await
            .unwrap(),
        "the gate lock is free"
    );
    TOKEN
}

/// What [`shared::gate::Gate::load`] writes, in the order a test reads best.
pub fn load_counts<'a>(
    remaining: i64,
    budget: Option<i64>,
    users: &'a [(i64, i32)],
    codes: Option<&'a shared::gate::CodeCounts>,
) -> shared::gate::LoadCounts<'a> {
    shared::gate::LoadCounts {
        remaining,
        budget,
        users,
        codes,
    }
}
