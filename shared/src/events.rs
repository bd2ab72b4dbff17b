//! Consistency mode B: after the gate says RESERVED, a `voucher-reserved` event goes to SQS and
//! the consumer (`consumer`) writes Postgres, so Postgres leaves the reserve path.
//!
//! Events are versioned JSON. On a FIFO queue the voucher code is the message group (events of
//! one voucher keep their order) and `code:orderId` the deduplication id; on a standard queue
//! order and duplicates do not matter either, since the consumer merges on the lattice.

use std::time::Duration;

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, QueueAttributeName};
use aws_sdk_sqs::Client;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use crate::domain::{Held, Reserve};

pub const EVENT_TYPE: &str = "voucher-reserved";
pub const EVENT_VERSION: u32 = 1;

/// `voucher-reserved`, version 1: everything the consumer needs to write the row.
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
}

impl ReservedEvent {
    pub fn new(r: &Reserve, held: Held) -> Self {
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
}

#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("SQS did not answer within {0:?}")]
    Timeout(Duration),
    #[error("SQS {op} failed")]
    Sqs {
        op: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The SDK's error for `op`, kept whole as the source.
fn sqs<E: std::error::Error + Send + Sync + 'static>(
    op: &'static str,
) -> impl FnOnce(E) -> EventError {
    move |e| EventError::Sqs {
        op,
        source: Box::new(e),
    }
}

/// A received message: what the consumer needs, whatever delivered it.
#[derive(Debug, Clone)]
pub struct Received {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    pub receive_count: u32,
}

pub struct Events {
    queue_url: String,
    /// Local SQS (moto) and tests: the endpoint to use, with dummy credentials.
    endpoint: Option<String>,
    region: String,
    timeout: Duration,
    /// Built on first use: loading AWS credentials is async.
    client: OnceCell<Client>,
}

impl Events {
    pub fn new(
        queue_url: &str,
        endpoint: Option<String>,
        region: String,
        timeout: Duration,
    ) -> Events {
        Events {
            queue_url: queue_url.to_owned(),
            endpoint,
            region,
            timeout,
            client: OnceCell::new(),
        }
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    pub async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async {
                Client::new(&crate::aws::sdk_config(self.endpoint.as_deref(), &self.region).await)
            })
            .await
    }

    async fn bounded<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, EventError>>,
    ) -> Result<T, EventError> {
        tokio::time::timeout(self.timeout, f)
            .await
            .map_err(|_| EventError::Timeout(self.timeout))?
    }

    pub async fn send(&self, event: &ReservedEvent) -> Result<(), EventError> {
        let body = serde_json::to_string(event).expect("events serialize");
        let client = self.client().await;
        self.bounded(async {
            let mut req = client
                .send_message()
                .queue_url(&self.queue_url)
                .message_body(body);
            if self.queue_url.ends_with(".fifo") {
                req = req
                    .message_group_id(&event.code)
                    .message_deduplication_id(format!("{}:{}", event.code, event.order_id));
            }
            req.send().await.map_err(sqs("SendMessage"))?;
            Ok(())
        })
        .await
    }

    /// Creates the queue named by the queue URL if it does not exist (a local SQS only, so
    /// that `flashgate serve` in mode B needs no separate set-up step).
    pub async fn ensure_local_queue(&self) -> Result<(), EventError> {
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

    /// Messages queued or being processed: while any exist, a gate must not be loaded (an
    /// event still to land would be counted twice).
    pub async fn in_flight(&self) -> Result<u64, EventError> {
        self.bounded(async {
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
