//! The waits a replica holds for owners' answers (`AwaitApproval`), watched together: one task
//! reads the marks of every awaited approval in one statement after the ledger moves, and wakes
//! only the waits whose approval or session changed. A held wait makes no read and holds no
//! database connection, however many are open.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use ledger::TenantId;
use tokio::sync::watch;
use uuid::Uuid;

use crate::authority::Authority;
use crate::store::Backend;

/// The least time between two reads of the marks: an owner's answer reaches its wait within it.
/// Under a steady stream of other writes every wake-up is followed by a read, and reads four
/// times a second doubled other callers' p99 (`grantctl-bench waits`); once a second did not.
const READ_EVERY: Duration = Duration::from_secs(1);
/// A read even with no wake-up, so a lost notification delays an answer, never loses it.
const READ_ANYWAY: Duration = Duration::from_secs(5);
/// How long an approval nobody waits for stays watched: a worker renews its wait within it, and
/// the renewal then needs no read while the approval is still pending.
const LINGER: Duration = Duration::from_secs(3);

type Key = (TenantId, Uuid);

struct Entry {
    /// The approval's and its session's versions as last read; `None` until a wait's own read
    /// or the first read of the marks (which then wakes the waits, as a change may be missed).
    mark: Option<(u64, u64)>,
    moved: watch::Sender<u64>,
    waiters: usize,
    /// Since when nobody waits; the entry goes `LINGER` after.
    idle_since: Option<Instant>,
    /// A wait's read found the approval pending at this mark, in this session of this principal.
    pending: Option<Pending>,
}

struct Pending {
    mark: (u64, u64),
    session: String,
    principal: String,
}

#[derive(Default)]
struct Held {
    entries: HashMap<Key, Entry>,
    watching: bool,
}

/// This replica's waits.
#[derive(Default)]
pub(super) struct Waits {
    held: Arc<Mutex<Held>>,
}

impl std::fmt::Debug for Waits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waits").finish_non_exhaustive()
    }
}

/// One wait: `moved` resolves after its approval or its session may have changed.
pub(super) struct Waiting {
    key: Key,
    held: Arc<Mutex<Held>>,
    moved: watch::Receiver<u64>,
}

impl Waits {
    /// Registers a wait before its first read, so a change after that read always wakes it.
    pub(super) fn hold<B: Backend + 'static>(&self, authority: &Arc<Authority<B>>, key: Key) -> Waiting {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = held.entries.entry(key.clone()).or_insert_with(|| Entry {
            mark: None,
            moved: watch::channel(0).0,
            waiters: 0,
            idle_since: None,
            pending: None,
        });
        entry.waiters += 1;
        entry.idle_since = None;
        let moved = entry.moved.subscribe();
        if !held.watching {
            held.watching = true;
            tokio::spawn(watch_marks(Arc::downgrade(&self.held), Arc::clone(authority)));
        }
        Waiting { key, held: Arc::clone(&self.held), moved }
    }
}

impl Waiting {
    fn with_entry<T>(&self, f: impl FnOnce(&mut Entry) -> T) -> Option<T> {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        held.entries.get_mut(&self.key).map(f)
    }

    /// The wait's own read found the approval pending at `mark` (its and its session's versions),
    /// in `session`, of `principal`: changes after that read wake it, and a renewal by the same
    /// principal may skip the read while nothing moved.
    pub(super) fn pending_at(&self, mark: (u64, u64), session: &str, principal: &str) {
        self.with_entry(|e| {
            e.mark.get_or_insert(mark);
            e.pending = Some(Pending { mark, session: session.to_owned(), principal: principal.to_owned() });
        });
    }

    /// Whether a read by `principal` found the approval pending in `session`, and nothing moved
    /// since: the owner has not answered, the card has not ended, the session has not stopped.
    pub(super) fn known_pending(&self, session: &str, principal: &str) -> bool {
        self.with_entry(|e| {
            e.pending
                .as_ref()
                .is_some_and(|p| p.session == session && p.principal == principal && e.mark == Some(p.mark))
        })
        .unwrap_or(false)
    }

    /// Returns once the approval or its session may have changed since the last call.
    pub(super) async fn moved(&mut self) {
        // The sender lives while this wait is registered, so an error cannot happen here.
        let _ = self.moved.changed().await;
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entry) = held.entries.get_mut(&self.key) {
            entry.waiters -= 1;
            // Only an approval a read found pending lingers for its renewal: one a caller merely
            // named (not theirs, not found) is gone at once.
            if entry.waiters == 0 && entry.pending.is_none() {
                held.entries.remove(&self.key);
            } else if entry.waiters == 0 {
                entry.idle_since = Some(Instant::now());
            }
        }
    }
}

/// Reads the marks of every held wait after each wake-up (at most once per `READ_EVERY`, and at
/// least once per `READ_ANYWAY`), and wakes the waits whose mark moved. Ends with the service.
async fn watch_marks<B: Backend>(held: Weak<Mutex<Held>>, authority: Arc<Authority<B>>) {
    let mut wake = authority.backend().wake_ups();
    loop {
        let _ = tokio::time::timeout(READ_ANYWAY, wake.changed()).await;
        let Some(held) = held.upgrade() else { return };
        let keys: Vec<Key> = {
            let mut held = held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            held.entries.retain(|_, e| e.idle_since.is_none_or(|t| t.elapsed() < LINGER));
            held.entries.keys().cloned().collect()
        };
        if !keys.is_empty() {
            // A failed read is tried again on the next round; the waits' own deadlines still hold.
            if let Ok(marks) = authority.backend().approval_marks(&keys).await {
                let mut held = held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                for (key, entry) in &mut held.entries {
                    let mark = marks.get(key).copied();
                    if mark.is_some() && entry.mark != mark {
                        entry.mark = mark;
                        entry.moved.send_modify(|n| *n += 1);
                    }
                }
            }
        }
        drop(held);
        tokio::time::sleep(READ_EVERY).await;
    }
}
