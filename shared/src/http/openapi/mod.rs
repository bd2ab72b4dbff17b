//! The OpenAPI document, generated: the paths from the route table ([`ROUTES`]: each API
//! route's method and path, and its operation in `operations`), the schemas from the request
//! and response types (their `utoipa::ToSchema` derives, in `domain`), the shared answers in
//! `components`. `GET /openapi.json` serves it, `flashgate openapi` prints it, and
//! docs/openapi.json is that print, checked by a test: the route table is declared once.
//!
//! Every operation gets what its route implies: its path parameters (and 400), for a body 413
//! and 415, and 503 where it reads a store.

mod components;
pub(super) mod operations;

use std::sync::LazyLock;

use utoipa::openapi::path::{HttpMethod, Operation, Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{
    InfoBuilder, LicenseBuilder, OpenApi, OpenApiBuilder, PathItem, PathsBuilder, Ref, RefOr,
    Required, ServerBuilder, Tag,
};

use super::{Route, ROUTES};

const DESCRIPTION: &str = "The HTTP API of Flashgate: an order service reserves a voucher's \
use at checkout, confirms it after payment and releases it on cancel.\n\nJSON in and out, \
camelCase. Amounts are integers in minor units (0 to 10^15); timestamps are RFC 3339 (accepted \
with any offset, printed in UTC with milliseconds and `Z`). Every error body is `{\"error\": \
CODE, \"message\": ...}` (plus `reason` on 422 NOT_ELIGIBLE), and nothing is written on any \
4xx. Besides the responses listed per operation: an unknown path answers 404 `NOT_FOUND`, a \
known path with another method 405 `METHOD_NOT_ALLOWED`, both with the error body. Request \
bodies larger than 16 KiB answer 413, and bodies not sent as `Content-Type: application/json` \
answer 415 `UNSUPPORTED_MEDIA_TYPE` (where the operation takes a body). Every 503 with the \
error body (`UNAVAILABLE`) carries `Retry-After`. Deployed, API Gateway authorizes callers with \
IAM; the local server (`flashgate serve`) given tokens wants `Authorization: Bearer <token>` on \
every operation but `GET /health/live`, and answers 401 `UNAUTHORIZED` (with \
`WWW-Authenticate: Bearer`) or 403 `FORBIDDEN` (the other role's token).";

/// The document's tags, in the order a reader meets them.
const TAGS: &[(&str, &str)] = &[
    (
        "vouchers",
        "Creating and inspecting vouchers (admin function).",
    ),
    (
        "reservations",
        "What an order service calls: validate, reserve, confirm, release (and the admin's reads).",
    ),
    (
        "campaigns",
        "Campaigns of unique codes: one set of rules, limits and budget over many codes.",
    ),
    ("health", "Probes."),
    ("meta", "This document."),
];

/// The document, built from the route table and the types.
pub fn document() -> OpenApi {
    let mut paths = PathsBuilder::new();
    for route in ROUTES {
        let Some(api) = route.api else { continue };
        let method = match route.method {
            "GET" => HttpMethod::Get,
            "POST" => HttpMethod::Post,
            "PATCH" => HttpMethod::Patch,
            "DELETE" => HttpMethod::Delete,
            other => unreachable!("no route uses {other}"),
        };
        paths = paths.path(
            documented_path(route.path),
            PathItem::new(method, implied(route, api())),
        );
    }
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Flashgate")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(DESCRIPTION))
                .license(Some(
                    LicenseBuilder::new()
                        .name("MIT")
                        .identifier(Some("MIT"))
                        .build(),
                )),
        )
        .servers(Some([ServerBuilder::new()
            .url("http://127.0.0.1:3000")
            .description(Some("`flashgate serve` on its default port"))
            .build()]))
        .tags(Some(TAGS.iter().map(|(name, description)| {
            let mut tag = Tag::new(*name);
            tag.description = Some((*description).to_owned());
            tag
        })))
        .paths(paths)
        .components(Some(components::components()))
        .build()
}

/// The document as served and committed: pretty JSON and a closing newline, built once.
pub fn json() -> &'static str {
    static JSON: LazyLock<String> = LazyLock::new(|| {
        let mut text = document().to_pretty_json().expect("the document is JSON");
        text.push('\n');
        text
    });
    &JSON
}

/// axum's `{order_id}` is the API's `{orderId}`.
fn documented_path(path: &str) -> String {
    path.replace("{order_id}", "{orderId}")
}

/// The operation with what its route implies: the path's parameters, and the answers every
/// route with parameters, a body or a store gives.
fn implied(route: &Route, mut op: Operation) -> Operation {
    let mut parameters: Vec<RefOr<Parameter>> = Vec::new();
    for name in route.path.split('/').filter_map(|s| s.strip_prefix('{')) {
        let (name, schema, description, example) = match name.trim_end_matches('}') {
            "code" => (
                "code",
                Ref::from_schema_name("VoucherCode").into(),
                "Voucher code, case-insensitive.",
                serde_json::json!("SALE100K"),
            ),
            "order_id" if route.path.starts_with("/orders") => (
                "orderId",
                Ref::from_schema_name("OrderId").into(),
                "The order's id, as given to its reserve.",
                serde_json::json!("order-1"),
            ),
            "order_id" => (
                "orderId",
                Ref::from_schema_name("OrderId").into(),
                "The order's id, as given to the reserve.",
                serde_json::json!("order-1"),
            ),
            "id" => (
                "id",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .into(),
                "The campaign's id.",
                serde_json::json!(1),
            ),
            other => unreachable!("no route has the parameter {other}"),
        };
        parameters.push(
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .description(Some(description))
                .schema::<RefOr<utoipa::openapi::schema::Schema>>(Some(schema))
                .example(Some(example))
                .build()
                .into(),
        );
    }
    let query = op.parameters.take().unwrap_or_default();
    let has_body = op.request_body.is_some();
    let takes_input = !parameters.is_empty() || !query.is_empty() || has_body;
    parameters.extend(query);
    if !parameters.is_empty() {
        op.parameters = Some(parameters);
    }
    let responses = &mut op.responses.responses;
    let mut add = |status: &str, name: &str| {
        responses
            .entry(status.to_owned())
            .or_insert_with(|| Ref::from_response_name(name).into());
    };
    if takes_input {
        add("400", "InvalidRequest");
    }
    if has_body {
        add("413", "PayloadTooLarge");
        add("415", "UnsupportedMediaType");
    }
    if !matches!(route.path, "/health" | "/health/live" | "/openapi.json") {
        add("503", "Unavailable");
    }
    op
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/openapi.json is what the code generates: a route, a type or a text changed without
    /// the file fails here. To write it again: `cargo run -- openapi > docs/openapi.json`.
    #[test]
    fn the_committed_document_is_the_generated_one() {
        let committed = include_str!("../../../../docs/openapi.json");
        if committed != json() {
            let first = committed
                .lines()
                .zip(json().lines())
                .position(|(a, b)| a != b)
                .map_or(0, |i| i + 1);
            panic!(
                "docs/openapi.json differs from the generated document (first at line {first}): \
                 run `cargo run -- openapi > docs/openapi.json`"
            );
        }
    }

    /// Every API route has an operation, with a unique id; the local pages have none.
    #[test]
    fn every_api_route_has_one_operation() {
        let mut ids = std::collections::BTreeSet::new();
        for route in ROUTES {
            match route.api {
                Some(api) => {
                    assert!(!route.is_local(), "{} is local", route.path);
                    let id = api().operation_id.expect("an operation id");
                    assert!(ids.insert(id.clone()), "{id} twice");
                }
                None => assert!(
                    route.is_local(),
                    "{} {} undocumented",
                    route.method,
                    route.path
                ),
            }
        }
    }
}
