//! What the gate is loaded from (the warm-up) and checked against (the reconciler), each read
//! in one snapshot.

use tokio_postgres::types::Type;

use super::rows::voucher_rules;
use super::Store;
use crate::domain::{VoucherCode, VoucherRules};
use crate::errors::StoreError;
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

/// What the reconciler checks a gate against ([`Store::released_among`]), read in one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateCheck {
    /// `total_limit` less the uses held.
    pub remaining: i64,
    /// The budget less the discounts held (None: no budget).
    pub budget_left: Option<i64>,
    pub version: i64,
    /// The orders asked about that Postgres has released.
    pub released: Vec<String>,
}

impl Store {
    /// For the reconciler, in one snapshot: `total_limit` less the uses held, the budget left,
    /// the voucher's version, and which of `orders` (held in the gate) Postgres has released
    /// (None: no such voucher).
    pub async fn released_among(
        &self,
        code: &VoucherCode,
        orders: &[&str],
    ) -> Result<Option<GateCheck>, StoreError> {
        timed(Dependency::Postgres, "released_among", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT v.total_limit - fg_used(v.code) AS remaining, v.version,
                            b.amount - b.used AS budget_left,
                            ARRAY(SELECT r.order_id FROM redemption r
                                   WHERE r.voucher_code = v.code AND r.order_id = ANY($2)
                                     AND r.status = 3) AS released
                       FROM voucher v LEFT JOIN voucher_budget b ON b.voucher_code = v.code
                      WHERE v.code = $1",
                    &[(&code.as_str(), Type::TEXT), (&orders, Type::TEXT_ARRAY)],
                )
                .await?;
            Ok(rows.first().map(|r| GateCheck {
                remaining: r.get("remaining"),
                budget_left: r.get("budget_left"),
                version: r.get("version"),
                released: r.get("released"),
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

    /// Marks the voucher as one the gate may hold, before it is loaded. See
    /// `migrations/V9__gate_loaded.sql`.
    pub async fn mark_gate_loaded(&self, code: &VoucherCode) -> Result<(), StoreError> {
        self.client()
            .await?
            .query_typed(
                "UPDATE voucher SET gate_loaded = true WHERE code = $1 AND NOT gate_loaded",
                &[(&code.as_str(), Type::TEXT)],
            )
            .await?;
        Ok(())
    }

    /// The sweeper retired the voucher from the gate (or is about to): unmarked.
    pub async fn unmark_gate_loaded(&self, code: &VoucherCode) -> Result<(), StoreError> {
        self.client()
            .await?
            .query_typed(
                "UPDATE voucher SET gate_loaded = false WHERE code = $1 AND gate_loaded",
                &[(&code.as_str(), Type::TEXT)],
            )
            .await?;
        Ok(())
    }

    /// May the gate hold this voucher (loaded, and not retired since)? None: no such voucher.
    pub async fn gate_loaded(&self, code: &VoucherCode) -> Result<Option<bool>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT gate_loaded FROM voucher WHERE code = $1",
                &[(&code.as_str(), Type::TEXT)],
            )
            .await?;
        Ok(rows.first().map(|r| r.get(0)))
    }
}
