//! Lambda function: the confirm routes of the shared router (see `shared::http::Routes`).

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::lambda::run(shared::http::Routes::Confirm).await
}
