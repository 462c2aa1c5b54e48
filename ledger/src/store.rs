//! The storage trait both adapters implement and the contract suite checks.

use std::future::Future;

use tokio::sync::watch;
use uuid::Uuid;

use crate::envelope::{AppendOutcome, AppendRequest, Checkpoint, RecordedEvent, StreamId};
use crate::error::{AppendError, ReadError};

/// The page size readers of the global log use unless told otherwise.
pub const READ_PAGE: usize = 1_000;

pub trait EventStore: Send + Sync {
    /// Appends to one or several streams in one transaction, checking each expected version.
    /// Re-appending events whose ids are all stored with the same content returns the original
    /// outcome with `replayed` set and writes nothing.
    fn append(&self, request: AppendRequest) -> impl Future<Output = Result<AppendOutcome, AppendError>> + Send;

    /// The stream's events from `from_version` (inclusive), in version order.
    fn read_stream(
        &self,
        stream: &StreamId,
        from_version: u64,
    ) -> impl Future<Output = Result<Vec<RecordedEvent>, ReadError>> + Send;

    /// Up to `limit` events after `after`, in `(tx_id, position)` order, holding back every
    /// event whose transaction is not yet older than all running ones, so a reader that
    /// checkpoints on the last event it got never skips one that commits later.
    fn read_all(
        &self,
        after: Checkpoint,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<RecordedEvent>, ReadError>> + Send;

    /// The stored event with this id, if any: how an indeterminate append is settled.
    fn find_event(&self, event_id: Uuid) -> impl Future<Output = Result<Option<RecordedEvent>, ReadError>> + Send;

    /// A counter that moves after commits: a wake-up hint for readers, never a delivery.
    fn wake_ups(&self) -> watch::Receiver<u64>;
}
