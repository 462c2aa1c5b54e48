//! Pages written to fool the runtime, in real Chromium on the fixture site: a control lying over
//! the click point, a clipped element, a pointer-events pass-through, a page that moves things
//! before and during the click, focus the page moves, and a handler that clicks elsewhere. Each
//! test checks the fixture's request log (no document or ping left the prefix) and the decoy
//! control's state (unchanged). Two tests pin the documented limits of page script.

use proto::runtime as rt;
use proto::v1 as pb;
use tests::browser::{ELSEWHERE, LESSON, Stack, click, node, task_constraint};

/// A check box the page wants the act to toggle instead of the button.
const DECOY: &str = r#"<input type="checkbox" id="decoy" aria-label="Subscribe to offers"
 style="position:absolute;left:0;top:0;width:200px;height:40px;margin:0">"#;

const BUTTON_STYLE: &str = "position:absolute;left:0;top:0;width:200px;height:40px;margin:0";

fn pages() -> Vec<(&'static str, String)> {
    vec![
        // The decoy lies over the button, almost transparent.
        (
            "/lesson/overlay",
            format!(
                r#"<!doctype html><title>Overlay</title><button style="{BUTTON_STYLE}">Next</button>
{DECOY}<style>#decoy{{opacity:0.01;z-index:2}}</style>"#
            ),
        ),
        // The button's centre lies outside the box that clips it, over the decoy.
        (
            "/lesson/clipped",
            format!(
                r#"<!doctype html><title>Clipped</title>{DECOY}<style>#decoy{{left:100px}}</style>
<div style="position:absolute;left:0;top:0;width:60px;height:40px;overflow:hidden;z-index:1">
<button style="position:absolute;left:100px;top:0;width:200px;height:40px">Next</button></div>"#
            ),
        ),
        // The button lets the pointer through to the decoy beneath it.
        (
            "/lesson/through",
            format!(
                r#"<!doctype html><title>Through</title>{DECOY}
<button style="{BUTTON_STYLE};pointer-events:none;z-index:1">Next</button>"#
            ),
        ),
        // The pointer's arrival, just before the press, brings the decoy over the button.
        (
            "/lesson/before",
            format!(
                r#"<!doctype html><title>Before</title>{DECOY}<style>#decoy{{z-index:0}}</style>
<button id="go" style="{BUTTON_STYLE};z-index:1" onpointerover="document.getElementById('decoy').style.zIndex = 2">Next</button>"#
            ),
        ),
        // The press itself swaps the decoy in under the pointer.
        (
            "/lesson/during",
            format!(
                r#"<!doctype html><title>During</title>{DECOY}<style>#decoy{{z-index:0}}</style>
<button id="go" style="{BUTTON_STYLE};z-index:1" onmousedown="this.style.display = 'none'">Next</button>"#
            ),
        ),
        // The handler clicks a link out of the prefix.
        (
            "/lesson/relay",
            r#"<!doctype html><title>Relay</title><a id="out" href="/account/delete" hidden>x</a>
<button onclick="document.getElementById('out').click()">Next</button>"#
                .into(),
        ),
        // A documented limit: the handler clicks the decoy.
        (
            "/lesson/handler",
            format!(
                r#"<!doctype html><title>Handler</title>{DECOY}<style>#decoy{{top:60px}}</style>
<button style="{BUTTON_STYLE}" onclick="document.getElementById('decoy').click()">Next</button>"#
            ),
        ),
        // A documented limit: a refresh the act schedules for after it settles.
        (
            "/lesson/delayed",
            r#"<!doctype html><title>Delayed</title>
<button onclick="const m = document.createElement('meta'); m.httpEquiv = 'refresh'; m.content = '1; url=/account/later'; document.head.append(m)">Next</button>"#
                .into(),
        ),
        // Focus: an element that cannot hold it, one that hands it on, one whose keys the page
        // redirects mid-typing, and a field inside an open shadow root.
        (
            "/lesson/focus",
            r#"<!doctype html><title>Focus</title>
<div role="button" aria-label="Listen">Listen</div>
<input aria-label="Your answer" onfocus="document.getElementById('other').focus()">
<input aria-label="Second answer" onkeydown="document.getElementById('other').focus()">
<input id="other" aria-label="Offer code">
<answer-box></answer-box>
<script>
customElements.define('answer-box', class extends HTMLElement {
  connectedCallback() { this.attachShadow({ mode: 'open' }).innerHTML = '<input aria-label="Boxed answer">'; }
});
</script>"#
                .into(),
        ),
    ]
}

async fn stack() -> Stack {
    let stack = Stack::start(2).await;
    for (path, html) in pages() {
        stack.fixture.page(LESSON, path, &html);
    }
    for path in ["/account/delete", "/account/later"] {
        stack.fixture.page(LESSON, path, "<!doctype html><title>Account</title>");
    }
    stack
}

/// No document or ping left the lesson prefix.
fn stayed_inside(s: &Stack) {
    let outside: Vec<_> = s
        .fixture
        .requests()
        .into_iter()
        .filter(|r| r.host == ELSEWHERE || !(r.path().starts_with("/lesson/") || r.path() == "/favicon.ico"))
        .collect();
    assert!(outside.is_empty(), "requests left the prefix: {outside:?}");
}

/// Whether the control named `name` is checked in a fresh snapshot.
async fn checked(s: &mut Stack, session: &str, name: &str) -> bool {
    let o = s.observe(session).await;
    node(&o, name).0.state.as_ref().is_some_and(|st| st.checked)
}

/// Sent with no ticket, `act` dispatches nothing and nothing reaches the site: APPROVAL_REQUIRED
/// (the snapshot stays for the approval to be asked on), or a refusal of the act's claim that
/// comes first (`first`).
async fn unticketed_dispatches_nothing(s: &mut Stack, act: &rt::ActRequest, first: Option<rt::ActCode>, what: &str) {
    let before = s.fixture.requests().len();
    let reply = s.act_bare(rt::ActRequest { ticket: None, ..act.clone() }).await.unwrap();
    let code = first.unwrap_or(rt::ActCode::ApprovalRequired);
    assert_eq!(rt::ActCode::try_from(reply.code), Ok(code), "{what}: {reply:?}");
    assert!(!reply.dispatched, "{what}: {reply:?}");
    assert_eq!(reply.recoverable, code == rt::ActCode::ApprovalRequired, "{what}: {reply:?}");
    // The browser's own favicon fetch may land at any time; nothing else may.
    let after: Vec<String> = s.fixture.requests()[before..].iter().map(|r| r.target.clone()).collect();
    assert!(after.iter().all(|t| t == "/favicon.ico"), "{what}: an act without a ticket reached the site: {after:?}");
}

/// A granted click on "Next" of the page at `path`, in a session of its own (first tried with
/// no ticket, which dispatches nothing).
async fn click_next(s: &mut Stack, path: &str) -> (String, rt::ActReply) {
    let session = s.open("profile-1", path, 50).await.unwrap();
    let o = s.observe(&session).await;
    let mut act = click(&session, &o, node(&o, "Next").0);
    unticketed_dispatches_nothing(s, &act, None, path).await;
    s.grant(&mut act, task_constraint());
    let reply = s.act(act).await.unwrap();
    (session, reply)
}

/// Waits until the tab leaves the lesson site, and checks it went to the browser's error page:
/// the document it was sent to was refused.
async fn left_for_the_error_page(s: &mut Stack, session: &str) {
    // Each look observes through the stack, which needs it mutably: a loop of its own, bounded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        // The read may meet the page between documents: it then says to observe again.
        let o = match s.try_observe(session).await {
            Ok(o) => o,
            Err(e) if e.code() == tonic::Code::FailedPrecondition => {
                assert!(std::time::Instant::now() < deadline, "no read came back: {e:?}");
                continue;
            }
            Err(e) => panic!("observe: {e:?}"),
        };
        if !o.url.starts_with(tests::browser::LESSON_ORIGIN) {
            assert!(o.url.starts_with("chrome-error:"), "{}", o.url);
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the navigation never came");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn close(s: &mut Stack, session: String) {
    s.runtime
        .close_session(tests::browser::with(tests::browser::WORKER, rt::CloseSessionRequest { session_id: session }))
        .await
        .unwrap();
}

/// What a page built to lead the act astray must come to.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Refused before dispatch with this code.
    Refused(rt::ActCode),
    /// Dispatched, and the fence refused what it set off: the outcome is unknown.
    Fenced,
    /// Dispatched, with nothing to stop.
    Done,
}

/// Each corner the record lists, one page each: the control to act on, how, and what it must come to.
fn corners() -> Vec<(&'static str, &'static str, &'static str, Option<&'static str>, Expect)> {
    use Expect::*;
    use rt::ActCode::*;
    vec![
        (
            "/lesson/js",
            r#"<a href="javascript:location.href='/account/x'">Next</a>"#,
            "Next",
            None,
            Refused(OffOriginTarget),
        ),
        (
            "/lesson/closed",
            r#"<div id="h" role="button" aria-label="Next" style="display:block;width:200px;height:40px"></div>
<script>document.getElementById('h').attachShadow({ mode: 'closed' }).innerHTML =
'<form action="/account/x" method="post"><button style="width:200px;height:40px">Go</button></form>';</script>"#,
            "Next",
            None,
            Fenced,
        ),
        ("/lesson/audited", r#"<a href="/lesson/2" ping="/account/audit">Next</a>"#, "Next", None, Done),
        // `form=` names a form in the element's own tree only: across the shadow boundary it owns
        // nothing, inside its tree it does.
        (
            "/lesson/form-across",
            r#"<form id="f" action="/account/x" method="post"></form><div id="h"></div>
<script>document.getElementById('h').attachShadow({ mode: 'open' }).innerHTML = '<button form="f">Next</button>';</script>"#,
            "Next",
            None,
            Done,
        ),
        (
            "/lesson/form-within",
            r#"<div id="h"></div>
<script>document.getElementById('h').attachShadow({ mode: 'open' }).innerHTML =
'<form id="g" action="/account/y" method="post"></form><button form="g">Next</button>';</script>"#,
            "Next",
            None,
            Refused(GrantNotApplicable),
        ),
        (
            "/lesson/formtarget",
            r#"<form action="/lesson/answer"><button formmethod="post" formtarget="_blank" formaction="/account/x">Next</button></form>"#,
            "Next",
            None,
            Refused(GrantNotApplicable),
        ),
        (
            "/lesson/face",
            r#"<form id="f" action="/account/x" method="post"></form>
<face-next form="f" role="button" tabindex="0" style="display:block;width:200px;height:40px">Next</face-next>
<script>customElements.define('face-next', class extends HTMLElement {
  static formAssociated = true;
  constructor() { super(); this.i = this.attachInternals(); this.addEventListener('click', () => this.i.form.requestSubmit()); }
});</script>"#,
            "Next",
            None,
            Refused(GrantNotApplicable),
        ),
        // Access keys need a modifier the runtime never sends: the text is only text.
        (
            "/lesson/accesskey",
            r#"<form action="/account/delete" method="post"><button accesskey="e">Remove</button></form>
<input aria-label="Your answer">"#,
            "Your answer",
            Some("answer"),
            Done,
        ),
        (
            "/lesson/dialog",
            r#"<dialog open aria-labelledby="t"><h2 id="t">Delete your account?</h2><button>Next</button></dialog>"#,
            "Next",
            None,
            Refused(GrantNotApplicable),
        ),
        (
            "/lesson/details",
            r#"<details><summary>Next</summary><form action="/account/x" method="post"><button>Go</button></form></details>"#,
            "Next",
            None,
            Done,
        ),
        (
            "/lesson/frame",
            r#"<iframe name="f" src="/lesson/2"></iframe><button onclick="frames.f.location = '/account/x'">Next</button>"#,
            "Next",
            None,
            Fenced,
        ),
        (
            "/lesson/sandboxed",
            r#"<iframe name="s" sandbox="allow-scripts allow-top-navigation"
 srcdoc="<script>onmessage = () => { top.location = 'https://www.lesson.test/account/x'; };</script>"></iframe>
<button onclick="frames.s.postMessage('go', '*')">Next</button>"#,
            "Next",
            None,
            Fenced,
        ),
        (
            "/lesson/sandboxed-inside",
            r#"<div role="button" aria-label="Next"><iframe sandbox srcdoc="<a href='/account/x'>x</a>"></iframe></div>"#,
            "Next",
            None,
            Refused(OffOriginTarget),
        ),
        (
            "/lesson/editable",
            r#"<div contenteditable="true" role="textbox" aria-label="Notes" style="min-height:40px"></div>"#,
            "Notes",
            Some("answer"),
            // A region the page made editable is a kind of its own, which a task grant never types into.
            Refused(GrantNotApplicable),
        ),
    ]
}

mod arrivals;
mod clicks;
mod escapes;
mod reads;
mod through_mcp;
