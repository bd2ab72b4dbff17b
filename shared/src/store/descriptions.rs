//! Names and metadata (`domain::Description`): written alone, or in the transaction of a
//! change of the rules, so that a refusal of either writes neither. The merge is Postgres':
//! `metadata || change`, then `jsonb_strip_nulls` drops the keys the change set to null; the
//! `*_metadata_keys` constraints bound the keys the merge leaves.

use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

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
    /// A change of name and metadata alone (no rule changes with it): one statement.
    pub async fn describe(
        &self,
        target: Described<'_>,
        change: &Description,
    ) -> Result<DescribeOutcome, StoreError> {
        timed(Dependency::Postgres, "describe", async {
            let client = self.client().await?;
            describe_in(&**client, target, change).await
        })
        .await
    }
}

/// Writes `change` through `client` (a transaction, when a change of the rules goes with it:
/// on TooManyKeys that transaction is aborted, drop it).
pub(super) async fn describe_in(
    client: &impl GenericClient,
    target: Described<'_>,
    change: &Description,
) -> Result<DescribeOutcome, StoreError> {
    if change.is_empty() {
        return Ok(DescribeOutcome::Applied);
    }
    const SET: &str = "SET name = CASE WHEN $2 THEN $3 ELSE name END,
                           metadata = jsonb_strip_nulls(metadata || $4::jsonb)";
    let name_set = change.name.is_some();
    let name = change.name.clone().flatten();
    let metadata = change.metadata_json();
    let (result, key) = match target {
        Described::Voucher(code) => (
            client
                .execute_typed(
                    &format!("UPDATE voucher {SET} WHERE code = $1"),
                    &[
                        (&code.as_str(), Type::TEXT),
                        (&name_set, Type::BOOL),
                        (&name, Type::TEXT),
                        (&metadata, Type::TEXT),
                    ],
                )
                .await,
            "voucher_metadata_keys",
        ),
        Described::Campaign(id) => (
            client
                .execute_typed(
                    &format!("UPDATE campaign {SET} WHERE id = $1"),
                    &[
                        (&id, Type::INT8),
                        (&name_set, Type::BOOL),
                        (&name, Type::TEXT),
                        (&metadata, Type::TEXT),
                    ],
                )
                .await,
            "campaign_metadata_keys",
        ),
    };
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
