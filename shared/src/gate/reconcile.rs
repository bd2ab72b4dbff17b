//! What the sweeper's reconciler and the sold-out copy read: the counts compared every sweep
//! (`counts.lua`), the bounded walks of a voucher's orders (`scan.lua`, `copy.lua`), and the
//! compare-and-set repair of `remaining` (`repair.lua`).

use super::orders::{parse_entry, OrderEntry};
use super::replies::num;
use super::{Gate, GateError, Unit};

/// What the reconciler compares on every sweep (`counts.lua`): `remaining`, and how many times
/// an order gained or lost a use (a change counter, not an absolute figure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateCounts {
    pub remaining: i64,
    pub moves: i64,
    /// The money budget left (None: the voucher has none).
    pub budget: Option<i64>,
}

/// One bounded step through a voucher's orders (`scan.lua`): the orders of the step that hold
/// a use (orderId, customer), and where the next step starts (0: the end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanStep {
    pub cursor: u64,
    pub actives: Vec<(String, i64)>,
}

/// What `copy.lua` reads besides the fields of a step. A copy of a voucher's orders is exact
/// only if this reads the same before its first step and after its last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyHeader {
    /// None: not loaded.
    pub remaining: Option<i64>,
    /// The `orders` hash's change counter (`lua/entry.lua`).
    pub moves: i64,
    /// The `orders` hash's field count: the bound on a copy's size.
    pub size: i64,
    pub per_user: Option<i64>,
}

/// What one `copy.lua` call reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyWhat {
    Header,
    Orders,
    Users,
}

/// One bounded step of a copy of a voucher's orders (or customers' active uses) into the
/// process (`lua/copy.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyStep {
    pub header: CopyHeader,
    /// Where the next step starts (0: the end); None for a header alone.
    pub cursor: Option<u64>,
    pub orders: Vec<(String, OrderEntry)>,
    /// Customer, active uses.
    pub users: Vec<(i64, i64)>,
}

/// Entries one scan step reads: small enough that a step holds Redis well under a millisecond
/// (500 took 0.7 ms, and 3 to 4 ms while Redis was still rehashing a freshly grown hash, whose
/// two tables a scan then reads: docs/BENCHMARKS.md). The walk is the fault path only.
pub const SCAN_STEP: usize = 200;

impl Gate {
    /// `remaining` and the orders' change counter, read in one step, in constant time (None:
    /// not loaded).
    pub async fn counts<'u>(
        &self,
        at: impl Into<Unit<'u>>,
    ) -> Result<Option<GateCounts>, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let reply: Vec<String> = self
            .invoke(
                "counts",
                self.counts.key(&k.remaining).key(&k.orders).key(&k.meta),
            )
            .await?;
        parse_counts(&reply)
    }

    /// One step of [`SCAN_STEP`] entries through the voucher's orders, from `cursor` (0 to
    /// start).
    pub async fn scan_actives<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        cursor: u64,
    ) -> Result<ScanStep, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let reply: Vec<String> = self
            .invoke(
                "scan_actives",
                self.scan.key(&k.orders).arg(cursor).arg(SCAN_STEP),
            )
            .await?;
        parse_scan(&reply)
    }

    /// One step of a sold-out voucher's copy into the process (`lua/copy.lua`): `what` from
    /// `cursor` (0 to start), [`SCAN_STEP`] fields at most, with the header read in the same
    /// step.
    pub async fn copy_step<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        what: CopyWhat,
        cursor: u64,
    ) -> Result<CopyStep, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let what_arg = match what {
            CopyWhat::Header => "",
            CopyWhat::Orders => "orders",
            CopyWhat::Users => "users",
        };
        let reply: Vec<String> = self
            .invoke(
                "copy",
                self.copy
                    .key(&k.orders)
                    .key(&k.users)
                    .key(&k.remaining)
                    .key(&k.meta)
                    .arg(what_arg)
                    .arg(cursor)
                    .arg(SCAN_STEP),
            )
            .await?;
        parse_copy(&reply, what)
    }

    /// Sets `remaining` to `to` and the money budget left to `to_budget` (None: none) only
    /// if they still read `from`, no order is pending, no order gained or lost a use since
    /// `moves` was read, nobody holds the gate lock, and the gate's rules are of `version` (the
    /// reconciler's repair).
    pub async fn repair_remaining<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        from: GateCounts,
        to: i64,
        to_budget: Option<i64>,
        version: i64,
    ) -> Result<bool, GateError> {
        let text = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
        let at = at.into();
        let k = self.keys(at);
        let done: i64 = self
            .invoke(
                "repair_remaining",
                self.repair
                    .key(&k.remaining)
                    .key(&k.pending)
                    .key(&k.meta)
                    .key(&k.loading)
                    .key(&k.orders)
                    .arg(from.remaining)
                    .arg(to)
                    .arg(version)
                    .arg(from.moves)
                    .arg(text(from.budget))
                    .arg(text(to_budget)),
            )
            .await?;
        Ok(done == 1)
    }
}

/// `copy.lua`'s reply: `{remaining, moves, size, perUser, cursor, fields...}`, the fields
/// being orders' entries (eight each) or customers' uses (two each) as `what` asked.
fn parse_copy(reply: &[String], what: CopyWhat) -> Result<CopyStep, GateError> {
    let bad = || GateError::Reply(format!("{reply:?}"));
    let [remaining, moves, size, per_user, cursor, fields @ ..] = reply else {
        return Err(bad());
    };
    let header = CopyHeader {
        remaining: match remaining.as_str() {
            "" => None,
            n => Some(num(n)?),
        },
        moves: num(moves)?,
        size: num(size)?,
        per_user: match per_user.as_str() {
            "" => None,
            n => Some(num(n)?),
        },
    };
    let cursor = match cursor.as_str() {
        "" => None,
        c => Some(
            c.parse()
                .map_err(|_| GateError::Reply(format!("not a cursor: {c:?}")))?,
        ),
    };
    let mut step = CopyStep {
        header,
        cursor,
        orders: Vec::new(),
        users: Vec::new(),
    };
    match what {
        CopyWhat::Header if fields.is_empty() => {}
        CopyWhat::Header => return Err(bad()),
        CopyWhat::Orders => {
            for f in fields.chunks(8) {
                let [order, state, customer, reserved, expires, discount, amount, version] = f
                else {
                    return Err(bad());
                };
                let entry = parse_entry([
                    state, customer, reserved, expires, discount, amount, version,
                ])?
                .ok_or_else(bad)?;
                step.orders.push((order.clone(), entry));
            }
        }
        CopyWhat::Users => {
            for f in fields.chunks(2) {
                let [customer, uses] = f else {
                    return Err(bad());
                };
                step.users.push((num(customer)?, num(uses)?));
            }
        }
    }
    Ok(step)
}

/// `counts.lua`'s reply: `{remaining, moves, budget}`, `remaining` empty when the voucher is
/// not loaded (None), `budget` empty when it has none.
fn parse_counts(reply: &[String]) -> Result<Option<GateCounts>, GateError> {
    let [remaining, moves, budget] = reply else {
        return Err(GateError::Reply(format!("{reply:?}")));
    };
    if remaining.is_empty() {
        return Ok(None);
    }
    Ok(Some(GateCounts {
        remaining: num(remaining)?,
        moves: num(moves)?,
        budget: if budget.is_empty() {
            None
        } else {
            Some(num(budget)?)
        },
    }))
}

/// `scan.lua`'s reply: `{cursor, order, customer, order, customer, ...}`.
fn parse_scan(reply: &[String]) -> Result<ScanStep, GateError> {
    let Some((cursor, pairs)) = reply.split_first() else {
        return Err(GateError::Reply("empty".into()));
    };
    let actives = pairs
        .chunks(2)
        .map(|p| match p {
            [order, customer] => Ok((order.clone(), num(customer)?)),
            _ => Err(GateError::Reply(format!("{reply:?}"))),
        })
        .collect::<Result<_, _>>()?;
    Ok(ScanStep {
        cursor: cursor
            .parse()
            .map_err(|_| GateError::Reply(format!("not a cursor: {cursor:?}")))?,
        actives,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Held;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn copy_replies_parse_or_fail_loudly() {
        let header = CopyHeader {
            remaining: Some(0),
            moves: 7,
            size: 3,
            per_user: Some(1),
        };
        let alone = parse_copy(&s(&["0", "7", "3", "1", ""]), CopyWhat::Header).unwrap();
        assert_eq!((alone.header, alone.cursor), (header, None));
        let orders = parse_copy(
            &s(&[
                "0", "7", "3", "1", "12", "o1", "A", "42", "1000", "901000", "5", "70000", "3",
                "o2", "R", "", "0", "0", "0", "0", "",
            ]),
            CopyWhat::Orders,
        )
        .unwrap();
        assert_eq!(orders.cursor, Some(12));
        assert_eq!(
            orders.orders,
            vec![
                (
                    "o1".to_owned(),
                    OrderEntry::Active {
                        held: Held {
                            customer_id: 42,
                            reserved_ms: 1000,
                            expires_ms: 901000,
                            discount: 5,
                        },
                        order_amount: 70000,
                        rules_version: Some(3),
                    }
                ),
                ("o2".to_owned(), OrderEntry::Tombstone(None)),
            ]
        );
        let users = parse_copy(&s(&["", "0", "0", "", "0", "42", "1"]), CopyWhat::Users).unwrap();
        assert_eq!(
            (users.header.remaining, users.header.per_user, users.users),
            (None, None, vec![(42, 1)])
        );
        assert!(
            parse_copy(&s(&["0", "7", "3", "1", "0", "o1", "A"]), CopyWhat::Orders).is_err(),
            "an entry cut short"
        );
        assert!(
            parse_copy(
                &s(&["0", "7", "3", "1", "0", "o1", "", "", "0", "0", "0", "0", ""]),
                CopyWhat::Orders
            )
            .is_err(),
            "an order without an entry"
        );
        assert!(parse_copy(&s(&["0", "7", "3", "1", "", "42"]), CopyWhat::Header).is_err());
        assert!(parse_copy(&s(&["0", "7"]), CopyWhat::Users).is_err());
    }

    #[test]
    fn counts_and_scan_replies_parse_or_fail_loudly() {
        assert_eq!(parse_counts(&s(&["", "0", ""])).unwrap(), None);
        assert_eq!(
            parse_counts(&s(&["3", "12", ""])).unwrap(),
            Some(GateCounts {
                remaining: 3,
                moves: 12,
                budget: None,
            })
        );
        assert_eq!(
            parse_counts(&s(&["3", "12", "500"]))
                .unwrap()
                .unwrap()
                .budget,
            Some(500)
        );
        assert!(parse_counts(&s(&["3", "12"])).is_err());
        assert!(parse_counts(&s(&["3", "x", ""])).is_err());
        assert!(parse_counts(&s(&["3", "12", "x"])).is_err());
        assert_eq!(
            parse_scan(&s(&["0"])).unwrap(),
            ScanStep {
                cursor: 0,
                actives: vec![]
            }
        );
        assert_eq!(
            parse_scan(&s(&["17", "o-1", "7", "o-2", "8"])).unwrap(),
            ScanStep {
                cursor: 17,
                actives: vec![("o-1".to_owned(), 7), ("o-2".to_owned(), 8)]
            }
        );
        assert!(parse_scan(&[]).is_err());
        assert!(parse_scan(&s(&["1", "o-1"])).is_err());
        assert!(parse_scan(&s(&["1", "o-1", "x"])).is_err());
        assert!(parse_scan(&s(&["-", "o-1", "7"])).is_err());
    }
}
