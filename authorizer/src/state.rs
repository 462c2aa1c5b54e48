//! The authority's inline state, read per request. A request names what it needs (`Need`); the
//! shared `load` reads exactly that through a backend's `Reader` into a partial `World` with the
//! stream version of each entity read; the pure domain decides on it; `Plan` says which
//! entities the events change and the versions the append expects. Nothing a decision rests on is
//! kept between requests (a remembered read is re-checked by its use: `pg/remember.rs`), so
//! replicas never disagree and start-up does not grow with the log.

use std::collections::{BTreeSet, HashMap};

use grant_domain::catalogue::Event;
use ledger::{AppendRequest, ExpectedVersion, MAX_EVENTS_PER_APPEND, Metadata, StreamAppend, StreamId, TenantId};
use uuid::Uuid;

use crate::domain::{Approval, Command, Grant, Profile, RunEvent, Session, World, stream_of};
use crate::error::StoreError;
use crate::store::{Approvals, Deployment, Grants, Loaded, Need, Reader, Versioned};

/// What a command reads.
pub fn need_of(command: &Command) -> Need<'_> {
    match command {
        Command::CreateSession(c) => {
            Need::NewSession { session: &c.session_id, profile: c.browser_profile_id.as_deref() }
        }
        Command::RecordMessage(m) => Need::Session(&m.session_id),
        Command::RecordToolCall(c) => Need::Session(&c.session_id),
        // A run's end withdraws its waiting cards: it reads them as a Stop does.
        Command::RecordRun(r @ (RunEvent::Escalated(_) | RunEvent::Completed(_))) => Need::SessionStop(r.session_id()),
        Command::RecordRun(r) => Need::Session(r.session_id()),
        Command::DeleteSession { session_id, .. } => Need::SessionGrant(session_id),
        Command::ClaimProfile { profile_id, .. }
        | Command::AdvanceProfile { profile_id, .. }
        | Command::RevokeProfile { profile_id, .. }
        | Command::DeleteProfile { profile_id, .. } => Need::Profile(profile_id),
        Command::ChangeSettings(_) | Command::ApplyDeployment { .. } => Need::Deployment { grants: true },
        Command::PinStandingGrant { .. } => Need::Deployment { grants: false },
        Command::ResolveApproval { approval_id, .. } => Need::Approval(*approval_id),
        Command::RedeemToken { token_sha256, binding, .. } => {
            Need::Token { sha256: token_sha256, run: &binding.run_id }
        }
        Command::ExpireApprovals { now } => Need::DueApprovals(*now),
        Command::RevokeGrant { grant_id, .. } => Need::Grant(*grant_id),
        Command::StopSession { session_id, .. } => Need::SessionStop(session_id),
        Command::StopEverything { principal_id, .. } => Need::PrincipalStop(principal_id),
        Command::Sweep { now } => Need::DueGrants(*now),
        // The start page is checked against the settings, the browser against the profile.
        Command::StartTask { message, .. } | Command::ContinueTask { message, .. } => {
            Need::SessionTask(&message.session_id)
        }
        Command::ClaimTask { principal_id, now, .. } => Need::OpenTasks(principal_id, *now),
        Command::RenewTask { session_id, .. } => Need::Session(session_id),
    }
}

/// The id of the event that records a tool call's decision (its card or its allow), derived from
/// the call's key (`metadata.causation_id`, set only for an idempotent `Authorize`): one call has
/// one decision event, so the ledger's event-id key turns a retry's second decision into a
/// refusal, on every replica and after a lost COMMIT alike. Any other event gets a fresh id.
pub(crate) fn decision_event_id(e: &Event, metadata: &Metadata) -> Option<Uuid> {
    let call = metadata.causation_id?;
    matches!(e, Event::ApprovalRequested(_) | Event::ToolCallAuthorized(_)).then(|| decision_id(call))
}

/// The decision event's id of the call keyed `call`.
pub fn decision_id(call: Uuid) -> Uuid {
    Uuid::new_v5(&call, b"decision")
}

/// A grant's stream is [created, use 1..n, ended?]: its version after `uses` uses.
pub fn grant_stream_version(uses: u32, ended: bool) -> u64 {
    1 + u64::from(uses) + u64::from(ended)
}

/// [`grant_stream_version`] of a grant as read.
pub fn grant_version(g: &Grant) -> u64 {
    grant_stream_version(g.actions_used, g.ended.is_some())
}

/// [`grant_stream_version`] over a row of `active_task_grants`, for statements that compare a
/// grant row with its stream (`grantctl authority verify`).
pub const GRANT_VERSION_SQL: &str = "(1 + actions_used + (ended_at IS NOT NULL)::int)";

impl Loaded {
    fn new(tenant: &TenantId) -> Self {
        Self { tenant: tenant.clone(), world: World::default(), versions: HashMap::new() }
    }

    /// The version `category`'s entity `id` was read at; 0 when it was not read.
    pub(crate) fn version_of(&self, category: &str, id: &dyn std::fmt::Display) -> u64 {
        self.stream(category, id).ok().and_then(|s| self.versions.get(&s).copied()).unwrap_or(0)
    }

    fn stream(&self, category: &str, id: &dyn std::fmt::Display) -> Result<StreamId, StoreError> {
        Ok(crate::domain::entity_stream(&self.tenant, category, id)?)
    }

    fn session(&mut self, s: Versioned<Session>) -> Result<(), StoreError> {
        self.versions.insert(self.stream("session", &s.value.created.session_id)?, s.version);
        self.world.sessions.insert(s.value.created.session_id.clone(), s.value);
        Ok(())
    }

    /// Sessions by id; an id not found reads as a stream at version 0.
    async fn sessions(&mut self, r: &mut impl Reader, ids: &[&str]) -> Result<(), StoreError> {
        let wanted: Vec<&str> = ids.iter().copied().filter(|id| !self.world.sessions.contains_key(*id)).collect();
        if wanted.is_empty() {
            return Ok(());
        }
        for id in &wanted {
            self.versions.insert(self.stream("session", id)?, 0);
        }
        for s in r.sessions(&wanted).await? {
            self.session(s)?;
        }
        Ok(())
    }

    async fn profile(&mut self, r: &mut impl Reader, id: &str) -> Result<(), StoreError> {
        if self.world.profiles.contains_key(id) {
            return Ok(());
        }
        let p = r.profile(id).await?;
        self.versions.insert(self.stream("profile", &id)?, p.version);
        self.world.profiles.insert(id.to_owned(), p.value);
        Ok(())
    }

    async fn deployment(&mut self, r: &mut impl Reader) -> Result<(), StoreError> {
        let d = r.deployment().await?;
        let stream = crate::domain::deployment_stream(&self.tenant)?;
        self.versions.insert(stream, d.version);
        self.world.settings = d.value.settings;
        self.world.standing = d.value.standing;
        self.world.policy = d.value.policy;
        Ok(())
    }

    async fn approvals(&mut self, r: &mut impl Reader, which: Approvals<'_>) -> Result<Vec<Uuid>, StoreError> {
        let mut ids = Vec::new();
        if let Approvals::Id(id) = which {
            // Absent, it is a new stream.
            self.versions.insert(self.stream("approval", &id)?, 0);
        }
        for a in r.approvals(which).await? {
            let id = a.value.requested.approval_id;
            self.versions.insert(self.stream("approval", &id)?, a.version);
            self.world.approvals.insert(id, a.value);
            ids.push(id);
        }
        Ok(ids)
    }

    async fn grants(&mut self, r: &mut impl Reader, which: Grants<'_>) -> Result<Vec<Uuid>, StoreError> {
        let mut ids = Vec::new();
        for g in r.grants(which).await? {
            let id = g.created.grant_id;
            self.versions.insert(self.stream("grant", &id)?, grant_version(&g));
            self.world.grants.insert(id, g);
            ids.push(id);
        }
        Ok(ids)
    }

    /// Points each loaded session at its loaded active grant.
    fn link(mut self) -> Self {
        for g in self.world.grants.values().filter(|g| g.is_active()) {
            if let Some(s) = self.world.sessions.get_mut(&g.created.session_id) {
                s.active_grant = Some(g.created.grant_id);
            }
        }
        self
    }

    fn session_profile(&self, session: &str) -> Option<String> {
        self.world.sessions.get(session).and_then(|s| s.created.browser_profile_id.clone())
    }

    /// The version session `id`'s stream was read at (0: not read, or new): a use holds only while
    /// the session is still at it.
    pub fn session_version(&self, id: &str) -> u64 {
        self.stream("session", &id).map_or(0, |s| self.version(&s))
    }

    /// The version `stream` was read at; a stream not read is new (0).
    pub fn version(&self, stream: &StreamId) -> u64 {
        self.versions.get(stream).copied().unwrap_or(0)
    }

    /// What appending `events` changes: the world after them, the entities to write and the
    /// append, each stream expecting the version it was read at.
    pub fn plan(&self, events: &[Event], metadata: &Metadata) -> Result<Plan, StoreError> {
        let mut after = self.world.clone();
        let mut streams: Vec<StreamAppend> = Vec::new();
        let mut touched = Touched::default();
        for e in events {
            after.apply(e);
            let stream = stream_of(&self.tenant, e)?;
            let new = e.to_new(decision_event_id(e, metadata).unwrap_or_else(Uuid::new_v4), metadata.clone());
            touched.note(e, new.event_id);
            match streams.iter_mut().find(|s| s.stream_id == stream) {
                Some(s) => s.events.push(new),
                None => {
                    let expected = match self.version(&stream) {
                        0 => ExpectedVersion::NoStream,
                        v => ExpectedVersion::At(v),
                    };
                    streams.push(StreamAppend { stream_id: stream, expected, events: vec![new] });
                }
            }
        }
        let version_after = |stream: &StreamId| {
            let appended = streams.iter().find(|s| &s.stream_id == stream).map_or(0, |s| s.events.len() as u64);
            self.version(stream) + appended
        };
        let mut write = Writes::default();
        for id in &touched.sessions {
            if let Some(s) = after.sessions.get(id) {
                let v = version_after(&self.stream("session", id)?);
                write.sessions.push(Versioned { value: s.clone(), version: v });
            }
        }
        for id in &touched.profiles {
            let p = after.profiles.get(id).cloned().unwrap_or_default();
            write
                .profiles
                .push((id.clone(), Versioned { value: p, version: version_after(&self.stream("profile", id)?) }));
        }
        if touched.deployment {
            let stream = crate::domain::deployment_stream(&self.tenant)?;
            let value = Deployment {
                settings: after.settings.clone(),
                standing: after.standing.clone(),
                policy: after.policy.clone(),
            };
            write.deployment = Some(Versioned { value, version: version_after(&stream) });
        }
        for id in &touched.approvals {
            if let Some(a) = after.approvals.get(id) {
                let v = version_after(&self.stream("approval", id)?);
                write.approvals.push(Versioned { value: a.clone(), version: v });
            }
        }
        write.snapshots = touched.snapshots;
        // Whole streams per append, each append under the ledger's cap, all in one transaction:
        // a settings change may end thousands of grants.
        let mut appends: Vec<AppendRequest> = Vec::new();
        for stream in streams {
            let fits = appends.last().is_some_and(|a| {
                a.streams.iter().map(|s| s.events.len()).sum::<usize>() + stream.events.len() <= MAX_EVENTS_PER_APPEND
            });
            match appends.last_mut() {
                Some(a) if fits => a.streams.push(stream),
                _ => appends.push(AppendRequest { tenant_id: self.tenant.clone(), streams: vec![stream] }),
            }
        }
        Ok(Plan { after, write, appends })
    }
}

#[derive(Debug, Default)]
struct Touched {
    sessions: BTreeSet<String>,
    profiles: BTreeSet<String>,
    deployment: bool,
    approvals: BTreeSet<Uuid>,
    snapshots: Vec<Named>,
}

/// A snapshot a run named, and the event that named it (whose log position orders it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub session_id: String,
    pub run_id: String,
    pub snapshot_id: String,
    pub event_id: Uuid,
}

impl Touched {
    fn note(&mut self, e: &Event, event_id: Uuid) {
        let mut snapshot = |session: &str, run: &str, snapshot: &str| {
            self.snapshots.push(Named {
                session_id: session.to_owned(),
                run_id: run.to_owned(),
                snapshot_id: snapshot.to_owned(),
                event_id,
            });
        };
        match e {
            Event::SessionCreated(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::SessionMessageRecorded(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::SessionDeleted(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::SessionStopped(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::SessionToolCalled(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::RunEscalated(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::RunStarted(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::RunRefused(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::RunCompleted(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::RunStepped(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::TaskStarted(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::TaskClaimed(x) => drop(self.sessions.insert(x.session_id.clone())),
            Event::ProfileClaimed(x) => drop(self.profiles.insert(x.profile_id.clone())),
            Event::ProfileGenerationAdvanced(x) => drop(self.profiles.insert(x.profile_id.clone())),
            Event::ProfileRevoked(x) => drop(self.profiles.insert(x.profile_id.clone())),
            Event::ProfileDeleted(x) => drop(self.profiles.insert(x.profile_id.clone())),
            Event::DeploymentScopesChanged(_)
            | Event::DeploymentPolicyChanged(_)
            | Event::StandingGrantPinned(_)
            | Event::StandingGrantUnpinned(_) => self.deployment = true,
            Event::ApprovalRequested(x) => {
                self.approvals.insert(x.approval_id);
                if let Some(b) = &x.binding {
                    snapshot(&x.session_id, &b.run_id, &b.snapshot_id);
                }
            }
            Event::ApprovalResolved(x) => drop(self.approvals.insert(x.approval_id)),
            Event::ApprovalExpired(x) => drop(self.approvals.insert(x.approval_id)),
            Event::ApprovalTokenIssued(x) => drop(self.approvals.insert(x.approval_id)),
            Event::ApprovalTokenRedeemed(x) => drop(self.approvals.insert(x.approval_id)),
            Event::ToolCallAuthorized(x) => {
                if x.grant_id.is_none() {
                    self.sessions.insert(x.session_id.clone());
                }
                if let Some(s) = &x.snapshot_id {
                    snapshot(&x.session_id, &x.run_id, s);
                }
            }
            // Grant rows are written by the backend's own statements, event by event.
            Event::TaskGrantCreated(_) | Event::TaskGrantEnded(_) => {}
        }
    }
}

/// The inline writes of one append.
#[derive(Debug, Default, Clone)]
pub struct Writes {
    pub sessions: Vec<Versioned<Session>>,
    pub profiles: Vec<(String, Versioned<Profile>)>,
    pub deployment: Option<Versioned<Deployment>>,
    pub approvals: Vec<Versioned<Approval>>,
    /// Snapshots named, with the events that named them.
    pub snapshots: Vec<Named>,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub after: World,
    pub write: Writes,
    /// In order, each within the ledger's cap on one append.
    pub appends: Vec<AppendRequest>,
}

/// Reads what `need` names into a partial world.
pub async fn load(r: &mut impl Reader, tenant: &TenantId, need: Need<'_>) -> Result<Loaded, StoreError> {
    let mut l = Loaded::new(tenant);
    match need {
        Need::Session(id) => l.sessions(r, &[id]).await?,
        Need::NewSession { session, profile } => {
            l.sessions(r, &[session]).await?;
            if let Some(p) = profile {
                l.profile(r, p).await?;
            }
        }
        Need::SessionGrant(id) => {
            l.sessions(r, &[id]).await?;
            l.grants(r, Grants::ActiveOfSession(id)).await?;
        }
        Need::Profile(id) => {
            l.profile(r, id).await?;
            l.grants(r, Grants::ActiveOnProfile(id)).await?;
        }
        Need::Deployment { grants } => {
            l.deployment(r).await?;
            if grants {
                l.grants(r, Grants::Active).await?;
            }
        }
        Need::Approval(id) => {
            l.approvals(r, Approvals::Id(id)).await?;
            if let Some(session) = l.world.approvals.get(&id).map(|a| a.requested.session_id.clone()) {
                l.sessions(r, &[&session]).await?;
                l.grants(r, Grants::ActiveOfSession(&session)).await?;
                if let Some(p) = l.session_profile(&session) {
                    l.profile(r, &p).await?;
                }
                l.deployment(r).await?;
            }
        }
        Need::Token { sha256, run } => {
            l.approvals(r, Approvals::Token(sha256)).await?;
            let found = l.world.approvals.values().next().map(|a| a.requested.session_id.clone());
            if let Some(session) = found {
                l.sessions(r, &[&session]).await?;
                if let Some(p) = l.session_profile(&session) {
                    l.profile(r, &p).await?;
                }
                let snapshots = r.run(&session, run).await?;
                l.world.run_snapshots.insert((session, run.to_owned()), snapshots);
            }
        }
        Need::DueApprovals(now) => {
            l.approvals(r, Approvals::DueBy(now)).await?;
        }
        Need::Grant(id) => {
            l.grants(r, Grants::Id(id)).await?;
            if let Some(session) = l.world.grants.get(&id).map(|g| g.created.session_id.clone()) {
                l.sessions(r, &[&session]).await?;
            }
        }
        Need::DueGrants(now) => {
            l.grants(r, Grants::DueBy(now)).await?;
        }
        Need::Authorize { credential: Some(_), .. } => {
            // Only a backend's own one-statement read confirms a credential; reaching here, none did.
            return Err(StoreError::Projection("a remembered credential reached a read that cannot confirm it".into()));
        }
        Need::Authorize { session, credential: None } => {
            l.sessions(r, &[session]).await?;
            l.grants(r, Grants::ActiveOfSession(session)).await?;
            let grant_profile = l.world.grants.values().next().map(|g| g.created.profile_id.clone());
            for p in grant_profile.into_iter().chain(l.session_profile(session)) {
                l.profile(r, &p).await?;
            }
            l.deployment(r).await?;
        }
        // The session first: a card being written holds its row, so the pending cards are read
        // once that card is in (resolving a card locks the other way round; a deadlock between
        // the two is retried).
        Need::SessionStop(session) => {
            l.sessions(r, &[session]).await?;
            l.grants(r, Grants::ActiveOfSession(session)).await?;
            l.approvals(r, Approvals::PendingOfSession(session)).await?;
        }
        Need::PrincipalStop(principal) => {
            let ids = r.sessions_to_stop(principal, crate::store::STOP_BATCH).await?;
            for id in &ids {
                l.sessions(r, &[id]).await?;
                l.grants(r, Grants::ActiveOfSession(id)).await?;
                l.approvals(r, Approvals::PendingOfSession(id)).await?;
            }
        }
        Need::PrincipalChats(principal) => {
            let ids = r.chats(principal, crate::store::MAX_CHATS).await?;
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            l.sessions(r, &ids).await?;
            for id in ids {
                l.grants(r, Grants::ActiveOfSession(id)).await?;
                l.approvals(r, Approvals::PendingOfSession(id)).await?;
                if let Some(p) = l.session_profile(id) {
                    l.profile(r, &p).await?;
                }
            }
            l.deployment(r).await?;
        }
        Need::OpenTasks(principal, now) => {
            let ids = r.open_tasks(principal, now, crate::store::CLAIM_BATCH).await?;
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            l.sessions(r, &ids).await?;
            for id in ids {
                l.approvals(r, Approvals::PendingOfSession(id)).await?;
            }
        }
        // The session first, then its cards, as a Stop reads them; then what a start page and a
        // browser are checked against.
        Need::SessionTask(session) => {
            l.sessions(r, &[session]).await?;
            l.approvals(r, Approvals::PendingOfSession(session)).await?;
            if let Some(p) = l.session_profile(session) {
                l.profile(r, &p).await?;
            }
            l.deployment(r).await?;
        }
        Need::SessionApprovals(session) => {
            l.sessions(r, &[session]).await?;
            l.approvals(r, Approvals::OfSession(session)).await?;
        }
        Need::PrincipalGrants(principal) => {
            l.grants(r, Grants::OfPrincipal(principal)).await?;
            let sessions: BTreeSet<String> = l.world.grants.values().map(|g| g.created.session_id.clone()).collect();
            let ids: Vec<&str> = sessions.iter().map(String::as_str).collect();
            l.sessions(r, &ids).await?;
        }
    }
    Ok(l.link())
}

/// Folds `events` into a world: what the inline state must equal (verify and tests).
pub fn fold<'a>(events: impl IntoIterator<Item = &'a Event>) -> World {
    let mut world = World::default();
    for e in events {
        world.apply(e);
    }
    world
}

/// The append of use `ordinal`. Uses stop once the row is ended, and the row orders them, so use
/// n follows the stream at its version after n - 1 uses; saying so lets the store skip reading
/// the stream's head.
pub(crate) fn use_append(
    tenant: &TenantId,
    metadata: &Metadata,
    event: &Event,
    ordinal: u32,
) -> Result<AppendRequest, StoreError> {
    Ok(AppendRequest::single(
        tenant.clone(),
        stream_of(tenant, event)?,
        ExpectedVersion::At(grant_stream_version(ordinal.saturating_sub(1), false)),
        vec![event.to_new(decision_event_id(event, metadata).unwrap_or_else(Uuid::new_v4), metadata.clone())],
    ))
}
