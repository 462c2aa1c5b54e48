//! One `browser.act` decided in the decision record's order: hard lines, policy, the
//! session's task grant, the standing grant, and else an approval card.

use crate::catalogue::{
    ActionView, ApprovalRequested, Author, AuthorizationKind, BoundAction, EndReason, Event, FormReview, FormStatus,
    Offer, Surface, TokenBinding, ToolCallAuthorized,
};
use classifier::{Action, Consequence, ElementFacts, Named, PageFacts, TaskScope};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::catalogue::DecidedUnder;
use crate::limits::{APPROVAL_TTL, GRANT_MINUTES, MAX_ACTIONS, MAX_TYPED_CHARS};
use crate::policy::{ActionKind, Policy, Verdict};
use crate::scopes::scope_for;

use super::world::{Session, Versions, World, stored};

/// Why the session's task grant did not cover an act, or no grant applied: one spelling each,
/// the card's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotCovered {
    SessionNotFound,
    /// No active task grant: the card asks without a "not covered" reason.
    NoTaskGrant,
    GrantExpired,
    GrantExhausted,
    ScopeRemoved,
    ProfileRevoked,
    ProfileChanged,
    AgentChanged,
    PolicyChanged,
    TaskGrantsDisabled,
    PinMismatch,
    SessionDeleted,
    SessionNotEligible,
    OwnerNotNewest,
    RunNotEligible,
    TurnNotBrowserOnly,
    /// A policy rule escalated the act to the owner.
    PolicyEscalation,
    /// The grant's row kept refusing the use a fresh read allowed (a replica's clock behind the
    /// database's, at the very end of the grant): ask rather than retry.
    GrantSpent,
    /// The form a submit sends holds a value that differs from the task record, or one nobody
    /// typed (a page default, autofill, a leftover): the seed's `unexpected_form_state`.
    UnexpectedFormState,
    /// The agent's client may hold tools besides this browser (its owner did not say otherwise
    /// when connecting it), so no turn of it is known to be browser-only: Allow once only.
    ClientToolsUnknown,
    /// The classifier's own reason.
    Classifier(classifier::Reason),
}

impl NotCovered {
    const OWN: [Self; 20] = [
        Self::SessionNotFound,
        Self::NoTaskGrant,
        Self::GrantExpired,
        Self::GrantExhausted,
        Self::ScopeRemoved,
        Self::ProfileRevoked,
        Self::ProfileChanged,
        Self::AgentChanged,
        Self::PolicyChanged,
        Self::TaskGrantsDisabled,
        Self::PinMismatch,
        Self::SessionDeleted,
        Self::SessionNotEligible,
        Self::OwnerNotNewest,
        Self::RunNotEligible,
        Self::TurnNotBrowserOnly,
        Self::PolicyEscalation,
        Self::GrantSpent,
        Self::UnexpectedFormState,
        Self::ClientToolsUnknown,
    ];

    /// The reason a stored code names (an `approval.requested`'s `not_covered_reason`).
    pub fn from_code(code: &str) -> Option<Self> {
        let own = Self::OWN.into_iter().find(|r| r.code() == code);
        own.or_else(|| classifier::Reason::from_code(code).map(Self::Classifier))
    }

    /// `code` as a metric's label: the code itself when some reason has it (the set is closed),
    /// otherwise `other`.
    pub fn label(code: &str) -> &'static str {
        let own = Self::OWN.into_iter().map(Self::code);
        own.chain(classifier::Reason::codes()).find(|c| *c == code).unwrap_or("other")
    }

    /// What the owner reads for it, on the card: why the task permission does not cover the act.
    pub fn owner_words(self) -> &'static str {
        match self {
            Self::GrantExpired => "the permission's time ran out",
            Self::GrantExhausted | Self::GrantSpent => "the permission's actions or characters are used up",
            Self::ScopeRemoved | Self::TaskGrantsDisabled => "task permissions are no longer offered for this site",
            Self::ProfileRevoked | Self::ProfileChanged | Self::PinMismatch => "the browser profile changed",
            Self::AgentChanged => "the agent changed since you allowed it",
            Self::PolicyChanged => "the rules changed since you allowed it",
            Self::PolicyEscalation => "a rule sends this kind of action to you",
            Self::SessionDeleted | Self::SessionNotFound | Self::SessionNotEligible => {
                "this chat cannot hold a permission"
            }
            Self::OwnerNotNewest | Self::TurnNotBrowserOnly => "you wrote in the chat since you allowed it",
            Self::RunNotEligible => "this run cannot use the permission",
            Self::NoTaskGrant => "there is no task permission in this chat",
            Self::UnexpectedFormState => {
                "the form holds a value that differs from your task, or one the agent never typed"
            }
            Self::ClientToolsUnknown => {
                "this agent's app may have tools besides the browser, so you allow its actions one at a time"
            }
            Self::Classifier(r) => r.owner_words(),
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            Self::SessionNotFound => "session_not_found",
            Self::NoTaskGrant => "no_task_grant",
            Self::GrantExpired => "grant_expired",
            Self::GrantExhausted => "grant_exhausted",
            Self::ScopeRemoved => "scope_removed",
            Self::ProfileRevoked => "profile_revoked",
            Self::ProfileChanged => "profile_changed",
            Self::AgentChanged => "agent_changed",
            Self::PolicyChanged => "policy_changed",
            Self::TaskGrantsDisabled => "task_grants_disabled",
            Self::PinMismatch => "pin_mismatch",
            Self::SessionDeleted => "session_deleted",
            Self::SessionNotEligible => "session_not_eligible",
            Self::OwnerNotNewest => "owner_not_newest",
            Self::RunNotEligible => "run_not_eligible",
            Self::TurnNotBrowserOnly => "turn_not_browser_only",
            Self::PolicyEscalation => "policy_escalation",
            Self::GrantSpent => "grant_spent",
            Self::UnexpectedFormState => "unexpected_form_state",
            Self::ClientToolsUnknown => "client_tools_unknown",
            Self::Classifier(r) => r.code(),
        }
    }
}

/// Why a session cannot use a task grant, if it cannot.
pub(super) fn session_ineligible(session: &Session) -> Option<NotCovered> {
    let c = &session.created;
    if session.deleted {
        Some(NotCovered::SessionDeleted)
    } else if c.surface != Surface::Interactive || c.browser_profile_id.is_none() || c.schedule_id.is_some() {
        Some(NotCovered::SessionNotEligible)
    } else {
        None
    }
}

/// How the run asking is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunContext {
    pub interactive: bool,
    pub top_level: bool,
    /// Whether the record sees the caller's whole turn: false for an agent client whose owner
    /// did not say it has no tools besides this browser (its other calls never reach here), so
    /// no turn of it is known to be browser-only.
    pub turn_visible: bool,
}

/// One `browser.act` to decide.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorizeRequest {
    pub tenant_id: String,
    pub principal_id: String,
    pub session_id: String,
    pub run_id: String,
    pub tool_call_id: String,
    pub run: RunContext,
    /// The tool calls of this model turn since the owner's newest message.
    pub turn_tool_calls: Vec<String>,
    pub versions: Versions,
    pub element: ElementFacts,
    pub page: PageFacts,
    pub action: Action,
    /// What the approval card would show; recorded with every grant-authorized use.
    pub view: ActionView,
    /// The snapshot and node the element was named in, when the caller has them: an approval
    /// token is bound to them.
    pub snapshot: Option<(String, String)>,
    /// The task-record field a type types: a token and a ticket bind it.
    pub field_id: Option<String>,
    /// The browser profile the runtime read the facts in, when they came sealed: the session's
    /// own, or nothing is decided.
    pub facts_profile: Option<String>,
    /// A type's record value's digest as the runtime sealed it (`sha256:` and hex), when the
    /// text the decision reads stands in for a value it was not shown (a secret's).
    pub text_sha256: Option<String>,
    /// A click on a form's button: the runtime's read-back of the form, for the card.
    pub form: Option<FormReview>,
}

impl AuthorizeRequest {
    /// The one act this request asks for, as a token and a ticket bind it.
    pub fn bound_action(&self) -> BoundAction {
        let bound = BoundAction::of(&self.action, self.field_id.as_deref()).on(&self.element, &self.page.url);
        let bound = BoundAction { form_sha256: self.form.as_ref().map(|f| f.digest.clone()), ..bound };
        match &self.text_sha256 {
            Some(digest) => BoundAction { text_sha256: Some(digest.clone()), ..bound },
            None => bound,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow { kind: AuthorizationKind, grant_id: Option<Uuid>, use_ordinal: Option<u32>, typed_chars: u32 },
    RequireApproval { approval_id: Uuid, reason: Option<NotCovered>, offer: Option<Offer> },
    Deny(Denial),
}

/// Why an act is refused outright, with no card: a stable code each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// A policy rule (DENY, or hardline when `hardline`): the rule's id is the code.
    Policy { rule: String, hardline: bool },
    /// The session's browser profile is not its owner's (bound before profiles had owners).
    ProfileNotOwned,
    /// The facts were read in a browser profile that is not the session's.
    FactsNotThisSession,
    /// A credential or one-time-code field, or typing into a payment field: the classifier's
    /// consequence names it.
    Field(Named),
    /// A key the runtime never sends (an activation key on a control, Enter in a one-line field
    /// of a form): the agent clicks instead, and no use or card is spent on it.
    KeyClicksOrSubmits,
    /// A card for a click that could submit a form, without the form read back: the owner would
    /// approve a submit without seeing what it sends (and the runtime would never spend it).
    FormNotReadBack,
    /// The owner stopped the agent in this session: nothing is decided, not even a card, until
    /// the owner's next message.
    SessionStopped,
    /// A task's run that no longer holds its task (another worker took it over, a newer task
    /// replaced it, or it ended): nothing is decided for it.
    RunSuperseded,
}

impl Denial {
    /// The stable code the caller is answered with.
    pub fn code(&self) -> &str {
        match self {
            Self::Policy { rule, .. } => rule,
            _ => self.label(),
        }
    }

    /// The code as a metric's label: a policy rule's id is the operator's, so it reads as
    /// `policy_deny` or `policy_hardline`; every other code is the code.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Policy { hardline: false, .. } => "policy_deny",
            Self::Policy { hardline: true, .. } => "policy_hardline",
            Self::ProfileNotOwned => PROFILE_NOT_OWNED,
            Self::FactsNotThisSession => FACTS_NOT_THIS_SESSION,
            Self::Field(named) => named.code(),
            Self::KeyClicksOrSubmits => KEY_CLICKS_OR_SUBMITS,
            Self::FormNotReadBack => FORM_NOT_READ_BACK,
            Self::SessionStopped => SESSION_STOPPED,
            Self::RunSuperseded => RUN_SUPERSEDED,
        }
    }
}

/// A decision and the events that record it (ends found on the way included).
#[derive(Debug, Clone, PartialEq)]
pub struct Authorization {
    pub decision: Decision,
    pub events: Vec<Event>,
}

const BROWSER_TOOLS: [&str; 3] = ["browser.navigate", "browser.observe", "browser.act"];

/// A turn qualifies when it made tool calls and every one is a browser call, directly or through
/// `tool.call`. An empty list proves nothing about the turn, so it does not qualify.
fn browser_only(calls: &[String]) -> bool {
    !calls.is_empty() && calls.iter().all(|c| is_browser_tool(c))
}

fn is_browser_tool(call: &str) -> bool {
    BROWSER_TOOLS.contains(&call.strip_prefix("tool.call:").unwrap_or(call))
}

fn typed_chars(action: &Action) -> u32 {
    match action {
        Action::Type { text } => u32::try_from(text.chars().count()).unwrap_or(u32::MAX),
        _ => 0,
    }
}

/// Why the session's task grant does not cover an action: a stable code, and the grant's end
/// when it has ended on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Refusal {
    why: NotCovered,
    end: Option<(Uuid, EndReason)>,
}

const fn refusal(why: NotCovered) -> Refusal {
    Refusal { why, end: None }
}

/// Checks the session's task grant, in the decision record's order.
fn task_grant_covers(world: &World, req: &AuthorizeRequest, now: OffsetDateTime) -> Result<Uuid, Refusal> {
    let session = world.sessions.get(&req.session_id).ok_or(refusal(NotCovered::SessionNotFound))?;
    // First, so that every card of such a client says why it offers only Allow once.
    if !req.run.turn_visible {
        return Err(refusal(NotCovered::ClientToolsUnknown));
    }
    let grant_id = session.active_grant.ok_or(refusal(NotCovered::NoTaskGrant))?;
    let grant = &world.grants[&grant_id];
    let c = &grant.created;
    let ended = |reason: EndReason, why: NotCovered| Refusal { why, end: Some((grant_id, reason)) };
    if now >= c.expires_at {
        return Err(ended(EndReason::Expired, NotCovered::GrantExpired));
    }
    if grant.actions_used >= MAX_ACTIONS {
        return Err(ended(EndReason::Exhausted, NotCovered::GrantExhausted));
    }
    if !world.settings.scopes.contains(&c.scope) {
        return Err(ended(EndReason::ScopeRemoved, NotCovered::ScopeRemoved));
    }
    let profile = world.profiles.get(&c.profile_id).cloned().unwrap_or_default();
    if profile.revoked || profile.deleted {
        return Err(ended(EndReason::ProfileRevoked, NotCovered::ProfileRevoked));
    }
    if profile.generation != c.profile_generation {
        return Err(ended(EndReason::ProfileChanged, NotCovered::ProfileChanged));
    }
    if req.versions.agent != c.agent_version {
        return Err(ended(EndReason::AgentChanged, NotCovered::AgentChanged));
    }
    if req.versions.policy != c.policy_version {
        return Err(ended(EndReason::PolicyChanged, NotCovered::PolicyChanged));
    }
    if !world.settings.enabled {
        return Err(refusal(NotCovered::TaskGrantsDisabled));
    }
    let pins_match = req.tenant_id == c.tenant_id
        && req.principal_id == c.principal_id
        && req.session_id == c.session_id
        && session.created.browser_profile_id.as_deref() == Some(c.profile_id.as_str());
    if !pins_match {
        return Err(refusal(NotCovered::PinMismatch));
    }
    if let Some(why) = session_ineligible(session) {
        return Err(refusal(why));
    }
    if session.newest_message_author != Some(Author::Owner) {
        return Err(refusal(NotCovered::OwnerNotNewest));
    }
    if !(req.run.interactive && req.run.top_level) {
        return Err(refusal(NotCovered::RunNotEligible));
    }
    // The caller's list and the session's own record must both show a browser-only turn.
    if !browser_only(&req.turn_tool_calls) || !session.turn_tools.iter().all(|t| is_browser_tool(t)) {
        return Err(refusal(NotCovered::TurnNotBrowserOnly));
    }
    let scope = TaskScope {
        origin: c.scope.origin.clone(),
        path_prefix: c.scope.path_prefix.clone(),
        chars_remaining: MAX_TYPED_CHARS.saturating_sub(grant.chars_used),
    };
    classifier::covers(&classifier::Grant::Task(scope), &req.action, &req.element, &req.page)
        .map_err(|e| refusal(NotCovered::Classifier(e.reason)))?;
    // A submit goes on the grant's allow only with its form read back, holding what the task
    // typed and nothing else: anything more comes to the owner as a form card.
    if submits(req) && !req.form.as_ref().is_some_and(form_as_task) {
        return Err(refusal(NotCovered::UnexpectedFormState));
    }
    Ok(grant_id)
}

/// Whether the act's click could submit a form (a select clicks its option, and that click
/// reaches whatever acts on one around it).
fn submits(req: &AuthorizeRequest) -> bool {
    req.element.submits_form && matches!(req.action, Action::Click | Action::Check | Action::Select { .. })
}

/// Every field of the form is what the task typed, or holds nothing: no value that differs from
/// the record, and no untouched field with content (a pre-filled amount, a ticked box, a list's
/// chosen option, a hidden input: it is sent too). A button's own name and value, which the
/// submit sends as what was pressed, are not counted.
fn form_as_task(form: &FormReview) -> bool {
    form.rows.iter().all(|r| match r.status {
        FormStatus::Match | FormStatus::Chosen => true,
        // Only a rule that rests on nothing the page says: a date read the way the page or the
        // field claims to write dates is the owner's to check on a card.
        FormStatus::MatchNormalised => {
            r.normalisation.as_deref().is_some_and(|n| classifier::coverage::normalisation::PAGE_FREE.contains(&n))
        }
        FormStatus::Mismatch | FormStatus::Redacted => false,
        FormStatus::Untouched => {
            let unticked = matches!(r.kind.as_str(), "checkbox" | "radio") && r.value == "not checked";
            r.kind == "none" || r.value.is_empty() || unticked
        }
    })
}

/// The codes of [`Denial`]'s variants.
pub const PROFILE_NOT_OWNED: &str = "browser_profile_not_owned";
pub const FACTS_NOT_THIS_SESSION: &str = "facts_not_this_session";
pub const FORM_NOT_READ_BACK: &str = "form_not_read_back";
pub const KEY_CLICKS_OR_SUBMITS: &str = "key_clicks_or_submits";
pub const SESSION_STOPPED: &str = "session_stopped";
pub const RUN_SUPERSEDED: &str = "run_superseded";

/// A card for this act would have to show a form it does not carry.
fn form_unread(req: &AuthorizeRequest) -> bool {
    req.form.is_none() && submits(req)
}

/// An operator's standing-grant pin: which grant, on which browser profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandingPin {
    pub grant_id: String,
    pub profile_id: String,
}

/// How long a standing-grant pin lasts from when it is recorded (the record: up to thirty days).
pub const STANDING_GRANT_DURATION: time::Duration = time::Duration::days(30);

/// The pinned standing grant covers routine only, on its own profile, until it expires.
fn standing_grant_covers(world: &World, req: &AuthorizeRequest, now: OffsetDateTime) -> bool {
    let Some(pin) = &world.standing else { return false };
    // A session whose profile is not its owner's never reaches here (`authorize` denies it), so
    // the pin covers its profile's own owner only.
    let profile = world.sessions.get(&req.session_id).and_then(|s| s.created.browser_profile_id.as_deref());
    // A client whose other tools the record cannot see gets cards and Allow once only, under
    // any grant.
    req.run.turn_visible
        && now < pin.expires_at
        && profile == Some(pin.profile_id.as_str())
        && classifier::covers(&classifier::Grant::Standing, &req.action, &req.element, &req.page).is_ok()
        // Seed 004's rule 7 holds under any grant: a submit goes only with what the task typed.
        && (!submits(req) || req.form.as_ref().is_some_and(form_as_task))
}

/// The offer an approval for `req` carries: only with the flag on, only where a grant made from
/// it could ever apply — an eligible session, a describable element on a field a grant may act
/// on, a page inside a configured scope with no sensitive segment — and only when that grant
/// would cover this very act. A card for what the permission never covers (a named consequence
/// such as a purchase, a sensitive field or path, a target off the scope) offers no permission:
/// the owner can allow it once, never for the task. The scope is the configured entry, never one
/// taken from the page.
pub fn offer_for(world: &World, req: &AuthorizeRequest) -> Option<Offer> {
    if !world.settings.enabled || !req.view.describable || !req.run.turn_visible {
        return None;
    }
    let session = world.sessions.get(&req.session_id)?;
    if session_ineligible(session).is_some() {
        return None;
    }
    let profile = session.created.browser_profile_id.as_ref().and_then(|p| world.profiles.get(p));
    if profile.is_none_or(|p| p.revoked || p.deleted) || !world.session_profile_is_own(session) {
        return None;
    }
    if classifier::coverage::field_never_covered(req.element.field_kind) {
        return None;
    }
    let location = classifier::paths::location(&req.page.url).ok()?;
    if location.segments.iter().any(|s| classifier::paths::sensitive_segment(s).is_some()) {
        return None;
    }
    let scope = scope_for(&world.settings.scopes, &req.page.url)?;
    let fresh = TaskScope {
        origin: scope.origin.clone(),
        path_prefix: scope.path_prefix.clone(),
        chars_remaining: MAX_TYPED_CHARS,
    };
    classifier::covers(&classifier::Grant::Task(fresh), &req.action, &req.element, &req.page).ok()?;
    Some(Offer {
        scope: scope.clone(),
        minutes: GRANT_MINUTES,
        max_actions: MAX_ACTIONS,
        max_typed_chars: MAX_TYPED_CHARS,
    })
}

/// Credential and one-time-code fields are refused outright, no card: the classifier names them
/// from the field kind. So is typing into a payment field: the runtime never types a secret's
/// field, so a card for it would be approved for nothing.
fn refused_field(consequences: &[Consequence], req: &AuthorizeRequest) -> Option<Named> {
    let named = consequences.iter().find_map(|c| match c {
        Consequence::Named(n @ (Named::CredentialField | Named::OneTimeCodeField)) => Some(*n),
        _ => None,
    });
    let typed_secret = matches!(req.action, Action::Type { .. }) && req.element.field_kind.is_secret();
    named.or_else(|| typed_secret.then_some(Named::PaymentField))
}

/// What the policy engine reads of an act: the classifier's reading, every consequence in it, and
/// the page's HTTPS origin, userinfo or not (`https://u@evil.example` is evil.example). Any
/// other page has no origin a rule could name (rules name HTTPS origins only), so every origin
/// rule applies to it: plain HTTP or a malformed URL cannot slip past a DENY. `rejudge` reads a
/// past act the same way.
pub fn policy_reading(
    element: &classifier::ElementFacts,
    page: &classifier::PageFacts,
) -> (classifier::Classification, Vec<Consequence>, Option<String>) {
    let classification = classifier::classify_detailed(element);
    let mut consequences = vec![classification.consequence];
    consequences.extend(classification.matches.iter().map(|m| Consequence::Named(m.named)));
    let origin = url::Url::parse(page.url.trim()).ok().filter(|u| u.scheme() == "https");
    (classification, consequences, origin.map(|u| u.origin().ascii_serialization()))
}

/// A URL without its query and fragment, as a decision's record keeps it.
fn without_query(url: &str) -> String {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    url[..end].to_owned()
}

/// Decides one `browser.act`: the policy engine first (DENY and hardline are final), then the
/// pinned standing grant, then the session's task grant; otherwise an approval, with the reason
/// the grant did not cover it.
pub fn authorize(
    world: &World,
    policy: &Policy,
    req: &AuthorizeRequest,
    now: OffsetDateTime,
    new_approval_id: Uuid,
) -> Authorization {
    let (_, consequences, origin) = policy_reading(&req.element, &req.page);
    let deny = |denial: Denial| Authorization { decision: Decision::Deny(denial), events: vec![] };
    // The owner's Stop comes before every rule: no allow and no card until the owner writes.
    if world.sessions.get(&req.session_id).is_some_and(|s| s.stopped) {
        return deny(Denial::SessionStopped);
    }
    // A task's run acts only while it holds the task: one worker at a time, however many try.
    if world.sessions.get(&req.session_id).is_some_and(|s| !s.runs_its_task(&req.run_id)) {
        return deny(Denial::RunSuperseded);
    }
    let verdict = policy.evaluate(ActionKind::of(&req.action), &consequences, origin.as_deref());
    match &verdict {
        Verdict::Deny { rule } => return deny(Denial::Policy { rule: rule.clone(), hardline: false }),
        Verdict::Hardline { rule } => return deny(Denial::Policy { rule: rule.clone(), hardline: true }),
        _ => {}
    }
    // Not even a card: the owner answering it would act in a browser profile that is not theirs.
    if world.sessions.get(&req.session_id).is_some_and(|s| !world.session_profile_is_own(s)) {
        return deny(Denial::ProfileNotOwned);
    }
    // Facts a runtime read in another browser profile are not this session's page.
    let session_profile = world.sessions.get(&req.session_id).and_then(|s| s.created.browser_profile_id.as_deref());
    if req.facts_profile.as_deref().is_some_and(|p| Some(p) != session_profile) {
        return deny(Denial::FactsNotThisSession);
    }
    // Before any card, an escalation's too: a card for what the runtime never does is approved
    // for nothing.
    if let Some(named) = refused_field(&consequences, req) {
        return deny(Denial::Field(named));
    }
    if let Action::Press { key } = &req.action
        && classifier::coverage::key_refused(&req.element, key)
    {
        return deny(Denial::KeyClicksOrSubmits);
    }
    if let Verdict::Escalate { .. } = verdict {
        if form_unread(req) {
            return deny(Denial::FormNotReadBack);
        }
        // No grant answers an escalation, so the card offers none either.
        let reason = Some(NotCovered::PolicyEscalation);
        let (decision, requested) = request_approval(req, now, new_approval_id, reason, None);
        return Authorization { decision, events: vec![requested] };
    }
    let authorized = |kind, grant_id, use_ordinal| {
        Event::ToolCallAuthorized(ToolCallAuthorized {
            session_id: req.session_id.clone(),
            run_id: req.run_id.clone(),
            tool_call_id: req.tool_call_id.clone(),
            authorization_kind: kind,
            grant_id,
            use_ordinal,
            typed_chars: typed_chars(&req.action),
            view: req.view.clone(),
            snapshot_id: req.snapshot.as_ref().map(|(snapshot, _)| snapshot.clone()),
            decided: Some(Box::new(DecidedUnder {
                classifier_version: classifier::version().to_owned(),
                policy_version: policy.version.clone(),
                // Kept for ever, so never a query or fragment (a reset token, a code): the rules
                // read neither.
                element: classifier::ElementFacts {
                    nav_targets: req.element.nav_targets.iter().map(|t| without_query(t)).collect(),
                    ..req.element.clone()
                },
                page: classifier::PageFacts { url: without_query(&req.page.url) },
                action: match &req.action {
                    Action::Type { .. } => Action::Type { text: String::new() },
                    other => other.clone(),
                },
            })),
        })
    };
    if standing_grant_covers(world, req, now) {
        let decision = Decision::Allow {
            kind: AuthorizationKind::StandingGrant,
            grant_id: None,
            use_ordinal: None,
            typed_chars: 0,
        };
        return Authorization { decision, events: vec![authorized(AuthorizationKind::StandingGrant, None, None)] };
    }
    let mut events = Vec::new();
    let reason = match task_grant_covers(world, req, now) {
        Ok(grant_id) => {
            let ordinal = world.grants[&grant_id].actions_used + 1;
            let decision = Decision::Allow {
                kind: AuthorizationKind::BrowserTaskGrant,
                grant_id: Some(grant_id),
                use_ordinal: Some(ordinal),
                typed_chars: typed_chars(&req.action),
            };
            return Authorization {
                decision,
                events: vec![authorized(AuthorizationKind::BrowserTaskGrant, Some(grant_id), Some(ordinal))],
            };
        }
        // Before anything is written: the sweep or the next act ends a grant found ended here.
        Err(_) if form_unread(req) => return deny(Denial::FormNotReadBack),
        Err(Refusal { why, end }) => {
            events.extend(end.and_then(|(grant_id, reason)| world.end(grant_id, reason)));
            (why != NotCovered::NoTaskGrant).then_some(why)
        }
    };
    let (decision, requested) = request_approval(req, now, new_approval_id, reason, offer_for(world, req));
    events.push(requested);
    Authorization { decision, events }
}

/// The approval card for `req`: its decision and the `approval.requested` event, with the view,
/// the offer (see [`offer_for`]), why a grant did not cover it, the token binding and the
/// agent version a grant made from it will pin.
pub fn request_approval(
    req: &AuthorizeRequest,
    now: OffsetDateTime,
    approval_id: Uuid,
    reason: Option<NotCovered>,
    offer: Option<Offer>,
) -> (Decision, Event) {
    let requested = Event::ApprovalRequested(ApprovalRequested {
        approval_id,
        session_id: req.session_id.clone(),
        run_id: req.run_id.clone(),
        view: ActionView { form: req.form.clone(), ..req.view.clone() },
        offer: offer.clone(),
        not_covered_reason: reason.map(|r| r.code().to_owned()),
        expires_at: stored(now + APPROVAL_TTL),
        binding: req.snapshot.as_ref().map(|(snapshot_id, node_ref)| TokenBinding {
            run_id: req.run_id.clone(),
            snapshot_id: snapshot_id.clone(),
            node_ref: node_ref.clone(),
            action: Some(Box::new(req.bound_action())),
        }),
        agent_version: req.versions.agent.clone(),
    });
    (Decision::RequireApproval { approval_id, reason, offer }, requested)
}

#[cfg(test)]
mod not_covered {
    use super::NotCovered;

    /// `OWN` lists every reason of the domain's own, once each, with a code of its own. The match
    /// has no wildcard and gives each reason a number: a new reason does not compile until it has
    /// the next number, and then this fails until `OWN` lists it.
    #[test]
    fn every_own_reason_is_listed_once() {
        let number = |r: NotCovered| match r {
            NotCovered::Classifier(_) => usize::MAX,
            NotCovered::SessionNotFound => 0,
            NotCovered::NoTaskGrant => 1,
            NotCovered::GrantExpired => 2,
            NotCovered::GrantExhausted => 3,
            NotCovered::ScopeRemoved => 4,
            NotCovered::ProfileRevoked => 5,
            NotCovered::ProfileChanged => 6,
            NotCovered::AgentChanged => 7,
            NotCovered::PolicyChanged => 8,
            NotCovered::TaskGrantsDisabled => 9,
            NotCovered::PinMismatch => 10,
            NotCovered::SessionDeleted => 11,
            NotCovered::SessionNotEligible => 12,
            NotCovered::OwnerNotNewest => 13,
            NotCovered::RunNotEligible => 14,
            NotCovered::TurnNotBrowserOnly => 15,
            NotCovered::PolicyEscalation => 16,
            NotCovered::GrantSpent => 17,
            NotCovered::UnexpectedFormState => 18,
            NotCovered::ClientToolsUnknown => 19,
        };
        let mut listed: Vec<usize> = NotCovered::OWN.into_iter().map(number).collect();
        listed.sort_unstable();
        assert_eq!(listed, (0..20).collect::<Vec<_>>());
        let mut codes: Vec<&str> = NotCovered::OWN.into_iter().map(NotCovered::code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), 20, "each own reason has a code of its own");
        for code in codes {
            assert_eq!(NotCovered::label(code), code);
            assert_eq!(NotCovered::from_code(code).map(NotCovered::code), Some(code), "a stored code reads back");
        }
        for code in classifier::Reason::codes() {
            assert_eq!(NotCovered::from_code(code).map(NotCovered::code), Some(code), "a stored code reads back");
        }
    }
}
