//! The browser runtime in real Chromium (Debian's chromium and chromium-driver) against the
//! fixture HTTPS lesson site: every code of the tool contract reached by a page built for it,
//! the re-check under a task grant's constraint, typing from the task record, approval tokens
//! redeemed through the authorizer, a crashed browser, the pool, and who may call. Every
//! refusal is also checked in the fixture's request log: nothing reached the site.

use classifier::{Action, Grant, PageFacts, TaskScope};
use proto::runtime as rt;
use proto::v1 as pb;
use tests::browser::{
    ELSEWHERE, GATEWAY, LESSON, LESSON_ORIGIN, RUNTIME, STRANGER, Stack, WORKER, click, node, standing_constraint,
    task_constraint, with,
};
use tonic::Code;

const LESSON_1: &str = r#"<!doctype html><html><head><title>Lesson 1</title></head><body>
<h1>Translate: the cat</h1>
<a href="/lesson/2">Next question</a>
<form action="/lesson/pay" method="post"><button>Pay now</button></form>
<a href="https://www.elsewhere.test/win">Claim prize</a>
<button id="away" onclick="history.pushState({}, '', '/account/settings')">Go on</button>
<button id="hidden">Continue<span style="display:none"> and delete everything</span></button>
<button disabled>Skip</button>
</body></html>"#;

const LESSON_2: &str = "<!doctype html><title>Lesson 2</title><p>Question 2</p><a href=\"/lesson/3\">Next</a>";

/// Renames its button when the test says so (see [`page_changes`]): between observe and act.
const RENAME: &str = r#"<!doctype html><title>Rename</title>
<button id="go" onclick="location.href='/lesson/2'">Continue</button>
<script>
const poll = setInterval(async () => {
  if (!(await fetch('/lesson/go-rename')).ok) return;
  clearInterval(poll);
  document.getElementById('go').textContent = 'Delete account';
  fetch('/lesson/rename-done');
}, 50);
</script>"#;

/// Controls whose way out of the origin is easy to miss.
const TRICKS: &str = r#"<!doctype html><title>Tricks</title>
<form action="/lesson/answer" method="post">
<input name="q" value="1">
<button type="bogus" formaction="https://www.elsewhere.test/steal">Send on</button>
</form>
<form action="/lesson/answer" method="post">
<label>Word <input name="word"></label>
<button formaction="https://www.elsewhere.test/steal">Check</button>
</form>
<form action="/lesson/answer" method="post">
<input name="elements" value="e"><input name="action" value="a"><label>Gloss <input name="gloss"></label>
<button>Done</button>
</form>
<a id="moving" href="/lesson/2">Moving on</a>
<script>
const poll = setInterval(async () => {
  if (!(await fetch('/lesson/go-move')).ok) return;
  clearInterval(poll);
  document.getElementById('moving').href = '/lesson/3';
  fetch('/lesson/move-done');
}, 50);
</script>"#;

/// Controls whose way off the prefix no fact shows: script, a closed shadow root, a new window.
const HOSTILE: &str = r#"<!doctype html><title>Hostile</title>
<button onclick="location.href='/account/settings'">Next word</button>
<button onclick="location.href='https://www.elsewhere.test/win'">Hint</button>
<button onclick="window.open('https://www.elsewhere.test/win')">Dictionary</button>
<button onclick="const m = document.createElement('meta'); m.httpEquiv = 'refresh'; m.content = '0; url=/account/x'; document.head.append(m)">Refresh</button>
<div id="host" role="button" aria-label="Listen"></div>
<script>
const root = document.getElementById('host').attachShadow({ mode: 'closed' });
root.innerHTML = '<a href="/account/delete" style="display:block;height:40px">Listen</a>';
</script>"#;

/// Named controls that shadow a form's own properties, and a page with no title or label text.
const CLOBBER: &str = r#"<!doctype html><title></title>
<dialog open aria-label="Delete everything?">
<form action="/lesson/answer"><input type="hidden" name="nodeType"><input type="hidden" name="localName"><button>Yes</button></form>
</dialog>
<div role="button" aria-label="Next"><form action="https://www.elsewhere.test/x"><input type="hidden" name="shadowRoot"><input type="hidden" name="childNodes"><button>Pay $12.99</button></form></div>
<input id="c" type="checkbox"><label for="c"></label>
<select aria-label="Answer"><option>uno</option><option>dos</option></select>
"#;

/// Controls whose targets or labels hide in the corners the record lists.
const CORNERS: &str = r##"<!doctype html><title>Corners</title>
<svg width="200" height="30"><a href="https://www.elsewhere.test/svg"><text x="5" y="20">Svg link</text></a></svg>
<svg width="200" height="30"><a href="/lesson/2"><set attributeName="href" to="https://www.elsewhere.test/anim" begin="0s"/><text x="5" y="20">Animated link</text></a></svg>
<svg style="display:none"><symbol id="icon"><rect width="10" height="10"/></symbol></svg>
<button>Play<svg width="12" height="12"><use href="#icon"/></svg></button>
<map name="m"><area shape="rect" coords="0,0,10,10" href="https://www.elsewhere.test/map" alt="Zone"></map>
<button>Map<img usemap="#m" width="10" height="10" alt=""></button>
<div role="button" aria-label="Framed" style="height:40px"><iframe srcdoc="<a href='https://www.elsewhere.test/f'>go</a>" width="100" height="30"></iframe></div>
<form action="/lesson/answer"><input type="image" alt="Send" formaction="https://www.elsewhere.test/img" width="20" height="20"></form>
<button>P&#x200B;ay now</button>
<button>&#x420;ay now</button>
<select aria-label="Reward"><option value="a">Next</option><option label="Continue" value="buy">Buy gems</option></select>
"##;

const FORM: &str = r#"<!doctype html><title>Answer</title>
<form action="/lesson/answer" method="post">
<label>Your answer <input name="answer"></label>
<input type="hidden" name="attempt" value="1">
<label>Level <input name="level" value="3"></label>
<button>Check</button>
</form>"#;

/// Each control here is refused by the worker and by the runtime for the same rule.
const AGREE: &str = r#"<!doctype html><title>Agree</title>
<button disabled>Next</button>
<div contenteditable="true" role="textbox" aria-label="Notes"></div>
<button>Choose</button>
<div role="checkbox" aria-checked="false" tabindex="0">Cat tile</div>
<button aria-label="Continue">Continue $</button>
<a href="/lesson/3">Onward</a>
"#;

async fn stack() -> Stack {
    let stack = Stack::start(2).await;
    for (path, html) in [
        ("/lesson/1", LESSON_1),
        ("/lesson/2", LESSON_2),
        ("/lesson/3", LESSON_2),
        ("/lesson/rename", RENAME),
        ("/lesson/form", FORM),
        ("/lesson/same", AGREE),
        ("/lesson/tricks", TRICKS),
        ("/lesson/hostile", HOSTILE),
        ("/lesson/clobber", CLOBBER),
        ("/lesson/corners", CORNERS),
        ("/lesson/pay", "<!doctype html><title>Paid</title><p>Paid"),
        ("/lesson/answer", "<!doctype html><title>Checked</title><p>Checked"),
    ] {
        stack.fixture.page(LESSON, path, html);
    }
    stack.fixture.page(ELSEWHERE, "/win", "<!doctype html><title>Prize</title>");
    stack
}

/// Document requests the site has seen, as `METHOD path`.
fn documents(stack: &Stack) -> Vec<String> {
    stack
        .fixture
        .requests()
        .iter()
        .filter(|r| r.dest == "document")
        .map(|r| format!("{} {}{}", r.method, r.host, r.path()))
        .collect()
}

/// Tells a page to make its change now (it polls `/lesson/go-<what>`), and waits until it says it
/// has (`/lesson/<what>-done`).
async fn page_changes(s: &Stack, what: &str) {
    s.fixture.page(LESSON, &format!("/lesson/go-{what}"), "go");
    let done = format!("/lesson/{what}-done");
    let (ten, beat) = (std::time::Duration::from_secs(10), std::time::Duration::from_millis(20));
    tests::poll_until("the page's own change", ten, beat, || async {
        s.fixture.requests().iter().any(|r| r.path() == done).then_some(())
    })
    .await;
}

fn refused(reply: &rt::ActReply, code: rt::ActCode) {
    assert!(!reply.ok, "{reply:?}");
    assert_eq!(rt::ActCode::try_from(reply.code), Ok(code), "{reply:?}");
    assert!(!reply.dispatched, "{reply:?}");
}

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
    s.grant(&mut submit, task_constraint());
    submit.wait_for = rt::WaitFor::Navigation as i32;
    assert!(s.act(submit).await.unwrap().ok);
    let posted: Vec<_> = s.fixture.requests().into_iter().filter(|r| r.method == "POST").collect();
    assert_eq!(posted.len(), 1, "{posted:?}");
    assert_eq!(posted[0].body, "answer=el+gato&attempt=1&level=3");
}

/// The owner's approval of a click on `name` in snapshot `o`, asked and resolved through the
/// authorizer as the worker and the gateway would: its single-use token.
async fn approve_once(s: &mut Stack, session: &str, o: &rt::ObserveReply, name: &str) -> String {
    let created = pb::ProfileEventRequest {
        profile_id: "profile-1".into(),
        event: pb::ProfileEvent::Created as i32,
        owner_principal_id: "owner".into(),
    };
    s.authorizer.record_profile_event(with(tests::browser::PROFILES, created)).await.unwrap();
    let create = pb::CreateSessionRequest {
        session_id: "s1".into(),
        browser_profile_id: "profile-1".into(),
        schedule_id: String::new(),
        surface: pb::Surface::Interactive as i32,
    };
    s.authorizer.create_session(with(WORKER, create)).await.unwrap();
    let said = pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m1".into(), from_owner: true };
    s.authorizer.record_message(with(GATEWAY, said)).await.unwrap();
    let (n, _) = node(o, name);
    let authorize = pb::AuthorizeRequest {
        session_id: "s1".into(),
        run: Some(pb::RunContext { run_id: "run-1".into(), interactive: true, top_level: true }),
        tool_call_id: "call-1".into(),
        turn_tool_calls: vec!["browser.observe".into(), "browser.act".into()],
        agent_version: "agent-7".into(),
        action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
        snapshot_id: o.snapshot_id.clone(),
        node_ref: n.r#ref.clone(),
        facts: Some(tests::browser::sealed(o, name).clone()),
        // A click that could submit a form is asked with the form read back, as the harness does.
        form: s.read_form(session, o, name, "run-1").await.sealed,
        ..Default::default()
    };
    let decided = s.authorizer.authorize(with(WORKER, authorize)).await.unwrap().into_inner();
    let Some(pb::authorize_reply::Decision::RequireApproval(ask)) = decided.decision else {
        panic!("{name} asks: {decided:?}")
    };
    let resolve = pb::ResolveApprovalRequest {
        approval_id: ask.approval_id,
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    let token = s.authorizer.resolve_approval(with(GATEWAY, resolve)).await.unwrap().into_inner().approval_token;
    assert!(token.starts_with("apv_"), "{token}");
    token
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
async fn sessions_are_the_callers_own_and_the_pool_has_a_limit() {
    let mut s = stack().await;
    let a = s.open("profile-a", "/lesson/1", 50).await.unwrap();
    let again = s.open("profile-a", "/lesson/1", 50).await.unwrap_err();
    assert_eq!(again.code(), Code::AlreadyExists, "one Chromium per profile");
    let b = s.open("profile-b", "/lesson/1", 50).await.unwrap();
    let full = s.open("profile-c", "/lesson/1", 50).await.unwrap_err();
    assert_eq!(full.code(), Code::ResourceExhausted);
    assert!(full.message().contains("pool is full"), "{full:?}");

    // Another tenant's worker cannot see the session; no credential is no call.
    let err = s
        .runtime
        .observe(with(STRANGER, rt::ObserveRequest { session_id: a.clone(), run_id: String::new() }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = s
        .runtime
        .observe(tonic::Request::new(rt::ObserveRequest { session_id: a.clone(), run_id: String::new() }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);

    // A start page off the allowed origins is refused before any browser starts.
    let off = rt::OpenSessionRequest {
        browser_profile_id: "profile-d".into(),
        allowed_origins: vec![LESSON_ORIGIN.into()],
        start_url: "https://www.elsewhere.test/win".into(),
        max_steps: 5,
    };
    assert_eq!(s.runtime.open_session(with(WORKER, off)).await.unwrap_err().code(), Code::InvalidArgument);

    s.runtime.close_session(with(WORKER, rt::CloseSessionRequest { session_id: b })).await.unwrap();
    s.open("profile-c", "/lesson/1", 50).await.unwrap();
}

/// The live (not zombie) processes of process group `pgid`.
fn group(pgid: u32) -> Vec<u32> {
    let entries = std::fs::read_dir("/proc").map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default();
    entries
        .iter()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
            let state = fields.next()?;
            let pgrp = fields.nth(1)?;
            (state != "Z" && pgrp == pgid.to_string()).then_some(pid)
        })
        .collect()
}

/// The pids of `parent`'s children, forked by any of its threads.
fn children(parent: u32) -> Vec<u32> {
    let tasks =
        std::fs::read_dir(format!("/proc/{parent}/task")).map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default();
    tasks
        .iter()
        .flat_map(|t| {
            std::fs::read_to_string(t.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

#[tokio::test]
async fn a_crashed_browser_is_reported_and_restarts_clean() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let o = s.observe(&session).await;
    let reply = s.act(click(&session, &o, node(&o, "Next question").0)).await.unwrap();
    assert!(reply.ok);
    let driver = s.driver_pid(&session).await;
    let browsers = children(driver);
    assert!(!browsers.is_empty(), "chromedriver started Chromium");
    // Kill the Chromium this test's runtime started, by pid.
    for pid in &browsers {
        let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    let err = s
        .runtime
        .observe(with(WORKER, rt::ObserveRequest { session_id: session.clone(), run_id: String::new() }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("restarted with a clean profile"), "{err:?}");

    // The session goes on in a new browser, at the start page.
    let o = s.observe(&session).await;
    assert_eq!(o.url, format!("{LESSON_ORIGIN}/lesson/1"));
    assert_ne!(s.driver_pid(&session).await, driver);
    let reply = s.act(click(&session, &o, node(&o, "Next question").0)).await.unwrap();
    assert!(reply.ok, "{reply:?}");
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
async fn hidden_ways_off_the_origin_are_refused() {
    let mut s = stack().await;
    s.record("run-1", &[("word", "gato")]);
    let session = s.open("profile-1", "/lesson/tricks", 50).await.unwrap();
    // A button whose unknown type makes it a submit, with a formaction elsewhere.
    let o = s.observe(&session).await;
    let (send, facts) = node(&o, "Send on");
    assert!(facts.nav_targets.iter().any(|t| t.starts_with("https://www.elsewhere.test/")), "{facts:?}");
    refused(&s.act(click(&session, &o, send)).await.unwrap(), rt::ActCode::OffOriginTarget);

    // Enter in a field submits through the form's default button and its formaction.
    let o = s.observe(&session).await;
    let (word, _) = node(&o, "Word");
    let mut enter = click(&session, &o, word);
    enter.expected_role = rt::Role::Textbox as i32;
    enter.action = Some(rt::act_request::Action::Press(rt::Press { key: "Enter".into() }));
    refused(&s.act(enter).await.unwrap(), rt::ActCode::OffOriginTarget);

    // Typing is not a navigation: the record's value goes in.
    let o = s.observe(&session).await;
    let mut typed = click(&session, &o, node(&o, "Word").0);
    typed.expected_role = rt::Role::Textbox as i32;
    typed.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "word".into() }));
    assert!(s.act(typed).await.unwrap().ok);

    // A letter pressed one at a time would spell literal text: no key but a named one exists.
    let o = s.observe(&session).await;
    let mut key = click(&session, &o, node(&o, "Gloss").0);
    key.expected_role = rt::Role::Textbox as i32;
    key.action = Some(rt::act_request::Action::Press(rt::Press { key: "x".into() }));
    assert_eq!(s.act(key).await.unwrap_err().code(), Code::InvalidArgument);
    assert!(s.fixture.requests().iter().all(|r| r.host != ELSEWHERE), "{:?}", s.fixture.requests());

    // Fields named like the form's own properties do not hide the others from the read-back.
    let o = s.observe(&session).await;
    let form = s.read_form(&session, &o, "Done", "").await;
    let fields: Vec<_> = form.fields.iter().map(|f| (f.name.as_str(), f.value.as_str())).collect();
    assert_eq!(fields, [("elements", "e"), ("action", "a"), ("gloss", "")], "nothing was typed into Gloss");
}

#[tokio::test]
async fn a_screenshot_is_a_png_and_shutdown_ends_every_browser() {
    let mut s = stack().await;
    let a = s.open("profile-a", "/lesson/1", 50).await.unwrap();
    let b = s.open("profile-b", "/lesson/2", 50).await.unwrap();
    let png = s.runtime.screenshot(with(WORKER, rt::ScreenshotRequest { session_id: a.clone() })).await.unwrap();
    assert!(png.into_inner().png.starts_with(b"\x89PNG\r\n\x1a\n"));
    let drivers = [s.driver_pid(&a).await, s.driver_pid(&b).await];
    let started: Vec<u32> = drivers.iter().flat_map(|d| group(*d)).collect();
    assert!(started.len() > drivers.len(), "Chromium and its helpers run in the drivers' groups: {started:?}");
    s.shutdown_runtime().await;
    // Every process the runtime started, Chromium's helpers too, is gone (or a zombie whose
    // parent has not reaped it yet). The group was sent SIGKILL, which returns before the kernel
    // has torn every process down (a clean-clone CI run caught one still exiting), so the test
    // waits for it, bounded.
    let (five, beat) = (std::time::Duration::from_secs(5), std::time::Duration::from_millis(20));
    tests::poll_until("every driver's process group gone", five, beat, || async {
        drivers.iter().all(|d| group(*d).is_empty()).then_some(())
    })
    .await;
}

/// Under a task grant, the fence holds every document request to the grant's prefix, whatever
/// set it off: script, a link in a closed shadow root, a refresh, a new window.
#[tokio::test]
async fn the_fence_holds_documents_the_facts_could_not_show() {
    let mut s = stack().await;
    s.fixture.page(LESSON, "/account/settings", "<!doctype html><title>Settings</title>");
    s.fixture.page(LESSON, "/account/x", "<!doctype html><title>X</title>");
    s.fixture.page(LESSON, "/account/delete", "<!doctype html><title>Deleted</title>");
    for name in ["Next word", "Hint", "Dictionary", "Refresh", "Listen"] {
        // A session each: a refused document leaves the browser's error page behind.
        let session = s.open("profile-1", "/lesson/hostile", 50).await.unwrap();
        let o = s.observe(&session).await;
        let (n, facts) = node(&o, name);
        assert!(facts.nav_targets.is_empty(), "{name}: the facts cannot see where it goes: {facts:?}");
        let mut act = click(&session, &o, n);
        s.grant(&mut act, task_constraint());
        let reply = s.act(act).await.unwrap();
        assert!(reply.dispatched && reply.outcome_unknown, "{name}: {reply:?}");
        assert!(reply.detail.contains("fence refused"), "{name}: {reply:?}");
        let outside: Vec<_> = s
            .fixture
            .requests()
            .into_iter()
            .filter(|r| r.host == ELSEWHERE || r.path().starts_with("/account"))
            .collect();
        assert!(outside.is_empty(), "{name} reached {outside:?}");
        s.runtime.close_session(with(WORKER, rt::CloseSessionRequest { session_id: session })).await.unwrap();
    }
    let session = s.open("profile-1", "/lesson/hostile", 50).await.unwrap();
    // An act the owner approved is fenced to the run's origins only: the same control goes
    // where it goes.
    let o = s.observe(&session).await;
    let reply = s.act(click(&session, &o, node(&o, "Next word").0)).await.unwrap();
    assert!(reply.ok && !reply.outcome_unknown, "{reply:?}");
    assert!(documents(&s).contains(&format!("GET {LESSON}/account/settings")));
}

#[tokio::test]
async fn markup_that_shadows_form_properties_does_not_steer_the_read() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/clobber", 50).await.unwrap();
    // An empty title and an empty label are read, not refused.
    let o = s.observe(&session).await;
    assert_eq!(o.title, "");
    // The dialog around "Yes" is found though the form hides its nodeType and localName.
    let (yes, facts) = node(&o, "Yes");
    assert_eq!(facts.dialog_name, "Delete everything?");
    let mut act = click(&session, &o, yes);
    s.grant(&mut act, task_constraint());
    let reply = s.act(act).await.unwrap();
    refused(&reply, rt::ActCode::GrantNotApplicable);
    assert_eq!(reply.reason, "deletion", "{reply:?}");
    // The form inside "Next" is seen though it hides its childNodes and shadowRoot.
    let o = s.observe(&session).await;
    let (next, facts) = node(&o, "Next");
    assert!(facts.nav_targets.iter().any(|t| t.starts_with("https://www.elsewhere.test/")), "{facts:?}");
    refused(&s.act(click(&session, &o, next)).await.unwrap(), rt::ActCode::OffOriginTarget);

    // A select is chosen by the runtime's own reading of its options.
    let o = s.observe(&session).await;
    let (answer, _) = node(&o, "Answer");
    assert_eq!(answer.value, "uno");
    let mut pick = click(&session, &o, answer);
    pick.expected_role = rt::Role::Combobox as i32;
    pick.action = Some(rt::act_request::Action::Select(rt::Select { option: "dos".into() }));
    s.grant(&mut pick, task_constraint());
    assert!(s.act(pick).await.unwrap().ok);
    let o = s.observe(&session).await;
    assert_eq!(node(&o, "Answer").0.value, "dos");
    assert!(s.fixture.requests().iter().all(|r| r.host != ELSEWHERE));
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

/// `<input name=parentNode>` in a form sends chromedriver's own element serialization into an
/// endless loop, so a page can hang the renderer: the call is bounded, and the browser restarts.
#[tokio::test]
async fn a_page_that_hangs_the_browser_gets_it_restarted() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/hang",
        "<!doctype html><title>Hang</title><form><input type=hidden name=parentNode><button>Stuck</button></form>",
    );
    let session = s.open("profile-1", "/lesson/hang", 50).await.unwrap();
    let o = s.observe(&session).await;
    let err = s.act(click(&session, &o, node(&o, "Stuck").0)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("stopped answering"), "{err:?}");
    let o = s.observe(&session).await;
    assert_eq!(o.url, format!("{LESSON_ORIGIN}/lesson/hang"), "restarted at the start page");
}

/// The facts the record names: SVG links as written and as animated, `<use>`, image maps,
/// embedded documents and image inputs lead outside every origin the run may reach; an excluded
/// word behind a zero-width character or a lookalike letter still reads as what it is; and an
/// option's label is read beside its text.
#[tokio::test]
async fn the_corners_the_record_names_are_read() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/corners", 80).await.unwrap();
    for (name, role, want) in [
        ("Svg link", rt::Role::Link, rt::ActCode::OffOriginTarget),
        ("Animated link", rt::Role::Link, rt::ActCode::OffOriginTarget),
        ("Play", rt::Role::Button, rt::ActCode::OffOriginTarget),
        ("Map", rt::Role::Button, rt::ActCode::OffOriginTarget),
        ("Framed", rt::Role::Button, rt::ActCode::OffOriginTarget),
        ("Send", rt::Role::Button, rt::ActCode::OffOriginTarget),
        // Under the standing grant, which covers routine acts only: the runtime reads these as
        // a payment.
        ("P\u{200b}ay now", rt::Role::Button, rt::ActCode::GrantNotApplicable),
        ("\u{420}ay now", rt::Role::Button, rt::ActCode::GrantNotApplicable),
    ] {
        let o = s.observe(&session).await;
        let (n, facts) = node(&o, name);
        let mut act = click(&session, &o, n);
        act.expected_role = role as i32;
        s.grant(&mut act, standing_constraint());
        let reply = s.act(act).await.unwrap();
        assert_eq!(rt::ActCode::try_from(reply.code), Ok(want), "{name}: {reply:?} {facts:?}");
        assert!(!reply.dispatched, "{name}");
    }
    // Under a grant, choosing "Continue" chooses the option whose text is "Buy gems".
    let o = s.observe(&session).await;
    let mut pick = click(&session, &o, node(&o, "Reward").0);
    pick.expected_role = rt::Role::Combobox as i32;
    pick.action = Some(rt::act_request::Action::Select(rt::Select { option: "Continue".into() }));
    s.grant(&mut pick, task_constraint());
    let reply = s.act(pick).await.unwrap();
    refused(&reply, rt::ActCode::GrantNotApplicable);
    assert_eq!(reply.reason, "in_app_currency", "{reply:?}");
    assert!(s.fixture.requests().iter().all(|r| r.host != ELSEWHERE), "{:?}", s.fixture.requests());
}

#[tokio::test]
async fn a_key_that_would_submit_a_form_is_refused_whatever_allowed_it() {
    let mut s = stack().await;
    let session = s.open("profile-1", "/lesson/form", 50).await.unwrap();
    let press = |s: &Stack, o: &rt::ObserveReply, name: &str, role: rt::Role, key: &str| {
        let mut act = click(&session, o, node(o, name).0);
        act.expected_role = role as i32;
        act.action = Some(rt::act_request::Action::Press(rt::Press { key: key.into() }));
        s.grant(&mut act, task_constraint());
        act
    };
    // Enter in a field submits through the form's button, Enter or Space on the button submits:
    // either would send the form with no read-back of it, so each is refused.
    for (name, role, key) in [
        ("Your answer", rt::Role::Textbox, "Enter"),
        ("Check", rt::Role::Button, "Enter"),
        ("Check", rt::Role::Button, " "),
    ] {
        let o = s.observe(&session).await;
        let reply = s.act(press(&s, &o, name, role, key)).await.unwrap();
        refused(&reply, rt::ActCode::NodeNotInteractable);
        assert!(reply.detail.contains("submits the form"), "{reply:?}");
    }
    // A key that does not submit still goes in.
    let o = s.observe(&session).await;
    assert!(s.act(press(&s, &o, "Your answer", rt::Role::Textbox, "Tab")).await.unwrap().dispatched);
    assert!(!documents(&s).iter().any(|d| d.contains("/lesson/answer")), "{:?}", documents(&s));
}

/// Buttons whose keyboard activation would reach what their click reaches: a handler that
/// submits the form from a plain button, a link, a check box.
const ACTIVATES: &str = r#"<!doctype html><title>Words</title>
<form action="/lesson/sent" method="post"><input name="word" value="gato">
<button type="button" onclick="this.form.requestSubmit()">Next word</button></form>
<a href="/lesson/2">Hint</a>
<label><input type="checkbox" name="slow"> Slower audio</label>"#;

/// Enter or Space on anything that takes no text is that control's click, which is what reads a
/// form back before a submit: refused whatever allowed it, and recoverably, since the agent can
/// click instead.
#[tokio::test]
async fn an_activation_key_on_a_control_is_refused_and_the_agent_may_click_instead() {
    let mut s = stack().await;
    s.fixture.page(LESSON, "/lesson/words", ACTIVATES);
    let session = s.open("profile-1", "/lesson/words", 50).await.unwrap();
    for (name, key) in
        [("Next word", "Enter"), ("Next word", " "), ("Next word", "Space"), ("Hint", "Enter"), ("Slower audio", " ")]
    {
        let o = s.observe(&session).await;
        let mut act = click(&session, &o, node(&o, name).0);
        act.action = Some(rt::act_request::Action::Press(rt::Press { key: key.into() }));
        // Approved as a card would approve it: no grant's rule stands in front of the runtime's.
        act.ticket = Some(s.ticket(&act, None));
        let reply = s.act(act).await.unwrap();
        refused(&reply, rt::ActCode::NodeNotInteractable);
        assert!(reply.recoverable && reply.detail.contains("click it instead"), "{name} {key:?}: {reply:?}");
    }
    // A key that activates nothing still goes in.
    let o = s.observe(&session).await;
    let mut act = click(&session, &o, node(&o, "Next word").0);
    act.action = Some(rt::act_request::Action::Press(rt::Press { key: "Tab".into() }));
    act.ticket = Some(s.ticket(&act, None));
    assert!(s.act(act).await.unwrap().dispatched);
    let sent = documents(&s);
    assert!(!sent.iter().any(|d| d.contains("/lesson/sent") || d.contains("/lesson/2")), "{sent:?}");
}

/// The form a click could submit is found whatever wraps the node: a button of another form
/// around it, a form the parser's form pointer gave the button, a button in an open shadow root
/// it is slotted into, and a select whose option's click reaches the button around it. A node
/// inside one form whose click submits another could submit two, which no card shows as one.
#[tokio::test]
async fn the_form_a_click_could_submit_is_found_whatever_wraps_the_node() {
    let mut s = stack().await;
    let hidden = r#"<input type="hidden" name="amount" value="9999">"#;
    let pages = [
        (
            "around",
            format!(
                r#"<form id="f" action="/lesson/sent">{hidden}</form>
<button form="f" role="none"><span role="link">Continue</span></button>"#
            ),
            "Continue",
            1,
        ),
        (
            "pointer",
            format!(
                r#"<table><form action="/lesson/sent"><tr><td>{hidden}<button role="none"><span role="link">Continue</span></button></td></tr></form></table>"#
            ),
            "Continue",
            1,
        ),
        (
            "slotted",
            format!(
                r#"<div><template shadowrootmode="open"><form action="/lesson/sent">{hidden}<button role="none"><slot></slot></button></form></template><span role="link">Continue</span></div>"#
            ),
            "Continue",
            1,
        ),
        (
            "select",
            format!(
                r#"<form action="/lesson/sent">{hidden}<button><select aria-label="Level"><option>Easy</option><option>Hard</option></select></button></form>"#
            ),
            "Level",
            1,
        ),
        (
            "crossed",
            format!(
                r#"<form id="f" action="/lesson/sent">{hidden}</form>
<form id="g"><label>Note <input name="note" value="hello"></label><button form="f" role="none"><span role="link">Save note</span></button></form>"#
            ),
            "Save note",
            2,
        ),
        // The button the click presses sends its own name and value: the card shows them.
        (
            "named",
            r#"<form action="/lesson/sent"><input name="amount" value="10"><button name="amount" value="9999">Go</button></form>"#.into(),
            "Go",
            1,
        ),
    ];
    for (page, html, name, forms) in pages {
        s.fixture.page(LESSON, &format!("/lesson/{page}"), &format!("<!doctype html><title>Lesson</title>{html}"));
        let session = s.open("profile-1", &format!("/lesson/{page}"), 50).await.unwrap();
        let o = s.observe(&session).await;
        assert!(node(&o, name).1.submits_form == Some(true), "{page}: the facts say the click submits");
        let read = s.read_form(&session, &o, name, "").await;
        assert_eq!(read.forms, forms, "{page}: {read:?}");
        if forms == 1 {
            // The hidden amount the submit would send is on the card.
            let names: Vec<&str> = read.fields.iter().map(|f| f.name.as_str()).collect();
            assert_eq!(names.first(), Some(&"amount"), "{page}: {names:?}");
            if page == "named" {
                let sent: Vec<(&str, &str)> =
                    read.fields.iter().map(|f| (f.label.as_str(), f.value.as_str())).collect();
                assert_eq!(sent, [("amount", "10"), ("amount", "9999")], "{page}");
            }
        } else {
            assert!(read.fields.is_empty(), "{page}: two forms are never read as one");
        }
        let close = rt::CloseSessionRequest { session_id: session };
        s.runtime.close_session(with(WORKER, close)).await.unwrap();
    }
}

/// A session no call uses for the idle time is closed and its browser given back to the pool: a
/// worker that never closes it, or an owner who took a tab over and walked away, cannot hold a
/// browser for ever.
#[tokio::test]
async fn an_idle_session_is_closed_and_its_browser_given_back() {
    let mut s = Stack::start_idle(1, 2).await;
    s.fixture.page(LESSON, "/lesson/1", LESSON_2);
    let session = s.open("profile-1", "/lesson/1", 50).await.unwrap();
    let driver = s.driver_pid(&session).await;
    assert!(!s.observe(&session).await.nodes.is_empty());
    let (twenty, beat) = (std::time::Duration::from_secs(20), std::time::Duration::from_millis(200));
    tests::poll_until("the idle session closed", twenty, beat, || {
        let open = s.served.session_ids();
        async move { open.is_empty().then_some(()) }
    })
    .await;
    let gone = rt::ObserveRequest { session_id: session.clone(), run_id: String::new() };
    let err = s.runtime.observe(with(WORKER, gone)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    // Its browser, Chromium's helpers too, is gone (SIGKILL returns before the kernel is done).
    tests::poll_until("the idle session's browser ended", twenty, beat, || {
        let left = group(driver);
        async move { left.is_empty().then_some(()) }
    })
    .await;
    // The pool's one browser is free again.
    assert!(s.open("profile-1", "/lesson/1", 50).await.is_ok());
}
