//! The grant lifecycle as a pure domain: a `World` folded from events, commands decided into
//! events, and `authorize` deciding one `browser.act` in the decision record's order. No IO and
//! no clock: time and new ids come in with each call.

use std::collections::HashMap;

use crate::catalogue::{
    ActionView, ApprovalExpired, ApprovalRequested, ApprovalResolved, ApprovalStatus, ApprovalTokenIssued,
    ApprovalTokenRedeemed, Author, AuthorizationKind, DeploymentPolicyChanged, DeploymentScopesChanged, EndReason,
    Event, Offer, ProfileClaimed, ProfileDeleted, ProfileGenerationAdvanced, ProfileRevoked, Resolution,
    SessionCreated, SessionDeleted, SessionMessageRecorded, SessionToolCalled, SignInPhase, SiteScope,
    StandingGrantPinned, StandingGrantUnpinned, Surface, TaskGrantCreated, TaskGrantEnded, TokenBinding,
    ToolCallAuthorized,
};
use classifier::{Action, Consequence, ElementFacts, Named, PageFacts, TaskScope};
use ledger::StreamId;
use ledger::TenantId;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::limits::{APPROVAL_TTL, GRANT_DURATION, MAX_ACTIONS, MAX_TENANT_LEN, MAX_TYPED_CHARS};
use crate::policy::{ActionKind, Policy, Verdict};
use crate::scopes::{TaskGrantSettings, scope_for};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub created: SessionCreated,
    pub newest_message_author: Option<Author>,
    /// The tools called in this session since the owner's newest message, as recorded.
    pub turn_tools: Vec<String>,
    pub deleted: bool,
    /// Not stored with the session: the grant rows say which is active.
    #[serde(skip)]
    pub active_grant: Option<Uuid>,
    /// The session stream's version when this request read it (0 when folded): a use is
    /// consumed only while the session is still at it.
    #[serde(skip)]
    pub read_version: u64,
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
    /// The one spelling clients see: `PENDING`, `APPROVED`, `DENIED` or `EXPIRED`.
    pub const fn code(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
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
    t.replace_nanosecond(t.nanosecond() - t.nanosecond() % 1_000).unwrap_or(t)
}

/// A tenant id the authority serves: the ledger's id rules, at most [`MAX_TENANT_LEN`] bytes and
/// no `.`, which separates the tenant from the id in a stream name.
pub fn tenant_id(value: &str) -> Result<TenantId, DomainError> {
    let invalid = |reason: &str| DomainError::Invalid { field: "tenant_id", reason: reason.into() };
    if value.len() > MAX_TENANT_LEN || value.contains('.') {
        return Err(invalid("is at most 64 bytes with no '.'"));
    }
    TenantId::new(value).map_err(|e| invalid(&e.reason))
}

/// An entity's stream: `category-tenant.id`. Tenants hold no `.`, so two tenants never share a
/// stream, whatever ids they choose.
pub fn entity_stream(tenant: &TenantId, category: &str, id: &dyn std::fmt::Display) -> Result<StreamId, DomainError> {
    StreamId::new(format!("{category}-{tenant}.{id}"))
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
        Event::SessionToolCalled(e) => entity("session", &e.session_id),
        Event::RunEscalated(e) => entity("session", &e.session_id),
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
                        active_grant: None,
                        read_version: 0,
                    },
                );
            }
            Event::SessionMessageRecorded(e) => {
                if let Some(s) = self.sessions.get_mut(&e.session_id) {
                    s.newest_message_author = Some(e.author);
                    if e.author == Author::Owner {
                        s.turn_tools.clear();
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
            Event::RunEscalated(_) => {}
        }
    }

    pub fn applied(mut self, events: &[Event]) -> Self {
        events.iter().for_each(|e| self.apply(e));
        self
    }

    fn end(&self, grant_id: Uuid, reason: EndReason) -> Option<Event> {
        self.grants
            .get(&grant_id)
            .filter(|g| g.is_active())
            .map(|_| Event::TaskGrantEnded(TaskGrantEnded { grant_id, reason }))
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
    fn claim(&self, profile_id: &str, owner: &str) -> Result<Vec<Event>, DomainError> {
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
    fn claim_if(&self, profile_id: &str, owner: Option<&str>) -> Result<Vec<Event>, DomainError> {
        owner.map_or(Ok(vec![]), |o| self.claim(profile_id, o))
    }

    fn end_grants_on_profile(&self, profile_id: &str, reason: EndReason) -> Vec<Event> {
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

/// Why a command does not fit the current state: one spelling each, the wire's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    SessionExists,
    ApprovalNotPending,
    ApprovalExpired,
    TaskGrantsDisabled,
    NoOffer,
    OfferMismatch,
    OfferNoLongerValid,
    /// The terminal refusal for a token that does not fit (seed 004's error contract).
    ApprovalTokenInvalid,
    /// A tool-call id already decided with other arguments: a retry must repeat the call.
    ToolCallReused,
    /// A tool call allowed under a grant that has ended since: its retry dispatches nothing.
    ToolCallGrantEnded,
}

impl Conflict {
    /// The one spelling: the `ErrorInfo` reason on the wire, and the message's prefix.
    pub const fn code(self) -> &'static str {
        match self {
            Self::SessionExists => "SESSION_EXISTS",
            Self::ApprovalNotPending => "APPROVAL_NOT_PENDING",
            Self::ApprovalExpired => "APPROVAL_EXPIRED",
            Self::TaskGrantsDisabled => "TASK_GRANTS_DISABLED",
            Self::NoOffer => "NO_OFFER",
            Self::OfferMismatch => "OFFER_MISMATCH",
            Self::OfferNoLongerValid => "OFFER_NO_LONGER_VALID",
            Self::ApprovalTokenInvalid => "APPROVAL_TOKEN_INVALID",
            Self::ToolCallReused => "TOOL_CALL_REUSED",
            Self::ToolCallGrantEnded => "TOOL_CALL_GRANT_ENDED",
        }
    }
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    /// Absent, or another principal's: the caller cannot tell which.
    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },
    /// The command does not fit the current state; nothing changed.
    #[error("{code}: {detail}")]
    Conflict { code: Conflict, detail: String },
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    /// This replica runs another policy than the one recorded in force: another replica may
    /// serve the call.
    #[error("this replica runs policy {running}; the deployment has {recorded} in force")]
    PolicyNotInForce { running: String, recorded: String },
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

impl DomainError {
    fn not_found(what: &'static str, id: impl ToString) -> Self {
        Self::NotFound { what, id: id.to_string() }
    }

    pub fn conflict(code: Conflict, detail: impl Into<String>) -> Self {
        Self::Conflict { code, detail: detail.into() }
    }
}

/// The versions an authorization runs under; a task grant pins both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    pub agent: String,
    pub policy: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    CreateSession(SessionCreated),
    RecordMessage(SessionMessageRecorded),
    DeleteSession {
        session_id: String,
        principal_id: String,
    },
    /// A sign-in began or became ready: the generation advances and every grant on it ends.
    /// A profile created for its owner: recorded as that owner's, nothing else changes.
    ClaimProfile {
        profile_id: String,
        owner_principal_id: String,
    },
    /// The other profile commands name the owner the profiles service reports them for: the
    /// first report records it, and one naming another owner finds no such profile. A report
    /// naming none (a profiles service older than owners) still ends the grants on the profile:
    /// ending grants is never unsafe, and refusing it would leave them live.
    AdvanceProfile {
        profile_id: String,
        owner_principal_id: Option<String>,
        phase: SignInPhase,
    },
    RevokeProfile {
        profile_id: String,
        owner_principal_id: Option<String>,
    },
    DeleteProfile {
        profile_id: String,
        owner_principal_id: Option<String>,
    },
    /// A tool call the worker made: the session's record of the turn.
    RecordToolCall(SessionToolCalled),
    ChangeSettings(TaskGrantSettings),
    /// The operator's whole deployment record at once: settings and pin, recorded together.
    ApplyDeployment {
        settings: TaskGrantSettings,
        pin: Option<StandingPin>,
        /// The version of the policy every replica must run from now on.
        policy_version: Option<String>,
        now: OffsetDateTime,
    },
    /// The operator's standing-grant pin as configured now (`None`: no pin). Recorded only when
    /// it differs from the pin in force; a new pin lasts [`STANDING_GRANT_DURATION`].
    PinStandingGrant {
        pin: Option<StandingPin>,
        now: OffsetDateTime,
    },
    ResolveApproval {
        approval_id: Uuid,
        principal_id: String,
        resolution: Resolution,
        /// `approve_for_task` repeats the offered scope.
        repeated_scope: Option<SiteScope>,
        new_grant_id: Uuid,
        versions: Versions,
        now: OffsetDateTime,
        /// The SHA-256 (hex) of a fresh approval token, issued when the action is approved and
        /// the approval is bound to a run, snapshot and node.
        token_sha256: Option<String>,
    },
    /// Redeems an approval token for the exact run, snapshot and node it was issued for, by the
    /// runtime acting for the owner of the approval's session.
    RedeemToken {
        principal_id: String,
        token_sha256: String,
        binding: TokenBinding,
        now: OffsetDateTime,
    },
    ExpireApprovals {
        now: OffsetDateTime,
    },
    RevokeGrant {
        grant_id: Uuid,
        principal_id: String,
    },
    /// Ends every grant whose time is up.
    Sweep {
        now: OffsetDateTime,
    },
}

/// Decides a command against the world. `Ok(vec![])` means nothing to record.
pub fn decide(world: &World, command: Command) -> Result<Vec<Event>, DomainError> {
    match command {
        Command::CreateSession(created) => {
            if world.sessions.contains_key(&created.session_id) {
                return Err(DomainError::conflict(Conflict::SessionExists, created.session_id));
            }
            // Another owner's profile, or one no owner was recorded for, does not exist for this one.
            if let Some(p) = &created.browser_profile_id
                && !world.profile_owned_by(p, &created.principal_id)
            {
                return Err(DomainError::not_found("browser profile", p));
            }
            Ok(vec![Event::SessionCreated(created)])
        }
        Command::RecordToolCall(call) => {
            let session = world.sessions.get(&call.session_id).filter(|s| !s.deleted);
            session.ok_or_else(|| DomainError::not_found("session", &call.session_id))?;
            Ok(vec![Event::SessionToolCalled(call)])
        }
        Command::RecordMessage(message) => {
            let session = world.sessions.get(&message.session_id).filter(|s| !s.deleted);
            session.ok_or_else(|| DomainError::not_found("session", &message.session_id))?;
            Ok(vec![Event::SessionMessageRecorded(message)])
        }
        Command::DeleteSession { session_id, principal_id } => {
            let session = world.session_of(&session_id, &principal_id)?;
            let mut events = vec![Event::SessionDeleted(SessionDeleted { session_id: session_id.clone() })];
            // The record's nine reasons have none for a deleted chat: the owner's deletion revokes.
            events.extend(session.active_grant.and_then(|g| world.end(g, EndReason::Revoked)));
            Ok(events)
        }
        Command::ClaimProfile { profile_id, owner_principal_id } => world.claim(&profile_id, &owner_principal_id),
        Command::AdvanceProfile { profile_id, owner_principal_id, phase } => {
            let mut events = world.claim_if(&profile_id, owner_principal_id.as_deref())?;
            let generation = world.profiles.get(&profile_id).map_or(0, |p| p.generation) + 1;
            events.push(Event::ProfileGenerationAdvanced(ProfileGenerationAdvanced {
                profile_id: profile_id.clone(),
                generation,
                phase,
            }));
            events.extend(world.end_grants_on_profile(&profile_id, EndReason::ProfileChanged));
            Ok(events)
        }
        Command::RevokeProfile { profile_id, owner_principal_id } => {
            let mut events = world.claim_if(&profile_id, owner_principal_id.as_deref())?;
            events.push(Event::ProfileRevoked(ProfileRevoked { profile_id: profile_id.clone() }));
            events.extend(world.end_grants_on_profile(&profile_id, EndReason::ProfileRevoked));
            Ok(events)
        }
        Command::DeleteProfile { profile_id, owner_principal_id } => {
            let mut events = world.claim_if(&profile_id, owner_principal_id.as_deref())?;
            events.push(Event::ProfileDeleted(ProfileDeleted { profile_id: profile_id.clone() }));
            events.extend(world.end_grants_on_profile(&profile_id, EndReason::ProfileRevoked));
            Ok(events)
        }
        Command::ApplyDeployment { settings, pin, policy_version, now } => {
            let mut events = decide(world, Command::ChangeSettings(settings))?;
            events.extend(decide(world, Command::PinStandingGrant { pin, now })?);
            // A new policy is in force for every replica at once: the grants made under another
            // end in the same append, so no replica still running the old one can use them.
            if let Some(version) = policy_version.filter(|v| world.policy.as_ref() != Some(v)) {
                let after = world.clone().applied(&events);
                let mut stale: Vec<Uuid> = after
                    .grants
                    .values()
                    .filter(|g| g.is_active() && g.created.policy_version != version)
                    .map(|g| g.created.grant_id)
                    .collect();
                stale.sort();
                events.push(Event::DeploymentPolicyChanged(DeploymentPolicyChanged { policy_version: version }));
                events.extend(stale.into_iter().filter_map(|id| after.end(id, EndReason::PolicyChanged)));
            }
            Ok(events)
        }
        Command::PinStandingGrant { pin, now } => {
            match (pin, world.standing.as_ref()) {
                // The same pin, expired or not: a restart renews nothing; a new grant id does.
                (Some(pin), Some(c)) if c.grant_id == pin.grant_id && c.profile_id == pin.profile_id => Ok(vec![]),
                (Some(pin), _) => Ok(vec![Event::StandingGrantPinned(StandingGrantPinned {
                    grant_id: pin.grant_id,
                    profile_id: pin.profile_id,
                    expires_at: stored(now + STANDING_GRANT_DURATION),
                })]),
                (None, _) => Ok(world
                    .standing
                    .as_ref()
                    .map(|c| Event::StandingGrantUnpinned(StandingGrantUnpinned { grant_id: c.grant_id.clone() }))
                    .into_iter()
                    .collect()),
            }
        }
        Command::ChangeSettings(settings) => {
            if settings == world.settings {
                return Ok(vec![]);
            }
            // A grant whose scope is gone, or every grant once the flag is off, ends in the same
            // append: a use on another replica then finds its row ended.
            let mut ended: Vec<Uuid> = world
                .grants
                .values()
                .filter(|g| g.is_active() && !(settings.enabled && settings.scopes.contains(&g.created.scope)))
                .map(|g| g.created.grant_id)
                .collect();
            ended.sort();
            let mut events = vec![Event::DeploymentScopesChanged(DeploymentScopesChanged {
                task_grants_enabled: settings.enabled,
                scopes: settings.scopes,
            })];
            events.extend(ended.into_iter().filter_map(|id| world.end(id, EndReason::ScopeRemoved)));
            Ok(events)
        }
        Command::ResolveApproval {
            approval_id,
            principal_id,
            resolution,
            repeated_scope,
            new_grant_id,
            versions,
            now,
            token_sha256,
        } => {
            let mut events =
                resolve(world, approval_id, &principal_id, resolution, repeated_scope, new_grant_id, &versions, now)?;
            let binding = &world.approvals[&approval_id].requested.binding;
            if let (Some(token_sha256), Some(binding), ApprovalStatus::Approved) =
                (token_sha256, binding, resolution.status())
            {
                events.push(Event::ApprovalTokenIssued(ApprovalTokenIssued {
                    approval_id,
                    token_sha256,
                    run_id: binding.run_id.clone(),
                    snapshot_id: binding.snapshot_id.clone(),
                    node_ref: binding.node_ref.clone(),
                }));
            }
            Ok(events)
        }
        Command::RedeemToken { principal_id, token_sha256, binding, now } => {
            // Any mismatch is the same terminal refusal: a token that does not fit is a policy
            // violation, not something to retry.
            let invalid =
                || DomainError::conflict(Conflict::ApprovalTokenInvalid, "the token does not fit this action");
            let approval = world
                .approvals
                .values()
                .find(|a| a.token_sha256.as_deref() == Some(token_sha256.as_str()))
                .ok_or_else(invalid)?;
            let session = world.sessions.get(&approval.requested.session_id).filter(|s| !s.deleted);
            let owner = session.map(|s| s.created.principal_id.as_str());
            let fits = approval.requested.binding.as_ref() == Some(&binding)
                && owner == Some(principal_id.as_str())
                && session.is_some_and(|s| world.session_profile_is_own(s))
                && world
                    .run_snapshots
                    .get(&(approval.requested.session_id.clone(), binding.run_id.clone()))
                    .is_some_and(|r| r.current == binding.snapshot_id)
                && !approval.token_redeemed
                && approval.requested.expires_at > now;
            if !fits {
                return Err(invalid());
            }
            let approval_id = approval.requested.approval_id;
            Ok(vec![Event::ApprovalTokenRedeemed(ApprovalTokenRedeemed { approval_id, token_sha256 })])
        }
        Command::ExpireApprovals { now } => {
            let mut ids: Vec<Uuid> = world
                .approvals
                .values()
                .filter(|a| a.state == ApprovalState::Pending && a.requested.expires_at <= now)
                .map(|a| a.requested.approval_id)
                .collect();
            ids.sort();
            Ok(ids.into_iter().map(|approval_id| Event::ApprovalExpired(ApprovalExpired { approval_id })).collect())
        }
        Command::RevokeGrant { grant_id, principal_id } => {
            let grant = world
                .grants
                .get(&grant_id)
                .filter(|g| g.created.principal_id == principal_id)
                .ok_or_else(|| DomainError::not_found("grant", grant_id))?;
            // Revoking an ended grant records nothing: each grant ends exactly once.
            Ok(world.end(grant.created.grant_id, EndReason::Revoked).into_iter().collect())
        }
        Command::Sweep { now } => {
            let mut ids: Vec<Uuid> = world
                .grants
                .values()
                .filter(|g| g.is_active() && g.created.expires_at <= now)
                .map(|g| g.created.grant_id)
                .collect();
            ids.sort();
            Ok(ids.into_iter().filter_map(|id| world.end(id, EndReason::Expired)).collect())
        }
    }
}

/// Why the session's task grant did not cover an act, or no grant applied: one spelling each,
/// the card's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotCovered {
    SessionNotFound,
    /// No active task grant: the card asks without a "not covered" reason.
    NoTaskGrant,
    GrantExpired,
    GrantExhausted,
    ScopeRemoved,
    ProfileRevoked,
    ProfileChanged,
    AgentChanged,
    PolicyChanged,
    TaskGrantsDisabled,
    PinMismatch,
    SessionDeleted,
    SessionNotEligible,
    OwnerNotNewest,
    RunNotEligible,
    TurnNotBrowserOnly,
    /// A policy rule escalated the act to the owner.
    PolicyEscalation,
    /// The grant's row kept refusing the use a fresh read allowed (a replica's clock behind the
    /// database's, at the very end of the grant): ask rather than retry.
    GrantSpent,
    /// The classifier's own reason.
    Classifier(classifier::coverage::Reason),
}

impl NotCovered {
    pub fn code(self) -> &'static str {
        match self {
            Self::SessionNotFound => "session_not_found",
            Self::NoTaskGrant => "no_task_grant",
            Self::GrantExpired => "grant_expired",
            Self::GrantExhausted => "grant_exhausted",
            Self::ScopeRemoved => "scope_removed",
            Self::ProfileRevoked => "profile_revoked",
            Self::ProfileChanged => "profile_changed",
            Self::AgentChanged => "agent_changed",
            Self::PolicyChanged => "policy_changed",
            Self::TaskGrantsDisabled => "task_grants_disabled",
            Self::PinMismatch => "pin_mismatch",
            Self::SessionDeleted => "session_deleted",
            Self::SessionNotEligible => "session_not_eligible",
            Self::OwnerNotNewest => "owner_not_newest",
            Self::RunNotEligible => "run_not_eligible",
            Self::TurnNotBrowserOnly => "turn_not_browser_only",
            Self::PolicyEscalation => "policy_escalation",
            Self::GrantSpent => "grant_spent",
            Self::Classifier(r) => r.code(),
        }
    }
}

/// Why a session cannot use a task grant, if it cannot.
fn session_ineligible(session: &Session) -> Option<NotCovered> {
    let c = &session.created;
    if session.deleted {
        Some(NotCovered::SessionDeleted)
    } else if c.surface != Surface::Interactive || c.browser_profile_id.is_none() || c.schedule_id.is_some() {
        Some(NotCovered::SessionNotEligible)
    } else {
        None
    }
}

#[allow(clippy::too_many_arguments)] // one command's fields, unpacked
fn resolve(
    world: &World,
    approval_id: Uuid,
    principal_id: &str,
    resolution: Resolution,
    repeated_scope: Option<SiteScope>,
    new_grant_id: Uuid,
    versions: &Versions,
    now: OffsetDateTime,
) -> Result<Vec<Event>, DomainError> {
    let approval = world.approvals.get(&approval_id).ok_or_else(|| DomainError::not_found("approval", approval_id))?;
    let session = world
        .sessions
        .get(&approval.requested.session_id)
        .filter(|s| s.created.principal_id == principal_id && !s.deleted)
        .ok_or_else(|| DomainError::not_found("approval", approval_id))?;
    if approval.state != ApprovalState::Pending {
        return Err(DomainError::conflict(
            Conflict::ApprovalNotPending,
            "the approval was already resolved or expired",
        ));
    }
    if approval.requested.expires_at <= now {
        return Err(DomainError::conflict(Conflict::ApprovalExpired, "the approval expired"));
    }
    let resolved = |grant_id| {
        Event::ApprovalResolved(ApprovalResolved { approval_id, resolution, status: resolution.status(), grant_id })
    };
    if resolution != Resolution::ApproveForTask {
        return Ok(vec![resolved(None)]);
    }
    // Every refusal below leaves the approval pending, so the owner can still allow once.
    world.policy_in_force(&versions.policy)?;
    if !world.settings.enabled {
        return Err(DomainError::conflict(Conflict::TaskGrantsDisabled, "task grants are not enabled"));
    }
    let offer = approval
        .requested
        .offer
        .as_ref()
        .ok_or_else(|| DomainError::conflict(Conflict::NoOffer, "the approval carries no offer"))?;
    if repeated_scope.as_ref() != Some(&offer.scope) {
        return Err(DomainError::conflict(Conflict::OfferMismatch, "the origin and prefix differ from the offer"));
    }
    if !world.settings.scopes.contains(&offer.scope) {
        return Err(DomainError::conflict(Conflict::OfferNoLongerValid, "the offered scope is no longer configured"));
    }
    if let Some(why) = session_ineligible(session) {
        return Err(DomainError::conflict(Conflict::OfferNoLongerValid, why.code()));
    }
    let profile_id = session.created.browser_profile_id.clone().unwrap_or_default();
    let profile = world.profiles.get(&profile_id).cloned().unwrap_or_default();
    if profile.revoked || profile.deleted {
        return Err(DomainError::conflict(Conflict::OfferNoLongerValid, "the browser profile was revoked"));
    }
    if profile.owner.as_deref() != Some(principal_id) {
        return Err(DomainError::conflict(Conflict::OfferNoLongerValid, "the browser profile is not this owner's"));
    }
    let mut events = vec![resolved(Some(new_grant_id))];
    events.extend(session.active_grant.and_then(|old| world.end(old, EndReason::Superseded)));
    events.push(Event::TaskGrantCreated(TaskGrantCreated {
        grant_id: new_grant_id,
        approval_id,
        tenant_id: session.created.tenant_id.clone(),
        principal_id: principal_id.to_owned(),
        session_id: session.created.session_id.clone(),
        profile_id,
        profile_generation: profile.generation,
        agent_version: versions.agent.clone(),
        policy_version: versions.policy.clone(),
        scope: offer.scope.clone(),
        created_at: stored(now),
        expires_at: stored(now + GRANT_DURATION),
        max_actions: MAX_ACTIONS,
        max_typed_chars: MAX_TYPED_CHARS,
    }));
    Ok(events)
}

/// How the run asking is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunContext {
    pub interactive: bool,
    pub top_level: bool,
}

/// One `browser.act` to decide.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorizeRequest {
    pub tenant_id: String,
    pub principal_id: String,
    pub session_id: String,
    pub run_id: String,
    pub tool_call_id: String,
    pub run: RunContext,
    /// The tool calls of this model turn since the owner's newest message.
    pub turn_tool_calls: Vec<String>,
    pub versions: Versions,
    pub element: ElementFacts,
    pub page: PageFacts,
    pub action: Action,
    /// What the approval card would show; recorded with every grant-authorized use.
    pub view: ActionView,
    /// The snapshot and node the element was named in, when the caller has them: an approval
    /// token is bound to them.
    pub snapshot: Option<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow { kind: AuthorizationKind, grant_id: Option<Uuid>, use_ordinal: Option<u32>, typed_chars: u32 },
    RequireApproval { approval_id: Uuid, reason: Option<String>, offer: Option<Offer> },
    Deny { code: String },
}

/// A decision and the events that record it (ends found on the way included).
#[derive(Debug, Clone, PartialEq)]
pub struct Authorization {
    pub decision: Decision,
    pub events: Vec<Event>,
}

const BROWSER_TOOLS: [&str; 3] = ["browser.navigate", "browser.observe", "browser.act"];

/// A turn qualifies when it made tool calls and every one is a browser call, directly or through
/// `tool.call`. An empty list proves nothing about the turn, so it does not qualify.
fn browser_only(calls: &[String]) -> bool {
    !calls.is_empty() && calls.iter().all(|c| is_browser_tool(c))
}

fn is_browser_tool(call: &str) -> bool {
    BROWSER_TOOLS.contains(&call.strip_prefix("tool.call:").unwrap_or(call))
}

fn typed_chars(action: &Action) -> u32 {
    match action {
        Action::Type { text } => u32::try_from(text.chars().count()).unwrap_or(u32::MAX),
        _ => 0,
    }
}

/// Why the session's task grant does not cover an action: a stable code, and the grant's end
/// when it has ended on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Refusal {
    why: NotCovered,
    end: Option<(Uuid, EndReason)>,
}

const fn refusal(why: NotCovered) -> Refusal {
    Refusal { why, end: None }
}

/// Checks the session's task grant, in the decision record's order.
fn task_grant_covers(world: &World, req: &AuthorizeRequest, now: OffsetDateTime) -> Result<Uuid, Refusal> {
    let session = world.sessions.get(&req.session_id).ok_or(refusal(NotCovered::SessionNotFound))?;
    let grant_id = session.active_grant.ok_or(refusal(NotCovered::NoTaskGrant))?;
    let grant = &world.grants[&grant_id];
    let c = &grant.created;
    let ended = |reason: EndReason, why: NotCovered| Refusal { why, end: Some((grant_id, reason)) };
    if now >= c.expires_at {
        return Err(ended(EndReason::Expired, NotCovered::GrantExpired));
    }
    if grant.actions_used >= MAX_ACTIONS {
        return Err(ended(EndReason::Exhausted, NotCovered::GrantExhausted));
    }
    if !world.settings.scopes.contains(&c.scope) {
        return Err(ended(EndReason::ScopeRemoved, NotCovered::ScopeRemoved));
    }
    let profile = world.profiles.get(&c.profile_id).cloned().unwrap_or_default();
    if profile.revoked || profile.deleted {
        return Err(ended(EndReason::ProfileRevoked, NotCovered::ProfileRevoked));
    }
    if profile.generation != c.profile_generation {
        return Err(ended(EndReason::ProfileChanged, NotCovered::ProfileChanged));
    }
    if req.versions.agent != c.agent_version {
        return Err(ended(EndReason::AgentChanged, NotCovered::AgentChanged));
    }
    if req.versions.policy != c.policy_version {
        return Err(ended(EndReason::PolicyChanged, NotCovered::PolicyChanged));
    }
    if !world.settings.enabled {
        return Err(refusal(NotCovered::TaskGrantsDisabled));
    }
    let pins_match = req.tenant_id == c.tenant_id
        && req.principal_id == c.principal_id
        && req.session_id == c.session_id
        && session.created.browser_profile_id.as_deref() == Some(c.profile_id.as_str());
    if !pins_match {
        return Err(refusal(NotCovered::PinMismatch));
    }
    if let Some(why) = session_ineligible(session) {
        return Err(refusal(why));
    }
    if session.newest_message_author != Some(Author::Owner) {
        return Err(refusal(NotCovered::OwnerNotNewest));
    }
    if !(req.run.interactive && req.run.top_level) {
        return Err(refusal(NotCovered::RunNotEligible));
    }
    // The caller's list and the session's own record must both show a browser-only turn.
    if !browser_only(&req.turn_tool_calls) || !session.turn_tools.iter().all(|t| is_browser_tool(t)) {
        return Err(refusal(NotCovered::TurnNotBrowserOnly));
    }
    let scope = TaskScope {
        origin: c.scope.origin.clone(),
        path_prefix: c.scope.path_prefix.clone(),
        chars_remaining: MAX_TYPED_CHARS.saturating_sub(grant.chars_used),
    };
    classifier::covers(&classifier::Grant::Task(scope), &req.action, &req.element, &req.page)
        .map_err(|e| refusal(NotCovered::Classifier(e.reason)))?;
    Ok(grant_id)
}

/// The deny code of an act in a session whose browser profile is not its owner's (bound before
/// profiles had owners).
pub const PROFILE_NOT_OWNED: &str = "browser_profile_not_owned";

/// An operator's standing-grant pin: which grant, on which browser profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandingPin {
    pub grant_id: String,
    pub profile_id: String,
}

/// How long a standing-grant pin lasts from when it is recorded (the record: up to thirty days).
pub const STANDING_GRANT_DURATION: time::Duration = time::Duration::days(30);

/// The pinned standing grant covers routine only, on its own profile, until it expires.
fn standing_grant_covers(world: &World, req: &AuthorizeRequest, now: OffsetDateTime) -> bool {
    let Some(pin) = &world.standing else { return false };
    // A session whose profile is not its owner's never reaches here (`authorize` denies it), so
    // the pin covers its profile's own owner only.
    let profile = world.sessions.get(&req.session_id).and_then(|s| s.created.browser_profile_id.as_deref());
    now < pin.expires_at
        && profile == Some(pin.profile_id.as_str())
        && classifier::covers(&classifier::Grant::Standing, &req.action, &req.element, &req.page).is_ok()
}

/// The offer an approval for `req` carries: only with the flag on, only where a grant made from
/// it could ever apply — an eligible session, a describable element on a field a grant may act
/// on, a page inside a configured scope with no sensitive segment. The scope is the configured
/// entry, never one taken from the page.
pub fn offer_for(world: &World, req: &AuthorizeRequest) -> Option<Offer> {
    if !world.settings.enabled || !req.view.describable {
        return None;
    }
    let session = world.sessions.get(&req.session_id)?;
    if session_ineligible(session).is_some() {
        return None;
    }
    let profile = session.created.browser_profile_id.as_ref().and_then(|p| world.profiles.get(p));
    if profile.is_none_or(|p| p.revoked || p.deleted) || !world.session_profile_is_own(session) {
        return None;
    }
    if classifier::coverage::field_never_covered(req.element.field_kind) {
        return None;
    }
    let location = classifier::paths::location(&req.page.url).ok()?;
    if location.segments.iter().any(|s| classifier::paths::sensitive_segment(s).is_some()) {
        return None;
    }
    scope_for(&world.settings.scopes, &req.page.url).map(|scope| Offer {
        scope: scope.clone(),
        minutes: u32::try_from(GRANT_DURATION.whole_minutes()).unwrap_or(30),
        max_actions: MAX_ACTIONS,
        max_typed_chars: MAX_TYPED_CHARS,
    })
}

/// Credential and one-time-code fields are refused outright, no card: the classifier names them
/// from the field kind.
fn refused_field(consequences: &[Consequence]) -> Option<&'static str> {
    consequences.iter().find_map(|c| match c {
        Consequence::Named(n @ (Named::CredentialField | Named::OneTimeCodeField)) => Some(n.code()),
        _ => None,
    })
}

/// Decides one `browser.act`: the policy engine first (DENY and hardline are final), then the
/// pinned standing grant, then the session's task grant; otherwise an approval, with the reason
/// the grant did not cover it.
pub fn authorize(
    world: &World,
    policy: &Policy,
    req: &AuthorizeRequest,
    now: OffsetDateTime,
    new_approval_id: Uuid,
) -> Authorization {
    let classification = classifier::classify_detailed(&req.element);
    let mut consequences = vec![classification.consequence];
    consequences.extend(classification.matches.iter().map(|m| Consequence::Named(m.named)));
    // The page's HTTPS origin, userinfo or not (`https://u@evil.example` is evil.example). Any
    // other page has no origin a rule could name (rules name HTTPS origins only), so every
    // origin rule applies to it: plain HTTP or a malformed URL cannot slip past a DENY.
    let origin = url::Url::parse(req.page.url.trim()).ok().filter(|u| u.scheme() == "https");
    let origin = origin.map(|u| u.origin().ascii_serialization());
    let deny = |code: String| Authorization { decision: Decision::Deny { code }, events: vec![] };
    let verdict = policy.evaluate(ActionKind::of(&req.action), &consequences, origin.as_deref());
    if let Verdict::Deny { rule } | Verdict::Hardline { rule } = verdict {
        return deny(rule);
    }
    // Not even a card: the owner answering it would act in a browser profile that is not theirs.
    if world.sessions.get(&req.session_id).is_some_and(|s| !world.session_profile_is_own(s)) {
        return deny(PROFILE_NOT_OWNED.to_owned());
    }
    if let Verdict::Escalate { .. } = verdict {
        // No grant answers an escalation, so the card offers none either.
        let reason = Some(NotCovered::PolicyEscalation.code().to_owned());
        let (decision, requested) = request_approval(req, now, new_approval_id, reason, None);
        return Authorization { decision, events: vec![requested] };
    }
    if let Some(code) = refused_field(&consequences) {
        return deny(code.to_owned());
    }
    let authorized = |kind, grant_id, use_ordinal| {
        Event::ToolCallAuthorized(ToolCallAuthorized {
            session_id: req.session_id.clone(),
            run_id: req.run_id.clone(),
            tool_call_id: req.tool_call_id.clone(),
            authorization_kind: kind,
            grant_id,
            use_ordinal,
            typed_chars: typed_chars(&req.action),
            view: req.view.clone(),
            snapshot_id: req.snapshot.as_ref().map(|(snapshot, _)| snapshot.clone()),
        })
    };
    if standing_grant_covers(world, req, now) {
        let decision = Decision::Allow {
            kind: AuthorizationKind::StandingGrant,
            grant_id: None,
            use_ordinal: None,
            typed_chars: 0,
        };
        return Authorization { decision, events: vec![authorized(AuthorizationKind::StandingGrant, None, None)] };
    }
    let mut events = Vec::new();
    let reason = match task_grant_covers(world, req, now) {
        Ok(grant_id) => {
            let ordinal = world.grants[&grant_id].actions_used + 1;
            let decision = Decision::Allow {
                kind: AuthorizationKind::BrowserTaskGrant,
                grant_id: Some(grant_id),
                use_ordinal: Some(ordinal),
                typed_chars: typed_chars(&req.action),
            };
            return Authorization {
                decision,
                events: vec![authorized(AuthorizationKind::BrowserTaskGrant, Some(grant_id), Some(ordinal))],
            };
        }
        Err(Refusal { why, end }) => {
            events.extend(end.and_then(|(grant_id, reason)| world.end(grant_id, reason)));
            (why != NotCovered::NoTaskGrant).then(|| why.code().to_owned())
        }
    };
    let (decision, requested) = request_approval(req, now, new_approval_id, reason, offer_for(world, req));
    events.push(requested);
    Authorization { decision, events }
}

/// The approval card for `req`: its decision and the `approval.requested` event, with the view,
/// the offer (see [`offer_for`]), why a grant did not cover it, the token binding and the
/// agent version a grant made from it will pin.
pub fn request_approval(
    req: &AuthorizeRequest,
    now: OffsetDateTime,
    approval_id: Uuid,
    reason: Option<String>,
    offer: Option<Offer>,
) -> (Decision, Event) {
    let requested = Event::ApprovalRequested(ApprovalRequested {
        approval_id,
        session_id: req.session_id.clone(),
        run_id: req.run_id.clone(),
        view: req.view.clone(),
        offer: offer.clone(),
        not_covered_reason: reason.clone(),
        expires_at: stored(now + APPROVAL_TTL),
        binding: req.snapshot.as_ref().map(|(snapshot_id, node_ref)| TokenBinding {
            run_id: req.run_id.clone(),
            snapshot_id: snapshot_id.clone(),
            node_ref: node_ref.clone(),
        }),
        agent_version: req.versions.agent.clone(),
    });
    (Decision::RequireApproval { approval_id, reason, offer }, requested)
}
