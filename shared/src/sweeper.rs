//! The scheduled sweep (DESIGN section 7): every held use comes back by itself.
//!
//! One run does, in order:
//! 1. **expire**: RESERVED past `expiresAt` are released in Postgres in bounded batches
//!    (`fg_expire`: `FOR UPDATE SKIP LOCKED`, counters in the same transaction), then their uses
//!    go back to the gate for flash vouchers;
//! 2. **orphans**: orders pending in a gate for longer than TTL + grace with no Postgres row
//!    (the process died between gate and Postgres, or the event was lost) are written as RELEASED
//!    tombstones in Postgres first, then released in the gate; pending orders that Postgres has
//!    are just cleared;
//! 3. **reconcile**: each loaded gate's `remaining` is compared with
//!    `total_limit - used_count - pending not yet in Postgres`; drift is reported, and repaired
//!    only when nothing is in flight and the figures hold still across two reads;
//! 4. **warm-up**: flash vouchers whose sale starts within the lead are loaded.
//!
//! The local server runs it every `SWEEP_INTERVAL_SECONDS`, the `sweeper` Lambda on a schedule,
//! `flashgate sweep` once. Running two at once is safe: see `fg_expire` and the gate scripts.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_postgres::types::Type;

use crate::app::App;
use crate::domain::{self, ReleaseReason, Status, VoucherCode};
use crate::errors::StoreError;
use crate::gate::{GateError, OrderEntry, Removal};
use crate::store::{Merge, MergeOutcome};

/// Rows per `fg_expire` transaction.
pub const EXPIRE_BATCH: i32 = 500;

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Gate(#[from] GateError),
}

#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    pub expired: u64,
    pub orphans_recovered: u64,
    pub drift_found: u64,
    pub drift_repaired: u64,
    pub warmed: u64,
    /// Gate calls that failed; what they left is picked up by the next run.
    pub gate_errors: u64,
    pub duration_ms: u64,
}

/// Options of one sweep.
#[derive(Debug, Clone, Copy)]
pub struct SweepOptions {
    /// An order pending in the gate this long past its TTL with no Postgres row is an orphan.
    pub orphan_grace: Duration,
    pub warmup_lead: Duration,
}

pub async fn sweep(app: &App, opts: SweepOptions) -> Result<SweepReport, SweepError> {
    let started = Instant::now();
    let mut report = SweepReport::default();
    let now = domain::millis(Utc::now());

    expire(app, now, &mut report).await?;
    for (code, ttl_ms) in flash_vouchers(app).await? {
        if !gate_ok(app.gate.is_loaded(&code).await, &mut report).unwrap_or(false) {
            continue;
        }
        let in_flight = orphans(app, &code, ttl_ms, now, opts, &mut report).await?;
        if let Some(in_flight) = in_flight {
            reconcile(app, &code, in_flight, &mut report).await?;
        }
    }
    warm_up_soon(app, opts, &mut report).await?;

    report.duration_ms = started.elapsed().as_millis() as u64;
    tracing::info!(
        expired = report.expired,
        orphans_recovered = report.orphans_recovered,
        drift_found = report.drift_found,
        drift_repaired = report.drift_repaired,
        warmed = report.warmed,
        gate_errors = report.gate_errors,
        duration_ms = report.duration_ms,
        "sweep"
    );
    emit_metrics(&report);
    Ok(report)
}

fn gate_ok<T>(r: Result<T, GateError>, report: &mut SweepReport) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(error = %e, "sweep: gate call failed");
            report.gate_errors += 1;
            None
        }
    }
}

async fn expire(app: &App, now: DateTime<Utc>, report: &mut SweepReport) -> Result<(), SweepError> {
    loop {
        let client = app.store.raw_client().await?;
        let rows = client
            .query_typed(
                "SELECT voucher_code, order_id, customer_id, flash_sale FROM fg_expire($1, $2)",
                &[(&now, Type::TIMESTAMPTZ), (&EXPIRE_BATCH, Type::INT4)],
            )
            .await
            .map_err(StoreError::from)?;
        drop(client);
        report.expired += rows.len() as u64;
        for row in &rows {
            if !row.get::<_, bool>("flash_sale") {
                continue;
            }
            let code = VoucherCode::parse(row.get("voucher_code")).expect("stored codes are valid");
            let order: &str = row.get("order_id");
            let customer: i64 = row.get("customer_id");
            gate_ok(
                app.gate
                    .remove(&code, order, Removal::Release, Some(customer))
                    .await,
                report,
            );
        }
        if rows.len() < EXPIRE_BATCH as usize {
            return Ok(());
        }
    }
}

/// Flash vouchers that may still hold uses in a gate, with their TTL in ms.
async fn flash_vouchers(app: &App) -> Result<Vec<(VoucherCode, i64)>, StoreError> {
    let rows = app
        .store
        .raw_client()
        .await?
        .query_typed(
            "SELECT code, reservation_ttl_seconds FROM voucher
              WHERE flash_sale AND ends_at + make_interval(secs => reservation_ttl_seconds) > now() - interval '1 day'
              ORDER BY code",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let ttl: i32 = r.get(1);
            (
                VoucherCode::parse(r.get(0)).expect("stored codes are valid"),
                i64::from(ttl) * 1000,
            )
        })
        .collect())
}

/// Resolves the gate's pending orders of one voucher. Returns how many are still in flight
/// (pending, not yet in Postgres, younger than TTL + grace), or None when the gate failed.
async fn orphans(
    app: &App,
    code: &VoucherCode,
    ttl_ms: i64,
    now: DateTime<Utc>,
    opts: SweepOptions,
    report: &mut SweepReport,
) -> Result<Option<u64>, SweepError> {
    let Some(pending) = gate_ok(app.gate.pending(code).await, report) else {
        return Ok(None);
    };
    if pending.is_empty() {
        return Ok(Some(0));
    }
    let ids: Vec<&str> = pending.iter().map(|(o, _)| o.as_str()).collect();
    let known: Vec<String> = app
        .store
        .raw_client()
        .await?
        .query_typed(
            "SELECT order_id FROM redemption WHERE voucher_code = $1 AND order_id = ANY($2)",
            &[(&code.as_str(), Type::TEXT), (&ids, Type::TEXT_ARRAY)],
        )
        .await
        .map_err(StoreError::from)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let cutoff = now.timestamp_millis() - ttl_ms - opts.orphan_grace.as_millis() as i64;
    let mut in_flight = 0;
    for (order, reserved_ms) in &pending {
        if known.contains(order) {
            // Postgres has it; the clean-up after the write was lost.
            gate_ok(app.gate.settled(code, order).await, report);
        } else if *reserved_ms < cutoff {
            if recover_orphan(app, code, order, now, report).await? {
                report.orphans_recovered += 1;
            }
        } else {
            in_flight += 1;
        }
    }
    Ok(Some(in_flight))
}

/// Tombstone in Postgres first (a late event then merges into a no-op), then release in the gate.
async fn recover_orphan(
    app: &App,
    code: &VoucherCode,
    order: &str,
    now: DateTime<Utc>,
    report: &mut SweepReport,
) -> Result<bool, SweepError> {
    let Some(entry) = gate_ok(app.gate.order(code, order).await, report) else {
        return Ok(false);
    };
    let Some(OrderEntry::Active { held, order_amount }) = entry else {
        // Already a tombstone (or gone): only the pending mark is left.
        gate_ok(app.gate.settled(code, order).await, report);
        return Ok(false);
    };
    let merged = app
        .store
        .merge(&Merge {
            code: code.as_str(),
            order_id: order,
            customer_id: Some(held.customer_id),
            status: Status::Released,
            order_amount: Some(order_amount),
            discount_amount: Some(held.discount),
            reserved_at: DateTime::from_timestamp_millis(held.reserved_ms),
            expires_at: DateTime::from_timestamp_millis(held.expires_ms),
            reason: Some(ReleaseReason::Expired),
            now,
            revoke: false,
        })
        .await?;
    if merged.outcome == MergeOutcome::OrderConflict {
        tracing::warn!(
            code = code.as_str(),
            order_id = order,
            "orphan's orderId belongs to another customer in Postgres"
        );
    }
    gate_ok(
        app.gate
            .remove(code, order, Removal::Release, Some(held.customer_id))
            .await,
        report,
    );
    tracing::warn!(code = code.as_str(), order_id = order, "orphan recovered");
    Ok(true)
}

async fn reconcile(
    app: &App,
    code: &VoucherCode,
    in_flight: u64,
    report: &mut SweepReport,
) -> Result<(), SweepError> {
    let (Some(gate), Some(expected)) = read_remaining(app, code).await? else {
        return Ok(());
    };
    let expected = expected - in_flight as i64;
    if gate == expected {
        return Ok(());
    }
    report.drift_found += 1;
    tracing::warn!(
        code = code.as_str(),
        gate,
        expected,
        drift = gate - expected,
        in_flight,
        "gate drift"
    );
    if in_flight > 0 {
        return Ok(());
    }
    // Repair only figures that hold still: read again, then compare-and-set in Redis.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (Some(gate2), Some(expected2)) = read_remaining(app, code).await? else {
        return Ok(());
    };
    if (gate2, expected2 - in_flight as i64) != (gate, expected) {
        return Ok(());
    }
    if gate_ok(
        app.gate.repair_remaining(code, gate, expected).await,
        report,
    ) == Some(true)
    {
        report.drift_repaired += 1;
        tracing::warn!(
            code = code.as_str(),
            from = gate,
            to = expected,
            "gate drift repaired"
        );
    }
    Ok(())
}

/// The gate's `remaining`, then Postgres' `total_limit - used_count`.
async fn read_remaining(
    app: &App,
    code: &VoucherCode,
) -> Result<(Option<i64>, Option<i64>), SweepError> {
    let gate = app.gate.remaining(code).await?;
    let expected = app.store.expected_remaining(code).await?;
    Ok((gate, expected))
}

async fn warm_up_soon(
    app: &App,
    opts: SweepOptions,
    report: &mut SweepReport,
) -> Result<(), SweepError> {
    let lead = opts.warmup_lead.as_secs_f64();
    let rows = app
        .store
        .raw_client()
        .await?
        .query_typed(
            "SELECT code FROM voucher
              WHERE flash_sale AND starts_at <= now() + make_interval(secs => $1) AND ends_at > now()
              ORDER BY code",
            &[(&lead, Type::FLOAT8)],
        )
        .await
        .map_err(StoreError::from)?;
    for row in rows {
        let code = VoucherCode::parse(row.get(0)).expect("stored codes are valid");
        match app.warmup(&code).await {
            Ok(w) if w.loaded_now => report.warmed += 1,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(code = code.as_str(), error = %e, "sweep: warm-up failed");
                report.gate_errors += 1;
            }
        }
    }
    Ok(())
}

/// CloudWatch embedded metric format: one JSON line on stdout that CloudWatch Logs turns into
/// metrics (namespace Flashgate) without an API call.
fn emit_metrics(r: &SweepReport) {
    let metric = |name: &str, unit: &str| serde_json::json!({"Name": name, "Unit": unit});
    let line = serde_json::json!({
        "_aws": {
            "Timestamp": Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": "Flashgate",
                "Dimensions": [["Function"]],
                "Metrics": [
                    metric("Expired", "Count"),
                    metric("OrphansRecovered", "Count"),
                    metric("DriftFound", "Count"),
                    metric("DriftRepaired", "Count"),
                    metric("SweepDuration", "Milliseconds"),
                ],
            }],
        },
        "Function": "sweeper",
        "Expired": r.expired,
        "OrphansRecovered": r.orphans_recovered,
        "DriftFound": r.drift_found,
        "DriftRepaired": r.drift_repaired,
        "SweepDuration": r.duration_ms,
    });
    println!("{line}");
}
