//! The exhaustive checks, bounded so that each finishes in well under a minute on two cores.
//! Each prints how many states it explored; each mutation must be caught, and its
//! counterexample is printed (run with `--nocapture` to read it).

use flashgate_model::{Mode, Mutation, Protocol};
use stateright::{Checker, Model};

/// Two customers after one use, each sending its reserve twice (a retry).
fn protocol(mode: Mode) -> Protocol {
    Protocol {
        mode,
        limit: 1,
        budget: None,
        discounts: Vec::new(),
        clients: vec![(0, 0), (1, 1)],
        sends: 2,
        crashes: 1,
        redis_losses: 1,
        failovers: 0,
        duplicates: if mode == Mode::B { 1 } else { 0 },
        losses: if mode == Mode::B { 1 } else { 0 },
        confirms: true,
        reads: false,
        mutation: None,
    }
}

fn check(p: Protocol) -> impl Checker<Protocol> {
    println!("checking {p}");
    let checker = p.checker().threads(2).spawn_bfs().join();
    println!(
        "  {} states, {} unique, max depth {}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth()
    );
    checker
}

#[test]
fn mode_a_keeps_every_promise_under_crashes_and_redis_data_loss() {
    check(protocol(Mode::A)).assert_properties();
}

/// Mode B's state space is larger (the queue): faults are checked in two runs, so each stays
/// within a minute or two.
#[test]
fn mode_b_keeps_every_promise_under_duplicates_losses_and_crashes() {
    check(Protocol {
        redis_losses: 0,
        confirms: false,
        ..protocol(Mode::B)
    })
    .assert_properties();
}

#[test]
fn mode_b_keeps_every_promise_when_redis_loses_its_data() {
    check(Protocol {
        crashes: 0,
        duplicates: 0,
        losses: 0,
        ..protocol(Mode::B)
    })
    .assert_properties();
}

/// Mode B: a client reads back what it reserved while its event is on the way, and Redis
/// fails over (losing the last grant) or loses everything, and an event may be lost: in two
/// runs, so each stays within a minute.
#[test]
fn mode_b_reads_never_call_a_granted_order_missing_after_a_failover() {
    check(Protocol {
        crashes: 0,
        duplicates: 0,
        confirms: false,
        reads: true,
        sends: 1,
        redis_losses: 0,
        failovers: 1,
        ..protocol(Mode::B)
    })
    .assert_properties();
}

#[test]
fn mode_b_reads_never_call_a_granted_order_missing_after_a_data_loss() {
    check(Protocol {
        crashes: 0,
        duplicates: 0,
        confirms: false,
        reads: true,
        sends: 1,
        ..protocol(Mode::B)
    })
    .assert_properties();
}

/// A client reusing another customer's orderId, in both modes.
#[test]
fn a_reused_order_id_never_takes_or_steals_a_use() {
    for mode in [Mode::A, Mode::B] {
        check(Protocol {
            clients: vec![(0, 0), (0, 1)],
            duplicates: 0,
            losses: 0,
            ..protocol(mode)
        })
        .assert_properties();
    }
}

/// Each mutation breaks the named promise, and the checker says so with a path.
fn caught(p: Protocol, mutation: Mutation, property: &'static str) {
    let checker = check(Protocol {
        mutation: Some(mutation),
        ..p
    });
    let path = checker.assert_any_discovery(property);
    println!("  counterexample for {property:?}:");
    for action in path.into_actions() {
        println!("    {action:?}");
    }
}

/// The smaller of the mode B runs above.
fn mode_b() -> Protocol {
    Protocol {
        crashes: 0,
        duplicates: 0,
        losses: 0,
        confirms: false,
        ..protocol(Mode::B)
    }
}

#[test]
fn a_release_without_a_tombstone_is_caught() {
    caught(
        protocol(Mode::A),
        Mutation::ReleaseWithoutTombstone,
        "a retry gets the first answer",
    );
}

#[test]
fn a_repair_while_orders_are_pending_is_caught() {
    caught(
        Protocol {
            redis_losses: 0,
            ..mode_b()
        },
        Mutation::RepairWhilePending,
        "no revocation unless Redis lost data",
    );
}

/// The bug the model found in the reconciler (fixed: `sweeper::reconcile`).
#[test]
fn a_repair_that_counts_a_release_in_flight_twice_is_caught() {
    caught(
        Protocol {
            redis_losses: 0,
            ..mode_b()
        },
        Mutation::RepairIgnoresReleasesInFlight,
        "the gate never offers more than the limit, unless Redis lost data",
    );
}

/// The finding the model confirmed (fixed: the sweep finishes such releases).
#[test]
fn a_lost_gate_release_left_unfinished_is_caught() {
    caught(
        protocol(Mode::A),
        Mutation::NoSettle,
        "every held use comes back once the work is done",
    );
}

/// Mode B: answering "not found" from a gate that lost data, without waiting for the events
/// in flight, tells a client its granted order does not exist.
#[test]
fn trusting_the_gate_after_a_loss_is_caught() {
    caught(
        Protocol {
            reads: true,
            sends: 1,
            redis_losses: 0,
            failovers: 1,
            ..mode_b()
        },
        Mutation::TrustGateAfterLoss,
        "a client told 201 never reads its order as not found, unless its event and the gate's entry were both lost",
    );
}

/// Mode B: loading a voucher again as soon as nothing is in flight after Redis lost its data
/// misses a grant still in its send, and later says its order does not exist.
#[test]
fn loading_again_without_waiting_out_the_send_timeout_is_caught() {
    caught(
        Protocol {
            reads: true,
            sends: 1,
            ..mode_b()
        },
        Mutation::NoSendGrace,
        "a client told 201 never reads its order as not found, unless its event and the gate's entry were both lost",
    );
}

/// A money budget beside the use count: two orders of 2 off each against a budget of 3 and a
/// limit of 2, so the budget, not the stock, refuses the second.
fn with_budget(p: Protocol) -> Protocol {
    Protocol {
        limit: 2,
        budget: Some(3),
        discounts: vec![2, 2],
        ..p
    }
}

#[test]
fn mode_a_keeps_the_budget_under_crashes_and_redis_data_loss() {
    check(with_budget(protocol(Mode::A))).assert_properties();
}

#[test]
fn mode_b_keeps_the_budget_under_duplicates_losses_and_crashes() {
    check(with_budget(Protocol {
        redis_losses: 0,
        confirms: false,
        ..protocol(Mode::B)
    }))
    .assert_properties();
}

#[test]
fn mode_b_keeps_the_budget_when_redis_loses_its_data() {
    check(with_budget(mode_b())).assert_properties();
}

/// The reconciler would repair the money in the end (when nothing is in flight); until then
/// the gate refuses customers the budget still has room for.
#[test]
fn a_release_that_keeps_the_discount_is_caught() {
    caught(
        with_budget(protocol(Mode::A)),
        Mutation::ReleaseKeepsDiscount,
        "the budget refuses only money really held, unless Redis lost data",
    );
}

/// Mode B: a gate that leaves the budget to Postgres tells a client 201 and the consumer
/// revokes the use afterwards.
#[test]
fn a_gate_that_ignores_the_budget_is_caught() {
    caught(
        with_budget(Protocol {
            redis_losses: 0,
            ..mode_b()
        }),
        Mutation::GateIgnoresBudget,
        "no revocation unless Redis lost data",
    );
}
