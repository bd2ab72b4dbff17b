//! Lambda function: applies pending database migrations when invoked (once after each deploy;
//! see docs/DEPLOY.md). The other functions never migrate, so a cold start stays fast.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::lambda::run_migrate().await
}
