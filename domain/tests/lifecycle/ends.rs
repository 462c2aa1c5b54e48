//! How grants end: every end reason once, the owner's Stop, profiles without an owner.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

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
    // superseded: a second "Allow for this task" in the same session, on a card the running grant
    // did not cover (a turn that also called a tool of another kind) but a new one would.
    let mut w = given();
    allow_for_task(&mut w, t0());
    let mut mixed = tile("x");
    mixed.turn_tool_calls.push("mail.send".into());
    let Decision::RequireApproval { approval_id, .. } = run(&mut w, &Policy::empty(), &mixed, later).decision else {
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
