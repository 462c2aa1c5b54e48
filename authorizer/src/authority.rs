//! The authority: the pure domain over a storage backend. Commands and authorizations are
//! decided against the `World` and committed through the backend; a task-grant allow goes
//! through the backend's atomic use, whose answer wins over the domain's count.
//!
//! Two backends: PostgreSQL (`PgGrants`) and memory (`MemoryGrants`, the reference model with the
//! same conditional use, for differential tests). The `World` lock serialises deciding within one
//! process; the database row serialises uses across processes.

use std::collections::HashMap;
use std::future::Future;

use ledger::catalogue::{AuthorizationKind, EndReason, Event, ToolCallAuthorized};
use ledger::{AppendRequest, Checkpoint, EventStore, ExpectedVersion, MemoryStore, Metadata, TenantId};
use time::OffsetDateTime;
use tokio::sync::{Mutex, RwLock};
use uuid::Uuid;

use crate::domain::{self, AuthorizeRequest, Command, Decision, DomainError, World, stream_of};
use crate::limits::{MAX_ACTIONS, MAX_TYPED_CHARS};
use crate::pg::{Consumed, PgGrants, StoreError};
use crate::policy::Policy;

/// Where the authority's events and the inline grant rows live.
pub trait Backend: Send + Sync {
    /// Appends events and applies them to the inline projection, atomically; returns where the
    /// ledger reached (`None` when there was nothing to append).
    fn commit(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        events: &[Event],
    ) -> impl Future<Output = Result<Option<Checkpoint>, StoreError>> + Send;

    /// The store the backend appends to, for folding the world at start-up.
    fn events(&self) -> &impl EventStore;

    /// Consumes one use atomically and records `use_event(ordinal)` with it.
    fn consume(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        grant_id: Uuid,
        typed_chars: u32,
        now: OffsetDateTime,
        use_event: impl FnOnce(u32) -> Event + Send,
    ) -> impl Future<Output = Result<Consumed, StoreError>> + Send;
}

impl Backend for PgGrants {
    fn events(&self) -> &impl EventStore {
        self.store()
    }

    async fn commit(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        events: &[Event],
    ) -> Result<Option<Checkpoint>, StoreError> {
        if events.is_empty() {
            return Ok(None);
        }
        PgGrants::commit(self, tenant, metadata, events).await.map(|o| Some(o.checkpoint()))
    }

    async fn consume(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        grant_id: Uuid,
        typed_chars: u32,
        now: OffsetDateTime,
        use_event: impl FnOnce(u32) -> Event + Send,
    ) -> Result<Consumed, StoreError> {
        PgGrants::consume(self, tenant, metadata, grant_id, typed_chars, now, use_event).await
    }
}

#[derive(Debug, Clone)]
struct Row {
    tenant: TenantId,
    session_id: String,
    expires_at: OffsetDateTime,
    actions: u32,
    chars: u32,
    ended: Option<EndReason>,
}

/// The in-memory backend: a `MemoryStore` and inline rows with the same rules as the SQL.
#[derive(Debug, Default)]
pub struct MemoryGrants {
    pub store: MemoryStore,
    rows: Mutex<HashMap<Uuid, Row>>,
}

impl Backend for MemoryGrants {
    fn events(&self) -> &impl EventStore {
        &self.store
    }

    async fn commit(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        events: &[Event],
    ) -> Result<Option<Checkpoint>, StoreError> {
        if events.is_empty() {
            return Ok(None);
        }
        let mut rows = self.rows.lock().await;
        let mut next = rows.clone();
        for e in events {
            match e {
                Event::TaskGrantCreated(c) => {
                    // The same rules as the table's primary key and one-active-per-session index.
                    let second_active = next.values().any(|r| r.ended.is_none() && r.session_id == c.session_id);
                    if next.contains_key(&c.grant_id) || second_active {
                        return Err(StoreError::Projection(format!(
                            "grant {} would be a second active grant",
                            c.grant_id
                        )));
                    }
                    let row = Row {
                        tenant: tenant.clone(),
                        session_id: c.session_id.clone(),
                        expires_at: c.expires_at,
                        actions: 0,
                        chars: 0,
                        ended: None,
                    };
                    next.insert(c.grant_id, row);
                }
                Event::TaskGrantEnded(x) => match next.get_mut(&x.grant_id) {
                    Some(r) if r.ended.is_none() => r.ended = Some(x.reason),
                    _ => {
                        return Err(StoreError::Projection(format!(
                            "grant {} is not active: it ends exactly once",
                            x.grant_id
                        )));
                    }
                },
                _ => {}
            }
        }
        let outcome = self.store.append(crate::pg::to_append(tenant, metadata, events)).await?;
        *rows = next;
        Ok(Some(outcome.checkpoint()))
    }

    async fn consume(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        grant_id: Uuid,
        typed_chars: u32,
        now: OffsetDateTime,
        use_event: impl FnOnce(u32) -> Event + Send,
    ) -> Result<Consumed, StoreError> {
        let mut rows = self.rows.lock().await;
        let Some(row) = rows.get_mut(&grant_id) else { return Ok(Consumed::Refused) };
        let fits = row.ended.is_none()
            && row.actions < MAX_ACTIONS
            && row.chars + typed_chars <= MAX_TYPED_CHARS
            && row.expires_at > now
            && &row.tenant == tenant;
        if !fits {
            return Ok(Consumed::Refused);
        }
        let ordinal = row.actions + 1;
        let event = use_event(ordinal);
        let request = AppendRequest::single(
            tenant.clone(),
            stream_of(&event),
            ExpectedVersion::Any,
            vec![event.to_new(Uuid::new_v4(), metadata.clone())],
        );
        let outcome = self.store.append(request).await?;
        row.actions = ordinal;
        row.chars += typed_chars;
        Ok(Consumed::Allowed { ordinal, outcome })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The domain over a backend, for one tenant.
#[derive(Debug)]
pub struct Authority<B> {
    backend: B,
    world: RwLock<World>,
    policy: Policy,
    tenant: TenantId,
    /// The newest ledger position whose events the world has applied.
    applied: tokio::sync::watch::Sender<Checkpoint>,
}

impl<B: Backend> Authority<B> {
    pub fn new(backend: B, policy: Policy, tenant: TenantId) -> Self {
        Self {
            backend,
            world: RwLock::new(World::default()),
            policy,
            tenant,
            applied: tokio::sync::watch::channel(Checkpoint::START).0,
        }
    }

    /// An authority whose world is folded from every event of `tenant` in the backend's log,
    /// as after a restart. The read is gap-safe: events of transactions still open elsewhere
    /// are not yet visible, so recover before serving.
    pub async fn recover(backend: B, policy: Policy, tenant: TenantId) -> Result<Self, AuthorityError> {
        let mut world = World::default();
        let mut at = ledger::Checkpoint::START;
        loop {
            let page = backend
                .events()
                .read_all(at, ledger::READ_PAGE)
                .await
                .map_err(|e| StoreError::Unavailable(e.to_string()))?;
            let Some(last) = page.last() else { break };
            at = last.checkpoint();
            for recorded in page.iter().filter(|e| e.tenant_id == tenant) {
                let event = Event::from_recorded(recorded).map_err(|e| StoreError::Unavailable(e.to_string()))?;
                world.apply(&event);
            }
        }
        Ok(Self { backend, world: RwLock::new(world), policy, tenant, applied: tokio::sync::watch::channel(at).0 })
    }

    /// Reads the world without cloning it.
    pub async fn read<T>(&self, f: impl FnOnce(&World) -> T) -> T {
        f(&*self.world.read().await)
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The newest position the world reflects: at least that of every write that returned.
    pub fn position(&self) -> Checkpoint {
        *self.applied.borrow()
    }

    /// Waits (up to `patience`) until the world reflects `at`; false when it did not in time.
    pub async fn wait_for(&self, at: Checkpoint, patience: std::time::Duration) -> bool {
        let mut rx = self.applied.subscribe();
        tokio::time::timeout(patience, rx.wait_for(|p| *p >= at)).await.is_ok_and(|r| r.is_ok())
    }

    fn reached(&self, at: Option<Checkpoint>) {
        if let Some(at) = at {
            self.applied.send_if_modified(|p| {
                let newer = at > *p;
                if newer {
                    *p = at;
                }
                newer
            });
        }
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub async fn world(&self) -> World {
        self.world.read().await.clone()
    }

    /// Decides and commits a command; the world changes only after the commit.
    pub async fn execute(&self, command: Command, principal: &str) -> Result<Vec<Event>, AuthorityError> {
        let mut world = self.world.write().await;
        let events = domain::decide(&world, command)?;
        let at = self.backend.commit(&self.tenant, &Metadata::by(principal), &events).await?;
        events.iter().for_each(|e| world.apply(e));
        self.reached(at);
        Ok(events)
    }

    /// Decides one `browser.act`. Concurrent calls decide under a shared lock and consume uses
    /// with no lock held: the backend's row is what serialises them, so a task-grant allow is
    /// final only once the atomic use committed it, and a request that finds the row spent goes
    /// to the approval card. Decisions that end a grant are re-decided under the exclusive lock,
    /// so each end is recorded once.
    pub async fn authorize(
        &self,
        req: &AuthorizeRequest,
        now: OffsetDateTime,
        approval_id: Uuid,
    ) -> Result<(Decision, Vec<Event>), AuthorityError> {
        let auth = {
            let world = self.world.read().await;
            domain::authorize(&world, &self.policy, req, now, approval_id)
        };
        let metadata = Metadata::by(&req.principal_id);
        if let Decision::Allow {
            kind: AuthorizationKind::BrowserTaskGrant,
            grant_id: Some(grant_id),
            typed_chars,
            ..
        } = auth.decision
        {
            let Some(Event::ToolCallAuthorized(template)) = auth.events.first().cloned() else {
                return Err(StoreError::Projection("a task-grant allow without its use event".into()).into());
            };
            let consumed = self
                .backend
                .consume(&self.tenant, &metadata, grant_id, typed_chars, now, |ordinal| {
                    Event::ToolCallAuthorized(ToolCallAuthorized { use_ordinal: Some(ordinal), ..template.clone() })
                })
                .await?;
            if let Consumed::Allowed { ordinal, outcome } = consumed {
                let used = Event::ToolCallAuthorized(ToolCallAuthorized { use_ordinal: Some(ordinal), ..template });
                self.world.write().await.apply(&used);
                self.reached(Some(outcome.checkpoint()));
                let decision = Decision::Allow {
                    kind: AuthorizationKind::BrowserTaskGrant,
                    grant_id: Some(grant_id),
                    use_ordinal: Some(ordinal),
                    typed_chars,
                };
                return Ok((decision, vec![used]));
            }
            // The row is spent where this decision thought it was not: ask the owner.
            let mut world = self.world.write().await;
            let (decision, requested) = domain::request_approval(
                req,
                now,
                approval_id,
                Some("grant_spent".into()),
                domain::offer_for(&world, req),
            );
            let at = self.backend.commit(&self.tenant, &metadata, std::slice::from_ref(&requested)).await?;
            world.apply(&requested);
            self.reached(at);
            return Ok((decision, vec![requested]));
        }
        // A denial records nothing: done.
        if auth.events.is_empty() {
            return Ok((auth.decision, auth.events));
        }
        // Anything else records events: decide again under the exclusive lock, so an end found by
        // two requests at once is recorded by the first only.
        let mut world = self.world.write().await;
        let auth = domain::authorize(&world, &self.policy, req, now, approval_id);
        if matches!(auth.decision, Decision::Allow { kind: AuthorizationKind::BrowserTaskGrant, .. }) {
            // The world moved on between the two decisions; this cannot allow without a use.
            drop(world);
            return Box::pin(self.authorize(req, now, approval_id)).await;
        }
        let at = self.backend.commit(&self.tenant, &metadata, &auth.events).await?;
        auth.events.iter().for_each(|e| world.apply(e));
        self.reached(at);
        Ok((auth.decision, auth.events))
    }
}
