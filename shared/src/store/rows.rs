//! Row readers more than one query of the store shares: the voucher's rules, a reservation's
//! facts, what a batch row says was raised, and the page a list query read. A reader only one
//! query needs stays next to that query.

use tokio_postgres::Row;

use super::RowFacts;
use super::StoreError;
use crate::domain::{Discount, ReserveOutcome, Status, VoucherRules};

/// The voucher's rules from a row with the voucher's columns (`voucher_state`, `gate_source`).
pub(super) fn voucher_rules(row: &Row) -> VoucherRules {
    VoucherRules {
        discount: Discount::from_columns(
            row.get("discount_amount"),
            row.get("discount_percent"),
            row.get("max_discount_amount"),
        ),
        min_order_amount: row.get("min_order_amount"),
        total_limit: row.get("total_limit"),
        per_user_limit: row.get("per_user_limit"),
        starts_at: row.get("starts_at"),
        ends_at: row.get("ends_at"),
        active: row.get("active"),
        budget_amount: row.get("budget_amount"),
    }
}

/// Keeps the first `limit` items; the cursor of the last kept one when more followed.
pub(super) fn page_next<T>(
    items: &mut Vec<T>,
    limit: i64,
    cursor: impl Fn(&T) -> String,
) -> Option<String> {
    if items.len() as i64 <= limit {
        return None;
    }
    items.truncate(limit as usize);
    items.last().map(cursor)
}

pub(super) fn row_facts(row: &Row) -> Result<RowFacts, StoreError> {
    let raw: i16 = row.get("status");
    Ok(RowFacts {
        customer_id: row.get("customer_id"),
        status: Status::from_db(raw).ok_or(StoreError::UnexpectedOutcome(raw.to_string()))?,
        discount_amount: row.get("discount_amount"),
        expires_at: row.get("expires_at"),
    })
}

/// A batch answers one row per change, in order.
pub(super) fn one_row_each(rows: &[Row], changes: usize) -> Result<(), StoreError> {
    if rows.len() == changes {
        return Ok(());
    }
    Err(StoreError::UnexpectedOutcome(format!(
        "{} answers for {changes} changes",
        rows.len()
    )))
}

/// What a batch row says Postgres raised for its change: None when nothing was; the refusal
/// when `fg_merge` refused a +1 (SQLSTATE FG409, the reserve outcome as message); else the
/// error.
pub(super) fn raised(row: &Row) -> Option<Result<ReserveOutcome, StoreError>> {
    let code: String = row.get::<_, Option<String>>("error_code")?;
    let message: String = row.get("error_message");
    Some(match ReserveOutcome::parse(&message) {
        Some(refused) if code == "FG409" => Ok(refused),
        _ => Err(StoreError::Refused { code, message }),
    })
}
