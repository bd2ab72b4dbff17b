//! `loadtest`: Flashgate's load tools, in a package of their own so that the service and its
//! functions build without the tools' dependencies (histograms, progress bars, an HTTP client,
//! charts).
//!
//! - `bench` (`src/bin/bench.rs`): reserve on one hot voucher through the service's own code,
//!   without HTTP, strategy against strategy, and the article's naive check-then-act beside them;
//! - `flash-sale` (`src/bin/flash-sale.rs`): an open-model flash sale over HTTP against a running
//!   Flashgate (or, with `--compare`, servers of its own), checked to the last use, with a JSON
//!   summary and an HTML report.
//!
//! Both run from the repository root: `cargo run --release --bin bench` or `--bin flash-sale`.
//! This library holds what they share: an in-process Flashgate's settings on a scratch database
//! and Redis key prefix of the run's own, and the cleanup that removes both afterwards.

use shared::Settings;

/// A database and a Redis key space that belong to one run, named after the process so that two
/// runs on the same servers do not meet.
pub struct Scratch {
    postgres: String,
    redis: String,
    name: String,
}

impl Scratch {
    /// `postgres` is a server URL without a database; `tool` names the database
    /// (`fg_<tool>_<pid>`). Nothing is created until a Flashgate prepares the database.
    pub fn new(tool: &str, postgres: &str, redis: &str) -> Scratch {
        Scratch {
            postgres: postgres.trim_end_matches('/').to_owned(),
            redis: redis.to_owned(),
            name: format!("fg_{tool}_{}", std::process::id()),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn database_url(&self) -> String {
        format!("{}/{}", self.postgres, self.name)
    }

    /// A Redis key prefix inside this run's key space; `tag` tells apart several Flashgates of
    /// one run, which must not share a gate.
    pub fn key_prefix(&self, tag: &str) -> String {
        if tag.is_empty() {
            format!("{}:", self.name)
        } else {
            format!("{}:{tag}:", self.name)
        }
    }

    /// Settings for an in-process Flashgate on the scratch database and Redis, the variables in
    /// `extra` added (or overriding); everything else at the service's defaults, whatever this
    /// process's environment says.
    pub fn settings(&self, tag: &str, extra: &[(&str, String)]) -> anyhow::Result<Settings> {
        let base = [
            ("DATABASE_URL", self.database_url()),
            ("REDIS_URL", self.redis.clone()),
            ("REDIS_KEY_PREFIX", self.key_prefix(tag)),
        ];
        Ok(Settings::from_lookup(|k| {
            extra
                .iter()
                .chain(base.iter())
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.clone())
        })?)
    }

    /// Drops the database (closing whatever connections are left on it) and deletes the run's
    /// Redis keys. Best effort: a run's result must not turn into a failure for want of cleanup.
    pub async fn remove(&self) {
        if let Ok(client) = redis::Client::open(self.redis.as_str()) {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{}:*", self.name))
                    .query_async(&mut c)
                    .await
                    .unwrap_or_default();
                if !keys.is_empty() {
                    let _ = redis::cmd("DEL").arg(keys).query_async::<i64>(&mut c).await;
                }
            }
        }
        let admin = format!("{}/postgres", self.postgres);
        if let Ok((client, conn)) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await {
            tokio::spawn(conn);
            let _ = client
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                    self.name
                ))
                .await;
        }
    }
}
