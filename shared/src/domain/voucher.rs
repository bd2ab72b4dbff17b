//! Creating a voucher: the `POST /vouchers` body, its limits, and the rules it must pass to
//! become a [`NewVoucher`] (whose [`VoucherRules`] a patch may later change).

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::time::instant;
use super::{amount, Discount, Invalid, VoucherCode};

pub const MAX_TOTAL_LIMIT: i64 = 1_000_000_000;
pub const MAX_TTL_SECONDS: i64 = 7 * 24 * 3600;
pub const DEFAULT_TTL_SECONDS: i64 = 900;
/// Most counter slots a voucher's limit may be split into (docs/ARCHITECTURE.md, "Counter
/// slots").
pub const MAX_COUNTER_SLOTS: i64 = 64;
/// Most slots chosen automatically: past this, more slots only spread the last uses thinner.
pub const AUTO_COUNTER_SLOTS: i64 = 32;

/// The counter slots chosen for a limit when the create body names none: one for a tiny limit
/// (nothing to spread), then one per 16 uses, up to [`AUTO_COUNTER_SLOTS`].
pub fn counter_slots_for(total_limit: i64) -> i64 {
    (total_limit / 16).clamp(1, AUTO_COUNTER_SLOTS)
}

/// `POST /vouchers` body, as received. Exactly one of `discountAmount` and `discountPercent`;
/// `maxDiscountAmount` only with `discountPercent`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = CreateVoucher)]
pub struct CreateVoucherRequest {
    /// Voucher code, case-insensitive; stored and returned upper-case.
    #[schema(value_type = super::VoucherCode)]
    pub code: String,
    /// Fixed discount in minor units (a fixed-amount voucher).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub discount_amount: Option<i64>,
    /// Discount as a percentage of the order amount (a percentage voucher).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub discount_percent: Option<i64>,
    /// Cap on a percentage voucher's discount, in minor units. null: no cap.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub max_discount_amount: Option<i64>,
    /// Smallest order amount the voucher applies to.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64, default = 0)]
    pub min_order_amount: i64,
    /// Most uses held at once (RESERVED + CONFIRMED).
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub total_limit: i64,
    /// Most uses one customer may hold.
    #[serde(default = "one")]
    #[schema(minimum = 1, maximum = 2_147_483_647, default = 1)]
    pub per_user_limit: i64,
    /// Start of the sale (RFC 3339; must be before endsAt).
    pub starts_at: DateTime<Utc>,
    /// End of the sale (RFC 3339; must be after startsAt).
    pub ends_at: DateTime<Utc>,
    /// Flash-sale voucher: reserves go through the Redis gate.
    #[serde(default)]
    #[schema(default = false)]
    pub flash_sale: bool,
    /// Never combined with another code in one order (`POST /orders/{orderId}/reservations`
    /// answers 409 NOT_COMBINABLE); alone it works as any voucher. Never changes after creation.
    #[serde(default)]
    #[schema(default = false)]
    pub exclusive: bool,
    /// An inactive voucher refuses reserves and validations (422 NOT_ELIGIBLE, reason
    /// INACTIVE).
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub active: bool,
    /// How long a reservation holds its use before the sweeper releases it (1 s to 7 days).
    #[serde(default = "default_ttl")]
    #[schema(minimum = 1, maximum = 604_800, default = 900)]
    pub reservation_ttl_seconds: i64,
    /// Counter slots the limit is split into in Postgres (1-64, at most totalLimit). Absent or
    /// null: one per 16 uses, 1 to 32.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 64)]
    pub counter_slots: Option<i64>,
    /// The most the voucher's active uses (RESERVED + CONFIRMED) may take in discounts,
    /// summed, in minor units: a reserve whose discount is larger than what is left is refused
    /// (409 BUDGET_EXHAUSTED). Absent or null: no budget. A flash-sale voucher's gate keeps it
    /// too.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub budget_amount: Option<i64>,
    /// What the operator calls it: 1-200 characters.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200)]
    pub name: Option<String>,
    /// Keys of your own: at most 50, each up to 40 characters, with string values up to 500.
    #[serde(default)]
    pub metadata: Option<std::collections::BTreeMap<String, String>>,
}

fn one() -> i64 {
    1
}

fn yes() -> bool {
    true
}

fn default_ttl() -> i64 {
    DEFAULT_TTL_SECONDS
}

/// A flash-sale voucher created without a budget cannot be given one (its gate does not keep
/// the discounts of the uses still on their way to the database apart).
pub fn flash_budget() -> Invalid {
    Invalid::new(
        "budgetAmount",
        "a flash-sale voucher created without a budget cannot be given one",
    )
}

pub(super) fn in_range(field: &'static str, v: i64, lo: i64, hi: i64) -> Result<i32, Invalid> {
    if (lo..=hi).contains(&v) {
        Ok(v as i32)
    } else {
        Err(Invalid::new(
            field,
            format!("must be an integer from {lo} to {hi}"),
        ))
    }
}

/// What a voucher's rules are, all of which can be changed later with
/// [`VoucherPatch`](super::VoucherPatch), as can the counter slots (kept apart: they are how
/// Postgres counts, not what a reserve is granted under); the code, the TTL and the kind never
/// change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoucherRules {
    pub discount: Discount,
    pub min_order_amount: i64,
    pub total_limit: i32,
    pub per_user_limit: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub active: bool,
    /// The most the active uses may take in discounts, summed (docs/ARCHITECTURE.md,
    /// "Budgets"); None: no budget.
    pub budget_amount: Option<i64>,
}

/// A voucher that passed every rule; only this can be stored.
#[derive(Debug, Clone)]
pub struct NewVoucher {
    pub code: VoucherCode,
    pub name: Option<String>,
    pub metadata: super::Metadata,
    pub rules: VoucherRules,
    pub flash_sale: bool,
    pub exclusive: bool,
    pub reservation_ttl_seconds: i32,
    pub counter_slots: i16,
}

impl TryFrom<CreateVoucherRequest> for NewVoucher {
    type Error = Invalid;

    fn try_from(r: CreateVoucherRequest) -> Result<Self, Invalid> {
        let code = VoucherCode::parse(&r.code)?;
        let discount =
            Discount::parse(r.discount_amount, r.discount_percent, r.max_discount_amount)?;
        let starts_at = instant("startsAt", r.starts_at)?;
        let ends_at = instant("endsAt", r.ends_at)?;
        if r.ends_at <= r.starts_at {
            return Err(Invalid::new("endsAt", "must be after startsAt"));
        }
        let total_limit = in_range("totalLimit", r.total_limit, 1, MAX_TOTAL_LIMIT)?;
        let counter_slots = match r.counter_slots {
            None => counter_slots_for(r.total_limit),
            // A slot with no use to hold would only be walked past.
            Some(k) => i64::from(in_range(
                "counterSlots",
                k,
                1,
                MAX_COUNTER_SLOTS.min(r.total_limit),
            )?),
        };
        let budget_amount = r
            .budget_amount
            .map(|b| amount("budgetAmount", b))
            .transpose()?;
        Ok(NewVoucher {
            code,
            name: r.name.map(super::description::name).transpose()?,
            metadata: super::description::metadata(r.metadata.unwrap_or_default())?,
            rules: VoucherRules {
                discount,
                min_order_amount: amount("minOrderAmount", r.min_order_amount)?,
                total_limit,
                per_user_limit: in_range("perUserLimit", r.per_user_limit, 1, i32::MAX as i64)?,
                starts_at,
                ends_at,
                active: r.active,
                budget_amount,
            },
            flash_sale: r.flash_sale,
            exclusive: r.exclusive,
            reservation_ttl_seconds: in_range(
                "reservationTtlSeconds",
                r.reservation_ttl_seconds,
                1,
                MAX_TTL_SECONDS,
            )?,
            counter_slots: counter_slots as i16,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_slots_grow_with_the_limit_up_to_a_bound() {
        assert_eq!(counter_slots_for(1), 1);
        assert_eq!(counter_slots_for(31), 1);
        assert_eq!(counter_slots_for(160), 10);
        assert_eq!(counter_slots_for(1_000), AUTO_COUNTER_SLOTS);
        assert_eq!(counter_slots_for(MAX_TOTAL_LIMIT), AUTO_COUNTER_SLOTS);
    }

    #[test]
    fn voucher_rules_name_the_field() {
        let base = || CreateVoucherRequest {
            code: "A".into(),
            discount_amount: Some(1),
            discount_percent: None,
            max_discount_amount: None,
            min_order_amount: 0,
            total_limit: 10,
            per_user_limit: 1,
            starts_at: Utc::now(),
            ends_at: Utc::now() + chrono::Duration::hours(1),
            flash_sale: false,
            exclusive: false,
            active: true,
            reservation_ttl_seconds: 900,
            counter_slots: None,
            budget_amount: None,
            name: None,
            metadata: None,
        };
        assert!(NewVoucher::try_from(base()).is_ok());
        let field = |r: CreateVoucherRequest| NewVoucher::try_from(r).unwrap_err().field;
        assert_eq!(
            field(CreateVoucherRequest {
                counter_slots: Some(11),
                ..base()
            }),
            "counterSlots",
            "more slots than uses"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                counter_slots: Some(0),
                ..base()
            }),
            "counterSlots"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                total_limit: 0,
                ..base()
            }),
            "totalLimit"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                total_limit: MAX_TOTAL_LIMIT + 1,
                ..base()
            }),
            "totalLimit"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                discount_amount: Some(-1),
                ..base()
            }),
            "discountAmount"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                discount_amount: None,
                ..base()
            }),
            "discountAmount",
            "neither discount"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                discount_percent: Some(10),
                ..base()
            }),
            "discountPercent",
            "both discounts"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                max_discount_amount: Some(10),
                ..base()
            }),
            "maxDiscountAmount",
            "a cap on a fixed discount"
        );
        for bad in [0, 101] {
            assert_eq!(
                field(CreateVoucherRequest {
                    discount_amount: None,
                    discount_percent: Some(bad),
                    ..base()
                }),
                "discountPercent"
            );
        }
        let percent = NewVoucher::try_from(CreateVoucherRequest {
            discount_amount: None,
            discount_percent: Some(15),
            max_discount_amount: Some(500),
            ..base()
        })
        .unwrap();
        assert_eq!(
            percent.rules.discount,
            Discount::Percent {
                percent: 15,
                cap: Some(500)
            }
        );
        assert_eq!(
            field(CreateVoucherRequest {
                per_user_limit: 0,
                ..base()
            }),
            "perUserLimit"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                reservation_ttl_seconds: MAX_TTL_SECONDS + 1,
                ..base()
            }),
            "reservationTtlSeconds"
        );
        let b = base();
        assert_eq!(
            field(CreateVoucherRequest {
                ends_at: b.starts_at,
                ..b
            }),
            "endsAt"
        );
    }
}
