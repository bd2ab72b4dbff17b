//! Changing a voucher: the `PATCH /vouchers/{code}` body and the rules a [`VoucherPatch`]
//! must pass, alone and against the voucher's current [`VoucherRules`].

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::discount::percent_of;
use super::time::instant;
use super::voucher::in_range;
use super::{amount, Discount, Invalid, VoucherRules, MAX_COUNTER_SLOTS, MAX_TOTAL_LIMIT};

/// `PATCH /vouchers/{code}` body, as received: every field optional, none may be `null` but
/// `maxDiscountAmount` and `budgetAmount`, where `null` removes the cap or the budget (hence the
/// double Option: absent, null, a value). `{}` changes nothing; discountAmount and
/// discountPercent together are refused.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = UpdateVoucher)]
pub struct PatchVoucherRequest {
    /// Most uses held at once (RESERVED + CONFIRMED); never below the uses held (409
    /// LIMIT_BELOW_USED).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(minimum = 1, maximum = 1_000_000_000, nullable = false)]
    pub total_limit: Option<i64>,
    /// Most uses one customer may hold.
    #[serde(default, deserialize_with = "not_null")]
    #[schema(minimum = 1, maximum = 2_147_483_647, nullable = false)]
    pub per_user_limit: Option<i64>,
    /// Start of the sale (RFC 3339; must be before endsAt).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false)]
    pub starts_at: Option<DateTime<Utc>>,
    /// End of the sale (RFC 3339; must be after startsAt).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false)]
    pub ends_at: Option<DateTime<Utc>>,
    /// An inactive voucher refuses reserves and validations (422 NOT_ELIGIBLE, reason
    /// INACTIVE).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false)]
    pub active: Option<bool>,
    /// Fixed discount in minor units (fixed-amount vouchers only).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64, nullable = false)]
    pub discount_amount: Option<i64>,
    /// Discount as a percentage of the order amount (percentage vouchers only).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(minimum = 1, maximum = 100, nullable = false)]
    pub discount_percent: Option<i64>,
    /// Cap on a percentage voucher's discount; null removes the cap.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub max_discount_amount: Option<Option<i64>>,
    /// Smallest order amount the voucher applies to.
    #[serde(default, deserialize_with = "not_null")]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64, nullable = false)]
    pub min_order_amount: Option<i64>,
    /// Counter slots the limit is split into in the database, at most totalLimit. More slots
    /// let more winners commit at once; a slot is removed only while it counts no use (409
    /// SLOTS_IN_USE).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(minimum = 1, maximum = 64, nullable = false)]
    pub counter_slots: Option<i64>,
    /// The money budget; null removes it. Never below the discounts held (409
    /// BUDGET_BELOW_USED). A flash-sale voucher created without a budget cannot be given one
    /// (400).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub budget_amount: Option<Option<i64>>,
    /// What the operator calls it: 1-200 characters; null removes the name.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 200)]
    pub name: Option<Option<String>>,
    /// Merged key by key: a key with a string is written, a key with null removed. At most 50
    /// keys after the merge (400 naming metadata), each up to 40 characters, values up to 500.
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false)]
    pub metadata: Option<std::collections::BTreeMap<String, Option<String>>>,
}

/// A field that is present must hold a value (absent is `None`; `null` is refused).
pub(super) fn not_null<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// A field that is present, even as `null`, is `Some`.
pub(super) fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A change to a voucher whose every field passed its own rule; [`VoucherPatch::apply`] checks
/// the rules between fields against the voucher's current ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VoucherPatch {
    pub total_limit: Option<i32>,
    pub per_user_limit: Option<i32>,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub active: Option<bool>,
    pub discount_amount: Option<i64>,
    pub discount_percent: Option<i16>,
    pub max_discount_amount: Option<Option<i64>>,
    pub min_order_amount: Option<i64>,
    /// Counter slots the limit is split into (docs/ARCHITECTURE.md, "Counter slots"); checked
    /// against the new limit by [`VoucherPatch::slots`].
    pub counter_slots: Option<i16>,
    /// Some(None) removes the budget.
    pub budget_amount: Option<Option<i64>>,
    /// Name and metadata: no rule of the sale.
    pub description: super::Description,
}

impl TryFrom<PatchVoucherRequest> for VoucherPatch {
    type Error = Invalid;

    fn try_from(r: PatchVoucherRequest) -> Result<Self, Invalid> {
        if r.discount_amount.is_some() && r.discount_percent.is_some() {
            return Err(Invalid::new(
                "discountPercent",
                "give either discountAmount or discountPercent, not both",
            ));
        }
        Ok(VoucherPatch {
            total_limit: r
                .total_limit
                .map(|v| in_range("totalLimit", v, 1, MAX_TOTAL_LIMIT))
                .transpose()?,
            per_user_limit: r
                .per_user_limit
                .map(|v| in_range("perUserLimit", v, 1, i32::MAX as i64))
                .transpose()?,
            starts_at: r.starts_at.map(|t| instant("startsAt", t)).transpose()?,
            ends_at: r.ends_at.map(|t| instant("endsAt", t)).transpose()?,
            active: r.active,
            discount_amount: r
                .discount_amount
                .map(|a| amount("discountAmount", a))
                .transpose()?,
            discount_percent: r.discount_percent.map(percent_of).transpose()?,
            max_discount_amount: r
                .max_discount_amount
                .map(|cap| cap.map(|c| amount("maxDiscountAmount", c)).transpose())
                .transpose()?,
            min_order_amount: r
                .min_order_amount
                .map(|a| amount("minOrderAmount", a))
                .transpose()?,
            counter_slots: r
                .counter_slots
                .map(|k| in_range("counterSlots", k, 1, MAX_COUNTER_SLOTS).map(|k| k as i16))
                .transpose()?,
            budget_amount: r
                .budget_amount
                .map(|b| b.map(|b| amount("budgetAmount", b)).transpose())
                .transpose()?,
            description: super::Description::parse(r.name, r.metadata)?,
        })
    }
}

impl VoucherPatch {
    /// The slot count this change asks for, when it differs from the voucher's `current` one;
    /// as at creation, no more slots than the limit (`next` rules) has uses.
    pub fn slots(&self, current: i16, next: &VoucherRules) -> Result<Option<i16>, Invalid> {
        match self.counter_slots {
            Some(k) if i64::from(k) > i64::from(next.total_limit) => Err(Invalid::new(
                "counterSlots",
                format!(
                    "must be an integer from 1 to {}, the limit",
                    next.total_limit
                ),
            )),
            Some(k) if k != current => Ok(Some(k)),
            _ => Ok(None),
        }
    }

    /// The voucher's rules after this change.
    pub fn apply(&self, current: &VoucherRules) -> Result<VoucherRules, Invalid> {
        let current_cap = match current.discount {
            Discount::Percent { cap, .. } => cap,
            Discount::Fixed(_) => None,
        };
        let discount = match (
            self.discount_amount,
            self.discount_percent,
            current.discount,
        ) {
            (Some(a), _, _) => Discount::Fixed(a),
            (None, Some(percent), _) => Discount::Percent {
                percent,
                cap: self.max_discount_amount.unwrap_or(current_cap),
            },
            (None, None, Discount::Percent { percent, cap }) => Discount::Percent {
                percent,
                cap: self.max_discount_amount.unwrap_or(cap),
            },
            (None, None, fixed @ Discount::Fixed(_)) => fixed,
        };
        if matches!(discount, Discount::Fixed(_))
            && matches!(self.max_discount_amount, Some(Some(_)))
        {
            return Err(Invalid::new(
                "maxDiscountAmount",
                "applies only to a discountPercent voucher",
            ));
        }
        let next = VoucherRules {
            discount,
            min_order_amount: self.min_order_amount.unwrap_or(current.min_order_amount),
            total_limit: self.total_limit.unwrap_or(current.total_limit),
            per_user_limit: self.per_user_limit.unwrap_or(current.per_user_limit),
            starts_at: self.starts_at.unwrap_or(current.starts_at),
            ends_at: self.ends_at.unwrap_or(current.ends_at),
            active: self.active.unwrap_or(current.active),
            budget_amount: self.budget_amount.unwrap_or(current.budget_amount),
        };
        if next.ends_at <= next.starts_at {
            let field = if self.ends_at.is_some() {
                "endsAt"
            } else {
                "startsAt"
            };
            return Err(Invalid::new(field, "endsAt must be after startsAt"));
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::rfc3339;

    fn rules() -> VoucherRules {
        // A fixed instant: rules built twice must be equal (`now` read twice was not, once the
        // clock moved a millisecond between the two).
        let starts_at = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        VoucherRules {
            discount: Discount::Percent {
                percent: 10,
                cap: Some(50),
            },
            min_order_amount: 0,
            total_limit: 100,
            per_user_limit: 2,
            starts_at,
            ends_at: starts_at + chrono::Duration::hours(1),
            active: true,
            budget_amount: None,
        }
    }

    fn patch(json: &str) -> Result<VoucherRules, Invalid> {
        let request: PatchVoucherRequest = serde_json::from_str(json).unwrap();
        VoucherPatch::try_from(request)?.apply(&rules())
    }

    #[test]
    fn a_patch_changes_only_what_it_names() {
        assert_eq!(patch("{}").unwrap(), rules());
        let next = patch(r#"{"totalLimit": 5, "active": false}"#).unwrap();
        assert_eq!((next.total_limit, next.active), (5, false));
        assert_eq!(next.discount, rules().discount);
    }

    #[test]
    fn a_patch_switches_discounts_and_keeps_or_drops_the_cap() {
        assert_eq!(
            patch(r#"{"discountAmount": 7}"#).unwrap().discount,
            Discount::Fixed(7)
        );
        assert_eq!(
            patch(r#"{"discountPercent": 20}"#).unwrap().discount,
            Discount::Percent {
                percent: 20,
                cap: Some(50)
            },
            "the cap stays"
        );
        assert_eq!(
            patch(r#"{"maxDiscountAmount": null}"#).unwrap().discount,
            Discount::Percent {
                percent: 10,
                cap: None
            },
            "null removes the cap"
        );
        assert_eq!(
            patch(r#"{"discountAmount": 7, "maxDiscountAmount": 3}"#)
                .unwrap_err()
                .field,
            "maxDiscountAmount"
        );
        assert_eq!(
            patch(r#"{"discountAmount": 7, "discountPercent": 3}"#)
                .unwrap_err()
                .field,
            "discountPercent"
        );
    }

    #[test]
    fn a_patch_keeps_the_window_ordered_and_names_the_field() {
        let r = rules();
        let at = |t: DateTime<Utc>| format!("\"{}\"", rfc3339(t));
        assert_eq!(
            patch(&format!(r#"{{"endsAt": {}}}"#, at(r.starts_at)))
                .unwrap_err()
                .field,
            "endsAt"
        );
        assert_eq!(
            patch(&format!(r#"{{"startsAt": {}}}"#, at(r.ends_at)))
                .unwrap_err()
                .field,
            "startsAt"
        );
        for (json, field) in [
            (r#"{"totalLimit": 0}"#, "totalLimit"),
            (r#"{"perUserLimit": 0}"#, "perUserLimit"),
            (r#"{"discountPercent": 101}"#, "discountPercent"),
            (r#"{"maxDiscountAmount": -1}"#, "maxDiscountAmount"),
            (r#"{"minOrderAmount": -1}"#, "minOrderAmount"),
            (r#"{"counterSlots": 0}"#, "counterSlots"),
            (r#"{"counterSlots": 65}"#, "counterSlots"),
        ] {
            assert_eq!(patch(json).unwrap_err().field, field, "{json}");
        }
    }

    #[test]
    fn a_slot_count_is_asked_only_when_it_changes_and_fits_the_new_limit() {
        let slots = |json: &str, current: i16| {
            let request: PatchVoucherRequest = serde_json::from_str(json).unwrap();
            let change = VoucherPatch::try_from(request).unwrap();
            let next = change.apply(&rules()).unwrap();
            change.slots(current, &next)
        };
        assert_eq!(slots("{}", 4), Ok(None));
        assert_eq!(slots(r#"{"counterSlots": 4}"#, 4), Ok(None));
        assert_eq!(slots(r#"{"counterSlots": 32}"#, 4), Ok(Some(32)));
        assert_eq!(slots(r#"{"counterSlots": 1}"#, 4), Ok(Some(1)));
        assert_eq!(
            slots(r#"{"counterSlots": 8, "totalLimit": 5}"#, 1)
                .unwrap_err()
                .field,
            "counterSlots"
        );
        assert_eq!(
            slots(r#"{"counterSlots": 5, "totalLimit": 5}"#, 1),
            Ok(Some(5))
        );
    }
}
