//! The HTTP API (the table in README.md, "API"), as one axum `Router` built from one route
//! table, [`ROUTES`].
//!
//! The local server serves every route; each Lambda function mounts only its family
//! ([`Routes`]) of the same router, so the handlers exist once. `template.yaml` and the
//! `cargo lambda watch` router in Cargo.toml declare the same table, and a test checks that
//! they agree. Input is parsed by [`JsonBody`] and the domain parsers, so a bad request becomes
//! a 4xx naming the field before anything touches a store; handlers call the reservation
//! service and nothing else; every error leaves through `error::ApiError`.

pub mod access;
#[cfg(test)]
mod declared_routes;
pub mod error;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRequest, MatchedPath, Path, Query, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post, MethodRouter};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::Instrument as _;

pub use self::access::Access;
use crate::app::App;
use crate::domain::{
    campaign_id, CampaignList, CampaignListQuery, CampaignPatch, CodeList, CodeListQuery,
    CreateCampaignRequest, CreateVoucherRequest, NewCampaign, NewVoucher, OrderId,
    PatchCampaignRequest, PatchVoucherRequest, ReservationList, ReservationListQuery, Reserve,
    ReserveRequest, Validate, ValidateRequest, VoucherCode, VoucherList, VoucherListQuery,
    VoucherPatch, CAMPAIGN_BODY_LIMIT,
};
use crate::telemetry::metrics;
pub use error::ApiError;

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 16 * 1024;

/// Most of a too-large body read (and thrown away) before its 413: a client still sending
/// would otherwise find the connection closed under it (a reset, not the answer). Past this,
/// the connection is closed anyway; the bound keeps a client from making the server read
/// without end.
pub const DRAIN_LIMIT: usize = 2 * 1024 * 1024;

/// Which routes a process serves. The local server takes `All`; each Lambda its own family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routes {
    All,
    Reserve,
    Confirm,
    Release,
    Admin,
    /// `GET /health/live` alone, served by [`live_router`], which needs no [`App`].
    Live,
}

impl Routes {
    /// The Lambda function that serves this family (None: the local server's every route).
    pub fn function(self) -> Option<&'static str> {
        match self {
            Routes::All => None,
            Routes::Reserve => Some("reserve"),
            Routes::Confirm => Some("confirm"),
            Routes::Release => Some("release"),
            Routes::Admin => Some("admin"),
            Routes::Live => Some("live"),
        }
    }
}

/// What a request came to, for the one log line per request: set on every response.
#[derive(Debug, Clone, Copy)]
pub struct Outcome(pub &'static str);

/// The orderId of a reserve (it is in the body, not the path), for the log line.
#[derive(Debug, Clone)]
struct LoggedOrderId(String);

/// One route: what a request must match, which Lambda function serves it, and its handler.
#[derive(Clone, Copy)]
pub struct Route {
    pub method: &'static str,
    /// axum's path syntax (`{code}`); template.yaml names the same parameters in camelCase.
    pub path: &'static str,
    /// The Lambda function that owns it in template.yaml and the `cargo lambda watch` router;
    /// [`Routes::All`] for the local server's own pages, which no function serves.
    pub family: Routes,
    /// Who may call it: the roles of template.yaml's two invoke policies (docs/DEPLOY.md),
    /// which the local server checks with bearer tokens ([`access`]).
    pub access: Access,
    handler: fn() -> MethodRouter<App>,
}

impl Route {
    /// One of the local server's own pages, outside the API (not in template.yaml, the watch
    /// router or docs/openapi.json).
    pub fn is_local(&self) -> bool {
        self.family == Routes::All
    }

    /// The health routes answer in every function (each can be probed); only admin's and
    /// live's are mapped to a path in the API. The live function serves its own route only:
    /// `/health` reads the stores it does not have.
    fn served_by(&self, routes: Routes) -> bool {
        routes == Routes::All
            || routes == self.family
            || (routes != Routes::Live && self.path.starts_with("/health"))
    }
}

/// Every route of the API.
pub const ROUTES: &[Route] = &[
    Route {
        method: "GET",
        path: "/health",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(health),
    },
    Route {
        method: "GET",
        path: LIVE_PATH,
        family: Routes::Live,
        access: Access::Open,
        handler: || get(live),
    },
    Route {
        method: "GET",
        path: "/openapi.json",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(openapi),
    },
    Route {
        method: "POST",
        path: "/vouchers",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || post(create_voucher),
    },
    Route {
        method: "GET",
        path: "/vouchers",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(list_vouchers),
    },
    Route {
        method: "GET",
        path: "/vouchers/{code}",
        family: Routes::Admin,
        access: Access::Both,
        handler: || get(get_voucher),
    },
    Route {
        method: "PATCH",
        path: "/vouchers/{code}",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || patch(patch_voucher),
    },
    Route {
        method: "POST",
        path: "/vouchers/{code}/warmup",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || post(warmup),
    },
    Route {
        method: "POST",
        path: "/campaigns",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || post(create_campaign),
    },
    Route {
        method: "GET",
        path: "/campaigns",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(list_campaigns),
    },
    Route {
        method: "GET",
        path: "/campaigns/{id}",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(get_campaign),
    },
    Route {
        method: "PATCH",
        path: "/campaigns/{id}",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || patch(patch_campaign),
    },
    Route {
        method: "GET",
        path: "/campaigns/{id}/codes",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(list_codes),
    },
    Route {
        method: "POST",
        path: "/vouchers/{code}/validations",
        family: Routes::Reserve,
        access: Access::OrderService,
        handler: || post(validate),
    },
    Route {
        method: "POST",
        path: "/vouchers/{code}/reservations",
        family: Routes::Reserve,
        access: Access::OrderService,
        handler: || post(reserve),
    },
    Route {
        method: "GET",
        path: "/vouchers/{code}/reservations",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(list_reservations),
    },
    Route {
        method: "GET",
        path: "/vouchers/{code}/reservations/{order_id}",
        family: Routes::Admin,
        access: Access::Both,
        handler: || get(get_reservation),
    },
    Route {
        method: "DELETE",
        path: "/vouchers/{code}/reservations/{order_id}",
        family: Routes::Release,
        access: Access::OrderService,
        handler: || delete(release),
    },
    Route {
        method: "POST",
        path: "/vouchers/{code}/reservations/{order_id}/confirm",
        family: Routes::Confirm,
        access: Access::OrderService,
        handler: || post(confirm),
    },
    // The local server's own pages (family `All`: no function serves them, and they are not
    // part of the API). In AWS the metrics leave through CloudWatch and the dashboard of
    // template.yaml takes the console's place.
    Route {
        method: "GET",
        path: METRICS_PATH,
        family: Routes::All,
        access: Access::Operators,
        handler: || get(prometheus_metrics),
    },
    Route {
        method: "GET",
        path: "/console",
        family: Routes::All,
        access: Access::Open,
        handler: || get(console),
    },
];

/// The local server's metrics, in Prometheus text format.
pub const METRICS_PATH: &str = "/metrics";

pub fn router(app: App, routes: Routes) -> Router {
    let mut r = Router::new();
    for route in ROUTES.iter().filter(|route| route.served_by(routes)) {
        // Two methods on one path merge into one method router.
        r = r.route(route.path, (route.handler)());
    }
    with_fallbacks(r).with_state(app)
}

/// The liveness probe's path: unsigned in the API, served by the `live` function.
pub const LIVE_PATH: &str = "/health/live";

/// The `live` function's router: [`Routes::Live`]'s one route, which touches nothing, built
/// without an [`App`], so the function reads no settings, no secret and opens no connection.
pub fn live_router() -> Router {
    with_fallbacks(Router::new().route(LIVE_PATH, get(live)))
}

/// What every router answers besides its routes, and the request log.
fn with_fallbacks<S: Clone + Send + Sync + 'static>(r: Router<S>) -> Router<S> {
    r.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // JsonBody reads bodies itself, to BODY_LIMIT then draining to DRAIN_LIMIT.
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn(log_request))
}

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
fn declares_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json") || subtype.to_ascii_lowercase().ends_with("+json"))
}

/// The body, at most `limit` bytes; past it, the rest is read and dropped up to
/// [`DRAIN_LIMIT`] (or `limit`, when larger) so the client is reading when its 413 comes.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
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

fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(t)| t)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", e.body_text()))
}

/// A query string parsed into `T` (unknown parameters refused), as a 400 naming the problem.
fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
            format!("query: {}", e.body_text()),
        )
    })
}

fn ok(status: StatusCode, outcome: &'static str, body: impl IntoResponse) -> Response {
    let mut response = (status, body).into_response();
    response.extensions_mut().insert(Outcome(outcome));
    response
}

async fn create_voucher(
    State(app): State<App>,
    JsonBody(body): JsonBody<CreateVoucherRequest>,
) -> Result<Response, ApiError> {
    let voucher = NewVoucher::try_from(body)?;
    let view = app.reservations().create_voucher(&voucher).await?;
    Ok(ok(StatusCode::CREATED, "CREATED", Json(view)))
}

async fn create_campaign(
    State(app): State<App>,
    JsonBody(body): JsonBody<CreateCampaignRequest, CAMPAIGN_BODY_LIMIT>,
) -> Result<Response, ApiError> {
    let campaign = NewCampaign::try_from(body)?;
    let view = app.reservations().create_campaign(&campaign).await?;
    Ok(ok(StatusCode::CREATED, "CREATED", Json(view)))
}

async fn get_campaign(
    State(app): State<App>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = campaign_id(&path(id)?)?;
    let view = app.reservations().campaign(id).await?;
    Ok(ok(StatusCode::OK, "FOUND", Json(view)))
}

async fn list_campaigns(
    State(app): State<App>,
    q: Result<Query<CampaignListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let list = CampaignList::parse(query(q)?)?;
    let page = app.reservations().campaigns(&list).await?;
    Ok(ok(StatusCode::OK, "LISTED", Json(page)))
}

async fn patch_campaign(
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
async fn list_codes(
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

async fn get_voucher(
    State(app): State<App>,
    code: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let code = VoucherCode::parse(&path(code)?)?;
    let view = app.reservations().voucher(&code).await?;
    Ok(ok(StatusCode::OK, "FOUND", Json(view)))
}

async fn patch_voucher(
    State(app): State<App>,
    code: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody<PatchVoucherRequest>,
) -> Result<Response, ApiError> {
    let code = VoucherCode::parse(&path(code)?)?;
    let patch = VoucherPatch::try_from(body)?;
    let view = app.reservations().patch_voucher(&code, &patch).await?;
    Ok(ok(StatusCode::OK, "PATCHED", Json(view)))
}

async fn list_vouchers(
    State(app): State<App>,
    q: Result<Query<VoucherListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let list = VoucherList::parse(query(q)?)?;
    let page = app.reservations().vouchers(&list).await?;
    Ok(ok(StatusCode::OK, "LISTED", Json(page)))
}

async fn list_reservations(
    State(app): State<App>,
    code: Result<Path<String>, PathRejection>,
    q: Result<Query<ReservationListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let code = VoucherCode::parse(&path(code)?)?;
    let list = ReservationList::parse(code, query(q)?)?;
    let page = app.reservations().reservations(&list).await?;
    Ok(ok(StatusCode::OK, "LISTED", Json(page)))
}

async fn validate(
    State(app): State<App>,
    code: Result<Path<String>, PathRejection>,
    JsonBody(body): JsonBody<ValidateRequest>,
) -> Result<Response, ApiError> {
    let code = VoucherCode::parse(&path(code)?)?;
    let request = Validate::parse(code, body)?;
    let eligibility = app.reservations().validate(&request).await?;
    Ok(ok(StatusCode::OK, "ELIGIBLE", Json(eligibility)))
}

async fn warmup(
    State(app): State<App>,
    code: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let code = VoucherCode::parse(&path(code)?)?;
    let warmed = app.reservations().warm(&code).await?;
    Ok(ok(StatusCode::OK, "WARMED", Json(warmed)))
}

async fn reserve(
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

fn key(
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<(VoucherCode, OrderId), ApiError> {
    let (code, order_id) = path(p)?;
    Ok((VoucherCode::parse(&code)?, OrderId::parse(&order_id)?))
}

async fn get_reservation(
    State(app): State<App>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (code, order_id) = key(p)?;
    let view = app.reservations().reservation(&code, &order_id).await?;
    Ok(ok(StatusCode::OK, "FOUND", Json(view)))
}

async fn confirm(
    State(app): State<App>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (code, order_id) = key(p)?;
    let confirmation = app.reservations().confirm(&code, &order_id).await?;
    Ok(ok(StatusCode::OK, "CONFIRMED", Json(confirmation)))
}

async fn release(
    State(app): State<App>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (code, order_id) = key(p)?;
    app.reservations().release(&code, &order_id).await?;
    Ok(ok(StatusCode::NO_CONTENT, "RELEASED", ()))
}

/// Readiness: Postgres decides; Redis down only degrades flash vouchers.
async fn health(State(app): State<App>) -> Response {
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

/// The API's OpenAPI document (docs/openapi.json), as built into the binary.
pub const OPENAPI: &str = include_str!("../../../docs/openapi.json");

async fn openapi() -> Response {
    let body = ([(header::CONTENT_TYPE, "application/json")], OPENAPI);
    ok(StatusCode::OK, "OPENAPI", body)
}

/// The metrics this process recorded, for a Prometheus scrape and the console; 404 when the
/// process exports none (`flashgate serve` installs the exporter at start, see
/// `telemetry::prometheus`).
async fn prometheus_metrics() -> Response {
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
const CONSOLE: &str = include_str!("console.html");

async fn console() -> Response {
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
async fn live() -> Response {
    ok(StatusCode::OK, "LIVE", Json(json!({"status": "ok"})))
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        format!("no route for {method} {}", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// Each route's name in metrics, `METHOD /path/{param}`, in the order of [`ROUTES`]: built once,
/// so that recording a request allocates nothing.
static ROUTE_LABELS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ROUTES
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
});

/// The index in [`ROUTES`] of the route a request matched; None for a 404 or 405.
pub(crate) fn route_index(method: &Method, matched: Option<&MatchedPath>) -> Option<usize> {
    let path = matched?.as_str();
    ROUTES
        .iter()
        .position(|r| r.path == path && r.method == method.as_str())
}

/// The metrics name of the route a request matched; `unmatched` for a 404 or 405 (a label per
/// unknown path would let any client grow the series without bound).
fn route_label(method: &Method, matched: Option<&MatchedPath>) -> &'static str {
    route_index(method, matched).map_or("unmatched", |i| ROUTE_LABELS[i].as_str())
}

/// A request's id: the client's `x-request-id` when it sent a usable one (visible ASCII, at
/// most 128 bytes), else a new one. Every log line written while the request is served carries
/// it (in Lambda, under the runtime's span with `requestId` and `xrayTraceId`), and the answer
/// sends it back in `x-request-id`, so a client's complaint leads to the server's lines.
fn request_id(req: &Request) -> HeaderValue {
    req.headers()
        .get(REQUEST_ID)
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.to_str().is_ok())
        .cloned()
        .unwrap_or_else(new_request_id)
}

/// A new request id: this process's random 64 bits, then a count, in 32 hex digits. Unique
/// without asking the OS for randomness on every request (a `getrandom` call per request
/// showed in the sold-out profile).
fn new_request_id() -> HeaderValue {
    static PROCESS: LazyLock<u64> = LazyLock::new(|| uuid::Uuid::new_v4().as_u64_pair().0);
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    HeaderValue::from_str(&format!("{:016x}{n:016x}", *PROCESS))
        .expect("hex digits are a header value")
}

const REQUEST_ID: &str = "x-request-id";

/// One JSON log line per request (route, code, orderId, outcome, status and latency) and its
/// metrics: the outcome count and the latency, by route.
async fn log_request(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let route = route_label(&method, req.extensions().get::<MatchedPath>());
    let id = request_id(&req);
    let span = tracing::info_span!("request", request_id = id.to_str().unwrap_or_default());
    let mut response = next.run(req).instrument(span.clone()).await;
    let _entered = span.enter();
    response.headers_mut().insert(REQUEST_ID, id);
    let mut segments = path.split('/').skip(1);
    let code = match segments.next() {
        Some("vouchers") => segments.next().map(str::to_ascii_uppercase),
        _ => None,
    };
    let order_id = match response.extensions().get::<LoggedOrderId>() {
        Some(LoggedOrderId(id)) => Some(id.clone()),
        None => segments.nth(1).map(str::to_owned),
    };
    let outcome = response.extensions().get::<Outcome>().map_or("", |o| o.0);
    metrics::request(route, outcome, started);
    tracing::info!(
        method = %method,
        path = %path,
        code = code.as_deref(),
        order_id = order_id.as_deref(),
        outcome,
        status = response.status().as_u16(),
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    response
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
