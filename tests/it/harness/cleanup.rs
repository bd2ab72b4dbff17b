//! What a test leaves behind goes when the test ends, passed or failed: otherwise every run
//! adds a database per test, and its keys in Redis (and a role, for the tests of the
//! application role), for someone else to drop.

use std::time::Duration;

use super::postgres_base;

/// Bounds each step, so a dependency that stopped answering fails the clean-up, not the suite.
const STEP_LIMIT: Duration = Duration::from_secs(30);

/// Drops a test database, then a role, and deletes the Redis keys under a prefix, when
/// dropped.
///
/// `Drop` cannot await, and the test's own runtime may have a single thread, which blocking
/// here stalls: the work runs on a thread of its own with its own runtime, and is joined.
/// Failures are reported, never raised: a panic while the test is already panicking would
/// abort the whole binary.
pub struct Cleanup {
    db_name: String,
    /// `(node URL, key pattern)` pairs; empty for a test that wrote nothing to Redis.
    redis: Vec<(String, String)>,
    /// A role of the test's own. Roles belong to the whole server, not to the database, so it
    /// would outlive the test; it goes after the database, which takes its grants with it.
    role: Option<String>,
}

impl Cleanup {
    /// The database `db_name`, forced out even with connections still open.
    pub fn database(db_name: &str) -> Cleanup {
        Cleanup {
            db_name: db_name.to_owned(),
            redis: Vec::new(),
            role: None,
        }
    }

    /// The role `role` alone (a test that made one beside a [`TestApp`], which drops the
    /// database itself).
    pub fn role(role: &str) -> Cleanup {
        Cleanup::database("").and_role(role)
    }

    /// The role `role` as well, once the database is gone.
    pub fn and_role(mut self, role: &str) -> Cleanup {
        self.role = Some(role.to_owned());
        self
    }

    /// The keys starting with `prefix` on each of these Redis nodes, as well.
    pub fn and_redis_keys(mut self, nodes: &[String], prefix: &str) -> Cleanup {
        let pattern = format!("{prefix}*");
        self.redis
            .extend(nodes.iter().map(|node| (node.clone(), pattern.clone())));
        self
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let db_name = std::mem::take(&mut self.db_name);
        let redis = std::mem::take(&mut self.redis);
        let role = self.role.take();
        let worker = std::thread::Builder::new()
            .name("test-cleanup".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => return eprintln!("clean-up of {db_name}: no runtime: {e}"),
                };
                runtime.block_on(async {
                    for (node, pattern) in &redis {
                        match tokio::time::timeout(STEP_LIMIT, delete_keys(node, pattern)).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => eprintln!("clean-up: keys {pattern} on {node}: {e}"),
                            Err(_) => eprintln!("clean-up: keys {pattern} on {node}: timed out"),
                        }
                    }
                    if !db_name.is_empty() {
                        match tokio::time::timeout(STEP_LIMIT, drop_database(&db_name)).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => eprintln!("clean-up: database {db_name}: {e}"),
                            Err(_) => eprintln!("clean-up: database {db_name}: timed out"),
                        }
                    }
                    if let Some(role) = &role {
                        match tokio::time::timeout(STEP_LIMIT, drop_role(role)).await {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => eprintln!("clean-up: role {role}: {e}"),
                            Err(_) => eprintln!("clean-up: role {role}: timed out"),
                        }
                    }
                });
            });
        match worker {
            Ok(worker) => {
                let _ = worker.join();
            }
            Err(e) => eprintln!("clean-up: no thread: {e}"),
        }
    }
}

/// Drops the database from the `postgres` maintenance database. `WITH (FORCE)` ends the
/// sessions still on it: the server's pool, the test's own connection, a server the test
/// started beside it.
async fn drop_database(db_name: &str) -> Result<(), tokio_postgres::Error> {
    let url = format!("{}/postgres", postgres_base());
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let name = db_name.replace('"', "\"\"");
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await
}

/// Drops the role. Its privileges were all in the test's database, already dropped: nothing
/// else depends on it.
async fn drop_role(role: &str) -> Result<(), tokio_postgres::Error> {
    let url = format!("{}/postgres", postgres_base());
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let name = role.replace('"', "\"\"");
    client
        .batch_execute(&format!("DROP ROLE IF EXISTS \"{name}\""))
        .await
}

/// Deletes the keys matching `pattern` on one Redis node.
///
/// One key per `DEL`: on a cluster node, keys of different voucher codes are in different
/// slots, and a `DEL` of several would be refused.
async fn delete_keys(node: &str, pattern: &str) -> redis::RedisResult<()> {
    let mut redis = redis::Client::open(node)?
        .get_multiplexed_async_connection()
        .await?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut redis)
        .await?;
    if !keys.is_empty() {
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("DEL").arg(key).ignore();
        }
        pipe.query_async::<()>(&mut redis).await?;
    }
    Ok(())
}
