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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    AppendOutcome, AppendRequest, Appended, Checkpoint, ExpectedVersion, Metadata, RecordedEvent, StreamAppend,
    StreamId, TenantId,
};
use crate::error::{AppendError, ReadError};
use crate::hash::{GENESIS, Hashed, truncate_to_micros};
use crate::store::EventStore;

/// The channel appends are announced on.
pub const WAKE_CHANNEL: &str = "grant_ledger_events";

/// The columns [`decode_row`] reads, in its order: for readers that select events themselves.
pub const COLUMNS: &str = "global_position, tx_id::text, stream_id, stream_version, event_id, event_type, \
     schema_version, tenant_id, payload, metadata, recorded_at, prev_hash, hash";

/// The global read: `$1` the checkpoint's tx id as text, `$2` its position, `$3` the limit.
pub fn read_all_sql() -> String {
    // Qualified: the select list's `tx_id::text` is an output column named `tx_id`, and a bare
    // `ORDER BY tx_id` resolves to it and sorts text ("1000" before "999"), disagreeing with the
    // numeric WHERE: a page cut there skips events, and the sort defeats the primary key.
    format!(
        "SELECT {COLUMNS} FROM events \
         WHERE (events.tx_id, events.global_position) > ($1::text::xid8, $2) \
           AND events.tx_id < pg_snapshot_xmin(pg_current_snapshot()) \
         ORDER BY events.tx_id, events.global_position LIMIT $3"
    )
}

const HEADS: &str = "SELECT s.id, e.stream_version, e.hash, e.tenant_id \
     FROM unnest($1::text[]) AS s(id) \
     LEFT JOIN LATERAL (SELECT stream_version, hash, tenant_id FROM events \
        WHERE stream_id = s.id ORDER BY stream_version DESC LIMIT 1) e ON true";

const INSERT_COLUMNS: usize = 11;

/// `INSERT … VALUES` for `rows` events; prepared once per row count.
fn insert_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO events (event_id, stream_id, stream_version, event_type, schema_version, tenant_id, \
         payload, metadata, recorded_at, prev_hash, hash) VALUES ",
    );
    for r in 0..rows {
        let base = r * INSERT_COLUMNS;
        let params: Vec<String> = (1..=INSERT_COLUMNS).map(|c| format!("${}", base + c)).collect();
        sql.push_str(if r == 0 { "(" } else { ", (" });
        sql.push_str(&params.join(", "));
        sql.push(')');
    }
    sql.push_str(" RETURNING global_position, tx_id::text, pg_backend_pid(), event_id");
    sql
}

/// A query an append is made conditional on, in the same statement ([`PgStore::append_guarded`]).
#[derive(Debug)]
pub struct Guard<'a> {
    /// A query, which may modify data (`UPDATE … RETURNING`), using parameters `$1..$n`. No
    /// row: nothing is appended.
    pub sql: &'a str,
    /// A data-modifying statement run after the insert, which can read the inserted events from
    /// `appended(event_id, tx_id, global_position)`: an inline projection's row that needs the
    /// event's log position.
    pub then: Option<&'a str>,
    pub params: &'a [&'a (dyn tokio_postgres::types::ToSql + Sync)],
}

/// `guard`, then the insert of `rows` events when it returned a row, then `guard.then`.
fn guarded_insert_sql(guard: &Guard<'_>, rows: usize) -> String {
    const CASTS: [&str; INSERT_COLUMNS] =
        ["uuid", "text", "bigint", "text", "integer", "text", "jsonb", "jsonb", "timestamptz", "bytea", "bytea"];
    let first = guard.params.len();
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let cols: Vec<String> = CASTS
                .iter()
                .enumerate()
                .map(|(c, t)| format!("${}::{t}", first + r * INSERT_COLUMNS + c + 1))
                .collect();
            format!("({})", cols.join(", "))
        })
        .collect();
    let then = guard.then.map(|t| format!(", then_ AS ({t})")).unwrap_or_default();
    format!(
        "WITH guard AS ({}), appended AS (INSERT INTO events (event_id, stream_id, stream_version, event_type, \
         schema_version, tenant_id, payload, metadata, recorded_at, prev_hash, hash) \
         SELECT * FROM (VALUES {}) AS v WHERE EXISTS (SELECT 1 FROM guard) \
         RETURNING event_id, tx_id, global_position){then} \
         SELECT global_position, tx_id::text, pg_backend_pid(), event_id FROM appended",
        guard.sql,
        values.join(", ")
    )
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

/// One event of an append as chained: its id, stream, version and hash.
type Planned = (Uuid, StreamId, u64, [u8; 32]);

/// A stream's newest event as this store last saw it.
#[derive(Debug, Clone)]
struct Head {
    version: u64,
    hash: [u8; 32],
    tenant: TenantId,
}

/// Bounded: past this many streams the cache starts over (a miss costs one read).
const HEAD_CACHE_LIMIT: usize = 100_000;

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

    fn cached_head(&self, stream: &StreamId) -> Option<Head> {
        self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(stream).cloned()
    }

    /// A stream's head the caller read from stored events (never one its own open transaction
    /// wrote): a later append at that version then skips reading it. A version nobody expects
    /// is simply never used; a stale one loses to the unique key.
    pub fn note_head(&self, stream: StreamId, version: u64, hash: [u8; 32], tenant: TenantId) {
        self.remember(stream, Head { version, hash, tenant });
    }

    /// Caches `head` unless a newer one is cached: a read from an older snapshot never moves a
    /// head back.
    fn remember(&self, stream: StreamId, head: Head) {
        let mut heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if heads.get(&stream).is_some_and(|h| h.version > head.version) {
            return;
        }
        if heads.len() >= HEAD_CACHE_LIMIT {
            heads.clear();
        }
        heads.insert(stream, head);
    }

    fn forget(&self, request: &AppendRequest) {
        let mut heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for s in &request.streams {
            heads.remove(&s.stream_id);
        }
    }

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

    /// Runs `body` in one transaction of `isolation` and commits it. `body` reads and writes
    /// through [`Tx::sql`] (an inline projection's rows) and appends through [`Tx::append`]; an
    /// error from it rolls everything back. The ledger owns the commit: a COMMIT that lost its
    /// connection is settled by event id before this returns, and only a commit known to be
    /// stored moves the head cache and the wake-ups.
    pub async fn transaction<T, E>(
        &self,
        isolation: IsolationLevel,
        body: impl AsyncFnOnce(&mut Tx<'_>) -> Result<T, E>,
    ) -> Result<Done<T>, E>
    where
        E: From<AppendError>,
    {
        let mut client = self.pool.get().await.map_err(|e| E::from(unavailable(e)))?;
        let tx =
            client.build_transaction().isolation_level(isolation).start().await.map_err(|e| E::from(unavailable(e)))?;
        let (value, staged, commit) = {
            let mut work = Tx { tx, store: self, staged: Vec::new(), failed: false };
            let value = body(&mut work).await?;
            let Tx { tx, staged, failed, .. } = work;
            if failed {
                return Err(AppendError::Unavailable("an append in this transaction failed; rolled back".into()).into());
            }
            (value, staged, tx.commit().await)
        };
        if let Err(e) = commit {
            let Some(first) = staged.first() else {
                // Nothing in the ledger depends on it; the inline rows it wrote without events
                // are placeholders a later command locks and fills.
                if session_ended(&e) {
                    discard(client);
                }
                return Err(unavailable(e).into());
            };
            discard(client);
            // One transaction: its first append stored means every one of them is.
            self.settle_lost(first.commit_error(&e), Some(first.tx_id)).await?;
        }
        staged.iter().for_each(|s| self.committed(s));
        let outcome = (!staged.is_empty()).then(|| AppendOutcome {
            tx_id: staged[0].tx_id,
            events: staged.iter().flat_map(|s| s.events.iter().cloned()).collect(),
            replayed: false,
        });
        Ok(Done { value, outcome })
    }

    /// How many commits that lost their connection were settled each way.
    pub fn settled(&self) -> &SettleCounts {
        &self.settled
    }

    /// Settles an append whose commit outcome is unknown: `Ok(())` when it is stored; a
    /// determinate error when it certainly is not; the error itself when that cannot be told.
    async fn settle_lost(&self, error: AppendError, tx_id: Option<u64>) -> Result<(), AppendError> {
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

    /// The heads `request` appends after as far as the cache knows them, and the streams it
    /// does not know at the expected version.
    fn cached_heads<'r>(&self, request: &'r AppendRequest) -> (HashMap<StreamId, Option<Head>>, Vec<&'r StreamAppend>) {
        let mut heads = HashMap::new();
        let mut misses = Vec::new();
        for s in &request.streams {
            match (s.expected, self.cached_head(&s.stream_id)) {
                (ExpectedVersion::NoStream, _) => {
                    heads.insert(s.stream_id.clone(), None);
                }
                (ExpectedVersion::At(v), Some(h)) if h.version == v => {
                    heads.insert(s.stream_id.clone(), Some(h));
                }
                _ => misses.push(s),
            }
        }
        (heads, misses)
    }

    /// The heads `request` appends after, from the cache alone: a miss is a conflict.
    fn known_heads(&self, request: &AppendRequest) -> Result<HashMap<StreamId, Option<Head>>, AppendError> {
        match self.cached_heads(request) {
            (heads, misses) if misses.is_empty() => Ok(heads),
            (_, misses) => Err(AppendError::Conflict {
                stream: misses[0].stream_id.clone(),
                expected: misses[0].expected,
                actual: None,
            }),
        }
    }

    /// The heads `request` appends after: from the cache, or read (one statement) on a miss.
    async fn heads_for(
        &self,
        client: &impl GenericClient,
        request: &AppendRequest,
    ) -> Result<HashMap<StreamId, Option<Head>>, AppendError> {
        let (mut heads, misses) = self.cached_heads(request);
        if !misses.is_empty() {
            let ids: Vec<&str> = misses.iter().map(|s| s.stream_id.as_str()).collect();
            let stmt = client.prepare_cached(HEADS).await.map_err(unavailable)?;
            for row in client.query(&stmt, &[&ids]).await.map_err(unavailable)? {
                let Ok(stream) = StreamId::new(row.get::<_, String>(0)) else { continue };
                heads.insert(stream, head_from_row(&row).map_err(AppendError::Unavailable)?);
            }
        }
        Ok(heads)
    }

    /// The rows of `request` chained onto `heads`, in request order: request order is log
    /// order, so an auditor reads the events of one append as they were decided.
    fn chain(
        request: &AppendRequest,
        mut heads: HashMap<StreamId, Option<Head>>,
    ) -> Result<(InsertColumns, Vec<Planned>), AppendError> {
        let recorded_at = truncate_to_micros(OffsetDateTime::now_utc());
        let mut cols = InsertColumns::default();
        let mut order = Vec::new();
        for s in &request.streams {
            let head = heads.remove(&s.stream_id).flatten();
            if head.as_ref().is_some_and(|h| h.tenant != request.tenant_id) {
                return Err(AppendError::TenantMismatch { stream: s.stream_id.clone() });
            }
            let current = head.as_ref().map_or(0, |h| h.version);
            if !s.expected.admits(current) {
                return Err(AppendError::Conflict {
                    stream: s.stream_id.clone(),
                    expected: s.expected,
                    actual: Some(current),
                });
            }
            let (mut version, mut prev) = (current, head.map_or(GENESIS, |h| h.hash));
            for e in &s.events {
                version += 1;
                let hash = Hashed::of_new(&s.stream_id, version, e, &request.tenant_id, recorded_at).hash(&prev);
                cols.push(&request.tenant_id, &s.stream_id, version, e, recorded_at, prev, hash);
                order.push((e.event_id, s.stream_id.clone(), version, hash));
                prev = hash;
            }
        }
        Ok((cols, order))
    }

    /// Writes `request` as one INSERT on `client` (inside a transaction or, alone, as its own).
    /// Two multi-stream appends racing on the same keys in opposite orders can deadlock;
    /// PostgreSQL aborts one, which comes back as a typed conflict.
    async fn stage(&self, client: &impl GenericClient, request: &AppendRequest) -> Result<Staged, AppendError> {
        request.validate()?;
        let heads = self.heads_for(client, request).await?;
        Ok(self.stage_guarded(client, request, heads, None).await?.expect("an unguarded append always writes"))
    }

    /// `request` chained onto `heads`, made in the same statement as `guard` (when there is one)
    /// and only when it returns a row: `Ok(None)` when it returned none, and nothing was written.
    async fn stage_guarded(
        &self,
        client: &impl GenericClient,
        request: &AppendRequest,
        heads: HashMap<StreamId, Option<Head>>,
        guard: Option<&Guard<'_>>,
    ) -> Result<Option<Staged>, AppendError> {
        let (cols, order) = Self::chain(request, heads)?;
        let (sql, params) = match guard {
            None => (insert_sql(order.len()), cols.params()),
            Some(g) => {
                let mut params = g.params.to_vec();
                params.extend(cols.params());
                (guarded_insert_sql(g, order.len()), params)
            }
        };
        let stmt = client.prepare_cached(&sql).await.map_err(unavailable)?;
        let inserted = client.query(&stmt, &params).await.map_err(|e| insert_error(&e, request))?;
        if inserted.is_empty() {
            return Ok(None);
        }
        // The insert ran (and, alone, committed): a failure to read its reply from here on
        // leaves the outcome unknown, never "not written".
        let unknown =
            |reason: String| AppendError::Indeterminate { reason, backend_pid: None, event_ids: request.event_ids() };
        // Versions ascend within a stream in request order: its last event is its new head.
        let heads = order
            .iter()
            .map(|(_, stream, version, hash)| {
                (stream.clone(), Head { version: *version, hash: *hash, tenant: request.tenant_id.clone() })
            })
            .collect();
        let mut planned: HashMap<Uuid, (StreamId, u64)> =
            order.into_iter().map(|(id, stream, version, _)| (id, (stream, version))).collect();
        let (mut tx_id, mut backend_pid) = (0, 0);
        let mut by_id = HashMap::new();
        for row in &inserted {
            tx_id = parse_xid(row.get(1)).map_err(|e| unknown(format!("the insert's transaction id: {e}")))?;
            backend_pid = row.get(2);
            let event_id: Uuid = row.get(3);
            let Some((stream_id, version)) = planned.remove(&event_id) else {
                return Err(unknown(format!("the insert returned event {event_id}, not asked for")));
            };
            by_id.insert(
                event_id,
                Appended { event_id, stream_id, stream_version: version, global_position: to_u64(row.get(0)) },
            );
        }
        let event_ids = request.event_ids();
        let events: Vec<Appended> = event_ids.iter().filter_map(|id| by_id.remove(id)).collect();
        if events.len() != event_ids.len() {
            return Err(unknown("the insert returned fewer events than it was given".into()));
        }
        Ok(Some(Staged { tx_id, events, backend_pid, event_ids, heads }))
    }

    /// Appends `request` in one statement with `guard`, only when the guard returns a row, with
    /// no BEGIN or COMMIT: a conditional `UPDATE` and the event it allows commit together or
    /// not at all. `Ok(None)`: the guard returned no row, nothing was written. Each stream's head
    /// must be known to the store (noted with [`PgStore::note_head`] or cached from its own
    /// appends) at the expected version: otherwise, or when the stream moved since, it is a
    /// conflict, and nothing was written either.
    pub async fn append_guarded(
        &self,
        request: &AppendRequest,
        guard: Guard<'_>,
    ) -> Result<Option<AppendOutcome>, AppendError> {
        request.validate()?;
        // Refused before taking a connection when a head is not known.
        let heads = self.known_heads(request)?;
        let client = self.pool.get().await.map_err(unavailable)?;
        let result = self.alone(&client, request, self.stage_guarded(&client, request, heads, Some(&guard))).await;
        let staged = match result {
            Ok(staged) => staged,
            Err(e) => {
                if connection_suspect(&e) {
                    discard(client);
                }
                self.forget(request);
                match e {
                    lost @ AppendError::Indeterminate { .. } => {
                        return self.settled_alone(lost, request).await.map(Some);
                    }
                    other => return Err(other),
                }
            }
        };
        Ok(staged.map(|staged| {
            self.committed(&staged);
            AppendOutcome { tx_id: staged.tx_id, events: staged.events, replayed: false }
        }))
    }

    /// Runs `staging` (one statement on `client`) as a statement of its own, which commits it.
    /// The server process's id rides ahead in the same round trip, so a reply lost with the
    /// connection can be settled.
    async fn alone<T>(
        &self,
        client: &deadpool_postgres::Client,
        request: &AppendRequest,
        staging: impl Future<Output = Result<T, AppendError>>,
    ) -> Result<T, AppendError> {
        let pid = client.prepare_cached("SELECT pg_backend_pid()").await.map_err(unavailable)?;
        let (pid, staged) = tokio::join!(client.query_one(&pid, &[]), staging);
        match staged {
            Err(AppendError::Indeterminate { reason, .. }) => Err(AppendError::Indeterminate {
                reason,
                backend_pid: pid.ok().map(|r| r.get(0)),
                event_ids: request.event_ids(),
            }),
            other => other,
        }
    }

    /// Records a committed append's heads and wakes readers.
    fn committed(&self, staged: &Staged) {
        for (stream, head) in &staged.heads {
            self.remember(stream.clone(), head.clone());
        }
        self.wake();
    }

    /// Wakes this process's readers and, through the notifier, other processes'.
    fn wake(&self) {
        self.local.send_modify(|n| *n += 1);
        self.wake.send_modify(|n| *n += 1);
    }

    /// After a one-statement append whose reply was lost: settles it, and when it is stored
    /// reads back where it landed and wakes readers as any commit does.
    async fn settled_alone(&self, lost: AppendError, request: &AppendRequest) -> Result<AppendOutcome, AppendError> {
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
}

/// What a [`PgStore::transaction`] decided and, when it appended, where that reached.
#[derive(Debug)]
pub struct Done<T> {
    pub value: T,
    pub outcome: Option<AppendOutcome>,
}

/// One transaction run by [`PgStore::transaction`].
#[derive(Debug)]
pub struct Tx<'a> {
    tx: Transaction<'a>,
    store: &'a PgStore,
    staged: Vec<Staged>,
    /// An append failed: PostgreSQL would turn the COMMIT into a silent rollback, so the
    /// transaction is never committed even if the body swallowed the error.
    failed: bool,
}

impl<'a> Tx<'a> {
    /// The transaction, for the caller's own reads and its inline projection's writes.
    pub fn sql(&self) -> &Transaction<'a> {
        &self.tx
    }

    /// Appends `request` in this transaction. Others see it once the transaction commits.
    pub async fn append(&mut self, request: &AppendRequest) -> Result<AppendOutcome, AppendError> {
        let staged = match self.store.stage(&self.tx, request).await {
            Ok(staged) => staged,
            Err(e) => {
                self.failed = true;
                return Err(match e {
                    // Inside a transaction nothing commits until COMMIT: a lost session stored
                    // nothing.
                    AppendError::Indeterminate { reason, .. } => AppendError::Unavailable(reason),
                    other => other,
                });
            }
        };
        let outcome = AppendOutcome { tx_id: staged.tx_id, events: staged.events.clone(), replayed: false };
        self.staged.push(staged);
        Ok(outcome)
    }

    /// A stream's head the caller read from stored events in this transaction (its row lock
    /// holding the stream still): the append then skips reading it again.
    pub fn note_head(&self, stream: StreamId, version: u64, hash: [u8; 32], tenant: TenantId) {
        self.store.note_head(stream, version, hash, tenant);
    }

    /// The server process running this transaction, once it has appended (fault tests).
    pub fn backend_pid(&self) -> Option<i32> {
        self.staged.first().map(|s| s.backend_pid)
    }
}

/// How many commits that lost their connection were settled each way (operators and tests).
#[derive(Debug, Default)]
pub struct SettleCounts {
    pub stored: AtomicU64,
    pub not_stored: AtomicU64,
}

fn head_from_row(row: &Row) -> Result<Option<Head>, String> {
    let version: Option<i64> = row.get(1);
    let Some(version) = version else { return Ok(None) };
    let hash: Vec<u8> = row.get(2);
    let tenant: String = row.get(3);
    Ok(Some(Head {
        version: to_u64(version),
        hash: <[u8; 32]>::try_from(hash.as_slice()).map_err(|_| "stored hash is not 32 bytes".to_owned())?,
        tenant: TenantId::new(tenant).map_err(|e| e.to_string())?,
    }))
}

/// The least time between two NOTIFYs: each takes PostgreSQL's global notify lock at commit, and
/// a wake-up hint needs no finer grain.
const NOTIFY_EVERY: Duration = Duration::from_millis(50);

/// Announces local commits to other processes: at most one NOTIFY per `NOTIFY_EVERY`, covering
/// every commit made since the previous one.
async fn notify_on_commit(pool: Pool, mut local: watch::Receiver<u64>) {
    while local.changed().await.is_ok() {
        if let Ok(client) = pool.get().await {
            // A lost hint costs a reader one poll interval, never an event.
            let _ = client.batch_execute(&format!("NOTIFY {WAKE_CHANNEL}")).await;
        }
        tokio::time::sleep(NOTIFY_EVERY).await;
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

/// A written but uncommitted append.
#[derive(Debug)]
struct Staged {
    tx_id: u64,
    events: Vec<Appended>,
    backend_pid: i32,
    event_ids: Vec<Uuid>,
    heads: HashMap<StreamId, Head>,
}

impl Staged {
    /// Maps a COMMIT failure. A server error that refused the commit (a deferred constraint, a
    /// serialisation failure) is determinate; a lost connection, or a server error that ends the
    /// session (FATAL, operator intervention, connection exception), is not: the commit may
    /// have been recorded before the session ended.
    fn commit_error(&self, e: &tokio_postgres::Error) -> AppendError {
        if !session_ended(e) {
            unavailable(e)
        } else {
            AppendError::Indeterminate {
                reason: chain(e),
                backend_pid: Some(self.backend_pid),
                event_ids: self.event_ids.clone(),
            }
        }
    }
}

/// An append failure after which the connection may be dead: kept out of the pool. A conflict or
/// a refused input leaves it healthy, and reconnecting is far dearer than reusing it.
fn connection_suspect(e: &AppendError) -> bool {
    matches!(e, AppendError::Unavailable(_) | AppendError::Indeterminate { .. })
}

/// A lost connection, or a server error that ends the session (FATAL, operator intervention
/// `57P…`, connection exception `08…`): what the statement did may have been committed before
/// it ended. A cancelled statement (`57014`) was not, and its session lives on.
fn session_ended(e: &tokio_postgres::Error) -> bool {
    match e.as_db_error() {
        Some(db) => {
            let code = db.code().code();
            matches!(
                db.parsed_severity(),
                Some(tokio_postgres::error::Severity::Fatal | tokio_postgres::error::Severity::Panic)
            ) || code.starts_with("57P")
                || code.starts_with("08")
        }
        // Without a server error the client cannot always tell a lost connection from a local
        // failure: taken as possibly committed, which costs a settle, never a wrong answer.
        None => true,
    }
}

/// One event's INSERT parameters, owned so the statement can borrow them.
struct InsertRow {
    event_id: Uuid,
    stream_id: String,
    stream_version: i64,
    event_type: String,
    schema_version: i32,
    tenant_id: String,
    payload: Value,
    metadata: Value,
    recorded_at: OffsetDateTime,
    prev_hash: Vec<u8>,
    hash: Vec<u8>,
}

#[derive(Default)]
struct InsertColumns(Vec<InsertRow>);

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
        self.0.push(InsertRow {
            event_id: e.event_id,
            stream_id: stream.as_str().to_owned(),
            stream_version: i64::try_from(version).unwrap_or(i64::MAX),
            event_type: e.event_type.clone(),
            schema_version: i32::try_from(e.schema_version).unwrap_or(i32::MAX),
            tenant_id: tenant.as_str().to_owned(),
            payload: e.payload.clone(),
            metadata: serde_json::to_value(&e.metadata).expect("metadata always serialises"),
            recorded_at,
            prev_hash: prev.to_vec(),
            hash: hash.to_vec(),
        });
    }

    fn params(&self) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            Vec::with_capacity(self.0.len() * INSERT_COLUMNS);
        for r in &self.0 {
            params.extend([
                &r.event_id as &(dyn tokio_postgres::types::ToSql + Sync),
                &r.stream_id,
                &r.stream_version,
                &r.event_type,
                &r.schema_version,
                &r.tenant_id,
                &r.payload,
                &r.metadata,
                &r.recorded_at,
                &r.prev_hash,
                &r.hash,
            ]);
        }
        params
    }
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

impl PgStore {
    /// A conflict found by the unique key does not know the stream's version; read it.
    async fn with_actual_version(&self, e: AppendError) -> AppendError {
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
    use crate::NewEvent;

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
