//! Who is calling. Every caller of a service (the authorizer, the browser runtime) presents a
//! bearer credential, stored only as its SHA-256, that names one tenant and one role; each call
//! names the roles that may make it. The gateway acts for an owner it authenticated and says
//! which one, with that owner's scopes; every other role acts as the principal its credential
//! names, and a principal it sends is ignored. So the agent's worker, which hosts the model, can
//! never resolve an approval.

mod authenticate;
#[cfg(feature = "contract")]
pub mod contract;
mod memory;
mod postgres;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use uuid::Uuid;

pub use authenticate::Credentials;
pub use memory::MemoryCredentials;
pub use postgres::PgCredentials;

/// The kind of service a credential belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The agent's worker: sessions, messages, authorizations.
    Worker,
    /// The browser runtime: redeems approval tokens at the authorizer.
    Runtime,
    /// The owner's HTTP gateway: approvals and grants, for the owner it authenticated.
    Gateway,
    /// The profile management service: sign-ins, revocations, deletions.
    Profiles,
    /// Operators: settings and standing-grant pins.
    Operator,
}

impl Role {
    pub const ALL: [Self; 5] = [Self::Worker, Self::Runtime, Self::Gateway, Self::Profiles, Self::Operator];

    pub fn code(self) -> &'static str {
        match self {
            Self::Worker => "worker",
            Self::Runtime => "runtime",
            Self::Gateway => "gateway",
            Self::Profiles => "profiles",
            Self::Operator => "operator",
        }
    }

    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.code() == code)
    }

    /// Roles whose credential names the one owner they act as.
    pub fn acts_as_one_owner(self) -> bool {
        matches!(self, Self::Worker | Self::Runtime)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// An owner's permission, carried by the gateway for the owner it authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    ApprovalResolve,
    GrantRead,
    GrantWrite,
}

impl Scope {
    pub const ALL: [Self; 3] = [Self::ApprovalResolve, Self::GrantRead, Self::GrantWrite];

    pub fn code(self) -> &'static str {
        match self {
            Self::ApprovalResolve => "approval.resolve",
            Self::GrantRead => "browser.grant.read",
            Self::GrantWrite => "browser.grant.write",
        }
    }
}

/// A stored credential, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub credential_id: Uuid,
    pub tenant: String,
    pub role: Role,
    /// The owner a worker or runtime credential acts as.
    pub principal: Option<String>,
    pub expires_at: Option<OffsetDateTime>,
    pub revoked_at: Option<OffsetDateTime>,
    /// A worker credential an owner made for one chat: its caller names that chat only.
    pub binding: Option<Binding>,
}

/// The one chat a worker credential was made for, and whether its owner said the client behind
/// it has no tools besides this browser (the record's browser-only turn, which this side cannot
/// see for a client that is not the harness).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub session_id: String,
    pub browser_only: bool,
    /// The page the client's browser opens at.
    pub start_url: String,
    /// The chat's browser profile: the only one the client's browser may open.
    pub browser_profile_id: String,
}

/// Where an agent key's run id starts: no other caller's run may.
pub const AGENT_RUN_PREFIX: &str = "mcp-";

impl Binding {
    /// The one run a bound credential drives: the runtime types from its task record, and the
    /// authorizer holds its acts, cards and account to it.
    pub fn run_id(credential_id: Uuid) -> String {
        format!("{AGENT_RUN_PREFIX}{credential_id}")
    }
}

impl Credential {
    fn usable(&self, now: OffsetDateTime) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|t| t > now)
    }
}

/// The authenticated caller of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant: String,
    pub role: Role,
    pub principal: String,
    pub scopes: Vec<Scope>,
    /// The one chat a bound worker credential may name.
    pub binding: Option<Binding>,
    pub credential_id: Uuid,
    /// Set when the credential was recognised from this process's memory rather than read: the
    /// call must confirm it is still live before it acts ([`Credentials::confirm`], or a read of
    /// its own that checks [`Unconfirmed::credential_id`]), so a revocation holds at the next call.
    pub unconfirmed: Option<Unconfirmed>,
}

/// A credential recognised from memory, not yet confirmed live by this call. Every clone of the
/// caller shares `confirmed`, so the listener that let the call in can tell, once the call is
/// answered, whether anything confirmed it (and confirm it itself, if not).
#[derive(Debug, Clone)]
pub struct Unconfirmed {
    pub credential_id: Uuid,
    token_sha256: [u8; 32],
    confirmed: Arc<std::sync::atomic::AtomicBool>,
}

impl PartialEq for Unconfirmed {
    fn eq(&self, other: &Self) -> bool {
        (self.credential_id, self.token_sha256) == (other.credential_id, other.token_sha256)
    }
}

impl Eq for Unconfirmed {}

impl Unconfirmed {
    /// Whether this call confirmed the credential live (see [`Caller::mark_confirmed`]).
    pub fn is_confirmed(&self) -> bool {
        self.confirmed.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Caller {
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }

    /// Whether this caller may name `session_id`: any of its owner's chats, or for a bound
    /// credential its one chat.
    pub fn may_name(&self, session_id: &str) -> bool {
        self.binding.as_ref().is_none_or(|b| b.session_id == session_id)
    }

    /// Whether this caller may name run `run_id`: for a bound credential its one run; for any
    /// other, any run but an agent key's (`mcp-…`).
    pub fn may_run(&self, run_id: &str) -> bool {
        match self.binding {
            Some(_) => run_id == Binding::run_id(self.credential_id),
            None => !run_id.starts_with(AGENT_RUN_PREFIX),
        }
    }

    /// Whether the caller's turn is visible to the record: every caller but a bound credential
    /// whose owner did not say its client has no other tools.
    pub fn turn_visible(&self) -> bool {
        self.binding.as_ref().is_none_or(|b| b.browser_only)
    }

    /// Notes that a read of the call's own confirmed the credential live.
    pub fn mark_confirmed(&mut self) {
        if let Some(u) = self.unconfirmed.take() {
            u.confirmed.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

/// Why a call was not let in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("{0}")]
    Unauthenticated(&'static str),
    #[error("{0}")]
    PermissionDenied(String),
    /// The credential store could not be read; a retry may succeed.
    #[error("credentials cannot be read now: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Invalid(&'static str),
}

impl AuthError {
    /// Why, as a metric's label: one of a closed set. An unknown, expired and revoked credential
    /// are one cause, as the caller is told.
    pub fn cause(&self) -> &'static str {
        match self {
            Self::Unauthenticated(NO_CREDENTIAL) => "missing",
            Self::Unauthenticated(MALFORMED) => "malformed",
            Self::Unauthenticated(NOT_FOUND) => "unknown_expired_or_revoked",
            Self::Unauthenticated(_) => "no_principal",
            Self::PermissionDenied(_) => "not_permitted",
            Self::Unavailable(_) => "unavailable",
            Self::Invalid(_) => "invalid",
        }
    }
}

const NO_CREDENTIAL: &str = "a bearer credential is required";
const MALFORMED: &str = "the credential is malformed";
const NOT_FOUND: &str = "the credential is unknown, expired or revoked";

const TOKEN_PREFIX: &str = "glc_";

/// Why a second credential for one secret is refused (both stores say so).
pub(crate) const TOKEN_TAKEN: &str = "a credential for this token exists already";

/// A new secret: `glc_` and 64 hex digits of randomness.
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{TOKEN_PREFIX}{}", hex::encode(bytes))
}

fn well_formed(token: &str) -> bool {
    token
        .strip_prefix(TOKEN_PREFIX)
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Where credentials live: the port both adapters (`PgCredentials`, `MemoryCredentials`)
/// implement. It stores and finds; every rule (a token's form, who names a principal, what is
/// usable) is [`Credentials`]'s, decided once above it.
pub trait CredentialStore: Send + Sync + fmt::Debug {
    /// Stores `credential` under its secret's digest.
    fn insert<'a>(&'a self, token_sha256: [u8; 32], credential: &'a Credential) -> Pending<'a, ()>;
    /// Marks a credential of `tenant` revoked at `now`; `false` when there is none, or it was
    /// already revoked.
    fn revoke<'a>(&'a self, tenant: &'a str, credential_id: Uuid, now: OffsetDateTime) -> Pending<'a, bool>;
    /// Every credential of `tenant`, newest first.
    fn list<'a>(&'a self, tenant: &'a str) -> Pending<'a, Vec<Credential>>;
    /// The credential stored under a secret's digest.
    fn find(&self, token_sha256: [u8; 32]) -> Pending<'_, Option<Credential>>;
    /// The credential of `tenant` with this id.
    fn find_id<'a>(&'a self, tenant: &'a str, credential_id: Uuid) -> Pending<'a, Option<Credential>>;
}

/// One store behind several `Credentials` (as two processes share one database).
impl<T: CredentialStore + ?Sized> CredentialStore for Arc<T> {
    fn insert<'a>(&'a self, token_sha256: [u8; 32], credential: &'a Credential) -> Pending<'a, ()> {
        (**self).insert(token_sha256, credential)
    }
    fn revoke<'a>(&'a self, tenant: &'a str, credential_id: Uuid, now: OffsetDateTime) -> Pending<'a, bool> {
        (**self).revoke(tenant, credential_id, now)
    }
    fn list<'a>(&'a self, tenant: &'a str) -> Pending<'a, Vec<Credential>> {
        (**self).list(tenant)
    }
    fn find(&self, token_sha256: [u8; 32]) -> Pending<'_, Option<Credential>> {
        (**self).find(token_sha256)
    }
    fn find_id<'a>(&'a self, tenant: &'a str, credential_id: Uuid) -> Pending<'a, Option<Credential>> {
        (**self).find_id(tenant, credential_id)
    }
}

/// A store's answer. Boxed, so that one `Credentials` holds either adapter; it is one
/// allocation per authenticated call.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T, AuthError>> + Send + 'a>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_has_one_spelling() {
        for role in Role::ALL {
            assert_eq!(Role::from_code(role.code()), Some(role));
        }
    }

    #[test]
    fn tokens_are_random_and_well_formed() {
        let (a, b) = (new_token(), new_token());
        assert!(well_formed(&a) && well_formed(&b) && a != b);
        for bad in ["", "glc_", "glc_XYZ", &a[..a.len() - 1], &a.to_uppercase(), &format!("{a}0")] {
            assert!(!well_formed(bad), "{bad}");
        }
    }
}
