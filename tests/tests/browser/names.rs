//! Every node is named as the browser names it: the snapshot's role and name are the ones
//! Chromium's accessibility tree reports for the element, read here over the protocol, on a page
//! of the cases where a script's own reading went wrong.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;
use tests::platform::{self, TreeNode};

/// Each case's element carries an id, so the test finds its tree node by the DOM.
const NAMES: &str = r#"<!doctype html><html><head><title>Names</title>
<style>
.pay::before { content: "Pay " }
.now::after { content: " now" }
.gone { display: none }
.swap::before { content: "Keep " }
.swapped::before { content: "Delete " }
.escaped::after { content: "Remove\A account"; white-space: pre }
</style></head><body>
<label><input type="checkbox" id="embedded">Flash the screen <input type="number" value="3" aria-label="count"> times</label>
<button id="before" class="pay">order</button>
<button id="labelled-gen" class="now" aria-label="Continue">Go</button>
<span id="hidden-label" class="gone">Hidden label</span>
<button id="hidden-target" aria-labelledby="hidden-label" aria-label="Visible label">X</button>
<div style="display: contents"><button id="contents">Delete account</button></div>
<slot-host id="host"><span>Remove</span></slot-host>
<closed-host id="closed"></closed-host>
<div id="fallback" role="foo button" tabindex="0">Fallback</div>
<button id="unknown" role="foo">Unknown role</button>
<a id="amp" href="/lesson/2" role="&amp;">Amp link</a>
<button id="alt"><img alt="Star" src="data:image/gif;base64,R0lGODlhAQABAAAAACw="> rating</button>
<label id="country-label">Country <select id="country"><option>France</option><option>Spain</option></select></label>
<input type="number" id="number" aria-label="Copies">
<input type="range" id="range" aria-label="Volume">
<label aria-hidden="true">Secret <input id="aria-hidden" type="text"></label>
<button id="swap" class="swap">item</button>
<button id="nbsp">Later&nbsp;on</button>
<button id="escaped" class="escaped" aria-label="Next">Go</button>
<div id="editable" contenteditable="true">Draft</div>
<script>
customElements.define('slot-host', class extends HTMLElement {
  constructor() { super(); this.attachShadow({ mode: 'open' }).innerHTML = '<button id="slotted"><slot></slot> item</button>'; }
});
customElements.define('closed-host', class extends HTMLElement {
  constructor() { super(); this.attachShadow({ mode: 'closed' }).innerHTML = '<button id="inside-closed">Close account</button>'; }
});
const poll = setInterval(async () => {
  if (!(await fetch('/lesson/go-swap')).ok) return;
  clearInterval(poll);
  document.getElementById('swap').className = 'swapped';
  fetch('/lesson/swap-done');
}, 50);
</script>
</body></html>"#;

/// The snapshot node the tree's node is listed as: same role, same name.
fn listed<'a>(o: &'a rt::ObserveReply, t: &TreeNode) -> &'a rt::Node {
    let name = platform::cut(&t.name);
    o.nodes.iter().find(|n| platform::role_code(n) == t.role && n.name == name).unwrap_or_else(|| {
        let all: Vec<_> = o.nodes.iter().map(|n| (platform::role_code(n), n.name.as_str())).collect();
        panic!("the tree's {} {:?} is not listed: {all:?}", t.role, t.name)
    })
}

#[tokio::test]
async fn each_node_has_the_role_and_name_the_accessibility_tree_gives() {
    let mut s = stack().await;
    s.fixture.page(LESSON, "/lesson/names", NAMES);
    let session = s.open("profile-1", "/lesson/names", 50).await.unwrap();
    let o = s.observe(&session).await;
    let h = s.served.devtools(&session).await.expect("a running browser");
    let tree = platform::read(&h).await.expect("the page's own tree");

    // Each case as the platform answers it, and where that answer differs from a naive read.
    let case = |id: &str| platform::by_id(&tree, id);
    for id in [
        "embedded",
        "before",
        "labelled-gen",
        "hidden-target",
        "contents",
        "fallback",
        "unknown",
        "amp",
        "alt",
        "country",
        "number",
        "range",
        "swap",
        "nbsp",
    ] {
        let t = case(id);
        assert!(t.listed(), "#{id} is exposed under a role of the set: {t:?}");
        listed(&o, t);
    }
    // The value of a control inside a label is part of the label's name.
    assert!(case("embedded").name.contains('3'), "{:?}", case("embedded"));
    // Generated content is in the name; a hidden labelledby target wins over aria-label.
    assert!(case("before").name.starts_with("Pay"), "{:?}", case("before"));
    assert_eq!(case("hidden-target").name, "Hidden label");
    // An unknown token before a valid one, an unknown role alone: the first valid role, or the
    // element's own.
    assert_eq!((case("fallback").role.as_str(), case("unknown").role.as_str()), ("button", "button"));
    assert_eq!((case("number").role.as_str(), case("range").role.as_str()), ("spinbutton", "slider"));
    // An image's alt beside text; a select's option does not leak into its own name.
    assert!(case("alt").name.contains("Star"), "{:?}", case("alt"));
    assert!(!case("country").name.contains("France"), "{:?}", case("country"));

    // Shadow roots, open and closed: the tree reaches both, and so does the snapshot.
    let open = tree.iter().find(|t| t.listed() && t.name.ends_with("item") && t.name.contains("Remove"));
    listed(&o, open.expect("the slotted button's tree node"));
    let closed = tree.iter().find(|t| t.listed() && t.name == "Close account").expect("the closed root's button");
    listed(&o, closed);
    // A label the platform hides hides its input.
    assert!(!case("aria-hidden").listed(), "{:?}", case("aria-hidden"));
    assert!(o.nodes.iter().all(|n| !n.name.contains("Secret")), "{:?}", o.nodes);

    // A no-break space is the space it shows.
    assert!(o.nodes.iter().any(|n| n.name == "Later on"), "{:?}", o.nodes);
    // An editable region Chromium exposes under no role of the set: listed on the runtime's
    // reading, as a text box, with the tree's name (none).
    assert!(!case("editable").listed(), "{:?}", case("editable"));
    let textboxes: Vec<_> = o.nodes.iter().filter(|n| n.role == rt::Role::Textbox as i32).collect();
    assert!(textboxes.iter().any(|n| n.name == case("editable").name), "{textboxes:?}");

    // A slider is shown, and no tool but scroll acts on it.
    let slider = o.nodes.iter().find(|n| n.role == rt::Role::Slider as i32).expect("the range input");
    let mut typed = click(&session, &o, slider);
    typed.action = Some(rt::act_request::Action::Type(rt::Type { field_id: "word".into() }));
    assert_eq!(s.act(typed).await.unwrap_err().code(), Code::InvalidArgument);

    // What CSS adds reaches the classifier even where the name is the aria-label, its escapes
    // read as CSS reads them (`\A` a line break, not a letter).
    let (_, facts) = node(&o, "Continue");
    assert!(facts.visible_text.contains("now"), "{facts:?}");
    let (_, facts) = node(&o, "Next");
    assert!(facts.visible_text.contains("Remove account"), "{facts:?}");
    let (_, facts) = node(&o, &case("before").name.clone());
    assert!(facts.name.contains("Pay"), "{facts:?}");
}

/// The act's live check reads the tree too: the snapshot's quote matches on an unchanged page,
/// and a name only CSS changed is a mismatch.
#[tokio::test]
async fn the_live_check_compares_the_trees_name() {
    let mut s = stack().await;
    s.fixture.page(LESSON, "/lesson/names", NAMES);
    let session = s.open("profile-1", "/lesson/names", 50).await.unwrap();

    // A name only CSS changes: the runtime's own read of the text would not see it.
    let o = s.observe(&session).await;
    let (swap, _) = node(&o, "Keep item");
    let act = click(&session, &o, swap);
    page_changes(&s, "swap").await;
    refused(&s.act(act).await.unwrap(), rt::ActCode::NameMismatch);

    // The quote copied from a fresh snapshot matches the live tree, where the tree's name is not
    // what the page's own text gives (generated text), on an act the owner's ticket allows.
    let o = s.observe(&session).await;
    assert!(o.nodes.iter().any(|n| n.name == "Delete item"), "{:?}", o.nodes);
    let (pay, _) = node(&o, "Pay order");
    let reply = s.act(click(&session, &o, pay)).await.unwrap();
    assert!(reply.ok, "{reply:?}");
}
