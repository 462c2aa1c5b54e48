//! The append-only event ledger: the envelope every event travels in, the per-stream hash
//! chain, and the `EventStore` trait with its PostgreSQL (feature `postgres`, on by default) and
//! in-memory adapters. The typed event catalogue lives with the domain (`grant-domain`).
//!
//! This crate depends on no other crate of the workspace. It knows nothing of grants, the
//! classifier, gRPC or WebDriver beyond the shape of the events it stores.

#[cfg(feature = "contract")]
pub mod contract;
mod envelope;
mod error;
pub mod hash;
mod invalid;
mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod proof;
mod store;

pub use envelope::{
    AppendOutcome, AppendRequest, Appended, Checkpoint, ExpectedVersion, ID_CHARACTERS, MAX_ENTITY_ID_LEN,
    MAX_EVENTS_PER_APPEND, MAX_ID_LEN, MAX_TENANT_LEN, Metadata, NewEvent, RecordedEvent, StreamAppend, StreamId,
    TenantId, check_entity_id, entity_stream_sql,
};
pub use error::{AppendError, ReadError};
pub use hash::{ChainError, verify_stream};
pub use invalid::InvalidInput;
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PgStore;
pub use store::{EventStore, READ_PAGE};
