//! The API's named values as JSON Schemas, for the OpenAPI document (`http::openapi`), beside
//! the rules that parse them: a code's pattern, an amount's bounds, the timestamp the server
//! prints. The bodies and views name them with `#[schema(value_type = ...)]`.

use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

use super::{OrderId, VoucherCode, MAX_AMOUNT};

fn string(pattern: &str, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .description(Some(description))
        .into()
}

fn integer(min: i64, max: i64, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(min))
        .maximum(Some(max))
        .description(Some(description))
        .into()
}

impl PartialSchema for VoucherCode {
    fn schema() -> RefOr<Schema> {
        string(
            "^[A-Za-z0-9_-]{1,32}$",
            "1-32 of A-Z, a-z, 0-9, '_' or '-'; case-insensitive.",
        )
    }
}
impl ToSchema for VoucherCode {}

impl PartialSchema for OrderId {
    fn schema() -> RefOr<Schema> {
        string(
            "^[A-Za-z0-9_.:-]{1,64}$",
            "The caller's order key: 1-64 of A-Z, a-z, 0-9, '_', '.', ':' or '-'; case-sensitive.",
        )
    }
}
impl ToSchema for OrderId {}

/// A voucher code as stored and answered: upper-case.
pub struct StoredCode;
impl PartialSchema for StoredCode {
    fn schema() -> RefOr<Schema> {
        string("^[A-Z0-9_-]{1,32}$", "Voucher code as stored: upper-case.")
    }
}
impl ToSchema for StoredCode {}

/// The caller's customer id ([`super::customer_id`]).
pub struct CustomerId;
impl PartialSchema for CustomerId {
    fn schema() -> RefOr<Schema> {
        integer(1, i64::MAX, "The caller's customer id, 1 to 2^63-1.")
    }
}
impl ToSchema for CustomerId {}

/// An amount in minor units ([`super::amount`]).
pub struct Amount;
impl PartialSchema for Amount {
    fn schema() -> RefOr<Schema> {
        integer(0, MAX_AMOUNT, "An amount in minor units, 0 to 10^15.")
    }
}
impl ToSchema for Amount {}

/// A timestamp as the server prints it ([`super::time`]). Bodies accept any RFC 3339 offset.
pub struct Timestamp;
impl PartialSchema for Timestamp {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::DateTime,
            )))
            .pattern(Some(
                "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[.][0-9]{3}Z$",
            ))
            .description(Some(
                "RFC 3339 as the server prints it: UTC, milliseconds, `Z` (2026-12-03T20:00:00.000Z).",
            ))
            .into()
    }
}
impl ToSchema for Timestamp {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The patterns say what the parsers accept: a value one takes, the other takes.
    #[test]
    fn the_patterns_agree_with_the_parsers() {
        let json = |s: RefOr<Schema>| serde_json::to_value(s).unwrap();
        assert_eq!(
            json(VoucherCode::schema())["pattern"],
            "^[A-Za-z0-9_-]{1,32}$"
        );
        assert!(VoucherCode::parse(&"A".repeat(32)).is_ok());
        assert!(VoucherCode::parse(&"A".repeat(33)).is_err());
        assert!(OrderId::parse(&"o".repeat(64)).is_ok());
        assert!(OrderId::parse(&"o".repeat(65)).is_err());
        assert!(OrderId::parse("a.b:c_d-1").is_ok());
        assert_eq!(json(Amount::schema())["maximum"], MAX_AMOUNT);
    }
}
