//! The store itself: its pool, its head cache and wake-ups, and the event store's reads and
//! lone appends.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::watch;
use tokio_postgres::NoTls;
use uuid::Uuid;

use crate::envelope::{AppendOutcome, AppendRequest, Checkpoint, RecordedEvent, StreamId};
use crate::error::{AppendError, ReadError};
use crate::store::EventStore;

use super::failure::{connection_suspect, unavailable, unavailable_read};
use super::notify::{listen, notify_on_commit};
use super::rows::{Head, decode_row};
use super::sql::{COLUMNS, read_all_sql};

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
    pub(super) pool: Pool,
    pub(super) heads: Arc<Mutex<HashMap<StreamId, Head>>>,
    /// Moved by this store's own commits.
    pub(super) local: Arc<watch::Sender<u64>>,
    /// Moved by local commits and by other processes' NOTIFYs.
    pub(super) wake: Arc<watch::Sender<u64>>,
    pub(super) settled: Arc<SettleCounts>,
    /// How long a lost commit's server process may take to end before settling gives up.
    pub(super) settle_patience: Duration,
    _tasks: Option<Arc<TaskGuard>>,
}

/// How many commits that lost their connection were settled each way (operators and tests).
#[derive(Debug, Default)]
pub struct SettleCounts {
    pub stored: AtomicU64,
    pub not_stored: AtomicU64,
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
