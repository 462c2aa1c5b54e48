//! The authority's errors, each saying whether a write certainly did not happen.

use crate::domain::DomainError;

/// Why a backend did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The ledger refused the append; its own error says whether it may have happened.
    #[error(transparent)]
    Append(#[from] ledger::AppendError),
    /// The store could not be reached or failed a statement; nothing was written.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The stored state and the change disagree (a grant ended twice, a second active grant,
    /// stored state that does not decode): nothing was written, and a retry does not cure it.
    #[error("inline projection refused: {0}")]
    Projection(String),
    /// Another request changed what this one read (a deadlock or serialisation failure the
    /// server resolved by aborting this one): nothing was written; decide again.
    #[error("contended: {0}")]
    Contended(String),
    /// The request cannot be stored as it is (an id too long for a stream name): the domain's
    /// own typed refusal, naming the field.
    #[error(transparent)]
    Invalid(#[from] DomainError),
    /// The read found the caller's credential (recognised from a replica's memory) revoked or
    /// expired: nothing was decided or written.
    #[error("the credential is unknown, expired or revoked")]
    CallerRefused,
}

impl StoreError {
    /// True when nothing was written.
    pub fn is_determinate(&self) -> bool {
        match self {
            Self::Append(e) => e.is_determinate(),
            _ => true,
        }
    }

    /// Whether the attempt may be decided again from a fresh read: another request changed
    /// what this one read.
    pub fn is_contended(&self) -> bool {
        matches!(self, Self::Append(ledger::AppendError::Conflict { .. }) | Self::Contended(_))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Other requests kept changing what this one read, [`crate::authority::ATTEMPTS`] times: nothing was
    /// written.
    #[error("other requests kept changing what this request read; nothing was written")]
    Contended,
}

impl From<ledger::AppendError> for AuthorityError {
    fn from(e: ledger::AppendError) -> Self {
        Self::Store(StoreError::Append(e))
    }
}

impl AuthorityError {
    pub(crate) fn contended(&self) -> bool {
        matches!(self, Self::Store(e) if e.is_contended())
    }
}
