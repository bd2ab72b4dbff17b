//! The sweeper's reads and its expiry batch (docs/ARCHITECTURE.md, "The sweeper"). Each takes
//! the sweep's own clock, so one sweep decides everything at one instant.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::types::Type;

use super::Store;
use crate::domain::VoucherCode;
use crate::errors::StoreError;
use crate::telemetry::metrics::{timed, Dependency};

/// A reservation one expiry batch released.
#[derive(Debug, Clone)]
pub struct Expired {
    pub code: VoucherCode,
    pub order_id: String,
    pub customer_id: i64,
    /// Its use goes back to the gate too.
    pub flash_sale: bool,
}

/// A flash voucher the gate may hold.
#[derive(Debug, Clone)]
pub struct LiveFlashVoucher {
    pub code: VoucherCode,
    pub ttl_ms: i64,
    /// Its sale ended at least the retirement delay ago.
    pub retire: bool,
}

fn stored_code(raw: &str) -> VoucherCode {
    VoucherCode::parse(raw).expect("stored codes are valid")
}

impl Store {
    /// Deletes at most `limit` of the rules that changes superseded before `before`, the
    /// oldest first (by `voucher_rules`' index on `superseded_at`). Answers how many went.
    pub async fn forget_rules(&self, before: DateTime<Utc>, limit: i64) -> Result<u64, StoreError> {
        timed(Dependency::Postgres, "forget_rules", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    "DELETE FROM voucher_rules
                      WHERE (voucher_code, version) IN
                            (SELECT voucher_code, version FROM voucher_rules
                              WHERE superseded_at < $1 ORDER BY superseded_at LIMIT $2)
                     RETURNING 1",
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
                    "SELECT voucher_code, order_id, customer_id, flash_sale FROM fg_expire($1, $2)",
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

    /// Which of `order_ids` Postgres has a row for.
    pub async fn known_orders(
        &self,
        code: &VoucherCode,
        order_ids: &[&str],
    ) -> Result<Vec<String>, StoreError> {
        timed(Dependency::Postgres, "known_orders", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT order_id FROM redemption WHERE voucher_code = $1 AND order_id = ANY($2)",
                    &[(&code.as_str(), Type::TEXT), (&order_ids, Type::TEXT_ARRAY)],
                )
                .await?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
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
}
