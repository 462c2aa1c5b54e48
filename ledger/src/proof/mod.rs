//! The auditor's proof beside the hash chains: a Merkle tree over the log (RFC 9162), signed
//! notes (C2SP `signed-note`) and checkpoints (C2SP `tlog-checkpoint`). Pure: no IO.

pub mod checkpoint;
pub mod merkle;
pub mod note;
pub mod verify;
