//! Orders of several codes: the order's row (`customer_order`), written PENDING before its
//! first code is reserved and moved up as the order settles, and the sweeper's three passes
//! over them. Each code's use is its own reservation row; this file never touches one except
//! to make an abandoned or expired order's reservations due at once, so the expiry that
//! follows in the same sweep releases them together.

use chrono::{DateTime, Utc};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::Store;
use super::StoreError;
use crate::domain::{NewOrder, OrderId, VoucherCode};
use crate::telemetry::metrics::{timed, Dependency};

/// Where an order stands. It only moves up, and from `Pending` only to `Reserved`,
/// `Released` or `Refused` (migrations/V4__orders.sql).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderState {
    /// Being decided: the codes are being reserved one after another.
    Pending,
    /// Every code is held.
    Reserved,
    Confirmed,
    /// Cancelled, expired, or given back after a crash left it pending.
    Released,
    /// A code refused: nothing is held.
    Refused,
}

impl OrderState {
    fn from_db(v: i16) -> Result<Self, StoreError> {
        Ok(match v {
            1 => OrderState::Pending,
            2 => OrderState::Reserved,
            3 => OrderState::Confirmed,
            4 => OrderState::Released,
            5 => OrderState::Refused,
            other => {
                return Err(StoreError::UnexpectedOutcome(format!(
                    "order state {other}"
                )))
            }
        })
    }
}

/// An order's row.
#[derive(Debug, Clone)]
pub struct StoredOrder {
    pub customer_id: i64,
    pub order_amount: i64,
    pub codes: Vec<String>,
    pub state: OrderState,
    /// Reserved and after: each code's discount, in the order of `codes`.
    pub discounts: Option<Vec<i64>>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Refused: the refusal's outcome word and the code that refused.
    pub refusal: Option<(String, String)>,
}

impl StoredOrder {
    /// Is this the order `o` asks for (a retry), or another one under the same orderId?
    pub fn is(&self, o: &NewOrder) -> bool {
        self.customer_id == o.customer_id
            && self.order_amount == o.order_amount
            && self.codes.len() == o.codes.len()
            && self
                .codes
                .iter()
                .zip(&o.codes)
                .all(|(a, b)| a == b.as_str())
    }
}

const ORDER_COLUMNS: &str =
    "customer_id, order_amount, codes, state, discounts, expires_at, refusal, refused_code";

fn stored(row: &Row) -> Result<StoredOrder, StoreError> {
    let refusal: Option<String> = row.get("refusal");
    let refused_code: Option<String> = row.get("refused_code");
    Ok(StoredOrder {
        customer_id: row.get("customer_id"),
        order_amount: row.get("order_amount"),
        codes: row.get("codes"),
        state: OrderState::from_db(row.get("state"))?,
        discounts: row.get("discounts"),
        expires_at: row.get("expires_at"),
        refusal: refusal.zip(refused_code),
    })
}

/// The order's row as it is now; None: no order has this orderId.
async fn read_order(
    client: &deadpool_postgres::Client,
    id: &OrderId,
) -> Result<Option<StoredOrder>, StoreError> {
    let rows = client
        .query_typed(
            &format!("SELECT {ORDER_COLUMNS} FROM customer_order WHERE order_id = $1"),
            &[(&id.as_str(), Type::TEXT)],
        )
        .await?;
    rows.first().map(stored).transpose()
}

/// What the sweeper's order pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrdersSwept {
    /// Pending orders older than the lease, released (ABANDONED) with every use they held.
    pub abandoned: u64,
    /// Reserved orders past their expiry, released (EXPIRED) with every use they held.
    pub expired: u64,
}

impl Store {
    /// Writes the order PENDING, decided by `decider`, unless its orderId is taken. None:
    /// written now; Some: the order already under that orderId (a retry, or another order).
    pub async fn begin_order(
        &self,
        o: &NewOrder,
        decider: i64,
        now: DateTime<Utc>,
    ) -> Result<Option<StoredOrder>, StoreError> {
        timed(Dependency::Postgres, "begin_order", async {
            let codes: Vec<&str> = o.codes.iter().map(VoucherCode::as_str).collect();
            let client = self.client().await?;
            let written = client
                .query_typed(
                    "INSERT INTO customer_order (order_id, customer_id, order_amount, codes, state,
                                                 decider, created_at)
                     VALUES ($1, $2, $3, $4, 1, $5, $6)
                     ON CONFLICT (order_id) DO NOTHING
                     RETURNING order_id",
                    &[
                        (&o.order_id.as_str(), Type::TEXT),
                        (&o.customer_id, Type::INT8),
                        (&o.order_amount, Type::INT8),
                        (&codes, Type::TEXT_ARRAY),
                        (&decider, Type::INT8),
                        (&now, Type::TIMESTAMPTZ),
                    ],
                )
                .await?;
            if !written.is_empty() {
                return Ok(None);
            }
            // A second statement, so a second snapshot: it sees the row the insert met, even
            // one committed after the insert's snapshot was taken.
            read_order(&client, &o.order_id)
                .await?
                .map(Some)
                .ok_or(StoreError::NoRow)
        })
        .await
    }

    /// Takes up a PENDING order nobody decides (its last decider failed and let go). false:
    /// a request decides it now, or it is no longer pending.
    pub async fn take_up_order(&self, id: &OrderId, decider: i64) -> Result<bool, StoreError> {
        timed(Dependency::Postgres, "take_up_order", async {
            let n = self
                .client()
                .await?
                .execute_typed(
                    "UPDATE customer_order SET decider = $2
                      WHERE order_id = $1 AND state = 1 AND decider IS NULL",
                    &[(&id.as_str(), Type::TEXT), (&decider, Type::INT8)],
                )
                .await?;
            Ok(n == 1)
        })
        .await
    }

    /// The decider of a PENDING order lets go of it (it failed), for a retry to take it up.
    pub async fn let_go_of_order(&self, id: &OrderId, decider: i64) -> Result<(), StoreError> {
        timed(Dependency::Postgres, "let_go_of_order", async {
            self.client()
                .await?
                .execute_typed(
                    "UPDATE customer_order SET decider = NULL
                      WHERE order_id = $1 AND state = 1 AND decider = $2",
                    &[(&id.as_str(), Type::TEXT), (&decider, Type::INT8)],
                )
                .await?;
            Ok(())
        })
        .await
    }

    /// The order's row; None: no order has this orderId.
    pub async fn order(&self, id: &OrderId) -> Result<Option<StoredOrder>, StoreError> {
        timed(Dependency::Postgres, "order", async {
            read_order(&self.client().await?, id).await
        })
        .await
    }

    /// PENDING to RESERVED, with each code's discount and the first expiry. false: the order is
    /// no longer pending (released by a DELETE or the sweeper, or settled by a twin request).
    pub async fn settle_order_reserved(
        &self,
        id: &OrderId,
        decider: i64,
        discounts: &[i64],
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.settle_order(
            "state = 2, discounts = $4, expires_at = $5",
            &[
                (&id.as_str(), Type::TEXT),
                (&now, Type::TIMESTAMPTZ),
                (&decider, Type::INT8),
                (&discounts, Type::INT8_ARRAY),
                (&expires_at, Type::TIMESTAMPTZ),
            ],
        )
        .await
    }

    /// PENDING to REFUSED, keeping the refusal (a retry gets it again). false: no longer pending.
    pub async fn settle_order_refused(
        &self,
        id: &OrderId,
        decider: i64,
        refusal: &str,
        code: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.settle_order(
            "state = 5, refusal = $4, refused_code = $5",
            &[
                (&id.as_str(), Type::TEXT),
                (&now, Type::TIMESTAMPTZ),
                (&decider, Type::INT8),
                (&refusal, Type::TEXT),
                (&code, Type::TEXT),
            ],
        )
        .await
    }

    /// Settles a PENDING order (`$1` its id, `$2` the instant, `$3` its decider): only a pending
    /// order its decider holds moves, so of a request and the sweeper (or a DELETE), one wins.
    async fn settle_order(
        &self,
        set: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<bool, StoreError> {
        timed(Dependency::Postgres, "settle_order", async {
            let n = self
                .client()
                .await?
                .execute_typed(
                    &format!(
                        "UPDATE customer_order SET {set}, decider = NULL, settled_at = $2
                          WHERE order_id = $1 AND state = 1 AND decider = $3"
                    ),
                    params,
                )
                .await?;
            Ok(n == 1)
        })
        .await
    }

    /// RESERVED to CONFIRMED (a CONFIRMED order stays so); answers the order as it is after.
    /// Claimed here, in one statement, before any code is confirmed: the sweeper expires only
    /// RESERVED orders, so once this commits no expiry of the order can run.
    pub async fn confirm_order(
        &self,
        id: &OrderId,
        now: DateTime<Utc>,
    ) -> Result<Option<StoredOrder>, StoreError> {
        self.move_order(
            "confirm_order",
            "UPDATE customer_order SET state = 3, settled_at = $2
              WHERE order_id = $1 AND state = 2",
            id,
            now,
        )
        .await
    }

    /// PENDING, RESERVED or CONFIRMED to RELEASED (CANCELLED); answers the order as it is after.
    pub async fn release_order(
        &self,
        id: &OrderId,
        now: DateTime<Utc>,
    ) -> Result<Option<StoredOrder>, StoreError> {
        self.move_order(
            "release_order",
            "UPDATE customer_order SET state = 4, release_reason = 'CANCELLED', settled_at = $2,
                                       decider = NULL
              WHERE order_id = $1 AND state <= 3",
            id,
            now,
        )
        .await
    }

    async fn move_order(
        &self,
        name: &'static str,
        update: &str,
        id: &OrderId,
        now: DateTime<Utc>,
    ) -> Result<Option<StoredOrder>, StoreError> {
        timed(Dependency::Postgres, name, async {
            let client = self.client().await?;
            client
                .execute_typed(
                    update,
                    &[(&id.as_str(), Type::TEXT), (&now, Type::TIMESTAMPTZ)],
                )
                .await?;
            read_order(&client, id).await
        })
        .await
    }

    /// For each code, in the order given: does it give a percentage (false: a fixed amount)?
    /// A campaign's code gives what its campaign gives. None: a code does not exist.
    pub async fn percent_discounts(
        &self,
        codes: &[VoucherCode],
    ) -> Result<Option<Vec<bool>>, StoreError> {
        timed(Dependency::Postgres, "percent_discounts", async {
            let names: Vec<&str> = codes.iter().map(VoucherCode::as_str).collect();
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT CASE WHEN v.campaign_id IS NULL THEN v.discount_percent IS NOT NULL
                                 ELSE (SELECT g.discount_percent IS NOT NULL FROM campaign g
                                        WHERE g.id = v.campaign_id) END AS percent
                       FROM unnest($1::text[]) WITH ORDINALITY AS c(code, i)
                       JOIN voucher v ON v.code = c.code
                      ORDER BY c.i",
                    &[(&names, Type::TEXT_ARRAY)],
                )
                .await?;
            if rows.len() != codes.len() {
                return Ok(None);
            }
            Ok(Some(rows.iter().map(|r| r.get("percent")).collect()))
        })
        .await
    }

    /// The sweeper's order pass: pending orders created before `lease_start` (a crash left them)
    /// and reserved orders whose expiry is at or before `now` become RELEASED, at most `limit`
    /// of each, and their codes' reservations still held become due at `now`, so the expiry
    /// that follows releases them, every use of one order in the same sweep.
    pub async fn sweep_orders(
        &self,
        now: DateTime<Utc>,
        lease_start: DateTime<Utc>,
        limit: i64,
    ) -> Result<OrdersSwept, StoreError> {
        timed(Dependency::Postgres, "sweep_orders", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    "WITH pending AS (
                       SELECT order_id FROM customer_order
                        WHERE state = 1 AND created_at < $2
                        ORDER BY created_at LIMIT $3 FOR UPDATE SKIP LOCKED),
                     due AS (
                       SELECT order_id FROM customer_order
                        WHERE state = 2 AND expires_at <= $1
                        ORDER BY expires_at LIMIT $3 FOR UPDATE SKIP LOCKED),
                     o AS (
                       UPDATE customer_order o
                          SET state = 4, settled_at = $1, decider = NULL,
                              release_reason = CASE WHEN o.state = 1 THEN 'ABANDONED'
                                                    ELSE 'EXPIRED' END
                        WHERE o.order_id IN (SELECT order_id FROM pending
                                             UNION ALL SELECT order_id FROM due)
                       RETURNING o.order_id, o.codes, o.release_reason),
                     r AS (
                       UPDATE redemption r SET expires_at = $1 - interval '1 millisecond'
                         FROM o, unnest(o.codes) AS c(code)
                        WHERE r.voucher_code = c.code AND r.order_id = o.order_id
                          AND r.status = 1 AND r.expires_at >= $1
                       RETURNING 1)
                     SELECT count(*) FILTER (WHERE release_reason = 'ABANDONED') AS abandoned,
                            count(*) FILTER (WHERE release_reason = 'EXPIRED') AS expired,
                            (SELECT count(*) FROM r) AS uses
                       FROM o",
                    &[
                        (&now, Type::TIMESTAMPTZ),
                        (&lease_start, Type::TIMESTAMPTZ),
                        (&limit, Type::INT8),
                    ],
                )
                .await?;
            let row = rows.first().ok_or(StoreError::NoRow)?;
            Ok(OrdersSwept {
                abandoned: row.get::<_, i64>("abandoned") as u64,
                expired: row.get::<_, i64>("expired") as u64,
            })
        })
        .await
    }

    /// Deletes settled orders: refused ones settled before `refused_before`, confirmed and
    /// released ones before `settled_before`, at most `limit` of each. Their codes'
    /// reservations stay, as every reservation does.
    pub async fn retire_orders(
        &self,
        refused_before: DateTime<Utc>,
        settled_before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        timed(Dependency::Postgres, "retire_orders", async {
            let n = self
                .client()
                .await?
                .execute_typed(
                    "DELETE FROM customer_order WHERE order_id IN (
                       (SELECT order_id FROM customer_order
                         WHERE state >= 3 AND settled_at < $1 AND state = 5
                         ORDER BY settled_at LIMIT $3)
                       UNION ALL
                       (SELECT order_id FROM customer_order
                         WHERE state >= 3 AND settled_at < $2 AND state IN (3, 4)
                         ORDER BY settled_at LIMIT $3))",
                    &[
                        (&refused_before, Type::TIMESTAMPTZ),
                        (&settled_before, Type::TIMESTAMPTZ),
                        (&limit, Type::INT8),
                    ],
                )
                .await?;
            Ok(n)
        })
        .await
    }
}
