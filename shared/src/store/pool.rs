//! The pool and the schema: connecting (TLS when `sslmode` asks for it, credentials from
//! Secrets Manager over the URL's), creating the database, and applying the migrations.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use secrecy::ExposeSecret;
use tokio_postgres::{error::SqlState, types::Type, NoTls};

use super::Store;
use super::StoreError;
use crate::config::DatabaseSettings;
use crate::tls;

mod embedded {
    refinery::embed_migrations!("../migrations");
}

/// Serialises concurrent `migrate` calls (several Lambda cold starts, several test servers).
const MIGRATION_LOCK: i64 = 0x666c_6173_6867_6174; // "flashgat"

impl Store {
    /// Builds the pool; no connection is made until the first query.
    pub fn connect(settings: &DatabaseSettings) -> Result<Store, StoreError> {
        let mut pg: tokio_postgres::Config = settings.url().parse().map_err(StoreError::Config)?;
        // Credentials read from Secrets Manager (DATABASE_SECRET_ARN) win over the URL's.
        if let Some(credentials) = &settings.credentials {
            pg.user(&credentials.username);
            pg.password(credentials.password.expose_secret());
        }
        // A dead database must turn into a fast 503, not a hung request.
        pg.connect_timeout(Duration::from_secs(2));
        if pg.get_application_name().is_none() {
            pg.application_name("flashgate");
        }
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let tls = if tls::postgres_requires_tls(&pg) {
            Some(tls::postgres_connector().map_err(StoreError::Tls)?)
        } else {
            None
        };
        let manager = match &tls {
            Some(connector) => Manager::from_config(pg.clone(), connector.clone(), manager_config),
            None => Manager::from_config(pg.clone(), NoTls, manager_config),
        };
        let pool = Pool::builder(manager)
            .max_size(settings.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(settings.timeout))
            .create_timeout(Some(settings.timeout))
            .recycle_timeout(Some(settings.timeout))
            .build()
            .map_err(StoreError::Build)?;
        Ok(Store {
            pool,
            pg: Arc::new(pg),
            tls,
            app_role: settings.app_role.clone().map(Arc::new),
        })
    }

    pub(super) async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Creates the database named in the URL if it does not exist yet (local runs, tests).
    pub async fn ensure_database(&self) -> Result<(), StoreError> {
        let mut cfg = (*self.pg).clone();
        let name = cfg.get_dbname().unwrap_or("postgres").to_owned();
        cfg.dbname("postgres");
        cfg.connect_timeout(Duration::from_secs(5));
        // Two branches because tokio-postgres gives the TLS and plain connections different
        // types.
        let client = match &self.tls {
            Some(connector) => {
                let (client, conn) = cfg
                    .connect(connector.clone())
                    .await
                    .map_err(StoreError::Connect)?;
                tokio::spawn(conn);
                client
            }
            None => {
                let (client, conn) = cfg.connect(NoTls).await.map_err(StoreError::Connect)?;
                tokio::spawn(conn);
                client
            }
        };
        let exists = client
            .query_typed(
                "SELECT 1 FROM pg_database WHERE datname = $1",
                &[(&name, Type::TEXT)],
            )
            .await?;
        if exists.is_empty() {
            let quoted = format!("\"{}\"", name.replace('"', "\"\""));
            match client
                .batch_execute(&format!("CREATE DATABASE {quoted}"))
                .await
            {
                Err(e) if e.code() == Some(&SqlState::DUPLICATE_DATABASE) => {}
                other => other?,
            }
            tracing::info!(database = %name, "created database");
        }
        Ok(())
    }

    /// Applies pending migrations under an advisory lock, then, when an application role is
    /// configured, creates or updates it under the same lock; answers the migrations it applied.
    pub async fn migrate(&self) -> Result<Vec<String>, StoreError> {
        let mut client = self.client().await?;
        client
            // The database's statement_timeout (set by the baseline) is for the service's queries: a migration
            // may rewrite a large table, and waiting for another migrator's lock is expected.
            .batch_execute(&format!(
                "SET statement_timeout = 0; SELECT pg_advisory_lock({MIGRATION_LOCK})"
            ))
            .await?;
        let client: &mut tokio_postgres::Client = &mut client;
        let report = embedded::migrations::runner().run_async(client).await;
        // The SQL functions after the tables they read, before the grants that cover them.
        let functions = match &report {
            Ok(_) => Some(super::functions::apply(client).await),
            Err(_) => None,
        };
        // Under the lock too: two migrators would otherwise race on CREATE ROLE and on the
        // grants (Postgres refuses concurrent changes of one catalog row).
        let role = match (&report, &functions, &self.app_role) {
            (Ok(_), Some(Ok(_)), Some(role)) => Some(super::role::provision(client, role).await),
            _ => None,
        };
        client
            .batch_execute(&format!(
                "SELECT pg_advisory_unlock({MIGRATION_LOCK}); RESET statement_timeout"
            ))
            .await?;
        let report = report.map_err(|e| match e.kind() {
            // The history this database records is not the one shipped: it was migrated
            // before the schema's history was squashed into one baseline.
            refinery::error::Kind::DivergentVersion(..)
            | refinery::error::Kind::MissingVersion(_) => StoreError::SchemaBeforeBaseline(e),
            _ => StoreError::Migration(e),
        })?;
        for name in functions.transpose()?.unwrap_or_default() {
            tracing::info!(function = name, "applied SQL function");
        }
        role.transpose()?;
        let applied: Vec<String> = report
            .applied_migrations()
            .iter()
            .map(|m| m.to_string())
            .collect();
        for m in &applied {
            tracing::info!(migration = %m, "applied migration");
        }
        Ok(applied)
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        self.client().await?.simple_query("SELECT 1").await?;
        Ok(())
    }
}
