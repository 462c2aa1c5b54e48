//! `PgGrants`, the authority's PostgreSQL backend: its state, and the reads and writes every
//! command shares. A leaf of the adapter: `consume` and `remember` add the use on top of it.

use std::collections::HashMap;
use std::sync::Arc;

use grant_domain::catalogue::{AuthorizationKind, Event};
use ledger::postgres::SettleCounts;
use ledger::{Metadata, PgStore, TenantId};
use time::OffsetDateTime;
use tokio_postgres::IsolationLevel;
use uuid::Uuid;

use crate::domain::{Approval, RunSnapshots, Session, World};
use crate::error::{AuthorityError, StoreError};
use crate::state;
use crate::store::{Decide, Deployment, Need, Transacted};

use super::convert::{db, from_version, json, unavailable, version};
use super::read::{GRANT_COLUMNS, PgReader, Prefetched, grant_from_row};
use super::write::write_all;

use super::reads;

#[derive(Debug, Clone)]
pub struct PgGrants {
    pub(super) store: PgStore,
    /// Uses made by the one-statement path (operators and tests: the fast path is taken).
    pub(super) one_statement_uses: Arc<std::sync::atomic::AtomicU64>,
    /// Each session's last authorization read, for its next allow (`remember`, `reads`).
    pub(super) reads: Arc<reads::Reads>,
    /// Uses made on a remembered read, and tries on one that were refused.
    pub(super) remembered_uses: Arc<std::sync::atomic::AtomicU64>,
    pub(super) remembered_refusals: Arc<std::sync::atomic::AtomicU64>,
    #[cfg(feature = "testing")]
    pause: Arc<PauseSlot>,
}

/// Where a test leaves a [`Pause`]; a use only takes the lock when one was left.
#[cfg(feature = "testing")]
#[derive(Debug, Default)]
struct PauseSlot {
    set: std::sync::atomic::AtomicBool,
    pause: std::sync::Mutex<Option<Arc<Pause>>>,
}

/// A fault hook for tests: the next use stops after its decision and before its statement,
/// says so on `reached`, and goes on at `go`.
#[cfg(feature = "testing")]
#[derive(Debug, Default)]
pub struct Pause {
    pub reached: tokio::sync::Notify,
    pub go: tokio::sync::Notify,
}

impl PgGrants {
    pub fn new(store: PgStore) -> Self {
        Self {
            store,
            one_statement_uses: Arc::default(),
            reads: Arc::default(),
            remembered_uses: Arc::default(),
            remembered_refusals: Arc::default(),
            #[cfg(feature = "testing")]
            pause: Arc::default(),
        }
    }

    /// Pauses the next use (once) at `pause`: how a test puts a change between a decision's
    /// read and its use.
    #[cfg(feature = "testing")]
    pub fn pause_next_use(&self, pause: Arc<Pause>) {
        *self.pause.pause.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(pause);
        self.pause.set.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Waits at the pause a test left for this use, if it left one.
    #[cfg(feature = "testing")]
    pub(super) async fn paused(&self) {
        let pause = if self.pause.set.swap(false, std::sync::atomic::Ordering::Acquire) {
            self.pause.pause.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
        } else {
            None
        };
        if let Some(pause) = pause {
            pause.reached.notify_one();
            pause.go.notified().await;
        }
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
        if let (false, Need::Authorize { session, credential }) = (lock, need) {
            // The hot path: everything an authorization reads in one statement (one snapshot,
            // one round trip); a write it decides opens its own transaction, and a stream or
            // grant row that moved since the read comes back as a conflict.
            let client = self.store.pool().get().await.map_err(unavailable)?;
            let mut rows = Prefetched::authorize(&client, &self.store, tenant, session, credential).await?;
            drop(client);
            // The read confirmed the credential (or refused the call above).
            let loaded = state::load(&mut rows, tenant, Need::Authorize { session, credential: None }).await?;
            self.reads.put(tenant, session, &loaded);
            let (events, value) = decide(&loaded)?;
            if events.is_empty() {
                return Ok(Transacted { value, events, at: None });
            }
            // A standing-grant allow rests on the pin as read: hold the settings at that version,
            // so an unpin committed since refuses it and one committing now waits for it.
            let standing = events.iter().any(|e| {
                matches!(e, Event::ToolCallAuthorized(t) if t.authorization_kind == AuthorizationKind::StandingGrant)
            });
            let settings_read = loaded.version(&crate::domain::deployment_stream(tenant)?);
            // A card rests on the session as read (not stopped, not deleted): hold its row at that
            // version, so a Stop committed since refuses the card and one committing now waits.
            let card = events.iter().any(|e| matches!(e, Event::ApprovalRequested(_)));
            let session_read = version(loaded.session_version(session));
            let done = self
                .store
                .transaction(IsolationLevel::ReadCommitted, async |tx| {
                    if card {
                        let held = tx
                            .sql()
                            .query_opt(
                                "SELECT 1 FROM authority_sessions WHERE tenant_id = $1 AND session_id = $2 \
                                 AND version = $3 FOR SHARE",
                                &[&tenant.as_str(), &session, &session_read],
                            )
                            .await
                            .map_err(db)?;
                        if held.is_none() {
                            return Err(StoreError::Contended("the session changed since the read".into()));
                        }
                    }
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
                let (events, value) = decide(&loaded)?;
                if !events.is_empty() {
                    write_all(tx, tenant, &loaded, metadata, &events).await?;
                }
                Ok::<_, AuthorityError>((events, value))
            })
            .await?;
        let (events, value) = done.value;
        Ok(Transacted { value, events, at: done.outcome.map(|o| o.checkpoint()) })
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
    /// Each stored approval's version and its session's, for the replica's waits, in one read.
    pub async fn approval_marks(&self, keys: &[(TenantId, Uuid)]) -> Result<crate::store::Marks, StoreError> {
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        let tenants: Vec<&str> = keys.iter().map(|(t, _)| t.as_str()).collect();
        let ids: Vec<Uuid> = keys.iter().map(|(_, a)| *a).collect();
        let client = self.store.pool().get().await.map_err(unavailable)?;
        let stmt = client
            .prepare_cached(
                // One key lookup per wait (LATERAL): never a scan of every approval's state.
                "SELECT k.tenant_id, k.approval_id, a.version, \
                 COALESCE((SELECT s.version FROM authority_sessions s \
                           WHERE s.tenant_id = k.tenant_id AND s.session_id = a.session_id), 0) \
                 FROM unnest($1::text[], $2::uuid[]) AS k(tenant_id, approval_id) \
                 CROSS JOIN LATERAL (SELECT a.version, a.session_id FROM authority_approvals a \
                                     WHERE a.tenant_id = k.tenant_id AND a.approval_id = k.approval_id) a",
            )
            .await
            .map_err(db)?;
        let rows = client.query(&stmt, &[&tenants, &ids]).await.map_err(db)?;
        rows.iter()
            .map(|r| {
                let tenant = TenantId::new(r.get::<_, String>(0))
                    .map_err(|e| StoreError::Projection(format!("a stored tenant id: {}", e.reason)))?;
                Ok(((tenant, r.get(1)), (from_version(r.get(2)), from_version(r.get(3)))))
            })
            .collect()
    }

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
        rows.iter()
            .map(|r| {
                TenantId::new(r.get::<_, String>(0))
                    .map_err(|e| StoreError::Projection(format!("a stored tenant id: {}", e.reason)))
            })
            .collect()
    }
}
