//! Appends in a transaction: the ledger's own, a caller's (`PgStore::transaction`), or one
//! guarded statement (`PgStore::append_guarded`).

use std::collections::HashMap;

use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::IsolationLevel;
use uuid::Uuid;

use crate::envelope::{AppendOutcome, AppendRequest, Appended, StreamId, TenantId};
use crate::error::AppendError;

use super::failure::{chain, connection_suspect, insert_error, session_ended, unavailable};
use super::rows::{Head, parse_xid, to_u64};
use super::sql::Guard;
use super::sql::{guarded_insert_sql, insert_sql};
use super::store::{PgStore, discard};

/// What a [`PgStore::transaction`] decided and, when it appended, where that reached.
#[derive(Debug)]
pub struct Done<T> {
    pub value: T,
    pub outcome: Option<AppendOutcome>,
}

/// One transaction run by [`PgStore::transaction`].
#[derive(Debug)]
pub struct Tx<'a> {
    pub(super) tx: Transaction<'a>,
    pub(super) store: &'a PgStore,
    pub(super) staged: Vec<Staged>,
    /// An append failed: PostgreSQL would turn the COMMIT into a silent rollback, so the
    /// transaction is never committed even if the body swallowed the error.
    pub(super) failed: bool,
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

/// A written but uncommitted append.
#[derive(Debug)]
pub(super) struct Staged {
    pub(super) tx_id: u64,
    pub(super) events: Vec<Appended>,
    pub(super) backend_pid: i32,
    pub(super) event_ids: Vec<Uuid>,
    pub(super) heads: HashMap<StreamId, Head>,
}

impl Staged {
    /// Maps a COMMIT failure. A server error that refused the commit (a deferred constraint, a
    /// serialisation failure) is determinate; a lost connection, or a server error that ends the
    /// session (FATAL, operator intervention, connection exception), is not: the commit may
    /// have been recorded before the session ended.
    pub(super) fn commit_error(&self, e: &tokio_postgres::Error) -> AppendError {
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

impl PgStore {
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

    /// Writes `request` as one INSERT on `client` (inside a transaction or, alone, as its own).
    /// Two multi-stream appends racing on the same keys in opposite orders can deadlock;
    /// PostgreSQL aborts one, which comes back as a typed conflict.
    pub(super) async fn stage(
        &self,
        client: &impl GenericClient,
        request: &AppendRequest,
    ) -> Result<Staged, AppendError> {
        request.validate()?;
        let heads = self.heads_for(client, request).await?;
        Ok(self.stage_guarded(client, request, heads, None).await?.expect("an unguarded append always writes"))
    }

    /// `request` chained onto `heads`, made in the same statement as `guard` (when there is one)
    /// and only when it returns a row: `Ok(None)` when it returned none, and nothing was written.
    pub(super) async fn stage_guarded(
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
    pub(super) async fn alone<T>(
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
    pub(super) fn committed(&self, staged: &Staged) {
        for (stream, head) in &staged.heads {
            self.remember(stream.clone(), head.clone());
        }
        self.wake();
    }
}
