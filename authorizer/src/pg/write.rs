//! Writes of one append: the events, the inline entities they change, the grant rows and the
//! snapshots the run named, all inside the append's transaction.

use deadpool_postgres::Transaction;
use grant_domain::catalogue::{Event, TaskGrantCreated};
use ledger::postgres::Tx;
use ledger::{Metadata, TenantId};

use super::convert::{db, to_json, version};
use crate::domain::ApprovalState;
use crate::error::StoreError;
use crate::state::Writes;

/// Appends what `events` plan and writes the inline state, inside `tx`.
pub(super) async fn write_all(
    tx: &mut Tx<'_>,
    tenant: &TenantId,
    loaded: &crate::store::Loaded,
    metadata: &Metadata,
    events: &[Event],
) -> Result<(), StoreError> {
    let plan = loaded.plan(events, metadata)?;
    // The appends first: a stream another request moved is a conflict before anything else.
    let mut appended = Vec::new();
    for append in &plan.appends {
        appended.push(tx.append(append).await?);
    }
    write(tx.sql(), tenant.as_str(), &plan.write).await?;
    for e in events {
        apply_grant_row(tx.sql(), tenant.as_str(), e).await?;
    }
    for n in &plan.write.snapshots {
        let at = appended
            .iter()
            .find_map(|o| o.events.iter().find(|a| a.event_id == n.event_id).map(|a| (o.tx_id, a.global_position)));
        let Some(at) = at else { continue };
        name_snapshot(tx.sql(), tenant.as_str(), &n.session_id, &n.run_id, &n.snapshot_id, at).await?;
    }
    Ok(())
}

/// Writes the entities an append changed.
async fn write(tx: &Transaction<'_>, tenant: &str, w: &Writes) -> Result<(), StoreError> {
    for s in &w.sessions {
        tx.execute(
            "INSERT INTO authority_sessions (tenant_id, session_id, principal_id, version, state) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, session_id) \
             DO UPDATE SET version = excluded.version, state = excluded.state",
            &[
                &tenant,
                &s.value.created.session_id,
                &s.value.created.principal_id,
                &version(s.version),
                &to_json(&s.value)?,
            ],
        )
        .await
        .map_err(db)?;
    }
    for (id, p) in &w.profiles {
        tx.execute(
            "INSERT INTO authority_profiles (tenant_id, profile_id, version, state) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant_id, profile_id) DO UPDATE SET version = excluded.version, state = excluded.state",
            &[&tenant, id, &version(p.version), &to_json(&p.value)?],
        )
        .await
        .map_err(db)?;
    }
    if let Some(d) = &w.deployment {
        tx.execute(
            "INSERT INTO authority_settings (tenant_id, version, state) VALUES ($1, $2, $3) \
             ON CONFLICT (tenant_id) DO UPDATE SET version = excluded.version, state = excluded.state",
            &[&tenant, &version(d.version), &to_json(&d.value)?],
        )
        .await
        .map_err(db)?;
    }
    for a in &w.approvals {
        let r = &a.value.requested;
        let pending_until = (a.value.state == ApprovalState::Pending).then_some(r.expires_at);
        tx.execute(
            "INSERT INTO authority_approvals (tenant_id, approval_id, session_id, version, state, token_sha256, \
             pending_until) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (tenant_id, approval_id) \
             DO UPDATE SET version = excluded.version, state = excluded.state, token_sha256 = excluded.token_sha256, \
             pending_until = excluded.pending_until",
            &[
                &tenant,
                &r.approval_id,
                &r.session_id,
                &version(a.version),
                &to_json(&a.value)?,
                &a.value.token_sha256,
                &pending_until,
            ],
        )
        .await
        .map_err(db)?;
    }
    Ok(())
}

/// Records that a run named a snapshot at a log position; named again, it keeps the earliest in
/// log order, as a replay does.
pub(super) async fn name_snapshot(
    tx: &Transaction<'_>,
    tenant: &str,
    session: &str,
    run: &str,
    snapshot: &str,
    (tx_id, position): (u64, u64),
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO run_snapshots AS r (tenant_id, session_id, run_id, snapshot_id, tx_id, position) \
         VALUES ($1, $2, $3, $4, $5::text::xid8, $6) ON CONFLICT (tenant_id, session_id, run_id, snapshot_id) \
         DO UPDATE SET tx_id = excluded.tx_id, position = excluded.position \
         WHERE (excluded.tx_id, excluded.position) < (r.tx_id, r.position)",
        &[&tenant, &session, &run, &snapshot, &tx_id.to_string(), &version(position)],
    )
    .await
    .map_err(db)?;
    Ok(())
}

/// Applies a grant's creation or end to its row inside the append's transaction.
pub(super) async fn apply_grant_row(tx: &Transaction<'_>, tenant: &str, event: &Event) -> Result<(), StoreError> {
    match event {
        Event::TaskGrantCreated(TaskGrantCreated {
            grant_id,
            approval_id,
            tenant_id,
            principal_id,
            session_id,
            profile_id,
            profile_generation,
            agent_version,
            policy_version,
            scope,
            created_at,
            expires_at,
            ..
        }) => {
            if tenant_id != tenant {
                return Err(StoreError::Projection(format!("grant {grant_id} names tenant {tenant_id}, not {tenant}")));
            }
            let generation = i64::try_from(*profile_generation).unwrap_or(i64::MAX);
            tx.execute(
                "INSERT INTO active_task_grants (grant_id, tenant_id, principal_id, session_id, profile_id, profile_generation, \
                 agent_version, policy_version, origin, path_prefix, approval_id, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                &[
                    grant_id,
                    tenant_id,
                    principal_id,
                    session_id,
                    profile_id,
                    &generation,
                    agent_version,
                    policy_version,
                    &scope.origin,
                    &scope.path_prefix,
                    approval_id,
                    created_at,
                    expires_at,
                ],
            )
            .await
            .map_err(db)?;
        }
        Event::TaskGrantEnded(e) => {
            let n = tx
                .execute(
                    // The use count the end states must be the row's: a use that committed
                    // after the read makes this contended, and the end is decided again.
                    "UPDATE active_task_grants SET ended_at = now(), end_reason = $3 \
                     WHERE tenant_id = $1 AND grant_id = $2 AND ended_at IS NULL \
                       AND ($4::integer IS NULL OR actions_used = $4)",
                    &[&tenant, &e.grant_id, &e.reason.code(), &e.uses.map(|u| i32::try_from(u).unwrap_or(i32::MAX))],
                )
                .await
                .map_err(db)?;
            if n != 1 {
                // Another request ended it after this one read it: decide again.
                return Err(StoreError::Contended(format!("grant {} already ended", e.grant_id)));
            }
        }
        _ => {}
    }
    Ok(())
}
