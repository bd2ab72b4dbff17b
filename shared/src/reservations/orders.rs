//! Orders of several codes, all or none (docs/ARCHITECTURE.md, "Orders of several codes").
//!
//! The order's row is written PENDING first; then each code is reserved as a single reserve
//! would be (`Reservations::reserve`, with the order's orderId: the gate for a flash code, group
//! commit for a standard one, mode A or B), one after another in the [`stacking`] order, each on
//! the amount the codes before it left. All held: the row becomes RESERVED, and the 201 is
//! built from it. A code refuses: the codes already held are released before the answer, and the
//! row becomes REFUSED with the refusal, which a retry gets again. A code fails (503): the order
//! stays PENDING with what it holds and its request lets go of it; a retry of the same request
//! takes it up where it stopped (each code's reserve is a replay for what it holds). One request
//! decides a pending order at a time (`decider`): a retry meanwhile is answered 503. The sweeper
//! gives back what an order still pending after `ORDER_LEASE_SECONDS` holds (a crash between two
//! codes). Confirm, release and
//! expiry move the row first, in one statement, then every code.

use chrono::Utc;

use super::error::{ConfirmError, OrderError, ReleaseError, ReserveError};
use super::Reservations;
use crate::domain::{
    self, stacking, NewOrder, OrderId, OrderItem, OrderView, Reservation, Reserve, ReserveOutcome,
    Status, VoucherCode,
};
use crate::store::{OrderState, StoredOrder};

impl Reservations {
    pub async fn reserve_order(&self, o: &NewOrder) -> Result<OrderView, OrderError> {
        // What can be refused before anything is written: an unknown code, an exclusive one.
        for code in &o.codes {
            let kind = self
                .kind(code)
                .await
                .map_err(|e| OrderError::reserve(code, e.into()))?;
            match kind {
                None => return Err(OrderError::reserve(code, ReserveError::VoucherNotFound)),
                Some(k) if k.exclusive && o.codes.len() > 1 => {
                    return Err(OrderError::NotCombinable(code.as_str().to_owned()))
                }
                Some(_) => {}
            }
        }
        let now = domain::millis(Utc::now());
        // One request decides a pending order at a time: two at once would each give back what
        // the other was granted (the model found it: `model/src/orders.rs`).
        let decider = uuid::Uuid::new_v4().as_u64_pair().0 as i64;
        let decides = match self.store.begin_order(o, decider, now).await? {
            None => true,
            Some(stored) if !stored.is(o) => return Err(OrderError::Conflict),
            // A retry of an order whose decider failed and let go takes it up: what it holds
            // answers as replays. One being decided now, or stranded by a crash (the sweeper
            // releases it after the lease), is not decided beside it.
            Some(stored) if stored.state == OrderState::Pending => {
                self.store.take_up_order(&o.order_id, decider).await?
            }
            Some(stored) => return answer_of(o, &stored),
        };
        if !decides {
            return Err(OrderError::Pending);
        }
        self.decide(o, decider).await
    }

    /// Reserves the pending order's codes, then settles it.
    async fn decide(&self, o: &NewOrder, decider: i64) -> Result<OrderView, OrderError> {
        let percent = self
            .store
            .percent_discounts(&o.codes)
            .await?
            .ok_or(OrderError::NotFound)?;
        let mut left = o.order_amount;
        let mut held: Vec<(usize, Reservation)> = Vec::with_capacity(o.codes.len());
        for i in stacking(&percent) {
            let code = &o.codes[i];
            let reserve = Reserve {
                code: code.clone(),
                order_id: o.order_id.clone(),
                customer_id: o.customer_id,
                order_amount: left,
            };
            match self.reserve(&reserve).await {
                Ok(r) => {
                    left -= r.discount_amount;
                    held.push((i, r));
                }
                Err(error) => return self.refused(o, decider, code, error, &held).await,
            }
        }
        let mut discounts = vec![0; o.codes.len()];
        for (i, r) in &held {
            discounts[*i] = r.discount_amount;
        }
        let expires_at = held
            .iter()
            .map(|(_, r)| r.expires_at)
            .min()
            .expect("an order has a code");
        let now = domain::millis(Utc::now());
        if self
            .store
            .settle_order_reserved(&o.order_id, decider, &discounts, expires_at, now)
            .await?
        {
            let codes = o.codes.iter().map(VoucherCode::as_str);
            return Ok(view(
                &o.order_id,
                o.customer_id,
                codes,
                &discounts,
                Status::Reserved,
                expires_at,
            ));
        }
        // Settled meanwhile: by a twin request (the same answer), or released by a DELETE or
        // the sweeper, whose uses this request may have taken after they looked.
        let stored = self
            .store
            .order(&o.order_id)
            .await?
            .ok_or(OrderError::NotFound)?;
        if stored.state == OrderState::Released {
            self.release_codes(&o.order_id, &held_codes(o, &held))
                .await?;
        }
        answer_of(o, &stored)
    }

    /// A code did not give its use: a refusal gives back what the order holds (`held`, the codes
    /// before it) before it is answered; a failure leaves the order pending for a retry (or the
    /// sweeper). Only what this order was given is released: a code refused with
    /// ORDER_CONFLICT holds the orderId for another customer, whose use is not the order's.
    async fn refused(
        &self,
        o: &NewOrder,
        decider: i64,
        code: &VoucherCode,
        error: ReserveError,
        held: &[(usize, Reservation)],
    ) -> Result<OrderView, OrderError> {
        let Some(outcome) = error.outcome() else {
            // Let go, for the client's retry to take it up; if even that fails, the order is
            // the sweeper's after the lease.
            if let Err(e) = self.store.let_go_of_order(&o.order_id, decider).await {
                tracing::warn!(error = %crate::telemetry::Chain(&e), "an order's decider could not let go");
            }
            return Err(OrderError::reserve(code, error));
        };
        self.release_codes(&o.order_id, &held_codes(o, held))
            .await?;
        let now = domain::millis(Utc::now());
        if self
            .store
            .settle_order_refused(&o.order_id, decider, outcome.as_str(), code.as_str(), now)
            .await?
        {
            return Err(OrderError::reserve(code, error));
        }
        let stored = self
            .store
            .order(&o.order_id)
            .await?
            .ok_or(OrderError::NotFound)?;
        answer_of(o, &stored)
    }

    /// Releases each code's use of the order, those it holds; a code it never held is skipped.
    async fn release_codes(
        &self,
        order_id: &OrderId,
        codes: &[VoucherCode],
    ) -> Result<(), OrderError> {
        for code in codes {
            match self.release(code, order_id).await {
                Ok(()) | Err(ReleaseError::NotFound) => {}
                Err(error) => {
                    return Err(OrderError::Release {
                        code: code.as_str().to_owned(),
                        error,
                    })
                }
            }
        }
        Ok(())
    }

    pub async fn order(&self, id: &OrderId) -> Result<OrderView, OrderError> {
        let stored = self.store.order(id).await?.ok_or(OrderError::NotFound)?;
        let status = match stored.state {
            OrderState::Pending => return Err(OrderError::Pending),
            OrderState::Refused => return Err(OrderError::NotFound),
            OrderState::Reserved => Status::Reserved,
            OrderState::Confirmed => Status::Confirmed,
            OrderState::Released => Status::Released,
        };
        stored_view(id, &stored, status).ok_or(OrderError::NotFound)
    }

    /// Confirms every code of a reserved order (idempotent). The order is claimed first: from
    /// then on the sweeper does not expire it, and a confirm that fails midway (503) is finished
    /// by its retry.
    pub async fn confirm_order(&self, id: &OrderId) -> Result<OrderView, OrderError> {
        let now = domain::millis(Utc::now());
        let stored = self
            .store
            .confirm_order(id, now)
            .await?
            .ok_or(OrderError::NotFound)?;
        match stored.state {
            OrderState::Confirmed => {}
            OrderState::Pending => return Err(OrderError::Pending),
            OrderState::Reserved | OrderState::Released | OrderState::Refused => {
                return Err(OrderError::Released)
            }
        }
        let codes = codes_of(&stored)?;
        for code in &codes {
            match self.confirm(code, id).await {
                Ok(_) => {}
                // Its own reservation expired before the order was claimed (its sweep ran
                // first): the order cannot hold every code, so it holds none.
                Err(ConfirmError::Released) => {
                    self.store.release_order(id, now).await?;
                    self.release_codes(id, &codes).await?;
                    return Err(OrderError::Released);
                }
                Err(error) => {
                    return Err(OrderError::Confirm {
                        code: code.as_str().to_owned(),
                        error,
                    })
                }
            }
        }
        stored_view(id, &stored, Status::Confirmed).ok_or(OrderError::NotFound)
    }

    /// Releases every code of the order (idempotent: a released or refused order answers as
    /// done, and a release that failed midway is finished by its retry).
    pub async fn release_order(&self, id: &OrderId) -> Result<(), OrderError> {
        let now = domain::millis(Utc::now());
        let stored = self
            .store
            .release_order(id, now)
            .await?
            .ok_or(OrderError::NotFound)?;
        if stored.state == OrderState::Refused {
            return Ok(());
        }
        self.release_codes(id, &codes_of(&stored)?).await
    }
}

/// The codes an order was given, from the indexes `decide` keeps.
fn held_codes(o: &NewOrder, held: &[(usize, Reservation)]) -> Vec<VoucherCode> {
    held.iter().map(|(i, _)| o.codes[*i].clone()).collect()
}

fn codes_of(stored: &StoredOrder) -> Result<Vec<VoucherCode>, OrderError> {
    stored
        .codes
        .iter()
        .map(|c| VoucherCode::parse(c).map_err(OrderError::Invalid))
        .collect()
}

/// What a retry of an order already settled gets: the first 201's bytes, or its refusal.
fn answer_of(o: &NewOrder, stored: &StoredOrder) -> Result<OrderView, OrderError> {
    match stored.state {
        OrderState::Pending => Err(OrderError::Pending),
        OrderState::Reserved | OrderState::Confirmed => {
            stored_view(&o.order_id, stored, Status::Reserved).ok_or(OrderError::NotFound)
        }
        OrderState::Released => Err(OrderError::Released),
        OrderState::Refused => {
            let (word, code) = stored.refusal.clone().ok_or(OrderError::NotFound)?;
            let error = ReserveOutcome::parse(&word)
                .and_then(ReserveError::refusal)
                .ok_or(OrderError::Released)?;
            Err(OrderError::Reserve { code, error })
        }
    }
}

/// The view of a settled order, from its row; None: it never held its codes.
fn stored_view(id: &OrderId, stored: &StoredOrder, status: Status) -> Option<OrderView> {
    let codes = stored.codes.iter().map(String::as_str);
    Some(view(
        id,
        stored.customer_id,
        codes,
        stored.discounts.as_ref()?,
        status,
        stored.expires_at?,
    ))
}

/// The one way an order's view is built: the 201 and every later read agree byte for byte.
fn view<'c>(
    id: &OrderId,
    customer_id: i64,
    codes: impl Iterator<Item = &'c str>,
    discounts: &[i64],
    status: Status,
    expires_at: chrono::DateTime<Utc>,
) -> OrderView {
    OrderView {
        order_id: id.as_str().to_owned(),
        customer_id,
        status,
        discount_amount: discounts.iter().sum(),
        items: codes
            .zip(discounts)
            .map(|(code, d)| OrderItem {
                code: code.to_owned(),
                discount_amount: *d,
            })
            .collect(),
        expires_at,
    }
}
