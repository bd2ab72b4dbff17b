//! Gate against Postgres: the rules are copied when they differ; drift of the count is
//! reported, and repaired only when it holds still.

use std::time::Duration;

use super::{SweepReport, Sweeper};
use crate::domain::VoucherCode;
use crate::errors::SweepError;

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
            if report.gate_ok(self.gate.sync_meta(code, &source.meta).await) == Some(true) {
                report.rules_synced += 1;
                tracing::warn!(
                    code = code.as_str(),
                    version = source.meta.version,
                    "gate rules brought to the database's"
                );
            }
        }

        let Some((gate, expected, version)) = self.read_remaining(code).await? else {
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
        // Repair only figures that hold still: read again, then compare-and-set in Redis (which
        // also checks that no change of the limit came in between: the version).
        tokio::time::sleep(Duration::from_millis(50)).await;
        if self.read_remaining(code).await? != Some((gate, expected, version)) {
            return Ok(());
        }
        let repaired = self
            .gate
            .repair_remaining(code, gate, expected, version)
            .await;
        if report.gate_ok(repaired) == Some(true) {
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

    /// The gate's `remaining`, then Postgres' `total_limit` less the uses held and the version
    /// of the voucher it was read at (None: either does not have the voucher).
    async fn read_remaining(
        &self,
        code: &VoucherCode,
    ) -> Result<Option<(i64, i64, i64)>, SweepError> {
        let Some(gate) = self.gate.remaining(code).await? else {
            return Ok(None);
        };
        let source = self.store.gate_source(code, false).await?;
        Ok(source.map(|s| (gate, s.remaining, s.meta.version)))
    }
}
