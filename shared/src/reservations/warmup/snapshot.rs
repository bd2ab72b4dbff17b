//! What a gate is written from: its rules and counts, read from Postgres in one snapshot.

use super::Warmup;
use crate::domain::{Held, VoucherCode};
use crate::gate::{CodeCounts, GateMeta, LoadCounts, Loaded, OrderEntry, Place, Unit};
use crate::reservations::error::WarmupError;
use crate::store::{CampaignGateSource, GateSource};

impl Warmup {
    /// Of the gate's orders `fields`, the uses held in the gate of those whose Postgres row
    /// `pick` keeps (None: no row; Some(released)), as (code, use): one Postgres query, and one
    /// read of each picked order's entry.
    pub(super) async fn uses_where(
        &self,
        unit: Unit<'_>,
        fields: &[&str],
        pick: impl Fn(Option<bool>) -> bool,
    ) -> Result<Vec<(String, Held)>, WarmupError> {
        let orders: Vec<(&str, &str)> = fields.iter().filter_map(|f| unit.split(f)).collect();
        if orders.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.store.orders_among(&orders).await?;
        let mut found = Vec::new();
        for (code, order) in orders {
            let row = rows
                .iter()
                .find(|(c, o, _)| c == code && o == order)
                .map(|(_, _, released)| *released);
            let Ok(code) = VoucherCode::parse(code) else {
                continue;
            };
            if !pick(row) {
                continue;
            }
            let place = Place::of(&code, unit.campaign());
            if let Some(OrderEntry::Active { held, .. }) = self.gate.order(place, order).await? {
                found.push((code.as_str().to_owned(), held));
            }
        }
        Ok(found)
    }
}

/// What a gate is written from: rules and counts read from Postgres in one snapshot.
pub(super) struct Snapshot {
    pub(super) meta: GateMeta,
    pub(super) remaining: i64,
    pub(super) budget: Option<i64>,
    pub(super) users: Vec<(i64, i32)>,
    pub(super) codes: Option<CodeCounts>,
}

impl Snapshot {
    pub(super) fn counts(&self) -> LoadCounts<'_> {
        LoadCounts {
            remaining: self.remaining,
            budget: self.budget,
            users: &self.users,
            codes: self.codes.as_ref(),
        }
    }

    pub(super) fn voucher(source: GateSource) -> Snapshot {
        Snapshot {
            meta: GateMeta::of(
                &source.rules,
                source.reservation_ttl_seconds,
                source.version,
            ),
            remaining: source.remaining,
            budget: source.budget_left,
            users: source.users,
            codes: None,
        }
    }

    pub(super) fn campaign(source: CampaignGateSource) -> Snapshot {
        let meta = crate::reservations::campaign_meta(&source, source.version);
        let mut uses = source.codes;
        uses.extend(
            source
                .code_customers
                .into_iter()
                .map(|(code, customer, n)| (Place::code_customer_field(&code, customer), n.into())),
        );
        Snapshot {
            meta,
            remaining: source.remaining,
            budget: source.budget_left,
            users: source.users,
            codes: Some(CodeCounts {
                per_code: source.per_code_limit.into(),
                uses,
            }),
        }
    }

    /// Counts the uses `held` (code, use) as the gate holds them and Postgres does not yet: each
    /// takes one use, its customer's, its discount from the budget, and in a campaign's gate
    /// its code's.
    pub(super) fn hold(&mut self, held: &[(String, Held)]) {
        for (code, use_) in held {
            self.remaining -= 1;
            if let Some(budget) = &mut self.budget {
                *budget -= use_.discount;
            }
            match self.users.iter_mut().find(|(c, _)| *c == use_.customer_id) {
                Some((_, n)) => *n += 1,
                None => self.users.push((use_.customer_id, 1)),
            }
            if let Some(codes) = &mut self.codes {
                for field in [
                    code.clone(),
                    Place::code_customer_field(code, use_.customer_id),
                ] {
                    match codes.uses.iter_mut().find(|(f, _)| *f == field) {
                        Some((_, n)) => *n += 1,
                        None => codes.uses.push((field, 1)),
                    }
                }
            }
        }
    }
}

/// A load the gate refused because the lock is no longer the loader's: it stalled past the
/// lock's TTL and what it read may be older than a change made since. Nothing was written; the
/// caller answers as for a lock held by another (a retry loads afresh).
pub(super) fn fenced_is_busy(unit: Unit<'_>, loaded: Loaded) -> Result<bool, WarmupError> {
    match loaded {
        Loaded::Now => Ok(true),
        Loaded::Already => Ok(false),
        Loaded::Fenced | Loaded::Moved => {
            tracing::warn!(code = %unit, "a load outlived its gate lock: not written");
            Err(WarmupError::Busy)
        }
    }
}
