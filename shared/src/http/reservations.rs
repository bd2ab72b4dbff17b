//! The reservation routes: validate, reserve, read, confirm, release, list.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::app::App;
use crate::domain::{
    OrderId, ReservationList, ReservationListQuery, Reserve, ReserveRequest, Validate,
    ValidateRequest, VoucherCode,
};

use super::*;

pub(super) async fn list_reservations(
    State(app): State<App>,
    code: Result<Path<String>, PathRejection>,
    q: Result<Query<ReservationListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let code = VoucherCode::parse(&path(code)?)?;
    let list = ReservationList::parse(code, query(q)?)?;
    let page = app.reservations().reservations(&list).await?;
    Ok(ok(StatusCode::OK, "LISTED", Json(page)))
}

pub(super) async fn validate(
    State(app): State<App>,
    code: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody<ValidateRequest>,
) -> Result<Response, ApiError> {
    let code = VoucherCode::parse(&path(code)?)?;
    let request = Validate::parse(code, body)?;
    let eligibility = app.reservations().validate(&request).await?;
    Ok(ok(StatusCode::OK, "ELIGIBLE", Json(eligibility)))
}

pub(super) async fn reserve(
    State(app): State<App>,
    code: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody<ReserveRequest>,
) -> Result<Response, ApiError> {
    let code = VoucherCode::parse(&path(code)?)?;
    let request = Reserve::parse(code, body)?;
    let order_id = LoggedOrderId(request.order_id.as_str().to_owned());
    let result = app.reservations().reserve(&request).await;
    let mut response = match result {
        Ok(reservation) => ok(StatusCode::CREATED, "RESERVED", Json(reservation)),
        Err(e) => ApiError::from(e).into_response(),
    };
    response.extensions_mut().insert(order_id);
    Ok(response)
}

pub(super) fn key(
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<(VoucherCode, OrderId), ApiError> {
    let (code, order_id) = path(p)?;
    Ok((VoucherCode::parse(&code)?, OrderId::parse(&order_id)?))
}

pub(super) async fn get_reservation(
    State(app): State<App>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (code, order_id) = key(p)?;
    let view = app.reservations().reservation(&code, &order_id).await?;
    Ok(ok(StatusCode::OK, "FOUND", Json(view)))
}

pub(super) async fn confirm(
    State(app): State<App>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (code, order_id) = key(p)?;
    let confirmation = app.reservations().confirm(&code, &order_id).await?;
    Ok(ok(StatusCode::OK, "CONFIRMED", Json(confirmation)))
}

pub(super) async fn release(
    State(app): State<App>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (code, order_id) = key(p)?;
    app.reservations().release(&code, &order_id).await?;
    Ok(ok(StatusCode::NO_CONTENT, "RELEASED", ()))
}
