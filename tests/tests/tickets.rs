//! Dispatch tickets in real Chromium on the fixture site: the runtime dispatches only what a
//! ticket sealed for exactly this act allows, and checks it on its own. A ticket changed by one
//! byte, used on another ref, another act, another snapshot or another session, expired, or
//! naming a text the record no longer holds is APPROVAL_TOKEN_INVALID (terminal) and reaches
//! nothing; a ticket from before the owner's Stop is not dispatched after it. The authorizer
//! decides only on the runtime's sealed facts.

use prost::Message;
use proto::runtime as rt;
use proto::v1 as pb;
use tests::browser::{
    GATEWAY, LESSON, LESSON_ORIGIN, Stack, WORKER, click, node, record_text, sealed, task_constraint, with,
};

const PAGE: &str = r#"<!doctype html><title>Tickets</title>
<a href="/lesson/2">Next</a> <a href="/lesson/3">Other</a>
<label>Answer <input name="answer"></label>"#;

async fn stack() -> Stack {
    let s = Stack::start(2).await;
    s.fixture.page(LESSON, "/lesson/1", PAGE);
    for path in ["/lesson/2", "/lesson/3"] {
        s.fixture.page(LESSON, path, "<!doctype html><title>Next</title><p>Done");
    }
    s
}

/// Refused as a ticket that does not fit: terminal, nothing dispatched, nothing reached the site.
async fn refused_as_invalid(s: &mut Stack, act: rt::ActRequest, case: &str) {
    let before = s.fixture.requests().len();
    let reply = s.act(act).await.unwrap();
    assert_eq!(rt::ActCode::try_from(reply.code), Ok(rt::ActCode::ApprovalTokenInvalid), "{case}: {reply:?}");
    assert!(!reply.dispatched && !reply.recoverable, "{case}: {reply:?}");
    assert_eq!(s.fixture.requests().len(), before, "{case}: a request reached the site");
}

#[tokio::test]
async fn a_ticket_that_does_not_fit_the_act_dispatches_nothing() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "el gato")]);
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let other_session = s.open("profile-2", "/lesson/1", 50).await.unwrap();

    // One byte of the body or of the seal changed.
    for part in ["body", "mac"] {
        let o = s.observe(&session).await;
        let mut act = click(&session, &o, node(&o, "Next").0);
        s.grant(&mut act, task_constraint());
        let t = act.ticket.as_mut().unwrap();
        let bytes = if part == "body" { &mut t.body } else { &mut t.mac };
        bytes[3] ^= 1;
        refused_as_invalid(&mut s, act, part).await;
    }

    // Sealed for "Next", sent for "Other" of the same snapshot.
    let o = s.observe(&session).await;
    let mut next = click(&session, &o, node(&o, "Next").0);
    s.grant(&mut next, task_constraint());
    let other = rt::ActRequest { ticket: next.ticket.clone(), ..click(&session, &o, node(&o, "Other").0) };
    refused_as_invalid(&mut s, other, "another ref").await;

    // Sealed for a click, sent with a key press on the same node.
    let o = s.observe(&session).await;
    let mut press = click(&session, &o, node(&o, "Next").0);
    s.grant(&mut press, task_constraint());
    press.action = Some(rt::act_request::Action::Press(rt::Press { key: "Enter".into() }));
    refused_as_invalid(&mut s, press, "another act").await;

    // Sealed for one snapshot, sent on the newer one's same node.
    let old = s.observe(&session).await;
    let mut stale = click(&session, &old, node(&old, "Next").0);
    s.grant(&mut stale, task_constraint());
    let new = s.observe(&session).await;
    let moved = rt::ActRequest { ticket: stale.ticket, ..click(&session, &new, node(&new, "Next").0) };
    refused_as_invalid(&mut s, moved, "another snapshot").await;

    // Sealed for this session's act, sent in another session (another profile) on its own
    // snapshot: the snapshot and the profile both differ.
    let o = s.observe(&session).await;
    let mut mine = click(&session, &o, node(&o, "Next").0);
    s.grant(&mut mine, task_constraint());
    let theirs = s.observe(&other_session).await;
    let elsewhere = rt::ActRequest { ticket: mine.ticket, ..click(&other_session, &theirs, node(&theirs, "Next").0) };
    refused_as_invalid(&mut s, elsewhere, "another session").await;

    // Expired before it was used: authorizing again cures it, so the agent may ask again.
    let o = s.observe(&session).await;
    let mut late = click(&session, &o, node(&o, "Next").0);
    let past = time::OffsetDateTime::now_utc() - time::Duration::seconds(1);
    late.ticket = Some(s.ticket_until(&late, Some(task_constraint()), past));
    let before = s.fixture.requests().len();
    let reply = s.act(late).await.unwrap();
    assert_eq!(rt::ActCode::try_from(reply.code), Ok(rt::ActCode::ApprovalRequired), "{reply:?}");
    assert!(!reply.dispatched && reply.recoverable && reply.detail.contains("expired"), "{reply:?}");
    assert_eq!(s.fixture.requests().len(), before);

    // A type whose record value changed after the decision: the text is not what was shown.
    let o = s.observe(&session).await;
    let mut typed = click(&session, &o, node(&o, "Answer").0);
    typed.expected_role = rt::Role::Textbox as i32;
    typed.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "answer".into() }));
    s.grant(&mut typed, task_constraint());
    s.record("run-1", &[("answer", "delete my account")]);
    refused_as_invalid(&mut s, typed, "another text").await;
    let o = s.observe(&session).await;
    assert!(!node(&o, "Answer").0.state.as_ref().is_some_and(|st| st.filled), "nothing was typed");

    // The same ticket, well formed, dispatches once; sent again, it reaches nothing.
    let o = s.observe(&session).await;
    let mut once = click(&session, &o, node(&o, "Next").0);
    s.grant(&mut once, task_constraint());
    once.wait_for = rt::WaitFor::Navigation as i32;
    let reply = s.act(once.clone()).await.unwrap();
    assert!(reply.ok && reply.dispatched, "{reply:?}");
    let before = s.fixture.requests().len();
    let again = s.act(once).await.unwrap();
    assert!(!again.dispatched, "{again:?}");
    assert_eq!(s.fixture.requests().len(), before, "the replay reached the site");
}

/// An `Authorize` of `action` on the node named `name` of `o`, as the worker sends it: with the
/// runtime's sealed facts of that node.
fn authorize(o: &rt::ObserveReply, call: &str, name: &str, action: pb::Action) -> pb::AuthorizeRequest {
    let (n, _) = node(o, name);
    pb::AuthorizeRequest {
        session_id: "s1".into(),
        run: Some(pb::RunContext { run_id: "run-1".into(), interactive: true, top_level: true }),
        tool_call_id: call.into(),
        turn_tool_calls: vec!["browser.observe".into(), "browser.act".into()],
        agent_version: "agent-7".into(),
        action: Some(action),
        snapshot_id: o.snapshot_id.clone(),
        node_ref: n.r#ref.clone(),
        facts: Some(sealed(o, name).clone()),
        ..Default::default()
    }
}

/// The sealed body of `req`'s facts changed by `change` and sent with the old seal.
fn rewritten(req: &pb::AuthorizeRequest, change: impl FnOnce(&mut pb::FactsBody)) -> pb::AuthorizeRequest {
    let mut sealed = req.facts.clone().unwrap();
    let mut body = pb::FactsBody::decode(sealed.body.as_slice()).unwrap();
    change(&mut body);
    sealed.body = body.encode_to_vec();
    pb::AuthorizeRequest { facts: Some(sealed), ..req.clone() }
}

/// The authorizer decides only on the runtime's sealed facts: a worker's own facts, facts
/// rewritten under the seal (a label source removed, a target changed, a field kind changed),
/// another node's facts, and facts a runtime read in another profile are refused, counted, and
/// write nothing (no card).
#[tokio::test]
async fn unsealed_or_forged_facts_are_refused_and_write_nothing() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let elsewhere = s.open("profile-2", "/lesson/1", 50).await.unwrap();
    s.chat("s1", "profile-1").await;
    let o = s.observe(&session).await;
    let theirs = s.observe(&elsewhere).await;
    let click_kind = pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() };
    let good = authorize(&o, "call-1", "Next", click_kind.clone());
    let refused_before = s.authorizer_service.facts_refused();

    let (_, facts) = node(&o, "Next");
    let unsealed = pb::AuthorizeRequest {
        facts: None,
        element: Some(facts.clone()),
        page_url: o.url.clone(),
        page_title: o.title.clone(),
        ..good.clone()
    };
    let forged = [
        ("unsealed", unsealed, "FACTS_NOT_SEALED"),
        ("label source removed", rewritten(&good, |b| b.element.as_mut().unwrap().name.clear()), "FACTS_INVALID"),
        ("target changed", rewritten(&good, |b| b.element.as_mut().unwrap().nav_targets = vec![]), "FACTS_INVALID"),
        (
            "field kind changed",
            rewritten(&good, |b| b.element.as_mut().unwrap().field_kind = Some(pb::FieldKind::Text as i32)),
            "FACTS_INVALID",
        ),
        ("page changed", rewritten(&good, |b| b.page_url = format!("{LESSON_ORIGIN}/lesson/safe")), "FACTS_INVALID"),
        // "Other"'s facts, sealed for its own ref, sent for "Next".
        (
            "another node's",
            pb::AuthorizeRequest { facts: Some(sealed(&o, "Other").clone()), ..good.clone() },
            "FACTS_INVALID",
        ),
    ];
    let count = forged.len() as u64;
    for (case, req, reason) in forged {
        let err = s.authorizer.authorize(with(WORKER, req)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied, "{case}: {err:?}");
        let info = tonic_types::StatusExt::get_error_details(&err).error_info().map(|i| i.reason.clone());
        assert_eq!(info.as_deref(), Some(reason), "{case}: {err:?}");
    }
    assert_eq!(s.authorizer_service.facts_refused(), refused_before + count, "each refusal is counted");

    // Read in another browser profile's session (the same owner's): not this chat's page.
    let (their_next, _) = node(&theirs, "Next");
    let other_profile = pb::AuthorizeRequest {
        snapshot_id: theirs.snapshot_id.clone(),
        node_ref: their_next.r#ref.clone(),
        facts: Some(sealed(&theirs, "Next").clone()),
        ..good.clone()
    };
    let decided = s.authorizer.authorize(with(WORKER, other_profile)).await.unwrap().into_inner().decision;
    assert!(
        matches!(&decided, Some(pb::authorize_reply::Decision::Deny(d)) if d.code == "facts_not_this_session"),
        "{decided:?}"
    );
    let pending = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: true, min_position: None };
    let cards = s.authorizer.list_approvals(with(GATEWAY, pending)).await.unwrap().into_inner().approvals;
    assert!(cards.is_empty(), "no refused call asked a card: {cards:?}");

    // The same call, sealed and whole, asks.
    let asked = s.authorizer.authorize(with(WORKER, good)).await.unwrap().into_inner().decision;
    assert!(matches!(asked, Some(pb::authorize_reply::Decision::RequireApproval(_))), "{asked:?}");
}

/// The owner allows a type for this task through the authorizer; an act under the grant is
/// allowed with a ticket and dispatched with no card. A ticket given before the owner's Stop is
/// not dispatched after the Stop is answered, nor once the owner writes again.
#[tokio::test]
async fn a_ticket_given_before_a_stop_is_not_dispatched_after_it() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "el gato")]);
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    s.chat("s1", "profile-1").await;
    let o = s.observe_run(&session, "run-1").await;
    let type_answer = pb::Action { kind: pb::ActionKind::Type as i32, field_id: "answer".into(), ..Default::default() };
    let typed = |o: &rt::ObserveReply, call: &str| pb::AuthorizeRequest {
        text: Some(record_text(o, "answer").clone()),
        ..authorize(o, call, "Answer", type_answer.clone())
    };
    // The first asks; the owner allows it for this task.
    let asked = s.authorizer.authorize(with(WORKER, typed(&o, "call-1"))).await;
    let Some(pb::authorize_reply::Decision::RequireApproval(card)) = asked.unwrap().into_inner().decision else {
        panic!("the first act asks")
    };
    let offer = card.offer.expect("an offer for the task");
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id,
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin,
        offered_path_prefix: offer.path_prefix,
    };
    s.authorizer.resolve_approval(with(GATEWAY, resolve)).await.unwrap();

    // Under the grant: a ticket, dispatched with no card.
    let allowed = |decided: Option<pb::authorize_reply::Decision>| match decided {
        Some(pb::authorize_reply::Decision::Allow(allow)) => allow,
        other => panic!("covered by the grant: {other:?}"),
    };
    let allow = allowed(s.authorizer.authorize(with(WORKER, typed(&o, "call-2"))).await.unwrap().into_inner().decision);
    assert_eq!(allow.kind, "browser_task_grant");
    let ticket = allow.ticket.expect("every allow on a snapshot carries its ticket");
    let body = s.keys.open("tenant-1", &ticket).expect("sealed for the tenant");
    assert_eq!(
        (body.browser_profile_id.as_str(), body.run_id.as_str(), body.use_ordinal),
        ("profile-1", "run-1", allow.use_ordinal)
    );
    assert_eq!(body.constraint.as_ref().map(|c| c.path_prefix.as_str()), Some("/lesson"));
    let type_with = |o: &rt::ObserveReply, ticket: pb::DispatchTicket| {
        let mut act = click(&session, o, node(o, "Answer").0);
        act.expected_role = rt::Role::Textbox as i32;
        act.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "answer".into() }));
        act.ticket = Some(ticket);
        act
    };
    let reply = s.act(type_with(&o, ticket)).await.unwrap();
    assert!(reply.ok && reply.dispatched, "{reply:?}");

    // The next act's ticket, then the owner's Stop.
    let o = s.observe_run(&session, "run-1").await;
    assert!(node(&o, "Answer").0.state.as_ref().is_some_and(|st| st.filled), "the record value was typed");
    let ticket =
        allowed(s.authorizer.authorize(with(WORKER, typed(&o, "call-3"))).await.unwrap().into_inner().decision)
            .ticket
            .expect("a ticket");
    s.authorizer.stop_session(with(GATEWAY, pb::StopSessionRequest { session_id: "s1".into() })).await.unwrap();
    let before = s.fixture.requests().len();
    let refused = s.act(type_with(&o, ticket.clone())).await.unwrap();
    assert_eq!(rt::ActCode::try_from(refused.code), Ok(rt::ActCode::ApprovalRequired), "{refused:?}");
    assert!(!refused.dispatched && refused.recoverable, "{refused:?}");
    // Authorized again, the act is denied: the run ends there.
    let again = s.authorizer.authorize(with(WORKER, typed(&o, "call-4"))).await.unwrap().into_inner().decision;
    assert!(
        matches!(&again, Some(pb::authorize_reply::Decision::Deny(d)) if d.code == proto::DENY_SESSION_STOPPED),
        "{again:?}"
    );
    // The owner writes again: the Stop is lifted, but a ticket from before it stays void.
    s.owner_says("s1").await;
    let refused = s.act(type_with(&o, ticket)).await.unwrap();
    assert_eq!(rt::ActCode::try_from(refused.code), Ok(rt::ActCode::ApprovalRequired), "{refused:?}");
    assert_eq!(s.fixture.requests().len(), before, "a request reached the site");
}

/// A type is decided on the record value the runtime sealed, not on the worker's word: the card
/// shows that value (a secret's redacted, and never given to the worker), a text sent in the
/// clear or another field's sealed text is refused and writes nothing.
#[tokio::test]
async fn a_type_is_decided_on_the_record_value_the_runtime_sealed() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "el gato"), ("key", "sk-live-0123456789abcdefXYZ")]);
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    s.chat("s1", "profile-1").await;
    let o = s.observe_run(&session, "run-1").await;
    let opened = |field: &str| s.keys.open_text("tenant-1", record_text(&o, field)).expect("sealed for the tenant");
    let answer = opened("answer");
    assert_eq!((answer.text.as_str(), answer.chars, answer.credential_shaped), ("el gato", 7, false));
    let key = opened("key");
    assert!(key.credential_shaped && key.text.is_empty(), "a secret's value never reaches the worker: {key:?}");
    assert_eq!(key.chars, 27);
    // Another owner's run of the tenant: a session reads only its own owner's records.
    let theirs = s.records.join("tenant-1").join("someone-else");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(theirs.join("run-9.json"), r#"{"answer": "their secret plan"}"#).unwrap();
    let other = s.observe_run(&session, "run-9").await;
    assert!(other.texts.is_empty(), "another owner's record was read: {:?}", other.texts);

    let typing =
        |field: &str| pb::Action { kind: pb::ActionKind::Type as i32, field_id: field.into(), ..Default::default() };
    let card_of = |decided: Option<pb::authorize_reply::Decision>| match decided {
        Some(pb::authorize_reply::Decision::RequireApproval(card)) => card,
        other => panic!("asks: {other:?}"),
    };
    // In the clear, as a worker would claim it: refused.
    let clear = pb::AuthorizeRequest {
        action: Some(pb::Action { text: "el gato".into(), ..typing("answer") }),
        ..authorize(&o, "call-1", "Answer", typing("answer"))
    };
    let err = s.authorizer.authorize(with(WORKER, clear)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    // Another field's sealed value for this field: refused.
    let swapped = pb::AuthorizeRequest {
        text: Some(record_text(&o, "key").clone()),
        ..authorize(&o, "call-2", "Answer", typing("answer"))
    };
    let err = s.authorizer.authorize(with(WORKER, swapped)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    let pending = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: true, min_position: None };
    assert!(
        s.authorizer.list_approvals(with(GATEWAY, pending.clone())).await.unwrap().into_inner().approvals.is_empty()
    );

    // Sealed: the card shows the record's value, and a secret's redacted.
    let shown = pb::AuthorizeRequest {
        text: Some(record_text(&o, "answer").clone()),
        ..authorize(&o, "call-3", "Answer", typing("answer"))
    };
    let card = card_of(s.authorizer.authorize(with(WORKER, shown)).await.unwrap().into_inner().decision);
    assert_eq!(card.view.as_ref().map(|v| v.detail.as_str()), Some("el gato"));
    let secret = pb::AuthorizeRequest {
        text: Some(record_text(&o, "key").clone()),
        ..authorize(&o, "call-4", "Answer", typing("key"))
    };
    let card = card_of(s.authorizer.authorize(with(WORKER, secret)).await.unwrap().into_inner().decision);
    let view = card.view.expect("a view");
    assert_eq!(view.detail, "[REDACTED]", "{view:?}");
    assert!(!format!("{view:?}").contains("sk-"), "nothing of the stand-in shows: {view:?}");
}

/// A page past a grant's limits: a select of 4,097 options, one whose 65 options share a label,
/// and a download link.
fn limits_page() -> String {
    let many: String = (0..=classifier::coverage::MAX_OPTIONS)
        .map(|i| format!("<option value=\"v{i}\">Option {i}</option>"))
        .collect();
    let twins: String =
        (0..=classifier::coverage::MAX_CHOOSABLE).map(|i| format!("<option value=\"t{i}\">Same</option>")).collect();
    format!(
        r#"<!doctype html><title>Limits</title>
<label>Many <select name="many">{many}</select></label>
<label>Twins <select name="twins" multiple>{twins}</select></label>
<a href="/lesson/notes.txt" download>Get the notes</a> <a href="/lesson/2">Next</a>"#
    )
}

/// A change that breaks a constraint.
type Breaks = fn(&mut pb::DispatchConstraint);

/// Refused under the grant with `reason`, nothing dispatched and nothing reaching the site.
async fn not_applicable(s: &mut Stack, act: rt::ActRequest, reason: &str) {
    let before = s.fixture.requests().len();
    let reply = s.act(act).await.unwrap();
    assert_eq!(rt::ActCode::try_from(reply.code), Ok(rt::ActCode::GrantNotApplicable), "{reason}: {reply:?}");
    assert_eq!(reply.reason, reason, "{reply:?}");
    assert!(!reply.dispatched, "{reason}: {reply:?}");
    assert_eq!(s.fixture.requests().len(), before, "{reason}: a request reached the site");
}

/// A grant's constraint inside a sealed ticket is checked by the runtime on its own: one that has
/// ended, one that names another site, and one that is malformed carry no act; nor does a grant
/// carry a select past its option limits or a download, whatever the ticket says.
#[tokio::test]
async fn a_grant_constraint_that_ended_names_another_site_or_is_malformed_carries_nothing() {
    let mut s = stack().await;
    s.fixture.page(LESSON, "/lesson/limits", &limits_page());
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let rfc3339 = &time::format_description::well_known::Rfc3339;

    // The grant ended a second ago, though its ticket is still within its minute.
    let o = s.observe(&session).await;
    let mut ended = click(&session, &o, node(&o, "Next").0);
    let mut c = task_constraint();
    c.not_after = (time::OffsetDateTime::now_utc() - time::Duration::seconds(1)).format(rfc3339).unwrap();
    s.grant(&mut ended, c);
    not_applicable(&mut s, ended, "constraint_expired").await;

    // A constraint for another site: the page is outside it.
    let o = s.observe(&session).await;
    let mut foreign = click(&session, &o, node(&o, "Next").0);
    s.grant(
        &mut foreign,
        pb::DispatchConstraint { origins: vec!["https://www.elsewhere.test".into()], ..task_constraint() },
    );
    not_applicable(&mut s, foreign, "page_outside_scope").await;

    // Malformed: each is a ticket that does not fit, terminal.
    let malformed: [(&str, Breaks); 5] = [
        ("an end that is not a time", |c| c.not_after = "tomorrow".into()),
        ("no grant kind", |c| c.grant_kind = pb::GrantKind::Unspecified as i32),
        ("a standing constraint on a task grant", |c| c.grant_kind = pb::GrantKind::Standing as i32),
        ("an origin that is not one", |c| c.origins = vec!["www.lesson.test/lesson".into()]),
        ("an unknown ceiling", |c| c.consequence_ceiling = "anything".into()),
    ];
    for (case, break_it) in malformed {
        let o = s.observe(&session).await;
        let mut act = click(&session, &o, node(&o, "Next").0);
        let mut c = task_constraint();
        break_it(&mut c);
        s.grant(&mut act, c);
        refused_as_invalid(&mut s, act, case).await;
    }

    // The limits no grant passes: too many options, a choice that could pick too many, a
    // download. The runtime reads them on the live page.
    let session = {
        let close = rt::CloseSessionRequest { session_id: session };
        s.runtime.close_session(with(WORKER, close)).await.unwrap();
        s.open("profile-1", "/lesson/limits", 50).await.unwrap()
    };
    let select = |o: &rt::ObserveReply, name: &str, option: &str| {
        let mut act = click(&session, o, node(o, name).0);
        act.action = Some(rt::act_request::Action::Select(rt::Select { option: option.into() }));
        act
    };
    let o = s.observe(&session).await;
    let mut many = select(&o, "Many", "Option 7");
    s.grant(&mut many, task_constraint());
    not_applicable(&mut s, many, "too_many_options").await;
    let o = s.observe(&session).await;
    let mut twins = select(&o, "Twins", "Same");
    s.grant(&mut twins, task_constraint());
    not_applicable(&mut s, twins, "too_many_choices").await;
    let o = s.observe(&session).await;
    let mut download = click(&session, &o, node(&o, "Get the notes").0);
    s.grant(&mut download, task_constraint());
    not_applicable(&mut s, download, "download").await;
}

/// The runtime's link to the authorizer fails under an act: refused, cut or too slow, the act is
/// refused UNAVAILABLE with nothing dispatched and its ticket unspent; retried over a sound link,
/// the same act is dispatched once.
#[tokio::test]
async fn a_failing_link_to_the_authorizer_dispatches_nothing_and_a_retry_acts_once() {
    use tests::fault::Fault;
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let o = s.observe(&session).await;
    let next = click(&session, &o, node(&o, "Next").0);
    let next = rt::ActRequest { ticket: Some(s.ticket(&next, None)), ..next };
    let reached = |s: &Stack| s.fixture.requests().iter().filter(|r| r.path() == "/lesson/2").count();
    for (fault, case) in [
        (Fault::Refuse, "new connections refused"),
        // A round trip past the dispatch window: the Stop it read may be stale by the input.
        (Fault::Delay(proto::DISPATCH_WINDOW / 2 + std::time::Duration::from_millis(50)), "too slow"),
    ] {
        s.link.set(fault);
        s.link.cut();
        let refused = s.act(next.clone()).await.expect_err(case);
        assert_eq!(refused.code(), tonic::Code::Unavailable, "{case}: {refused:?}");
        assert_eq!(reached(&s), 0, "{case}: the act reached the site");
    }
    s.link.set(Fault::None);
    let reply = s.act(next.clone()).await.unwrap();
    assert!(reply.ok && reply.dispatched, "{reply:?}");
    // Sent again, the same act is a replay: nothing more reaches the site.
    let again = s.act(next).await;
    assert!(again.as_ref().is_ok_and(|r| !r.dispatched) || again.is_err(), "{again:?}");
    let o = s.observe(&session).await;
    assert!(o.url.ends_with("/lesson/2"), "{}", o.url);
    assert_eq!(reached(&s), 1, "the act reached the site once");
}
