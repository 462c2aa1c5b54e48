//! The isolated browser runtime: one Chromium per browser profile, driven over WebDriver
//! (fantoccini over Debian's chromedriver). `observe` reads the live page in one script round
//! trip into a snapshot of nodes with refs and, beside it, the secret-free facts the classifier
//! reads. `act` re-reads the node in the live page and refuses, with the tool contract's closed
//! codes, whatever no longer matches the snapshot, leaves the run's origins, needs an approval
//! token it was not given, or falls outside the authorizer's dispatch constraint. It can only
//! refuse: authority stays with the authorizer.

pub mod browser;
pub mod config;
pub mod fence;
#[cfg(feature = "fixture")]
pub mod fixture;
pub mod guard;
pub mod metrics;
pub mod page;
pub mod picture;
pub mod platform;
pub mod records;
pub mod review;
pub mod role;
pub mod service;
pub mod session;
pub mod ticket;

pub use config::RuntimeConfig;
pub use service::BrowserRuntime;
