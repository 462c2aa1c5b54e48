//! `grantctl check`: the ledger read as its readers read it, counted, and every hash chain verified.

use anyhow::{Context, Result, bail};
use ledger::{Checkpoint, EventStore, PgStore, StreamId, verify_stream};

/// How long the read may lag behind transactions still open before the check gives up.
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(30);

/// What `check` found.
#[derive(Debug)]
pub struct Checked {
    pub migrations: usize,
    /// Events the paged global read returned.
    pub read: u64,
    /// `count(*)` of the events up to the read's last checkpoint: what it must have returned.
    pub counted: u64,
    /// `count(*)` of the whole table, newer commits included.
    pub total: u64,
    pub streams: usize,
}

impl std::fmt::Display for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} migrations; global read: {} events, count(*) {} (whole table {}); {} streams, every hash chain verified",
            self.migrations, self.read, self.counted, self.total, self.streams
        )
    }
}

/// Pages through the global log as readers do and compares what came back with `count(*)`, so a
/// skipped event shows; then verifies every stream's hash chain.
pub async fn run(config: &tokio_postgres::Config, page_size: usize) -> Result<Checked> {
    let client = crate::connect_config(config).await?;
    let migrations =
        client.query("SELECT version FROM schema_migrations", &[]).await.context("reading schema_migrations")?;
    let store = PgStore::new(ledger::postgres::pool(config.clone(), 2).map_err(anyhow::Error::msg)?);
    let count = "SELECT count(*) FROM events";
    let committed = u64::try_from(client.query_one(count, &[]).await.context("counting events")?.get::<_, i64>(0))?;
    let (mut read, mut at) = (0u64, Checkpoint::START);
    let mut streams = std::collections::BTreeSet::new();
    // The read must reach every event committed before the check began; it lags while an older
    // transaction anywhere in the cluster is open, so wait for that, within bounds.
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    let mut held_back = false;
    loop {
        let page = store.read_all(at, page_size).await?;
        let Some(last) = page.last() else {
            if read >= committed {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                held_back = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        at = last.checkpoint();
        read += page.len() as u64;
        streams.extend(page.iter().map(|e| e.stream_id.to_string()));
    }
    // Every transaction up to the last checkpoint had ended when it was read, so this count is
    // exact however many writers run now.
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE (events.tx_id, events.global_position) <= ($1::text::xid8, $2)), count(*) \
             FROM events",
            &[&at.tx_id.to_string(), &i64::try_from(at.position)?],
        )
        .await
        .context("counting events")?;
    let (counted, total) = (u64::try_from(row.get::<_, i64>(0))?, u64::try_from(row.get::<_, i64>(1))?);
    let checked = Checked { migrations: migrations.len(), read, counted, total, streams: streams.len() };
    if read != counted {
        bail!("the global read skipped or repeated events: {checked}");
    }
    if held_back {
        bail!(
            "the global read is held back: {read} of {committed} committed events readable after {}s; an open \
             transaction in the cluster holds it (see pg_stat_activity)",
            CATCH_UP.as_secs()
        );
    }
    for s in &streams {
        let id = StreamId::new(s.clone())?;
        verify_stream(&id, &store.read_stream(&id, 1).await?).with_context(|| format!("stream {s}"))?;
    }
    Ok(checked)
}
