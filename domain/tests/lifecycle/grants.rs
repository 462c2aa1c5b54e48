//! A task grant from its card to its limits: what it pins, what it covers, what still asks.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

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

/// A card for what a task permission never covers offers none: the owner may allow the act once,
/// never for the task. "Allow for this task" on it is refused and writes nothing.
#[test]
fn a_card_the_permission_could_never_cover_offers_no_task() {
    let link = |name: &str, target: &str| ElementFacts {
        role: "link".into(),
        nav_targets: vec![target.into()],
        ..button(name)
    };
    let payment = ElementFacts { role: "textbox".into(), field_kind: FieldKind::Payment, ..button("Card number") };
    let cases = [
        ("a purchase", tile("Upgrade to premium")),
        ("a payment field", act("s1", payment, Action::Click)),
        ("a settings link", act("s1", link("Preferences", "https://www.lesson.test/lesson/settings"), Action::Click)),
        ("a scope exit", act("s1", link("Learn more", "https://www.lesson.test/learn"), Action::Click)),
    ];
    for (what, req) in cases {
        let mut world = given();
        let Decision::RequireApproval { approval_id, offer, .. } =
            run(&mut world, &Policy::empty(), &req, t0()).decision
        else {
            panic!("{what}: a card")
        };
        assert_eq!(offer, None, "{what}: no task offer");
        let before = world.clone();
        let err =
            when(&mut world, resolve(approval_id, Resolution::ApproveForTask, Some(scope()), Uuid::new_v4(), t0()));
        assert!(matches!(err, Err(DomainError::Conflict { code: Conflict::NoOffer, .. })), "{what}: {err:?}");
        assert_eq!(world, before, "{what}: nothing written");
        // Once is still the owner's to give.
        when(&mut world, resolve(approval_id, Resolution::ApproveOnce, None, Uuid::new_v4(), t0())).unwrap();
    }
    // A routine button on the same page is still offered the task.
    let mut world = given();
    let Decision::RequireApproval { offer, .. } = run(&mut world, &Policy::empty(), &tile("Next"), t0()).decision
    else {
        panic!("a card")
    };
    assert!(offer.is_some(), "a routine act is offered the task");
}
