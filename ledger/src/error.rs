//! Typed store errors. Each says whether the write certainly did not happen.

use uuid::Uuid;

use crate::envelope::{ExpectedVersion, StreamId};
use crate::invalid::InvalidInput;

#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// Determinate: nothing was written.
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    /// Determinate: the stream was not at the expected version. `actual` is `None` when a
    /// concurrent writer committed the version first; read the stream again.
    #[error("stream {stream} is at version {actual:?}, the append expected {expected:?}")]
    Conflict { stream: StreamId, expected: ExpectedVersion, actual: Option<u64> },
    /// Determinate: the stream belongs to another tenant.
    #[error("stream {stream} belongs to another tenant")]
    TenantMismatch { stream: StreamId },
    /// Determinate: the event id is already stored with other content, or only part of the
    /// append's events are stored.
    #[error("event id {event_id} is already stored with other content")]
    DuplicateEventId { event_id: Uuid },
    /// Determinate: the store failed before the commit was sent; the transaction rolled back.
    #[error("store unavailable before commit: {0}")]
    Unavailable(String),
    /// Indeterminate: the connection failed while committing. Settle it by looking the event
    /// ids up (`PgStore::settle`), never by a blind retry.
    #[error("commit outcome unknown: {reason}")]
    Indeterminate {
        reason: String,
        /// The server process that ran the transaction, to wait for before looking up.
        backend_pid: Option<i32>,
        event_ids: Vec<Uuid>,
    },
}

impl AppendError {
    /// True when the append certainly did not happen.
    pub fn is_determinate(&self) -> bool {
        !matches!(self, Self::Indeterminate { .. })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A stored row that does not decode into an envelope.
    #[error("corrupt event at position {position}: {reason}")]
    Corrupt { position: u64, reason: String },
}
