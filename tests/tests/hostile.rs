//! Pages written to fool the runtime, in real Chromium on the fixture site: a control lying over
//! the click point, a clipped element, a pointer-events pass-through, a page that moves things
//! before and during the click, focus the page moves, and a handler that clicks elsewhere. Each
//! test checks the fixture's request log (no document or ping left the prefix) and the decoy
//! control's state (unchanged). Two tests pin the documented limits of page script.

use proto::runtime as rt;
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
        let o = s.observe(session).await;
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

#[tokio::test]
async fn a_control_over_the_click_point_never_takes_the_click() {
    let mut s = stack().await;
    for path in ["/lesson/overlay", "/lesson/clipped", "/lesson/through"] {
        let (session, reply) = click_next(&mut s, path).await;
        assert!(!reply.ok && !reply.dispatched, "{path}: {reply:?}");
        assert_eq!(rt::ActCode::try_from(reply.code), Ok(rt::ActCode::NodeNotInteractable), "{path}: {reply:?}");
        assert!(reply.detail.contains("lies over"), "{path}: {reply:?}");
        assert!(!checked(&mut s, &session, "Subscribe to offers").await, "{path}: the decoy took the click");
        close(&mut s, session).await;
    }
    stayed_inside(&s);
}

#[tokio::test]
async fn a_page_that_moves_the_decoy_in_before_or_during_the_click_is_stopped() {
    let mut s = stack().await;
    // Brought over the button as the pointer arrives: the click goes to the decoy, and the guard
    // stops it with its default action.
    let (session, reply) = click_next(&mut s, "/lesson/before").await;
    assert!(reply.dispatched && reply.outcome_unknown, "{reply:?}");
    assert!(reply.detail.contains("guard stopped"), "{reply:?}");
    assert!(!checked(&mut s, &session, "Subscribe to offers").await, "the decoy took the click");
    close(&mut s, session).await;
    // Swapped in under the press: whatever the click reaches, the decoy does not change.
    let (session, reply) = click_next(&mut s, "/lesson/during").await;
    assert!(reply.dispatched, "{reply:?}");
    assert!(!checked(&mut s, &session, "Subscribe to offers").await, "the decoy took the click");
    stayed_inside(&s);
}

#[tokio::test]
async fn a_handler_that_clicks_a_link_out_of_the_prefix_meets_the_fence() {
    let mut s = stack().await;
    let (_, reply) = click_next(&mut s, "/lesson/relay").await;
    assert!(reply.dispatched && reply.outcome_unknown, "{reply:?}");
    assert!(reply.detail.contains("fence refused"), "{reply:?}");
    stayed_inside(&s);
}

#[tokio::test]
async fn keys_go_only_to_the_element_that_holds_focus() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "el gato")]);
    let session = s.open("profile-1", "/lesson/focus", 50).await.unwrap();
    let typing = |s: &Stack, o: &rt::ObserveReply, name: &str| {
        let mut act = click(&session, o, node(o, name).0);
        act.expected_role = rt::Role::Textbox as i32;
        act.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "answer".into() }));
        s.grant(&mut act, task_constraint());
        act
    };
    let filled = |o: &rt::ObserveReply, name: &str| node(o, name).0.state.as_ref().is_some_and(|st| st.filled);

    // An element that cannot hold focus takes no key (one that does not activate it: Enter or
    // Space on it would be its click, refused before the focus check).
    let o = s.observe(&session).await;
    let mut press = click(&session, &o, node(&o, "Listen").0);
    press.action = Some(rt::act_request::Action::Press(rt::Press { key: "ArrowDown".into() }));
    s.grant(&mut press, task_constraint());
    let reply = s.act(press).await.unwrap();
    assert!(!reply.dispatched && reply.detail.contains("does not hold focus"), "{reply:?}");

    // A field that hands focus on is refused before anything is typed, or (where the browser
    // moves focus only after the check, as Chromium 148 does) every key is stopped by the guard
    // and the outcome is unknown: either way no key reaches another field.
    let o = s.observe(&session).await;
    let reply = s.act(typing(&s, &o, "Your answer")).await.unwrap();
    let refused = !reply.dispatched && reply.detail.contains("does not hold focus");
    let stopped = reply.outcome_unknown && reply.detail.contains("the guard stopped");
    assert!(refused || stopped, "{reply:?}");
    let o = s.observe(&session).await;
    assert!(!filled(&o, "Your answer") && !filled(&o, "Offer code"), "{o:?}");

    // Focus moved by the first key: the rest never reach the other field.
    let reply = s.act(typing(&s, &o, "Second answer")).await.unwrap();
    assert!(reply.dispatched && reply.outcome_unknown, "{reply:?}");
    assert!(reply.detail.contains("guard stopped"), "{reply:?}");
    let o = s.observe(&session).await;
    assert!(!filled(&o, "Offer code"), "keys reached the field focus moved to: {o:?}");

    // Focus resolved through an open shadow root: the field inside takes the text.
    let reply = s.act(typing(&s, &o, "Boxed answer")).await.unwrap();
    assert!(reply.ok && !reply.outcome_unknown, "{reply:?}");
    let o = s.observe(&session).await;
    assert!(filled(&o, "Boxed answer") && !filled(&o, "Offer code"), "{o:?}");
    stayed_inside(&s);
}

/// The record's limits of page script: the runtime bounds the act's own input, not what the
/// page's script does in response. A change here means the limits moved; update the record.
#[tokio::test]
async fn page_script_limit_a_handler_may_click_a_check_box() {
    let mut s = stack().await;
    let (session, reply) = click_next(&mut s, "/lesson/handler").await;
    assert!(reply.ok && !reply.outcome_unknown, "{reply:?}");
    assert!(checked(&mut s, &session, "Subscribe to offers").await, "element.click() from a handler is not trusted");
    stayed_inside(&s);
}

#[tokio::test]
async fn page_script_limit_a_delayed_refresh_is_not_fenced() {
    let mut s = stack().await;
    let (_, reply) = click_next(&mut s, "/lesson/delayed").await;
    assert!(reply.ok && !reply.outcome_unknown, "{reply:?}");
    assert!(!s.fixture.requests().iter().any(|r| r.path() == "/account/later"), "the act settled first");
    // The refresh fires a second later, after the fence is down: the origin guard alone holds it.
    let (ten, beat) = (std::time::Duration::from_secs(10), std::time::Duration::from_millis(50));
    tests::poll_until("the delayed refresh", ten, beat, || async {
        s.fixture.requests().iter().any(|r| r.path() == "/account/later").then_some(())
    })
    .await;
    assert!(s.fixture.requests().iter().all(|r| r.host == LESSON));
}

/// The origin guard holds outside acts too: a refresh the act scheduled for later, to another
/// site, never loads; the tab is left on the browser's error page.
#[tokio::test]
async fn page_script_limit_a_delayed_refresh_off_the_origins_meets_the_origin_guard() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/away-later",
        r#"<!doctype html><title>Later</title>
<button onclick="const m = document.createElement('meta'); m.httpEquiv = 'refresh'; m.content = '1; url=https://www.elsewhere.test/win'; document.head.append(m)">Next</button>"#,
    );
    let (session, reply) = click_next(&mut s, "/lesson/away-later").await;
    assert!(reply.ok && !reply.outcome_unknown, "{reply:?}");
    left_for_the_error_page(&mut s, &session).await;
    assert!(s.fixture.requests().iter().all(|r| r.host == LESSON), "{:?}", s.fixture.requests());
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

#[tokio::test]
async fn every_corner_the_record_lists_comes_to_what_it_must() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "e")]);
    s.fixture.page(LESSON, "/account/x", "<!doctype html><title>Account</title>");
    for (path, body, _, _, _) in corners() {
        s.fixture.page(LESSON, path, &format!("<!doctype html><title>Corner</title>{body}"));
    }
    for (path, _, name, typed, expect) in corners() {
        let session = s.open("profile-1", path, 50).await.unwrap();
        let act_on = |o: &rt::ObserveReply| {
            let mut act = click(&session, o, node(o, name).0);
            if let Some(field) = typed {
                act.action = Some(rt::act_request::Action::Type(rt::Type { field_id: field.into() }));
            }
            act
        };
        // First with no ticket: nothing is dispatched, whatever the page would set off. A
        // refusal of the claim itself (an off-origin target) comes first and voids the snapshot.
        let o = s.observe(&session).await;
        let first = match expect {
            Expect::Refused(code) if code != rt::ActCode::GrantNotApplicable => Some(code),
            _ => None,
        };
        unticketed_dispatches_nothing(&mut s, &act_on(&o), first, path).await;
        let o = s.observe(&session).await;
        let mut act = act_on(&o);
        s.grant(&mut act, task_constraint());
        let reply = s.act(act).await.unwrap();
        match expect {
            Expect::Refused(code) => {
                assert!(!reply.dispatched, "{path}: {reply:?}");
                assert_eq!(rt::ActCode::try_from(reply.code), Ok(code), "{path}: {reply:?}");
            }
            Expect::Fenced => {
                assert!(reply.dispatched && reply.outcome_unknown, "{path}: {reply:?}");
                assert!(reply.detail.contains("fence refused"), "{path}: {reply:?}");
            }
            Expect::Done => assert!(reply.ok && !reply.outcome_unknown, "{path}: {reply:?}"),
        }
        close(&mut s, session).await;
        stayed_inside(&s);
    }
}

/// "Delete" disguised by a zero-width character, a right-to-left override or a lookalike letter,
/// in each label source in turn: each is read through, and the grant does not apply.
#[tokio::test]
async fn a_disguised_excluded_word_in_any_label_source_is_read_through() {
    let mut s = stack().await;
    s.record("run-1", &[("answer", "e")]);
    let controls = [
        // (markup, the name the model sees)
        ("<button aria-label=\"De\u{200B}lete\">x</button>", "De\u{200B}lete"),
        (
            "<span id=\"l\">Del\u{202E}ete\u{202C}</span><button aria-labelledby=\"l\">y</button>",
            "Del\u{202E}ete\u{202C}",
        ),
        ("<label for=\"i\">D\u{435}lete</label><input id=\"i\" type=\"checkbox\">", "D\u{435}lete"),
        ("<button title=\"Del\u{435}te\">Next title</button>", "Next title"),
        ("<input aria-label=\"Next placeholder\" placeholder=\"Dele\u{200D}te\">", "Next placeholder"),
        ("<button><img alt=\"Dele\u{200B}te\" width=\"10\" height=\"10\"></button>", "Dele\u{200B}te"),
        ("<input type=\"button\" value=\"D\u{435}l\u{435}te\">", "D\u{435}l\u{435}te"),
        ("<button aria-label=\"Next text\">De\u{AD}lete</button>", "Next text"),
        ("<dialog open aria-label=\"Dele\u{200B}te?\"><button>Next dialog</button></dialog>", "Next dialog"),
    ];
    for (i, (markup, name)) in controls.iter().enumerate() {
        let path = format!("/lesson/disguised-{i}");
        s.fixture.page(LESSON, &path, &format!("<!doctype html><title>Disguised</title>{markup}"));
        let session = s.open("profile-1", &path, 50).await.unwrap();
        let o = s.observe(&session).await;
        let target = node(&o, name).0;
        let mut act = click(&session, &o, target);
        // A field is typed into, never clicked.
        if target.role == rt::Role::Textbox as i32 {
            act.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "answer".into() }));
        }
        s.grant(&mut act, task_constraint());
        let reply = s.act(act).await.unwrap();
        assert!(!reply.dispatched, "{markup}: {reply:?}");
        assert_eq!(rt::ActCode::try_from(reply.code), Ok(rt::ActCode::GrantNotApplicable), "{markup}: {reply:?}");
        assert_eq!(reply.reason, "deletion", "{markup}: {reply:?}");
        close(&mut s, session).await;
    }
    stayed_inside(&s);
}

/// A label source longer than an observation carries (256 characters) reaches the worker cut and
/// marked not whole, so the worker covers nothing on it; one longer than the runtime reads (1,024)
/// is refused by the runtime too.
#[tokio::test]
async fn a_label_source_cut_in_the_facts_is_not_whole() {
    let mut s = stack().await;
    let long = |n: usize| "Next lesson ".repeat(n / 12 + 1).chars().take(n).collect::<String>();
    for (i, chars) in [300usize, 1100].into_iter().enumerate() {
        let path = format!("/lesson/long-{i}");
        s.fixture.page(
            LESSON,
            &path,
            &format!("<!doctype html><title>Long</title><button title=\"{}\">Next</button>", long(chars)),
        );
        let session = s.open("profile-1", &path, 50).await.unwrap();
        let o = s.observe(&session).await;
        let (n, facts) = node(&o, "Next");
        assert_eq!(facts.title.chars().count(), classifier::coverage::CARRIED_LABEL_CHARS, "{chars}");
        assert_eq!(facts.truncated, Some(true), "{chars}");
        let worker_facts = proto::facts::element_facts(facts.clone()).unwrap();
        let grant = classifier::Grant::Task(classifier::TaskScope {
            origin: tests::browser::LESSON_ORIGIN.into(),
            path_prefix: "/lesson".into(),
            chars_remaining: 4096,
        });
        let page = classifier::PageFacts { url: o.url.clone() };
        let worker = classifier::covers(&grant, &classifier::Action::Click, &worker_facts, &page);
        assert_eq!(worker.map_err(|e| e.reason.code()), Err("label_truncated"), "{chars}");

        let mut act = click(&session, &o, n);
        s.grant(&mut act, task_constraint());
        let reply = s.act(act).await.unwrap();
        if chars > classifier::coverage::MAX_LABEL_CHARS {
            assert!(!reply.dispatched, "{reply:?}");
            assert_eq!(reply.reason, "label_truncated", "{reply:?}");
        } else {
            // The runtime reads it whole: had the worker allowed it, the act would go.
            assert!(reply.ok, "{reply:?}");
        }
        close(&mut s, session).await;
    }
    stayed_inside(&s);
}

/// Pages that bring something under the pointer or the keys as the act starts: a frame raised
/// over the button, a control inserted inside it, a slider that acts on the press, focus moved
/// into a frame, a document reopened under the pointer. Each control that would change reports
/// to `/lesson/changed`; none may.
#[tokio::test]
async fn what_the_page_brings_in_during_the_act_takes_no_input() {
    let mut s = stack().await;
    const REPORT: &str = "fetch('/lesson/changed')";
    let frame_box = "position:absolute;left:0;top:0;width:200px;height:40px;border:0;margin:0";
    let pages = [
        (
            "/lesson/frame-over",
            format!(
                r#"<iframe id="f" style="{frame_box};z-index:0" srcdoc="<input type=checkbox style='width:200px;height:40px;margin:0' onchange=&quot;{REPORT}&quot;>"></iframe>
<button style="{BUTTON_STYLE};z-index:1" onpointerover="document.getElementById('f').style.zIndex = 2">Next</button>"#
            ),
            None,
        ),
        (
            "/lesson/inserted",
            format!(
                r#"<div id="go" role="button" tabindex="0" aria-label="Next" style="{BUTTON_STYLE}">Next</div>
<script>
const go = document.getElementById('go');
go.addEventListener('pointerover', () => {{
  if (go.querySelector('input')) return;
  const c = document.createElement('input');
  c.type = 'checkbox';
  c.style.cssText = 'position:absolute;left:0;top:0;width:200px;height:40px;margin:0';
  c.onchange = () => {REPORT};
  go.prepend(c);
}});
</script>"#
            ),
            None,
        ),
        (
            "/lesson/slider",
            format!(
                r#"<input type="range" aria-label="Volume" style="{BUTTON_STYLE};z-index:0" oninput="{REPORT}">
<button id="go" style="{BUTTON_STYLE};z-index:1" onpointerover="this.style.zIndex = -1">Next</button>"#
            ),
            None,
        ),
        (
            "/lesson/frame-keys",
            format!(
                r#"<input aria-label="Your answer" onkeydown="document.getElementById('f').contentDocument.querySelector('input').focus()">
<iframe id="f" srcdoc="<input oninput=&quot;{REPORT}&quot;>"></iframe>"#
            ),
            Some("Your answer"),
        ),
        (
            "/lesson/reopen",
            format!(
                r#"<button id="go" style="{BUTTON_STYLE}">Next</button>
<script>
document.getElementById('go').addEventListener('pointerover', () => {{
  document.open();
  document.write('<!doctype html><title>Reopened</title>');
  document.close();
  const c = document.createElement('input');
  c.type = 'checkbox';
  c.style.cssText = 'position:absolute;left:0;top:0;width:200px;height:40px;margin:0';
  c.onchange = () => {REPORT};
  document.body.append(c);
}});
</script>"#
            ),
            None,
        ),
        (
            "/lesson/new-frame",
            format!(
                r#"<button id="go" style="{BUTTON_STYLE}">Next</button>
<script>
document.getElementById('go').addEventListener('pointerover', () => {{
  const f = document.createElement('iframe');
  f.style.cssText = '{frame_box};z-index:2';
  document.body.append(f);
  const c = f.contentDocument.createElement('input');
  c.type = 'checkbox';
  c.style.cssText = 'width:200px;height:40px;margin:0';
  c.onchange = () => parent.{REPORT};
  f.contentDocument.body.style.margin = '0';
  f.contentDocument.body.append(c);
}}, {{ once: true }});
</script>"#
            ),
            None,
        ),
        (
            "/lesson/closed-ancestor",
            format!(
                r#"<div id="wrap" style="position:absolute;left:0;top:0"><button style="width:200px;height:40px;margin:0">Next</button></div>
<script>
const wrap = document.getElementById('wrap');
wrap.addEventListener('pointerover', () => {{
  const root = wrap.attachShadow({{ mode: 'closed' }});
  root.innerHTML = '<input type=checkbox style="position:absolute;left:0;top:0;width:200px;height:40px;margin:0;z-index:2"><slot></slot>';
  root.querySelector('input').onchange = () => {REPORT};
}}, {{ once: true }});
</script>"#
            ),
            None,
        ),
    ];
    s.record("run-1", &[("answer", "gato")]);
    for (path, body, typed) in &pages {
        s.fixture.page(LESSON, path, &format!("<!doctype html><title>Brought in</title>{body}"));
        let session = s.open("profile-1", path, 50).await.unwrap();
        let o = s.observe(&session).await;
        let mut act = click(&session, &o, node(&o, typed.unwrap_or("Next")).0);
        if typed.is_some() {
            act.expected_role = rt::Role::Textbox as i32;
            act.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "answer".into() }));
        }
        s.grant(&mut act, task_constraint());
        let reply = s.act(act).await.unwrap();
        assert!(reply.dispatched && reply.outcome_unknown, "{path}: {reply:?}");
        assert!(
            ["guard stopped", "reopened", "did not reach"].iter().any(|d| reply.detail.contains(d)),
            "{path}: {reply:?}"
        );
        let changed: Vec<_> = s.fixture.requests().into_iter().filter(|r| r.path() == "/lesson/changed").collect();
        assert!(changed.is_empty(), "{path}: a control the read did not cover changed: {changed:?}");
        close(&mut s, session).await;
    }
    stayed_inside(&s);
}

/// An element below the fold is scrolled into view and clicked.
#[tokio::test]
async fn an_element_below_the_fold_is_scrolled_to_and_clicked() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/fold",
        r#"<!doctype html><title>Fold</title><div style="height:3000px"></div><a href="/lesson/2">Next</a>"#,
    );
    let session = s.open("profile-1", "/lesson/fold", 50).await.unwrap();
    let o = s.observe(&session).await;
    let mut act = click(&session, &o, node(&o, "Next").0);
    s.grant(&mut act, task_constraint());
    act.wait_for = rt::WaitFor::Navigation as i32;
    let reply = s.act(act).await.unwrap();
    assert!(reply.ok && !reply.outcome_unknown, "{reply:?}");
    assert!(s.fixture.requests().iter().any(|r| r.path() == "/lesson/2"));
}

/// A document the browser would fetch ahead (speculation rules) is never fetched: preloading is
/// off, so a later navigation off the origins meets the origin guard instead of a ready page.
#[tokio::test]
async fn a_prefetched_page_off_the_origins_never_loads() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/prefetch",
        r#"<!doctype html><title>Prefetch</title>
<script type="speculationrules">{"prefetch": [{"source": "list", "urls": ["https://www.elsewhere.test/win"], "eagerness": "immediate"}]}</script>
<button onclick="setTimeout(() => { location.href = 'https://www.elsewhere.test/win'; }, 1000)">Next</button>"#,
    );
    let session = s.open("profile-1", "/lesson/prefetch", 50).await.unwrap();
    let o = s.observe(&session).await;
    let reply = s.act(click(&session, &o, node(&o, "Next").0)).await.unwrap();
    assert!(reply.ok, "{reply:?}");
    left_for_the_error_page(&mut s, &session).await;
    assert!(s.fixture.requests().iter().all(|r| r.host == LESSON), "{:?}", s.fixture.requests());
}

/// A start page that redirects off the run's origins is refused at OpenSession: the origin guard
/// held the other site's document, and the session does not start on an error page.
#[tokio::test]
async fn a_start_page_that_leads_off_the_origins_is_refused() {
    let mut s = stack().await;
    s.fixture.page(LESSON, "/lesson/sso", "redirect:https://www.elsewhere.test/win");
    let refused = s.open("profile-1", "/lesson/sso", 50).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("off the run's origins"), "{refused:?}");
    assert!(s.fixture.requests().iter().all(|r| r.host == LESSON), "{:?}", s.fixture.requests());
    // The pool slot came back: a session on a page that stays opens.
    s.open("profile-1", "/lesson/2", 50).await.unwrap();
}

/// The page's own script replaces the DOM's built-ins to make a control read as something else;
/// the runtime reads in an isolated world, where the built-ins are the browser's.
#[tokio::test]
async fn built_ins_the_page_replaces_do_not_reach_the_read() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/liar",
        r#"<!doctype html><title>Liar</title>
<button id="b">Delete account</button>
<a href="https://www.elsewhere.test/win">Onward</a>
<script>
for (const [proto, name] of [[Node.prototype, 'textContent'], [HTMLElement.prototype, 'innerText']]) {
  const real = Object.getOwnPropertyDescriptor(proto, name);
  Object.defineProperty(proto, name, { get() { return this.id === 'b' ? 'Next' : real.get.call(this); } });
}
Object.defineProperty(HTMLAnchorElement.prototype, 'href', { get() { return 'https://www.lesson.test/lesson/2'; } });
Element.prototype.getAttribute = function (n) { return n === 'href' ? '/lesson/2' : null; };
JSON.stringify = () => '{}';
</script>"#,
    );
    let session = s.open("profile-1", "/lesson/liar", 50).await.unwrap();
    let o = s.observe(&session).await;
    let (button, _) = node(&o, "Delete account");
    let (_, facts) = node(&o, "Onward");
    assert_eq!(facts.nav_targets, vec!["https://www.elsewhere.test/win".to_owned()]);
    let mut act = click(&session, &o, button);
    s.grant(&mut act, task_constraint());
    let reply = s.act(act).await.unwrap();
    assert!(!reply.dispatched && ["account_change", "deletion"].contains(&reply.reason.as_str()), "{reply:?}");
    stayed_inside(&s);
}

/// A dialog the act opens holds the page: the act reports a change, and a read meanwhile says a
/// dialog is open; the browser is not restarted, so the dialog is still there.
#[tokio::test]
async fn an_open_dialog_is_reported_and_the_browser_kept() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/dialog-open",
        r#"<!doctype html><title>Alert</title><button onclick="alert('Saved')">Next</button>"#,
    );
    let session = s.open("profile-1", "/lesson/dialog-open", 50).await.unwrap();
    let o = s.observe(&session).await;
    let mut act = click(&session, &o, node(&o, "Next").0);
    act.wait_for = rt::WaitFor::Dialog as i32;
    let reply = s.act(act).await.unwrap();
    assert!(reply.ok && reply.changed, "{reply:?}");
    for _ in 0..2 {
        let req = rt::ObserveRequest { session_id: session.clone(), run_id: String::new() };
        let err = s.runtime.observe(tests::browser::with(tests::browser::WORKER, req)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
        assert!(err.message().contains("dialog"), "{err:?}");
    }
}

/// A document without a root element (one between navigations, or one the page emptied) reads
/// as a page with no nodes, not as a page that broke the read.
#[tokio::test]
async fn a_document_without_a_root_element_reads_as_empty() {
    let mut s = stack().await;
    s.fixture.page(
        LESSON,
        "/lesson/rootless",
        "<!doctype html><title>Rootless</title><script>document.removeChild(document.documentElement)</script>",
    );
    let session = s.open("profile-1", "/lesson/rootless", 50).await.unwrap();
    let o = s.observe(&session).await;
    assert!(o.nodes.is_empty(), "{o:?}");
}
