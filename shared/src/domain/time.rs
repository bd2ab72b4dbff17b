//! Time: the one millisecond precision instants are stored and printed at, and the serde
//! adapters the views print them with.

use chrono::{DateTime, SecondsFormat, Utc};

/// Timestamps go out as RFC 3339 at one fixed precision (milliseconds, `Z`), so a stored instant
/// always prints the same: this is what makes replayed answers byte-identical.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Truncates to the millisecond, the precision everything is stored and printed at.
pub fn millis(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).expect("in range")
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
}
