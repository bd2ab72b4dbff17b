//! Producing: idempotent, `acks=all`, each send bounded by `EVENTS_TIMEOUT_MS`; the events to
//! their gate's partition (a voucher's, or a flash-sale campaign's), and what can never land to the dead-letter topic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::util::Timeout;

use super::client::{client_config, Context};
use super::{kafka, Kafka, BROKER};
use crate::events::{bounded, EventError, ReservedEvent};

impl Kafka {
    pub(super) fn producer(&self) -> Result<Arc<FutureProducer<Context>>, EventError> {
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

    pub(super) async fn produce(&self, event: &ReservedEvent) -> Result<(), EventError> {
        let key = event.key();
        let partition = self.partition_of(&key).await?;
        let body = event.to_json();
        let record = FutureRecord::to(&self.settings.topic)
            .key(key.as_ref())
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
        let _unacknowledged = Unacknowledged::count(&self.unacknowledged);
        bounded(BROKER, "publish", self.timeout, async {
            producer
                .send(record, Timeout::After(self.timeout))
                .await
                .map_err(|(e, _)| kafka("Produce")(e))?;
            Ok(())
        })
        .await
    }

    /// Sends a record that can never land to the dead-letter topic, with the reason.
    pub(super) async fn dead_letter(
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
}

/// One record counted in [`Kafka::lag`] from before it is handed to the producer until its send
/// ends, acknowledged, refused or given up at the timeout (a record given up on may still land
/// within the send timeout, which a warm-up after a data loss waits out anyway).
struct Unacknowledged<'a>(&'a AtomicU64);

impl<'a> Unacknowledged<'a> {
    fn count(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        Unacknowledged(counter)
    }
}

impl Drop for Unacknowledged<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
