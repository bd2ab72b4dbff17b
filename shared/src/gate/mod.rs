//! The flash-sale gate: Redis decides who gets a use, atomically, with the Lua scripts in
//! `lua/`; Postgres then receives only the winners.
//!
//! Scripts run through `redis::Script` (EVALSHA, and the script body on NOSCRIPT). The scripts
//! that touch the `orders` hash run after `lua/entry.lua`, the one place the order entry's text
//! is written and read; Rust reads entries only through `lookup.lua`'s parsed reply. The scripts
//! that decide run after `lua/rules.lua`, the gate's one copy of the voucher's rules. Every key
//! carries the hash tag `{CODE}` ([`keys::Keys`]), so a Redis Cluster keeps a voucher in one
//! slot; a flash-sale campaign's codes share its keys, tagged `{campaign:ID}` ([`Place`]). Every call is bounded by a timeout: a dead Redis answers `GateError` within it, never
//! a hang. See docs/ARCHITECTURE.md, "The gate's keys and scripts".

//!
//! # Files
//!
//! Each family of scripts in a file of its own, with its calls, its reply types and their
//! parsers: `decide` (reserve, validate), `orders` (release, lookup, trust, pending), `reconcile`
//! (counts, scan, copy, repair), `load` (the gate lock, load and failover repair, patch, sync,
//! lost), `retire` (retirement, tombstones). Here: the error, the client, the script registry and
//! the bounded call every script goes through; `keys` builds every key, `meta` the rules as the
//! scripts read them, `conn` one node or a cluster, `replies` the parsers' shared pieces.

mod conn;
mod decide;
pub mod keys;
mod load;
mod meta;
mod orders;
mod reconcile;
mod replies;
mod retire;

use std::future::Future;
use std::time::Duration;

use redis::{Cmd, FromRedisValue, Script, ScriptInvocation};

use crate::config::RedisSettings;
use crate::telemetry::metrics::{timed, Dependency};
use conn::Connector;
pub use decide::GateReply;
pub use keys::{Keys, Place, Unit};
pub use load::{BudgetStep, CodeCounts, LoadCounts, Loaded, Patched};
pub use meta::GateMeta;
pub use orders::{Lookup, OrderEntry, Removal, Removed, Trust, PENDING_STEP};
pub use reconcile::{CopyHeader, CopyStep, CopyWhat, GateCounts, ScanStep, SCAN_STEP};
pub use retire::Retired;

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    #[error("redis error")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected gate reply: {0}")]
    Reply(String),
}

pub struct Gate {
    prefix: String,
    redis: Connector,
    timeout: Duration,
    reserve: Script,
    validate: Script,
    release: Script,
    load: Script,
    patch: Script,
    sync: Script,
    repair: Script,
    counts: Script,
    scan: Script,
    copy: Script,
    lookup: Script,
    trust: Script,
    lost: Script,
    retire: Script,
    prune: Script,
    unlock: Script,
}

const ENTRY: &str = include_str!("../../../lua/entry.lua");
const RULES: &str = include_str!("../../../lua/rules.lua");
const INCARNATION: &str = include_str!("../../../lua/incarnation.lua");
const CLOCK: &str = include_str!("../../../lua/clock.lua");

/// A script with the preludes it uses in front of it: `lua/entry.lua` for those that read or
/// write order entries, `lua/rules.lua` for those that decide, `lua/incarnation.lua` for those
/// that record or compare which copy of Redis' data they run on, `lua/clock.lua` for those that
/// read Redis' clock.
fn script(preludes: &[&str], body: &str) -> Script {
    let mut text = preludes.join("\n");
    text.push('\n');
    text.push_str(body);
    Script::new(&text)
}

/// A campaign's code: the `codes` hash and the code, after a script's other keys and arguments
/// (`lua/reserve.lua`, `validate.lua`, `release.lua`).
fn in_campaign(inv: &mut ScriptInvocation<'_>, k: &Keys, at: Place<'_>) {
    if let (Some(codes), Some(code)) = (&k.codes, at.campaign_code()) {
        inv.key(codes).arg(code);
    }
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
        Ok(Gate {
            prefix: settings.key_prefix.clone(),
            redis: Connector::new(settings)?,
            timeout: settings.timeout,
            reserve: script(
                &[ENTRY, RULES, INCARNATION],
                include_str!("../../../lua/reserve.lua"),
            ),
            validate: script(&[RULES], include_str!("../../../lua/validate.lua")),
            release: script(&[ENTRY, CLOCK], include_str!("../../../lua/release.lua")),
            lookup: script(
                &[ENTRY, INCARNATION],
                include_str!("../../../lua/lookup.lua"),
            ),
            trust: script(
                &[INCARNATION, CLOCK],
                include_str!("../../../lua/trust.lua"),
            ),
            lost: script(&[CLOCK], include_str!("../../../lua/lost.lua")),
            retire: Script::new(include_str!("../../../lua/retire.lua")),
            prune: script(&[ENTRY, CLOCK], include_str!("../../../lua/prune.lua")),
            load: script(&[INCARNATION, ENTRY], include_str!("../../../lua/load.lua")),
            patch: Script::new(include_str!("../../../lua/patch.lua")),
            sync: Script::new(include_str!("../../../lua/sync.lua")),
            repair: script(&[ENTRY], include_str!("../../../lua/repair.lua")),
            counts: script(&[ENTRY], include_str!("../../../lua/counts.lua")),
            scan: script(&[ENTRY], include_str!("../../../lua/scan.lua")),
            copy: script(&[ENTRY], include_str!("../../../lua/copy.lua")),
            unlock: Script::new(include_str!("../../../lua/unlock.lua")),
        })
    }

    pub fn keys(&self, at: Unit<'_>) -> Keys {
        Keys::of(&self.prefix, at)
    }

    /// `f`, or [`GateError::Timeout`] once the gate's timeout has passed: a dead Redis
    /// answers within it, never a hang. Timed as the gate's `call` (`telemetry::metrics`).
    async fn bounded<T>(
        &self,
        call: &'static str,
        f: impl Future<Output = Result<T, GateError>>,
    ) -> Result<T, GateError> {
        timed(
            Dependency::Gate,
            call,
            tokio::time::timeout(self.timeout, f),
        )
        .await
        .map_err(|_| GateError::Timeout(self.timeout))?
    }

    /// Runs a script on a connection, within the gate's timeout (making the connection
    /// included).
    ///
    /// A connection Redis closed while it sat idle (ElastiCache's idle timeout, while a Lambda
    /// environment was frozen) fails the first call made on it; that call is made once more,
    /// on the new connection the manager makes. A script called here is safe to run twice (a
    /// retried reserve is a replay, a release leaves a tombstone, a repair compares and sets,
    /// a load loads once): the same retry the service would otherwise ask of its client with
    /// a 503. The patch, which adds a delta, goes through [`Gate::invoke_once`].
    async fn invoke<T: FromRedisValue>(
        &self,
        call: &'static str,
        script: &ScriptInvocation<'_>,
    ) -> Result<T, GateError> {
        self.bounded(call, async {
            let mut c = self.redis.conn().await?;
            match script.invoke_async(&mut c).await {
                Err(e) if e.is_connection_dropped() => {
                    let mut c = self.redis.conn().await?;
                    Ok(script.invoke_async(&mut c).await?)
                }
                reply => Ok(reply?),
            }
        })
        .await
    }

    /// [`Gate::invoke`] without the second try, for a script that must not run twice.
    async fn invoke_once<T: FromRedisValue>(
        &self,
        call: &'static str,
        script: &ScriptInvocation<'_>,
    ) -> Result<T, GateError> {
        self.bounded(call, async {
            let mut c = self.redis.conn().await?;
            Ok(script.invoke_async(&mut c).await?)
        })
        .await
    }

    /// Runs one command on a connection, within the gate's timeout (making the connection
    /// included), and once more on a dropped connection (see [`Gate::invoke`]; every command
    /// here is a read, a set, a removal, or a lock taken only if free).
    async fn query<T: FromRedisValue>(
        &self,
        call: &'static str,
        cmd: &Cmd,
    ) -> Result<T, GateError> {
        self.bounded(call, async {
            let mut c = self.redis.conn().await?;
            match cmd.query_async(&mut c).await {
                Err(e) if e.is_connection_dropped() => {
                    let mut c = self.redis.conn().await?;
                    Ok(cmd.query_async(&mut c).await?)
                }
                reply => Ok(reply?),
            }
        })
        .await
    }

    pub async fn ping(&self) -> bool {
        self.query::<String>("ping", &redis::cmd("PING"))
            .await
            .is_ok()
    }
}
