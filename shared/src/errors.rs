//! One error type per operation. Each says what went wrong in domain words; the single mapping
//! to HTTP status codes and bodies lives in `http::error`.

use crate::domain::Invalid;
use crate::events::EventError;
use crate::gate::GateError;

/// Infrastructure failure: the caller may retry later (HTTP 503).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("bad database configuration: {0}")]
    Config(#[source] tokio_postgres::Error),
    #[error("no database connection: {0}")]
    Pool(String),
    #[error("database error: {}", postgres_detail(.0))]
    Postgres(#[from] tokio_postgres::Error),
    #[error("migration failed: {0}")]
    Migration(String),
    #[error("database returned no row")]
    NoRow,
    #[error("database returned an unexpected outcome {0:?}")]
    UnexpectedOutcome(String),
}

/// `tokio_postgres::Error` prints "db error" alone for a server error; the server's message
/// (e.g. an unknown role) is what an operator needs in the log.
fn postgres_detail(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
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
    #[error("the flash-sale gate is loading this voucher; retry shortly")]
    WarmingUp,
    #[error(transparent)]
    Unavailable(#[from] StoreError),
    #[error("redis is unavailable: {0}")]
    Gate(#[from] GateError),
    #[error("the event queue is unavailable: {0}")]
    Events(#[from] EventError),
}

impl From<WarmupError> for ReserveError {
    fn from(e: WarmupError) -> Self {
        match e {
            WarmupError::Store(e) => ReserveError::Unavailable(e),
            WarmupError::Gate(e) => ReserveError::Gate(e),
            WarmupError::NotFound => ReserveError::VoucherNotFound,
            WarmupError::Invalid(e) => ReserveError::Invalid(e),
            WarmupError::NotFlashSale | WarmupError::Busy | WarmupError::EventsInFlight => {
                ReserveError::WarmingUp
            }
            WarmupError::Events(e) => ReserveError::Events(e),
        }
    }
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
    #[error("redis is unavailable: {0}")]
    Gate(#[from] GateError),
}

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("no reservation for this voucher and orderId")]
    NotFound,
    #[error(transparent)]
    Unavailable(#[from] StoreError),
    #[error("redis is unavailable: {0}")]
    Gate(#[from] GateError),
}

#[derive(Debug, thiserror::Error)]
pub enum WarmupError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("voucher does not exist")]
    NotFound,
    #[error("voucher is not a flash-sale voucher; only those are loaded into Redis")]
    NotFlashSale,
    #[error("another process is loading this voucher; retry shortly")]
    Busy,
    #[error("reservation events are still in flight; the gate is loaded once they have landed")]
    EventsInFlight,
    #[error("the event queue is unavailable: {0}")]
    Events(#[from] EventError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("redis is unavailable: {0}")]
    Gate(#[from] GateError),
}
