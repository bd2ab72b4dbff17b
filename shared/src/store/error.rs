//! What a store call can fail with. A refusal by the data (a code taken, no such row, a limit
//! below the uses held) is not an error here: each call answers it as an outcome, and the
//! reservation service turns it into its operation's error.

use crate::tls::TlsError;

/// Postgres failed: the caller may retry later (HTTP 503).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("bad database configuration")]
    Config(#[source] tokio_postgres::Error),
    #[error("TLS to the database could not be set up")]
    Tls(#[source] TlsError),
    #[error("the database pool could not be built")]
    Build(#[source] deadpool_postgres::BuildError),
    /// Connecting failed: refused, unreachable, TLS handshake or login (the source says which).
    #[error("could not connect to the database")]
    Connect(#[source] tokio_postgres::Error),
    /// No pooled connection within `DATABASE_TIMEOUT_MS` (all busy, or creating one hung).
    #[error("no database connection")]
    Pool(#[source] deadpool_postgres::PoolError),
    #[error("database error")]
    Postgres(#[from] tokio_postgres::Error),
    /// Postgres raised an error for one change of a batch; the others went through.
    #[error("database refused the change: {code}: {message}")]
    Refused { code: String, message: String },
    #[error("migration failed")]
    Migration(#[source] refinery::Error),
    /// The database records migrations that are not the shipped ones: it was migrated before
    /// the schema's history was squashed into one baseline (docs/DEPLOY.md).
    #[error(
        "this database was migrated before the schema's baseline (V1__baseline): recreate it, \
         see docs/DEPLOY.md"
    )]
    SchemaBeforeBaseline(#[source] refinery::Error),
    /// The application role (`APP_DATABASE_SECRET_ARN`) was refused before any change to it:
    /// a name that is not a plain identifier, or a role that would not be least-privilege.
    #[error("application role {role:?}: {problem}")]
    AppRole { role: String, problem: &'static str },
    /// The one round trip of a batch of writes failed; every write of the batch fails with it.
    #[error("the batch's write failed")]
    Batch(#[source] std::sync::Arc<StoreError>),
    #[error("database returned no row")]
    NoRow,
    #[error("database returned an unexpected outcome {0:?}")]
    UnexpectedOutcome(String),
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => StoreError::Connect(e),
            other => StoreError::Pool(other),
        }
    }
}
