//! One error type per operation. Each says what went wrong in domain words and keeps the error
//! that caused it as its `source`, so a log line shows the whole chain
//! ([`crate::telemetry::Chain`]); the single mapping to HTTP status codes and bodies lives in
//! `http::error`. The layers below raise their own (`StoreError`, `GateError`, `EventError`),
//! which these wrap.

use crate::domain::{Invalid, Reservation, ReserveOutcome, VoucherCode};
use crate::events::EventError;
use crate::gate::GateError;
use crate::store::{Reserved, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum CreateVoucherError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("voucher {0} already exists")]
    Exists(String),
    #[error("the database is unavailable")]
    Unavailable(#[from] StoreError),
}

#[derive(Debug, thiserror::Error)]
pub enum GetVoucherError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("voucher {0} does not exist")]
    NotFound(String),
    #[error("the database is unavailable")]
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
    #[error("the voucher's budget left is smaller than this reserve's discount")]
    BudgetExhausted,
    #[error("orderId already holds this voucher for another customer")]
    OrderConflict,
    #[error(
        "orderId already holds this voucher for another orderAmount; a retry must send the first request's body"
    )]
    OrderAmountMismatch,
    #[error("this orderId's reservation was released; use a new orderId")]
    Released,
    #[error("voucher is paused")]
    Inactive,
    #[error("voucher sale has not started")]
    NotStarted,
    #[error("voucher sale has ended")]
    Expired,
    #[error("order amount is below the voucher's minimum")]
    MinOrderAmount,
    #[error("the flash-sale gate is loading this voucher; retry shortly")]
    WarmingUp,
    #[error("the database is unavailable")]
    Unavailable(#[from] StoreError),
    #[error("redis is unavailable")]
    Gate(#[from] GateError),
    #[error("the event queue is unavailable")]
    Events(#[from] EventError),
}

impl ReserveError {
    /// The one mapping from a refusal word (gate or SQL) to the error it answers. None for the
    /// outcomes that are not refusals (RESERVED, REPLAY, ELIGIBLE).
    pub fn refusal(outcome: ReserveOutcome) -> Option<ReserveError> {
        use ReserveOutcome as O;
        Some(match outcome {
            O::Reserved | O::Replay | O::Eligible => return None,
            O::Inactive => ReserveError::Inactive,
            O::OrderConflict => ReserveError::OrderConflict,
            O::OrderAmountMismatch => ReserveError::OrderAmountMismatch,
            O::ReservationReleased => ReserveError::Released,
            O::VoucherNotFound => ReserveError::VoucherNotFound,
            O::NotLoaded | O::Suspect => ReserveError::WarmingUp,
            O::NotStarted => ReserveError::NotStarted,
            O::Expired => ReserveError::Expired,
            O::MinOrderAmount => ReserveError::MinOrderAmount,
            O::AlreadyUsed => ReserveError::AlreadyUsed,
            O::OutOfStock => ReserveError::OutOfStock,
            O::BudgetExhausted => ReserveError::BudgetExhausted,
        })
    }
}

impl ReserveError {
    /// The error for an outcome that must be a refusal (a refused +1, a gate refusal); one that
    /// holds a use here means the layers disagree, answered as unavailable.
    pub fn refused(outcome: ReserveOutcome) -> ReserveError {
        ReserveError::refusal(outcome)
            .unwrap_or_else(|| StoreError::UnexpectedOutcome(outcome.as_str().into()).into())
    }
}

impl ReserveError {
    /// The refusal word this error answers (the inverse of [`ReserveError::refusal`]); None for
    /// a failure (a store, the gate, the events, a gate loading), which decides nothing.
    pub fn outcome(&self) -> Option<ReserveOutcome> {
        use ReserveOutcome as O;
        Some(match self {
            ReserveError::VoucherNotFound => O::VoucherNotFound,
            ReserveError::OutOfStock => O::OutOfStock,
            ReserveError::AlreadyUsed => O::AlreadyUsed,
            ReserveError::BudgetExhausted => O::BudgetExhausted,
            ReserveError::OrderConflict => O::OrderConflict,
            ReserveError::OrderAmountMismatch => O::OrderAmountMismatch,
            ReserveError::Released => O::ReservationReleased,
            ReserveError::Inactive => O::Inactive,
            ReserveError::NotStarted => O::NotStarted,
            ReserveError::Expired => O::Expired,
            ReserveError::MinOrderAmount => O::MinOrderAmount,
            ReserveError::Invalid(_)
            | ReserveError::WarmingUp
            | ReserveError::Unavailable(_)
            | ReserveError::Gate(_)
            | ReserveError::Events(_) => return None,
        })
    }
}

impl ReserveError {
    /// The operation's answer to what Postgres made of a reserve.
    pub fn answer(stored: Reserved) -> Result<Reservation, ReserveError> {
        match stored {
            Ok(Ok(reservation)) => Ok(reservation),
            Ok(Err(outcome)) => Err(ReserveError::refused(outcome)),
            Err(e) => Err(e.into()),
        }
    }
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

/// A validation answers as a reserve would at that moment (the same refusals, the same HTTP
/// answers), so it shares the reserve's error type.
pub type ValidateError = ReserveError;

#[derive(Debug, thiserror::Error)]
pub enum PatchVoucherError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("voucher {0} does not exist")]
    NotFound(String),
    #[error("totalLimit: {0}")]
    LimitBelowUsed(String),
    #[error("counterSlots: {0}")]
    SlotsInUse(String),
    #[error("budgetAmount: {0}")]
    BudgetBelowUsed(String),
    /// A campaign's code changes with its campaign.
    #[error("this code belongs to campaign {0}: change it with PATCH /campaigns/{0}")]
    CampaignCode(i64),
    /// Another change, or a load into the gate, holds the voucher's gate lock.
    #[error("another change to this voucher is in progress; retry shortly")]
    Busy,
    #[error("the database is unavailable")]
    Unavailable(#[from] StoreError),
    #[error("redis is unavailable")]
    Gate(#[from] GateError),
}

/// Listing vouchers or a voucher's reservations.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("voucher does not exist")]
    VoucherNotFound,
    #[error("the database is unavailable")]
    Unavailable(#[from] StoreError),
}

#[derive(Debug, thiserror::Error)]
pub enum GetReservationError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("no reservation for this voucher and orderId")]
    NotFound,
    #[error("the database is unavailable")]
    Unavailable(#[from] StoreError),
    /// Mode B: Postgres has no row yet and the gate, which may hold it, did not answer.
    #[error("redis is unavailable")]
    Gate(#[from] GateError),
    /// Mode B: unknown to Postgres and to a gate that lost data since it loaded the voucher,
    /// while that voucher's events are still on their way: not "not found" yet.
    #[error("the reservation may still be on its way to the database; retry shortly")]
    Pending,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfirmError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("no reservation for this voucher and orderId")]
    NotFound,
    #[error("reservation was released and cannot be confirmed")]
    Released,
    #[error("the reservation may still be on its way to the database; retry shortly")]
    Pending,
    #[error("the database is unavailable")]
    Unavailable(#[from] StoreError),
    #[error("redis is unavailable")]
    Gate(#[from] GateError),
}

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("no reservation for this voucher and orderId")]
    NotFound,
    #[error("the reservation may still be on its way to the database; retry shortly")]
    Pending,
    #[error("the database is unavailable")]
    Unavailable(#[from] StoreError),
    #[error("redis is unavailable")]
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
    #[error("the event queue is unavailable")]
    Events(#[from] EventError),
    #[error("the database is unavailable")]
    Store(#[from] StoreError),
    #[error("redis is unavailable")]
    Gate(#[from] GateError),
}

/// What can fail while a mode-B confirm or release writes a reservation from the gate.
#[derive(Debug, thiserror::Error)]
pub enum FromGateError {
    /// Neither Postgres nor the gate knows the order, but the gate lost data since it loaded
    /// the voucher (Redis failed over or restarted) and events are still on their way: the
    /// order may be one of them, so it is not "not found" yet.
    #[error("the reservation may still be on its way to the database; retry shortly")]
    Pending,
    #[error("the database is unavailable")]
    Store(#[from] StoreError),
    #[error("redis is unavailable")]
    Gate(#[from] GateError),
}

impl From<FromGateError> for ConfirmError {
    fn from(e: FromGateError) -> Self {
        match e {
            FromGateError::Pending => ConfirmError::Pending,
            FromGateError::Store(e) => ConfirmError::Unavailable(e),
            FromGateError::Gate(e) => ConfirmError::Gate(e),
        }
    }
}

impl From<FromGateError> for GetReservationError {
    fn from(e: FromGateError) -> Self {
        match e {
            FromGateError::Pending => GetReservationError::Pending,
            FromGateError::Store(e) => GetReservationError::Unavailable(e),
            FromGateError::Gate(e) => GetReservationError::Gate(e),
        }
    }
}

impl From<FromGateError> for ReleaseError {
    fn from(e: FromGateError) -> Self {
        match e {
            FromGateError::Pending => ReleaseError::Pending,
            FromGateError::Store(e) => ReleaseError::Unavailable(e),
            FromGateError::Gate(e) => ReleaseError::Gate(e),
        }
    }
}

/// Creating a campaign.
#[derive(Debug, thiserror::Error)]
pub enum CreateCampaignError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// An imported code is a voucher's or another campaign's already: nothing created.
    #[error("code {0} already exists")]
    CodeExists(String),
    /// Generated codes kept meeting existing ones: the pattern's space is too full.
    #[error("codes: too few free codes of this pattern ({0} could not be drawn); use a longer length or another prefix")]
    CodesExhausted(u64),
    #[error("the database is unavailable")]
    Unavailable(#[from] StoreError),
}

/// Reading, listing or changing campaigns.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("campaign {0} does not exist")]
    NotFound(i64),
    #[error("totalLimit: {0}")]
    LimitBelowUsed(String),
    #[error("budgetAmount: {0}")]
    BudgetBelowUsed(String),
    /// Another change, or a load into the gate, holds a flash-sale campaign's gate lock.
    #[error("another change to this campaign is in progress; retry shortly")]
    Busy,
    #[error("the database is unavailable")]
    Unavailable(#[from] StoreError),
    #[error("redis is unavailable")]
    Gate(#[from] GateError),
}

/// An order of several codes (`/orders/{orderId}`). A code's own refusal or failure keeps the
/// single-code error and names the code.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// A code refused (nothing of the order is held), or failed (503: the order stays pending
    /// and a retry of the same request goes on with it).
    #[error("{code}: {error}")]
    Reserve { code: String, error: ReserveError },
    #[error("{code}: {error}")]
    Confirm { code: String, error: ConfirmError },
    #[error("{code}: {error}")]
    Release { code: String, error: ReleaseError },
    #[error("{0} is exclusive: it is never combined with another code in one order")]
    NotCombinable(String),
    #[error(
        "orderId already holds another order (another customer, orderAmount or codes); a retry must send the first request's body"
    )]
    Conflict,
    #[error("no order has this orderId")]
    NotFound,
    #[error("this order was released or refused and holds nothing; use a new orderId")]
    Released,
    #[error("this order is still being decided; retry shortly")]
    Pending,
    #[error("the database is unavailable")]
    Unavailable(#[from] StoreError),
}

impl OrderError {
    pub fn reserve(code: &VoucherCode, error: ReserveError) -> Self {
        OrderError::Reserve {
            code: code.as_str().to_owned(),
            error,
        }
    }
}
