//! The sold-out short cut: once the gate answers OUT_OF_STOCK for a flash voucher, this process
//! answers the voucher's reserves without the reserve script for `SOLD_OUT_CACHE_MS`.
//!
//! At first each answer still costs one read-only lookup (`lua/lookup.lua`), so that a winner's
//! retry gets its 201 again and the per-user limit refuses before stock, as the script would.
//! Meanwhile a task copies the voucher's orders and customers' active uses into the process
//! (`lua/copy.lua`, in bounded steps): a thousand entries for a thousand uses, tombstones
//! included. From then on every answer, a winner's retry included, comes from that copy with no
//! Redis call at all, and is the one the lookup would have given.
//!
//! The copy is exact: it is kept only if the gate's change counter (`#moves`), the orders
//! hash's size, `remaining` (0) and the per-user limit read the same before its first step and
//! after its last. When the mark expires, the next reserve goes to the script again; if it is
//! still OUT_OF_STOCK, one header read tells whether the copy still holds (no order moved) or a
//! new one is taken. A use that comes back through this process (a release, a higher limit)
//! drops the mark and its copy at once. A use that comes back through another process is seen
//! here when the mark expires, as before the copy existed: until then a new order is refused
//! OUT_OF_STOCK, and an order won meanwhile in that other process is unknown to this copy.
//!
//! Retired: a mark and its copy leave the map [`KEEP`] after the mark expired (kept that long
//! so that a sale still sold out revalidates its copy with one read instead of copying again),
//! and a voucher whose orders hash holds more than [`MAX_COPY`] fields is never copied (its
//! losers keep the lookup).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::domain::VoucherCode;
use crate::gate::{CopyHeader, CopyWhat, Gate, GateError, Lookup, OrderEntry};
use crate::telemetry::Chain;

/// The largest `orders` hash (entries and tombstones) a process copies: about 150 bytes each,
/// so a copy stays under 8 MB.
pub(super) const MAX_COPY: i64 = 50_000;

/// How long an expired mark and its copy stay, to be revalidated rather than copied again.
const KEEP: Duration = Duration::from_secs(60);

/// What this process knows of a voucher it saw sold out.
pub(super) enum Recent {
    /// Not sold out a moment ago: ask the gate's script.
    No,
    /// Sold out a moment ago, no copy yet: answer with one lookup.
    Lookup,
    /// Sold out a moment ago: answer from the copy.
    Copy(Arc<Copy>),
}

/// A sold-out voucher's orders and customers' active uses, as the gate held them.
#[derive(Debug)]
pub(super) struct Copy {
    header: CopyHeader,
    orders: HashMap<String, OrderEntry>,
    users: HashMap<i64, i64>,
}

impl Copy {
    /// What `lookup.lua` would answer for this order and customer.
    pub(super) fn lookup(&self, order_id: &str, customer_id: i64) -> Lookup {
        Lookup {
            entry: self.orders.get(order_id).cloned(),
            uses: self.users.get(&customer_id).copied().unwrap_or(0),
            per_user: self.header.per_user,
            trust: None,
        }
    }
}

/// The codes this process saw sold out, until when, with their copies. A std Mutex: held for
/// one map access, never across an await, and far cheaper than an async lock on the losers' hot
/// path.
#[derive(Clone)]
pub(super) struct SoldOut {
    ttl: Duration,
    gate: Arc<Gate>,
    marks: Arc<Mutex<HashMap<String, Mark>>>,
    /// Tells a copy that finished apart from a newer one started after a [`SoldOut::clear`].
    copies: Arc<AtomicU64>,
}

struct Mark {
    until: Instant,
    copy: State,
}

enum State {
    None,
    /// The copy numbered so is being taken; the previous one, if any, waits to be revalidated.
    Taking(u64),
    Ready(Arc<Copy>),
}

impl SoldOut {
    /// `ttl` zero: the short cut is off.
    pub(super) fn new(ttl: Duration, gate: Arc<Gate>) -> SoldOut {
        SoldOut {
            ttl,
            gate,
            marks: Arc::default(),
            copies: Arc::default(),
        }
    }

    pub(super) fn recently(&self, code: &VoucherCode) -> Recent {
        let marks = self.marks.lock().unwrap();
        match marks.get(code.as_str()) {
            Some(mark) if Instant::now() < mark.until => match &mark.copy {
                State::Ready(copy) => Recent::Copy(copy.clone()),
                _ => Recent::Lookup,
            },
            _ => Recent::No,
        }
    }

    /// The gate just answered OUT_OF_STOCK: answer from memory for the next `ttl`, and take (or
    /// revalidate) the copy in the background unless that is already under way.
    pub(super) fn mark(&self, code: &VoucherCode) {
        if self.ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut marks = self.marks.lock().unwrap();
        marks.retain(|_, m| now < m.until + KEEP || matches!(m.copy, State::Taking(_)));
        let mark = marks.entry(code.as_str().to_owned()).or_insert(Mark {
            until: now,
            copy: State::None,
        });
        let previous = match &mark.copy {
            // A reserve that reached the script while the copy was valid: the copy's own mark
            // still runs, never longer than `ttl` after the copy was last known exact.
            State::Ready(_) if now < mark.until => return,
            State::Taking(_) => {
                mark.until = now + self.ttl;
                return;
            }
            State::Ready(copy) => Some(copy.clone()),
            State::None => None,
        };
        mark.until = now + self.ttl;
        let number = self.copies.fetch_add(1, Ordering::Relaxed);
        mark.copy = State::Taking(number);
        drop(marks);
        let (this, code) = (self.clone(), code.clone());
        tokio::spawn(async move {
            let copy = match this.take(&code, previous).await {
                Ok(copy) => copy,
                Err(e) => {
                    tracing::warn!(code = code.as_str(), error = %Chain(&e), "sold-out copy not taken");
                    None
                }
            };
            let mut marks = this.marks.lock().unwrap();
            if let Some(mark) = marks.get_mut(code.as_str()) {
                if matches!(mark.copy, State::Taking(n) if n == number) {
                    mark.copy = copy.map_or(State::None, State::Ready);
                }
            }
        });
    }

    /// A use came back through this process: the voucher is no longer known to be sold out.
    pub(super) fn clear(&self, code: &VoucherCode) {
        self.marks.lock().unwrap().remove(code.as_str());
    }

    /// The voucher's copy, or None when it cannot be exact now (not sold out any more, too big,
    /// or changed while it was read).
    async fn take(
        &self,
        code: &VoucherCode,
        previous: Option<Arc<Copy>>,
    ) -> Result<Option<Arc<Copy>>, GateError> {
        let before = self.gate.copy_step(code, CopyWhat::Header, 0).await?.header;
        if before.remaining != Some(0) || before.size > MAX_COPY {
            return Ok(None);
        }
        if let Some(previous) = previous.filter(|p| p.header == before) {
            return Ok(Some(previous));
        }
        let mut copy = Copy {
            header: before,
            orders: HashMap::new(),
            users: HashMap::new(),
        };
        for what in [CopyWhat::Orders, CopyWhat::Users] {
            let mut cursor = 0;
            loop {
                let step = self.gate.copy_step(code, what, cursor).await?;
                if step.header != before {
                    return Ok(None);
                }
                copy.orders.extend(step.orders);
                copy.users.extend(step.users);
                // HSCAN may return a field twice, never skip one present throughout; the
                // unchanged header says every field was present throughout.
                if copy.orders.len().max(copy.users.len()) as i64 > MAX_COPY {
                    return Ok(None);
                }
                match step.cursor {
                    Some(0) | None => break,
                    Some(next) => cursor = next,
                }
            }
        }
        Ok(Some(Arc::new(copy)))
    }
}
