//! The PostgreSQL store: tokio-postgres over a deadpool pool.
//!
//! An append is one READ COMMITTED transaction: one query reads every named stream's head (its
//! newest version, hash and tenant) and the server process id, one multi-row INSERT writes the
//! events with their hash links, then COMMIT. A concurrent writer that took the same version
//! loses on the `(stream_id, stream_version)` unique key and gets a typed conflict.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod, Transaction};
use futures_util::StreamExt;
use serde_json::Value;
use time::OffsetDateTime;
use tokio::sync::watch;
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, IsolationLevel, NoTls, Row};
use uuid::Uuid;

use crate::envelope::{
    AppendOutcome, AppendRequest, Appended, Checkpoint, Metadata, RecordedEvent, StreamId, TenantId,
};
use crate::error::{AppendError, ReadError};
use crate::hash::{GENESIS, Hashed, truncate_to_micros};
use crate::store::EventStore;

/// The channel the events table's insert trigger notifies.
pub const WAKE_CHANNEL: &str = "grant_ledger_events";

const COLUMNS: &str = "global_position, tx_id::text, stream_id, stream_version, event_id, event_type, \
     schema_version, tenant_id, payload, metadata, recorded_at, prev_hash, hash";

const HEADS: &str = "SELECT s.id, e.stream_version, e.hash, e.tenant_id, pg_backend_pid() \
     FROM unnest($1::text[]) AS s(id) \
     LEFT JOIN LATERAL (SELECT stream_version, hash, tenant_id FROM events \
        WHERE stream_id = s.id ORDER BY stream_version DESC LIMIT 1) e ON true";

const INSERT: &str = "INSERT INTO events (event_id, stream_id, stream_version, event_type, \
     schema_version, tenant_id, payload, metadata, recorded_at, prev_hash, hash) \
     SELECT * FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::int[], $6::text[], \
        $7::jsonb[], $8::jsonb[], $9::timestamptz[], $10::bytea[], $11::bytea[]) \
     RETURNING global_position, tx_id::text";

/// A pool over `config` whose connections are recycled without a round trip.
pub fn pool(config: tokio_postgres::Config, max_size: usize) -> Result<Pool, String> {
    let manager =
        Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager).max_size(max_size).build().map_err(|e| e.to_string())
}

#[derive(Debug)]
struct ListenerGuard(tokio::task::JoinHandle<()>);

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Debug, Clone)]
pub struct PgStore {
    pool: Pool,
    wake: Arc<watch::Sender<u64>>,
    _listener: Option<Arc<ListenerGuard>>,
}

impl PgStore {
    /// A store whose wake-ups move only on its own appends.
    pub fn new(pool: Pool) -> Self {
        Self { pool, wake: Arc::new(watch::channel(0).0), _listener: None }
    }

    /// A store that also LISTENs on its own connection, so appends by any process wake readers.
    /// The listener reconnects on its own and signals once after each reconnect, since
    /// notifications sent while it was away are lost.
    pub fn with_listener(pool: Pool, config: tokio_postgres::Config) -> Self {
        let wake = Arc::new(watch::channel(0).0);
        let task = tokio::spawn(listen(config, Arc::clone(&wake)));
        Self { pool, wake, _listener: Some(Arc::new(ListenerGuard(task))) }
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Settles an indeterminate append: waits (up to `patience`) until the server process that
    /// ran it has exited, so its transaction has certainly committed or rolled back, then looks
    /// the event ids up. `Ok(true)`: every event is stored; `Ok(false)`: none is.
    pub async fn settle(&self, backend_pid: Option<i32>, event_ids: &[Uuid], patience: Duration) -> Result<bool, ReadError> {
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
        let found: i64 = client
            .query_one("SELECT count(*) FROM events WHERE event_id = ANY($1)", &[&event_ids])
            .await
            .map_err(unavailable_read)?
            .get(0);
        match usize::try_from(found) {
            Ok(n) if n == event_ids.len() => Ok(true),
            Ok(0) => Ok(false),
            _ => Err(ReadError::Corrupt { position: 0, reason: "an append was stored only in part".into() }),
        }
    }
}

async fn listen(config: tokio_postgres::Config, wake: Arc<watch::Sender<u64>>) {
    let mut backoff = Duration::from_millis(50);
    loop {
        if let Ok((client, mut connection)) = config.connect(NoTls).await {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            let driver = async {
                while let Some(Ok(message)) = messages.next().await {
                    if let AsyncMessage::Notification(_) = message {
                        wake.send_modify(|n| *n += 1);
                    }
                }
            };
            let subscribe = async {
                let ok = client.batch_execute(&format!("LISTEN {WAKE_CHANNEL}")).await.is_ok();
                if ok {
                    wake.send_modify(|n| *n += 1);
                }
                ok
            };
            // The connection must be driven while LISTEN runs, so run both and keep driving.
            tokio::pin!(driver);
            tokio::select! {
                () = &mut driver => {}
                ok = subscribe => if ok { (&mut driver).await },
            }
            backoff = Duration::from_millis(50);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

fn unavailable_read(e: impl std::fmt::Display) -> ReadError {
    ReadError::Unavailable(e.to_string())
}

fn unavailable(e: impl std::fmt::Display) -> AppendError {
    AppendError::Unavailable(e.to_string())
}

/// A prepared append: the inserted events' positions and the server process id, used to
/// classify a failed commit.
#[derive(Debug)]
pub struct Staged {
    pub tx_id: u64,
    pub events: Vec<Appended>,
    pub backend_pid: i32,
    event_ids: Vec<Uuid>,
}

impl Staged {
    /// Maps a COMMIT failure: a server error is determinate, a lost connection is not.
    pub fn commit_error(&self, e: &tokio_postgres::Error) -> AppendError {
        if e.as_db_error().is_some() {
            unavailable(e)
        } else {
            AppendError::Indeterminate {
                reason: e.to_string(),
                backend_pid: Some(self.backend_pid),
                event_ids: self.event_ids.clone(),
            }
        }
    }
}

/// Writes `request` inside the caller's transaction without committing, so a caller can update
/// an inline projection in the same transaction. Conflicts and duplicates come back typed.
pub async fn append_within(tx: &Transaction<'_>, request: &AppendRequest) -> Result<Staged, AppendError> {
    request.validate()?;
    let mut streams: Vec<_> = request.streams.iter().collect();
    // A fixed order keeps two multi-stream appends from deadlocking on each other's keys.
    streams.sort_by(|a, b| a.stream_id.cmp(&b.stream_id));
    let names: Vec<&str> = streams.iter().map(|s| s.stream_id.as_str()).collect();

    let heads_stmt = tx.prepare_cached(HEADS).await.map_err(unavailable)?;
    let rows = tx.query(&heads_stmt, &[&names]).await.map_err(unavailable)?;
    let mut heads: HashMap<String, (u64, [u8; 32], Option<String>)> = HashMap::new();
    let mut backend_pid = 0;
    for row in &rows {
        let id: String = row.get(0);
        let version: Option<i64> = row.get(1);
        let hash: Option<Vec<u8>> = row.get(2);
        let tenant: Option<String> = row.get(3);
        backend_pid = row.get(4);
        let hash = hash.map_or(Ok(GENESIS), |h| <[u8; 32]>::try_from(h.as_slice())).map_err(unavailable)?;
        heads.insert(id, (to_u64(version.unwrap_or(0)), hash, tenant));
    }

    let recorded_at = truncate_to_micros(OffsetDateTime::now_utc());
    let mut cols = InsertColumns::default();
    let mut order = Vec::new();
    for s in &streams {
        let (current, mut prev, tenant) = heads.remove(s.stream_id.as_str()).unwrap_or((0, GENESIS, None));
        if tenant.is_some_and(|t| t != request.tenant_id.as_str()) {
            return Err(AppendError::TenantMismatch { stream: s.stream_id.clone() });
        }
        if !s.expected.admits(current) {
            return Err(AppendError::Conflict { stream: s.stream_id.clone(), expected: s.expected, actual: Some(current) });
        }
        let mut version = current;
        for e in &s.events {
            version += 1;
            let hash = Hashed {
                stream_id: &s.stream_id,
                stream_version: version,
                event_id: e.event_id,
                event_type: &e.event_type,
                schema_version: e.schema_version,
                tenant_id: &request.tenant_id,
                payload: &e.payload,
                metadata: &e.metadata,
                recorded_at,
            }
            .hash(&prev);
            cols.push(&request.tenant_id, &s.stream_id, version, e, recorded_at, prev, hash);
            order.push((e.event_id, s.stream_id.clone(), version));
            prev = hash;
        }
    }

    let insert_stmt = tx.prepare_cached(INSERT).await.map_err(unavailable)?;
    let inserted = tx.query(&insert_stmt, &cols.params()).await.map_err(|e| insert_error(&e, request))?;
    let mut tx_id = 0;
    let mut events_by_id = HashMap::new();
    for (row, (event_id, stream_id, version)) in inserted.iter().zip(order) {
        tx_id = parse_xid(row.get(1)).map_err(unavailable)?;
        events_by_id.insert(event_id, Appended {
            event_id,
            stream_id,
            stream_version: version,
            global_position: to_u64(row.get(0)),
        });
    }
    // Report in request order, not the sorted order used for writing.
    let event_ids = request.event_ids();
    let events = event_ids.iter().filter_map(|id| events_by_id.remove(id)).collect();
    Ok(Staged { tx_id, events, backend_pid, event_ids })
}

#[derive(Default)]
struct InsertColumns {
    event_id: Vec<Uuid>,
    stream_id: Vec<String>,
    stream_version: Vec<i64>,
    event_type: Vec<String>,
    schema_version: Vec<i32>,
    tenant_id: Vec<String>,
    payload: Vec<Value>,
    metadata: Vec<Value>,
    recorded_at: Vec<OffsetDateTime>,
    prev_hash: Vec<Vec<u8>>,
    hash: Vec<Vec<u8>>,
}

impl InsertColumns {
    #[allow(clippy::too_many_arguments)] // one row's worth of columns
    fn push(
        &mut self,
        tenant: &TenantId,
        stream: &StreamId,
        version: u64,
        e: &crate::envelope::NewEvent,
        recorded_at: OffsetDateTime,
        prev: [u8; 32],
        hash: [u8; 32],
    ) {
        self.event_id.push(e.event_id);
        self.stream_id.push(stream.as_str().to_owned());
        self.stream_version.push(i64::try_from(version).unwrap_or(i64::MAX));
        self.event_type.push(e.event_type.clone());
        self.schema_version.push(i32::try_from(e.schema_version).unwrap_or(i32::MAX));
        self.tenant_id.push(tenant.as_str().to_owned());
        self.payload.push(e.payload.clone());
        self.metadata.push(serde_json::to_value(&e.metadata).expect("metadata always serialises"));
        self.recorded_at.push(recorded_at);
        self.prev_hash.push(prev.to_vec());
        self.hash.push(hash.to_vec());
    }

    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 11] {
        [
            &self.event_id,
            &self.stream_id,
            &self.stream_version,
            &self.event_type,
            &self.schema_version,
            &self.tenant_id,
            &self.payload,
            &self.metadata,
            &self.recorded_at,
            &self.prev_hash,
            &self.hash,
        ]
    }
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn parse_xid(text: &str) -> Result<u64, std::num::ParseIntError> {
    text.parse()
}

fn decode_row(row: &Row) -> Result<RecordedEvent, ReadError> {
    let position = to_u64(row.get(0));
    let corrupt = |reason: String| ReadError::Corrupt { position, reason };
    let hash32 = |bytes: Vec<u8>| <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| corrupt("hash is not 32 bytes".into()));
    let metadata: Metadata = serde_json::from_value(row.get(9)).map_err(|e| corrupt(format!("metadata: {e}")))?;
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

impl PgStore {
    /// After a failed append: are all its events stored with the same content (a replay)?
    async fn replay_of(&self, request: &AppendRequest) -> Result<Option<AppendOutcome>, AppendError> {
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

impl EventStore for PgStore {
    async fn append(&self, request: AppendRequest) -> Result<AppendOutcome, AppendError> {
        request.validate()?;
        let attempt = async {
            let mut client = self.pool.get().await.map_err(unavailable)?;
            let tx = client
                .build_transaction()
                .isolation_level(IsolationLevel::ReadCommitted)
                .start()
                .await
                .map_err(unavailable)?;
            let staged = append_within(&tx, &request).await?;
            tx.commit().await.map_err(|e| staged.commit_error(&e))?;
            Ok::<_, AppendError>(staged)
        };
        match attempt.await {
            Ok(staged) => {
                self.wake.send_modify(|n| *n += 1);
                Ok(AppendOutcome { tx_id: staged.tx_id, events: staged.events, replayed: false })
            }
            // A version conflict or a taken event id may be this very append, already stored.
            Err(e @ (AppendError::Conflict { .. } | AppendError::DuplicateEventId { .. })) => {
                match self.replay_of(&request).await {
                    Ok(Some(outcome)) => Ok(outcome),
                    Ok(None) => Err(e),
                    Err(other) => Err(other),
                }
            }
            Err(e) => Err(e),
        }
    }

    async fn read_stream(&self, stream: &StreamId, from_version: u64) -> Result<Vec<RecordedEvent>, ReadError> {
        let client = self.pool.get().await.map_err(unavailable_read)?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM events WHERE stream_id = $1 AND stream_version >= $2 ORDER BY stream_version"
            ))
            .await
            .map_err(unavailable_read)?;
        let from = i64::try_from(from_version).unwrap_or(i64::MAX);
        let rows = client.query(&stmt, &[&stream.as_str(), &from]).await.map_err(unavailable_read)?;
        rows.iter().map(decode_row).collect()
    }

    async fn read_all(&self, after: Checkpoint, limit: usize) -> Result<Vec<RecordedEvent>, ReadError> {
        let client = self.pool.get().await.map_err(unavailable_read)?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM events \
                 WHERE (tx_id, global_position) > ($1::text::xid8, $2) \
                   AND tx_id < pg_snapshot_xmin(pg_current_snapshot()) \
                 ORDER BY tx_id, global_position LIMIT $3"
            ))
            .await
            .map_err(unavailable_read)?;
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
    let Some(db) = e.as_db_error() else { return unavailable(e) };
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
