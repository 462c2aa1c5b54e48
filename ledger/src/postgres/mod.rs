//! The PostgreSQL store: tokio-postgres over a deadpool pool.
//!
//! An append is one multi-row INSERT of the events with their hash links, in a transaction of
//! its own (one round trip), or inside a transaction the ledger runs for a caller
//! (`PgStore::transaction`), or in one statement with a caller's guard
//! (`PgStore::append_guarded`). The stream's head
//! (newest version, hash, tenant) comes from a per-store cache filled by this store's own writes
//! and reads; stored events never change, so a cached head is either still the head or a
//! concurrent writer took the next version, which the `(stream_id, stream_version)` unique key
//! turns into a typed conflict. Only a miss, or `ExpectedVersion::Any`, reads the head first.
//!
//! Wake-ups: appends move an in-process counter at once; a background task turns those into one
//! coalesced NOTIFY, so no append holds PostgreSQL's global notify lock at commit, and a
//! listener turns other processes' NOTIFYs back into wake-ups.

mod heads;
mod notify;
mod settle;
mod sql;
mod tx;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::watch;
use tokio_postgres::error::SqlState;
use tokio_postgres::{NoTls, Row};
use uuid::Uuid;

use crate::envelope::{AppendOutcome, AppendRequest, Checkpoint, Metadata, RecordedEvent, StreamId, TenantId};
use crate::error::{AppendError, ReadError};
use crate::store::EventStore;

pub use settle::SettleCounts;
pub use sql::{COLUMNS, Guard, read_all_sql};
pub use tx::{Done, Tx};
#[allow(clippy::wildcard_imports)] // the module's own files, split along their seams
use {heads::*, notify::*, sql::*, tx::*};

/// The channel appends are announced on.
pub const WAKE_CHANNEL: &str = "grant_ledger_events";

impl PgStore {
    /// A store whose wake-ups move only on its own appends.
    pub fn new(pool: Pool) -> Self {
        Self {
            pool,
            heads: Arc::default(),
            local: Arc::new(watch::channel(0).0),
            wake: Arc::new(watch::channel(0).0),
            settled: Arc::default(),
            settle_patience: Duration::from_secs(10),
            _tasks: None,
        }
    }

    /// A store that also announces its appends with NOTIFY and LISTENs for other processes'
    /// on a connection of its own (reconnecting, and waking once after each reconnect, since
    /// notifications sent while it was away are lost).
    pub fn with_listener(pool: Pool, config: tokio_postgres::Config) -> Self {
        let mut store = Self::new(pool);
        let notifier = tokio::spawn(notify_on_commit(store.pool.clone(), store.local.subscribe()));
        let listener = tokio::spawn(listen(config, Arc::clone(&store.wake)));
        store._tasks = Some(Arc::new(TaskGuard(vec![notifier, listener])));
        store
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

/// Keeps a connection whose COMMIT failed out of the pool. Its session may be dead while the
/// client has not yet noticed, and the pool's round-trip-free recycling would hand it to the
/// next caller, who would then fail for nothing.
pub fn discard(client: deadpool_postgres::Object) {
    drop(deadpool_postgres::Object::take(client));
}

/// A pool of at most `max_size` whose callers wait at most `wait` for a connection, then get an
/// error: for work that must not queue without bound behind others (credential lookups by
/// callers not yet authenticated).
pub fn bounded_pool(config: tokio_postgres::Config, max_size: usize, wait: Duration) -> Result<Pool, String> {
    let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(max_size)
        .wait_timeout(Some(wait))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| e.to_string())
}

/// A pool over `config` whose connections are recycled without a round trip.
pub fn pool(config: tokio_postgres::Config, max_size: usize) -> Result<Pool, String> {
    let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager).max_size(max_size).build().map_err(|e| e.to_string())
}

#[derive(Debug)]
struct TaskGuard(Vec<tokio::task::JoinHandle<()>>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

#[derive(Debug, Clone)]
pub struct PgStore {
    pool: Pool,
    heads: Arc<Mutex<HashMap<StreamId, Head>>>,
    /// Moved by this store's own commits.
    local: Arc<watch::Sender<u64>>,
    /// Moved by local commits and by other processes' NOTIFYs.
    wake: Arc<watch::Sender<u64>>,
    settled: Arc<SettleCounts>,
    /// How long a lost commit's server process may take to end before settling gives up.
    settle_patience: Duration,
    _tasks: Option<Arc<TaskGuard>>,
}

/// An error with its sources: tokio-postgres alone renders a server error as "db error".
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn unavailable_read(e: impl std::error::Error) -> ReadError {
    ReadError::Unavailable(chain(&e))
}

fn unavailable(e: impl std::error::Error) -> AppendError {
    AppendError::Unavailable(chain(&e))
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn parse_xid(text: &str) -> Result<u64, std::num::ParseIntError> {
    text.parse()
}

/// An event from a row selected with [`COLUMNS`].
pub fn decode_row(row: &Row) -> Result<RecordedEvent, ReadError> {
    let position = to_u64(row.get(0));
    let corrupt = |reason: String| ReadError::Corrupt { position, reason };
    let hash32 =
        |bytes: Vec<u8>| <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| corrupt("hash is not 32 bytes".into()));
    // Straight from the jsonb text into the struct, with no tree in between.
    let metadata =
        row.try_get::<_, tokio_postgres::types::Json<Metadata>>(9).map_err(|e| corrupt(format!("metadata: {e}")))?.0;
    Ok(RecordedEvent {
        global_position: position,
        tx_id: parse_xid(row.get(1)).map_err(|e| corrupt(format!("tx_id: {e}")))?,
        stream_id: StreamId::new(row.get::<_, String>(2)).map_err(|e| corrupt(e.to_string()))?,
        stream_version: to_u64(row.get(3)),
        event_id: row.get(4),
        event_type: row.get(5),
        schema_version: u32::try_from(row.get::<_, i32>(6)).map_err(|e| corrupt(e.to_string()))?,
        tenant_id: TenantId::new(row.get::<_, String>(7)).map_err(|e| corrupt(e.to_string()))?,
        payload: row.get(8),
        metadata,
        recorded_at: row.get(10),
        prev_hash: hash32(row.get(11))?,
        hash: hash32(row.get(12))?,
    })
}

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

/// Maps the INSERT's unique violations to typed errors by constraint name: the stream key means
/// a concurrent writer took the version first; the event id key means the id is already stored.
fn insert_error(e: &tokio_postgres::Error, request: &AppendRequest) -> AppendError {
    if session_ended(e) {
        return AppendError::Indeterminate { reason: chain(e), backend_pid: None, event_ids: request.event_ids() };
    }
    let Some(db) = e.as_db_error() else { return unavailable(e) };
    if *db.code() == SqlState::T_R_DEADLOCK_DETECTED {
        let s = &request.streams[0];
        return AppendError::Conflict { stream: s.stream_id.clone(), expected: s.expected, actual: None };
    }
    if *db.code() != SqlState::UNIQUE_VIOLATION {
        return unavailable(e);
    }
    let detail = db.detail().unwrap_or_default();
    match db.constraint() {
        Some("events_stream_version_key") => {
            let s = request
                .streams
                .iter()
                .find(|s| detail.contains(&format!("=({}, ", s.stream_id)))
                .unwrap_or(&request.streams[0]);
            AppendError::Conflict { stream: s.stream_id.clone(), expected: s.expected, actual: None }
        }
        Some("events_event_id_key") => {
            let ids = request.event_ids();
            let event_id = ids.iter().copied().find(|id| detail.contains(&id.to_string())).unwrap_or(ids[0]);
            AppendError::DuplicateEventId { event_id }
        }
        _ => unavailable(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ExpectedVersion, NewEvent};

    /// A store whose pool never connects: enough for the head cache.
    fn offline_store() -> PgStore {
        let config: tokio_postgres::Config = "postgres://nobody@127.0.0.1:1/none".parse().expect("config");
        PgStore::new(pool(config, 1).expect("pool"))
    }

    #[test]
    fn a_noted_head_never_moves_the_cache_back() {
        let store = offline_store();
        let stream = StreamId::new("grant-t.g").expect("stream");
        let tenant = TenantId::new("t").expect("tenant");
        store.note_head(stream.clone(), 5, [5; 32], tenant.clone());
        store.note_head(stream.clone(), 3, [3; 32], tenant.clone());
        assert_eq!(store.cached_head(&stream).map(|h| (h.version, h.hash)), Some((5, [5; 32])));
        store.note_head(stream.clone(), 6, [6; 32], tenant);
        assert_eq!(store.cached_head(&stream).map(|h| h.version), Some(6));
    }

    #[test]
    fn a_guarded_append_needs_its_heads_known() {
        let store = offline_store();
        let tenant = TenantId::new("t").expect("tenant");
        let stream = StreamId::new("grant-t.g").expect("stream");
        let event = NewEvent {
            event_id: Uuid::new_v4(),
            event_type: "test.event".into(),
            schema_version: 1,
            payload: serde_json::json!({}),
            metadata: Metadata::by("t"),
        };
        let request = AppendRequest::single(tenant.clone(), stream.clone(), ExpectedVersion::At(2), vec![event]);
        assert!(matches!(store.known_heads(&request), Err(AppendError::Conflict { .. })), "unknown head");
        store.note_head(stream.clone(), 1, [1; 32], tenant.clone());
        assert!(matches!(store.known_heads(&request), Err(AppendError::Conflict { .. })), "head at another version");
        store.note_head(stream.clone(), 2, [2; 32], tenant);
        let heads = store.known_heads(&request).expect("known");
        assert_eq!(heads[&stream].as_ref().map(|h| h.version), Some(2));
    }
}
