//! Hooks for tests and tools, behind the `testing` feature: grant events written as they are,
//! a grant's inline row read directly, and the remembered reads forgotten.

use grant_domain::catalogue::Event;
use ledger::{AppendOutcome, AppendRequest, ExpectedVersion, Metadata, TenantId};
use tokio_postgres::IsolationLevel;
use uuid::Uuid;

use super::convert::unavailable;
use super::grants::PgGrants;
use super::write::apply_grant_row;
use crate::domain::stream_of;
use crate::error::StoreError;

impl PgGrants {
    /// Forgets every remembered read, so the next authorization of each session is decided on a
    /// fresh one: how a test puts a change between that read and its use.
    pub fn forget_reads(&self) {
        self.reads.clear();
    }

    /// Appends grant events as they are, each stream unchecked, and applies them to the grant
    /// rows, in one transaction: for tests and tools that write a grant's events directly. The
    /// authority itself decides through [`PgGrants::transact`].
    pub async fn commit(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        events: &[Event],
    ) -> Result<AppendOutcome, StoreError> {
        let mut request = AppendRequest { tenant_id: tenant.clone(), streams: Vec::new() };
        for e in events {
            let stream = stream_of(tenant, e)?;
            let new = e.to_new(Uuid::new_v4(), metadata.clone());
            match request.streams.iter_mut().find(|s| s.stream_id == stream) {
                Some(s) => s.events.push(new),
                None => request.streams.push(ledger::StreamAppend {
                    stream_id: stream,
                    expected: ExpectedVersion::Any,
                    events: vec![new],
                }),
            }
        }
        let done = self
            .store
            .transaction(IsolationLevel::ReadCommitted, async |tx| {
                let outcome = tx.append(&request).await?;
                for e in events {
                    apply_grant_row(tx.sql(), tenant.as_str(), e).await?;
                }
                Ok::<_, StoreError>(outcome)
            })
            .await?;
        Ok(done.value)
    }

    /// The statements that make a use, each its guard alone (no event insert around it): for tests
    /// of their plans.
    pub fn use_statements() -> [&'static str; 3] {
        [super::consume::CONSUME, &super::consume::CONSUME_NEXT, &super::remember::CONSUME_REMEMBERED]
    }

    /// The inline row of a grant: (actions_used, chars_used, end_reason).
    pub async fn usage(
        &self,
        tenant: &TenantId,
        grant_id: Uuid,
    ) -> Result<Option<(u32, u32, Option<String>)>, StoreError> {
        let client = self.store.pool().get().await.map_err(unavailable)?;
        let row = client
            .query_opt(
                "SELECT actions_used, chars_used, end_reason FROM active_task_grants \
                 WHERE tenant_id = $1 AND grant_id = $2",
                &[&tenant.as_str(), &grant_id],
            )
            .await
            .map_err(unavailable)?;
        Ok(row.map(|r| {
            let n = |i: usize| u32::try_from(r.get::<_, i32>(i)).unwrap_or(0);
            (n(0), n(1), r.get(2))
        }))
    }
}
