//! `EventStore` over PostgreSQL: an append in one statement, settled when its reply is lost, and
//! the three reads. The top of the adapter: it uses the store, its transactions, heads and
//! settling; none of them uses it.

use tokio::sync::watch;
use uuid::Uuid;

use crate::envelope::{AppendOutcome, AppendRequest, Checkpoint, RecordedEvent, StreamId};
use crate::error::{AppendError, ReadError};
use crate::store::EventStore;

use super::failure::{connection_suspect, unavailable, unavailable_read};
use super::rows::decode_row;
use super::sql::{COLUMNS, read_all_sql};
use super::store::{PgStore, discard};

impl EventStore for PgStore {
    /// One INSERT in its own transaction: the round trip of a bare insert's INSERT, with no
    /// BEGIN or COMMIT. A reply lost with the connection is settled by event id.
    async fn append(&self, request: AppendRequest) -> Result<AppendOutcome, AppendError> {
        request.validate()?;
        let attempt = async {
            let client = self.pool.get().await.map_err(unavailable)?;
            let result = self.alone(&client, &request, self.stage(&client, &request)).await;
            if result.as_ref().is_err_and(connection_suspect) {
                discard(client);
            }
            result
        };
        let e = match attempt.await {
            Ok(staged) => {
                self.committed(&staged);
                return Ok(AppendOutcome { tx_id: staged.tx_id, events: staged.events, replayed: false });
            }
            Err(e) => e,
        };
        self.forget(&request);
        match e {
            // A conflict or a taken event id may be this very append, already stored.
            AppendError::Conflict { .. } | AppendError::DuplicateEventId { .. } => {
                match self.replay_of(&request).await {
                    Ok(Some(outcome)) => Ok(outcome),
                    Ok(None) => Err(self.with_actual_version(e).await),
                    // It may be stored (a retry of an append that was): not "not written".
                    Err(lookup @ AppendError::Unavailable(_)) => Err(AppendError::Indeterminate {
                        reason: format!("{e}; looking the events up failed: {lookup}"),
                        backend_pid: None,
                        event_ids: request.event_ids(),
                    }),
                    Err(other) => Err(other),
                }
            }
            lost @ AppendError::Indeterminate { .. } => self.settled_alone(lost, &request).await,
            other => Err(other),
        }
    }

    async fn read_stream(&self, stream: &StreamId, from_version: u64) -> Result<Vec<RecordedEvent>, ReadError> {
        let client = self.pool.get().await.map_err(unavailable_read)?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM events WHERE stream_id = $1 AND stream_version >= $2 ORDER BY events.stream_version"
            ))
            .await
            .map_err(unavailable_read)?;
        let from = i64::try_from(from_version).unwrap_or(i64::MAX);
        let rows = client.query(&stmt, &[&stream.as_str(), &from]).await.map_err(unavailable_read)?;
        rows.iter().map(decode_row).collect()
    }

    async fn read_all(&self, after: Checkpoint, limit: usize) -> Result<Vec<RecordedEvent>, ReadError> {
        let client = self.pool.get().await.map_err(unavailable_read)?;
        let stmt = client.prepare_cached(&read_all_sql()).await.map_err(unavailable_read)?;
        let tx = after.tx_id.to_string();
        let position = i64::try_from(after.position).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client.query(&stmt, &[&tx, &position, &limit]).await.map_err(unavailable_read)?;
        rows.iter().map(decode_row).collect()
    }

    async fn find_event(&self, event_id: Uuid) -> Result<Option<RecordedEvent>, ReadError> {
        let client = self.pool.get().await.map_err(unavailable_read)?;
        let stmt = client
            .prepare_cached(&format!("SELECT {COLUMNS} FROM events WHERE event_id = $1"))
            .await
            .map_err(unavailable_read)?;
        let row = client.query_opt(&stmt, &[&event_id]).await.map_err(unavailable_read)?;
        row.as_ref().map(decode_row).transpose()
    }

    fn wake_ups(&self) -> watch::Receiver<u64> {
        self.wake.subscribe()
    }
}
