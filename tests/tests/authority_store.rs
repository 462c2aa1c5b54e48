//! The authority store's contract, run against both adapters, and against an adapter broken on
//! purpose to show the contract catches it.

use authorizer::contract;
use authorizer::{
    AuthorityError, Backend, Consumed, Decide, MemoryGrants, Need, PgGrants, StoreError, Transacted, UseOf,
};
use grant_domain::catalogue::Event;
use grant_domain::model::World;
use ledger::{Metadata, RecordedEvent, TenantId};
use tests::TestDb;
use time::OffsetDateTime;
use uuid::Uuid;

#[tokio::test]
async fn memory_backend_passes_the_contract() {
    contract::run_all(&MemoryGrants::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_backend_passes_the_contract() {
    let db = TestDb::new().await;
    contract::run_all(&PgGrants::new(db.store(4))).await;
}

/// A backend that records every use as if no text were typed: the mistake of charging the
/// characters outside the conditional statement, or forgetting them.
struct UnchargedText(MemoryGrants);

impl Backend for UnchargedText {
    async fn transact<T: Send>(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        need: Need<'_>,
        lock: bool,
        decide: &Decide<'_, T>,
    ) -> Result<Transacted<T>, AuthorityError> {
        self.0.transact(tenant, metadata, need, lock, decide).await
    }

    async fn consume(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        u: UseOf<'_>,
        use_event: impl Fn(u32) -> Event + Send + Sync,
    ) -> Result<Consumed, StoreError> {
        self.0.consume(tenant, metadata, UseOf { typed_chars: 0, ..u }, use_event).await
    }

    async fn dump(&self, tenant: &TenantId) -> Result<World, StoreError> {
        self.0.dump(tenant).await
    }

    async fn recorded(&self, tenant: &TenantId, event_id: Uuid) -> Result<Option<RecordedEvent>, StoreError> {
        self.0.recorded(tenant, event_id).await
    }

    async fn due_tenants(&self, now: OffsetDateTime) -> Result<Vec<TenantId>, StoreError> {
        self.0.due_tenants(now).await
    }

    async fn approval_marks(&self, keys: &[(TenantId, Uuid)]) -> Result<authorizer::Marks, StoreError> {
        self.0.approval_marks(keys).await
    }

    fn wake_ups(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.wake_ups()
    }
}

#[tokio::test]
async fn the_contract_catches_a_backend_that_does_not_charge_typed_text() {
    let broken = UnchargedText(MemoryGrants::default());
    // The case panics on the broken adapter; run it where the panic is caught.
    let out = tokio::spawn(async move { contract::uses_stop_at_the_typed_character_budget(&broken).await }).await;
    let panic = out.expect_err("the contract must fail against a backend that does not charge text");
    assert!(panic.is_panic(), "{panic:?}");
}
