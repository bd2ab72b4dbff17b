//! The gate's decision: load the gate when it does not hold the voucher yet, ask its script,
//! and hand a granted use to [`settle`](super::settle). Also the answers given without the
//! script, from what the gate holds, while the voucher is sold out.

use chrono::{DateTime, Utc};

use super::Flash;
use crate::domain::{Reservation, Reserve, ReserveOutcome, Validate};
use crate::gate::{GateError, Lookup, OrderEntry, Place};
use crate::reservations::error::{ReserveError, WarmupError};
use crate::telemetry::metrics::SOLD_OUT_ANSWERS;

impl Flash {
    /// The gate's decision and its settling, past the sold-out short cut (which a campaign's
    /// codes do not take: one code's OUT_OF_STOCK says nothing of its campaign's others).
    pub(super) async fn decide(
        &self,
        r: &Reserve,
        campaign: Option<i64>,
        now: DateTime<Utc>,
    ) -> Result<Reservation, ReserveError> {
        let place = Place::of(&r.code, campaign);
        let order = r.order_id.as_str();
        let now_ms = now.timestamp_millis();
        let ask = || {
            self.gate
                .reserve(place, r.customer_id, order, r.order_amount, now_ms)
        };
        let mut reply = ask().await?;
        if reply.outcome == ReserveOutcome::NotLoaded {
            let warmed = match campaign {
                Some(id) => self.warmup.warm_campaign(id).await.map(|_| ()),
                None => self.warmup.warm(&r.code).await.map(|_| ()),
            };
            if let Err(e) = warmed {
                // Loading must wait (events in flight, another loader): a refusal the rules
                // decide alone is answered now rather than with that 503.
                if matches!(e, WarmupError::EventsInFlight | WarmupError::Busy) {
                    if let Some(refusal) = self.refused_by_rules(r, now).await? {
                        return Err(ReserveError::refused(refusal));
                    }
                }
                return Err(e.into());
            }
            reply = ask().await?;
            if reply.outcome == ReserveOutcome::NotLoaded {
                // The sale is over and the gate does not hold it (retired, or never loaded):
                // Postgres decides, as for a standard voucher. A retry of an order it holds
                // gets its first answer again; any other reserve is refused (EXPIRED).
                return self.writes.reserve(r, now).await;
            }
        }
        if reply.outcome == ReserveOutcome::Suspect {
            // Redis changed hands since the gate was loaded: it grants nothing until it has
            // been repaired from Postgres and the grants it may have lost. Meanwhile 503.
            self.warmup.repair_suspect(place.unit).await?;
            reply = ask().await?;
        }
        if reply.outcome == ReserveOutcome::OutOfStock && campaign.is_none() {
            self.sold_out.mark(&r.code);
        }
        let version = reply.rules_version;
        match (reply.outcome, reply.held) {
            (ReserveOutcome::Reserved, Some(held)) => {
                self.settle(r, campaign, held, version, true).await
            }
            (ReserveOutcome::Replay, Some(held)) => {
                self.settle(r, campaign, held, version, false).await
            }
            (outcome, _) => Err(ReserveError::refused(outcome)),
        }
    }

    /// For a voucher the gate cannot load yet: its refusal by the rules alone (paused, window
    /// not started or ended, order below the minimum), read from Postgres, where the rules
    /// live. Loading needs the counts, which in mode B wait for the events in flight, and a
    /// refusal by the rules must not answer 503 for as long as another sale's events keep
    /// arriving. None: the rules let it through, or Postgres holds this order (a retry answers
    /// as the first answer did, whatever the rules are now: the gate decides it once loaded).
    async fn refused_by_rules(
        &self,
        r: &Reserve,
        now: DateTime<Utc>,
    ) -> Result<Option<ReserveOutcome>, ReserveError> {
        let ask = Validate {
            code: r.code.clone(),
            customer_id: r.customer_id,
            order_amount: r.order_amount,
        };
        let (outcome, _) = self.store.validate(&ask, now).await?;
        if !outcome.is_refused_by_rules() {
            return Ok(None);
        }
        match self.store.reservation(&r.code, &r.order_id).await? {
            None => Ok(Some(outcome)),
            Some(_) => Ok(None),
        }
    }

    /// Sold out a moment ago: answer without the gate's script, from what the gate holds for
    /// this order and customer (`seen`: one read-only lookup, or the process's copy of it,
    /// `sold_out.rs`). A winner's retry still gets its 201, not OUT_OF_STOCK, and refusals
    /// come in the order the script's would (per-user limit before stock), so answers do not
    /// depend on which path took the request.
    pub(super) async fn answer_sold_out(
        &self,
        r: &Reserve,
        seen: Result<Lookup, GateError>,
    ) -> Result<Reservation, ReserveError> {
        metrics::counter!(SOLD_OUT_ANSWERS).increment(1);
        let Ok(Lookup {
            entry,
            uses,
            per_user,
            ..
        }) = seen
        else {
            // Redis down as well: the voucher was sold out a moment ago and nothing is written.
            return Err(ReserveError::OutOfStock);
        };
        match entry {
            Some(OrderEntry::Active {
                held, order_amount, ..
            }) if held.customer_id == r.customer_id
                && order_amount != 0
                && order_amount != r.order_amount =>
            {
                Err(ReserveError::OrderAmountMismatch)
            }
            Some(OrderEntry::Active {
                held,
                rules_version,
                ..
            }) if held.customer_id == r.customer_id => {
                self.settle(r, None, held, rules_version, false).await
            }
            Some(OrderEntry::Active { .. }) => Err(ReserveError::OrderConflict),
            Some(OrderEntry::Tombstone(Some(c))) if c != r.customer_id => {
                Err(ReserveError::OrderConflict)
            }
            Some(OrderEntry::Tombstone(_)) => Err(ReserveError::Released),
            None if per_user.is_some_and(|limit| uses >= limit) => Err(ReserveError::AlreadyUsed),
            None => Err(ReserveError::OutOfStock),
        }
    }
}
