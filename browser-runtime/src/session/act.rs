//! An act, step by step: its claim against the snapshot, the live page re-read, the action
//! and its dispatch ticket against the live node, then the fence and guard armed, a token
//! redeemed for its ticket, and the input sent (what the act did is read back in `after.rs`).

use classifier::constraint::{DispatchConstraint, GrantKind};
use classifier::{Action, Consequence, FieldKind, Grant, PageFacts, TaskScope};
use fantoccini::elements::{Element, ElementRef};
use proto::ticket::Keyring;
use serde_json::json;
use time::OffsetDateTime;

use crate::config::BrowserConfig;
use crate::fence::{Armed, Handle, Scope};
use crate::guard::{self, GuardMode};
use crate::page::{self, NodeRead, PageRead, ReadError, Role};
use crate::records::{RecordError, RecordStore};
use crate::ticket::{self, Expected, Ticketed};

use super::*;

impl Session {
    /// Re-checks the act against the live page and, only if nothing refuses, dispatches it.
    pub async fn act(
        &mut self,
        input: ActInput,
        records: &RecordStore,
        allow: Allow<'_, impl Redeem>,
        config: &BrowserConfig,
        now: OffsetDateTime,
    ) -> Result<ActOutcome, SessionError> {
        if input.sequence <= self.applied {
            return Err(SessionError::Replayed(input.sequence));
        }
        if input.sequence != self.applied + 1 {
            return Err(SessionError::OutOfOrder(self.applied + 1));
        }
        self.read_consequential.set(None);
        let outcome = self.check_and_dispatch(&input, records, allow, config, now).await.map(|mut o| {
            o.consequential = self.read_consequential.take();
            o
        });
        // After any refusal but APPROVAL_REQUIRED (whose approval is bound to this snapshot and
        // ref), the snapshot is void: the next act needs fresh facts. So is it after a failure,
        // unless only the authorizer was out of reach. (Dispatch voided it already.)
        match &outcome {
            Ok(o) if o.code == Code::ApprovalRequired => {}
            Err(SessionError::Unavailable(_)) if self.snapshot.is_some() => {}
            _ => self.snapshot = None,
        }
        outcome
    }

    /// The act's claim against the snapshot: within the budget, a ref of the newest snapshot,
    /// with the role and name the snapshot showed. The node's index, the node, the page's URL.
    fn check_claim(&self, input: &ActInput) -> Result<(usize, NodeRead, String), ActOutcome> {
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
    async fn read_live(
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
    fn check_action(
        &self,
        input: &ActInput,
        records: &RecordStore,
        tickets: &Keyring,
        (live, seen): (&Live, &Seen),
        now: OffsetDateTime,
    ) -> Result<Result<Allowed, ActOutcome>, SessionError> {
        let refuse = |code, detail| refused(input, code, detail);
        let (live_page, live) = (&live.page, &live.node);
        let kind = live.facts.field_kind;
        let text = match &input.action {
            ActAction::Type { field_id } => {
                Some(match records.value(&self.tenant, &self.principal, &input.run_id, field_id) {
                    Ok(v) => v,
                    Err(e @ (RecordError::Invalid(_) | RecordError::NoField { .. })) => {
                        return Err(SessionError::Invalid(e.to_string()));
                    }
                    Err(e @ RecordError::Malformed(..)) => return Err(SessionError::Internal(e.to_string())),
                    Err(e @ RecordError::Unreadable(..)) => return Err(SessionError::Unavailable(e.to_string())),
                })
            }
            _ => None,
        };
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
            (Some(t), _) => match self.check_ticket(tickets, t, input, seen, text.as_deref(), now) {
                Ok(t) => Some(t),
                // Only its age kept it from fitting: authorizing again cures that.
                Err(why) if why == ticket::EXPIRED => return Ok(Err(refuse(Code::ApprovalRequired, why))),
                Err(why) => return Ok(Err(refuse(Code::ApprovalTokenInvalid, why))),
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

        if !live.visible {
            return Ok(Err(refuse(Code::NodeNotInteractable, "the node is not rendered".into())));
        }
        if live.facts.disabled && !matches!(input.action, ActAction::Scroll { .. }) {
            return Ok(Err(refuse(Code::NodeNotInteractable, "the node is disabled".into())));
        }
        let fits = match &input.action {
            // Never a secret's field, whatever the record holds.
            ActAction::Type { .. } => classifier::coverage::takes_text(kind) && !kind.is_secret(),
            ActAction::Select { .. } => kind == FieldKind::Select,
            ActAction::Check => matches!(kind, FieldKind::Checkbox | FieldKind::Radio | FieldKind::CustomChoice),
            _ => true,
        };
        if !fits {
            return Ok(Err(refuse(
                Code::NodeNotInteractable,
                "the action does not apply to this kind of control".into(),
            )));
        }
        // One option, or none: the owner or the grant allowed a choice, never a guess between two.
        if let ActAction::Select { option } = &input.action {
            let why = match classifier::coverage::choosable(&live.facts.options, option).len() {
                1 => None,
                0 => Some("no option has that value or label"),
                _ => Some("more than one option has that value or label: name it by its value"),
            };
            if let Some(why) = why {
                return Ok(Err(refuse(Code::NodeNotInteractable, why.into())));
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
                return Ok(Err(ActOutcome { recoverable: true, ..refuse(Code::NodeNotInteractable, why) }));
            }
        }
        if kind.is_credential() {
            return Ok(Err(refuse(
                Code::NodeNotInteractable,
                "credential and one-time-code fields are never acted on".into(),
            )));
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
    fn check_ticket(
        &self,
        tickets: &Keyring,
        t: &proto::v1::DispatchTicket,
        input: &ActInput,
        seen: &Seen,
        text: Option<&str>,
        now: OffsetDateTime,
    ) -> Result<Ticketed, String> {
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
        let refused = |why: &'static str| crate::metrics::METRICS.tickets_refused.get_or_create(&[("why", why)]).inc();
        let checked = ticket::check(tickets, t, &expected).inspect_err(|why| {
            refused(if why == ticket::EXPIRED { "expired" } else { "invalid" });
            tracing::warn!(run = %input.run_id, node = %input.node_ref, %why, "a dispatch ticket was refused");
        })?;
        if self.spent.contains(&checked.ticket_id) {
            refused("spent");
            return Err("the ticket was dispatched already".into());
        }
        Ok(checked)
    }

    async fn check_and_dispatch(
        &mut self,
        input: &ActInput,
        records: &RecordStore,
        allow: Allow<'_, impl Redeem>,
        config: &BrowserConfig,
        now: OffsetDateTime,
    ) -> Result<ActOutcome, SessionError> {
        let refuse = |code: Code, detail: String| refused(input, code, detail);
        let claim = match self.check_claim(input) {
            Ok(c) => c,
            Err(refusal) => return Ok(refusal),
        };
        let checked = match self.read_live(input, claim, config).await? {
            Ok(l) => l,
            Err(refusal) => return Ok(refusal),
        };
        // What a ticket must have read of the live node and page, read once for both its checks.
        let seen = Seen::of(&checked);
        let Allowed { text, mut ticketed } =
            match self.check_action(input, records, allow.tickets, (&checked, &seen), now)? {
                Ok(a) => a,
                Err(refusal) => return Ok(refusal),
            };
        let Live { client, devtools, page: live_page, node: live, element } = checked;
        let kind = live.facts.field_kind;

        // The fence holds every document, ping and beacon of every act to where its allow
        // reaches, while the act runs and settles, and closes any window it opens.
        let scope = self.fence_scope(ticketed.as_ref().and_then(|t| t.constraint.as_ref()));
        let armed = self.browser.as_ref().map(|b| Armed::new(b.fence.handle(), scope));

        // The click guard or the focus check, armed on the element the read covered: a click's
        // centre must hit it, a key or text needs it to hold focus, and until the input is sent
        // nothing else takes a trusted press, click, key or text, in the page or its frames.
        let mode = match &input.action {
            ActAction::Check if live.state.checked => None,
            ActAction::Click | ActAction::Check => Some(GuardMode::Click),
            ActAction::Type { .. } | ActAction::Press { .. } => Some(GuardMode::Keys),
            ActAction::Select { .. } => Some(GuardMode::Hold),
            ActAction::Scroll { .. } => None,
        };
        let held = match mode {
            None => None,
            Some(mode) => match guard::arm(&devtools, &element, mode).await {
                Ok(Ok(held)) => Some(held),
                Ok(Err(why)) => {
                    // Focusing may have set something off: the fence holds it until settled.
                    if let Some(armed) = &armed {
                        armed.settle(std::time::Instant::now()).await;
                    }
                    return Ok(refuse(Code::NodeNotInteractable, why));
                }
                Err(e) if e.document_gone() => {
                    return Ok(refuse(Code::StaleSnapshot, "the page navigated: observe again".into()));
                }
                Err(e) => return Err(self.read_failed(ReadError::DevTools(e), config).await),
            },
        };
        // Every way out from here to the input gives the guard back.
        macro_rules! released {
            ($e:expr) => {{
                guard::release(&devtools, held).await;
                return $e;
            }};
        }

        // The token is redeemed last, once nothing else can refuse: a redeemed approval is spent.
        // Its ticket is the owner's approval of this act: checked like any other.
        if let Some(token) = &input.approval_token {
            // The form a click could submit, as the page holds it now: a card that showed the
            // form is redeemed only while it still holds exactly what the owner read. Read for
            // every act that clicks (a select clicks its option, and the click reaches whatever
            // acts on one around it), whatever the node's role and whatever the card showed: a
            // card that showed no form is never spent on a submit.
            let form_digest = match (&input.action, self.node(&input.snapshot_id, &input.node_ref)) {
                (ActAction::Click | ActAction::Check | ActAction::Select { .. }, Ok((index, _))) => {
                    match page::form(&devtools, &input.snapshot_id, index).await {
                        Ok((_, page::FormRead::Form(fields))) => {
                            let read: Vec<ReadBack> = fields
                                .into_iter()
                                .map(|(field, _)| ReadBack { field, typed_field_id: None, typed_run: None })
                                .collect();
                            Some(crate::review::digest(allow.tickets, &self.tenant, &read))
                        }
                        Ok((_, page::FormRead::NoForm)) => None,
                        Ok((_, page::FormRead::Several(_))) => released!(Ok(refuse(
                            Code::NodeNotInteractable,
                            "a click here could submit more than one form, which no card can show".into()
                        ))),
                        Ok((_, page::FormRead::Gone)) => {
                            released!(Ok(refuse(Code::StaleSnapshot, "the node is gone: observe again".into())))
                        }
                        Err(e) => released!(Err(self.read_failed(e, config).await)),
                    }
                }
                _ => None,
            };
            let redemption = Redemption {
                form_digest,
                token,
                run_id: &input.run_id,
                snapshot_id: &input.snapshot_id,
                node_ref: &input.node_ref,
                action: &input.action,
                text_digest: text.as_deref().map(|t| allow.tickets.text_digest(&self.tenant, t)),
                profile: &self.profile,
                element_role: &seen.role,
                element_name: &seen.name,
                page_origin: &seen.origin,
            };
            match allow.redeemer.redeem(redemption).await {
                // Checked against the time it came back: the round trip counts against its life.
                Ok(t) => match self.check_ticket(allow.tickets, &t, input, &seen, text.as_deref(), now_utc()) {
                    Ok(checked) if checked.constraint.is_none() => ticketed = Some(checked),
                    Ok(_) => released!(Ok(refuse(
                        Code::ApprovalTokenInvalid,
                        "the token redeemed for a grant's ticket".into()
                    ))),
                    Err(why) => released!(Ok(refuse(Code::ApprovalTokenInvalid, why))),
                },
                Err(RedeemError::Invalid(m)) => released!(Ok(refuse(Code::ApprovalTokenInvalid, m))),
                Err(RedeemError::Unavailable(m)) => {
                    released!(Err(SessionError::Unavailable(format!("the approval token could not be redeemed: {m}"))))
                }
                Err(RedeemError::Refused(m)) => released!(Err(SessionError::Internal(m))),
            }
        }

        // Dispatch: the act's own input, and nothing else. The sequence is spent and the snapshot
        // voided before any input is sent, so that a call cancelled from here on (its client gone,
        // its deadline passed) can never be replayed into a second act.
        let sequence = self.applied + 1;
        self.applied = sequence;
        self.snapshot = None;
        if let Some(t) = &ticketed {
            self.spent.insert(t.ticket_id.clone());
        }
        let el = Element::from_element_id(client.clone(), element.clone());
        let sent = match &input.action {
            ActAction::Click => el.click().await,
            ActAction::Type { field_id } => {
                let value = text.unwrap_or_default();
                let cleared = if kind == FieldKind::EditableRegion { Ok(()) } else { el.clear().await };
                match cleared {
                    Ok(()) => {
                        self.typed.insert(element.clone(), (input.run_id.clone(), field_id.clone()));
                        // The clear reached the page already: from here a failure leaves the
                        // outcome unknown, never "not dispatched".
                        if let Err(e) = el.send_keys(&value).await {
                            let why = self.failed(e, config).await;
                            released!(Ok(ActOutcome {
                                code: Code::Ok,
                                dispatched: true,
                                outcome_unknown: true,
                                changed: true,
                                ..refuse(Code::Ok, why.to_string())
                            }));
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            ActAction::Select { option } => {
                // The option is picked here, in the runtime's own copy of the list, by the same
                // rule the coverage read; only its index reaches the page.
                let chosen = classifier::coverage::choosable(&live.facts.options, option);
                let index = chosen.first().and_then(|c| live.facts.options.iter().position(|o| std::ptr::eq(o, *c)));
                let Some(index) = index else {
                    self.applied = sequence - 1;
                    released!(Ok(refuse(Code::NodeNotInteractable, "no option has that value or label".into())));
                };
                const PICK: &str = "const get = Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype, 'options').get; \
                    return get.call(arguments[0])[arguments[1]] || null;";
                let arg = serde_json::to_value(&el).unwrap_or_default();
                match client.execute(PICK, vec![arg, json!(index)]).await {
                    // Choosing through the option itself fires the page's input and change events.
                    Ok(v) => match page::element_ref(&v) {
                        Some(id) => Element::from_element_id(client.clone(), id).click().await,
                        None => {
                            self.applied = sequence - 1;
                            released!(Ok(refuse(Code::StaleSnapshot, "the select's options changed".into())));
                        }
                    },
                    Err(e) => Err(e),
                }
            }
            ActAction::Check => {
                if live.state.checked {
                    Ok(())
                } else {
                    el.click().await
                }
            }
            ActAction::Press { key } => match key_text(key) {
                Some(k) => el.send_keys(k).await,
                None => released!(Err(SessionError::Invalid(format!("key {key:?} is not a key the runtime presses")))),
            },
            ActAction::Scroll { by } => {
                let arg = serde_json::to_value(&el).unwrap_or_default();
                client
                    .execute(
                        "arguments[0].scrollIntoView({ block: 'nearest' }); window.scrollBy(0, arguments[1]);",
                        vec![arg, json!(by)],
                    )
                    .await
                    .map(|_| ())
            }
        };
        let dispatched = ActOutcome { code: Code::Ok, dispatched: true, ..refuse(Code::Ok, String::new()) };
        match sent {
            Ok(()) => {}
            // The browser did not act: the sequence is not spent.
            Err(e) if e.is_stale_element_reference() => {
                self.applied = sequence - 1;
                released!(Ok(refuse(Code::StaleSnapshot, "the page re-rendered: the node is gone".into())));
            }
            Err(e) if not_acted(&e) => {
                self.applied = sequence - 1;
                released!(Ok(refuse(Code::NodeNotInteractable, format!("the browser did not act: {e}"))));
            }
            // Anything else may have reached the page: the outcome is unknown, and the sequence
            // is spent so that a retry cannot act twice.
            Err(e) => {
                let why = self.failed(e, config).await;
                released!(Ok(ActOutcome {
                    outcome_unknown: true,
                    changed: true,
                    detail: why.to_string(),
                    ..dispatched
                }));
            }
        }

        Ok(self.after_act(input.wait_for, &client, &devtools, &live_page, held, mode, armed, dispatched, config).await)
    }
}

impl Session {
    /// Where an act's documents may go: a task grant's prefix on its origin, a standing grant's
    /// origin, and for an approval the run's origins (the owner saw the act, so a sensitive path
    /// it leads to is theirs to allow). A grant's reach never passes the run's origins.
    fn fence_scope(&self, constraint: Option<&DispatchConstraint>) -> Scope {
        let on_run = |origins: &[String]| -> Vec<String> {
            origins.iter().filter(|o| self.allowed_origins.contains(o)).cloned().collect()
        };
        match constraint {
            Some(c) if c.kind == GrantKind::Task => {
                Scope { origins: on_run(&c.origins), path_prefix: Some(c.path_prefix.clone()), sensitive: false }
            }
            Some(c) => Scope { origins: on_run(&c.origins), path_prefix: None, sensitive: false },
            None => Scope { origins: self.allowed_origins.clone(), path_prefix: None, sensitive: true },
        }
    }
}

/// What a ticket's decision must have read of the live node and page: the role and name as the
/// snapshot's facts carry them, and the page's origin.
struct Seen {
    role: String,
    name: String,
    origin: String,
}

impl Seen {
    fn of(live: &Live) -> Self {
        let carried = crate::service::facts_pb(&live.node);
        Self { role: carried.role, name: carried.name, origin: origin_of(&live.page.url).unwrap_or_default() }
    }
}

fn now_utc() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// What the act's checks let through: the text a type types, and the ticket that allowed it
/// (none yet when a token is to be redeemed for it).
struct Allowed {
    text: Option<String>,
    ticketed: Option<Ticketed>,
}

/// The live page and node an act was checked against, and the browser it runs in.
struct Live {
    client: fantoccini::Client,
    devtools: Handle,
    page: PageRead,
    node: NodeRead,
    element: ElementRef,
}

/// A refusal of `input`: nothing was dispatched.
fn refused(input: &ActInput, code: Code, detail: String) -> ActOutcome {
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
fn covered(
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
                    chars_remaining: c.max_text_chars,
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
