//! One table from the authority's typed errors to gRPC statuses: bad input is INVALID_ARGUMENT
//! with a field violation, and only what a retry may cure is UNAVAILABLE.

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::domain::{Conflict, DomainError};
use crate::error::{AuthorityError, StoreError};

/// The `ErrorInfo` reason of ABORTED: other requests kept changing what this one read.
pub const CONCURRENT_CHANGE: &str = "CONCURRENT_CHANGE";

pub(super) fn invalid(field: &str, description: &str) -> Status {
    proto::checked::invalid_argument(field, description)
}

pub(super) fn with_reason(code: Code, reason: &str, message: String) -> Status {
    Status::with_error_details(
        code,
        message,
        ErrorDetails::with_error_info(reason, "grant_ledger", std::collections::HashMap::new()),
    )
}

pub(super) fn status(e: AuthorityError) -> Status {
    match e {
        // Bad input the ledger refused (a NUL in a string jsonb cannot hold) is the caller's to
        // fix, not an outage to retry: name where it was.
        AuthorityError::Store(StoreError::Append(ledger::AppendError::Invalid(i))) => {
            invalid(i.at.as_deref().unwrap_or(i.field), &i.reason)
        }
        AuthorityError::Domain(DomainError::NotFound { what, .. }) => Status::not_found(format!("{what} not found")),
        AuthorityError::Domain(DomainError::Conflict { code: code @ Conflict::ApprovalTokenInvalid, detail }) => {
            with_reason(Code::PermissionDenied, code.code(), format!("{code}: {detail}"))
        }
        AuthorityError::Domain(DomainError::Conflict { code: Conflict::SessionExists, detail }) => {
            Status::already_exists(detail)
        }
        AuthorityError::Domain(DomainError::Conflict { code, detail }) => {
            with_reason(Code::FailedPrecondition, code.code(), format!("{code}: {detail}"))
        }
        AuthorityError::Domain(DomainError::Invalid { field, reason }) => invalid(field, &reason),
        // A replica left behind by a policy change: another one serves the call.
        AuthorityError::Domain(e @ DomainError::PolicyNotInForce { .. }) => {
            tracing::warn!(error = %e, "asked to decide under a policy not in force");
            Status::unavailable(format!("nothing was written: {e}; another replica can serve this call"))
        }
        // Another request kept changing what this one read: nothing was written, and trying
        // again decides afresh.
        AuthorityError::Contended | AuthorityError::Store(StoreError::Contended(_)) => with_reason(
            Code::Aborted,
            CONCURRENT_CHANGE,
            "other requests changed what this one read; nothing was written; retry".into(),
        ),
        AuthorityError::Store(StoreError::Invalid(e)) => status(AuthorityError::Domain(e)),
        AuthorityError::Store(StoreError::CallerRefused) => transport::auth_status(credentials::Credentials::refused()),
        // Not something a retry cures: the stored state and the request disagree. Nothing was
        // written; the operator's log has the details.
        AuthorityError::Store(
            e @ (StoreError::Projection(_)
            | StoreError::Append(
                ledger::AppendError::TenantMismatch { .. } | ledger::AppendError::DuplicateEventId { .. },
            )),
        ) => {
            tracing::error!(error = %e, "the stored state refused the change; nothing was written");
            Status::internal("the stored state refused the change; nothing was written")
        }
        AuthorityError::Store(e) if e.is_determinate() => {
            tracing::warn!(error = %e, "store refused a write; nothing was written");
            Status::unavailable(format!("nothing was written: {e}"))
        }
        AuthorityError::Store(e) => {
            tracing::error!(error = %e, "write outcome unknown");
            Status::unknown(format!("the outcome is unknown; look it up before retrying: {e}"))
        }
    }
}
