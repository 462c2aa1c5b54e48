//! `Credentials`: who a call is, checked against a store, with the rules above any store and an
//! optional memory of the credentials found lately.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use deadpool_postgres::Pool;
use time::OffsetDateTime;
use tonic::metadata::MetadataMap;
use uuid::Uuid;

use crate::memory::MemoryCredentials;
use crate::postgres::PgCredentials;
use crate::{
    AuthError, Binding, Caller, Credential, CredentialStore, MALFORMED, NO_CREDENTIAL, NOT_FOUND, Role, Scope,
    Unconfirmed, digest, well_formed,
};

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
        self.register_with(token, tenant, role, principal, None, expires_at).await
    }

    /// Stores a worker credential for `token` that may name one chat only (`binding`).
    pub async fn register_bound(
        &self,
        token: &str,
        tenant: &str,
        principal: &str,
        binding: Binding,
        expires_at: OffsetDateTime,
    ) -> Result<Credential, AuthError> {
        if binding.session_id.is_empty() {
            return Err(AuthError::Invalid("a bound credential names its chat"));
        }
        self.register_with(token, tenant, Role::Worker, Some(principal), Some(binding), Some(expires_at)).await
    }

    async fn register_with(
        &self,
        token: &str,
        tenant: &str,
        role: Role,
        principal: Option<&str>,
        binding: Option<Binding>,
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
            binding,
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

    /// Credential `credential_id` of `tenant`, usable or not.
    pub async fn find_id(&self, tenant: &str, credential_id: Uuid) -> Result<Option<Credential>, AuthError> {
        self.store.find_id(tenant, credential_id).await
    }

    /// Whether credential `credential_id` of `tenant` is usable now (known, unexpired, unrevoked).
    pub async fn usable(&self, tenant: &str, credential_id: Uuid) -> Result<bool, AuthError> {
        let now = OffsetDateTime::now_utc();
        Ok(self.find_id(tenant, credential_id).await?.is_some_and(|c| c.usable(now)))
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
        Ok(Caller {
            tenant: credential.tenant,
            role: credential.role,
            principal,
            scopes,
            binding: credential.binding,
            credential_id: credential.credential_id,
            unconfirmed: None,
        })
    }
}

fn metadata_value(metadata: &MetadataMap, key: &str) -> Option<String> {
    metadata.get(key).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::new_token;

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
}
