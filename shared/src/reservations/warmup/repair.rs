//! Repairing a gate Redis may have lost data of since it was loaded (a failover, a restart):
//! it grants nothing until it is written again from Postgres and the grants it may have lost.

use super::snapshot::Snapshot;
use super::{Warmup, LOAD_LOCK_TTL, MODE_A_GRACE};
use crate::gate::{Loaded, Unit};
use crate::reservations::error::WarmupError;

impl Warmup {
    /// Rules and counts of `unit` as Postgres holds them, read in one snapshot (a campaign's
    /// with its customers and codes: a walk as long as the campaign has codes).
    pub(super) async fn snapshot(&self, unit: Unit<'_>) -> Result<Snapshot, WarmupError> {
        Ok(match unit {
            Unit::Voucher(code) => Snapshot::voucher(
                self.store
                    .gate_source(code, true)
                    .await?
                    .ok_or(WarmupError::NotFound)?,
            ),
            Unit::Campaign(id) => Snapshot::campaign(
                self.store
                    .campaign_gate_source(id, true)
                    .await?
                    .ok_or(WarmupError::NotFound)?,
            ),
        })
    }

    /// Repairs a gate that is not the copy of Redis' data it was loaded into (a failover that
    /// may have lost its last grants, `remaining` with them), so that it may grant again; see
    /// docs/ARCHITECTURE.md, "Faults and what they give". Ok: repaired now, by another caller,
    /// or not loaded any more (the next reserve loads it). [`WarmupError::EventsInFlight`]:
    /// the lost grants may still be on their way (one send timeout since the suspicion was
    /// first noticed has not passed, or mode B's transport still holds events of the gate);
    /// [`WarmupError::Busy`]: another caller holds the gate lock, or an order moved meanwhile.
    ///
    /// Once the lost grants have landed, Postgres counts every use the gate granted except the
    /// ones still pending in this copy without a row (a mode-B send that failed, a mode-A
    /// write on its way): the counts are Postgres' less those, written by `load.lua` in one
    /// step that keeps the orders and checks that none moved since they were read.
    pub async fn repair_suspect(&self, unit: Unit<'_>) -> Result<(), WarmupError> {
        let grace = self
            .events
            .as_ref()
            .map_or(MODE_A_GRACE, |events| events.in_flight_settles());
        match self.gate.suspect_for(unit).await? {
            None => return Ok(()),
            Some(waited) if waited < grace => return Err(WarmupError::EventsInFlight),
            Some(_) => {}
        }
        if let Some(events) = &self.events {
            if events.in_flight(&unit.name()).await? > 0 {
                return Err(WarmupError::EventsInFlight);
            }
        }
        let token = uuid::Uuid::new_v4().to_string();
        if !self
            .gate
            .try_lock_loading(unit, &token, LOAD_LOCK_TTL)
            .await?
        {
            return Err(WarmupError::Busy);
        }
        let result = self.repair_locked(unit, &token).await;
        if let Err(e) = self.gate.unlock_loading(unit, &token).await {
            tracing::warn!(code = %unit, error = %crate::telemetry::Chain(&e), "gate lock not released");
        }
        result
    }

    pub(super) async fn repair_locked(
        &self,
        unit: Unit<'_>,
        token: &str,
    ) -> Result<(), WarmupError> {
        // `#moves` first: a release that reaches the gate after Postgres was read makes the
        // write refuse, rather than count its use twice.
        let Some(before) = self.gate.counts(unit).await? else {
            return Ok(());
        };
        let (pending, all) = self.gate.pending(unit).await?;
        if all > pending.len() {
            // More than one read holds: the orphan sweep and the consumer shrink it first.
            return Err(WarmupError::Busy);
        }
        let pending: Vec<&str> = pending.iter().map(|(field, _)| field.as_str()).collect();
        let unlanded = self.uses_where(unit, &pending, |row| row.is_none()).await?;
        let mut snap = self.snapshot(unit).await?;
        snap.hold(&unlanded);
        // Read after Postgres: a release that reached Postgres and not yet this copy (its gate
        // step on its way, or lost) still holds its use here, and gives it back when that step
        // comes (or the reconciler finishes it). Counted as held, or the use would come back
        // twice. One that reaches Postgres after the snapshot is counted held twice: a use
        // short for a moment, until the reconciler repairs the drift.
        let mut cursor = 0;
        loop {
            let step = self.gate.scan_actives(unit, cursor).await?;
            let actives: Vec<&str> = step.actives.iter().map(|(f, _)| f.as_str()).collect();
            let releasing = self
                .uses_where(unit, &actives, |row| row == Some(true))
                .await?;
            snap.hold(&releasing);
            if step.cursor == 0 {
                break;
            }
            cursor = step.cursor;
        }
        let wrote = self
            .gate
            .repair_counts(unit, token, before.moves, &snap.meta, snap.counts())
            .await?;
        match wrote {
            Loaded::Now => {
                tracing::warn!(
                    code = %unit,
                    remaining = snap.remaining,
                    pending = unlanded.len(),
                    "gate repaired after Redis changed hands: trusted again"
                );
                Ok(())
            }
            Loaded::Already => Ok(()),
            Loaded::Fenced | Loaded::Moved => Err(WarmupError::Busy),
        }
    }
}
