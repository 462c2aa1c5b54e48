//! The MCP client's model as the harness's `Model`: each tool call the client makes is the
//! model's next turn, and the harness's answer to it (the next view) is the call's result. So an
//! MCP client runs inside the same rules, the same record and the same services as a model the
//! harness hosts: nothing here decides.

use std::time::Duration;

use agent::model::{Model, ModelError, Turn, View};
use tokio::sync::{mpsc, oneshot};

/// One tool call from the client, with where its answer goes.
#[derive(Debug)]
pub struct Incoming {
    pub tool: String,
    pub arguments: serde_json::Value,
    pub evidence: String,
    pub answer: oneshot::Sender<Answer>,
}

/// What a tool call answers: the harness's result for it, and whether it is a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub text: String,
    pub refused: bool,
}

impl Answer {
    /// How the call was answered, as a metric's label.
    pub fn label(&self) -> &'static str {
        let code = serde_json::from_str::<serde_json::Value>(&self.text)
            .ok()
            .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_owned));
        match (self.refused, code.as_deref()) {
            (false, _) => "ok",
            (true, Some("UNAUTHENTICATED")) => "unauthenticated",
            (true, Some("UNAVAILABLE")) => "unavailable",
            (true, _) => "refused",
        }
    }

    /// The answer to the call a view follows: the last result, and for a snapshot the page in
    /// its untrusted block.
    fn of(tool: &str, org_name: &str, fields: &[String], view: View<'_>) -> Self {
        let refused = serde_json::from_str::<serde_json::Value>(view.last_result)
            .ok()
            .and_then(|v| v.get("ok").and_then(serde_json::Value::as_bool))
            .is_some_and(|ok| !ok);
        let mut text = view.last_result.to_owned();
        if let (Some(o), "snapshot") = (view.snapshot, tool) {
            // The record's field ids (never their values), outside the block: they are ours.
            let ids = if fields.is_empty() { "(none)".to_owned() } else { fields.join(", ") };
            text.push_str(&format!("\n\nTASK-RECORD FIELDS AVAILABLE TO type (ids only): {ids}\n\n"));
            text.push_str(&agent::prompt::snapshot_block(org_name, o));
        }
        Self { text, refused }
    }
}

/// The client's calls as a model. The run it drives ends when the client makes no call for
/// `idle` (its browser is closed then), or the client side is dropped.
#[derive(Debug)]
pub struct Relay {
    calls: mpsc::Receiver<Incoming>,
    pending: Option<(String, oneshot::Sender<Answer>)>,
    org_name: String,
    fields: Vec<String>,
    idle: Duration,
}

impl Relay {
    pub fn new(calls: mpsc::Receiver<Incoming>, org_name: String, fields: Vec<String>, idle: Duration) -> Self {
        Self { calls, pending: None, org_name, fields, idle }
    }

    /// The call still waiting when the run ended: answered with the run's end.
    pub fn finish(&mut self, answer: Answer) {
        if let Some((_, tx)) = self.pending.take() {
            let _ = tx.send(answer);
        }
    }

    /// Calls that reached the run after it ended: each answered with its end.
    pub fn drain(&mut self, answer: &Answer) {
        self.calls.close();
        while let Ok(call) = self.calls.try_recv() {
            let _ = call.answer.send(answer.clone());
        }
    }
}

impl Model for Relay {
    async fn next(&mut self, view: View<'_>) -> Result<Turn, ModelError> {
        if let Some((tool, tx)) = self.pending.take() {
            let _ = tx.send(Answer::of(&tool, &self.org_name, &self.fields, view));
        }
        let call = match tokio::time::timeout(self.idle, self.calls.recv()).await {
            Ok(Some(call)) => call,
            Ok(None) => return Err(ModelError("the agent app is gone".into())),
            Err(_) => return Err(ModelError(format!("the agent app made no call for {} s", self.idle.as_secs()))),
        };
        self.pending = Some((call.tool.clone(), call.answer));
        Ok(Turn { calls: vec![(call.tool, call.arguments)], evidence: call.evidence, extra: String::new() })
    }
}
