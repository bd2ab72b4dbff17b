//! Reading a request: the JSON body extractor with its size limit, its drain and its deadline,
//! and the path and query parsers, each turning a bad input into a 4xx that names it.

use axum::body::{Body, Bytes};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, Path, Query, Request};
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;

use super::*;

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 16 * 1024;

/// Most of a too-large body read (and thrown away) before its 413: a client still sending
/// would otherwise find the connection closed under it (a reset, not the answer). Past this,
/// the connection is closed anyway; the bound keeps a client from making the server read
/// without end.
pub const DRAIN_LIMIT: usize = 2 * 1024 * 1024;

/// When the body of a request must have arrived, set by the local server
/// (`ServerSettings::request_timeout`); past it, 408. Lambda receives bodies whole.
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline(pub tokio::time::Instant);

/// A JSON body parsed with the path of the offending field in every error message.
///
/// The body must be declared `application/json` (or `application/*+json`), else 415: an HTML
/// form or a `text/plain` request, which a browser sends cross-site without asking, never
/// reaches a handler.
///
/// `LIMIT` is the largest body accepted: [`BODY_LIMIT`] but where a route takes more (a
/// campaign's imported codes).
pub struct JsonBody<T, const LIMIT: usize = BODY_LIMIT>(pub T);

/// Whether a `Content-Type` value declares JSON: `application/json` or `application/*+json`,
/// parameters (`; charset=utf-8`) allowed, case ignored.
pub(super) fn declares_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json") || subtype.to_ascii_lowercase().ends_with("+json"))
}

/// The body, at most `limit` bytes; past it, the rest is read and dropped up to
/// [`DRAIN_LIMIT`] (or `limit`, when larger) so the client is reading when its 413 comes.
pub(super) async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt as _;
    let mut body = body;
    let (mut kept, mut seen) = (Vec::new(), 0usize);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "INVALID_REQUEST",
                format!("the request body could not be read: {e}"),
            )
        })?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        seen += data.len();
        if seen <= limit {
            kept.extend_from_slice(&data);
        } else if seen > DRAIN_LIMIT.max(limit) {
            break;
        }
    }
    if seen > limit {
        return Err(ApiError::too_large(limit));
    }
    Ok(Bytes::from(kept))
}

impl<T: DeserializeOwned, S: Send + Sync, const LIMIT: usize> FromRequest<S>
    for JsonBody<T, LIMIT>
{
    type Rejection = ApiError;

    async fn from_request(req: Request, _: &S) -> Result<Self, ApiError> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        if !content_type.is_some_and(declares_json) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UNSUPPORTED_MEDIA_TYPE",
                format!(
                    "content-type: the body must be sent as application/json, not {}",
                    content_type.unwrap_or("without a content-type")
                ),
            ));
        }
        let deadline = req.extensions().get::<BodyDeadline>().copied();
        let read = read_body(req.into_body(), LIMIT);
        let read = match deadline {
            Some(BodyDeadline(at)) => tokio::time::timeout_at(at, read).await.map_err(|_| {
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "REQUEST_TIMEOUT",
                    "the request body did not arrive in time",
                )
            })?,
            None => read.await,
        };
        let bytes = read?;
        let de = &mut serde_json::Deserializer::from_slice(&bytes);
        serde_path_to_error::deserialize(de)
            .map(JsonBody)
            .map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                let message = if path == "." || path.starts_with('?') {
                    format!("invalid JSON body: {inner}")
                } else {
                    format!("{path}: {inner}")
                };
                ApiError::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
            })
    }
}

pub(super) fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(t)| t)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", e.body_text()))
}

/// A query string parsed into `T` (unknown parameters refused), as a 400 naming the problem.
pub(super) fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
            format!("query: {}", e.body_text()),
        )
    })
}

#[cfg(test)]
mod content_type_tests {
    use super::declares_json;

    #[test]
    fn only_json_media_types_are_json() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/problem+json",
        ] {
            assert!(declares_json(ok), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            "json",
            "",
        ] {
            assert!(!declares_json(bad), "{bad}");
        }
    }
}
