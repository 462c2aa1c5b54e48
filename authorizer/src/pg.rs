//! The authority's PostgreSQL edge: events appended with the inline `active_task_grants`
//! projection updated in the same transaction, and the atomic use of a task grant.
//!
//! A use is one READ COMMITTED transaction: a conditional `UPDATE … WHERE actions_used < 200
//! AND chars_used + n <= 4096 AND expires_at > now … RETURNING` that concurrent requests queue
//! on, then the `tool.call.authorized` event appended to the grant's stream. No retry loop: a
//! request that finds the row spent gets no row and goes to the approval card. Dispatch may
//! happen only after `consume` returns `Allowed`, which it does only once the commit is known.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::Transaction;
use ledger::catalogue::{EndReason, Event, TaskGrantCreated};
use ledger::{AppendError, AppendOutcome, AppendRequest, ExpectedVersion, Metadata, PgStore, StreamAppend, TenantId};
use time::OffsetDateTime;
use tokio_postgres::IsolationLevel;
use uuid::Uuid;

use crate::domain::stream_of;
use crate::limits::{MAX_ACTIONS, MAX_TYPED_CHARS};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Append(#[from] AppendError),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The inline projection refused the change: a grant ended twice, a second active grant.
    #[error("inline projection refused: {0}")]
    Projection(String),
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

/// The answer to a use request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Consumed {
    /// Committed: the action may be dispatched. `ordinal` is 1..=200.
    Allowed { ordinal: u32, outcome: AppendOutcome },
    /// The grant is spent, expired, ended, or the text does not fit: ask the owner.
    Refused,
}

/// How many indeterminate commits were settled each way (for operators and tests).
#[derive(Debug, Default)]
pub struct SettleCounts {
    pub stored: AtomicU64,
    pub not_stored: AtomicU64,
}

#[derive(Debug, Clone)]
pub struct PgGrants {
    store: PgStore,
    settle_patience: Duration,
    settled: Arc<SettleCounts>,
}

impl PgGrants {
    pub fn new(store: PgStore) -> Self {
        Self { store, settle_patience: Duration::from_secs(10), settled: Arc::default() }
    }

    pub fn store(&self) -> &PgStore {
        &self.store
    }

    pub fn settled(&self) -> &SettleCounts {
        &self.settled
    }

    /// Appends domain events (grouped by stream, in order) and applies them to the inline
    /// projection, all in one transaction.
    pub async fn commit(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        events: &[Event],
    ) -> Result<AppendOutcome, StoreError> {
        let request = to_append(tenant, metadata, events);
        let mut client = self.store.pool().get().await.map_err(unavailable)?;
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start()
            .await
            .map_err(unavailable)?;
        for e in events {
            apply_inline(&tx, e).await?;
        }
        let staged = self.store.append_within(&tx, &request).await?;
        if let Err(e) = tx.commit().await {
            ledger::postgres::discard(client);
            return self.settle(staged.commit_error(&e)).await.map(|()| self.outcome(&staged));
        }
        self.store.committed(&staged);
        Ok(self.outcome(&staged))
    }

    fn outcome(&self, staged: &ledger::postgres::Staged) -> AppendOutcome {
        AppendOutcome { tx_id: staged.tx_id, events: staged.events.clone(), replayed: false }
    }

    /// Resolves an indeterminate commit by its event ids: `Ok(())` when it is stored.
    async fn settle(&self, error: AppendError) -> Result<(), StoreError> {
        let AppendError::Indeterminate { backend_pid, event_ids, .. } = &error else { return Err(error.into()) };
        match self.store.settle(*backend_pid, event_ids, self.settle_patience).await {
            Ok(true) => {
                self.settled.stored.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            // Certainly not stored: report the failure as determinate.
            Ok(false) => {
                self.settled.not_stored.fetch_add(1, Ordering::Relaxed);
                Err(StoreError::Unavailable(format!("commit lost with its connection and not stored: {error}")))
            }
            Err(_) => Err(error.into()),
        }
    }

    /// Consumes one use and `typed_chars` of grant `grant_id`, and records `use_event(ordinal)`,
    /// atomically. Never refunded.
    pub async fn consume(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        grant_id: Uuid,
        typed_chars: u32,
        now: OffsetDateTime,
        use_event: impl FnOnce(u32) -> Event,
    ) -> Result<Consumed, StoreError> {
        if typed_chars > MAX_TYPED_CHARS {
            return Ok(Consumed::Refused);
        }
        let chars = i32::try_from(typed_chars).unwrap_or(i32::MAX);
        let max_actions = i32::try_from(MAX_ACTIONS).unwrap_or(i32::MAX);
        let max_chars = i32::try_from(MAX_TYPED_CHARS).unwrap_or(i32::MAX);
        let mut client = self.store.pool().get().await.map_err(unavailable)?;
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start()
            .await
            .map_err(unavailable)?;
        let stmt = tx
            .prepare_cached(
                "UPDATE active_task_grants SET actions_used = actions_used + 1, chars_used = chars_used + $2 \
                 WHERE grant_id = $1 AND ended_at IS NULL AND actions_used < $4 AND chars_used + $2 <= $5 \
                   AND expires_at > $3 AND tenant_id = $6 \
                 RETURNING actions_used",
            )
            .await
            .map_err(unavailable)?;
        let row = tx
            .query_opt(&stmt, &[&grant_id, &chars, &now, &max_actions, &max_chars, &tenant.as_str()])
            .await
            .map_err(unavailable)?;
        let Some(row) = row else {
            return Ok(Consumed::Refused);
        };
        let ordinal = u32::try_from(row.get::<_, i32>(0)).map_err(unavailable)?;
        let event = use_event(ordinal);
        // A grant's stream is [created, use 1..n, ended?]: uses stop once the row is ended, and
        // the row lock orders them, so use n lands at version n + 1. Saying so lets the store
        // skip reading the stream's head.
        let request = AppendRequest::single(
            tenant.clone(),
            stream_of(&event),
            ExpectedVersion::At(u64::from(ordinal)),
            vec![event.to_new(Uuid::new_v4(), metadata.clone())],
        );
        let staged = self.store.append_within(&tx, &request).await?;
        if let Err(e) = tx.commit().await {
            ledger::postgres::discard(client);
            self.settle(staged.commit_error(&e)).await?;
            return Ok(Consumed::Allowed { ordinal, outcome: self.outcome(&staged) });
        }
        self.store.committed(&staged);
        Ok(Consumed::Allowed { ordinal, outcome: self.outcome(&staged) })
    }

    /// The inline row of a grant: (actions_used, chars_used, end_reason).
    pub async fn usage(&self, grant_id: Uuid) -> Result<Option<(u32, u32, Option<String>)>, StoreError> {
        let client = self.store.pool().get().await.map_err(unavailable)?;
        let row = client
            .query_opt(
                "SELECT actions_used, chars_used, end_reason FROM active_task_grants WHERE grant_id = $1",
                &[&grant_id],
            )
            .await
            .map_err(unavailable)?;
        Ok(row.map(|r| {
            let n = |i: usize| u32::try_from(r.get::<_, i32>(i)).unwrap_or(0);
            (n(0), n(1), r.get(2))
        }))
    }
}

/// Domain events as one append: grouped by stream in order of first appearance, each stream
/// unchecked (`Any`), since the caller decided them against the state it holds.
pub fn to_append(tenant: &TenantId, metadata: &Metadata, events: &[Event]) -> AppendRequest {
    let mut streams: Vec<StreamAppend> = Vec::new();
    for e in events {
        let stream = stream_of(e);
        let new = e.to_new(Uuid::new_v4(), metadata.clone());
        match streams.iter_mut().find(|s| s.stream_id == stream) {
            Some(s) => s.events.push(new),
            None => streams.push(StreamAppend { stream_id: stream, expected: ExpectedVersion::Any, events: vec![new] }),
        }
    }
    AppendRequest { tenant_id: tenant.clone(), streams }
}

fn end_code(reason: EndReason) -> String {
    serde_json::to_value(reason).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// Applies one event to the inline projection inside the append's transaction.
async fn apply_inline(tx: &Transaction<'_>, event: &Event) -> Result<(), StoreError> {
    let projection = |e: tokio_postgres::Error| match e.as_db_error() {
        Some(db) => StoreError::Projection(format!("{}: {}", db.code().code(), db.message())),
        None => unavailable(e),
    };
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
            .map_err(projection)?;
        }
        Event::TaskGrantEnded(e) => {
            let n = tx
                .execute(
                    "UPDATE active_task_grants SET ended_at = now(), end_reason = $2 WHERE grant_id = $1 AND ended_at IS NULL",
                    &[&e.grant_id, &end_code(e.reason)],
                )
                .await
                .map_err(projection)?;
            if n != 1 {
                return Err(StoreError::Projection(format!(
                    "grant {} is not active: it ends exactly once",
                    e.grant_id
                )));
            }
        }
        _ => {}
    }
    Ok(())
}
