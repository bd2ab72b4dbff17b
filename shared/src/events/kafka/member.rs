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
            while batch.len() < sink.batch_max() {
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
            let positions = positions(&records, &landed);
            let mut commit = TopicPartitionList::new();
            for p in &positions {
                let _ = commit.add_partition_offset(
                    &self.settings.topic,
                    p.partition,
                    Offset::Offset(p.next),
                );
            }
            // After Postgres committed: a member killed before this line leaves the records to be
            // read again by the next one, and they merge into nothing.
            if let Err(e) = member.commit(&commit, CommitMode::Async) {
                tracing::warn!(error = %e, "offset commit failed");
            }
            let failed: Vec<&Position> = positions.iter().filter(|p| p.failed).collect();
            if !failed.is_empty() {
                tokio::time::sleep(RETRY_PAUSE).await;
                for p in failed {
                    if let Err(e) = member.seek(
                        &self.settings.topic,
                        p.partition,
                        Offset::Offset(p.next),
                        Duration::from_secs(5),
                    ) {
                        // Rebuilt from the committed offsets: the records come back either way.
                        tracing::warn!(partition = p.partition, error = %e, "seek failed; rejoining");
                        return;
                    }
                }
            }
        }
    }
}

/// Where a partition stands after a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    partition: i32,
    /// The offset to commit: the partition's next record to read.
    next: i64,
    /// A record failed there (at `next`): the partition is read again from it.
    failed: bool,
}

/// Each partition's position after a batch, in the order the partitions first appear, given
/// which records are done with (`done`, as [`Kafka::settle`] answers: landed or
/// dead-lettered). A partition's commit stops at its first record that is not done: what
/// follows it is read again with it, and merges into nothing the second time.
fn positions(records: &[Record<'_>], done: &[bool]) -> Vec<Position> {
    // Per partition: the offset to commit, and whether a record failed there.
    let mut positions: Vec<Position> = Vec::new();
    for (r, &done) in records.iter().zip(done) {
        let at = positions.iter_mut().find(|p| p.partition == r.partition);
        match at {
            Some(Position { failed: true, .. }) => {}
            Some(p) if done => p.next = r.offset + 1,
            Some(p) => {
                p.next = r.offset;
                p.failed = true;
            }
            None => positions.push(Position {
                partition: r.partition,
                next: if done { r.offset + 1 } else { r.offset },
                failed: !done,
            }),
        }
    }
    positions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(partition: i32, next: i64, failed: bool) -> Position {
        Position {
            partition,
            next,
            failed,
        }
    }

    #[test]
    fn each_partition_commits_up_to_its_first_record_not_done() {
        // (records as (partition, offset, done), the positions after the batch). Done is
        // landed or dead-lettered alike: either way the record is not read again.
        let cases = vec![
            ("empty", vec![], vec![]),
            (
                "all done",
                vec![(0, 10, true), (0, 11, true), (0, 12, true)],
                vec![at(0, 13, false)],
            ),
            (
                "a failure in the middle holds the commit there",
                vec![(0, 10, true), (0, 11, false), (0, 12, true)],
                vec![at(0, 11, true)],
            ),
            (
                "the first record fails",
                vec![(3, 7, false), (3, 8, true)],
                vec![at(3, 7, true)],
            ),
            (
                "only the first failure counts",
                vec![(0, 10, false), (0, 11, false)],
                vec![at(0, 10, true)],
            ),
            (
                "several partitions, interleaved, each on its own",
                vec![
                    (1, 5, true),
                    (0, 10, true),
                    (1, 6, false),
                    (0, 11, true),
                    (2, 0, true),
                    (1, 7, true),
                ],
                vec![at(1, 6, true), at(0, 12, false), at(2, 1, false)],
            ),
        ];
        for (name, batch, want) in cases {
            let records: Vec<Record<'_>> = batch
                .iter()
                .map(|&(partition, offset, _)| Record {
                    partition,
                    offset,
                    key: None,
                    payload: None,
                })
                .collect();
            let done: Vec<bool> = batch.iter().map(|&(_, _, done)| done).collect();
            assert_eq!(positions(&records, &done), want, "{name}");
        }
    }
}
