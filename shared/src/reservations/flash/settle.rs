//! What a use the gate granted becomes: in mode A the row, written by the merge before the
//! answer, and then the gate made to agree with what Postgres decided; in mode B the event.
//! Also a release's use given back to the gate.

use chrono::{DateTime, Utc};

use super::{Flash, Winners};
use crate::domain::{Held, OrderId, Reservation, Reserve, ReserveOutcome, Status, VoucherCode};
use crate::events::ReservedEvent;
use crate::gate::{Place, Removal};
use crate::reservations::error::ReserveError;
use crate::store::StoreError;
use crate::store::{MergeOutcome, Merged};
use crate::telemetry::Chain;

impl Flash {
    /// The gate granted (`fresh`) or already held (a retry) the use under the rules of the
    /// voucher's `rules_version`. Mode B: send the event. Mode A: write the row with the merge
    /// and answer from what Postgres stored.
    pub(super) async fn settle(
        &self,
        r: &Reserve,
        campaign: Option<i64>,
        held: Held,
        rules_version: Option<i64>,
        fresh: bool,
    ) -> Result<Reservation, ReserveError> {
        let order = r.order_id.as_str();
        if let Winners::Events(events) = &self.winners {
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
        if !fresh {
            // A retry (the gate answered REPLAY): Postgres nearly always has its row, and the
            // row answers exactly what merging RESERVED into it would (a merge leaves it
            // unchanged), without a place in group commit's batches, which a sale's winners are
            // waiting for. Only a retry whose row is not there yet (its first write still on
            // its way, or lost) merges it.
            if let Some(row) = self.store.reservation(&r.code, &r.order_id).await? {
                return if row.customer_id != held.customer_id {
                    Err(ReserveError::OrderConflict)
                } else if row.status.is_active() {
                    Ok(held_by_row(
                        order,
                        row.customer_id,
                        row.discount_amount,
                        row.expires_at,
                    ))
                } else {
                    Err(ReserveError::Released)
                };
            }
        }
        let merged = self
            .writes
            .merge_reserved(
                &r.code,
                order,
                held,
                r.order_amount,
                fresh && campaign.is_none(),
            )
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
                Ok(held_by_row(
                    order,
                    row.customer_id,
                    row.discount_amount,
                    row.expires_at,
                ))
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

    /// A release went through Postgres: a flash voucher's use goes back to its gate (a flash
    /// campaign's code's, `campaign`, to its campaign's).
    pub(in crate::reservations) async fn released(
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

/// The 201 of an order whose row Postgres holds active: what a retry is answered with, whether
/// the row was read or merged.
fn held_by_row(
    order: &str,
    customer_id: i64,
    discount_amount: i64,
    expires_at: DateTime<Utc>,
) -> Reservation {
    Reservation {
        order_id: order.to_owned(),
        customer_id,
        discount_amount,
        status: Status::Reserved,
        expires_at,
    }
}
