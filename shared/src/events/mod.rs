//! Consistency mode B: after the gate says RESERVED, a `voucher-reserved` event goes to a
//! broker and the consumer (`crate::consumer`) writes Postgres, so Postgres leaves the reserve
//! path.
//!
//! One event, one trait, two brokers:
//! - [`sqs::Sqs`]: an SQS queue (`EVENTS_QUEUE_URL`), drained by Lambda's SQS trigger or by
//!   `flashgate serve`'s poller; failures are per message, then the queue's dead-letter queue.
//! - [`kafka::Kafka`]: a Kafka topic (`KAFKA_BROKERS`, e.g. Amazon MSK), keyed and partitioned
//!   by gate (a voucher's code, a flash-sale campaign's id), drained by Lambda's MSK event source or by a consumer-group member in
//!   `flashgate serve`; a record that can never land goes to the dead-letter topic.
//!
//! Everything else of mode B (the gate's pending marks, the merge, the sweeps) is the same code
//! whatever carries the events: the consumer merges on the lattice, so duplicates and any order
//! change nothing twice.

pub mod kafka;
pub mod sqs;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::{Deserialize, Serialize};

use crate::domain::{campaign_key, Claim, Held, Reserve};
use crate::telemetry::metrics::{timed, Dependency};

pub const EVENT_TYPE: &str = "voucher-reserved";
pub const EVENT_VERSION: u32 = 1;

/// `voucher-reserved`, version 1: everything the consumer needs to write the row, and the
/// voucher's version whose rules granted the use (`rulesVersion`, a field added within version 1:
/// an event without it lands if any kept version of the rules would have granted it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservedEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub version: u32,
    pub code: String,
    pub order_id: String,
    pub customer_id: i64,
    pub order_amount: i64,
    pub discount_amount: i64,
    /// Milliseconds since the epoch, as the gate stored them.
    pub reserved_at_ms: i64,
    pub expires_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules_version: Option<i64>,
    /// The flash-sale campaign whose gate granted the use (absent: a voucher's own gate). Its
    /// rules and `rulesVersion` are the campaign's, and it is the event's [key](Self::key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub campaign_id: Option<i64>,
}

impl ReservedEvent {
    pub fn new(r: &Reserve, held: Held, rules_version: Option<i64>, campaign: Option<i64>) -> Self {
        ReservedEvent {
            kind: EVENT_TYPE.to_owned(),
            version: EVENT_VERSION,
            code: r.code.as_str().to_owned(),
            order_id: r.order_id.as_str().to_owned(),
            customer_id: held.customer_id,
            order_amount: r.order_amount,
            discount_amount: held.discount,
            reserved_at_ms: held.reserved_ms,
            expires_at_ms: held.expires_ms,
            rules_version,
            campaign_id: campaign,
        }
    }

    /// What the event is keyed and partitioned by: its gate, the voucher's code or a flash-sale
    /// campaign's [`campaign_key`] (`gate::Unit::name`), so that one gate's events share one partition (one lag to
    /// read before the gate may be loaded again).
    pub fn key(&self) -> std::borrow::Cow<'_, str> {
        match self.campaign_id {
            Some(id) => campaign_key(id).into(),
            None => self.code.as_str().into(),
        }
    }

    /// The use the event carries, as the gate held it.
    pub fn held(&self) -> Held {
        Held {
            customer_id: self.customer_id,
            reserved_ms: self.reserved_at_ms,
            expires_ms: self.expires_at_ms,
            discount: self.discount_amount,
        }
    }

    /// What the event says was granted, for the check against the rules.
    pub fn claim(&self) -> Claim {
        Claim {
            order_amount: self.order_amount,
            discount: self.discount_amount,
            reserved_ms: self.reserved_at_ms,
            expires_ms: self.expires_at_ms,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("events serialize")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("{0} did not answer within {1:?}")]
    Timeout(&'static str, Duration),
    #[error("{broker} {op} failed")]
    Broker {
        broker: &'static str,
        op: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl EventError {
    /// The broker's own error for `op`, kept whole as the source.
    pub(crate) fn broker<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
        broker: &'static str,
        op: &'static str,
    ) -> impl FnOnce(E) -> EventError {
        move |e| EventError::Broker {
            broker,
            op,
            source: e.into(),
        }
    }
}

/// `f`, or [`EventError::Timeout`] once `limit` has passed; timed as the broker's `call`
/// (`telemetry::metrics`).
pub(crate) async fn bounded<T>(
    broker: &'static str,
    call: &'static str,
    limit: Duration,
    f: impl Future<Output = Result<T, EventError>>,
) -> Result<T, EventError> {
    timed(Dependency::Broker, call, tokio::time::timeout(limit, f))
        .await
        .map_err(|_| EventError::Timeout(broker, limit))?
}

/// What became of one event handed to a [`Sink`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Landing {
    /// In Postgres (or already there): acknowledge it.
    Landed,
    /// Can never land (not an event, an unknown voucher, a panic): the reason. It goes to the
    /// dead-letter queue (`EVENTS_DLQ_URL`) or topic at once; on SQS without one, SQS retries it
    /// and its redrive policy moves it.
    Poison(String),
    /// May land later (Postgres unreachable): deliver it again.
    Retry(String),
}

/// Where a transport delivers the bodies it consumes: the consumer (`crate::consumer`), which
/// merges a batch in one transaction. A trait here, so that the transports need nothing of the
/// consumer and the consumer nothing of the transports.
pub trait Sink: Send + Sync {
    /// One answer per body, in the order given.
    fn land<'a>(&'a self, bodies: &'a [&'a str]) -> BoxFuture<'a, Vec<Landing>>;

    /// The most bodies worth delivering in one call: what the sink lands in one go. A
    /// transport that can gather a batch (Kafka's member) gathers up to this many.
    fn batch_max(&self) -> usize;
}

/// What carries `voucher-reserved` events from the reserve path to the consumer.
///
/// Boxed futures rather than `async fn`: the reservations service holds the transport as
/// `Arc<dyn Transport>`, chosen from the settings at start.
pub trait Transport: Send + Sync {
    /// `"SQS"` or `"Kafka"`, for messages and logs.
    fn name(&self) -> &'static str;

    /// Sends one event, within the settings' `EVENTS_TIMEOUT_MS`.
    fn send<'a>(&'a self, event: &'a ReservedEvent) -> BoxFuture<'a, Result<(), EventError>>;

    /// `EVENTS_TIMEOUT_MS`: a send begun longer ago than this has been answered.
    fn send_timeout(&self) -> Duration;

    /// How long after the last event of a key may have been sent [`Transport::in_flight`]
    /// counts it for sure: the send timeout, and on Amazon SQS a minute more, since
    /// `ApproximateNumberOfMessages*` may lag that long behind the queue. A gate that lost
    /// grants is loaded, repaired or trusted only once this long has passed since the loss was
    /// first noticed and nothing is in flight.
    fn in_flight_settles(&self) -> Duration {
        self.send_timeout()
    }

    /// How many events that may have `key` ([`ReservedEvent::key`]: a voucher's code, or a
    /// flash-sale campaign's key) have not landed in Postgres yet. While any may, the gate must
    /// not be loaded for it (their uses would be counted twice), and an order the gate does not
    /// know may still be on its way. SQS cannot tell one gate's messages from another's and
    /// counts the whole queue; Kafka counts the lag of the key's partition.
    fn in_flight<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<u64, EventError>>;

    /// Creates the queue or topics if they do not exist: Kafka topics always (the `migrate`
    /// step does it at deploy), an SQS queue only on a local endpoint.
    fn prepare(&self) -> BoxFuture<'_, Result<(), EventError>>;

    /// Opens what sending needs before the first send (Kafka: the producer, whose idempotent
    /// session takes a round trip to set up, and the topic's partition count), so that the
    /// first reserves of a sale do not wait for it. Nothing for SQS.
    fn connect(&self) -> BoxFuture<'_, Result<(), EventError>> {
        futures::future::ready(Ok(())).boxed()
    }

    /// Consumes in this process until the future is dropped: `flashgate serve`'s stand-in for
    /// Lambda's event source. Only what the consumer has committed to Postgres is acknowledged.
    fn consume(self: Arc<Self>, sink: Arc<dyn Sink>) -> BoxFuture<'static, ()>;
}
