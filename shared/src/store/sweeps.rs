//! The sweeper's reads and its expiry batch (docs/ARCHITECTURE.md, "The sweeper"). Each takes
//! the sweep's own clock, so one sweep decides everything at one instant.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::types::Type;

use super::Store;
use super::StoreError;
use crate::domain::VoucherCode;
use crate::telemetry::metrics::{timed, Dependency};

/// A reservation one expiry batch released.
#[derive(Debug, Clone)]
pub struct Expired {
    pub code: VoucherCode,
    pub order_id: String,
    pub customer_id: i64,
    /// Its use goes back to the gate too.
    pub flash_sale: bool,
    /// A flash-sale campaign's code: the use goes back to the campaign's gate.
    pub campaign: Option<i64>,
}

/// A flash voucher the gate may hold.
#[derive(Debug, Clone)]
pub struct LiveFlashVoucher {
    pub code: VoucherCode,
    pub ttl_ms: i64,
    /// Its sale ended at least the retirement delay ago.
    pub retire: bool,
}

/// A flash-sale campaign the gate may hold.
#[derive(Debug, Clone)]
pub struct LiveFlashCampaign {
    pub id: i64,
    pub ttl_ms: i64,
    /// Its sale ended at least the retirement delay ago.
    pub retire: bool,
}

fn stored_code(raw: &str) -> VoucherCode {
    VoucherCode::parse(raw).expect("stored codes are valid")
}

impl Store {
    /// Deletes at most `limit` of the vouchers' rules and `limit` of the campaigns' that changes
    /// superseded before `before`, the oldest first (by each table's index on
    /// `superseded_at`). Answers how many went.
    pub async fn forget_rules(&self, before: DateTime<Utc>, limit: i64) -> Result<u64, StoreError> {
        timed(Dependency::Postgres, "forget_rules", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    "WITH v AS (DELETE FROM voucher_rules
                                 WHERE (voucher_code, version) IN
                                       (SELECT voucher_code, version FROM voucher_rules
                                         WHERE superseded_at < $1 ORDER BY superseded_at LIMIT $2)
                                RETURNING 1),
                          c AS (DELETE FROM campaign_rules
                                 WHERE (campaign_id, version) IN
                                       (SELECT campaign_id, version FROM campaign_rules
                                         WHERE superseded_at < $1 ORDER BY superseded_at LIMIT $2)
                                RETURNING 1)
                     SELECT 1 FROM v UNION ALL SELECT 1 FROM c",
                    &[(&before, Type::TIMESTAMPTZ), (&limit, Type::INT8)],
                )
                .await?;
            Ok(rows.len() as u64)
        })
        .await
    }

    /// One bounded batch of expiry (`fg_expire`): RESERVED rows past their expiry at `now`,
    /// released with the merge in one transaction. Fewer than `limit` rows: nothing is left.
    pub async fn expire_batch(
        &self,
        now: DateTime<Utc>,
        limit: i32,
    ) -> Result<Vec<Expired>, StoreError> {
        timed(Dependency::Postgres, "expire_batch", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    // A flash campaign's code row says flash_sale = false: its campaign says
                    // it. Each read by key, in scalar subqueries: no join for the planner to
                    // turn into a walk of the campaigns' codes' partial index (`voucher_by_campaign`).
                    "SELECT e.voucher_code, e.order_id, e.customer_id,
                            e.flash_sale OR f.campaign IS NOT NULL AS flash_sale, f.campaign
                       FROM fg_expire($1, $2) e,
                            LATERAL (SELECT (SELECT g.id FROM campaign g
                                              WHERE g.flash_sale
                                                AND g.id = (SELECT v.campaign_id FROM voucher v
                                                             WHERE v.code = e.voucher_code))
                                              AS campaign) f",
                    &[(&now, Type::TIMESTAMPTZ), (&limit, Type::INT4)],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| Expired {
                    code: stored_code(r.get("voucher_code")),
                    order_id: r.get("order_id"),
                    customer_id: r.get("customer_id"),
                    flash_sale: r.get("flash_sale"),
                    campaign: r.get("campaign"),
                })
                .collect())
        })
        .await
    }

    /// The vouchers the gate may hold (`voucher.gate_loaded`, an index of them alone: the cost
    /// follows what is live, not history), with whether each is due for retirement at `now`:
    /// its sale ended at least `retire_after` ago.
    pub async fn gate_vouchers(
        &self,
        now: DateTime<Utc>,
        retire_after: Duration,
    ) -> Result<Vec<LiveFlashVoucher>, StoreError> {
        timed(Dependency::Postgres, "gate_vouchers", async {
            let after = retire_after.as_secs_f64();
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT code, reservation_ttl_seconds,
                            ends_at + make_interval(secs => $2) <= $1 AS retire
                       FROM voucher WHERE gate_loaded ORDER BY code",
                    &[(&now, Type::TIMESTAMPTZ), (&after, Type::FLOAT8)],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| LiveFlashVoucher {
                    code: stored_code(r.get(0)),
                    ttl_ms: i64::from(r.get::<_, i32>(1)) * 1000,
                    retire: r.get(2),
                })
                .collect())
        })
        .await
    }

    /// Flash vouchers whose sale is open at `now` or starts within `lead` of it.
    pub async fn flash_vouchers_starting(
        &self,
        now: DateTime<Utc>,
        lead: Duration,
    ) -> Result<Vec<VoucherCode>, StoreError> {
        timed(Dependency::Postgres, "flash_vouchers_starting", async {
            let lead = lead.as_secs_f64();
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT code FROM voucher
                      WHERE flash_sale AND starts_at <= $1 + make_interval(secs => $2) AND ends_at > $1
                      ORDER BY code",
                    &[(&now, Type::TIMESTAMPTZ), (&lead, Type::FLOAT8)],
                )
                .await?;
            Ok(rows.iter().map(|r| stored_code(r.get(0))).collect())
        })
        .await
    }

    /// The flash-sale campaigns the gate may hold (`campaign.gate_loaded`, an index of them
    /// alone), with whether each is due for retirement at `now`.
    pub async fn gate_campaigns(
        &self,
        now: DateTime<Utc>,
        retire_after: Duration,
    ) -> Result<Vec<LiveFlashCampaign>, StoreError> {
        timed(Dependency::Postgres, "gate_campaigns", async {
            let after = retire_after.as_secs_f64();
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT id, reservation_ttl_seconds,
                            ends_at + make_interval(secs => $2) <= $1 AS retire
                       FROM campaign WHERE gate_loaded ORDER BY id",
                    &[(&now, Type::TIMESTAMPTZ), (&after, Type::FLOAT8)],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| LiveFlashCampaign {
                    id: r.get(0),
                    ttl_ms: i64::from(r.get::<_, i32>(1)) * 1000,
                    retire: r.get(2),
                })
                .collect())
        })
        .await
    }

    /// Flash-sale campaigns whose sale is open at `now` or starts within `lead` of it.
    pub async fn flash_campaigns_starting(
        &self,
        now: DateTime<Utc>,
        lead: Duration,
    ) -> Result<Vec<i64>, StoreError> {
        timed(Dependency::Postgres, "flash_campaigns_starting", async {
            let lead = lead.as_secs_f64();
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT id FROM campaign
                      WHERE flash_sale AND starts_at <= $1 + make_interval(secs => $2)
                        AND ends_at > $1
                      ORDER BY id",
                    &[(&now, Type::TIMESTAMPTZ), (&lead, Type::FLOAT8)],
                )
                .await?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
        .await
    }

    /// Which of the orders `(code, orderId)` Postgres has a row for, and whether it is released
    /// (a gate's pending or held orders: a campaign's span its codes).
    pub async fn orders_among(
        &self,
        orders: &[(&str, &str)],
    ) -> Result<Vec<(String, String, bool)>, StoreError> {
        let codes: Vec<&str> = orders.iter().map(|(c, _)| *c).collect();
        let ids: Vec<&str> = orders.iter().map(|(_, o)| *o).collect();
        timed(Dependency::Postgres, "orders_among", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT r.voucher_code, r.order_id, r.status = 3
                       FROM unnest($1::text[], $2::text[]) AS o(code, id)
                       JOIN redemption r ON r.voucher_code = o.code AND r.order_id = o.id",
                    &[(&codes, Type::TEXT_ARRAY), (&ids, Type::TEXT_ARRAY)],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect())
        })
        .await
    }
}
