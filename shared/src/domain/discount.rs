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

    /// The discount of an order of `order_amount`: `fg_discount`'s rule, and `lua/rules.lua`'s
    /// (a test checks the three agree). A fixed amount never exceeds the order; a percentage
    /// rounds down and stops at its cap.
    pub fn off(self, order_amount: i64) -> i64 {
        match self {
            Discount::Fixed(a) => a.min(order_amount),
            Discount::Percent { percent, cap } => {
                // Amounts are at most 10^15 and percent at most 100: no overflow, but a value
                // out of range must not wrap either.
                let d = order_amount.saturating_mul(i64::from(percent)) / 100;
                cap.map_or(d, |c| d.min(c))
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixed_discount_stops_at_the_order_and_a_percentage_rounds_down_to_its_cap() {
        assert_eq!(Discount::Fixed(100_000).off(500), 500);
        assert_eq!(Discount::Fixed(100).off(500), 100);
        let pct = |percent, cap| Discount::Percent { percent, cap };
        assert_eq!(pct(15, None).off(999), 149);
        assert_eq!(pct(15, Some(100)).off(999), 100);
        assert_eq!(
            pct(100, None).off(1_000_000_000_000_000),
            1_000_000_000_000_000
        );
        assert_eq!(
            pct(100, None).off(i64::MAX),
            i64::MAX / 100,
            "saturates, never wraps"
        );
    }
}
