//! What each Lambda function does: read settings, build the clients once, and hand requests or
//! events to the shared code. The binaries in `functions/` are one call into here.
//!
//! Every function runs under the runtime's tracing layer (each log line of an invocation
//! carries its `requestId` and `xrayTraceId`) and the embedded-metric-format collector: what an
//! invocation recorded leaves as EMF documents on stdout when it ends, aggregated over it,
//! with the dimension `function` (docs/OBSERVABILITY.md).
//!
//! The HTTP functions run concurrently where Lambda lets them: on Lambda Managed Instances an
//! execution environment takes up to `AWS_LAMBDA_MAX_CONCURRENCY` invocations at once
//! (`PerExecutionEnvironmentMaxConcurrency`), and the runtime then polls with that many
//! workers, which share the one [`App`]: its connection pool, its group commit and its
//! sold-out copy serve them all. Without the variable (on-demand Lambda) it polls one at a
//! time, as before.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Once;
use std::task::{Context, Poll};

use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::kafka::KafkaEvent;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::layers::TracingLayer;
use lambda_runtime::{service_fn, LambdaEvent, LambdaInvocation};
use metrics_cloudwatch_embedded::lambda::service;
use metrics_cloudwatch_embedded::Collector;
use tower::{Layer, Service, ServiceExt};

use crate::sweeper::SweepReport;
use crate::{app::App, config::Settings, http, telemetry};

/// The properties of an invocation's metrics that name it (see [`FlushLayer`]).
const REQUEST_ID: &str = "requestId";
const TRACE_ID: &str = "xrayTraceId";

/// Built once per execution environment (cold start), then borrowed by every invocation.
async fn app() -> Result<App, lambda_runtime::Error> {
    let settings = Settings::load().await?;
    Ok(App::new(&settings)?)
}

/// Logs, and the metrics collector of `function` (its `function` dimension), installed as the
/// process's recorder: once, at cold start, before anything records.
pub fn observe(function: &'static str) -> Result<&'static Collector, lambda_runtime::Error> {
    telemetry::init();
    let collector = metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace(telemetry::metrics::NAMESPACE)
        .with_dimension("function", function)
        .with_lambda_request_id(REQUEST_ID)
        .with_lambda_xray_trace_id(TRACE_ID)
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
    serve(metrics, app().await?, routes).await
}

/// The runtime loop of an HTTP function whose clients are built: invocations one at a time,
/// or `AWS_LAMBDA_MAX_CONCURRENCY` at once on a managed instance, all on the one `app`.
pub async fn serve(
    metrics: &'static Collector,
    app: App,
    routes: http::Routes,
) -> Result<(), lambda_http::Error> {
    if routes == http::Routes::Reserve {
        // At cold start (before a sale, with provisioned concurrency), not on a winner's path.
        app.connect_events().await;
    }
    let router = http::router(app, routes);
    // The router's answer, its body read whole, as `lambda_http` would read it: a response the
    // concurrent runtime may hand between its workers (`Sync`), which axum's is not.
    let handler = tower::service_fn(move |request: lambda_http::Request| {
        let router = router.clone();
        async move {
            let Ok(response) = router.oneshot(request).await;
            Ok::<_, Infallible>(lambda_http::IntoResponse::into_response(response).await)
        }
    });
    lambda_runtime::Runtime::new(lambda_http::Adapter::from(handler))
        .layer(TracingLayer::new())
        .layer(FlushLayer::new(metrics))
        .run_concurrent()
        .await
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

/// Whether this execution environment runs invocations concurrently (a managed instance).
fn concurrent() -> bool {
    std::env::var("AWS_LAMBDA_MAX_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .is_some_and(|n| n > 1)
}

/// What the collector's own layer does (the cold-start count, the invocation's ids on its
/// metrics, a flush when it ends), for a service the concurrent runtime can clone into each of
/// its workers, which the collector's own cannot be. With invocations side by side, a flush
/// carries what every one of them recorded since the last, and no single request id names it:
/// the ids are left off (docs/OBSERVABILITY.md).
#[derive(Clone, Copy)]
struct FlushLayer {
    metrics: &'static Collector,
    ids: bool,
}

impl FlushLayer {
    fn new(metrics: &'static Collector) -> Self {
        FlushLayer {
            metrics,
            ids: !concurrent(),
        }
    }
}

impl<S> Layer<S> for FlushLayer {
    type Service = Flush<S>;

    fn layer(&self, inner: S) -> Flush<S> {
        Flush {
            layer: *self,
            inner,
        }
    }
}

#[derive(Clone)]
struct Flush<S> {
    layer: FlushLayer,
    inner: S,
}

impl<S> Service<LambdaInvocation> for Flush<S>
where
    S: Service<LambdaInvocation>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, invocation: LambdaInvocation) -> Self::Future {
        let metrics = self.layer.metrics;
        if self.layer.ids {
            metrics.set_property(REQUEST_ID, invocation.context.request_id.clone());
            metrics.set_property(TRACE_ID, invocation.context.xray_trace_id.clone());
        }
        static COLD_START: Once = Once::new();
        COLD_START.call_once(|| {
            write_whole("the cold start count", |out| {
                metrics.write_single(
                    telemetry::metrics::COLD_STARTS,
                    Some(metrics::Unit::Count),
                    1,
                    out,
                )
            });
        });
        let done = self.inner.call(invocation);
        Box::pin(async move {
            let result = done.await;
            write_whole("metrics", |out| metrics.flush(out));
            result
        })
    }
}

/// Writes what `write` produces to stdout in one piece. The collector writes a document in many
/// small writes, each taking stdout's lock alone; with invocations side by side another one's
/// log line could land in the middle, and neither line would parse.
fn write_whole(what: &str, write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) {
    let mut documents = Vec::new();
    let written = write(&mut documents)
        .and_then(|()| std::io::Write::write_all(&mut std::io::stdout().lock(), &documents));
    if let Err(e) = written {
        tracing::warn!(error = %e, "{what} not written");
    }
}
