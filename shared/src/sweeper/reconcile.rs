//! Gate against Postgres: the rules are copied when they differ; drift of the count is
//! reported; releases that reached Postgres but not the gate are finished; a count that holds
//! still is repaired.
//!
//! Every sweep compares two counters, in constant time whatever the voucher's history. Only when
//! the gate holds more uses than Postgres (a release whose gate step failed) does it walk the
//! voucher's orders, in bounded steps (`scan.lua`), to find them.

use std::time::Duration;

use super::{SweepReport, Sweeper};
use crate::domain::VoucherCode;
use crate::gate::{GateCounts, GateMeta, Place, Removal, Removed, Unit};
use crate::reservations::campaign_meta;
use crate::sweeper::SweepError;
use crate::telemetry::metrics::VOUCHER_REMAINING;

/// What the reconciler read: the gate's counters, then (after, in one Postgres snapshot)
/// `total_limit` less the uses held, the budget less the discounts held, and the voucher's
/// version.
#[derive(Debug, PartialEq, Eq)]
struct Reading {
    gate: GateCounts,
    expected: i64,
    expected_budget: Option<i64>,
    version: i64,
}

impl Sweeper {
    /// Brings the gate's rules to Postgres', then compares the gate's `remaining` with
    /// `total_limit - uses held - in_flight`: a voucher's, or a flash-sale campaign's (its
    /// total, or what its codes' limits allow, less the uses held).
    pub(super) async fn reconcile(
        &self,
        unit: Unit<'_>,
        in_flight: u64,
        report: &mut SweepReport,
    ) -> Result<(), SweepError> {
        let name = unit.to_string();
        // A change whose last gate step failed left the gate stricter than Postgres.
        // `sync.lua` writes only what is not older than the gate's, and never while a change
        // or a loader holds the gate lock.
        if let Some(meta) = self.rules(unit).await? {
            if report.gate_ok(self.gate.sync_meta(unit, &meta).await) == Some(true) {
                report.rules_synced += 1;
                tracing::warn!(
                    code = name,
                    version = meta.version,
                    "gate rules brought to the database's"
                );
            }
        }

        let Some(reading) = self.read(unit).await? else {
            return Ok(());
        };
        metrics::gauge!(VOUCHER_REMAINING, "code" => name.clone())
            .set(reading.gate.remaining as f64);
        let expected = reading.expected - in_flight as i64;
        // The discounts of the events in flight are not known here: the money is compared only
        // when none is.
        let budget_drift = in_flight == 0 && reading.gate.budget != reading.expected_budget;
        if reading.gate.remaining == expected && !budget_drift {
            return Ok(());
        }
        report.drift_found += 1;
        tracing::warn!(
            code = name,
            gate = reading.gate.remaining,
            expected,
            drift = reading.gate.remaining - expected,
            gate_budget = ?reading.gate.budget,
            expected_budget = ?reading.expected_budget,
            in_flight,
            "gate drift"
        );
        if in_flight > 0 {
            return Ok(());
        }
        // Act only on figures that hold still. During a sale the gate counts a use a moment
        // before Postgres does (and `in_flight` was read before the counts): what looks like
        // drift there is a reserve on its way, and must neither be repaired nor start a walk
        // through the orders.
        if !self.holds_still(unit, &reading).await? {
            return Ok(());
        }
        // Fewer uses left in the gate than in Postgres: the gate may hold an order that
        // Postgres released (a release whose gate step failed, or is on its way). Each is
        // finished here (a tombstone makes the other one's step find ALREADY, so the use comes
        // back once), and nothing is repaired in this run: counted as held now, that use would
        // be given back twice.
        let budget_short = matches!(
            (reading.gate.budget, reading.expected_budget),
            (Some(gate), Some(expected)) if gate < expected
        );
        if reading.gate.remaining < expected || budget_short {
            if self.finish_releases(unit, report).await? {
                return Ok(());
            }
            // The walk took time: the figures must still be those read.
            if !self.holds_still(unit, &reading).await? {
                return Ok(());
            }
        }
        // Compare-and-set in Redis, which also checks that no reserve, release or change of
        // the limit came in since the figures were read.
        let repaired = self
            .gate
            .repair_remaining(
                unit,
                reading.gate,
                reading.expected,
                reading.expected_budget,
                reading.version,
            )
            .await;
        if report.gate_ok(repaired) == Some(true) {
            report.drift_repaired += 1;
            tracing::warn!(
                code = name,
                from = reading.gate.remaining,
                to = reading.expected,
                budget = ?reading.expected_budget,
                "gate drift repaired"
            );
        }
        Ok(())
    }

    /// Whether the figures read a moment later are still `reading`.
    async fn holds_still(&self, unit: Unit<'_>, reading: &Reading) -> Result<bool, SweepError> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(self.read(unit).await?.as_ref() == Some(reading))
    }

    /// The rules the gate should hold, as Postgres has them now (None: no such voucher or
    /// campaign).
    async fn rules(&self, unit: Unit<'_>) -> Result<Option<GateMeta>, SweepError> {
        Ok(match unit {
            Unit::Voucher(code) => self.store.gate_source(code, false).await?.map(|source| {
                GateMeta::of(
                    &source.rules,
                    source.reservation_ttl_seconds,
                    source.version,
                )
            }),
            Unit::Campaign(id) => self
                .store
                .campaign_gate_source(id, false)
                .await?
                .map(|source| campaign_meta(&source, source.version)),
        })
    }

    /// Which of the gate's held orders (its `orders` fields) Postgres has released, as
    /// (code, orderId).
    async fn released(
        &self,
        unit: Unit<'_>,
        fields: &[&str],
    ) -> Result<Vec<(String, String)>, SweepError> {
        let orders: Vec<(&str, &str)> = fields.iter().filter_map(|f| unit.split(f)).collect();
        let found = self.store.orders_among(&orders).await?;
        Ok(found
            .into_iter()
            .filter(|(_, _, released)| *released)
            .map(|(code, order, _)| (code, order))
            .collect())
    }

    /// Walks the voucher's orders in bounded steps and finishes in the gate every release
    /// Postgres has that the gate has not. Each step is one short Redis call and one Postgres
    /// query over at most [`crate::gate::SCAN_STEP`] orders. True when it finished one, or
    /// could not look everywhere (a gate call failed): no repair then.
    async fn finish_releases(
        &self,
        unit: Unit<'_>,
        report: &mut SweepReport,
    ) -> Result<bool, SweepError> {
        let mut cursor = 0;
        let mut finished = false;
        loop {
            let Some(step) = report.gate_ok(self.gate.scan_actives(unit, cursor).await) else {
                return Ok(true);
            };
            if !step.actives.is_empty() {
                let fields: Vec<&str> = step.actives.iter().map(|(o, _)| o.as_str()).collect();
                let released = self.released(unit, &fields).await?;
                for (code, order) in &released {
                    let Ok(code) = VoucherCode::parse(code) else {
                        continue;
                    };
                    let place = Place::of(&code, unit.campaign());
                    let field = place.field(order);
                    let customer = step
                        .actives
                        .iter()
                        .find(|(f, _)| *f == field)
                        .map(|(_, c)| *c);
                    let removed = self
                        .gate
                        .remove(place, order, Removal::Release, customer)
                        .await;
                    match report.gate_ok(removed) {
                        Some(Removed::Released) => {
                            report.releases_finished += 1;
                            tracing::warn!(code = %unit, order_id = %order, "gate release finished");
                        }
                        Some(_) => {}
                        None => return Ok(true),
                    }
                    finished = true;
                }
            }
            if step.cursor == 0 {
                return Ok(finished);
            }
            cursor = step.cursor;
        }
    }

    /// The gate first, then Postgres (None: either does not have the voucher or campaign).
    /// In this order, a release that reached Postgres before the second read counts as given
    /// back there and still held in the gate (the gate looks stricter, and the walk finds it),
    /// and one that reaches it after is counted as held in both: either way its use is
    /// counted once.
    async fn read(&self, unit: Unit<'_>) -> Result<Option<Reading>, SweepError> {
        let Some(gate) = self.gate.counts(unit).await? else {
            return Ok(None);
        };
        let expected = match unit {
            Unit::Voucher(code) => self
                .store
                .gate_check(code)
                .await?
                .map(|check| (check.remaining, check.budget_left, check.version)),
            Unit::Campaign(id) => self
                .store
                .campaign_gate_source(id, false)
                .await?
                .map(|source| (source.remaining, source.budget_left, source.version)),
        };
        Ok(
            expected.map(|(expected, expected_budget, version)| Reading {
                gate,
                expected,
                expected_budget,
                version,
            }),
        )
    }
}
