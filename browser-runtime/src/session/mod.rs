//! One browser session: its Chromium, its newest snapshot, and the act that re-checks a node of
//! that snapshot against the live page before anything reaches it. The runtime can only refuse:
//! every check here narrows, and none grants what the authorizer did not.

mod act;
mod after;
mod check;
mod owner;

pub use owner::{LiveView, Picture};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use fantoccini::elements::ElementRef;
use fantoccini::error::CmdError;
use proto::ticket::Keyring;
use proto::v1 as gl;

use crate::browser::{Browser, BrowserError, is_crash};
use crate::config::BrowserConfig;
use crate::fence::{FenceError, Handle};
use crate::guard::PageRead;
use crate::page::{self, FormField, NodeRead, ReadError, Role};

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

    /// Take a new snapshot and decide again (for an approval or a grant refusal: observe again
    /// and ask); every other refusal ends the run.
    pub fn recoverable(self) -> bool {
        matches!(self, Self::StaleSnapshot | Self::RefNotFound | Self::ApprovalRequired | Self::GrantNotApplicable)
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

/// A validated act. Its `Debug` leaves out the token and the ticket: neither belongs in a log.
#[derive(Clone)]
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
    /// The authorizer's sealed allow of this act; checked against the live act, never believed.
    pub ticket: Option<gl::DispatchTicket>,
    pub action: ActAction,
}

impl std::fmt::Debug for ActInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActInput")
            .field("sequence", &self.sequence)
            .field("run_id", &self.run_id)
            .field("snapshot_id", &self.snapshot_id)
            .field("node_ref", &self.node_ref)
            .field("expected_name", &self.expected_name)
            .field("expected_role", &self.expected_role)
            .field("consequential", &self.consequential)
            .field("approval_token", &self.approval_token.as_ref().map(|_| "[REDACTED]"))
            .field("wait_for", &self.wait_for)
            .field("ticket", &self.ticket.as_ref().map(|t| &t.key_id))
            .field("action", &self.action)
            .finish()
    }
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
    /// Whether the runtime read the live node as consequential (none when the act was refused
    /// before it read it): the model's claim is compared with it.
    pub consequential: Option<bool>,
    /// The agent may observe again and go on: the code's own answer, or a refusal that names
    /// another way to the same end (a key that would submit: click instead).
    pub recoverable: bool,
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
    /// A service this one needs runs an older release: nothing was done until it is upgraded.
    #[error("{0}")]
    Older(String),
}

impl SessionError {
    /// The tool contract's code for a failure the page or the browser caused, and whether the
    /// agent may observe again and go on; `None` for a failure of the call or the service.
    /// A dialog leaves nothing to act on until a person answers it (the agent never does): the
    /// node is not interactable, and the agent may look again. A browser restarted clean, a
    /// page that moved under the read: the snapshot is stale. A page that broke the read: its
    /// nodes are not interactable now; a new read may meet a page that settled.
    pub fn contract_code(&self) -> Option<(Code, bool)> {
        match self {
            Self::Dialog(_) | Self::PageRefused(_) => Some((Code::NodeNotInteractable, true)),
            Self::Crashed(_) | Self::Stale(_) => Some((Code::StaleSnapshot, true)),
            _ => None,
        }
    }
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

/// What the owner sends to a tab taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerInput {
    Click {
        x: u32,
        y: u32,
    },
    Text(String),
    Key(String),
    /// OK or Cancel on the dialog the page shows, with a prompt's answer, naming the dialog's
    /// text as the owner saw it.
    Answer {
        accept: bool,
        text: Option<String>,
        seen: String,
    },
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
    /// The text of the page's alert regions.
    pub alerts: Vec<String>,
}

/// One field of a form, read back, with the record field the runtime typed into it.
#[derive(Debug, Clone)]
pub struct ReadBack {
    pub field: FormField,
    /// The record field the runtime typed into it, and the run it typed for.
    pub typed_field_id: Option<String>,
    pub typed_run: Option<String>,
    /// The run the runtime set this box, radio button or list for (a check, a select, a click).
    pub chosen_run: Option<String>,
}

/// The authorizer as the runtime asks it: an approval token redeemed for exactly this run,
/// snapshot, ref and act, into a dispatch ticket; and the owner's Stop read for a ticket just
/// before its act is dispatched.
pub trait Redeem: Send + Sync {
    fn redeem(
        &self,
        redemption: Redemption<'_>,
    ) -> impl std::future::Future<Output = Result<gl::DispatchTicket, RedeemError>> + Send;

    /// `None` when the owner stopped the agent since the ticket's decision (or its grant
    /// ended); otherwise how soon after the call began the act must start.
    fn check_stop(
        &self,
        ticket: &gl::DispatchTicket,
    ) -> impl std::future::Future<Output = Result<Option<std::time::Duration>, RedeemError>> + Send;
}

/// What a token is spent on: the act, where, and in which browser profile.
#[derive(Debug, Clone)]
pub struct Redemption<'a> {
    pub token: &'a str,
    pub run_id: &'a str,
    pub snapshot_id: &'a str,
    pub node_ref: &'a str,
    pub action: &'a ActAction,
    /// The keyed digest of the record value a type types: the authorizer is sent it, never the
    /// text.
    pub text_digest: Option<Vec<u8>>,
    pub profile: &'a str,
    /// The live node's role and name as the snapshot's facts carry them, and the page's origin.
    pub element_role: &'a str,
    pub element_name: &'a str,
    pub page_origin: &'a str,
    /// A click's: the keyed digest of the live form its node is in (none outside a form).
    pub form_digest: Option<Vec<u8>>,
}

/// What may allow an act: a ticket checked with these keys, or a token redeemed here.
#[derive(Debug)]
pub struct Allow<'a, R> {
    pub tickets: &'a Keyring,
    pub redeemer: &'a R,
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
    /// The authorizer is of an older release, without the call: nothing was dispatched until it
    /// is upgraded (the release order puts it first).
    Older(String),
}

#[derive(Debug)]
pub struct Session {
    pub tenant: String,
    /// The owner the session was opened for: a ticket must be theirs.
    pub principal: String,
    pub profile: String,
    pub allowed_origins: Vec<String>,
    pub start_url: String,
    pub max_steps: u32,
    /// Acts dispatched: the last sequence applied.
    pub applied: u64,
    /// Every snapshot id this session issued: a card names one, and the owner's look at a tab
    /// is the look at the session that issued the card's snapshot, never another on the profile.
    issued: HashSet<String>,
    /// When a call last used the session (its lock taken for a call).
    pub last_used: std::time::Instant,
    /// The owner took the tab over: the agent's calls are refused from then on, and only the
    /// owner's input (through the gateway) reaches the page.
    pub taken_over: bool,
    /// The guard in the tab's frames stands down for the owner's own input (set at their first,
    /// in this browser).
    owner_frames: bool,
    /// The owner has sent input to the tab: it is theirs for good.
    acted_by_owner: bool,
    /// Closed by its owner: calls that waited for it find nothing.
    pub closed: bool,
    browser: Option<Browser>,
    snapshot: Option<Snapshot>,
    /// Elements the runtime typed into, with the run and the record field it typed.
    typed: HashMap<ElementRef, (String, String)>,
    /// Boxes, radio buttons and lists the runtime set, with the run it set them for.
    chosen: HashMap<ElementRef, String>,
    /// Tickets dispatched: each at most once.
    spent: HashSet<String>,
    /// The newest act's own reading of the live node's consequence, when it got that far.
    read_consequential: std::cell::Cell<Option<bool>>,
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
    /// A session of `(tenant, principal, profile)`.
    pub fn new(
        (tenant, principal, profile): (String, String, String),
        allowed_origins: Vec<String>,
        start_url: String,
        max_steps: u32,
    ) -> Self {
        Self {
            tenant,
            principal,
            profile,
            allowed_origins,
            start_url,
            max_steps,
            applied: 0,
            closed: false,
            taken_over: false,
            owner_frames: false,
            acted_by_owner: false,
            issued: HashSet::new(),
            last_used: std::time::Instant::now(),
            browser: None,
            snapshot: None,
            typed: HashMap::new(),
            chosen: HashMap::new(),
            spent: HashSet::new(),
            read_consequential: std::cell::Cell::new(None),
        }
    }

    /// Starts Chromium with a fresh profile and opens the start page.
    pub async fn start(&mut self, config: &BrowserConfig) -> Result<(), SessionError> {
        // A new browser's frames hold the guard again until handed to the owner again.
        self.owner_frames = false;
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
        self.chosen.clear();
        Ok(())
    }

    pub async fn close(&mut self) {
        self.snapshot = None;
        if let Some(b) = self.browser.take() {
            b.close().await;
        }
    }

    /// Whether this session issued snapshot `id`.
    pub fn issued(&self, id: &str) -> bool {
        self.issued.contains(id)
    }

    /// The chromedriver process whose group holds this session's Chromium.
    pub fn driver_pid(&self) -> Option<u32> {
        self.browser.as_ref().map(Browser::driver_pid)
    }

    /// The running browser's DevTools connection.
    #[cfg(feature = "fixture")]
    pub fn devtools(&self) -> Option<Handle> {
        self.browser.as_ref().map(|b| b.fence.handle())
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
        let restarts = &crate::metrics::METRICS.restarts;
        match self.start(config).await {
            Ok(()) => {
                restarts.get_or_create(&[("outcome", "restarted")]).inc();
                SessionError::Crashed(restarted.into())
            }
            Err(e) => {
                restarts.get_or_create(&[("outcome", "failed")]).inc();
                SessionError::Unavailable(format!("{failed}: {e}"))
            }
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
        let page::Snapshot { page, nodes, alerts, .. } = match page::snapshot(&devtools, &id).await {
            Ok(r) => r,
            Err(e) => return Err(self.read_failed(e, config).await),
        };
        let nodes: Arc<[NodeRead]> = nodes.into();
        self.snapshot = Some(Snapshot { id: id.clone(), url: page.url.clone(), nodes: Arc::clone(&nodes) });
        self.issued.insert(id.clone());
        Ok(Observation { snapshot_id: id, page, nodes, alerts })
    }

    pub async fn screenshot(&mut self, config: &BrowserConfig) -> Result<Vec<u8>, SessionError> {
        let client = self.client(config).await?;
        match client.screenshot().await {
            Ok(png) => Ok(png),
            Err(e) => Err(self.failed(e, config).await),
        }
    }

    /// The node `node_ref` names in the newest snapshot, with its place among the elements the
    /// page's read keeps.
    fn node(&self, snapshot_id: &str, node_ref: &str) -> Result<(usize, &NodeRead), Code> {
        let snapshot = self.snapshot.as_ref().filter(|s| s.id == snapshot_id).ok_or(Code::StaleSnapshot)?;
        let index: usize = node_ref.strip_prefix('n').and_then(|d| d.parse().ok()).ok_or(Code::RefNotFound)?;
        snapshot.nodes.get(index).map(|n| (n.slot, n)).ok_or(Code::RefNotFound)
    }

    /// Every field of the form that owns the node, read from the live page.
    pub async fn read_form(
        &mut self,
        snapshot_id: &str,
        node_ref: &str,
        config: &BrowserConfig,
    ) -> Result<(String, FormReadBack), SessionError> {
        let index = match self.node(snapshot_id, node_ref) {
            Ok((i, _)) => i,
            Err(code) => return Err(SessionError::Stale(format!("{}: observe again", code.name()))),
        };
        let (_, devtools) = self.running(config).await?;
        let (page, fields) = match page::form(&devtools, snapshot_id, index).await {
            Ok(r) => r,
            Err(e) => return Err(self.read_failed(e, config).await),
        };
        let fields = match fields {
            page::FormRead::Form(fields) => fields,
            page::FormRead::NoForm => return Ok((page.url, FormReadBack::Forms(0))),
            page::FormRead::Several(n) => return Ok((page.url, FormReadBack::Forms(n))),
            page::FormRead::Gone => return Err(SessionError::Stale("the node is gone: observe again".into())),
        };
        let read = fields
            .into_iter()
            .map(|(field, el)| {
                let typed = el.as_ref().and_then(|el| self.typed.get(el).cloned());
                let chosen_run = el.as_ref().and_then(|el| self.chosen.get(el).cloned());
                ReadBack {
                    chosen_run,
                    typed_run: typed.as_ref().map(|(run, _)| run.clone()),
                    typed_field_id: typed.map(|(_, f)| f),
                    field,
                }
            })
            .collect();
        Ok((page.url, FormReadBack::Form(read)))
    }
}

/// What a read-back found: the one form a click could submit, or how many there were otherwise
/// (none, or more than one that no card can show as one).
#[derive(Debug)]
pub enum FormReadBack {
    Form(Vec<ReadBack>),
    Forms(u32),
}
