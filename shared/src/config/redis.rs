//! `redis`: the gate's Redis (one node or a cluster), its AUTH token and timeouts.

use std::time::Duration;

use secrecy::SecretString;

/// The Redis gate of flash-sale vouchers.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// `REDIS_URL`: one server, or with `cluster` the Redis Cluster seed nodes
    /// (comma-separated).
    pub url: String,
    /// `REDIS_CLUSTER`.
    pub cluster: bool,
    /// `REDIS_KEY_PREFIX`: prepended to every Redis key (several environments sharing one
    /// Redis).
    pub key_prefix: String,
    /// `REDIS_TIMEOUT_MS`: bound on every Redis call; a dead Redis gives 503 within it.
    pub timeout: Duration,
    /// `REDIS_AUTH_SECRET_ARN`: the Secrets Manager secret (`{"password": ..}`) holding the
    /// AUTH token of an ElastiCache replication group with encryption in transit. Unset: no
    /// AUTH (a local Redis).
    pub auth_secret_arn: Option<String>,
    /// Read from `auth_secret_arn` by [`Settings::load`].
    pub password: Option<SecretString>,
}
