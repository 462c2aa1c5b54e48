//! The projections themselves: their names, locks and privileges, and each one's apply, replay
//! and read, dispatched to its own module.

use ledger::RecordedEvent;
use tokio_postgres::{GenericClient, Transaction};

use crate::audit;
use crate::cells::Cells;
use crate::error::Error;

/// The async projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Projection {
    AuditLog,
}

impl Projection {
    pub const ALL: [Self; 1] = [Self::AuditLog];

    /// Its name, which is also its table's.
    pub fn name(self) -> &'static str {
        match self {
            Self::AuditLog => audit::TABLE,
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The version of its code: a stored checkpoint of another version is stale.
    pub fn version(self) -> i32 {
        1
    }

    /// Views over its table, re-pointed at the new generation when a rebuild swaps it in (a view
    /// follows the table it was made on, which the swap drops).
    pub(crate) fn views_sql(self) -> &'static str {
        match self {
            Self::AuditLog => {
                "CREATE OR REPLACE VIEW session_activity AS \
                 SELECT tenant_id, session_id, global_position, recorded_at, event_type, authorization_text, summary \
                 FROM audit_log WHERE session_id IS NOT NULL; \
                 GRANT SELECT ON session_activity TO grant_ledger_service;"
            }
        }
    }

    /// What the service role may do to its table (a rebuild grants the new generation the same).
    pub(crate) fn privileges(self) -> &'static str {
        match self {
            Self::AuditLog => "SELECT, INSERT",
        }
    }

    /// The advisory lock its leader holds.
    pub(crate) fn lock_key(self) -> i64 {
        0x676c_7072_0000 + i64::from(self.index())
    }

    /// The advisory lock one rebuild of it holds, so two rebuilds never share its next table.
    pub(crate) fn rebuild_lock_key(self) -> i64 {
        0x676c_7262_0000 + i64::from(self.index())
    }

    /// Its place in the lock keys. 2 and 3 were the retired `grant_list` and `pending_approvals`:
    /// never reuse them, so an old worker still running can never hold a new projection's lock.
    fn index(self) -> u8 {
        match self {
            Self::AuditLog => 1,
        }
    }

    /// Writes what `events` do to this projection's table, inside `tx`.
    pub async fn apply(self, tx: &Transaction<'_>, events: &[RecordedEvent]) -> Result<(), Error> {
        self.apply_to(tx, self.name(), events).await
    }

    /// [`Projection::apply`] into `table`: the live table, or the next generation a rebuild fills.
    /// Each projection's statements are its own module's.
    pub(crate) async fn apply_to(
        self,
        tx: &Transaction<'_>,
        table: &str,
        events: &[RecordedEvent],
    ) -> Result<(), Error> {
        match self {
            Self::AuditLog => audit::apply(tx, table, events).await,
        }
    }

    /// The rows `events` make, folded in memory, in key order.
    pub fn replay(self, events: &[RecordedEvent]) -> Result<Vec<Cells>, Error> {
        Ok(match self {
            Self::AuditLog => {
                let mut rows = events.iter().map(audit::row).collect::<Result<Vec<_>, _>>()?;
                rows.sort_by(|a, b| (&a.tenant_id, a.global_position).cmp(&(&b.tenant_id, b.global_position)));
                rows.iter().map(audit::AuditRow::cells).collect()
            }
        })
    }

    /// The table's rows, in key order, as the same cells.
    pub async fn read(self, client: &impl GenericClient) -> Result<Vec<Cells>, Error> {
        Ok(match self {
            Self::AuditLog => {
                let rows = client
                    .query(
                        "SELECT tenant_id, global_position, tx_id::text, recorded_at, stream_id, event_type, principal, \
                         session_id, grant_id, approval_id, authorization_text, summary FROM audit_log \
                         ORDER BY audit_log.tenant_id COLLATE \"C\", audit_log.global_position",
                        &[],
                    )
                    .await?;
                rows.iter()
                    .map(|r| {
                        audit::AuditRow {
                            tenant_id: r.get(0),
                            global_position: u64::try_from(r.get::<_, i64>(1)).unwrap_or_default(),
                            tx_id: r.get::<_, &str>(2).parse().unwrap_or_default(),
                            recorded_at: r.get(3),
                            stream_id: r.get(4),
                            event_type: r.get(5),
                            principal: r.get(6),
                            session_id: r.get(7),
                            grant_id: r.get(8),
                            approval_id: r.get(9),
                            authorization: r.get(10),
                            summary: r.get(11),
                        }
                        .cells()
                    })
                    .collect()
            }
        })
    }
}
