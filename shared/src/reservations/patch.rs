//! Changing a voucher after creation (`PATCH /vouchers/{code}`).
//!
//! A standard voucher changes in Postgres alone, in one call to `fg_patch_voucher`. A flash-sale
//! voucher's rules and uses left also live in the gate, which decides without Postgres; the
//! change goes in three steps under the voucher's gate lock (the `loading` key, so no loader
//! and no reconciler repair runs in between):
//!
//! 1. the gate takes rules that refuse whatever the old *or* the new rules refuse, and gives up
//!    the uses a lower limit takes away and the money a lower budget takes away (refused when
//!    the uses or discounts granted, in flight ones included, exceed the new limit or budget:
//!    LIMIT_BELOW_USED or BUDGET_BELOW_USED, nothing changed);
//! 2. Postgres takes the new rules, limit and budget (`fg_patch_voucher`);
//! 3. the gate takes the new rules, the uses a higher limit adds and the money a higher budget
//!    adds, or drops a budget that was removed.
//!
//! A flash-sale voucher created without a budget cannot be given one: the gate would have to
//! count the discounts of the uses on their way to Postgres (mode B), which it does not keep
//! apart.
//!
//! So at no moment do the gate and Postgres together grant what either the old or the new
//! rules refuse. A failure after step 1 leaves the gate stricter than Postgres, never looser:
//! a few uses held back, none handed out twice; the sweeper's reconciler copies the rules and
//! repairs the count from Postgres once the lock is gone. See docs/ARCHITECTURE.md, "Changing a
//! voucher".

use std::time::{Duration, Instant};

use super::Reservations;
use crate::domain::{
    flash_budget, Invalid, VoucherCode, VoucherPatch, VoucherView, MAX_METADATA_KEYS,
};
use crate::gate::{BudgetStep, GateError, GateMeta, Patched, Unit};
use crate::reservations::error::PatchVoucherError;
use crate::store::{DescribeOutcome, Described, PatchOutcome, VoucherState};
use crate::telemetry::Chain;

/// The gate lock's life when a change holds it: far beyond the few round trips a change takes,
/// so it expires only if its holder died.
const LOCK_TTL: Duration = Duration::from_secs(10);
/// How long a change waits for a loader or another change to let go of the lock.
const LOCK_WAIT: Duration = Duration::from_secs(2);
/// A standard voucher's change is recomputed when another landed first, this many times.
const ATTEMPTS: usize = 5;

impl Reservations {
    pub async fn patch_voucher(
        &self,
        code: &VoucherCode,
        patch: &VoucherPatch,
    ) -> Result<VoucherView, PatchVoucherError> {
        // The kind never changes (it is cached); the state is read where the change is made. A
        // remembered 404 is not trusted: the code may have been created elsewhere since.
        let kind = self
            .kind_fresh(code)
            .await?
            .ok_or_else(|| PatchVoucherError::NotFound(code.as_str().to_owned()))?;
        if let Some(campaign) = kind.campaign_id {
            return Err(PatchVoucherError::CampaignCode(campaign));
        }
        let flash_sale = kind.flash_sale;
        for _ in 0..ATTEMPTS {
            let done = if flash_sale {
                self.patch_flash(code, patch).await?
            } else {
                self.patch_in_postgres(code, patch).await?
            };
            if done {
                return self
                    .store
                    .voucher(code)
                    .await?
                    .ok_or_else(|| PatchVoucherError::NotFound(code.as_str().to_owned()));
            }
        }
        Err(PatchVoucherError::Busy)
    }

    /// No rule changes: the name and metadata, if the patch has any, are written alone (no
    /// gate step, no new version of the rules).
    async fn describe_only(
        &self,
        code: &VoucherCode,
        patch: &VoucherPatch,
    ) -> Result<bool, PatchVoucherError> {
        match self
            .store
            .describe(Described::Voucher(code), &patch.description)
            .await?
        {
            DescribeOutcome::Applied => Ok(true),
            DescribeOutcome::NotFound => Err(PatchVoucherError::NotFound(code.as_str().to_owned())),
            DescribeOutcome::TooManyKeys => Err(too_many_keys().into()),
        }
    }

    async fn state(&self, code: &VoucherCode) -> Result<VoucherState, PatchVoucherError> {
        self.store
            .voucher_state(code)
            .await?
            .ok_or_else(|| PatchVoucherError::NotFound(code.as_str().to_owned()))
    }

    /// A standard voucher: false when another change landed since its state was read.
    async fn patch_in_postgres(
        &self,
        code: &VoucherCode,
        patch: &VoucherPatch,
    ) -> Result<bool, PatchVoucherError> {
        let state = self.state(code).await?;
        let next = patch.apply(&state.rules)?;
        let slots = patch.slots(state.counter_slots, &next)?;
        if next == state.rules && slots.is_none() {
            return self.describe_only(code, patch).await;
        }
        Ok(written(
            code,
            self.store
                .patch_voucher(code, state.version, &next, slots, &patch.description)
                .await?,
        )?
        .is_some())
    }

    async fn patch_flash(
        &self,
        code: &VoucherCode,
        patch: &VoucherPatch,
    ) -> Result<bool, PatchVoucherError> {
        let unit = Unit::Voucher(code);
        let token = self
            .lock_for_change(unit)
            .await?
            .ok_or(PatchVoucherError::Busy)?;
        let result = self.patch_flash_locked(code, patch, &token).await;
        self.unlock_after_change(unit, &token).await;
        result
    }

    /// Takes a gate's lock for a change (a voucher's or a flash campaign's), waiting up to
    /// `LOCK_WAIT` for a loader or another change to let go: its token, or None when it stayed
    /// taken.
    pub(super) async fn lock_for_change(
        &self,
        unit: Unit<'_>,
    ) -> Result<Option<String>, GateError> {
        // Unique per call, so that only this call's lock is ever released by it.
        let token = uuid::Uuid::new_v4().to_string();
        let deadline = Instant::now() + LOCK_WAIT;
        while !self.gate.try_lock_loading(unit, &token, LOCK_TTL).await? {
            if Instant::now() > deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Some(token))
    }

    /// Lets go of the lock `token` holds; a failure is only logged: it expires by itself
    /// within `LOCK_TTL`.
    pub(super) async fn unlock_after_change(&self, unit: Unit<'_>, token: &str) {
        if let Err(e) = self.gate.unlock_loading(unit, token).await {
            tracing::warn!(code = %unit, error = %Chain(&e), "gate lock not released");
        }
    }

    async fn patch_flash_locked(
        &self,
        code: &VoucherCode,
        patch: &VoucherPatch,
        token: &str,
    ) -> Result<bool, PatchVoucherError> {
        // Read under the lock: no other change of this voucher runs now.
        let state = self.state(code).await?;
        let next = patch.apply(&state.rules)?;
        // The money step: what a lower budget takes before Postgres, what a higher one adds
        // (or a removal does) after.
        let (take, give) = match (state.rules.budget_amount, next.budget_amount) {
            (None, None) => (BudgetStep::Keep, BudgetStep::Keep),
            (Some(old), Some(new)) => (
                BudgetStep::Add((new - old).min(0)),
                BudgetStep::Add((new - old).max(0)),
            ),
            (Some(_), None) => (BudgetStep::Keep, BudgetStep::Remove),
            (None, Some(_)) => return Err(flash_budget().into()),
        };
        let undo = match take {
            BudgetStep::Add(money) => BudgetStep::Add(-money),
            other => other,
        };
        let slots = patch.slots(state.counter_slots, &next)?;
        if next == state.rules && slots.is_none() {
            return self.describe_only(code, patch).await;
        }
        let ttl = state.reservation_ttl_seconds;
        let old = GateMeta::of(&state.rules, ttl, state.version);
        let delta = i64::from(next.total_limit) - i64::from(state.rules.total_limit);

        // 1. The gate refuses what either rules refuse, and gives up what a lower limit takes.
        let strict = old.stricter(&GateMeta::of(&next, ttl, state.version));
        match self
            .gate
            .patch(code, token, delta.min(0), take, Some(&strict))
            .await?
        {
            Patched::Applied | Patched::NotLoaded => {}
            Patched::LimitBelowUsed => {
                return Err(PatchVoucherError::LimitBelowUsed(
                    "the uses granted, those still on their way to the database included, \
                     exceed it"
                        .into(),
                ))
            }
            Patched::BudgetBelowUsed => {
                return Err(PatchVoucherError::BudgetBelowUsed(
                    "the discounts granted, those still on their way to the database \
                     included, exceed it"
                        .into(),
                ))
            }
            Patched::LockLost => return Err(PatchVoucherError::Busy),
        }

        // 2. Postgres.
        let version = match self
            .store
            .patch_voucher(code, state.version, &next, slots, &patch.description)
            .await
        {
            Ok(outcome) => match written(code, outcome) {
                Ok(Some(version)) => version,
                refused => {
                    // Nothing was written: the gate goes back to the old rules, count and money.
                    self.gate_step(code, token, -delta.min(0), undo, &old).await;
                    return refused.map(|_| false);
                }
            },
            // Whether it committed is unknown: the gate stays the stricter of the two, and the
            // reconciler brings it to what Postgres holds once the lock is gone.
            Err(e) => return Err(e.into()),
        };

        // 3. The gate takes the new rules and what a higher limit adds.
        self.gate_step(
            code,
            token,
            delta.max(0),
            give,
            &GateMeta::of(&next, ttl, version),
        )
        .await;
        if delta > 0 || (next.active && !state.rules.active) {
            self.flash.limit_raised(code);
        }
        Ok(true)
    }

    /// A gate step after Postgres has decided. A failure leaves the gate stricter than
    /// Postgres (it is logged; the reconciler repairs it).
    async fn gate_step(
        &self,
        code: &VoucherCode,
        token: &str,
        delta: i64,
        step: BudgetStep,
        meta: &GateMeta,
    ) {
        match self.gate.patch(code, token, delta, step, Some(meta)).await {
            Ok(Patched::Applied | Patched::NotLoaded) => {}
            Ok(other) => {
                tracing::error!(
                    code = code.as_str(),
                    ?other,
                    delta,
                    "gate change not applied"
                )
            }
            Err(e) => {
                tracing::error!(code = code.as_str(), error = %Chain(&e), delta, "gate change failed")
            }
        }
    }
}

/// `fg_patch_voucher`'s outcome: the new version, None when another change landed first, or
/// the refusal.
fn written(code: &VoucherCode, outcome: PatchOutcome) -> Result<Option<i64>, PatchVoucherError> {
    match outcome {
        PatchOutcome::Applied(version) => Ok(Some(version)),
        PatchOutcome::Stale => Ok(None),
        PatchOutcome::NotFound => Err(PatchVoucherError::NotFound(code.as_str().to_owned())),
        PatchOutcome::LimitBelowUsed(detail) => Err(PatchVoucherError::LimitBelowUsed(format!(
            "below the uses held ({detail})"
        ))),
        PatchOutcome::SlotsInUse(detail) => Err(PatchVoucherError::SlotsInUse(format!(
            "fewer slots would remove one that still counts uses ({detail})"
        ))),
        PatchOutcome::BudgetBelowUsed(detail) => Err(PatchVoucherError::BudgetBelowUsed(format!(
            "below the discounts held ({detail})"
        ))),
        PatchOutcome::TooManyKeys => Err(too_many_keys().into()),
    }
}

/// The merge of a PATCH's metadata into what is stored would leave too many keys.
pub(super) fn too_many_keys() -> Invalid {
    Invalid::new(
        "metadata",
        format!("at most {MAX_METADATA_KEYS} keys once merged with the stored ones"),
    )
}
