//! The integration tests, one binary: each test gets its own database and its own server on
//! port 0, and talks to it over real HTTP (see [`harness`]). One binary links the service once
//! instead of once per file, and its tests share one pool of test threads.

mod harness;

mod api;
mod aws;
mod budgets;
mod campaign_gate;
mod campaigns;
mod descriptions;
mod events;
mod failover;
mod flash;
mod kafka;
mod lambda;
mod lattice;
mod lifecycle;
mod observe;
mod orders;
mod properties;
mod roles;
mod schema;
mod server;
mod set_merge;
mod slots;
mod sweeper;
mod unknown_codes;
