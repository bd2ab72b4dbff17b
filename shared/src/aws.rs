//! AWS SDK clients' shared configuration: the default credential chain and region in Lambda,
//! or a local endpoint (moto in tests, or any SQS/Secrets Manager emulator) with dummy keys; and
//! the configuration's look-ups that need AWS (the secrets the environment names, an MSK
//! cluster's brokers), kept out of `config`, which only reads the environment.

use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_sqs::config::{Credentials, Region};
use secrecy::SecretString;

use crate::config::{ConfigError, DatabaseCredentials, KafkaAuth, Settings};

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

/// The look-ups of [`Settings::load`] that need AWS: the secrets the environment names and an
/// MSK cluster's brokers, at cold start.
impl Settings {
    /// Reads the bootstrap brokers of the MSK cluster `KAFKA_CLUSTER_ARN` names, when
    /// `KAFKA_BROKERS` is not set (CloudFormation cannot hand a serverless cluster's brokers
    /// to a function). At cold start, so that provisioned concurrency does it before a sale.
    pub async fn resolve_kafka_brokers(&mut self) -> Result<(), ConfigError> {
        let Some(kafka) = self.events.kafka.as_mut() else {
            return Ok(());
        };
        let Some(arn) = kafka
            .cluster_arn
            .clone()
            .filter(|_| kafka.brokers.is_empty())
        else {
            return Ok(());
        };
        let problem = |problem: String| ConfigError {
            name: "KAFKA_CLUSTER_ARN",
            problem,
        };
        let sdk = crate::aws::sdk_config(self.aws.endpoint_url.as_deref(), &self.aws.region).await;
        let out = aws_sdk_kafka::Client::new(&sdk)
            .get_bootstrap_brokers()
            .cluster_arn(&arn)
            .send()
            .await
            .map_err(|e| {
                problem(format!(
                    "bootstrap brokers of {arn} could not be read: {}",
                    aws_sdk_kafka::error::DisplayErrorContext(e)
                ))
            })?;
        let brokers = match kafka.auth {
            KafkaAuth::Iam => out.bootstrap_broker_string_sasl_iam(),
            KafkaAuth::Tls => out.bootstrap_broker_string_tls(),
            KafkaAuth::None => out.bootstrap_broker_string(),
        };
        kafka.brokers = brokers
            .filter(|b| !b.is_empty())
            .ok_or_else(|| {
                problem(format!(
                    "{arn} has no brokers for KAFKA_AUTH={:?}",
                    kafka.auth
                ))
            })?
            .to_owned();
        Ok(())
    }

    /// Reads the database credentials from Secrets Manager when `DATABASE_SECRET_ARN` is set,
    /// the application role's when `APP_DATABASE_SECRET_ARN` is, and Redis' AUTH token when
    /// `REDIS_AUTH_SECRET_ARN` is.
    pub async fn resolve_secrets(&mut self) -> Result<(), ConfigError> {
        let database = &mut self.database;
        if database.secret_arn.is_none()
            && database.app_secret_arn.is_none()
            && self.redis.auth_secret_arn.is_none()
        {
            return Ok(());
        }
        let sdk = crate::aws::sdk_config(self.aws.endpoint_url.as_deref(), &self.aws.region).await;
        let client = aws_sdk_secretsmanager::Client::new(&sdk);
        if let Some(arn) = &database.secret_arn {
            database.credentials =
                Some(read_credentials(&client, "DATABASE_SECRET_ARN", arn).await?);
        }
        if let Some(arn) = &database.app_secret_arn {
            database.app_role =
                Some(read_credentials(&client, "APP_DATABASE_SECRET_ARN", arn).await?);
        }
        if let Some(arn) = &self.redis.auth_secret_arn {
            let token: RedisToken =
                read_secret(&client, "REDIS_AUTH_SECRET_ARN", arn, r#"{"password": ..}"#).await?;
            self.redis.password = Some(token.password);
        }
        Ok(())
    }
}

/// One `{"username": .., "password": ..}` secret; `name` is the variable that named it.
async fn read_credentials(
    client: &aws_sdk_secretsmanager::Client,
    name: &'static str,
    arn: &str,
) -> Result<DatabaseCredentials, ConfigError> {
    read_secret(client, name, arn, r#"{"username": .., "password": ..}"#).await
}

/// The cache's AUTH token secret: `{"password": ..}`.
#[derive(serde::Deserialize)]
struct RedisToken {
    password: SecretString,
}

/// One JSON secret of the shape `T`; `name` is the variable that named it.
async fn read_secret<T: serde::de::DeserializeOwned>(
    client: &aws_sdk_secretsmanager::Client,
    name: &'static str,
    arn: &str,
    shape: &str,
) -> Result<T, ConfigError> {
    let problem = |problem: String| ConfigError { name, problem };
    let secret = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| {
            problem(format!(
                "secret {arn} could not be read: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(e)
            ))
        })?;
    let text = secret
        .secret_string()
        .ok_or_else(|| problem(format!("secret {arn} has no string value")))?;
    serde_json::from_str(text).map_err(|e| {
        // The secret's text is never echoed: it holds the password.
        problem(format!(
            "secret {arn} is not {shape} JSON ({:?} error)",
            e.classify()
        ))
    })
}
