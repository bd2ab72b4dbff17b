//! Gate against Postgres: drift is reported, and repaired only when it holds still.

use std::time::Duration;

use super::{SweepReport, Sweeper};
use crate::domain::VoucherCode;
use crate::errors::SweepError;

impl Sweeper {
    /// Compares the gate's `remaining` with `total_limit - uses held - in_flight`.
    pub(super) async fn reconcile(
        &self,
        code: &VoucherCode,
        in_flight: u64,
        report: &mut SweepReport,
    ) -> Result<(), SweepError> {
        let (Some(gate), Some(expected)) = self.read_remaining(code).await? else {
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
        let (Some(gate2), Some(expected2)) = self.read_remaining(code).await? else {
            return Ok(());
        };
        if (gate2, expected2) != (gate, expected) {
            return Ok(());
        }
        let repaired = self.gate.repair_remaining(code, gate, expected).await;
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

    /// The gate's `remaining`, then Postgres' `total_limit` less the uses held.
    async fn read_remaining(
        &self,
        code: &VoucherCode,
    ) -> Result<(Option<i64>, Option<i64>), SweepError> {
        let gate = self.gate.remaining(code).await?;
        let expected = self.store.expected_remaining(code).await?;
        Ok((gate, expected))
    }
}
