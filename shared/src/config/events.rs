//! `events`: mode B's transport, SQS or Kafka (MSK), and how it is reached.

use std::time::Duration;

/// Mode B's events: which transport carries them, and who consumes them.
#[derive(Debug, Clone)]
pub struct EventSettings {
    /// `EVENTS_QUEUE_URL`: mode B on SQS, the queue of `voucher-reserved` events. Unset, and no
    /// `kafka`: mode A.
    pub queue_url: Option<String>,
    /// `EVENTS_DLQ_URL`: the queue's dead-letter queue. An event that can never land is sent
    /// there at once with its reason (message attribute `error`), rather than received again
    /// until the queue's `maxReceiveCount` moves it. Unset: the redrive policy alone.
    pub dlq_url: Option<String>,
    /// `SQS_ENDPOINT_URL`: SQS endpoint override (a local SQS such as moto); dummy credentials
    /// are used with it. Defaults to `AWS_ENDPOINT_URL`.
    pub sqs_endpoint_url: Option<String>,
    /// Mode B on Kafka (`KAFKA_BROKERS` or `KAFKA_CLUSTER_ARN` set); it wins over SQS.
    pub kafka: Option<KafkaSettings>,
    /// `EVENTS_POLL`: `flashgate serve` consumes the queue itself (off when a consumer runs
    /// elsewhere).
    pub poll: bool,
    /// `EVENTS_TIMEOUT_MS`: bound on sending one event; past it the reserve answers 503.
    pub timeout: Duration,
}

/// Mode B's Kafka topic and who reads it.
#[derive(Debug, Clone)]
pub struct KafkaSettings {
    /// Bootstrap servers, comma-separated (`KAFKA_BROKERS`). In AWS it may instead be read at
    /// start from the MSK cluster named by `KAFKA_CLUSTER_ARN` ([`Settings::load`]).
    pub brokers: String,
    pub cluster_arn: Option<String>,
    /// `KAFKA_TOPIC`, default `voucher-reserved`.
    pub topic: String,
    /// `KAFKA_DLQ_TOPIC`, default `voucher-reserved-dlq`: records that can never land.
    pub dlq_topic: String,
    /// `KAFKA_GROUP`, default `flashgate-consumer`: the consumer group whose committed offsets
    /// say what has landed (the MSK event source mapping's consumer group id in AWS).
    pub group: String,
    /// `KAFKA_AUTH`: `none` (default), `tls`, or `iam` (MSK IAM over SASL/OAUTHBEARER).
    pub auth: KafkaAuth,
    /// `KAFKA_PARTITIONS`, default 8: partitions of the topic when the service creates it.
    pub partitions: i32,
    /// `KAFKA_REPLICATION`, default -1 (the brokers' default): replicas of created topics.
    pub replication: i32,
    /// `KAFKA_LINGER_MS`, default 1: how long the producer waits to fill a batch.
    pub linger_ms: u64,
    /// `KAFKA_BATCH_MESSAGES`, default 10000: most records in one produce batch. 1 for a broker
    /// that misreports the end offset of multi-record batches (see docs/BENCHMARKS.md).
    pub batch_messages: u32,
    /// `KAFKA_SESSION_TIMEOUT_MS`, default 6000 (the least most brokers allow): how long a
    /// dead consumer-group member (`flashgate serve`) holds its partitions.
    pub session_timeout_ms: u32,
    /// The AWS region IAM tokens are signed for.
    pub region: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaAuth {
    None,
    Tls,
    Iam,
}

impl std::str::FromStr for KafkaAuth {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "plaintext" => Ok(KafkaAuth::None),
            "tls" => Ok(KafkaAuth::Tls),
            "iam" => Ok(KafkaAuth::Iam),
            _ => Err("expected none, tls or iam".to_owned()),
        }
    }
}
