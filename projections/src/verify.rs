//! `verify`: the log folded in memory against what each projection holds, in one snapshot.

use ledger::RecordedEvent;
use tokio_postgres::{Client, IsolationLevel, Transaction};

use crate::{Cells, Error, Projection, grants};

/// What a verify found for one view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub view: &'static str,
    pub expected_rows: usize,
    pub actual_rows: usize,
    /// The first row where replay and table differ: (row index, replayed, stored).
    pub first_difference: Option<(usize, Option<Cells>, Option<Cells>)>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.first_difference.is_none()
    }

    fn of(view: &'static str, expected: Vec<Cells>, actual: Vec<Cells>) -> Self {
        let first_difference = (0..expected.len().max(actual.len()))
            .find(|&i| expected.get(i) != actual.get(i))
            .map(|i| (i, expected.get(i).cloned(), actual.get(i).cloned()));
        Self { view, expected_rows: expected.len(), actual_rows: actual.len(), first_difference }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.first_difference {
            None => write!(f, "{}: {} rows, equal to the replay of the log", self.view, self.actual_rows),
            Some((i, expected, actual)) => write!(
                f,
                "{}: differs from the replay at row {i} ({} replayed, {} stored)\n  replayed: {expected:?}\n  stored:   {actual:?}",
                self.view, self.expected_rows, self.actual_rows
            ),
        }
    }
}

/// Every event up to `upto` (all, when `None`) that this snapshot sees, in log order.
async fn events(tx: &Transaction<'_>, upto: Option<(String, i64)>) -> Result<Vec<RecordedEvent>, Error> {
    let columns = ledger::postgres::COLUMNS;
    let rows = match upto {
        Some((tx_id, position)) => {
            tx.query(
                &format!(
                    "SELECT {columns} FROM events WHERE (events.tx_id, events.global_position) <= ($1::text::xid8, $2) \
                     ORDER BY events.tx_id, events.global_position"
                ),
                &[&tx_id, &position],
            )
            .await?
        }
        None => {
            tx.query(&format!("SELECT {columns} FROM events ORDER BY events.tx_id, events.global_position"), &[])
                .await?
        }
    };
    Ok(rows.iter().map(ledger::postgres::decode_row).collect::<Result<_, _>>()?)
}

/// An async projection against the log up to its checkpoint, read in one snapshot.
pub async fn projection(client: &mut Client, projection: Projection) -> Result<Report, Error> {
    crate::worker::register(client, projection).await?;
    let tx = client.build_transaction().isolation_level(IsolationLevel::RepeatableRead).read_only(true).start().await?;
    let row = tx
        .query_one(
            "SELECT tx_id::text, position FROM projection_checkpoints WHERE projection = $1",
            &[&projection.name()],
        )
        .await?;
    let log = events(&tx, Some((row.get(0), row.get(1)))).await?;
    let expected = projection.replay(&log)?;
    let actual = projection.read(&tx).await?;
    tx.commit().await?;
    Ok(Report::of(projection.name(), expected, actual))
}

/// The authorizer's inline `active_task_grants` against the whole log, in one snapshot: it is
/// written in the same transaction as its events, so every committed event counts.
pub async fn active_task_grants(client: &mut Client) -> Result<Report, Error> {
    let tx = client.build_transaction().isolation_level(IsolationLevel::RepeatableRead).read_only(true).start().await?;
    let log = events(&tx, None).await?;
    let expected: Vec<Cells> = grants::replay(&log)?.values().map(grants::GrantRow::cells).collect();
    let rows = tx
        .query(
            "SELECT tenant_id, grant_id, principal_id, session_id, origin, path_prefix, created_at, expires_at, \
             actions_used, chars_used, end_reason FROM active_task_grants \
             ORDER BY active_task_grants.tenant_id COLLATE \"C\", active_task_grants.grant_id",
            &[],
        )
        .await?;
    tx.commit().await?;
    let actual = rows.iter().map(|r| grants::GrantRow::from_row(r).cells()).collect();
    Ok(Report::of("active_task_grants", expected, actual))
}

/// Every view: the async projections and the inline one.
pub async fn all(client: &mut Client) -> Result<Vec<Report>, Error> {
    let mut out = Vec::new();
    for p in Projection::ALL {
        out.push(projection(client, p).await?);
    }
    out.push(active_task_grants(client).await?);
    Ok(out)
}
