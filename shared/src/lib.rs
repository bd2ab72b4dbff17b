//! Flashgate: voucher reservations that survive a flash sale and never hand out use
//! `total_limit + 1`. The design, in full: docs/ARCHITECTURE.md.
//!
//! # Layout
//!
//! Dependencies point one way, down this list's layers: `domain` <- `store`, `gate`,
//! `events` <- `reservations` <- `sweeper`, `consumer` <- `app` <- `http` <- `server`, `lambda`.
//!
//! - [`domain`]: validated identifiers, the status lattice (`RESERVED < CONFIRMED < RELEASED`),
//!   the reserve outcome vocabulary and the JSON views. Pure, no I/O.
//! - [`config`]: settings from the environment, secrets wrapped; [`telemetry`]: JSON logs,
//!   error chains, the one metrics emitter; [`errors`]: one error enum per operation.
//! - [`store`]: Postgres, the source of truth. The pool, migrations and every SQL statement;
//!   status changes all go through `Store::merge_batch` (the set-based `fg_merge_strict`, and
//!   when it declines a batch the loop of `fg_merge` calls, `fg_merge_batch`).
//! - [`gate`]: the Redis gate of flash-sale vouchers and campaigns (Lua scripts in `lua/`, keys
//!   built only in `gate::keys`: a voucher's own, or a campaign's shared by its codes; the rules
//!   as the scripts read them in `gate::GateMeta`).
//! - [`events`]: mode B's `voucher-reserved` events, on SQS or Kafka, and the `Sink` that
//!   receives them.
//! - [`reservations`]: the service every route calls (create and read vouchers, reserve,
//!   confirm, release, warm-up); its `flash` path runs the gate, its `warmup` loads it.
//! - [`sweeper`]: the scheduled sweep (expiry, orphans, reconciliation, warm-up);
//!   [`consumer`]: mode B's consumer and the local queue poller.
//! - [`app`]: the clients built once per process, holding the services.
//! - [`http`]: the axum router, built from one route table; `http::error` is the single mapping
//!   from errors to HTTP.
//! - [`server`]: the local server (`flashgate serve`); [`lambda`]: what every Lambda binary
//!   calls; [`tls`], [`aws`]: client configuration.

pub mod app;
pub mod aws;
pub mod config;
pub mod consumer;
pub mod domain;
pub mod errors;
pub mod events;
pub mod gate;
pub mod http;
pub mod lambda;
pub mod reservations;
pub mod server;
pub mod store;
pub mod sweeper;
pub mod telemetry;
pub mod tls;

pub use app::App;
pub use config::Settings;
