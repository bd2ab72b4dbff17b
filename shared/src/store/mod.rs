//! Postgres, the source of truth: the pool, migrations and every SQL statement the service
//! makes (no other module writes SQL).
//!
//! Queries go through `query_typed`, which uses the unnamed statement: no named prepared
//! statement is left on the connection, so RDS Proxy can keep multiplexing it (named statements
//! pin a client to one backend). Each operation is one round trip; the status logic itself lives
//! in the SQL functions `fg_reserve` and `fg_merge` (migrations/), so it runs next to the rows it
//! locks and the voucher row is touched once, at the end of the transaction.

mod merge;
mod sweeps;

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::{error::SqlState, types::Type, NoTls};

use secrecy::ExposeSecret;

pub use merge::{is_unknown_voucher, Merge, MergeOutcome, Merged, RowFacts, MERGE_BATCH_MAX};
pub use sweeps::{Expired, LiveFlashVoucher};

use crate::config::Settings;
use crate::domain::{
    GateMeta, NewVoucher, OrderId, Reservation, ReservationView, Reserve, ReserveOutcome, Status,
    VoucherCode, VoucherView,
};
use crate::errors::{
    CreateVoucherError, GetReservationError, GetVoucherError, ReserveError, StoreError,
};
use crate::tls;

mod embedded {
    refinery::embed_migrations!("../migrations");
}

/// Serialises concurrent `migrate` calls (several Lambda cold starts, several test servers).
const MIGRATION_LOCK: i64 = 0x666c_6173_6867_6174; // "flashgat"

#[derive(Clone)]
pub struct Store {
    pool: Pool,
    /// The pool's connection settings, credentials included (the maintenance connection of
    /// `ensure_database` reuses them).
    pg: tokio_postgres::Config,
    /// Built once when `sslmode` asks for TLS (it reads the system's roots), shared by the
    /// pool and that maintenance connection.
    tls: Option<tls::PostgresTls>,
}

/// The facts about a voucher that never change after creation, cached by each process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VoucherKind {
    pub flash_sale: bool,
    pub per_user_limit: i64,
}

impl Store {
    /// Builds the pool; no connection is made until the first query.
    pub fn connect(settings: &Settings) -> Result<Store, StoreError> {
        let mut pg: tokio_postgres::Config = settings
            .database_url()
            .parse()
            .map_err(StoreError::Config)?;
        // Credentials read from Secrets Manager (DATABASE_SECRET_ARN) win over the URL's.
        if let Some(credentials) = &settings.database_credentials {
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
            .max_size(settings.database_pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(settings.database_timeout))
            .create_timeout(Some(settings.database_timeout))
            .recycle_timeout(Some(settings.database_timeout))
            .build()
            .map_err(StoreError::Build)?;
        Ok(Store { pool, pg, tls })
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// Creates the database named in the URL if it does not exist yet (local runs, tests).
    pub async fn ensure_database(&self) -> Result<(), StoreError> {
        let mut cfg = self.pg.clone();
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

    /// Applies pending migrations under an advisory lock; answers the ones it applied.
    pub async fn migrate(&self) -> Result<Vec<String>, StoreError> {
        let mut client = self.client().await?;
        client
            .batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK})"))
            .await?;
        let client: &mut tokio_postgres::Client = &mut client;
        let report = embedded::migrations::runner().run_async(client).await;
        client
            .batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"))
            .await?;
        let report = report.map_err(StoreError::Migration)?;
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

    pub async fn create_voucher(&self, v: &NewVoucher) -> Result<VoucherView, CreateVoucherError> {
        let client = self.client().await?;
        // One statement, so one transaction: the voucher and its slots commit together, and
        // the caps' sum is checked at that commit.
        let rows = client
            .query_typed(
                "WITH v AS (
                   INSERT INTO voucher (code, discount_amount, min_order_amount, total_limit,
                                        per_user_limit, starts_at, ends_at, flash_sale,
                                        reservation_ttl_seconds, counter_slots)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                   ON CONFLICT (code) DO NOTHING
                   RETURNING code, total_limit, counter_slots)
                 SELECT v.code, fg_set_slots(v.code, v.total_limit, v.counter_slots) FROM v",
                &[
                    (&v.code.as_str(), Type::TEXT),
                    (&v.discount_amount, Type::INT8),
                    (&v.min_order_amount, Type::INT8),
                    (&v.total_limit, Type::INT4),
                    (&v.per_user_limit, Type::INT4),
                    (&v.starts_at, Type::TIMESTAMPTZ),
                    (&v.ends_at, Type::TIMESTAMPTZ),
                    (&v.flash_sale, Type::BOOL),
                    (&v.reservation_ttl_seconds, Type::INT4),
                    (&v.counter_slots, Type::INT2),
                ],
            )
            .await
            .map_err(StoreError::from)?;
        if rows.is_empty() {
            return Err(CreateVoucherError::Exists(v.code.as_str().to_owned()));
        }
        Ok(VoucherView {
            code: v.code.as_str().to_owned(),
            discount_amount: v.discount_amount,
            min_order_amount: v.min_order_amount,
            total_limit: v.total_limit.into(),
            per_user_limit: v.per_user_limit.into(),
            starts_at: v.starts_at,
            ends_at: v.ends_at,
            flash_sale: v.flash_sale,
            reservation_ttl_seconds: v.reservation_ttl_seconds.into(),
            counter_slots: v.counter_slots.into(),
            used_count: 0,
            remaining: v.total_limit.into(),
            reserved_count: 0,
            confirmed_count: 0,
            revoked_count: 0,
        })
    }

    pub async fn voucher(&self, code: &VoucherCode) -> Result<VoucherView, GetVoucherError> {
        let client = self.client().await?;
        let row = client
            .query_typed(
                "SELECT v.code, v.discount_amount, v.min_order_amount, v.total_limit,
                        v.per_user_limit, v.starts_at, v.ends_at, v.flash_sale,
                        v.reservation_ttl_seconds, v.counter_slots, fg_used(v.code) AS used,
                        (SELECT count(*) FROM redemption r
                          WHERE r.voucher_code = v.code AND r.status = 1) AS reserved,
                        (SELECT count(*) FROM redemption r
                          WHERE r.voucher_code = v.code AND r.status = 2) AS confirmed,
                        (SELECT count(*) FROM redemption r
                          WHERE r.voucher_code = v.code AND r.release_reason = 'REVOKED') AS revoked
                   FROM voucher v WHERE v.code = $1",
                &[(&code.as_str(), Type::TEXT)],
            )
            .await
            .map_err(StoreError::from)?
            .into_iter()
            .next()
            .ok_or_else(|| GetVoucherError::NotFound(code.as_str().to_owned()))?;
        let total: i64 = row.get::<_, i32>("total_limit").into();
        let used: i64 = row.get("used");
        Ok(VoucherView {
            code: row.get("code"),
            discount_amount: row.get("discount_amount"),
            min_order_amount: row.get("min_order_amount"),
            total_limit: total,
            per_user_limit: row.get::<_, i32>("per_user_limit").into(),
            starts_at: row.get("starts_at"),
            ends_at: row.get("ends_at"),
            flash_sale: row.get("flash_sale"),
            reservation_ttl_seconds: row.get::<_, i32>("reservation_ttl_seconds").into(),
            counter_slots: row.get::<_, i16>("counter_slots").into(),
            used_count: used,
            remaining: total - used,
            reserved_count: row.get("reserved"),
            confirmed_count: row.get("confirmed"),
            revoked_count: row.get("revoked"),
        })
    }

    /// Standard-mode reserve: one call to `fg_reserve`, one round trip.
    pub async fn reserve(
        &self,
        r: &Reserve,
        now: DateTime<Utc>,
    ) -> Result<Reservation, ReserveError> {
        self.reserve_batch(&[(r, now)])
            .await?
            .pop()
            .ok_or(StoreError::NoRow)?
    }

    /// Many standard-mode reserves in one round trip and one transaction (`fg_reserve_batch`),
    /// answered in the order given; the outer error: the call itself failed and none was
    /// applied. Callers keep batches to [`MERGE_BATCH_MAX`].
    pub async fn reserve_batch(
        &self,
        requests: &[(&Reserve, DateTime<Utc>)],
    ) -> Result<Vec<Result<Reservation, ReserveError>>, StoreError> {
        merge::plain_then_isolated(|isolate| self.run_reserve_batch(requests, isolate)).await
    }

    async fn run_reserve_batch(
        &self,
        requests: &[(&Reserve, DateTime<Utc>)],
        isolate: bool,
    ) -> Result<Vec<Result<Reservation, ReserveError>>, StoreError> {
        let codes: Vec<&str> = requests.iter().map(|(r, _)| r.code.as_str()).collect();
        let orders: Vec<&str> = requests.iter().map(|(r, _)| r.order_id.as_str()).collect();
        let customers: Vec<i64> = requests.iter().map(|(r, _)| r.customer_id).collect();
        let amounts: Vec<i64> = requests.iter().map(|(r, _)| r.order_amount).collect();
        let nows: Vec<DateTime<Utc>> = requests.iter().map(|(_, now)| *now).collect();
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT idx, outcome, customer_id, status, discount_amount, expires_at,
                        error_code, error_message
                   FROM fg_reserve_batch($1, $2, $3, $4, $5, $6)",
                &[
                    (&codes, Type::TEXT_ARRAY),
                    (&orders, Type::TEXT_ARRAY),
                    (&customers, Type::INT8_ARRAY),
                    (&amounts, Type::INT8_ARRAY),
                    (&nows, Type::TIMESTAMPTZ_ARRAY),
                    (&isolate, Type::BOOL),
                ],
            )
            .await?;
        merge::one_row_each(&rows, requests.len())?;
        Ok(requests
            .iter()
            .zip(&rows)
            .map(|((r, _), row)| reserved(r, row))
            .collect())
    }

    pub async fn reservation(
        &self,
        code: &VoucherCode,
        order_id: &OrderId,
    ) -> Result<ReservationView, GetReservationError> {
        let client = self.client().await?;
        let row = client
            .query_typed(
                "SELECT customer_id, status, discount_amount, expires_at
                   FROM redemption WHERE voucher_code = $1 AND order_id = $2",
                &[
                    (&code.as_str(), Type::TEXT),
                    (&order_id.as_str(), Type::TEXT),
                ],
            )
            .await
            .map_err(StoreError::from)?
            .into_iter()
            .next()
            .ok_or(GetReservationError::NotFound)?;
        let facts = merge::row_facts(&row)?;
        Ok(ReservationView {
            order_id: order_id.as_str().to_owned(),
            customer_id: facts.customer_id,
            status: facts.status,
            discount_amount: facts.discount_amount,
            expires_at: facts.expires_at,
        })
    }

    /// `total_limit` less the uses held: what a gate should hold when nothing is in flight.
    pub async fn expected_remaining(&self, code: &VoucherCode) -> Result<Option<i64>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT total_limit - fg_used(code) FROM voucher WHERE code = $1",
                &[(&code.as_str(), Type::TEXT)],
            )
            .await?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    /// How a voucher is decided (None: no such voucher). Immutable once created.
    pub async fn kind(&self, code: &VoucherCode) -> Result<Option<VoucherKind>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT flash_sale, per_user_limit FROM voucher WHERE code = $1",
                &[(&code.as_str(), Type::TEXT)],
            )
            .await?;
        Ok(rows.first().map(|r| VoucherKind {
            flash_sale: r.get(0),
            per_user_limit: r.get::<_, i32>(1).into(),
        }))
    }

    /// What the gate is loaded from, read in one snapshot: the voucher's facts, the uses left
    /// (`total_limit` less the uses held, never `total_limit`) and each customer's active uses.
    pub async fn gate_source(&self, code: &VoucherCode) -> Result<Option<GateSource>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT v.flash_sale, v.discount_amount, v.min_order_amount, v.starts_at, v.ends_at,
                        v.per_user_limit, v.reservation_ttl_seconds,
                        v.total_limit - fg_used(v.code) AS remaining,
                        COALESCE((SELECT array_agg(c.customer_id ORDER BY c.customer_id)
                                    FROM voucher_customer c
                                   WHERE c.voucher_code = v.code AND c.active > 0), '{}') AS customers,
                        COALESCE((SELECT array_agg(c.active ORDER BY c.customer_id)
                                    FROM voucher_customer c
                                   WHERE c.voucher_code = v.code AND c.active > 0), '{}') AS actives
                   FROM voucher v WHERE v.code = $1",
                &[(&code.as_str(), Type::TEXT)],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let starts: DateTime<Utc> = row.get("starts_at");
        let ends: DateTime<Utc> = row.get("ends_at");
        let meta = GateMeta {
            discount: row.get("discount_amount"),
            min_order: row.get("min_order_amount"),
            starts_ms: starts.timestamp_millis(),
            ends_ms: ends.timestamp_millis(),
            per_user: row.get::<_, i32>("per_user_limit").into(),
            ttl_ms: i64::from(row.get::<_, i32>("reservation_ttl_seconds")) * 1000,
        };
        let remaining: i64 = row.get("remaining");
        let customers: Vec<i64> = row.get("customers");
        let actives: Vec<i32> = row.get("actives");
        Ok(Some(GateSource {
            flash_sale: row.get("flash_sale"),
            meta,
            remaining,
            users: customers.into_iter().zip(actives).collect(),
        }))
    }
}

/// What a gate is loaded from ([`Store::gate_source`]), read in one snapshot.
#[derive(Debug, Clone)]
pub struct GateSource {
    /// Only flash-sale vouchers are loaded.
    pub flash_sale: bool,
    pub meta: GateMeta,
    /// `total_limit` less the uses held.
    pub remaining: i64,
    /// Each customer's active uses.
    pub users: Vec<(i64, i32)>,
}

/// One row of `fg_reserve_batch`: the reservation, or the refusal or error it came to.
fn reserved(r: &Reserve, row: &tokio_postgres::Row) -> Result<Reservation, ReserveError> {
    if let Some(raised) = merge::raised(row) {
        // A refusal fg_merge found under lock, or an error.
        return Err(match raised {
            Ok(refused) => ReserveError::refused(refused),
            Err(e) => e.into(),
        });
    }
    let word: &str = row.get("outcome");
    let outcome = ReserveOutcome::parse(word)
        .ok_or_else(|| StoreError::UnexpectedOutcome(word.to_owned()))?;
    if let Some(refused) = ReserveError::refusal(outcome) {
        return Err(refused);
    }
    Ok(Reservation {
        order_id: r.order_id.as_str().to_owned(),
        customer_id: row.get("customer_id"),
        discount_amount: row.get("discount_amount"),
        status: Status::Reserved,
        expires_at: row.get("expires_at"),
    })
}
