//! The runtime's reads of the live page: one script round trip (`read.js`) for a whole snapshot
//! or for one element, and the settle wait after an act.

use std::time::Duration;

use classifier::{ElementFacts, FieldKind, SelectOption};
use fantoccini::Client;
use fantoccini::elements::{Element, ElementRef};
use fantoccini::error::CmdError;
use serde::Deserialize;
use serde_json::{Value, json};

const READ: &str = include_str!("read.js");

/// The closed set of roles a node can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Button,
    Link,
    Checkbox,
    Radio,
    Option,
    Tab,
    MenuItem,
    Combobox,
    Textbox,
    Searchbox,
    Listbox,
}

impl Role {
    pub const ALL: [Self; 11] = [
        Self::Button,
        Self::Link,
        Self::Checkbox,
        Self::Radio,
        Self::Option,
        Self::Tab,
        Self::MenuItem,
        Self::Combobox,
        Self::Textbox,
        Self::Searchbox,
        Self::Listbox,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Self::Button => "button",
            Self::Link => "link",
            Self::Checkbox => "checkbox",
            Self::Radio => "radio",
            Self::Option => "option",
            Self::Tab => "tab",
            Self::MenuItem => "menuitem",
            Self::Combobox => "combobox",
            Self::Textbox => "textbox",
            Self::Searchbox => "searchbox",
            Self::Listbox => "listbox",
        }
    }

    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }
}

/// The page a read saw.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PageRead {
    pub url: String,
    pub title: String,
    /// `performance.timeOrigin`: a new document has a new one.
    pub time_origin: f64,
    /// Elements and text length: a cheap sign that the DOM changed.
    #[serde(default)]
    pub sig: String,
}

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
#[derive(Debug, Clone)]
pub struct NodeRead {
    pub element: ElementRef,
    pub role: Option<Role>,
    pub name: String,
    pub value: String,
    pub state: NodeState,
    pub visible: bool,
    pub facts: ElementFacts,
    /// Every option a select has (the facts carry at most one more than the limit).
    pub option_count: usize,
}

#[derive(Deserialize)]
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
}

#[derive(Deserialize)]
struct RawNode {
    el: Value,
    role: String,
    fact: RawFact,
    visible: bool,
    state: NodeState,
    value: String,
}

#[derive(Deserialize)]
struct RawSnapshot {
    page: PageRead,
    nodes: Vec<RawNode>,
    #[serde(default)]
    more: bool,
}

#[derive(Deserialize)]
struct RawOne {
    page: PageRead,
    node: Option<RawNode>,
}

/// What went wrong reading: the browser's own error, or a reply the script cannot have made.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Driver(#[from] CmdError),
    #[error("the page read returned an unexpected shape: {0}")]
    Shape(String),
}

fn element_ref(v: &Value) -> Result<ElementRef, ReadError> {
    v.as_object()
        .and_then(|o| o.values().next())
        .and_then(Value::as_str)
        .map(|id| ElementRef::from(id.to_owned()))
        .ok_or_else(|| ReadError::Shape("a node without its element".into()))
}

fn node(raw: RawNode) -> Result<NodeRead, ReadError> {
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
        facts_missing: false,
    };
    Ok(NodeRead {
        element: element_ref(&raw.el)?,
        role: Role::from_code(&raw.role),
        name: f.name.unwrap_or_default(),
        value: raw.value,
        state: raw.state,
        visible: raw.visible,
        facts,
        option_count: f.option_count,
    })
}

/// Every node of the page's flat tree, in one script round trip.
pub async fn snapshot(client: &Client) -> Result<(PageRead, Vec<NodeRead>, bool), ReadError> {
    let v = client.execute(READ, vec![json!("observe")]).await?;
    let raw: RawSnapshot = serde_json::from_value(v).map_err(|e| ReadError::Shape(e.to_string()))?;
    let nodes = raw.nodes.into_iter().map(node).collect::<Result<_, _>>()?;
    Ok((raw.page, nodes, raw.more))
}

/// One element read again in the live page, with the live URL: `None` when it left the
/// document. A stale reference is the driver's `stale element reference` error.
pub async fn reread(client: &Client, element: &ElementRef) -> Result<(PageRead, Option<NodeRead>), ReadError> {
    let el = Element::from_element_id(client.clone(), element.clone());
    let arg = serde_json::to_value(&el).map_err(|e| ReadError::Shape(e.to_string()))?;
    let v = client.execute(READ, vec![json!("one"), arg]).await?;
    let raw: RawOne = serde_json::from_value(v).map_err(|e| ReadError::Shape(e.to_string()))?;
    Ok((raw.page, raw.node.map(node).transpose()?))
}

/// The page as it is now: URL, title, document and DOM signature.
pub async fn page(client: &Client) -> Result<PageRead, ReadError> {
    let v = client
        .execute(
            "return { url: location.href, title: document.title, time_origin: performance.timeOrigin, \
             sig: document.getElementsByTagName('*').length + ':' + (document.body ? document.body.textContent.length : 0) };",
            vec![],
        )
        .await?;
    serde_json::from_value(v).map_err(|e| ReadError::Shape(e.to_string()))
}

/// Settled: the document has loaded and neither its DOM nor its resource list has changed for
/// `QUIET`, or `BOUND` has passed. A navigation during the wait starts it again in the new
/// document, within the same bound.
pub const QUIET: Duration = Duration::from_millis(150);
pub const BOUND: Duration = Duration::from_secs(5);

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

/// Waits until a new document (or a new URL) replaces `before`, bounded, then settles.
pub async fn navigation(client: &Client, before: &PageRead) -> Result<(), ReadError> {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        match page(client).await {
            Ok(now) if now.time_origin != before.time_origin || now.url != before.url => break,
            Ok(_) | Err(ReadError::Driver(CmdError::Standard(_))) => {}
            Err(e) => return Err(e),
        }
        if tokio::time::Instant::now() > deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    settle(client).await.map_err(ReadError::Driver)
}
