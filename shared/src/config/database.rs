//! `database`: Postgres' URL, pool, timeouts and logins.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

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

/// The database login kept in Secrets Manager.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct DatabaseCredentials {
    pub username: String,
    pub password: SecretString,
}

impl DatabaseSettings {
    pub fn url(&self) -> &str {
        self.url.expose_secret()
    }
}
