//! Kafka (Amazon MSK, or any Kafka-protocol broker): `voucher-reserved` events on one topic,
//! keyed by voucher code.
//!
//! - **Partitioning.** The partition is computed here, not by the client library:
//!   `murmur2(code) % partitions`, the hash Kafka's Java clients use. The warm-up has to know
//!   which partition may still hold a voucher's events, so the producer and the lag reader must
//!   agree, and a partitioner configured elsewhere could silently disagree.
//! - **Producing.** Idempotent, `acks=all`, each send bounded by `EVENTS_TIMEOUT_MS`: past it
//!   the reserve answers 503 and the order stays pending in the gate for the orphan sweep.
//! - **In flight.** The voucher's partition's high watermark less the consumer group's committed
//!   offset there, plus what this process has produced and not yet had acknowledged. The group
//!   commits only after Postgres did, so a lag of zero means every event of that partition has
//!   landed.
//! - **Consuming** (`flashgate serve`): a member of the consumer group takes what is ready, up to
//!   a batch, merges it in one transaction, sends what can never land to the dead-letter topic,
//!   and commits each partition's offset up to its first event that failed for a reason that
//!   may pass (Postgres down); from there the partition is read again after a pause.
//! - **Auth.** `KAFKA_AUTH=iam` is SASL/OAUTHBEARER over TLS with the token MSK's IAM auth
//!   expects, signed from the process's AWS credentials; `tls` is TLS alone.

use std::error::Error;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use aws_lambda_events::kafka::KafkaEvent;
use base64::Engine as _;
use futures::future::BoxFuture;
use futures::FutureExt;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::OAuthToken;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _, ConsumerContext, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::util::Timeout;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};

use super::{bounded, EventError, Landing, ReservedEvent, Sink, Transport};
use crate::config::{KafkaAuth, KafkaSettings};
use crate::domain::VoucherCode;
use crate::telemetry::Chain;
use crate::telemetry::{emit_metrics, Unit};

const BROKER: &str = "Kafka";
/// Records merged in one transaction by the consumer-group member.
const BATCH_MAX: usize = 500;
/// How long a partition waits before its failed records are read again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The partition of a voucher's events: Kafka's default partitioner for a keyed record
/// (`toPositive(murmur2(key)) % partitions`).
pub fn partition_for(code: &str, partitions: i32) -> i32 {
    (murmur2(code.as_bytes()) & 0x7fff_ffff) as i32 % partitions.max(1)
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), seed 0x9747b28c.
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// Why an MSK batch (Lambda's event source) is answered with a failure: the event source
/// retries the whole batch, then records it in its on-failure destination.
#[derive(Debug, thiserror::Error)]
#[error("{failed} of {total} records did not land (first: {first})")]
pub struct KafkaBatchError {
    pub failed: usize,
    pub total: usize,
    pub first: String,
}

/// The client context: signs MSK IAM tokens when `KAFKA_AUTH=iam`.
#[derive(Clone)]
struct Context {
    /// The region to sign for, and the runtime to sign on: librdkafka asks for a token from
    /// its own thread, and loading AWS credentials is async.
    iam: Option<(String, tokio::runtime::Handle)>,
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
    /// Reads watermarks and the group's committed offsets; never joins the group.
    observer: Arc<BaseConsumer<Context>>,
    /// The topic's partition count, read once.
    partitions: OnceLock<i32>,
}

impl Kafka {
    /// Builds the clients; they connect in the background, on first use.
    pub fn new(settings: KafkaSettings, timeout: Duration) -> Result<Kafka, EventError> {
        let iam = match settings.auth {
            KafkaAuth::Iam => Some((
                settings.region.clone(),
                tokio::runtime::Handle::try_current()
                    .map_err(EventError::broker(BROKER, "client"))?,
            )),
            _ => None,
        };
        let context = Context { iam };
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
            observer: Arc::new(observer),
            partitions: OnceLock::new(),
        })
    }

    fn producer(&self) -> Result<Arc<FutureProducer<Context>>, EventError> {
        let mut slot = self.producer.lock().expect("producer lock");
        if let Some(producer) = slot.as_ref() {
            if producer.client().fatal_error().is_none() {
                return Ok(producer.clone());
            }
            tracing::warn!("Kafka producer failed fatally; building a new one");
        }
        let producer: FutureProducer<Context> = client_config(&self.settings)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // A sale's winners share a few partitions: a millisecond of linger batches them.
            .set("linger.ms", self.settings.linger_ms.to_string())
            .set(
                "batch.num.messages",
                self.settings.batch_messages.to_string(),
            )
            // librdkafka gives up on a record at the same bound the reserve path waits.
            .set(
                "message.timeout.ms",
                self.timeout.as_millis().max(1).to_string(),
            )
            .create_with_context(self.context.clone())
            .map_err(kafka("client"))?;
        let producer = Arc::new(producer);
        *slot = Some(producer.clone());
        Ok(producer)
    }

    pub fn topic(&self) -> &str {
        &self.settings.topic
    }

    pub fn dlq_topic(&self) -> &str {
        &self.settings.dlq_topic
    }

    /// The topic's partition count (read from the brokers the first time).
    pub async fn partitions(&self) -> Result<i32, EventError> {
        if let Some(n) = self.partitions.get() {
            return Ok(*n);
        }
        let (observer, topic, timeout) = (
            self.observer.clone(),
            self.settings.topic.clone(),
            self.timeout,
        );
        let n = blocking(move || {
            let metadata = observer
                .fetch_metadata(Some(&topic), timeout)
                .map_err(kafka("Metadata"))?;
            let n = metadata
                .topics()
                .iter()
                .find(|t| t.name() == topic)
                .map(|t| t.partitions().len())
                .unwrap_or(0);
            if n == 0 {
                return Err(EventError::broker(BROKER, "Metadata")(format!(
                    "topic {topic} has no partitions (run `flashgate migrate`)"
                )));
            }
            Ok(n as i32)
        })
        .await?;
        Ok(*self.partitions.get_or_init(|| n))
    }

    /// The partition `code`'s events go to.
    pub async fn partition_of(&self, code: &str) -> Result<i32, EventError> {
        Ok(partition_for(code, self.partitions().await?))
    }

    async fn produce(&self, event: &ReservedEvent) -> Result<(), EventError> {
        let partition = self.partition_of(&event.code).await?;
        let body = event.to_json();
        let record = FutureRecord::to(&self.settings.topic)
            .key(&event.code)
            .payload(&body)
            .partition(partition);
        self.send_record(record).await
    }

    /// Sends one record, within `EVENTS_TIMEOUT_MS`.
    async fn send_record<K, P>(&self, record: FutureRecord<'_, K, P>) -> Result<(), EventError>
    where
        K: rdkafka::message::ToBytes + ?Sized,
        P: rdkafka::message::ToBytes + ?Sized,
    {
        let producer = self.producer()?;
        bounded(BROKER, self.timeout, async {
            producer
                .send(record, Timeout::After(self.timeout))
                .await
                .map_err(|(e, _)| kafka("Produce")(e))?;
            Ok(())
        })
        .await
    }

    /// Records of `code`'s partition not yet committed by the consumer group, plus records this
    /// process has produced that the brokers have not acknowledged.
    async fn lag(&self, code: &VoucherCode) -> Result<u64, EventError> {
        let partition = self.partition_of(code.as_str()).await?;
        let unacknowledged = match self.producer.lock().expect("producer lock").as_ref() {
            Some(producer) => producer.in_flight_count().max(0) as u64,
            None => 0,
        };
        let (observer, topic, timeout) = (
            self.observer.clone(),
            self.settings.topic.clone(),
            self.timeout,
        );
        let lag = bounded(
            BROKER,
            self.timeout,
            blocking(move || {
                // Serves a pending token refresh (IAM auth): this client is never polled else.
                let _ = observer.poll(Duration::ZERO);
                let (low, high) = observer
                    .fetch_watermarks(&topic, partition, timeout)
                    .map_err(kafka("ListOffsets"))?;
                let mut wanted = TopicPartitionList::new();
                wanted.add_partition(&topic, partition);
                let committed = observer
                    .committed_offsets(wanted, timeout)
                    .map_err(kafka("OffsetFetch"))?;
                let committed = committed
                    .find_partition(&topic, partition)
                    .and_then(|p| match p.offset() {
                        Offset::Offset(o) => Some(o),
                        _ => None,
                    })
                    // Nothing committed yet: the group starts from the earliest record.
                    .unwrap_or(low);
                Ok((high - committed.max(low)).max(0) as u64)
            }),
        )
        .await?;
        Ok(lag + unacknowledged)
    }

    /// Creates the topic and its dead-letter topic, with `KAFKA_PARTITIONS` partitions, unless
    /// they exist.
    async fn create_topics(&self) -> Result<(), EventError> {
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
        let results = bounded(BROKER, limit * 2, async {
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

    /// Sends a record that can never land to the dead-letter topic, with the reason.
    async fn dead_letter(
        &self,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        reason: &str,
    ) -> Result<(), EventError> {
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.settings.dlq_topic)
            .headers(OwnedHeaders::new().insert(Header {
                key: "error",
                value: Some(reason),
            }));
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(payload) = payload {
            record = record.payload(payload);
        }
        self.send_record(record).await
    }

    /// Consumes as a member of the group until dropped; a member that fails is built again.
    async fn run(self: Arc<Self>, sink: Arc<dyn Sink>) {
        loop {
            match self.member() {
                Ok(member) => self.consume_with(&member, sink.as_ref()).await,
                Err(e) => tracing::warn!(error = %Chain(&e), "Kafka consumer could not start"),
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    fn member(&self) -> Result<StreamConsumer<Context>, EventError> {
        let member: StreamConsumer<Context> = client_config(&self.settings)
            .set("group.id", &self.settings.group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            // A member that dies gives its partitions up after this; a join also waits on it.
            .set(
                "session.timeout.ms",
                self.settings.session_timeout_ms.to_string(),
            )
            .set(
                "heartbeat.interval.ms",
                (self.settings.session_timeout_ms / 4).max(100).to_string(),
            )
            .create_with_context(self.context.clone())
            .map_err(kafka("client"))?;
        member
            .subscribe(&[&self.settings.topic])
            .map_err(kafka("Subscribe"))?;
        Ok(member)
    }

    async fn consume_with(&self, member: &StreamConsumer<Context>, sink: &dyn Sink) {
        loop {
            let first = match member.recv().await {
                Ok(m) => m.detach(),
                Err(e) => {
                    tracing::warn!(error = %e, "Kafka receive failed");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            // What is ready now joins the batch; nothing waits for more.
            let mut batch = vec![first];
            while batch.len() < BATCH_MAX {
                match member.recv().now_or_never() {
                    Some(Ok(m)) => batch.push(m.detach()),
                    _ => break,
                }
            }
            let records: Vec<Record<'_>> = batch
                .iter()
                .map(|m| Record {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key(),
                    payload: m.payload(),
                })
                .collect();
            let landed = self.settle(sink, &records).await;
            // Per partition: the offset to commit, and whether a record failed there.
            let mut partitions: Vec<(i32, i64, bool)> = Vec::new();
            for (r, landed) in records.iter().zip(landed) {
                match partitions.iter_mut().find(|(p, _, _)| *p == r.partition) {
                    Some((_, _, true)) => {}
                    Some(entry) if landed => entry.1 = r.offset + 1,
                    Some(entry) => *entry = (r.partition, r.offset, true),
                    None if landed => partitions.push((r.partition, r.offset + 1, false)),
                    None => partitions.push((r.partition, r.offset, true)),
                }
            }
            let mut commit = TopicPartitionList::new();
            for (p, next, _) in &partitions {
                let _ =
                    commit.add_partition_offset(&self.settings.topic, *p, Offset::Offset(*next));
            }
            // After Postgres committed: a member killed before this line leaves the records to be
            // read again by the next one, and they merge into nothing.
            if let Err(e) = member.commit(&commit, CommitMode::Async) {
                tracing::warn!(error = %e, "offset commit failed");
            }
            let failed: Vec<(i32, i64)> = partitions
                .iter()
                .filter(|(_, _, failed)| *failed)
                .map(|(p, next, _)| (*p, *next))
                .collect();
            if !failed.is_empty() {
                tokio::time::sleep(RETRY_PAUSE).await;
                for (p, offset) in failed {
                    if let Err(e) = member.seek(
                        &self.settings.topic,
                        p,
                        Offset::Offset(offset),
                        Duration::from_secs(5),
                    ) {
                        // Rebuilt from the committed offsets: the records come back either way.
                        tracing::warn!(partition = p, error = %e, "seek failed; rejoining");
                        return;
                    }
                }
            }
        }
    }
}

type Bytes = Vec<u8>;

/// One record as the consumer needs it, whoever delivered it.
pub struct Record<'a> {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub payload: Option<&'a [u8]>,
}

impl Kafka {
    /// Merges a batch of records in one transaction, and sends what can never land (poison, a
    /// panic) to the dead-letter topic with the reason. True for each record that is done with:
    /// landed, or dead-lettered; false for one to read again (Postgres unreachable, or the
    /// dead-letter topic).
    pub async fn settle(&self, sink: &dyn Sink, records: &[Record<'_>]) -> Vec<bool> {
        let bodies: Vec<String> = records
            .iter()
            .map(|r| String::from_utf8_lossy(r.payload.unwrap_or_default()).into_owned())
            .collect();
        let refs: Vec<&str> = bodies.iter().map(String::as_str).collect();
        let landings = sink.land(&refs).await;
        let mut done = Vec::with_capacity(records.len());
        for (r, landing) in records.iter().zip(landings) {
            done.push(match landing {
                Landing::Landed => true,
                Landing::Poison(reason) => {
                    tracing::warn!(partition = r.partition, offset = r.offset, error = %reason, "record to the dead-letter topic");
                    emit_metrics("consumer", &[("DeadLettered", Unit::Count, 1)]);
                    match self.dead_letter(r.key, r.payload, &reason).await {
                        Ok(()) => true,
                        Err(e) => {
                            tracing::warn!(error = %Chain(&e), "dead-letter topic unreachable");
                            false
                        }
                    }
                }
                Landing::Retry(reason) => {
                    tracing::warn!(partition = r.partition, offset = r.offset, error = %reason, "record failed; to be read again");
                    false
                }
            });
        }
        done
    }

    /// The Lambda handler body for an MSK event source: the batch's records (base64 values)
    /// settled as in [`Kafka::settle`]. The event source commits the batch only on Ok; when a
    /// record must be read again the invocation fails, and the event source retries the batch
    /// (what landed merges into nothing the second time) and, its retries spent, records the
    /// batch in its on-failure destination.
    pub async fn handle_msk(
        &self,
        sink: &dyn Sink,
        event: KafkaEvent,
    ) -> Result<usize, KafkaBatchError> {
        let mut records: Vec<_> = event.records.into_values().flatten().collect();
        // Each partition's records in their order, whatever order the map gave the partitions.
        records.sort_by_key(|r| (r.partition, r.offset));
        let decode = |v: &Option<String>| {
            v.as_deref()
                .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
        };
        // (key, value), decoded.
        let raw: Vec<(Option<Bytes>, Option<Bytes>)> = records
            .iter()
            .map(|r| (decode(&r.key), decode(&r.value)))
            .collect();
        let views: Vec<Record<'_>> = records
            .iter()
            .zip(&raw)
            .map(|(r, (key, value))| Record {
                partition: r.partition as i32,
                offset: r.offset,
                key: key.as_deref(),
                payload: value.as_deref(),
            })
            .collect();
        let done = self.settle(sink, &views).await;
        let total = done.len();
        let failed: Vec<&Record<'_>> = views
            .iter()
            .zip(&done)
            .filter(|(_, done)| !**done)
            .map(|(r, _)| r)
            .collect();
        match failed.first() {
            None => Ok(total),
            Some(first) => Err(KafkaBatchError {
                failed: failed.len(),
                total,
                first: format!("partition {} offset {}", first.partition, first.offset),
            }),
        }
    }
}

/// The settings every client of the transport shares: brokers, and TLS/IAM.
fn client_config(s: &KafkaSettings) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &s.brokers)
        // Small requests on the reserve path: without this, Nagle's algorithm holds a produce
        // request back until the last one is acknowledged.
        .set("socket.nagle.disable", "true")
        // Topics are created with their partition count by `prepare`, never by a client that
        // names one: a topic made on the fly would have the broker's default count, and every
        // voucher's partition would move.
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
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EventError> + Send + 'static,
) -> Result<T, EventError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| EventError::broker(BROKER, "client")(e.to_string()))?
}

impl Transport for Kafka {
    fn name(&self) -> &'static str {
        BROKER
    }

    fn send<'a>(&'a self, event: &'a ReservedEvent) -> BoxFuture<'a, Result<(), EventError>> {
        self.produce(event).boxed()
    }

    fn in_flight<'a>(&'a self, code: &'a VoucherCode) -> BoxFuture<'a, Result<u64, EventError>> {
        self.lag(code).boxed()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_is_kafkas() {
        // Kafka's own test vectors (UtilsTest.testMurmur2), as signed 32-bit integers.
        let cases: [(&str, i32); 6] = [
            ("21", -973932308),
            ("foobar", -790332482),
            ("a-little-bit-long-string", -985981536),
            ("a-little-bit-longer-string", -1486304829),
            (
                "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58897971,
            ),
            ("abc", 479470107),
        ];
        for (key, want) in cases {
            assert_eq!(murmur2(key.as_bytes()) as i32, want, "{key}");
        }
    }

    #[test]
    fn a_voucher_always_lands_on_the_same_partition_in_range() {
        for code in ["SALE100K", "A", "FLASH-2026-12"] {
            let p = partition_for(code, 8);
            assert!((0..8).contains(&p));
            assert_eq!(p, partition_for(code, 8));
        }
        assert_eq!(partition_for("ANY", 1), 0);
    }
}
