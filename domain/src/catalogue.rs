//! The typed event catalogue. Every payload is a Rust type with a schema version; a stored
//! event of an older version is upcast on read, never rewritten. An unknown type or a version
//! newer than this build knows is an error the caller sees, never silently skipped.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use ledger::{Metadata, NewEvent, RecordedEvent};

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
    pub const ALL: [Self; 4] = [Self::ApproveOnce, Self::ApproveForTask, Self::Deny, Self::TakeOver];

    /// The stored spelling (a test holds it to the event payload's).
    pub const fn code(self) -> &'static str {
        match self {
            Self::ApproveOnce => "approve_once",
            Self::ApproveForTask => "approve_for_task",
            Self::Deny => "deny",
            Self::TakeOver => "take_over",
        }
    }

    /// `approve_for_task` approves: the regression the decision record names first.
    pub const fn status(self) -> ApprovalStatus {
        match self {
            Self::ApproveOnce | Self::ApproveForTask => ApprovalStatus::Approved,
            Self::Deny | Self::TakeOver => ApprovalStatus::Denied,
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionCreated {
    pub session_id: String,
    pub tenant_id: String,
    pub principal_id: String,
    pub browser_profile_id: Option<String>,
    pub schedule_id: Option<String>,
    pub surface: Surface,
}

/// A tool call the agent's worker made in the session: what "since the owner's newest message"
/// is checked against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionToolCalled {
    pub session_id: String,
    pub tool_call_id: String,
    pub tool: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionMessageRecorded {
    pub session_id: String,
    pub message_id: String,
    pub author: Author,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionDeleted {
    pub session_id: String,
}

/// The owner stopped the agent in this session: no act is decided for it until the owner's next
/// message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionStopped {
    pub session_id: String,
    /// When the owner pressed Stop: an approve-once token of a card asked before it is void.
    #[serde(with = "time::serde::rfc3339")]
    pub stopped_at: OffsetDateTime,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileGenerationAdvanced {
    pub profile_id: String,
    pub generation: u64,
    pub phase: SignInPhase,
}

/// The owner a browser profile belongs to, recorded from the profiles service's first report of
/// it. It never changes: a session binds only a profile of its own owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileClaimed {
    pub profile_id: String,
    pub owner_principal_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileRevoked {
    pub profile_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileDeleted {
    pub profile_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentScopesChanged {
    pub task_grants_enabled: bool,
    pub scopes: Vec<SiteScope>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRequested {
    pub approval_id: Uuid,
    pub session_id: String,
    pub run_id: String,
    pub view: ActionView,
    pub offer: Option<Offer>,
    /// Why the session's active grant did not cover the action, as a stable code.
    pub not_covered_reason: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    /// What an approval token for this action is bound to. Never part of the view.
    #[serde(default)]
    pub binding: Option<TokenBinding>,
    /// The agent version of the run that asked: a grant made from this card pins it.
    #[serde(default)]
    pub agent_version: String,
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

/// Schema version 3: four resolutions, `take_over` the newest. Version 2 had three (though the
/// builds that added `take_over` wrote it as version 2 for a while, so an upcast takes any of the
/// four); version 1 stored only `approved`/`denied`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalResolved {
    pub approval_id: Uuid,
    pub resolution: Resolution,
    pub status: ApprovalStatus,
    pub grant_id: Option<Uuid>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalExpired {
    pub approval_id: Uuid,
}

/// Every pin of the decision record's third decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskGrantCreated {
    pub grant_id: Uuid,
    pub approval_id: Uuid,
    pub tenant_id: String,
    pub principal_id: String,
    pub session_id: String,
    pub profile_id: String,
    pub profile_generation: u64,
    pub agent_version: String,
    pub policy_version: String,
    pub scope: SiteScope,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    pub max_actions: u32,
    pub max_typed_chars: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallAuthorized {
    pub session_id: String,
    pub run_id: String,
    pub tool_call_id: String,
    pub authorization_kind: AuthorizationKind,
    pub grant_id: Option<Uuid>,
    pub use_ordinal: Option<u32>,
    pub typed_chars: u32,
    pub view: ActionView,
    /// The snapshot the act named, when it named one: the run's current snapshot from then on.
    /// Left out when absent, so events written before it existed keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskGrantEnded {
    pub grant_id: Uuid,
    pub reason: EndReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandingGrantPinned {
    pub grant_id: String,
    pub profile_id: String,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandingGrantUnpinned {
    pub grant_id: String,
}

/// The policy in force for a tenant from now on: the SHA-256 version of its rules file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentPolicyChanged {
    pub policy_version: String,
}

/// The token itself is never stored: only its SHA-256, hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalTokenIssued {
    pub approval_id: Uuid,
    pub token_sha256: String,
    pub run_id: String,
    pub snapshot_id: String,
    pub node_ref: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalTokenRedeemed {
    pub approval_id: Uuid,
    pub token_sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunEscalated {
    pub session_id: String,
    pub run_id: String,
    pub reason: String,
}

/// A run of the agent harness began in the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunStarted {
    pub session_id: String,
    pub run_id: String,
    pub agent_version: String,
}

/// The harness refused a model's turn before it reached the runtime, under a named rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRefused {
    pub session_id: String,
    pub run_id: String,
    pub rule: String,
}

/// A run ended at a confirmation page showing this reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunCompleted {
    pub session_id: String,
    pub run_id: String,
    pub reference: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown event type {0:?}")]
    UnknownType(String),
    #[error("{event_type} schema version {found} is newer than this build's {newest}")]
    NewerVersion { event_type: String, found: u32, newest: u32 },
    #[error("{event_type} schema version {found} has no upcaster")]
    NoUpcaster { event_type: String, found: u32 },
    #[error("{event_type} v{version} payload does not match its schema: {reason}")]
    Malformed { event_type: String, version: u32, reason: String },
}

macro_rules! catalogue {
    ($( $variant:ident = $name:literal v $ver:literal ),* $(,)?) => {
        /// Every event the ledger holds.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Event { $( $variant($variant) ),* }

        impl Event {
            /// Every `(event_type, current schema version)`.
            pub const TYPES: &'static [(&'static str, u32)] = &[ $( ($name, $ver) ),* ];

            pub fn event_type(&self) -> &'static str {
                match self { $( Self::$variant(_) => $name ),* }
            }

            pub fn schema_version(&self) -> u32 {
                match self { $( Self::$variant(_) => $ver ),* }
            }

            pub fn payload(&self) -> Value {
                let value = match self { $( Self::$variant(p) => serde_json::to_value(p) ),* };
                value.expect("catalogue payloads always serialise")
            }

            /// Borrows the payload: readers of the whole log decode every event, and a copy of each
            /// payload tree was a good part of that cost.
            fn decode_current(event_type: &str, payload: &Value) -> Result<Self, DecodeError> {
                let malformed = |version: u32, e: serde_json::Error| DecodeError::Malformed {
                    event_type: event_type.to_owned(), version, reason: e.to_string(),
                };
                match event_type {
                    $( $name => Deserialize::deserialize(payload).map(Self::$variant).map_err(|e| malformed($ver, e)), )*
                    other => Err(DecodeError::UnknownType(other.to_owned())),
                }
            }
        }
    };
}

catalogue! {
    SessionCreated = "session.created" v 1,
    SessionMessageRecorded = "session.message_recorded" v 1,
    SessionDeleted = "session.deleted" v 1,
    SessionToolCalled = "session.tool_called" v 1,
    SessionStopped = "session.stopped" v 1,
    ProfileClaimed = "browser.profile.claimed" v 1,
    ProfileGenerationAdvanced = "browser.profile.generation_advanced" v 1,
    ProfileRevoked = "browser.profile.revoked" v 1,
    ProfileDeleted = "browser.profile.deleted" v 1,
    DeploymentScopesChanged = "deployment.scopes_changed" v 1,
    DeploymentPolicyChanged = "deployment.policy_changed" v 1,
    ApprovalRequested = "approval.requested" v 1,
    ApprovalResolved = "approval.resolved" v 3,
    ApprovalExpired = "approval.expired" v 1,
    TaskGrantCreated = "browser.task_grant.created" v 1,
    ToolCallAuthorized = "tool.call.authorized" v 1,
    TaskGrantEnded = "browser.task_grant.ended" v 1,
    StandingGrantPinned = "browser.standing_grant.pinned" v 1,
    StandingGrantUnpinned = "browser.standing_grant.unpinned" v 1,
    ApprovalTokenIssued = "approval.token_issued" v 1,
    ApprovalTokenRedeemed = "approval.token_redeemed" v 1,
    RunEscalated = "run.escalated" v 1,
    RunStarted = "run.started" v 1,
    RunRefused = "run.refused" v 1,
    RunCompleted = "run.completed" v 1,
}

impl Event {
    /// Decodes a stored payload, upcasting older schema versions one step at a time.
    pub fn decode(event_type: &str, schema_version: u32, payload: Value) -> Result<Self, DecodeError> {
        let newest = Self::TYPES
            .iter()
            .find(|(t, _)| *t == event_type)
            .map(|(_, v)| *v)
            .ok_or_else(|| DecodeError::UnknownType(event_type.to_owned()))?;
        if schema_version > newest {
            return Err(DecodeError::NewerVersion { event_type: event_type.to_owned(), found: schema_version, newest });
        }
        let (mut version, mut payload) = (schema_version, payload);
        while version < newest {
            payload = upcast(event_type, version, payload)?;
            version += 1;
        }
        Self::decode_current(event_type, &payload)
    }

    /// Decodes a stored event; only an older schema version, which must be upcast, copies its
    /// payload.
    pub fn from_recorded(event: &RecordedEvent) -> Result<Self, DecodeError> {
        let newest = Self::TYPES.iter().find(|(t, _)| *t == event.event_type).map(|(_, v)| *v);
        if newest == Some(event.schema_version) {
            return Self::decode_current(&event.event_type, &event.payload);
        }
        Self::decode(&event.event_type, event.schema_version, event.payload.clone())
    }

    /// The envelope for appending this event under `event_id`, the idempotency key.
    pub fn to_new(&self, event_id: Uuid, metadata: Metadata) -> NewEvent {
        NewEvent {
            event_id,
            event_type: self.event_type().to_owned(),
            schema_version: self.schema_version(),
            payload: self.payload(),
            metadata,
        }
    }
}

/// One upcast step, from `version` to `version + 1`.
fn upcast(event_type: &str, version: u32, payload: Value) -> Result<Value, DecodeError> {
    let malformed =
        |reason: &str| DecodeError::Malformed { event_type: event_type.to_owned(), version, reason: reason.to_owned() };
    match (event_type, version) {
        // v1 knew two outcomes; each maps to the one resolution that produced it then.
        ("approval.resolved", 1) => {
            let Value::Object(mut map) = payload else { return Err(malformed("not an object")) };
            let decision = map.remove("decision").ok_or_else(|| malformed("missing decision"))?;
            let (resolution, status) = match decision.as_str() {
                Some("approved") => ("approve_once", "APPROVED"),
                Some("denied") => ("deny", "DENIED"),
                _ => return Err(malformed("decision is neither approved nor denied")),
            };
            map.insert("resolution".into(), resolution.into());
            map.insert("status".into(), status.into());
            map.insert("grant_id".into(), Value::Null);
            Ok(Value::Object(map))
        }
        // v3 added `take_over`: a v2 payload is a v3 payload, read as it is.
        ("approval.resolved", 2) => Ok(payload),
        _ => Err(DecodeError::NoUpcaster { event_type: event_type.to_owned(), found: version }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_payload_spellings() {
        for k in AuthorizationKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), serde_json::json!(k.code()));
        }
        for r in Resolution::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), serde_json::json!(r.code()));
        }
        for r in EndReason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), serde_json::json!(r.code()));
            assert_eq!(EndReason::from_code(r.code()), Some(r));
        }
        assert_eq!(EndReason::from_code("session_deleted"), Some(EndReason::Revoked));
        assert_eq!(EndReason::from_code("nope"), None);
    }
    use serde_json::json;

    fn view() -> ActionView {
        ActionView { action_kind: "click".into(), action_summary: "Click a button".into(), ..ActionView::default() }
    }

    #[test]
    fn an_early_session_deleted_end_reads_as_revoked_and_is_written_so_no_more() {
        let grant_id = Uuid::nil();
        let old: TaskGrantEnded =
            serde_json::from_value(json!({ "grant_id": grant_id, "reason": "session_deleted" })).unwrap();
        assert_eq!(old.reason, EndReason::Revoked);
        assert_eq!(serde_json::to_value(EndReason::Revoked).unwrap(), json!("revoked"));
    }

    #[test]
    fn every_type_is_listed_once() {
        let mut names: Vec<_> = Event::TYPES.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Event::TYPES.len());
    }

    #[test]
    fn payloads_round_trip_through_json() {
        let now = OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap();
        let events = [
            Event::ApprovalResolved(ApprovalResolved {
                approval_id: Uuid::nil(),
                resolution: Resolution::ApproveForTask,
                status: ApprovalStatus::Approved,
                grant_id: Some(Uuid::nil()),
            }),
            Event::ToolCallAuthorized(ToolCallAuthorized {
                session_id: "s1".into(),
                run_id: "r1".into(),
                tool_call_id: "t1".into(),
                authorization_kind: AuthorizationKind::BrowserTaskGrant,
                grant_id: Some(Uuid::nil()),
                use_ordinal: Some(7),
                typed_chars: 5,
                view: view(),
                snapshot_id: Some("snap_0123456789ab".into()),
            }),
            Event::ApprovalRequested(ApprovalRequested {
                approval_id: Uuid::nil(),
                session_id: "s1".into(),
                run_id: "r1".into(),
                view: view(),
                offer: None,
                not_covered_reason: Some("payment".into()),
                expires_at: now,
                binding: None,
                agent_version: "agent-1".into(),
            }),
        ];
        for e in events {
            let text = serde_json::to_string(&e.payload()).unwrap();
            let back = Event::decode(e.event_type(), e.schema_version(), serde_json::from_str(&text).unwrap()).unwrap();
            assert_eq!(back, e);
        }
    }

    #[test]
    fn approve_for_task_resolves_to_approved() {
        assert_eq!(Resolution::ApproveForTask.status(), ApprovalStatus::Approved);
        assert_eq!(Resolution::ApproveOnce.status(), ApprovalStatus::Approved);
        assert_eq!(Resolution::Deny.status(), ApprovalStatus::Denied);
        // Taking the tab over denies the agent's act; clients read it under its own name.
        assert_eq!(Resolution::TakeOver.status(), ApprovalStatus::Denied);
        let taken = crate::model::ApprovalState::Resolved(Resolution::TakeOver);
        assert_eq!(taken.code(), "TAKEN_OVER");
    }

    #[test]
    fn approval_resolved_v1_upcasts() {
        let cases = [
            ("approved", Resolution::ApproveOnce, ApprovalStatus::Approved),
            ("denied", Resolution::Deny, ApprovalStatus::Denied),
        ];
        for (decision, resolution, status) in cases {
            let v1 = json!({ "approval_id": Uuid::nil(), "decision": decision });
            let got = Event::decode("approval.resolved", 1, v1).unwrap();
            assert_eq!(
                got,
                Event::ApprovalResolved(ApprovalResolved {
                    approval_id: Uuid::nil(),
                    resolution,
                    status,
                    grant_id: None
                })
            );
        }
        let bad = json!({ "approval_id": Uuid::nil(), "decision": "maybe" });
        assert!(matches!(Event::decode("approval.resolved", 1, bad), Err(DecodeError::Malformed { .. })));
    }

    /// Version 3 named `take_over`; version 2 payloads (including the take-overs written as v2
    /// before the bump) read unchanged, and an unknown resolution stays malformed.
    #[test]
    fn approval_resolved_v2_upcasts_and_v3_is_current() {
        let resolved = Event::ApprovalResolved(ApprovalResolved {
            approval_id: Uuid::nil(),
            resolution: Resolution::TakeOver,
            status: ApprovalStatus::Denied,
            grant_id: None,
        });
        assert_eq!(resolved.schema_version(), 3);
        for resolution in ["approve_once", "approve_for_task", "deny", "take_over"] {
            let status = if resolution.starts_with("approve") { "APPROVED" } else { "DENIED" };
            let v2 =
                json!({ "approval_id": Uuid::nil(), "resolution": resolution, "status": status, "grant_id": null });
            let got = Event::decode("approval.resolved", 2, v2.clone()).unwrap();
            assert_eq!(got.payload(), v2, "{resolution}");
        }
        let v2 = json!({ "approval_id": Uuid::nil(), "resolution": "shrug", "status": "DENIED", "grant_id": null });
        assert!(matches!(Event::decode("approval.resolved", 2, v2), Err(DecodeError::Malformed { .. })));
        assert!(matches!(
            Event::decode("approval.resolved", 4, json!({})),
            Err(DecodeError::NewerVersion { newest: 3, .. })
        ));
    }

    #[test]
    fn unknown_and_newer_are_errors() {
        assert_eq!(
            Event::decode("grant.teleported", 1, json!({})),
            Err(DecodeError::UnknownType("grant.teleported".into()))
        );
        assert!(matches!(
            Event::decode("approval.expired", 2, json!({})),
            Err(DecodeError::NewerVersion { newest: 1, .. })
        ));
        assert!(matches!(
            Event::decode("approval.expired", 1, json!({ "approval_id": Uuid::nil(), "extra": 1 })),
            Err(DecodeError::Malformed { .. })
        ));
    }
}
