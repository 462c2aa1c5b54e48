//! The wire types of `grant_ledger.v1`, generated from `grant_ledger/v1/*.proto` by protox and
//! tonic-prost-build at build time. Prost types stay at the edges: the domain never sees them.

#[allow(unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
pub mod v1 {
    tonic::include_proto!("grant_ledger.v1");
}
