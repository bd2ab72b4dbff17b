//! Lambda's MSK event source: one batch per invocation, settled as the consumer-group member
//! settles its own.

use aws_lambda_events::kafka::KafkaEvent;
use base64::Engine as _;

use super::{Kafka, Record};
use crate::events::Sink;

type Bytes = Vec<u8>;

/// Why an MSK batch (Lambda's event source) is answered with a failure: the event source
/// retries the whole batch, then records it in its on-failure destination.
#[derive(Debug, thiserror::Error)]
#[error("{failed} of {total} records did not land (first: {first})")]
pub struct KafkaBatchError {
    pub failed: usize,
    pub total: usize,
    pub first: String,
}

impl Kafka {
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
