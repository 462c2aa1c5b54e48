//! The values events carry: the closed vocabularies (surfaces, resolutions, end reasons, …), what
//! a card shows of an act, and the act a token is bound to.

use serde::{Deserialize, Serialize};

/// How a session came to exist; only `interactive` sessions can use a task grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    Interactive,
    Inbound,
    Device,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Author {
    Owner,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignInPhase {
    Began,
    Ready,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    ApproveOnce,
    ApproveForTask,
    Deny,
    /// The owner acts in the live tab: the agent's act is refused and its run ends.
    TakeOver,
    /// Nobody waits for the card any more: the run that asked ended (it escalated, gave up
    /// waiting or finished). Written with the run's end, never by the owner; the act will not run.
    Withdrawn,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ApprovalStatus {
    Approved,
    Denied,
}

impl ApprovalStatus {
    /// The one spelling clients see.
    pub const fn code(self) -> &'static str {
        match self {
            Self::Approved => "APPROVED",
            Self::Denied => "DENIED",
        }
    }
}

impl Resolution {
    pub const ALL: [Self; 5] = [Self::ApproveOnce, Self::ApproveForTask, Self::Deny, Self::TakeOver, Self::Withdrawn];

    /// The stored spelling (a test holds it to the event payload's).
    pub const fn code(self) -> &'static str {
        match self {
            Self::ApproveOnce => "approve_once",
            Self::ApproveForTask => "approve_for_task",
            Self::Deny => "deny",
            Self::TakeOver => "take_over",
            Self::Withdrawn => "withdrawn",
        }
    }

    /// `approve_for_task` approves: the regression the decision record names first.
    pub const fn status(self) -> ApprovalStatus {
        match self {
            Self::ApproveOnce | Self::ApproveForTask => ApprovalStatus::Approved,
            Self::Deny | Self::TakeOver | Self::Withdrawn => ApprovalStatus::Denied,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthorizationKind {
    Approval,
    StandingGrant,
    BrowserTaskGrant,
    Policy,
}

/// Why a task grant ended; each grant ends exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    Expired,
    Exhausted,
    /// The owner stopped it, or deleted its session. Early logs wrote a session's deletion as
    /// `session_deleted`; it reads as what it was, a revocation (the stored bytes are unchanged).
    #[serde(alias = "session_deleted")]
    Revoked,
    Superseded,
    ProfileChanged,
    ProfileRevoked,
    PolicyChanged,
    AgentChanged,
    ScopeRemoved,
}

impl AuthorizationKind {
    pub const ALL: [Self; 4] = [Self::Approval, Self::StandingGrant, Self::BrowserTaskGrant, Self::Policy];

    /// The stored and wire spelling (a test holds it to the event payload's).
    pub fn code(self) -> &'static str {
        match self {
            Self::Approval => "approval",
            Self::StandingGrant => "standing_grant",
            Self::BrowserTaskGrant => "browser_task_grant",
            Self::Policy => "policy",
        }
    }
}

impl EndReason {
    pub const ALL: [Self; 9] = [
        Self::Expired,
        Self::Exhausted,
        Self::Revoked,
        Self::Superseded,
        Self::ProfileChanged,
        Self::ProfileRevoked,
        Self::PolicyChanged,
        Self::AgentChanged,
        Self::ScopeRemoved,
    ];

    /// The stored and wire spelling (a test holds it to the event payload's).
    pub fn code(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Exhausted => "exhausted",
            Self::Revoked => "revoked",
            Self::Superseded => "superseded",
            Self::ProfileChanged => "profile_changed",
            Self::ProfileRevoked => "profile_revoked",
            Self::PolicyChanged => "policy_changed",
            Self::AgentChanged => "agent_changed",
            Self::ScopeRemoved => "scope_removed",
        }
    }

    /// The reason a stored code names; the alias early logs wrote reads as what it was.
    pub fn from_code(code: &str) -> Option<Self> {
        match code {
            "session_deleted" => Some(Self::Revoked),
            _ => Self::ALL.into_iter().find(|r| r.code() == code),
        }
    }
}

/// A configured site scope: an exact origin and one path segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteScope {
    pub origin: String,
    pub path_prefix: String,
}

/// The server-authored offer an approval card may carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offer {
    pub scope: SiteScope,
    pub minutes: u32,
    pub max_actions: u32,
    pub max_typed_chars: u32,
}

/// What the approval card shows of one action. Page-sourced strings are kept apart from the
/// server-authored summary; the view never holds a ref, revision, query, cookie or credential.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionView {
    pub action_kind: String,
    pub describable: bool,
    pub element_role: Option<String>,
    pub element_name: Option<String>,
    pub visible_text: Option<String>,
    pub dialog_name: Option<String>,
    pub page_origin: Option<String>,
    pub page_path: Option<String>,
    pub page_title: Option<String>,
    /// The key, scroll distance, option or typed text (redacted where sensitive).
    pub detail: Option<String>,
    pub detail_digest: Option<String>,
    pub action_summary: String,
    /// A form's button: the form read back from the live page beside the task record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<FormReview>,
    /// Where the act leads, from the navigation targets the runtime read: the only places its
    /// fence lets it reach besides its own page.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destinations: Vec<Destination>,
    /// What the classifier read the act as, in the owner's words (server-authored).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reads_as: String,
    /// A consequence was named: the act may not be undone from here.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cannot_undo: bool,
    /// How the act sends the form it submits, in the owner's words (server-authored).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sends: String,
    /// The act opens a new window or tab.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_window: bool,
}

/// One place an act leads to, as its card shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Destination {
    /// `https://host[:port]`; empty for an address that is not HTTPS.
    pub origin: String,
    /// From the website: the path as the browser sends it (escapes kept), without query or
    /// fragment.
    pub path: String,
    pub kind: DestinationKind,
    /// From the website: the sensitive segment, for [`DestinationKind::SensitiveArea`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<String>,
    /// Server-authored words for the owner.
    pub words: String,
}

/// Where a destination lies, seen from the page the act is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DestinationKind {
    /// The page itself (a form that posts back, a reload).
    SamePage,
    /// Another page of the same site, inside the permission's scope when there is one.
    SameSite,
    /// The same site, outside the configured scope the page is in.
    LeavesScope,
    /// A path segment that names an account, settings, payment or other sensitive area.
    SensitiveArea,
    /// Another origin.
    AnotherSite,
    /// Not an HTTPS address (`javascript:`, `http:`): it can go anywhere.
    Anywhere,
}

impl DestinationKind {
    pub const ALL: [Self; 6] =
        [Self::SamePage, Self::SameSite, Self::LeavesScope, Self::SensitiveArea, Self::AnotherSite, Self::Anywhere];

    /// The stable snake_case code, as stored.
    pub fn code(self) -> &'static str {
        match self {
            Self::SamePage => "same_page",
            Self::SameSite => "same_site",
            Self::LeavesScope => "leaves_scope",
            Self::SensitiveArea => "sensitive_area",
            Self::AnotherSite => "another_site",
            Self::Anywhere => "anywhere",
        }
    }
}

/// A form as the runtime read it back before a submit, each field beside the task record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormReview {
    pub rows: Vec<FormRow>,
    /// `hmac-sha256:` and hex: the form's keyed digest, which the page must still match when the
    /// approval is spent.
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormRow {
    /// From the website: the field's label and the value in the form.
    pub label: String,
    /// The field kind's stable name.
    pub kind: String,
    pub value: String,
    /// The task-record field typed into it and its value; absent for an untouched field.
    pub record_field_id: Option<String>,
    pub record_value: Option<String>,
    pub status: FormStatus,
    /// For a match after normalisation: the rule, in words.
    pub normalisation: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FormStatus {
    Match,
    MatchNormalised,
    Mismatch,
    /// A field the runtime never typed into: a page default, autofill or leftover.
    Untouched,
    /// A sensitive field: neither value is shown.
    Redacted,
    /// A box, radio button or list the agent set in this run, by an act its authorization allowed.
    Chosen,
}

/// The run, observation, node and act an approval token is valid for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBinding {
    pub run_id: String,
    pub snapshot_id: String,
    pub node_ref: String,
    /// Absent in cards asked before tokens bound the act: such a token redeems for nothing.
    /// Boxed: an approval's event stays small beside the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Box<BoundAction>>,
}

/// The one act a card was asked for: a token approved for a click is not spent on a type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundAction {
    /// `click`, `type`, `select`, `check`, `press` or `scroll`.
    pub kind: String,
    /// The type's record field id, the select's option, the key, the scroll step; empty for a
    /// click or a check.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub argument: String,
    /// A type's text as the card showed it, `sha256:` and hex: the runtime types a record value
    /// only if it hashes the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_sha256: Option<String>,
    /// The element's role and accessible name and the page's origin the decision read: the
    /// runtime dispatches only on a live node and page that still say so.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub element_role: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub element_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub page_origin: String,
    /// A click on a form's button whose card showed the form: its digest (as
    /// [`FormReview::digest`]), which the live form must still have when the token is spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form_sha256: Option<String>,
}

impl BoundAction {
    /// `action` with the record field a type names.
    pub fn of(action: &classifier::Action, field_id: Option<&str>) -> Self {
        use classifier::Action as A;
        let argument = match action {
            A::Type { .. } => field_id.unwrap_or_default().to_owned(),
            A::Select { option } => option.clone(),
            A::Press { key } => key.clone(),
            A::Scroll { by } => by.to_string(),
            A::Click | A::Check => String::new(),
        };
        let text_sha256 = match action {
            A::Type { text } => Some(text_digest(text)),
            _ => None,
        };
        Self {
            kind: action.kind().to_owned(),
            argument,
            text_sha256,
            element_role: String::new(),
            element_name: String::new(),
            page_origin: String::new(),
            form_sha256: None,
        }
    }

    /// The act on `element` of the page at `page_url`.
    pub fn on(self, element: &classifier::ElementFacts, page_url: &str) -> Self {
        let origin = url::Url::parse(page_url.trim()).ok().map(|u| u.origin().ascii_serialization());
        Self {
            element_role: element.role.clone(),
            element_name: element.name.clone().unwrap_or_default(),
            page_origin: origin.unwrap_or_default(),
            ..self
        }
    }
}

/// `sha256:` and the hex digest of `text`'s UTF-8.
pub fn text_digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}
