//! Why a run ended without its confirmation: one closed set, each with the code the record,
//! the metrics and the tool contract spell. The model may name only the contract's eight
//! ([`Reason::MODEL`]); the rest are the harness's own.

/// A run's escalation reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    AmbiguousTarget,
    NoGroundedAction,
    UnmappedField,
    UnexpectedFormState,
    SuspectedInjection,
    AuthRequired,
    ApprovalRejected,
    Uncertain,
    ApprovalTimeout,
    BudgetExhausted,
    NameMismatch,
    NoProgress,
    PolicyDenied,
    RepeatedSnapshot,
    TakenOver,
    TerminalRefusal,
    PageError,
    ServiceError,
    StoppedByOwner,
    OutcomeUnknown,
}

impl Reason {
    /// The reasons the tool contract lets the model escalate with.
    pub const MODEL: [Reason; 8] = [
        Reason::AmbiguousTarget,
        Reason::NoGroundedAction,
        Reason::UnmappedField,
        Reason::UnexpectedFormState,
        Reason::SuspectedInjection,
        Reason::AuthRequired,
        Reason::ApprovalRejected,
        Reason::Uncertain,
    ];

    pub const ALL: [Reason; 20] = [
        Reason::AmbiguousTarget,
        Reason::NoGroundedAction,
        Reason::UnmappedField,
        Reason::UnexpectedFormState,
        Reason::SuspectedInjection,
        Reason::AuthRequired,
        Reason::ApprovalRejected,
        Reason::Uncertain,
        Reason::ApprovalTimeout,
        Reason::BudgetExhausted,
        Reason::NameMismatch,
        Reason::NoProgress,
        Reason::PolicyDenied,
        Reason::RepeatedSnapshot,
        Reason::TakenOver,
        Reason::TerminalRefusal,
        Reason::PageError,
        Reason::ServiceError,
        Reason::StoppedByOwner,
        Reason::OutcomeUnknown,
    ];

    /// The stable code: the record's word, the metric's label.
    pub const fn code(self) -> &'static str {
        match self {
            Reason::AmbiguousTarget => "ambiguous_target",
            Reason::NoGroundedAction => "no_grounded_action",
            Reason::UnmappedField => "unmapped_field",
            Reason::UnexpectedFormState => "unexpected_form_state",
            Reason::SuspectedInjection => "suspected_injection",
            Reason::AuthRequired => "auth_required",
            Reason::ApprovalRejected => "approval_rejected",
            Reason::Uncertain => "uncertain",
            Reason::ApprovalTimeout => "approval_timeout",
            Reason::BudgetExhausted => "budget_exhausted",
            Reason::NameMismatch => "name_mismatch",
            Reason::NoProgress => "no_progress",
            Reason::PolicyDenied => "policy_denied",
            Reason::RepeatedSnapshot => "repeated_snapshot",
            Reason::TakenOver => "taken_over",
            Reason::TerminalRefusal => "terminal_refusal",
            Reason::PageError => "page_error",
            Reason::ServiceError => "service_error",
            Reason::StoppedByOwner => "stopped_by_owner",
            Reason::OutcomeUnknown => "outcome_unknown",
        }
    }

    /// A reason the model named, if the contract lets it name that one.
    pub fn from_model(code: &str) -> Option<Reason> {
        Reason::MODEL.into_iter().find(|r| r.code() == code)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::Reason;

    #[test]
    fn codes_are_distinct_and_the_model_names_only_its_own() {
        let codes: std::collections::BTreeSet<&str> = Reason::ALL.iter().map(|r| r.code()).collect();
        assert_eq!(codes.len(), Reason::ALL.len());
        assert_eq!(Reason::from_model("uncertain"), Some(Reason::Uncertain));
        assert_eq!(Reason::from_model("stopped_by_owner"), None, "the harness's own is not the model's");
    }
}
