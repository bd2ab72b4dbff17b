//! The reservation service: every route, CLI command and Lambda handler that creates, reads,
//! reserves, confirms, releases or warms up calls one method here, so the local server and every
//! Lambda function run the same code.
//!
//! Standard vouchers are decided by Postgres alone: group commit writes each batch of reserves
//! with `fg_reserve_strict` (the loop of `fg_reserve` when it declines). Flash-sale
//! vouchers are decided by the Redis gate (`flash`), the winner then written to Postgres with
//! the merge (mode A) or sent as an event (mode B). `warmup` loads a flash voucher into the
//! gate. See docs/ARCHITECTURE.md, "Standard mode" and "Flash-sale mode".

mod campaigns;
pub mod error;
mod flash;
mod group_commit;
mod known;
mod orders;
mod patch;
mod sold_out;
mod warmup;

use std::sync::Arc;

use chrono::Utc;

use crate::config::ReservationSettings;
use crate::domain::{
    self, Confirmation, Eligibility, NewVoucher, OrderId, Page, Reservation, ReservationItem,
    ReservationList, ReservationView, Reserve, ReserveOutcome, Status, Validate, VoucherCode,
    VoucherList, VoucherView,
};
use crate::events::Transport;
use crate::gate::{Gate, Place, Unit};
use crate::reservations::error::{
    ConfirmError, CreateVoucherError, GetReservationError, GetVoucherError, ListError,
    ReleaseError, ReserveError, ValidateError, WarmupError,
};
use crate::store::StoreError;
use crate::store::{Store, VoucherKind};
use crate::telemetry::metrics::UNKNOWN_CODE_ANSWERS;
pub use campaigns::campaign_meta;
use flash::Flash;
use group_commit::GroupCommit;
use known::{Known, Seen};
pub use warmup::{Warmed, Warmup};

/// The clients the reservation service runs on, built once per process (see `App::new`).
#[derive(Clone)]
pub struct Parts {
    pub store: Store,
    pub gate: Arc<Gate>,
    /// Set in consistency mode B: winners go to the queue or topic, the consumer writes them.
    pub events: Option<Arc<dyn Transport>>,
}

#[derive(Clone)]
pub struct Reservations {
    store: Store,
    gate: Arc<Gate>,
    /// Standard reserves are written through it (in batches, in a long-running process).
    writes: GroupCommit,
    flash: Flash,
    warmup: Warmup,
    /// Codes' kinds, and for a moment the codes that do not exist (`known`).
    known: Known,
}

impl Reservations {
    /// `retire_after`: how long after its sale's end the sweeper retires a gate; the warm-up
    /// never loads a sale that far past its end.
    pub fn new(
        parts: Parts,
        settings: &ReservationSettings,
        retire_after: std::time::Duration,
    ) -> Reservations {
        let warmup = Warmup::new(parts.clone(), settings.warmup_lead, retire_after);
        let writes = GroupCommit::new(
            parts.store.clone(),
            settings.group_commit_max,
            settings.group_commit_writers,
        );
        Reservations {
            flash: Flash::new(
                parts.clone(),
                warmup.clone(),
                writes.clone(),
                settings.sold_out_ttl,
            ),
            writes,
            store: parts.store,
            gate: parts.gate,
            warmup,
            known: Known::new(settings.unknown_code_ttl),
        }
    }

    /// Loading flash vouchers into the gate, as the sweeper does it too.
    pub fn warmup(&self) -> &Warmup {
        &self.warmup
    }

    pub async fn create_voucher(&self, v: &NewVoucher) -> Result<VoucherView, CreateVoucherError> {
        let created = self.store.create_voucher(v).await?;
        // Known here from now on, whoever created it.
        self.known.created(&v.code);
        let view = created.ok_or_else(|| CreateVoucherError::Exists(v.code.as_str().to_owned()))?;
        if v.flash_sale && self.warmup.is_due(v.rules.starts_at, Utc::now()) {
            // Best effort: a voucher not loaded now is loaded on first use.
            if let Err(e) = self.warmup.warm(&v.code).await {
                tracing::warn!(code = v.code.as_str(), error = %crate::telemetry::Chain(&e), "warm-up at creation failed");
            }
        }
        Ok(view)
    }

    /// The voucher as Postgres has it; in mode B, a flash voucher's uses whose events are still
    /// on their way count too (as reserved), so the view agrees with the 201s given.
    pub async fn voucher(&self, code: &VoucherCode) -> Result<VoucherView, GetVoucherError> {
        let pending = match self.kind_fresh(code).await? {
            Some(kind) if kind.flash_sale => {
                let place = Place::of(code, kind.flash_campaign());
                self.flash.pending(place.unit).await
            }
            _ => None,
        };
        let (ids, all) = pending.map(|p| p.of_code(code)).unwrap_or_default();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let (mut view, landed) = self
            .store
            .voucher_and_landed(code, &ids)
            .await?
            .ok_or_else(|| GetVoucherError::NotFound(code.as_str().to_owned()))?;
        if view.flash_sale {
            // Past the oldest read, the younger pending orders count as in flight.
            let in_flight = all.saturating_sub(landed) as i64;
            view.used_count += in_flight;
            view.reserved_count += in_flight;
            view.remaining -= in_flight;
            view.in_flight_count = in_flight;
        }
        Ok(view)
    }

    /// A reservation as Postgres has it; in mode B, one whose event has not landed yet as the
    /// gate holds it (what the 201 said), so a client reads back what it just reserved. An
    /// order neither knows is 404 at once, unless the gate lost data and events are still on
    /// their way (503, see `Flash::never_granted`).
    pub async fn reservation(
        &self,
        code: &VoucherCode,
        order_id: &OrderId,
    ) -> Result<ReservationView, GetReservationError> {
        if let Some(view) = self.store.reservation(code, order_id).await? {
            return Ok(view);
        }
        if !self.flash.mode_b() {
            return Err(GetReservationError::NotFound);
        }
        let campaign = self
            .kind_fresh(code)
            .await?
            .and_then(|k| k.flash_campaign());
        match self.flash.held_in_gate(code, campaign, order_id).await? {
            Some(held) => Ok(held),
            // Not held: the event may have landed while we looked at the gate.
            None => self
                .store
                .reservation(code, order_id)
                .await?
                .ok_or(GetReservationError::NotFound),
        }
    }

    /// A page of vouchers, in code order.
    pub async fn vouchers(&self, list: &VoucherList) -> Result<Page<VoucherView>, ListError> {
        Ok(self.store.vouchers(list).await?)
    }

    /// A page of a voucher's reservations, in orderId order.
    pub async fn reservations(
        &self,
        list: &ReservationList,
    ) -> Result<Page<ReservationItem>, ListError> {
        self.store
            .reservations(list)
            .await?
            .ok_or(ListError::VoucherNotFound)
    }

    /// Would this customer's order get the voucher now, and with what discount? Decided as a
    /// reserve would be (by the gate for a flash voucher, by Postgres otherwise), writing
    /// nothing anywhere. A flash voucher not in the gate yet is answered from Postgres rather
    /// than loaded.
    pub async fn validate(&self, v: &Validate) -> Result<Eligibility, ValidateError> {
        let now = domain::millis(Utc::now());
        let (outcome, discount) = match self.kind(&v.code).await? {
            None => return Err(ReserveError::VoucherNotFound),
            Some(kind) if kind.flash_sale => {
                let at_gate = self
                    .gate
                    .validate(
                        Place::of(&v.code, kind.flash_campaign()),
                        v.customer_id,
                        v.order_amount,
                        now.timestamp_millis(),
                    )
                    .await?;
                match at_gate {
                    (ReserveOutcome::NotLoaded, _) => self.store.validate(v, now).await?,
                    answer => answer,
                }
            }
            Some(_) => self.store.validate(v, now).await?,
        };
        if outcome != ReserveOutcome::Eligible {
            return Err(ReserveError::refused(outcome));
        }
        Ok(Eligibility {
            eligible: true,
            discount_amount: discount,
        })
    }

    /// Is this voucher decided by the gate? Cached for good (it never changes).
    /// The code's kind, for a reserve or validation: a code found unknown a moment ago is
    /// answered from memory (`known`).
    async fn kind(&self, code: &VoucherCode) -> Result<Option<VoucherKind>, StoreError> {
        self.kind_as(code, true).await
    }

    /// The code's kind, for an operation on an order or a read: "unknown" is asked again.
    async fn kind_fresh(&self, code: &VoucherCode) -> Result<Option<VoucherKind>, StoreError> {
        self.kind_as(code, false).await
    }

    async fn kind_as(
        &self,
        code: &VoucherCode,
        trust_unknown: bool,
    ) -> Result<Option<VoucherKind>, StoreError> {
        let epoch = match self.known.seen(code, trust_unknown) {
            Seen::Kind(kind) => return Ok(Some(kind)),
            Seen::Unknown => {
                metrics::counter!(UNKNOWN_CODE_ANSWERS).increment(1);
                return Ok(None);
            }
            Seen::Ask { epoch } => epoch,
        };
        let found = self.store.kind(code).await?;
        self.known.learn(code, epoch, found);
        Ok(found)
    }

    pub async fn reserve(&self, r: &Reserve) -> Result<Reservation, ReserveError> {
        let now = domain::millis(Utc::now());
        match self.kind(&r.code).await? {
            None => Err(ReserveError::VoucherNotFound),
            Some(kind) if !kind.flash_sale => self.writes.reserve(r, now).await,
            Some(kind) => self.flash.reserve(r, kind.flash_campaign(), now).await,
        }
    }

    pub async fn confirm(
        &self,
        code: &VoucherCode,
        order_id: &OrderId,
    ) -> Result<Confirmation, ConfirmError> {
        let row = match self.store.confirm(code, order_id).await? {
            Some(row) => row,
            // Mode B: the reserved event may not have landed yet; the gate knows the order.
            None => match self
                .flash
                .merge_from_gate(
                    code,
                    self.kind_fresh(code)
                        .await?
                        .and_then(|k| k.flash_campaign()),
                    order_id,
                    Status::Confirmed,
                )
                .await?
            {
                Some(merged) => merged.row.ok_or(ConfirmError::Released)?,
                // Mode B, unknown to the gate, nothing in flight: one last look in Postgres, for
                // an event that landed while we looked elsewhere (the chaos run met that race).
                None if self.flash.mode_b() => self
                    .store
                    .confirm(code, order_id)
                    .await?
                    .ok_or(ConfirmError::NotFound)?,
                None => return Err(ConfirmError::NotFound),
            },
        };
        if row.status != Status::Confirmed {
            return Err(ConfirmError::Released);
        }
        Ok(Confirmation {
            order_id: order_id.as_str().to_owned(),
            status: row.status,
            discount_amount: row.discount_amount,
        })
    }

    pub async fn release(
        &self,
        code: &VoucherCode,
        order_id: &OrderId,
    ) -> Result<(), ReleaseError> {
        // Read before anything is written (it is cached): a release Postgres took must not
        // answer an error for want of it.
        let campaign = self
            .kind_fresh(code)
            .await?
            .and_then(|k| k.flash_campaign());
        let merged = match self.store.release(code, order_id).await? {
            Some(merged) => merged,
            // Mode B: released before its reserved event landed.
            None => match self
                .flash
                .merge_from_gate(code, campaign, order_id, Status::Released)
                .await?
            {
                Some(merged) => merged,
                // As for confirm: the event may have landed meanwhile.
                None if self.flash.mode_b() => self
                    .store
                    .release(code, order_id)
                    .await?
                    .ok_or(ReleaseError::NotFound)?,
                None => return Err(ReleaseError::NotFound),
            },
        };
        self.flash.released(code, campaign, order_id, &merged).await;
        Ok(())
    }

    /// Loads a flash voucher into the gate unless it is loaded (see [`Warmup::warm`]); a flash
    /// campaign's code loads its campaign's gate, shared by all its codes.
    pub async fn warm(&self, code: &VoucherCode) -> Result<Warmed, WarmupError> {
        let Some(id) = self
            .kind_fresh(code)
            .await?
            .and_then(|k| k.flash_campaign())
        else {
            return self.warmup.warm(code).await;
        };
        let loaded_now = self.warmup.warm_campaign(id).await?;
        Ok(Warmed {
            code: code.as_str().to_owned(),
            loaded_now,
            remaining: self.gate.remaining(Unit::Campaign(id)).await?,
        })
    }
}
