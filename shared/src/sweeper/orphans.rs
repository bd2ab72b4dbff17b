//! Orders a gate still marks pending: cleared when Postgres has them, recovered as orphans when
//! they are older than TTL + grace and Postgres never got them.

use chrono::{DateTime, Utc};

use super::{SweepReport, Sweeper};
use crate::domain::{ReleaseReason, Status, VoucherCode};
use crate::gate::{OrderEntry, Place, Removal, Unit};
use crate::store::{Merge, MergeOutcome};
use crate::sweeper::SweepError;

impl Sweeper {
    /// Resolves the pending orders of one gate (a voucher's, or a flash campaign's over all its
    /// codes), the oldest first and a bounded number a run, with one Postgres query for them.
    /// Returns how many are still in flight (pending, not yet in Postgres, younger than TTL +
    /// grace, and all those past the bounded read), or None when the gate failed.
    pub(super) async fn orphans(
        &self,
        unit: Unit<'_>,
        ttl_ms: i64,
        now: DateTime<Utc>,
        report: &mut SweepReport,
    ) -> Result<Option<u64>, SweepError> {
        let Some((pending, all)) = report.gate_ok(self.gate.pending(unit).await) else {
            return Ok(None);
        };
        if pending.is_empty() {
            return Ok(Some(0));
        }
        let unread = (all - pending.len()) as u64;
        // A field that names no order of a valid code is no order of the service's.
        let orders: Vec<(VoucherCode, &str, i64)> = pending
            .iter()
            .filter_map(|(field, ms)| {
                let (code, order) = unit.split(field)?;
                Some((VoucherCode::parse(code).ok()?, order, *ms))
            })
            .collect();
        let pairs: Vec<(&str, &str)> = orders.iter().map(|(c, o, _)| (c.as_str(), *o)).collect();
        let known = self.store.orders_among(&pairs).await?;
        let cutoff = now.timestamp_millis() - ttl_ms - self.orphan_grace.as_millis() as i64;
        let mut in_flight = 0;
        for (code, order, reserved_ms) in &orders {
            let place = Place::of(code, unit.campaign());
            if known
                .iter()
                .any(|(c, o, _)| c == code.as_str() && o == order)
            {
                // Postgres has it; the clean-up after the write was lost.
                report.gate_ok(self.gate.settled(place, order).await);
            } else if *reserved_ms < cutoff {
                if self.recover(place, order, now, report).await? {
                    report.orphans_recovered += 1;
                }
            } else {
                in_flight += 1;
            }
        }
        Ok(Some(in_flight + unread))
    }

    /// Tombstone in Postgres first (a late event then merges into a no-op), then release in
    /// the gate.
    async fn recover(
        &self,
        place: Place<'_>,
        order: &str,
        now: DateTime<Utc>,
        report: &mut SweepReport,
    ) -> Result<bool, SweepError> {
        let code = place.code;
        let Some(entry) = report.gate_ok(self.gate.order(place, order).await) else {
            return Ok(false);
        };
        let Some(OrderEntry::Active {
            held, order_amount, ..
        }) = entry
        else {
            // Already a tombstone (or gone): only the pending mark is left.
            report.gate_ok(self.gate.settled(place, order).await);
            return Ok(false);
        };
        let merge = Merge::held(code, order, held, order_amount, Status::Released)
            .reason(ReleaseReason::Expired)
            .at(now);
        // Not a plain merge: the look-up above and this write are two steps, and a confirm
        // from the gate's entry may have written the row in between. RELEASED is above
        // CONFIRMED in the lattice, so a merge would take a paid order's use back.
        let merged = match self.store.recover_orphan(&merge).await {
            // Deployed before `migrate` created `fg_recover_orphan`: no tombstone until it ran. The orphan stays
            // pending, its use held: under-allocation for a while, never a confirm overridden.
            Err(e) if crate::store::is_undefined_function(&e) => {
                tracing::warn!(
                    code = code.as_str(),
                    order_id = order,
                    "fg_recover_orphan missing: run migrate"
                );
                return Ok(false);
            }
            merged => merged?,
        };
        if merged.outcome == MergeOutcome::Unchanged
            && merged.row.as_ref().is_some_and(|r| r.status.is_active())
        {
            // The order reached Postgres after all and holds its use there: only the pending
            // mark is left.
            report.gate_ok(self.gate.settled(place, order).await);
            return Ok(false);
        }
        if merged.outcome == MergeOutcome::OrderConflict {
            tracing::warn!(
                code = code.as_str(),
                order_id = order,
                "orphan's orderId belongs to another customer in Postgres"
            );
        }
        let removed = self
            .gate
            .remove(place, order, Removal::Release, Some(held.customer_id))
            .await;
        report.gate_ok(removed);
        tracing::warn!(code = code.as_str(), order_id = order, "orphan recovered");
        Ok(true)
    }
}
