//! Group commit in a long-running process (`flashgate serve`): reserves that arrive while a
//! batch is being written go together in the next one, in one round trip, one transaction and
//! one commit, and each is answered after that commit. Standard reserves go as one
//! `fg_reserve_strict`, mode A's flash winners as one `fg_merge_winners` (`fg_merge_strict` when
//! one of them is a retry or a campaign's code): set-based writes, a fixed handful of
//! statements whatever the batch's size (the general way, then the loop, when they decline).
//!
//! An on-demand Lambda environment serves one request at a time, so there every batch holds
//! one request and counter slots are what spread its winners; on Managed Instances an
//! environment serves several at once (`lambda.rs`), and their reserves batch as here. On by default (`GROUP_COMMIT_MAX`, at most
//! `MERGE_BATCH_MAX` requests a batch); `GROUP_COMMIT_MAX=1` writes each request on its own.

use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot, Mutex};

use crate::domain::{Held, Reservation, Reserve, Status, VoucherCode};
use crate::reservations::error::ReserveError;
use crate::store::StoreError;
use crate::store::{Merge, Merged, Store, MERGE_BATCH_MAX};
use crate::telemetry::metrics::BATCH_SIZE;

/// One request's write, waiting for its batch.
enum Job {
    /// A standard reserve.
    Reserve {
        request: Reserve,
        now: DateTime<Utc>,
        answer: oneshot::Sender<Result<Reservation, ReserveError>>,
    },
    /// A flash winner (mode A), written RESERVED.
    Winner {
        code: VoucherCode,
        order_id: String,
        held: Held,
        order_amount: i64,
        /// A use the gate has just granted on a voucher of its own: `fg_merge_winners` can
        /// write it (a retry, or a campaign's code, goes the general way).
        plain: bool,
        answer: oneshot::Sender<Result<Merged, StoreError>>,
    },
}

#[derive(Clone)]
pub(super) struct GroupCommit {
    store: Store,
    /// Most requests in one batch.
    max: usize,
    /// Writers, each with at most one batch in flight.
    writers: usize,
    /// Started on first use, from inside the runtime.
    queue: Arc<OnceLock<mpsc::Sender<Job>>>,
}

/// The writer went away: only while the process shuts down.
fn stopped() -> StoreError {
    StoreError::UnexpectedOutcome("group commit stopped".into())
}

impl GroupCommit {
    /// `max` 1 or less: every request is written on its own, at once.
    pub(super) fn new(store: Store, max: usize, writers: usize) -> GroupCommit {
        GroupCommit {
            store,
            max: max.min(MERGE_BATCH_MAX),
            writers: writers.max(1),
            queue: Arc::default(),
        }
    }

    /// A standard reserve, with the next batch.
    pub(super) async fn reserve(
        &self,
        request: &Reserve,
        now: DateTime<Utc>,
    ) -> Result<Reservation, ReserveError> {
        if self.max <= 1 {
            return ReserveError::answer(self.store.reserve(request, now).await);
        }
        let (answer, answered) = oneshot::channel();
        let job = Job::Reserve {
            request: request.clone(),
            now,
            answer,
        };
        self.queue().send(job).await.map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }

    /// A flash winner written RESERVED, with the next batch. `plain`: a use the gate has just
    /// granted on a voucher of its own (not a retry, not a campaign's code).
    pub(super) async fn merge_reserved(
        &self,
        code: &VoucherCode,
        order_id: &str,
        held: Held,
        order_amount: i64,
        plain: bool,
    ) -> Result<Merged, StoreError> {
        if self.max <= 1 {
            let merge = Merge::held(code, order_id, held, order_amount, Status::Reserved);
            if plain {
                let mut merged = self
                    .store
                    .merge_winners(std::slice::from_ref(&merge))
                    .await?;
                return merged.pop().ok_or(StoreError::NoRow)?;
            }
            return self.store.merge(&merge).await;
        }
        let (answer, answered) = oneshot::channel();
        let job = Job::Winner {
            code: code.clone(),
            order_id: order_id.to_owned(),
            held,
            order_amount,
            plain,
            answer,
        };
        self.queue().send(job).await.map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }

    fn queue(&self) -> &mpsc::Sender<Job> {
        self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(self.max * self.writers * 4);
            let rx = Arc::new(Mutex::new(rx));
            for _ in 0..self.writers {
                tokio::spawn(write(self.store.clone(), rx.clone(), self.max));
            }
            tx
        })
    }
}

/// Takes what is queued (up to `max`), writes it, answers each; again until every sender is
/// gone.
async fn write(store: Store, queue: Arc<Mutex<mpsc::Receiver<Job>>>, max: usize) {
    loop {
        let jobs = {
            // A tokio Mutex: held across the wait for the first job, so writers take turns.
            let mut queue = queue.lock().await;
            let Some(first) = queue.recv().await else {
                return;
            };
            let mut jobs = vec![first];
            while jobs.len() < max {
                match queue.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            jobs
        };
        let (mut reserves, mut winners) = (Vec::new(), Vec::new());
        let mut all_plain = true;
        for job in jobs {
            match job {
                Job::Reserve {
                    request,
                    now,
                    answer,
                } => reserves.push((request, now, answer)),
                Job::Winner {
                    code,
                    order_id,
                    held,
                    order_amount,
                    plain,
                    answer,
                } => {
                    all_plain &= plain;
                    winners.push((code, order_id, held, order_amount, answer))
                }
            }
        }
        if !reserves.is_empty() {
            let requests: Vec<(&Reserve, DateTime<Utc>)> =
                reserves.iter().map(|(r, now, _)| (r, *now)).collect();
            metrics::histogram!(BATCH_SIZE, "writer" => "standard").record(requests.len() as f64);
            match store.reserve_batch(&requests).await {
                Ok(answers) => {
                    for ((_, _, answer), result) in reserves.into_iter().zip(answers) {
                        let _ = answer.send(ReserveError::answer(result));
                    }
                }
                Err(e) => {
                    let e = Arc::new(e);
                    for (_, _, answer) in reserves {
                        let _ = answer.send(Err(StoreError::Batch(e.clone()).into()));
                    }
                }
            }
        }
        if !winners.is_empty() {
            let merges: Vec<Merge<'_>> = winners
                .iter()
                .map(|(code, order, held, amount, _)| {
                    Merge::held(code, order, *held, *amount, Status::Reserved)
                })
                .collect();
            metrics::histogram!(BATCH_SIZE, "writer" => "flash").record(merges.len() as f64);
            // A batch of plain winners (a sale's, nearly always) takes the short way.
            let merged = if all_plain {
                store.merge_winners(&merges).await
            } else {
                store.merge_batch(&merges).await
            };
            match merged {
                Ok(answers) => {
                    for (winner, result) in winners.into_iter().zip(answers) {
                        let _ = winner.4.send(result);
                    }
                }
                Err(e) => {
                    let e = Arc::new(e);
                    for winner in winners {
                        let _ = winner.4.send(Err(StoreError::Batch(e.clone())));
                    }
                }
            }
        }
    }
}
