//! A model of Flashgate's flash-sale reservation protocol, checked exhaustively with
//! [stateright](https://www.stateright.rs): every interleaving of the steps below, with every
//! fault, up to the bounds of a [`Protocol`].
//!
//! Each step is one atomic action of the real system, in the order the code takes them: a Lua
//! script of the gate (`lua/*.lua`), one Postgres statement (`fg_merge` and friends), an SQS
//! send or delivery, one step of the sweeper, the loader or a change. Between any two steps a
//! process may crash (its requests vanish; the client sees a timeout and may retry), Redis may
//! lose its data or fail over to a replica that missed the last grant, a loader's gate lock
//! may expire under it, and an event may be duplicated or lost. What the model keeps of each
//! layer:
//!
//! - **gate**: loaded or not, `remaining`, the money budget left (meta's `budget`), each
//!   customer's count, a campaign's `codes` hash (each code's uses held), each order's entry
//!   (active with the reservation's identity, or a tombstone), the `pending` set, whether
//!   Redis changed hands since the load (`lua/incarnation.lua`: `replid` is not the node's),
//!   and the gate lock (`loading`) with its holder's token;
//! - **postgres**: the limit in force (`total_limit`, which a change may lower), each order's
//!   row (RESERVED / CONFIRMED / RELEASED with its reason), the uses held (the sum of the
//!   slots: slots only spread the same count over rows), the discounts held
//!   (`voucher_budget.used`, a money counter beside the use count), and whether the gate ever
//!   loaded the voucher (`voucher.gate_loaded`);
//! - **queue** (mode B): the events sent and not yet consumed, delivered in any order;
//! - **processes**: the requests under way ([`Req`]), in no order: a client's, a sweeper's, a
//!   loader's or a change's. One crash takes them all. With two instances a client's retry
//!   runs beside its first request, and two sweepers may recover one orphan at once;
//! - **clients**: each client (an orderId and a customer, two clients may share an orderId)
//!   and what it was told.
//!
//! A campaign ([`Protocol::codes`]) is a voucher's gate whose orders carry a code: the codes
//! share `remaining`, the customers' counts and the money, and each code's uses are counted in
//! the `codes` hash against the per-code limit, and in Postgres by the code's slot.
//!
//! # The code each step stands for
//!
//! | step | code |
//! |---|---|
//! | `Send`, `Req::Reserve` | `Flash::reserve` (`shared/src/reservations/flash.rs`): `lua/reserve.lua` after `entry.lua` and `rules.lua`. A retry answers from its entry; without one, a suspect gate answers SUSPECT (503) and grants nothing. NOT_LOADED warms up first |
//! | `Req::Merge`, `Req::Settle` | mode A: `fg_merge`, then `reconcile_fresh`'s correction of the gate (`lua/release.lua`) and the answer |
//! | `Req::Send`, `Req::Answer`, `Consume` | mode B: the event's send, the 201; the consumer's merge (`fg_merge_batch`, `revoke`) and its settle or revocation in `pending` (`shared/src/consumer.rs`) |
//! | `ConfirmOrder`, `ReleaseOrder` and their requests | `Store::confirm` / `Store::release`, or without a row in mode B from the gate's entry (`Flash::merge_from_gate`); then `release.lua` |
//! | `ReadOrder`, `Req::Read`, `Req::ReadGate` | Postgres, then `lookup.lua` and its trust, `Flash::never_granted` (`trust.lua`: a suspect gate is repaired and trusted again only once its lost grants have landed) |
//! | `Expire`, `Req::SweepGate` | `fg_expire`, then `release.lua` (`shared/src/sweeper/mod.rs`) |
//! | `Orphan` | `Sweeper::orphans` (`shared/src/sweeper/orphans.rs`): the gate's `pending` set, then `Store::orders_among` (step 1); an order Postgres has is only `settled` |
//! | `Req::Orphan` | `Sweeper::recover`: the gate's entry, then `fg_recover_orphan` (step 2), which writes the RELEASED/EXPIRED tombstone only where there is no row or it is still RESERVED; then `release.lua` (step 3, a `Req::SweepGate`), or, when a confirm wrote the row first, only `settled` |
//! | `Settle`, `Reconcile` | `shared/src/sweeper/reconcile.rs`: `finish_releases`, and the compare-and-repair of `remaining` and the money (`repair.lua`); here only with nothing pending (the code counts the pending orders as in flight), never under the gate lock |
//! | `Warm` | `Warmup::warm` (`shared/src/reservations/warmup.rs`): `SET NX` of the gate lock, the mark, the wait for the lost grants (mode B) and `Store::gate_source` |
//! | `Req::Load` | `lua/load.lua`, which writes nothing over a loaded gate nor once the lock no longer holds the loader's token; then `unlock.lua` |
//! | `Patch` | `Reservations::patch_flash` (`shared/src/reservations/patch.rs`), a change lowering the limit by one: `lock_for_change`, then `patch.lua`'s first step (LIMIT_BELOW_USED, or NOT_LOADED: nothing to change in the gate) |
//! | `Req::Patch` | `fg_patch_voucher` (refused below the uses held, and then `patch.lua` undoes the first step), `patch.lua`'s last step, the unlock |
//! | `Failover`, `Repair` | a replica promoted without the last grant (its entry, its counts and its `remaining` decrement together); the repair of a suspect gate: the counts recomputed from Postgres, the grants pending in the gate without a row and the releases in flight, then `replid` set to the node's |
//! | `Crash`, `RedisLoss`, `LockExpire`, `Duplicate`, `Lose` | faults |
//!
//! # What is still one step, and why
//!
//! - The sweeper's read of `pending` and `orders_among` are one step, and `recover`'s read of
//!   the entry and `fg_recover_orphan` another: what can come between the reads of the gate
//!   and of Postgres is decided again by the step after (an order settled meanwhile is found
//!   in Postgres; a confirm, a release or the event that writes the row after the entry was
//!   read is found by `fg_recover_orphan` under the row's lock, as in the model). Only an
//!   order whose reserve request is over is taken for an orphan: TTL plus grace (minutes) is
//!   far beyond a request's deadline (seconds).
//! - The loader's steps before `load.lua` are one: between them the voucher is not loaded,
//!   so nothing is granted, and a change waits for the lock. Where no change or lock expiry
//!   is checked ([`Protocol::patches`] and [`Protocol::lock_expiries`] zero) the whole warm-up
//!   is one step, since nothing can then come between the read and the write that changes
//!   what is loaded.
//! - A change's lock and its first gate step are one (only the lock's expiry could come
//!   between, and `patch.lua` then changes nothing: LOCK_LOST), and so are its write in
//!   Postgres, its last gate step and its unlock (lowering the limit adds nothing to the gate
//!   in the last step, and while the change holds the lock no loader or repair can act).
//! - The reconciler's reads of the gate and of Postgres and `repair.lua` are one step:
//!   `repair.lua` refuses when an order gained or lost a use since the reads (`#moves`).
//! - The repair of a suspect gate is one step; in the code it must likewise refuse, or hold
//!   a use back, when an order moved between its reads and its write.
//! - There is no clock: any reserved row may expire at any moment, any pending order whose
//!   request is over may be an orphan, the send timeout is "no send under way", and in mode
//!   A "no grant on its way to Postgres" (no merge, nor its correction, under way).
//!
//! Not modelled: the rules (pause, window, minimum order), a change that raises the limit or
//! changes the budget, the sold-out short cut, retirement, group commit (one merge per
//! request here), a lost tombstone in a failover, and a change's lock (10 s) expiring under
//! the change: then a loader could load the old limit between the change's first gate step
//! and its write in Postgres, and nothing fences that (only the loader's lock, 5 s, expires
//! here).
//!
//! The properties ([`Protocol::properties`]) are the service's promise. A [`Mutation`] breaks
//! the protocol on purpose (most are the code before a fix), so that a test shows the checker
//! catches it.
//!
//! Orders of several codes, all or none, have a model of their own in [`orders`], which takes
//! each code's reserve, release and expiry as one step, as this model checks them to be.

pub mod orders;

use std::fmt;

use stateright::{Model, Property};

/// How winners reach Postgres.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The request writes the row itself (`fg_merge`), then answers.
    A,
    /// The request sends an event and answers; a consumer writes the row.
    B,
}

/// A deliberate bug, to show the checker finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// `release.lua` forgets the order instead of leaving a tombstone.
    ReleaseWithoutTombstone,
    /// The reconciler repairs `remaining` while orders are pending.
    RepairWhilePending,
    /// The reconciler repairs `remaining` to `total_limit - used` without counting the releases
    /// in flight (released in Postgres, not yet in the gate): what it did before the model
    /// found it.
    RepairIgnoresReleasesInFlight,
    /// The sweeper never finishes a release whose gate step was lost.
    NoSettle,
    /// Mode B: an order neither Postgres nor the gate knows is "not found" even after the
    /// gate lost data, without waiting for the events in flight.
    TrustGateAfterLoss,
    /// `release.lua` gives the use back but not its discount.
    ReleaseKeepsDiscount,
    /// `rules.lua` never refuses BUDGET_EXHAUSTED: the gate grants past the money left and
    /// leaves the refusal to Postgres.
    GateIgnoresBudget,
    /// Mode B: after a loss, the gate loads again (or is trusted again) as soon as nothing is
    /// in flight, without waiting out the send timeout for a grant still in its send.
    NoSendGrace,
    /// The orphan sweep's tombstone is a plain merge of RELEASED (`fg_merge`), which the
    /// lattice puts above CONFIRMED: a confirm that wrote its row between the sweeper's look-up
    /// and its write loses its use, and the gate sells it again (before `fg_recover_orphan`).
    OrphanOverridesConfirm,
    /// `reserve.lua` grants from a gate whose `replid` is not the node's (a failover lost the
    /// last grants, and their `remaining` decrements with them): more 201s than the limit, the
    /// consumer revokes the extra (before the SUSPECT answer).
    ReserveIgnoresFailover,
    /// The read path trusts a suspect gate again (`trust.lua` sets `replid`) without
    /// recomputing its counts, so reserves grant again from the `remaining` the failover
    /// left too high.
    TrustWithoutRepair,
    /// `load.lua` writes whatever its loader read, even when the gate lock is no longer the
    /// loader's: a change that took the lock meanwhile found nothing loaded and lowered the
    /// limit in Postgres alone (before the lock check).
    StaleLoaderWrites,
    /// A campaign's repair after a failover recomputes `remaining` and the customers' counts
    /// but leaves the `codes` hash as it is (as the reconciler does): the code count of the
    /// lost grant stays missing, and the code is granted again past its limit.
    RepairKeepsCodeCounts,
    /// The repair after a failover counts what Postgres holds and the grants pending without a
    /// row, but not the releases in flight (released in Postgres, the gate's entry still
    /// active), whose own gate step then gives the use back a second time.
    FailoverRepairMissesReleases,
    /// Mode A: the repair after a failover does not wait for the requests granted before it to
    /// reach Postgres: a grant the failover lost merges after the repair counted its use free.
    RepairWhileMerging,
}

/// The bounds of one check.
#[derive(Clone, Debug)]
pub struct Protocol {
    pub mode: Mode,
    pub limit: u8,
    /// The money budget (`budgetAmount`), None for a voucher without one.
    pub budget: Option<u8>,
    /// Each orderId's discount (its order's amount decides it; missing: 0). Only read with a
    /// budget.
    pub discounts: Vec<u8>,
    /// Each client's (orderId, customer). Two clients with one orderId and two customers model
    /// a reused orderId.
    pub clients: Vec<(u8, u8)>,
    /// Reserve requests each client may send (the first and its retries).
    pub sends: u8,
    pub crashes: u8,
    pub redis_losses: u8,
    /// Failovers to a replica that missed the last grant.
    pub failovers: u8,
    /// A flash campaign's gate: each orderId's code (its codes share the campaign's
    /// `remaining`, customers' counts and money, and each code counts its own uses in the
    /// `codes` hash against `per_code`). Empty: a voucher.
    pub codes: Vec<u8>,
    /// The campaign's per-code limit (`perCodeLimit`).
    pub per_code: u8,
    /// Mode B: events delivered twice, and events lost.
    pub duplicates: u8,
    pub losses: u8,
    /// Clients may confirm their 201s (more states: some runs leave it out).
    pub confirms: bool,
    /// Clients may read their order back (`GET .../reservations/{orderId}`), once each.
    pub reads: bool,
    /// Changes of the voucher (`PATCH`) that lower its limit by one, each under the gate lock.
    /// With any, or with a lock expiry, the loader takes its two steps under the lock.
    pub patches: u8,
    /// Times a loader's gate lock expires while the loader still runs (it stalled past the
    /// lock's TTL).
    pub lock_expiries: u8,
    /// The sweeper's look-up of an orphan and its recovery are two steps, as in the code, so
    /// that a confirm, a release or the late event can come between. In mode B that takes
    /// about five times the states: a run that checks something else (a change, a campaign)
    /// may take them as one step, within seconds.
    pub split_orphans: bool,
    /// Sweeper processes that may recover one orphan at once (each looked it up).
    pub sweepers: u8,
    /// Processes serving the clients. With two, a client whose request timed out sends its
    /// retry to the other while the first is still under way.
    pub instances: u8,
    pub mutation: Option<Mutation>,
}

/// An order's entry in the gate (`lua/entry.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Entry {
    None,
    /// Holds a use: the customer and the reservation's identity (its expiry, in the code).
    Active(u8, u8),
    /// Released; the customer when known.
    Tomb(Option<u8>),
}

/// An order's row in Postgres.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Row {
    None,
    Reserved(u8, u8),
    Confirmed(u8, u8),
    /// Released: the customer, and whether Postgres revoked it (a use it never held).
    Released(u8, bool),
}

impl Row {
    fn active(self) -> bool {
        matches!(self, Row::Reserved(..) | Row::Confirmed(..))
    }
    fn customer(self) -> Option<u8> {
        match self {
            Row::Reserved(c, _) | Row::Confirmed(c, _) | Row::Released(c, _) => Some(c),
            Row::None => None,
        }
    }
    fn stamp(self) -> Option<u8> {
        match self {
            Row::Reserved(_, s) | Row::Confirmed(_, s) => Some(s),
            _ => None,
        }
    }
}

/// What a client was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Answer {
    /// 201, with the reservation's identity: a replay must carry the same.
    Reserved(u8),
    /// Any refusal (409, 422) or failure (503).
    Refused(Refusal),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    OutOfStock,
    BudgetExhausted,
    AlreadyUsed,
    OrderConflict,
    ReservationReleased,
    Unavailable,
}

/// A request in a process, and the step it is at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Req {
    /// A reserve before the gate.
    Reserve {
        client: u8,
    },
    /// Mode A: the gate granted (`fresh`) or replayed `stamp`; the merge is next.
    Merge {
        client: u8,
        stamp: u8,
        fresh: bool,
    },
    /// Mode A: the merge came to `merged`; the gate's correction and the answer are next.
    Settle {
        client: u8,
        stamp: u8,
        fresh: bool,
        merged: Merged,
    },
    /// Mode B: the gate granted `stamp`; the send is next, then the answer.
    Send {
        client: u8,
        stamp: u8,
    },
    Answer {
        client: u8,
        stamp: u8,
    },
    /// The client confirms its order: Postgres, or in mode B from the gate's entry when the
    /// row has not landed.
    Confirm {
        client: u8,
    },
    /// The client releases its order: Postgres first, then the gate.
    Release {
        client: u8,
    },
    ReleaseGate {
        order: u8,
        customer: u8,
    },
    /// The sweeper: an expired or orphaned order's gate release, after Postgres.
    SweepGate {
        order: u8,
        customer: Option<u8>,
    },
    /// The client reads its order: Postgres first.
    Read {
        client: u8,
    },
    /// Mode B, no row: the gate's entry, or whether the order can be said not to exist.
    ReadGate {
        client: u8,
    },
    /// The sweeper found the order pending in the gate and not in Postgres
    /// (`Store::orders_among`); its recovery is next: the gate's entry, then the tombstone
    /// (`fg_recover_orphan`), then the gate's release.
    Orphan {
        order: u8,
    },
    /// A loader holding the gate lock with `token` read what to load from Postgres;
    /// `load.lua` is next, then the unlock.
    Load {
        token: u8,
        snapshot: Snapshot,
    },
    /// A change lowering the limit by one holds the gate lock with `token` and has taken its
    /// first gate step; Postgres is next, then the last gate step and the unlock.
    Patch {
        token: u8,
    },
}

/// The most customers a run may have (a [`Snapshot`] counts each).
pub const MAX_CUSTOMERS: usize = 4;
/// The most codes a campaign's run may have.
pub const MAX_CODES: usize = 2;

/// What a loader read from Postgres (`Store::gate_source`), in one snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Snapshot {
    pub remaining: i8,
    pub budget_left: i8,
    pub users: [u8; MAX_CUSTOMERS],
    /// A campaign's uses held per code.
    pub codes: [u8; MAX_CODES],
}

/// What `fg_merge` came to for a mode A winner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Merged {
    Applied,
    /// The row was there: active with this identity, or released.
    Unchanged(Row),
    OrderConflict,
    AlreadyUsed,
    OutOfStock,
    BudgetExhausted,
    /// Mode B's consumer: stored RELEASED/REVOKED.
    Revoked,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The limit in force: Postgres' `total_limit`, which a change may lower.
    pub limit: u8,
    /// The gate lock (`loading`): the token of the loader or change holding it.
    pub lock: Option<u8>,
    pub loaded: bool,
    /// Postgres' mark: the gate loaded the voucher once (`voucher.gate_loaded`).
    pub marked: bool,
    /// Loaded, but Redis changed hands since (a failover lost the last grants): the gate's
    /// `replid` is not the node's.
    pub suspect: bool,
    pub remaining: i8,
    /// The gate's money left (meaningful when loaded with a budget).
    pub budget_left: i8,
    pub users: Vec<u8>,
    /// A campaign's `codes` hash: each code's uses held in the gate.
    pub code_uses: Vec<u8>,
    pub entries: Vec<Entry>,
    pub pending: Vec<bool>,
    pub rows: Vec<Row>,
    pub used: u8,
    /// Postgres' discounts held (`voucher_budget.used`).
    pub budget_used: u8,
    /// Mode B: (order, customer, stamp), in no order (kept sorted).
    pub queue: Vec<(u8, u8, u8)>,
    /// The requests under way in the processes, in no order (kept sorted).
    pub reqs: Vec<Req>,
    pub sends_left: Vec<u8>,
    /// What each client was told that a property reads: its first 201, then every other
    /// answer since (once each, sorted). The answers before the first 201 promise nothing (a
    /// use may come back), nor does a 503 after it: neither is kept.
    pub answers: Vec<Vec<Answer>>,
    /// Some reserve was refused BUDGET_EXHAUSTED.
    pub budget_refused: bool,
    /// The client released its order (it asked once).
    pub released: Vec<bool>,
    /// The client confirmed its order (it asked once).
    pub confirmed: Vec<bool>,
    /// The client read its order back (it asked once).
    pub read: Vec<bool>,
    /// The client was told its order is confirmed (200).
    pub told_confirmed: Vec<bool>,
    /// A client told 201 read its order back as "not found".
    pub missed: bool,
    /// The gate refused a reserve BUDGET_EXHAUSTED while the money was there.
    pub starved: bool,
    pub stamps: u8,
    pub crashes: u8,
    /// Redis lost all its data. A failover is not one: the gate knows it (its `replid` is not
    /// the node's) and repairs itself, so the properties must hold through it.
    pub redis_losses: u8,
    pub failovers: u8,
    pub patches: u8,
    pub lock_expiries: u8,
    pub duplicates: u8,
    pub losses: u8,
    pub revoked: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Send(u8),
    ConfirmOrder(u8),
    ReleaseOrder(u8),
    ReadOrder(u8),
    Step(usize),
    Warm,
    Consume(usize),
    Duplicate(usize),
    Lose(usize),
    Expire(u8),
    /// The sweeper's look-up of a pending order in Postgres (its recovery is a step of its own).
    Orphan(u8),
    /// The sweeper finishes a release whose gate step never came (crash, Redis down).
    Settle(u8),
    Reconcile,
    Crash,
    RedisLoss,
    /// A failover to a replica that missed the last writes: the order's grant is lost from the
    /// gate (its entry and its counts, one script's effects together).
    Failover(u8),
    /// A suspect gate's counts recomputed and the gate trusted again, once the lost grants
    /// have landed.
    Repair,
    /// A change (`PATCH`) takes the gate lock and lowers the gate's `remaining` by one.
    Patch,
    /// The gate lock expires under a loader that still runs.
    LockExpire,
}

impl Protocol {
    fn orders(&self) -> usize {
        self.clients
            .iter()
            .map(|c| c.0 as usize + 1)
            .max()
            .unwrap_or(0)
    }
    fn customers(&self) -> usize {
        self.clients
            .iter()
            .map(|c| c.1 as usize + 1)
            .max()
            .unwrap_or(0)
    }
    fn broken(&self, m: Mutation) -> bool {
        self.mutation == Some(m)
    }

    /// A campaign's order's code.
    fn code(&self, order: u8) -> Option<usize> {
        self.codes.get(order as usize).map(|&c| c as usize)
    }

    fn code_count(&self) -> usize {
        self.codes
            .iter()
            .map(|&c| c as usize + 1)
            .max()
            .unwrap_or(0)
    }

    /// The uses Postgres holds of a campaign's code (its one slot).
    fn code_held(&self, s: &State, code: usize) -> u8 {
        (0..self.orders())
            .filter(|&o| s.rows[o].active() && self.code(o as u8) == Some(code))
            .count() as u8
    }

    /// Postgres has room for a use of `order`'s code (always, for a voucher).
    fn code_room(&self, s: &State, order: u8) -> bool {
        self.code(order)
            .is_none_or(|code| self.code_held(s, code) < self.per_code)
    }

    /// The discount of an order's use.
    fn discount(&self, order: u8) -> u8 {
        self.discounts.get(order as usize).copied().unwrap_or(0)
    }

    /// Whether a use of `order` fits in `left` money (always, without a budget).
    fn fits(&self, order: u8, left: i8) -> bool {
        self.budget.is_none() || self.discount(order) as i8 <= left
    }

    /// The money Postgres says is left: the budget less the discounts held (0 without one).
    fn expected_budget(&self, s: &State) -> i8 {
        self.budget.map_or(0, |b| b as i8 - s.budget_used as i8)
    }

    /// Postgres takes or gives back a use of `order`: the slots and the budget move together.
    fn take_use(&self, s: &mut State, order: u8) {
        s.used += 1;
        s.budget_used += self.discount(order);
    }

    fn give_use(&self, s: &mut State, order: u8) {
        s.used -= 1;
        s.budget_used -= self.discount(order);
    }

    /// The gate gives a use of `order` back: to `remaining`, and its discount to the money
    /// left.
    fn gate_give_back(&self, s: &mut State, order: u8) {
        s.remaining += 1;
        if let Some(code) = self.code(order) {
            s.code_uses[code] = s.code_uses[code].saturating_sub(1);
        }
        if !self.broken(Mutation::ReleaseKeepsDiscount) {
            s.budget_left += self.discount(order) as i8;
        }
    }

    /// The loader under the gate lock: its read of Postgres and `load.lua` are two steps, so
    /// that a change can come between them. Only in the runs that change the voucher or let
    /// the lock expire: elsewhere nothing else takes the lock, and what may come between the
    /// two steps changes nothing loaded (the voucher is not loaded, so nothing is granted; in
    /// mode B the loader waited for every event of its voucher to land), except in mode A a
    /// merge still under way from before Redis lost its data, which the properties excuse.
    fn split_loader(&self) -> bool {
        self.patches > 0 || self.lock_expiries > 0
    }

    /// A token for the gate lock, unlike every token a live holder still carries (the
    /// smallest: states that differ only in old tokens' numbers are one state).
    fn fresh_token(&self, s: &State) -> u8 {
        let taken: Vec<u8> = s
            .reqs
            .iter()
            .filter_map(|r| match *r {
                Req::Load { token, .. } | Req::Patch { token } => Some(token),
                _ => None,
            })
            .chain(s.lock)
            .collect();
        (0..).find(|t| !taken.contains(t)).unwrap_or(0)
    }

    /// What `Store::gate_source` reads: the uses left under the limit in force, the money
    /// left, each customer's active uses.
    fn snapshot(&self, s: &State) -> Snapshot {
        let mut users = [0; MAX_CUSTOMERS];
        for row in &s.rows {
            if let (true, Some(c)) = (row.active(), row.customer()) {
                users[c as usize] += 1;
            }
        }
        let mut codes = [0; MAX_CODES];
        for (code, n) in codes.iter_mut().enumerate().take(self.code_count()) {
            *n = self.code_held(s, code);
        }
        Snapshot {
            remaining: s.limit as i8 - s.used as i8,
            budget_left: self.expected_budget(s),
            users,
            codes,
        }
    }

    /// `load.lua` with what a loader read; the order entries are not loaded, and the gate
    /// records the node it was loaded into (trusted).
    fn write_load(&self, s: &mut State, snapshot: Snapshot) {
        s.loaded = true;
        s.marked = true;
        s.suspect = false;
        s.remaining = snapshot.remaining;
        s.budget_left = snapshot.budget_left;
        s.users = snapshot.users[..self.customers()].to_vec();
        s.code_uses = snapshot.codes[..self.code_count()].to_vec();
        s.entries = vec![Entry::None; self.orders()];
        s.pending = vec![false; self.orders()];
    }

    /// The warm-up in one step: the read and `load.lua` together.
    fn load(&self, s: &mut State) {
        self.write_load(s, self.snapshot(s));
    }

    /// A suspect gate repaired once every grant the failover lost has landed: `remaining`,
    /// the money left and the customers' counts recomputed from what Postgres holds plus the
    /// grants still pending in the gate without a row, and plus the releases in flight
    /// (released in Postgres, the gate's entry still active: their own gate step, or the
    /// sweeper's `Settle`, gives the use back later, so it must still count as held now); then
    /// the gate is trusted on the node serving now (`replid`).
    fn repair(&self, s: &mut State) {
        let mut users = vec![0; self.customers()];
        let mut held = Vec::new();
        for o in 0..self.orders() {
            let customer = match (s.rows[o], s.entries[o]) {
                (row, _) if row.active() => row.customer(),
                (Row::None, Entry::Active(c, _)) if s.pending[o] => Some(c),
                (Row::Released(..), Entry::Active(c, _))
                    if !self.broken(Mutation::FailoverRepairMissesReleases) =>
                {
                    Some(c)
                }
                _ => None,
            };
            if let Some(c) = customer {
                users[c as usize] += 1;
                held.push(o as u8);
            }
        }
        s.remaining = s.limit as i8 - held.len() as i8;
        s.budget_left = self.budget.map_or(0, |b| b as i8 - self.money(&held) as i8);
        s.users = users;
        if !self.broken(Mutation::RepairKeepsCodeCounts) {
            s.code_uses = vec![0; self.code_count()];
            for &o in &held {
                if let Some(code) = self.code(o) {
                    s.code_uses[code] += 1;
                }
            }
        }
        s.suspect = false;
    }

    /// The repair is due: one send timeout since the suspicion was noticed and nothing in
    /// flight on the transport (modelled as no send under way and an empty queue); in mode A,
    /// no request granted before the failover still on its way to Postgres (its merge, then
    /// its correction of the gate); and no change or loader holding the gate lock (a repair
    /// from the old limit in the middle of a change would give back what its first step took).
    fn may_repair(&self, s: &State) -> bool {
        let merging = self.mode == Mode::A
            && !self.broken(Mutation::RepairWhileMerging)
            && s.reqs
                .iter()
                .any(|r| matches!(r, Req::Merge { .. } | Req::Settle { .. }));
        s.loaded
            && s.suspect
            && s.lock.is_none()
            && !merging
            && !self.sending(s)
            && s.queue.is_empty()
    }

    /// A reserve request of `order` is under way.
    fn reserving(&self, s: &State, order: u8) -> bool {
        s.reqs.iter().any(|r| match *r {
            Req::Reserve { client }
            | Req::Merge { client, .. }
            | Req::Settle { client, .. }
            | Req::Send { client, .. }
            | Req::Answer { client, .. } => self.clients[client as usize].0 == order,
            _ => false,
        })
    }

    /// The sweeper's recovery of an orphan it found missing from Postgres
    /// (`Sweeper::recover`): the gate's entry, then the tombstone, then the gate's release.
    fn recover(&self, s: &mut State, order: u8) {
        let o = order as usize;
        if !s.loaded {
            return;
        }
        let Entry::Active(c, _) = s.entries[o] else {
            // A tombstone, or gone: only the pending mark is left.
            s.pending[o] = false;
            return;
        };
        let overrides = self.broken(Mutation::OrphanOverridesConfirm);
        match s.rows[o] {
            Row::None => s.rows[o] = Row::Released(c, false),
            Row::Reserved(rc, _) if rc == c => {
                s.rows[o] = Row::Released(c, false);
                self.give_use(s, order);
            }
            Row::Confirmed(rc, _) if rc == c && overrides => {
                s.rows[o] = Row::Released(c, false);
                self.give_use(s, order);
            }
            // `fg_recover_orphan` writes only where there is no row or it is still RESERVED:
            // a confirm came first, and keeps its use, in Postgres and in the gate.
            Row::Confirmed(..) if !overrides => {
                s.pending[o] = false;
                return;
            }
            // Another customer's row (ORDER_CONFLICT), or released already: nothing written.
            _ => {}
        }
        s.reqs.push(Req::SweepGate {
            order,
            customer: Some(c),
        });
    }

    /// Mode B, a voucher the gate held before and lost: its grants may still be on their way
    /// (`Warmup::load`). The real wait is one send timeout after the loss was noticed, then
    /// until nothing is in flight: modelled as no send left and an empty queue.
    fn must_wait_to_load(&self, s: &State) -> bool {
        self.mode == Mode::B && s.marked && (self.sending(s) || !s.queue.is_empty())
    }

    /// A send begun before a loss may still be under way: the send timeout has not passed.
    fn sending(&self, s: &State) -> bool {
        !self.broken(Mutation::NoSendGrace) && s.reqs.iter().any(|r| matches!(r, Req::Send { .. }))
    }

    /// `release.lua`. `give_back`: the use returns; `tomb`: leave a tombstone (else forget);
    /// `keep`: the order stays active (uncount).
    fn gate_remove(&self, s: &mut State, order: u8, customer: Option<u8>, how: Removal) {
        if !s.loaded {
            return;
        }
        let o = order as usize;
        s.pending[o] = false;
        let tomb = match how {
            Removal::Release | Removal::Revoke => !self.broken(Mutation::ReleaseWithoutTombstone),
            _ => false,
        };
        match s.entries[o] {
            Entry::None => {
                if tomb {
                    s.entries[o] = Entry::Tomb(customer);
                }
            }
            Entry::Tomb(_) => {}
            Entry::Active(c, _) => {
                if matches!(
                    how,
                    Removal::Release | Removal::Forget(true) | Removal::Uncount
                ) {
                    self.gate_give_back(s, order);
                }
                s.users[c as usize] = s.users[c as usize].saturating_sub(1);
                if tomb {
                    s.entries[o] = Entry::Tomb(Some(c));
                } else if how != Removal::Uncount {
                    s.entries[o] = Entry::None;
                }
            }
        }
    }

    /// `fg_merge` of a use the gate holds (`Merge::held`, status RESERVED). `revoke`: mode B's
    /// consumer stores a refusal as RELEASED/REVOKED instead of refusing.
    fn merge_held(
        &self,
        s: &mut State,
        order: u8,
        customer: u8,
        stamp: u8,
        revoke: bool,
    ) -> Merged {
        let o = order as usize;
        match s.rows[o] {
            Row::None => {}
            row if row.customer() != Some(customer) => return Merged::OrderConflict,
            row => return Merged::Unchanged(row),
        }
        let held_by_customer = s
            .rows
            .iter()
            .filter(|r| r.active() && r.customer() == Some(customer))
            .count();
        let refusal = if held_by_customer >= 1 {
            Some(Merged::AlreadyUsed)
        } else if s.used >= s.limit || !self.code_room(s, order) {
            Some(Merged::OutOfStock)
        } else if !self.fits(order, self.expected_budget(s)) {
            // The budget after the stock, as `fg_merge` decides.
            Some(Merged::BudgetExhausted)
        } else {
            None
        };
        match refusal {
            None => {
                s.rows[o] = Row::Reserved(customer, stamp);
                self.take_use(s, order);
                Merged::Applied
            }
            Some(_) if revoke => {
                s.rows[o] = Row::Released(customer, true);
                s.revoked += 1;
                Merged::Revoked
            }
            Some(refused) => refused,
        }
    }

    /// `reserve.lua` for a client: the gate's answer.
    fn gate_reserve(&self, s: &mut State, client: u8) -> GateAnswer {
        let (order, customer) = self.clients[client as usize];
        let o = order as usize;
        match s.entries[o] {
            Entry::Active(c, _) if c != customer => {
                return GateAnswer::Refused(Refusal::OrderConflict)
            }
            Entry::Tomb(Some(c)) if c != customer => {
                return GateAnswer::Refused(Refusal::OrderConflict)
            }
            Entry::Tomb(_) => return GateAnswer::Refused(Refusal::ReservationReleased),
            Entry::Active(_, stamp) => return GateAnswer::Held(stamp, false),
            Entry::None => {}
        }
        // SUSPECT: Redis changed hands since the load, and the grants it lost took their
        // `remaining` decrements with them; a retry still answers from its entry above.
        if s.suspect && !self.broken(Mutation::ReserveIgnoresFailover) {
            return GateAnswer::Refused(Refusal::Unavailable);
        }
        if s.users[customer as usize] >= 1 {
            return GateAnswer::Refused(Refusal::AlreadyUsed);
        }
        let code_full = self
            .code(order)
            .is_some_and(|code| s.code_uses[code] >= self.per_code);
        if s.remaining <= 0 || code_full {
            return GateAnswer::Refused(Refusal::OutOfStock);
        }
        if !self.fits(order, s.budget_left) && !self.broken(Mutation::GateIgnoresBudget) {
            // Refused for money: was the money really spent, by the orders holding a use in
            // the gate or in Postgres?
            let spent = self.money(&self.held_anywhere(s)) as i8;
            if self.fits(order, self.budget.unwrap_or(0) as i8 - spent) {
                s.starved = true;
            }
            return GateAnswer::Refused(Refusal::BudgetExhausted);
        }
        s.stamps += 1;
        let stamp = s.stamps;
        s.remaining -= 1;
        if self.budget.is_some() {
            s.budget_left -= self.discount(order) as i8;
        }
        s.users[customer as usize] += 1;
        if let Some(code) = self.code(order) {
            s.code_uses[code] += 1;
        }
        s.entries[o] = Entry::Active(customer, stamp);
        s.pending[o] = true;
        GateAnswer::Held(stamp, true)
    }

    fn answer(&self, s: &mut State, client: u8, a: Answer) {
        if a == Answer::Refused(Refusal::BudgetExhausted) {
            s.budget_refused = true;
        }
        let answers = &mut s.answers[client as usize];
        let told = answers.iter().any(|a| matches!(a, Answer::Reserved(_)));
        let reserved = matches!(a, Answer::Reserved(_));
        if (!told && !reserved) || a == Answer::Refused(Refusal::Unavailable) {
            return;
        }
        if !answers.contains(&a) {
            answers.push(a);
            answers[1..].sort_unstable();
        }
    }

    /// Orders of clients told 201 whose use is still held (not released in Postgres).
    fn told_and_held(&self, s: &State) -> Vec<u8> {
        let mut orders: Vec<u8> = Vec::new();
        for (i, answers) in s.answers.iter().enumerate() {
            let (order, customer) = self.clients[i];
            let told = answers.iter().any(|a| matches!(a, Answer::Reserved(_)));
            let row = s.rows[order as usize];
            let gone = matches!(row, Row::Released(..))
                || (row != Row::None && row.customer() != Some(customer));
            if told && !gone && !orders.contains(&order) {
                orders.push(order);
            }
        }
        orders
    }

    /// Orders holding a use in the gate or in Postgres (once if in both).
    fn held_anywhere(&self, s: &State) -> Vec<u8> {
        (0..self.orders() as u8)
            .filter(|&o| {
                matches!(s.entries[o as usize], Entry::Active(..)) || s.rows[o as usize].active()
            })
            .collect()
    }

    fn money(&self, orders: &[u8]) -> usize {
        orders.iter().map(|&o| self.discount(o) as usize).sum()
    }

    /// Nothing left to do: no request, no event, and no sweeper step that would change a thing.
    fn quiescent(&self, s: &State) -> bool {
        let mut actions = Vec::new();
        self.actions(s, &mut actions);
        actions.into_iter().all(|a| match a {
            // Faults and clients acting of their own accord are not work left to do.
            Action::Crash
            | Action::RedisLoss
            | Action::Duplicate(_)
            | Action::Lose(_)
            | Action::LockExpire => true,
            Action::Send(_) | Action::ConfirmOrder(_) | Action::ReleaseOrder(_) => true,
            Action::Patch => true,
            a => self.next_state(s, a).is_none(),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GateAnswer {
    Held(u8, bool),
    Refused(Refusal),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Removal {
    Release,
    Revoke,
    Forget(bool),
    Uncount,
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let (o, c, n) = (self.orders(), self.customers(), self.clients.len());
        assert!(c <= MAX_CUSTOMERS, "at most {MAX_CUSTOMERS} customers");
        assert!(self.code_count() <= MAX_CODES, "at most {MAX_CODES} codes");
        vec![State {
            limit: self.limit,
            lock: None,
            loaded: false,
            remaining: 0,
            budget_left: 0,
            users: vec![0; c],
            code_uses: vec![0; self.code_count()],
            entries: vec![Entry::None; o],
            pending: vec![false; o],
            rows: vec![Row::None; o],
            used: 0,
            budget_used: 0,
            queue: Vec::new(),
            reqs: Vec::new(),
            sends_left: vec![self.sends; n],
            answers: vec![Vec::new(); n],
            budget_refused: false,
            released: vec![false; n],
            confirmed: vec![false; n],
            read: vec![false; n],
            told_confirmed: vec![false; n],
            missed: false,
            starved: false,
            marked: false,
            suspect: false,
            stamps: 0,
            crashes: 0,
            redis_losses: 0,
            failovers: 0,
            patches: 0,
            lock_expiries: 0,
            duplicates: 0,
            losses: 0,
            revoked: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (i, left) in s.sends_left.iter().enumerate() {
            let busy = s.reqs.iter().any(|r| req_client(r) == Some(i as u8));
            if *left > 0 && (!busy || self.instances > 1) {
                actions.push(Action::Send(i as u8));
            }
            let told = s.answers[i]
                .iter()
                .any(|a| matches!(a, Answer::Reserved(_)));
            if told && !s.released[i] && !busy {
                actions.push(Action::ReleaseOrder(i as u8));
                if self.confirms && !s.confirmed[i] {
                    actions.push(Action::ConfirmOrder(i as u8));
                }
            }
            if told && self.reads && !s.read[i] && !busy {
                actions.push(Action::ReadOrder(i as u8));
            }
        }
        for i in 0..s.reqs.len() {
            actions.push(Action::Step(i));
        }
        actions.push(Action::Warm);
        for i in 0..s.queue.len() {
            actions.push(Action::Consume(i));
            if s.duplicates < self.duplicates {
                actions.push(Action::Duplicate(i));
            }
            if s.losses < self.losses {
                actions.push(Action::Lose(i));
            }
        }
        for o in 0..self.orders() as u8 {
            actions.push(Action::Expire(o));
            actions.push(Action::Orphan(o));
            actions.push(Action::Settle(o));
        }
        actions.push(Action::Reconcile);
        if s.failovers > 0 {
            actions.push(Action::Repair);
        }
        if s.patches < self.patches {
            actions.push(Action::Patch);
        }
        // A loader's lock (5 s) may expire under it: the read of Postgres and of the
        // transport can outlast it. A change's (10 s, for a few round trips) is taken to
        // outlive the change: if it did not, a loader could load the old limit between the
        // change's first gate step and its write in Postgres, and nothing fences that.
        let loading = s
            .reqs
            .iter()
            .any(|r| matches!(*r, Req::Load { token, .. } if Some(token) == s.lock));
        if s.lock_expiries < self.lock_expiries && loading {
            actions.push(Action::LockExpire);
        }
        if s.crashes < self.crashes && !s.reqs.is_empty() {
            actions.push(Action::Crash);
        }
        if s.redis_losses < self.redis_losses && s.loaded {
            actions.push(Action::RedisLoss);
        }
        if s.failovers < self.failovers && s.loaded {
            for (o, e) in s.entries.iter().enumerate() {
                if matches!(e, Entry::Active(..)) {
                    actions.push(Action::Failover(o as u8));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Send(c) => {
                s.sends_left[c as usize] -= 1;
                s.reqs.push(Req::Reserve { client: c });
            }
            Action::ConfirmOrder(c) => {
                s.confirmed[c as usize] = true;
                s.reqs.push(Req::Confirm { client: c });
            }
            Action::ReleaseOrder(c) => {
                s.released[c as usize] = true;
                s.reqs.push(Req::Release { client: c });
            }
            Action::ReadOrder(c) => {
                s.read[c as usize] = true;
                s.reqs.push(Req::Read { client: c });
            }
            Action::Step(i) => {
                let req = s.reqs.remove(i);
                self.step(&mut s, req);
            }
            Action::Warm => {
                // Mode B: a voucher the gate held before waits for its events to land before
                // it loads again.
                if s.loaded || self.must_wait_to_load(&s) {
                    return None;
                }
                if !self.split_loader() {
                    self.load(&mut s);
                } else {
                    // `SET NX` of the gate lock, then the read of Postgres (the mark first);
                    // `load.lua` is the next step.
                    if s.lock.is_some() {
                        return None;
                    }
                    let token = self.fresh_token(&s);
                    s.lock = Some(token);
                    s.marked = true;
                    let snapshot = self.snapshot(&s);
                    s.reqs.push(Req::Load { token, snapshot });
                }
            }
            Action::Consume(i) => {
                let (order, customer, stamp) = s.queue.remove(i);
                if self.merge_held(&mut s, order, customer, stamp, true) == Merged::Revoked {
                    // A tombstone in the gate, the use does not come back.
                    self.gate_remove(&mut s, order, Some(customer), Removal::Revoke);
                }
                if s.loaded {
                    s.pending[order as usize] = false;
                }
            }
            Action::Duplicate(i) => {
                s.duplicates += 1;
                let e = s.queue[i];
                s.queue.push(e);
            }
            Action::Lose(i) => {
                s.losses += 1;
                s.queue.remove(i);
            }
            Action::Expire(o) => {
                // `fg_expire`, then the gate release as a step of its own (it may never come).
                let Row::Reserved(c, _) = s.rows[o as usize] else {
                    return None;
                };
                s.rows[o as usize] = Row::Released(c, false);
                self.give_use(&mut s, o);
                s.reqs.push(Req::SweepGate {
                    order: o,
                    customer: Some(c),
                });
            }
            Action::Orphan(o) => {
                // Pending in the gate (read first), then Postgres' rows among them: with a
                // row, the mark is just cleared; without, the recovery is a step of its own
                // (`Req::Orphan`), which anything may come before. Each sweeper looks once.
                // Only an order older than TTL + grace (minutes) is an orphan: its reserve
                // request, bounded by its deadline (seconds), is over (answered or crashed).
                if !s.loaded || !s.pending[o as usize] || self.reserving(&s, o) {
                    return None;
                }
                if s.rows[o as usize] != Row::None {
                    s.pending[o as usize] = false;
                } else {
                    let looking = s
                        .reqs
                        .iter()
                        .filter(|r| **r == Req::Orphan { order: o })
                        .count();
                    if looking >= self.sweepers as usize {
                        return None;
                    }
                    if self.split_orphans {
                        s.reqs.push(Req::Orphan { order: o });
                    } else {
                        self.recover(&mut s, o);
                    }
                }
            }
            Action::Settle(o) => {
                // Released in Postgres, still active in the gate: release it there (the
                // request's own gate step, if it still comes, finds a tombstone).
                if self.broken(Mutation::NoSettle) || !s.loaded {
                    return None;
                }
                match (s.entries[o as usize], s.rows[o as usize]) {
                    (Entry::Active(c, _), Row::Released(..)) => {
                        self.gate_remove(&mut s, o, Some(c), Removal::Release)
                    }
                    _ => return None,
                }
            }
            Action::Reconcile => {
                // Never while a change or a loader holds the gate lock.
                if !s.loaded || s.lock.is_some() {
                    return None;
                }
                let pending = s.pending.iter().any(|p| *p);
                if pending && !self.broken(Mutation::RepairWhilePending) {
                    return None;
                }
                let expected = s.limit as i8 - s.used as i8;
                let expected_budget = self.expected_budget(&s);
                if s.remaining == expected && s.budget_left == expected_budget {
                    return None;
                }
                // A release in flight (Postgres has it, the gate's entry is still active) gives
                // its use back when its gate step runs, or the sweeper's `Settle` does: no
                // repair until then, or that use would be given back twice. The reconciler
                // looks for one only when the gate has fewer uses left than Postgres says (it
                // walks the orders then), as `reconcile.rs` does.
                let releasing = (0..self.orders()).any(|o| {
                    matches!(s.entries[o], Entry::Active(..))
                        && matches!(s.rows[o], Row::Released(..))
                });
                let short = s.remaining < expected || s.budget_left < expected_budget;
                if short && releasing && !self.broken(Mutation::RepairIgnoresReleasesInFlight) {
                    return None;
                }
                s.remaining = expected;
                s.budget_left = expected_budget;
            }
            Action::Crash => {
                s.crashes += 1;
                // The gate lock's holder died with the rest: the lock expires by its TTL
                // before anyone else needs it.
                s.lock = None;
                // Every request of the process is lost; its clients saw a timeout (503).
                for req in std::mem::take(&mut s.reqs) {
                    if let Some(c) = req_client(&req) {
                        if matches!(
                            req,
                            Req::Reserve { .. }
                                | Req::Merge { .. }
                                | Req::Settle { .. }
                                | Req::Send { .. }
                                | Req::Answer { .. }
                        ) {
                            self.answer(&mut s, c, Answer::Refused(Refusal::Unavailable));
                        }
                    }
                }
            }
            Action::RedisLoss => {
                s.redis_losses += 1;
                s.loaded = false;
                s.suspect = false;
                s.lock = None;
                s.remaining = 0;
                s.budget_left = 0;
                s.users = vec![0; self.customers()];
                s.code_uses = vec![0; self.code_count()];
                s.entries = vec![Entry::None; self.orders()];
                s.pending = vec![false; self.orders()];
            }
            Action::Failover(o) => {
                let Entry::Active(c, _) = s.entries[o as usize] else {
                    return None;
                };
                s.failovers += 1;
                s.suspect = true;
                s.remaining += 1;
                if self.budget.is_some() {
                    s.budget_left += self.discount(o) as i8;
                }
                s.users[c as usize] = s.users[c as usize].saturating_sub(1);
                if let Some(code) = self.code(o) {
                    s.code_uses[code] = s.code_uses[code].saturating_sub(1);
                }
                s.entries[o as usize] = Entry::None;
                s.pending[o as usize] = false;
            }
            Action::Repair => {
                if !self.may_repair(&s) {
                    return None;
                }
                self.repair(&mut s);
            }
            Action::Patch => {
                // `SET NX` of the gate lock and `patch.lua`'s first step together: only the
                // lock's expiry could come between, and the step would then change nothing.
                if s.patches >= self.patches || s.lock.is_some() || s.limit == 0 {
                    return None;
                }
                s.patches += 1;
                if s.loaded {
                    if s.remaining < 1 {
                        // LIMIT_BELOW_USED (the uses on their way included): nothing changed.
                        return Some(s);
                    }
                    s.remaining -= 1;
                }
                let token = self.fresh_token(&s);
                s.lock = Some(token);
                s.reqs.push(Req::Patch { token });
            }
            Action::LockExpire => {
                s.lock?;
                s.lock_expiries += 1;
                s.lock = None;
            }
        }
        // Requests run concurrently and events arrive in any order: which one a vector lists
        // first means nothing, so each is kept sorted and one set of them is one state.
        s.reqs.sort_unstable();
        s.queue.sort_unstable();
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "postgres never holds more than the limit",
                |m: &Protocol, s: &State| {
                    let active = s.rows.iter().filter(|r| r.active()).count();
                    s.used <= s.limit
                        && s.used as usize == active
                        && (0..m.code_count()).all(|code| m.code_held(s, code) <= m.per_code)
                },
            ),
            Property::always(
                "no more 201s held than the limit, unless Redis lost data",
                |m: &Protocol, s: &State| {
                    lost_grant(s) || m.told_and_held(s).len() <= s.limit as usize
                },
            ),
            Property::always(
                "postgres never holds discounts past the budget",
                |m: &Protocol, s: &State| {
                    let Some(budget) = m.budget else { return true };
                    let active: Vec<u8> = (0..m.orders() as u8)
                        .filter(|&o| s.rows[o as usize].active())
                        .collect();
                    s.budget_used <= budget && s.budget_used as usize == m.money(&active)
                },
            ),
            Property::always(
                "the discounts of the 201s held never pass the budget, unless Redis lost data",
                |m: &Protocol, s: &State| match m.budget {
                    Some(budget) if !lost_grant(s) => {
                        m.money(&m.told_and_held(s)) <= budget as usize
                    }
                    _ => true,
                },
            ),
            Property::always(
                "the budget refuses only money really held, unless Redis lost data",
                |_: &Protocol, s: &State| !s.starved || s.redis_losses > 0,
            ),
            Property::always(
                "the gate never offers more money than the budget, unless Redis lost data",
                |m: &Protocol, s: &State| match m.budget {
                    // A suspect gate grants nothing until it is repaired.
                    Some(budget) if s.redis_losses == 0 && s.loaded && !s.suspect => {
                        s.budget_left as isize + m.money(&m.held_anywhere(s)) as isize
                            <= budget as isize
                    }
                    _ => true,
                },
            ),
            Property::always(
                "the gate never offers more than the limit in force, unless Redis lost data",
                |m: &Protocol, s: &State| {
                    // Uses left in the gate, plus every order holding one in the gate or in
                    // Postgres (once if in both); a suspect gate grants nothing until it is
                    // repaired.
                    let held = m.held_anywhere(s).len();
                    s.redis_losses > 0
                        || !s.loaded
                        || s.suspect
                        || s.remaining as isize + held as isize <= s.limit as isize
                },
            ),
            Property::always(
                "the gate never offers a campaign's code more than its limit, unless Redis lost data",
                |m: &Protocol, s: &State| {
                    // Each code's uses held in the gate or in Postgres are within its count
                    // in the `codes` hash.
                    let held = m.held_anywhere(s);
                    s.redis_losses > 0
                        || !s.loaded
                        || s.suspect
                        || (0..m.code_count()).all(|code| {
                            held.iter().filter(|&&o| m.code(o) == Some(code)).count()
                                <= s.code_uses[code] as usize
                        })
                },
            ),
            Property::always(
                "no revocation unless Redis lost data",
                |_: &Protocol, s: &State| s.revoked == 0 || s.redis_losses > 0,
            ),
            Property::always("every revocation is counted", |_: &Protocol, s: &State| {
                s.revoked as usize
                    == s.rows
                        .iter()
                        .filter(|r| matches!(r, Row::Released(_, true)))
                        .count()
            }),
            Property::always(
                "a retry gets the first answer",
                |m: &Protocol, s: &State| {
                    s.answers.iter().enumerate().all(|(i, answers)| {
                        let Some(first) = answers.iter().find_map(|a| match *a {
                            Answer::Reserved(stamp) => Some(stamp),
                            _ => None,
                        }) else {
                            return true;
                        };
                        let order = m.clients[i].0 as usize;
                        // Refusals before the first 201 are not sticky (a use may come back).
                        let from = answers
                            .iter()
                            .position(|a| matches!(a, Answer::Reserved(_)))
                            .unwrap_or(0);
                        // A failover took the order's entry, as a loss does: its retry is a new
                        // request to the gate (ALREADY_USED, or a new grant if its event was
                        // lost too).
                        let lost = s.redis_losses > 0 || s.failovers > 0;
                        answers[from..].iter().all(|a| match *a {
                            Answer::Reserved(stamp) => stamp == first || lost,
                            Answer::Refused(Refusal::ReservationReleased) => {
                                matches!(s.rows[order], Row::Released(..)) || s.released[i] || lost
                            }
                            Answer::Refused(Refusal::Unavailable) => true,
                            Answer::Refused(_) => lost,
                        })
                    })
                },
            ),
            Property::always(
                "every held use comes back once the work is done",
                |m: &Protocol, s: &State| {
                    // A campaign's code counts are repaired by nothing but a load or a
                    // failover's repair. After Redis lost data, or a failover lost an entry,
                    // they may stay held: the release of an order whose entry is gone finds
                    // nothing to give back (a use held back, never one granted twice).
                    let codes = s.redis_losses > 0
                        || s.failovers > 0
                        || (0..m.code_count())
                            .all(|code| s.code_uses[code] == m.code_held(s, code));
                    !m.quiescent(s)
                        || !s.loaded
                        || (s.remaining == s.limit as i8 - s.used as i8
                            && s.budget_left == m.expected_budget(s)
                            && codes)
                },
            ),
            Property::always(
                "a client told 201 never reads its order as not found, unless its event and the gate's entry were both lost",
                |_: &Protocol, s: &State| {
                    !s.missed || (s.losses > 0 && (s.redis_losses > 0 || s.failovers > 0))
                },
            ),
            Property::always(
                "a client told its order is confirmed keeps its use",
                |m: &Protocol, s: &State| {
                    s.told_confirmed.iter().enumerate().all(|(i, &told)| {
                        let (order, customer) = m.clients[i];
                        !told
                            || s.released[i]
                            || matches!(s.rows[order as usize], Row::Confirmed(c, _) if c == customer)
                    })
                },
            ),
            // With a budget the money, not the stock, refuses the last use (limit 2, budget 3,
            // discounts 2): "the budget refuses a reserve" below is that run's reachability check.
            Property::sometimes("the limit is reached", |m: &Protocol, s: &State| {
                s.used == m.limit
                    || m.budget.is_some()
                    || (0..m.code_count()).any(|code| m.code_held(s, code) == m.per_code)
            }),
            Property::sometimes(
                "the budget refuses a reserve",
                |m: &Protocol, s: &State| m.budget.is_none() || s.budget_refused,
            ),
        ]
    }
}

/// A 201 may be forgotten everywhere: Redis lost its data, or a failover lost a grant whose
/// event was lost too (the client's 201 then holds nothing, and its use is granted again).
fn lost_grant(s: &State) -> bool {
    s.redis_losses > 0 || (s.failovers > 0 && s.losses > 0)
}

fn req_client(r: &Req) -> Option<u8> {
    match *r {
        Req::Reserve { client }
        | Req::Merge { client, .. }
        | Req::Settle { client, .. }
        | Req::Send { client, .. }
        | Req::Answer { client, .. }
        | Req::Confirm { client }
        | Req::Release { client }
        | Req::Read { client }
        | Req::ReadGate { client } => Some(client),
        Req::ReleaseGate { .. }
        | Req::SweepGate { .. }
        | Req::Orphan { .. }
        | Req::Load { .. }
        | Req::Patch { .. } => None,
    }
}

impl Protocol {
    /// One step of a request, as the code takes it.
    fn step(&self, s: &mut State, req: Req) {
        match req {
            Req::Reserve { client } => {
                if !s.loaded && self.split_loader() {
                    // The request's own warm-up is the loader of `Action::Warm`: it answers
                    // 503 meanwhile, as when another caller holds the lock.
                    self.answer(s, client, Answer::Refused(Refusal::Unavailable));
                    return;
                }
                if !s.loaded {
                    // NOT_LOADED: warm-up runs in the request (`Action::Warm` does the same on
                    // its own); mode B refuses while events are in flight, for a voucher the
                    // gate held before.
                    if self.must_wait_to_load(s) {
                        self.answer(s, client, Answer::Refused(Refusal::Unavailable));
                        return;
                    }
                    self.load(s);
                }
                match self.gate_reserve(s, client) {
                    GateAnswer::Refused(r) => self.answer(s, client, Answer::Refused(r)),
                    GateAnswer::Held(stamp, fresh) => s.reqs.push(match self.mode {
                        Mode::A => Req::Merge {
                            client,
                            stamp,
                            fresh,
                        },
                        Mode::B => Req::Send { client, stamp },
                    }),
                }
            }
            Req::Merge {
                client,
                stamp,
                fresh,
            } => {
                let (order, customer) = self.clients[client as usize];
                let merged = self.merge_held(s, order, customer, stamp, false);
                if merged == Merged::Applied && s.loaded {
                    // Settled off the answer's path: not pending any more.
                    s.pending[order as usize] = false;
                }
                s.reqs.push(Req::Settle {
                    client,
                    stamp,
                    fresh,
                    merged,
                });
            }
            Req::Settle {
                client,
                stamp,
                fresh,
                merged,
            } => {
                let (order, customer) = self.clients[client as usize];
                let answer = match merged {
                    Merged::Applied => Answer::Reserved(stamp),
                    Merged::Unchanged(row) if row.active() => {
                        Answer::Reserved(row.stamp().unwrap_or(stamp))
                    }
                    Merged::Unchanged(_) => Answer::Refused(Refusal::ReservationReleased),
                    Merged::OrderConflict => Answer::Refused(Refusal::OrderConflict),
                    Merged::AlreadyUsed => Answer::Refused(Refusal::AlreadyUsed),
                    Merged::OutOfStock | Merged::Revoked => Answer::Refused(Refusal::OutOfStock),
                    Merged::BudgetExhausted => Answer::Refused(Refusal::BudgetExhausted),
                };
                if fresh {
                    // `reconcile_fresh`: make the gate agree with what Postgres decided.
                    let how = match merged {
                        Merged::Applied => None,
                        Merged::Unchanged(row) if row.active() && row.stamp() == Some(stamp) => {
                            None
                        }
                        Merged::Unchanged(row) if row.active() => Some(Removal::Uncount),
                        Merged::Unchanged(_) => Some(Removal::Release),
                        Merged::OrderConflict | Merged::AlreadyUsed => Some(Removal::Forget(true)),
                        Merged::OutOfStock | Merged::BudgetExhausted | Merged::Revoked => {
                            Some(Removal::Forget(false))
                        }
                    };
                    match how {
                        Some(how) => self.gate_remove(s, order, Some(customer), how),
                        None if s.loaded => s.pending[order as usize] = false,
                        None => {}
                    }
                }
                self.answer(s, client, answer);
            }
            Req::Send { client, stamp } => {
                let (order, customer) = self.clients[client as usize];
                s.queue.push((order, customer, stamp));
                s.reqs.push(Req::Answer { client, stamp });
            }
            Req::Answer { client, stamp } => self.answer(s, client, Answer::Reserved(stamp)),
            Req::Confirm { client } => {
                let (order, customer) = self.clients[client as usize];
                let o = order as usize;
                match s.rows[o] {
                    Row::Reserved(c, stamp) if c == customer => {
                        s.rows[o] = Row::Confirmed(c, stamp);
                        s.told_confirmed[client as usize] = true;
                    }
                    Row::Confirmed(c, _) if c == customer => {
                        s.told_confirmed[client as usize] = true;
                    }
                    // Mode B, the event not landed: the row is written CONFIRMED from the
                    // gate's entry (`Merge::held`), taking the use as a reserve would, even
                    // past the entry's expiry (the orphan sweep may be about to recover it).
                    Row::None if self.mode == Mode::B => {
                        if let Entry::Active(c, stamp) = s.entries[o] {
                            let held = s.rows.iter().any(|r| r.active() && r.customer() == Some(c));
                            let fits = self.fits(order, self.expected_budget(s));
                            if !held && s.used < s.limit && fits && self.code_room(s, order) {
                                s.rows[o] = Row::Confirmed(c, stamp);
                                self.take_use(s, order);
                                s.pending[o] = false;
                                if c == customer {
                                    s.told_confirmed[client as usize] = true;
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
            Req::Release { client } => {
                // `Store::release`, or in mode B from the gate's entry when the row has not
                // landed; then the gate.
                let (order, customer) = self.clients[client as usize];
                let o = order as usize;
                match s.rows[o] {
                    Row::Reserved(c, _) | Row::Confirmed(c, _) if c == customer => {
                        s.rows[o] = Row::Released(c, false);
                        self.give_use(s, order);
                        s.reqs.push(Req::ReleaseGate { order, customer });
                    }
                    Row::None if self.mode == Mode::B => {
                        if let Entry::Active(c, _) = s.entries[o] {
                            // Written RELEASED from the gate; the late event merges into nothing.
                            s.rows[o] = Row::Released(c, false);
                            s.reqs.push(Req::ReleaseGate { order, customer: c });
                        }
                    }
                    _ => {}
                }
            }
            Req::Orphan { order } => self.recover(s, order),
            Req::Load { token, snapshot } => {
                // `load.lua`: nothing over a loaded gate, and (fixed) nothing unless the lock
                // is still this loader's; then `unlock.lua`, which checks the token too.
                let fenced = s.lock != Some(token) && !self.broken(Mutation::StaleLoaderWrites);
                if !s.loaded && !fenced {
                    self.write_load(s, snapshot);
                }
                if s.lock == Some(token) {
                    s.lock = None;
                }
            }
            Req::Patch { token } => {
                // `fg_patch_voucher`, refused below the uses held; on a refusal the first
                // gate step is undone (`patch.lua`, only while the lock is the change's, and
                // only on a loaded gate). Lowering the limit adds nothing in the last gate
                // step: only the unlock is left.
                let holds = s.lock == Some(token);
                if s.used < s.limit {
                    s.limit -= 1;
                } else if holds && s.loaded {
                    s.remaining += 1;
                }
                if holds {
                    s.lock = None;
                }
            }
            Req::ReleaseGate { order, customer } => {
                self.gate_remove(s, order, Some(customer), Removal::Release)
            }
            Req::SweepGate { order, customer } => {
                self.gate_remove(s, order, customer, Removal::Release)
            }
            Req::Read { client } => {
                let order = self.clients[client as usize].0 as usize;
                if s.rows[order] == Row::None && self.mode == Mode::B {
                    s.reqs.push(Req::ReadGate { client });
                }
            }
            Req::ReadGate { client } => {
                // `Reservations::reservation`: the gate's entry (`lookup.lua`, with its trust),
                // then for an unknown order `Flash::never_granted`, then Postgres once more.
                let order = self.clients[client as usize].0 as usize;
                let entry = if s.loaded {
                    s.entries[order]
                } else {
                    Entry::None
                };
                if entry != Entry::None {
                    return;
                }
                let trusted = (s.loaded && !s.suspect) || (!s.loaded && !s.marked);
                if !trusted && !self.broken(Mutation::TrustGateAfterLoss) {
                    // A send begun before the loss ends within the send timeout, which a
                    // suspect gate waits out before it trusts again: modelled as no send left.
                    if !s.queue.is_empty() || (s.suspect && self.sending(s)) {
                        // 503: may still be on its way.
                        return;
                    }
                    // Every lost grant has landed: the gate is repaired and trusted again.
                    if s.suspect {
                        if self.broken(Mutation::TrustWithoutRepair) {
                            s.suspect = false;
                        } else if self.may_repair(s) {
                            self.repair(s);
                        } else {
                            return;
                        }
                    }
                }
                let told = s.answers[client as usize]
                    .iter()
                    .any(|a| matches!(a, Answer::Reserved(_)));
                if s.rows[order] == Row::None && told {
                    s.missed = true;
                }
            }
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mode {:?}, limit {}{}, clients {:?}, {} sends each{}{}, {} crash(es), {} Redis loss(es), {} failover(s), {} duplicate(s), {} lost event(s)",
            self.mode,
            self.limit,
            self.budget
                .map(|b| format!(", budget {b} (discounts {:?})", self.discounts))
                .unwrap_or_default(),
            self.clients,
            self.sends,
            if self.confirms { ", confirms" } else { "" },
            if self.reads { ", reads" } else { "" },
            self.crashes,
            self.redis_losses,
            self.failovers,
            self.duplicates,
            self.losses,
        )?;
        if !self.codes.is_empty() {
            write!(
                f,
                ", a campaign: codes {:?}, {} use(s) per code",
                self.codes, self.per_code
            )?;
        }
        if !self.split_orphans {
            write!(f, ", orphans in one step")?;
        }
        if self.patches > 0 || self.lock_expiries > 0 {
            write!(
                f,
                ", {} change(s), {} lock expiry(ies)",
                self.patches, self.lock_expiries
            )?;
        }
        if self.sweepers > 1 || self.instances > 1 {
            write!(
                f,
                ", {} sweeper(s), {} instance(s)",
                self.sweepers, self.instances
            )?;
        }
        if let Some(m) = self.mutation {
            write!(f, ", mutation {m:?}")?;
        }
        Ok(())
    }
}
