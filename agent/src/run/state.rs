//! What a run holds and the services it calls: the clients, the task, its outcome and timings,
//! the run's state with its record and log. A leaf of the run: `act` and the turns use it.

use std::collections::HashMap;
use std::time::Duration;

use proto::runtime::{self as rt, browser_runtime_client::BrowserRuntimeClient};
use proto::v1::{self as pb, authorizer_client::AuthorizerClient};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use crate::rules::{End, Rules};

/// The services a run calls, with the worker's credential.
#[derive(Debug, Clone)]
pub struct Clients {
    pub runtime: BrowserRuntimeClient<Channel>,
    pub authorizer: AuthorizerClient<Channel>,
    pub bearer: MetadataValue<Ascii>,
    /// The id of the request the run serves now, sent as `x-request-id` on each call, so the
    /// services' log lines join the caller's (the MCP server sets one per tool call).
    pub request_id: Option<std::sync::Arc<std::sync::Mutex<String>>>,
}

impl Clients {
    pub fn req<T>(&self, message: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        r.metadata_mut().insert("authorization", self.bearer.clone());
        let id =
            self.request_id.as_ref().map(|id| id.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone());
        if let Some(value) = id.filter(|id| !id.is_empty()).and_then(|id| id.parse().ok()) {
            r.metadata_mut().insert("x-request-id", value);
        }
        r
    }
}

/// What one run is.
#[derive(Debug, Clone)]
pub struct Task {
    /// The owner's chat at the authorizer.
    pub chat_session: String,
    /// The runtime's browser session.
    pub browser_session: String,
    pub run_id: String,
    pub subgoals: Vec<String>,
    /// The whole task in one sentence (the system prompt's TASK_GOAL).
    pub goal: String,
    /// Whom the agent works for, as the system prompt names them.
    pub org_name: String,
    /// The start page's origin (the system prompt's PORTAL_ORIGIN).
    pub portal_origin: String,
    pub field_ids: Vec<String>,
    pub max_steps: u32,
    pub agent_version: String,
    /// How long to wait for the owner's answer to a card (the card's own life is ten minutes).
    pub approval_wait: Duration,
    /// Told the id of each card the run raises, as it raises it: a courier that links its
    /// client to the owner's console (the MCP server) listens.
    pub cards: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// Close the browser session when the run ends, before its end is recorded (an agent key's
    /// end spends the key the close would need).
    pub close_at_end: bool,
}

/// A task as `grantctl agent run --task` reads it.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFile {
    /// The owner's chat at the authorizer (made here if it is not there yet).
    pub chat_session: String,
    /// The browser profile the chat is bound to and the runtime opens.
    pub browser_profile: String,
    pub start_url: String,
    pub allowed_origins: Vec<String>,
    pub run_id: String,
    pub subgoals: Vec<String>,
    /// The whole task in one sentence; the subgoals joined when absent.
    #[serde(default)]
    pub goal: Option<String>,
    /// Whom the agent works for ("the owner" when absent).
    #[serde(default)]
    pub org_name: Option<String>,
    #[serde(default)]
    pub field_ids: Vec<String>,
    pub max_steps: u32,
    pub agent_version: String,
    #[serde(default = "default_wait")]
    pub approval_wait_seconds: u64,
}

/// As long as a card lives (the authorizer's ten minutes): a run waits for its owner as long as
/// the owner can answer.
fn default_wait() -> u64 {
    600
}

/// `text` as the record's word: letters, digits and `_ . : -`, at most 64.
fn word(text: &str) -> String {
    let w: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() || "_.:-".contains(c) { c } else { '_' }).take(64).collect();
    if w.is_empty() { "-".into() } else { w }
}

/// How a run went.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub end: End,
    pub steps: u32,
    /// Refusals by rule, disagreements and other enforcements, by name.
    pub counts: HashMap<&'static str, u32>,
    /// The one-line step log.
    pub log: Vec<String>,
    /// Where the run's time went.
    pub time: Timings,
    /// Every step: tool, evidence, result, time.
    pub trace: Vec<TraceStep>,
    /// The screenshots the run took.
    pub screenshots: Vec<Screenshot>,
}

/// A run's wall time, split by who spent it: what is left of `total` is the harness's own.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timings {
    pub total: Duration,
    pub runtime: Duration,
    pub authorizer: Duration,
    /// Waiting for the owner's answer to a card.
    pub owner: Duration,
    pub model: Duration,
}

impl Timings {
    /// The harness's own share: the rules, the prompt, the bookkeeping.
    pub fn harness(&self) -> Duration {
        self.total.saturating_sub(self.runtime + self.authorizer + self.owner + self.model)
    }
}

/// A run that failed (a service or the model), with what it had done: its trace and screenshots,
/// which the operator keeps as a finished run's.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct RunFailed {
    #[source]
    pub error: RunError,
    pub trace: Vec<TraceStep>,
    pub screenshots: Vec<Screenshot>,
}

/// A failure of a service, not of the run's rules: nothing more was done.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the runtime failed: {0}")]
    Runtime(tonic::Status),
    #[error("the authorizer failed: {0}")]
    Authorizer(tonic::Status),
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
}

pub(super) struct State<'a> {
    pub(super) clients: &'a mut Clients,
    pub(super) task: &'a Task,
    pub(super) rules: Rules,
    pub(super) current: Option<rt::ObserveReply>,
    pub(super) log: Vec<String>,
    pub(super) last: String,
    /// The card an act of a target raised, with the act's verb, so a request_approval after
    /// APPROVAL_REQUIRED waits on that card rather than asking twice (and says which act the
    /// token it hands back is for).
    pub(super) asked: HashMap<(String, String), (&'static str, String)>,
    pub(super) sequence: u64,
    pub(super) calls: u64,
    /// Makes this run's tool-call ids its own: a task file run twice under one run id must not
    /// read as a retry of the first run's calls.
    pub(super) nonce: String,
    /// Whether an act of this run was dispatched (under a card, a task or a standing grant): only
    /// after one does a page's reference number count as the task's confirmation (the page the
    /// run opened on cannot end it as done).
    pub(super) dispatched: bool,
    /// Every reference number a snapshot of this run has shown: one seen before an act (the
    /// page the run opened on, or one it went back to) is never a confirmation.
    pub(super) references: std::collections::HashSet<String>,
    pub(super) time: Timings,
    /// Every screenshot the run took, by digest.
    pub(super) screenshots: Vec<Screenshot>,
    /// The newest snapshot's id.
    pub(super) snapshot_id: String,
    pub(super) trace: Vec<TraceStep>,
}

/// One step of a run's trace: what the model called and said, what came of it, and the time.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TraceStep {
    pub step: u32,
    pub tool: String,
    pub evidence: String,
    /// `ok`, `changed`, a contract code, `refused:<rule>`, or the run's end.
    pub result: String,
    pub snapshot_id: String,
    pub elapsed_ms: u32,
    pub model_ms: u32,
    /// A screenshot step's picture, by digest (the trace's PNG beside it is named by it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub screenshot: Option<String>,
}

/// `text` as one bounded line, as the record takes it: control, format and direction characters
/// made spaces, at most the account's length.
pub(super) fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if proto::limits::hidden_char(c) { ' ' } else { c })
        .take(proto::limits::MAX_ACCOUNT_CHARS)
        .collect()
}

/// What a result came to, as one word for the trace.
pub(super) fn result_word(result: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(result) else { return "ok".into() };
    if let Some(approval) = v["approval"].as_str() {
        return approval.to_owned();
    }
    match (v["ok"].as_bool(), v["code"].as_str(), v["changed"].as_bool()) {
        (Some(false), Some(code), _) => code.to_owned(),
        (_, _, Some(true)) => "changed".into(),
        _ => "ok".into(),
    }
}

/// A screenshot the run took: its digest (what the record names) and the picture.
#[derive(Debug, Clone)]
pub struct Screenshot {
    pub digest: String,
    pub png: Vec<u8>,
}

/// What a failure's code means, in the harness's own words. The runtime's detail can hold the
/// page's text (a dialog's message, a script's exception): it stays in the runtime's log and
/// never reaches the prompt outside the untrusted block.
pub(super) fn detail(code: &str) -> &'static str {
    match code {
        "STALE_SNAPSHOT" => "the snapshot is void (the page changed, or the browser restarted): observe again",
        "REF_NOT_FOUND" => "the ref is not in the live page: observe again",
        "NAME_MISMATCH" => "the live node's accessible name is not the expected name",
        "ROLE_MISMATCH" => "the live node's role is not the expected role",
        "NODE_NOT_INTERACTABLE" => {
            "the node cannot be acted on now: a dialog, something covering it, or a page that broke the read"
        }
        "APPROVAL_REQUIRED" => "call request_approval for this element, then act with its token",
        "APPROVAL_TOKEN_INVALID" => "the approval token is not for this act",
        "OFF_ORIGIN_TARGET" => "the act would reach outside the allowed origins",
        "BUDGET_EXCEEDED" => "the session's step budget is spent",
        _ => "the task permission does not cover this act as the page is now: observe again, or escalate",
    }
}

/// A failure as the tool contract shapes it: `{ok: false, code, detail, snapshot_id}`, with the
/// code's split into recoverable (observe again) and terminal.
pub(super) fn failure(code: &str, detail: &str, snapshot_id: &str, recoverable: bool) -> String {
    failure_of(code, detail, snapshot_id, recoverable, false)
}

/// [`failure`], saying too whether the act may have reached the page all the same.
pub(super) fn failure_of(code: &str, detail: &str, snapshot_id: &str, recoverable: bool, unknown: bool) -> String {
    let mut v = serde_json::json!({
        "ok": false, "code": code, "detail": detail, "snapshot_id": snapshot_id, "recoverable": recoverable,
    });
    if unknown {
        v["outcome_unknown"] = serde_json::json!(true);
    }
    v.to_string()
}

/// A turn the rules refused before the runtime saw it, in the contract's shape: a stale snapshot
/// or a ref not in it under the contract's own code; any other rule (a malformed call, a
/// missing evidence line, text beside the call) as `REFUSED`, naming the rule. All recoverable:
/// nothing reached the page, and the model may try again within the budget.
pub(super) fn refusal(rule: &str, reason: &str, snapshot_id: &str) -> String {
    let code = match rule {
        "stale_snapshot" => "STALE_SNAPSHOT",
        "ref_not_in_snapshot" => "REF_NOT_FOUND",
        _ => "REFUSED",
    };
    serde_json::json!({
        "ok": false, "code": code, "rule": rule, "detail": reason, "snapshot_id": snapshot_id, "recoverable": true,
    })
    .to_string()
}

/// A success: `{ok: true, changed}` for an act (and `outcome_unknown` when the runtime cannot
/// say what the act did); what the call produced for the others.
pub(super) fn success(changed: bool, snapshot_id: &str, outcome_unknown: bool) -> String {
    let mut v = serde_json::json!({ "ok": true, "changed": changed, "snapshot_id": snapshot_id });
    if outcome_unknown {
        v["outcome_unknown"] = serde_json::json!(true);
    }
    v.to_string()
}

pub(super) fn success_with(screenshot: &str) -> String {
    serde_json::json!({ "ok": true, "screenshot": screenshot }).to_string()
}

/// The contract code and recoverable flag a runtime status names in its metadata, if it names
/// one (a dialog, a browser restarted clean, a page that moved or broke the read).
pub(super) fn contract_code(s: &tonic::Status) -> Option<(String, bool)> {
    let m = s.metadata();
    let code = m.get(proto::CONTRACT_CODE_HEADER)?.to_str().ok()?;
    let known = ["STALE_SNAPSHOT", "REF_NOT_FOUND", "NODE_NOT_INTERACTABLE"];
    let code = known.into_iter().find(|k| *k == code)?;
    let recoverable = m.get(proto::RECOVERABLE_HEADER).and_then(|v| v.to_str().ok()) == Some("true");
    Some((code.to_owned(), recoverable))
}

impl State<'_> {
    /// A read (`what`: snapshot, screenshot) the runtime answered with a failure: one the
    /// contract names is the model's result (it observes again where the code lets it, and the
    /// same failure three times ends the run); any other fails the run.
    pub(super) fn unread(&mut self, what: &str, s: tonic::Status) -> Result<Option<End>, RunError> {
        let Some((code, recoverable)) = contract_code(&s) else { return Err(RunError::Runtime(s)) };
        self.current = None;
        self.rules.void();
        self.rules.count("page_unreadable");
        tracing::info!(code = %code, message = %s.message(), "the runtime could not read the page");
        let result = failure(&code, detail(&code), "", recoverable);
        self.note(format!("{what} failed: {code}"), result);
        if !recoverable {
            return Ok(Some(End::escalated(crate::reason::Reason::TerminalRefusal, code)));
        }
        Ok(self.rules.unread(&code).err())
    }

    /// One step of the trace: kept for the run's outcome, and appended to the session's record.
    pub(super) async fn trace_step(
        &mut self,
        step: u32,
        turn: &crate::model::Turn,
        result: &str,
        elapsed: Duration,
        model: Duration,
    ) -> Result<(), RunError> {
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
        let tool = match turn.calls.as_slice() {
            [] => "none".to_owned(),
            [(name, _)] => name.clone(),
            _ => "several".to_owned(),
        };
        let t = TraceStep {
            step,
            tool,
            evidence: one_line(&turn.evidence),
            result: result.chars().take(proto::limits::MAX_WORD_CHARS).collect(),
            snapshot_id: self.snapshot_id.clone(),
            elapsed_ms: ms(elapsed),
            model_ms: ms(model),
            screenshot: serde_json::from_str::<serde_json::Value>(&self.last)
                .ok()
                .and_then(|v| v["screenshot"].as_str().map(str::to_owned))
                .filter(|_| turn.calls.first().is_some_and(|(n, _)| n == "screenshot")),
        };
        let account = pb::RunAccount {
            text: t.evidence.clone(),
            snapshot_id: t.snapshot_id.clone(),
            step: t.step,
            result: word(&t.result),
            elapsed_ms: t.elapsed_ms,
            model_ms: t.model_ms,
            ..Default::default()
        };
        let tool = t.tool.clone();
        self.trace.push(t);
        self.record_with(pb::RunEventKind::Step, &tool, Some(account)).await
    }

    /// Appends a `run.*` event to the session's record; the reason or reference is cut to a
    /// word, as the event holds one.
    pub(super) async fn record(&mut self, kind: pb::RunEventKind, detail: &str) -> Result<(), RunError> {
        self.record_with(kind, detail, None).await
    }

    pub(super) async fn record_with(
        &mut self,
        kind: pb::RunEventKind,
        detail: &str,
        account: Option<pb::RunAccount>,
    ) -> Result<(), RunError> {
        let req = pb::RecordRunRequest {
            session_id: self.task.chat_session.clone(),
            run_id: self.task.run_id.clone(),
            kind: kind as i32,
            detail: word(detail),
            account,
        };
        timed!(self.time.authorizer, self.clients.authorizer.record_run(self.clients.req(req)).await)
            .map_err(RunError::Authorizer)?;
        Ok(())
    }

    pub(super) fn note(&mut self, line: String, result: String) {
        self.log.push(format!("{} {line}", self.rules.steps()));
        self.last = result;
    }

    pub(super) fn tool_call_id(&mut self) -> String {
        self.calls += 1;
        // Within the 120 characters an id may have, whatever the run id's length.
        let run: String = self.task.run_id.chars().take(80).collect();
        format!("{run}-{}-{}", self.nonce, self.calls)
    }
}

#[cfg(test)]
mod request_ids {
    use super::*;

    #[tokio::test]
    async fn each_call_carries_the_request_it_serves() {
        let channel = Channel::from_static("http://127.0.0.1:9").connect_lazy();
        let id = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let clients = Clients {
            runtime: BrowserRuntimeClient::new(channel.clone()),
            authorizer: AuthorizerClient::new(channel),
            bearer: "Bearer glc_x".parse().unwrap(),
            request_id: Some(std::sync::Arc::clone(&id)),
        };
        let sent = |c: &Clients| c.req(()).metadata().get("x-request-id").map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(sent(&clients), None, "none before a call is served");
        "call-1".clone_into(&mut id.lock().unwrap());
        assert_eq!(sent(&clients).as_deref(), Some("call-1"));
        "call-2".clone_into(&mut id.lock().unwrap());
        assert_eq!(sent(&clients).as_deref(), Some("call-2"), "the next call's own");
    }
}
