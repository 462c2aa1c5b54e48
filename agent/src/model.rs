//! Models behind one trait: what the harness shows a model each step and the turn it answers
//! with. A scripted model, for tests, reads the same snapshot the prompt shows.

use std::collections::VecDeque;
use std::future::Future;

use proto::runtime::ObserveReply;
use serde_json::{Value, json};

/// What a model is shown for one step.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The run's system prompt: the record's text with the run's values.
    pub system: &'a str,
    pub prompt: &'a str,
    /// The current snapshot, if the page was observed since the last act (the prompt holds it).
    pub snapshot: Option<&'a ObserveReply>,
    pub last_result: &'a str,
    pub step: u32,
    /// The number of the subgoal the model is given now (1-based).
    pub subgoal: u32,
}

/// One turn: the tool calls the model made (name and arguments), its evidence line, and any
/// other text it wrote beside them (which the contract does not allow: the rules refuse it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Turn {
    pub calls: Vec<(String, Value)>,
    pub evidence: String,
    pub extra: String,
}

/// A model failed to answer; a retry of the step may cure it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the model did not answer: {0}")]
pub struct ModelError(pub String);

pub trait Model: Send {
    fn next(&mut self, view: View<'_>) -> impl Future<Output = Result<Turn, ModelError>> + Send;
}

type Step = Box<dyn FnMut(View<'_>) -> Turn + Send>;

/// A model that plays a script, one step per turn; past its end it escalates.
pub struct Scripted {
    steps: VecDeque<Step>,
    /// How long each turn takes, as a hosted model's would (a demo's pace); none in tests.
    pace: std::time::Duration,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripted").field("steps_left", &self.steps.len()).finish()
    }
}

impl Scripted {
    pub fn new() -> Self {
        Self { steps: VecDeque::new(), pace: std::time::Duration::ZERO }
    }

    /// Each turn answered after `pace`, as a model that thinks would answer.
    #[must_use]
    pub fn paced(self, pace: std::time::Duration) -> Self {
        Self { pace, ..self }
    }

    /// Then, this step.
    pub fn then(mut self, step: impl FnMut(View<'_>) -> Turn + Send + 'static) -> Self {
        self.steps.push_back(Box::new(step));
        self
    }
}

impl Default for Scripted {
    fn default() -> Self {
        Self::new()
    }
}

impl Model for Scripted {
    async fn next(&mut self, view: View<'_>) -> Result<Turn, ModelError> {
        if !self.pace.is_zero() {
            tokio::time::sleep(self.pace).await;
        }
        Ok(match self.steps.pop_front() {
            Some(mut step) => step(view),
            None => escalate("uncertain"),
        })
    }
}

/// One step of a written plan, as `grantctl agent run --script` reads it (JSON lines or an
/// array): `{"tool": "snapshot"}`, `{"tool": "snapshot", "done": true}` (the current subgoal is
/// done: the next is given), `{"tool": "click", "name": "Next"}`,
/// `{"tool": "type", "name": "Answer", "field_id": "answer"}`,
/// `{"tool": "request_approval", "name": "Next"}`, `{"tool": "click", "name": "Next",
/// "with_token": true}`, `{"tool": "screenshot"}`, `{"tool": "escalate", "reason": "uncertain",
/// "refs": ["n3"], "detail": "…"}`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanStep {
    pub tool: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub field_id: Option<String>,
    #[serde(default)]
    pub option: Option<String>,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub by: Option<i32>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub consequential: bool,
    /// On a snapshot: the current subgoal is done.
    #[serde(default)]
    pub done: bool,
    /// On a click: what the runtime waits for (`settle`, `navigation`, `dialog`, `none`).
    #[serde(default)]
    pub wait_for: Option<String>,
    /// On an escalation: the refs it cites and what it says.
    #[serde(default)]
    pub refs: Vec<String>,
    #[serde(default)]
    pub detail: Option<String>,
    /// Spend the approval token the last result handed back, if it handed one (after an answer
    /// "for this task" there is none: the act goes again under the permission).
    #[serde(default)]
    pub with_token: bool,
}

impl Scripted {
    /// A model that plays `plan`, finding each named node in the current snapshot.
    pub fn from_plan(plan: Vec<PlanStep>) -> Self {
        plan.into_iter().fold(Self::new(), |model, step| {
            model.then(move |view| match step.tool.as_str() {
                "snapshot" if step.done => subgoal_done(view),
                "snapshot" => snapshot(),
                "screenshot" => screenshot(),
                "escalate" => {
                    let mut t = escalate(step.reason.as_deref().unwrap_or("uncertain"));
                    if !step.refs.is_empty() {
                        t.calls[0].1["refs"] = json!(step.refs);
                    }
                    if let Some(d) = &step.detail {
                        t.calls[0].1["detail"] = json!(d);
                    }
                    t
                }
                tool => {
                    let mut extra = serde_json::Map::new();
                    for (k, v) in [
                        ("field_id", &step.field_id),
                        ("option", &step.option),
                        ("key", &step.key),
                        ("wait_for", &step.wait_for),
                    ] {
                        if let Some(v) = v {
                            extra.insert(k.into(), json!(v));
                        }
                    }
                    if let Some(by) = step.by {
                        extra.insert("by".into(), json!(by));
                    }
                    if let Some(t) = token_in(view.last_result).filter(|_| step.with_token) {
                        extra.insert("approval_token".into(), json!(t));
                    }
                    on_named(
                        view,
                        tool,
                        step.name.as_deref().unwrap_or_default(),
                        step.consequential,
                        Value::Object(extra),
                    )
                }
            })
        })
    }
}

/// A turn that observes.
pub fn snapshot() -> Turn {
    Turn {
        calls: vec![("snapshot".into(), json!({}))],
        evidence: "SUBGOAL 1 | evidence: none | intent: observe the page".into(),
        extra: String::new(),
    }
}

/// A turn that takes a screenshot for the owner.
pub fn screenshot() -> Turn {
    Turn {
        calls: vec![("screenshot".into(), json!({}))],
        evidence: "SUBGOAL 1 | evidence: none | intent: show the owner the screen".into(),
        extra: String::new(),
    }
}

/// A turn that observes and says the current subgoal is done.
pub fn subgoal_done(view: View<'_>) -> Turn {
    let n = view.subgoal;
    Turn {
        calls: vec![("snapshot".into(), json!({}))],
        evidence: format!("SUBGOAL {n} | evidence: the page shows it | intent: subgoal {n} done"),
        extra: String::new(),
    }
}

/// A turn that escalates with `reason`.
pub fn escalate(reason: &str) -> Turn {
    Turn {
        calls: vec![("escalate".into(), json!({ "reason": reason }))],
        evidence: format!("SUBGOAL 1 | evidence: none | intent: escalate ({reason})"),
        extra: String::new(),
    }
}

/// A turn calling `tool` on the node named `name` of the current snapshot, with `extra`
/// arguments and a well-formed evidence line; an escalation if no node has that name.
pub fn on_named(view: View<'_>, tool: &str, name: &str, consequential: bool, extra: Value) -> Turn {
    let Some(o) = view.snapshot else { return escalate("no_grounded_action") };
    let Some(node) = o.nodes.iter().find(|n| n.name == name) else { return escalate("no_grounded_action") };
    let role = proto::runtime::Role::try_from(node.role).ok().and_then(crate::tools::role_name).unwrap_or("button");
    let mut args = json!({
        "snapshot_id": o.snapshot_id, "ref": node.r#ref, "expected_role": role,
        "expected_name": node.name, "consequential": consequential,
    });
    if let (Some(a), Value::Object(more)) = (args.as_object_mut(), extra) {
        a.extend(more);
    }
    let evidence = format!(
        "SUBGOAL {} | evidence: {role} {} ref={} from snapshot {} | intent: {tool} it",
        view.subgoal.max(1),
        crate::prompt::quoted(&node.name),
        node.r#ref,
        o.snapshot_id
    );
    Turn { calls: vec![(tool.into(), args)], evidence, extra: String::new() }
}

/// The approval token the last result handed back, if any.
pub fn token_in(last_result: &str) -> Option<String> {
    let len = proto::limits::APPROVAL_TOKEN_LEN;
    last_result
        .match_indices(proto::limits::APPROVAL_TOKEN_PREFIX)
        .filter_map(|(at, _)| last_result.get(at..at + len))
        .find(|t| proto::limits::is_approval_token(t))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::token_in;

    #[test]
    fn the_token_is_read_from_the_approvals_result() {
        let token = proto::limits::approval_token([7; proto::limits::APPROVAL_TOKEN_HEX / 2]);
        let result = serde_json::json!({ "ok": true, "approval": "approved", "approval_token": token }).to_string();
        assert_eq!(token_in(&result), Some(token.clone()));
        assert_eq!(token_in(&format!("apv_{}", &token[4..20])), None, "a cut token is none");
        assert_eq!(token_in("{\"ok\":true,\"approval\":\"approved_for_task\"}"), None);
    }
}
