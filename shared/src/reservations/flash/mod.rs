//! The gate path of a flash-sale voucher. When Postgres does not take a use the gate just
//! granted, the gate is corrected so the two agree again.
//!
//! # Files
//!
//! Here the sold-out short cut, which answers from memory. `decide`: the gate's decision, with
//! the loading it may need first; `settle`: what a granted use becomes (mode A's row, or mode
//! B's event) and how the gate is corrected after Postgres' answer; `mode_b`: reading and
//! settling the uses that are still on their way to Postgres as events.

mod decide;
mod mode_b;
mod settle;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::group_commit::GroupCommit;
use super::sold_out::{Recent, SoldOut};
use super::{Parts, Warmup};
use crate::domain::{Reservation, Reserve, VoucherCode};
use crate::events::Transport;
use crate::gate::Gate;
use crate::reservations::error::ReserveError;
use crate::store::Store;

/// Where a use the gate granted is settled: the consistency mode's one difference on this path.
#[derive(Clone)]
enum Winners {
    /// Mode A: the row is written in Postgres (through group commit) before the answer.
    Postgres,
    /// Mode B: Postgres is off the path; the use travels as an event to the consumer.
    Events(Arc<dyn Transport>),
}

#[derive(Clone)]
pub(super) struct Flash {
    store: Store,
    gate: Arc<Gate>,
    /// Where a winner is settled: Postgres (mode A) or the queue (mode B).
    winners: Winners,
    warmup: Warmup,
    sold_out: SoldOut,
    /// Postgres' reserves, in batches in a long-running process: mode A's winners, and in
    /// either mode a reserve of a sale the gate no longer holds.
    writes: GroupCommit,
}

impl Flash {
    pub(in crate::reservations) fn new(
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
            winners: match parts.events {
                Some(events) => Winners::Events(events),
                None => Winners::Postgres,
            },
            warmup,
        }
    }

    /// `campaign`: the flash-sale campaign whose gate decides this code (None: a voucher, in
    /// its own).
    pub(in crate::reservations) async fn reserve(
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

    /// Uses came back by a change of the voucher (a higher limit, a resume): this process stops
    /// answering OUT_OF_STOCK from memory.
    pub(in crate::reservations) fn limit_raised(&self, code: &VoucherCode) {
        self.sold_out.clear(code);
    }

    /// Consistency mode B: winners travel as events.
    pub(in crate::reservations) fn mode_b(&self) -> bool {
        matches!(self.winners, Winners::Events(_))
    }
}
