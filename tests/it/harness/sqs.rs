//! The test's own queues on the local SQS endpoint.

use std::time::Duration;

use serde_json::json;
use shared::events::sqs::Sqs;

use super::sqs_endpoint;

/// A client of `queue_url` on the local SQS endpoint, apart from the server's.
pub fn client(queue_url: &str) -> Sqs {
    Sqs::new(
        queue_url,
        Some(sqs_endpoint()),
        "us-east-1".into(),
        Duration::from_secs(10),
    )
}

/// A queue and its dead-letter queue on the local SQS endpoint, named after the test.
/// Messages become visible again after 1 s and move to the DLQ after `max_receive` receives.
pub async fn create_queues(endpoint: &str, name: &str, max_receive: u32) -> (String, String) {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let sqs = Sqs::new(
        "",
        Some(endpoint.to_owned()),
        "us-east-1".into(),
        Duration::from_secs(10),
    );
    let client = sqs.client().await;
    let dlq = client
        .create_queue()
        .queue_name(format!("{name}-dlq"))
        .send()
        .await
        .expect("create DLQ");
    let dlq_url = dlq.queue_url().unwrap().to_owned();
    let attrs = client
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(A::QueueArn)
        .send()
        .await
        .unwrap();
    let arn = attrs.attributes().unwrap()[&A::QueueArn].clone();
    let queue = client
        .create_queue()
        .queue_name(name)
        .attributes(A::VisibilityTimeout, "1")
        .attributes(
            A::RedrivePolicy,
            json!({"deadLetterTargetArn": arn, "maxReceiveCount": max_receive}).to_string(),
        )
        .send()
        .await
        .expect("create queue");
    (queue.queue_url().unwrap().to_owned(), dlq_url)
}
