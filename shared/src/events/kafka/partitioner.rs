//! Which partition a gate's events go to: computed here, not by the client library, so
//! that the producer and the lag reader agree (see the module documentation).

use rdkafka::consumer::Consumer as _;

use super::client::blocking;
use super::{kafka, Kafka, BROKER};
use crate::events::EventError;

/// The partition of a gate's events (`key`: `ReservedEvent::key`): Kafka's default
/// partitioner for a keyed record (`toPositive(murmur2(key)) % partitions`).
pub fn partition_for(key: &str, partitions: i32) -> i32 {
    (murmur2(key.as_bytes()) & 0x7fff_ffff) as i32 % partitions.max(1)
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

impl Kafka {
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
