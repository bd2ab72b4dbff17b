//! One operation per API route, named as its `operationId`: what it does, what it takes and
//! what it answers. The route table names them (`Route::api`); the path parameters and the
//! answers every route of their kind gives (400, 413, 415, 503) are added from the route
//! (`super::implied`).

use serde_json::{json, Value};
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::{Operation, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required, Response};

use super::components::error_response;
use crate::domain::{DEFAULT_PAGE, MAX_PAGE};

fn op(id: &str, tag: &str, summary: &str, description: Option<&str>) -> OperationBuilder {
    OperationBuilder::new()
        .operation_id(Some(id))
        .tag(tag)
        .summary(Some(summary))
        .description(description)
}

fn schema(name: &str) -> RefOr<Schema> {
    Ref::from_schema_name(name).into()
}

/// A JSON body of the schema `name`, with named examples (name, summary, value).
fn body(
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
fn answer(description: &str, body: RefOr<Schema>) -> ResponseBuilder {
    ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new().schema(Some(body)).build(),
    )
}

/// One of the shared answers (`components`).
fn shared(name: &str) -> RefOr<Response> {
    Ref::from_response_name(name).into()
}

/// A link from an answer to an operation that takes what it made: (name, operationId, the
/// parameters and where they come from).
type Link<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

fn links(mut response: ResponseBuilder, to: &[Link<'_>]) -> Response {
    for (name, id, parameters) in to {
        let mut link = LinkBuilder::new().operation_id(*id);
        for (parameter, from) in *parameters {
            link = link.parameter(*parameter, *from);
        }
        response = response.link(*name, link.build());
    }
    response.build()
}

fn query(name: &str, description: &str, schema: impl Into<RefOr<Schema>>) -> ParameterBuilder {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some(description))
        .schema(Some(schema))
}

/// A listing's page size and cursor.
fn paged(op: OperationBuilder) -> OperationBuilder {
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

fn dates() -> (Value, Value) {
    (json!("2026-01-01T00:00:00Z"), json!("2030-01-01T00:00:00Z"))
}

pub fn get_health() -> Operation {
    op(
        "getHealth",
        "health",
        "Readiness",
        Some("Postgres decides readiness; Redis down only degrades flash-sale vouchers."),
    )
    .response("200", answer("Postgres answers.", schema("Health")).build())
    .response(
        "503",
        answer(
            "Postgres does not answer (this body, not the error body).",
            schema("HealthUnavailable"),
        )
        .build(),
    )
    .build()
}

pub fn get_liveness() -> Operation {
    let ok = ObjectBuilder::new()
        .property(
            "status",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["ok"])),
        )
        .required("status");
    op(
        "getLiveness",
        "health",
        "Liveness",
        Some("Touches nothing."),
    )
    .response("200", answer("The process answers.", ok.into()).build())
    .build()
}

pub fn get_open_api_document() -> Operation {
    let document = ObjectBuilder::new()
        .required("openapi")
        .required("info")
        .required("paths");
    op("getOpenApiDocument", "meta", "This document", None)
        .response(
            "200",
            answer("The OpenAPI document of the API.", document.into()).build(),
        )
        .build()
}

pub fn create_voucher() -> Operation {
    let (starts, ends) = dates();
    op(
        "createVoucher",
        "vouchers",
        "Create a voucher",
        Some(
            "A flash-sale voucher whose sale starts within WARMUP_LEAD_SECONDS is loaded into \
             Redis at once.",
        ),
    )
    .request_body(body(
        "CreateVoucher",
        &[
            (
                "fixed",
                Some("100k off, 1,000 uses"),
                json!({"code": "SALE100K", "discountAmount": 100000, "totalLimit": 1000,
                       "startsAt": starts, "endsAt": ends}),
            ),
            (
                "percentage",
                Some("10% off up to 50k, flash sale"),
                json!({"code": "FLASH10", "discountPercent": 10, "maxDiscountAmount": 50000,
                       "totalLimit": 500, "flashSale": true, "startsAt": starts, "endsAt": ends}),
            ),
        ],
    ))
    .response(
        "201",
        links(
            answer("Created.", schema("Voucher")),
            &[(
                "GetVoucher",
                "getVoucher",
                &[("code", "$response.body#/code")],
            )],
        ),
    )
    .response(
        "409",
        error_response("A voucher with this code exists.", &["VOUCHER_EXISTS"]),
    )
    .build()
}

pub fn list_vouchers() -> Operation {
    paged(op(
        "listVouchers",
        "vouchers",
        "List vouchers",
        Some("One page of vouchers, ordered by code. Unknown query parameters are refused (400)."),
    ))
    .response("200", answer("A page.", schema("VoucherPage")).build())
    .build()
}

pub fn get_voucher() -> Operation {
    op(
        "getVoucher",
        "vouchers",
        "Get a voucher and its counters",
        None,
    )
    .response("200", answer("The voucher.", schema("Voucher")).build())
    .response("404", shared("VoucherNotFound"))
    .build()
}

pub fn update_voucher() -> Operation {
    op(
        "updateVoucher",
        "vouchers",
        "Change a voucher",
        Some(
            "Changes the given fields. totalLimit cannot go below the uses held (409 \
             LIMIT_BELOW_USED); counterSlots cannot drop a slot that still counts uses (409 \
             SLOTS_IN_USE).",
        ),
    )
    .request_body(body(
        "UpdateVoucher",
        &[
            (
                "limit",
                Some("Raise the limit"),
                json!({"totalLimit": 2000}),
            ),
            (
                "deactivate",
                Some("Stop the voucher"),
                json!({"active": false}),
            ),
            (
                "slots",
                Some("Spread a raised limit over more counter slots"),
                json!({"totalLimit": 100000, "counterSlots": 32}),
            ),
        ],
    ))
    .response(
        "200",
        answer("The voucher after the change.", schema("Voucher")).build(),
    )
    .response("404", shared("VoucherNotFound"))
    .response(
        "409",
        error_response(
            "totalLimit is below the uses held (LIMIT_BELOW_USED), fewer counterSlots would \
             drop a slot that still counts uses (SLOTS_IN_USE), or budgetAmount is below the \
             discounts held (BUDGET_BELOW_USED). Nothing is changed. A campaign's code is \
             changed with its campaign (CAMPAIGN_CODE).",
            &[
                "LIMIT_BELOW_USED",
                "SLOTS_IN_USE",
                "BUDGET_BELOW_USED",
                "CAMPAIGN_CODE",
            ],
        ),
    )
    .build()
}

pub fn warm_up_voucher() -> Operation {
    op(
        "warmUpVoucher",
        "vouchers",
        "Load a flash-sale voucher into Redis",
        Some("Loads the voucher into the flash-sale gate from Postgres, unless it is loaded already."),
    )
    .response("200", answer("Loaded (now or before).", schema("Warmed")).build())
    .response(
        "400",
        error_response(
            "The code breaks its rule, or the voucher is not a flash-sale voucher.",
            &["INVALID_REQUEST"],
        ),
    )
    .response("404", shared("VoucherNotFound"))
    .build()
}

pub fn validate_voucher() -> Operation {
    op(
        "validateVoucher",
        "reservations",
        "Check whether the voucher applies to an order",
        Some("Answers what a reserve would, without taking a use. Writes nothing."),
    )
    .request_body(body(
        "ValidateRequest",
        &[(
            "order",
            None,
            json!({"customerId": 42, "orderAmount": 500000}),
        )],
    ))
    .response(
        "200",
        answer("The voucher applies.", schema("Validation")).build(),
    )
    .response("404", shared("VoucherNotFound"))
    .response(
        "409",
        error_response(
            "No use left (OUT_OF_STOCK), the customer holds perUserLimit uses (ALREADY_USED), \
             or the budget left is smaller than the discount (BUDGET_EXHAUSTED).",
            &["OUT_OF_STOCK", "ALREADY_USED", "BUDGET_EXHAUSTED"],
        ),
    )
    .response("422", shared("NotEligible"))
    .build()
}

/// The links from a reservation to the operations on it.
const ON_THE_ORDER: &[(&str, &str)] = &[
    ("code", "$request.path.code"),
    ("orderId", "$response.body#/orderId"),
];

pub fn reserve_voucher() -> Operation {
    op(
        "reserveVoucher",
        "reservations",
        "Reserve a use for an order",
        Some(
            "Takes one use for (code, orderId). A retry of the same order gets the same 201, \
             byte for byte; a released orderId is spent.",
        ),
    )
    .request_body(body(
        "ReserveRequest",
        &[(
            "order",
            None,
            json!({"customerId": 42, "orderId": "order-1", "orderAmount": 500000}),
        )],
    ))
    .response(
        "201",
        links(
            answer(
                "Reserved (or the retry of a reserve).",
                schema("Reservation"),
            ),
            &[
                ("GetReservation", "getReservation", ON_THE_ORDER),
                ("ConfirmReservation", "confirmReservation", ON_THE_ORDER),
                ("ReleaseReservation", "releaseReservation", ON_THE_ORDER),
            ],
        ),
    )
    .response("404", shared("VoucherNotFound"))
    .response(
        "409",
        error_response(
            "OUT_OF_STOCK: no use left; ALREADY_USED: the customer holds perUserLimit uses; \
             BUDGET_EXHAUSTED: the voucher's budget left is smaller than this reserve's \
             discount; ORDER_CONFLICT: the orderId holds this voucher for another customer; \
             ORDER_AMOUNT_MISMATCH: the orderId holds this voucher for another orderAmount (a \
             retry must send the first request's body); RESERVATION_RELEASED: the orderId's \
             reservation was released, use a new orderId.",
            &[
                "OUT_OF_STOCK",
                "ALREADY_USED",
                "BUDGET_EXHAUSTED",
                "ORDER_CONFLICT",
                "ORDER_AMOUNT_MISMATCH",
                "RESERVATION_RELEASED",
            ],
        ),
    )
    .response("422", shared("NotEligible"))
    .build()
}

pub fn list_reservations() -> Operation {
    paged(
        op(
            "listReservations",
            "reservations",
            "List a voucher's reservations",
            Some(
                "One page of the voucher's reservations, ordered by orderId. Unknown query \
                 parameters are refused (400).",
            ),
        )
        .parameter(query(
            "status",
            "Only reservations in this status.",
            schema("ReservationStatus"),
        ))
        .parameter(query(
            "customerId",
            "Only this customer's reservations.",
            schema("CustomerId"),
        )),
    )
    .response("200", answer("A page.", schema("ReservationPage")).build())
    .response("404", shared("VoucherNotFound"))
    .build()
}

pub fn get_reservation() -> Operation {
    op(
        "getReservation",
        "reservations",
        "Get a reservation's current state",
        Some(
            "A released reservation is still found, with status RELEASED. In mode B, a \
             reservation whose event has not reached the database yet is answered from the \
             gate, as its 201 said; an order nobody reserved is 404 at once, and 503 with \
             Retry-After only after Redis lost data while that order may still be on its way.",
        ),
    )
    .response(
        "200",
        answer("The reservation.", schema("ReservationState")).build(),
    )
    .response("404", shared("ReservationNotFound"))
    .build()
}

pub fn release_reservation() -> Operation {
    op(
        "releaseReservation",
        "reservations",
        "Release a reservation",
        Some(
            "Returns the use (also from a CONFIRMED reservation: a refund). Idempotent. The \
             reservation stays, with status RELEASED; its orderId cannot reserve again.",
        ),
    )
    .response(
        "204",
        ResponseBuilder::new()
            .description("Released (now or before).")
            .build(),
    )
    .response("404", shared("ReservationNotFound"))
    .build()
}

pub fn confirm_reservation() -> Operation {
    op(
        "confirmReservation",
        "reservations",
        "Confirm a reservation after payment",
        Some(
            "Idempotent. A reservation past expiresAt that the sweeper has not released yet \
             can still be confirmed.",
        ),
    )
    .response(
        "200",
        answer("Confirmed (now or before).", schema("Confirmation")).build(),
    )
    .response("404", shared("ReservationNotFound"))
    .response(
        "409",
        error_response("The reservation was released.", &["RESERVATION_RELEASED"]),
    )
    .build()
}

pub fn create_campaign() -> Operation {
    let (starts, ends) = dates();
    op(
        "createCampaign",
        "campaigns",
        "Create a campaign of unique codes",
        Some(
            "Generates or imports the codes, in one transaction: a refused import leaves \
             nothing. Each code is then a voucher: reserve, confirm, release and validate it \
             under /vouchers/{code}; a reserve wins only if the code, the customer and the \
             campaign all have room. The body may be up to 4 MiB.",
        ),
    )
    .request_body(body(
        "CreateCampaign",
        &[
            (
                "generated",
                Some("50,000 single-use codes, 10% off up to 50k, budget 500M"),
                json!({"discountPercent": 10, "maxDiscountAmount": 50000,
                       "budgetAmount": 500000000, "perUserLimit": 1, "startsAt": starts,
                       "endsAt": ends,
                       "codes": {"count": 50000, "length": 10, "prefix": "LOYAL-"}}),
            ),
            (
                "imported",
                Some("Printed codes"),
                json!({"discountAmount": 20000, "startsAt": starts, "endsAt": ends,
                       "codes": ["RECEIPT-0001", "RECEIPT-0002"]}),
            ),
        ],
    ))
    .response(
        "201",
        links(
            answer("Created.", schema("Campaign")),
            &[(
                "GetCampaign",
                "getCampaign",
                &[("id", "$response.body#/id")],
            )],
        ),
    )
    .response(
        "409",
        error_response(
            "An imported code exists already (CODE_EXISTS, naming it), or generated codes kept \
             meeting existing ones (CODES_EXHAUSTED). Nothing is created.",
            &["CODE_EXISTS", "CODES_EXHAUSTED"],
        ),
    )
    .build()
}

pub fn list_campaigns() -> Operation {
    paged(op(
        "listCampaigns",
        "campaigns",
        "List campaigns",
        Some("One page of campaigns, ordered by id. Unknown query parameters are refused (400)."),
    ))
    .response("200", answer("A page.", schema("CampaignPage")).build())
    .build()
}

pub fn get_campaign() -> Operation {
    op("getCampaign", "campaigns", "Read a campaign", None)
        .response("200", answer("The campaign.", schema("Campaign")).build())
        .response("404", shared("CampaignNotFound"))
        .build()
}

pub fn update_campaign() -> Operation {
    op(
        "updateCampaign",
        "campaigns",
        "Change a campaign",
        Some(
            "Pause or resume, move the window, change the total, per-user limit or budget, in \
             one transaction.",
        ),
    )
    .request_body(body("UpdateCampaign", &[]))
    .response(
        "200",
        answer("The campaign after the change.", schema("Campaign")).build(),
    )
    .response("404", shared("CampaignNotFound"))
    .response(
        "409",
        error_response(
            "totalLimit is below the uses held (LIMIT_BELOW_USED) or budgetAmount below the \
             discounts held (BUDGET_BELOW_USED). Nothing is changed.",
            &["LIMIT_BELOW_USED", "BUDGET_BELOW_USED"],
        ),
    )
    .build()
}

pub fn list_campaign_codes() -> Operation {
    let page = ResponseBuilder::new()
        .description("A page, or the CSV.")
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(schema("CampaignCodePage")))
                .build(),
        )
        .content(
            "text/csv",
            ContentBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                .build(),
        );
    paged(
        op(
            "listCampaignCodes",
            "campaigns",
            "List a campaign's codes",
            Some(
                "One page of codes in code order; with `Accept: text/csv`, every code from \
                 `after` on as one CSV download (`code,usedCount`), read as it is sent. Unknown \
                 query parameters are refused (400).",
            ),
        )
        .parameter(query(
            "status",
            "unused: no use held; used: at least one.",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["unused", "used"])),
        )),
    )
    .response("200", page.build())
    .response("404", shared("CampaignNotFound"))
    .build()
}
