//! Loading a flash-sale voucher into the gate from Postgres: before its sale (at creation, by
//! the sweeper or an operator) or lazily on its first reserve. One caller loads, under a
//! `SET NX` lock whose token is checked when it is released; the others wait for it briefly.
//!
//! The gate is loaded with `total_limit` less the uses Postgres holds, never `total_limit`, and in mode B never
//! while events of the voucher (or campaign) may be in flight: Postgres does not count them yet, so their uses
//! would be handed out twice.
//!
//! # Files
//!
//! Here the load: the lock, the wait for events in flight, writing the gate. `repair`: a gate
//! that Redis may have lost data of since its load, repaired from Postgres; `snapshot`: what a
//! gate is written from, read from Postgres in one snapshot.

mod repair;
mod snapshot;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::Parts;
use crate::domain::VoucherCode;
use crate::events::Transport;
use crate::gate::{Gate, Unit};
use crate::reservations::error::WarmupError;
use crate::store::Store;

use snapshot::{fenced_is_busy, Snapshot};

/// How long a caller waits for another process to finish loading a voucher into the gate.
const LOAD_WAIT: Duration = Duration::from_secs(2);
/// The loading lock expires by itself if its holder dies.
pub(super) const LOAD_LOCK_TTL: Duration = Duration::from_secs(5);
/// Mode A: how long after a failover was first noticed a gate is repaired. A grant it lost is
/// then in Postgres, or its request has given up (Postgres refuses a use past the limit in any
/// case: this only keeps the gate from being one short or long for a moment).
pub(super) const MODE_A_GRACE: Duration = Duration::from_secs(1);

/// What a warm-up found or did.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Warmed {
    #[schema(value_type = crate::domain::schema::StoredCode)]
    pub code: String,
    /// True when this call loaded the voucher; false when it was loaded already.
    pub loaded_now: bool,
    /// Uses left in the gate right after (null only if the gate lost the voucher in between).
    #[schema(required = true)]
    pub remaining: Option<i64>,
}

#[derive(Clone)]
pub struct Warmup {
    store: Store,
    gate: Arc<Gate>,
    events: Option<Arc<dyn Transport>>,
    /// Sales starting within this lead are loaded ahead.
    lead: Duration,
    /// A sale this long past its end is retired from the gate by the sweeper, and never loaded.
    retire_after: Duration,
}

impl Warmup {
    pub(super) fn new(parts: Parts, lead: Duration, retire_after: Duration) -> Warmup {
        Warmup {
            store: parts.store,
            gate: parts.gate,
            events: parts.events,
            lead,
            retire_after,
        }
    }

    /// A sale that ended the retirement delay ago is the sweeper's to retire: never loaded,
    /// marked or not. The sweeper removes the keys first and the mark after; a reserve that
    /// comes in between is answered by Postgres instead of loading the gate again behind the
    /// sweeper's back (its keys would then outlive the mark, and no sweep would visit them).
    fn retired(&self, ends_at: DateTime<Utc>) -> bool {
        ends_at + chrono::Duration::from_std(self.retire_after).unwrap_or_default() <= Utc::now()
    }

    pub fn lead(&self) -> Duration {
        self.lead
    }

    /// A sale starting at `starts_at` is loaded ahead at `now`.
    pub fn is_due(&self, starts_at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        starts_at - now <= chrono::Duration::from_std(self.lead).unwrap_or_default()
    }

    /// Loads the voucher unless it is loaded. The one caller holding the gate lock loads; the
    /// others wait for the voucher to appear, or for the lock to be let go (a change of the
    /// voucher holds it too, and loads nothing) to try again, up to `LOAD_WAIT`.
    pub async fn warm(&self, code: &VoucherCode) -> Result<Warmed, WarmupError> {
        let loaded_now = self.warm_unit(Unit::Voucher(code)).await?;
        Ok(Warmed {
            code: code.as_str().to_owned(),
            loaded_now,
            remaining: self.gate.remaining(code).await?,
        })
    }

    /// Loads a flash-sale campaign's gate, shared by all its codes, unless it is loaded, as
    /// [`Warmup::warm`] loads a voucher (docs/ARCHITECTURE.md, "Campaigns in the gate"). True
    /// when this call loaded it.
    pub async fn warm_campaign(&self, id: i64) -> Result<bool, WarmupError> {
        self.warm_unit(Unit::Campaign(id)).await
    }

    async fn warm_unit(&self, unit: Unit<'_>) -> Result<bool, WarmupError> {
        let deadline = Instant::now() + LOAD_WAIT;
        while !self.gate.is_loaded(unit).await? {
            // Unique per call, so that only this call's lock is ever released by it.
            let token = uuid::Uuid::new_v4().to_string();
            if self
                .gate
                .try_lock_loading(unit, &token, LOAD_LOCK_TTL)
                .await?
            {
                let result = match unit {
                    Unit::Voucher(code) => self.load(code, &token).await,
                    Unit::Campaign(id) => self.load_campaign(id, &token).await,
                };
                if let Err(e) = self.gate.unlock_loading(unit, &token).await {
                    // The lock expires by itself within its TTL.
                    tracing::warn!(code = %unit, error = %crate::telemetry::Chain(&e), "loading lock not released");
                }
                return result;
            }
            if Instant::now() > deadline {
                return Err(WarmupError::Busy);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(false)
    }

    /// Mode B, a gate held before and lost: loading must wait while one of its grants may still
    /// be on its way (its events share one key: a campaign's codes' too). Postgres does not count
    /// those uses yet, and the gate's own count of them went with its data, so the transport's
    /// count stands in (the key's partition's lag, the queue's depth), once at least one send
    /// timeout has passed since the loss was first noticed (a grant made just before it may
    /// still be in its send).
    async fn wait_for_lost_grants(&self, unit: Unit<'_>) -> Result<(), WarmupError> {
        let Some(events) = &self.events else {
            return Ok(());
        };
        if self.gate.lost_for(unit).await? < events.in_flight_settles()
            || events.in_flight(&unit.name()).await? > 0
        {
            return Err(WarmupError::EventsInFlight);
        }
        Ok(())
    }

    /// Under the lock, as [`Warmup::load`]: the campaign's rules, counters and customers, and
    /// the uses each code holds, read in one snapshot and written in one script. A sale that
    /// has ended is not loaded into a gate that does not hold it. In mode B, a campaign the
    /// gate held and lost waits for its events in flight, as a voucher does.
    async fn load_campaign(&self, id: i64, token: &str) -> Result<bool, WarmupError> {
        // The cheap checks first, without the walk of the codes.
        let state = self
            .store
            .campaign_gate_source(id, false)
            .await?
            .ok_or(WarmupError::NotFound)?;
        if !state.flash_sale {
            return Err(WarmupError::NotFlashSale);
        }
        if self.retired(state.ends_at) {
            return Ok(false);
        }
        if state.gate_loaded {
            self.wait_for_lost_grants(Unit::Campaign(id)).await?;
        }
        if !state.gate_loaded {
            if state.ends_at <= Utc::now() {
                return Ok(false);
            }
            self.store.mark_campaign_gate_loaded(id).await?;
        }
        // What is loaded is read in one snapshot of its own, after the mark.
        let unit = Unit::Campaign(id);
        let snap = self.snapshot(unit).await?;
        let loaded = self.gate.load(unit, token, &snap.meta, snap.counts());
        let loaded = fenced_is_busy(unit, loaded.await?)?;
        if loaded {
            tracing::info!(
                campaign = id,
                remaining = snap.remaining,
                "campaign loaded into the gate"
            );
        }
        Ok(loaded)
    }

    /// Under the lock: a waiter never asks the queue, only the one about to load does.
    ///
    /// Mode B: a voucher the gate never held (or retired) has no event on the way, and loads at
    /// once, whatever other vouchers' sales are sending. One the gate held before and lost
    /// (Redis lost its data) may, and waits ([`Warmup::wait_for_lost_grants`]).
    ///
    /// A sale that has ended is not loaded into a gate that does not hold it: Postgres answers
    /// for it (false, nothing loaded). The mark is written before the load, so a load that dies
    /// half-way still leaves its voucher marked.
    async fn load(&self, code: &VoucherCode, token: &str) -> Result<bool, WarmupError> {
        let held_before = self
            .store
            .gate_loaded(code)
            .await?
            .ok_or(WarmupError::NotFound)?;
        if held_before {
            self.wait_for_lost_grants(Unit::Voucher(code)).await?;
        }
        let source = self
            .store
            .gate_source(code, true)
            .await?
            .ok_or(WarmupError::NotFound)?;
        if !source.flash_sale {
            return Err(WarmupError::NotFlashSale);
        }
        if self.retired(source.rules.ends_at) {
            return Ok(false);
        }
        if !held_before {
            if source.rules.ends_at <= Utc::now() {
                return Ok(false);
            }
            self.store.mark_gate_loaded(code).await?;
        }
        let snap = Snapshot::voucher(source);
        let loaded = self
            .gate
            .load(code, token, &snap.meta, snap.counts())
            .await?;
        let loaded = fenced_is_busy(Unit::Voucher(code), loaded)?;
        if loaded {
            tracing::info!(
                code = code.as_str(),
                remaining = snap.remaining,
                "voucher loaded into the gate"
            );
        }
        Ok(loaded)
    }
}
