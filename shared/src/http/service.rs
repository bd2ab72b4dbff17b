//! The service's own routes: health, the OpenAPI document, metrics, the console, liveness,
//! and the router's answers for no route and no method.

use std::time::Duration;

use axum::extract::State;
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::app::App;

use super::*;

/// Readiness: Postgres decides; Redis down only degrades flash vouchers.
pub(super) async fn health(State(app): State<App>) -> Response {
    let health = app.health(Duration::from_secs(1)).await;
    let (postgres_up, redis_up) = (health.postgres, health.redis);
    let state = |up: bool| if up { "up" } else { "down" };
    let (status, outcome) = if postgres_up {
        (StatusCode::OK, "HEALTHY")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "UNHEALTHY")
    };
    let body = json!({
        "status": if !postgres_up { "unavailable" } else if redis_up { "ok" } else { "degraded" },
        "postgres": state(postgres_up),
        "redis": state(redis_up),
    });
    ok(status, outcome, Json(body))
}

/// The API's OpenAPI document, generated from the route table and the types (`openapi`).
pub(super) async fn openapi() -> Response {
    let body = (
        [(header::CONTENT_TYPE, "application/json")],
        super::openapi::json(),
    );
    ok(StatusCode::OK, "OPENAPI", body)
}

/// The metrics this process recorded, for a Prometheus scrape and the console; 404 when the
/// process exports none (`flashgate serve` installs the exporter at start, see
/// `telemetry::prometheus`).
pub(super) async fn prometheus_metrics() -> Response {
    match crate::telemetry::prometheus::render() {
        Some(text) => {
            let body = ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text);
            ok(StatusCode::OK, "METRICS", body)
        }
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "METRICS_NOT_EXPORTED",
            "this process exports no metrics: `flashgate serve` does",
        )
        .into_response(),
    }
}

/// The operator's live console: one static page (HTML and its script), which reads the API
/// and `/metrics` with the token its user types in.
pub(super) const CONSOLE: &str = include_str!("console.html");

pub(super) async fn console() -> Response {
    let body = (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // The page runs only its own inline script and talks only to this server.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'",
            ),
        ],
        CONSOLE,
    );
    ok(StatusCode::OK, "CONSOLE", body)
}

/// Liveness, touching nothing: also the ceiling of this HTTP stack in benchmarks.
pub(super) async fn live() -> Response {
    ok(StatusCode::OK, "LIVE", Json(json!({"status": "ok"})))
}

pub(super) async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        format!("no route for {method} {}", uri.path()),
    )
}

pub(super) async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        format!("{method} is not allowed on {}", uri.path()),
    )
}
