//! What a replica remembers of each session's last authorization read (see `remember`): a hint
//! for the session's next allow, bounded, and moved along by the uses this process makes.
//!
//! Where one session's calls are spread over replicas, another replica's use makes the read stale
//! every time, and each stale try costs a statement. So a session whose remembered use was
//! refused is not tried from memory for its next 1, 3, 7, … 63 calls (doubling while refusals
//! follow one another), and a use made from memory starts it afresh.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use ledger::TenantId;
use uuid::Uuid;

use crate::state::grant_stream_version;
use crate::store::Loaded;

/// The most sessions a replica remembers a read for; past it, one is forgotten for each new one.
pub(super) const REMEMBERED: usize = 4_096;

/// The most refusals in a row that lengthen a session's pause (2^6 - 1 = 63 calls).
const MAX_REFUSALS: u32 = 6;

#[derive(Debug, Default)]
struct Entry {
    read: Option<Arc<Loaded>>,
    /// Remembered uses refused in a row.
    refusals: u32,
    /// Calls still to be decided on a fresh read before the memory is tried again.
    pause: u32,
}

/// The last authorization read of each session this process served, by (tenant, session).
#[derive(Debug, Default)]
pub(super) struct Reads(Mutex<HashMap<(String, String), Entry>>);

impl Reads {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Entry>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key(tenant: &TenantId, session: &str) -> (String, String) {
        (tenant.as_str().to_owned(), session.to_owned())
    }

    /// The read to decide this call on, unless the session is pausing.
    pub(super) fn get(&self, tenant: &TenantId, session: &str) -> Option<Arc<Loaded>> {
        let mut map = self.map();
        let entry = map.get_mut(&Self::key(tenant, session))?;
        if entry.pause > 0 {
            entry.pause -= 1;
            return None;
        }
        entry.read.clone()
    }

    /// A fresh read of `session`, kept when it holds the session's active grant (a read without
    /// one can decide no allow).
    /// Past [`REMEMBERED`] an arbitrary session is forgotten, its pause with it.
    pub(super) fn put(&self, tenant: &TenantId, session: &str, read: &Loaded) {
        let key = Self::key(tenant, session);
        let useful = read.world.sessions.get(session).is_some_and(|s| s.active_grant.is_some());
        if !useful {
            let mut map = self.map();
            if let Some(entry) = map.get_mut(&key) {
                entry.read = None;
                if entry.pause == 0 && entry.refusals == 0 {
                    map.remove(&key);
                }
            }
            return;
        }
        // Copied before the lock: every replica's call takes it.
        let read = Arc::new(read.clone());
        let mut map = self.map();
        if map.len() >= REMEMBERED && !map.contains_key(&key) {
            let some = map.keys().next().cloned();
            if let Some(some) = some {
                map.remove(&some);
            }
        }
        map.entry(key).or_default().read = Some(read);
    }

    #[cfg(feature = "testing")]
    pub(super) fn clear(&self) {
        self.map().clear();
    }

    /// A remembered use refused: the read is dropped and the session pauses.
    pub(super) fn refused(&self, tenant: &TenantId, session: &str) {
        if let Some(entry) = self.map().get_mut(&Self::key(tenant, session)) {
            entry.read = None;
            entry.refusals = (entry.refusals + 1).min(MAX_REFUSALS);
            entry.pause = (1 << entry.refusals) - 1;
        }
    }

    /// Use `ordinal` of `grant_id` committed (`remembered`: made from memory): the remembered
    /// read moves with it when it held the use before, and is dropped otherwise (another
    /// replica's use came between).
    pub(super) fn used(&self, tenant: &TenantId, session: Option<&str>, u: Used, remembered: bool) {
        let Some(session) = session else { return };
        let mut map = self.map();
        let Some(entry) = map.get_mut(&Self::key(tenant, session)) else { return };
        if remembered {
            entry.refusals = 0;
        }
        let Some(read) = entry.read.as_mut() else { return };
        if read.world.grants.get(&u.grant_id).is_none_or(|g| g.actions_used + 1 != u.ordinal) {
            entry.read = None;
            return;
        }
        let read = Arc::make_mut(read);
        if let Some(g) = read.world.grants.get_mut(&u.grant_id) {
            g.actions_used = u.ordinal;
            g.chars_used = g.chars_used.saturating_add(u.chars);
        }
        if let Ok(stream) = crate::domain::entity_stream(tenant, "grant", &u.grant_id) {
            read.versions.insert(stream, grant_stream_version(u.ordinal, false));
        }
    }
}

/// A committed use, as [`Reads::used`] moves a remembered read along with it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Used {
    pub(super) grant_id: Uuid,
    pub(super) ordinal: u32,
    pub(super) chars: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Grant, World};
    use grant_domain::catalogue::{SiteScope, TaskGrantCreated};

    fn tenant() -> TenantId {
        TenantId::new("t").unwrap()
    }

    fn read_with(grant: Option<Grant>) -> Loaded {
        let mut world = World::default();
        if let Some(g) = grant {
            world.grants.insert(g.created.grant_id, g);
        }
        Loaded { tenant: tenant(), world, versions: HashMap::new() }
    }

    /// `get` says no exactly `pause` times, then gives the read again.
    fn paused_calls(reads: &Reads) -> usize {
        let t = tenant();
        for n in 0..=64 {
            if reads.get(&t, "s").is_some() {
                return n;
            }
        }
        panic!("still paused after 64 calls")
    }

    fn remember(reads: &Reads, read: &Loaded) {
        reads.map().entry(Reads::key(&tenant(), "s")).or_default().read = Some(Arc::new(read.clone()));
    }

    #[test]
    fn a_refused_session_pauses_longer_each_time_and_a_remembered_use_resets_it() {
        let (reads, t, read) = (Reads::default(), tenant(), read_with(None));
        remember(&reads, &read);
        assert_eq!(paused_calls(&reads), 0);
        let mut pauses = Vec::new();
        for _ in 0..8 {
            reads.refused(&t, "s");
            assert!(reads.map()[&Reads::key(&t, "s")].read.is_none(), "a refused read is dropped");
            remember(&reads, &read);
            pauses.push(paused_calls(&reads));
        }
        assert_eq!(pauses, [1, 3, 7, 15, 31, 63, 63, 63]);
        let u = Used { grant_id: Uuid::nil(), ordinal: 1, chars: 0 };
        reads.used(&t, Some("s"), u, true);
        reads.refused(&t, "s");
        remember(&reads, &read);
        assert_eq!(paused_calls(&reads), 1, "a use from memory starts the pause afresh");
    }

    #[test]
    fn a_use_moves_the_read_along_only_when_it_is_the_next_one() {
        let created = TaskGrantCreated {
            grant_id: Uuid::from_u128(7),
            approval_id: Uuid::from_u128(8),
            tenant_id: "t".into(),
            principal_id: "owner".into(),
            session_id: "s".into(),
            profile_id: "p".into(),
            profile_generation: 1,
            agent_version: "a".into(),
            policy_version: "p".into(),
            scope: SiteScope { origin: "https://www.lesson.test".into(), path_prefix: "/lesson".into() },
            created_at: time::OffsetDateTime::UNIX_EPOCH,
            expires_at: time::OffsetDateTime::UNIX_EPOCH,
            max_actions: 200,
            max_typed_chars: 4_096,
        };
        let grant = Grant { created, actions_used: 3, chars_used: 10, ended: None };
        let (reads, t) = (Reads::default(), tenant());
        remember(&reads, &read_with(Some(grant.clone())));
        reads.used(&t, Some("s"), Used { grant_id: grant.created.grant_id, ordinal: 4, chars: 5 }, false);
        let moved = reads.get(&t, "s").unwrap();
        let g = &moved.world.grants[&grant.created.grant_id];
        assert_eq!((g.actions_used, g.chars_used), (4, 15));
        // Another replica's use came between: 6 does not follow 4.
        reads.used(&t, Some("s"), Used { grant_id: grant.created.grant_id, ordinal: 6, chars: 0 }, false);
        assert!(reads.get(&t, "s").is_none());
    }
}
