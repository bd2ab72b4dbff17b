//! The flash-sale gate: Redis decides who gets a use, atomically, with the Lua scripts in
//! `lua/`; Postgres then receives only the winners.
//!
//! Scripts run through `redis::Script` (EVALSHA, and the script body on NOSCRIPT). The scripts
//! that touch the `orders` hash run after `lua/entry.lua`, the one place the order entry's text
//! is written and read; Rust reads entries only through `lookup.lua`'s parsed reply. The scripts
//! that decide run after `lua/rules.lua`, the gate's one copy of the voucher's rules. Every key
//! carries the hash tag `{CODE}` ([`keys::Keys`]), so a Redis Cluster keeps a voucher in one
//! slot. Every call is bounded by a timeout: a dead Redis answers `GateError` within it, never
//! a hang. See docs/ARCHITECTURE.md, "The gate's keys and scripts".

pub mod keys;

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, Script, ScriptInvocation, Value};
use tokio::sync::OnceCell;

use crate::config::RedisSettings;
use crate::domain::{GateMeta, Held, ReserveOutcome, VoucherCode};
pub use keys::Keys;

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    #[error("redis error")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected gate reply: {0}")]
    Reply(String),
}

/// `reserve.lua`'s answer: the outcome, and the use when one is held (RESERVED, REPLAY).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateReply {
    pub outcome: ReserveOutcome,
    pub held: Option<Held>,
}

/// What an order is in the gate's `orders` hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderEntry {
    /// Held, with the order's amount: a row written from the gate ahead of (or instead of) the
    /// mode B event that carries it still records it. 0 for entries written before the gate
    /// kept it.
    Active { held: Held, order_amount: i64 },
    /// Released; the customer is unknown for a tombstone of an order the gate never held.
    Tombstone(Option<i64>),
}

/// How `release.lua` takes an order out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Released: the use returns, a tombstone stays.
    Release,
    /// Postgres refused the use: tombstone, and the use does not return.
    Revoke,
    /// Undo a reserve that Postgres did not take, so that a retry starts afresh.
    Forget { give_back: bool },
    /// The gate counted an active order twice (it lost data, then granted the order again):
    /// one use and one customer use come back, the order stays active.
    Uncount,
}

/// What `lookup.lua` read: the order's entry, the customer's active uses in the gate, and the
/// voucher's per-user limit there (None: not loaded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup {
    pub entry: Option<OrderEntry>,
    pub uses: i64,
    pub per_user: Option<i64>,
}

/// What `patch.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patched {
    Applied,
    /// The voucher is not in the gate: nothing to change there.
    NotLoaded,
    /// The uses granted exceed the new limit: nothing changed.
    LimitBelowUsed,
    /// The caller's gate lock expired or was taken: nothing changed.
    LockLost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    Released,
    Already,
    Unknown,
}

/// Single node (reconnecting multiplexed connection) or Redis Cluster.
#[derive(Clone)]
enum Conn {
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

pub struct Gate {
    prefix: String,
    single: Option<ConnectionManager>,
    cluster: Option<redis::cluster::ClusterClient>,
    /// The cluster connection is made on first use, and again after a failed attempt.
    cluster_conn: OnceCell<ClusterConnection>,
    timeout: Duration,
    reserve: Script,
    validate: Script,
    release: Script,
    load: Script,
    patch: Script,
    sync: Script,
    repair: Script,
    actives: Script,
    lookup: Script,
    unlock: Script,
}

const ENTRY: &str = include_str!("../../../lua/entry.lua");
const RULES: &str = include_str!("../../../lua/rules.lua");

/// A script with the preludes it uses in front of it: `lua/entry.lua` for those that read or
/// write order entries, `lua/rules.lua` for those that decide.
fn script(preludes: &[&str], body: &str) -> Script {
    let mut text = preludes.join("\n");
    text.push('\n');
    text.push_str(body);
    Script::new(&text)
}

/// `meta` fields as script arguments: field, value, field, value, ...
fn meta_args(meta: &GateMeta) -> Vec<String> {
    meta.fields()
        .into_iter()
        .flat_map(|(field, value)| [field.to_owned(), value])
        .collect()
}

impl Gate {
    /// `settings.url`: one Redis URL, or with `cluster` a comma-separated list of seed nodes.
    /// No connection is made here; the first call makes it.
    pub fn new(settings: &RedisSettings) -> Result<Gate, GateError> {
        let (url, timeout) = (settings.url.as_str(), settings.timeout);
        // `rediss://` URLs (ElastiCache with encryption in transit) go through rustls.
        crate::tls::install_crypto_provider();
        let (single, cluster) = if settings.cluster {
            let nodes: Vec<&str> = url.split(',').map(str::trim).collect();
            let client = redis::cluster::ClusterClient::builder(nodes)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .retries(1)
                .build()?;
            (None, Some(client))
        } else {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(1);
            let client = redis::Client::open(url)?;
            (
                Some(ConnectionManager::new_lazy_with_config(client, config)?),
                None,
            )
        };
        Ok(Gate {
            prefix: settings.key_prefix.clone(),
            single,
            cluster,
            cluster_conn: OnceCell::new(),
            timeout,
            reserve: script(&[ENTRY, RULES], include_str!("../../../lua/reserve.lua")),
            validate: script(&[RULES], include_str!("../../../lua/validate.lua")),
            release: script(&[ENTRY], include_str!("../../../lua/release.lua")),
            lookup: script(&[ENTRY], include_str!("../../../lua/lookup.lua")),
            load: Script::new(include_str!("../../../lua/load.lua")),
            patch: Script::new(include_str!("../../../lua/patch.lua")),
            sync: Script::new(include_str!("../../../lua/sync.lua")),
            repair: script(&[ENTRY], include_str!("../../../lua/repair.lua")),
            actives: script(&[ENTRY], include_str!("../../../lua/actives.lua")),
            unlock: Script::new(include_str!("../../../lua/unlock.lua")),
        })
    }

    pub fn keys(&self, code: &VoucherCode) -> Keys {
        Keys::new(&self.prefix, code)
    }

    async fn conn(&self) -> Result<Conn, GateError> {
        if let Some(c) = &self.single {
            return Ok(Conn::Single(c.clone()));
        }
        let client = self.cluster.as_ref().expect("single or cluster");
        let conn = self
            .cluster_conn
            .get_or_try_init(|| client.get_async_connection())
            .await?;
        Ok(Conn::Cluster(conn.clone()))
    }

    /// `call`, or [`GateError::Timeout`] once the gate's timeout has passed: a dead Redis
    /// answers within it, never a hang.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, GateError>>,
    ) -> Result<T, GateError> {
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| GateError::Timeout(self.timeout))?
    }

    /// Runs a script on a connection, within the gate's timeout (making the connection
    /// included).
    async fn invoke<T: FromRedisValue>(
        &self,
        script: &ScriptInvocation<'_>,
    ) -> Result<T, GateError> {
        self.bounded(async {
            let mut c = self.conn().await?;
            Ok(script.invoke_async(&mut c).await?)
        })
        .await
    }

    /// Runs one command on a connection, within the gate's timeout (making the connection
    /// included).
    async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, GateError> {
        self.bounded(async {
            let mut c = self.conn().await?;
            Ok(cmd.query_async(&mut c).await?)
        })
        .await
    }

    pub async fn reserve(
        &self,
        code: &VoucherCode,
        customer_id: i64,
        order_id: &str,
        order_amount: i64,
        now_ms: i64,
    ) -> Result<GateReply, GateError> {
        let k = self.keys(code);
        let reply: Vec<String> = self
            .invoke(
                self.reserve
                    .key(&k.meta)
                    .key(&k.remaining)
                    .key(&k.users)
                    .key(&k.orders)
                    .key(&k.pending)
                    .arg(customer_id)
                    .arg(order_id)
                    .arg(order_amount)
                    .arg(now_ms),
            )
            .await?;
        parse_reserve(&reply)
    }

    /// Would a reserve be granted now? `validate.lua`: writes nothing. Answers ELIGIBLE with the
    /// discount, NOT_LOADED, or the refusal.
    pub async fn validate(
        &self,
        code: &VoucherCode,
        customer_id: i64,
        order_amount: i64,
        now_ms: i64,
    ) -> Result<(ReserveOutcome, i64), GateError> {
        let k = self.keys(code);
        let reply: Vec<String> = self
            .invoke(
                self.validate
                    .key(&k.meta)
                    .key(&k.remaining)
                    .key(&k.users)
                    .arg(customer_id)
                    .arg(order_amount)
                    .arg(now_ms),
            )
            .await?;
        let [outcome, discount] = reply.as_slice() else {
            return Err(GateError::Reply(format!("{reply:?}")));
        };
        let outcome = ReserveOutcome::parse(outcome)
            .ok_or_else(|| GateError::Reply(format!("unknown outcome {outcome:?}")))?;
        Ok((outcome, num(discount)?))
    }

    pub async fn remove(
        &self,
        code: &VoucherCode,
        order_id: &str,
        how: Removal,
        customer_id: Option<i64>,
    ) -> Result<Removed, GateError> {
        let k = self.keys(code);
        let (give_back, tombstone) = match how {
            Removal::Release => ("1", "1"),
            Removal::Revoke => ("0", "1"),
            Removal::Forget { give_back } => (if give_back { "1" } else { "0" }, "0"),
            Removal::Uncount => ("1", "keep"),
        };
        let customer = customer_id.map(|c| c.to_string()).unwrap_or_default();
        let reply: String = self
            .invoke(
                self.release
                    .key(&k.remaining)
                    .key(&k.users)
                    .key(&k.orders)
                    .key(&k.pending)
                    .arg(order_id)
                    .arg(give_back)
                    .arg(tombstone)
                    .arg(customer),
            )
            .await?;
        match reply.as_str() {
            "RELEASED" => Ok(Removed::Released),
            "ALREADY" => Ok(Removed::Already),
            "UNKNOWN" => Ok(Removed::Unknown),
            other => Err(GateError::Reply(other.to_owned())),
        }
    }

    /// The order's entry and (given a customer) that customer's active uses, in one round trip
    /// that writes nothing: the sold-out short cut's check for a winner's retry, and how
    /// confirm, release and the sweeper read what the gate holds.
    pub async fn lookup(
        &self,
        code: &VoucherCode,
        order_id: &str,
        customer_id: Option<i64>,
    ) -> Result<Lookup, GateError> {
        let k = self.keys(code);
        let customer = customer_id.map(|c| c.to_string()).unwrap_or_default();
        let reply: Vec<String> = self
            .invoke(
                self.lookup
                    .key(&k.orders)
                    .key(&k.users)
                    .key(&k.meta)
                    .arg(order_id)
                    .arg(customer),
            )
            .await?;
        parse_lookup(&reply)
    }

    /// The order's entry in the `orders` hash.
    pub async fn order(
        &self,
        code: &VoucherCode,
        order_id: &str,
    ) -> Result<Option<OrderEntry>, GateError> {
        Ok(self.lookup(code, order_id, None).await?.entry)
    }

    /// Orders reserved in the gate that Postgres may not have yet, with their reserve time (ms).
    pub async fn pending(&self, code: &VoucherCode) -> Result<Vec<(String, i64)>, GateError> {
        let k = self.keys(code);
        self.query(
            redis::cmd("ZRANGE")
                .arg(&k.pending)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES"),
        )
        .await
    }

    /// `remaining` and the orders holding a use in the gate (orderId, customer), read in one
    /// step (None: not loaded).
    pub async fn actives(
        &self,
        code: &VoucherCode,
    ) -> Result<Option<(i64, Vec<(String, i64)>)>, GateError> {
        let k = self.keys(code);
        let reply: Vec<String> = self
            .invoke(self.actives.key(&k.remaining).key(&k.orders))
            .await?;
        let Some((remaining, pairs)) = reply.split_first() else {
            return Err(GateError::Reply("empty".into()));
        };
        if remaining.is_empty() {
            return Ok(None);
        }
        let orders = pairs
            .chunks(2)
            .map(|p| match p {
                [order, customer] => Ok((order.clone(), num(customer)?)),
                _ => Err(GateError::Reply(format!("{reply:?}"))),
            })
            .collect::<Result<_, _>>()?;
        Ok(Some((num(remaining)?, orders)))
    }

    /// Sets `remaining` to `to` only if it still reads `from`, no order is pending, `active`
    /// orders hold a use as when it was read, nobody holds the gate lock, and the gate's rules
    /// are of `version` (the reconciler's repair).
    pub async fn repair_remaining(
        &self,
        code: &VoucherCode,
        from: i64,
        to: i64,
        version: i64,
        active: usize,
    ) -> Result<bool, GateError> {
        let k = self.keys(code);
        let done: i64 = self
            .invoke(
                self.repair
                    .key(&k.remaining)
                    .key(&k.pending)
                    .key(&k.meta)
                    .key(&k.loading)
                    .key(&k.orders)
                    .arg(from)
                    .arg(to)
                    .arg(version)
                    .arg(active),
            )
            .await?;
        Ok(done == 1)
    }

    /// The order was written to Postgres: it is no longer pending.
    pub async fn settled(&self, code: &VoucherCode, order_id: &str) -> Result<(), GateError> {
        let k = self.keys(code);
        self.query::<i64>(redis::cmd("ZREM").arg(&k.pending).arg(order_id))
            .await?;
        Ok(())
    }

    /// [`Gate::settled`] where a failure only delays the clean-up: it is logged, and the
    /// sweeper clears the mark later (it finds the row).
    pub async fn settled_best_effort(&self, code: &VoucherCode, order_id: &str) {
        if let Err(e) = self.settled(code, order_id).await {
            tracing::warn!(code = code.as_str(), order_id, error = %crate::telemetry::Chain(&e), "pending not cleared");
        }
    }

    /// Loads a voucher unless it is loaded. Returns true when this call loaded it.
    pub async fn load(
        &self,
        code: &VoucherCode,
        meta: &GateMeta,
        remaining: i64,
        users: &[(i64, i32)],
    ) -> Result<bool, GateError> {
        let k = self.keys(code);
        let fields = meta_args(meta);
        let mut inv = self.load.key(&k.meta);
        inv.key(&k.remaining)
            .key(&k.users)
            .arg(remaining)
            .arg(fields.len())
            .arg(&fields);
        for (customer, active) in users {
            inv.arg(customer).arg(active);
        }
        let loaded: i64 = self.invoke(&inv).await?;
        Ok(loaded == 1)
    }

    /// A change of the voucher (PATCH), under the gate lock `token` holds: adds `delta` to
    /// `remaining` unless it would go below zero, and sets the rules to `meta` (None: leaves
    /// them).
    pub async fn patch(
        &self,
        code: &VoucherCode,
        token: &str,
        delta: i64,
        meta: Option<&GateMeta>,
    ) -> Result<Patched, GateError> {
        let k = self.keys(code);
        let fields = meta.map(meta_args).unwrap_or_default();
        let reply: String = self
            .invoke(
                self.patch
                    .key(&k.meta)
                    .key(&k.remaining)
                    .key(&k.loading)
                    .arg(token)
                    .arg(delta)
                    .arg(&fields),
            )
            .await?;
        match reply.as_str() {
            "APPLIED" => Ok(Patched::Applied),
            "NOT_LOADED" => Ok(Patched::NotLoaded),
            "LIMIT_BELOW_USED" => Ok(Patched::LimitBelowUsed),
            "LOCK_LOST" => Ok(Patched::LockLost),
            other => Err(GateError::Reply(other.to_owned())),
        }
    }

    /// The reconciler's copy of the rules read from Postgres (`sync.lua`): true when the gate's
    /// differed and were replaced.
    pub async fn sync_meta(&self, code: &VoucherCode, meta: &GateMeta) -> Result<bool, GateError> {
        let k = self.keys(code);
        let fields = meta_args(meta);
        let wrote: i64 = self
            .invoke(
                self.sync
                    .key(&k.meta)
                    .key(&k.loading)
                    .arg(meta.version)
                    .arg(&fields),
            )
            .await?;
        Ok(wrote == 1)
    }

    /// Is the gate lock (`loading`) held by anyone?
    pub async fn is_locked(&self, code: &VoucherCode) -> Result<bool, GateError> {
        let k = self.keys(code);
        self.query(redis::cmd("EXISTS").arg(&k.loading)).await
    }

    pub async fn is_loaded(&self, code: &VoucherCode) -> Result<bool, GateError> {
        let k = self.keys(code);
        self.query(redis::cmd("EXISTS").arg(&k.meta)).await
    }

    /// `SET loading token NX PX ttl`: true when this caller may load the voucher.
    pub async fn try_lock_loading(
        &self,
        code: &VoucherCode,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, GateError> {
        let k = self.keys(code);
        let set: Option<String> = self
            .query(
                redis::cmd("SET")
                    .arg(&k.loading)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl.as_millis() as u64),
            )
            .await?;
        Ok(set.is_some())
    }

    /// Releases the loading lock if `token` still holds it (compare-and-delete): a loader that
    /// outlived the lock's TTL leaves alone the lock another caller took since. True when it
    /// deleted the lock.
    pub async fn unlock_loading(&self, code: &VoucherCode, token: &str) -> Result<bool, GateError> {
        let k = self.keys(code);
        let deleted: i64 = self.invoke(self.unlock.key(&k.loading).arg(token)).await?;
        Ok(deleted == 1)
    }

    /// Uses left according to the gate (None: not loaded).
    pub async fn remaining(&self, code: &VoucherCode) -> Result<Option<i64>, GateError> {
        let k = self.keys(code);
        self.query(redis::cmd("GET").arg(&k.remaining)).await
    }

    pub async fn ping(&self) -> bool {
        self.query::<String>(&redis::cmd("PING")).await.is_ok()
    }
}

fn num(s: &str) -> Result<i64, GateError> {
    s.parse()
        .map_err(|_| GateError::Reply(format!("not a number: {s:?}")))
}

fn parse_reserve(reply: &[String]) -> Result<GateReply, GateError> {
    let [outcome, customer, reserved, expires, discount] = reply else {
        return Err(GateError::Reply(format!("{reply:?}")));
    };
    let outcome = ReserveOutcome::parse(outcome)
        .ok_or_else(|| GateError::Reply(format!("unknown outcome {outcome:?}")))?;
    let held = if outcome.holds() {
        Some(Held {
            customer_id: num(customer)?,
            reserved_ms: num(reserved)?,
            expires_ms: num(expires)?,
            discount: num(discount)?,
        })
    } else {
        None
    };
    Ok(GateReply { outcome, held })
}

/// `lookup.lua`'s reply: `{state, customer, reservedMs, expiresMs, discount, amount, uses,
/// perUser}`.
fn parse_lookup(reply: &[String]) -> Result<Lookup, GateError> {
    let [state, customer, reserved, expires, discount, amount, uses, per_user] = reply else {
        return Err(GateError::Reply(format!("{reply:?}")));
    };
    let entry = match state.as_str() {
        "" => None,
        "A" => Some(OrderEntry::Active {
            held: Held {
                customer_id: num(customer)?,
                reserved_ms: num(reserved)?,
                expires_ms: num(expires)?,
                discount: num(discount)?,
            },
            order_amount: num(amount)?,
        }),
        "R" if customer.is_empty() => Some(OrderEntry::Tombstone(None)),
        "R" => Some(OrderEntry::Tombstone(Some(num(customer)?))),
        other => return Err(GateError::Reply(format!("unknown entry state {other:?}"))),
    };
    let per_user = match per_user.as_str() {
        "" => None,
        n => Some(num(n)?),
    };
    Ok(Lookup {
        entry,
        uses: num(uses)?,
        per_user,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn lookup_replies_parse_or_fail_loudly() {
        let held = Held {
            customer_id: 42,
            reserved_ms: 1000,
            expires_ms: 901000,
            discount: 5,
        };
        let lookup = |entry, uses, per_user| Lookup {
            entry,
            uses,
            per_user,
        };
        assert_eq!(
            parse_lookup(&s(&["A", "42", "1000", "901000", "5", "70000", "1", "2"])).unwrap(),
            lookup(
                Some(OrderEntry::Active {
                    held,
                    order_amount: 70000
                }),
                1,
                Some(2)
            )
        );
        assert_eq!(
            parse_lookup(&s(&["R", "42", "1", "2", "3", "0", "0", "1"])).unwrap(),
            lookup(Some(OrderEntry::Tombstone(Some(42))), 0, Some(1))
        );
        assert_eq!(
            parse_lookup(&s(&["R", "", "0", "0", "0", "0", "0", "1"])).unwrap(),
            lookup(Some(OrderEntry::Tombstone(None)), 0, Some(1))
        );
        assert_eq!(
            parse_lookup(&s(&["", "", "0", "0", "0", "0", "2", ""])).unwrap(),
            lookup(None, 2, None)
        );
        assert!(parse_lookup(&s(&["X", "1", "0", "0", "0", "0", "0", "1"])).is_err());
        assert!(parse_lookup(&s(&["A", "1"])).is_err());
    }

    #[test]
    fn reserve_replies_parse_or_fail_loudly() {
        assert_eq!(
            parse_reserve(&s(&["RESERVED", "7", "10", "20", "30"])).unwrap(),
            GateReply {
                outcome: ReserveOutcome::Reserved,
                held: Some(Held {
                    customer_id: 7,
                    reserved_ms: 10,
                    expires_ms: 20,
                    discount: 30
                })
            }
        );
        assert_eq!(
            parse_reserve(&s(&["OUT_OF_STOCK", "", "0", "0", "0"])).unwrap(),
            GateReply {
                outcome: ReserveOutcome::OutOfStock,
                held: None
            }
        );
        assert!(parse_reserve(&s(&["RESERVED"])).is_err());
        assert!(parse_reserve(&s(&["DUPLICATE", "", "0", "0", "0"])).is_err());
    }
}
