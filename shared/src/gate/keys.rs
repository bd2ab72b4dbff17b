//! The one place Redis keys are built. Every key of a voucher carries the hash tag `{CODE}`,
//! so that a Redis Cluster keeps them in one slot and a script may touch them all. An optional
//! prefix (`REDIS_KEY_PREFIX`) lets several environments, or tests, share one Redis.

use crate::domain::VoucherCode;

#[derive(Debug, Clone)]
pub struct Keys {
    pub meta: String,
    pub remaining: String,
    pub users: String,
    pub orders: String,
    pub pending: String,
    /// `SET NX` lock held by the one caller that loads the voucher.
    pub loading: String,
    /// When a warm-up first found the voucher gone from a gate that had held it (`lost.lua`).
    pub lost: String,
}

impl Keys {
    pub fn new(prefix: &str, code: &VoucherCode) -> Keys {
        let key = |suffix: &str| format!("{prefix}voucher:{{{}}}:{suffix}", code.as_str());
        Keys {
            meta: key("meta"),
            remaining: key("remaining"),
            users: key("users"),
            orders: key("orders"),
            pending: key("pending"),
            loading: key("loading"),
            lost: key("lost"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_hash_tagged_with_the_upper_case_code() {
        let k = Keys::new("", &VoucherCode::parse("sale-1").unwrap());
        for key in [
            &k.meta,
            &k.remaining,
            &k.users,
            &k.orders,
            &k.pending,
            &k.loading,
            &k.lost,
        ] {
            assert!(key.starts_with("voucher:{SALE-1}:"), "{key}");
        }
        assert_eq!(k.remaining, "voucher:{SALE-1}:remaining");
        let k = Keys::new("staging:", &VoucherCode::parse("sale-1").unwrap());
        assert_eq!(k.users, "staging:voucher:{SALE-1}:users");
    }
}
