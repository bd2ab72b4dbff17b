//! The reservation status lattice (`RESERVED < CONFIRMED < RELEASED`), the change it makes to
//! the active-use counters, and why a use was released.

use serde::Serialize;

/// Reservation status. Values are the lattice order stored in Postgres: it only grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[schema(
    as = ReservationStatus,
    description = "Only moves forward: RESERVED -> CONFIRMED -> RELEASED."
)]
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
