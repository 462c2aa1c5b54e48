//! An act, step by step: its checks (`check.rs`: the claim, the live page re-read, the action and
//! its dispatch ticket against the live node), then the fence and guard armed, a token redeemed for
//! its ticket, and the input sent (what the act did is read back in `after.rs`).

use classifier::FieldKind;
use classifier::constraint::{DispatchConstraint, GrantKind};
use fantoccini::elements::{Element, ElementRef};
use serde_json::json;
use time::OffsetDateTime;

use crate::config::BrowserConfig;
use crate::fence::{Armed, Handle, Place, Scope};
use crate::guard::{self, GuardMode};
use crate::page::{self, NodeRead, ReadError};
use crate::records::RecordStore;
use crate::ticket::Ticketed;

use super::check::{Allowed, Live, Seen, refused};

use super::{
    ActAction, ActInput, ActOutcome, Allow, Code, ReadBack, Redeem, RedeemError, Redemption, Session, SessionError,
    key_text, not_acted,
};

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
        // What the page or the browser did to the act is the contract's answer too, so the agent
        // observes again where it can: a dialog, a browser restarted clean, a page that moved or
        // broke the read. Only a failure of the service itself stays an error.
        let spent = self.applied >= input.sequence;
        let outcome = match outcome {
            Err(e) => match e.contract_code() {
                Some((code, recoverable)) => Ok(ActOutcome {
                    changed: spent,
                    dispatched: spent,
                    outcome_unknown: spent,
                    recoverable,
                    consequential: self.read_consequential.take(),
                    ..super::check::refused(&input, code, e.to_string())
                }),
                None => Err(e),
            },
            ok => ok,
        };
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

        // The fence holds every document, ping and beacon of every act to where its allow
        // reaches, while the act runs and settles, and closes any window it opens. A token's
        // ticket has no constraint: its act is held to its page and its card's destinations,
        // which the redemption binds (the card was made from the snapshot this live node matches).
        let scope = self.fence_scope(ticketed.as_ref().and_then(|t| t.constraint.as_ref()), &live_page.url, &seen);
        let armed = self.browser.as_ref().map(|b| Armed::new(b.fence.handle(), scope));

        // The click guard or the focus check, armed on the element the read covered: a click's
        // centre must hit it, a key or text needs it to hold focus, and until the input is sent
        // nothing else takes a trusted press, click, key or text, in the page or its frames.
        let mode = guard_mode(&input.action, &live);
        let held = match self.arm(input, mode, &devtools, &element, armed.as_ref(), config).await? {
            Ok(held) => held,
            Err(refusal) => return Ok(refusal),
        };
        // Every way out from here to the input gives the guard back.
        macro_rules! released {
            ($e:expr) => {{
                guard::release(&devtools, held).await;
                return $e;
            }};
        }

        // A grant's ticket for an act that could submit a form is spent only on the form its
        // decision read back: a field the page changed or added since is the owner's to see.
        if let Some(t) = ticketed.as_ref().filter(|t| t.constraint.is_some()) {
            let could_submit = live.facts.submits_form || t.form_digest.is_some();
            if could_submit {
                match self.live_form(input, allow.tickets, &devtools, config).await {
                    Ok(Ok(now)) if now == t.form_digest => {}
                    Ok(Ok(_)) => released!(Ok(refused(
                        input,
                        Code::StaleSnapshot,
                        "the form is not the one the decision read back: observe and read it again".into()
                    ))),
                    Ok(Err(refusal)) => released!(Ok(refusal)),
                    Err(e) => released!(Err(e)),
                }
            }
        }

        // The token is redeemed last, once nothing else can refuse: a redeemed approval is spent.
        // Its ticket is the owner's approval of this act: checked like any other.
        if let Some(token) = &input.approval_token {
            match self.redeemed(input, token, &allow, &devtools, &seen, text.as_deref(), config).await {
                Ok(Ok(t)) => ticketed = Some(t),
                Ok(Err(refusal)) => released!(Ok(refusal)),
                Err(e) => released!(Err(e)),
            }
        }

        // The owner's Stop is read last, by the authorizer: a ticket from before a Stop, a revoke
        // or a delete is never spent after it. The first input must start within the window
        // counted from the check's start (`send` holds it to that; a check answered too late is
        // made again, a few times); the owner's answer to a Stop waits out twice the window.
        let dispatched = ActOutcome { code: Code::Ok, dispatched: true, ..refuse(Code::Ok, String::new()) };
        let mut checks = 0;
        let (sequence, sent) = loop {
            checks += 1;
            let mut deadline = None;
            if let Some(t) = &ticketed {
                let asked = std::time::Instant::now();
                match allow.redeemer.check_stop(&t.sealed).await {
                    Ok(Some(within)) => deadline = Some(asked + within),
                    Ok(None) => released!(Ok(refuse(
                        Code::ApprovalRequired,
                        "the owner stopped the agent or ended the permission since this was allowed: authorize the act again"
                            .into()
                    ))),
                    Err(RedeemError::Invalid(m)) => released!(Ok(refuse(Code::ApprovalTokenInvalid, m))),
                    Err(RedeemError::Unavailable(m)) => {
                        released!(Err(SessionError::Unavailable(format!("the owner's Stop could not be read: {m}"))))
                    }
                    Err(RedeemError::Refused(m)) => released!(Err(SessionError::Internal(m))),
                    Err(RedeemError::Older(m)) => released!(Err(SessionError::Older(m))),
                }
            }

            // Dispatch: the act's own input, and nothing else. The sequence is spent and the
            // snapshot voided before any input is sent, so that a call cancelled from here on (its
            // client gone, its deadline passed) can never be replayed into a second act.
            let sequence = self.applied + 1;
            self.applied = sequence;
            let voided = self.snapshot.take();
            if let Some(t) = &ticketed {
                self.spent.insert(t.ticket_id.clone());
            }
            match self.send(input, &client, &element, &live, text.clone(), deadline, config).await {
                // Past the window before any input: nothing was sent, and the same act is
                // checked again (its sequence, ticket and snapshot unspent).
                Sent::Late => {
                    self.applied = sequence - 1;
                    self.snapshot = voided;
                    if let Some(t) = &ticketed {
                        self.spent.remove(&t.ticket_id);
                    }
                    if checks == STOP_CHECKS {
                        released!(Err(SessionError::Unavailable(
                            "the input could not start within the dispatch window of the owner's Stop check: act again"
                                .into()
                        )));
                    }
                }
                sent => break (sequence, sent),
            }
        };
        match sent {
            // (A late send never leaves the loop above.)
            Sent::Done | Sent::Late => {}
            // The browser did not act: the sequence is not spent.
            Sent::NotActed(refusal) => {
                self.applied = sequence - 1;
                released!(Ok(refusal));
            }
            // It may have reached the page: the sequence stays spent so that a retry cannot act
            // twice.
            Sent::Unknown(why) => released!(Ok(ActOutcome {
                outcome_unknown: true,
                changed: true,
                detail: why.to_string(),
                ..dispatched
            })),
            Sent::Failed(e) => released!(Err(e)),
        }

        let focus_counts = matches!(input.action, ActAction::Press { .. });
        Ok(self
            .after_act(
                input.wait_for,
                &client,
                &devtools,
                &live_page,
                held,
                mode,
                armed,
                dispatched,
                focus_counts,
                config,
            )
            .await)
    }

    /// Arms the guard in `mode` on the live element (none for a scroll or a box already
    /// ticked); a refusal when the element cannot take the act.
    async fn arm(
        &mut self,
        input: &ActInput,
        mode: Option<GuardMode>,
        devtools: &Handle,
        element: &ElementRef,
        armed: Option<&Armed>,
        config: &BrowserConfig,
    ) -> Result<Result<Option<guard::Held>, ActOutcome>, SessionError> {
        let refuse = |code: Code, detail: String| refused(input, code, detail);
        let Some(mode) = mode else { return Ok(Ok(None)) };
        match guard::arm(devtools, element, mode).await {
            Ok(Ok(held)) => Ok(Ok(Some(held))),
            Ok(Err(why)) => {
                // Focusing may have set something off: the fence holds it until settled.
                if let Some(armed) = armed {
                    guard::settle(armed, std::time::Instant::now()).await;
                }
                Ok(Err(refuse(Code::NodeNotInteractable, why)))
            }
            Err(e) if e.document_gone() => {
                Ok(Err(refuse(Code::StaleSnapshot, "the page navigated: observe again".into())))
            }
            Err(e) => Err(self.read_failed(ReadError::DevTools(e), config).await),
        }
    }

    /// The keyed digest of the form a click, check or select could submit, as the page holds it
    /// now (`None` when it submits none); a refusal when it could submit more than one, which no
    /// card or read-back can show, or the node is gone. Read for every such act whatever the
    /// node's role: a decision that read no form is never spent on a submit.
    async fn live_form(
        &mut self,
        input: &ActInput,
        tickets: &proto::ticket::Keyring,
        devtools: &Handle,
        config: &BrowserConfig,
    ) -> Result<Result<Option<Vec<u8>>, ActOutcome>, SessionError> {
        let refuse = |code: Code, detail: String| refused(input, code, detail);
        let (ActAction::Click | ActAction::Check | ActAction::Select { .. }, Ok((index, _))) =
            (&input.action, self.node(&input.snapshot_id, &input.node_ref))
        else {
            return Ok(Ok(None));
        };
        match page::form(devtools, &input.snapshot_id, index).await {
            Ok((_, page::FormRead::Form(fields))) if fields.iter().any(|(f, _)| f.opaque) => {
                Ok(Err(refuse(Code::NodeNotInteractable, crate::review::UNREADABLE_CONTROL.into())))
            }
            Ok((_, page::FormRead::Form(fields))) => {
                let read: Vec<ReadBack> = fields
                    .into_iter()
                    .map(|(field, _)| ReadBack { field, typed_field_id: None, typed_run: None, chosen_run: None })
                    .collect();
                Ok(Ok(Some(crate::review::digest(tickets, &self.tenant, &read))))
            }
            Ok((_, page::FormRead::NoForm)) => Ok(Ok(None)),
            Ok((_, page::FormRead::Several(_))) => Ok(Err(refuse(
                Code::NodeNotInteractable,
                "a click here could submit more than one form, which no card can show".into(),
            ))),
            Ok((_, page::FormRead::Gone)) => {
                Ok(Err(refuse(Code::StaleSnapshot, "the node is gone: observe again".into())))
            }
            Err(e) => Err(self.read_failed(e, config).await),
        }
    }

    /// The approve-once `token` redeemed at the authorizer for this very act, and the ticket it
    /// gives checked as any other: a refusal when the token does not fit.
    #[allow(clippy::too_many_arguments)] // the act, what the live page says, and the keys
    async fn redeemed(
        &mut self,
        input: &ActInput,
        token: &str,
        allow: &Allow<'_, impl Redeem>,
        devtools: &Handle,
        seen: &Seen,
        text: Option<&str>,
        config: &BrowserConfig,
    ) -> Result<Result<Ticketed, ActOutcome>, SessionError> {
        let refuse = |code: Code, detail: String| refused(input, code, detail);
        let form_digest = match self.live_form(input, allow.tickets, devtools, config).await? {
            Ok(d) => d,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let redemption = Redemption {
            form_digest,
            token,
            run_id: &input.run_id,
            snapshot_id: &input.snapshot_id,
            node_ref: &input.node_ref,
            action: &input.action,
            text_digest: text.map(|t| allow.tickets.text_digest(&self.tenant, t)),
            profile: &self.profile,
            element_role: &seen.role,
            element_name: &seen.name,
            page_origin: &seen.origin,
        };
        match allow.redeemer.redeem(redemption).await {
            // Checked against the time it came back: the round trip counts against its life.
            Ok(t) => match self.check_ticket(allow.tickets, &t, input, seen, text, now_utc()) {
                Ok(checked) if checked.constraint.is_none() => Ok(Ok(checked)),
                Ok(_) => Ok(Err(refuse(Code::ApprovalTokenInvalid, "the token redeemed for a grant's ticket".into()))),
                Err(why) => Ok(Err(refuse(Code::ApprovalTokenInvalid, why.to_string()))),
            },
            Err(RedeemError::Invalid(m)) => Ok(Err(refuse(Code::ApprovalTokenInvalid, m))),
            Err(RedeemError::Unavailable(m)) => {
                Err(SessionError::Unavailable(format!("the approval token could not be redeemed: {m}")))
            }
            Err(RedeemError::Refused(m)) => Err(SessionError::Internal(m)),
            Err(RedeemError::Older(m)) => Err(SessionError::Older(m)),
        }
    }

    /// The act's own input to the live element, and what became of it.
    #[allow(clippy::too_many_arguments)] // the act, the live node, its text and its deadline
    async fn send(
        &mut self,
        input: &ActInput,
        client: &fantoccini::Client,
        element: &ElementRef,
        live: &NodeRead,
        text: Option<String>,
        deadline: Option<std::time::Instant>,
        config: &BrowserConfig,
    ) -> Sent {
        let refuse = |code: Code, detail: String| refused(input, code, detail);
        // Checked right before the act's first input command, never between its commands: an
        // act that started before the Stop's answer is finished, not cut in half.
        let late = || deadline.is_some_and(|d| std::time::Instant::now() >= d);
        let el = Element::from_element_id(client.clone(), element.clone());
        if late() {
            return Sent::Late;
        }
        let sent = match &input.action {
            ActAction::Click => el.click().await,
            ActAction::Type { field_id } => {
                let value = text.unwrap_or_default();
                let cleared =
                    if live.facts.field_kind == FieldKind::EditableRegion { Ok(()) } else { el.clear().await };
                match cleared {
                    Ok(()) => {
                        self.typed.insert(element.clone(), (input.run_id.clone(), field_id.clone()));
                        // The clear reached the page already: from here a failure leaves the
                        // outcome unknown, never "not dispatched".
                        if let Err(e) = el.send_keys(&value).await {
                            return Sent::Unknown(self.failed(e, config).await);
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            ActAction::Select { option } => {
                // The option is picked here, in the runtime's own copy of the list, by the same
                // rule the coverage read; only its index reaches the page.
                let chosen = classifier::facts::choosable(&live.facts.options, option);
                let index = chosen.first().and_then(|c| live.facts.options.iter().position(|o| std::ptr::eq(o, *c)));
                let Some(index) = index else {
                    return Sent::NotActed(refuse(
                        Code::NodeNotInteractable,
                        "no option has that value or label".into(),
                    ));
                };
                const PICK: &str = "const get = Object.getOwnPropertyDescriptor(HTMLSelectElement.prototype, 'options').get; \
                    return get.call(arguments[0])[arguments[1]] || null;";
                let arg = serde_json::to_value(&el).unwrap_or_default();
                match client.execute(PICK, vec![arg, json!(index)]).await {
                    // The option was only found: the click below is the first input.
                    Ok(_) if late() => return Sent::Late,
                    // Choosing through the option itself fires the page's input and change events.
                    Ok(v) => match page::element_ref(&v) {
                        Some(id) => Element::from_element_id(client.clone(), id).click().await,
                        None => {
                            return Sent::NotActed(refuse(Code::StaleSnapshot, "the select's options changed".into()));
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
                None => {
                    return Sent::Failed(SessionError::Invalid(format!(
                        "key {key:?} is not a key the runtime presses"
                    )));
                }
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
        // A box, radio button or list the act set is the agent's own choice on a read-back.
        let chooses = matches!(input.action, ActAction::Check | ActAction::Select { .. })
            || (matches!(input.action, ActAction::Click)
                && matches!(live.facts.field_kind, FieldKind::Checkbox | FieldKind::Radio | FieldKind::CustomChoice));
        if sent.is_ok() && chooses {
            self.chosen.insert(element.clone(), input.run_id.clone());
        }
        match sent {
            Ok(()) => Sent::Done,
            Err(e) if e.is_stale_element_reference() => {
                Sent::NotActed(refuse(Code::StaleSnapshot, "the page re-rendered: the node is gone".into()))
            }
            Err(e) if not_acted(&e) => {
                Sent::NotActed(refuse(Code::NodeNotInteractable, format!("the browser did not act: {e}")))
            }
            // Anything else may have reached the page.
            Err(e) => Sent::Unknown(self.failed(e, config).await),
        }
    }
}

impl Session {
    /// Where an act's documents may go. A task grant reaches its prefix on its origins, as the
    /// record's fence has it. Anything else (an approval, a standing grant) reaches only the page
    /// it is on and the destinations its facts named, which are what its card showed: a
    /// redirect, a handler's navigation or a beacon anywhere else is refused. Nothing passes the
    /// run's origins.
    fn fence_scope(&self, constraint: Option<&DispatchConstraint>, page_url: &str, seen: &Seen) -> Scope {
        let on_run = |origins: &[String]| -> Vec<String> {
            origins.iter().filter(|o| self.allowed_origins.contains(o)).cloned().collect()
        };
        match constraint {
            Some(c) if c.kind == GrantKind::Task => {
                Scope::Prefix { origins: on_run(&c.origins), path_prefix: c.path_prefix.clone() }
            }
            _ => Scope::Places(
                std::iter::once(page_url)
                    .chain(seen.destinations.iter().map(String::as_str))
                    .filter_map(Place::of)
                    .filter(|p| self.allowed_origins.iter().any(|o| o == p.origin()))
                    .collect(),
            ),
        }
    }
}

/// What became of an act's input.
enum Sent {
    /// It reached the page.
    Done,
    /// The browser did not act: the sequence is not spent.
    NotActed(ActOutcome),
    /// It may have reached the page; why the outcome is unknown.
    Unknown(SessionError),
    /// Refused before any input.
    Failed(SessionError),
    /// Not sent: the dispatch window had passed before the first input.
    Late,
}

/// How many times an act's Stop check is made when its answer comes too late for the input.
const STOP_CHECKS: u32 = 3;

/// How the guard holds an act: a click's centre, a key's focus, a select's hold, or nothing.
fn guard_mode(action: &ActAction, live: &NodeRead) -> Option<GuardMode> {
    match action {
        ActAction::Check if live.state.checked => None,
        ActAction::Click | ActAction::Check => Some(GuardMode::Click),
        ActAction::Type { .. } | ActAction::Press { .. } => Some(GuardMode::Keys),
        ActAction::Select { .. } => Some(GuardMode::Hold),
        ActAction::Scroll { .. } => None,
    }
}

pub(super) fn now_utc() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}
