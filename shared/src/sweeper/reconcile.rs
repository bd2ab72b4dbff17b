//! Gate against Postgres: the rules are copied when they differ; releases that reached
//! Postgres but not the gate are finished; drift of the count is reported, and repaired only
//! when it holds still.

use std::time::Duration;

use super::{SweepReport, Sweeper};
use crate::domain::VoucherCode;
use crate::errors::SweepError;
use crate::gate::{GateMeta, Removal, Removed};

/// What the reconciler read: the gate's `remaining` and the orders holding a use there, then
/// (after, in one Postgres snapshot) `total_limit` less the uses held, the voucher's version,
/// and which of those orders Postgres has released.
#[derive(Debug, PartialEq, Eq)]
struct Reading {
    gate: i64,
    actives: Vec<(String, i64)>,
    expected: i64,
    version: i64,
    released: Vec<String>,
}

impl Sweeper {
    /// Brings the gate's rules to Postgres', then compares the gate's `remaining` with
    /// `total_limit - uses held - in_flight`.
    pub(super) async fn reconcile(
        &self,
        code: &VoucherCode,
        in_flight: u64,
        report: &mut SweepReport,
    ) -> Result<(), SweepError> {
        // A change of the voucher whose last gate step failed left the gate stricter than
        // Postgres. `sync.lua` writes only what is not older than the gate's, and never while a
        // change or a loader holds the gate lock.
        if let Some(source) = self.store.gate_source(code, false).await? {
            let meta = GateMeta::of(
                &source.rules,
                source.reservation_ttl_seconds,
                source.version,
            );
            if report.gate_ok(self.gate.sync_meta(code, &meta).await) == Some(true) {
                report.rules_synced += 1;
                tracing::warn!(
                    code = code.as_str(),
                    version = source.version,
                    "gate rules brought to the database's"
                );
            }
        }

        let Some(reading) = self.read(code).await? else {
            return Ok(());
        };
        let expected = reading.expected - in_flight as i64;
        if reading.gate == expected && reading.released.is_empty() {
            return Ok(());
        }
        report.drift_found += 1;
        tracing::warn!(
            code = code.as_str(),
            gate = reading.gate,
            expected,
            drift = reading.gate - expected,
            in_flight,
            releases_unfinished = reading.released.len(),
            "gate drift"
        );
        if in_flight > 0 {
            return Ok(());
        }
        // Released in Postgres, still holding a use in the gate: a release whose gate step
        // failed, or is on its way. Each is finished here (a tombstone makes the other one's
        // step find ALREADY, so the use comes back once), and nothing is repaired in this run:
        // counted as held now, that use would be given back twice.
        if !reading.released.is_empty() {
            for (order, customer) in &reading.actives {
                if !reading.released.contains(order) {
                    continue;
                }
                let removed = self
                    .gate
                    .remove(code, order, Removal::Release, Some(*customer))
                    .await;
                if report.gate_ok(removed) == Some(Removed::Released) {
                    report.releases_finished += 1;
                    tracing::warn!(code = code.as_str(), order_id = %order, "gate release finished");
                }
            }
            return Ok(());
        }
        // Repair only figures that hold still: read again, then compare-and-set in Redis, which
        // also checks that no reserve, release or change of the limit came in between.
        tokio::time::sleep(Duration::from_millis(50)).await;
        if self.read(code).await?.as_ref() != Some(&reading) {
            return Ok(());
        }
        let repaired = self
            .gate
            .repair_remaining(
                code,
                reading.gate,
                reading.expected,
                reading.version,
                reading.actives.len(),
            )
            .await;
        if report.gate_ok(repaired) == Some(true) {
            report.drift_repaired += 1;
            tracing::warn!(
                code = code.as_str(),
                from = reading.gate,
                to = reading.expected,
                "gate drift repaired"
            );
        }
        Ok(())
    }

    /// The gate first, then Postgres (None: either does not have the voucher). In this order, a
    /// release that reached Postgres before the second read shows as released, and one that
    /// reaches it after is still counted as held there: either way its use is counted once.
    async fn read(&self, code: &VoucherCode) -> Result<Option<Reading>, SweepError> {
        let Some((gate, actives)) = self.gate.actives(code).await? else {
            return Ok(None);
        };
        let orders: Vec<&str> = actives.iter().map(|(o, _)| o.as_str()).collect();
        let Some((expected, version, released)) = self.store.released_among(code, &orders).await?
        else {
            return Ok(None);
        };
        Ok(Some(Reading {
            gate,
            actives,
            expected,
            version,
            released,
        }))
    }
}
