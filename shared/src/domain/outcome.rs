//! What a reserve came to ([`ReserveOutcome`]) and the use it holds ([`Held`]).

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
    /// The orderId holds this voucher for the same customer and another order amount: a retry
    /// must be the same request.
    OrderAmountMismatch,
    /// The orderId's reservation was released; it cannot reserve again.
    ReservationReleased,
    VoucherNotFound,
    /// The gate does not hold this voucher yet (gate only).
    NotLoaded,
    /// The gate would grant, but it is not the copy of Redis' data it was loaded into (a
    /// failover since): nothing taken until it is repaired (gate only).
    Suspect,
    /// The voucher is paused.
    Inactive,
    NotStarted,
    Expired,
    MinOrderAmount,
    AlreadyUsed,
    OutOfStock,
    /// The voucher's budget left is smaller than this reserve's discount.
    BudgetExhausted,
    /// A validation found that a reserve now would be granted (nothing was taken).
    Eligible,
}

impl ReserveOutcome {
    const ALL: [ReserveOutcome; 16] = [
        ReserveOutcome::Reserved,
        ReserveOutcome::Replay,
        ReserveOutcome::OrderConflict,
        ReserveOutcome::OrderAmountMismatch,
        ReserveOutcome::ReservationReleased,
        ReserveOutcome::VoucherNotFound,
        ReserveOutcome::NotLoaded,
        ReserveOutcome::Suspect,
        ReserveOutcome::Inactive,
        ReserveOutcome::NotStarted,
        ReserveOutcome::Expired,
        ReserveOutcome::MinOrderAmount,
        ReserveOutcome::AlreadyUsed,
        ReserveOutcome::OutOfStock,
        ReserveOutcome::BudgetExhausted,
        ReserveOutcome::Eligible,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReserveOutcome::Reserved => "RESERVED",
            ReserveOutcome::Replay => "REPLAY",
            ReserveOutcome::OrderConflict => "ORDER_CONFLICT",
            ReserveOutcome::OrderAmountMismatch => "ORDER_AMOUNT_MISMATCH",
            ReserveOutcome::ReservationReleased => "RESERVATION_RELEASED",
            ReserveOutcome::VoucherNotFound => "VOUCHER_NOT_FOUND",
            ReserveOutcome::NotLoaded => "NOT_LOADED",
            ReserveOutcome::Suspect => "SUSPECT",
            ReserveOutcome::Inactive => "INACTIVE",
            ReserveOutcome::NotStarted => "NOT_STARTED",
            ReserveOutcome::Expired => "EXPIRED",
            ReserveOutcome::MinOrderAmount => "MIN_ORDER_AMOUNT",
            ReserveOutcome::AlreadyUsed => "ALREADY_USED",
            ReserveOutcome::OutOfStock => "OUT_OF_STOCK",
            ReserveOutcome::BudgetExhausted => "BUDGET_EXHAUSTED",
            ReserveOutcome::Eligible => "ELIGIBLE",
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

    /// A refusal the voucher's rules decide alone (422 NOT_ELIGIBLE), whatever the uses held:
    /// paused, outside its window, an order below the minimum.
    pub fn is_refused_by_rules(self) -> bool {
        matches!(
            self,
            ReserveOutcome::Inactive
                | ReserveOutcome::NotStarted
                | ReserveOutcome::Expired
                | ReserveOutcome::MinOrderAmount
        )
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_outcomes_round_trip_their_words() {
        for o in ReserveOutcome::ALL {
            assert_eq!(ReserveOutcome::parse(o.as_str()), Some(o));
        }
        assert_eq!(ReserveOutcome::parse("DUPLICATE"), None);
        assert!(ReserveOutcome::Replay.holds() && !ReserveOutcome::OutOfStock.holds());
    }

    #[test]
    fn only_the_rules_refusals_need_no_counts() {
        let by_rules: Vec<_> = ReserveOutcome::ALL
            .into_iter()
            .filter(|o| o.is_refused_by_rules())
            .map(ReserveOutcome::as_str)
            .collect();
        assert_eq!(
            by_rules,
            ["INACTIVE", "NOT_STARTED", "EXPIRED", "MIN_ORDER_AMOUNT"]
        );
    }
}
