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
use tests::children;
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

/// Buttons whose keyboard activation would reach what their click reaches: a handler that
/// submits the form from a plain button, a link, a check box.
const ACTIVATES: &str = r#"<!doctype html><title>Words</title>
<form action="/lesson/sent" method="post"><input name="word" value="gato">
<button type="button" onclick="this.form.requestSubmit()">Next word</button></form>
<a href="/lesson/2">Hint</a>
<label><input type="checkbox" name="slow"> Slower audio</label>"#;

mod browsers;
mod dispatch;
mod names;
mod pages;
