//! Loading a flash-sale voucher into the gate from Postgres: before its sale (at creation, by
//! the sweeper or an operator) or lazily on its first reserve. One caller loads, under a
//! `SET NX` lock whose token is checked when it is released; the others wait for it briefly.
//!
//! The gate is loaded with `total_limit` less the uses Postgres holds, never `total_limit`, and in mode B never
//! while events of the voucher (or campaign) may be in flight: Postgres does not count them yet, so their uses
//! would be handed out twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::Parts;
use crate::domain::Held;
use crate::domain::VoucherCode;
use crate::errors::WarmupError;
use crate::events::Transport;
use crate::gate::{CodeCounts, Gate, GateMeta, LoadCounts, Loaded, OrderEntry, Place, Unit};
use crate::store::Store;
use crate::store::{CampaignGateSource, GateSource};

/// How long a caller waits for another process to finish loading a voucher into the gate.
const LOAD_WAIT: Duration = Duration::from_secs(2);
/// The loading lock expires by itself if its holder dies.
const LOAD_LOCK_TTL: Duration = Duration::from_secs(5);
/// Mode A: how long after a failover was first noticed a gate is repaired. A grant it lost is
/// then in Postgres, or its request has given up (Postgres refuses a use past the limit in any
/// case: this only keeps the gate from being one short or long for a moment).
const MODE_A_GRACE: Duration = Duration::from_secs(1);

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

impl Warmup {
    /// Rules and counts of `unit` as Postgres holds them, read in one snapshot (a campaign's
    /// with its customers and codes: a walk as long as the campaign has codes).
    async fn snapshot(&self, unit: Unit<'_>) -> Result<Snapshot, WarmupError> {
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

    async fn repair_locked(&self, unit: Unit<'_>, token: &str) -> Result<(), WarmupError> {
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

impl Warmup {
    /// Of the gate's orders `fields`, the uses held in the gate of those whose Postgres row
    /// `pick` keeps (None: no row; Some(released)), as (code, use): one Postgres query, and one
    /// read of each picked order's entry.
    async fn uses_where(
        &self,
        unit: Unit<'_>,
        fields: &[&str],
        pick: impl Fn(Option<bool>) -> bool,
    ) -> Result<Vec<(String, Held)>, WarmupError> {
        let orders: Vec<(&str, &str)> = fields.iter().filter_map(|f| unit.split(f)).collect();
        if orders.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.store.orders_among(&orders).await?;
        let mut found = Vec::new();
        for (code, order) in orders {
            let row = rows
                .iter()
                .find(|(c, o, _)| c == code && o == order)
                .map(|(_, _, released)| *released);
            let Ok(code) = VoucherCode::parse(code) else {
                continue;
            };
            if !pick(row) {
                continue;
            }
            let place = Place::of(&code, unit.campaign());
            if let Some(OrderEntry::Active { held, .. }) = self.gate.order(place, order).await? {
                found.push((code.as_str().to_owned(), held));
            }
        }
        Ok(found)
    }
}

/// What a gate is written from: rules and counts read from Postgres in one snapshot.
struct Snapshot {
    meta: GateMeta,
    remaining: i64,
    budget: Option<i64>,
    users: Vec<(i64, i32)>,
    codes: Option<CodeCounts>,
}

impl Snapshot {
    fn counts(&self) -> LoadCounts<'_> {
        LoadCounts {
            remaining: self.remaining,
            budget: self.budget,
            users: &self.users,
            codes: self.codes.as_ref(),
        }
    }

    fn voucher(source: GateSource) -> Snapshot {
        Snapshot {
            meta: GateMeta::of(
                &source.rules,
                source.reservation_ttl_seconds,
                source.version,
            ),
            remaining: source.remaining,
            budget: source.budget_left,
            users: source.users,
            codes: None,
        }
    }

    fn campaign(source: CampaignGateSource) -> Snapshot {
        let meta = super::campaigns::campaign_meta(&source, source.version);
        let mut uses = source.codes;
        uses.extend(
            source
                .code_customers
                .into_iter()
                .map(|(code, customer, n)| (Place::code_customer_field(&code, customer), n.into())),
        );
        Snapshot {
            meta,
            remaining: source.remaining,
            budget: source.budget_left,
            users: source.users,
            codes: Some(CodeCounts {
                per_code: source.per_code_limit.into(),
                uses,
            }),
        }
    }

    /// Counts the uses `held` (code, use) as the gate holds them and Postgres does not yet: each
    /// takes one use, its customer's, its discount from the budget, and in a campaign's gate
    /// its code's.
    fn hold(&mut self, held: &[(String, Held)]) {
        for (code, use_) in held {
            self.remaining -= 1;
            if let Some(budget) = &mut self.budget {
                *budget -= use_.discount;
            }
            match self.users.iter_mut().find(|(c, _)| *c == use_.customer_id) {
                Some((_, n)) => *n += 1,
                None => self.users.push((use_.customer_id, 1)),
            }
            if let Some(codes) = &mut self.codes {
                for field in [
                    code.clone(),
                    Place::code_customer_field(code, use_.customer_id),
                ] {
                    match codes.uses.iter_mut().find(|(f, _)| *f == field) {
                        Some((_, n)) => *n += 1,
                        None => codes.uses.push((field, 1)),
                    }
                }
            }
        }
    }
}

/// A load the gate refused because the lock is no longer the loader's: it stalled past the
/// lock's TTL and what it read may be older than a change made since. Nothing was written; the
/// caller answers as for a lock held by another (a retry loads afresh).
fn fenced_is_busy(unit: Unit<'_>, loaded: Loaded) -> Result<bool, WarmupError> {
    match loaded {
        Loaded::Now => Ok(true),
        Loaded::Already => Ok(false),
        Loaded::Fenced | Loaded::Moved => {
            tracing::warn!(code = %unit, "a load outlived its gate lock: not written");
            Err(WarmupError::Busy)
        }
    }
}
