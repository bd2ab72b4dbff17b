//! Orders of several codes (`POST /orders/{orderId}/reservations`): the body, the checked
//! [`NewOrder`], the order the codes are decided in ([`stacking`]) and the [`OrderView`] every
//! order route answers.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::time::rfc3339_ms;
use super::{amount, customer_id, Invalid, OrderId, Status, VoucherCode};

/// The most codes one order may hold.
pub const MAX_ORDER_CODES: usize = 5;

/// `POST /orders/{orderId}/reservations` body, as received. Unknown fields are ignored.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderRequest {
    #[schema(value_type = super::schema::CustomerId)]
    pub customer_id: i64,
    /// The order's amount before any discount: every code's `minOrderAmount` is checked against
    /// what is left of it after the discounts decided before that code.
    #[schema(value_type = super::schema::Amount)]
    pub order_amount: i64,
    /// 1 to 5 distinct codes: vouchers or campaigns' codes, standard or flash-sale, mixed.
    #[schema(min_items = 1, max_items = 5, value_type = std::collections::BTreeSet<super::VoucherCode>)]
    pub codes: Vec<String>,
}

/// An order that passed every rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrder {
    pub order_id: OrderId,
    pub customer_id: i64,
    pub order_amount: i64,
    /// In the order given.
    pub codes: Vec<VoucherCode>,
}

impl NewOrder {
    pub fn parse(order_id: OrderId, r: OrderRequest) -> Result<Self, Invalid> {
        if r.codes.is_empty() || r.codes.len() > MAX_ORDER_CODES {
            return Err(Invalid::new(
                "codes",
                format!("must hold 1 to {MAX_ORDER_CODES} codes"),
            ));
        }
        let mut codes = Vec::with_capacity(r.codes.len());
        for raw in &r.codes {
            let code = VoucherCode::parse(raw).map_err(|e| Invalid::new("codes", e.problem))?;
            if codes.contains(&code) {
                return Err(Invalid::new(
                    "codes",
                    format!("{raw} is given twice; each code counts once"),
                ));
            }
            codes.push(code);
        }
        Ok(NewOrder {
            order_id,
            customer_id: customer_id("customerId", r.customer_id)?,
            order_amount: amount("orderAmount", r.order_amount)?,
            codes,
        })
    }
}

/// The order in which an order's codes are decided, as indexes into its codes: fixed discounts
/// first, then percentages, each kind in the order given. Each code's discount is decided on the
/// amount left after the discounts before it, so a percentage never applies to money a fixed
/// discount already took, and the total never exceeds the order's amount.
pub fn stacking(percent: &[bool]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..percent.len()).collect();
    // A stable sort keeps the order given within each kind.
    order.sort_by_key(|&i| percent[i]);
    order
}

/// One code of an order and the discount it gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderItem {
    #[schema(value_type = super::VoucherCode)]
    pub code: String,
    #[schema(value_type = super::schema::Amount)]
    pub discount_amount: i64,
}

/// An order of several codes. The 201 of its reserve (a retry gets the same bytes, so it is built
/// from stored facts only, `status` always RESERVED), and `GET /orders/{orderId}` (the current
/// status).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Order)]
pub struct OrderView {
    #[schema(value_type = super::OrderId)]
    pub order_id: String,
    #[schema(value_type = super::schema::CustomerId)]
    pub customer_id: i64,
    pub status: Status,
    /// The order's total discount: the sum of its items', never above its amount.
    #[schema(value_type = super::schema::Amount)]
    pub discount_amount: i64,
    /// Each code in the order given, with its discount.
    pub items: Vec<OrderItem>,
    /// When the first of the codes' reservations expires: the sweeper releases every code of
    /// the order then unless it is confirmed.
    #[serde(with = "rfc3339_ms")]
    #[schema(value_type = super::schema::Timestamp)]
    pub expires_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(codes: &[&str]) -> OrderRequest {
        OrderRequest {
            customer_id: 7,
            order_amount: 1_000,
            codes: codes.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    fn parse(codes: &[&str]) -> Result<NewOrder, Invalid> {
        NewOrder::parse(OrderId::parse("o-1").unwrap(), request(codes))
    }

    #[test]
    fn an_order_holds_one_to_five_distinct_codes() {
        assert_eq!(parse(&["A", "B"]).unwrap().codes.len(), 2);
        assert_eq!(parse(&[]).unwrap_err().field, "codes");
        assert_eq!(
            parse(&["A", "B", "C", "D", "E", "F"]).unwrap_err().field,
            "codes"
        );
        let twice = parse(&["A", "B", "A"]).unwrap_err();
        assert_eq!(twice.field, "codes");
        assert!(twice.problem.contains("A is given twice"), "{twice}");
        assert_eq!(parse(&["a b"]).unwrap_err().field, "codes");
    }

    #[test]
    fn fixed_discounts_come_first_each_kind_in_the_order_given() {
        assert_eq!(stacking(&[]), Vec::<usize>::new());
        assert_eq!(stacking(&[true, false, true, false]), vec![1, 3, 0, 2]);
        assert_eq!(stacking(&[false, false]), vec![0, 1]);
        assert_eq!(stacking(&[true, true]), vec![0, 1]);
    }
}
