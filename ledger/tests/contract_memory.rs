//! The store contract against the in-memory adapter.

#[tokio::test]
async fn memory_store_passes_the_contract() {
    ledger::contract::run_all(&ledger::MemoryStore::new()).await;
}
