//! Reads of the inline state: the one-statement read of an authorization (`Prefetched`) and
//! a transaction's reads (`PgReader`), both served to `state::load`.

use deadpool_postgres::Transaction;
use grant_domain::catalogue::{EndReason, SiteScope, TaskGrantCreated};
use ledger::{PgStore, TenantId};
use uuid::Uuid;

use super::convert::{db, from_version, json};
use crate::domain::{Approval, Grant, Profile, RunSnapshots, Session};
use crate::error::StoreError;
use crate::limits::{MAX_ACTIONS, MAX_TYPED_CHARS};
use crate::state::grant_version;
use crate::store::{Approvals, Deployment, Grants, Reader, Versioned};

pub(super) const GRANT_COLUMNS: &str = "grant_id, approval_id, tenant_id, principal_id, session_id, profile_id, \
     profile_generation, agent_version, policy_version, origin, path_prefix, created_at, expires_at, \
     actions_used, chars_used, end_reason";

pub(super) fn grant_from_row(r: &tokio_postgres::Row) -> Result<Grant, StoreError> {
    grant_at(r, 0)
}

/// A grant from the row's columns `at..at + 16`, in [`GRANT_COLUMNS`] order.
fn grant_at(r: &tokio_postgres::Row, at: usize) -> Result<Grant, StoreError> {
    let n = |i: usize| u32::try_from(r.get::<_, i32>(at + i)).unwrap_or(0);
    let ended = r
        .get::<_, Option<String>>(at + 15)
        .map(|code| {
            EndReason::from_code(&code)
                .ok_or_else(|| StoreError::Projection(format!("a grant row's end reason {code:?} is none")))
        })
        .transpose()?;
    Ok(Grant {
        created: TaskGrantCreated {
            grant_id: r.get(at),
            approval_id: r.get(at + 1),
            tenant_id: r.get(at + 2),
            principal_id: r.get(at + 3),
            session_id: r.get(at + 4),
            profile_id: r.get(at + 5),
            profile_generation: from_version(r.get(at + 6)),
            agent_version: r.get(at + 7),
            policy_version: r.get(at + 8),
            scope: SiteScope { origin: r.get(at + 9), path_prefix: r.get(at + 10) },
            created_at: r.get(at + 11),
            expires_at: r.get(at + 12),
            max_actions: MAX_ACTIONS,
            max_typed_chars: MAX_TYPED_CHARS,
        },
        actions_used: n(13),
        chars_used: n(14),
        ended,
    })
}

/// What an authorization reads, fetched in one statement, served to `state::load`. Anything
/// else asked of it is an error, never an empty answer.
#[derive(Debug, Default)]
pub(super) struct Prefetched {
    session: Option<Versioned<Session>>,
    profiles: Vec<(String, Versioned<Profile>)>,
    deployment: Option<Versioned<Deployment>>,
    grant: Option<Grant>,
}

/// Everything an authorization reads, in one statement: built once, since it is on every call.
/// The active grant's stream head comes along, so its next use can be appended without reading
/// it (see `PgGrants::consume`). With `$3`, a credential a replica recognised from memory, the
/// last column says whether it is still live (the credentials table is in the same database), so
/// a revocation holds at the next call without a lookup of its own on every call.
static AUTHORIZE_READ: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let grant_columns: Vec<String> = GRANT_COLUMNS.split(',').map(|c| format!("g.{}", c.trim())).collect();
    format!(
        "SELECT s.version, s.state, d.version, d.state, ps.profile_id, ps.version, ps.state, \
         gp.profile_id, gp.version, gp.state, {}, gh.stream_version, gh.hash, gh.tenant_id, \
         $3::uuid IS NULL OR (c.credential_id IS NOT NULL AND c.revoked_at IS NULL \
           AND (c.expires_at IS NULL OR c.expires_at > clock_timestamp())) \
         FROM (VALUES (1)) AS one(x) \
         LEFT JOIN credentials c ON c.credential_id = $3 AND c.tenant_id = $1 \
         LEFT JOIN authority_sessions s ON s.tenant_id = $1 AND s.session_id = $2 \
         LEFT JOIN authority_settings d ON d.tenant_id = $1 AND d.version > 0 \
         LEFT JOIN active_task_grants g ON g.tenant_id = $1 AND g.session_id = $2 AND g.ended_at IS NULL \
         LEFT JOIN LATERAL (SELECT e.stream_version, e.hash, e.tenant_id FROM events e \
           WHERE e.stream_id = {} \
           ORDER BY e.stream_version DESC LIMIT 1) gh ON true \
         LEFT JOIN authority_profiles ps ON ps.tenant_id = $1 AND ps.version > 0 \
           AND ps.profile_id = s.state->'created'->>'browser_profile_id' \
         LEFT JOIN authority_profiles gp ON gp.tenant_id = $1 AND gp.version > 0 AND gp.profile_id = g.profile_id",
        grant_columns.join(", "),
        ledger::entity_stream_sql("'grant'", "$1", "g.grant_id::text"),
    )
});

impl Prefetched {
    pub(super) async fn authorize(
        client: &deadpool_postgres::Object,
        store: &PgStore,
        tenant: &TenantId,
        session: &str,
        credential: Option<Uuid>,
    ) -> Result<Self, StoreError> {
        let stmt = client.prepare_cached(&AUTHORIZE_READ).await.map_err(db)?;
        let r = client.query_one(&stmt, &[&tenant.as_str(), &session, &credential]).await.map_err(db)?;
        if !r.get::<_, bool>(29) {
            return Err(StoreError::CallerRefused);
        }
        let versioned = |v: usize| -> Result<Option<(u64, serde_json::Value)>, StoreError> {
            Ok(r.get::<_, Option<i64>>(v).map(|version| (from_version(version), r.get(v + 1))))
        };
        let mut out = Self::default();
        if let Some((version, state)) = versioned(0)? {
            out.session = Some(Versioned { value: json(state)?, version });
        }
        if let Some((version, state)) = versioned(2)? {
            out.deployment = Some(Versioned { value: json(state)?, version });
        }
        for at in [4, 7] {
            if let Some(id) = r.get::<_, Option<String>>(at) {
                let (version, state) = versioned(at + 1)?.unwrap_or_default();
                out.profiles.push((id, Versioned { value: json(state)?, version }));
            }
        }
        if r.get::<_, Option<Uuid>>(10).is_some() {
            let grant = grant_at(&r, 10)?;
            let head = (r.get::<_, Option<i64>>(26), r.get::<_, Option<Vec<u8>>>(27), r.get::<_, Option<&str>>(28));
            // Only a head that is the active grant's own version is noted.
            if let (Some(v), Some(hash), Some(of)) = head
                && let Ok(hash) = <[u8; 32]>::try_from(hash)
                && of == tenant.as_str()
                && from_version(v) == grant_version(&grant)
            {
                let stream = crate::domain::entity_stream(tenant, "grant", &grant.created.grant_id)?;
                store.note_head(stream, from_version(v), hash, tenant.clone());
            }
            out.grant = Some(grant);
        }
        Ok(out)
    }

    fn not_fetched(what: &str) -> StoreError {
        StoreError::Projection(format!("an authorization read {what}, which its one statement does not fetch"))
    }
}

impl Reader for Prefetched {
    async fn sessions(&mut self, ids: &[&str]) -> Result<Vec<Versioned<Session>>, StoreError> {
        Ok(self.session.iter().filter(|s| ids.contains(&s.value.created.session_id.as_str())).cloned().collect())
    }

    async fn profile(&mut self, id: &str) -> Result<Versioned<Profile>, StoreError> {
        let found = self.profiles.iter().find(|(p, _)| p == id).map(|(_, v)| v.clone());
        Ok(found.unwrap_or(Versioned { value: Profile::default(), version: 0 }))
    }

    async fn deployment(&mut self) -> Result<Versioned<Deployment>, StoreError> {
        Ok(self.deployment.clone().unwrap_or(Versioned { value: Deployment::default(), version: 0 }))
    }

    async fn approvals(&mut self, _: Approvals<'_>) -> Result<Vec<Versioned<Approval>>, StoreError> {
        Err(Self::not_fetched("approvals"))
    }

    async fn grants(&mut self, which: Grants<'_>) -> Result<Vec<Grant>, StoreError> {
        match which {
            Grants::ActiveOfSession(s) => {
                Ok(self.grant.iter().filter(|g| g.created.session_id == s).cloned().collect())
            }
            _ => Err(Self::not_fetched("grants other than the session's active one")),
        }
    }

    async fn run(&mut self, _: &str, _: &str) -> Result<RunSnapshots, StoreError> {
        Err(Self::not_fetched("a run's snapshots"))
    }

    async fn sessions_to_stop(&mut self, _: &str, _: usize) -> Result<Vec<String>, StoreError> {
        Err(Self::not_fetched("a principal's sessions"))
    }

    async fn open_tasks(&mut self, _: &str, _: time::OffsetDateTime, _: usize) -> Result<Vec<String>, StoreError> {
        Err(Self::not_fetched("the open tasks"))
    }

    async fn chats(&mut self, _: &str, _: usize) -> Result<Vec<String>, StoreError> {
        Err(Self::not_fetched("a principal's chats"))
    }
}

/// One request's reads, inside its transaction; `FOR UPDATE` when the request writes, so two
/// replicas deciding on the same rows take turns.
pub(super) struct PgReader<'a> {
    pub(super) tx: &'a Transaction<'a>,
    pub(super) tenant: &'a str,
    pub(super) lock: bool,
}

impl PgReader<'_> {
    fn locking(&self) -> &'static str {
        if self.lock { " FOR UPDATE" } else { "" }
    }

    /// With `lock`, a placeholder row at version 0 is made first so that there is a row to lock
    /// even before the first event (two first sign-ins then take turns, too).
    async fn defaulted(
        &self,
        table: &str,
        key: &str,
        id: Option<&str>,
    ) -> Result<Option<(u64, serde_json::Value)>, StoreError> {
        let (cols, args): (&str, Vec<&(dyn tokio_postgres::types::ToSql + Sync)>) = match &id {
            Some(id) => (", $2", vec![&self.tenant, id]),
            None => ("", vec![&self.tenant]),
        };
        let key_cols = if id.is_some() { format!("tenant_id, {key}") } else { "tenant_id".into() };
        if self.lock {
            let sql = format!(
                "INSERT INTO {table} ({key_cols}, version, state) VALUES ($1{cols}, 0, 'null') ON CONFLICT DO NOTHING"
            );
            self.tx.execute(&sql, &args).await.map_err(db)?;
        }
        let filter = if id.is_some() { format!(" AND {key} = $2") } else { String::new() };
        let sql = format!("SELECT version, state FROM {table} WHERE tenant_id = $1{filter}{}", self.locking());
        let row = self.tx.query_opt(&sql, &args).await.map_err(db)?;
        Ok(row.map(|r| (from_version(r.get(0)), r.get(1))).filter(|(v, _)| *v > 0))
    }
}

impl Reader for PgReader<'_> {
    async fn sessions(&mut self, ids: &[&str]) -> Result<Vec<Versioned<Session>>, StoreError> {
        let sql = format!(
            "SELECT version, state FROM authority_sessions WHERE tenant_id = $1 AND session_id = ANY($2) \
             ORDER BY session_id{}",
            self.locking()
        );
        let rows = self.tx.query(&sql, &[&self.tenant, &ids]).await.map_err(db)?;
        rows.iter().map(|r| Ok(Versioned { version: from_version(r.get(0)), value: json(r.get(1))? })).collect()
    }

    async fn profile(&mut self, id: &str) -> Result<Versioned<Profile>, StoreError> {
        Ok(match self.defaulted("authority_profiles", "profile_id", Some(id)).await? {
            Some((version, state)) => Versioned { value: json(state)?, version },
            None => Versioned { value: Profile::default(), version: 0 },
        })
    }

    async fn deployment(&mut self) -> Result<Versioned<Deployment>, StoreError> {
        Ok(match self.defaulted("authority_settings", "", None).await? {
            Some((version, state)) => Versioned { value: json(state)?, version },
            None => Versioned { value: Deployment::default(), version: 0 },
        })
    }

    async fn approvals(&mut self, which: Approvals<'_>) -> Result<Vec<Versioned<Approval>>, StoreError> {
        let base = "SELECT version, state FROM authority_approvals WHERE tenant_id = $1";
        let lock = self.locking();
        let rows = match which {
            Approvals::Id(id) => {
                self.tx.query(&format!("{base} AND approval_id = $2{lock}"), &[&self.tenant, &id]).await
            }
            Approvals::Token(sha) => {
                self.tx.query(&format!("{base} AND token_sha256 = $2{lock}"), &[&self.tenant, &sha]).await
            }
            Approvals::OfSession(session) => {
                self.tx
                    .query(&format!("{base} AND session_id = $2 ORDER BY approval_id{lock}"), &[&self.tenant, &session])
                    .await
            }
            Approvals::PendingOfSession(session) => {
                let pending = "AND session_id = $2 AND pending_until IS NOT NULL ORDER BY approval_id";
                self.tx.query(&format!("{base} {pending}{lock}"), &[&self.tenant, &session]).await
            }
            Approvals::DueBy(now) => {
                self.tx
                    .query(&format!("{base} AND pending_until <= $2 ORDER BY approval_id{lock}"), &[&self.tenant, &now])
                    .await
            }
        }
        .map_err(db)?;
        rows.iter().map(|r| Ok(Versioned { version: from_version(r.get(0)), value: json(r.get(1))? })).collect()
    }

    async fn grants(&mut self, which: Grants<'_>) -> Result<Vec<Grant>, StoreError> {
        let base = format!("SELECT {GRANT_COLUMNS} FROM active_task_grants WHERE tenant_id = $1");
        let lock = self.locking();
        let t = &self.tenant;
        let rows = match which {
            Grants::Id(id) => self.tx.query(&format!("{base} AND grant_id = $2{lock}"), &[t, &id]).await,
            Grants::ActiveOfSession(s) => {
                self.tx.query(&format!("{base} AND session_id = $2 AND ended_at IS NULL{lock}"), &[t, &s]).await
            }
            Grants::ActiveOnProfile(p) => {
                let sql = format!("{base} AND profile_id = $2 AND ended_at IS NULL ORDER BY grant_id{lock}");
                self.tx.query(&sql, &[t, &p]).await
            }
            Grants::Active => {
                self.tx.query(&format!("{base} AND ended_at IS NULL ORDER BY grant_id{lock}"), &[t]).await
            }
            Grants::DueBy(now) => {
                let sql = format!("{base} AND ended_at IS NULL AND expires_at <= $2 ORDER BY grant_id{lock}");
                self.tx.query(&sql, &[t, &now]).await
            }
            Grants::OfPrincipal(p) => self.tx.query(&format!("{base} AND principal_id = $2{lock}"), &[t, &p]).await,
        }
        .map_err(db)?;
        rows.iter().map(grant_from_row).collect()
    }

    async fn sessions_to_stop(&mut self, principal: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .tx
            .query(
                "SELECT session_id FROM authority_sessions WHERE tenant_id = $1 AND principal_id = $2 \
                 AND NOT coalesce((state->>'deleted')::boolean, false) \
                 AND NOT coalesce((state->>'stopped')::boolean, false) \
                 ORDER BY session_id LIMIT $3",
                &[&self.tenant, &principal, &limit],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn chats(&mut self, principal: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .tx
            .query(
                "SELECT session_id FROM authority_sessions WHERE tenant_id = $1 AND principal_id = $2 \
                 AND NOT coalesce((state->>'deleted')::boolean, false) ORDER BY session_id LIMIT $3",
                &[&self.tenant, &principal, &limit],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn open_tasks(
        &mut self,
        principal: &str,
        now: time::OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // A task another replica is taking right now is skipped, not waited for: it takes the
        // next one instead.
        let skip = if self.lock { " FOR UPDATE SKIP LOCKED" } else { "" };
        let sql = format!(
            "SELECT session_id FROM authority_sessions WHERE tenant_id = $1 AND principal_id = $4 \
             AND state->'task'->>'ended' = 'false' \
             AND NOT coalesce((state->>'deleted')::boolean, false) \
             AND NOT coalesce((state->>'stopped')::boolean, false) \
             AND (state->'task'->>'lease_until' IS NULL OR (state->'task'->>'lease_until')::timestamptz <= $2) \
             ORDER BY authority_sessions.session_id LIMIT $3{skip}"
        );
        let rows = self.tx.query(&sql, &[&self.tenant, &now, &limit, &principal]).await.map_err(db)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    async fn run(&mut self, session: &str, run: &str) -> Result<RunSnapshots, StoreError> {
        let rows = self
            .tx
            .query(
                "SELECT snapshot_id FROM run_snapshots WHERE tenant_id = $1 AND session_id = $2 AND run_id = $3 \
                 ORDER BY tx_id, position",
                &[&self.tenant, &session, &run],
            )
            .await
            .map_err(db)?;
        let mut snapshots = RunSnapshots::default();
        for r in &rows {
            snapshots.named(r.get(0));
        }
        Ok(snapshots)
    }
}
