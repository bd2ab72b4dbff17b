//! Time: the one millisecond precision instants are stored and printed at, and the serde
//! adapters the views print them with.

use chrono::{DateTime, SecondsFormat, Utc};

use super::Invalid;

/// Timestamps go out as RFC 3339 at one fixed precision (milliseconds, `Z`), so a stored instant
/// always prints the same: this is what makes replayed answers byte-identical.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Truncates to the millisecond, the precision everything is stored and printed at.
pub fn millis(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).expect("in range")
}

/// An instant a client gives (`startsAt`, `endsAt`), at the stored precision: RFC 3339 writes
/// years 0001 to 9999, and Postgres (which holds 4713 BC to 294276 AD) would refuse some of the
/// years chrono parses, with an error that is the server's, not the client's.
pub fn instant(field: &'static str, t: DateTime<Utc>) -> Result<DateTime<Utc>, Invalid> {
    // 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
    const FIRST_MS: i64 = -62_135_596_800_000;
    const LAST_MS: i64 = 253_402_300_799_999;
    let t = millis(t);
    if (FIRST_MS..=LAST_MS).contains(&t.timestamp_millis()) {
        Ok(t)
    } else {
        Err(Invalid::new(
            field,
            "must be a time from year 0001 to 9999 (RFC 3339)",
        ))
    }
}

/// An instant given as milliseconds since the epoch (an event's `reservedAtMs`), under the
/// same rule as [`instant`].
pub fn instant_ms(field: &'static str, ms: i64) -> Result<DateTime<Utc>, Invalid> {
    match DateTime::from_timestamp_millis(ms) {
        Some(t) => instant(field, t),
        None => instant(field, DateTime::<Utc>::MAX_UTC),
    }
}

pub(super) mod rfc3339_ms {
    use chrono::{DateTime, Utc};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::rfc3339(*t))
    }
}

pub(super) mod rfc3339_ms_or_null {
    use chrono::{DateTime, Utc};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&super::rfc3339(*t)),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_print_at_millisecond_precision() {
        let t = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.678901+02:00")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(rfc3339(t), "2026-01-02T01:04:05.678Z");
        assert_eq!(rfc3339(millis(t)), rfc3339(t));
    }

    #[test]
    fn instants_are_years_one_to_9999() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        for ok in ["0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z"] {
            assert_eq!(rfc3339(instant("startsAt", at(ok)).unwrap()), ok);
        }
        // The last millisecond of 9999 with more digits still truncates into range.
        assert!(instant("endsAt", at("9999-12-31T23:59:59.9999Z")).is_ok());
        let before = at("0001-01-01T00:00:00Z") - chrono::Duration::milliseconds(1);
        let after = at("9999-12-31T23:59:59.999Z") + chrono::Duration::milliseconds(1);
        for bad in [before, after] {
            assert_eq!(instant("endsAt", bad).unwrap_err().field, "endsAt");
        }
    }
}
