//! Reservations: validating and making them (standard mode, `fg_reserve_strict`, then the loop
//! `fg_reserve_batch`), reading one
//! and listing a voucher's.

use chrono::{DateTime, Utc};
use tokio_postgres::types::Type;

use super::merge::set_then_loop;
use super::rows::{one_row_each, page_next, raised, row_facts};
use super::Store;
use super::StoreError;
use crate::domain::{
    OrderId, Page, Reservation, ReservationItem, ReservationList, ReservationView, Reserve,
    ReserveOutcome, Status, Validate, VoucherCode,
};
use crate::telemetry::metrics::{timed, Dependency};

impl Store {
    /// A page of a voucher's reservations in orderId order (keyset: the page after
    /// `list.after`), filtered by status and customer. None: no such voucher.
    pub async fn reservations(
        &self,
        list: &ReservationList,
    ) -> Result<Option<Page<ReservationItem>>, StoreError> {
        timed(Dependency::Postgres, "reservations", async {
            let after = list.after.as_ref().map(OrderId::as_str);
            let status = list.status.map(Status::as_db);
            // The voucher's own row comes first, so an unknown voucher is told apart from an empty
            // page; the page's rows follow it.
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT r.order_id, r.customer_id, r.status, r.discount_amount, r.order_amount,
                            r.reserved_at, r.expires_at, r.confirmed_at, r.released_at,
                            r.release_reason, o.codes AS order_codes
                       FROM voucher v
                       LEFT JOIN LATERAL (
                            SELECT * FROM redemption x
                             WHERE x.voucher_code = v.code
                               AND ($2::text IS NULL OR x.order_id > $2)
                               AND ($3::smallint IS NULL OR x.status = $3)
                               AND ($4::bigint IS NULL OR x.customer_id = $4)
                             ORDER BY x.order_id
                             LIMIT $5) r ON true
                       -- The order of several codes this reservation is one code of, if any.
                       LEFT JOIN customer_order o
                              ON o.order_id = r.order_id AND r.voucher_code = ANY (o.codes)
                      WHERE v.code = $1
                      ORDER BY r.order_id",
                    &[
                        (&list.code.as_str(), Type::TEXT),
                        (&after, Type::TEXT),
                        (&status, Type::INT2),
                        (&list.customer_id, Type::INT8),
                        (&(list.limit + 1), Type::INT8),
                    ],
                )
                .await
                .map_err(StoreError::from)?;
            if rows.is_empty() {
                return Ok(None);
            }
            let mut items = Vec::with_capacity(rows.len());
            for row in &rows {
                let Some(order_id) = row.get::<_, Option<String>>("order_id") else {
                    continue; // the voucher exists, the page is empty
                };
                let status: i16 = row.get("status");
                items.push(ReservationItem {
                    order_id,
                    customer_id: row.get("customer_id"),
                    status: Status::from_db(status)
                        .ok_or_else(|| StoreError::UnexpectedOutcome(format!("status {status}")))?,
                    discount_amount: row.get("discount_amount"),
                    order_amount: row.get("order_amount"),
                    reserved_at: row.get("reserved_at"),
                    expires_at: row.get("expires_at"),
                    confirmed_at: row.get("confirmed_at"),
                    released_at: row.get("released_at"),
                    release_reason: row.get("release_reason"),
                    order_codes: row.get("order_codes"),
                });
            }
            let next = page_next(&mut items, list.limit, |r| {
                ReservationList::cursor(&r.order_id)
            });
            Ok(Some(Page { items, next }))
        })
        .await
    }

    /// Would a reserve be granted now, by Postgres' rules (`fg_validate`, reads only)? The
    /// outcome (ELIGIBLE or the refusal) and the discount it would be given.
    pub async fn validate(
        &self,
        v: &Validate,
        now: DateTime<Utc>,
    ) -> Result<(ReserveOutcome, i64), StoreError> {
        timed(Dependency::Postgres, "validate", async {
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT outcome, discount_amount FROM fg_validate($1, $2, $3, $4)",
                    &[
                        (&v.code.as_str(), Type::TEXT),
                        (&v.customer_id, Type::INT8),
                        (&v.order_amount, Type::INT8),
                        (&now, Type::TIMESTAMPTZ),
                    ],
                )
                .await?;
            let row = rows.first().ok_or(StoreError::NoRow)?;
            let word: &str = row.get("outcome");
            let outcome = ReserveOutcome::parse(word)
                .ok_or_else(|| StoreError::UnexpectedOutcome(word.to_owned()))?;
            Ok((
                outcome,
                row.get::<_, Option<i64>>("discount_amount").unwrap_or(0),
            ))
        })
        .await
    }

    /// Standard-mode reserve on its own: a batch of one (`fg_reserve_strict`, the loop when it
    /// declines). Group commit batches the reserves that arrive together.
    pub async fn reserve(&self, r: &Reserve, now: DateTime<Utc>) -> Reserved {
        timed(Dependency::Postgres, "reserve", async {
            self.reserve_batch(&[(r, now)])
                .await?
                .pop()
                .ok_or(StoreError::NoRow)?
        })
        .await
    }

    /// Many standard-mode reserves in one round trip and one transaction (`fg_reserve_strict`:
    /// a fixed handful of statements for the whole batch, or when the requests depend on one
    /// another's order, a second round trip with the loop of `fg_reserve` calls), answered in the order given; the
    /// outer error: the call itself failed and none was applied. Callers keep batches to
    /// [`MERGE_BATCH_MAX`](super::MERGE_BATCH_MAX).
    pub async fn reserve_batch(
        &self,
        requests: &[(&Reserve, DateTime<Utc>)],
    ) -> Result<Vec<Reserved>, StoreError> {
        timed(Dependency::Postgres, "reserve_batch", async {
            set_then_loop(|looped| self.run_reserve_batch(requests, looped)).await
        })
        .await
    }

    async fn run_reserve_batch(
        &self,
        requests: &[(&Reserve, DateTime<Utc>)],
        looped: bool,
    ) -> Result<Vec<Reserved>, StoreError> {
        let codes: Vec<&str> = requests.iter().map(|(r, _)| r.code.as_str()).collect();
        let orders: Vec<&str> = requests.iter().map(|(r, _)| r.order_id.as_str()).collect();
        let customers: Vec<i64> = requests.iter().map(|(r, _)| r.customer_id).collect();
        let amounts: Vec<i64> = requests.iter().map(|(r, _)| r.order_amount).collect();
        let nows: Vec<DateTime<Utc>> = requests.iter().map(|(_, now)| *now).collect();
        let rows = self
            .client()
            .await?
            .query_typed(
                if looped {
                    "SELECT idx, outcome, customer_id, status, discount_amount, expires_at,
                            error_code, error_message
                       FROM fg_reserve_batch($1, $2, $3, $4, $5, true)"
                } else {
                    "SELECT idx, outcome, customer_id, status, discount_amount, expires_at,
                            error_code, error_message
                       FROM fg_reserve_strict($1, $2, $3, $4, $5)"
                },
                &[
                    (&codes, Type::TEXT_ARRAY),
                    (&orders, Type::TEXT_ARRAY),
                    (&customers, Type::INT8_ARRAY),
                    (&amounts, Type::INT8_ARRAY),
                    (&nows, Type::TIMESTAMPTZ_ARRAY),
                ],
            )
            .await?;
        one_row_each(&rows, requests.len())?;
        let mut answers: Vec<_> = requests
            .iter()
            .zip(&rows)
            .map(|((r, _), row)| reserved(r, row))
            .collect();
        let replays: Vec<usize> = rows
            .iter()
            .enumerate()
            .filter(|(_, row)| row.get::<_, Option<&str>>("outcome") == Some("REPLAY"))
            .map(|(i, _)| i)
            .collect();
        if !replays.is_empty() {
            self.refuse_other_amounts(requests, &replays, &mut answers)
                .await?;
        }
        Ok(answers)
    }

    /// A retry is the same request again: a replay whose orderAmount is not the one its row was
    /// reserved with is refused (409 ORDER_AMOUNT_MISMATCH), not answered with a discount
    /// decided for another order. The amount is read only for replays, in one query: a row's
    /// amount never changes.
    async fn refuse_other_amounts(
        &self,
        requests: &[(&Reserve, DateTime<Utc>)],
        replays: &[usize],
        answers: &mut [Reserved],
    ) -> Result<(), StoreError> {
        let codes: Vec<&str> = replays
            .iter()
            .map(|&i| requests[i].0.code.as_str())
            .collect();
        let orders: Vec<&str> = replays
            .iter()
            .map(|&i| requests[i].0.order_id.as_str())
            .collect();
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT k.i::int4 AS i, r.order_amount
                   FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(code, order_id, i)
                   JOIN redemption r ON r.voucher_code = k.code AND r.order_id = k.order_id",
                &[(&codes, Type::TEXT_ARRAY), (&orders, Type::TEXT_ARRAY)],
            )
            .await?;
        for row in rows {
            let i = replays[row.get::<_, i32>("i") as usize - 1];
            if row.get::<_, Option<i64>>("order_amount") != Some(requests[i].0.order_amount) {
                answers[i] = Ok(Err(ReserveOutcome::OrderAmountMismatch));
            }
        }
        Ok(())
    }

    /// None: the voucher has no reservation for this orderId.
    pub async fn reservation(
        &self,
        code: &VoucherCode,
        order_id: &OrderId,
    ) -> Result<Option<ReservationView>, StoreError> {
        timed(Dependency::Postgres, "reservation", async {
            let client = self.client().await?;
            let rows = client
                .query_typed(
                    "SELECT customer_id, status, discount_amount, expires_at
                       FROM redemption WHERE voucher_code = $1 AND order_id = $2",
                    &[
                        (&code.as_str(), Type::TEXT),
                        (&order_id.as_str(), Type::TEXT),
                    ],
                )
                .await?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let facts = row_facts(row)?;
            Ok(Some(ReservationView {
                order_id: order_id.as_str().to_owned(),
                customer_id: facts.customer_id,
                status: facts.status,
                discount_amount: facts.discount_amount,
                expires_at: facts.expires_at,
            }))
        })
        .await
    }
}

/// One reserve's answer from Postgres: `Ok(Ok(_))` the use is held (or was, by this order
/// already: a replay), `Ok(Err(outcome))` a rule refused it (the outcome says which), `Err` the
/// change failed.
pub type Reserved = Result<Result<Reservation, ReserveOutcome>, StoreError>;

/// One row of `fg_reserve_strict` or `fg_reserve_batch`: the reservation, or the refusal or error it came to.
fn reserved(r: &Reserve, row: &tokio_postgres::Row) -> Reserved {
    if let Some(raised) = raised(row) {
        // A refusal fg_merge found under lock, or an error.
        return raised.map(Err);
    }
    let word: &str = row.get("outcome");
    let outcome = ReserveOutcome::parse(word)
        .ok_or_else(|| StoreError::UnexpectedOutcome(word.to_owned()))?;
    if !matches!(outcome, ReserveOutcome::Reserved | ReserveOutcome::Replay) {
        return Ok(Err(outcome));
    }
    Ok(Ok(Reservation {
        order_id: r.order_id.as_str().to_owned(),
        customer_id: row.get("customer_id"),
        discount_amount: row.get("discount_amount"),
        status: Status::Reserved,
        expires_at: row.get("expires_at"),
    }))
}
