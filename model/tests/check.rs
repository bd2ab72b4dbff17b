//! The exhaustive checks, bounded so that each finishes in well under a minute on two cores,
//! and all of them together in about two (release build, `cargo test`'s two at a time). Each
//! prints how many states it explored; each mutation must be caught, and its shortest
//! counterexample is printed (run with `--nocapture` to read it).

use std::time::Instant;

use flashgate_model::{Mode, Mutation, Protocol};
use stateright::{Checker, HasDiscoveries, Model};

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
        codes: Vec::new(),
        per_code: 0,
        confirms: true,
        reads: false,
        patches: 0,
        lock_expiries: 0,
        split_orphans: true,
        sweepers: 1,
        instances: 1,
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

/// Each mutation breaks the named promise, and the checker says so with a shortest path.
fn caught(p: Protocol, mutation: Mutation, property: &'static str) {
    let p = Protocol {
        mutation: Some(mutation),
        ..p
    };
    println!("checking {p}");
    let start = Instant::now();
    let actions = shortest(&p, property)
        .unwrap_or_else(|| panic!("{mutation:?} not caught by {property:?}"))
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
        "the gate never offers more than the limit in force, unless Redis lost data",
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

/// The orphan sweep in one step: its race is checked without a budget (the money moves with
/// the use), and this run stays within half a minute.
#[test]
fn mode_b_keeps_the_budget_under_duplicates_losses_and_crashes() {
    check(with_budget(Protocol {
        redis_losses: 0,
        confirms: false,
        split_orphans: false,
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

/// Mode B: the orphan sweep looks up an order whose event has not landed, then writes its
/// tombstone, while the client confirms from the gate's entry, releases, or the event lands.
#[test]
fn mode_b_keeps_every_promise_while_the_orphan_sweep_races_a_confirm() {
    check(orphan_race()).assert_properties();
}

fn orphan_race() -> Protocol {
    Protocol {
        crashes: 0,
        redis_losses: 0,
        duplicates: 0,
        losses: 0,
        ..protocol(Mode::B)
    }
}

/// Mode B: a confirm writes its row from the gate's entry between the orphan sweep's look-up
/// (no row) and its tombstone; a plain merge of RELEASED over CONFIRMED takes the paid
/// order's use back and the gate sells it again.
#[test]
fn an_orphan_tombstone_over_a_late_confirm_is_caught() {
    caught(
        orphan_race(),
        Mutation::OrphanOverridesConfirm,
        "a client told its order is confirmed keeps its use",
    );
}

/// A failover that loses the last grant (its entry, the customer's count and the `remaining`
/// decrement together), with confirms, releases, orphans and the repair: a failover is not a
/// loss of data the properties excuse.
fn failover(mode: Mode) -> Protocol {
    Protocol {
        crashes: 0,
        redis_losses: 0,
        failovers: 1,
        duplicates: 0,
        losses: 0,
        ..protocol(mode)
    }
}

#[test]
fn mode_a_keeps_every_promise_through_a_failover() {
    check(failover(Mode::A)).assert_properties();
}

#[test]
fn mode_b_keeps_every_promise_through_a_failover() {
    check(failover(Mode::B)).assert_properties();
}

/// With a limit of 2, a release can be in flight (in Postgres, not yet in the gate) while the
/// failover loses the other order's grant.
#[test]
fn mode_b_keeps_every_promise_through_a_failover_with_a_release_in_flight() {
    check(failover_with_room()).assert_properties();
}

fn failover_with_room() -> Protocol {
    Protocol {
        limit: 2,
        confirms: false,
        split_orphans: false,
        ..failover(Mode::B)
    }
}

/// Mode B: a gate that keeps granting from the promoted node's `remaining` gives more 201s
/// than the limit, and the consumer revokes the extra.
#[test]
fn granting_from_a_gate_that_lost_grants_is_caught() {
    caught(
        failover(Mode::B),
        Mutation::ReserveIgnoresFailover,
        "no revocation unless Redis lost data",
    );
}

/// Mode B: the read path trusting the gate again without its repair lets reserves grant from
/// the `remaining` the failover left too high.
#[test]
fn trusting_a_suspect_gate_again_without_its_repair_is_caught() {
    caught(
        Protocol {
            confirms: false,
            reads: true,
            ..failover(Mode::B)
        },
        Mutation::TrustWithoutRepair,
        "no revocation unless Redis lost data",
    );
}

/// The repair counting only Postgres and the grants pending without a row: a release in
/// flight then gives its use back a second time.
#[test]
fn a_failover_repair_that_misses_a_release_in_flight_is_caught() {
    caught(
        failover_with_room(),
        Mutation::FailoverRepairMissesReleases,
        "the gate never offers more than the limit in force, unless Redis lost data",
    );
}

/// Mode A: the repair running while a grant the failover lost is still on its way to
/// Postgres counts that use free.
#[test]
fn a_failover_repair_before_the_merges_in_flight_is_caught() {
    caught(
        failover(Mode::A),
        Mutation::RepairWhileMerging,
        "the gate never offers more than the limit in force, unless Redis lost data",
    );
}

/// A change lowering the limit while a loader stalls past its gate lock's expiry. Mode B
/// leaves out the confirms and takes the orphan sweep in one step (the race is the change's
/// and the loader's, with the reserves), so that it stays within seconds.
fn change(mode: Mode) -> Protocol {
    Protocol {
        crashes: 0,
        redis_losses: 0,
        duplicates: 0,
        losses: 0,
        patches: 1,
        lock_expiries: 1,
        confirms: mode == Mode::A,
        split_orphans: mode == Mode::A,
        ..protocol(mode)
    }
}

#[test]
fn mode_a_keeps_the_limit_in_force_through_a_change_and_a_stalled_loader() {
    check(change(Mode::A)).assert_properties();
}

#[test]
fn mode_b_keeps_the_limit_in_force_through_a_change_and_a_stalled_loader() {
    check(change(Mode::B)).assert_properties();
}

/// A loader that read Postgres before the change and writes after it, its lock gone: the
/// gate grants past the lower limit (mode A: Postgres refuses it), and in mode B the consumer
/// revokes the 201.
#[test]
fn a_loader_writing_after_its_lock_expired_is_caught() {
    caught(
        change(Mode::A),
        Mutation::StaleLoaderWrites,
        "the gate never offers more than the limit in force, unless Redis lost data",
    );
    caught(
        change(Mode::B),
        Mutation::StaleLoaderWrites,
        "no revocation unless Redis lost data",
    );
}

/// Two instances: a client's retry goes to the other instance while its first request still
/// runs there (with a crash), and two sweepers recover one orphan at once (each having looked
/// it up). Mode B checks them in two runs, each within a second: the two sweepers with one
/// send per client (their race is with the confirm and the late event, not the retries).
#[test]
fn mode_a_keeps_every_promise_with_two_instances() {
    check(Protocol {
        redis_losses: 0,
        sweepers: 2,
        instances: 2,
        ..protocol(Mode::A)
    })
    .assert_properties();
}

#[test]
fn mode_b_keeps_every_promise_with_two_instances() {
    check(Protocol {
        redis_losses: 0,
        duplicates: 0,
        losses: 0,
        confirms: false,
        split_orphans: false,
        instances: 2,
        ..protocol(Mode::B)
    })
    .assert_properties();
    check(Protocol {
        sweepers: 2,
        sends: 1,
        ..orphan_race()
    })
    .assert_properties();
}

/// A flash campaign's gate: two orders on one code of per-code limit 1 under a campaign
/// total of 2 (the code refuses the second, not the total), and two codes sharing a total of
/// 1 (the total refuses), through a failover.
fn campaign(mode: Mode, codes: Vec<u8>) -> Protocol {
    Protocol {
        limit: if codes[0] == codes[1] { 2 } else { 1 },
        codes,
        per_code: 1,
        confirms: mode == Mode::A,
        split_orphans: mode == Mode::A,
        ..failover(mode)
    }
}

#[test]
fn a_campaign_keeps_every_promise_through_a_failover() {
    check(campaign(Mode::A, vec![0, 0])).assert_properties();
    check(campaign(Mode::B, vec![0, 0])).assert_properties();
    check(campaign(Mode::B, vec![0, 1])).assert_properties();
}

/// Mode B: a campaign's repair that leaves the `codes` hash as it is misses the code count of
/// the grant the failover lost, and grants that code again past its limit.
#[test]
fn a_campaign_repair_that_keeps_the_code_counts_is_caught() {
    caught(
        campaign(Mode::B, vec![0, 0]),
        Mutation::RepairKeepsCodeCounts,
        "no revocation unless Redis lost data",
    );
}
