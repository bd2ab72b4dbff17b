//! The domain: validated identifiers, amounts, the reservation status lattice and the views the
//! API returns. Nothing here does I/O, so the rules are unit-tested without a database.

mod amounts;
mod ids;
mod invalid;
mod outcome;
mod status;
mod time;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use amounts::{amount, MAX_AMOUNT};
pub use ids::{customer_id, OrderId, VoucherCode};
pub use invalid::Invalid;
pub use outcome::{Held, ReserveOutcome};
pub use status::{active_delta, ReleaseReason, Status};
pub use time::{millis, rfc3339};
use time::{rfc3339_ms, rfc3339_ms_or_null};

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

/// `POST /vouchers` body, as received.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateVoucherRequest {
    pub code: String,
    /// A fixed discount; or `discount_percent` (with an optional `max_discount_amount`).
    #[serde(default)]
    pub discount_amount: Option<i64>,
    #[serde(default)]
    pub discount_percent: Option<i64>,
    #[serde(default)]
    pub max_discount_amount: Option<i64>,
    #[serde(default)]
    pub min_order_amount: i64,
    pub total_limit: i64,
    #[serde(default = "one")]
    pub per_user_limit: i64,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    #[serde(default)]
    pub flash_sale: bool,
    #[serde(default = "yes")]
    pub active: bool,
    #[serde(default = "default_ttl")]
    pub reservation_ttl_seconds: i64,
    /// Counter slots the limit is split into; chosen from the limit when absent.
    #[serde(default)]
    pub counter_slots: Option<i64>,
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

/// How a voucher discounts an order. The amount a reservation gets is computed where the use is
/// granted (`fg_discount` in SQL, `lua/rules.lua` in the gate), fixed then and stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discount {
    /// This many minor units off.
    Fixed(i64),
    /// `floor(orderAmount * percent / 100)`, at most `cap`.
    Percent { percent: i16, cap: Option<i64> },
}

impl Discount {
    /// The body's discount fields: exactly one of `discountAmount` or `discountPercent`, and
    /// `maxDiscountAmount` only with a percentage.
    fn parse(
        amount: Option<i64>,
        percent: Option<i64>,
        cap: Option<i64>,
    ) -> Result<Discount, Invalid> {
        let cap = cap
            .map(|c| self::amount("maxDiscountAmount", c))
            .transpose()?;
        match (amount, percent) {
            (Some(_), Some(_)) => Err(Invalid::new(
                "discountPercent",
                "give either discountAmount or discountPercent, not both",
            )),
            (None, None) => Err(Invalid::new(
                "discountAmount",
                "one of discountAmount or discountPercent is required",
            )),
            (Some(_), None) if cap.is_some() => Err(Invalid::new(
                "maxDiscountAmount",
                "applies only to a discountPercent voucher",
            )),
            (Some(a), None) => Ok(Discount::Fixed(self::amount("discountAmount", a)?)),
            (None, Some(p)) => Ok(Discount::Percent {
                percent: percent_of(p)?,
                cap,
            }),
        }
    }

    /// (discount_amount, discount_percent, max_discount_amount) as stored and shown.
    pub fn columns(self) -> (Option<i64>, Option<i16>, Option<i64>) {
        match self {
            Discount::Fixed(a) => (Some(a), None, None),
            Discount::Percent { percent, cap } => (None, Some(percent), cap),
        }
    }

    /// From the stored columns (the table's CHECK allows only these shapes).
    pub fn from_columns(amount: Option<i64>, percent: Option<i16>, cap: Option<i64>) -> Discount {
        match (amount, percent) {
            (_, Some(percent)) => Discount::Percent { percent, cap },
            (amount, None) => Discount::Fixed(amount.unwrap_or(0)),
        }
    }
}

fn percent_of(p: i64) -> Result<i16, Invalid> {
    if !(1..=100).contains(&p) {
        return Err(Invalid::new(
            "discountPercent",
            "must be an integer from 1 to 100",
        ));
    }
    Ok(p as i16)
}

fn in_range(field: &'static str, v: i64, lo: i64, hi: i64) -> Result<i32, Invalid> {
    if (lo..=hi).contains(&v) {
        Ok(v as i32)
    } else {
        Err(Invalid::new(
            field,
            format!("must be an integer from {lo} to {hi}"),
        ))
    }
}

/// What a voucher's rules are; everything here but the code, the TTL, the slots and the kind
/// can be changed later with [`VoucherPatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoucherRules {
    pub discount: Discount,
    pub min_order_amount: i64,
    pub total_limit: i32,
    pub per_user_limit: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub active: bool,
}

/// A voucher that passed every rule; only this can be stored.
#[derive(Debug, Clone)]
pub struct NewVoucher {
    pub code: VoucherCode,
    pub rules: VoucherRules,
    pub flash_sale: bool,
    pub reservation_ttl_seconds: i32,
    pub counter_slots: i16,
}

impl TryFrom<CreateVoucherRequest> for NewVoucher {
    type Error = Invalid;

    fn try_from(r: CreateVoucherRequest) -> Result<Self, Invalid> {
        let code = VoucherCode::parse(&r.code)?;
        let discount =
            Discount::parse(r.discount_amount, r.discount_percent, r.max_discount_amount)?;
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
        Ok(NewVoucher {
            code,
            rules: VoucherRules {
                discount,
                min_order_amount: amount("minOrderAmount", r.min_order_amount)?,
                total_limit,
                per_user_limit: in_range("perUserLimit", r.per_user_limit, 1, i32::MAX as i64)?,
                starts_at: millis(r.starts_at),
                ends_at: millis(r.ends_at),
                active: r.active,
            },
            flash_sale: r.flash_sale,
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

/// `PATCH /vouchers/{code}` body, as received: every field optional, none may be `null` but
/// `maxDiscountAmount`, where `null` removes the cap (hence the double Option: absent, null, a
/// value).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchVoucherRequest {
    #[serde(default, deserialize_with = "not_null")]
    pub total_limit: Option<i64>,
    #[serde(default, deserialize_with = "not_null")]
    pub per_user_limit: Option<i64>,
    #[serde(default, deserialize_with = "not_null")]
    pub starts_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "not_null")]
    pub ends_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "not_null")]
    pub active: Option<bool>,
    #[serde(default, deserialize_with = "not_null")]
    pub discount_amount: Option<i64>,
    #[serde(default, deserialize_with = "not_null")]
    pub discount_percent: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    pub max_discount_amount: Option<Option<i64>>,
    #[serde(default, deserialize_with = "not_null")]
    pub min_order_amount: Option<i64>,
}

/// A field that is present must hold a value (absent is `None`; `null` is refused).
fn not_null<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// A field that is present, even as `null`, is `Some`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
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
            starts_at: r.starts_at.map(millis),
            ends_at: r.ends_at.map(millis),
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
        })
    }
}

impl VoucherPatch {
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

/// `GET /vouchers/{code}`, the 201 of `POST /vouchers`, the 200 of `PATCH` and each item of
/// `GET /vouchers`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VoucherView {
    pub code: String,
    /// A fixed discount; absent for a percentage voucher.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discount_amount: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discount_percent: Option<i16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_discount_amount: Option<i64>,
    pub min_order_amount: i64,
    pub total_limit: i64,
    pub per_user_limit: i64,
    #[serde(with = "rfc3339_ms")]
    pub starts_at: DateTime<Utc>,
    #[serde(with = "rfc3339_ms")]
    pub ends_at: DateTime<Utc>,
    pub flash_sale: bool,
    /// false: paused, reserves are refused.
    pub active: bool,
    pub reservation_ttl_seconds: i64,
    /// Counter slots the limit is split into in Postgres.
    pub counter_slots: i64,
    /// RESERVED + CONFIRMED.
    pub used_count: i64,
    pub remaining: i64,
    pub reserved_count: i64,
    pub confirmed_count: i64,
    /// Uses a gate granted that Postgres refused (only after the gate lost data; mode B).
    pub revoked_count: i64,
}

/// A page of a listing: `next` is the cursor of the page after it (None: the last page).
#[derive(Debug, Clone, Serialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// The 200 of `POST /vouchers/{code}/validations`: a reserve now would be granted this discount.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Eligibility {
    pub eligible: bool,
    pub discount_amount: i64,
}
/// `POST /vouchers/{code}/validations` body, as received.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidateRequest {
    pub customer_id: i64,
    pub order_amount: i64,
}

/// A validation that passed every rule: would this customer's order get the voucher now?
#[derive(Debug, Clone)]
pub struct Validate {
    pub code: VoucherCode,
    pub customer_id: i64,
    pub order_amount: i64,
}

impl Validate {
    pub fn parse(code: VoucherCode, r: ValidateRequest) -> Result<Self, Invalid> {
        Ok(Validate {
            code,
            customer_id: customer_id("customerId", r.customer_id)?,
            order_amount: amount("orderAmount", r.order_amount)?,
        })
    }
}

/// Most items a listing page holds, and how many when `limit` is absent.
pub const MAX_PAGE: i64 = 100;
pub const DEFAULT_PAGE: i64 = 50;

/// A listing's position: the key of the last item of the page before, as an opaque URL-safe
/// string (a cursor of one listing is refused by another).
fn cursor_encode(kind: &str, key: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{kind}:{key}"))
}

fn cursor_decode(kind: &str, cursor: &str) -> Result<String, Invalid> {
    use base64::Engine;
    let bad = || {
        Invalid::new(
            "after",
            "not a cursor of this listing: pass a page's `next`",
        )
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| bad())?;
    let text = String::from_utf8(bytes).map_err(|_| bad())?;
    text.strip_prefix(kind)
        .and_then(|rest| rest.strip_prefix(':'))
        .map(str::to_owned)
        .ok_or_else(bad)
}

fn page_limit(raw: Option<&str>) -> Result<i64, Invalid> {
    let Some(raw) = raw else {
        return Ok(DEFAULT_PAGE);
    };
    raw.parse::<i64>()
        .ok()
        .filter(|n| (1..=MAX_PAGE).contains(n))
        .ok_or_else(|| Invalid::new("limit", format!("must be an integer from 1 to {MAX_PAGE}")))
}

/// `GET /vouchers` query, as received.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VoucherListQuery {
    pub limit: Option<String>,
    pub after: Option<String>,
}

/// A page of the voucher listing, in code order.
#[derive(Debug, Clone)]
pub struct VoucherList {
    pub after: Option<VoucherCode>,
    pub limit: i64,
}

impl VoucherList {
    pub fn parse(q: VoucherListQuery) -> Result<Self, Invalid> {
        let after = match q.after.as_deref() {
            None => None,
            Some(cursor) => Some(
                VoucherCode::parse(&cursor_decode("v", cursor)?)
                    .map_err(|_| Invalid::new("after", "not a cursor of this listing"))?,
            ),
        };
        Ok(VoucherList {
            after,
            limit: page_limit(q.limit.as_deref())?,
        })
    }

    /// The `next` of a page whose last item is `code`.
    pub fn cursor(code: &str) -> String {
        cursor_encode("v", code)
    }
}

/// `GET /vouchers/{code}/reservations` query, as received.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReservationListQuery {
    pub status: Option<String>,
    pub customer_id: Option<String>,
    pub limit: Option<String>,
    pub after: Option<String>,
}

/// A page of a voucher's reservations, in orderId order, optionally of one status or customer.
#[derive(Debug, Clone)]
pub struct ReservationList {
    pub code: VoucherCode,
    pub status: Option<Status>,
    pub customer_id: Option<i64>,
    pub after: Option<OrderId>,
    pub limit: i64,
}

impl ReservationList {
    pub fn parse(code: VoucherCode, q: ReservationListQuery) -> Result<Self, Invalid> {
        let status = match q.status.as_deref() {
            None => None,
            Some("RESERVED") => Some(Status::Reserved),
            Some("CONFIRMED") => Some(Status::Confirmed),
            Some("RELEASED") => Some(Status::Released),
            Some(_) => {
                return Err(Invalid::new(
                    "status",
                    "must be RESERVED, CONFIRMED or RELEASED",
                ))
            }
        };
        let customer_id = match q.customer_id.as_deref() {
            None => None,
            Some(raw) => Some(raw.parse::<i64>().ok().filter(|c| *c >= 1).ok_or_else(|| {
                Invalid::new("customerId", "must be an integer from 1 to 2^63-1")
            })?),
        };
        let after = match q.after.as_deref() {
            None => None,
            Some(cursor) => Some(
                OrderId::parse(&cursor_decode("o", cursor)?)
                    .map_err(|_| Invalid::new("after", "not a cursor of this listing"))?,
            ),
        };
        Ok(ReservationList {
            code,
            status,
            customer_id,
            after,
            limit: page_limit(q.limit.as_deref())?,
        })
    }

    /// The `next` of a page whose last item is `order_id`.
    pub fn cursor(order_id: &str) -> String {
        cursor_encode("o", order_id)
    }
}

/// An item of `GET /vouchers/{code}/reservations`: everything stored about a reservation.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationItem {
    pub order_id: String,
    pub customer_id: i64,
    pub status: Status,
    pub discount_amount: i64,
    pub order_amount: i64,
    #[serde(with = "rfc3339_ms")]
    pub reserved_at: DateTime<Utc>,
    #[serde(with = "rfc3339_ms")]
    pub expires_at: DateTime<Utc>,
    #[serde(with = "rfc3339_ms_or_null")]
    pub confirmed_at: Option<DateTime<Utc>>,
    #[serde(with = "rfc3339_ms_or_null")]
    pub released_at: Option<DateTime<Utc>>,
    pub release_reason: Option<String>,
}

/// `POST /vouchers/{code}/reservations` body, as received.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReserveRequest {
    pub customer_id: i64,
    pub order_id: String,
    pub order_amount: i64,
}

/// A reserve request that passed every rule.
#[derive(Debug, Clone)]
pub struct Reserve {
    pub code: VoucherCode,
    pub order_id: OrderId,
    pub customer_id: i64,
    pub order_amount: i64,
}

impl Reserve {
    pub fn parse(code: VoucherCode, r: ReserveRequest) -> Result<Self, Invalid> {
        Ok(Reserve {
            code,
            order_id: OrderId::parse(&r.order_id)?,
            customer_id: customer_id("customerId", r.customer_id)?,
            order_amount: amount("orderAmount", r.order_amount)?,
        })
    }
}

/// The 201 of reserve. A retry gets exactly these bytes again, so the body is built only from
/// stored facts: `status` is the answer to "reserve", always RESERVED.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    pub order_id: String,
    pub customer_id: i64,
    pub discount_amount: i64,
    pub status: Status,
    #[serde(with = "rfc3339_ms")]
    pub expires_at: DateTime<Utc>,
}

/// `GET /vouchers/{code}/reservations/{orderId}`: the current state.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationView {
    pub order_id: String,
    pub customer_id: i64,
    pub status: Status,
    pub discount_amount: i64,
    #[serde(with = "rfc3339_ms")]
    pub expires_at: DateTime<Utc>,
}

/// The 200 of confirm.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Confirmation {
    pub order_id: String,
    pub status: Status,
    pub discount_amount: i64,
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
            active: true,
            reservation_ttl_seconds: 900,
            counter_slots: None,
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
        ] {
            assert_eq!(patch(json).unwrap_err().field, field, "{json}");
        }
    }
    #[test]
    fn cursors_round_trip_and_refuse_another_listings() {
        let next = ReservationList::cursor("order:1");
        let q = |after: &str| ReservationListQuery {
            after: Some(after.to_owned()),
            ..Default::default()
        };
        let code = VoucherCode::parse("A").unwrap();
        let list = ReservationList::parse(code.clone(), q(&next)).unwrap();
        assert_eq!(list.after.unwrap().as_str(), "order:1");
        assert_eq!(list.limit, DEFAULT_PAGE);
        for bad in [VoucherList::cursor("A"), "!!".to_owned(), "b3Ih".to_owned()] {
            assert_eq!(
                ReservationList::parse(code.clone(), q(&bad))
                    .unwrap_err()
                    .field,
                "after",
                "{bad}"
            );
        }
        for (limit, ok) in [
            ("1", true),
            ("100", true),
            ("0", false),
            ("101", false),
            ("x", false),
        ] {
            let r = VoucherList::parse(VoucherListQuery {
                limit: Some(limit.into()),
                after: None,
            });
            assert_eq!(r.is_ok(), ok, "{limit}");
        }
    }
}
