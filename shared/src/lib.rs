//! Flashgate: voucher reservations that survive a flash sale and never hand out use
//! `total_limit + 1`.
//!
//! # Layout
//!
//! - [`domain`]: validated identifiers, the status lattice (`RESERVED < CONFIRMED < RELEASED`)
//!   and the JSON views. Pure, no I/O.
//! - [`store`]: Postgres, the source of truth. The pool, migrations, and one query per
//!   operation; status changes all go through the SQL function `fg_merge`.
//! - [`errors`]: one error enum per operation.
//! - [`http`]: the axum router of the public API, its input parsing, and (in `http::error`)
//!   the single mapping from errors to HTTP.
//! - [`app`]: the clients built once per process and borrowed by every handler.
//! - [`config`]: settings from the environment; [`telemetry`]: JSON logs.
//! - [`gate`]: the Redis gate of flash-sale vouchers (Lua scripts in `lua/`, keys in
//!   `gate::keys`).
//! - [`events`]: mode B's `voucher-reserved` events on SQS; [`consumer`]: their consumer, and
//!   the local queue poller.
//! - [`sweeper`]: the scheduled sweep: expiry, orphan recovery, reconciliation, warm-up.
//! - [`server`]: the local server (the `flashgate serve` command); [`lambda`]: the entry point
//!   every Lambda function calls with its route family.

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
pub mod server;
pub mod store;
pub mod sweeper;
pub mod telemetry;
pub mod tls;

pub use app::App;
pub use config::Settings;
