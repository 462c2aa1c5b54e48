//! The refusal of input the store checks before touching anything: a leaf, so that the
//! envelope's checks and the errors that carry an envelope can both name it.

/// Input the store refuses before touching anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct InvalidInput {
    pub field: &'static str,
    pub reason: String,
    /// Where inside `field` it is, when that is deeper (a payload's JSON path).
    pub at: Option<String>,
}

impl InvalidInput {
    pub fn new(field: &'static str, reason: impl Into<String>) -> Self {
        Self { field, reason: reason.into(), at: None }
    }

    /// The same refusal, placed at `path` inside the field.
    pub fn at(self, path: impl Into<String>) -> Self {
        Self { at: Some(path.into()), ..self }
    }
}
