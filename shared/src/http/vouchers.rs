//! The voucher routes: create, read, change, list, warm up.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;

use crate::app::App;
use crate::domain::{
    CreateVoucherRequest, NewVoucher, PatchVoucherRequest, VoucherCode, VoucherList,
    VoucherListQuery, VoucherPatch,
};

use super::*;

pub(super) async fn create_voucher(
    State(app): State<App>,
    JsonBody(body): JsonBody<CreateVoucherRequest>,
) -> Result<Response, ApiError> {
    let voucher = NewVoucher::try_from(body)?;
    let view = app.reservations().create_voucher(&voucher).await?;
    Ok(ok(StatusCode::CREATED, "CREATED", Json(view)))
}

pub(super) async fn get_voucher(
    State(app): State<App>,
    code: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let code = VoucherCode::parse(&path(code)?)?;
    let view = app.reservations().voucher(&code).await?;
    Ok(ok(StatusCode::OK, "FOUND", Json(view)))
}

pub(super) async fn patch_voucher(
    State(app): State<App>,
    code: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody<PatchVoucherRequest>,
) -> Result<Response, ApiError> {
    let code = VoucherCode::parse(&path(code)?)?;
    let patch = VoucherPatch::try_from(body)?;
    let view = app.reservations().patch_voucher(&code, &patch).await?;
    Ok(ok(StatusCode::OK, "PATCHED", Json(view)))
}

pub(super) async fn list_vouchers(
    State(app): State<App>,
    q: Result<Query<VoucherListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let list = VoucherList::parse(query(q)?)?;
    let page = app.reservations().vouchers(&list).await?;
    Ok(ok(StatusCode::OK, "LISTED", Json(page)))
}

pub(super) async fn warmup(
    State(app): State<App>,
    code: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let code = VoucherCode::parse(&path(code)?)?;
    let warmed = app.reservations().warm(&code).await?;
    Ok(ok(StatusCode::OK, "WARMED", Json(warmed)))
}
