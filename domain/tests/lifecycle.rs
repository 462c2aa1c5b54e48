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
        run: RunContext { interactive: true, top_level: true },
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
        Decision::RequireApproval { reason, .. } => reason.as_deref(),
        other => panic!("expected an approval, got {other:?}"),
    }
}

fn ended(events: &[Event]) -> Vec<(Uuid, EndReason)> {
    events
        .iter()
        .filter_map(|e| if let Event::TaskGrantEnded(x) = e { Some((x.grant_id, x.reason)) } else { None })
        .collect()
}

#[test]
fn approve_for_task_resolves_to_approved() {
    let mut world = given();
    let grant = allow_for_task(&mut world, t0());
    let approval = world.approvals.values().next().unwrap();
    assert_eq!(approval.state, ApprovalState::Resolved(Resolution::ApproveForTask));
    assert_eq!(Resolution::ApproveForTask.status(), ApprovalStatus::Approved);
    assert!(world.grants[&grant].is_active());
}

#[test]
fn offer_needs_the_flag_a_configured_scope_and_a_describable_element() {
    let mut world = given();
    let mut outside = tile("el gato");
    outside.page.url = "https://www.lesson.test/shop/1".into();
    let Decision::RequireApproval { offer, .. } = run(&mut world, &Policy::empty(), &outside, t0()).decision else {
        panic!()
    };
    assert_eq!(offer, None, "outside every scope");
    let mut other_origin = tile("el gato");
    other_origin.page.url = "https://other.test/lesson/1".into();
    assert!(matches!(
        run(&mut world, &Policy::empty(), &other_origin, t0()).decision,
        Decision::RequireApproval { offer: None, .. }
    ));
    let mut vague = tile("el gato");
    vague.view.describable = false;
    assert!(matches!(
        run(&mut world, &Policy::empty(), &vague, t0()).decision,
        Decision::RequireApproval { offer: None, .. }
    ));
    when(&mut world, Command::ChangeSettings(TaskGrantSettings::default())).unwrap();
    assert!(matches!(
        run(&mut world, &Policy::empty(), &tile("el gato"), t0()).decision,
        Decision::RequireApproval { offer: None, .. }
    ));
}

#[test]
fn refused_resolutions_leave_the_approval_pending() {
    let mut world = given();
    let Decision::RequireApproval { approval_id, .. } = run(&mut world, &Policy::empty(), &tile("x"), t0()).decision
    else {
        panic!()
    };
    let wider = SiteScope { origin: "https://www.lesson.test".into(), path_prefix: "/".into() };
    let cases = [
        (resolve(approval_id, Resolution::ApproveForTask, Some(wider), Uuid::new_v4(), t0()), Conflict::OfferMismatch),
        (resolve(approval_id, Resolution::ApproveForTask, None, Uuid::new_v4(), t0()), Conflict::OfferMismatch),
    ];
    for (command, code) in cases {
        assert!(matches!(when(&mut world, command), Err(DomainError::Conflict { code: c, .. }) if c == code));
        assert_eq!(world.approvals[&approval_id].state, ApprovalState::Pending);
    }
    // The scope was removed from configuration after the card was shown.
    let mut removed = world.clone();
    when(&mut removed, Command::ChangeSettings(TaskGrantSettings { enabled: true, scopes: vec![] })).unwrap();
    let err = when(&mut removed, resolve(approval_id, Resolution::ApproveForTask, Some(scope()), Uuid::new_v4(), t0()));
    assert!(matches!(err, Err(DomainError::Conflict { code: Conflict::OfferNoLongerValid, .. })));
    // The flag turned off.
    let mut off = world.clone();
    when(&mut off, Command::ChangeSettings(TaskGrantSettings::default())).unwrap();
    let err = when(&mut off, resolve(approval_id, Resolution::ApproveForTask, Some(scope()), Uuid::new_v4(), t0()));
    assert!(matches!(err, Err(DomainError::Conflict { code: Conflict::TaskGrantsDisabled, .. })));
    // Another principal cannot see it; expired approvals refuse.
    let mut other = resolve(approval_id, Resolution::ApproveOnce, None, Uuid::new_v4(), t0());
    if let Command::ResolveApproval { principal_id, .. } = &mut other {
        *principal_id = "intruder".into();
    }
    assert!(matches!(when(&mut world, other), Err(DomainError::NotFound { .. })));
    let late = resolve(approval_id, Resolution::ApproveOnce, None, Uuid::new_v4(), t0() + Duration::hours(1));
    assert!(matches!(when(&mut world, late), Err(DomainError::Conflict { code: Conflict::ApprovalExpired, .. })));
    // The owner can still allow once, and only once.
    let once = when(&mut world, resolve(approval_id, Resolution::ApproveOnce, None, Uuid::new_v4(), t0())).unwrap();
    assert!(matches!(&once[..], [Event::ApprovalResolved(r)] if r.status == ApprovalStatus::Approved));
    let again = when(&mut world, resolve(approval_id, Resolution::Deny, None, Uuid::new_v4(), t0()));
    assert!(matches!(again, Err(DomainError::Conflict { code: Conflict::ApprovalNotPending, .. })));
}

#[test]
fn the_grant_pins_everything_and_its_limits_are_fixed() {
    let mut world = given();
    let grant = allow_for_task(&mut world, t0());
    let c = &world.grants[&grant].created;
    assert_eq!((c.tenant_id.as_str(), c.principal_id.as_str(), c.session_id.as_str()), ("tenant-1", "owner", "s1"));
    assert_eq!((c.profile_id.as_str(), c.profile_generation), ("profile-1", 0));
    assert_eq!((c.agent_version.clone(), c.policy_version.clone()), (versions().agent, versions().policy));
    assert_eq!(c.scope, scope());
    assert_eq!(c.expires_at - c.created_at, Duration::minutes(30));
    assert_eq!((c.max_actions, c.max_typed_chars), (200, 4096));
}

#[test]
fn a_second_action_runs_without_approval_and_the_carded_one_does_not_count() {
    let mut world = given();
    let grant = allow_for_task(&mut world, t0());
    let out = run(&mut world, &Policy::empty(), &tile("la manzana"), t0() + Duration::minutes(1));
    assert_eq!(
        out.decision,
        Decision::Allow {
            kind: AuthorizationKind::BrowserTaskGrant,
            grant_id: Some(grant),
            use_ordinal: Some(1),
            typed_chars: 0
        }
    );
    let Event::ToolCallAuthorized(used) = &out.events[0] else { panic!() };
    assert_eq!(used.view, view(), "the use records what the card would have shown");
}

#[test]
fn the_201st_action_asks_and_ends_the_grant_as_exhausted() {
    let mut world = given();
    let grant = allow_for_task(&mut world, t0());
    for n in 1..=MAX_ACTIONS {
        let out = run(&mut world, &Policy::empty(), &tile("el gato"), t0());
        assert!(matches!(out.decision, Decision::Allow { use_ordinal: Some(o), .. } if o == n));
    }
    let out = run(&mut world, &Policy::empty(), &tile("el gato"), t0());
    assert_eq!(reason(&out), Some("grant_exhausted"));
    assert_eq!(ended(&out.events), [(grant, EndReason::Exhausted)]);
    let next = run(&mut world, &Policy::empty(), &tile("el gato"), t0());
    assert_eq!(reason(&next), None, "no active grant any more");
    assert!(ended(&next.events).is_empty(), "ended exactly once");
}

#[test]
fn text_past_4096_characters_asks() {
    let mut world = given();
    allow_for_task(&mut world, t0());
    let field = ElementFacts {
        role: "textbox".into(),
        name: Some("Answer".into()),
        field_kind: FieldKind::Text,
        ..ElementFacts::default()
    };
    let text = "abcdefgh ".repeat(28) + "abcd"; // 256 characters
    for _ in 0..(MAX_TYPED_CHARS / 256) {
        let out =
            run(&mut world, &Policy::empty(), &act("s1", field.clone(), Action::Type { text: text.clone() }), t0());
        assert!(matches!(out.decision, Decision::Allow { typed_chars: 256, .. }), "{:?}", out.decision);
    }
    let out = run(&mut world, &Policy::empty(), &act("s1", field, Action::Type { text: "a".into() }), t0());
    assert_eq!(reason(&out), Some("text_exceeds_remaining"));
}

#[test]
fn revoked_expired_and_other_session_grants_ask() {
    let mut world = given();
    let grant = allow_for_task(&mut world, t0());
    // Other session of the same owner: no grant there.
    world.apply(&Event::SessionCreated(session("s2", None, Surface::Interactive)));
    world.apply(&owner_said("s2"));
    assert_eq!(reason(&run(&mut world, &Policy::empty(), &act("s2", button("x"), Action::Click), t0())), None);
    // Expired: ends lazily, exactly once; the sweep then has nothing to do.
    let mut expired = world.clone();
    let out = run(&mut expired, &Policy::empty(), &tile("x"), t0() + Duration::minutes(30));
    assert_eq!((reason(&out), ended(&out.events)), (Some("grant_expired"), vec![(grant, EndReason::Expired)]));
    assert!(when(&mut expired, Command::Sweep { now: t0() + Duration::hours(1) }).unwrap().is_empty());
    // The sweep ends it first when it runs first.
    let mut swept = world.clone();
    assert_eq!(
        ended(&when(&mut swept, Command::Sweep { now: t0() + Duration::minutes(31) }).unwrap()),
        [(grant, EndReason::Expired)]
    );
    // Revoked: by its owner only, once.
    let mut intruder = Command::RevokeGrant { grant_id: grant, principal_id: "intruder".into() };
    assert!(matches!(when(&mut world, intruder.clone()), Err(DomainError::NotFound { .. })));
    let revoked = when(&mut world, Command::RevokeGrant { grant_id: grant, principal_id: "owner".into() }).unwrap();
    assert_eq!(ended(&revoked), [(grant, EndReason::Revoked)]);
    if let Command::RevokeGrant { principal_id, .. } = &mut intruder {
        *principal_id = "owner".into();
    }
    assert!(when(&mut world, intruder).unwrap().is_empty(), "a second revoke records nothing");
    assert_eq!(reason(&run(&mut world, &Policy::empty(), &tile("x"), t0())), None);
}

#[test]
fn scheduled_sessions_child_runs_and_mixed_turns_ask() {
    let mut world = given();
    let grant = allow_for_task(&mut world, t0());
    let mut child = tile("x");
    child.run.top_level = false;
    assert_eq!(reason(&run(&mut world, &Policy::empty(), &child, t0())), Some("run_not_eligible"));
    let mut scheduled_run = tile("x");
    scheduled_run.run.interactive = false;
    assert_eq!(reason(&run(&mut world, &Policy::empty(), &scheduled_run, t0())), Some("run_not_eligible"));
    let mut mixed = tile("x");
    mixed.turn_tool_calls.push("email.read".into());
    assert_eq!(reason(&run(&mut world, &Policy::empty(), &mixed, t0())), Some("turn_not_browser_only"));
    let mut through_tool_call = tile("x");
    through_tool_call.turn_tool_calls = vec!["tool.call:browser.observe".into()];
    assert!(matches!(run(&mut world, &Policy::empty(), &through_tool_call, t0()).decision, Decision::Allow { .. }));
    // The newest user message came from someone else.
    world.apply(&Event::SessionMessageRecorded(SessionMessageRecorded {
        session_id: "s1".into(),
        message_id: "m2".into(),
        author: Author::Other,
    }));
    assert_eq!(reason(&run(&mut world, &Policy::empty(), &tile("x"), t0())), Some("owner_not_newest"));
    assert!(world.grants[&grant].is_active(), "none of these ends the grant");

    // A grant bound to a scheduled session (however it came to exist) covers nothing.
    let mut sched = given();
    sched.apply(&Event::SessionCreated(session("s3", Some("daily"), Surface::Interactive)));
    sched.apply(&owner_said("s3"));
    sched.apply(&Event::TaskGrantCreated(TaskGrantCreated {
        grant_id: Uuid::new_v4(),
        approval_id: Uuid::new_v4(),
        tenant_id: "tenant-1".into(),
        principal_id: "owner".into(),
        session_id: "s3".into(),
        profile_id: "profile-1".into(),
        profile_generation: 0,
        agent_version: versions().agent,
        policy_version: versions().policy,
        scope: scope(),
        created_at: t0(),
        expires_at: t0() + Duration::minutes(30),
        max_actions: 200,
        max_typed_chars: 4096,
    }));
    assert_eq!(
        reason(&run(&mut sched, &Policy::empty(), &act("s3", button("x"), Action::Click), t0())),
        Some("session_not_eligible")
    );
    // And the card never offers to create one there, so none can be made from it.
    let Decision::RequireApproval { approval_id, offer: None, .. } =
        run(&mut sched, &Policy::empty(), &act("s3", button("y"), Action::Click), t0()).decision
    else {
        panic!("a card with no offer")
    };
    let err = when(&mut sched, resolve(approval_id, Resolution::ApproveForTask, Some(scope()), Uuid::new_v4(), t0()));
    assert!(matches!(err, Err(DomainError::Conflict { code: Conflict::NoOffer, .. })), "{err:?}");
}

#[test]
fn a_sign_in_on_the_bound_profile_ends_the_grant() {
    let mut world = given();
    let grant = allow_for_task(&mut world, t0());
    let events = when(
        &mut world,
        Command::AdvanceProfile {
            profile_id: "profile-1".into(),
            owner_principal_id: Some("owner".into()),
            phase: SignInPhase::Began,
        },
    )
    .unwrap();
    assert_eq!(ended(&events), [(grant, EndReason::ProfileChanged)]);
    assert_eq!(reason(&run(&mut world, &Policy::empty(), &tile("x"), t0())), None);
    let ready = when(
        &mut world,
        Command::AdvanceProfile {
            profile_id: "profile-1".into(),
            owner_principal_id: Some("owner".into()),
            phase: SignInPhase::Ready,
        },
    )
    .unwrap();
    assert!(ended(&ready).is_empty(), "ended exactly once");
    assert_eq!(world.profiles["profile-1"].generation, 2);

    // If the end were missed, the pinned generation still refuses.
    let mut stale = given();
    let grant = allow_for_task(&mut stale, t0());
    stale.apply(&Event::ProfileGenerationAdvanced(grant_domain::catalogue::ProfileGenerationAdvanced {
        profile_id: "profile-1".into(),
        generation: 1,
        phase: SignInPhase::Began,
    }));
    let out = run(&mut stale, &Policy::empty(), &tile("x"), t0());
    assert_eq!((reason(&out), ended(&out.events)), (Some("profile_changed"), vec![(grant, EndReason::ProfileChanged)]));
}

#[test]
fn policy_deny_and_hardline_are_never_overridden() {
    let policy = Policy::parse(
        br#"{"rules":[{"id":"no-tiles","effect":"deny","consequences":["unknown"]},{"id":"never-pay","effect":"hardline","consequences":["payment"]}]}"#,
    )
    .unwrap();
    let mut world = given();
    let grant_id = allow_for_task_under(&mut world, &policy);
    let mut req = tile("el gato");
    req.versions.policy = policy.version.clone();
    assert_eq!(
        run(&mut world, &policy, &req, t0()).decision,
        Decision::Deny(Denial::Policy { rule: "no-tiles".into(), hardline: false })
    );
    let mut pay = act("s1", button("Pay $3"), Action::Click);
    pay.versions.policy = policy.version.clone();
    assert_eq!(
        run(&mut world, &policy, &pay, t0()).decision,
        Decision::Deny(Denial::Policy { rule: "never-pay".into(), hardline: true })
    );
    assert_eq!(world.grants[&grant_id].actions_used, 0);
}

#[test]
fn named_consequences_and_pages_outside_the_scope_ask_with_the_reason() {
    let mut world = given();
    allow_for_task(&mut world, t0());
    assert_eq!(reason(&run(&mut world, &Policy::empty(), &tile("Buy gems"), t0())), Some("in_app_currency"));
    let mut settings_page = tile("x");
    settings_page.page.url = "https://www.lesson.test/lesson/settings".into();
    assert_eq!(reason(&run(&mut world, &Policy::empty(), &settings_page, t0())), Some("page_sensitive_segment"));
    let mut left = tile("x");
    left.page.url = "https://www.lesson.test/shop".into();
    assert_eq!(reason(&run(&mut world, &Policy::empty(), &left, t0())), Some("page_outside_scope"));
}

#[test]
fn every_end_reason_is_reached_once_per_grant() {
    let mut ends: HashMap<Uuid, Vec<EndReason>> = HashMap::new();
    let mut record = |events: &[Event]| {
        for (g, r) in ended(events) {
            ends.entry(g).or_default().push(r);
        }
    };
    let later = t0() + Duration::minutes(1);
    // expired, exhausted, revoked: above; here each once more so all reasons show in one place.
    let mut w = given();
    allow_for_task(&mut w, t0());
    record(&run(&mut w, &Policy::empty(), &tile("x"), t0() + Duration::minutes(45)).events);
    let mut w = given();
    allow_for_task(&mut w, t0());
    for _ in 0..=MAX_ACTIONS {
        record(&run(&mut w, &Policy::empty(), &tile("x"), later).events);
    }
    let mut w = given();
    let g = allow_for_task(&mut w, t0());
    record(&when(&mut w, Command::RevokeGrant { grant_id: g, principal_id: "owner".into() }).unwrap());
    // superseded: a second "Allow for this task" in the same session.
    let mut w = given();
    allow_for_task(&mut w, t0());
    let Decision::RequireApproval { approval_id, .. } =
        run(&mut w, &Policy::empty(), &tile("Buy gems"), later).decision
    else {
        panic!()
    };
    record(
        &when(&mut w, resolve(approval_id, Resolution::ApproveForTask, Some(scope()), Uuid::new_v4(), later)).unwrap(),
    );
    assert_eq!(w.grants.values().filter(|g| g.is_active()).count(), 1, "one active grant per session");
    let mut w = given();
    allow_for_task(&mut w, t0());
    record(
        &when(
            &mut w,
            Command::AdvanceProfile {
                profile_id: "profile-1".into(),
                owner_principal_id: Some("owner".into()),
                phase: SignInPhase::Began,
            },
        )
        .unwrap(),
    );
    let mut w = given();
    allow_for_task(&mut w, t0());
    record(
        &when(
            &mut w,
            Command::RevokeProfile { profile_id: "profile-1".into(), owner_principal_id: Some("owner".into()) },
        )
        .unwrap(),
    );
    for (label, change) in [("policy", true), ("agent", false)] {
        let mut w = given();
        allow_for_task(&mut w, t0());
        let mut req = tile("x");
        if change {
            req.versions.policy = "sha256:other".into();
        } else {
            req.versions.agent = "agent-8".into();
        }
        let out = run(&mut w, &Policy::empty(), &req, later);
        assert!(reason(&out).is_some_and(|r| r.starts_with(label)));
        record(&out.events);
    }
    // A scope removed ends the grant in the settings change itself, so a use on any replica
    // finds its row ended; the next act has no grant to end.
    let mut w = given();
    allow_for_task(&mut w, t0());
    let changed = when(
        &mut w,
        Command::ChangeSettings(TaskGrantSettings {
            enabled: true,
            scopes: parse_scopes("https://www.lesson.test/unit").unwrap(),
        }),
    )
    .unwrap();
    assert_eq!(ended(&changed).iter().map(|(_, r)| *r).collect::<Vec<_>>(), [EndReason::ScopeRemoved]);
    record(&changed);
    assert!(ended(&run(&mut w, &Policy::empty(), &tile("x"), later).events).is_empty());
    // The flag turned off ends every active grant the same way.
    let mut w = given();
    allow_for_task(&mut w, t0());
    let off = when(&mut w, Command::ChangeSettings(TaskGrantSettings::default())).unwrap();
    assert_eq!(ended(&off).iter().map(|(_, r)| *r).collect::<Vec<_>>(), [EndReason::ScopeRemoved]);
    let mut w = given();
    allow_for_task(&mut w, t0());
    let deleted = when(&mut w, Command::DeleteSession { session_id: "s1".into(), principal_id: "owner".into() });
    assert!(ended(&deleted.unwrap()).iter().all(|(_, r)| *r == EndReason::Revoked), "a deleted chat revokes");
    // Also a profile deleted, not only revoked, ends every grant on it.
    let mut w = given();
    allow_for_task(&mut w, t0());
    let gone = when(
        &mut w,
        Command::DeleteProfile { profile_id: "profile-1".into(), owner_principal_id: Some("owner".into()) },
    )
    .unwrap();
    assert_eq!(ended(&gone).iter().map(|(_, r)| *r).collect::<Vec<_>>(), [EndReason::ProfileRevoked]);

    let mut reasons: Vec<EndReason> = ends.values().flatten().copied().collect();
    assert!(ends.values().all(|r| r.len() == 1), "a grant ended twice: {ends:?}");
    reasons.sort_by_key(|r| format!("{r:?}"));
    reasons.dedup();
    use EndReason::*;
    let mut all = vec![
        Expired,
        Exhausted,
        Revoked,
        Superseded,
        ProfileChanged,
        ProfileRevoked,
        PolicyChanged,
        AgentChanged,
        ScopeRemoved,
    ];
    all.sort_by_key(|r| format!("{r:?}"));
    assert_eq!(reasons, all);
}

#[test]
fn the_standing_grant_covers_routine_on_its_profile_first() {
    let mut world = given();
    world.apply(&Event::StandingGrantPinned(grant_domain::catalogue::StandingGrantPinned {
        grant_id: "standing-1".into(),
        profile_id: "profile-1".into(),
        expires_at: t0() + Duration::days(30),
    }));
    let grant = allow_for_task(&mut world, t0());
    let out = run(&mut world, &Policy::empty(), &tile("Continue"), t0());
    assert!(matches!(out.decision, Decision::Allow { kind: AuthorizationKind::StandingGrant, .. }));
    assert_eq!(world.grants[&grant].actions_used, 0, "the standing grant answered first");
    assert!(matches!(
        run(&mut world, &Policy::empty(), &tile("el gato"), t0()).decision,
        Decision::Allow { kind: AuthorizationKind::BrowserTaskGrant, .. }
    ));
}

#[test]
fn approval_tokens_are_single_use_and_bound_to_run_snapshot_and_node() {
    use grant_domain::catalogue::{BoundAction, TokenBinding};
    let mut world = given();
    let mut req = tile("Buy gems");
    req.snapshot = Some(("snap_0123456789ab".into(), "n42".into()));
    let Decision::RequireApproval { approval_id, .. } = run(&mut world, &Policy::empty(), &req, t0()).decision else {
        panic!()
    };
    let mut resolve_once = resolve(approval_id, Resolution::ApproveOnce, None, Uuid::new_v4(), t0());
    if let Command::ResolveApproval { token_sha256, .. } = &mut resolve_once {
        *token_sha256 = Some("digest-1".into());
    }
    let events = when(&mut world, resolve_once).unwrap();
    assert!(
        matches!(&events[..], [Event::ApprovalResolved(_), Event::ApprovalTokenIssued(t)] if t.token_sha256 == "digest-1" && t.node_ref == "n42")
    );
    let click = BoundAction::of(&Action::Click, None).on(&button("Buy gems"), PAGE);
    let binding = TokenBinding {
        run_id: "run-1".into(),
        snapshot_id: "snap_0123456789ab".into(),
        node_ref: "n42".into(),
        action: Some(Box::new(click.clone())),
    };
    let redeem = |token: &str, binding: &TokenBinding| Command::RedeemToken {
        principal_id: "owner".into(),
        token_sha256: token.into(),
        binding: binding.clone(),
        profile_id: "profile-1".into(),
        now: t0(),
    };
    for wrong in [
        TokenBinding { node_ref: "n43".into(), ..binding.clone() },
        TokenBinding { snapshot_id: "snap_ffffffffffff".into(), ..binding.clone() },
        TokenBinding { run_id: "run-2".into(), ..binding.clone() },
        // The token was approved for a click: not for a type or a key press on the same node,
        // and not for a redemption that names no act.
        TokenBinding {
            action: Some(Box::new(BoundAction { kind: "type".into(), argument: "answer".into(), ..click.clone() })),
            ..binding.clone()
        },
        // The runtime reads another element, or another page, live than the card showed.
        TokenBinding {
            action: Some(Box::new(BoundAction { element_name: "Pay now".into(), ..click.clone() })),
            ..binding.clone()
        },
        TokenBinding {
            action: Some(Box::new(BoundAction { page_origin: "https://www.elsewhere.test".into(), ..click.clone() })),
            ..binding.clone()
        },
        TokenBinding {
            action: Some(Box::new(BoundAction { kind: "press".into(), argument: "Enter".into(), ..click })),
            ..binding.clone()
        },
        TokenBinding { action: None, ..binding.clone() },
    ] {
        assert!(
            matches!(when(&mut world, redeem("digest-1", &wrong)), Err(DomainError::Conflict { code, .. }) if code == Conflict::ApprovalTokenInvalid)
        );
    }
    assert!(
        matches!(when(&mut world, redeem("other", &binding)), Err(DomainError::Conflict { code, .. }) if code == Conflict::ApprovalTokenInvalid)
    );
    // Once the run has moved to a newer snapshot, a token for the older one no longer fits.
    let mut moved = world.clone();
    let mut newer = tile("el gato");
    newer.snapshot = Some(("snap_fedcba987654".into(), "n3".into()));
    run(&mut moved, &Policy::empty(), &newer, t0());
    assert!(
        matches!(when(&mut moved, redeem("digest-1", &binding)), Err(DomainError::Conflict { code, .. }) if code == Conflict::ApprovalTokenInvalid),
        "a newer snapshot voids older tokens"
    );
    // Naming the old snapshot again does not make it current: snapshots only move forward.
    let mut rewound = moved.clone();
    let mut old_again = tile("el gato");
    old_again.snapshot = Some(("snap_0123456789ab".into(), "n42".into()));
    run(&mut rewound, &Policy::empty(), &old_again, t0());
    assert!(
        matches!(when(&mut rewound, redeem("digest-1", &binding)), Err(DomainError::Conflict { code, .. }) if code == Conflict::ApprovalTokenInvalid),
        "an old snapshot named again stays stale"
    );
    // Another session using the same run id does not touch this run's snapshots.
    let mut elsewhere = world.clone();
    elsewhere =
        elsewhere.applied(&[Event::SessionCreated(session("s9", None, Surface::Interactive)), owner_said("s9")]);
    let mut foreign = act("s9", button("el gato"), Action::Click);
    foreign.snapshot = Some(("snap_999999999999".into(), "n1".into()));
    run(&mut elsewhere, &Policy::empty(), &foreign, t0());
    assert!(
        matches!(&when(&mut elsewhere, redeem("digest-1", &binding)).unwrap()[..], [Event::ApprovalTokenRedeemed(_)]),
        "another session's run of the same id voids nothing"
    );
    // Another owner's runtime holding the token cannot redeem it.
    let mut theirs = redeem("digest-1", &binding);
    if let Command::RedeemToken { principal_id, .. } = &mut theirs {
        *principal_id = "intruder".into();
    }
    assert!(
        matches!(when(&mut world, theirs), Err(DomainError::Conflict { code, .. }) if code == Conflict::ApprovalTokenInvalid)
    );
    assert!(matches!(&when(&mut world, redeem("digest-1", &binding)).unwrap()[..], [Event::ApprovalTokenRedeemed(_)]));
    assert!(
        matches!(when(&mut world, redeem("digest-1", &binding)), Err(DomainError::Conflict { code, .. }) if code == Conflict::ApprovalTokenInvalid),
        "second redemption"
    );
    // A denial issues no token.
    let Decision::RequireApproval { approval_id, .. } = run(&mut world, &Policy::empty(), &req, t0()).decision else {
        panic!()
    };
    let mut deny = resolve(approval_id, Resolution::Deny, None, Uuid::new_v4(), t0());
    if let Command::ResolveApproval { token_sha256, .. } = &mut deny {
        *token_sha256 = Some("digest-2".into());
    }
    assert!(matches!(&when(&mut world, deny).unwrap()[..], [Event::ApprovalResolved(_)]));
}

/// The owner's Stop: the grant revoked, every pending card denied, a token approved before it
/// never redeemed, every act denied with no card, until the owner's next message.
#[test]
fn the_owners_stop_ends_everything_the_session_could_still_do() {
    use grant_domain::catalogue::{BoundAction, SessionStopped, TokenBinding};
    let mut world = given();
    let grant = allow_for_task(&mut world, t0());
    let mut req = tile("Buy gems");
    req.snapshot = Some(("snap_0123456789ab".into(), "n42".into()));
    let Decision::RequireApproval { approval_id: approved, .. } =
        run(&mut world, &Policy::empty(), &req, t0()).decision
    else {
        panic!()
    };
    let mut once = resolve(approved, Resolution::ApproveOnce, None, Uuid::new_v4(), t0());
    if let Command::ResolveApproval { token_sha256, .. } = &mut once {
        *token_sha256 = Some("digest-1".into());
    }
    when(&mut world, once).unwrap();
    let Decision::RequireApproval { approval_id: waiting, .. } =
        run(&mut world, &Policy::empty(), &tile("Pay now"), t0()).decision
    else {
        panic!()
    };
    let stop =
        |principal: &str| Command::StopSession { session_id: "s1".into(), principal_id: principal.into(), now: t0() };
    assert!(matches!(when(&mut world, stop("intruder")), Err(DomainError::NotFound { .. })));
    let stopped = when(&mut world, stop("owner")).unwrap();
    assert!(
        matches!(&stopped[..], [
            Event::ApprovalResolved(d),
            Event::TaskGrantEnded(e),
            Event::SessionStopped(SessionStopped { session_id, stopped_at }),
        ] if d.approval_id == waiting && d.resolution == Resolution::Deny && e.grant_id == grant
            && e.reason == EndReason::Revoked && session_id == "s1" && *stopped_at == t0()),
        "{stopped:?}"
    );
    assert_eq!(when(&mut world, stop("owner")).unwrap(), vec![], "nothing is left to stop");
    let binding = TokenBinding {
        run_id: "run-1".into(),
        snapshot_id: "snap_0123456789ab".into(),
        node_ref: "n42".into(),
        action: Some(Box::new(BoundAction::of(&Action::Click, None).on(&button("Buy gems"), PAGE))),
    };
    let redeem = || Command::RedeemToken {
        principal_id: "owner".into(),
        token_sha256: "digest-1".into(),
        binding: binding.clone(),
        profile_id: "profile-1".into(),
        now: t0(),
    };
    let void = |r| matches!(r, Err(DomainError::Conflict { code: Conflict::ApprovalTokenInvalid, .. }));
    assert!(void(when(&mut world, redeem())), "a token approved before the stop is not spent after it");
    for req in [tile("Next"), tile("Pay now")] {
        let out = run(&mut world, &Policy::empty(), &req, t0());
        assert_eq!(out.decision, Decision::Deny(Denial::SessionStopped));
        assert!(out.events.is_empty(), "no card, no use: {:?}", out.events);
    }
    when(
        &mut world,
        Command::RecordMessage(match owner_said("s1") {
            Event::SessionMessageRecorded(m) => m,
            _ => unreachable!(),
        }),
    )
    .unwrap();
    assert!(matches!(
        run(&mut world, &Policy::empty(), &tile("Next"), t0()).decision,
        Decision::RequireApproval { .. }
    ));
    assert!(void(when(&mut world, redeem())), "nor once the owner writes again");
}

#[test]
fn credential_and_one_time_code_fields_are_refused_outright() {
    let mut world = given();
    let grant = allow_for_task(&mut world, t0());
    for (kind, code) in [(FieldKind::Password, "credential_field"), (FieldKind::OneTimeCode, "one_time_code_field")] {
        let wanted = |d: &Decision| matches!(d, Decision::Deny(denial) if denial.code() == code);
        for action in [Action::Click, Action::Type { text: "lesson".into() }, Action::Press { key: "Enter".into() }] {
            let field = ElementFacts {
                role: "textbox".into(),
                name: Some("Answer".into()),
                field_kind: kind,
                ..Default::default()
            };
            let out = run(&mut world, &Policy::empty(), &act("s1", field, action), t0());
            assert!(wanted(&out.decision), "{kind:?}: {:?}", out.decision);
            assert!(out.events.is_empty(), "a denial shows no card and records nothing");
        }
    }
    // A payment field takes no typed text from the runtime: no card is asked for one. A click
    // on it (to focus it) still asks.
    let payment = ElementFacts {
        role: "textbox".into(),
        name: Some("Card number".into()),
        field_kind: FieldKind::Payment,
        ..Default::default()
    };
    let typed =
        run(&mut world, &Policy::empty(), &act("s1", payment.clone(), Action::Type { text: "4111".into() }), t0());
    assert_eq!(typed.decision, Decision::Deny(Denial::Field(classifier::Named::PaymentField)));
    assert!(typed.events.is_empty());
    let clicked = run(&mut world, &Policy::empty(), &act("s1", payment, Action::Click), t0());
    assert!(matches!(clicked.decision, Decision::RequireApproval { .. }), "{:?}", clicked.decision);
    assert_eq!(world.grants[&grant].actions_used, 0);
}

#[test]
fn offers_are_made_only_where_a_grant_could_apply() {
    let mut world = given();
    let profileless = SessionCreated { browser_profile_id: None, ..session("s-np", None, Surface::Interactive) };
    world = world.applied(&[
        Event::SessionCreated(session("s-in", None, Surface::Inbound)),
        Event::SessionCreated(session("s-dev", None, Surface::Device)),
        Event::SessionCreated(session("s-sched", Some("daily"), Surface::Interactive)),
        Event::SessionCreated(profileless),
    ]);
    for s in ["s-in", "s-dev", "s-sched", "s-np"] {
        world.apply(&owner_said(s));
    }
    let offer = |world: &mut World, req: &AuthorizeRequest| match run(world, &Policy::empty(), req, t0()).decision {
        Decision::RequireApproval { offer, .. } => offer,
        other => panic!("expected a card, got {other:?}"),
    };
    assert!(offer(&mut world, &tile("el gato")).is_some(), "the control case offers");
    for s in ["s-in", "s-dev", "s-sched", "s-np"] {
        assert_eq!(offer(&mut world, &act(s, button("el gato"), Action::Click)), None, "session {s}");
    }
    for kind in [FieldKind::Payment, FieldKind::Identity, FieldKind::File] {
        let field = ElementFacts {
            role: "textbox".into(),
            name: Some("Answer".into()),
            field_kind: kind,
            ..Default::default()
        };
        assert_eq!(offer(&mut world, &act("s1", field, Action::Click)), None, "{kind:?}");
    }
    let mut sensitive = tile("el gato");
    sensitive.page.url = "https://www.lesson.test/lesson/account/unit-3".into();
    assert_eq!(offer(&mut world, &sensitive), None, "a page with a sensitive segment");
    let mut revoked = world.clone();
    when(
        &mut revoked,
        Command::RevokeProfile { profile_id: "profile-1".into(), owner_principal_id: Some("owner".into()) },
    )
    .unwrap();
    assert_eq!(offer(&mut revoked, &tile("el gato")), None, "a revoked profile");
}

#[test]
fn an_origin_rule_holds_for_any_scheme_userinfo_or_unreadable_url() {
    let policy =
        Policy::parse(br#"{"rules":[{"id":"no-evil","effect":"deny","origins":["https://evil.example"]}]}"#).unwrap();
    let mut world = given();
    for url in ["https://evil.example/x", "https://u@evil.example/x", "http://evil.example/x", "not a url"] {
        let mut req = tile("el gato");
        req.page.url = url.into();
        let decision = run(&mut world, &policy, &req, t0()).decision;
        assert!(matches!(decision, Decision::Deny(_)), "{url}: {decision:?}");
    }
    let mut other = tile("el gato");
    other.page.url = "https://www.lesson.test/lesson/unit-3".into();
    assert!(!matches!(run(&mut world, &policy, &other, t0()).decision, Decision::Deny(_)), "another site");
}

#[test]
fn an_empty_turn_is_not_a_browser_only_turn() {
    let mut world = given();
    allow_for_task(&mut world, t0());
    let mut empty = tile("el gato");
    empty.turn_tool_calls = vec![];
    assert_eq!(reason(&run(&mut world, &Policy::empty(), &empty, t0())), Some("turn_not_browser_only"));
}

#[test]
fn an_advisory_escalation_or_a_later_hardline_is_never_answered_by_a_grant() {
    let policy = Policy::parse(
        br#"{"rules":[{"id":"ask","effect":"require_approval"},
            {"id":"typing-escalates","effect":"advisory_escalation","actions":["type"]},
            {"id":"never-delete","effect":"hardline","consequences":["deletion"]}]}"#,
    )
    .unwrap();
    let mut world = given();
    let grant_id = allow_for_task_under(&mut world, &policy);
    let pinned = |mut req: AuthorizeRequest| {
        req.versions.policy = policy.version.clone();
        req
    };
    assert!(matches!(run(&mut world, &policy, &pinned(tile("el gato")), t0()).decision, Decision::Allow { .. }));

    let field = ElementFacts {
        role: "textbox".into(),
        name: Some("Answer".into()),
        field_kind: FieldKind::Text,
        ..Default::default()
    };
    let out = run(&mut world, &policy, &pinned(act("s1", field, Action::Type { text: "el gato".into() })), t0());
    let Decision::RequireApproval { reason, offer, .. } = &out.decision else { panic!("{:?}", out.decision) };
    assert_eq!((reason.as_deref(), offer), (Some("policy_escalation"), &None));
    // "Delete" in the visible text only, "Continue" as the name: every source counts.
    let mut delete = button("Continue");
    delete.visible_text = Some("Delete lesson".into());
    let out = run(&mut world, &policy, &pinned(act("s1", delete, Action::Click)), t0());
    assert_eq!(out.decision, Decision::Deny(Denial::Policy { rule: "never-delete".into(), hardline: true }));
    assert_eq!(world.grants[&grant_id].actions_used, 1, "only the covered tile used the grant");
}

#[test]
fn the_operator_pins_the_standing_grant_once_and_it_covers_only_routine_buttons_and_scrolls_on_https() {
    use grant_domain::model::{STANDING_GRANT_DURATION, StandingPin};
    let pin = || StandingPin { grant_id: "standing-1".into(), profile_id: "profile-1".into() };
    let mut world = given();
    let pinned = when(&mut world, Command::PinStandingGrant { pin: Some(pin()), now: t0() }).unwrap();
    assert!(matches!(&pinned[..], [Event::StandingGrantPinned(p)] if p.expires_at == t0() + STANDING_GRANT_DURATION));
    // A restart with the same pin records nothing, even once it expired: only the operator's new
    // grant id pins anew.
    assert!(when(&mut world, Command::PinStandingGrant { pin: Some(pin()), now: t0() }).unwrap().is_empty());
    let later = t0() + STANDING_GRANT_DURATION + Duration::minutes(1);
    let mut expired = world.clone();
    assert!(when(&mut expired, Command::PinStandingGrant { pin: Some(pin()), now: later }).unwrap().is_empty());
    let renewed = StandingPin { grant_id: "standing-2".into(), ..pin() };
    assert_eq!(when(&mut expired, Command::PinStandingGrant { pin: Some(renewed), now: later }).unwrap().len(), 1);

    let standing = |world: &mut World, req: &AuthorizeRequest| {
        matches!(
            run(world, &Policy::empty(), req, t0()).decision,
            Decision::Allow { kind: AuthorizationKind::StandingGrant, .. }
        )
    };
    assert!(standing(&mut world, &tile("Continue")), "a routine button");
    assert!(standing(&mut world, &act("s1", button("x"), Action::Scroll { by: 300 })), "a scroll");
    let mut link = button("Continue");
    link.role = "link".into();
    assert!(!standing(&mut world, &act("s1", link, Action::Click)), "a link is not a button");
    let mut download = button("Continue");
    download.download = true;
    assert!(!standing(&mut world, &act("s1", download, Action::Click)), "a download is not routine");
    let mut mixed = button("Continue");
    mixed.visible_text = Some("Next".into());
    assert!(!standing(&mut world, &act("s1", mixed, Action::Click)), "label sources read as different words");
    let mut http = tile("Continue");
    http.page.url = "http://www.lesson.test/lesson/unit-3".into();
    assert!(!standing(&mut world, &http), "not on a plain-HTTP page");
    let mut http_scroll = act("s1", button("x"), Action::Scroll { by: 300 });
    http_scroll.page.url = "http://www.lesson.test/lesson/unit-3".into();
    assert!(!standing(&mut world, &http_scroll), "not even a scroll");

    let unpinned = when(&mut world, Command::PinStandingGrant { pin: None, now: t0() }).unwrap();
    assert!(matches!(&unpinned[..], [Event::StandingGrantUnpinned(u)] if u.grant_id == "standing-1"));
    assert!(!standing(&mut world, &tile("Continue")), "unpinned");
    assert!(when(&mut world, Command::PinStandingGrant { pin: None, now: t0() }).unwrap().is_empty());
}

/// The operator's deployment record lands whole: the settings and the pin in one decision, and
/// the same record again records nothing.
#[test]
fn a_deployment_record_applies_settings_and_pin_together_once() {
    use grant_domain::model::StandingPin;
    let mut world = given();
    let settings = TaskGrantSettings { enabled: true, scopes: parse_scopes("https://www.lesson.test/unit").unwrap() };
    let apply = || Command::ApplyDeployment {
        settings: settings.clone(),
        pin: Some(StandingPin { grant_id: "standing-1".into(), profile_id: "profile-1".into() }),
        policy_version: Some(Policy::empty().version),
        now: t0(),
    };
    let events = when(&mut world, apply()).unwrap();
    let kinds: Vec<&str> = events.iter().map(Event::event_type).collect();
    assert_eq!(kinds, ["deployment.scopes_changed", "browser.standing_grant.pinned", "deployment.policy_changed"]);
    assert!(when(&mut world, apply()).unwrap().is_empty(), "the record in force records nothing");
}

/// A profile is its owner's. Given a profile recorded before owners were (events of its own but
/// no claim) and a session that bound it then: no new session binds it, the old session's acts
/// are refused (no card, no task grant, no standing grant), until the profiles service reports it
/// again for its owner; and a report for another owner afterwards finds no such profile.
#[test]
fn a_profile_without_its_owner_recorded_binds_and_covers_nothing() {
    use grant_domain::model::StandingPin;
    let settings = TaskGrantSettings { enabled: true, scopes: vec![scope()] };
    let mut world = World::default();
    for e in decide(&world, Command::ChangeSettings(settings)).unwrap() {
        world.apply(&e);
    }
    let legacy = grant_domain::catalogue::ProfileGenerationAdvanced {
        profile_id: "profile-1".into(),
        generation: 1,
        phase: SignInPhase::Ready,
    };
    world = world.applied(&[
        Event::ProfileGenerationAdvanced(legacy),
        Event::SessionCreated(session("s1", None, Surface::Interactive)),
        owner_said("s1"),
    ]);
    let pin = StandingPin { grant_id: "standing-1".into(), profile_id: "profile-1".into() };
    when(&mut world, Command::PinStandingGrant { pin: Some(pin), now: t0() }).unwrap();
    // A new session on it: not found, nothing recorded.
    let err = decide(&world, Command::CreateSession(session("s2", None, Surface::Interactive))).unwrap_err();
    assert!(matches!(err, DomainError::NotFound { what: "browser profile", .. }), "{err:?}");
    // The old session: refused outright, not even a card (answering it would act in a profile
    // nobody has shown to be this owner's), and nothing recorded.
    let out = run(&mut world, &Policy::empty(), &tile("Continue"), t0());
    assert_eq!(out.decision, Decision::Deny(Denial::ProfileNotOwned));
    assert!(out.events.is_empty());
    // Claimed for its owner: the pin covers the routine click again.
    let claim = Command::ClaimProfile { profile_id: "profile-1".into(), owner_principal_id: "owner".into() };
    let claimed = when(&mut world, claim).unwrap();
    assert_eq!(claimed.iter().map(Event::event_type).collect::<Vec<_>>(), ["browser.profile.claimed"]);
    let out = run(&mut world, &Policy::empty(), &tile("Continue"), t0());
    assert!(
        matches!(out.decision, Decision::Allow { kind: AuthorizationKind::StandingGrant, .. }),
        "{:?}",
        out.decision
    );
    // Another owner's report, or another owner's session, finds no such profile.
    let other = Command::RevokeProfile { profile_id: "profile-1".into(), owner_principal_id: Some("intruder".into()) };
    assert!(matches!(decide(&world, other), Err(DomainError::NotFound { .. })));
    let mut theirs = session("s3", None, Surface::Interactive);
    theirs.principal_id = "intruder".into();
    assert!(matches!(decide(&world, Command::CreateSession(theirs)), Err(DomainError::NotFound { .. })));
}

/// A profiles service older than owners names none: its revocation still ends the grant on the
/// profile (ending a grant is never unsafe), and it records no owner.
#[test]
fn a_report_naming_no_owner_still_ends_the_grants() {
    let mut world = given();
    let grant = allow_for_task(&mut world, t0());
    let events =
        when(&mut world, Command::RevokeProfile { profile_id: "profile-1".into(), owner_principal_id: None }).unwrap();
    assert_eq!(ended(&events), [(grant, EndReason::ProfileRevoked)]);
    assert!(events.iter().all(|e| e.event_type() != "browser.profile.claimed"));
    assert!(world.profile_owned_by("profile-1", "owner"), "the owner recorded before stays");
}

#[test]
fn a_card_that_showed_a_form_is_spent_only_while_the_page_holds_that_form() {
    use grant_domain::catalogue::{BoundAction, FormReview, FormRow, FormStatus, TokenBinding};
    let mut world = given();
    let mut req = tile("Confirm enrolment");
    req.snapshot = Some(("snap_0123456789ab".into(), "n3".into()));
    let row = FormRow {
        label: "Excess (voluntary)".into(),
        kind: "text".into(),
        value: "250.00".into(),
        record_field_id: None,
        record_value: None,
        status: FormStatus::Untouched,
        normalisation: None,
    };
    req.form = Some(FormReview { rows: vec![row.clone()], digest: "hmac-sha256:aa".into() });
    let out = run(&mut world, &Policy::empty(), &req, t0());
    let Decision::RequireApproval { approval_id, .. } = out.decision else { panic!() };
    // The card shows the read-back, untouched default included.
    let shown = out.events.iter().find_map(|e| match e {
        Event::ApprovalRequested(r) => r.view.form.clone(),
        _ => None,
    });
    assert_eq!(shown.map(|f| f.rows), Some(vec![row]));
    let mut once = resolve(approval_id, Resolution::ApproveOnce, None, Uuid::new_v4(), t0());
    if let Command::ResolveApproval { token_sha256, .. } = &mut once {
        *token_sha256 = Some("digest-f".into());
    }
    when(&mut world, once).unwrap();
    let click = BoundAction::of(&Action::Click, None).on(&button("Confirm enrolment"), PAGE);
    let redeem = |form: Option<&str>| Command::RedeemToken {
        principal_id: "owner".into(),
        token_sha256: "digest-f".into(),
        binding: TokenBinding {
            run_id: "run-1".into(),
            snapshot_id: "snap_0123456789ab".into(),
            node_ref: "n3".into(),
            action: Some(Box::new(BoundAction { form_sha256: form.map(str::to_owned), ..click.clone() })),
        },
        profile_id: "profile-1".into(),
        now: t0(),
    };
    // The page changed the form since the owner read it, or the runtime read no form: refused.
    for changed in [Some("hmac-sha256:bb"), None] {
        assert!(
            matches!(when(&mut world, redeem(changed)), Err(DomainError::Conflict { code, .. }) if code == Conflict::ApprovalTokenInvalid),
            "{changed:?}"
        );
    }
    assert!(matches!(
        &when(&mut world, redeem(Some("hmac-sha256:aa"))).unwrap()[..],
        [Event::ApprovalTokenRedeemed(_)]
    ));
}

/// A card for a click that could submit a form must show the form read back: without it the
/// owner would approve a submit blind, so no card is made. Under a task grant that covers the
/// click no card is asked, and nothing needs reading.
#[test]
fn a_card_for_a_click_that_submits_a_form_needs_its_read_back() {
    let mut world = given();
    let submit = |form: Option<FormReview>| AuthorizeRequest {
        form,
        ..act("s1", ElementFacts { submits_form: true, ..button("Save answers") }, Action::Click)
    };
    let out = run(&mut world, &Policy::empty(), &submit(None), t0());
    assert_eq!(out.decision, Decision::Deny(Denial::FormNotReadBack));
    assert!(out.events.is_empty(), "nothing is written: {:?}", out.events);
    // A select clicks its option, and the click reaches a button around it.
    let select = AuthorizeRequest { action: Action::Select { option: "Hard".into() }, ..submit(None) };
    let out = run(&mut world, &Policy::empty(), &select, t0());
    assert_eq!(out.decision, Decision::Deny(Denial::FormNotReadBack));
    let read = FormReview { rows: vec![], digest: format!("hmac-sha256:{}", "ab".repeat(32)) };
    let asked = run(&mut world, &Policy::empty(), &submit(Some(read)), t0());
    assert!(matches!(asked.decision, Decision::RequireApproval { .. }), "{:?}", asked.decision);
    // A key is not a click: its own refusal is the runtime's.
    let key = AuthorizeRequest { action: Action::Press { key: "Tab".into() }, ..submit(None) };
    assert!(matches!(run(&mut world, &Policy::empty(), &key, t0()).decision, Decision::RequireApproval { .. }));
    // Covered by the task's grant: allowed with no card and no read-back.
    allow_for_task(&mut world, t0());
    let mut tile_in_form = tile("el gato");
    tile_in_form.element.submits_form = true;
    let covered = run(&mut world, &Policy::empty(), &tile_in_form, t0());
    assert!(matches!(covered.decision, Decision::Allow { .. }), "{:?}", covered.decision);
}

/// A key the runtime never sends is denied before any grant or card: Enter or Space on a button,
/// a link or a choice is its click, and Enter in a one-line field of a form submits it. Neither a
/// use nor a card is spent; Enter in a text area, or a key that only moves, is decided as ever.
#[test]
fn a_key_that_clicks_or_submits_is_denied_before_any_grant() {
    let mut world = given();
    let grant_id = allow_for_task(&mut world, t0());
    let press = |element: ElementFacts, key: &str| act("s1", element, Action::Press { key: key.into() });
    let field = |kind: FieldKind, in_form: bool| ElementFacts {
        role: "textbox".into(),
        field_kind: kind,
        submits_form: in_form,
        ..button("Your answer")
    };
    let deny = Decision::Deny(Denial::KeyClicksOrSubmits);
    for (req, case) in [
        (press(button("Next"), "Enter"), "Enter on a button"),
        (press(button("Next"), " "), "Space on a button"),
        (press(ElementFacts { field_kind: FieldKind::Checkbox, ..button("Slower") }, "Space"), "Space on a check box"),
        (press(field(FieldKind::Text, true), "Enter"), "Enter in a field of a form"),
    ] {
        assert_eq!(run(&mut world, &Policy::empty(), &req, t0()).decision, deny, "{case}");
    }
    assert_eq!(world.grants[&grant_id].actions_used, 0, "no use was spent");
    for (req, case) in [
        (press(field(FieldKind::Text, false), "Enter"), "Enter in a field of no form"),
        (press(field(FieldKind::TextArea, true), "Enter"), "Enter in a text area"),
        (press(field(FieldKind::Text, true), "Tab"), "Tab in a field of a form"),
    ] {
        let out = run(&mut world, &Policy::empty(), &req, t0());
        assert!(matches!(out.decision, Decision::Allow { .. }), "{case}: {:?}", out.decision);
    }
}
