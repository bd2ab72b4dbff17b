//! Logging: JSON lines on stdout (CloudWatch and local alike), filtered by `RUST_LOG`.
//!
//! Tests call [`init_for_tests`], which stays silent unless `TEST_LOG` is set, so a failing
//! test can be rerun with logs without every passing test flooding the output.

use tracing_subscriber::{fmt, EnvFilter};

/// Installs the JSON subscriber. Safe to call more than once (later calls do nothing).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_target(false)
        .with_env_filter(filter)
        .try_init();
}

/// Logs only when `TEST_LOG` is set; otherwise tests run silent.
pub fn init_for_tests() {
    if std::env::var_os("TEST_LOG").is_some() {
        init();
    }
}
