//! What every HTTP Lambda function does: read settings, build the clients once, serve its
//! family of routes from the shared router through `lambda_http`.

use crate::{app::App, config::Settings, http, telemetry};

pub async fn run(routes: http::Routes) -> Result<(), lambda_http::Error> {
    telemetry::init();
    let settings = Settings::from_env()?;
    let app = App::new(&settings)?;
    lambda_http::run(http::router(app, routes)).await
}
