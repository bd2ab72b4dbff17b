//! The one status change: every reserve written from the gate, confirm, release, event and
//! sweep goes through [`Store::merge_batch`], which calls `fg_merge_strict`: the set-based write
//! of a whole batch, with exactly `fg_merge`'s outcomes, or the loop `fg_merge_batch` when it
//! declines (docs/ARCHITECTURE.md, "The reservation lattice" and "Set-based batch writes").
//! Mode A's fresh winners try `fg_merge_winners` first ([`Store::merge_winners`]): the same
//! outcome for a batch of plain new uses, in fewer statements, and `merge_batch` when it declines.

use chrono::{DateTime, Utc};
use tokio_postgres::types::Type;
use tokio_postgres::Row;

use super::rows::{one_row_each, raised, row_facts};
use super::Store;
use super::StoreError;
use crate::domain::{Held, OrderId, ReleaseReason, ReserveOutcome, Status, VoucherCode};
use crate::telemetry::metrics::{timed, Dependency};

/// One status change: the arguments of `fg_merge`. Built by [`Merge::by_key`] (the caller knows
/// only the key) or [`Merge::held`] (the caller knows the whole reservation).
#[derive(Debug, Clone)]
pub struct Merge<'a> {
    code: &'a str,
    order_id: &'a str,
    /// None: only the key is known (API confirm and release); a missing row is then NOT_FOUND.
    customer_id: Option<i64>,
    status: Status,
    order_amount: Option<i64>,
    discount_amount: Option<i64>,
    reserved_at: Option<DateTime<Utc>>,
    expires_at: Option<DateTime<Utc>>,
    reason: Option<ReleaseReason>,
    now: DateTime<Utc>,
    /// A refused +1 stores RELEASED/REVOKED instead of failing the call.
    revoke: bool,
}

impl<'a> Merge<'a> {
    /// A change that knows only the key (confirm, release): a missing row is NOT_FOUND.
    pub fn by_key(code: &'a VoucherCode, order_id: &'a str, status: Status) -> Self {
        Merge {
            code: code.as_str(),
            order_id,
            customer_id: None,
            status,
            order_amount: None,
            discount_amount: None,
            reserved_at: None,
            expires_at: None,
            reason: None,
            now: crate::domain::millis(Utc::now()),
            revoke: false,
        }
    }

    /// A change that carries the whole reservation, as the gate or its event holds it: a
    /// missing row is created with these facts (mode A's winner, mode B's event, a confirm or
    /// release ahead of its event, an orphan's tombstone).
    pub fn held(
        code: &'a VoucherCode,
        order_id: &'a str,
        held: Held,
        order_amount: i64,
        status: Status,
    ) -> Self {
        Merge {
            customer_id: Some(held.customer_id),
            order_amount: Some(order_amount),
            discount_amount: Some(held.discount),
            reserved_at: DateTime::from_timestamp_millis(held.reserved_ms),
            expires_at: DateTime::from_timestamp_millis(held.expires_ms),
            ..Merge::by_key(code, order_id, status)
        }
    }

    /// Why a RELEASED change happened (default CANCELLED).
    pub fn reason(mut self, reason: ReleaseReason) -> Self {
        self.reason = Some(reason);
        self
    }

    /// The change's clock, when the caller decides with one it already read (a sweep).
    pub fn at(mut self, now: DateTime<Utc>) -> Self {
        self.now = now;
        self
    }

    /// A refused use is stored RELEASED/REVOKED instead of failing (mode B's consumer: the gate
    /// already told the customer yes).
    pub fn revoking(mut self) -> Self {
        self.revoke = true;
        self
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeOutcome {
    Applied,
    Unchanged,
    OrderConflict,
    NotFound,
    Revoked,
    /// A +1 refused without `revoking`: nothing was written. OUT_OF_STOCK or ALREADY_USED.
    Refused(ReserveOutcome),
}

/// What `fg_merge` answered, with the row as it stands afterwards (absent for NOT_FOUND and
/// refusals), and whether the voucher is a flash-sale one, whose gate may need telling (false
/// when unknown: NOT_FOUND or a refusal).
#[derive(Debug, Clone)]
pub struct Merged {
    pub outcome: MergeOutcome,
    pub row: Option<RowFacts>,
    pub flash_sale: bool,
}

#[derive(Debug, Clone)]
pub struct RowFacts {
    pub customer_id: i64,
    pub status: Status,
    pub discount_amount: i64,
    pub expires_at: DateTime<Utc>,
}

/// Most changes the loop (`fg_merge_batch`, each change in a savepoint) runs in one
/// transaction: past 64 subtransactions a transaction's snapshot overflows its cache, which
/// slows every backend. Group commit keeps its batches to this, so that each of its batches is
/// one transaction on either path.
pub const MERGE_BATCH_MAX: usize = 64;

/// Most changes one [`Store::merge_batch`] call should carry. The set-based path takes them
/// all in one transaction, without a subtransaction; when it falls back to the loop, the loop
/// runs them [`MERGE_BATCH_MAX`] at a time, each chunk a transaction of its own. The consumer
/// sends batches this long: a batch's fixed part (about twenty statements and the commit's WAL
/// flush) is then paid once for hundreds of events, not once for every 64.
pub const MERGE_SET_MAX: usize = 512;

impl Store {
    /// The one status change: every confirm, release, event and sweep goes through here.
    pub async fn merge(&self, m: &Merge<'_>) -> Result<Merged, StoreError> {
        timed(Dependency::Postgres, "merge", async {
            self.merge_batch(std::slice::from_ref(m))
                .await?
                .pop()
                .ok_or(StoreError::NoRow)?
        })
        .await
    }

    /// Many changes in one round trip and one transaction (`fg_merge_strict`): one commit for
    /// them all, and a fixed handful of statements whatever the batch's size. When the
    /// set-based path does not take the batch (it raises, and nothing was written), the loop
    /// runs it, each change in a savepoint (`fg_merge_batch`): the same answers, in a second
    /// round trip. Each succeeds or fails alone (the outer error: the call itself failed);
    /// answers come in the order given. Callers keep batches to [`MERGE_SET_MAX`]. A batch of
    /// at most [`MERGE_BATCH_MAX`] is one transaction on either path, so an outer error means
    /// none was applied; a longer one runs the loop a chunk at a time, so an outer error may
    /// leave the chunks before it applied: only callers whose changes merge into nothing when
    /// run again (the consumer's events) send more.
    pub async fn merge_batch(
        &self,
        merges: &[Merge<'_>],
    ) -> Result<Vec<Result<Merged, StoreError>>, StoreError> {
        timed(Dependency::Postgres, "merge_batch", async {
            set_then_loop(|looped| async move {
                if !looped {
                    return self.run_merge_batch(merges, false).await;
                }
                let mut answers = Vec::with_capacity(merges.len());
                for chunk in merges.chunks(MERGE_BATCH_MAX) {
                    answers.extend(self.run_merge_batch(chunk, true).await?);
                }
                Ok(answers)
            })
            .await
        })
        .await
    }

    async fn run_merge_batch(
        &self,
        merges: &[Merge<'_>],
        looped: bool,
    ) -> Result<Vec<Result<Merged, StoreError>>, StoreError> {
        let codes: Vec<&str> = merges.iter().map(|m| m.code).collect();
        let orders: Vec<&str> = merges.iter().map(|m| m.order_id).collect();
        let customers: Vec<Option<i64>> = merges.iter().map(|m| m.customer_id).collect();
        let statuses: Vec<i16> = merges.iter().map(|m| m.status.as_db()).collect();
        let amounts: Vec<Option<i64>> = merges.iter().map(|m| m.order_amount).collect();
        let discounts: Vec<Option<i64>> = merges.iter().map(|m| m.discount_amount).collect();
        let reserved: Vec<Option<DateTime<Utc>>> = merges.iter().map(|m| m.reserved_at).collect();
        let expires: Vec<Option<DateTime<Utc>>> = merges.iter().map(|m| m.expires_at).collect();
        let reasons: Vec<Option<&str>> = merges
            .iter()
            .map(|m| m.reason.map(ReleaseReason::as_db))
            .collect();
        let nows: Vec<DateTime<Utc>> = merges.iter().map(|m| m.now).collect();
        let revokes: Vec<bool> = merges.iter().map(|m| m.revoke).collect();
        let rows = self
            .client()
            .await?
            .query_typed(
                if looped {
                    "SELECT idx, outcome, customer_id, status, discount_amount, expires_at,
                            flash_sale, error_code, error_message
                       FROM fg_merge_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, true)"
                } else {
                    "SELECT idx, outcome, customer_id, status, discount_amount, expires_at,
                            flash_sale, error_code, error_message
                       FROM fg_merge_strict($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
                },
                &[
                    (&codes, Type::TEXT_ARRAY),
                    (&orders, Type::TEXT_ARRAY),
                    (&customers, Type::INT8_ARRAY),
                    (&statuses, Type::INT2_ARRAY),
                    (&amounts, Type::INT8_ARRAY),
                    (&discounts, Type::INT8_ARRAY),
                    (&reserved, Type::TIMESTAMPTZ_ARRAY),
                    (&expires, Type::TIMESTAMPTZ_ARRAY),
                    (&reasons, Type::TEXT_ARRAY),
                    (&nows, Type::TIMESTAMPTZ_ARRAY),
                    (&revokes, Type::BOOL_ARRAY),
                ],
            )
            .await?;
        one_row_each(&rows, merges.len())?;
        Ok(rows.iter().map(merged).collect())
    }

    /// Mode A's winners: new uses the gate has just granted, written RESERVED. First
    /// `fg_merge_winners`, which writes a batch of nothing else in the fewest statements; when
    /// it declines (nothing written: a retry whose row landed, a customer at the limit, a slot
    /// without room, a campaign's code), [`Store::merge_batch`], which decides each change.
    pub async fn merge_winners(
        &self,
        merges: &[Merge<'_>],
    ) -> Result<Vec<Result<Merged, StoreError>>, StoreError> {
        let plain = timed(Dependency::Postgres, "merge_winners", async {
            let codes: Vec<&str> = merges.iter().map(|m| m.code).collect();
            let orders: Vec<&str> = merges.iter().map(|m| m.order_id).collect();
            let customers: Vec<Option<i64>> = merges.iter().map(|m| m.customer_id).collect();
            let amounts: Vec<Option<i64>> = merges.iter().map(|m| m.order_amount).collect();
            let discounts: Vec<Option<i64>> = merges.iter().map(|m| m.discount_amount).collect();
            let reserved: Vec<Option<DateTime<Utc>>> =
                merges.iter().map(|m| m.reserved_at).collect();
            let expires: Vec<Option<DateTime<Utc>>> = merges.iter().map(|m| m.expires_at).collect();
            let rows = self
                .client()
                .await?
                .query_typed(
                    "SELECT idx, outcome, customer_id, status, discount_amount, expires_at,
                            flash_sale, error_code, error_message
                       FROM fg_merge_winners($1, $2, $3, $4, $5, $6, $7)",
                    &[
                        (&codes, Type::TEXT_ARRAY),
                        (&orders, Type::TEXT_ARRAY),
                        (&customers, Type::INT8_ARRAY),
                        (&amounts, Type::INT8_ARRAY),
                        (&discounts, Type::INT8_ARRAY),
                        (&reserved, Type::TIMESTAMPTZ_ARRAY),
                        (&expires, Type::TIMESTAMPTZ_ARRAY),
                    ],
                )
                .await?;
            one_row_each(&rows, merges.len())?;
            Ok(rows.iter().map(merged).collect())
        })
        .await;
        match plain {
            Err(StoreError::Postgres(e)) if e.as_db_error().is_some() => {
                self.merge_batch(merges).await
            }
            other => other,
        }
    }

    /// An orphan's tombstone (`fg_recover_orphan`): written only where Postgres has no row for
    /// the order or the row is still RESERVED, decided under the row's lock. A confirm that
    /// wrote the row since the sweeper looked wins: UNCHANGED with its CONFIRMED row.
    pub async fn recover_orphan(&self, m: &Merge<'_>) -> Result<Merged, StoreError> {
        timed(Dependency::Postgres, "recover_orphan", async {
            let row = self
                .client()
                .await?
                .query_one(
                    "SELECT outcome, customer_id, status, discount_amount, expires_at,
                            true AS flash_sale
                       FROM fg_recover_orphan($1, $2, $3, $4, $5, $6, $7, $8)",
                    &[
                        &m.code,
                        &m.order_id,
                        &m.customer_id,
                        &m.order_amount,
                        &m.discount_amount,
                        &m.reserved_at,
                        &m.expires_at,
                        &m.now,
                    ],
                )
                .await?;
            let outcome = match row.get::<_, &str>("outcome") {
                "APPLIED" => MergeOutcome::Applied,
                "UNCHANGED" => MergeOutcome::Unchanged,
                "ORDER_CONFLICT" => MergeOutcome::OrderConflict,
                other => return Err(StoreError::UnexpectedOutcome(other.to_owned())),
            };
            Ok(Merged {
                outcome,
                row: Some(row_facts(&row)?),
                flash_sale: true,
            })
        })
        .await
    }

    /// Confirm by key: the row as it stands afterwards (None: no such reservation).
    pub async fn confirm(
        &self,
        code: &VoucherCode,
        order_id: &OrderId,
    ) -> Result<Option<RowFacts>, StoreError> {
        timed(Dependency::Postgres, "confirm", async {
            let merge = Merge::by_key(code, order_id.as_str(), Status::Confirmed);
            match self.merge(&merge).await {
                // No voucher, so no reservation of it either.
                Err(e) if is_unknown_voucher(&e) => Ok(None),
                merged => Ok(merged?.row),
            }
        })
        .await
    }

    /// Release by key (None: no such reservation).
    pub async fn release(
        &self,
        code: &VoucherCode,
        order_id: &OrderId,
    ) -> Result<Option<Merged>, StoreError> {
        timed(Dependency::Postgres, "release", async {
            let merge = Merge::by_key(code, order_id.as_str(), Status::Released)
                .reason(ReleaseReason::Cancelled);
            let merged = match self.merge(&merge).await {
                Err(e) if is_unknown_voucher(&e) => return Ok(None),
                merged => merged?,
            };
            Ok(merged.row.is_some().then_some(merged))
        })
        .await
    }
}

/// One row of `fg_merge_strict` or `fg_merge_batch`: the change's outcome, or what Postgres raised for it.
fn merged(row: &Row) -> Result<Merged, StoreError> {
    if let Some(raised) = raised(row) {
        return raised.map(|refused| Merged {
            outcome: MergeOutcome::Refused(refused),
            row: None,
            flash_sale: false,
        });
    }
    let outcome = match row.get::<_, &str>("outcome") {
        "APPLIED" => MergeOutcome::Applied,
        "UNCHANGED" => MergeOutcome::Unchanged,
        "ORDER_CONFLICT" => MergeOutcome::OrderConflict,
        "NOT_FOUND" => MergeOutcome::NotFound,
        "REVOKED" => MergeOutcome::Revoked,
        other => return Err(StoreError::UnexpectedOutcome(other.to_owned())),
    };
    let row_facts = match outcome {
        MergeOutcome::NotFound => None,
        _ => Some(row_facts(row)?),
    };
    Ok(Merged {
        outcome,
        row: row_facts,
        flash_sale: row.get::<_, Option<bool>>("flash_sale").unwrap_or(false),
    })
}

/// Runs a batch on the set-based path, and when that raised (a batch whose changes depend on
/// one another's order, a refusal, a bad change, a deadlock: see `sql/functions/fg_merge_batch.sql`), so that
/// nothing was written, again through the loop, each change in a savepoint of its own. Doing
/// the fallback here rather than in an EXCEPTION block in SQL spares every batch a
/// subtransaction (about a millisecond a batch, measured).
pub(super) async fn set_then_loop<T, Fut>(run: impl Fn(bool) -> Fut) -> Result<Vec<T>, StoreError>
where
    Fut: std::future::Future<Output = Result<Vec<T>, StoreError>>,
{
    match run(false).await {
        Err(StoreError::Postgres(e)) if e.as_db_error().is_some() => run(true).await,
        other => other,
    }
}

/// A query on a table that does not exist yet: the code was deployed before `migrate` ran.
/// The callers that can do without it (one release, as docs/DEPLOY.md asks) test for this.
pub fn is_undefined_table(e: &StoreError) -> bool {
    matches!(e, StoreError::Postgres(e)
        if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE))
}

/// A call of a function that does not exist yet: the code was deployed before `migrate` ran.
pub fn is_undefined_function(e: &StoreError) -> bool {
    matches!(e, StoreError::Postgres(e)
        if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_FUNCTION))
}

/// `fg_merge` raises SQLSTATE FG404 for a voucher that does not exist.
pub fn is_unknown_voucher(e: &StoreError) -> bool {
    matches!(e, StoreError::Refused { code, .. } if code == "FG404")
}

/// Whether Postgres' refusal of one change would be the same on every try: a voucher that does
/// not exist (FG404), a value out of range or of the wrong form (SQLSTATE class 22), a broken
/// constraint (class 23). Anything else (a deadlock, a serialisation failure, a connection or
/// resource problem) may pass on a retry.
pub fn never_passes(e: &StoreError) -> bool {
    matches!(e, StoreError::Refused { code, .. } if never_passes_sqlstate(code))
}

fn never_passes_sqlstate(code: &str) -> bool {
    code == "FG404" || code.starts_with("22") || code.starts_with("23")
}

#[cfg(test)]
mod tests {
    use super::never_passes_sqlstate;

    #[test]
    fn only_refusals_that_a_retry_cannot_change_never_pass() {
        // unknown voucher, check violation, numeric and datetime out of range, not null
        for code in ["FG404", "23514", "22003", "22008", "23502"] {
            assert!(never_passes_sqlstate(code), "{code}");
        }
        // deadlock, serialisation failure, too many connections, admin shutdown, lock timeout
        for code in ["40P01", "40001", "53300", "57P01", "55P03"] {
            assert!(!never_passes_sqlstate(code), "{code}");
        }
    }
}
