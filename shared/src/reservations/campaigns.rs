//! Campaigns of unique codes: what the operators' routes call. A campaign's codes are vouchers
//! (reserve, confirm and release with one go through the rest of this service unchanged); the
//! campaign's limits and budget are kept by Postgres with the codes' own (docs/ARCHITECTURE.md,
//! "Campaigns").

use futures::Stream;

use super::Reservations;
use crate::domain::{
    CampaignList, CampaignPatch, CampaignView, CodeItem, CodeList, Invalid, NewCampaign, Page,
};
use crate::gate::{BudgetStep, GateMeta, Patched, Unit};
use crate::reservations::error::{CampaignError, CreateCampaignError};
use crate::store::StoreError;
use crate::store::{
    CampaignCreated, CampaignGateSource, CampaignPatched, DescribeOutcome, Described,
};
use crate::telemetry::Chain;

impl Reservations {
    pub async fn create_campaign(
        &self,
        c: &NewCampaign,
    ) -> Result<CampaignView, CreateCampaignError> {
        let created = self.store.create_campaign(c).await?;
        // Its codes are known here from now on (and so may others be: a refused import tried
        // codes that exist).
        self.known.created_many();
        let view = match created {
            CampaignCreated::Created(view) => *view,
            CampaignCreated::CodeTaken(code) => return Err(CreateCampaignError::CodeExists(code)),
            CampaignCreated::CodesExhausted(n) => {
                return Err(CreateCampaignError::CodesExhausted(n))
            }
        };
        if c.rules.flash_sale && self.warmup.is_due(c.rules.starts_at, chrono::Utc::now()) {
            // Best effort: a campaign not loaded now is loaded on its first reserve.
            if let Err(e) = self.warmup.warm_campaign(view.id).await {
                tracing::warn!(campaign = view.id, error = %Chain(&e), "warm-up at creation failed");
            }
        }
        Ok(view)
    }

    /// The campaign as Postgres has it; in mode B, a flash-sale campaign's uses whose events
    /// are still on their way count too, read as a voucher's are (`Reservations::voucher`).
    pub async fn campaign(&self, id: i64) -> Result<CampaignView, CampaignError> {
        // Before Postgres: a grant made before this read is either still pending here or in
        // Postgres' later snapshot, counted once. A standard campaign's gate holds nothing.
        let pending = self
            .flash
            .pending(Unit::Campaign(id))
            .await
            .unwrap_or_default();
        let (mut view, landed) = self
            .store
            .campaign(id, &pending.orders)
            .await?
            .ok_or(CampaignError::NotFound(id))?;
        if view.flash_sale {
            let in_flight = pending.all.saturating_sub(landed) as i64;
            view.used_count += in_flight;
            view.in_flight_count = in_flight;
        }
        Ok(view)
    }

    pub async fn campaigns(
        &self,
        list: &CampaignList,
    ) -> Result<Page<CampaignView>, CampaignError> {
        Ok(self.store.campaigns(list).await?)
    }

    pub async fn campaign_codes(&self, list: &CodeList) -> Result<Page<CodeItem>, CampaignError> {
        self.store
            .campaign_codes(list)
            .await?
            .ok_or(CampaignError::NotFound(list.campaign))
    }

    /// The whole listing from `list.after` on, read as it is sent (the CSV download).
    pub async fn campaign_codes_stream(
        &self,
        list: &CodeList,
    ) -> Result<impl Stream<Item = Result<CodeItem, StoreError>> + Send + 'static, CampaignError>
    {
        self.store
            .campaign_codes_stream(list)
            .await?
            .ok_or(CampaignError::NotFound(list.campaign))
    }

    /// A standard campaign changes in Postgres alone (`fg_patch_campaign`). A flash-sale
    /// campaign's rules and counters also live in its gate, and change there in the three
    /// steps of a flash voucher's change, under the campaign's gate lock (`patch.rs`): the
    /// gate first takes rules that refuse what the old or the new refuse and gives up what a
    /// lower total or budget takes away (refused when what was granted exceeds it); then
    /// Postgres; then the gate takes the new rules and what a higher total or budget adds.
    pub async fn patch_campaign(
        &self,
        id: i64,
        patch: &CampaignPatch,
    ) -> Result<CampaignView, CampaignError> {
        if !patch.changes_rules() {
            // The name and metadata alone: no gate step, no new version of the rules.
            return match self
                .store
                .describe(Described::Campaign(id), &patch.description)
                .await?
            {
                // What Postgres holds, as every PATCH answers.
                DescribeOutcome::Applied => self
                    .store
                    .campaign(id, &[])
                    .await?
                    .map(|(view, _)| view)
                    .ok_or(CampaignError::NotFound(id)),
                DescribeOutcome::NotFound => Err(CampaignError::NotFound(id)),
                DescribeOutcome::TooManyKeys => Err(super::patch::too_many_keys().into()),
            };
        }
        let state = self.campaign_state(id).await?;
        if !state.flash_sale {
            return patched(id, self.store.patch_campaign(id, patch).await?);
        }
        let unit = Unit::Campaign(id);
        let token = self
            .lock_for_change(unit)
            .await?
            .ok_or(CampaignError::Busy)?;
        let result = self.patch_flash_campaign(id, patch, &token).await;
        self.unlock_after_change(unit, &token).await;
        result
    }

    async fn patch_flash_campaign(
        &self,
        id: i64,
        patch: &CampaignPatch,
        token: &str,
    ) -> Result<CampaignView, CampaignError> {
        // Read under the lock: no other change of this campaign runs now.
        let state = self.campaign_state(id).await?;
        let old = campaign_meta(&state, state.version);
        let mut new = old.clone();
        if let Some(active) = patch.active {
            new.active = active;
        }
        if let Some(starts) = patch.starts_at {
            new.starts_ms = starts.timestamp_millis();
        }
        if let Some(ends) = patch.ends_at {
            new.ends_ms = ends.timestamp_millis();
        }
        if let Some(per_user) = patch.per_user_limit {
            new.per_user = per_user.map_or(i64::MAX, i64::from);
        }
        // Without a total, what the codes' limits allow.
        let all = state.code_count * i64::from(state.per_code_limit);
        let total = |t: Option<i64>| t.unwrap_or(all);
        let delta = match patch.total_limit {
            Some(next) => total(next) - total(state.total_limit),
            None => 0,
        };
        let old_budget = state.budget_amount;
        let (take, give) = match (old_budget, patch.budget_amount.unwrap_or(old_budget)) {
            (None, None) => (BudgetStep::Keep, BudgetStep::Keep),
            (Some(old), Some(new)) => (
                BudgetStep::Add((new - old).min(0)),
                BudgetStep::Add((new - old).max(0)),
            ),
            (Some(_), None) => (BudgetStep::Keep, BudgetStep::Remove),
            (None, Some(_)) => {
                return Err(Invalid::new(
                    "budgetAmount",
                    "a flash-sale campaign created without a budget cannot be given one",
                )
                .into())
            }
        };
        let undo = match take {
            BudgetStep::Add(money) => BudgetStep::Add(-money),
            other => other,
        };
        let unit = Unit::Campaign(id);

        // 1. The gate refuses what either rules refuse, and gives up what a lower total or
        // budget takes.
        let strict = old.stricter(&new);
        match self
            .gate
            .patch(unit, token, delta.min(0), take, Some(&strict))
            .await?
        {
            Patched::Applied | Patched::NotLoaded => {}
            Patched::LimitBelowUsed => {
                return Err(CampaignError::LimitBelowUsed(
                    "the uses granted exceed it".into(),
                ))
            }
            Patched::BudgetBelowUsed => {
                return Err(CampaignError::BudgetBelowUsed(
                    "the discounts granted exceed it".into(),
                ))
            }
            Patched::LockLost => return Err(CampaignError::Busy),
        }

        // 2. Postgres.
        let changed = self.store.patch_campaign(id, patch).await;
        let changed = match changed
            .map_err(CampaignError::from)
            .and_then(|p| patched(id, p))
        {
            Ok(view) => view,
            Err(e) => {
                if !matches!(e, CampaignError::Unavailable(_)) {
                    // Refused, nothing written: the gate goes back to the old rules and counts.
                    self.campaign_gate_step(id, token, -delta.min(0), undo, &old)
                        .await;
                }
                // Whether it committed is unknown otherwise: the gate stays the stricter.
                return Err(e);
            }
        };

        // 3. The gate takes the new rules, at the version Postgres counted, and what a
        // higher total or budget adds.
        new.version = state.version + 1;
        self.campaign_gate_step(id, token, delta.max(0), give, &new)
            .await;
        Ok(changed)
    }

    /// The campaign's rules, counters and version, without its holders.
    async fn campaign_state(&self, id: i64) -> Result<CampaignGateSource, CampaignError> {
        self.store
            .campaign_gate_source(id, false)
            .await?
            .ok_or(CampaignError::NotFound(id))
    }

    /// A gate step after Postgres has decided. A failure leaves the gate stricter than
    /// Postgres; it is logged.
    async fn campaign_gate_step(
        &self,
        id: i64,
        token: &str,
        delta: i64,
        step: BudgetStep,
        meta: &GateMeta,
    ) {
        let unit = Unit::Campaign(id);
        match self.gate.patch(unit, token, delta, step, Some(meta)).await {
            Ok(Patched::Applied | Patched::NotLoaded) => {}
            Ok(other) => tracing::error!(campaign = id, ?other, delta, "gate change not applied"),
            Err(e) => {
                tracing::error!(campaign = id, error = %Chain(&e), delta, "gate change failed")
            }
        }
    }
}

/// A campaign's rules as its gate holds them, at `version` (the campaign's per-user limit in
/// `per_user`; none is one the gate never reaches).
pub fn campaign_meta(source: &CampaignGateSource, version: i64) -> GateMeta {
    GateMeta {
        discount: source.discount,
        min_order: source.min_order_amount,
        starts_ms: source.starts_at.timestamp_millis(),
        ends_ms: source.ends_at.timestamp_millis(),
        per_user: source.per_user_limit.map_or(i64::MAX, i64::from),
        ttl_ms: i64::from(source.reservation_ttl_seconds) * 1000,
        active: source.active,
        version,
    }
}

/// The operation's answer to what Postgres made of a campaign's change.
fn patched(id: i64, outcome: CampaignPatched) -> Result<CampaignView, CampaignError> {
    match outcome {
        CampaignPatched::Patched(view) => Ok(*view),
        CampaignPatched::NotFound => Err(CampaignError::NotFound(id)),
        CampaignPatched::LimitBelowUsed(detail) => Err(CampaignError::LimitBelowUsed(detail)),
        CampaignPatched::BudgetBelowUsed(detail) => Err(CampaignError::BudgetBelowUsed(detail)),
        CampaignPatched::WindowInverted(detail) => {
            Err(Invalid::new("endsAt", format!("must be after startsAt: {detail}")).into())
        }
        CampaignPatched::TooManyKeys => Err(super::patch::too_many_keys().into()),
    }
}
