//! The Lua scripts' replies, parsed: a reply that is not what the script answers is a
//! [`GateError::Reply`], never a default.

use super::{
    CopyHeader, CopyStep, CopyWhat, GateCounts, GateError, GateReply, Lookup, OrderEntry, Patched,
    Removed, ScanStep, Trust,
};
use crate::domain::{Held, ReserveOutcome};

fn num(s: &str) -> Result<i64, GateError> {
    s.parse()
        .map_err(|_| GateError::Reply(format!("not a number: {s:?}")))
}

/// An entry's rules version: '' for an entry written before the gate kept it.
fn version_of(s: &str) -> Result<Option<i64>, GateError> {
    match s {
        "" => Ok(None),
        v => num(v).map(Some),
    }
}

/// `reserve.lua`'s reply: `{outcome, customer, reservedMs, expiresMs, discount, version}`.
pub(super) fn parse_reserve(reply: &[String]) -> Result<GateReply, GateError> {
    let [outcome, customer, reserved, expires, discount, version] = reply else {
        return Err(GateError::Reply(format!("{reply:?}")));
    };
    let outcome = ReserveOutcome::parse(outcome)
        .ok_or_else(|| GateError::Reply(format!("unknown outcome {outcome:?}")))?;
    let held = if outcome.holds() {
        Some(Held {
            customer_id: num(customer)?,
            reserved_ms: num(reserved)?,
            expires_ms: num(expires)?,
            discount: num(discount)?,
        })
    } else {
        None
    };
    let rules_version = match held {
        Some(_) => version_of(version)?,
        None => None,
    };
    Ok(GateReply {
        outcome,
        held,
        rules_version,
    })
}

/// An order's entry as `lookup.lua` and `copy.lua` give it parsed: `{state, customer,
/// reservedMs, expiresMs, discount, amount, version}`, state '' for no entry.
fn parse_entry(fields: [&String; 7]) -> Result<Option<OrderEntry>, GateError> {
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

/// `copy.lua`'s reply: `{remaining, moves, size, perUser, cursor, fields...}`, the fields
/// being orders' entries (eight each) or customers' uses (two each) as `what` asked.
pub(super) fn parse_copy(reply: &[String], what: CopyWhat) -> Result<CopyStep, GateError> {
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

/// `lookup.lua`'s reply: `{state, customer, reservedMs, expiresMs, discount, amount, uses,
/// perUser, trust, version}`.
pub(super) fn parse_lookup(reply: &[String]) -> Result<Lookup, GateError> {
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

/// `validate.lua`'s reply: `{outcome, discount}`.
pub(super) fn parse_validate(reply: &[String]) -> Result<(ReserveOutcome, i64), GateError> {
    let [outcome, discount] = reply else {
        return Err(GateError::Reply(format!("{reply:?}")));
    };
    let outcome = ReserveOutcome::parse(outcome)
        .ok_or_else(|| GateError::Reply(format!("unknown outcome {outcome:?}")))?;
    Ok((outcome, num(discount)?))
}

/// `release.lua`'s reply.
pub(super) fn parse_removed(reply: &str) -> Result<Removed, GateError> {
    match reply {
        "RELEASED" => Ok(Removed::Released),
        "ALREADY" => Ok(Removed::Already),
        "UNKNOWN" => Ok(Removed::Unknown),
        "NOT_LOADED" => Ok(Removed::NotLoaded),
        other => Err(GateError::Reply(other.to_owned())),
    }
}

/// `counts.lua`'s reply: `{remaining, moves, budget}`, `remaining` empty when the voucher is
/// not loaded (None), `budget` empty when it has none.
pub(super) fn parse_counts(reply: &[String]) -> Result<Option<GateCounts>, GateError> {
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
pub(super) fn parse_scan(reply: &[String]) -> Result<ScanStep, GateError> {
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

/// `patch.lua`'s reply.
pub(super) fn parse_patched(reply: &str) -> Result<Patched, GateError> {
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
    fn reserve_replies_parse_or_fail_loudly() {
        assert_eq!(
            parse_reserve(&s(&["RESERVED", "7", "10", "20", "30", "4"])).unwrap(),
            GateReply {
                outcome: ReserveOutcome::Reserved,
                held: Some(Held {
                    customer_id: 7,
                    reserved_ms: 10,
                    expires_ms: 20,
                    discount: 30
                }),
                rules_version: Some(4),
            }
        );
        assert_eq!(
            parse_reserve(&s(&["REPLAY", "7", "10", "20", "30", ""]))
                .unwrap()
                .rules_version,
            None,
            "an entry written before the gate kept the version"
        );
        assert_eq!(
            parse_reserve(&s(&["OUT_OF_STOCK", "", "0", "0", "0", ""])).unwrap(),
            GateReply {
                outcome: ReserveOutcome::OutOfStock,
                held: None,
                rules_version: None,
            }
        );
        assert!(parse_reserve(&s(&["RESERVED"])).is_err());
        assert!(parse_reserve(&s(&["RESERVED", "7", "10", "20", "30"])).is_err());
        assert!(parse_reserve(&s(&["RESERVED", "7", "10", "20", "30", "v"])).is_err());
        assert!(parse_reserve(&s(&["DUPLICATE", "", "0", "0", "0", ""])).is_err());
    }

    #[test]
    fn validate_replies_parse_or_fail_loudly() {
        assert_eq!(
            parse_validate(&s(&["ELIGIBLE", "500"])).unwrap(),
            (ReserveOutcome::Eligible, 500)
        );
        assert!(parse_validate(&s(&["ELIGIBLE"])).is_err());
        assert!(parse_validate(&s(&["NOPE", "0"])).is_err());
        assert!(parse_validate(&s(&["ELIGIBLE", "x"])).is_err());
    }

    #[test]
    fn release_and_patch_replies_parse_or_fail_loudly() {
        assert_eq!(parse_removed("RELEASED").unwrap(), Removed::Released);
        assert_eq!(parse_removed("ALREADY").unwrap(), Removed::Already);
        assert_eq!(parse_removed("UNKNOWN").unwrap(), Removed::Unknown);
        assert!(parse_removed("").is_err());
        assert_eq!(parse_patched("APPLIED").unwrap(), Patched::Applied);
        assert_eq!(parse_patched("NOT_LOADED").unwrap(), Patched::NotLoaded);
        assert_eq!(
            parse_patched("LIMIT_BELOW_USED").unwrap(),
            Patched::LimitBelowUsed
        );
        assert_eq!(parse_patched("LOCK_LOST").unwrap(), Patched::LockLost);
        assert!(parse_patched("RELEASED").is_err());
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
