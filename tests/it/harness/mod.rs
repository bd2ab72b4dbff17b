//! Test harness: each test gets its own fresh database and its own server, started in-process
//! on port 0, and talks to it over real HTTP. What a test leaves behind (its database, its
//! Redis keys) goes when its [`TestApp`] is dropped.

mod app;
mod cleanup;
mod helpers;
mod modes;
mod process;
mod proxy;
mod routes;
mod sqs;

pub use app::{app_role_login, assert_never_reserved, serve_with, TestApp, APP_ROLE_PASSWORD};
pub use cleanup::Cleanup;
pub use helpers::{
    error_of, load_counts, lock_gate, reserve_req, reserved_event, settings, unique_name,
    voucher_code, wait_for,
};
pub use modes::{Broker, Mode};
pub use process::{sample, ServerProcess};
pub use proxy::Proxy;
pub use routes::{path, Request};
pub use sqs::create_queues;

/// Postgres server for tests, without a database name: each test appends its own.
pub fn postgres_base() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
        .trim_end_matches('/')
        .to_owned()
}

pub fn redis_url() -> String {
    std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// Seed nodes of the 3-node cluster `scripts/services.sh cluster` starts.
pub fn cluster_url() -> String {
    std::env::var("TEST_REDIS_CLUSTER_URL").unwrap_or_else(|_| {
        "redis://127.0.0.1:7101,redis://127.0.0.1:7102,redis://127.0.0.1:7103".to_owned()
    })
}

/// The local Kafka broker `scripts/services.sh kafka` starts.
pub fn kafka_brokers() -> String {
    std::env::var("TEST_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

/// The fast local SQS emulator `scripts/services.sh fauxqs` starts.
pub fn fauxqs_endpoint() -> String {
    std::env::var("TEST_FAUXQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9325".to_owned())
}

/// The local AWS endpoint (moto): SQS and Secrets Manager.
pub fn sqs_endpoint() -> String {
    std::env::var("TEST_SQS_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:9324".to_owned())
}
