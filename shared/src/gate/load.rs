//! Loading and changing a gate: the gate lock (`loading`, `unlock.lua`), the load and the
//! failover repair (`load.lua`), a change of the voucher (`patch.lua`) and the reconciler's copy
//! of Postgres' rules (`sync.lua`), and the loss of a gate noticed (`lost.lua`).

use std::time::Duration;

use super::{meta_args, Gate, GateError, GateMeta, Unit};

/// What [`Gate::load`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    /// This call loaded the gate.
    Now,
    /// The gate was loaded already: nothing written.
    Already,
    /// The gate lock no longer holds the loader's token (it expired, and a change or another
    /// loader took it since): its snapshot may be older than a change, so nothing was written.
    Fenced,
    /// A repair: an order gained or lost a use since the counts were read; nothing written.
    Moved,
}

/// The counts a load or a repair writes (`lua/load.lua`): uses left, the money left (None: no
/// budget), each customer's uses, and a campaign's `codes`.
#[derive(Debug, Clone, Copy)]
pub struct LoadCounts<'a> {
    pub remaining: i64,
    pub budget: Option<i64>,
    pub users: &'a [(i64, i32)],
    pub codes: Option<&'a CodeCounts>,
}

/// What `patch.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patched {
    Applied,
    /// The voucher is not in the gate: nothing to change there.
    NotLoaded,
    /// The uses granted exceed the new limit: nothing changed.
    LimitBelowUsed,
    /// The discounts granted exceed the new budget: nothing changed.
    BudgetBelowUsed,
    /// The caller's gate lock expired or was taken: nothing changed.
    LockLost,
}

/// What a change does to the gate's money left ([`Gate::patch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetStep {
    Keep,
    /// Added to the money left (a lower budget subtracts).
    Add(i64),
    /// The voucher has no budget any more.
    Remove,
}

/// What a campaign's gate loads besides a voucher's (`lua/load.lua`): each code's limit (the
/// campaign's `perCodeLimit`, which never changes) and its `codes` hash: the uses each code
/// holds (field CODE) and each customer's uses of it (field `CODE|customerId`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodeCounts {
    pub per_code: i64,
    pub uses: Vec<(String, i64)>,
}

impl Gate {
    /// Loads a voucher unless it is loaded, with `counts` (the money left to give, None: no
    /// budget; a campaign's gate also takes `codes`, its codes' limit and uses held; a
    /// voucher's ignores them), if the gate lock still holds `token` (the loader's,
    /// [`Gate::try_lock_loading`]).
    pub async fn load<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        token: &str,
        meta: &GateMeta,
        counts: LoadCounts<'_>,
    ) -> Result<Loaded, GateError> {
        self.write_counts(at.into(), token, None, meta, counts)
            .await
    }

    /// Repairs a loaded gate that is not the copy of Redis' data it was loaded into (reserve
    /// answered SUSPECT after a failover): its rules and counts are replaced by `counts`, its
    /// orders and pending set kept, and it is trusted again on the node serving now. Only while
    /// it is still suspect, the lock holds `token`, and the orders' `#moves` is still `moves`
    /// (read before the counts were): otherwise nothing is written ([`Loaded::Moved`],
    /// [`Loaded::Fenced`], or [`Loaded::Already`] when there was nothing to repair).
    pub async fn repair_counts<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        token: &str,
        moves: i64,
        meta: &GateMeta,
        counts: LoadCounts<'_>,
    ) -> Result<Loaded, GateError> {
        self.write_counts(at.into(), token, Some(moves), meta, counts)
            .await
    }

    async fn write_counts(
        &self,
        at: Unit<'_>,
        token: &str,
        repair: Option<i64>,
        meta: &GateMeta,
        counts: LoadCounts<'_>,
    ) -> Result<Loaded, GateError> {
        let k = self.keys(at);
        let mut fields = meta_args(meta);
        if let Some(budget) = counts.budget {
            fields.extend(["budget".to_owned(), budget.to_string()]);
        }
        let codes = counts.codes.filter(|_| k.codes.is_some());
        if let Some(codes) = codes {
            fields.extend(["per_code".to_owned(), codes.per_code.to_string()]);
        }
        let mut inv = self.load.key(&k.meta);
        inv.key(&k.remaining)
            .key(&k.users)
            .key(&k.lost)
            .key(&k.loading)
            .key(&k.orders)
            .arg(token)
            .arg(repair.map(|m| m.to_string()).unwrap_or_default())
            .arg(counts.remaining)
            .arg(fields.len())
            .arg(&fields);
        if let Some(key) = &k.codes {
            inv.key(key).arg(counts.users.len() * 2);
        }
        for (customer, active) in counts.users {
            inv.arg(customer).arg(active);
        }
        for (field, uses) in codes.map(|c| c.uses.as_slice()).unwrap_or_default() {
            inv.arg(field).arg(uses);
        }
        // Safe to retry: run twice, a load finds the gate loaded and a repair finds it trusted.
        let loaded: i64 = self.invoke("load", &inv).await?;
        match loaded {
            1 => Ok(Loaded::Now),
            0 => Ok(Loaded::Already),
            -1 => Ok(Loaded::Fenced),
            -2 => Ok(Loaded::Moved),
            other => Err(GateError::Reply(format!("load: {other}"))),
        }
    }

    /// A change of the voucher (PATCH), under the gate lock `token` holds: adds `delta` to
    /// `remaining` unless it would go below zero, takes the budget `step` (an addition to the
    /// money left, refused below zero too), and sets the rules to `meta` (None: leaves them).
    pub async fn patch<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        token: &str,
        delta: i64,
        step: BudgetStep,
        meta: Option<&GateMeta>,
    ) -> Result<Patched, GateError> {
        let step = match step {
            BudgetStep::Keep => String::new(),
            BudgetStep::Add(money) => money.to_string(),
            BudgetStep::Remove => "DEL".to_owned(),
        };
        let at = at.into();
        let k = self.keys(at);
        let fields = meta.map(meta_args).unwrap_or_default();
        // Not `invoke`: a patch adds `delta`, and one that ran before its reply was lost must
        // not run again.
        let reply: String = self
            .invoke_once(
                "patch",
                self.patch
                    .key(&k.meta)
                    .key(&k.remaining)
                    .key(&k.loading)
                    .arg(token)
                    .arg(delta)
                    .arg(step)
                    .arg(&fields),
            )
            .await?;
        parse_patched(&reply)
    }

    /// The reconciler's copy of the rules read from Postgres (`sync.lua`): true when the gate's
    /// differed and were replaced.
    pub async fn sync_meta<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        meta: &GateMeta,
    ) -> Result<bool, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let fields = meta_args(meta);
        let wrote: i64 = self
            .invoke(
                "sync_meta",
                self.sync
                    .key(&k.meta)
                    .key(&k.loading)
                    .arg(meta.version)
                    .arg(&fields),
            )
            .await?;
        Ok(wrote == 1)
    }

    /// Is the gate lock (`loading`) held by anyone?
    pub async fn is_locked<'u>(&self, at: impl Into<Unit<'u>>) -> Result<bool, GateError> {
        let at = at.into();
        let k = self.keys(at);
        self.query("is_locked", redis::cmd("EXISTS").arg(&k.loading))
            .await
    }

    pub async fn is_loaded<'u>(&self, at: impl Into<Unit<'u>>) -> Result<bool, GateError> {
        let at = at.into();
        let k = self.keys(at);
        self.query("is_loaded", redis::cmd("EXISTS").arg(&k.meta))
            .await
    }

    /// `SET loading token NX PX ttl`: true when this caller may load the voucher.
    pub async fn try_lock_loading<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let set: Option<String> = self
            .query(
                "try_lock_loading",
                redis::cmd("SET")
                    .arg(&k.loading)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl.as_millis() as u64),
            )
            .await?;
        Ok(set.is_some())
    }

    /// Releases the loading lock if `token` still holds it (compare-and-delete): a loader that
    /// outlived the lock's TTL leaves alone the lock another caller took since. True when it
    /// deleted the lock.
    pub async fn unlock_loading<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        token: &str,
    ) -> Result<bool, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let deleted: i64 = self
            .invoke("unlock_loading", self.unlock.key(&k.loading).arg(token))
            .await?;
        Ok(deleted == 1)
    }

    /// Uses left according to the gate (None: not loaded).
    pub async fn remaining<'u>(&self, at: impl Into<Unit<'u>>) -> Result<Option<i64>, GateError> {
        let at = at.into();
        let k = self.keys(at);
        self.query("remaining", redis::cmd("GET").arg(&k.remaining))
            .await
    }

    /// A voucher gone from a gate that had held it: how long ago a warm-up first found it so
    /// (zero the first time). See `lua/lost.lua`.
    pub async fn lost_for<'u>(&self, at: impl Into<Unit<'u>>) -> Result<Duration, GateError> {
        /// Long enough for any wait; past it a later look starts the clock again.
        const LOST_TTL: Duration = Duration::from_secs(600);
        let at = at.into();
        let k = self.keys(at);
        let ms: i64 = self
            .invoke(
                "lost_for",
                self.lost.key(&k.lost).arg(LOST_TTL.as_millis() as u64),
            )
            .await?;
        Ok(Duration::from_millis(ms.max(0) as u64))
    }
}

/// `patch.lua`'s reply.
fn parse_patched(reply: &str) -> Result<Patched, GateError> {
    match reply {
        "APPLIED" => Ok(Patched::Applied),
        "NOT_LOADED" => Ok(Patched::NotLoaded),
        "LIMIT_BELOW_USED" => Ok(Patched::LimitBelowUsed),
        "BUDGET_BELOW_USED" => Ok(Patched::BudgetBelowUsed),
        "LOCK_LOST" => Ok(Patched::LockLost),
        other => Err(GateError::Reply(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_replies_parse_or_fail_loudly() {
        assert_eq!(parse_patched("APPLIED").unwrap(), Patched::Applied);
        assert_eq!(parse_patched("NOT_LOADED").unwrap(), Patched::NotLoaded);
        assert_eq!(
            parse_patched("LIMIT_BELOW_USED").unwrap(),
            Patched::LimitBelowUsed
        );
        assert_eq!(parse_patched("LOCK_LOST").unwrap(), Patched::LockLost);
        assert!(parse_patched("RELEASED").is_err());
    }
}
