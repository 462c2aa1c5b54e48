//! Values between the authority's types and PostgreSQL's, and what a statement's failure means.

use crate::error::StoreError;

pub(super) fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// A statement's failure: contention the caller may decide again after, a constraint of the
/// inline tables, or the store being unavailable.
pub(super) fn db(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error().map(|d| (d.code().code(), d.message())) {
        Some(("40001" | "40P01", m)) => StoreError::Contended(m.to_owned()),
        Some((code, m)) if code.starts_with("23") => StoreError::Projection(format!("{code}: {m}")),
        _ => unavailable(e),
    }
}

pub(super) fn json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, StoreError> {
    serde_json::from_value(value).map_err(|e| StoreError::Projection(format!("inline state unreadable: {e}")))
}

pub(super) fn to_json(value: &impl serde::Serialize) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(value).map_err(|e| StoreError::Projection(format!("inline state unwritable: {e}")))
}

pub(super) fn version(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(super) fn from_version(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
