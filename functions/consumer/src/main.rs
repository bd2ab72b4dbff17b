//! Lambda function: consumes `voucher-reserved` events from SQS (mode B) and reports partial
//! batch failures. See `shared::consumer`.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::lambda::run_consumer().await
}
