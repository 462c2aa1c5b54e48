//! The pure domain of task grants: the typed event catalogue, the world its events fold into,
//! the decisions (`model`), the limits, the deployment policy, the configured scopes, the
//! approval card's view and the dispatch constraint.
//!
//! Nothing here does IO. Time and new ids come in with each call. The crate depends on neither
//! a gRPC stack nor a PostgreSQL client, and takes `ledger` without its PostgreSQL adapter, so
//! the compiler keeps it pure (`cargo check -p grant-domain` builds it alone).

pub mod catalogue;
pub mod constraint;
pub mod limits;
pub mod model;
pub mod policy;
pub mod rejudge;
pub mod scopes;
pub mod view;
