//! The world the events fold into, and the streams they belong to.

use std::collections::HashMap;

use crate::catalogue::{
    ApprovalRequested, Author, AuthorizationKind, EndReason, Event, ProfileClaimed, Resolution, SessionCreated,
    StandingGrantPinned, TaskGrantCreated, TaskGrantEnded, TaskStarted,
};
use ledger::StreamId;
use ledger::TenantId;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::limits::MAX_TENANT_LEN;
use crate::scopes::TaskGrantSettings;

use super::error::DomainError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub created: SessionCreated,
    pub newest_message_author: Option<Author>,
    /// The tools called in this session since the owner's newest message, as recorded.
    pub turn_tools: Vec<String>,
    pub deleted: bool,
    /// The owner stopped the agent here; the owner's next message lifts it.
    #[serde(default)]
    pub stopped: bool,
    /// The newest Stop, lifted or not: a card asked before it gives no token.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub stopped_at: Option<OffsetDateTime>,
    /// Not stored with the session: the grant rows say which is active.
    #[serde(skip)]
    pub active_grant: Option<Uuid>,
    /// The newest task the owner started here, and who runs it.
    #[serde(default)]
    pub task: Option<SessionTask>,
}

/// The run id a worker's attempt of a task runs as: one run per attempt, so a worker that lost
/// its task acts under a run the session no longer holds.
pub const TASK_RUN_PREFIX: &str = "task-";

/// The session's newest task and its claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTask {
    pub started: TaskStarted,
    /// 0 until a worker takes it.
    pub attempt: u32,
    pub run_id: Option<String>,
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub lease_until: Option<OffsetDateTime>,
    /// Its run ended, the owner stopped the chat, or a newer task replaced it.
    pub ended: bool,
    /// Its run reached the task's confirmation.
    #[serde(default)]
    pub completed: bool,
}

impl SessionTask {
    /// Whether a worker may take it at `now`: not ended, and nobody holds it.
    pub fn claimable(&self, now: OffsetDateTime) -> bool {
        !self.ended && self.lease_until.is_none_or(|until| until <= now)
    }
}

impl Session {
    /// Whether `run_id` may act here: any run that is not a task's, and a task's run only while
    /// it holds the session's live task.
    pub fn runs_its_task(&self, run_id: &str) -> bool {
        !run_id.starts_with(TASK_RUN_PREFIX)
            || self.task.as_ref().is_some_and(|t| !t.ended && t.run_id.as_deref() == Some(run_id))
    }

    /// Whether the owner stopped the agent here (now, or since `approval` was asked): its token,
    /// if any, is void.
    pub fn stopped_since(&self, approval: &ApprovalRequested) -> bool {
        let asked = approval.expires_at - crate::limits::APPROVAL_TTL;
        self.stopped || self.stopped_at.is_some_and(|at| at >= asked)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Profile {
    /// The owner the profiles service reported it for first; `None` for a profile recorded
    /// before owners were (no session binds it, and no grant applies on it, until it is claimed).
    #[serde(default)]
    pub owner: Option<String>,
    pub generation: u64,
    pub revoked: bool,
    pub deleted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    Pending,
    Resolved(Resolution),
    Expired,
}

impl ApprovalState {
    /// The one spelling clients see: `PENDING`, `APPROVED`, `DENIED`, `TAKEN_OVER` (denied to the
    /// agent, the owner acting in the live tab), `WITHDRAWN` (the run that asked ended) or
    /// `EXPIRED`.
    pub const fn code(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Resolved(Resolution::TakeOver) => "TAKEN_OVER",
            Self::Resolved(Resolution::Withdrawn) => "WITHDRAWN",
            Self::Resolved(r) => r.status().code(),
            Self::Expired => "EXPIRED",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    pub requested: ApprovalRequested,
    pub state: ApprovalState,
    /// SHA-256 (hex) of the approval token issued for it, if any.
    pub token_sha256: Option<String>,
    pub token_redeemed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub created: TaskGrantCreated,
    pub actions_used: u32,
    pub chars_used: u32,
    pub ended: Option<EndReason>,
}

impl Grant {
    pub fn is_active(&self) -> bool {
        self.ended.is_none()
    }
}

/// The snapshots one run has named, and the newest. Naming an older one again does not make it
/// current: snapshots only move forward.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSnapshots {
    pub current: String,
    pub seen: std::collections::HashSet<String>,
}

impl RunSnapshots {
    pub fn named(&mut self, snapshot: &str) {
        if self.seen.insert(snapshot.to_owned()) {
            snapshot.clone_into(&mut self.current);
        }
    }
}

/// Everything the rules read, folded from the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct World {
    pub settings: TaskGrantSettings,
    pub sessions: HashMap<String, Session>,
    pub profiles: HashMap<String, Profile>,
    pub approvals: HashMap<Uuid, Approval>,
    pub grants: HashMap<Uuid, Grant>,
    pub standing: Option<StandingGrantPinned>,
    /// The policy version recorded in force (`None` until an operator records one).
    pub policy: Option<String>,
    /// Each run's snapshots as the authorizer has seen them (in a card's binding or an allowed
    /// act), keyed by session and run: a token fits only the newest.
    pub run_snapshots: HashMap<(String, String), RunSnapshots>,
}

/// A time as the store keeps it, to the microsecond: what an event records is then exactly what
/// the inline tables hold and a replay finds.
pub fn stored(t: OffsetDateTime) -> OffsetDateTime {
    ledger::hash::truncate_to_micros(t)
}

/// A tenant id the authority serves: the ledger's id rules, at most [`MAX_TENANT_LEN`] bytes and
/// no `.`, which separates the tenant from the id in a stream name.
pub fn tenant_id(value: &str) -> Result<TenantId, DomainError> {
    let invalid = |reason: &str| DomainError::Invalid { field: "tenant_id", reason: reason.into() };
    if value.len() > MAX_TENANT_LEN || value.contains('.') {
        return Err(invalid(&format!("is at most {MAX_TENANT_LEN} bytes with no '.'")));
    }
    TenantId::new(value).map_err(|e| invalid(&e.reason))
}

/// An entity's stream: `category-tenant.id`. Tenants hold no `.`, so two tenants never share a
/// stream, whatever ids they choose.
pub fn entity_stream(tenant: &TenantId, category: &str, id: &dyn std::fmt::Display) -> Result<StreamId, DomainError> {
    StreamId::of_entity(category, tenant, id)
        .map_err(|e| DomainError::Invalid { field: "id", reason: format!("{category} id: {}", e.reason) })
}

/// The tenant's deployment stream (settings and standing-grant pins).
pub fn deployment_stream(tenant: &TenantId) -> Result<StreamId, DomainError> {
    StreamId::new(format!("deployment-{tenant}"))
        .map_err(|e| DomainError::Invalid { field: "tenant_id", reason: e.reason })
}

/// The stream an event of `tenant` belongs to.
pub fn stream_of(tenant: &TenantId, event: &Event) -> Result<StreamId, DomainError> {
    let entity = |category: &str, id: &dyn std::fmt::Display| entity_stream(tenant, category, id);
    match event {
        Event::SessionCreated(e) => entity("session", &e.session_id),
        Event::SessionMessageRecorded(e) => entity("session", &e.session_id),
        Event::SessionDeleted(e) => entity("session", &e.session_id),
        Event::SessionStopped(e) => entity("session", &e.session_id),
        Event::SessionToolCalled(e) => entity("session", &e.session_id),
        Event::RunEscalated(e) => entity("session", &e.session_id),
        Event::RunStarted(e) => entity("session", &e.session_id),
        Event::RunRefused(e) => entity("session", &e.session_id),
        Event::RunCompleted(e) => entity("session", &e.session_id),
        Event::RunStepped(e) => entity("session", &e.session_id),
        Event::TaskStarted(e) => entity("session", &e.session_id),
        Event::TaskClaimed(e) => entity("session", &e.session_id),
        Event::ProfileClaimed(e) => entity("profile", &e.profile_id),
        Event::ProfileGenerationAdvanced(e) => entity("profile", &e.profile_id),
        Event::ProfileRevoked(e) => entity("profile", &e.profile_id),
        Event::ProfileDeleted(e) => entity("profile", &e.profile_id),
        Event::DeploymentScopesChanged(_)
        | Event::DeploymentPolicyChanged(_)
        | Event::StandingGrantPinned(_)
        | Event::StandingGrantUnpinned(_) => deployment_stream(tenant),
        Event::ApprovalRequested(e) => entity("approval", &e.approval_id),
        Event::ApprovalResolved(e) => entity("approval", &e.approval_id),
        Event::ApprovalExpired(e) => entity("approval", &e.approval_id),
        Event::ApprovalTokenIssued(e) => entity("approval", &e.approval_id),
        Event::ApprovalTokenRedeemed(e) => entity("approval", &e.approval_id),
        Event::TaskGrantCreated(e) => entity("grant", &e.grant_id),
        Event::TaskGrantEnded(e) => entity("grant", &e.grant_id),
        Event::ToolCallAuthorized(e) => match e.grant_id {
            Some(g) => entity("grant", &g),
            None => entity("session", &e.session_id),
        },
    }
}

impl World {
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::SessionCreated(e) => {
                self.sessions.insert(
                    e.session_id.clone(),
                    Session {
                        created: e.clone(),
                        newest_message_author: None,
                        turn_tools: Vec::new(),
                        deleted: false,
                        stopped: false,
                        stopped_at: None,
                        active_grant: None,
                        task: None,
                    },
                );
            }
            Event::SessionMessageRecorded(e) => {
                if let Some(s) = self.sessions.get_mut(&e.session_id) {
                    s.newest_message_author = Some(e.author);
                    if e.author == Author::Owner {
                        s.turn_tools.clear();
                        s.stopped = false;
                    }
                }
            }
            Event::SessionToolCalled(e) => {
                if let Some(s) = self.sessions.get_mut(&e.session_id) {
                    s.turn_tools.push(e.tool.clone());
                }
            }
            Event::SessionDeleted(e) => {
                if let Some(s) = self.sessions.get_mut(&e.session_id) {
                    s.deleted = true;
                }
            }
            Event::SessionStopped(e) => {
                if let Some(s) = self.sessions.get_mut(&e.session_id) {
                    s.stopped = true;
                    s.stopped_at = Some(e.stopped_at);
                    // A Stop ends the task: the owner's "continue" starts it again.
                    if let Some(t) = &mut s.task {
                        t.ended = true;
                    }
                }
            }
            Event::TaskStarted(e) => {
                if let Some(s) = self.sessions.get_mut(&e.session_id) {
                    let started = e.clone();
                    s.task = Some(SessionTask {
                        started,
                        attempt: 0,
                        run_id: None,
                        lease_until: None,
                        ended: false,
                        completed: false,
                    });
                }
            }
            Event::TaskClaimed(e) => {
                if let Some(t) = self.sessions.get_mut(&e.session_id).and_then(|s| s.task.as_mut()) {
                    t.attempt = e.attempt;
                    t.run_id = Some(e.run_id.clone());
                    t.lease_until = Some(e.lease_until);
                }
            }
            Event::RunEscalated(crate::catalogue::RunEscalated { session_id, run_id, .. })
            | Event::RunCompleted(crate::catalogue::RunCompleted { session_id, run_id, .. }) => {
                if let Some(t) = self.sessions.get_mut(session_id).and_then(|s| s.task.as_mut())
                    && t.run_id.as_ref() == Some(run_id)
                {
                    t.ended = true;
                    t.completed = matches!(event, Event::RunCompleted(_));
                }
            }
            Event::ProfileClaimed(e) => {
                self.profiles.entry(e.profile_id.clone()).or_default().owner = Some(e.owner_principal_id.clone())
            }
            Event::ProfileGenerationAdvanced(e) => {
                self.profiles.entry(e.profile_id.clone()).or_default().generation = e.generation
            }
            Event::ProfileRevoked(e) => self.profiles.entry(e.profile_id.clone()).or_default().revoked = true,
            Event::ProfileDeleted(e) => self.profiles.entry(e.profile_id.clone()).or_default().deleted = true,
            Event::DeploymentScopesChanged(e) => {
                self.settings = TaskGrantSettings { enabled: e.task_grants_enabled, scopes: e.scopes.clone() };
            }
            Event::DeploymentPolicyChanged(e) => self.policy = Some(e.policy_version.clone()),
            Event::ApprovalRequested(e) => {
                let approval = Approval {
                    requested: e.clone(),
                    state: ApprovalState::Pending,
                    token_sha256: None,
                    token_redeemed: false,
                };
                self.approvals.insert(e.approval_id, approval);
                if let Some(b) = &e.binding {
                    let key = (e.session_id.clone(), b.run_id.clone());
                    self.run_snapshots.entry(key).or_default().named(&b.snapshot_id);
                }
            }
            Event::ApprovalResolved(e) => {
                if let Some(a) = self.approvals.get_mut(&e.approval_id) {
                    a.state = ApprovalState::Resolved(e.resolution);
                }
            }
            Event::ApprovalExpired(e) => {
                if let Some(a) = self.approvals.get_mut(&e.approval_id) {
                    a.state = ApprovalState::Expired;
                }
            }
            Event::TaskGrantCreated(e) => {
                self.grants
                    .insert(e.grant_id, Grant { created: e.clone(), actions_used: 0, chars_used: 0, ended: None });
                if let Some(s) = self.sessions.get_mut(&e.session_id) {
                    s.active_grant = Some(e.grant_id);
                }
            }
            Event::ToolCallAuthorized(e) => {
                if let Some(snapshot) = &e.snapshot_id {
                    let key = (e.session_id.clone(), e.run_id.clone());
                    self.run_snapshots.entry(key).or_default().named(snapshot);
                }
                if let (AuthorizationKind::BrowserTaskGrant, Some(g)) = (e.authorization_kind, e.grant_id)
                    && let Some(grant) = self.grants.get_mut(&g)
                {
                    grant.actions_used += 1;
                    grant.chars_used += e.typed_chars;
                }
            }
            Event::TaskGrantEnded(e) => {
                if let Some(g) = self.grants.get_mut(&e.grant_id) {
                    g.ended = Some(e.reason);
                    if let Some(s) = self.sessions.get_mut(&g.created.session_id)
                        && s.active_grant == Some(e.grant_id)
                    {
                        s.active_grant = None;
                    }
                }
            }
            Event::StandingGrantPinned(e) => self.standing = Some(e.clone()),
            Event::StandingGrantUnpinned(_) => self.standing = None,
            Event::ApprovalTokenIssued(e) => {
                if let Some(a) = self.approvals.get_mut(&e.approval_id) {
                    a.token_sha256 = Some(e.token_sha256.clone());
                }
            }
            Event::ApprovalTokenRedeemed(e) => {
                if let Some(a) = self.approvals.get_mut(&e.approval_id) {
                    a.token_redeemed = true;
                }
            }
            Event::RunStarted(_) | Event::RunRefused(_) | Event::RunStepped(_) => {}
        }
    }

    pub fn applied(mut self, events: &[Event]) -> Self {
        events.iter().for_each(|e| self.apply(e));
        self
    }

    pub(super) fn end(&self, grant_id: Uuid, reason: EndReason) -> Option<Event> {
        self.grants
            .get(&grant_id)
            .filter(|g| g.is_active())
            .map(|g| Event::TaskGrantEnded(TaskGrantEnded { grant_id, reason, uses: Some(g.actions_used) }))
    }

    /// Whether the session's bound profile, if any, is its own principal's: a session bound before
    /// profiles had owners may hold another's, and nothing may act through it.
    pub fn session_profile_is_own(&self, session: &Session) -> bool {
        session
            .created
            .browser_profile_id
            .as_deref()
            .is_none_or(|p| self.profile_owned_by(p, &session.created.principal_id))
    }

    /// Whether `profile_id` was recorded as `principal`'s.
    pub fn profile_owned_by(&self, profile_id: &str, principal: &str) -> bool {
        self.profiles.get(profile_id).and_then(|p| p.owner.as_deref()) == Some(principal)
    }

    /// The claim a profile report makes: recorded on the first report, nothing on a later one by
    /// the same owner, and another owner's profile is not found (nothing is written).
    pub(super) fn claim(&self, profile_id: &str, owner: &str) -> Result<Vec<Event>, DomainError> {
        match self.profiles.get(profile_id).and_then(|p| p.owner.as_deref()) {
            None => Ok(vec![Event::ProfileClaimed(ProfileClaimed {
                profile_id: profile_id.to_owned(),
                owner_principal_id: owner.to_owned(),
            })]),
            Some(o) if o == owner => Ok(vec![]),
            Some(_) => Err(DomainError::not_found("browser profile", profile_id)),
        }
    }

    /// [`World::claim`] when the report names an owner; nothing to record when it names none.
    pub(super) fn claim_if(&self, profile_id: &str, owner: Option<&str>) -> Result<Vec<Event>, DomainError> {
        owner.map_or(Ok(vec![]), |o| self.claim(profile_id, o))
    }

    pub(super) fn end_grants_on_profile(&self, profile_id: &str, reason: EndReason) -> Vec<Event> {
        let mut ids: Vec<Uuid> = self
            .grants
            .values()
            .filter(|g| g.is_active() && g.created.profile_id == profile_id)
            .map(|g| g.created.grant_id)
            .collect();
        ids.sort();
        ids.into_iter().filter_map(|id| self.end(id, reason)).collect()
    }

    /// A session of this principal; another principal's session does not exist for the caller.
    pub fn session_of(&self, session_id: &str, principal_id: &str) -> Result<&Session, DomainError> {
        self.sessions
            .get(session_id)
            .filter(|s| s.created.principal_id == principal_id && !s.deleted)
            .ok_or_else(|| DomainError::not_found("session", session_id))
    }
}

impl World {
    /// Refuses a replica whose policy is not the one recorded in force.
    pub fn policy_in_force(&self, running: &str) -> Result<(), DomainError> {
        match &self.policy {
            Some(recorded) if recorded != running => {
                Err(DomainError::PolicyNotInForce { running: running.to_owned(), recorded: recorded.clone() })
            }
            _ => Ok(()),
        }
    }
}

/// The versions an authorization runs under; a task grant pins both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    pub agent: String,
    pub policy: String,
}
