//! An act the owner approved once, or a standing grant allowed, goes only where its card said:
//! its own page and the destinations the facts named. Each page here shows a "Continue" whose
//! facts name a lesson page, and then sends the browser to `/account/delete` another way. The
//! fence refuses that request below the DOM, the site never sees it, and the act's outcome is
//! reported unknown.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

/// How each page sends the browser to `/account/delete`: a handler on "Continue" (`Relay`), or a
/// destination the facts named that goes on elsewhere by itself (`Named`, a whole body).
enum Way {
    Relay { extra: String, escape: &'static str },
    Named(&'static str),
}

/// Each way out, one page each.
fn escapes() -> Vec<(&'static str, Way)> {
    const FORM: &str =
        r#"<form id="f" action="/account/delete" method="post"><input type="hidden" name="a" value="1"></form>"#;
    let relay = |extra: &str, escape| Way::Relay { extra: extra.to_owned(), escape };
    vec![
        ("/lesson/e-302", Way::Named(r#"<a href="/lesson/r302">Continue</a>"#)),
        (
            "/lesson/e-307",
            Way::Named(
                r#"<form action="/lesson/r307" method="post"><input type="hidden" name="a" value="1"><button>Continue</button></form>"#,
            ),
        ),
        ("/lesson/e-refresh", Way::Named(r#"<a href="/lesson/refresh">Continue</a>"#)),
        (
            "/lesson/e-click",
            relay(r#"<a id="out" href="/account/delete" hidden>x</a>"#, "document.getElementById('out').click()"),
        ),
        ("/lesson/e-submit", relay(FORM, "document.getElementById('f').submit()")),
        (
            "/lesson/e-formaction",
            relay(
                r#"<form action="/lesson/2"><button id="b" formaction="/account/delete" formmethod="post" hidden>x</button></form>"#,
                "document.getElementById('b').click()",
            ),
        ),
        (
            "/lesson/e-form-owner",
            relay(
                &format!(r#"{FORM}<button id="b" form="f" hidden>x</button>"#),
                "document.getElementById('b').click()",
            ),
        ),
        (
            "/lesson/e-image",
            relay(
                r#"<form action="/account/delete" method="post"><input type="image" id="i" alt="x" hidden></form>"#,
                "document.getElementById('i').click()",
            ),
        ),
        (
            "/lesson/e-face",
            relay(
                &format!(
                    r#"{FORM}<face-x id="c" form="f"></face-x><script>customElements.define('face-x', class extends HTMLElement {{
  static formAssociated = true; constructor() {{ super(); this.i = this.attachInternals(); }} }});</script>"#
                ),
                "document.getElementById('c').i.form.requestSubmit()",
            ),
        ),
        (
            "/lesson/e-details",
            relay(
                &format!(
                    r#"{FORM}<details id="d" ontoggle="document.getElementById('f').submit()"><summary>x</summary></details>"#
                ),
                "document.getElementById('d').open = true",
            ),
        ),
        (
            "/lesson/e-dialog",
            relay(
                &format!(r#"{FORM}<dialog id="dl" onclose="document.getElementById('f').submit()">x</dialog>"#),
                "const d = document.getElementById('dl'); d.show(); d.close()",
            ),
        ),
        ("/lesson/e-beacon", relay("", "navigator.sendBeacon('/account/delete', 'a=1')")),
        ("/lesson/e-window", relay("", "window.open('/account/delete')")),
        // Not sensitive, inside the lesson, and still a place the card never named.
        ("/lesson/e-unnamed", relay("", "location.assign('/lesson/3')")),
    ]
}

/// The escape pages, "Continue" in each relay a `control`: `link` (to `/lesson/2`) or `button`.
fn pages(control: &str) -> Vec<(&'static str, String)> {
    escapes()
        .into_iter()
        .map(|(path, way)| {
            let body = match way {
                Way::Named(body) => body.to_owned(),
                Way::Relay { extra, escape } if control == "link" => {
                    format!(r#"{extra}<a href="/lesson/2" onclick="event.preventDefault(); {escape}">Continue</a>"#)
                }
                Way::Relay { extra, escape } => format!(r#"{extra}<button onclick="{escape}">Continue</button>"#),
            };
            (path, body)
        })
        .collect()
}

async fn escape_stack(pages: &[(&str, String)]) -> Stack {
    let s = stack().await;
    for (path, body) in pages {
        s.fixture.page(LESSON, path, &format!("<!doctype html><title>Escape</title>{body}"));
    }
    s.fixture.page(LESSON, "/lesson/r302", "redirect:/account/delete");
    s.fixture.page(LESSON, "/lesson/r307", "redirect307:/account/delete");
    s.fixture.page(
        LESSON,
        "/lesson/refresh",
        r#"<!doctype html><title>Refresh</title><meta http-equiv="refresh" content="0; url=/account/delete">"#,
    );
    for path in ["/lesson/2", "/lesson/3"] {
        s.fixture.page(LESSON, path, "<!doctype html><title>Lesson</title><p>Next lesson");
    }
    s
}

/// Every page of `pages`, its "Continue" allowed by `allow` (an approval's ticket or a grant's):
/// the act is dispatched, the fence refuses the way out, the outcome is unknown, and no request
/// for an account page reached the site.
async fn every_escape_is_fenced(pages: Vec<(&'static str, String)>, allow: Option<pb::DispatchConstraint>) {
    let mut s = escape_stack(&pages).await;
    let mut missed = Vec::new();
    for (path, _) in pages {
        let session = s.open("profile-1", path, 50).await.unwrap();
        let o = s.observe(&session).await;
        let mut act = click(&session, &o, node(&o, "Continue").0);
        act.ticket = Some(s.ticket(&act, allow.clone()));
        let reply = s.act(act).await.unwrap();
        if !(reply.dispatched && reply.outcome_unknown && reply.detail.contains("fence refused")) {
            missed.push(format!("{path}: {reply:?}"));
        }
        close(&mut s, session).await;
        let reached: Vec<_> = s
            .fixture
            .requests()
            .into_iter()
            .filter(|r| r.path().starts_with("/account") || r.path() == "/lesson/3")
            .collect();
        assert!(reached.is_empty(), "{path}: the site saw {reached:?}");
    }
    assert!(missed.is_empty(), "not fenced:\n{}", missed.join("\n"));
}

#[tokio::test]
async fn an_act_approved_once_goes_only_where_its_card_said() {
    every_escape_is_fenced(pages("link"), None).await;
}

/// A standing grant covers a routine button, which names no destination: its act stays on its page.
#[tokio::test]
async fn a_standing_grant_act_stays_on_its_page() {
    let relays =
        escapes().into_iter().filter(|(_, w)| matches!(w, Way::Relay { .. })).map(|(p, _)| p).collect::<Vec<_>>();
    let pages = pages("button").into_iter().filter(|(p, _)| relays.contains(p)).collect();
    every_escape_is_fenced(pages, Some(tests::browser::standing_constraint())).await;
}
