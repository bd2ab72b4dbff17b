//! [`GateMeta`]: the gate's copy of a voucher's rules, the `meta` hash that `lua/rules.lua`
//! reads. It names the hash's fields, so it lives with the gate; the rules it copies are the
//! domain's [`VoucherRules`].

use crate::domain::{Discount, VoucherRules};

/// The voucher's rules a gate needs to decide without Postgres (its `meta` hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateMeta {
    pub discount: Discount,
    pub min_order: i64,
    pub starts_ms: i64,
    pub ends_ms: i64,
    pub per_user: i64,
    pub ttl_ms: i64,
    pub active: bool,
    /// The voucher's version these rules were read at.
    pub version: i64,
}

impl GateMeta {
    /// The gate's copy of a voucher's `rules` at `version`.
    pub fn of(rules: &VoucherRules, ttl_seconds: i32, version: i64) -> GateMeta {
        GateMeta {
            discount: rules.discount,
            min_order: rules.min_order_amount,
            starts_ms: rules.starts_at.timestamp_millis(),
            ends_ms: rules.ends_at.timestamp_millis(),
            per_user: rules.per_user_limit.into(),
            ttl_ms: i64::from(ttl_seconds) * 1000,
            active: rules.active,
            version,
        }
    }

    /// The `meta` hash's fields as written to Redis: the one place they are named (lua/rules.lua
    /// reads them).
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let (amount, percent, cap) = self.discount.columns();
        let text = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
        vec![
            ("discount", text(amount)),
            ("percent", text(percent.map(i64::from))),
            ("max_discount", text(cap)),
            ("min_order", self.min_order.to_string()),
            ("starts_ms", self.starts_ms.to_string()),
            ("ends_ms", self.ends_ms.to_string()),
            ("per_user", self.per_user.to_string()),
            ("ttl_ms", self.ttl_ms.to_string()),
            ("active", if self.active { "1" } else { "0" }.to_owned()),
            ("version", self.version.to_string()),
        ]
    }

    /// Rules that refuse whatever either `self` or `other` refuses (the discount and version are
    /// `self`'s): what the gate holds while a change is on its way to Postgres, so that no
    /// reserve is granted that the old or the new rules would refuse.
    pub fn stricter(&self, other: &GateMeta) -> GateMeta {
        GateMeta {
            min_order: self.min_order.max(other.min_order),
            starts_ms: self.starts_ms.max(other.starts_ms),
            ends_ms: self.ends_ms.min(other.ends_ms),
            per_user: self.per_user.min(other.per_user),
            active: self.active && other.active,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_holds_the_stricter_rules_while_a_change_is_on_its_way() {
        let meta = |per_user, active, min_order, starts_ms, ends_ms| GateMeta {
            discount: Discount::Fixed(1),
            min_order,
            starts_ms,
            ends_ms,
            per_user,
            ttl_ms: 1000,
            active,
            version: 1,
        };
        let old = meta(3, true, 100, 10, 50);
        let new = GateMeta {
            version: 2,
            discount: Discount::Fixed(9),
            ..meta(1, false, 50, 20, 60)
        };
        let strict = old.stricter(&new);
        assert_eq!(
            strict,
            meta(1, false, 100, 20, 50),
            "old discount and version"
        );
        assert_eq!(new.stricter(&old).per_user, 1);
    }
}
