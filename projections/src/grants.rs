//! The task-grant list behind the owner's routes: status, actions and characters used, expiry,
//! end reason. One pure step per event ([`change`]) drives both the table and the replay.

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
    /// created_at, expires_at, actions_used, chars_used, end_reason`: from `grant_list` or from
    /// the authorizer's inline `active_task_grants`.
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

/// Writes `events`' rows into `table` (the live table or a rebuild's next one), inside `tx`.
pub(crate) async fn apply(
    tx: &tokio_postgres::Transaction<'_>,
    table: &str,
    events: &[ledger::RecordedEvent],
) -> Result<(), crate::Error> {
    // The batch folded first: grants created in it are inserted whole; the others get
    // one update each with their summed uses and their end.
    let mut created = std::collections::BTreeMap::new();
    let mut deltas: std::collections::BTreeMap<(String, uuid::Uuid), (i32, i32, Option<String>)> =
        std::collections::BTreeMap::new();
    for e in events {
        match change(e)? {
            Some(Change::Created(r)) => {
                created.insert((r.tenant_id.clone(), r.grant_id), r);
            }
            Some(Change::Used { tenant_id, grant_id, chars }) => {
                match created.get_mut(&(tenant_id.clone(), grant_id)) {
                    Some(r) => {
                        r.actions_used += 1;
                        r.chars_used += chars;
                    }
                    None => {
                        let d = deltas.entry((tenant_id, grant_id)).or_default();
                        d.0 += 1;
                        d.1 += i32::try_from(chars).unwrap_or(i32::MAX);
                    }
                }
            }
            Some(Change::Ended { tenant_id, grant_id, reason }) => {
                match created.get_mut(&(tenant_id.clone(), grant_id)) {
                    Some(r) => r.end_reason = Some(reason),
                    None => deltas.entry((tenant_id, grant_id)).or_default().2 = Some(reason),
                }
            }
            None => {}
        }
    }
    if !created.is_empty() {
        let rows: Vec<&GrantRow> = created.values().collect();
        let text = |f: &dyn Fn(&GrantRow) -> String| rows.iter().map(|r| f(r)).collect::<Vec<_>>();
        let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.grant_id).collect();
        let created_at: Vec<OffsetDateTime> = rows.iter().map(|r| r.created_at).collect();
        let expires_at: Vec<OffsetDateTime> = rows.iter().map(|r| r.expires_at).collect();
        let used: Vec<i32> = rows.iter().map(|r| i32::try_from(r.actions_used).unwrap_or(i32::MAX)).collect();
        let chars: Vec<i32> = rows.iter().map(|r| i32::try_from(r.chars_used).unwrap_or(i32::MAX)).collect();
        let ends: Vec<Option<String>> = rows.iter().map(|r| r.end_reason.clone()).collect();
        tx.execute(
            &format!(
                "INSERT INTO {table} (tenant_id, grant_id, principal_id, session_id, origin, path_prefix, \
                     created_at, expires_at, actions_used, chars_used, end_reason) \
                     SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::text[], $5::text[], \
                     $6::text[], $7::timestamptz[], $8::timestamptz[], $9::int4[], $10::int4[], $11::text[])"
            ),
            &[
                &text(&|r| r.tenant_id.clone()),
                &ids,
                &text(&|r| r.principal_id.clone()),
                &text(&|r| r.session_id.clone()),
                &text(&|r| r.origin.clone()),
                &text(&|r| r.path_prefix.clone()),
                &created_at,
                &expires_at,
                &used,
                &chars,
                &ends,
            ],
        )
        .await?;
    }
    if !deltas.is_empty() {
        let tenants: Vec<&str> = deltas.keys().map(|(t, _)| t.as_str()).collect();
        let ids: Vec<uuid::Uuid> = deltas.keys().map(|(_, g)| *g).collect();
        let used: Vec<i32> = deltas.values().map(|d| d.0).collect();
        let chars: Vec<i32> = deltas.values().map(|d| d.1).collect();
        let ends: Vec<Option<&str>> = deltas.values().map(|d| d.2.as_deref()).collect();
        tx.execute(
            &format!(
                "UPDATE {table} g SET actions_used = g.actions_used + d.n, chars_used = g.chars_used + d.c, \
                     end_reason = COALESCE(d.r, g.end_reason) \
                     FROM unnest($1::text[], $2::uuid[], $3::int4[], $4::int4[], $5::text[]) AS d(t, id, n, c, r) \
                     WHERE g.tenant_id = d.t AND g.grant_id = d.id"
            ),
            &[&tenants, &ids, &used, &chars, &ends],
        )
        .await?;
    }
    Ok(())
}
