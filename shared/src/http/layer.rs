//! What every request passes through: its request id, its route's label, and one log line and
//! one metric when it is answered (the handlers leave their outcome and order id in the
//! response's extensions for it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;

use crate::telemetry::metrics;

use super::*;

/// What a request came to, for the one log line per request: set on every response.
#[derive(Debug, Clone, Copy)]
pub struct Outcome(pub &'static str);

/// The orderId of a reserve (it is in the body, not the path), for the log line.
#[derive(Debug, Clone)]
pub(super) struct LoggedOrderId(pub(super) String);

/// Each route's name in metrics, `METHOD /path/{param}`, in the order of [`ROUTES`]: built once,
/// so that recording a request allocates nothing.
pub(super) static ROUTE_LABELS: LazyLock<Vec<String>> = LazyLock::new(|| {
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
pub(super) fn route_label(method: &Method, matched: Option<&MatchedPath>) -> &'static str {
    route_index(method, matched).map_or("unmatched", |i| ROUTE_LABELS[i].as_str())
}

/// A request's id: the client's `x-request-id` when it sent a usable one (visible ASCII, at
/// most 128 bytes), else a new one. Every log line written while the request is served carries
/// it (in Lambda, under the runtime's span with `requestId` and `xrayTraceId`), and the answer
/// sends it back in `x-request-id`, so a client's complaint leads to the server's lines.
pub(super) fn request_id(req: &Request) -> HeaderValue {
    req.headers()
        .get(REQUEST_ID)
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.to_str().is_ok())
        .cloned()
        .unwrap_or_else(new_request_id)
}

/// A new request id: this process's random 64 bits, then a count, in 32 hex digits. Unique
/// without asking the OS for randomness on every request (a `getrandom` call per request
/// showed in the sold-out profile).
pub(super) fn new_request_id() -> HeaderValue {
    static PROCESS: LazyLock<u64> = LazyLock::new(|| uuid::Uuid::new_v4().as_u64_pair().0);
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    HeaderValue::from_str(&format!("{:016x}{n:016x}", *PROCESS))
        .expect("hex digits are a header value")
}

pub(super) const REQUEST_ID: &str = "x-request-id";

/// One JSON log line per request (route, code, orderId, outcome, status and latency) and its
/// metrics: the outcome count and the latency, by route.
pub(super) async fn log_request(req: Request, next: Next) -> Response {
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
