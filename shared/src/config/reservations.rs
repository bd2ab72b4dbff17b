//! `reservations`: the reservation service's own settings (sold-out cache, unknown codes,
//! warm-up, group commit).

use std::time::Duration;

/// The reservation service's tunables.
#[derive(Debug, Clone, Copy)]
pub struct ReservationSettings {
    /// `SOLD_OUT_CACHE_MS`: how long the process answers OUT_OF_STOCK for a flash voucher
    /// without asking the gate.
    pub sold_out_ttl: Duration,
    /// `WARMUP_LEAD_SECONDS`: a flash voucher whose sale starts within this lead is loaded
    /// into Redis at creation (and by the sweep).
    pub warmup_lead: Duration,
    /// `GROUP_COMMIT_MAX`: standard reserves and mode A's flash winners written together, most
    /// in one batch (1: each on its own).
    pub group_commit_max: usize,
    /// `GROUP_COMMIT_WRITERS`: group-commit batches in flight at once.
    pub group_commit_writers: usize,
    /// `UNKNOWN_CODE_CACHE_MS`: how long a process answers 404 from memory for a code Postgres
    /// said does not exist (0: never). A code created in another process is answered 404 here
    /// for at most this long after its creation.
    pub unknown_code_ttl: Duration,
}
