//! The credential store's contract, run against both adapters, and against an adapter broken on
//! purpose to show the contract catches it.

use credentials::{Credential, CredentialStore, Credentials, MemoryCredentials, Pending, contract};
use tests::TestDb;
use time::OffsetDateTime;
use uuid::Uuid;

#[tokio::test]
async fn memory_credentials_pass_the_contract() {
    contract::run_all(&Credentials::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_credentials_pass_the_contract() {
    let db = TestDb::new().await;
    contract::run_all(&Credentials::postgres(db.pool(2))).await;
}

/// A store that lists in the order it stored, oldest first: the disagreement the memory model
/// once had with PostgreSQL.
#[derive(Debug, Default)]
struct OldestFirst(MemoryCredentials);

impl CredentialStore for OldestFirst {
    fn insert<'a>(&'a self, token_sha256: [u8; 32], credential: &'a Credential) -> Pending<'a, ()> {
        self.0.insert(token_sha256, credential)
    }

    fn revoke<'a>(&'a self, tenant: &'a str, credential_id: Uuid, now: OffsetDateTime) -> Pending<'a, bool> {
        self.0.revoke(tenant, credential_id, now)
    }

    fn list<'a>(&'a self, tenant: &'a str) -> Pending<'a, Vec<Credential>> {
        Box::pin(async move {
            let mut listed = self.0.list(tenant).await?;
            listed.reverse();
            Ok(listed)
        })
    }

    fn find(&self, token_sha256: [u8; 32]) -> Pending<'_, Option<Credential>> {
        self.0.find(token_sha256)
    }

    fn find_id<'a>(&'a self, tenant: &'a str, credential_id: Uuid) -> Pending<'a, Option<Credential>> {
        self.0.find_id(tenant, credential_id)
    }
}

/// A store that finds a credential by id in any tenant: the cross-tenant slip the contract holds.
#[derive(Debug, Default)]
struct AnyTenant(MemoryCredentials, std::sync::Mutex<Vec<Credential>>);

impl CredentialStore for AnyTenant {
    fn insert<'a>(&'a self, token_sha256: [u8; 32], credential: &'a Credential) -> Pending<'a, ()> {
        self.1.lock().unwrap().push(credential.clone());
        self.0.insert(token_sha256, credential)
    }

    fn revoke<'a>(&'a self, tenant: &'a str, credential_id: Uuid, now: OffsetDateTime) -> Pending<'a, bool> {
        self.0.revoke(tenant, credential_id, now)
    }

    fn list<'a>(&'a self, tenant: &'a str) -> Pending<'a, Vec<Credential>> {
        self.0.list(tenant)
    }

    fn find(&self, token_sha256: [u8; 32]) -> Pending<'_, Option<Credential>> {
        self.0.find(token_sha256)
    }

    fn find_id<'a>(&'a self, _tenant: &'a str, credential_id: Uuid) -> Pending<'a, Option<Credential>> {
        let found = self.1.lock().unwrap().iter().find(|c| c.credential_id == credential_id).cloned();
        Box::pin(async move { Ok(found) })
    }
}

#[tokio::test]
async fn the_contract_catches_a_store_that_finds_an_id_in_another_tenant() {
    let broken = Credentials::new(AnyTenant::default());
    let out =
        tokio::spawn(async move { contract::a_credential_is_usable_by_id_in_its_tenant_only(&broken).await }).await;
    assert!(out.expect_err("the contract must fail against a store that ignores the tenant").is_panic());
}

#[tokio::test]
async fn the_contract_catches_a_store_that_lists_oldest_first() {
    let broken = Credentials::new(OldestFirst::default());
    let out = tokio::spawn(async move { contract::a_tenants_list_is_its_own_newest_first(&broken).await }).await;
    let panic = out.expect_err("the contract must fail against a store that lists oldest first");
    assert!(panic.is_panic(), "{panic:?}");
}
