//! What a process knows of codes without asking Postgres: each known code's kind, which never
//! changes after creation, and for a short while the codes Postgres said do not exist.
//!
//! The second is the negative cache: during a sale, bots and typos send codes that do not
//! exist, and each would otherwise cost a Postgres query, taken from the sale. A code found
//! unknown is answered 404 from memory for `UNKNOWN_CODE_CACHE_MS` (default 1 s), at most
//! [`UNKNOWN_KEPT`] codes at once.
//!
//! A code created in this process is known at once: creation forgets it (a campaign, whose
//! codes may be a million generated ones, forgets every unknown code) and moves the epoch on,
//! so a look-up that began before the creation and found nothing cannot write its stale
//! "unknown" afterwards. Another process learns of it when its entry ages out: a code is
//! answered 404 there for at most `UNKNOWN_CODE_CACHE_MS` after its creation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::domain::VoucherCode;
use crate::store::VoucherKind;

/// Most voucher kinds a process keeps (about 100 bytes each).
const KINDS_KEPT: usize = 100_000;
/// Most unknown codes a process keeps (about 80 bytes each): a flood of distinct codes beyond
/// it costs each of them the query it costs without the cache.
pub(super) const UNKNOWN_KEPT: usize = 100_000;

#[derive(Clone)]
pub(super) struct Known {
    /// At most [`KINDS_KEPT`] codes: campaigns bring millions.
    kinds: Arc<RwLock<HashMap<String, VoucherKind>>>,
    unknown: Arc<Mutex<Unknown>>,
    unknown_ttl: Duration,
}

#[derive(Default)]
struct Unknown {
    /// When each code was found unknown.
    codes: HashMap<String, Instant>,
    /// Moved on by every creation in this process (see the module's comment).
    epoch: u64,
}

/// What the process knows of a code.
pub(super) enum Seen {
    Kind(VoucherKind),
    /// Postgres said it does not exist, less than the cache's age ago.
    Unknown,
    /// Ask Postgres; `epoch` goes back to [`Known::learn`].
    Ask {
        epoch: u64,
    },
}

impl Known {
    /// `unknown_ttl`: how long an unknown code is answered from memory (zero: never).
    pub(super) fn new(unknown_ttl: Duration) -> Known {
        Known {
            kinds: Arc::default(),
            unknown: Arc::default(),
            unknown_ttl,
        }
    }

    /// `trust_unknown`: a remembered 404 may answer. Only where "no such code" is the final
    /// answer (reserve, validate): a confirm, release or read of an order must never take a code
    /// created a moment ago in another process for none, or it would look for the order's use
    /// in the wrong gate.
    pub(super) fn seen(&self, code: &VoucherCode, trust_unknown: bool) -> Seen {
        // std locks: each held for one map access, never across an await.
        if let Some(&kind) = self.kinds.read().unwrap().get(code.as_str()) {
            return Seen::Kind(kind);
        }
        let mut unknown = self.unknown.lock().unwrap();
        match unknown.codes.get(code.as_str()) {
            Some(at) if trust_unknown && at.elapsed() < self.unknown_ttl => Seen::Unknown,
            Some(_) if trust_unknown => {
                unknown.codes.remove(code.as_str());
                Seen::Ask {
                    epoch: unknown.epoch,
                }
            }
            _ => Seen::Ask {
                epoch: unknown.epoch,
            },
        }
    }

    /// What Postgres said of `code`, asked at `epoch`.
    pub(super) fn learn(&self, code: &VoucherCode, epoch: u64, found: Option<VoucherKind>) {
        match found {
            Some(kind) => {
                let mut kinds = self.kinds.write().unwrap();
                // Forgetting them all is one allocation's work and costs each code one more read.
                if kinds.len() >= KINDS_KEPT {
                    kinds.clear();
                }
                kinds.insert(code.as_str().to_owned(), kind);
            }
            None if self.unknown_ttl.is_zero() => {}
            None => {
                let mut unknown = self.unknown.lock().unwrap();
                if unknown.epoch != epoch {
                    // A creation came in between: this "unknown" may be stale.
                    return;
                }
                if unknown.codes.len() >= UNKNOWN_KEPT {
                    unknown.codes.clear();
                }
                unknown
                    .codes
                    .insert(code.as_str().to_owned(), Instant::now());
            }
        }
    }

    /// A voucher was created in this process: it is no longer unknown here.
    pub(super) fn created(&self, code: &VoucherCode) {
        let mut unknown = self.unknown.lock().unwrap();
        unknown.epoch += 1;
        unknown.codes.remove(code.as_str());
    }

    /// A campaign's codes were created in this process: no code is unknown here any more.
    pub(super) fn created_many(&self) {
        let mut unknown = self.unknown.lock().unwrap();
        unknown.epoch += 1;
        unknown.codes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(s: &str) -> VoucherCode {
        VoucherCode::parse(s).unwrap()
    }

    fn asks(seen: Seen) -> u64 {
        match seen {
            Seen::Ask { epoch } => epoch,
            _ => panic!("expected to ask Postgres"),
        }
    }

    #[test]
    fn an_unknown_code_is_answered_from_memory_until_it_ages_out() {
        let known = Known::new(Duration::from_millis(50));
        let epoch = asks(known.seen(&code("NOPE"), true));
        known.learn(&code("NOPE"), epoch, None);
        assert!(matches!(known.seen(&code("nope"), true), Seen::Unknown));
        std::thread::sleep(Duration::from_millis(60));
        asks(known.seen(&code("NOPE"), true));
    }

    #[test]
    fn only_a_final_answer_trusts_a_remembered_404() {
        let known = Known::new(Duration::from_secs(60));
        let epoch = asks(known.seen(&code("NOPE"), true));
        known.learn(&code("NOPE"), epoch, None);
        assert!(matches!(known.seen(&code("NOPE"), true), Seen::Unknown));
        asks(known.seen(&code("NOPE"), false));
    }

    #[test]
    fn a_code_created_here_is_known_at_once() {
        let known = Known::new(Duration::from_secs(60));
        let epoch = asks(known.seen(&code("SOON"), true));
        known.learn(&code("SOON"), epoch, None);
        known.created(&code("SOON"));
        asks(known.seen(&code("SOON"), true));

        let epoch = asks(known.seen(&code("LATER"), true));
        known.learn(&code("LATER"), epoch, None);
        known.created_many();
        asks(known.seen(&code("LATER"), true));
    }

    /// A look-up that began before a creation and found nothing must not write its "unknown"
    /// after the creation: the creating process would answer 404 for a code it just made.
    #[test]
    fn a_look_up_older_than_a_creation_writes_nothing() {
        let known = Known::new(Duration::from_secs(60));
        let epoch = asks(known.seen(&code("RACE"), true));
        known.created(&code("RACE"));
        known.learn(&code("RACE"), epoch, None);
        asks(known.seen(&code("RACE"), true));
    }

    #[test]
    fn a_zero_age_keeps_nothing_and_the_count_is_bounded() {
        let off = Known::new(Duration::ZERO);
        let epoch = asks(off.seen(&code("X"), true));
        off.learn(&code("X"), epoch, None);
        asks(off.seen(&code("X"), true));

        let known = Known::new(Duration::from_secs(60));
        for i in 0..=UNKNOWN_KEPT {
            known.learn(&code(&format!("C{i}")), 0, None);
        }
        assert!(known.unknown.lock().unwrap().codes.len() <= UNKNOWN_KEPT);
    }
}
