//! The typed event catalogue. Every payload is a Rust type with a schema version; a stored
//! event of an older version is upcast on read, never rewritten. An unknown type or a version
//! newer than this build knows is an error the caller sees, never silently skipped.

use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use ledger::{Metadata, NewEvent, RecordedEvent};

mod events;
#[cfg(test)]
mod tests;
mod values;

pub use events::{
    ApprovalExpired, ApprovalRequested, ApprovalResolved, ApprovalTokenIssued, ApprovalTokenRedeemed, DecidedUnder,
    DeploymentPolicyChanged, DeploymentScopesChanged, ProfileClaimed, ProfileDeleted, ProfileGenerationAdvanced,
    ProfileRevoked, RunCompleted, RunEscalated, RunRefused, RunStarted, RunStepped, SessionCreated, SessionDeleted,
    SessionMessageRecorded, SessionStopped, SessionToolCalled, StandingGrantPinned, StandingGrantUnpinned, TaskClaimed,
    TaskGrantCreated, TaskGrantEnded, TaskStarted, ToolCallAuthorized,
};
pub use values::{
    ActionView, ApprovalStatus, Author, AuthorizationKind, BoundAction, Destination, DestinationKind, EndReason,
    FormReview, FormRow, FormStatus, Offer, Resolution, SignInPhase, SiteScope, Surface, TokenBinding, text_digest,
};

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
    RunStepped = "run.stepped" v 1,
    TaskStarted = "task.started" v 1,
    TaskClaimed = "task.claimed" v 1,
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
