//! Identifiers a request carries: [`VoucherCode`], [`OrderId`] and customer ids.

use super::Invalid;

/// Voucher code: 1-32 of `[A-Za-z0-9_-]`, case-insensitive, kept upper-case.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VoucherCode(String);

impl VoucherCode {
    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        let ok = (1..=32).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(Invalid::new(
                "code",
                "must be 1-32 characters of A-Z, a-z, 0-9, '_' or '-'",
            ));
        }
        Ok(VoucherCode(raw.to_ascii_uppercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Order id: 1-64 of `[A-Za-z0-9_.:-]`, case-sensitive (it is the caller's key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OrderId(String);

impl OrderId {
    pub fn parse(raw: &str) -> Result<Self, Invalid> {
        let ok = (1..=64).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
        if !ok {
            return Err(Invalid::new(
                "orderId",
                "must be 1-64 characters of A-Z, a-z, 0-9, '_', '.', ':' or '-'",
            ));
        }
        Ok(OrderId(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

pub fn customer_id(field: &'static str, value: i64) -> Result<i64, Invalid> {
    if value < 1 {
        return Err(Invalid::new(field, "must be an integer from 1 to 2^63-1"));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_case_insensitive_and_stored_upper_case() {
        assert_eq!(
            VoucherCode::parse("sale-100k_a").unwrap().as_str(),
            "SALE-100K_A"
        );
        for bad in ["", "a b", "é", "x/y", &"A".repeat(33)] {
            assert_eq!(
                VoucherCode::parse(bad).unwrap_err().field,
                "code",
                "{bad:?}"
            );
        }
        assert!(VoucherCode::parse(&"A".repeat(32)).is_ok());
    }

    #[test]
    fn order_ids_allow_dots_and_colons_only_among_punctuation() {
        assert_eq!(
            OrderId::parse("shop:1.2_3-x").unwrap().as_str(),
            "shop:1.2_3-x"
        );
        for bad in ["", "a/b", "a b", "a#", &"o".repeat(65)] {
            assert_eq!(OrderId::parse(bad).unwrap_err().field, "orderId", "{bad:?}");
        }
    }
}
