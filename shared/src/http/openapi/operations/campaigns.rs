//! The campaign routes: create, list, read, change, list the codes.

use serde_json::json;
use utoipa::openapi::path::Operation;

use super::*;

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
