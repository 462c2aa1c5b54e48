//! The contract's rules as code: what the harness checks of every turn before anything reaches
//! the runtime, and what ends a run. Each end carries the record's named reason; each refusal is
//! shown to the model and counted.

use std::collections::HashMap;

use proto::runtime::{ActReply, ObserveReply, Role};
use sha2::{Digest, Sha256};

use crate::reason::Reason;
use crate::tools::{self, Call, Target};

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The confirmation page showed a reference number.
    Done { reference: String },
    /// The model escalated, or a rule did: the record's reason (`ambiguous_target`, …,
    /// `repeated_snapshot`, `no_progress`, `budget_exhausted`, `terminal_refusal`).
    Escalated { reason: Reason, detail: String },
}

/// What a page alone ends a run with, read by code rather than left to the model: a sign-in
/// or one-time-code field (`auth_required`: authentication is never the agent's), or an alert
/// region that says something went wrong (`page_error`: the record's "an error you did not
/// cause"; the agent has no way to put one right, since it types only the record's values).
/// A title is never read for it: a lesson called "Error handling 101" is not an error.
pub fn page_stops(o: &ObserveReply) -> Option<(Reason, &'static str)> {
    use proto::v1::FieldKind as K;
    let secret = o
        .facts
        .iter()
        .filter_map(|f| f.element.as_ref())
        .any(|e| matches!(e.field_kind.and_then(|k| K::try_from(k).ok()), Some(K::Password | K::OneTimeCode)));
    if secret {
        return Some((Reason::AuthRequired, "the page asks for a password or a one-time code"));
    }
    o.alerts
        .iter()
        .any(|a| reads_as_error(a))
        .then_some((Reason::PageError, "an alert on the page says something went wrong"))
}

/// Whether an alert's text says something went wrong: one of the words pages use for it.
pub fn reads_as_error(text: &str) -> bool {
    const WORDS: [&str; 10] =
        ["error", "errors", "failed", "failure", "wrong", "unavailable", "invalid", "denied", "problem", "problems"];
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).collect();
    // "No errors", "0 errors found": a page saying all is well.
    words
        .iter()
        .enumerate()
        .any(|(i, w)| WORDS.contains(w) && !(i > 0 && matches!(words[i - 1], "no" | "0" | "zero" | "without")))
}

impl End {
    pub fn escalated(reason: Reason, detail: impl Into<String>) -> Self {
        Self::Escalated { reason, detail: detail.into() }
    }

    /// The reason's name, for events and counts.
    pub fn reason(&self) -> &str {
        match self {
            Self::Done { .. } => "done",
            Self::Escalated { reason, .. } => reason.code(),
        }
    }
}

/// What the harness does with a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Carry out this call.
    Run(Call),
    /// Refuse it before the runtime; the model is shown the reason (and it is counted under
    /// `rule`).
    Refuse { rule: &'static str, reason: String },
    /// The run is over.
    End(End),
}

/// One node as the model was shown it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub role: Role,
    pub name: String,
}

/// A run's state as the rules need it.
#[derive(Debug)]
pub struct Rules {
    max_steps: u32,
    steps: u32,
    /// The most recent snapshot: its id and nodes. Every earlier one is void.
    current: Option<(String, HashMap<String, Shown>)>,
    /// How often each page state (its URL and nodes, not its id) was observed.
    seen: HashMap<[u8; 32], u32>,
    /// Acts in a row that changed nothing.
    unchanged: u32,
    /// Every refusal by rule, and every disagreement on `consequential`.
    pub counts: HashMap<&'static str, u32>,
    /// The task-record fields a type may name.
    field_ids: Vec<String>,
    /// The subgoal given now (1-based) and how many there are.
    subgoal: u32,
    subgoals: u32,
    /// The refs the model's escalation cited.
    pub cited: Vec<String>,
    /// The next snapshot is the one that said a subgoal was done.
    declared: bool,
}

impl Rules {
    pub fn new(max_steps: u32) -> Self {
        Self::for_fields(max_steps, Vec::new())
    }

    /// Rules for a task whose record has `field_ids`.
    pub fn for_fields(max_steps: u32, field_ids: Vec<String>) -> Self {
        Self {
            field_ids,
            max_steps,
            steps: 0,
            current: None,
            seen: HashMap::new(),
            unchanged: 0,
            counts: HashMap::new(),
            subgoal: 1,
            subgoals: 1,
            cited: Vec::new(),
            declared: false,
        }
    }

    /// The task has `n` subgoals, given one at a time.
    pub fn with_subgoals(mut self, n: u32) -> Self {
        self.subgoals = n.max(1);
        self
    }

    /// The subgoal given now (1-based).
    pub fn subgoal(&self) -> u32 {
        self.subgoal
    }

    pub fn steps(&self) -> u32 {
        self.steps
    }

    /// Whether the budget is spent: checked before the model is asked for another turn.
    pub fn exhausted(&self) -> Option<End> {
        (self.steps >= self.max_steps)
            .then(|| End::escalated(Reason::BudgetExhausted, format!("{} steps", self.max_steps)))
    }

    /// One more enforcement of `rule`, in the run's counts.
    pub fn count(&mut self, rule: &'static str) {
        *self.counts.entry(rule).or_default() += 1;
    }

    /// A target the snapshot prints with another role or name is the contract's NAME_MISMATCH:
    /// the model's picture of the page is wrong, and that ends the run; the rest is refused.
    fn ungrounded(&mut self, rule: &'static str, reason: String) -> Verdict {
        if rule == "name_mismatch" {
            self.count(rule);
            return Verdict::End(End::escalated(Reason::NameMismatch, reason));
        }
        self.refuse(rule, reason)
    }

    fn refuse(&mut self, rule: &'static str, reason: String) -> Verdict {
        self.count(rule);
        Verdict::Refuse { rule, reason }
    }

    /// One model reply: text beside the one call and its evidence line is refused (the contract
    /// allows one line), as a step; the rest is [`Rules::turn`].
    pub fn reply(&mut self, t: &crate::model::Turn) -> Verdict {
        // The safe exit is never refused: text beside an escalation is only counted.
        let escalates = matches!(t.calls.as_slice(), [(name, _)] if name == "escalate");
        if t.extra.is_empty() || escalates {
            if !t.extra.is_empty() {
                self.count("extra_text");
            }
            return self.turn(&t.calls, &t.evidence);
        }
        if let Some(end) = self.step() {
            return end;
        }
        self.refuse(
            "extra_text",
            "a turn is one tool call and one line of evidence: no plan, no list, no commentary".into(),
        )
    }

    /// Counts one step; the end if it is past the budget.
    fn step(&mut self) -> Option<Verdict> {
        self.steps += 1;
        (self.steps > self.max_steps)
            .then(|| Verdict::End(End::escalated(Reason::BudgetExhausted, format!("{} steps", self.max_steps))))
    }

    /// One model turn: the tool calls it made (name and arguments) and its evidence line.
    /// Every turn is a step, refused or not.
    pub fn turn(&mut self, calls: &[(String, serde_json::Value)], evidence: &str) -> Verdict {
        if let Some(end) = self.step() {
            return end;
        }
        let [(name, args)] = calls else {
            return self.refuse(
                "one_action_per_turn",
                format!("a turn is exactly one tool call; this one made {}", calls.len()),
            );
        };
        let call = match tools::check(name, args) {
            Ok(c) => c,
            Err(e) => return self.refuse("schema", e.to_string()),
        };
        match &call {
            // The safe exit is never refused: a missing evidence line is counted, and the run ends.
            Call::Escalate { reason, detail, refs } => {
                self.cited.clone_from(refs);
                if self.line(evidence).is_err() {
                    self.count("evidence");
                }
                return Verdict::End(End::escalated(*reason, detail.clone()));
            }
            Call::Act { target, act } => {
                if let crate::tools::Act::Type { field_id } = act
                    && !self.field_ids.iter().any(|f| f == field_id)
                {
                    // Refused, and the run goes on: not the model's `unmapped_field` escalation.
                    let reason = format!("{field_id} is not a field of this task");
                    return self.refuse("unknown_field", reason);
                }
                if let Err((rule, reason)) = self.grounded(target, evidence) {
                    return self.ungrounded(rule, reason);
                }
                // A button's, a link's or a choice's keyboard activation is a click, and a click
                // is what reads a form back before a submit: the runtime refuses such a key too.
                if let crate::tools::Act::Key { key } = act
                    && classifier::coverage::ACTIVATION_KEYS.contains(&key.as_str())
                    && !matches!(target.role, Role::Textbox | Role::Searchbox)
                {
                    return self.refuse(
                        "activation_key",
                        format!("{key:?} on a {:?} is a click: click it instead", target.role),
                    );
                }
            }
            Call::RequestApproval { target } => {
                if let Err((rule, reason)) = self.grounded(target, evidence) {
                    return self.ungrounded(rule, reason);
                }
            }
            Call::Snapshot | Call::Screenshot => {
                let intent = match self.line(evidence) {
                    Ok((_, _, intent)) => intent,
                    Err(reason) => return self.refuse("evidence", reason),
                };
                // The model says the subgoal it was given is done: the next one is given.
                if matches!(call, Call::Snapshot)
                    && intent.trim().trim_end_matches('.') == format!("subgoal {} done", self.subgoal)
                    && self.subgoal < self.subgoals
                {
                    self.subgoal += 1;
                    // Saying so is not looking again: this snapshot is not one of the three.
                    self.declared = true;
                }
            }
        }
        Verdict::Run(call)
    }

    /// An evidence line's three parts: `SUBGOAL <n> | evidence: <…> | intent: <…>`, where `n` is a
    /// subgoal given so far (an act's must be the current one: [`Rules::grounded`]).
    fn line<'e>(&self, evidence: &'e str) -> Result<(u32, &'e str, &'e str), String> {
        let form = "SUBGOAL <n> | evidence: <role> \"<accessible name>\" ref=<ref> from snapshot <snapshot_id> | intent: <what it does>";
        let parts: Vec<&str> = evidence.split(" | ").collect();
        let [number, cited, intent] = parts.as_slice() else {
            return Err(format!("every turn carries one line of evidence: {form}"));
        };
        let n = number.strip_prefix("SUBGOAL ").and_then(|n| n.parse::<u32>().ok());
        let cited = cited.strip_prefix("evidence: ").filter(|c| !c.trim().is_empty());
        let intent = intent.strip_prefix("intent: ").filter(|i| !i.trim().is_empty());
        match (n, cited, intent) {
            (Some(n), Some(c), Some(i)) if (1..=self.subgoal).contains(&n) => Ok((n, c, i)),
            (Some(n), Some(_), Some(_)) => {
                Err(format!("SUBGOAL {n} is not given: the current subgoal is {}", self.subgoal))
            }
            _ => Err(format!("every turn carries one line of evidence: {form}")),
        }
    }

    /// A target must be a node of the most recent snapshot, as printed, and the evidence line
    /// must quote it: `SUBGOAL <n> | evidence: <role> "<name>" ref=<ref> from snapshot <id> | intent: …`.
    fn grounded(&self, t: &Target, evidence: &str) -> Result<(), (&'static str, String)> {
        let Some((id, nodes)) = &self.current else {
            return Err(("stale_snapshot", "observe the page first: there is no current snapshot".into()));
        };
        if &t.snapshot_id != id {
            return Err(("stale_snapshot", format!("{} is void; the current snapshot is {id}", t.snapshot_id)));
        }
        let Some(shown) = nodes.get(&t.node_ref) else {
            return Err(("ref_not_in_snapshot", format!("{} is not in snapshot {id}", t.node_ref)));
        };
        if shown.role != t.role || shown.name != t.name {
            return Err(("name_mismatch", format!("{} is printed with another role or name", t.node_ref)));
        }
        let role = tools::role_name(t.role);
        // The name as the prompt prints it: a JSON string, so a quote or a newline in it cannot
        // make the line say something else.
        let name = crate::prompt::quoted(&t.name);
        let quoted = format!("{} {name} ref={} from snapshot {}", role.unwrap_or(""), t.node_ref, id);
        let must = || {
            format!(
                "the evidence line must read: SUBGOAL {} | evidence: {quoted} | intent: <what it does>",
                self.subgoal
            )
        };
        match self.line(evidence) {
            Ok((n, cited, _)) if n == self.subgoal && cited == quoted => Ok(()),
            _ => Err(("evidence", must())),
        }
    }

    /// A new snapshot: it becomes the only current one. The same page seen a third time ends
    /// the run.
    pub fn observed(&mut self, o: &ObserveReply) -> Result<(), End> {
        let mut digest = Sha256::new();
        digest.update(o.url.as_bytes());
        digest.update([0]);
        digest.update(o.title.as_bytes());
        let mut nodes = HashMap::new();
        for n in &o.nodes {
            let role = Role::try_from(n.role).unwrap_or(Role::Unspecified);
            digest.update([0]);
            digest.update(n.role.to_le_bytes());
            digest.update(n.name.as_bytes());
            digest.update([0]);
            digest.update(n.value.as_bytes());
            if let Some(s) = &n.state {
                digest.update([
                    u8::from(s.disabled),
                    u8::from(s.checked),
                    u8::from(s.expanded),
                    u8::from(s.selected),
                    u8::from(s.filled),
                    u8::from(s.focused),
                ]);
            }
            nodes.insert(n.r#ref.clone(), Shown { role, name: n.name.clone() });
        }
        let seen = self.seen.entry(digest.finalize().into()).or_default();
        if !std::mem::take(&mut self.declared) {
            *seen += 1;
        }
        self.current = Some((o.snapshot_id.clone(), nodes));
        if *seen >= 3 {
            return Err(End::escalated(Reason::RepeatedSnapshot, "the same page was observed three times"));
        }
        if let Some((reason, detail)) = page_stops(o) {
            self.count(reason.code());
            return Err(End::escalated(reason, detail));
        }
        Ok(())
    }

    /// A read that failed with `code`: like a snapshot, the same failure three times ends the run.
    pub fn unread(&mut self, code: &str) -> Result<(), End> {
        self.current = None;
        let digest: [u8; 32] = Sha256::digest(format!("unread\0{code}")).into();
        let seen = self.seen.entry(digest).or_default();
        *seen += 1;
        if *seen >= 3 {
            return Err(End::escalated(
                Reason::RepeatedSnapshot,
                format!("the page could not be read three times ({code})"),
            ));
        }
        Ok(())
    }

    /// The current snapshot is void without an act (a read-back found its node moved): the next
    /// target must come from a new one.
    pub fn void(&mut self) {
        self.current = None;
    }

    /// The runtime's answer to an act: the snapshot is void; two acts in a row that changed
    /// nothing, a terminal refusal, or an unknown outcome of an act not read as harmless end the
    /// run; the model's `consequential` is compared with the runtime's reading.
    pub fn acted(&mut self, target: &Target, reply: &ActReply) -> Result<(), End> {
        let runtime_consequential = reply.consequential;
        self.current = None;
        if runtime_consequential.is_some_and(|c| c != target.consequential) {
            self.count("consequential_disagreement");
        }
        if !reply.ok && !reply.recoverable {
            return Err(End::escalated(Reason::TerminalRefusal, reply.code_name.clone()));
        }
        // (An unknown outcome can come with a refusal too: the browser failed after the input.)
        // Sent, but what it did is not known (the browser failed as it settled, or input went
        // elsewhere): for an act the runtime did not read as harmless, acting again could act
        // twice, and the owner looks. (A Tab's key-up lands on the next field: unknown, harmless.)
        if reply.outcome_unknown && runtime_consequential != Some(false) {
            return Err(End::escalated(Reason::OutcomeUnknown, "what the last act did is not known"));
        }
        // Every act counts: the runtime's `changed` reads values and states, so a typed value or
        // a choice changes the tree as a click does.
        if reply.ok && !reply.changed {
            self.unchanged += 1;
            if self.unchanged >= 2 {
                return Err(End::escalated(Reason::NoProgress, "two actions in a row changed nothing"));
            }
        } else if reply.ok {
            self.unchanged = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proto::runtime::{Node, NodeState};
    use serde_json::json;

    use super::*;

    fn page(id: &str, url: &str) -> ObserveReply {
        ObserveReply {
            snapshot_id: id.into(),
            url: url.into(),
            nodes: vec![Node {
                r#ref: "n1".into(),
                role: Role::Button as i32,
                name: "Next".into(),
                value: String::new(),
                state: Some(NodeState::default()),
            }],
            ..Default::default()
        }
    }

    fn click(snapshot: &str, node: &str, name: &str) -> Vec<(String, serde_json::Value)> {
        vec![(
            "click".into(),
            json!({ "snapshot_id": snapshot, "ref": node, "expected_role": "button", "expected_name": name, "consequential": false }),
        )]
    }

    const OBSERVE: &str = "SUBGOAL 1 | evidence: none | intent: observe the page";
    const A: &str = "snap_aaaaaaaaaaaa";
    const B: &str = "snap_bbbbbbbbbbbb";

    fn evidence(snapshot: &str, node: &str, name: &str) -> String {
        format!("SUBGOAL 1 | evidence: button \"{name}\" ref={node} from snapshot {snapshot} | intent: go on")
    }

    #[test]
    fn a_grounded_click_runs_and_every_ungrounded_one_is_refused() {
        let mut r = Rules::new(50);
        assert!(matches!(
            r.turn(&click(A, "n1", "Next"), &evidence(A, "n1", "Next")),
            Verdict::Refuse { rule: "stale_snapshot", .. }
        ));
        r.observed(&page(A, "https://x.test/1")).unwrap();
        assert!(matches!(r.turn(&click(A, "n1", "Next"), &evidence(A, "n1", "Next")), Verdict::Run(_)));
        for (calls, line, rule) in [
            (click(A, "n2", "Next"), evidence(A, "n2", "Next"), "ref_not_in_snapshot"),
            (click(B, "n1", "Next"), evidence(B, "n1", "Next"), "stale_snapshot"),
            (click(A, "n1", "Next"), "I will click next".to_owned(), "evidence"),
            (click(A, "n1", "Next"), evidence(A, "n1", "Nxt"), "evidence"),
            (
                [click(A, "n1", "Next"), click(A, "n1", "Next")].concat(),
                evidence(A, "n1", "Next"),
                "one_action_per_turn",
            ),
            (vec![("click".into(), json!({ "selector": "#next" }))], String::new(), "schema"),
        ] {
            match r.turn(&calls, &line) {
                Verdict::Refuse { rule: got, .. } => assert_eq!(got, rule),
                other => panic!("{rule}: {other:?}"),
            }
        }
        assert_eq!(r.counts["evidence"], 2);
        // A name the snapshot prints otherwise: the model's picture is wrong, the run ends.
        let named = r.turn(&click(A, "n1", "Next page"), &evidence(A, "n1", "Next page"));
        assert!(matches!(named, Verdict::End(ref e) if e.reason() == "name_mismatch"), "{named:?}");
        // A field the task does not have.
        let mut t = click(A, "n1", "Next");
        t[0].0 = "type".into();
        t[0].1["expected_role"] = json!("textbox");
        t[0].1["field_id"] = json!("password");
        assert!(matches!(r.turn(&t, ""), Verdict::Refuse { rule: "unknown_field", .. }));
    }

    #[test]
    fn the_runs_ends_have_their_names() {
        let mut r = Rules::new(3);
        r.observed(&page(A, "https://x.test/1")).unwrap();
        r.observed(&page(B, "https://x.test/1")).unwrap();
        assert_eq!(r.observed(&page(A, "https://x.test/1")).unwrap_err().reason(), "repeated_snapshot");

        let target = match tools::check("click", &click(A, "n1", "Next")[0].1).unwrap() {
            Call::Act { target, .. } => target,
            other => panic!("{other:?}"),
        };
        let unchanged = ActReply { ok: true, changed: false, ..Default::default() };
        let mut r = Rules::new(10);
        let changed = ActReply { ok: true, changed: true, ..Default::default() };
        // Any two acts in a row that changed nothing, a type among them.
        let disagreeing = ActReply { consequential: Some(true), ..unchanged.clone() };
        r.acted(&target, &disagreeing).unwrap();
        r.acted(&target, &changed).unwrap();
        r.acted(&target, &unchanged).unwrap();
        assert_eq!(r.acted(&target, &unchanged).unwrap_err().reason(), "no_progress");
        assert_eq!(r.counts["consequential_disagreement"], 1);
        let unknown = |consequential| ActReply {
            ok: true,
            changed: true,
            outcome_unknown: true,
            consequential,
            ..Default::default()
        };
        assert_eq!(Rules::new(10).acted(&target, &unknown(Some(true))).unwrap_err().reason(), "outcome_unknown");
        assert_eq!(Rules::new(10).acted(&target, &unknown(None)).unwrap_err().reason(), "outcome_unknown");
        assert!(Rules::new(10).acted(&target, &unknown(Some(false))).is_ok());
        let terminal =
            ActReply { ok: false, recoverable: false, code_name: "NAME_MISMATCH".into(), ..Default::default() };
        assert_eq!(Rules::new(10).acted(&target, &terminal).unwrap_err().reason(), "terminal_refusal");
        let stale = ActReply { ok: false, recoverable: true, code_name: "STALE_SNAPSHOT".into(), ..Default::default() };
        assert!(Rules::new(10).acted(&target, &stale).is_ok());

        let mut r = Rules::new(1);
        let snap = vec![("snapshot".to_owned(), json!({}))];
        assert!(matches!(r.turn(&snap, OBSERVE), Verdict::Run(Call::Snapshot)));
        assert!(matches!(r.turn(&snap, OBSERVE), Verdict::End(ref e) if e.reason() == "budget_exhausted"));
        let esc = vec![("escalate".to_owned(), json!({ "reason": "suspected_injection", "refs": ["n1"] }))];
        assert!(matches!(Rules::new(5).turn(&esc, ""), Verdict::End(ref e) if e.reason() == "suspected_injection"));
    }

    #[test]
    fn every_turn_carries_its_evidence_and_nothing_else() {
        let snap = vec![("snapshot".to_owned(), json!({}))];
        let mut r = Rules::new(20);
        assert!(matches!(r.turn(&snap, ""), Verdict::Refuse { rule: "evidence", .. }), "a bare snapshot");
        assert!(
            matches!(
                r.turn(&snap, "SUBGOAL 2 | evidence: none | intent: look"),
                Verdict::Refuse { rule: "evidence", .. }
            ),
            "a subgoal not given"
        );
        let extra = crate::model::Turn {
            calls: snap.clone(),
            evidence: OBSERVE.into(),
            extra: "Then I will click Next.".into(),
        };
        assert!(matches!(r.reply(&extra), Verdict::Refuse { rule: "extra_text", .. }));
        assert_eq!(r.steps(), 3, "each refusal is a step");
        // The safe exit is never refused; its missing line is counted.
        let esc = vec![("escalate".to_owned(), json!({ "reason": "uncertain" }))];
        assert!(matches!(r.turn(&esc, ""), Verdict::End(_)));
        assert_eq!(r.counts["evidence"], 3);
    }

    #[test]
    fn subgoals_are_given_one_at_a_time() {
        let snap = vec![("snapshot".to_owned(), json!({}))];
        let mut r = Rules::new(20).with_subgoals(2);
        r.observed(&page(A, "https://x.test/1")).unwrap();
        // An act must name the subgoal it serves: the current one.
        let ahead = "SUBGOAL 2 | evidence: button \"Next\" ref=n1 from snapshot snap_aaaaaaaaaaaa | intent: go on";
        assert!(matches!(r.turn(&click(A, "n1", "Next"), ahead), Verdict::Refuse { rule: "evidence", .. }));
        assert!(matches!(r.turn(&snap, "SUBGOAL 1 | evidence: none | intent: subgoal 2 done"), Verdict::Run(_)));
        assert_eq!(r.subgoal(), 1, "only the current subgoal can be said done");
        assert!(matches!(r.turn(&snap, "SUBGOAL 1 | evidence: none | intent: subgoal 1 done"), Verdict::Run(_)));
        assert_eq!(r.subgoal(), 2);
        r.observed(&page(B, "https://x.test/2")).unwrap();
        assert!(matches!(
            r.turn(&click(B, "n1", "Next"), &evidence(B, "n1", "Next").replace("SUBGOAL 1", "SUBGOAL 2")),
            Verdict::Run(_)
        ));
        assert!(matches!(r.turn(&snap, "SUBGOAL 2 | evidence: none | intent: subgoal 2 done"), Verdict::Run(_)));
        assert_eq!(r.subgoal(), 2, "the last subgoal ends at the confirmation, not by word");
    }

    #[test]
    fn an_error_is_an_alert_on_the_page_not_a_word_in_its_title() {
        let mut lesson = page(A, "https://x.test/1");
        lesson.title = "Error handling 101".into();
        assert_eq!(page_stops(&lesson), None);
        lesson.alerts = vec!["Saved. 3 answers recorded".into()];
        assert_eq!(page_stops(&lesson), None);
        lesson.alerts.push("No errors found".into());
        assert_eq!(page_stops(&lesson), None);
        lesson.alerts.push("An error occurred: please try again later".into());
        assert_eq!(page_stops(&lesson).map(|(r, _)| r), Some(Reason::PageError));
        let mut r = Rules::new(20);
        assert!(r.unread("NODE_NOT_INTERACTABLE").is_ok());
        assert!(r.unread("NODE_NOT_INTERACTABLE").is_ok());
        assert_eq!(r.unread("NODE_NOT_INTERACTABLE").unwrap_err().reason(), "repeated_snapshot");
    }
}
