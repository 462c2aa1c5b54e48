//! One browser session: its Chromium, its newest snapshot, and the act that re-checks a node of
//! that snapshot against the live page before anything reaches it. The runtime can only refuse:
//! every check here narrows, and none grants what the authorizer did not.

use std::collections::HashMap;
use std::sync::Arc;

use classifier::constraint::{DispatchConstraint, GrantKind};
use classifier::{Action, Consequence, FieldKind, Grant, PageFacts, TaskScope};
use fantoccini::elements::{Element, ElementRef};
use fantoccini::error::CmdError;
use serde_json::json;
use time::OffsetDateTime;

use crate::browser::{Browser, BrowserError, is_crash};
use crate::config::BrowserConfig;
use crate::fence::{Armed, FenceError, Handle, Scope};
use crate::guard::{self, GuardMode};
use crate::page::{self, FormField, NodeRead, PageRead, ReadError, Role};
use crate::records::{RecordError, RecordStore};

/// The closed codes of the tool contract, and the grant refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok,
    StaleSnapshot,
    RefNotFound,
    NameMismatch,
    RoleMismatch,
    NodeNotInteractable,
    ApprovalRequired,
    ApprovalTokenInvalid,
    OffOriginTarget,
    BudgetExceeded,
    GrantNotApplicable,
}

impl Code {
    pub fn name(self) -> &'static str {
        match self {
            Self::Ok => "OK",
            Self::StaleSnapshot => "STALE_SNAPSHOT",
            Self::RefNotFound => "REF_NOT_FOUND",
            Self::NameMismatch => "NAME_MISMATCH",
            Self::RoleMismatch => "ROLE_MISMATCH",
            Self::NodeNotInteractable => "NODE_NOT_INTERACTABLE",
            Self::ApprovalRequired => "APPROVAL_REQUIRED",
            Self::ApprovalTokenInvalid => "APPROVAL_TOKEN_INVALID",
            Self::OffOriginTarget => "OFF_ORIGIN_TARGET",
            Self::BudgetExceeded => "BUDGET_EXCEEDED",
            Self::GrantNotApplicable => "tool.browser.grant_not_applicable",
        }
    }

    /// Take a new snapshot and decide again; every other refusal ends the run.
    pub fn recoverable(self) -> bool {
        matches!(self, Self::StaleSnapshot | Self::RefNotFound)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitFor {
    #[default]
    Settle,
    Navigation,
    Dialog,
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActAction {
    Click,
    /// The value of this task-record field.
    Type {
        field_id: String,
    },
    Select {
        option: String,
    },
    Check,
    Press {
        key: String,
    },
    Scroll {
        by: i32,
    },
}

/// A validated act.
#[derive(Debug, Clone)]
pub struct ActInput {
    /// The act's place in the session: one more than the last act dispatched. A replay of a
    /// dispatched one is refused and dispatches nothing, so a retry can never act twice.
    pub sequence: u64,
    pub run_id: String,
    pub snapshot_id: String,
    pub node_ref: String,
    pub expected_name: String,
    pub expected_role: Role,
    pub consequential: bool,
    pub approval_token: Option<String>,
    pub wait_for: WaitFor,
    pub constraint: Option<DispatchConstraint>,
    pub action: ActAction,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActOutcome {
    pub code: Code,
    pub detail: String,
    pub snapshot_id: String,
    pub changed: bool,
    pub dispatched: bool,
    /// The act was sent but what it did is not known (the browser failed while it settled).
    pub outcome_unknown: bool,
    /// The coverage rule's stable code, for a grant refusal.
    pub reason: Option<&'static str>,
}

/// Failures that are not the contract's refusals.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{0}")]
    Invalid(String),
    /// The browser crashed or was killed; it was restarted with a clean profile.
    #[error("{0}")]
    Crashed(String),
    /// A browser dialog is open; nothing was done.
    #[error("a browser dialog is open: {0}")]
    Dialog(String),
    /// A retry may succeed (the browser could not be restarted, the authorizer was unreachable).
    #[error("{0}")]
    Unavailable(String),
    /// The snapshot is not the newest, or its node is gone: observe again.
    #[error("{0}")]
    Stale(String),
    /// The page broke the runtime's read (its script threw, or returned what the read cannot
    /// have made): a retry meets the same page.
    #[error("the page broke the runtime's read: {0}")]
    PageRefused(String),
    /// The act's sequence was dispatched already; nothing was done.
    #[error("sequence {0} was dispatched already; nothing was done")]
    Replayed(u64),
    /// The act's sequence skips ahead of the session's.
    #[error("the next sequence is {0}")]
    OutOfOrder(u64),
    /// The runtime's own configuration is wrong (its authorizer credential was refused).
    #[error("{0}")]
    Internal(String),
}

/// The WebDriver code point of a named key. Which keys a press may send is the classifier's one
/// list (`coverage::KEYS`); a test holds this table to it.
fn webdriver_key(name: &str) -> Option<&'static str> {
    Some(match name {
        "Enter" => "\u{e007}",
        "Tab" => "\u{e004}",
        "Escape" => "\u{e00c}",
        "Backspace" => "\u{e003}",
        "Delete" => "\u{e017}",
        "ArrowUp" => "\u{e013}",
        "ArrowDown" => "\u{e015}",
        "ArrowLeft" => "\u{e012}",
        "ArrowRight" => "\u{e014}",
        "Home" => "\u{e011}",
        "End" => "\u{e010}",
        "PageUp" => "\u{e00e}",
        "PageDown" => "\u{e00f}",
        "Space" | " " => " ",
        _ => return None,
    })
}

/// The key's WebDriver text: named keys only. A letter or digit would be literal text reaching
/// the page one act at a time, which only a task-record field may be.
pub fn key_text(key: &str) -> Option<&'static str> {
    classifier::coverage::KEYS.contains(&key).then(|| webdriver_key(key)).flatten()
}

#[cfg(test)]
mod keys {
    #[test]
    fn every_named_key_has_a_webdriver_code() {
        for key in classifier::coverage::KEYS {
            assert!(super::key_text(key).is_some(), "{key:?}");
        }
        assert_eq!(super::key_text("a"), None);
    }
}

/// The newest snapshot: refs are indexes into `nodes`, the page keeps the elements.
#[derive(Debug)]
struct Snapshot {
    id: String,
    url: String,
    nodes: Arc<[NodeRead]>,
}

/// What an observe returns.
#[derive(Debug)]
pub struct Observation {
    pub snapshot_id: String,
    pub page: PageRead,
    /// Shared with the session's copy of the snapshot.
    pub nodes: Arc<[NodeRead]>,
}

/// One field of a form, read back, with the record field the runtime typed into it.
#[derive(Debug, Clone)]
pub struct ReadBack {
    pub field: FormField,
    pub typed_field_id: Option<String>,
}

/// Where approval tokens are redeemed: the authorizer, for exactly this run, snapshot and ref.
pub trait Redeem: Send + Sync {
    fn redeem(
        &self,
        token: &str,
        run_id: &str,
        snapshot_id: &str,
        node_ref: &str,
    ) -> impl std::future::Future<Output = Result<(), RedeemError>> + Send;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedeemError {
    /// The authorizer refused the token: it does not match this run, snapshot and ref, or it
    /// was used, expired or never issued.
    Invalid(String),
    /// The authorizer could not be asked; nothing was dispatched.
    Unavailable(String),
    /// The authorizer refused the runtime itself (its credential): nothing was dispatched.
    Refused(String),
}

#[derive(Debug)]
pub struct Session {
    pub tenant: String,
    pub profile: String,
    pub allowed_origins: Vec<String>,
    pub start_url: String,
    pub max_steps: u32,
    /// Acts dispatched: the last sequence applied.
    pub applied: u64,
    /// Closed by its owner: calls that waited for it find nothing.
    pub closed: bool,
    browser: Option<Browser>,
    snapshot: Option<Snapshot>,
    /// Elements the runtime typed into, with the record field it typed.
    typed: HashMap<ElementRef, String>,
}

fn snapshot_id() -> String {
    let bytes: [u8; 6] = rand::random();
    format!("snap_{}", hex::encode(bytes))
}

fn origin_of(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    match u.origin() {
        o @ url::Origin::Tuple(..) => Some(o.ascii_serialization()),
        url::Origin::Opaque(_) => None,
    }
}

/// Errors the browser gives when it did not act: the element could not take the input.
fn not_acted(e: &CmdError) -> bool {
    use fantoccini::error::ErrorStatus as S;
    matches!(e, CmdError::Standard(w) if matches!(
        w.error,
        S::ElementClickIntercepted | S::ElementNotInteractable | S::InvalidElementState | S::StaleElementReference
    ))
}

impl Session {
    pub fn new(
        tenant: String,
        profile: String,
        allowed_origins: Vec<String>,
        start_url: String,
        max_steps: u32,
    ) -> Self {
        Self {
            tenant,
            profile,
            allowed_origins,
            start_url,
            max_steps,
            applied: 0,
            closed: false,
            browser: None,
            snapshot: None,
            typed: HashMap::new(),
        }
    }

    /// Starts Chromium with a fresh profile and opens the start page.
    pub async fn start(&mut self, config: &BrowserConfig) -> Result<(), SessionError> {
        let browser =
            Browser::start(config).await.map_err(|e: BrowserError| SessionError::Unavailable(e.to_string()))?;
        // The origin guard: no page of the browser loads a document off the run's origins.
        browser.fence.handle().keep_to(self.allowed_origins.clone());
        browser
            .client
            .goto(&self.start_url)
            .await
            .map_err(|e| SessionError::Unavailable(format!("the start page could not be opened: {e}")))?;
        // A start page that redirects off the run's origins meets the origin guard.
        // Read where it landed in the guard's world: the page's script cannot change the answer.
        let landed = match page::page_in_world(&browser.fence.handle()).await {
            Ok(p) => p.url,
            Err(e) => {
                browser.close().await;
                return Err(SessionError::Unavailable(format!("the start page could not be read: {e}")));
            }
        };
        if !origin_of(&landed).is_some_and(|o| self.allowed_origins.contains(&o)) {
            browser.close().await;
            return Err(SessionError::Invalid(format!(
                "the start page led off the run's origins (to {})",
                origin_of(&landed).unwrap_or_else(|| "an error page".into())
            )));
        }
        self.browser = Some(browser);
        self.snapshot = None;
        self.typed.clear();
        Ok(())
    }

    pub async fn close(&mut self) {
        self.snapshot = None;
        if let Some(b) = self.browser.take() {
            b.close().await;
        }
    }

    /// The chromedriver process whose group holds this session's Chromium.
    pub fn driver_pid(&self) -> Option<u32> {
        self.browser.as_ref().map(Browser::driver_pid)
    }

    /// The session's browser, started again (clean, at the start page) if an earlier restart
    /// failed.
    async fn client(&mut self, config: &BrowserConfig) -> Result<fantoccini::Client, SessionError> {
        Ok(self.running(config).await?.0)
    }

    /// The running browser's driver client and DevTools handle, starting it if needed.
    async fn running(&mut self, config: &BrowserConfig) -> Result<(fantoccini::Client, Handle), SessionError> {
        if self.browser.is_none() {
            self.start(config).await?;
        }
        self.browser
            .as_ref()
            .map(|b| (b.client.clone(), b.fence.handle()))
            .ok_or_else(|| SessionError::Unavailable("the session's browser is not running".into()))
    }

    /// After a call that did not come back in time (a page whose script hangs the renderer):
    /// the browser restarts clean at the start page.
    pub async fn hung(&mut self, config: &BrowserConfig) -> SessionError {
        tracing::warn!(profile = %self.profile, "the browser stopped answering; restarting it clean");
        self.restart(
            config,
            "the page stopped answering; the browser was restarted with a clean profile at the start page; \
             observe again (an act may have reached the page)",
            "the browser stopped answering and could not be restarted",
        )
        .await
    }

    /// Closes the browser and starts it clean: `restarted` when that worked, else `failed` with
    /// the reason.
    async fn restart(&mut self, config: &BrowserConfig, restarted: &str, failed: &str) -> SessionError {
        self.close().await;
        match self.start(config).await {
            Ok(()) => SessionError::Crashed(restarted.into()),
            Err(e) => SessionError::Unavailable(format!("{failed}: {e}")),
        }
    }

    /// Sorts a driver error: a crash restarts the browser clean; an open dialog is reported;
    /// the page throwing in the runtime's read is the page's doing.
    async fn failed(&mut self, e: CmdError, config: &BrowserConfig) -> SessionError {
        let gone = is_crash(&e) || self.browser.as_mut().is_some_and(|b| !b.driver_alive());
        if gone {
            tracing::warn!(error = %e, profile = %self.profile, "the browser stopped; restarting it clean");
            return self
                .restart(
                    config,
                    "the browser stopped and was restarted with a clean profile at the start page; observe again",
                    "the browser stopped and could not be restarted",
                )
                .await;
        }
        if e.is_unexpected_alert_open() {
            return SessionError::Dialog(e.to_string());
        }
        if e.is_javascript_error() {
            return SessionError::PageRefused(e.to_string());
        }
        SessionError::Unavailable(format!("the browser refused the command: {e}"))
    }

    async fn read_failed(&mut self, e: ReadError, config: &BrowserConfig) -> SessionError {
        match e {
            ReadError::Driver(e) => self.failed(e, config).await,
            ReadError::Shape(m) => SessionError::PageRefused(m),
            ReadError::DevTools(FenceError::Dialog) => SessionError::Dialog("a dialog is open on the page".into()),
            ReadError::DevTools(e) if e.document_gone() => {
                SessionError::PageRefused("the page navigated during the read: observe again".into())
            }
            // The page threw in the read.
            ReadError::DevTools(e @ FenceError::Refused { .. }) => SessionError::PageRefused(e.to_string()),
            // No answer in time: the renderer is stuck, or the browser is gone.
            ReadError::DevTools(_) => self.hung(config).await,
        }
    }

    /// A new snapshot of the live page; it voids the one before.
    pub async fn observe(&mut self, config: &BrowserConfig) -> Result<Observation, SessionError> {
        self.snapshot = None;
        let (_, devtools) = self.running(config).await?;
        let id = snapshot_id();
        let (page, nodes, _more) = match page::snapshot(&devtools, &id).await {
            Ok(r) => r,
            Err(e) => return Err(self.read_failed(e, config).await),
        };
        let nodes: Arc<[NodeRead]> = nodes.into();
        self.snapshot = Some(Snapshot { id: id.clone(), url: page.url.clone(), nodes: Arc::clone(&nodes) });
        Ok(Observation { snapshot_id: id, page, nodes })
    }

    pub async fn screenshot(&mut self, config: &BrowserConfig) -> Result<Vec<u8>, SessionError> {
        let client = self.client(config).await?;
        match client.screenshot().await {
            Ok(png) => Ok(png),
            Err(e) => Err(self.failed(e, config).await),
        }
    }

    /// The node `node_ref` names in the newest snapshot, with its index.
    fn node(&self, snapshot_id: &str, node_ref: &str) -> Result<(usize, &NodeRead), Code> {
        let snapshot = self.snapshot.as_ref().filter(|s| s.id == snapshot_id).ok_or(Code::StaleSnapshot)?;
        let index: usize = node_ref.strip_prefix('n').and_then(|d| d.parse().ok()).ok_or(Code::RefNotFound)?;
        snapshot.nodes.get(index).map(|n| (index, n)).ok_or(Code::RefNotFound)
    }

    /// Every field of the form that owns the node, read from the live page.
    pub async fn read_form(
        &mut self,
        snapshot_id: &str,
        node_ref: &str,
        config: &BrowserConfig,
    ) -> Result<(String, Vec<ReadBack>), SessionError> {
        let index = match self.node(snapshot_id, node_ref) {
            Ok((i, _)) => i,
            Err(code) => return Err(SessionError::Stale(format!("{}: observe again", code.name()))),
        };
        let (_, devtools) = self.running(config).await?;
        let (page, fields) = match page::form(&devtools, snapshot_id, index).await {
            Ok(r) => r,
            Err(e) => return Err(self.read_failed(e, config).await),
        };
        let fields = fields.ok_or_else(|| SessionError::Invalid("the node is gone or in no form".into()))?;
        let read = fields
            .into_iter()
            .map(|(field, el)| ReadBack { typed_field_id: el.and_then(|el| self.typed.get(&el).cloned()), field })
            .collect();
        Ok((page.url, read))
    }

    /// Re-checks the act against the live page and, only if nothing refuses, dispatches it.
    pub async fn act(
        &mut self,
        input: ActInput,
        records: &RecordStore,
        redeemer: &impl Redeem,
        config: &BrowserConfig,
        now: OffsetDateTime,
    ) -> Result<ActOutcome, SessionError> {
        if input.sequence <= self.applied {
            return Err(SessionError::Replayed(input.sequence));
        }
        if input.sequence != self.applied + 1 {
            return Err(SessionError::OutOfOrder(self.applied + 1));
        }
        let outcome = self.check_and_dispatch(&input, records, redeemer, config, now).await;
        // After any refusal but APPROVAL_REQUIRED (whose approval is bound to this snapshot and
        // ref), the snapshot is void: the next act needs fresh facts. So is it after a failure,
        // unless only the authorizer was out of reach. (Dispatch voided it already.)
        match &outcome {
            Ok(o) if o.code == Code::ApprovalRequired => {}
            Err(SessionError::Unavailable(_)) if self.snapshot.is_some() => {}
            _ => self.snapshot = None,
        }
        outcome
    }

    async fn check_and_dispatch(
        &mut self,
        input: &ActInput,
        records: &RecordStore,
        redeemer: &impl Redeem,
        config: &BrowserConfig,
        now: OffsetDateTime,
    ) -> Result<ActOutcome, SessionError> {
        let refuse = |code: Code, detail: String| ActOutcome {
            code,
            detail,
            snapshot_id: input.snapshot_id.clone(),
            changed: false,
            dispatched: false,
            outcome_unknown: false,
            reason: None,
        };
        if self.applied >= u64::from(self.max_steps) {
            return Ok(refuse(Code::BudgetExceeded, format!("the run's budget of {} steps is spent", self.max_steps)));
        }
        let (index, seen) = match self.node(&input.snapshot_id, &input.node_ref) {
            Ok((i, n)) => (i, n.clone()),
            Err(Code::StaleSnapshot) => {
                return Ok(refuse(Code::StaleSnapshot, "the snapshot is not the newest one: observe again".into()));
            }
            Err(code) => return Ok(refuse(code, format!("{} is not in the snapshot", input.node_ref))),
        };
        let seen_url = self.snapshot.as_ref().map(|s| s.url.clone()).unwrap_or_default();
        // The model's claim must be what the snapshot showed.
        if seen.role != Some(input.expected_role) {
            return Ok(refuse(Code::RoleMismatch, "the snapshot showed another role for this ref".into()));
        }
        if seen.name != input.expected_name {
            return Ok(refuse(Code::NameMismatch, "the snapshot showed another name for this ref".into()));
        }
        let (client, devtools) = self.running(config).await?;

        // The live page: URL, element and every label source, in one round trip.
        let (live_page, live) = match page::reread(&devtools, &input.snapshot_id, index).await {
            Ok(r) => r,
            Err(ReadError::DevTools(e)) if e.document_gone() => {
                return Ok(refuse(Code::StaleSnapshot, "the page navigated: observe again".into()));
            }
            Err(e) => return Err(self.read_failed(e, config).await),
        };
        let Some((live, element)) = live else {
            return Ok(refuse(Code::StaleSnapshot, "the page re-rendered: the node is gone".into()));
        };
        // ... and what the live page says now.
        if live.role != Some(input.expected_role) {
            let is = live.role.map_or("none of the listed roles", Role::code);
            return Ok(refuse(Code::RoleMismatch, format!("the node is now a {is}")));
        }
        if live.name != input.expected_name {
            return Ok(refuse(Code::NameMismatch, "the node's accessible name is not the expected one".into()));
        }
        // Anything else about the node or the page that moved since the snapshot (a label
        // source, a target, the URL) makes the snapshot's facts, and any approval of them, stale.
        let state =
            |n: &NodeRead| (n.state.checked, n.state.expanded, n.state.selected, n.state.filled, n.value.clone());
        let moved = live.facts != seen.facts || live.option_count != seen.option_count || state(&live) != state(&seen);
        if moved || live_page.url != seen_url {
            return Ok(refuse(Code::StaleSnapshot, "the page changed since the snapshot: observe again".into()));
        }
        let kind = live.facts.field_kind;

        // The run stays on its origins: the page, and wherever the act could lead.
        let allowed = |url: &str| origin_of(url).is_some_and(|o| self.allowed_origins.contains(&o));
        if !allowed(&live_page.url) {
            return Ok(refuse(Code::OffOriginTarget, "the page is not on the run's origins".into()));
        }
        let leads = !matches!(input.action, ActAction::Type { .. } | ActAction::Scroll { .. });
        if let Some(t) = live.facts.nav_targets.iter().find(|t| leads && !allowed(t)) {
            let shown = origin_of(t).unwrap_or_else(|| t.split(':').next().unwrap_or_default().to_owned());
            return Ok(refuse(Code::OffOriginTarget, format!("the act could lead to {shown}")));
        }

        let text = match &input.action {
            ActAction::Type { field_id } => Some(match records.value(&self.tenant, &input.run_id, field_id) {
                Ok(v) => v,
                Err(e @ (RecordError::Invalid(_) | RecordError::NoField { .. })) => {
                    return Err(SessionError::Invalid(e.to_string()));
                }
                Err(e @ RecordError::Malformed(..)) => return Err(SessionError::Internal(e.to_string())),
                Err(e @ RecordError::Unreadable(..)) => return Err(SessionError::Unavailable(e.to_string())),
            }),
            _ => None,
        };
        let action = match (&input.action, &text) {
            (ActAction::Type { .. }, Some(t)) => Action::Type { text: t.clone() },
            (ActAction::Select { option }, _) => Action::Select { option: option.clone() },
            (ActAction::Check, _) => Action::Check,
            (ActAction::Press { key }, _) => Action::Press { key: key.clone() },
            (ActAction::Scroll { by }, _) => Action::Scroll { by: *by },
            _ => Action::Click,
        };

        // Under a grant's constraint: the same coverage rules as the authorizer, on live facts,
        // first, so that a refusal names the same rule the worker would have named.
        let page_facts = PageFacts { url: live_page.url.clone() };
        if let Some(c) = &input.constraint {
            if let Err(e) = c.validate() {
                return Err(SessionError::Invalid(e.to_string()));
            }
            let not_applicable = |reason: &'static str, detail: String| ActOutcome {
                reason: Some(reason),
                ..refuse(Code::GrantNotApplicable, detail)
            };
            if now >= c.not_after {
                return Ok(not_applicable("constraint_expired", "the grant's constraint has expired".into()));
            }
            if live.option_count > classifier::coverage::MAX_OPTIONS {
                return Ok(not_applicable("too_many_options", "the select has too many options".into()));
            }
            if let Err(e) = covered(c, &action, &live, &page_facts) {
                return Ok(not_applicable(e.reason.code(), e.detail));
            }
        }

        if !live.visible {
            return Ok(refuse(Code::NodeNotInteractable, "the node is not rendered".into()));
        }
        if live.facts.disabled && !matches!(input.action, ActAction::Scroll { .. }) {
            return Ok(refuse(Code::NodeNotInteractable, "the node is disabled".into()));
        }
        let fits = match &input.action {
            // Never a secret's field, whatever the record holds.
            ActAction::Type { .. } => classifier::coverage::takes_text(kind) && !kind.is_secret(),
            ActAction::Select { .. } => kind == FieldKind::Select,
            ActAction::Check => matches!(kind, FieldKind::Checkbox | FieldKind::Radio | FieldKind::CustomChoice),
            _ => true,
        };
        if !fits {
            return Ok(refuse(Code::NodeNotInteractable, "the action does not apply to this kind of control".into()));
        }
        if kind.is_credential() {
            return Ok(refuse(
                Code::NodeNotInteractable,
                "credential and one-time-code fields are never acted on".into(),
            ));
        }

        // The runtime's own judgement of consequence: a named consequence, or a label or option
        // list it could not read whole, needs a token.
        let consequence = classifier::classify(&live.facts, &page_facts);
        let unread = live.facts.truncated || live.option_count > classifier::coverage::MAX_OPTIONS;
        let consequential = matches!(consequence, Consequence::Named(_)) || unread;
        if consequential != input.consequential {
            tracing::info!(
                run = %input.run_id, node = %input.node_ref, model = input.consequential, runtime = consequential,
                "the model and the runtime disagree on consequence"
            );
        }
        if consequential && input.approval_token.is_none() {
            let reads = if unread { "a label the runtime could not read whole" } else { consequence.code() };
            return Ok(refuse(
                Code::ApprovalRequired,
                format!("the node reads as {reads}: request an approval for this snapshot and ref"),
            ));
        }

        // Under a constraint the fence holds every document and ping to the grant's prefix while
        // the act runs and settles.
        let armed = match (&input.constraint, &self.browser) {
            (Some(c), Some(b)) => Some(Armed::new(
                b.fence.handle(),
                Scope { origins: c.origins.clone(), path_prefix: c.path_prefix.clone() },
            )),
            _ => None,
        };

        // The click guard or the focus check, armed on the element the read covered: a click's
        // centre must hit it, a key or text needs it to hold focus, and until the input is sent
        // nothing else takes a trusted press, click, key or text, in the page or its frames.
        let mode = match &input.action {
            ActAction::Check if live.state.checked => None,
            ActAction::Click | ActAction::Check => Some(GuardMode::Click),
            ActAction::Type { .. } | ActAction::Press { .. } => Some(GuardMode::Keys),
            ActAction::Select { .. } => Some(GuardMode::Hold),
            ActAction::Scroll { .. } => None,
        };
        let held = match mode {
            None => None,
            Some(mode) => match guard::arm(&devtools, &element, mode).await {
                Ok(Ok(held)) => Some(held),
                Ok(Err(why)) => {
                    // Focusing may have set something off: the fence holds it until settled.
                    if let Some(armed) = &armed {
                        armed.settle(std::time::Instant::now()).await;
                    }
                    return Ok(refuse(Code::NodeNotInteractable, why));
                }
                Err(e) if e.document_gone() => {
                    return Ok(refuse(Code::StaleSnapshot, "the page navigated: observe again".into()));
                }
                Err(e) => return Err(self.read_failed(ReadError::DevTools(e), config).await),
            },
        };
        // Every way out from here to the input gives the guard back.
        macro_rules! released {
            ($e:expr) => {{
                guard::release(&devtools, held).await;
                return $e;
            }};
        }

        // The token is redeemed last, once nothing else can refuse: a redeemed approval is spent.
        if let Some(token) = &input.approval_token {
            match redeemer.redeem(token, &input.run_id, &input.snapshot_id, &input.node_ref).await {
                Ok(()) => {}
                Err(RedeemError::Invalid(m)) => released!(Ok(refuse(Code::ApprovalTokenInvalid, m))),
                Err(RedeemError::Unavailable(m)) => {
                    released!(Err(SessionError::Unavailable(format!("the approval token could not be redeemed: {m}"))))
                }
                Err(RedeemError::Refused(m)) => released!(Err(SessionError::Internal(m))),
            }
        }

        // Dispatch: the act's own input, and nothing else. The sequence is spent and the snapshot
        // voided before any input is sent, so that a call cancelled from here on (its client gone,
        // its deadline passed) can never be replayed into a second act.
        let sequence = self.applied + 1;
        self.applied = sequence;
        self.snapshot = None;
        let el = Element::from_element_id(client.clone(), element.clone());
        let sent = match &input.action {
            ActAction::Click => el.click().await,
            ActAction::Type { field_id } => {
                let value = text.unwrap_or_default();
                let cleared = if kind == FieldKind::EditableRegion { Ok(()) } else { el.clear().await };
                match cleared {
                    Ok(()) => {
                        self.typed.insert(element.clone(), field_id.clone());
                        // The clear reached the page already: from here a failure leaves the
                        // outcome unknown, never "not dispatched".
                        if let Err(e) = el.send_keys(&value).await {
                            let why = self.failed(e, config).await;
                            released!(Ok(ActOutcome {
                                code: Code::Ok,
                                dispatched: true,
                                outcome_unknown: true,
                                changed: true,
                                ..refuse(Code::Ok, why.to_string())
                            }));
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            ActAction::Select { option } => {
                // The option is picked here, in the runtime's own copy of the list, by the same
                // rule the coverage read; only its index reaches the page.
                let chosen = classifier::coverage::choosable(&live.facts.options, option);
                let index = chosen.first().and_then(|c| live.facts.options.iter().position(|o| std::ptr::eq(o, *c)));
                let Some(index) = index else {
                    self.applied = sequence - 1;
                    released!(Ok(refuse(Code::NodeNotInteractable, "no option has that value or label".into())));
                };
                const PICK: &str = "const get = Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype, 'options').get; \
                    return get.call(arguments[0])[arguments[1]] || null;";
                let arg = serde_json::to_value(&el).unwrap_or_default();
                match client.execute(PICK, vec![arg, json!(index)]).await {
                    // Choosing through the option itself fires the page's input and change events.
                    Ok(v) => match page::element_ref(&v) {
                        Some(id) => Element::from_element_id(client.clone(), id).click().await,
                        None => {
                            self.applied = sequence - 1;
                            released!(Ok(refuse(Code::StaleSnapshot, "the select's options changed".into())));
                        }
                    },
                    Err(e) => Err(e),
                }
            }
            ActAction::Check => {
                if live.state.checked {
                    Ok(())
                } else {
                    el.click().await
                }
            }
            ActAction::Press { key } => match key_text(key) {
                Some(k) => el.send_keys(k).await,
                None => released!(Err(SessionError::Invalid(format!("key {key:?} is not a key the runtime presses")))),
            },
            ActAction::Scroll { by } => {
                let arg = serde_json::to_value(&el).unwrap_or_default();
                client
                    .execute(
                        "arguments[0].scrollIntoView({ block: 'nearest' }); window.scrollBy(0, arguments[1]);",
                        vec![arg, json!(by)],
                    )
                    .await
                    .map(|_| ())
            }
        };
        let dispatched = ActOutcome { code: Code::Ok, dispatched: true, ..refuse(Code::Ok, String::new()) };
        match sent {
            Ok(()) => {}
            // The browser did not act: the sequence is not spent.
            Err(e) if e.is_stale_element_reference() => {
                self.applied = sequence - 1;
                released!(Ok(refuse(Code::StaleSnapshot, "the page re-rendered: the node is gone".into())));
            }
            Err(e) if not_acted(&e) => {
                self.applied = sequence - 1;
                released!(Ok(refuse(Code::NodeNotInteractable, format!("the browser did not act: {e}"))));
            }
            // Anything else may have reached the page: the outcome is unknown, and the sequence
            // is spent so that a retry cannot act twice.
            Err(e) => {
                let why = self.failed(e, config).await;
                released!(Ok(ActOutcome {
                    outcome_unknown: true,
                    changed: true,
                    detail: why.to_string(),
                    ..dispatched
                }));
            }
        }

        let input_sent = std::time::Instant::now();
        let waited = match input.wait_for {
            WaitFor::None => Ok(()),
            WaitFor::Settle => page::settle(&client).await.map_err(ReadError::Driver),
            WaitFor::Navigation => page::navigation(&client, &devtools, &live_page).await,
            WaitFor::Dialog => wait_dialog(&client).await,
        };
        let unknown =
            |detail: String| ActOutcome { outcome_unknown: true, changed: true, detail, ..dispatched.clone() };
        let mut outcome = match waited {
            // A dialog opened by the act answers every script: the page did change.
            Err(ReadError::Driver(e)) if e.is_unexpected_alert_open() => ActOutcome { changed: true, ..dispatched },
            Err(ReadError::DevTools(FenceError::Dialog)) => ActOutcome { changed: true, ..dispatched },
            Err(e) => {
                let why = self.read_failed(e, config).await;
                unknown(why.to_string())
            }
            // The page after the act, once everything the act queued without delay has run, and
            // what the guard stopped meanwhile.
            Ok(()) => match guard::after(&devtools, held.as_ref()).await {
                Ok(None) => ActOutcome { changed: true, ..dispatched },
                Ok(Some((p, report))) => {
                    let changed =
                        p.url != live_page.url || p.time_origin != live_page.time_origin || p.sig != live_page.sig;
                    // A press, click, key or text the guard stopped, a guard the page disarmed or
                    // whose document it reopened leaves the outcome unknown. A document the act
                    // replaced took its guard with it.
                    let same_document = p.time_origin == live_page.time_origin;
                    match report {
                        Some(r) if r.stopped > 0 => unknown(format!(
                            "the guard stopped {} press(es), click(s) or key(s) aimed elsewhere",
                            r.stopped
                        )),
                        Some(r) if same_document && !r.alive => {
                            unknown("the page reopened its document during the act: the guard no longer held it".into())
                        }
                        Some(r) if same_document && r.held != "armed" && held.is_some() => {
                            unknown("the guard was not held through the act".into())
                        }
                        // A click whose input never reached the element went somewhere the
                        // guard could not see (a frame the page brought in stopped it there).
                        Some(r) if same_document && mode == Some(GuardMode::Click) && !r.reached => {
                            unknown("the click did not reach the node".into())
                        }
                        _ => ActOutcome { changed, ..dispatched },
                    }
                }
                Err(e) => unknown(format!("the page could not be read after the act: {e}")),
            },
        };
        if let Some(armed) = armed {
            if !armed.settle(input_sent).await {
                outcome.outcome_unknown = true;
                outcome.changed = true;
                outcome.detail = format!("the page did not settle within {:?}", page::BOUND);
            }
            let report = armed.finish();
            if !report.refused.is_empty() || report.opened > 0 {
                // A refused document leaves the browser's error page: what the act did is unknown.
                outcome.outcome_unknown = true;
                outcome.changed = true;
                let places: Vec<String> =
                    report.refused.iter().map(|u| origin_of(u).unwrap_or_else(|| "a non-https URL".into())).collect();
                let fenced = format!(
                    "the fence refused {} request(s) outside the grant's prefix ({}) and closed {} new window(s)",
                    report.refused.len(),
                    places.join(", "),
                    report.opened
                );
                outcome.detail =
                    if outcome.detail.is_empty() { fenced } else { format!("{}; {fenced}", outcome.detail) };
            }
        }
        Ok(outcome)
    }
}

/// The classifier's coverage under the constraint: a task grant on one of its origins with its
/// per-action text cap; a standing grant on one of its origins.
fn covered(
    c: &DispatchConstraint,
    action: &Action,
    live: &NodeRead,
    page: &PageFacts,
) -> Result<(), classifier::NotCovered> {
    match c.kind {
        GrantKind::Task => {
            let mut last = None;
            for origin in &c.origins {
                let grant = Grant::Task(TaskScope {
                    origin: origin.clone(),
                    path_prefix: c.path_prefix.clone(),
                    chars_remaining: c.max_text_chars,
                });
                match classifier::covers(&grant, action, &live.facts, page) {
                    Ok(()) => return Ok(()),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or(classifier::NotCovered {
                reason: classifier::Reason::PageOutsideScope,
                detail: "the constraint names no origin".into(),
            }))
        }
        GrantKind::Standing => {
            if !origin_of(&page.url).is_some_and(|o| c.origins.contains(&o)) {
                return Err(classifier::NotCovered {
                    reason: classifier::Reason::PageOutsideScope,
                    detail: "the page is not on the standing grant's origin".into(),
                });
            }
            classifier::covers(&Grant::Standing, action, &live.facts, page)
        }
    }
}

/// Waits, bounded, until a browser dialog or a modal dialog element is open.
async fn wait_dialog(client: &fantoccini::Client) -> Result<(), ReadError> {
    let deadline = tokio::time::Instant::now() + page::BOUND;
    loop {
        match client.get_alert_text().await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_no_such_alert() => {}
            Err(e) => return Err(ReadError::Driver(e)),
        }
        let open = client
            .execute("return !!document.querySelector('dialog[open], [role=dialog], [role=alertdialog]');", vec![])
            .await
            .map_err(ReadError::Driver)?;
        if open.as_bool() == Some(true) || tokio::time::Instant::now() > deadline {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}
