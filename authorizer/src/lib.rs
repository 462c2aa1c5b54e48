//! The authority over browser actions: the pure domain (`grant-domain`) served over gRPC, each
//! request's state read from PostgreSQL's inline tables, and the atomic use of a grant.
//!
//! The domain's modules are re-exported under their old paths (`authorizer::domain` is
//! `grant_domain::model`); storage and transport sit here, at the edge.

pub mod auth;
pub mod authority;
pub mod pg;
pub mod service;
pub mod state;

pub use grant_domain::model as domain;
pub use grant_domain::{catalogue, constraint, limits, policy, scopes, view};
