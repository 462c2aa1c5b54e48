//! The authority over browser actions: approvals, task grants and their every rule (the pure
//! domain), the policy engine, scope configuration, and the atomic use of a grant.
//!
//! The domain is synchronous and pure: time and ids come in with each command; no IO, no clock,
//! no prost types. Storage adapters sit at the edge (`pg`).

pub mod auth;
pub mod authority;
pub mod constraint;
pub mod domain;
pub mod limits;
pub mod pg;
pub mod policy;
pub mod scopes;
pub mod service;
pub mod state;
pub mod view;
