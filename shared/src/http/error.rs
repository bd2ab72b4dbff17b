//! The one place where errors become HTTP: status code, `{"error", "message"}` body, extra
//! fields (`reason`, `Retry-After`). Every operation's error enum is mapped here and nowhere else.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::Outcome;
use crate::domain::Invalid;
use crate::events::EventError;
use crate::gate::GateError;
use crate::reservations::error::{
    CampaignError, ConfirmError, CreateCampaignError, CreateVoucherError, GetReservationError,
    GetVoucherError, ListError, OrderError, PatchVoucherError, ReleaseError, ReserveError,
    WarmupError,
};
use crate::store::StoreError;
use crate::telemetry::Chain;

/// Seconds a client is asked to wait after a 503.
const RETRY_AFTER_SECONDS: u32 = 1;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// NOT_ELIGIBLE's `reason` field.
    pub reason: Option<&'static str>,
    /// An order's refusal or failure: the code it came from (`code` in the body).
    pub voucher: Option<String>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(rename = "code", skip_serializing_if = "Option::is_none")]
    voucher: Option<&'a str>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            reason: None,
            voucher: None,
        }
    }

    fn not_eligible(reason: &'static str, message: String) -> Self {
        ApiError {
            reason: Some(reason),
            ..ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "NOT_ELIGIBLE", message)
        }
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", message)
    }

    pub fn too_large(limit: usize) -> Self {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "INVALID_REQUEST",
            format!("request body is larger than {limit} bytes"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            error: self.code,
            message: &self.message,
            reason: self.reason,
            voucher: self.voucher.as_deref(),
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.status == StatusCode::PAYLOAD_TOO_LARGE {
            // Past `DRAIN_LIMIT` the rest of the body was never read: the connection cannot
            // carry another request, so say so rather than let the client reuse it and fail.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
            .extensions_mut()
            .insert(Outcome(self.reason.unwrap_or(self.code)));
        response
    }
}

impl From<Invalid> for ApiError {
    fn from(e: Invalid) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        // The detail goes to the log, not to the client.
        tracing::error!(error = %Chain(&e), "postgres failure");
        ApiError::unavailable("the database is unavailable; retry later")
    }
}

impl From<GateError> for ApiError {
    fn from(e: GateError) -> Self {
        tracing::error!(error = %Chain(&e), "redis failure");
        ApiError::unavailable("the flash-sale gate is unavailable; retry later")
    }
}

impl From<EventError> for ApiError {
    fn from(e: EventError) -> Self {
        tracing::error!(error = %Chain(&e), "event broker failure");
        ApiError::unavailable("the event queue is unavailable; retry later")
    }
}

impl From<WarmupError> for ApiError {
    fn from(e: WarmupError) -> Self {
        let message = e.to_string();
        match e {
            WarmupError::Invalid(e) => e.into(),
            WarmupError::NotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "VOUCHER_NOT_FOUND", message)
            }
            WarmupError::NotFlashSale => {
                ApiError::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
            }
            WarmupError::Busy | WarmupError::EventsInFlight => ApiError::unavailable(message),
            WarmupError::Events(e) => e.into(),
            WarmupError::Store(e) => e.into(),
            WarmupError::Gate(e) => e.into(),
        }
    }
}

impl From<CreateVoucherError> for ApiError {
    fn from(e: CreateVoucherError) -> Self {
        let message = e.to_string();
        match e {
            CreateVoucherError::Invalid(e) => e.into(),
            CreateVoucherError::Exists(_) => {
                ApiError::new(StatusCode::CONFLICT, "VOUCHER_EXISTS", message)
            }
            CreateVoucherError::Unavailable(e) => e.into(),
        }
    }
}

impl From<GetVoucherError> for ApiError {
    fn from(e: GetVoucherError) -> Self {
        let message = e.to_string();
        match e {
            GetVoucherError::Invalid(e) => e.into(),
            GetVoucherError::NotFound(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "VOUCHER_NOT_FOUND", message)
            }
            GetVoucherError::Unavailable(e) => e.into(),
        }
    }
}

impl From<ReserveError> for ApiError {
    fn from(e: ReserveError) -> Self {
        use ReserveError::*;
        let message = e.to_string();
        match e {
            Invalid(e) => e.into(),
            VoucherNotFound => ApiError::new(StatusCode::NOT_FOUND, "VOUCHER_NOT_FOUND", message),
            OutOfStock => ApiError::new(StatusCode::CONFLICT, "OUT_OF_STOCK", message),
            AlreadyUsed => ApiError::new(StatusCode::CONFLICT, "ALREADY_USED", message),
            BudgetExhausted => ApiError::new(StatusCode::CONFLICT, "BUDGET_EXHAUSTED", message),
            OrderConflict => ApiError::new(StatusCode::CONFLICT, "ORDER_CONFLICT", message),
            OrderAmountMismatch => {
                ApiError::new(StatusCode::CONFLICT, "ORDER_AMOUNT_MISMATCH", message)
            }
            Released => ApiError::new(StatusCode::CONFLICT, "RESERVATION_RELEASED", message),
            Inactive => ApiError::not_eligible("INACTIVE", message),
            NotStarted => ApiError::not_eligible("NOT_STARTED", message),
            Expired => ApiError::not_eligible("EXPIRED", message),
            MinOrderAmount => ApiError::not_eligible("MIN_ORDER_AMOUNT", message),
            WarmingUp => ApiError::unavailable(message),
            Unavailable(e) => e.into(),
            Gate(e) => e.into(),
            Events(e) => e.into(),
        }
    }
}

impl From<PatchVoucherError> for ApiError {
    fn from(e: PatchVoucherError) -> Self {
        let message = e.to_string();
        match e {
            PatchVoucherError::Invalid(e) => e.into(),
            PatchVoucherError::NotFound(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "VOUCHER_NOT_FOUND", message)
            }
            PatchVoucherError::LimitBelowUsed(_) => {
                ApiError::new(StatusCode::CONFLICT, "LIMIT_BELOW_USED", message)
            }
            PatchVoucherError::SlotsInUse(_) => {
                ApiError::new(StatusCode::CONFLICT, "SLOTS_IN_USE", message)
            }
            PatchVoucherError::BudgetBelowUsed(_) => {
                ApiError::new(StatusCode::CONFLICT, "BUDGET_BELOW_USED", message)
            }
            PatchVoucherError::CampaignCode(_) => {
                ApiError::new(StatusCode::CONFLICT, "CAMPAIGN_CODE", message)
            }
            PatchVoucherError::Busy => ApiError::unavailable(message),
            PatchVoucherError::Unavailable(e) => e.into(),
            PatchVoucherError::Gate(e) => e.into(),
        }
    }
}

impl From<ListError> for ApiError {
    fn from(e: ListError) -> Self {
        let message = e.to_string();
        match e {
            ListError::Invalid(e) => e.into(),
            ListError::VoucherNotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "VOUCHER_NOT_FOUND", message)
            }
            ListError::Unavailable(e) => e.into(),
        }
    }
}

impl From<GetReservationError> for ApiError {
    fn from(e: GetReservationError) -> Self {
        let message = e.to_string();
        match e {
            GetReservationError::Invalid(e) => e.into(),
            GetReservationError::NotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "RESERVATION_NOT_FOUND", message)
            }
            GetReservationError::Unavailable(e) => e.into(),
            GetReservationError::Gate(e) => e.into(),
            GetReservationError::Pending => ApiError::unavailable(message),
        }
    }
}

impl From<ConfirmError> for ApiError {
    fn from(e: ConfirmError) -> Self {
        let message = e.to_string();
        match e {
            ConfirmError::Invalid(e) => e.into(),
            ConfirmError::NotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "RESERVATION_NOT_FOUND", message)
            }
            ConfirmError::Released => {
                ApiError::new(StatusCode::CONFLICT, "RESERVATION_RELEASED", message)
            }
            ConfirmError::Pending => ApiError::unavailable(message),
            ConfirmError::Unavailable(e) => e.into(),
            ConfirmError::Gate(e) => e.into(),
        }
    }
}

impl From<ReleaseError> for ApiError {
    fn from(e: ReleaseError) -> Self {
        let message = e.to_string();
        match e {
            ReleaseError::Invalid(e) => e.into(),
            ReleaseError::NotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "RESERVATION_NOT_FOUND", message)
            }
            ReleaseError::Pending => ApiError::unavailable(message),
            ReleaseError::Unavailable(e) => e.into(),
            ReleaseError::Gate(e) => e.into(),
        }
    }
}

impl From<CreateCampaignError> for ApiError {
    fn from(e: CreateCampaignError) -> Self {
        let message = e.to_string();
        match e {
            CreateCampaignError::Invalid(e) => e.into(),
            CreateCampaignError::CodeExists(_) => {
                ApiError::new(StatusCode::CONFLICT, "CODE_EXISTS", message)
            }
            CreateCampaignError::CodesExhausted(_) => {
                ApiError::new(StatusCode::CONFLICT, "CODES_EXHAUSTED", message)
            }
            CreateCampaignError::Unavailable(e) => e.into(),
        }
    }
}

impl From<CampaignError> for ApiError {
    fn from(e: CampaignError) -> Self {
        let message = e.to_string();
        match e {
            CampaignError::Invalid(e) => e.into(),
            CampaignError::NotFound(_) => {
                ApiError::new(StatusCode::NOT_FOUND, "CAMPAIGN_NOT_FOUND", message)
            }
            CampaignError::LimitBelowUsed(_) => {
                ApiError::new(StatusCode::CONFLICT, "LIMIT_BELOW_USED", message)
            }
            CampaignError::BudgetBelowUsed(_) => {
                ApiError::new(StatusCode::CONFLICT, "BUDGET_BELOW_USED", message)
            }
            CampaignError::Busy => ApiError::unavailable(message),
            CampaignError::Unavailable(e) => e.into(),
            CampaignError::Gate(e) => e.into(),
        }
    }
}

impl From<OrderError> for ApiError {
    fn from(e: OrderError) -> Self {
        let message = e.to_string();
        let of_code = |code: String, inner: ApiError| ApiError {
            message: message.clone(),
            voucher: Some(code),
            ..inner
        };
        match e {
            OrderError::Invalid(e) => e.into(),
            OrderError::Reserve { code, error } => of_code(code, error.into()),
            OrderError::Confirm { code, error } => of_code(code, error.into()),
            OrderError::Release { code, error } => of_code(code, error.into()),
            OrderError::NotCombinable(code) => ApiError {
                voucher: Some(code),
                ..ApiError::new(StatusCode::CONFLICT, "NOT_COMBINABLE", message)
            },
            OrderError::Conflict => ApiError::new(StatusCode::CONFLICT, "ORDER_CONFLICT", message),
            OrderError::NotFound => {
                ApiError::new(StatusCode::NOT_FOUND, "ORDER_NOT_FOUND", message)
            }
            OrderError::Released => {
                ApiError::new(StatusCode::CONFLICT, "RESERVATION_RELEASED", message)
            }
            OrderError::Pending => ApiError::unavailable(message),
            OrderError::Unavailable(e) => e.into(),
        }
    }
}
