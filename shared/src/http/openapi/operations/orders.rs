//! The routes of orders of several codes: reserve, read, confirm, release.

use serde_json::json;
use utoipa::openapi::path::Operation;
use utoipa::openapi::response::ResponseBuilder;

use super::*;

const ON_THE_ORDER: &[(&str, &str)] = &[("orderId", "$response.body#/orderId")];

pub fn reserve_order() -> Operation {
    op(
        "reserveOrder",
        "orders",
        "Reserve several codes for one order, all or none",
        Some(
            "Holds one use of each code (1 to 5 distinct codes: vouchers or campaigns' codes, \
             standard or flash-sale) for the orderId, or none. Fixed discounts apply first, then \
             percentages, each kind in the order given, each code's discount (and its \
             minOrderAmount) on the amount the discounts before it left; the total never \
             exceeds orderAmount. A refusal names the refusing code in `code`, and nothing of \
             the order is held when it is sent. An exclusive code is never combined (409 \
             NOT_COMBINABLE). A retry of the same body gets the same answer, byte for byte; \
             another body under the same orderId is 409 ORDER_CONFLICT. Each code's use is \
             also its own reservation (`GET /vouchers/{code}/reservations/{orderId}`).",
        ),
    )
    .request_body(body(
        "OrderRequest",
        &[(
            "order",
            None,
            json!({"customerId": 42, "orderAmount": 500000, "codes": ["SALE100K", "WELCOME10"]}),
        )],
    ))
    .response(
        "201",
        links(
            answer(
                "Every code is held (or the retry of such an order).",
                schema("Order"),
            ),
            &[
                ("GetOrder", "getOrder", ON_THE_ORDER),
                ("ConfirmOrder", "confirmOrder", ON_THE_ORDER),
                ("ReleaseOrder", "releaseOrder", ON_THE_ORDER),
            ],
        ),
    )
    .response(
        "404",
        error_response(
            "A code does not exist (named in `code`).",
            &["VOUCHER_NOT_FOUND"],
        ),
    )
    .response(
        "409",
        error_response(
            "A code refused (named in `code`: OUT_OF_STOCK, ALREADY_USED, BUDGET_EXHAUSTED, \
             ORDER_AMOUNT_MISMATCH or RESERVATION_RELEASED as for a single reserve); \
             NOT_COMBINABLE: an exclusive code with others; ORDER_CONFLICT: the orderId holds \
             another order, or one of the codes for another customer; RESERVATION_RELEASED: the \
             order was released.",
            &[
                "OUT_OF_STOCK",
                "ALREADY_USED",
                "BUDGET_EXHAUSTED",
                "ORDER_CONFLICT",
                "ORDER_AMOUNT_MISMATCH",
                "RESERVATION_RELEASED",
                "NOT_COMBINABLE",
            ],
        ),
    )
    .response("422", shared("NotEligible"))
    .build()
}

pub fn get_order() -> Operation {
    op(
        "getOrder",
        "orders",
        "Get an order's current state",
        Some(
            "A released order is still found, with status RELEASED. A refused order holds \
             nothing and is 404; one still being decided is 503 with Retry-After.",
        ),
    )
    .response("200", answer("The order.", schema("Order")).build())
    .response("404", shared("OrderNotFound"))
    .build()
}

pub fn confirm_order() -> Operation {
    op(
        "confirmOrder",
        "orders",
        "Confirm every code of an order after payment",
        Some(
            "Idempotent. A confirm that fails midway (503) is finished by its retry. If one \
             code's reservation was released meanwhile, every code is released (409).",
        ),
    )
    .response(
        "200",
        answer("Every code confirmed (now or before).", schema("Order")).build(),
    )
    .response("404", shared("OrderNotFound"))
    .response(
        "409",
        error_response(
            "The order was released or refused, or a code's reservation was released.",
            &["RESERVATION_RELEASED"],
        ),
    )
    .build()
}

pub fn release_order() -> Operation {
    op(
        "releaseOrder",
        "orders",
        "Release every code of an order",
        Some(
            "Returns every use (also from a CONFIRMED order: a refund). Idempotent. The order \
             stays, with status RELEASED; its orderId cannot reserve again.",
        ),
    )
    .response(
        "204",
        ResponseBuilder::new()
            .description("Released (now or before), or refused: nothing is held.")
            .build(),
    )
    .response("404", shared("OrderNotFound"))
    .build()
}
