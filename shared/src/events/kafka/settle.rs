//! What becomes of a batch of records, whoever delivered it (the consumer-group member or
//! Lambda's MSK event source): merged in one transaction, dead-lettered, or to be read again.

use super::Kafka;
use crate::events::{Landing, Sink};
use crate::telemetry;
use crate::telemetry::Chain;

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
                    metrics::counter!(telemetry::metrics::DEAD_LETTERED).increment(1);
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
}
