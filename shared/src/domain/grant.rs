//! [`GrantRules`]: the rules of one version of a voucher, as far as they decide a single use.
//! Mode B's consumer checks every `voucher-reserved` event against the rules that granted it
//! (the version the gate stamped on it), so that an event the rules never granted (forged, or
//! corrupted on its way) cannot land a use or a discount: it goes to the dead letters with the
//! reason. The limits (total, per customer) are not here: Postgres enforces them when the row is
//! merged, whatever the event says.

use chrono::DateTime;

use super::{rfc3339, Discount, Invalid};

/// One version of a voucher's rules that decide a use, and the voucher's reservation TTL (which
/// no change alters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantRules {
    pub version: i64,
    pub discount: Discount,
    pub min_order_amount: i64,
    pub starts_at_ms: i64,
    pub ends_at_ms: i64,
    pub active: bool,
    pub ttl_ms: i64,
}

/// What an event says was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub order_amount: i64,
    pub discount: i64,
    pub reserved_ms: i64,
    pub expires_ms: i64,
}

impl GrantRules {
    /// Why these rules would not have granted `claim`, naming the event's field at fault, or
    /// None. The gate decides with the same rules at the instant it stamps as `reservedAtMs`,
    /// in the same order (lua/rules.lua), so a use it granted always passes.
    pub fn refusal(&self, claim: &Claim) -> Option<Invalid> {
        let at =
            |ms: i64| DateTime::from_timestamp_millis(ms).map_or_else(|| ms.to_string(), rfc3339);
        let v = self.version;
        if !self.active {
            return Some(Invalid::new(
                "reservedAtMs",
                format!("the voucher was paused then (rules version {v})"),
            ));
        }
        if claim.reserved_ms < self.starts_at_ms || claim.reserved_ms >= self.ends_at_ms {
            return Some(Invalid::new(
                "reservedAtMs",
                format!(
                    "{} is outside the voucher's window {} to {} (rules version {v})",
                    at(claim.reserved_ms),
                    at(self.starts_at_ms),
                    at(self.ends_at_ms)
                ),
            ));
        }
        if claim.order_amount < self.min_order_amount {
            return Some(Invalid::new(
                "orderAmount",
                format!(
                    "below the voucher's minimum order of {} (rules version {v})",
                    self.min_order_amount
                ),
            ));
        }
        let discount = self.discount.off(claim.order_amount);
        if claim.discount != discount {
            return Some(Invalid::new(
                "discountAmount",
                format!(
                    "{} is not the voucher's discount of {discount} for an order of {} \
                     (rules version {v})",
                    claim.discount, claim.order_amount
                ),
            ));
        }
        if claim.expires_ms > claim.reserved_ms.saturating_add(self.ttl_ms) {
            return Some(Invalid::new(
                "expiresAtMs",
                format!(
                    "past reservedAtMs plus the voucher's reservation TTL of {} s",
                    self.ttl_ms / 1000
                ),
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000_000;

    fn rules() -> GrantRules {
        GrantRules {
            version: 3,
            discount: Discount::Percent {
                percent: 10,
                cap: Some(50),
            },
            min_order_amount: 100,
            starts_at_ms: T0,
            ends_at_ms: T0 + 3_600_000,
            active: true,
            ttl_ms: 900_000,
        }
    }

    fn claim() -> Claim {
        Claim {
            order_amount: 300,
            discount: 30,
            reserved_ms: T0 + 1_000,
            expires_ms: T0 + 1_000 + 900_000,
        }
    }

    fn field(r: &GrantRules, c: Claim) -> Option<&'static str> {
        r.refusal(&c).map(|e| e.field)
    }

    #[test]
    fn what_the_gate_grants_passes() {
        assert_eq!(rules().refusal(&claim()), None);
        let capped = Claim {
            order_amount: 10_000,
            discount: 50,
            ..claim()
        };
        assert_eq!(rules().refusal(&capped), None);
        let at_the_start = Claim {
            reserved_ms: T0,
            expires_ms: T0 + 60_000,
            ..claim()
        };
        assert_eq!(
            rules().refusal(&at_the_start),
            None,
            "a shorter hold is fine"
        );
    }

    #[test]
    fn a_claim_the_rules_never_granted_is_named() {
        let r = rules();
        let paused = GrantRules { active: false, ..r };
        assert_eq!(field(&paused, claim()), Some("reservedAtMs"));
        for reserved_ms in [T0 - 1, T0 + 3_600_000] {
            let c = Claim {
                reserved_ms,
                expires_ms: reserved_ms + 1,
                ..claim()
            };
            assert_eq!(field(&r, c), Some("reservedAtMs"), "{reserved_ms}");
        }
        let small = Claim {
            order_amount: 99,
            discount: 9,
            ..claim()
        };
        assert_eq!(field(&r, small), Some("orderAmount"));
        for discount in [31, 29, 300] {
            let c = Claim {
                discount,
                ..claim()
            };
            assert_eq!(field(&r, c), Some("discountAmount"), "{discount}");
        }
        let long = Claim {
            expires_ms: claim().reserved_ms + 900_001,
            ..claim()
        };
        assert_eq!(field(&r, long), Some("expiresAtMs"));
        let msg = r
            .refusal(&Claim {
                discount: 300,
                ..claim()
            })
            .unwrap()
            .to_string();
        assert!(
            msg.contains("discount of 30") && msg.contains("version 3"),
            "{msg}"
        );
    }
}
