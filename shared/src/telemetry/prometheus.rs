//! The local server's exporter: metrics kept in this process and rendered in Prometheus text
//! format at `GET /metrics` (`http::METRICS_PATH`), for a scrape or the console.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

use super::metrics::{
    describe, BATCH_BUCKETS, BATCH_SIZE, DEPENDENCY_BUCKETS, DEPENDENCY_DURATION, EVENT_LAG,
    REQUEST_BUCKETS, REQUEST_DURATION, SWEEP_DURATION,
};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// How long a gauge no one sets stays exported: ten sweeps at the default interval.
const GAUGE_IDLE: Duration = Duration::from_secs(600);

/// Installs the Prometheus recorder as the process's recorder, once (later calls do nothing),
/// and starts its upkeep on the current Tokio runtime.
///
/// Histograms get buckets (rendered as Prometheus histograms, so `histogram_quantile` and the
/// console's p99 work over any window), not client-side quantiles.
pub fn install() {
    if HANDLE.get().is_some() {
        return;
    }
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(REQUEST_DURATION.into()), REQUEST_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(EVENT_LAG.into()), REQUEST_BUCKETS))
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(SWEEP_DURATION.into()), REQUEST_BUCKETS)
        })
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(DEPENDENCY_DURATION.into()),
                DEPENDENCY_BUCKETS,
            )
        })
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(BATCH_SIZE.into()), BATCH_BUCKETS))
        .expect("the bucket lists are not empty")
        // A gauge is a voucher's remaining uses, set by each sweep while its gate is loaded:
        // one no sweep has set for GAUGE_IDLE belongs to a retired gate, and leaves the
        // registry (else every flash voucher ever sold would stay in /metrics).
        .idle_timeout(MetricKindMask::GAUGE, Some(GAUGE_IDLE));
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    if metrics::set_global_recorder(recorder).is_err() {
        tracing::warn!("a metrics recorder was installed already: /metrics stays empty");
        return;
    }
    describe();
    // Histogram samples wait in per-thread buffers until an upkeep folds them in; render does
    // one too, but without a scrape nothing would, and the buffers would grow.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    let _ = HANDLE.set(handle);
}

/// The metrics in Prometheus text format; None when [`install`] was not called.
pub fn render() -> Option<String> {
    HANDLE.get().map(PrometheusHandle::render)
}
