//! Names and metadata (`domain::Description`): written alone, or in the transaction of a
//! change of the rules, so that a refusal of either writes neither. The merge is Postgres':
//! `metadata || change`, then `jsonb_strip_nulls` drops the keys the change set to null; the
//! `*_metadata_keys` constraints bound the keys the merge leaves.

use deadpool_postgres::Transaction;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use super::{Store, StoreError};
use crate::domain::{Description, Metadata, VoucherCode};
use crate::telemetry::metrics::{timed, Dependency};

/// Whose name and metadata.
#[derive(Debug, Clone, Copy)]
pub enum Described<'a> {
    Voucher(&'a VoucherCode),
    Campaign(i64),
}

/// What writing a name and metadata came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescribeOutcome {
    Applied,
    NotFound,
    /// The merge would leave more keys than the constraint allows: nothing written.
    TooManyKeys,
}

impl Store {
    /// A change of name and metadata alone (no rule changes with it).
    pub async fn describe(
        &self,
        target: Described<'_>,
        change: &Description,
    ) -> Result<DescribeOutcome, StoreError> {
        timed(Dependency::Postgres, "describe", async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let outcome = describe_in(&tx, target, change).await?;
            if outcome == DescribeOutcome::Applied {
                tx.commit().await?;
            }
            Ok(outcome)
        })
        .await
    }
}

/// Writes `change` in `tx`; on TooManyKeys the transaction is aborted: drop it.
pub(super) async fn describe_in(
    tx: &Transaction<'_>,
    target: Described<'_>,
    change: &Description,
) -> Result<DescribeOutcome, StoreError> {
    if change.is_empty() {
        return Ok(DescribeOutcome::Applied);
    }
    let (sql, key) = match target {
        Described::Voucher(_) => (
            "UPDATE voucher SET name = CASE WHEN $2 THEN $3 ELSE name END,
                                metadata = jsonb_strip_nulls(metadata || $4::jsonb)
              WHERE code = $1",
            "voucher_metadata_keys",
        ),
        Described::Campaign(_) => (
            "UPDATE campaign SET name = CASE WHEN $2 THEN $3 ELSE name END,
                                 metadata = jsonb_strip_nulls(metadata || $4::jsonb)
              WHERE id = $1::text::int8",
            "campaign_metadata_keys",
        ),
    };
    let id = match target {
        Described::Voucher(code) => code.as_str().to_owned(),
        Described::Campaign(id) => id.to_string(),
    };
    let name = change.name.clone().flatten();
    let result = tx
        .execute_typed(
            sql,
            &[
                (&id, Type::TEXT),
                (&change.name.is_some(), Type::BOOL),
                (&name, Type::TEXT),
                (&change.metadata_json(), Type::TEXT),
            ],
        )
        .await;
    match result {
        Ok(0) => Ok(DescribeOutcome::NotFound),
        Ok(_) => Ok(DescribeOutcome::Applied),
        Err(e)
            if e.code() == Some(&SqlState::CHECK_VIOLATION)
                && e.as_db_error().and_then(|db| db.constraint()) == Some(key) =>
        {
            Ok(DescribeOutcome::TooManyKeys)
        }
        Err(e) => Err(e.into()),
    }
}

/// A `metadata::text` column as read back.
pub(super) fn metadata_of(row: &tokio_postgres::Row) -> Result<Metadata, StoreError> {
    let text: &str = row.get("metadata");
    serde_json::from_str(text).map_err(|e| StoreError::UnexpectedOutcome(format!("metadata: {e}")))
}
