//! The runtime's reads of the live page: the browser's accessibility tree for roles and names
//! (`platform`), one script round trip (`read.js`) for everything else of a whole snapshot or of
//! one element, and the settle wait after an act.

use std::time::Duration;

use classifier::{ElementFacts, FieldKind, SelectOption};
use fantoccini::Client;
use fantoccini::elements::ElementRef;
use fantoccini::error::CmdError;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::fence::Handle;
use crate::guard::{self, BOUND, PageRead};
use crate::platform;
pub use crate::role::Role;

/// `read.js` after the constants it shares with the Rust side, spelt from them.
pub(crate) static READ: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let roles: Vec<String> = Role::ALL.iter().map(|r| format!("'{}'", r.code())).collect();
    format!(
        "const MAX = {};\nconst MAX_OPTIONS = {};\nconst MAX_NODES = {MAX_NODES};\nconst ROLES = new Set([{}]);\n{}",
        classifier::coverage::MAX_LABEL_CHARS,
        classifier::coverage::MAX_OPTIONS + 1,
        roles.join(", "),
        include_str!("read.js")
    )
});

/// The most nodes one read returns; past it the read says there are more.
pub const MAX_NODES: usize = 10_000;

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct NodeState {
    pub disabled: bool,
    pub checked: bool,
    pub expanded: bool,
    pub selected: bool,
    pub filled: bool,
    pub focused: bool,
}

/// One element as the runtime read it: what the model sees and the facts beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRead {
    pub role: Option<Role>,
    pub name: String,
    pub value: String,
    pub state: NodeState,
    pub visible: bool,
    pub facts: ElementFacts,
    /// Every option a select has (the facts carry at most one more than the limit).
    pub option_count: usize,
    /// The keys that would submit the element's form.
    pub submit_keys: Vec<String>,
    /// Its place among the elements the page's read keeps for the snapshot.
    pub slot: usize,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawFact {
    role: String,
    name: Option<String>,
    aria_label: Option<String>,
    labelledby: Vec<String>,
    labels: Vec<String>,
    title: Option<String>,
    placeholder: Option<String>,
    alt: Option<String>,
    value: Option<String>,
    visible_text: Option<String>,
    dialog_name: Option<String>,
    field_kind: FieldKind,
    options: Vec<SelectOption>,
    option_count: usize,
    nav_targets: Vec<String>,
    download: bool,
    disabled: bool,
    truncated: bool,
    submits_form: bool,
    opens_window: bool,
    submit_method: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawNode {
    /// Its place among the elements the accessibility tree exposed, when it is one of them.
    ax: Option<usize>,
    role: String,
    fact: RawFact,
    visible: bool,
    submit_keys: Vec<String>,
    state: NodeState,
    value: String,
}

#[derive(Deserialize)]
struct RawSnapshot {
    page: PageRead,
    #[serde(default)]
    nodes: Vec<RawNode>,
    #[serde(default)]
    more: bool,
    #[serde(default)]
    alerts: Vec<String>,
}

/// One observation of the page: its nodes, whether there were more than a read returns, and the
/// text of its alert regions.
#[derive(Debug)]
pub struct Snapshot {
    pub page: PageRead,
    pub nodes: Vec<NodeRead>,
    pub more: bool,
    pub alerts: Vec<String>,
}

#[derive(Deserialize)]
struct RawOne {
    page: PageRead,
    node: Option<RawNode>,
}

/// One field of a form, read back from the live page.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct FormField {
    pub label: String,
    pub name: String,
    pub kind: FieldKind,
    /// Read whole, sensitive kinds too: the runtime redacts before anything leaves it
    /// (`review::sensitive`).
    pub value: String,
    pub checked: bool,
    /// The field's language: its nearest `lang` attribute, the document's included (`en-GB`).
    pub lang: String,
    /// The field's placeholder (`DD/MM/YYYY`): how the page asks for a date to be written.
    pub hint: String,
    /// A control whose submitted value no read can see (a form-associated custom element): no
    /// card can show the form whole.
    pub opaque: bool,
}

#[derive(Deserialize)]
struct RawForm {
    page: PageRead,
    #[serde(default)]
    gone: bool,
    /// How many forms a click on the node could submit.
    #[serde(default)]
    forms: u32,
    #[serde(default)]
    fields: Vec<FormField>,
}

/// The form a click on a node could submit, read back from the live page.
#[derive(Debug)]
pub enum FormRead {
    /// The node left the page, or the page is no longer the snapshot's.
    Gone,
    /// A click on it submits no form.
    NoForm,
    /// It could submit more than one: no read-back can show them as one.
    Several(u32),
    /// Every field of the one form, each with its element.
    Form(Vec<(FormField, Option<ElementRef>)>),
}

/// What went wrong reading: the browser's own error, or a reply the script cannot have made.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Driver(#[from] CmdError),
    #[error("the page read returned an unexpected shape: {0}")]
    Shape(String),
    #[error(transparent)]
    DevTools(#[from] crate::fence::FenceError),
}

/// A WebDriver element reference as the driver returns it: `{"element-6066-…": id}`.
pub fn element_ref(v: &Value) -> Option<ElementRef> {
    v.as_object().and_then(|o| o.values().next()).and_then(Value::as_str).map(|id| ElementRef::from(id.to_owned()))
}

fn shape(e: impl std::fmt::Display) -> ReadError {
    ReadError::Shape(e.to_string())
}

fn node(raw: RawNode, slot: usize) -> NodeRead {
    let f = raw.fact;
    let facts = ElementFacts {
        role: f.role,
        name: f.name.clone(),
        aria_label: f.aria_label,
        labelledby: f.labelledby,
        labels: f.labels,
        title: f.title,
        placeholder: f.placeholder,
        alt: f.alt,
        value: f.value,
        visible_text: f.visible_text,
        dialog_name: f.dialog_name,
        field_kind: f.field_kind,
        options: f.options,
        nav_targets: f.nav_targets,
        download: f.download,
        disabled: f.disabled,
        truncated: f.truncated,
        submits_form: f.submits_form,
        opens_window: f.opens_window,
        submit_method: f.submit_method,
        facts_missing: false,
    };
    NodeRead {
        role: Role::from_code(&raw.role),
        name: f.name.unwrap_or_default(),
        value: raw.value,
        state: raw.state,
        visible: raw.visible,
        facts,
        option_count: f.option_count,
        submit_keys: raw.submit_keys,
        slot,
    }
}

/// The node as the tree shows it: its role and name, the name cut as every label source is.
fn show(mut n: NodeRead, (role, name): (Option<Role>, String)) -> NodeRead {
    if let Some(role) = role {
        role.code().clone_into(&mut n.facts.role);
    }
    n.role = role;
    let cut: String = name.chars().take(classifier::coverage::MAX_LABEL_CHARS).collect();
    if cut.len() < name.len() {
        n.facts.truncated = true;
    }
    n.facts.name = Some(cut.clone()).filter(|c| !c.is_empty());
    n.name = cut;
    n
}

/// Every node of the page: the accessibility tree read first, the elements it exposes under a
/// role of the closed set passed to one script call in the guard's isolated world, which lists
/// them and whatever else it takes for interactive; that world keeps the nodes' elements under
/// `snapshot_id` for the act that names one, out of the page's sight.
pub async fn snapshot(h: &Handle, snapshot_id: &str) -> Result<Snapshot, ReadError> {
    let read = async {
        let world = guard::world(h).await?;
        let (_, frame) = h.tab().ok_or_else(|| shape("no tab is attached"))?;
        let mut tree = platform::tree(h, &world.0, &frame).await?;
        // Another document's tree names nothing here: every node is then named one by one.
        let whole = platform::is_documents(h, &world.0, &tree).await?;
        if !whole {
            tree = platform::Tree::default();
        }
        // The script lists at most MAX_NODES, and takes each exposed element as an argument.
        let mut exposed = platform::listed(&tree);
        exposed.truncate(MAX_NODES);
        let ids: Vec<i64> = exposed.iter().map(|(id, _, _)| *id).collect();
        let objects = platform::resolve(h, &world, &ids).await?;
        let mut args = vec![json!({ "value": "observe" }), json!({ "value": snapshot_id })];
        // The script's `ax` is a place among the elements passed, which skip any that left.
        let mut passed = Vec::with_capacity(objects.len());
        for (i, object) in objects.into_iter().enumerate() {
            if let Some(object) = object {
                args.push(json!({ "objectId": object }));
                passed.push(i);
            }
        }
        let reply = guard::call_in(h, &world, &READ, args, false).await?;
        let (json, own) = split(h, &reply).await?;
        let raw: RawSnapshot = serde_json::from_str(&json).map_err(shape)?;
        let own = platform::backend_ids(h, &world.0, &own).await?;
        if !whole {
            let ids: Vec<i64> = own.iter().flatten().copied().collect();
            tree.nodes = platform::each(h, &world.0, &ids).await?;
        }
        let mut own = own.into_iter();
        let mut nodes = Vec::with_capacity(raw.nodes.len());
        for (slot, raw) in raw.nodes.into_iter().enumerate() {
            let ax = raw.ax.and_then(|k| passed.get(k)).map(|i| &exposed[*i]);
            let n = node(raw, slot);
            let shown = match ax {
                Some((_, role, name)) => Some((Some(*role), name.clone())),
                None => {
                    let id = own.next().flatten();
                    platform::shown(n.role, id.and_then(|id| tree.nodes.get(&id)))
                }
            };
            nodes.extend(shown.map(|s| show(n, s)));
        }
        Ok(Snapshot { page: raw.page, nodes, more: raw.more, alerts: raw.alerts })
    };
    let read = read.await;
    guard::release_reads(h);
    read
}

/// The read's `[json, elements]` reply as a remote object: the JSON, and the second item.
async fn split(h: &Handle, reply: &Value) -> Result<(String, Value), ReadError> {
    let json = guard::call_on(h, reply, "function () { return this[0]; }", true).await;
    let second = guard::call_on(h, reply, "function () { return this[1]; }", false).await;
    guard::release_object(h, reply);
    let json = json?["value"].as_str().map(str::to_owned).ok_or_else(|| shape("the read's JSON is missing"))?;
    Ok((json, second?))
}

/// Node `slot` of `snapshot_id` read again in the live page, with the live URL, its role and
/// name from the live accessibility tree, and its element for the act: `None` when the page no
/// longer holds that snapshot or the node left the document.
pub async fn reread(
    h: &Handle,
    snapshot_id: &str,
    slot: usize,
) -> Result<(PageRead, Option<(NodeRead, ElementRef)>), ReadError> {
    let read = async {
        let reply = guard::call_in_world(h, &READ, &[json!("one"), json!(snapshot_id), json!(slot)], false).await?;
        let (json, el) = split(h, &reply).await?;
        let raw: RawOne = serde_json::from_str(&json).map_err(shape)?;
        let Some((el, backend)) = guard::element_node(h, &el).await? else { return Ok((raw.page, None)) };
        let Some(n) = raw.node.map(|n| node(n, slot)) else { return Ok((raw.page, None)) };
        let (session, _) = h.tab().ok_or_else(|| shape("no tab is attached"))?;
        let tree = platform::one(h, &session, backend).await?;
        // A node the tree now hides keeps its place with no role: the act meets ROLE_MISMATCH.
        let shown = platform::shown(n.role, tree.as_ref()).unwrap_or((None, n.name.clone()));
        Ok((raw.page, Some((show(n, shown), el))))
    };
    let read = read.await;
    guard::release_reads(h);
    read
}

/// The form a click on node `index` could submit (its own, a label's control's, or one inside
/// it), every field with its element.
pub async fn form(h: &Handle, snapshot_id: &str, index: usize) -> Result<(PageRead, FormRead), ReadError> {
    let read = async {
        let reply = guard::call_in_world(h, &READ, &[json!("form"), json!(snapshot_id), json!(index)], false).await?;
        let (json, els) = split(h, &reply).await?;
        let raw: RawForm = serde_json::from_str(&json).map_err(shape)?;
        let read = match raw.forms {
            _ if raw.gone => FormRead::Gone,
            0 => FormRead::NoForm,
            1 => {
                let mut elements = Vec::with_capacity(raw.fields.len());
                for i in 0..raw.fields.len() {
                    let item = guard::call_on(h, &els, &format!("function () {{ return this[{i}]; }}"), false).await?;
                    elements.push(guard::element_of(h, &item).await?);
                }
                FormRead::Form(raw.fields.into_iter().zip(elements).collect())
            }
            n => FormRead::Several(n),
        };
        Ok((raw.page, read))
    };
    let read = read.await;
    guard::release_reads(h);
    read
}

/// Settled: the document has loaded and neither its DOM nor its resource list has changed for
/// `QUIET`, or [`BOUND`] has passed. A navigation during the wait starts it again in the new
/// document, within the same bound.
pub const QUIET: Duration = Duration::from_millis(150);

const SETTLE: &str = r#"
const [quiet, bound, done] = arguments;
const start = performance.now();
let last = start;
const obs = new MutationObserver(() => { last = performance.now(); });
obs.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
let resources = performance.getEntriesByType('resource').length;
const tick = () => {
  const now = performance.now();
  const r = performance.getEntriesByType('resource').length;
  if (r !== resources) { resources = r; last = now; }
  if ((document.readyState === 'complete' && now - last >= quiet) || now - start >= bound) {
    obs.disconnect();
    done(true);
  } else {
    setTimeout(tick, 25);
  }
};
tick();
"#;

/// Waits until the page settles (see [`QUIET`]).
pub async fn settle(client: &Client) -> Result<(), CmdError> {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let args = vec![json!(QUIET.as_millis()), json!(left.as_millis())];
        match client.execute_async(SETTLE, args).await {
            Ok(_) => return Ok(()),
            // The document went away under the script: settle the new one.
            Err(CmdError::Standard(w)) if w.error == fantoccini::error::ErrorStatus::JavascriptError => continue,
            Err(CmdError::Standard(w)) if w.error == fantoccini::error::ErrorStatus::ScriptTimeout => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// The page as it is now, read in the guard's isolated world (markup cannot shadow what it reads
/// there the way `<img name=title>` shadows `document.title` in the page's own world).
pub async fn page_in_world(h: &Handle) -> Result<PageRead, ReadError> {
    let v = guard::call_in_world(h, "return globalThis.__grantLedgerGuard.page();", &[], true).await?;
    serde_json::from_value(v["value"].clone()).map_err(shape)
}

/// Waits until a new document (or a new URL) replaces `before`, bounded, then settles.
pub async fn navigation(client: &Client, h: &Handle, before: &PageRead) -> Result<(), ReadError> {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        match page_in_world(h).await {
            Ok(now) if now.time_origin != before.time_origin || now.url != before.url => break,
            Ok(_) => {}
            Err(ReadError::DevTools(e)) if e.document_gone() => {}
            Err(e) => return Err(e),
        }
        if tokio::time::Instant::now() > deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    settle(client).await.map_err(ReadError::Driver)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constants `read.js` shares with the Rust side are spelt once, here: the script itself
    /// declares none of them (a second `const` would also fail the read in the browser).
    #[test]
    fn the_read_takes_its_shared_constants_from_rust() {
        let script = include_str!("read.js");
        for name in ["MAX", "MAX_OPTIONS", "MAX_NODES", "ROLES"] {
            let declared = format!("const {name} =");
            assert!(!script.contains(&declared), "read.js declares {name} itself");
            assert_eq!(READ.matches(&declared).count(), 1, "{name} is prepended once");
        }
        let roles: Vec<&str> = Role::ALL.iter().map(|r| r.code()).collect();
        assert!(READ.contains(&format!("const ROLES = new Set(['{}']);", roles.join("', '"))), "{}", &READ[..300]);
        assert!(READ.contains(&format!("const MAX_NODES = {MAX_NODES};")));
    }
}
