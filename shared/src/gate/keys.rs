//! The one place Redis keys are built. Every key of a voucher carries the hash tag `{CODE}`,
//! so that a Redis Cluster keeps them in one slot and a script may touch them all. A flash-sale
//! campaign's codes share one set of keys, tagged `{campaign:ID}` (a code has no `:`), so that
//! one script checks a code's limit and its campaign's together, on one slot. An optional
//! prefix (`REDIS_KEY_PREFIX`) lets several environments, or tests, share one Redis.

use std::borrow::Cow;

use crate::domain::{campaign_key, VoucherCode};

/// A set of gate keys: a voucher's own, or a flash-sale campaign's, shared by all its codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit<'a> {
    Voucher(&'a VoucherCode),
    Campaign(i64),
}

/// In logs and the remaining-uses gauge: [`Unit::name`].
impl std::fmt::Display for Unit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl<'a> From<&'a VoucherCode> for Unit<'a> {
    fn from(code: &'a VoucherCode) -> Unit<'a> {
        Unit::Voucher(code)
    }
}

impl<'a> Unit<'a> {
    /// The voucher's code, or the campaign's [`campaign_key`]: the key of the events this gate
    /// grants (`ReservedEvent::key`), and its name in logs.
    pub fn name(self) -> Cow<'a, str> {
        match self {
            Unit::Voucher(code) => Cow::Borrowed(code.as_str()),
            Unit::Campaign(id) => Cow::Owned(campaign_key(id)),
        }
    }

    /// The flash-sale campaign these keys are (None: a voucher's).
    pub fn campaign(self) -> Option<i64> {
        match self {
            Unit::Voucher(_) => None,
            Unit::Campaign(id) => Some(id),
        }
    }

    /// An `orders` field or `pending` member read back as (code, orderId): [`Place::field`]
    /// the other way. None: a campaign's field that is no `CODE|orderId`.
    pub fn split<'f>(self, field: &'f str) -> Option<(&'f str, &'f str)>
    where
        'a: 'f,
    {
        match self {
            Unit::Voucher(code) => Some((code.as_str(), field)),
            Unit::Campaign(_) => field.split_once('|'),
        }
    }
}

impl<'a> From<Place<'a>> for Unit<'a> {
    fn from(place: Place<'a>) -> Unit<'a> {
        place.unit
    }
}

/// Where a flash-sale code is decided: a voucher in its own keys, a campaign's code in its
/// campaign's, where an order is `CODE|orderId` (an order id has no `|`) and the `codes` hash
/// counts each code's uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place<'a> {
    pub unit: Unit<'a>,
    pub code: &'a VoucherCode,
}

impl<'a> From<&'a VoucherCode> for Place<'a> {
    fn from(code: &'a VoucherCode) -> Place<'a> {
        Place {
            unit: Unit::Voucher(code),
            code,
        }
    }
}

impl<'a> Place<'a> {
    /// A code of the flash-sale campaign `id`.
    pub fn in_campaign(id: i64, code: &'a VoucherCode) -> Place<'a> {
        Place {
            unit: Unit::Campaign(id),
            code,
        }
    }

    /// A code decided in its own keys (None) or in its flash-sale campaign's.
    pub fn of(code: &'a VoucherCode, campaign: Option<i64>) -> Place<'a> {
        match campaign {
            Some(id) => Place::in_campaign(id, code),
            None => Place::from(code),
        }
    }

    /// The campaign's code, for the scripts that count its uses (None: a voucher).
    pub fn campaign_code(&self) -> Option<&'a str> {
        match self.unit {
            Unit::Voucher(_) => None,
            Unit::Campaign(_) => Some(self.code.as_str()),
        }
    }

    /// The field of a customer's uses of this code in the campaign's `codes` hash (the code's
    /// own uses are under the code itself); `lua/reserve.lua` names it the same way.
    pub fn code_customer_field(code: &str, customer: i64) -> String {
        format!("{code}|{customer}")
    }

    /// An order's field in the `orders` hash and member of `pending`.
    pub fn field<'o>(&self, order_id: &'o str) -> Cow<'o, str> {
        match self.unit {
            Unit::Voucher(_) => Cow::Borrowed(order_id),
            Unit::Campaign(_) => Cow::Owned(format!("{}|{order_id}", self.code.as_str())),
        }
    }
}

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
    /// Tombstones by the time `release.lua` wrote them (a sorted set: orders field -> ms), so
    /// that `prune.lua` retires them after the retention.
    pub released: String,
    /// A campaign's gate only: code -> uses held, `CODE|customerId` -> that customer's uses of
    /// the code (`lua/reserve.lua`). Fields at zero are deleted: it holds the uses held.
    pub codes: Option<String>,
}

impl Keys {
    pub fn new(prefix: &str, code: &VoucherCode) -> Keys {
        Keys::named(&format!("{prefix}voucher:{{{}}}:", code.as_str()), false)
    }

    /// The keys of a flash-sale campaign's gate, shared by its codes.
    pub fn campaign(prefix: &str, id: i64) -> Keys {
        Keys::named(&format!("{prefix}campaign:{{campaign:{id}}}:"), true)
    }

    /// Every key is `start` and its name; `codes` only for a campaign.
    fn named(start: &str, campaign: bool) -> Keys {
        let key = |name: &str| format!("{start}{name}");
        Keys {
            meta: key("meta"),
            remaining: key("remaining"),
            users: key("users"),
            orders: key("orders"),
            pending: key("pending"),
            loading: key("loading"),
            lost: key("lost"),
            released: key("released"),
            codes: campaign.then(|| key("codes")),
        }
    }

    pub fn of(prefix: &str, unit: Unit<'_>) -> Keys {
        match unit {
            Unit::Voucher(code) => Keys::new(prefix, code),
            Unit::Campaign(id) => Keys::campaign(prefix, id),
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
            &k.released,
        ] {
            assert!(key.starts_with("voucher:{SALE-1}:"), "{key}");
        }
        assert_eq!(k.remaining, "voucher:{SALE-1}:remaining");
        let k = Keys::new("staging:", &VoucherCode::parse("sale-1").unwrap());
        assert_eq!(k.users, "staging:voucher:{SALE-1}:users");
        assert_eq!(k.codes, None);
    }

    #[test]
    fn a_campaigns_codes_share_its_keys_under_one_tag() {
        let (a, b) = (
            VoucherCode::parse("a").unwrap(),
            VoucherCode::parse("b").unwrap(),
        );
        let (ka, kb) = (
            Keys::of("p:", Place::in_campaign(7, &a).into()),
            Keys::of("p:", Place::in_campaign(7, &b).into()),
        );
        assert_eq!(ka.meta, kb.meta);
        assert_eq!(ka.meta, "p:campaign:{campaign:7}:meta");
        assert_eq!(ka.codes.as_deref(), Some("p:campaign:{campaign:7}:codes"));
        for key in [
            &ka.remaining,
            &ka.users,
            &ka.orders,
            &ka.pending,
            &ka.loading,
            &ka.lost,
            &ka.released,
        ] {
            assert!(key.starts_with("p:campaign:{campaign:7}:"), "{key}");
        }
        assert_eq!(Place::in_campaign(7, &a).field("o:1"), "A|o:1");
        assert_eq!(Place::from(&a).field("o:1"), "o:1");
        assert_eq!(Unit::Campaign(7).split("A|o:1"), Some(("A", "o:1")));
        assert_eq!(Unit::Voucher(&b).split("o|1"), Some(("B", "o|1")));
    }
}
