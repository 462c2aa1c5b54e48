//! One act of a run: the form read back, the act authorized (its ticket carried to the runtime)
//! or asked of the owner and awaited, and dispatched.

use proto::runtime::{self as rt};
use proto::v1::{self as pb, authorize_reply::Decision};

use proto::ApprovalStatus;

use crate::reason::Reason;
use crate::rules::End;
use crate::tools::{Act, Target};

use super::state::{RunError, State};

impl State<'_> {
    /// The form a click on `target` could submit, whatever its role, read back from the live
    /// page beside the task record and sealed by the runtime for the card (`None` when it
    /// submits none), with the labels of the fields that differ from the record. A click that
    /// could submit two forms, or a form too large for a card, ends the run before anything is
    /// asked: the seed's `unexpected_form_state`.
    async fn read_back(&mut self, target: &Target) -> Result<Result<Option<ReadBack>, Stop>, RunError> {
        let req = rt::ReadFormRequest {
            session_id: self.task.browser_session.clone(),
            snapshot_id: target.snapshot_id.clone(),
            r#ref: target.node_ref.clone(),
            run_id: self.task.run_id.clone(),
        };
        let reply = match timed!(self.time.runtime, self.clients.runtime.read_form(self.clients.req(req)).await) {
            Ok(r) => r.into_inner(),
            // The node re-rendered, the page holds a dialog or the browser restarted: as a
            // refused act would, the snapshot is void and the model observes again.
            Err(s) if s.code() == tonic::Code::FailedPrecondition || super::state::contract_code(&s).is_some() => {
                let (code, recoverable) =
                    super::state::contract_code(&s).unwrap_or_else(|| ("STALE_SNAPSHOT".into(), true));
                self.note(
                    format!("read-back of ref={} refused", target.node_ref),
                    super::state::failure(&code, super::state::detail(&code), &target.snapshot_id, recoverable),
                );
                if !recoverable {
                    return Ok(Err(Stop::End(End::escalated(Reason::TerminalRefusal, code))));
                }
                self.current = None;
                self.rules.void();
                self.rules.count("stale_read_back");
                return Ok(Err(Stop::Stale));
            }
            Err(s) => return Err(RunError::Runtime(s)),
        };
        let unreviewable = match reply.forms {
            0 => return Ok(Ok(None)),
            1 if reply.unreviewable.is_empty() => None,
            1 => Some(reply.unreviewable.clone()),
            n => Some(format!("a click on this node could submit {n} forms, which no card can show as one")),
        };
        if let Some(detail) = unreviewable {
            self.rules.count("form_unreviewable");
            return Ok(Err(Stop::End(End::escalated(Reason::UnexpectedFormState, detail))));
        }
        let rows = reply.review.as_ref().map(|r| r.rows.as_slice()).unwrap_or_default();
        let mismatched: Vec<String> = rows
            .iter()
            .filter(|r| r.status == pb::FormStatus::Mismatch as i32)
            .map(|r| crate::prompt::quoted(&r.label))
            .collect();
        if !mismatched.is_empty() {
            self.rules.count("form_mismatch");
        }
        Ok(Ok(reply.sealed.map(|sealed| ReadBack { sealed, mismatched })))
    }

    /// The authorizer's decision on `act` of `target`, from the sealed facts of the current
    /// snapshot (which the rules proved the target is in), with a button's form read back.
    async fn authorize(
        &mut self,
        target: &Target,
        act: &Act,
        form: Option<pb::SealedForm>,
    ) -> Result<(pb::AuthorizeReply, String), RunError> {
        let o = self.current.as_ref().expect("the rules admit only a target of the current snapshot");
        let facts = o.facts.iter().find(|f| f.r#ref == target.node_ref).and_then(|f| f.sealed.clone());
        let text = match act {
            Act::Type { field_id } => o.texts.iter().find(|t| &t.field_id == field_id).and_then(|t| t.sealed.clone()),
            _ => None,
        };
        let call_id = self.tool_call_id();
        let req = pb::AuthorizeRequest {
            session_id: self.task.chat_session.clone(),
            run: Some(pb::RunContext { run_id: self.task.run_id.clone(), interactive: true, top_level: true }),
            tool_call_id: call_id.clone(),
            turn_tool_calls: vec!["browser.act".into()],
            agent_version: self.task.agent_version.clone(),
            action: Some(action_pb(act)),
            snapshot_id: target.snapshot_id.clone(),
            node_ref: target.node_ref.clone(),
            facts,
            text,
            form,
            ..Default::default()
        };
        let reply = timed!(self.time.authorizer, self.clients.authorizer.authorize(self.clients.req(req)).await)
            .map_err(RunError::Authorizer)?;
        Ok((reply.into_inner(), call_id))
    }

    /// The form a click or a select could submit read back (ending the run on a mismatch), then
    /// the decision.
    ///
    /// A form that differs from the task record (the seed's `unexpected_form_state`) is never
    /// sent on a grant's allow: the run ends. Only the owner can let it go, on the card that
    /// shows each mismatch beside the record, or take the tab over.
    async fn decide(&mut self, target: &Target, act: &Act) -> Result<Result<Option<Decision>, Stop>, RunError> {
        let back = match act {
            // A select clicks its option, and that click reaches whatever acts on one around it.
            Act::Click | Act::Select { .. } => match self.read_back(target).await? {
                Ok(back) => back,
                Err(stop) => return Ok(Err(stop)),
            },
            _ => None,
        };
        let mismatched = back.as_ref().map(|b| b.mismatched.clone()).unwrap_or_default();
        let decision = self.authorize(target, act, back.map(|b| b.sealed)).await?.0.decision;
        if let Some(Decision::Deny(d)) = &decision
            && d.code == proto::DENY_SESSION_STOPPED
        {
            return Ok(Err(Stop::End(stopped())));
        }
        if !mismatched.is_empty() && !matches!(decision, Some(Decision::RequireApproval(_))) {
            let detail = format!("the form differs from the task record in {}", mismatched.join(", "));
            return Ok(Err(Stop::End(End::escalated(Reason::UnexpectedFormState, detail))));
        }
        Ok(Ok(decision))
    }

    pub(super) async fn act(&mut self, target: Target, act: Act) -> Result<Option<End>, RunError> {
        let ticket = match &target.approval_token {
            // The owner approved this act: the runtime redeems the token itself.
            Some(_) => None,
            None => match self.decide(&target, &act).await? {
                Err(Stop::End(end)) => return Ok(Some(end)),
                Err(Stop::Stale) => return Ok(None),
                Ok(Some(Decision::Allow(allow))) => allow.ticket,
                Ok(Some(Decision::RequireApproval(card))) => {
                    self.raised(&card.approval_id);
                    let key = (target.snapshot_id.clone(), target.node_ref.clone());
                    self.asked.insert(key, (verb(&act), card.approval_id));
                    self.note(
                        format!("{} ref={} needs approval", verb(&act), target.node_ref),
                        super::state::failure(
                            "APPROVAL_REQUIRED",
                            super::state::detail("APPROVAL_REQUIRED"),
                            &target.snapshot_id,
                            true,
                        ),
                    );
                    return Ok(None);
                }
                // The policy will not let this act happen, whoever asks: the run ends (as a
                // rejected approval does: never retried) and the owner is told why.
                Ok(Some(Decision::Deny(d))) => {
                    self.rules.count("denied");
                    self.note(format!("{} ref={} denied ({})", verb(&act), target.node_ref, d.code), String::new());
                    return Ok(Some(End::escalated(Reason::PolicyDenied, d.code)));
                }
                Ok(None) => return Err(RunError::Authorizer(tonic::Status::internal("no decision"))),
            },
        };
        self.sequence += 1;
        let req = rt::ActRequest {
            session_id: self.task.browser_session.clone(),
            sequence: self.sequence,
            run_id: self.task.run_id.clone(),
            snapshot_id: target.snapshot_id.clone(),
            r#ref: target.node_ref.clone(),
            expected_name: target.name.clone(),
            expected_role: target.role as i32,
            consequential: target.consequential,
            approval_token: target.approval_token.clone().unwrap_or_default(),
            ticket,
            action: Some(act_pb(&act)),
            wait_for: target.wait_for as i32,
        };
        let reply = timed!(self.time.runtime, self.clients.runtime.act(self.clients.req(req)).await)
            .map_err(RunError::Runtime)?
            .into_inner();
        if !reply.dispatched {
            self.sequence -= 1;
        }
        let result = if reply.ok {
            super::state::success(reply.changed, &reply.snapshot_id, reply.outcome_unknown)
        } else {
            super::state::failure_of(
                &reply.code_name,
                super::state::detail(&reply.code_name),
                &reply.snapshot_id,
                reply.recoverable,
                reply.outcome_unknown,
            )
        };
        self.dispatched |= reply.dispatched;
        // The page's name goes in the log as a JSON string, like every page string the model reads.
        let name = crate::prompt::quoted(&target.name);
        let said = if reply.ok {
            format!("ok, changed = {}", reply.changed)
        } else {
            format!("{} (recoverable = {})", reply.code_name, reply.recoverable)
        };
        self.note(format!("{} {name} ref={} → {said}", verb(&act), target.node_ref), result);
        self.current = None;
        // The model's claim of consequence against the runtime's reading: counted by the rules.
        Ok(self.rules.acted(&target, &reply).err())
    }

    /// Asks the owner about `target`: the card an act of it already raised, or else a new one
    /// for a click (the consequential act the tool names); waits for the answer, and hands an
    /// approval's token back to the model, naming the act it is for.
    pub(super) async fn request_approval(&mut self, target: Target) -> Result<Option<End>, RunError> {
        let key = (target.snapshot_id.clone(), target.node_ref.clone());
        let (verb, approval_id) = match self.asked.get(&key).cloned() {
            Some(held) => held,
            // A field is typed into, never clicked: its card is the one its type raised.
            None if crate::tools::FIELDS.iter().any(|(_, r)| *r == target.role) => {
                let why = "a field's approval is asked by typing into it first: type, then request_approval";
                let result = super::state::refusal("no_card", why, &target.snapshot_id);
                self.note(format!("request_approval ref={} without a card", target.node_ref), result);
                return Ok(None);
            }
            None => match self.decide(&target, &Act::Click).await? {
                Err(Stop::End(end)) => return Ok(Some(end)),
                Err(Stop::Stale) => return Ok(None),
                Ok(Some(Decision::RequireApproval(card))) => {
                    self.raised(&card.approval_id);
                    ("click", card.approval_id)
                }
                Ok(Some(Decision::Allow(_))) => {
                    let result = serde_json::json!({ "ok": true, "approval": "not_needed",
                        "detail": "this act needs no approval: act without a token" });
                    self.note("approval not needed".into(), result.to_string());
                    return Ok(None);
                }
                Ok(Some(Decision::Deny(d))) => return Ok(Some(End::escalated(Reason::PolicyDenied, d.code))),
                Ok(None) => return Err(RunError::Authorizer(tonic::Status::internal("no decision"))),
            },
        };
        // Waited for in bounded calls, until the owner answers or `approval_wait` runs out.
        let deadline = tokio::time::Instant::now() + self.task.approval_wait;
        let (status, got) = loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let wait = u32::try_from(left.as_millis()).unwrap_or(u32::MAX).min(20_000);
            let req = pb::AwaitApprovalRequest {
                session_id: self.task.chat_session.clone(),
                approval_id: approval_id.clone(),
                wait_ms: wait,
            };
            let got = timed!(self.time.owner, self.clients.authorizer.await_approval(self.clients.req(req)).await)
                .map_err(RunError::Authorizer)?;
            let got = got.into_inner();
            let status = ApprovalStatus::from_code(&got.status);
            if status != Some(ApprovalStatus::Pending) || tokio::time::Instant::now() >= deadline {
                break (status, got);
            }
        };
        match status {
            Some(ApprovalStatus::Approved) if !got.approval_token.is_empty() => {
                let result = serde_json::json!({ "ok": true, "approval": "approved",
                    "approval_token": got.approval_token, "act": verb, "ref": target.node_ref,
                    "snapshot_id": target.snapshot_id });
                self.note("approved by the owner".into(), result.to_string());
                Ok(None)
            }
            // Allowed for the task, its own act already spent or past its token's life: the
            // grant decides the next act.
            Some(ApprovalStatus::Approved) if !got.grant_id.is_empty() => {
                let result = serde_json::json!({ "ok": true, "approval": "approved_for_task",
                    "detail": format!("{verb} again without a token: the task permission covers it") });
                self.note("allowed for this task by the owner".into(), result.to_string());
                Ok(None)
            }
            Some(ApprovalStatus::Pending) => {
                Ok(Some(End::escalated(Reason::ApprovalTimeout, "the owner did not answer in time")))
            }
            Some(ApprovalStatus::Stopped) => Ok(Some(stopped())),
            // The owner acts in the live tab: nothing more of the run's.
            Some(ApprovalStatus::TakenOver) => {
                Ok(Some(End::escalated(Reason::TakenOver, "the owner took the live tab over")))
            }
            // Never retry a rejected approval.
            _ => Ok(Some(End::escalated(Reason::ApprovalRejected, got.status))),
        }
    }
}

impl State<'_> {
    /// Tells whoever listens for the run's cards that it raised `approval_id`.
    fn raised(&self, approval_id: &str) {
        if let Some(cards) = &self.task.cards {
            let _ = cards.send(approval_id.to_owned());
        }
    }

    /// The run's end when the owner has stopped the agent in its chat: read before every call, so
    /// a run that only observes ends at its next call too.
    pub(super) async fn stop_read(&mut self) -> Result<Option<End>, RunError> {
        let req = pb::CheckStopRequest { session_id: self.task.chat_session.clone(), ticket: None };
        let reply = match timed!(self.time.authorizer, self.clients.authorizer.check_stop(self.clients.req(req)).await)
        {
            Ok(r) => r,
            // An authorizer of the release before this worker's: the roll order was not kept.
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                return Err(RunError::Authorizer(tonic::Status::failed_precondition(
                    "the authorizer is of an older release (it has no CheckStop): upgrade the authorizers before the workers",
                )));
            }
            Err(s) => return Err(RunError::Authorizer(s)),
        };
        Ok(reply.into_inner().stopped.then(stopped))
    }
}

/// The owner pressed Stop for the agent in this session: the run ends, and no act is decided for
/// the session until the owner writes again.
fn stopped() -> End {
    End::escalated(Reason::StoppedByOwner, "the owner stopped the agent")
}

/// A form read back for a card: sealed by the runtime, and the labels of the fields that differ
/// from the task record.
struct ReadBack {
    sealed: pb::SealedForm,
    mismatched: Vec<String>,
}

/// Why an act went no further than its read-back.
enum Stop {
    /// The run ends.
    End(End),
    /// The node moved under the read: the model observes again.
    Stale,
}

fn verb(act: &Act) -> &'static str {
    match act {
        Act::Click => "click",
        Act::Type { .. } => "type",
        Act::Select { .. } => "select",
        Act::Key { .. } => "key",
        Act::Scroll { .. } => "scroll",
    }
}

fn action_pb(act: &Act) -> pb::Action {
    let (kind, mut a) = match act {
        Act::Click => (pb::ActionKind::Click, pb::Action::default()),
        Act::Type { field_id } => {
            (pb::ActionKind::Type, pb::Action { field_id: field_id.clone(), ..Default::default() })
        }
        Act::Select { option } => (pb::ActionKind::Select, pb::Action { option: option.clone(), ..Default::default() }),
        Act::Key { key } => (pb::ActionKind::Press, pb::Action { key: key.clone(), ..Default::default() }),
        Act::Scroll { by } => (pb::ActionKind::Scroll, pb::Action { scroll_by: *by, ..Default::default() }),
    };
    a.kind = kind as i32;
    a
}

fn act_pb(act: &Act) -> rt::act_request::Action {
    use rt::act_request::Action as A;
    match act {
        Act::Click => A::Click(rt::Click {}),
        Act::Type { field_id } => A::Type(rt::Type { field_id: field_id.clone() }),
        Act::Select { option } => A::Select(rt::Select { option: option.clone() }),
        Act::Key { key } => A::Press(rt::Press { key: key.clone() }),
        Act::Scroll { by } => A::Scroll(rt::Scroll { by: *by }),
    }
}
