//! Approval tokens and the forms a card showed.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

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
    // Under the task's grant, a submit needs its read-back too, and goes on the grant's allow
    // only when the form holds what the task typed and nothing else (seed 004, rule 7).
    allow_for_task(&mut world, t0());
    let mut tile_in_form = tile("el gato");
    tile_in_form.element.submits_form = true;
    let unread = run(&mut world, &Policy::empty(), &tile_in_form, t0());
    assert_eq!(unread.decision, Decision::Deny(Denial::FormNotReadBack));
    assert!(unread.events.is_empty(), "nothing is written: {:?}", unread.events);
    use grant_domain::catalogue::{FormRow, FormStatus};
    let row = |status: FormStatus, kind: &str, value: &str| FormRow {
        label: "Field".into(),
        kind: kind.into(),
        value: value.into(),
        record_field_id: None,
        record_value: None,
        status,
        normalisation: None,
    };
    let with_rows = |rows: Vec<FormRow>| AuthorizeRequest {
        form: Some(FormReview { rows, digest: format!("hmac-sha256:{}", "ab".repeat(32)) }),
        ..tile_in_form.clone()
    };
    let as_task = with_rows(vec![
        row(FormStatus::Match, "text", "Ada"),
        FormRow { normalisation: Some("DD/MM/YYYY".into()), ..row(FormStatus::MatchNormalised, "text", "23/04/2026") },
        row(FormStatus::Untouched, "text", ""),
        row(FormStatus::Untouched, "checkbox", "not checked"),
        row(FormStatus::Untouched, "none", "save"),
        row(FormStatus::Chosen, "checkbox", "checked"),
    ]);
    let covered = run(&mut world, &Policy::empty(), &as_task, t0());
    assert!(matches!(covered.decision, Decision::Allow { .. }), "{:?}", covered.decision);
    for (what, odd) in [
        ("a value that differs from the task", row(FormStatus::Mismatch, "text", "Bob")),
        ("a pre-filled amount", row(FormStatus::Untouched, "text", "250.00")),
        ("a pre-ticked box", row(FormStatus::Untouched, "checkbox", "checked")),
        ("a hidden input", row(FormStatus::Untouched, "other", "amount=1000")),
        ("a text field that says it is not checked", row(FormStatus::Untouched, "text", "not checked")),
        ("a sensitive field", row(FormStatus::Redacted, "password", "[REDACTED]")),
        (
            "a date read the way the page says",
            FormRow {
                normalisation: Some("DD/MM/YYYY, as the page's language (en-GB) writes dates".into()),
                ..row(FormStatus::MatchNormalised, "text", "03/04/2026")
            },
        ),
    ] {
        let req = with_rows(vec![row(FormStatus::Match, "text", "Ada"), odd]);
        let out = run(&mut world, &Policy::empty(), &req, t0());
        let Decision::RequireApproval { reason, .. } = out.decision else { panic!("{what}: {:?}", out.decision) };
        assert_eq!(reason.map(|r| r.code()), Some("unexpected_form_state"), "{what}");
    }
}

/// A card lives as long as its run waits: the run's end withdraws its waiting cards in the same
/// write, and neither an answer nor a grant can be made from one after.
#[test]
fn a_runs_end_withdraws_its_waiting_cards_and_no_answer_lands_after() {
    use grant_domain::catalogue::RunEscalated;
    use grant_domain::model::RunEvent;
    let mut world = given();
    let card = |world: &mut World, run_id: &str| {
        let req = AuthorizeRequest { run_id: run_id.into(), ..tile("el gato") };
        let Decision::RequireApproval { approval_id, .. } = run(world, &Policy::empty(), &req, t0()).decision else {
            panic!("a card")
        };
        approval_id
    };
    let mine = card(&mut world, "run-1");
    let other = card(&mut world, "run-2");
    let end = RunEvent::Escalated(RunEscalated {
        session_id: "s1".into(),
        run_id: "run-1".into(),
        reason: "approval_timeout".into(),
        ..RunEscalated::default()
    });
    let events = when(&mut world, Command::RecordRun(end)).unwrap();
    let withdrawn: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ApprovalResolved(r) => Some((r.approval_id, r.resolution)),
            _ => None,
        })
        .collect();
    assert_eq!(withdrawn, vec![(mine, Resolution::Withdrawn)], "only the ended run's card: {events:?}");
    assert_eq!(world.approvals[&mine].state.code(), "WITHDRAWN");
    assert_eq!(world.approvals[&other].state, ApprovalState::Pending, "another run's card still waits");
    for resolution in [Resolution::ApproveOnce, Resolution::ApproveForTask, Resolution::Deny] {
        let refused = when(&mut world, resolve(mine, resolution, Some(scope()), Uuid::new_v4(), t0()));
        assert!(matches!(refused, Err(DomainError::Conflict { .. })), "{resolution:?}: {refused:?}");
    }
    assert!(world.grants.is_empty(), "no grant was made from the withdrawn card");
    // Nobody answers with a withdrawal.
    let answered = when(&mut world, resolve(other, Resolution::Withdrawn, None, Uuid::new_v4(), t0()));
    assert!(matches!(answered, Err(DomainError::Invalid { .. })), "{answered:?}");
}
