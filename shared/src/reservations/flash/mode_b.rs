//! Mode B: the uses the gate granted whose events have not landed yet. A confirm or release
//! writes such a use from what the gate holds; a read shows it; an order neither Postgres nor
//! the gate knows is told apart from one still on its way.

use chrono::DateTime;

use super::{Flash, Winners};
use crate::domain::{OrderId, ReservationView, Status, VoucherCode};
use crate::gate::{OrderEntry, Place, Trust, Unit};
use crate::reservations::error::{FromGateError, WarmupError};
use crate::store::StoreError;
use crate::store::{Merge, MergeOutcome, Merged};
use crate::telemetry::Chain;

/// What a gate holds in flight ([`Flash::pending`]).
#[derive(Debug, Default)]
pub(in crate::reservations) struct Pending {
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
    pub(in crate::reservations) fn of_code(self, code: &VoucherCode) -> (Vec<String>, usize) {
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

impl Flash {
    /// Mode B: writes a reservation that is still on its way to Postgres from what the gate
    /// holds (`campaign`'s gate for a flash-sale campaign's code), with `status`; the late event
    /// then merges into nothing. None: mode A, or no such order (see
    /// [`Flash::never_granted`]). A tombstone gives a merge without a row (released).
    pub(in crate::reservations) async fn merge_from_gate(
        &self,
        code: &VoucherCode,
        campaign: Option<i64>,
        order_id: &OrderId,
        status: Status,
    ) -> Result<Option<Merged>, FromGateError> {
        if let Winners::Postgres = self.winners {
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
    pub(in crate::reservations) async fn held_in_gate(
        &self,
        code: &VoucherCode,
        campaign: Option<i64>,
        order_id: &OrderId,
    ) -> Result<Option<ReservationView>, FromGateError> {
        if let Winners::Postgres = self.winners {
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
        let Winners::Events(events) = &self.winners else {
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
    pub(in crate::reservations) async fn pending(&self, unit: Unit<'_>) -> Option<Pending> {
        if let Winners::Postgres = self.winners {
            return None;
        }
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
}
