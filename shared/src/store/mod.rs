//! Postgres, the source of truth: the pool, migrations and every SQL statement the service
//! makes (no other module writes SQL).
//!
//! Queries go through `query_typed`, which uses the unnamed statement: no named prepared
//! statement is left on the connection, so RDS Proxy can keep multiplexing it (named statements
//! pin a client to one backend). Each operation is one round trip (two when a batch falls back
//! to the loop); the status logic itself lives in the SQL functions (sql/functions/): the
//! set-based `fg_reserve_strict` and `fg_merge_strict` for batches, the loop of `fg_reserve` and
//! `fg_merge` calls when those decline. It runs next to the rows it locks; the voucher row is
//! only read.
//!
//! # Files
//!
//! - `pool`: connecting (TLS, credentials), creating the database, and the migrations.
//! - `functions`: the SQL functions, one file each in `sql/functions/`, applied after them.
//! - `role`: the least-privilege application role `migrate` creates and grants.
//! - `vouchers`: creating, reading, listing and changing vouchers.
//! - `grants`: the rules a mode-B event was granted under, for the consumer's check.
//! - `campaigns`: creating campaigns with their codes, reading, listing and changing them.
//! - `reservations`: reserves (one or a batch), validation, reading and listing reservations.
//! - `orders`: orders of several codes: their rows and the sweeper's passes over them.
//! - `merge`: the one status change, `Store::merge_batch` (`fg_merge_strict`, then the loop):
//!   confirm, release, and every write of the gate, the events and the sweeps.
//! - `sweeps`: the sweeper's reads and its expiry batch.
//! - `gate_source`: what the gate is loaded from and reconciled with.
//! - `rows`: the row readers more than one of those files share (a reader only one query needs
//!   stays next to it).

mod campaign_codes;
mod campaigns;
mod descriptions;
mod error;
mod functions;
mod gate_source;
mod grants;
mod merge;
mod orders;
mod pool;
mod reservations;
mod role;
mod rows;
mod sweeps;
mod vouchers;

use std::sync::Arc;

use deadpool_postgres::Pool;

pub use campaigns::{CampaignCreated, CampaignPatched};
pub use descriptions::{DescribeOutcome, Described};
pub use error::StoreError;
pub use gate_source::{CampaignGateSource, GateCheck, GateSource};
pub use grants::Grants;
pub use merge::{
    is_undefined_function, is_undefined_table, is_unknown_voucher, never_passes, Merge,
    MergeOutcome, Merged, RowFacts, MERGE_BATCH_MAX, MERGE_SET_MAX,
};
pub use orders::{OrderState, OrdersSwept, StoredOrder};
pub use reservations::Reserved;
pub use sweeps::{Expired, LiveFlashCampaign, LiveFlashVoucher};
pub use vouchers::{PatchOutcome, VoucherKind, VoucherState};

use crate::config::DatabaseCredentials;
use crate::tls;

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
    /// The application role `migrate` creates or updates after the migrations
    /// (`APP_DATABASE_SECRET_ARN`); None everywhere but in the migrate function.
    app_role: Option<Arc<DatabaseCredentials>>,
}
