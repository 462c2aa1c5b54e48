//! The wire types of `grant_ledger.v1` and `browser_runtime.v1`, generated from the `.proto`
//! files by protox and tonic-prost-build at build time. The modules mirror the packages, so the
//! runtime's messages can name the authorizer's. Prost types stay at the edges: the domain never
//! sees them.
//!
//! `facts` is the element-facts codec both services use. `limits` is the one table of what every request field may hold, and `checked` the codec that
//! holds every request to it before prost decodes it.
//! `ticket` seals and opens the dispatch tickets the authorizer issues and the runtime checks.

pub mod checked;
pub mod facts;
pub mod limits;
pub mod ticket;

#[allow(unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
pub mod grant_ledger {
    pub mod v1 {
        tonic::include_proto!("grant_ledger.v1");
    }
}

#[allow(unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
pub mod browser_runtime {
    pub mod v1 {
        tonic::include_proto!("browser_runtime.v1");
    }
}

pub use browser_runtime::v1 as runtime;
pub use grant_ledger::v1;
