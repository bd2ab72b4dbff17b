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

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::{error::SqlState, types::Type, NoTls};

use secrecy::ExposeSecret;

pub use merge::{is_unknown_voucher, Merge, MergeOutcome, Merged, RowFacts, MERGE_BATCH_MAX};
pub use sweeps::{Expired, LiveFlashVoucher};

use crate::config::DatabaseSettings;
use crate::domain::{
    Discount, NewVoucher, OrderId, Page, Reservation, ReservationItem, ReservationList,
    ReservationView, Reserve, ReserveOutcome, Status, Validate, VoucherCode, VoucherList,
    VoucherRules, VoucherView,
};
use crate::errors::{
    CreateVoucherError, GetReservationError, GetVoucherError, ListError, ReserveError, StoreError,
};
use crate::gate::GateMeta;
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
    /// `ensure_database` reuses them). Behind an `Arc`: a `Store` is cloned into every service,
    /// and the router clones the `App` for every request.
    pg: Arc<tokio_postgres::Config>,
    /// Built once when `sslmode` asks for TLS (it reads the system's roots), shared by the
    /// pool and that maintenance connection.
    tls: Option<tls::PostgresTls>,
}

/// The facts about a voucher that never change after creation, cached by each process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VoucherKind {
    pub flash_sale: bool,
}

/// A voucher as a change to it starts from: its rules and the version they are at.
#[derive(Debug, Clone)]
pub struct VoucherState {
    pub rules: VoucherRules,
    pub version: i64,
    pub reservation_ttl_seconds: i32,
}

/// The voucher's rules from a row with the voucher's columns (`voucher_state`, `gate_source`).
fn voucher_rules(row: &tokio_postgres::Row) -> VoucherRules {
    VoucherRules {
        discount: Discount::from_columns(
            row.get("discount_amount"),
            row.get("discount_percent"),
            row.get("max_discount_amount"),
        ),
        min_order_amount: row.get("min_order_amount"),
        total_limit: row.get("total_limit"),
        per_user_limit: row.get("per_user_limit"),
        starts_at: row.get("starts_at"),
        ends_at: row.get("ends_at"),
        active: row.get("active"),
    }
}

/// What `fg_patch_voucher` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOutcome {
    /// Written; the voucher's new version.
    Applied(i64),
    /// Another change landed since the version given, or Postgres broke a deadlock with a batch
    /// of reserves by rolling this change back: nothing written, read again and retry.
    Stale,
    NotFound,
    /// The uses held exceed the new limit: nothing written. Postgres' detail.
    LimitBelowUsed(String),
}

/// The voucher view's columns, for one voucher or a page of them.
const VOUCHER_VIEW: &str = "
    SELECT v.code, v.discount_amount, v.discount_percent, v.max_discount_amount,
           v.min_order_amount, v.total_limit, v.per_user_limit, v.starts_at, v.ends_at,
           v.flash_sale, v.active, v.reservation_ttl_seconds, v.counter_slots,
           fg_used(v.code) AS used,
           (SELECT count(*) FROM redemption r
             WHERE r.voucher_code = v.code AND r.status = 1) AS reserved,
           (SELECT count(*) FROM redemption r
             WHERE r.voucher_code = v.code AND r.status = 2) AS confirmed,
           (SELECT count(*) FROM redemption r
             WHERE r.voucher_code = v.code AND r.release_reason = 'REVOKED') AS revoked
      FROM voucher v";

fn voucher_view(row: &tokio_postgres::Row) -> VoucherView {
    let discount = Discount::from_columns(
        row.get("discount_amount"),
        row.get("discount_percent"),
        row.get("max_discount_amount"),
    );
    let (discount_amount, discount_percent, max_discount_amount) = discount.columns();
    let total: i64 = row.get::<_, i32>("total_limit").into();
    let used: i64 = row.get("used");
    VoucherView {
        code: row.get("code"),
        discount_amount,
        discount_percent,
        max_discount_amount,
        min_order_amount: row.get("min_order_amount"),
        total_limit: total,
        per_user_limit: row.get::<_, i32>("per_user_limit").into(),
        starts_at: row.get("starts_at"),
        ends_at: row.get("ends_at"),
        flash_sale: row.get("flash_sale"),
        active: row.get("active"),
        reservation_ttl_seconds: row.get::<_, i32>("reservation_ttl_seconds").into(),
        counter_slots: row.get::<_, i16>("counter_slots").into(),
        used_count: used,
        remaining: total - used,
        reserved_count: row.get("reserved"),
        confirmed_count: row.get("confirmed"),
        revoked_count: row.get("revoked"),
    }
}

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
        })
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
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
        let r = &v.rules;
        let (amount, percent, cap) = r.discount.columns();
        // One statement, so one transaction: the voucher and its slots commit together, and
        // the caps' sum is checked at that commit.
        let rows = client
            .query_typed(
                "WITH v AS (
                   INSERT INTO voucher (code, discount_amount, discount_percent,
                                        max_discount_amount, min_order_amount, total_limit,
                                        per_user_limit, starts_at, ends_at, flash_sale, active,
                                        reservation_ttl_seconds, counter_slots)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                   ON CONFLICT (code) DO NOTHING
                   RETURNING code, total_limit, counter_slots)
                 SELECT v.code, fg_set_slots(v.code, v.total_limit, v.counter_slots) FROM v",
                &[
                    (&v.code.as_str(), Type::TEXT),
                    (&amount, Type::INT8),
                    (&percent, Type::INT2),
                    (&cap, Type::INT8),
                    (&r.min_order_amount, Type::INT8),
                    (&r.total_limit, Type::INT4),
                    (&r.per_user_limit, Type::INT4),
                    (&r.starts_at, Type::TIMESTAMPTZ),
                    (&r.ends_at, Type::TIMESTAMPTZ),
                    (&v.flash_sale, Type::BOOL),
                    (&r.active, Type::BOOL),
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
            discount_amount: amount,
            discount_percent: percent,
            max_discount_amount: cap,
            min_order_amount: r.min_order_amount,
            total_limit: r.total_limit.into(),
            per_user_limit: r.per_user_limit.into(),
            starts_at: r.starts_at,
            ends_at: r.ends_at,
            flash_sale: v.flash_sale,
            active: r.active,
            reservation_ttl_seconds: v.reservation_ttl_seconds.into(),
            counter_slots: v.counter_slots.into(),
            used_count: 0,
            remaining: r.total_limit.into(),
            reserved_count: 0,
            confirmed_count: 0,
            revoked_count: 0,
        })
    }

    pub async fn voucher(&self, code: &VoucherCode) -> Result<VoucherView, GetVoucherError> {
        let client = self.client().await?;
        let row = client
            .query_typed(
                &format!("{VOUCHER_VIEW} WHERE v.code = $1"),
                &[(&code.as_str(), Type::TEXT)],
            )
            .await
            .map_err(StoreError::from)?
            .into_iter()
            .next()
            .ok_or_else(|| GetVoucherError::NotFound(code.as_str().to_owned()))?;
        Ok(voucher_view(&row))
    }

    /// A page of vouchers in code order (keyset: the page after `list.after`).
    pub async fn vouchers(&self, list: &VoucherList) -> Result<Page<VoucherView>, ListError> {
        let after = list.after.as_ref().map(VoucherCode::as_str);
        // One more than the page, to know whether a page follows.
        let rows = self
            .client()
            .await?
            .query_typed(
                &format!(
                    "{VOUCHER_VIEW} WHERE ($1::text IS NULL OR v.code > $1)
                      ORDER BY v.code LIMIT $2"
                ),
                &[(&after, Type::TEXT), (&(list.limit + 1), Type::INT8)],
            )
            .await
            .map_err(StoreError::from)?;
        let mut items: Vec<VoucherView> = rows.iter().map(voucher_view).collect();
        let next = page_next(&mut items, list.limit, |v| VoucherList::cursor(&v.code));
        Ok(Page { items, next })
    }

    /// A page of a voucher's reservations in orderId order (keyset: the page after
    /// `list.after`), filtered by status and customer.
    pub async fn reservations(
        &self,
        list: &ReservationList,
    ) -> Result<Page<ReservationItem>, ListError> {
        let after = list.after.as_ref().map(OrderId::as_str);
        let status = list.status.map(Status::as_db);
        // The voucher's own row comes first, so an unknown voucher is told apart from an empty
        // page; the page's rows follow it.
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT r.order_id, r.customer_id, r.status, r.discount_amount, r.order_amount,
                        r.reserved_at, r.expires_at, r.confirmed_at, r.released_at,
                        r.release_reason
                   FROM voucher v
                   LEFT JOIN LATERAL (
                        SELECT * FROM redemption x
                         WHERE x.voucher_code = v.code
                           AND ($2::text IS NULL OR x.order_id > $2)
                           AND ($3::smallint IS NULL OR x.status = $3)
                           AND ($4::bigint IS NULL OR x.customer_id = $4)
                         ORDER BY x.order_id
                         LIMIT $5) r ON true
                  WHERE v.code = $1
                  ORDER BY r.order_id",
                &[
                    (&list.code.as_str(), Type::TEXT),
                    (&after, Type::TEXT),
                    (&status, Type::INT2),
                    (&list.customer_id, Type::INT8),
                    (&(list.limit + 1), Type::INT8),
                ],
            )
            .await
            .map_err(StoreError::from)?;
        if rows.is_empty() {
            return Err(ListError::VoucherNotFound);
        }
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let Some(order_id) = row.get::<_, Option<String>>("order_id") else {
                continue; // the voucher exists, the page is empty
            };
            let status: i16 = row.get("status");
            items.push(ReservationItem {
                order_id,
                customer_id: row.get("customer_id"),
                status: Status::from_db(status)
                    .ok_or_else(|| StoreError::UnexpectedOutcome(format!("status {status}")))?,
                discount_amount: row.get("discount_amount"),
                order_amount: row.get("order_amount"),
                reserved_at: row.get("reserved_at"),
                expires_at: row.get("expires_at"),
                confirmed_at: row.get("confirmed_at"),
                released_at: row.get("released_at"),
                release_reason: row.get("release_reason"),
            });
        }
        let next = page_next(&mut items, list.limit, |r| {
            ReservationList::cursor(&r.order_id)
        });
        Ok(Page { items, next })
    }

    /// The voucher's rules and version, as a change starts from (None: no such voucher).
    pub async fn voucher_state(
        &self,
        code: &VoucherCode,
    ) -> Result<Option<VoucherState>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT discount_amount, discount_percent, max_discount_amount, min_order_amount,
                        total_limit, per_user_limit, starts_at, ends_at, active, version,
                        reservation_ttl_seconds
                   FROM voucher WHERE code = $1",
                &[(&code.as_str(), Type::TEXT)],
            )
            .await?;
        Ok(rows.first().map(|row| VoucherState {
            rules: voucher_rules(row),
            version: row.get("version"),
            reservation_ttl_seconds: row.get("reservation_ttl_seconds"),
        }))
    }

    /// Writes `rules` as the voucher's, if it is still at `version` (`fg_patch_voucher`, one
    /// round trip and one transaction).
    pub async fn patch_voucher(
        &self,
        code: &VoucherCode,
        version: i64,
        rules: &VoucherRules,
    ) -> Result<PatchOutcome, StoreError> {
        let (amount, percent, cap) = rules.discount.columns();
        let result = self
            .client()
            .await?
            .query_typed(
                "SELECT outcome, version
                   FROM fg_patch_voucher($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                &[
                    (&code.as_str(), Type::TEXT),
                    (&version, Type::INT8),
                    (&amount, Type::INT8),
                    (&percent, Type::INT2),
                    (&cap, Type::INT8),
                    (&rules.min_order_amount, Type::INT8),
                    (&rules.total_limit, Type::INT4),
                    (&rules.per_user_limit, Type::INT4),
                    (&rules.starts_at, Type::TIMESTAMPTZ),
                    (&rules.ends_at, Type::TIMESTAMPTZ),
                    (&rules.active, Type::BOOL),
                ],
            )
            .await;
        let rows = match result {
            Ok(rows) => rows,
            Err(e) => {
                if let Some(db) = e.as_db_error() {
                    if db.code().code() == "FG409" && db.message() == "LIMIT_BELOW_USED" {
                        return Ok(PatchOutcome::LimitBelowUsed(
                            db.detail().unwrap_or_default().to_owned(),
                        ));
                    }
                    // Resizing locks every slot in slot order; a batch of reserves that holds
                    // one slot and then waits for all (near sold out) can meet it head on.
                    if db.code() == &SqlState::T_R_DEADLOCK_DETECTED {
                        return Ok(PatchOutcome::Stale);
                    }
                }
                return Err(e.into());
            }
        };
        let row = rows.first().ok_or(StoreError::NoRow)?;
        let outcome: &str = row.get("outcome");
        Ok(match outcome {
            "APPLIED" => PatchOutcome::Applied(row.get("version")),
            "STALE" => PatchOutcome::Stale,
            "NOT_FOUND" => PatchOutcome::NotFound,
            other => return Err(StoreError::UnexpectedOutcome(other.to_owned())),
        })
    }

    /// Would a reserve be granted now, by Postgres' rules (`fg_validate`, reads only)? The
    /// outcome (ELIGIBLE or the refusal) and the discount it would be given.
    pub async fn validate(
        &self,
        v: &Validate,
        now: DateTime<Utc>,
    ) -> Result<(ReserveOutcome, i64), StoreError> {
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT outcome, discount_amount FROM fg_validate($1, $2, $3, $4)",
                &[
                    (&v.code.as_str(), Type::TEXT),
                    (&v.customer_id, Type::INT8),
                    (&v.order_amount, Type::INT8),
                    (&now, Type::TIMESTAMPTZ),
                ],
            )
            .await?;
        let row = rows.first().ok_or(StoreError::NoRow)?;
        let word: &str = row.get("outcome");
        let outcome = ReserveOutcome::parse(word)
            .ok_or_else(|| StoreError::UnexpectedOutcome(word.to_owned()))?;
        Ok((
            outcome,
            row.get::<_, Option<i64>>("discount_amount").unwrap_or(0),
        ))
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

    /// How a voucher is decided (None: no such voucher). Immutable once created.
    pub async fn kind(&self, code: &VoucherCode) -> Result<Option<VoucherKind>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT flash_sale FROM voucher WHERE code = $1",
                &[(&code.as_str(), Type::TEXT)],
            )
            .await?;
        Ok(rows.first().map(|r| VoucherKind {
            flash_sale: r.get(0),
        }))
    }

    /// For the reconciler, in one snapshot: `total_limit` less the uses held, the voucher's
    /// version, and which of `orders` (held in the gate) Postgres has released (None: no such
    /// voucher).
    pub async fn released_among(
        &self,
        code: &VoucherCode,
        orders: &[&str],
    ) -> Result<Option<(i64, i64, Vec<String>)>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT v.total_limit - fg_used(v.code) AS remaining, v.version,
                        ARRAY(SELECT r.order_id FROM redemption r
                               WHERE r.voucher_code = v.code AND r.order_id = ANY($2)
                                 AND r.status = 3) AS released
                   FROM voucher v WHERE v.code = $1",
                &[(&code.as_str(), Type::TEXT), (&orders, Type::TEXT_ARRAY)],
            )
            .await?;
        Ok(rows
            .first()
            .map(|r| (r.get("remaining"), r.get("version"), r.get("released"))))
    }

    /// What the gate is loaded from, read in one snapshot: the voucher's rules at their
    /// version, the uses left (`total_limit` less the uses held, never `total_limit`) and, with
    /// `with_users`, each customer's active uses (the reconciler needs only the rest).
    pub async fn gate_source(
        &self,
        code: &VoucherCode,
        with_users: bool,
    ) -> Result<Option<GateSource>, StoreError> {
        let rows = self
            .client()
            .await?
            .query_typed(
                "SELECT v.flash_sale, v.discount_amount, v.discount_percent, v.max_discount_amount,
                        v.min_order_amount, v.total_limit, v.starts_at, v.ends_at, v.per_user_limit,
                        v.reservation_ttl_seconds, v.active, v.version,
                        v.total_limit - fg_used(v.code) AS remaining,
                        CASE WHEN $2 THEN
                          COALESCE((SELECT array_agg(c.customer_id ORDER BY c.customer_id)
                                      FROM voucher_customer c
                                     WHERE c.voucher_code = v.code AND c.active > 0), '{}')
                        ELSE '{}' END AS customers,
                        CASE WHEN $2 THEN
                          COALESCE((SELECT array_agg(c.active ORDER BY c.customer_id)
                                      FROM voucher_customer c
                                     WHERE c.voucher_code = v.code AND c.active > 0), '{}')
                        ELSE '{}' END AS actives
                   FROM voucher v WHERE v.code = $1",
                &[(&code.as_str(), Type::TEXT), (&with_users, Type::BOOL)],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let meta = GateMeta::of(
            &voucher_rules(row),
            row.get("reservation_ttl_seconds"),
            row.get("version"),
        );
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

/// Keeps the first `limit` items; the cursor of the last kept one when more followed.
fn page_next<T>(items: &mut Vec<T>, limit: i64, cursor: impl Fn(&T) -> String) -> Option<String> {
    if items.len() as i64 <= limit {
        return None;
    }
    items.truncate(limit as usize);
    items.last().map(cursor)
}

/// What a gate is loaded from ([`Store::gate_source`]), read in one snapshot.
#[derive(Debug, Clone)]
pub struct GateSource {
    /// Only flash-sale vouchers are loaded.
    pub flash_sale: bool,
    pub meta: GateMeta,
    /// `total_limit` less the uses held.
    pub remaining: i64,
    /// Each customer's active uses (empty unless asked for).
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
