//! The voucher routes: create, list, read, change, warm up.

use serde_json::json;
use utoipa::openapi::path::Operation;

use super::*;

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
