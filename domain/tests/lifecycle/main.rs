//! Given/when/then tests of the grant lifecycle: one per rule of the decision record, and its
//! pipeline cases.

use std::collections::HashMap;

use classifier::{Action, ElementFacts, FieldKind, PageFacts};
use grant_domain::catalogue::{
    ActionView, ApprovalStatus, Author, AuthorizationKind, EndReason, Event, FormReview, ProfileClaimed, Resolution,
    SessionCreated, SessionMessageRecorded, SignInPhase, SiteScope, Surface, TaskGrantCreated,
};
use grant_domain::limits::{MAX_ACTIONS, MAX_TYPED_CHARS};
use grant_domain::model::{
    ApprovalState, Authorization, AuthorizeRequest, Command, Conflict, Decision, Denial, DomainError, RunContext,
    Versions, World, authorize, decide,
};
use grant_domain::policy::Policy;
use grant_domain::scopes::{TaskGrantSettings, parse_scopes};
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

const SCOPE: &str = "https://www.lesson.test/lesson";
const PAGE: &str = "https://www.lesson.test/lesson/unit-3";

fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
}

fn versions() -> Versions {
    Versions { agent: "agent-7".into(), policy: Policy::empty().version }
}

fn scope() -> SiteScope {
    parse_scopes(SCOPE).unwrap().remove(0)
}

fn session(id: &str, schedule: Option<&str>, surface: Surface) -> SessionCreated {
    SessionCreated {
        session_id: id.into(),
        tenant_id: "tenant-1".into(),
        principal_id: "owner".into(),
        browser_profile_id: Some("profile-1".into()),
        schedule_id: schedule.map(Into::into),
        surface,
    }
}

fn owner_said(session_id: &str) -> Event {
    Event::SessionMessageRecorded(SessionMessageRecorded {
        session_id: session_id.into(),
        message_id: "m".into(),
        author: Author::Owner,
    })
}

/// A world with the flag on, the scope configured, and an owner's interactive session `s1`.
fn given() -> World {
    let settings = TaskGrantSettings { enabled: true, scopes: vec![scope()] };
    let mut world = World::default();
    for e in decide(&world, Command::ChangeSettings(settings)).unwrap() {
        world.apply(&e);
    }
    world.applied(&[
        Event::ProfileClaimed(ProfileClaimed { profile_id: "profile-1".into(), owner_principal_id: "owner".into() }),
        Event::SessionCreated(session("s1", None, Surface::Interactive)),
        owner_said("s1"),
    ])
}

fn when(world: &mut World, command: Command) -> Result<Vec<Event>, DomainError> {
    let events = decide(world, command)?;
    events.iter().for_each(|e| world.apply(e));
    Ok(events)
}

fn button(name: &str) -> ElementFacts {
    ElementFacts {
        role: "button".into(),
        name: Some(name.into()),
        visible_text: Some(name.into()),
        ..ElementFacts::default()
    }
}

fn view() -> ActionView {
    ActionView {
        action_kind: "click".into(),
        describable: true,
        action_summary: "Click a button on www.lesson.test/lesson".into(),
        ..ActionView::default()
    }
}

fn act(session_id: &str, element: ElementFacts, action: Action) -> AuthorizeRequest {
    AuthorizeRequest {
        tenant_id: "tenant-1".into(),
        principal_id: "owner".into(),
        session_id: session_id.into(),
        run_id: "run-1".into(),
        tool_call_id: "call-1".into(),
        run: RunContext { interactive: true, top_level: true, turn_visible: true },
        turn_tool_calls: vec!["browser.observe".into(), "browser.act".into()],
        versions: versions(),
        element,
        page: PageFacts { url: PAGE.into() },
        action,
        view: view(),
        snapshot: None,
        field_id: None,
        facts_profile: None,
        form: None,
        text_sha256: None,
    }
}

fn tile(name: &str) -> AuthorizeRequest {
    act("s1", button(name), Action::Click)
}

/// Authorizes and applies the events, as the store would commit them.
fn run(world: &mut World, policy: &Policy, req: &AuthorizeRequest, now: OffsetDateTime) -> Authorization {
    let out = authorize(world, policy, req, now, Uuid::new_v4());
    out.events.iter().for_each(|e| world.apply(e));
    out
}

/// The card's first approval with "Allow for this task": returns the new grant's id.
fn allow_for_task(world: &mut World, now: OffsetDateTime) -> Uuid {
    let Decision::RequireApproval { approval_id, offer, .. } =
        run(world, &Policy::empty(), &tile("el gato"), now).decision
    else {
        panic!("the first act must ask")
    };
    assert_eq!(offer.expect("an offer inside the scope").scope, scope());
    let grant_id = Uuid::new_v4();
    when(world, resolve(approval_id, Resolution::ApproveForTask, Some(scope()), grant_id, now)).unwrap();
    grant_id
}

/// "Allow for this task" on a card asked under `policy`: the grant pins that policy's version.
fn allow_for_task_under(world: &mut World, policy: &Policy) -> Uuid {
    let Decision::RequireApproval { approval_id, .. } = run(world, policy, &tile("Next"), t0()).decision else {
        panic!("the first act must ask")
    };
    let grant_id = Uuid::new_v4();
    let mut command = resolve(approval_id, Resolution::ApproveForTask, Some(scope()), grant_id, t0());
    if let Command::ResolveApproval { versions, .. } = &mut command {
        versions.policy = policy.version.clone();
    }
    when(world, command).unwrap();
    grant_id
}

fn resolve(
    approval_id: Uuid,
    resolution: Resolution,
    repeated: Option<SiteScope>,
    grant: Uuid,
    now: OffsetDateTime,
) -> Command {
    Command::ResolveApproval {
        approval_id,
        principal_id: "owner".into(),
        resolution,
        repeated_scope: repeated,
        new_grant_id: grant,
        versions: versions(),
        now,
        token_sha256: None,
    }
}

fn reason(out: &Authorization) -> Option<&str> {
    match &out.decision {
        Decision::RequireApproval { reason, .. } => reason.map(|r| r.code()),
        other => panic!("expected an approval, got {other:?}"),
    }
}

fn ended(events: &[Event]) -> Vec<(Uuid, EndReason)> {
    events
        .iter()
        .filter_map(|e| if let Event::TaskGrantEnded(x) = e { Some((x.grant_id, x.reason)) } else { None })
        .collect()
}

mod ends;
mod grants;
mod refusals;
mod standing;
mod tokens;
