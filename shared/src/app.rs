//! The clients a process builds once and every handler borrows: the Postgres store and Redis.

use std::time::Duration;

use crate::config::Settings;
use crate::errors::StoreError;
use crate::store::Store;

#[derive(Clone)]
pub struct App {
    pub store: Store,
    /// Opening a `Client` makes no connection; it only validates the URL.
    pub redis: redis::Client,
}

impl App {
    pub fn new(settings: &Settings) -> anyhow::Result<App> {
        Ok(App {
            store: Store::connect(settings)?,
            redis: redis::Client::open(settings.redis_url.as_str())?,
        })
    }

    /// Creates the database if missing and applies migrations: what `serve` does before it
    /// listens, and what `migrate` does alone.
    pub async fn prepare_database(&self) -> Result<(), StoreError> {
        self.store.ensure_database().await?;
        self.store.migrate().await
    }

    /// True when Redis answers PING within `limit`.
    pub async fn redis_ping(&self, limit: Duration) -> bool {
        let ping = async {
            let mut conn = self.redis.get_multiplexed_async_connection().await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await
        };
        matches!(tokio::time::timeout(limit, ping).await, Ok(Ok(_)))
    }
}
