//! The browser task agent's harness: the tool contract of the record, enforced in code around
//! whatever model drives a run. The tools as the JSON Schemas a model is shown, and the check of
//! each call against them (`tools`); the rules that refuse an ungrounded turn or end a run under
//! its named reason (`rules`); the step prompt with the snapshot inside its untrusted block
//! (`prompt`); the models behind one trait (`model`, and `provider` for the hosted ones over
//! HTTPS); one run, carried between the runtime and the authorizer (`run`); and a count of
//! every enforcement (`metrics`).
//!
//! It reaches the services only through their gRPC clients (`proto`). It depends on neither the
//! ledger nor the services' crates, and knows nothing of PostgreSQL or WebDriver.

pub mod metrics;
pub mod model;
pub mod prompt;
pub mod provider;
pub mod reason;
pub mod rules;
pub mod run;
pub mod tools;
