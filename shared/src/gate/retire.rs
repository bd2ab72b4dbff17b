//! Retirement: every key of a unit whose sale is over (`retire.lua`), and each tombstone a
//! retention after its release (`prune.lua`).

use std::time::Duration;

use super::{Gate, GateError, Unit};

/// What `retire.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retired {
    /// Every key of the voucher is gone.
    Retired,
    /// The gate's own rules say the sale ended less than the retirement delay ago (a change
    /// reopened it): kept.
    Live,
    /// An order is still on its way to Postgres: kept.
    Pending,
    /// A loader or a change holds the gate lock: kept, for the next sweep.
    Locked,
}

impl Gate {
    /// Removes every key of a voucher whose sale ended at least `after` before `now_ms` (by the
    /// gate's own copy of the rules) and that has no order pending. See `lua/retire.lua`.
    pub async fn retire<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        now_ms: i64,
        after: Duration,
    ) -> Result<Retired, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let mut inv = self.retire.key(&k.meta);
        inv.key(&k.remaining)
            .key(&k.users)
            .key(&k.orders)
            .key(&k.pending)
            .key(&k.loading)
            .key(&k.lost)
            .key(&k.released);
        if let Some(codes) = &k.codes {
            inv.key(codes);
        }
        inv.arg(now_ms).arg(after.as_millis() as u64);
        let reply: String = self.invoke("retire", &inv).await?;
        match reply.as_str() {
            "RETIRED" => Ok(Retired::Retired),
            "LIVE" => Ok(Retired::Live),
            "PENDING" => Ok(Retired::Pending),
            "LOCKED" => Ok(Retired::Locked),
            other => Err(GateError::Reply(other.to_owned())),
        }
    }

    /// Deletes at most `limit` of the gate's tombstones written more than `retention` ago (by
    /// the Redis clock). Answers how many went, and whether older ones are left for another
    /// call. See `lua/prune.lua`.
    pub async fn prune_tombstones<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        retention: Duration,
        limit: u32,
    ) -> Result<(u64, bool), GateError> {
        let k = self.keys(at.into());
        let mut inv = self.prune.key(&k.orders);
        inv.key(&k.released)
            .arg(retention.as_millis() as u64)
            .arg(limit);
        let (pruned, more): (u64, u8) = self.invoke("prune", &inv).await?;
        Ok((pruned, more == 1))
    }
}
