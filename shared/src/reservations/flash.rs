//! The gate path of a flash-sale voucher: the sold-out short cut, the gate's decision, and
//! settling a granted use in Postgres (mode A) or on the queue (mode B). When Postgres does not
//! take a use the gate just granted, the gate is corrected so the two agree again.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::group_commit::GroupCommit;
use super::sold_out::{Recent, SoldOut};
use super::{Parts, Warmup};
use crate::domain::{
    Held, OrderId, Reservation, ReservationView, Reserve, ReserveOutcome, Status, Validate,
    VoucherCode,
};
use crate::errors::{FromGateError, GetReservationError, ReserveError, StoreError, WarmupError};
use crate::events::{ReservedEvent, Transport};
use crate::gate::{Gate, GateError, Lookup, OrderEntry, Place, Removal, Trust, Unit};
use crate::store::{Merge, MergeOutcome, Merged, Store};
use crate::telemetry::metrics::SOLD_OUT_ANSWERS;
use crate::telemetry::Chain;

/// What a gate holds in flight ([`Flash::pending`]).
#[derive(Debug, Default)]
pub(super) struct Pending {
    /// The oldest, as (code, orderId).
    pub orders: Vec<(String, String)>,
    /// How many in all.
    pub all: usize,
    /// A flash-sale campaign's gate, which holds all its codes' orders.
    pub campaign: bool,
}

impl Pending {
    /// The part that is `code`'s: its orders among those read, and how many it has. A flash
    /// campaign's gate holds every code's: the count is exact while the campaign's backlog fits
    /// in one read ([`PENDING_STEP`](crate::gate::PENDING_STEP)); past it, only the code's among the oldest are known
    /// (a view during a long backlog may count fewer in flight than there are; never more).
    pub(super) fn of_code(self, code: &VoucherCode) -> (Vec<String>, usize) {
        let mine: Vec<String> = self
            .orders
            .into_iter()
            .filter(|(c, _)| c == code.as_str())
            .map(|(_, order)| order)
            .collect();
        // A voucher's gate holds its own orders alone: past the oldest read, the younger count
        // as in flight (as the voucher view always has).
        let all = if self.campaign { mine.len() } else { self.all };
        (mine, all)
    }
}

#[derive(Clone)]
pub(super) struct Flash {
    store: Store,
    gate: Arc<Gate>,
    /// Set: consistency mode B.
    events: Option<Arc<dyn Transport>>,
    warmup: Warmup,
    sold_out: SoldOut,
    /// Mode A's winners are written through it (in batches, in a long-running process).
    writes: GroupCommit,
}

impl Flash {
    pub(super) fn new(
        parts: Parts,
        warmup: Warmup,
        writes: GroupCommit,
        sold_out_ttl: Duration,
    ) -> Flash {
        Flash {
            writes,
            sold_out: SoldOut::new(sold_out_ttl, parts.gate.clone()),
            store: parts.store,
            gate: parts.gate,
            events: parts.events,
            warmup,
        }
    }

    /// `campaign`: the flash-sale campaign whose gate decides this code (None: a voucher, in
    /// its own).
    pub(super) async fn reserve(
        &self,
        r: &Reserve,
        campaign: Option<i64>,
        now: DateTime<Utc>,
    ) -> Result<Reservation, ReserveError> {
        if campaign.is_some() {
            return self.decide(r, campaign, now).await;
        }
        match self.sold_out.recently(&r.code) {
            Recent::No => {}
            Recent::Lookup => {
                let seen = self
                    .gate
                    .lookup(&r.code, r.order_id.as_str(), Some(r.customer_id))
                    .await;
                return self.answer_sold_out(r, seen).await;
            }
            Recent::Copy(copy) => {
                let seen = copy.lookup(r.order_id.as_str(), r.customer_id);
                return self.answer_sold_out(r, Ok(seen)).await;
            }
        }
        self.decide(r, None, now).await
    }

    /// The gate's decision and its settling, past the sold-out short cut (which a campaign's
    /// codes do not take: one code's OUT_OF_STOCK says nothing of its campaign's others).
    async fn decide(
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
        match self.store.reservation(&r.code, &r.order_id).await {
            Err(GetReservationError::NotFound) => Ok(Some(outcome)),
            Ok(_) => Ok(None),
            Err(GetReservationError::Unavailable(e)) => Err(e.into()),
            Err(GetReservationError::Gate(e)) => Err(e.into()),
            Err(GetReservationError::Invalid(e)) => Err(e.into()),
            // Unknown to Postgres, and the gate cannot say yet: the rules decide when it can.
            Err(GetReservationError::Pending) => Ok(None),
        }
    }

    /// Sold out a moment ago: answer without the gate's script, from what the gate holds for
    /// this order and customer (`seen`: one read-only lookup, or the process's copy of it,
    /// `sold_out.rs`). A winner's retry still gets its 201, not OUT_OF_STOCK, and refusals
    /// come in the order the script's would (per-user limit before stock), so answers do not
    /// depend on which path took the request.
    async fn answer_sold_out(
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

    /// Uses came back by a change of the voucher (a higher limit, a resume): this process stops
    /// answering OUT_OF_STOCK from memory.
    pub(super) fn limit_raised(&self, code: &VoucherCode) {
        self.sold_out.clear(code);
    }

    /// The gate granted (`fresh`) or already held (a retry) the use under the rules of the
    /// voucher's `rules_version`. Mode B: send the event. Mode A: write the row with the merge
    /// and answer from what Postgres stored.
    async fn settle(
        &self,
        r: &Reserve,
        campaign: Option<i64>,
        held: Held,
        rules_version: Option<i64>,
        fresh: bool,
    ) -> Result<Reservation, ReserveError> {
        let order = r.order_id.as_str();
        if let Some(events) = &self.events {
            // Mode B: Postgres is off the path. The event carries the use to the consumer; if
            // it cannot be sent, the order stays pending in the gate for the sweeper (or the
            // client's retry, answered REPLAY, sends it again). A campaign's code's event is
            // keyed by its campaign: one partition, one lag for the campaign's gate.
            events
                .send(&ReservedEvent::new(r, held, rules_version, campaign))
                .await?;
            return Ok(Reservation {
                order_id: order.to_owned(),
                customer_id: held.customer_id,
                discount_amount: held.discount,
                status: Status::Reserved,
                expires_at: DateTime::from_timestamp_millis(held.expires_ms)
                    .ok_or_else(|| StoreError::UnexpectedOutcome("expiry out of range".into()))?,
            });
        }
        let merged = self
            .writes
            .merge_reserved(&r.code, order, held, r.order_amount)
            .await;
        let merged = match merged {
            Ok(m) => m,
            Err(e) => {
                if fresh {
                    // Forget, not tombstone: the client's retry with the same orderId must be
                    // able to succeed once Postgres is back.
                    self.correct(r, campaign, Removal::Forget { give_back: true })
                        .await;
                }
                return Err(e.into());
            }
        };
        let result = match (merged.outcome, &merged.row) {
            (MergeOutcome::Applied | MergeOutcome::Unchanged, Some(row))
                if row.status.is_active() =>
            {
                Ok(Reservation {
                    order_id: order.to_owned(),
                    customer_id: row.customer_id,
                    discount_amount: row.discount_amount,
                    status: Status::Reserved,
                    expires_at: row.expires_at,
                })
            }
            (MergeOutcome::Applied | MergeOutcome::Unchanged | MergeOutcome::Revoked, _) => {
                Err(ReserveError::Released)
            }
            (MergeOutcome::OrderConflict, _) => Err(ReserveError::OrderConflict),
            (MergeOutcome::Refused(outcome), _) => Err(ReserveError::refused(outcome)),
            (MergeOutcome::NotFound, _) => {
                Err(StoreError::UnexpectedOutcome("NOT_FOUND".into()).into())
            }
        };
        if fresh {
            self.reconcile_fresh(r, campaign, held, &merged).await;
        }
        result
    }

    /// After a use the gate just granted was merged: make the gate agree with what Postgres
    /// decided.
    async fn reconcile_fresh(
        &self,
        r: &Reserve,
        campaign: Option<i64>,
        held: Held,
        merged: &Merged,
    ) {
        let how = match merged.outcome {
            MergeOutcome::Applied => None,
            MergeOutcome::Unchanged | MergeOutcome::Revoked => match &merged.row {
                // A retry of this order, answered REPLAY by the gate, wrote the row first: it
                // is this very reservation (same expiry), counted once. Nothing to undo.
                Some(row)
                    if row.status.is_active()
                        && row.expires_at.timestamp_millis() == held.expires_ms =>
                {
                    None
                }
                // Postgres had the order from before the gate lost its data: counted twice.
                Some(row) if row.status.is_active() => Some(Removal::Uncount),
                // Released in Postgres: the gate lost the tombstone.
                _ => Some(Removal::Release),
            },
            // Postgres did not take the use: the gate gives it back and forgets the order.
            MergeOutcome::OrderConflict | MergeOutcome::Refused(ReserveOutcome::AlreadyUsed) => {
                Some(Removal::Forget { give_back: true })
            }
            // Postgres is full, so the gate had one use too many: keep it taken.
            MergeOutcome::Refused(_) => Some(Removal::Forget { give_back: false }),
            MergeOutcome::NotFound => None,
        };
        match how {
            Some(how) => self.correct(r, campaign, how).await,
            // Postgres has the row: the order is no longer pending. Off the answer's path.
            None => {
                let (gate, code, order) = (
                    self.gate.clone(),
                    r.code.clone(),
                    r.order_id.as_str().to_owned(),
                );
                tokio::spawn(async move {
                    gate.settled_best_effort(Place::of(&code, campaign), &order)
                        .await
                });
            }
        }
    }

    /// Takes the order out of the gate `how`; on failure the order stays pending in the gate and
    /// the sweeper's orphan pass resolves it.
    async fn correct(&self, r: &Reserve, campaign: Option<i64>, how: Removal) {
        let order = r.order_id.as_str();
        if let Err(e) = self
            .gate
            .remove(
                Place::of(&r.code, campaign),
                order,
                how,
                Some(r.customer_id),
            )
            .await
        {
            tracing::error!(code = r.code.as_str(), order_id = order, error = %Chain(&e), "gate correction failed");
        }
    }

    /// Consistency mode B: winners travel as events.
    pub(super) fn mode_b(&self) -> bool {
        self.events.is_some()
    }

    /// Mode B: writes a reservation that is still on its way to Postgres from what the gate
    /// holds (`campaign`'s gate for a flash-sale campaign's code), with `status`; the late event
    /// then merges into nothing. None: mode A, or no such order (see
    /// [`Flash::never_granted`]). A tombstone gives a merge without a row (released).
    pub(super) async fn merge_from_gate(
        &self,
        code: &VoucherCode,
        campaign: Option<i64>,
        order_id: &OrderId,
        status: Status,
    ) -> Result<Option<Merged>, FromGateError> {
        if self.events.is_none() {
            return Ok(None);
        }
        let place = Place::of(code, campaign);
        let order = order_id.as_str();
        let (held, order_amount) = match self.gate.order_with_trust(place, order).await? {
            (None, trust) => {
                self.never_granted(place.unit, trust).await?;
                return Ok(None);
            }
            (Some(OrderEntry::Tombstone(_)), _) => {
                return Ok(Some(Merged {
                    outcome: MergeOutcome::Unchanged,
                    row: None,
                    flash_sale: true,
                }))
            }
            (
                Some(OrderEntry::Active {
                    held, order_amount, ..
                }),
                _,
            ) => (held, order_amount),
        };
        let merge = Merge::held(code, order, held, order_amount, status);
        let merged = self.store.merge(&merge).await?;
        self.gate.settled_best_effort(place, order).await;
        Ok(Some(merged))
    }

    /// Mode B: the reservation as the gate holds it, for an order whose event has not landed
    /// (the same fields the 201 gave). None: mode A, or the gate holds no use for the order (a
    /// tombstone's row is written by the release that made it, so Postgres answers for it; an
    /// unknown order was never granted, see [`Flash::never_granted`]).
    pub(super) async fn held_in_gate(
        &self,
        code: &VoucherCode,
        campaign: Option<i64>,
        order_id: &OrderId,
    ) -> Result<Option<ReservationView>, FromGateError> {
        if self.events.is_none() {
            return Ok(None);
        }
        let place = Place::of(code, campaign);
        let held = match self.gate.order_with_trust(place, order_id.as_str()).await? {
            (Some(OrderEntry::Active { held, .. }), _) => held,
            (Some(OrderEntry::Tombstone(_)), _) => return Ok(None),
            (None, trust) => {
                self.never_granted(place.unit, trust).await?;
                return Ok(None);
            }
        };
        Ok(
            DateTime::from_timestamp_millis(held.expires_ms).map(|expires_at| ReservationView {
                order_id: order_id.as_str().to_owned(),
                customer_id: held.customer_id,
                status: Status::Reserved,
                discount_amount: held.discount,
                expires_at,
            }),
        )
    }

    /// Mode B, an order that neither Postgres nor the gate (`unit`: the voucher's, or its flash
    /// campaign's) knows: Ok when it was never granted,
    /// [`FromGateError::Pending`] while it may be a grant whose entry Redis lost and whose event
    /// is still on its way.
    ///
    /// The gate records every grant before its event is sent. So while the gate is the very
    /// copy of Redis' data it was loaded into ([`Trust::Intact`]), an order it does not know
    /// does not exist, whatever is in flight: 404 at once. A voucher the gate never loaded has
    /// no events at all. Only after a loss (a failover or restart since the load, or the
    /// voucher gone from a gate that had it) could one be on its way; the gate's own count
    /// of them (the `pending` set) was lost with it, so the transport's count stands in (the
    /// lag of the gate's partition, the queue's depth). Once that is zero every lost grant has
    /// landed, and a suspect gate is trusted again (after one send timeout: a grant made just
    /// before the failover may still be in its send).
    async fn never_granted(&self, unit: Unit<'_>, trust: Trust) -> Result<(), FromGateError> {
        let Some(events) = &self.events else {
            return Ok(());
        };
        let key = unit.name();
        match trust {
            Trust::Intact => Ok(()),
            Trust::Unloaded if !self.may_hold(unit).await? => Ok(()),
            Trust::Unloaded => {
                // A count that lags the queue (Amazon SQS' approximate ones) says zero only once
                // it has caught up with the sends made before the loss was first noticed.
                let lag = events
                    .in_flight_settles()
                    .saturating_sub(events.send_timeout());
                if !lag.is_zero() && self.gate.lost_for(unit).await? < events.in_flight_settles() {
                    return Err(FromGateError::Pending);
                }
                match events.in_flight(&key).await {
                    Ok(0) => Ok(()),
                    _ => Err(FromGateError::Pending),
                }
            }
            // A lost grant's event may still be in its send for up to one send timeout after
            // the failover (counted from when the suspicion was first noticed), or on the
            // transport. Once both are over, the gate is repaired from Postgres and trusted
            // again: from then on it knows every order it granted.
            Trust::Suspect => match self.warmup.repair_suspect(unit).await {
                Ok(()) => Ok(()),
                Err(WarmupError::EventsInFlight | WarmupError::Busy) => Err(FromGateError::Pending),
                Err(WarmupError::Store(e)) => Err(e.into()),
                Err(WarmupError::Gate(e)) => Err(e.into()),
                Err(e) => {
                    tracing::warn!(code = %unit, error = %Chain(&e), "suspect gate not repaired");
                    Err(FromGateError::Pending)
                }
            },
        }
    }

    /// May the gate hold `unit` (loaded, and not retired since)? One it never held has sent no
    /// event.
    async fn may_hold(&self, unit: Unit<'_>) -> Result<bool, StoreError> {
        let held = match unit {
            Unit::Voucher(code) => self.store.gate_loaded(code).await?,
            Unit::Campaign(id) => self.store.campaign_gate_loaded(id).await?,
        };
        Ok(held == Some(true))
    }

    /// Mode B: the orders `unit`'s gate granted that may not be in Postgres yet, the
    /// [`PENDING_STEP`](crate::gate::PENDING_STEP) oldest as (code, orderId) and how many there are in all (None: mode A,
    /// or the gate did not answer, and the view shows what Postgres holds). Read before
    /// Postgres is, so that an order granted before this read is either still pending here or
    /// already in Postgres' later snapshot: counted once (see [`Reservations::voucher`]).
    pub(super) async fn pending(&self, unit: Unit<'_>) -> Option<Pending> {
        self.events.as_ref()?;
        match self.gate.pending(unit).await {
            Ok((oldest, all)) => Some(Pending {
                orders: oldest
                    .iter()
                    .filter_map(|(field, _)| unit.split(field))
                    .map(|(code, order)| (code.to_owned(), order.to_owned()))
                    .collect(),
                campaign: unit.campaign().is_some(),
                all,
            }),
            Err(e) => {
                tracing::warn!(code = %unit, error = %Chain(&e), "uses in flight not counted in the view");
                None
            }
        }
    }

    /// A release went through Postgres: a flash voucher's use goes back to its gate (a flash
    /// campaign's code's, `campaign`, to its campaign's).
    pub(super) async fn released(
        &self,
        code: &VoucherCode,
        campaign: Option<i64>,
        order_id: &OrderId,
        merged: &Merged,
    ) {
        let flash = merged.flash_sale || campaign.is_some();
        if !(flash && merged.outcome == MergeOutcome::Applied) {
            return;
        }
        // A use came back: this process stops answering OUT_OF_STOCK from memory.
        self.sold_out.clear(code);
        let customer = merged.row.as_ref().map(|r| r.customer_id);
        let order = order_id.as_str();
        if let Err(e) = self
            .gate
            .remove(Place::of(code, campaign), order, Removal::Release, customer)
            .await
        {
            // Postgres released it; the gate keeps the use until the reconciler returns it.
            tracing::warn!(code = code.as_str(), order_id = order, error = %Chain(&e), "gate release failed");
        }
    }
}
