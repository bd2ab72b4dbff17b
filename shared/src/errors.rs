//! One error type per operation. Each says what went wrong in domain words; the single mapping
//! to HTTP status codes and bodies lives in `http::error`.

use crate::domain::Invalid;

/// Infrastructure failure: the caller may retry later (HTTP 503).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("bad database configuration: {0}")]
    Config(#[source] tokio_postgres::Error),
    #[error("no database connection: {0}")]
    Pool(String),
    #[error("database error: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("migration failed: {0}")]
    Migration(String),
    #[error("database returned no row")]
    NoRow,
    #[error("database returned an unexpected outcome {0:?}")]
    UnexpectedOutcome(String),
}

#[derive(Debug, thiserror::Error)]
pub enum CreateVoucherError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("voucher {0} already exists")]
    Exists(String),
    #[error(transparent)]
    Unavailable(#[from] StoreError),
}

#[derive(Debug, thiserror::Error)]
pub enum GetVoucherError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("voucher {0} does not exist")]
    NotFound(String),
    #[error(transparent)]
    Unavailable(#[from] StoreError),
}

#[derive(Debug, thiserror::Error)]
pub enum ReserveError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("voucher does not exist")]
    VoucherNotFound,
    #[error("voucher has no uses left")]
    OutOfStock,
    #[error("customer has reached this voucher's per-user limit")]
    AlreadyUsed,
    #[error("orderId already holds this voucher for another customer")]
    OrderConflict,
    #[error("this orderId's reservation was released; use a new orderId")]
    Released,
    #[error("voucher sale has not started")]
    NotStarted,
    #[error("voucher sale has ended")]
    Expired,
    #[error("order amount is below the voucher's minimum")]
    MinOrderAmount,
    #[error(transparent)]
    Unavailable(#[from] StoreError),
}

#[derive(Debug, thiserror::Error)]
pub enum GetReservationError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("no reservation for this voucher and orderId")]
    NotFound,
    #[error(transparent)]
    Unavailable(#[from] StoreError),
}

#[derive(Debug, thiserror::Error)]
pub enum ConfirmError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("no reservation for this voucher and orderId")]
    NotFound,
    #[error("reservation was released and cannot be confirmed")]
    Released,
    #[error(transparent)]
    Unavailable(#[from] StoreError),
}

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("no reservation for this voucher and orderId")]
    NotFound,
    #[error(transparent)]
    Unavailable(#[from] StoreError),
}
