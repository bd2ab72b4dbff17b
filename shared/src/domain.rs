//! The domain: validated identifiers, amounts, the reservation status lattice and the views the
//! API returns. Nothing here does I/O, so the rules are unit-tested without a database.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

pub const MAX_AMOUNT: i64 = 1_000_000_000_000_000; // 10^15 minor units
pub const MAX_TOTAL_LIMIT: i64 = 1_000_000_000;
pub const MAX_TTL_SECONDS: i64 = 7 * 24 * 3600;
pub const DEFAULT_TTL_SECONDS: i64 = 900;
/// Most counter slots a voucher's limit may be split into (docs/ARCHITECTURE.md, "Counter
/// slots").
pub const MAX_COUNTER_SLOTS: i64 = 64;
/// Most slots chosen automatically: past this, more slots only spread the last uses thinner.
pub const AUTO_COUNTER_SLOTS: i64 = 32;

/// The counter slots chosen for a limit when the create body names none: one for a tiny limit
/// (nothing to spread), then one per 16 uses, up to [`AUTO_COUNTER_SLOTS`].
pub fn counter_slots_for(total_limit: i64) -> i64 {
    (total_limit / 16).clamp(1, AUTO_COUNTER_SLOTS)
}

/// A rule broken by client input. `field` is the JSON field or path segment at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct Invalid {
    pub field: &'static str,
    pub problem: String,
}

impl Invalid {
    pub fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Invalid {
            field,
            problem: problem.into(),
        }
    }
}

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

pub fn amount(field: &'static str, value: i64) -> Result<i64, Invalid> {
    if !(0..=MAX_AMOUNT).contains(&value) {
        return Err(Invalid::new(
            field,
            format!("must be an integer from 0 to {MAX_AMOUNT}"),
        ));
    }
    Ok(value)
}

/// Reservation status. Values are the lattice order stored in Postgres: it only grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Reserved = 1,
    Confirmed = 2,
    Released = 3,
}

impl Status {
    pub fn from_db(value: i16) -> Option<Self> {
        match value {
            1 => Some(Status::Reserved),
            2 => Some(Status::Confirmed),
            3 => Some(Status::Released),
            _ => None,
        }
    }

    pub fn as_db(self) -> i16 {
        self as i16
    }

    /// Holds a use of the voucher.
    pub fn is_active(self) -> bool {
        matches!(self, Status::Reserved | Status::Confirmed)
    }

    /// The lattice merge (docs/ARCHITECTURE.md, "The reservation lattice"): the result of
    /// applying `incoming` on top of `self`. `fg_merge` implements this in SQL; a test checks
    /// the two agree on every transition.
    pub fn merge(self, incoming: Status) -> Status {
        self.max(incoming)
    }
}

/// Change of the active-use counters when a row goes from `old` (None: no row) to `new`: what
/// `fg_merge` adds to the voucher's used count (its slots' sum) and the customer's counter
/// (checked by a test against SQL).
pub fn active_delta(old: Option<Status>, new: Status) -> i32 {
    let active = |s: Option<Status>| s.is_some_and(Status::is_active) as i32;
    active(Some(new)) - active(old)
}

/// What a reserve came to: one vocabulary, spelled the same by the gate's `reserve.lua`, by
/// SQL's `fg_reserve` (and the refusals `fg_merge` raises), and by the HTTP error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReserveOutcome {
    /// A new use was taken.
    Reserved,
    /// The same customer's order already holds a use: a retry, answered like the first.
    Replay,
    /// The orderId holds this voucher for another customer.
    OrderConflict,
    /// The orderId's reservation was released; it cannot reserve again.
    ReservationReleased,
    VoucherNotFound,
    /// The gate does not hold this voucher yet (gate only).
    NotLoaded,
    NotStarted,
    Expired,
    MinOrderAmount,
    AlreadyUsed,
    OutOfStock,
}

impl ReserveOutcome {
    const ALL: [ReserveOutcome; 11] = [
        ReserveOutcome::Reserved,
        ReserveOutcome::Replay,
        ReserveOutcome::OrderConflict,
        ReserveOutcome::ReservationReleased,
        ReserveOutcome::VoucherNotFound,
        ReserveOutcome::NotLoaded,
        ReserveOutcome::NotStarted,
        ReserveOutcome::Expired,
        ReserveOutcome::MinOrderAmount,
        ReserveOutcome::AlreadyUsed,
        ReserveOutcome::OutOfStock,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReserveOutcome::Reserved => "RESERVED",
            ReserveOutcome::Replay => "REPLAY",
            ReserveOutcome::OrderConflict => "ORDER_CONFLICT",
            ReserveOutcome::ReservationReleased => "RESERVATION_RELEASED",
            ReserveOutcome::VoucherNotFound => "VOUCHER_NOT_FOUND",
            ReserveOutcome::NotLoaded => "NOT_LOADED",
            ReserveOutcome::NotStarted => "NOT_STARTED",
            ReserveOutcome::Expired => "EXPIRED",
            ReserveOutcome::MinOrderAmount => "MIN_ORDER_AMOUNT",
            ReserveOutcome::AlreadyUsed => "ALREADY_USED",
            ReserveOutcome::OutOfStock => "OUT_OF_STOCK",
        }
    }

    /// The word as Lua or SQL wrote it; None for a word outside the vocabulary.
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == word)
    }

    /// A use is held for the order (new or replayed).
    pub fn holds(self) -> bool {
        matches!(self, ReserveOutcome::Reserved | ReserveOutcome::Replay)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    Cancelled,
    Expired,
    Revoked,
}

impl ReleaseReason {
    pub fn as_db(self) -> &'static str {
        match self {
            ReleaseReason::Cancelled => "CANCELLED",
            ReleaseReason::Expired => "EXPIRED",
            ReleaseReason::Revoked => "REVOKED",
        }
    }
}

/// Timestamps go out as RFC 3339 at one fixed precision (milliseconds, `Z`), so a stored instant
/// always prints the same: this is what makes replayed answers byte-identical.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Truncates to the millisecond, the precision everything is stored and printed at.
pub fn millis(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).expect("in range")
}

mod rfc3339_ms {
    use chrono::{DateTime, Utc};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::rfc3339(*t))
    }
}

/// `POST /vouchers` body, as received.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateVoucherRequest {
    pub code: String,
    pub discount_amount: i64,
    #[serde(default)]
    pub min_order_amount: i64,
    pub total_limit: i64,
    #[serde(default = "one")]
    pub per_user_limit: i64,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    #[serde(default)]
    pub flash_sale: bool,
    #[serde(default = "default_ttl")]
    pub reservation_ttl_seconds: i64,
    /// Counter slots the limit is split into; chosen from the limit when absent.
    #[serde(default)]
    pub counter_slots: Option<i64>,
}

fn one() -> i64 {
    1
}

fn default_ttl() -> i64 {
    DEFAULT_TTL_SECONDS
}

/// A voucher that passed every rule; only this can be stored.
#[derive(Debug, Clone)]
pub struct NewVoucher {
    pub code: VoucherCode,
    pub discount_amount: i64,
    pub min_order_amount: i64,
    pub total_limit: i32,
    pub per_user_limit: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub flash_sale: bool,
    pub reservation_ttl_seconds: i32,
    pub counter_slots: i16,
}

impl TryFrom<CreateVoucherRequest> for NewVoucher {
    type Error = Invalid;

    fn try_from(r: CreateVoucherRequest) -> Result<Self, Invalid> {
        let in_range = |field, v: i64, lo: i64, hi: i64| {
            if (lo..=hi).contains(&v) {
                Ok(v as i32)
            } else {
                Err(Invalid::new(
                    field,
                    format!("must be an integer from {lo} to {hi}"),
                ))
            }
        };
        if r.ends_at <= r.starts_at {
            return Err(Invalid::new("endsAt", "must be after startsAt"));
        }
        let total_limit = in_range("totalLimit", r.total_limit, 1, MAX_TOTAL_LIMIT)?;
        let counter_slots = match r.counter_slots {
            None => counter_slots_for(r.total_limit),
            // A slot with no use to hold would only be walked past.
            Some(k) => i64::from(in_range(
                "counterSlots",
                k,
                1,
                MAX_COUNTER_SLOTS.min(r.total_limit),
            )?),
        };
        Ok(NewVoucher {
            code: VoucherCode::parse(&r.code)?,
            discount_amount: amount("discountAmount", r.discount_amount)?,
            min_order_amount: amount("minOrderAmount", r.min_order_amount)?,
            total_limit,
            per_user_limit: in_range("perUserLimit", r.per_user_limit, 1, i32::MAX as i64)?,
            starts_at: millis(r.starts_at),
            ends_at: millis(r.ends_at),
            flash_sale: r.flash_sale,
            reservation_ttl_seconds: in_range(
                "reservationTtlSeconds",
                r.reservation_ttl_seconds,
                1,
                MAX_TTL_SECONDS,
            )?,
            counter_slots: counter_slots as i16,
        })
    }
}

/// `GET /vouchers/{code}` and the 201 of `POST /vouchers`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VoucherView {
    pub code: String,
    pub discount_amount: i64,
    pub min_order_amount: i64,
    pub total_limit: i64,
    pub per_user_limit: i64,
    #[serde(with = "rfc3339_ms")]
    pub starts_at: DateTime<Utc>,
    #[serde(with = "rfc3339_ms")]
    pub ends_at: DateTime<Utc>,
    pub flash_sale: bool,
    pub reservation_ttl_seconds: i64,
    /// Counter slots the limit is split into in Postgres.
    pub counter_slots: i64,
    /// RESERVED + CONFIRMED.
    pub used_count: i64,
    pub remaining: i64,
    pub reserved_count: i64,
    pub confirmed_count: i64,
    /// Uses a gate granted that Postgres refused (only after the gate lost data; mode B).
    pub revoked_count: i64,
}

/// A use as it is held: everything a 201 needs, so any layer (gate, event, Postgres) answers a
/// retry alike. Times are milliseconds since the epoch, the precision everything is kept at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub customer_id: i64,
    pub reserved_ms: i64,
    pub expires_ms: i64,
    pub discount: i64,
}

/// The voucher's rules a gate needs to decide without Postgres (its `meta` hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateMeta {
    pub discount: i64,
    pub min_order: i64,
    pub starts_ms: i64,
    pub ends_ms: i64,
    pub per_user: i64,
    pub ttl_ms: i64,
}

/// `POST /vouchers/{code}/reservations` body, as received.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReserveRequest {
    pub customer_id: i64,
    pub order_id: String,
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

/// The 201 of reserve. A retry gets exactly these bytes again, so the body is built only from
/// stored facts: `status` is the answer to "reserve", always RESERVED.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    pub order_id: String,
    pub customer_id: i64,
    pub discount_amount: i64,
    pub status: Status,
    #[serde(with = "rfc3339_ms")]
    pub expires_at: DateTime<Utc>,
}

/// `GET /vouchers/{code}/reservations/{orderId}`: the current state.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationView {
    pub order_id: String,
    pub customer_id: i64,
    pub status: Status,
    pub discount_amount: i64,
    #[serde(with = "rfc3339_ms")]
    pub expires_at: DateTime<Utc>,
}

/// The 200 of confirm.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Confirmation {
    pub order_id: String,
    pub status: Status,
    pub discount_amount: i64,
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

    #[test]
    fn status_only_grows() {
        use Status::*;
        for a in [Reserved, Confirmed, Released] {
            for b in [Reserved, Confirmed, Released] {
                assert_eq!(a.merge(b), b.merge(a), "merge commutes");
                assert_eq!(a.merge(b).merge(b), a.merge(b), "merge is idempotent");
                assert!(a.merge(b) >= a);
            }
        }
        assert_eq!(Released.merge(Reserved), Released, "RELEASED is terminal");
    }

    #[test]
    fn reserve_outcomes_round_trip_their_words() {
        for o in ReserveOutcome::ALL {
            assert_eq!(ReserveOutcome::parse(o.as_str()), Some(o));
        }
        assert_eq!(ReserveOutcome::parse("DUPLICATE"), None);
        assert!(ReserveOutcome::Replay.holds() && !ReserveOutcome::OutOfStock.holds());
    }

    #[test]
    fn counters_move_by_change_in_activeness() {
        use Status::*;
        assert_eq!(active_delta(None, Reserved), 1);
        assert_eq!(active_delta(None, Confirmed), 1);
        assert_eq!(active_delta(None, Released), 0);
        assert_eq!(active_delta(Some(Reserved), Confirmed), 0);
        assert_eq!(active_delta(Some(Reserved), Released), -1);
        assert_eq!(active_delta(Some(Confirmed), Released), -1);
        assert_eq!(active_delta(Some(Released), Released), 0);
    }

    #[test]
    fn counter_slots_grow_with_the_limit_up_to_a_bound() {
        assert_eq!(counter_slots_for(1), 1);
        assert_eq!(counter_slots_for(31), 1);
        assert_eq!(counter_slots_for(160), 10);
        assert_eq!(counter_slots_for(1_000), AUTO_COUNTER_SLOTS);
        assert_eq!(counter_slots_for(MAX_TOTAL_LIMIT), AUTO_COUNTER_SLOTS);
    }

    #[test]
    fn timestamps_print_at_millisecond_precision() {
        let t = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.678901+02:00")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(rfc3339(t), "2026-01-02T01:04:05.678Z");
        assert_eq!(rfc3339(millis(t)), rfc3339(t));
    }

    #[test]
    fn voucher_rules_name_the_field() {
        let base = || CreateVoucherRequest {
            code: "A".into(),
            discount_amount: 1,
            min_order_amount: 0,
            total_limit: 10,
            per_user_limit: 1,
            starts_at: Utc::now(),
            ends_at: Utc::now() + chrono::Duration::hours(1),
            flash_sale: false,
            reservation_ttl_seconds: 900,
            counter_slots: None,
        };
        assert!(NewVoucher::try_from(base()).is_ok());
        let field = |r: CreateVoucherRequest| NewVoucher::try_from(r).unwrap_err().field;
        assert_eq!(
            field(CreateVoucherRequest {
                counter_slots: Some(11),
                ..base()
            }),
            "counterSlots",
            "more slots than uses"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                counter_slots: Some(0),
                ..base()
            }),
            "counterSlots"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                total_limit: 0,
                ..base()
            }),
            "totalLimit"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                total_limit: MAX_TOTAL_LIMIT + 1,
                ..base()
            }),
            "totalLimit"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                discount_amount: -1,
                ..base()
            }),
            "discountAmount"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                per_user_limit: 0,
                ..base()
            }),
            "perUserLimit"
        );
        assert_eq!(
            field(CreateVoucherRequest {
                reservation_ttl_seconds: MAX_TTL_SECONDS + 1,
                ..base()
            }),
            "reservationTtlSeconds"
        );
        let b = base();
        assert_eq!(
            field(CreateVoucherRequest {
                ends_at: b.starts_at,
                ..b
            }),
            "endsAt"
        );
    }
}
