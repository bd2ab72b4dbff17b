//! The HTTP API (the table in README.md, "API"), as one axum `Router` built from one route
//! table, [`ROUTES`].
//!
//! The local server serves every route; each Lambda function mounts only its family
//! ([`Routes`]) of the same router, so the handlers exist once. `template.yaml` and the
//! `cargo lambda watch` router in Cargo.toml declare the same table, and a test checks that
//! they agree. Input is parsed by [`JsonBody`] and the domain parsers, so a bad request becomes
//! a 4xx naming the field before anything touches a store; handlers call the reservation
//! service and nothing else; every error leaves through `error::ApiError`.
//!
//! # Files
//!
//! Here the route table and the router. `extract`: the body extractor (limit, drain, deadline)
//! and the path and query parsers; `vouchers`, `campaigns`, `reservations`, `orders`,
//! `service`: the handlers by resource; `layer`: the request id, the route label, the log line and metric of
//! every answer; `access`: the access check; `error`: the one mapping to HTTP.

pub mod access;
mod campaigns;
#[cfg(test)]
mod declared_routes;
pub mod error;
mod extract;
mod layer;
pub mod openapi;
mod orders;
mod reservations;
mod service;
mod vouchers;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware::{self};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post, MethodRouter};
use axum::Router;
use utoipa::openapi::path::Operation;

pub use self::access::Access;
use crate::app::App;
pub use error::ApiError;
pub use extract::{BodyDeadline, JsonBody, BODY_LIMIT, DRAIN_LIMIT};
pub(crate) use layer::route_index;
pub use layer::Outcome;

use campaigns::*;
use extract::*;
use layer::*;
use openapi::operations as api;
use orders::*;
use reservations::*;
use service::*;
use vouchers::*;

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
    /// Its operation in the OpenAPI document (`openapi`); None for the local server's own
    /// pages, which are outside the API.
    pub api: Option<fn() -> Operation>,
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
        api: Some(api::get_health),
    },
    Route {
        method: "GET",
        path: LIVE_PATH,
        family: Routes::Live,
        access: Access::Open,
        handler: || get(live),
        api: Some(api::get_liveness),
    },
    Route {
        method: "GET",
        path: "/openapi.json",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(openapi),
        api: Some(api::get_open_api_document),
    },
    Route {
        method: "POST",
        path: "/vouchers",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || post(create_voucher),
        api: Some(api::create_voucher),
    },
    Route {
        method: "GET",
        path: "/vouchers",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(list_vouchers),
        api: Some(api::list_vouchers),
    },
    Route {
        method: "GET",
        path: "/vouchers/{code}",
        family: Routes::Admin,
        access: Access::Both,
        handler: || get(get_voucher),
        api: Some(api::get_voucher),
    },
    Route {
        method: "PATCH",
        path: "/vouchers/{code}",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || patch(patch_voucher),
        api: Some(api::update_voucher),
    },
    Route {
        method: "POST",
        path: "/vouchers/{code}/warmup",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || post(warmup),
        api: Some(api::warm_up_voucher),
    },
    Route {
        method: "POST",
        path: "/campaigns",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || post(create_campaign),
        api: Some(api::create_campaign),
    },
    Route {
        method: "GET",
        path: "/campaigns",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(list_campaigns),
        api: Some(api::list_campaigns),
    },
    Route {
        method: "GET",
        path: "/campaigns/{id}",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(get_campaign),
        api: Some(api::get_campaign),
    },
    Route {
        method: "PATCH",
        path: "/campaigns/{id}",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || patch(patch_campaign),
        api: Some(api::update_campaign),
    },
    Route {
        method: "GET",
        path: "/campaigns/{id}/codes",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(list_codes),
        api: Some(api::list_campaign_codes),
    },
    Route {
        method: "POST",
        path: "/vouchers/{code}/validations",
        family: Routes::Reserve,
        access: Access::OrderService,
        handler: || post(validate),
        api: Some(api::validate_voucher),
    },
    Route {
        method: "POST",
        path: "/vouchers/{code}/reservations",
        family: Routes::Reserve,
        access: Access::OrderService,
        handler: || post(reserve),
        api: Some(api::reserve_voucher),
    },
    Route {
        method: "GET",
        path: "/vouchers/{code}/reservations",
        family: Routes::Admin,
        access: Access::Operators,
        handler: || get(list_reservations),
        api: Some(api::list_reservations),
    },
    Route {
        method: "GET",
        path: "/vouchers/{code}/reservations/{order_id}",
        family: Routes::Admin,
        access: Access::Both,
        handler: || get(get_reservation),
        api: Some(api::get_reservation),
    },
    Route {
        method: "DELETE",
        path: "/vouchers/{code}/reservations/{order_id}",
        family: Routes::Release,
        access: Access::OrderService,
        handler: || delete(release),
        api: Some(api::release_reservation),
    },
    Route {
        method: "POST",
        path: "/vouchers/{code}/reservations/{order_id}/confirm",
        family: Routes::Confirm,
        access: Access::OrderService,
        handler: || post(confirm),
        api: Some(api::confirm_reservation),
    },
    Route {
        method: "POST",
        path: "/orders/{order_id}/reservations",
        family: Routes::Reserve,
        access: Access::OrderService,
        handler: || post(reserve_order),
        api: Some(api::reserve_order),
    },
    Route {
        method: "GET",
        path: "/orders/{order_id}",
        family: Routes::Admin,
        access: Access::Both,
        handler: || get(get_order),
        api: Some(api::get_order),
    },
    Route {
        method: "DELETE",
        path: "/orders/{order_id}",
        family: Routes::Release,
        access: Access::OrderService,
        handler: || delete(release_order),
        api: Some(api::release_order),
    },
    Route {
        method: "POST",
        path: "/orders/{order_id}/confirm",
        family: Routes::Confirm,
        access: Access::OrderService,
        handler: || post(confirm_order),
        api: Some(api::confirm_order),
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
        api: None,
    },
    Route {
        method: "GET",
        path: "/console",
        family: Routes::All,
        access: Access::Open,
        handler: || get(console),
        api: None,
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

fn ok(status: StatusCode, outcome: &'static str, body: impl IntoResponse) -> Response {
    let mut response = (status, body).into_response();
    response.extensions_mut().insert(Outcome(outcome));
    response
}
