//! [`GrantRules`]: the rules of one version of a voucher, as far as they decide a single use.
//! Mode B's consumer checks every `voucher-reserved` event against the rules that granted it
//! (the version the gate stamped on it), so that an event the rules never granted (forged, or
//! corrupted on its way) cannot land a use or a discount: it goes to the dead letters with the
//! reason. The limits (total, per customer) are not here: Postgres enforces them when the row is
//! merged, whatever the event says.

use chrono::DateTime;

use super::{rfc3339, Discount, Invalid};

/// How long after a change the gate may still grant under the rules it replaced: until the
/// change's last gate step, or, when that step failed, until the next sweep brings the gate to
/// the database's rules (a minute apart). A use stamped with superseded rules but made later than
/// this was not granted by the gate: it would let a forged event pick the older, looser rules.
pub const SUPERSEDED_GRACE_MS: i64 = 10 * 60 * 1000;

/// How far ahead of the consumer's clock a reservation's instant may be (clocks of different
/// hosts): a use made later than that was not made yet.
pub const CLOCK_SKEW_MS: i64 = 60 * 1000;

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
    /// When a change replaced these rules (None: they are the voucher's current ones).
    pub superseded_at_ms: Option<i64>,
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
    /// Why these rules would not have granted `claim` by `now_ms`, naming the event's field at
    /// fault, or None. The gate decides with the same rules at the instant it stamps as
    /// `reservedAtMs`, in the same order (lua/rules.lua), so a use it granted always passes.
    pub fn refusal(&self, claim: &Claim, now_ms: i64) -> Option<Invalid> {
        let at =
            |ms: i64| DateTime::from_timestamp_millis(ms).map_or_else(|| ms.to_string(), rfc3339);
        let v = self.version;
        if claim.reserved_ms > now_ms.saturating_add(CLOCK_SKEW_MS) {
            return Some(Invalid::new(
                "reservedAtMs",
                format!("{} has not come yet", at(claim.reserved_ms)),
            ));
        }
        if let Some(replaced) = self.superseded_at_ms {
            if claim.reserved_ms > replaced.saturating_add(SUPERSEDED_GRACE_MS) {
                return Some(Invalid::new(
                    "reservedAtMs",
                    format!(
                        "{} is after rules version {v} were replaced, at {}",
                        at(claim.reserved_ms),
                        at(replaced)
                    ),
                ));
            }
        }
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
            superseded_at_ms: None,
        }
    }

    const NOW: i64 = T0 + 7_200_000;

    fn claim() -> Claim {
        Claim {
            order_amount: 300,
            discount: 30,
            reserved_ms: T0 + 1_000,
            expires_ms: T0 + 1_000 + 900_000,
        }
    }

    fn field(r: &GrantRules, c: Claim) -> Option<&'static str> {
        r.refusal(&c, NOW).map(|e| e.field)
    }

    #[test]
    fn what_the_gate_grants_passes() {
        assert_eq!(rules().refusal(&claim(), NOW), None);
        let capped = Claim {
            order_amount: 10_000,
            discount: 50,
            ..claim()
        };
        assert_eq!(rules().refusal(&capped, NOW), None);
        let at_the_start = Claim {
            reserved_ms: T0,
            expires_ms: T0 + 60_000,
            ..claim()
        };
        assert_eq!(
            rules().refusal(&at_the_start, NOW),
            None,
            "a shorter hold is fine"
        );
        let replaced_just_after = GrantRules {
            superseded_at_ms: Some(claim().reserved_ms - SUPERSEDED_GRACE_MS),
            ..rules()
        };
        assert_eq!(
            replaced_just_after.refusal(&claim(), NOW),
            None,
            "the gate may still hold the replaced rules for a while"
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
        let future = Claim {
            reserved_ms: NOW + CLOCK_SKEW_MS + 1,
            expires_ms: NOW + CLOCK_SKEW_MS + 2,
            ..claim()
        };
        assert_eq!(field(&r, future), Some("reservedAtMs"), "not made yet");
        let replaced_long_before = GrantRules {
            superseded_at_ms: Some(claim().reserved_ms - SUPERSEDED_GRACE_MS - 1),
            ..r
        };
        assert_eq!(
            field(&replaced_long_before, claim()),
            Some("reservedAtMs"),
            "a forged event cannot pick rules replaced long before its use"
        );
        let msg = r
            .refusal(
                &Claim {
                    discount: 300,
                    ..claim()
                },
                NOW,
            )
            .unwrap()
            .to_string();
        assert!(
            msg.contains("discount of 30") && msg.contains("version 3"),
            "{msg}"
        );
    }
}
