//! The authority: the pure domain over a storage backend, per request. Each command reads what
//! it needs from the backend's inline state (locking it), decides with the pure domain, and
//! appends with the stream versions it read; an authorization reads one snapshot, and a
//! task-grant allow is final only once the backend's atomic use committed it. Nothing a decision
//! rests on is kept in the process between requests, so any number of replicas serve any tenant:
//! a backend's remembered read of a session (`Backend::remembered`) may decide only an allow,
//! and that allow is used only if the statement making the use finds every version the read saw
//! (and the caller's credential) still so at its own snapshot.
//!
//! It knows its storage only through the port (`crate::store`): PostgreSQL (`PgGrants`) and the
//! memory model (`MemoryGrants`) are interchangeable behind it.

use std::sync::Arc;

use grant_domain::catalogue::{ActionView, AuthorizationKind, Event, SiteScope, ToolCallAuthorized};
use ledger::{Checkpoint, Metadata, TenantId};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::{self, AuthorizeRequest, Command, Decision, DomainError, Grant, World};
use crate::error::{AuthorityError, StoreError};
use crate::metrics::AuthorizerMetrics;
use crate::policy::Policy;
use crate::state;
use crate::store::{Backend, Consumed, Decide, Loaded, Need, SessionAt, Transacted, UseOf};

/// How many times a request is decided again after another request changed what it read.
pub const ATTEMPTS: usize = 8;

/// One tool call's identity, for an `Authorize` that may be retried: the key derived from the
/// tenant, the session and the tool-call id, and a digest of the whole request. The call's
/// decision event and approval get ids derived from the key, so a second decision of the same
/// call can never be stored beside the first; the digest, kept in the events' metadata, tells a
/// retry from a reuse of the id with other arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallKey {
    pub id: Uuid,
    pub digest: Uuid,
}

impl CallKey {
    const NAMESPACE: Uuid = Uuid::from_u128(0x6772_616e_742d_6c65_6467_6572_2d63_616c);

    /// `request_sha256` is the SHA-256 of the request as decoded and encoded again (prost writes
    /// fields in tag order, so the client's field order does not matter; unknown fields are
    /// refused at the edge). A retry that crosses a deploy adding a request field may read as
    /// another request (`TOOL_CALL_REUSED`).
    pub fn new(tenant: &TenantId, session: &str, tool_call_id: &str, request_sha256: &[u8; 32]) -> Self {
        let name = format!("{}\0{session}\0{tool_call_id}", tenant.as_str());
        let digest = Uuid::from_slice(&request_sha256[..16]).unwrap_or_default();
        Self { id: Uuid::new_v5(&Self::NAMESPACE, name.as_bytes()), digest }
    }

    /// The id of the approval a card for this call creates.
    pub fn approval_id(&self) -> Uuid {
        Uuid::new_v5(&self.id, b"approval")
    }

    fn decision_event(&self) -> Uuid {
        state::decision_id(self.id)
    }

    fn metadata(&self, principal: &str) -> Metadata {
        Metadata { principal: principal.to_owned(), causation_id: Some(self.id), correlation_id: Some(self.digest) }
    }
}

/// Makes an approval card's view from the configured scopes.
pub type ViewOf<'a> = dyn Fn(&[SiteScope]) -> ActionView + Sync + 'a;

/// An authorization and what the reply needs beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Authorized {
    pub decision: Decision,
    pub events: Vec<Event>,
    pub at: Option<Checkpoint>,
    /// The grant a task-grant allow used, as read.
    pub grant: Option<Grant>,
    /// Until when the pinned standing grant that allowed runs.
    pub standing_until: Option<OffsetDateTime>,
    /// The session's browser profile, as read for an allow: its dispatch ticket binds it.
    pub profile: Option<String>,
    /// When the decision was made: now, or when a retried call's decision was recorded.
    pub decided_at: OffsetDateTime,
    /// A retried call answered with the decision it recorded first.
    pub replayed: bool,
}

#[derive(Debug)]
struct Core<B> {
    backend: B,
    policy: Policy,
    metrics: AuthorizerMetrics,
}

/// The domain over a backend, for one tenant; `for_tenant` gives the same backend for another.
#[derive(Debug)]
pub struct Authority<B> {
    core: Arc<Core<B>>,
    tenant: TenantId,
}

impl<B> Clone for Authority<B> {
    fn clone(&self) -> Self {
        Self { core: Arc::clone(&self.core), tenant: self.tenant.clone() }
    }
}

impl<B: Backend> Authority<B> {
    pub fn new(backend: B, policy: Policy, tenant: TenantId) -> Self {
        Self::metered(backend, policy, tenant, AuthorizerMetrics::default())
    }

    /// An authority that records its decisions in `metrics`.
    pub fn metered(backend: B, policy: Policy, tenant: TenantId, metrics: AuthorizerMetrics) -> Self {
        Self { core: Arc::new(Core { backend, policy, metrics }), tenant }
    }

    pub(crate) fn metrics(&self) -> &AuthorizerMetrics {
        &self.core.metrics
    }

    /// The same backend and policy, for `tenant`.
    pub fn for_tenant(&self, tenant: TenantId) -> Self {
        Self { core: Arc::clone(&self.core), tenant }
    }

    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    pub fn policy(&self) -> &Policy {
        &self.core.policy
    }

    pub fn backend(&self) -> &B {
        &self.core.backend
    }

    /// Reads what `need` names and answers from it; writes nothing.
    pub async fn read<T: Send>(&self, need: Need<'_>, f: impl Fn(&World) -> T + Sync) -> Result<T, AuthorityError> {
        let t = self
            .backend()
            .transact(&self.tenant, &Metadata::default(), need, false, &|l| Ok((vec![], f(&l.world))))
            .await?;
        Ok(t.value)
    }

    /// [`Authority::read`], answering from the read with the stream versions it was read at.
    pub(crate) async fn read_loaded<T: Send>(
        &self,
        need: Need<'_>,
        f: impl Fn(&crate::store::Loaded) -> T + Sync,
    ) -> Result<T, AuthorityError> {
        let t =
            self.backend().transact(&self.tenant, &Metadata::default(), need, false, &|l| Ok((vec![], f(l)))).await?;
        Ok(t.value)
    }

    /// The tenant's whole state as the backend holds it.
    pub async fn world(&self) -> Result<World, AuthorityError> {
        Ok(self.backend().dump(&self.tenant).await?)
    }

    /// Runs `decide` in a transaction that locks what it read, deciding again from a fresh read
    /// when another request changed it, at most [`ATTEMPTS`] times.
    async fn transact<T: Send>(
        &self,
        metadata: &Metadata,
        need: Need<'_>,
        lock: bool,
        decide: &Decide<'_, T>,
    ) -> Result<Transacted<T>, AuthorityError> {
        for _ in 0..ATTEMPTS {
            match self.backend().transact(&self.tenant, metadata, need, lock, decide).await {
                Err(e) if e.contended() => {
                    self.metrics().retried("command");
                    tracing::debug!(error = %e, "contended; deciding again");
                }
                other => return other,
            }
        }
        Err(AuthorityError::Contended)
    }

    /// Decides and commits a command.
    pub async fn execute(&self, command: Command, principal: &str) -> Result<Vec<Event>, AuthorityError> {
        Ok(self.execute_at(command, principal).await?.0)
    }

    /// Decides and commits a command; with the ledger position its events reached.
    pub async fn execute_at(
        &self,
        command: Command,
        principal: &str,
    ) -> Result<(Vec<Event>, Option<Checkpoint>), AuthorityError> {
        let decide = |l: &Loaded| domain::decide(&l.world, command.clone()).map(|e| (e, ()));
        let t = self.transact(&Metadata::by(principal), state::need_of(&command), true, &decide).await?;
        self.metrics().recorded(&t.events);
        Ok((t.events, t.at))
    }

    /// Decides one tool call's `browser.act` from one snapshot of the session's state; `view`
    /// makes the card's view from the tenant's configured scopes in that snapshot. A task-grant
    /// allow is final only once the atomic use committed it; when the row moved since the read
    /// (spent, ended), the act is decided again from a fresh read, which ends the grant or asks.
    ///
    /// The call may be sent again: a retry (the same call key and digest) answers the decision
    /// the first recorded and spends nothing; the same key with another digest is refused
    /// (`TOOL_CALL_REUSED`) and writes nothing.
    ///
    /// `credential`: the caller's credential recognised from memory, which the fresh read
    /// confirms live before anything is decided (`StoreError::CallerRefused` when it is not), and
    /// an allow on a remembered read confirms in the statement making its use, before anything is
    /// answered; only for a backend that [`Backend::confirms_credentials`].
    pub async fn authorize(
        &self,
        req: &AuthorizeRequest,
        view: &ViewOf<'_>,
        now: OffsetDateTime,
        call: CallKey,
        credential: Option<Uuid>,
    ) -> Result<Authorized, AuthorityError> {
        let authorized = self.authorize_once(req, view, now, call.approval_id(), Some(call), credential).await?;
        if !authorized.replayed {
            self.metrics().recorded(&authorized.events);
        }
        self.metrics().decided(&authorized.decision, authorized.replayed);
        Ok(authorized)
    }

    /// A decision outside any tool call's identity, with the request's own view and the card's
    /// approval id given: for tests that decide the same request many times.
    #[cfg(feature = "testing")]
    pub async fn authorize_uncalled(
        &self,
        req: &AuthorizeRequest,
        now: OffsetDateTime,
        approval_id: Uuid,
    ) -> Result<(Decision, Vec<Event>), AuthorityError> {
        let a = self.authorize_once(req, &|_| req.view.clone(), now, approval_id, None, None).await?;
        Ok((a.decision, a.events))
    }

    /// The decision `call` already recorded, as it was answered, if there is one.
    async fn replayed(
        &self,
        req: &AuthorizeRequest,
        call: CallKey,
        now: OffsetDateTime,
    ) -> Result<Option<Authorized>, AuthorityError> {
        let Some(recorded) = self.backend().recorded(&self.tenant, call.decision_event()).await? else {
            return Ok(None);
        };
        if recorded.metadata.correlation_id != Some(call.digest) || recorded.metadata.principal != req.principal_id {
            let detail = "this tool-call id was decided with other arguments; a new call needs a new id";
            return Err(DomainError::conflict(domain::Conflict::ToolCallReused, detail).into());
        }
        let at = Some(Checkpoint { tx_id: recorded.tx_id, position: recorded.global_position });
        let decided_at = recorded.recorded_at;
        let event = Event::from_recorded(&recorded)
            .map_err(|e| StoreError::Projection(format!("a recorded decision does not decode: {e}")))?;
        let ended = || -> AuthorityError {
            let detail = "the grant this call was allowed under has ended; observe again";
            DomainError::conflict(domain::Conflict::ToolCallGrantEnded, detail).into()
        };
        let authorized = match &event {
            Event::ApprovalRequested(a) => {
                let decision = Decision::RequireApproval {
                    approval_id: a.approval_id,
                    reason: match a.not_covered_reason.as_deref() {
                        None => None,
                        Some(code) => Some(domain::NotCovered::from_code(code).ok_or_else(|| {
                            StoreError::Projection(format!("a recorded card's reason {code:?} is none"))
                        })?),
                    },
                    offer: a.offer.clone(),
                };
                Authorized {
                    decision,
                    events: vec![event.clone()],
                    at,
                    grant: None,
                    standing_until: None,
                    profile: None,
                    decided_at,
                    replayed: true,
                }
            }
            Event::ToolCallAuthorized(t) => {
                let decision = Decision::Allow {
                    kind: t.authorization_kind,
                    grant_id: t.grant_id,
                    use_ordinal: t.use_ordinal,
                    typed_chars: t.typed_chars,
                };
                let (mut grant, mut standing_until) = (None, None);
                match (t.authorization_kind, t.grant_id) {
                    (AuthorizationKind::BrowserTaskGrant, Some(g)) => {
                        let found = self.read(Need::Grant(g), |w| w.grants.get(&g).cloned()).await?;
                        // A use spent before a Stop, or before the grant's time ran out, is not
                        // handed out again after it.
                        let live = found.filter(|g| g.is_active() && g.created.expires_at > now);
                        grant = Some(live.ok_or_else(ended)?);
                    }
                    (AuthorizationKind::StandingGrant, _) => {
                        let pin = self.read(Need::Deployment { grants: false }, |w| w.standing.clone()).await?;
                        let until = pin.map(|p| p.expires_at).filter(|t| *t > now);
                        standing_until = Some(until.ok_or_else(ended)?);
                    }
                    _ => {}
                }
                let profile = self.read(Need::Session(&req.session_id), |w| profile_of(w, &req.session_id)).await?;
                Authorized {
                    decision,
                    events: vec![event.clone()],
                    at,
                    grant,
                    standing_until,
                    profile,
                    decided_at,
                    replayed: true,
                }
            }
            other => {
                return Err(StoreError::Projection(format!("a call's decision is a {}", other.event_type())).into());
            }
        };
        Ok(Some(authorized))
    }

    async fn authorize_once(
        &self,
        req: &AuthorizeRequest,
        view: &ViewOf<'_>,
        now: OffsetDateTime,
        approval_id: Uuid,
        call: Option<CallKey>,
        credential: Option<Uuid>,
    ) -> Result<Authorized, AuthorityError> {
        let metadata = call.map_or_else(|| Metadata::by(&req.principal_id), |c| c.metadata(&req.principal_id));
        let decide = |l: &Loaded| {
            let w = &l.world;
            let req = &self.start(w, req, view)?;
            let auth = domain::authorize(w, self.policy(), req, now, approval_id);
            let grant = match &auth.decision {
                Decision::Allow { grant_id: Some(g), .. } => w.grants.get(g).cloned(),
                _ => None,
            };
            let standing = w.standing.as_ref().map(|s| s.expires_at);
            let decided = Decided {
                session_version: l.session_version(&req.session_id),
                profile: profile_of(w, &req.session_id),
                grant,
                standing,
                auth,
            };
            // A task-grant use is recorded by the atomic use, below.
            let record = match decided.auth.decision {
                Decision::Allow { kind: AuthorizationKind::BrowserTaskGrant, .. } => vec![],
                _ => decided.auth.events.clone(),
            };
            Ok((record, decided))
        };
        if let Some(done) = self.on_remembered(req, now, call, credential, &metadata, &decide).await? {
            return Ok(done);
        }
        let mut spent = false;
        for _ in 0..ATTEMPTS {
            let need = Need::Authorize { session: &req.session_id, credential };
            let t = match self.backend().transact(&self.tenant, &metadata, need, false, &decide).await {
                Ok(t) => t,
                Err(e) => match self.settle(req, call, now, e).await? {
                    Some(done) => return Ok(done),
                    None => {
                        self.metrics().retried("authorize");
                        continue;
                    }
                },
            };
            let d = t.value;
            let Some(u) = d.task_use(&req.session_id, now) else {
                // A deny records nothing, so nothing collides: a call decided before (a card or an
                // allow, or this id with other arguments) is looked up here, on the deny path only.
                // After the owner's Stop nothing decided before is handed out again.
                let stopped = matches!(d.auth.decision, Decision::Deny(domain::Denial::SessionStopped));
                if let (Some(c), true, false) = (call, t.events.is_empty(), stopped)
                    && let Some(done) = self.replayed(req, c, now).await?
                {
                    return Ok(done);
                }
                let standing_until = match d.auth.decision {
                    Decision::Allow { kind: AuthorizationKind::StandingGrant, .. } => d.standing,
                    _ => None,
                };
                return Ok(Authorized {
                    decision: d.auth.decision,
                    events: t.events,
                    at: t.at,
                    grant: d.grant,
                    standing_until,
                    profile: d.profile,
                    decided_at: now,
                    replayed: false,
                });
            };
            let use_event = d.use_event()?;
            match self.backend().consume(&self.tenant, &metadata, u, &use_event).await {
                Ok(Consumed::Allowed { ordinal, outcome }) => {
                    return Ok(d.allowed(u, ordinal, &outcome, &use_event, now));
                }
                // The row moved since the read: decide again from a fresh one.
                Ok(Consumed::Refused) => {
                    self.metrics().retried("authorize");
                    spent = true;
                }
                Err(e) => {
                    if let Some(done) = self.settle(req, call, now, e.into()).await? {
                        return Ok(done);
                    }
                    self.metrics().retried("authorize");
                }
            }
        }
        if !spent {
            return Err(AuthorityError::Contended);
        }
        // Every fresh read allowed what the row refused: asking the owner is always safe.
        self.ask_spent(req, view, now, approval_id, call, &metadata).await
    }

    /// A task-grant allow decided on the backend's remembered read of the session, used only
    /// while everything that read saw is still so (`Backend::consume_remembered`). `None`: no
    /// remembered read, a decision other than such an allow (never trusted from memory), or
    /// something moved since: decide on a fresh read.
    async fn on_remembered(
        &self,
        req: &AuthorizeRequest,
        now: OffsetDateTime,
        call: Option<CallKey>,
        credential: Option<Uuid>,
        metadata: &Metadata,
        decide: &Decide<'_, Decided>,
    ) -> Result<Option<Authorized>, AuthorityError> {
        let Some(read) = self.backend().remembered(&self.tenant, &req.session_id) else {
            return Ok(None);
        };
        let Ok((record, d)) = decide(&read) else {
            return Ok(None);
        };
        let (Some(u), true) = (d.task_use(&req.session_id, now), record.is_empty()) else {
            return Ok(None);
        };
        let use_event = d.use_event()?;
        match self.backend().consume_remembered(&self.tenant, metadata, u, &read, credential, &use_event).await {
            Ok(Consumed::Allowed { ordinal, outcome }) => Ok(Some(d.allowed(u, ordinal, &outcome, &use_event, now))),
            Ok(Consumed::Refused) => {
                self.metrics().retried("remembered");
                Ok(None)
            }
            Err(e) => self.settle(req, call, now, e.into()).await,
        }
    }

    /// The caller's own session, under the policy in force, with the card's view from the
    /// tenant's scopes: where both the decision and the fallback ask start.
    fn start(&self, w: &World, req: &AuthorizeRequest, view: &ViewOf<'_>) -> Result<AuthorizeRequest, DomainError> {
        w.session_of(&req.session_id, &req.principal_id)?;
        w.policy_in_force(&self.policy().version)?;
        Ok(AuthorizeRequest { view: view(&w.settings.scopes), ..req.clone() })
    }

    /// A failed decision of call `call`, settled. Only a call decided before collides with its
    /// record (its decision event's id is taken, or its approval stream exists), so the record is
    /// looked up then, not on every call: the hot path reads nothing more. `Ok(None)`:
    /// contention, decide again.
    async fn settle(
        &self,
        req: &AuthorizeRequest,
        call: Option<CallKey>,
        now: OffsetDateTime,
        e: AuthorityError,
    ) -> Result<Option<Authorized>, AuthorityError> {
        // A twin of this call that stored its decision first: the event-id key refused ours.
        let twin = matches!(e, AuthorityError::Store(StoreError::Append(ledger::AppendError::DuplicateEventId { .. })));
        let Some(c) = call.filter(|_| twin || e.contended()) else {
            return if e.contended() { Ok(None) } else { Err(e) };
        };
        match self.replayed(req, c, now).await? {
            Some(done) => Ok(Some(done)),
            None if e.contended() => Ok(None),
            None => Err(AuthorityError::Contended),
        }
    }

    /// The card for an act every fresh read allowed and the grant's row kept refusing (a replica's
    /// clock behind the database's at the grant's very end), or the Stop's deny.
    async fn ask_spent(
        &self,
        req: &AuthorizeRequest,
        view: &ViewOf<'_>,
        now: OffsetDateTime,
        approval_id: Uuid,
        call: Option<CallKey>,
        metadata: &Metadata,
    ) -> Result<Authorized, AuthorityError> {
        let ask = |l: &Loaded| {
            let w = &l.world;
            let req = &self.start(w, req, view)?;
            if w.sessions.get(&req.session_id).is_some_and(|s| s.stopped) {
                return Ok((vec![], Decision::Deny(domain::Denial::SessionStopped)));
            }
            let reason = Some(domain::NotCovered::GrantSpent);
            let (decision, requested) =
                domain::request_approval(req, now, approval_id, reason, domain::offer_for(w, req));
            Ok((vec![requested], decision))
        };
        let t = match call {
            // This call's card may be the very thing in the way: look before asking again.
            Some(_) => match self
                .backend()
                .transact(
                    &self.tenant,
                    metadata,
                    Need::Authorize { session: &req.session_id, credential: None },
                    false,
                    &ask,
                )
                .await
            {
                Ok(t) => t,
                Err(e) => return self.settle(req, call, now, e).await?.ok_or(AuthorityError::Contended),
            },
            None => {
                let need = Need::Authorize { session: &req.session_id, credential: None };
                self.transact(metadata, need, false, &ask).await?
            }
        };
        Ok(Authorized {
            decision: t.value,
            events: t.events,
            at: t.at,
            grant: None,
            standing_until: None,
            profile: None,
            decided_at: now,
            replayed: false,
        })
    }

    /// Ends every grant whose time is up and expires every card past its own, in every tenant.
    pub async fn sweep(&self, now: OffsetDateTime) -> Result<usize, AuthorityError> {
        let mut recorded = 0;
        let mut failed = None;
        for tenant in self.backend().due_tenants(now).await? {
            let authority = self.for_tenant(tenant.clone());
            // One tenant's failure does not hold back the others' ends and expiries.
            for command in [Command::Sweep { now }, Command::ExpireApprovals { now }] {
                match authority.execute(command, "authorizer").await {
                    Ok(events) => recorded += events.len(),
                    Err(e) => {
                        tracing::warn!(tenant = %tenant, error = %e, "sweep failed for this tenant");
                        failed.get_or_insert(e);
                    }
                }
            }
        }
        failed.map_or(Ok(recorded), Err)
    }
}

/// A decision on a read, with what its answer and its use need from that read.
struct Decided {
    auth: domain::Authorization,
    /// The grant an allow uses, as read.
    grant: Option<Grant>,
    /// Until when the pinned standing grant runs.
    standing: Option<OffsetDateTime>,
    session_version: u64,
    profile: Option<String>,
}

impl Decided {
    /// The use a task-grant allow asks of its grant, held to the session as read.
    fn task_use<'a>(&self, session_id: &'a str, now: OffsetDateTime) -> Option<UseOf<'a>> {
        let Decision::Allow {
            kind: AuthorizationKind::BrowserTaskGrant, grant_id: Some(grant_id), typed_chars, ..
        } = self.auth.decision
        else {
            return None;
        };
        Some(UseOf {
            grant_id,
            typed_chars,
            now,
            session: Some(SessionAt { session_id, version: self.session_version }),
            read_used: self.grant.as_ref().map(|g| g.actions_used),
        })
    }

    /// The use event of a task-grant allow, for any ordinal.
    fn use_event(&self) -> Result<impl Fn(u32) -> Event + Send + Sync + use<>, AuthorityError> {
        let Some(Event::ToolCallAuthorized(template)) = self.auth.events.first().cloned() else {
            return Err(StoreError::Projection("a task-grant allow without its use event".into()).into());
        };
        Ok(move |ordinal| {
            Event::ToolCallAuthorized(ToolCallAuthorized { use_ordinal: Some(ordinal), ..template.clone() })
        })
    }

    /// The answer once use `ordinal` committed.
    fn allowed(
        self,
        u: UseOf<'_>,
        ordinal: u32,
        outcome: &ledger::AppendOutcome,
        use_event: &impl Fn(u32) -> Event,
        now: OffsetDateTime,
    ) -> Authorized {
        Authorized {
            decision: Decision::Allow {
                kind: AuthorizationKind::BrowserTaskGrant,
                grant_id: Some(u.grant_id),
                use_ordinal: Some(ordinal),
                typed_chars: u.typed_chars,
            },
            events: vec![use_event(ordinal)],
            at: Some(outcome.checkpoint()),
            grant: self.grant,
            standing_until: None,
            profile: self.profile,
            decided_at: now,
            replayed: false,
        }
    }
}

/// The browser profile `session_id` is bound to.
fn profile_of(w: &World, session_id: &str) -> Option<String> {
    w.sessions.get(session_id).and_then(|s| s.created.browser_profile_id.clone())
}
