//! The exhaustive checks of orders of several codes (`flashgate_model::orders`), bounded so
//! that each finishes within seconds on two cores (release build). Each prints how many states
//! it explored; each mutation must be caught, and its shortest counterexample is printed (run
//! with `--nocapture` to read it).

use std::time::Instant;

use flashgate_model::orders::{Mutation, Protocol};
use stateright::{Checker, HasDiscoveries, Model};

/// Two codes of limits 1 and 2, and three orders (three customers) asking both, two in one
/// order and one in the other, so that each code refuses someone; a crash, a failure (503), a
/// retry each, a stalled request the sweeper takes, and expiries. DELETEs are checked apart.
fn protocol() -> Protocol {
    Protocol {
        limits: vec![1, 2],
        orders: vec![vec![0, 1], vec![1, 0], vec![0, 1]],
        sends: 2,
        crashes: 1,
        failures: 1,
        stalls: 1,
        expiries: true,
        deletes: false,
        twins: false,
        mutation: None,
    }
}

fn check(p: Protocol) -> impl Checker<Protocol> {
    println!("checking {p}");
    let start = Instant::now();
    let checker = p.checker().threads(2).spawn_bfs().join();
    println!(
        "  {} states, {} unique, max depth {}, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        start.elapsed().as_secs_f64()
    );
    checker
}

#[test]
fn an_order_holds_all_its_codes_or_none_under_crashes_failures_and_the_sweeper() {
    check(protocol()).assert_properties();
}

/// Each client may DELETE its order, even while its reserve request still runs (it timed out):
/// two orders each asking both codes of limit 1, in opposite orders, so that each refuses the
/// other, with every fault.
fn deletes() -> Protocol {
    Protocol {
        limits: vec![1, 1],
        orders: vec![vec![0, 1], vec![1, 0]],
        deletes: true,
        ..protocol()
    }
}

#[test]
fn a_delete_beside_its_request_keeps_all_or_none() {
    check(deletes()).assert_properties();
}

/// Each mutation breaks the named promise, and the checker says so with a shortest path.
fn caught(p: Protocol, mutation: Mutation, property: &'static str) {
    counterexample(
        Protocol {
            mutation: Some(mutation),
            ..p
        },
        property,
    );
}

/// Prints a shortest path to a state that breaks `property`, and panics when none does.
fn counterexample(p: Protocol, property: &'static str) {
    println!("checking {p}");
    let start = Instant::now();
    let actions = shortest(&p, property)
        .unwrap_or_else(|| panic!("{p} not caught by {property:?}"))
        .into_actions();
    println!(
        "  counterexample for {property:?}, {} steps ({:.1} s):",
        actions.len(),
        start.elapsed().as_secs_f64()
    );
    for action in actions {
        println!("    {action:?}");
    }
}

/// A shortest path to a state that breaks `property`, or None when no reachable state does.
/// The search is breadth first on one thread, one depth more each round: within a block of
/// states the checker keeps the last counterexample it met, which may be deeper than the
/// first.
fn shortest(
    p: &Protocol,
    property: &'static str,
) -> Option<stateright::Path<<Protocol as Model>::State, <Protocol as Model>::Action>> {
    // The initial state is at depth 1; states at the target depth are not checked.
    for depth in 2.. {
        let checker = p
            .clone()
            .checker()
            .threads(1)
            .target_max_depth(depth)
            .finish_when(HasDiscoveries::AnyOf([property].into()))
            .spawn_bfs()
            .join();
        if let Some(path) = checker.discovery(property) {
            return Some(path);
        }
        if checker.max_depth() < depth {
            // Nothing was left unexplored.
            return None;
        }
    }
    None
}

/// The client is told its order is refused while the first code is still held.
#[test]
fn a_refusal_answered_before_the_codes_are_given_back_is_caught() {
    caught(
        protocol(),
        Mutation::AnswerRefusalBeforeGivingBack,
        "a refusal holds nothing",
    );
}

/// A crash between two codes leaves the order PENDING with the first: nothing gives it back.
#[test]
fn a_sweeper_that_skips_pending_orders_is_caught() {
    caught(
        protocol(),
        Mutation::SweeperSkipsPending,
        "all or none at rest",
    );
}

/// The sweeper takes an order whose request still runs (it outlived the lease) and makes its
/// codes due; the request then settles the order RESERVED over them, and the expiry gives them
/// back under a RESERVED order.
#[test]
fn an_unconditional_settle_is_caught() {
    caught(
        protocol(),
        Mutation::UnconditionalSettle,
        "all or none at rest",
    );
}

/// A client's retries running beside its first request (it timed out): two orders each asking
/// both codes of limit 1, in opposite orders, three requests each, with a crash, two failures
/// (a code's reserve, then the let-go after it), a stall and expiries. A retry finds the order
/// held by another request (live, or dead) and is answered 503, or takes it up once its
/// decider let go of it.
fn twins() -> Protocol {
    Protocol {
        limits: vec![1, 1],
        orders: vec![vec![0, 1], vec![1, 0]],
        sends: 3,
        failures: 2,
        twins: true,
        ..protocol()
    }
}

/// Once the model's finding (see its doc, "Twin requests"): one decider per pending order
/// keeps all or none with twins.
#[test]
fn twin_requests_of_one_order_keep_all_or_none() {
    check(twins()).assert_properties();
}

/// Twins and a DELETE beside them, as in [`deletes`] (two requests each, one failure).
#[test]
fn twin_requests_beside_a_delete_keep_all_or_none() {
    check(Protocol {
        twins: true,
        ..deletes()
    })
    .assert_properties();
}

/// Without the decider, the retry decides beside the first request: with no fault at all, one
/// gives back a code the other was granted and then settles the order.
#[test]
fn twins_deciding_one_order_at_once_are_caught() {
    let twins = Protocol {
        crashes: 0,
        failures: 0,
        stalls: 0,
        expiries: false,
        ..twins()
    };
    caught(
        twins.clone(),
        Mutation::NoDecider,
        "a reserved order holds every code",
    );
    caught(twins, Mutation::NoDecider, "a refusal holds nothing");
}
