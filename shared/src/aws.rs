//! AWS SDK clients' shared configuration: the default credential chain and region in Lambda,
//! or a local endpoint (moto in tests, or any SQS/Secrets Manager emulator) with dummy keys.

use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_sqs::config::{Credentials, Region};

/// The configuration every AWS client of the process is built from.
pub async fn sdk_config(endpoint: Option<&str>, region: &str) -> SdkConfig {
    let loader =
        aws_config::defaults(BehaviorVersion::latest()).region(Region::new(region.to_owned()));
    match endpoint {
        // A local endpoint: no credential chain to walk, dummy keys will do.
        Some(endpoint) => {
            loader
                .endpoint_url(endpoint)
                .credentials_provider(Credentials::new("local", "local", None, None, "flashgate"))
                .load()
                .await
        }
        None => loader.load().await,
    }
}
