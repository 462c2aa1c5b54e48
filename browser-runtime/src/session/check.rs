//! An act's checks, before anything is armed or sent: its claim against the snapshot, the live
//! page re-read, the action against the live node (its grant, record value and ticket), and a
//! dispatch ticket opened and matched.

use classifier::constraint::{DispatchConstraint, GrantKind};
use classifier::{Action, Consequence, FieldKind, Grant, PageFacts, TaskScope};
use fantoccini::elements::ElementRef;

use crate::fence::Handle;
use crate::guard::PageRead;
use proto::ticket::Keyring;
use time::OffsetDateTime;

use super::{ActAction, ActInput, ActOutcome, Code, Session, SessionError, origin_of};
use crate::config::BrowserConfig;
use crate::page::{self, NodeRead, ReadError, Role};
use crate::records::{RecordError, RecordStore};
use crate::ticket::{self, Expected, Refusal, Ticketed};

impl Session {
    /// The act's claim against the snapshot: within the budget, a ref of the newest snapshot,
    /// with the role and name the snapshot showed. The node's index, the node, the page's URL.
    pub(super) fn check_claim(&self, input: &ActInput) -> Result<(usize, NodeRead, String), ActOutcome> {
        let refuse = |code, detail| refused(input, code, detail);
        if self.applied >= u64::from(self.max_steps) {
            return Err(refuse(Code::BudgetExceeded, format!("the run's budget of {} steps is spent", self.max_steps)));
        }
        let (index, seen) = match self.node(&input.snapshot_id, &input.node_ref) {
            Ok((i, n)) => (i, n.clone()),
            Err(Code::StaleSnapshot) => {
                return Err(refuse(Code::StaleSnapshot, "the snapshot is not the newest one: observe again".into()));
            }
            Err(code) => return Err(refuse(code, format!("{} is not in the snapshot", input.node_ref))),
        };
        let seen_url = self.snapshot.as_ref().map(|s| s.url.clone()).unwrap_or_default();
        // The model's claim must be what the snapshot showed.
        if seen.role != Some(input.expected_role) {
            return Err(refuse(Code::RoleMismatch, "the snapshot showed another role for this ref".into()));
        }
        if seen.name != input.expected_name {
            return Err(refuse(Code::NameMismatch, "the snapshot showed another name for this ref".into()));
        }
        Ok((index, seen, seen_url))
    }

    /// The live page re-read in one round trip: the node must still be the snapshot's, the page
    /// on the run's origins, and wherever the act could lead too.
    pub(super) async fn read_live(
        &mut self,
        input: &ActInput,
        (index, seen, seen_url): (usize, NodeRead, String),
        config: &BrowserConfig,
    ) -> Result<Result<Live, ActOutcome>, SessionError> {
        let refuse = |code, detail| refused(input, code, detail);
        let (client, devtools) = self.running(config).await?;

        // The live page: URL, element and every label source, in one round trip.
        let (live_page, live) = match page::reread(&devtools, &input.snapshot_id, index).await {
            Ok(r) => r,
            Err(ReadError::DevTools(e)) if e.document_gone() => {
                return Ok(Err(refuse(Code::StaleSnapshot, "the page navigated: observe again".into())));
            }
            Err(e) => return Err(self.read_failed(e, config).await),
        };
        let Some((live, element)) = live else {
            return Ok(Err(refuse(Code::StaleSnapshot, "the page re-rendered: the node is gone".into())));
        };
        // ... and what the live page says now.
        if live.role != Some(input.expected_role) {
            let is = live.role.map_or("none of the listed roles", Role::code);
            return Ok(Err(refuse(Code::RoleMismatch, format!("the node is now a {is}"))));
        }
        if live.name != input.expected_name {
            return Ok(Err(refuse(Code::NameMismatch, "the node's accessible name is not the expected one".into())));
        }
        // Anything else about the node or the page that moved since the snapshot (a label
        // source, a target, the URL) makes the snapshot's facts, and any approval of them, stale.
        let state =
            |n: &NodeRead| (n.state.checked, n.state.expanded, n.state.selected, n.state.filled, n.value.clone());
        let moved = live.facts != seen.facts || live.option_count != seen.option_count || state(&live) != state(&seen);
        if moved || live_page.url != seen_url {
            return Ok(Err(refuse(Code::StaleSnapshot, "the page changed since the snapshot: observe again".into())));
        }

        // The run stays on its origins: the page, and wherever the act could lead.
        let allowed = |url: &str| origin_of(url).is_some_and(|o| self.allowed_origins.contains(&o));
        if !allowed(&live_page.url) {
            return Ok(Err(refuse(Code::OffOriginTarget, "the page is not on the run's origins".into())));
        }
        let leads = !matches!(input.action, ActAction::Type { .. } | ActAction::Scroll { .. });
        if let Some(t) = live.facts.nav_targets.iter().find(|t| leads && !allowed(t)) {
            let shown = origin_of(t).unwrap_or_else(|| t.split(':').next().unwrap_or_default().to_owned());
            return Ok(Err(refuse(Code::OffOriginTarget, format!("the act could lead to {shown}"))));
        }

        Ok(Ok(Live { client, devtools, page: live_page, node: live, element }))
    }

    /// The act against what the live node is: the record value it types, its ticket, the
    /// grant's coverage under the ticket's constraint, a control it applies to, and an approval
    /// where the runtime reads a consequence. The text to type, and the ticket checked (none when
    /// a token is to be redeemed for it).
    pub(super) fn check_action(
        &self,
        input: &ActInput,
        records: &RecordStore,
        tickets: &Keyring,
        (live, seen): (&Live, &Seen),
        now: OffsetDateTime,
    ) -> Result<Result<Allowed, ActOutcome>, SessionError> {
        let refuse = |code, detail| refused(input, code, detail);
        let (live_page, live) = (&live.page, &live.node);
        let text = self.record_text(input, records)?;
        let action = match (&input.action, &text) {
            (ActAction::Type { .. }, Some(t)) => Action::Type { text: t.clone() },
            (ActAction::Select { option }, _) => Action::Select { option: option.clone() },
            (ActAction::Check, _) => Action::Check,
            (ActAction::Press { key }, _) => Action::Press { key: key.clone() },
            (ActAction::Scroll { by }, _) => Action::Scroll { by: *by },
            _ => Action::Click,
        };

        // Nothing is dispatched that the authorizer did not allow: a ticket sealed for this very
        // act, or a token the owner approved it with (redeemed for its ticket last).
        let ticketed = match (&input.ticket, &input.approval_token) {
            // One allow per act: a grant's ticket beside a token would arm the grant's fence for
            // what the owner approved alone.
            (Some(_), Some(_)) => {
                return Ok(Err(refuse(
                    Code::ApprovalTokenInvalid,
                    "an act carries a ticket or an approval token, not both".into(),
                )));
            }
            (Some(t), None) => match self.check_ticket(tickets, t, input, seen, text.as_deref(), now) {
                Ok(t) => Some(t),
                // Only its age kept it from fitting: authorizing again cures that.
                Err(why) => {
                    let code = if why.retryable() { Code::ApprovalRequired } else { Code::ApprovalTokenInvalid };
                    return Ok(Err(refuse(code, why.to_string())));
                }
            },
            (None, Some(_)) => None,
            (None, None) => {
                return Ok(Err(refuse(
                    Code::ApprovalRequired,
                    "no dispatch ticket: authorize the act, or request an approval for this snapshot and ref".into(),
                )));
            }
        };

        // Under a grant's constraint: the same coverage rules as the authorizer, on live facts,
        // first, so that a refusal names the same rule the worker would have named.
        let page_facts = PageFacts { url: live_page.url.clone() };
        if let Some(c) = ticketed.as_ref().and_then(|t| t.constraint.as_ref()) {
            let not_applicable = |reason: &'static str, detail: String| ActOutcome {
                reason: Some(reason),
                ..refuse(Code::GrantNotApplicable, detail)
            };
            if now >= c.not_after {
                return Ok(Err(not_applicable("constraint_expired", "the grant's constraint has expired".into())));
            }
            if live.option_count > classifier::coverage::MAX_OPTIONS {
                return Ok(Err(not_applicable("too_many_options", "the select has too many options".into())));
            }
            if let Err(e) = covered(c, &action, live, &page_facts) {
                return Ok(Err(not_applicable(e.reason.code(), e.detail)));
            }
        }

        if let Some(refusal) = control_refusal(input, live) {
            return Ok(Err(refusal));
        }

        // The runtime's own judgement of consequence: a named consequence, or a label or option
        // list it could not read whole, needs a token.
        let consequence = classifier::classify(&live.facts, &page_facts);
        let unread = live.facts.truncated || live.option_count > classifier::coverage::MAX_OPTIONS;
        let consequential = matches!(consequence, Consequence::Named(_)) || unread;
        self.read_consequential.set(Some(consequential));
        if consequential != input.consequential {
            tracing::info!(
                run = %input.run_id, node = %input.node_ref, model = input.consequential, runtime = consequential,
                "the model and the runtime disagree on consequence"
            );
        }
        let approved = input.approval_token.is_some() || ticketed.as_ref().is_some_and(|t| t.constraint.is_none());
        if consequential && !approved {
            let reads = if unread { "a label the runtime could not read whole" } else { consequence.code() };
            return Ok(Err(refuse(
                Code::ApprovalRequired,
                format!("the node reads as {reads}: request an approval for this snapshot and ref"),
            )));
        }

        Ok(Ok(Allowed { text, ticketed }))
    }

    /// `ticket` opened with the tenant's keys and matched with this session and the act in hand,
    /// not dispatched before.
    #[allow(clippy::too_many_arguments)] // the act, what the live page says, and the keys
    pub(super) fn check_ticket(
        &self,
        tickets: &Keyring,
        t: &proto::v1::DispatchTicket,
        input: &ActInput,
        seen: &Seen,
        text: Option<&str>,
        now: OffsetDateTime,
    ) -> Result<Ticketed, Refusal> {
        let expected = Expected {
            tenant: &self.tenant,
            principal: &self.principal,
            profile: &self.profile,
            run_id: &input.run_id,
            snapshot_id: &input.snapshot_id,
            node_ref: &input.node_ref,
            action: &input.action,
            text,
            element_role: &seen.role,
            element_name: &seen.name,
            page_origin: &seen.origin,
            now,
        };
        let refused =
            |why: &Refusal| crate::metrics::METRICS.tickets_refused.get_or_create(&[("why", why.label())]).inc();
        let checked = ticket::check(tickets, t, &expected).inspect_err(|why| {
            refused(why);
            tracing::warn!(run = %input.run_id, node = %input.node_ref, %why, "a dispatch ticket was refused");
        })?;
        if self.spent.contains(&checked.ticket_id) {
            refused(&Refusal::Spent);
            return Err(Refusal::Spent);
        }
        Ok(checked)
    }
}

impl Session {
    /// The task-record value a type types, read for this session's owner and run.
    fn record_text(&self, input: &ActInput, records: &RecordStore) -> Result<Option<String>, SessionError> {
        let ActAction::Type { field_id } = &input.action else { return Ok(None) };
        match records.value(&self.tenant, &self.principal, &input.run_id, field_id) {
            Ok(v) => Ok(Some(v)),
            Err(e @ (RecordError::Invalid(_) | RecordError::NoField { .. })) => {
                Err(SessionError::Invalid(e.to_string()))
            }
            Err(e @ RecordError::Malformed(..)) => Err(SessionError::Internal(e.to_string())),
            Err(e @ RecordError::Unreadable(..)) => Err(SessionError::Unavailable(e.to_string())),
        }
    }
}

/// Whether the live control can take the act at all: rendered, enabled, of a kind the action
/// applies to, one option to choose, a key that is not a click or a submit, never a credential.
fn control_refusal(input: &ActInput, live: &NodeRead) -> Option<ActOutcome> {
    let refuse = |code, detail| refused(input, code, detail);
    let kind = live.facts.field_kind;
    if !live.visible {
        return Some(refuse(Code::NodeNotInteractable, "the node is not rendered".into()));
    }
    if live.facts.disabled && !matches!(input.action, ActAction::Scroll { .. }) {
        return Some(refuse(Code::NodeNotInteractable, "the node is disabled".into()));
    }
    let fits = match &input.action {
        // Never a secret's field, whatever the record holds.
        ActAction::Type { .. } => classifier::coverage::takes_text(kind) && !kind.is_secret(),
        ActAction::Select { .. } => kind == FieldKind::Select,
        ActAction::Check => matches!(kind, FieldKind::Checkbox | FieldKind::Radio | FieldKind::CustomChoice),
        _ => true,
    };
    if !fits {
        return Some(refuse(Code::NodeNotInteractable, "the action does not apply to this kind of control".into()));
    }
    // One option, or none: the owner or the grant allowed a choice, never a guess between two.
    if let ActAction::Select { option } = &input.action {
        let why = match classifier::facts::choosable(&live.facts.options, option).len() {
            1 => None,
            0 => Some("no option has that value or label"),
            _ => Some("more than one option has that value or label: name it by its value"),
        };
        if let Some(why) = why {
            return Some(refuse(Code::NodeNotInteractable, why.into()));
        }
    }
    // A submit is a click, whose approval shows the form read back: a key that would submit
    // bypasses that, whatever allowed the key. So does an activation key on anything that
    // takes no text, whose keyboard activation is a click (a page's handler may submit from
    // it). The agent can click instead, so the refusal lets it go on.
    if let ActAction::Press { key } = &input.action {
        let why = if live.submit_keys.contains(key) {
            Some(format!("{key:?} here submits the form: click the form's submit button instead"))
        } else if classifier::coverage::activates(kind, key) {
            Some(format!("{key:?} on this control is a click: click it instead"))
        } else {
            None
        };
        if let Some(why) = why {
            return Some(ActOutcome { recoverable: true, ..refuse(Code::NodeNotInteractable, why) });
        }
    }
    if kind.is_credential() {
        return Some(refuse(
            Code::NodeNotInteractable,
            "credential and one-time-code fields are never acted on".into(),
        ));
    }
    None
}

/// What a ticket's decision must have read of the live node and page: the role and name as the
/// snapshot's facts carry them, and the page's origin.
pub(super) struct Seen {
    pub(super) role: String,
    pub(super) name: String,
    pub(super) origin: String,
    /// The navigation targets as the authorizer was sent them, which its card shows; none when
    /// they were cut on the way, since the card could not show them all.
    pub(super) destinations: Vec<String>,
}

impl Seen {
    pub(super) fn of(live: &Live) -> Self {
        let carried = crate::service::facts_pb(&live.node);
        let destinations = if carried.nav_targets_carried { carried.nav_targets } else { Vec::new() };
        Self {
            role: carried.role,
            name: carried.name,
            origin: origin_of(&live.page.url).unwrap_or_default(),
            destinations,
        }
    }
}

/// What the act's checks let through: the text a type types, and the ticket that allowed it
/// (none yet when a token is to be redeemed for it).
pub(super) struct Allowed {
    pub(super) text: Option<String>,
    pub(super) ticketed: Option<Ticketed>,
}

/// The live page and node an act was checked against, and the browser it runs in.
pub(super) struct Live {
    pub(super) client: fantoccini::Client,
    pub(super) devtools: Handle,
    pub(super) page: PageRead,
    pub(super) node: NodeRead,
    pub(super) element: ElementRef,
}

/// A refusal of `input`: nothing was dispatched.
pub(super) fn refused(input: &ActInput, code: Code, detail: String) -> ActOutcome {
    ActOutcome {
        code,
        detail,
        snapshot_id: input.snapshot_id.clone(),
        changed: false,
        dispatched: false,
        outcome_unknown: false,
        reason: None,
        consequential: None,
        recoverable: code.recoverable(),
    }
}

/// The classifier's coverage under the constraint: a task grant on one of its origins with its
/// per-action text cap; a standing grant on one of its origins.
pub(super) fn covered(
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
                    chars_remaining: c.max_text_chars(),
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
