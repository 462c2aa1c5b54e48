//! The cache of stream heads, and the chain of hashes an append extends from them.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;
use time::OffsetDateTime;

use crate::envelope::{AppendRequest, ExpectedVersion, StreamAppend, StreamId, TenantId};
use crate::error::AppendError;
use crate::hash::{GENESIS, Hashed, truncate_to_micros};

use super::failure::unavailable;
use super::rows::{Head, Planned, head_from_row};
use super::sql::InsertColumns;
use super::store::PgStore;

pub(super) const HEADS: &str = "SELECT s.id, e.stream_version, e.hash, e.tenant_id \
     FROM unnest($1::text[]) AS s(id) \
     LEFT JOIN LATERAL (SELECT stream_version, hash, tenant_id FROM events \
        WHERE stream_id = s.id ORDER BY stream_version DESC LIMIT 1) e ON true";

/// Bounded: past this many streams the cache starts over (a miss costs one read).
pub(super) const HEAD_CACHE_LIMIT: usize = 100_000;

impl PgStore {
    pub(super) fn cached_head(&self, stream: &StreamId) -> Option<Head> {
        self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(stream).cloned()
    }

    /// A stream's head the caller read from stored events (never one its own open transaction
    /// wrote): a later append at that version then skips reading it. A version nobody expects
    /// is simply never used; a stale one loses to the unique key.
    pub fn note_head(&self, stream: StreamId, version: u64, hash: [u8; 32], tenant: TenantId) {
        self.remember(stream, Head { version, hash, tenant });
    }

    /// Caches `head` unless a newer one is cached: a read from an older snapshot never moves a
    /// head back.
    pub(super) fn remember(&self, stream: StreamId, head: Head) {
        let mut heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if heads.get(&stream).is_some_and(|h| h.version > head.version) {
            return;
        }
        if heads.len() >= HEAD_CACHE_LIMIT {
            heads.clear();
        }
        heads.insert(stream, head);
    }

    pub(super) fn forget(&self, request: &AppendRequest) {
        let mut heads = self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for s in &request.streams {
            heads.remove(&s.stream_id);
        }
    }

    /// The heads `request` appends after as far as the cache knows them, and the streams it
    /// does not know at the expected version.
    pub(super) fn cached_heads<'r>(
        &self,
        request: &'r AppendRequest,
    ) -> (HashMap<StreamId, Option<Head>>, Vec<&'r StreamAppend>) {
        let mut heads = HashMap::new();
        let mut misses = Vec::new();
        for s in &request.streams {
            match (s.expected, self.cached_head(&s.stream_id)) {
                (ExpectedVersion::NoStream, _) => {
                    heads.insert(s.stream_id.clone(), None);
                }
                (ExpectedVersion::At(v), Some(h)) if h.version == v => {
                    heads.insert(s.stream_id.clone(), Some(h));
                }
                _ => misses.push(s),
            }
        }
        (heads, misses)
    }

    /// The heads `request` appends after, from the cache alone: a miss is a conflict.
    pub(super) fn known_heads(&self, request: &AppendRequest) -> Result<HashMap<StreamId, Option<Head>>, AppendError> {
        match self.cached_heads(request) {
            (heads, misses) if misses.is_empty() => Ok(heads),
            (_, misses) => Err(AppendError::Conflict {
                stream: misses[0].stream_id.clone(),
                expected: misses[0].expected,
                actual: None,
            }),
        }
    }

    /// The heads `request` appends after: from the cache, or read (one statement) on a miss.
    pub(super) async fn heads_for(
        &self,
        client: &impl GenericClient,
        request: &AppendRequest,
    ) -> Result<HashMap<StreamId, Option<Head>>, AppendError> {
        let (mut heads, misses) = self.cached_heads(request);
        if !misses.is_empty() {
            let ids: Vec<&str> = misses.iter().map(|s| s.stream_id.as_str()).collect();
            let stmt = client.prepare_cached(HEADS).await.map_err(unavailable)?;
            for row in client.query(&stmt, &[&ids]).await.map_err(unavailable)? {
                let Ok(stream) = StreamId::new(row.get::<_, String>(0)) else { continue };
                heads.insert(stream, head_from_row(&row).map_err(AppendError::Unavailable)?);
            }
        }
        Ok(heads)
    }

    /// The rows of `request` chained onto `heads`, in request order: request order is log
    /// order, so an auditor reads the events of one append as they were decided.
    pub(super) fn chain(
        request: &AppendRequest,
        mut heads: HashMap<StreamId, Option<Head>>,
    ) -> Result<(InsertColumns, Vec<Planned>), AppendError> {
        let recorded_at = truncate_to_micros(OffsetDateTime::now_utc());
        let mut cols = InsertColumns::default();
        let mut order = Vec::new();
        for s in &request.streams {
            let head = heads.remove(&s.stream_id).flatten();
            if head.as_ref().is_some_and(|h| h.tenant != request.tenant_id) {
                return Err(AppendError::TenantMismatch { stream: s.stream_id.clone() });
            }
            let current = head.as_ref().map_or(0, |h| h.version);
            if !s.expected.admits(current) {
                return Err(AppendError::Conflict {
                    stream: s.stream_id.clone(),
                    expected: s.expected,
                    actual: Some(current),
                });
            }
            let (mut version, mut prev) = (current, head.map_or(GENESIS, |h| h.hash));
            for e in &s.events {
                version += 1;
                let hash = Hashed::of_new(&s.stream_id, version, e, &request.tenant_id, recorded_at).hash(&prev);
                cols.push(&request.tenant_id, &s.stream_id, version, e, recorded_at, prev, hash);
                order.push((e.event_id, s.stream_id.clone(), version, hash));
                prev = hash;
            }
        }
        Ok((cols, order))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Metadata;
    use crate::postgres::pool;
    use crate::{ExpectedVersion, NewEvent};
    use uuid::Uuid;

    /// A store whose pool never connects: enough for the head cache.
    fn offline_store() -> PgStore {
        let config: tokio_postgres::Config = "postgres://nobody@127.0.0.1:1/none".parse().expect("config");
        PgStore::new(pool(config, 1).expect("pool"))
    }

    #[test]
    fn a_noted_head_never_moves_the_cache_back() {
        let store = offline_store();
        let stream = StreamId::new("grant-t.g").expect("stream");
        let tenant = TenantId::new("t").expect("tenant");
        store.note_head(stream.clone(), 5, [5; 32], tenant.clone());
        store.note_head(stream.clone(), 3, [3; 32], tenant.clone());
        assert_eq!(store.cached_head(&stream).map(|h| (h.version, h.hash)), Some((5, [5; 32])));
        store.note_head(stream.clone(), 6, [6; 32], tenant);
        assert_eq!(store.cached_head(&stream).map(|h| h.version), Some(6));
    }

    #[test]
    fn a_guarded_append_needs_its_heads_known() {
        let store = offline_store();
        let tenant = TenantId::new("t").expect("tenant");
        let stream = StreamId::new("grant-t.g").expect("stream");
        let event = NewEvent {
            event_id: Uuid::new_v4(),
            event_type: "test.event".into(),
            schema_version: 1,
            payload: serde_json::json!({}),
            metadata: Metadata::by("t"),
        };
        let request = AppendRequest::single(tenant.clone(), stream.clone(), ExpectedVersion::At(2), vec![event]);
        assert!(matches!(store.known_heads(&request), Err(AppendError::Conflict { .. })), "unknown head");
        store.note_head(stream.clone(), 1, [1; 32], tenant.clone());
        assert!(matches!(store.known_heads(&request), Err(AppendError::Conflict { .. })), "head at another version");
        store.note_head(stream.clone(), 2, [2; 32], tenant);
        let heads = store.known_heads(&request).expect("known");
        assert_eq!(heads[&stream].as_ref().map(|h| h.version), Some(2));
    }
}
