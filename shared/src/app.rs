//! The clients a process builds once and every handler borrows, and the operations of the
//! service on top of them: each HTTP route, CLI command and (later) event handler calls one of
//! these, so the local server and every Lambda function run the same code.
//!
//! Standard vouchers are decided by Postgres alone (`Store::reserve`). Flash-sale vouchers are
//! decided by the Redis gate, and the winner is then written to Postgres with the same merge
//! (consistency mode A).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::config::Settings;
use crate::domain::{
    self, Confirmation, NewVoucher, OrderId, ReleaseReason, Reservation, Reserve, Status,
    VoucherCode, VoucherView,
};
use crate::errors::{
    ConfirmError, CreateVoucherError, ReleaseError, ReserveError, StoreError, WarmupError,
};
use crate::events::{Events, ReservedEvent};
use crate::gate::GateError;
use crate::gate::{Gate, GateReply, Held, OrderEntry, Removal};
use crate::store::{Merge, MergeOutcome, Merged, Store, VoucherKind};
use crate::sweeper::{self, SweepError, SweepOptions, SweepReport};

/// How long a caller waits for another process to finish loading a voucher into the gate.
const LOAD_WAIT: Duration = Duration::from_secs(2);
/// The loading lock expires by itself if its holder dies.
const LOAD_LOCK_TTL: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct App {
    pub store: Store,
    pub gate: Arc<Gate>,
    kinds: Arc<RwLock<HashMap<String, VoucherKind>>>,
    sold_out: Arc<Mutex<HashMap<String, Instant>>>,
    sold_out_ttl: Duration,
    warmup_lead: Duration,
    orphan_grace: Duration,
    /// Set: consistency mode B (winners go to the queue, the consumer writes Postgres).
    pub events: Option<Arc<Events>>,
}

/// What a warm-up found or did.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Warmed {
    pub code: String,
    /// True when this call loaded the voucher; false when it was loaded already.
    pub loaded_now: bool,
    /// Uses left in the gate right after.
    pub remaining: Option<i64>,
}

impl App {
    pub fn new(settings: &Settings) -> anyhow::Result<App> {
        Ok(App {
            store: Store::connect(settings)?,
            gate: Arc::new(Gate::new(
                &settings.redis_url,
                settings.redis_cluster,
                settings.redis_timeout,
                &settings.redis_key_prefix,
            )?),
            kinds: Arc::default(),
            sold_out: Arc::default(),
            sold_out_ttl: settings.sold_out_ttl,
            warmup_lead: settings.warmup_lead,
            orphan_grace: settings.orphan_grace,
            events: settings.events_queue_url.as_deref().map(|url| {
                Arc::new(Events::new(
                    url,
                    settings.sqs_endpoint_url.clone(),
                    settings.aws_region.clone(),
                    settings.events_timeout,
                ))
            }),
        })
    }

    /// Creates the database if missing and applies migrations: what `serve` does before it
    /// listens, and what `migrate` does alone.
    /// Answers the migrations it applied (none when the schema was current).
    pub async fn prepare_database(&self) -> Result<Vec<String>, StoreError> {
        self.store.ensure_database().await?;
        self.store.migrate().await
    }

    /// One run of the sweeper (expiry, orphans, reconciliation, warm-up).
    pub async fn sweep(&self) -> Result<SweepReport, SweepError> {
        let options = SweepOptions {
            orphan_grace: self.orphan_grace,
            warmup_lead: self.warmup_lead,
        };
        // Boxed: the sweep's future is deep, and callers nest it in theirs.
        Box::pin(sweeper::sweep(self, options)).await
    }

    /// True when Redis answers PING within the gate's timeout.
    pub async fn redis_up(&self) -> bool {
        self.gate.ping().await
    }

    pub async fn create_voucher(&self, v: &NewVoucher) -> Result<VoucherView, CreateVoucherError> {
        let view = self.store.create_voucher(v).await?;
        let soon = v.starts_at - Utc::now()
            <= chrono::Duration::from_std(self.warmup_lead).unwrap_or_default();
        if v.flash_sale && soon {
            // Best effort: a voucher not loaded now is loaded on first use.
            if let Err(e) = self.warmup(&v.code).await {
                tracing::warn!(code = v.code.as_str(), error = %e, "warm-up at creation failed");
            }
        }
        Ok(view)
    }

    /// Is this voucher decided by the gate, and its per-user limit? Cached for good: neither
    /// changes after creation, so only a process's first request for a code reads Postgres.
    async fn kind(&self, code: &VoucherCode) -> Result<Option<VoucherKind>, StoreError> {
        // A std lock: held for one map access, never across an await.
        if let Some(&kind) = self.kinds.read().unwrap().get(code.as_str()) {
            return Ok(Some(kind));
        }
        let found = self.store.kind(code).await?;
        if let Some(kind) = found {
            self.kinds
                .write()
                .unwrap()
                .insert(code.as_str().to_owned(), kind);
        }
        Ok(found)
    }

    pub async fn reserve(&self, r: &Reserve) -> Result<Reservation, ReserveError> {
        let now = domain::millis(Utc::now());
        match self.kind(&r.code).await? {
            None => Err(ReserveError::VoucherNotFound),
            Some(kind) if !kind.flash_sale => self.store.reserve(r, now).await,
            Some(kind) => self.reserve_flash(r, kind, now).await,
        }
    }

    fn sold_out_recently(&self, code: &VoucherCode) -> bool {
        let map = self.sold_out.lock().unwrap();
        map.get(code.as_str())
            .is_some_and(|until| Instant::now() < *until)
    }

    fn mark_sold_out(&self, code: &VoucherCode) {
        if self.sold_out_ttl.is_zero() {
            return;
        }
        let until = Instant::now() + self.sold_out_ttl;
        self.sold_out
            .lock()
            .unwrap()
            .insert(code.as_str().to_owned(), until);
    }

    async fn reserve_flash(
        &self,
        r: &Reserve,
        kind: VoucherKind,
        now: DateTime<Utc>,
    ) -> Result<Reservation, ReserveError> {
        let order = r.order_id.as_str();
        if self.sold_out_recently(&r.code) {
            return self.answer_sold_out(r, kind).await;
        }
        let now_ms = now.timestamp_millis();
        let ask = || {
            self.gate
                .reserve(&r.code, r.customer_id, order, r.order_amount, now_ms)
        };
        let mut reply = ask().await?;
        if reply == GateReply::NotLoaded {
            self.warmup(&r.code).await?;
            reply = ask().await?;
        }
        match reply {
            GateReply::Reserved(held) => self.settle(r, held, true).await,
            GateReply::Duplicate(held) => self.settle(r, held, false).await,
            GateReply::OrderConflict => Err(ReserveError::OrderConflict),
            GateReply::Released => Err(ReserveError::Released),
            GateReply::NotLoaded => Err(ReserveError::WarmingUp),
            GateReply::NotStarted => Err(ReserveError::NotStarted),
            GateReply::Expired => Err(ReserveError::Expired),
            GateReply::MinOrderAmount => Err(ReserveError::MinOrderAmount),
            GateReply::AlreadyUsed => Err(ReserveError::AlreadyUsed),
            GateReply::OutOfStock => {
                self.mark_sold_out(&r.code);
                Err(ReserveError::OutOfStock)
            }
        }
    }

    /// Sold out a moment ago: answer without the gate's script. Two HGETs in one round trip
    /// still tell a winner's retry apart (it gets its 201 again, not OUT_OF_STOCK) and refuse in
    /// the order the script would (per-user limit before stock), so answers do not depend on
    /// which path took the request.
    async fn answer_sold_out(
        &self,
        r: &Reserve,
        kind: VoucherKind,
    ) -> Result<Reservation, ReserveError> {
        let seen = self
            .gate
            .order_and_uses(&r.code, r.order_id.as_str(), r.customer_id)
            .await;
        match seen {
            Ok((Some(OrderEntry::Active { held, .. }), _)) if held.customer_id == r.customer_id => {
                self.settle(r, held, false).await
            }
            Ok((Some(OrderEntry::Active { .. }), _)) => Err(ReserveError::OrderConflict),
            Ok((Some(OrderEntry::Tombstone(Some(c))), _)) if c != r.customer_id => {
                Err(ReserveError::OrderConflict)
            }
            Ok((Some(OrderEntry::Tombstone(_)), _)) => Err(ReserveError::Released),
            Ok((None, uses)) if uses >= kind.per_user_limit => Err(ReserveError::AlreadyUsed),
            // Redis down as well: the voucher was sold out a moment ago and nothing is written.
            Ok((None, _)) | Err(_) => Err(ReserveError::OutOfStock),
        }
    }

    /// The gate granted (`fresh`) or already held (retry) the use. Mode B: send the event.
    /// Mode A: write the row with the merge and answer from what Postgres stored. When Postgres does not take a use the
    /// gate just granted, the gate is undone so the two agree again.
    async fn settle(
        &self,
        r: &Reserve,
        held: Held,
        fresh: bool,
    ) -> Result<Reservation, ReserveError> {
        if let Some(events) = &self.events {
            // Mode B: Postgres is off the path. The event carries the use to the consumer; if
            // it cannot be sent, the order stays pending in the gate for the sweeper (or the
            // client's retry, answered DUPLICATE, sends it again).
            events.send(&ReservedEvent::new(r, held)).await?;
            return Ok(Reservation {
                order_id: r.order_id.as_str().to_owned(),
                customer_id: held.customer_id,
                discount_amount: held.discount,
                status: Status::Reserved,
                expires_at: DateTime::from_timestamp_millis(held.expires_ms)
                    .ok_or_else(|| StoreError::UnexpectedOutcome("expiry out of range".into()))?,
            });
        }
        let order = r.order_id.as_str();
        let reserved_at = DateTime::from_timestamp_millis(held.reserved_ms);
        let expires_at = DateTime::from_timestamp_millis(held.expires_ms);
        let merge = Merge {
            code: r.code.as_str(),
            order_id: order,
            customer_id: Some(r.customer_id),
            status: Status::Reserved,
            order_amount: Some(r.order_amount),
            discount_amount: Some(held.discount),
            reserved_at,
            expires_at,
            reason: None,
            now: domain::millis(Utc::now()),
            revoke: false,
        };
        let merged = match self.store.merge(&merge).await {
            Ok(m) => m,
            Err(e) => {
                if fresh {
                    self.undo(r, true).await;
                }
                return Err(e.into());
            }
        };
        let row = merged.row.as_ref();
        let result = match merged.outcome {
            MergeOutcome::Applied | MergeOutcome::Unchanged
                if row.is_some_and(|row| row.status.is_active()) =>
            {
                let row = row.expect("checked");
                Ok(Reservation {
                    order_id: order.to_owned(),
                    customer_id: row.customer_id,
                    discount_amount: row.discount_amount,
                    status: Status::Reserved,
                    expires_at: row.expires_at,
                })
            }
            MergeOutcome::Applied | MergeOutcome::Unchanged | MergeOutcome::Revoked => {
                Err(ReserveError::Released)
            }
            MergeOutcome::OrderConflict => Err(ReserveError::OrderConflict),
            MergeOutcome::RefusedAlreadyUsed => Err(ReserveError::AlreadyUsed),
            MergeOutcome::RefusedOutOfStock => Err(ReserveError::OutOfStock),
            MergeOutcome::NotFound => Err(StoreError::UnexpectedOutcome("NOT_FOUND".into()).into()),
        };
        if fresh {
            self.reconcile_fresh(r, held, &merged).await;
        }
        result
    }

    /// After a use the gate just granted was merged: make the gate agree with what Postgres
    /// decided.
    async fn reconcile_fresh(&self, r: &Reserve, held: Held, merged: &Merged) {
        let row = merged.row.as_ref();
        let how = match merged.outcome {
            MergeOutcome::Applied => None,
            MergeOutcome::Unchanged | MergeOutcome::Revoked => match row {
                // A retry of this order, answered DUPLICATE by the gate, wrote the row first:
                // it is this very reservation (same expiry), counted once. Nothing to undo.
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
            MergeOutcome::OrderConflict | MergeOutcome::RefusedAlreadyUsed => {
                Some(Removal::Forget { give_back: true })
            }
            // Postgres is full, so the gate had one use too many: keep it taken.
            MergeOutcome::RefusedOutOfStock => Some(Removal::Forget { give_back: false }),
            MergeOutcome::NotFound => None,
        };
        let order = r.order_id.as_str();
        let result = match how {
            Some(how) => self
                .gate
                .remove(&r.code, order, how, Some(r.customer_id))
                .await
                .map(|_| ()),
            // Postgres has the row: the order is no longer pending. Off the answer's path.
            None => {
                let (gate, code, order) = (self.gate.clone(), r.code.clone(), order.to_owned());
                tokio::spawn(async move {
                    if let Err(e) = gate.settled(&code, &order).await {
                        tracing::warn!(code = code.as_str(), order_id = order, error = %e, "pending not cleared");
                    }
                });
                Ok(())
            }
        };
        if let Err(e) = result {
            // The order stays pending in the gate; the sweeper resolves it.
            tracing::error!(code = r.code.as_str(), order_id = order, error = %e, "gate correction failed");
        }
    }

    async fn undo(&self, r: &Reserve, give_back: bool) {
        let how = Removal::Forget { give_back };
        if let Err(e) = self
            .gate
            .remove(&r.code, r.order_id.as_str(), how, Some(r.customer_id))
            .await
        {
            // The order stays pending in the gate; the sweeper's orphan pass resolves it.
            tracing::error!(code = r.code.as_str(), order_id = r.order_id.as_str(), error = %e, "gate undo failed");
        }
    }

    pub async fn confirm(
        &self,
        code: &VoucherCode,
        order_id: &OrderId,
    ) -> Result<Confirmation, ConfirmError> {
        match self.store.confirm(code, order_id, Utc::now()).await {
            Err(ConfirmError::NotFound) if self.events.is_some() => {
                // Mode B: the reserved event may not have landed yet; the gate knows the order.
                let Some(merged) = self
                    .merge_from_gate(code, order_id, Status::Confirmed)
                    .await?
                else {
                    return Err(ConfirmError::NotFound);
                };
                match merged.row {
                    Some(row) if row.status == Status::Confirmed => Ok(Confirmation {
                        order_id: order_id.as_str().to_owned(),
                        status: row.status,
                        discount_amount: row.discount_amount,
                    }),
                    _ => Err(ConfirmError::Released),
                }
            }
            other => other,
        }
    }

    /// Mode B: writes a reservation that is still on its way to Postgres from what the gate
    /// holds, with `status`; the late event then merges into nothing. None: the gate does not
    /// know the order. A tombstone gives a RELEASED row.
    async fn merge_from_gate(
        &self,
        code: &VoucherCode,
        order_id: &OrderId,
        status: Status,
    ) -> Result<Option<Merged>, MergeFromGateError> {
        let (held, order_amount) = match self.gate.order(code, order_id.as_str()).await? {
            None => return Ok(None),
            Some(OrderEntry::Tombstone(_)) => {
                return Ok(Some(Merged {
                    outcome: MergeOutcome::Unchanged,
                    row: None,
                    flash_sale: true,
                }))
            }
            Some(OrderEntry::Active { held, order_amount }) => (held, order_amount),
        };
        let merged = self
            .store
            .merge(&Merge {
                code: code.as_str(),
                order_id: order_id.as_str(),
                customer_id: Some(held.customer_id),
                status,
                order_amount: Some(order_amount),
                discount_amount: Some(held.discount),
                reserved_at: DateTime::from_timestamp_millis(held.reserved_ms),
                expires_at: DateTime::from_timestamp_millis(held.expires_ms),
                reason: (status == Status::Released).then_some(ReleaseReason::Cancelled),
                now: Utc::now(),
                revoke: false,
            })
            .await?;
        if let Err(e) = self.gate.settled(code, order_id.as_str()).await {
            tracing::warn!(code = code.as_str(), order_id = order_id.as_str(), error = %e, "pending not cleared");
        }
        Ok(Some(merged))
    }

    pub async fn release(
        &self,
        code: &VoucherCode,
        order_id: &OrderId,
    ) -> Result<(), ReleaseError> {
        let merged = match self
            .store
            .release(code, order_id, ReleaseReason::Cancelled, Utc::now())
            .await
        {
            Err(ReleaseError::NotFound) if self.events.is_some() => {
                // Mode B: released before its reserved event landed.
                match self
                    .merge_from_gate(code, order_id, Status::Released)
                    .await?
                {
                    None => return Err(ReleaseError::NotFound),
                    Some(merged) => merged,
                }
            }
            other => other?,
        };
        if merged.flash_sale && merged.outcome == MergeOutcome::Applied {
            // A use came back: this process stops answering OUT_OF_STOCK from memory.
            self.sold_out.lock().unwrap().remove(code.as_str());
            let customer = merged.row.map(|r| r.customer_id);
            if let Err(e) = self
                .gate
                .remove(code, order_id.as_str(), Removal::Release, customer)
                .await
            {
                // Postgres released it; the gate keeps the use until the reconciler returns it.
                tracing::warn!(code = code.as_str(), order_id = order_id.as_str(), error = %e, "gate release failed");
            }
        }
        Ok(())
    }

    /// Loads a flash voucher into the gate from Postgres unless it is loaded: one caller loads
    /// (under a `SET NX` lock), the others wait for it briefly.
    pub async fn warmup(&self, code: &VoucherCode) -> Result<Warmed, WarmupError> {
        let token = format!("{}-{:?}", std::process::id(), Instant::now());
        let mut loaded_now = false;
        let loaded = self.gate.is_loaded(code).await?;
        if let (false, Some(events)) = (loaded, &self.events) {
            // Postgres does not count events still on the queue: loading now would hand out
            // their uses a second time.
            if events.in_flight().await? > 0 {
                return Err(WarmupError::EventsInFlight);
            }
        }
        if loaded {
        } else if self
            .gate
            .try_lock_loading(code, &token, LOAD_LOCK_TTL)
            .await?
        {
            let result = self.load(code).await;
            let _ = self.gate.unlock_loading(code).await;
            loaded_now = result?;
        } else {
            let deadline = Instant::now() + LOAD_WAIT;
            while !self.gate.is_loaded(code).await? {
                if Instant::now() > deadline {
                    return Err(WarmupError::Busy);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(Warmed {
            code: code.as_str().to_owned(),
            loaded_now,
            remaining: self.gate.remaining(code).await?,
        })
    }

    async fn load(&self, code: &VoucherCode) -> Result<bool, WarmupError> {
        match self.kind(code).await? {
            None => return Err(WarmupError::NotFound),
            Some(kind) if !kind.flash_sale => return Err(WarmupError::NotFlashSale),
            Some(_) => {}
        }
        let (meta, remaining, users) = self
            .store
            .gate_source(code)
            .await?
            .ok_or(WarmupError::NotFound)?;
        let loaded = self.gate.load(code, &meta, remaining, &users).await?;
        if loaded {
            tracing::info!(
                code = code.as_str(),
                remaining,
                "voucher loaded into the gate"
            );
        }
        Ok(loaded)
    }
}

/// What can fail while writing a mode-B reservation from the gate.
#[derive(Debug, thiserror::Error)]
enum MergeFromGateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Gate(#[from] GateError),
}

impl From<MergeFromGateError> for ConfirmError {
    fn from(e: MergeFromGateError) -> Self {
        match e {
            MergeFromGateError::Store(e) => ConfirmError::Unavailable(e),
            MergeFromGateError::Gate(e) => ConfirmError::Gate(e),
        }
    }
}

impl From<MergeFromGateError> for ReleaseError {
    fn from(e: MergeFromGateError) -> Self {
        match e {
            MergeFromGateError::Store(e) => ReleaseError::Unavailable(e),
            MergeFromGateError::Gate(e) => ReleaseError::Gate(e),
        }
    }
}
