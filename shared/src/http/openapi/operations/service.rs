//! The service's own routes: health, liveness, this document.

use utoipa::openapi::path::Operation;

use super::*;

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
