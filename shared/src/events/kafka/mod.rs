//! Kafka (Amazon MSK, or any Kafka-protocol broker): `voucher-reserved` events on one topic,
//! keyed by gate: a voucher's code, or `campaign:ID` for every code of a flash-sale campaign.
//!
//! - **Partitioning.** The partition is computed here, not by the client library:
//!   `murmur2(key) % partitions`, the hash Kafka's Java clients use. The warm-up has to know
//!   which partition may still hold a gate's events, so the producer and the lag reader must
//!   agree, and a partitioner configured elsewhere could silently disagree.
//! - **Producing.** Idempotent, `acks=all`, each send bounded by `EVENTS_TIMEOUT_MS`: past it
//!   the reserve answers 503 and the order stays pending in the gate for the orphan sweep.
//! - **In flight.** The key's partition's high watermark less the consumer group's committed
//!   offset there, plus what this process has produced and not yet had acknowledged. The group
//!   commits only after Postgres did, so a lag of zero means every event of that partition has
//!   landed.
//! - **Consuming** (`flashgate serve`): a member of the consumer group takes what is ready, up to
//!   a batch, merges it in one transaction, sends what can never land to the dead-letter topic,
//!   and commits each partition's offset up to its first event that failed for a reason that
//!   may pass (Postgres down); from there the partition is read again after a pause.
//! - **Auth.** `KAFKA_AUTH=iam` is SASL/OAUTHBEARER over TLS with the token MSK's IAM auth
//!   expects, signed from the process's AWS credentials; `tls` is TLS alone.
//!
//! One concept a file:
//! - `partitioner.rs`: the partition of a gate's events, and the topic's partition count.
//! - `client.rs`: what every client shares (settings, the IAM token context, blocking calls),
//!   and the topics' creation.
//! - `producer.rs`: the idempotent producer, its sends, and the dead-letter topic.
//! - `lag.rs`: a voucher's events in flight.
//! - `settle.rs`: a batch of records merged, dead-lettered, or left to read again.
//! - `member.rs`: the consumer-group member of `flashgate serve`.
//! - `msk.rs`: the Lambda handler for an MSK event source.

mod client;
mod lag;
mod member;
mod msk;
mod partitioner;
mod producer;
mod settle;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, Producer as _};

use super::{EventError, ReservedEvent, Sink, Transport};
use crate::config::KafkaSettings;
use client::{blocking, client_config, Context};

pub use msk::KafkaBatchError;
pub use partitioner::partition_for;
pub use settle::Record;

const BROKER: &str = "Kafka";

fn kafka(op: &'static str) -> impl FnOnce(KafkaError) -> EventError {
    EventError::broker(BROKER, op)
}

pub struct Kafka {
    settings: KafkaSettings,
    timeout: Duration,
    context: Context,
    /// Built on the first send, so that functions that never produce never ask the brokers for
    /// a producer id (with IAM they may not write), and built again after a fatal error: an
    /// idempotent producer that lost its producer id (a broker that forgot it) refuses every
    /// later record. A std Mutex: held only to clone or replace the `Arc`, never across an await.
    producer: Mutex<Option<Arc<FutureProducer<Context>>>>,
    /// Records this process has handed to the producer whose send has not ended. Counted here
    /// rather than read from librdkafka's queue length, which also counts queued events that
    /// are not records (logs, statistics, errors) and would report a record that is not there.
    unacknowledged: AtomicU64,
    /// Reads watermarks and the group's committed offsets; never joins the group.
    observer: Arc<BaseConsumer<Context>>,
    /// The topic's partition count, read once.
    partitions: OnceLock<i32>,
}

impl Kafka {
    /// Builds the clients; they connect in the background, on first use.
    pub fn new(settings: KafkaSettings, timeout: Duration) -> Result<Kafka, EventError> {
        let context = Context::new(&settings)?;
        let observer = client_config(&settings)
            .set("group.id", &settings.group)
            .set("enable.auto.commit", "false")
            .create_with_context(context.clone())
            .map_err(kafka("client"))?;
        Ok(Kafka {
            settings,
            timeout,
            context,
            producer: Mutex::new(None),
            unacknowledged: AtomicU64::new(0),
            observer: Arc::new(observer),
            partitions: OnceLock::new(),
        })
    }

    pub fn topic(&self) -> &str {
        &self.settings.topic
    }

    pub fn dlq_topic(&self) -> &str {
        &self.settings.dlq_topic
    }
}

impl Transport for Kafka {
    fn name(&self) -> &'static str {
        BROKER
    }

    fn send<'a>(&'a self, event: &'a ReservedEvent) -> BoxFuture<'a, Result<(), EventError>> {
        self.produce(event).boxed()
    }

    fn send_timeout(&self) -> Duration {
        self.timeout
    }

    fn in_flight<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u64, EventError>> {
        self.lag(key).boxed()
    }

    fn prepare(&self) -> BoxFuture<'_, Result<(), EventError>> {
        self.create_topics().boxed()
    }

    fn connect(&self) -> BoxFuture<'_, Result<(), EventError>> {
        async {
            // The producer learns the topic's leaders now: on a first send it would ask the
            // brokers first, and every winner of a sale's first moment would wait for that.
            let (producer, topic, timeout) =
                (self.producer()?, self.settings.topic.clone(), self.timeout);
            blocking(move || {
                producer
                    .client()
                    .fetch_metadata(Some(&topic), timeout)
                    .map_err(kafka("Metadata"))
            })
            .await?;
            self.partitions().await?;
            Ok(())
        }
        .boxed()
    }

    fn consume(self: Arc<Self>, sink: Arc<dyn Sink>) -> BoxFuture<'static, ()> {
        self.run(sink).boxed()
    }
}
