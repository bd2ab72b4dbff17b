//! `sweep`: the scheduled sweep.

use std::time::Duration;

/// The scheduled sweep.
#[derive(Debug, Clone, Copy)]
pub struct SweepSettings {
    /// `SWEEP_INTERVAL_SECONDS`: period of the local server's background sweep; zero turns it
    /// off.
    pub interval: Duration,
    /// `ORPHAN_GRACE_SECONDS`: an order pending in the gate this long past its TTL, with no
    /// Postgres row, is an orphan. 0 by default: a reservation past its TTL has expired whether
    /// its row or event ever came, so its use comes back at the first sweep after the TTL (a
    /// late event merges into the RELEASED row).
    pub orphan_grace: Duration,
    /// `GATE_RETIRE_AFTER_SECONDS`: this long after a flash sale's end, with nothing of it in
    /// flight, the sweeper removes every gate key of the voucher; Postgres answers for it from
    /// then on.
    pub retire_after: Duration,
    /// `GATE_TOMBSTONE_RETENTION_SECONDS`: a released order's tombstone stays in the gate this
    /// long (a retry of it is answered there), then the sweeper deletes it; afterwards Postgres'
    /// row answers such a retry in mode A. At least an hour.
    pub tombstone_retention: Duration,
    /// `ORDER_LEASE_SECONDS`: an order of several codes still being decided this long after it
    /// began was left by a process that died between two codes (or a client that stopped
    /// retrying a 503): the sweeper releases it and every use it holds. Longer than any request
    /// may take (a function's timeout); 60 by default.
    pub order_lease: Duration,
}
