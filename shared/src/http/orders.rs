//! The routes of orders of several codes: reserve them all or none, read, confirm, release.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::app::App;
use crate::domain::{NewOrder, OrderId, OrderRequest};

use super::*;

fn order_id(p: Result<Path<String>, PathRejection>) -> Result<OrderId, ApiError> {
    Ok(OrderId::parse(&path(p)?)?)
}

pub(super) async fn reserve_order(
    State(app): State<App>,
    p: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody<OrderRequest>,
) -> Result<Response, ApiError> {
    let order = NewOrder::parse(order_id(p)?, body)?;
    let logged = LoggedOrderId(order.order_id.as_str().to_owned());
    let mut response = match app.reservations().reserve_order(&order).await {
        Ok(view) => ok(StatusCode::CREATED, "RESERVED", Json(view)),
        Err(e) => ApiError::from(e).into_response(),
    };
    response.extensions_mut().insert(logged);
    Ok(response)
}

pub(super) async fn get_order(
    State(app): State<App>,
    p: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let view = app.reservations().order(&order_id(p)?).await?;
    Ok(ok(StatusCode::OK, "FOUND", Json(view)))
}

pub(super) async fn confirm_order(
    State(app): State<App>,
    p: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let view = app.reservations().confirm_order(&order_id(p)?).await?;
    Ok(ok(StatusCode::OK, "CONFIRMED", Json(view)))
}

pub(super) async fn release_order(
    State(app): State<App>,
    p: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    app.reservations().release_order(&order_id(p)?).await?;
    Ok(ok(StatusCode::NO_CONTENT, "RELEASED", ()))
}
