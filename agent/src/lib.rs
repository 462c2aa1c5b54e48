//! The browser task agent's harness: the tool contract of the record, enforced in code around
//! whatever model drives a run. Here so far: the tools as the JSON Schemas a model is shown and
//! the check of each call against them (`tools`), and the rules that refuse an ungrounded turn
//! or end a run under its named reason (`rules`), and the step prompt with the snapshot inside
//! its untrusted block (`prompt`).

pub mod metrics;
pub mod model;
pub mod openai;
pub mod prompt;
pub mod rules;
pub mod run;
pub mod tools;
