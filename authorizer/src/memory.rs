//! The memory adapter of the authority's store: the reference model, with the same reads as
//! PostgreSQL (through the same `state::load`), the same refusals of the grant rows, and the same
//! conditional use, one request at a time. Differential tests hold PostgreSQL to it.

use std::collections::HashMap;

use grant_domain::catalogue::Event;
use ledger::{EventStore, MemoryStore, Metadata, StreamId, TenantId};
use time::OffsetDateTime;
use tokio::sync::Mutex;
use uuid::Uuid;

use crate::domain::{self, Grant, World};
use crate::error::{AuthorityError, StoreError};
use crate::limits::{MAX_ACTIONS, MAX_TYPED_CHARS};
use crate::state;
use crate::store::{
    Approvals, Backend, Consumed, Decide, Deployment, Grants, Need, Reader, Transacted, UseOf, Versioned,
};

/// One tenant's state in memory: the whole world folded, and each stream's version.
#[derive(Debug, Default)]
struct TenantState {
    world: World,
    versions: HashMap<StreamId, u64>,
}

/// The in-memory backend: a `MemoryStore` and each tenant's world, read through the same
/// `state::load` as PostgreSQL, one request at a time.
#[derive(Debug, Default)]
pub struct MemoryGrants {
    pub store: MemoryStore,
    tenants: Mutex<HashMap<TenantId, TenantState>>,
}

struct MemoryReader<'a> {
    state: &'a TenantState,
    tenant: &'a TenantId,
}

impl MemoryReader<'_> {
    fn version(&self, category: &str, id: &dyn std::fmt::Display) -> u64 {
        domain::entity_stream(self.tenant, category, id)
            .map_or(0, |s| self.state.versions.get(&s).copied().unwrap_or(0))
    }

    fn approval(&self, a: &domain::Approval) -> Versioned<domain::Approval> {
        Versioned { value: a.clone(), version: self.version("approval", &a.requested.approval_id) }
    }
}

impl Reader for MemoryReader<'_> {
    async fn sessions(&mut self, ids: &[&str]) -> Result<Vec<Versioned<domain::Session>>, StoreError> {
        let mut out: Vec<_> = ids
            .iter()
            .filter_map(|id| self.state.world.sessions.get(*id))
            .map(|s| Versioned {
                value: domain::Session { active_grant: None, ..s.clone() },
                version: self.version("session", &s.created.session_id),
            })
            .collect();
        out.sort_by(|a, b| a.value.created.session_id.cmp(&b.value.created.session_id));
        Ok(out)
    }

    async fn profile(&mut self, id: &str) -> Result<Versioned<domain::Profile>, StoreError> {
        let value = self.state.world.profiles.get(id).cloned().unwrap_or_default();
        Ok(Versioned { value, version: self.version("profile", &id) })
    }

    async fn deployment(&mut self) -> Result<Versioned<Deployment>, StoreError> {
        let w = &self.state.world;
        let value = Deployment { settings: w.settings.clone(), standing: w.standing.clone(), policy: w.policy.clone() };
        let stream = domain::deployment_stream(self.tenant)?;
        Ok(Versioned { value, version: self.state.versions.get(&stream).copied().unwrap_or(0) })
    }

    async fn approvals(&mut self, which: Approvals<'_>) -> Result<Vec<Versioned<domain::Approval>>, StoreError> {
        let all = self.state.world.approvals.values();
        let mut out: Vec<_> = match which {
            Approvals::Id(id) => all.filter(|a| a.requested.approval_id == id).map(|a| self.approval(a)).collect(),
            Approvals::Token(sha) => {
                all.filter(|a| a.token_sha256.as_deref() == Some(sha)).map(|a| self.approval(a)).collect()
            }
            Approvals::OfSession(s) => all.filter(|a| a.requested.session_id == s).map(|a| self.approval(a)).collect(),
            Approvals::PendingOfSession(s) => all
                .filter(|a| a.requested.session_id == s && a.state == domain::ApprovalState::Pending)
                .map(|a| self.approval(a))
                .collect(),
            Approvals::DueBy(now) => all
                .filter(|a| a.state == domain::ApprovalState::Pending && a.requested.expires_at <= now)
                .map(|a| self.approval(a))
                .collect(),
        };
        out.sort_by_key(|a| a.value.requested.approval_id);
        Ok(out)
    }

    async fn grants(&mut self, which: Grants<'_>) -> Result<Vec<Grant>, StoreError> {
        let all = self.state.world.grants.values();
        let mut out: Vec<Grant> = match which {
            Grants::Id(id) => all.filter(|g| g.created.grant_id == id).cloned().collect(),
            Grants::ActiveOfSession(s) => all.filter(|g| g.is_active() && g.created.session_id == s).cloned().collect(),
            Grants::ActiveOnProfile(p) => all.filter(|g| g.is_active() && g.created.profile_id == p).cloned().collect(),
            Grants::Active => all.filter(|g| g.is_active()).cloned().collect(),
            Grants::DueBy(now) => all.filter(|g| g.is_active() && g.created.expires_at <= now).cloned().collect(),
            Grants::OfPrincipal(p) => all.filter(|g| g.created.principal_id == p).cloned().collect(),
        };
        out.sort_by_key(|g| g.created.grant_id);
        Ok(out)
    }

    async fn sessions_to_stop(&mut self, principal: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let mut ids: Vec<String> = self
            .state
            .world
            .sessions
            .values()
            .filter(|s| s.created.principal_id == principal && !s.deleted && !s.stopped)
            .map(|s| s.created.session_id.clone())
            .collect();
        ids.sort();
        ids.truncate(limit);
        Ok(ids)
    }

    async fn chats(&mut self, principal: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let mut ids: Vec<String> = self
            .state
            .world
            .sessions
            .values()
            .filter(|s| s.created.principal_id == principal && !s.deleted)
            .map(|s| s.created.session_id.clone())
            .collect();
        ids.sort();
        ids.truncate(limit);
        Ok(ids)
    }

    async fn open_tasks(
        &mut self,
        principal: &str,
        now: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let mut ids: Vec<String> = self
            .state
            .world
            .sessions
            .values()
            .filter(|s| s.created.principal_id == principal)
            .filter(|s| !s.deleted && !s.stopped && s.task.as_ref().is_some_and(|t| t.claimable(now)))
            .map(|s| s.created.session_id.clone())
            .collect();
        ids.sort();
        ids.truncate(limit);
        Ok(ids)
    }

    async fn run(&mut self, session: &str, run: &str) -> Result<domain::RunSnapshots, StoreError> {
        Ok(self.state.world.run_snapshots.get(&(session.to_owned(), run.to_owned())).cloned().unwrap_or_default())
    }
}

impl TenantState {
    /// The same refusals as the grant rows' statements and keys.
    fn check_grant_rows(&self, events: &[Event]) -> Result<(), StoreError> {
        let mut world = self.world.clone();
        for e in events {
            match e {
                Event::TaskGrantCreated(c) => {
                    let second = world.grants.values().any(|g| g.is_active() && g.created.session_id == c.session_id);
                    if second || world.grants.contains_key(&c.grant_id) {
                        return Err(StoreError::Projection(format!("grant {} would be a second", c.grant_id)));
                    }
                }
                Event::TaskGrantEnded(x) if !world.grants.get(&x.grant_id).is_some_and(Grant::is_active) => {
                    return Err(StoreError::Contended(format!("grant {} already ended", x.grant_id)));
                }
                Event::TaskGrantEnded(x)
                    if x.uses.is_some_and(|u| world.grants.get(&x.grant_id).is_some_and(|g| g.actions_used != u)) =>
                {
                    return Err(StoreError::Contended(format!("grant {} was used since it was read", x.grant_id)));
                }
                _ => {}
            }
            world.apply(e);
        }
        Ok(())
    }

    fn versions_after(&mut self, outcome: &ledger::AppendOutcome) {
        for a in &outcome.events {
            self.versions.insert(a.stream_id.clone(), a.stream_version);
        }
    }
}

/// PostgreSQL's transaction refuses an event id stored already, even with the same content; the
/// model refuses it too, where the memory store would answer a replay.
fn fresh(outcome: ledger::AppendOutcome) -> Result<ledger::AppendOutcome, StoreError> {
    match outcome.events.first() {
        Some(e) if outcome.replayed => {
            Err(StoreError::Append(ledger::AppendError::DuplicateEventId { event_id: e.event_id }))
        }
        _ => Ok(outcome),
    }
}

impl Backend for MemoryGrants {
    async fn transact<T: Send>(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        need: Need<'_>,
        _lock: bool,
        decide: &Decide<'_, T>,
    ) -> Result<Transacted<T>, AuthorityError> {
        let mut tenants = self.tenants.lock().await;
        let state = tenants.entry(tenant.clone()).or_default();
        let loaded = state::load(&mut MemoryReader { state, tenant }, tenant, need).await?;
        let (events, value) = decide(&loaded)?;
        if events.is_empty() {
            return Ok(Transacted { value, events, at: None });
        }
        let plan = loaded.plan(&events, metadata)?;
        state.check_grant_rows(&events)?;
        let mut at = None;
        for append in plan.appends {
            let outcome = fresh(self.store.append(append).await.map_err(StoreError::from)?)?;
            state.versions_after(&outcome);
            at = Some(outcome.checkpoint());
        }
        events.iter().for_each(|e| state.world.apply(e));
        Ok(Transacted { value, events, at })
    }

    async fn consume(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        u: UseOf<'_>,
        use_event: impl Fn(u32) -> Event + Send + Sync,
    ) -> Result<Consumed, StoreError> {
        let UseOf { grant_id, typed_chars, now, session, .. } = u;
        let mut tenants = self.tenants.lock().await;
        let state = tenants.entry(tenant.clone()).or_default();
        let Some(g) = state.world.grants.get(&grant_id) else { return Ok(Consumed::Refused) };
        let session_still = session.is_none_or(|s| {
            domain::entity_stream(tenant, "session", &s.session_id)
                .is_ok_and(|stream| state.versions.get(&stream).copied().unwrap_or(0) == s.version)
        });
        let fits = session_still
            && g.is_active()
            && g.actions_used < MAX_ACTIONS
            && g.chars_used + typed_chars <= MAX_TYPED_CHARS
            && g.created.expires_at > now;
        if !fits {
            return Ok(Consumed::Refused);
        }
        let ordinal = g.actions_used + 1;
        let event = use_event(ordinal);
        let outcome = fresh(self.store.append(state::use_append(tenant, metadata, &event, ordinal)?).await?)?;
        state.versions_after(&outcome);
        state.world.apply(&event);
        Ok(Consumed::Allowed { ordinal, outcome })
    }

    async fn dump(&self, tenant: &TenantId) -> Result<World, StoreError> {
        Ok(self.tenants.lock().await.get(tenant).map(|s| s.world.clone()).unwrap_or_default())
    }

    async fn recorded(&self, tenant: &TenantId, event_id: Uuid) -> Result<Option<ledger::RecordedEvent>, StoreError> {
        let found = self.store.find_event(event_id).await.map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(found.filter(|e| &e.tenant_id == tenant))
    }

    async fn approval_marks(&self, keys: &[(TenantId, Uuid)]) -> Result<crate::store::Marks, StoreError> {
        let tenants = self.tenants.lock().await;
        let mut marks = HashMap::new();
        for (tenant, id) in keys {
            let Some(state) = tenants.get(tenant) else { continue };
            let Some(a) = state.world.approvals.get(id) else { continue };
            let r = MemoryReader { state, tenant };
            let marked = (r.version("approval", id), r.version("session", &a.requested.session_id));
            marks.insert((tenant.clone(), *id), marked);
        }
        Ok(marks)
    }

    fn wake_ups(&self) -> tokio::sync::watch::Receiver<u64> {
        self.store.wake_ups()
    }

    async fn due_tenants(&self, now: OffsetDateTime) -> Result<Vec<TenantId>, StoreError> {
        let tenants = self.tenants.lock().await;
        let mut due: Vec<TenantId> = tenants
            .iter()
            .filter(|(_, s)| {
                s.world.grants.values().any(|g| g.is_active() && g.created.expires_at <= now)
                    || s.world
                        .approvals
                        .values()
                        .any(|a| a.state == domain::ApprovalState::Pending && a.requested.expires_at <= now)
            })
            .map(|(t, _)| t.clone())
            .collect();
        due.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        Ok(due)
    }
}
