//! The JSON the API answers with: vouchers, reservations, confirmations, eligibility.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::time::{rfc3339_ms, rfc3339_ms_or_null};
use super::Status;

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
    /// Uses the gate granted whose events have not landed yet (mode B), counted in
    /// `used_count` and `reserved_count` already: what a sale still owes Postgres.
    pub in_flight_count: i64,
    /// The money budget, when the voucher has one.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// The campaign whose code this is (its window and pause are the campaign's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub campaign_id: Option<i64>,
}

/// A voucher's money budget: at most `budget_amount` in discounts over its active uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    pub budget_amount: i64,
    /// The discounts of the RESERVED and CONFIRMED uses, summed.
    pub budget_used: i64,
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
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Eligibility {
    pub eligible: bool,
    pub discount_amount: i64,
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
