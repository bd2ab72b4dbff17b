//! The gate's connection to Redis: one node, or a Redis Cluster (`cluster` in the settings).
//! Nothing connects when the gate is built; the first call does.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::IntoConnectionInfo;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use secrecy::ExposeSecret;
use tokio::sync::OnceCell;

use super::GateError;
use crate::config::RedisSettings;

/// Single node (reconnecting multiplexed connection) or Redis Cluster.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Where the gate's connections come from.
// One per gate, for the process's life: the cluster variant's size costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub(super) enum Connector {
    /// One node: the connection manager reconnects by itself.
    Single(ConnectionManager),
    Cluster {
        client: ClusterClient,
        /// The cluster connection is made on first use, and again after a failed attempt.
        conn: OnceCell<ClusterConnection>,
    },
}

impl Connector {
    /// `settings.url`: one Redis URL, or with `cluster` a comma-separated list of seed nodes.
    /// No connection is made here; the first call makes it.
    pub(super) fn new(settings: &RedisSettings) -> Result<Connector, GateError> {
        let (url, timeout) = (settings.url.as_str(), settings.timeout);
        // `rediss://` URLs (ElastiCache with encryption in transit) go through rustls.
        crate::tls::install_crypto_provider();
        if settings.cluster {
            let nodes: Vec<&str> = url.split(',').map(str::trim).collect();
            let mut builder = ClusterClient::builder(nodes)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .retries(1);
            if let Some(password) = &settings.password {
                builder = builder.password(password.expose_secret());
            }
            let client = builder.build()?;
            Ok(Connector::Cluster {
                client,
                conn: OnceCell::new(),
            })
        } else {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(1);
            let mut info = url.into_connection_info()?;
            if let Some(password) = &settings.password {
                // The AUTH token comes from Secrets Manager, never in REDIS_URL.
                let redis = info
                    .redis_settings()
                    .clone()
                    .set_password(password.expose_secret());
                info = info.set_redis_settings(redis);
            }
            let client = redis::Client::open(info)?;
            Ok(Connector::Single(ConnectionManager::new_lazy_with_config(
                client, config,
            )?))
        }
    }

    /// A connection: the node's, or the cluster's (made now if it is not yet).
    pub(super) async fn conn(&self) -> Result<Conn, GateError> {
        match self {
            Connector::Single(c) => Ok(Conn::Single(c.clone())),
            Connector::Cluster { client, conn } => {
                let conn = conn
                    .get_or_try_init(|| client.get_async_connection())
                    .await?;
                Ok(Conn::Cluster(conn.clone()))
            }
        }
    }
}
