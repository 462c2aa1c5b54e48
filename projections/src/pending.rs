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
