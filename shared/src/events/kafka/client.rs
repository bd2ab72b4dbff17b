//! What every client of the transport shares: the settings (brokers, TLS/IAM), the context that
//! signs MSK IAM tokens, a way to run the clients' blocking calls, and the topics' creation.

use std::error::Error;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::OAuthToken;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::ClientContext;

use super::{kafka, Kafka, BROKER};
use crate::config::{KafkaAuth, KafkaSettings};
use crate::events::{bounded, EventError};

/// The client context: signs MSK IAM tokens when `KAFKA_AUTH=iam`.
#[derive(Clone)]
pub(super) struct Context {
    /// The region to sign for, and the runtime to sign on: librdkafka asks for a token from
    /// its own thread, and loading AWS credentials is async.
    iam: Option<(String, tokio::runtime::Handle)>,
}

impl Context {
    /// The context for `settings`: with `KAFKA_AUTH=iam`, it signs on the current runtime.
    pub(super) fn new(settings: &KafkaSettings) -> Result<Context, EventError> {
        let iam = match settings.auth {
            KafkaAuth::Iam => Some((
                settings.region.clone(),
                tokio::runtime::Handle::try_current()
                    .map_err(EventError::broker(BROKER, "client"))?,
            )),
            _ => None,
        };
        Ok(Context { iam })
    }
}

impl ClientContext for Context {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, _config: Option<&str>) -> Result<OAuthToken, Box<dyn Error>> {
        let (region, runtime) = self
            .iam
            .as_ref()
            .ok_or("OAUTHBEARER is used only with KAFKA_AUTH=iam")?;
        let region = aws_config::Region::new(region.clone());
        let (token, lifetime_ms) =
            runtime.block_on(aws_msk_iam_sasl_signer::generate_auth_token(region))?;
        Ok(OAuthToken {
            token,
            principal_name: String::new(),
            lifetime_ms,
        })
    }
}

impl ConsumerContext for Context {}

/// The settings every client of the transport shares: brokers, and TLS/IAM.
pub(super) fn client_config(s: &KafkaSettings) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &s.brokers)
        // Small requests on the reserve path: without this, Nagle's algorithm holds a produce
        // request back until the last one is acknowledged.
        .set("socket.nagle.disable", "true")
        // Topics are created with their partition count by `prepare`, never by a client that
        // names one: a topic made on the fly would have the broker's default count, and every
        // gate's partition would move.
        .set("allow.auto.create.topics", "false");
    match s.auth {
        KafkaAuth::None => {}
        KafkaAuth::Tls => {
            config.set("security.protocol", "SSL");
        }
        KafkaAuth::Iam => {
            config
                .set("security.protocol", "SASL_SSL")
                .set("sasl.mechanism", "OAUTHBEARER");
        }
    }
    config
}

/// Runs a blocking client call off the async workers.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EventError> + Send + 'static,
) -> Result<T, EventError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| EventError::broker(BROKER, "client")(e.to_string()))?
}

impl Kafka {
    /// Creates the topic and its dead-letter topic, with `KAFKA_PARTITIONS` partitions, unless
    /// they exist.
    pub(super) async fn create_topics(&self) -> Result<(), EventError> {
        let admin: AdminClient<Context> = client_config(&self.settings)
            .create_with_context(self.context.clone())
            .map_err(kafka("client"))?;
        let replication = || TopicReplication::Fixed(self.settings.replication);
        let topics = [
            NewTopic::new(
                &self.settings.topic,
                self.settings.partitions,
                replication(),
            ),
            NewTopic::new(&self.settings.dlq_topic, 1, replication()),
        ];
        // A managed cluster may take seconds to create a topic; this runs at deploy, not on a
        // request.
        let limit = self.timeout.max(Duration::from_secs(30));
        let options = AdminOptions::new().operation_timeout(Some(limit));
        let results = bounded(BROKER, "create_topics", limit * 2, async {
            admin
                .create_topics(&topics, &options)
                .await
                .map_err(kafka("CreateTopics"))
        })
        .await?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => {
                    return Err(EventError::broker(BROKER, "CreateTopics")(format!(
                        "topic {topic}: {code}"
                    )))
                }
            }
        }
        Ok(())
    }
}
