//! The Lua scripts' replies, parsed: a reply that is not what the script answers is a
//! [`GateError::Reply`], never a default.

use super::GateError;

pub(super) fn num(s: &str) -> Result<i64, GateError> {
    s.parse()
        .map_err(|_| GateError::Reply(format!("not a number: {s:?}")))
}

/// An entry's rules version: '' for an entry written before the gate kept it.
pub(super) fn version_of(s: &str) -> Result<Option<i64>, GateError> {
    match s {
        "" => Ok(None),
        v => num(v).map(Some),
    }
}
