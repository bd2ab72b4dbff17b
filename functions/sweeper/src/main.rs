//! Lambda function: the scheduled sweep (expiry, orphans, reconciliation, warm-up), run by an
//! EventBridge schedule. See `shared::sweeper`.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::lambda::run_sweeper().await
}
