//! Blue/green rebuild: the next generation of a projection's table is built from position zero
//! beside the live one, which keeps serving; once caught up, it is swapped in with the checkpoint
//! in one transaction that holds the live table and the checkpoint row. Readers of the view wait
//! only for that swap; the authorizer never reads these tables.

use ledger::{Checkpoint, EventStore, PgStore};
use tokio_postgres::Client;

use crate::{Error, Projection};

/// What a rebuild did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuilt {
    pub projection: Projection,
    pub events: u64,
    pub checkpoint: Checkpoint,
}

/// Rebuilds `projection`. `progress` hears the events applied so far.
pub async fn rebuild(
    client: &mut Client,
    store: &PgStore,
    projection: Projection,
    batch: usize,
    mut progress: impl FnMut(u64),
) -> Result<Rebuilt, Error> {
    crate::worker::register(client, projection).await?;
    let held = client.query_one("SELECT pg_try_advisory_lock($1)", &[&projection.rebuild_lock_key()]).await?;
    if !held.get::<_, bool>(0) {
        return Err(Error::Stale(format!("another rebuild of {} is running", projection.name())));
    }
    let result = rebuild_locked(client, store, projection, batch, &mut progress).await;
    client.execute("SELECT pg_advisory_unlock($1)", &[&projection.rebuild_lock_key()]).await?;
    result
}

async fn rebuild_locked(
    client: &mut Client,
    store: &PgStore,
    projection: Projection,
    batch: usize,
    progress: &mut impl FnMut(u64),
) -> Result<Rebuilt, Error> {
    let (live, next) = (projection.name(), format!("{}_next", projection.name()));
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {next}; CREATE TABLE {next} (LIKE {live} INCLUDING ALL); \
             GRANT {} ON {next} TO grant_ledger_service;",
            projection.privileges()
        ))
        .await?;
    let (mut at, mut applied) = (Checkpoint::START, 0u64);
    // Fill the next generation while the live one serves, reading the next page (on the store's
    // connection) while this one is written (on ours).
    let mut events = store.read_all(at, batch).await?;
    while let Some(last) = events.last() {
        at = last.checkpoint();
        let write = async {
            let tx = client.transaction().await?;
            projection.apply_to(&tx, &next, &events).await?;
            tx.commit().await?;
            Ok::<_, Error>(())
        };
        let (written, read) = tokio::join!(write, store.read_all(at, batch));
        written?;
        applied += events.len() as u64;
        progress(applied);
        events = read?;
    }
    // Swap: hold the checkpoint row, apply what committed meanwhile, rename, move the checkpoint.
    let tx = client.transaction().await?;
    // The table first, then the row, the order a worker's batch takes them in (insert, then
    // checkpoint), so the two never deadlock. A batch in flight finishes before the swap; one that
    // starts during it waits, then writes into the new table (its name is looked up again) and
    // is rolled back by its conditional checkpoint update, which finds the checkpoint moved.
    tx.batch_execute(&format!("LOCK TABLE {live} IN ACCESS EXCLUSIVE MODE")).await?;
    tx.query_one("SELECT 1 FROM projection_checkpoints WHERE projection = $1 FOR UPDATE", &[&live]).await?;
    loop {
        let events = store.read_all(at, batch).await?;
        let Some(last) = events.last() else { break };
        at = last.checkpoint();
        projection.apply_to(&tx, &next, &events).await?;
        applied += events.len() as u64;
        progress(applied);
    }
    tx.batch_execute(&format!(
        "ALTER TABLE {live} RENAME TO {live}_old; ALTER TABLE {next} RENAME TO {live}; {} DROP TABLE {live}_old;",
        projection.views_sql()
    ))
    .await?;
    tx.execute(
        "UPDATE projection_checkpoints SET tx_id = $2::text::xid8, position = $3, applied = $4, version = $5, \
         updated_at = now() WHERE projection = $1",
        &[
            &live,
            &at.tx_id.to_string(),
            &i64::try_from(at.position).unwrap_or(i64::MAX),
            &i64::try_from(applied).unwrap_or(i64::MAX),
            &projection.version(),
        ],
    )
    .await?;
    tx.commit().await?;
    Ok(Rebuilt { projection, events: applied, checkpoint: at })
}
