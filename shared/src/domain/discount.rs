//! [`Discount`]: a fixed amount off, or a percentage with an optional cap.

use super::{amount, Invalid};

/// How a voucher discounts an order. The amount a reservation gets is computed where the use is
/// granted (`fg_discount` in SQL, `lua/rules.lua` in the gate), fixed then and stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discount {
    /// This many minor units off.
    Fixed(i64),
    /// `floor(orderAmount * percent / 100)`, at most `cap`.
    Percent { percent: i16, cap: Option<i64> },
}

impl Discount {
    /// The body's discount fields: exactly one of `discountAmount` or `discountPercent`, and
    /// `maxDiscountAmount` only with a percentage.
    pub(super) fn parse(
        amount: Option<i64>,
        percent: Option<i64>,
        cap: Option<i64>,
    ) -> Result<Discount, Invalid> {
        let cap = cap
            .map(|c| self::amount("maxDiscountAmount", c))
            .transpose()?;
        match (amount, percent) {
            (Some(_), Some(_)) => Err(Invalid::new(
                "discountPercent",
                "give either discountAmount or discountPercent, not both",
            )),
            (None, None) => Err(Invalid::new(
                "discountAmount",
                "one of discountAmount or discountPercent is required",
            )),
            (Some(_), None) if cap.is_some() => Err(Invalid::new(
                "maxDiscountAmount",
                "applies only to a discountPercent voucher",
            )),
            (Some(a), None) => Ok(Discount::Fixed(self::amount("discountAmount", a)?)),
            (None, Some(p)) => Ok(Discount::Percent {
                percent: percent_of(p)?,
                cap,
            }),
        }
    }

    /// (discount_amount, discount_percent, max_discount_amount) as stored and shown.
    pub fn columns(self) -> (Option<i64>, Option<i16>, Option<i64>) {
        match self {
            Discount::Fixed(a) => (Some(a), None, None),
            Discount::Percent { percent, cap } => (None, Some(percent), cap),
        }
    }

    /// From the stored columns (the table's CHECK allows only these shapes).
    pub fn from_columns(amount: Option<i64>, percent: Option<i16>, cap: Option<i64>) -> Discount {
        match (amount, percent) {
            (_, Some(percent)) => Discount::Percent { percent, cap },
            (amount, None) => Discount::Fixed(amount.unwrap_or(0)),
        }
    }
}

pub(super) fn percent_of(p: i64) -> Result<i16, Invalid> {
    if !(1..=100).contains(&p) {
        return Err(Invalid::new(
            "discountPercent",
            "must be an integer from 1 to 100",
        ));
    }
    Ok(p as i16)
}
