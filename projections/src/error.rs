//! What a projection's work can fail with.

use grant_domain::catalogue::DecodeError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("store: {0}")]
    Store(#[from] tokio_postgres::Error),
    #[error("read: {0}")]
    Read(#[from] ledger::ReadError),
    #[error("decode: {0}")]
    Decode(#[from] DecodeError),
    #[error("pool: {0}")]
    Pool(String),
    #[error("{0}")]
    Stale(String),
}
