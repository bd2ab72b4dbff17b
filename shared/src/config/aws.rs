//! `aws`: the Region and endpoint every AWS client is built with.

/// How AWS clients are built.
#[derive(Debug, Clone)]
pub struct AwsSettings {
    /// `AWS_ENDPOINT_URL`: endpoint override for every AWS service (Secrets Manager, and SQS
    /// unless set apart).
    pub endpoint_url: Option<String>,
    /// `AWS_REGION`, else `AWS_DEFAULT_REGION`, else `us-east-1`.
    pub region: String,
}
