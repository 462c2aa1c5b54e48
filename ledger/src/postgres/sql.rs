//! The statements an append and a read run, built once per shape.

use serde_json::Value;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::envelope::{StreamId, TenantId};

/// The columns [`decode_row`] reads, in its order: for readers that select events themselves.
pub const COLUMNS: &str = "global_position, tx_id::text, stream_id, stream_version, event_id, event_type, \
     schema_version, tenant_id, payload, metadata, recorded_at, prev_hash, hash";

/// The global read: `$1` the checkpoint's tx id as text, `$2` its position, `$3` the limit.
pub fn read_all_sql() -> String {
    // Qualified: the select list's `tx_id::text` is an output column named `tx_id`, and a bare
    // `ORDER BY tx_id` resolves to it and sorts text ("1000" before "999"), disagreeing with the
    // numeric WHERE: a page cut there skips events, and the sort defeats the primary key.
    format!(
        "SELECT {COLUMNS} FROM events \
         WHERE (events.tx_id, events.global_position) > ($1::text::xid8, $2) \
           AND events.tx_id < pg_snapshot_xmin(pg_current_snapshot()) \
         ORDER BY events.tx_id, events.global_position LIMIT $3"
    )
}

pub(super) const INSERT_COLUMNS: usize = 11;

/// `INSERT … VALUES` for `rows` events; prepared once per row count.
pub(super) fn insert_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO events (event_id, stream_id, stream_version, event_type, schema_version, tenant_id, \
         payload, metadata, recorded_at, prev_hash, hash) VALUES ",
    );
    for r in 0..rows {
        let base = r * INSERT_COLUMNS;
        let params: Vec<String> = (1..=INSERT_COLUMNS).map(|c| format!("${}", base + c)).collect();
        sql.push_str(if r == 0 { "(" } else { ", (" });
        sql.push_str(&params.join(", "));
        sql.push(')');
    }
    sql.push_str(" RETURNING global_position, tx_id::text, pg_backend_pid(), event_id");
    sql
}

/// A query an append is made conditional on, in the same statement ([`PgStore::append_guarded`]).
#[derive(Debug)]
pub struct Guard<'a> {
    /// A query, which may modify data (`UPDATE … RETURNING`), using parameters `$1..$n`. No
    /// row: nothing is appended.
    pub sql: &'a str,
    /// A data-modifying statement run after the insert, which can read the inserted events from
    /// `appended(event_id, tx_id, global_position)`: an inline projection's row that needs the
    /// event's log position.
    pub then: Option<&'a str>,
    pub params: &'a [&'a (dyn tokio_postgres::types::ToSql + Sync)],
}

/// `guard`, then the insert of `rows` events when it returned a row, then `guard.then`.
pub(super) fn guarded_insert_sql(guard: &Guard<'_>, rows: usize) -> String {
    pub(super) const CASTS: [&str; INSERT_COLUMNS] =
        ["uuid", "text", "bigint", "text", "integer", "text", "jsonb", "jsonb", "timestamptz", "bytea", "bytea"];
    let first = guard.params.len();
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let cols: Vec<String> = CASTS
                .iter()
                .enumerate()
                .map(|(c, t)| format!("${}::{t}", first + r * INSERT_COLUMNS + c + 1))
                .collect();
            format!("({})", cols.join(", "))
        })
        .collect();
    let then = guard.then.map(|t| format!(", then_ AS ({t})")).unwrap_or_default();
    format!(
        "WITH guard AS ({}), appended AS (INSERT INTO events (event_id, stream_id, stream_version, event_type, \
         schema_version, tenant_id, payload, metadata, recorded_at, prev_hash, hash) \
         SELECT * FROM (VALUES {}) AS v WHERE EXISTS (SELECT 1 FROM guard) \
         RETURNING event_id, tx_id, global_position){then} \
         SELECT global_position, tx_id::text, pg_backend_pid(), event_id FROM appended",
        guard.sql,
        values.join(", ")
    )
}

/// One event's INSERT parameters, owned so the statement can borrow them.
pub(super) struct InsertRow {
    pub(super) event_id: Uuid,
    pub(super) stream_id: String,
    pub(super) stream_version: i64,
    pub(super) event_type: String,
    pub(super) schema_version: i32,
    pub(super) tenant_id: String,
    pub(super) payload: Value,
    pub(super) metadata: Value,
    pub(super) recorded_at: OffsetDateTime,
    pub(super) prev_hash: Vec<u8>,
    pub(super) hash: Vec<u8>,
}

#[derive(Default)]
pub(super) struct InsertColumns(Vec<InsertRow>);

impl InsertColumns {
    #[allow(clippy::too_many_arguments)] // one row's worth of columns
    pub(super) fn push(
        &mut self,
        tenant: &TenantId,
        stream: &StreamId,
        version: u64,
        e: &crate::envelope::NewEvent,
        recorded_at: OffsetDateTime,
        prev: [u8; 32],
        hash: [u8; 32],
    ) {
        self.0.push(InsertRow {
            event_id: e.event_id,
            stream_id: stream.as_str().to_owned(),
            stream_version: i64::try_from(version).unwrap_or(i64::MAX),
            event_type: e.event_type.clone(),
            schema_version: i32::try_from(e.schema_version).unwrap_or(i32::MAX),
            tenant_id: tenant.as_str().to_owned(),
            payload: e.payload.clone(),
            metadata: serde_json::to_value(&e.metadata).expect("metadata always serialises"),
            recorded_at,
            prev_hash: prev.to_vec(),
            hash: hash.to_vec(),
        });
    }

    pub(super) fn params(&self) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            Vec::with_capacity(self.0.len() * INSERT_COLUMNS);
        for r in &self.0 {
            params.extend([
                &r.event_id as &(dyn tokio_postgres::types::ToSql + Sync),
                &r.stream_id,
                &r.stream_version,
                &r.event_type,
                &r.schema_version,
                &r.tenant_id,
                &r.payload,
                &r.metadata,
                &r.recorded_at,
                &r.prev_hash,
                &r.hash,
            ]);
        }
        params
    }
}
