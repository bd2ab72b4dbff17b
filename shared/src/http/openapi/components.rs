//! The document's components: the schemas of the request and response types (derived), the
//! pages and bodies this layer writes itself (pages, the error body, health), and the answers
//! many operations share.

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{
    AllOfBuilder, ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type,
};
use utoipa::openapi::{Components, ComponentsBuilder, ContentBuilder, Ref, RefOr, Response};
use utoipa::ToSchema;

use crate::domain::schema::{Amount, CustomerId, StoredCode, Timestamp};
use crate::domain::{
    Budget, CampaignView, CodeItem, Confirmation, CreateCampaignRequest, CreateVoucherRequest,
    Eligibility, OrderId, OrderRequest, OrderView, PatchCampaignRequest, PatchVoucherRequest,
    Reservation, ReservationItem, ReservationView, ReserveRequest, Status, ValidateRequest,
    VoucherCode, VoucherView,
};
use crate::reservations::Warmed;

type Schemas = Vec<(String, RefOr<Schema>)>;

/// A derived schema and the named schemas it refers to.
fn add<T: ToSchema>(schemas: &mut Schemas) {
    schemas.push((T::name().into_owned(), T::schema()));
    T::schemas(schemas);
}

pub(super) fn components() -> Components {
    let mut schemas = Schemas::new();
    add::<VoucherCode>(&mut schemas);
    add::<OrderId>(&mut schemas);
    add::<CustomerId>(&mut schemas);
    add::<Amount>(&mut schemas);
    add::<Timestamp>(&mut schemas);
    add::<StoredCode>(&mut schemas);
    add::<Status>(&mut schemas);
    add::<CreateVoucherRequest>(&mut schemas);
    add::<PatchVoucherRequest>(&mut schemas);
    add::<VoucherView>(&mut schemas);
    add::<Warmed>(&mut schemas);
    add::<ValidateRequest>(&mut schemas);
    add::<Eligibility>(&mut schemas);
    add::<ReserveRequest>(&mut schemas);
    add::<Reservation>(&mut schemas);
    add::<ReservationView>(&mut schemas);
    add::<ReservationItem>(&mut schemas);
    add::<Confirmation>(&mut schemas);
    add::<OrderRequest>(&mut schemas);
    add::<OrderView>(&mut schemas);
    add::<CreateCampaignRequest>(&mut schemas);
    add::<PatchCampaignRequest>(&mut schemas);
    add::<CampaignView>(&mut schemas);
    add::<CodeItem>(&mut schemas);
    for (name, item, order) in [
        ("VoucherPage", "Voucher", "Vouchers ordered by code."),
        (
            "ReservationPage",
            "ReservationItem",
            "Reservations ordered by orderId.",
        ),
        ("CampaignPage", "Campaign", "Campaigns ordered by id."),
        ("CampaignCodePage", "CampaignCode", "Codes in code order."),
    ] {
        schemas.push((name.into(), page(item, order)));
    }
    schemas.push(("Error".into(), error()));
    schemas.push(("Health".into(), health(&["ok", "degraded"], "up")));
    schemas.push(("HealthUnavailable".into(), health(&["unavailable"], "down")));
    for (name, schema) in &mut schemas {
        if matches!(name.as_str(), "Voucher" | "Campaign") {
            with_budget(schema);
        }
    }
    schemas.sort_by(|a, b| a.0.cmp(&b.0));
    schemas.dedup_by(|a, b| a.0 == b.0);

    ComponentsBuilder::new()
        .schemas_from_iter(schemas)
        .response(
            "InvalidRequest",
            error_response(
                "A path parameter, query parameter or body breaks a rule; the message names the \
                 field. Nothing was written.",
                &["INVALID_REQUEST"],
            ),
        )
        .response(
            "PayloadTooLarge",
            with_header(
                error_response("The body is larger than 16 KiB.", &["INVALID_REQUEST"]),
                "Connection",
                "The rest of the body was never read, so the connection is closed (a proxy in \
                 front may drop this header).",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["close"])),
            ),
        )
        .response(
            "UnsupportedMediaType",
            error_response(
                "The body is not declared as JSON (`Content-Type: application/json`).",
                &["UNSUPPORTED_MEDIA_TYPE"],
            ),
        )
        .response(
            "VoucherNotFound",
            error_response("No voucher has this code.", &["VOUCHER_NOT_FOUND"]),
        )
        .response(
            "ReservationNotFound",
            error_response(
                "No reservation of this voucher has this orderId.",
                &["RESERVATION_NOT_FOUND"],
            ),
        )
        .response(
            "OrderNotFound",
            error_response(
                "No order has this orderId (or it was refused and holds nothing).",
                &["ORDER_NOT_FOUND"],
            ),
        )
        .response(
            "CampaignNotFound",
            error_response("No such campaign.", &["CAMPAIGN_NOT_FOUND"]),
        )
        .response("NotEligible", not_eligible())
        .response(
            "Unavailable",
            with_header(
                error_response(
                    "Postgres, Redis or the event queue is unavailable, or a flash-sale voucher \
                     is being loaded: retry after Retry-After.",
                    &["UNAVAILABLE"],
                ),
                "Retry-After",
                "Seconds to wait before retrying (always 1).",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0)),
            ),
        )
        .build()
}

/// A page of a listing (`domain::Page`).
fn page(item: &str, order: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .property(
            "items",
            ArrayBuilder::new()
                .items(Ref::from_schema_name(item))
                .description(Some(order)),
        )
        .required("items")
        .property(
            "next",
            ObjectBuilder::new()
                .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
                .description(Some(
                    "Cursor of the next page (pass it as `after`); null on the last page.",
                )),
        )
        .required("next")
        .into()
}

/// The error body (`http::error`).
fn error() -> RefOr<Schema> {
    let text = |description: &str| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(description))
    };
    ObjectBuilder::new()
        .description(Some("Every error body (except the 503 of GET /health)."))
        .property("error", text("Machine-readable error code."))
        .required("error")
        .property(
            "message",
            text("Human-readable detail, naming the field at fault on a 400."),
        )
        .required("message")
        .property(
            "reason",
            text("Only on 422 NOT_ELIGIBLE: why the voucher does not apply."),
        )
        .property(
            "code",
            text("Only on an order's answers: the code that refused or failed."),
        )
        .additional_properties(Some(
            utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
        ))
        .into()
}

/// `GET /health`'s body (`http::service::health`).
fn health(status: &[&str], postgres: &str) -> RefOr<Schema> {
    let one_of = |values: &[&str]| {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(values.iter().copied()))
    };
    ObjectBuilder::new()
        .property(
            "status",
            one_of(status).description(Some(
                "degraded: Redis is down, so flash-sale vouchers answer 503; unavailable: \
                 Postgres is down.",
            )),
        )
        .required("status")
        .property("postgres", one_of(&[postgres]))
        .required("postgres")
        .property("redis", one_of(&["up", "down"]))
        .required("redis")
        .into()
}

/// The error body with `error` one of `codes`.
pub(super) fn error_body(codes: &[&str]) -> RefOr<Schema> {
    AllOfBuilder::new()
        .item(Ref::from_schema_name("Error"))
        .item(
            ObjectBuilder::new().property(
                "error",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(codes.iter().copied())),
            ),
        )
        .into()
}

/// An answer with the error body, `error` one of `codes`.
pub(super) fn error_response(description: &str, codes: &[&str]) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(error_body(codes)))
                .build(),
        )
        .build()
}

fn with_header(
    mut response: Response,
    name: &str,
    description: &str,
    schema: ObjectBuilder,
) -> Response {
    response.headers.insert(
        name.to_owned(),
        RefOr::T(
            HeaderBuilder::new()
                .schema(Some(schema))
                .description(Some(description))
                .build(),
        ),
    );
    response
}

fn not_eligible() -> Response {
    let reason = ObjectBuilder::new()
        .property(
            "error",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["NOT_ELIGIBLE"])),
        )
        .property(
            "reason",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([
                    "NOT_STARTED",
                    "EXPIRED",
                    "MIN_ORDER_AMOUNT",
                    "INACTIVE",
                ])),
        )
        .required("reason");
    ResponseBuilder::new()
        .description("The voucher does not apply to this order now; `reason` says why.")
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(
                    AllOfBuilder::new()
                        .item(Ref::from_schema_name("Error"))
                        .item(reason),
                ))
                .build(),
        )
        .build()
}

/// A view's budget is flattened into it (`#[serde(flatten)]`, which the derive leaves out):
/// its three fields, optional, at the view's top level.
fn with_budget(view: &mut RefOr<Schema>) {
    let (RefOr::T(Schema::Object(view)), RefOr::T(Schema::Object(budget))) =
        (view, <Budget as utoipa::PartialSchema>::schema())
    else {
        unreachable!("the views and the budget are objects")
    };
    for (name, property) in budget.properties {
        view.properties.insert(name, property);
    }
}
