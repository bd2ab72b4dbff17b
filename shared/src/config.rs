//! Configuration, layered: built-in defaults (the table in README.md, "Configuration"), then
//! the environment.
//!
//! Every binary (local server, CLI, Lambda functions) reads the same `Settings`, so a variable
//! means the same thing wherever it is set. The database URL may carry a password, so it is kept
//! in a `SecretString` and never printed by `Debug`.
//!
//! In AWS the database password is not in the environment at all: `DATABASE_SECRET_ARN` names
//! the Secrets Manager secret (`{"username": .., "password": ..}`, the shape RDS and
//! `template.yaml` generate) and [`Settings::load`] reads it once, at cold start. The functions
//! that serve log in with the application role's secret; only the migrate function holds the
//! master secret, and `APP_DATABASE_SECRET_ARN` besides, to create that role and keep its
//! password and privileges up to date (docs/DEPLOY.md, "Database logins").

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/flashgate";
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Every setting, in the groups of the parts that read them; each group is what one part's
/// constructor takes.
#[derive(Debug, Clone)]
pub struct Settings {
    pub database: DatabaseSettings,
    pub redis: RedisSettings,
    pub events: EventSettings,
    pub reservations: ReservationSettings,
    pub sweep: SweepSettings,
    pub server: ServerSettings,
    pub aws: AwsSettings,
}

/// Postgres: where it is, who logs in, and how many connections a process holds.
#[derive(Debug, Clone)]
pub struct DatabaseSettings {
    /// `DATABASE_URL`; it may carry a password, so it is never printed.
    pub url: SecretString,
    /// `DATABASE_SECRET_ARN`: the Secrets Manager secret holding the database user and password
    /// (they then override the URL's).
    pub secret_arn: Option<String>,
    /// Read from `secret_arn` by [`Settings::load`].
    pub credentials: Option<DatabaseCredentials>,
    /// `APP_DATABASE_SECRET_ARN`, set for the migrate function only: the secret of the
    /// least-privilege role the other functions log in as. With it, `migrate` creates that role
    /// (or sets its password to the secret's) and grants it the service's tables; without it
    /// (local runs) no role is touched.
    pub app_secret_arn: Option<String>,
    /// Read from `app_secret_arn` by [`Settings::load`].
    pub app_role: Option<DatabaseCredentials>,
    /// `DATABASE_POOL_SIZE`: Postgres connections per process. Lambda wants 1-2; the local
    /// server more.
    pub pool_size: usize,
    /// `DATABASE_TIMEOUT_MS`: how long a request may wait for a pooled Postgres connection
    /// before answering 503.
    pub timeout: Duration,
}

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

/// Mode B's events: which transport carries them, and who consumes them.
#[derive(Debug, Clone)]
pub struct EventSettings {
    /// `EVENTS_QUEUE_URL`: mode B on SQS, the queue of `voucher-reserved` events. Unset, and no
    /// `kafka`: mode A.
    pub queue_url: Option<String>,
    /// `EVENTS_DLQ_URL`: the queue's dead-letter queue. An event that can never land is sent
    /// there at once with its reason (message attribute `error`), rather than received again
    /// until the queue's `maxReceiveCount` moves it. Unset: the redrive policy alone.
    pub dlq_url: Option<String>,
    /// `SQS_ENDPOINT_URL`: SQS endpoint override (a local SQS such as moto); dummy credentials
    /// are used with it. Defaults to `AWS_ENDPOINT_URL`.
    pub sqs_endpoint_url: Option<String>,
    /// Mode B on Kafka (`KAFKA_BROKERS` or `KAFKA_CLUSTER_ARN` set); it wins over SQS.
    pub kafka: Option<KafkaSettings>,
    /// `EVENTS_POLL`: `flashgate serve` consumes the queue itself (off when a consumer runs
    /// elsewhere).
    pub poll: bool,
    /// `EVENTS_TIMEOUT_MS`: bound on sending one event; past it the reserve answers 503.
    pub timeout: Duration,
}

/// The reservation service's tunables.
#[derive(Debug, Clone, Copy)]
pub struct ReservationSettings {
    /// `SOLD_OUT_CACHE_MS`: how long the process answers OUT_OF_STOCK for a flash voucher
    /// without asking the gate.
    pub sold_out_ttl: Duration,
    /// `WARMUP_LEAD_SECONDS`: a flash voucher whose sale starts within this lead is loaded
    /// into Redis at creation (and by the sweep).
    pub warmup_lead: Duration,
    /// `GROUP_COMMIT_MAX`: standard reserves and mode A's flash winners written together, most
    /// in one batch (1: each on its own).
    pub group_commit_max: usize,
    /// `GROUP_COMMIT_WRITERS`: group-commit batches in flight at once.
    pub group_commit_writers: usize,
}

/// The scheduled sweep.
#[derive(Debug, Clone, Copy)]
pub struct SweepSettings {
    /// `SWEEP_INTERVAL_SECONDS`: period of the local server's background sweep; zero turns it
    /// off.
    pub interval: Duration,
    /// `ORPHAN_GRACE_SECONDS`: an order pending in the gate this long past its TTL, with no
    /// Postgres row, is an orphan. 0 by default: a reservation past its TTL has expired whether
    /// its row or event ever came, so its use comes back at the first sweep after the TTL (a
    /// late event merges into the RELEASED row).
    pub orphan_grace: Duration,
    /// `GATE_RETIRE_AFTER_SECONDS`: this long after a flash sale's end, with nothing of it in
    /// flight, the sweeper removes every gate key of the voucher; Postgres answers for it from
    /// then on.
    pub retire_after: Duration,
    /// `GATE_TOMBSTONE_RETENTION_SECONDS`: a released order's tombstone stays in the gate this
    /// long (a retry of it is answered there), then the sweeper deletes it; afterwards Postgres'
    /// row answers such a retry in mode A. At least an hour.
    pub tombstone_retention: Duration,
}

/// The local server (`flashgate serve`). In AWS, API Gateway does this job, so the Lambda
/// functions read none of it.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// `PORT`: 0 asks the OS for a free one (the chosen address is logged).
    pub port: u16,
    /// `HEADER_READ_TIMEOUT_MS`: a connection that has not sent a whole request head this long
    /// after it opened, or after its last answer (an idle keep-alive connection), is closed.
    pub header_read_timeout: Duration,
    /// `REQUEST_TIMEOUT_MS`: most a request's body may take to arrive once its head has;
    /// past it, 408. (The work that follows is bounded by each dependency's own timeout.)
    pub request_timeout: Duration,
    /// `MAX_CONNECTIONS`: connections served at once; past it the server accepts no more until
    /// one closes (the kernel's backlog holds the rest).
    pub max_connections: usize,
    /// `ORDER_SERVICE_TOKEN` and `OPERATOR_TOKEN`, both or neither: with them, every route but
    /// the liveness probe wants `Authorization: Bearer <token>` of a role it allows
    /// (`http::access`).
    pub tokens: Option<(SecretString, SecretString)>,
    /// `ALLOW_UNAUTHENTICATED`: listen beyond loopback without tokens. Off, the server refuses
    /// to start there.
    pub allow_unauthenticated: bool,
}

/// How AWS clients are built.
#[derive(Debug, Clone)]
pub struct AwsSettings {
    /// `AWS_ENDPOINT_URL`: endpoint override for every AWS service (Secrets Manager, and SQS
    /// unless set apart).
    pub endpoint_url: Option<String>,
    /// `AWS_REGION`, else `AWS_DEFAULT_REGION`, else `us-east-1`.
    pub region: String,
}

/// Mode B's Kafka topic and who reads it.
#[derive(Debug, Clone)]
pub struct KafkaSettings {
    /// Bootstrap servers, comma-separated (`KAFKA_BROKERS`). In AWS it may instead be read at
    /// start from the MSK cluster named by `KAFKA_CLUSTER_ARN` ([`Settings::load`]).
    pub brokers: String,
    pub cluster_arn: Option<String>,
    /// `KAFKA_TOPIC`, default `voucher-reserved`.
    pub topic: String,
    /// `KAFKA_DLQ_TOPIC`, default `voucher-reserved-dlq`: records that can never land.
    pub dlq_topic: String,
    /// `KAFKA_GROUP`, default `flashgate-consumer`: the consumer group whose committed offsets
    /// say what has landed (the MSK event source mapping's consumer group id in AWS).
    pub group: String,
    /// `KAFKA_AUTH`: `none` (default), `tls`, or `iam` (MSK IAM over SASL/OAUTHBEARER).
    pub auth: KafkaAuth,
    /// `KAFKA_PARTITIONS`, default 8: partitions of the topic when the service creates it.
    pub partitions: i32,
    /// `KAFKA_REPLICATION`, default -1 (the brokers' default): replicas of created topics.
    pub replication: i32,
    /// `KAFKA_LINGER_MS`, default 1: how long the producer waits to fill a batch.
    pub linger_ms: u64,
    /// `KAFKA_BATCH_MESSAGES`, default 10000: most records in one produce batch. 1 for a broker
    /// that misreports the end offset of multi-record batches (see docs/BENCHMARKS.md).
    pub batch_messages: u32,
    /// `KAFKA_SESSION_TIMEOUT_MS`, default 6000 (the least most brokers allow): how long a
    /// dead consumer-group member (`flashgate serve`) holds its partitions.
    pub session_timeout_ms: u32,
    /// The AWS region IAM tokens are signed for.
    pub region: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaAuth {
    None,
    Tls,
    Iam,
}

impl std::str::FromStr for KafkaAuth {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "plaintext" => Ok(KafkaAuth::None),
            "tls" => Ok(KafkaAuth::Tls),
            "iam" => Ok(KafkaAuth::Iam),
            _ => Err("expected none, tls or iam".to_owned()),
        }
    }
}

/// The database login kept in Secrets Manager.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct DatabaseCredentials {
    pub username: String,
    pub password: SecretString,
}

#[derive(Debug, thiserror::Error)]
#[error("environment variable {name}: {problem}")]
pub struct ConfigError {
    name: &'static str,
    problem: String,
}

impl Settings {
    /// The environment, then the secrets it names: what every binary calls at start.
    pub async fn load() -> Result<Self, ConfigError> {
        let mut settings = Self::from_env()?;
        settings.resolve_secrets().await?;
        settings.resolve_kafka_brokers().await?;
        Ok(settings)
    }

    /// Reads the bootstrap brokers of the MSK cluster `KAFKA_CLUSTER_ARN` names, when
    /// `KAFKA_BROKERS` is not set (CloudFormation cannot hand a serverless cluster's brokers
    /// to a function). At cold start, so that provisioned concurrency does it before a sale.
    pub async fn resolve_kafka_brokers(&mut self) -> Result<(), ConfigError> {
        let Some(kafka) = self.events.kafka.as_mut() else {
            return Ok(());
        };
        let Some(arn) = kafka
            .cluster_arn
            .clone()
            .filter(|_| kafka.brokers.is_empty())
        else {
            return Ok(());
        };
        let problem = |problem: String| ConfigError {
            name: "KAFKA_CLUSTER_ARN",
            problem,
        };
        let sdk = crate::aws::sdk_config(self.aws.endpoint_url.as_deref(), &self.aws.region).await;
        let out = aws_sdk_kafka::Client::new(&sdk)
            .get_bootstrap_brokers()
            .cluster_arn(&arn)
            .send()
            .await
            .map_err(|e| {
                problem(format!(
                    "bootstrap brokers of {arn} could not be read: {}",
                    aws_sdk_kafka::error::DisplayErrorContext(e)
                ))
            })?;
        let brokers = match kafka.auth {
            KafkaAuth::Iam => out.bootstrap_broker_string_sasl_iam(),
            KafkaAuth::Tls => out.bootstrap_broker_string_tls(),
            KafkaAuth::None => out.bootstrap_broker_string(),
        };
        kafka.brokers = brokers
            .filter(|b| !b.is_empty())
            .ok_or_else(|| {
                problem(format!(
                    "{arn} has no brokers for KAFKA_AUTH={:?}",
                    kafka.auth
                ))
            })?
            .to_owned();
        Ok(())
    }

    /// Reads the database credentials from Secrets Manager when `DATABASE_SECRET_ARN` is set,
    /// the application role's when `APP_DATABASE_SECRET_ARN` is, and Redis' AUTH token when
    /// `REDIS_AUTH_SECRET_ARN` is.
    pub async fn resolve_secrets(&mut self) -> Result<(), ConfigError> {
        let database = &mut self.database;
        if database.secret_arn.is_none()
            && database.app_secret_arn.is_none()
            && self.redis.auth_secret_arn.is_none()
        {
            return Ok(());
        }
        let sdk = crate::aws::sdk_config(self.aws.endpoint_url.as_deref(), &self.aws.region).await;
        let client = aws_sdk_secretsmanager::Client::new(&sdk);
        if let Some(arn) = &database.secret_arn {
            database.credentials =
                Some(read_credentials(&client, "DATABASE_SECRET_ARN", arn).await?);
        }
        if let Some(arn) = &database.app_secret_arn {
            database.app_role =
                Some(read_credentials(&client, "APP_DATABASE_SECRET_ARN", arn).await?);
        }
        if let Some(arn) = &self.redis.auth_secret_arn {
            let token: RedisToken =
                read_secret(&client, "REDIS_AUTH_SECRET_ARN", arn, r#"{"password": ..}"#).await?;
            self.redis.password = Some(token.password);
        }
        Ok(())
    }

    /// Defaults overridden by the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Same as `from_env`, reading variables through `lookup` (tests pass a map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let aws_region = get("AWS_REGION")
            .or_else(|| get("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_owned());
        let kafka = match (get("KAFKA_BROKERS"), get("KAFKA_CLUSTER_ARN")) {
            (None, None) => None,
            (brokers, cluster_arn) => Some(KafkaSettings {
                brokers: brokers.unwrap_or_default(),
                cluster_arn,
                topic: get("KAFKA_TOPIC").unwrap_or_else(|| "voucher-reserved".to_owned()),
                dlq_topic: get("KAFKA_DLQ_TOPIC")
                    .unwrap_or_else(|| "voucher-reserved-dlq".to_owned()),
                group: get("KAFKA_GROUP").unwrap_or_else(|| "flashgate-consumer".to_owned()),
                auth: parse(&get, "KAFKA_AUTH", KafkaAuth::None)?,
                partitions: match parse(&get, "KAFKA_PARTITIONS", 8)? {
                    n if n >= 1 => n,
                    n => {
                        return Err(ConfigError {
                            name: "KAFKA_PARTITIONS",
                            problem: format!("{n} is not valid: at least 1"),
                        })
                    }
                },
                replication: parse(&get, "KAFKA_REPLICATION", -1)?,
                linger_ms: parse(&get, "KAFKA_LINGER_MS", 1)?,
                batch_messages: parse(&get, "KAFKA_BATCH_MESSAGES", 10_000)?,
                session_timeout_ms: parse(&get, "KAFKA_SESSION_TIMEOUT_MS", 6_000)?,
                region: aws_region.clone(),
            }),
        };
        Ok(Settings {
            database: DatabaseSettings {
                url: SecretString::from(
                    get("DATABASE_URL").unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned()),
                ),
                secret_arn: get("DATABASE_SECRET_ARN"),
                credentials: None,
                app_secret_arn: get("APP_DATABASE_SECRET_ARN"),
                app_role: None,
                pool_size: parse(&get, "DATABASE_POOL_SIZE", 16)?,
                timeout: Duration::from_millis(parse(&get, "DATABASE_TIMEOUT_MS", 2000)?),
            },
            redis: RedisSettings {
                url: get("REDIS_URL").unwrap_or_else(|| DEFAULT_REDIS_URL.to_owned()),
                cluster: parse(&get, "REDIS_CLUSTER", false)?,
                key_prefix: get("REDIS_KEY_PREFIX").unwrap_or_default(),
                timeout: Duration::from_millis(parse(&get, "REDIS_TIMEOUT_MS", 500)?),
                auth_secret_arn: get("REDIS_AUTH_SECRET_ARN"),
                password: None,
            },
            events: EventSettings {
                queue_url: get("EVENTS_QUEUE_URL"),
                dlq_url: get("EVENTS_DLQ_URL"),
                sqs_endpoint_url: get("SQS_ENDPOINT_URL").or_else(|| get("AWS_ENDPOINT_URL")),
                kafka,
                poll: parse(&get, "EVENTS_POLL", true)?,
                timeout: Duration::from_millis(parse(&get, "EVENTS_TIMEOUT_MS", 1000)?),
            },
            reservations: ReservationSettings {
                sold_out_ttl: Duration::from_millis(parse(&get, "SOLD_OUT_CACHE_MS", 1000)?),
                warmup_lead: Duration::from_secs(parse(&get, "WARMUP_LEAD_SECONDS", 600)?),
                group_commit_max: parse(&get, "GROUP_COMMIT_MAX", 64)?,
                group_commit_writers: parse(&get, "GROUP_COMMIT_WRITERS", 1)?,
            },
            sweep: SweepSettings {
                interval: Duration::from_secs(parse(&get, "SWEEP_INTERVAL_SECONDS", 60)?),
                orphan_grace: Duration::from_secs(parse(&get, "ORPHAN_GRACE_SECONDS", 0)?),
                retire_after: Duration::from_secs(parse(
                    &get,
                    "GATE_RETIRE_AFTER_SECONDS",
                    86_400,
                )?),
                tombstone_retention: Duration::from_secs(at_least(
                    "GATE_TOMBSTONE_RETENTION_SECONDS",
                    parse(&get, "GATE_TOMBSTONE_RETENTION_SECONDS", 86_400)?,
                    3_600,
                )?),
            },
            server: ServerSettings {
                port: parse(&get, "PORT", 3000)?,
                header_read_timeout: Duration::from_millis(at_least_one(
                    "HEADER_READ_TIMEOUT_MS",
                    parse(&get, "HEADER_READ_TIMEOUT_MS", 10_000)?,
                )?),
                request_timeout: Duration::from_millis(at_least_one(
                    "REQUEST_TIMEOUT_MS",
                    parse(&get, "REQUEST_TIMEOUT_MS", 30_000)?,
                )?),
                max_connections: at_least_one(
                    "MAX_CONNECTIONS",
                    parse(&get, "MAX_CONNECTIONS", 10_000)?,
                )?,
                tokens: match (get("ORDER_SERVICE_TOKEN"), get("OPERATOR_TOKEN")) {
                    (Some(order), Some(ops)) if !order.is_empty() && !ops.is_empty() => {
                        if order == ops {
                            return Err(ConfigError {
                                name: "OPERATOR_TOKEN",
                                problem: "must differ from ORDER_SERVICE_TOKEN".into(),
                            });
                        }
                        Some((SecretString::from(order), SecretString::from(ops)))
                    }
                    (None, None) => None,
                    _ => {
                        return Err(ConfigError {
                            name: "ORDER_SERVICE_TOKEN",
                            problem: "set it and OPERATOR_TOKEN both (not empty), or neither"
                                .into(),
                        })
                    }
                },
                allow_unauthenticated: parse(&get, "ALLOW_UNAUTHENTICATED", false)?,
            },
            aws: AwsSettings {
                endpoint_url: get("AWS_ENDPOINT_URL"),
                region: aws_region,
            },
        })
    }

    pub fn database_url(&self) -> &str {
        self.database.url()
    }
}

impl DatabaseSettings {
    pub fn url(&self) -> &str {
        self.url.expose_secret()
    }
}

/// One `{"username": .., "password": ..}` secret; `name` is the variable that named it.
async fn read_credentials(
    client: &aws_sdk_secretsmanager::Client,
    name: &'static str,
    arn: &str,
) -> Result<DatabaseCredentials, ConfigError> {
    read_secret(client, name, arn, r#"{"username": .., "password": ..}"#).await
}

/// The cache's AUTH token secret: `{"password": ..}`.
#[derive(serde::Deserialize)]
struct RedisToken {
    password: SecretString,
}

/// One JSON secret of the shape `T`; `name` is the variable that named it.
async fn read_secret<T: serde::de::DeserializeOwned>(
    client: &aws_sdk_secretsmanager::Client,
    name: &'static str,
    arn: &str,
    shape: &str,
) -> Result<T, ConfigError> {
    let problem = |problem: String| ConfigError { name, problem };
    let secret = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| {
            problem(format!(
                "secret {arn} could not be read: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(e)
            ))
        })?;
    let text = secret
        .secret_string()
        .ok_or_else(|| problem(format!("secret {arn} has no string value")))?;
    serde_json::from_str(text).map_err(|e| {
        // The secret's text is never echoed: it holds the password.
        problem(format!(
            "secret {arn} is not {shape} JSON ({:?} error)",
            e.classify()
        ))
    })
}

fn parse<T: std::str::FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: T,
) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match get(name) {
        None => Ok(default),
        Some(raw) => raw.trim().parse().map_err(|e: T::Err| ConfigError {
            name,
            problem: format!("{raw:?} is not valid: {e}"),
        }),
    }
}

/// A count or duration where zero would mean "serve nothing" or "time out at once".
fn at_least(name: &'static str, value: u64, min: u64) -> Result<u64, ConfigError> {
    if value >= min {
        Ok(value)
    } else {
        Err(ConfigError {
            name,
            problem: format!("{value} is not valid: at least {min}"),
        })
    }
}

fn at_least_one<T: PartialOrd + From<u8> + std::fmt::Display>(
    name: &'static str,
    value: T,
) -> Result<T, ConfigError> {
    if value >= T::from(1) {
        Ok(value)
    } else {
        Err(ConfigError {
            name,
            problem: format!("{value} is not valid: at least 1"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn the_local_servers_tokens_come_both_or_not_at_all() {
        assert!(settings(&[]).unwrap().server.tokens.is_none());
        let both = settings(&[("ORDER_SERVICE_TOKEN", "a"), ("OPERATOR_TOKEN", "b")]).unwrap();
        assert!(both.server.tokens.is_some());
        for vars in [
            &[("ORDER_SERVICE_TOKEN", "a")][..],
            &[("OPERATOR_TOKEN", "b")],
            &[("ORDER_SERVICE_TOKEN", ""), ("OPERATOR_TOKEN", "b")],
            &[("ORDER_SERVICE_TOKEN", "same"), ("OPERATOR_TOKEN", "same")],
        ] {
            assert!(settings(vars).is_err(), "{vars:?}");
        }
    }

    #[test]
    fn defaults_follow_the_design() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.database_url(), DEFAULT_DATABASE_URL);
        assert_eq!(s.redis.url, DEFAULT_REDIS_URL);
        assert_eq!(s.server.port, 3000);
        assert_eq!(s.sweep.interval, Duration::from_secs(60));
        assert!(s.events.queue_url.is_none());
    }

    #[test]
    fn environment_overrides_and_bad_values_name_the_variable() {
        let s = settings(&[("PORT", "0"), ("EVENTS_QUEUE_URL", "http://q")]).unwrap();
        assert_eq!(s.server.port, 0);
        assert_eq!(s.events.queue_url.as_deref(), Some("http://q"));
        let err = settings(&[("PORT", "http")]).unwrap_err().to_string();
        assert!(err.contains("PORT"), "{err}");
    }

    #[test]
    fn only_the_migrate_function_is_given_the_application_roles_secret() {
        assert!(settings(&[]).unwrap().database.app_secret_arn.is_none());
        let s = settings(&[("APP_DATABASE_SECRET_ARN", "arn:app")]).unwrap();
        assert_eq!(s.database.app_secret_arn.as_deref(), Some("arn:app"));
        assert!(
            s.database.app_role.is_none(),
            "read by load(), not from the environment"
        );
    }

    #[test]
    fn debug_output_hides_the_database_url() {
        let s = settings(&[("DATABASE_URL", "postgres://u:hunter2@db/x")]).unwrap();
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
