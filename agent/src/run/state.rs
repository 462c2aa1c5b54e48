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
}

impl Clients {
    pub fn req<T>(&self, message: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        r.metadata_mut().insert("authorization", self.bearer.clone());
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
    pub field_ids: Vec<String>,
    pub max_steps: u32,
    pub agent_version: String,
    /// How long to wait for the owner's answer to a card (the card's own life is ten minutes).
    pub approval_wait: Duration,
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
}

impl State<'_> {
    /// Appends a `run.*` event to the session's record; the reason or reference is cut to a
    /// word, as the event holds one.
    pub(super) async fn record(&mut self, kind: pb::RunEventKind, detail: &str) -> Result<(), RunError> {
        let word: String = detail
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || "_.:-".contains(c) { c } else { '_' })
            .take(64)
            .collect();
        let req = pb::RecordRunRequest {
            session_id: self.task.chat_session.clone(),
            run_id: self.task.run_id.clone(),
            kind: kind as i32,
            detail: if word.is_empty() { "-".into() } else { word },
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
