//! What each Lambda function does: read settings, build the clients once, and hand requests or
//! events to the shared code. The binaries in `functions/` are one call into here.

use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_lambda_events::kafka::KafkaEvent;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{service_fn, LambdaEvent};

use crate::sweeper::SweepReport;
use crate::{app::App, config::Settings, http, telemetry};

/// Built once per execution environment (cold start), then borrowed by every invocation.
async fn app() -> Result<App, lambda_runtime::Error> {
    telemetry::init();
    let settings = Settings::load().await?;
    Ok(App::new(&settings)?)
}

/// An HTTP function: its family of routes of the shared router, through `lambda_http`.
pub async fn run(routes: http::Routes) -> Result<(), lambda_http::Error> {
    let app = app().await?;
    if routes == http::Routes::Reserve {
        // At cold start (before a sale, with provisioned concurrency), not on a winner's path.
        app.connect_events().await;
    }
    lambda_http::run(http::router(app, routes)).await
}

/// The liveness function: `GET /health/live` and nothing else, with no settings read and no
/// client built (see [`http::live_router`]).
pub async fn run_live() -> Result<(), lambda_http::Error> {
    telemetry::init();
    lambda_http::run(http::live_router()).await
}

/// The sweeper function: one sweep per scheduled event.
pub async fn run_sweeper() -> Result<(), lambda_runtime::Error> {
    let app = app().await?;
    let app = &app;
    lambda_runtime::run(service_fn(move |event| sweep_handler(app, event))).await
}

/// The consumer function: one SQS batch per invocation, failures reported per message; or,
/// with Kafka settings, one MSK batch per invocation (see [`crate::events::kafka::Kafka::handle_msk`]).
pub async fn run_consumer() -> Result<(), lambda_runtime::Error> {
    let app = app().await?;
    let app = &app;
    if let Some(kafka) = app.kafka() {
        return lambda_runtime::run(service_fn(
            move |event: LambdaEvent<KafkaEvent>| async move {
                let landed = kafka.handle_msk(app.consumer(), event.payload).await?;
                Ok::<usize, lambda_runtime::Error>(landed)
            },
        ))
        .await;
    }
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, lambda_runtime::Error>(
            crate::events::sqs::handle_batch(
                app.consumer(),
                app.sqs().map(|s| &**s),
                event.payload,
            )
            .await,
        )
    }))
    .await
}

/// The migrate function: applies pending migrations when invoked (after each deploy; see
/// docs/DEPLOY.md). Its input is ignored; it answers the migrations it applied.
pub async fn run_migrate() -> Result<(), lambda_runtime::Error> {
    let app = app().await?;
    let app = &app;
    lambda_runtime::run(service_fn(move |event| migrate_handler(app, event))).await
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
