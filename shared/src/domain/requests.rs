//! The bodies about one order, `POST /vouchers/{code}/reservations` and `.../validations`, and
//! the checked [`Reserve`] and [`Validate`] they become.

use serde::Deserialize;

use super::{amount, customer_id, Invalid, OrderId, VoucherCode};

/// `POST /vouchers/{code}/reservations` body, as received. Unknown fields are ignored.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReserveRequest {
    #[schema(value_type = super::schema::CustomerId)]
    pub customer_id: i64,
    #[schema(value_type = OrderId)]
    pub order_id: String,
    #[schema(value_type = super::schema::Amount)]
    pub order_amount: i64,
}

/// A reserve request that passed every rule.
#[derive(Debug, Clone)]
pub struct Reserve {
    pub code: VoucherCode,
    pub order_id: OrderId,
    pub customer_id: i64,
    pub order_amount: i64,
}

impl Reserve {
    pub fn parse(code: VoucherCode, r: ReserveRequest) -> Result<Self, Invalid> {
        Ok(Reserve {
            code,
            order_id: OrderId::parse(&r.order_id)?,
            customer_id: customer_id("customerId", r.customer_id)?,
            order_amount: amount("orderAmount", r.order_amount)?,
        })
    }
}

/// `POST /vouchers/{code}/validations` body, as received. Unknown fields are ignored.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidateRequest {
    #[schema(value_type = super::schema::CustomerId)]
    pub customer_id: i64,
    #[schema(value_type = super::schema::Amount)]
    pub order_amount: i64,
}

/// A validation that passed every rule: would this customer's order get the voucher now?
#[derive(Debug, Clone)]
pub struct Validate {
    pub code: VoucherCode,
    pub customer_id: i64,
    pub order_amount: i64,
}

impl Validate {
    pub fn parse(code: VoucherCode, r: ValidateRequest) -> Result<Self, Invalid> {
        Ok(Validate {
            code,
            customer_id: customer_id("customerId", r.customer_id)?,
            order_amount: amount("orderAmount", r.order_amount)?,
        })
    }
}
