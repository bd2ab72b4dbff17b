//! What the gate is loaded from (the warm-up) and checked against (the reconciler), each read
//! in one snapshot.

use chrono::{DateTime, Utc};
use tokio_postgres::types::{ToSql, Type};

use super::rows::voucher_rules;
use super::Store;
use super::StoreError;
use crate::domain::{Discount, VoucherCode, VoucherRules};
use crate::telemetry::metrics::{timed, Dependency};

/// What a gate is loaded from ([`Store::gate_source`]), read in one snapshot. The gate's
/// `meta` is built from it by the gate's users (`GateMeta::of`): the store knows nothing of the
/// gate.
#[derive(Debug, Clone)]
pub struct GateSource {
    /// Only flash-sale vouchers are loaded.
    pub flash_sale: bool,
    pub rules: VoucherRules,
    pub reservation_ttl_seconds: i32,
    /// The version `rules` are at.
    pub version: i64,
    /// `total_limit` less the uses held.
    pub remaining: i64,
    /// The budget less the discounts held (None: no budget, or one removed: NULL amount).
    pub budget_left: Option<i64>,
    /// Each customer's active uses (empty unless asked for).
    pub users: Vec<(i64, i32)>,
}

/// What a flash-sale campaign's gate is loaded from ([`Store::campaign_gate_source`]), read in
/// one snapshot: the campaign's rules at their version, its counters and customers, and what
/// each of its codes holds (docs/ARCHITECTURE.md, "Campaigns in the gate").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CampaignGateSource {
    pub flash_sale: bool,
    pub discount: Discount,
    pub min_order_amount: i64,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub active: bool,
    pub reservation_ttl_seconds: i32,
    /// Over the whole campaign (None: none).
    pub per_user_limit: Option<i32>,
    pub per_code_limit: i32,
    /// The version the rules and limits are at.
    pub version: i64,
    pub code_count: i64,
    /// Over every code (None: the codes' own limits only).
    pub total_limit: Option<i64>,
    /// The total less the uses held; without a total, what the codes' limits allow less the
    /// uses held.
    pub remaining: i64,
    /// None: no budget.
    pub budget_amount: Option<i64>,
    /// The budget less the discounts held (None: no budget).
    pub budget_left: Option<i64>,
    /// May the gate hold it already (`campaign.gate_loaded`)?
    pub gate_loaded: bool,
    /// Each customer's active uses over the campaign.
    pub users: Vec<(i64, i32)>,
    /// Each code holding uses, with its uses.
    pub codes: Vec<(String, i64)>,
    /// Each customer's active uses of a code: (code, customer, uses).
    pub code_customers: Vec<(String, i64, i32)>,
}

/// What the reconciler checks a voucher's gate against ([`Store::gate_check`]), read in one
/// snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateCheck {
    /// `total_limit` less the uses held.
    pub remaining: i64,
    /// The budget less the discounts held (None: no budget).
    pub budget_left: Option<i64>,
    pub version: i64,
}

impl Store {
    /// For the reconciler, in one snapshot: `total_limit` less the uses held, the budget left
    /// and the voucher's version (None: no such voucher).
    pub async fn gate_check(&self, code: &VoucherCode) -> Result<Option<GateCheck>, StoreError> {
        timed(Dependency::Postgres, "gate_check", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT v.total_limit - fg_used(v.code) AS remaining, v.version,
                            b.amount - b.used AS budget_left
                       FROM voucher v LEFT JOIN voucher_budget b ON b.voucher_code = v.code
                      WHERE v.code = $1",
                    &[(&code.as_str(), Type::TEXT)],
                )
                .await?;
            Ok(rows.first().map(|r| GateCheck {
                remaining: r.get("remaining"),
                budget_left: r.get("budget_left"),
                version: r.get("version"),
            }))
        })
        .await
    }

    /// What the gate is loaded from, read in one snapshot: the voucher's rules at their
    /// version, the uses left (`total_limit` less the uses held, never `total_limit`) and, with
    /// `with_users`, each customer's active uses (the reconciler needs only the rest).
    pub async fn gate_source(
        &self,
        code: &VoucherCode,
        with_users: bool,
    ) -> Result<Option<GateSource>, StoreError> {
        timed(Dependency::Postgres, "gate_source", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT v.flash_sale, v.discount_amount, v.discount_percent, v.max_discount_amount,
                            v.min_order_amount, v.total_limit, v.starts_at, v.ends_at, v.per_user_limit,
                            v.reservation_ttl_seconds, v.active, v.version,
                            v.total_limit - fg_used(v.code) AS remaining,
                            b.amount AS budget_amount, b.amount - b.used AS budget_left,
                            CASE WHEN $2 THEN
                              COALESCE((SELECT array_agg(c.customer_id ORDER BY c.customer_id)
                                          FROM voucher_customer c
                                         WHERE c.voucher_code = v.code AND c.active > 0), '{}')
                            ELSE '{}' END AS customers,
                            CASE WHEN $2 THEN
                              COALESCE((SELECT array_agg(c.active ORDER BY c.customer_id)
                                          FROM voucher_customer c
                                         WHERE c.voucher_code = v.code AND c.active > 0), '{}')
                            ELSE '{}' END AS actives
                       FROM voucher v LEFT JOIN voucher_budget b ON b.voucher_code = v.code
                      WHERE v.code = $1",
                    &[(&code.as_str(), Type::TEXT), (&with_users, Type::BOOL)],
                )
                .await?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let remaining: i64 = row.get("remaining");
            let customers: Vec<i64> = row.get("customers");
            let actives: Vec<i32> = row.get("actives");
            Ok(Some(GateSource {
                flash_sale: row.get("flash_sale"),
                rules: voucher_rules(row),
                reservation_ttl_seconds: row.get("reservation_ttl_seconds"),
                version: row.get("version"),
                remaining,
                budget_left: row.get("budget_left"),
                users: customers.into_iter().zip(actives).collect(),
            }))
        })
        .await
    }

    /// What a campaign's gate is loaded from, in one statement (one snapshot); None: no such
    /// campaign. The codes holding uses are found through the campaign's codes (the
    /// `voucher_by_campaign` index), a walk as long as the campaign has codes, done once per
    /// load: before its sale, or after Redis lost it.
    ///
    /// Without `with_holders`, the customers and codes are left out (a change of the campaign,
    /// the reconciler): no walk.
    pub async fn campaign_gate_source(
        &self,
        id: i64,
        with_holders: bool,
    ) -> Result<Option<CampaignGateSource>, StoreError> {
        timed(Dependency::Postgres, "campaign_gate_source", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    "WITH held AS MATERIALIZED (
                       SELECT v.code, s.used
                         FROM voucher v JOIN voucher_slot s ON s.voucher_code = v.code
                        WHERE $2 AND v.campaign_id = $1 AND s.used > 0),
                     holders AS MATERIALIZED (
                       SELECT c.voucher_code, c.customer_id, c.active
                         FROM held h JOIN voucher_customer c ON c.voucher_code = h.code
                        WHERE c.active > 0)
                     SELECT g.flash_sale, g.discount_amount, g.discount_percent,
                            g.max_discount_amount, g.min_order_amount, g.starts_at, g.ends_at,
                            g.active, g.reservation_ttl_seconds, g.per_user_limit,
                            g.per_code_limit, g.version, g.gate_loaded, g.code_count,
                            k.total_limit, k.budget_amount,
                            COALESCE(k.total_limit, g.code_count * g.per_code_limit) - k.used
                              AS remaining,
                            k.budget_amount - k.budget_used AS budget_left,
                            ARRAY(SELECT c.customer_id FROM campaign_customer c
                                   WHERE $2 AND c.campaign_id = g.id AND c.active > 0
                                   ORDER BY c.customer_id) AS customers,
                            ARRAY(SELECT c.active FROM campaign_customer c
                                   WHERE $2 AND c.campaign_id = g.id AND c.active > 0
                                   ORDER BY c.customer_id) AS actives,
                            ARRAY(SELECT h.code FROM held h ORDER BY h.code) AS codes,
                            ARRAY(SELECT h.used::bigint FROM held h ORDER BY h.code) AS code_used,
                            ARRAY(SELECT h.voucher_code FROM holders h
                                   ORDER BY h.voucher_code, h.customer_id) AS holder_codes,
                            ARRAY(SELECT h.customer_id FROM holders h
                                   ORDER BY h.voucher_code, h.customer_id) AS holder_ids,
                            ARRAY(SELECT h.active FROM holders h
                                   ORDER BY h.voucher_code, h.customer_id) AS holder_uses
                       FROM campaign g JOIN campaign_counter k ON k.campaign_id = g.id
                      WHERE g.id = $1",
                    &[(&id, Type::INT8), (&with_holders, Type::BOOL)],
                )
                .await?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let customers: Vec<i64> = row.get("customers");
            let actives: Vec<i32> = row.get("actives");
            let codes: Vec<String> = row.get("codes");
            let used: Vec<i64> = row.get("code_used");
            let holder_codes: Vec<String> = row.get("holder_codes");
            let holder_ids: Vec<i64> = row.get("holder_ids");
            let holder_uses: Vec<i32> = row.get("holder_uses");
            Ok(Some(CampaignGateSource {
                flash_sale: row.get("flash_sale"),
                discount: Discount::from_columns(
                    row.get("discount_amount"),
                    row.get("discount_percent"),
                    row.get("max_discount_amount"),
                ),
                min_order_amount: row.get("min_order_amount"),
                starts_at: row.get("starts_at"),
                ends_at: row.get("ends_at"),
                active: row.get("active"),
                reservation_ttl_seconds: row.get("reservation_ttl_seconds"),
                per_user_limit: row.get("per_user_limit"),
                per_code_limit: row.get("per_code_limit"),
                version: row.get("version"),
                code_count: row.get("code_count"),
                total_limit: row.get("total_limit"),
                remaining: row.get("remaining"),
                budget_amount: row.get("budget_amount"),
                budget_left: row.get("budget_left"),
                gate_loaded: row.get("gate_loaded"),
                users: customers.into_iter().zip(actives).collect(),
                codes: codes.into_iter().zip(used).collect(),
                code_customers: holder_codes
                    .into_iter()
                    .zip(holder_ids)
                    .zip(holder_uses)
                    .map(|((code, customer), uses)| (code, customer, uses))
                    .collect(),
            }))
        })
        .await
    }

    /// Marks the voucher as one the gate may hold, before it is loaded (`voucher.gate_loaded`,
    /// docs/ARCHITECTURE.md, "The sweeper").
    pub async fn mark_gate_loaded(&self, code: &VoucherCode) -> Result<(), StoreError> {
        self.gate_flag(
            "UPDATE voucher SET gate_loaded = true WHERE code = $1 AND NOT gate_loaded",
            (&code.as_str(), Type::TEXT),
        )
        .await
        .map(drop)
    }

    /// The sweeper retired the voucher from the gate (or is about to): unmarked.
    pub async fn unmark_gate_loaded(&self, code: &VoucherCode) -> Result<(), StoreError> {
        self.gate_flag(
            "UPDATE voucher SET gate_loaded = false WHERE code = $1 AND gate_loaded",
            (&code.as_str(), Type::TEXT),
        )
        .await
        .map(drop)
    }

    /// May the gate hold this voucher (loaded, and not retired since)? None: no such voucher.
    pub async fn gate_loaded(&self, code: &VoucherCode) -> Result<Option<bool>, StoreError> {
        self.gate_flag(
            "SELECT gate_loaded FROM voucher WHERE code = $1",
            (&code.as_str(), Type::TEXT),
        )
        .await
    }

    /// Marks the campaign as one the gate may hold, before it is loaded.
    pub async fn mark_campaign_gate_loaded(&self, id: i64) -> Result<(), StoreError> {
        self.gate_flag(
            "UPDATE campaign SET gate_loaded = true WHERE id = $1 AND NOT gate_loaded",
            (&id, Type::INT8),
        )
        .await
        .map(drop)
    }

    /// The campaign is no longer held by the gate (retired, or lost long ago).
    pub async fn unmark_campaign_gate_loaded(&self, id: i64) -> Result<(), StoreError> {
        self.gate_flag(
            "UPDATE campaign SET gate_loaded = false WHERE id = $1 AND gate_loaded",
            (&id, Type::INT8),
        )
        .await
        .map(drop)
    }

    /// May the gate hold this flash-sale campaign? None: no such campaign.
    pub async fn campaign_gate_loaded(&self, id: i64) -> Result<Option<bool>, StoreError> {
        self.gate_flag(
            "SELECT gate_loaded FROM campaign WHERE id = $1",
            (&id, Type::INT8),
        )
        .await
    }

    /// One statement on one voucher's or campaign's `gate_loaded` flag, keyed by `key`: the
    /// flag it reads (None: no row, or a write).
    async fn gate_flag(
        &self,
        sql: &'static str,
        key: (&(dyn ToSql + Sync), Type),
    ) -> Result<Option<bool>, StoreError> {
        let rows = self.client().await?.query_typed(sql, &[key]).await?;
        Ok(rows.first().map(|r| r.get(0)))
    }
}
