//! Logs and metrics. Logs are JSON lines on stdout (CloudWatch and local alike), filtered by
//! `RUST_LOG`, each with the spans it was written in (a request's id; in Lambda the runtime's
//! `requestId` and `xrayTraceId`). Metrics are recorded through the `metrics` facade
//! ([`metrics`]) and leave through the exporter the process installed ([`prometheus`] for the
//! local server, CloudWatch's embedded metric format in `crate::lambda`).
//!
//! Tests call [`init_for_tests`], which stays silent unless `TEST_LOG` is set, so a failing
//! test can be rerun with logs without every passing test flooding the output.

pub mod metrics;
pub mod prometheus;

use std::error::Error;
use std::fmt;

use tracing_subscriber::{fmt as subscriber, EnvFilter};

/// Installs the JSON subscriber. Safe to call more than once (later calls do nothing).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = subscriber()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(true)
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

/// An error and every `source` below it, `outer: inner: root`: what a log line records, so
/// "database unavailable" arrives with the refused connection or the failed TLS handshake that
/// caused it. Use as `error = %Chain(&e)`.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(e) = source {
            write!(f, ": {e}")?;
            source = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_chain_prints_every_source() {
        let e = Outer(std::io::Error::other("root cause"));
        assert_eq!(Chain(&e).to_string(), "outer: root cause");
    }
}
