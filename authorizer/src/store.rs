//! The authority's storage port: what a backend reads for one request (`Reader`, `Need`), and
//! what it does atomically (`Backend`: decide-and-append, the conditional use of a grant). The
//! memory model (`crate::memory`) and PostgreSQL (`crate::pg`) are its two adapters, held to
//! one contract (`crate::contract`).

use std::collections::HashMap;
use std::future::Future;

use grant_domain::catalogue::{Event, StandingGrantPinned};
use ledger::{AppendOutcome, Checkpoint, Metadata, StreamId, TenantId};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::{Approval, DomainError, Grant, Profile, RunSnapshots, Session, World};
use crate::error::{AuthorityError, StoreError};
use crate::scopes::TaskGrantSettings;

/// A partial world and the stream versions of what it holds: what `crate::state::load` reads
/// for one request and a backend decides on.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub tenant: TenantId,
    pub world: World,
    /// Filled and read by `crate::state`'s loading and planning.
    pub(crate) versions: HashMap<StreamId, u64>,
}

/// An entity as stored, with the version of its stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    pub value: T,
    pub version: u64,
}

/// A tenant's deployment settings and standing-grant pin: its `deployment` stream folded.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Deployment {
    pub settings: TaskGrantSettings,
    pub standing: Option<StandingGrantPinned>,
    #[serde(default)]
    pub policy: Option<String>,
}

/// Which grants to read.
#[derive(Debug, Clone, Copy)]
pub enum Grants<'a> {
    Id(Uuid),
    ActiveOfSession(&'a str),
    ActiveOnProfile(&'a str),
    Active,
    /// Active and past their expiry.
    DueBy(OffsetDateTime),
    OfPrincipal(&'a str),
}

/// Which approvals to read.
#[derive(Debug, Clone, Copy)]
pub enum Approvals<'a> {
    Id(Uuid),
    Token(&'a str),
    OfSession(&'a str),
    PendingOfSession(&'a str),
    /// Pending and past their expiry.
    DueBy(OffsetDateTime),
}

/// Reads one tenant's inline state. A backend locks what it reads when the request writes.
pub trait Reader: Send {
    /// Sessions by id, in id order; an id not stored is left out.
    fn sessions(&mut self, ids: &[&str]) -> impl Future<Output = Result<Vec<Versioned<Session>>, StoreError>> + Send;
    /// A profile nobody recorded anything for reads as the default at version 0.
    fn profile(&mut self, id: &str) -> impl Future<Output = Result<Versioned<Profile>, StoreError>> + Send;
    fn deployment(&mut self) -> impl Future<Output = Result<Versioned<Deployment>, StoreError>> + Send;
    /// In approval-id order.
    fn approvals(
        &mut self,
        which: Approvals<'_>,
    ) -> impl Future<Output = Result<Vec<Versioned<Approval>>, StoreError>> + Send;
    /// In grant-id order.
    fn grants(&mut self, which: Grants<'_>) -> impl Future<Output = Result<Vec<Grant>, StoreError>> + Send;
    /// The ids of `principal`'s sessions not deleted, in id order, at most `limit`.
    fn chats(&mut self, principal: &str, limit: usize) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;
    /// The ids of `principal`'s sessions neither deleted nor stopped whose task a worker may take
    /// at `now` (not ended, its lease none or past), in id order, at most `limit`.
    fn open_tasks(
        &mut self,
        principal: &str,
        now: OffsetDateTime,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;
    fn run(&mut self, session: &str, run: &str) -> impl Future<Output = Result<RunSnapshots, StoreError>> + Send;
    /// The ids of `principal`'s sessions neither deleted nor stopped, in id order, at most `limit`.
    fn sessions_to_stop(
        &mut self,
        principal: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;
}

/// Each awaited approval's version and its session's, by tenant and approval id.
pub type Marks = HashMap<(TenantId, Uuid), (u64, u64)>;

/// What one request reads.
#[derive(Debug, Clone, Copy)]
pub enum Need<'a> {
    /// The session alone.
    Session(&'a str),
    /// A session to create and the profile it would bind.
    NewSession {
        session: &'a str,
        profile: Option<&'a str>,
    },
    /// The session and its active grant (locked with it when the request writes).
    SessionGrant(&'a str),
    /// The profile and the active grants on it.
    Profile(&'a str),
    /// The settings, and every active grant when they may end some.
    Deployment {
        grants: bool,
    },
    /// An approval, its session with its active grant, the session's profile, the settings.
    Approval(Uuid),
    /// The approval a token was issued for, its session, and the run's snapshots.
    Token {
        sha256: &'a str,
        run: &'a str,
    },
    DueApprovals(OffsetDateTime),
    Grant(Uuid),
    DueGrants(OffsetDateTime),
    /// What `authorize` reads: the session, its active grant, the profiles of both, the settings;
    /// and with `credential`, whether the caller's credential (recognised from a replica's
    /// memory) is still live, in the same read (a backend that `confirms_credentials` only).
    Authorize {
        session: &'a str,
        credential: Option<Uuid>,
    },
    SessionApprovals(&'a str),
    /// A session to stop: it, its active grant and its pending approvals (locked with it).
    SessionStop(&'a str),
    /// What the owner's Stop everything reads: up to [`STOP_BATCH`] of the principal's sessions
    /// neither deleted nor stopped, each as `SessionStop` reads it.
    PrincipalStop(&'a str),
    /// A principal's grants and their sessions.
    PrincipalGrants(&'a str),
    /// A session a task starts in: it, its waiting cards, its profile and the settings.
    SessionTask(&'a str),
    /// Up to [`MAX_CHATS`] of a principal's sessions, each with its active grant and pending cards.
    PrincipalChats(&'a str),
    /// Up to [`CLAIM_BATCH`] of a principal's sessions whose task a worker may take at this time.
    OpenTasks(&'a str, OffsetDateTime),
}

/// The most chats one inbox lists.
pub(crate) const MAX_CHATS: usize = 200;

/// The most sessions one claim reads; the first is taken.
pub(crate) const CLAIM_BATCH: usize = 1;

/// The most sessions one Stop everything stops in one transaction; the caller asks again for more.
pub const STOP_BATCH: usize = 100;

/// What a transaction decided and recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Transacted<T> {
    pub value: T,
    pub events: Vec<Event>,
    /// Where the ledger reached (`None` when nothing was appended).
    pub at: Option<Checkpoint>,
}

/// The decision function a backend runs inside its transaction, on what the request read (the
/// partial world and the stream versions it was read at): the events to record and a value for
/// the caller.
pub type Decide<'a, T> = dyn Fn(&Loaded) -> Result<(Vec<Event>, T), DomainError> + Sync + 'a;

/// The session a use is made in, at the version its decision read.
#[derive(Debug, Clone, Copy)]
pub struct SessionAt<'a> {
    pub session_id: &'a str,
    pub version: u64,
}

/// One use of a task grant: what it spends, and what the decision that allowed it read.
#[derive(Debug, Clone, Copy)]
pub struct UseOf<'a> {
    pub grant_id: Uuid,
    pub typed_chars: u32,
    /// The deciding replica's clock; the database's is checked as well.
    pub now: OffsetDateTime,
    /// With a session, the use holds only while the session is at the version read.
    pub session: Option<SessionAt<'a>>,
    /// The grant's `actions_used` as the decision read it: the use is first tried as the very
    /// next one, in one statement.
    pub read_used: Option<u32>,
}

/// The answer to a use request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Consumed {
    /// Committed: the action may be dispatched. `ordinal` is 1..=`MAX_ACTIONS`.
    Allowed { ordinal: u32, outcome: AppendOutcome },
    /// The grant is spent, expired, ended, the session moved, or the text does not fit: ask
    /// the owner.
    Refused,
}

/// Where the authority's events and inline state live.
pub trait Backend: Send + Sync {
    /// Reads what `need` names for `tenant` (locking it when `lock`), runs `decide` on it, and
    /// appends the events with the inline state written, atomically, each stream expecting the
    /// version it was read at. An event id stored already is refused (`DuplicateEventId`), never
    /// answered as a replay.
    fn transact<T: Send>(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        need: Need<'_>,
        lock: bool,
        decide: &Decide<'_, T>,
    ) -> impl Future<Output = Result<Transacted<T>, AuthorityError>> + Send;

    /// Consumes one use atomically and records `use_event(ordinal)` with it; with `u.session`,
    /// only while that session is still at the version the decision read.
    fn consume(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        u: UseOf<'_>,
        use_event: impl Fn(u32) -> Event + Send + Sync,
    ) -> impl Future<Output = Result<Consumed, StoreError>> + Send;

    /// A tenant's whole inline state (verify and tests).
    fn dump(&self, tenant: &TenantId) -> impl Future<Output = Result<World, StoreError>> + Send;

    /// The event stored under `event_id` in `tenant`, if any: the decision an idempotent call
    /// already recorded.
    fn recorded(
        &self,
        tenant: &TenantId,
        event_id: Uuid,
    ) -> impl Future<Output = Result<Option<ledger::RecordedEvent>, StoreError>> + Send;

    /// Tenants with a grant or a pending approval past its expiry, in tenant order.
    fn due_tenants(&self, now: OffsetDateTime) -> impl Future<Output = Result<Vec<TenantId>, StoreError>> + Send;

    /// For each awaited approval, a mark that moves whenever its answer may have: the approval's
    /// version and its session's (a Stop moves the session). One read serves every wait a replica
    /// holds, so a held wait makes no read of its own. An approval not stored is left out.
    fn approval_marks(&self, keys: &[(TenantId, Uuid)]) -> impl Future<Output = Result<Marks, StoreError>> + Send;

    /// Moves after each append this backend learns of: its own, and other processes' where the
    /// store hears of them.
    fn wake_ups(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Whether `Need::Authorize`'s read can confirm a caller's credential itself (it lives in the
    /// same store); otherwise the caller confirms it before the call.
    fn confirms_credentials(&self) -> bool {
        false
    }

    /// What this process last read for an authorization in `session` (`Need::Authorize`), kept
    /// so the session's next allow can skip the read. Never believed on its own: an allow decided
    /// on it is made only through [`Backend::consume_remembered`], which holds every version it
    /// was read at; any other decision on it is thrown away and made on a fresh read.
    fn remembered(&self, _tenant: &TenantId, _session: &str) -> Option<std::sync::Arc<Loaded>> {
        None
    }

    /// [`Backend::consume`] for an allow decided on `read` (from [`Backend::remembered`]): made
    /// only while the session, the settings, each profile read and the grant's count are still at
    /// the versions in `read`, and, with `credential`, while that credential is live, all in the
    /// statement that makes the use. `Refused` when anything moved: decide again on a fresh read.
    fn consume_remembered(
        &self,
        _tenant: &TenantId,
        _metadata: &Metadata,
        _u: UseOf<'_>,
        _read: &Loaded,
        _credential: Option<Uuid>,
        _use_event: impl Fn(u32) -> Event + Send + Sync,
    ) -> impl Future<Output = Result<Consumed, StoreError>> + Send {
        std::future::ready(Ok(Consumed::Refused))
    }
}
