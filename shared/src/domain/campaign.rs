//! Campaigns of unique codes: the `POST /campaigns` body, `PATCH /campaigns/{id}`, the
//! campaign's rules, its view and its listings' queries. The codes it generates or imports are
//! `codes`'.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::codes::NewCodes;
use super::patch::{not_null, present};
use super::time::{instant, rfc3339_ms};
use super::voucher::in_range;
use super::{amount, Budget, Discount, Invalid, DEFAULT_TTL_SECONDS};
use super::{MAX_TOTAL_LIMIT, MAX_TTL_SECONDS};

/// A flash-sale campaign's name where a voucher's code stands for a voucher: its events' key
/// (one partition for all its codes), and its gate in logs and gauges. `campaign:ID`: a code
/// has no `:`, so no voucher's name is ever a campaign's.
pub fn campaign_key(id: i64) -> String {
    format!("campaign:{id}")
}

/// Largest `POST /campaigns` body: room for [`MAX_IMPORTED`] codes.
pub const CAMPAIGN_BODY_LIMIT: usize = 4 * 1024 * 1024;
/// Most uses a campaign's total may allow (its codes' uses summed).
pub const MAX_CAMPAIGN_TOTAL: i64 = 1_000_000_000_000;

/// `POST /campaigns` body, as received.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateCampaignRequest {
    #[serde(default)]
    pub discount_amount: Option<i64>,
    #[serde(default)]
    pub discount_percent: Option<i64>,
    #[serde(default)]
    pub max_discount_amount: Option<i64>,
    #[serde(default)]
    pub min_order_amount: i64,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    #[serde(default)]
    pub flash_sale: bool,
    #[serde(default = "yes")]
    pub active: bool,
    #[serde(default = "default_ttl")]
    pub reservation_ttl_seconds: i64,
    /// An array of codes to import, or `{count, length, prefix, charset}` to generate.
    pub codes: serde_json::Value,
    #[serde(default = "one")]
    pub per_code_limit: i64,
    #[serde(default)]
    pub total_limit: Option<i64>,
    #[serde(default)]
    pub per_user_limit: Option<i64>,
    #[serde(default)]
    pub budget_amount: Option<i64>,
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

/// A campaign's rules and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CampaignRules {
    pub discount: Discount,
    /// Decided by the gate, as a campaign (docs/ARCHITECTURE.md, "Campaigns in the gate").
    pub flash_sale: bool,
    pub min_order_amount: i64,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub active: bool,
    pub reservation_ttl_seconds: i32,
    /// Uses of each code.
    pub per_code_limit: i32,
    /// Uses over every code (None: the codes' own limits only).
    pub total_limit: Option<i64>,
    /// Uses per customer over every code (None: the codes' own limits only).
    pub per_user_limit: Option<i32>,
    /// The most the active uses of every code may take in discounts, summed.
    pub budget_amount: Option<i64>,
}

/// A campaign that passed every rule; only this can be stored.
#[derive(Debug, Clone)]
pub struct NewCampaign {
    pub rules: CampaignRules,
    pub codes: NewCodes,
}

impl TryFrom<CreateCampaignRequest> for NewCampaign {
    type Error = Invalid;

    fn try_from(r: CreateCampaignRequest) -> Result<Self, Invalid> {
        let discount =
            Discount::parse(r.discount_amount, r.discount_percent, r.max_discount_amount)?;
        let starts_at = instant("startsAt", r.starts_at)?;
        let ends_at = instant("endsAt", r.ends_at)?;
        if ends_at <= starts_at {
            return Err(Invalid::new("endsAt", "must be after startsAt"));
        }
        let rules = CampaignRules {
            discount,
            flash_sale: r.flash_sale,
            min_order_amount: amount("minOrderAmount", r.min_order_amount)?,
            starts_at,
            ends_at,
            active: r.active,
            reservation_ttl_seconds: in_range(
                "reservationTtlSeconds",
                r.reservation_ttl_seconds,
                1,
                MAX_TTL_SECONDS,
            )?,
            per_code_limit: in_range("perCodeLimit", r.per_code_limit, 1, MAX_TOTAL_LIMIT)?,
            total_limit: r
                .total_limit
                .map(|n| total_limit("totalLimit", n))
                .transpose()?,
            per_user_limit: r
                .per_user_limit
                .map(|n| in_range("perUserLimit", n, 1, i32::MAX as i64))
                .transpose()?,
            budget_amount: r
                .budget_amount
                .map(|b| amount("budgetAmount", b))
                .transpose()?,
        };
        Ok(NewCampaign {
            rules,
            codes: NewCodes::parse(r.codes)?,
        })
    }
}

fn total_limit(field: &'static str, n: i64) -> Result<i64, Invalid> {
    if (0..=MAX_CAMPAIGN_TOTAL).contains(&n) {
        Ok(n)
    } else {
        Err(Invalid::new(
            field,
            format!("must be an integer from 0 to {MAX_CAMPAIGN_TOTAL}"),
        ))
    }
}

/// A campaign's id in a path.
pub fn campaign_id(raw: &str) -> Result<i64, Invalid> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id >= 1)
        .ok_or_else(|| Invalid::new("id", "must be a campaign id, an integer from 1"))
}

/// `PATCH /campaigns/{id}` body, as received: each field present is changed; `null` removes a
/// limit or the budget.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchCampaignRequest {
    #[serde(default, deserialize_with = "not_null")]
    pub active: Option<bool>,
    #[serde(default, deserialize_with = "not_null")]
    pub starts_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "not_null")]
    pub ends_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "present")]
    pub total_limit: Option<Option<i64>>,
    #[serde(default, deserialize_with = "present")]
    pub per_user_limit: Option<Option<i64>>,
    #[serde(default, deserialize_with = "present")]
    pub budget_amount: Option<Option<i64>>,
}

/// A checked campaign change: None keeps a value, Some(None) removes a limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CampaignPatch {
    pub active: Option<bool>,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub total_limit: Option<Option<i64>>,
    pub per_user_limit: Option<Option<i32>>,
    pub budget_amount: Option<Option<i64>>,
}

impl TryFrom<PatchCampaignRequest> for CampaignPatch {
    type Error = Invalid;

    fn try_from(r: PatchCampaignRequest) -> Result<Self, Invalid> {
        let starts_at = r.starts_at.map(|t| instant("startsAt", t)).transpose()?;
        let ends_at = r.ends_at.map(|t| instant("endsAt", t)).transpose()?;
        if let (Some(s), Some(e)) = (starts_at, ends_at) {
            if e <= s {
                return Err(Invalid::new("endsAt", "must be after startsAt"));
            }
        }
        Ok(CampaignPatch {
            active: r.active,
            starts_at,
            ends_at,
            total_limit: r
                .total_limit
                .map(|n| n.map(|n| total_limit("totalLimit", n)).transpose())
                .transpose()?,
            per_user_limit: r
                .per_user_limit
                .map(|n| {
                    n.map(|n| in_range("perUserLimit", n, 1, i32::MAX as i64))
                        .transpose()
                })
                .transpose()?,
            budget_amount: r
                .budget_amount
                .map(|b| b.map(|b| amount("budgetAmount", b)).transpose())
                .transpose()?,
        })
    }
}

/// `GET /campaigns/{id}`, the 201 of `POST /campaigns`, the 200 of `PATCH` and each item of
/// `GET /campaigns`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CampaignView {
    pub id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discount_amount: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discount_percent: Option<i16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_discount_amount: Option<i64>,
    pub min_order_amount: i64,
    #[serde(with = "rfc3339_ms")]
    pub starts_at: DateTime<Utc>,
    #[serde(with = "rfc3339_ms")]
    pub ends_at: DateTime<Utc>,
    pub flash_sale: bool,
    pub active: bool,
    pub reservation_ttl_seconds: i64,
    pub per_code_limit: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_limit: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_user_limit: Option<i64>,
    pub code_count: i64,
    /// Active uses (RESERVED + CONFIRMED) over every code.
    pub used_count: i64,
    /// Mode B, a flash-sale campaign: uses its gate granted whose events have not reached
    /// Postgres yet, counted in `used_count` already (their discounts are not in the budget's
    /// figures until they land).
    pub in_flight_count: i64,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    #[serde(with = "rfc3339_ms")]
    pub created_at: DateTime<Utc>,
}

/// An item of `GET /campaigns/{id}/codes`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeItem {
    pub code: String,
    /// Active uses (RESERVED + CONFIRMED) of this code.
    pub used_count: i64,
}
