//! Acts checked and dispatched: refusal codes, tokens, sequences and typed values.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

#[tokio::test]
async fn a_covered_click_dispatches_and_the_site_sees_it() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let o = s.observe(&session).await;
    assert!(o.snapshot_id.starts_with("snap_") && o.snapshot_id.len() == 17, "{}", o.snapshot_id);
    assert_eq!(o.url, format!("{LESSON_ORIGIN}/lesson/1"));
    assert!(o.nodes.iter().all(|n| n.r#ref.starts_with('n')));
    let (next, facts) = node(&o, "Next question");
    assert_eq!(next.role, rt::Role::Link as i32);
    assert_eq!(facts.nav_targets, vec![format!("{LESSON_ORIGIN}/lesson/2")]);
    assert!(facts.visible_text.is_empty(), "a source equal to the name is left out");

    let mut act = click(&session, &o, next);
    s.grant(&mut act, task_constraint());
    act.wait_for = rt::WaitFor::Navigation as i32;
    let reply = s.act(act.clone()).await.unwrap();
    assert!(reply.ok && reply.dispatched && reply.changed, "{reply:?}");
    assert!(documents(&s).contains(&format!("GET {LESSON}/lesson/2")), "{:?}", documents(&s));

    // The act voided the snapshot it used.
    refused(&s.act(act).await.unwrap(), rt::ActCode::StaleSnapshot);
}

#[tokio::test]
async fn every_refusal_code_is_reached_and_nothing_reaches_the_site() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let before = documents(&s);

    // STALE_SNAPSHOT: a snapshot that is not the newest.
    let old = s.observe(&session).await;
    let new = s.observe(&session).await;
    refused(&s.act(click(&session, &old, node(&old, "Next question").0)).await.unwrap(), rt::ActCode::StaleSnapshot);

    // REF_NOT_FOUND: a ref the snapshot does not have.
    let o = s.observe(&session).await;
    let mut act = click(&session, &o, node(&o, "Next question").0);
    act.r#ref = "n9999".into();
    let reply = s.act(act).await.unwrap();
    refused(&reply, rt::ActCode::RefNotFound);
    let _ = new;

    // ROLE_MISMATCH: the model says button, the node is a link.
    let o = s.observe(&session).await;
    let mut act = click(&session, &o, node(&o, "Next question").0);
    act.expected_role = rt::Role::Button as i32;
    refused(&s.act(act).await.unwrap(), rt::ActCode::RoleMismatch);

    // NAME_MISMATCH: a name the node does not have.
    let o = s.observe(&session).await;
    let mut act = click(&session, &o, node(&o, "Next question").0);
    act.expected_name = "Next questions".into();
    refused(&s.act(act).await.unwrap(), rt::ActCode::NameMismatch);

    // NODE_NOT_INTERACTABLE: a disabled button.
    let o = s.observe(&session).await;
    refused(&s.act(click(&session, &o, node(&o, "Skip").0)).await.unwrap(), rt::ActCode::NodeNotInteractable);

    // APPROVAL_REQUIRED: no ticket and no token, so nothing allowed the act. The snapshot stays
    // valid, since the approval is asked for this snapshot and ref, and the agent may go on.
    let o = s.observe(&session).await;
    let (pay, _) = node(&o, "Pay now");
    let reply = s.act_bare(click(&session, &o, pay)).await.unwrap();
    refused(&reply, rt::ActCode::ApprovalRequired);
    assert_eq!(reply.code_name, "APPROVAL_REQUIRED");
    assert!(reply.recoverable, "observe again and ask: {reply:?}");

    // OFF_ORIGIN_TARGET: a link to a site the run may not reach.
    let o = s.observe(&session).await;
    let reply = s.act(click(&session, &o, node(&o, "Claim prize").0)).await.unwrap();
    refused(&reply, rt::ActCode::OffOriginTarget);
    assert!(reply.detail.contains("www.elsewhere.test"), "{reply:?}");

    // tool.browser.grant_not_applicable: a hidden label source reads as a deletion.
    let o = s.observe(&session).await;
    let (hidden, facts) = node(&o, "Continue");
    assert!(facts.visible_text.contains("delete"), "the hidden text is carried as a label source: {facts:?}");
    let mut act = click(&session, &o, hidden);
    s.grant(&mut act, task_constraint());
    let reply = s.act(act).await.unwrap();
    refused(&reply, rt::ActCode::GrantNotApplicable);
    assert_eq!(reply.code_name, "tool.browser.grant_not_applicable");
    assert_eq!(reply.reason, "deletion", "{reply:?}");

    assert_eq!(documents(&s), before, "no refusal reached the site");
    assert!(s.fixture.requests().iter().all(|r| r.host != ELSEWHERE));
}

#[tokio::test]
async fn the_page_moving_outside_the_prefix_is_refused_under_the_grant() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    // "Go on" moves the page to /account/settings without loading anything.
    let o = s.observe(&session).await;
    let reply = s.act(click(&session, &o, node(&o, "Go on").0)).await.unwrap();
    assert!(reply.ok && reply.changed, "{reply:?}");
    let before = documents(&s);

    let o = s.observe(&session).await;
    assert_eq!(o.url, format!("{LESSON_ORIGIN}/account/settings"));
    let mut act = click(&session, &o, node(&o, "Next question").0);
    s.grant(&mut act, task_constraint());
    let reply = s.act(act).await.unwrap();
    refused(&reply, rt::ActCode::GrantNotApplicable);
    assert_eq!(reply.reason, "page_outside_scope", "{reply:?}");
    assert_eq!(documents(&s), before);

    // The refusal discarded the observation: the next act needs a fresh one.
    let mut again = click(&session, &o, node(&o, "Next question").0);
    s.grant(&mut again, task_constraint());
    refused(&s.act(again).await.unwrap(), rt::ActCode::StaleSnapshot);
}

#[tokio::test]
async fn a_button_renamed_between_observe_and_act_is_a_name_mismatch() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/rename", 50).await.unwrap();
    let o = s.observe(&session).await;
    page_changes(&s, "rename").await;
    let mut act = click(&session, &o, node(&o, "Continue").0);
    s.grant(&mut act, task_constraint());
    let reply = s.act(act).await.unwrap();
    refused(&reply, rt::ActCode::NameMismatch);
    assert!(!documents(&s).contains(&format!("GET {LESSON}/lesson/2")));
    // What the page now says is what the next snapshot shows.
    let o = s.observe(&session).await;
    node(&o, "Delete account");
}

#[tokio::test]
async fn a_budget_of_one_step_refuses_the_second_act() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 1).await.unwrap();
    let o = s.observe(&session).await;
    let mut scroll = click(&session, &o, node(&o, "Next question").0);
    scroll.action = Some(rt::act_request::Action::Scroll(rt::Scroll { by: 100 }));
    assert!(s.act(scroll).await.unwrap().ok);
    let o = s.observe(&session).await;
    let reply = s.act(click(&session, &o, node(&o, "Next question").0)).await.unwrap();
    refused(&reply, rt::ActCode::BudgetExceeded);
    assert!(!documents(&s).contains(&format!("GET {LESSON}/lesson/2")));
}

#[tokio::test]
async fn typed_values_come_from_the_record_and_are_never_returned() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "el gato")]);
    let session = s.open("profile-1", "/lesson/form", 50).await.unwrap();
    let o = s.observe(&session).await;
    // The form as it is before anything is typed: a decision read back here is stale once a
    // field changes.
    let before = s.form_digest(&click(&session, &o, node(&o, "Check").0)).await;
    let (field, facts) = node(&o, "Your answer");
    assert_eq!(facts.field_kind, Some(pb::FieldKind::Text as i32));
    let mut act = click(&session, &o, field);
    act.expected_role = rt::Role::Textbox as i32;
    act.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "answer".into() }));
    s.grant(&mut act, task_constraint());
    let reply = s.act(act).await.unwrap();
    assert!(reply.ok, "{reply:?}");
    assert!(!format!("{reply:?}").contains("el gato"), "the reply carries no value");

    // The model's next snapshot says the field is filled, not what it holds.
    let o = s.observe(&session).await;
    let (field, _) = node(&o, "Your answer");
    assert!(field.state.as_ref().unwrap().filled && field.value.is_empty(), "{field:?}");
    assert!(!format!("{o:?}").contains("el gato"));

    // The card's read-back: every field, the one the runtime typed marked with its record field.
    let form = s.read_form(&session, &o, "Check", "").await;
    let fields: Vec<_> =
        form.fields.iter().map(|f| (f.name.as_str(), f.value.as_str(), f.typed_field_id.as_str())).collect();
    assert_eq!(fields, [("answer", "el gato", "answer"), ("attempt", "1", ""), ("level", "3", "")]);

    // A field the record does not have is bad input, and nothing is typed.
    let o = s.observe(&session).await;
    let mut act = click(&session, &o, node(&o, "Level").0);
    act.expected_role = rt::Role::Textbox as i32;
    act.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "password".into() }));
    let err = s.act(act).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    let o = s.observe(&session).await;
    let mut submit = click(&session, &o, node(&o, "Check").0);
    submit.wait_for = rt::WaitFor::Navigation as i32;
    // A grant's ticket for a submit binds the form its decision read back: one read before
    // the form changed is refused, and nothing is sent.
    let mut early = submit.clone();
    s.grant_form(&mut early, task_constraint(), before);
    let refused = s.act(early).await.unwrap();
    assert!(!refused.dispatched && refused.code == rt::ActCode::StaleSnapshot as i32, "{refused:?}");
    assert!(s.fixture.requests().iter().all(|r| r.method != "POST"), "a form sent on another form's ticket");
    let o = s.observe(&session).await;
    let mut submit = click(&session, &o, node(&o, "Check").0);
    submit.wait_for = rt::WaitFor::Navigation as i32;
    s.grant_submit(&mut submit, task_constraint()).await;
    assert!(s.act(submit).await.unwrap().ok);
    let posted: Vec<_> = s.fixture.requests().into_iter().filter(|r| r.method == "POST").collect();
    assert_eq!(posted.len(), 1, "{posted:?}");
    assert_eq!(posted[0].body, "answer=el+gato&attempt=1&level=3");
}

/// An approval token is redeemed through the authorizer for exactly the run, snapshot and ref
/// it was issued for.
#[tokio::test]
async fn a_consequential_button_needs_a_token_for_this_snapshot() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let first = s.observe(&session).await;
    let token = approve_once(&mut s, &session, &first, "Pay now").await;

    // Without a token: APPROVAL_REQUIRED, and the snapshot stays.
    let (pay, _) = node(&first, "Pay now");
    refused(&s.act_bare(click(&session, &first, pay)).await.unwrap(), rt::ActCode::ApprovalRequired);

    // The token of the first snapshot on the same button of a newer one: invalid, terminal.
    let second = s.observe(&session).await;
    let (pay2, _) = node(&second, "Pay now");
    let mut act = click(&session, &second, pay2);
    act.approval_token = token.clone();
    act.consequential = true;
    let reply = s.act(act).await.unwrap();
    refused(&reply, rt::ActCode::ApprovalTokenInvalid);
    assert!(s.fixture.requests().iter().all(|r| r.method != "POST"), "nothing was paid");

    // A runtime credential may not drive the runtime; only the worker does.
    let err = s
        .runtime
        .observe(with(RUNTIME, rt::ObserveRequest { session_id: session.clone(), run_id: String::new() }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
}

#[tokio::test]
async fn an_approved_token_dispatches_the_consequential_click_once() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let o = s.observe(&session).await;
    let token = approve_once(&mut s, &session, &o, "Pay now").await;
    let mut act = click(&session, &o, node(&o, "Pay now").0);
    act.approval_token = token;
    act.consequential = true;
    act.wait_for = rt::WaitFor::Navigation as i32;
    let reply = s.act(act).await.unwrap();
    assert!(reply.ok && reply.dispatched, "{reply:?}");
    let posted: Vec<_> = s.fixture.requests().into_iter().filter(|r| r.method == "POST").collect();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].path(), "/lesson/pay");
}

/// On an unchanged page, the authorizer's side fed the snapshot's sealed facts and the runtime
/// reading the live page refuse for the same rule; and both cover what is covered.
#[tokio::test]
async fn the_worker_and_the_runtime_agree_on_an_unchanged_page() {
    let mut s = stack().await;
    s.record("run-1", &[("note", "hola")]);
    let session = s.open("profile-1", "/lesson/same", 50).await.unwrap();
    let cases: [(&str, rt::Role, rt::act_request::Action, Action, Option<&str>); 6] = [
        (
            "Next",
            rt::Role::Button,
            rt::act_request::Action::Click(rt::Click {}),
            Action::Click,
            Some("element_disabled"),
        ),
        (
            "Notes",
            rt::Role::Textbox,
            rt::act_request::Action::Type(rt::Type { field_id: "note".into() }),
            Action::Type { text: "hola".into() },
            Some("field_kind_not_covered"),
        ),
        (
            "Choose",
            rt::Role::Button,
            rt::act_request::Action::Select(rt::Select { option: "x".into() }),
            Action::Select { option: "x".into() },
            Some("field_kind_not_covered"),
        ),
        (
            "Cat tile",
            rt::Role::Checkbox,
            rt::act_request::Action::Check(rt::Check {}),
            Action::Check,
            Some("field_kind_not_covered"),
        ),
        ("Continue", rt::Role::Button, rt::act_request::Action::Click(rt::Click {}), Action::Click, Some("currency")),
        ("Onward", rt::Role::Link, rt::act_request::Action::Click(rt::Click {}), Action::Click, None),
    ];
    let before = documents(&s);
    for (name, role, wire, action, want) in cases {
        let o = s.observe(&session).await;
        let (n, facts) = node(&o, name);
        // What the authorizer reads: the runtime's sealed facts of the node, opened with the
        // tenant's key, the same as the facts beside them.
        let body = s.keys.open_facts(tests::browser::TENANT, tests::browser::sealed(&o, name)).expect("sealed");
        assert_eq!(body.element.as_ref(), Some(facts), "{name}: the sealed facts are the snapshot's");
        assert_eq!((body.page_url.as_str(), body.node_ref.as_str()), (o.url.as_str(), n.r#ref.as_str()));
        let worker_facts = proto::facts::element_facts(body.element.unwrap()).unwrap();
        let grant = Grant::Task(TaskScope {
            origin: LESSON_ORIGIN.into(),
            path_prefix: "/lesson".into(),
            chars_remaining: 4096,
        });
        let worker = classifier::covers(&grant, &action, &worker_facts, &PageFacts { url: o.url.clone() });
        let mut act = click(&session, &o, n);
        act.expected_role = role as i32;
        act.action = Some(wire);
        s.grant(&mut act, task_constraint());
        let reply = s.act(act).await.unwrap();
        match want {
            Some(reason) => {
                assert_eq!(worker.map_err(|e| e.reason.code()), Err(reason), "worker on {name}");
                refused(&reply, rt::ActCode::GrantNotApplicable);
                assert_eq!(reply.reason, reason, "runtime on {name}: {reply:?}");
            }
            None => {
                assert_eq!(worker, Ok(()), "worker on {name}");
                assert!(reply.ok, "runtime on {name}: {reply:?}");
            }
        }
        if want.is_some() {
            assert_eq!(documents(&s), before, "{name} reached the site");
        }
    }
    assert!(documents(&s).contains(&format!("GET {LESSON}/lesson/3")));
}

#[tokio::test]
async fn bad_input_is_invalid_argument_and_dispatches_nothing() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let o = s.observe(&session).await;
    let (next, _) = node(&o, "Next question");
    let good = click(&session, &o, next);
    let mut both = good.clone();
    s.grant(&mut both, task_constraint());
    both.approval_token = format!("apv_{}", "0".repeat(24));
    let bad: [(&str, rt::ActRequest); 8] = [
        // The contract's click takes no field: a textbox is typed into.
        ("expected_role", rt::ActRequest { expected_role: rt::Role::Textbox as i32, ..good.clone() }),
        ("expected_name", rt::ActRequest { expected_name: "x".repeat(121), ..good.clone() }),
        ("expected_name", rt::ActRequest { expected_name: String::new(), ..good.clone() }),
        ("snapshot_id", rt::ActRequest { snapshot_id: "snap_XYZ".into(), ..good.clone() }),
        ("ref", rt::ActRequest { r#ref: "#submit".into(), ..good.clone() }),
        ("expected_role", rt::ActRequest { expected_role: 0, ..good.clone() }),
        ("approval_token", rt::ActRequest { approval_token: "apv_short".into(), ..good.clone() }),
        ("ticket", both),
    ];
    for (field, req) in bad {
        let err = s.act(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{field}: {err:?}");
    }
    // Bad input changed nothing: the snapshot still stands and the click goes through.
    assert!(!documents(&s).contains(&format!("GET {LESSON}/lesson/2")));
    assert!(s.act(good).await.unwrap().ok);
}

#[tokio::test]
async fn a_replayed_act_dispatches_nothing_and_a_refusal_keeps_the_sequence() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let o = s.observe(&session).await;
    let mut go = click(&session, &o, node(&o, "Go on").0);
    go.sequence = 1;
    assert!(s.act(go.clone()).await.unwrap().dispatched);
    // The reply was lost and the worker retries: the same sequence is refused, nothing is sent.
    let err = s.act(go).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    let o = s.observe(&session).await;
    let mut skip = click(&session, &o, node(&o, "Next question").0);
    skip.sequence = 3;
    assert_eq!(s.act(skip.clone()).await.unwrap_err().code(), Code::FailedPrecondition, "a gap in the sequence");
    // A refusal (the page is now outside the prefix) leaves sequence 2 free.
    skip.sequence = 2;
    s.grant(&mut skip, task_constraint());
    refused(&s.act(skip).await.unwrap(), rt::ActCode::GrantNotApplicable);
    let o = s.observe(&session).await;
    let mut next = click(&session, &o, node(&o, "Next question").0);
    next.sequence = 2;
    next.wait_for = rt::WaitFor::Navigation as i32;
    assert!(s.act(next).await.unwrap().ok);
    assert_eq!(documents(&s).iter().filter(|d| d.ends_with("/lesson/2")).count(), 1, "{:?}", documents(&s));
}

#[tokio::test]
async fn the_claim_must_match_the_snapshot_as_well_as_the_live_page() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/rename", 50).await.unwrap();
    let o = s.observe(&session).await;
    page_changes(&s, "rename").await;
    // The page renamed the button after the read; naming what it says now is not what the
    // snapshot showed.
    let mut act = click(&session, &o, node(&o, "Continue").0);
    act.expected_name = "Delete account".into();
    refused(&s.act(act).await.unwrap(), rt::ActCode::NameMismatch);

    // A target that moved since the snapshot makes it stale, even when the name did not change.
    let session = s.open("profile-2", "/lesson/tricks", 50).await.unwrap();
    let o = s.observe(&session).await;
    let (moving, facts) = node(&o, "Moving on");
    assert_eq!(facts.nav_targets, vec![format!("{LESSON_ORIGIN}/lesson/2")]);
    page_changes(&s, "move").await;
    let reply = s.act(click(&session, &o, moving)).await.unwrap();
    refused(&reply, rt::ActCode::StaleSnapshot);
    assert!(!documents(&s).iter().any(|d| d.contains("/lesson/3")));
}

#[tokio::test]
async fn a_sequence_is_required_and_a_replay_under_a_grant_dispatches_nothing() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let o = s.observe(&session).await;
    let mut next = click(&session, &o, node(&o, "Next question").0);
    s.grant(&mut next, task_constraint());
    next.wait_for = rt::WaitFor::Navigation as i32;
    let unnumbered = s.runtime.act(with(WORKER, next.clone())).await.unwrap_err();
    assert_eq!(unnumbered.code(), Code::InvalidArgument, "{unnumbered:?}");
    next.sequence = 1;
    assert!(s.act(next.clone()).await.unwrap().ok);
    let replay = s.act(next).await.unwrap_err();
    assert_eq!(replay.code(), Code::AlreadyExists, "{replay:?}");
    assert_eq!(documents(&s).iter().filter(|d| d.ends_with("/lesson/2")).count(), 1, "{:?}", documents(&s));
}

/// Seed 004's own row: the page writes the record's `2026-04-03` as `03/04/2026`, and a page that
/// says it writes dates day first (`lang="en-GB"`) makes that a match, named on the row. The same
/// page with no language says nothing, and the row is a mismatch.
#[tokio::test]
async fn the_seeds_date_matches_after_its_named_normalisation() {
    let mut s = stack().await;
    s.record("run-1", &[("effective", "2026-04-03")]);
    let page = |lang: &str| {
        format!(
            r#"<!doctype html><html{lang}><title>Endorsement</title><form action="/lesson/2" method="post">
<label>Effective date <input name="effective"
 oninput="const m = /^(\d{{4}})-(\d{{2}})-(\d{{2}})$/.exec(this.value); if (m) this.value = m[3] + '/' + m[2] + '/' + m[1]"></label>
<button>Submit endorsement</button></form>"#
        )
    };
    s.fixture.page(LESSON, "/lesson/gb", &page(r#" lang="en-GB""#));
    s.fixture.page(LESSON, "/lesson/unsaid", &page(""));
    for (path, status, rule) in [
        ("/lesson/gb", pb::FormStatus::MatchNormalised, "DD/MM/YYYY, as the page's language (en-GB) writes dates"),
        ("/lesson/unsaid", pb::FormStatus::Mismatch, ""),
    ] {
        let session = s.open("profile-1", path, 50).await.unwrap();
        let o = s.observe_run(&session, "run-1").await;
        let mut act = click(&session, &o, node(&o, "Effective date").0);
        act.expected_role = rt::Role::Textbox as i32;
        act.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "effective".into() }));
        assert!(s.act(act).await.unwrap().ok);
        let o = s.observe_run(&session, "run-1").await;
        let form = s.read_form(&session, &o, "Submit endorsement", "run-1").await;
        let row = &form.review.expect("a review beside the record").rows[0];
        assert_eq!(row.value, "03/04/2026", "{path}");
        assert_eq!((pb::FormStatus::try_from(row.status), row.normalisation.as_str()), (Ok(status), rule), "{path}");
        s.runtime.close_session(with(WORKER, rt::CloseSessionRequest { session_id: session })).await.unwrap();
    }
}

/// A form-associated custom element submits what its internals hold, which no read can see: its
/// form is never reviewable, so no card or grant can send it.
#[tokio::test]
async fn a_form_with_a_control_no_read_can_see_is_unreviewable() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "el gato")]);
    s.fixture.page(
        LESSON,
        "/lesson/opaque",
        r#"<!doctype html><title>Opaque</title><form action="/lesson/2" method="post">
<label>Answer <input name="answer"></label><amount-box name="amount"></amount-box><button>Next step</button></form>
<script>customElements.define('amount-box', class extends HTMLElement {
  static formAssociated = true;
  constructor() { super(); this.i = this.attachInternals(); this.i.setFormValue('1000'); }
});</script>"#,
    );
    let session = s.open("profile-1", "/lesson/opaque", 50).await.unwrap();
    let o = s.observe_run(&session, "run-1").await;
    let form = s.read_form(&session, &o, "Next step", "run-1").await;
    assert!(form.unreviewable.contains("cannot read"), "{form:?}");
    assert!(form.sealed.is_none() && form.review.is_none(), "nothing to put on a card: {form:?}");
    // Nor does a grant's ticket send it, whatever form it names.
    let mut submit = click(&session, &o, node(&o, "Next step").0);
    s.grant_form(&mut submit, task_constraint(), vec![0; 32]);
    let reply = s.act(submit).await.unwrap();
    assert!(!reply.dispatched && reply.detail.contains("cannot read"), "{reply:?}");
    assert!(s.fixture.requests().iter().all(|r| r.method != "POST"), "the form was sent");
}

/// A box or list the agent set is its own act on the read-back ("chosen"), never a page
/// default; a box the page ticked stays untouched.
#[tokio::test]
async fn a_box_the_agent_ticked_reads_back_as_its_own_choice() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "el gato")]);
    s.fixture.page(
        LESSON,
        "/lesson/choices",
        r#"<!doctype html><title>Choices</title><form action="/lesson/2" method="post">
<label><input type="checkbox" name="daily"> Daily practice</label>
<label><input type="checkbox" name="news" checked> Lesson news</label>
<label for="lv">Level</label> <select id="lv" name="level"><option value="1">Easy</option><option value="2">Hard</option></select>
<button>Save answers</button></form>"#,
    );
    let session = s.open("profile-1", "/lesson/choices", 50).await.unwrap();
    let o = s.observe_run(&session, "run-1").await;
    let mut tick = click(&session, &o, node(&o, "Daily practice").0);
    tick.expected_role = rt::Role::Checkbox as i32;
    tick.action = Some(rt::act_request::Action::Check(rt::Check {}));
    assert!(s.act(tick).await.unwrap().ok);
    let o = s.observe_run(&session, "run-1").await;
    let mut pick = click(&session, &o, node(&o, "Level").0);
    pick.expected_role = rt::Role::Combobox as i32;
    pick.action = Some(rt::act_request::Action::Select(rt::Select { option: "2".into() }));
    assert!(s.act(pick).await.unwrap().ok);
    let o = s.observe_run(&session, "run-1").await;
    let form = s.read_form(&session, &o, "Save answers", "run-1").await;
    let rows: Vec<(String, String, i32)> =
        form.review.expect("a review").rows.into_iter().map(|r| (r.label, r.value, r.status)).collect();
    use pb::FormStatus as F;
    assert_eq!(
        rows,
        vec![
            ("Daily practice".into(), "checked".into(), F::Chosen as i32),
            ("Lesson news".into(), "checked".into(), F::Untouched as i32),
            ("Level".into(), "Hard (2)".into(), F::Chosen as i32),
        ]
    );
}
