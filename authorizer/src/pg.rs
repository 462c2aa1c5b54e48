//! The authority's PostgreSQL edge: each request's read of the inline state (`state::Reader`,
//! locking what it reads when it writes), its events appended with the inline tables updated in
//! the same transaction, and the atomic use of a task grant.
//!
//! A use is one READ COMMITTED transaction: a conditional `UPDATE … WHERE actions_used < 200
//! AND chars_used + n <= 4096 AND expires_at > now … RETURNING` that concurrent requests queue
//! on, then the `tool.call.authorized` event appended to the grant's stream. No retry loop: a
//! request that finds the row spent gets no row and goes to the approval card. Dispatch may
//! happen only after `consume` returns `Allowed`, which it does only once the commit is known.

use std::sync::Arc;

use deadpool_postgres::Transaction;
use grant_domain::catalogue::{AuthorizationKind, EndReason, Event, SiteScope, TaskGrantCreated, ToolCallAuthorized};
use ledger::postgres::{Guard, SettleCounts, Tx};
use ledger::{AppendError, AppendOutcome, AppendRequest, ExpectedVersion, Metadata, PgStore, TenantId};
use time::OffsetDateTime;
use tokio_postgres::IsolationLevel;
use uuid::Uuid;

use crate::authority::{AuthorityError, Decide, Transacted};
use crate::domain::{Approval, ApprovalState, Grant, Profile, RunSnapshots, Session, World, stream_of};
use crate::limits::{MAX_ACTIONS, MAX_TYPED_CHARS};
use crate::state::{self, Approvals, Deployment, Grants, Need, Reader, Versioned, Writes};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Append(#[from] AppendError),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The inline projection refused the change: a grant ended twice, a second active grant.
    #[error("inline projection refused: {0}")]
    Projection(String),
    /// Another request changed what this one read (a deadlock or serialisation failure the
    /// server resolved by aborting this one): nothing was written; decide again.
    #[error("contended: {0}")]
    Contended(String),
    /// The request cannot be stored as it is (an id too long for a stream name).
    #[error("invalid: {0}")]
    Invalid(String),
}

impl StoreError {
    /// True when nothing was written.
    pub fn is_determinate(&self) -> bool {
        match self {
            Self::Append(e) => e.is_determinate(),
            _ => true,
        }
    }
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// A statement's failure: contention the caller may decide again after, a constraint of the
/// inline tables, or the store being unavailable.
fn db(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error().map(|d| (d.code().code(), d.message())) {
        Some(("40001" | "40P01", m)) => StoreError::Contended(m.to_owned()),
        Some((code, m)) if code.starts_with("23") => StoreError::Projection(format!("{code}: {m}")),
        _ => unavailable(e),
    }
}

/// The session a use is made in, at the version its decision read.
#[derive(Debug, Clone, Copy)]
pub struct SessionAt<'a> {
    pub session_id: &'a str,
    pub version: u64,
}

/// One use of a task grant: what it spends, and what the decision that allowed it read.
#[derive(Debug, Clone, Copy)]
pub struct UseOf<'a> {
    pub grant_id: Uuid,
    pub typed_chars: u32,
    /// The deciding replica's clock; the database's is checked as well.
    pub now: OffsetDateTime,
    /// With a session, the use holds only while the session is at the version read.
    pub session: Option<SessionAt<'a>>,
    /// The grant's `actions_used` as the decision read it: the use is first tried as the very
    /// next one, in one statement.
    pub read_used: Option<u32>,
}

/// The answer to a use request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Consumed {
    /// Committed: the action may be dispatched. `ordinal` is 1..=200.
    Allowed { ordinal: u32, outcome: AppendOutcome },
    /// The grant is spent, expired, ended, or the text does not fit: ask the owner.
    Refused,
}

#[derive(Debug, Clone)]
pub struct PgGrants {
    store: PgStore,
    /// Uses made by the one-statement path (operators and tests: the fast path is taken).
    one_statement_uses: Arc<std::sync::atomic::AtomicU64>,
    pause: Arc<PauseSlot>,
}

/// Where a test leaves a [`Pause`]; a use only takes the lock when one was left.
#[derive(Debug, Default)]
struct PauseSlot {
    set: std::sync::atomic::AtomicBool,
    pause: std::sync::Mutex<Option<Arc<Pause>>>,
}

/// A fault hook for tests: the next use stops after its decision and before its statement,
/// says so on `reached`, and goes on at `go`.
#[derive(Debug, Default)]
pub struct Pause {
    pub reached: tokio::sync::Notify,
    pub go: tokio::sync::Notify,
}

impl PgGrants {
    pub fn new(store: PgStore) -> Self {
        Self { store, one_statement_uses: Arc::default(), pause: Arc::default() }
    }

    /// Pauses the next use (once) at `pause`: how a test puts a change between a decision's
    /// read and its use.
    pub fn pause_next_use(&self, pause: Arc<Pause>) {
        *self.pause.pause.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(pause);
        self.pause.set.store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn store(&self) -> &PgStore {
        &self.store
    }

    /// How many uses this process made in one statement.
    pub fn one_statement_uses(&self) -> u64 {
        self.one_statement_uses.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn settled(&self) -> &SettleCounts {
        self.store.settled()
    }

    /// Reads what `need` names (locking it when `lock`), lets `decide` choose events from the
    /// partial world, and appends them with the inline tables written, in one transaction.
    /// Without `lock` the read is one REPEATABLE READ snapshot, and a write that another request
    /// beat comes back `Contended`.
    pub async fn transact<T: Send>(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        need: Need<'_>,
        lock: bool,
        decide: &Decide<'_, T>,
    ) -> Result<Transacted<T>, AuthorityError> {
        if let (false, Need::Authorize(session)) = (lock, need) {
            // The hot path: everything an authorization reads in one statement (one snapshot,
            // one round trip); a write it decides opens its own transaction, and a stream or
            // grant row that moved since the read comes back as a conflict.
            let client = self.store.pool().get().await.map_err(unavailable)?;
            let mut rows = Prefetched::authorize(&client, &self.store, tenant, session).await?;
            drop(client);
            let loaded = state::load(&mut rows, tenant, need).await?;
            let (events, value) = decide(&loaded.world)?;
            if events.is_empty() {
                return Ok(Transacted { value, events, at: None });
            }
            // A standing-grant allow rests on the pin as read: hold the settings at that version,
            // so an unpin committed since refuses it and one committing now waits for it.
            let standing = events.iter().any(|e| {
                matches!(e, Event::ToolCallAuthorized(t) if t.authorization_kind == AuthorizationKind::StandingGrant)
            });
            let settings_read = loaded.version(&crate::domain::deployment_stream(tenant)?);
            let done = self
                .store
                .transaction(IsolationLevel::ReadCommitted, async |tx| {
                    if standing {
                        let held = tx
                            .sql()
                            .query_opt(
                                "SELECT 1 FROM authority_settings WHERE tenant_id = $1 AND version = $2 FOR SHARE",
                                &[&tenant.as_str(), &version(settings_read)],
                            )
                            .await
                            .map_err(db)?;
                        if held.is_none() {
                            return Err(StoreError::Contended("the settings changed since the read".into()));
                        }
                    }
                    write_all(tx, tenant, &loaded, metadata, &events).await
                })
                .await?;
            return Ok(Transacted { value, events, at: done.outcome.map(|o| o.checkpoint()) });
        }
        let isolation = if lock { IsolationLevel::ReadCommitted } else { IsolationLevel::RepeatableRead };
        let done = self
            .store
            .transaction(isolation, async |tx| {
                let mut reader = PgReader { tx: tx.sql(), tenant: tenant.as_str(), lock };
                let loaded = state::load(&mut reader, tenant, need).await?;
                let (events, value) = decide(&loaded.world)?;
                if !events.is_empty() {
                    write_all(tx, tenant, &loaded, metadata, &events).await?;
                }
                Ok::<_, AuthorityError>((events, value))
            })
            .await?;
        let (events, value) = done.value;
        Ok(Transacted { value, events, at: done.outcome.map(|o| o.checkpoint()) })
    }

    /// Appends grant events as they are, each stream unchecked, and applies them to the grant
    /// rows, in one transaction: for tests and tools that write a grant's events directly. The
    /// authority itself decides through [`PgGrants::transact`].
    pub async fn commit(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        events: &[Event],
    ) -> Result<AppendOutcome, StoreError> {
        let mut request = AppendRequest { tenant_id: tenant.clone(), streams: Vec::new() };
        for e in events {
            let stream = stream_of(tenant, e)?;
            let new = e.to_new(Uuid::new_v4(), metadata.clone());
            match request.streams.iter_mut().find(|s| s.stream_id == stream) {
                Some(s) => s.events.push(new),
                None => request.streams.push(ledger::StreamAppend {
                    stream_id: stream,
                    expected: ExpectedVersion::Any,
                    events: vec![new],
                }),
            }
        }
        let done = self
            .store
            .transaction(IsolationLevel::ReadCommitted, async |tx| {
                let outcome = tx.append(&request).await?;
                for e in events {
                    apply_grant_row(tx.sql(), tenant.as_str(), e).await?;
                }
                Ok::<_, StoreError>(outcome)
            })
            .await?;
        Ok(done.value)
    }

    /// Consumes one use of `u.grant_id` and its `u.typed_chars`, and records `use_event(ordinal)`,
    /// atomically. Never refunded.
    ///
    /// First as one statement, with no BEGIN or COMMIT: the grant row updated only if it still
    /// holds the `actions_used` the decision read, and the event inserted by the same statement
    /// (`PgStore::append_guarded`). When the row moved since the read (another use came first),
    /// the use queues on the row lock in a transaction instead.
    pub async fn consume(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        u: UseOf<'_>,
        use_event: impl Fn(u32) -> Event + Send + Sync,
    ) -> Result<Consumed, StoreError> {
        let UseOf { grant_id, typed_chars, now, session, read_used } = u;
        if typed_chars > MAX_TYPED_CHARS {
            return Ok(Consumed::Refused);
        }
        let chars = i32::try_from(typed_chars).unwrap_or(i32::MAX);
        let max_actions = i32::try_from(MAX_ACTIONS).unwrap_or(i32::MAX);
        let max_chars = i32::try_from(MAX_TYPED_CHARS).unwrap_or(i32::MAX);
        let pause = if self.pause.set.swap(false, std::sync::atomic::Ordering::Acquire) {
            self.pause.pause.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
        } else {
            None
        };
        if let Some(pause) = pause {
            pause.reached.notify_one();
            pause.go.notified().await;
        }
        let (session_id, session_version) =
            session.map_or((None, None), |s| (Some(s.session_id), Some(version(s.version))));
        let stream = crate::domain::entity_stream(tenant, "grant", &grant_id)?;
        if let Some(used) = read_used.filter(|&n| n < MAX_ACTIONS) {
            let ordinal = used + 1;
            let event = use_event(ordinal);
            let request = use_append(tenant, metadata, &event, ordinal)?;
            let used = i32::try_from(used).unwrap_or(i32::MAX);
            let t = tenant.as_str();
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                vec![&grant_id, &chars, &now, &used, &max_chars, &t, &session_id, &session_version];
            let named = named_snapshot(&event);
            if let Some((session, run, snapshot)) = &named {
                params.extend([*session as &(dyn tokio_postgres::types::ToSql + Sync), *run, *snapshot]);
            }
            let guard = Guard { sql: CONSUME_NEXT, then: named.map(|_| NAME_SNAPSHOT_APPENDED), params: &params };
            match self.store.append_guarded(&request, guard).await {
                Ok(Some(outcome)) => {
                    self.one_statement_uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Ok(Consumed::Allowed { ordinal, outcome });
                }
                // The row or the stream moved since the read, or the use no longer fits.
                Ok(None) | Err(AppendError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Expiry by both clocks: the deciding replica's and the database's, so a replica whose
        // clock runs slow cannot stretch a grant. With the session named, the use also holds its
        // row (FOR SHARE) at the version the decision read: a message or tool call recorded
        // since then refuses the use, and one recorded after waits for it.
        // The grant stream's head comes back from the same statement: when it is the version
        // this use follows, the append need not read it again.
        let done = self
            .store
            .transaction(IsolationLevel::ReadCommitted, async |tx| {
                let stmt = tx.sql().prepare_cached(CONSUME).await.map_err(db)?;
                let row = tx
                    .sql()
                    .query_opt(
                        &stmt,
                        &[
                            &grant_id,
                            &chars,
                            &now,
                            &max_actions,
                            &max_chars,
                            &tenant.as_str(),
                            &session_id,
                            &session_version,
                            &stream.as_str(),
                        ],
                    )
                    .await
                    .map_err(db)?;
                let Some(row) = row else {
                    return Ok(None);
                };
                let used = row.get::<_, i32>(0);
                let head = (row.get::<_, Option<i64>>(1), row.get::<_, Option<Vec<u8>>>(2));
                if let (Some(version), Some(hash)) = head
                    && let Ok(hash) = <[u8; 32]>::try_from(hash)
                    && i64::from(used) == version
                {
                    tx.note_head(stream.clone(), from_version(version), hash, tenant.clone());
                }
                let ordinal = u32::try_from(used).map_err(unavailable)?;
                let event = use_event(ordinal);
                let outcome = tx.append(&use_append(tenant, metadata, &event, ordinal)?).await?;
                if let (Some((session, run, snapshot)), Some(a)) = (named_snapshot(&event), outcome.events.first()) {
                    let at = (outcome.tx_id, a.global_position);
                    name_snapshot(tx.sql(), tenant.as_str(), session, run, snapshot, at).await?;
                }
                Ok::<_, StoreError>(Some(ordinal))
            })
            .await?;
        match (done.value, done.outcome) {
            (Some(ordinal), Some(outcome)) => Ok(Consumed::Allowed { ordinal, outcome }),
            _ => Ok(Consumed::Refused),
        }
    }

    /// The inline row of a grant: (actions_used, chars_used, end_reason).
    pub async fn usage(
        &self,
        tenant: &TenantId,
        grant_id: Uuid,
    ) -> Result<Option<(u32, u32, Option<String>)>, StoreError> {
        let client = self.store.pool().get().await.map_err(unavailable)?;
        let row = client
            .query_opt(
                "SELECT actions_used, chars_used, end_reason FROM active_task_grants \
                 WHERE tenant_id = $1 AND grant_id = $2",
                &[&tenant.as_str(), &grant_id],
            )
            .await
            .map_err(unavailable)?;
        Ok(row.map(|r| {
            let n = |i: usize| u32::try_from(r.get::<_, i32>(i)).unwrap_or(0);
            (n(0), n(1), r.get(2))
        }))
    }

    /// A tenant's whole inline state as one world (verify and tests).
    pub async fn dump(&self, tenant: &TenantId) -> Result<World, StoreError> {
        let mut client = self.store.pool().get().await.map_err(unavailable)?;
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(unavailable)?;
        let t = tenant.as_str();
        let mut world = World::default();
        for r in tx.query("SELECT state FROM authority_sessions WHERE tenant_id = $1", &[&t]).await.map_err(db)? {
            let s: Session = json(r.get(0))?;
            world.sessions.insert(s.created.session_id.clone(), s);
        }
        for r in tx
            .query("SELECT profile_id, state FROM authority_profiles WHERE tenant_id = $1 AND version > 0", &[&t])
            .await
            .map_err(db)?
        {
            world.profiles.insert(r.get(0), json(r.get(1))?);
        }
        for r in tx.query("SELECT state FROM authority_approvals WHERE tenant_id = $1", &[&t]).await.map_err(db)? {
            let a: Approval = json(r.get(0))?;
            world.approvals.insert(a.requested.approval_id, a);
        }
        let sql = format!("SELECT {GRANT_COLUMNS} FROM active_task_grants WHERE tenant_id = $1");
        for r in tx.query(&sql, &[&t]).await.map_err(db)? {
            let g = grant_from_row(&r)?;
            world.grants.insert(g.created.grant_id, g);
        }
        let deployment = tx
            .query_opt("SELECT state FROM authority_settings WHERE tenant_id = $1 AND version > 0", &[&t])
            .await
            .map_err(db)?;
        if let Some(r) = deployment {
            let d: Deployment = json(r.get(0))?;
            world.settings = d.settings;
            world.standing = d.standing;
            world.policy = d.policy;
        }
        let runs = tx
            .query("SELECT session_id, run_id, snapshot_id FROM run_snapshots WHERE tenant_id = $1 ORDER BY tx_id, position", &[&t])
            .await
            .map_err(db)?;
        for r in runs {
            let snapshots: &mut RunSnapshots = world.run_snapshots.entry((r.get(0), r.get(1))).or_default();
            snapshots.named(r.get(2));
        }
        for g in world.grants.values().filter(|g| g.is_active()) {
            if let Some(s) = world.sessions.get_mut(&g.created.session_id) {
                s.active_grant = Some(g.created.grant_id);
            }
        }
        Ok(world)
    }

    /// Tenants with a grant past its expiry or a pending approval past its own.
    pub async fn due_tenants(&self, now: OffsetDateTime) -> Result<Vec<TenantId>, StoreError> {
        let client = self.store.pool().get().await.map_err(unavailable)?;
        let rows = client
            .query(
                "SELECT tenant_id FROM active_task_grants WHERE ended_at IS NULL AND expires_at <= $1 \
                 UNION SELECT tenant_id FROM authority_approvals WHERE pending_until <= $1",
                &[&now],
            )
            .await
            .map_err(db)?;
        rows.iter().map(|r| TenantId::new(r.get::<_, String>(0)).map_err(|e| StoreError::Invalid(e.reason))).collect()
    }
}

fn json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, StoreError> {
    serde_json::from_value(value).map_err(|e| StoreError::Projection(format!("inline state unreadable: {e}")))
}

fn to_json(value: &impl serde::Serialize) -> Result<serde_json::Value, StoreError> {
    serde_json::to_value(value).map_err(|e| StoreError::Invalid(e.to_string()))
}

fn version(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn from_version(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

const GRANT_COLUMNS: &str = "grant_id, approval_id, tenant_id, principal_id, session_id, profile_id, \
     profile_generation, agent_version, policy_version, origin, path_prefix, created_at, expires_at, \
     actions_used, chars_used, end_reason";

fn grant_from_row(r: &tokio_postgres::Row) -> Result<Grant, StoreError> {
    grant_at(r, 0)
}

/// A grant from the row's columns `at..at + 16`, in [`GRANT_COLUMNS`] order.
fn grant_at(r: &tokio_postgres::Row, at: usize) -> Result<Grant, StoreError> {
    let n = |i: usize| u32::try_from(r.get::<_, i32>(at + i)).unwrap_or(0);
    let ended = r
        .get::<_, Option<String>>(at + 15)
        .map(|code| json::<EndReason>(serde_json::Value::String(code)))
        .transpose()?;
    Ok(Grant {
        created: TaskGrantCreated {
            grant_id: r.get(at),
            approval_id: r.get(at + 1),
            tenant_id: r.get(at + 2),
            principal_id: r.get(at + 3),
            session_id: r.get(at + 4),
            profile_id: r.get(at + 5),
            profile_generation: from_version(r.get(at + 6)),
            agent_version: r.get(at + 7),
            policy_version: r.get(at + 8),
            scope: SiteScope { origin: r.get(at + 9), path_prefix: r.get(at + 10) },
            created_at: r.get(at + 11),
            expires_at: r.get(at + 12),
            max_actions: MAX_ACTIONS,
            max_typed_chars: MAX_TYPED_CHARS,
        },
        actions_used: n(13),
        chars_used: n(14),
        ended,
    })
}

/// What an authorization reads, fetched in one statement, served to `state::load`. Anything
/// else asked of it is an error, never an empty answer.
#[derive(Debug, Default)]
struct Prefetched {
    session: Option<Versioned<Session>>,
    profiles: Vec<(String, Versioned<Profile>)>,
    deployment: Option<Versioned<Deployment>>,
    grant: Option<Grant>,
}

/// Everything an authorization reads, in one statement: built once, since it is on every call.
/// The active grant's stream head comes along, so its next use can be appended without reading
/// it (see `PgGrants::consume`).
static AUTHORIZE_READ: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let grant_columns: Vec<String> = GRANT_COLUMNS.split(',').map(|c| format!("g.{}", c.trim())).collect();
    format!(
        "SELECT s.version, s.state, d.version, d.state, ps.profile_id, ps.version, ps.state, \
         gp.profile_id, gp.version, gp.state, {}, gh.stream_version, gh.hash, gh.tenant_id \
         FROM (VALUES (1)) AS one(x) \
         LEFT JOIN authority_sessions s ON s.tenant_id = $1 AND s.session_id = $2 \
         LEFT JOIN authority_settings d ON d.tenant_id = $1 AND d.version > 0 \
         LEFT JOIN active_task_grants g ON g.tenant_id = $1 AND g.session_id = $2 AND g.ended_at IS NULL \
         LEFT JOIN LATERAL (SELECT e.stream_version, e.hash, e.tenant_id FROM events e \
           WHERE e.stream_id = 'grant-' || $1 || '.' || g.grant_id::text \
           ORDER BY e.stream_version DESC LIMIT 1) gh ON true \
         LEFT JOIN authority_profiles ps ON ps.tenant_id = $1 AND ps.version > 0 \
           AND ps.profile_id = s.state->'created'->>'browser_profile_id' \
         LEFT JOIN authority_profiles gp ON gp.tenant_id = $1 AND gp.version > 0 AND gp.profile_id = g.profile_id",
        grant_columns.join(", ")
    )
});

impl Prefetched {
    async fn authorize(
        client: &deadpool_postgres::Object,
        store: &PgStore,
        tenant: &TenantId,
        session: &str,
    ) -> Result<Self, StoreError> {
        let stmt = client.prepare_cached(&AUTHORIZE_READ).await.map_err(db)?;
        let r = client.query_one(&stmt, &[&tenant.as_str(), &session]).await.map_err(db)?;
        let versioned = |v: usize| -> Result<Option<(u64, serde_json::Value)>, StoreError> {
            Ok(r.get::<_, Option<i64>>(v).map(|version| (from_version(version), r.get(v + 1))))
        };
        let mut out = Self::default();
        if let Some((version, state)) = versioned(0)? {
            out.session = Some(Versioned { value: json(state)?, version });
        }
        if let Some((version, state)) = versioned(2)? {
            out.deployment = Some(Versioned { value: json(state)?, version });
        }
        for at in [4, 7] {
            if let Some(id) = r.get::<_, Option<String>>(at) {
                let (version, state) = versioned(at + 1)?.unwrap_or_default();
                out.profiles.push((id, Versioned { value: json(state)?, version }));
            }
        }
        if r.get::<_, Option<Uuid>>(10).is_some() {
            let grant = grant_at(&r, 10)?;
            let head = (r.get::<_, Option<i64>>(26), r.get::<_, Option<Vec<u8>>>(27), r.get::<_, Option<&str>>(28));
            // A stream of [created, use 1..n] is at version n + 1; anything else is not noted.
            if let (Some(v), Some(hash), Some(of)) = head
                && let Ok(hash) = <[u8; 32]>::try_from(hash)
                && of == tenant.as_str()
                && from_version(v) == u64::from(grant.actions_used) + 1
            {
                let stream = crate::domain::entity_stream(tenant, "grant", &grant.created.grant_id)?;
                store.note_head(stream, from_version(v), hash, tenant.clone());
            }
            out.grant = Some(grant);
        }
        Ok(out)
    }

    fn not_fetched(what: &str) -> StoreError {
        StoreError::Projection(format!("an authorization read {what}, which its one statement does not fetch"))
    }
}

impl Reader for Prefetched {
    async fn sessions(&mut self, ids: &[&str]) -> Result<Vec<Versioned<Session>>, StoreError> {
        Ok(self.session.iter().filter(|s| ids.contains(&s.value.created.session_id.as_str())).cloned().collect())
    }

    async fn profile(&mut self, id: &str) -> Result<Versioned<Profile>, StoreError> {
        let found = self.profiles.iter().find(|(p, _)| p == id).map(|(_, v)| v.clone());
        Ok(found.unwrap_or(Versioned { value: Profile::default(), version: 0 }))
    }

    async fn deployment(&mut self) -> Result<Versioned<Deployment>, StoreError> {
        Ok(self.deployment.clone().unwrap_or(Versioned { value: Deployment::default(), version: 0 }))
    }

    async fn approvals(&mut self, _: Approvals<'_>) -> Result<Vec<Versioned<Approval>>, StoreError> {
        Err(Self::not_fetched("approvals"))
    }

    async fn grants(&mut self, which: Grants<'_>) -> Result<Vec<Grant>, StoreError> {
        match which {
            Grants::ActiveOfSession(s) => {
                Ok(self.grant.iter().filter(|g| g.created.session_id == s).cloned().collect())
            }
            _ => Err(Self::not_fetched("grants other than the session's active one")),
        }
    }

    async fn run(&mut self, _: &str, _: &str) -> Result<RunSnapshots, StoreError> {
        Err(Self::not_fetched("a run's snapshots"))
    }
}

/// One request's reads, inside its transaction; `FOR UPDATE` when the request writes, so two
/// replicas deciding on the same rows take turns.
struct PgReader<'a> {
    tx: &'a Transaction<'a>,
    tenant: &'a str,
    lock: bool,
}

impl PgReader<'_> {
    fn locking(&self) -> &'static str {
        if self.lock { " FOR UPDATE" } else { "" }
    }

    /// With `lock`, a placeholder row at version 0 is made first so that there is a row to lock
    /// even before the first event (two first sign-ins then take turns, too).
    async fn defaulted(
        &self,
        table: &str,
        key: &str,
        id: Option<&str>,
    ) -> Result<Option<(u64, serde_json::Value)>, StoreError> {
        let (cols, args): (&str, Vec<&(dyn tokio_postgres::types::ToSql + Sync)>) = match &id {
            Some(id) => (", $2", vec![&self.tenant, id]),
            None => ("", vec![&self.tenant]),
        };
        let key_cols = if id.is_some() { format!("tenant_id, {key}") } else { "tenant_id".into() };
        if self.lock {
            let sql = format!(
                "INSERT INTO {table} ({key_cols}, version, state) VALUES ($1{cols}, 0, 'null') ON CONFLICT DO NOTHING"
            );
            self.tx.execute(&sql, &args).await.map_err(db)?;
        }
        let filter = if id.is_some() { format!(" AND {key} = $2") } else { String::new() };
        let sql = format!("SELECT version, state FROM {table} WHERE tenant_id = $1{filter}{}", self.locking());
        let row = self.tx.query_opt(&sql, &args).await.map_err(db)?;
        Ok(row.map(|r| (from_version(r.get(0)), r.get(1))).filter(|(v, _)| *v > 0))
    }
}

impl Reader for PgReader<'_> {
    async fn sessions(&mut self, ids: &[&str]) -> Result<Vec<Versioned<Session>>, StoreError> {
        let sql = format!(
            "SELECT version, state FROM authority_sessions WHERE tenant_id = $1 AND session_id = ANY($2) \
             ORDER BY session_id{}",
            self.locking()
        );
        let rows = self.tx.query(&sql, &[&self.tenant, &ids]).await.map_err(db)?;
        rows.iter().map(|r| Ok(Versioned { version: from_version(r.get(0)), value: json(r.get(1))? })).collect()
    }

    async fn profile(&mut self, id: &str) -> Result<Versioned<Profile>, StoreError> {
        Ok(match self.defaulted("authority_profiles", "profile_id", Some(id)).await? {
            Some((version, state)) => Versioned { value: json(state)?, version },
            None => Versioned { value: Profile::default(), version: 0 },
        })
    }

    async fn deployment(&mut self) -> Result<Versioned<Deployment>, StoreError> {
        Ok(match self.defaulted("authority_settings", "", None).await? {
            Some((version, state)) => Versioned { value: json(state)?, version },
            None => Versioned { value: Deployment::default(), version: 0 },
        })
    }

    async fn approvals(&mut self, which: Approvals<'_>) -> Result<Vec<Versioned<Approval>>, StoreError> {
        let base = "SELECT version, state FROM authority_approvals WHERE tenant_id = $1";
        let lock = self.locking();
        let rows = match which {
            Approvals::Id(id) => {
                self.tx.query(&format!("{base} AND approval_id = $2{lock}"), &[&self.tenant, &id]).await
            }
            Approvals::Token(sha) => {
                self.tx.query(&format!("{base} AND token_sha256 = $2{lock}"), &[&self.tenant, &sha]).await
            }
            Approvals::OfSession(session) => {
                self.tx
                    .query(&format!("{base} AND session_id = $2 ORDER BY approval_id{lock}"), &[&self.tenant, &session])
                    .await
            }
            Approvals::DueBy(now) => {
                self.tx
                    .query(&format!("{base} AND pending_until <= $2 ORDER BY approval_id{lock}"), &[&self.tenant, &now])
                    .await
            }
        }
        .map_err(db)?;
        rows.iter().map(|r| Ok(Versioned { version: from_version(r.get(0)), value: json(r.get(1))? })).collect()
    }

    async fn grants(&mut self, which: Grants<'_>) -> Result<Vec<Grant>, StoreError> {
        let base = format!("SELECT {GRANT_COLUMNS} FROM active_task_grants WHERE tenant_id = $1");
        let lock = self.locking();
        let t = &self.tenant;
        let rows = match which {
            Grants::Id(id) => self.tx.query(&format!("{base} AND grant_id = $2{lock}"), &[t, &id]).await,
            Grants::ActiveOfSession(s) => {
                self.tx.query(&format!("{base} AND session_id = $2 AND ended_at IS NULL{lock}"), &[t, &s]).await
            }
            Grants::ActiveOnProfile(p) => {
                let sql = format!("{base} AND profile_id = $2 AND ended_at IS NULL ORDER BY grant_id{lock}");
                self.tx.query(&sql, &[t, &p]).await
            }
            Grants::Active => {
                self.tx.query(&format!("{base} AND ended_at IS NULL ORDER BY grant_id{lock}"), &[t]).await
            }
            Grants::DueBy(now) => {
                let sql = format!("{base} AND ended_at IS NULL AND expires_at <= $2 ORDER BY grant_id{lock}");
                self.tx.query(&sql, &[t, &now]).await
            }
            Grants::OfPrincipal(p) => self.tx.query(&format!("{base} AND principal_id = $2{lock}"), &[t, &p]).await,
        }
        .map_err(db)?;
        rows.iter().map(grant_from_row).collect()
    }

    async fn run(&mut self, session: &str, run: &str) -> Result<RunSnapshots, StoreError> {
        let rows = self
            .tx
            .query(
                "SELECT snapshot_id FROM run_snapshots WHERE tenant_id = $1 AND session_id = $2 AND run_id = $3 \
                 ORDER BY tx_id, position",
                &[&self.tenant, &session, &run],
            )
            .await
            .map_err(db)?;
        let mut snapshots = RunSnapshots::default();
        for r in &rows {
            snapshots.named(r.get(0));
        }
        Ok(snapshots)
    }
}

/// The append of use `ordinal`. A grant's stream is [created, use 1..n, ended?]: uses stop once
/// the row is ended, and the row orders them, so use n lands at version n + 1; saying so lets
/// the store skip reading the stream's head.
pub fn use_append(
    tenant: &TenantId,
    metadata: &Metadata,
    event: &Event,
    ordinal: u32,
) -> Result<AppendRequest, StoreError> {
    Ok(AppendRequest::single(
        tenant.clone(),
        stream_of(tenant, event)?,
        ExpectedVersion::At(u64::from(ordinal)),
        vec![event.to_new(state::decision_event_id(event, metadata).unwrap_or_else(Uuid::new_v4), metadata.clone())],
    ))
}

/// The (session, run, snapshot) a use event names, whose snapshot row the use writes.
fn named_snapshot(event: &Event) -> Option<(&String, &String, &String)> {
    match event {
        Event::ToolCallAuthorized(ToolCallAuthorized { session_id, run_id, snapshot_id: Some(s), .. }) => {
            Some((session_id, run_id, s))
        }
        _ => None,
    }
}

/// A use: the conditional `UPDATE` of the grant row (holding the session row at the version the
/// decision read), returning the grant stream's head.
const CONSUME: &str = "WITH held AS (SELECT 1 FROM authority_sessions WHERE tenant_id = $6 AND session_id = $7 \
       AND version = $8 FOR SHARE), \
     used AS (UPDATE active_task_grants SET actions_used = actions_used + 1, chars_used = chars_used + $2 \
       WHERE tenant_id = $6 AND grant_id = $1 AND ended_at IS NULL AND actions_used < $4 \
       AND chars_used + $2 <= $5 AND expires_at > $3 AND expires_at > statement_timestamp() \
       AND ($7::text IS NULL OR EXISTS (SELECT 1 FROM held)) \
       RETURNING actions_used) \
     SELECT used.actions_used, head.stream_version, head.hash FROM used LEFT JOIN LATERAL \
       (SELECT e.stream_version, e.hash FROM events e WHERE e.stream_id = $9 \
        ORDER BY e.stream_version DESC LIMIT 1) head ON true";

/// The one-statement use: the grant row updated only while it holds the `actions_used` the
/// decision read (`$4`) and the use fits, the session row held at the version read. A row
/// another use holds locked is skipped, not waited for: that use will move it, so this one
/// goes straight to the queue of the transactional use rather than queueing twice.
const CONSUME_NEXT: &str = "WITH held AS (SELECT 1 FROM authority_sessions WHERE tenant_id = $6 AND session_id = $7 \
       AND version = $8 FOR SHARE), \
     free AS (SELECT grant_id FROM active_task_grants WHERE tenant_id = $6 AND grant_id = $1 \
       AND actions_used = $4 FOR UPDATE SKIP LOCKED) \
     UPDATE active_task_grants SET actions_used = actions_used + 1, chars_used = chars_used + $2 \
       WHERE tenant_id = $6 AND grant_id = $1 AND grant_id IN (SELECT grant_id FROM free) \
       AND ended_at IS NULL AND actions_used = $4 \
       AND chars_used + $2 <= $5 AND expires_at > $3 AND expires_at > statement_timestamp() \
       AND ($7::text IS NULL OR EXISTS (SELECT 1 FROM held)) \
     RETURNING actions_used";

/// [`name_snapshot`] for the use the same statement appended (`$9` session, `$10` run, `$11`
/// snapshot).
const NAME_SNAPSHOT_APPENDED: &str = "INSERT INTO run_snapshots AS r (tenant_id, session_id, run_id, snapshot_id, \
       tx_id, position) SELECT $6, $9, $10, $11, a.tx_id, a.global_position FROM appended a \
     ON CONFLICT (tenant_id, session_id, run_id, snapshot_id) \
     DO UPDATE SET tx_id = excluded.tx_id, position = excluded.position \
     WHERE (excluded.tx_id, excluded.position) < (r.tx_id, r.position)";

/// Appends what `events` plan and writes the inline state, inside `tx`.
async fn write_all(
    tx: &mut Tx<'_>,
    tenant: &TenantId,
    loaded: &state::Loaded,
    metadata: &Metadata,
    events: &[Event],
) -> Result<(), StoreError> {
    let plan = loaded.plan(events, metadata)?;
    // The appends first: a stream another request moved is a conflict before anything else.
    let mut appended = Vec::new();
    for append in &plan.appends {
        appended.push(tx.append(append).await?);
    }
    write(tx.sql(), tenant.as_str(), &plan.write).await?;
    for e in events {
        apply_grant_row(tx.sql(), tenant.as_str(), e).await?;
    }
    for n in &plan.write.snapshots {
        let at = appended
            .iter()
            .find_map(|o| o.events.iter().find(|a| a.event_id == n.event_id).map(|a| (o.tx_id, a.global_position)));
        let Some(at) = at else { continue };
        name_snapshot(tx.sql(), tenant.as_str(), &n.session_id, &n.run_id, &n.snapshot_id, at).await?;
    }
    Ok(())
}

/// Writes the entities an append changed.
async fn write(tx: &Transaction<'_>, tenant: &str, w: &Writes) -> Result<(), StoreError> {
    for s in &w.sessions {
        tx.execute(
            "INSERT INTO authority_sessions (tenant_id, session_id, principal_id, version, state) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, session_id) \
             DO UPDATE SET version = excluded.version, state = excluded.state",
            &[
                &tenant,
                &s.value.created.session_id,
                &s.value.created.principal_id,
                &version(s.version),
                &to_json(&s.value)?,
            ],
        )
        .await
        .map_err(db)?;
    }
    for (id, p) in &w.profiles {
        tx.execute(
            "INSERT INTO authority_profiles (tenant_id, profile_id, version, state) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant_id, profile_id) DO UPDATE SET version = excluded.version, state = excluded.state",
            &[&tenant, id, &version(p.version), &to_json(&p.value)?],
        )
        .await
        .map_err(db)?;
    }
    if let Some(d) = &w.deployment {
        tx.execute(
            "INSERT INTO authority_settings (tenant_id, version, state) VALUES ($1, $2, $3) \
             ON CONFLICT (tenant_id) DO UPDATE SET version = excluded.version, state = excluded.state",
            &[&tenant, &version(d.version), &to_json(&d.value)?],
        )
        .await
        .map_err(db)?;
    }
    for a in &w.approvals {
        let r = &a.value.requested;
        let pending_until = (a.value.state == ApprovalState::Pending).then_some(r.expires_at);
        tx.execute(
            "INSERT INTO authority_approvals (tenant_id, approval_id, session_id, version, state, token_sha256, \
             pending_until) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (tenant_id, approval_id) \
             DO UPDATE SET version = excluded.version, state = excluded.state, token_sha256 = excluded.token_sha256, \
             pending_until = excluded.pending_until",
            &[
                &tenant,
                &r.approval_id,
                &r.session_id,
                &version(a.version),
                &to_json(&a.value)?,
                &a.value.token_sha256,
                &pending_until,
            ],
        )
        .await
        .map_err(db)?;
    }
    Ok(())
}

/// Records that a run named a snapshot at a log position; named again, it keeps the earliest in
/// log order, as a replay does.
async fn name_snapshot(
    tx: &Transaction<'_>,
    tenant: &str,
    session: &str,
    run: &str,
    snapshot: &str,
    (tx_id, position): (u64, u64),
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO run_snapshots AS r (tenant_id, session_id, run_id, snapshot_id, tx_id, position) \
         VALUES ($1, $2, $3, $4, $5::text::xid8, $6) ON CONFLICT (tenant_id, session_id, run_id, snapshot_id) \
         DO UPDATE SET tx_id = excluded.tx_id, position = excluded.position \
         WHERE (excluded.tx_id, excluded.position) < (r.tx_id, r.position)",
        &[&tenant, &session, &run, &snapshot, &tx_id.to_string(), &version(position)],
    )
    .await
    .map_err(db)?;
    Ok(())
}

fn end_code(reason: EndReason) -> String {
    serde_json::to_value(reason).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// Applies a grant's creation or end to its row inside the append's transaction.
async fn apply_grant_row(tx: &Transaction<'_>, tenant: &str, event: &Event) -> Result<(), StoreError> {
    match event {
        Event::TaskGrantCreated(TaskGrantCreated {
            grant_id,
            approval_id,
            tenant_id,
            principal_id,
            session_id,
            profile_id,
            profile_generation,
            agent_version,
            policy_version,
            scope,
            created_at,
            expires_at,
            ..
        }) => {
            if tenant_id != tenant {
                return Err(StoreError::Projection(format!("grant {grant_id} names tenant {tenant_id}, not {tenant}")));
            }
            let generation = i64::try_from(*profile_generation).unwrap_or(i64::MAX);
            tx.execute(
                "INSERT INTO active_task_grants (grant_id, tenant_id, principal_id, session_id, profile_id, profile_generation, \
                 agent_version, policy_version, origin, path_prefix, approval_id, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                &[
                    grant_id,
                    tenant_id,
                    principal_id,
                    session_id,
                    profile_id,
                    &generation,
                    agent_version,
                    policy_version,
                    &scope.origin,
                    &scope.path_prefix,
                    approval_id,
                    created_at,
                    expires_at,
                ],
            )
            .await
            .map_err(db)?;
        }
        Event::TaskGrantEnded(e) => {
            let n = tx
                .execute(
                    "UPDATE active_task_grants SET ended_at = now(), end_reason = $3 \
                     WHERE tenant_id = $1 AND grant_id = $2 AND ended_at IS NULL",
                    &[&tenant, &e.grant_id, &end_code(e.reason)],
                )
                .await
                .map_err(db)?;
            if n != 1 {
                // Another request ended it after this one read it: decide again.
                return Err(StoreError::Contended(format!("grant {} already ended", e.grant_id)));
            }
        }
        _ => {}
    }
    Ok(())
}
