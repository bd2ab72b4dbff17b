//! Every metric the service records: names, units and descriptions in one place (the table in
//! docs/OBSERVABILITY.md lists the same), recorded through the `metrics` facade.
//!
//! The code records without knowing where a metric goes: the process installs one exporter at
//! start, Prometheus text in `flashgate serve` ([`super::prometheus`]), CloudWatch's embedded
//! metric format in Lambda (`crate::lambda`). A process that installs none (a test's server,
//! the load tools) records into the facade's no-op recorder, at the cost of a branch.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use tracing::Instrument as _;

/// The CloudWatch namespace of the embedded metric format.
pub const NAMESPACE: &str = "Flashgate";
/// Lambda execution environments started (the collector counts the first invocation of each).
pub const COLD_STARTS: &str = "flashgate_cold_starts_total";

/// HTTP requests answered, by `route` (`METHOD /path/{param}`) and `outcome`.
pub const REQUESTS: &str = "flashgate_requests_total";
/// Arrival to answer, by `route`.
pub const REQUEST_DURATION: &str = "flashgate_request_duration_seconds";
/// One call to a dependency, by `dependency` and `call`.
pub const DEPENDENCY_DURATION: &str = "flashgate_dependency_duration_seconds";
/// Changes written per group-commit round trip, by `writer`.
pub const BATCH_SIZE: &str = "flashgate_group_commit_batch_size";
/// Reserves answered by the sold-out short cut (the process's copy or a read-only lookup, not
/// the reserve script).
pub const SOLD_OUT_ANSWERS: &str = "flashgate_sold_out_answers_total";
/// Reserves and validations of a code that does not exist answered 404 from memory, not by
/// Postgres (`UNKNOWN_CODE_CACHE_MS`).
pub const UNKNOWN_CODE_ANSWERS: &str = "flashgate_unknown_code_answers_total";
/// Mode B events merged into Postgres, by `outcome`.
pub const EVENTS_LANDED: &str = "flashgate_events_landed_total";
/// Age of a landed batch's oldest event.
pub const EVENT_LAG: &str = "flashgate_event_lag_seconds";
/// Events sent to the dead letters.
pub const DEAD_LETTERED: &str = "flashgate_dead_lettered_total";
/// Uses a gate granted that Postgres refused.
pub const REVOKED: &str = "flashgate_revoked_total";
/// What sweeps did, by `kind` (the fields of the sweep report).
pub const SWEEP_ITEMS: &str = "flashgate_sweep_items_total";
/// One whole sweep.
pub const SWEEP_DURATION: &str = "flashgate_sweep_duration_seconds";
/// Uses left in a flash voucher's gate, by `code`, as the last sweep read it.
pub const VOUCHER_REMAINING: &str = "flashgate_voucher_remaining";

/// Request latency buckets (seconds): the reserve target is 100 ms.
pub const REQUEST_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
/// Dependency latency buckets (seconds): a Redis script takes tens of microseconds.
pub const DEPENDENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];
/// Batch size buckets.
pub const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// A dependency whose calls are timed ([`timed`]).
#[derive(Debug, Clone, Copy)]
pub enum Dependency {
    /// Redis: the flash-sale gate.
    Gate,
    Postgres,
    /// SQS or Kafka.
    Broker,
}

impl Dependency {
    fn as_str(self) -> &'static str {
        match self {
            Dependency::Gate => "gate",
            Dependency::Postgres => "postgres",
            Dependency::Broker => "broker",
        }
    }
}

/// Names, units and help texts, for exporters that show them (Prometheus' `# HELP`, the units
/// of CloudWatch). Called once by whoever installs an exporter, after installing it.
pub fn describe() {
    describe_counter!(
        COLD_STARTS,
        Unit::Count,
        "Lambda execution environments started"
    );
    describe_counter!(
        REQUESTS,
        Unit::Count,
        "HTTP requests answered, by route and outcome"
    );
    describe_histogram!(
        REQUEST_DURATION,
        Unit::Seconds,
        "Time from a request's arrival to its answer, by route"
    );
    describe_histogram!(
        DEPENDENCY_DURATION,
        Unit::Seconds,
        "One call to Redis, Postgres or the event broker"
    );
    describe_histogram!(
        BATCH_SIZE,
        Unit::Count,
        "Changes written per group-commit round trip"
    );
    describe_counter!(
        SOLD_OUT_ANSWERS,
        Unit::Count,
        "Reserves answered by the sold-out short cut: the process's copy or a read-only lookup, not the reserve script"
    );
    describe_counter!(
        UNKNOWN_CODE_ANSWERS,
        Unit::Count,
        "Reserves and validations of a code that does not exist, answered 404 from memory instead of by Postgres"
    );
    describe_counter!(
        EVENTS_LANDED,
        Unit::Count,
        "Mode B events merged into Postgres, by outcome"
    );
    describe_histogram!(
        EVENT_LAG,
        Unit::Seconds,
        "Age of the oldest event of a batch when the batch landed"
    );
    describe_counter!(
        DEAD_LETTERED,
        Unit::Count,
        "Events sent to the dead letters"
    );
    describe_counter!(
        REVOKED,
        Unit::Count,
        "Uses a gate granted that Postgres refused"
    );
    describe_counter!(SWEEP_ITEMS, Unit::Count, "What sweeps did, by kind");
    describe_histogram!(SWEEP_DURATION, Unit::Seconds, "One whole sweep");
    describe_gauge!(
        VOUCHER_REMAINING,
        Unit::Count,
        "Uses left in a flash voucher's gate, as the last sweep read it"
    );
}

static TIME_DEPENDENCIES: AtomicBool = AtomicBool::new(true);

/// Whether [`timed`] records durations (the span stays either way). The sweeper function turns
/// it off: see `crate::lambda::run_sweeper`.
pub fn time_dependencies(on: bool) {
    TIME_DEPENDENCIES.store(on, Ordering::Relaxed);
}

/// Runs `call` inside a span named after the dependency (at debug level: `RUST_LOG=debug`
/// shows every call a request made), and records how long it took, failed calls included (a
/// timeout is the slowest call of all).
pub async fn timed<F: Future>(dependency: Dependency, call: &'static str, f: F) -> F::Output {
    let started = Instant::now();
    let span = tracing::debug_span!("call", dependency = dependency.as_str(), call);
    let out = f.instrument(span).await;
    if TIME_DEPENDENCIES.load(Ordering::Relaxed) {
        metrics::histogram!(DEPENDENCY_DURATION, "dependency" => dependency.as_str(), "call" => call)
            .record(started.elapsed().as_secs_f64());
    }
    out
}

/// One request answered.
pub fn request(route: &'static str, outcome: &'static str, started: Instant) {
    metrics::counter!(REQUESTS, "route" => route, "outcome" => outcome).increment(1);
    metrics::histogram!(REQUEST_DURATION, "route" => route).record(started.elapsed().as_secs_f64());
}
