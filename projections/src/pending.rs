//! Approvals still waiting for the owner, per session: in on `approval.requested`, out on its
//! resolution or expiry.

use std::collections::BTreeMap;

use grant_domain::catalogue::DecodeError;
use grant_domain::catalogue::Event;
use ledger::RecordedEvent;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Cells, text_time};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRow {
    pub tenant_id: String,
    pub approval_id: Uuid,
    pub session_id: String,
    pub requested_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
    pub summary: String,
}

impl PendingRow {
    pub fn cells(&self) -> Cells {
        vec![
            self.tenant_id.clone(),
            self.approval_id.to_string(),
            self.session_id.clone(),
            text_time(self.requested_at),
            text_time(self.expires_at),
            self.summary.clone(),
        ]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Asked(PendingRow),
    Answered { tenant_id: String, approval_id: Uuid },
}

pub fn change(recorded: &RecordedEvent) -> Result<Option<Change>, DecodeError> {
    let tenant_id = recorded.tenant_id.as_str().to_owned();
    Ok(match Event::from_recorded(recorded)? {
        Event::ApprovalRequested(e) => Some(Change::Asked(PendingRow {
            tenant_id,
            approval_id: e.approval_id,
            session_id: e.session_id,
            requested_at: recorded.recorded_at,
            expires_at: e.expires_at,
            summary: e.view.action_summary,
        })),
        Event::ApprovalResolved(e) => Some(Change::Answered { tenant_id, approval_id: e.approval_id }),
        Event::ApprovalExpired(e) => Some(Change::Answered { tenant_id, approval_id: e.approval_id }),
        _ => None,
    })
}

/// The pending approvals after `events`, keyed as the table is.
pub fn replay(events: &[RecordedEvent]) -> Result<BTreeMap<(String, Uuid), PendingRow>, DecodeError> {
    let mut rows = BTreeMap::new();
    for e in events {
        match change(e)? {
            Some(Change::Asked(r)) => {
                rows.insert((r.tenant_id.clone(), r.approval_id), r);
            }
            Some(Change::Answered { tenant_id, approval_id }) => {
                rows.remove(&(tenant_id, approval_id));
            }
            None => {}
        }
    }
    Ok(rows)
}

/// Writes `events`' rows into `table` (the live table or a rebuild's next one), inside `tx`.
pub(crate) async fn apply(
    tx: &tokio_postgres::Transaction<'_>,
    table: &str,
    events: &[ledger::RecordedEvent],
) -> Result<(), crate::Error> {
    // The batch folded first: what was asked and answered within it never lands.
    let mut asked = std::collections::BTreeMap::new();
    let mut answered = Vec::new();
    for e in events {
        match change(e)? {
            Some(Change::Asked(r)) => {
                asked.insert((r.tenant_id.clone(), r.approval_id), r);
            }
            Some(Change::Answered { tenant_id, approval_id })
                if asked.remove(&(tenant_id.clone(), approval_id)).is_none() =>
            {
                answered.push((tenant_id, approval_id));
            }
            // Asked and answered within this batch: it never lands.
            Some(Change::Answered { .. }) | None => {}
        }
    }
    if !asked.is_empty() {
        let rows: Vec<&PendingRow> = asked.values().collect();
        let tenants: Vec<&str> = rows.iter().map(|r| r.tenant_id.as_str()).collect();
        let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.approval_id).collect();
        let sessions: Vec<&str> = rows.iter().map(|r| r.session_id.as_str()).collect();
        let requested: Vec<OffsetDateTime> = rows.iter().map(|r| r.requested_at).collect();
        let expires: Vec<OffsetDateTime> = rows.iter().map(|r| r.expires_at).collect();
        let summaries: Vec<&str> = rows.iter().map(|r| r.summary.as_str()).collect();
        tx.execute(
            &format!(
                "INSERT INTO {table} (tenant_id, approval_id, session_id, requested_at, expires_at, summary) \
                     SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::timestamptz[], \
                     $5::timestamptz[], $6::text[])"
            ),
            &[&tenants, &ids, &sessions, &requested, &expires, &summaries],
        )
        .await?;
    }
    if !answered.is_empty() {
        let tenants: Vec<&str> = answered.iter().map(|(t, _)| t.as_str()).collect();
        let ids: Vec<uuid::Uuid> = answered.iter().map(|(_, a)| *a).collect();
        tx.execute(
            &format!(
                "DELETE FROM {table} p USING unnest($1::text[], $2::uuid[]) AS d(t, id) \
                     WHERE p.tenant_id = d.t AND p.approval_id = d.id"
            ),
            &[&tenants, &ids],
        )
        .await?;
    }
    Ok(())
}
