//! The payload of each event type, one struct each: what the catalogue stores.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use uuid::Uuid;

use super::values::{
    ActionView, ApprovalStatus, Author, AuthorizationKind, EndReason, Offer, Resolution, SignInPhase, SiteScope,
    Surface, TokenBinding,
};

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
    /// What the decision read and the versions it was made under, so an auditor can replay it
    /// under another policy or classifier (`grantctl audit rejudge`). Left out when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<Box<DecidedUnder>>,
}

/// The facts a decision made without a human read, and the versions it was made under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecidedUnder {
    pub classifier_version: String,
    pub policy_version: String,
    pub element: classifier::ElementFacts,
    pub page: classifier::PageFacts,
    /// The action; a type's text is never kept (its length is `typed_chars`).
    pub action: classifier::Action,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskGrantEnded {
    pub grant_id: Uuid,
    pub reason: EndReason,
    /// How many uses the grant gave: an auditor counts them in the log, so a use deleted from
    /// it is found. Left out when absent (ends recorded before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<u32>,
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

/// A run ended without its confirmation, under a named reason. The rest is the harness's
/// account of it (absent from older events): the refs the model cited, what it said, the newest
/// snapshot and the screenshots the run took, by digest.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunEscalated {
    pub session_id: String,
    pub run_id: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub snapshot_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub screenshots: Vec<String>,
}

/// One step of a run, as the harness tells it: the tool the model called, its evidence line,
/// what came of it, and where the time went. The worker's account, never a decision's input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunStepped {
    pub session_id: String,
    pub run_id: String,
    pub step: u32,
    pub tool: String,
    pub evidence: String,
    pub result: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub snapshot_id: String,
    pub elapsed_ms: u32,
    pub model_ms: u32,
}

/// The owner started a task in the chat, with the message that asked for it (through the
/// gateway, on the owner's credential). `continues` names the task an owner's "continue" repeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskStarted {
    pub session_id: String,
    pub task_id: String,
    pub message_id: String,
    pub goal: String,
    pub subgoals: Vec<String>,
    pub start_url: String,
    pub continues: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
}

/// A worker took the session's task (a new `attempt`, run as `run_id`) or kept it (the same
/// attempt, a later lease). Another worker may take it once `lease_until` has passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskClaimed {
    pub session_id: String,
    pub task_id: String,
    pub attempt: u32,
    pub run_id: String,
    pub holder: String,
    #[serde(with = "time::serde::rfc3339")]
    pub lease_until: OffsetDateTime,
    /// The same attempt kept on, not a new one.
    #[serde(default)]
    pub renewal: bool,
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
