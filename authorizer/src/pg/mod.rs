//! The authority's PostgreSQL adapter: each request's read of the inline state (`read`,
//! locking what it reads when it writes), its events appended with the inline tables updated in
//! the same transaction (`write`), and the atomic use of a task grant (`consume`).
//!
//! An authorization reads everything in one statement and opens a transaction only for what it
//! decides to write, or, for a session's next allow, decides on the read it remembers and makes
//! the use in one statement that re-checks that read (`reads`, `remember`); every other command
//! reads and writes in one transaction. Dispatch may happen only after `consume` or
//! `consume_remembered` returns `Allowed`, which each does only once the commit is known.

mod consume;
mod convert;
mod grants;
mod read;
mod reads;
mod remember;
#[cfg(feature = "testing")]
mod testing;
mod write;

use std::sync::Arc;

use grant_domain::catalogue::Event;
use ledger::EventStore;
use ledger::{Metadata, TenantId};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::World;
use crate::error::{AuthorityError, StoreError};
use crate::store::{Backend, Consumed, Decide, Need, Transacted, UseOf};

#[cfg(feature = "testing")]
pub use grants::Pause;
pub use grants::PgGrants;

impl Backend for PgGrants {
    async fn transact<T: Send>(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        need: Need<'_>,
        lock: bool,
        decide: &Decide<'_, T>,
    ) -> Result<Transacted<T>, AuthorityError> {
        PgGrants::transact(self, tenant, metadata, need, lock, decide).await
    }

    async fn consume(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        u: UseOf<'_>,
        use_event: impl Fn(u32) -> Event + Send + Sync,
    ) -> Result<Consumed, StoreError> {
        PgGrants::consume(self, tenant, metadata, u, use_event).await
    }

    async fn dump(&self, tenant: &TenantId) -> Result<World, StoreError> {
        PgGrants::dump(self, tenant).await
    }

    async fn recorded(&self, tenant: &TenantId, event_id: Uuid) -> Result<Option<ledger::RecordedEvent>, StoreError> {
        let found = self.store().find_event(event_id).await.map_err(|e| StoreError::Unavailable(e.to_string()))?;
        Ok(found.filter(|e| &e.tenant_id == tenant))
    }

    async fn due_tenants(&self, now: OffsetDateTime) -> Result<Vec<TenantId>, StoreError> {
        PgGrants::due_tenants(self, now).await
    }

    async fn approval_marks(&self, keys: &[(TenantId, Uuid)]) -> Result<crate::store::Marks, StoreError> {
        PgGrants::approval_marks(self, keys).await
    }

    fn wake_ups(&self) -> tokio::sync::watch::Receiver<u64> {
        self.store().wake_ups()
    }

    fn confirms_credentials(&self) -> bool {
        true
    }

    fn remembered(&self, tenant: &TenantId, session: &str) -> Option<Arc<crate::store::Loaded>> {
        PgGrants::remembered(self, tenant, session)
    }

    async fn consume_remembered(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        u: UseOf<'_>,
        read: &crate::store::Loaded,
        credential: Option<Uuid>,
        use_event: impl Fn(u32) -> Event + Send + Sync,
    ) -> Result<Consumed, StoreError> {
        PgGrants::consume_remembered(self, tenant, metadata, u, read, credential, use_event).await
    }
}
