//! Credentials in memory: the reference model, for in-process tests of the services.

use std::collections::HashMap;
use std::sync::Mutex;

use time::OffsetDateTime;
use uuid::Uuid;

use crate::{AuthError, Credential, CredentialStore, Pending, TOKEN_TAKEN};

/// Each credential with the order it was stored in, so `list` is newest first as in PostgreSQL.
/// Nothing is ever removed (a revocation marks), so the count stored is the next order.
#[derive(Debug, Default)]
pub struct MemoryCredentials {
    stored: Mutex<HashMap<[u8; 32], (u64, Credential)>>,
}

impl MemoryCredentials {
    fn stored(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (u64, Credential)>> {
        self.stored.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl CredentialStore for MemoryCredentials {
    fn insert<'a>(&'a self, token_sha256: [u8; 32], credential: &'a Credential) -> Pending<'a, ()> {
        let mut stored = self.stored();
        let order = stored.len() as u64;
        let out = match stored.entry(token_sha256) {
            std::collections::hash_map::Entry::Occupied(_) => Err(AuthError::Invalid(TOKEN_TAKEN)),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert((order, credential.clone()));
                Ok(())
            }
        };
        Box::pin(async move { out })
    }

    fn revoke<'a>(&'a self, tenant: &'a str, credential_id: Uuid, now: OffsetDateTime) -> Pending<'a, bool> {
        let mut stored = self.stored();
        let found = stored
            .values_mut()
            .map(|(_, c)| c)
            .find(|c| c.credential_id == credential_id && c.tenant == tenant && c.revoked_at.is_none());
        let revoked = found.map(|c| c.revoked_at = Some(now)).is_some();
        Box::pin(async move { Ok(revoked) })
    }

    fn list<'a>(&'a self, tenant: &'a str) -> Pending<'a, Vec<Credential>> {
        let mut of_tenant: Vec<(u64, Credential)> =
            self.stored().values().filter(|(_, c)| c.tenant == tenant).cloned().collect();
        of_tenant.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
        Box::pin(async move { Ok(of_tenant.into_iter().map(|(_, c)| c).collect()) })
    }

    fn find_id<'a>(&'a self, tenant: &'a str, credential_id: Uuid) -> Pending<'a, Option<Credential>> {
        let found = self
            .stored()
            .values()
            .map(|(_, c)| c)
            .find(|c| c.credential_id == credential_id && c.tenant == tenant)
            .cloned();
        Box::pin(async move { Ok(found) })
    }

    fn find(&self, token_sha256: [u8; 32]) -> Pending<'_, Option<Credential>> {
        let found = self.stored().get(&token_sha256).map(|(_, c)| c.clone());
        Box::pin(async move { Ok(found) })
    }
}
