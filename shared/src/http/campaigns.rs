//! The campaign routes: create, read, list, change, and list a campaign's codes.

use axum::body::{Body, Bytes};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::Response;
use axum::Json;

use crate::app::App;
use crate::domain::{
    campaign_id, CampaignList, CampaignListQuery, CampaignPatch, CodeList, CodeListQuery,
    CreateCampaignRequest, NewCampaign, PatchCampaignRequest, CAMPAIGN_BODY_LIMIT,
};

use super::*;

pub(super) async fn create_campaign(
    State(app): State<App>,
    JsonBody(body): JsonBody<CreateCampaignRequest, CAMPAIGN_BODY_LIMIT>,
) -> Result<Response, ApiError> {
    let campaign = NewCampaign::try_from(body)?;
    let view = app.reservations().create_campaign(&campaign).await?;
    Ok(ok(StatusCode::CREATED, "CREATED", Json(view)))
}

pub(super) async fn get_campaign(
    State(app): State<App>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = campaign_id(&path(id)?)?;
    let view = app.reservations().campaign(id).await?;
    Ok(ok(StatusCode::OK, "FOUND", Json(view)))
}

pub(super) async fn list_campaigns(
    State(app): State<App>,
    q: Result<Query<CampaignListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let list = CampaignList::parse(query(q)?)?;
    let page = app.reservations().campaigns(&list).await?;
    Ok(ok(StatusCode::OK, "LISTED", Json(page)))
}

pub(super) async fn patch_campaign(
    State(app): State<App>,
    id: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody<PatchCampaignRequest>,
) -> Result<Response, ApiError> {
    let id = campaign_id(&path(id)?)?;
    let patch = CampaignPatch::try_from(body)?;
    let view = app.reservations().patch_campaign(id, &patch).await?;
    Ok(ok(StatusCode::OK, "PATCHED", Json(view)))
}

/// A page of JSON, or with `Accept: text/csv` every code from `after` on as one CSV download,
/// read from Postgres as it is sent.
pub(super) async fn list_codes(
    State(app): State<App>,
    id: Result<Path<String>, PathRejection>,
    q: Result<Query<CodeListQuery>, QueryRejection>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let id = campaign_id(&path(id)?)?;
    let list = CodeList::parse(id, query(q)?)?;
    let csv = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/csv"));
    if !csv {
        let page = app.reservations().campaign_codes(&list).await?;
        return Ok(ok(StatusCode::OK, "LISTED", Json(page)));
    }
    use futures::StreamExt as _;
    let rows = app.reservations().campaign_codes_stream(&list).await?;
    let lines = rows.map(|item| {
        item.map(|c| Bytes::from(format!("{},{}\n", c.code, c.used_count)))
            .inspect_err(
                |e| tracing::error!(error = %crate::telemetry::Chain(e), "code listing cut short"),
            )
    });
    let body =
        futures::stream::once(async { Ok(Bytes::from_static(b"code,usedCount\n")) }).chain(lines);
    let headers = [
        (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
        (
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"campaign-{id}-codes.csv\""),
        ),
    ];
    Ok(ok(
        StatusCode::OK,
        "LISTED",
        (headers, Body::from_stream(body)),
    ))
}
