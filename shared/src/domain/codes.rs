//! The codes a campaign creates: generated from a pattern, or imported from its body.
//!
//! Generated codes are drawn so that they come out in code order, which lets a million of them
//! be written as fast as Postgres appends to an index: the `count` codes split the pattern's
//! space into `count` equal ranges and each range gets one code, uniform inside it, from a
//! ChaCha generator seeded by the operating system. Each code is as hard to guess as one drawn
//! from the whole space (a guess hits one of `count` codes among `space` values either way), and
//! no two can be equal.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Deserialize;

use super::voucher::in_range;
use super::{Invalid, VoucherCode};

/// Most codes one campaign generates.
pub const MAX_GENERATED: i64 = 1_000_000;
/// Most codes one `POST /campaigns` imports (they come in its body).
pub const MAX_IMPORTED: usize = 100_000;
/// Without look-alikes: no 0/O, no 1/I.
pub const DEFAULT_CHARSET: &str = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ";
pub const DEFAULT_CODE_LENGTH: i64 = 12;
/// The schema of `POST /campaigns`' `codes`: codes to import, or a [`PatternRequest`].
pub(super) fn codes_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};
    use utoipa::openapi::Ref;
    let import = ArrayBuilder::new()
        .items(Ref::from_schema_name("VoucherCode"))
        .min_items(Some(1))
        .max_items(Some(MAX_IMPORTED));
    let pattern = ObjectBuilder::new()
        .title(Some("CodePattern"))
        .description(Some(
            "Generate `count` codes: `prefix` then `length` characters of `charset`, \
             cryptographically random, unique across every voucher and campaign. Refused (400) \
             when `count` codes cannot be unique in that space.",
        ))
        .required("count")
        .additional_properties(Some(
            utoipa::openapi::schema::AdditionalProperties::FreeForm(false),
        ))
        .property(
            "count",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(MAX_GENERATED)),
        )
        .property(
            "length",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(32))
                .description(Some(
                    "Characters after the prefix; default 12 (less when the prefix leaves less \
                     room: prefix and length make at most 32).",
                )),
        )
        .property(
            "prefix",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(31))
                .pattern(Some("^[A-Za-z0-9_-]*$"))
                .description(Some("Kept upper-case.")),
        )
        .property(
            "charset",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(2))
                .max_length(Some(38))
                .pattern(Some("^[A-Z0-9_-]+$"))
                .description(Some(
                    "Distinct characters; default 23456789ABCDEFGHJKLMNPQRSTUVWXYZ (no \
                     look-alikes 0/O, 1/I).",
                )),
        );
    OneOfBuilder::new().item(import).item(pattern).into()
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
    pub(super) fn parse(v: serde_json::Value) -> Result<Self, Invalid> {
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
