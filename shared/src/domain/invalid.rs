//! [`Invalid`]: the one error every rule in this module returns, naming the field at fault.

/// A rule broken by client input. `field` is the JSON field or path segment at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct Invalid {
    pub field: &'static str,
    pub problem: String,
}

impl Invalid {
    pub fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Invalid {
            field,
            problem: problem.into(),
        }
    }
}
