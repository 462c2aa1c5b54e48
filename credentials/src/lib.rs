//! Who is calling. Every caller of a service (the authorizer, the browser runtime) presents a
//! bearer credential, stored only as its SHA-256, that names one tenant and one role; each call
//! names the roles that may make it. The gateway acts for an owner it authenticated and says
//! which one, with that owner's scopes; every other role acts as the principal its credential
//! names, and a principal it sends is ignored. So the agent's worker, which hosts the model, can
//! never resolve an approval.

#[cfg(feature = "contract")]
pub mod contract;
mod memory;
mod postgres;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use deadpool_postgres::Pool;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use tonic::metadata::MetadataMap;
use uuid::Uuid;

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
}

/// A store's answer. Boxed, so that one `Credentials` holds either adapter; it is one
/// allocation per authenticated call.
pub type Pending<'a, T> = Pin<Box<dyn Future<Output = Result<T, AuthError>> + Send + 'a>>;

/// The credentials of every service: rules above a store, and optionally a memory of the
/// credentials found lately.
#[derive(Debug, Clone)]
pub struct Credentials {
    store: Arc<dyn CredentialStore>,
    recent: Option<Arc<Recent>>,
}

/// Usable credentials found lately, by their secret's digest. A credential's tenant, role and
/// principal never change; only a revocation does, which every call remembered from here must
/// confirm against the store. Only found credentials enter, so random tokens cannot fill it.
#[derive(Debug)]
struct Recent {
    capacity: usize,
    found: Mutex<HashMap<[u8; 32], Credential>>,
}

impl Recent {
    fn get(&self, key: &[u8; 32]) -> Option<Credential> {
        self.found.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key).cloned()
    }

    fn put(&self, key: [u8; 32], credential: &Credential) {
        let mut found = self.found.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if found.len() >= self.capacity && !found.contains_key(&key) {
            // Full: start again rather than track ages; a miss costs one read.
            found.clear();
        }
        found.insert(key, credential.clone());
    }

    fn forget(&self, key: &[u8; 32]) {
        self.found.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }

    fn forget_id(&self, credential_id: Uuid) {
        self.found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, c| c.credential_id != credential_id);
    }
}

impl Credentials {
    pub fn new(store: impl CredentialStore + 'static) -> Self {
        Self { store: Arc::new(store), recent: None }
    }

    /// Remembers up to `capacity` credentials found, so a call can skip the lookup; each such
    /// call's caller is [`Caller::unconfirmed`] and must be confirmed before it acts.
    #[must_use]
    pub fn remembering(mut self, capacity: usize) -> Self {
        self.recent = (capacity > 0).then(|| Arc::new(Recent { capacity, found: Mutex::new(HashMap::new()) }));
        self
    }

    /// Confirms a caller recognised from memory against the store: its credential must still
    /// be usable. One that is not is forgotten, and the call refused as an unknown credential.
    pub async fn confirm(&self, caller: &mut Caller) -> Result<(), AuthError> {
        let Some(u) = &caller.unconfirmed else { return Ok(()) };
        if u.is_confirmed() {
            caller.unconfirmed = None;
            return Ok(());
        }
        let now = OffsetDateTime::now_utc();
        let live =
            self.store.find(u.token_sha256).await?.is_some_and(|c| c.credential_id == u.credential_id && c.usable(now));
        if !live {
            self.forget(caller);
            return Err(AuthError::Unauthenticated(NOT_FOUND));
        }
        caller.mark_confirmed();
        Ok(())
    }

    /// Forgets the credential of a caller recognised from memory, once a read found it revoked;
    /// the caller's next call reads it again, and is refused.
    pub fn forget(&self, caller: &Caller) {
        if let (Some(u), Some(recent)) = (&caller.unconfirmed, &self.recent) {
            recent.forget(&u.token_sha256);
        }
    }

    /// The refusal of a caller whose credential a read found unusable.
    pub fn refused() -> AuthError {
        AuthError::Unauthenticated(NOT_FOUND)
    }

    pub fn postgres(pool: Pool) -> Self {
        Self::new(PgCredentials(pool))
    }

    /// For in-process tests of the services.
    pub fn memory() -> Self {
        Self::new(MemoryCredentials::default())
    }

    /// Stores a credential for `token` (made by [`new_token`], or by a test that needs a known
    /// one) and returns it.
    pub async fn register(
        &self,
        token: &str,
        tenant: &str,
        role: Role,
        principal: Option<&str>,
        expires_at: Option<OffsetDateTime>,
    ) -> Result<Credential, AuthError> {
        if !well_formed(token) {
            return Err(AuthError::Invalid("a token is glc_ and 64 lowercase hex digits"));
        }
        if tenant.is_empty() {
            return Err(AuthError::Invalid("a credential needs a tenant"));
        }
        let principal = principal.filter(|p| !p.is_empty());
        if role.acts_as_one_owner() != principal.is_some() {
            return Err(AuthError::Invalid("worker and runtime credentials name one principal; other roles none"));
        }
        let credential = Credential {
            credential_id: Uuid::new_v4(),
            tenant: tenant.to_owned(),
            role,
            principal: principal.map(str::to_owned),
            expires_at,
            revoked_at: None,
        };
        self.store.insert(digest(token), &credential).await?;
        Ok(credential)
    }

    /// Revokes a credential of `tenant`; `false` when there is none, or it was already revoked.
    pub async fn revoke(&self, tenant: &str, credential_id: Uuid) -> Result<bool, AuthError> {
        let revoked = self.store.revoke(tenant, credential_id, OffsetDateTime::now_utc()).await?;
        if let Some(recent) = &self.recent {
            // Other processes learn it at their next call's confirmation; this one at once.
            recent.forget_id(credential_id);
        }
        Ok(revoked)
    }

    /// Every credential of `tenant`, newest first.
    pub async fn list(&self, tenant: &str) -> Result<Vec<Credential>, AuthError> {
        self.store.list(tenant).await
    }

    /// The caller of a call that `roles` may make, from the request's metadata: a usable
    /// credential of one of those roles, and for the gateway the owner it names with every scope
    /// in `scopes`.
    pub async fn authenticate(
        &self,
        metadata: &MetadataMap,
        roles: &[Role],
        wanted: &[Scope],
        now: OffsetDateTime,
    ) -> Result<Caller, AuthError> {
        let token = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .ok_or(AuthError::Unauthenticated(NO_CREDENTIAL))?;
        if !well_formed(token) {
            return Err(AuthError::Unauthenticated(MALFORMED));
        }
        let key = digest(token);
        if let Some(c) = self.recent.as_ref().and_then(|r| r.get(&key)).filter(|c| c.usable(now)) {
            let unconfirmed =
                Unconfirmed { credential_id: c.credential_id, token_sha256: key, confirmed: Arc::default() };
            match Self::admit(c, metadata, roles, wanted) {
                Ok(caller) => return Ok(Caller { unconfirmed: Some(unconfirmed), ..caller }),
                // Refused from memory: the refusal is told only once the credential is read, so a
                // revoked one hears "unknown", as it would from any replica that never saw it.
                Err(_) => {
                    if let Some(recent) = &self.recent {
                        recent.forget(&key);
                    }
                }
            }
        }
        let found =
            self.store.find(key).await?.filter(|c| c.usable(now)).ok_or(AuthError::Unauthenticated(NOT_FOUND))?;
        if let Some(recent) = &self.recent {
            recent.put(key, &found);
        }
        Self::admit(found, metadata, roles, wanted)
    }

    /// The caller `credential` makes of a call that `roles` may make, with `wanted` scopes.
    fn admit(
        credential: Credential,
        metadata: &MetadataMap,
        roles: &[Role],
        wanted: &[Scope],
    ) -> Result<Caller, AuthError> {
        if !roles.contains(&credential.role) {
            return Err(AuthError::PermissionDenied(format!("the {} role may not make this call", credential.role)));
        }
        let (principal, scopes) = match credential.role {
            Role::Gateway => {
                let principal = metadata_value(metadata, "x-principal-id")
                    .ok_or(AuthError::Unauthenticated("the gateway must name the owner it authenticated"))?;
                let named = metadata_value(metadata, "x-owner-scopes").unwrap_or_default();
                let named: Vec<&str> = named.split([',', ' ']).filter(|s| !s.is_empty()).collect();
                let scopes = Scope::ALL.into_iter().filter(|s| named.contains(&s.code())).collect::<Vec<_>>();
                if let Some(missing) = wanted.iter().find(|s| !scopes.contains(s)) {
                    return Err(AuthError::PermissionDenied(format!("the owner lacks the scope {}", missing.code())));
                }
                (principal, scopes)
            }
            // The credential says who; anything the caller sends about it is ignored.
            _ => (
                credential.principal.clone().unwrap_or_else(|| format!("credential:{}", credential.credential_id)),
                Vec::new(),
            ),
        };
        Ok(Caller { tenant: credential.tenant, role: credential.role, principal, scopes, unconfirmed: None })
    }
}

fn metadata_value(metadata: &MetadataMap, key: &str) -> Option<String> {
    metadata.get(key).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_has_one_spelling() {
        for role in Role::ALL {
            assert_eq!(Role::from_code(role.code()), Some(role));
        }
    }

    fn bearer(token: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", format!("Bearer {token}").parse().unwrap());
        m
    }

    /// A remembered credential is let in unconfirmed; once revoked elsewhere, its confirmation
    /// refuses it and forgets it, so the next call reads it and is refused at the door.
    #[tokio::test]
    async fn a_remembered_credential_is_confirmed_before_it_acts() {
        let store = Arc::new(MemoryCredentials::default());
        let (here, elsewhere) = (Credentials::new(store.clone()).remembering(8), Credentials::new(store));
        let token = new_token();
        let c = here.register(&token, "t1", Role::Worker, Some("p1"), None).await.unwrap();
        let now = OffsetDateTime::now_utc();
        let first = here.authenticate(&bearer(&token), &[Role::Worker], &[], now).await.unwrap();
        assert_eq!(first.unconfirmed, None, "a credential just read needs no confirmation");
        let second = here.authenticate(&bearer(&token), &[Role::Worker], &[], now).await.unwrap();
        let seen = second.unconfirmed.clone().expect("remembered");
        assert_eq!(seen.credential_id, c.credential_id);
        here.confirm(&mut second.clone()).await.unwrap();
        assert!(seen.is_confirmed(), "every clone of the caller sees its confirmation");

        assert!(elsewhere.revoke("t1", c.credential_id).await.unwrap());
        let mut still = here.authenticate(&bearer(&token), &[Role::Worker], &[], now).await.unwrap();
        assert!(still.unconfirmed.is_some(), "this process has not read the revocation yet");
        assert_eq!(here.confirm(&mut still).await, Err(AuthError::Unauthenticated(NOT_FOUND)));
        assert_eq!(
            here.authenticate(&bearer(&token), &[Role::Worker], &[], now).await,
            Err(AuthError::Unauthenticated(NOT_FOUND)),
            "forgotten, read again, refused"
        );
    }

    /// A call refused from memory (another role's, say) is refused only after a read: a revoked
    /// credential hears "unknown", never what it may not do.
    #[tokio::test]
    async fn a_remembered_credential_is_read_before_it_is_refused() {
        let store = Arc::new(MemoryCredentials::default());
        let (here, elsewhere) = (Credentials::new(store.clone()).remembering(8), Credentials::new(store));
        let token = new_token();
        let c = here.register(&token, "t1", Role::Worker, Some("p1"), None).await.unwrap();
        let now = OffsetDateTime::now_utc();
        here.authenticate(&bearer(&token), &[Role::Worker], &[], now).await.unwrap();
        let live = here.authenticate(&bearer(&token), &[Role::Gateway], &[], now).await;
        assert!(matches!(live, Err(AuthError::PermissionDenied(_))), "{live:?}");
        here.authenticate(&bearer(&token), &[Role::Worker], &[], now).await.unwrap();
        assert!(elsewhere.revoke("t1", c.credential_id).await.unwrap());
        assert_eq!(
            here.authenticate(&bearer(&token), &[Role::Gateway], &[], now).await,
            Err(AuthError::Unauthenticated(NOT_FOUND))
        );
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
