//! The dispatch constraint for each kind of grant allow (the type and its rules are the
//! classifier's, shared with the browser runtime that reads it).

use time::OffsetDateTime;

pub use classifier::constraint::{DispatchConstraint, GrantKind, InvalidConstraint, WireConstraint};

use crate::model::Grant;

/// The constraint for a use of a task grant.
pub fn for_task_grant(grant: &Grant) -> DispatchConstraint {
    let c = &grant.created;
    DispatchConstraint {
        kind: GrantKind::Task,
        origins: vec![c.scope.origin.clone()],
        path_prefix: c.scope.path_prefix.clone(),
        not_after: c.expires_at,
    }
}

/// The constraint for the pinned standing grant on the page's origin.
pub fn for_standing_grant(origin: &str, not_after: OffsetDateTime) -> DispatchConstraint {
    DispatchConstraint {
        kind: GrantKind::Standing,
        origins: vec![origin.to_owned()],
        path_prefix: "/".into(),
        not_after,
    }
}
