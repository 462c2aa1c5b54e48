//! The atomic use of a task grant: one statement when the row is as the decision read it,
//! else a READ COMMITTED transaction that queues on the row lock. Never refunded.

use grant_domain::catalogue::{Event, ToolCallAuthorized};
use ledger::postgres::Guard;
use ledger::{AppendError, AppendOutcome, Metadata, TenantId};
use tokio_postgres::IsolationLevel;

use super::convert::{db, from_version, unavailable, version};
use super::grants::PgGrants;
use super::reads::Used;
use super::write::name_snapshot;
use crate::error::StoreError;
use crate::limits::{MAX_ACTIONS, MAX_TYPED_CHARS};
use crate::state::{grant_stream_version, use_append};
use crate::store::{Consumed, UseOf};

impl PgGrants {
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
        #[cfg(feature = "testing")]
        self.paused().await;
        let (session_id, session_version) =
            session.map_or((None, None), |s| (Some(s.session_id), Some(version(s.version))));
        let stream = crate::domain::entity_stream(tenant, "grant", &grant_id)?;
        if let Some(used) = read_used.filter(|&n| n < MAX_ACTIONS) {
            let next = OneStatement { sql: &CONSUME_NEXT, then: &NAME_SNAPSHOT_APPENDED, extra: &[] };
            // None: the row or the stream moved since the read, or the use no longer fits.
            if let Some((ordinal, outcome)) =
                self.in_one_statement(tenant, metadata, &u, used, next, &use_event).await?
            {
                self.one_statement_uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.reads.used(tenant, session_id, Used { grant_id, ordinal, chars: typed_chars }, false);
                return Ok(Consumed::Allowed { ordinal, outcome });
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
                let ordinal = u32::try_from(row.get::<_, i32>(0)).map_err(unavailable)?;
                let head = (row.get::<_, Option<i64>>(1), row.get::<_, Option<Vec<u8>>>(2));
                // The head read before this use: noted when it is the grant's version before it.
                if let (Some(version), Some(hash)) = head
                    && let Ok(hash) = <[u8; 32]>::try_from(hash)
                    && from_version(version) == grant_stream_version(ordinal - 1, false)
                {
                    tx.note_head(stream.clone(), from_version(version), hash, tenant.clone());
                }
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
            (Some(ordinal), Some(outcome)) => {
                self.reads.used(tenant, session_id, Used { grant_id, ordinal, chars: typed_chars }, false);
                Ok(Consumed::Allowed { ordinal, outcome })
            }
            _ => Ok(Consumed::Refused),
        }
    }
}

/// A one-statement use's SQL: [`CONSUME_NEXT`] or a stricter form of it whose `extra` parameters
/// follow its eight, and the statement naming the run's snapshot with the three after those.
pub(super) struct OneStatement<'a> {
    pub(super) sql: &'a str,
    pub(super) then: &'a str,
    pub(super) extra: &'a [&'a (dyn tokio_postgres::types::ToSql + Sync)],
}

impl PgGrants {
    /// Use `used + 1` of `u`'s grant as one statement, with no BEGIN or COMMIT
    /// (`PgStore::append_guarded`): the grant row updated only while it holds `used`, and the
    /// event inserted by the same statement. `None`: the statement's guard found nothing, or the
    /// grant's stream moved.
    pub(super) async fn in_one_statement(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        u: &UseOf<'_>,
        used: u32,
        one: OneStatement<'_>,
        use_event: &(impl Fn(u32) -> Event + Send + Sync),
    ) -> Result<Option<(u32, AppendOutcome)>, StoreError> {
        let ordinal = used + 1;
        let event = use_event(ordinal);
        let request = use_append(tenant, metadata, &event, ordinal)?;
        let chars = i32::try_from(u.typed_chars).unwrap_or(i32::MAX);
        let max_chars = i32::try_from(MAX_TYPED_CHARS).unwrap_or(i32::MAX);
        let used = i32::try_from(used).unwrap_or(i32::MAX);
        let (session_id, session_version) =
            u.session.map_or((None, None), |s| (Some(s.session_id), Some(version(s.version))));
        let t = tenant.as_str();
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            vec![&u.grant_id, &chars, &u.now, &used, &max_chars, &t, &session_id, &session_version];
        params.extend_from_slice(one.extra);
        let named = named_snapshot(&event);
        if let Some((session, run, snapshot)) = &named {
            params.extend([*session as &(dyn tokio_postgres::types::ToSql + Sync), *run, *snapshot]);
        }
        let guard = Guard { sql: one.sql, then: named.map(|_| one.then), params: &params };
        match self.store.append_guarded(&request, guard).await {
            Ok(Some(outcome)) => Ok(Some((ordinal, outcome))),
            Ok(None) | Err(AppendError::Conflict { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
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
pub(super) const CONSUME: &str = "WITH held AS (SELECT 1 FROM authority_sessions WHERE tenant_id = $6 AND session_id = $7 \
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
pub(super) static CONSUME_NEXT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("{CONSUME_NEXT_UPDATE} RETURNING actions_used"));

/// [`CONSUME_NEXT`] up to its `RETURNING`, so a stricter use can add conditions of its own.
pub(super) const CONSUME_NEXT_UPDATE: &str = "WITH held AS (SELECT 1 FROM authority_sessions WHERE tenant_id = $6 AND session_id = $7 \
       AND version = $8 FOR SHARE), \
     free AS (SELECT grant_id FROM active_task_grants WHERE tenant_id = $6 AND grant_id = $1 \
       AND ended_at IS NULL AND actions_used = $4 FOR UPDATE SKIP LOCKED) \
     UPDATE active_task_grants SET actions_used = actions_used + 1, chars_used = chars_used + $2 \
       WHERE tenant_id = $6 AND grant_id = $1 AND grant_id IN (SELECT grant_id FROM free) \
       AND ended_at IS NULL AND actions_used = $4 \
       AND chars_used + $2 <= $5 AND expires_at > $3 AND expires_at > statement_timestamp() \
       AND ($7::text IS NULL OR EXISTS (SELECT 1 FROM held))";

/// [`name_snapshot`] for the use the same statement appended: the session, run and snapshot in
/// parameters `$first`, `$first + 1` and `$first + 2`.
pub(super) fn name_snapshot_appended(first: usize) -> String {
    let (session, run, snapshot) = (first, first + 1, first + 2);
    format!(
        "INSERT INTO run_snapshots AS r (tenant_id, session_id, run_id, snapshot_id, tx_id, position) \
         SELECT $6, ${session}, ${run}, ${snapshot}, a.tx_id, a.global_position FROM appended a \
         ON CONFLICT (tenant_id, session_id, run_id, snapshot_id) \
         DO UPDATE SET tx_id = excluded.tx_id, position = excluded.position \
         WHERE (excluded.tx_id, excluded.position) < (r.tx_id, r.position)"
    )
}

/// [`name_snapshot_appended`] after [`CONSUME_NEXT`]'s eight parameters.
static NAME_SNAPSHOT_APPENDED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| name_snapshot_appended(9));
