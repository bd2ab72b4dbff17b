//! A model of Flashgate's flash-sale reservation protocol, checked exhaustively with
//! [stateright](https://www.stateright.rs): every interleaving of the steps below, with every
//! fault, up to the bounds of a [`Protocol`].
//!
//! Each step is one atomic action of the real system, in the order the code takes them: a Lua
//! script of the gate (`lua/*.lua`), one Postgres statement (`fg_merge` and friends), an SQS
//! send or delivery, one pass of the sweeper. Between any two steps a process may crash (its
//! requests vanish; the client sees a timeout and may retry), Redis may lose its data, and an
//! event may be duplicated or lost. What the model keeps of each layer:
//!
//! - **gate**: loaded or not, `remaining`, the money budget left (meta's `budget`), each
//!   customer's count, each order's entry (active with the reservation's identity, or a
//!   tombstone), the `pending` set, and whether Redis changed hands since the load
//!   (`lua/incarnation.lua`: a failover that lost the last grants);
//! - **postgres**: each order's row (RESERVED / CONFIRMED / RELEASED with its reason), the
//!   uses held (the sum of the slots: slots only spread the same count over rows), the
//!   discounts held (`voucher_budget.used`, a money counter beside the use count), and whether
//!   the gate ever loaded the voucher (`voucher.gate_loaded`);
//! - **queue** (mode B): the events sent and not yet consumed, delivered in any order;
//! - **clients**: each client (an orderId and a customer, two clients may share an orderId) and
//!   every answer it was given.
//!
//! The properties ([`Protocol::properties`]) are the service's promise. A [`Mutation`] breaks
//! the protocol on purpose, so that a test shows the checker catches it.

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
    /// Mode B: events delivered twice, and events lost.
    pub duplicates: u8,
    pub losses: u8,
    /// Clients may confirm their 201s (more states: some runs leave it out).
    pub confirms: bool,
    /// Clients may read their order back (`GET .../reservations/{orderId}`), once each.
    pub reads: bool,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// 201, with the reservation's identity: a replay must carry the same.
    Reserved(u8),
    /// Any refusal (409, 422) or failure (503).
    Refused(Refusal),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    OutOfStock,
    BudgetExhausted,
    AlreadyUsed,
    OrderConflict,
    ReservationReleased,
    Unavailable,
}

/// A request in a process, and the step it is at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
}

/// What `fg_merge` came to for a mode A winner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    pub entries: Vec<Entry>,
    pub pending: Vec<bool>,
    pub rows: Vec<Row>,
    pub used: u8,
    /// Postgres' discounts held (`voucher_budget.used`).
    pub budget_used: u8,
    /// Mode B: (order, customer, stamp), in no order.
    pub queue: Vec<(u8, u8, u8)>,
    pub reqs: Vec<Req>,
    pub sends_left: Vec<u8>,
    pub answers: Vec<Vec<Answer>>,
    /// The client released its order (it asked once).
    pub released: Vec<bool>,
    /// The client confirmed its order (it asked once).
    pub confirmed: Vec<bool>,
    /// The client read its order back (it asked once).
    pub read: Vec<bool>,
    /// A client told 201 read its order back as "not found".
    pub missed: bool,
    /// The gate refused a reserve BUDGET_EXHAUSTED while the money was there.
    pub starved: bool,
    pub stamps: u8,
    pub crashes: u8,
    /// Redis lost data: all of it, or the last grant in a failover.
    pub redis_losses: u8,
    pub failovers: u8,
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
    Orphan(u8),
    /// The sweeper finishes a release whose gate step never came (crash, Redis down).
    Settle(u8),
    Reconcile,
    Crash,
    RedisLoss,
    /// A failover to a replica that missed the last writes: the order's grant is lost from the
    /// gate (its entry and its counts, one script's effects together).
    Failover(u8),
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
        if !self.broken(Mutation::ReleaseKeepsDiscount) {
            s.budget_left += self.discount(order) as i8;
        }
    }

    /// `load.lua` from what Postgres holds (`Store::gate_source`): the uses left, each
    /// customer's active uses; the order entries are not loaded.
    fn load(&self, s: &mut State) {
        s.loaded = true;
        s.marked = true;
        s.suspect = false;
        s.remaining = self.limit as i8 - s.used as i8;
        s.budget_left = self.expected_budget(s);
        s.users = vec![0; self.customers()];
        for row in &s.rows {
            if let (true, Some(c)) = (row.active(), row.customer()) {
                s.users[c as usize] += 1;
            }
        }
        s.entries = vec![Entry::None; self.orders()];
        s.pending = vec![false; self.orders()];
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
        } else if s.used >= self.limit {
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
        if s.users[customer as usize] >= 1 {
            return GateAnswer::Refused(Refusal::AlreadyUsed);
        }
        if s.remaining <= 0 {
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
        s.entries[o] = Entry::Active(customer, stamp);
        s.pending[o] = true;
        GateAnswer::Held(stamp, true)
    }

    fn answer(&self, s: &mut State, client: u8, a: Answer) {
        s.answers[client as usize].push(a);
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
            Action::Crash | Action::RedisLoss | Action::Duplicate(_) | Action::Lose(_) => true,
            Action::Send(_) | Action::ConfirmOrder(_) | Action::ReleaseOrder(_) => true,
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
        vec![State {
            loaded: false,
            remaining: 0,
            budget_left: 0,
            users: vec![0; c],
            entries: vec![Entry::None; o],
            pending: vec![false; o],
            rows: vec![Row::None; o],
            used: 0,
            budget_used: 0,
            queue: Vec::new(),
            reqs: Vec::new(),
            sends_left: vec![self.sends; n],
            answers: vec![Vec::new(); n],
            released: vec![false; n],
            confirmed: vec![false; n],
            read: vec![false; n],
            missed: false,
            starved: false,
            marked: false,
            suspect: false,
            stamps: 0,
            crashes: 0,
            redis_losses: 0,
            failovers: 0,
            duplicates: 0,
            losses: 0,
            revoked: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (i, left) in s.sends_left.iter().enumerate() {
            let busy = s.reqs.iter().any(|r| req_client(r) == Some(i as u8));
            if *left > 0 && !busy {
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
        if s.crashes < self.crashes && !s.reqs.is_empty() {
            actions.push(Action::Crash);
        }
        if s.redis_losses - s.failovers < self.redis_losses && s.loaded {
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
                self.load(&mut s);
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
                // Pending in the gate: with a row, just cleared; without, a tombstone in
                // Postgres first (a late event or merge then changes nothing), then the gate.
                if !s.loaded || !s.pending[o as usize] {
                    return None;
                }
                match (s.rows[o as usize], s.entries[o as usize]) {
                    (Row::None, Entry::Active(c, _)) => {
                        s.rows[o as usize] = Row::Released(c, false);
                        s.reqs.push(Req::SweepGate {
                            order: o,
                            customer: Some(c),
                        });
                    }
                    _ => s.pending[o as usize] = false,
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
                if !s.loaded {
                    return None;
                }
                let pending = s.pending.iter().any(|p| *p);
                if pending && !self.broken(Mutation::RepairWhilePending) {
                    return None;
                }
                let expected = self.limit as i8 - s.used as i8;
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
                s.remaining = 0;
                s.budget_left = 0;
                s.users = vec![0; self.customers()];
                s.entries = vec![Entry::None; self.orders()];
                s.pending = vec![false; self.orders()];
            }
            Action::Failover(o) => {
                let Entry::Active(c, _) = s.entries[o as usize] else {
                    return None;
                };
                s.redis_losses += 1;
                s.failovers += 1;
                s.suspect = true;
                s.remaining += 1;
                if self.budget.is_some() {
                    s.budget_left += self.discount(o) as i8;
                }
                s.users[c as usize] = s.users[c as usize].saturating_sub(1);
                s.entries[o as usize] = Entry::None;
                s.pending[o as usize] = false;
            }
        }
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "postgres never holds more than the limit",
                |m: &Protocol, s: &State| {
                    let active = s.rows.iter().filter(|r| r.active()).count();
                    s.used <= m.limit && s.used as usize == active
                },
            ),
            Property::always(
                "no more 201s held than the limit, unless Redis lost data",
                |m: &Protocol, s: &State| {
                    s.redis_losses > 0 || m.told_and_held(s).len() <= m.limit as usize
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
                    Some(budget) if s.redis_losses == 0 => {
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
                    Some(budget) if s.redis_losses == 0 && s.loaded => {
                        s.budget_left as isize + m.money(&m.held_anywhere(s)) as isize
                            <= budget as isize
                    }
                    _ => true,
                },
            ),
            Property::always(
                "the gate never offers more than the limit, unless Redis lost data",
                |m: &Protocol, s: &State| {
                    // Uses left in the gate, plus every order holding one in the gate or in
                    // Postgres (once if in both).
                    let held = m.held_anywhere(s).len();
                    s.redis_losses > 0
                        || !s.loaded
                        || s.remaining as usize + held <= m.limit as usize
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
                        answers[from..].iter().all(|a| match *a {
                            Answer::Reserved(stamp) => stamp == first || s.redis_losses > 0,
                            Answer::Refused(Refusal::ReservationReleased) => {
                                matches!(s.rows[order], Row::Released(..))
                                    || s.released[i]
                                    || s.redis_losses > 0
                            }
                            Answer::Refused(Refusal::Unavailable) => true,
                            Answer::Refused(_) => s.redis_losses > 0,
                        })
                    })
                },
            ),
            Property::always(
                "every held use comes back once the work is done",
                |m: &Protocol, s: &State| {
                    !m.quiescent(s)
                        || !s.loaded
                        || (s.remaining == m.limit as i8 - s.used as i8
                            && s.budget_left == m.expected_budget(s))
                },
            ),
            Property::always(
                "a client told 201 never reads its order as not found, unless its event and the gate's entry were both lost",
                |_: &Protocol, s: &State| !s.missed || (s.losses > 0 && s.redis_losses > 0),
            ),
            // With a budget the money, not the stock, refuses the last use (limit 2, budget 3,
            // discounts 2): "the budget refuses a reserve" below is that run's reachability check.
            Property::sometimes("the limit is reached", |m: &Protocol, s: &State| {
                s.used == m.limit || m.budget.is_some()
            }),
            Property::sometimes(
                "the budget refuses a reserve",
                |m: &Protocol, s: &State| {
                    m.budget.is_none()
                        || s.answers.iter().flatten().any(|a| {
                            matches!(a, Answer::Refused(Refusal::BudgetExhausted))
                        })
                },
            ),
        ]
    }
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
        Req::ReleaseGate { .. } | Req::SweepGate { .. } => None,
    }
}

impl Protocol {
    /// One step of a request, as the code takes it.
    fn step(&self, s: &mut State, req: Req) {
        match req {
            Req::Reserve { client } => {
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
                        s.rows[o] = Row::Confirmed(c, stamp)
                    }
                    // Mode B, the event not landed: the row is written CONFIRMED from the
                    // gate's entry (`Merge::held`), taking the use as a reserve would.
                    Row::None if self.mode == Mode::B => {
                        if let Entry::Active(c, stamp) = s.entries[o] {
                            let held = s.rows.iter().any(|r| r.active() && r.customer() == Some(c));
                            let fits = self.fits(order, self.expected_budget(s));
                            if !held && s.used < self.limit && fits {
                                s.rows[o] = Row::Confirmed(c, stamp);
                                self.take_use(s, order);
                                s.pending[o] = false;
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
                    // Every lost grant has landed: the gate is trusted again.
                    s.suspect = false;
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
            "mode {:?}, limit {}{}, clients {:?}, {} sends each{}{}, {} crash(es), {} Redis loss(es), {} failover(s), {} duplicate(s), {} lost event(s){}",
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
            self.mutation.map(|m| format!(", mutation {m:?}")).unwrap_or_default()
        )
    }
}
