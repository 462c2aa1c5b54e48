//! Forms under a run: filled from the record, read back on the card, never sent when they differ.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

#[tokio::test]
async fn a_form_is_filled_under_the_task_permission_and_its_submit_card_shows_the_read_back() {
    let mut s = Stack::start(1).await;
    s.fixture.page(LESSON, "/lesson/unit-3", ENROL);
    s.fixture.page(LESSON, "/lesson/unit-4", ENROLLED);
    s.record("run-f", &[("name", "Ada Lovelace"), ("city", "London")]);
    s.chat("s1", "profile-1").await;
    let browser_session = s.open("profile-1", "/lesson/unit-3", 50).await.unwrap();
    let mut clients = worker(&s);
    let task = task_in_s1(
        browser_session,
        "run-f",
        "Enrol with the task record's name and email",
        &["name", "city"],
        20,
        Duration::from_secs(20),
    );
    // The first card (a type) is allowed for the task; the submit's card is allowed once.
    let answering = owner_answers_each(&s, vec![pb::Resolution::ApproveForTask, pb::Resolution::ApproveOnce]);
    let mut model = Scripted::new()
        .then(|_| snapshot())
        .then(|v| on_named(v, "type", "Full name", false, json!({ "field_id": "name" })))
        .then(|v| on_named(v, "request_approval", "Full name", false, json!({})))
        .then(|v| with_token(v, "type", "Full name", false, json!({ "field_id": "name" })))
        .then(|_| snapshot())
        // Covered by the task permission: no card.
        .then(|v| on_named(v, "type", "City", false, json!({ "field_id": "city" })))
        .then(|_| snapshot())
        // A submit is never covered: the harness reads the form back and the card shows it.
        .then(|v| on_named(v, "click", "Confirm enrolment", true, json!({})))
        .then(|v| on_named(v, "request_approval", "Confirm enrolment", true, json!({})))
        // The model's claim of consequence, wrong here, is set against the runtime's reading.
        .then(|v| with_token(v, "click", "Confirm enrolment", false, json!({})))
        .then(|_| snapshot());
    let outcome = run(&mut clients, &task, &mut model).await.unwrap();
    let list = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: false, min_position: None };
    let all = s.authorizer.list_approvals(with(GATEWAY, list)).await.unwrap().into_inner().approvals;
    assert_eq!(outcome.end, End::Done { reference: "EN-2040".into() }, "{:?} {all:?}", outcome.log);
    let cards = answering.await.unwrap();
    assert_eq!(outcome.counts.get("consequential_disagreement"), Some(&1), "{:?}", outcome.counts);

    // The submit's card: every field read back from the live page beside the record.
    let view = cards[1].view.clone().unwrap();
    assert_eq!(view.element_name, "Confirm enrolment", "the button's label verbatim");
    let rows: Vec<(String, String, String, i32, String)> = view
        .form
        .expect("the submit's card carries the form's read-back")
        .rows
        .into_iter()
        .map(|r| (r.label, r.value, r.record_value, r.status, r.normalisation))
        .collect();
    use pb::FormStatus as F;
    let row = |l: &str, v: &str, rec: &str, st: F, n: &str| (l.into(), v.into(), rec.into(), st as i32, n.into());
    assert_eq!(
        rows,
        vec![
            row("Full name", "Ada Lovelace", "Ada Lovelace", F::Match, ""),
            row("City", "LONDON", "London", F::MatchNormalised, "letter case"),
            row("Excess (voluntary)", "250.00", "", F::Untouched, ""),
        ]
    );
    // The values the owner read are the values sent.
    let sent = s.fixture.requests().iter().map(|r| r.target.clone()).find(|t| t.starts_with("/lesson/unit-4"));
    assert_eq!(sent.as_deref(), Some("/lesson/unit-4?name=Ada+Lovelace&city=LONDON&excess=250.00"));
}

/// A form that differs from the record is never sent on a grant's allow: here the submit is an
/// unremarkable "Next step" the task permission would cover, and it comes to the owner as a card
/// that says why (`unexpected_form_state`); the model escalates, and nothing is sent. (Only the
/// owner can let such a form go, on the card that shows the mismatch: the console's test.)
#[tokio::test]
async fn a_form_that_differs_from_the_record_is_never_sent_on_a_grant() {
    let mut s = Stack::start(1).await;
    // The page rewrites the city as it is typed: the form no longer holds the record's value.
    let rewrites = ENROL
        .replace("this.value.toUpperCase()", "this.value.replace('o', '0')")
        .replace("Confirm enrolment", "Next step");
    s.fixture.page(LESSON, "/lesson/unit-3", &rewrites);
    s.record("run-g", &[("name", "Ada Lovelace"), ("city", "London")]);
    s.chat("s1", "profile-1").await;
    let browser_session = s.open("profile-1", "/lesson/unit-3", 50).await.unwrap();
    let mut clients = worker(&s);
    let task = task_in_s1(browser_session, "run-g", "Enrol", &["name", "city"], 10, Duration::from_secs(20));
    let answering = owner_answers_each(&s, vec![pb::Resolution::ApproveForTask]);
    let mut model = Scripted::new()
        .then(|_| snapshot())
        .then(|v| on_named(v, "type", "City", false, json!({ "field_id": "city" })))
        .then(|v| on_named(v, "request_approval", "City", false, json!({})))
        .then(|v| with_token(v, "type", "City", false, json!({ "field_id": "city" })))
        .then(|_| snapshot())
        .then(|v| on_named(v, "click", "Next step", false, json!({})))
        .then(|_| escalate("unexpected_form_state"));
    let outcome = run(&mut clients, &task, &mut model).await.unwrap();
    answering.await.unwrap();
    assert_eq!(outcome.end.reason(), "unexpected_form_state", "{:?}", outcome.log);
    assert_eq!(outcome.counts.get("form_mismatch"), Some(&1));
    // The submit's card says why the permission does not cover it, and nothing was submitted.
    let list = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: false, min_position: None };
    let cards = s.authorizer.list_approvals(with(GATEWAY, list)).await.unwrap().into_inner().approvals;
    assert_eq!(cards.len(), 2, "{cards:?}");
    let submit = cards
        .iter()
        .find(|c| c.view.as_ref().is_some_and(|v| v.element_name == "Next step"))
        .expect("the submit's card");
    assert_eq!(submit.reason, "unexpected_form_state", "{submit:?}");
    assert!(!s.fixture.requests().iter().any(|r| r.path() == "/lesson/unit-4"));
    let story = run_events(&s).await;
    assert_eq!(story.last().map(String::as_str), Some("run.escalated"), "{story:?}");
}

/// A click that submits a form through another role still has its form read back: the card
/// shows the form, and the approval is spent on exactly what it showed.
#[tokio::test]
async fn a_submit_behind_another_role_still_shows_its_form_on_the_card() {
    let mut s = Stack::start(1).await;
    s.chat("s1", "profile-1").await;
    let mut answers = Vec::new();
    for (i, (page, name, note, html)) in HIDDEN_SUBMITS.into_iter().enumerate() {
        let done = format!("<!doctype html><title>Saved: reference HS-10{i}0</title>");
        s.fixture.page(LESSON, &format!("/lesson/{page}"), &format!("<!doctype html><title>Lesson</title>{html}"));
        s.fixture.page(LESSON, &format!("/lesson/sent-{page}"), &done);
        let answering = owner_answers_each(&s, vec![pb::Resolution::ApproveOnce]);
        let mut model = Scripted::new()
            .then(|_| snapshot())
            .then(move |v| on_named(v, "click", name, true, json!({})))
            .then(move |v| on_named(v, "request_approval", name, true, json!({})))
            .then(move |v| with_token(v, "click", name, true, json!({})))
            .then(|_| snapshot());
        let outcome = run_on(&mut s, &format!("/lesson/{page}"), &format!("run-{page}"), &mut model).await;
        let card = answering.await.unwrap().remove(0);
        assert_eq!(outcome.end, End::Done { reference: format!("HS-10{i}0") }, "{page}: {:?}", outcome.log);
        let rows = card.view.unwrap().form.unwrap_or_else(|| panic!("{page}: the card shows the form")).rows;
        let rows: Vec<(String, String)> = rows.into_iter().map(|r| (r.label, r.value)).collect();
        assert_eq!(rows, [("Note".to_owned(), note.to_owned())], "{page}");
        // The values the owner read are the values sent.
        let sent = s
            .fixture
            .requests()
            .iter()
            .map(|r| r.target.clone())
            .find(|t| t.starts_with(&format!("/lesson/sent-{page}?")));
        assert!(sent.is_some_and(|t| t.ends_with(&format!("note={}", note.replace(' ', "+")))), "{page}");
        answers.push(page);
    }
    assert_eq!(answers.len(), 3);
}

/// A click that could submit two forms has no one read-back to show: the run ends before any
/// card, and nothing is sent.
#[tokio::test]
async fn a_click_that_could_submit_two_forms_ends_the_run_before_a_card() {
    let mut s = Stack::start(1).await;
    s.chat("s1", "profile-1").await;
    s.fixture.page(
        LESSON,
        "/lesson/two",
        r#"<!doctype html><title>Lesson</title>
<form id="a" action="/lesson/sent-a"><input name="x" value="1"></form>
<form id="b" action="/lesson/sent-b"><input name="y" value="2"></form>
<span role="button" aria-label="Both" style="display:inline-block"><button form="a">A</button><button form="b">B</button></span>"#,
    );
    let mut model = Scripted::new().then(|_| snapshot()).then(|v| on_named(v, "click", "Both", true, json!({})));
    let outcome = run_on(&mut s, "/lesson/two", "run-two", &mut model).await;
    assert_eq!(outcome.end.reason(), "unexpected_form_state", "{:?}", outcome.log);
    assert_eq!(outcome.counts.get("form_unreviewable"), Some(&1), "{:?}", outcome.counts);
    let list = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: false, min_position: None };
    assert!(s.authorizer.list_approvals(with(GATEWAY, list)).await.unwrap().into_inner().approvals.is_empty());
    assert!(!s.fixture.requests().iter().any(|r| r.path().starts_with("/lesson/sent")));
}
