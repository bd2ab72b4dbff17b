//! SQS: one queue of `voucher-reserved` events (`EVENTS_QUEUE_URL`).
//!
//! On a FIFO queue the event's key (`ReservedEvent::key`: the voucher code, or a flash-sale
//! campaign's) is the message group (events of one gate keep their order) and `code:orderId` the deduplication id; on a standard queue order and duplicates do
//! not matter either, since the consumer merges on the lattice.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, QueueAttributeName,
};
use aws_sdk_sqs::Client;
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::OnceCell;

use super::{bounded, EventError, Landing, ReservedEvent, Sink, Transport};
use crate::telemetry::{self, Chain};

const BROKER: &str = "SQS";

/// The SDK's error for `op`, kept whole as the source.
fn sqs<E: std::error::Error + Send + Sync + 'static>(
    op: &'static str,
) -> impl FnOnce(E) -> EventError {
    EventError::broker(BROKER, op)
}

/// A received message: what the consumer needs, whatever delivered it.
#[derive(Debug, Clone)]
pub struct Received {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    pub receive_count: u32,
}

/// How far behind the queue SQS' `ApproximateNumberOfMessages*` may be (AWS documents "about
/// one minute" for them to settle).
const APPROXIMATE_COUNT_LAG: Duration = Duration::from_secs(60);

pub struct Sqs {
    queue_url: String,
    /// `EVENTS_DLQ_URL`: where an event that can never land goes at once.
    dead_letter_url: Option<String>,
    /// Local SQS (moto) and tests: the endpoint to use, with dummy credentials.
    endpoint: Option<String>,
    region: String,
    timeout: Duration,
    /// Built on first use: loading AWS credentials is async.
    client: OnceCell<Client>,
}

impl Sqs {
    pub fn new(
        queue_url: &str,
        endpoint: Option<String>,
        region: String,
        timeout: Duration,
    ) -> Sqs {
        Sqs {
            queue_url: queue_url.to_owned(),
            dead_letter_url: None,
            endpoint,
            region,
            timeout,
            client: OnceCell::new(),
        }
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Sends events that can never land to this queue at once (None: leave them to the
    /// queue's redrive policy).
    pub fn with_dead_letters(mut self, url: Option<String>) -> Sqs {
        self.dead_letter_url = url;
        self
    }

    /// Sends the body of message `id`, which can never land, to the dead-letter queue with
    /// `reason` as its `error` attribute. Ok(false): no dead-letter queue is configured.
    pub async fn dead_letter(
        &self,
        id: &str,
        body: &str,
        reason: &str,
    ) -> Result<bool, EventError> {
        let Some(url) = &self.dead_letter_url else {
            return Ok(false);
        };
        let reason = MessageAttributeValue::builder()
            .data_type("String")
            // An attribute's value may not be empty.
            .string_value(if reason.is_empty() { "poison" } else { reason })
            .build()
            .map_err(sqs("SendMessage"))?;
        let client = self.client().await;
        bounded(BROKER, "dead_letter", self.timeout, async {
            let mut req = client
                .send_message()
                .queue_url(url)
                .message_body(body)
                .message_attributes("error", reason);
            if url.ends_with(".fifo") {
                // A FIFO queue's dead-letter queue is FIFO too: one group, deduplicated by
                // the message it came from.
                req = req
                    .message_group_id("dead-letters")
                    .message_deduplication_id(id);
            }
            req.send().await.map_err(sqs("SendMessage"))?;
            Ok(true)
        })
        .await
    }

    pub async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async {
                Client::new(&crate::aws::sdk_config(self.endpoint.as_deref(), &self.region).await)
            })
            .await
    }

    async fn send_message(&self, event: &ReservedEvent) -> Result<(), EventError> {
        let body = event.to_json();
        let client = self.client().await;
        bounded(BROKER, "publish", self.timeout, async {
            let mut req = client
                .send_message()
                .queue_url(&self.queue_url)
                .message_body(body);
            if self.queue_url.ends_with(".fifo") {
                req = req
                    .message_group_id(event.key())
                    .message_deduplication_id(format!("{}:{}", event.code, event.order_id));
            }
            req.send().await.map_err(sqs("SendMessage"))?;
            Ok(())
        })
        .await
    }

    /// Creates the queue named by the queue URL if it does not exist (a local SQS only, so
    /// that `flashgate serve` in mode B needs no separate set-up step).
    async fn ensure_local_queue(&self) -> Result<(), EventError> {
        if self.endpoint.is_none() {
            return Ok(());
        }
        let name = self.queue_url.rsplit('/').next().unwrap_or_default();
        self.client()
            .await
            .create_queue()
            .queue_name(name)
            .send()
            .await
            .map_err(sqs("CreateQueue"))?;
        Ok(())
    }

    /// Messages queued or being processed, for any voucher.
    pub async fn queue_depth(&self) -> Result<u64, EventError> {
        bounded(BROKER, "queue_depth", self.timeout, async {
            let out = self
                .client()
                .await
                .get_queue_attributes()
                .queue_url(&self.queue_url)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
                .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
                .send()
                .await
                .map_err(sqs("GetQueueAttributes"))?;
            Ok(out
                .attributes()
                .map(|a| a.values().filter_map(|v| v.parse::<u64>().ok()).sum())
                .unwrap_or(0))
        })
        .await
    }

    /// Long-polls up to 10 messages (the local stand-in for Lambda's SQS trigger).
    pub async fn receive(&self, wait: Duration) -> Result<Vec<Received>, EventError> {
        let out = self
            .client()
            .await
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait.as_secs() as i32)
            .message_system_attribute_names(
                aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount,
            )
            .send()
            .await
            .map_err(sqs("ReceiveMessage"))?;
        Ok(out
            .messages()
            .iter()
            .map(|m| Received {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                receipt_handle: m.receipt_handle().unwrap_or_default().to_owned(),
                body: m.body().unwrap_or_default().to_owned(),
                receive_count: m
                    .attributes()
                    .and_then(|a| {
                        a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
                    })
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1),
            })
            .collect())
    }

    pub async fn delete(&self, handles: &[&str]) -> Result<(), EventError> {
        if handles.is_empty() {
            return Ok(());
        }
        let entries = handles
            .iter()
            .enumerate()
            .map(|(i, h)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(*h)
                    .build()
                    .map_err(sqs("DeleteMessageBatch"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.client()
            .await
            .delete_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(sqs("DeleteMessageBatch"))?;
        Ok(())
    }
}

impl Transport for Sqs {
    fn name(&self) -> &'static str {
        BROKER
    }

    fn send<'a>(&'a self, event: &'a ReservedEvent) -> BoxFuture<'a, Result<(), EventError>> {
        self.send_message(event).boxed()
    }

    fn send_timeout(&self) -> Duration {
        self.timeout
    }

    fn in_flight_settles(&self) -> Duration {
        // A local endpoint counts exactly; Amazon SQS' approximate counts may be a minute
        // behind the queue.
        match self.endpoint {
            Some(_) => self.timeout,
            None => self.timeout + APPROXIMATE_COUNT_LAG,
        }
    }

    fn in_flight<'a>(&'a self, _key: &'a str) -> BoxFuture<'a, Result<u64, EventError>> {
        self.queue_depth().boxed()
    }

    fn prepare(&self) -> BoxFuture<'_, Result<(), EventError>> {
        self.ensure_local_queue().boxed()
    }

    fn consume(self: Arc<Self>, sink: Arc<dyn Sink>) -> BoxFuture<'static, ()> {
        poll(sink, self).boxed()
    }
}

/// The SQS event source's handler body, in Lambda and in the local poller: the batch's messages
/// handed to the consumer, the ids of those that did not land out (`ReportBatchItemFailures`).
/// SQS delivers those again, and moves them to the dead-letter queue after `maxReceiveCount`.
/// With `dead_letters` configured (`EVENTS_DLQ_URL`), one that can never land goes there at
/// once, with its reason, and counts as done: retrying it would only delay the ones behind it.
pub async fn handle_batch(
    sink: &dyn Sink,
    dead_letters: Option<&Sqs>,
    event: SqsEvent,
) -> SqsBatchResponse {
    let bodies: Vec<&str> = event
        .records
        .iter()
        .map(|m| m.body.as_deref().unwrap_or(""))
        .collect();
    let landings = sink.land(&bodies).await;
    let mut response = SqsBatchResponse::default();
    for ((message, body), landing) in event.records.iter().zip(&bodies).zip(landings) {
        let id = message.message_id.clone().unwrap_or_default();
        let why = match landing {
            Landing::Landed => continue,
            Landing::Poison(why) => {
                let sent = match dead_letters {
                    Some(sqs) => sqs.dead_letter(&id, body, &why).await,
                    None => Ok(false),
                };
                match sent {
                    Ok(true) => {
                        tracing::warn!(message_id = %id, error = %why, "event to the dead-letter queue");
                        metrics::counter!(telemetry::metrics::DEAD_LETTERED).increment(1);
                        continue;
                    }
                    Ok(false) => why,
                    // Received again later, and moved by the redrive policy at worst.
                    Err(e) => format!("{why}; the dead-letter queue refused it: {}", Chain(&e)),
                }
            }
            Landing::Retry(why) => why,
        };
        tracing::warn!(message_id = %id, error = %why, "event failed");
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = id;
        response.batch_item_failures.push(failure);
    }
    response
}

/// The local stand-in for Lambda's SQS trigger: receive, hand the batch to the same handler,
/// delete what landed; the rest becomes visible again.
async fn poll(sink: Arc<dyn Sink>, sqs: Arc<Sqs>) {
    loop {
        // Short polls with a pause when empty: local SQS servers serialise long polls.
        match sqs.receive(Duration::ZERO).await {
            Ok(received) if !received.is_empty() => {
                let mut batch = SqsEvent::default();
                for r in &received {
                    let mut m = SqsMessage::default();
                    m.message_id = Some(r.message_id.clone());
                    m.body = Some(r.body.clone());
                    batch.records.push(m);
                }
                let response = handle_batch(sink.as_ref(), Some(&sqs), batch).await;
                let failed: Vec<&str> = response
                    .batch_item_failures
                    .iter()
                    .map(|f| f.item_identifier.as_str())
                    .collect();
                let done: Vec<&str> = received
                    .iter()
                    .filter(|r| !failed.contains(&r.message_id.as_str()))
                    .map(|r| r.receipt_handle.as_str())
                    .collect();
                if let Err(e) = sqs.delete(&done).await {
                    tracing::warn!(error = %Chain(&e), "could not delete consumed messages");
                }
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => {
                tracing::warn!(error = %Chain(&e), "queue poll failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On main the counts were trusted as soon as they said zero; Amazon SQS' approximate
    /// counts may lag a minute, so a warm-up or a 404 could go ahead while grants were queued.
    #[test]
    fn amazon_sqs_counts_are_trusted_a_minute_after_the_last_send_a_local_one_at_once() {
        let timeout = Duration::from_secs(1);
        let aws = Sqs::new("https://sqs/q", None, "us-east-1".into(), timeout);
        assert_eq!(aws.in_flight_settles(), timeout + Duration::from_secs(60));
        let local = Sqs::new(
            "http://127.0.0.1/q",
            Some("http://127.0.0.1".into()),
            "us-east-1".into(),
            timeout,
        );
        assert_eq!(local.in_flight_settles(), timeout);
    }
}
