//! Every task grant as the log says it is: actions and characters used, expiry, end reason. One
//! pure step per event ([`change`]); `verify` holds the authorizer's inline `active_task_grants`
//! to its replay. The owner's routes read that inline table, through the authorizer.

use std::collections::BTreeMap;

use grant_domain::catalogue::DecodeError;
use grant_domain::catalogue::{AuthorizationKind, Event};
use ledger::RecordedEvent;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Cells, text_time};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRow {
    pub tenant_id: String,
    pub grant_id: Uuid,
    pub principal_id: String,
    pub session_id: String,
    pub origin: String,
    pub path_prefix: String,
    pub created_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
    pub actions_used: u32,
    pub chars_used: u32,
    pub end_reason: Option<String>,
}

impl GrantRow {
    /// A row selected as `tenant_id, grant_id, principal_id, session_id, origin, path_prefix,
    /// created_at, expires_at, actions_used, chars_used, end_reason`: from the authorizer's
    /// inline `active_task_grants`.
    pub fn from_row(r: &tokio_postgres::Row) -> Self {
        Self {
            tenant_id: r.get(0),
            grant_id: r.get(1),
            principal_id: r.get(2),
            session_id: r.get(3),
            origin: r.get(4),
            path_prefix: r.get(5),
            created_at: r.get(6),
            expires_at: r.get(7),
            actions_used: u32::try_from(r.get::<_, i32>(8)).unwrap_or_default(),
            chars_used: u32::try_from(r.get::<_, i32>(9)).unwrap_or_default(),
            end_reason: r.get(10),
        }
    }

    pub fn cells(&self) -> Cells {
        vec![
            self.tenant_id.clone(),
            self.grant_id.to_string(),
            self.principal_id.clone(),
            self.session_id.clone(),
            self.origin.clone(),
            self.path_prefix.clone(),
            text_time(self.created_at),
            text_time(self.expires_at),
            self.actions_used.to_string(),
            self.chars_used.to_string(),
            self.end_reason.clone().unwrap_or_default(),
        ]
    }
}

/// What one event does to the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Created(GrantRow),
    Used { tenant_id: String, grant_id: Uuid, chars: u32 },
    Ended { tenant_id: String, grant_id: Uuid, reason: String },
}

pub fn change(recorded: &RecordedEvent) -> Result<Option<Change>, DecodeError> {
    let tenant_id = recorded.tenant_id.as_str().to_owned();
    Ok(match Event::from_recorded(recorded)? {
        Event::TaskGrantCreated(e) => Some(Change::Created(GrantRow {
            tenant_id,
            grant_id: e.grant_id,
            principal_id: e.principal_id,
            session_id: e.session_id,
            origin: e.scope.origin,
            path_prefix: e.scope.path_prefix,
            created_at: e.created_at,
            expires_at: e.expires_at,
            actions_used: 0,
            chars_used: 0,
            end_reason: None,
        })),
        Event::ToolCallAuthorized(e) => match (e.authorization_kind, e.grant_id) {
            (AuthorizationKind::BrowserTaskGrant, Some(grant_id)) => {
                Some(Change::Used { tenant_id, grant_id, chars: e.typed_chars })
            }
            _ => None,
        },
        Event::TaskGrantEnded(e) => {
            Some(Change::Ended { tenant_id, grant_id: e.grant_id, reason: e.reason.code().to_owned() })
        }
        _ => None,
    })
}

/// The list folded in memory, keyed as the table is.
pub fn replay(events: &[RecordedEvent]) -> Result<BTreeMap<(String, Uuid), GrantRow>, DecodeError> {
    let mut rows = BTreeMap::new();
    for e in events {
        match change(e)? {
            Some(Change::Created(row)) => {
                rows.insert((row.tenant_id.clone(), row.grant_id), row);
            }
            Some(Change::Used { tenant_id, grant_id, chars }) => {
                if let Some(r) = rows.get_mut(&(tenant_id, grant_id)) {
                    r.actions_used += 1;
                    r.chars_used += chars;
                }
            }
            Some(Change::Ended { tenant_id, grant_id, reason }) => {
                if let Some(r) = rows.get_mut(&(tenant_id, grant_id)) {
                    r.end_reason = Some(reason);
                }
            }
            None => {}
        }
    }
    Ok(rows)
}
