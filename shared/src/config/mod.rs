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
//!
//! One file per group (`database`, `redis`, `events`, `reservations`, `sweep`, `server`,
//! `aws`); here the whole, its parsing from the environment, and its errors. The look-ups that
//! need AWS are `crate::aws`'s.

mod aws;
mod database;
mod events;
mod redis;
mod reservations;
mod server;
mod sweep;

use std::time::Duration;

use secrecy::SecretString;

pub use aws::AwsSettings;
pub use database::{DatabaseCredentials, DatabaseSettings};
pub use events::{EventSettings, KafkaAuth, KafkaSettings};
pub use redis::RedisSettings;
pub use reservations::ReservationSettings;
pub use server::ServerSettings;
pub use sweep::SweepSettings;

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

#[derive(Debug, thiserror::Error)]
#[error("environment variable {name}: {problem}")]
pub struct ConfigError {
    pub(crate) name: &'static str,
    pub(crate) problem: String,
}

impl Settings {
    /// The environment, then the secrets it names: what every binary calls at start.
    pub async fn load() -> Result<Self, ConfigError> {
        let mut settings = Self::from_env()?;
        settings.resolve_secrets().await?;
        settings.resolve_kafka_brokers().await?;
        Ok(settings)
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
                unknown_code_ttl: Duration::from_millis(parse(
                    &get,
                    "UNKNOWN_CODE_CACHE_MS",
                    1000,
                )?),
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
                order_lease: Duration::from_secs(parse(&get, "ORDER_LEASE_SECONDS", 60)?),
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
