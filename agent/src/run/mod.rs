//! One run: the model's turns through the rules, observe and act at the runtime, every act
//! authorized first (the runtime's sealed facts carried to the authorizer, its ticket carried
//! back), approvals asked through the authorizer and awaited, until the run ends under a named
//! reason. The worker carries; it decides nothing the rules and the two services do not.

use std::collections::HashMap;
use std::time::Duration;

use proto::runtime::{self as rt};
use proto::v1::{self as pb};

use crate::model::{Model, View};
use crate::prompt::{self, Step};
use crate::reason::Reason;
use crate::rules::{End, Rules, Verdict};
use crate::tools::Call;

/// Opens the run's browser session (and its chat, if new) for `file`.
pub async fn start(clients: &mut Clients, file: &TaskFile) -> Result<Task, RunError> {
    let chat = pb::CreateSessionRequest {
        session_id: file.chat_session.clone(),
        browser_profile_id: file.browser_profile.clone(),
        surface: pb::Surface::Interactive as i32,
        ..Default::default()
    };
    match clients.authorizer.create_session(clients.req(chat)).await {
        Ok(_) => {}
        Err(s) if s.code() == tonic::Code::AlreadyExists => {}
        Err(s) => return Err(RunError::Authorizer(s)),
    }
    // No page is opened for a chat the owner stopped.
    let check = pb::CheckStopRequest { session_id: file.chat_session.clone(), ticket: None };
    let stopped = clients.authorizer.check_stop(clients.req(check)).await.map_err(RunError::Authorizer)?;
    if stopped.into_inner().stopped {
        return Err(RunError::Authorizer(tonic::Status::failed_precondition(
            "the owner stopped the agent in this chat: nothing runs until the owner writes to it again",
        )));
    }
    let open = rt::OpenSessionRequest {
        browser_profile_id: file.browser_profile.clone(),
        allowed_origins: file.allowed_origins.clone(),
        start_url: file.start_url.clone(),
        max_steps: file.max_steps,
    };
    let opened = clients.runtime.open_session(clients.req(open)).await.map_err(RunError::Runtime)?.into_inner();
    let portal_origin = url::Url::parse(&file.start_url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| file.start_url.clone());
    Ok(Task {
        // Never the subgoals joined: they are given one at a time.
        goal: file.goal.clone().unwrap_or_else(|| "the owner's task".into()),
        org_name: file.org_name.clone().unwrap_or_else(|| "the owner".into()),
        portal_origin,
        chat_session: file.chat_session.clone(),
        browser_session: opened.session_id,
        run_id: file.run_id.clone(),
        subgoals: file.subgoals.clone(),
        field_ids: file.field_ids.clone(),
        max_steps: file.max_steps,
        agent_version: file.agent_version.clone(),
        approval_wait: Duration::from_secs(file.approval_wait_seconds.min(600)),
        cards: None,
        close_at_end: false,
    })
}

/// `$e` awaited, its time added to `$slot`.
macro_rules! timed {
    ($slot:expr, $e:expr) => {{
        let started = std::time::Instant::now();
        let r = $e;
        $slot += started.elapsed();
        r
    }};
}

// After `timed!`, which they use.
mod act;
mod state;

use sha2::Digest;
use state::State;
pub use state::{Clients, Outcome, RunError, RunFailed, Screenshot, Task, TaskFile, Timings, TraceStep};

/// Runs `task` with `model` until it ends. A run a service or the model failed is recorded as
/// escalated (`service_error`) and comes back with what it had done.
pub async fn run<M: Model>(clients: &mut Clients, task: &Task, model: &mut M) -> Result<Outcome, RunFailed> {
    let mut s = State {
        clients,
        task,
        rules: Rules::for_fields(task.max_steps, task.field_ids.clone())
            .with_subgoals(u32::try_from(task.subgoals.len()).unwrap_or(u32::MAX)),
        current: None,
        log: Vec::new(),
        last: String::new(),
        asked: HashMap::new(),
        sequence: 0,
        calls: 0,
        nonce: format!(
            "{:x}",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
        ),
        dispatched: false,
        references: std::collections::HashSet::new(),
        time: Timings::default(),
        screenshots: Vec::new(),
        snapshot_id: String::new(),
        trace: Vec::new(),
    };
    let started = std::time::Instant::now();
    let failed = |error: RunError, s: State<'_>| RunFailed { error, trace: s.trace, screenshots: s.screenshots };
    if let Err(e) = s.record(pb::RunEventKind::Started, &task.agent_version).await {
        return Err(failed(e, s));
    }
    let ended = s.turns(model).await;
    if task.close_at_end {
        // Before the end is recorded: recording it may spend the credential the close needs.
        let close = rt::CloseSessionRequest { session_id: task.browser_session.clone() };
        let _ = s.clients.runtime.close_session(s.clients.req(close)).await;
    }
    // A run that failed (a service or the model) still ends in the record, as escalated.
    let end = match ended {
        Ok(end) => end,
        // The owner took the tab over while the run was not waiting on a card: the run is over.
        Err(RunError::Runtime(s)) if s.code() == tonic::Code::Aborted => {
            End::escalated(Reason::TakenOver, "the owner took the live tab over")
        }
        Err(e) => {
            let _ = s.record(pb::RunEventKind::Escalated, Reason::ServiceError.code()).await;
            crate::metrics::ended(&End::escalated(Reason::ServiceError, ""), s.rules.steps(), &s.rules.counts);
            return Err(failed(e, s));
        }
    };
    let recorded = match &end {
        End::Done { reference } => s.record(pb::RunEventKind::Completed, reference).await,
        End::Escalated { reason, detail } => {
            // What the owner needs to pick it up: the refs the model cited, what was said, the
            // newest snapshot and the screenshots, by digest (the run's trace holds them).
            let account = pb::RunAccount {
                refs: s.rules.cited.iter().take(proto::limits::MAX_CITED_REFS).cloned().collect(),
                text: state::one_line(detail),
                snapshot_id: s.snapshot_id.clone(),
                screenshots: s
                    .screenshots
                    .iter()
                    .rev()
                    .take(proto::limits::MAX_SCREENSHOTS)
                    .rev()
                    .map(|p| p.digest.clone())
                    .collect(),
                ..Default::default()
            };
            s.record_with(pb::RunEventKind::Escalated, reason.code(), Some(account)).await
        }
    };
    if let Err(e) = recorded {
        return Err(failed(e, s));
    }
    s.time.total = started.elapsed();
    crate::metrics::ended(&end, s.rules.steps(), &s.rules.counts);
    Ok(Outcome {
        end,
        steps: s.rules.steps(),
        counts: s.rules.counts,
        log: s.log,
        time: s.time,
        trace: s.trace,
        screenshots: s.screenshots,
    })
}

impl State<'_> {
    /// The model's turns until the run ends.
    async fn turns<M: Model>(&mut self, model: &mut M) -> Result<End, RunError> {
        let task = self.task;
        let system = prompt::system(&prompt::Run {
            portal_origin: &task.portal_origin,
            org_name: &task.org_name,
            run_id: &task.run_id,
            goal: &task.goal,
            max_steps: task.max_steps,
        });
        let of = u32::try_from(task.subgoals.len()).unwrap_or(u32::MAX).max(1);
        loop {
            // The budget is checked before the model is asked: a budget of N is N turns.
            if let Some(end) = self.rules.exhausted() {
                return Ok(end);
            }
            // The model sees the snapshot's nodes, never the sealed facts or record values
            // beside them, which only the authorizer reads.
            let shown = self.current.as_ref().map(|o| rt::ObserveReply {
                snapshot_id: o.snapshot_id.clone(),
                url: o.url.clone(),
                title: o.title.clone(),
                nodes: o.nodes.clone(),
                facts: Vec::new(),
                texts: Vec::new(),
                alerts: o.alerts.clone(),
            });
            let empty = rt::ObserveReply::default();
            // One subgoal at a time: the next is given when the model says this one is done.
            let n = self.rules.subgoal();
            let given = task.subgoals.get(n as usize - 1).map_or("", String::as_str);
            let text = prompt::render(&Step {
                number: self.rules.steps() + 1,
                max_steps: task.max_steps,
                subgoal: &prompt::subgoal(n, of, given),
                org_name: &task.org_name,
                field_ids: &task.field_ids,
                step_log: &self.log,
                last_result: &self.last,
                snapshot: shown.as_ref().unwrap_or(&empty),
            });
            let view = View {
                system: &system,
                prompt: &text,
                snapshot: shown.as_ref(),
                last_result: &self.last,
                step: self.rules.steps() + 1,
                subgoal: n,
            };
            let step_started = std::time::Instant::now();
            let model_before = self.time.model;
            let answered = timed!(self.time.model, model.next(view).await);
            let model_ms = self.time.model.saturating_sub(model_before);
            let step = self.rules.steps() + 1;
            let turn = match answered {
                Ok(turn) => turn,
                Err(e) => {
                    // The step the model failed on is in the trace too.
                    let none = crate::model::Turn::default();
                    let _ = self.trace_step(step, &none, "model_error", step_started.elapsed(), model_ms).await;
                    return Err(e.into());
                }
            };
            let given = self.rules.subgoal();
            let (ended, result) = match self.rules.reply(&turn) {
                Verdict::End(end) => {
                    let word = end.reason().to_owned();
                    (Some(end), word)
                }
                Verdict::Refuse { rule, reason } => {
                    self.record(pb::RunEventKind::Refused, rule).await?;
                    self.note(format!("refused ({rule})"), state::refusal(rule, &reason, &self.snapshot_id));
                    (None, format!("refused:{rule}"))
                }
                Verdict::Run(call) => {
                    let end = self.carry(call).await?;
                    let word = end.as_ref().map_or_else(|| state::result_word(&self.last), |e| e.reason().to_owned());
                    (end, word)
                }
            };
            // A subgoal the model said was done shows in the trace, beside the turn that said so.
            let said_done = self.rules.subgoal() > given && ended.is_none() && result == "ok";
            let result = if said_done { format!("subgoal_{given}_done") } else { result };
            self.trace_step(step, &turn, &result, step_started.elapsed(), model_ms).await?;
            if let Some(end) = ended {
                return Ok(end);
            }
        }
    }
}

impl State<'_> {
    /// Carries out one call that passed the rules; `Some` when it ends the run.
    async fn carry(&mut self, call: Call) -> Result<Option<End>, RunError> {
        // Every call but an escalation reads the owner's Stop first: a read of the page (a
        // snapshot, a screenshot, an act's form read back) is not made for a stopped chat.
        if !matches!(call, Call::Escalate { .. })
            && let Some(end) = self.stop_read().await?
        {
            return Ok(Some(end));
        }
        match call {
            Call::Snapshot => {
                let req = rt::ObserveRequest {
                    session_id: self.task.browser_session.clone(),
                    run_id: self.task.run_id.clone(),
                };
                let o = match timed!(self.time.runtime, self.clients.runtime.observe(self.clients.req(req)).await) {
                    Ok(o) => o.into_inner(),
                    Err(s) => return self.unread("snapshot", s),
                };
                let shown = confirmation(&o);
                let confirmed = shown.clone().filter(|r| self.dispatched && !self.references.contains(r));
                self.references.extend(shown);
                let seen = self.rules.observed(&o);
                self.note(
                    format!("snapshot {} ({} nodes)", o.snapshot_id, o.nodes.len()),
                    format!("snapshot {}", o.snapshot_id),
                );
                self.snapshot_id.clone_from(&o.snapshot_id);
                self.current = Some(o);
                if let Some(reference) = confirmed {
                    return Ok(Some(End::Done { reference }));
                }
                Ok(seen.err())
            }
            Call::Screenshot => {
                let req = rt::ScreenshotRequest { session_id: self.task.browser_session.clone() };
                let png = match timed!(self.time.runtime, self.clients.runtime.screenshot(self.clients.req(req)).await)
                {
                    Ok(r) => r.into_inner().png,
                    Err(s) => return self.unread("screenshot", s),
                };
                // The picture is kept by its digest: the record names it, the trace holds it.
                let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&png)));
                self.screenshots.push(Screenshot { digest: digest.clone(), png });
                self.note("screenshot".into(), state::success_with(&digest));
                Ok(None)
            }
            Call::Escalate { reason, detail, .. } => Ok(Some(End::escalated(reason, detail))),
            Call::RequestApproval { target } => self.request_approval(target).await,
            Call::Act { target, act } => self.act(target, act).await,
        }
    }
}

/// The reference number a confirmation page shows: "Reference" (or "reference number",
/// "Ref") followed by a token of letters, digits and dashes with a digit in it.
pub fn confirmation(o: &rt::ObserveReply) -> Option<String> {
    // A field's name can be its placeholder ("Ref 1234"), which the page wrote before anything
    // was confirmed: only the title and what is not a field can say the task is done.
    let field = |n: &&rt::Node| crate::tools::FIELDS.iter().any(|(_, r)| *r as i32 == n.role);
    let texts = std::iter::once(o.title.as_str()).chain(o.nodes.iter().filter(|n| !field(n)).map(|n| n.name.as_str()));
    for text in texts {
        let words: Vec<&str> =
            text.split(|c: char| c.is_whitespace() || c == ':' || c == '#').filter(|w| !w.is_empty()).collect();
        for (i, w) in words.iter().enumerate() {
            let lower = w.to_ascii_lowercase();
            if !(lower == "reference" || lower == "ref" || lower == "ref.") {
                continue;
            }
            let next = words.get(i + 1).filter(|n| n.eq_ignore_ascii_case("number")).map_or(i + 1, |_| i + 2);
            if let Some(token) = words.get(next) {
                let t = token.trim_end_matches(['.', ',']);
                let shaped = (4..=40).contains(&t.len())
                    && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && t.bytes().any(|b| b.is_ascii_digit());
                if shaped {
                    return Some(t.to_owned());
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confirmation_is_a_reference_number_on_the_page() {
        let page = |title: &str, name: &str| rt::ObserveReply {
            title: title.into(),
            nodes: vec![rt::Node { name: name.into(), ..Default::default() }],
            ..Default::default()
        };
        assert_eq!(confirmation(&page("Done", "Your reference number: LX-4471")), Some("LX-4471".into()));
        assert_eq!(confirmation(&page("Ref #A1B2C3", "")), Some("A1B2C3".into()));
        for none in [page("Lesson", "Reference material"), page("Ref", "Next"), page("Reference: ABCD", "")] {
            assert_eq!(confirmation(&none), None, "{none:?}");
        }
        // A field's placeholder is not the page saying so.
        let mut placeholder = page("Claim", "Ref 1234");
        placeholder.nodes[0].role = rt::Role::Textbox as i32;
        assert_eq!(confirmation(&placeholder), None);
    }
}
