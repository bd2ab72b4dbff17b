//! The JSON the API answers with: vouchers, reservations, confirmations, eligibility.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::time::{rfc3339_ms, rfc3339_ms_or_null};
use super::Status;

/// `GET /vouchers/{code}`, the 201 of `POST /vouchers`, the 200 of `PATCH` and each item of
/// `GET /vouchers`.
///
/// A voucher and its counters. Exactly one of discountAmount (fixed amount) and discountPercent
/// (percentage); maxDiscountAmount only on a capped percentage voucher; the budget's three
/// fields only on a voucher with a budget.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Voucher)]
pub struct VoucherView {
    #[schema(value_type = super::schema::StoredCode)]
    pub code: String,
    /// Fixed discount in minor units (fixed-amount vouchers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64, nullable = false)]
    pub discount_amount: Option<i64>,
    /// Discount as a percentage of the order amount (percentage vouchers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 100, nullable = false)]
    pub discount_percent: Option<i16>,
    /// Cap on a percentage voucher's discount, in minor units.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64, nullable = false)]
    pub max_discount_amount: Option<i64>,
    /// Smallest order amount the voucher applies to.
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub min_order_amount: i64,
    /// Most uses held at once (RESERVED + CONFIRMED).
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub total_limit: i64,
    /// Most uses one customer may hold.
    #[schema(minimum = 1, maximum = 2_147_483_647)]
    pub per_user_limit: i64,
    /// Start of the sale.
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = super::schema::Timestamp)]
    pub starts_at: DateTime<Utc>,
    /// End of the sale.
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = super::schema::Timestamp)]
    pub ends_at: DateTime<Utc>,
    /// Flash-sale voucher: reserves go through the Redis gate.
    pub flash_sale: bool,
    /// Never combined with another code in one order (its campaign's, for a campaign's code).
    pub exclusive: bool,
    /// An inactive voucher refuses reserves and validations (422 NOT_ELIGIBLE, reason
    /// INACTIVE).
    pub active: bool,
    /// How long a reservation holds its use before the sweeper releases it (1 s to 7 days).
    #[schema(minimum = 1, maximum = 604_800)]
    pub reservation_ttl_seconds: i64,
    /// Counter slots the limit is split into in Postgres.
    #[schema(minimum = 1, maximum = 64)]
    pub counter_slots: i64,
    /// Uses held: RESERVED + CONFIRMED.
    #[schema(minimum = 0)]
    pub used_count: i64,
    /// Uses left: totalLimit - usedCount (0 when a lowered limit is below the uses held).
    pub remaining: i64,
    /// Uses RESERVED.
    #[schema(minimum = 0)]
    pub reserved_count: i64,
    /// Uses CONFIRMED.
    #[schema(minimum = 0)]
    pub confirmed_count: i64,
    /// Uses a flash-sale gate granted that Postgres refused (only after the gate lost data;
    /// mode B), kept as RELEASED with releaseReason REVOKED.
    #[schema(minimum = 0)]
    pub revoked_count: i64,
    /// Mode B: uses the gate granted whose events have not reached Postgres yet, counted in
    /// usedCount and reservedCount already. 0 otherwise.
    #[schema(minimum = 0)]
    pub in_flight_count: i64,
    /// The money budget, when the voucher has one: its three fields, at the top level.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub budget: Option<Budget>,
    /// The campaign whose code this is (its window and pause are the campaign's).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, nullable = false)]
    pub campaign_id: Option<i64>,
    /// What the operator calls it; null when unnamed.
    #[schema(required = true)]
    pub name: Option<String>,
    /// Keys of the operator's own (`{}` when none).
    pub metadata: super::Metadata,
}

/// A voucher's or campaign's money budget: at most `budget_amount` in discounts over its
/// active uses. Its fields sit at the top level of the view that has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// The most the active uses may take in discounts, summed.
    #[schema(minimum = 0)]
    pub budget_amount: i64,
    /// The discounts of the RESERVED and CONFIRMED uses, summed.
    #[schema(minimum = 0)]
    pub budget_used: i64,
    /// budgetAmount - budgetUsed (below 0 after a lowered budget).
    pub budget_remaining: i64,
}

impl Budget {
    pub fn of(amount: i64, used: i64) -> Self {
        Budget {
            budget_amount: amount,
            budget_used: used,
            budget_remaining: amount - used,
        }
    }
}

/// The 200 of `POST /vouchers/{code}/validations`: a reserve now would be granted this discount.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Validation)]
pub struct Eligibility {
    /// Always true: a refusal is an error answer.
    pub eligible: bool,
    /// The discount the order would get.
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub discount_amount: i64,
}

/// The 201 of reserve. A retry gets exactly these bytes again, so the body is built only from
/// stored facts: `status` is the answer to "reserve", always RESERVED.
///
/// A use held for an order. A retry of the same reserve gets the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    #[schema(value_type = super::OrderId)]
    pub order_id: String,
    #[schema(value_type = super::schema::CustomerId)]
    pub customer_id: i64,
    #[schema(value_type = super::schema::Amount)]
    pub discount_amount: i64,
    /// Always RESERVED: the answer to "reserve".
    pub status: Status,
    /// When the sweeper releases the use unless it is confirmed.
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = super::schema::Timestamp)]
    pub expires_at: DateTime<Utc>,
}

/// `GET /vouchers/{code}/reservations/{orderId}`: the current state.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = ReservationState)]
pub struct ReservationView {
    #[schema(value_type = super::OrderId)]
    pub order_id: String,
    #[schema(value_type = super::schema::CustomerId)]
    pub customer_id: i64,
    pub status: Status,
    #[schema(value_type = super::schema::Amount)]
    pub discount_amount: i64,
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = super::schema::Timestamp)]
    pub expires_at: DateTime<Utc>,
}

/// The 200 of confirm.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Confirmation {
    #[schema(value_type = super::OrderId)]
    pub order_id: String,
    /// Always CONFIRMED.
    pub status: Status,
    #[schema(value_type = super::schema::Amount)]
    pub discount_amount: i64,
}

/// An item of `GET /vouchers/{code}/reservations`: everything stored about a reservation.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationItem {
    #[schema(value_type = super::OrderId)]
    pub order_id: String,
    #[schema(value_type = super::schema::CustomerId)]
    pub customer_id: i64,
    pub status: Status,
    #[schema(value_type = super::schema::Amount)]
    pub discount_amount: i64,
    #[schema(value_type = super::schema::Amount)]
    pub order_amount: i64,
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = super::schema::Timestamp)]
    pub reserved_at: DateTime<Utc>,
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = super::schema::Timestamp)]
    pub expires_at: DateTime<Utc>,
    /// null unless confirmed.
    #[serde(with = "rfc3339_ms_or_null")]
    #[schema(value_type = Option<super::schema::Timestamp>, required = true)]
    pub confirmed_at: Option<DateTime<Utc>>,
    /// null unless released.
    #[serde(with = "rfc3339_ms_or_null")]
    #[schema(value_type = Option<super::schema::Timestamp>, required = true)]
    pub released_at: Option<DateTime<Utc>>,
    /// Why it was released: CANCELLED by the caller, EXPIRED by the sweeper, or REVOKED (a
    /// flash-sale use Postgres refused); null unless released.
    #[schema(required = true)]
    pub release_reason: Option<String>,
    /// Absent unless the reservation is one code of an order of several codes
    /// (`/orders/{orderId}`): that order's codes, this one among them.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<super::VoucherCode>>, nullable = false)]
    pub order_codes: Option<Vec<String>>,
}
