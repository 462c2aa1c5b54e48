//! An allow in one statement: the replica remembers each session's last authorization read, a
//! next call decides on it, and the use is made by a statement that holds every version that read
//! was at (the session, the settings, each profile, the grant's count) and the caller's
//! credential. Anything moved since: no use, and the call decides again on a fresh read. The
//! memory saves a round trip and is never final: every input of the decision is checked again
//! by the statement that makes the use, at that statement's snapshot.

use std::sync::{Arc, LazyLock};

use grant_domain::catalogue::Event;
use ledger::{Metadata, TenantId};
use uuid::Uuid;

use super::consume::{CONSUME_NEXT_UPDATE, OneStatement, name_snapshot_appended};
use super::convert::version;
use super::grants::PgGrants;
use super::reads::Used;
use crate::error::StoreError;
use crate::limits::{MAX_ACTIONS, MAX_TYPED_CHARS};
use crate::store::{Consumed, Loaded, UseOf};

/// What a remembered read must still hold for its allow to be used, beyond `CONSUME_NEXT`'s
/// own guards (the session row at its version, the grant's count, its end and expiry): the
/// caller's credential live (`$9`), the settings at the version read (`$10`), and each profile
/// read at its version (`$11`/`$12`, `$13`/`$14`). A stream never written reads as version 0.
const STILL_AS_READ: &str = "($9::uuid IS NULL OR EXISTS (SELECT 1 FROM credentials c \
       WHERE c.credential_id = $9 AND c.tenant_id = $6 AND c.revoked_at IS NULL \
       AND (c.expires_at IS NULL OR c.expires_at > clock_timestamp()))) \
     AND COALESCE((SELECT d.version FROM authority_settings d WHERE d.tenant_id = $6 AND d.version > 0), 0) = $10 \
     AND ($11::text IS NULL OR COALESCE((SELECT p.version FROM authority_profiles p \
       WHERE p.tenant_id = $6 AND p.profile_id = $11 AND p.version > 0), 0) = $12) \
     AND ($13::text IS NULL OR COALESCE((SELECT p.version FROM authority_profiles p \
       WHERE p.tenant_id = $6 AND p.profile_id = $13 AND p.version > 0), 0) = $14)";

/// `CONSUME_NEXT` with [`STILL_AS_READ`] added to its conditions.
pub(super) static CONSUME_REMEMBERED: LazyLock<String> =
    LazyLock::new(|| format!("{CONSUME_NEXT_UPDATE} AND {STILL_AS_READ} RETURNING actions_used"));

/// The snapshot a remembered use names, after [`CONSUME_REMEMBERED`]'s fourteen parameters.
static NAME_SNAPSHOT_REMEMBERED: LazyLock<String> = LazyLock::new(|| name_snapshot_appended(15));

impl PgGrants {
    /// What this replica last read for an authorization in `session`.
    pub fn remembered(&self, tenant: &TenantId, session: &str) -> Option<Arc<Loaded>> {
        self.reads.get(tenant, session)
    }

    /// How many uses this process made on a remembered read (operators and tests).
    pub fn remembered_uses(&self) -> u64 {
        self.remembered_uses.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many tries on a remembered read this process found moved and refused.
    pub fn remembered_refusals(&self) -> u64 {
        self.remembered_refusals.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn refused(&self, tenant: &TenantId, session: &str) {
        self.remembered_refusals.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.reads.refused(tenant, session);
    }

    /// The use of an allow decided on `read`, in one statement that holds what `read` was read at
    /// (see [`STILL_AS_READ`]). `Refused` when anything moved, and the read is forgotten.
    pub async fn consume_remembered(
        &self,
        tenant: &TenantId,
        metadata: &Metadata,
        u: UseOf<'_>,
        read: &Loaded,
        credential: Option<Uuid>,
        use_event: impl Fn(u32) -> Event + Send + Sync,
    ) -> Result<Consumed, StoreError> {
        let UseOf { grant_id, typed_chars, session, read_used, .. } = u;
        let (Some(session), Some(used)) = (session, read_used.filter(|&n| n < MAX_ACTIONS)) else {
            return Ok(Consumed::Refused);
        };
        // Two profiles at most: the session's and its grant's.
        let mut profiles = Vec::new();
        for id in read.world.profiles.keys() {
            let stream = crate::domain::entity_stream(tenant, "profile", id)?;
            profiles.push((Some(id.as_str()), version(read.version(&stream))));
        }
        // Only a read of what the guards hold may be used: one session, its grant, the settings
        // and at most two profiles, each stream with its version. A read holding more (were
        // `Need::Authorize` to read more) is never used from memory.
        let w = &read.world;
        let held = w.sessions.len() == 1
            && w.grants.len() == 1
            && profiles.len() <= 2
            && w.approvals.is_empty()
            && w.run_snapshots.is_empty()
            && read.versions.len() == 3 + profiles.len();
        if typed_chars > MAX_TYPED_CHARS || !held {
            self.refused(tenant, session.session_id);
            return Ok(Consumed::Refused);
        }
        profiles.resize(2, (None, 0));
        let settings = version(read.version(&crate::domain::deployment_stream(tenant)?));
        #[cfg(feature = "testing")]
        self.paused().await;
        let extra: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
            [&credential, &settings, &profiles[0].0, &profiles[0].1, &profiles[1].0, &profiles[1].1];
        let strict = OneStatement { sql: &CONSUME_REMEMBERED, then: &NAME_SNAPSHOT_REMEMBERED, extra: &extra };
        match self.in_one_statement(tenant, metadata, &u, used, strict, &use_event).await {
            Ok(Some((ordinal, outcome))) => {
                self.remembered_uses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let used = Used { grant_id, ordinal, chars: typed_chars };
                self.reads.used(tenant, Some(session.session_id), used, true);
                Ok(Consumed::Allowed { ordinal, outcome })
            }
            Ok(None) => {
                self.refused(tenant, session.session_id);
                Ok(Consumed::Refused)
            }
            Err(e) => {
                self.reads.refused(tenant, session.session_id);
                Err(e)
            }
        }
    }
}
