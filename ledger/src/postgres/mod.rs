//! The PostgreSQL store: tokio-postgres over a deadpool pool.
//!
//! An append is one multi-row INSERT of the events with their hash links, in a transaction of
//! its own (one round trip), or inside a transaction the ledger runs for a caller
//! (`PgStore::transaction`), or in one statement with a caller's guard
//! (`PgStore::append_guarded`). The stream's head
//! (newest version, hash, tenant) comes from a per-store cache filled by this store's own writes
//! and reads; stored events never change, so a cached head is either still the head or a
//! concurrent writer took the next version, which the `(stream_id, stream_version)` unique key
//! turns into a typed conflict. Only a miss, or `ExpectedVersion::Any`, reads the head first.
//!
//! Wake-ups: appends move an in-process counter at once; a background task turns those into one
//! coalesced NOTIFY, so no append holds PostgreSQL's global notify lock at commit, and a
//! listener turns other processes' NOTIFYs back into wake-ups.

mod event_store;
mod failure;
mod heads;
mod notify;
mod rows;
mod settle;
mod sql;
mod store;
mod tree;
mod tx;

pub use notify::WAKE_CHANNEL;
pub use rows::decode_row;
pub use sql::{COLUMNS, Guard, read_all_sql};
pub use store::{PgStore, SettleCounts, bounded_pool, discard, pool};
pub use tree::{StoredCheckpoint, TreeError, TreeHead, heads_from_json, heads_json};
pub use tx::{Done, Tx};
