//! Lambda function: `GET /health/live`, the one unsigned route. It reads no settings and opens
//! no connection, and has a small reserved concurrency of its own (template.yaml), so a flood
//! of it can neither reach the database nor spend the concurrency the reserve function needs.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::lambda::run_live().await
}
