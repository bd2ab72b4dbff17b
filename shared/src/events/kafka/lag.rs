//! Events in flight for a gate (a voucher's, a flash-sale campaign's): its key's partition's high watermark less the consumer group's
//! committed offset there, plus what this process has produced and not yet had acknowledged.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rdkafka::consumer::Consumer as _;
use rdkafka::{Offset, TopicPartitionList};

use super::client::blocking;
use super::{kafka, Kafka, BROKER};
use crate::events::{bounded, EventError};

impl Kafka {
    /// Records of `key`'s partition not yet committed by the consumer group, plus records this
    /// process has produced that the brokers have not acknowledged.
    pub(super) async fn lag(&self, key: &str) -> Result<u64, EventError> {
        let partition = self.partition_of(key).await?;
        let unacknowledged = self.unacknowledged.load(Ordering::Acquire);
        let (observer, topic, timeout) = (
            self.observer.clone(),
            self.settings.topic.clone(),
            self.timeout,
        );
        let lag = bounded(
            BROKER,
            "lag",
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
}
