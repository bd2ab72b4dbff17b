//! Mode B's consumer: merges `voucher-reserved` events into Postgres.
//!
//! A batch of messages is merged in one round trip and one transaction (`fg_merge_strict`, so
//! one commit for the batch and a fixed handful of statements; a long batch in two such pieces
//! at once, on two connections), each message with the lattice merge's outcome (`fg_merge`,
//! `revoke = true`), as if in a savepoint of its own: a duplicate, a late event after a release
//! or expiry, or events in any order change nothing twice, and a message that fails (bad JSON, an unknown voucher, a panic,
//! a deadlock with another batch) fails alone, as poison (never lands) or to retry. Poison is
//! what no retry can change: an event that does not parse or holds values out of the tables'
//! ranges, an unknown voucher, a value or constraint Postgres refuses (`store::never_passes`);
//! it goes to the dead letters at once. So does an event the rules never granted: before the
//! merge, each event is checked against the voucher's rules at the version the gate stamped on it
//! (`GrantRules`: paused, window, minimum order, discount, expiry; a flash-sale campaign's code's
//! at its campaign's version; one query for the batch), so
//! a forged or corrupted event cannot land a use or a discount. The consumer
//! is an `events::Sink`: each transport turns those answers into its own (SQS: the failed
//! message ids; Kafka: the dead-letter topic, or the offset to read again). With Postgres down,
//! the whole batch fails and comes back.
//!
//! When Postgres refuses the use (the voucher is full: only possible after the gate lost data),
//! the row is stored RELEASED with reason REVOKED, the gate gets a tombstone without the use
//! coming back, and the revocation is logged and counted.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::future::{join_all, BoxFuture};
use futures::FutureExt;

use crate::domain::{amount, customer_id, instant_ms, Invalid, OrderId, Status, VoucherCode};
use crate::events::{Landing, ReservedEvent, Sink, EVENT_TYPE, EVENT_VERSION};
use crate::gate::{Gate, Place, Removal};
use crate::store::{
    is_undefined_table, never_passes, Merge, MergeOutcome, Merged, Store, StoreError, MERGE_SET_MAX,
};
use crate::telemetry::{self, Chain};

/// Why one event could not be consumed.
#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    /// Will never succeed: the queue retries it, then moves it to the dead-letter queue.
    #[error("poison message: {0}")]
    Poison(String),
    /// Shared: when the batch's one round trip fails, every event of the batch fails with it.
    #[error("the database is unavailable")]
    Store(#[source] std::sync::Arc<StoreError>),
    #[error("panicked")]
    Panicked,
}

/// Most pieces a batch is merged in at once, each on a Postgres connection of its own.
const MERGE_PIECES: usize = 2;
/// Fewest events a piece holds: a short batch goes whole, its fixed cost paid once.
const MERGE_PIECE_MIN: usize = 128;

/// What one event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumed {
    /// The row was written (or raised).
    Applied,
    /// Postgres already had it: a duplicate, or a confirm/release/sweep got there first.
    Unchanged,
    /// Postgres refused the use: stored RELEASED/REVOKED.
    Revoked,
    /// The orderId holds this voucher for another customer in Postgres.
    Conflict,
}

impl Consumed {
    /// Its `outcome` label on `flashgate_events_landed_total`.
    fn label(self) -> &'static str {
        match self {
            Consumed::Applied => "applied",
            Consumed::Unchanged => "unchanged",
            Consumed::Revoked => "revoked",
            Consumed::Conflict => "conflict",
        }
    }
}

/// The consumer: the store and the gate, nothing else.
#[derive(Clone)]
pub struct Consumer {
    store: Store,
    gate: Arc<Gate>,
}

pub fn parse(body: &str) -> Result<ReservedEvent, ConsumeError> {
    let event: ReservedEvent = serde_json::from_str(body)
        .map_err(|e| ConsumeError::Poison(format!("not an event: {e}")))?;
    if event.kind != EVENT_TYPE || event.version != EVENT_VERSION {
        return Err(ConsumeError::Poison(format!(
            "unsupported event {} v{}",
            event.kind, event.version
        )));
    }
    let poison = |e: Invalid| ConsumeError::Poison(e.to_string());
    VoucherCode::parse(&event.code).map_err(poison)?;
    OrderId::parse(&event.order_id).map_err(poison)?;
    // The ranges the tables hold, checked here so that a bad event is named as such and goes
    // to the dead letters at once instead of failing in Postgres.
    customer_id("customerId", event.customer_id).map_err(poison)?;
    amount("orderAmount", event.order_amount).map_err(poison)?;
    amount("discountAmount", event.discount_amount).map_err(poison)?;
    instant_ms("reservedAtMs", event.reserved_at_ms).map_err(poison)?;
    instant_ms("expiresAtMs", event.expires_at_ms).map_err(poison)?;
    if event.expires_at_ms <= event.reserved_at_ms {
        return Err(poison(Invalid::new(
            "expiresAtMs",
            "must be after reservedAtMs",
        )));
    }
    Ok(event)
}

impl Consumer {
    pub fn new(store: Store, gate: Arc<Gate>) -> Consumer {
        Consumer { store, gate }
    }

    /// One event.
    pub async fn consume(&self, body: &str) -> Result<Consumed, ConsumeError> {
        self.consume_all(&[body])
            .await
            .pop()
            .expect("one answer per event")
    }

    /// Many events, merged in one transaction; an answer per event, in the order given. A
    /// panic is contained to the event it happened in (or to the batch, in the merge itself).
    pub async fn consume_all(&self, bodies: &[&str]) -> Vec<Result<Consumed, ConsumeError>> {
        let mut answers: Vec<Result<Consumed, ConsumeError>> = Vec::with_capacity(bodies.len());
        let mut events = Vec::new();
        for (i, body) in bodies.iter().enumerate() {
            match parse(body) {
                Ok(event) => {
                    let code = VoucherCode::parse(&event.code).expect("checked");
                    events.push((i, code, event));
                    // Replaced by the event's answer below; stands only if the merge panics.
                    answers.push(Err(ConsumeError::Panicked));
                }
                Err(e) => answers.push(Err(e)),
            }
        }
        if events.is_empty() {
            return answers;
        }
        if let Err(e) = self.check(&mut events, &mut answers).await {
            // Postgres unreachable: every event of the batch fails and comes back.
            let e = Arc::new(e);
            for (i, _, _) in &events {
                answers[*i] = Err(ConsumeError::Store(e.clone()));
            }
            return answers;
        }
        if events.is_empty() {
            return answers;
        }
        // Rows locked in one order by every batch: fewer deadlocks between concurrent batches.
        events.sort_by(|a, b| (a.1.as_str(), &a.2.order_id).cmp(&(b.1.as_str(), &b.2.order_id)));
        let merges: Vec<Merge<'_>> = events
            .iter()
            .map(|(_, code, e)| {
                Merge::held(
                    code,
                    &e.order_id,
                    e.held(),
                    e.order_amount,
                    Status::Reserved,
                )
                .revoking()
            })
            .collect();
        // A long batch (a backlog) goes to Postgres in pieces at once, each on a connection of
        // its own: one backend runs a set-based merge at about one core, which is what bounds
        // a drain after a burst. The pieces touch distinct rows and lock what they share in one
        // order; whichever order they land in, the lattice gives the same rows.
        let piece = merges
            .len()
            .div_ceil(MERGE_PIECES)
            .clamp(MERGE_PIECE_MIN, MERGE_SET_MAX);
        let pieces = join_all(
            merges
                .chunks(piece)
                .map(|chunk| AssertUnwindSafe(self.store.merge_batch(chunk)).catch_unwind()),
        )
        .await;
        // Each piece answers for its own events: one that failed (Postgres unreachable) leaves
        // them to come back, one whose merge panicked leaves them panicked, and the other's
        // stand, settled and counted.
        let mut merged: Vec<Option<Result<Merged, StoreError>>> = Vec::with_capacity(merges.len());
        for (result, chunk) in pieces.into_iter().zip(events.chunks(piece)) {
            match result {
                Ok(Ok(got)) => merged.extend(got.into_iter().map(Some)),
                Ok(Err(e)) => {
                    let e = Arc::new(e);
                    for (i, _, _) in chunk {
                        answers[*i] = Err(ConsumeError::Store(e.clone()));
                    }
                    merged.extend(chunk.iter().map(|_| None));
                }
                Err(_) => merged.extend(chunk.iter().map(|_| None)),
            }
        }
        for ((i, code, event), merged) in events.iter().zip(merged) {
            let Some(merged) = merged else { continue };
            answers[*i] = match AssertUnwindSafe(self.landed(code, event, merged))
                .catch_unwind()
                .await
            {
                Ok(answer) => answer,
                Err(_) => Err(ConsumeError::Panicked),
            };
        }
        // Postgres has the rows now: their orders are no longer pending in their gates. One
        // removal per gate for the batch, not a round trip per event.
        self.gate
            .settled_many_best_effort(
                events
                    .iter()
                    .filter(|(i, _, _)| answers[*i].is_ok())
                    .map(|(_, code, e)| (Place::of(code, e.campaign_id), e.order_id.as_str())),
            )
            .await;
        record_landed(&events, &answers);
        answers
    }

    /// Keeps the events the rules that granted them would have granted as they say; the others
    /// are answered as poison, with the reason. The rules come in one query for the batch.
    async fn check(
        &self,
        events: &mut Vec<(usize, VoucherCode, ReservedEvent)>,
        answers: &mut [Result<Consumed, ConsumeError>],
    ) -> Result<(), StoreError> {
        let asked: Vec<(&str, Option<i64>)> = events
            .iter()
            .map(|(_, code, e)| (code.as_str(), e.rules_version))
            .collect();
        let grants = match self.store.grants(&asked).await {
            Ok(grants) => grants,
            // Deployed before `migrate` created the rules' history: the events land
            // unchecked, as before this check existed, rather than fail until migrate runs.
            Err(e) if is_undefined_table(&e) => {
                tracing::warn!(error = %Chain(&e), "events not checked: run migrate");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let now_ms = chrono::Utc::now().timestamp_millis();
        events.retain(|(i, code, e)| {
            let code = code.as_str();
            let claim = e.claim();
            let refusal = if !grants.knows(code) {
                Some(format!("code: unknown voucher {code}"))
            } else if e.campaign_id != grants.campaign(code) {
                // The gate that granted it is named by the event: it must be the code's own
                // campaign's (or none), whose rules and versions the check below reads.
                Some(match grants.campaign(code) {
                    Some(id) => format!("campaignId: code {code} is of campaign {id}"),
                    None => format!("campaignId: code {code} is of no campaign"),
                })
            } else if let Some(version) = e.rules_version {
                match grants.at(code, version) {
                    Some(rules) => rules.refusal(&claim, now_ms).map(|why| why.to_string()),
                    None => Some(format!(
                        "rulesVersion: voucher {code} has no version {version} kept (never \
                         existed, or superseded longer ago than events are kept)"
                    )),
                }
            } else {
                // Sent before events carried the version: any kept rules that were in force
                // then may have granted it; the current rules name the refusal.
                let all = grants.all(code);
                if all.iter().any(|r| r.refusal(&claim, now_ms).is_none()) {
                    None
                } else {
                    all[0].refusal(&claim, now_ms).map(|why| why.to_string())
                }
            };
            match refusal {
                Some(why) => {
                    answers[*i] = Err(ConsumeError::Poison(why));
                    false
                }
                None => true,
            }
        });
        Ok(())
    }

    /// What one event's merge came to, and the gate told of a revocation (the batch's orders
    /// are settled together after).
    async fn landed(
        &self,
        code: &VoucherCode,
        e: &ReservedEvent,
        merged: Result<Merged, StoreError>,
    ) -> Result<Consumed, ConsumeError> {
        let merged = merged.map_err(|err| {
            if never_passes(&err) {
                // An unknown voucher, a value out of range, a broken constraint: retrying
                // would only hold up the events behind this one.
                ConsumeError::Poison(Chain(&err).to_string())
            } else {
                ConsumeError::Store(Arc::new(err))
            }
        })?;
        let consumed = match merged.outcome {
            MergeOutcome::Applied => Consumed::Applied,
            MergeOutcome::Revoked => {
                self.revoked(code, e).await;
                Consumed::Revoked
            }
            MergeOutcome::OrderConflict => {
                tracing::error!(code = %e.code, order_id = %e.order_id, "event's orderId belongs to another customer");
                Consumed::Conflict
            }
            _ => Consumed::Unchanged,
        };
        Ok(consumed)
    }

    async fn revoked(&self, code: &VoucherCode, e: &ReservedEvent) {
        tracing::error!(
            code = %e.code,
            order_id = %e.order_id,
            customer_id = e.customer_id,
            alert = "REVOKED",
            "Postgres refused a use the gate granted; stored RELEASED/REVOKED"
        );
        metrics::counter!(telemetry::metrics::REVOKED).increment(1);
        // A tombstone, and the use does not come back: the gate had one too many.
        if let Err(err) = self
            .gate
            .remove(
                Place::of(code, e.campaign_id),
                &e.order_id,
                Removal::Revoke,
                Some(e.customer_id),
            )
            .await
        {
            tracing::warn!(code = %e.code, order_id = %e.order_id, error = %Chain(&err), "gate revoke failed");
        }
    }
}

/// The batch's metrics: events landed by outcome, and how old its oldest event was when it
/// landed (one sample a batch: the lag a sale's consumer runs behind).
fn record_landed(
    events: &[(usize, VoucherCode, ReservedEvent)],
    answers: &[Result<Consumed, ConsumeError>],
) {
    for answer in answers.iter().flatten() {
        metrics::counter!(telemetry::metrics::EVENTS_LANDED, "outcome" => answer.label())
            .increment(1);
    }
    if let Some(oldest) = events.iter().map(|(_, _, e)| e.reserved_at_ms).min() {
        let lag_ms = chrono::Utc::now().timestamp_millis() - oldest;
        metrics::histogram!(telemetry::metrics::EVENT_LAG).record(lag_ms.max(0) as f64 / 1000.0);
    }
}

/// What the transports deliver to: each event's answer as a [`Landing`].
impl Sink for Consumer {
    /// Two merges' worth, which the consumer sends to Postgres at once, in two pieces.
    fn batch_max(&self) -> usize {
        2 * MERGE_SET_MAX
    }

    fn land<'a>(&'a self, bodies: &'a [&'a str]) -> BoxFuture<'a, Vec<Landing>> {
        async move {
            self.consume_all(bodies)
                .await
                .into_iter()
                .map(|result| match result {
                    Ok(_) => Landing::Landed,
                    Err(e @ (ConsumeError::Poison(_) | ConsumeError::Panicked)) => {
                        Landing::Poison(Chain(&e).to_string())
                    }
                    Err(e @ ConsumeError::Store(_)) => Landing::Retry(Chain(&e).to_string()),
                })
                .collect()
        }
        .boxed()
    }
}
