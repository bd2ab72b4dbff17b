//! A model of orders of several codes, all or none (`POST /orders/{orderId}/reservations`), checked
//! exhaustively as the single-code protocol is in the crate's root: every interleaving of the
//! steps below, with every fault, up to the bounds of a [`Protocol`].
//!
//! An order's request writes the order's row PENDING, with itself as the order's decider,
//! reserves its codes one after another, each with the order's orderId, then settles the row:
//! RESERVED when every code gave its use; on a refusal it first gives back what it was given,
//! then settles the row REFUSED and answers the refusal. A request may crash between any two
//! steps, or a step may fail (503): the order stays PENDING with what it holds. A decider whose
//! code's reserve fails lets go of the order, and a retry takes it up and goes on with it; a
//! retry of an order another request decides, or one a crash left held, is answered 503. The
//! sweeper gives back an order still PENDING once it is older than the lease. The properties
//! ([`Protocol::properties`]) are the promise "all or none": a refusal holds nothing, a
//! reserved order holds every code, and once the work is done every order holds all its codes
//! (RESERVED) or none.
//!
//! What the model keeps:
//!
//! - **postgres**: each order's row (`customer_order`: none, PENDING, RESERVED, REFUSED,
//!   RELEASED) and its decider (`decider`: the token of the request deciding it, or none),
//!   each of its codes' reservation rows (`redemption`, the code and the orderId: none,
//!   RESERVED, RESERVED and due, RELEASED), and each code's uses taken (the counter a
//!   single reserve checks against the code's limit);
//! - **processes**: the requests under way ([`Req`]), in no order: a client's reserve and the
//!   step it is at (with the codes it was given: a replay counts as given, as in `decide`), or a
//!   client's DELETE. A reserve request's token is its send's number (each request draws its
//!   own). One crash takes them all (one process);
//! - **clients**: one per order (its own orderId and customer), the requests it may still send
//!   (the first and its retries), and whether it was told 201 or a refusal.
//!
//! # The code each step stands for
//!
//! | step | code |
//! |---|---|
//! | `Send`, `Step::Begin` | `Reservations::reserve_order` (`shared/src/reservations/orders.rs`): `Store::begin_order` (`shared/src/store/orders.rs`), the INSERT of the PENDING row with the request's token as decider, or the order already there: a PENDING one is taken up (`Store::take_up_order`, `WHERE state = 1 AND decider IS NULL`) and goes on (`decide`), or when another holds it is answered 503 (`OrderError::Pending`); a settled one answers from its state (`answer_of`) |
//! | `Step::Reserve` | `Reservations::decide`: one code's `Reservations::reserve` with the order's orderId. A use left: the row RESERVED and the use taken; none: OUT_OF_STOCK; the row RESERVED already: a replay; RELEASED: RESERVATION_RELEASED |
//! | `Fail` of a `Step::Reserve`, `Step::LetGo` | `Reservations::refused`, a failure (no outcome): `Store::let_go_of_order` (decider NULL `WHERE state = 1 AND decider = $2`), then the 503; a let-go that fails (or a crash before it, or a failure that does not let go: `percent_discounts`, a settle) leaves the order held by a dead token until the sweeper's |
//! | `Step::Settle` | `decide`: `Store::settle_order_reserved` (`WHERE state = 1 AND decider = $3`, which clears the decider) and the 201; false: `Store::order`, and when RELEASED `Reservations::release_codes` of what the request was given, then `answer_of` |
//! | `Step::GiveBack` | `Reservations::release_codes`: one `Reservations::release` per code (`Store::release`, then the gate's `release.lua`); a code not held is skipped |
//! | `Step::GiveBack`, nothing left, after a refusal | `Reservations::refused`: `Store::settle_order_refused` (`WHERE state = 1 AND decider = $3`) and the refusal; false: `Store::order` and `answer_of` |
//! | `Delete`, `Step::Delete`, `Step::DeleteCodes` | `Reservations::release_order`: `Store::release_order` (PENDING, RESERVED to RELEASED, the decider cleared), then `release_codes` of every code |
//! | `Sweep` | `Sweeper::orders` (`shared/src/sweeper/mod.rs`): `Store::sweep_orders`, which releases (ABANDONED) PENDING orders older than the lease and (EXPIRED) RESERVED ones past their expiry, clearing the decider, and makes their codes' rows still RESERVED due, in one statement |
//! | `Expire` | `Sweeper::expire`: `Store::expire_batch` (`fg_expire`), each due row RELEASED and its use given back, then the gate's `release.lua` |
//! | `Fail`, `Crash` | a step that fails (503: the request stops before the step; one that took effect and then failed is the step, then a failure of the next), a process that dies (its requests vanish; the clients see a timeout) |
//!
//! # What is one step here and two in the code, and why
//!
//! - Each code's reserve is one step here. In the code a flash code's is the gate's Lua
//!   script, then the Postgres write (mode A) or the event (mode B), and a standard code's goes
//!   through group commit: the crate's main model checks that one code's reserve, release and
//!   expiry keep its counter and its rows together through crashes, losses and failovers
//!   between those steps. Here the row and the use move together: a code's reserve, release or
//!   expiry is what that model proves it to be, seen from Postgres.
//! - `begin_order`'s INSERT and its read of the order already there are two statements, and
//!   `take_up_order` a third; the settles' conditional UPDATE and the read after a false are
//!   two more. One step each here: an order's row only moves up, and from PENDING once, so
//!   what may come between (the decider's settle or let-go, the sweeper, a DELETE) could as
//!   well come after the read; a take-up that then finds the order settled, or held again,
//!   answers 503, which promises nothing; the request answers what it reads.
//! - The sweeper's statement is one transaction in the code too. It takes every order due at
//!   once; here one step takes one order: each order is locked (`FOR UPDATE SKIP LOCKED`) and
//!   its rows are its own, so a statement over several orders is the same as one over each in
//!   turn with nothing between. `fg_expire` releases a batch of rows in one transaction; here
//!   one row a step (finer).
//! - There is no clock. The lease is "no request of the order is live" (answered, failed or
//!   crashed): `ORDER_LEASE_SECONDS` (60) is longer than any request may take; and
//!   [`Protocol::stalls`] times the sweeper takes an order whose request still runs (a request
//!   that outlived the lease, or a retry that went on with an order begun a lease ago), to show
//!   the conditional settles protect it. A RESERVED order may expire at any moment
//!   ([`Protocol::expiries`]). A code's row expires by its own TTL (`fg_expire` releases it
//!   without the sweep's mark) only once its order is RELEASED or REFUSED and no request of it
//!   runs: the TTL is longer than the lease, and an order's expiry is the first of its codes'
//!   (a replay is answered the reservation it replays, with its expiry: the main model's "a
//!   retry gets the first answer"), so a PENDING or RESERVED order is taken by the sweep's
//!   statement, which runs before `fg_expire` in the same run, first.
//!
//! Not modelled: the checks before the row is written (an unknown or exclusive code), amounts
//! and stacking (which only decide each code's discount and the order in which the codes are
//! tried: [`Protocol::orders`] gives that order), confirm, the retirement of settled orders,
//! another order reusing the orderId (`begin_order` answers ORDER_CONFLICT), and the faults
//! inside one code's reserve that the main model checks (Redis losses, failovers, events).
//!
//! # Twin requests: one decider per pending order
//!
//! A client whose request timed out may retry while the first still runs
//! ([`Protocol::twins`]). When a retry went on with an order "being decided now", the two
//! requests shared each code's row (the second's reserve a replay of the first's grant) and
//! each gave back what it was given: this model found, with no fault at all, a 201 for an
//! order that had given a code back, and a refused order still holding a code. The code now
//! lets one request decide a pending order at a time, the one whose token is its `decider`: a
//! retry takes the order up only when nobody holds it (its decider failed and let go), and is
//! answered 503 otherwise; only the decider settles it. The checks include twins, and
//! [`Mutation::NoDecider`] (the code before) is caught.
//!
//! A [`Mutation`] breaks the protocol on purpose, so that a test shows the checker catches it.

use std::fmt;

use stateright::{Model, Property};

/// A deliberate bug, to show the checker finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// `refused` answers the refusal first, then gives back the codes held before the one that
    /// refused: the client is told "refused" while the order still holds a code.
    AnswerRefusalBeforeGivingBack,
    /// `sweep_orders` never takes a PENDING order (only expired RESERVED ones): a crash between
    /// two codes leaves the first held for good.
    SweeperSkipsPending,
    /// `settle_order_reserved` without `AND state = 1 AND decider = $3`: the order becomes
    /// RESERVED even after the sweeper released it and made its codes due, and the 201 holds
    /// codes given back.
    UnconditionalSettle,
    /// No decider (the code before the fix): a retry of a PENDING order goes on with it beside
    /// the request deciding it, and either settles it (`WHERE state = 1` only).
    NoDecider,
}

/// The bounds of one check.
#[derive(Clone, Debug)]
pub struct Protocol {
    /// Each code's limit of uses.
    pub limits: Vec<u8>,
    /// Each order's codes (indexes in `limits`), in the order `decide` reserves them. One
    /// client per order, each its own orderId and customer.
    pub orders: Vec<Vec<u8>>,
    /// Reserve requests each client may send (the first and its retries).
    pub sends: u8,
    /// Processes that die (each takes every request under way).
    pub crashes: u8,
    /// Steps that fail (503).
    pub failures: u8,
    /// Times the sweeper takes a PENDING order whose request is still live.
    pub stalls: u8,
    /// RESERVED orders may expire (the sweep releases them and makes their codes due).
    pub expiries: bool,
    /// Each client may DELETE its order once, even while its reserve request still runs.
    pub deletes: bool,
    /// A client whose request timed out may send its retry while the first still runs: the
    /// retry finds the order PENDING, held by the first (one decider at a time).
    pub twins: bool,
    pub mutation: Option<Mutation>,
}

/// An order's row (`customer_order.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Order {
    None,
    Pending,
    Reserved,
    Refused,
    Released,
}

/// A code's reservation row for an order (`redemption`, the code and the orderId).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Use {
    None,
    Reserved,
    /// RESERVED, made due by the sweep's statement (`expires_at` before the sweep's `now`).
    Due,
    Released,
}

impl Use {
    /// The row holds a use of its code.
    pub fn held(self) -> bool {
        matches!(self, Use::Reserved | Use::Due)
    }
}

/// What a request does once it has given back what it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Then {
    /// After a refusal: settle the order REFUSED, and answer the refusal (or, when the order
    /// was no longer pending, what it is).
    SettleRefused,
    /// After a refusal already answered (the mutation): settle the order REFUSED.
    SettleQuietly,
    /// The order was released meanwhile: the request answers that (not recorded: it promises
    /// nothing the rows could break).
    Stop,
}

/// The step a request is at. `held` and `left` are sets of the order's positions (bit `i`:
/// the order's `i`-th code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    Begin,
    /// The order's `next`-th code is reserved next; `held` were given to this request.
    Reserve {
        next: u8,
        held: u8,
    },
    /// Every code was given: the settle is next.
    Settle {
        held: u8,
    },
    /// One release of `held` a step, then `then`.
    GiveBack {
        held: u8,
        then: Then,
    },
    /// A code's reserve failed (503): the decider lets go of the order, then answers 503.
    LetGo,
    /// A DELETE: the order's row first.
    Delete,
    /// A DELETE: one release of `left` a step.
    DeleteCodes {
        left: u8,
    },
}

/// A request of an order under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Req {
    pub order: u8,
    /// A reserve request's token (its `decider` value): its send's number. A DELETE's is 0 and
    /// means nothing.
    pub token: u8,
    pub step: Step,
}

impl Req {
    /// A reserve request (not a DELETE).
    fn deciding(&self) -> bool {
        !matches!(self.step, Step::Delete | Step::DeleteCodes { .. })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub orders: Vec<Order>,
    /// Each order's decider: the token of the request that holds it (live or dead), or none.
    pub deciders: Vec<Option<u8>>,
    /// Each order's codes' rows, in the order of [`Protocol::orders`].
    pub uses: Vec<Vec<Use>>,
    /// Each code's uses taken (its counter).
    pub taken: Vec<u8>,
    /// The requests under way, in no order (kept sorted).
    pub reqs: Vec<Req>,
    pub sends_left: Vec<u8>,
    pub deleted: Vec<bool>,
    /// The client was told 201.
    pub told_reserved: Vec<bool>,
    /// The client was told a code refused its order (REFUSED).
    pub told_refused: Vec<bool>,
    /// The sweeper released a PENDING order (ABANDONED).
    pub abandoned: bool,
    /// A retry took up an order whose decider had let go of it.
    pub taken_up: bool,
    pub crashes: u8,
    pub failures: u8,
    pub stalls: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A client sends its order (the first time or again).
    Send(u8),
    /// A client DELETEs its order.
    Delete(u8),
    /// The next step of a request under way.
    Step(Req),
    /// The next step of a request fails: 503, the request stops (a code's reserve lets go of
    /// the order first).
    Fail(Req),
    /// The sweep's statement takes the order.
    Sweep(u8),
    /// `fg_expire` releases the order's `i`-th code's row.
    Expire(u8, u8),
    Crash,
}

impl Protocol {
    fn broken(&self, m: Mutation) -> bool {
        self.mutation == Some(m)
    }

    /// The codes an order asks for.
    fn size(&self, order: u8) -> usize {
        self.orders[order as usize].len()
    }

    /// Every position of an order, as a set.
    fn all(&self, order: u8) -> u8 {
        ((1u16 << self.size(order)) - 1) as u8
    }

    /// The order's codes held.
    fn held(&self, s: &State, order: u8) -> usize {
        s.uses[order as usize].iter().filter(|u| u.held()).count()
    }

    /// A request of the order is under way; `deciding`: a reserve request only.
    fn busy(&self, s: &State, order: u8, deciding: bool) -> bool {
        s.reqs
            .iter()
            .any(|r| r.order == order && (!deciding || r.deciding()))
    }

    /// `Reservations::release` of the order's `i`-th code: the row RESERVED to RELEASED and its
    /// use given back; a row not held is skipped.
    fn release(&self, s: &mut State, order: u8, i: u8) {
        let (o, i) = (order as usize, i as usize);
        if s.uses[o][i].held() {
            s.uses[o][i] = Use::Released;
            s.taken[self.orders[o][i] as usize] -= 1;
        }
    }

    /// The request with this token may settle the order: it is PENDING and the request is its
    /// decider (`WHERE state = 1 AND decider = $3`), or, mutated, merely PENDING.
    fn decides(&self, s: &State, order: u8, token: u8) -> bool {
        let o = order as usize;
        s.orders[o] == Order::Pending
            && (s.deciders[o] == Some(token) || self.broken(Mutation::NoDecider))
    }

    /// `answer_of`: what a request answers from the stored order.
    fn answer_stored(&self, s: &mut State, order: u8) {
        let o = order as usize;
        match s.orders[o] {
            Order::Reserved => s.told_reserved[o] = true,
            Order::Refused => s.told_refused[o] = true,
            // RELEASED (410) and PENDING (409) promise nothing the rows could break.
            Order::Released | Order::Pending | Order::None => {}
        }
    }

    /// One step of a request, as the code takes it.
    fn step(&self, s: &mut State, req: Req) {
        let (order, token) = (req.order, req.token);
        let o = order as usize;
        let push = |s: &mut State, step| s.reqs.push(Req { order, token, step });
        match req.step {
            Step::Begin => match s.orders[o] {
                Order::None => {
                    s.orders[o] = Order::Pending;
                    s.deciders[o] = Some(token);
                    push(s, Step::Reserve { next: 0, held: 0 });
                }
                // A retry of an order whose decider let go takes it up (`take_up_order`).
                Order::Pending if s.deciders[o].is_none() => {
                    s.deciders[o] = Some(token);
                    s.taken_up = true;
                    push(s, Step::Reserve { next: 0, held: 0 });
                }
                // Mutated: a retry of an order being decided now goes on with it.
                Order::Pending if self.broken(Mutation::NoDecider) => {
                    push(s, Step::Reserve { next: 0, held: 0 })
                }
                // Held by a request deciding it now, or by one that crashed: 503, nothing done.
                Order::Pending => {}
                _ => self.answer_stored(s, order),
            },
            Step::Reserve { next, held } => {
                let i = next as usize;
                let code = self.orders[o][i] as usize;
                let granted = match s.uses[o][i] {
                    // A replay: granted again, no new use.
                    Use::Reserved | Use::Due => true,
                    // RESERVATION_RELEASED.
                    Use::Released => false,
                    Use::None if s.taken[code] < self.limits[code] => {
                        s.uses[o][i] = Use::Reserved;
                        s.taken[code] += 1;
                        true
                    }
                    // OUT_OF_STOCK.
                    Use::None => false,
                };
                if !granted {
                    let then = if self.broken(Mutation::AnswerRefusalBeforeGivingBack) {
                        s.told_refused[o] = true;
                        Then::SettleQuietly
                    } else {
                        Then::SettleRefused
                    };
                    push(s, Step::GiveBack { held, then });
                    return;
                }
                let held = held | 1 << next;
                if i + 1 == self.size(order) {
                    push(s, Step::Settle { held });
                } else {
                    push(
                        s,
                        Step::Reserve {
                            next: next + 1,
                            held,
                        },
                    );
                }
            }
            Step::Settle { held } => {
                if self.decides(s, order, token) || self.broken(Mutation::UnconditionalSettle) {
                    s.orders[o] = Order::Reserved;
                    s.deciders[o] = None;
                    s.told_reserved[o] = true;
                } else if s.orders[o] == Order::Released {
                    // Released by the sweeper or a DELETE, which may have looked before this
                    // request took its uses: it gives them back.
                    push(
                        s,
                        Step::GiveBack {
                            held,
                            then: Then::Stop,
                        },
                    );
                } else {
                    // Settled by a twin request (mutated: no decider): its answer.
                    self.answer_stored(s, order);
                }
            }
            Step::GiveBack { held, then: next } if held != 0 => {
                let i = held.trailing_zeros() as u8;
                self.release(s, order, i);
                let held = held & !(1 << i);
                // The answer after the last release of a released order writes nothing.
                if held != 0 || next != Then::Stop {
                    push(s, Step::GiveBack { held, then: next });
                }
            }
            Step::GiveBack { then: next, .. } => {
                if self.decides(s, order, token) {
                    s.orders[o] = Order::Refused;
                    s.deciders[o] = None;
                    if next == Then::SettleRefused {
                        s.told_refused[o] = true;
                    }
                } else if next == Then::SettleRefused {
                    self.answer_stored(s, order);
                }
            }
            Step::LetGo => {
                if s.orders[o] == Order::Pending && s.deciders[o] == Some(token) {
                    s.deciders[o] = None;
                }
            }
            Step::Delete => {
                if matches!(s.orders[o], Order::Pending | Order::Reserved) {
                    s.orders[o] = Order::Released;
                    s.deciders[o] = None;
                }
                // A REFUSED order holds nothing; a released one (now, or before: a DELETE's
                // retry finishes what a failed one began) gives back every code.
                if s.orders[o] == Order::Released {
                    push(
                        s,
                        Step::DeleteCodes {
                            left: self.all(order),
                        },
                    );
                }
            }
            Step::DeleteCodes { left } => {
                let i = left.trailing_zeros() as u8;
                self.release(s, order, i);
                let left = left & !(1 << i);
                if left != 0 {
                    push(s, Step::DeleteCodes { left });
                }
            }
        }
    }

    /// Nothing left to do: no request under way, and no step of the sweeper (its statement
    /// over a PENDING order, an expiry of a row) that would change a thing. The expiry of a
    /// RESERVED order is time passing, not work left.
    fn at_rest(&self, s: &State) -> bool {
        if !s.reqs.is_empty() {
            return false;
        }
        let orders = 0..self.orders.len() as u8;
        let sweeps = orders
            .clone()
            .filter(|&o| s.orders[o as usize] == Order::Pending)
            .map(Action::Sweep);
        let expiries =
            orders.flat_map(|o| (0..self.size(o) as u8).map(move |i| Action::Expire(o, i)));
        sweeps
            .chain(expiries)
            .all(|a| self.next_state(s, a).is_none())
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.orders.len();
        assert!(
            self.orders.iter().all(|o| !o.is_empty() && o.len() <= 8),
            "an order asks for 1 to 8 codes"
        );
        vec![State {
            orders: vec![Order::None; n],
            deciders: vec![None; n],
            uses: self
                .orders
                .iter()
                .map(|o| vec![Use::None; o.len()])
                .collect(),
            taken: vec![0; self.limits.len()],
            reqs: Vec::new(),
            sends_left: vec![self.sends; n],
            deleted: vec![false; n],
            told_reserved: vec![false; n],
            told_refused: vec![false; n],
            abandoned: false,
            taken_up: false,
            crashes: 0,
            failures: 0,
            stalls: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for c in 0..self.orders.len() as u8 {
            let busy = self.busy(s, c, false);
            if s.sends_left[c as usize] > 0 && (!busy || self.twins) {
                actions.push(Action::Send(c));
            }
            // A client that timed out may DELETE its order rather than retry: the DELETE does
            // not wait for the request.
            let begun = s.orders[c as usize] != Order::None;
            if self.deletes && begun && !s.deleted[c as usize] {
                actions.push(Action::Delete(c));
            }
        }
        for &req in &s.reqs {
            actions.push(Action::Step(req));
            if s.failures < self.failures {
                actions.push(Action::Fail(req));
            }
        }
        for o in 0..self.orders.len() as u8 {
            actions.push(Action::Sweep(o));
            for i in 0..self.size(o) as u8 {
                actions.push(Action::Expire(o, i));
            }
        }
        if s.crashes < self.crashes && !s.reqs.is_empty() {
            actions.push(Action::Crash);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Send(c) => {
                let token = self.sends - s.sends_left[c as usize];
                s.sends_left[c as usize] -= 1;
                s.reqs.push(Req {
                    order: c,
                    token,
                    step: Step::Begin,
                });
            }
            Action::Delete(c) => {
                s.deleted[c as usize] = true;
                s.reqs.push(Req {
                    order: c,
                    token: 0,
                    step: Step::Delete,
                });
            }
            Action::Step(req) => {
                let i = s.reqs.iter().position(|r| *r == req)?;
                s.reqs.remove(i);
                self.step(&mut s, req);
            }
            Action::Fail(req) => {
                let i = s.reqs.iter().position(|r| *r == req)?;
                s.failures += 1;
                s.reqs.remove(i);
                // `refused`: a code's reserve failed, so its decider lets go of the order.
                if let Step::Reserve { .. } = req.step {
                    s.reqs.push(Req {
                        step: Step::LetGo,
                        ..req
                    });
                }
            }
            Action::Sweep(order) => {
                let o = order as usize;
                match s.orders[o] {
                    Order::Pending if self.broken(Mutation::SweeperSkipsPending) => return None,
                    Order::Pending => {
                        // Older than the lease: its request is over, unless it outlived it.
                        if self.busy(&s, order, true) {
                            if s.stalls >= self.stalls {
                                return None;
                            }
                            s.stalls += 1;
                        }
                        s.abandoned = true;
                    }
                    Order::Reserved if self.expiries => {}
                    _ => return None,
                }
                s.orders[o] = Order::Released;
                s.deciders[o] = None;
                for u in &mut s.uses[o] {
                    if *u == Use::Reserved {
                        *u = Use::Due;
                    }
                }
            }
            Action::Expire(order, i) => {
                let o = order as usize;
                // Made due by the sweep, or past its own TTL: only once its order is settled
                // without it (see the module's doc) and no request of the order runs.
                let lapsed = s.uses[o][i as usize] == Use::Reserved
                    && matches!(s.orders[o], Order::Released | Order::Refused)
                    && !self.busy(&s, order, false);
                if s.uses[o][i as usize] != Use::Due && !lapsed {
                    return None;
                }
                self.release(&mut s, order, i);
            }
            Action::Crash => {
                s.crashes += 1;
                s.reqs.clear();
            }
        }
        // Requests run concurrently: which one the vector lists first means nothing.
        s.reqs.sort_unstable();
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "never over a code's limit, and its counter matches its rows",
                |m: &Protocol, s: &State| {
                    (0..m.limits.len()).all(|code| {
                        let rows = m
                            .orders
                            .iter()
                            .zip(&s.uses)
                            .flat_map(|(codes, uses)| codes.iter().zip(uses))
                            .filter(|(&c, u)| c as usize == code && u.held())
                            .count();
                        s.taken[code] <= m.limits[code] && s.taken[code] as usize == rows
                    })
                },
            ),
            Property::always("a refusal holds nothing", |m: &Protocol, s: &State| {
                (0..m.orders.len()).all(|o| !s.told_refused[o] || m.held(s, o as u8) == 0)
            }),
            Property::always(
                "a reserved order holds every code",
                |m: &Protocol, s: &State| {
                    (0..m.orders.len() as u8).all(|o| {
                        s.orders[o as usize] != Order::Reserved || m.held(s, o) == m.size(o)
                    })
                },
            ),
            Property::always("all or none at rest", |m: &Protocol, s: &State| {
                !m.at_rest(s)
                    || (0..m.orders.len() as u8).all(|o| {
                        let held = m.held(s, o);
                        let all = held == m.size(o);
                        (held == 0 || all) && all == (s.orders[o as usize] == Order::Reserved)
                    })
            }),
            Property::sometimes("an order gets every code", |_: &Protocol, s: &State| {
                s.told_reserved.iter().any(|&t| t)
            }),
            Property::sometimes("an order is refused", |_: &Protocol, s: &State| {
                s.told_refused.iter().any(|&t| t)
            }),
            Property::sometimes(
                "the sweeper gives back an abandoned order",
                |_: &Protocol, s: &State| s.abandoned,
            ),
            Property::sometimes(
                "a retry takes up an order its decider let go",
                |_: &Protocol, s: &State| s.taken_up,
            ),
        ]
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "orders: limits {:?}, orders {:?}, {} send(s) each, {} crash(es), {} failure(s), {} stall(s)",
            self.limits, self.orders, self.sends, self.crashes, self.failures, self.stalls,
        )?;
        if self.expiries {
            write!(f, ", expiries")?;
        }
        if self.deletes {
            write!(f, ", deletes")?;
        }
        if self.twins {
            write!(f, ", twins")?;
        }
        if let Some(m) = self.mutation {
            write!(f, ", mutation {m:?}")?;
        }
        Ok(())
    }
}
