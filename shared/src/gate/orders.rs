//! The orders in the gate: taking one out (`release.lua`), reading one and the gate's trust
//! (`lookup.lua`, `trust.lua`), the pending set a request or the consumer clears once Postgres
//! has the row.

use std::time::Duration;

use super::replies::{num, version_of};
use super::{in_campaign, Gate, GateError, Place, Unit};
use crate::domain::Held;

/// What an order is in the gate's `orders` hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderEntry {
    /// Held, with the order's amount: a row written from the gate ahead of (or instead of) the
    /// mode B event that carries it still records it. 0 for entries written before the gate
    /// kept it. `rules_version`: the voucher's version whose rules granted it (None: written
    /// before the gate kept it), which a replay's event carries again.
    Active {
        held: Held,
        order_amount: i64,
        rules_version: Option<i64>,
    },
    /// Released; the customer is unknown for a tombstone of an order the gate never held.
    Tombstone(Option<i64>),
}

/// How `release.lua` takes an order out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Released: the use returns, a tombstone stays.
    Release,
    /// Postgres refused the use: tombstone, and the use does not return.
    Revoke,
    /// Undo a reserve that Postgres did not take, so that a retry starts afresh.
    Forget { give_back: bool },
    /// The gate counted an active order twice (it lost data, then granted the order again):
    /// one use and one customer use come back, the order stays active.
    Uncount,
}

/// What `lookup.lua` read: the order's entry, the customer's active uses in the gate, and the
/// voucher's per-user limit there (None: not loaded); with the trust when it was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub entry: Option<OrderEntry>,
    pub uses: i64,
    pub per_user: Option<i64>,
    pub trust: Option<Trust>,
}

/// Whether the gate holds every order it ever granted for a voucher (`lua/incarnation.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Loaded into the copy of Redis' data it still runs on: an order it does not know was
    /// never granted.
    Intact,
    /// Loaded, but Redis failed over or restarted since (the node's replication id is not the
    /// one the gate was loaded into): the last grants before that may be lost, and their events
    /// may still be on the way.
    Suspect,
    /// Not loaded: never, or Redis lost its data.
    Unloaded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    Released,
    Already,
    Unknown,
    /// The voucher is not in the gate: nothing written.
    NotLoaded,
}

/// Pending orders read at once (see [`Gate::pending`]).
pub const PENDING_STEP: usize = 1000;

impl Gate {
    pub async fn remove<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
        how: Removal,
        customer_id: Option<i64>,
    ) -> Result<Removed, GateError> {
        let at = at.into();
        let k = self.keys(at.into());
        let (give_back, tombstone) = match how {
            Removal::Release => ("1", "1"),
            Removal::Revoke => ("0", "1"),
            Removal::Forget { give_back } => (if give_back { "1" } else { "0" }, "0"),
            Removal::Uncount => ("1", "keep"),
        };
        let customer = customer_id.map(|c| c.to_string()).unwrap_or_default();
        let mut inv = self.release.key(&k.remaining);
        inv.key(&k.users)
            .key(&k.orders)
            .key(&k.pending)
            .key(&k.meta)
            .key(&k.released)
            .arg(at.field(order_id).as_ref())
            .arg(give_back)
            .arg(tombstone)
            .arg(customer);
        in_campaign(&mut inv, &k, at);
        // Every removal but Uncount runs the same when repeated (the second finds a tombstone
        // or no entry). Uncount leaves the order active, so a second run after a reply lost
        // on a dropped connection would give one use back twice: it is not tried again, and
        // a lost reply leaves the drift to the reconciler.
        let reply: String = match how {
            Removal::Uncount => self.invoke_once("remove", &inv).await?,
            _ => self.invoke("remove", &inv).await?,
        };
        parse_removed(&reply)
    }

    /// The order's entry and (given a customer) that customer's active uses, in one round trip
    /// that writes nothing: the sold-out short cut's check for a winner's retry, and how
    /// confirm, release and the sweeper read what the gate holds.
    pub async fn lookup<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
        customer_id: Option<i64>,
    ) -> Result<Lookup, GateError> {
        self.look(at, order_id, customer_id, false).await
    }

    async fn look<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
        customer_id: Option<i64>,
        with_trust: bool,
    ) -> Result<Lookup, GateError> {
        let at = at.into();
        let k = self.keys(at.into());
        let customer = customer_id.map(|c| c.to_string()).unwrap_or_default();
        let reply: Vec<String> = self
            .invoke(
                "lookup",
                self.lookup
                    .key(&k.orders)
                    .key(&k.users)
                    .key(&k.meta)
                    .arg(at.field(order_id).as_ref())
                    .arg(customer)
                    .arg(if with_trust { "1" } else { "" }),
            )
            .await?;
        parse_lookup(&reply)
    }

    /// The order's entry in the `orders` hash.
    pub async fn order<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
    ) -> Result<Option<OrderEntry>, GateError> {
        Ok(self.lookup(at, order_id, None).await?.entry)
    }

    /// The order's entry, and in the same step whether the gate can be trusted to know every
    /// order it granted: with [`Trust::Intact`], an order without an entry was never granted.
    pub async fn order_with_trust<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
    ) -> Result<(Option<OrderEntry>, Trust), GateError> {
        let seen = self.look(at, order_id, None, true).await?;
        let trust = seen
            .trust
            .ok_or_else(|| GateError::Reply("lookup without its trust".into()))?;
        Ok((seen.entry, trust))
    }

    /// After a [`Trust::Suspect`] answer or a SUSPECT reserve: how long ago the node serving the
    /// gate now was first found suspect (now, if this is the first time). None: the voucher is
    /// not loaded any more.
    pub async fn suspect_for<'u>(
        &self,
        at: impl Into<Unit<'u>>,
    ) -> Result<Option<Duration>, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let ms: i64 = self.invoke("suspect_for", &self.trust.key(&k.meta)).await?;
        Ok(u64::try_from(ms).ok().map(Duration::from_millis))
    }

    /// Orders reserved in the gate that Postgres may not have yet: the [`PENDING_STEP`] oldest
    /// with their reserve time (ms), and how many there are in all. Bounded, so that a burst's
    /// backlog never makes one call long; the rest waits for the next look.
    pub async fn pending<'u>(
        &self,
        at: impl Into<Unit<'u>>,
    ) -> Result<(Vec<(String, i64)>, usize), GateError> {
        let at = at.into();
        let k = self.keys(at);
        let oldest: Vec<(String, i64)> = self
            .query(
                "pending",
                redis::cmd("ZRANGE")
                    .arg(&k.pending)
                    .arg(0)
                    .arg(PENDING_STEP - 1)
                    .arg("WITHSCORES"),
            )
            .await?;
        if oldest.len() < PENDING_STEP {
            let all = oldest.len();
            return Ok((oldest, all));
        }
        let all: usize = self
            .query("pending", redis::cmd("ZCARD").arg(&k.pending))
            .await?;
        Ok((oldest, all.max(PENDING_STEP)))
    }

    /// The order was written to Postgres: it is no longer pending.
    pub async fn settled<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
    ) -> Result<(), GateError> {
        let at = at.into();
        let k = self.keys(at.into());
        self.query::<i64>(
            "settled",
            redis::cmd("ZREM")
                .arg(&k.pending)
                .arg(at.field(order_id).as_ref()),
        )
        .await?;
        Ok(())
    }

    /// [`Gate::settled`] for a batch of orders (the consumer's): one `ZREM` per gate with all of
    /// its orders, the gates' at once, instead of a round trip per order. Best effort, as
    /// [`Gate::settled_best_effort`].
    pub async fn settled_many_best_effort<'u>(
        &self,
        orders: impl IntoIterator<Item = (Place<'u>, &'u str)>,
    ) {
        let mut by_unit: Vec<(Unit<'u>, Vec<String>)> = Vec::new();
        for (at, order_id) in orders {
            let field = at.field(order_id).into_owned();
            // A batch touches a handful of gates (one, in a sale): a walk beats a hash.
            match by_unit.iter_mut().find(|(unit, _)| *unit == at.unit) {
                Some((_, fields)) => fields.push(field),
                None => by_unit.push((at.unit, vec![field])),
            }
        }
        let removals = by_unit.into_iter().map(|(unit, fields)| async move {
            let pending = self.keys(unit).pending;
            let removed = self
                .query::<i64>("settled", redis::cmd("ZREM").arg(&pending).arg(&fields))
                .await;
            if let Err(e) = removed {
                tracing::warn!(code = %unit, orders = fields.len(), error = %crate::telemetry::Chain(&e), "pending not cleared");
            }
        });
        futures::future::join_all(removals).await;
    }

    /// [`Gate::settled`] where a failure only delays the clean-up: it is logged, and the
    /// sweeper clears the mark later (it finds the row).
    pub async fn settled_best_effort<'u>(&self, at: impl Into<Place<'u>>, order_id: &str) {
        let at = at.into();
        if let Err(e) = self.settled(at, order_id).await {
            tracing::warn!(code = at.code.as_str(), order_id, error = %crate::telemetry::Chain(&e), "pending not cleared");
        }
    }
}

/// An order's entry as `lookup.lua` and `copy.lua` give it parsed: `{state, customer,
/// reservedMs, expiresMs, discount, amount, version}`, state '' for no entry.
pub(super) fn parse_entry(fields: [&String; 7]) -> Result<Option<OrderEntry>, GateError> {
    let [state, customer, reserved, expires, discount, amount, version] = fields;
    Ok(match state.as_str() {
        "" => None,
        "A" => Some(OrderEntry::Active {
            held: Held {
                customer_id: num(customer)?,
                reserved_ms: num(reserved)?,
                expires_ms: num(expires)?,
                discount: num(discount)?,
            },
            order_amount: num(amount)?,
            rules_version: version_of(version)?,
        }),
        "R" if customer.is_empty() => Some(OrderEntry::Tombstone(None)),
        "R" => Some(OrderEntry::Tombstone(Some(num(customer)?))),
        other => return Err(GateError::Reply(format!("unknown entry state {other:?}"))),
    })
}

/// `lookup.lua`'s reply: `{state, customer, reservedMs, expiresMs, discount, amount, uses,
/// perUser, trust, version}`.
fn parse_lookup(reply: &[String]) -> Result<Lookup, GateError> {
    let [state, customer, reserved, expires, discount, amount, uses, per_user, trust, version] =
        reply
    else {
        return Err(GateError::Reply(format!("{reply:?}")));
    };
    let trust = match trust.as_str() {
        "" => None,
        "intact" => Some(Trust::Intact),
        "unloaded" => Some(Trust::Unloaded),
        "suspect" => Some(Trust::Suspect),
        other => return Err(GateError::Reply(format!("unknown trust {other:?}"))),
    };
    let entry = parse_entry([
        state, customer, reserved, expires, discount, amount, version,
    ])?;
    let per_user = match per_user.as_str() {
        "" => None,
        n => Some(num(n)?),
    };
    Ok(Lookup {
        entry,
        uses: num(uses)?,
        per_user,
        trust,
    })
}

/// `release.lua`'s reply.
fn parse_removed(reply: &str) -> Result<Removed, GateError> {
    match reply {
        "RELEASED" => Ok(Removed::Released),
        "ALREADY" => Ok(Removed::Already),
        "UNKNOWN" => Ok(Removed::Unknown),
        "NOT_LOADED" => Ok(Removed::NotLoaded),
        other => Err(GateError::Reply(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn lookup_replies_parse_or_fail_loudly() {
        let held = Held {
            customer_id: 42,
            reserved_ms: 1000,
            expires_ms: 901000,
            discount: 5,
        };
        let lookup = |entry, uses, per_user| Lookup {
            entry,
            uses,
            per_user,
            trust: None,
        };
        assert_eq!(
            parse_lookup(&s(&[
                "A", "42", "1000", "901000", "5", "70000", "1", "2", "", "3"
            ]))
            .unwrap(),
            lookup(
                Some(OrderEntry::Active {
                    held,
                    order_amount: 70000,
                    rules_version: Some(3),
                }),
                1,
                Some(2)
            )
        );
        assert_eq!(
            parse_lookup(&s(&["R", "42", "1", "2", "3", "0", "0", "1", "", ""])).unwrap(),
            lookup(Some(OrderEntry::Tombstone(Some(42))), 0, Some(1))
        );
        assert_eq!(
            parse_lookup(&s(&["R", "", "0", "0", "0", "0", "0", "1", "", ""])).unwrap(),
            lookup(Some(OrderEntry::Tombstone(None)), 0, Some(1))
        );
        assert_eq!(
            parse_lookup(&s(&["", "", "0", "0", "0", "0", "2", "", "", ""])).unwrap(),
            lookup(None, 2, None)
        );
        assert!(parse_lookup(&s(&["X", "1", "0", "0", "0", "0", "0", "1", "", ""])).is_err());
        assert!(
            parse_lookup(&s(&["A", "1", "0", "0", "0", "0", "0", "1", ""])).is_err(),
            "one field short"
        );
        assert!(parse_lookup(&s(&["A", "1"])).is_err());
        let empty = ["", "", "0", "0", "0", "0", "0", ""];
        let with = |trust: &str| {
            let mut v = s(&empty);
            v.extend(s(&[trust, ""]));
            parse_lookup(&v).unwrap().trust
        };
        assert_eq!(with("intact"), Some(Trust::Intact));
        assert_eq!(with("unloaded"), Some(Trust::Unloaded));
        assert_eq!(with("suspect"), Some(Trust::Suspect));
        let mut v = s(&empty);
        v.extend(s(&["trusted", ""]));
        assert!(parse_lookup(&v).is_err());
    }

    #[test]
    fn release_replies_parse_or_fail_loudly() {
        assert_eq!(parse_removed("RELEASED").unwrap(), Removed::Released);
        assert_eq!(parse_removed("ALREADY").unwrap(), Removed::Already);
        assert_eq!(parse_removed("UNKNOWN").unwrap(), Removed::Unknown);
        assert!(parse_removed("").is_err());
    }
}
