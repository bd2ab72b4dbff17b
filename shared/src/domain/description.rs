//! What an operator calls a voucher or a campaign: a `name` and free-form `metadata` (string
//! values under string keys). Accepted at creation, changed by PATCH (metadata merged key by
//! key, `null` removes a key), shown by every view; nothing on the reserve path reads them.

use std::collections::BTreeMap;

use super::Invalid;

pub const MAX_NAME_CHARS: usize = 200;
pub const MAX_METADATA_KEYS: usize = 50;
pub const MAX_KEY_CHARS: usize = 40;
pub const MAX_VALUE_CHARS: usize = 500;

/// Metadata as stored and shown.
pub type Metadata = BTreeMap<String, String>;

/// Text Postgres can store: its `text` and `jsonb` refuse the NUL character.
fn storable(field: &'static str, text: &str) -> Result<(), Invalid> {
    if text.contains('\0') {
        return Err(Invalid::new(field, "must not contain the NUL character"));
    }
    Ok(())
}

fn at_most(field: &'static str, what: &str, text: &str, max: usize) -> Result<(), Invalid> {
    if text.chars().count() > max {
        return Err(Invalid::new(
            field,
            format!("{what} must be at most {max} characters"),
        ));
    }
    storable(field, text)
}

/// A name: 1 to [`MAX_NAME_CHARS`] characters.
pub fn name(raw: String) -> Result<String, Invalid> {
    if raw.is_empty() {
        return Err(Invalid::new("name", "must be 1 to 200 characters"));
    }
    at_most("name", "the name", &raw, MAX_NAME_CHARS)?;
    Ok(raw)
}

fn key(raw: &str) -> Result<(), Invalid> {
    if raw.is_empty() {
        return Err(Invalid::new("metadata", "a key must not be empty"));
    }
    at_most("metadata", "a key", raw, MAX_KEY_CHARS)
}

fn value(raw: &str) -> Result<(), Invalid> {
    at_most("metadata", "a value", raw, MAX_VALUE_CHARS)
}

/// Metadata at creation: at most [`MAX_METADATA_KEYS`] keys.
pub fn metadata(raw: Metadata) -> Result<Metadata, Invalid> {
    if raw.len() > MAX_METADATA_KEYS {
        return Err(Invalid::new(
            "metadata",
            format!("at most {MAX_METADATA_KEYS} keys"),
        ));
    }
    for (k, v) in &raw {
        key(k)?;
        value(v)?;
    }
    Ok(raw)
}

/// A change of name and metadata (PATCH): `name` Some(None) removes the name; each metadata
/// key set to Some(value) is written, to None removed. The merge's key count is checked where
/// it lands (a constraint: another change may add keys meanwhile).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Description {
    pub name: Option<Option<String>>,
    pub metadata: BTreeMap<String, Option<String>>,
}

impl Description {
    pub fn parse(
        name: Option<Option<String>>,
        metadata: Option<BTreeMap<String, Option<String>>>,
    ) -> Result<Description, Invalid> {
        let name = name.map(|n| n.map(self::name).transpose()).transpose()?;
        let metadata = metadata.unwrap_or_default();
        if metadata.len() > MAX_METADATA_KEYS {
            return Err(Invalid::new(
                "metadata",
                format!("at most {MAX_METADATA_KEYS} keys"),
            ));
        }
        for (k, v) in &metadata {
            key(k)?;
            if let Some(v) = v {
                value(v)?;
            }
        }
        Ok(Description { name, metadata })
    }

    /// Changes nothing.
    pub fn is_empty(&self) -> bool {
        self.name.is_none() && self.metadata.is_empty()
    }

    /// The metadata change as a JSON object, `null` for a key removed: what `||` then
    /// `jsonb_strip_nulls` merge in Postgres.
    pub fn metadata_json(&self) -> String {
        serde_json::to_string(&self.metadata).expect("strings serialise")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_metadata_are_bounded_naming_the_field() {
        assert!(name("a".repeat(200)).is_ok());
        assert_eq!(name("é".repeat(201)).unwrap_err().field, "name");
        assert_eq!(name(String::new()).unwrap_err().field, "name");
        assert_eq!(name("a\0b".into()).unwrap_err().field, "name");

        let many: Metadata = (0..51).map(|i| (format!("k{i}"), "v".into())).collect();
        assert_eq!(metadata(many).unwrap_err().field, "metadata");
        let long_key: Metadata = [("k".repeat(41), "v".into())].into();
        assert!(metadata(long_key).is_err());
        let long_value: Metadata = [("k".into(), "v".repeat(501))].into();
        assert!(metadata(long_value).is_err());
        let fine: Metadata = [("k".repeat(40), "v".repeat(500))].into();
        assert!(metadata(fine).is_ok());
    }

    #[test]
    fn a_change_removes_with_null() {
        let change = Description::parse(
            Some(None),
            Some([("gone".into(), None), ("kept".into(), Some("x".into()))].into()),
        )
        .unwrap();
        assert_eq!(change.name, Some(None));
        assert_eq!(change.metadata_json(), r#"{"gone":null,"kept":"x"}"#);
        assert!(Description::parse(None, None).unwrap().is_empty());
        assert!(Description::parse(Some(Some(String::new())), None).is_err());
    }
}
