//! What no grant answers: secret fields, submitting keys, escalations, unreadable origins, empty turns.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

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
    assert_eq!((reason.map(grant_domain::model::NotCovered::code), offer), (Some("policy_escalation"), &None));
    // "Delete" in the visible text only, "Continue" as the name: every source counts.
    let mut delete = button("Continue");
    delete.visible_text = Some("Delete lesson".into());
    let out = run(&mut world, &policy, &pinned(act("s1", delete, Action::Click)), t0());
    assert_eq!(out.decision, Decision::Deny(Denial::Policy { rule: "never-delete".into(), hardline: true }));
    assert_eq!(world.grants[&grant_id].actions_used, 1, "only the covered tile used the grant");
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
