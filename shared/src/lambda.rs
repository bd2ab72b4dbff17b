//! What each Lambda function does: read settings, build the clients once, and hand requests or
//! events to the shared code. The binaries in `functions/` are one call into here.
//!
//! Every function runs under the runtime's tracing layer (each log line of an invocation
//! carries its `requestId` and `xrayTraceId`) and the embedded-metric-format collector: what an
//! invocation recorded leaves as EMF documents on stdout when it ends, aggregated over it,
//! with the dimension `function` (docs/OBSERVABILITY.md).

use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::kafka::KafkaEvent;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{service_fn, LambdaEvent};
use metrics_cloudwatch_embedded::lambda::service;
use metrics_cloudwatch_embedded::Collector;

use crate::sweeper::SweepReport;
use crate::{app::App, config::Settings, http, telemetry};

/// Built once per execution environment (cold start), then borrowed by every invocation.
async fn app() -> Result<App, lambda_runtime::Error> {
    let settings = Settings::load().await?;
    Ok(App::new(&settings)?)
}

/// Logs, and the metrics collector of `function` (its `function` dimension), installed as the
/// process's recorder: once, at cold start, before anything records.
fn observe(function: &'static str) -> Result<&'static Collector, lambda_runtime::Error> {
    telemetry::init();
    let collector = metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace(telemetry::metrics::NAMESPACE)
        .with_dimension("function", function)
        .with_lambda_request_id("requestId")
        .with_lambda_xray_trace_id("xrayTraceId")
        .lambda_cold_start_metric(telemetry::metrics::COLD_STARTS)
        .init()?;
    telemetry::metrics::describe();
    Ok(collector)
}

/// An HTTP function: its family of routes of the shared router, through `lambda_http`.
pub async fn run(routes: http::Routes) -> Result<(), lambda_http::Error> {
    let function = routes
        .function()
        .expect("a Lambda function serves one family");
    let metrics = observe(function)?;
    let app = app().await?;
    if routes == http::Routes::Reserve {
        // At cold start (before a sale, with provisioned concurrency), not on a winner's path.
        app.connect_events().await;
    }
    service::run_http(metrics, http::router(app, routes)).await
}

/// The liveness function: `GET /health/live` and nothing else, with no settings read and no
/// client built (see [`http::live_router`]).
pub async fn run_live() -> Result<(), lambda_http::Error> {
    let metrics = observe("live")?;
    service::run_http(metrics, http::live_router()).await
}

/// The sweeper function: one sweep per scheduled event.
pub async fn run_sweeper() -> Result<(), lambda_runtime::Error> {
    let metrics = observe("sweeper")?;
    // The embedded format keeps at most 100 samples of a metric per invocation, and a sweep
    // makes a few gate calls per flash voucher: the sweeper reports its counts and its whole
    // duration, not each call.
    telemetry::metrics::time_dependencies(false);
    let app = app().await?;
    let app = &app;
    service::run(metrics, service_fn(move |event| sweep_handler(app, event))).await
}

/// The consumer function: one SQS batch per invocation, failures reported per message; or,
/// with Kafka settings, one MSK batch per invocation (see [`crate::events::kafka::Kafka::handle_msk`]).
pub async fn run_consumer() -> Result<(), lambda_runtime::Error> {
    let metrics = observe("consumer")?;
    // A batch makes a gate call per event (up to the event source's batch size, 100 by
    // default), past the 100 samples a metric keeps per invocation: the consumer reports what
    // landed and how late (`flashgate_events_landed_total`, `flashgate_event_lag_seconds`).
    telemetry::metrics::time_dependencies(false);
    let app = app().await?;
    let app = &app;
    if let Some(kafka) = app.kafka() {
        return service::run(
            metrics,
            service_fn(move |event: LambdaEvent<KafkaEvent>| async move {
                let landed = kafka.handle_msk(app.consumer(), event.payload).await?;
                Ok::<usize, lambda_runtime::Error>(landed)
            }),
        )
        .await;
    }
    service::run(
        metrics,
        service_fn(move |event: LambdaEvent<SqsEvent>| async move {
            Ok::<SqsBatchResponse, lambda_runtime::Error>(
                crate::events::sqs::handle_batch(
                    app.consumer(),
                    app.sqs().map(|s| &**s),
                    event.payload,
                )
                .await,
            )
        }),
    )
    .await
}

/// The migrate function: applies pending migrations when invoked (after each deploy; see
/// docs/DEPLOY.md). Its input is ignored; it answers the migrations it applied.
pub async fn run_migrate() -> Result<(), lambda_runtime::Error> {
    let metrics = observe("migrate")?;
    let app = app().await?;
    let app = &app;
    service::run(
        metrics,
        service_fn(move |event| migrate_handler(app, event)),
    )
    .await
}

/// Handles one invocation of the migrate function (its input is not needed).
pub async fn migrate_handler(
    app: &App,
    _event: LambdaEvent<serde_json::Value>,
) -> Result<serde_json::Value, lambda_runtime::Error> {
    let applied = app.prepare_database().await?;
    app.prepare_events().await?;
    Ok(serde_json::json!({ "applied": applied }))
}

/// Handles one EventBridge scheduled event (its content is not needed).
pub async fn sweep_handler(
    app: &App,
    _event: LambdaEvent<EventBridgeEvent<serde_json::Value>>,
) -> Result<SweepReport, lambda_runtime::Error> {
    Ok(app.sweeper().sweep().await?)
}
