//! Settling an append whose commit was lost: looking its event ids up, never a blind retry.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use crate::envelope::{AppendOutcome, AppendRequest, Appended, RecordedEvent};
use crate::error::{AppendError, ReadError};

use super::failure::{unavailable, unavailable_read};
use super::rows::{decode_row, to_u64};
use super::sql::COLUMNS;
use super::store::{PgStore, SettleCounts};

impl PgStore {
    /// Settles an indeterminate append: waits (up to `patience`) until the server process that
    /// ran it has exited, so its transaction has certainly committed or rolled back, then looks
    /// the event ids up. `Ok(true)`: every event is stored; `Ok(false)`: none is.
    ///
    /// With `tx_id` (a transaction that staged its appends, so knows its id), only events of that
    /// transaction count: event ids a caller derives (an idempotent request) can be stored by a
    /// twin of the append, and that twin's commit is not this one's.
    pub async fn settle(
        &self,
        backend_pid: Option<i32>,
        event_ids: &[Uuid],
        patience: Duration,
        tx_id: Option<u64>,
    ) -> Result<bool, ReadError> {
        let client = self.pool.get().await.map_err(unavailable_read)?;
        if let Some(pid) = backend_pid {
            let deadline = tokio::time::Instant::now() + patience;
            loop {
                let alive: bool = client
                    .query_one("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", &[&pid])
                    .await
                    .map_err(unavailable_read)?
                    .get(0);
                if !alive {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(ReadError::Unavailable(format!("server process {pid} is still running")));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let tx = tx_id.map(|t| t.to_string());
        let found: i64 = client
            .query_one(
                "SELECT count(*) FROM events WHERE event_id = ANY($1) AND ($2::text IS NULL OR tx_id = $2::text::xid8)",
                &[&event_ids, &tx],
            )
            .await
            .map_err(unavailable_read)?
            .get(0);
        match usize::try_from(found) {
            Ok(n) if n == event_ids.len() => Ok(true),
            Ok(0) => Ok(false),
            _ => Err(ReadError::Corrupt { position: 0, reason: "an append was stored only in part".into() }),
        }
    }

    /// How many commits that lost their connection were settled each way.
    pub fn settled(&self) -> &SettleCounts {
        &self.settled
    }

    /// Settles an append whose commit outcome is unknown: `Ok(())` when it is stored; a
    /// determinate error when it certainly is not; the error itself when that cannot be told.
    pub(super) async fn settle_lost(&self, error: AppendError, tx_id: Option<u64>) -> Result<(), AppendError> {
        let AppendError::Indeterminate { backend_pid: Some(pid), event_ids, .. } = &error else { return Err(error) };
        match self.settle(Some(*pid), event_ids, self.settle_patience, tx_id).await {
            Ok(true) => {
                self.settled.stored.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Ok(false) => {
                self.settled.not_stored.fetch_add(1, Ordering::Relaxed);
                Err(AppendError::Unavailable(format!("commit lost with its connection and not stored: {error}")))
            }
            Err(_) => Err(error),
        }
    }

    /// After a one-statement append whose reply was lost: settles it, and when it is stored
    /// reads back where it landed and wakes readers as any commit does.
    pub(super) async fn settled_alone(
        &self,
        lost: AppendError,
        request: &AppendRequest,
    ) -> Result<AppendOutcome, AppendError> {
        // The statement's transaction id was never answered; the read back below compares content.
        self.settle_lost(lost, None).await?;
        self.wake();
        match self.replay_of(request).await {
            Ok(Some(o)) => Ok(AppendOutcome { replayed: false, ..o }),
            // Stored, yet not read back: the caller must not take it for "not written".
            Ok(None) | Err(_) => Err(AppendError::Indeterminate {
                reason: "an append settled as stored could not be read back".into(),
                backend_pid: None,
                event_ids: request.event_ids(),
            }),
        }
    }

    /// A conflict found by the unique key does not know the stream's version; read it.
    pub(super) async fn with_actual_version(&self, e: AppendError) -> AppendError {
        let AppendError::Conflict { stream, expected, actual: None } = e else { return e };
        let actual = match self.pool.get().await {
            Ok(client) => client
                .query_one(
                    "SELECT coalesce(max(stream_version), 0) FROM events WHERE stream_id = $1",
                    &[&stream.as_str()],
                )
                .await
                .ok()
                .map(|row| to_u64(row.get(0))),
            Err(_) => None,
        };
        AppendError::Conflict { stream, expected, actual }
    }

    /// After a failed append: are all its events stored with the same content (a replay)?
    pub(super) async fn replay_of(&self, request: &AppendRequest) -> Result<Option<AppendOutcome>, AppendError> {
        let client = self.pool.get().await.map_err(unavailable)?;
        let ids = request.event_ids();
        let rows = client
            .query(&format!("SELECT {COLUMNS} FROM events WHERE event_id = ANY($1)"), &[&ids])
            .await
            .map_err(unavailable)?;
        if rows.is_empty() {
            return Ok(None);
        }
        let stored: HashMap<Uuid, RecordedEvent> = rows
            .iter()
            .map(|r| decode_row(r).map(|e| (e.event_id, e)))
            .collect::<Result<_, _>>()
            .map_err(unavailable)?;
        let mut events = Vec::new();
        let mut tx_id = 0;
        for s in &request.streams {
            for e in &s.events {
                match stored.get(&e.event_id) {
                    Some(r) if r.same_content(&request.tenant_id, &s.stream_id, e) => {
                        tx_id = r.tx_id;
                        events.push(Appended {
                            event_id: r.event_id,
                            stream_id: r.stream_id.clone(),
                            stream_version: r.stream_version,
                            global_position: r.global_position,
                        });
                    }
                    _ => return Err(AppendError::DuplicateEventId { event_id: e.event_id }),
                }
            }
        }
        Ok(Some(AppendOutcome { tx_id, events, replayed: true }))
    }
}
