//! The owner's console end to end (the task-grant record's TG1–TG4): the lesson driven through
//! the harness and the runtime on the fixture site, the authorizer on PostgreSQL, the projection
//! workers and the gateway serving the console, and the console itself driven in its own
//! Chromium as the owner would use it. A screenshot of each step is kept under
//! `target/console-screenshots/the_lesson_through_the_console/`.

use std::time::Duration;

use agent::model::{Scripted, escalate, on_named, snapshot};
use agent::rules::End;
use proto::v1 as pb;
use serde_json::json;
use tests::browser::{ELSEWHERE, ENROL, ENROLLED, GATEWAY, LESSON, WORKER, with};
use tests::console::{Owner, computed};
use tests::lesson::Lesson;

const LESSON_1: &str = r#"<!doctype html><title>Lesson 1</title><h1>Lesson 1</h1><a href="/lesson/2">Next</a>"#;
// Lesson 2 also holds what a task permission never covers: a payment (whose label carries markup
// and script, to be shown inert), an account's settings, and a way off the lesson's scope.
const LESSON_2: &str = r#"<!doctype html><title>Lesson 2</title><h1>Lesson 2</h1>
<a href="/lesson/3">Next</a>
<button aria-label="Pay now <img src=x onerror=&quot;document.title='pwned'&quot;>">Pay</button>
<button>Account settings</button>
<a href="https://www.elsewhere.test/partners">Partner site</a>"#;
const LESSON_3: &str = r#"<!doctype html><title>Lesson 3</title><h1>Lesson 3</h1><a href="/lesson/done">Finish</a>"#;
const DONE: &str = "<!doctype html><title>Lesson complete: reference LX-4471</title><p>Well done.";
const PAY: &str = "Pay now <img src=x onerror=\"document.title='pwned'\">";

/// Every part of the product on one database, the lesson's pages on the fixture site.
async fn lesson() -> Lesson {
    Lesson::start(&[("/lesson/1", LESSON_1), ("/lesson/2", LESSON_2), ("/lesson/3", LESSON_3), ("/lesson/done", DONE)])
        .await
}

/// Click `name` on the current snapshot, then take the next snapshot.
fn click_then_look(model: Scripted, name: &'static str) -> Scripted {
    model.then(move |v| on_named(v, "click", name, false, json!({}))).then(|_| snapshot())
}

#[tokio::test]
async fn the_lesson_through_the_console() {
    let mut l = lesson().await;
    let mut owner = Owner::start("the_lesson_through_the_console", 1100).await;

    // Signing in: the link names whom it signs in, and lands on the chat's page.
    owner.open(&l.sign_in_link().await).await;
    owner.shot("sign-in").await;
    let pressed = std::time::Instant::now();
    owner.press("main", "Sign in as owner").await;
    owner.read_until("#who", "the signed-in owner", |t| t.contains("Signed in as owner")).await;
    // Figures for docs/performance.md, printed (never asserted): the machine is shared.
    println!("console: signed in and the session page filled in {} ms", pressed.elapsed().as_millis());
    owner.shot("signed-in").await;

    // TG1: the first act's card names the element and the page and offers Allow for this task.
    let model = Scripted::new()
        .then(|_| snapshot())
        .then(|v| on_named(v, "click", "Next", false, json!({})))
        .then(|v| on_named(v, "request_approval", "Next", false, json!({})));
    let model =
        click_then_look(model.then(|v| on_named(v, "click", "Next", false, json!({}))).then(|_| snapshot()), "Next");
    let started = std::time::Instant::now();
    let running = l.run("run-1", click_then_look(model, "Finish")).await;
    let card = owner.read_until("#cards", "the first card", |t| t.contains("Allow for this task")).await;
    println!("console: the run's first card shown {} ms after the run started", started.elapsed().as_millis());
    owner.shot("tg1-card").await;
    for said in [
        "Click a link",
        "Next",
        "https://www.lesson.test/lesson/1",
        "Lesson 1",
        "https://www.lesson.test/lesson for 30 minutes, up to 200 actions and 4096 typed characters",
        "Allow once",
        "Deny",
    ] {
        assert!(card.contains(said), "the card does not say {said:?}:\n{card}");
    }
    owner.press("#cards", "Allow for this task").await;
    // The lesson's remaining acts run with no card, while the banner counts them.
    let outcome = running.await.unwrap();
    assert_eq!(outcome.end, End::Done { reference: "LX-4471".into() }, "{}", outcome.log.join("\n"));
    let banner = owner.read_until("#banner", "three uses on the banner", |t| t.contains("3 of 200 actions used")).await;
    assert!(banner.contains("https://www.lesson.test/lesson"), "{banner}");
    assert!(banner.contains("minutes left") && banner.contains("4096 characters left"), "{banner}");
    let minutes: u32 =
        banner.split(" minutes left").next().and_then(|b| b.split_whitespace().last()).unwrap().parse().unwrap();
    assert!((29..=30).contains(&minutes), "{banner}");
    assert_eq!(owner.text("#cards").await, "Nothing is waiting for you.");
    owner.shot("tg1-banner-counts").await;

    // TG4: the activity says what the permission allowed, act by act.
    let activity = owner
        .read_until("#activity", "the permission's acts in the activity", |t| {
            t.matches("Allowed by your task permission: Click a link").count() == 3
        })
        .await;
    for used in ["element named \"Next\"", "element named \"Finish\""] {
        let line = activity.lines().find(|l| l.contains(used)).unwrap_or_else(|| panic!("{used}:\n{activity}"));
        assert!(line.contains("Allowed by your task permission: Click a link"), "{line}");
    }
    assert!(activity.contains("You allowed it for the task"), "the card's answer and who gave it:\n{activity}");
    // Words, not the record's codes: no use counts, no ids, no event types.
    for code in ["(use ", "approval.", "task_grant", "Run "] {
        assert!(!activity.contains(code), "the activity shows {code:?}:\n{activity}");
    }
    owner.shot("tg4-activity").await;

    // TG2: Stop ends the permission at once; the next act shows a card again.
    owner.press("#banner", "Stop this task permission").await;
    owner.read_until("#banner", "the banner to go", str::is_empty).await;
    owner.shot("tg2-stopped").await;
    let model = Scripted::new()
        .then(|_| snapshot())
        .then(|v| on_named(v, "click", "Next", false, json!({})))
        .then(|v| on_named(v, "request_approval", "Next", false, json!({})))
        .then(|v| on_named(v, "click", "Next", false, json!({})))
        .then(|_| snapshot())
        // TG3: with the permission allowed again, each of these asks, saying why it is not covered.
        .then(|v| on_named(v, "click", PAY, false, json!({})))
        .then(|v| on_named(v, "click", "Account settings", false, json!({})))
        .then(|v| on_named(v, "click", "Partner site", false, json!({})))
        // The run waits on the last: its cards stay live while it waits.
        .then(|v| on_named(v, "request_approval", "Partner site", false, json!({})));
    let running = l.run("run-2", model).await;
    let card = owner.read_until("#cards", "a card after Stop", |t| t.contains("Allow for this task")).await;
    assert!(card.contains("Next") && !card.contains("does not cover"), "no permission is active to explain: {card}");
    // The card says where the act leads and what it looks like, from what the runtime read.
    for said in ["Leads to", "Another page of this website.", "/lesson/", "Its labels name no payment"] {
        assert!(card.contains(said), "the card does not say {said:?}: {card}");
    }
    assert!(!card.contains("undo"), "{card}");
    owner.shot("tg2-card-after-stop").await;
    owner.press("#cards", "Allow for this task").await;
    let cards = owner
        .read_until("#cards", "three cards that say why", |t| {
            t.matches("Your task permission does not cover this").count() == 3
        })
        .await;
    for why in ["looks like a payment", "changes your account", "outside the site area the permission covers"] {
        assert!(cards.contains(why), "no card says {why:?}:\n{cards}");
    }
    // Where each leads, and that a named consequence may not be undone.
    for said in
        ["Another website: www.elsewhere.test.", "https://www.elsewhere.test", "You may not be able to undo this."]
    {
        assert!(cards.contains(said), "no card says {said:?}:\n{cards}");
    }
    // None of them offers the task: each allows its one act, and says so.
    assert!(!cards.contains("Allow for this task"), "a card the permission never covers offers it:\n{cards}");
    let mut labels = Vec::new();
    for b in owner.client.find_all(fantoccini::Locator::Css("#cards button")).await.unwrap() {
        labels.push(b.text().await.unwrap());
    }
    for name in ["Account settings", "Partner site"] {
        assert!(
            labels.iter().any(|l| l.starts_with("Press ") && l.contains(name) && l.ends_with(" once")),
            "no button says it presses {name:?} once: {labels:?}"
        );
    }
    // The name in the button is the website's, quoted and marked as such.
    let named = owner.client.find_all(fantoccini::Locator::Css("#cards button q.site")).await.unwrap();
    assert_eq!(named.len(), 3, "each one-act button quotes its element's name");
    let primary = owner.client.find_all(fantoccini::Locator::Css("#cards button.primary")).await.unwrap();
    assert!(primary.is_empty(), "a button is the default on a card for one act");
    owner.shot("tg3-cards-say-why").await;

    // The payment's label, markup and script included, is quoted text on the card and ran nowhere.
    assert!(cards.contains(PAY), "{cards}");
    let imgs = owner.client.find_all(fantoccini::Locator::Css("#cards img:not(.live)")).await.unwrap();
    assert!(imgs.is_empty(), "the label's markup became an element");
    assert!(!owner.client.title().await.unwrap().contains("pwned"));
    let quoted = owner.client.find(fantoccini::Locator::Css("#cards q.site")).await.unwrap();
    assert_eq!(quoted.attr("title").await.unwrap().as_deref(), Some("Text from the website"));
    // At a phone's width nothing scrolls sideways; by keyboard alone, Tab reaches a card's Deny
    // and Enter answers it.
    owner.client.set_window_size(390, 844).await.unwrap();
    let wide = owner.client.execute("return document.documentElement.scrollWidth > window.innerWidth", vec![]);
    assert_eq!(wide.await.unwrap(), json!(false), "the console scrolls sideways at 390 px");
    owner.shot("phone-width").await;
    let mut reached = false;
    for _ in 0..60 {
        let focused = owner.client.active_element().await.unwrap();
        if focused.text().await.unwrap_or_default() == "Deny" {
            focused.send_keys("\u{E007}").await.unwrap();
            reached = true;
            break;
        }
        focused.send_keys("\u{E004}").await.unwrap();
    }
    assert!(reached, "Tab never reached a card's Deny");
    owner
        .read_until("#cards", "the card answered by keyboard", |t| t.matches("does not cover this").count() == 2)
        .await;
    owner.read_until("#status", "the answer said", |t| t == "Denied.").await;
    owner.shot("keyboard-deny").await;
    // The partner site's link was never followed.
    assert!(l.stack.fixture.requests().iter().all(|r| r.host != ELSEWHERE));

    // Stop everything: the permission ends, the two waiting cards are denied, and a run in the
    // chat ends at its first act, with no card, until the owner writes again.
    owner.press("header", "Stop everything, in every chat").await;
    owner
        .read_until("#status", "everything stopped", |t| t.starts_with("Everything is stopped (1 chat stopped now)"))
        .await;
    owner.read_until("#banner", "the banner to go", str::is_empty).await;
    owner.read_until("#cards", "no card waiting", |t| t == "Nothing is waiting for you.").await;
    owner.shot("stop-everything").await;
    let outcome = running.await.unwrap();
    assert_eq!(outcome.end.reason(), "stopped_by_owner", "the waiting run meets the stop: {}", outcome.log.join("\n"));
    let model = Scripted::new().then(|_| snapshot()).then(|v| on_named(v, "click", "Next", false, json!({})));
    let outcome = l.run("run-3", model).await.await.unwrap();
    assert_eq!(outcome.end.reason(), "stopped_by_owner", "{}", outcome.log.join("\n"));
    assert_eq!(owner.text("#cards").await, "Nothing is waiting for you.", "a stopped chat raises no card");
    owner.read_until("#activity", "the stop in the activity", |t| t.contains("You stopped the agent here")).await;
    owner.shot("stopped-run-ended").await;

    // A card lives as long as its run waits: when the run ends, the card is withdrawn at once,
    // shows why, has no buttons, and an answer to it is refused and writes nothing.
    l.stack.owner_says("s1").await;
    let model = Scripted::new()
        .then(|_| snapshot())
        .then(|v| on_named(v, "click", "Next", false, json!({})))
        .then(|_| escalate("uncertain"));
    let outcome = l.run("run-4", model).await.await.unwrap();
    assert_eq!(outcome.end.reason(), "uncertain", "{}", outcome.log.join("\n"));
    let withdrawn = owner.read_until("#cards", "the card withdrawn", |t| t.contains("Withdrawn")).await;
    assert!(withdrawn.contains("This action will not run."), "{withdrawn}");
    let buttons = owner.client.find_all(fantoccini::Locator::Css("#cards button")).await.unwrap();
    assert!(buttons.is_empty(), "a withdrawn card has no buttons");
    owner.shot("card-withdrawn").await;
    let list = proto::v1::ListApprovalsRequest { session_id: "s1".into(), pending_only: false, min_position: None };
    let cards = l.stack.authorizer.list_approvals(with(GATEWAY, list)).await.unwrap().into_inner().approvals;
    let card = cards.iter().find(|c| c.status == "WITHDRAWN").expect("the withdrawn card");
    let count =
        || async { l.db.client().await.query_one("SELECT count(*) FROM events", &[]).await.unwrap().get::<_, i64>(0) };
    let before = count().await;
    let status = owner
        .client
        .execute(
            "return fetch('/v1/approvals/' + arguments[0] + '/resolve', { method: 'POST', \
             credentials: 'same-origin', headers: { 'content-type': 'application/json', 'x-csrf-token': \
             state.csrf }, body: JSON.stringify({ resolution: 'approve_once' }) }).then((r) => r.status);",
            vec![json!(card.approval_id)],
        )
        .await
        .unwrap();
    assert_eq!(status, json!(409), "an answer to a withdrawn card");
    assert_eq!(count().await, before, "the refused answer wrote nothing");
    owner.close().await;
}

/// The lesson's form filled under the permission (asked for first when `ask` is set), its
/// submit asked on the console.
fn enrol(ask: bool) -> Scripted {
    let type_into = |name: &'static str, field: &'static str| {
        move |v: agent::model::View<'_>| on_named(v, "type", name, false, json!({ "field_id": field }))
    };
    let mut model = Scripted::new().then(|_| snapshot());
    if ask {
        model = model
            .then(type_into("Full name", "name"))
            .then(|v| on_named(v, "request_approval", "Full name", false, json!({})));
    }
    model
        .then(type_into("Full name", "name"))
        .then(|_| snapshot())
        .then(type_into("City", "city"))
        .then(|_| snapshot())
        .then(|v| on_named(v, "click", "Confirm enrolment", true, json!({})))
        .then(|v| on_named(v, "request_approval", "Confirm enrolment", true, json!({})))
        .then(|v| {
            let token = agent::model::token_in(v.last_result).map(|t| json!({ "approval_token": t }));
            on_named(v, "click", "Confirm enrolment", true, token.unwrap_or_else(|| json!({})))
        })
        .then(|_| snapshot())
}

/// Whether the console shows the submit's card, its form read back.
fn submit_card(t: &str) -> bool {
    t.contains("Confirm enrolment") && t.contains("Approve submit")
}

#[tokio::test]
async fn the_form_review_card_on_the_console() {
    let mut l = lesson().await;
    l.stack.fixture.page(LESSON, "/lesson/unit-3", ENROL);
    l.stack.fixture.page(LESSON, "/lesson/unit-4", ENROLLED);
    let mut owner = Owner::start("the_form_review_card_on_the_console", 1100).await;
    owner.open(&l.sign_in_link().await).await;
    owner.press("main", "Sign in as owner").await;
    owner.read_until("#who", "the signed-in owner", |t| t.contains("Signed in as owner")).await;

    let record = [("name", "Ada Lovelace"), ("city", "London")];
    let running = l.run_from("/lesson/unit-3", "run-f", &record, enrol(true)).await;
    owner.read_until("#cards", "the first field's card", |t| t.contains("Full name")).await;
    owner.press("#cards", "Allow for this task").await;
    // The submit's card: each field as the page holds it beside the task, the button verbatim.
    let card = owner.read_until("#cards", "the submit's card", submit_card).await;
    owner.shot("form-review-card").await;
    for said in [
        "Confirm enrolment",
        "Full name",
        "Ada Lovelace",
        "Matches the task",
        "LONDON",
        "Matches (normalised: letter case)",
        "Excess (voluntary)",
        "250.00",
        "Not filled by the agent: the page’s own value",
        // Seed 004: the untouched fields with a value are a section of their own, counted.
        "1 field the agent never filled, which the form will send as it is",
        // How the submit sends the form: its fields in the address, as the request log shows.
        "The form's answers, in the web address, where history and logs may keep them (GET).",
        "Reject and escalate",
    ] {
        assert!(card.contains(said), "the form card does not say {said:?}:\n{card}");
    }
    assert!(!card.contains("Allow for this task"), "a submit is never offered for the task: {card}");
    // Beside the rows, the tab itself as the browser shows it now, read from the runtime.
    let (width, height) = owner.image_loaded("#cards img.live", "the live tab's picture").await;
    assert!(width >= 200 && height >= 100, "{width}x{height}");
    owner.read_until("#cards figcaption", "the picture's time", |t| t.contains("The browser tab as it was at")).await;
    // The submit button is outlined in it, and the owner is told what the marks mean.
    owner.read_until("#cards figcaption", "the picture's words", |t| t.contains("outlined in orange")).await;
    assert!(owner.text("#cards figcaption").await.contains("No private field is on this part of the page."));
    owner
        .client
        .execute("document.querySelector('#cards img.live').scrollIntoView({ block: 'center' })", vec![])
        .await
        .unwrap();
    owner.shot("form-review-card-with-its-tab").await;
    // At a phone's width each field is a block of its own, its parts named, and nothing scrolls
    // sideways.
    owner.client.set_window_size(390, 844).await.unwrap();
    let wide = owner.client.execute("return document.documentElement.scrollWidth", vec![]).await.unwrap();
    assert!(wide.as_u64().is_some_and(|w| w <= 390), "the page scrolls sideways: {wide}");
    owner.client.execute("document.querySelector('#cards .form-review').scrollIntoView()", vec![]).await.unwrap();
    owner.shot("form-review-card-phone").await;
    owner.client.set_window_size(1100, 1000).await.unwrap();
    // Only the card's owner sees the tab, only while the card is pending, and only through the
    // gateway: the runtime refuses the worker's credential for it.
    let pending = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: true, min_position: None };
    let cards = l.stack.authorizer.list_approvals(with(GATEWAY, pending)).await.unwrap().into_inner().approvals;
    let live = format!("/v1/approvals/{}/live", cards[0].approval_id);
    let (mine, stranger) = (l.token("owner").await, l.token("someone-else").await);
    let shown = tests::http::Call::new(l.gateway, "GET", &live).bearer(&mine).send().await;
    assert_eq!((shown.status, shown.header("content-type")), (200, Some("image/png")), "{shown:?}");
    assert_eq!(shown.header("cache-control"), Some("no-store"));
    // The submit button is outlined in it, and the private fields painted over.
    assert_eq!((shown.header("x-live-element"), shown.header("x-live-masked")), (Some("outlined"), Some("yes")));
    let theirs = tests::http::Call::new(l.gateway, "GET", &live).bearer(&stranger).send().await;
    assert_eq!(theirs.status, 404, "another owner's card is not there: {theirs:?}");
    let view = proto::runtime::LiveViewRequest {
        browser_profile_id: "profile-1".into(),
        snapshot_id: cards[0].snapshot_id.clone(),
        node_ref: String::new(),
    };
    let refused = l.stack.runtime.live_view(with(WORKER, view.clone())).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    // Even for the owner, only the session that issued the card's snapshot is shown: not one the
    // worker opened since on the same profile, on a page of its choosing.
    let elsewhere = proto::runtime::LiveViewRequest { snapshot_id: "snap_000000000000".into(), ..view };
    let refused = l.stack.runtime.live_view(with(GATEWAY, elsewhere)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::NotFound, "{refused:?}");
    owner.press("#cards", "Approve submit").await;
    let outcome = running.await.unwrap();
    assert_eq!(outcome.end, End::Done { reference: "EN-2040".into() }, "{}", outcome.log.join("\n"));
    // Approving submitted exactly the values the card showed.
    let sent: Vec<String> = l
        .stack
        .fixture
        .requests()
        .iter()
        .map(|r| r.target.clone())
        .filter(|t| t.starts_with("/lesson/unit-4"))
        .collect();
    assert_eq!(sent, ["/lesson/unit-4?name=Ada+Lovelace&city=LONDON&excess=250.00"]);
    let answered = tests::http::Call::new(l.gateway, "GET", &live).bearer(&mine).send().await;
    assert_eq!((answered.status, answered.code().as_str()), (409, "not_pending"), "{answered:?}");
    owner.shot("form-approved").await;

    // Reject and escalate: the run ends under the rejection and the form is not sent again. The
    // permission covers the typing this time; the submit asks again.
    let running = l.run_from("/lesson/unit-3", "run-g", &record, enrol(false)).await;
    owner.read_until("#cards", "the second submit's card", submit_card).await;
    owner.press("#cards", "Reject and escalate").await;
    let outcome = running.await.unwrap();
    assert_eq!(outcome.end.reason(), "approval_rejected", "{}", outcome.log.join("\n"));
    let sent = l.stack.fixture.requests().iter().filter(|r| r.target.starts_with("/lesson/unit-4")).count();
    assert_eq!(sent, 1, "the rejected submit reached the site");
    owner.shot("form-rejected").await;

    // A page that rewrites what the agent typed: the submit's card marks the field as differing
    // from the task, beside the untouched page default, and the owner decides.
    let rewrites = ENROL.replace("this.value.toUpperCase()", "this.value.replace('o', '0')");
    l.stack.fixture.page(LESSON, "/lesson/unit-7", &rewrites);
    let running = l.run_from("/lesson/unit-7", "run-m", &record, enrol(false)).await;
    let card = owner.read_until("#cards", "the mismatched submit's card", submit_card).await;
    for said in ["Differs", "London", "Not filled by the agent: the page’s own value", "250.00"] {
        assert!(card.contains(said), "the mismatch card does not say {said:?}:\n{card}");
    }
    owner.shot("form-mismatch-card").await;
    owner.press("#cards", "Reject and escalate").await;
    let outcome = running.await.unwrap();
    assert_eq!(outcome.end.reason(), "approval_rejected", "{}", outcome.log.join("\n"));
    assert_eq!(outcome.counts.get("form_mismatch"), Some(&1), "{:?}", outcome.counts);
    let sent = l.stack.fixture.requests().iter().filter(|r| r.target.starts_with("/lesson/unit-4")).count();
    assert_eq!(sent, 1, "the mismatched form reached the site");
    owner.close().await;
}

/// Every named consequence a card can give as its reason reads as words, never as the bare code.
#[test]
fn every_consequence_a_card_names_reads_in_words() {
    for named in classifier::Named::ALL {
        let words = gateway::api::reason_words(named.code());
        assert!(!words.ends_with(&format!("({}).", named.code())), "{} has no words: {words}", named.code());
    }
}

/// A form whose submit fills the lower half of the page, so that a click on the live picture's
/// lower half is a click on it; a frame over the upper half holds a button that opens an alert
/// whose text carries markup; and the page asks "Still there?" once the site's signal says so.
const BIG_SUBMIT: &str = r#"<!doctype html><title>Enrol</title><style>body{margin:0}</style>
<script>let asked = false; const tick = setInterval(async () => {
  const said = await (await fetch('/lesson/signal')).text();
  if (said === 'ask' && !asked) { asked = true; clearInterval(tick); alert('Still there?'); }
}, 100);</script>
<form action="/lesson/unit-6" style="margin-top:50vh"><label>City <input name="city"></label>
<button style="display:block;width:100%;height:45vh">Confirm enrolment</button></form>
<iframe title="Check" style="position:fixed;top:0;left:0;width:100%;height:48vh;border:0"
 srcdoc="<button style='width:100%;height:95vh' onclick='alert(&quot;Hola <b>amigo</b>&quot;)'>Check</button>"></iframe>"#;

/// Take over: the owner answers the submit's card by taking the live tab; the agent's run ends
/// as taken over and the runtime refuses the worker from then on, while the owner's own key, text
/// and click, sent through the console's picture of the tab, reach the page.
#[tokio::test]
async fn the_owner_takes_the_live_tab_over() {
    let mut l = lesson().await;
    l.stack.fixture.page(LESSON, "/lesson/unit-5", BIG_SUBMIT);
    l.stack.fixture.page(LESSON, "/lesson/unit-6", ENROLLED);
    let mut owner = Owner::start("the_owner_takes_the_live_tab_over", 1100).await;
    owner.open(&l.sign_in_link().await).await;
    owner.press("main", "Sign in as owner").await;
    owner.read_until("#who", "the signed-in owner", |t| t.contains("Signed in as owner")).await;

    let model = Scripted::new()
        .then(|_| snapshot())
        .then(|v| on_named(v, "click", "Confirm enrolment", true, json!({})))
        .then(|v| on_named(v, "request_approval", "Confirm enrolment", true, json!({})))
        .then(|_| escalate("the model must not be asked again"));
    let running = l.run_from("/lesson/unit-5", "run-t", &[], model).await;
    owner.read_until("#cards", "the submit's card", |t| t.contains("Take over")).await;
    owner.shot("card-offers-take-over").await;
    owner.press("#cards", "Take over").await;
    let outcome = running.await.unwrap();
    assert_eq!(outcome.end.reason(), "taken_over", "{}", outcome.log.join("\n"));
    let (width, height) = owner.image_loaded("#takeover-tab", "the tab taken over").await;
    assert!(width >= 200 && height >= 200, "{width}x{height}");
    owner.shot("tab-taken-over").await;

    // The worker is refused from now on: the tab is the owner's.
    let sessions = l.stack.served.session_ids();
    let observe = proto::runtime::ObserveRequest { session_id: sessions[0].clone(), run_id: "run-t".into() };
    let refused = l.stack.runtime.observe(with(WORKER, observe)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Aborted, "{refused:?}");

    // A dialog the page opens before the owner's first input is shown and answered by it.
    l.stack.fixture.page(LESSON, "/lesson/signal", "ask");
    owner.read_until("#takeover-dialog", "the page's question", |t| t.contains("Still there?")).await;
    owner.press("#takeover-dialog", "OK").await;
    owner.image_loaded("#takeover-tab", "the tab after the question").await;

    // A reload keeps the tab the owner's: the panel comes back.
    owner.client.refresh().await.unwrap();
    owner.read_until("#status", "the panel back", |t| t.contains("You still have the tab")).await;
    owner.image_loaded("#takeover-tab", "the tab after a reload").await;

    // Tab focuses the page's field and the text goes into it; later a click on the picture's
    // lower half presses the big submit: the page sends what the owner typed.
    owner.press("#takeover-keys", "Tab").await;
    owner.type_into("#takeover-text", "Paris").await;
    owner.press("#takeover-type", "Send text").await;
    // The console sends the owner's inputs one after another, in order: the text lands before the
    // owner's click reaches the frame (the guard stops only the agent's there), whose alert
    // shows on the console as the website's text, and OK answers it.
    // As a person would, the owner clicks once the picture is there: a picture that failed to
    // load (the machine busy) is hidden until the next one, and a click then lands beside it.
    owner.image_loaded("#takeover-tab", "the tab after the text").await;
    owner.click_at("#takeover-tab", 0.5, 0.2).await;
    let said = owner.read_until("#takeover-dialog", "the page's alert", |t| t.contains("amigo")).await;
    assert!(said.contains("The page shows a dialog: Hola <b>amigo</b>"), "{said}");
    assert!(owner.client.find_all(fantoccini::Locator::Css("#takeover-dialog b")).await.unwrap().is_empty());
    owner.shot("page-dialog").await;
    // While it is open nothing but an answer naming it reaches the page: not a key meant for a
    // field, not an answer to another dialog.
    for body in [json!({ "key": "Enter" }), json!({ "answer": { "accept": true, "seen": "Still there?" } })] {
        let status = owner
            .client
            .execute(
                "return fetch('/v1/approvals/' + takeover.id + '/live/input', { method: 'POST', \
                 credentials: 'same-origin', headers: { 'content-type': 'application/json', 'x-csrf-token': \
                 state.csrf }, body: JSON.stringify(arguments[0]) }).then((r) => r.status);",
                vec![body.clone()],
            )
            .await
            .unwrap();
        assert_eq!(status, json!(409), "{body} while a dialog is open");
    }
    owner.press("#takeover-dialog", "OK").await;
    owner.image_loaded("#takeover-tab", "the tab after the alert").await;

    // A click aimed at a page the tab has left is refused, not sent: the gateway says so.
    let stale = owner
        .client
        .execute(
            "return fetch('/v1/approvals/' + takeover.id + '/live/input', { method: 'POST', \
             credentials: 'same-origin', headers: { 'content-type': 'application/json', 'x-csrf-token': \
             state.csrf }, body: JSON.stringify({ click: { x: 5, y: 5 }, page: \
             'https://www.lesson.test/lesson/elsewhere' }) }).then((r) => r.status);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(stale, json!(409), "a click on a picture of another page");

    owner.click_at("#takeover-tab", 0.5, 0.8).await;
    let sent = tests::poll_until("the owner's submit", Duration::from_secs(20), Duration::from_millis(100), || {
        let requests = l.stack.fixture.requests();
        async move { requests.iter().map(|r| r.target.clone()).find(|t| t.starts_with("/lesson/unit-6")) }
    })
    .await;
    assert_eq!(sent, "/lesson/unit-6?city=Paris");
    owner.shot("owner-submitted").await;

    // Done closes the tab; the card's tab is no longer there to see.
    owner.press("#takeover-keys", "Done: close the tab").await;
    owner.read_until("#status", "the tab closed", |t| t.contains("The tab is closed")).await;
    assert!(l.stack.served.session_ids().is_empty(), "the owner's Done closes the browser session");
    owner.close().await;
}

/// With task permissions turned off by the operator, a card offers only its one act ("Press Next
/// once") and Deny, and says nothing of a permission for the task; its act happens once.
#[tokio::test]
async fn a_card_with_task_permissions_off_offers_allow_once_only() {
    use authorizer::domain::Command;
    use authorizer::scopes::{TaskGrantSettings, parse_scopes};
    let mut l = lesson().await;
    let off = TaskGrantSettings { enabled: false, scopes: parse_scopes("https://www.lesson.test/lesson").unwrap() };
    l.stack.authorizer_service.authority().execute(Command::ChangeSettings(off), "operator").await.unwrap();
    let mut owner = Owner::start("a_card_with_task_permissions_off_offers_allow_once_only", 420).await;
    owner.open(&l.sign_in_link().await).await;
    owner.press("main", "Sign in as owner").await;
    owner.read_until("#who", "the signed-in owner", |t| t.contains("Signed in as owner")).await;

    let model = Scripted::new()
        .then(|_| snapshot())
        .then(|v| on_named(v, "click", "Next", false, json!({})))
        .then(|v| on_named(v, "request_approval", "Next", false, json!({})))
        .then(|v| {
            let token = agent::model::token_in(v.last_result).expect("the approval's token");
            on_named(v, "click", "Next", false, json!({ "approval_token": token }))
        })
        .then(|_| escalate("the lesson's second page is as far as this goes"));
    let running = l.run("run-off", model).await;
    let card = owner.read_until("#cards", "the card", |t| t.contains("Press Next once")).await;
    owner.shot("card-with-permissions-off").await;
    assert!(card.contains("Deny") && card.contains("https://www.lesson.test/lesson/1"), "{card}");
    assert!(!card.contains("for this task") && !card.contains("30 minutes"), "a task permission was offered:\n{card}");
    owner.press("#cards", "Press Next once").await;
    let outcome = running.await.unwrap();
    assert_eq!(outcome.end.reason(), "uncertain", "{}", outcome.log.join("\n"));
    let visited: Vec<String> = l.stack.fixture.requests().iter().map(|r| r.path().to_owned()).collect();
    assert_eq!(visited.iter().filter(|p| *p == "/lesson/2").count(), 1, "{visited:?}");
    owner.read_until("#cards", "nothing waiting", |t| t == "Nothing is waiting for you.").await;
    owner.shot("allowed-once").await;
}

/// The plan the worker plays for each task: ask once, then one act under the permission, then
/// stop and ask the owner.
const WORKER_PLAN: &str = r#"{"tool": "snapshot"}
{"tool": "click", "name": "Next"}
{"tool": "request_approval", "name": "Next"}
{"tool": "click", "name": "Next", "with_token": true}
{"tool": "snapshot"}
{"tool": "click", "name": "Next"}
{"tool": "snapshot"}
{"tool": "escalate", "reason": "uncertain", "detail": "Which lesson comes next?"}"#;

/// A worker replica serving the owner's tasks, as `grantctl serve worker` runs it, until the
/// returned sender is dropped.
fn worker(l: &Lesson) -> tokio::sync::oneshot::Sender<()> {
    let config = ops::worker::WorkerConfig {
        authorizer_url: format!("http://127.0.0.1:{}", l.stack.authorizer_port),
        runtime_url: format!("http://127.0.0.1:{}", l.stack.runtime_port),
        ca: None,
        tenants: vec![(tests::browser::TENANT.into(), WORKER.into())],
        holder: "worker-a".into(),
        model: ops::worker::WorkerModel::Script(ops::agent::plan(WORKER_PLAN).unwrap(), Duration::ZERO),
        max_steps: 20,
        runs: 1,
        poll: Duration::from_millis(200),
        record: None,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(ops::worker::serve(config, async {
        let _ = stopped.await;
    }));
    stop
}

/// The owner's own work in the console, in a browser in India's time zone with notifications
/// allowed: the inbox of two chats, a task written in a chat and run by the worker service, its
/// first card (with the page's picture) noticed, the run's rows in the owner's words, a Stop and
/// "continue", take over from an ordinary card, and the signed-out and offline states.
#[tokio::test]
async fn the_owner_works_in_the_console() {
    let mut l = lesson().await;
    l.stack.chat("s2", "profile-2").await;
    let setup = tests::console::Setup { time_zone: Some("Asia/Kolkata"), notifications: true };
    let mut owner = Owner::start_with("the_owner_works_in_the_console", 1100, setup).await;
    owner.open(&l.sign_in_link().await).await;
    owner.press("main", "Sign in as owner").await;
    owner.read_until("#who", "the signed-in owner", |t| t.contains("Signed in as owner")).await;

    // The inbox: both chats, none with a task yet; sign-out and Stop everything at hand.
    owner.open(&format!("http://127.0.0.1:{}/", l.gateway)).await;
    let inbox = owner.read_until("#chats", "two chats", |t| t.matches("No task yet").count() == 2).await;
    assert!(inbox.contains("Chat s1") && inbox.contains("Chat s2"), "{inbox}");
    for label in ["Sign out", "Stop everything, in every chat"] {
        owner.read_until("header", label, |t| t.contains(label)).await;
    }
    owner.shot("inbox-two-chats").await;

    // Landmarks, and every control named by the browser's own accessibility tree.
    let a11y = |owner: &Owner| {
        let client = owner.client.clone();
        async move {
            for (css, role) in [("header", "banner"), ("main", "main"), ("nav", "navigation")] {
                let e = client.find(fantoccini::Locator::Css(css)).await.unwrap();
                assert_eq!(computed(&client, &e, "computedrole").await, role, "{css}");
            }
            for e in client.find_all(fantoccini::Locator::Css("button, input, textarea, select, a")).await.unwrap() {
                if !e.is_displayed().await.unwrap_or(false) {
                    continue;
                }
                let name = computed(&client, &e, "computedlabel").await;
                let html = e.html(true).await.unwrap_or_default();
                assert!(!name.trim().is_empty(), "a control has no name: {html}");
            }
        }
    };
    a11y(&owner).await;

    // A task written in chat s1 starts a run on the worker service; its first card appears.
    let _worker = worker(&l);
    owner.client.find(fantoccini::Locator::LinkText("Chat s1")).await.unwrap().click().await.unwrap();
    owner.read_until("#task-now", "no task yet", |t| t.contains("No task yet")).await;
    owner.press("header", "Tell me when a card arrives").await;
    owner.read_until("header", "notifications on", |t| t.contains("Stop telling me when a card arrives")).await;
    owner.type_into("#task-goal", "Do lesson one").await;
    owner.type_into("#task-steps", "Open the lesson\nFinish it").await;
    owner.client.find(fantoccini::Locator::Css("#task-start")).await.unwrap().clear().await.unwrap();
    owner.type_into("#task-start", "https://www.lesson.test/lesson/1").await;
    a11y(&owner).await;
    owner.shot("task-written").await;
    owner.press("#task-form", "Start the task").await;
    owner.read_until("#status", "the task sent", |t| t.starts_with("Your task is sent")).await;
    let card = owner.read_until("#cards", "the task's first card", |t| t.contains("Allow for this task")).await;
    assert!(card.contains("Take over the tab"), "take over on an ordinary card: {card}");
    let cards = owner.client.find(fantoccini::Locator::Css("#cards")).await.unwrap();
    assert_eq!(cards.attr("aria-live").await.unwrap().as_deref(), Some("polite"), "the cards are a live region");
    let heading = owner.client.find(fantoccini::Locator::Css("#cards article h3")).await.unwrap();
    let article = owner.client.find(fantoccini::Locator::Css("#cards article")).await.unwrap();
    assert_eq!(
        computed(&owner.client, &article, "computedlabel").await,
        heading.text().await.unwrap(),
        "a card is named"
    );
    owner.image_loaded("#cards img.live", "the page's picture on the card").await;
    let told =
        owner.read_until("#notified", "the notification", |t| t.starts_with("You were told of a new card")).await;
    assert!(told.contains("GMT+5:30") || told.contains("IST"), "India's time, named: {told}");
    let task = owner.read_until("#task-now", "the task running", |t| t.contains("working on it")).await;
    assert!(task.contains("Do lesson one"), "{task}");
    owner.shot("first-card").await;

    // Allowed for the task: focus goes to what was said; the run goes on under the permission,
    // then stops to ask.
    owner.press("#cards", "Allow for this task").await;
    owner.read_until("#status", "the answer said", |t| t == "Allowed for this task.").await;
    assert_eq!(owner.focused_id().await, "status", "focus after the last card's answer");
    let activity =
        owner.read_until("#activity", "the run's rows", |t| t.contains("The agent stopped and needs you")).await;
    for said in [
        "Allowed by you: Click a link on www.lesson.test/lesson, element named \"Next\"",
        "Allowed by your task permission: Click a link on www.lesson.test/lesson, element named \"Next\"",
        "The agent stopped and needs you: it is not sure what to do. It said Which lesson comes next?",
        "Step 3: Asked you about link Next",
        "You started a task: Do lesson one",
        "The agent started working",
    ] {
        assert!(activity.contains(said), "the activity does not say {said:?}:\n{activity}");
    }
    for code in ["(use ", "approval.", "run.", "task-", "uncertain", "UTC"] {
        assert!(!activity.contains(code), "the activity shows {code:?}:\n{activity}");
    }
    let time = owner.text("#activity li time").await;
    assert!(time.contains("GMT+5:30") || time.contains("IST"), "local time with its zone: {time}");
    let banner = owner.read_until("#banner", "the ended run's banner", |t| t.contains("task has ended")).await;
    assert!(banner.contains("End the task permission now") && banner.contains("minutes left"), "{banner}");
    owner.shot("run-rows-and-banner").await;

    // Stop, then "continue": the same task runs again, asking afresh (the Stop ended the permission).
    owner.press("main", "Stop the agent in this chat").await;
    // What the owner reads once the Stop is answered (it waits out the dispatch window).
    owner.read_until("#status", "the Stop answered", |t| t.starts_with("The agent is stopped in this chat")).await;
    owner.read_until("#task-now", "the chat stopped", |t| t.contains("You stopped the agent here")).await;
    owner.read_until("#banner", "the permission gone", str::is_empty).await;
    owner.shot("stopped").await;
    owner.press("main", "Lift the Stop and run the task again").await;
    owner.read_until("#status", "continued", |t| t == "You told the agent to continue.").await;
    owner.read_until("#cards", "the continued task's card", |t| t.contains("Allow for this task")).await;
    owner.shot("continued-card").await;

    // Take over from that ordinary card: the tab is the owner's, the run ends.
    owner.press("#cards", "Take over the tab").await;
    owner.read_until("#status", "the tab taken", |t| t.contains("You have the tab")).await;
    owner.image_loaded("#takeover-tab", "the taken tab").await;
    owner.shot("taken-over").await;
    owner.press("#takeover-keys", "Done: close the tab").await;
    owner.read_until("#status", "the tab closed", |t| t == "The tab is closed.").await;

    // The inbox says where each chat is, at a phone's width too.
    owner.open(&format!("http://127.0.0.1:{}/", l.gateway)).await;
    let inbox = owner.read_until("#chats", "the chat's task in the inbox", |t| t.contains("Do lesson one")).await;
    assert!(inbox.contains("No task yet"), "{inbox}");
    owner.client.set_window_size(390, 844).await.unwrap();
    let wide = owner.client.execute("return document.documentElement.scrollWidth > window.innerWidth", vec![]);
    assert_eq!(wide.await.unwrap(), json!(false), "the inbox scrolls sideways at 390 px");
    owner.shot("inbox-phone").await;
    owner.client.set_window_size(1100, 1000).await.unwrap();

    // Offline, the chat's page says so instead of "Nothing is waiting".
    owner.open(&format!("http://127.0.0.1:{}/sessions/s1", l.gateway)).await;
    owner.read_until("#cards", "connected", |t| t == "Nothing is waiting for you.").await;
    owner.offline(true).await;
    let said = owner.read_until("#status", "offline said", |t| t.contains("cannot reach the gateway")).await;
    assert!(!owner.text("#cards").await.contains("Nothing is waiting"), "{said}");
    owner.shot("offline").await;
    owner.offline(false).await;
    owner.read_until("#cards", "back online", |t| t == "Nothing is waiting for you.").await;

    // Signed out: the pages say so, and show nothing as current.
    owner.press("header", "Sign out").await;
    owner.read_until("#status", "signed out", |t| t.starts_with("You are signed out")).await;
    owner.shot("signed-out").await;
    owner.open(&format!("http://127.0.0.1:{}/sessions/s1", l.gateway)).await;
    owner.read_until("#status", "signed out on a chat", |t| t.starts_with("You are signed out")).await;
    assert!(!owner.text("#cards").await.contains("Nothing is waiting"));
    owner.close().await;
}

/// The pending cards of chat s1 once `wanted` accepts them.
async fn cards_until(l: &Lesson, what: &str, wanted: impl Fn(&[pb::Approval]) -> bool) -> Vec<pb::Approval> {
    let wanted = &wanted;
    tests::poll_until(what, Duration::from_secs(60), Duration::from_millis(100), || async move {
        let list = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: true, min_position: None };
        let cards = l.stack.authorizer.clone().list_approvals(with(GATEWAY, list)).await.ok()?.into_inner().approvals;
        wanted(&cards).then_some(cards)
    })
    .await
}

fn named<'a>(cards: &'a [pb::Approval], name: &str) -> Option<&'a pb::Approval> {
    cards.iter().find(|c| c.view.as_ref().is_some_and(|v| v.element_name == name))
}

/// `scripts/run --demo`'s lesson (its pages, task record and plan, as the demo's worker plays
/// them) shows every protection: TG1 (the first act's card offers the permission, and the
/// answers then go without a card), TG3 (a purchase and a link off the lesson each ask, saying
/// why), the form review card (a value the page changed, and one it filled itself), and TG2 (the
/// permission stopped, the next act asks again).
#[tokio::test]
async fn the_demo_lesson_shows_every_protection() {
    let mut l = Lesson::start(&ops::demo::PAGES).await;
    l.max_steps = ops::demo::MAX_STEPS;
    let record: std::collections::BTreeMap<String, String> = serde_json::from_str(ops::demo::RECORD).unwrap();
    let fields: Vec<(&str, &str)> = record.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let plan = Scripted::from_plan(ops::agent::plan(ops::demo::PLAN).unwrap());
    let running = l.run_from("/lesson/1", "demo-run", &fields, plan).await;

    // TG1: the first act asks, offering the permission.
    let cards = cards_until(&l, "the first card", |c| named(c, "Start").is_some()).await;
    let first = named(&cards, "Start").unwrap();
    let offer = first.offer.clone().expect("the first card offers the permission");
    let allow = pb::ResolveApprovalRequest {
        approval_id: first.approval_id.clone(),
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin,
        offered_path_prefix: offer.path_prefix,
    };
    l.stack.authorizer.resolve_approval(with(GATEWAY, allow)).await.unwrap();

    // TG3: the purchase and the link off the lesson ask, each saying why; the form waits for
    // its review, its read-back showing the city the page changed and the level it filled.
    let cards = cards_until(&l, "the purchase, the way out and the form", |c| {
        named(c, "Buy 100 gems for $4.99").is_some()
            && named(c, "Read a story").is_some()
            && named(c, "Confirm certificate").is_some()
    })
    .await;
    for (name, why) in [("Buy 100 gems for $4.99", "reason: \"payment\""), ("Read a story", "scope")] {
        let card = named(&cards, name).unwrap();
        assert!(card.offer.is_none(), "{name}: the permission is never offered for it");
        let said = format!("{card:?}");
        assert!(said.contains(why), "{name}'s card does not say why ({why}): {said}");
    }
    let form_card = named(&cards, "Confirm certificate").unwrap();
    let form = &form_card.view.as_ref().unwrap().form.as_ref().expect("the form read back").rows;
    let row = |label: &str| form.iter().find(|r| r.label == label).unwrap_or_else(|| panic!("{label}: {form:?}"));
    assert_eq!((row("City").status(), row("City").value.as_str()), (pb::FormStatus::Mismatch, "Londonderry"));
    assert_eq!((row("Level").status(), row("Level").value.as_str()), (pb::FormStatus::Untouched, "Advanced"));
    assert_eq!(row("Full name").status(), pb::FormStatus::Match);
    // Every answer was typed under the permission, with no card.
    let typed = l.stack.fixture.requests().iter().filter(|r| r.path().starts_with("/lesson/")).count();
    assert!(typed >= 6, "the lesson's pages were walked: {typed}");
    let once = pb::ResolveApprovalRequest {
        approval_id: form_card.approval_id.clone(),
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    l.stack.authorizer.resolve_approval(with(GATEWAY, once)).await.unwrap();
    let outcome = running.await.unwrap();
    assert_eq!(outcome.end, End::Done { reference: "ES-1001".into() }, "{}", outcome.log.join("\n"));
    assert!(
        !l.stack.fixture.requests().iter().any(|r| r.path().starts_with("/stories")),
        "the link off the lesson was never followed"
    );

    // TG2: the permission stopped, the next act asks again.
    let grants = pb::ListGrantsRequest { session_id: "s1".into(), active_only: true, min_position: None };
    let grant = l.stack.authorizer.list_grants(with(GATEWAY, grants)).await.unwrap().into_inner().grants;
    let revoke = pb::RevokeGrantRequest { grant_id: grant[0].grant_id.clone() };
    l.stack.authorizer.revoke_grant(with(GATEWAY, revoke)).await.unwrap();
    let again = Scripted::new()
        .then(|_| snapshot())
        .then(|v| on_named(v, "click", "Start", false, json!({})))
        .then(|v| on_named(v, "request_approval", "Start", false, json!({})));
    let running = l.run_from("/lesson/1", "demo-run-2", &[], again).await;
    let cards = cards_until(&l, "a card after the permission stopped", |c| named(c, "Start").is_some()).await;
    let card = named(&cards, "Start").unwrap();
    assert!(card.offer.is_some(), "the card offers the permission again: {card:?}");
    let deny = pb::ResolveApprovalRequest {
        approval_id: card.approval_id.clone(),
        resolution: pb::Resolution::Deny as i32,
        ..Default::default()
    };
    l.stack.authorizer.resolve_approval(with(GATEWAY, deny)).await.unwrap();
    assert_eq!(running.await.unwrap().end.reason(), "approval_rejected");
}
