//! Consuming in `flashgate serve`: a member of the consumer group takes what is ready, up to a
//! batch, settles it, and commits each partition's offset up to its first record that failed
//! for a reason that may pass; from there the partition is read again after a pause.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use rdkafka::consumer::{CommitMode, Consumer as _, StreamConsumer};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::client::{client_config, Context};
use super::{kafka, Kafka, Record};
use crate::events::{EventError, Sink};
use crate::telemetry::Chain;

/// Records merged in one transaction by the consumer-group member.
const BATCH_MAX: usize = 500;
/// How long a partition waits before its failed records are read again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

impl Kafka {
    /// Consumes as a member of the group until dropped; a member that fails is built again.
    pub(super) async fn run(self: Arc<Self>, sink: Arc<dyn Sink>) {
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
