//! The read side: projections of the ledger's global log into the view people read (the audit
//! log, with each chat's activity), the workers that keep it current exactly once, and `verify`,
//! which replays the log in memory and diffs every view against it, the authorizer's inline
//! tables included. Grants and waiting cards have one read model, the authorizer's inline
//! tables; no projection repeats them.
//!
//! Depends on `ledger` and the domain's event catalogue; knows nothing of gRPC or WebDriver.
//! Each projection's apply step and its replay share one pure function per event, so a rebuild
//! or a verify runs the code production runs.

pub mod audit;
mod cells;
mod error;
pub mod grants;
pub mod metrics;
mod projection;
pub mod rebuild;
pub mod verify;
pub mod worker;

pub use cells::Cells;
pub(crate) use cells::text_time;
pub use error::Error;
pub use projection::Projection;
