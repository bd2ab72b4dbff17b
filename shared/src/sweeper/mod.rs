//! The scheduled sweep: every held use comes back by itself (docs/ARCHITECTURE.md, "The
//! sweeper").
//!
//! One run does, in order, all at one instant (the run's `now`, passed to every query):
//! 1. **expire**: RESERVED past `expiresAt` are released in Postgres in bounded batches
//!    (`fg_expire`: `FOR UPDATE SKIP LOCKED`, counters in the same transaction), then their uses
//!    go back to the gate for flash vouchers;
//! 2. **orphans** (`orphans`): orders pending in a gate for longer than TTL + grace with no
//!    Postgres row (the process died between gate and Postgres, or the event was lost) are
//!    written as RELEASED tombstones in Postgres first, then released in the gate; pending
//!    orders that Postgres has are just cleared;
//! 3. **reconcile** (`reconcile`): each loaded gate's rules are brought to Postgres' (after a
//!    change of the voucher whose last gate step failed), and its `remaining` is compared with
//!    `total_limit - uses held - pending not yet in Postgres`; drift is reported, and repaired
//!    only when nothing is in flight and the figures hold still across two reads;
//! 4. **warm-up**: flash vouchers whose sale starts within the lead are loaded.
//!
//! The local server runs it every `SWEEP_INTERVAL_SECONDS`, the `sweeper` Lambda on a schedule,
//! `flashgate sweep` once. Running two at once is safe: see `fg_expire` and the gate scripts.

mod orphans;
mod reconcile;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain;
use crate::errors::SweepError;
use crate::gate::{Gate, GateError, Removal};
use crate::reservations::Warmup;
use crate::store::Store;
use crate::telemetry::{emit_metrics, Chain, Unit};

/// Rows per `fg_expire` transaction.
pub const EXPIRE_BATCH: i32 = 500;

#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    pub expired: u64,
    pub orphans_recovered: u64,
    pub drift_found: u64,
    pub drift_repaired: u64,
    /// Gates whose rules differed from Postgres' and were replaced.
    pub rules_synced: u64,
    /// Releases that reached Postgres but not the gate, finished by the sweep.
    pub releases_finished: u64,
    pub warmed: u64,
    /// Gate calls that failed; what they left is picked up by the next run.
    pub gate_errors: u64,
    pub duration_ms: u64,
}

impl SweepReport {
    /// A gate call's result, counted as a gate error when it failed (the sweep goes on).
    fn gate_ok<T>(&mut self, r: Result<T, GateError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(error = %Chain(&e), "sweep: gate call failed");
                self.gate_errors += 1;
                None
            }
        }
    }
}

/// The sweeper: the store, the gate and the warm-up, nothing else.
#[derive(Clone)]
pub struct Sweeper {
    store: Store,
    gate: Arc<Gate>,
    warmup: Warmup,
    /// An order pending in the gate this long past its TTL with no Postgres row is an orphan.
    orphan_grace: Duration,
}

impl Sweeper {
    pub fn new(store: Store, gate: Arc<Gate>, warmup: Warmup, orphan_grace: Duration) -> Self {
        Sweeper {
            store,
            gate,
            warmup,
            orphan_grace,
        }
    }

    /// One run (expiry, orphans, reconciliation, warm-up).
    pub async fn sweep(&self) -> Result<SweepReport, SweepError> {
        let started = Instant::now();
        let mut report = SweepReport::default();
        let now = domain::millis(Utc::now());

        self.expire(now, &mut report).await?;
        for voucher in self.store.live_flash_vouchers(now).await? {
            let code = &voucher.code;
            if !report
                .gate_ok(self.gate.is_loaded(code).await)
                .unwrap_or(false)
            {
                continue;
            }
            if let Some(in_flight) = self.orphans(code, voucher.ttl_ms, now, &mut report).await? {
                self.reconcile(code, in_flight, &mut report).await?;
            }
        }
        self.warm_up_soon(now, &mut report).await?;

        report.duration_ms = started.elapsed().as_millis() as u64;
        tracing::info!(
            expired = report.expired,
            orphans_recovered = report.orphans_recovered,
            drift_found = report.drift_found,
            drift_repaired = report.drift_repaired,
            rules_synced = report.rules_synced,
            releases_finished = report.releases_finished,
            warmed = report.warmed,
            gate_errors = report.gate_errors,
            duration_ms = report.duration_ms,
            "sweep"
        );
        emit_metrics(
            "sweeper",
            &[
                ("Expired", Unit::Count, report.expired),
                ("OrphansRecovered", Unit::Count, report.orphans_recovered),
                ("DriftFound", Unit::Count, report.drift_found),
                ("DriftRepaired", Unit::Count, report.drift_repaired),
                ("RulesSynced", Unit::Count, report.rules_synced),
                ("ReleasesFinished", Unit::Count, report.releases_finished),
                ("SweepDuration", Unit::Milliseconds, report.duration_ms),
            ],
        );
        Ok(report)
    }

    async fn expire(&self, now: DateTime<Utc>, report: &mut SweepReport) -> Result<(), SweepError> {
        loop {
            let expired = self.store.expire_batch(now, EXPIRE_BATCH).await?;
            report.expired += expired.len() as u64;
            for e in expired.iter().filter(|e| e.flash_sale) {
                let removed = self
                    .gate
                    .remove(&e.code, &e.order_id, Removal::Release, Some(e.customer_id))
                    .await;
                report.gate_ok(removed);
            }
            if expired.len() < EXPIRE_BATCH as usize {
                return Ok(());
            }
        }
    }

    async fn warm_up_soon(
        &self,
        now: DateTime<Utc>,
        report: &mut SweepReport,
    ) -> Result<(), SweepError> {
        let due = self
            .store
            .flash_vouchers_starting(now, self.warmup.lead())
            .await?;
        for code in due {
            match self.warmup.warm(&code).await {
                Ok(w) if w.loaded_now => report.warmed += 1,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(code = code.as_str(), error = %Chain(&e), "sweep: warm-up failed");
                    report.gate_errors += 1;
                }
            }
        }
        Ok(())
    }
}
