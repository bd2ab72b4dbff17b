//! Lambda function: the admin routes of the shared router (see `shared::http::Routes`).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::lambda::run(shared::http::Routes::Admin).await
}
