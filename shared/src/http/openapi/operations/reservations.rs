//! The reservation routes: validate, reserve, list, read, release, confirm.

use serde_json::json;
use utoipa::openapi::path::Operation;

use super::*;

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
