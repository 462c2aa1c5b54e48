//! The request fence below the DOM. While any act runs and settles, every document request in
//! any frame, and every hyperlink-auditing ping or beacon, whose URL is outside the act's scope
//! (a task grant's origin and prefix with no sensitive segment; for an approved or standing-grant
//! act, its own page and the destinations its card named) is refused, including a new
//! window's first navigation, which it issues before its frame exists. Page script cannot see
//! into a closed shadow root, so no fact can list what a submit button there would do; the fence
//! holds whatever the act sets off.
//!
//! It speaks the DevTools protocol on the browser-level connection chromedriver opens
//! (`goog:chromeOptions.debuggerAddress`): auto-attach to every target, each paused at start
//! until the `Fetch` domain intercepts its documents and pings, so nothing loads unseen. Unarmed,
//! a paused request goes on at once.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("the browser's DevTools endpoint is not known")]
    NoEndpoint,
    #[error("the browser's DevTools endpoint did not answer: {0}")]
    Endpoint(String),
    #[error("the browser refused {method}: {message}")]
    Refused { method: String, message: String },
    /// A JavaScript dialog holds the page: nothing runs in it until the dialog closes.
    #[error("a dialog is open on the page")]
    Dialog,
}

impl FenceError {
    /// The document went away under the call (a navigation): the page moved, nothing broke.
    pub fn document_gone(&self) -> bool {
        matches!(self, Self::Refused { message, .. }
            if message.contains("context was destroyed") || message.contains("Cannot find context")
                || message.contains("Inspected target navigated")
                // A read's elements were resolved in the document that was there a moment ago.
                || message.contains("should belong to the same JavaScript world"))
    }
}

/// Where documents may go while the fence is armed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// A task grant's reach: one of its origins, inside its one-segment prefix, no sensitive
    /// segment.
    Prefix { origins: Vec<String>, path_prefix: String },
    /// Exactly these places and no other: an approved or standing-grant act's own page and the
    /// destinations its facts named (what its card showed).
    Places(Vec<Place>),
}

/// An HTTPS origin and a path, the path compared as the browser sends it (its dot segments
/// resolved, its escapes kept: `/a%2F..%2Fb` is not `/b` to a server that routes it raw), a
/// trailing slash aside. The query and fragment are the page's to set (a GET form writes its
/// fields there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    origin: String,
    path: String,
}

impl Place {
    /// The place `url` names, if it is an HTTPS location.
    pub fn of(url: &str) -> Option<Self> {
        let there = classifier::paths::location(url).ok()?;
        let parsed = url::Url::parse(url.trim()).ok()?;
        Some(Self { origin: there.origin, path: parsed.path().trim_end_matches('/').to_owned() })
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }
}

impl Scope {
    /// Whether a document or ping to `url` may go.
    pub fn admits(&self, url: &str) -> bool {
        let Ok(there) = classifier::paths::location(url) else { return false };
        match self {
            Self::Prefix { origins, path_prefix } => {
                origins.iter().any(|o| classifier::paths::inside(&there, o, path_prefix))
                    && classifier::paths::first_sensitive(&there).is_none()
            }
            Self::Places(places) => Place::of(url).is_some_and(|here| places.contains(&here)),
        }
    }
}

/// What the fence did while it was armed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// URLs of refused documents and pings.
    pub refused: Vec<String>,
    /// Windows opened while armed (closed by [`Fence::disarm`]).
    pub opened: usize,
}

#[derive(Debug, Default)]
struct State {
    armed: Option<Scope>,
    /// The origin guard: a page's own document off these origins is refused at any time.
    origins: Vec<String>,
    refused: Vec<String>,
    /// Page targets attached while armed: windows the act did not expect.
    opened: Vec<String>,
    /// Every page target seen, so a window opened while armed can be told from the tab.
    pages: HashSet<String>,
    /// Document requests, pings, requested navigations, loads started and windows opened: any
    /// change means the page may still be moving.
    activity: u64,
    /// Loads started less loads stopped, by frame id, with the DevTools session last heard of
    /// it: the browser may report a frame's stop on another target's session than its start,
    /// and before it (Chromium 148 does), so a count, not a set of pairs.
    loading: HashMap<String, (String, i64)>,
    /// Commands whose answer someone awaits.
    waiters: HashMap<u64, oneshot::Sender<Value>>,
    /// The tab's DevTools session and target id (also its main frame's id): the first page.
    tab: Option<(String, String)>,
    /// Sessions of frames in processes of their own, with their frame (target) ids.
    frames: HashMap<String, String>,
    /// A JavaScript dialog (alert, confirm, prompt) is open: the page runs no script until it
    /// closes.
    dialog: bool,
    /// Commands installing the guard that the browser has not answered yet, and how many it has.
    guard_pending: HashSet<u64>,
    guarded: usize,
    /// The owner took the tab over: documents attached from now on stand their frames' guard down.
    owner: bool,
}

/// The fence of one browser; the connection closes when it is dropped.
#[derive(Debug)]
pub struct Fence {
    handle: Handle,
    task: tokio::task::JoinHandle<()>,
}

/// A handle to arm and disarm a browser's fence.
#[derive(Debug, Clone)]
pub struct Handle {
    state: Arc<Mutex<State>>,
    out: mpsc::UnboundedSender<String>,
    ids: Arc<AtomicU64>,
}

impl Drop for Fence {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn command(ids: &AtomicU64, session: Option<&str>, method: &str, params: Value) -> String {
    command_id(ids, session, method, params).1
}

fn command_id(ids: &AtomicU64, session: Option<&str>, method: &str, params: Value) -> (u64, String) {
    let id = ids.fetch_add(1, Ordering::Relaxed);
    let mut m = json!({ "id": id, "method": method, "params": params });
    if let Some(s) = session {
        m["sessionId"] = json!(s);
    }
    (id, m.to_string())
}

/// The browser-level WebSocket URL from `host:port`'s `/json/version`. The endpoint keeps the
/// connection open, so the reply is read to its Content-Length.
async fn browser_socket(address: &str) -> Result<String, FenceError> {
    let fail = |e: &dyn std::fmt::Display| FenceError::Endpoint(e.to_string());
    let mut tcp = tokio::net::TcpStream::connect(address).await.map_err(|e| fail(&e))?;
    let request = format!("GET /json/version HTTP/1.1\r\nHost: {address}\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.map_err(|e| fail(&e))?;
    let mut reply = Vec::new();
    let read = async {
        loop {
            let mut chunk = [0u8; 4096];
            let n = tcp.read(&mut chunk).await.map_err(|e| fail(&e))?;
            if n == 0 {
                return Err(fail(&"the endpoint closed the connection"));
            }
            reply.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&reply);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
                    .and_then(|(_, v)| v.trim().parse::<usize>().ok())
                    .ok_or_else(|| fail(&"no Content-Length"))?;
                if body.len() >= length {
                    return Ok::<String, FenceError>(body[..length].to_owned());
                }
            }
        }
    };
    let body = tokio::time::timeout(Duration::from_secs(5), read).await.map_err(|e| fail(&e))??;
    let v: Value = serde_json::from_str(&body).map_err(|e| fail(&e))?;
    v["webSocketDebuggerUrl"].as_str().map(str::to_owned).ok_or_else(|| fail(&"no webSocketDebuggerUrl"))
}

/// The request patterns the fence pauses: documents in any frame, and pings.
fn patterns() -> Value {
    json!({ "patterns": [
        { "urlPattern": "*", "resourceType": "Document", "requestStage": "Request" },
        { "urlPattern": "*", "resourceType": "Ping", "requestStage": "Request" },
    ]})
}

/// How long one DevTools call may take.
const CALL_BOUND: Duration = Duration::from_secs(5);

const AUTO_ATTACH: fn() -> Value = || json!({ "autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true });

const GUARD: &str = include_str!("guard.js");
/// Run after the guard in each document once the owner has the tab: its frames stop nothing.
pub(crate) const OWNER_HAS_TAB: &str = "globalThis.__grantLedgerGuard && globalThis.__grantLedgerGuard.ownerHasTab();";
/// The largest DevTools message read: Chromium's own limit on a reply is 256 MiB.
const MAX_REPLY: usize = 256 << 20;
/// The isolated world the guard lives in, in every document.
pub const WORLD: &str = "grant-ledger";

impl Fence {
    /// Connects to the browser at `address` (`host:port`) and intercepts from now on.
    pub async fn connect(address: &str) -> Result<Self, FenceError> {
        let url = browser_socket(address).await?;
        // A page's accessibility tree comes back whole, each name repeated in its text nodes: a
        // page of a few megabytes makes a reply past tungstenite's 16 MiB default, which would end
        // the connection the fence holds. The browser's own bound on a reply is the one kept.
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(MAX_REPLY))
            .max_frame_size(Some(MAX_REPLY));
        let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true)
            .await
            .map_err(|e| FenceError::Endpoint(e.to_string()))?;
        let (mut sink, mut stream) = ws.split();
        let (out, mut rx) = mpsc::unbounded_channel::<String>();
        let state = Arc::new(Mutex::new(State::default()));
        let ids = Arc::new(AtomicU64::new(1));
        let task = {
            let (state, ids, out) = (Arc::clone(&state), Arc::clone(&ids), out.clone());
            tokio::spawn(async move {
                let writer = async {
                    while let Some(m) = rx.recv().await {
                        if sink.send(Message::Text(m.into())).await.is_err() {
                            break;
                        }
                    }
                };
                let reader = async {
                    while let Some(Ok(message)) = stream.next().await {
                        if let Message::Text(text) = message
                            && let Ok(v) = serde_json::from_str::<Value>(&text)
                        {
                            handle(&v, &state, &ids, &out);
                        }
                    }
                };
                tokio::select! { () = writer => {}, () = reader => {} }
            })
        };
        let _ = out.send(command(&ids, None, "Target.setAutoAttach", AUTO_ATTACH()));
        // No act downloads anything, approved or not: a file written to disk is outside every
        // scope the fence could hold.
        let _ = out.send(command(&ids, None, "Browser.setDownloadBehavior", json!({ "behavior": "deny" })));
        Ok(Self { handle: Handle { state, out, ids }, task })
    }

    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }
}

impl Handle {
    /// Refuses, from now on, every document a page (a tab or window, not a frame inside one)
    /// would load off `origins`: the origin guard, armed or not.
    pub fn keep_to(&self, origins: Vec<String>) {
        lock(&self.state).origins = origins;
    }

    /// Refuses, until [`Fence::disarm`], every document and ping `scope` does not admit.
    pub fn arm(&self, scope: Scope) {
        let mut s = lock(&self.state);
        s.armed = Some(scope);
        s.refused.clear();
        s.opened.clear();
    }

    /// Waits, bounded, until the browser has installed the guard in `targets` page or frame
    /// targets: the first page must hold it before the runtime navigates anywhere.
    pub async fn guarded(&self, targets: usize, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        while lock(&self.state).guarded < targets {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    pub(crate) fn activity(&self) -> u64 {
        lock(&self.state).activity
    }

    pub(crate) fn loading(&self) -> bool {
        lock(&self.state).loading.values().any(|(_, n)| *n > 0)
    }

    /// Sends `method` to `session` (the browser itself when `None`) and waits, bounded, for its
    /// result. Every event the browser sent on that session before answering has been handled
    /// when it returns.
    pub async fn call(&self, session: Option<&str>, method: &str, params: Value) -> Result<Value, FenceError> {
        self.call_within(session, method, params, CALL_BOUND).await
    }

    /// [`Handle::call`] with its own bound. A call to a page fails at once while a JavaScript
    /// dialog holds the page, and as soon as one opens, since the page answers nothing then.
    pub async fn call_within(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
        bound: Duration,
    ) -> Result<Value, FenceError> {
        if session.is_some() && self.dialog_open() {
            return Err(FenceError::Dialog);
        }
        let (tx, rx) = oneshot::channel();
        let (id, m) = command_id(&self.ids, session, method, params);
        lock(&self.state).waiters.insert(id, tx);
        if self.out.send(m).is_err() {
            lock(&self.state).waiters.remove(&id);
            return Err(FenceError::Endpoint("the DevTools connection is closed".into()));
        }
        let dialog = async {
            while session.is_none() || !self.dialog_open() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let answer = tokio::select! {
            a = tokio::time::timeout(bound, rx) => a,
            () = dialog => {
                lock(&self.state).waiters.remove(&id);
                return Err(FenceError::Dialog);
            }
        };
        lock(&self.state).waiters.remove(&id);
        match answer {
            Ok(Ok(mut v)) => match v.get("error") {
                Some(e) => Err(FenceError::Refused {
                    method: method.to_owned(),
                    message: e["message"].as_str().unwrap_or_default().to_owned(),
                }),
                None => Ok(v["result"].take()),
            },
            Ok(Err(_)) => Err(FenceError::Endpoint("the DevTools connection is closed".into())),
            Err(_) => Err(FenceError::Endpoint(format!("{method} had no answer within {bound:?}"))),
        }
    }

    /// Whether a JavaScript dialog is open.
    pub fn dialog_open(&self) -> bool {
        lock(&self.state).dialog
    }

    /// Sends `method` without waiting for its answer.
    pub fn send(&self, session: Option<&str>, method: &str, params: Value) {
        let _ = self.out.send(command(&self.ids, session, method, params));
    }

    /// The tab's DevTools session and main frame id.
    pub fn tab(&self) -> Option<(String, String)> {
        lock(&self.state).tab.clone()
    }

    /// Marks the tab as the owner's, so targets attached from now on stand their frames' guard
    /// down; the sessions attached so far (the tab's first), for the caller to do the same.
    pub fn hand_to_owner(&self) -> Vec<String> {
        let mut s = lock(&self.state);
        s.owner = true;
        let mut sessions: Vec<String> = s.tab.iter().map(|(session, _)| session.clone()).collect();
        sessions.extend(s.frames.keys().cloned());
        sessions
    }

    /// The sessions of frames in processes of their own, with their frame ids.
    pub fn frame_sessions(&self) -> Vec<(String, String)> {
        lock(&self.state).frames.iter().map(|(s, f)| (s.clone(), f.clone())).collect()
    }

    /// Stops refusing, closes every window opened while armed, and says what it refused.
    pub fn disarm(&self) -> Report {
        let (refused, opened) = {
            let mut s = lock(&self.state);
            s.armed = None;
            (std::mem::take(&mut s.refused), std::mem::take(&mut s.opened))
        };
        for target in &opened {
            let _ = self.out.send(command(&self.ids, None, "Target.closeTarget", json!({ "targetId": target })));
        }
        crate::metrics::METRICS.fence_blocks.get_or_create(&[("kind", "window")]).inc_by(opened.len() as u64);
        Report { refused, opened: opened.len() }
    }
}

/// The fence armed for one act: disarmed when dropped, so no early return leaves it armed.
#[derive(Debug)]
pub struct Armed {
    handle: Handle,
    activity: u64,
    done: bool,
}

impl Armed {
    pub fn new(handle: Handle, scope: Scope) -> Self {
        handle.arm(scope);
        let activity = handle.activity();
        Self { handle, activity, done: false }
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The tab's activity count when it was armed.
    pub(crate) fn activity_at_arming(&self) -> u64 {
        self.activity
    }

    pub fn finish(mut self) -> Report {
        self.done = true;
        self.handle.disarm()
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if !self.done {
            self.handle.disarm();
        }
    }
}

/// One message from the browser: attach and hold each new target; decide each paused request.
fn handle(v: &Value, state: &Mutex<State>, ids: &AtomicU64, out: &mpsc::UnboundedSender<String>) {
    let session = v["sessionId"].as_str();
    match v["method"].as_str() {
        Some("Target.attachedToTarget") => {
            let p = &v["params"];
            let Some(child) = p["sessionId"].as_str() else { return };
            let info = &p["targetInfo"];
            let kind = info["type"].as_str().unwrap_or_default();
            let target = info["targetId"].as_str().unwrap_or_default().to_owned();
            if kind == "iframe" {
                let mut s = lock(state);
                // A frame moved into a target of its own (its id is the frame's) reports its load
                // there from now on, or not at all if it ended before: its parent's start is void.
                s.loading.remove(&target);
                s.frames.insert(child.to_owned(), target.clone());
            }
            if kind == "page" {
                let mut s = lock(state);
                if s.tab.is_none() {
                    s.tab = Some((child.to_owned(), target.clone()));
                }
                if s.armed.is_some() && !s.pages.contains(&target) {
                    s.opened.push(target.clone());
                    s.activity += 1;
                }
                s.pages.insert(target);
            }
            if matches!(kind, "page" | "iframe") {
                let _ = out.send(command(ids, Some(child), "Fetch.enable", patterns()));
                // The click guard and focus check, in every document before the page's script
                // (the page agent runs such scripts only once enabled).
                let _ = out.send(command(ids, Some(child), "Page.enable", json!({})));
                let (id, m) = command_id(
                    ids,
                    Some(child),
                    "Page.addScriptToEvaluateOnNewDocument",
                    json!({ "source": GUARD, "worldName": WORLD, "runImmediately": true }),
                );
                lock(state).guard_pending.insert(id);
                let _ = out.send(m);
                if lock(state).owner {
                    let release = json!({ "source": OWNER_HAS_TAB, "worldName": WORLD, "runImmediately": true });
                    let _ = out.send(command(ids, Some(child), "Page.addScriptToEvaluateOnNewDocument", release));
                }
                let _ = out.send(command(ids, Some(child), "Target.setAutoAttach", AUTO_ATTACH()));
            }
            // Only now may the target run: its first request meets the fence.
            let _ = out.send(command(ids, Some(child), "Runtime.runIfWaitingForDebugger", json!({})));
        }
        Some("Fetch.requestPaused") => {
            let p = &v["params"];
            let Some(request) = p["requestId"].as_str() else { return };
            let url = p["request"]["url"].as_str().unwrap_or_default();
            let frame = p["frameId"].as_str().unwrap_or_default();
            let refuse = {
                let mut s = lock(state);
                s.activity += 1;
                // A page's main frame has its target's id.
                let page_document = p["resourceType"] == "Document" && s.pages.contains(frame);
                let off_origins = !s.origins.is_empty()
                    && page_document
                    && !classifier::paths::location(url).is_ok_and(|l| s.origins.contains(&l.origin));
                let refuse = off_origins || s.armed.as_ref().is_some_and(|scope| !scope.admits(url));
                if refuse && s.armed.is_some() {
                    s.refused.push(url.to_owned());
                }
                if refuse {
                    let kind = match p["resourceType"].as_str() {
                        Some("Document") => "document",
                        // sendBeacon's requests are pings to DevTools.
                        Some("Ping") => "ping",
                        _ => "other",
                    };
                    crate::metrics::METRICS.fence_blocks.get_or_create(&[("kind", kind)]).inc();
                }
                refuse
            };
            let m = if refuse {
                command(
                    ids,
                    session,
                    "Fetch.failRequest",
                    json!({ "requestId": request, "errorReason": "BlockedByClient" }),
                )
            } else {
                command(ids, session, "Fetch.continueRequest", json!({ "requestId": request }))
            };
            let _ = out.send(m);
        }
        Some("Page.frameRequestedNavigation" | "Page.frameScheduledNavigation") => lock(state).activity += 1,
        Some("Page.frameStartedLoading") => {
            let frame = v["params"]["frameId"].as_str().unwrap_or_default().to_owned();
            let mut s = lock(state);
            s.activity += 1;
            let entry = s.loading.entry(frame).or_insert_with(|| (String::new(), 0));
            *entry = (session.unwrap_or_default().to_owned(), entry.1 + 1);
        }
        Some("Page.javascriptDialogOpening") => lock(state).dialog = true,
        Some("Page.javascriptDialogClosed") => lock(state).dialog = false,
        Some("Page.frameStoppedLoading") => {
            let frame = v["params"]["frameId"].as_str().unwrap_or_default().to_owned();
            let mut s = lock(state);
            let entry = s.loading.entry(frame).or_insert_with(|| (String::new(), 0));
            *entry = (session.unwrap_or_default().to_owned(), entry.1 - 1);
        }
        Some("Target.detachedFromTarget") => {
            let gone = v["params"]["sessionId"].as_str().unwrap_or_default();
            let mut s = lock(state);
            s.loading.retain(|_, (s, _)| s != gone);
            s.frames.remove(gone);
        }
        None => {
            if let Some(id) = v["id"].as_u64() {
                let mut s = lock(state);
                if s.guard_pending.remove(&id) && v.get("error").is_none() {
                    s.guarded += 1;
                }
                if let Some(waiter) = s.waiters.remove(&id) {
                    let _ = waiter.send(v.clone());
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_admits_its_prefix_only() {
        let scope = Scope::Prefix { origins: vec!["https://www.lesson.test".into()], path_prefix: "/lesson".into() };
        assert!(scope.admits("https://www.lesson.test/lesson/2?x=1"));
        for url in [
            "https://www.lesson.test/account",
            "https://www.lesson.test/lessons",
            "https://www.elsewhere.test/lesson/2",
            "http://www.lesson.test/lesson/2",
            "https://www.lesson.test/lesson/checkout",
            "javascript:alert(1)",
            "about:blank",
        ] {
            assert!(!scope.admits(url), "{url}");
        }
    }

    #[test]
    fn a_places_scope_admits_its_places_and_nothing_else() {
        let at = |u: &str| Place::of(u).unwrap();
        let scope =
            Scope::Places(vec![at("https://www.lesson.test/lesson/1"), at("https://www.lesson.test/account/delete")]);
        for url in [
            "https://www.lesson.test/lesson/1",
            "https://www.lesson.test/lesson/1/?step=2#top",
            "https://www.lesson.test/lesson/2/../1",
            // A place the card named is the owner's to allow, sensitive or not.
            "https://www.lesson.test/account/delete",
        ] {
            assert!(scope.admits(url), "{url}");
        }
        for url in [
            "https://www.lesson.test/lesson/2",
            "https://www.lesson.test/lesson",
            "https://www.lesson.test/lesson/1/next",
            "https://www.lesson.test:8443/lesson/1",
            "http://www.lesson.test/lesson/1",
            "https://www.elsewhere.test/lesson/1",
            "https://www.lesson.test/account",
            // Escapes a server may route raw are other places.
            "https://www.lesson.test/account%2F..%2Flesson%2F1",
            "https://www.lesson.test/lesson%2F1",
            "https://www.lesson.test/lesson//1",
            "about:blank",
        ] {
            assert!(!scope.admits(url), "{url}");
        }
        assert!(!Scope::Places(vec![]).admits("https://www.lesson.test/lesson/1"));
    }
}
