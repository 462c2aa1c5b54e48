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
}

#[tokio::test]
async fn the_contract_catches_a_store_that_lists_oldest_first() {
    let broken = Credentials::new(OldestFirst::default());
    let out = tokio::spawn(async move { contract::a_tenants_list_is_its_own_newest_first(&broken).await }).await;
    let panic = out.expect_err("the contract must fail against a store that lists oldest first");
    assert!(panic.is_panic(), "{panic:?}");
}
