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

mod conn;
pub mod keys;
mod meta;
mod replies;

use std::future::Future;
use std::time::Duration;

use redis::{Cmd, FromRedisValue, Script, ScriptInvocation};

use crate::config::RedisSettings;
use crate::domain::{Held, ReserveOutcome};
use crate::telemetry::metrics::{timed, Dependency};
use conn::Connector;
pub use keys::{Keys, Place, Unit};
pub use meta::GateMeta;
use replies::{
    parse_copy, parse_counts, parse_lookup, parse_patched, parse_removed, parse_reserve,
    parse_scan, parse_validate,
};

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    #[error("redis error")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected gate reply: {0}")]
    Reply(String),
}

/// What [`Gate::load`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loaded {
    /// This call loaded the gate.
    Now,
    /// The gate was loaded already: nothing written.
    Already,
    /// The gate lock no longer holds the loader's token (it expired, and a change or another
    /// loader took it since): its snapshot may be older than a change, so nothing was written.
    Fenced,
    /// A repair: an order gained or lost a use since the counts were read; nothing written.
    Moved,
}

/// The counts a load or a repair writes (`lua/load.lua`): uses left, the money left (None: no
/// budget), each customer's uses, and a campaign's `codes`.
#[derive(Debug, Clone, Copy)]
pub struct LoadCounts<'a> {
    pub remaining: i64,
    pub budget: Option<i64>,
    pub users: &'a [(i64, i32)],
    pub codes: Option<&'a CodeCounts>,
}

/// `reserve.lua`'s answer: the outcome, and the use when one is held (RESERVED, REPLAY).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateReply {
    pub outcome: ReserveOutcome,
    pub held: Option<Held>,
    /// The voucher's version whose rules granted the use (None: no use held, or an entry
    /// written before the gate kept it). Mode B's event carries it for the consumer's check.
    pub rules_version: Option<i64>,
}

/// What an order is in the gate's `orders` hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderEntry {
    /// Held, with the order's amount: a row written from the gate ahead of (or instead of) the
    /// mode B event that carries it still records it. 0 for entries written before the gate
    /// kept it. `rules_version`: the voucher's version whose rules granted it (None: written
    /// before the gate kept it), which a replay's event carries again.
    Active {
        held: Held,
        order_amount: i64,
        rules_version: Option<i64>,
    },
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
/// voucher's per-user limit there (None: not loaded); with the trust when it was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub entry: Option<OrderEntry>,
    pub uses: i64,
    pub per_user: Option<i64>,
    pub trust: Option<Trust>,
}

/// Whether the gate holds every order it ever granted for a voucher (`lua/incarnation.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Loaded into the copy of Redis' data it still runs on: an order it does not know was
    /// never granted.
    Intact,
    /// Loaded, but Redis failed over or restarted since (the node's replication id is not the
    /// one the gate was loaded into): the last grants before that may be lost, and their events
    /// may still be on the way.
    Suspect,
    /// Not loaded: never, or Redis lost its data.
    Unloaded,
}

/// What `patch.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patched {
    Applied,
    /// The voucher is not in the gate: nothing to change there.
    NotLoaded,
    /// The uses granted exceed the new limit: nothing changed.
    LimitBelowUsed,
    /// The discounts granted exceed the new budget: nothing changed.
    BudgetBelowUsed,
    /// The caller's gate lock expired or was taken: nothing changed.
    LockLost,
}

/// What a change does to the gate's money left ([`Gate::patch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetStep {
    Keep,
    /// Added to the money left (a lower budget subtracts).
    Add(i64),
    /// The voucher has no budget any more.
    Remove,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removed {
    Released,
    Already,
    Unknown,
    /// The voucher is not in the gate: nothing written.
    NotLoaded,
}

/// What the reconciler compares on every sweep (`counts.lua`): `remaining`, and how many times
/// an order gained or lost a use (a change counter, not an absolute figure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateCounts {
    pub remaining: i64,
    pub moves: i64,
    /// The money budget left (None: the voucher has none).
    pub budget: Option<i64>,
}

/// One bounded step through a voucher's orders (`scan.lua`): the orders of the step that hold
/// a use (orderId, customer), and where the next step starts (0: the end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanStep {
    pub cursor: u64,
    pub actives: Vec<(String, i64)>,
}

/// What `copy.lua` reads besides the fields of a step. A copy of a voucher's orders is exact
/// only if this reads the same before its first step and after its last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyHeader {
    /// None: not loaded.
    pub remaining: Option<i64>,
    /// The `orders` hash's change counter (`lua/entry.lua`).
    pub moves: i64,
    /// The `orders` hash's field count: the bound on a copy's size.
    pub size: i64,
    pub per_user: Option<i64>,
}

/// What one `copy.lua` call reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyWhat {
    Header,
    Orders,
    Users,
}

/// One bounded step of a copy of a voucher's orders (or customers' active uses) into the
/// process (`lua/copy.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyStep {
    pub header: CopyHeader,
    /// Where the next step starts (0: the end); None for a header alone.
    pub cursor: Option<u64>,
    pub orders: Vec<(String, OrderEntry)>,
    /// Customer, active uses.
    pub users: Vec<(i64, i64)>,
}

/// Entries one scan step reads: small enough that a step holds Redis well under a millisecond
/// (500 took 0.7 ms, and 3 to 4 ms while Redis was still rehashing a freshly grown hash, whose
/// two tables a scan then reads: docs/BENCHMARKS.md). The walk is the fault path only.
pub const SCAN_STEP: usize = 200;

/// Pending orders read at once (see [`Gate::pending`]).
pub const PENDING_STEP: usize = 1000;

/// What a campaign's gate loads besides a voucher's (`lua/load.lua`): each code's limit (the
/// campaign's `perCodeLimit`, which never changes) and its `codes` hash: the uses each code
/// holds (field CODE) and each customer's uses of it (field `CODE|customerId`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodeCounts {
    pub per_code: i64,
    pub uses: Vec<(String, i64)>,
}

/// What `retire.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retired {
    /// Every key of the voucher is gone.
    Retired,
    /// The gate's own rules say the sale ended less than the retirement delay ago (a change
    /// reopened it): kept.
    Live,
    /// An order is still on its way to Postgres: kept.
    Pending,
    /// A loader or a change holds the gate lock: kept, for the next sweep.
    Locked,
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

/// A script with the preludes it uses in front of it: `lua/entry.lua` for those that read or
/// write order entries, `lua/rules.lua` for those that decide, `lua/incarnation.lua` for those
/// that record or compare which copy of Redis' data they run on.
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
            release: script(&[ENTRY], include_str!("../../../lua/release.lua")),
            lookup: script(
                &[ENTRY, INCARNATION],
                include_str!("../../../lua/lookup.lua"),
            ),
            trust: script(&[INCARNATION], include_str!("../../../lua/trust.lua")),
            lost: Script::new(include_str!("../../../lua/lost.lua")),
            retire: Script::new(include_str!("../../../lua/retire.lua")),
            prune: script(&[ENTRY], include_str!("../../../lua/prune.lua")),
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

    pub async fn reserve<'u>(
        &self,
        at: impl Into<Place<'u>>,
        customer_id: i64,
        order_id: &str,
        order_amount: i64,
        now_ms: i64,
    ) -> Result<GateReply, GateError> {
        let at = at.into();
        let k = self.keys(at.into());
        let mut inv = self.reserve.key(&k.meta);
        inv.key(&k.remaining)
            .key(&k.users)
            .key(&k.orders)
            .key(&k.pending)
            .arg(customer_id)
            .arg(at.field(order_id).as_ref())
            .arg(order_amount)
            .arg(now_ms);
        in_campaign(&mut inv, &k, at);
        let reply: Vec<String> = self.invoke("reserve", &inv).await?;
        parse_reserve(&reply)
    }

    /// Would a reserve be granted now? `validate.lua`: writes nothing. Answers ELIGIBLE with the
    /// discount, NOT_LOADED, or the refusal.
    pub async fn validate<'u>(
        &self,
        at: impl Into<Place<'u>>,
        customer_id: i64,
        order_amount: i64,
        now_ms: i64,
    ) -> Result<(ReserveOutcome, i64), GateError> {
        let at = at.into();
        let k = self.keys(at.into());
        let mut inv = self.validate.key(&k.meta);
        inv.key(&k.remaining)
            .key(&k.users)
            .arg(customer_id)
            .arg(order_amount)
            .arg(now_ms);
        in_campaign(&mut inv, &k, at);
        let reply: Vec<String> = self.invoke("validate", &inv).await?;
        parse_validate(&reply)
    }

    pub async fn remove<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
        how: Removal,
        customer_id: Option<i64>,
    ) -> Result<Removed, GateError> {
        let at = at.into();
        let k = self.keys(at.into());
        let (give_back, tombstone) = match how {
            Removal::Release => ("1", "1"),
            Removal::Revoke => ("0", "1"),
            Removal::Forget { give_back } => (if give_back { "1" } else { "0" }, "0"),
            Removal::Uncount => ("1", "keep"),
        };
        let customer = customer_id.map(|c| c.to_string()).unwrap_or_default();
        let mut inv = self.release.key(&k.remaining);
        inv.key(&k.users)
            .key(&k.orders)
            .key(&k.pending)
            .key(&k.meta)
            .key(&k.released)
            .arg(at.field(order_id).as_ref())
            .arg(give_back)
            .arg(tombstone)
            .arg(customer);
        in_campaign(&mut inv, &k, at);
        // Every removal but Uncount runs the same when repeated (the second finds a tombstone
        // or no entry). Uncount leaves the order active, so a second run after a reply lost
        // on a dropped connection would give one use back twice: it is not tried again, and
        // a lost reply leaves the drift to the reconciler.
        let reply: String = match how {
            Removal::Uncount => self.invoke_once("remove", &inv).await?,
            _ => self.invoke("remove", &inv).await?,
        };
        parse_removed(&reply)
    }

    /// The order's entry and (given a customer) that customer's active uses, in one round trip
    /// that writes nothing: the sold-out short cut's check for a winner's retry, and how
    /// confirm, release and the sweeper read what the gate holds.
    pub async fn lookup<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
        customer_id: Option<i64>,
    ) -> Result<Lookup, GateError> {
        self.look(at, order_id, customer_id, false).await
    }

    async fn look<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
        customer_id: Option<i64>,
        with_trust: bool,
    ) -> Result<Lookup, GateError> {
        let at = at.into();
        let k = self.keys(at.into());
        let customer = customer_id.map(|c| c.to_string()).unwrap_or_default();
        let reply: Vec<String> = self
            .invoke(
                "lookup",
                self.lookup
                    .key(&k.orders)
                    .key(&k.users)
                    .key(&k.meta)
                    .arg(at.field(order_id).as_ref())
                    .arg(customer)
                    .arg(if with_trust { "1" } else { "" }),
            )
            .await?;
        parse_lookup(&reply)
    }

    /// The order's entry in the `orders` hash.
    pub async fn order<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
    ) -> Result<Option<OrderEntry>, GateError> {
        Ok(self.lookup(at, order_id, None).await?.entry)
    }

    /// The order's entry, and in the same step whether the gate can be trusted to know every
    /// order it granted: with [`Trust::Intact`], an order without an entry was never granted.
    pub async fn order_with_trust<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
    ) -> Result<(Option<OrderEntry>, Trust), GateError> {
        let seen = self.look(at, order_id, None, true).await?;
        let trust = seen
            .trust
            .ok_or_else(|| GateError::Reply("lookup without its trust".into()))?;
        Ok((seen.entry, trust))
    }

    /// Removes every key of a voucher whose sale ended at least `after` before `now_ms` (by the
    /// gate's own copy of the rules) and that has no order pending. See `lua/retire.lua`.
    pub async fn retire<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        now_ms: i64,
        after: Duration,
    ) -> Result<Retired, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let mut inv = self.retire.key(&k.meta);
        inv.key(&k.remaining)
            .key(&k.users)
            .key(&k.orders)
            .key(&k.pending)
            .key(&k.loading)
            .key(&k.lost)
            .key(&k.released);
        if let Some(codes) = &k.codes {
            inv.key(codes);
        }
        inv.arg(now_ms).arg(after.as_millis() as u64);
        let reply: String = self.invoke("retire", &inv).await?;
        match reply.as_str() {
            "RETIRED" => Ok(Retired::Retired),
            "LIVE" => Ok(Retired::Live),
            "PENDING" => Ok(Retired::Pending),
            "LOCKED" => Ok(Retired::Locked),
            other => Err(GateError::Reply(other.to_owned())),
        }
    }

    /// Deletes at most `limit` of the gate's tombstones written more than `retention` ago (by
    /// the Redis clock). Answers how many went, and whether older ones are left for another
    /// call. See `lua/prune.lua`.
    pub async fn prune_tombstones<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        retention: Duration,
        limit: u32,
    ) -> Result<(u64, bool), GateError> {
        let k = self.keys(at.into());
        let mut inv = self.prune.key(&k.orders);
        inv.key(&k.released)
            .arg(retention.as_millis() as u64)
            .arg(limit);
        let (pruned, more): (u64, u8) = self.invoke("prune", &inv).await?;
        Ok((pruned, more == 1))
    }

    /// A voucher gone from a gate that had held it: how long ago a warm-up first found it so
    /// (zero the first time). See `lua/lost.lua`.
    pub async fn lost_for<'u>(&self, at: impl Into<Unit<'u>>) -> Result<Duration, GateError> {
        /// Long enough for any wait; past it a later look starts the clock again.
        const LOST_TTL: Duration = Duration::from_secs(600);
        let at = at.into();
        let k = self.keys(at);
        let ms: i64 = self
            .invoke(
                "lost_for",
                self.lost.key(&k.lost).arg(LOST_TTL.as_millis() as u64),
            )
            .await?;
        Ok(Duration::from_millis(ms.max(0) as u64))
    }

    /// After a [`Trust::Suspect`] answer or a SUSPECT reserve: how long ago the node serving the
    /// gate now was first found suspect (now, if this is the first time). None: the voucher is
    /// not loaded any more.
    pub async fn suspect_for<'u>(
        &self,
        at: impl Into<Unit<'u>>,
    ) -> Result<Option<Duration>, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let ms: i64 = self.invoke("suspect_for", &self.trust.key(&k.meta)).await?;
        Ok(u64::try_from(ms).ok().map(Duration::from_millis))
    }

    /// Orders reserved in the gate that Postgres may not have yet: the [`PENDING_STEP`] oldest
    /// with their reserve time (ms), and how many there are in all. Bounded, so that a burst's
    /// backlog never makes one call long; the rest waits for the next look.
    pub async fn pending<'u>(
        &self,
        at: impl Into<Unit<'u>>,
    ) -> Result<(Vec<(String, i64)>, usize), GateError> {
        let at = at.into();
        let k = self.keys(at);
        let oldest: Vec<(String, i64)> = self
            .query(
                "pending",
                redis::cmd("ZRANGE")
                    .arg(&k.pending)
                    .arg(0)
                    .arg(PENDING_STEP - 1)
                    .arg("WITHSCORES"),
            )
            .await?;
        if oldest.len() < PENDING_STEP {
            let all = oldest.len();
            return Ok((oldest, all));
        }
        let all: usize = self
            .query("pending", redis::cmd("ZCARD").arg(&k.pending))
            .await?;
        Ok((oldest, all.max(PENDING_STEP)))
    }

    /// `remaining` and the orders' change counter, read in one step, in constant time (None:
    /// not loaded).
    pub async fn counts<'u>(
        &self,
        at: impl Into<Unit<'u>>,
    ) -> Result<Option<GateCounts>, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let reply: Vec<String> = self
            .invoke(
                "counts",
                self.counts.key(&k.remaining).key(&k.orders).key(&k.meta),
            )
            .await?;
        parse_counts(&reply)
    }

    /// One step of [`SCAN_STEP`] entries through the voucher's orders, from `cursor` (0 to
    /// start).
    pub async fn scan_actives<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        cursor: u64,
    ) -> Result<ScanStep, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let reply: Vec<String> = self
            .invoke(
                "scan_actives",
                self.scan.key(&k.orders).arg(cursor).arg(SCAN_STEP),
            )
            .await?;
        parse_scan(&reply)
    }

    /// One step of a sold-out voucher's copy into the process (`lua/copy.lua`): `what` from
    /// `cursor` (0 to start), [`SCAN_STEP`] fields at most, with the header read in the same
    /// step.
    pub async fn copy_step<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        what: CopyWhat,
        cursor: u64,
    ) -> Result<CopyStep, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let what_arg = match what {
            CopyWhat::Header => "",
            CopyWhat::Orders => "orders",
            CopyWhat::Users => "users",
        };
        let reply: Vec<String> = self
            .invoke(
                "copy",
                self.copy
                    .key(&k.orders)
                    .key(&k.users)
                    .key(&k.remaining)
                    .key(&k.meta)
                    .arg(what_arg)
                    .arg(cursor)
                    .arg(SCAN_STEP),
            )
            .await?;
        parse_copy(&reply, what)
    }

    /// Sets `remaining` to `to` and the money budget left to `to_budget` (None: none) only
    /// if they still read `from`, no order is pending, no order gained or lost a use since
    /// `moves` was read, nobody holds the gate lock, and the gate's rules are of `version` (the
    /// reconciler's repair).
    pub async fn repair_remaining<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        from: GateCounts,
        to: i64,
        to_budget: Option<i64>,
        version: i64,
    ) -> Result<bool, GateError> {
        let text = |v: Option<i64>| v.map(|v| v.to_string()).unwrap_or_default();
        let at = at.into();
        let k = self.keys(at);
        let done: i64 = self
            .invoke(
                "repair_remaining",
                self.repair
                    .key(&k.remaining)
                    .key(&k.pending)
                    .key(&k.meta)
                    .key(&k.loading)
                    .key(&k.orders)
                    .arg(from.remaining)
                    .arg(to)
                    .arg(version)
                    .arg(from.moves)
                    .arg(text(from.budget))
                    .arg(text(to_budget)),
            )
            .await?;
        Ok(done == 1)
    }

    /// The order was written to Postgres: it is no longer pending.
    pub async fn settled<'u>(
        &self,
        at: impl Into<Place<'u>>,
        order_id: &str,
    ) -> Result<(), GateError> {
        let at = at.into();
        let k = self.keys(at.into());
        self.query::<i64>(
            "settled",
            redis::cmd("ZREM")
                .arg(&k.pending)
                .arg(at.field(order_id).as_ref()),
        )
        .await?;
        Ok(())
    }

    /// [`Gate::settled`] for a batch of orders (the consumer's): one `ZREM` per gate with all of
    /// its orders, the gates' at once, instead of a round trip per order. Best effort, as
    /// [`Gate::settled_best_effort`].
    pub async fn settled_many_best_effort<'u>(
        &self,
        orders: impl IntoIterator<Item = (Place<'u>, &'u str)>,
    ) {
        let mut by_unit: Vec<(Unit<'u>, Vec<String>)> = Vec::new();
        for (at, order_id) in orders {
            let field = at.field(order_id).into_owned();
            // A batch touches a handful of gates (one, in a sale): a walk beats a hash.
            match by_unit.iter_mut().find(|(unit, _)| *unit == at.unit) {
                Some((_, fields)) => fields.push(field),
                None => by_unit.push((at.unit, vec![field])),
            }
        }
        let removals = by_unit.into_iter().map(|(unit, fields)| async move {
            let pending = self.keys(unit).pending;
            let removed = self
                .query::<i64>("settled", redis::cmd("ZREM").arg(&pending).arg(&fields))
                .await;
            if let Err(e) = removed {
                tracing::warn!(code = %unit, orders = fields.len(), error = %crate::telemetry::Chain(&e), "pending not cleared");
            }
        });
        futures::future::join_all(removals).await;
    }

    /// [`Gate::settled`] where a failure only delays the clean-up: it is logged, and the
    /// sweeper clears the mark later (it finds the row).
    pub async fn settled_best_effort<'u>(&self, at: impl Into<Place<'u>>, order_id: &str) {
        let at = at.into();
        if let Err(e) = self.settled(at, order_id).await {
            tracing::warn!(code = at.code.as_str(), order_id, error = %crate::telemetry::Chain(&e), "pending not cleared");
        }
    }

    /// Loads a voucher unless it is loaded, with `counts` (the money left to give, None: no
    /// budget; a campaign's gate also takes `codes`, its codes' limit and uses held; a
    /// voucher's ignores them), if the gate lock still holds `token` (the loader's,
    /// [`Gate::try_lock_loading`]).
    pub async fn load<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        token: &str,
        meta: &GateMeta,
        counts: LoadCounts<'_>,
    ) -> Result<Loaded, GateError> {
        self.write_counts(at.into(), token, None, meta, counts)
            .await
    }

    /// Repairs a loaded gate that is not the copy of Redis' data it was loaded into (reserve
    /// answered SUSPECT after a failover): its rules and counts are replaced by `counts`, its
    /// orders and pending set kept, and it is trusted again on the node serving now. Only while
    /// it is still suspect, the lock holds `token`, and the orders' `#moves` is still `moves`
    /// (read before the counts were): otherwise nothing is written ([`Loaded::Moved`],
    /// [`Loaded::Fenced`], or [`Loaded::Already`] when there was nothing to repair).
    pub async fn repair_counts<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        token: &str,
        moves: i64,
        meta: &GateMeta,
        counts: LoadCounts<'_>,
    ) -> Result<Loaded, GateError> {
        self.write_counts(at.into(), token, Some(moves), meta, counts)
            .await
    }

    async fn write_counts(
        &self,
        at: Unit<'_>,
        token: &str,
        repair: Option<i64>,
        meta: &GateMeta,
        counts: LoadCounts<'_>,
    ) -> Result<Loaded, GateError> {
        let k = self.keys(at);
        let mut fields = meta_args(meta);
        if let Some(budget) = counts.budget {
            fields.extend(["budget".to_owned(), budget.to_string()]);
        }
        let codes = counts.codes.filter(|_| k.codes.is_some());
        if let Some(codes) = codes {
            fields.extend(["per_code".to_owned(), codes.per_code.to_string()]);
        }
        let mut inv = self.load.key(&k.meta);
        inv.key(&k.remaining)
            .key(&k.users)
            .key(&k.lost)
            .key(&k.loading)
            .key(&k.orders)
            .arg(token)
            .arg(repair.map(|m| m.to_string()).unwrap_or_default())
            .arg(counts.remaining)
            .arg(fields.len())
            .arg(&fields);
        if let Some(key) = &k.codes {
            inv.key(key).arg(counts.users.len() * 2);
        }
        for (customer, active) in counts.users {
            inv.arg(customer).arg(active);
        }
        for (field, uses) in codes.map(|c| c.uses.as_slice()).unwrap_or_default() {
            inv.arg(field).arg(uses);
        }
        // Safe to retry: run twice, a load finds the gate loaded and a repair finds it trusted.
        let loaded: i64 = self.invoke("load", &inv).await?;
        match loaded {
            1 => Ok(Loaded::Now),
            0 => Ok(Loaded::Already),
            -1 => Ok(Loaded::Fenced),
            -2 => Ok(Loaded::Moved),
            other => Err(GateError::Reply(format!("load: {other}"))),
        }
    }

    /// A change of the voucher (PATCH), under the gate lock `token` holds: adds `delta` to
    /// `remaining` unless it would go below zero, takes the budget `step` (an addition to the
    /// money left, refused below zero too), and sets the rules to `meta` (None: leaves them).
    pub async fn patch<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        token: &str,
        delta: i64,
        step: BudgetStep,
        meta: Option<&GateMeta>,
    ) -> Result<Patched, GateError> {
        let step = match step {
            BudgetStep::Keep => String::new(),
            BudgetStep::Add(money) => money.to_string(),
            BudgetStep::Remove => "DEL".to_owned(),
        };
        let at = at.into();
        let k = self.keys(at);
        let fields = meta.map(meta_args).unwrap_or_default();
        // Not `invoke`: a patch adds `delta`, and one that ran before its reply was lost must
        // not run again.
        let reply: String = self
            .invoke_once(
                "patch",
                self.patch
                    .key(&k.meta)
                    .key(&k.remaining)
                    .key(&k.loading)
                    .arg(token)
                    .arg(delta)
                    .arg(step)
                    .arg(&fields),
            )
            .await?;
        parse_patched(&reply)
    }

    /// The reconciler's copy of the rules read from Postgres (`sync.lua`): true when the gate's
    /// differed and were replaced.
    pub async fn sync_meta<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        meta: &GateMeta,
    ) -> Result<bool, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let fields = meta_args(meta);
        let wrote: i64 = self
            .invoke(
                "sync_meta",
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
    pub async fn is_locked<'u>(&self, at: impl Into<Unit<'u>>) -> Result<bool, GateError> {
        let at = at.into();
        let k = self.keys(at);
        self.query("is_locked", redis::cmd("EXISTS").arg(&k.loading))
            .await
    }

    pub async fn is_loaded<'u>(&self, at: impl Into<Unit<'u>>) -> Result<bool, GateError> {
        let at = at.into();
        let k = self.keys(at);
        self.query("is_loaded", redis::cmd("EXISTS").arg(&k.meta))
            .await
    }

    /// `SET loading token NX PX ttl`: true when this caller may load the voucher.
    pub async fn try_lock_loading<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let set: Option<String> = self
            .query(
                "try_lock_loading",
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
    pub async fn unlock_loading<'u>(
        &self,
        at: impl Into<Unit<'u>>,
        token: &str,
    ) -> Result<bool, GateError> {
        let at = at.into();
        let k = self.keys(at);
        let deleted: i64 = self
            .invoke("unlock_loading", self.unlock.key(&k.loading).arg(token))
            .await?;
        Ok(deleted == 1)
    }

    /// Uses left according to the gate (None: not loaded).
    pub async fn remaining<'u>(&self, at: impl Into<Unit<'u>>) -> Result<Option<i64>, GateError> {
        let at = at.into();
        let k = self.keys(at);
        self.query("remaining", redis::cmd("GET").arg(&k.remaining))
            .await
    }

    pub async fn ping(&self) -> bool {
        self.query::<String>("ping", &redis::cmd("PING"))
            .await
            .is_ok()
    }
}
