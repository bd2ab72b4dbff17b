//! The rules a mode-B event was granted under ([`Store::grants`]): the consumer checks every
//! `voucher-reserved` event against them (docs/ARCHITECTURE.md, "Consistency mode B").

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use tokio_postgres::types::Type;

use super::Store;
use super::StoreError;
use crate::domain::{Discount, GrantRules};
use crate::telemetry::metrics::{timed, Dependency};

/// The rules some events were granted under: each voucher's current rules, and the earlier
/// versions that `voucher_rules` still keeps among those asked for (every kept one of a voucher
/// asked for without a version). A campaign's code has its campaign's rules and versions
/// (`campaign_rules`).
#[derive(Debug, Default)]
pub struct Grants {
    current: HashMap<String, GrantRules>,
    past: HashMap<(String, i64), GrantRules>,
    /// The campaign of each code asked for that is a campaign's.
    campaigns: HashMap<String, i64>,
}

impl Grants {
    /// Whether the voucher exists.
    pub fn knows(&self, code: &str) -> bool {
        self.current.contains_key(code)
    }

    /// The campaign `code` belongs to (None: a voucher of its own), whose rules and versions
    /// are the code's.
    pub fn campaign(&self, code: &str) -> Option<i64> {
        self.campaigns.get(code).copied()
    }

    /// The rules of `code` at `version`. None: no such voucher, or no such version kept (never
    /// existed, or superseded longer ago than events are kept).
    pub fn at(&self, code: &str, version: i64) -> Option<&GrantRules> {
        let current = self.current.get(code)?;
        if version == current.version {
            return Some(current);
        }
        self.past.get(&(code.to_owned(), version))
    }

    /// Every kept version of `code`, the current one first: what an event without a version
    /// (sent before events carried one) may have been granted under.
    pub fn all(&self, code: &str) -> Vec<&GrantRules> {
        let mut all: Vec<&GrantRules> = self.current.get(code).into_iter().collect();
        all.extend(
            self.past
                .iter()
                .filter(|((c, _), _)| c == code)
                .map(|(_, rules)| rules),
        );
        all
    }
}

impl Store {
    /// The rules each `(code, version)` asked for was granted under, in one round trip: the
    /// vouchers' current rules, and the kept earlier versions among those asked.
    pub async fn grants(&self, asked: &[(&str, Option<i64>)]) -> Result<Grants, StoreError> {
        timed(Dependency::Postgres, "grants", async {
            // Each (code, version) once: a sale's batch asks the same one hundreds of times.
            let asked: std::collections::BTreeSet<&(&str, Option<i64>)> = asked.iter().collect();
            let codes: Vec<&str> = asked.iter().map(|(c, _)| *c).collect();
            let versions: Vec<Option<i64>> = asked.iter().map(|(_, v)| *v).collect();
            let rows = self
                .client()
                .await?
                .query_typed(
                    // A campaign's code is granted under its campaign's rules and version
                    // (the campaign's history is `campaign_rules`).
                    "SELECT v.code, NULL::int8 AS campaign_id, v.version, v.discount_amount,
                            v.discount_percent, v.max_discount_amount, v.min_order_amount,
                            v.starts_at, v.ends_at, v.active, v.reservation_ttl_seconds,
                            NULL::timestamptz AS superseded_at
                       FROM voucher v WHERE v.code = ANY($1) AND v.campaign_id IS NULL
                     UNION ALL
                     SELECT v.code, g.id, g.version, g.discount_amount, g.discount_percent,
                            g.max_discount_amount, g.min_order_amount, g.starts_at, g.ends_at,
                            g.active, g.reservation_ttl_seconds, NULL
                       FROM voucher v JOIN campaign g ON g.id = v.campaign_id
                      WHERE v.code = ANY($1)
                     UNION ALL
                     SELECT h.voucher_code, NULL, h.version, h.discount_amount, h.discount_percent,
                            h.max_discount_amount, h.min_order_amount, h.starts_at, h.ends_at,
                            h.active, v.reservation_ttl_seconds, h.superseded_at
                       FROM voucher_rules h JOIN voucher v ON v.code = h.voucher_code
                      WHERE (h.voucher_code, h.version) IN
                            (SELECT * FROM unnest($1::text[], $2::int8[]))
                         OR h.voucher_code IN
                            (SELECT c FROM unnest($1::text[], $2::int8[]) AS a(c, v)
                              WHERE v IS NULL)
                     UNION ALL
                     SELECT v.code, g.id, h.version, g.discount_amount, g.discount_percent,
                            g.max_discount_amount, g.min_order_amount, h.starts_at, h.ends_at,
                            h.active, g.reservation_ttl_seconds, h.superseded_at
                       FROM unnest($1::text[], $2::int8[]) AS a(c, ver)
                       JOIN voucher v ON v.code = a.c
                       JOIN campaign g ON g.id = v.campaign_id
                       JOIN campaign_rules h
                         ON h.campaign_id = g.id AND (a.ver IS NULL OR h.version = a.ver)",
                    &[(&codes, Type::TEXT_ARRAY), (&versions, Type::INT8_ARRAY)],
                )
                .await?;
            let mut grants = Grants::default();
            for row in &rows {
                let at = |name| row.get::<_, DateTime<Utc>>(name).timestamp_millis();
                let rules = GrantRules {
                    version: row.get("version"),
                    discount: Discount::from_columns(
                        row.get("discount_amount"),
                        row.get("discount_percent"),
                        row.get("max_discount_amount"),
                    ),
                    min_order_amount: row.get("min_order_amount"),
                    starts_at_ms: at("starts_at"),
                    ends_at_ms: at("ends_at"),
                    active: row.get("active"),
                    ttl_ms: i64::from(row.get::<_, i32>("reservation_ttl_seconds")) * 1000,
                    superseded_at_ms: row
                        .get::<_, Option<DateTime<Utc>>>("superseded_at")
                        .map(|t| t.timestamp_millis()),
                };
                let code: String = row.get("code");
                if let Some(campaign) = row.get::<_, Option<i64>>("campaign_id") {
                    grants.campaigns.insert(code.clone(), campaign);
                }
                match rules.superseded_at_ms {
                    None => grants.current.insert(code, rules),
                    Some(_) => grants.past.insert((code, rules.version), rules),
                };
            }
            Ok(grants)
        })
        .await
    }
}
