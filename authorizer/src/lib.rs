//! The authority over browser actions: the pure domain (`grant-domain`) served over gRPC, each
//! request's state read from PostgreSQL's inline tables, and the atomic use of a grant.
//!
//! The authority (`Authority`) knows its storage only through one port (`Backend`, `Reader`):
//! PostgreSQL (`PgGrants`) and the memory model (`MemoryGrants`) are its adapters, held to one
//! contract suite (`contract`, behind the `contract` feature). The domain's modules are
//! re-exported under their old paths (`authorizer::domain` is `grant_domain::model`); storage and
//! transport sit here, at the edge. It never holds a decision's state between requests: a
//! remembered read of a session (`pg/reads.rs`) only proposes an allow, whose use re-checks every
//! version that read saw in the statement that makes it.

pub mod auth;
mod authority;
#[cfg(feature = "contract")]
pub mod contract;
mod error;
mod memory;
mod metrics;
mod pg;
pub mod service;
mod state;
mod store;

pub use authority::{ATTEMPTS, Authority, Authorized, CallKey, ViewOf};
pub use error::{AuthorityError, StoreError};
pub use memory::MemoryGrants;
pub use metrics::AuthorizerMetrics;
#[cfg(feature = "testing")]
pub use pg::Pause;
pub use pg::PgGrants;
pub use state::{
    GRANT_VERSION_SQL, Named, Plan, Writes, decision_id, fold, grant_stream_version, grant_version, load, need_of,
};
pub use store::{
    Approvals, Backend, Consumed, Decide, Deployment, Grants, Loaded, Marks, Need, Reader, STOP_BATCH, SessionAt,
    Transacted, UseOf, Versioned,
};

pub use grant_domain::model as domain;
pub use grant_domain::{catalogue, constraint, limits, policy, scopes, view};
