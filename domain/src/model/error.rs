//! Why a command or a request is refused: typed, with one spelling each.

/// Why a command does not fit the current state: one spelling each, the wire's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    SessionExists,
    ApprovalNotPending,
    ApprovalExpired,
    TaskGrantsDisabled,
    NoOffer,
    OfferMismatch,
    OfferNoLongerValid,
    /// The terminal refusal for a token that does not fit (seed 004's error contract).
    ApprovalTokenInvalid,
    /// A tool-call id already decided with other arguments: a retry must repeat the call.
    ToolCallReused,
    /// A tool call allowed under a grant that has ended since: its retry dispatches nothing.
    ToolCallGrantEnded,
    /// The owner stopped the agent in the card's session: approving it would act for nothing.
    SessionStopped,
    /// An owner's "continue" in a chat that never had a task.
    NoTask,
    /// A task in a chat bound to no browser profile of the owner's.
    NoBrowser,
    /// A worker's run whose task another worker took, or that ended.
    TaskNotHeld,
    /// An owner's "continue" of a task that finished.
    TaskDone,
}

impl Conflict {
    /// The one spelling: the `ErrorInfo` reason on the wire, and the message's prefix.
    pub const fn code(self) -> &'static str {
        match self {
            Self::SessionExists => "SESSION_EXISTS",
            Self::ApprovalNotPending => "APPROVAL_NOT_PENDING",
            Self::ApprovalExpired => "APPROVAL_EXPIRED",
            Self::TaskGrantsDisabled => "TASK_GRANTS_DISABLED",
            Self::NoOffer => "NO_OFFER",
            Self::OfferMismatch => "OFFER_MISMATCH",
            Self::OfferNoLongerValid => "OFFER_NO_LONGER_VALID",
            Self::ApprovalTokenInvalid => "APPROVAL_TOKEN_INVALID",
            Self::ToolCallReused => "TOOL_CALL_REUSED",
            Self::ToolCallGrantEnded => "TOOL_CALL_GRANT_ENDED",
            Self::SessionStopped => "SESSION_STOPPED",
            Self::NoTask => "NO_TASK",
            Self::NoBrowser => "NO_BROWSER",
            Self::TaskNotHeld => "TASK_NOT_HELD",
            Self::TaskDone => "TASK_DONE",
        }
    }
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    /// Absent, or another principal's: the caller cannot tell which.
    #[error("{what} {id} not found")]
    NotFound { what: &'static str, id: String },
    /// The command does not fit the current state; nothing changed.
    #[error("{code}: {detail}")]
    Conflict { code: Conflict, detail: String },
    #[error("invalid {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    /// This replica runs another policy than the one recorded in force: another replica may
    /// serve the call.
    #[error("this replica runs policy {running}; the deployment has {recorded} in force")]
    PolicyNotInForce { running: String, recorded: String },
}

impl DomainError {
    pub(super) fn not_found(what: &'static str, id: impl ToString) -> Self {
        Self::NotFound { what, id: id.to_string() }
    }

    pub fn conflict(code: Conflict, detail: impl Into<String>) -> Self {
        Self::Conflict { code, detail: detail.into() }
    }
}
