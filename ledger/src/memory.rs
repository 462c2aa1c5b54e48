//! The in-memory store: the reference model for property tests, not a production mode.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use time::OffsetDateTime;
use tokio::sync::watch;
use uuid::Uuid;

use crate::envelope::{AppendOutcome, AppendRequest, Appended, Checkpoint, RecordedEvent, StreamId};
use crate::error::{AppendError, ReadError};
use crate::hash::{GENESIS, Hashed, truncate_to_micros};
use crate::store::EventStore;

#[derive(Debug, Default)]
struct Inner {
    log: Vec<RecordedEvent>,
    /// Positions in `log` (index + 1 = global position) per stream, in version order.
    streams: HashMap<StreamId, Vec<usize>>,
    by_id: HashMap<Uuid, usize>,
    next_tx: u64,
}

#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    wake: Arc<watch::Sender<u64>>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self { inner: Arc::default(), wake: Arc::new(watch::channel(0).0) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied append: appends mutate
        // only after every check passed.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Test hook: rewrite a stored payload in place, as an attacker with table access would.
    #[cfg(feature = "contract")]
    pub fn tamper(&self, event_id: Uuid, payload: serde_json::Value) {
        let mut inner = self.lock();
        let i = inner.by_id[&event_id];
        inner.log[i].payload = payload;
    }

    /// Test hook: the id the next append gets.
    #[cfg(feature = "contract")]
    pub fn next_tx_id(&self) -> u64 {
        self.lock().next_tx + 1
    }

    /// Test hook: skip transaction ids, as other transactions of a server would use them up.
    #[cfg(feature = "contract")]
    pub fn burn_tx_ids(&self, target: u64) {
        let mut inner = self.lock();
        inner.next_tx = inner.next_tx.max(target.saturating_sub(1));
    }
}

fn replay_of(inner: &Inner, request: &AppendRequest) -> Result<Option<AppendOutcome>, AppendError> {
    let mut events = Vec::new();
    let mut tx_id = 0;
    let mut any_stored = false;
    let mut all_same = true;
    for s in &request.streams {
        for e in &s.events {
            match inner.by_id.get(&e.event_id) {
                Some(&i) => {
                    any_stored = true;
                    let r = &inner.log[i];
                    if !r.same_content(&request.tenant_id, &s.stream_id, e) {
                        return Err(AppendError::DuplicateEventId { event_id: e.event_id });
                    }
                    tx_id = r.tx_id;
                    events.push(Appended {
                        event_id: r.event_id,
                        stream_id: r.stream_id.clone(),
                        stream_version: r.stream_version,
                        global_position: r.global_position,
                    });
                }
                None => all_same = false,
            }
        }
    }
    match (any_stored, all_same) {
        (false, _) => Ok(None),
        (true, true) => Ok(Some(AppendOutcome { tx_id, events, replayed: true })),
        (true, false) => {
            let id = events[0].event_id;
            Err(AppendError::DuplicateEventId { event_id: id })
        }
    }
}

impl EventStore for MemoryStore {
    async fn append(&self, request: AppendRequest) -> Result<AppendOutcome, AppendError> {
        request.validate()?;
        let mut inner = self.lock();
        if let Some(outcome) = replay_of(&inner, &request)? {
            return Ok(outcome);
        }
        // Check every stream before writing anything: all or nothing.
        for s in &request.streams {
            let positions = inner.streams.get(&s.stream_id).map_or(&[][..], Vec::as_slice);
            if let Some(&first) = positions.first()
                && inner.log[first].tenant_id != request.tenant_id
            {
                return Err(AppendError::TenantMismatch { stream: s.stream_id.clone() });
            }
            let current = positions.len() as u64;
            if !s.expected.admits(current) {
                return Err(AppendError::Conflict {
                    stream: s.stream_id.clone(),
                    expected: s.expected,
                    actual: Some(current),
                });
            }
        }
        inner.next_tx += 1;
        let tx_id = inner.next_tx;
        let recorded_at = truncate_to_micros(OffsetDateTime::now_utc());
        let mut appended = Vec::new();
        for s in request.streams {
            let positions = inner.streams.get(&s.stream_id).cloned().unwrap_or_default();
            let mut prev = positions.last().map_or(GENESIS, |&i| inner.log[i].hash);
            for (version, e) in (positions.len() as u64 + 1..).zip(s.events) {
                let hash = Hashed::of_new(&s.stream_id, version, &e, &request.tenant_id, recorded_at).hash(&prev);
                let index = inner.log.len();
                let global_position = index as u64 + 1;
                inner.log.push(RecordedEvent {
                    global_position,
                    tx_id,
                    stream_id: s.stream_id.clone(),
                    stream_version: version,
                    event_id: e.event_id,
                    event_type: e.event_type,
                    schema_version: e.schema_version,
                    tenant_id: request.tenant_id.clone(),
                    payload: e.payload,
                    metadata: e.metadata,
                    recorded_at,
                    prev_hash: prev,
                    hash,
                });
                inner.streams.entry(s.stream_id.clone()).or_default().push(index);
                inner.by_id.insert(e.event_id, index);
                appended.push(Appended {
                    event_id: e.event_id,
                    stream_id: s.stream_id.clone(),
                    stream_version: version,
                    global_position,
                });
                prev = hash;
            }
        }
        drop(inner);
        self.wake.send_modify(|n| *n += 1);
        Ok(AppendOutcome { tx_id, events: appended, replayed: false })
    }

    async fn read_stream(&self, stream: &StreamId, from_version: u64) -> Result<Vec<RecordedEvent>, ReadError> {
        let inner = self.lock();
        let positions = inner.streams.get(stream).map_or(&[][..], Vec::as_slice);
        let skip = usize::try_from(from_version.saturating_sub(1)).unwrap_or(usize::MAX);
        Ok(positions.iter().skip(skip).map(|&i| inner.log[i].clone()).collect())
    }

    async fn read_all(&self, after: Checkpoint, limit: usize) -> Result<Vec<RecordedEvent>, ReadError> {
        // Appends commit under one lock, so there are no in-flight transactions to hold back.
        let inner = self.lock();
        Ok(inner.log.iter().filter(|e| e.checkpoint() > after).take(limit).cloned().collect())
    }

    async fn find_event(&self, event_id: Uuid) -> Result<Option<RecordedEvent>, ReadError> {
        let inner = self.lock();
        Ok(inner.by_id.get(&event_id).map(|&i| inner.log[i].clone()))
    }

    fn wake_ups(&self) -> watch::Receiver<u64> {
        self.wake.subscribe()
    }
}
