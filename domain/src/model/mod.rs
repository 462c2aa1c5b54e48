//! The grant lifecycle as a pure domain: a `World` folded from events, commands decided into
//! events, and `authorize` deciding one `browser.act` in the decision record's order. No IO and
//! no clock: time and new ids come in with each call.

mod authorize;
mod decide;
mod error;
mod world;

pub use authorize::{
    Authorization, AuthorizeRequest, Decision, Denial, FACTS_NOT_THIS_SESSION, FORM_NOT_READ_BACK,
    KEY_CLICKS_OR_SUBMITS, NotCovered, PROFILE_NOT_OWNED, RUN_SUPERSEDED, RunContext, SESSION_STOPPED,
    STANDING_GRANT_DURATION, StandingPin, authorize, offer_for, policy_reading, request_approval,
};
pub use decide::{Command, RunEvent, decide, task_run_id};
pub use error::{Conflict, DomainError};
pub use world::{
    Approval, ApprovalState, Grant, Profile, RunSnapshots, Session, SessionTask, TASK_RUN_PREFIX, Versions, World,
    deployment_stream, entity_stream, stored, stream_of, tenant_id,
};
