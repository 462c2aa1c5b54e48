//! The authority store's contract: what every `Backend` must do, run against the memory model
//! and PostgreSQL alike (as `ledger::contract` is for the event store). Each case works in a
//! tenant of its own, so one database serves the whole suite.
#![allow(clippy::missing_panics_doc)] // a contract case is an assertion

use grant_domain::catalogue::{
    ActionView, Author, AuthorizationKind, EndReason, Event, ProfileClaimed, SessionCreated, SessionMessageRecorded,
    SiteScope, Surface, TaskGrantCreated, TaskGrantEnded, ToolCallAuthorized,
};
use ledger::{Metadata, TenantId};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

use crate::domain::World;
use crate::error::{AuthorityError, StoreError};
use crate::limits::{MAX_ACTIONS, MAX_TYPED_CHARS};
use crate::state::{decision_id, fold};
use crate::store::{Backend, Consumed, Need, SessionAt, UseOf};

/// Every case, each in a fresh tenant.
pub async fn run_all<B: Backend>(backend: &B) {
    a_written_world_reads_back(backend).await;
    uses_stop_at_the_action_cap(backend).await;
    uses_stop_at_the_typed_character_budget(backend).await;
    a_use_at_the_count_read_or_past_it_is_the_next_one(backend).await;
    an_ended_or_expired_grant_is_not_used(backend).await;
    a_use_holds_only_while_the_session_is_as_read(backend).await;
    a_decision_id_is_stored_once_and_found_in_its_tenant_only(backend).await;
    a_second_active_grant_in_a_session_is_refused(backend).await;
    ending_an_ended_grant_is_contended(backend).await;
    an_end_states_the_uses_the_grant_gave(backend).await;
    due_tenants_are_those_with_something_past_its_time(backend).await;
    a_principal_stop_reads_their_live_sessions_only(backend).await;
    an_approvals_mark_moves_with_its_answer_and_its_sessions_stop(backend).await;
}

/// A tenant no other case uses.
pub fn fresh_tenant() -> TenantId {
    TenantId::new(format!("contract-{}", Uuid::new_v4().simple())).expect("a valid tenant id")
}

const OWNER: &str = "owner-1";
const PROFILE: &str = "profile-1";

fn session_created(tenant: &TenantId, session: &str) -> Event {
    Event::SessionCreated(SessionCreated {
        session_id: session.into(),
        tenant_id: tenant.as_str().into(),
        principal_id: OWNER.into(),
        browser_profile_id: Some(PROFILE.into()),
        schedule_id: None,
        surface: Surface::Interactive,
    })
}

fn grant_created(tenant: &TenantId, grant_id: Uuid, session: &str, expires_at: OffsetDateTime) -> Event {
    Event::TaskGrantCreated(TaskGrantCreated {
        grant_id,
        approval_id: Uuid::new_v4(),
        tenant_id: tenant.as_str().into(),
        principal_id: OWNER.into(),
        session_id: session.into(),
        profile_id: PROFILE.into(),
        profile_generation: 0,
        agent_version: "agent-1".into(),
        policy_version: "sha256:contract".into(),
        scope: SiteScope { origin: "https://www.lesson.test".into(), path_prefix: "/lesson".into() },
        created_at: expires_at - Duration::minutes(30),
        expires_at,
        max_actions: MAX_ACTIONS,
        max_typed_chars: MAX_TYPED_CHARS,
    })
}

fn authorized(session: &str, kind: AuthorizationKind, grant_id: Option<Uuid>, chars: u32) -> Event {
    Event::ToolCallAuthorized(ToolCallAuthorized {
        session_id: session.into(),
        run_id: "run-1".into(),
        tool_call_id: Uuid::new_v4().to_string(),
        authorization_kind: kind,
        grant_id,
        use_ordinal: None,
        typed_chars: chars,
        view: ActionView { action_kind: "type".into(), describable: true, ..ActionView::default() },
        snapshot_id: None,
        decided: None,
    })
}

/// Appends `events` after reading `need`, deciding nothing else.
async fn append<B: Backend>(
    backend: &B,
    tenant: &TenantId,
    metadata: &Metadata,
    need: Need<'_>,
    events: Vec<Event>,
) -> Result<(), AuthorityError> {
    backend.transact(tenant, metadata, need, true, &|_| Ok((events.clone(), ()))).await.map(drop)
}

/// A session of `OWNER` on a profile they own, with a task grant expiring at `expires_at`.
async fn session_with_grant<B: Backend>(backend: &B, tenant: &TenantId, expires_at: OffsetDateTime) -> Uuid {
    let by = Metadata::by(OWNER);
    let claim = Event::ProfileClaimed(ProfileClaimed { profile_id: PROFILE.into(), owner_principal_id: OWNER.into() });
    append(backend, tenant, &by, Need::Profile(PROFILE), vec![claim]).await.expect("a profile claimed");
    let new = Need::NewSession { session: "s1", profile: Some(PROFILE) };
    append(backend, tenant, &by, new, vec![session_created(tenant, "s1")]).await.expect("a session created");
    let grant_id = Uuid::new_v4();
    let grant = grant_created(tenant, grant_id, "s1", expires_at);
    append(backend, tenant, &by, Need::SessionGrant("s1"), vec![grant]).await.expect("a grant created");
    grant_id
}

async fn use_grant<B: Backend>(
    backend: &B,
    tenant: &TenantId,
    grant_id: Uuid,
    chars: u32,
    now: OffsetDateTime,
    session: Option<SessionAt<'_>>,
) -> Consumed {
    use_read(backend, tenant, grant_id, chars, now, session, None).await
}

/// A use whose decision read the grant at `read_used` uses (`None`: read nothing of it).
async fn use_read<B: Backend>(
    backend: &B,
    tenant: &TenantId,
    grant_id: Uuid,
    chars: u32,
    now: OffsetDateTime,
    session: Option<SessionAt<'_>>,
    read_used: Option<u32>,
) -> Consumed {
    let u = UseOf { grant_id, typed_chars: chars, now, session, read_used };
    let event = |ordinal| match authorized("s1", AuthorizationKind::BrowserTaskGrant, Some(grant_id), chars) {
        Event::ToolCallAuthorized(t) => {
            Event::ToolCallAuthorized(ToolCallAuthorized { use_ordinal: Some(ordinal), ..t })
        }
        other => other,
    };
    backend.consume(tenant, &Metadata::by(OWNER), u, event).await.expect("the store answers")
}

async fn world<B: Backend>(backend: &B, tenant: &TenantId) -> World {
    backend.dump(tenant).await.expect("the store answers")
}

/// What was appended is what a read and a dump give back, and equals the fold of the events.
pub async fn a_written_world_reads_back<B: Backend>(backend: &B) {
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    let grant_id = session_with_grant(backend, tenant, now + Duration::minutes(30)).await;
    let read = backend
        .transact(tenant, &Metadata::default(), Need::Authorize { session: "s1", credential: None }, false, &|l| {
            Ok((vec![], (l.world.clone(), l.session_version("s1"))))
        })
        .await
        .expect("a read");
    let (read_world, session_version) = &read.value;
    let session = read_world.sessions.get("s1").expect("the session reads back");
    assert_eq!(session.active_grant, Some(grant_id), "the session points at its active grant");
    assert_eq!(*session_version, 1, "a session of one event reads at version 1");
    assert_eq!(read_world.profiles.get(PROFILE).and_then(|p| p.owner.as_deref()), Some(OWNER));
    assert!(read.events.is_empty() && read.at.is_none(), "a read appends nothing");
    let events = [
        Event::ProfileClaimed(ProfileClaimed { profile_id: PROFILE.into(), owner_principal_id: OWNER.into() }),
        session_created(tenant, "s1"),
    ];
    let dumped = world(backend, tenant).await;
    let mut folded = fold(&events);
    folded.grants = dumped.grants.clone();
    folded.sessions.get_mut("s1").expect("folded").active_grant = Some(grant_id);
    assert_eq!(dumped.sessions, folded.sessions, "the dump's sessions are the fold of their events");
    assert_eq!(dumped.profiles, folded.profiles, "the dump's profiles are the fold of their events");
    let g = dumped.grants.get(&grant_id).expect("the grant");
    assert!(g.is_active() && g.actions_used == 0 && g.chars_used == 0, "{g:?}");
}

/// At most `MAX_ACTIONS` uses, numbered 1.. without a gap, and then none.
pub async fn uses_stop_at_the_action_cap<B: Backend>(backend: &B) {
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    let grant_id = session_with_grant(backend, tenant, now + Duration::minutes(30)).await;
    for n in 1..=MAX_ACTIONS {
        match use_grant(backend, tenant, grant_id, 0, now, None).await {
            Consumed::Allowed { ordinal, .. } => assert_eq!(ordinal, n, "uses are numbered in order"),
            Consumed::Refused => panic!("use {n} of {MAX_ACTIONS} was refused"),
        }
    }
    assert_eq!(use_grant(backend, tenant, grant_id, 0, now, None).await, Consumed::Refused, "no use past the cap");
    let g = world(backend, tenant).await.grants.remove(&grant_id).expect("the grant");
    assert_eq!(g.actions_used, MAX_ACTIONS);
}

/// Typed characters are charged, and a use whose text does not fit is refused and spends nothing.
pub async fn uses_stop_at_the_typed_character_budget<B: Backend>(backend: &B) {
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    let grant_id = session_with_grant(backend, tenant, now + Duration::minutes(30)).await;
    let first = MAX_TYPED_CHARS - 10;
    assert!(matches!(use_grant(backend, tenant, grant_id, first, now, None).await, Consumed::Allowed { .. }));
    assert_eq!(use_grant(backend, tenant, grant_id, 11, now, None).await, Consumed::Refused, "11 do not fit in 10");
    assert!(matches!(use_grant(backend, tenant, grant_id, 10, now, None).await, Consumed::Allowed { ordinal: 2, .. }));
    assert_eq!(use_grant(backend, tenant, grant_id, 1, now, None).await, Consumed::Refused, "the budget is spent");
    let g = world(backend, tenant).await.grants.remove(&grant_id).expect("the grant");
    assert_eq!((g.actions_used, g.chars_used), (2, MAX_TYPED_CHARS), "refused uses spent nothing");
}

/// A use tried as the very next one after the count its decision read: the next ordinal when the
/// count still holds, and still the next one, never a second at the same place, when another
/// use came first.
pub async fn a_use_at_the_count_read_or_past_it_is_the_next_one<B: Backend>(backend: &B) {
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    let grant_id = session_with_grant(backend, tenant, now + Duration::minutes(30)).await;
    let first = use_read(backend, tenant, grant_id, 3, now, None, Some(0)).await;
    assert!(matches!(first, Consumed::Allowed { ordinal: 1, .. }), "{first:?}");
    let stale = use_read(backend, tenant, grant_id, 4, now, None, Some(0)).await;
    assert!(matches!(stale, Consumed::Allowed { ordinal: 2, .. }), "a stale count still takes the next use: {stale:?}");
    let g = world(backend, tenant).await.grants.remove(&grant_id).expect("the grant");
    assert_eq!((g.actions_used, g.chars_used), (2, 7));
    let spent = use_read(backend, tenant, grant_id, 0, now, None, Some(MAX_ACTIONS)).await;
    assert!(matches!(spent, Consumed::Allowed { ordinal: 3, .. }), "a count read at the cap is no proof: {spent:?}");
}

/// A grant that ended, or whose time is up by the deciding clock, gives no use.
pub async fn an_ended_or_expired_grant_is_not_used<B: Backend>(backend: &B) {
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    let expires = now + Duration::minutes(30);
    let grant_id = session_with_grant(backend, tenant, expires).await;
    let late = expires + Duration::seconds(1);
    assert_eq!(use_grant(backend, tenant, grant_id, 0, late, None).await, Consumed::Refused, "past its expiry");
    let end = Event::TaskGrantEnded(TaskGrantEnded { grant_id, reason: EndReason::Revoked, uses: None });
    append(backend, tenant, &Metadata::by(OWNER), Need::Grant(grant_id), vec![end]).await.expect("ended");
    assert_eq!(use_grant(backend, tenant, grant_id, 0, now, None).await, Consumed::Refused, "after its end");
    let unknown = Uuid::new_v4();
    assert_eq!(use_grant(backend, tenant, unknown, 0, now, None).await, Consumed::Refused, "a grant never made");
    let g = world(backend, tenant).await.grants.remove(&grant_id).expect("the grant");
    assert_eq!((g.actions_used, g.ended), (0, Some(EndReason::Revoked)));
}

/// A use names the session version its decision read: once the session moved, it is refused.
pub async fn a_use_holds_only_while_the_session_is_as_read<B: Backend>(backend: &B) {
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    let grant_id = session_with_grant(backend, tenant, now + Duration::minutes(30)).await;
    let at = |version| Some(SessionAt { session_id: "s1", version });
    assert!(matches!(use_grant(backend, tenant, grant_id, 0, now, at(1)).await, Consumed::Allowed { .. }));
    let message = Event::SessionMessageRecorded(SessionMessageRecorded {
        session_id: "s1".into(),
        message_id: "m1".into(),
        author: Author::Owner,
    });
    append(backend, tenant, &Metadata::by(OWNER), Need::Session("s1"), vec![message]).await.expect("a message");
    assert_eq!(use_grant(backend, tenant, grant_id, 0, now, at(1)).await, Consumed::Refused, "the session moved");
    assert!(matches!(use_grant(backend, tenant, grant_id, 0, now, at(2)).await, Consumed::Allowed { ordinal: 2, .. }));
}

/// A call's decision event is stored once: a second decision of the same call is refused, and
/// the first is found by its id in its own tenant, never in another.
pub async fn a_decision_id_is_stored_once_and_found_in_its_tenant_only<B: Backend>(backend: &B) {
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    session_with_grant(backend, tenant, now + Duration::minutes(30)).await;
    let call = Uuid::new_v4();
    let metadata = Metadata { principal: OWNER.into(), causation_id: Some(call), correlation_id: Some(Uuid::new_v4()) };
    let allow = || vec![authorized("s1", AuthorizationKind::StandingGrant, None, 0)];
    append(backend, tenant, &metadata, Need::Session("s1"), allow()).await.expect("the first decision");
    let second = append(backend, tenant, &metadata, Need::Session("s1"), allow()).await;
    assert!(
        matches!(second, Err(AuthorityError::Store(StoreError::Append(ledger::AppendError::DuplicateEventId { .. })))),
        "a second decision of one call is refused: {second:?}"
    );
    let found = backend.recorded(tenant, decision_id(call)).await.expect("the store answers").expect("recorded");
    assert_eq!(found.metadata.correlation_id, metadata.correlation_id, "the first decision's digest");
    let elsewhere = backend.recorded(&fresh_tenant(), decision_id(call)).await.expect("the store answers");
    assert!(elsewhere.is_none(), "another tenant never sees it");
}

/// A session has one active grant; a second is refused and writes nothing.
pub async fn a_second_active_grant_in_a_session_is_refused<B: Backend>(backend: &B) {
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    let first = session_with_grant(backend, tenant, now + Duration::minutes(30)).await;
    let second = grant_created(tenant, Uuid::new_v4(), "s1", now + Duration::minutes(30));
    // Read as if no grant were active (by another session), so the refusal is the store's own.
    let out = append(backend, tenant, &Metadata::by(OWNER), Need::SessionGrant("other"), vec![second]).await;
    assert!(matches!(out, Err(AuthorityError::Store(StoreError::Projection(_)))), "{out:?}");
    let w = world(backend, tenant).await;
    assert_eq!(w.grants.keys().copied().collect::<Vec<_>>(), vec![first], "nothing was written");
}

/// An end states how many uses the grant gave; one that read a count a use has since passed is
/// contention, so an auditor's count of the uses in the log always matches the end.
pub async fn an_end_states_the_uses_the_grant_gave<B: Backend>(backend: &B) {
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    let grant_id = session_with_grant(backend, tenant, now + Duration::minutes(30)).await;
    assert!(matches!(use_grant(backend, tenant, grant_id, 0, now, None).await, Consumed::Allowed { .. }));
    let end = |uses| vec![Event::TaskGrantEnded(TaskGrantEnded { grant_id, reason: EndReason::Revoked, uses })];
    let by = Metadata::by(OWNER);
    let stale = append(backend, tenant, &by, Need::Session("s1"), end(Some(0))).await;
    assert!(stale.as_ref().is_err_and(AuthorityError::contended), "{stale:?}");
    append(backend, tenant, &by, Need::Grant(grant_id), end(Some(1))).await.expect("ended at its count");
    let g = world(backend, tenant).await.grants.remove(&grant_id).expect("the grant");
    assert_eq!((g.actions_used, g.ended), (1, Some(EndReason::Revoked)));
}

/// An end of a grant another request ended already is contention: decide again.
pub async fn ending_an_ended_grant_is_contended<B: Backend>(backend: &B) {
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    let grant_id = session_with_grant(backend, tenant, now + Duration::minutes(30)).await;
    let end = |reason| vec![Event::TaskGrantEnded(TaskGrantEnded { grant_id, reason, uses: None })];
    let by = Metadata::by(OWNER);
    append(backend, tenant, &by, Need::Grant(grant_id), end(EndReason::Revoked)).await.expect("ended");
    // Read nothing of the grant, so the second end is not seen to be stale until it is written.
    let again = append(backend, tenant, &by, Need::Session("s1"), end(EndReason::Expired)).await;
    assert!(again.as_ref().is_err_and(AuthorityError::contended), "{again:?}");
    let g = world(backend, tenant).await.grants.remove(&grant_id).expect("the grant");
    assert_eq!(g.ended, Some(EndReason::Revoked), "the first end stands");
}

/// Tenants whose grant is past its expiry are due; before it, they are not.
pub async fn due_tenants_are_those_with_something_past_its_time<B: Backend>(backend: &B) {
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    let expires = now + Duration::minutes(30);
    session_with_grant(backend, tenant, expires).await;
    let due = |at| async move { backend.due_tenants(at).await.expect("the store answers") };
    assert!(!due(now).await.contains(tenant), "not due before its expiry");
    assert!(due(expires).await.contains(tenant), "due at its expiry");
}

/// Stop everything reads the principal's sessions neither deleted nor stopped, in id order, each
/// with its active grant, and no one else's.
pub async fn a_principal_stop_reads_their_live_sessions_only<B: Backend>(backend: &B) {
    use grant_domain::catalogue::{SessionDeleted, SessionStopped};
    let tenant = &fresh_tenant();
    let now = OffsetDateTime::now_utc();
    let grant_id = session_with_grant(backend, tenant, now + Duration::minutes(30)).await;
    let by = Metadata::by(OWNER);
    for id in ["s0", "s2", "s3"] {
        let new = Need::NewSession { session: id, profile: Some(PROFILE) };
        append(backend, tenant, &by, new, vec![session_created(tenant, id)]).await.expect("a session created");
    }
    let stopped = Event::SessionStopped(SessionStopped { session_id: "s2".into(), stopped_at: now });
    append(backend, tenant, &by, Need::Session("s2"), vec![stopped]).await.expect("a session stopped");
    let deleted = Event::SessionDeleted(SessionDeleted { session_id: "s3".into() });
    append(backend, tenant, &by, Need::Session("s3"), vec![deleted]).await.expect("a session deleted");
    let mut other = session_created(tenant, "s4");
    if let Event::SessionCreated(c) = &mut other {
        c.principal_id = "owner-2".into();
        c.browser_profile_id = None;
    }
    let new = Need::NewSession { session: "s4", profile: None };
    append(backend, tenant, &Metadata::by("owner-2"), new, vec![other]).await.expect("another's session");
    let read = backend
        .transact(tenant, &by, Need::PrincipalStop(OWNER), true, &|l| {
            let mut ids: Vec<String> = l.world.sessions.keys().cloned().collect();
            ids.sort();
            Ok((vec![], (ids, l.world.sessions.get("s1").and_then(|s| s.active_grant))))
        })
        .await
        .expect("a read");
    assert_eq!(read.value.0, ["s0", "s1"], "live sessions of the principal, no one else's");
    assert_eq!(read.value.1, Some(grant_id), "each with its active grant");
}

/// The mark a replica's waits are woken by moves when the approval is answered and when its
/// session is stopped, not when another session moves; an approval not stored, or stored in
/// another tenant, has none.
pub async fn an_approvals_mark_moves_with_its_answer_and_its_sessions_stop<B: Backend>(backend: &B) {
    use grant_domain::catalogue::{ActionView, ApprovalRequested, ApprovalResolved, Resolution, SessionStopped};
    let (tenant, other) = (&fresh_tenant(), fresh_tenant());
    let now = OffsetDateTime::now_utc();
    session_with_grant(backend, tenant, now + Duration::minutes(30)).await;
    let by = Metadata::by(OWNER);
    let new = Need::NewSession { session: "s2", profile: Some(PROFILE) };
    append(backend, tenant, &by, new, vec![session_created(tenant, "s2")]).await.expect("a session created");
    let approval_id = Uuid::new_v4();
    let asked = Event::ApprovalRequested(ApprovalRequested {
        approval_id,
        session_id: "s1".into(),
        run_id: "r1".into(),
        view: ActionView {
            action_kind: "click".into(),
            action_summary: "Click a button".into(),
            ..ActionView::default()
        },
        offer: None,
        not_covered_reason: None,
        expires_at: now + Duration::minutes(10),
        binding: None,
        agent_version: "agent-1".into(),
    });
    append(backend, tenant, &by, Need::Session("s1"), vec![asked]).await.expect("a card asked");
    let keys = [(tenant.clone(), approval_id), (other, approval_id), (tenant.clone(), Uuid::new_v4())];
    let mark = || async { backend.approval_marks(&keys).await.expect("the store answers") };
    let first = mark().await;
    assert_eq!(first.len(), 1, "only the stored approval, in its own tenant: {first:?}");
    let at = |m: &crate::store::Marks| m.get(&keys[0]).copied().expect("the approval's mark");
    let stopped = Event::SessionStopped(SessionStopped { session_id: "s2".into(), stopped_at: now });
    append(backend, tenant, &by, Need::Session("s2"), vec![stopped]).await.expect("another session stopped");
    assert_eq!(at(&mark().await), at(&first), "another session moving leaves it");
    let resolved = Event::ApprovalResolved(ApprovalResolved {
        approval_id,
        resolution: Resolution::Deny,
        status: Resolution::Deny.status(),
        grant_id: None,
    });
    append(backend, tenant, &by, Need::Approval(approval_id), vec![resolved]).await.expect("the card answered");
    let answered = at(&mark().await);
    assert!(answered.0 > at(&first).0, "the answer moves the approval's part");
    let stopped = Event::SessionStopped(SessionStopped { session_id: "s1".into(), stopped_at: now });
    append(backend, tenant, &by, Need::Session("s1"), vec![stopped]).await.expect("its session stopped");
    assert!(at(&mark().await).1 > answered.1, "its session's stop moves the session's part");
}
