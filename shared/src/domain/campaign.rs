//! Campaigns of unique codes: the `POST /campaigns` body and the codes it generates or imports,
//! `PATCH /campaigns/{id}`, the campaign's view and its listings' queries.
//!
//! Generated codes are drawn so that they come out in code order, which lets a million of them
//! be written as fast as Postgres appends to an index: the `count` codes split the pattern's
//! space into `count` equal ranges and each range gets one code, uniform inside it, from a
//! ChaCha generator seeded by the operating system. Each code is as hard to guess as one drawn
//! from the whole space (a guess hits one of `count` codes among `space` values either way), and
//! no two can be equal.

use chrono::{DateTime, Utc};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use super::patch::{not_null, present};
use super::time::{instant, rfc3339_ms};
use super::voucher::in_range;
use super::{amount, Budget, Discount, Invalid, VoucherCode, DEFAULT_TTL_SECONDS};
use super::{MAX_TOTAL_LIMIT, MAX_TTL_SECONDS};

/// A flash-sale campaign's name where a voucher's code stands for a voucher: its events' key
/// (one partition for all its codes), and its gate in logs and gauges. `campaign:ID`: a code
/// has no `:`, so no voucher's name is ever a campaign's.
pub fn campaign_key(id: i64) -> String {
    format!("campaign:{id}")
}

/// Most codes one campaign generates.
pub const MAX_GENERATED: i64 = 1_000_000;
/// Most codes one `POST /campaigns` imports (they come in its body).
pub const MAX_IMPORTED: usize = 100_000;
/// Largest `POST /campaigns` body: room for [`MAX_IMPORTED`] codes.
pub const CAMPAIGN_BODY_LIMIT: usize = 4 * 1024 * 1024;
/// Without look-alikes: no 0/O, no 1/I.
pub const DEFAULT_CHARSET: &str = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ";
pub const DEFAULT_CODE_LENGTH: i64 = 12;
/// Most uses a campaign's total may allow (its codes' uses summed).
pub const MAX_CAMPAIGN_TOTAL: i64 = 1_000_000_000_000;

/// `POST /campaigns` body, as received.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateCampaignRequest {
    #[serde(default)]
    pub discount_amount: Option<i64>,
    #[serde(default)]
    pub discount_percent: Option<i64>,
    #[serde(default)]
    pub max_discount_amount: Option<i64>,
    #[serde(default)]
    pub min_order_amount: i64,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    #[serde(default)]
    pub flash_sale: bool,
    #[serde(default = "yes")]
    pub active: bool,
    #[serde(default = "default_ttl")]
    pub reservation_ttl_seconds: i64,
    /// An array of codes to import, or `{count, length, prefix, charset}` to generate.
    pub codes: serde_json::Value,
    #[serde(default = "one")]
    pub per_code_limit: i64,
    #[serde(default)]
    pub total_limit: Option<i64>,
    #[serde(default)]
    pub per_user_limit: Option<i64>,
    #[serde(default)]
    pub budget_amount: Option<i64>,
}

fn one() -> i64 {
    1
}

fn yes() -> bool {
    true
}

fn default_ttl() -> i64 {
    DEFAULT_TTL_SECONDS
}

/// `codes` when it asks for generated codes, as received.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatternRequest {
    count: i64,
    #[serde(default)]
    length: Option<i64>,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    charset: Option<String>,
}

/// How generated codes look: `prefix` then `length` characters of `charset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodePattern {
    pub count: u64,
    pub length: usize,
    pub prefix: String,
    /// Sorted, so that a larger number is a later code.
    charset: Vec<u8>,
}

impl CodePattern {
    fn parse(p: PatternRequest) -> Result<Self, Invalid> {
        let count = in_range("codes.count", p.count, 1, MAX_GENERATED)? as u64;
        let charset = p.charset.unwrap_or_else(|| DEFAULT_CHARSET.to_owned());
        let mut chars = charset.clone().into_bytes();
        chars.sort_unstable();
        chars.dedup();
        if chars.len() != charset.len()
            || chars.len() < 2
            || !chars
                .iter()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
        {
            return Err(Invalid::new(
                "codes.charset",
                "must be at least 2 distinct characters of A-Z, 0-9, '_' and '-'",
            ));
        }
        if p.prefix.len() > 31
            || !p
                .prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
        {
            return Err(Invalid::new(
                "codes.prefix",
                "must be at most 31 characters of A-Z, a-z, 0-9, '_' or '-'",
            ));
        }
        let longest = 32 - p.prefix.len() as i64;
        let length = in_range(
            "codes.length",
            p.length.unwrap_or(DEFAULT_CODE_LENGTH.min(longest)),
            1,
            longest,
        )? as usize;
        let pattern = CodePattern {
            count,
            length,
            prefix: p.prefix.to_ascii_uppercase(),
            charset: chars,
        };
        if pattern.space() < u128::from(count) {
            return Err(Invalid::new(
                "codes.count",
                format!(
                    "{count} codes cannot be unique with {length} characters of {}: there are {}",
                    pattern.charset.len(),
                    pattern.space()
                ),
            ));
        }
        Ok(pattern)
    }

    /// How many codes the pattern can write (saturated at `u128::MAX`).
    pub fn space(&self) -> u128 {
        let base = self.charset.len() as u128;
        (0..self.length).fold(1u128, |n, _| n.saturating_mul(base))
    }

    /// The code of range `i` (of `count`), uniform inside its range: codes of larger ranges
    /// are later in code order.
    pub fn draw(&self, rng: &mut CodeRng, i: u64) -> String {
        let width = self.space() / u128::from(self.count);
        let mut n = u128::from(i) * width + rng.0.random_range(0..width);
        let base = self.charset.len() as u128;
        let mut digits = vec![0u8; self.length];
        for d in digits.iter_mut().rev() {
            *d = self.charset[(n % base) as usize];
            n /= base;
        }
        let mut code = String::with_capacity(self.prefix.len() + self.length);
        code.push_str(&self.prefix);
        code.extend(digits.into_iter().map(char::from));
        code
    }

    /// Whether `code` has this pattern's shape.
    pub fn matches(&self, code: &str) -> bool {
        code.len() == self.prefix.len() + self.length
            && code.starts_with(&self.prefix)
            && code.as_bytes()[self.prefix.len()..]
                .iter()
                .all(|b| self.charset.binary_search(b).is_ok())
    }
}

/// The generator of codes: ChaCha12 seeded by the operating system.
pub struct CodeRng(StdRng);

impl CodeRng {
    pub fn from_os() -> Self {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("the operating system's random source");
        CodeRng(StdRng::from_seed(seed))
    }
}

/// The codes a new campaign gets.
#[derive(Debug, Clone)]
pub enum NewCodes {
    Generate(CodePattern),
    /// Distinct, in the order given.
    Import(Vec<VoucherCode>),
}

impl NewCodes {
    fn parse(v: serde_json::Value) -> Result<Self, Invalid> {
        match v {
            serde_json::Value::Array(items) => {
                if items.is_empty() || items.len() > MAX_IMPORTED {
                    return Err(Invalid::new(
                        "codes",
                        format!("must hold 1 to {MAX_IMPORTED} codes"),
                    ));
                }
                let mut seen = std::collections::HashMap::with_capacity(items.len());
                let mut codes = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let code = item
                        .as_str()
                        .and_then(|s| VoucherCode::parse(s).ok())
                        .ok_or_else(|| {
                            Invalid::new(
                                "codes",
                                format!(
                                    "codes[{i}] must be 1-32 characters of A-Z, a-z, 0-9, '_' or '-'"
                                ),
                            )
                        })?;
                    if let Some(first) = seen.insert(code.as_str().to_owned(), i) {
                        return Err(Invalid::new(
                            "codes",
                            format!("codes[{i}] is codes[{first}] again: {}", code.as_str()),
                        ));
                    }
                    codes.push(code);
                }
                Ok(NewCodes::Import(codes))
            }
            serde_json::Value::Object(_) => {
                let p: PatternRequest =
                    serde_json::from_value(v).map_err(|e| Invalid::new("codes", e.to_string()))?;
                Ok(NewCodes::Generate(CodePattern::parse(p)?))
            }
            _ => Err(Invalid::new(
                "codes",
                "must be an array of codes or {\"count\", \"length\", \"prefix\", \"charset\"}",
            )),
        }
    }

    pub fn count(&self) -> u64 {
        match self {
            NewCodes::Generate(p) => p.count,
            NewCodes::Import(codes) => codes.len() as u64,
        }
    }
}

/// A campaign's rules and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CampaignRules {
    pub discount: Discount,
    /// Decided by the gate, as a campaign (docs/ARCHITECTURE.md, "Campaigns in the gate").
    pub flash_sale: bool,
    pub min_order_amount: i64,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub active: bool,
    pub reservation_ttl_seconds: i32,
    /// Uses of each code.
    pub per_code_limit: i32,
    /// Uses over every code (None: the codes' own limits only).
    pub total_limit: Option<i64>,
    /// Uses per customer over every code (None: the codes' own limits only).
    pub per_user_limit: Option<i32>,
    /// The most the active uses of every code may take in discounts, summed.
    pub budget_amount: Option<i64>,
}

/// A campaign that passed every rule; only this can be stored.
#[derive(Debug, Clone)]
pub struct NewCampaign {
    pub rules: CampaignRules,
    pub codes: NewCodes,
}

impl TryFrom<CreateCampaignRequest> for NewCampaign {
    type Error = Invalid;

    fn try_from(r: CreateCampaignRequest) -> Result<Self, Invalid> {
        let discount =
            Discount::parse(r.discount_amount, r.discount_percent, r.max_discount_amount)?;
        let starts_at = instant("startsAt", r.starts_at)?;
        let ends_at = instant("endsAt", r.ends_at)?;
        if ends_at <= starts_at {
            return Err(Invalid::new("endsAt", "must be after startsAt"));
        }
        let rules = CampaignRules {
            discount,
            flash_sale: r.flash_sale,
            min_order_amount: amount("minOrderAmount", r.min_order_amount)?,
            starts_at,
            ends_at,
            active: r.active,
            reservation_ttl_seconds: in_range(
                "reservationTtlSeconds",
                r.reservation_ttl_seconds,
                1,
                MAX_TTL_SECONDS,
            )?,
            per_code_limit: in_range("perCodeLimit", r.per_code_limit, 1, MAX_TOTAL_LIMIT)?,
            total_limit: r
                .total_limit
                .map(|n| total_limit("totalLimit", n))
                .transpose()?,
            per_user_limit: r
                .per_user_limit
                .map(|n| in_range("perUserLimit", n, 1, i32::MAX as i64))
                .transpose()?,
            budget_amount: r
                .budget_amount
                .map(|b| amount("budgetAmount", b))
                .transpose()?,
        };
        Ok(NewCampaign {
            rules,
            codes: NewCodes::parse(r.codes)?,
        })
    }
}

fn total_limit(field: &'static str, n: i64) -> Result<i64, Invalid> {
    if (0..=MAX_CAMPAIGN_TOTAL).contains(&n) {
        Ok(n)
    } else {
        Err(Invalid::new(
            field,
            format!("must be an integer from 0 to {MAX_CAMPAIGN_TOTAL}"),
        ))
    }
}

/// A campaign's id in a path.
pub fn campaign_id(raw: &str) -> Result<i64, Invalid> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id >= 1)
        .ok_or_else(|| Invalid::new("id", "must be a campaign id, an integer from 1"))
}

/// `PATCH /campaigns/{id}` body, as received: each field present is changed; `null` removes a
/// limit or the budget.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchCampaignRequest {
    #[serde(default, deserialize_with = "not_null")]
    pub active: Option<bool>,
    #[serde(default, deserialize_with = "not_null")]
    pub starts_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "not_null")]
    pub ends_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "present")]
    pub total_limit: Option<Option<i64>>,
    #[serde(default, deserialize_with = "present")]
    pub per_user_limit: Option<Option<i64>>,
    #[serde(default, deserialize_with = "present")]
    pub budget_amount: Option<Option<i64>>,
}

/// A checked campaign change: None keeps a value, Some(None) removes a limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CampaignPatch {
    pub active: Option<bool>,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub total_limit: Option<Option<i64>>,
    pub per_user_limit: Option<Option<i32>>,
    pub budget_amount: Option<Option<i64>>,
}

impl TryFrom<PatchCampaignRequest> for CampaignPatch {
    type Error = Invalid;

    fn try_from(r: PatchCampaignRequest) -> Result<Self, Invalid> {
        let starts_at = r.starts_at.map(|t| instant("startsAt", t)).transpose()?;
        let ends_at = r.ends_at.map(|t| instant("endsAt", t)).transpose()?;
        if let (Some(s), Some(e)) = (starts_at, ends_at) {
            if e <= s {
                return Err(Invalid::new("endsAt", "must be after startsAt"));
            }
        }
        Ok(CampaignPatch {
            active: r.active,
            starts_at,
            ends_at,
            total_limit: r
                .total_limit
                .map(|n| n.map(|n| total_limit("totalLimit", n)).transpose())
                .transpose()?,
            per_user_limit: r
                .per_user_limit
                .map(|n| {
                    n.map(|n| in_range("perUserLimit", n, 1, i32::MAX as i64))
                        .transpose()
                })
                .transpose()?,
            budget_amount: r
                .budget_amount
                .map(|b| b.map(|b| amount("budgetAmount", b)).transpose())
                .transpose()?,
        })
    }
}

/// `GET /campaigns/{id}`, the 201 of `POST /campaigns`, the 200 of `PATCH` and each item of
/// `GET /campaigns`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CampaignView {
    pub id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discount_amount: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discount_percent: Option<i16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_discount_amount: Option<i64>,
    pub min_order_amount: i64,
    #[serde(with = "rfc3339_ms")]
    pub starts_at: DateTime<Utc>,
    #[serde(with = "rfc3339_ms")]
    pub ends_at: DateTime<Utc>,
    pub flash_sale: bool,
    pub active: bool,
    pub reservation_ttl_seconds: i64,
    pub per_code_limit: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_limit: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_user_limit: Option<i64>,
    pub code_count: i64,
    /// Active uses (RESERVED + CONFIRMED) over every code.
    pub used_count: i64,
    /// Mode B, a flash-sale campaign: uses its gate granted whose events have not reached
    /// Postgres yet, counted in `used_count` already (their discounts are not in the budget's
    /// figures until they land).
    pub in_flight_count: i64,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    #[serde(with = "rfc3339_ms")]
    pub created_at: DateTime<Utc>,
}

/// An item of `GET /campaigns/{id}/codes`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeItem {
    pub code: String,
    /// Active uses (RESERVED + CONFIRMED) of this code.
    pub used_count: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(
        count: i64,
        length: Option<i64>,
        prefix: &str,
        charset: Option<&str>,
    ) -> Result<CodePattern, Invalid> {
        CodePattern::parse(PatternRequest {
            count,
            length,
            prefix: prefix.into(),
            charset: charset.map(str::to_owned),
        })
    }

    #[test]
    fn generated_codes_are_unique_sorted_and_match_their_pattern() {
        let p = pattern(10_000, Some(6), "sale-", None).unwrap();
        assert_eq!(p.prefix, "SALE-");
        let mut rng = CodeRng::from_os();
        let codes: Vec<String> = (0..p.count).map(|i| p.draw(&mut rng, i)).collect();
        assert!(codes.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
        assert!(codes.iter().all(|c| p.matches(c)));
        assert!(codes
            .iter()
            .all(|c| VoucherCode::parse(c).unwrap().as_str() == c));
        for c in &codes {
            for look_alike in ['0', 'O', '1', 'I'] {
                assert!(!c[5..].contains(look_alike), "{c}");
            }
        }
    }

    #[test]
    fn a_full_space_is_every_code_once() {
        let p = pattern(16, Some(2), "", Some("AB2C")).unwrap();
        let mut rng = CodeRng::from_os();
        let mut codes: Vec<String> = (0..16).map(|i| p.draw(&mut rng, i)).collect();
        codes.dedup();
        assert_eq!(codes.len(), 16);
        assert_eq!(codes[0], "22");
        assert_eq!(codes[15], "CC");
    }

    #[test]
    fn long_codes_saturate_rather_than_overflow() {
        let p = pattern(
            1_000_000,
            Some(32),
            "",
            Some("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"),
        )
        .unwrap();
        assert_eq!(p.space(), u128::MAX);
        let mut rng = CodeRng::from_os();
        let last = p.draw(&mut rng, 999_999);
        assert!(p.matches(&last) && last.len() == 32);
    }

    #[test]
    fn patterns_that_cannot_hold_the_codes_are_refused_naming_the_field() {
        assert_eq!(
            pattern(17, Some(2), "", Some("AB2C")).unwrap_err().field,
            "codes.count"
        );
        assert_eq!(pattern(0, None, "", None).unwrap_err().field, "codes.count");
        assert_eq!(
            pattern(MAX_GENERATED + 1, None, "", None)
                .unwrap_err()
                .field,
            "codes.count"
        );
        for bad in ["A", "AA", "ab", "A!", ""] {
            assert_eq!(
                pattern(1, None, "", Some(bad)).unwrap_err().field,
                "codes.charset",
                "{bad}"
            );
        }
        assert_eq!(
            pattern(1, Some(0), "", None).unwrap_err().field,
            "codes.length"
        );
        assert_eq!(
            pattern(1, Some(30), "ABC", None).unwrap_err().field,
            "codes.length"
        );
        assert_eq!(
            pattern(1, None, "A B", None).unwrap_err().field,
            "codes.prefix"
        );
        // The default length shrinks to fit a long prefix.
        assert_eq!(pattern(1, None, &"P".repeat(28), None).unwrap().length, 4);
    }

    #[test]
    fn imports_refuse_bad_and_repeated_codes() {
        let parse = |v: serde_json::Value| NewCodes::parse(v);
        assert_eq!(parse(serde_json::json!(["a", "B"])).unwrap().count(), 2);
        let e = parse(serde_json::json!(["a", "B", "A"])).unwrap_err();
        assert!(e.problem.contains("codes[2] is codes[0] again"), "{e}");
        let e = parse(serde_json::json!(["ok", "no!"])).unwrap_err();
        assert!(e.problem.contains("codes[1]"), "{e}");
        assert!(parse(serde_json::json!([])).is_err());
        assert!(parse(serde_json::json!(5)).is_err());
        let e = parse(serde_json::json!({"count": 5, "size": 3})).unwrap_err();
        assert!(e.problem.contains("size"), "{e}");
    }
}
