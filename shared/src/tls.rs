//! TLS for the connections that leave the process: Postgres through RDS Proxy and Redis on
//! ElastiCache both encrypt in transit in production (`template.yaml`), and locally neither does.
//!
//! Both use rustls with the operating system's roots (on Lambda's Amazon Linux, the Amazon roots
//! that sign RDS Proxy and ElastiCache certificates). `SSL_CERT_FILE` replaces those roots with
//! the bundle it names: to trust a private CA as well, point it at a bundle holding both. Redis
//! turns TLS on by its URL scheme (`rediss://`), Postgres by `sslmode=require` in
//! `DATABASE_URL`; `prefer`, the default, stays in clear text, because a local server's
//! self-signed certificate would fail verification.

use std::sync::Arc;

use tokio_postgres::config::SslMode;

/// Installs aws-lc-rs as the process's rustls provider. Several crates in the tree enable
/// rustls, and rustls refuses to guess when more than one provider is compiled in.
pub fn install_crypto_provider() {
    // Err means a provider is installed already (an earlier call): that one is kept.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

/// The Postgres TLS connector: cheap to clone (the configuration is shared).
pub type PostgresTls = tokio_postgres_rustls::MakeRustlsConnect;

/// Whether a Postgres connection must be encrypted (and its certificate verified).
pub fn postgres_requires_tls(config: &tokio_postgres::Config) -> bool {
    !matches!(config.get_ssl_mode(), SslMode::Disable | SslMode::Prefer)
}

/// The connector for `sslmode=require`: verified against the system's roots.
pub fn postgres_connector() -> Result<PostgresTls, TlsError> {
    install_crypto_provider();
    let loaded = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(loaded.certs);
    if added == 0 {
        return Err(TlsError(format!(
            "no trusted root certificates found ({:?})",
            loaded.errors
        )));
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(Arc::new(roots))
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

#[derive(Debug, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_explicit_sslmode_turns_postgres_tls_on() {
        let cfg = |url: &str| url.parse::<tokio_postgres::Config>().unwrap();
        assert!(!postgres_requires_tls(&cfg("postgres://u@h/db")));
        assert!(!postgres_requires_tls(&cfg(
            "postgres://u@h/db?sslmode=disable"
        )));
        assert!(postgres_requires_tls(&cfg(
            "postgres://u@h/db?sslmode=require"
        )));
    }

    #[test]
    fn the_system_roots_load() {
        assert!(postgres_connector().is_ok());
    }
}
