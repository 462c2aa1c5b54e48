//! The store itself: its pool, its head cache and wake-ups, and the event store's reads and
//! lone appends.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::sync::watch;
use tokio_postgres::NoTls;

use crate::envelope::StreamId;

use super::notify::{listen, notify_on_commit};
use super::rows::Head;

impl PgStore {
    /// A store whose wake-ups move only on its own appends.
    pub fn new(pool: Pool) -> Self {
        Self {
            pool,
            heads: Arc::default(),
            local: Arc::new(watch::channel(0).0),
            wake: Arc::new(watch::channel(0).0),
            settled: Arc::default(),
            settle_patience: Duration::from_secs(10),
            _tasks: None,
        }
    }

    /// A store that also announces its appends with NOTIFY and LISTENs for other processes'
    /// on a connection of its own (reconnecting, and waking once after each reconnect, since
    /// notifications sent while it was away are lost).
    pub fn with_listener(pool: Pool, config: tokio_postgres::Config) -> Self {
        let mut store = Self::new(pool);
        let notifier = tokio::spawn(notify_on_commit(store.pool.clone(), store.local.subscribe()));
        let listener = tokio::spawn(listen(config, Arc::clone(&store.wake)));
        store._tasks = Some(Arc::new(TaskGuard(vec![notifier, listener])));
        store
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Wakes this process's readers and, through the notifier, other processes'.
    pub(super) fn wake(&self) {
        self.local.send_modify(|n| *n += 1);
        self.wake.send_modify(|n| *n += 1);
    }
}

/// Keeps a connection whose COMMIT failed out of the pool. Its session may be dead while the
/// client has not yet noticed, and the pool's round-trip-free recycling would hand it to the
/// next caller, who would then fail for nothing.
pub fn discard(client: deadpool_postgres::Object) {
    drop(deadpool_postgres::Object::take(client));
}

/// A pool of at most `max_size` whose callers wait at most `wait` for a connection, then get an
/// error: for work that must not queue without bound behind others (credential lookups by
/// callers not yet authenticated).
pub fn bounded_pool(config: tokio_postgres::Config, max_size: usize, wait: Duration) -> Result<Pool, String> {
    let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(max_size)
        .wait_timeout(Some(wait))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| e.to_string())
}

/// A pool over `config` whose connections are recycled without a round trip.
pub fn pool(config: tokio_postgres::Config, max_size: usize) -> Result<Pool, String> {
    let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager).max_size(max_size).build().map_err(|e| e.to_string())
}

#[derive(Debug)]
struct TaskGuard(Vec<tokio::task::JoinHandle<()>>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

#[derive(Debug, Clone)]
pub struct PgStore {
    pub(super) pool: Pool,
    pub(super) heads: Arc<Mutex<HashMap<StreamId, Head>>>,
    /// Moved by this store's own commits.
    pub(super) local: Arc<watch::Sender<u64>>,
    /// Moved by local commits and by other processes' NOTIFYs.
    pub(super) wake: Arc<watch::Sender<u64>>,
    pub(super) settled: Arc<SettleCounts>,
    /// How long a lost commit's server process may take to end before settling gives up.
    pub(super) settle_patience: Duration,
    _tasks: Option<Arc<TaskGuard>>,
}

/// How many commits that lost their connection were settled each way (operators and tests).
#[derive(Debug, Default)]
pub struct SettleCounts {
    pub stored: AtomicU64,
    pub not_stored: AtomicU64,
}
