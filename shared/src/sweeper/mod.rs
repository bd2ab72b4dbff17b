//! The scheduled sweep: every held use comes back by itself (docs/ARCHITECTURE.md, "The
//! sweeper").
//!
//! One run does, in order, all at one instant (the run's `now`, passed to every query):
//! 0. **orders**: orders of several codes still pending `ORDER_LEASE_SECONDS` after they began
//!    (a crash between two codes) and reserved ones past their expiry are released, and their
//!    codes' reservations made due, so the expiry that follows releases them together; settled
//!    orders past their keeping are deleted;
//! 1. **expire**: RESERVED past `expiresAt` are released in Postgres in bounded batches
//!    (`fg_expire`: `FOR UPDATE SKIP LOCKED`, counters in the same transaction), then their uses
//!    go back to the gate for flash vouchers;
//! 2. **prune**: each gate the Postgres mark says may be loaded loses its tombstones written more
//!    than `GATE_TOMBSTONE_RETENTION_SECONDS` ago, a bounded number a run (`prune.lua`);
//! 3. **orphans** (`orphans`): orders pending in a gate for longer than TTL + grace with no
//!    Postgres row (the process died between gate and Postgres, or the event was lost) are
//!    written as RELEASED tombstones in Postgres first, then released in the gate; pending
//!    orders that Postgres has are just cleared;
//! 4. **reconcile** (`reconcile`): each loaded gate's rules are brought to Postgres' (after a
//!    change of the voucher whose last gate step failed), and its `remaining` is compared with
//!    `total_limit - uses held - pending not yet in Postgres`; drift is reported, and repaired
//!    only when nothing is in flight and the figures hold still across two reads;
//! 5. **retire**: a voucher whose sale ended `GATE_RETIRE_AFTER_SECONDS` ago, with nothing of
//!    it pending and a last reconciliation equal, leaves the gate: every key goes (`retire.lua`)
//!    and its mark in Postgres is cleared, so Postgres answers for it from then on and sweeps
//!    visit only what the gate may hold;
//! 6. **warm-up**: flash vouchers whose sale starts within the lead are loaded;
//! 7. **forget**: rules a change superseded more than [`RULES_KEPT`] ago leave `voucher_rules`
//!    and `campaign_rules` (mode B's consumer checks an event against the rules that granted it; no queue keeps an
//!    event longer), a bounded batch a run.
//!
//! The local server runs it every `SWEEP_INTERVAL_SECONDS`, the `sweeper` Lambda on a schedule,
//! `flashgate sweep` once. Running two at once is safe: see `fg_expire` and the gate scripts.

mod orphans;
mod reconcile;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::SweepSettings;
use crate::domain;
use crate::gate::{Gate, GateError, Place, Removal, Retired, Unit};
use crate::reservations::Warmup;
use crate::store::{Store, StoreError};
use crate::telemetry::metrics::{SWEEP_DURATION, SWEEP_ITEMS};
use crate::telemetry::Chain;

/// The sweep stops at a Postgres failure (the next run starts over); gate failures are counted
/// in its report and skipped.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("the database is unavailable")]
    Store(#[from] StoreError),
    #[error("redis is unavailable")]
    Gate(#[from] GateError),
}

/// Rows per `fg_expire` transaction.
pub const EXPIRE_BATCH: i32 = 500;

/// How long the rules a change replaced are kept for the consumer's check: an SQS queue keeps a
/// message 14 days at most (a Kafka topic's retention is the operator's: keep it within this).
pub const RULES_KEPT: Duration = Duration::from_secs(14 * 86_400);

/// Tombstones one `prune.lua` call looks at: a few hundred microseconds of Redis.
pub const PRUNE_BATCH: u32 = 500;

/// `prune.lua` calls per gate per run: 20,000 tombstones a gate a run at most, far above any
/// gate's releases between two runs.
pub const PRUNE_CALLS: u32 = 40;

/// Orders of several codes released, and retired, per run at most (of each kind).
pub const ORDER_BATCH: i64 = 1000;

/// A refused order is kept this long, for its retries to get the same refusal.
pub const REFUSED_ORDER_KEPT: Duration = Duration::from_secs(86_400);

/// A confirmed or released order is kept this long (`GET /orders/{orderId}`); each code's
/// reservation stays as every reservation does.
pub const ORDER_KEPT: Duration = Duration::from_secs(30 * 86_400);

/// Superseded rules deleted per run at most: the table holds only changes, so a run or two
/// clears a day's.
pub const FORGET_BATCH: i64 = 1000;

#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    /// Orders of several codes a crash left pending past the lease, released with their uses.
    pub orders_abandoned: u64,
    /// Orders of several codes past their expiry, released with their uses.
    pub orders_expired: u64,
    /// Settled orders past their keeping, deleted.
    pub orders_retired: u64,
    pub expired: u64,
    pub orphans_recovered: u64,
    pub drift_found: u64,
    pub drift_repaired: u64,
    /// Gates whose rules differed from Postgres' and were replaced.
    pub rules_synced: u64,
    /// Releases that reached Postgres but not the gate, finished by the sweep.
    pub releases_finished: u64,
    pub warmed: u64,
    /// Vouchers whose sale is over, taken out of the gate.
    pub retired: u64,
    /// Superseded rules no event can still need, deleted.
    pub rules_forgotten: u64,
    /// Tombstones of released orders past the retention, deleted from the gate.
    pub tombstones_pruned: u64,
    /// Gate calls that failed; what they left is picked up by the next run.
    pub gate_errors: u64,
    pub duration_ms: u64,
}

impl SweepReport {
    /// The report as metrics: each field a `kind` of `flashgate_sweep_items_total`.
    fn record(&self) {
        let kinds = [
            ("orders_abandoned", self.orders_abandoned),
            ("orders_expired", self.orders_expired),
            ("orders_retired", self.orders_retired),
            ("expired", self.expired),
            ("orphans_recovered", self.orphans_recovered),
            ("drift_found", self.drift_found),
            ("drift_repaired", self.drift_repaired),
            ("rules_synced", self.rules_synced),
            ("releases_finished", self.releases_finished),
            ("warmed", self.warmed),
            ("retired", self.retired),
            ("rules_forgotten", self.rules_forgotten),
            ("tombstones_pruned", self.tombstones_pruned),
            ("gate_errors", self.gate_errors),
        ];
        for (kind, n) in kinds {
            metrics::counter!(SWEEP_ITEMS, "kind" => kind).increment(n);
        }
        metrics::histogram!(SWEEP_DURATION).record(self.duration_ms as f64 / 1000.0);
    }

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
    /// A voucher leaves the gate this long after its sale's end.
    retire_after: Duration,
    /// A tombstone leaves the gate this long after it was written.
    tombstone_retention: Duration,
    /// An order of several codes still pending this long after it began is abandoned.
    order_lease: Duration,
}

impl Sweeper {
    pub fn new(store: Store, gate: Arc<Gate>, warmup: Warmup, settings: &SweepSettings) -> Self {
        Sweeper {
            store,
            gate,
            warmup,
            orphan_grace: settings.orphan_grace,
            retire_after: settings.retire_after,
            tombstone_retention: settings.tombstone_retention,
            order_lease: settings.order_lease,
        }
    }

    /// One run (expiry, orphans, reconciliation, warm-up).
    pub async fn sweep(&self) -> Result<SweepReport, SweepError> {
        let started = Instant::now();
        let mut report = SweepReport::default();
        let now = domain::millis(Utc::now());

        self.orders(now, &mut report).await?;
        self.expire(now, &mut report).await?;
        for voucher in self.store.gate_vouchers(now, self.retire_after).await? {
            let unit = Unit::Voucher(&voucher.code);
            self.sweep_gate(unit, voucher.ttl_ms, voucher.retire, now, &mut report)
                .await?;
        }
        for campaign in self.store.gate_campaigns(now, self.retire_after).await? {
            let unit = Unit::Campaign(campaign.id);
            self.sweep_gate(unit, campaign.ttl_ms, campaign.retire, now, &mut report)
                .await?;
        }
        self.warm_up_soon(now, &mut report).await?;
        report.rules_forgotten = match self
            .store
            .forget_rules(
                now - chrono::TimeDelta::from_std(RULES_KEPT).expect("14 days"),
                FORGET_BATCH,
            )
            .await
        {
            Ok(n) => n,
            // Deployed before `migrate` created the table: nothing to forget yet.
            Err(e) if crate::store::is_undefined_table(&e) => 0,
            Err(e) => return Err(e.into()),
        };

        report.duration_ms = started.elapsed().as_millis() as u64;
        tracing::info!(
            orders_abandoned = report.orders_abandoned,
            orders_expired = report.orders_expired,
            orders_retired = report.orders_retired,
            expired = report.expired,
            orphans_recovered = report.orphans_recovered,
            drift_found = report.drift_found,
            drift_repaired = report.drift_repaired,
            rules_synced = report.rules_synced,
            releases_finished = report.releases_finished,
            warmed = report.warmed,
            retired = report.retired,
            rules_forgotten = report.rules_forgotten,
            tombstones_pruned = report.tombstones_pruned,
            gate_errors = report.gate_errors,
            duration_ms = report.duration_ms,
            "sweep"
        );
        report.record();
        Ok(report)
    }

    /// Orders of several codes: released when abandoned or expired (their uses then go in
    /// `expire`, right after), deleted when settled long enough ago.
    async fn orders(&self, now: DateTime<Utc>, report: &mut SweepReport) -> Result<(), SweepError> {
        let ago = |d: Duration| {
            chrono::TimeDelta::from_std(d)
                .ok()
                .and_then(|d| now.checked_sub_signed(d))
                .unwrap_or(DateTime::<Utc>::MIN_UTC)
        };
        let swept = self
            .store
            .sweep_orders(now, ago(self.order_lease), ORDER_BATCH)
            .await?;
        report.orders_abandoned = swept.abandoned;
        report.orders_expired = swept.expired;
        report.orders_retired = self
            .store
            .retire_orders(ago(REFUSED_ORDER_KEPT), ago(ORDER_KEPT), ORDER_BATCH)
            .await?;
        Ok(())
    }

    async fn expire(&self, now: DateTime<Utc>, report: &mut SweepReport) -> Result<(), SweepError> {
        loop {
            let expired = self.store.expire_batch(now, EXPIRE_BATCH).await?;
            report.expired += expired.len() as u64;
            for e in expired.iter().filter(|e| e.flash_sale) {
                let removed = self
                    .gate
                    .remove(
                        Place::of(&e.code, e.campaign),
                        &e.order_id,
                        Removal::Release,
                        Some(e.customer_id),
                    )
                    .await;
                report.gate_ok(removed);
            }
            if expired.len() < EXPIRE_BATCH as usize {
                return Ok(());
            }
        }
    }

    /// The keys go first, the mark after: a sweep that dies in between leaves the mark, and
    /// the next sweep visits the gate again and finishes (`retire.lua` answers RETIRED when
    /// the keys are gone already). The other order left live keys that no sweep would visit.
    /// A reserve arriving in between is answered by Postgres: the warm-up never loads a sale
    /// past the retirement delay. A voucher's gate or a flash campaign's.
    async fn retire(
        &self,
        unit: Unit<'_>,
        now: DateTime<Utc>,
        report: &mut SweepReport,
    ) -> Result<(), SweepError> {
        let retired = self
            .gate
            .retire(unit, now.timestamp_millis(), self.retire_after)
            .await;
        if report.gate_ok(retired) == Some(Retired::Retired) {
            self.unmark_gate_loaded(unit).await?;
            report.retired += 1;
            tracing::info!(code = %unit, "retired from the gate");
        }
        Ok(())
    }

    /// Clears the mark in Postgres that the gate may hold `unit`.
    async fn unmark_gate_loaded(&self, unit: Unit<'_>) -> Result<(), SweepError> {
        match unit {
            Unit::Voucher(code) => self.store.unmark_gate_loaded(code).await?,
            Unit::Campaign(id) => self.store.unmark_campaign_gate_loaded(id).await?,
        }
        Ok(())
    }

    /// One gate the Postgres mark says may be loaded (a voucher's or a flash campaign's):
    /// its pending orders settled or recovered, its counters compared and repaired, and once
    /// `retire` (the sale ended the retirement delay ago) with nothing in flight and no drift,
    /// retired.
    async fn sweep_gate(
        &self,
        unit: Unit<'_>,
        ttl_ms: i64,
        retire: bool,
        now: DateTime<Utc>,
        report: &mut SweepReport,
    ) -> Result<(), SweepError> {
        let Some(loaded) = report.gate_ok(self.gate.is_loaded(unit).await) else {
            return Ok(());
        };
        if !loaded {
            // Redis lost it (a reserve loads it again). Over long enough, nothing of it can
            // still be on its way: the mark goes.
            if retire {
                self.unmark_gate_loaded(unit).await?;
                report.retired += 1;
            }
            return Ok(());
        }
        self.prune_tombstones(unit, report).await;
        if let Some(in_flight) = self.orphans(unit, ttl_ms, now, report).await? {
            let drift = report.drift_found;
            self.reconcile(unit, in_flight, report).await?;
            if retire && in_flight == 0 && report.drift_found == drift {
                self.retire(unit, now, report).await?;
            }
        }
        Ok(())
    }

    /// The gate's tombstones past the retention, [`PRUNE_BATCH`] a call and at most
    /// [`PRUNE_CALLS`] calls a gate a run: a backlog (the first run after an upgrade, a burst of
    /// releases) is cleared over a few runs, and no run holds Redis longer as history grows.
    async fn prune_tombstones(&self, unit: Unit<'_>, report: &mut SweepReport) {
        for _ in 0..PRUNE_CALLS {
            let pruned = self
                .gate
                .prune_tombstones(unit, self.tombstone_retention, PRUNE_BATCH)
                .await;
            let Some((pruned, more)) = report.gate_ok(pruned) else {
                return;
            };
            report.tombstones_pruned += pruned;
            if !more {
                return;
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
        let due = self
            .store
            .flash_campaigns_starting(now, self.warmup.lead())
            .await?;
        for id in due {
            match self.warmup.warm_campaign(id).await {
                Ok(true) => report.warmed += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(campaign = id, error = %Chain(&e), "sweep: warm-up failed");
                    report.gate_errors += 1;
                }
            }
        }
        Ok(())
    }
}
