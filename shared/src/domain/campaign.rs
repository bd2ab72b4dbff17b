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

/// `POST /campaigns` body, as received. Exactly one of discountAmount and discountPercent;
/// maxDiscountAmount only with discountPercent. Unknown fields are refused.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = CreateCampaign)]
pub struct CreateCampaignRequest {
    /// Fixed discount in minor units.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub discount_amount: Option<i64>,
    /// Discount as a percentage of the order amount.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub discount_percent: Option<i64>,
    /// Cap on a percentage discount. null: no cap.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub max_discount_amount: Option<i64>,
    /// Smallest order amount a code applies to.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64, default = 0)]
    pub min_order_amount: i64,
    /// Start of the sale (RFC 3339; must be before endsAt).
    pub starts_at: DateTime<Utc>,
    /// End of the sale (RFC 3339; must be after startsAt).
    pub ends_at: DateTime<Utc>,
    /// true: every code is decided by the Redis gate, with the campaign's limits and budget
    /// checked in the same script; the winners are written by group commit (consistency mode A)
    /// or carried by events keyed by the campaign (mode B), and Postgres checks them again.
    /// Never changes after creation.
    #[serde(default)]
    #[schema(default = false)]
    pub flash_sale: bool,
    /// Its codes are never combined with another code in one order (409 NOT_COMBINABLE); alone
    /// each works as any code. Never changes after creation.
    #[serde(default)]
    #[schema(default = false)]
    pub exclusive: bool,
    /// false: paused, every code refuses reserves (INACTIVE).
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub active: bool,
    /// How long a reservation holds its use before the sweeper releases it (1 s to 7 days).
    #[serde(default = "default_ttl")]
    #[schema(minimum = 1, maximum = 604_800, default = 900)]
    pub reservation_ttl_seconds: i64,
    /// Codes to import (1 to 100,000, each 1-32 of A-Z a-z 0-9 _ -, kept upper-case, none
    /// twice) or a pattern to generate.
    #[schema(schema_with = super::codes::codes_schema)]
    pub codes: serde_json::Value,
    /// Uses each code allows at once.
    #[serde(default = "one")]
    #[schema(minimum = 1, maximum = 1_000_000_000, default = 1)]
    pub per_code_limit: i64,
    /// Uses held at once over every code; none when absent or null.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub total_limit: Option<i64>,
    /// Uses one customer may hold over every code; none when absent or null.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 2_147_483_647)]
    pub per_user_limit: Option<i64>,
    /// The most the active uses of every code may take in discounts, summed; none when absent
    /// or null.
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
    pub name: Option<String>,
    pub exclusive: bool,
    pub metadata: super::Metadata,
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
            name: r.name.map(super::description::name).transpose()?,
            exclusive: r.exclusive,
            metadata: super::description::metadata(r.metadata.unwrap_or_default())?,
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

/// `PATCH /campaigns/{id}` body, as received: each field present is changed; `null` removes
/// totalLimit, perUserLimit or budgetAmount. Unknown fields are refused.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = UpdateCampaign)]
pub struct PatchCampaignRequest {
    /// false pauses every code; true resumes them.
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false)]
    pub active: Option<bool>,
    /// Start of the sale (RFC 3339; must be before endsAt).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false)]
    pub starts_at: Option<DateTime<Utc>>,
    /// End of the sale (RFC 3339; must be after startsAt).
    #[serde(default, deserialize_with = "not_null")]
    #[schema(nullable = false)]
    pub ends_at: Option<DateTime<Utc>>,
    /// Never below the uses held (409 LIMIT_BELOW_USED).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub total_limit: Option<Option<i64>>,
    /// A customer already above it keeps their uses and takes no more.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 2_147_483_647)]
    pub per_user_limit: Option<Option<i64>>,
    /// Never below the discounts held (409 BUDGET_BELOW_USED).
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

/// A checked campaign change: None keeps a value, Some(None) removes a limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CampaignPatch {
    pub active: Option<bool>,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub total_limit: Option<Option<i64>>,
    pub per_user_limit: Option<Option<i32>>,
    pub budget_amount: Option<Option<i64>>,
    /// Name and metadata: no rule of the sale.
    pub description: super::Description,
}

impl CampaignPatch {
    /// Changes a rule, a limit or the budget (not only the name and metadata).
    pub fn changes_rules(&self) -> bool {
        self.active.is_some()
            || self.starts_at.is_some()
            || self.ends_at.is_some()
            || self.total_limit.is_some()
            || self.per_user_limit.is_some()
            || self.budget_amount.is_some()
    }
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
            description: super::Description::parse(r.name, r.metadata)?,
        })
    }
}

/// `GET /campaigns/{id}`, the 201 of `POST /campaigns`, the 200 of `PATCH` and each item of
/// `GET /campaigns`.
///
/// A campaign and its counters.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Campaign)]
pub struct CampaignView {
    /// Assigned by the service.
    #[schema(minimum = 1)]
    pub id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64, nullable = false)]
    pub discount_amount: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 100, nullable = false)]
    pub discount_percent: Option<i16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64, nullable = false)]
    pub max_discount_amount: Option<i64>,
    #[schema(minimum = 0, maximum = 1_000_000_000_000_000_i64)]
    pub min_order_amount: i64,
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = super::schema::Timestamp)]
    pub starts_at: DateTime<Utc>,
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = super::schema::Timestamp)]
    pub ends_at: DateTime<Utc>,
    pub flash_sale: bool,
    /// Its codes are never combined with another code in one order.
    pub exclusive: bool,
    pub active: bool,
    #[schema(minimum = 1, maximum = 604_800)]
    pub reservation_ttl_seconds: i64,
    #[schema(minimum = 1)]
    pub per_code_limit: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, nullable = false)]
    pub total_limit: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, nullable = false)]
    pub per_user_limit: Option<i64>,
    #[schema(minimum = 0)]
    pub code_count: i64,
    /// Uses held over every code: RESERVED + CONFIRMED.
    #[schema(minimum = 0)]
    pub used_count: i64,
    /// GET /campaigns/{id} only: uses a flash-sale campaign's gate granted whose events have
    /// not reached Postgres yet (mode B); counted in usedCount already, and in the budget's
    /// figures once they land. 0 for a standard campaign, and in the listing and the answers
    /// of POST and PATCH, which show what Postgres holds.
    #[schema(minimum = 0)]
    pub in_flight_count: i64,
    /// The budget's three fields, at the top level, when the campaign has one.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub budget: Option<Budget>,
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = super::schema::Timestamp)]
    pub created_at: DateTime<Utc>,
    /// What the operator calls it; null when unnamed.
    #[schema(required = true)]
    pub name: Option<String>,
    /// Keys of the operator's own (`{}` when none).
    pub metadata: super::Metadata,
}

/// An item of `GET /campaigns/{id}/codes`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CampaignCode)]
pub struct CodeItem {
    #[schema(value_type = super::schema::StoredCode)]
    pub code: String,
    /// Uses held: RESERVED + CONFIRMED.
    #[schema(minimum = 0)]
    pub used_count: i64,
}
