//! One operation per API route, named as its `operationId`: what it does, what it takes and
//! what it answers. The route table names them (`Route::api`); the path parameters and the
//! answers every route of their kind gives (400, 413, 415, 503) are added from the route
//! (`super::implied`). Here the helpers they share; the operations by resource, as the
//! handlers are: `vouchers`, `reservations`, `orders`, `campaigns`, `service`.

mod campaigns;
mod orders;
mod reservations;
mod service;
mod vouchers;

pub use campaigns::*;
pub use orders::*;
pub use reservations::*;
pub use service::*;
pub use vouchers::*;

use serde_json::{json, Value};
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::{OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required, Response};

use super::components::error_response;
use crate::domain::{DEFAULT_PAGE, MAX_PAGE};

pub(super) fn op(
    id: &str,
    tag: &str,
    summary: &str,
    description: Option<&str>,
) -> OperationBuilder {
    OperationBuilder::new()
        .operation_id(Some(id))
        .tag(tag)
        .summary(Some(summary))
        .description(description)
}

pub(super) fn schema(name: &str) -> RefOr<Schema> {
    Ref::from_schema_name(name).into()
}

/// A JSON body of the schema `name`, with named examples (name, summary, value).
pub(super) fn body(
    name: &str,
    examples: &[(&str, Option<&str>, Value)],
) -> Option<utoipa::openapi::request_body::RequestBody> {
    let examples = examples.iter().map(|(key, summary, value)| {
        let mut example = ExampleBuilder::new().value(Some(value.clone()));
        if let Some(summary) = summary {
            example = example.summary(*summary);
        }
        (*key, example.build())
    });
    Some(
        RequestBodyBuilder::new()
            .required(Some(Required::True))
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(schema(name)))
                    .examples_from_iter(examples)
                    .build(),
            )
            .build(),
    )
}

/// A success answer with a JSON body.
pub(super) fn answer(description: &str, body: RefOr<Schema>) -> ResponseBuilder {
    ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new().schema(Some(body)).build(),
    )
}

/// One of the shared answers (`components`).
pub(super) fn shared(name: &str) -> RefOr<Response> {
    Ref::from_response_name(name).into()
}

/// A link from an answer to an operation that takes what it made: (name, operationId, the
/// parameters and where they come from).
pub(super) type Link<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

pub(super) fn links(mut response: ResponseBuilder, to: &[Link<'_>]) -> Response {
    for (name, id, parameters) in to {
        let mut link = LinkBuilder::new().operation_id(*id);
        for (parameter, from) in *parameters {
            link = link.parameter(*parameter, *from);
        }
        response = response.link(*name, link.build());
    }
    response.build()
}

pub(super) fn query(
    name: &str,
    description: &str,
    schema: impl Into<RefOr<Schema>>,
) -> ParameterBuilder {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some(description))
        .schema(Some(schema))
}

/// A listing's page size and cursor.
pub(super) fn paged(op: OperationBuilder) -> OperationBuilder {
    op.parameter(query(
        "limit",
        "Page size.",
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(1))
            .maximum(Some(MAX_PAGE))
            .default(Some(json!(DEFAULT_PAGE))),
    ))
    .parameter(query(
        "after",
        "The opaque cursor from a previous page's `next`; anything else is refused (400).",
        ObjectBuilder::new().schema_type(Type::String),
    ))
}

pub(super) fn dates() -> (Value, Value) {
    (json!("2026-01-01T00:00:00Z"), json!("2030-01-01T00:00:00Z"))
}
