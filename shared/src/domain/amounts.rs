//! Money amounts: integers of minor units, from 0 to [`MAX_AMOUNT`].

use super::Invalid;

pub const MAX_AMOUNT: i64 = 1_000_000_000_000_000; // 10^15 minor units

pub fn amount(field: &'static str, value: i64) -> Result<i64, Invalid> {
    if !(0..=MAX_AMOUNT).contains(&value) {
        return Err(Invalid::new(
            field,
            format!("must be an integer from 0 to {MAX_AMOUNT}"),
        ));
    }
    Ok(value)
}
