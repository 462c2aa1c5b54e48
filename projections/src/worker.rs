//! Async projection workers. A worker leads its projection while it holds a session advisory
//! lock on its own connection; it reads the global log gap-safely from the projection's
//! checkpoint `(tx_id, position)` and, on that same connection, applies a batch and moves the
//! checkpoint in one transaction. The checkpoint moves only from the value the batch was read
//! after, so even two appliers could not apply one batch twice. A standby waits for the lock,
//! which PostgreSQL frees when the leader's session ends.

use std::future::Future;
use std::time::Duration;

use ledger::{Checkpoint, EventStore, PgStore};
use tokio_postgres::{Client, NoTls};

use crate::{Error, Projection};

/// Where a projection stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    pub projection: Projection,
    /// The version its stored rows were built by.
    pub stored_version: i32,
    pub checkpoint: Checkpoint,
    pub applied: u64,
    /// Events committed after the checkpoint (at most [`LAG_COUNT_CAP`]), and the age of the first
    /// of them, in seconds.
    pub lag_events: u64,
    pub lag_seconds: f64,
}

/// Registers `projection` if it never ran: a checkpoint at the start, at this build's version.
pub async fn register(client: &Client, projection: Projection) -> Result<(), Error> {
    client
        .execute(
            "INSERT INTO projection_checkpoints (projection, version) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&projection.name(), &projection.version()],
        )
        .await?;
    Ok(())
}

/// Where each projection stands, with its lag; registers a projection that never ran.
pub async fn status(client: &Client) -> Result<Vec<Standing>, Error> {
    for projection in Projection::ALL {
        register(client, projection).await?;
    }
    standings(client).await
}

/// The most events past a checkpoint that a lag reading counts: beyond it the figure says "at
/// least", and the reading stays cheap however far behind a projection is.
pub const LAG_COUNT_CAP: i64 = 1_000_000;

/// Where each registered projection stands, with its lag: reads only (what the workers' health
/// and `grantctl status` sample).
pub async fn standings(client: &Client) -> Result<Vec<Standing>, Error> {
    let mut out = Vec::new();
    for projection in Projection::ALL {
        let row = client
            .query_opt(
                "SELECT c.version, c.tx_id::text, c.position, c.applied, \
                   (SELECT count(*) FROM (SELECT 1 FROM events e \
                     WHERE (e.tx_id, e.global_position) > (c.tx_id, c.position) LIMIT $2) past), \
                   COALESCE((SELECT EXTRACT(EPOCH FROM now() - e.recorded_at)::float8 FROM events e \
                     WHERE (e.tx_id, e.global_position) > (c.tx_id, c.position) \
                     ORDER BY e.tx_id, e.global_position LIMIT 1), 0) \
                 FROM projection_checkpoints c WHERE c.projection = $1",
                &[&projection.name(), &LAG_COUNT_CAP],
            )
            .await?;
        let Some(row) = row else { continue };
        out.push(Standing {
            projection,
            stored_version: row.get(0),
            checkpoint: Checkpoint {
                tx_id: row.get::<_, &str>(1).parse().unwrap_or_default(),
                position: u64::try_from(row.get::<_, i64>(2)).unwrap_or_default(),
            },
            applied: u64::try_from(row.get::<_, i64>(3)).unwrap_or_default(),
            lag_events: u64::try_from(row.get::<_, i64>(4)).unwrap_or_default(),
            lag_seconds: row.get(5),
        });
    }
    Ok(out)
}

/// Refuses to serve a projection whose rows were built by another version of its code.
pub async fn ensure_current(client: &Client) -> Result<(), Error> {
    for s in status(client).await? {
        if s.stored_version != s.projection.version() {
            return Err(Error::Stale(format!(
                "projection {} was built by version {} and this build is version {}: run `grantctl projections \
                 rebuild {}`",
                s.projection.name(),
                s.stored_version,
                s.projection.version(),
                s.projection.name()
            )));
        }
    }
    Ok(())
}

/// One projection's worker.
#[derive(Debug, Clone)]
pub struct Worker {
    pub projection: Projection,
    pub config: tokio_postgres::Config,
    pub store: PgStore,
    pub batch: usize,
    /// How often to look for new events when no wake-up comes.
    pub poll: Duration,
}

impl Worker {
    pub fn new(projection: Projection, config: tokio_postgres::Config, store: PgStore) -> Self {
        Self { projection, config, store, batch: ledger::READ_PAGE, poll: Duration::from_secs(1) }
    }

    /// A connection of the worker's own: it holds the lock and runs the transactions.
    pub async fn connect(&self) -> Result<Client, Error> {
        let (client, connection) = self.config.connect(NoTls).await?;
        tokio::spawn(connection);
        register(&client, self.projection).await?;
        Ok(client)
    }

    /// Takes leadership if no one holds it.
    pub async fn try_lead(&self, client: &Client) -> Result<bool, Error> {
        let row = client.query_one("SELECT pg_try_advisory_lock($1)", &[&self.projection.lock_key()]).await?;
        Ok(row.get(0))
    }

    /// Applies one batch, returning how many events it applied (0: caught up).
    pub async fn step(&self, client: &mut Client) -> Result<usize, Error> {
        self.step_paused(client, async {}).await
    }

    /// [`Worker::step`] that awaits `pause` after applying and before committing: where a test
    /// kills the worker to show the batch is then not applied at all.
    pub async fn step_paused(&self, client: &mut Client, pause: impl Future<Output = ()>) -> Result<usize, Error> {
        let row = client
            .query_one(
                "SELECT tx_id::text, position FROM projection_checkpoints WHERE projection = $1",
                &[&self.projection.name()],
            )
            .await?;
        let at = Checkpoint {
            tx_id: row.get::<_, &str>(0).parse().unwrap_or_default(),
            position: u64::try_from(row.get::<_, i64>(1)).unwrap_or_default(),
        };
        let events = self.store.read_all(at, self.batch).await?;
        let Some(last) = events.last().map(ledger::RecordedEvent::checkpoint) else { return Ok(0) };
        let started = std::time::Instant::now();
        let tx = client.transaction().await?;
        self.projection.apply(&tx, &events).await?;
        let moved = tx
            .execute(
                "UPDATE projection_checkpoints SET tx_id = $2::text::xid8, position = $3, applied = applied + $4, \
                 updated_at = now() \
                 WHERE projection = $1 AND tx_id = $5::text::xid8 AND position = $6 AND version = $7",
                &[
                    &self.projection.name(),
                    &last.tx_id.to_string(),
                    &i64::try_from(last.position).unwrap_or(i64::MAX),
                    &i64::try_from(events.len()).unwrap_or(i64::MAX),
                    &at.tx_id.to_string(),
                    &i64::try_from(at.position).unwrap_or(i64::MAX),
                    &self.projection.version(),
                ],
            )
            .await?;
        if moved != 1 {
            // Someone else moved the checkpoint since the read, or the rows are another version's
            // (a rebuild by a newer build): drop this batch.
            tx.rollback().await?;
            return Ok(0);
        }
        pause.await;
        tx.commit().await?;
        let (m, label) = (&*crate::metrics::METRICS, crate::metrics::of(self.projection));
        m.batch.get_or_create(&label).observe(started.elapsed().as_secs_f64());
        m.applied.get_or_create(&label).inc_by(u64::try_from(events.len()).unwrap_or(u64::MAX));
        m.position.get_or_create(&label).set(i64::try_from(last.position).unwrap_or(i64::MAX));
        // How far behind the newest applied event was recorded: logged, not queried for.
        let behind = (time::OffsetDateTime::now_utc() - events[events.len() - 1].recorded_at).as_seconds_f64();
        tracing::debug!(projection = self.projection.name(), applied = events.len(), lag_seconds = behind, "applied");
        Ok(events.len())
    }

    /// Leads when it can and applies until `shutdown`; wakes on the store's signal, or polls.
    /// A lost connection is logged and the worker starts over (a standby may lead meanwhile).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut wake = self.store.wake_ups();
        loop {
            let attempt = async {
                let mut client = self.connect().await?;
                while !self.try_lead(&client).await? {
                    tokio::time::sleep(self.poll).await;
                }
                tracing::info!(projection = self.projection.name(), "leading");
                loop {
                    let applied = self.step(&mut client).await?;
                    if applied > 0 {
                        continue;
                    }
                    // Caught up: wait for a commit, or poll (a wake-up is a hint, never a delivery).
                    let _ = tokio::time::timeout(self.poll, wake.changed()).await;
                }
                #[allow(unreachable_code)]
                Ok::<(), Error>(())
            };
            tokio::select! {
                () = &mut shutdown => return,
                result = attempt => if let Err(e) = result {
                    tracing::warn!(projection = self.projection.name(), error = %e, "worker lost its connection; starting over");
                    tokio::time::sleep(self.poll).await;
                },
            }
        }
    }
}

/// Notes a sample of where each projection stands; answers the projections frozen now.
pub fn sample(standings: &[Standing], frozen_for: &mut FrozenClock) -> Vec<&'static str> {
    let m = &*crate::metrics::METRICS;
    let mut frozen = Vec::new();
    for s in standings {
        let l = crate::metrics::of(s.projection);
        m.position.get_or_create(&l).set(i64::try_from(s.checkpoint.position).unwrap_or(i64::MAX));
        m.lag_events.get_or_create(&l).set(i64::try_from(s.lag_events).unwrap_or(i64::MAX));
        m.lag_seconds.get_or_create(&l).set(s.lag_seconds);
        let stuck = frozen_for.note(s);
        m.frozen.get_or_create(&l).set(i64::from(stuck));
        if stuck {
            frozen.push(s.projection.name());
        }
    }
    frozen
}

/// Since when each projection's checkpoint has stood still with events waiting past it.
#[derive(Debug, Default)]
pub struct FrozenClock(std::collections::HashMap<&'static str, (ledger::Checkpoint, std::time::Instant)>);

/// How long a checkpoint may stand still with events waiting before it counts as frozen.
pub const FROZEN_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

impl FrozenClock {
    fn note(&mut self, s: &Standing) -> bool {
        let now = std::time::Instant::now();
        let entry = self.0.entry(s.projection.name()).or_insert((s.checkpoint, now));
        if entry.0 != s.checkpoint || s.lag_events == 0 {
            *entry = (s.checkpoint, now);
            return false;
        }
        now.duration_since(entry.1) >= FROZEN_AFTER
    }
}
