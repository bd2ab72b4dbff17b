//! Deciding: `reserve.lua`, the atomic decision of a flash reserve, and `validate.lua`, what it
//! would decide now, read-only (docs/ARCHITECTURE.md, "Flash-sale mode").

use super::replies::{num, version_of};
use super::{in_campaign, Gate, GateError, Place};
use crate::domain::{Held, ReserveOutcome};

/// `reserve.lua`'s answer: the outcome, and the use when one is held (RESERVED, REPLAY).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateReply {
    pub outcome: ReserveOutcome,
    pub held: Option<Held>,
    /// The voucher's version whose rules granted the use (None: no use held, or an entry
    /// written before the gate kept it). Mode B's event carries it for the consumer's check.
    pub rules_version: Option<i64>,
}

impl Gate {
    pub async fn reserve<'u>(
        &self,
        at: impl Into<Place<'u>>,
        customer_id: i64,
        order_id: &str,
        order_amount: i64,
        now_ms: i64,
    ) -> Result<GateReply, GateError> {
        let at = at.into();
        let k = self.keys(at.into());
        let mut inv = self.reserve.key(&k.meta);
        inv.key(&k.remaining)
            .key(&k.users)
            .key(&k.orders)
            .key(&k.pending)
            .arg(customer_id)
            .arg(at.field(order_id).as_ref())
            .arg(order_amount)
            .arg(now_ms);
        in_campaign(&mut inv, &k, at);
        let reply: Vec<String> = self.invoke("reserve", &inv).await?;
        parse_reserve(&reply)
    }

    /// Would a reserve be granted now? `validate.lua`: writes nothing. Answers ELIGIBLE with the
    /// discount, NOT_LOADED, or the refusal.
    pub async fn validate<'u>(
        &self,
        at: impl Into<Place<'u>>,
        customer_id: i64,
        order_amount: i64,
        now_ms: i64,
    ) -> Result<(ReserveOutcome, i64), GateError> {
        let at = at.into();
        let k = self.keys(at.into());
        let mut inv = self.validate.key(&k.meta);
        inv.key(&k.remaining)
            .key(&k.users)
            .arg(customer_id)
            .arg(order_amount)
            .arg(now_ms);
        in_campaign(&mut inv, &k, at);
        let reply: Vec<String> = self.invoke("validate", &inv).await?;
        parse_validate(&reply)
    }
}

/// `reserve.lua`'s reply: `{outcome, customer, reservedMs, expiresMs, discount, version}`.
fn parse_reserve(reply: &[String]) -> Result<GateReply, GateError> {
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

/// `validate.lua`'s reply: `{outcome, discount}`.
fn parse_validate(reply: &[String]) -> Result<(ReserveOutcome, i64), GateError> {
    let [outcome, discount] = reply else {
        return Err(GateError::Reply(format!("{reply:?}")));
    };
    let outcome = ReserveOutcome::parse(outcome)
        .ok_or_else(|| GateError::Reply(format!("unknown outcome {outcome:?}")))?;
    Ok((outcome, num(discount)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
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
}
