//! What a page does to the read and the fence: hidden exits, shadowed properties, keys, forms.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

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
    // An act the owner approved is fenced to its page and the destinations its card showed:
    // this control's card showed none, so where it goes is refused too.
    let o = s.observe(&session).await;
    let reply = s.act(click(&session, &o, node(&o, "Next word").0)).await.unwrap();
    assert!(reply.dispatched && reply.outcome_unknown, "{reply:?}");
    assert!(reply.detail.contains("fence refused"), "{reply:?}");
    assert!(!documents(&s).contains(&format!("GET {LESSON}/account/settings")));
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
        ("Map Zone", rt::Role::Button, rt::ActCode::OffOriginTarget),
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

/// A picture's pixels: its width, its channels and its bytes, 8 bits each.
fn decoded(png: &[u8]) -> (usize, usize, Vec<u8>) {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(png.to_vec()));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().unwrap();
    let mut data = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut data).unwrap();
    data.truncate(info.buffer_size());
    (info.width as usize, info.color_type.samples(), data)
}

/// Fields at fixed places: a password and a key the page filled in, a name, and a button.
const PRIVATE: &str = r#"<!doctype html><title>Private</title>
<style>
body { margin: 0; background: #fff; }
input, button { position: absolute; left: 0; width: 200px; height: 30px; border: 0; padding: 0; margin: 0; background: #fff; font: 20px monospace; }
#pw { top: 0; } #key { top: 50px; } #name { top: 100px; } button { top: 150px; width: 120px; background: #fff; }
</style>
<input id="pw" type="password" value="hunter2hunter2" aria-label="Password">
<input id="key" value="sk_live_4eC39HqLyjWDarjtT1zdp7dc" aria-label="API key">
<input id="name" value="Ada" aria-label="Name">
<button>Continue</button>"#;

/// The picture of a card's tab paints over every field a card redacts, in its pixels (a password,
/// credential-shaped text), and outlines the card's element with the rest dimmed.
#[tokio::test]
async fn a_cards_picture_masks_what_the_card_redacts_and_outlines_its_element() {
    let mut s = stack().await;
    s.fixture.page(LESSON, "/lesson/private", PRIVATE);
    let session = s.open("profile-1", "/lesson/private", 50).await.unwrap();
    let o = s.observe(&session).await;
    let (button, _) = node(&o, "Continue");
    let view = |node_ref: &str| rt::LiveViewRequest {
        browser_profile_id: "profile-1".into(),
        snapshot_id: o.snapshot_id.clone(),
        node_ref: node_ref.into(),
    };
    let pixels = |png: &[u8]| {
        let (width, channels, data) = decoded(png);
        move |x: usize, y: usize| {
            let i = (y * width + x) * channels;
            data[i..i + 3].to_vec()
        }
    };
    const MASK: [u8; 3] = [95, 99, 104];
    let plain = s.runtime.live_view(with(GATEWAY, view(""))).await.unwrap().into_inner();
    assert!(plain.masked, "a card's picture is masked");
    assert_eq!(plain.masked_fields, 2, "the password and the key");
    assert_eq!(plain.element, rt::PictureElement::None as i32);
    let at = pixels(&plain.png);
    assert_eq!(at(150, 15), MASK, "the password field is painted over");
    assert_eq!(at(150, 65), MASK, "the credential-shaped text is painted over");
    assert_eq!(at(150, 115), [255, 255, 255], "an ordinary field is as the page shows it");

    let outlined = s.runtime.live_view(with(GATEWAY, view(&button.r#ref))).await.unwrap().into_inner();
    assert_eq!(outlined.element, rt::PictureElement::Outlined as i32);
    let at = pixels(&outlined.png);
    assert_eq!(at(150, 15), MASK, "still painted over");
    assert_eq!(at(115, 152), [255, 255, 255], "the card’s element as it is");
    assert_eq!(at(60, 147), [255, 122, 0], "a ring around it");
    assert_eq!(at(150, 115), [191, 191, 191], "the rest of the page dimmed");
    // A ref the snapshot does not hold outlines nothing, and says so.
    let gone = s.runtime.live_view(with(GATEWAY, view("n999"))).await.unwrap().into_inner();
    assert_eq!(gone.element, rt::PictureElement::Gone as i32);
}

const WINDOWS: &str = r#"<!doctype html><title>Windows</title>
<a href="/lesson/2" target="_blank">Glossary</a>
<a href="/lesson/3" target="_self">Next</a>
<form action="/lesson/answer" method="post"><input name="method" value="shadowed">
<button>Send answer</button><button formmethod="get" formtarget="help">Ask for help</button></form>
<form action="/lesson/look" target="_blank"><button>Look up</button></form>"#;

const BASED: &str = r#"<!doctype html><title>Based</title><base target="_blank">
<a href="/lesson/2">Onward</a>"#;

/// The read names how each submit sends its form and which acts open a new window: a link's or
/// form's target, a button's formmethod and formtarget, the page's base target. A control named
/// `method` does not hide the form's own.
#[tokio::test]
async fn the_read_names_how_a_form_is_sent_and_what_opens_a_window() {
    let mut s = stack().await;
    s.fixture.page(LESSON, "/lesson/windows", WINDOWS);
    s.fixture.page(LESSON, "/lesson/based", BASED);
    let session = s.open("profile-1", "/lesson/windows", 50).await.unwrap();
    let o = s.observe(&session).await;
    for (name, window, method) in [
        ("Glossary", true, ""),
        ("Next", false, ""),
        ("Send answer", false, "post"),
        ("Ask for help", true, "get"),
        ("Look up", true, "get"),
    ] {
        let (_, facts) = node(&o, name);
        assert_eq!((facts.opens_window, facts.submit_method.as_str()), (window, method), "{name}");
    }
    let session = s.open("profile-2", "/lesson/based", 50).await.unwrap();
    let o = s.observe(&session).await;
    assert!(node(&o, "Onward").1.opens_window, "the page's base target opens a new window");
}

/// A password field on a red ground that jumps between places every few milliseconds, and a
/// text field the page fills with a key when script runs.
const JUMPING: &str = r#"<!doctype html><title>Jumping</title>
<style>body { margin: 0; background: #fff; } #pw { position: absolute; width: 120px; height: 30px; border: 0; background: #f00; color: #f00; }</style>
<input id="pw" type="password" value="hunter2hunter2" aria-label="Password">
<button>Continue</button>
<script>
const pw = document.getElementById('pw');
let i = 0;
setInterval(() => { i = (i + 1) % 12; pw.style.left = (i % 4) * 150 + 'px'; pw.style.top = Math.floor(i / 4) * 60 + 40 + 'px'; }, 4);
</script>"#;

/// A field that moves while its picture is taken is still painted over: the page is held still
/// between the read of its box and the picture, and runs on after.
#[tokio::test]
async fn a_moving_private_field_is_still_masked() {
    let mut s = stack().await;
    s.fixture.page(LESSON, "/lesson/jumping", JUMPING);
    let session = s.open("profile-1", "/lesson/jumping", 50).await.unwrap();
    let o = s.observe(&session).await;
    let view = rt::LiveViewRequest {
        browser_profile_id: "profile-1".into(),
        snapshot_id: o.snapshot_id.clone(),
        node_ref: String::new(),
    };
    for round in 0..8 {
        let shown = s.runtime.live_view(with(GATEWAY, view.clone())).await.unwrap().into_inner();
        let (_, channels, data) = decoded(&shown.png);
        let red = data.chunks(channels).filter(|p| p[0] == 255 && p[1] == 0 && p[2] == 0).count();
        assert_eq!(red, 0, "round {round}: {red} pixels of the password field show");
    }
    // The page runs on after its picture: the field still moves.
    let o = s.observe(&session).await;
    assert!(o.nodes.iter().any(|n| n.name == "Password"));
}

/// Private values where a page's read cannot see them or their box hides them, all on red: a
/// card number in a closed shadow root, a password in a frame, a key in an editable region of
/// no height, and a key at the end of a long text.
const HIDDEN_PRIVATE: &str = r#"<!doctype html><title>Hidden</title>
<style>body { margin: 0; background: #fff; } * { font: 20px monospace; }</style>
<div id="host" style="position:absolute;left:0;top:0;width:200px;height:40px"></div>
<iframe style="position:absolute;left:0;top:60px;width:200px;height:60px;border:0" srcdoc="<body style='margin:0;background:#f00'><input type=password value=hunter2hunter2 style='background:#f00;border:0'></body>"></iframe>
<div contenteditable="true" style="position:absolute;left:0;top:140px;height:0;overflow:visible;color:#f00">sk_live_4eC39HqLyjWDarjtT1zdp7dc</div>
<textarea id="ta" aria-label="Notes" style="position:absolute;left:0;top:200px;width:400px;height:60px;color:#f00;border:0"></textarea>
<button style="position:absolute;left:0;top:300px">Continue</button>
<script>
document.getElementById('host').attachShadow({ mode: 'closed' }).innerHTML =
  '<input autocomplete="cc-number" aria-label="Card" value="4242424242424242" style="background:#f00;color:#f00;border:0;width:150px;height:30px">';
const ta = document.getElementById('ta');
ta.value = 'a '.repeat(550) + 'sk_live_4eC39HqLyjWDarjtT1zdp7dc';
ta.scrollTop = 1e6;
</script>"#;

/// What the page's read cannot look into is painted over whole (a closed shadow root, a frame),
/// and a private value is masked where it paints, however long or however boxed.
#[tokio::test]
async fn private_values_the_read_cannot_see_are_masked_too() {
    let mut s = stack().await;
    s.fixture.page(LESSON, "/lesson/hidden", HIDDEN_PRIVATE);
    let session = s.open("profile-1", "/lesson/hidden", 50).await.unwrap();
    let o = s.observe(&session).await;
    let view = rt::LiveViewRequest {
        browser_profile_id: "profile-1".into(),
        snapshot_id: o.snapshot_id.clone(),
        node_ref: String::new(),
    };
    let shown = s.runtime.live_view(with(GATEWAY, view)).await.unwrap().into_inner();
    assert!(shown.masked_fields >= 4, "{} parts painted over", shown.masked_fields);
    let (_, channels, data) = decoded(&shown.png);
    let red = data.chunks(channels).filter(|p| p[0] > 200 && p[1] < 60 && p[2] < 60).count();
    assert_eq!(red, 0, "{red} red pixels of a private value show");
}
